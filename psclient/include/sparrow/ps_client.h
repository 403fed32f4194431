/* The trainer's parameter-server client: keys sliced by shard, asynchronous pulls, windowed
 * asynchronous pushes with acknowledgements, resends and reconnects, over ZeroMQ or in-process. */
#ifndef SPARROW_PS_CLIENT_H
#define SPARROW_PS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/pserver.h"

/*
 * Conventions (in addition to err.h's):
 * - Thread-safety: a client is owned by one thread, which makes every call on it; nothing in it
 *   is locked and no thread of ours runs behind the caller's back. Replies are read (and
 *   acknowledgements collected, timeouts handled) only inside the client's calls: a long compute
 *   phase simply leaves them queued in ZeroMQ. The metrics it updates may be rendered from any
 *   thread.
 * - Keys go to shard spw_hash_shard(key, n_shards) (docs/ARCHITECTURE.md §3). One request per
 *   shard per pull or push, its keys sorted and unique; rows and versions come back in the
 *   caller's order.
 * - Two transports with the same semantics: ZeroMQ (one DEALER socket per shard) and in-process
 *   (direct calls into the caller's spw_ps_store_t of each shard; every call completes at once,
 *   so nothing is ever outstanding). The staleness versions travel the same way in both.
 * - Pushes carry (trainer_id, epoch, seq). seq grows by one per push; a push stays in the
 *   window until every shard it touched acknowledged it, and at most push_window seqs separate
 *   the oldest unacknowledged push from the newest (push_window <= SPW_PS_DEDUP_WINDOW, so that
 *   a resent seq is still inside the shard's de-duplication window). A request not answered in
 *   its timeout is resent (same seq, the shard applies it once) on a fresh DEALER (closed and
 *   reconnected), with the timeout doubling per failed attempt up to SPW_PS_CLIENT_MAX_BACKOFF x.
 *   A shard that stays down makes the client wait and log "waiting for shard" (rate-limited);
 *   waits sleep in zmq_poll, never spin.
 * - (trainer_id, epoch) must not be reused by another client (or an earlier run of this one)
 *   while a shard remembers its seqs: a shard acknowledges an unseen push whose seq it saw
 *   before as a duplicate without applying it. The client detects that (a duplicate
 *   acknowledgement of a push it never resent) and fails with SPW_ERR_STATE. Give every run a
 *   fresh epoch (for example the wall-clock milliseconds at start, or the checkpoint epoch
 *   combined with a restart counter).
 * - Errors replied by a shard: UNAVAILABLE and INTERNAL are transient (counted, logged, resent
 *   after the timeout); MALFORMED, VERSION, TOO_BIG, WRONG_SHARD and UNAUTHORIZED are
 *   configuration errors (dimension, shard list, protocol, size limits, keys). They make the
 *   client's error sticky: the failing call and every later one returns the same code (TOO_BIG
 *   -> SPW_ERR_TOO_BIG, VERSION -> SPW_ERR_VERSION, others SPW_ERR_RPC) and
 *   spw_ps_client_errstr names the shard, the request and the shard's message. A reply that
 *   cannot be decoded is counted and dropped (the request times out); one that does not match its
 *   request (dimension, row count, seq) is sticky SPW_ERR_RPC. A CURVE key the shard refuses
 *   shows as a failed handshake, not a reply: it is logged (ERROR, rate-limited) and counted
 *   (auth_failures), and the client keeps waiting for the keys or the allow-list to be fixed.
 * - A wait interrupted by a stop request (spw_signal_stop_requested) returns SPW_ERR_STOPPED and
 *   leaves everything in flight; calling it again resumes. spw_ps_client_drain is the exception
 *   meant for shutdown.
 */

/* Most shards a client addresses. */
#define SPW_PS_CLIENT_MAX_SHARDS 4096u
/* Largest push window (the shard's de-duplication window). */
#define SPW_PS_CLIENT_MAX_WINDOW SPW_PS_DEDUP_WINDOW
/* Pulls that may be in flight at once (started and not yet waited for or cancelled). */
#define SPW_PS_CLIENT_MAX_PULLS 4u
/* Largest factor by which repeated timeouts stretch a request's timeout. */
#define SPW_PS_CLIENT_MAX_BACKOFF 16u
/* Most keys in one pull or push (positions are 32-bit). */
#define SPW_PS_CLIENT_MAX_KEYS (1u << 30)

