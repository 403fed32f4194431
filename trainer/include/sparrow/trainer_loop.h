/* The trainer's worker loop (`sparrow trainer`, docs/ARCHITECTURE.md §4): input from a file or a
 * Kafka group, mini-batches, pipelined pulls, compute, top-k compression, windowed pushes,
 * progressive validation in the log and /metrics, offsets stored once their pushes are
 * acknowledged, and a hook interface for the coordinator (clocks, barriers, checkpoint epochs). */
#ifndef SPARROW_TRAINER_LOOP_H
#define SPARROW_TRAINER_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/ingest.h"
#include "sparrow/ps_client.h"
#include "sparrow/trainer.h"

/*
 * Conventions (in addition to err.h's and trainer.h's):
 * - A loop is owned by one thread: the one that calls spw_trainer_loop_run. Hooks run on that
 *   thread, between batches, and may call the functions below marked "from a hook". Metrics the
 *   loop updates may be rendered from any thread.
 * - A micro-batch is trainer.batch examples (fewer at the end of a file, or when Kafka input
 *   lingers). A step is acc_steps micro-batches and ends in one push (split into several when the
 *   rows would exceed the frame limit). Steps are numbered from 0.
 * - Order of one micro-batch: input read -> [step start: before_step hook] -> pull started
 *   (with prefetch: during the previous micro-batch's compute) -> the next micro-batch read and
 *   its pull started (prefetch) -> pull waited -> scored (progressive validation) -> gradients ->
 *   [step end: compress, push, after_step hook] -> offsets of acknowledged pushes stored.
 * - Offsets (Kafka input): a record's offset is stored (for the group's next commit) once every
 *   example of it went into a step whose push every shard acknowledged (residuals kept by top-k
 *   are not waited for: they are pushed with a later step or at the next checkpoint flush).
 *   Storage is at-least-once between checkpoints; spw_trainer_loop_checkpoint gives exact
 *   positions (record offset plus examples of it already trained).
 * - Stopping: a stop request (SIGTERM, spw_signal_request_stop) or a hook returning
 *   SPW_ERR_STOPPED ends the loop after the micro-batch being computed: the partial
 *   accumulation and every residual are pushed, pushes drained within the grace period, offsets
 *   stored and committed, the consumer leaves its group. Micro-batches read but not computed
 *   (the prefetched one, or one whose rows had not arrived) are dropped: their offsets are not
 *   stored, so Kafka input reads them again after a restart.
 */

/* Where a Kafka partition's input stands: the next record to read and how many examples of that
 * record were already trained on (0 at a record boundary). */
struct spw_trainer_position {
    int64_t offset; /* next offset; SPW_TRAINER_OFFSET_STORED: the group's committed one */
    int32_t partition;
    uint32_t skip; /* examples of record `offset` to skip when resuming from here */
    /* on_revoke only: where reading stood (the record after the examples taken, and how many of
     * it were taken), when anything was read since the assignment */
    bool read_valid;
    uint32_t read_skip;
    int64_t read_offset;
    /* examples handed out from it since its assignment: on_revoke, all of them (each is trained,
     * or dropped with the revoke before it is counted); checkpoint positions, those up to the
     * stored offset (not a prefetched micro-batch's, whose pushes are not acknowledged yet) */
    uint64_t taken;
};
#define SPW_TRAINER_OFFSET_STORED (-1000)

/* Examples and rejected records of a Kafka input over which trainer.max_reject_ratio is judged,
 * once (later rejects are only counted: a healthy stream's bad records must not stop it). */
#define SPW_TRAINER_REJECT_CHECK_RECORDS 1000u

/* A source high-water mark (docs/ARCHITECTURE.md §5): of input partition `partition`, the highest
 * offset of raw-event partition (source_topic, source_partition) trained. */
struct spw_trainer_mark {
    int32_t partition;
    int32_t source_partition;
    int64_t offset;
    const char *source_topic; /* borrowed from the loop (valid until it is destroyed) */
};

/* What one finished step did (after_step). */
struct spw_trainer_step_info {
    uint64_t step;         /* 0-based */
    uint64_t seq;          /* seq of the step's last push; 0 when it pushed nothing */
    uint32_t micro;        /* micro-batches in the step */
    uint64_t examples;     /* examples in the step */
    double loss_sum;       /* summed logloss of those examples (scored before training) */
    size_t rows_pushed;    /* rows sent by the step (after top-k) */
    uint64_t compute_ns;   /* forward/backward/compress time of the step */
    uint64_t pull_wait_ns; /* time spent waiting for rows in the step */
};

