/* The trainer's side of the coordinator: see coord_session.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/coord_client.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/ps_client.h"
#include "sparrow/sparrow.pb-c.h"
#include "sparrow/time.h"
#include "coord_session.h"

/* Partitions a checkpoint report may hold, and partition numbers whose resume offset is remembered
 * (positions not yet stored report it); more is refused with an error, never truncated. */
#define COORD_MAX_PARTS 1024
/* A Clock that waits longer than this holds the Kafka input (partitions paused, the group served)
 * until it is answered. Shorter waits (every step of sync mode) leave the fetches alone: a hold
 * drops what was prefetched and the resume fetches it again. Well below any rebalance timeout. */
#define COORD_HOLD_AFTER_MS 1000
/* Entries of a checkpoint report: the positions and the source high-water marks after them. */
#define COORD_MAX_ENTRIES 16384
/* How long a takeover waits for LATEST's offsets (continue). */
#define COORD_REFRESH_MS 2000

struct spw_trainer_coord {
    spw_coord_client_t *client;
    spw_trainer_loop_t *loop;
    /* The clock: steps plus idle ticks. An idle trainer (no partitions, or no records) ticks
     * too, so that it never holds a barrier the others wait at, and the barriers (and the
     * checkpoints taken there) go on while the whole stream is quiet. */
    uint64_t clock;
    uint64_t clock_sent_ms;          /* when the Clock now waiting (or the last one) was sent */
    uint64_t unclocked;              /* examples of steps not clocked yet (async clock interval) */
    uint64_t step;                   /* two-phase tag of the step being computed (0: none) */
    uint64_t examples_base;          /* the loop's example count at the last restore */
    int64_t resume[COORD_MAX_PARTS]; /* offset a partition (re)started from; -1 unknown */
    uint32_t resume_skip[COORD_MAX_PARTS];
    /* coordinator.recovery=continue: where reading of a partition revoked by the rebalance in
     * progress stood, so that one assigned back to this trainer resumes there (eager rebalances
     * revoke everything and assign again) instead of at LATEST; cleared at every assignment */
    bool kept[COORD_MAX_PARTS];
    int64_t kept_offset[COORD_MAX_PARTS];
    uint32_t kept_skip[COORD_MAX_PARTS];
    /* continue: examples taken from a partition (the source's count since its assignment) at
     * the last report, at the last report that completed (LATEST), and at its revoke: a
     * partition moved to another trainer takes its examples since LATEST out of this trainer's
     * count, since the next owner trains and reports them again */
    int64_t taken_report[COORD_MAX_PARTS], taken_latest[COORD_MAX_PARTS];
    uint64_t kept_taken[COORD_MAX_PARTS];
    /* taken out of the count at the revoke (a report may come before the next assignment: the
     * partition's offsets are not in it), given back if the partition comes back */
    uint64_t moved[COORD_MAX_PARTS];
    /* continue: a revoke while a report waits for its epoch: the part of moved[] that the report
     * holds (its partition's examples between LATEST and the report). The revoke re-registers,
     * which drops the report if its epoch is still open; if the epoch completed first instead,
     * those examples are in LATEST (and the next owner resumes after them), so they count again
     * here at the commit that says so. */
    uint64_t moved_in_report[COORD_MAX_PARTS];
    uint64_t moved_reported;     /* summed over partitions moved away */
    uint64_t moved_report_epoch; /* the epoch of that report */
    bool report_pending;         /* a report sent, neither committed nor replaced yet */
    uint64_t report_epoch;
    uint64_t generation; /* the one its pushes carry (set at a restore, or on proceed) */
    bool reported_final; /* spw_trainer_coord_finish: a report was made since its last tick */
    struct spw_trainer_position pos[COORD_MAX_PARTS];
    struct spw_coord_offset offs[COORD_MAX_ENTRIES];
    struct spw_trainer_mark marks[COORD_MAX_ENTRIES];
    spw_gauge_t *m_clock; /* sparrow_trainer_clock: the clock as the coordinator counts it */
    int64_t clock_base;   /* that clock minus this process's own, from the last proceed */
    spw_histogram_t *m_wait, *m_pause;
    spw_counter_t *m_taken_over, *m_moved;
};

