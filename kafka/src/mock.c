/* librdkafka's mock cluster behind a small API, with a parser for the fault command lines. */
#include "sparrow/kafka.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kafka_int.h"

#define MOCK_MAX_BROKERS    16
#define MOCK_MAX_PARTITIONS 10000
#define MOCK_MAX_RTT_MS     600000
#define MOCK_MAX_ERRORS     1000000

struct spw_kafka_mock {
    rd_kafka_t *rk; /* dummy handle the cluster lives on */
    rd_kafka_mock_cluster_t *mcluster;
    int n_brokers;
};

/* Kafka ApiKeys a fault command may name. */
static const struct {
    const char *name;
    int16_t key;
} api_names[] = {
    {"Produce", 0},
    {"Fetch", 1},
    {"ListOffsets", 2},
    {"Metadata", 3},
    {"OffsetCommit", 8},
    {"OffsetFetch", 9},
    {"FindCoordinator", 10},
    {"JoinGroup", 11},
    {"Heartbeat", 12},
    {"LeaveGroup", 13},
    {"SyncGroup", 14},
    {"DescribeGroups", 15},
    {"ListGroups", 16},
    {"ApiVersions", 18},
    {"CreateTopics", 19},
    {"InitProducerId", 22},
    {"OffsetForLeaderEpoch", 23},
    {"AddPartitionsToTxn", 24},
    {"AddOffsetsToTxn", 25},
    {"EndTxn", 26},
    {"TxnOffsetCommit", 28},
};

spw_kafka_mock_t *spw_kafka_mock_new(int n_brokers, char *errstr, size_t errstr_size)
{
    if (n_brokers < 1 || n_brokers > MOCK_MAX_BROKERS) {
        snprintf(errstr, errstr_size, "brokers must be 1..%d, got %d", MOCK_MAX_BROKERS, n_brokers);
        return NULL;
    }
    spw_kafka_mock_t *mock = calloc(1, sizeof(*mock));
    if (!mock) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    spw_kafka__conf_route_log(conf);
    char rkerr[512];
    /* The dummy handle has no bootstrap.servers on purpose: keep its warning about that quiet. */
    rd_kafka_conf_set(conf, "log_level", "3", rkerr, sizeof(rkerr));
    /* The dummy handle never connects anywhere. */
    mock->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, rkerr, sizeof(rkerr));
    if (!mock->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(errstr, errstr_size, "rd_kafka_new: %s", rkerr);
        goto out_free_mock;
    }
    mock->mcluster = rd_kafka_mock_cluster_new(mock->rk, n_brokers);
    if (!mock->mcluster) {
        snprintf(errstr, errstr_size, "rd_kafka_mock_cluster_new failed");
        goto out_destroy_rk;
    }
    mock->n_brokers = n_brokers;
    return mock;

out_destroy_rk:
    rd_kafka_destroy(mock->rk);
out_free_mock:
    free(mock);
    return NULL;
}

void spw_kafka_mock_destroy(spw_kafka_mock_t *mock)
{
    if (!mock)
        return;
    rd_kafka_mock_cluster_destroy(mock->mcluster);
    rd_kafka_destroy(mock->rk);
    free(mock);
}

const char *spw_kafka_mock_bootstraps(const spw_kafka_mock_t *mock)
{
    return rd_kafka_mock_cluster_bootstraps(mock->mcluster);
}

