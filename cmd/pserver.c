/* `sparrow pserver`: runs one parameter-server shard (docs/ARCHITECTURE.md §3) until SIGTERM. */
#include <stdio.h>
#include <stdlib.h>

#include "command_table.h"
#include "sparrow/config.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/pserver.h"

static const struct spw_cli_alias aliases[] = {
    {"--listen", "pserver.listen"},       {"--shard", "pserver.shard"},
    {"--shards", "pserver.shards"},       {"--dim", "pserver.dim"},
    {"--optimizer", "pserver.optimizer"}, {"--data-dir", "pserver.data_dir"},
    {"--memory-mb", "pserver.memory.mb"}, {"--http-port", "pserver.http.port"},
    {"--log-level", "log.level"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow pserver [--listen tcp://HOST:PORT] [--shard I] [--shards N]\n"
            "                       [--dim D] [--optimizer sgd|adagrad|adam|ftrl]\n"
            "                       [--data-dir DIR] [--memory-mb MB] [--http-port P]\n"
            "                       [--log-level L] [--config FILE] [--set key=value]...\n"
            "                       [--dump-config] [--help]\n\n"
            "Runs one parameter-server shard: rows in DRAM over RocksDB, optimizers applied on\n"
            "the server, a ZeroMQ ROUTER socket for trainers, checkpoints on request, and\n"
            "/metrics, /healthz, /readyz over HTTP. Stops cleanly on SIGTERM.\n\n"
            "properties:\n");
    spw_config_doc_help(spw_pserver_config_props, spw_pserver_config_n_props, out);
}

int spw_pserver_main(int argc, char **argv)
{
    char errstr[1024];
    int rc = 1;
    spw_config_t *cfg =
        spw_cli_role_init("pserver", spw_pserver_config_props, spw_pserver_config_n_props, aliases,
                          sizeof(aliases) / sizeof(aliases[0]), argc, argv, usage, &rc);
    if (!cfg)
        return rc;

    struct spw_ps_server_conf conf;
    if (spw_ps_server_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        rc = 2;
        goto out_destroy_cfg;
    }
    spw_metrics_t *metrics = spw_metrics_new();
    if (!metrics) {
        SPW_ERROR("out of memory", NULL);
        goto out_destroy_cfg;
    }
    spw_http_t *http = NULL;
    if (spw_http_start_from_config(cfg, "pserver", metrics, 1 << 16, &http, errstr,
                                   sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("http endpoint failed", "error=\"%s\"", errstr);
        goto out_destroy_metrics;
    }
    conf.metrics = metrics;
    conf.http = http;
    spw_ps_server_t *server = spw_ps_server_new(&conf, errstr, sizeof(errstr));
    if (!server) {
        SPW_ERROR("pserver failed to start", "error=\"%s\"", errstr);
        goto out_stop_http;
    }
    rc = spw_ps_server_run(server) == SPW_OK ? 0 : 1;
    spw_ps_server_destroy(server);
    SPW_INFO("pserver stopped", "rc=%d", rc);
out_stop_http:
    spw_http_stop(http);
out_destroy_metrics:
    spw_metrics_destroy(metrics);
out_destroy_cfg:
    spw_config_destroy(cfg);
    return rc;
}
