/* Ingest: parsers for the raw event formats, validation against named limits, and a reader that
 * streams examples from a file with every bad record reported by position and reason. */
#ifndef SPARROW_INGEST_H
#define SPARROW_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/arena.h"
#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/hash.h"
#include "sparrow/sparrow.pb-c.h"

enum spw_format {
    SPW_FORMAT_PB,     /* length-delimited sparrow.Example */
    SPW_FORMAT_JSON,   /* JSON lines (docs/ARCHITECTURE.md §2) */
    SPW_FORMAT_CRITEO, /* label \t I1..I13 \t C1..C26 */
    SPW_FORMAT_AUTO,   /* one of the three, told from the first bytes (spw_format_sniff) */
};

/* "pb" | "json" | "criteo" | "auto" -> format. SPW_ERR_INVALID for anything else. */
spw_err_t spw_format_parse(const char *name, enum spw_format *out);
/* "pb", "json", "criteo", "auto". Static strings. */
const char *spw_format_name(enum spw_format format);
/* For messages: "length-delimited protobuf (pb)", "JSON lines (json)", "Criteo TSV (criteo)". */
const char *spw_format_title(enum spw_format format);

/* The compression len bytes at data (an input's first bytes) start with, by magic number:
 * "gzip", "zstd", "xz", "bzip2", "lz4", "zip"; NULL for none of them. Pure. */
const char *spw_format_compression(const void *data, size_t len);

/*
 * The format an input's first bytes (len of them at data: the first line whole, or as much as
 * the caller has, 512 bytes are plenty) look like, by these rules: a first line that is not
 * text (a byte below 0x20 other than tab and CR, or invalid UTF-8) is pb (a varint length then
 * protobuf); text whose first non-blank byte is '{' is JSON lines; text with a tab is Criteo TSV.
 * A UTF-8 byte-order mark and blank lines before are skipped. SPW_OK with *out; SPW_ERR_EOF when
 * there is nothing but blanks; SPW_ERR_INVALID when the first line is text of none of the formats
 * (a CSV, say), with why (quoting the line's start). Pure; thread-safe.
 */
spw_err_t spw_format_sniff(const void *data, size_t len, enum spw_format *out, char *why,
                           size_t why_size);

/* Why a record was refused; each has a name for dead-letter headers and metric labels. */
enum spw_reject_reason {
    SPW_REJECT_NONE = 0,
    SPW_REJECT_UNDECODABLE, /* not valid pb / JSON / TSV */
    SPW_REJECT_BAD_LABEL,   /* missing, non-finite or outside [0,1] (when binary) */
    SPW_REJECT_TOO_MANY_FEATURES,
    SPW_REJECT_BAD_FIELD, /* field id above the limit, unknown name with a strict schema */
    SPW_REJECT_NONFINITE_WEIGHT,
    SPW_REJECT_OVERSIZED, /* record above max_record_bytes */
    SPW_REJECT__COUNT
};

/* "undecodable", "bad_label", "too_many_features", "bad_field", "nonfinite_weight", "oversized". */
const char *spw_reject_reason_name(enum spw_reject_reason reason);

/* Named limits every parser enforces. */
struct spw_ingest_limits {
    uint32_t max_features;   /* features per example */
    uint32_t max_field_id;   /* largest accepted field id (<= SPW_FIELD_ID_MAX) */
    size_t max_record_bytes; /* one line or one pb record */
    bool binary_label;       /* labels must be 0 or 1 (else any finite float) */
};

/* max_features 4096, max_field_id SPW_FIELD_ID_MAX, max_record_bytes 1 MiB, binary labels. */
void spw_ingest_limits_default(struct spw_ingest_limits *limits);

struct spw_config;
/* The rows spw_ingest_limits_from_config reads, for every role that validates records (ingest,
 * the trainer, eval): PREFIX.max_features, .max_field_id, .max_record_bytes (default and maximum
 * the role's: its records differ), .float_label. prefix and the numbers are string literals and
 * constants. */
