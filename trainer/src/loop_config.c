/* trainer: the worker loop's settings read from the trainer.* property table. */
#include "loop_int.h"

#include <stdio.h>
#include <string.h>

#include "sparrow/config.h"

void spw_trainer_loop_conf_default(struct spw_trainer_loop_conf *conf)
{
    memset(conf, 0, sizeof(*conf));
    spw_trainer_params_default(&conf->params);
    conf->format = SPW_FORMAT_AUTO;
    conf->max_reject_ratio = 0.5;
    spw_ingest_limits_default(&conf->limits);
    conf->limits.max_record_bytes = 16u << 20;
    conf->group = "sparrow-trainers";
    conf->max_record_bytes = 16u << 20;
    conf->linger_ms = 100;
    spw_ps_client_conf_default(&conf->client);
    conf->inproc_memory_bytes = 1024ull << 20;
    conf->inproc_penalty.kind = SPW_PS_PENALTY_INVERSE;
    conf->inproc_penalty.beta = 1.0;
    conf->prefetch = true;
    conf->fresh_reads = true;
    conf->log_interval_ms = 5000;
    conf->commit_interval_ms = 5000;
    conf->grace_ms = 30000;
    conf->debug_slow_factor = 1.0;
}

/* "inproc" -> 1, "inproc:N" -> N (1..SPW_PS_CLIENT_MAX_SHARDS); 0 for anything else. */
static uint32_t inproc_count(const char *shards, bool *bad)
{
    *bad = false;
    if (!shards || strncmp(shards, "inproc", 6) != 0 || strstr(shards, "://"))
        return 0;
    if (shards[6] == '\0')
        return 1;
    int64_t n = 0;
    if (shards[6] != ':' || spw_parse_int64(shards + 7, &n) != SPW_OK || n < 1 ||
        n > SPW_PS_CLIENT_MAX_SHARDS) {
        *bad = true;
        return 0;
    }
    return (uint32_t)n;
}