typedef struct spw_trainer_loop spw_trainer_loop_t;

/*
 * Callbacks of the coordinator (every member may be NULL). They run on the loop's thread.
 * before_step and after_step may block (a clock barrier, a checkpoint). A return of
 * SPW_ERR_STOPPED stops the loop cleanly (as SIGTERM does); any other error ends
 * spw_trainer_loop_run with it (after the same flush).
 */
struct spw_trainer_hooks {
    void *opaque;
    /* Before step `step`'s first micro-batch is pulled (without prefetch) or computed (with it:
     * its rows may already be pulled; spw_trainer_loop_checkpoint re-pulls them). */
    spw_err_t (*before_step)(void *opaque, spw_trainer_loop_t *loop, uint64_t step);
    /* After the step's push was sent (acknowledgements may be pending). */
    spw_err_t (*after_step)(void *opaque, spw_trainer_loop_t *loop,
                            const struct spw_trainer_step_info *info);
    /* While Kafka input is idle (no record for trainer.batch.linger), at most every linger. */
    spw_err_t (*idle)(void *opaque, spw_trainer_loop_t *loop);
    /* Partitions newly assigned: the callee may set parts[i].offset / .skip (they arrive as
     * SPW_TRAINER_OFFSET_STORED / 0) to resume from a checkpoint manifest. */
    void (*on_assign)(void *opaque, struct spw_trainer_position *parts, size_t n);
    /* Partitions taken away (their positions as last stored, offset -1 when none; and where
     * reading stood, read_*). */
    void (*on_revoke)(void *opaque, const struct spw_trainer_position *parts, size_t n);
};

struct spw_metrics;
struct spw_http;

/* Everything the loop needs; spw_trainer_loop_conf_from_config fills it from trainer.* */
struct spw_trainer_loop_conf {
    struct spw_trainer_params params;
    /* input */
    const char *in;         /* "file:PATH" ("file:-" is stdin) or "kafka://BOOTSTRAP/TOPIC" */
    enum spw_format format; /* of file input (SPW_FORMAT_AUTO: told from its first bytes) */
    /* Above this share of rejected records (file: at its end, or no example at all; Kafka: over
     * the first SPW_TRAINER_REJECT_CHECK_RECORDS) the run fails with SPW_ERR_INVALID. */
    double max_reject_ratio;
    const char *schema_path; /* JSON field names -> ids; NULL or "": names are hashed */
    struct spw_ingest_limits limits;
    const char *group;                /* Kafka consumer group */
    bool start_latest;                /* partitions without committed offsets start at the end */
    bool strict_offsets;              /* offsets lost to retention end the run (SPW_ERR_CORRUPT) */
    const spw_config_t *kafka_config; /* borrowed; its kafka.* pass-through properties; NULL */
    size_t max_record_bytes;          /* largest Kafka record (ExampleBatch) accepted */
    uint64_t linger_ms;               /* Kafka: longest wait for a micro-batch to fill */
    uint64_t kafka_close_ms;          /* Kafka: longest wait for the consumer's close; 0: 10 s */
    uint64_t max_examples;            /* stop after this many examples; 0: no limit */
    /* parameter servers: client.shards etc.; dim, stores, trainer_id, epoch, metrics are set by
     * the loop from the fields below */
    struct spw_ps_client_conf client;
    uint32_t inproc_shards;       /* > 0: that many in-process shards instead of client.shards */
    const char *inproc_dir;       /* their RocksDB root; NULL or "": a temporary directory */
    uint64_t inproc_memory_bytes; /* DRAM budget of each in-process shard */
    struct spw_ps_penalty inproc_penalty; /* staleness penalty of the in-process shards */
    uint32_t trainer_id;                  /* 0: derived from the host name and process id */
    uint64_t epoch;   /* push epoch; 0: wall-clock ms at start (fresh per run) */
    bool prefetch;    /* pull the next micro-batch while computing (ZeroMQ shards only: in-process
                         pulls complete at once, so they are made after the previous push) */
    bool fresh_reads; /* with prefetch: push acks refresh the prefetched rows (own pushes) */
    /* two-phase steps: only the bias and the dense blocks wait for the commit; the other rows
     * are pushed untagged and apply at once (trainer.sync.rows = dense) */
    bool sync_dense_only;
    /* pushes carry the row values each gradient was computed from (PushRequest.pulled, for the
     * shards' penalty dc): a row's values as pulled (and echo-refreshed) for the latest
     * micro-batch of the step that held its key; a top-k residual sent on its own carries those
     * of the step that left it. n × dim × (fp16 ? 2 : 4) more bytes per push. */
    bool push_pulled;
    /* operations */
    uint64_t log_interval_ms;    /* progress line period; 0: none */
    uint64_t commit_interval_ms; /* Kafka offset commits; 0: never (a coordinator commits) */
    uint64_t grace_ms;           /* on stop: longest wait for pushes to be acknowledged */
    uint64_t debug_delay_ms;     /* straggler injection: sleep before every step */
    double debug_slow_factor;    /* straggler injection: stretch the loop's own work (all but
                                    the hooks' waits) to this factor (>= 1) */
    uint64_t counter_key;        /* non-zero: every step also pushes its example count to this key
                                  * (uncompressed; the shards' pserver.debug.counter_key adds it up) */
    struct spw_metrics *metrics; /* borrowed; may be NULL; sparrow_trainer_* */
    struct spw_http *http;       /* borrowed; may be NULL; readiness is reported to it */
    /* the role (spw_trainer_new): the coordinator's endpoint; NULL or "": none */
    const char *coordinator;
    /* CurveZMQ to the coordinator (NULL or "": plaintext): its public key
     * (trainer.coordinator.curve.server_key_file) and this trainer's secret key, the one it
     * gives the shards (trainer.curve.client_key_file) */
    const char *coordinator_curve_server_key_file;
    const char *coordinator_curve_client_key_file;
    /* the role without a coordinator: checkpoints under this root (trainer.checkpoint.dir; NULL
     * or "": none), in the coordinator's layout (sparrow/ckpt_layout.h), every
     * checkpoint_interval_ms (0: only the final one) and at the end of a file; the shards start
     * from its LATEST. ZeroMQ shards: a coordinator runs inside the trainer (its checkpoint
     * epochs; the shards' pserver.checkpoint.dir must be this directory); in-process shards:
     * the trainer checkpoints them itself. keep: epochs kept; timeout: longest wait for the
     * shards' checkpoints of one epoch. */
    const char *checkpoint_dir;
    uint64_t checkpoint_interval_ms;
    uint64_t checkpoint_timeout_ms;
    uint32_t checkpoint_keep;
    /* in-process shards: restore each from epoch inproc_restore_epoch (> 0) under
     * inproc_restore_root before it opens (set by the role from the checkpoint's LATEST) */
    const char *inproc_restore_root;
    uint64_t inproc_restore_epoch;
};

