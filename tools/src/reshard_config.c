/* The property table of `sparrow reshard` (sparrow/reshard.h). */
#include "sparrow/reshard.h"

const struct spw_config_prop spw_reshard_config_props[] = {
    {"reshard.from", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Checkpoint to rewrite (required): an epoch directory ROOT/checkpoints/E, or a root "
     "whose checkpoints/LATEST names one."},
    {"reshard.to", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Output root (required), which must not exist or be empty: it receives checkpoints/E/ "
     "and checkpoints/LATEST, whole or not at all."},
    {"reshard.shards", SPW_CONFIG_INT, NULL, 1, SPW_RESHARD_MAX_SHARDS, NULL,
     "Shard count of the rewritten checkpoint (required)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_reshard_config_n_props =
    sizeof(spw_reshard_config_props) / sizeof(spw_reshard_config_props[0]);

spw_err_t spw_reshard_conf_from_config(const spw_config_t *cfg, struct spw_reshard_conf *conf,
                                       char *errstr, size_t errstr_size)
{
    const char *from = spw_config_str(cfg, "reshard.from");
    const char *to = spw_config_str(cfg, "reshard.to");
    if (!from || !to || !from[0] || !to[0] || !spw_config_is_set(cfg, "reshard.shards")) {
        snprintf(errstr, errstr_size,
                 "reshard.from, reshard.shards and reshard.to (--from, --shards, --to) are "
                 "required");
        return SPW_ERR_INVALID;
    }
    conf->from = from;
    conf->to = to;
    conf->shards = (uint32_t)spw_config_int(cfg, "reshard.shards");
    return SPW_OK;
}
