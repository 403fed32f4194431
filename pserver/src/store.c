/* The row store: a DRAM hot table (open addressing over u64 keys, rows in a slab region, CLOCK
 * eviction) over a cold file of evicted rows (cold.c) and a RocksDB tier that checkpoints write,
 * with admission by count-min sketch and TTL expiry. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <rocksdb/c.h>
#include <xxhash.h>

#include "ps_int.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/fs.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define HUGE_PAGE          (2u << 20)
#define EVICT_BATCH        8192u /* rows per eviction sweep (and WriteBatch) at most */
#define FLUSH_BATCH        4096u
#define FLUSH_THREADS      2u /* parts of a flush written at once */
#define SST_FILES_PER_PART 4u /* see part_files */
#define ROUND_FILES        (FLUSH_THREADS * SST_FILES_PER_PART) /* SST files of a round at most */
#define PIN_ROWS           1024u /* rows written between mappings of an SST file's new pages */
#define IDX_MIN            1024u /* smallest index (entries) */
#define IDX_SALT           0x9e3779b97f4a7c15ull
#define PREFETCH_DIST      16
#define SKETCH_DEPTH       4u
#define SLOT_FREE          8u                /* flags bit of a slot on the free list */
#define INGEST_PREFIX      "SPARROW-INGEST-" /* + part-file.tmp in db_path; not a RocksDB name */
#define COLD_NAME          "SPARROW-COLD"    /* the cold file's segments, -NN.rows in db_path */
#define COLD_START         65536u            /* records of a new cold file, all segments */
#define BLOOM_BITS         10.0

size_t spw_ps__flush_part_rows = 1u << 20;
size_t spw_ps__sst_file_rows = 1u << 16;

/* One index entry: the low 32 bits of the key's hash (home position and a tag compared before
 * the row's key is read) and the slot + 1 of its row; slot1 == 0 marks an empty entry. Eight
 * bytes, so that the index costs 11-21 bytes per row at load 3/8..3/4. */
struct idx_ent {
    uint32_t h;
    uint32_t slot1;
};

/* A (key, slot) pair, sorted by key before rows are written to RocksDB; with cold > 0, slot is
 * a record of the cold file's segment cold - 1. */
struct ks {
    uint64_t key;
    uint32_t slot;
    uint32_t cold;
};

/* Owned by one thread (see pserver.h). */
struct spw_ps_store {
    struct spw_ps_store_conf conf;
    char *db_path;
    struct spw_ps__digest_cache digests; /* of SSTs hashed by flushes and checkpoints */
    uint32_t dim;
    size_t row_floats; /* dim + slots */
    size_t stride;     /* bytes per row in a slab */
    size_t value_len;  /* bytes of a RocksDB value */

    /* Open-addressing index (linear probing), grown by doubling with the rows up to
     * idx_cap_max entries so that its memory follows the rows actually held. */
    struct idx_ent *idx;
    uint64_t idx_mask;
    uint64_t idx_cap_max;

    /* The slab: one region reserved for max_rows rows at open, touched (and so resident) only
     * as slots are handed out. Free slots form a list threaded through their rows' version. */
    uint8_t *slab;
    size_t slab_bytes;
    uint32_t high_water; /* slots ever handed out */
    /* spw_ps_store_slab_ahead: slab bytes in use at its last call, end of the range it gave */
    size_t ahead_used, ahead_end;
    uint32_t free_head; /* slot + 1 of the first free slot; 0: none */
    uint32_t max_rows;
    uint32_t n_rows;
    uint32_t clock_hand;
    uint32_t chunk_max; /* keys per acquire round (a quarter of max_rows) */

    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf; /* the default family (batched MultiGet needs it) */
    rocksdb_options_t *opts;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_writebatch_t *wb;
    rocksdb_envoptions_t *envopts;
    rocksdb_ingestexternalfileoptions_t *ingest_opts;

    struct spw_ps__cold cold; /* open unless pserver.cold_file is off */
    uint8_t *cold_row;        /* one row (stride bytes) read out of the cold file */

    bool admit;
    struct spw_ps_sketch sketch;
    struct spw_ps__keyfilter on_disk;  /* keys put outside DRAM: new keys skip both lookups */
    uint64_t init_mix[SPW_PS_MAX_DIM]; /* spw_ps__row_init_mixes of (seed, dim) */
    uint32_t now_s;

    /* Scratch for one chunk, sized chunk_max (at least EVICT_BATCH). */
    struct spw_ps_row **rows;
    uint32_t *hashes;
    uint32_t *miss_idx;
    struct ks *miss_ks, *miss_tmp; /* missing keys with their request index, to sort */
    char *miss_kbuf;
    const char **miss_kptr;
    size_t *miss_klen;
    rocksdb_pinnableslice_t **miss_val;
    size_t *miss_len; /* value length; SIZE_MAX: not found */
    char *miss_vals;  /* chunk_max values, copied out of miss_val */
    char **miss_err;
    uint32_t *victims;
    struct ks *evict_ks, *evict_tmp; /* EVICT_BATCH each */

    /* TTL sweep cursors. */
    uint32_t ttl_hand;
    struct spw_ps__cold_pos cold_hand;
    char ttl_cursor[8];
    bool ttl_cursor_valid;

    struct spw_ps_store_stats stats;
    struct spw_ps__stale stale; /* staleness means per row class, the top threshold */
};

static inline uint32_t key_hash(uint64_t key)
{
    return (uint32_t)spw_hash_mix64(key + IDX_SALT);
}

static inline struct spw_ps_row *slot_row(const spw_ps_store_t *store, uint32_t slot)
{
    return (struct spw_ps_row *)(store->slab + (size_t)slot * store->stride);
}

/* A new row's initial value: the optimizer's, except the counter row, which starts at zero. */
static void row_init(const spw_ps_store_t *store, uint64_t key, float *data)
{
    if (store->conf.counter_key && key == store->conf.counter_key)
        memset(data, 0,
               (store->dim + spw_ps_slot_floats(store->conf.optim.kind, store->dim)) *
                   sizeof(float));
    else
        spw_ps__row_init_mixed(&store->conf.optim, store->dim, store->init_mix, key, data);
}

void *spw_ps__big_alloc(size_t bytes)
{
    size_t len = bytes + HUGE_PAGE;
    uint8_t *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t addr = (uintptr_t)p;
    size_t head = (HUGE_PAGE - addr % HUGE_PAGE) % HUGE_PAGE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t used = (bytes + page - 1) / page * page;
    if (head > 0)
        munmap(p, head);
    if (len - head > used)
        munmap(p + head + used, len - head - used);
    if (bytes >= HUGE_PAGE)
        (void)madvise(p + head, used, MADV_HUGEPAGE); /* advice only: fine if refused */
    return p + head;
}

void spw_ps_store_slab_ahead(spw_ps_store_t *store, struct spw_ps_slab_range *range)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), min_ahead = 4u << 20;
    const size_t used = (size_t)store->high_water * store->stride;
    const size_t mapped = (store->slab_bytes + page - 1) / page * page;
    size_t grown = used > store->ahead_used ? used - store->ahead_used : 0;
    store->ahead_used = used;
    size_t want = 2 * grown > min_ahead ? 2 * grown : min_ahead;
    size_t start = (used > store->ahead_end ? used : store->ahead_end) / page * page;
    size_t end = used + want < mapped ? (used + want + page - 1) / page * page : mapped;
    range->addr = NULL;
    range->len = 0;
    if (end <= start)
        return;
    store->ahead_end = end;
    range->addr = store->slab + start;
    range->len = end - start;
}

void spw_ps__big_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* Asks for every cache line of a row ahead of its use. */
static inline void prefetch_row(const spw_ps_store_t *store, const struct spw_ps_row *row)
{
    const char *p = (const char *)row;
    for (size_t off = 0; off < store->stride; off += 64)
        __builtin_prefetch(p + off, 1);
    __builtin_prefetch(p + store->stride - 1, 1);
}

/* Index position of key (whose key_hash is h), or -1. */
static inline int64_t idx_find(const spw_ps_store_t *store, uint64_t key, uint32_t h)
{
    uint64_t mask = store->idx_mask;
    uint64_t i = h & mask;
    for (;;) {
        struct idx_ent e = store->idx[i];
        if (e.slot1 == 0)
            return -1;
        if (e.h == h && slot_row(store, e.slot1 - 1)->key == key)
            return (int64_t)i;
        i = (i + 1) & mask;
    }
}

static inline void idx_put(struct idx_ent *idx, uint64_t mask, uint32_t h, uint32_t slot1)
{
    uint64_t i = h & mask;
    while (idx[i].slot1 != 0)
        i = (i + 1) & mask;
    idx[i].h = h;
    idx[i].slot1 = slot1;
}

/* Doubles the index (rehashing from the stored hashes; rows are not touched). */
static spw_err_t idx_grow(spw_ps_store_t *store)
{
    uint64_t cap = store->idx_mask + 1, new_cap = cap * 2;
    struct idx_ent *idx = spw_ps__big_alloc(new_cap * sizeof(*idx));
    if (!idx)
        return SPW_ERR_NOMEM;
    for (uint64_t i = 0; i < cap; i++)
        if (store->idx[i].slot1 != 0)
            idx_put(idx, new_cap - 1, store->idx[i].h, store->idx[i].slot1);
    spw_ps__big_free(store->idx, cap * sizeof(*idx));
    store->idx = idx;
    store->idx_mask = new_cap - 1;
    return SPW_OK;
}

/* Backward-shift deletion keeps linear probing free of tombstones. */
static void idx_delete_at(spw_ps_store_t *store, uint64_t i)
{
    uint64_t mask = store->idx_mask;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (store->idx[j].slot1 == 0)
            break;
        uint64_t home = store->idx[j].h & mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        bool in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_between) {
            store->idx[i] = store->idx[j];
            i = j;
        }
    }
    store->idx[i].slot1 = 0;
}

static void idx_delete(spw_ps_store_t *store, uint64_t key)
{
    int64_t i = idx_find(store, key, key_hash(key));
    if (i >= 0)
        idx_delete_at(store, (uint64_t)i);
}

