/* The serving lookup table: striped open-addressing hash tables under reader-writer locks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

#define STRIPE_MIN_CAP 16u

/* One stripe: slots [0, cap) of keys, versions, used flags and cap × dim values. Guarded by
 * lock; written only by the table's one writer. */
struct stripe {
    pthread_rwlock_t lock;
    uint32_t cap; /* power of two, or 0 before the first put */
    uint32_t n;
    uint64_t *keys;
    uint32_t *versions;
    uint8_t *used;
    float *vals;
};

struct spw_serve_table {
    uint32_t dim;
    uint64_t max_rows;
    _Atomic uint64_t rows;
    struct stripe stripes[SPW_SERVE_STRIPES];
};

static inline uint64_t key_hash(uint64_t key)
{
    return spw_hash_mix64(key ^ 0x9e3779b97f4a7c15ull);
}

static inline struct stripe *stripe_of(spw_serve_table_t *t, uint64_t h)
{
    return &t->stripes[h >> 56];
}

spw_serve_table_t *spw_serve_table_new(uint32_t dim, uint64_t max_rows, char *errstr,
                                       size_t errstr_size)
{
    if (dim < 1 || dim > SPW_SERVE_MAX_DIM) {
        snprintf(errstr, errstr_size, "row dim %u outside 1..%u", dim, SPW_SERVE_MAX_DIM);
        return NULL;
    }
    spw_serve_table_t *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    t->dim = dim;
    t->max_rows = max_rows;
    atomic_init(&t->rows, 0);
    for (uint32_t i = 0; i < SPW_SERVE_STRIPES; i++)
        pthread_rwlock_init(&t->stripes[i].lock, NULL);
    return t;
}

static void stripe_free(struct stripe *s)
{
    free(s->keys);
    free(s->versions);
    free(s->used);
    free(s->vals);
}

void spw_serve_table_destroy(spw_serve_table_t *table)
{
    if (!table)
        return;
    for (uint32_t i = 0; i < SPW_SERVE_STRIPES; i++) {
        stripe_free(&table->stripes[i]);
        pthread_rwlock_destroy(&table->stripes[i].lock);
    }
    free(table);
}

uint32_t spw_serve_table_dim(const spw_serve_table_t *table)
{
    return table->dim;
}

uint64_t spw_serve_table_rows(const spw_serve_table_t *table)
{
    return atomic_load_explicit(&table->rows, memory_order_relaxed);
}

/* Slot of key in s, or -1. Caller holds s->lock (either mode). */
static long find_locked(const struct stripe *s, uint64_t key, uint64_t h)
{
    if (s->cap == 0)
        return -1;
    uint32_t mask = s->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        if (!s->used[i])
            return -1;
        if (s->keys[i] == key)
            return (long)i;
    }
}

/* Rebuilds s with cap slots (a power of two above s->n). Caller holds the write lock. */
static spw_err_t rehash_locked(struct stripe *s, uint32_t cap, uint32_t dim)
{
    struct stripe ns = {.cap = cap, .n = s->n};
    ns.keys = malloc((size_t)cap * sizeof(*ns.keys));
    ns.versions = malloc((size_t)cap * sizeof(*ns.versions));
    ns.used = calloc(cap, 1);
    ns.vals = malloc((size_t)cap * dim * sizeof(float));
    if (!ns.keys || !ns.versions || !ns.used || !ns.vals) {
        stripe_free(&ns);
        return SPW_ERR_NOMEM;
    }
    uint32_t mask = cap - 1;
    for (uint32_t j = 0; j < s->cap; j++) {
        if (!s->used[j])
            continue;
        uint32_t i = (uint32_t)key_hash(s->keys[j]) & mask;
        while (ns.used[i])
            i = (i + 1) & mask;
        ns.used[i] = 1;
        ns.keys[i] = s->keys[j];
        ns.versions[i] = s->versions[j];
        memcpy(ns.vals + (size_t)i * dim, s->vals + (size_t)j * dim, dim * sizeof(float));
    }
    stripe_free(s);
    s->cap = ns.cap;
    s->keys = ns.keys;
    s->versions = ns.versions;
    s->used = ns.used;
    s->vals = ns.vals;
    return SPW_OK;
}

