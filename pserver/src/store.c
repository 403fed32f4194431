/* The row store: a DRAM hot table (open addressing over u64 keys, rows in slabs, CLOCK eviction)
 * over a RocksDB tier, with admission by count-min sketch and TTL expiry. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <rocksdb/c.h>

#include "ps_int.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define SLAB_BYTES   (1u << 20)
#define EVICT_BATCH  2048u
#define FLUSH_BATCH  4096u
#define SKETCH_DEPTH 4u
#define META_KEY     "\0meta"
#define META_KEY_LEN 5u
#define SLOT_FREE    8u /* flags bit of a slot on the free list */
#define META_FORMAT  "sparrow-ps 1 dim=%u optimizer=%s"

/* Owned by one thread (see pserver.h). */
struct spw_ps_store {
    struct spw_ps_store_conf conf;
    char *db_path;
    uint32_t dim;
    size_t row_floats; /* dim + slots */
    size_t stride;     /* bytes per row in a slab */
    size_t value_len;  /* bytes of a RocksDB value */

    /* Index: idx_slot[i] is slot + 1 of the row whose key is idx_key[i]; 0 marks empty. */
    uint64_t *idx_key;
    uint32_t *idx_slot;
    uint64_t idx_mask;

    /* Slabs of rows_per_slab (a power of two) rows; slots are handed out up to max_rows. */
    uint8_t **slabs;
    size_t n_slabs;
    uint32_t slab_shift;
    uint32_t high_water; /* slots ever handed out */
    uint32_t *free_slots;
    uint32_t n_free;
    uint32_t max_rows;
    uint32_t n_rows;
    uint32_t clock_hand;
    uint32_t chunk_max; /* keys per acquire round (a quarter of max_rows) */

    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_writebatch_t *wb;

    bool admit;
    struct spw_ps_sketch sketch;
    uint32_t now_s;

    /* Scratch for one chunk, sized chunk_max. */
    struct spw_ps_row **rows;
    uint32_t *miss_idx;
    char *miss_kbuf;
    const char **miss_kptr;
    size_t *miss_klen;
    char **miss_val;
    size_t *miss_vlen;
    char **miss_err;
    uint32_t *victims;

    /* TTL sweep cursors. */
    uint32_t ttl_hand;
    char ttl_cursor[8];
    bool ttl_cursor_valid;

    struct spw_ps_store_stats stats;
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static inline struct spw_ps_row *slot_row(const spw_ps_store_t *store, uint32_t slot)
{
    uint32_t mask = (1u << store->slab_shift) - 1;
    return (struct spw_ps_row *)(store->slabs[slot >> store->slab_shift] +
                                 (size_t)(slot & mask) * store->stride);
}

/* Index position of key, or -1. */
static inline int64_t idx_find(const spw_ps_store_t *store, uint64_t key)
{
    uint64_t i = mix(key) & store->idx_mask;
    for (;;) {
        uint32_t s = store->idx_slot[i];
        if (s == 0)
            return -1;
        if (store->idx_key[i] == key)
            return (int64_t)i;
        i = (i + 1) & store->idx_mask;
    }
}

static inline void idx_insert(spw_ps_store_t *store, uint64_t key, uint32_t slot)
{
    uint64_t i = mix(key) & store->idx_mask;
    while (store->idx_slot[i] != 0)
        i = (i + 1) & store->idx_mask;
    store->idx_key[i] = key;
    store->idx_slot[i] = slot + 1;
}

/* Backward-shift deletion keeps linear probing free of tombstones. */
static void idx_delete_at(spw_ps_store_t *store, uint64_t i)
{
    uint64_t mask = store->idx_mask;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (store->idx_slot[j] == 0)
            break;
        uint64_t home = mix(store->idx_key[j]) & mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        bool in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_between) {
            store->idx_key[i] = store->idx_key[j];
            store->idx_slot[i] = store->idx_slot[j];
            i = j;
        }
    }
    store->idx_slot[i] = 0;
}

static void idx_delete(spw_ps_store_t *store, uint64_t key)
{
    int64_t i = idx_find(store, key);
    if (i >= 0)
        idx_delete_at(store, (uint64_t)i);
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
    store->free_slots[store->n_free++] = slot;
    store->n_rows--;
}

