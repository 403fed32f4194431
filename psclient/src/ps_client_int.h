/* trainer: private declarations of the parameter-server client's files (not API). */
#ifndef SPARROW_PS_CLIENT_INT_H
#define SPARROW_PS_CLIENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/curve.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/ps_client.h"
#include "sparrow/wire.h"

/* ---- the slicer (ps_client_slice.c) ---- */

/* A key being sorted: its position in the caller's array and its shard. */
struct spw_psc__ent {
    uint64_t key;
    uint32_t pos;
    uint32_t shard;
};

/* Scratch of the slicer, grown to the largest call and reused. */
struct spw_psc__sorter {
    struct spw_psc__ent *a, *b;
    size_t cap;
    uint32_t *seg; /* n_shards + 1 offsets into the sorted entries */
    uint32_t n_shards;
    /* The last call's keys (a step pushes the keys it pulled: the push reuses the pull's sort) */
    uint64_t *last;
    size_t last_n, last_cap;
    bool last_valid; /* a, b and seg hold the result for last[0..last_n) */
};

spw_err_t spw_psc__sorter_init(struct spw_psc__sorter *st, uint32_t n_shards);
void spw_psc__sorter_fini(struct spw_psc__sorter *st);

/* Sorts keys[0..n) by (shard, key) into st->a (stable in pos for equal keys) and fills st->seg:
 * shard s holds entries [seg[s], seg[s+1]). When keys equal the last call's, keeps its result
 * without sorting again. SPW_ERR_NOMEM when scratch cannot grow. */
spw_err_t spw_psc__slice(struct spw_psc__sorter *st, const uint64_t *keys, size_t n);

/* spw_psc__slice over a pair of sorters: the one that holds keys[0..n) when either does, else
 * *next (which then holds them) with *next set to the other; either way *next ends as the one not
 * returned (least recently used). NULL when scratch cannot grow. */
const struct spw_psc__sorter *spw_psc__slice2(struct spw_psc__sorter pair[2], uint32_t *next,
                                              const uint64_t *keys, size_t n);

/* ---- the client ---- */

enum { PSC_PART_NONE = 0, PSC_PART_PENDING = 1, PSC_PART_DONE = 2 };

/* One request to one shard (of a pull or a push), kept until answered so that it can be resent.
 * blocks holds the packed little-endian blocks: pull: keys (n × u64); push: keys (n × u64),
 * versions (n × u32), grads (n × dim × 4 or 2). */
struct spw_psc__part {
    uint64_t request_id; /* as sent; replies carry it */
    uint64_t sent_ms;    /* first send */
    uint64_t deadline_ms;
    uint32_t attempts; /* sends so far */
    uint32_t n;        /* unique keys */
    uint8_t state;     /* PSC_PART_* */
    struct spw_wire_buf blocks;
    /* push echo: indices into this request's rows the shard returns, and where each goes in the
     * slot's echo destination */
    uint32_t n_echo, echo_cap;
    uint32_t *echo_idx, *echo_dst;
};

/* Where each caller key's row comes from: row uidx of its shard's reply goes to position pos. */
struct spw_psc__map {
    uint32_t pos;
    uint32_t uidx;
};

/* A pull in flight. */
struct spw_psc__pull {
    bool busy;
    bool failed; /* a permanent error: released by wait with the sticky error */
    bool hello;  /* an empty pull to every shard: each reply's dim goes to dims[shard] */
    uint32_t *dims;
    uint64_t token;
    uint64_t started_ns;
    size_t n;
    float *rows;
    uint32_t *versions;
    uint32_t pending; /* parts not yet answered */
    struct spw_psc__map *map;
    size_t map_cap;
    uint32_t *seg;               /* n_shards + 1 offsets into map */
    struct spw_psc__part *parts; /* n_shards */
};

/* A push in the window (slot seq % window). */
struct spw_psc__push {
    bool busy;
    bool fp16;
    bool pulled; /* the parts' blocks end with the pulled values */
    uint64_t seq;
    uint64_t epoch;
    uint64_t generation; /* recovery generation (0: not coordinated) */
    int64_t max_event_time_ms;
    uint32_t examples;
    uint64_t step; /* two-phase tag (0: none) */
    uint32_t step_examples;
    float *echo_rows; /* the caller's echo destination (NULL: none, or cancelled) */
    uint32_t *echo_versions;
    uint32_t pending;
    uint64_t started_ns;         /* when the push was handed to the client */
    struct spw_psc__part *parts; /* n_shards */
};

struct spw_psc__shard {
    char *endpoint;
    void *sock;       /* DEALER; NULL when (re)creating it failed */
    void *mon;        /* PAIR receiving sock's handshake failures (CURVE only), or NULL */
    uint32_t backoff; /* timeouts in a row (timeout scaled by 2^backoff, capped) */
    uint32_t pending; /* parts awaiting a reply */
    bool waiting;     /* a timeout passed since the last reply */
    uint64_t waiting_since_ms;
    struct spw_log_ratelimit rl, auth_rl;
};

