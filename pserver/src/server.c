/* The shard's ZeroMQ server: a ROUTER socket serving pull, push, stats, checkpoint and health
 * requests (proto/sparrow.proto), push de-duplication, CurveZMQ with a ZAP allow-list, metrics and
 * readiness. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <zmq.h>

#include "ps_int.h"
#include "sparrow/arena.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/curve.h"
#include "sparrow/fs.h"
#include "sparrow/hash.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

#define POLL_MS         100
#define MAX_IDENTITY    256
#define DISK_RECHECK_MS 2000
#define DISK_FREE_MIN   (4u << 20) /* bytes free before a full disk counts as back */

enum { ERRS = 8 };
enum { TAU_TABLE = 1025 }; /* taus up to the largest staleness bound, 1024 */

struct ps_metrics {
    spw_counter_t *req[6]; /* pull push stats checkpoint health commit */
    spw_counter_t *rows_pull, *rows_push;
    spw_counter_t *errors[ERRS]; /* by Sparrow__ErrorCode */
    spw_counter_t *dropped_frames;
    spw_counter_t *rej_nonfinite, *rej_stale, *rej_unadmitted, *duplicates, *fenced;
    spw_counter_t *admitted, *evict_spill, *evict_ttl, *db_reads, *cold_reads;
    spw_counter_t *ckpt_ok, *ckpt_failed;
    spw_counter_t *commits, *steps_late, *steps_late_applied, *steps_discarded,
        *steps_restore_dropped;
    spw_counter_t *echoed;
    spw_histogram_t *staleness, *staleness_class[SPW_PS_CLASSES];
    spw_counter_t *dc_corrected, *dc_uncorrected;
    spw_gauge_t *tau_ref[SPW_PS_CLASSES], *alpha_mean[SPW_PS_CLASSES], *top_threshold;
    spw_gauge_t *rows_dram, *rows_disk, *rows_cold, *bytes_dram, *bytes_cold, *rows_dram_max,
        *epoch;
    spw_gauge_t *ckpt_seconds, *ckpt_bytes, *ready, *disk_full;
};

/* Owned by the thread that runs it. */
struct spw_ps_server {
    struct spw_ps_server_conf conf;
    char *data_dir, *ckpt_dir, *db_path, endpoint[256];
    spw_ps_store_t *store;
    void *zctx, *sock;
    spw_curve_server_t *curve; /* NULL: plaintext */
    spw_arena_t *arena;
    spw_metrics_t *metrics;
    bool own_metrics;
    struct ps_metrics m;
    uint8_t tau_bucket[TAU_TABLE];  /* the staleness histograms' bucket of tau < TAU_TABLE */
    uint8_t tau_bucket_above;       /* ... and of every larger tau */
    struct spw_ps_store_stats last; /* store stats already added to the counters */
    uint64_t epoch;
    int64_t started_ms;         /* wall clock at start: StatsReply.started_ms (restart detection) */
    struct spw_ps__dedup dedup; /* kept in checkpoints (state.c) */
    uint64_t fence; /* pushes of an older recovery generation are refused (RestoreRequest) */
    bool disk_full;
    uint64_t disk_checked_ms;
    uint64_t need_bytes;
    float *f16_buf;
    size_t f16_cap;
    uint32_t *tau_buf;
    size_t tau_cap;
    spw_ps__publisher_t *pub; /* update-stream publisher; NULL when not publishing */
    spw_ps__steps_t *steps;   /* two-phase pending table */
    /* pserver.dim=auto before a client told its dim: store and steps are NULL, every request
     * but stats and health is answered UNAVAILABLE until a pull or push carries a dim */
    bool dim_pending;
    spw_err_t fatal; /* opening the model once the dim came failed: the run ends with it */
};

static const char *const error_names[ERRS] = {"none",     "malformed",   "version",
                                              "too_big",  "wrong_shard", "unavailable",
                                              "internal", "unauthorized"};

/* ---- metrics ---- */

