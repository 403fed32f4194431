/* The serving lookup table: striped open-addressing hash tables read under sequence locks. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

#define STRIPE_MIN_CAP 16u
#define LINE           64u
#define PREFETCH_LINES 4u  /* of one slot, at most */
#define GET_CHUNK      64u /* keys hashed and prefetched together */

/*
 * A slot holds everything a lookup touches, so that one cache line (one prefetch, one TLB entry)
 * brings a row of dim <= 12 where separate key, version, used and value arrays cost four misses:
 *
 * | Offset | Size  | Field                                   |
 * |--------|-------|-----------------------------------------|
 * | 0      | 8     | key                                     |
 * | 8      | 4     | version                                 |
 * | 12     | 4     | used (1: the slot holds a row, 0: free) |
 * | 16     | 4·dim | weights (float bits)                    |
 *
 * The stride is the slot's size rounded up to 16, 32 or 64 bytes (a power of two, so that in an
 * array aligned to 64 bytes no slot of at most 64 bytes straddles two lines), or to a multiple of
 * 64 for wider rows. Readers race with the writer on every field (see struct stripe), so each
 * is an atomic accessed relaxed; on x86-64 these are plain loads and stores.
 */
struct slot {
    _Atomic uint64_t key;
    _Atomic uint32_t version;
    _Atomic uint32_t used;
    _Atomic uint32_t vals[];
};

/* A stripe's slots as a reader sees them, decoded from one word (struct stripe's slots: the
 * array's address, 64-byte aligned, with log2 of cap in its low 6 bits), so that a reader loads
 * an array and its bounds together, never a new array with an old cap. */
struct slots {
    unsigned char *data; /* cap × stride bytes; NULL before the first put */
    uint32_t cap;        /* power of two */
};

static inline struct slots slots_of(uintptr_t word)
{
    return (struct slots){.data = (unsigned char *)(word & ~(uintptr_t)(LINE - 1)),
                          .cap = word ? 1u << (word & (LINE - 1)) : 0};
}

static inline uintptr_t slots_word(struct slots a)
{
    return (uintptr_t)a.data | (uintptr_t)__builtin_ctz(a.cap);
}

/*
 * One stripe, on its own cache line. Writes come from the table's one writer only; readers write
 * nothing here, so that concurrent readers do not pass lines between cores. seq is a sequence
 * lock: odd while the writer changes the stripe, bumped at each change; a reader copies a row
 * between two reads of an equal, even seq, else it copies again. A rehash builds the new array
 * beside the old one, swaps the pointer within one odd window, and frees the old array only
 * after every reader that may still hold it has left (the table's reader generations).
 */
struct stripe {
    _Alignas(LINE) _Atomic uint32_t seq;
    uint32_t n;              /* rows held (writer only) */
    _Atomic uintptr_t slots; /* struct slots's word; 0 before the first put */
};

/*
 * Reader generations, a minimal grace period for the arrays a rehash replaces: a reader counts
 * itself in readers[gen & 1] for the length of one get or get_many (two atomic operations per
 * call, not per key); the writer, after swapping an array, advances gen and waits until the
 * previous generation's count falls to zero before freeing the old array.
 */
struct spw_serve_table {
    uint32_t dim;
    uint32_t stride; /* bytes per slot */
    uint64_t max_rows;
    _Atomic uint64_t rows;
    _Alignas(LINE) _Atomic uint64_t gen;
    _Alignas(LINE) _Atomic uint64_t readers[2];
    struct stripe stripes[SPW_SERVE_STRIPES];
    struct chunk *chunks; /* the huge-page chunks holding small slot arrays (writer only) */
};

static inline uint64_t key_hash(uint64_t key)
{
    return spw_hash_mix64(key ^ 0x9e3779b97f4a7c15ull);
}

static inline struct stripe *stripe_of(spw_serve_table_t *t, uint64_t h)
{
    return &t->stripes[h >> 56];
}

