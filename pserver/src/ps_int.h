/* Private declarations shared by the pserver module's files (not API). */
#ifndef SPARROW_PS_INT_H
#define SPARROW_PS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/kafka.h"
#include "sparrow/pserver.h"

/*
 * A row in DRAM (and, from `version` on, the value stored in RocksDB):
 *
 *   offset  size        field
 *   0       8           key          (DRAM only; RocksDB key is the 8-byte big-endian key)
 *   8       4           flags        SPW_PS_ROW_* (DRAM only, never stored)
 *   12      4           version      applied updates, wraps        <- RocksDB value starts here
 *   16      4           last_update  seconds
 *   20      4           count        pushes that touched the row
 *   24      4·dim       weights
 *   24+4dim 4·slots     optimizer state (spw_ps_slot_floats)
 *
 * The RocksDB value is the row's bytes [12, 24 + 4·(dim + slots)): 12 + 4·(dim + slots) bytes,
 * written straight from the slab (no staging copy). The row stride is rounded up to 8 bytes.
 * Databases of the earlier layout (value from offset 8, flags included) carry format 1 in their
 * meta key and are refused at open.
 */
struct spw_ps_row {
    uint64_t key;
    uint32_t flags;
    uint32_t version;
    uint32_t last_update;
    uint32_t count;
    float data[];
};

#define SPW_PS_ROW_HDR   24u
#define SPW_PS_ROW_DIRTY 1u /* changed since last written to RocksDB */
/* 2u: unused (was the CLOCK reference bit; the heat below replaced it) */
#define SPW_PS_ROW_PIN      4u  /* in use by the current request; not evictable */
#define SPW_PS_DB_VALUE_OFF 12u /* RocksDB value = row bytes from here to the last float */
/* Bits 4..5: the row's heat for eviction (GCLOCK), 0..3: a new or loaded row starts at 1, each
 * request that touches it adds 1, each pass of the clock hand takes 1, and the hand evicts rows
 * at 0. */
#define SPW_PS_ROW_HEAT_ONE  16u
#define SPW_PS_ROW_HEAT_MASK 48u

/* Bits 16..31 of a DRAM row's flags: the tag of the top-class estimation period that last saw
 * the row (stale.c; 0: none, which every row loaded or created has). */
#define SPW_PS_ROW_TAG_SHIFT 16u
#define SPW_PS_ROW_TAG_MASK  0xffff0000u

/* Deterministic initial row (weights from (key, seed), slots consistent with them). */
void spw_ps__row_init(const struct spw_ps_optim_conf *conf, uint32_t dim, uint64_t seed,
                      uint64_t key, float *data);
/* The per-element hashes of seed that every row's initial weights mix with its key (dim of
 * them into mix), so that a store computes them once rather than per row created. */
void spw_ps__row_init_mixes(uint64_t seed, uint32_t dim, uint64_t *mix);
/* spw_ps__row_init with mix from spw_ps__row_init_mixes(seed, dim): the same row. */
void spw_ps__row_init_mixed(const struct spw_ps_optim_conf *conf, uint32_t dim, const uint64_t *mix,
                            uint64_t key, float *data);

/* Applies one gradient row g (dim floats) with step scale alpha to weights w and slots.
 * Returns false (row untouched) when g has a non-finite value. */
bool spw_ps__row_apply(const struct spw_ps_optim_conf *conf, uint32_t dim, float *w, float *slots,
                       const float *g, float alpha);

/* Rows per SST file of a large flush (bounds the flush's scratch memory). A variable so that
 * tests can lower it to exercise several rounds; not to be changed while a store is in use. */
extern size_t spw_ps__flush_part_rows;
/* Rows per SST file a part is written to, up to a number of files per part (store.c's
 * part_files says why both are bounded). A variable for the tests, like
 * spw_ps__flush_part_rows. */
extern size_t spw_ps__sst_file_rows;

/* Dirty rows from which a flush writes SST files rather than WriteBatches. */
#define SPW_PS_SST_MIN_ROWS 16384u

/* Waits (polling) until RocksDB has no flush or compaction pending or running, at most
 * timeout_ms; false on timeout. For benchmarks that must not time the debt of a setup phase. */
