/* The coordinator's server: a ROUTER for members, a DEALER per shard, membership, clocks,
 * checkpoint epochs and global recovery (see coordinator.h for the protocol). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "coord_int.h"
#include "sparrow/arena.h"
#include "sparrow/coordinator.h"
#include "sparrow/curve.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

#define MAX_RID 256
#define ID_MAX  128
/* Pause before a recovery whose shard restore failed is started again. */
#define COORD_RESTORE_RETRY_MS 1000

enum phase {
    PHASE_RUN,
    PHASE_CKPT_TRAINERS, /* epoch open: waiting for every live trainer's report */
    PHASE_CKPT_SHARDS,   /* waiting for every shard's CheckpointReply */
    PHASE_REC_TRAINERS,  /* recovery: waiting for every live trainer's RestoreReport */
    PHASE_REC_SHARDS,    /* recovery: waiting for every shard's RestoreReply */
};

static const char *const phase_names[] = {"run", "checkpoint-trainers", "checkpoint-shards",
                                          "recover-trainers", "recover-shards"};

/* One member; owned by the server's thread. */
struct member {
    bool used, live;
    int role;
    char id[ID_MAX];
    uint8_t rid[MAX_RID]; /* routing id of the socket that sent its last Clock/Register */
    size_t rid_len;
    uint64_t last_seen_ms;
    uint64_t incarnation;
    bool based;   /* base fixed at its first Clock */
    int64_t base; /* effective clock = base + step */
    uint64_t clock;
    bool waiting; /* a Clock is held */
    uint64_t told_epoch, told_gen;
    bool reported; /* for the open epoch */
    struct spw_coord_offset *offsets;
    size_t n_offsets;
    uint64_t examples_reported, examples_counted;
    /* examples of its Clocks since its last report that became LATEST (or the last restore): what
     * its partitions' next owners train again when it is removed under coordinator.recovery=
     * continue (pushes still in flight at a crash aside) */
    uint64_t examples_since_latest;
    uint64_t restored_gen;
    bool pending_commit, pending_drop, pending_offsets;
    uint32_t trainer_id; /* the id its pushes carry (from its Clocks) */
    /* its input ended (Clock.input_done): it wants a checkpoint epoch; its report to the open
     * epoch was made after that; that epoch completed, so everything it trained is in LATEST and
     * its removal rolls nothing back */
    bool wants_final, final_reported, finished;
    uint64_t step_examples; /* examples of the step its clock counts (two-phase weight) */
    /* two-phase modes: its synchronous unit, whether the unit's steps wait for it (elastic
     * moves a straggler out), its step times, and when it was last released */
    uint32_t unit;
    bool in_barrier;
    struct spw_coord_elastic elastic;
    uint64_t released_ms; /* 0: not since it (re)registered */
    /* whether the step its clock counts carried a step tag (it was in the barrier when it
     * computed it: the barrier changes only at a release); one pushed
     * asynchronously has nothing pending for its unit's commit */
    bool step_tagged;
};

struct shard {
    char endpoint[512];
    void *sock;
    bool pending;     /* a checkpoint / restore request outstanding */
    int pending_body; /* its kind and epoch, to send it again on a new socket */
    uint64_t pending_epoch;
    uint64_t req_id;
    uint64_t sent_ms;
    bool stats_pending;
    uint64_t stats_id, stats_sent_ms;
    uint64_t last_reply_ms;
    int64_t started_ms; /* from StatsReply; 0 unknown */
    bool down;          /* no answer for member_timeout */
    char checksum[17];
    uint64_t rows;
    spw_err_t result;
    struct spw_coord_offset *upd; /* model-updates offsets of its last CheckpointReply (malloc) */
    size_t n_upd;
    bool commit_pending; /* a CommitRequest outstanding (two-phase steps) */
    uint64_t commit_id;
    spw_err_t commit_result;
};

struct spw_coord_server {
    struct spw_coord_server_conf conf;
    char *listen, *dir;
    void *ctx, *router;
    spw_curve_server_t *curve;               /* towards members; NULL: plaintext */
    struct spw_curve_client_keys shard_keys; /* towards the shards; disabled: plaintext */
    char endpoint[512];
    struct member members[SPW_COORD_MAX_MEMBERS];
    struct shard *shards;
    uint32_t n_shards;
    spw_arena_t *arena;
    struct spw_wire_buf out;
    enum phase phase;
    uint64_t epoch_open, next_epoch, deadline_ms;
    uint64_t generation;
    uint64_t req_seq;
    struct spw_coord_manifest cur; /* LATEST (or the recovery epoch) */
    uint64_t last_ckpt_ms, last_ckpt_clock;
    /* Clocks that moved a trainer's clock: in all, and when the last epoch closed (or the last
     * recovery completed). The time trigger wants one since: counted, not read from the clocks,
     * which a removal or a rebase can move back */
    uint64_t clocks_moved, clocks_moved_at_ckpt;
    bool ckpt_requested; /* SIGUSR1: a checkpoint as soon as one can open */
    uint64_t start_ms;
    bool initial_recovery_done;
    bool recovery_wanted;
    uint64_t restore_failed_ms; /* when the shards' restore last failed; 0 none (retry backoff) */
    struct spw_coord_server_stats stats;
    struct spw_coord__metrics m;
    uint64_t last_completed_ms; /* the last checkpoint completed (start before the first) */
    /* two-phase steps (sync, group:G): each unit's last step every shard applied, and the one
     * being committed (0: none) for commit_unit since commit_sent_ms; one commit at a time */
    uint64_t *unit_committed; /* SPW_COORD_MAX_MEMBERS */
    uint32_t n_units;
    uint32_t commit_unit;
    uint64_t commit_step, commit_sent_ms;
    uint32_t *commit_ids, *member_ids;      /* SPW_COORD_MAX_MEMBERS scratch */
    struct spw_coord_step_member *rule_tmp; /* SPW_COORD_MAX_MEMBERS scratch */
    double *speed_tmp;                      /* SPW_COORD_MAX_MEMBERS scratch */
    uint32_t *group_tmp; /* SPW_COORD_MAX_MEMBERS + 1 scratch: groups formed, units' starts */
};

/* ---- sending ---- */

/* True in the modes whose steps are two-phase: pushes wait on the shards for the step's commit. */
static bool two_phase(const spw_coord_server_t *srv)
{
    return spw_coord_mode_two_phase(&srv->conf.mode);
}

static bool is_trainer(const struct member *m)
{
    return m->live && m->role == SPARROW__MEMBER_ROLE__ROLE_TRAINER;
}

/* Two-phase: a trainer released into the next step of its unit, or out of the barrier. Its clock
 * counts its unit's steps: one that came too late (backup workers) or rejoins skips the steps
 * committed without it, so that its pushes carry the step being formed. */
static void release_two_phase(spw_coord_server_t *srv, struct member *m, Sparrow__ClockReply *cr)
{
    uint64_t committed = srv->unit_committed[m->unit];
    if (m->in_barrier && m->elastic.out) {
        m->in_barrier = false;
        SPW_WARN("trainer leaves the barrier",
                 "member=%s unit=%u step_ms=%.1f step=%" PRIu64
                 " reason=\"slower than coordinator.elastic.factor x the others\"",
                 m->id, m->unit, m->elastic.ewma_ms, m->clock);
    } else if (!m->in_barrier && !m->elastic.out) {
        /* it keeps up again: back in here, once its unit reached its clock (the release loop
         * holds one that ran ahead while asynchronous). Back in at its Clock instead, it could
         * hold the step the others already pushed while a due checkpoint held its release:
         * neither could go on */
        m->in_barrier = true;
        SPW_INFO("trainer rejoins the barrier",
                 "member=%s unit=%u step_ms=%.1f step=%" PRIu64 " unit_step=%" PRIu64, m->id,
                 m->unit, m->elastic.ewma_ms, m->clock, committed);
    }
    if (!m->in_barrier)
        return; /* asynchronous: its pushes apply at once, penalised by their staleness */
    if (committed > m->clock) {
        m->base += (int64_t)(committed - m->clock);
        m->clock = committed;
    }
    cr->has_step = true;
    cr->step = committed + 1;
}

