/* Private to the coordinator library: its metrics. */
#ifndef SPARROW_COORD_INT_H
#define SPARROW_COORD_INT_H

#include <stdint.h>
#include <string.h>

#include "sparrow/coordinator.h"
#include "sparrow/metrics.h"

/* Handles into the registry (NULL when there is none) and the counters' last values. Owned by
 * the server's thread. */
struct spw_coord__metrics {
    spw_gauge_t *trainers, *shards_down, *generation, *latest_epoch, *example_count, *ckpt_age;
    spw_gauge_t *out_of_barrier, *units;
    spw_counter_t *epochs_ok, *epochs_aborted, *recoveries, *removed;
    spw_counter_t *step_commits, *step_waited, *step_late, *elastic_leaves, *elastic_rejoins;
    uint64_t seen_ok, seen_aborted, seen_recoveries, seen_removed;
    uint64_t seen_commits, seen_waited, seen_late, seen_leaves, seen_rejoins;
};

/* Registers every metric in r (NULL: none; every handle stays NULL). */
void spw_coord__metrics_register(struct spw_coord__metrics *m, spw_metrics_t *r);

/* Mirrors st (and the two figures stats do not hold) into the metrics. */
void spw_coord__metrics_sync(struct spw_coord__metrics *m, const struct spw_coord_server_stats *st,
                             uint32_t shards_down, double ckpt_age_s);

#endif
