/* `sparrow serve`: checkpoint bootstrap, the model-update tail, and the HTTP predict API. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/fmt.h"
#include "sparrow/http.h"
#include "sparrow/kafka.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/hash.h"
#include "sparrow/serve.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/trainer.h"
#include "sparrow/wire.h"

#define MAX_PARTITIONS   1024
#define MAX_UPDATE_BYTES (1u << 20) /* one ModelUpdate: key + 4096 floats and change */
#define POLL_MS          100
#define WATERMARK_MS     5000 /* per query of the partitions' high watermarks */
#define WATERMARK_RETRY  1000 /* between failed queries */

/* Per-request scratch, reused through a free list so that requests do not allocate in steady
 * state. A context is owned by one request at a time. */
struct req_ctx {
    struct req_ctx *next;
    spw_arena_t *arena;
    spw_batch_t *batch;
    float *rows, *preds;
    size_t rows_cap, preds_cap;
    spw_deep_t *deep; /* a deep model's workspace */
    char *out;
    size_t out_len, out_cap;
};

static void ctx_free(struct req_ctx *c);

/*
 * Threads: the run thread owns the consumer and is the table's one writer; libmicrohttpd's
 * threads read the table, the atomics and the context pool (under pool_lock). table is published
 * once (release) when the first row arrives without a checkpoint.
 */
struct spw_serve {
    struct spw_serve_conf conf; /* copied; its strings borrowed */
    spw_metrics_t *metrics;
    spw_http_t *http;
    spw_schema_t *schema;
    spw_kafka_props_t *props;
    spw_kafka_consumer_t *consumer;
    _Atomic(spw_serve_table_t *) table;
    spw_serve_dense_t *dense; /* a deep model's network weights (conf.model deep), else NULL */
    uint32_t dense_seen;      /* dense-block updates since the last snapshot (run thread) */
    uint64_t dense_swaps_seen, dense_mixed_seen; /* last values put into the metrics (run thread) */
    struct spw_serve_bootstrap boot;
    struct spw_serve_limits limits;
    size_t max_body;
    uint64_t max_rows;
    const char *topic;
    char group[256];
    bool strict;

    _Atomic uint64_t epoch;
    _Atomic int64_t offsets[MAX_PARTITIONS]; /* next offset applied, -1: none */
    _Atomic int n_partitions;
    bool assigned, ready;

    /* Readiness (run thread): the high watermark of every partition, read once after start;
     * ready once every partition's next offset reached its target. */
    spw_kafka_producer_t *wm_client; /* only for the watermark query; NULL once it succeeded */
    struct spw_kafka_partition *targets;
    size_t n_targets;
    bool targets_known;
    uint64_t next_query_ms;
    bool *part_assigned; /* MAX_PARTITIONS: assigned to this consumer (run thread) */

    pthread_mutex_t pool_lock;
    struct req_ctx *pool;

    spw_arena_t *upd_arena; /* run thread only */
    spw_counter_t *m_rows, *m_tombstones, *m_rejected, *m_dropped, *m_requests, *m_bad,
        *m_predictions, *m_not_found;
    spw_gauge_t *m_table_rows, *m_epoch, *m_ready;
    spw_counter_t *m_dense_swaps, *m_dense_mixed; /* deep models only (NULL otherwise) */
    spw_gauge_t *m_dense_version;
    spw_histogram_t *m_event_to_shard, *m_shard_to_visible, *m_event_to_visible, *m_latency;
};

/* ---- output buffer ---- */

static bool out_reserve(struct req_ctx *c, size_t extra)
{
    if (c->out_len + extra <= c->out_cap)
        return true;
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < c->out_len + extra)
        cap *= 2;
    char *p = realloc(c->out, cap);
    if (!p)
        return false;
    c->out = p;
    c->out_cap = cap;
    return true;
}