/* Defaults: the trainer.* table's values with trainer.in unset. */
void spw_trainer_loop_conf_default(struct spw_trainer_loop_conf *conf);

/*
 * Fills conf from cfg (a configuration of spw_trainer_config_props). Strings are borrowed from
 * cfg, which must outlive conf and the loop. metrics and http are left NULL. SPW_ERR_INVALID with
 * errstr for an unset or malformed trainer.in, a bad shard list ("inproc" or "inproc:N" selects
 * in-process shards), or a cross-property error.
 */
spw_err_t spw_trainer_loop_conf_from_config(const spw_config_t *cfg,
                                            struct spw_trainer_loop_conf *conf, char *errstr,
                                            size_t errstr_size);

/*
 * Creates a loop: opens the input (file or Kafka consumer, subscribed), the in-process shards or
 * the ZeroMQ client (connecting does not wait for shards), the backend and the compressor, and
 * registers metrics. conf and hooks (may be NULL) are copied; strings in conf must outlive the
 * loop. NULL with errstr on failure (SPW_ERR_UNSUPPORTED-like failures name the cause: Kafka input
 * in a build without the Kafka library).
 */
spw_trainer_loop_t *spw_trainer_loop_new(const struct spw_trainer_loop_conf *conf,
                                         const struct spw_trainer_hooks *hooks, char *errstr,
                                         size_t errstr_size);

/*
 * Runs until the input ends (files), max_examples, a stop request, a hook's SPW_ERR_STOPPED, or
 * an error; then flushes (see the conventions) and returns SPW_OK for the clean cases.
 * SPW_ERR_TIMEOUT when pushes were still unacknowledged at the end of the grace period,
 * SPW_ERR_CORRUPT for lost offsets in strict mode, SPW_ERR_IO (or SPW_ERR_CORRUPT, a damaged
 * gzip file; SPW_ERR_UNSUPPORTED, a format that cannot be told) for an input read error, logged
 * with its detail; SPW_ERR_INVALID (logged as "input rejected", naming the likely cause: the
 * format read against the one the data looks like) when a file input that ended yielded no
 * example or rejected more than max_reject_ratio of its records, or a Kafka input did over its
 * first SPW_TRAINER_REJECT_CHECK_RECORDS; the PS client's sticky error, or a hook's error. Call
 * once.
 */