spw_err_t spw_kafka_mock_topic_create(spw_kafka_mock_t *mock, const char *topic, int partitions,
                                      char *errstr, size_t errstr_size)
{
    size_t len = strlen(topic);
    if (len == 0 || len > 249 ||
        strspn(topic, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
                      "XYZ0123456789._-") != len) {
        snprintf(errstr, errstr_size, "bad topic name '%.64s' (1..249 of [A-Za-z0-9._-])", topic);
        return SPW_ERR_INVALID;
    }
    if (partitions < 1 || partitions > MOCK_MAX_PARTITIONS) {
        snprintf(errstr, errstr_size, "topic %s: partitions must be 1..%d", topic,
                 MOCK_MAX_PARTITIONS);
        return SPW_ERR_INVALID;
    }
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mock->mcluster, topic, partitions, 1);
    if (err) {
        snprintf(errstr, errstr_size, "topic %s: %s", topic, rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
    return SPW_OK;
}

/* Whole-string integer within [min, max]. */
static int parse_long(const char *text, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_api(const char *text, int16_t *key)
{
    long v;
    if (parse_long(text, 0, 100, &v) == 0) {
        *key = (int16_t)v;
        return 0;
    }
    for (size_t i = 0; i < sizeof(api_names) / sizeof(api_names[0]); i++) {
        if (strcasecmp(text, api_names[i].name) == 0) {
            *key = api_names[i].key;
            return 0;
        }
    }
    return -1;
}

/* Error code by number or by librdkafka's name (NOT_LEADER_FOR_PARTITION, with or without
 * the RD_KAFKA_RESP_ERR_ prefix). Only broker-side codes (> 0) make sense on the wire. */
static int parse_error_code(const char *text, rd_kafka_resp_err_t *code)
{
    long v;
    if (parse_long(text, 1, 32767, &v) == 0) {
        *code = (rd_kafka_resp_err_t)v;
        return 0;
    }
    if (strncasecmp(text, "RD_KAFKA_RESP_ERR_", 18) == 0)
        text += 18;
    const struct rd_kafka_err_desc *descs;
    size_t n;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++) {
        if (descs[i].name && descs[i].code > 0 && strcasecmp(descs[i].name, text) == 0) {
            *code = descs[i].code;
            return 0;
        }
    }
    return -1;
}

spw_err_t spw_kafka_mock_command(spw_kafka_mock_t *mock, const char *line, char *errstr,
                                 size_t errstr_size)
{
    char buf[512];
    size_t len = strlen(line);
    if (len >= sizeof(buf)) {
        snprintf(errstr, errstr_size, "command longer than %zu bytes", sizeof(buf) - 1);
        return SPW_ERR_INVALID;
    }
    memcpy(buf, line, len + 1);
    char *argv[5];
    int argc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        if (argc == 5) {
            snprintf(errstr, errstr_size, "too many words");
            return SPW_ERR_INVALID;
        }
        argv[argc++] = tok;
    }
    if (argc == 0 || argv[0][0] == '#')
        return SPW_OK;

    long broker = 0, v = 0;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    const char *cmd = argv[0];
    if ((strcmp(cmd, "down") == 0 || strcmp(cmd, "up") == 0) && argc == 2) {
        if (parse_long(argv[1], 1, mock->n_brokers, &broker) != 0)
            goto out_bad_broker;
        err = cmd[0] == 'd' ? rd_kafka_mock_broker_set_down(mock->mcluster, (int32_t)broker)
                            : rd_kafka_mock_broker_set_up(mock->mcluster, (int32_t)broker);
    } else if (strcmp(cmd, "rtt") == 0 && argc == 3) {
        if (parse_long(argv[1], 1, mock->n_brokers, &broker) != 0)
            goto out_bad_broker;
        if (parse_long(argv[2], 0, MOCK_MAX_RTT_MS, &v) != 0) {
            snprintf(errstr, errstr_size, "rtt: ms must be 0..%d", MOCK_MAX_RTT_MS);
            return SPW_ERR_INVALID;
        }
        err = rd_kafka_mock_broker_set_rtt(mock->mcluster, (int32_t)broker, (int)v);
    } else if (strcmp(cmd, "error") == 0 && argc == 4) {
        int16_t api;
        rd_kafka_resp_err_t code;
        if (parse_api(argv[1], &api) != 0) {
            snprintf(errstr, errstr_size, "error: unknown api '%.64s'", argv[1]);
            return SPW_ERR_INVALID;
        }
        if (parse_error_code(argv[2], &code) != 0) {
            snprintf(errstr, errstr_size, "error: unknown error code '%.64s'", argv[2]);
            return SPW_ERR_INVALID;
        }
        if (parse_long(argv[3], 1, MOCK_MAX_ERRORS, &v) != 0) {
            snprintf(errstr, errstr_size, "error: count must be 1..%d", MOCK_MAX_ERRORS);
            return SPW_ERR_INVALID;
        }
        rd_kafka_resp_err_t *codes = malloc((size_t)v * sizeof(*codes));
        if (!codes) {
            snprintf(errstr, errstr_size, "out of memory");
            return SPW_ERR_NOMEM;
        }
        for (long i = 0; i < v; i++)
            codes[i] = code;
        rd_kafka_mock_push_request_errors_array(mock->mcluster, api, (size_t)v, codes);
        free(codes);
    } else if (strcmp(cmd, "topic") == 0 && argc == 3) {
        if (parse_long(argv[2], 1, MOCK_MAX_PARTITIONS, &v) != 0) {
            snprintf(errstr, errstr_size, "topic: partitions must be 1..%d", MOCK_MAX_PARTITIONS);
            return SPW_ERR_INVALID;
        }
        return spw_kafka_mock_topic_create(mock, argv[1], (int)v, errstr, errstr_size);
    } else {
        snprintf(errstr, errstr_size,
                 "unknown command '%.64s' (down B | up B | rtt B MS | error API CODE COUNT | "
                 "topic NAME PARTITIONS)",
                 cmd);
        return SPW_ERR_INVALID;
    }
    if (err) {
        snprintf(errstr, errstr_size, "%s: %s", cmd, rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
    return SPW_OK;

out_bad_broker:
    snprintf(errstr, errstr_size, "%s: broker must be 1..%d", cmd, mock->n_brokers);
    return SPW_ERR_INVALID;
}