static spw_err_t coord_resume(void *opaque, const char *topic, int32_t partition, int64_t *offset,
                              uint32_t *skip)
{
    spw_trainer_coord_t *tc = opaque;
    spw_err_t err = spw_coord_client_offset(tc->client, topic, partition, offset, skip);
    if (partition >= 0 && partition < COORD_MAX_PARTS) {
        tc->resume[partition] = err == SPW_OK ? *offset : 0;
        tc->resume_skip[partition] = err == SPW_OK ? *skip : 0;
    }
    return err;
}

/* While a Clock waits: Kafka rebalances go on (a held trainer must not stall the group). */
static void coord_wait(void *opaque, int budget_ms)
{
    spw_trainer_coord_t *tc = opaque;
    if (tc->loop && spw_time_mono_ms() - tc->clock_sent_ms >= COORD_HOLD_AFTER_MS)
        spw_trainer_loop_hold_input(tc->loop, budget_ms);
}

static spw_err_t report_checkpoint(spw_trainer_coord_t *tc, uint64_t epoch)
{
    size_t n = 0;
    spw_err_t err = spw_trainer_loop_checkpoint(tc->loop, -1, tc->pos, COORD_MAX_PARTS, &n);
    if (err)
        return err;
    if (n > COORD_MAX_PARTS) {
        /* dropping some would lose their offsets from the manifest: refuse, loudly */
        SPW_ERROR("too many input partitions for a checkpoint report", "partitions=%zu max=%d", n,
                  COORD_MAX_PARTS);
        return SPW_ERR_TOO_BIG;
    }
    const char *topic = spw_trainer_loop_topic(tc->loop);
    for (size_t i = 0; i < n; i++) {
        struct spw_coord_offset *o = &tc->offs[i];
        memset(o, 0, sizeof(*o)); /* a position (the slot may have held a mark last time) */
        snprintf(o->topic, sizeof(o->topic), "%s", topic ? topic : "");
        o->partition = tc->pos[i].partition;
        o->offset = tc->pos[i].offset;
        o->skip = tc->pos[i].skip;
        if (tc->pos[i].partition >= 0 && tc->pos[i].partition < COORD_MAX_PARTS)
            tc->taken_report[tc->pos[i].partition] = (int64_t)tc->pos[i].taken;
        if (tc->pos[i].offset < 0) { /* nothing stored yet: where it (re)started */
            int32_t p = tc->pos[i].partition;
            if (p < 0 || p >= COORD_MAX_PARTS) {
                SPW_ERROR("input partition beyond the coordinator glue's table",
                          "partition=%d max=%d", (int)p, COORD_MAX_PARTS - 1);
                return SPW_ERR_TOO_BIG;
            }
            o->offset = tc->resume[p] >= 0 ? tc->resume[p] : 0;
            o->skip = 0;
        }
    }
    /* the source high-water marks that go with these positions (manifest: restored with them) */
    size_t n_marks = spw_trainer_loop_marks(tc->loop, tc->marks, COORD_MAX_ENTRIES);
    if (n + n_marks > COORD_MAX_ENTRIES) {
        SPW_ERROR("too many source high-water marks for a checkpoint report",
                  "partitions=%zu marks=%zu max=%d", n, n_marks, COORD_MAX_ENTRIES);
        return SPW_ERR_TOO_BIG;
    }
    for (size_t i = 0; i < n_marks; i++) {
        struct spw_coord_offset *o = &tc->offs[n + i];
        memset(o, 0, sizeof(*o));
        snprintf(o->topic, sizeof(o->topic), "%s", topic ? topic : "");
        o->partition = tc->marks[i].partition;
        o->offset = tc->marks[i].offset;
        o->mark = true;
        o->source_partition = tc->marks[i].source_partition;
        snprintf(o->source_topic, sizeof(o->source_topic), "%s", tc->marks[i].source_topic);
    }
    n += n_marks;
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(tc->loop, &st);
    uint64_t examples = st.examples - tc->examples_base;
    if ((err = spw_coord_client_checkpoint_report(tc->client, epoch, tc->offs, n, examples)))
        return err;
    tc->report_pending = true;
    tc->report_epoch = epoch;
    tc->moved_reported = 0; /* this report leaves the moved examples out already */
    SPW_INFO("checkpoint reported", "epoch=%" PRIu64 " partitions=%zu marks=%zu examples=%" PRIu64,
             epoch, n - n_marks, n_marks, examples);
    return SPW_OK;
}

