/* trainer: the PS client's ZeroMQ transport: a DEALER per shard, request packing, reply
 * matching, timeouts with resend and reconnect, and the "waiting for shard" reporting. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define WAIT_LOG_MS       5000 /* "waiting for shard" at most this often per shard */
#define DRAIN_BURST       1024 /* replies read from one socket before looking at the others */
#define RECONNECT_IVL_MS  100
#define RECONNECT_MAX_MS  2000
#define MAX_BACKOFF_SHIFT 4           /* 2^4 = SPW_PS_CLIENT_MAX_BACKOFF */
#define MONITOR_ITEM      0x80000000u /* item_shard flag: the shard's monitor socket */

_Static_assert((1u << MAX_BACKOFF_SHIFT) == SPW_PS_CLIENT_MAX_BACKOFF, "backoff cap");

static const char *const error_names[8] = {"none",     "malformed",   "version",
                                           "too_big",  "wrong_shard", "unavailable",
                                           "internal", "unauthorized"};

/* With CURVE, a refused key shows only as a failed handshake (the shard sends no reply): a
 * monitor socket per DEALER reports it, so that the client can say why it is waiting. */
#define HANDSHAKE_FAILED                                                                           \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                  \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

static void close_socket(struct spw_psc__shard *sh)
{
    if (sh->mon) {
        zmq_socket_monitor(sh->sock, NULL, 0);
        zmq_close(sh->mon);
        sh->mon = NULL;
    }
    if (sh->sock)
        zmq_close(sh->sock);
    sh->sock = NULL;
}

static spw_err_t open_monitor(spw_ps_client_t *c, uint32_t s, void *sock, char *errstr,
                              size_t errstr_size)
{
    char addr[96];
    snprintf(addr, sizeof(addr), "inproc://sparrow-psc-%p-%u-%" PRIu64, (void *)c, s,
             ++c->monitor_gen);
    if (zmq_socket_monitor(sock, addr, HANDSHAKE_FAILED) != 0)
        goto out_fail;
    void *mon = zmq_socket(c->zctx, ZMQ_PAIR);
    if (!mon)
        goto out_fail;
    int linger = 0;
    zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_connect(mon, addr) != 0) {
        zmq_close(mon);
        goto out_fail;
    }
    c->shards[s].mon = mon;
    return SPW_OK;
out_fail:
    snprintf(errstr, errstr_size, "socket monitor: %s", zmq_strerror(zmq_errno()));
    return SPW_ERR_RPC;
}

static spw_err_t open_socket(spw_ps_client_t *c, uint32_t s, char *errstr, size_t errstr_size)
{
    struct spw_psc__shard *sh = &c->shards[s];
    void *sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!sock) {
        snprintf(errstr, errstr_size, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return SPW_ERR_RPC;
    }
    int linger = 0, ivl = RECONNECT_IVL_MS, ivl_max = RECONNECT_MAX_MS;
    int64_t maxmsg = (int64_t)c->max_reply;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
    zmq_setsockopt(sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max));
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    if (spw_curve_client_apply(&c->curve, sock, errstr, errstr_size) != SPW_OK) {
        zmq_close(sock);
        return SPW_ERR_RPC;
    }
    sh->sock = sock;
    if (c->curve.enabled && open_monitor(c, s, sock, errstr, errstr_size) != SPW_OK) {
        close_socket(sh);
        return SPW_ERR_RPC;
    }
    if (zmq_connect(sock, sh->endpoint) != 0) {
        snprintf(errstr, errstr_size, "connect %s: %s", sh->endpoint, zmq_strerror(zmq_errno()));
        close_socket(sh);
        return SPW_ERR_RPC;
    }
    return SPW_OK;
}