/* Sorts a[0..n) by key: LSD radix sort over the 8 bytes, skipping bytes that are the same in
 * every key; tmp holds n entries. */
static void ks_sort(struct ks *a, struct ks *tmp, size_t n)
{
    if (n < 2)
        return;
    if (n < 32) {
        for (size_t i = 1; i < n; i++) {
            struct ks v = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1].key > v.key; j--)
                a[j] = a[j - 1];
            a[j] = v;
        }
        return;
    }
    size_t count[8][256];
    memset(count, 0, sizeof(count));
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            count[b][(a[i].key >> (8 * b)) & 0xff]++;
    struct ks *src = a, *dst = tmp;
    for (int b = 0; b < 8; b++) {
        if (count[b][(a[0].key >> (8 * b)) & 0xff] == n)
            continue;
        size_t pos = 0;
        for (int d = 0; d < 256; d++) {
            size_t c = count[b][d];
            count[b][d] = pos;
            pos += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[b][(src[i].key >> (8 * b)) & 0xff]++] = src[i];
        struct ks *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof(*a));
}

static spw_err_t store_err(char *err, const char *what)
{
    SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 1000, "rocksdb failed", "op=%s err=\"%s\"", what, err);
    rocksdb_free(err);
    return SPW_ERR_STORE;
}

static void free_slot(spw_ps_store_t *store, uint32_t slot)
{
    struct spw_ps_row *row = slot_row(store, slot);
    row->flags = SLOT_FREE;
    row->version = store->free_head;
    store->free_head = slot + 1;
    store->n_rows--;
}

static inline struct spw_ps__cold_pos cold_pos_of(const struct ks *e)
{
    return (struct spw_ps__cold_pos){.seg = e->cold - 1, .idx = e->slot};
}

/* The row a (key, slot) pair names: a slab slot or a cold-file record. */
static inline struct spw_ps_row *ks_row(const spw_ps_store_t *store, const struct ks *e)
{
    return e->cold ? spw_ps__cold_rec(&store->cold, cold_pos_of(e)) : slot_row(store, e->slot);
}

/* The row of e has been written to RocksDB. */
static inline void ks_clean(spw_ps_store_t *store, const struct ks *e)
{
    if (e->cold)
        spw_ps__cold_clean(&store->cold, cold_pos_of(e));
    else
        slot_row(store, e->slot)->flags &= ~SPW_PS_ROW_DIRTY;
}

static inline void put_row(spw_ps_store_t *store, const struct spw_ps_row *row)
{
    spw_ps__keyfilter_add(&store->on_disk, row->key);
    char k[8];
    spw_ps__key_encode(row->key, k);
    rocksdb_writebatch_put(store->wb, k, 8, (const char *)row + SPW_PS_DB_VALUE_OFF,
                           store->value_len);
}

/* A request's use of a row: pinned, and one more unit of heat (at most 3). */
static inline void row_touch(struct spw_ps_row *row)
{
    uint32_t f = row->flags | SPW_PS_ROW_PIN;
    if ((f & SPW_PS_ROW_HEAT_MASK) != SPW_PS_ROW_HEAT_MASK)
        f += SPW_PS_ROW_HEAT_ONE;
    row->flags = f;
}

/* GCLOCK sweep: evicts up to EVICT_BATCH unpinned rows whose heat the hand brought to 0 into the
 * cold file, clean ones too (a later miss then reads the cold file, not RocksDB). Without a cold
 * file, or when it cannot grow, dirty rows go to RocksDB in one WriteBatch in key order (sorted
 * inserts are cheaper for RocksDB's memtable) and clean ones are dropped.
 * Heat up to 3 rather than CLOCK's one reference bit keeps rows touched in several recent
 * requests over rows touched once: in pserver_bench (e) the rows read from RocksDB went from 25.4%
 * to 24.2% of those pushed, and from 25.9% to 24.6% pulled then pushed (a simulation of its
 * batches: CLOCK 25.6%, heat up to 2 24.5%, up to 3 24.4%, up to 7 24.4%). */
static spw_err_t evict_some(spw_ps_store_t *store)
{
    uint32_t want = store->max_rows / 64;
    if (want > EVICT_BATCH)
        want = EVICT_BATCH;
    if (want == 0)
        want = 1;
    uint32_t n = 0, n_dirty = 0;
    uint64_t steps = 0, limit = 4ull * store->high_water + 1; /* heat 3 cools in 3 passes */
    while (n < want && steps < limit) {
        uint32_t slot = store->clock_hand;
        store->clock_hand = (store->clock_hand + 1) % store->high_water;
        steps++;
        struct spw_ps_row *row = slot_row(store, slot);
        if (row->flags & (SLOT_FREE | SPW_PS_ROW_PIN))
            continue;
        if (row->flags & SPW_PS_ROW_HEAT_MASK) {
            row->flags -= SPW_PS_ROW_HEAT_ONE;
            continue;
        }
        row->flags |= SPW_PS_ROW_PIN; /* chosen: not picked twice in this sweep */
        store->victims[n++] = slot;
    }
    if (n == 0)
        return SPW_ERR_NOMEM;
    /* victims[0, n_gone): rows to free now (in the cold file, or clean); evict_ks: dirty rows
     * for RocksDB, freed once written. */
    uint32_t n_gone = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = store->victims[i];
        struct spw_ps_row *row = slot_row(store, slot);
        if (store->cold.open) {
            if (i + PREFETCH_DIST < n)
                spw_ps__cold_prefetch(&store->cold,
                                      slot_row(store, store->victims[i + PREFETCH_DIST])->key);
            if (spw_ps__cold_put(&store->cold, row) == SPW_OK) {
                spw_ps__keyfilter_add(&store->on_disk, row->key);
                store->victims[n_gone++] = slot;
                continue;
            }
        }
        if (row->flags & SPW_PS_ROW_DIRTY) {
            store->evict_ks[n_dirty].key = row->key;
            store->evict_ks[n_dirty++].slot = slot;
        } else {
            store->victims[n_gone++] = slot;
        }
    }
    spw_err_t ret = SPW_OK;
    if (n_dirty > 0) {
        ks_sort(store->evict_ks, store->evict_tmp, n_dirty);
        rocksdb_writebatch_clear(store->wb);
        for (uint32_t i = 0; i < n_dirty; i++)
            put_row(store, slot_row(store, store->evict_ks[i].slot));
        char *err = NULL;
        rocksdb_write(store->db, store->wopts, store->wb, &err);
        rocksdb_writebatch_clear(store->wb);
        if (err) {
            /* not written: they stay in DRAM (the rows already in the cold file go) */
            for (uint32_t i = 0; i < n_dirty; i++)
                slot_row(store, store->evict_ks[i].slot)->flags &= ~SPW_PS_ROW_PIN;
            ret = store_err(err, "evict");
        } else {
            store->stats.rows_db_written += n_dirty;
            for (uint32_t i = 0; i < n_dirty; i++)
                store->victims[n_gone++] = store->evict_ks[i].slot;
        }
    }
    n = n_gone;
    /* The victims' index entries lie anywhere in the index: ask for them ahead of their use. */
    for (uint32_t i = 0; i < n; i++) {
        if (i + PREFETCH_DIST < n) {
            uint64_t ahead = slot_row(store, store->victims[i + PREFETCH_DIST])->key;
            __builtin_prefetch(&store->idx[key_hash(ahead) & store->idx_mask]);
        }
        uint32_t slot = store->victims[i];
        idx_delete(store, slot_row(store, slot)->key);
        free_slot(store, slot);
    }
    store->stats.evictions += n;
    return n > 0 ? SPW_OK : ret;
}

/* A free slot for a new row (evicting when DRAM is full). */
static spw_err_t alloc_slot(spw_ps_store_t *store, uint32_t *slot)
{
    if (store->free_head == 0 && store->high_water == store->max_rows) {
        spw_err_t err = evict_some(store);
        if (err)
            return err;
    }
    if (store->free_head != 0) {
        *slot = store->free_head - 1;
        store->free_head = slot_row(store, *slot)->version;
    } else {
        *slot = store->high_water++;
        /* New slots are handed out in order: ask for the lines of the one PREFETCH_DIST ahead,
         * so that writing a row does not wait for its lines (fresh, just zeroed pages). */
        if (store->high_water + PREFETCH_DIST < store->max_rows)
            prefetch_row(store, slot_row(store, store->high_water + PREFETCH_DIST));
    }
    store->n_rows++;
    return SPW_OK;
}

enum acquire_mode {
    ACQUIRE_PULL,   /* create admitted rows; sketch read only */
    ACQUIRE_PUSH,   /* count a sighting; create admitted rows */
    ACQUIRE_LOOKUP, /* never create */
};

static spw_err_t insert_row(spw_ps_store_t *store, uint64_t key, uint32_t h, const char *value,
                            struct spw_ps_row **out)
{
    /* The index grows before the row is taken, so that a failure leaves nothing half done. */
    if ((uint64_t)(store->n_rows + 1) * 4 > (store->idx_mask + 1) * 3 &&
        store->idx_mask + 1 < store->idx_cap_max) {
        spw_err_t err = idx_grow(store);
        if (err)
            return err;
    }
    uint32_t slot;
    spw_err_t err = alloc_slot(store, &slot);
    if (err)
        return err;
    struct spw_ps_row *row = slot_row(store, slot);
    if (value) {
        memcpy((char *)row + SPW_PS_DB_VALUE_OFF, value, store->value_len);
    } else {
        row->version = 0;
        row->last_update = store->now_s;
        row->count = 0;
        row_init(store, key, row->data);
        store->stats.rows_created++;
    }
    row->key = key;
    row->flags = SPW_PS_ROW_HEAT_ONE | SPW_PS_ROW_PIN;
    idx_put(store->idx, store->idx_mask, h, slot + 1);
    *out = row;
    return SPW_OK;
}

/* A key with no row in DRAM or RocksDB: a new row when the mode creates and admission lets it
 * (*out stays NULL otherwise). */
