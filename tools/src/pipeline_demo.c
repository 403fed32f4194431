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
#include "sparrow/tools.h"
#include "sparrow/wire.h"

#define DEMO_PROGRESS_MS 2000
#define DEMO_GRACE_MS    35000 /* above trainer.shutdown.grace (30 s) */

/* serve's freshness histogram as one scrape found it, and when (ms since the start). */
struct fresh_mark {
    struct spw_pipeline_hist hist;
    uint64_t at_ms;
};

/* Runs until the duration, a signal or a death (reported; returns false). Each progress line
 * shows the freshness of the updates since the line before; *half is the first scrape in the
 * run's second half (its freshness the summary's window starts from). */
static bool progress_loop(spw_pipeline_t *p, const struct spw_demo_conf *conf, uint64_t t0,
                          struct spw_pipeline_snapshot *snap, struct fresh_mark *half)
{
    bool tty = isatty(STDOUT_FILENO);
    uint64_t next = t0 + DEMO_PROGRESS_MS, snap_ms = t0;
    struct spw_pipeline_hist fresh_before = {0};
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
            spw_pipeline_fresh_since(snap, &fresh_before);
            fresh_before = snap->fresh;
            if (!half->at_ms && (double)(now - t0) * 2 >= conf->duration_s * 1000.0)
                *half = (struct fresh_mark){snap->fresh, now - t0};
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

/* Asks serve for a prediction on an example of the demo's stream (the generator's first, as JSON
 * features, hashed by serve as ingest hashes them) and prints the request, the answer and the
 * planted model's true probability. */
static void demo_predict(spw_pipeline_t *p, double drift)
{
    int port = spw_pipeline_serve_port(p);
    if (!port) {
        printf("  prediction: serve does not run\n");
        return;
    }
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.seed = 7;
    gp.fields = 39;
    gp.latent_dim = 4;
    gp.drift = drift;
    char errstr[256];
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    struct spw_wire_buf line = {0};
    const struct spw_gen_example *ex = gen ? spw_gen_next(gen) : NULL;
    if (!ex || spw_gen_encode(gen, ex, SPW_FORMAT_JSON, &line) != SPW_OK ||
        spw_wire_buf_reserve(&line, 1) != SPW_OK) {
        printf("  prediction: no example (%s)\n", gen ? "out of memory" : errstr);
        spw_gen_destroy(gen);
        free(line.data);
        return;
    }
    line.data[line.len] = '\0';
    /* {"id":..,"label":..,"ts":..,"features":{..},"oracle_p":..}: the features object */
    char *features = strstr((char *)line.data, "\"features\":");
    char *end = features ? strstr(features, "},\"oracle_p\":") : NULL;
    char body[8192];
    int status = 0;
    char *answer = NULL;
    if (end && (size_t)(end + 1 - features) + 2 < sizeof(body)) {
        snprintf(body, sizeof(body), "{%.*s}", (int)(end + 1 - features), features);
        answer = spw_pipeline_http(port, "POST", "/v1/predict", body, &status);
    }
    if (answer) {
        for (char *c = answer; *c; c++)
            if (*c == '\n')
                *c = ' ';
        printf("  prediction: curl -s -X POST http://127.0.0.1:%d/v1/predict -d '%.72s...}'\n"
               "              -> HTTP %d %s (the planted model's p: %.4f, label %.0f)\n",
               port, body, status, answer, ex->oracle_p, ex->label);
    } else {
        printf("  prediction: serve on port %d did not answer\n", port);
    }
    free(answer);
    free(line.data);
    spw_gen_destroy(gen);
}

/* The learning verdict: the model's window logloss against the constant predictor's and Bayes'. */
static void demo_verdict(const struct spw_pipeline_snapshot *s)
{
    if (!isfinite(s->logloss) || !isfinite(s->const_logloss) || !isfinite(s->bayes_logloss)) {
        printf("  learning: no full evaluation window yet\n");
        return;
    }
    double gain = (s->const_logloss - s->logloss) / s->const_logloss * 100.0;
    double span = s->const_logloss - s->bayes_logloss;
    printf("  learning: window logloss %.4f, constant predictor %.4f, Bayes %.4f: %.1f%% %s than "
           "the constant predictor, %.0f%% of the way to Bayes\n",
           s->logloss, s->const_logloss, s->bayes_logloss, gain < 0 ? -gain : gain,
           gain >= 0 ? "better" : "WORSE",
           span > 0 ? 100.0 * (s->const_logloss - s->logloss) / span : NAN);
}

/* serve's measured freshness, event time to visible in serving: over the window since *half
 * (s's quantiles, narrowed to it; updates: how many it holds), and since serve started (the
 * start-up's backlog in it). */
static void demo_freshness(const struct spw_pipeline_snapshot *s, const struct fresh_mark *half,
                           double updates, double elapsed)
{
    double all_p99 = spw_pipeline_hist_quantile(&s->fresh, 0.99);
    if (!isfinite(all_p99))
        printf("  freshness: serve applied no update\n");
    else if (!isfinite(s->fresh_p99))
        printf("  freshness (event time -> visible in serving): no update in the run's second "
               "half; p99 %.2f s since serve started\n",
               all_p99);
    else
        printf("  freshness (event time -> visible in serving), last %.0f s: p50 %.2f s, p99 "
               "%.2f s (%.0f row updates); p99 %.2f s since serve started, start-up included\n",
               elapsed - (double)half->at_ms / 1000.0, s->fresh_p50, s->fresh_p99, updates,
               all_p99);
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
    struct fresh_mark half = {0};
    bool ok = progress_loop(p, conf, t0, &snap, &half);
    double elapsed = (double)(spw_time_mono_ms() - t0) / 1000.0;
    if (ok) {
        double prev = snap.examples, rate = snap.ex_per_s;
        spw_pipeline_scrape(p, &snap);
        snap.ex_per_s = isfinite(prev) && isfinite(snap.examples) && elapsed > 0
                            ? snap.examples / elapsed
                            : rate;
    }

    if (ok && conf->serve) {
        printf("demo: asking serve for a prediction\n");
        demo_predict(p, pipeline_conf.drift);
        fflush(stdout);
    }
    /* clean stop: producer first, then trainers (drain), serve, coordinator, shards, Kafka */
    printf("demo: stopping (SIGTERM, SIGKILL after %d s)\n", DEMO_GRACE_MS / 1000);
    fflush(stdout);
    bool unclean = spw_pipeline_stop(p, DEMO_GRACE_MS, false) > 0;

    /* the summary line's p99 and the freshness line: the run's second half */
    double fresh_updates = conf->serve ? spw_pipeline_fresh_since(&snap, &half.hist) : 0;
    char sl[512];
    spw_pipeline_format_line(&snap, elapsed, sl, sizeof(sl));
    printf("demo summary: %s\n", !ok ? "FAILED" : unclean ? "finished, unclean stop" : "ok");
    printf("  ran %.0f s (ex/s averaged over the run): %s\n", elapsed, sl);
    if (ok) {
        demo_verdict(&snap);
        if (conf->serve)
            demo_freshness(&snap, &half, fresh_updates, elapsed);
    }
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
