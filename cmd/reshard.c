/* `sparrow reshard`: rewrites a checkpoint epoch for another shard count (sparrow/reshard.h). */
#include <stdio.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/reshard.h"

static const struct spw_cli_alias aliases[] = {
    {"--from", "reshard.from"},
    {"--to", "reshard.to"},
    {"--shards", "reshard.shards"},
    {"--log-level", "log.level"},
};

static const char usage[] =
    "usage: sparrow reshard --from CHECKPOINT --shards N --to DIR [--log-level LEVEL]\n"
    "                       [--config FILE] [--set key=value]... [--dump-config] "
    "[--help]\n\n"
    "Rewrites a checkpoint for N shards (1.." SPW_CLI_STR(
        SPW_RESHARD_MAX_SHARDS) "). CHECKPOINT is an epoch directory\n"
                                "<root>/checkpoints/<E> (MANIFEST and shard-<i>/ for every shard), "
                                "or a root whose\n"
                                "checkpoints/LATEST names one. Every shard checkpoint is verified "
                                "against the\n"
                                "manifest; every row (weights, optimizer state, version, counters) "
                                "goes to shard\n"
                                "jump-hash(mix64(key), N). Writes DIR/checkpoints/<E>/ (N shard "
                                "checkpoints and a\n"
                                "MANIFEST with the same Kafka offsets, update offsets and example "
                                "count) and\n"
                                "DIR/checkpoints/LATEST = E. DIR must not exist or be empty; it "
                                "appears whole (built\n"
                                "in a temporary sibling directory, then renamed). Start the N "
                                "shards with\n"
                                "pserver.checkpoint.dir = DIR and pserver.restore = true (or let "
                                "the coordinator\n"
                                "restore E).\n"
                                "Exit status: 0 done, 1 failed (nothing written), 2 usage.\n";

static int run(const spw_config_t *cfg)
{
    char errstr[1024];
    struct spw_reshard_conf conf;
    if (spw_reshard_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow reshard: %s\n\n", errstr);
        spw_cli_command_usage(&spw_cmd_reshard, stderr);
        return 2;
    }
    if (spw_reshard_run(&conf, stdout, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow reshard: %s\n", errstr);
        return 1;
    }
    return 0;
}

const struct spw_cli_command spw_cmd_reshard = {"reshard",
                                                "rewrite a checkpoint for another shard count",
                                                spw_reshard_config_props,
                                                &spw_reshard_config_n_props,
                                                aliases,
                                                SPW_CLI_COUNT(aliases),
                                                NULL,
                                                0,
                                                usage,
                                                run,
                                                NULL};