spw_err_t spw_trainer_loop_run(spw_trainer_loop_t *loop);

/* Closes the input (leaving the group), the client and in-process shards (removing a temporary
 * directory), frees everything. Does not flush: run does. NULL is a no-op. */
void spw_trainer_loop_destroy(spw_trainer_loop_t *loop);

/*
 * From a hook (or before/after run): a checkpoint barrier's trainer side. Pushes the partial
 * accumulation and every residual, waits until every push is acknowledged (timeout_ms < 0: no
 * limit), stores the offsets of everything trained, and fills *positions (n_max entries) with
 * the position of every assigned partition; *n gets their count (may exceed n_max: the rest is
 * not written). A prefetched pull is cancelled and made again after the checkpoint, so that the
 * next micro-batch sees the rows as of the checkpoint. SPW_ERR_TIMEOUT (call again),
 * SPW_ERR_STOPPED, or the client's sticky error.
 */
spw_err_t spw_trainer_loop_checkpoint(spw_trainer_loop_t *loop, int64_t timeout_ms,
                                      struct spw_trainer_position *positions, size_t n_max,
                                      size_t *n);

/* Where a partition resumes after a recovery: SPW_OK with *offset (next record) and *skip
 * (examples of it already trained), SPW_ERR_NOT_FOUND to start from the earliest record. */
typedef spw_err_t (*spw_trainer_resume_fn)(void *opaque, const char *topic, int32_t partition,
                                           int64_t *offset, uint32_t *skip);

/*
 * From a hook (after_step or idle): the trainer side of a recovery (docs/ARCHITECTURE.md §5).
 * Forgets everything that postdates the checkpoint the shards are restored to: micro-batches read
 * but not computed, the partial accumulation, every residual, every unacknowledged push (no
 * resend), the offset marks not yet stored; then seeks every assigned Kafka partition to
 * resume(partition) (records already fetched are discarded) and sets its stored position there.
 * File input: SPW_OK before its first record is read (nothing to rewind), SPW_ERR_UNSUPPORTED
 * after. SPW_ERR_KAFKA when a seek fails.
 */
spw_err_t spw_trainer_loop_restore(spw_trainer_loop_t *loop, spw_trainer_resume_fn resume,
                                   void *opaque);

/* From a hook: forgets the rows pulled for micro-batches read but not yet computed (a prefetch),
 * so that they are pulled again before their compute (hybrid mode's "drop cached rows" after a
 * barrier; spw_trainer_loop_checkpoint does it too). The loop keeps no other row cache. */
void spw_trainer_loop_drop_rows(spw_trainer_loop_t *loop);

/* From a hook (two-phase modes, sync): the pushes of the steps from now on carry `step` (0: none,
 * pushes apply at once), so the shards hold them until the coordinator commits that step; the
 * next step's rows are then pulled only after the step before it committed (no prefetch across a
 * step boundary). */
void spw_trainer_loop_set_step(spw_trainer_loop_t *loop, uint64_t step);

/* The id this loop's pushes carry (conf.trainer_id, or the one derived from host and pid). */
uint32_t spw_trainer_loop_trainer_id(const spw_trainer_loop_t *loop);

/* From a hook that waits (a coordinator barrier): keeps the Kafka group membership alive without
 * taking records (partitions paused; rebalances and their on_assign/on_revoke hooks run inside)
 * for at most timeout_ms. spw_trainer_loop_release_input resumes consumption; call it before the
 * hook returns. SPW_OK for file input. */
spw_err_t spw_trainer_loop_hold_input(spw_trainer_loop_t *loop, int timeout_ms);
spw_err_t spw_trainer_loop_release_input(spw_trainer_loop_t *loop);

/* After spw_trainer_loop_checkpoint: the source high-water marks matching the positions it
 * returned (up to n_max into out; returns how many there are). */
size_t spw_trainer_loop_marks(const spw_trainer_loop_t *loop, struct spw_trainer_mark *out,
                              size_t n_max);

/* After spw_trainer_loop_restore: restores one mark of an assigned partition (others are
 * ignored). SPW_ERR_NOMEM or SPW_ERR_TOO_BIG beyond the mark limits. */
spw_err_t spw_trainer_loop_set_mark(spw_trainer_loop_t *loop, const struct spw_trainer_mark *mark);

/* The Kafka topic of the input (owned by the loop), NULL for file input. Positions name
 * partitions of it. */