/* CLOCK sweep: evicts up to EVICT_BATCH unpinned rows, writing dirty ones in one WriteBatch. */
static spw_err_t evict_some(spw_ps_store_t *store)
{
    uint32_t want = store->max_rows / 64;
    if (want > EVICT_BATCH)
        want = EVICT_BATCH;
    if (want == 0)
        want = 1;
    uint32_t n = 0;
    uint64_t steps = 0, limit = 2ull * store->high_water + 1;
    rocksdb_writebatch_clear(store->wb);
    while (n < want && steps < limit) {
        uint32_t slot = store->clock_hand;
        store->clock_hand = (store->clock_hand + 1) % store->high_water;
        steps++;
        struct spw_ps_row *row = slot_row(store, slot);
        if (row->flags & (SLOT_FREE | SPW_PS_ROW_PIN))
            continue;
        if (row->flags & SPW_PS_ROW_REF) {
            row->flags &= ~SPW_PS_ROW_REF;
            continue;
        }
        if (row->flags & SPW_PS_ROW_DIRTY) {
            char k[8];
            spw_ps__key_encode(row->key, k);
            rocksdb_writebatch_put(store->wb, k, 8, (const char *)row + SPW_PS_DB_VALUE_OFF,
                                   store->value_len);
        }
        row->flags |= SPW_PS_ROW_PIN; /* chosen: not picked twice in this sweep */
        store->victims[n++] = slot;
    }
    if (n == 0)
        return SPW_ERR_NOMEM;
    if (rocksdb_writebatch_count(store->wb) > 0) {
        char *err = NULL;
        rocksdb_write(store->db, store->wopts, store->wb, &err);
        if (err) {
            for (uint32_t i = 0; i < n; i++)
                slot_row(store, store->victims[i])->flags &= ~SPW_PS_ROW_PIN;
            return store_err(err, "evict");
        }
        store->stats.rows_db_written += (uint64_t)rocksdb_writebatch_count(store->wb);
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = store->victims[i];
        idx_delete(store, slot_row(store, slot)->key);
        free_slot(store, slot);
    }
    store->stats.evictions += n;
    return SPW_OK;
}

/* A free slot for a new row (evicting when DRAM is full). */
static spw_err_t alloc_slot(spw_ps_store_t *store, uint32_t *slot)
{
    if (store->n_free == 0 && store->high_water == store->max_rows) {
        spw_err_t err = evict_some(store);
        if (err)
            return err;
    }
    if (store->n_free > 0) {
        *slot = store->free_slots[--store->n_free];
    } else {
        uint32_t s = store->high_water;
        size_t slab = s >> store->slab_shift;
        if (slab >= store->n_slabs) {
            uint8_t *mem = aligned_alloc(64, (size_t)store->stride << store->slab_shift);
            if (!mem)
                return SPW_ERR_NOMEM;
            store->slabs[store->n_slabs++] = mem;
        }
        store->high_water++;
        *slot = s;
    }
    store->n_rows++;
    return SPW_OK;
}

enum acquire_mode {
    ACQUIRE_PULL,   /* create admitted rows; sketch read only */
    ACQUIRE_PUSH,   /* count a sighting; create admitted rows */
    ACQUIRE_LOOKUP, /* never create */
};

static spw_err_t insert_row(spw_ps_store_t *store, uint64_t key, const char *value,
                            struct spw_ps_row **out)
{
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
        spw_ps__row_init(&store->conf.optim, store->dim, store->conf.seed, key, row->data);
        store->stats.rows_created++;
    }
    row->key = key;
    row->flags = SPW_PS_ROW_REF | SPW_PS_ROW_PIN;
    idx_insert(store, key, slot);
    *out = row;
    return SPW_OK;
}

/* Finds or loads the rows of keys[0..n) (n <= chunk_max) into store->rows, pinned; NULL for keys
 * without a row (unadmitted, or absent in LOOKUP mode). The caller unpins with unpin(). */