static spw_err_t new_row(spw_ps_store_t *store, uint64_t key, uint32_t h, enum acquire_mode mode,
                         struct spw_ps_row **out)
{
    store->stats.db_misses++;
    if (mode == ACQUIRE_LOOKUP)
        return SPW_OK;
    if (store->admit && !spw_key_is_dense(key)) { /* dense blocks: always admitted */
        uint32_t c = mode == ACQUIRE_PUSH ? spw_ps__sketch_add(&store->sketch, key)
                                          : spw_ps__sketch_get(&store->sketch, key);
        if (c < store->conf.admit_min_count)
            return SPW_OK;
        store->stats.admitted++;
    }
    return insert_row(store, key, h, NULL, out);
}

/* Loads the rows of acquire's misses (store->miss_ks[0, *n_miss), request order) that the cold
 * file holds, moving each into DRAM with its dirty bit; the others stay in miss_ks for RocksDB
 * (*n_miss of them). */
static spw_err_t acquire_cold(spw_ps_store_t *store, const uint64_t *keys, size_t *n_miss)
{
    struct ks *miss = store->miss_ks;
    size_t n = *n_miss, n_rest = 0;
    for (size_t m = 0; m < n && m < PREFETCH_DIST; m++)
        spw_ps__cold_prefetch(&store->cold, miss[m].key);
    for (size_t m = 0; m < n; m++) {
        if (m + PREFETCH_DIST < n)
            spw_ps__cold_prefetch(&store->cold, miss[m + PREFETCH_DIST].key);
        uint32_t i = miss[m].slot;
        /* A key repeated in the request may have been loaded by an earlier miss. */
        int64_t pos = idx_find(store, keys[i], store->hashes[i]);
        if (pos >= 0) {
            struct spw_ps_row *row = slot_row(store, store->idx[pos].slot1 - 1);
            row_touch(row);
            store->rows[i] = row;
            continue;
        }
        struct spw_ps__cold_pos c;
        if (!spw_ps__cold_find(&store->cold, keys[i], &c)) {
            miss[n_rest++] = miss[m];
            continue;
        }
        /* Out of the file before inserting: an eviction may grow the file and move records. */
        struct spw_ps_row *held = (struct spw_ps_row *)store->cold_row;
        memcpy(held, spw_ps__cold_rec(&store->cold, c), store->stride);
        spw_ps__cold_delete_at(&store->cold, c);
        spw_err_t err = insert_row(store, keys[i], store->hashes[i],
                                   (const char *)held + SPW_PS_DB_VALUE_OFF, &store->rows[i]);
        if (err) {
            /* back where it was (the file just lost a record, so it needs no growth) */
            (void)spw_ps__cold_put(&store->cold, held);
            return err;
        }
        store->rows[i]->flags |= held->flags & SPW_PS_ROW_DIRTY;
        store->stats.cold_reads++;
    }
    *n_miss = n_rest;
    return SPW_OK;
}

/* Finds or loads the rows of keys[0..n) (n <= chunk_max) into store->rows, pinned; NULL for keys
 * without a row (unadmitted, or absent in LOOKUP mode). The caller unpins with unpin(). */
static spw_err_t acquire(spw_ps_store_t *store, const uint64_t *keys, size_t n,
                         enum acquire_mode mode)
{
    struct spw_ps_row **rows = store->rows;
    uint32_t *hs = store->hashes;
    for (size_t i = 0; i < n; i++)
        hs[i] = key_hash(keys[i]);
    /* Two-stage prefetch: the index entry 2·D keys ahead, the row it points to D keys ahead, so
     * that the lookups of a batch overlap their cache misses. */
    const size_t d = PREFETCH_DIST;
    for (size_t i = 0; i < n && i < 2 * d; i++)
        __builtin_prefetch(&store->idx[hs[i] & store->idx_mask]);
    size_t n_miss = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 * d < n) {
            __builtin_prefetch(&store->idx[hs[i + 2 * d] & store->idx_mask]);
            spw_ps__keyfilter_prefetch(&store->on_disk, keys[i + 2 * d]);
        }
        if (i + d < n) {
            const struct idx_ent *e = &store->idx[hs[i + d] & store->idx_mask];
            if (e->slot1 != 0 && e->h == hs[i + d])
                __builtin_prefetch(slot_row(store, e->slot1 - 1), 1);
        }
        int64_t pos = idx_find(store, keys[i], hs[i]);
        if (pos >= 0) {
            struct spw_ps_row *row = slot_row(store, store->idx[pos].slot1 - 1);
            row_touch(row);
            rows[i] = row;
        } else if (!spw_ps__keyfilter_may_contain(&store->on_disk, keys[i])) {
            /* Never written to RocksDB: no read. The row is made here, so that a repeat of the
             * key later in the request finds it in the index. */
            rows[i] = NULL;
            store->stats.db_skipped++;
            spw_err_t err = new_row(store, keys[i], hs[i], mode, &rows[i]);
            if (err)
                return err;
        } else {
            rows[i] = NULL;
            store->miss_ks[n_miss].key = keys[i];
            store->miss_ks[n_miss++].slot = (uint32_t)i;
        }
    }
    if (n_miss > 0 && store->cold.n > 0) {
        spw_err_t err = acquire_cold(store, keys, &n_miss);
        if (err)
            return err;
    }
    if (n_miss == 0)
        return SPW_OK;
    /* In key order: RocksDB's MultiGet would otherwise sort them itself, far more slowly. */
    ks_sort(store->miss_ks, store->miss_tmp, n_miss);
    for (size_t m = 0; m < n_miss; m++) {
        spw_ps__key_encode(store->miss_ks[m].key, store->miss_kbuf + 8 * m);
        store->miss_kptr[m] = store->miss_kbuf + 8 * m;
        store->miss_klen[m] = 8;
        store->miss_idx[m] = store->miss_ks[m].slot;
    }
    /* Batched MultiGet: RocksDB sorts the keys and looks them up file by file, sharing filter,
     * index and block reads between them. The values are copied out (and their pins released)
     * before any row is inserted, since inserting may evict and so write to the database.
     * Block checksums are verified here too (XXH3 over the 4 KB block, 13% of pserver_bench
     * (e)'s samples): a row read unverified from a damaged block would be trained on and
     * written back, into the next checkpoint, with nothing to tell. */
    rocksdb_batched_multi_get_cf(store->db, store->ropts, store->cf, n_miss, store->miss_kptr,
                                 store->miss_klen, store->miss_val, store->miss_err, true);
    spw_err_t ret = SPW_OK;
    for (size_t m = 0; m < n_miss; m++) {
        rocksdb_pinnableslice_t *slice = store->miss_val[m];
        store->miss_len[m] = SIZE_MAX; /* not found */
        if (!slice)
            continue;
        size_t vlen = 0;
        const char *val = rocksdb_pinnableslice_value(slice, &vlen);
        store->miss_len[m] = vlen;
        if (vlen == store->value_len)
            memcpy(store->miss_vals + m * store->value_len, val, vlen);
        rocksdb_pinnableslice_destroy(slice);
    }
    for (size_t m = 0; m < n_miss; m++) {
        uint32_t i = store->miss_idx[m];
        if (store->miss_err[m]) {
            if (ret == SPW_OK)
                ret = store_err(store->miss_err[m], "multi_get");
            else
                rocksdb_free(store->miss_err[m]);
            continue;
        }
        if (ret != SPW_OK)
            continue;
        if (m + PREFETCH_DIST < n_miss)
            __builtin_prefetch(
                &store->idx[hs[store->miss_idx[m + PREFETCH_DIST]] & store->idx_mask]);
        /* A key repeated in the request may have been loaded by an earlier miss. */
        int64_t pos = idx_find(store, keys[i], hs[i]);
        if (pos >= 0) {
            struct spw_ps_row *row = slot_row(store, store->idx[pos].slot1 - 1);
            row_touch(row);
            rows[i] = row;
            continue;
        }
        if (store->miss_len[m] != SIZE_MAX) {
            if (store->miss_len[m] != store->value_len) {
                SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 1000, "corrupt row in rocksdb",
                                    "key=%" PRIu64 " len=%zu want=%zu", keys[i], store->miss_len[m],
                                    store->value_len);
                ret = SPW_ERR_CORRUPT;
                continue;
            }
            store->stats.db_reads++;
            ret = insert_row(store, keys[i], hs[i], store->miss_vals + m * store->value_len,
                             &rows[i]);
            continue;
        }
        ret = new_row(store, keys[i], hs[i], mode, &rows[i]);
    }
    return ret;
}

static void unpin(spw_ps_store_t *store, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (store->rows[i])
            store->rows[i]->flags &= ~SPW_PS_ROW_PIN;
}

/* What a pull returns for key: the row's weights and version, or (no row: not admitted) the
 * initial weights and version 0. */
static void row_out(const spw_ps_store_t *store, const struct spw_ps_row *row, uint64_t key,
                    float *dst, uint32_t *version)
{
    if (row) {
        memcpy(dst, row->data, store->dim * sizeof(float));
        *version = row->version;
        return;
    }
    /* the initial row holds optimizer slots too: only its weights go out */
    float init[SPW_PS_MAX_DIM * 3 + 1];
    row_init(store, key, init);
    memcpy(dst, init, store->dim * sizeof(float));
    *version = 0;
}

spw_err_t spw_ps_store_pull(spw_ps_store_t *store, const uint64_t *keys, size_t n, float *values,
                            uint32_t *versions)
{
    uint32_t dim = store->dim;
    for (size_t off = 0; off < n; off += store->chunk_max) {
        size_t m = n - off < store->chunk_max ? n - off : store->chunk_max;
        spw_err_t err = acquire(store, keys + off, m, ACQUIRE_PULL);
        if (err) {
            unpin(store, m);
            return err;
        }
        for (size_t i = 0; i < m; i++) {
            if (i + PREFETCH_DIST < m && store->rows[i + PREFETCH_DIST])
                prefetch_row(store, store->rows[i + PREFETCH_DIST]);
            struct spw_ps_row *row = store->rows[i];
            uint32_t version;
            row_out(store, row, keys[off + i], values + (off + i) * dim, &version);
            if (versions)
                versions[off + i] = version;
            if (!row)
                store->stats.pulls_unadmitted++;
        }
        unpin(store, m);
    }
    store->stats.rows_pulled += n;
    return SPW_OK;
}

