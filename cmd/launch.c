/* `sparrow launch`: a configurable local cluster on loopback (shards, trainers, coordinator, the
 * generator through the Kafka mock) with fault injection, run to a duration or until drained,
 * writing samples.csv and summary.json. The run is spw_launch_run (tools/src/pipeline_launch.c);
 * the checks of values are spw_launch_run_conf_from_config (tools/src/launch_config.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/pipeline.h"

static const struct spw_cli_alias aliases[] = {
    {"--run-dir", "launch.run_dir"},
    {"--shards", "launch.shards"},
    {"--trainers", "launch.trainers"},
    {"--partitions", "launch.partitions"},
    {"--mode", "launch.mode"},
    {"--penalty", "launch.penalty"},
    {"--examples", "launch.examples"},
    {"--rate", "launch.rate"},
    {"--seed", "launch.seed"},
    {"--drift", "launch.drift"},
    {"--duration", "launch.duration"},
    {"--kill", "launch.kill"},
    {"--kills", "launch.kills"},
    {"--kill-interval", "launch.kill_interval"},
    {"--restart-after", "launch.restart_after"},
    {"--chaos-seed", "launch.chaos_seed"},
    {"--checkpoint-interval", "launch.checkpoint_interval"},
    {"--summary", "launch.summary"},
    {"--samples-ms", "launch.samples_ms"},
    {"--log-level", "log.level"},
};

/* A --set whose key holds a ':' is ROLE:key=value, for a role; the rest are launch's own. */
static bool role_set(const char *value)
{
    size_t key_len = strcspn(value, "=");
    return memchr(value, ':', key_len) != NULL;
}

/* Flags without a value, and the repeatable ones (each occurrence adds to a list). */
static const struct spw_cli_flag flags[] = {
    {"--serve", "launch.serve", "true", 0, NULL},
    {"--no-serve", "launch.serve", "false", 0, NULL},
    {"--quiet", "launch.quiet", "true", 0, NULL},
    {"--backlog", "launch.backlog", "true", 0, NULL},
    {"--slow", "launch.slow", NULL, ',', NULL},
    {"--delay", "launch.delay", NULL, ',', NULL},
    {"--kill-at", "launch.kill_at", NULL, ',', NULL},
    {"--set", "launch.set", NULL, ';', role_set},
};

_Static_assert(SPW_PIPELINE_MAX_PARTITIONS == 64, "the usage below says 64 partitions at most");

static const char usage[] =
    "usage: sparrow launch [--run-dir DIR] [--shards N] [--trainers M] [--partitions P]\n"
    "         [--mode async|sync|ssp:S|hybrid:K|group:G] [--penalty PENALTY]\n"
    "         [--examples N] [--rate EX_PER_S] [--seed S] [--drift D] [--duration SECONDS]\n"
    "         [--slow I:FACTOR]... [--delay I:MS]... [--set ROLE:key=value]...\n"
    "         [--kill ROLES --kills N [--kill-interval MIN_MS:MAX_MS] [--restart-after MS]\n"
    "          [--chaos-seed S]] [--kill-at SECONDS:NAME[:norestart]]...\n"
    "         [--serve | --no-serve] [--checkpoint-interval DUR] [--summary FILE]\n"
    "         [--samples-ms MS] [--backlog] [--quiet] [--config FILE] [--set launch.KEY=V]...\n"
    "         [--dump-config] [--help]\n"
    "\n"
    "Runs a local cluster on 127.0.0.1: `sparrow kafka-mock` (topics examples:P, default 4,\n"
    "and model-updates:1; P at most 64), N parameter-server shards shard-<i> (1..,\n"
    "default 2; --penalty sets pserver.staleness.penalty, and dc:L trainer.push.pulled=true\n"
    "on the trainers), the coordinator (--mode, default\n"
    "async; checkpoints every --checkpoint-interval, default 10s, under DIR/checkpoints),\n"
    "`sparrow gen` (seed 7, drift 0.5 rad/M, --rate 3000 examples/s) and M CPU trainers\n"
    "trainer-<i> (1.., default 2; FM k=4, batch 256, group launch-trainers), optionally\n"
    "`sparrow serve`. Only P trainers get partitions: give --partitions P >= M.\n"
    "\n"
    "Without --examples it runs for --duration seconds (default 60). With --examples N the\n"
    "generator produces exactly N examples and the run ends once it is drained: gen done,\n"
    "the chaos schedule complete, every killed process running again, and the coordinator's\n"
    "LATEST manifest counting N examples (once the trainers count N, launch asks the\n"
    "coordinator for that checkpoint with SIGUSR1 rather than wait out the interval;\n"
    "without checkpoints: consumer lag 0 and the examples trained unchanged for 3 s);\n"
    "--duration (default 600) is then a timeout.\n"
    "--backlog pauses the trainers (SIGSTOP) while the N examples are produced, so that\n"
    "they, not the generator, set the pace; mind the Kafka mock's retention of about 5 MB\n"
    "(some 9000 examples) per partition (use enough --partitions) and keep the pause under\n"
    "coordinator.member.timeout (5 s; --set coordinator:coordinator.member.timeout=60s).\n"
    "\n"
    "--slow I:F and --delay I:MS slow trainer I (0..M-1; trainer.debug.slow_factor, .delay_ms).\n"
    "--set ROLE:key=value passes --set key=value to ROLE (trainer, pserver, coordinator, gen,\n"
    "serve or all). --kill ROLES (trainer,pserver,coordinator) --kills N: kill -9 a random\n"
    "running process of those roles N times, every MIN..MAX ms (--kill-interval, default\n"
    "2000:5000), each restarted with its arguments after --restart-after ms (default 500).\n"
    "--kill-at 10:trainer-1[:norestart] kills one named process at that second. Each kill\n"
    "and restart is logged to stdout and DIR/chaos.log.\n"
    "\n"
    "Every --samples-ms (default 500) DIR/samples.csv gets t_ms,trainer,step,clock,examples,\n"
    "window_logloss per trainer (-1 where a metric is absent). At the end every process is\n"
    "stopped (SIGTERM, SIGKILL after 35 s) and the summary (mode, throughput, window\n"
    "logloss/AUC against the Bayes-optimal per trainer, staleness histogram, and per row\n"
    "class where the shards export sparrow_ps_staleness_class, checkpoint\n"
    "epoch, example count and pause, kills, exit statuses) goes to --summary (default\n"
    "DIR/summary.json).\n"
    "Exits 0 on success, 1 when a process dies unexpectedly (naming its log), does not stop\n"
    "cleanly or the run does not drain in time, 2 on bad arguments.\n"
    "\n"
    "Each flag is shorthand for a property below; the repeatable ones add up to a list\n"
    "(launch.slow, launch.delay, launch.kill_at: commas; launch.set: semicolons). A --set\n"
    "whose key has a ':' (ROLE:key=value) is for a role; --set launch.KEY=VALUE sets a\n"
    "property of launch itself.\n";

static int run(const spw_config_t *cfg)
{
    /* 10 KiB of --set values: not on the stack */
    static struct spw_launch_run_conf conf;
    char errstr[1024];
    if (spw_launch_run_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow launch: %s\n(sparrow launch --help)\n", errstr);
        return 2;
    }
    return spw_launch_run(&conf);
}

const struct spw_cli_command spw_cmd_launch = {
    "launch",
    "run a local cluster (modes, slow trainers, kills) and write summary.json",
    spw_launch_config_props,
    &spw_launch_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    flags,
    SPW_CLI_COUNT(flags),
    usage,
    run,
    NULL};