/* Registers every metric; false when one could not be (out of memory or a name clash). */
static bool metrics_register(spw_ps_server_t *srv)
{
    spw_metrics_t *r = srv->metrics;
    struct ps_metrics *m = &srv->m;
    static const char *const types[6] = {"pull", "push", "stats", "checkpoint", "health", "commit"};
    char labels[96];
    for (int i = 0; i < 6; i++) {
        snprintf(labels, sizeof(labels), "type=\"%s\"", types[i]);
        m->req[i] = spw_metrics_counter_new(r, "sparrow_ps_requests_total",
                                            "Requests served, by type.", labels);
    }
    m->rows_pull = spw_metrics_counter_new(r, "sparrow_ps_rows_total", "Rows pulled or pushed.",
                                           "op=\"pull\"");
    m->rows_push = spw_metrics_counter_new(r, "sparrow_ps_rows_total", "Rows pulled or pushed.",
                                           "op=\"push\"");
    for (int i = 1; i < ERRS; i++) {
        snprintf(labels, sizeof(labels), "reason=\"%s\"", error_names[i]);
        m->errors[i] =
            spw_metrics_counter_new(r, "sparrow_ps_error_replies_total",
                                    "Requests answered with an error, by reason.", labels);
    }
    m->dropped_frames = spw_metrics_counter_new(
        r, "sparrow_ps_dropped_frames_total",
        "Messages dropped without a reply (no routing identity, too many frames).", NULL);
    const char *rej = "sparrow_ps_rejected_rows_total";
    const char *rej_help = "Pushed rows not applied, by reason.";
    m->rej_nonfinite = spw_metrics_counter_new(r, rej, rej_help, "reason=\"nonfinite\"");
    m->rej_stale = spw_metrics_counter_new(r, rej, rej_help, "reason=\"stale\"");
    m->rej_unadmitted = spw_metrics_counter_new(r, rej, rej_help, "reason=\"unadmitted\"");
    m->duplicates =
        spw_metrics_counter_new(r, "sparrow_ps_duplicate_pushes_total",
                                "Pushes acknowledged without applying (seq seen).", NULL);
    m->fenced = spw_metrics_counter_new(
        r, "sparrow_ps_fenced_pushes_total",
        "Pushes refused because they predate the last global restore (older generation).", NULL);
    m->admitted = spw_metrics_counter_new(r, "sparrow_ps_admitted_total",
                                          "Keys given a row after min_count sightings.", NULL);
    m->evict_spill = spw_metrics_counter_new(r, "sparrow_ps_evictions_total",
                                             "Rows evicted, by kind.", "kind=\"spill\"");
    m->evict_ttl = spw_metrics_counter_new(r, "sparrow_ps_evictions_total",
                                           "Rows evicted, by kind.", "kind=\"ttl\"");
    m->db_reads = spw_metrics_counter_new(r, "sparrow_ps_db_reads_total",
                                          "Rows read back from RocksDB.", NULL);
    m->cold_reads = spw_metrics_counter_new(r, "sparrow_ps_cold_reads_total",
                                            "Rows read back from the cold file.", NULL);
    m->ckpt_ok = spw_metrics_counter_new(r, "sparrow_ps_checkpoints_total", "Checkpoints taken.",
                                         "result=\"ok\"");
    m->ckpt_failed = spw_metrics_counter_new(r, "sparrow_ps_checkpoints_total",
                                             "Checkpoints taken.", "result=\"failed\"");
    m->commits = spw_metrics_counter_new(r, "sparrow_ps_step_commits_total",
                                         "Two-phase steps committed (CommitRequest).", NULL);
#define STEP_PUSHES_HELP                                                                           \
    "Two-phase pushes by fate: late (their unit had committed their step: dropped, or applied "    \
    "at once under apply_late), late_applied (late ones applied: on arrival, or unlisted at the "  \
    "commit), discarded (unlisted at the commit, or of an older step, and not applied), "          \
    "restore (pending when a restore discarded their steps)."
    m->steps_late = spw_metrics_counter_new(r, "sparrow_ps_step_pushes_total", STEP_PUSHES_HELP,
                                            "fate=\"late\"");
    m->steps_late_applied = spw_metrics_counter_new(r, "sparrow_ps_step_pushes_total",
                                                    STEP_PUSHES_HELP, "fate=\"late_applied\"");
    m->steps_discarded = spw_metrics_counter_new(r, "sparrow_ps_step_pushes_total",
                                                 STEP_PUSHES_HELP, "fate=\"discarded\"");
    m->steps_restore_dropped = spw_metrics_counter_new(r, "sparrow_ps_step_pushes_total",
                                                       STEP_PUSHES_HELP, "fate=\"restore\"");
#undef STEP_PUSHES_HELP
    m->echoed = spw_metrics_counter_new(
        r, "sparrow_ps_echoed_rows_total",
        "Rows returned in push acknowledgements (a trainer's fresh reads of its own pushes).",
        NULL);
    static const double bounds[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    m->staleness = spw_metrics_histogram_new(r, "sparrow_ps_staleness",
                                             "tau = version_now - version_pulled of pushed rows.",
                                             NULL, bounds, sizeof(bounds) / sizeof(bounds[0]));
    if (m->staleness) {
        for (uint32_t t = 0; t < TAU_TABLE; t++)
            srv->tau_bucket[t] = (uint8_t)spw_histogram_bucket(m->staleness, (double)t);
        srv->tau_bucket_above = (uint8_t)spw_histogram_bucket(m->staleness, (double)TAU_TABLE);
    }
    for (int c = 0; c < SPW_PS_CLASSES; c++) {
        snprintf(labels, sizeof(labels), "class=\"%s\"",
                 spw_ps_row_class_name((enum spw_ps_row_class)c));
        m->staleness_class[c] = spw_metrics_histogram_new(
            r, "sparrow_ps_staleness_class",
            "tau of pushed rows by row class: bias (key 0), top (the ~1000 rows updated most "
            "often, sparrow_ps_top_count_threshold), rest.",
            labels, bounds, sizeof(bounds) / sizeof(bounds[0]));
        m->tau_ref[c] = spw_metrics_gauge_new(
            r, "sparrow_ps_staleness_ref",
            "Running mean tau of the last ~1000 pushed rows of the class (the reference of "
            "penalty adaptive).",
            labels);
        m->alpha_mean[c] = spw_metrics_gauge_new(
            r, "sparrow_ps_staleness_alpha",
            "Running mean step scale (alpha) applied to the last ~1000 pushed rows of the class.",
            labels);
    }
    m->top_threshold = spw_metrics_gauge_new(
        r, "sparrow_ps_top_count_threshold",
        "Update count from which a row is in class top (re-estimated as the 1000th largest; -1: "
        "not estimated yet).",
        NULL);
    const char *dc = "sparrow_ps_dc_rows_total";
    const char *dc_help = "Stale rows under penalty dc: corrected with the pushed pulled values, "
                          "or applied uncorrected (the push carried none).";
    m->dc_corrected = spw_metrics_counter_new(r, dc, dc_help, "result=\"corrected\"");
    m->dc_uncorrected = spw_metrics_counter_new(r, dc, dc_help, "result=\"uncorrected\"");
    m->rows_dram = spw_metrics_gauge_new(r, "sparrow_ps_rows", "Rows by tier.", "tier=\"dram\"");
    m->rows_disk = spw_metrics_gauge_new(r, "sparrow_ps_rows", "Rows by tier.", "tier=\"rocksdb\"");
    m->rows_cold =
        spw_metrics_gauge_new(r, "sparrow_ps_rows", "Rows by tier.", "tier=\"cold_file\"");
    m->bytes_cold = spw_metrics_gauge_new(r, "sparrow_ps_cold_file_bytes",
                                          "Size of the cold file of evicted rows.", NULL);
    m->rows_dram_max = spw_metrics_gauge_new(r, "sparrow_ps_rows_dram_capacity",
                                             "Rows the DRAM budget holds.", NULL);
    m->bytes_dram = spw_metrics_gauge_new(r, "sparrow_ps_memory_bytes",
                                          "Bytes of the DRAM table (slabs and index).", NULL);
    m->epoch = spw_metrics_gauge_new(r, "sparrow_ps_epoch", "Epoch of the last checkpoint.", NULL);
    m->ckpt_seconds = spw_metrics_gauge_new(r, "sparrow_ps_checkpoint_seconds",
                                            "Duration of the last checkpoint.", NULL);
    m->ckpt_bytes = spw_metrics_gauge_new(r, "sparrow_ps_checkpoint_bytes",
                                          "Bytes of the last checkpoint.", NULL);
    m->ready = spw_metrics_gauge_new(r, "sparrow_ps_ready", "1 when the shard is ready.", NULL);
    m->disk_full = spw_metrics_gauge_new(
        r, "sparrow_ps_disk_full", "1 while the last checkpoint failed for lack of space.", NULL);
    /* Every member is a handle pointer (errors[0] is unused: ERROR_NONE is not an error). */
    m->errors[0] = m->errors[1];
    void *const *handles = (void *const *)m;
    for (size_t i = 0; i < sizeof(*m) / sizeof(void *); i++)
        if (!handles[i])
            return false;
    return true;
}

static void counter_add(spw_counter_t *c, uint64_t now, uint64_t before)
{
    if (c && now > before)
        spw_counter_add(c, now - before);
}

static void metrics_sync(spw_ps_server_t *srv)
{
    if (!srv->store)
        return; /* pserver.dim=auto, no dim yet */
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(srv->store, &st);
    struct ps_metrics *m = &srv->m;
    counter_add(m->rows_pull, st.rows_pulled, srv->last.rows_pulled);
    counter_add(m->rows_push, st.rows_pushed, srv->last.rows_pushed);
    counter_add(m->rej_nonfinite, st.rejected_nonfinite, srv->last.rejected_nonfinite);
    counter_add(m->rej_stale, st.dropped_stale, srv->last.dropped_stale);
    counter_add(m->rej_unadmitted, st.unadmitted, srv->last.unadmitted);
    counter_add(m->admitted, st.admitted, srv->last.admitted);
    counter_add(m->evict_spill, st.evictions, srv->last.evictions);
    counter_add(m->evict_ttl, st.expired, srv->last.expired);
    counter_add(m->db_reads, st.db_reads, srv->last.db_reads);
    counter_add(m->cold_reads, st.cold_reads, srv->last.cold_reads);
    counter_add(m->dc_corrected, st.dc_corrected, srv->last.dc_corrected);
    counter_add(m->dc_uncorrected, st.dc_uncorrected, srv->last.dc_uncorrected);
    srv->last = st;
    struct spw_ps_stale_stats ss;
    spw_ps_store_get_staleness(srv->store, &ss);
    for (int c = 0; c < SPW_PS_CLASSES; c++) {
        if (m->tau_ref[c])
            spw_gauge_set(m->tau_ref[c], ss.tau_ref[c]);
        if (m->alpha_mean[c])
            spw_gauge_set(m->alpha_mean[c], ss.alpha_mean[c]);
    }
    if (m->top_threshold)
        spw_gauge_set(m->top_threshold,
                      ss.top_threshold == UINT32_MAX ? -1.0 : (double)ss.top_threshold);
    if (m->rows_dram)
        spw_gauge_set(m->rows_dram, (double)st.rows_dram);
    if (m->rows_dram_max)
        spw_gauge_set(m->rows_dram_max, (double)st.rows_dram_max);
    if (m->bytes_dram)
        spw_gauge_set(m->bytes_dram, (double)st.bytes_dram);
    if (m->rows_cold)
        spw_gauge_set(m->rows_cold, (double)st.rows_cold);
    if (m->bytes_cold)
        spw_gauge_set(m->bytes_cold, (double)st.bytes_cold);
    if (m->rows_disk)
        spw_gauge_set(m->rows_disk, (double)spw_ps_store_rows_on_disk(srv->store));
}

static void set_ready(spw_ps_server_t *srv, bool ready, const char *reason)
{
    if (srv->m.ready)
        spw_gauge_set(srv->m.ready, ready ? 1.0 : 0.0);
    if (srv->conf.http)
        spw_http_set_ready(srv->conf.http, ready, reason);
}

/* ---- replies ---- */

/* Where a reply goes: the ROUTER identity, and whether the peer is a REQ socket that expects the
 * empty delimiter frame. */
struct peer {
    zmq_msg_t *ident;
    bool delim;
};

/* Sends identity + reply. Failures are counted (the peer may be gone). */
static void send_reply(spw_ps_server_t *srv, struct peer *peer, Sparrow__Reply *reply)
{
    size_t len = protobuf_c_message_get_packed_size(&reply->base);
    zmq_msg_t body;
    if (zmq_msg_init_size(&body, len) != 0) {
        spw_counter_inc(srv->m.dropped_frames);
        return;
    }
    protobuf_c_message_pack(&reply->base, zmq_msg_data(&body));
    if (!peer->ident) { /* spw_ps__server_handle_frame: packed, not sent */
        zmq_msg_close(&body);
        return;
    }
    bool ok = zmq_msg_send(peer->ident, srv->sock, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0;
    if (ok && peer->delim)
        ok = zmq_send(srv->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0;
    if (ok)
        ok = zmq_msg_send(&body, srv->sock, ZMQ_DONTWAIT) >= 0;
    if (!ok) {
        zmq_msg_close(&body);
        spw_counter_inc(srv->m.dropped_frames);
    }
}

/* A reply envelope of this protocol version answering request_id; the caller sets the body. */
static Sparrow__Reply reply_for(uint64_t request_id)
{
    Sparrow__Reply reply = SPARROW__REPLY__INIT;
    reply.has_version = true;
    reply.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    reply.has_request_id = true;
    reply.request_id = request_id;
    return reply;
}

static void send_error(spw_ps_server_t *srv, struct peer *peer, uint64_t request_id,
                       Sparrow__ErrorCode code, const char *msg)
{
    Sparrow__Reply reply = reply_for(request_id);
    reply.has_error = true;
    reply.error = code;
    reply.error_message = (char *)msg;
    if ((int)code > 0 && (int)code < ERRS)
        spw_counter_inc(srv->m.errors[code]);
    send_reply(srv, peer, &reply);
}

/* ---- push de-duplication ---- */

/* True when (trainer, epoch, seq) was applied already (or is too old to tell). */
static struct spw_ps__dedup_entry *dedup_find(spw_ps_server_t *srv, uint32_t trainer_id,
                                              bool create)
{
    struct spw_ps__dedup_entry *lru = &srv->dedup.e[0];
    for (size_t i = 0; i < SPW_PS_DEDUP_TRAINERS; i++) {
        struct spw_ps__dedup_entry *e = &srv->dedup.e[i];
        if (e->used && e->trainer_id == trainer_id)
            return e;
        if (!e->used || (lru->used && e->touched < lru->touched))
            lru = e;
    }
    if (!create)
        return NULL;
    if (lru->used)
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 10000, "dedup table full, forgetting a trainer",
                            "trainer_id=%u", lru->trainer_id);
    memset(lru, 0, sizeof(*lru));
    lru->used = true;
    lru->trainer_id = trainer_id;
    return lru;
}

static bool dedup_seen(const struct spw_ps__dedup_entry *e, uint64_t epoch, uint64_t seq)
{
    if (e->window == 0)
        return false; /* fresh entry */
    if (epoch != e->epoch)
        return epoch < e->epoch;
    if (seq > e->high)
        return false;
    uint64_t d = e->high - seq;
    return d >= SPW_PS_DEDUP_WINDOW || (e->window >> d) & 1;
}

static void dedup_mark(spw_ps_server_t *srv, struct spw_ps__dedup_entry *e, uint64_t epoch,
                       uint64_t seq)
{
    e->touched = ++srv->dedup.clock;
    if (e->window == 0 || epoch > e->epoch) {
        e->epoch = epoch;
        e->high = seq;
        e->window = 1;
        return;
    }
    if (seq > e->high) {
        uint64_t shift = seq - e->high;
        e->window = shift >= 64 ? 0 : e->window << shift;
        e->window |= 1;
        e->high = seq;
    } else {
        e->window |= 1ull << (e->high - seq);
    }
}

/* ---- handlers ---- */

static spw_err_t open_model(spw_ps_server_t *srv, bool restore_state_now, char *errstr,
                            size_t errstr_size);

static bool keys_in_shard(const spw_ps_server_t *srv, const uint64_t *keys, size_t n)
{
    if (srv->conf.shards <= 1)
        return true;
    for (size_t i = 0; i < n; i++)
        if (spw_hash_shard(keys[i], srv->conf.shards) != srv->conf.store.shard)
            return false;
    return true;
}

static void handle_pull(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    const Sparrow__PullRequest *pull = req->pull;
    size_t n;
    const uint64_t *keys = NULL;
    if (spw_wire_block_count(&pull->keys, 8, &n) != SPW_OK ||
        (n > 0 && spw_wire_block_u64(&pull->keys, n, &keys) != SPW_OK)) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "keys block is not n x u64");
        return;
    }
    if (!keys_in_shard(srv, keys, n)) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_WRONG_SHARD,
                   "a key belongs to another shard");
        return;
    }
    uint32_t dim = srv->conf.store.dim;
    size_t vbytes = n * dim * sizeof(float);
    if (vbytes / dim / sizeof(float) != n || vbytes > srv->conf.max_frame * 4) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_TOO_BIG,
                   "reply would exceed the frame limit");
        return;
    }
    float *values = n ? spw_arena_alloc(srv->arena, vbytes) : NULL;
    uint32_t *versions = n ? spw_arena_alloc(srv->arena, n * sizeof(uint32_t)) : NULL;
    if (n && (!values || !versions)) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_TOO_BIG,
                   "request too large for the reply arena");
        return;
    }
    spw_err_t err = n ? spw_ps_store_pull(srv->store, keys, n, values, versions) : SPW_OK;
    if (err) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_INTERNAL,
                   spw_err_str(err));
        return;
    }
    Sparrow__PullReply pr = SPARROW__PULL_REPLY__INIT;
    pr.has_dim = true;
    pr.dim = dim;
    pr.has_values = true;
    pr.values.data = (uint8_t *)values;
    pr.values.len = vbytes;
    pr.has_versions = true;
    pr.versions.data = (uint8_t *)versions;
    pr.versions.len = n * sizeof(uint32_t);
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_PULL;
    reply.pull = &pr;
    spw_counter_inc(srv->m.req[0]);
    send_reply(srv, peer, &reply);
}