#define SPW_INGEST_LIMIT_CONFIG_PROPS(prefix, max_record_def, max_record_max)                      \
    {prefix ".max_features",                                                                       \
     SPW_CONFIG_INT,                                                                               \
     "4096",                                                                                       \
     1,                                                                                            \
     1048576,                                                                                      \
     NULL,                                                                                         \
     "Features per example; an example with more is rejected (ingest dead-letters it as "          \
     "too_many_features, a trainer counts and skips it)."},                                        \
        {prefix ".max_field_id",                                                                   \
         SPW_CONFIG_INT,                                                                           \
         "2147483647",                                                                             \
         0,                                                                                        \
         2147483647,                                                                               \
         NULL,                                                                                     \
         "Largest accepted field id; an example with a larger one is rejected (bad_field)."},      \
        {prefix ".max_record_bytes",                                                               \
         SPW_CONFIG_INT,                                                                           \
         max_record_def,                                                                           \
         64,                                                                                       \
         max_record_max,                                                                           \
         NULL,                                                                                     \
         "Largest input record (a raw event, a file line or Example, a Kafka ExampleBatch); a "    \
         "larger one is rejected (oversized)."},                                                   \
    {                                                                                              \
        prefix ".float_label", SPW_CONFIG_BOOL, "false", 0, 0, NULL,                               \
            "Accept any finite label (soft or regression targets) instead of 0/1."                 \
    }

/* The limits from a role's `<prefix>.max_features`, `.max_field_id`, `.max_record_bytes` and
 * `.float_label` properties (each role's table declares them with its own defaults). cfg is
 * borrowed; pure. */
void spw_ingest_limits_from_config(const struct spw_config *cfg, const char *prefix,
                                   struct spw_ingest_limits *limits);

/* Field names -> ids for JSON input. Without a schema (NULL), spw_hash_field_name() maps names.
 * Opaque; read-only after loading, so safe to share between threads. */
typedef struct spw_schema spw_schema_t;

/* Loads `name = id` lines (`#` comments). strict: names absent from the file are rejected
 * (SPW_REJECT_BAD_FIELD) instead of hashed. NULL with errstr (naming file:line) on error. */
spw_schema_t *spw_schema_load(const char *path, bool strict, char *errstr, size_t errstr_size);
void spw_schema_destroy(spw_schema_t *schema);

/* The field id of name (len bytes) under schema: the schema's id, else (schema NULL or not strict)
 * spw_hash_field_name(). SPW_ERR_NOT_FOUND when a strict schema lacks the name. Thread-safe. */
spw_err_t spw_schema_field_id(const spw_schema_t *schema, const char *name, size_t len,
                              uint32_t *id);

/* Result of parsing one record. */
struct spw_parse_error {
    enum spw_reject_reason reason;
    char message[160]; /* human-readable detail: "feature \"hour\": weight is NaN" */
};

/* An integer column of a Criteo line: a decimal int64 that consumes all of s[0..len) (optional '-',
 * then 1..19 digits, no overflow) into *out; false otherwise. Pure, thread-safe. */
bool spw_parse_criteo_int(const char *s, size_t len, int64_t *out);

/*
 * Parsers. Each parses one record into an Example allocated from arena (valid until reset),
 * validates it against limits (spw_ingest_validate), and returns SPW_OK, or SPW_ERR_INVALID with
 * err filled (*out NULL), or SPW_ERR_NOMEM when the arena's budget runs out. They never read past
 * len and accept input that is not NUL-terminated. Thread-safe given distinct arenas.
 *
 * Keys are spw_hash_key(field, raw value bytes). JSON: the value's text for strings, the number's
 * literal text for numbers (so "13" and 13 give one key); the optional "weight" object gives
 * per-feature weights; "id" and "ts" are optional; "oracle_p" is accepted. Also (parse_json.c
 * has the full table): a bool value is hashed as "true"/"false", null adds no feature, an array
 * adds one feature per element; integers are re-printed in decimal (so -0 is hashed as "0");
 * a weight for a name absent from "features" is BAD_FIELD. Criteo: integer
 * columns I1..I13 are bucketed with spw_hash_criteo_bucket and hashed as the bucket's decimal
 * text; categorical columns hashed as their text; empty values skipped; field ids are
 * spw_hash_field_name("I1".."I13", "C1".."C26").
 */