static void send_to(spw_coord_server_t *srv, const uint8_t *rid, size_t rid_len,
                    const ProtobufCMessage *msg)
{
    srv->out.len = 0;
    if (spw_wire_pack(msg, &srv->out) != SPW_OK)
        return;
    if (zmq_send(srv->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return;
    zmq_send(srv->router, srv->out.data, srv->out.len, ZMQ_DONTWAIT);
}

/* LATEST's offsets as a reply carries them (reply_offsets_free after the send). */
struct reply_offsets {
    Sparrow__PartitionOffset *offs;
    Sparrow__PartitionOffset **ptrs;
};

/* Puts LATEST's offsets into cr (none when LATEST has none, or when memory runs out: the member
 * then resumes from the offsets it had). */
static void reply_offsets_attach(const spw_coord_server_t *srv, Sparrow__ClockReply *cr,
                                 struct reply_offsets *ro)
{
    size_t n = srv->cur.n_offsets;
    *ro = (struct reply_offsets){NULL, NULL};
    if (n == 0)
        return;
    ro->offs = calloc(n, sizeof(*ro->offs));
    ro->ptrs = calloc(n, sizeof(*ro->ptrs));
    if (!ro->offs || !ro->ptrs)
        return;
    for (size_t i = 0; i < n; i++) {
        spw_coord__offset_to_pb(&srv->cur.offsets[i], &ro->offs[i]);
        ro->ptrs[i] = &ro->offs[i];
    }
    cr->n_offsets = n;
    cr->offsets = ro->ptrs;
}

static void reply_offsets_free(struct reply_offsets *ro)
{
    free(ro->ptrs);
    free(ro->offs);
}

/* What a ClockReply tells a member. */
enum reply_kind {
    REPLY_PROCEED,    /* run the next step (with a pending drop, commit or offsets) */
    REPLY_CHECKPOINT, /* report for the open epoch */
    REPLY_RESTORE,    /* roll back to the current manifest */
    REPLY_REGISTERED, /* an answer to Register */
};

/* Sends a ClockReply of the given kind to m. */
static void reply_member(spw_coord_server_t *srv, struct member *m, enum reply_kind kind)
{
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__ClockReply cr = SPARROW__CLOCK_REPLY__INIT;
    msg.has_version = true;
    msg.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK_REPLY;
    msg.clock_reply = &cr;
    cr.has_proceed = cr.has_generation = cr.has_latest_epoch = cr.has_min_step = true;
    cr.generation = srv->generation;
    cr.latest_epoch = srv->stats.latest_epoch;
    uint64_t min = UINT64_MAX;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        if (is_trainer(&srv->members[i]) && srv->members[i].clock < min)
            min = srv->members[i].clock;
    cr.min_step = min == UINT64_MAX ? 0 : min;
    if (srv->conf.recovery == SPW_COORD_RECOVERY_CONTINUE) {
        cr.has_recovery_continue = true;
        cr.recovery_continue = true;
    }
    struct reply_offsets ro = {NULL, NULL};
    if (kind == REPLY_RESTORE || kind == REPLY_REGISTERED ||
        (kind == REPLY_PROCEED && m->pending_offsets))
        reply_offsets_attach(srv, &cr, &ro);
    switch (kind) {
    case REPLY_PROCEED:
        cr.proceed = true;
        /* not with a step trigger for checkpoints: that counts Clocks */
        if (srv->conf.mode.kind == SPW_COORD_ASYNC && srv->conf.async_clock_interval_ms &&
            !srv->conf.checkpoint_steps) {
            cr.has_clock_interval_ms = true;
            cr.clock_interval_ms = srv->conf.async_clock_interval_ms;
        }
        cr.has_drop_cache = cr.has_commit = true;
        cr.drop_cache = m->pending_drop;
        cr.commit = m->pending_commit;
        if (two_phase(srv)) /* the next step's pushes wait for their unit's commit */
            release_two_phase(srv, m, &cr);
        cr.has_clock = true;
        cr.clock = m->clock;
        m->released_ms = spw_time_mono_ms();
        m->pending_drop = m->pending_commit = m->pending_offsets = false;
        break;
    case REPLY_CHECKPOINT:
        cr.has_checkpoint_epoch = true;
        cr.checkpoint_epoch = srv->epoch_open;
        m->released_ms = 0; /* its next step time would count the pause */
        break;
    case REPLY_RESTORE:
        m->released_ms = 0;
        cr.has_restore = cr.has_restore_epoch = true;
        cr.restore = true;
        cr.restore_epoch = srv->cur.epoch;
        break;
    case REPLY_REGISTERED:
        cr.has_registered = true;
        cr.registered = true;
        break;
    }
    send_to(srv, m->rid, m->rid_len, &msg.base);
    reply_offsets_free(&ro);
}

/* ---- shards ---- */

static void *shard_socket(spw_coord_server_t *srv, const char *endpoint)
{
    void *s = zmq_socket(srv->ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int zero = 0;
    int64_t maxmsg = SPW_WIRE_DEFAULT_MAX_FRAME;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    char errstr[256];
    if (spw_curve_client_apply(&srv->shard_keys, s, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("shard socket", "endpoint=%s error=\"%s\"", endpoint, errstr);
        zmq_close(s);
        return NULL;
    }
    if (zmq_connect(s, endpoint) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

static void shard_send(spw_coord_server_t *srv, struct shard *sh, int body, uint64_t epoch,
                       uint64_t *id_out);

/* Drops anything queued to a shard that stopped answering (stale requests must not reach it
 * after it returns). A checkpoint or restore request still wanted goes again on the new socket
 * (the old one took it down with it: a restarted shard never saw it), within its first deadline;
 * a step commit is failed at once (the coordinator recovers) rather than after its timeout. */
static void shard_reset(spw_coord_server_t *srv, struct shard *sh)
{
    void *s = shard_socket(srv, sh->endpoint);
    if (!s)
        return;
    zmq_close(sh->sock);
    sh->sock = s;
    sh->stats_pending = false;
    if (sh->pending)
        shard_send(srv, sh, sh->pending_body, sh->pending_epoch, &sh->req_id);
    if (sh->commit_pending) {
        sh->commit_pending = false;
        sh->commit_result = SPW_ERR_RPC;
    }
}

static void shard_send(spw_coord_server_t *srv, struct shard *sh, int body, uint64_t epoch,
                       uint64_t *id_out)
{
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    Sparrow__CheckpointRequest ck = SPARROW__CHECKPOINT_REQUEST__INIT;
    Sparrow__RestoreRequest rs = SPARROW__RESTORE_REQUEST__INIT;
    Sparrow__StatsRequest st = SPARROW__STATS_REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    req.request_id = ++srv->req_seq;
    *id_out = req.request_id;
    if (body == SPARROW__REQUEST__BODY_CHECKPOINT) {
        ck.has_epoch = true;
        ck.epoch = epoch;
        req.body_case = SPARROW__REQUEST__BODY_CHECKPOINT;
        req.checkpoint = &ck;
    } else if (body == SPARROW__REQUEST__BODY_RESTORE) {
        rs.has_epoch = rs.has_generation = true;
        rs.epoch = epoch;
        rs.generation = srv->generation;
        req.body_case = SPARROW__REQUEST__BODY_RESTORE;
        req.restore = &rs;
    } else {
        req.body_case = SPARROW__REQUEST__BODY_STATS;
        req.stats = &st;
    }
    srv->out.len = 0;
    if (spw_wire_pack(&req.base, &srv->out) == SPW_OK)
        zmq_send(sh->sock, srv->out.data, srv->out.len, ZMQ_DONTWAIT);
}

/* Sends CommitRequest(step) of unit u to every shard: the contributions of its in-barrier
 * trainers that pushed step, weighted over their examples of it; every trainer of the unit is
 * named a member (the others' contributions of the step are late). */
static void commit_step(spw_coord_server_t *srv, uint32_t u, uint64_t step)
{
    size_t n_ids = 0, n_members = 0;
    uint64_t examples = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (!is_trainer(m) || m->unit != u)
            continue;
        srv->member_ids[n_members++] = m->trainer_id;
        if (!m->in_barrier || m->clock < step)
            continue;
        srv->commit_ids[n_ids++] = m->trainer_id;
        if (m->clock == step && m->step_tagged)
            examples += m->step_examples;
    }
    srv->stats.step_commits++;
    srv->stats.step_waited += n_ids;
    srv->stats.step_late += n_members - n_ids;
    SPW_DEBUG("step commit", "unit=%u step=%" PRIu64 " waited=%zu members=%zu examples=%" PRIu64, u,
              step, n_ids, n_members, examples);
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    Sparrow__CommitRequest cr = SPARROW__COMMIT_REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    req.body_case = SPARROW__REQUEST__BODY_COMMIT;
    req.commit = &cr;
    cr.has_step = cr.has_examples = cr.has_apply_late = true;
    cr.step = step;
    cr.examples = examples;
    cr.n_trainer_ids = n_ids;
    cr.trainer_ids = srv->commit_ids;
    cr.n_member_ids = n_members;
    cr.member_ids = srv->member_ids;
    cr.apply_late = srv->conf.sync.apply_late;
    srv->commit_unit = u;
    srv->commit_step = step;
    srv->commit_sent_ms = spw_time_mono_ms();
    for (uint32_t i = 0; i < srv->n_shards; i++) {
        struct shard *sh = &srv->shards[i];
        req.request_id = ++srv->req_seq;
        sh->commit_id = req.request_id;
        sh->commit_pending = true;
        sh->commit_result = SPW_ERR_TIMEOUT;
        srv->out.len = 0;
        if (spw_wire_pack(&req.base, &srv->out) == SPW_OK)
            zmq_send(sh->sock, srv->out.data, srv->out.len, ZMQ_DONTWAIT);
    }
}

/* The unit whose next step may commit (enough of its in-barrier trainers pushed it), round
 * robin from the unit after the last committed so that none starves; UINT32_MAX when none. One
 * pass groups the members by unit into rule_tmp (a counting sort: group_tmp holds each unit's
 * start), so that evaluating every unit costs two passes over the members, not one each. */
static uint32_t ready_unit(spw_coord_server_t *srv)
{
    uint32_t *start = srv->group_tmp;
    memset(start, 0, (srv->n_units + 1) * sizeof(*start));
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        if (is_trainer(&srv->members[i]) && srv->members[i].unit < srv->n_units)
            start[srv->members[i].unit + 1]++;
    for (uint32_t u = 0; u < srv->n_units; u++)
        start[u + 1] += start[u];
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (is_trainer(m) && m->unit < srv->n_units)
            srv->rule_tmp[start[m->unit]++] =
                (struct spw_coord_step_member){.clock = m->clock, .in_barrier = m->in_barrier};
    }
    /* start[u] is now unit u's end, start[u - 1] its start */
    for (uint32_t k = 0; k < srv->n_units; k++) {
        uint32_t u = (srv->commit_unit + 1 + k) % srv->n_units;
        uint32_t lo = u ? start[u - 1] : 0;
        if (spw_coord_step_ready(srv->rule_tmp + lo, start[u] - lo, srv->unit_committed[u] + 1,
                                 srv->conf.sync.backup))
            return u;
    }
    return UINT32_MAX;
}

/* Puts the live trainers in their units (sync: one; group:G: groups of G by order or speed) and
 * numbers every unit's steps from the highest step any unit committed or any trainer pushed:
 * called while no step is pending (a recovery, a completed checkpoint), so that a trainer moved
 * to another group never waits for steps it has passed. */
static void form_units(spw_coord_server_t *srv)
{
    if (!two_phase(srv))
        return;
    size_t n = 0;
    uint64_t top = 0;
    for (uint32_t u = 0; u < srv->n_units; u++)
        if (srv->unit_committed[u] > top)
            top = srv->unit_committed[u];
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (!is_trainer(m))
            continue;
        srv->speed_tmp[n++] = m->elastic.measured ? m->elastic.ewma_ms : 0.0;
        if (m->clock > top)
            top = m->clock;
    }
    uint32_t size = srv->conf.mode.kind == SPW_COORD_GROUP ? srv->conf.mode.param : (uint32_t)n;
    if (size == 0 || spw_coord_groups_assign(srv->conf.sync.group_by_speed ? srv->speed_tmp : NULL,
                                             n, size, srv->group_tmp) != SPW_OK)
        memset(srv->group_tmp, 0, (n ? n : 1) * sizeof(*srv->group_tmp));
    bool changed = false;
    uint32_t units = 1;
    size_t k = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        struct member *m = &srv->members[i];
        if (!is_trainer(m))
            continue;
        uint32_t g = srv->group_tmp[k++];
        changed |= g != m->unit;
        m->unit = g;
        if (g + 1 > units)
            units = g + 1;
    }
    srv->n_units = units;
    for (uint32_t u = 0; u < units; u++)
        srv->unit_committed[u] = top;
    if (changed && srv->conf.mode.kind == SPW_COORD_GROUP) {
        SPW_INFO("groups formed", "groups=%u size=%u trainers=%zu by=%s step=%" PRIu64, units, size,
                 n, srv->conf.sync.group_by_speed ? "speed" : "index", top);
        for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
            const struct member *m = &srv->members[i];
            if (is_trainer(m))
                SPW_INFO("group member", "member=%s group=%u trainer_id=%u step_ms=%.1f", m->id,
                         m->unit, m->trainer_id, m->elastic.ewma_ms);
        }
    }
}

/* The commit in flight: true once every shard answered (*ok: all applied it). */
static bool commit_done(const spw_coord_server_t *srv, bool *ok)
{
    *ok = true;
    for (uint32_t i = 0; i < srv->n_shards; i++) {
        if (srv->shards[i].commit_pending)
            return false;
        if (srv->shards[i].commit_result != SPW_OK)
            *ok = false;
    }
    return true;
}

static void shards_request(spw_coord_server_t *srv, int body, uint64_t epoch)
{
    uint64_t now = spw_time_mono_ms();
    for (uint32_t i = 0; i < srv->n_shards; i++) {
        struct shard *sh = &srv->shards[i];
        sh->pending = true;
        sh->pending_body = body;
        sh->pending_epoch = epoch;
        sh->result = SPW_ERR_TIMEOUT;
        sh->sent_ms = now;
        shard_send(srv, sh, body, epoch, &sh->req_id);
    }
}

static void start_recovery(spw_coord_server_t *srv, const char *reason);
static void evaluate(spw_coord_server_t *srv);

/* ---- membership ---- */

static struct member *find_member(spw_coord_server_t *srv, const char *id, bool create)
{
    struct member *free_slot = NULL;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        struct member *m = &srv->members[i];
        if (m->used && strcmp(m->id, id) == 0)
            return m;
        if (!m->used && !free_slot)
            free_slot = m;
    }
    if (!create || !free_slot)
        return NULL;
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->used = true;
    snprintf(free_slot->id, sizeof(free_slot->id), "%s", id);
    return free_slot;
}

