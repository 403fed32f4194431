/* `sparrow ingest`: raw events (Kafka or file) validated into ExampleBatch records, invalid ones
 * dead-lettered unchanged, input offsets committed only after the output holding them landed. The
 * pipeline is ingest/'s library object; this file parses flags and runs it. */
#include <inttypes.h>
#include <stdio.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/http.h"
#include "sparrow/ingest.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"

#define EXIT_LOST 3 /* strict mode: offsets were lost to retention */

static const struct spw_cli_alias aliases[] = {
    {"--in", "ingest.in"},
    {"--out", "ingest.out"},
    {"--dlq", "ingest.dlq"},
    {"--format", "ingest.format"},
    {"--group", "ingest.group"},
    {"--key-field", "ingest.key.field"},
    {"--batch-size", "ingest.batch.size"},
    {"--linger", "ingest.batch.linger"},
    {"--strict", "ingest.strict"},
    {"--log-level", "log.level"},
};

static const char usage[] =
    "usage: sparrow ingest --in kafka://HOST:PORT/TOPIC|file:PATH\n"
    "                      --out kafka://HOST:PORT/TOPIC|file:PATH [--dlq URL]\n"
    "                      [--format auto|pb|json|criteo] [--group G] [--key-field NAME]\n"
    "                      [--batch-size N] [--linger 50ms] [--strict true]\n"
    "                      [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
    "Reads raw events, validates them into ExampleBatch records (batched per key bucket)\n"
    "and writes them out; invalid events go to the dead-letter output unchanged, with\n"
    "headers reason, source.topic, source.partition, source.offset, detail. Input offsets\n"
    "are committed only after the records holding their events were delivered\n"
    "(at-least-once). SIGTERM: stop, flush, commit, exit 0.\n";

static spw_err_t conf_from_config(const spw_config_t *cfg, void *conf, char *errstr,
                                  size_t errstr_size)
{
    return spw_ingest_conf_from_config(cfg, conf, errstr, errstr_size);
}

static int run(void *opaque, spw_metrics_t *metrics, spw_http_t *http)
{
    struct spw_ingest_conf *conf = opaque;
    char errstr[1024];
    conf->metrics = metrics;
    conf->http = http;
    spw_ingest_t *ingest = spw_ingest_new(conf, errstr, sizeof(errstr));
    if (!ingest) {
        SPW_ERROR("ingest failed to start", "error=\"%s\"", errstr);
        return 2;
    }
    spw_err_t err = spw_ingest_run(ingest);
    int rc = err == SPW_OK ? 0 : err == SPW_ERR_CORRUPT ? EXIT_LOST : 1;
    struct spw_ingest_stats st;
    spw_ingest_stats(ingest, &st);
    SPW_INFO("ingest stopped",
             "events=%" PRIu64 " examples=%" PRIu64 " rejected=%" PRIu64
             " exit=%d events_seconds=%.6f",
             st.events, st.examples, st.rejected, rc, st.events_seconds);
    spw_ingest_destroy(ingest);
    return rc;
}

static const struct spw_cli_role role = {sizeof(struct spw_ingest_conf), 4096, conf_from_config,
                                         run};

const struct spw_cli_command spw_cmd_ingest = {
    "ingest",
    "validate raw events into ExampleBatch records (Kafka or files)",
    spw_ingest_config_props,
    &spw_ingest_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    NULL,
    0,
    usage,
    NULL,
    &role};
