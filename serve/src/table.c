/* The serving lookup table: striped open-addressing hash tables under reader-writer locks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

#define STRIPE_MIN_CAP 16u
#define LINE           64u
#define PREFETCH_LINES 4u /* of one slot, at most */

/*
 * A slot holds everything a lookup touches, so that one cache line (one prefetch, one TLB entry)
 * brings a row of dim <= 12 where separate key, version, used and value arrays cost four misses:
 *
 * | Offset | Size  | Field                                  |
 * |--------|-------|----------------------------------------|
 * | 0      | 8     | key                                    |
 * | 8      | 4     | version                                |
 * | 12     | 4     | used (1: the slot holds a row, 0: free) |
 * | 16     | 4·dim | weights                                |
 *
 * The stride is the slot's size rounded up to 16, 32 or 64 bytes (a power of two, so that in an
 * array aligned to 64 bytes no slot of at most 64 bytes straddles two lines), or to a multiple of
 * 64 for wider rows.
 */
struct slot {
    uint64_t key;
    uint32_t version;
    uint32_t used;
    float vals[];
};

/* One stripe: cap slots of the table's stride. Guarded by lock; written only by the table's one
 * writer. */
struct stripe {
    pthread_rwlock_t lock;
    uint32_t cap; /* power of two, or 0 before the first put */
    uint32_t n;
    unsigned char *slots; /* cap × stride bytes, 64-byte aligned */
};

