/* Private to the coordinator library: its metrics and the epoch's offset merge. */
#ifndef SPARROW_COORD_INT_H
#define SPARROW_COORD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sparrow/coordinator.h"
#include "sparrow/sparrow.pb-c.h"
#include "sparrow/metrics.h"

/* Handles into the registry (NULL when there is none) and the counters' last values. Owned by
 * the server's thread. */
struct spw_coord__metrics {
    spw_gauge_t *trainers, *shards_down, *generation, *latest_epoch, *example_count, *ckpt_age;
    spw_gauge_t *out_of_barrier, *units;
    spw_counter_t *epochs_ok, *epochs_aborted, *recoveries, *removed;
    spw_counter_t *step_commits, *step_waited, *step_late, *elastic_leaves, *elastic_rejoins;
    spw_counter_t *auth_refused; /* incremented by the CURVE server itself */
    spw_counter_t *malformed;
    spw_counter_t *continued, *retrained;
    uint64_t seen_continued, seen_retrained;
    uint64_t seen_ok, seen_aborted, seen_recoveries, seen_removed;
    uint64_t seen_commits, seen_waited, seen_late, seen_leaves, seen_rejoins, seen_malformed;
};

/* Registers every metric in r (NULL: none; every handle stays NULL). */
void spw_coord__metrics_register(struct spw_coord__metrics *m, spw_metrics_t *r);

/* Mirrors st (and the two figures stats do not hold) into the metrics. */
void spw_coord__metrics_sync(struct spw_coord__metrics *m, const struct spw_coord_server_stats *st,
                             uint32_t shards_down, double ckpt_age_s);

/* ---- the offsets a completed epoch records (offset_merge.c) ----
 * Pure functions: no server state, no I/O, no allocation; the caller owns every array. Safe
 * from any thread on arrays no other thread writes. */

/* Converting one entry to and from its message: to_pb points pb's strings into o (borrowed for
 * pb's life); from_pb copies (strings cut to fit). */
void spw_coord__offset_to_pb(const struct spw_coord_offset *o, Sparrow__PartitionOffset *pb);
void spw_coord__offset_from_pb(const Sparrow__PartitionOffset *pb, struct spw_coord_offset *o);

/* A borrowed array of offsets (one trainer's report, one shard's update-stream offsets). */
struct spw_coord__offsets {
    const struct spw_coord_offset *v;
    size_t n;
};

/* One live trainer's CheckpointReport in the epoch that closes. examples_reported is its running
 * total since it registered, examples_counted the part of it earlier manifests already hold. */
struct spw_coord__report {
    struct spw_coord__offsets offsets;
    uint64_t examples_reported, examples_counted;
};

/* The Kafka offsets of the new manifest into out: base (the previous manifest's, in order),
 * then each report's partitions in order, a partition already present overwritten in place
 * (offset and skip), a new one appended. Source high-water marks merge the same way, keyed by
 * (topic, partition, source topic, source partition), apart from the positions. So a partition
 * nobody reported keeps its old offset, one that moved to another trainer takes the new owner's
 * report, and of two reports of one partition the later in `reports` wins (the server aborts such
 * an epoch before it merges). out holds n_base + the sum of the reports' n. Returns how many out
 * holds. */
size_t spw_coord__offsets_merge(struct spw_coord_offset *out, const struct spw_coord_offset *base,
                                size_t n_base, const struct spw_coord__report *reports,
                                size_t n_reports);

/* The new manifest's example count: base plus, per report, what it reported beyond what was
 * counted (a report below its counted part adds nothing). */
uint64_t spw_coord__examples_merge(uint64_t base, const struct spw_coord__report *reports,
                                   size_t n_reports);

/* The model-update stream's offsets into out: per partition of shards[0]'s list (in its order)
 * the minimum offset over every shard, skip taken from shards[0]; a partition some shard did not
 * report is left out. Returns 0 (nothing) when n_shards is 0 or any shard reported none. out
 * holds shards[0].n. */
size_t spw_coord__update_offsets_min(struct spw_coord_offset *out,
                                     const struct spw_coord__offsets *shards, size_t n_shards);

#endif