static uint32_t live_trainers(const spw_coord_server_t *srv, uint64_t *min, uint64_t *max)
{
    uint32_t n = 0;
    *min = UINT64_MAX;
    *max = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (!is_trainer(m))
            continue;
        n++;
        if (m->clock < *min)
            *min = m->clock;
        if (m->clock > *max)
            *max = m->clock;
    }
    if (n == 0)
        *min = 0;
    return n;
}

/* level: INFO for a member that said it leaves, WARN for one lost */
static void remove_member(spw_coord_server_t *srv, struct member *m, const char *why,
                          enum spw_log_level level)
{
    SPW_LOG(level, "member removed", "member=%s reason=%s clock=%" PRIu64 " phase=%s", m->id, why,
            m->clock, phase_names[srv->phase]);
    m->live = false;
    m->waiting = false;
    srv->stats.members_removed++;
    if (m->role != SPARROW__MEMBER_ROLE__ROLE_TRAINER)
        return;
    if (m->finished) {
        /* its input ended and its last report is in LATEST: nothing of it to roll back or
         * train again (it has no partitions and pushes nothing after that epoch) */
        SPW_INFO("finished trainer removed without recovery",
                 "member=%s latest=%" PRIu64 " detail=\"everything it trained is in LATEST\"",
                 m->id, srv->stats.latest_epoch);
        m->finished = m->wants_final = false;
        return;
    }
    if (spw_coord_recovery_rolls_back(srv->conf.recovery, SPW_COORD_EVENT_TRAINER_REMOVED)) {
        /* its pushes since LATEST are applied, its offsets are not recorded: roll back (its
         * examples since LATEST are trained again with everyone's) */
        srv->stats.examples_retrained += m->examples_since_latest;
        m->examples_since_latest = 0;
        start_recovery(srv, "trainer removed");
        return;
    }
    /* continue: its pushes stay applied and its partitions resume from LATEST's offsets on
     * their next owners (Kafka's rebalance hands them over), so the examples it trained since
     * LATEST are trained twice. The barriers and an open epoch stop waiting for it (only live
     * trainers count); its report to an open epoch is dropped with it (epoch_reports), so
     * LATEST's offsets of its partitions stay where their new owners start. */
    srv->stats.continued++;
    srv->stats.examples_retrained += m->examples_since_latest;
    SPW_WARN("trainer removed without rollback",
             "member=%s retrained=%" PRIu64 " latest=%" PRIu64 " retrained_total=%" PRIu64
             " recovery=continue",
             m->id, m->examples_since_latest, srv->stats.latest_epoch,
             srv->stats.examples_retrained);
    m->examples_since_latest = 0;
}

static void copy_rid(struct member *m, const uint8_t *rid, size_t rid_len)
{
    m->rid_len = rid_len < MAX_RID ? rid_len : MAX_RID;
    memcpy(m->rid, rid, m->rid_len);
}

static void on_register(spw_coord_server_t *srv, const uint8_t *rid, size_t rid_len,
                        const Sparrow__Register *r)
{
    if (!r->member_id || !r->member_id[0] || strlen(r->member_id) >= ID_MAX)
        return;
    struct member *m = find_member(srv, r->member_id, true);
    if (!m) {
        SPW_WARN("member refused", "member=%s reason=\"too many members\"", r->member_id);
        return;
    }
    bool was_live = m->live;
    /* the same process rejoining (partitions moved) keeps its clock base: its steps go on */
    bool same_process = was_live && m->incarnation == r->incarnation;
    bool is_trn = !r->has_role || r->role == SPARROW__MEMBER_ROLE__ROLE_TRAINER;
    bool rolls_back = spw_coord_recovery_rolls_back(srv->conf.recovery,
                                                    was_live ? SPW_COORD_EVENT_TRAINER_REJOINED
                                                             : SPW_COORD_EVENT_TRAINER_JOINED);
    if (was_live && !same_process && is_trn && !rolls_back) {
        /* a new process under an id still live: the old one died unseen, as if removed */
        srv->stats.continued++;
        srv->stats.examples_retrained += m->examples_since_latest;
        SPW_WARN("trainer replaced without rollback",
                 "member=%s retrained=%" PRIu64 " latest=%" PRIu64 " recovery=continue", m->id,
                 m->examples_since_latest, srv->stats.latest_epoch);
    }
    m->live = true;
    m->role = r->has_role ? (int)r->role : SPARROW__MEMBER_ROLE__ROLE_TRAINER;
    m->incarnation = r->incarnation;
    m->last_seen_ms = spw_time_mono_ms();
    if (!same_process)
        m->based = false;
    m->waiting = false;
    m->reported = false;
    /* continue: the same process goes on counting its examples since its last restore (no
     * restore follows); its reports are cumulative */
    if (!(same_process && !rolls_back))
        m->examples_reported = m->examples_counted = m->examples_since_latest = 0;
    m->restored_gen = 0;
    m->told_gen = m->told_epoch = 0;
    m->wants_final = m->final_reported = m->finished = false;
    if (!same_process) {
        memset(&m->elastic, 0, sizeof(m->elastic));
        m->in_barrier = true;
        m->unit = 0;
    }
    m->released_ms = 0;
    copy_rid(m, rid, rid_len);
    SPW_INFO("member registered", "member=%s role=%d incarnation=%" PRIu64 " rejoin=%d", m->id,
             m->role, m->incarnation, was_live);
    reply_member(srv, m, REPLY_REGISTERED);
    if (m->role != SPARROW__MEMBER_ROLE__ROLE_TRAINER || !srv->initial_recovery_done)
        return;
    if (rolls_back) {
        start_recovery(srv, was_live ? "trainer rejoined" : "trainer joined");
        return;
    }
    /* continue: partitions it takes start from LATEST's offsets (at-least-once for what their
     * previous owner trained since); the others keep training */
    srv->stats.continued += !same_process;
    SPW_INFO("trainer joined without rollback", "member=%s rejoin=%d recovery=continue", m->id,
             was_live);
}

/* Heartbeats are answered with registered = whether the member is known, so that a member
 * learns of a restarted coordinator (or of its own removal) and registers again. */