struct spw_metrics;

struct spw_ps_client_conf {
    uint32_t dim; /* floats per row; must equal the shards' */
    /* ZeroMQ transport: comma-separated endpoints ("tcp://host:port"), shard i at position i.
     * Ignored when stores is set. */
    const char *shards;
    /* In-process transport: n_stores stores (borrowed, shard order), owned by the calling
     * thread for the client's lifetime. NULL: ZeroMQ. */
    spw_ps_store_t *const *stores;
    uint32_t n_stores;
    uint32_t trainer_id;
    uint64_t epoch;
    uint64_t first_seq;       /* seq of the first push; 0 means 1 */
    uint32_t push_window;     /* 1..SPW_PS_CLIENT_MAX_WINDOW unacknowledged pushes */
    uint32_t push_timeout_ms; /* before an unacknowledged push is resent (>= 1) */
    uint32_t pull_timeout_ms; /* before an unanswered pull is resent (>= 1) */
    size_t max_frame; /* largest request frame (the shards' pserver.max_frame); replies may be
                         up to 5x (pull values) */
    /* CurveZMQ: the shards' public key and this client's secret key (its public key is derived
     * from it and must be on the shards' allow-list). Files hold a Z85 key as a bare 40-character
     * line or as zcert lines `public-key = "..."` / `secret-key = "..."`. NULL or "": plain TCP;
     * both or neither must be set. */
    const char *curve_server_key_file;
    const char *curve_client_key_file;
    struct spw_metrics *metrics; /* borrowed, may be NULL; sparrow_trainer_ps_* */
};

/* Defaults: window 16, timeouts 2000 ms, max_frame 32 MiB, first_seq 1, nothing else set. */
void spw_ps_client_conf_default(struct spw_ps_client_conf *conf);

/*
 * The property rows of the client (trainer.shards, trainer.push.window, trainer.push.timeout,
 * trainer.pull.timeout, trainer.ps.max_frame, trainer.curve.server_key_file,
 * trainer.curve.client_key_file), as an initializer list that a role's own static table
 * includes: `static const struct spw_config_prop props[] = { ..., SPW_PS_CLIENT_CONFIG_PROPS };`
 */
/* clang-format off */
#define SPW_PS_CLIENT_CONFIG_PROPS                                                                 \
    {"trainer.shards", SPW_CONFIG_STRING, "tcp://127.0.0.1:7000", 0, 16384, NULL,                  \
     "Parameter-server shards: comma-separated ZeroMQ endpoints, shard 0 first."},                 \
    {"trainer.push.window", SPW_CONFIG_INT, "16", 1, SPW_PS_CLIENT_MAX_WINDOW, NULL,               \
     "Pushes in flight without acknowledgement before a push waits."},                             \
    {"trainer.push.timeout", SPW_CONFIG_DURATION_MS, "2s", 1, 3600000, NULL,                       \
     "A push not acknowledged in this time is resent (same seq) on a fresh connection."},          \
    {"trainer.pull.timeout", SPW_CONFIG_DURATION_MS, "2s", 1, 3600000, NULL,                       \
     "A pull not answered in this time is resent on a fresh connection."},                         \
    SPW_PS_CLIENT_LINK_CONFIG_PROPS
/* The client's link to the shards (frame bound, CurveZMQ keys): also in tables of commands that
 * pull from live shards without training (`sparrow eval`). */
