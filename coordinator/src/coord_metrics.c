/* The coordinator's /metrics: its stats mirrored into gauges and counters (coord_int.h). */
#include "coord_int.h"

static void add_delta(spw_counter_t *c, uint64_t now, uint64_t *seen)
{
    if (c && now > *seen)
        spw_counter_add(c, now - *seen);
    *seen = now;
}

void spw_coord__metrics_register(struct spw_coord__metrics *m, spw_metrics_t *r)
{
    memset(m, 0, sizeof(*m));
    if (!r)
        return;
    m->trainers = spw_metrics_gauge_new(r, "sparrow_coord_trainers", "Live trainers.", NULL);
    m->shards_down = spw_metrics_gauge_new(r, "sparrow_coord_shards_down",
                                           "Shards that did not answer the last stats poll.", NULL);
    m->generation = spw_metrics_gauge_new(r, "sparrow_coord_generation",
                                          "Recovery generation (grows at every recovery).", NULL);
    m->latest_epoch = spw_metrics_gauge_new(r, "sparrow_coord_latest_epoch",
                                            "Epoch of the LATEST checkpoint (0: none).", NULL);
    m->example_count = spw_metrics_gauge_new(r, "sparrow_coord_latest_examples",
                                             "Examples trained up to the LATEST checkpoint.", NULL);
    m->ckpt_age = spw_metrics_gauge_new(
        r, "sparrow_coord_checkpoint_age_seconds",
        "Seconds since the last checkpoint completed (or since start, before the first).", NULL);
    const char *ep = "sparrow_coord_epochs_total", *ep_help = "Checkpoint epochs, by result.";
    m->epochs_ok = spw_metrics_counter_new(r, ep, ep_help, "result=\"ok\"");
    m->epochs_aborted = spw_metrics_counter_new(r, ep, ep_help, "result=\"aborted\"");
    m->recoveries = spw_metrics_counter_new(r, "sparrow_coord_recoveries_total",
                                            "Global recoveries started.", NULL);
    m->removed = spw_metrics_counter_new(r, "sparrow_coord_members_removed_total",
                                         "Members removed after member.timeout of silence.", NULL);
    m->step_commits = spw_metrics_counter_new(r, "sparrow_coord_step_commits_total",
                                              "Two-phase steps committed (sync, group:G).", NULL);
    const char *st = "sparrow_coord_step_trainers_total",
               *st_help = "Trainers of a unit at each step commit: waited (their step "
                          "contributions averaged) or late (backup workers, out of the barrier).";
    m->step_waited = spw_metrics_counter_new(r, st, st_help, "fate=\"waited\"");
    m->step_late = spw_metrics_counter_new(r, st, st_help, "fate=\"late\"");
    const char *mv = "sparrow_coord_elastic_moves_total",
               *mv_help = "Elastic synchronisation: stragglers moved out of the barrier (leave) "
                          "and back (rejoin).";
    m->elastic_leaves = spw_metrics_counter_new(r, mv, mv_help, "move=\"leave\"");
    m->elastic_rejoins = spw_metrics_counter_new(r, mv, mv_help, "move=\"rejoin\"");
    m->out_of_barrier = spw_metrics_gauge_new(
        r, "sparrow_coord_trainers_out_of_barrier",
        "Trainers elastic synchronisation moved out of the barrier (training asynchronously).",
        NULL);
    m->auth_refused =
        spw_metrics_counter_new(r, "sparrow_coord_auth_refused_total",
                                "Members' connections refused by CurveZMQ: a client key not on "
                                "coordinator.curve.allowed_clients_file.",
                                NULL);
    m->malformed = spw_metrics_counter_new(
        r, "sparrow_coord_malformed_messages_total",
        "Member messages refused: undecodable, oversized or of another protocol version.", NULL);
    m->continued = spw_metrics_counter_new(
        r, "sparrow_coord_continued_total",
        "coordinator.recovery=continue: trainer removals and joins that rolled nothing back.",
        NULL);
    m->retrained = spw_metrics_counter_new(
        r, "sparrow_coord_examples_retrained_total",
        "Examples trained since LATEST that are trained again: every trainer's at a rollback, "
        "a removed trainer's under coordinator.recovery=continue (its partitions' next owners).",
        NULL);
    m->units = spw_metrics_gauge_new(r, "sparrow_coord_sync_units",
                                     "Synchronous units: 1 in sync, the groups in group:G.", NULL);
}

void spw_coord__metrics_sync(struct spw_coord__metrics *m, const struct spw_coord_server_stats *st,
                             uint32_t shards_down, double ckpt_age_s)
{
    if (m->trainers)
        spw_gauge_set(m->trainers, st->trainers);
    if (m->shards_down)
        spw_gauge_set(m->shards_down, shards_down);
    if (m->generation)
        spw_gauge_set(m->generation, (double)st->generation);
    if (m->latest_epoch)
        spw_gauge_set(m->latest_epoch, (double)st->latest_epoch);
    if (m->example_count)
        spw_gauge_set(m->example_count, (double)st->example_count);
    if (m->ckpt_age)
        spw_gauge_set(m->ckpt_age, ckpt_age_s);
    add_delta(m->epochs_ok, st->epochs_completed, &m->seen_ok);
    add_delta(m->epochs_aborted, st->epochs_aborted, &m->seen_aborted);
    add_delta(m->recoveries, st->recoveries, &m->seen_recoveries);
    add_delta(m->removed, st->members_removed, &m->seen_removed);
    add_delta(m->step_commits, st->step_commits, &m->seen_commits);
    add_delta(m->step_waited, st->step_waited, &m->seen_waited);
    add_delta(m->step_late, st->step_late, &m->seen_late);
    add_delta(m->elastic_leaves, st->elastic_leaves, &m->seen_leaves);
    add_delta(m->elastic_rejoins, st->elastic_rejoins, &m->seen_rejoins);
    add_delta(m->malformed, st->malformed, &m->seen_malformed);
    add_delta(m->continued, st->continued, &m->seen_continued);
    add_delta(m->retrained, st->examples_retrained, &m->seen_retrained);
    if (m->out_of_barrier)
        spw_gauge_set(m->out_of_barrier, st->out_of_barrier);
    if (m->units)
        spw_gauge_set(m->units, st->units);
}
