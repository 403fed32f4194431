/* `sparrow coordinator`: membership, clocks, epochs and recovery (docs/ARCHITECTURE.md §5). */
#include <stdio.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/config.h"
#include "sparrow/coordinator.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/pserver.h"

static const struct spw_cli_alias aliases[] = {
    {"--listen", "coordinator.listen"},       {"--mode", "coordinator.mode"},
    {"--shards", "coordinator.shards"},       {"--checkpoint-dir", "coordinator.checkpoint.dir"},
    {"--http-port", "coordinator.http.port"}, {"--log-level", "log.level"},
};

/* The shards' own verification (every file against CHECKSUM), and the manifest's digest. */
static spw_err_t verify_shard(const char *dir, const char *checksum)
{
    char hex[17];
    spw_err_t rc = spw_ps_checkpoint_verify(dir, hex);
    if (rc != SPW_OK)
        return rc;
    return strcmp(hex, checksum) == 0 ? SPW_OK : SPW_ERR_CORRUPT;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow coordinator [--listen tcp://HOST:PORT] [--mode MODE]\n"
            "                           [--shards EP,EP...] [--checkpoint-dir DIR]\n"
            "                           [--http-port P] [--log-level L] [--config FILE]\n"
            "                           [--set key=value]... [--dump-config] [--help]\n\n"
            "Tracks trainers and shards, serves clocks (async, sync, ssp:S, hybrid:K), runs\n"
            "checkpoint epochs (shards' checkpoints, MANIFEST with Kafka offsets, LATEST) and\n"
            "global recovery after any failure. Stops cleanly on SIGTERM.\n\n"
            "properties:\n");
    spw_config_doc_help(spw_coordinator_config_props, spw_coordinator_config_n_props, out);
}

int spw_coordinator_main(int argc, char **argv)
{
    char errstr[1024];
    int rc = 1;
    spw_config_t *cfg = spw_cli_role_init(
        "coordinator", spw_coordinator_config_props, spw_coordinator_config_n_props, aliases,
        sizeof(aliases) / sizeof(aliases[0]), argc, argv, usage, &rc);
    if (!cfg)
        return rc;
    struct spw_coord_server_conf conf;
    if (spw_coord_server_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        rc = 2;
        goto out_destroy_cfg;
    }
    conf.verify = verify_shard;
    spw_metrics_t *metrics = spw_metrics_new();
    if (!metrics) {
        SPW_ERROR("out of memory", NULL);
        goto out_destroy_cfg;
    }
    conf.metrics = metrics;
    spw_http_t *http = NULL;
    if (spw_http_start_from_config(cfg, "coordinator", metrics, 1 << 16, &http, errstr,
                                   sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("http endpoint failed", "error=\"%s\"", errstr);
        goto out_destroy_metrics;
    }
    spw_coord_server_t *server = spw_coord_server_new(&conf, errstr, sizeof(errstr));
    if (!server) {
        SPW_ERROR("coordinator failed to start", "error=\"%s\"", errstr);
        goto out_stop_http;
    }
    if (http)
        spw_http_set_ready(http, true, NULL);
    rc = spw_coord_server_run(server) == SPW_OK ? 0 : 1;
    if (http)
        spw_http_set_ready(http, false, "stopping");
    spw_coord_server_destroy(server);
    SPW_INFO("coordinator stopped", "rc=%d", rc);
out_stop_http:
    spw_http_stop(http);
out_destroy_metrics:
    spw_metrics_destroy(metrics);
out_destroy_cfg:
    spw_config_destroy(cfg);
    return rc;
}
