/* `sparrow serve`: online predictions from the latest checkpoint plus the model-update stream. */
#include <stdio.h>

#include "command_table.h"
#include "sparrow/config.h"
#include "sparrow/log.h"
#include "sparrow/serve.h"

static const struct spw_cli_alias aliases[] = {
    {"--checkpoint-dir", "serve.checkpoint.dir"}, {"--port", "serve.http.port"},
    {"--port-file", "serve.http.port_file"},      {"--topic", "serve.topic"},
    {"--brokers", "kafka.bootstrap.servers"},     {"--log-level", "log.level"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow serve [--checkpoint-dir DIR] [--brokers HOST:PORT,...] [--port N]\n"
            "                     [--port-file FILE] [--topic T] [--log-level L]\n"
            "                     [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
            "Loads the LATEST checkpoint read-only, tails the model-update stream from the\n"
            "checkpoint's offsets, and answers POST /v1/predict and GET /v1/rows/<key>\n"
            "(plus /metrics, /healthz, /readyz). Stops cleanly on SIGTERM.\n\n"
            "properties:\n");
    spw_config_doc_help(spw_serve_config_props, spw_serve_config_n_props, out);
}

int spw_serve_main(int argc, char **argv)
{
    char errstr[1024];
    int rc = 1;
    spw_config_t *cfg =
        spw_cli_role_init("serve", spw_serve_config_props, spw_serve_config_n_props, aliases,
                          sizeof(aliases) / sizeof(aliases[0]), argc, argv, usage, &rc);
    if (!cfg)
        return rc;
    struct spw_serve_conf conf;
    spw_serve_t *serve = NULL;
    /* a refused value exits 1, as it did when spw_serve_new checked it */
    if (spw_serve_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) == SPW_OK)
        serve = spw_serve_new(&conf, errstr, sizeof(errstr));
    if (!serve) {
        SPW_ERROR("serve failed to start", "error=\"%s\"", errstr);
        goto out_destroy_cfg;
    }
    rc = spw_serve_run(serve) == SPW_OK ? 0 : 1;
    spw_serve_destroy(serve);
    SPW_INFO("serve stopped", "rc=%d", rc);
out_destroy_cfg:
    spw_config_destroy(cfg);
    return rc;
}