spw_err_t spw_parse_json_line(const char *line, size_t len, const spw_schema_t *schema,
                              const struct spw_ingest_limits *limits, spw_arena_t *arena,
                              Sparrow__Example **out, struct spw_parse_error *err);
spw_err_t spw_parse_criteo_line(const char *line, size_t len,
                                const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                Sparrow__Example **out, struct spw_parse_error *err);
/* One pb Example's bytes (without the length prefix). */
spw_err_t spw_parse_pb_example(const void *data, size_t len, const struct spw_ingest_limits *limits,
                               spw_arena_t *arena, Sparrow__Example **out,
                               struct spw_parse_error *err);

/*
 * Feature hashing: the JSON parser's step, exported so that serve's predict requests hash a
 * "features" object exactly as ingest hashes the same event (every JSON path goes through
 * spw_ingest_feature_key). All are pure and thread-safe; memory is the caller's or the arena's.
 */

/* The key of one value of a feature of field: spw_hash_key(field, text), text being the value's
 * bytes by the rules above (a string's decoded bytes, a number's literal, "true" / "false"). */
static inline uint64_t spw_ingest_feature_key(uint32_t field, const char *text, size_t len)
{
    return spw_hash_key(field, text, len);
}

struct json_object; /* json-c's */

/* An event's features, in the order the parser gives them. */
struct spw_ingest_features {
    size_t n;
    uint32_t *fields; /* n field ids; NULL when n is 0 */
    uint64_t *keys;   /* n keys; NULL when n is 0 */
    float *weights;   /* n weights; NULL without a "weight" object (everything weighs 1) */
};

/* One member of "features", name (NUL-terminated) with its json-c value (a scalar, an array of
 * scalars, or NULL for JSON null, which adds nothing), into keys: the field id of name under
 * schema (BAD_FIELD when a strict schema lacks it or it is above limits->max_field_id), then one
 * key per non-null value, each weighing weight. Appends at out->n to out's arrays, which the
 * caller sized for every value (weights only when out->weights is not NULL). SPW_ERR_INVALID
 * with err (naming the feature) for a value that has no text (object, nested array, an integer
 * out of range, NaN). value is borrowed. */
spw_err_t spw_ingest_json_feature(const char *name, struct json_object *value, float weight,
                                  const spw_schema_t *schema,
                                  const struct spw_ingest_limits *limits,
                                  struct spw_ingest_features *out, struct spw_parse_error *err);

/* A "features" object (json_type_object) and the optional "weight" object (NULL: none), as
 * spw_parse_json_line turns them into an Example's fields, keys and weights: the weights checked
 * (numbers, finite as float, named features), at most limits->max_features features, then
 * spw_ingest_json_feature per member in order. Arrays in out come from arena (valid until its
 * reset). SPW_ERR_INVALID with err, SPW_ERR_NOMEM. Objects from another tokener than the
 * parser's must first pass spw_ingest_json_features_check. features and weight are borrowed. */
spw_err_t spw_ingest_json_features(struct json_object *features, struct json_object *weight,
                                   const spw_schema_t *schema,
                                   const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                   struct spw_ingest_features *out, struct spw_parse_error *err);

