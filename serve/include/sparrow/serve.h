/* Serving (docs/ARCHITECTURE.md §6): a lookup table of rows fed from the latest checkpoint and the
 * model-update stream, the predict request parser, and the `sparrow serve` server. */
#ifndef SPARROW_SERVE_H
#define SPARROW_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/arena.h"
#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/http.h"
#include "sparrow/ingest.h"
#include "sparrow/trainer.h"

/*
 * Conventions: pointers are non-NULL unless said otherwise. The table is safe for one writer and
 * any number of concurrent readers (see below); the parser is pure; a server is driven by the
 * thread that calls spw_serve_run, its HTTP handlers run on libmicrohttpd's threads.
 */

/* ---- the lookup table ---- */

/*
 * key -> (weights[dim], version). Concurrency: the keys are split over SPW_SERVE_STRIPES stripes
 * by a mix of the key; each stripe is an open-addressing table (linear probing, backward-shift
 * deletion) of slots that hold key, version and weights together, under a sequence lock. The
 * single writer (the update tail) changes a row in place between two bumps of its stripe's
 * sequence; readers write nothing shared per key: they copy a row between two equal, even reads
 * of the sequence, else copy it again, so that every row read is one version of itself, and
 * concurrent readers on two cores do not pass a lock's cache line between them (a rwlock per
 * stripe cost a single example 37 lock round trips). A stripe's rehash builds the new array
 * beside the old one and frees the old one once the readers that may hold it have left (two
 * atomic operations per lookup call, not per key). Chosen over RCU copies of rows because rows
 * change in place at a high rate (an RCU copy per update would allocate per row). The slot arrays
 * are mapped in 2 MiB chunks advised as transparent huge pages (one TLB entry per 2 MiB: a
 * single example's keys land on as many distinct pages).
 */
#define SPW_SERVE_STRIPES 256u
/* Widest row the table takes (as the wire's limit). */
#define SPW_SERVE_MAX_DIM 4096u

typedef struct spw_serve_table spw_serve_table_t;

/* A table of rows of dim floats (1..SPW_SERVE_MAX_DIM) holding at most max_rows rows. NULL with
 * errstr on failure. */
spw_serve_table_t *spw_serve_table_new(uint32_t dim, uint64_t max_rows, char *errstr,
                                       size_t errstr_size);

/* Frees the table. NULL is a no-op. No reader may be inside. */
void spw_serve_table_destroy(spw_serve_table_t *table);

/* Floats per row (fixed when made). Thread-safe. */
uint32_t spw_serve_table_dim(const spw_serve_table_t *table);

/* Rows held (approximate while a writer runs). Thread-safe. */
uint64_t spw_serve_table_rows(const spw_serve_table_t *table);

/* Inserts or replaces key's row (dim floats copied) and version. SPW_ERR_NOMEM when the table
 * holds max_rows rows (or cannot grow) and key is new. One writer at a time; when the stripe
 * grows, waits for the lookups in progress to end (a lookup call's length) before freeing the old
 * slots. */
spw_err_t spw_serve_table_put(spw_serve_table_t *table, uint64_t key, const float *weights,
                              uint32_t version);

/* Removes key. SPW_ERR_NOT_FOUND when absent. One writer at a time. */
spw_err_t spw_serve_table_delete(spw_serve_table_t *table, uint64_t key);

/* Copies key's row into weights (dim floats) and its version into *version (may be NULL), both
 * of one write. SPW_ERR_NOT_FOUND when absent (weights untouched). Thread-safe against the
 * writer; about 16 KiB of stack. */
spw_err_t spw_serve_table_get(spw_serve_table_t *table, uint64_t key, float *weights,
                              uint32_t *version);

/* Rows of n keys into rows (n × dim floats, borrowed): a found row is copied, an absent one is
 * zeros. The keys are hashed and their slots prefetched 64 at a time, so that the cache misses
 * overlap; each row is one version of itself, rows of two keys may be of two moments (as with
 * one get per key). Returns how many were found. Thread-safe against the writer (waits only while
 * the writer changes a row it reads); allocates nothing. */
size_t spw_serve_table_get_many(spw_serve_table_t *table, const uint64_t *keys, size_t n,
                                float *rows);

/* ---- predict requests ---- */

/*
 * POST /v1/predict bodies (JSON, at most serve.max_body bytes):
 *   one example:  {"features": {"user": "u1", "hour": 13}, "weight": {"user": 0.5}}
 *            or:  {"keys": [123, "18446744073709551615"], "weights": [1.0, 0.5]}
 *   many:         {"examples": [<example>, ...]}
 * "features"/"weight" follow the JSON event format (docs/ARCHITECTURE.md §2) and are hashed exactly
 * as ingest hashes them (spw_parse_json_line under the same schema); "keys" are pre-hashed feature
 * keys (integers or decimal strings, 0..2^64-1) with optional "weights" (finite, one per key).
 * An example holds "features" or "keys", not both; "id" and "ts" are accepted and ignored. Any
 * other member, a member given twice, a duplicate layout, too many examples or features, a
 * non-finite weight, or malformed JSON is refused with a message (malformed JSON anywhere wins
 * over a refusal of content; of two refusals the first in the body). A key string holds its
 * digits only (no escapes). The body is scanned once without a JSON document: only the values of
 * "features"/"weight" go through json-c.
 */