struct spw_serve_table {
    uint32_t dim;
    uint32_t stride; /* bytes per slot */
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

static inline struct slot *slot_at(const struct stripe *s, uint32_t stride, uint32_t i)
{
    return (struct slot *)(void *)(s->slots + (size_t)i * stride);
}

/* Bytes per slot for rows of dim floats (see the layout above). */
static uint32_t slot_stride(uint32_t dim)
{
    uint32_t size = (uint32_t)sizeof(struct slot) + dim * (uint32_t)sizeof(float);
    if (size > LINE)
        return (size + LINE - 1) / LINE * LINE;
    uint32_t stride = 16;
    while (stride < size)
        stride *= 2;
    return stride;
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
    t->stride = slot_stride(dim);
    t->max_rows = max_rows;
    atomic_init(&t->rows, 0);
    for (uint32_t i = 0; i < SPW_SERVE_STRIPES; i++)
        pthread_rwlock_init(&t->stripes[i].lock, NULL);
    return t;
}

void spw_serve_table_destroy(spw_serve_table_t *table)
{
    if (!table)
        return;
    for (uint32_t i = 0; i < SPW_SERVE_STRIPES; i++) {
        free(table->stripes[i].slots);
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

/* Slot of key in s, or NULL. Caller holds s->lock (either mode). */
static struct slot *find_locked(const struct stripe *s, uint32_t stride, uint64_t key, uint64_t h)
{
    if (s->cap == 0)
        return NULL;
    uint32_t mask = s->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        struct slot *sl = slot_at(s, stride, i);
        if (!sl->used)
            return NULL;
        if (sl->key == key)
            return sl;
    }
}

/* Starts loading the lines of the slot where key's probe begins (h its hash). */
static inline void prefetch_home(const struct stripe *s, uint32_t stride, uint64_t h)
{
    if (!s->cap)
        return;
    const unsigned char *p = s->slots + (size_t)((uint32_t)h & (s->cap - 1)) * stride;
    /* a wide row's later lines follow in order, which the hardware prefetcher handles */
    uint32_t lines = stride / LINE < PREFETCH_LINES ? stride / LINE : PREFETCH_LINES;
    __builtin_prefetch(p);
    for (uint32_t l = 1; l < lines; l++)
        __builtin_prefetch(p + (size_t)l * LINE);
}

/* A zeroed (every slot free) array of cap slots, 64-byte aligned; NULL when out of memory. */
static unsigned char *slots_new(uint32_t cap, uint32_t stride)
{
    size_t bytes = (size_t)cap * stride; /* a multiple of 64: cap >= 16, stride >= 16 */
    unsigned char *p = aligned_alloc(LINE, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

/* Rebuilds s with cap slots (a power of two above s->n). Caller holds the write lock. */
static spw_err_t rehash_locked(struct stripe *s, uint32_t cap, uint32_t stride)
{
    struct stripe ns = {.cap = cap, .n = s->n, .slots = slots_new(cap, stride)};
    if (!ns.slots)
        return SPW_ERR_NOMEM;
    uint32_t mask = cap - 1;
    for (uint32_t j = 0; j < s->cap; j++) {
        const struct slot *from = slot_at(s, stride, j);
        if (!from->used)
            continue;
        uint32_t i = (uint32_t)key_hash(from->key) & mask;
        while (slot_at(&ns, stride, i)->used)
            i = (i + 1) & mask;
        memcpy(slot_at(&ns, stride, i), from, stride);
    }
    free(s->slots);
    s->cap = ns.cap;
    s->slots = ns.slots;
    return SPW_OK;
}

spw_err_t spw_serve_table_put(spw_serve_table_t *table, uint64_t key, const float *weights,
                              uint32_t version)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    const uint32_t stride = table->stride;
    spw_err_t rc = SPW_OK;
    pthread_rwlock_wrlock(&s->lock);
    struct slot *at = find_locked(s, stride, key, h);
    if (!at) {
        if (atomic_load_explicit(&table->rows, memory_order_relaxed) >= table->max_rows) {
            rc = SPW_ERR_NOMEM;
            goto out_unlock;
        }
        /* Keep the load factor at most 3/4. */
        if ((uint64_t)(s->n + 1) * 4 > (uint64_t)s->cap * 3) {
            uint64_t cap = s->cap ? (uint64_t)s->cap * 2 : STRIPE_MIN_CAP;
            if (cap > (1ull << 31) || (rc = rehash_locked(s, (uint32_t)cap, stride)) != SPW_OK) {
                rc = SPW_ERR_NOMEM;
                goto out_unlock;
            }
        }
        uint32_t mask = s->cap - 1;
        uint32_t i = (uint32_t)h & mask;
        while (slot_at(s, stride, i)->used)
            i = (i + 1) & mask;
        at = slot_at(s, stride, i);
        at->used = 1;
        at->key = key;
        s->n++;
        atomic_fetch_add_explicit(&table->rows, 1, memory_order_relaxed);
    }
    at->version = version;
    memcpy(at->vals, weights, table->dim * sizeof(float));
out_unlock:
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

spw_err_t spw_serve_table_delete(spw_serve_table_t *table, uint64_t key)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    const uint32_t stride = table->stride;
    pthread_rwlock_wrlock(&s->lock);
    struct slot *at = find_locked(s, stride, key, h);
    if (!at) {
        pthread_rwlock_unlock(&s->lock);
        return SPW_ERR_NOT_FOUND;
    }
    /* Backward-shift deletion: move later members of the probe run into the hole so that no
     * lookup stops early (no tombstones to clean up later). */
    uint32_t mask = s->cap - 1, hole = (uint32_t)(((unsigned char *)at - s->slots) / stride);
    for (uint32_t j = (hole + 1) & mask; slot_at(s, stride, j)->used; j = (j + 1) & mask) {
        const struct slot *from = slot_at(s, stride, j);
        uint32_t home = (uint32_t)key_hash(from->key) & mask;
        /* j's entry may fill the hole when its home is not cyclically within (hole, j]. */
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (!movable)
            continue;
        memcpy(slot_at(s, stride, hole), from, stride);
        hole = j;
    }
    slot_at(s, stride, hole)->used = 0;
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
    const struct slot *at = find_locked(s, table->stride, key, h);
    if (at) {
        memcpy(weights, at->vals, table->dim * sizeof(float));
        if (version)
            *version = at->version;
    }
    pthread_rwlock_unlock(&s->lock);
    return at ? SPW_OK : SPW_ERR_NOT_FOUND;
}

/* Keys of a batch are looked up GET_CHUNK at a time: hashed together, ordered by stripe (a
 * counting sort), and each stripe's share read under one acquisition of its lock, with the
 * slots of its keys prefetched first so that their cache misses overlap. */
#define GET_CHUNK 1024u
#define GET_SMALL 64u /* fewer keys: get_small */

/* Copies key's row (h its hash) from s into row, or zeros when absent; true when found. Caller
 * holds s's read lock. */
static inline bool copy_row_locked(const struct stripe *s, uint32_t stride, uint32_t dim,
                                   uint64_t key, uint64_t h, float *row)
{
    const struct slot *at = find_locked(s, stride, key, h);
    if (at)
        memcpy(row, at->vals, dim * sizeof(float));
    else
        memset(row, 0, dim * sizeof(float));
    return at != NULL;
}

/* Rows of n keys of stripe s (their hashes h, positions pos into keys/rows). Caller holds the
 * read lock. */
static size_t get_stripe_locked(const struct stripe *s, uint32_t stride, uint32_t dim,
                                const uint64_t *keys, const uint64_t *h, const uint16_t *pos,
                                size_t n, float *rows)
{
    size_t found = 0;
    for (size_t j = 0; j < n; j++)
        prefetch_home(s, stride, h[pos[j]]);
    for (size_t j = 0; j < n; j++) {
        size_t k = pos[j];
        found += copy_row_locked(s, stride, dim, keys[k], h[k], rows + k * dim);
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
    const uint32_t dim = table->dim, stride = table->stride;
    uint64_t h[GET_SMALL];
    uint64_t held[SPW_SERVE_STRIPES / 64] = {0}; /* bit st: stripe st's read lock is held */
    for (size_t k = 0; k < n; k++) {
        h[k] = key_hash(keys[k]);
        held[(h[k] >> 56) / 64] |= 1ull << ((h[k] >> 56) % 64);
    }
    for (uint32_t w = 0; w < SPW_SERVE_STRIPES / 64; w++)
        for (uint64_t b = held[w]; b; b &= b - 1)
            pthread_rwlock_rdlock(&table->stripes[w * 64 + (uint32_t)__builtin_ctzll(b)].lock);
    for (size_t k = 0; k < n; k++)
        prefetch_home(stripe_of(table, h[k]), stride, h[k]);
    size_t found = 0;
    for (size_t k = 0; k < n; k++)
        found +=
            copy_row_locked(stripe_of(table, h[k]), stride, dim, keys[k], h[k], rows + k * dim);
    for (uint32_t w = 0; w < SPW_SERVE_STRIPES / 64; w++)
        for (uint64_t b = held[w]; b; b &= b - 1)
            pthread_rwlock_unlock(&table->stripes[w * 64 + (uint32_t)__builtin_ctzll(b)].lock);
    return found;
}

size_t spw_serve_table_get_many(spw_serve_table_t *table, const uint64_t *keys, size_t n,
                                float *rows)
{
    const uint32_t dim = table->dim, stride = table->stride;
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
            found += get_stripe_locked(s, stride, dim, keys + base, h, pos + start[st], cnt,
                                       rows + base * dim);
            pthread_rwlock_unlock(&s->lock);
        }
    }
    return found;
}
