/* Feature hashing, field naming and key placement. */
#include "sparrow/hash.h"

#include <math.h>
/* Inline xxHash: the shared library call costs ~30% of a short-key hash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t spw_hash_key(uint32_t field, const void *value, size_t len)
{
    return XXH64(value, len, field);
}

uint32_t spw_hash_field_name(const char *name, size_t len)
{
    if (len > 0 && len <= 10) {
        uint64_t v = 0;
        size_t i = 0;
        while (i < len && name[i] >= '0' && name[i] <= '9')
            v = v * 10 + (uint64_t)(name[i++] - '0');
        if (i == len && v <= SPW_FIELD_ID_MAX && (len == 1 || name[0] != '0'))
            return (uint32_t)v;
    }
    return (uint32_t)(XXH64(name, len, 0) & SPW_FIELD_ID_MAX);
}

int64_t spw_hash_criteo_bucket(int64_t x)
{
    if (x <= 2)
        return x;
    double l = log((double)x);
    return (int64_t)floor(l * l);
}

uint32_t spw_hash_jump(uint64_t key, uint32_t buckets)
{
    int64_t b = -1, j = 0;
    while (j < (int64_t)buckets) {
        b = j;
        key = key * 2862933555777941757ull + 1;
        j = (int64_t)((double)(b + 1) * ((double)(1LL << 31) / (double)((key >> 33) + 1)));
    }
    return (uint32_t)b;
}

uint32_t spw_hash_shard(uint64_t key, uint32_t n_shards)
{
    if (spw_key_is_dense(key))
        return 0;
    return spw_hash_jump(spw_hash_mix64(key), n_shards);
}