struct spw_serve_limits {
    uint32_t max_features; /* per example */
    uint32_t max_examples; /* per request */
    uint32_t max_depth;    /* JSON nesting */
};

struct spw_serve_example {
    size_t n;
    const uint64_t *keys;   /* n keys */
    const float *weights;   /* n weights */
    const uint32_t *fields; /* n field ids ("features" requests; NULL for "keys" ones) */
};

struct spw_serve_request {
    size_t n; /* examples */
    struct spw_serve_example *examples;
};

/* Parses body[0..len) (not NUL-terminated) into *out, every byte of which lives in arena (valid
 * until its reset). schema may be NULL (field names hashed). SPW_ERR_INVALID with a message in
 * errstr for a bad request; SPW_ERR_NOMEM when the arena's budget runs out. Thread-safe given
 * distinct arenas. */
spw_err_t spw_serve_request_parse(const char *body, size_t len,
                                  const struct spw_serve_limits *limits, const spw_schema_t *schema,
                                  spw_arena_t *arena, struct spw_serve_request *out, char *errstr,
                                  size_t errstr_size);

/*
 * The protobuf form (Content-Type application/x-protobuf): body[0..len) is a PredictRequest
 * (proto/sparrow.proto) of 1..max_examples PredictExample, each of at most max_features keys with
 * no weights or one finite weight per key. Unknown fields are refused (a newer client's member
 * would otherwise be ignored silently), as are undecodable bytes. Named features have no protobuf
 * form. *out as spw_serve_request_parse's (fields NULL), every byte in arena; keys and weights
 * point into the unpacked message. SPW_ERR_INVALID with a message in errstr for a bad request;
 * SPW_ERR_NOMEM when the arena's budget runs out. The examples are counted before protobuf-c
 * allocates, so that an oversized batch costs no memory. Thread-safe given distinct arenas.
 */
spw_err_t spw_serve_request_parse_pb(const uint8_t *body, size_t len,
                                     const struct spw_serve_limits *limits, spw_arena_t *arena,
                                     struct spw_serve_request *out, char *errstr,
                                     size_t errstr_size);

/* True when a Content-Type header value (NULL: absent) names application/x-protobuf (case
 * insensitive, parameters after ';' ignored): the body is then a PredictRequest. Pure. */
bool spw_serve_content_is_pb(const char *content_type);

/* ---- bootstrap from a checkpoint ---- */

/* Next offset per partition of the model-update stream. */
struct spw_serve_offset {
    int32_t partition;
    int64_t offset;
};

/* What a bootstrap loaded. */
struct spw_serve_bootstrap {
    uint64_t epoch; /* 0: no checkpoint (start empty, tail from the beginning) */
    uint32_t dim;   /* 0 when no checkpoint */
    uint64_t rows;
    struct spw_serve_offset *offsets; /* malloc'd; freed by spw_serve_bootstrap_fini */
    size_t n_offsets;
};

void spw_serve_bootstrap_fini(struct spw_serve_bootstrap *boot);

/*
 * Reads <root>/checkpoints/LATEST and its MANIFEST, verifies every shard checkpoint against the
 * manifest's checksum, opens each read-only (rocksdb_open_for_read_only, its info log under
 * log_dir, so nothing is written into the checkpoint directory) and calls put for every row
 * (weights only). The manifest's update offsets for topic go into boot->offsets. No LATEST:
 * SPW_OK with boot->epoch 0. A table of the checkpoint's dim is created into *table (caller
 * destroys); *table stays NULL without a checkpoint. SPW_ERR_CORRUPT / SPW_ERR_STORE /
 * SPW_ERR_IO / SPW_ERR_NOMEM with errstr otherwise.
 */
spw_err_t spw_serve_bootstrap_load(const char *root, const char *log_dir, const char *topic,
                                   uint64_t max_rows, spw_serve_table_t **table,
                                   struct spw_serve_bootstrap *boot, char *errstr,
                                   size_t errstr_size);

/* ---- the server ---- */

extern const struct spw_config_prop spw_serve_config_props[];
extern const size_t spw_serve_config_n_props;

typedef struct spw_serve spw_serve_t;

/* What a server is made from (the serve.* properties). Strings are borrowed: they, and
 * kafka_config, must outlive the server made from this conf. */
/* ---- a deep model's dense weights (serve/src/dense.c) ---- */