spw_err_t spw_psc__zmq_open(spw_ps_client_t *c, char *errstr, size_t errstr_size)
{
    c->zctx = zmq_ctx_new();
    c->items = calloc(2 * (size_t)c->n_shards, sizeof(zmq_pollitem_t));
    c->item_shard = calloc(2 * (size_t)c->n_shards, sizeof(uint32_t));
    c->expired = calloc(c->n_shards, 1);
    if (!c->zctx || !c->items || !c->item_shard || !c->expired) {
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    for (uint32_t s = 0; s < c->n_shards; s++) {
        spw_err_t err = open_socket(c, s, errstr, errstr_size);
        if (err)
            return err;
    }
    return SPW_OK;
}

void spw_psc__zmq_close(spw_ps_client_t *c)
{
    if (c->shards)
        for (uint32_t s = 0; s < c->n_shards; s++)
            close_socket(&c->shards[s]);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    c->zctx = NULL;
    free(c->items);
    free(c->item_shard);
    free(c->expired);
    c->items = NULL;
    c->item_shard = NULL;
    c->expired = NULL;
}

/* Closes shard s's DEALER and connects a new one: the old pipe (and whatever it still held) is
 * discarded, and replies to the old socket's identity are dropped by the shard. */
static void reconnect(spw_ps_client_t *c, uint32_t s)
{
    struct spw_psc__shard *sh = &c->shards[s];
    close_socket(sh);
    char err[256];
    if (open_socket(c, s, err, sizeof(err)) != SPW_OK) {
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, WAIT_LOG_MS, "reconnecting to shard failed",
                            "shard=%u err=\"%s\"", s, err);
        return; /* retried at the next timeout */
    }
    c->stats.reconnects++;
    if (c->m.reconnects)
        spw_counter_inc(c->m.reconnects);
}

static uint64_t part_timeout(const spw_ps_client_t *c, uint32_t s, bool push)
{
    uint64_t t = push ? c->conf.push_timeout_ms : c->conf.pull_timeout_ms;
    return t << c->shards[s].backoff;
}