/* The batch of one request: per histogram (sparrow_ps_staleness, then one per row class) the
 * counts per bucket, added with one atomic add per bucket used. */
struct tau_batch {
    uint64_t counts[1 + SPW_PS_CLASSES][SPW_HISTOGRAM_MAX_BUCKETS + 1];
};

/* sparrow_ps_staleness and, by row class (classes may be NULL: not observed),
 * sparrow_ps_staleness_class for n pushed rows. taus may be NULL (arena exhausted): nothing.
 * Per row this is a table lookup and two increments of local counts: the histograms' atomics
 * are touched once per request. */
static void observe_staleness(spw_ps_server_t *srv, const uint32_t *taus, const uint8_t *classes,
                              size_t n)
{
    spw_histogram_t *all = srv->m.staleness;
    if (!taus || n == 0 || !all)
        return;
    struct tau_batch b;
    memset(&b, 0, sizeof(b));
    /* every histogram of the family has the same bounds (metrics_register): one bucket index,
     * from the table made there */
    uint64_t tau_sum = 0, class_sum[SPW_PS_CLASSES] = {0};
    for (size_t i = 0; i < n; i++) {
        uint32_t tau = taus[i];
        size_t bucket = tau < TAU_TABLE ? srv->tau_bucket[tau] : srv->tau_bucket_above;
        b.counts[0][bucket]++;
        tau_sum += tau;
        if (classes && classes[i] < SPW_PS_CLASSES) {
            b.counts[1 + classes[i]][bucket]++;
            class_sum[classes[i]] += tau;
        }
    }
    spw_histogram_add(all, b.counts[0], (double)tau_sum);
    for (int c = 0; c < SPW_PS_CLASSES; c++)
        if (srv->m.staleness_class[c])
            spw_histogram_add(srv->m.staleness_class[c], b.counts[1 + c], (double)class_sum[c]);
}

/* Every way rows are applied (an async push, a step's average, a late contribution): the
 * store's push (optimizer, staleness penalty), then the rows are published and their staleness
 * observed. args->taus and ->classes are set from the request's arena (NULL when it is
 * exhausted: no histogram). */
static spw_err_t apply_push(spw_ps_server_t *srv, struct spw_ps_push_args *args,
                            int64_t max_event_ms, struct spw_ps_push_result *res)
{
    if (args->n == 0)
        return SPW_OK;
    args->taus = spw_arena_alloc(srv->arena, args->n * sizeof(uint32_t));
    args->classes = spw_arena_alloc(srv->arena, args->n);
    spw_err_t err = spw_ps_store_push_args(srv->store, args, res);
    if (err)
        return err;
    if (srv->pub)
        spw_ps__publisher_touch(srv->pub, args->keys, args->n, max_event_ms);
    observe_staleness(srv, args->taus, args->classes, args->n);
    return SPW_OK;
}

/* A push whose step its trainer's unit committed already: applied at once, weighted as one
 * contributor more of that step (apply_late), or dropped but for its counter row (it counts the
 * examples consumed). False when an error reply was sent. */