static bool outf(struct req_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool outf(struct req_ctx *c, const char *fmt, ...)
{
    for (int pass = 0; pass < 2; pass++) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = c->out_cap - c->out_len;
        int n = vsnprintf(c->out ? c->out + c->out_len : NULL, c->out ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return false;
        if ((size_t)n < room) {
            c->out_len += (size_t)n;
            return true;
        }
        if (!out_reserve(c, (size_t)n + 1))
            return false;
    }
    return false;
}

/* Appends n bytes of text. False when out of memory (nothing appended). */
static bool out_bytes(struct req_ctx *c, const char *text, size_t n)
{
    if (!out_reserve(c, n))
        return false;
    memcpy(c->out + c->out_len, text, n);
    c->out_len += n;
    return true;
}

/* Appends a string literal (its length known at compile time). */
#define OUT_LIT(c, lit) out_bytes((c), (lit), sizeof(lit) - 1)

/* Appends v in decimal without the cost of a format string (the predict answer carries an
 * epoch and an offset per partition). */
static bool out_i64(struct req_ctx *c, int64_t v)
{
    char buf[SPW_FMT_INT_MAX];
    return out_bytes(c, buf, spw_fmt_i64(buf, v));
}

static bool out_u64(struct req_ctx *c, uint64_t v)
{
    char buf[SPW_FMT_INT_MAX];
    return out_bytes(c, buf, spw_fmt_u64(buf, v));
}

/* Hands the buffer to the response (a malloc'd copy: the context keeps its own). */
static void respond(struct spw_http_response *resp, int status, struct req_ctx *c)
{
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = malloc(c->out_len ? c->out_len : 1);
    if (!resp->body) {
        resp->status = 503;
        resp->body_len = 0;
        return;
    }
    memcpy(resp->body, c->out, c->out_len);
    resp->body_len = c->out_len;
}

/* A JSON error body {"error": msg} (msg escaped). */
static void respond_error(struct spw_http_response *resp, int status, const char *msg)
{
    size_t n = strlen(msg);
    char *body = malloc(n * 6 + 32);
    if (!body) {
        resp->status = status;
        return;
    }
    size_t o = (size_t)sprintf(body, "{\"error\":\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)msg[i];
        if (ch == '"' || ch == '\\') {
            body[o++] = '\\';
            body[o++] = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) {
            o += (size_t)sprintf(body + o, "\\u%04x", ch);
        } else {
            body[o++] = (char)ch;
        }
    }
    o += (size_t)sprintf(body + o, "\"}\n");
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = body;
    resp->body_len = o;
}

#define PB_CONTENT_TYPE "application/x-protobuf"

/* Packs reply into a malloc'd body of resp (status, the protobuf content type); false when out of
 * memory (resp untouched). */
static bool respond_pb(struct spw_http_response *resp, int status,
                       const Sparrow__PredictReply *reply)
{
    size_t n = protobuf_c_message_get_packed_size(&reply->base);
    uint8_t *body = malloc(n ? n : 1);
    if (!body)
        return false;
    protobuf_c_message_pack(&reply->base, body);
    resp->status = status;
    resp->content_type = PB_CONTENT_TYPE;
    resp->body = (char *)body;
    resp->body_len = n;
    return true;
}

/* An error in the request's own format: a PredictReply holding only error for protobuf requests,
 * else the JSON {"error": msg}. */
static void respond_error_as(struct spw_http_response *resp, bool pb, int status, const char *msg)
{
    if (pb) {
        Sparrow__PredictReply reply = SPARROW__PREDICT_REPLY__INIT;
        reply.error = (char *)msg;
        if (respond_pb(resp, status, &reply))
            return;
    }
    respond_error(resp, status, msg);
}

/* ---- context pool ---- */

static struct req_ctx *ctx_get(spw_serve_t *s)
{
    pthread_mutex_lock(&s->pool_lock);
    struct req_ctx *c = s->pool;
    if (c)
        s->pool = c->next;
    pthread_mutex_unlock(&s->pool_lock);
    if (c)
        return c;
    c = calloc(1, sizeof(*c));
    char errstr[128];
    if (!c)
        return NULL;
    c->arena = spw_arena_new(1 << 16, s->max_body * 16 + (1u << 20));
    /* Sized for one example: a batch grows (and keeps) what a larger request needs, while a
     * key index sized for 64 examples would be 128 KiB of slots a single example's keys land
     * in cold (the pool holds a context per concurrent request). */
    c->batch = spw_batch_new(1, 64, errstr, sizeof(errstr));
    if (s->dense)
        c->deep = spw_deep_new(&s->conf.model, errstr, sizeof(errstr));
    if (!c->arena || !c->batch || (s->dense && !c->deep)) {
        ctx_free(c);
        return NULL;
    }
    return c;
}

static void ctx_put(spw_serve_t *s, struct req_ctx *c)
{
    pthread_mutex_lock(&s->pool_lock);
    c->next = s->pool;
    s->pool = c;
    pthread_mutex_unlock(&s->pool_lock);
}

static void ctx_free(struct req_ctx *c)
{
    spw_arena_destroy(c->arena);
    spw_batch_destroy(c->batch);
    spw_deep_destroy(c->deep);
    free(c->rows);
    free(c->preds);
    free(c->out);
    free(c);
}

static bool grow(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    float *q = realloc(*p, n * sizeof(float));
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

/* ---- HTTP handlers ---- */

/* ,"epoch":E,"update_offsets":{"P":O,...} (false when out of memory). */
static bool append_state(spw_serve_t *s, struct req_ctx *c)
{
    bool ok = OUT_LIT(c, ",\"epoch\":") &&
              out_u64(c, atomic_load_explicit(&s->epoch, memory_order_relaxed)) &&
              OUT_LIT(c, ",\"update_offsets\":{");
    int n = atomic_load_explicit(&s->n_partitions, memory_order_acquire);
    bool first = true;
    for (int p = 0; ok && p < n; p++) {
        int64_t off = atomic_load_explicit(&s->offsets[p], memory_order_relaxed);
        if (off < 0)
            continue;
        ok = (first || OUT_LIT(c, ",")) && OUT_LIT(c, "\"") && out_i64(c, p) && OUT_LIT(c, "\":") &&
             out_i64(c, off);
        first = false;
    }
    return ok && OUT_LIT(c, "}");
}

/* The protobuf answer: predictions, epoch and update offsets as the JSON one carries them, drawn
 * from the request's arena. False when out of memory. */
static bool respond_predict_pb(spw_serve_t *s, struct req_ctx *c, size_t n, bool deep,
                               uint32_t dense_version, struct spw_http_response *resp)
{
    Sparrow__PredictReply reply = SPARROW__PREDICT_REPLY__INIT;
    reply.n_predictions = n;
    reply.predictions = c->preds;
    reply.has_epoch = true;
    reply.epoch = atomic_load_explicit(&s->epoch, memory_order_relaxed);
    if (deep) {
        reply.has_dense_version = true;
        reply.dense_version = dense_version;
    }
    int np = atomic_load_explicit(&s->n_partitions, memory_order_acquire);
    Sparrow__PartitionOffset *offs = spw_arena_alloc(c->arena, ((size_t)np + 1) * sizeof(*offs));
    Sparrow__PartitionOffset **ptrs = spw_arena_alloc(c->arena, ((size_t)np + 1) * sizeof(*ptrs));
    if (!offs || !ptrs)
        return false;
    for (int p = 0; p < np; p++) {
        int64_t off = atomic_load_explicit(&s->offsets[p], memory_order_relaxed);
        if (off < 0)
            continue;
        Sparrow__PartitionOffset *o = &offs[reply.n_update_offsets];
        sparrow__partition_offset__init(o);
        o->has_partition = o->has_offset = true;
        o->partition = p;
        o->offset = off;
        ptrs[reply.n_update_offsets++] = o;
    }
    reply.update_offsets = ptrs;
    return respond_pb(resp, 200, &reply);
}

/* Ends a JSON answer whose text so far opens an array: v's n values, "]", the state fields and
 * "}", then answers 200; false when the text ran out of memory (answered 503 then). */
static bool respond_floats_and_state(spw_serve_t *s, struct req_ctx *c, const float *v, size_t n,
                                     struct spw_http_response *resp)
{
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++)
        ok = (i == 0 || OUT_LIT(c, ",")) && outf(c, "%.9g", (double)v[i]);
    if (!(ok && OUT_LIT(c, "]") && append_state(s, c) && OUT_LIT(c, "}\n"))) {
        respond_error(resp, 503, "out of memory");
        return false;
    }
    respond(resp, 200, c);
    return true;
}

static void on_predict(void *opaque, const char *method, const char *path, const char *content_type,
                       const char *body, size_t body_len, struct spw_http_response *resp)
{
    spw_serve_t *s = opaque;
    uint64_t t0 = spw_time_mono_ns();
    bool pb = spw_serve_content_is_pb(content_type);
    spw_counter_inc(s->m_requests);
    if (strcmp(path, "/v1/predict") != 0) {
        respond_error_as(resp, pb, 404, "no such resource");
        return;
    }
    if (strcmp(method, "POST") != 0) {
        respond_error_as(resp, pb, 405, "use POST");
        return;
    }
    struct req_ctx *c = ctx_get(s);
    if (!c) {
        respond_error_as(resp, pb, 503, "out of memory");
        return;
    }
    spw_arena_reset(c->arena);
    spw_batch_reset(c->batch);
    c->out_len = 0;
    char errstr[256];
    struct spw_serve_request req = {0};
    spw_err_t rc =
        pb ? spw_serve_request_parse_pb((const uint8_t *)body, body ? body_len : 0, &s->limits,
                                        c->arena, &req, errstr, sizeof(errstr))
           : spw_serve_request_parse(body ? body : "", body_len, &s->limits, s->schema, c->arena,
                                     &req, errstr, sizeof(errstr));
    if (rc == SPW_ERR_NOMEM) {
        respond_error_as(resp, pb, 413, "request too large to hold");
        goto out_put;
    }
    if (rc != SPW_OK) {
        spw_counter_inc(s->m_bad);
        respond_error_as(resp, pb, 400, errstr);
        goto out_put;
    }
    for (size_t i = 0; i < req.n; i++) {
        const struct spw_serve_example *ex = &req.examples[i];
        rc = spw_batch_add_fields(c->batch, 0.0f, NAN, 0, ex->n, ex->keys, ex->weights, ex->fields);
        if (rc != SPW_OK) {
            spw_counter_inc(s->m_bad);
            snprintf(errstr, sizeof(errstr), "example %zu: %s", i, spw_err_str(rc));
            respond_error_as(resp, pb, 400, errstr);
            goto out_put;
        }
    }
    spw_serve_table_t *table = atomic_load_explicit(&s->table, memory_order_acquire);
    struct spw_model model;
    uint32_t dim = table ? spw_serve_table_dim(table) : 1;
    const struct spw_serve_dense_snap *snap = NULL;
    if (s->dense) {
        model = s->conf.model;
        snap = spw_serve_dense_acquire(s->dense);
        if (!snap || !table || dim != model.dim) {
            spw_serve_dense_release(s->dense, snap);
            respond_error_as(resp, pb, 503,
                             !snap ? "the deep model's dense weights have not arrived yet"
                                   : "the rows are not the deep model's (their dim differs)");
            goto out_put;
        }
    } else if (dim == 1)
        spw_model_init(&model, SPW_MODEL_LR, 0);
    else if (spw_model_init(&model, SPW_MODEL_FM, dim - 1) != SPW_OK) {
        respond_error_as(resp, pb, 500, "the model's row width is not an FM's");
        goto out_put;
    }
    size_t nu = spw_batch_unique(c->batch);
    if (!grow(&c->rows, &c->rows_cap, nu * dim + 1) || !grow(&c->preds, &c->preds_cap, req.n)) {
        respond_error_as(resp, pb, 503, "out of memory");
        goto out_put;
    }
    if (table)
        spw_serve_table_get_many(table, spw_batch_keys(c->batch), nu, c->rows);
    else
        memset(c->rows, 0, nu * dim * sizeof(float));
    uint32_t dense_version = 0;
    if (snap) {
        rc = spw_deep_forward(c->deep, c->batch, c->rows, snap->w, c->preds, NULL);
        dense_version = snap->version;
        spw_serve_dense_release(s->dense, snap);
        if (rc != SPW_OK) {
            respond_error_as(resp, pb, 503, "out of memory");
            goto out_put;
        }
    } else {
        spw_cpu_forward(&model, c->batch, c->rows, c->preds);
    }
    if (pb) {
        if (!respond_predict_pb(s, c, req.n, s->dense != NULL, dense_version, resp)) {
            respond_error_as(resp, pb, 503, "out of memory");
            goto out_put;
        }
    } else {
        if (s->dense)
            outf(c, "{\"dense_version\":%u,\"predictions\":[", dense_version);
        else
            OUT_LIT(c, "{\"predictions\":[");
        if (!respond_floats_and_state(s, c, c->preds, req.n, resp))
            goto out_put;
    }
    spw_counter_add(s->m_predictions, req.n);
    spw_histogram_observe(s->m_latency, (double)(spw_time_mono_ns() - t0) * 1e-9);
out_put:
    ctx_put(s, c);
}

static void on_rows(void *opaque, const char *method, const char *path, const char *content_type,
                    const char *body, size_t body_len, struct spw_http_response *resp)
{
    (void)content_type;
    (void)body;
    (void)body_len;
    spw_serve_t *s = opaque;
    spw_counter_inc(s->m_requests);
    if (strcmp(method, "GET") != 0) {
        respond_error(resp, 405, "use GET");
        return;
    }
    const char *text = path + strlen("/v1/rows/");
    uint64_t key = 0;
    size_t len = strlen(text);
    bool ok =
        len > 0 && len <= 20 && strspn(text, "0123456789") == len && (len == 1 || text[0] != '0');
    for (size_t i = 0; ok && i < len; i++) {
        uint64_t d = (uint64_t)(text[i] - '0');
        ok = key <= (UINT64_MAX - d) / 10;
        key = key * 10 + d;
    }
    if (!ok) {
        spw_counter_inc(s->m_bad);
        respond_error(resp, 400, "the key must be a decimal integer in 0..18446744073709551615");
        return;
    }
    spw_serve_table_t *table = atomic_load_explicit(&s->table, memory_order_acquire);
    struct req_ctx *c = ctx_get(s);
    if (!c) {
        respond_error(resp, 503, "out of memory");
        return;
    }
    c->out_len = 0;
    uint32_t dim = table ? spw_serve_table_dim(table) : 1, version = 0;
    if (!grow(&c->rows, &c->rows_cap, dim)) {
        respond_error(resp, 503, "out of memory");
        goto out_put;
    }
    if (!table || spw_serve_table_get(table, key, c->rows, &version) != SPW_OK) {
        spw_counter_inc(s->m_not_found);
        respond_error(resp, 404, "no such key");
        goto out_put;
    }
    outf(c, "{\"key\":\"%" PRIu64 "\",\"version\":%u,\"weights\":[", key, version);
    respond_floats_and_state(s, c, c->rows, dim, resp);
out_put:
    ctx_put(s, c);
}

/* ---- the update tail ---- */

static void on_assign(void *opaque, struct spw_kafka_partition *parts, size_t n)
{
    spw_serve_t *s = opaque;
    for (size_t i = 0; i < n; i++) {
        /* Without a checkpoint offset the partition starts at its beginning (no group commit
         * exists for our private group): replaying absolute values is harmless. */
        for (size_t j = 0; j < s->boot.n_offsets; j++)
            if (strcmp(parts[i].topic, s->topic) == 0 &&
                s->boot.offsets[j].partition == parts[i].partition) {
                /* Never rewind what this process has applied already (a re-assignment). */
                int64_t have = parts[i].partition < MAX_PARTITIONS
                                   ? atomic_load(&s->offsets[parts[i].partition])
                                   : -1;
                parts[i].offset =
                    have > s->boot.offsets[j].offset ? have : s->boot.offsets[j].offset;
            }
        if (parts[i].offset == SPW_KAFKA_OFFSET_STORED && parts[i].partition >= 0 &&
            parts[i].partition < MAX_PARTITIONS) {
            int64_t have = atomic_load(&s->offsets[parts[i].partition]);
            if (have >= 0)
                parts[i].offset = have;
        }
        if (parts[i].partition >= 0 && parts[i].partition < MAX_PARTITIONS &&
            strcmp(parts[i].topic, s->topic) == 0)
            s->part_assigned[parts[i].partition] = true;
        SPW_INFO("update partition assigned", "partition=%" PRId32 " offset=%" PRId64,
                 parts[i].partition, parts[i].offset);
    }
    s->assigned = true;
}

static void observe_freshness(spw_serve_t *s, int64_t event_ms, int64_t applied_ms, int64_t now)
{
    if (event_ms > 0) {
        spw_histogram_observe(s->m_event_to_visible, (double)(now - event_ms) * 1e-3);
        if (applied_ms > 0)
            spw_histogram_observe(s->m_event_to_shard, (double)(applied_ms - event_ms) * 1e-3);
    }
    if (applied_ms > 0)
        spw_histogram_observe(s->m_shard_to_visible, (double)(now - applied_ms) * 1e-3);
}

/* The dense snapshots' counters into the metrics (run thread): swaps, refreshes that found the
 * blocks of two versions (retried at the next block), the version served. */
static void dense_metrics(spw_serve_t *s)
{
    uint64_t swaps = spw_serve_dense_swaps(s->dense), mixed = spw_serve_dense_mixed(s->dense);
    spw_counter_add(s->m_dense_swaps, swaps - s->dense_swaps_seen);
    spw_counter_add(s->m_dense_mixed, mixed - s->dense_mixed_seen);
    s->dense_swaps_seen = swaps;
    s->dense_mixed_seen = mixed;
    const struct spw_serve_dense_snap *snap = spw_serve_dense_acquire(s->dense);
    if (snap)
        spw_gauge_set(s->m_dense_version, snap->version);
    spw_serve_dense_release(s->dense, snap);
}

/* Applies row i of rows (a put or a delete) to *table, made from the row's width when NULL;
 * false when the row is refused (counted). */
static bool apply_row(spw_serve_t *s, spw_serve_table_t **table,
                      const struct spw_wire_update_rows *rows, size_t i)
{
    uint64_t key = rows->keys[i];
    if (rows->tombs[i]) {
        if (*table)
            spw_serve_table_delete(*table, key);
        spw_counter_inc(s->m_tombstones);
        return true;
    }
    uint32_t dim = rows->dim;
    if (dim == 0 || dim > SPW_SERVE_MAX_DIM) {
        spw_counter_inc(s->m_rejected);
        return false;
    }
    if (!*table) {
        char errstr[128];
        *table = spw_serve_table_new(dim, s->max_rows, errstr, sizeof(errstr));
        if (!*table) {
            spw_counter_inc(s->m_rejected);
            return false;
        }
        atomic_store_explicit(&s->table, *table, memory_order_release);
        SPW_INFO("lookup table created from the update stream", "dim=%" PRIu32, dim);
    }
    if (dim != spw_serve_table_dim(*table)) {
        spw_counter_inc(s->m_rejected);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "model update of another row width",
                            "dim=%" PRIu32 " table_dim=%u", dim, spw_serve_table_dim(*table));
        return false;
    }
    if (spw_serve_table_put(*table, key, rows->weights + (size_t)i * dim, rows->versions[i]) !=
        SPW_OK) {
        spw_counter_inc(s->m_dropped);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "lookup table full: update dropped",
                            "max_rows=%" PRIu64, s->max_rows);
        return false;
    }
    spw_counter_inc(s->m_rows);
    /* a deep model's blocks: a new snapshot once a whole set may have arrived */
    if (s->dense && spw_key_is_dense(key) && ++s->dense_seen >= s->conf.model.dense_blocks) {
        if (spw_serve_dense_refresh(s->dense, *table) != SPW_ERR_STATE)
            s->dense_seen = 0;
        dense_metrics(s);
    }
    return true;
}