void spw_psc__send(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                   struct spw_psc__part *part)
{
    uint64_t now = spw_time_mono_ms();
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = true;
    req.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    req.has_request_id = true;
    req.request_id = part->request_id;
    Sparrow__PullRequest pr = SPARROW__PULL_REQUEST__INIT;
    Sparrow__PushRequest ps = SPARROW__PUSH_REQUEST__INIT;
    size_t n = part->n;
    if (!push) {
        pr.has_keys = n > 0;
        pr.keys.data = part->blocks.data;
        pr.keys.len = n * 8;
        pr.has_dim = true; /* a shard of pserver.dim=auto takes it (hello or first pull) */
        pr.dim = c->conf.dim;
        req.body_case = SPARROW__REQUEST__BODY_PULL;
        req.pull = &pr;
    } else {
        const struct spw_psc__push *slot = &c->ring[idx];
        size_t es = slot->fp16 ? 2 : 4;
        ps.has_trainer_id = ps.has_epoch = ps.has_seq = ps.has_dim = true;
        ps.trainer_id = c->conf.trainer_id;
        ps.epoch = slot->epoch;
        ps.seq = slot->seq;
        ps.has_generation = slot->generation != 0;
        ps.generation = slot->generation;
        ps.dim = c->conf.dim;
        ps.has_keys = ps.has_versions = ps.has_grads = true;
        ps.keys.data = part->blocks.data;
        ps.keys.len = n * 8;
        ps.versions.data = part->blocks.data + n * 8;
        ps.versions.len = n * 4;
        ps.grads.data = part->blocks.data + n * 12;
        ps.grads.len = n * c->conf.dim * es;
        ps.has_pulled = slot->pulled;
        ps.pulled.data = part->blocks.data + n * 12 + ps.grads.len;
        ps.pulled.len = slot->pulled ? ps.grads.len : 0;
        ps.has_fp16 = true;
        ps.fp16 = slot->fp16;
        ps.has_max_event_time_ms = slot->max_event_time_ms != INT64_MIN;
        ps.max_event_time_ms = slot->max_event_time_ms;
        ps.has_examples = true;
        ps.examples = slot->examples;
        ps.has_step = ps.has_step_examples = slot->step != 0;
        ps.step = slot->step;
        ps.step_examples = slot->step_examples;
        ps.has_echo = part->n_echo > 0;
        ps.echo.data = (uint8_t *)part->echo_idx;
        ps.echo.len = (size_t)part->n_echo * 4;
        req.body_case = SPARROW__REQUEST__BODY_PUSH;
        req.push = &ps;
    }
    if (part->attempts == 0)
        part->sent_ms = now;
    else {
        c->stats.resends++;
        if (c->m.resends)
            spw_counter_inc(c->m.resends);
    }
    part->attempts++;
    part->deadline_ms = now + part_timeout(c, s, push);
    void *sock = c->shards[s].sock;
    size_t len = protobuf_c_message_get_packed_size(&req.base);
    zmq_msg_t msg;
    if (!sock || zmq_msg_init_size(&msg, len) != 0)
        return; /* resent at the deadline */
    protobuf_c_message_pack(&req.base, zmq_msg_data(&msg));
    if (zmq_msg_send(&msg, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        SPW_DEBUG("send to shard failed, resending at the deadline", "shard=%u err=\"%s\"", s,
                  zmq_strerror(zmq_errno()));
        return;
    }
    if (push) {
        c->stats.bytes_pushed += len;
        if (c->m.bytes_push)
            spw_counter_add(c->m.bytes_push, len);
    }
}

/* ---- replies ---- */

static void shard_answered(spw_ps_client_t *c, uint32_t s)
{
    struct spw_psc__shard *sh = &c->shards[s];
    sh->backoff = 0;
    if (sh->waiting) {
        sh->waiting = false;
        SPW_INFO("shard is back", "shard=%u endpoint=%s waited_ms=%" PRIu64, s, sh->endpoint,
                 spw_time_mono_ms() - sh->waiting_since_ms);
    }
}

static spw_err_t error_code_err(Sparrow__ErrorCode code)
{
    if (code == SPARROW__ERROR_CODE__ERROR_TOO_BIG)
        return SPW_ERR_TOO_BIG;
    if (code == SPARROW__ERROR_CODE__ERROR_VERSION)
        return SPW_ERR_VERSION;
    return SPW_ERR_RPC;
}

/* An error reply. part (may be NULL when the shard could not tell which request it answers) is
 * the matched request. */
static void on_error(spw_ps_client_t *c, uint32_t s, const Sparrow__Reply *r, bool push,
                     uint32_t idx, struct spw_psc__part *part)
{
    unsigned code = (unsigned)r->error;
    const char *name = code < 8 ? error_names[code] : "unknown";
    const char *msg = r->error_message ? r->error_message : "";
    c->stats.error_replies++;
    if (c->m.errors[code < 8 ? code : SPARROW__ERROR_CODE__ERROR_INTERNAL])
        spw_counter_inc(c->m.errors[code < 8 ? code : SPARROW__ERROR_CODE__ERROR_INTERNAL]);
    if (code == SPARROW__ERROR_CODE__ERROR_UNAVAILABLE ||
        code == SPARROW__ERROR_CODE__ERROR_INTERNAL) {
        /* Transient: the request stays pending and is resent at its deadline. */
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, WAIT_LOG_MS, "shard replied a transient error",
                            "shard=%u endpoint=%s reason=%s msg=\"%s\"", s, c->shards[s].endpoint,
                            name, msg);
        return;
    }
    char what[64];
    if (!part)
        snprintf(what, sizeof(what), "a request");
    else if (push)
        snprintf(what, sizeof(what), "push seq %" PRIu64, c->ring[idx].seq);
    else
        snprintf(what, sizeof(what), "a pull of %u keys", part->n);
    spw_psc__set_sticky(c, error_code_err(r->error), "shard %u (%s) refused %s: %s: %s", s,
                        c->shards[s].endpoint, what, name, msg);
    if (part && part->state == PSC_PART_PENDING) {
        if (push) {
            spw_psc__push_part_done(c, &c->ring[idx], s);
        } else {
            c->pulls[idx].failed = true;
            spw_psc__pull_part_done(c, &c->pulls[idx], s);
        }
    }
}

