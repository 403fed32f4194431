/* The coordinator client: registration, a heartbeat thread, clocks with held replies, checkpoint
 * and restore reports, and the manifest offsets the coordinator hands out. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "sparrow/arena.h"
#include "sparrow/coord_client.h"
#include "sparrow/curve.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"
#include "coord_int.h"

/* Fields other than the atomics are owned by the caller's thread; the heartbeat thread owns
 * hb_sock and reads only the immutable strings. */
struct spw_coord_client {
    struct spw_coord_client_conf conf;
    char *endpoint, *member_id;
    struct spw_curve_client_keys curve; /* a copy; disabled: plaintext */
    uint64_t incarnation;
    void *ctx, *sock, *hb_sock;
    void *query_sock; /* spw_coord_client_refresh_offsets (created on first use) */
    pthread_t hb_thread;
    bool hb_started;
    atomic_bool stop;
    atomic_bool unknown; /* the coordinator answered a heartbeat: not registered */
    atomic_uint_fast64_t hb_last_reply_ms;
    spw_arena_t *arena;
    struct spw_wire_buf out;
    struct spw_coord_offset *offsets;
    size_t n_offsets;
    uint64_t latest_epoch, generation;
    bool recovery_continue; /* the coordinator's last reply said coordinator.recovery=continue */
    uint32_t clock_interval_ms; /* the last reply's ClockReply.clock_interval_ms (0: none) */
    uint64_t registrations;     /* registrations so far (each makes a waiting Clock resend) */
    uint32_t trainer_id;        /* sent with every Clock (0: none) */
    bool input_done;            /* every Clock says the input ended (Clock.input_done) */
    spw_coord_wait_fn wait;
    void *wait_opaque;
};

static void *make_socket(spw_coord_client_t *c)
{
    void *s = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int zero = 0;
    int64_t maxmsg = SPW_COORD_MAX_FRAME;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    char errstr[256];
    if (spw_curve_client_apply(&c->curve, s, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("coordinator socket", "endpoint=%s error=\"%s\"", c->endpoint, errstr);
        zmq_close(s);
        return NULL;
    }
    if (zmq_connect(s, c->endpoint) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

static spw_err_t send_msg(void *sock, struct spw_wire_buf *out, Sparrow__CoordMessage *msg)
{
    msg->has_version = true;
    msg->version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    out->len = 0;
    spw_err_t rc = spw_wire_pack(&msg->base, out);
    if (rc != SPW_OK)
        return rc;
    return zmq_send(sock, out->data, out->len, ZMQ_DONTWAIT) < 0 ? SPW_ERR_RPC : SPW_OK;
}

static void *hb_main(void *arg)
{
    spw_coord_client_t *c = arg;
    struct spw_wire_buf out = {0};
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    uint64_t next = 0;
    while (!atomic_load(&c->stop)) {
        uint64_t now = spw_time_mono_ms();
        if (now >= next) {
            Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
            Sparrow__Heartbeat hb = SPARROW__HEARTBEAT__INIT;
            hb.member_id = c->member_id;
            msg.body_case = SPARROW__COORD_MESSAGE__BODY_HEARTBEAT;
            msg.heartbeat = &hb;
            send_msg(c->hb_sock, &out, &msg);
            next = now + c->conf.heartbeat_ms;
        }
        zmq_pollitem_t it = {c->hb_sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0)
            continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, c->hb_sock, ZMQ_DONTWAIT) >= 0) {
            Sparrow__CoordMessage *rep = NULL;
            spw_arena_reset(arena);
            if (arena &&
                spw_wire_unpack_coord(zmq_msg_data(&m), zmq_msg_size(&m), SPW_COORD_MAX_FRAME,
                                      arena, &rep) == SPW_OK &&
                rep->body_case == SPARROW__COORD_MESSAGE__BODY_CLOCK_REPLY) {
                atomic_store(&c->hb_last_reply_ms, spw_time_mono_ms());
                if (rep->clock_reply->has_registered && !rep->clock_reply->registered)
                    atomic_store(&c->unknown, true);
            }
        }
        zmq_msg_close(&m);
    }
    spw_arena_destroy(arena);
    free(out.data);
    return NULL;
}

static spw_err_t send_register(spw_coord_client_t *c)
{
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__Register r = SPARROW__REGISTER__INIT;
    r.has_role = r.has_incarnation = true;
    r.role = (Sparrow__MemberRole)c->conf.role;
    r.member_id = c->member_id;
    r.incarnation = c->incarnation;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_REGISTER;
    msg.register_ = &r;
    return send_msg(c->sock, &c->out, &msg);
}

static void take_offsets(spw_coord_client_t *c, const Sparrow__ClockReply *cr)
{
    if (cr->n_offsets == 0 || cr->n_offsets > SPW_COORD_MAX_PARTITIONS)
        return;
    struct spw_coord_offset *o = calloc(cr->n_offsets, sizeof(*o));
    if (!o)
        return;
    for (size_t i = 0; i < cr->n_offsets; i++) {
        spw_coord__offset_from_pb(cr->offsets[i], &o[i]);
        if (o[i].offset < 0)
            o[i].offset = 0;
    }
    free(c->offsets);
    c->offsets = o;
    c->n_offsets = cr->n_offsets;
}

/* Receives one ClockReply within timeout_ms: 1 got one (*out valid until the next call), 0 none,
 * <0 stop. */
static int recv_reply_on(spw_coord_client_t *c, void *sock, int timeout_ms,
                         const Sparrow__ClockReply **out)
{
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    if (spw_signal_stop_requested())
        return -1;
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return 0;
    zmq_msg_t m;
    zmq_msg_init(&m);
    int got = 0;
    if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) >= 0) {
        Sparrow__CoordMessage *rep = NULL;
        spw_arena_reset(c->arena);
        if (spw_wire_unpack_coord(zmq_msg_data(&m), zmq_msg_size(&m), SPW_COORD_MAX_FRAME, c->arena,
                                  &rep) == SPW_OK &&
            rep->body_case == SPARROW__COORD_MESSAGE__BODY_CLOCK_REPLY) {
            const Sparrow__ClockReply *cr = rep->clock_reply;
            for (size_t i = 0; i < cr->n_offsets; i++)
                if (!cr->offsets[i]->has_partition || cr->offsets[i]->partition < 0)
                    goto out;
            if (cr->has_generation)
                c->generation = cr->generation;
            if (cr->has_latest_epoch)
                c->latest_epoch = cr->latest_epoch;
            /* heartbeat answers go to the other socket: every reply here is a full one */
            c->recovery_continue = cr->has_recovery_continue && cr->recovery_continue;
            c->clock_interval_ms = cr->has_clock_interval_ms ? cr->clock_interval_ms : 0;
            *out = cr;
            got = 1;
        }
    }