/* What the JSON-lines tokener checks of features and weight (NULL: none) when they are part of
 * a line: json-c's UTF-8 structure check of every name and string, and the parser's nesting
 * limit (a value inside at most seven containers, counting the record). SPW_ERR_INVALID
 * (UNDECODABLE) with err for the first failure in text order. For objects parsed by another json-c
 * tokener (serve's). */
spw_err_t spw_ingest_json_features_check(struct json_object *features, struct json_object *weight,
                                         struct spw_parse_error *err);

/* Checks a decoded Example against limits: label, feature count, field ids, finite weights,
 * consistent array lengths. SPW_OK or SPW_ERR_INVALID with err filled. */
spw_err_t spw_ingest_validate(const Sparrow__Example *ex, const struct spw_ingest_limits *limits,
                              struct spw_parse_error *err);

/* The field id the Criteo reader gives column col (0 = I1 .. 12 = I13, 13 = C1 .. 38 = C26). */
uint32_t spw_criteo_field_id(unsigned col);

/* A file reader over one of the formats. Owned by one thread. */
typedef struct spw_reader spw_reader_t;

/* Opens path ("-" for stdin) in format. schema may be NULL (borrowed; must outlive the reader).
 * NULL with errstr on failure. Nothing is read before the first spw_reader_next, which looks at
 * the first bytes: a gzip input (by its magic number, whatever the name) is inflated as it is
 * read (concatenated members as one stream); another compression (zstd, xz, bzip2, lz4, zip) is
 * SPW_ERR_UNSUPPORTED; SPW_FORMAT_AUTO becomes the format the first line looks like
 * (spw_format_sniff; logged), SPW_ERR_UNSUPPORTED when it looks like none; an explicit format the
 * data does not look like is read as asked, with a warning (spw_reader_explain says it). */
spw_reader_t *spw_reader_open(const char *path, enum spw_format format,
                              const struct spw_ingest_limits *limits, const spw_schema_t *schema,
                              char *errstr, size_t errstr_size);

/* Like spw_reader_open over an open stream (borrowed: the reader never closes it; it must outlive
 * the reader). Reads with fread, so a slow pipe delivers records a buffer at a time; prefer
 * spw_reader_open for files and stdin (read(2): records arrive as soon as they are written). */
spw_reader_t *spw_reader_open_stream(FILE *stream, enum spw_format format,
                                     const struct spw_ingest_limits *limits,
                                     const spw_schema_t *schema, char *errstr, size_t errstr_size);

/* Closes the file and frees the reader. NULL is a no-op. */
void spw_reader_close(spw_reader_t *reader);

/*
 * Reads the next record into an Example from arena. Returns SPW_OK, SPW_ERR_EOF at the end, or
 * SPW_ERR_INVALID for a bad record: err says why and spw_reader_position() where (the caller
 * logs or dead-letters it and calls again: the reader has moved past the record). SPW_ERR_TOO_BIG
 * for a pb length prefix beyond the limit, after which a pb stream cannot continue (the next call
 * returns SPW_ERR_EOF); a malformed or truncated prefix and a truncated last record are
 * SPW_ERR_INVALID (UNDECODABLE) and likewise end the stream. An oversized text line is skipped
 * (never buffered whole) and reported as SPW_ERR_INVALID with reason OVERSIZED. Empty lines are
 * skipped and are not records. SPW_ERR_IO on a read error (sticky); SPW_ERR_NOMEM when the arena
 * or the record buffer cannot grow. The reader's buffer is bounded by max_record_bytes.
 */
spw_err_t spw_reader_next(spw_reader_t *reader, spw_arena_t *arena, Sparrow__Example **out,
                          struct spw_parse_error *err);

/* Where the last record started: "line 12" for text formats, "record 7 at byte 1234" for pb.
 * Owned by the reader; valid until the next call. */
const char *spw_reader_position(const spw_reader_t *reader);

/* Raw bytes of the last record (for dead-letter routing): the line without its newline, or the
 * pb message without its prefix. Empty (NULL, 0) for an oversized record, which is not kept, and
 * after SPW_ERR_EOF. Valid until the next call. */