static void on_pull_reply(spw_ps_client_t *c, uint32_t s, const Sparrow__Reply *r,
                          struct spw_psc__pull *p, struct spw_psc__part *part)
{
    const Sparrow__PullReply *pr = r->pull;
    size_t n = part->n;
    uint32_t dim = c->conf.dim;
    const float *vals = NULL;
    const uint32_t *vers = NULL;
    if (p->hello) { /* the shard's dim is the answer; the caller compares */
        if (p->dims)
            p->dims[s] = pr->has_dim ? pr->dim : 0;
        spw_psc__pull_part_done(c, p, s);
        return;
    }
    if (!pr->has_dim || pr->dim != dim) {
        spw_psc__set_sticky(c, SPW_ERR_RPC,
                            "shard %u (%s) serves rows of dim %u, this trainer uses dim %u", s,
                            c->shards[s].endpoint, pr->dim, dim);
    } else if (spw_wire_block_f32(&pr->values, n * dim, &vals) != SPW_OK ||
               spw_wire_block_u32(&pr->versions, n, &vers) != SPW_OK) {
        spw_psc__set_sticky(c, SPW_ERR_RPC,
                            "shard %u (%s) answered a pull of %zu keys with %zu value bytes and "
                            "%zu version bytes",
                            s, c->shards[s].endpoint, n, pr->values.len, pr->versions.len);
    } else {
        spw_psc__pull_scatter(c, p, s, vals, vers);
        size_t bytes = pr->values.len + pr->versions.len;
        c->stats.bytes_pulled += bytes;
        if (c->m.bytes_pull)
            spw_counter_add(c->m.bytes_pull, bytes);
        spw_psc__pull_part_done(c, p, s);
        return;
    }
    p->failed = true;
    spw_psc__pull_part_done(c, p, s);
}

/* Writes the rows a push ack echoes to the caller's destination (fresh reads). An ack without
 * them (the shard could not echo) leaves the destination as it was. */
static void take_echo(spw_ps_client_t *c, uint32_t s, const Sparrow__PushAck *ack,
                      const struct spw_psc__push *slot, const struct spw_psc__part *part)
{
    uint32_t dim = c->conf.dim;
    const float *vals;
    const uint32_t *vers;
    if (spw_wire_block_f32(&ack->echo_values, (size_t)part->n_echo * dim, &vals) != SPW_OK ||
        spw_wire_block_u32(&ack->echo_versions, part->n_echo, &vers) != SPW_OK) {
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, WAIT_LOG_MS, "push ack without its echo",
                            "shard=%u rows=%u", s, part->n_echo);
        return;
    }
    for (uint32_t j = 0; j < part->n_echo; j++) {
        uint32_t dst = part->echo_dst[j];
        memcpy(slot->echo_rows + (size_t)dst * dim, vals + (size_t)j * dim, dim * sizeof(float));
        slot->echo_versions[dst] = vers[j];
    }
    c->stats.rows_echoed += part->n_echo;
}