spw_err_t spw_trainer_loop_conf_from_config(const spw_config_t *cfg,
                                            struct spw_trainer_loop_conf *conf, char *errstr,
                                            size_t errstr_size)
{
    spw_trainer_loop_conf_default(conf);
    spw_err_t err = spw_trainer_params_from_config(cfg, &conf->params, errstr, errstr_size);
    if (err)
        return err;
    conf->in = spw_config_str(cfg, "trainer.in");
    if (!conf->in || !conf->in[0]) {
        snprintf(errstr, errstr_size,
                 "trainer.in is required (file:PATH or kafka://HOST:PORT/TOPIC)");
        return SPW_ERR_INVALID;
    }
    if (!(strncmp(conf->in, "file:", 5) == 0 && conf->in[5]) &&
        !(strncmp(conf->in, "kafka://", 8) == 0 && strchr(conf->in + 8, '/') &&
          strrchr(conf->in, '/')[1])) {
        snprintf(errstr, errstr_size,
                 "trainer.in: \"%.200s\" is neither file:PATH nor kafka://HOST:PORT/TOPIC",
                 conf->in);
        return SPW_ERR_INVALID;
    }
    if (spw_format_parse(spw_config_str(cfg, "trainer.format"), &conf->format) != SPW_OK) {
        snprintf(errstr, errstr_size, "trainer.format: unknown format");
        return SPW_ERR_INVALID;
    }
    conf->max_reject_ratio = spw_config_double(cfg, "trainer.max_reject_ratio");
    conf->schema_path = spw_config_str(cfg, "trainer.schema");
    spw_ingest_limits_from_config(cfg, "trainer", &conf->limits);
    conf->max_record_bytes = conf->limits.max_record_bytes;
    conf->group = spw_config_str(cfg, "trainer.group");
    conf->start_latest = strcmp(spw_config_str(cfg, "trainer.start"), "latest") == 0;
    conf->strict_offsets = spw_config_bool(cfg, "trainer.strict");
    conf->kafka_config = cfg;
    conf->linger_ms = (uint64_t)spw_config_duration_ms(cfg, "trainer.batch.linger");
    conf->kafka_close_ms = (uint64_t)spw_config_duration_ms(cfg, "trainer.kafka.close.timeout");
    conf->max_examples = (uint64_t)spw_config_int(cfg, "trainer.max_examples");

    bool bad = false;
    const char *shards = spw_config_str(cfg, "trainer.shards");
    conf->inproc_shards = inproc_count(shards, &bad);
    if (bad) {
        snprintf(errstr, errstr_size,
                 "trainer.shards: \"%.200s\": expected inproc or inproc:N "
                 "with 1 <= N <= %u",
                 shards, SPW_PS_CLIENT_MAX_SHARDS);
        return SPW_ERR_INVALID;
    }
    if (conf->inproc_shards) {
        /* the client's other rows apply as they do for ZeroMQ shards */
        conf->client.push_window = (uint32_t)spw_config_int(cfg, "trainer.push.window");
        conf->client.push_timeout_ms =
            (uint32_t)spw_config_duration_ms(cfg, "trainer.push.timeout");
        conf->client.pull_timeout_ms =
            (uint32_t)spw_config_duration_ms(cfg, "trainer.pull.timeout");
        conf->client.max_frame = (size_t)spw_config_int(cfg, "trainer.ps.max_frame");
    } else if ((err = spw_ps_client_conf_from_config(cfg, &conf->client, errstr, errstr_size))) {
        return err;
    }
    conf->inproc_dir = spw_config_str(cfg, "trainer.inproc.dir");
    conf->inproc_memory_bytes = (uint64_t)spw_config_int(cfg, "trainer.inproc.memory.mb") << 20;
    const char *penalty = spw_config_str(cfg, "trainer.inproc.penalty");
    if (spw_ps_penalty_parse(penalty, &conf->inproc_penalty) != SPW_OK) {
        snprintf(errstr, errstr_size,
                 "trainer.inproc.penalty '%.200s': want none, inverse, exp:<beta in (0,1]>, "
                 "drop:<max_tau>, adaptive or dc:<lambda in [0,1e6]>",
                 penalty);
        return SPW_ERR_INVALID;
    }
    conf->push_pulled = spw_config_bool(cfg, "trainer.push.pulled");
    conf->trainer_id = (uint32_t)spw_config_int(cfg, "trainer.id");
    conf->epoch = (uint64_t)spw_config_int(cfg, "trainer.epoch");
    conf->prefetch = spw_config_bool(cfg, "trainer.pull.prefetch");
    conf->fresh_reads = spw_config_bool(cfg, "trainer.pull.fresh");
    conf->sync_dense_only = strcmp(spw_config_str(cfg, "trainer.sync.rows"), "dense") == 0;
    conf->log_interval_ms = (uint64_t)spw_config_duration_ms(cfg, "trainer.log.interval");
    conf->commit_interval_ms = (uint64_t)spw_config_duration_ms(cfg, "trainer.commit.interval");
    conf->grace_ms = (uint64_t)spw_config_duration_ms(cfg, "trainer.shutdown.grace");
    conf->debug_delay_ms = (uint64_t)spw_config_duration_ms(cfg, "trainer.debug.delay_ms");
    conf->debug_slow_factor = spw_config_double(cfg, "trainer.debug.slow_factor");
    conf->counter_key = (uint64_t)spw_config_int(cfg, "trainer.debug.counter_key");
    conf->coordinator = spw_config_str(cfg, "trainer.coordinator");
    conf->coordinator_curve_server_key_file =
        spw_config_str(cfg, "trainer.coordinator.curve.server_key_file");
    conf->coordinator_curve_client_key_file = spw_config_str(cfg, "trainer.curve.client_key_file");
    bool coord_curve =
        conf->coordinator_curve_server_key_file && conf->coordinator_curve_server_key_file[0];
    if (coord_curve &&
        !(conf->coordinator_curve_client_key_file && conf->coordinator_curve_client_key_file[0])) {
        snprintf(errstr, errstr_size,
                 "trainer.coordinator.curve.server_key_file needs trainer.curve.client_key_file "
                 "(the trainer's own key)");
        return SPW_ERR_INVALID;
    }
    if (!coord_curve) /* the client key alone is the shards' business */
        conf->coordinator_curve_client_key_file = NULL;
    conf->checkpoint_dir = spw_config_str(cfg, "trainer.checkpoint.dir");
    if (conf->checkpoint_dir && !conf->checkpoint_dir[0])
        conf->checkpoint_dir = NULL;
    conf->checkpoint_interval_ms =
        (uint64_t)spw_config_duration_ms(cfg, "trainer.checkpoint.interval");
    conf->checkpoint_timeout_ms =
        (uint64_t)spw_config_duration_ms(cfg, "trainer.checkpoint.timeout");
    conf->checkpoint_keep = (uint32_t)spw_config_int(cfg, "trainer.checkpoint.keep");
    if (conf->checkpoint_dir && conf->coordinator && conf->coordinator[0]) {
        snprintf(errstr, errstr_size,
                 "trainer.checkpoint.dir is for a trainer without a coordinator: with "
                 "trainer.coordinator set, the coordinator takes the checkpoints "
                 "(coordinator.checkpoint.dir, the shards' pserver.checkpoint.dir)");
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}