#define SPW_PS_CLIENT_LINK_CONFIG_PROPS                                                            \
    {"trainer.ps.max_frame", SPW_CONFIG_INT, "33554432", 1024, 134217728, NULL,                    \
     "Largest request frame in bytes (the shards' pserver.max_frame)."},                           \
    {"trainer.curve.server_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,                        \
     "File with the shards' Z85 CURVE public key; empty: no CurveZMQ."},                           \
    {"trainer.curve.client_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,                        \
     "File with this client's Z85 CURVE secret key (required with the server key)."}
/* clang-format on */

/* The same rows as a table of their own (tests, documentation). */
extern const struct spw_config_prop spw_ps_client_config_props[];
extern const size_t spw_ps_client_config_n_props;

/*
 * Fills the fields of conf that the table holds (shards, push_window, push_timeout_ms,
 * pull_timeout_ms, max_frame, curve files) from cfg, a configuration of a table that includes
 * SPW_PS_CLIENT_CONFIG_PROPS; every other field is left as it was. Strings are borrowed from cfg,
 * which must outlive conf. SPW_ERR_INVALID with errstr for an empty or malformed shard list or
 * only one of the two CURVE files.
 */
spw_err_t spw_ps_client_conf_from_config(const spw_config_t *cfg, struct spw_ps_client_conf *conf,
                                         char *errstr, size_t errstr_size);

/* ---- the client ---- */

typedef struct spw_ps_client spw_ps_client_t;

/* Creates a client (conf copied; strings are not kept). For ZeroMQ, loads the CURVE keys and
 * connects a DEALER per shard (connecting does not wait for the shards). NULL with errstr for an
 * invalid conf, unreadable keys or when out of memory. */
spw_ps_client_t *spw_ps_client_new(const struct spw_ps_client_conf *conf, char *errstr,
                                   size_t errstr_size);

/* Closes the sockets and frees the client without waiting: unacknowledged pushes are lost (call
 * spw_ps_client_flush or _drain first) and pulls in flight are cancelled. NULL is a no-op. */
void spw_ps_client_destroy(spw_ps_client_t *client);

/* Number of shards. */
uint32_t spw_ps_client_shards(const spw_ps_client_t *client);

/* The sticky error's message ("" when none). Owned by client. */
const char *spw_ps_client_errstr(const spw_ps_client_t *client);

/*
 * Starts a pull of n keys (duplicates allowed; keys copied). As replies arrive, row i (dim
 * floats) is written to rows[i*dim ..] and its version to versions[i] (versions may be NULL).
 * rows and versions are borrowed until the pull completes in spw_ps_client_pull_wait or is
 * cancelled: the caller must neither read nor free them before. *token identifies the pull.
 * Returns at once. SPW_ERR_STATE when SPW_PS_CLIENT_MAX_PULLS pulls are in flight, SPW_ERR_TOO_BIG
 * when one shard's request or reply would exceed the frame limits (nothing is sent), the sticky
 * error, or (in-process) the store's error. The in-process transport completes the pull here.
 */
spw_err_t spw_ps_client_pull_start(spw_ps_client_t *client, const uint64_t *keys, size_t n,
                                   float *rows, uint32_t *versions, uint64_t *token);

/*
 * Waits until the pull of token completes (every shard answered; lost requests resent), then
 * releases it: rows and versions are filled and back in the caller's hands. timeout_ms < 0 waits
 * without limit. SPW_ERR_TIMEOUT (still in flight; call again or cancel) or SPW_ERR_STOPPED when
 * the wait is cut short; the sticky error (the pull is released then, its buffers undefined);
 * SPW_ERR_NOT_FOUND for a token that is not in flight.
 */
spw_err_t spw_ps_client_pull_wait(spw_ps_client_t *client, uint64_t token, int64_t timeout_ms);

/*
 * The hello a client says before its first pull: an empty pull to every shard at once, carrying
 * this client's dim (PullRequest.dim; a shard started with pserver.dim=auto that has no dim yet
 * takes it), each reply telling the shard's dim. Waits for every shard as a pull does (down
 * shards are waited for and resent to; timeout_ms < 0: no limit). dims (n_shards entries, may be
 * NULL) receives each shard's dim (0 when a reply has none). SPW_OK when every shard's equals
 * conf.dim; SPW_ERR_INVALID (not sticky) with *bad (may be NULL) the first shard that differs;
 * SPW_ERR_TIMEOUT (nothing left in flight: call again) or SPW_ERR_STOPPED; SPW_ERR_STATE when
 * every pull slot is busy; the sticky error. In-process: SPW_OK at once. A shard before
 * PullRequest.dim answers it too (an empty pull), it only cannot take its dim from it.
 */
spw_err_t spw_ps_client_hello(spw_ps_client_t *client, int64_t timeout_ms, uint32_t *dims,
                              uint32_t *bad);

/* Shard's endpoint as configured ("inproc" for the in-process transport). Owned by client. */
const char *spw_ps_client_endpoint(const spw_ps_client_t *client, uint32_t shard);

/* Abandons the pull of token: its buffers are never written again. Unknown tokens are ignored. */
void spw_ps_client_pull_cancel(spw_ps_client_t *client, uint64_t token);

/* One push: n rows of gradients computed from the rows' pulled versions. */
struct spw_ps_push {
    size_t n;
    const uint64_t *keys;      /* unique */
    const uint32_t *versions;  /* the versions the gradients were computed from; NULL: 0 */
    const float *grads;        /* n × dim; may be NULL when fp16 and grads_f16 are set */
    const uint16_t *grads_f16; /* n × dim IEEE halves; used as is when fp16 (NULL: converted
                                  from grads with spw_wire_f32_to_f16_n) */
    bool fp16;                 /* values travel (and are applied) as halves */
    /* n × dim row values the gradients were computed from (PushRequest.pulled, for the shards'
     * penalty dc), sent as halves when fp16; NULL: not sent. They cost n × dim × (fp16 ? 2 : 4)
     * more bytes per push. */
    const float *pulled;
    int64_t max_event_time_ms; /* newest event time behind the gradients */
    uint32_t examples;         /* examples behind them */
    uint64_t step;             /* two-phase step tag (held on the shards until its commit; 0:
                                  applied at once) */
    uint32_t step_examples;    /* examples of the whole step (its weight in the commit) */
    /* Fresh reads (may be NULL): echo_pos[i] < UINT32_MAX asks the shard to return row i as it
     * is after this push; the acknowledgement writes it to echo_rows[echo_pos[i] * dim] and
     * echo_versions[echo_pos[i]] (borrowed: they must stay valid until the push is
     * acknowledged, abandoned, or spw_ps_client_cancel_echo drops the writes). */
    const uint32_t *echo_pos;
    float *echo_rows;
    uint32_t *echo_versions;
};

/*
 * Sends one push (arrays copied; the caller may reuse them on return) with the next seq, stored in
 * *seq (may be NULL). Blocks while the window is full, collecting acknowledgements, resending and
 * waiting for shards that are down. SPW_ERR_INVALID for duplicate keys or no gradient values,
 * SPW_ERR_TOO_BIG when one shard's frame would exceed max_frame (nothing sent), SPW_ERR_STOPPED
 * when a stop request cuts the wait for room short (nothing sent), the sticky error, or
 * (in-process) the store's error. n == 0 sends nothing and takes no seq.
 */
spw_err_t spw_ps_client_push(spw_ps_client_t *client, const struct spw_ps_push *push,
                             uint64_t *seq);

/* Waits until the window has room for one more push. timeout_ms < 0: no limit. SPW_ERR_TIMEOUT,
 * SPW_ERR_STOPPED, or the sticky error. For loops that must not block in spw_ps_client_push. */
spw_err_t spw_ps_client_wait_window(spw_ps_client_t *client, int64_t timeout_ms);

/* Collects whatever replies have arrived and handles expired timeouts, without blocking. Returns
 * the sticky error or SPW_OK. Optional: every other call does this too. */
spw_err_t spw_ps_client_poll(spw_ps_client_t *client);

/* Waits until every push sent so far is acknowledged (checkpoints need it). timeout_ms < 0: no
 * limit. SPW_ERR_TIMEOUT, SPW_ERR_STOPPED, or the sticky error. */
spw_err_t spw_ps_client_flush(spw_ps_client_t *client, int64_t timeout_ms);

/* spw_ps_client_flush for shutdown: not interrupted by a stop request, bounded by timeout_ms (the
 * grace period). SPW_ERR_TIMEOUT when pushes are still unacknowledged at the deadline. */
spw_err_t spw_ps_client_drain(spw_ps_client_t *client, uint64_t timeout_ms);

/* Forgets every push not yet acknowledged: no resend, later replies ignored, the window empties
 * (a recovery restores the shards to a checkpoint those pushes postdate). Seqs go on. Returns
 * how many pushes were abandoned. */
uint32_t spw_ps_client_abandon_pushes(spw_ps_client_t *client);

/* Waits until every push up to seq is acknowledged. timeout_ms < 0: no limit. SPW_ERR_TIMEOUT,
 * SPW_ERR_STOPPED, or the sticky error. */
spw_err_t spw_ps_client_wait_acked(spw_ps_client_t *client, uint64_t seq, int64_t timeout_ms);

/* Drops the echo writes of the pushes seq_lo..seq_hi not yet acknowledged (their destination is
 * going away); the pushes themselves go on. */
void spw_ps_client_cancel_echo(spw_ps_client_t *client, uint64_t seq_lo, uint64_t seq_hi);

/* Pushes sent and not yet acknowledged (by every shard they touched). */
uint32_t spw_ps_client_outstanding(const spw_ps_client_t *client);

/* The seq the next push will carry. */
uint64_t spw_ps_client_next_seq(const spw_ps_client_t *client);

/* The largest seq S such that every push with seq <= S is acknowledged (first_seq - 1 before
 * any; next_seq - 1 when nothing is outstanding). Lets a caller release what depended on a push
 * (input offsets) in push order although shards acknowledge out of order. */
uint64_t spw_ps_client_acked_through(const spw_ps_client_t *client);

/* Moves later pushes to epoch (>= the current one; seqs go on). SPW_ERR_STATE while pushes are
 * outstanding (flush first), SPW_ERR_INVALID for an older epoch. */
spw_err_t spw_ps_client_set_epoch(spw_ps_client_t *client, uint64_t epoch);

/* Later pushes carry the coordinator's recovery generation (0, the default: none). Call after
 * spw_ps_client_abandon_pushes when the coordinator restores: a shard that applied a restore of
 * a newer generation refuses older pushes (PushAck.fenced), which this client reports as a
 * sticky SPW_ERR_STATE, since a push in the current generation is never fenced. */
void spw_ps_client_set_generation(spw_ps_client_t *client, uint64_t generation);

/* Counters since creation. */
struct spw_ps_client_stats {
    uint64_t pulls;         /* pulls completed */
    uint64_t rows_pulled;   /* rows in pull requests (unique per shard) */
    uint64_t bytes_pulled;  /* pull reply bytes (in-process: the blocks' bytes) */
    uint64_t pushes;        /* pushes sent */
    uint64_t pushes_acked;  /* pushes acknowledged by every shard */
    uint64_t rows_pushed;   /* rows in pushes */
    uint64_t bytes_pushed;  /* push request bytes sent, resends included (in-process:
                               the blocks' bytes) */
    uint64_t rows_applied;  /* as acknowledged by the shards */
    uint64_t rows_rejected; /* non-finite gradients refused by the shards */
    uint64_t rows_dropped_stale;
    uint64_t duplicate_acks; /* acknowledgements of resent pushes the shard had applied */
    uint64_t resends;        /* requests sent again after a timeout */
    uint64_t timeouts;       /* shard timeouts (each resends that shard's requests) */
    uint64_t reconnects;     /* DEALER sockets closed and reconnected */
    uint64_t error_replies;  /* replies carrying an error code */
    uint64_t bad_replies;    /* undecodable replies (dropped; the request times out) */
    uint64_t late_replies;   /* replies to requests already answered (after a resend) */
    uint64_t pushes_late;    /* two-phase pushes a shard refused: their step had committed */
    uint64_t rows_echoed;    /* rows a push ack returned into the caller's prefetched copy */
    uint64_t auth_failures;  /* CURVE handshakes a shard refused (logged; the client waits) */
    uint32_t window;         /* pushes outstanding now */
    uint32_t window_max;     /* most pushes outstanding at once */
};

void spw_ps_client_get_stats(const spw_ps_client_t *client, struct spw_ps_client_stats *out);

#endif