static void on_push_ack(spw_ps_client_t *c, uint32_t s, const Sparrow__PushAck *ack,
                        struct spw_psc__push *slot, struct spw_psc__part *part)
{
    if (!ack->has_seq || ack->seq != slot->seq) {
        spw_psc__set_sticky(c, SPW_ERR_RPC,
                            "shard %u (%s) acknowledged seq %" PRIu64 " for a push of seq %" PRIu64,
                            s, c->shards[s].endpoint, ack->seq, slot->seq);
        spw_psc__push_part_done(c, slot, s);
        return;
    }
    if (ack->has_fenced && ack->fenced) {
        /* pushes of an abandoned generation never get here (their replies come in late): the
         * shard restored a generation this client has not been told of */
        spw_psc__set_sticky(c, SPW_ERR_STATE,
                            "shard %u (%s) fenced push seq %" PRIu64 " of generation %" PRIu64
                            ": the shard restored a newer generation",
                            s, c->shards[s].endpoint, slot->seq, slot->generation);
    } else if (ack->has_duplicate && ack->duplicate) {
        if (part->attempts <= 1) {
            /* The shard saw this (trainer_id, epoch, seq) before we ever sent it: another
             * client (or an earlier run) uses the same identity, and these rows were dropped. */
            spw_psc__set_sticky(c, SPW_ERR_STATE,
                                "shard %u (%s) had already applied push seq %" PRIu64
                                " of trainer %u epoch %" PRIu64
                                " before this client sent it: (trainer_id, epoch) is reused; "
                                "start with a fresh epoch",
                                s, c->shards[s].endpoint, slot->seq, c->conf.trainer_id,
                                slot->epoch);
        }
        c->stats.duplicate_acks++;
        if (c->m.duplicates)
            spw_counter_inc(c->m.duplicates);
    } else if (ack->has_late && ack->late) {
        /* the step committed without this push (its contributors were chosen without us) */
        c->stats.pushes_late++;
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, WAIT_LOG_MS, "push arrived after its step committed",
                            "shard=%u seq=%" PRIu64 " step=%" PRIu64, s, slot->seq, slot->step);
    } else {
        if (slot->echo_rows && part->n_echo > 0)
            take_echo(c, s, ack, slot, part);
        c->stats.rows_applied += ack->applied;
        c->stats.rows_rejected += ack->rejected;
        c->stats.rows_dropped_stale += ack->dropped_stale;
        if (ack->rejected && c->m.not_applied_nonfinite)
            spw_counter_add(c->m.not_applied_nonfinite, ack->rejected);
        if (ack->dropped_stale && c->m.not_applied_stale)
            spw_counter_add(c->m.not_applied_stale, ack->dropped_stale);
    }
    spw_psc__push_part_done(c, slot, s);
}

static void count_bad(spw_ps_client_t *c, uint32_t s, const char *why)
{
    c->stats.bad_replies++;
    if (c->m.bad_replies)
        spw_counter_inc(c->m.bad_replies);
    SPW_LOG_RATELIMITED(SPW_LOG_WARN, WAIT_LOG_MS, "dropped a reply", "shard=%u why=\"%s\"", s,
                        why);
}

static void handle_reply(spw_ps_client_t *c, uint32_t s, const void *data, size_t len)
{
    spw_arena_reset(c->arena);
    Sparrow__Reply *r = NULL;
    spw_err_t err = spw_wire_unpack_reply(data, len, c->max_reply, c->arena, &r);
    if (err) {
        count_bad(c, s, spw_err_str(err));
        return;
    }
    uint64_t id = r->request_id;
    bool push = (id & SPW_PSC_ID_PUSH) != 0;
    uint32_t idx = (uint32_t)(id & SPW_PSC_ID_IDX_MASK);
    struct spw_psc__part *part = NULL;
    if (id != 0) {
        if (push && idx < c->window && c->ring[idx].busy)
            part = &c->ring[idx].parts[s];
        else if (!push && idx < SPW_PS_CLIENT_MAX_PULLS && c->pulls[idx].busy)
            part = &c->pulls[idx].parts[s];
        if (part && (part->state != PSC_PART_PENDING || part->request_id != id))
            part = NULL;
    }
    if (r->has_error && r->error != SPARROW__ERROR_CODE__ERROR_NONE) {
        on_error(c, s, r, push, idx, part);
        return;
    }
    if (!part) {
        c->stats.late_replies++;
        return;
    }
    if (push && r->body_case == SPARROW__REPLY__BODY_PUSH) {
        if (c->debug_drop_acks > 0) {
            c->debug_drop_acks--;
            return;
        }
        shard_answered(c, s);
        on_push_ack(c, s, r->push, &c->ring[idx], part);
    } else if (!push && r->body_case == SPARROW__REPLY__BODY_PULL) {
        shard_answered(c, s);
        on_pull_reply(c, s, r, &c->pulls[idx], part);
    } else {
        spw_psc__set_sticky(c, SPW_ERR_RPC, "shard %u (%s) answered a %s with reply body %d", s,
                            c->shards[s].endpoint, push ? "push" : "pull", (int)r->body_case);
        if (push) {
            spw_psc__push_part_done(c, &c->ring[idx], s);
        } else {
            c->pulls[idx].failed = true;
            spw_psc__pull_part_done(c, &c->pulls[idx], s);
        }
    }
}

