/* `sparrow pserver`: runs one parameter-server shard (docs/ARCHITECTURE.md §3) until SIGTERM. */
#include <stdio.h>
#include <stdlib.h>

#include "command_table.h"
#include "sparrow/cli.h"
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

static const char usage[] =
    "usage: sparrow pserver [--listen tcp://HOST:PORT] [--shard I] [--shards N]\n"
    "                       [--dim D|auto] [--optimizer sgd|adagrad|adam|ftrl]\n"
    "                       [--data-dir DIR] [--memory-mb MB] [--http-port P]\n"
    "                       [--log-level L] [--config FILE] [--set key=value]...\n"
    "                       [--dump-config] [--help]\n\n"
    "Runs one parameter-server shard: rows in DRAM over RocksDB, optimizers applied on\n"
    "the server, a ZeroMQ ROUTER socket for trainers, checkpoints on request, and\n"
    "/metrics, /healthz, /readyz over HTTP. Stops cleanly on SIGTERM.\n";

static spw_err_t conf_from_config(const spw_config_t *cfg, void *conf, char *errstr,
                                  size_t errstr_size)
{
    return spw_ps_server_conf_from_config(cfg, conf, errstr, errstr_size);
}

static int run(void *opaque, spw_metrics_t *metrics, spw_http_t *http)
{
    struct spw_ps_server_conf *conf = opaque;
    char errstr[1024];
    conf->metrics = metrics;
    conf->http = http;
    spw_ps_server_t *server = spw_ps_server_new(conf, errstr, sizeof(errstr));
    if (!server) {
        SPW_ERROR("pserver failed to start", "error=\"%s\"", errstr);
        return 1;
    }
    int rc = spw_ps_server_run(server) == SPW_OK ? 0 : 1;
    spw_ps_server_destroy(server);
    SPW_INFO("pserver stopped", "rc=%d", rc);
    return rc;
}

static const struct spw_cli_role role = {sizeof(struct spw_ps_server_conf), 1 << 16,
                                         conf_from_config, run};

const struct spw_cli_command spw_cmd_pserver = {
    "pserver",
    "run a parameter-server shard (rows, optimizers, ZeroMQ, checkpoints)",
    spw_pserver_config_props,
    &spw_pserver_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    NULL,
    0,
    usage,
    NULL,
    &role};
