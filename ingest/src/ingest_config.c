/* The property table of `sparrow ingest` and the conf made from it. */
#include <stdio.h>
#include <string.h>

#include "role_int.h"

const struct spw_config_prop spw_ingest_config_props[] = {
    {"ingest.in", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Input: kafka://HOST:PORT/TOPIC (one raw event per record) or file:PATH (- is stdin)."},
    {"ingest.out", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Output: kafka://HOST:PORT/TOPIC or file:PATH (length-delimited ExampleBatch records)."},
    {"ingest.dlq", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Dead-letter output (kafka://... or file:...); unset: the output topic or path plus .dlq."},
    {"ingest.format", SPW_CONFIG_ENUM, "auto", 0, 0, "auto|pb|json|criteo",
     "Raw event format: one sparrow.Example per record (pb), JSON lines, or Criteo TSV; auto "
     "tells it from the first bytes of a file (or the first record of a Kafka input) and logs "
     "it. gzip files are read as they are, whatever the format."},
    {"ingest.max_reject_ratio", SPW_CONFIG_DOUBLE, "0.5", 0, 1, NULL,
     "Largest share of events that may be dead-lettered: a file input above it (or yielding no "
     "example) ends the run with exit 1 and a message naming the likely cause (the format); a "
     "Kafka input is judged once, over its first 1000 events, and then only counts (1: never "
     "fail)."},
    {"ingest.group", SPW_CONFIG_STRING, "sparrow-ingest", 0, 249, NULL,
     "Consumer group of the Kafka input."},
    {"ingest.start", SPW_CONFIG_ENUM, "earliest", 0, 0, "earliest|latest",
     "Where a partition without a committed offset starts."},
    {"ingest.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Exit with status 3 when committed offsets were lost to retention (else log, count and "
     "continue from the earliest record held)."},
    {"ingest.batch.size", SPW_CONFIG_INT, "1000", 1, 100000, NULL,
     "Examples per ExampleBatch record (per key bucket)."},
    {"ingest.batch.max_bytes", SPW_CONFIG_INT, "900000", 1024, 67108864, NULL,
     "Largest ExampleBatch record in bytes (keep under the topic's message.max.bytes)."},
    {"ingest.batch.linger", SPW_CONFIG_DURATION_MS, "50ms", 0, 60000, NULL,
     "Longest time an event waits for its batch to fill."},
    {"ingest.key.field", SPW_CONFIG_STRING, NULL, 0, 255, NULL,
     "Feature field (name as in the input, e.g. user) whose value keys the output records, so "
     "one user's events stay in one partition; unset: records are not keyed."},
    {"ingest.key.buckets", SPW_CONFIG_INT, "64", 1, 4096, NULL,
     "Key buckets when ingest.key.field is set: events of one value share a bucket and a record "
     "key."},
    SPW_INGEST_LIMIT_CONFIG_PROPS("ingest", "1048576", 67108864),
    {"ingest.schema", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Schema file (`name = id` lines) for JSON field names; unset: names are hashed."},
    {"ingest.schema.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Dead-letter JSON fields absent from the schema (bad_field) instead of hashing them."},
    {"ingest.inflight", SPW_CONFIG_INT, "64", 1, 4096, NULL,
     "Flushed batch cycles awaiting delivery before input is paused."},
    {"ingest.commit.interval", SPW_CONFIG_DURATION_MS, "1s", 10, 3600000, NULL,
     "How often delivered input offsets are committed."},
    {"ingest.shutdown.timeout", SPW_CONFIG_DURATION_MS, "30s", 0, 3600000, NULL,
     "Grace period on SIGTERM to deliver what is queued before exiting."},
    {"ingest.kafka.close.timeout", SPW_CONFIG_DURATION_MS, "10s", 100, 3600000, NULL,
     "On SIGTERM, after delivery: longest wait for the Kafka input's close (final commit, "
     "leaving the group); past it the partitions move on the group's session timeout."},
    SPW_CONFIG_PROPS_HTTP("ingest", "127.0.0.1", "0"),
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL,
     "librdkafka properties for the consumer and producers, passed through unchanged "
     "(kafka.security.protocol=SSL, ...)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_ingest_config_n_props =
    sizeof(spw_ingest_config_props) / sizeof(spw_ingest_config_props[0]);

spw_err_t spw_ingest_conf_from_config(const spw_config_t *cfg, struct spw_ingest_conf *conf,
                                      char *errstr, size_t errstr_size)
{
    memset(conf, 0, sizeof(*conf));
    conf->in = spw_config_str(cfg, "ingest.in");
    conf->out = spw_config_str(cfg, "ingest.out");
    if (!conf->in || !conf->out) {
        snprintf(errstr, errstr_size, "ingest.in and ingest.out are required (in=%s out=%s)",
                 conf->in ? conf->in : "-", conf->out ? conf->out : "-");
        return SPW_ERR_INVALID;
    }
    /* Bad kafka.* properties fail here, naming the property, before anything connects. */
    spw_kafka_props_t *props = spw_kafka_props_new();
    if (!props) {
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    spw_err_t err = spw_kafka_props_from_config(props, cfg);
    if (err == SPW_OK)
        err = spw_kafka_props_validate(props, errstr, errstr_size);
    else
        snprintf(errstr, errstr_size, "kafka.* properties: %s", spw_err_str(err));
    spw_kafka_props_destroy(props);
    if (err != SPW_OK)
        return err;
    conf->dlq = spw_config_str(cfg, "ingest.dlq");
    if (spw_format_parse(spw_config_str(cfg, "ingest.format"), &conf->format) != SPW_OK) {
        snprintf(errstr, errstr_size, "ingest.format: unknown format");
        return SPW_ERR_INVALID;
    }
    conf->max_reject_ratio = spw_config_double(cfg, "ingest.max_reject_ratio");
    conf->group = spw_config_str(cfg, "ingest.group");
    conf->start_latest = strcmp(spw_config_str(cfg, "ingest.start"), "latest") == 0;
    conf->strict = spw_config_bool(cfg, "ingest.strict");
    conf->batch_size = (size_t)spw_config_int(cfg, "ingest.batch.size");
    conf->max_bytes = (size_t)spw_config_int(cfg, "ingest.batch.max_bytes");
    conf->linger_ms = (uint64_t)spw_config_duration_ms(cfg, "ingest.batch.linger");
    conf->key_field = spw_config_str(cfg, "ingest.key.field");
    conf->key_buckets = (size_t)spw_config_int(cfg, "ingest.key.buckets");
    spw_ingest_limits_from_config(cfg, "ingest", &conf->limits);
    conf->schema = spw_config_str(cfg, "ingest.schema");
    conf->schema_strict = spw_config_bool(cfg, "ingest.schema.strict");
    conf->inflight = (size_t)spw_config_int(cfg, "ingest.inflight");
    conf->commit_interval_ms = (uint64_t)spw_config_duration_ms(cfg, "ingest.commit.interval");
    conf->shutdown_timeout_ms = (uint64_t)spw_config_duration_ms(cfg, "ingest.shutdown.timeout");
    conf->kafka_close_timeout_ms = (int)spw_config_duration_ms(cfg, "ingest.kafka.close.timeout");
    conf->kafka_config = cfg;
    return SPW_OK;
}