spw_err_t spw_ps_store_push(spw_ps_store_t *store, const uint64_t *keys, size_t n,
                            const float *grads, const uint32_t *versions, uint32_t *taus,
                            struct spw_ps_push_result *res)
{
    struct spw_ps_push_args args = {
        .n = n, .keys = keys, .grads = grads, .versions = versions, .taus = taus};
    return spw_ps_store_push_args(store, &args, res);
}

spw_err_t spw_ps_store_push_args(spw_ps_store_t *store, const struct spw_ps_push_args *args,
                                 struct spw_ps_push_result *res)
{
    const size_t n = args->n;
    const uint64_t *keys = args->keys;
    const float *grads = args->grads;
    const uint32_t *versions = args->versions;
    uint32_t *taus = args->taus;
    uint8_t *classes = args->classes;
    const struct spw_ps_echo *echo = args->echo;
    size_t e = 0; /* the next echo index */
    uint32_t dim = store->dim;
    struct spw_ps_push_result r = {0};
    const struct spw_ps_optim_conf *oc = &store->conf.optim;
    struct spw_ps_optim_conf dense_oc = *oc; /* the dense blocks' (pserver.lr.dense) */
    if (oc->lr_dense > 0.0f)
        dense_oc.lr = dense_oc.lr_latent = oc->lr_dense;
    if (args->dense_lr_scale > 0.0f) {
        dense_oc.lr *= args->dense_lr_scale;
        dense_oc.lr_latent *= args->dense_lr_scale;
    }
    const struct spw_ps_penalty *pen = &store->conf.penalty;
    const bool dc = pen->kind == SPW_PS_PENALTY_DC;
    const float lambda = (float)pen->lambda;
    float corrected[SPW_PS_MAX_DIM];
    /* Every penalty is 1 at tau 0 (the common case); others are computed per row. */
    const double alpha0 = spw_ps_penalty_alpha(pen, 0);
    spw_err_t ret = SPW_OK;
    for (size_t off = 0; off < n; off += store->chunk_max) {
        size_t m = n - off < store->chunk_max ? n - off : store->chunk_max;
        ret = acquire(store, keys + off, m, ACQUIRE_PUSH);
        if (ret) {
            unpin(store, m);
            break;
        }
        for (size_t i = 0; i < m; i++) {
            if (i + PREFETCH_DIST < m && store->rows[i + PREFETCH_DIST])
                prefetch_row(store, store->rows[i + PREFETCH_DIST]);
            size_t k = off + i;
            struct spw_ps_row *row = store->rows[i];
            uint32_t tau = 0;
            /* the echo of row k is its state after this push (whether applied or not) */
            bool echo_k = echo && e < echo->n && echo->idx[e] == k;
            bool counter = store->conf.counter_key && keys[k] == store->conf.counter_key;
            enum spw_ps_row_class cls =
                counter ? SPW_PS_CLASS_REST : spw_ps__stale_classify(&store->stale, keys[k], row);
            if (classes)
                classes[k] = (uint8_t)cls;
            if (!row) {
                r.unadmitted++;
                if (taus)
                    taus[k] = 0;
                goto next;
            }
            if (counter) {
                /* the counter row: a plain sum, no optimizer, no staleness penalty */
                if (!isfinite(grads[k * dim])) {
                    r.rejected++;
                    goto next;
                }
                row->data[0] += grads[k * dim];
                if (taus)
                    taus[k] = 0;
                goto applied;
            }
            if (versions) {
                uint32_t d = row->version - versions[k];
                tau = (int32_t)d < 0 ? 0 : d; /* a version from the future counts as fresh */
            }
            if (taus)
                taus[k] = tau;
            /* adaptive scales by the class's mean tau before this row joins it */
            double alpha =
                tau == 0 ? alpha0 : spw_ps_penalty_alpha_ref(pen, tau, store->stale.tau_ref[cls]);
            spw_ps__stale_observe(&store->stale, cls, tau, alpha < 0.0 ? 0.0 : alpha);
            if (alpha < 0.0) {
                r.dropped_stale++;
                goto next;
            }
            const float *g = grads + k * dim;
            if (dc && tau > 0) {
                if (args->pulled) {
                    spw_ps_dc_correct(dim, lambda, g, row->data, args->pulled + k * dim, corrected);
                    g = corrected;
                    r.dc_corrected++;
                } else {
                    r.dc_uncorrected++;
                }
            }
            if (!spw_ps__row_apply(spw_key_is_dense(keys[k]) ? &dense_oc : oc, dim, row->data,
                                   row->data + dim, g, (float)alpha)) {
                r.rejected++;
                goto next;
            }
        applied:
            row->version++;
            row->last_update = store->now_s;
            row->count++;
            row->flags |= SPW_PS_ROW_DIRTY;
            r.applied++;
        next:
            if (echo_k) { /* what a pull would return now: no second lookup of the row */
                row_out(store, row, keys[k], echo->values + e * dim, &echo->versions[e]);
                e++;
            }
        }
        unpin(store, m);
    }
    store->stats.rows_pushed += r.applied;
    store->stats.rejected_nonfinite += r.rejected;
    store->stats.dropped_stale += r.dropped_stale;
    store->stats.unadmitted += r.unadmitted;
    store->stats.dc_corrected += r.dc_corrected;
    store->stats.dc_uncorrected += r.dc_uncorrected;
    if (res)
        *res = r;
    return ret;
}

void spw_ps_store_get_staleness(const spw_ps_store_t *store, struct spw_ps_stale_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (int c = 0; c < SPW_PS_CLASSES; c++) {
        out->tau_ref[c] = store->stale.tau_ref[c];
        out->alpha_mean[c] = store->stale.alpha_mean[c];
        out->rows[c] = store->stale.rows[c];
    }
    out->top_threshold = store->stale.top_threshold;
}

spw_err_t spw_ps_store_get_row(spw_ps_store_t *store, uint64_t key, struct spw_ps_row_copy *out)
{
    spw_err_t err = acquire(store, &key, 1, ACQUIRE_LOOKUP);
    struct spw_ps_row *row = store->rows[0];
    unpin(store, 1);
    if (err)
        return err;
    if (!row)
        return SPW_ERR_NOT_FOUND;
    out->version = row->version;
    out->last_update = row->last_update;
    out->count = row->count;
    memcpy(out->data, row->data, store->row_floats * sizeof(float));
    return SPW_OK;
}

void spw_ps_store_set_now(spw_ps_store_t *store, uint32_t now_s)
{
    store->now_s = now_s;
}

static bool expired(const spw_ps_store_t *store, uint32_t last_update)
{
    return store->conf.ttl_s > 0 && store->now_s >= last_update &&
           store->now_s - last_update >= store->conf.ttl_s;
}

spw_err_t spw_ps_store_expire(spw_ps_store_t *store, size_t max_rows, size_t *evicted)
{
    size_t n = 0;
    if (evicted)
        *evicted = 0;
    if (store->conf.ttl_s == 0)
        return SPW_OK;
    rocksdb_writebatch_clear(store->wb);
    /* DRAM: delete the row and any older copy in RocksDB. */
    size_t steps = max_rows < store->high_water ? max_rows : store->high_water;
    uint32_t *gone = store->victims;
    uint32_t n_gone = 0;
    uint32_t gone_cap = store->chunk_max;
    for (size_t s = 0; s < steps && n_gone < gone_cap; s++) {
        uint32_t slot = store->ttl_hand;
        store->ttl_hand = (store->ttl_hand + 1) % store->high_water;
        struct spw_ps_row *row = slot_row(store, slot);
        if ((row->flags & (SLOT_FREE | SPW_PS_ROW_PIN)) || !expired(store, row->last_update) ||
            spw_key_is_dense(row->key)) /* a deep model's dense blocks never expire */
            continue;
        char k[8];
        spw_ps__key_encode(row->key, k);
        rocksdb_writebatch_delete(store->wb, k, 8);
        gone[n_gone++] = slot;
    }
    uint64_t *db_gone = (uint64_t *)store->miss_kbuf; /* chunk_max × 8 bytes of scratch */
    uint32_t *db_ver = store->miss_idx;
    size_t n_db_gone = 0;
    /* The cold file: records from its hand on, removed (with any older copy in RocksDB) once the
     * deletes are written; db_gone[0, n_cold_gone) are theirs. */
    if (store->cold.n > 0) {
        const struct spw_ps__cold *c = &store->cold;
        struct spw_ps__cold_pos *hand = &store->cold_hand;
        for (size_t s = 0; s < max_rows && n_db_gone < gone_cap; s++) {
            /* segment by segment, each grown or not since the hand last passed */
            if (hand->idx >= c->seg[hand->seg].cap) {
                hand->idx = 0;
                hand->seg = (hand->seg + 1) % SPW_PS_COLD_SEGS;
            }
            const struct spw_ps_row *rec = spw_ps__cold_rec(c, *hand);
            hand->idx++;
            if (!(rec->flags & SPW_PS_COLD_FULL) || !expired(store, rec->last_update) ||
                spw_key_is_dense(rec->key))
                continue;
            char k[8];
            spw_ps__key_encode(rec->key, k);
            rocksdb_writebatch_delete(store->wb, k, 8);
            db_gone[n_db_gone] = rec->key;
            db_ver[n_db_gone++] = rec->version;
        }
    }
    size_t n_cold_gone = n_db_gone;
    /* RocksDB: rows in neither DRAM nor the cold file, from the cursor on. */
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, store->ropts);
    if (store->ttl_cursor_valid)
        rocksdb_iter_seek(it, store->ttl_cursor, 8);
    else
        rocksdb_iter_seek_to_first(it);
    size_t seen = 0;
    while (seen < max_rows && n_db_gone < gone_cap && rocksdb_iter_valid(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen);
        const char *v = rocksdb_iter_value(it, &vlen);
        seen++;
        if (klen == 8 && vlen == store->value_len) {
            uint64_t key = spw_ps__key_decode(k);
            struct spw_ps_row hdr;
            memcpy((char *)&hdr + SPW_PS_DB_VALUE_OFF, v, SPW_PS_ROW_HDR - SPW_PS_DB_VALUE_OFF);
            if (idx_find(store, key, key_hash(key)) < 0 && expired(store, hdr.last_update) &&
                !spw_key_is_dense(key) &&
                (store->cold.n == 0 ||
                 !spw_ps__cold_find(&store->cold, key, &(struct spw_ps__cold_pos){0}))) {
                rocksdb_writebatch_delete(store->wb, k, 8);
                db_gone[n_db_gone] = key;
                db_ver[n_db_gone++] = hdr.version;
            }
        }
        rocksdb_iter_next(it);
    }
    if (rocksdb_iter_valid(it)) {
        size_t klen;
        const char *k = rocksdb_iter_key(it, &klen);
        if (klen == 8) {
            memcpy(store->ttl_cursor, k, 8);
            store->ttl_cursor_valid = true;
        }
    } else {
        store->ttl_cursor_valid = false;
    }
    rocksdb_iter_destroy(it);
    if (rocksdb_writebatch_count(store->wb) > 0) {
        char *err = NULL;
        rocksdb_write(store->db, store->wopts, store->wb, &err);
        if (err)
            return store_err(err, "expire");
    }
    for (size_t i = 0; i < n_cold_gone; i++) {
        struct spw_ps__cold_pos c;
        if (spw_ps__cold_find(&store->cold, db_gone[i], &c))
            spw_ps__cold_delete_at(&store->cold, c);
    }
    for (uint32_t i = 0; i < n_gone; i++) {
        struct spw_ps_row *row = slot_row(store, gone[i]);
        if (store->conf.on_evict)
            store->conf.on_evict(store->conf.evict_opaque, row->key, row->version);
        idx_delete(store, row->key);
        free_slot(store, gone[i]);
        n++;
    }
    for (size_t i = 0; i < n_db_gone; i++) {
        if (store->conf.on_evict)
            store->conf.on_evict(store->conf.evict_opaque, db_gone[i], db_ver[i]);
        n++;
    }
    store->stats.expired += n;
    if (evicted)
        *evicted = n;
    return SPW_OK;
}