static spw_err_t acquire(spw_ps_store_t *store, const uint64_t *keys, size_t n,
                         enum acquire_mode mode)
{
    struct spw_ps_row **rows = store->rows;
    size_t n_miss = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t pos = idx_find(store, keys[i]);
        if (pos >= 0) {
            struct spw_ps_row *row = slot_row(store, store->idx_slot[pos] - 1);
            row->flags |= SPW_PS_ROW_REF | SPW_PS_ROW_PIN;
            rows[i] = row;
        } else {
            rows[i] = NULL;
            spw_ps__key_encode(keys[i], store->miss_kbuf + 8 * n_miss);
            store->miss_kptr[n_miss] = store->miss_kbuf + 8 * n_miss;
            store->miss_klen[n_miss] = 8;
            store->miss_idx[n_miss++] = (uint32_t)i;
        }
    }
    if (n_miss == 0)
        return SPW_OK;
    rocksdb_multi_get(store->db, store->ropts, n_miss, store->miss_kptr, store->miss_klen,
                      store->miss_val, store->miss_vlen, store->miss_err);
    spw_err_t ret = SPW_OK;
    for (size_t m = 0; m < n_miss; m++) {
        uint32_t i = store->miss_idx[m];
        char *val = store->miss_val[m];
        if (store->miss_err[m]) {
            if (ret == SPW_OK)
                ret = store_err(store->miss_err[m], "multi_get");
            else
                rocksdb_free(store->miss_err[m]);
            rocksdb_free(val);
            continue;
        }
        if (ret != SPW_OK) {
            rocksdb_free(val);
            continue;
        }
        /* A key repeated in the request may have been loaded by an earlier miss. */
        int64_t pos = idx_find(store, keys[i]);
        if (pos >= 0) {
            struct spw_ps_row *row = slot_row(store, store->idx_slot[pos] - 1);
            row->flags |= SPW_PS_ROW_REF | SPW_PS_ROW_PIN;
            rows[i] = row;
            rocksdb_free(val);
            continue;
        }
        if (val) {
            if (store->miss_vlen[m] != store->value_len) {
                SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 1000, "corrupt row in rocksdb",
                                    "key=%" PRIu64 " len=%zu want=%zu", keys[i],
                                    store->miss_vlen[m], store->value_len);
                rocksdb_free(val);
                ret = SPW_ERR_CORRUPT;
                continue;
            }
            store->stats.db_reads++;
            ret = insert_row(store, keys[i], val, &rows[i]);
            rocksdb_free(val);
            continue;
        }
        store->stats.db_misses++;
        if (mode == ACQUIRE_LOOKUP)
            continue;
        if (store->admit) {
            uint32_t c = mode == ACQUIRE_PUSH ? spw_ps__sketch_add(&store->sketch, keys[i])
                                              : spw_ps__sketch_get(&store->sketch, keys[i]);
            if (c < store->conf.admit_min_count)
                continue;
            store->stats.admitted++;
        }
        ret = insert_row(store, keys[i], NULL, &rows[i]);
    }
    return ret;
}

