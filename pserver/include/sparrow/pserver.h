/* The parameter-server shard: row store (DRAM hot table over RocksDB), optimizers, staleness,
 * admission/TTL, checkpoints, and the ZeroMQ server that serves trainers
 * (docs/ARCHITECTURE.md §3). */
#ifndef SPARROW_PSERVER_H
#define SPARROW_PSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"

/*
 * Conventions: pointers are non-NULL unless said otherwise; n counts keys; value and gradient
 * blocks are n × dim floats in key order. A store is owned by one thread (the server's loop); none
 * of its functions are thread-safe. The parsing helpers are pure and thread-safe.
 */

/* Largest row dimension a shard accepts (weights per key). */
#define SPW_PS_MAX_DIM     1024
#define SPW_PS_MAX_DIM_STR "1024" /* the same, for property texts */

enum spw_ps_optimizer {
    SPW_PS_SGD = 0,
    SPW_PS_ADAGRAD = 1,
    SPW_PS_ADAM = 2,
    SPW_PS_FTRL = 3,
};

enum spw_ps_penalty_kind {
    SPW_PS_PENALTY_NONE = 0,    /* alpha = 1 */
    SPW_PS_PENALTY_INVERSE = 1, /* alpha = 1 / (1 + tau) */
    SPW_PS_PENALTY_EXP = 2,     /* alpha = beta^tau */
    SPW_PS_PENALTY_DROP = 3,    /* alpha = 1 up to max_tau, update dropped above */
    /* alpha = min(1, (1 + tau_ref) / (1 + tau)), tau_ref the shard's running mean tau of the
     * row's frequency class (enum spw_ps_row_class): a row as stale as its class usually is
     * applies in full, a straggler's staler one is shrunk */
    SPW_PS_PENALTY_ADAPTIVE = 4,
    /* delay compensation (DC-ASGD): alpha = 1, and a stale gradient (tau > 0) is corrected to
     * g + lambda * g * g * (w_now - w_pulled) (spw_ps_dc_correct) when the push carries the
     * values it was computed from */
    SPW_PS_PENALTY_DC = 5,
};

struct spw_ps_penalty {
    enum spw_ps_penalty_kind kind;
    double beta;      /* EXP: in (0, 1] */
    uint32_t max_tau; /* DROP */
    double lambda;    /* DC: >= 0 */
};

/* Parses "none", "inverse", "exp:<beta>" (0 < beta <= 1), "drop:<max_tau>" (integer >= 0),
 * "adaptive" or "dc:<lambda>" (finite, 0 <= lambda <= 1e6). SPW_ERR_INVALID for anything else.
 * Pure, thread-safe. */
spw_err_t spw_ps_penalty_parse(const char *text, struct spw_ps_penalty *out);

/* The step scale for staleness tau; a negative result means "drop the update". ADAPTIVE is
 * computed with a reference of 0 (that is 1 / (1 + tau)); DC is 1. Pure, thread-safe. */
double spw_ps_penalty_alpha(const struct spw_ps_penalty *penalty, uint32_t tau);

/* spw_ps_penalty_alpha with the reference staleness tau_ref (>= 0) that ADAPTIVE scales by:
 * min(1, (1 + tau_ref) / (1 + tau)); the other kinds ignore tau_ref. Pure, thread-safe. */
double spw_ps_penalty_alpha_ref(const struct spw_ps_penalty *penalty, uint32_t tau, double tau_ref);

/* Delay compensation of one row (DC-ASGD, Zheng et al. 2017), elementwise:
 * out[j] = g[j] + lambda * g[j] * g[j] * (w_now[j] - w_pulled[j]). out may alias g; the other
 * arrays are dim floats each. Pure, thread-safe. */
void spw_ps_dc_correct(uint32_t dim, float lambda, const float *g, const float *w_now,
                       const float *w_pulled, float *out);

/* Row-frequency classes of the staleness statistics (docs/ARCHITECTURE.md §3): the global bias
 * row (key SPW_PS_BIAS_KEY), the about SPW_PS_TOP_ROWS rows of this shard updated most often
 * (count at least a threshold re-estimated every SPW_PS_TOP_PERIOD rows pushed), the rest. */