bool spw_ps__store_wait_idle(spw_ps_store_t *store, uint32_t timeout_ms);

/* A RocksDB property of the store's database as text (rocksdb_property_value), or NULL; the
 * caller frees it with free(). For tests and benchmarks. */
char *spw_ps__store_property(spw_ps_store_t *store, const char *name);

/* Handles one request frame as if received from a peer, packing (not sending) the reply. For
 * the fuzz target. */
int spw_ps__server_handle_frame(spw_ps_server_t *srv, const void *data, size_t len);

/* ---- update stream publisher (publish.c, docs/ARCHITECTURE.md §6) ---- */
/* Collects the keys the server loop changes and, every interval, copies their rows into a batch
 * that its own thread encodes as ModelUpdate records and produces (idempotent producer, keyed by
 * the 8-byte big-endian key). Every function but the constructor's internals runs on the server
 * loop's thread. */
typedef struct spw_ps__publisher spw_ps__publisher_t;

/* Holds the high-water offsets returned by spw_ps__publisher_sync. */
#define SPW_PS_PUBLISH_MAX_PARTITIONS 1024

/* NULL with errstr[0] == '\0' when publishing is off (interval 0 or no brokers); NULL with
 * errstr on failure. metrics may be NULL. */
spw_ps__publisher_t *spw_ps__publisher_new(const struct spw_ps_server_conf *conf,
                                           struct spw_metrics *metrics, char *errstr,
                                           size_t errstr_size);
/* Records that keys changed (pushed), event_ms the newest event time behind them (0: unknown). */
void spw_ps__publisher_touch(spw_ps__publisher_t *pub, const uint64_t *keys, size_t n,
                             int64_t event_ms);
/* spw_ps_evict_fn for the store: records a tombstone for key. opaque is the publisher. */
void spw_ps__publisher_on_evict(void *opaque, uint64_t key, uint32_t version);
/* The row dim (and the optimizer's slots) of the rows it copies: at start, or once a shard of
 * pserver.dim=auto learnt it. SPW_ERR_NOMEM (nothing changed). Loop thread. */
spw_err_t spw_ps__publisher_set_dim(spw_ps__publisher_t *pub, uint32_t dim,
                                    enum spw_ps_optimizer kind);
/* When the interval has passed and the thread is free, copies the changed rows and hands them
 * to the publisher thread (never waits for it). */
void spw_ps__publisher_tick(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch);
/* Hands every change so far to the thread, waits until it is produced and flushed (at most
 * timeout_ms), then asks the brokers for the topic's high-water offsets into out (*n entries,
 * at most SPW_PS_PUBLISH_MAX_PARTITIONS). Every change published later lands at or above
 * them. SPW_ERR_KAFKA / SPW_ERR_TIMEOUT when the offsets are unknown (*n = 0). */
spw_err_t spw_ps__publisher_sync(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch,
                                 int timeout_ms, struct spw_kafka_partition *out, size_t *n);
/*
 * A checkpoint's update offsets, in two halves around the store's checkpoint so that the flush
 * and the brokers' answers overlap the RocksDB work: checkpoint_start asks the thread for the
 * high-water offsets once what it was handed is produced and flushed, and returns a ticket;
 * fill_offsets waits for them and sets ck->update_offsets (allocated from arena), or logs and
 * leaves ck without offsets on failure. The changes not yet handed off are not forced out first:
 * the loop thread hands nothing off between the two calls, so they are published after the
 * offsets were taken, with values at least as new as the checkpoint's, and a reader that loads
 * the checkpoint and tails from the offsets replays them harmlessly; what was handed off before
 * (older values) is below the offsets, never replayed over the checkpoint.
 */
struct spw_arena;
struct Sparrow__CheckpointReply;
uint64_t spw_ps__publisher_checkpoint_start(spw_ps__publisher_t *pub);
void spw_ps__publisher_fill_offsets(spw_ps__publisher_t *pub, uint64_t ticket, uint64_t epoch,
                                    struct spw_arena *arena, struct Sparrow__CheckpointReply *ck);