out:
    zmq_msg_close(&m);
    return got;
}

static int recv_reply(spw_coord_client_t *c, int timeout_ms, const Sparrow__ClockReply **out)
{
    return recv_reply_on(c, c->sock, timeout_ms, out);
}

static spw_err_t do_register(spw_coord_client_t *c, int64_t wait_ms)
{
    uint64_t start = spw_time_mono_ms();
    for (;;) {
        /* a fresh socket: replies to an earlier attempt must not be taken for this one's */
        void *s = make_socket(c);
        if (!s)
            return SPW_ERR_RPC;
        if (c->sock)
            zmq_close(c->sock);
        c->sock = s;
        send_register(c);
        uint64_t until = spw_time_mono_ms() + c->conf.register_timeout_ms;
        while (spw_time_mono_ms() < until) {
            const Sparrow__ClockReply *cr = NULL;
            int r = recv_reply(c, 50, &cr);
            if (r < 0)
                return SPW_ERR_STOPPED;
            if (r == 1 && cr->has_registered && cr->registered) {
                take_offsets(c, cr);
                atomic_store(&c->unknown, false);
                c->registrations++;
                return SPW_OK;
            }
        }
        if (wait_ms >= 0 && spw_time_mono_ms() - start >= (uint64_t)wait_ms)
            return SPW_ERR_TIMEOUT;
    }
}

spw_coord_client_t *spw_coord_client_new(const struct spw_coord_client_conf *conf, int64_t wait_ms,
                                         char *errstr, size_t errstr_size)
{
    spw_coord_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    c->conf = *conf;
    c->conf.curve = NULL;
    if (conf->curve)
        c->curve = *conf->curve;
    if (c->conf.heartbeat_ms < 10)
        c->conf.heartbeat_ms = 10;
    if (c->conf.register_timeout_ms < 10)
        c->conf.register_timeout_ms = 1000;
    c->endpoint = strdup(conf->endpoint);
    c->member_id = strdup(conf->member_id);
    c->incarnation = ((uint64_t)spw_time_wall_ms() << 16) ^ (uint64_t)getpid();
    c->arena = spw_arena_new(1 << 16, (size_t)SPW_COORD_MAX_FRAME * 4);
    c->ctx = zmq_ctx_new();
    if (!c->endpoint || !c->member_id || !c->arena || !c->ctx) {
        snprintf(errstr, errstr_size, "out of memory");
        goto err;
    }
    c->hb_sock = make_socket(c);
    if (!c->hb_sock) {
        snprintf(errstr, errstr_size, "cannot connect to %s", c->endpoint);
        goto err;
    }
    spw_err_t rc = do_register(c, wait_ms);
    if (rc != SPW_OK) {
        snprintf(errstr, errstr_size, "registering with %s: %s", c->endpoint, spw_err_str(rc));
        goto err;
    }
    if (pthread_create(&c->hb_thread, NULL, hb_main, c) != 0) {
        snprintf(errstr, errstr_size, "cannot start the heartbeat thread");
        goto err;
    }
    c->hb_started = true;
    return c;
err:
    spw_coord_client_destroy(c);
    return NULL;
}