enum spw_ps_row_class {
    SPW_PS_CLASS_BIAS = 0,
    SPW_PS_CLASS_TOP = 1,
    SPW_PS_CLASS_REST = 2,
};
#define SPW_PS_CLASSES 3
/* The trainer's models keep their global bias in the row of key 0 (SPW_TRN_BIAS_KEY). */
#define SPW_PS_BIAS_KEY 0ull
/* Rows in class top, approximately. */
#define SPW_PS_TOP_ROWS 1000u
/* Rows pushed between two estimates of the top class's count threshold. */
#define SPW_PS_TOP_PERIOD (1u << 17)
/* Horizon, in rows of a class, of the running means of tau and alpha per class. */
#define SPW_PS_STALE_WINDOW 1000u

/* "bias", "top", "rest" ("?" otherwise). Thread-safe. */
const char *spw_ps_row_class_name(enum spw_ps_row_class cls);

/* Parses "sgd|adagrad|adam|ftrl". SPW_ERR_INVALID otherwise. */
spw_err_t spw_ps_optimizer_parse(const char *text, enum spw_ps_optimizer *out);
const char *spw_ps_optimizer_name(enum spw_ps_optimizer opt);

/* Optimizer hyper-parameters. The step is lr (× alpha(tau)) for element 0 of a row (the linear
 * weight) and lr_latent (× alpha) for elements 1..dim-1 (the FM latent vector); for FTRL they are
 * FTRL's alpha and the staleness scale multiplies the gradient (FTRL has no separate step). */
struct spw_ps_optim_conf {
    enum spw_ps_optimizer kind;
    float lr;
    float lr_latent;  /* elements 1..dim-1 (FM's latent part); 0: lr. FTRL: their alpha */
    float lr_dense;   /* a deep model's dense-block rows (spw_key_is_dense), every element; 0: lr
                         and lr_latent as other rows */
    float l2;         /* added to the gradient as l2·w (FTRL: its own l2 term) */
    float clip_norm;  /* per-row gradient L2-norm clip; 0 disables */
    float eps;        /* Adagrad / Adam denominator */
    float beta1;      /* Adam */
    float beta2;      /* Adam */
    float ftrl_beta;  /* FTRL */
    float ftrl_l1;    /* FTRL */
    float init_scale; /* weights start uniform in [-init_scale, init_scale] from (key, seed) */
};

/* Fills conf with the defaults (Adagrad, lr 0.05, dense lr 0.005, eps 1e-8, Adam 0.9/0.999, FTRL
 * beta 1). */
void spw_ps_optim_conf_default(struct spw_ps_optim_conf *conf);

/* Floats of optimizer state per row after the weights: SGD 0, Adagrad dim, Adam 2·dim + 1 (the
 * last holds the row's step as a u32), FTRL 2·dim (z, n). */
size_t spw_ps_slot_floats(enum spw_ps_optimizer opt, uint32_t dim);

/* ---- row store ---- */

typedef struct spw_ps_store spw_ps_store_t;

/* Called for every row evicted by TTL (key and its last version), e.g. to publish a tombstone. */
typedef void (*spw_ps_evict_fn)(void *opaque, uint64_t key, uint32_t version);

struct spw_ps_store_conf {
    uint32_t shard;
    uint32_t dim; /* 1..SPW_PS_MAX_DIM (a server's conf: 0 for pserver.dim=auto) */
    struct spw_ps_optim_conf optim;
    struct spw_ps_penalty penalty;
    uint64_t seed;               /* initialisation seed */
    uint64_t memory_bytes;       /* DRAM budget for rows + index */
    const char *db_path;         /* RocksDB directory (created) */
    const char *rocksdb_options; /* passed to rocksdb_get_options_from_string; NULL: none */
    uint32_t admit_min_count;    /* <= 1: every key is admitted on first touch */
    uint32_t ttl_s;              /* 0: rows never expire */
    bool cold_off; /* evicted rows go straight to RocksDB, not to the cold file (pserver.cold_file)
                    */
    /* A reserved key whose row is a plain counter (0: none): it starts at zero and a push adds
     * its gradient's first value to w[0], with no optimizer and no staleness penalty. The
     * exactly-once test counts every trained example there. */
    uint64_t counter_key;
    spw_ps_evict_fn on_evict; /* may be NULL */
    void *evict_opaque;
};