const void *spw_reader_raw(const spw_reader_t *reader, size_t *len);

/* Records read (good and bad; blank lines are not records), and of them the bad ones. */
uint64_t spw_reader_records(const spw_reader_t *reader);
uint64_t spw_reader_rejected(const spw_reader_t *reader);

/* The format records are read in: the one asked for, or SPW_FORMAT_AUTO's detected one once the
 * first spw_reader_next has run. */
enum spw_format spw_reader_format(const spw_reader_t *reader);

/* "gzip" when the input is being inflated, else NULL (also before the first spw_reader_next). */
const char *spw_reader_compression(const spw_reader_t *reader);

/* For a role's message about rejected records, into buf (size bytes; empty before the first
 * record or after a read error): "the input was read as PROP=pb but looks like Criteo TSV
 * (criteo): set PROP=criteo, or PROP=auto to detect it", or, when the data looks like its
 * format, "the input was read as PROP=json (detected)". format_prop names the role's property
 * ("trainer.format"). */
void spw_reader_explain(const spw_reader_t *reader, const char *format_prop, char *buf,
                        size_t size);

/*
 * The end-of-input check of a role that reads examples (the trainer, ingest): records read, of
 * them rejected ones, against max_ratio (the role's *.max_reject_ratio). SPW_OK when at least one
 * record was accepted and rejected <= max_ratio x records; else SPW_ERR_INVALID with errstr: "in:
 * no record in the input (it is empty)" or "in: 9042 of 9042 records rejected (100%, above
 * ratio_prop=0.5), most as undecodable; " followed by explain (spw_reader_explain, may be empty).
 * by_reason (SPW_REJECT__COUNT counts, may be NULL) names the most common reason. Pure.
 */
spw_err_t spw_ingest_reject_check(const char *in, uint64_t records, uint64_t rejected,
                                  const uint64_t *by_reason, double max_ratio,
                                  const char *ratio_prop, const char *explain, char *errstr,
                                  size_t errstr_size);

/* ---- the role: `sparrow ingest` as a library object ----
 *
 * Raw events from a Kafka topic or a file are parsed and validated into ExampleBatch records,
 * batched per key bucket and written to a Kafka topic or a file; invalid events go to the
 * dead-letter output unchanged. Input offsets are committed only after every record holding
 * their events was delivered (at-least-once). An ingest is owned by one thread: the one that
 * created it runs and destroys it. It lives in ingest.h, not a header of its own, because a
 * module has one public header (the house style: include/sparrow/<module>.h), as pserver.h carries
 * both its store and its server.
 */

struct spw_metrics;
struct spw_http;

/* Events of a Kafka input over which ingest.max_reject_ratio is judged, once. */
#define SPW_INGEST_REJECT_CHECK_EVENTS 1000u

/* The property table of `sparrow ingest`. */
extern const struct spw_config_prop spw_ingest_config_props[];
extern const size_t spw_ingest_config_n_props;

/* What an ingest is made from. Strings are borrowed for the duration of spw_ingest_new only
 * (nothing in conf is kept but metrics and http). */
