/* The property table of `sparrow coordinator` and its translation into a server conf. */
#include <stdio.h>

#include "sparrow/coordinator.h"

const struct spw_config_prop spw_coordinator_config_props[] = {
    {"coordinator.listen", SPW_CONFIG_STRING, "tcp://0.0.0.0:7100", 0, 1000, NULL,
     "ZeroMQ endpoint the coordinator binds for trainers and other members."},
    {"coordinator.mode", SPW_CONFIG_ENUM, "async", 0, 0, "async|sync|ssp:|hybrid:",
     "Trainer mode: async; sync (synchronous steps: every trainer's step-t gradients averaged on "
     "the shards and applied once, step t+1 reads the result, so K trainers of batch B train "
     "like one of batch K*B); ssp:S (at most S steps ahead); hybrid:K (barrier every K)."},
    {"coordinator.shards", SPW_CONFIG_STRING, "", 0, 16384, NULL,
     "Parameter-server shards (comma-separated ZeroMQ endpoints, shard 0 first)."},
    {"coordinator.checkpoint.dir", SPW_CONFIG_STRING, ".", 1, 4000, NULL,
     "Root of checkpoints/<epoch>/ (the shards' pserver.checkpoint.dir, shared)."},
    {"coordinator.member.timeout", SPW_CONFIG_DURATION_MS, "5s", 100, 3600000, NULL,
     "A member silent this long is removed (a dead trainer never blocks a barrier)."},
    {"coordinator.checkpoint.steps", SPW_CONFIG_INT, "0", 0, 1000000000, NULL,
     "Checkpoint every this many steps of the fastest trainer (hybrid: of barriers' steps); 0: "
     "off (hybrid: every barrier)."},
    {"coordinator.checkpoint.interval", SPW_CONFIG_DURATION_MS, "30s", 0, 86400000, NULL,
     "Checkpoint at least this often; 0: no time trigger."},
    {"coordinator.checkpoint.timeout", SPW_CONFIG_DURATION_MS, "30s", 100, 3600000, NULL,
     "Longest wait for trainers' reports and shards' checkpoints within one epoch."},
    {"coordinator.checkpoint.keep", SPW_CONFIG_INT, "3", 1, 1000, NULL,
     "Checkpoint epochs kept; older ones are removed."},
    {"coordinator.startup.grace", SPW_CONFIG_DURATION_MS, "2s", 0, 600000, NULL,
     "After start, wait this long for members to (re)join before the first recovery."},
    {"coordinator.http.addr", SPW_CONFIG_STRING, "0.0.0.0", 0, 255, NULL,
     "Address of the /metrics, /healthz, /readyz endpoint."},
    {"coordinator.http.port", SPW_CONFIG_INT, "-1", -1, 65535, NULL,
     "Port of the HTTP endpoint (0: any free port, logged; -1: no endpoint). The Kubernetes "
     "manifests use 7101."},
    {"log.level", SPW_CONFIG_ENUM, "info", 0, 0, "error|warn|info|debug",
     "Lowest level of log line written to stderr."},
};
const size_t spw_coordinator_config_n_props =
    sizeof(spw_coordinator_config_props) / sizeof(spw_coordinator_config_props[0]);

spw_err_t spw_coord_server_conf_from_config(const spw_config_t *cfg,
                                            struct spw_coord_server_conf *conf, char *errstr,
                                            size_t errstr_size)
{
    struct spw_coord_server_conf c = {0};
    c.listen = spw_config_str(cfg, "coordinator.listen");
    if (spw_coord_mode_parse(spw_config_str(cfg, "coordinator.mode"), &c.mode) != SPW_OK) {
        snprintf(errstr, errstr_size,
                 "coordinator.mode: expected async, sync, ssp:S (0..1000000) or hybrid:K "
                 "(1..1000000000)");
        return SPW_ERR_INVALID;
    }
    c.shards = spw_config_str(cfg, "coordinator.shards");
    c.checkpoint_dir = spw_config_str(cfg, "coordinator.checkpoint.dir");
    c.member_timeout_ms = (uint64_t)spw_config_duration_ms(cfg, "coordinator.member.timeout");
    c.checkpoint_steps = (uint64_t)spw_config_int(cfg, "coordinator.checkpoint.steps");
    c.checkpoint_interval_ms =
        (uint64_t)spw_config_duration_ms(cfg, "coordinator.checkpoint.interval");
    c.checkpoint_timeout_ms =
        (uint64_t)spw_config_duration_ms(cfg, "coordinator.checkpoint.timeout");
    c.keep = (uint32_t)spw_config_int(cfg, "coordinator.checkpoint.keep");
    c.startup_grace_ms = (uint64_t)spw_config_duration_ms(cfg, "coordinator.startup.grace");
    *conf = c;
    return SPW_OK;
}