static void on_heartbeat(spw_coord_server_t *srv, const uint8_t *rid, size_t rid_len,
                         const Sparrow__Heartbeat *hb)
{
    if (!hb->member_id)
        return;
    struct member *m = find_member(srv, hb->member_id, false);
    bool known = m && m->live;
    if (known)
        m->last_seen_ms = spw_time_mono_ms();
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__ClockReply cr = SPARROW__CLOCK_REPLY__INIT;
    msg.has_version = true;
    msg.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK_REPLY;
    msg.clock_reply = &cr;
    cr.has_registered = cr.has_generation = cr.has_latest_epoch = true;
    cr.registered = known;
    cr.generation = srv->generation;
    cr.latest_epoch = srv->stats.latest_epoch;
    struct reply_offsets ro = {NULL, NULL};
    if (known && hb->has_want_offsets && hb->want_offsets) {
        /* a full answer (the asker takes it as one): LATEST's offsets as of now */
        cr.has_recovery_continue = true;
        cr.recovery_continue = srv->conf.recovery == SPW_COORD_RECOVERY_CONTINUE;
        reply_offsets_attach(srv, &cr, &ro);
    }
    send_to(srv, rid, rid_len, &msg.base);
    reply_offsets_free(&ro);
}

/* Elastic synchronisation: m's step took step_ms (from its release to this Clock); compared
 * with the median of its unit's other trainers, it may leave the barrier (it is released
 * asynchronously from then on) or rejoin it (at its next release). */
static void observe_step(spw_coord_server_t *srv, struct member *m, double step_ms)
{
    size_t n = 0;
    uint32_t in = 0, out = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *o = &srv->members[i];
        if (o == m || !is_trainer(o) || o->unit != m->unit)
            continue;
        if (o->elastic.measured)
            srv->speed_tmp[n++] = o->elastic.ewma_ms;
        if (o->in_barrier && !o->elastic.out)
            in++;
        else
            out++;
    }
    double median = spw_coord_median(srv->speed_tmp, n);
    /* the barrier keeps at least one other trainer, and a majority of the unit */
    bool may_leave = in >= 1 && 2 * (out + 1) <= in + out + 1;
    enum spw_coord_elastic_move mv =
        spw_coord_elastic_observe(&m->elastic, step_ms, median, srv->conf.sync.elastic_factor,
                                  srv->conf.sync.elastic_steps, may_leave);
    SPW_DEBUG("step time", "member=%s unit=%u step_ms=%.1f mean_ms=%.1f others_median_ms=%.1f",
              m->id, m->unit, step_ms, m->elastic.ewma_ms, median);
    if (mv == SPW_COORD_ELASTIC_LEAVE) {
        srv->stats.elastic_leaves++; /* it leaves at its release: this step was tagged */
    } else if (mv == SPW_COORD_ELASTIC_REJOIN) {
        srv->stats.elastic_rejoins++; /* it rejoins at its release (release_two_phase) */
    }
    if (mv != SPW_COORD_ELASTIC_STAY)
        SPW_INFO(mv == SPW_COORD_ELASTIC_LEAVE ? "elastic: trainer is a straggler"
                                               : "elastic: trainer keeps up again",
                 "member=%s unit=%u step_ms=%.1f others_median_ms=%.1f factor=%g steps=%u", m->id,
                 m->unit, m->elastic.ewma_ms, median, srv->conf.sync.elastic_factor,
                 srv->conf.sync.elastic_steps);
}

static void on_clock(spw_coord_server_t *srv, const uint8_t *rid, size_t rid_len,
                     const Sparrow__Clock *c)
{
    if (!c->member_id)
        return;
    struct member *m = find_member(srv, c->member_id, false);
    if (!m || !m->live) {
        /* unknown (the coordinator restarted or removed it): the client re-registers on the
         * `registered=false` it never gets; answer nothing */
        return;
    }
    copy_rid(m, rid, rid_len);
    m->last_seen_ms = spw_time_mono_ms();
    bool first = !m->based; /* this process's first Clock: counted even below the old clock */
    if (!m->based) {
        bool others = false;
        uint64_t omin = UINT64_MAX;
        for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
            const struct member *o = &srv->members[i];
            if (o != m && o->based && is_trainer(o)) {
                others = true;
                if (o->clock < omin)
                    omin = o->clock;
            }
        }
        m->base = others ? (int64_t)omin - (int64_t)c->step : 0;
        m->based = true;
    }
    int64_t eff = m->base + (int64_t)c->step;
    if (eff > (int64_t)m->clock || first) {
        m->clock = (uint64_t)eff;
        srv->clocks_moved++;
        m->step_examples = c->has_examples ? c->examples : 0;
        m->examples_since_latest += m->step_examples; /* a Clock sent again is not counted */
        m->step_tagged = m->in_barrier;               /* the barrier moves at releases only */
    }
    if (c->has_trainer_id)
        m->trainer_id = c->trainer_id;
    if (c->has_examples && c->examples > 0)
        m->finished = false; /* it trained again: not all of it is in LATEST any more */
    if (c->has_input_done && c->input_done && !m->finished && !m->wants_final) {
        m->wants_final = true;
        SPW_INFO("trainer input ended: final checkpoint wanted", "member=%s clock=%" PRIu64, m->id,
                 m->clock);
    }
    /* an idle tick (no examples) says nothing of the trainer's speed */
    if (two_phase(srv) && m->released_ms && !m->waiting && c->has_examples && c->examples > 0)
        observe_step(srv, m, (double)(spw_time_mono_ms() - m->released_ms));
    m->waiting = true;
    m->told_epoch = m->told_gen = 0; /* a fresh Clock wants a fresh answer */
    evaluate(srv);
}

static void on_checkpoint_report(spw_coord_server_t *srv, const Sparrow__CheckpointReport *r)
{
    if (!r->member_id)
        return;
    struct member *m = find_member(srv, r->member_id, false);
    if (!m || !m->live || srv->phase != PHASE_CKPT_TRAINERS || r->epoch != srv->epoch_open)
        return;
    if (r->n_offsets > SPW_COORD_MAX_PARTITIONS)
        return;
    struct spw_coord_offset *offs = calloc(r->n_offsets ? r->n_offsets : 1, sizeof(*offs));
    if (!offs)
        return;
    for (size_t i = 0; i < r->n_offsets; i++) {
        spw_coord__offset_from_pb(r->offsets[i], &offs[i]);
    }
    free(m->offsets);
    m->offsets = offs;
    m->n_offsets = r->n_offsets;
    m->examples_reported = r->examples;
    m->reported = true;
    m->final_reported = m->wants_final;
    m->last_seen_ms = spw_time_mono_ms();
    evaluate(srv);
}

static void on_restore_report(spw_coord_server_t *srv, const Sparrow__RestoreReport *r)
{
    if (!r->member_id)
        return;
    struct member *m = find_member(srv, r->member_id, false);
    if (!m || !m->live || r->generation != srv->generation)
        return;
    m->restored_gen = r->generation;
    m->examples_reported = m->examples_counted = m->examples_since_latest = 0;
    evaluate(srv);
}

/* ---- epochs ---- */

static void open_epoch(spw_coord_server_t *srv, const char *why)
{
    srv->epoch_open = srv->next_epoch++;
    srv->phase = PHASE_CKPT_TRAINERS;
    srv->ckpt_requested = false;
    srv->deadline_ms = spw_time_mono_ms() + srv->conf.checkpoint_timeout_ms;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        srv->members[i].reported = srv->members[i].final_reported = false;
    SPW_INFO("checkpoint epoch opened", "epoch=%" PRIu64 " trigger=%s", srv->epoch_open, why);
}

/* True when two live trainers reported the same partition in the epoch now closing. */
static bool reports_overlap(const spw_coord_server_t *srv)
{
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *a = &srv->members[i];
        if (!a->live || !a->reported)
            continue;
        for (size_t j = i + 1; j < SPW_COORD_MAX_MEMBERS; j++) {
            const struct member *b = &srv->members[j];
            if (!b->live || !b->reported)
                continue;
            for (size_t x = 0; x < a->n_offsets; x++)
                for (size_t y = 0; y < b->n_offsets && !a->offsets[x].mark; y++)
                    if (!b->offsets[y].mark && a->offsets[x].partition == b->offsets[y].partition &&
                        strcmp(a->offsets[x].topic, b->offsets[y].topic) == 0)
                        return true;
        }
    }
    return false;
}

/* The abort policy over an epoch whose shards all answered: NULL when it may complete, else why
 * not (*recover: whether the abort starts a recovery at once). */
static const char *epoch_veto(spw_coord_server_t *srv, bool *recover)
{
    if (srv->recovery_wanted) /* its checkpoint may hold a restarted shard's state */
        return "a shard restarted during the epoch";
    if (reports_overlap(srv)) {
        /* two trainers reported one partition: one of them lost it (a session timeout, a
         * process paused past it) without knowing yet, and both counted its records */
        *recover = false;
        srv->recovery_wanted = true;
        return "two trainers reported the same partition";
    }
    return NULL;
}

/* What closing an epoch does either way: the checkpoint clock restarts and, nothing being
 * pending, the units are formed again (groups by speed follow the measured step times). */
static void epoch_closed(spw_coord_server_t *srv)
{
    srv->last_ckpt_ms = spw_time_mono_ms();
    srv->clocks_moved_at_ckpt = srv->clocks_moved;
    form_units(srv);
    if (srv->conf.mode.kind == SPW_COORD_HYBRID) /* the epoch was a barrier: drop caches */
        for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
            if (srv->members[i].live)
                srv->members[i].pending_drop = true;
    uint64_t min, max;
    live_trainers(srv, &min, &max);
    srv->last_ckpt_clock = max;
}

static void abort_epoch(spw_coord_server_t *srv, bool recover, const char *why)
{
    srv->stats.epochs_aborted++;
    SPW_WARN("checkpoint epoch aborted", "epoch=%" PRIu64 " reason=\"%s\"", srv->epoch_open, why);
    srv->phase = PHASE_RUN;
    if (recover)
        start_recovery(srv, why);
}

/* The reports of the live trainers that reported in the open epoch, in member order, into r
 * (SPW_COORD_MAX_MEMBERS); returns how many. */