/* Opens (creating) the store at conf->db_path. A database written with another dim or optimizer
 * is refused. Strings in conf are copied. NULL with errstr on failure. */
spw_ps_store_t *spw_ps_store_open(const struct spw_ps_store_conf *conf, char *errstr,
                                  size_t errstr_size);

/* The dim and optimizer a store database at db_path was written with (its meta key), read without
 * changing it (pserver.dim=auto restarts with the dim it had). SPW_ERR_NOT_FOUND when there is no
 * database or it holds no meta yet; SPW_ERR_STORE / SPW_ERR_CORRUPT / SPW_ERR_VERSION with errstr.
 * Not while a store has the database open. */
spw_err_t spw_ps_store_peek_dim(const char *db_path, uint32_t *dim,
                                enum spw_ps_optimizer *optimizer, char *errstr, size_t errstr_size);

/* Writes dirty rows to RocksDB and closes. NULL is a no-op. */
void spw_ps_store_close(spw_ps_store_t *store);

/* Closes without writing the dirty rows: their changes since the last flush are lost, which is
 * what a store about to be replaced by a checkpoint (a restore; a restart with pserver.restore)
 * wants, since with the cold file that flush can write every row changed since the last
 * checkpoint. NULL is a no-op. */
void spw_ps_store_discard(spw_ps_store_t *store);

/* Sets the clock (seconds) used for last_update and TTL. Defaults to wall time at open. */
void spw_ps_store_set_now(spw_ps_store_t *store, uint32_t now_s);

/* Pull: writes n × dim weights into values and n versions into versions (may be NULL). Rows of
 * unadmitted keys read as their initial value with version 0 and are not stored. keys need not be
 * unique. SPW_ERR_STORE when RocksDB fails. */
spw_err_t spw_ps_store_pull(spw_ps_store_t *store, const uint64_t *keys, size_t n, float *values,
                            uint32_t *versions);

struct spw_ps_push_result {
    uint32_t applied;
    uint32_t rejected;       /* a non-finite gradient value: the row is left unchanged */
    uint32_t dropped_stale;  /* penalty drop:<max_tau> exceeded */
    uint32_t unadmitted;     /* key seen fewer than admit_min_count times: counted, not applied */
    uint32_t dc_corrected;   /* penalty dc: stale rows whose gradient was corrected */
    uint32_t dc_uncorrected; /* penalty dc: stale rows applied uncorrected (no pulled values) */
};

/* Push: applies n × dim gradients. versions (may be NULL: tau 0) are the versions each gradient was
 * computed from; taus (may be NULL) receives each row's tau (0 for rows not applied). */
spw_err_t spw_ps_store_push(spw_ps_store_t *store, const uint64_t *keys, size_t n,
                            const float *grads, const uint32_t *versions, uint32_t *taus,
                            struct spw_ps_push_result *res);

/* Rows a push returns as they are after it (fresh reads): idx[0..n) ascending indices into the
 * push's keys; values (n × dim) and versions (n) are filled. All caller-owned. */
struct spw_ps_echo {
    size_t n;
    const uint32_t *idx;
    float *values;
    uint32_t *versions;
};

/* Everything one push applies (spw_ps_store_push_args). Arrays are caller-owned and are only
 * read, except the outputs taus and classes. */