static spw_err_t restore(spw_trainer_coord_t *tc, const struct spw_coord_event *ev)
{
    spw_err_t err = spw_trainer_loop_restore(tc->loop, coord_resume, tc);
    if (err)
        return err;
    tc->report_pending = false; /* everyone is back at LATEST */
    tc->unclocked = 0;          /* rolled back with the rest */
    tc->moved_reported = 0;
    /* the manifest's source high-water marks of this trainer's partitions, with the offsets */
    const char *topic = spw_trainer_loop_topic(tc->loop);
    size_t n_offs = 0, n_marks = 0;
    const struct spw_coord_offset *offs = spw_coord_client_offsets(tc->client, &n_offs);
    for (size_t i = 0; topic && i < n_offs; i++) {
        if (!offs[i].mark || strcmp(offs[i].topic, topic) != 0)
            continue;
        struct spw_trainer_mark mk = {.partition = offs[i].partition,
                                      .source_partition = offs[i].source_partition,
                                      .offset = offs[i].offset,
                                      .source_topic = offs[i].source_topic};
        if ((err = spw_trainer_loop_set_mark(tc->loop, &mk)))
            return err;
        n_marks++;
    }
    /* pushes from now on are of the new generation; older ones still in flight get fenced */
    spw_ps_client_set_generation(spw_trainer_loop_client(tc->loop), ev->generation);
    tc->generation = ev->generation;
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(tc->loop, &st);
    tc->examples_base = st.examples;
    if ((err = spw_coord_client_restore_report(tc->client, ev->generation)))
        return err;
    SPW_INFO("restored", "generation=%" PRIu64 " epoch=%" PRIu64 " marks=%zu", ev->generation,
             ev->epoch, n_marks);
    return SPW_OK;
}

/* Clocks `clock` (a step of `examples`; 0 for an idle tick) and acts on the answers until the
 * coordinator says proceed. *completed (may be NULL): whether this trainer reported to an epoch
 * during the call and that epoch completed (the proceed carries its commit). */