static size_t epoch_reports(const spw_coord_server_t *srv, struct spw_coord__report *r)
{
    size_t n = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *mb = &srv->members[i];
        if (!mb->live || !mb->reported)
            continue;
        r[n++] = (struct spw_coord__report){.offsets = {mb->offsets, mb->n_offsets},
                                            .examples_reported = mb->examples_reported,
                                            .examples_counted = mb->examples_counted};
    }
    return n;
}

/* Model-update offsets of the shards' CheckpointReplies into m (absent when a shard reported
 * none, or when memory runs out: a reader then starts the stream from the beginning). */
static void manifest_update_offsets(const spw_coord_server_t *srv, struct spw_coord_manifest *m)
{
    if (srv->n_shards == 0 || srv->shards[0].n_upd == 0)
        return;
    struct spw_coord__offsets *lists = calloc(srv->n_shards, sizeof(*lists));
    m->update_offsets = calloc(srv->shards[0].n_upd, sizeof(*m->update_offsets));
    if (lists && m->update_offsets) {
        for (uint32_t i = 0; i < srv->n_shards; i++)
            lists[i] = (struct spw_coord__offsets){srv->shards[i].upd, srv->shards[i].n_upd};
        m->n_update_offsets =
            spw_coord__update_offsets_min(m->update_offsets, lists, srv->n_shards);
    }
    free(lists);
}

/* The manifest of the open epoch into *m (fini it): the previous manifest's offsets and examples
 * with this epoch's reports merged in, the shards' checksums and rows, the update-stream offsets.
 * SPW_ERR_NOMEM (and *m empty) when memory runs out. */
static spw_err_t build_manifest(const spw_coord_server_t *srv, struct spw_coord_manifest *m)
{
    memset(m, 0, sizeof(*m));
    struct spw_coord__report *reports = calloc(SPW_COORD_MAX_MEMBERS, sizeof(*reports));
    if (!reports)
        return SPW_ERR_NOMEM;
    size_t n_reports = epoch_reports(srv, reports);
    size_t cap = srv->cur.n_offsets;
    for (size_t i = 0; i < n_reports; i++)
        cap += reports[i].offsets.n;
    m->epoch = srv->epoch_open;
    m->shard_count = srv->n_shards;
    m->created_ms = spw_time_wall_ms();
    m->offsets = calloc(cap ? cap : 1, sizeof(*m->offsets));
    m->checksums = calloc(srv->n_shards ? srv->n_shards : 1, sizeof(*m->checksums));
    m->rows = calloc(srv->n_shards ? srv->n_shards : 1, sizeof(*m->rows));
    if (!m->offsets || !m->checksums || !m->rows) {
        free(reports);
        spw_coord_manifest_fini(m);
        memset(m, 0, sizeof(*m));
        return SPW_ERR_NOMEM;
    }
    m->n_offsets = spw_coord__offsets_merge(m->offsets, srv->cur.offsets, srv->cur.n_offsets,
                                            reports, n_reports);
    m->example_count = spw_coord__examples_merge(srv->cur.example_count, reports, n_reports);
    free(reports);
    for (uint32_t i = 0; i < srv->n_shards; i++) {
        memcpy(m->checksums[i], srv->shards[i].checksum, 17);
        m->rows[i] = srv->shards[i].rows;
    }
    manifest_update_offsets(srv, m);
    return SPW_OK;
}

/* MANIFEST, then LATEST pointing at it. */
static spw_err_t write_manifest(const spw_coord_server_t *srv, const struct spw_coord_manifest *m)
{
    char err[512];
    if (spw_coord_manifest_write(srv->dir, m, err, sizeof(err)) != SPW_OK ||
        spw_coord_latest_write(srv->dir, m->epoch, err, sizeof(err)) != SPW_OK) {
        SPW_ERROR("manifest write failed", "epoch=%" PRIu64 " err=\"%s\"", m->epoch, err);
        return SPW_ERR_IO;
    }
    return SPW_OK;
}

/* The epoch is durable: its manifest becomes the current one (taking m's memory), the reporters'
 * examples are counted and they are told to commit their offsets at their next release. */
static void complete_epoch(spw_coord_server_t *srv, struct spw_coord_manifest *m)
{
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        struct member *mb = &srv->members[i];
        if (!mb->live || !mb->reported)
            continue;
        mb->examples_counted = mb->examples_reported;
        mb->examples_since_latest = 0; /* held since its report: no step after it */
        mb->pending_commit = true;
        mb->pending_offsets = true;
        if (mb->final_reported) {
            mb->finished = true;
            mb->wants_final = mb->final_reported = false;
        }
    }
    spw_coord_manifest_fini(&srv->cur);
    srv->cur = *m;
    srv->stats.latest_epoch = m->epoch;
    srv->stats.example_count = m->example_count;
    srv->stats.epochs_completed++;
    srv->last_completed_ms = spw_time_mono_ms();
    spw_coord_prune(srv->dir, m->epoch, srv->conf.keep, 0);
    SPW_INFO(
        "checkpoint completed",
        "epoch=%" PRIu64 " examples=%" PRIu64 " partitions=%zu shards=%u seconds=%.3f", m->epoch,
        m->example_count, m->n_offsets, m->shard_count,
        (double)(srv->last_ckpt_ms + 1 - (srv->deadline_ms - srv->conf.checkpoint_timeout_ms)) /
            1e3);
    srv->phase = PHASE_RUN;
}

/* Closes the open epoch: ok when every shard checkpointed it (the abort policy may still refuse
 * it); recover: whether an abort starts a recovery; why: the reason of an abort. */
static void finish_epoch(spw_coord_server_t *srv, bool ok, bool recover, const char *why)
{
    if (ok) {
        const char *veto = epoch_veto(srv, &recover);
        if (veto) {
            ok = false;
            why = veto;
        }
    }
    epoch_closed(srv);
    if (!ok) {
        abort_epoch(srv, recover, why);
        return;
    }
    struct spw_coord_manifest m;
    if (build_manifest(srv, &m) != SPW_OK) {
        abort_epoch(srv, false, "out of memory");
        return;
    }
    if (write_manifest(srv, &m) != SPW_OK) {
        spw_coord_manifest_fini(&m);
        abort_epoch(srv, false, "manifest write failed");
        return;
    }
    complete_epoch(srv, &m);
}

/* ---- recovery ---- */

static void start_recovery(spw_coord_server_t *srv, const char *reason)
{
    /* the work a rollback throws away: every live trainer's examples since LATEST (by Clocks),
     * trained again after the restore */
    uint64_t lost = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        if (is_trainer(&srv->members[i]))
            lost += srv->members[i].examples_since_latest;
    srv->stats.examples_retrained += lost;
    srv->generation++;
    srv->stats.generation = srv->generation;
    srv->stats.recoveries++;
    struct spw_coord_manifest m;
    uint64_t e = spw_coord_recovery_epoch(srv->dir, srv->n_shards, srv->conf.verify, &m);
    if (e != srv->stats.latest_epoch && e != 0) {
        char err[256];
        if (spw_coord_latest_write(srv->dir, e, err, sizeof(err)) != SPW_OK)
            SPW_ERROR("LATEST write failed", "err=\"%s\"", err);
    }
    if (e != srv->stats.latest_epoch)
        SPW_WARN("recovery falls back", "latest=%" PRIu64 " epoch=%" PRIu64,
                 srv->stats.latest_epoch, e);
    spw_coord_manifest_fini(&srv->cur);
    srv->cur = m;
    srv->stats.latest_epoch = e;
    srv->stats.example_count = m.example_count;
    srv->phase = PHASE_REC_TRAINERS;
    srv->deadline_ms = spw_time_mono_ms() + srv->conf.checkpoint_timeout_ms;
    srv->recovery_wanted = false;
    /* a step being committed is discarded with the rest after the epoch (the restore clears
     * the shards' pending tables); its late replies are ignored */
    srv->commit_step = 0;
    for (uint32_t i = 0; i < srv->n_shards; i++)
        srv->shards[i].commit_pending = false;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        struct member *mb = &srv->members[i];
        mb->told_gen = 0;
        mb->reported = false;
        mb->examples_since_latest = 0; /* everyone goes back to LATEST */
        mb->pending_commit = mb->pending_drop = false;
        /* everyone starts again in the barrier; the step times are kept */
        mb->in_barrier = true;
        mb->elastic.out = false;
        mb->elastic.slow_run = mb->elastic.fast_run = 0;
    }

    SPW_WARN("recovery started",
             "generation=%" PRIu64 " epoch=%" PRIu64 " reason=\"%s\" retrained=%" PRIu64
             " retrained_total=%" PRIu64,
             srv->generation, e, reason, lost, srv->stats.examples_retrained);
}

/* ---- the state machine ---- */

static bool all_trainers(const spw_coord_server_t *srv, bool restored)
{
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (!is_trainer(m))
            continue;
        if (restored ? m->restored_gen != srv->generation : !m->reported)
            return false;
    }
    return true;
}

static bool shards_done(const spw_coord_server_t *srv)
{
    for (uint32_t i = 0; i < srv->n_shards; i++)
        if (srv->shards[i].pending)
            return false;
    return true;
}

static spw_err_t shards_result(const spw_coord_server_t *srv)
{
    for (uint32_t i = 0; i < srv->n_shards; i++)
        if (srv->shards[i].result != SPW_OK)
            return srv->shards[i].result;
    return SPW_OK;
}

/* Two-phase: true when no step is pending anywhere: every live trainer waits (its Clock held)
 * and none in a barrier pushed a step its unit has not committed, and no commit is in flight.
 * A trainer that rejoined the barrier ahead of its unit (its last pushes untagged, applied at
 * once) has nothing pending: counting its clock as a pending step held a due checkpoint, and
 * with it every release, forever (the unit never reached that clock). */
static bool all_held_between_steps(const spw_coord_server_t *srv)
{
    if (srv->commit_step)
        return false;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (is_trainer(m) && (!m->waiting || (m->in_barrier && m->step_tagged &&
                                              m->clock > srv->unit_committed[m->unit])))
            return false;
    }
    return true;
}