/* Applies one consumed record, a single row or a batch's rows in order. Bad records and rows
 * are counted and skipped (they cannot be fixed by reading them again). */
static void apply_record(spw_serve_t *s, const struct spw_kafka_msg *msg)
{
    spw_serve_table_t *table = atomic_load_explicit(&s->table, memory_order_relaxed);
    if (!msg->value) {
        /* A Kafka tombstone keyed by the 8-byte big-endian feature key (compaction). */
        if (msg->key && msg->key_len == 8 && table) {
            uint64_t key = 0;
            for (int i = 0; i < 8; i++)
                key = (key << 8) | ((const uint8_t *)msg->key)[i];
            spw_serve_table_delete(table, key);
        }
        spw_counter_inc(s->m_tombstones);
        return;
    }
    spw_arena_reset(s->upd_arena);
    Sparrow__ModelUpdate *u = NULL;
    struct spw_wire_update_rows rows;
    if (spw_wire_unpack_model_update(msg->value, msg->len, MAX_UPDATE_BYTES, s->upd_arena, &u) !=
            SPW_OK ||
        spw_wire_model_update_rows(u, &rows) != SPW_OK) {
        spw_counter_inc(s->m_rejected);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "undecodable model update",
                            "partition=%" PRId32 " offset=%" PRId64, msg->partition, msg->offset);
        return;
    }
    bool applied = false;
    int64_t now = spw_time_wall_ms();
    for (size_t i = 0; i < rows.n; i++) {
        if (!apply_row(s, &table, &rows, i))
            continue;
        applied = true;
        observe_freshness(s, rows.event_ms[i], rows.applied_ms[i], now);
    }
    if (applied && u->has_epoch && u->epoch > atomic_load_explicit(&s->epoch, memory_order_relaxed))
        atomic_store_explicit(&s->epoch, u->epoch, memory_order_relaxed);
}