/* After the store was restored to checkpoint epoch (epoch 0: the empty model): the publisher
 * thread reads the stream back and re-publishes every key this shard published since that epoch
 * (its restored row, or a tombstone when the restored store lacks it), so that readers of the
 * stream converge to the restored state. Returns at once. */
void spw_ps__publisher_restored(spw_ps__publisher_t *pub, uint64_t epoch);
/* Final publish and flush (at SIGTERM), then stops the thread and frees. NULL is a no-op. */
void spw_ps__publisher_destroy(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch);

/* ---- count-min sketch (admission) ---- */
struct spw_ps_sketch {
    uint32_t width; /* power of two */
    uint32_t depth;
    uint16_t *cells; /* depth × width saturating counters */
};

spw_err_t spw_ps__sketch_init(struct spw_ps_sketch *sk, uint32_t width, uint32_t depth);
void spw_ps__sketch_fini(struct spw_ps_sketch *sk);
/* Adds one sighting of key and returns the new estimate. */
uint32_t spw_ps__sketch_add(struct spw_ps_sketch *sk, uint64_t key);
uint32_t spw_ps__sketch_get(const struct spw_ps_sketch *sk, uint64_t key);

/* Zero-filled anonymous memory for the slab, the index and the key filter, aligned to and
 * advised for transparent huge pages where the kernel offers them (random accesses then miss
 * the TLB far less). Pages become resident only when touched. NULL when out of memory; freed
 * with spw_ps__big_free and the same size (NULL: nothing). */
void *spw_ps__big_alloc(size_t bytes);
void spw_ps__big_free(void *p, size_t bytes);

/* ---- the cold file (cold.c) ---- */
/* Rows evicted from DRAM, each a record of the DRAM row's layout and stride in an open-addressing
 * table (linear probing, load at most 0.7) mapped from a file of the store's directory. The keys
 * are spread over SPW_PS_COLD_SEGS such tables (segments, one file each), each doubled into a new
 * file on its own when full, so that a growth stops the store's thread for a 64th of the rows. A
 * record's flags hold SPW_PS_COLD_FULL and the row's SPW_PS_ROW_DIRTY (RocksDB's copy is older,
 * or there is none), which a bitmap in memory repeats so that a flush finds the dirty records
 * without reading the files. Not durable: checkpoints write the dirty records to RocksDB, and the
 * files are removed at close and recreated empty at open. Owned by the store's thread; a flush's
 * writer threads only read records while the store's thread waits. */
#define SPW_PS_COLD_SEGS 64u

struct spw_ps__cold_seg {
    char *path, *grow_path;
    uint8_t *map;    /* cap records of stride bytes (the file's descriptor closed once mapped) */
    uint64_t *dirty; /* bit i: record i holds a dirty row (cap bits, in memory) */
    uint64_t cap, mask;
    uint64_t n; /* records held */
};

struct spw_ps__cold {
    struct spw_ps__cold_seg seg[SPW_PS_COLD_SEGS];
    size_t stride;
    uint64_t n;       /* records held, all segments */
    uint64_t n_dirty; /* of n, dirty */
    uint64_t bytes;   /* the files' sizes */
    uint64_t grows;   /* doublings since open */
    bool open;
    bool grow_failed; /* a growth failed (disk full): puts beyond a full segment fail fast */
};

/* Where a record is: its segment and index there. */
struct spw_ps__cold_pos {
    uint32_t seg;
    uint64_t idx;
};

#define SPW_PS_COLD_FULL 0x100u /* a record's flags: it holds a row */

/* Creates (truncating) the segment files <prefix>-NN.rows with room for cap_hint records or more
 * in all. errstr names the cause (SPW_ERR_IO: a file, SPW_ERR_NOMEM) and c is then not open. */
spw_err_t spw_ps__cold_open(struct spw_ps__cold *c, const char *prefix, size_t stride,
                            uint64_t cap_hint, char *errstr, size_t errstr_size);