static void drain(spw_ps_client_t *c, uint32_t s)
{
    for (int i = 0; i < DRAIN_BURST && c->shards[s].sock; i++) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, c->shards[s].sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        if (zmq_msg_more(&msg)) {
            /* A shard sends one frame per reply: drop the whole multi-frame message. */
            while (zmq_msg_more(&msg)) {
                zmq_msg_close(&msg);
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, c->shards[s].sock, ZMQ_DONTWAIT) < 0)
                    break;
            }
            zmq_msg_close(&msg);
            count_bad(c, s, "multi-frame reply");
            continue;
        }
        handle_reply(c, s, zmq_msg_data(&msg), zmq_msg_size(&msg));
        zmq_msg_close(&msg);
    }
}

/* Reads the monitor's events of shard s: a failed handshake is logged (rate-limited) and
 * counted; the requests keep waiting, since an operator may fix the keys or the allow-list. */
static void drain_monitor(spw_ps_client_t *c, uint32_t s)
{
    struct spw_psc__shard *sh = &c->shards[s];
    for (int i = 0; i < DRAIN_BURST && sh->mon; i++) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, sh->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        while (zmq_msg_more(&ev)) { /* the endpoint frame */
            zmq_msg_close(&ev);
            zmq_msg_init(&ev);
            if (zmq_msg_recv(&ev, sh->mon, ZMQ_DONTWAIT) < 0)
                break;
        }
        zmq_msg_close(&ev);
        if (!(event & HANDSHAKE_FAILED))
            continue;
        c->stats.auth_failures++;
        if (c->m.errors[SPARROW__ERROR_CODE__ERROR_UNAUTHORIZED])
            spw_counter_inc(c->m.errors[SPARROW__ERROR_CODE__ERROR_UNAUTHORIZED]);
        uint64_t suppressed = 0;
        if (SPW_LOG_ERROR <= spw_log_threshold &&
            spw_log_ratelimit_pass(&sh->auth_rl, WAIT_LOG_MS, &suppressed))
            spw_log_write(SPW_LOG_ERROR, "CURVE handshake with shard failed",
                          "shard=%u endpoint=%s reason=\"%s\" detail=%u client_public_key=%s"
                          " suppressed=%" PRIu64,
                          s, sh->endpoint,
                          event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                              ? "key refused (not on the shard's allow-list?)"
                          : event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                              ? "protocol (wrong server key?)"
                              : "no detail",
                          value, c->curve.public_key, suppressed);
    }
}

/* ---- deadlines ---- */

/* Calls fn for every pending part (of shard s, or of every shard when s is UINT32_MAX). */
static void foreach_pending(spw_ps_client_t *c, uint32_t s,
                            void (*fn)(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                                       struct spw_psc__part *part, void *opaque),
                            void *opaque)
{
    uint32_t lo = s == UINT32_MAX ? 0 : s, hi = s == UINT32_MAX ? c->n_shards : s + 1;
    for (uint32_t i = 0; i < SPW_PS_CLIENT_MAX_PULLS; i++) {
        if (!c->pulls[i].busy || c->pulls[i].pending == 0)
            continue;
        for (uint32_t t = lo; t < hi; t++)
            if (c->pulls[i].parts[t].state == PSC_PART_PENDING)
                fn(c, t, false, i, &c->pulls[i].parts[t], opaque);
    }
    if (c->outstanding == 0)
        return;
    for (uint32_t i = 0; i < c->window; i++) {
        if (!c->ring[i].busy)
            continue;
        for (uint32_t t = lo; t < hi; t++)
            if (c->ring[i].parts[t].state == PSC_PART_PENDING)
                fn(c, t, true, i, &c->ring[i].parts[t], opaque);
    }
}

static void min_deadline(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                         struct spw_psc__part *part, void *opaque)
{
    (void)c, (void)s, (void)push, (void)idx;
    uint64_t *min = opaque;
    if (part->deadline_ms < *min)
        *min = part->deadline_ms;
}

struct expiry {
    uint64_t now;
    uint8_t *expired; /* per shard */
    bool any;
};

