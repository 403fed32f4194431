/* trainer: the parameter-server client: lifecycle, pulls, the push window, waits, the
 * in-process transport, metrics (ZeroMQ specifics live in ps_client_zmq.c). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define WAIT_SLICE_MS 100 /* waits look at the stop flag at least this often */
#define FRAME_SLACK   256 /* bytes of a request beyond its blocks (header fields, tags) */

/* ---- small helpers ---- */

void spw_psc__set_sticky(spw_ps_client_t *c, spw_err_t err, const char *fmt, ...)
{
    if (c->sticky)
        return;
    c->sticky = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
    va_end(ap);
    SPW_ERROR("parameter-server client failed", "err=\"%s\" msg=\"%s\"", spw_err_str(err),
              c->errstr);
}

uint64_t spw_psc__request_id(spw_ps_client_t *c, bool push, uint32_t idx)
{
    return (++c->next_req << 16) | (push ? SPW_PSC_ID_PUSH : 0) | idx;
}

static spw_err_t grow(void **p, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap)
        return SPW_OK;
    size_t c = *cap ? *cap : 256;
    while (c < want)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return SPW_ERR_NOMEM;
    *p = q;
    *cap = c;
    return SPW_OK;
}

static void update_window_gauge(spw_ps_client_t *c)
{
    c->stats.window = c->outstanding;
    if (c->outstanding > c->stats.window_max)
        c->stats.window_max = c->outstanding;
    if (c->m.window)
        spw_gauge_set(c->m.window, (double)c->outstanding);
}

/* ---- metrics ---- */

static void metrics_register(spw_ps_client_t *c, spw_metrics_t *r)
{
    struct spw_psc__metrics *m = &c->m;
    const char *bytes = "sparrow_trainer_ps_bytes_total";
    const char *bytes_help = "Bytes pushed (requests, resends included) and pulled (replies).";
    m->bytes_push = spw_metrics_counter_new(r, bytes, bytes_help, "op=\"push\"");
    m->bytes_pull = spw_metrics_counter_new(r, bytes, bytes_help, "op=\"pull\"");
    const char *rows = "sparrow_trainer_ps_rows_total";
    const char *rows_help = "Rows pushed and pulled (unique per shard request).";
    m->rows_push = spw_metrics_counter_new(r, rows, rows_help, "op=\"push\"");
    m->rows_pull = spw_metrics_counter_new(r, rows, rows_help, "op=\"pull\"");
    m->resends = spw_metrics_counter_new(r, "sparrow_trainer_ps_resends_total",
                                         "Requests sent again after a timeout.", NULL);
    m->reconnects = spw_metrics_counter_new(r, "sparrow_trainer_ps_reconnects_total",
                                            "Shard connections closed and re-established.", NULL);
    m->timeouts =
        spw_metrics_counter_new(r, "sparrow_trainer_ps_timeouts_total",
                                "Times a shard left a request unanswered too long.", NULL);
    m->duplicates =
        spw_metrics_counter_new(r, "sparrow_trainer_ps_duplicate_acks_total",
                                "Resent pushes the shard acknowledged as already applied.", NULL);
    m->bad_replies = spw_metrics_counter_new(r, "sparrow_trainer_ps_bad_replies_total",
                                             "Replies dropped as undecodable.", NULL);
    const char *na = "sparrow_trainer_ps_push_rows_not_applied_total";
    const char *na_help = "Pushed rows a shard acknowledged without applying, by reason.";
    m->not_applied_nonfinite = spw_metrics_counter_new(r, na, na_help, "reason=\"nonfinite\"");
    m->not_applied_stale = spw_metrics_counter_new(r, na, na_help, "reason=\"stale\"");
    static const char *const reasons[8] = {"none",     "malformed",   "version",
                                           "too_big",  "wrong_shard", "unavailable",
                                           "internal", "unauthorized"};
    char labels[64];
    for (int i = 1; i < 8; i++) {
        snprintf(labels, sizeof(labels), "reason=\"%s\"", reasons[i]);
        m->errors[i] =
            spw_metrics_counter_new(r, "sparrow_trainer_ps_error_replies_total",
                                    "Shard replies carrying an error, by reason.", labels);
    }
    m->window = spw_metrics_gauge_new(r, "sparrow_trainer_ps_push_window",
                                      "Pushes sent and not yet acknowledged.", NULL);
    static const double bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
    size_t nb = sizeof(bounds) / sizeof(bounds[0]);
    m->pull_latency = spw_metrics_histogram_new(
        r, "sparrow_trainer_ps_pull_latency_seconds",
        "Time from the start of a pull until its last reply was read.", NULL, bounds, nb);
    m->pull_wait = spw_metrics_histogram_new(
        r, "sparrow_trainer_ps_pull_wait_seconds",
        "Time the trainer blocked waiting for a pull (compute did not hide it).", NULL, bounds, nb);
    m->push_latency = spw_metrics_histogram_new(
        r, "sparrow_trainer_ps_push_latency_seconds",
        "Time from the start of a push until every shard acknowledged it (resends included).", NULL,
        bounds, nb);
}

