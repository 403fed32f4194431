/* Blocked Bloom filter of the keys written to the store's RocksDB tier, so that a key never
 * written skips the MultiGet on its first push (docs/ARCHITECTURE.md §3). */
#include "ps_int.h"
#include "sparrow/hash.h"

#define BLOCK_WORDS  8u /* 512 bits: one cache line per key */
#define PROBES       6u /* bits set per key, 9 bits of hash each */
#define BITS_PER_KEY 8u
#define SALT         0xd6e8feb86659fd93ull

spw_err_t spw_ps__keyfilter_init(struct spw_ps__keyfilter *f, uint64_t capacity, bool valid)
{
    uint64_t blocks = 1;
    while (blocks * BLOCK_WORDS * 64 < capacity * BITS_PER_KEY && blocks < (1ull << 32))
        blocks <<= 1;
    /* fresh zero pages: only blocks a key was added to become resident */
    f->words = spw_ps__big_alloc(blocks * BLOCK_WORDS * sizeof(uint64_t));
    if (!f->words)
        return SPW_ERR_NOMEM;
    f->block_mask = blocks - 1;
    f->capacity = capacity;
    f->added = 0;
    f->valid = valid;
    return SPW_OK;
}

void spw_ps__keyfilter_fini(struct spw_ps__keyfilter *f)
{
    spw_ps__big_free(f->words, (f->block_mask + 1) * BLOCK_WORDS * sizeof(uint64_t));
    f->words = NULL;
    f->valid = false;
}

static inline uint64_t *block_of(const struct spw_ps__keyfilter *f, uint64_t h)
{
    return f->words + ((h >> 32) & f->block_mask) * BLOCK_WORDS;
}

void spw_ps__keyfilter_add(struct spw_ps__keyfilter *f, uint64_t key)
{
    if (!f->valid)
        return;
    uint64_t h = spw_hash_mix64(key ^ SALT), bits = spw_hash_mix64(h);
    uint64_t *b = block_of(f, h);
    uint64_t fresh = 0;
    for (unsigned i = 0; i < PROBES; i++, bits >>= 9) {
        uint64_t w = (bits >> 6) & (BLOCK_WORDS - 1), m = 1ull << (bits & 63);
        fresh |= ~b[w] & m;
        b[w] |= m;
    }
    /* Only keys that set a new bit count: a row written again (every checkpoint rewrites the
     * dirty rows) does not wear the filter out. Past its capacity the false-positive rate would
     * grow without bound, so the filter then answers "maybe" for every key. */
    if (fresh && ++f->added > f->capacity)
        f->valid = false;
}

bool spw_ps__keyfilter_may_contain(const struct spw_ps__keyfilter *f, uint64_t key)
{
    if (!f->valid)
        return true;
    if (f->added == 0)
        return false; /* nothing written yet (and no page of the filter touched) */
    uint64_t h = spw_hash_mix64(key ^ SALT), bits = spw_hash_mix64(h);
    const uint64_t *b = block_of(f, h);
    for (unsigned i = 0; i < PROBES; i++, bits >>= 9) {
        uint64_t w = (bits >> 6) & (BLOCK_WORDS - 1), m = 1ull << (bits & 63);
        if (!(b[w] & m))
            return false;
    }
    return true;
}

void spw_ps__keyfilter_prefetch(const struct spw_ps__keyfilter *f, uint64_t key)
{
    if (f->valid && f->added > 0)
        __builtin_prefetch(block_of(f, spw_hash_mix64(key ^ SALT)));
}
