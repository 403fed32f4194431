/* `sparrow serve`: online predictions from the latest checkpoint plus the model-update stream. */
#include <stdio.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/log.h"
#include "sparrow/serve.h"

static const struct spw_cli_alias aliases[] = {
    {"--checkpoint-dir", "serve.checkpoint.dir"}, {"--port", "serve.http.port"},
    {"--port-file", "serve.http.port_file"},      {"--topic", "serve.topic"},
    {"--brokers", "kafka.bootstrap.servers"},     {"--log-level", "log.level"},
};

static const struct spw_cli_flag flags[] = {
    {"--offline", "serve.offline", "true", 0, NULL},
    {"--allow-empty", "serve.allow_empty", "true", 0, NULL},
};

static const char usage[] =
    "usage: sparrow serve [--checkpoint-dir DIR] [--brokers HOST:PORT,...] [--port N]\n"
    "                     [--port-file FILE] [--topic T] [--offline] [--allow-empty]\n"
    "                     [--log-level L] [--config FILE] [--set key=value]...\n"
    "                     [--dump-config] [--help]\n\n"
    "Loads the LATEST checkpoint under DIR read-only, tails the model-update stream from\n"
    "the checkpoint's offsets, and answers POST /v1/predict and GET /v1/rows/<key>\n"
    "(plus /metrics, /healthz, /readyz: ready once caught up with the stream). A DIR that\n"
    "does not exist or holds no checkpoint is an error (--allow-empty: start empty).\n"
    "Without --brokers (or with --offline) it serves the checkpoint alone, ready as soon\n"
    "as it is loaded. Stops cleanly on SIGTERM.\n";

static int run(const spw_config_t *cfg)
{
    char errstr[1024];
    struct spw_serve_conf conf;
    spw_serve_t *serve = NULL;
    /* a refused value exits 1, as it did when spw_serve_new checked it */
    if (spw_serve_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) == SPW_OK)
        serve = spw_serve_new(&conf, errstr, sizeof(errstr));
    if (!serve) {
        SPW_ERROR("serve failed to start", "error=\"%s\"", errstr);
        return 1;
    }
    int rc = spw_serve_run(serve) == SPW_OK ? 0 : 1;
    spw_serve_destroy(serve);
    SPW_INFO("serve stopped", "rc=%d", rc);
    return rc;
}

const struct spw_cli_command spw_cmd_serve = {
    "serve",
    "serve predictions from the latest checkpoint and the model-update stream",
    spw_serve_config_props,
    &spw_serve_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    flags,
    SPW_CLI_COUNT(flags),
    usage,
    run,
    NULL};