static spw_err_t clock_at(spw_trainer_coord_t *tc, uint64_t clock, uint64_t examples,
                          bool *completed)
{
    if (completed)
        *completed = false;
    uint64_t t0 = spw_time_mono_ns();
    bool checkpointed = false;
    spw_err_t err = SPW_OK;
    tc->clock = clock;
    tc->clock_sent_ms = spw_time_mono_ms();
    examples += tc->unclocked; /* the steps the interval let go unclocked */
    tc->unclocked = 0;
    if (tc->m_clock) /* as the coordinator counts it: its base for this process, last told */
        spw_gauge_set(tc->m_clock, (double)((int64_t)clock + tc->clock_base));
    for (;;) {
        struct spw_coord_event ev;
        if ((err = spw_coord_client_clock_step(tc->client, clock, examples, &ev)))
            break;
        if (ev.kind == SPW_COORD_EV_PROCEED) {
            if (ev.has_clock) {
                tc->clock_base = (int64_t)ev.clock - (int64_t)clock;
                if (tc->m_clock)
                    spw_gauge_set(tc->m_clock, (double)ev.clock);
            }
            if (completed) /* an epoch reported to in this call completed */
                *completed = checkpointed && ev.commit;
            /* two-phase: rows read before this commit are a step old; the next step's pushes
             * carry its tag */
            if (ev.drop_cache || ev.step || tc->step)
                spw_trainer_loop_drop_rows(tc->loop);
            tc->step = ev.step;
            spw_trainer_loop_set_step(tc->loop, ev.step);
            if (spw_coord_client_recovery_continue(tc->client) && ev.generation != tc->generation) {
                /* continue: a trainer that joined after the last restore gets none; its pushes
                 * must carry the shards' generation or they are fenced */
                spw_ps_client_set_generation(spw_trainer_loop_client(tc->loop), ev.generation);
                tc->generation = ev.generation;
            }
            spw_err_t cerr;
            if (ev.commit) { /* the last report is LATEST now */
                memcpy(tc->taken_latest, tc->taken_report, sizeof(tc->taken_latest));
                if (tc->moved_reported > 0 &&
                    spw_coord_client_latest_epoch(tc->client) == tc->moved_report_epoch)
                    tc->examples_base -= tc->moved_reported;
                tc->moved_reported = 0;
                tc->report_pending = false;
            }
            if (ev.commit && (cerr = spw_trainer_loop_commit(tc->loop, false)) != SPW_OK)
                SPW_WARN("offset commit failed", "error=\"%s\"", spw_err_str(cerr));
            break;
        }
        if (ev.kind == SPW_COORD_EV_CHECKPOINT) {
            checkpointed = true;
            tc->reported_final = true;
            err = report_checkpoint(tc, ev.epoch);
        } else {
            err = restore(tc, &ev);
        }
        if (err)
            break;
    }
    spw_err_t rerr = spw_trainer_loop_release_input(tc->loop);
    if (rerr)
        SPW_WARN("resuming the input failed", "error=\"%s\"", spw_err_str(rerr));
    double secs = (double)(spw_time_mono_ns() - t0) * 1e-9;
    if (tc->m_wait)
        spw_histogram_observe(tc->m_wait, secs);
    if (checkpointed && tc->m_pause)
        spw_histogram_observe(tc->m_pause, secs);
    return err;
}

static spw_err_t coord_after_step(void *opaque, spw_trainer_loop_t *loop,
                                  const struct spw_trainer_step_info *info)
{
    spw_trainer_coord_t *tc = opaque;
    if (tc->step) {
        /* two-phase: the coordinator commits the step once every trainer's Clock says its
         * pushes are on the shards, so they must be acknowledged before the Clock goes out */
        spw_err_t err = spw_ps_client_flush(spw_trainer_loop_client(loop), -1);
        if (err)
            return err;
    }
    /* async: each Clock waits for the coordinator's answer, a round trip that a loaded machine
     * stretches to milliseconds; within the interval it grants, the steps go on unclocked */
    uint32_t interval = spw_coord_client_clock_interval_ms(tc->client);
    if (!tc->step && interval && spw_time_mono_ms() - tc->clock_sent_ms < interval) {
        tc->unclocked += info->examples;
        return SPW_OK;
    }
    return clock_at(tc, tc->clock + 1, info->examples, NULL);
}

static spw_err_t coord_idle(void *opaque, spw_trainer_loop_t *loop)
{
    (void)loop;
    spw_trainer_coord_t *tc = opaque;
    return clock_at(tc, tc->clock + 1, 0, NULL);
}

/* coordinator.recovery=continue: a partition this trainer held just before the rebalance resumes
 * where it was (no rollback of its own work); one taken over from another trainer (one removed,
 * or a rebalance) resumes from LATEST's offsets, not the group's committed ones: commits happen
 * at checkpoints only, and LATEST may be newer than the group's commits of a trainer that died
 * before its commit. No rejoin: the coordinator starts no recovery for moved partitions. */