/* One SST file of a large flush. It stays mapped while it is written, which keeps its pages
 * cached (the SST writer asks the kernel to drop what it wrote every megabyte, and the kernel
 * keeps mapped pages), so that hashing it for the checkpoint's CHECKSUM afterwards reads memory,
 * not the disk. Each such ask walks every page of the file written so far, so a file's cost grows
 * with the square of its size: a part is cut into several files (part_files; one file of 2^20
 * rows spent over half of a trainer's closing flush in those walks). */
struct sst_file {
    char *path;
    int fd;       /* the file, read only; -1 when not open */
    uint8_t *map; /* reserved address space (NULL: none), the file's first map_len bytes mapped
                   * there and touched; fixed, so that no mapping moves (a moved mapping's old
                   * addresses, reused by another thread's file, are a race to ThreadSanitizer,
                   * which does not see mremap) */
    size_t map_len, reserved;
};

/* One part of a large flush: a key range whose rows a thread sorts and writes to SST files of
 * consecutive key ranges. */
struct flush_part {
    const spw_ps_store_t *store; /* read only while parts run */
    struct ks *ks, *tmp;
    size_t n;
    struct sst_file *files; /* n_files */
    size_t n_files;
    spw_err_t ret;
    char err[256];
};

/* Files a part of n rows is written to: files of spw_ps__sst_file_rows rows, at most
 * SST_FILES_PER_PART of them. Every flush after the first lands its files in level 0 (they
 * overlap the rows already in the database), and RocksDB slows writes from 20 level-0 files on
 * and stops them at 36 until compactions catch up: a round of FLUSH_THREADS parts adds at most 8
 * (2 before files were bounded), against a quarter of one large file's page walks. */
static size_t part_files(size_t n)
{
    size_t per = spw_ps__sst_file_rows ? spw_ps__sst_file_rows : 1;
    size_t files = n ? (n + per - 1) / per : 1;
    return files < SST_FILES_PER_PART ? files : SST_FILES_PER_PART;
}

/* Maps (and faults in) the file up to its current end (whole pages while it grows, everything
 * once complete). Best effort: a failure only costs the pages' staying cached. */
static void pin_pages(struct sst_file *part, bool complete)
{
    struct stat sb;
    if (part->fd < 0 || !part->map || fstat(part->fd, &sb) != 0)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size_t)sb.st_size;
    if (!complete)
        len -= len % page;
    /* whole pages were mapped so far (a complete file's tail comes last) */
    if (len <= part->map_len || len > part->reserved || part->map_len % page != 0)
        return;
    if (mmap(part->map + part->map_len, len - part->map_len, PROT_READ, MAP_SHARED | MAP_FIXED,
             part->fd, (off_t)part->map_len) == MAP_FAILED)
        return;
    const volatile uint8_t *p = part->map;
    for (size_t off = part->map_len; off < len; off += page)
        (void)p[off];
    part->map_len = len;
}

/* Reserves address space for the file of n rows that f will hold (an upper bound of its size:
 * each row's key, value and block entry, plus the index, filter and footer), so that pin_pages
 * maps it in place. Best effort: without the reservation the pages are not kept. */
static void file_reserve(const spw_ps_store_t *store, struct sst_file *f, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = n * (store->value_len + 64) + ((size_t)4 << 20);
    bytes += page - bytes % page;
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    f->map = p == MAP_FAILED ? NULL : p;
    f->reserved = p == MAP_FAILED ? 0 : bytes;
    f->map_len = 0;
}

static void file_release(struct sst_file *part)
{
    if (part->map)
        munmap(part->map, part->reserved);
    if (part->fd >= 0)
        close(part->fd);
    part->map = NULL;
    part->map_len = 0;
    part->reserved = 0;
    part->fd = -1;
}

/* Hashes the file as it is now (after ingestion, which may have written into it). */
static spw_err_t file_digest(struct sst_file *part, struct spw_ps__file_digest *d)
{
    if (part->fd < 0 || spw_ps__file_identity(part->fd, d) != SPW_OK)
        return SPW_ERR_IO;
    pin_pages(part, true);
    if (!part->map || part->map_len != d->size)
        return SPW_ERR_IO;
    d->digest = XXH3_64bits(part->map, part->map_len);
    return SPW_OK;
}

/* Writes ks[0..n) (sorted) to file f as an SST file; NULL or RocksDB's error (rocksdb_free). */
static char *write_file(const spw_ps_store_t *store, const struct ks *ks, size_t n,
                        struct sst_file *f)
{
    char *err = NULL;
    file_reserve(store, f, n);
    rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(store->envopts, store->opts);
    unlink(f->path);
    rocksdb_sstfilewriter_open(w, f->path, &err);
    if (!err)
        f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    for (size_t i = 0; i < n && !err; i++) {
        if (i + PREFETCH_DIST < n)
            prefetch_row(store, ks_row(store, &ks[i + PREFETCH_DIST]));
        char k[8];
        spw_ps__key_encode(ks[i].key, k);
        rocksdb_sstfilewriter_put(w, k, 8,
                                  (const char *)ks_row(store, &ks[i]) + SPW_PS_DB_VALUE_OFF,
                                  store->value_len, &err);
        if (i % PIN_ROWS == PIN_ROWS - 1)
            pin_pages(f, false);
    }
    if (!err)
        rocksdb_sstfilewriter_finish(w, &err);
    rocksdb_sstfilewriter_destroy(w);
    if (!err)
        pin_pages(f, true);
    return err;
}

/* Sorts the part's rows and writes them to its n_files files, in equal shares. Reads the
 * store's rows and options only, so that parts can run on several threads. */
static void *write_part(void *arg)
{
    struct flush_part *part = arg;
    const spw_ps_store_t *store = part->store;
    ks_sort(part->ks, part->tmp, part->n);
    for (size_t j = 0; j < part->n_files; j++) {
        const size_t beg = part->n * j / part->n_files, end = part->n * (j + 1) / part->n_files;
        char *err = write_file(store, part->ks + beg, end - beg, &part->files[j]);
        if (err) {
            snprintf(part->err, sizeof(part->err), "writing rows to %s: %s", part->files[j].path,
                     err);
            rocksdb_free(err);
            part->ret = SPW_ERR_STORE;
            return NULL;
        }
    }
    part->ret = SPW_OK;
    return NULL;
}

/* Writes parts[0..n) (disjoint key ranges), up to FLUSH_THREADS at once, and ingests their files
 * in one step: no memtable inserts, sequential writes. RocksDB links the files into the database;
 * their digests go to the store's cache. */
static spw_err_t flush_parts(spw_ps_store_t *store, struct flush_part *parts, size_t n,
                             char *errstr, size_t errstr_size)
{
    pthread_t threads[FLUSH_THREADS];
    bool started[FLUSH_THREADS] = {false};
    /* here, on the store's thread, before any row reaches a file (the filter is not shared) */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < parts[i].n; j++)
            spw_ps__keyfilter_add(&store->on_disk, parts[i].ks[j].key);
    for (size_t i = 1; i < n; i++)
        started[i] = pthread_create(&threads[i], NULL, write_part, &parts[i]) == 0;
    write_part(&parts[0]);
    for (size_t i = 1; i < n; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            write_part(&parts[i]); /* no thread to be had: write it here */
    }
    spw_err_t ret = SPW_OK;
    for (size_t i = 0; i < n && ret == SPW_OK; i++) {
        if (parts[i].ret) {
            snprintf(errstr, errstr_size, "%s", parts[i].err);
            ret = parts[i].ret;
        }
    }
    if (ret == SPW_OK) {
        const char *paths[ROUND_FILES];
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < parts[i].n_files; j++)
                paths[k++] = parts[i].files[j].path;
        char *err = NULL;
        rocksdb_ingest_external_file(store->db, paths, k, store->ingest_opts, &err);
        if (err) {
            snprintf(errstr, errstr_size, "ingesting flushed rows: %s", err);
            rocksdb_free(err);
            ret = SPW_ERR_STORE;
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < parts[i].n_files; j++) {
            struct sst_file *f = &parts[i].files[j];
            unlink(f->path); /* gone already after a successful (moving) ingest */
            struct spw_ps__file_digest d;
            if (ret == SPW_OK && file_digest(f, &d) == SPW_OK &&
                spw_ps__digest_cache_add(&store->digests, &d) != SPW_OK)
                spw_ps__digest_cache_fini(&store->digests); /* only a cache: start over */
            file_release(f);
        }
    return ret;
}