static bool late_push(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req,
                      const uint64_t *keys, size_t n, const float *grads, const uint32_t *versions,
                      const struct spw_ps__step_lateness *l, Sparrow__PushAck *ack)
{
    const Sparrow__PushRequest *push = req->push;
    const uint32_t dim = srv->conf.store.dim;
    const uint64_t counter = srv->conf.store.counter_key;
    ack->has_late = true;
    ack->late = true;
    spw_counter_inc(srv->m.steps_late);
    SPW_LOG_RATELIMITED(SPW_LOG_DEBUG, 5000, "push for a committed step",
                        "trainer=%u step=%" PRIu64 " committed=%" PRIu64 " apply=%d",
                        push->trainer_id, push->step, l->committed, l->apply);
    size_t m = 0; /* the rows applied, compacted at the front of the copies */
    uint64_t *k2 = n ? spw_arena_alloc(srv->arena, n * sizeof(uint64_t)) : NULL;
    uint32_t *v2 = n ? spw_arena_alloc(srv->arena, n * sizeof(uint32_t)) : NULL;
    float *g2 = n ? spw_arena_alloc(srv->arena, n * dim * sizeof(float)) : NULL;
    if (n && (!k2 || !v2 || !g2)) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_TOO_BIG,
                   "request too large for the arena");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        bool is_counter = counter && keys[i] == counter;
        if (!l->apply && !is_counter)
            continue;
        k2[m] = keys[i];
        v2[m] = versions ? versions[i] : 0;
        for (uint32_t d = 0; d < dim; d++)
            g2[m * dim + d] =
                is_counter ? grads[i * dim + d] : (float)(l->weight * (double)grads[i * dim + d]);
        m++;
    }
    struct spw_ps_push_result res = {0};
    struct spw_ps_push_args args = {.n = m, .keys = k2, .grads = g2, .versions = v2};
    spw_err_t err =
        apply_push(srv, &args, push->has_max_event_time_ms ? push->max_event_time_ms : 0, &res);
    if (err) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_INTERNAL,
                   spw_err_str(err));
        return false;
    }
    if (l->apply) {
        ack->has_late_applied = true;
        ack->late_applied = true;
        spw_counter_inc(srv->m.steps_late_applied);
    }
    ack->has_applied = true;
    ack->applied = res.applied;
    return true;
}

/* A push tagged with a step: held in the pending table until the step's commit (a push of a
 * step its unit committed is late: see late_push). False when an error reply was sent. */
static bool hold_for_step(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req,
                          const uint64_t *keys, size_t n, const float *grads,
                          const uint32_t *versions, Sparrow__PushAck *ack)
{
    const Sparrow__PushRequest *push = req->push;
    struct spw_ps__step_lateness l =
        spw_ps__steps_lateness(srv->steps, push->trainer_id, push->step,
                               push->has_step_examples ? push->step_examples : 0);
    if (l.late)
        return late_push(srv, peer, req, keys, n, grads, versions, &l, ack);
    struct spw_ps__step_push sp = {
        .step = push->step,
        .trainer_id = push->trainer_id,
        .examples = push->has_step_examples ? push->step_examples : 0,
        .max_event_ms = push->has_max_event_time_ms ? push->max_event_time_ms : 0,
        .n = n,
        .keys = keys,
        .grads = grads,
        .versions = versions,
    };
    spw_err_t err = n ? spw_ps__steps_add(srv->steps, &sp) : SPW_OK;
    if (err) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE,
                   err == SPW_ERR_TOO_BIG ? "pending step table full (pserver.steps.max_mb)"
                                          : "out of memory for the pending step table");
        return false;
    }
    ack->has_pending = true;
    ack->pending = true;
    ack->has_applied = true;
    ack->applied = 0;
    return true;
}

/* The buffers of push->echo's rows (arena): false when they do not fit (nothing echoed). */
static bool echo_prepare(spw_ps_server_t *srv, const Sparrow__PushRequest *push,
                         struct spw_ps_echo *echo)
{
    uint32_t dim = srv->conf.store.dim;
    size_t m = push->echo.len / 4; /* the wire module checked: ascending indices < n */
    if (spw_wire_block_u32(&push->echo, m, &echo->idx) != SPW_OK)
        return false;
    echo->n = m;
    echo->values = spw_arena_alloc(srv->arena, m * dim * sizeof(float));
    echo->versions = spw_arena_alloc(srv->arena, m * sizeof(uint32_t));
    return echo->values && echo->versions;
}

/* PushRequest.pulled as n × dim floats (f16 converted into the arena): NULL when absent; false
 * when malformed or too large (an error reply was sent). */
static bool push_pulled(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req,
                        size_t n, const float **out)
{
    const Sparrow__PushRequest *push = req->push;
    uint32_t dim = srv->conf.store.dim;
    *out = NULL;
    if (n == 0 || push->pulled.len == 0)
        return true;
    spw_err_t err;
    if (push->fp16) {
        const uint16_t *half;
        float *f = NULL;
        if ((err = spw_wire_block_u16(&push->pulled, n * dim, &half)) == SPW_OK &&
            (f = spw_arena_alloc(srv->arena, n * dim * sizeof(float))) != NULL)
            spw_wire_f16_to_f32_n(half, f, n * dim);
        if (err == SPW_OK && !f) {
            send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_TOO_BIG,
                       "request too large for the arena");
            return false;
        }
        *out = f;
    } else {
        err = spw_wire_block_f32(&push->pulled, n * dim, out);
    }
    if (err != SPW_OK) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "pulled block");
        return false;
    }
    return true;
}

static void handle_push(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    const Sparrow__PushRequest *push = req->push;
    uint32_t dim = srv->conf.store.dim;
    if (push->dim != dim) {
        char msg[96];
        snprintf(msg, sizeof(msg), "dim %u, shard has %u", push->dim, dim);
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED, msg);
        return;
    }
    size_t n = push->keys.len / 8; /* the wire module checked every block's length */
    const uint64_t *keys = NULL;
    const uint32_t *versions = NULL;
    const float *grads = NULL, *pulled = NULL;
    if (n > 0) {
        if (spw_wire_block_u64(&push->keys, n, &keys) != SPW_OK ||
            spw_wire_block_u32(&push->versions, n, &versions) != SPW_OK) {
            send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                       "keys/versions blocks");
            return;
        }
        if (push->fp16) {
            const uint16_t *half;
            if (spw_wire_block_u16(&push->grads, n * dim, &half) != SPW_OK) {
                send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                           "grads block");
                return;
            }
            float *f = spw_arena_alloc(srv->arena, n * dim * sizeof(float));
            if (!f) {
                send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_TOO_BIG,
                           "request too large for the arena");
                return;
            }
            spw_wire_f16_to_f32_n(half, f, n * dim);
            grads = f;
        } else if (spw_wire_block_f32(&push->grads, n * dim, &grads) != SPW_OK) {
            send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                       "grads block");
            return;
        }
    }
    if (!push_pulled(srv, peer, req, n, &pulled))
        return; /* answered with an error */
    if (!keys_in_shard(srv, keys, n)) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_WRONG_SHARD,
                   "a key belongs to another shard");
        return;
    }
    Sparrow__PushAck ack = SPARROW__PUSH_ACK__INIT;
    ack.has_seq = true;
    ack.seq = push->seq;
    struct spw_ps__dedup_entry *e = dedup_find(srv, push->trainer_id, true);
    if (push->has_generation && push->generation < srv->fence) {
        /* sent before the global restore this shard last applied: the trainer dropped it */
        ack.has_fenced = true;
        ack.fenced = true;
        spw_counter_inc(srv->m.fenced);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "push fenced",
                            "trainer=%u generation=%" PRIu64 " fence=%" PRIu64, push->trainer_id,
                            push->generation, srv->fence);
    } else if (dedup_seen(e, push->epoch, push->seq)) {
        e->touched = ++srv->dedup.clock;
        ack.has_duplicate = true;
        ack.duplicate = true;
        spw_counter_inc(srv->m.duplicates);
    } else if (push->has_step && push->step > 0) {
        if (!hold_for_step(srv, peer, req, keys, n, grads, versions, &ack))
            return; /* answered with an error */
        dedup_mark(srv, e, push->epoch, push->seq);
    } else {
        struct spw_ps_push_result res = {0};
        struct spw_ps_echo echo = {0};
        bool echoing = push->echo.len > 0 && echo_prepare(srv, push, &echo);
        if (push->echo.len > 0 && !echoing) /* the trainer keeps the rows it prefetched */
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "push echo skipped", "rows=%zu",
                                push->echo.len / 4);
        struct spw_ps_push_args args = {.n = n,
                                        .keys = keys,
                                        .grads = grads,
                                        .versions = versions,
                                        .pulled = pulled,
                                        .echo = echoing ? &echo : NULL};
        spw_err_t err =
            apply_push(srv, &args, push->has_max_event_time_ms ? push->max_event_time_ms : 0, &res);
        if (err) {
            send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_INTERNAL,
                       spw_err_str(err));
            return;
        }
        dedup_mark(srv, e, push->epoch, push->seq);
        ack.has_applied = true;
        ack.applied = res.applied;
        ack.has_rejected = true;
        ack.rejected = res.rejected;
        ack.has_dropped_stale = true;
        ack.dropped_stale = res.dropped_stale;
        if (echoing) {
            ack.has_echo_values = ack.has_echo_versions = true;
            ack.echo_values.data = (uint8_t *)echo.values;
            ack.echo_values.len = echo.n * dim * sizeof(float);
            ack.echo_versions.data = (uint8_t *)echo.versions;
            ack.echo_versions.len = echo.n * sizeof(uint32_t);
            spw_counter_add(srv->m.echoed, echo.n);
        }
    }
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_PUSH;
    reply.push = &ack;
    spw_counter_inc(srv->m.req[1]);
    send_reply(srv, peer, &reply);
}

