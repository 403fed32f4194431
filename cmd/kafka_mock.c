/* `sparrow kafka-mock`: librdkafka's mock cluster as its own process, for tests and demos. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command_table.h"
#include "sparrow/kafka.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"

#define KM_MAX_TOPICS 64
#define KM_LINE_MAX   512

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow kafka-mock [--brokers N] [--topic NAME:PARTITIONS]... "
            "[--port-file PATH]\n"
            "                          [--stdin-eof-exits] [--log-level LEVEL]\n\n"
            "Runs librdkafka's mock Kafka cluster (N brokers, 1..16, default 1) on loopback,\n"
            "prints its bootstrap address on stdout (and writes it to --port-file), and reads\n"
            "fault commands on stdin, one per line:\n"
            "  down B | up B              take broker B (1..N) down or bring it back\n"
            "  rtt B MS                   add MS of round-trip delay to broker B\n"
            "  error API CODE COUNT       fail the next COUNT requests of API (Produce, Fetch,\n"
            "                             ... or a number) with CODE (name or number)\n"
            "  topic NAME PARTITIONS      create a topic\n"
            "Exits on SIGTERM/SIGINT, or at the end of stdin with --stdin-eof-exits.\n");
}

static int parse_int_arg(const char *text, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

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

int spw_kafka_mock_main(int argc, char **argv)
{
    long brokers = 1;
    const char *port_file = NULL;
    const char *topics[KM_MAX_TOPICS];
    size_t n_topics = 0;
    int eof_exits = 0;
    enum spw_log_level level = SPW_LOG_INFO;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--stdin-eof-exits") == 0) {
            eof_exits = 1;
            continue;
        } else if (!val) {
            fprintf(stderr, "sparrow kafka-mock: '%s' needs a value or is unknown\n", a);
            return 2;
        } else if (strcmp(a, "--brokers") == 0) {
            if (parse_int_arg(val, 1, 16, &brokers) != 0) {
                fprintf(stderr, "sparrow kafka-mock: --brokers must be 1..16\n");
                return 2;
            }
        } else if (strcmp(a, "--topic") == 0) {
            if (n_topics == KM_MAX_TOPICS) {
                fprintf(stderr, "sparrow kafka-mock: at most %d --topic\n", KM_MAX_TOPICS);
                return 2;
            }
            topics[n_topics++] = val;
        } else if (strcmp(a, "--port-file") == 0) {
            port_file = val;
        } else if (strcmp(a, "--log-level") == 0) {
            if (spw_log_level_parse(val, &level) != 0) {
                fprintf(stderr, "sparrow kafka-mock: --log-level error|warn|info|debug\n");
                return 2;
            }
        } else {
            fprintf(stderr, "sparrow kafka-mock: unknown argument '%s'\n", a);
            return 2;
        }
        i++;
    }
    spw_log_init("kafka-mock", level);
    spw_signal_install();

    char errstr[512];
    spw_kafka_mock_t *mock = spw_kafka_mock_new((int)brokers, errstr, sizeof(errstr));
    if (!mock) {
        SPW_ERROR("mock cluster failed", "error=\"%s\"", errstr);
        return 1;
    }
    int rc = 1;
    for (size_t i = 0; i < n_topics; i++) {
        char name[256];
        const char *colon = strrchr(topics[i], ':');
        long parts = 1;
        size_t nlen = colon ? (size_t)(colon - topics[i]) : strlen(topics[i]);
        if (nlen >= sizeof(name) || (colon && parse_int_arg(colon + 1, 1, 10000, &parts) != 0)) {
            SPW_ERROR("bad --topic", "value=\"%s\" expected=NAME:PARTITIONS", topics[i]);
            goto out_destroy_mock;
        }
        memcpy(name, topics[i], nlen);
        name[nlen] = '\0';
        if (spw_kafka_mock_topic_create(mock, name, (int)parts, errstr, sizeof(errstr)) != 0) {
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
    SPW_INFO("mock cluster up", "bootstrap=%s brokers=%ld topics=%zu", bootstraps, brokers,
             n_topics);

    char line[KM_LINE_MAX];
    size_t used = 0;
    int stdin_open = 1;
    while (!spw_signal_stop_requested()) {
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int n = poll(&pfd, stdin_open ? 1 : 0, 200);
        if (n > 0 && serve_stdin(mock, line, &used) < 0) {
            stdin_open = 0;
            if (eof_exits)
                break;
        }
    }
    SPW_INFO("mock cluster stopping", "reason=%s",
             spw_signal_stop_requested() ? "signal" : "stdin-eof");
    rc = 0;
out_destroy_mock:
    spw_kafka_mock_destroy(mock);
    if (port_file && rc == 0)
        unlink(port_file);
    return rc;
}
