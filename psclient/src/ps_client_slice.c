/* trainer: the PS client's slicer: keys sorted by (shard, key) with a counting pass by shard and
 * an MSD radix sort, no allocation per call once the scratch has grown. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ps_client_int.h"
#include "sparrow/hash.h"

spw_err_t spw_psc__sorter_init(struct spw_psc__sorter *st, uint32_t n_shards)
{
    memset(st, 0, sizeof(*st));
    st->n_shards = n_shards;
    st->seg = calloc((size_t)n_shards + 1, sizeof(*st->seg));
    return st->seg ? SPW_OK : SPW_ERR_NOMEM;
}

void spw_psc__sorter_fini(struct spw_psc__sorter *st)
{
    free(st->a);
    free(st->b);
    free(st->seg);
    free(st->last);
    memset(st, 0, sizeof(*st));
}

static spw_err_t reserve(struct spw_psc__sorter *st, size_t n)
{
    if (n <= st->cap)
        return SPW_OK;
    size_t cap = st->cap ? st->cap : 1024;
    while (cap < n)
        cap *= 2;
    struct spw_psc__ent *a = realloc(st->a, cap * sizeof(*a));
    if (!a)
        return SPW_ERR_NOMEM;
    st->a = a;
    struct spw_psc__ent *b = realloc(st->b, cap * sizeof(*b));
    if (!b)
        return SPW_ERR_NOMEM;
    st->b = b;
    st->cap = cap;
    return SPW_OK;
}

/* Entries of equal keys keep their input order (pos ascending), so that comparing (key, pos) is
 * the same as a stable sort by key. */
static bool ent_less(const struct spw_psc__ent *x, const struct spw_psc__ent *y)
{
    return x->key < y->key || (x->key == y->key && x->pos < y->pos);
}

static void insertion_sort(struct spw_psc__ent *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct spw_psc__ent x = a[i];
        size_t j = i;
        while (j > 0 && ent_less(&x, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

#define SMALL_SORT 32

/* MSD radix sort of a[0..n) by the key's bytes byte..0 (a stable counting pass per level, tmp as
 * scratch of n entries), small buckets finished by insertion sort. Hashed keys spread evenly over
 * the first byte, so a batch is one counting pass plus tiny insertion sorts; keys that share
 * leading bytes skip those levels after one count. Depth is at most 8. */
static void msd_sort(struct spw_psc__ent *a, struct spw_psc__ent *tmp, size_t n, int byte)
{
    while (n > SMALL_SORT && byte >= 0) {
        unsigned shift = (unsigned)byte * 8;
        size_t count[256] = {0};
        for (size_t i = 0; i < n; i++)
            count[(a[i].key >> shift) & 0xff]++;
        if (count[(a[0].key >> shift) & 0xff] == n) {
            byte--; /* every key shares this byte */
            continue;
        }
        size_t start[256], sum = 0;
        for (unsigned d = 0; d < 256; d++) {
            start[d] = sum;
            sum += count[d];
        }
        size_t next[256];
        memcpy(next, start, sizeof(next));
        for (size_t i = 0; i < n; i++)
            tmp[next[(a[i].key >> shift) & 0xff]++] = a[i];
        memcpy(a, tmp, n * sizeof(*a));
        for (unsigned d = 0; d < 256; d++)
            if (count[d] > 1)
                msd_sort(a + start[d], tmp + start[d], count[d], byte - 1);
        return;
    }
    insertion_sort(a, n);
}

/* Whether st holds the sort of keys[0..n). */
static bool holds(const struct spw_psc__sorter *st, const uint64_t *keys, size_t n)
{
    return st->last_valid && n == st->last_n &&
           (n == 0 || !memcmp(keys, st->last, n * sizeof(*keys)));
}

/* Whether keys[0..n) are the last slice's keys (its result still in st); else remembers them
 * (not when their copy cannot grow: the next call sorts again). */
static bool same_as_last(struct spw_psc__sorter *st, const uint64_t *keys, size_t n)
{
    if (holds(st, keys, n))
        return true;
    st->last_valid = false;
    if (n > st->last_cap) {
        uint64_t *k = realloc(st->last, n * sizeof(*k));
        if (!k)
            return false;
        st->last = k;
        st->last_cap = n;
    }
    if (n)
        memcpy(st->last, keys, n * sizeof(*keys));
    st->last_n = n;
    return false;
}

/* One stable counting pass by shard (when there are several), then an MSD radix sort of each
 * shard's keys, so that entries end up ordered by (shard, key, pos). */
spw_err_t spw_psc__slice(struct spw_psc__sorter *st, const uint64_t *keys, size_t n)
{
    if (same_as_last(st, keys, n))
        return SPW_OK;
    if (reserve(st, n ? n : 1) != SPW_OK)
        return SPW_ERR_NOMEM;
    uint32_t shards = st->n_shards;
    uint32_t *seg = st->seg;
    memset(seg, 0, ((size_t)shards + 1) * sizeof(*seg));
    if (shards <= 1) {
        for (size_t i = 0; i < n; i++)
            st->a[i] = (struct spw_psc__ent){keys[i], (uint32_t)i, 0};
        seg[shards] = (uint32_t)n;
    } else {
        struct spw_psc__ent *src = st->b;
        for (size_t i = 0; i < n; i++) {
            uint32_t s = spw_hash_shard(keys[i], shards);
            src[i] = (struct spw_psc__ent){keys[i], (uint32_t)i, s};
            seg[s + 1]++;
        }
        for (uint32_t s = 0; s < shards; s++)
            seg[s + 1] += seg[s];
        /* seg[s] is the next free slot of shard s while scattering; restored after. */
        for (size_t i = 0; i < n; i++)
            st->a[seg[src[i].shard]++] = src[i];
        for (uint32_t s = shards; s > 0; s--)
            seg[s] = seg[s - 1];
        seg[0] = 0;
    }
    for (uint32_t s = 0; s < (shards ? shards : 1); s++)
        if (seg[s + 1] - seg[s] > 1)
            msd_sort(st->a + seg[s], st->b + seg[s], seg[s + 1] - seg[s], 7);
    st->last_valid = st->last_n == n; /* not when the copy could not grow */
    return SPW_OK;
}

const struct spw_psc__sorter *spw_psc__slice2(struct spw_psc__sorter pair[2], uint32_t *next,
                                              const uint64_t *keys, size_t n)
{
    uint32_t i = holds(&pair[0], keys, n) ? 0 : holds(&pair[1], keys, n) ? 1 : *next & 1;
    *next = i ^ 1;
    return spw_psc__slice(&pair[i], keys, n) == SPW_OK ? &pair[i] : NULL;
}