/* Writes the rows of ks[0..n) in WriteBatches of FLUSH_BATCH; rows become clean per batch
 * written. */
static spw_err_t flush_batches(spw_ps_store_t *store, const struct ks *ks, size_t n, char *errstr,
                               size_t errstr_size)
{
    for (size_t start = 0; start < n; start += FLUSH_BATCH) {
        size_t end = n - start < FLUSH_BATCH ? n : start + FLUSH_BATCH;
        rocksdb_writebatch_clear(store->wb);
        for (size_t i = start; i < end; i++)
            put_row(store, ks_row(store, &ks[i]));
        char *err = NULL;
        rocksdb_write(store->db, store->wopts, store->wb, &err);
        rocksdb_writebatch_clear(store->wb);
        if (err) {
            snprintf(errstr, errstr_size, "writing rows: %s", err);
            rocksdb_free(err);
            return SPW_ERR_STORE;
        }
        for (size_t i = start; i < end; i++)
            ks_clean(store, &ks[i]);
        store->stats.rows_db_written += end - start;
    }
    return SPW_OK;
}

static inline bool slot_dirty(const spw_ps_store_t *store, uint32_t slot)
{
    uint32_t f = slot_row(store, slot)->flags;
    return !(f & SLOT_FREE) && (f & SPW_PS_ROW_DIRTY);
}

/* A walk over the dirty rows: the slab's slots, then the cold file's records. */
struct dirty_walk {
    uint32_t next;              /* slab slot */
    bool cold;                  /* past the slab */
    struct spw_ps__cold_pos at; /* cold-file record */
};

static bool dirty_next(const spw_ps_store_t *store, struct dirty_walk *w, struct ks *out)
{
    if (!w->cold) {
        while (w->next < store->high_water) {
            uint32_t slot = w->next++;
            if (slot_dirty(store, slot)) {
                *out = (struct ks){.key = slot_row(store, slot)->key, .slot = slot, .cold = 0};
                return true;
            }
        }
        w->cold = true;
    }
    const struct spw_ps__cold *c = &store->cold;
    if (c->n_dirty == 0 || !spw_ps__cold_next_dirty(c, &w->at))
        return false;
    *out = (struct ks){
        .key = spw_ps__cold_rec(c, w->at)->key, .slot = (uint32_t)w->at.idx, .cold = w->at.seg + 1};
    w->at.idx++;
    return true;
}

/* Writes every dirty row, in key order. Small flushes go through WriteBatches. Large ones are
 * counted into 65536 key-range buckets and cut into parts of about spw_ps__flush_part_rows rows
 * (disjoint key ranges), written FLUSH_THREADS at a time as SST files (flush_parts), each round
 * gathering its parts' rows in one pass over the slab: the scratch stays bounded and the files
 * never overlap. Rows become clean only once written. Uses 16 bytes of scratch per row of a
 * round, twice. */
static spw_err_t flush_all(spw_ps_store_t *store, char *errstr, size_t errstr_size)
{
    enum { BUCKETS = 65536 };
    spw_err_t ret = SPW_OK;
    struct ks *ks = NULL, *tmp = NULL;
    uint32_t *part_of = NULL;
    size_t *part_n = NULL;
    char *names = NULL;
    uint32_t *counts = calloc(BUCKETS, sizeof(uint32_t));
    if (!counts)
        goto out_nomem;
    /* Buckets are a monotonic function of the key ((key - base) >> shift), so that consecutive
     * buckets are key ranges: first the top 16 bits (keys are hashes), refined below when the
     * keys crowd into few buckets. */
    uint64_t base = 0, lo = UINT64_MAX, hi = 0;
    uint32_t shift = 48;
    size_t n_dirty = 0;
    struct ks e;
    for (struct dirty_walk w = {0}; dirty_next(store, &w, &e); n_dirty++) {
        lo = e.key < lo ? e.key : lo;
        hi = e.key > hi ? e.key : hi;
        counts[e.key >> shift]++;
    }
    if (n_dirty == 0)
        goto out_free;
    if (n_dirty < SPW_PS_SST_MIN_ROWS) {
        ks = malloc(n_dirty * sizeof(*ks));
        tmp = malloc(n_dirty * sizeof(*tmp));
        if (!ks || !tmp)
            goto out_nomem;
        size_t n = 0;
        for (struct dirty_walk w = {0}; dirty_next(store, &w, &e);)
            ks[n++] = e;
        ks_sort(ks, tmp, n);
        ret = flush_batches(store, ks, n, errstr, errstr_size);
        goto out_free;
    }
    size_t part_max = (n_dirty + FLUSH_THREADS - 1) / FLUSH_THREADS;
    if (part_max > spw_ps__flush_part_rows)
        part_max = spw_ps__flush_part_rows;
    uint32_t biggest = 0;
    for (uint32_t b = 0; b < BUCKETS; b++)
        biggest = counts[b] > biggest ? counts[b] : biggest;
    if (biggest > part_max / 4) {
        base = lo;
        shift = 0;
        while (((hi - lo) >> shift) >= BUCKETS)
            shift++;
        memset(counts, 0, BUCKETS * sizeof(uint32_t));
        for (struct dirty_walk w = {0}; dirty_next(store, &w, &e);)
            counts[(e.key - base) >> shift]++;
    }
    /* Parts: consecutive buckets, closed once they hold part_max rows (so at most a bucket
     * more; only keys crowded into a 65536th of their range make that large), FLUSH_THREADS of
     * them when the rows allow, so that the threads share the work. */
    part_of = malloc(BUCKETS * sizeof(uint32_t));
    if (!part_of)
        goto out_nomem;
    uint32_t n_parts = 0;
    size_t in_part = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        part_of[b] = n_parts;
        in_part += counts[b];
        if (in_part >= part_max) {
            n_parts++;
            in_part = 0;
        }
    }
    if (in_part > 0)
        n_parts++;
    else /* the trailing empty buckets belong to the last part */
        for (uint32_t b = BUCKETS; b-- > 0 && part_of[b] == n_parts;)
            part_of[b] = n_parts - 1;
    part_n = calloc(n_parts, sizeof(size_t));
    if (!part_n)
        goto out_nomem;
    for (uint32_t b = 0; b < BUCKETS; b++)
        part_n[part_of[b]] += counts[b];
    size_t cap = 0; /* rows of the largest round */
    for (uint32_t p = 0; p < n_parts; p += FLUSH_THREADS) {
        size_t rows = 0;
        for (uint32_t q = p; q < n_parts && q < p + FLUSH_THREADS; q++)
            rows += part_n[q];
        cap = rows > cap ? rows : cap;
    }
    const size_t path_len = strlen(store->db_path) + sizeof(INGEST_PREFIX) + 48;
    ks = malloc(cap * sizeof(*ks));
    tmp = malloc(cap * sizeof(*tmp));
    names = malloc(ROUND_FILES * path_len);
    if (!ks || !tmp || !names)
        goto out_nomem;
    for (uint32_t first = 0; first < n_parts && ret == SPW_OK; first += FLUSH_THREADS) {
        uint32_t n_round = n_parts - first < FLUSH_THREADS ? n_parts - first : FLUSH_THREADS;
        struct flush_part parts[FLUSH_THREADS];
        struct sst_file files[ROUND_FILES];
        size_t fill[FLUSH_THREADS], off = 0, n_files = 0;
        for (uint32_t i = 0; i < n_round; i++) {
            memset(&parts[i], 0, sizeof(parts[i]));
            parts[i].store = store;
            parts[i].ks = ks + off;
            parts[i].tmp = tmp + off;
            parts[i].files = files + n_files;
            parts[i].n_files = part_files(part_n[first + i]);
            for (size_t j = 0; j < parts[i].n_files; j++, n_files++) {
                files[n_files] = (struct sst_file){.path = names + n_files * path_len, .fd = -1};
                snprintf(files[n_files].path, path_len, "%s/%s%u-%zu.tmp", store->db_path,
                         INGEST_PREFIX, i, j);
            }
            fill[i] = 0;
            off += part_n[first + i];
        }
        for (struct dirty_walk w = {0}; dirty_next(store, &w, &e);) {
            uint32_t p = part_of[(e.key - base) >> shift];
            if (p >= first && p < first + n_round)
                parts[p - first].ks[fill[p - first]++] = e;
        }
        for (uint32_t i = 0; i < n_round; i++)
            parts[i].n = fill[i];
        ret = flush_parts(store, parts, n_round, errstr, errstr_size);
        if (ret == SPW_OK) {
            for (size_t i = 0; i < off; i++)
                ks_clean(store, &ks[i]);
            store->stats.rows_db_written += off;
        }
    }
    goto out_free;

out_nomem:
    snprintf(errstr, errstr_size, "out of memory");
    ret = SPW_ERR_NOMEM;
out_free:
    free(ks);
    free(tmp);
    free(counts);
    free(part_of);
    free(part_n);
    free(names);
    return ret;
}

spw_err_t spw_ps_store_flush(spw_ps_store_t *store)
{
    char errstr[512];
    spw_err_t err = flush_all(store, errstr, sizeof(errstr));
    if (err)
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 1000, "flush failed", "path=%s err=\"%s\"",
                            store->db_path, errstr);
    return err;
}

void spw_ps_store_get_stats(const spw_ps_store_t *store, struct spw_ps_store_stats *stats)
{
    *stats = store->stats;
    stats->rows_dram = store->n_rows;
    stats->rows_dram_max = store->max_rows;
    stats->bytes_dram = (uint64_t)store->high_water * store->stride +
                        (store->idx_mask + 1) * sizeof(struct idx_ent);
    stats->row_bytes = store->stride;
    stats->rows_cold = store->cold.n;
    stats->bytes_cold = store->cold.bytes;
}