static void note_offset(spw_serve_t *s, int32_t partition, int64_t next)
{
    if (partition < 0 || partition >= MAX_PARTITIONS)
        return;
    atomic_store_explicit(&s->offsets[partition], next, memory_order_relaxed);
    if (partition >= atomic_load_explicit(&s->n_partitions, memory_order_relaxed))
        atomic_store_explicit(&s->n_partitions, partition + 1, memory_order_release);
}

/* Reads the high watermark of every partition of the topic once (retried until it succeeds):
 * the offsets "caught up" means reaching. Run thread. */
static void query_targets(spw_serve_t *s)
{
    uint64_t now = spw_time_mono_ms();
    if (now < s->next_query_ms)
        return;
    s->next_query_ms = now + WATERMARK_RETRY;
    char errstr[256];
    if (!s->wm_client) {
        struct spw_kafka_producer_opts po = {0};
        s->wm_client = spw_kafka_producer_new(s->props, &po, errstr, sizeof(errstr));
        if (!s->wm_client) {
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 10000, "cannot create the watermark client",
                                "error=\"%s\"", errstr);
            return;
        }
    }
    size_t n = 0;
    if (spw_kafka_producer_high_watermarks(s->wm_client, s->topic, s->targets, MAX_PARTITIONS, &n,
                                           WATERMARK_MS) != SPW_OK)
        return; /* logged; retried */
    s->n_targets = n;
    s->targets_known = true;
    spw_kafka_producer_destroy(s->wm_client, 0);
    s->wm_client = NULL;
    for (size_t i = 0; i < n; i++)
        SPW_INFO("catch-up target", "partition=%" PRId32 " high_watermark=%" PRId64,
                 s->targets[i].partition, s->targets[i].offset);
}