/*
 * The network's weights of a deep model as immutable snapshots: init + the dense-block rows of a
 * table, taken only when every block in the table carries one version (a shard applies and
 * publishes the blocks of a step or push together, so a set of equal versions is one update) and
 * swapped in whole, so that a prediction never mixes two versions. Readers acquire the current
 * snapshot (a reference count keeps it alive while used) and release it; any thread.
 */
typedef struct spw_serve_dense spw_serve_dense_t;

struct spw_serve_dense_snap {
    uint32_t version; /* the blocks' version */
    const float *w;   /* spw_model_dense_params floats */
};

/* For model (deep; copied). NULL with errstr. */
spw_serve_dense_t *spw_serve_dense_new(const struct spw_model *model, char *errstr,
                                       size_t errstr_size);
/* Frees d and its snapshot (no reader may hold one). NULL does nothing. */
void spw_serve_dense_destroy(spw_serve_dense_t *d);

/* Takes a new snapshot from table when every block is present with one version other than the
 * current snapshot's: SPW_OK when one was swapped in, SPW_ERR_STATE when the blocks are absent
 * or of mixed versions (nothing changes), SPW_ERR_NOMEM. One writer thread at a time. */
spw_err_t spw_serve_dense_refresh(spw_serve_dense_t *d, spw_serve_table_t *table);

/* The current snapshot (NULL before the first refresh), valid until released. Thread-safe. */
const struct spw_serve_dense_snap *spw_serve_dense_acquire(spw_serve_dense_t *d);
void spw_serve_dense_release(spw_serve_dense_t *d, const struct spw_serve_dense_snap *snap);

/* Snapshots swapped in, and refreshes that found mixed versions. Thread-safe. */
uint64_t spw_serve_dense_swaps(const spw_serve_dense_t *d);
uint64_t spw_serve_dense_mixed(const spw_serve_dense_t *d);

struct spw_serve_conf {
    const char *checkpoint_dir; /* root of checkpoints/, read only; NULL: start empty */
    /* a checkpoint_dir that does not exist or holds no LATEST starts empty (else spw_serve_new
     * fails naming it) */
    bool allow_empty;
    /* no Kafka consumer: ready once the checkpoint is loaded (needs checkpoint_dir); set by
     * serve.offline or implied (offline_implied) by an unset kafka.bootstrap.servers */
    bool offline, offline_implied;
    const char *log_dir;        /* RocksDB's info logs while checkpoints are read */
    const char *topic;          /* the model-update stream */
    const char *group;          /* consumer group; NULL: a unique one per process */
    const char *http_addr;      /* the HTTP endpoint (the API, /metrics, /healthz, /readyz) */
    uint16_t http_port;         /* 0: any free port */
    const char *http_port_file; /* the bound port is written here; NULL: not written */
    /* bounds on slow clients (serve.http.*); max_connections 0: spw_http_limits_default */
    struct spw_http_limits http_limits;
    size_t max_body;   /* largest request body, bytes */
    uint64_t max_rows; /* rows the lookup table holds at most */
    struct spw_serve_limits limits;
    const char *schema;          /* field-name schema file; NULL: names are hashed */
    bool schema_strict;          /* refuse names absent from the schema */
    const char *auth_token_file; /* bearer token file for the /v1 routes; NULL: no check */
    bool strict;                 /* fail (SPW_ERR_CORRUPT) when updates were lost to retention */
    /* librdkafka properties: the `kafka.*` pass-through keys of this configuration (borrowed) */
    const spw_config_t *kafka_config;
    /* the model (trainer.* settings): LR and FM are inferred from the rows' dim when this is
     * not deep; a deep model predicts with the dense snapshots above */
    struct spw_model model;
};

/* Fills conf from a configuration of spw_serve_config_props (strings borrowed from cfg, which must
 * outlive conf and the server). Every check of values happens here: SPW_ERR_INVALID with errstr
 * for values the table accepts but serve does not (serve.http.port=-1; offline, explicit or by an
 * unset kafka.bootstrap.servers, without serve.checkpoint.dir). Empty strings of optional paths
 * become NULL. Pure; thread-safe on a cfg no one changes. */
spw_err_t spw_serve_conf_from_config(const spw_config_t *cfg, struct spw_serve_conf *conf,
                                     char *errstr, size_t errstr_size);

/* Loads the checkpoint, starts HTTP and the update consumer (not when offline) from conf (copied;
 * its strings and kafka_config are borrowed for the server's life). NULL with errstr on failure,
 * among them a checkpoint_dir that does not exist or holds no checkpoint without allow_empty.
 * Call from the thread that will run it. */
spw_serve_t *spw_serve_new(const struct spw_serve_conf *conf, char *errstr, size_t errstr_size);

/* Tails model-updates (offline: only waits) until a stop request (signal). SPW_OK then;
 * SPW_ERR_CORRUPT when updates were lost to retention under serve.strict. */
spw_err_t spw_serve_run(spw_serve_t *serve);

/* Stops HTTP and Kafka and frees. NULL is a no-op. */
void spw_serve_destroy(spw_serve_t *serve);

#endif