const char *spw_trainer_loop_topic(const spw_trainer_loop_t *loop);

/* From a hook: commits the stored offsets to the group (sync waits for the broker). SPW_OK
 * without Kafka input. */
spw_err_t spw_trainer_loop_commit(spw_trainer_loop_t *loop, bool sync);

/* In-process shards (trainer.shards=inproc[:N]) only, from a hook or before/after run, after
 * spw_trainer_loop_checkpoint (every push acknowledged): writes every in-process shard's
 * checkpoint of epoch under root (<root>/checkpoints/<epoch>/shard-<i>, the pserver's own format,
 * sparrow/ps_ckpt.h) and its info into infos[i] (n_max entries; *n gets the shard count).
 * SPW_ERR_INVALID without in-process shards or with n_max too small, the store's error
 * (SPW_ERR_EXISTS, SPW_ERR_IO, SPW_ERR_STORE) with errstr. */
spw_err_t spw_trainer_loop_inproc_checkpoint(spw_trainer_loop_t *loop, const char *root,
                                             uint64_t epoch, struct spw_ps_checkpoint_info *infos,
                                             size_t n_max, size_t *n, char *errstr,
                                             size_t errstr_size);

/* From a hook: the PS client (for spw_ps_client_set_epoch after a checkpoint, stats). Owned by
 * the loop. */
spw_ps_client_t *spw_trainer_loop_client(spw_trainer_loop_t *loop);

/* The progressive validation of everything scored so far (sorts the window: not per batch). */
void spw_trainer_loop_report(spw_trainer_loop_t *loop, struct spw_pv_report *out);

struct spw_trainer_loop_stats {
    uint64_t examples;         /* trained on */
    uint64_t rejected;         /* malformed records and invalid examples skipped */
    uint64_t records;          /* input records read (file: examples; Kafka: ExampleBatch) */
    uint64_t lost;             /* Kafka records deleted by retention before they were read (the
                                  consumer's sparrow_kafka_offsets_lost_total) */
    uint64_t micro_batches;    /* computed */
    uint64_t dropped_examples; /* read but not trained (a stop during their pull) */
    uint64_t steps;            /* pushes of steps */
    uint64_t offsets_stored;   /* partition offsets handed to the consumer */
    uint64_t duplicates;       /* examples dropped at or below their source high-water mark */
    uint64_t bytes_pushed;     /* as the client counts them (resends included) */
    uint64_t bytes_flushed;    /* of which residual flushes (checkpoints, the end) */
    uint64_t rows_pushed;
    uint64_t compute_ns;   /* forward, backward, compression */
    uint64_t pull_wait_ns; /* waiting for rows */
    uint64_t elapsed_ns;   /* in run */
    uint64_t slowed_ns;    /* slept for trainer.debug.slow_factor */
};

void spw_trainer_loop_get_stats(const spw_trainer_loop_t *loop, struct spw_trainer_loop_stats *out);

/* ---- the trainer role (`sparrow trainer`) ---- */

/* The worker loop, and its coordinator session when conf->coordinator is set. One thread uses it.
 */
typedef struct spw_trainer spw_trainer_t;

/*
 * Registers with the coordinator when conf->coordinator is set (waiting up to a minute; offsets
 * are then committed on its signal only, whatever conf->commit_interval_ms says) and creates the
 * loop (spw_trainer_loop_new). Without a coordinator and with conf->checkpoint_dir, starts the
 * checkpoints there (see the conf): a coordinator thread over ZeroMQ shards (on an ipc:// socket
 * in a private temporary directory), or the trainer's own epochs over in-process shards, which
 * it first restores from the directory's LATEST. conf is copied; its strings and borrowed
 * objects must outlive the trainer. NULL with errstr on failure.
 */
spw_trainer_t *spw_trainer_new(const struct spw_trainer_loop_conf *conf, char *errstr,
                               size_t errstr_size);

/* Clock 0 with the coordinator (when there is one), then spw_trainer_loop_run; after a file's
 * end (not a stop request) a final checkpoint: the coordinator's ("final" epoch; the trainer's
 * Leave then rolls nothing back) or, with in-process shards and a checkpoint_dir, its own.
 * SPW_ERR_STOPPED when a stop came before the first clock; a failed final checkpoint's error;
 * otherwise as spw_trainer_loop_run. Call once. */
spw_err_t spw_trainer_run(spw_trainer_t *trainer);

/* Destroys the loop, then leaves the coordinator. NULL is a no-op. */
void spw_trainer_destroy(spw_trainer_t *trainer);

#endif
