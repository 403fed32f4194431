/* The property table of `sparrow coordinator` and its translation into a server conf. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "sparrow/coordinator.h"

const struct spw_config_prop spw_coordinator_config_props[] = {
    {"coordinator.listen", SPW_CONFIG_STRING, "tcp://0.0.0.0:7100", 0, 1000, NULL,
     "ZeroMQ endpoint the coordinator binds for trainers and other members."},
    {"coordinator.mode", SPW_CONFIG_ENUM, "async", 0, 0, "async|sync|ssp:|hybrid:|group:",
     "Trainer mode: async; sync (synchronous steps: every trainer's step-t gradients averaged on "
     "the shards and applied once, step t+1 reads the result, so K trainers of batch B train "
     "like one of batch K*B); ssp:S (at most S steps ahead); hybrid:K (barrier every K); group:G "
     "(semi-synchronous: trainers in groups of G, synchronous steps inside a group, groups "
     "asynchronous to each other)."},
    {"coordinator.sync.backup", SPW_CONFIG_INT, "0", 0, 1023, NULL,
     "Backup workers of sync and group:G: a step commits once the first n-b trainers of its "
     "unit (the job, or the group) in the barrier pushed it, at least one; the others' step "
     "contributions are late (coordinator.sync.late)."},
    {"coordinator.sync.late", SPW_CONFIG_ENUM, "drop", 0, 0, "drop|apply",
     "Late contributions of backup workers: drop (not applied; counted), or apply (applied on "
     "their own after the step, weighted as one contributor more of it, through the shards' "
     "staleness penalty). Either way the debug counter row counts their examples."},
    {"coordinator.elastic.factor", SPW_CONFIG_DOUBLE, "0", 0, 1000, NULL,
     "Elastic synchronisation (sync, group:G): a trainer whose step time is above this factor "
     "times the median of the other trainers of its unit for coordinator.elastic.steps steps "
     "leaves the barrier (trains asynchronously, staleness-penalised), and rejoins once it "
     "stays within (1 + factor) / 2 times the median as long. 0: off; otherwise above 1."},
    {"coordinator.elastic.steps", SPW_CONFIG_INT, "5", 1, 1000000, NULL,
     "Consecutive steps a trainer must be slow (fast) before it leaves (rejoins) the barrier."},
    {"coordinator.group.by", SPW_CONFIG_ENUM, "index", 0, 0, "index|speed",
     "How group:G forms its groups (at every recovery and checkpoint): index (in the order the "
     "trainers registered) or speed (trainers of similar measured step time together, so that "
     "a straggler does not hold a fast group)."},
    {"coordinator.shards", SPW_CONFIG_STRING, "", 0, 16384, NULL,
     "Parameter-server shards (comma-separated ZeroMQ endpoints, shard 0 first); required."},
    {"coordinator.checkpoint.dir", SPW_CONFIG_STRING, ".", 1, 4000, NULL,
     "Root of checkpoints/<epoch>/ (the shards' pserver.checkpoint.dir, shared)."},
    {"coordinator.member.timeout", SPW_CONFIG_DURATION_MS, "5s", 100, 3600000, NULL,
     "A member silent this long is removed (a dead trainer never blocks a barrier)."},
    {"coordinator.recovery", SPW_CONFIG_ENUM, "rollback", 0, 0, "rollback|continue",
     "What a trainer's removal (or partitions moving between trainers) does: rollback (every "
     "shard restores LATEST and every trainer seeks to its offsets: exactly-once) or continue "
     "(the shards keep their rows and the other trainers keep training; the moved partitions "
     "resume from LATEST's offsets on their new owner: at-least-once for their examples since "
     "LATEST, counted in sparrow_coord_examples_retrained_total). A shard restart rolls back "
     "under both; a trainer whose input ended (a file) and whose final checkpoint epoch "
     "completed leaves without either."},
    {"coordinator.checkpoint.steps", SPW_CONFIG_INT, "0", 0, 1000000000, NULL,
     "Checkpoint every this many steps of the fastest trainer (hybrid: of barriers' steps); 0: "
     "off (hybrid: every barrier)."},
    {"coordinator.async.clock_interval", SPW_CONFIG_DURATION_MS, "50ms", 0, 10000, NULL,
     "async: a trainer sends its Clock at most this often, not after every step (each Clock waits "
     "for the coordinator's answer: a round trip per step on a loaded machine); a checkpoint "
     "epoch reaches it at most this late, and a trainer killed loses up to this much of its "
     "examples from the retrained count. Not with coordinator.checkpoint.steps (which counts "
     "Clocks). 0: a Clock after every step."},
    {"coordinator.checkpoint.interval", SPW_CONFIG_DURATION_MS, "30s", 0, 86400000, NULL,
     "Checkpoint at least this often, counted from the end of the last epoch, once a trainer "
     "stepped since (an epoch records nothing new without, and an interval shorter than an "
     "epoch would otherwise leave no time between epochs to train); 0: no time trigger."},
    {"coordinator.checkpoint.timeout", SPW_CONFIG_DURATION_MS, "30s", 100, 3600000, NULL,
     "Longest wait for trainers' reports and shards' checkpoints within one epoch."},
    {"coordinator.checkpoint.keep", SPW_CONFIG_INT, "3", 1, 1000, NULL,
     "Checkpoint epochs kept; older ones are removed."},
    {"coordinator.startup.grace", SPW_CONFIG_DURATION_MS, "2s", 0, 600000, NULL,
     "After start, wait this long for members to (re)join before the first recovery."},
    {"coordinator.startup.trainers", SPW_CONFIG_INT, "0", 0, 1024, NULL,
     "Begin the first recovery as soon as this many trainers have registered, without waiting out "
     "coordinator.startup.grace (which stays the longest wait): for a cluster of known size "
     "(launch sets its --trainers). 0: always wait the grace."},
    {"coordinator.curve.secret_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File with the coordinator's Z85 CURVE secret key: members (trainers) must then connect with "
     "CurveZMQ and a key on coordinator.curve.allowed_clients_file. Empty: plaintext to members."},
    {"coordinator.curve.allowed_clients_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File of the members' allowed Z85 public keys, one per line (required with "
     "coordinator.curve.secret_key_file)."},
    {"coordinator.curve.server_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File with the shards' Z85 CURVE public key (the pair of their "
     "pserver.curve.secret_key_file); "
     "empty: plaintext to the shards."},
    {"coordinator.curve.client_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File with the coordinator's own Z85 CURVE secret key as the shards' client (required with "
     "coordinator.curve.server_key_file); its public key must be on the shards' "
     "pserver.curve.allowed_clients_file."},
    SPW_CONFIG_PROPS_HTTP("coordinator", "0.0.0.0", "-1"), /* the Kubernetes manifests use 7101 */
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_coordinator_config_n_props =
    sizeof(spw_coordinator_config_props) / sizeof(spw_coordinator_config_props[0]);