static void handle_stats(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    struct spw_ps_store_stats st = {0};
    if (srv->store) /* else pserver.dim=auto and no dim yet: an empty shard */
        spw_ps_store_get_stats(srv->store, &st);
    Sparrow__StatsReply sr = SPARROW__STATS_REPLY__INIT;
    sr.has_shard = sr.has_rows_dram = sr.has_rows_total = sr.has_pulls = sr.has_pushes = true;
    sr.has_bytes_dram = sr.has_epoch = true;
    sr.shard = srv->conf.store.shard;
    sr.rows_dram = st.rows_dram;
    /* the cold file holds every row evicted since open, RocksDB those of the last flush */
    uint64_t on_disk = srv->store ? spw_ps_store_rows_on_disk(srv->store) : 0;
    sr.rows_total = (on_disk > st.rows_cold ? on_disk : st.rows_cold) + st.rows_dram;
    sr.pulls = st.rows_pulled;
    sr.pushes = st.rows_pushed;
    sr.bytes_dram = st.bytes_dram;
    sr.epoch = srv->epoch;
    sr.has_started_ms = true;
    sr.started_ms = srv->started_ms;
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_STATS;
    reply.stats = &sr;
    spw_counter_inc(srv->m.req[2]);
    send_reply(srv, peer, &reply);
}

static bool is_enospc(const char *msg)
{
    return strstr(msg, "No space left") != NULL || strstr(msg, "NoSpace") != NULL ||
           strstr(msg, "ENOSPC") != NULL;
}

static void handle_checkpoint(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    const Sparrow__CheckpointRequest *cr = req->checkpoint;
    /* The directory is configuration, not something a peer may choose. */
    if (cr->dir && cr->dir[0] && strcmp(cr->dir, srv->ckpt_dir) != 0) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "checkpoint dir differs from the shard's configured directory");
        return;
    }
    if (!cr->has_epoch || cr->epoch == 0) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "checkpoint epoch must be >= 1");
        return;
    }
    uint64_t t0 = spw_time_mono_ns();
    /* the update offsets' flush and queries run on the publisher thread meanwhile */
    uint64_t pub_ticket = srv->pub ? spw_ps__publisher_checkpoint_start(srv->pub) : 0;
    struct spw_ps_checkpoint_info info;
    char err[1024] = "";
    spw_err_t rc = spw_ps__store_checkpoint(srv->store, srv->ckpt_dir, cr->epoch, &srv->dedup,
                                            &info, err, sizeof(err));
    double secs = (double)(spw_time_mono_ns() - t0) / 1e9;
    if (rc != SPW_OK) {
        spw_counter_inc(srv->m.ckpt_failed);
        bool full = is_enospc(err);
        SPW_ERROR("checkpoint failed", "epoch=%" PRIu64 " disk_full=%d err=\"%s\"", cr->epoch,
                  (int)full, err);
        if (full) {
            srv->disk_full = true;
            srv->disk_checked_ms = spw_time_mono_ms();
            if (srv->m.disk_full)
                spw_gauge_set(srv->m.disk_full, 1.0);
            set_ready(srv, false, "disk full: checkpoints failing");
        }
        send_error(srv, peer, req->request_id,
                   rc == SPW_ERR_EXISTS ? SPARROW__ERROR_CODE__ERROR_MALFORMED
                                        : SPARROW__ERROR_CODE__ERROR_UNAVAILABLE,
                   err);
        return;
    }
    srv->epoch = cr->epoch;
    srv->need_bytes = info.bytes;
    if (srv->disk_full) {
        srv->disk_full = false;
        if (srv->m.disk_full)
            spw_gauge_set(srv->m.disk_full, 0.0);
        set_ready(srv, true, NULL);
    }
    spw_counter_inc(srv->m.ckpt_ok);
    if (srv->m.ckpt_seconds)
        spw_gauge_set(srv->m.ckpt_seconds, secs);
    if (srv->m.ckpt_bytes)
        spw_gauge_set(srv->m.ckpt_bytes, (double)info.bytes);
    if (srv->m.epoch)
        spw_gauge_set(srv->m.epoch, (double)cr->epoch);
    SPW_INFO("checkpoint written",
             "epoch=%" PRIu64 " path=%s rows=%" PRIu64 " bytes=%" PRIu64 " seconds=%.3f", cr->epoch,
             info.path, info.rows, info.bytes, secs);
    Sparrow__CheckpointReply ck = SPARROW__CHECKPOINT_REPLY__INIT;
    ck.has_epoch = ck.has_rows = ck.has_started_ms = true;
    ck.started_ms = srv->started_ms;
    ck.epoch = cr->epoch;
    ck.rows = info.rows;
    ck.path = info.path;
    ck.checksum = info.checksum;
    if (srv->pub)
        spw_ps__publisher_fill_offsets(srv->pub, pub_ticket, cr->epoch, srv->arena, &ck);
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_CHECKPOINT;
    reply.checkpoint = &ck;
    spw_counter_inc(srv->m.req[3]);
    send_reply(srv, peer, &reply);
}

/* CommitRequest(step) from the coordinator: the step's pending gradients of the listed trainers,
 * averaged per row, go through each row's optimizer once (the store's push, tau measured from the
 * oldest version a contributor pulled); the rows are published like any push. */
static void handle_commit(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    const Sparrow__CommitRequest *cr = req->commit;
    struct spw_ps__step_commit commit = {
        .step = cr->has_step ? cr->step : 0,
        .trainer_ids = cr->trainer_ids,
        .n_trainers = cr->n_trainer_ids,
        .member_ids = cr->member_ids,
        .n_members = cr->n_member_ids,
        .examples = cr->has_examples ? cr->examples : 0,
        .counter_key = srv->conf.store.counter_key,
        .apply_late = cr->has_apply_late && cr->apply_late,
    };
    if (commit.step == 0) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "commit without a step");
        return;
    }
    struct spw_ps__step_sum sum;
    spw_err_t err = spw_ps__steps_take(srv->steps, &commit, &sum);
    struct spw_ps_push_result res = {0};
    /* the step averaged K trainers' batches: a K times larger batch for the dense network,
     * which takes one step where one trainer would have taken K */
    float dense_scale = srv->conf.sync_dense_lr_sqrt && commit.n_trainers > 1
                            ? sqrtf((float)commit.n_trainers)
                            : 0.0f;
    struct spw_ps_push_args args = {.n = sum.n,
                                    .keys = sum.keys,
                                    .grads = sum.grads,
                                    .versions = sum.versions,
                                    .dense_lr_scale = dense_scale};
    if (!err)
        err = apply_push(srv, &args, sum.max_event_ms, &res);
    /* the unit's members that came too late, each weighted as one contributor more, after the
     * step (their tau counts the commit) */
    for (size_t i = 0; !err && i < sum.n_late; i++) {
        struct spw_ps_push_result lr = {0};
        struct spw_ps_push_args late = {.n = sum.late[i].n,
                                        .keys = sum.late[i].keys,
                                        .grads = sum.late[i].grads,
                                        .versions = sum.late[i].versions};
        err = apply_push(srv, &late, sum.late[i].max_event_ms, &lr);
    }
    if (err) {
        /* the step is lost on this shard: the coordinator recovers everyone */
        SPW_ERROR("step commit failed", "step=%" PRIu64 " error=\"%s\"", commit.step,
                  spw_err_str(err));
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_INTERNAL,
                   spw_err_str(err));
        return;
    }
    if (sum.discarded)
        spw_counter_add(srv->m.steps_discarded, sum.discarded);
    if (sum.n_late)
        spw_counter_add(srv->m.steps_late_applied, sum.n_late);
    SPW_DEBUG("step committed",
              "step=%" PRIu64 " trainers=%zu members=%zu examples=%" PRIu64 " contributions=%u "
              "rows=%zu discarded=%u late_applied=%zu",
              commit.step, commit.n_trainers, commit.n_members, commit.examples, sum.contributions,
              sum.n, sum.discarded, sum.n_late);
    spw_counter_inc(srv->m.commits);
    Sparrow__CommitReply rep = SPARROW__COMMIT_REPLY__INIT;
    rep.has_step = rep.has_rows = rep.has_contributions = rep.has_discarded = true;
    rep.step = commit.step;
    rep.rows = res.applied;
    rep.contributions = sum.contributions;
    rep.discarded = sum.discarded;
    rep.has_late_applied = true;
    rep.late_applied = (uint32_t)sum.n_late;
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_COMMIT;
    reply.commit = &rep;
    spw_counter_inc(srv->m.req[5]);
    send_reply(srv, peer, &reply);
}

/* After the store was reopened on checkpoint epoch (0: the empty model): the admission sketch and
 * the de-duplication windows become the epoch's, so that the shard admits and de-duplicates as it
 * did then (a push it had applied by the epoch and sees again is a duplicate). What the
 * checkpoint lacks (written before these were kept, or rewritten by reshard) starts empty,
 * logged. The files passed spw_ps_checkpoint_verify; a read that fails now leaves them empty. */
