/* tools: `sparrow export`, a checkpoint epoch's rows (or the rows changed since an older epoch) as
 * files another stack reads: TSV or NumPy .npy, with a JSON metadata file (docs/FORMATS.md).
 */
#ifndef SPARROW_EXPORT_H
#define SPARROW_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/trainer.h"

/*
 * What an export writes into its output directory (which must not exist or be empty):
 *   tsv:  rows.tsv      one row per line: key (decimal u64) TAB w[0] TAB ... w[dim-1] (%.9g:
 *                       the float32 exactly), ascending by key
 *         removed.tsv   (--since only) one removed key per line, ascending
 *         dense.tsv     (deep models) the network's parameters, one float per line (%.9g)
 *   npy:  keys.npy      uint64 '<u8', shape (n,), ascending
 *         weights.npy   float32 '<f4', shape (n, dim), row i the weights of keys[i]
 *         removed.npy   (--since only) uint64, shape (m,), ascending
 *         dense.npy     (deep models) float32 '<f4', shape (P,)
 *   both: metadata.json model, dim, epoch, since_epoch, rows, removed, shards, example_count,
 *                       created_ms, the key hash and shard hash named, the files, and for a deep
 *                       model "dense": its description, fields and layer layout
 * The rows are the shards' weights (the optimizer state is not exported); key 0 is the global
 * bias row. A deep model's dense blocks (sparrow/hash.h) are not rows: they are written as the
 * network's weights (the seeded initial weights plus the blocks, spw_model_dense_init), in
 * sparrow/dense.h's parameter layout, whole in an incremental export too. With since (E0): the rows
 * of E that are new or whose weights differ (bit for bit) from E0's, and the keys of E0 that E no
 * longer holds (TTL, evictions). Memory stays bounded whatever the model's size: every shard
 * checkpoint is read in key order (RocksDB's) and merged.
 */

/* The property table of `sparrow export` (tools/src/export_config.c): export.* and log.level. */
extern const struct spw_config_prop spw_export_config_props[];
extern const size_t spw_export_config_n_props;

enum spw_export_format {
    SPW_EXPORT_TSV = 0,
    SPW_EXPORT_NPY = 1,
};

struct spw_export_conf {
    const char *checkpoint; /* a root, its checkpoints/ directory, or an epoch directory */
    uint64_t epoch;         /* 0: LATEST (or the epoch directory's) */
    uint64_t since;         /* 0: every row; else the rows changed since this epoch */
    const char *to;         /* output directory: must not exist or be empty */
    enum spw_export_format format;
    const char *log_dir; /* RocksDB's info logs while reading; NULL: a temporary directory */
    /* the trainer.* model settings: a deep one (spw_model_is_deep) is the network whose dense
     * blocks the checkpoint must hold, exactly; LR and FM are the manifest's (or the rows' dim's)
     */
    struct spw_model model;
};

struct spw_export_result {
    uint64_t epoch, since;
    uint32_t dim, shards;
    char model[8];    /* "lr", "fm", "deepfm" or "dcnv2" */
    uint64_t rows;    /* written */
    uint64_t removed; /* keys written as removed (since only) */
    uint64_t unchanged;
    size_t dense_params; /* floats written to the dense file (0 unless deep) */
};

/* Fills conf from a configuration of spw_export_config_props (strings borrowed from cfg).
 * SPW_ERR_INVALID with errstr when export.checkpoint or export.to is unset, since is not below
 * epoch, or the trainer.* model settings are bad. Pure. */
spw_err_t spw_export_conf_from_config(const spw_config_t *cfg, struct spw_export_conf *conf,
                                      char *errstr, size_t errstr_size);

/*
 * Runs the export. SPW_OK with *res filled; otherwise nothing of the export is left (the files it
 * wrote are removed, and the directory when it made it) and errstr names the cause:
 * SPW_ERR_NOT_FOUND (no such checkpoint or epoch; the epochs present are listed), SPW_ERR_EXISTS
 * (conf->to is not an empty directory), SPW_ERR_CORRUPT (a manifest or shard checkpoint that does
 * not verify, shards of different widths, a key in two shards), SPW_ERR_INVALID (the epochs'
 * widths differ; dense blocks without a deep conf->model, or not exactly its blocks; a deep
 * model's dim not the rows'), SPW_ERR_STOPPED (SIGTERM), I/O and RocksDB errors. Blocks;
 * thread-safe for distinct outputs.
 */
spw_err_t spw_export_run(const struct spw_export_conf *conf, struct spw_export_result *res,
                         char *errstr, size_t errstr_size);

#endif