static void assign_continue(spw_trainer_coord_t *tc, const char *topic,
                            struct spw_trainer_position *parts, size_t n)
{
    bool takeover = false;
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i].partition;
        takeover |= !(p >= 0 && p < COORD_MAX_PARTS && tc->kept[p]);
    }
    /* the offsets of the last reply may predate LATEST: a partition taken over resumes from the
     * newest checkpoint, or the examples between the two would be counted twice */
    spw_err_t rerr =
        takeover && topic ? spw_coord_client_refresh_offsets(tc->client, COORD_REFRESH_MS) : SPW_OK;
    if (rerr != SPW_OK)
        SPW_WARN("LATEST's offsets not refreshed before a takeover", "error=\"%s\" latest=%" PRIu64,
                 spw_err_str(rerr), spw_coord_client_latest_epoch(tc->client));
    for (size_t i = 0; topic && i < n; i++) {
        int32_t p = parts[i].partition;
        if (p >= 0 && p < COORD_MAX_PARTS && tc->kept[p]) {
            parts[i].offset = tc->kept_offset[p];
            parts[i].skip = tc->kept_skip[p];
            tc->resume[p] = parts[i].offset;
            tc->resume_skip[p] = parts[i].skip;
            /* the source counts from 0 again; its examples since LATEST count again */
            tc->examples_base -= tc->moved[p];
            tc->moved[p] = 0;
            tc->taken_report[p] -= (int64_t)tc->kept_taken[p];
            tc->taken_latest[p] -= (int64_t)tc->kept_taken[p];
            tc->kept[p] = false;
            tc->moved_in_report[p] = 0;
            continue;
        }
        if (p >= 0 && p < COORD_MAX_PARTS)
            tc->taken_report[p] = tc->taken_latest[p] = 0;
        int64_t offset = 0;
        uint32_t skip = 0;
        spw_err_t err = coord_resume(tc, topic, p, &offset, &skip);
        if (err == SPW_OK) {
            parts[i].offset = offset;
            parts[i].skip = skip;
        } else { /* not in LATEST: from its first record (nothing of it was checkpointed) */
            parts[i].offset = 0;
            parts[i].skip = 0;
        }
        if (tc->m_taken_over)
            spw_counter_inc(tc->m_taken_over);
        SPW_INFO("partition taken over from LATEST",
                 "partition=%d offset=%" PRId64 " skip=%u latest=%" PRIu64 " recovery=continue",
                 (int)p, parts[i].offset, parts[i].skip, spw_coord_client_latest_epoch(tc->client));
    }
    /* revoked and not assigned back: moved to another trainer */
    for (int32_t p = 0; p < COORD_MAX_PARTS; p++) {
        if (!tc->kept[p])
            continue;
        tc->kept[p] = false;
        uint64_t moved = tc->moved[p]; /* out of the count since the revoke */
        tc->moved[p] = 0;
        tc->moved_reported += tc->moved_in_report[p];
        tc->moved_in_report[p] = 0;
        tc->taken_report[p] = tc->taken_latest[p] = 0;
        if (moved == 0)
            continue;
        if (tc->m_moved)
            spw_counter_add(tc->m_moved, (uint64_t)moved);
        SPW_INFO("partition moved away",
                 "partition=%d retrained=%" PRIu64 " recovery=continue "
                 "detail=\"its examples since LATEST leave this trainer's count: the next owner "
                 "trains them again\"",
                 (int)p, moved);
    }
}

/* Registers again (the coordinator forgets a held Clock, drops a report waiting for its epoch,
 * and under rollback starts a recovery); a failed send is logged. */
static void rejoin(spw_trainer_coord_t *tc)
{
    spw_err_t err = spw_coord_client_rejoin(tc->client);
    if (err)
        SPW_WARN("rejoin failed", "error=\"%s\"", spw_err_str(err));
}

static void coord_on_assign(void *opaque, struct spw_trainer_position *parts, size_t n)
{
    spw_trainer_coord_t *tc = opaque;
    const char *topic = tc->loop ? spw_trainer_loop_topic(tc->loop) : NULL;
    if (spw_coord_client_recovery_continue(tc->client)) {
        assign_continue(tc, topic, parts, n);
        return;
    }
    for (size_t i = 0; topic && i < n; i++) {
        int64_t offset;
        uint32_t skip;
        if (coord_resume(tc, topic, parts[i].partition, &offset, &skip) == SPW_OK) {
            parts[i].offset = offset;
            parts[i].skip = skip;
        }
    }
    /* partitions moved: the coordinator runs a recovery */
    rejoin(tc);
}