static void restore_state(spw_ps_server_t *srv, uint64_t epoch)
{
    memset(srv->dedup.e, 0, SPW_PS_DEDUP_TRAINERS * sizeof(*srv->dedup.e));
    srv->dedup.clock = 0;
    char dir[SPW_CKPT_PATH_MAX];
    if (epoch == 0 || spw_ckpt_shard_path(dir, sizeof(dir), srv->ckpt_dir, epoch,
                                          srv->conf.store.shard) != SPW_OK)
        return;
    spw_ps__store_restore_sketch(srv->store, dir);
    char why[SPW_CKPT_PATH_MAX + 160];
    spw_err_t err = spw_ps__dedup_load(dir, &srv->dedup, why, sizeof(why));
    if (err == SPW_OK) {
        size_t n = 0;
        for (size_t i = 0; i < SPW_PS_DEDUP_TRAINERS; i++)
            n += srv->dedup.e[i].used;
        SPW_INFO("push de-duplication windows restored", "path=%s trainers=%zu", dir, n);
    } else if (err == SPW_ERR_NOT_FOUND) {
        SPW_WARN("checkpoint without push de-duplication windows (older format, or rewritten by "
                 "reshard): they start empty",
                 "path=%s", dir);
    } else {
        SPW_ERROR("push de-duplication windows not restored: they start empty", "reason=\"%s\"",
                  why);
    }
}

/* RestoreRequest(epoch) from the coordinator: the live store is replaced by checkpoint epoch of
 * this shard (epoch 0: the empty model). On failure the shard keeps serving its previous store
 * when it can be reopened and answers an error (the coordinator falls back or retries). */
static void handle_restore(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    uint64_t epoch = req->restore->has_epoch ? req->restore->epoch : 0;
    if (req->restore->has_generation)
        srv->fence = req->restore->generation;
    /* the open steps postdate the epoch restored: discarded whole */
    size_t dropped = srv->steps ? spw_ps__steps_pending(srv->steps) : 0;
    if (srv->steps)
        spw_ps__steps_clear(srv->steps);
    if (dropped)
        spw_counter_add(srv->m.steps_restore_dropped, dropped);
    char err[1024] = "";
    if (srv->dim_pending && epoch == 0) {
        /* pserver.dim=auto, no dim yet: already the empty model; the dim still comes later */
        srv->epoch = 0;
        Sparrow__RestoreReply rr0 = SPARROW__RESTORE_REPLY__INIT;
        rr0.has_epoch = rr0.has_rows = true;
        Sparrow__Reply reply0 = reply_for(req->request_id);
        reply0.body_case = SPARROW__REPLY__BODY_RESTORE;
        reply0.restore = &rr0;
        send_reply(srv, peer, &reply0);
        return;
    }
    if (epoch > 0) {
        /* verify before closing the live store, so that a bad epoch changes nothing */
        char dir[4096];
        if (spw_ckpt_shard_path(dir, sizeof(dir), srv->ckpt_dir, epoch, srv->conf.store.shard) !=
                SPW_OK ||
            spw_ps_checkpoint_verify(dir, NULL) != SPW_OK) {
            snprintf(err, sizeof(err),
                     "checkpoint epoch %" PRIu64 " of shard %u missing or corrupt", epoch,
                     srv->conf.store.shard);
            SPW_WARN("restore refused", "epoch=%" PRIu64 " reason=\"%s\"", epoch, err);
            send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE, err);
            return;
        }
    }
    spw_ps_store_discard(srv->store); /* its rows are replaced: nothing to write */
    srv->store = NULL;
    spw_err_t rc = SPW_OK;
    if (epoch == 0)
        spw_fs_remove_tree(srv->db_path);
    else
        rc = spw_ps_checkpoint_restore_epoch(srv->ckpt_dir, srv->conf.store.shard, epoch,
                                             srv->db_path, err, sizeof(err));
    char oerr[512] = "";
    if (srv->dim_pending) {
        /* pserver.dim=auto: the restored checkpoint's dim, from now on */
        enum spw_ps_optimizer opt;
        uint32_t dim = 0;
        if (rc == SPW_OK &&
            (rc = spw_ps_store_peek_dim(srv->db_path, &dim, &opt, err, sizeof(err))) == SPW_OK) {
            srv->conf.store.dim = dim;
            if ((rc = open_model(srv, false, oerr, sizeof(oerr))) != SPW_OK)
                snprintf(err, sizeof(err), "%s", oerr);
        }
        if (rc != SPW_OK) {
            SPW_ERROR("restore failed", "epoch=%" PRIu64 " err=\"%s\"", epoch, err);
            send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE, err);
            return;
        }
        srv->dim_pending = false;
        SPW_INFO("pserver dim taken from the restored checkpoint",
                 "dim=%u epoch=%" PRIu64 " (pserver.dim=auto)", dim, epoch);
    }
    struct spw_ps_store_conf sc = srv->conf.store;
    sc.db_path = srv->db_path;
    if (!srv->store)
        srv->store = spw_ps_store_open(&sc, oerr, sizeof(oerr));
    if (!srv->store) {
        /* no store to serve from: exit loudly, the restarted shard restores at startup */
        SPW_ERROR("reopening the store after a restore failed", "epoch=%" PRIu64 " err=\"%s\"",
                  epoch, oerr);
        abort();
    }
    spw_ps_store_set_now(srv->store, (uint32_t)(spw_time_wall_ms() / 1000));
    memset(&srv->last, 0, sizeof(srv->last));
    if (rc != SPW_OK) {
        SPW_ERROR("restore failed", "epoch=%" PRIu64 " err=\"%s\"", epoch, err);
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE, err);
        return;
    }
    srv->epoch = epoch;
    restore_state(srv, epoch);
    if (srv->m.epoch)
        spw_gauge_set(srv->m.epoch, (double)epoch);
    if (srv->pub) /* readers of the update stream drop what was published after epoch */
        spw_ps__publisher_restored(srv->pub, epoch);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(srv->store, &st);
    SPW_INFO("restored", "epoch=%" PRIu64 " rows=%" PRIu64, epoch,
             spw_ps_store_rows_on_disk(srv->store) + st.rows_dram);
    Sparrow__RestoreReply rr = SPARROW__RESTORE_REPLY__INIT;
    rr.has_epoch = rr.has_rows = true;
    rr.epoch = epoch;
    rr.rows = spw_ps_store_rows_on_disk(srv->store) + st.rows_dram;
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_RESTORE;
    reply.restore = &rr;
    send_reply(srv, peer, &reply);
}

static void handle_health(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    Sparrow__HealthReply hr = SPARROW__HEALTH_REPLY__INIT;
    hr.has_ready = true;
    hr.ready = !srv->disk_full;
    hr.state = srv->disk_full ? "disk_full" : srv->dim_pending ? "waiting_for_dim" : "serving";
    Sparrow__Reply reply = reply_for(req->request_id);
    reply.body_case = SPARROW__REPLY__BODY_HEALTH;
    reply.health = &hr;
    spw_counter_inc(srv->m.req[4]);
    send_reply(srv, peer, &reply);
}

/* pserver.dim=auto before any dim: a pull or push that carries one fixes it (the model is opened
 * with it); stats and health are served without it, and a restore takes the checkpoint's (the
 * coordinator's recovery may come before any trainer); anything else waits (UNAVAILABLE, which
 * clients resend). false when req was answered here. */
static bool take_dim(spw_ps_server_t *srv, struct peer *peer, const Sparrow__Request *req)
{
    uint32_t dim = 0;
    if (req->body_case == SPARROW__REQUEST__BODY_PULL && req->pull->has_dim)
        dim = req->pull->dim;
    else if (req->body_case == SPARROW__REQUEST__BODY_PUSH && req->push->has_dim)
        dim = req->push->dim;
    if (dim == 0 || dim > SPW_PS_MAX_DIM) {
        if (req->body_case == SPARROW__REQUEST__BODY_STATS ||
            req->body_case == SPARROW__REQUEST__BODY_HEALTH ||
            req->body_case == SPARROW__REQUEST__BODY_RESTORE) /* a checkpoint holds its dim */
            return true;
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE,
                   "pserver.dim=auto: no client has told the row dimension yet (a trainer's "
                   "first request does; clients older than PullRequest.dim never do: set "
                   "pserver.dim)");
        return false;
    }
    srv->conf.store.dim = dim;
    char errstr[512];
    spw_err_t err = open_model(srv, srv->conf.restore, errstr, sizeof(errstr));
    if (err) {
        SPW_ERROR("pserver failed to open its model", "dim=%u error=\"%s\"", dim, errstr);
        srv->fatal = err;
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_INTERNAL, errstr);
        return false;
    }
    srv->dim_pending = false;
    SPW_INFO("pserver dim taken from its first client",
             "dim=%u (pserver.dim=auto; fixed from "
             "now on, and kept by its checkpoints)",
             dim);
    return true;
}