uint64_t spw_ps_store_rows_on_disk(spw_ps_store_t *store)
{
    uint64_t v = 0;
    if (rocksdb_property_int(store->db, "rocksdb.estimate-num-keys", &v) != 0)
        return 0;
    return v > 0 ? v - 1 : 0; /* less the meta key */
}

char *spw_ps__store_property(spw_ps_store_t *store, const char *name)
{
    return rocksdb_property_value(store->db, name);
}

bool spw_ps__store_wait_idle(spw_ps_store_t *store, uint32_t timeout_ms)
{
    static const char *const busy[] = {"rocksdb.mem-table-flush-pending",
                                       "rocksdb.compaction-pending", "rocksdb.num-running-flushes",
                                       "rocksdb.num-running-compactions"};
    uint64_t deadline = spw_time_mono_ms() + timeout_ms;
    for (;;) {
        bool idle = true;
        for (size_t i = 0; i < sizeof(busy) / sizeof(busy[0]) && idle; i++) {
            uint64_t v = 0;
            idle = rocksdb_property_int(store->db, busy[i], &v) == 0 && v == 0;
        }
        if (idle)
            return true;
        if (spw_time_mono_ms() >= deadline)
            return false;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Exposed to checkpoint code in this file only. */
static spw_err_t check_meta(spw_ps_store_t *store, char *errstr, size_t errstr_size)
{
    char want[128];
    snprintf(want, sizeof(want), SPW_PS_META_FORMAT, store->dim,
             spw_ps_optimizer_name(store->conf.optim.kind));
    char *err = NULL;
    size_t vlen = 0;
    char *val =
        rocksdb_get(store->db, store->ropts, SPW_PS_META_KEY, SPW_PS_META_KEY_LEN, &vlen, &err);
    if (err) {
        snprintf(errstr, errstr_size, "rocksdb get meta: %s", err);
        rocksdb_free(err);
        return SPW_ERR_STORE;
    }
    if (val) {
        bool same = vlen == strlen(want) && memcmp(val, want, vlen) == 0;
        if (!same)
            snprintf(errstr, errstr_size, "database %s holds '%.*s', configured '%s'",
                     store->db_path, (int)(vlen > 100 ? 100 : vlen), val, want);
        rocksdb_free(val);
        return same ? SPW_OK : SPW_ERR_INVALID;
    }
    rocksdb_put(store->db, store->wopts, SPW_PS_META_KEY, SPW_PS_META_KEY_LEN, want, strlen(want),
                &err);
    if (err) {
        snprintf(errstr, errstr_size, "rocksdb put meta: %s", err);
        rocksdb_free(err);
        return SPW_ERR_STORE;
    }
    return SPW_OK;
}

/* Whether the database holds a row (an 8-byte key; the meta key is shorter). */
static bool db_has_rows(spw_ps_store_t *store)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, store->ropts);
    bool rows = false;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it) && !rows; rocksdb_iter_next(it)) {
        size_t klen;
        (void)rocksdb_iter_key(it, &klen);
        rows = klen == 8;
    }
    char *err = NULL;
    rocksdb_iter_get_error(it, &err);
    if (err) { /* cannot tell: as if it had */
        rocksdb_free(err);
        rows = true;
    }
    rocksdb_iter_destroy(it);
    return rows;
}

static uint32_t pow2_ceil_shift(uint64_t v)
{
    uint32_t s = 0;
    while ((1ull << s) < v)
        s++;
    return s;
}

/* RocksDB options for rows: values are incompressible floats and most reads are point lookups
 * of keys that may be absent (new keys) or in any level, so no compression, whole-key bloom
 * filters in the tables and the memtable, XXH3 block checksums (far cheaper to verify than this
 * build's CRC32c), and mmap reads (no read syscall and copy per block). A point lookup in a data
 * block goes through the block's hash index straight to its row: every row is a restart point
 * (with the default 16, the lookup parsed up to 16 rows of about 160 bytes, a cache line or
 * more each) and the index has 4 buckets per row, so that few rows share one (a shared bucket
 * falls back to a binary search). No block cache: with mmap reads RocksDB never fills it (its
 * blocks do not own their bytes), so each read only paid a lookup in it. rocksdb.options,
 * applied on top, may change any of them. */
rocksdb_options_t *spw_ps__db_options(void)
{
    rocksdb_options_t *base = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(base, 1);
    rocksdb_options_increase_parallelism(base, 2);
    rocksdb_options_set_compression(base, rocksdb_no_compression);
    /* Evictions insert rows in random key order: a small memtable keeps those inserts in cache
     * (and RocksDB's own memory small); flushes and compactions run on background threads. */
    rocksdb_options_set_write_buffer_size(base, 8u << 20);
    rocksdb_options_set_allow_mmap_reads(base, 1);
    rocksdb_options_set_memtable_whole_key_filtering(base, 1);
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(base, 0.02);
    rocksdb_block_based_table_options_t *table = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_filter_policy(
        table, rocksdb_filterpolicy_create_bloom_full(BLOOM_BITS));
    rocksdb_block_based_options_set_data_block_index_type(
        table, rocksdb_block_based_table_data_block_index_type_binary_search_and_hash);
    rocksdb_block_based_options_set_block_restart_interval(table, 1);
    rocksdb_block_based_options_set_data_block_hash_ratio(table, 0.25);
    rocksdb_block_based_options_set_no_block_cache(table, 1);
    rocksdb_block_based_options_set_checksum(table, 4 /* kXXH3 */);
    rocksdb_options_set_block_based_table_factory(base, table);
    rocksdb_block_based_options_destroy(table);
    /* An eviction's rows go into the memtable in key order, but far apart (a few thousand keys
     * spread over the whole key space): without a hint every insert searches the skiplist from
     * its top level, a cache miss per step. One insert hint for all keys (a prefix extractor of
     * length 0) lets RocksDB walk on from the previous insert instead (pserver_bench (e): about
     * 30% less time per evicted row). No C setter exists, hence the options string. */
    rocksdb_options_t *opts = rocksdb_options_create();
    char *err = NULL;
    rocksdb_get_options_from_string(base, SPW_PS_INSERT_HINT_OPTION, opts, &err);
    if (err) { /* an older RocksDB without the option: keep the plain inserts */
        rocksdb_free(err);
        rocksdb_options_destroy(opts);
        return base;
    }
    rocksdb_options_destroy(base);
    return opts;
}

/* Removes the SST files a flush interrupted by a crash left in db_path (INGEST_PREFIX*). */
static void remove_ingest_files(const char *db_path)
{
    DIR *d = opendir(db_path);
    if (!d)
        return;
    const int dfd = dirfd(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, INGEST_PREFIX, sizeof(INGEST_PREFIX) - 1) == 0)
            unlinkat(dfd, e->d_name, 0);
    closedir(d);
}