/* Partitions taken away: what this trainer trained from them since the last checkpoint is in its
 * example count but their offsets can no longer be stored or reported, so no checkpoint may
 * complete with this trainer's state as it is. The Register makes the coordinator start a
 * recovery before any later CheckpointReport of this trainer (same socket, in order). */
static void coord_on_revoke(void *opaque, const struct spw_trainer_position *parts, size_t n)
{
    spw_trainer_coord_t *tc = opaque;
    if (n == 0)
        return;
    if (spw_coord_client_recovery_continue(tc->client)) {
        /* continue: no recovery follows; remember where reading stood in case the partitions
         * come back in this rebalance (the example count keeps what they trained: their next
         * owner, if another, trains it again from LATEST, at-least-once) */
        for (size_t i = 0; i < n; i++) {
            int32_t p = parts[i].partition;
            if (p < 0 || p >= COORD_MAX_PARTS)
                continue;
            if (parts[i].read_valid) {
                tc->kept[p] = true;
                tc->kept_offset[p] = parts[i].read_offset;
                tc->kept_skip[p] = parts[i].read_skip;
            } else if (tc->resume[p] >= 0) { /* nothing read since it started there */
                tc->kept[p] = true;
                tc->kept_offset[p] = tc->resume[p];
                tc->kept_skip[p] = tc->resume_skip[p];
            }
            tc->kept_taken[p] = parts[i].taken;
            int64_t since = (int64_t)parts[i].taken - tc->taken_latest[p];
            tc->moved[p] = tc->kept[p] && since > 0 ? (uint64_t)since : 0;
            tc->examples_base += tc->moved[p];
            int64_t in_report = tc->taken_report[p] - tc->taken_latest[p];
            tc->moved_in_report[p] =
                tc->report_pending && tc->kept[p] && in_report > 0 ? (uint64_t)in_report : 0;
        }
        if (tc->report_pending) {
            /* the report waiting for its epoch names these partitions: dropped if the epoch is
             * still open when the Register arrives (this trainer reports again without them) */
            tc->moved_report_epoch = tc->report_epoch;
            rejoin(tc);
        }
        return;
    }
    rejoin(tc);
}

static void metrics_register(spw_trainer_coord_t *tc, spw_metrics_t *r)
{
    static const double secs[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                  0.5,   1,     2.5,  5,     10,   30,  60};
    const size_t n = sizeof(secs) / sizeof(secs[0]);
    tc->m_clock = spw_metrics_gauge_new(
        r, "sparrow_trainer_clock", "The coordinator clock reached (steps and idle ticks).", NULL);
    tc->m_wait = spw_metrics_histogram_new(
        r, "sparrow_trainer_coord_wait_seconds",
        "Time from a Clock to the coordinator's proceed (barriers, checkpoints, recoveries).", NULL,
        secs, n);
    tc->m_pause = spw_metrics_histogram_new(
        r, "sparrow_trainer_checkpoint_pause_seconds",
        "Time a trainer stood still for a checkpoint epoch (flush, report, wait for the shards).",
        NULL, secs, n);
    tc->m_taken_over = spw_metrics_counter_new(
        r, "sparrow_trainer_partitions_taken_over_total",
        "coordinator.recovery=continue: partitions assigned that this trainer did not hold just "
        "before (at its start, or from another trainer), resumed from LATEST's offsets.",
        NULL);
    tc->m_moved = spw_metrics_counter_new(
        r, "sparrow_trainer_examples_moved_total",
        "coordinator.recovery=continue: examples trained since LATEST from partitions moved to "
        "another trainer (which trains them again), taken out of this trainer's reports.",
        NULL);
}