spw_err_t spw_coord_client_leave(spw_coord_client_t *c)
{
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__Leave l = SPARROW__LEAVE__INIT;
    l.member_id = c->member_id;
    l.has_incarnation = true;
    l.incarnation = c->incarnation;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_LEAVE;
    msg.leave = &l;
    spw_err_t rc = send_msg(c->sock, &c->out, &msg);
    /* the sockets linger 0: give the Leave a moment to go out when the client is destroyed */
    int linger = 500;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof(linger));
    return rc;
}

void spw_coord_client_destroy(spw_coord_client_t *c)
{
    if (!c)
        return;
    atomic_store(&c->stop, true);
    if (c->hb_started)
        pthread_join(c->hb_thread, NULL);
    if (c->sock)
        zmq_close(c->sock);
    if (c->hb_sock)
        zmq_close(c->hb_sock);
    if (c->query_sock)
        zmq_close(c->query_sock);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    spw_arena_destroy(c->arena);
    free(c->out.data);
    free(c->offsets);
    free(c->endpoint);
    free(c->member_id);
    spw_curve_client_wipe(&c->curve);
    free(c);
}

static spw_err_t send_clock(spw_coord_client_t *c, uint64_t clock, uint64_t examples)
{
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__Clock ck = SPARROW__CLOCK__INIT;
    ck.member_id = c->member_id;
    ck.has_step = true;
    ck.step = clock;
    ck.has_examples = true;
    ck.examples = examples;
    ck.has_trainer_id = c->trainer_id != 0;
    ck.trainer_id = c->trainer_id;
    ck.has_input_done = c->input_done;
    ck.input_done = c->input_done;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK;
    msg.clock = &ck;
    return send_msg(c->sock, &c->out, &msg);
}

spw_err_t spw_coord_client_clock(spw_coord_client_t *c, uint64_t clock, struct spw_coord_event *ev)
{
    return spw_coord_client_clock_step(c, clock, 0, ev);
}

spw_err_t spw_coord_client_clock_step(spw_coord_client_t *c, uint64_t clock, uint64_t examples,
                                      struct spw_coord_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    send_clock(c, clock, examples);
    uint64_t regs = c->registrations;
    for (;;) {
        if (atomic_load(&c->unknown)) {
            SPW_WARN("coordinator does not know this member: registering again", "member=%s",
                     c->member_id);
            spw_err_t rc = do_register(c, -1);
            if (rc != SPW_OK)
                return rc;
        }
        if (c->registrations != regs) {
            /* registered again (here or in the wait function): the coordinator forgot the Clock */
            regs = c->registrations;
            send_clock(c, clock, examples);
        }
        const Sparrow__ClockReply *cr = NULL;
        int r = recv_reply(c, c->wait ? 20 : 50, &cr);
        if (r < 0)
            return SPW_ERR_STOPPED;
        if (r == 0) {
            if (c->wait)
                c->wait(c->wait_opaque, 20);
            continue;
        }
        ev->generation = c->generation;
        ev->has_clock = false;
        if (cr->has_restore && cr->restore) {
            take_offsets(c, cr);
            ev->kind = SPW_COORD_EV_RESTORE;
            ev->epoch = cr->restore_epoch;
            return SPW_OK;
        }
        if (cr->has_checkpoint_epoch && cr->checkpoint_epoch != 0) {
            ev->kind = SPW_COORD_EV_CHECKPOINT;
            ev->epoch = cr->checkpoint_epoch;
            return SPW_OK;
        }
        if (cr->has_proceed && cr->proceed) {
            take_offsets(c, cr);
            ev->kind = SPW_COORD_EV_PROCEED;
            ev->drop_cache = cr->has_drop_cache && cr->drop_cache;
            ev->commit = cr->has_commit && cr->commit;
            ev->step = cr->has_step ? cr->step : 0;
            ev->has_clock = cr->has_clock;
            ev->clock = cr->clock;
            return SPW_OK;
        }
        /* a stale `registered` reply: keep waiting */
    }
}