/* The next offset of partition p this replica has reached: the newest applied record's + 1, or
 * the checkpoint's offset when nothing was applied after it (-1: neither). */
static int64_t position_of(const spw_serve_t *s, int32_t p)
{
    int64_t have = p >= 0 && p < MAX_PARTITIONS ? atomic_load(&s->offsets[p]) : -1;
    for (size_t j = 0; j < s->boot.n_offsets; j++)
        if (s->boot.offsets[j].partition == p && s->boot.offsets[j].offset > have)
            have = s->boot.offsets[j].offset;
    return have;
}

/* Exact catch-up: once partitions are assigned, the position of every assigned partition
 * reached the high watermark read after start (a partition that was empty then needs nothing).
 * With the default private group every partition is assigned; with a shared serve.group only this
 * replica's share counts. */
static bool caught_up(const spw_serve_t *s)
{
    if (!s->targets_known || !s->assigned)
        return false;
    for (size_t i = 0; i < s->n_targets; i++) {
        int32_t p = s->targets[i].partition;
        if (p < 0 || p >= MAX_PARTITIONS || !s->part_assigned[p] || s->targets[i].offset <= 0)
            continue;
        if (position_of(s, p) < s->targets[i].offset)
            return false;
    }
    return true;
}

static void update_readiness(spw_serve_t *s)
{
    spw_serve_table_t *table = atomic_load_explicit(&s->table, memory_order_relaxed);
    if (table)
        spw_gauge_set(s->m_table_rows, (double)spw_serve_table_rows(table));
    spw_gauge_set(s->m_epoch, (double)atomic_load(&s->epoch));
    if (s->ready)
        return;
    if (!s->targets_known)
        query_targets(s);
    if (!caught_up(s))
        return;
    s->ready = true;
    spw_gauge_set(s->m_ready, 1);
    spw_http_set_ready(s->http, true, NULL);
    SPW_INFO("caught up: ready", "epoch=%" PRIu64 " rows=%" PRIu64 " partitions=%zu",
             atomic_load(&s->epoch), table ? spw_serve_table_rows(table) : 0, s->n_targets);
}