spw_trainer_coord_t *spw_trainer_coord_new(const struct spw_trainer_loop_conf *conf,
                                           struct spw_trainer_hooks *hooks, char *errstr,
                                           size_t errstr_size)
{
    const char *endpoint = conf->coordinator;
    uint32_t trainer_id = conf->trainer_id;
    spw_metrics_t *metrics = conf->metrics;
    struct spw_curve_client_keys curve;
    if (spw_curve_client_load(
            &curve, "trainer.coordinator.curve.server_key_file",
            conf->coordinator_curve_server_key_file, "trainer.curve.client_key_file",
            conf->coordinator_curve_client_key_file, errstr, errstr_size) != SPW_OK)
        return NULL;
    spw_trainer_coord_t *tc = calloc(1, sizeof(*tc));
    if (!tc) {
        spw_curve_client_wipe(&curve);
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < COORD_MAX_PARTS; i++)
        tc->resume[i] = -1;
    char member[128];
    if (trainer_id)
        snprintf(member, sizeof(member), "trainer-%u", trainer_id);
    else {
        char host[64] = "";
        gethostname(host, sizeof(host) - 1);
        snprintf(member, sizeof(member), "trainer-%s-%ld", host, (long)getpid());
    }
    struct spw_coord_client_conf cc = {.endpoint = endpoint,
                                       .member_id = member,
                                       .role = SPARROW__MEMBER_ROLE__ROLE_TRAINER,
                                       .heartbeat_ms = 200,
                                       .register_timeout_ms = 1000,
                                       .curve = &curve};
    SPW_INFO("registering with the coordinator", "endpoint=%s member=%s curve=%s", endpoint, member,
             curve.enabled ? "on" : "off");
    tc->client = spw_coord_client_new(&cc, 60000, errstr, errstr_size);
    spw_curve_client_wipe(&curve); /* the client keeps its own copy */
    if (!tc->client) {
        free(tc);
        return NULL;
    }
    spw_coord_client_set_wait(tc->client, coord_wait, tc);
    if (metrics)
        metrics_register(tc, metrics);
    *hooks = (struct spw_trainer_hooks){.opaque = tc,
                                        .after_step = coord_after_step,
                                        .idle = coord_idle,
                                        .on_assign = coord_on_assign,
                                        .on_revoke = coord_on_revoke};
    return tc;
}

spw_err_t spw_trainer_coord_start(spw_trainer_coord_t *tc, spw_trainer_loop_t *loop)
{
    tc->loop = loop;
    spw_coord_client_set_trainer_id(tc->client, spw_trainer_loop_trainer_id(loop));
    return clock_at(tc, 0, 0, NULL);
}

/* Epochs a final checkpoint may see aborted, and idle ticks it sends without being asked for a
 * report (a coordinator that ignores Clock.input_done answers each at once), before it fails. */
#define FINAL_ABORTS 3
#define FINAL_TICKS  50

spw_err_t spw_trainer_coord_finish(spw_trainer_coord_t *tc)
{
    spw_coord_client_set_input_done(tc->client);
    tc->reported_final = false;
    int aborts = 0;
    for (int tick = 0; tick < FINAL_TICKS && aborts < FINAL_ABORTS; tick++) {
        bool completed = false;
        spw_err_t err = clock_at(tc, tc->clock + 1, 0, &completed);
        if (err)
            return err;
        if (completed) {
            SPW_INFO("final checkpoint completed", "epoch=%" PRIu64,
                     spw_coord_client_latest_epoch(tc->client));
            return SPW_OK;
        }
        if (tc->reported_final) { /* reported, and the epoch was aborted */
            aborts++;
            SPW_WARN("final checkpoint aborted: trying again", "attempt=%d of=%d", aborts,
                     FINAL_ABORTS);
        }
        tc->reported_final = false;
    }
    SPW_ERROR("final checkpoint failed: the model trained since LATEST is not in a checkpoint",
              "latest=%" PRIu64 " aborted=%d hint=\"see the coordinator's log (a shard failing its "
              "checkpoint, or a coordinator that takes no final epoch)\"",
              spw_coord_client_latest_epoch(tc->client), aborts);
    return SPW_ERR_TIMEOUT;
}

void spw_trainer_coord_destroy(spw_trainer_coord_t *tc)
{
    if (!tc)
        return;
    if (tc->client)
        spw_coord_client_leave(tc->client);
    spw_coord_client_destroy(tc->client);
    free(tc);
}