/* Unmaps and removes the files; a zeroed c (never opened) is a no-op. */
void spw_ps__cold_close(struct spw_ps__cold *c);
/* The record at p. */
static inline struct spw_ps_row *spw_ps__cold_rec(const struct spw_ps__cold *c,
                                                  struct spw_ps__cold_pos p)
{
    return (struct spw_ps_row *)(c->seg[p.seg].map + (size_t)p.idx * c->stride);
}
/* Whether a record holds key, and where (*at). */
bool spw_ps__cold_find(const struct spw_ps__cold *c, uint64_t key, struct spw_ps__cold_pos *at);
/* Asks for the first record of key's probe sequence ahead of a find or put. */
void spw_ps__cold_prefetch(const struct spw_ps__cold *c, uint64_t key);
/* Copies row (stride bytes; its flags become FULL plus its DIRTY bit), replacing a record of the
 * same key. Grows the key's segment first when it is full: SPW_ERR_IO / SPW_ERR_NOMEM when it
 * cannot (logged once; the row is not stored). Moves records only when it grows. */
spw_err_t spw_ps__cold_put(struct spw_ps__cold *c, const struct spw_ps_row *row);
/* Removes the record at p; records after it in its run may move back (to p among them). */
void spw_ps__cold_delete_at(struct spw_ps__cold *c, struct spw_ps__cold_pos p);
/* Marks the record at p clean (its row written to RocksDB). */
void spw_ps__cold_clean(struct spw_ps__cold *c, struct spw_ps__cold_pos p);
/* The first record at or after *at (segment by segment) that holds a dirty row, found through the
 * dirty bitmaps: true with *at set, false past the last segment. */
bool spw_ps__cold_next_dirty(const struct spw_ps__cold *c, struct spw_ps__cold_pos *at);

/* ---- filter of the keys in RocksDB (keyfilter.c) ---- */
/* A blocked Bloom filter (one cache line per key, 8 bits per key, about 2-3% false positives)
 * of every key the store wrote to its RocksDB tier since it opened an empty database: a key it
 * rules out has no row on disk, so its first push creates the row without a RocksDB read. While
 * !valid (the database held rows at open, or more than `capacity` distinct keys were added) it
 * answers "maybe" for every key and the store reads RocksDB as before. Owned by the store's
 * thread. */
struct spw_ps__keyfilter {
    uint64_t *words;
    uint64_t block_mask; /* blocks of 8 words, a power of two */
    uint64_t capacity;   /* distinct keys before the filter gives up */
    uint64_t added;
    bool valid;
};

/* Sizes the filter for capacity keys; valid says whether it starts exact (an empty database).
 * SPW_ERR_NOMEM when it cannot be allocated (nothing to fini then). */
spw_err_t spw_ps__keyfilter_init(struct spw_ps__keyfilter *f, uint64_t capacity, bool valid);
void spw_ps__keyfilter_fini(struct spw_ps__keyfilter *f);
/* Records that key is (or is about to be) written to RocksDB. */
void spw_ps__keyfilter_add(struct spw_ps__keyfilter *f, uint64_t key);
/* False only when key was never added (and the filter is valid). */
bool spw_ps__keyfilter_may_contain(const struct spw_ps__keyfilter *f, uint64_t key);
/* Asks for key's cache line ahead of a spw_ps__keyfilter_may_contain. */
void spw_ps__keyfilter_prefetch(const struct spw_ps__keyfilter *f, uint64_t key);

/* ---- push de-duplication window (server.c) ---- */
/* One trainer's window: the seqs of (trainer_id, epoch) applied, as the highest and a bitmap of
 * the SPW_PS_DEDUP_WINDOW below it. */
struct spw_ps__dedup_entry {
    uint32_t trainer_id;
    bool used;
    uint64_t epoch;
    uint64_t high;   /* highest seq applied */
    uint64_t window; /* bit d: seq high - d applied */
    uint64_t touched;
};

/* The table of SPW_PS_DEDUP_TRAINERS entries, least recently touched forgotten first. Owned by
 * the server's thread. */
struct spw_ps__dedup {
    struct spw_ps__dedup_entry *e; /* SPW_PS_DEDUP_TRAINERS */
    uint64_t clock;
};

