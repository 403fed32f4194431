/* `sparrow trainer`: runs the worker loop (docs/ARCHITECTURE.md §4) from a file or a Kafka group
 * against parameter-server shards until the input ends, trainer.max_examples, or SIGTERM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/trainer.h"
#include "sparrow/trainer_loop.h"

static const struct spw_cli_alias aliases[] = {
    {"--in", "trainer.in"},
    {"--format", "trainer.format"},
    {"--shards", "trainer.shards"},
    {"--model", "trainer.model"},
    {"--latent-dim", "trainer.latent_dim"},
    {"--batch", "trainer.batch"},
    {"--acc-steps", "trainer.acc_steps"},
    {"--topk", "trainer.topk.ratio"},
    {"--backend", "trainer.backend"},
    {"--group", "trainer.group"},
    {"--id", "trainer.id"},
    {"--max-examples", "trainer.max_examples"},
    {"--checkpoint-dir", "trainer.checkpoint.dir"},
    {"--http-port", "trainer.http.port"},
    {"--fields", "trainer.fields"},
    {"--mlp", "trainer.mlp"},
    {"--log-level", "log.level"},
};

static const char usage[] =
    "usage: sparrow trainer --in file:PATH|kafka://HOST:PORT/TOPIC [--format auto|pb|json|criteo]\n"
    "                       [--shards tcp://H:P,...|inproc[:N]] [--model M]\n"
    "                       [--fields F] [--mlp W,W] [--latent-dim K] [--batch B] [--acc-steps N] "
    "[--topk R]\n"
    "                       [--backend cpu|cuda|auto] [--group G] [--id I]\n"
    "                       [--max-examples N] [--checkpoint-dir DIR]\n"
    "                       [--http-port P] [--log-level L]\n"
    "                       [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
    "Trains a model (M: lr, fm, deepfm or dcnv2; the deep models need --fields, the fields\n"
    "of their network's input, e.g. --fields I1,I2,C1 or @fields.txt) on mini-batches of the\n"
    "input: pulls the rows of each batch's\n"
    "keys from the parameter-server shards (the next batch's pull overlaps the current\n"
    "compute), scores the batch before training on it (progressive validation, logged and\n"
    "in /metrics), pushes top-k compressed gradients asynchronously, and stores Kafka\n"
    "offsets once their pushes are acknowledged. SIGTERM finishes the batch, pushes every\n"
    "residual, waits for acknowledgements and exits 0. trainer.shards=inproc[:N] runs\n"
    "the shards inside this process (tests, benchmarks, one-box runs).\n\n"
    "--checkpoint-dir DIR (no coordinator): checkpoints under DIR, periodic and at the end\n"
    "of a file, that `sparrow serve --checkpoint-dir DIR`, `sparrow eval --checkpoint DIR`\n"
    "and `sparrow export --checkpoint DIR` read; with pserver processes each needs\n"
    "--set pserver.checkpoint.dir=DIR. Under a coordinator, the end of a file takes a\n"
    "final checkpoint epoch before the trainer leaves.\n";

static spw_err_t conf_from_config(const spw_config_t *cfg, void *conf, char *errstr,
                                  size_t errstr_size)
{
    return spw_trainer_loop_conf_from_config(cfg, conf, errstr, errstr_size);
}

static int run(void *opaque, spw_metrics_t *metrics, spw_http_t *http)
{
    struct spw_trainer_loop_conf *conf = opaque;
    char errstr[1024];
    conf->metrics = metrics;
    conf->http = http;
    spw_trainer_t *trainer = spw_trainer_new(conf, errstr, sizeof(errstr));
    if (!trainer) {
        SPW_ERROR("trainer failed to start", "error=\"%s\"", errstr);
        return 1;
    }
    spw_err_t err = spw_trainer_run(trainer);
    int rc = err == SPW_OK || err == SPW_ERR_STOPPED ? 0 : 1;
    spw_trainer_destroy(trainer);
    SPW_INFO("stopped", "rc=%d", rc);
    return rc;
}

static const struct spw_cli_role role = {sizeof(struct spw_trainer_loop_conf), 1 << 16,
                                         conf_from_config, run};

const struct spw_cli_command spw_cmd_trainer = {
    "trainer",
    "train LR/FM from a file or Kafka against parameter-server shards",
    spw_trainer_config_props,
    &spw_trainer_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    NULL,
    0,
    usage,
    NULL,
    &role};