spw_err_t spw_serve_run(spw_serve_t *s)
{
    spw_err_t ret = SPW_OK;
    if (s->conf.offline) {
        while (!spw_signal_stop_requested()) {
            update_readiness(s); /* the gauges; ready already */
            spw_time_sleep_ms(POLL_MS);
        }
        return SPW_OK;
    }
    while (!spw_signal_stop_requested()) {
        struct spw_kafka_msg msg;
        spw_err_t rc = spw_kafka_consumer_poll(s->consumer, POLL_MS, &msg);
        if (rc == SPW_OK) {
            if (strcmp(msg.topic, s->topic) == 0) {
                apply_record(s, &msg);
                note_offset(s, msg.partition, msg.offset + 1);
            }
            spw_kafka_msg_release(&msg);
        } else if (rc == SPW_ERR_CORRUPT) {
            SPW_ERROR("model updates lost to retention", "strict=%d", (int)s->strict);
            if (s->strict) {
                ret = SPW_ERR_CORRUPT;
                break;
            }
        } else if (rc != SPW_ERR_TIMEOUT) {
            SPW_ERROR("update consumer failed", "error=\"%s\"", spw_err_str(rc));
            ret = rc;
            break;
        }
        update_readiness(s);
    }
    return ret;
}

/* ---- lifecycle ---- */

static const double FRESH_BOUNDS[] = {0.05, 0.1, 0.25, 0.5, 0.75, 1,  1.25, 1.5,
                                      2,    3,   5,    10,  30,   60, 300};
static const double LAT_BOUNDS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                    0.01,   0.025,   0.05,   0.1,   0.25,   1};

static bool register_metrics(spw_serve_t *s)
{
    spw_metrics_t *m = s->metrics;
    const size_t nf = sizeof(FRESH_BOUNDS) / sizeof(FRESH_BOUNDS[0]);
    s->m_rows = spw_metrics_counter_new(m, "sparrow_serve_updates_total",
                                        "Model updates applied, by kind.", "kind=\"row\"");
    s->m_tombstones = spw_metrics_counter_new(
        m, "sparrow_serve_updates_total", "Model updates applied, by kind.", "kind=\"tombstone\"");
    s->m_rejected =
        spw_metrics_counter_new(m, "sparrow_serve_updates_rejected_total",
                                "Model updates refused (undecodable, bad width).", NULL);
    s->m_dropped = spw_metrics_counter_new(m, "sparrow_serve_updates_dropped_total",
                                           "Rows not stored because the table was full.", NULL);
    s->m_requests =
        spw_metrics_counter_new(m, "sparrow_serve_requests_total", "API requests received.", NULL);
    s->m_bad = spw_metrics_counter_new(m, "sparrow_serve_bad_requests_total",
                                       "API requests refused as malformed (400).", NULL);
    s->m_not_found = spw_metrics_counter_new(m, "sparrow_serve_rows_not_found_total",
                                             "Row lookups of absent keys (404).", NULL);
    s->m_predictions =
        spw_metrics_counter_new(m, "sparrow_serve_predictions_total", "Examples scored.", NULL);
    s->m_table_rows = spw_metrics_gauge_new(m, "sparrow_serve_rows", "Rows in the table.", NULL);
    s->m_epoch = spw_metrics_gauge_new(m, "sparrow_serve_model_epoch",
                                       "Newest model epoch seen (checkpoint or update).", NULL);
    s->m_ready = spw_metrics_gauge_new(m, "sparrow_serve_ready",
                                       "1 once the update stream was caught up.", NULL);
    s->m_event_to_shard = spw_metrics_histogram_new(
        m, "sparrow_serve_freshness_seconds",
        "Freshness of applied updates: event time -> applied on a shard -> visible in serving.",
        "stage=\"event_to_shard\"", FRESH_BOUNDS, nf);
    s->m_shard_to_visible = spw_metrics_histogram_new(
        m, "sparrow_serve_freshness_seconds",
        "Freshness of applied updates: event time -> applied on a shard -> visible in serving.",
        "stage=\"shard_to_visible\"", FRESH_BOUNDS, nf);
    s->m_event_to_visible = spw_metrics_histogram_new(
        m, "sparrow_serve_freshness_seconds",
        "Freshness of applied updates: event time -> applied on a shard -> visible in serving.",
        "stage=\"event_to_visible\"", FRESH_BOUNDS, nf);
    s->m_latency = spw_metrics_histogram_new(
        m, "sparrow_serve_predict_seconds", "Time to answer a valid predict request.", NULL,
        LAT_BOUNDS, sizeof(LAT_BOUNDS) / sizeof(LAT_BOUNDS[0]));
    s->m_dense_swaps = spw_metrics_counter_new(
        m, "sparrow_serve_dense_swaps_total",
        "Deep models: dense-weight snapshots swapped in (a complete set of one version).", NULL);
    s->m_dense_mixed = spw_metrics_counter_new(
        m, "sparrow_serve_dense_incomplete_total",
        "Deep models: snapshots not taken because the blocks held two versions (the previous "
        "snapshot stays; retried at the next block).",
        NULL);
    s->m_dense_version =
        spw_metrics_gauge_new(m, "sparrow_serve_dense_version",
                              "Deep models: version of the dense weights served.", NULL);
    return s->m_rows && s->m_tombstones && s->m_rejected && s->m_dropped && s->m_requests &&
           s->m_bad && s->m_not_found && s->m_predictions && s->m_table_rows && s->m_epoch &&
           s->m_ready && s->m_dense_swaps && s->m_dense_mixed && s->m_dense_version &&
           s->m_event_to_shard && s->m_shard_to_visible && s->m_event_to_visible && s->m_latency;
}