/* ---- state kept in a checkpoint beside RocksDB's files (state.c) ---- */
/* The sketch shapes a SKETCH file may have (spw_ps__sketch_init's range). */
#define SPW_PS_STATE_SKETCH_MIN_WIDTH 1024u
#define SPW_PS_STATE_SKETCH_MAX_WIDTH (1u << 28)
#define SPW_PS_STATE_SKETCH_MAX_DEPTH 16u

/* Writes SKETCH (when sketch is non-NULL and allocated: admission on) and DEDUP (when dedup is
 * non-NULL) into the checkpoint directory dir being staged, synced. SPW_ERR_IO with errstr. */
spw_err_t spw_ps__state_write(const char *dir, const struct spw_ps_sketch *sketch,
                              const struct spw_ps__dedup *dedup, char *errstr, size_t errstr_size);
/* Checks the state files of checkpoint dir that are present (magic, sizes against the file's
 * length, ranges, their own digest). SPW_OK when each is valid or absent; SPW_ERR_CORRUPT (or
 * SPW_ERR_IO) with errstr naming the file and what is wrong. */
spw_err_t spw_ps__state_check(const char *dir, char *errstr, size_t errstr_size);
/* Reads dir's SKETCH into sk, which must have the file's width and depth. SPW_ERR_NOT_FOUND
 * (no file: a checkpoint written before sketches were kept) and SPW_ERR_INVALID (another shape)
 * leave sk untouched; SPW_ERR_CORRUPT / SPW_ERR_IO leave it zeroed. errstr says which. */
spw_err_t spw_ps__sketch_load(const char *dir, struct spw_ps_sketch *sk, char *errstr,
                              size_t errstr_size);
/* Replaces dd's entries by dir's DEDUP. SPW_ERR_NOT_FOUND, SPW_ERR_CORRUPT, SPW_ERR_IO leave dd
 * untouched, with errstr. */
spw_err_t spw_ps__dedup_load(const char *dir, struct spw_ps__dedup *dd, char *errstr,
                             size_t errstr_size);

/* The store's admission sketch; NULL when admission is off (pserver.admit.min_count <= 1). */
struct spw_ps_sketch *spw_ps__store_sketch(spw_ps_store_t *store);
/* spw_ps_store_checkpoint that also writes dedup (may be NULL) into the checkpoint. */
spw_err_t spw_ps__store_checkpoint(spw_ps_store_t *store, const char *root, uint64_t epoch,
                                   const struct spw_ps__dedup *dedup,
                                   struct spw_ps_checkpoint_info *info, char *errstr,
                                   size_t errstr_size);
/* After the store was opened on a copy of checkpoint dir's database: loads dir's sketch into
 * the store (admission on), logging what it could not (an older checkpoint without one, another
 * shape, a file refused): the sketch then starts empty. */
void spw_ps__store_restore_sketch(spw_ps_store_t *store, const char *dir);

/* ---- checkpoint helpers ---- */
/* XXH3-64 of one file's contents, with the identity it had when hashed (device, inode, size,
 * modification time): a file with the same identity later is taken to hold the same bytes. */
struct spw_ps__file_digest {
    uint64_t dev, ino, size;
    int64_t mtime_ns;
    uint64_t digest;
};

/* Digests of immutable files (RocksDB's SSTs, which checkpoints hard-link) already hashed, so
 * that a checkpoint reads only the files it has not seen before. Owned by one store. */
struct spw_ps__digest_cache {
    struct spw_ps__file_digest *e;
    size_t n, cap;
};

/* Fills out's identity fields from the open file fd (out->digest is left alone). */
spw_err_t spw_ps__file_identity(int fd, struct spw_ps__file_digest *out);
/* Adds d to the cache (SPW_ERR_NOMEM when it cannot grow). */
spw_err_t spw_ps__digest_cache_add(struct spw_ps__digest_cache *cache,
                                   const struct spw_ps__file_digest *d);
void spw_ps__digest_cache_fini(struct spw_ps__digest_cache *cache);

/* Writes the CHECKSUM file of dir (format 2: over every other file's name, size and contents'
 * digest). SST files whose identity is in cache (may be NULL) are not read again; on success the
 * cache holds exactly the SST files of dir. hex gets the digest, *bytes the bytes covered. */
