/* The property table of `sparrow serve` and its reading into struct spw_serve_conf. */
#include <stdio.h>
#include <string.h>

#include "sparrow/serve.h"

const struct spw_config_prop spw_serve_config_props[] = {
    /* the model: LR and FM are inferred from the rows' dim; a deep model (DeepFM, DCN-v2) is
     * given with the trainer's settings and predicts with its dense blocks */
    SPW_TRAINER_MODEL_CONFIG_PROPS,
    {"serve.checkpoint.dir", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Root of checkpoints/ (the shards' pserver.checkpoint.dir), read only; its LATEST is "
     "loaded. A directory that does not exist or holds no checkpoint is an error unless "
     "serve.allow_empty is set. Unset: start empty and tail the update stream from its "
     "beginning."},
    {"serve.allow_empty", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Start with an empty model when serve.checkpoint.dir does not exist yet or holds no "
     "checkpoint (a fresh deployment before the first epoch): rows then come from the update "
     "stream only, and every key without one predicts from zero weights (0.5). false: that "
     "start is an error naming the directory."},
    {"serve.offline", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Serve the checkpoint only: no Kafka consumer, ready (/readyz) once serve.checkpoint.dir's "
     "LATEST is loaded; the model stays as loaded. Implied when kafka.bootstrap.servers is unset "
     "(logged at start); needs serve.checkpoint.dir."},
    {"serve.log.dir", SPW_CONFIG_STRING, "/tmp", 1, 4000, NULL,
     "Directory for RocksDB's info logs while checkpoints are read (never the checkpoint "
     "directory itself)."},
    {"serve.topic", SPW_CONFIG_STRING, "model-updates", 1, 249, NULL,
     "Kafka topic of the model-update stream."},
    {"serve.group", SPW_CONFIG_STRING, "", 0, 200, NULL,
     "Consumer group id; empty: a unique one per process (every replica reads every partition; "
     "offsets are never committed)."},
    SPW_CONFIG_PROPS_HTTP("serve", "127.0.0.1", "8080"), /* -1 refused: the API is HTTP */
    {"serve.http.port_file", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "When set, the bound HTTP port is written to this file once serving starts."},
    {"serve.max_body", SPW_CONFIG_INT, "1048576", 64, 67108864, NULL,
     "Largest request body in bytes; larger ones are refused (413)."},
    {"serve.max_features", SPW_CONFIG_INT, "4096", 1, 1048576, NULL,
     "Most features per example in a predict request."},
    {"serve.max_examples", SPW_CONFIG_INT, "1024", 1, 65536, NULL,
     "Most examples per predict request."},
    {"serve.max_rows", SPW_CONFIG_INT, "100000000", 1, 10000000000, NULL,
     "Most rows the lookup table holds; updates for new keys beyond it are counted and dropped."},
    {"serve.schema", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Field-name schema file (as ingest.schema) so that raw features hash as in training."},
    {"serve.schema.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Refuse field names absent from the schema (as ingest.schema.strict)."},
    {"serve.auth.token_file", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "File holding a bearer token that /v1/* requests must carry (Authorization: Bearer ...); "
     "unset: no check. /metrics, /healthz and /readyz stay open."},
    {"serve.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Exit non-zero when updates were lost to retention (else log, count and go on)."},
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL,
     "librdkafka properties passed through (kafka.bootstrap.servers, TLS, SASL)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_serve_config_n_props =
    sizeof(spw_serve_config_props) / sizeof(spw_serve_config_props[0]);

/* An optional path: NULL when unset or empty. */
static const char *optional(const spw_config_t *cfg, const char *key)
{
    const char *s = spw_config_str(cfg, key);
    return s && *s ? s : NULL;
}

/* spw_config_foreach_passthrough: non-zero for a non-empty kafka.bootstrap.servers. */
static int has_brokers(const char *key, const char *value, void *opaque)
{
    (void)opaque;
    return strcmp(key, "bootstrap.servers") == 0 && value && value[0];
}

spw_err_t spw_serve_conf_from_config(const spw_config_t *cfg, struct spw_serve_conf *conf,
                                     char *errstr, size_t errstr_size)
{
    int64_t port = spw_config_int(cfg, "serve.http.port");
    if (port < 0) {
        snprintf(errstr, errstr_size, "serve.http.port=-1: serve answers over HTTP only");
        return SPW_ERR_INVALID;
    }
    const char *checkpoint_dir = optional(cfg, "serve.checkpoint.dir");
    bool brokers = spw_config_foreach_passthrough(cfg, "kafka.", has_brokers, NULL) != 0;
    bool offline = spw_config_bool(cfg, "serve.offline") || !brokers;
    if (offline && !checkpoint_dir) {
        snprintf(errstr, errstr_size,
                 "%s: nothing to serve without serve.checkpoint.dir (--checkpoint-dir DIR, a "
                 "checkpoint to serve) or kafka.bootstrap.servers (--brokers, the update stream)",
                 brokers ? "serve.offline=true" : "no kafka.bootstrap.servers");
        return SPW_ERR_INVALID;
    }
    *conf = (struct spw_serve_conf){
        .checkpoint_dir = checkpoint_dir,
        .allow_empty = spw_config_bool(cfg, "serve.allow_empty"),
        .offline = offline,
        .offline_implied = offline && !spw_config_bool(cfg, "serve.offline"),
        .log_dir = spw_config_str(cfg, "serve.log.dir"),
        .topic = spw_config_str(cfg, "serve.topic"),
        .group = optional(cfg, "serve.group"),
        .http_addr = spw_config_str(cfg, "serve.http.addr"),
        .http_port = (uint16_t)port,
        .http_port_file = optional(cfg, "serve.http.port_file"),
        .max_body = (size_t)spw_config_int(cfg, "serve.max_body"),
        .max_rows = (uint64_t)spw_config_int(cfg, "serve.max_rows"),
        .limits =
            {
                .max_features = (uint32_t)spw_config_int(cfg, "serve.max_features"),
                .max_examples = (uint32_t)spw_config_int(cfg, "serve.max_examples"),
                .max_depth = 16,
            },
        .schema = optional(cfg, "serve.schema"),
        .schema_strict = spw_config_bool(cfg, "serve.schema.strict"),
        .auth_token_file = optional(cfg, "serve.auth.token_file"),
        .strict = spw_config_bool(cfg, "serve.strict"),
        .kafka_config = cfg,
    };
    spw_http_limits_from_config(cfg, "serve", &conf->http_limits);
    return spw_trainer_model_from_config(cfg, &conf->model, errstr, errstr_size);
}