void spw_coord_client_set_trainer_id(spw_coord_client_t *c, uint32_t trainer_id)
{
    c->trainer_id = trainer_id;
}

void spw_coord_client_set_input_done(spw_coord_client_t *c)
{
    c->input_done = true;
}

void spw_coord_client_set_wait(spw_coord_client_t *c, spw_coord_wait_fn wait, void *opaque)
{
    c->wait = wait;
    c->wait_opaque = opaque;
}

spw_err_t spw_coord_client_checkpoint_report(spw_coord_client_t *c, uint64_t epoch,
                                             const struct spw_coord_offset *offsets, size_t n,
                                             uint64_t examples)
{
    if (n > SPW_COORD_MAX_PARTITIONS)
        return SPW_ERR_TOO_BIG;
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__CheckpointReport r = SPARROW__CHECKPOINT_REPORT__INIT;
    Sparrow__PartitionOffset *offs = calloc(n ? n : 1, sizeof(*offs));
    Sparrow__PartitionOffset **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    if (!offs || !ptrs) {
        free(offs);
        free(ptrs);
        return SPW_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        spw_coord__offset_to_pb(&offsets[i], &offs[i]);
        ptrs[i] = &offs[i];
    }
    r.member_id = c->member_id;
    r.has_epoch = r.has_examples = true;
    r.epoch = epoch;
    r.examples = examples;
    r.n_offsets = n;
    r.offsets = ptrs;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT;
    msg.checkpoint_report = &r;
    spw_err_t rc = send_msg(c->sock, &c->out, &msg);
    free(ptrs);
    free(offs);
    return rc;
}

spw_err_t spw_coord_client_restore_report(spw_coord_client_t *c, uint64_t generation)
{
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__RestoreReport r = SPARROW__RESTORE_REPORT__INIT;
    r.member_id = c->member_id;
    r.has_generation = true;
    r.generation = generation;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_RESTORE_REPORT;
    msg.restore_report = &r;
    return send_msg(c->sock, &c->out, &msg);
}

spw_err_t spw_coord_client_rejoin(spw_coord_client_t *c)
{
    /* the coordinator forgets a held Clock at a Register: a wait in progress sends it again */
    c->registrations++;
    return send_register(c);
}

spw_err_t spw_coord_client_refresh_offsets(spw_coord_client_t *c, int timeout_ms)
{
    if (!c->query_sock && !(c->query_sock = make_socket(c)))
        return SPW_ERR_RPC;
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__Heartbeat hb = SPARROW__HEARTBEAT__INIT;
    hb.member_id = c->member_id;
    hb.has_want_offsets = hb.want_offsets = true;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_HEARTBEAT;
    msg.heartbeat = &hb;
    spw_err_t err = send_msg(c->query_sock, &c->out, &msg);
    uint64_t until = spw_time_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    while (err == SPW_OK) {
        const Sparrow__ClockReply *cr = NULL;
        int r = recv_reply_on(c, c->query_sock, 20, &cr);
        if (r < 0)
            return SPW_ERR_STOPPED;
        if (r == 1) {
            if (!cr->registered)
                return SPW_ERR_NOT_FOUND;
            if (cr->n_offsets > 0)
                take_offsets(c, cr);
            return SPW_OK;
        }
        if (spw_time_mono_ms() >= until)
            err = SPW_ERR_TIMEOUT;
    }
    /* a late answer must not be taken for the next question's: a fresh socket next time */
    zmq_close(c->query_sock);
    c->query_sock = NULL;
    return err;
}

spw_err_t spw_coord_client_offset(const spw_coord_client_t *c, const char *topic, int32_t partition,
                                  int64_t *offset, uint32_t *skip)
{
    for (size_t i = 0; i < c->n_offsets; i++) {
        if (!c->offsets[i].mark && c->offsets[i].partition == partition &&
            strcmp(c->offsets[i].topic, topic) == 0) {
            *offset = c->offsets[i].offset;
            *skip = c->offsets[i].skip;
            return SPW_OK;
        }
    }
    return SPW_ERR_NOT_FOUND;
}

bool spw_coord_client_recovery_continue(const spw_coord_client_t *c)
{
    return c->recovery_continue;
}

uint32_t spw_coord_client_clock_interval_ms(const spw_coord_client_t *c)
{
    return c->clock_interval_ms;
}

const struct spw_coord_offset *spw_coord_client_offsets(const spw_coord_client_t *c, size_t *n)
{
    *n = c->n_offsets;
    return c->offsets;
}

uint64_t spw_coord_client_latest_epoch(const spw_coord_client_t *c)
{
    return c->latest_epoch;
}

uint64_t spw_coord_client_generation(const spw_coord_client_t *c)
{
    return c->generation;
}