static bool is_set(const char *s)
{
    return s && s[0];
}

spw_err_t spw_coord_server_conf_from_config(const spw_config_t *cfg,
                                            struct spw_coord_server_conf *conf, char *errstr,
                                            size_t errstr_size)
{
    struct spw_coord_server_conf c = {0};
    c.listen = spw_config_str(cfg, "coordinator.listen");
    if (spw_coord_mode_parse(spw_config_str(cfg, "coordinator.mode"), &c.mode) != SPW_OK) {
        snprintf(errstr, errstr_size,
                 "coordinator.mode: expected async, sync, ssp:S (0..1000000), hybrid:K "
                 "(1..1000000000) or group:G (1..%u)",
                 SPW_COORD_MAX_MEMBERS);
        return SPW_ERR_INVALID;
    }
    c.sync.backup = (uint32_t)spw_config_int(cfg, "coordinator.sync.backup");
    c.sync.apply_late = strcmp(spw_config_str(cfg, "coordinator.sync.late"), "apply") == 0;
    c.sync.elastic_factor = spw_config_double(cfg, "coordinator.elastic.factor");
    c.sync.elastic_steps = (uint32_t)spw_config_int(cfg, "coordinator.elastic.steps");
    c.sync.group_by_speed = strcmp(spw_config_str(cfg, "coordinator.group.by"), "speed") == 0;
    if (c.sync.elastic_factor > 0 && c.sync.elastic_factor <= 1) {
        snprintf(errstr, errstr_size,
                 "coordinator.elastic.factor %g: a factor at or below 1 would move every "
                 "trainer slower than the median; use 0 (off) or above 1",
                 c.sync.elastic_factor);
        return SPW_ERR_INVALID;
    }
    bool two_phase = spw_coord_mode_two_phase(&c.mode);
    if (!two_phase && (c.sync.backup > 0 || c.sync.elastic_factor > 0)) {
        snprintf(errstr, errstr_size,
                 "coordinator.sync.backup and coordinator.elastic.factor apply to "
                 "coordinator.mode sync or group:G only");
        return SPW_ERR_INVALID;
    }
    c.shards = spw_config_str(cfg, "coordinator.shards");
    if (!is_set(c.shards)) {
        /* without shards a sync step commits nowhere and an epoch's MANIFEST names no shard
         * checkpoint, which no restore can use */
        snprintf(errstr, errstr_size,
                 "coordinator.shards is empty: the coordinator commits steps on and checkpoints "
                 "the parameter-server shards; give their endpoints, shard 0 first (--shards "
                 "tcp://HOST:PORT,...)");
        return SPW_ERR_INVALID;
    }
    c.checkpoint_dir = spw_config_str(cfg, "coordinator.checkpoint.dir");
    c.member_timeout_ms = (uint64_t)spw_config_duration_ms(cfg, "coordinator.member.timeout");
    if (spw_coord_recovery_parse(spw_config_str(cfg, "coordinator.recovery"), &c.recovery) !=
        SPW_OK) {
        snprintf(errstr, errstr_size, "coordinator.recovery: expected rollback or continue");
        return SPW_ERR_INVALID;
    }
    c.checkpoint_steps = (uint64_t)spw_config_int(cfg, "coordinator.checkpoint.steps");
    c.checkpoint_interval_ms =
        (uint64_t)spw_config_duration_ms(cfg, "coordinator.checkpoint.interval");
    c.async_clock_interval_ms =
        (uint32_t)spw_config_duration_ms(cfg, "coordinator.async.clock_interval");
    c.checkpoint_timeout_ms =
        (uint64_t)spw_config_duration_ms(cfg, "coordinator.checkpoint.timeout");
    c.keep = (uint32_t)spw_config_int(cfg, "coordinator.checkpoint.keep");
    c.startup_grace_ms = (uint64_t)spw_config_duration_ms(cfg, "coordinator.startup.grace");
    c.startup_trainers = (uint32_t)spw_config_int(cfg, "coordinator.startup.trainers");
    c.curve_secret_key_file = spw_config_str(cfg, "coordinator.curve.secret_key_file");
    c.curve_allowed_clients_file = spw_config_str(cfg, "coordinator.curve.allowed_clients_file");
    c.curve_server_key_file = spw_config_str(cfg, "coordinator.curve.server_key_file");
    c.curve_client_key_file = spw_config_str(cfg, "coordinator.curve.client_key_file");
    /* the files are read at start (spw_coord_server_new), not here: --dump-config runs without
     * them */
    if (is_set(c.curve_secret_key_file) != is_set(c.curve_allowed_clients_file)) {
        snprintf(errstr, errstr_size,
                 "coordinator.curve.secret_key_file and coordinator.curve.allowed_clients_file go "
                 "together");
        return SPW_ERR_INVALID;
    }
    if (is_set(c.curve_server_key_file) != is_set(c.curve_client_key_file)) {
        snprintf(errstr, errstr_size,
                 "coordinator.curve.server_key_file and coordinator.curve.client_key_file go "
                 "together");
        return SPW_ERR_INVALID;
    }
    *conf = c;
    return SPW_OK;
}
