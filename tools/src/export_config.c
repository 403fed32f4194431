/* The property table of `sparrow export` (sparrow/export.h). */
#include "sparrow/export.h"

#include <stdio.h>
#include <string.h>

const struct spw_config_prop spw_export_config_props[] = {
    {"export.checkpoint", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Checkpoint to export (required): a root (pserver.checkpoint.dir, trainer.checkpoint.dir), "
     "its checkpoints/ directory, or an epoch directory checkpoints/E."},
    {"export.epoch", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL,
     "Epoch to export; 0: the one LATEST names (or the epoch directory given)."},
    {"export.since", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL,
     "Incremental export: only the rows that changed between this older epoch and export.epoch, "
     "plus the keys removed since (both epochs must still be present: "
     "coordinator.checkpoint.keep, trainer.checkpoint.keep). 0: every row."},
    {"export.to", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Output directory (required); it must not exist or be empty."},
    {"export.format", SPW_CONFIG_ENUM, "tsv", 0, 0, "tsv|npy",
     "Files written: tsv (rows.tsv: key and weights per line) or npy (keys.npy uint64, "
     "weights.npy float32 n x dim), each with metadata.json (docs/FORMATS.md)."},
    {"export.log.dir", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Directory for RocksDB's info logs while the checkpoints are read (never the checkpoint "
     "itself); unset: a temporary directory, removed after."},
    /* the trainer's rows (same names and defaults): a deep model's network, which its dense
     * blocks are the weights of; LR and FM come from the checkpoint */
    SPW_TRAINER_MODEL_CONFIG_PROPS,
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_export_config_n_props =
    sizeof(spw_export_config_props) / sizeof(spw_export_config_props[0]);

spw_err_t spw_export_conf_from_config(const spw_config_t *cfg, struct spw_export_conf *conf,
                                      char *errstr, size_t errstr_size)
{
    const char *ck = spw_config_str(cfg, "export.checkpoint");
    const char *to = spw_config_str(cfg, "export.to");
    if (!ck || !ck[0] || !to || !to[0]) {
        snprintf(errstr, errstr_size,
                 "export.checkpoint and export.to (--checkpoint DIR, --to PATH) are required");
        return SPW_ERR_INVALID;
    }
    const char *log_dir = spw_config_str(cfg, "export.log.dir");
    *conf = (struct spw_export_conf){
        .checkpoint = ck,
        .epoch = (uint64_t)spw_config_int(cfg, "export.epoch"),
        .since = (uint64_t)spw_config_int(cfg, "export.since"),
        .to = to,
        .format = strcmp(spw_config_str(cfg, "export.format"), "npy") == 0 ? SPW_EXPORT_NPY
                                                                           : SPW_EXPORT_TSV,
        .log_dir = log_dir && log_dir[0] ? log_dir : NULL,
    };
    if (spw_trainer_model_from_config(cfg, &conf->model, errstr, errstr_size) != SPW_OK)
        return SPW_ERR_INVALID;
    if (conf->since && conf->epoch && conf->since >= conf->epoch) {
        snprintf(errstr, errstr_size,
                 "export.since=%llu must be an older epoch than export.epoch=%llu",
                 (unsigned long long)conf->since, (unsigned long long)conf->epoch);
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}
