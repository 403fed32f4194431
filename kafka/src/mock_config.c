/* The property table of `sparrow kafka-mock` and its reading into struct spw_kafka_mock_conf. */
#include <stdio.h>
#include <string.h>

#include "sparrow/kafka.h"

const struct spw_config_prop spw_kafka_mock_config_props[] = {
    {"kafka_mock.brokers", SPW_CONFIG_INT, "1", 1, 16, NULL,
     "Brokers of the mock cluster, each on its own loopback port (--brokers)."},
    {"kafka_mock.topics", SPW_CONFIG_STRING, "", 0, 16384, NULL,
     "Topics created at start: a comma list of NAME[:PARTITIONS] (partitions 1..10000, default 1; "
     "each --topic adds one)."},
    {"kafka_mock.port_file", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "When set, the bootstrap address is written to this file (atomically) once the cluster is "
     "up, and removed at a clean exit (--port-file)."},
    {"kafka_mock.stdin_eof_exits", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Exit at the end of stdin, not only on SIGTERM/SIGINT (--stdin-eof-exits)."},
    {"kafka_mock.retention.watch", SPW_CONFIG_DURATION_MS, "1s", 0, 60000, NULL,
     "How often every partition is checked against the mock's fixed retention (5 MiB or 100000 "
     "message sets per partition, printed at start): a WARN line when one nears it (estimated) "
     "and when records were deleted; 0: not watched."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_kafka_mock_config_n_props =
    sizeof(spw_kafka_mock_config_props) / sizeof(spw_kafka_mock_config_props[0]);

/* A whole decimal integer in [min, max]. */
static bool parse_int(const char *s, size_t len, int64_t min, int64_t max, int64_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return spw_parse_int64(buf, out) == SPW_OK && *out >= min && *out <= max;
}

spw_err_t spw_kafka_mock_conf_from_config(const spw_config_t *cfg, struct spw_kafka_mock_conf *conf,
                                          char *errstr, size_t errstr_size)
{
    memset(conf, 0, sizeof(*conf));
    conf->brokers = (int)spw_config_int(cfg, "kafka_mock.brokers");
    const char *port_file = spw_config_str(cfg, "kafka_mock.port_file");
    conf->port_file = port_file && *port_file ? port_file : NULL;
    conf->stdin_eof_exits = spw_config_bool(cfg, "kafka_mock.stdin_eof_exits");
    conf->watch_ms = (uint32_t)spw_config_duration_ms(cfg, "kafka_mock.retention.watch");
    const char *s = spw_config_str(cfg, "kafka_mock.topics");
    while (s && *s) {
        size_t len = strcspn(s, ",");
        if (conf->n_topics == SPW_KAFKA_MOCK_MAX_TOPICS) {
            snprintf(errstr, errstr_size, "kafka_mock.topics: more than %d topics (--topic)",
                     SPW_KAFKA_MOCK_MAX_TOPICS);
            return SPW_ERR_INVALID;
        }
        struct spw_kafka_mock_topic *t = &conf->topics[conf->n_topics];
        /* the last ':' separates the partitions, as it always did */
        const char *colon = NULL;
        for (const char *c = s; c < s + len; c++)
            if (*c == ':')
                colon = c;
        size_t nlen = colon ? (size_t)(colon - s) : len;
        int64_t parts = 1;
        if (nlen > SPW_KAFKA_MOCK_TOPIC_MAX ||
            (colon && !parse_int(colon + 1, (size_t)(s + len - colon - 1), 1,
                                 SPW_KAFKA_MOCK_MAX_PARTS, &parts))) {
            snprintf(errstr, errstr_size,
                     "kafka_mock.topics: bad --topic '%.*s' (expected NAME:PARTITIONS, "
                     "partitions 1..%d)",
                     (int)(len > 300 ? 300 : len), s, SPW_KAFKA_MOCK_MAX_PARTS);
            return SPW_ERR_INVALID;
        }
        memcpy(t->name, s, nlen);
        t->name[nlen] = '\0';
        t->partitions = (int)parts;
        conf->n_topics++;
        s += len + (s[len] == ',');
    }
    return SPW_OK;
}