/* Reads the bearer token from path (one line; surrounding whitespace ignored) into the HTTP layer.
 */
static spw_err_t load_bearer_token(spw_http_t *http, const char *path, char *errstr,
                                   size_t errstr_size)
{
    char token[SPW_HTTP_MAX_TOKEN + 2];
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(errstr, errstr_size, "serve.auth.token_file: %s: %s", path, strerror(errno));
        return SPW_ERR_IO;
    }
    size_t n = fread(token, 1, sizeof(token) - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    token[n] = '\0';
    while (n > 0 && (token[n - 1] == '\n' || token[n - 1] == '\r' || token[n - 1] == ' '))
        token[--n] = '\0';
    spw_err_t err = n == 0 ? SPW_ERR_INVALID
                    : more ? SPW_ERR_TOO_BIG
                           : spw_http_set_bearer_token(http, token);
    if (err != SPW_OK)
        snprintf(errstr, errstr_size,
                 "serve.auth.token_file: %s: the token must be one line of 1..%d printable "
                 "characters without spaces",
                 path, SPW_HTTP_MAX_TOKEN);
    return err;
}

/* The update consumer of a server that tails the stream (conf->kafka_config's kafka.* and the
 * topic): false with errstr on failure. */
static bool start_consumer(spw_serve_t *s, const struct spw_serve_conf *conf, char *errstr,
                           size_t errstr_size)
{
    s->props = spw_kafka_props_new();
    if (!s->props || spw_kafka_props_from_config(s->props, conf->kafka_config) != SPW_OK) {
        snprintf(errstr, errstr_size, "out of memory");
        return false;
    }
    if (conf->group)
        snprintf(s->group, sizeof(s->group), "%s", conf->group);
    else
        snprintf(s->group, sizeof(s->group), "sparrow-serve-%ld-%" PRId64, (long)getpid(),
                 spw_time_wall_ms());
    const char *topics[1] = {s->topic};
    struct spw_kafka_consumer_opts copts = {
        .group_id = s->group,
        .topics = topics,
        .n_topics = 1,
        .start_latest = false,
        .lost = s->strict ? SPW_KAFKA_LOST_FAIL : SPW_KAFKA_LOST_EARLIEST,
        .on_assign = on_assign,
        .opaque = s,
        .metrics = s->metrics,
    };
    s->consumer = spw_kafka_consumer_new(s->props, &copts, errstr, errstr_size);
    return s->consumer != NULL;
}

/* serve.checkpoint.dir must exist (a typo would otherwise serve 0.5 to every request) unless an
 * empty start is allowed; the hint names the usual mistake of giving checkpoints/ itself. */
static spw_err_t check_checkpoint_dir(const struct spw_serve_conf *conf, char *errstr,
                                      size_t errstr_size)
{
    struct stat st;
    const char *dir = conf->checkpoint_dir;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        char latest[PATH_MAX];
        if (snprintf(latest, sizeof(latest), "%s/%s", dir, SPW_CKPT_LATEST) < (int)sizeof(latest) &&
            access(latest, F_OK) == 0 && spw_coord_latest_read(dir, &(uint64_t){0}) != SPW_OK) {
            snprintf(errstr, errstr_size,
                     "serve.checkpoint.dir=%s is a %s/ directory: give the directory above it", dir,
                     SPW_CKPT_DIR);
            return SPW_ERR_INVALID;
        }
        return SPW_OK;
    }
    int e = errno;
    if (conf->allow_empty) {
        SPW_WARN("checkpoint directory missing: starting empty (serve.allow_empty)", "dir=%s", dir);
        return SPW_OK;
    }
    snprintf(errstr, errstr_size, "serve.checkpoint.dir=%s: %s", dir,
             stat(dir, &st) == 0 ? "not a directory" : strerror(e));
    return SPW_ERR_NOT_FOUND;
}