static void handle_body(spw_ps_server_t *srv, struct peer *peer, zmq_msg_t *body)
{
    size_t len = zmq_msg_size(body);
    if (len > srv->conf.max_frame) {
        send_error(srv, peer, 0, SPARROW__ERROR_CODE__ERROR_TOO_BIG,
                   "frame above pserver.max_frame");
        return;
    }
    Sparrow__Request *req = NULL;
    spw_arena_reset(srv->arena);
    spw_err_t err =
        spw_wire_unpack_request(zmq_msg_data(body), len, srv->conf.max_frame, srv->arena, &req);
    if (err == SPW_ERR_TOO_BIG || err == SPW_ERR_NOMEM) {
        send_error(srv, peer, 0, SPARROW__ERROR_CODE__ERROR_TOO_BIG, "request too large");
        return;
    }
    if (err != SPW_OK) {
        send_error(srv, peer, 0, SPARROW__ERROR_CODE__ERROR_MALFORMED, "undecodable request");
        return;
    }
    if (!req->has_version || req->version != SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1) {
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_VERSION,
                   "unsupported protocol version (this shard speaks 1)");
        return;
    }
    if (srv->dim_pending && !take_dim(srv, peer, req))
        return;
    switch (req->body_case) {
    case SPARROW__REQUEST__BODY_PULL:
        handle_pull(srv, peer, req);
        break;
    case SPARROW__REQUEST__BODY_PUSH:
        handle_push(srv, peer, req);
        break;
    case SPARROW__REQUEST__BODY_STATS:
        handle_stats(srv, peer, req);
        break;
    case SPARROW__REQUEST__BODY_CHECKPOINT:
        handle_checkpoint(srv, peer, req);
        break;
    case SPARROW__REQUEST__BODY_HEALTH:
        handle_health(srv, peer, req);
        break;
    case SPARROW__REQUEST__BODY_RESTORE:
        handle_restore(srv, peer, req);
        break;
    case SPARROW__REQUEST__BODY_COMMIT:
        handle_commit(srv, peer, req);
        break;
    default:
        send_error(srv, peer, req->request_id, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "request without a body");
        break;
    }
}

int spw_ps__server_handle_frame(spw_ps_server_t *srv, const void *data, size_t len)
{
    zmq_msg_t body;
    if (zmq_msg_init_size(&body, len) != 0)
        return -1;
    if (len)
        memcpy(zmq_msg_data(&body), data, len);
    struct peer peer = {NULL, false};
    handle_body(srv, &peer, &body);
    zmq_msg_close(&body);
    return 0;
}

/* Reads one message: [identity, body] (DEALER) or [identity, empty, body] (REQ); anything else
 * is answered MALFORMED when it has an identity and a last frame, and dropped (counted) when it
 * has no body at all. */
static void serve_one(spw_ps_server_t *srv)
{
    zmq_msg_t ident, body;
    zmq_msg_init(&ident);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&ident, srv->sock, ZMQ_DONTWAIT) < 0)
        goto out_close;
    bool more = zmq_msg_more(&ident);
    /* Keep the last frame as the body; remember whether the first after the identity was empty. */
    int frames = 0;
    bool first_empty = false;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_init(&tmp);
        if (zmq_msg_recv(&tmp, srv->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&tmp);
            break;
        }
        frames++;
        more = zmq_msg_more(&tmp);
        if (frames == 1)
            first_empty = zmq_msg_size(&tmp) == 0;
        zmq_msg_close(&body);
        zmq_msg_init(&body);
        zmq_msg_move(&body, &tmp);
        zmq_msg_close(&tmp);
    }
    if (frames == 0 || zmq_msg_size(&ident) > MAX_IDENTITY) {
        spw_counter_inc(srv->m.dropped_frames);
        goto out_close;
    }
    struct peer peer = {&ident, false};
    if (frames == 2 && first_empty) {
        peer.delim = true;
    } else if (frames >= 2) {
        send_error(srv, &peer, 0, SPARROW__ERROR_CODE__ERROR_MALFORMED,
                   "expected [body] or [empty, body] after the identity");
        goto out_close;
    }
    handle_body(srv, &peer, &body);
out_close:
    zmq_msg_close(&ident);
    zmq_msg_close(&body);
}

/* ---- lifecycle ---- */

