/* `sparrow demo`: the whole pipeline on this machine (Kafka mock, generator, coordinator, shards,
 * trainers, serve) under one run directory, with a live progress line and a final summary. The
 * run is spw_demo_run (tools/src/pipeline_demo.c), on the pipeline shared with `sparrow launch`. */
#include <stdio.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/pipeline.h"

static const struct spw_cli_alias aliases[] = {
    {"--duration", "demo.duration"}, {"--rate", "demo.rate"},       {"--trainers", "demo.trainers"},
    {"--shards", "demo.shards"},     {"--run-dir", "demo.run_dir"}, {"--log-level", "log.level"},
};

/* --no-serve takes no value. */
static const struct spw_cli_flag flags[] = {
    {"--no-serve", "demo.serve", "false", 0, NULL},
};

static const char usage[] =
    "usage: sparrow demo [--duration SECONDS] [--rate EXAMPLES_PER_S] [--trainers N]\n"
    "                    [--shards N] [--run-dir DIR] [--no-serve] [--config FILE]\n"
    "                    [--set key=value]... [--dump-config] [--help]\n\n"
    "Runs the whole pipeline locally: `sparrow kafka-mock` (topics examples and\n"
    "model-updates), `sparrow gen` producing a drifting click stream to Kafka at a steady\n"
    "rate, the coordinator, N parameter-server shards (default 2), N CPU trainers reading\n"
    "Kafka (default 2) and `sparrow serve`. Prints one progress line every 2 s (a\n"
    "rewritten line on a terminal): examples/s, window logloss and AUC against the\n"
    "Bayes-optimal, staleness p50/p99, bytes saved by compression, last checkpoint\n"
    "epoch, consumer lag. After --duration seconds (default 60) or SIGINT/SIGTERM it\n"
    "stops every process cleanly and prints a summary naming the run directory, where\n"
    "every process's log lives. Exits non-zero, naming the log to read, when a component\n"
    "dies. (`sparrow launch` runs the same pipeline with more knobs.)\n"
    "Each flag is shorthand for a property below.\n";

static int run(const spw_config_t *cfg)
{
    struct spw_demo_conf conf;
    spw_demo_conf_from_config(cfg, &conf);
    return spw_demo_run(&conf);
}

const struct spw_cli_command spw_cmd_demo = {
    "demo",
    "run the whole pipeline locally with a live progress line (make demo)",
    spw_demo_config_props,
    &spw_demo_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    flags,
    SPW_CLI_COUNT(flags),
    usage,
    run,
    NULL};
