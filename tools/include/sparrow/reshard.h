/* tools: `sparrow reshard`, a checkpoint epoch rewritten for another shard count. */
#ifndef SPARROW_RESHARD_H
#define SPARROW_RESHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/config.h"
#include "sparrow/err.h"

/*
 * Reads one checkpoint epoch (its MANIFEST and every shard checkpoint, each verified against the
 * manifest) and writes the same rows (weights, optimizer state, version, counters) for n shards,
 * every row at shard spw_hash_shard(key, n), with a MANIFEST that keeps the source's Kafka
 * offsets, update offsets and example count, and a LATEST naming the epoch. The output root
 * appears whole: it is built in a temporary sibling "<to>.reshard-<pid>.tmp" and renamed.
 */

/* The property table of `sparrow reshard` (tools/src/reshard_config.c): reshard.* and
 * log.level. Static, owned by the module. */
extern const struct spw_config_prop spw_reshard_config_props[];
extern const size_t spw_reshard_config_n_props;

/* Most shards of either side (the coordinator's SPW_COORD_MAX_SHARDS). */
#define SPW_RESHARD_MAX_SHARDS 1024

struct spw_reshard_conf {
    const char *from; /* an epoch directory <root>/checkpoints/<E>, or a root with LATEST */
    const char *to;   /* the output root: must not exist or be an empty directory */
    uint32_t shards;  /* 1..SPW_RESHARD_MAX_SHARDS */
};

/* Fills conf from a configuration of spw_reshard_config_props (its strings stay owned by cfg).
 * SPW_ERR_INVALID with errstr when reshard.from, reshard.to or reshard.shards is unset or empty.
 * Thread-safe for distinct conf. */
spw_err_t spw_reshard_conf_from_config(const spw_config_t *cfg, struct spw_reshard_conf *conf,
                                       char *errstr, size_t errstr_size);

/*
 * Runs the reshard. On success writes to report (may be NULL) one line for the run and one per
 * new shard (rows, checksum) and returns SPW_OK. On failure nothing is left at conf->to (nor a
 * temporary directory) and errstr says why: SPW_ERR_NOT_FOUND (no such checkpoint),
 * SPW_ERR_EXISTS (conf->to not empty), SPW_ERR_CORRUPT (a manifest or shard that does not
 * verify, rows that do not add up), SPW_ERR_STOPPED (SIGTERM/SIGINT, spw_signal_stop_requested),
 * or I/O and RocksDB errors. Blocks; one run per output directory at a time.
 */
spw_err_t spw_reshard_run(const struct spw_reshard_conf *conf, FILE *report, char *errstr,
                          size_t errstr_size);

#endif