spw_ps_server_t *spw_ps_server_new(const struct spw_ps_server_conf *conf, char *errstr,
                                   size_t errstr_size)
{
    spw_ps_server_t *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    srv->conf = *conf;
    srv->started_ms = spw_time_wall_ms();
    srv->conf.listen = NULL;
    srv->conf.data_dir = srv->conf.checkpoint_dir = NULL;
    srv->conf.curve_secret_key_file = srv->conf.curve_allowed_clients_file = NULL;
    if (srv->conf.shards == 0)
        srv->conf.shards = 1;
    if (srv->conf.max_frame == 0)
        srv->conf.max_frame = SPW_WIRE_DEFAULT_MAX_FRAME;
    if (srv->conf.store.shard >= srv->conf.shards) {
        snprintf(errstr, errstr_size, "shard %u outside 0..%u", srv->conf.store.shard,
                 srv->conf.shards - 1);
        goto out_destroy;
    }
    srv->data_dir = strdup(conf->data_dir);
    srv->ckpt_dir = strdup(conf->checkpoint_dir && conf->checkpoint_dir[0] ? conf->checkpoint_dir
                                                                           : conf->data_dir);
    srv->db_path = malloc(strlen(conf->data_dir) + 4);
    srv->dedup.e = calloc(SPW_PS_DEDUP_TRAINERS, sizeof(*srv->dedup.e));
    if (!srv->data_dir || !srv->ckpt_dir || !srv->db_path || !srv->dedup.e) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_destroy;
    }
    sprintf(srv->db_path, "%s/db", conf->data_dir);
    if (spw_fs_mkdir_p(srv->data_dir) != SPW_OK) {
        snprintf(errstr, errstr_size, "mkdir %s: %s", srv->data_dir, strerror(errno));
        goto out_destroy;
    }
    srv->metrics = conf->metrics;
    if (!srv->metrics) {
        srv->metrics = spw_metrics_new();
        srv->own_metrics = true;
        if (!srv->metrics) {
            snprintf(errstr, errstr_size, "out of memory");
            goto out_destroy;
        }
    }
    if (!metrics_register(srv)) {
        snprintf(errstr, errstr_size, "registering metrics failed");
        goto out_destroy;
    }
    set_ready(srv, false, "restoring");

    if (conf->restore) {
        uint64_t epoch = 0;
        spw_err_t rc = spw_ps_checkpoint_restore(srv->ckpt_dir, conf->store.shard, srv->db_path,
                                                 &epoch, errstr, errstr_size);
        if (rc == SPW_OK) {
            srv->epoch = epoch;
        } else if (rc == SPW_ERR_NOT_FOUND) {
            /* Without a checkpoint the consistent state is the empty model (trainers replay
             * from the beginning); a live database left by a crash is not consistent. */
            struct stat st;
            if (stat(srv->db_path, &st) == 0)
                SPW_WARN("no valid checkpoint, starting empty", "removed=%s", srv->db_path);
            spw_fs_remove_tree(srv->db_path);
        } else {
            goto out_destroy;
        }
        errstr[0] = '\0';
    }
    if (srv->m.epoch)
        spw_gauge_set(srv->m.epoch, (double)srv->epoch);
    srv->pub = spw_ps__publisher_new(conf, srv->metrics, errstr, errstr_size);
    if (!srv->pub && errstr[0])
        goto out_destroy;
    if (srv->pub && conf->restore) /* what a previous process published after the epoch is gone */
        spw_ps__publisher_restored(srv->pub, srv->epoch);
    if (srv->pub) { /* TTL evictions become tombstones (also for stores reopened later) */
        srv->conf.store.on_evict = spw_ps__publisher_on_evict;
        srv->conf.store.evict_opaque = srv->pub;
    }
    if (srv->conf.store.dim == 0) {
        /* pserver.dim=auto: the dim of the database (a restored checkpoint's, or the one left
         * by the last run), else the first client's */
        uint32_t dim = 0;
        enum spw_ps_optimizer opt;
        spw_err_t perr = spw_ps_store_peek_dim(srv->db_path, &dim, &opt, errstr, errstr_size);
        if (perr == SPW_OK) {
            srv->conf.store.dim = dim;
            SPW_INFO("pserver dim taken from its database", "dim=%u db=%s (pserver.dim=auto)", dim,
                     srv->db_path);
        } else if (perr != SPW_ERR_NOT_FOUND) {
            goto out_destroy;
        }
        errstr[0] = '\0';
    }
    if (srv->conf.store.dim == 0)
        srv->dim_pending = true;
    else if (open_model(srv, srv->conf.restore, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    srv->arena = spw_arena_new(1u << 20, srv->conf.max_frame * 6 + (1u << 20));
    srv->zctx = zmq_ctx_new();
    if (!srv->arena || !srv->zctx) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_destroy;
    }
    if (conf->curve_secret_key_file && conf->curve_secret_key_file[0]) {
        struct spw_curve_server_conf cc = {
            .secret_prop = "pserver.curve.secret_key_file",
            .secret_file = conf->curve_secret_key_file,
            .allowed_prop = "pserver.curve.allowed_clients_file",
            .allowed_file = conf->curve_allowed_clients_file,
            .what = "shard",
            .refused = srv->m.errors[SPARROW__ERROR_CODE__ERROR_UNAUTHORIZED],
        };
        srv->curve = spw_curve_server_new(srv->zctx, &cc, errstr, errstr_size);
        if (!srv->curve)
            goto out_destroy;
    }
    srv->sock = zmq_socket(srv->zctx, ZMQ_ROUTER);
    if (!srv->sock) {
        snprintf(errstr, errstr_size, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        goto out_destroy;
    }
    /* Frames far above the limit are cut off by ZeroMQ (the peer is disconnected); frames just
     * above it reach us and get a TOO_BIG reply. */
    int64_t maxmsg = (int64_t)srv->conf.max_frame * 2;
    int linger = 0;
    zmq_setsockopt(srv->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    zmq_setsockopt(srv->sock, ZMQ_LINGER, &linger, sizeof(linger));
    if (srv->curve) {
        if (spw_curve_server_apply(srv->curve, srv->sock, errstr, errstr_size) != SPW_OK)
            goto out_destroy;
        SPW_INFO("curve enabled", "server_public_key=%s allowed_clients=%zu",
                 spw_curve_server_public_key(srv->curve), spw_curve_server_allowed(srv->curve));
    }
    if (zmq_bind(srv->sock, conf->listen) != 0) {
        snprintf(errstr, errstr_size, "bind %s: %s", conf->listen, zmq_strerror(zmq_errno()));
        goto out_destroy;
    }
    size_t ep_len = sizeof(srv->endpoint);
    if (zmq_getsockopt(srv->sock, ZMQ_LAST_ENDPOINT, srv->endpoint, &ep_len) != 0)
        snprintf(srv->endpoint, sizeof(srv->endpoint), "%s", conf->listen);
    metrics_sync(srv);
    set_ready(srv, true, NULL);
    char dim_text[48];
    if (srv->dim_pending)
        snprintf(dim_text, sizeof(dim_text), "auto (from the first client)");
    else
        snprintf(dim_text, sizeof(dim_text), "%u", srv->conf.store.dim);
    SPW_INFO("pserver listening",
             "endpoint=%s shard=%u shards=%u dim=%s optimizer=%s epoch=%" PRIu64, srv->endpoint,
             conf->store.shard, srv->conf.shards, dim_text,
             spw_ps_optimizer_name(conf->store.optim.kind), srv->epoch);
    return srv;

out_destroy:
    spw_ps_server_destroy(srv);
    return NULL;
}

/* What needs the row dim (srv->conf.store.dim, set): the two-phase table, the publisher's row
 * buffer, the store (and, with restore_state_now, the state of the checkpoint restored at start).
 * At start, or once pserver.dim=auto learnt the dim (a first client, a restore). */
static spw_err_t open_model(spw_ps_server_t *srv, bool restore_state_now, char *errstr,
                            size_t errstr_size)
{
    uint32_t dim = srv->conf.store.dim;
    srv->steps = spw_ps__steps_new(dim, srv->conf.steps_max_bytes ? srv->conf.steps_max_bytes
                                                                  : (size_t)1 << 30);
    if (!srv->steps ||
        (srv->pub && spw_ps__publisher_set_dim(srv->pub, dim, srv->conf.store.optim.kind))) {
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    struct spw_ps_store_conf sc = srv->conf.store;
    sc.db_path = srv->db_path;
    srv->store = spw_ps_store_open(&sc, errstr, errstr_size);
    if (!srv->store)
        return SPW_ERR_STORE;
    spw_ps_store_set_now(srv->store, (uint32_t)(spw_time_wall_ms() / 1000));
    if (restore_state_now)
        restore_state(srv, srv->epoch);
    return SPW_OK;
}

const char *spw_ps_server_endpoint(const spw_ps_server_t *server)
{
    return server->endpoint;
}

static void housekeeping(spw_ps_server_t *srv)
{
    if (!srv->store)
        return; /* pserver.dim=auto, no dim yet: nothing to keep */
    spw_ps_store_set_now(srv->store, (uint32_t)(spw_time_wall_ms() / 1000));
    if (srv->conf.store.ttl_s > 0) {
        size_t n = 0;
        spw_err_t err = spw_ps_store_expire(
            srv->store, srv->conf.expire_batch ? srv->conf.expire_batch : 10000, &n);
        if (err)
            SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 10000, "ttl sweep failed", "err=\"%s\"",
                                spw_err_str(err));
    }
    if (srv->disk_full && spw_time_mono_ms() - srv->disk_checked_ms >= DISK_RECHECK_MS) {
        srv->disk_checked_ms = spw_time_mono_ms();
        struct statvfs vfs;
        uint64_t need = srv->need_bytes > DISK_FREE_MIN ? srv->need_bytes : DISK_FREE_MIN;
        if (statvfs(srv->ckpt_dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize >= need) {
            srv->disk_full = false;
            if (srv->m.disk_full)
                spw_gauge_set(srv->m.disk_full, 0.0);
            set_ready(srv, true, NULL);
            SPW_INFO("disk space is back", "dir=%s free=%llu", srv->ckpt_dir,
                     (unsigned long long)vfs.f_bavail * vfs.f_frsize);
        }
    }
    if (srv->pub)
        spw_ps__publisher_tick(srv->pub, srv->store, srv->epoch);
    metrics_sync(srv);
}

spw_err_t spw_ps_server_run(spw_ps_server_t *srv)
{
    uint64_t next_housekeeping = spw_time_mono_ms() + POLL_MS;
    while (!spw_signal_stop_requested()) {
        zmq_pollitem_t items[2] = {
            {srv->sock, 0, ZMQ_POLLIN, 0},
            {srv->curve ? spw_curve_server_zap_socket(srv->curve) : NULL, 0, ZMQ_POLLIN, 0}};
        int rc = zmq_poll(items, srv->curve ? 2 : 1, POLL_MS);
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            SPW_ERROR("zmq_poll failed", "err=\"%s\"", zmq_strerror(zmq_errno()));
            return SPW_ERR_RPC;
        }
        if (srv->curve && (items[1].revents & ZMQ_POLLIN))
            spw_curve_server_handle(srv->curve);
        if (items[0].revents & ZMQ_POLLIN) {
            /* Drain a bounded burst before looking at the clock again. */
            for (int i = 0; i < 256; i++) {
                int events = 0;
                size_t elen = sizeof(events);
                if (zmq_getsockopt(srv->sock, ZMQ_EVENTS, &events, &elen) != 0 ||
                    !(events & ZMQ_POLLIN))
                    break;
                serve_one(srv);
            }
        }
        if (srv->fatal)
            return srv->fatal;
        uint64_t now = spw_time_mono_ms();
        if (now >= next_housekeeping) {
            housekeeping(srv);
            next_housekeeping = now + POLL_MS;
        }
    }
    SPW_INFO("pserver stopping", "endpoint=%s", srv->endpoint);
    return SPW_OK;
}

void spw_ps_server_destroy(spw_ps_server_t *srv)
{
    if (!srv)
        return;
    if (srv->conf.http)
        spw_http_set_ready(srv->conf.http, false, "stopping");
    if (srv->sock)
        zmq_close(srv->sock);
    spw_curve_server_destroy(srv->curve);
    if (srv->zctx)
        zmq_ctx_term(srv->zctx);
    spw_ps__publisher_destroy(srv->pub, srv->store, srv->epoch); /* final publish and flush */
    /* With pserver.restore the next start installs a checkpoint over the live database, so its
     * dirty rows need not be written (with the cold file, possibly every row changed since the
     * last checkpoint: seconds to minutes at SIGTERM). */
    if (srv->conf.restore)
        spw_ps_store_discard(srv->store);
    else
        spw_ps_store_close(srv->store);
    spw_arena_destroy(srv->arena);
    if (srv->own_metrics)
        spw_metrics_destroy(srv->metrics);
    free(srv->dedup.e);
    spw_ps__steps_destroy(srv->steps);
    free(srv->data_dir);
    free(srv->ckpt_dir);
    free(srv->db_path);
    free(srv);
}