spw_serve_t *spw_serve_new(const struct spw_serve_conf *conf, char *errstr, size_t errstr_size)
{
    spw_serve_t *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->pool_lock, NULL);
    s->conf = *conf;
    s->topic = conf->topic;
    s->max_body = conf->max_body;
    s->max_rows = conf->max_rows;
    s->limits = conf->limits;
    s->strict = conf->strict;
    atomic_init(&s->table, NULL);
    atomic_init(&s->epoch, 0);
    atomic_init(&s->n_partitions, 0);
    for (int i = 0; i < MAX_PARTITIONS; i++)
        atomic_init(&s->offsets[i], -1);
    s->metrics = spw_metrics_new();
    s->upd_arena = spw_arena_new(1 << 16, 4 * (size_t)MAX_UPDATE_BYTES);
    s->targets = calloc(MAX_PARTITIONS, sizeof(*s->targets));
    s->part_assigned = calloc(MAX_PARTITIONS, sizeof(*s->part_assigned));
    if (!s->metrics || !s->upd_arena || !s->targets || !s->part_assigned || !register_metrics(s)) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_destroy;
    }
    if (spw_model_is_deep(&conf->model) &&
        !(s->dense = spw_serve_dense_new(&conf->model, errstr, errstr_size)))
        goto out_destroy;
    if (conf->schema) {
        s->schema = spw_schema_load(conf->schema, conf->schema_strict, errstr, errstr_size);
        if (!s->schema)
            goto out_destroy;
    }

    /* Bootstrap before HTTP starts, so that the first answer already reflects the checkpoint. */
    if (conf->checkpoint_dir) {
        if (check_checkpoint_dir(conf, errstr, errstr_size) != SPW_OK)
            goto out_destroy;
        spw_serve_table_t *table = NULL;
        if (spw_serve_bootstrap_load(conf->checkpoint_dir, conf->log_dir, s->topic, s->max_rows,
                                     &table, &s->boot, errstr, errstr_size) != SPW_OK)
            goto out_destroy;
        if (s->boot.epoch == 0 && !conf->allow_empty) {
            snprintf(errstr, errstr_size,
                     "serve.checkpoint.dir=%s holds no checkpoint (no %s/LATEST): train into it "
                     "first (sparrow trainer --checkpoint-dir, or a coordinator), or set "
                     "serve.allow_empty=true to start empty",
                     conf->checkpoint_dir, SPW_CKPT_DIR);
            goto out_destroy;
        }
        if (s->boot.epoch == 0)
            SPW_WARN("no checkpoint: serving an empty model (serve.allow_empty)", "dir=%s",
                     conf->checkpoint_dir);
        atomic_store(&s->table, table);
        atomic_store(&s->epoch, s->boot.epoch);
        float w0[SPW_SERVE_MAX_DIM];
        if (!s->dense && table &&
            spw_serve_table_get(table, spw_dense_block_key(0), w0, NULL) == SPW_OK) {
            snprintf(errstr, errstr_size,
                     "the checkpoint holds a deep model's dense blocks: give its model "
                     "(--set trainer.model=deepfm|dcnv2 and the trainer's trainer.fields, "
                     "trainer.mlp, ...)");
            goto out_destroy;
        }
        if (s->dense && table && spw_serve_table_dim(table) != conf->model.dim) {
            snprintf(errstr, errstr_size,
                     "the checkpoint's rows have %u floats, the deep model's (trainer.* "
                     "settings) %u",
                     spw_serve_table_dim(table), conf->model.dim);
            goto out_destroy;
        }
        if (s->dense && table &&
            spw_serve_table_get(table, spw_dense_block_key(conf->model.dense_blocks), w0, NULL) ==
                SPW_OK) {
            snprintf(errstr, errstr_size,
                     "the checkpoint holds more dense blocks than the deep model's %u (trained "
                     "with another network? check trainer.model / trainer.mlp / trainer.fields / "
                     "trainer.cross.layers)",
                     conf->model.dense_blocks);
            goto out_destroy;
        }
        if (s->dense && table && spw_serve_dense_refresh(s->dense, table) == SPW_ERR_STATE) {
            snprintf(errstr, errstr_size,
                     "the checkpoint holds no complete set of the deep model's dense blocks "
                     "(trained with another model? check trainer.model / trainer.mlp / "
                     "trainer.fields)");
            goto out_destroy;
        }
        if (s->dense)
            dense_metrics(s);
        for (size_t i = 0; i < s->boot.n_offsets; i++)
            SPW_INFO("checkpoint update offset", "partition=%" PRId32 " offset=%" PRId64,
                     s->boot.offsets[i].partition, s->boot.offsets[i].offset);
    }

    const struct spw_http_limits *limits =
        conf->http_limits.max_connections ? &conf->http_limits : NULL;
    s->http = spw_http_start_limits(conf->http_addr, conf->http_port, s->metrics, s->max_body,
                                    limits, errstr, errstr_size);
    if (!s->http)
        goto out_destroy;
    SPW_INFO("http endpoint", "port=%u max_connections=%zu header_timeout_ms=%u",
             (unsigned)spw_http_port(s->http),
             limits ? limits->max_connections : (size_t)SPW_HTTP_DEFAULT_MAX_CONNECTIONS,
             limits ? (unsigned)limits->header_timeout_ms : SPW_HTTP_DEFAULT_HEADER_TIMEOUT_MS);
    spw_http_set_ready(s->http, false, "catching up with the model-update stream");
    if (conf->auth_token_file &&
        load_bearer_token(s->http, conf->auth_token_file, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    if (spw_http_route_add(s->http, "/v1/predict", on_predict, s) != SPW_OK ||
        spw_http_route_add(s->http, "/v1/rows/", on_rows, s) != SPW_OK) {
        snprintf(errstr, errstr_size, "cannot add HTTP routes");
        goto out_destroy;
    }

    if (conf->offline) {
        /* nothing to catch up with: the checkpoint loaded is the model */
        s->ready = true;
        spw_gauge_set(s->m_ready, 1);
        spw_http_set_ready(s->http, true, NULL);
        SPW_INFO("offline: serving the checkpoint only, ready",
                 "epoch=%" PRIu64 " rows=%" PRIu64 " reason=%s", s->boot.epoch, s->boot.rows,
                 conf->offline_implied ? "no_kafka.bootstrap.servers" : "serve.offline");
    } else if (!start_consumer(s, conf, errstr, errstr_size)) {
        goto out_destroy;
    }
    const char *port_file = conf->http_port_file;
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%u\n", spw_http_port(s->http)) < 0 || fclose(f) != 0 ||
            rename(tmp, port_file) != 0) {
            snprintf(errstr, errstr_size, "cannot write %s", port_file);
            goto out_destroy;
        }
    }
    SPW_INFO("serving", "port=%u topic=%s group=%s epoch=%" PRIu64, spw_http_port(s->http),
             s->topic, s->group, s->boot.epoch);
    return s;
out_destroy:
    spw_serve_destroy(s);
    return NULL;
}

void spw_serve_destroy(spw_serve_t *s)
{
    if (!s)
        return;
    spw_http_stop(s->http); /* no handler runs after this */
    spw_kafka_consumer_destroy(s->consumer);
    spw_kafka_producer_destroy(s->wm_client, 0);
    spw_kafka_props_destroy(s->props);
    spw_serve_table_destroy(atomic_load(&s->table));
    spw_serve_dense_destroy(s->dense);
    spw_serve_bootstrap_fini(&s->boot);
    spw_schema_destroy(s->schema);
    while (s->pool) {
        struct req_ctx *c = s->pool;
        s->pool = c->next;
        ctx_free(c);
    }
    spw_arena_destroy(s->upd_arena);
    free(s->targets);
    free(s->part_assigned);
    spw_metrics_destroy(s->metrics);
    pthread_mutex_destroy(&s->pool_lock);
    free(s);
}