static void unpin(spw_ps_store_t *store, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (store->rows[i])
            store->rows[i]->flags &= ~SPW_PS_ROW_PIN;
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
            float *dst = values + (off + i) * dim;
            struct spw_ps_row *row = store->rows[i];
            if (row) {
                memcpy(dst, row->data, dim * sizeof(float));
                if (versions)
                    versions[off + i] = row->version;
            } else {
                spw_ps__row_init(&store->conf.optim, dim, store->conf.seed, keys[off + i], dst);
                if (versions)
                    versions[off + i] = 0;
                store->stats.pulls_unadmitted++;
            }
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
    uint32_t dim = store->dim;
    struct spw_ps_push_result r = {0};
    const struct spw_ps_optim_conf *oc = &store->conf.optim;
    spw_err_t ret = SPW_OK;
    for (size_t off = 0; off < n; off += store->chunk_max) {
        size_t m = n - off < store->chunk_max ? n - off : store->chunk_max;
        ret = acquire(store, keys + off, m, ACQUIRE_PUSH);
        if (ret) {
            unpin(store, m);
            break;
        }
        for (size_t i = 0; i < m; i++) {
            size_t k = off + i;
            struct spw_ps_row *row = store->rows[i];
            uint32_t tau = 0;
            if (!row) {
                r.unadmitted++;
                if (taus)
                    taus[k] = 0;
                continue;
            }
            if (versions) {
                uint32_t d = row->version - versions[k];
                tau = (int32_t)d < 0 ? 0 : d; /* a version from the future counts as fresh */
            }
            if (taus)
                taus[k] = tau;
            double alpha = spw_ps_penalty_alpha(&store->conf.penalty, tau);
            if (alpha < 0.0) {
                r.dropped_stale++;
                continue;
            }
            if (!spw_ps__row_apply(oc, dim, row->data, row->data + dim, grads + k * dim,
                                   (float)alpha)) {
                r.rejected++;
                continue;
            }
            row->version++;
            row->last_update = store->now_s;
            row->count++;
            row->flags |= SPW_PS_ROW_DIRTY;
            r.applied++;
        }
        unpin(store, m);
    }
    store->stats.rows_pushed += r.applied;
    store->stats.rejected_nonfinite += r.rejected;
    store->stats.dropped_stale += r.dropped_stale;
    store->stats.unadmitted += r.unadmitted;
    if (res)
        *res = r;
    return ret;
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
        if ((row->flags & (SLOT_FREE | SPW_PS_ROW_PIN)) || !expired(store, row->last_update))
            continue;
        char k[8];
        spw_ps__key_encode(row->key, k);
        rocksdb_writebatch_delete(store->wb, k, 8);
        gone[n_gone++] = slot;
    }
    /* RocksDB: rows not in DRAM, from the cursor on. */
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, store->ropts);
    if (store->ttl_cursor_valid)
        rocksdb_iter_seek(it, store->ttl_cursor, 8);
    else
        rocksdb_iter_seek_to_first(it);
    size_t seen = 0;
    uint64_t *db_gone = (uint64_t *)store->miss_kbuf; /* chunk_max × 8 bytes of scratch */
    uint32_t *db_ver = store->miss_idx;
    size_t n_db_gone = 0;
    while (seen < max_rows && n_db_gone < gone_cap && rocksdb_iter_valid(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen);
        const char *v = rocksdb_iter_value(it, &vlen);
        seen++;
        if (klen == 8 && vlen == store->value_len) {
            uint64_t key = spw_ps__key_decode(k);
            struct spw_ps_row hdr;
            memcpy((char *)&hdr + SPW_PS_DB_VALUE_OFF, v, SPW_PS_ROW_HDR - SPW_PS_DB_VALUE_OFF);
            if (idx_find(store, key) < 0 && expired(store, hdr.last_update)) {
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

spw_err_t spw_ps_store_flush(spw_ps_store_t *store)
{
    rocksdb_writebatch_clear(store->wb);
    uint32_t start = 0;
    for (uint32_t slot = 0; slot <= store->high_water; slot++) {
        bool last = slot == store->high_water;
        if (!last) {
            struct spw_ps_row *row = slot_row(store, slot);
            if (!(row->flags & SLOT_FREE) && (row->flags & SPW_PS_ROW_DIRTY)) {
                char k[8];
                spw_ps__key_encode(row->key, k);
                rocksdb_writebatch_put(store->wb, k, 8, (const char *)row + SPW_PS_DB_VALUE_OFF,
                                       store->value_len);
            }
        }
        if (last || rocksdb_writebatch_count(store->wb) >= (int)FLUSH_BATCH) {
            int count = rocksdb_writebatch_count(store->wb);
            if (count > 0) {
                char *err = NULL;
                rocksdb_write(store->db, store->wopts, store->wb, &err);
                if (err)
                    return store_err(err, "flush");
                store->stats.rows_db_written += (uint64_t)count;
                rocksdb_writebatch_clear(store->wb);
            }
            /* Only rows whose write succeeded become clean. */
            uint32_t end = last ? slot : slot + 1;
            for (uint32_t s = start; s < end; s++)
                slot_row(store, s)->flags &= ~SPW_PS_ROW_DIRTY;
            start = end;
        }
    }
    return SPW_OK;
}

void spw_ps_store_get_stats(const spw_ps_store_t *store, struct spw_ps_store_stats *stats)
{
    *stats = store->stats;
    stats->rows_dram = store->n_rows;
    stats->rows_dram_max = store->max_rows;
    stats->bytes_dram = (uint64_t)store->n_slabs * (store->stride << store->slab_shift) +
                        (store->idx_mask + 1) * (sizeof(uint64_t) + sizeof(uint32_t)) +
                        (uint64_t)store->max_rows * sizeof(uint32_t);
    stats->row_bytes = store->stride;
}

uint64_t spw_ps_store_rows_on_disk(spw_ps_store_t *store)
{
    uint64_t v = 0;
    if (rocksdb_property_int(store->db, "rocksdb.estimate-num-keys", &v) != 0)
        return 0;
    return v > 0 ? v - 1 : 0; /* less the meta key */
}

/* Exposed to checkpoint code in this file only. */
static spw_err_t check_meta(spw_ps_store_t *store, char *errstr, size_t errstr_size)
{
    char want[128];
    snprintf(want, sizeof(want), META_FORMAT, store->dim,
             spw_ps_optimizer_name(store->conf.optim.kind));
    char *err = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get(store->db, store->ropts, META_KEY, META_KEY_LEN, &vlen, &err);
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
    rocksdb_put(store->db, store->wopts, META_KEY, META_KEY_LEN, want, strlen(want), &err);
    if (err) {
        snprintf(errstr, errstr_size, "rocksdb put meta: %s", err);
        rocksdb_free(err);
        return SPW_ERR_STORE;
    }
    return SPW_OK;
}

static uint32_t pow2_ceil_shift(uint64_t v)
{
    uint32_t s = 0;
    while ((1ull << s) < v)
        s++;
    return s;
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

    /* Rows R fit the budget with slabs (stride), free list (4) and an index at load <= 3/4. */
    uint64_t budget = conf->memory_bytes;
    uint64_t per_row = store->stride + 4 + 16;
    uint64_t rows = budget / per_row;
    uint32_t idx_shift = pow2_ceil_shift(rows * 4 / 3 + 1);
    uint64_t idx_bytes = (1ull << idx_shift) * 12;
    rows = budget > idx_bytes ? (budget - idx_bytes) / (store->stride + 4) : 0;
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
    store->idx_mask = (1ull << idx_shift) - 1;
    store->chunk_max = store->max_rows / 4 < 4096 ? store->max_rows / 4 : 4096;
    uint32_t slab_rows = 1;
    while ((uint64_t)slab_rows * 2 * store->stride <= SLAB_BYTES && slab_rows * 2 <= rows)
        slab_rows *= 2;
    store->slab_shift = pow2_ceil_shift(slab_rows);
    store->idx_key = malloc((store->idx_mask + 1) * sizeof(uint64_t));
    store->idx_slot = calloc(store->idx_mask + 1, sizeof(uint32_t));
    store->free_slots = malloc((size_t)store->max_rows * sizeof(uint32_t));
    store->slabs = calloc(((size_t)store->max_rows >> store->slab_shift) + 1, sizeof(uint8_t *));
    size_t c = store->chunk_max > EVICT_BATCH ? store->chunk_max : EVICT_BATCH;
    store->rows = malloc(c * sizeof(*store->rows));
    store->miss_idx = malloc(c * sizeof(uint32_t));
    store->miss_kbuf = malloc(c * 8);
    store->miss_kptr = malloc(c * sizeof(char *));
    store->miss_klen = malloc(c * sizeof(size_t));
    store->miss_val = malloc(c * sizeof(char *));
    store->miss_vlen = malloc(c * sizeof(size_t));
    store->miss_err = malloc(c * sizeof(char *));
    store->victims = malloc(c * sizeof(uint32_t));
    if (!store->idx_key || !store->idx_slot || !store->free_slots || !store->slabs ||
        !store->rows || !store->miss_idx || !store->miss_kbuf || !store->miss_kptr ||
        !store->miss_klen || !store->miss_val || !store->miss_vlen || !store->miss_err ||
        !store->victims)
        goto out_nomem;

    store->admit = conf->admit_min_count > 1;
    if (store->admit &&
        spw_ps__sketch_init(&store->sketch, store->max_rows * 4u, SKETCH_DEPTH) != SPW_OK)
        goto out_nomem;

    if (mkdir(store->db_path, 0755) != 0 && errno != EEXIST) {
        snprintf(errstr, errstr_size, "mkdir %s: %s", store->db_path, strerror(errno));
        goto out_free_store;
    }
    rocksdb_options_t *base = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(base, 1);
    rocksdb_options_increase_parallelism(base, 2);
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
    /* Durability comes from checkpoints plus Kafka replay, not from a WAL (DESIGN.md §3). */
    rocksdb_writeoptions_disable_WAL(store->wopts, 1);
    store->wb = rocksdb_writebatch_create();
    char *err = NULL;
    store->db = rocksdb_open(store->opts, store->db_path, &err);
    if (err) {
        snprintf(errstr, errstr_size, "rocksdb open %s: %s", store->db_path, err);
        rocksdb_free(err);
        store->db = NULL;
        goto out_free_store;
    }
    if (check_meta(store, errstr, errstr_size) != SPW_OK)
        goto out_free_store;
    return store;

out_nomem:
    snprintf(errstr, errstr_size, "out of memory");
out_free_store:
    spw_ps_store_close(store);
    return NULL;
}

void spw_ps_store_close(spw_ps_store_t *store)
{
    if (!store)
        return;
    if (store->db) {
        if (spw_ps_store_flush(store) != SPW_OK)
            SPW_ERROR("flush on close failed", "path=%s", store->db_path);
        rocksdb_close(store->db);
    }
    if (store->wb)
        rocksdb_writebatch_destroy(store->wb);
    if (store->wopts)
        rocksdb_writeoptions_destroy(store->wopts);
    if (store->ropts)
        rocksdb_readoptions_destroy(store->ropts);
    if (store->opts)
        rocksdb_options_destroy(store->opts);
    spw_ps__sketch_fini(&store->sketch);
    for (size_t i = 0; i < store->n_slabs; i++)
        free(store->slabs[i]);
    free(store->slabs);
    free(store->idx_key);
    free(store->idx_slot);
    free(store->free_slots);
    free(store->rows);
    free(store->miss_idx);
    free(store->miss_kbuf);
    free(store->miss_kptr);
    free(store->miss_klen);
    free(store->miss_val);
    free(store->miss_vlen);
    free(store->miss_err);
    free(store->victims);
    free(store->db_path);
    free(store);
}

/* ---- checkpoints ---- */

static spw_err_t mkdir_p(const char *path)
{
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof(buf))
        return SPW_ERR_INVALID;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return SPW_ERR_IO;
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return SPW_ERR_IO;
    return SPW_OK;
}

spw_err_t spw_ps_store_checkpoint(spw_ps_store_t *store, const char *root, uint64_t epoch,
                                  struct spw_ps_checkpoint_info *info, char *errstr,
                                  size_t errstr_size)
{
    char parent[4096], final[4096], tmp[4096];
    int w1 = snprintf(parent, sizeof(parent), "%s/checkpoints/%" PRIu64, root, epoch);
    int w2 = snprintf(final, sizeof(final), "%s/shard-%u", parent, store->conf.shard);
    int w3 = snprintf(tmp, sizeof(tmp), "%s/.shard-%u.tmp", parent, store->conf.shard);
    if (w1 < 0 || w2 < 0 || w3 < 0 || (size_t)w3 >= sizeof(tmp) || (size_t)w2 >= sizeof(final)) {
        snprintf(errstr, errstr_size, "checkpoint path too long");
        return SPW_ERR_INVALID;
    }
    struct stat st;
    if (stat(final, &st) == 0) {
        snprintf(errstr, errstr_size, "checkpoint %s exists", final);
        return SPW_ERR_EXISTS;
    }
    spw_err_t err = spw_ps_store_flush(store);
    if (err) {
        snprintf(errstr, errstr_size, "flushing dirty rows: %s", spw_err_str(err));
        return err;
    }
    if (mkdir_p(parent) != SPW_OK) {
        snprintf(errstr, errstr_size, "mkdir %s: %s", parent, strerror(errno));
        return SPW_ERR_IO;
    }
    spw_ps__rmtree(tmp);
    char *rerr = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(store->db, &rerr);
    if (!rerr)
        rocksdb_checkpoint_create(cp, tmp, 0, &rerr);
    if (cp)
        rocksdb_checkpoint_object_destroy(cp);
    if (rerr) {
        snprintf(errstr, errstr_size, "rocksdb checkpoint %s: %s", tmp, rerr);
        rocksdb_free(rerr);
        spw_ps__rmtree(tmp);
        char rtmp[4200]; /* RocksDB stages the checkpoint in "<dir>.tmp" */
        if (spw_ps__path(rtmp, sizeof(rtmp), "%s.tmp", tmp))
            spw_ps__rmtree(rtmp);
        return SPW_ERR_IO;
    }
    char hex[17];
    uint64_t bytes = 0;
    err = spw_ps__checksum_dir(tmp, hex, &bytes);
    if (err) {
        snprintf(errstr, errstr_size, "writing checksum in %s: %s", tmp, strerror(errno));
        spw_ps__rmtree(tmp);
        return err;
    }
    if (rename(tmp, final) != 0) {
        snprintf(errstr, errstr_size, "rename %s: %s", tmp, strerror(errno));
        spw_ps__rmtree(tmp);
        return SPW_ERR_IO;
    }
    if (info) {
        info->epoch = epoch;
        info->rows = spw_ps_store_rows_on_disk(store);
        info->bytes = bytes;
        snprintf(info->path, sizeof(info->path), "%s", final);
        memcpy(info->checksum, hex, sizeof(info->checksum));
    }
    return SPW_OK;
}