spw_err_t spw_ps__checksum_dir(const char *dir, struct spw_ps__digest_cache *cache, char hex[17],
                               uint64_t *bytes);
/* The meta key of a shard database and its value (format 2; see ps_ckpt.h). */
#define SPW_PS_META_KEY     "\0meta"
#define SPW_PS_META_KEY_LEN 5u
#define SPW_PS_META_FORMAT  "sparrow-ps 2 dim=%u optimizer=%s"

/* The options string spw_ps__db_options applies for memtable insert hints (see there). */
#define SPW_PS_INSERT_HINT_OPTION "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.0"

/* RocksDB options of a shard database (store.c); the caller destroys them. */
struct rocksdb_options_t;
struct rocksdb_options_t *spw_ps__db_options(void);

/* Checkpoints db into tmp (RocksDB's checkpoint: SST files hard-linked where possible), writes
 * the state files (spw_ps__state_write with sketch and dedup, each may be NULL) and its CHECKSUM
 * (spw_ps__checksum_dir with cache, may be NULL), and renames tmp to final. On failure removes
 * tmp and what RocksDB staged, with errstr. hex and *bytes as checksum_dir. */
struct rocksdb_t;
spw_err_t spw_ps__checkpoint_db(struct rocksdb_t *db, const char *tmp, const char *final,
                                const struct spw_ps_sketch *sketch,
                                const struct spw_ps__dedup *dedup,
                                struct spw_ps__digest_cache *cache, char hex[17], uint64_t *bytes,
                                char *errstr, size_t errstr_size);

/* snprintf into a path buffer; false when the result does not fit. */
bool spw_ps__path(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Big-endian key encoding for RocksDB (ordered by key). */
static inline void spw_ps__key_encode(uint64_t key, char out[8])
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (char)(key & 0xff);
        key >>= 8;
    }
}

static inline uint64_t spw_ps__key_decode(const char in[8])
{
    uint64_t key = 0;
    for (int i = 0; i < 8; i++)
        key = (key << 8) | (uint8_t)in[i];
    return key;
}

/* ---- staleness statistics per row class (stale.c) ---- */

/*
 * Per row class (enum spw_ps_row_class): running means of tau (the reference of penalty
 * adaptive) and of the step scale applied, over about the last SPW_PS_STALE_WINDOW rows of the
 * class (the plain mean of the rows seen while fewer), and the count threshold of class top.
 * The threshold is re-estimated every SPW_PS_TOP_PERIOD rows pushed as the SPW_PS_TOP_ROWS-th
 * largest count among the distinct rows the period saw: each row's count goes, the first time a
 * period sees it (its flags tag), into a min-heap that keeps the largest SPW_PS_TOP_ROWS. A row
 * costs a tag compare and, at its first sighting in a period, a compare with the heap's minimum
 * (a heap step only when it is larger). Until the first estimate no row is top. Owned by the
 * store (its thread).
 */
struct spw_ps__stale {
    double tau_ref[SPW_PS_CLASSES];
    double alpha_mean[SPW_PS_CLASSES];
    uint64_t rows[SPW_PS_CLASSES];
    uint32_t top_threshold; /* UINT32_MAX: none yet */
    uint32_t period_rows;   /* rows classified in the current period */
    uint32_t period;        /* tag of the current period, 1..0xffff */
    uint32_t heap_n;
    uint32_t heap[SPW_PS_TOP_ROWS]; /* min-heap of counts */
};

void spw_ps__stale_init(struct spw_ps__stale *st);
/* The class of the pushed row of key (row: its DRAM row, or NULL when it has none: rest), before
 * its count is incremented; records its count for the next estimate (sets row's tag). */
enum spw_ps_row_class spw_ps__stale_classify(struct spw_ps__stale *st, uint64_t key,
                                             struct spw_ps_row *row);
/* Adds a row's tau and the step scale alpha it was applied with to its class's means. */
void spw_ps__stale_observe(struct spw_ps__stale *st, enum spw_ps_row_class cls, uint32_t tau,
                           double alpha);

/* ---- two-phase steps (steps.c) ---- */

