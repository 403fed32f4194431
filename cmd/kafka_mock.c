/* `sparrow kafka-mock`: librdkafka's mock cluster as its own process, for tests and demos. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/kafka.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"

#define KM_LINE_MAX 512

static const struct spw_cli_alias aliases[] = {
    {"--brokers", "kafka_mock.brokers"},
    {"--port-file", "kafka_mock.port_file"},
    {"--log-level", "log.level"},
};

/* --topic repeats add up; --stdin-eof-exits takes no value. */
static const struct spw_cli_flag flags[] = {
    {"--topic", "kafka_mock.topics", NULL, ',', NULL},
    {"--stdin-eof-exits", "kafka_mock.stdin_eof_exits", "true", 0, NULL},
};

static const char usage[] =
    "usage: sparrow kafka-mock [--brokers N] [--topic NAME:PARTITIONS]... "
    "[--port-file PATH]\n"
    "                          [--stdin-eof-exits] [--log-level LEVEL]\n"
    "                          [--config FILE] [--set key=value]... [--dump-config]\n\n"
    "Runs librdkafka's mock Kafka cluster (N brokers, 1..16, default 1) on loopback,\n"
    "prints its bootstrap address on stdout (and writes it to --port-file), and reads\n"
    "fault commands on stdin, one per line:\n"
    "  down B | up B              take broker B (1..N) down or bring it back\n"
    "  rtt B MS                   add MS of round-trip delay to broker B\n"
    "  error API CODE COUNT       fail the next COUNT requests of API (Produce, Fetch,\n"
    "                             ... or a number) with CODE (name or number)\n"
    "  topic NAME PARTITIONS      create a topic\n"
    "Exits on SIGTERM/SIGINT, or at the end of stdin with --stdin-eof-exits.\n"
    "Each flag is shorthand for a property below; the --topic flags together make\n"
    "kafka_mock.topics (a comma list).\n";

/* Writes text to path through a temporary file and rename, so readers never see half of it. */
static int write_port_file(const char *path, const char *text)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int bad = fprintf(f, "%s\n", text) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Reads what stdin has, runs each complete line. Returns -1 at end of input. */
static int serve_stdin(spw_kafka_mock_t *mock, char *line, size_t *used)
{
    ssize_t n = read(STDIN_FILENO, line + *used, KM_LINE_MAX - *used);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -1;
    if (n == 0)
        return -1;
    *used += (size_t)n;
    for (;;) {
        char *nl = memchr(line, '\n', *used);
        if (!nl) {
            if (*used == KM_LINE_MAX) { /* an endless line: drop it */
                SPW_WARN("command too long", "max=%d", KM_LINE_MAX);
                *used = 0;
            }
            return 0;
        }
        *nl = '\0';
        char errstr[256];
        if (spw_kafka_mock_command(mock, line, errstr, sizeof(errstr)) != SPW_OK)
            SPW_WARN("command refused", "line=\"%s\" error=\"%s\"", line, errstr);
        else if (line[strspn(line, " \t\r")] != '\0' && line[strspn(line, " \t\r")] != '#')
            SPW_INFO("command applied", "line=\"%s\"", line);
        size_t rest = *used - (size_t)(nl + 1 - line);
        memmove(line, nl + 1, rest);
        *used = rest;
    }
}

static int run(const spw_config_t *cfg)
{
    int rc = 1;

    char errstr[512];
    static struct spw_kafka_mock_conf conf; /* 16 KiB of topic names: not on the stack */
    if (spw_kafka_mock_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow kafka-mock: %s\n", errstr);
        return 2;
    }
    const char *port_file = conf.port_file;
    rc = 1;
    spw_kafka_mock_t *mock = spw_kafka_mock_new(conf.brokers, errstr, sizeof(errstr));
    if (!mock) {
        SPW_ERROR("mock cluster failed", "error=\"%s\"", errstr);
        goto out;
    }
    for (size_t i = 0; i < conf.n_topics; i++) {
        if (spw_kafka_mock_topic_create(mock, conf.topics[i].name, conf.topics[i].partitions,
                                        errstr, sizeof(errstr)) != 0) {
            SPW_ERROR("topic create failed", "error=\"%s\"", errstr);
            goto out_destroy_mock;
        }
    }
    const char *bootstraps = spw_kafka_mock_bootstraps(mock);
    if (port_file && write_port_file(port_file, bootstraps) != 0) {
        SPW_ERROR("cannot write port file", "path=%s errno=%d", port_file, errno);
        goto out_destroy_mock;
    }
    printf("%s\n", bootstraps);
    fflush(stdout);
    SPW_INFO("mock cluster up", "bootstrap=%s brokers=%d topics=%zu", bootstraps, conf.brokers,
             conf.n_topics);
    SPW_INFO("mock retention",
             "bytes_per_partition=%u msgsets_per_partition=%u hint=\"older "
             "records are deleted past either, read or not (librdkafka's mock, fixed); "
             "partitions nearing or past it are logged\"",
             SPW_KAFKA_MOCK_RETENTION_BYTES, SPW_KAFKA_MOCK_RETENTION_MSGSETS);
    spw_kafka_mock_watch_t *watch =
        conf.watch_ms
            ? spw_kafka_mock_watch_start(bootstraps, conf.watch_ms, errstr, sizeof(errstr))
            : NULL;
    if (conf.watch_ms && !watch)
        SPW_WARN("retention watch not started", "error=\"%s\"", errstr);

    char line[KM_LINE_MAX];
    size_t used = 0;
    int stdin_open = 1;
    while (!spw_signal_stop_requested()) {
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int n = poll(&pfd, stdin_open ? 1 : 0, 200);
        if (n > 0 && serve_stdin(mock, line, &used) < 0) {
            stdin_open = 0;
            if (conf.stdin_eof_exits)
                break;
        }
    }
    uint64_t deleted = spw_kafka_mock_watch_stop(watch);
    SPW_INFO("mock cluster stopping", "reason=%s deleted_to_retention=%" PRIu64,
             spw_signal_stop_requested() ? "signal" : "stdin-eof", deleted);
    rc = 0;
out_destroy_mock:
    spw_kafka_mock_destroy(mock);
    if (port_file && rc == 0)
        unlink(port_file);
out:
    return rc;
}

const struct spw_cli_command spw_cmd_kafka_mock = {
    "kafka-mock",
    "run librdkafka's mock Kafka cluster (tests, demo)",
    spw_kafka_mock_config_props,
    &spw_kafka_mock_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    flags,
    SPW_CLI_COUNT(flags),
    usage,
    run,
    NULL};