struct spw_ingest_conf {
    const char *in;          /* kafka://HOST:PORT/TOPIC or file:PATH ("-": stdin); required */
    const char *out;         /* kafka://HOST:PORT/TOPIC or file:PATH ("-": stdout); required */
    const char *dlq;         /* dead-letter output URL; NULL: out with ".dlq" appended */
    enum spw_format format;  /* SPW_FORMAT_AUTO: from the file's first bytes or the first record */
    double max_reject_ratio; /* above it (file: at its end; Kafka: over the first
                                SPW_INGEST_REJECT_CHECK_EVENTS) the run fails */
    const char *group;       /* consumer group of a Kafka input */
    bool start_latest;       /* a partition without a committed offset starts at its end */
    bool strict;             /* offsets lost to retention end the run (SPW_ERR_CORRUPT) */
    size_t batch_size;       /* examples per ExampleBatch record (per bucket), >= 1 */
    size_t max_bytes;        /* largest ExampleBatch record */
    uint64_t linger_ms;      /* longest wait of an event for its batch (Kafka input) */
    const char *key_field;   /* field name keying the output records; NULL or "": not keyed */
    size_t key_buckets;      /* buckets when keyed, >= 1 */
    struct spw_ingest_limits limits;
    const char *schema; /* schema file; NULL: names hashed */
    bool schema_strict; /* names absent from the schema are dead-lettered */
    size_t inflight;    /* flushed cycles awaiting delivery before input pauses, >= 1 */
    uint64_t commit_interval_ms;
    uint64_t shutdown_timeout_ms;     /* grace period to deliver what is queued on SIGTERM */
    int kafka_close_timeout_ms;       /* longest wait for the Kafka input's close */
    const spw_config_t *kafka_config; /* its `kafka.*` pass-through properties; may be NULL */
    struct spw_metrics *metrics;      /* borrowed, must outlive the ingest; may be NULL */
    struct spw_http *http;            /* borrowed, readiness is reported to it; may be NULL */
};

/* Fills conf from a configuration of spw_ingest_config_props (strings borrowed from cfg, which
 * must outlive conf). Checks what the table cannot: ingest.in and ingest.out set, every kafka.*
 * property known to librdkafka (errstr names a bad one). SPW_ERR_INVALID with errstr on failure.
 * metrics and http are left NULL. Pure apart from cfg; thread-safe for distinct conf. */
spw_err_t spw_ingest_conf_from_config(const spw_config_t *cfg, struct spw_ingest_conf *conf,
                                      char *errstr, size_t errstr_size);

typedef struct spw_ingest spw_ingest_t;

/* Loads the schema, opens the input (a file reader or a Kafka group consumer) and both outputs,
 * registers the sparrow_ingest_* metrics in conf->metrics, and logs "ingest started". NULL with
 * errstr on failure (nothing left open). The caller owns the result (spw_ingest_destroy). */
spw_ingest_t *spw_ingest_new(const struct spw_ingest_conf *conf, char *errstr, size_t errstr_size);

/*
 * Runs until a file input ends, or spw_signal_stop_requested() turns true (a Kafka input runs
 * until then), then drains: flushes, waits (at most shutdown_timeout_ms) for delivery, stores and
 * commits the delivered offsets. Reports ready to conf->http while running. Returns SPW_OK;
 * SPW_ERR_CORRUPT when strict and offsets were lost to retention; SPW_ERR_INVALID (logged as
 * "input rejected", naming the likely cause) when a file input yielded no example or more than
 * max_reject_ratio of its events were dead-lettered, or a Kafka input did over its first
 * SPW_INGEST_REJECT_CHECK_EVENTS events; SPW_ERR_UNSUPPORTED when the format of a Kafka input
 * (auto) cannot be told from its first record; another error (logged) when an output failed, the
 * input failed, or output was left undelivered. Call once.
 */
spw_err_t spw_ingest_run(spw_ingest_t *ingest);

/* What a run did, for its stop line and tests. */
struct spw_ingest_stats {
    uint64_t events;       /* raw events read */
    uint64_t examples;     /* valid examples written */
    uint64_t rejected;     /* events dead-lettered */
    double events_seconds; /* from taking the first event to having processed the last */
};

/* The counts so far. Same thread as spw_ingest_run. */
void spw_ingest_stats(const spw_ingest_t *ingest, struct spw_ingest_stats *stats);

/* Leaves the Kafka group (committing what was stored), closes the outputs (flushing at most 5 s)
 * and the input, frees. NULL is a no-op. */
void spw_ingest_destroy(spw_ingest_t *ingest);

#endif