/* Per unit (group_tmp, n_units entries), whether one of its in-barrier trainers pushed the step
 * after the unit's last commit: that step waits for the others of the unit, so that a due
 * checkpoint, which opens only with nothing pending, must let them go into it. Held there (the
 * re-sent Clock of one a checkpoint report kept behind, the next epoch already due), that step
 * could never commit and the checkpoint never open. */
static const uint32_t *units_pending(spw_coord_server_t *srv)
{
    uint32_t *pending = srv->group_tmp;
    memset(pending, 0, srv->n_units * sizeof(*pending));
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        const struct member *m = &srv->members[i];
        if (is_trainer(m) && m->in_barrier && m->step_tagged && m->unit < srv->n_units &&
            m->clock > srv->unit_committed[m->unit])
            pending[m->unit] = 1;
    }
    return pending;
}

/* A live trainer whose input ended waits for its final checkpoint epoch. */
static bool final_wanted(const spw_coord_server_t *srv)
{
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        if (is_trainer(&srv->members[i]) && srv->members[i].wants_final)
            return true;
    return false;
}

static bool checkpoint_due(spw_coord_server_t *srv, uint64_t max_clock)
{
    if (final_wanted(srv) || srv->ckpt_requested)
        return true;
    /* the time trigger wants a step since the last epoch: with none, the epoch would record
     * nothing new, and an interval shorter than the trainers' way back to their Clocks after an
     * epoch opened the next one before any release, holding them for good */
    uint64_t now = spw_time_mono_ms();
    if (srv->conf.checkpoint_interval_ms > 0 && srv->clocks_moved > srv->clocks_moved_at_ckpt &&
        now - srv->last_ckpt_ms >= srv->conf.checkpoint_interval_ms)
        return true;
    return srv->conf.checkpoint_steps > 0 &&
           max_clock >= srv->last_ckpt_clock + srv->conf.checkpoint_steps;
}

static void evaluate(spw_coord_server_t *srv)
{
    for (int round = 0; round < 8; round++) {
        enum phase before = srv->phase;
        uint64_t min, max;
        uint32_t n = live_trainers(srv, &min, &max);
        switch (srv->phase) {
        case PHASE_REC_TRAINERS:
            for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
                struct member *m = &srv->members[i];
                if (m->live && m->waiting && m->restored_gen != srv->generation &&
                    m->told_gen != srv->generation) {
                    m->told_gen = srv->generation;
                    m->waiting = false; /* answered: the trainer clocks again once restored */
                    reply_member(srv, m, REPLY_RESTORE);
                }
            }
            if (all_trainers(srv, true)) {
                srv->phase = PHASE_REC_SHARDS;
                shards_request(srv, SPARROW__REQUEST__BODY_RESTORE, srv->cur.epoch);
            }
            break;
        case PHASE_REC_SHARDS:
            if (shards_done(srv)) {
                if (shards_result(srv) != SPW_OK) {
                    /* retried after a pause, not in a loop: the tick calls evaluate again */
                    uint64_t now = spw_time_mono_ms();
                    if (!srv->restore_failed_ms)
                        srv->restore_failed_ms = now;
                    if (now - srv->restore_failed_ms >= COORD_RESTORE_RETRY_MS) {
                        srv->restore_failed_ms = 0;
                        start_recovery(srv, "a shard failed to restore");
                    }
                } else {
                    SPW_INFO("recovery completed",
                             "generation=%" PRIu64 " epoch=%" PRIu64 " trainers=%u",
                             srv->generation, srv->cur.epoch, n);
                    srv->phase = PHASE_RUN;
                    form_units(srv);
                    srv->last_ckpt_ms = spw_time_mono_ms();
                    srv->last_ckpt_clock = max;
                    srv->clocks_moved_at_ckpt = srv->clocks_moved;
                }
            }
            break;
        case PHASE_CKPT_TRAINERS:
            for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
                struct member *m = &srv->members[i];
                if (is_trainer(m) && m->waiting && !m->reported &&
                    m->told_epoch != srv->epoch_open) {
                    m->told_epoch = srv->epoch_open;
                    m->waiting = false; /* answered: the trainer clocks again once reported */
                    reply_member(srv, m, REPLY_CHECKPOINT);
                }
            }
            if (all_trainers(srv, false)) {
                srv->phase = PHASE_CKPT_SHARDS;
                shards_request(srv, SPARROW__REQUEST__BODY_CHECKPOINT, srv->epoch_open);
            }
            break;
        case PHASE_CKPT_SHARDS:
            if (shards_done(srv)) {
                spw_err_t r = shards_result(srv);
                finish_epoch(srv, r == SPW_OK, r == SPW_ERR_TIMEOUT,
                             r == SPW_OK ? "" : "a shard failed to checkpoint");
            }
            break;
        case PHASE_RUN:
            if (srv->recovery_wanted) {
                start_recovery(srv, "requested");
                break;
            }
            if (!srv->initial_recovery_done || n == 0)
                break;
            if (two_phase(srv)) {
                /* a unit's step is complete (enough of its trainers' pushes acknowledged):
                 * commit it on every shard before they read, and before a checkpoint records
                 * the offsets of its examples. One commit at a time; the other units' trainers
                 * (and this one's late ones) are released meanwhile. */
                bool ok;
                if (srv->commit_step && commit_done(srv, &ok)) {
                    uint64_t step = srv->commit_step;
                    srv->commit_step = 0;
                    if (!ok) {
                        start_recovery(srv, "a shard failed to commit a step");
                        break;
                    }
                    srv->unit_committed[srv->commit_unit] = step;
                }
                uint32_t u = srv->commit_step ? UINT32_MAX : ready_unit(srv);
                if (u != UINT32_MAX)
                    commit_step(srv, u, srv->unit_committed[u] + 1);
            }
            if (srv->conf.mode.kind == SPW_COORD_HYBRID && final_wanted(srv)) {
                /* a trainer's input ended: its last checkpoint need not wait for a barrier
                 * (every trainer flushes and reports, as at any epoch) */
                open_epoch(srv, "final");
                break;
            }
            if (srv->conf.mode.kind == SPW_COORD_HYBRID) {
                /* a barrier every live trainer reached: checkpoint (when due) and release */
                bool all_at = true;
                uint64_t b = 0;
                for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
                    const struct member *m = &srv->members[i];
                    if (!is_trainer(m))
                        continue;
                    if (!m->waiting || !spw_coord_mode_barrier(&srv->conf.mode, m->clock) ||
                        (b && m->clock != b))
                        all_at = false;
                    b = m->clock;
                }
                if (all_at && b > srv->last_ckpt_clock &&
                    (srv->conf.checkpoint_steps == 0 || checkpoint_due(srv, max))) {
                    open_epoch(srv, "barrier");
                    break;
                }
                if (all_at)
                    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
                        if (srv->members[i].live)
                            srv->members[i].pending_drop = true;
            } else if (checkpoint_due(srv, max) &&
                       (!two_phase(srv) || all_held_between_steps(srv))) {
                /* two-phase: only between steps, every trainer held with nothing pending (one
                 * released into the next step would report offsets of examples whose pushes
                 * wait for a commit the checkpoint comes before); while one is due nobody is
                 * released, so that the trainers gather */
                open_epoch(srv, final_wanted(srv)     ? "final"
                                : srv->ckpt_requested ? "request"
                                : srv->conf.checkpoint_interval_ms > 0 &&
                                        spw_time_mono_ms() - srv->last_ckpt_ms >=
                                            srv->conf.checkpoint_interval_ms
                                    ? "interval"
                                    : "steps");
                break;
            }
            /* two-phase with a checkpoint due: nobody goes, so that the trainers gather between
             * steps, but one whose unit's next step waits for it */
            const uint32_t *pending =
                two_phase(srv) && checkpoint_due(srv, max) ? units_pending(srv) : NULL;
            for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
                struct member *m = &srv->members[i];
                /* two-phase: an asynchronous one goes at once; one in the barrier, or
                 * rejoining it, once its unit committed its clock */
                bool go = two_phase(srv)
                              ? (!m->in_barrier && m->elastic.out) ||
                                    m->clock <= srv->unit_committed[m->unit]
                              : spw_coord_mode_may_proceed(&srv->conf.mode, m->clock, min);
                if (pending)
                    go = go && m->in_barrier && m->unit < srv->n_units && pending[m->unit];
                if (m->live && m->waiting && go) {
                    m->waiting = false;
                    reply_member(srv, m, REPLY_PROCEED);
                }
            }
            break;
        }
        if (srv->phase == before)
            break;
    }
}

/* ---- shard replies and timers ---- */