static inline struct slot *slot_at(const struct slots *a, uint32_t stride, uint32_t i)
{
    return (struct slot *)(void *)(a->data + (size_t)i * stride);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Bytes per slot for rows of dim floats (see the layout above). */
static uint32_t slot_stride(uint32_t dim)
{
    uint32_t size = (uint32_t)sizeof(struct slot) + dim * (uint32_t)sizeof(uint32_t);
    if (size > LINE)
        return (size + LINE - 1) / LINE * LINE;
    uint32_t stride = 16;
    while (stride < size)
        stride *= 2;
    return stride;
}

/*
 * Slot arrays live in 2 MiB chunks advised as transparent huge pages (MADV_HUGEPAGE), so that a
 * lookup's slot costs a TLB entry per 2 MiB rather than per 4 KiB: a single example's 39 keys
 * land on 39 distinct pages of a large table, each a page walk with 4 KiB pages. Arrays of at
 * most half a chunk share chunks of their own size (stripes grow together, so the arrays of one
 * size are freed together and their chunks unmapped); larger ones are mapped whole, rounded up
 * to a chunk. Writer only (and destroy).
 */
#define CHUNK (2u << 20)

struct chunk {
    struct chunk *next;
    unsigned char *base; /* CHUNK bytes, CHUNK-aligned */
    size_t block;        /* bytes per array */
    uint32_t n_blocks, used;
    uint32_t fresh;   /* arrays from here on were never handed out (still zero) */
    void *free_block; /* freed arrays, linked through their first word */
};

/* bytes (a multiple of CHUNK) of zeroed memory aligned to CHUNK, advised as huge pages; NULL when
 * out of memory. */
static unsigned char *map_huge(size_t bytes)
{
    unsigned char *p =
        mmap(NULL, bytes + CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    size_t head = (CHUNK - (uintptr_t)p % CHUNK) % CHUNK;
    if (head)
        munmap(p, head);
    if (CHUNK - head)
        munmap(p + head + bytes, CHUNK - head);
    p += head;
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: without THP the pages stay small */
    return p;
}

static size_t round_chunk(size_t bytes)
{
    return (bytes + CHUNK - 1) / CHUNK * CHUNK;
}

/* A zeroed array of bytes (a multiple of 256), 64-byte aligned; NULL when out of memory. */
static unsigned char *arrays_alloc(spw_serve_table_t *t, size_t bytes)
{
    if (bytes > CHUNK / 2)
        return map_huge(round_chunk(bytes));
    struct chunk *c = t->chunks;
    while (c && !(c->block == bytes && (c->free_block || c->fresh < c->n_blocks)))
        c = c->next;
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return NULL;
        if (!(c->base = map_huge(CHUNK))) {
            free(c);
            return NULL;
        }
        c->block = bytes;
        c->n_blocks = (uint32_t)(CHUNK / bytes);
        c->next = t->chunks;
        t->chunks = c;
    }
    unsigned char *p;
    if (c->free_block) {
        p = c->free_block;
        memcpy(&c->free_block, p, sizeof(void *));
        memset(p, 0, bytes);
    } else {
        p = c->base + (size_t)c->fresh++ * bytes;
    }
    c->used++;
    return p;
}

/* Returns an array of arrays_alloc (bytes as allocated); no reader may hold it. */
static void arrays_free(spw_serve_table_t *t, unsigned char *p, size_t bytes)
{
    if (bytes > CHUNK / 2) {
        munmap(p, round_chunk(bytes));
        return;
    }
    unsigned char *base = p - (uintptr_t)p % CHUNK;
    struct chunk **at = &t->chunks;
    while ((*at)->base != base)
        at = &(*at)->next;
    struct chunk *c = *at;
    if (--c->used == 0) {
        munmap(c->base, CHUNK);
        *at = c->next;
        free(c);
        return;
    }
    memcpy(p, &c->free_block, sizeof(void *));
    c->free_block = p;
}

spw_serve_table_t *spw_serve_table_new(uint32_t dim, uint64_t max_rows, char *errstr,
                                       size_t errstr_size)
{
    if (dim < 1 || dim > SPW_SERVE_MAX_DIM) {
        snprintf(errstr, errstr_size, "row dim %u outside 1..%u", dim, SPW_SERVE_MAX_DIM);
        return NULL;
    }
    spw_serve_table_t *t = aligned_alloc(LINE, sizeof(*t)); /* sizeof is a multiple of LINE */
    if (!t) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    memset(t, 0, sizeof(*t));
    t->dim = dim;
    t->stride = slot_stride(dim);
    t->max_rows = max_rows;
    atomic_init(&t->rows, 0);
    atomic_init(&t->gen, 0);
    atomic_init(&t->readers[0], 0);
    atomic_init(&t->readers[1], 0);
    for (uint32_t i = 0; i < SPW_SERVE_STRIPES; i++) {
        atomic_init(&t->stripes[i].seq, 0);
        atomic_init(&t->stripes[i].slots, 0);
    }
    return t;
}

void spw_serve_table_destroy(spw_serve_table_t *table)
{
    if (!table)
        return;
    for (uint32_t i = 0; i < SPW_SERVE_STRIPES; i++) {
        struct slots a =
            slots_of(atomic_load_explicit(&table->stripes[i].slots, memory_order_relaxed));
        if (a.data)
            arrays_free(table, a.data, (size_t)a.cap * table->stride);
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

/* ---- readers ---- */

/* Counts the caller as a reader of the current generation, which it returns for reader_exit.
 * Sequentially consistent against the writer's advance in retire(): either the writer sees this
 * count, or this reader sees the new generation and counts itself there instead. */
static uint64_t reader_enter(spw_serve_table_t *t)
{
    for (;;) {
        uint64_t g = atomic_load(&t->gen);
        atomic_fetch_add(&t->readers[g & 1], 1);
        if (atomic_load(&t->gen) == g)
            return g;
        atomic_fetch_sub(&t->readers[g & 1], 1);
    }
}

static void reader_exit(spw_serve_table_t *t, uint64_t g)
{
    atomic_fetch_sub_explicit(&t->readers[g & 1], 1, memory_order_release);
}

/* Slot of key in a, or NULL. The probe is bounded by cap: a reader may see a run that the writer
 * is changing (it then copies again), and must not loop on it. */
static const struct slot *probe(const struct slots *a, uint32_t stride, uint64_t key, uint64_t h)
{
    uint32_t mask = a->cap - 1;
    uint32_t i = (uint32_t)h & mask;
    for (uint32_t p = 0; p < a->cap; p++, i = (i + 1) & mask) {
        const struct slot *sl = slot_at(a, stride, i);
        if (!atomic_load_explicit(&sl->used, memory_order_relaxed))
            return NULL;
        if (atomic_load_explicit(&sl->key, memory_order_relaxed) == key)
            return sl;
    }
    return NULL;
}

/* Starts loading the lines of the slot where the probe for hash h begins. */
static inline void prefetch_home(const struct stripe *s, uint32_t stride, uint64_t h)
{
    struct slots a = slots_of(atomic_load_explicit(&s->slots, memory_order_relaxed));
    if (!a.data)
        return;
    const unsigned char *p = a.data + (size_t)((uint32_t)h & (a.cap - 1)) * stride;
    /* a wide row's later lines follow in order, which the hardware prefetcher handles */
    uint32_t lines = stride / LINE < PREFETCH_LINES ? stride / LINE : PREFETCH_LINES;
    __builtin_prefetch(p);
    for (uint32_t l = 1; l < lines; l++)
        __builtin_prefetch(p + (size_t)l * LINE);
}

/*
 * Copies key's row (h its hash) from s into row (dim floats) and its version into *version (may
 * be NULL), zeros when absent (version untouched); true when found. The copy is one version of
 * the row: it is taken between two reads of an equal, even seq, or taken again. Caller is
 * counted as a reader (reader_enter).
 */
static bool read_row(const struct stripe *s, uint32_t stride, uint32_t dim, uint64_t key,
                     uint64_t h, float *row, uint32_t *version)
{
    for (unsigned spins = 0;; spins++) {
        uint32_t s0 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (s0 & 1) { /* a writer inside: a few hundred ns, unless it lost its core */
            if (spins < 1000)
                cpu_relax();
            else
                sched_yield();
            continue;
        }
        struct slots a = slots_of(atomic_load_explicit(&s->slots, memory_order_acquire));
        const struct slot *at = a.data ? probe(&a, stride, key, h) : NULL;
        uint32_t v = 0;
        if (at) {
            for (uint32_t j = 0; j < dim; j++) {
                uint32_t bits = atomic_load_explicit(&at->vals[j], memory_order_relaxed);
                memcpy(&row[j], &bits, sizeof(bits));
            }
            v = atomic_load_explicit(&at->version, memory_order_relaxed);
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) != s0)
            continue;
        if (!at)
            memset(row, 0, dim * sizeof(float));
        else if (version)
            *version = v;
        return at != NULL;
    }
}

spw_err_t spw_serve_table_get(spw_serve_table_t *table, uint64_t key, float *weights,
                              uint32_t *version)
{
    uint64_t h = key_hash(key);
    float *row = weights;
    float scratch[SPW_SERVE_MAX_DIM];
    uint64_t g = reader_enter(table);
    /* an absent key leaves weights untouched: copy through scratch, which read_row may zero */
    bool found = read_row(stripe_of(table, h), table->stride, table->dim, key, h, scratch, version);
    reader_exit(table, g);
    if (found)
        memcpy(row, scratch, table->dim * sizeof(float));
    return found ? SPW_OK : SPW_ERR_NOT_FOUND;
}

/* Keys are taken GET_CHUNK at a time: hashed, every home slot prefetched, then copied, so that
 * the cache misses of a chunk overlap instead of following one another. */
size_t spw_serve_table_get_many(spw_serve_table_t *table, const uint64_t *keys, size_t n,
                                float *rows)
{
    const uint32_t dim = table->dim, stride = table->stride;
    size_t found = 0;
    uint64_t h[GET_CHUNK];
    uint64_t g = reader_enter(table);
    for (size_t base = 0; base < n; base += GET_CHUNK) {
        size_t m = n - base < GET_CHUNK ? n - base : GET_CHUNK;
        for (size_t k = 0; k < m; k++) {
            h[k] = key_hash(keys[base + k]);
            prefetch_home(stripe_of(table, h[k]), stride, h[k]);
        }
        for (size_t k = 0; k < m; k++)
            found += read_row(stripe_of(table, h[k]), stride, dim, keys[base + k], h[k],
                              rows + (base + k) * dim, NULL);
    }
    reader_exit(table, g);
    return found;
}

/* ---- the writer ---- */

static inline void write_begin(struct stripe *s)
{
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static inline void write_end(struct stripe *s)
{
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

/* Slot of key in s, or NULL (the writer's own view: nothing changes under it). */
static struct slot *find(const struct stripe *s, uint32_t stride, uint64_t key, uint64_t h)
{
    struct slots a = slots_of(atomic_load_explicit(&s->slots, memory_order_relaxed));
    return a.data ? (struct slot *)probe(&a, stride, key, h) : NULL;
}

/* Copies a whole slot (the writer's, field by field: readers may be loading dst). */
static void slot_copy(struct slot *dst, const struct slot *src, uint32_t dim)
{
    atomic_store_explicit(&dst->key, atomic_load_explicit(&src->key, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&dst->version, atomic_load_explicit(&src->version, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&dst->used, atomic_load_explicit(&src->used, memory_order_relaxed),
                          memory_order_relaxed);
    for (uint32_t j = 0; j < dim; j++)
        atomic_store_explicit(&dst->vals[j],
                              atomic_load_explicit(&src->vals[j], memory_order_relaxed),
                              memory_order_relaxed);
}

/* Frees old once no reader can hold it: advances the generation and waits for the readers of
 * the previous one to leave (each holds it for one lookup call). */
static void retire(spw_serve_table_t *t, struct slots old)
{
    if (!old.data)
        return;
    uint64_t g = atomic_load(&t->gen);
    atomic_store(&t->gen, g + 1);
    for (unsigned spins = 0; atomic_load(&t->readers[g & 1]) != 0; spins++) {
        if (spins < 1000)
            cpu_relax();
        else
            sched_yield();
    }
    arrays_free(t, old.data, (size_t)old.cap * t->stride);
}

/* A new array of cap slots holding s's rows (s unchanged); data NULL when out of memory. */
static struct slots rebuild(spw_serve_table_t *t, const struct stripe *s, uint32_t cap)
{
    const uint32_t stride = t->stride;
    struct slots a = {.data = arrays_alloc(t, (size_t)cap * stride), .cap = cap};
    if (!a.data)
        return a;
    struct slots old = slots_of(atomic_load_explicit(&s->slots, memory_order_relaxed));
    uint32_t mask = cap - 1;
    for (uint32_t j = 0; j < old.cap; j++) {
        const struct slot *from = slot_at(&old, stride, j);
        if (!atomic_load_explicit(&from->used, memory_order_relaxed))
            continue;
        uint32_t i =
            (uint32_t)key_hash(atomic_load_explicit(&from->key, memory_order_relaxed)) & mask;
        while (atomic_load_explicit(&slot_at(&a, stride, i)->used, memory_order_relaxed))
            i = (i + 1) & mask;
        slot_copy(slot_at(&a, stride, i), from, t->dim);
    }
    return a;
}

spw_err_t spw_serve_table_put(spw_serve_table_t *table, uint64_t key, const float *weights,
                              uint32_t version)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    const uint32_t stride = table->stride, dim = table->dim;
    struct slot *at = find(s, stride, key, h);
    if (!at) {
        if (atomic_load_explicit(&table->rows, memory_order_relaxed) >= table->max_rows)
            return SPW_ERR_NOMEM;
        struct slots a = slots_of(atomic_load_explicit(&s->slots, memory_order_relaxed));
        uint32_t cap = a.cap;
        /* Keep the load factor at most 3/4. */
        if ((uint64_t)(s->n + 1) * 4 > (uint64_t)cap * 3) {
            uint64_t ncap = cap ? (uint64_t)cap * 2 : STRIPE_MIN_CAP;
            struct slots na = {0};
            if (ncap <= (1ull << 31))
                na = rebuild(table, s, (uint32_t)ncap);
            if (!na.data)
                return SPW_ERR_NOMEM;
            write_begin(s);
            atomic_store_explicit(&s->slots, slots_word(na), memory_order_release);
            write_end(s);
            retire(table, a);
            a = na;
        }
        uint32_t mask = a.cap - 1;
        uint32_t i = (uint32_t)h & mask;
        while (atomic_load_explicit(&slot_at(&a, stride, i)->used, memory_order_relaxed))
            i = (i + 1) & mask;
        at = slot_at(&a, stride, i);
        write_begin(s);
        atomic_store_explicit(&at->key, key, memory_order_relaxed);
        atomic_store_explicit(&at->used, 1, memory_order_relaxed);
        s->n++;
        atomic_fetch_add_explicit(&table->rows, 1, memory_order_relaxed);
    } else {
        write_begin(s);
    }
    atomic_store_explicit(&at->version, version, memory_order_relaxed);
    for (uint32_t j = 0; j < dim; j++) {
        uint32_t bits;
        memcpy(&bits, &weights[j], sizeof(bits));
        atomic_store_explicit(&at->vals[j], bits, memory_order_relaxed);
    }
    write_end(s);
    return SPW_OK;
}

spw_err_t spw_serve_table_delete(spw_serve_table_t *table, uint64_t key)
{
    uint64_t h = key_hash(key);
    struct stripe *s = stripe_of(table, h);
    const uint32_t stride = table->stride;
    struct slot *at = find(s, stride, key, h);
    if (!at)
        return SPW_ERR_NOT_FOUND;
    struct slots sa = slots_of(atomic_load_explicit(&s->slots, memory_order_relaxed));
    const struct slots *a = &sa;
    /* Backward-shift deletion: move later members of the probe run into the hole so that no
     * lookup stops early (no tombstones to clean up later). */
    uint32_t mask = a->cap - 1, hole = (uint32_t)(((unsigned char *)at - a->data) / stride);
    write_begin(s);
    for (uint32_t j = (hole + 1) & mask;
         atomic_load_explicit(&slot_at(a, stride, j)->used, memory_order_relaxed);
         j = (j + 1) & mask) {
        const struct slot *from = slot_at(a, stride, j);
        uint32_t home =
            (uint32_t)key_hash(atomic_load_explicit(&from->key, memory_order_relaxed)) & mask;
        /* j's entry may fill the hole when its home is not cyclically within (hole, j]. */
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (!movable)
            continue;
        slot_copy(slot_at(a, stride, hole), from, table->dim);
        hole = j;
    }
    atomic_store_explicit(&slot_at(a, stride, hole)->used, 0, memory_order_relaxed);
    write_end(s);
    s->n--;
    atomic_fetch_sub_explicit(&table->rows, 1, memory_order_relaxed);
    return SPW_OK;
}