static void mark_expired(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                         struct spw_psc__part *part, void *opaque)
{
    (void)c, (void)push, (void)idx;
    struct expiry *ex = opaque;
    if (part->deadline_ms <= ex->now) {
        ex->expired[s] = 1;
        ex->any = true;
    }
}

static void oldest_sent(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                        struct spw_psc__part *part, void *opaque)
{
    (void)c, (void)s, (void)push, (void)idx;
    uint64_t *min = opaque;
    if (part->sent_ms < *min)
        *min = part->sent_ms;
}

static void resend(spw_ps_client_t *c, uint32_t s, bool push, uint32_t idx,
                   struct spw_psc__part *part, void *opaque)
{
    (void)opaque;
    spw_psc__send(c, s, push, idx, part);
}

/* Shard s let a request pass its deadline: reconnect, resend everything pending on it with a
 * longer timeout, and say that we are waiting. */
static void shard_timed_out(spw_ps_client_t *c, uint32_t s, uint64_t now)
{
    struct spw_psc__shard *sh = &c->shards[s];
    c->stats.timeouts++;
    if (c->m.timeouts)
        spw_counter_inc(c->m.timeouts);
    if (sh->backoff < MAX_BACKOFF_SHIFT)
        sh->backoff++;
    if (!sh->waiting) {
        uint64_t oldest = now;
        foreach_pending(c, s, oldest_sent, &oldest);
        sh->waiting = true;
        sh->waiting_since_ms = oldest;
    }
    uint64_t suppressed = 0;
    if (SPW_LOG_WARN <= spw_log_threshold &&
        spw_log_ratelimit_pass(&sh->rl, WAIT_LOG_MS, &suppressed))
        spw_log_write(SPW_LOG_WARN, "waiting for shard",
                      "shard=%u endpoint=%s pending=%u waited_ms=%" PRIu64
                      " next_timeout_ms=%" PRIu64 " suppressed=%" PRIu64,
                      s, sh->endpoint, sh->pending, now - sh->waiting_since_ms,
                      part_timeout(c, s, true), suppressed);
    reconnect(c, s);
    foreach_pending(c, s, resend, NULL);
}

spw_err_t spw_psc__progress(spw_ps_client_t *c, uint64_t max_wait_ms)
{
    uint64_t now = spw_time_mono_ms();
    uint64_t next = UINT64_MAX;
    foreach_pending(c, UINT32_MAX, min_deadline, &next);
    uint64_t wait = max_wait_ms;
    if (next <= now)
        wait = 0;
    else if (next - now < wait)
        wait = next - now;
    zmq_pollitem_t *items = c->items;
    int k = 0;
    for (uint32_t s = 0; s < c->n_shards; s++) {
        if (!c->shards[s].sock)
            continue;
        items[k] = (zmq_pollitem_t){c->shards[s].sock, 0, ZMQ_POLLIN, 0};
        c->item_shard[k++] = s;
        if (c->shards[s].mon) {
            items[k] = (zmq_pollitem_t){c->shards[s].mon, 0, ZMQ_POLLIN, 0};
            c->item_shard[k++] = s | MONITOR_ITEM;
        }
    }
    int rc = zmq_poll(items, k, (long)wait);
    if (rc < 0 && zmq_errno() != EINTR)
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, WAIT_LOG_MS, "zmq_poll failed", "err=\"%s\"",
                            zmq_strerror(zmq_errno()));
    for (int i = 0; rc > 0 && i < k; i++) {
        if (!(items[i].revents & ZMQ_POLLIN))
            continue;
        if (c->item_shard[i] & MONITOR_ITEM)
            drain_monitor(c, c->item_shard[i] & ~MONITOR_ITEM);
        else
            drain(c, c->item_shard[i]);
    }
    now = spw_time_mono_ms();
    if (next > now)
        return c->sticky;
    memset(c->expired, 0, c->n_shards);
    struct expiry ex = {now, c->expired, false};
    foreach_pending(c, UINT32_MAX, mark_expired, &ex);
    for (uint32_t s = 0; ex.any && s < c->n_shards; s++)
        if (c->expired[s])
            shard_timed_out(c, s, now);
    return c->sticky;
}