spw_ps_store_t *spw_ps_store_open(const struct spw_ps_store_conf *conf, char *errstr,
                                  size_t errstr_size)
{
    if (conf->dim == 0 || conf->dim > SPW_PS_MAX_DIM) {
        snprintf(errstr, errstr_size, "dim %u outside 1..%u", conf->dim, SPW_PS_MAX_DIM);
        return NULL;
    }
    spw_ps_store_t *store = calloc(1, sizeof(*store));
    if (!store) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    store->conf = *conf;
    store->conf.db_path = NULL;
    store->conf.rocksdb_options = NULL;
    store->dim = conf->dim;
    store->row_floats = conf->dim + spw_ps_slot_floats(conf->optim.kind, conf->dim);
    store->stride = (SPW_PS_ROW_HDR + store->row_floats * sizeof(float) + 7) & ~(size_t)7;
    store->value_len = SPW_PS_ROW_HDR - SPW_PS_DB_VALUE_OFF + store->row_floats * sizeof(float);
    store->now_s = (uint32_t)(spw_time_wall_ms() / 1000);
    store->db_path = strdup(conf->db_path);
    if (!store->db_path)
        goto out_nomem;

    /* Rows R fit the budget with slabs (stride) and the largest index, at load <= 3/4. The
     * index starts small and doubles with the rows, so memory follows the rows held. */
    uint64_t budget = conf->memory_bytes;
    uint64_t per_row = store->stride + 11;
    uint64_t rows = budget / per_row;
    uint32_t idx_shift = pow2_ceil_shift(rows * 4 / 3 + 1);
    if (idx_shift < 10)
        idx_shift = 10;
    uint64_t idx_bytes = (1ull << idx_shift) * sizeof(struct idx_ent);
    rows = budget > idx_bytes ? (budget - idx_bytes) / store->stride : 0;
    if (rows > (1ull << idx_shift) * 3 / 4)
        rows = (1ull << idx_shift) * 3 / 4;
    if (rows > UINT32_MAX / 2)
        rows = UINT32_MAX / 2;
    if (rows < 64) {
        snprintf(errstr, errstr_size, "memory budget %" PRIu64 " bytes holds fewer than 64 rows",
                 budget);
        goto out_free_store;
    }
    store->max_rows = (uint32_t)rows;
    store->idx_cap_max = 1ull << idx_shift;
    uint64_t idx_start = IDX_MIN < store->idx_cap_max ? IDX_MIN : store->idx_cap_max;
    store->idx_mask = idx_start - 1;
    store->chunk_max = store->max_rows / 4 < 4096 ? store->max_rows / 4 : 4096;
    store->slab_bytes = (size_t)store->max_rows * store->stride;
    store->slab = spw_ps__big_alloc(store->slab_bytes);
    store->idx = spw_ps__big_alloc(idx_start * sizeof(*store->idx));
    size_t c = store->chunk_max > EVICT_BATCH ? store->chunk_max : EVICT_BATCH;
    store->rows = malloc(c * sizeof(*store->rows));
    store->hashes = malloc(c * sizeof(uint32_t));
    store->miss_idx = malloc(c * sizeof(uint32_t));
    store->miss_kbuf = malloc(c * 8);
    store->miss_ks = malloc(c * sizeof(struct ks));
    store->miss_tmp = malloc(c * sizeof(struct ks));
    store->miss_kptr = malloc(c * sizeof(char *));
    store->miss_klen = malloc(c * sizeof(size_t));
    store->miss_val = malloc(c * sizeof(*store->miss_val));
    store->miss_len = malloc(c * sizeof(size_t));
    store->miss_vals = malloc(c * store->value_len);
    store->miss_err = malloc(c * sizeof(char *));
    store->victims = malloc(c * sizeof(uint32_t));
    store->evict_ks = malloc(EVICT_BATCH * sizeof(struct ks));
    store->evict_tmp = malloc(EVICT_BATCH * sizeof(struct ks));
    if (!store->idx || !store->slab || !store->rows || !store->hashes || !store->miss_idx ||
        !store->miss_kbuf || !store->miss_ks || !store->miss_tmp || !store->miss_kptr ||
        !store->miss_klen || !store->miss_val || !store->miss_len || !store->miss_vals ||
        !store->miss_err || !store->victims || !store->evict_ks || !store->evict_tmp)
        goto out_nomem;

    store->admit = conf->admit_min_count > 1;
    spw_ps__stale_init(&store->stale);
    spw_ps__row_init_mixes(conf->seed, store->dim, store->init_mix);
    if (store->admit &&
        spw_ps__sketch_init(&store->sketch, store->max_rows * 4u, SKETCH_DEPTH) != SPW_OK)
        goto out_nomem;

    if (mkdir(store->db_path, 0755) != 0 && errno != EEXIST) {
        snprintf(errstr, errstr_size, "mkdir %s: %s", store->db_path, strerror(errno));
        goto out_free_store;
    }
    remove_ingest_files(store->db_path); /* left by a crash during a flush */
    rocksdb_options_t *base = spw_ps__db_options();
    if (conf->rocksdb_options && conf->rocksdb_options[0]) {
        char *err = NULL;
        store->opts = rocksdb_options_create();
        rocksdb_get_options_from_string(base, conf->rocksdb_options, store->opts, &err);
        rocksdb_options_destroy(base);
        if (err) {
            snprintf(errstr, errstr_size, "rocksdb.options: %s", err);
            rocksdb_free(err);
            goto out_free_store;
        }
    } else {
        store->opts = base;
    }
    store->ropts = rocksdb_readoptions_create();
    store->wopts = rocksdb_writeoptions_create();
    /* Durability comes from checkpoints plus Kafka replay, not from a WAL
     * (docs/ARCHITECTURE.md §3). */
    rocksdb_writeoptions_disable_WAL(store->wopts, 1);
    store->wb = rocksdb_writebatch_create();
    store->envopts = rocksdb_envoptions_create();
    store->ingest_opts = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(store->ingest_opts, 1);
    char *err = NULL;
    const char *cf_names[1] = {"default"};
    const rocksdb_options_t *cf_opts[1] = {store->opts};
    rocksdb_column_family_handle_t *cfs[1] = {NULL};
    store->db =
        rocksdb_open_column_families(store->opts, store->db_path, 1, cf_names, cf_opts, cfs, &err);
    store->cf = cfs[0];
    if (err) {
        snprintf(errstr, errstr_size, "rocksdb open %s: %s", store->db_path, err);
        rocksdb_free(err);
        store->db = NULL;
        goto out_free_store;
    }
    if (check_meta(store, errstr, errstr_size) != SPW_OK)
        goto out_free_store;
    /* The filter of keys on disk is exact only from an empty database on; one that holds rows
     * (a restore, a restart) is read for every key as before. Eight keys per DRAM row: a model
     * up to 8x DRAM (evicted rows) before the filter gives up. */
    uint64_t cap = (uint64_t)store->max_rows * 8u;
    if (spw_ps__keyfilter_init(&store->on_disk, cap < (1u << 16) ? 1u << 16 : cap,
                               !db_has_rows(store)) != SPW_OK)
        goto out_nomem;
    if (!conf->cold_off) {
        size_t len = strlen(store->db_path) + sizeof(COLD_NAME) + 1;
        char *path = malloc(len);
        store->cold_row = malloc(store->stride);
        if (!path || !store->cold_row) {
            free(path);
            goto out_nomem;
        }
        snprintf(path, len, "%s/%s", store->db_path, COLD_NAME);
        /* A database that holds more rows than DRAM (a restore, a restart) will send the rest
         * here: room for them from the start, so that the file does not double (stopping the
         * shard's thread each time) while it fills. */
        uint64_t on_disk = spw_ps_store_rows_on_disk(store);
        uint64_t hint = on_disk > store->max_rows ? (on_disk - store->max_rows) / 7 * 10 : 0;
        spw_err_t cerr =
            spw_ps__cold_open(&store->cold, path, store->stride,
                              hint > COLD_START ? hint : COLD_START, errstr, errstr_size);
        free(path);
        if (cerr)
            goto out_free_store;
    }
    return store;

out_nomem:
    snprintf(errstr, errstr_size, "out of memory");
out_free_store:
    spw_ps_store_discard(store);
    return NULL;
}

static void close_store(spw_ps_store_t *store, bool flush)
{
    if (!store)
        return;
    if (store->db) {
        if (flush && spw_ps_store_flush(store) != SPW_OK)
            SPW_ERROR("flush on close failed", "path=%s", store->db_path);
        if (store->cf)
            rocksdb_column_family_handle_destroy(store->cf);
        rocksdb_close(store->db);
    }
    spw_ps__cold_close(&store->cold);
    free(store->cold_row);
    if (store->wb)
        rocksdb_writebatch_destroy(store->wb);
    if (store->wopts)
        rocksdb_writeoptions_destroy(store->wopts);
    if (store->ropts)
        rocksdb_readoptions_destroy(store->ropts);
    if (store->envopts)
        rocksdb_envoptions_destroy(store->envopts);
    if (store->ingest_opts)
        rocksdb_ingestexternalfileoptions_destroy(store->ingest_opts);
    if (store->opts)
        rocksdb_options_destroy(store->opts);
    spw_ps__sketch_fini(&store->sketch);
    spw_ps__keyfilter_fini(&store->on_disk);
    spw_ps__big_free(store->slab, store->slab_bytes);
    spw_ps__big_free(store->idx, (store->idx_mask + 1) * sizeof(*store->idx));
    free(store->rows);
    free(store->hashes);
    free(store->miss_idx);
    free(store->miss_kbuf);
    free(store->miss_ks);
    free(store->miss_tmp);
    free(store->miss_kptr);
    free(store->miss_klen);
    free(store->miss_val);
    free(store->miss_len);
    free(store->miss_vals);
    free(store->miss_err);
    free(store->victims);
    free(store->evict_ks);
    free(store->evict_tmp);
    free(store->db_path);
    spw_ps__digest_cache_fini(&store->digests);
    free(store);
}

void spw_ps_store_close(spw_ps_store_t *store)
{
    close_store(store, true);
}

void spw_ps_store_discard(spw_ps_store_t *store)
{
    close_store(store, false);
}

/* ---- checkpoints ---- */

struct spw_ps_sketch *spw_ps__store_sketch(spw_ps_store_t *store)
{
    return store->admit ? &store->sketch : NULL;
}

void spw_ps__store_restore_sketch(spw_ps_store_t *store, const char *dir)
{
    if (!store->admit)
        return;
    char why[SPW_CKPT_PATH_MAX + 160];
    spw_err_t err = spw_ps__sketch_load(dir, &store->sketch, why, sizeof(why));
    if (err == SPW_OK)
        SPW_INFO("admission sketch restored", "path=%s width=%u depth=%u", dir, store->sketch.width,
                 store->sketch.depth);
    else if (err == SPW_ERR_NOT_FOUND)
        SPW_WARN("checkpoint without an admission sketch (older format, or rewritten by reshard): "
                 "it starts empty",
                 "path=%s", dir);
    else
        SPW_ERROR("admission sketch not restored: it starts empty", "reason=\"%s\"", why);
}

spw_err_t spw_ps_store_checkpoint(spw_ps_store_t *store, const char *root, uint64_t epoch,
                                  struct spw_ps_checkpoint_info *info, char *errstr,
                                  size_t errstr_size)
{
    return spw_ps__store_checkpoint(store, root, epoch, NULL, info, errstr, errstr_size);
}

spw_err_t spw_ps__store_checkpoint(spw_ps_store_t *store, const char *root, uint64_t epoch,
                                   const struct spw_ps__dedup *dedup,
                                   struct spw_ps_checkpoint_info *info, char *errstr,
                                   size_t errstr_size)
{
    char parent[4096], final[4096], tmp[4096];
    if (spw_ckpt_epoch_path(parent, sizeof(parent), root, epoch) != SPW_OK ||
        spw_ckpt_shard_path(final, sizeof(final), root, epoch, store->conf.shard) != SPW_OK ||
        spw_ckpt_shard_tmp_path(tmp, sizeof(tmp), root, epoch, store->conf.shard) != SPW_OK) {
        snprintf(errstr, errstr_size, "checkpoint path too long");
        return SPW_ERR_INVALID;
    }
    struct stat st;
    if (stat(final, &st) == 0) {
        snprintf(errstr, errstr_size, "checkpoint %s exists", final);
        return SPW_ERR_EXISTS;
    }
    char ferr[512];
    spw_err_t err = flush_all(store, ferr, sizeof(ferr));
    if (err) {
        snprintf(errstr, errstr_size, "flushing dirty rows: %s", ferr);
        return err;
    }
    if (spw_fs_mkdir_p(parent) != SPW_OK) {
        snprintf(errstr, errstr_size, "mkdir %s: %s", parent, strerror(errno));
        return SPW_ERR_IO;
    }
    char hex[17];
    uint64_t bytes = 0;
    err = spw_ps__checkpoint_db(store->db, tmp, final, spw_ps__store_sketch(store), dedup,
                                &store->digests, hex, &bytes, errstr, errstr_size);
    if (err)
        return err;
    if (info) {
        info->epoch = epoch;
        info->rows = spw_ps_store_rows_on_disk(store);
        info->bytes = bytes;
        snprintf(info->path, sizeof(info->path), "%s", final);
        memcpy(info->checksum, hex, sizeof(info->checksum));
    }
    return SPW_OK;
}