/* ---- lifecycle ---- */

static spw_err_t add_endpoint(void *opaque, uint32_t i, const char *s, size_t len)
{
    spw_ps_client_t *c = opaque;
    c->shards[i].endpoint = strndup(s, len);
    return c->shards[i].endpoint ? SPW_OK : SPW_ERR_NOMEM;
}

static spw_err_t alloc_parts(struct spw_psc__part **parts, uint32_t n)
{
    *parts = calloc(n, sizeof(**parts));
    return *parts ? SPW_OK : SPW_ERR_NOMEM;
}

static void free_parts(struct spw_psc__part *parts, uint32_t n)
{
    if (!parts)
        return;
    for (uint32_t s = 0; s < n; s++) {
        free(parts[s].blocks.data);
        free(parts[s].echo_idx);
        free(parts[s].echo_dst);
    }
    free(parts);
}

spw_ps_client_t *spw_ps_client_new(const struct spw_ps_client_conf *conf, char *errstr,
                                   size_t errstr_size)
{
    if (conf->dim == 0 || conf->dim > SPW_WIRE_MAX_DIM) {
        snprintf(errstr, errstr_size, "row dim %u outside 1..%u", conf->dim, SPW_WIRE_MAX_DIM);
        return NULL;
    }
    if (conf->push_window == 0 || conf->push_window > SPW_PS_CLIENT_MAX_WINDOW) {
        snprintf(errstr, errstr_size, "push window %u outside 1..%u", conf->push_window,
                 SPW_PS_CLIENT_MAX_WINDOW);
        return NULL;
    }
    if (conf->push_timeout_ms == 0 || conf->pull_timeout_ms == 0 || conf->max_frame < 1024 ||
        conf->max_frame > SPW_WIRE_HARD_MAX_FRAME / 8) {
        snprintf(errstr, errstr_size, "timeouts must be >= 1 ms and max_frame in 1024..%u",
                 SPW_WIRE_HARD_MAX_FRAME / 8);
        return NULL;
    }
    bool curve_server = conf->curve_server_key_file && conf->curve_server_key_file[0];
    bool curve_client = conf->curve_client_key_file && conf->curve_client_key_file[0];
    if (curve_server != curve_client) {
        snprintf(errstr, errstr_size, "CURVE needs both the server key and the client key file");
        return NULL;
    }
    spw_ps_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    c->conf = *conf;
    c->conf.shards = NULL;
    c->conf.stores = NULL;
    c->conf.curve_server_key_file = c->conf.curve_client_key_file = NULL;
    c->conf.metrics = NULL;
    c->window = conf->push_window;
    c->next_seq = conf->first_seq ? conf->first_seq : 1;
    c->epoch = conf->epoch;
    c->max_reply = conf->max_frame * 5 + 4096;
    c->inproc = conf->stores != NULL;
    if (c->inproc) {
        if (conf->n_stores == 0 || conf->n_stores > SPW_PS_CLIENT_MAX_SHARDS) {
            snprintf(errstr, errstr_size, "in-process stores: %u outside 1..%u", conf->n_stores,
                     SPW_PS_CLIENT_MAX_SHARDS);
            goto out_destroy;
        }
        c->n_shards = conf->n_stores;
        c->stores = malloc(c->n_shards * sizeof(spw_ps_store_t *));
        if (!c->stores)
            goto out_nomem;
        memcpy(c->stores, conf->stores, c->n_shards * sizeof(spw_ps_store_t *));
    } else if (spw_psc__split_shards(conf->shards, &c->n_shards, NULL, NULL, errstr, errstr_size) !=
               SPW_OK) {
        goto out_destroy;
    }
    c->shards = calloc(c->n_shards, sizeof(*c->shards));
    if (!c->shards)
        goto out_nomem;
    if (spw_psc__sorter_init(&c->sorters[0], c->n_shards) != SPW_OK ||
        spw_psc__sorter_init(&c->sorters[1], c->n_shards) != SPW_OK)
        goto out_nomem;
    for (uint32_t i = 0; i < SPW_PS_CLIENT_MAX_PULLS; i++) {
        c->pulls[i].seg = calloc((size_t)c->n_shards + 1, sizeof(uint32_t));
        if (!c->pulls[i].seg || alloc_parts(&c->pulls[i].parts, c->n_shards) != SPW_OK)
            goto out_nomem;
    }
    c->ring = calloc(c->window, sizeof(*c->ring));
    if (!c->ring)
        goto out_nomem;
    for (uint32_t i = 0; i < c->window; i++)
        if (alloc_parts(&c->ring[i].parts, c->n_shards) != SPW_OK)
            goto out_nomem;
    if (conf->metrics)
        metrics_register(c, conf->metrics);
    if (c->inproc)
        return c;

    if (spw_psc__split_shards(conf->shards, &c->n_shards, add_endpoint, c, errstr, errstr_size))
        goto out_destroy;
    c->arena = spw_arena_new(1u << 20, 2 * c->max_reply + (1u << 20));
    if (!c->arena)
        goto out_nomem;
    if (spw_curve_client_load(&c->curve, "trainer.curve.server_key_file",
                              conf->curve_server_key_file, "trainer.curve.client_key_file",
                              conf->curve_client_key_file, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    if (spw_psc__zmq_open(c, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    SPW_INFO("parameter-server client connecting",
             "shards=%u first=%s dim=%u trainer_id=%u epoch=%" PRIu64 " window=%u curve=%d",
             c->n_shards, c->shards[0].endpoint, c->conf.dim, c->conf.trainer_id, c->epoch,
             c->window, (int)c->curve.enabled);
    return c;

out_nomem:
    snprintf(errstr, errstr_size, "out of memory");
out_destroy:
    spw_ps_client_destroy(c);
    return NULL;
}

void spw_ps_client_destroy(spw_ps_client_t *c)
{
    if (!c)
        return;
    if (c->outstanding)
        SPW_WARN("parameter-server client closed with unacknowledged pushes", "pushes=%u",
                 c->outstanding);
    spw_psc__zmq_close(c);
    if (c->shards)
        for (uint32_t s = 0; s < c->n_shards; s++)
            free(c->shards[s].endpoint);
    free(c->shards);
    for (uint32_t i = 0; i < SPW_PS_CLIENT_MAX_PULLS; i++) {
        free(c->pulls[i].seg);
        free(c->pulls[i].map);
        free_parts(c->pulls[i].parts, c->n_shards);
    }
    if (c->ring)
        for (uint32_t i = 0; i < c->window; i++)
            free_parts(c->ring[i].parts, c->n_shards);
    free(c->ring);
    spw_psc__sorter_fini(&c->sorters[0]);
    spw_psc__sorter_fini(&c->sorters[1]);
    free(c->ukeys);
    free(c->uvers);
    free(c->uvals);
    free(c->uhalf);
    free(c->upulled);
    free(c->uhpulled);
    free(c->stores);
    spw_arena_destroy(c->arena);
    spw_curve_client_wipe(&c->curve);
    free(c);
}

uint32_t spw_ps_client_shards(const spw_ps_client_t *c)
{
    return c->n_shards;
}

const char *spw_ps_client_errstr(const spw_ps_client_t *c)
{
    return c->errstr;
}

uint32_t spw_ps_client_outstanding(const spw_ps_client_t *c)
{
    return c->outstanding;
}

uint64_t spw_ps_client_next_seq(const spw_ps_client_t *c)
{
    return c->next_seq;
}

uint64_t spw_ps_client_acked_through(const spw_ps_client_t *c)
{
    uint64_t oldest = c->next_seq;
    if (c->outstanding)
        for (uint32_t i = 0; i < c->window; i++)
            if (c->ring[i].busy && c->ring[i].seq < oldest)
                oldest = c->ring[i].seq;
    return oldest - 1;
}

spw_err_t spw_ps_client_set_epoch(spw_ps_client_t *c, uint64_t epoch)
{
    if (c->outstanding)
        return SPW_ERR_STATE;
    if (epoch < c->epoch)
        return SPW_ERR_INVALID;
    c->epoch = epoch;
    return SPW_OK;
}

void spw_ps_client_set_generation(spw_ps_client_t *c, uint64_t generation)
{
    c->generation = generation;
}

void spw_ps_client_get_stats(const spw_ps_client_t *c, struct spw_ps_client_stats *out)
{
    *out = c->stats;
    out->window = c->outstanding;
}

void spw_psc__debug_drop_acks(spw_ps_client_t *c, uint32_t n)
{
    c->debug_drop_acks = n;
}

/* ---- waits ---- */

enum wait_kind { WAIT_WINDOW, WAIT_FLUSH, WAIT_PULL, WAIT_ACKED };

/* arg: the pull slot (WAIT_PULL) or the seq (WAIT_ACKED). */
static bool wait_done(const spw_ps_client_t *c, enum wait_kind kind, uint64_t arg)
{
    switch (kind) {
    case WAIT_WINDOW:
        return !c->ring[c->next_seq % c->window].busy;
    case WAIT_FLUSH:
        return c->outstanding == 0;
    case WAIT_PULL:
        return c->pulls[arg].pending == 0;
    case WAIT_ACKED:
        return spw_ps_client_acked_through(c) >= arg;
    }
    return true;
}

/* Makes progress until the condition holds. timeout_ms < 0: no limit. stoppable: a stop request
 * ends the wait with SPW_ERR_STOPPED. */
static spw_err_t wait_for(spw_ps_client_t *c, enum wait_kind kind, uint64_t arg, int64_t timeout_ms,
                          bool stoppable)
{
    uint64_t start = spw_time_mono_ms();
    if (!c->inproc)
        spw_psc__progress(c, 0);
    for (;;) {
        if (c->sticky)
            return c->sticky;
        if (wait_done(c, kind, arg))
            return SPW_OK;
        if (stoppable && spw_signal_stop_requested())
            return SPW_ERR_STOPPED;
        uint64_t slice = WAIT_SLICE_MS;
        if (timeout_ms >= 0) {
            uint64_t spent = spw_time_mono_ms() - start;
            if (spent >= (uint64_t)timeout_ms)
                return SPW_ERR_TIMEOUT;
            if ((uint64_t)timeout_ms - spent < slice)
                slice = (uint64_t)timeout_ms - spent;
        }
        spw_psc__progress(c, slice);
    }
}

spw_err_t spw_ps_client_poll(spw_ps_client_t *c)
{
    if (c->inproc || c->sticky)
        return c->sticky;
    return spw_psc__progress(c, 0);
}

spw_err_t spw_ps_client_wait_window(spw_ps_client_t *c, int64_t timeout_ms)
{
    return wait_for(c, WAIT_WINDOW, 0, timeout_ms, true);
}

spw_err_t spw_ps_client_flush(spw_ps_client_t *c, int64_t timeout_ms)
{
    return wait_for(c, WAIT_FLUSH, 0, timeout_ms, true);
}

spw_err_t spw_ps_client_drain(spw_ps_client_t *c, uint64_t timeout_ms)
{
    int64_t t = timeout_ms > INT64_MAX ? INT64_MAX : (int64_t)timeout_ms;
    return wait_for(c, WAIT_FLUSH, 0, t, false);
}

/* ---- pulls ---- */

void spw_psc__pull_scatter(spw_ps_client_t *c, struct spw_psc__pull *p, uint32_t s,
                           const float *vals, const uint32_t *vers)
{
    uint32_t dim = c->conf.dim;
    size_t row_bytes = (size_t)dim * sizeof(float);
    for (uint32_t j = p->seg[s]; j < p->seg[s + 1]; j++) {
        const struct spw_psc__map *m = &p->map[j];
        memcpy(p->rows + (size_t)m->pos * dim, vals + (size_t)m->uidx * dim, row_bytes);
        if (p->versions)
            p->versions[m->pos] = vers[m->uidx];
    }
}

void spw_psc__pull_part_done(spw_ps_client_t *c, struct spw_psc__pull *p, uint32_t s)
{
    struct spw_psc__part *part = &p->parts[s];
    if (part->state != PSC_PART_PENDING)
        return;
    part->state = PSC_PART_DONE;
    c->shards[s].pending--;
    if (--p->pending == 0 && c->m.pull_latency)
        spw_histogram_observe(c->m.pull_latency,
                              (double)(spw_time_mono_ns() - p->started_ns) / 1e9);
}

static void pull_release(spw_ps_client_t *c, struct spw_psc__pull *p)
{
    for (uint32_t s = 0; s < c->n_shards; s++) {
        if (p->parts[s].state == PSC_PART_PENDING)
            c->shards[s].pending--;
        p->parts[s].state = PSC_PART_NONE;
    }
    p->busy = false;
    p->failed = false;
    p->hello = false;
    p->dims = NULL;
    p->pending = 0;
    p->rows = NULL;
    p->versions = NULL;
    p->token = 0;
}

/* Reserves the in-process gather scratch for n rows. */
static spw_err_t reserve_scratch(spw_ps_client_t *c, size_t n)
{
    if (n <= c->ucap)
        return SPW_OK;
    size_t cap = c->ucap ? c->ucap : 256;
    while (cap < n)
        cap *= 2;
    size_t dim = c->conf.dim;
    uint64_t *k = realloc(c->ukeys, cap * sizeof(*k));
    if (k)
        c->ukeys = k;
    uint32_t *v = realloc(c->uvers, cap * sizeof(*v));
    if (v)
        c->uvers = v;
    float *f = realloc(c->uvals, cap * dim * sizeof(*f));
    if (f)
        c->uvals = f;
    uint16_t *h = realloc(c->uhalf, cap * dim * sizeof(*h));
    if (h)
        c->uhalf = h;
    float *pf = realloc(c->upulled, cap * dim * sizeof(*pf));
    if (pf)
        c->upulled = pf;
    uint16_t *ph = realloc(c->uhpulled, cap * dim * sizeof(*ph));
    if (ph)
        c->uhpulled = ph;
    if (!k || !v || !f || !h || !pf || !ph)
        return SPW_ERR_NOMEM;
    c->ucap = cap;
    return SPW_OK;
}

static spw_err_t pull_inproc(spw_ps_client_t *c, struct spw_psc__pull *p)
{
    for (uint32_t s = 0; s < c->n_shards; s++) {
        struct spw_psc__part *part = &p->parts[s];
        if (part->n == 0)
            continue;
        if (reserve_scratch(c, part->n) != SPW_OK)
            return SPW_ERR_NOMEM;
        spw_err_t err = spw_ps_store_pull(c->stores[s], (const uint64_t *)part->blocks.data,
                                          part->n, c->uvals, c->uvers);
        if (err)
            return err;
        spw_psc__pull_scatter(c, p, s, c->uvals, c->uvers);
        size_t bytes = (size_t)part->n * (c->conf.dim * sizeof(float) + sizeof(uint32_t));
        c->stats.bytes_pulled += bytes;
        if (c->m.bytes_pull)
            spw_counter_add(c->m.bytes_pull, bytes);
    }
    return SPW_OK;
}

/* The first free pull slot; SPW_PS_CLIENT_MAX_PULLS when every one is busy. */
static uint32_t free_pull(const spw_ps_client_t *c)
{
    uint32_t idx = 0;
    while (idx < SPW_PS_CLIENT_MAX_PULLS && c->pulls[idx].busy)
        idx++;
    return idx;
}

/* Marks pull idx busy for n rows into rows and versions, under a fresh token. */
static void pull_arm(spw_ps_client_t *c, uint32_t idx, size_t n, float *rows, uint32_t *versions)
{
    struct spw_psc__pull *p = &c->pulls[idx];
    p->busy = true;
    p->failed = false;
    p->n = n;
    p->rows = rows;
    p->versions = versions;
    p->pending = 0;
    p->started_ns = spw_time_mono_ns();
    p->token = (++c->pull_gen << 8) | idx;
}

/* Sends part s of pull idx under a fresh request id; it is pending until answered. */
static void pull_send_part(spw_ps_client_t *c, uint32_t idx, uint32_t s)
{
    struct spw_psc__pull *p = &c->pulls[idx];
    struct spw_psc__part *part = &p->parts[s];
    part->request_id = spw_psc__request_id(c, false, idx);
    part->state = PSC_PART_PENDING;
    part->attempts = 0;
    p->pending++;
    c->shards[s].pending++;
    spw_psc__send(c, s, false, idx, part);
}

spw_err_t spw_ps_client_pull_start(spw_ps_client_t *c, const uint64_t *keys, size_t n, float *rows,
                                   uint32_t *versions, uint64_t *token)
{
    if (c->sticky)
        return c->sticky;
    if (n > SPW_PS_CLIENT_MAX_KEYS)
        return SPW_ERR_TOO_BIG;
    uint32_t idx = free_pull(c);
    if (idx == SPW_PS_CLIENT_MAX_PULLS)
        return SPW_ERR_STATE;
    struct spw_psc__pull *p = &c->pulls[idx];
    const struct spw_psc__sorter *st = spw_psc__slice2(c->sorters, &c->sorter_next, keys, n);
    if (!st || grow((void **)&p->map, &p->map_cap, n ? n : 1, sizeof(*p->map)) != SPW_OK)
        return SPW_ERR_NOMEM;
    const struct spw_psc__ent *ent = st->a;
    const uint32_t *seg = st->seg;
    uint32_t dim = c->conf.dim;
    for (uint32_t s = 0; s < c->n_shards; s++) {
        struct spw_psc__part *part = &p->parts[s];
        part->n = 0;
        part->state = PSC_PART_NONE;
        uint32_t lo = seg[s], hi = seg[s + 1];
        if (lo == hi)
            continue;
        if (spw_wire_buf_reserve(&part->blocks, (size_t)(hi - lo) * 8) != SPW_OK)
            return SPW_ERR_NOMEM;
        uint64_t *uk = (uint64_t *)part->blocks.data;
        uint32_t u = 0;
        for (uint32_t j = lo; j < hi; j++) {
            if (u == 0 || uk[u - 1] != ent[j].key)
                uk[u++] = ent[j].key;
            p->map[j] = (struct spw_psc__map){ent[j].pos, u - 1};
        }
        part->n = u;
        part->blocks.len = (size_t)u * 8;
        if ((size_t)u * 8 + FRAME_SLACK > c->conf.max_frame ||
            (size_t)u * (dim * 4 + 4) + FRAME_SLACK > 4 * c->conf.max_frame) {
            for (uint32_t t = 0; t <= s; t++)
                p->parts[t].n = 0;
            return SPW_ERR_TOO_BIG;
        }
    }
    memcpy(p->seg, seg, ((size_t)c->n_shards + 1) * sizeof(*seg));
    pull_arm(c, idx, n, rows, versions);
    uint64_t rows_sent = 0;
    for (uint32_t s = 0; s < c->n_shards; s++)
        rows_sent += p->parts[s].n;
    c->stats.rows_pulled += rows_sent;
    if (c->m.rows_pull)
        spw_counter_add(c->m.rows_pull, rows_sent);
    if (c->inproc) {
        spw_err_t err = pull_inproc(c, p);
        if (err) {
            pull_release(c, p);
            return err;
        }
        *token = p->token;
        return SPW_OK;
    }
    for (uint32_t s = 0; s < c->n_shards; s++)
        if (p->parts[s].n > 0)
            pull_send_part(c, idx, s);
    *token = p->token;
    return SPW_OK;
}

const char *spw_ps_client_endpoint(const spw_ps_client_t *c, uint32_t shard)
{
    return c->inproc || shard >= c->n_shards ? "inproc" : c->shards[shard].endpoint;
}

spw_err_t spw_ps_client_hello(spw_ps_client_t *c, int64_t timeout_ms, uint32_t *dims, uint32_t *bad)
{
    if (c->sticky)
        return c->sticky;
    if (c->inproc)
        return SPW_OK; /* the stores were opened with the client's dim */
    uint32_t idx = free_pull(c);
    if (idx == SPW_PS_CLIENT_MAX_PULLS)
        return SPW_ERR_STATE;
    uint32_t *got = calloc(c->n_shards, sizeof(*got));
    if (!got)
        return SPW_ERR_NOMEM;
    struct spw_psc__pull *p = &c->pulls[idx];
    pull_arm(c, idx, 0, NULL, NULL);
    p->hello = true;
    p->dims = got;
    for (uint32_t s = 0; s < c->n_shards; s++) { /* an empty pull to every shard */
        p->parts[s].n = 0;
        p->parts[s].blocks.len = 0;
        pull_send_part(c, idx, s);
    }
    spw_err_t err = wait_for(c, WAIT_PULL, idx, timeout_ms, true);
    if (err == SPW_OK) {
        for (uint32_t s = 0; s < c->n_shards && err == SPW_OK; s++) {
            if (got[s] != c->conf.dim) {
                err = SPW_ERR_INVALID;
                if (bad)
                    *bad = s;
            }
        }
        if (dims)
            memcpy(dims, got, c->n_shards * sizeof(*got));
    }
    pull_release(c, p);
    free(got);
    return err;
}

static struct spw_psc__pull *pull_of(spw_ps_client_t *c, uint64_t token)
{
    uint64_t idx = token & 0xff;
    if (token == 0 || idx >= SPW_PS_CLIENT_MAX_PULLS || !c->pulls[idx].busy ||
        c->pulls[idx].token != token)
        return NULL;
    return &c->pulls[idx];
}

spw_err_t spw_ps_client_pull_wait(spw_ps_client_t *c, uint64_t token, int64_t timeout_ms)
{
    struct spw_psc__pull *p = pull_of(c, token);
    if (!p)
        return SPW_ERR_NOT_FOUND;
    uint64_t t0 = spw_time_mono_ns();
    spw_err_t err = wait_for(c, WAIT_PULL, (uint32_t)(p - c->pulls), timeout_ms, true);
    if (err == SPW_ERR_TIMEOUT || err == SPW_ERR_STOPPED)
        return err;
    if (err == SPW_OK) {
        c->stats.pulls++;
        if (c->m.pull_wait)
            spw_histogram_observe(c->m.pull_wait, (double)(spw_time_mono_ns() - t0) / 1e9);
    }
    pull_release(c, p);
    return err;
}

void spw_ps_client_pull_cancel(spw_ps_client_t *c, uint64_t token)
{
    struct spw_psc__pull *p = pull_of(c, token);
    if (p)
        pull_release(c, p);
}

/* ---- pushes ---- */

void spw_psc__push_part_done(spw_ps_client_t *c, struct spw_psc__push *slot, uint32_t s)
{
    struct spw_psc__part *part = &slot->parts[s];
    if (part->state != PSC_PART_PENDING)
        return;
    part->state = PSC_PART_DONE;
    c->shards[s].pending--;
    if (--slot->pending > 0)
        return;
    slot->busy = false;
    c->outstanding--;
    c->stats.pushes_acked++;
    if (c->m.push_latency)
        spw_histogram_observe(c->m.push_latency,
                              (double)(spw_time_mono_ns() - slot->started_ns) / 1e9);
    update_window_gauge(c);
}

spw_err_t spw_ps_client_wait_acked(spw_ps_client_t *c, uint64_t seq, int64_t timeout_ms)
{
    return wait_for(c, WAIT_ACKED, seq, timeout_ms, true);
}

void spw_ps_client_cancel_echo(spw_ps_client_t *c, uint64_t seq_lo, uint64_t seq_hi)
{
    for (uint32_t i = 0; i < c->window; i++) {
        struct spw_psc__push *slot = &c->ring[i];
        if (slot->busy && slot->seq >= seq_lo && slot->seq <= seq_hi)
            slot->echo_rows = NULL, slot->echo_versions = NULL;
    }
}

/* The echo request of shard s's part: the rows of ent[lo..hi) whose echo_pos is set. */
static spw_err_t gather_echo(const struct spw_ps_push *push, const struct spw_psc__ent *ent,
                             uint32_t lo, uint32_t hi, struct spw_psc__part *part)
{
    part->n_echo = 0;
    if (!push->echo_pos)
        return SPW_OK;
    uint32_t n = hi - lo;
    if (n > part->echo_cap) {
        uint32_t *a = realloc(part->echo_idx, n * sizeof(*a));
        if (!a)
            return SPW_ERR_NOMEM;
        part->echo_idx = a;
        uint32_t *b = realloc(part->echo_dst, n * sizeof(*b));
        if (!b)
            return SPW_ERR_NOMEM;
        part->echo_dst = b;
        part->echo_cap = n;
    }
    for (uint32_t j = lo; j < hi; j++) {
        uint32_t dst = push->echo_pos[ent[j].pos];
        if (dst == UINT32_MAX)
            continue;
        part->echo_idx[part->n_echo] = j - lo;
        part->echo_dst[part->n_echo++] = dst;
    }
    return SPW_OK;
}

uint32_t spw_ps_client_abandon_pushes(spw_ps_client_t *c)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->window; i++) {
        struct spw_psc__push *slot = &c->ring[i];
        if (!slot->busy)
            continue;
        for (uint32_t s = 0; s < c->n_shards; s++) {
            if (slot->parts[s].state != PSC_PART_PENDING)
                continue;
            slot->parts[s].state = PSC_PART_DONE;
            c->shards[s].pending--;
        }
        slot->pending = 0;
        slot->busy = false;
        c->outstanding--;
        n++;
    }
    update_window_gauge(c);
    return n;
}

/* Writes shard s's rows of the sorted push into dst: keys, then versions, then gradients (f32
 * or f16 by es), then (pulled non-NULL: when push->pulled is set) the pulled values in the same
 * format. ent[lo..hi) are the shard's entries. */
static void gather_push(spw_ps_client_t *c, const struct spw_ps_push *push,
                        const struct spw_psc__ent *ent, uint32_t lo, uint32_t hi, uint64_t *keys,
                        uint32_t *versions, void *grads, void *pulled)
{
    uint32_t dim = c->conf.dim;
    for (uint32_t j = lo; j < hi; j++) {
        uint32_t i = j - lo, pos = ent[j].pos;
        keys[i] = ent[j].key;
        versions[i] = push->versions ? push->versions[pos] : 0;
        if (!push->fp16) {
            memcpy((float *)grads + (size_t)i * dim, push->grads + (size_t)pos * dim,
                   dim * sizeof(float));
        } else if (push->grads_f16) {
            memcpy((uint16_t *)grads + (size_t)i * dim, push->grads_f16 + (size_t)pos * dim,
                   dim * sizeof(uint16_t));
        } else {
            spw_wire_f32_to_f16_n(push->grads + (size_t)pos * dim,
                                  (uint16_t *)grads + (size_t)i * dim, dim);
        }
        if (!pulled)
            continue;
        if (push->fp16)
            spw_wire_f32_to_f16_n(push->pulled + (size_t)pos * dim,
                                  (uint16_t *)pulled + (size_t)i * dim, dim);
        else
            memcpy((float *)pulled + (size_t)i * dim, push->pulled + (size_t)pos * dim,
                   dim * sizeof(float));
    }
}

/* st: the push's keys sorted (spw_psc__slice2) */
static spw_err_t push_inproc(spw_ps_client_t *c, const struct spw_ps_push *push,
                             const struct spw_psc__sorter *st)
{
    const struct spw_psc__ent *ent = st->a;
    const uint32_t *seg = st->seg;
    uint32_t dim = c->conf.dim;
    size_t es = push->fp16 ? 2 : 4;
    for (uint32_t s = 0; s < c->n_shards; s++) {
        uint32_t lo = seg[s], hi = seg[s + 1], n = hi - lo;
        if (n == 0)
            continue;
        if (reserve_scratch(c, n) != SPW_OK)
            return SPW_ERR_NOMEM;
        void *grads = push->fp16 ? (void *)c->uhalf : (void *)c->uvals;
        void *pulled = !push->pulled ? NULL : push->fp16 ? (void *)c->uhpulled : (void *)c->upulled;
        gather_push(c, push, ent, lo, hi, c->ukeys, c->uvers, grads, pulled);
        if (push->fp16) { /* the shard applies what a half carries */
            spw_wire_f16_to_f32_n(c->uhalf, c->uvals, (size_t)n * dim);
            if (pulled)
                spw_wire_f16_to_f32_n(c->uhpulled, c->upulled, (size_t)n * dim);
        }
        struct spw_ps_push_result res = {0};
        struct spw_ps_push_args args = {.n = n,
                                        .keys = c->ukeys,
                                        .grads = c->uvals,
                                        .versions = c->uvers,
                                        .pulled = pulled ? c->upulled : NULL};
        spw_err_t err = spw_ps_store_push_args(c->stores[s], &args, &res);
        if (err)
            return err;
        size_t bytes = (size_t)n * (12 + dim * es * (pulled ? 2 : 1));
        c->stats.bytes_pushed += bytes;
        if (c->m.bytes_push)
            spw_counter_add(c->m.bytes_push, bytes);
        c->stats.rows_applied += res.applied;
        c->stats.rows_rejected += res.rejected;
        c->stats.rows_dropped_stale += res.dropped_stale;
        if (res.rejected && c->m.not_applied_nonfinite)
            spw_counter_add(c->m.not_applied_nonfinite, res.rejected);
        if (res.dropped_stale && c->m.not_applied_stale)
            spw_counter_add(c->m.not_applied_stale, res.dropped_stale);
    }
    c->stats.pushes_acked++;
    return SPW_OK;
}

spw_err_t spw_ps_client_push(spw_ps_client_t *c, const struct spw_ps_push *push, uint64_t *seq)
{
    if (c->sticky)
        return c->sticky;
    if (push->n == 0)
        return SPW_OK;
    if (push->fp16 ? !push->grads && !push->grads_f16 : !push->grads)
        return SPW_ERR_INVALID;
    if (push->n > SPW_PS_CLIENT_MAX_KEYS)
        return SPW_ERR_TOO_BIG;
    const struct spw_psc__sorter *st =
        spw_psc__slice2(c->sorters, &c->sorter_next, push->keys, push->n);
    if (!st)
        return SPW_ERR_NOMEM;
    const struct spw_psc__ent *ent = st->a;
    const uint32_t *seg = st->seg;
    uint32_t dim = c->conf.dim;
    size_t es = push->fp16 ? 2 : 4;
    size_t row_bytes = 12 + (size_t)dim * es * (push->pulled ? 2 : 1);
    for (uint32_t s = 0; s < c->n_shards; s++) {
        uint32_t lo = seg[s], hi = seg[s + 1];
        for (uint32_t j = lo + 1; j < hi; j++)
            if (ent[j].key == ent[j - 1].key)
                return SPW_ERR_INVALID;
        if ((size_t)(hi - lo) * row_bytes + FRAME_SLACK > c->conf.max_frame)
            return SPW_ERR_TOO_BIG;
    }
    c->stats.pushes++;
    c->stats.rows_pushed += push->n;
    if (c->m.rows_push)
        spw_counter_add(c->m.rows_push, push->n);
    if (c->inproc) {
        spw_err_t err = push_inproc(c, push, st);
        if (err)
            return err;
        if (seq)
            *seq = c->next_seq;
        c->next_seq++;
        return SPW_OK;
    }
    spw_err_t err = wait_for(c, WAIT_WINDOW, 0, -1, true);
    if (err) {
        c->stats.pushes--;
        c->stats.rows_pushed -= push->n;
        return err;
    }
    uint32_t idx = (uint32_t)(c->next_seq % c->window);
    struct spw_psc__push *slot = &c->ring[idx];
    slot->seq = c->next_seq;
    slot->epoch = c->epoch;
    slot->generation = c->generation;
    slot->fp16 = push->fp16;
    slot->pulled = push->pulled != NULL;
    slot->max_event_time_ms = push->max_event_time_ms;
    slot->examples = push->examples;
    slot->step = push->step;
    slot->step_examples = push->step_examples;
    slot->echo_rows = push->echo_pos ? push->echo_rows : NULL;
    slot->echo_versions = push->echo_pos ? push->echo_versions : NULL;
    slot->pending = 0;
    slot->started_ns = spw_time_mono_ns();
    for (uint32_t s = 0; s < c->n_shards; s++) {
        struct spw_psc__part *part = &slot->parts[s];
        uint32_t lo = seg[s], hi = seg[s + 1], n = hi - lo;
        part->state = PSC_PART_NONE;
        part->n = n;
        if (n == 0)
            continue;
        if (spw_wire_buf_reserve(&part->blocks, (size_t)n * row_bytes) != SPW_OK) {
            for (uint32_t t = 0; t < s; t++)
                slot->parts[t].n = 0;
            return SPW_ERR_NOMEM;
        }
        uint8_t *b = part->blocks.data;
        gather_push(c, push, ent, lo, hi, (uint64_t *)b, (uint32_t *)(b + (size_t)n * 8),
                    b + (size_t)n * 12,
                    push->pulled ? b + (size_t)n * (12 + (size_t)dim * es) : NULL);
        part->blocks.len = (size_t)n * row_bytes;
        if (gather_echo(push, ent, lo, hi, part) != SPW_OK) {
            for (uint32_t t = 0; t <= s; t++)
                slot->parts[t].n = 0;
            return SPW_ERR_NOMEM;
        }
    }
    slot->busy = true;
    c->outstanding++;
    update_window_gauge(c);
    for (uint32_t s = 0; s < c->n_shards; s++) {
        struct spw_psc__part *part = &slot->parts[s];
        if (part->n == 0)
            continue;
        part->request_id = spw_psc__request_id(c, true, idx);
        part->state = PSC_PART_PENDING;
        part->attempts = 0;
        slot->pending++;
        c->shards[s].pending++;
        spw_psc__send(c, s, true, idx, part);
    }
    if (seq)
        *seq = slot->seq;
    c->next_seq++;
    return SPW_OK;
}