spw_err_t spw_serve_table_put(spw_serve_table_t *table, uint64_t key, const float *weights,
                              uint32_t version)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    const uint32_t dim = table->dim;
    spw_err_t rc = SPW_OK;
    pthread_rwlock_wrlock(&s->lock);
    long at = find_locked(s, key, h);
    if (at < 0) {
        if (atomic_load_explicit(&table->rows, memory_order_relaxed) >= table->max_rows) {
            rc = SPW_ERR_NOMEM;
            goto out_unlock;
        }
        /* Keep the load factor at most 3/4. */
        if ((uint64_t)(s->n + 1) * 4 > (uint64_t)s->cap * 3) {
            uint64_t cap = s->cap ? (uint64_t)s->cap * 2 : STRIPE_MIN_CAP;
            if (cap > (1ull << 31) || (rc = rehash_locked(s, (uint32_t)cap, dim)) != SPW_OK) {
                rc = SPW_ERR_NOMEM;
                goto out_unlock;
            }
        }
        uint32_t mask = s->cap - 1;
        uint32_t i = (uint32_t)h & mask;
        while (s->used[i])
            i = (i + 1) & mask;
        s->used[i] = 1;
        s->keys[i] = key;
        s->n++;
        atomic_fetch_add_explicit(&table->rows, 1, memory_order_relaxed);
        at = (long)i;
    }
    s->versions[at] = version;
    memcpy(s->vals + (size_t)at * dim, weights, dim * sizeof(float));
out_unlock:
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

spw_err_t spw_serve_table_delete(spw_serve_table_t *table, uint64_t key)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    const uint32_t dim = table->dim;
    pthread_rwlock_wrlock(&s->lock);
    long at = find_locked(s, key, h);
    if (at < 0) {
        pthread_rwlock_unlock(&s->lock);
        return SPW_ERR_NOT_FOUND;
    }
    /* Backward-shift deletion: move later members of the probe run into the hole so that no
     * lookup stops early (no tombstones to clean up later). */
    uint32_t mask = s->cap - 1, hole = (uint32_t)at;
    for (uint32_t j = (hole + 1) & mask; s->used[j]; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)key_hash(s->keys[j]) & mask;
        /* j's entry may fill the hole when its home is not cyclically within (hole, j]. */
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (!movable)
            continue;
        s->keys[hole] = s->keys[j];
        s->versions[hole] = s->versions[j];
        memcpy(s->vals + (size_t)hole * dim, s->vals + (size_t)j * dim, dim * sizeof(float));
        hole = j;
    }
    s->used[hole] = 0;
    s->n--;
    atomic_fetch_sub_explicit(&table->rows, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&s->lock);
    return SPW_OK;
}

spw_err_t spw_serve_table_get(spw_serve_table_t *table, uint64_t key, float *weights,
                              uint32_t *version)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    pthread_rwlock_rdlock(&s->lock);
    long at = find_locked(s, key, h);
    if (at >= 0) {
        memcpy(weights, s->vals + (size_t)at * table->dim, table->dim * sizeof(float));
        if (version)
            *version = s->versions[at];
    }
    pthread_rwlock_unlock(&s->lock);
    return at >= 0 ? SPW_OK : SPW_ERR_NOT_FOUND;
}

/* Keys of a batch are looked up GET_CHUNK at a time: hashed together, ordered by stripe (a
 * counting sort), and each stripe's share read under one acquisition of its lock, with the
 * slots of its keys prefetched first so that their cache misses overlap. */
#define GET_CHUNK 1024u
#define GET_SMALL 64u /* fewer keys: get_small */

/* Rows of n keys of stripe s (their hashes h, positions pos into keys/rows). Caller holds the
 * read lock. */
static size_t get_stripe_locked(const struct stripe *s, uint32_t dim, const uint64_t *keys,
                                const uint64_t *h, const uint16_t *pos, size_t n, float *rows)
{
    size_t found = 0;
    uint32_t mask = s->cap ? s->cap - 1 : 0;
    if (s->cap)
        for (size_t j = 0; j < n; j++) {
            uint32_t i = (uint32_t)h[pos[j]] & mask;
            __builtin_prefetch(&s->used[i]);
            __builtin_prefetch(&s->keys[i]);
            __builtin_prefetch(s->vals + (size_t)i * dim);
        }
    for (size_t j = 0; j < n; j++) {
        size_t k = pos[j];
        float *row = rows + k * dim;
        long at = find_locked(s, keys[k], h[k]);
        if (at >= 0) {
            memcpy(row, s->vals + (size_t)at * dim, dim * sizeof(float));
            found++;
        } else {
            memset(row, 0, dim * sizeof(float));
        }
    }
    return found;
}