struct spw_ps_push_args {
    size_t n;
    const uint64_t *keys;     /* n; need not be sorted */
    const float *grads;       /* n × dim */
    const uint32_t *versions; /* n versions the gradients were computed from; NULL: tau 0 */
    /* n × dim weights the gradients were computed from (PushRequest.pulled; penalty dc corrects
     * stale rows with them). NULL: none (dc applies stale rows uncorrected and counts them). */
    const float *pulled;
    uint32_t *taus;   /* out, may be NULL: each row's tau (0 when not applied) */
    uint8_t *classes; /* out, may be NULL: each row's enum spw_ps_row_class */
    /* may be NULL: filled on the way, the echoed rows cost no second lookup; a row not admitted
     * echoes its initial weights and version 0, as a pull would */
    const struct spw_ps_echo *echo;
    /* A deep model's dense blocks (spw_key_is_dense) step at their learning rate times this; 0
     * or 1: as configured. A committed two-phase step of K trainers passes sqrt(K)
     * (pserver.sync.dense_lr_scale). */
    float dense_lr_scale;
};

/* The push all others are: applies args->grads through the optimizer with the staleness
 * penalty (adaptive by the row class's running mean tau, dc with args->pulled), updates the
 * class statistics (spw_ps_store_get_staleness), fills the outputs and the echo. Store
 * errors as spw_ps_store_push. Not thread-safe (the store's thread). */
spw_err_t spw_ps_store_push_args(spw_ps_store_t *store, const struct spw_ps_push_args *args,
                                 struct spw_ps_push_result *res);

/* The shard's staleness statistics per row class (indexed by enum spw_ps_row_class). */
struct spw_ps_stale_stats {
    double tau_ref[SPW_PS_CLASSES];    /* running mean tau (adaptive's reference) */
    double alpha_mean[SPW_PS_CLASSES]; /* running mean step scale applied */
    uint64_t rows[SPW_PS_CLASSES];     /* rows observed */
    uint32_t top_threshold;            /* count from which a row is top; UINT32_MAX: none yet */
};

/* Not thread-safe (the store's thread). */
void spw_ps_store_get_staleness(const spw_ps_store_t *store, struct spw_ps_stale_stats *out);

/* A copy of one row for inspection: weights (dim) then slots (spw_ps_slot_floats). */
struct spw_ps_row_copy {
    uint32_t version;
    uint32_t last_update;
    uint32_t count;
    float data[]; /* caller allocates dim + slot floats */
};

/* Copies the row of key into *out (caller-sized). SPW_ERR_NOT_FOUND when the key has no row.
 * Does not change the row or its cache state (beyond loading it into DRAM). */
spw_err_t spw_ps_store_get_row(spw_ps_store_t *store, uint64_t key, struct spw_ps_row_copy *out);

/* Evicts rows not updated for ttl_s, at most max_rows per call (an incremental sweep over DRAM
 * and RocksDB), calling on_evict for each. *evicted may be NULL. */
spw_err_t spw_ps_store_expire(spw_ps_store_t *store, size_t max_rows, size_t *evicted);

/* Writes every dirty DRAM row to RocksDB (batched). */
spw_err_t spw_ps_store_flush(spw_ps_store_t *store);

struct spw_ps_checkpoint_info {
    uint64_t epoch;
    uint64_t rows;  /* rows in the checkpoint */
    uint64_t bytes; /* bytes of its files */
    char path[4096];
    char checksum[17]; /* hex xxh3-64 of the files */
};

/* Flushes dirty rows and writes a RocksDB checkpoint to <root>/checkpoints/<epoch>/shard-<i>
 * with the admission sketch (SKETCH, when admission is on; the server adds its de-duplication
 * windows, DEDUP) and a CHECKSUM file; the directory appears atomically (renamed from a temporary
 * one). On failure nothing of it is left and earlier checkpoints are untouched. SPW_ERR_EXISTS when
 * that epoch's checkpoint is present, SPW_ERR_IO / SPW_ERR_STORE with errstr on I/O failure. */
spw_err_t spw_ps_store_checkpoint(spw_ps_store_t *store, const char *root, uint64_t epoch,
                                  struct spw_ps_checkpoint_info *info, char *errstr,
                                  size_t errstr_size);

/* Finds the newest checkpoint of shard under <root>/checkpoints whose CHECKSUM verifies
 * (logging and skipping others) and replaces db_path's contents with its database files (SKETCH
 * and DEDUP stay in the checkpoint, where the server reads them). SPW_ERR_NOT_FOUND when
 * none verifies (db_path untouched). *epoch receives the restored epoch. */
