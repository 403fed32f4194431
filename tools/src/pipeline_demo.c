/* `sparrow demo`'s run: the pipeline with a live progress line and a final summary (the command
 * in cmd/demo.c only reads its configuration). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/pipeline.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define DEMO_PROGRESS_MS 2000
#define DEMO_GRACE_MS    35000 /* above trainer.shutdown.grace (30 s) */

/* Runs until the duration, a signal or a death (reported; returns false). */
static bool progress_loop(spw_pipeline_t *p, const struct spw_demo_conf *conf, uint64_t t0,
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
        if ((double)(now - t0) >= conf->duration_s * 1000.0)
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

int spw_demo_run(const struct spw_demo_conf *conf)
{
    char run_dir[1024];
    if (conf->run_dir) {
        snprintf(run_dir, sizeof(run_dir), "%s", conf->run_dir);
    } else {
        snprintf(run_dir, sizeof(run_dir), "/tmp/sparrow-demo-XXXXXX");
        if (!mkdtemp(run_dir)) {
            perror("sparrow demo: mkdtemp");
            return 1;
        }
    }
    struct spw_pipeline_conf pipeline_conf = {
        .run_dir = run_dir,
        .prefix = "demo",
        .shards = conf->shards,
        .trainers = conf->trainers,
        .partitions = 4,
        .mode = "async",
        .group = "demo-trainers",
        .gen_n = 0,
        .seed = 7,
        .drift = 0.5,
        .rate = conf->rate,
        .serve = conf->serve,
        .checkpoint_interval = "10s",
    };
    printf("demo: run directory %s (every process's log is there)\n", run_dir);
    char errstr[512];
    spw_pipeline_t *p = spw_pipeline_start(&pipeline_conf, errstr, sizeof(errstr));
    if (!p) {
        fprintf(stderr, "sparrow demo: %s\nsparrow demo: failed; logs under %s\n", errstr, run_dir);
        return 1;
    }
    printf("demo: running for %.0f s\n", conf->duration_s);
    fflush(stdout);

    uint64_t t0 = spw_time_mono_ms();
    struct spw_pipeline_snapshot snap = {.epoch = -1, .examples = NAN};
    bool ok = progress_loop(p, conf, t0, &snap);
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
    uint64_t lost = spw_pipeline_lost_records(p);
    if (lost)
        printf("  lost: %llu records of examples deleted by the Kafka mock's retention before "
               "the trainers read them (a lower --rate keeps them; trainer-*.log)\n",
               (unsigned long long)lost);
    printf("  run directory: %s\n", run_dir);
    printf("  logs: %s/{kafka-mock,gen,coordinator,shard-*,trainer-*,serve}.log\n", run_dir);
    spw_pipeline_destroy(p);
    return ok && !unclean ? 0 : 1;
}
