/* `sparrow demo`: the whole pipeline on this machine (Kafka mock, generator, coordinator, shards,
 * trainers, serve) under one run directory, with a live progress line and a final summary. The
 * pipeline itself is tools/src/pipeline*.c, shared with `sparrow launch`. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command_table.h"
#include "sparrow/pipeline.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define DEMO_PROGRESS_MS 2000
#define DEMO_GRACE_MS    35000 /* above trainer.shutdown.grace (30 s) */

struct demo_opts {
    double duration_s;
    double rate;
    long trainers;
    long shards;
    const char *run_dir;
    bool serve;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow demo [--duration SECONDS] [--rate EXAMPLES_PER_S] [--trainers N]\n"
            "                    [--shards N] [--run-dir DIR] [--no-serve] [--help]\n\n"
            "Runs the whole pipeline locally: `sparrow kafka-mock` (topics examples and\n"
            "model-updates), `sparrow gen` producing a drifting click stream to Kafka at a steady\n"
            "rate, the coordinator, N parameter-server shards (default 2), N CPU trainers reading\n"
            "Kafka (default 2) and `sparrow serve`. Prints one progress line every 2 s (a\n"
            "rewritten line on a terminal): examples/s, window logloss and AUC against the\n"
            "Bayes-optimal, staleness p50/p99, bytes saved by compression, last checkpoint\n"
            "epoch, consumer lag. After --duration seconds (default 60) or SIGINT/SIGTERM it\n"
            "stops every process cleanly and prints a summary naming the run directory, where\n"
            "every process's log lives. Exits non-zero, naming the log to read, when a component\n"
            "dies. (`sparrow launch` runs the same pipeline with more knobs.)\n");
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "sparrow demo: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct demo_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--no-serve") == 0) {
            o->serve = false;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "sparrow demo: unknown or incomplete argument '%s'\n", a);
            return 2;
        } else if (strcmp(a, "--duration") == 0) {
            if (parse_num(a, argv[++i], 1, 86400, &o->duration_s))
                return 2;
        } else if (strcmp(a, "--rate") == 0) {
            if (parse_num(a, argv[++i], 1, 1e7, &o->rate))
                return 2;
        } else if (strcmp(a, "--trainers") == 0) {
            if (parse_num(a, argv[++i], 1, SPW_PIPELINE_MAX_TRAINERS, &v))
                return 2;
            o->trainers = (long)v;
        } else if (strcmp(a, "--shards") == 0) {
            if (parse_num(a, argv[++i], 1, SPW_PIPELINE_MAX_SHARDS, &v))
                return 2;
            o->shards = (long)v;
        } else if (strcmp(a, "--run-dir") == 0) {
            o->run_dir = argv[++i];
        } else {
            fprintf(stderr, "sparrow demo: unknown argument '%s'\n(sparrow demo --help)\n", a);
            return 2;
        }
    }
    return -1;
}

/* Runs until the duration, a signal or a death (reported; returns false). */
static bool progress_loop(spw_pipeline_t *p, const struct demo_opts *o, uint64_t t0,
                          struct spw_pipeline_snapshot *snap)
{
    bool tty = isatty(STDOUT_FILENO);
    uint64_t next = t0 + DEMO_PROGRESS_MS, snap_ms = t0;
    char line[512];
    bool ok = true;
    while (!spw_signal_stop_requested()) {
        int status = 0;
        int dead = spw_launch_check(spw_pipeline_launch(p), &status);
        if (dead >= 0) {
            spw_pipeline_report_death(p, dead, status);
            ok = false;
            break;
        }
        uint64_t now = spw_time_mono_ms();
        if ((double)(now - t0) >= o->duration_s * 1000.0)
            break;
        if (now >= next) {
            next += DEMO_PROGRESS_MS;
            double prev = snap->examples;
            uint64_t prev_ms = snap_ms;
            spw_pipeline_scrape(p, snap);
            snap_ms = now;
            if (isfinite(prev) && isfinite(snap->examples) && now > prev_ms)
                snap->ex_per_s = (snap->examples - prev) * 1000.0 / (double)(now - prev_ms);
            spw_pipeline_format_line(snap, (double)(now - t0) / 1000.0, line, sizeof(line));
            if (tty)
                printf("\r\033[K%s", line);
            else
                printf("%s\n", line);
            fflush(stdout);
        }
        spw_time_sleep_ms(100);
    }
    if (tty)
        printf("\n");
    return ok;
}

int spw_demo_main(int argc, char **argv)
{
    struct demo_opts o = {
        .duration_s = 60, .rate = 3000, .trainers = 2, .shards = 2, .serve = true};
    int early = parse_args(argc, argv, &o);
    if (early >= 0)
        return early;
    char run_dir[1024];
    if (o.run_dir) {
        snprintf(run_dir, sizeof(run_dir), "%s", o.run_dir);
    } else {
        snprintf(run_dir, sizeof(run_dir), "/tmp/sparrow-demo-XXXXXX");
        if (!mkdtemp(run_dir)) {
            perror("sparrow demo: mkdtemp");
            return 1;
        }
    }
    struct spw_pipeline_conf conf = {
        .run_dir = run_dir,
        .prefix = "demo",
        .shards = o.shards,
        .trainers = o.trainers,
        .partitions = 4,
        .mode = "async",
        .group = "demo-trainers",
        .gen_n = 0,
        .seed = 7,
        .drift = 0.5,
        .rate = o.rate,
        .serve = o.serve,
        .checkpoint_interval = "10s",
    };
    printf("demo: run directory %s (every process's log is there)\n", run_dir);
    spw_signal_install();
    char errstr[512];
    spw_pipeline_t *p = spw_pipeline_start(&conf, errstr, sizeof(errstr));
    if (!p) {
        fprintf(stderr, "sparrow demo: %s\nsparrow demo: failed; logs under %s\n", errstr, run_dir);
        return 1;
    }
    printf("demo: running for %.0f s\n", o.duration_s);
    fflush(stdout);

    uint64_t t0 = spw_time_mono_ms();
    struct spw_pipeline_snapshot snap = {.epoch = -1, .examples = NAN};
    bool ok = progress_loop(p, &o, t0, &snap);
    double elapsed = (double)(spw_time_mono_ms() - t0) / 1000.0;
    if (ok) {
        double prev = snap.examples, rate = snap.ex_per_s;
        spw_pipeline_scrape(p, &snap);
        snap.ex_per_s = isfinite(prev) && isfinite(snap.examples) && elapsed > 0
                            ? snap.examples / elapsed
                            : rate;
    }

    /* clean stop: producer first, then trainers (drain), serve, coordinator, shards, Kafka */
    printf("demo: stopping (SIGTERM, SIGKILL after %d s)\n", DEMO_GRACE_MS / 1000);
    fflush(stdout);
    bool unclean = spw_pipeline_stop(p, DEMO_GRACE_MS, false) > 0;

    char sl[512];
    spw_pipeline_format_line(&snap, elapsed, sl, sizeof(sl));
    printf("demo summary: %s\n", !ok ? "FAILED" : unclean ? "finished, unclean stop" : "ok");
    printf("  ran %.0f s (ex/s averaged over the run): %s\n", elapsed, sl);
    printf("  run directory: %s\n", run_dir);
    printf("  logs: %s/{kafka-mock,gen,coordinator,shard-*,trainer-*,serve}.log\n", run_dir);
    spw_pipeline_destroy(p);
    return ok && !unclean ? 0 : 1;
}