spw_err_t spw_ps_checkpoint_restore(const char *root, uint32_t shard, const char *db_path,
                                    uint64_t *epoch, char *errstr, size_t errstr_size);

/* Replaces db_path's contents with the checkpoint of shard at exactly epoch under
 * <root>/checkpoints after verifying its CHECKSUM (the coordinator's RestoreRequest).
 * SPW_ERR_NOT_FOUND when absent, SPW_ERR_CORRUPT when it does not verify (db_path untouched in both
 * cases); errstr says which. */
spw_err_t spw_ps_checkpoint_restore_epoch(const char *root, uint32_t shard, uint64_t epoch,
                                          const char *db_path, char *errstr, size_t errstr_size);

/* Verifies one checkpoint directory against its CHECKSUM file, and the framing of its SKETCH and
 * DEDUP files when present (sizes, ranges, their own digest; a refusal is logged with the file
 * and the fault): SPW_OK, SPW_ERR_CORRUPT, SPW_ERR_NOT_FOUND (no CHECKSUM) or SPW_ERR_IO. hex
 * (may be NULL) receives the digest. */
spw_err_t spw_ps_checkpoint_verify(const char *dir, char hex[17]);

struct spw_ps_store_stats {
    uint64_t rows_dram;
    uint64_t rows_dram_max;
    uint64_t rows_db_written; /* rows written to RocksDB (evictions and flushes) */
    uint64_t bytes_dram;      /* slabs + index */
    uint64_t db_reads;        /* rows read from RocksDB */
    uint64_t cold_reads;      /* rows read from the cold file */
    uint64_t rows_cold;       /* rows in the cold file */
    uint64_t bytes_cold;      /* size of the cold file */
    uint64_t db_misses;       /* keys not found in RocksDB either */
    uint64_t db_skipped;      /* of db_misses, keys never written to RocksDB: not looked up there */
    uint64_t evictions;       /* rows evicted from DRAM (to the cold file, else RocksDB) */
    uint64_t expired;         /* TTL evictions */
    uint64_t admitted;
    uint64_t pulls_unadmitted;
    uint64_t rows_created;
    uint64_t rows_pulled;
    uint64_t rows_pushed;
    uint64_t rejected_nonfinite;
    uint64_t dropped_stale;
    uint64_t unadmitted;
    uint64_t dc_corrected;   /* penalty dc: stale rows corrected with their pulled values */
    uint64_t dc_uncorrected; /* penalty dc: stale rows pushed without pulled values */
    uint64_t row_bytes;      /* bytes of one row in DRAM (header + floats) */
};

void spw_ps_store_get_stats(const spw_ps_store_t *store, struct spw_ps_store_stats *stats);

/* A byte range of a store's row slab (spw_ps_store_slab_ahead). */
struct spw_ps_slab_range {
    void *addr;
    size_t len; /* 0: none */
};

/*
 * The part of the row slab that the next rows created will be written to and that may not be in
 * memory yet: from the first unused slot, twice the bytes of the rows created since the last
 * call and at least 4 MiB, page-aligned, less what an earlier call already gave (len 0 when
 * nothing is left: the slab is used up, or the range was given). For another thread to populate
 * with madvise(MADV_POPULATE_WRITE), which faults the pages in without changing their contents
 * and so may run while the store's thread writes rows into them: the first write of a row then
 * finds its page instead of faulting and zeroing it. Store's thread.
 */
void spw_ps_store_slab_ahead(spw_ps_store_t *store, struct spw_ps_slab_range *range);

/* Estimated number of rows in RocksDB (its estimate-num-keys); the cold file's are in
 * spw_ps_store_stats.rows_cold. */
uint64_t spw_ps_store_rows_on_disk(spw_ps_store_t *store);

/* ---- the ZeroMQ server ---- */

typedef struct spw_ps_server spw_ps_server_t;
struct spw_metrics;
struct spw_http;

/* Largest number of trainers whose push sequence numbers a shard remembers (the least recently
 * seen is forgotten beyond it) and the window of out-of-order seqs kept per trainer. */