/* The pending table: pushes tagged with a step, per contributor, until the step's commit. Owned
 * by the shard's thread. */
typedef struct spw_ps__steps spw_ps__steps_t;

/* One tagged push (arrays borrowed; copied by spw_ps__steps_add). versions may be NULL (0). */
struct spw_ps__step_push {
    uint64_t step;
    uint32_t trainer_id;
    uint32_t examples; /* behind the trainer's step gradient: its weight */
    int64_t max_event_ms;
    size_t n;
    const uint64_t *keys;
    const float *grads; /* n × dim, the trainer's step-mean gradient */
    const uint32_t *versions;
};

/* A commit: step, the trainers whose contributions count, and the step's examples over all of
 * them (0: the sum of what arrived). member_ids: every trainer of the synchronous unit (listed
 * or not; n_members 0: every trainer is). counter_key (0: none) is summed, not averaged. */
struct spw_ps__step_commit {
    uint64_t step;
    const uint32_t *trainer_ids;
    size_t n_trainers;
    const uint32_t *member_ids;
    size_t n_members;
    uint64_t examples;
    uint64_t counter_key;
    bool apply_late; /* the unit's late contributions are applied, not dropped */
};

/* One late contribution to apply on its own (apply_late): its gradient already weighted as one
 * contributor of its step (its examples over the step's). Owned by the table. */
struct spw_ps__step_late {
    size_t n;
    const uint64_t *keys;
    const float *grads;
    const uint32_t *versions;
    int64_t max_event_ms;
};

/* What a commit applies: unique keys, their averaged gradients and the oldest version each was
 * computed from, then the late contributions to apply one by one after them (owned by the
 * table, valid until its next call). */
struct spw_ps__step_sum {
    size_t n;
    const uint64_t *keys;
    const float *grads;
    const uint32_t *versions;
    uint32_t contributions, discarded;
    int64_t max_event_ms;
    const struct spw_ps__step_late *late;
    size_t n_late;
};

/* How a push tagged with a step its trainer's unit committed already is treated. */
struct spw_ps__step_lateness {
    bool late;          /* the step is committed for this trainer */
    bool apply;         /* apply it at once (scaled by weight), else drop it (also one
                           without examples: it has no weight) */
    double weight;      /* its examples over the committed step's (apply) */
    uint64_t committed; /* the trainer's committed watermark */
};

/* NULL when out of memory. max_bytes bounds the pending pushes held. */
spw_ps__steps_t *spw_ps__steps_new(uint32_t dim, size_t max_bytes);
void spw_ps__steps_destroy(spw_ps__steps_t *st);
/* Holds a push for its step. SPW_ERR_TOO_BIG when the table would exceed max_bytes (nothing
 * kept), SPW_ERR_NOMEM. */
spw_err_t spw_ps__steps_add(spw_ps__steps_t *st, const struct spw_ps__step_push *push);
/* Sums commit->step's contributions of the listed trainers per row into *out, divided by the
 * step's examples, and drops them. The unit's other contributions of this step or an older one
 * (members not listed: backup workers) are discarded (out->discarded; their counter row is
 * still summed) or, with apply_late, returned in out->late. Later steps, and contributions of
 * trainers outside the unit, stay. Every member's committed watermark becomes commit->step. */
spw_err_t spw_ps__steps_take(spw_ps__steps_t *st, const struct spw_ps__step_commit *commit,
                             struct spw_ps__step_sum *out);
/* Whether trainer_id's push for step is late (its unit committed step already), and what to do
 * with it; examples: the push's step examples (its weight when applied). */
struct spw_ps__step_lateness spw_ps__steps_lateness(const spw_ps__steps_t *st, uint32_t trainer_id,
                                                    uint64_t step, uint64_t examples);
/* Pushes held. */
size_t spw_ps__steps_pending(const spw_ps__steps_t *st);
/* Drops every pending push (a restore: the steps they belong to are discarded whole) and the
 * committed watermarks: the coordinator that restores numbers the steps from then on (a
 * restarted one starts again low), and pushes from before the restore are fenced anyway. */
void spw_ps__steps_clear(spw_ps__steps_t *st);

#endif