static void on_shard_reply(spw_coord_server_t *srv, struct shard *sh, const void *data, size_t len)
{
    Sparrow__Reply *rep = NULL;
    spw_arena_reset(srv->arena);
    if (spw_wire_unpack_reply(data, len, SPW_WIRE_DEFAULT_MAX_FRAME, srv->arena, &rep) != SPW_OK)
        return;
    uint64_t now = spw_time_mono_ms();
    if (sh->down)
        SPW_INFO("shard answers again", "shard=%s", sh->endpoint);
    bool was_down = sh->down;
    sh->down = false;
    sh->last_reply_ms = now;
    if (sh->stats_pending && rep->request_id == sh->stats_id) {
        sh->stats_pending = false;
        if (rep->body_case == SPARROW__REPLY__BODY_STATS) {
            int64_t started = rep->stats->has_started_ms ? rep->stats->started_ms : 0;
            bool restarted = (sh->started_ms != 0 && started != 0 && started != sh->started_ms) ||
                             (started == 0 && was_down);
            if (started != 0)
                sh->started_ms = started;
            if (restarted && srv->initial_recovery_done && srv->phase != PHASE_REC_TRAINERS) {
                SPW_WARN("shard restarted", "shard=%s", sh->endpoint);
                if (sh->pending) {
                    /* its checkpoint or restore request went to the process that died, and the
                     * new one will never answer it: failed now, the epoch (or restore) ends at
                     * once instead of after coordinator.checkpoint.timeout, and the recovery
                     * below covers the shard's new state */
                    sh->pending = false;
                    sh->result = SPW_ERR_STATE;
                }
                if (srv->phase == PHASE_RUN)
                    start_recovery(srv, "shard restarted");
                else
                    srv->recovery_wanted = true;
            }
        }
        return;
    }
    if (sh->commit_pending && rep->request_id == sh->commit_id) {
        sh->commit_pending = false;
        bool failed = (rep->has_error && rep->error != SPARROW__ERROR_CODE__ERROR_NONE) ||
                      rep->body_case != SPARROW__REPLY__BODY_COMMIT;
        if (failed)
            SPW_WARN("shard commit failed", "shard=%s step=%" PRIu64 " error=%d msg=\"%s\"",
                     sh->endpoint, srv->commit_step, (int)rep->error,
                     rep->error_message ? rep->error_message : "");
        sh->commit_result = failed ? SPW_ERR_RPC : SPW_OK;
        evaluate(srv);
        return;
    }
    if (!sh->pending || rep->request_id != sh->req_id)
        return;
    sh->pending = false;
    if (rep->has_error && rep->error != SPARROW__ERROR_CODE__ERROR_NONE) {
        SPW_WARN("shard request failed", "shard=%s error=%d msg=\"%s\"", sh->endpoint,
                 (int)rep->error, rep->error_message ? rep->error_message : "");
        sh->result = SPW_ERR_RPC;
    } else if (rep->body_case == SPARROW__REPLY__BODY_CHECKPOINT &&
               rep->checkpoint->has_started_ms && sh->started_ms != 0 &&
               rep->checkpoint->started_ms != sh->started_ms) {
        /* a new process (restored from an older epoch, or empty) answered: its checkpoint is not
         * this epoch's state; the epoch is aborted and everyone recovers */
        SPW_WARN("shard restarted", "shard=%s during=checkpoint", sh->endpoint);
        sh->started_ms = rep->checkpoint->started_ms;
        sh->result = SPW_ERR_STATE;
        srv->recovery_wanted = true;
    } else if (rep->body_case == SPARROW__REPLY__BODY_CHECKPOINT) {
        snprintf(sh->checksum, sizeof(sh->checksum), "%s",
                 rep->checkpoint->checksum ? rep->checkpoint->checksum : "");
        sh->rows = rep->checkpoint->rows;
        sh->result = SPW_OK;
        sh->n_upd = 0;
        size_t nu = rep->checkpoint->n_update_offsets;
        struct spw_coord_offset *upd =
            nu && nu <= SPW_COORD_MAX_PARTITIONS ? realloc(sh->upd, nu * sizeof(*upd)) : NULL;
        if (upd) {
            sh->upd = upd;
            /* the model-update stream's offsets: positions, never marks */
            for (size_t i = 0; i < nu; i++) {
                spw_coord__offset_from_pb(rep->checkpoint->update_offsets[i], &upd[i]);
                upd[i].skip = 0;
                upd[i].mark = false;
            }
            sh->n_upd = nu;
        }
    } else if (rep->body_case == SPARROW__REPLY__BODY_RESTORE) {
        sh->result = SPW_OK;
    } else {
        sh->result = SPW_ERR_RPC;
    }
    evaluate(srv);
}

/* A clean stop: removed at once (a trainer's departure rolls back like a timeout's, since its
 * pushes since LATEST are applied but its offsets are not recorded). */
static void on_leave(spw_coord_server_t *srv, const Sparrow__Leave *l)
{
    if (!l->member_id)
        return;
    struct member *m = find_member(srv, l->member_id, false);
    if (!m || !m->live || m->incarnation != l->incarnation)
        return;
    remove_member(srv, m, "left", SPW_LOG_INFO);
    evaluate(srv);
}

/* The startup grace ends when it has run out or, with coordinator.startup.trainers, as soon as
 * that many trainers have registered. */
static bool startup_over(const spw_coord_server_t *srv, uint64_t now)
{
    if (now - srv->start_ms >= srv->conf.startup_grace_ms)
        return true;
    uint64_t min, max;
    return srv->conf.startup_trainers > 0 &&
           live_trainers(srv, &min, &max) >= srv->conf.startup_trainers;
}

static void tick(spw_coord_server_t *srv)
{
    uint64_t now = spw_time_mono_ms();
    uint64_t to = srv->conf.member_timeout_ms;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++) {
        struct member *m = &srv->members[i];
        if (m->live && now - m->last_seen_ms > to)
            remove_member(srv, m, "timeout", SPW_LOG_WARN);
    }
    uint64_t poll_ms = to / 4 < 100 ? 100 : to / 4 > 1000 ? 1000 : to / 4;
    for (uint32_t i = 0; i < srv->n_shards; i++) {
        struct shard *sh = &srv->shards[i];
        if (sh->stats_pending && now - sh->stats_sent_ms > to) {
            if (!sh->down)
                SPW_WARN("shard silent", "shard=%s", sh->endpoint);
            sh->down = true;
            shard_reset(srv, sh);
        }
        if (!sh->stats_pending && now - sh->stats_sent_ms >= poll_ms) {
            sh->stats_pending = true;
            sh->stats_sent_ms = now;
            shard_send(srv, sh, SPARROW__REQUEST__BODY_STATS, 0, &sh->stats_id);
        }
        if (sh->commit_pending && now - srv->commit_sent_ms > srv->conf.checkpoint_timeout_ms) {
            sh->commit_pending = false;
            sh->commit_result = SPW_ERR_TIMEOUT;
            shard_reset(srv, sh);
        }
        if (sh->pending && now - sh->sent_ms > srv->conf.checkpoint_timeout_ms) {
            sh->pending = false;
            sh->result = SPW_ERR_TIMEOUT;
            shard_reset(srv, sh);
        }
    }
    if (!srv->initial_recovery_done && startup_over(srv, now)) {
        srv->initial_recovery_done = true;
        start_recovery(srv, "coordinator started");
    }
    if ((srv->phase == PHASE_CKPT_TRAINERS || srv->phase == PHASE_REC_TRAINERS) &&
        now > srv->deadline_ms) {
        if (srv->phase == PHASE_CKPT_TRAINERS)
            finish_epoch(srv, false, false, "trainers did not report in time");
        else
            start_recovery(srv, "trainers did not restore in time");
    }
    evaluate(srv);
    uint64_t min, max;
    uint32_t down = 0;
    for (uint32_t i = 0; i < srv->n_shards; i++)
        down += srv->shards[i].down;
    srv->stats.trainers = live_trainers(srv, &min, &max);
    srv->stats.out_of_barrier = 0;
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        srv->stats.out_of_barrier += is_trainer(&srv->members[i]) && !srv->members[i].in_barrier;
    srv->stats.units = two_phase(srv) ? srv->n_units : 0;
    spw_coord__metrics_sync(&srv->m, &srv->stats, down,
                            (double)(spw_time_mono_ms() - srv->last_completed_ms) / 1000.0);
}

static void on_member_message(spw_coord_server_t *srv, const uint8_t *rid, size_t rid_len,
                              const void *data, size_t len)
{
    Sparrow__CoordMessage *msg = NULL;
    spw_arena_reset(srv->arena);
    if (spw_wire_unpack_coord(data, len, SPW_COORD_MAX_FRAME, srv->arena, &msg) != SPW_OK) {
        srv->stats.malformed++;
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "malformed coordination message", "bytes=%zu", len);
        return;
    }
    if (msg->has_version && msg->version != SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1) {
        srv->stats.malformed++;
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "coordination message of another version",
                            "version=%d", (int)msg->version);
        return;
    }
    switch (msg->body_case) {
    case SPARROW__COORD_MESSAGE__BODY_REGISTER:
        on_register(srv, rid, rid_len, msg->register_);
        break;
    case SPARROW__COORD_MESSAGE__BODY_HEARTBEAT:
        on_heartbeat(srv, rid, rid_len, msg->heartbeat);
        break;
    case SPARROW__COORD_MESSAGE__BODY_CLOCK:
        on_clock(srv, rid, rid_len, msg->clock);
        break;
    case SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT:
        on_checkpoint_report(srv, msg->checkpoint_report);
        break;
    case SPARROW__COORD_MESSAGE__BODY_RESTORE_REPORT:
        on_restore_report(srv, msg->restore_report);
        break;
    case SPARROW__COORD_MESSAGE__BODY_LEAVE:
        on_leave(srv, msg->leave);
        break;
    default:
        break;
    }
}

/* ---- lifecycle ---- */