#define SPW_PS_DEDUP_TRAINERS 1024
#define SPW_PS_DEDUP_WINDOW   64

struct spw_ps_server_conf {
    const char *listen;     /* ZeroMQ endpoint to bind, e.g. "tcp://0.0.0.0:7000" */
    uint32_t shards;        /* shard count (keys of other shards are refused) */
    size_t max_frame;       /* largest request accepted, bytes */
    size_t steps_max_bytes; /* bound of the two-phase pending table (0: 1 GiB) */
    /* a committed step of K trainers steps the dense blocks at sqrt(K) times their rate
     * (pserver.sync.dense_lr_scale = sqrt) */
    bool sync_dense_lr_sqrt;
    const char *data_dir;       /* <data_dir>/db is the live RocksDB */
    const char *checkpoint_dir; /* root of checkpoints/<epoch>/shard-<i>; NULL: data_dir */
    bool restore;               /* open the newest valid checkpoint at start (else start empty) */
    const char *curve_secret_key_file;      /* NULL: no CURVE */
    const char *curve_allowed_clients_file; /* Z85 public keys, one per line; needed with CURVE */
    uint32_t expire_batch;                  /* rows examined per TTL sweep step (every 100 ms) */
    struct spw_ps_store_conf store;         /* db_path is ignored (derived from data_dir) */
    struct spw_metrics *metrics;            /* borrowed; may be NULL */
    struct spw_http *http;                  /* borrowed; readiness is reported to it; may be NULL */
    /* Update stream (docs/ARCHITECTURE.md §6): changed rows every publish_interval_ms (0: off) to
     * publish_topic, through librdkafka properties `kafka.*` of kafka_config (borrowed, may be
     * NULL) with bootstrap.servers replaced by publish_brokers when that is non-empty. Publishing
     * is off when no bootstrap servers are configured either way. The rows of one partition go
     * out in records of up to publish_batch_rows rows (docs/FORMATS.md). */
    uint32_t publish_interval_ms;
    uint32_t publish_batch_rows; /* rows per record (0 or 1: one keyed record per row) */
    const char *publish_topic;
    const char *publish_brokers;
    const spw_config_t *kafka_config;
};

/* Fills conf from a configuration of spw_pserver_config_props (strings borrowed from cfg, which
 * must outlive conf). SPW_ERR_INVALID with errstr for values the table accepts but the shard does
 * not (shard >= shards, a malformed penalty). metrics and http are left NULL. */
spw_err_t spw_ps_server_conf_from_config(const spw_config_t *cfg, struct spw_ps_server_conf *conf,
                                         char *errstr, size_t errstr_size);

/* Restores (or creates) the shard's store, registers metrics, binds the socket. NULL with errstr
 * on failure. Call from the thread that will run it. With conf->store.dim 0 (pserver.dim=auto) the
 * store is opened with the dim of its database (after a restore, the checkpoint's) or, when there
 * is none, with the dim of the first pull or push that carries one; until then every request but
 * stats and health is answered UNAVAILABLE (resent by clients). conf's strings and kafka_config
 * must then outlive the server. */
spw_ps_server_t *spw_ps_server_new(const struct spw_ps_server_conf *conf, char *errstr,
                                   size_t errstr_size);

/* Serves requests until spw_signal_stop_requested() turns true (checked every 100 ms), then
 * returns SPW_OK; returns the error at once when the store could not be opened with a first
 * client's dim (pserver.dim=auto; logged). Owns the store while running. */
spw_err_t spw_ps_server_run(spw_ps_server_t *srv);

/* The endpoint actually bound (resolves a wildcard port). Owned by server. */
const char *spw_ps_server_endpoint(const spw_ps_server_t *server);

/* Flushes the store, closes the socket. NULL is a no-op. */
void spw_ps_server_destroy(spw_ps_server_t *srv);

/* ---- the subcommand ---- */

/* The property table of `sparrow pserver`. */
extern const struct spw_config_prop spw_pserver_config_props[];
extern const size_t spw_pserver_config_n_props;

#endif