/* Fewer than GET_SMALL keys, mostly of distinct stripes (a single example's): the read lock of
 * every stripe involved is taken once, in stripe order, then every key's slot is prefetched
 * before the first probe, so that their cache misses overlap instead of following one another.
 * Holding several read locks cannot deadlock: the writer (put) holds one stripe's lock at a
 * time and waits for no other. */
static size_t get_small(spw_serve_table_t *table, const uint64_t *keys, size_t n, float *rows)
{
    const uint32_t dim = table->dim;
    uint64_t h[GET_SMALL];
    uint64_t held[SPW_SERVE_STRIPES / 64] = {0}; /* bit st: stripe st's read lock is held */
    for (size_t k = 0; k < n; k++) {
        h[k] = key_hash(keys[k]);
        held[(h[k] >> 56) / 64] |= 1ull << ((h[k] >> 56) % 64);
    }
    for (uint32_t w = 0; w < SPW_SERVE_STRIPES / 64; w++)
        for (uint64_t b = held[w]; b; b &= b - 1)
            pthread_rwlock_rdlock(&table->stripes[w * 64 + (uint32_t)__builtin_ctzll(b)].lock);
    for (size_t k = 0; k < n; k++) {
        const struct stripe *s = stripe_of(table, h[k]);
        if (!s->cap)
            continue;
        uint32_t i = (uint32_t)h[k] & (s->cap - 1);
        __builtin_prefetch(&s->used[i]);
        __builtin_prefetch(&s->keys[i]);
        __builtin_prefetch(s->vals + (size_t)i * dim);
    }
    size_t found = 0;
    for (size_t k = 0; k < n; k++) {
        const struct stripe *s = stripe_of(table, h[k]);
        float *row = rows + k * dim;
        long at = find_locked(s, keys[k], h[k]);
        if (at >= 0) {
            memcpy(row, s->vals + (size_t)at * dim, dim * sizeof(float));
            found++;
        } else {
            memset(row, 0, dim * sizeof(float));
        }
    }
    for (uint32_t w = 0; w < SPW_SERVE_STRIPES / 64; w++)
        for (uint64_t b = held[w]; b; b &= b - 1)
            pthread_rwlock_unlock(&table->stripes[w * 64 + (uint32_t)__builtin_ctzll(b)].lock);
    return found;
}

size_t spw_serve_table_get_many(spw_serve_table_t *table, const uint64_t *keys, size_t n,
                                float *rows)
{
    const uint32_t dim = table->dim;
    size_t found = 0;
    if (n < GET_SMALL) /* the grouping's fixed cost (two 1 KiB tables) outweighs its gain */
        return get_small(table, keys, n, rows);
    uint64_t h[GET_CHUNK];
    uint16_t pos[GET_CHUNK];
    uint32_t start[SPW_SERVE_STRIPES + 1];
    for (size_t base = 0; base < n; base += GET_CHUNK) {
        size_t m = n - base < GET_CHUNK ? n - base : GET_CHUNK;
        memset(start, 0, sizeof(start));
        for (size_t k = 0; k < m; k++) {
            h[k] = key_hash(keys[base + k]);
            start[(h[k] >> 56) + 1]++;
        }
        for (uint32_t st = 0; st < SPW_SERVE_STRIPES; st++)
            start[st + 1] += start[st];
        uint32_t fill[SPW_SERVE_STRIPES];
        memcpy(fill, start, sizeof(fill));
        for (size_t k = 0; k < m; k++)
            pos[fill[h[k] >> 56]++] = (uint16_t)k;
        for (uint32_t st = 0; st < SPW_SERVE_STRIPES; st++) {
            size_t cnt = start[st + 1] - start[st];
            if (cnt == 0)
                continue;
            struct stripe *s = &table->stripes[st];
            pthread_rwlock_rdlock(&s->lock);
            found +=
                get_stripe_locked(s, dim, keys + base, h, pos + start[st], cnt, rows + base * dim);
            pthread_rwlock_unlock(&s->lock);
        }
    }
    return found;
}
