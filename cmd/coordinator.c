/* `sparrow coordinator`: membership, clocks, epochs and recovery (docs/ARCHITECTURE.md §5). */
#include <stdio.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/cli.h"
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

static const char usage[] =
    "usage: sparrow coordinator [--listen tcp://HOST:PORT] [--mode MODE]\n"
    "                           [--shards EP,EP...] [--checkpoint-dir DIR]\n"
    "                           [--http-port P] [--log-level L] [--config FILE]\n"
    "                           [--set key=value]... [--dump-config] [--help]\n\n"
    "Tracks trainers and shards, serves clocks (async, sync, ssp:S, hybrid:K), runs\n"
    "checkpoint epochs (shards' checkpoints, MANIFEST with Kafka offsets, LATEST) and\n"
    "global recovery after any failure. Stops cleanly on SIGTERM; takes a checkpoint\n"
    "as soon as one can open on SIGUSR1.\n";

static spw_err_t conf_from_config(const spw_config_t *cfg, void *conf, char *errstr,
                                  size_t errstr_size)
{
    return spw_coord_server_conf_from_config(cfg, conf, errstr, errstr_size);
}

static int run(void *opaque, spw_metrics_t *metrics, spw_http_t *http)
{
    struct spw_coord_server_conf *conf = opaque;
    char errstr[1024];
    conf->verify = verify_shard;
    conf->metrics = metrics;
    spw_coord_server_t *server = spw_coord_server_new(conf, errstr, sizeof(errstr));
    if (!server) {
        SPW_ERROR("coordinator failed to start", "error=\"%s\"", errstr);
        return 1;
    }
    if (http)
        spw_http_set_ready(http, true, NULL);
    int rc = spw_coord_server_run(server) == SPW_OK ? 0 : 1;
    if (http)
        spw_http_set_ready(http, false, "stopping");
    spw_coord_server_destroy(server);
    SPW_INFO("coordinator stopped", "rc=%d", rc);
    return rc;
}

static const struct spw_cli_role role = {sizeof(struct spw_coord_server_conf), 1 << 16,
                                         conf_from_config, run};

const struct spw_cli_command spw_cmd_coordinator = {
    "coordinator",
    "run the coordinator (membership, clocks, checkpoint epochs, recovery)",
    spw_coordinator_config_props,
    &spw_coordinator_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    NULL,
    0,
    usage,
    NULL,
    &role};