spw_coord_server_t *spw_coord_server_new(const struct spw_coord_server_conf *conf, char *errstr,
                                         size_t errstr_size)
{
    spw_coord_server_t *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    srv->conf = *conf;
    spw_coord__metrics_register(&srv->m, conf->metrics);
    /* Generations fence pushes at the shards (RestoreRequest.generation), so they must grow across
     * coordinator restarts too: a restarted coordinator starts from the wall clock in ms, which is
     * past any generation its predecessor reached (one per recovery) */
    srv->generation = (uint64_t)spw_time_wall_ms();
    srv->stats.generation = srv->generation;
    if (srv->conf.keep == 0)
        srv->conf.keep = 1;
    srv->listen = strdup(conf->listen);
    srv->dir = strdup(conf->checkpoint_dir && conf->checkpoint_dir[0] ? conf->checkpoint_dir : ".");
    srv->arena = spw_arena_new(1 << 16, (size_t)SPW_COORD_MAX_FRAME * 4);
    srv->ctx = zmq_ctx_new();
    srv->commit_ids = calloc(SPW_COORD_MAX_MEMBERS, sizeof(*srv->commit_ids));
    srv->member_ids = calloc(SPW_COORD_MAX_MEMBERS, sizeof(*srv->member_ids));
    srv->group_tmp = calloc(SPW_COORD_MAX_MEMBERS + 1, sizeof(*srv->group_tmp));
    srv->unit_committed = calloc(SPW_COORD_MAX_MEMBERS, sizeof(*srv->unit_committed));
    srv->rule_tmp = calloc(SPW_COORD_MAX_MEMBERS, sizeof(*srv->rule_tmp));
    srv->speed_tmp = calloc(SPW_COORD_MAX_MEMBERS, sizeof(*srv->speed_tmp));
    srv->n_units = 1;
    if (!srv->listen || !srv->dir || !srv->arena || !srv->ctx || !srv->commit_ids ||
        !srv->member_ids || !srv->group_tmp || !srv->unit_committed || !srv->rule_tmp ||
        !srv->speed_tmp) {
        snprintf(errstr, errstr_size, "out of memory");
        goto err;
    }
    if (conf->curve_secret_key_file && conf->curve_secret_key_file[0]) {
        struct spw_curve_server_conf cc = {
            .secret_prop = "coordinator.curve.secret_key_file",
            .secret_file = conf->curve_secret_key_file,
            .allowed_prop = "coordinator.curve.allowed_clients_file",
            .allowed_file = conf->curve_allowed_clients_file,
            .what = "coordinator",
            .refused = srv->m.auth_refused,
        };
        srv->curve = spw_curve_server_new(srv->ctx, &cc, errstr, errstr_size);
        if (!srv->curve)
            goto err;
    }
    if (spw_curve_client_load(&srv->shard_keys, "coordinator.curve.server_key_file",
                              conf->curve_server_key_file, "coordinator.curve.client_key_file",
                              conf->curve_client_key_file, errstr, errstr_size) != SPW_OK)
        goto err;
    srv->router = zmq_socket(srv->ctx, ZMQ_ROUTER);
    if (!srv->router) {
        snprintf(errstr, errstr_size, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        goto err;
    }
    int zero = 0;
    int64_t maxmsg = SPW_COORD_MAX_FRAME;
    zmq_setsockopt(srv->router, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(srv->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    if (srv->curve && spw_curve_server_apply(srv->curve, srv->router, errstr, errstr_size))
        goto err;
    if (zmq_bind(srv->router, srv->listen) != 0) {
        snprintf(errstr, errstr_size, "cannot bind %s: %s", srv->listen, zmq_strerror(zmq_errno()));
        goto err;
    }
    size_t elen = sizeof(srv->endpoint);
    zmq_getsockopt(srv->router, ZMQ_LAST_ENDPOINT, srv->endpoint, &elen);
    /* shards */
    const char *list = conf->shards ? conf->shards : "";
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l > 0) {
            if (srv->n_shards >= SPW_COORD_MAX_SHARDS || l >= sizeof(srv->shards[0].endpoint)) {
                snprintf(errstr, errstr_size, "bad shard list");
                goto err;
            }
            struct shard *ns = realloc(srv->shards, (srv->n_shards + 1) * sizeof(*ns));
            if (!ns) {
                snprintf(errstr, errstr_size, "out of memory");
                goto err;
            }
            srv->shards = ns;
            struct shard *sh = &srv->shards[srv->n_shards];
            memset(sh, 0, sizeof(*sh));
            memcpy(sh->endpoint, p, l);
            sh->sock = shard_socket(srv, sh->endpoint);
            if (!sh->sock) {
                snprintf(errstr, errstr_size, "cannot connect to shard %s", sh->endpoint);
                goto err;
            }
            srv->n_shards++;
        }
        p += l + (comma ? 1 : 0);
    }
    /* LATEST and the next epoch number: above every directory present (orphans included) */
    uint64_t top = 0;
    if (spw_coord_epochs_list(srv->dir, &top, 1) < 0)
        top = 0;
    uint64_t latest = 0;
    spw_err_t lr = spw_coord_latest_read(srv->dir, &latest);
    if (lr == SPW_ERR_CORRUPT)
        SPW_WARN("LATEST is corrupt", "dir=%s", srv->dir);
    srv->stats.latest_epoch = lr == SPW_OK ? latest : 0;
    srv->next_epoch = (top > latest ? top : latest) + 1;
    srv->start_ms = srv->last_ckpt_ms = srv->last_completed_ms = spw_time_mono_ms();
    char mode[32];
    spw_coord_mode_format(&conf->mode, mode, sizeof(mode));
    SPW_INFO("coordinator listening",
             "endpoint=%s mode=%s shards=%u latest=%" PRIu64 " next_epoch=%" PRIu64
             " curve_members=%s curve_shards=%s",
             srv->endpoint, mode, srv->n_shards, srv->stats.latest_epoch, srv->next_epoch,
             srv->curve ? "on" : "off", srv->shard_keys.enabled ? "on" : "off");
    if (srv->curve)
        SPW_INFO("curve enabled", "server_public_key=%s allowed_clients=%zu",
                 spw_curve_server_public_key(srv->curve), spw_curve_server_allowed(srv->curve));
    if (srv->shard_keys.enabled)
        SPW_INFO("curve client of the shards", "client_public_key=%s", srv->shard_keys.public_key);
    return srv;
err:
    spw_coord_server_destroy(srv);
    return NULL;
}

spw_err_t spw_coord_server_run(spw_coord_server_t *srv)
{
    zmq_pollitem_t items[2 + SPW_COORD_MAX_SHARDS]; /* members, shards, then the ZAP handler */
    uint8_t rid[MAX_RID];
    zmq_msg_t body;
    zmq_msg_init(&body);
    /* relaxed: the flag only ends the loop, it publishes no other data */
    while (!spw_signal_stop_requested() &&
           !(srv->conf.stop && atomic_load_explicit(srv->conf.stop, memory_order_relaxed))) {
        items[0] = (zmq_pollitem_t){srv->router, 0, ZMQ_POLLIN, 0};
        for (uint32_t i = 0; i < srv->n_shards; i++)
            items[1 + i] = (zmq_pollitem_t){srv->shards[i].sock, 0, ZMQ_POLLIN, 0};
        int n_items = (int)(1 + srv->n_shards);
        if (srv->curve)
            items[n_items++] =
                (zmq_pollitem_t){spw_curve_server_zap_socket(srv->curve), 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(items, n_items, 20);
        /* a member's handshake waits for this answer: before its messages */
        if (rc > 0 && srv->curve && (items[n_items - 1].revents & ZMQ_POLLIN))
            spw_curve_server_handle(srv->curve);
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
            for (int k = 0; k < 256; k++) {
                int n = zmq_recv(srv->router, rid, sizeof(rid), ZMQ_DONTWAIT);
                if (n < 0)
                    break;
                int more = 0;
                size_t ml = sizeof(more);
                zmq_getsockopt(srv->router, ZMQ_RCVMORE, &more, &ml);
                if (!more)
                    continue;
                if (zmq_msg_recv(&body, srv->router, 0) < 0)
                    break;
                zmq_getsockopt(srv->router, ZMQ_RCVMORE, &more, &ml);
                while (more) { /* unexpected extra frames: drain */
                    zmq_msg_t x;
                    zmq_msg_init(&x);
                    zmq_msg_recv(&x, srv->router, 0);
                    zmq_msg_close(&x);
                    zmq_getsockopt(srv->router, ZMQ_RCVMORE, &more, &ml);
                }
                on_member_message(srv, rid, (size_t)(n < MAX_RID ? n : MAX_RID),
                                  zmq_msg_data(&body), zmq_msg_size(&body));
            }
        }
        for (uint32_t i = 0; rc > 0 && i < srv->n_shards; i++) {
            if (!(items[1 + i].revents & ZMQ_POLLIN))
                continue;
            for (int k = 0; k < 64; k++) {
                if (zmq_msg_recv(&body, srv->shards[i].sock, ZMQ_DONTWAIT) < 0)
                    break;
                on_shard_reply(srv, &srv->shards[i], zmq_msg_data(&body), zmq_msg_size(&body));
            }
        }
        if (spw_signal_take_usr1() && !srv->ckpt_requested) {
            srv->ckpt_requested = true;
            SPW_INFO("checkpoint requested", "by=SIGUSR1");
        }
        tick(srv); /* also refreshes stats.trainers */
    }
    zmq_msg_close(&body);
    return SPW_OK;
}

const char *spw_coord_server_endpoint(const spw_coord_server_t *srv)
{
    return srv->endpoint;
}

void spw_coord_server_get_stats(const spw_coord_server_t *srv, struct spw_coord_server_stats *out)
{
    *out = srv->stats;
    out->auth_refused = srv->curve ? spw_curve_server_refused(srv->curve) : 0;
}

void spw_coord_server_destroy(spw_coord_server_t *srv)
{
    if (!srv)
        return;
    for (uint32_t i = 0; i < srv->n_shards; i++)
        if (srv->shards[i].sock)
            zmq_close(srv->shards[i].sock);
    for (uint32_t i = 0; i < srv->n_shards; i++)
        free(srv->shards[i].upd);
    free(srv->shards);
    for (size_t i = 0; i < SPW_COORD_MAX_MEMBERS; i++)
        free(srv->members[i].offsets);
    if (srv->router)
        zmq_close(srv->router);
    spw_curve_server_destroy(srv->curve);
    spw_curve_client_wipe(&srv->shard_keys);
    if (srv->ctx)
        zmq_ctx_term(srv->ctx);
    spw_coord_manifest_fini(&srv->cur);
    spw_arena_destroy(srv->arena);
    free(srv->out.data);
    free(srv->commit_ids);
    free(srv->member_ids);
    free(srv->group_tmp);
    free(srv->unit_committed);
    free(srv->rule_tmp);
    free(srv->speed_tmp);
    free(srv->listen);
    free(srv->dir);
    free(srv);
}