struct spw_psc__metrics {
    spw_counter_t *bytes_push, *bytes_pull, *rows_push, *rows_pull;
    spw_counter_t *resends, *reconnects, *timeouts, *duplicates, *bad_replies;
    spw_counter_t *not_applied_nonfinite, *not_applied_stale;
    spw_counter_t *errors[8]; /* by Sparrow__ErrorCode (0 unused) */
    spw_gauge_t *window;
    spw_histogram_t *pull_latency, *pull_wait, *push_latency;
};

/* Owned by one thread (see the header). */
struct spw_ps_client {
    struct spw_ps_client_conf conf; /* strings and pointers not kept */
    uint32_t n_shards;
    bool inproc;
    spw_ps_store_t **stores; /* in-process: borrowed */
    struct spw_psc__shard *shards;
    void *zctx;
    void *items; /* zmq_pollitem_t[2 × n_shards]: DEALERs and monitors */
    uint32_t *item_shard;
    uint8_t *expired;                   /* per shard, scratch of the deadline check */
    struct spw_curve_client_keys curve; /* disabled: plaintext */
    uint64_t monitor_gen;
    size_t max_reply;
    spw_arena_t *arena; /* reply decoding, reset per reply */

    struct spw_psc__pull pulls[SPW_PS_CLIENT_MAX_PULLS];
    uint64_t pull_gen;

    struct spw_psc__push *ring; /* push_window slots */
    uint32_t window;
    uint32_t outstanding;
    uint64_t next_seq;
    uint64_t epoch;
    uint64_t generation;
    uint64_t next_req;

    /* Two sorts kept: with pipelined pulls the next micro-batch's pull comes between a step's
     * pull and its push, and the push finds its pull's sort in the other (spw_psc__slice2). */
    struct spw_psc__sorter sorters[2];
    uint32_t sorter_next; /* of sorters, the one the next sort overwrites */
    /* in-process scratch */
    uint64_t *ukeys;
    uint32_t *uvers;
    float *uvals;
    uint16_t *uhalf;
    float *upulled;     /* pulled values of a push (f32, as the store applies them) */
    uint16_t *uhpulled; /* ... as halves, when the push is fp16 */
    size_t ucap;

    spw_err_t sticky;
    char errstr[512];
    uint32_t debug_drop_acks;
    struct spw_ps_client_stats stats;
    struct spw_psc__metrics m;
};

/* ---- shared between ps_client.c and ps_client_zmq.c ---- */

/* Records the first permanent error: every later call returns err; errstr gets the message,
 * which is also logged once. */
void spw_psc__set_sticky(spw_ps_client_t *c, spw_err_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A fresh request id that names its slot: (counter << 16) | (push << 15) | idx. */
uint64_t spw_psc__request_id(spw_ps_client_t *c, bool push, uint32_t idx);
#define SPW_PSC_ID_PUSH     (1u << 15)
#define SPW_PSC_ID_IDX_MASK 0x7fffu

/* Writes shard s's reply rows (its unique keys' rows vals, versions vers) to the caller's
 * positions of pull p. */
void spw_psc__pull_scatter(spw_ps_client_t *c, struct spw_psc__pull *p, uint32_t s,
                           const float *vals, const uint32_t *vers);

/* Marks part (of shard s) answered and completes its pull or push when it was the last. */
void spw_psc__pull_part_done(spw_ps_client_t *c, struct spw_psc__pull *p, uint32_t s);
void spw_psc__push_part_done(spw_ps_client_t *c, struct spw_psc__push *slot, uint32_t s);

/* ZeroMQ transport (ps_client_zmq.c). */
spw_err_t spw_psc__zmq_open(spw_ps_client_t *c, char *errstr, size_t errstr_size);
void spw_psc__zmq_close(spw_ps_client_t *c);
/* Sends (or re-sends) part to shard s and sets its deadline; a failed send is left to the
 * timeout. push selects the slot kind; idx is the pull slot or the push ring index. */
void spw_psc__send(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                   struct spw_psc__part *part);
/* Waits up to max_wait_ms (less when a deadline comes first) for replies, handles every reply
 * that arrived and every expired deadline. Returns the sticky error or SPW_OK. */
spw_err_t spw_psc__progress(spw_ps_client_t *c, uint64_t max_wait_ms);

/* Test hook: the next n push acknowledgements that arrive are dropped as if lost on the way. */
void spw_psc__debug_drop_acks(spw_ps_client_t *client, uint32_t n);

/* Splits a comma-separated endpoint list (spaces around entries ignored). Calls fn for each
 * (start, length) when fn is non-NULL; *count gets the number. SPW_ERR_INVALID with errstr for an
 * empty entry, an entry without "://", or more than SPW_PS_CLIENT_MAX_SHARDS. */
spw_err_t spw_psc__split_shards(const char *text, uint32_t *count,
                                spw_err_t (*fn)(void *opaque, uint32_t i, const char *s,
                                                size_t len),
                                void *opaque, char *errstr, size_t errstr_size);

#endif
