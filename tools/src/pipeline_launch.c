/* `sparrow launch`'s run: the pipeline with fault injection, run to a duration or until drained,
 * sampled into samples.csv and summed up in summary.json (the command in cmd/launch.c only reads
 * its configuration). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sparrow/kafka.h"
#include "sparrow/pipeline.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define LAUNCH_GRACE_MS    35000 /* above trainer.shutdown.grace (30 s): a role drains first */
#define LAUNCH_PROGRESS_MS 5000
#define LAUNCH_LATEST_MS   500
/* With checkpoints: once every example produced is trained, the coordinator is asked (SIGUSR1)
 * for a checkpoint, again after this long while none counts them all. */
#define LAUNCH_REQUEST_MS 2000
/* Without checkpoints: drained once lag is 0 and the examples trained stay put this long. */
#define LAUNCH_STILL_MS 3000

/* Per trainer: the examples counted by earlier incarnations (a restart resets the counter). */
struct tally {
    double base[SPW_PIPELINE_MAX_TRAINERS], last[SPW_PIPELINE_MAX_TRAINERS];
    double total;         /* latest sum */
    uint64_t still_since; /* when total last changed, ms since start */
    bool zero_seen;       /* a sample saw no example trained */
    uint64_t zero_ms;     /* the last such sample before first_ms */
    uint64_t first_ms;    /* first sample with examples trained; 0: none yet */
    uint64_t reach_ms;    /* first sample where total >= the examples produced; 0: none */
    bool lag_zero;        /* every trainer that answered reports lag 0 */
    /* coord_wait_s at the first sample that read it (the waits before the run started) */
    double wait0[SPW_PIPELINE_MAX_TRAINERS];
    bool wait0_set[SPW_PIPELINE_MAX_TRAINERS];
};

/* Samples every trainer: a samples.csv line each, and the tally. */
static void sample(spw_pipeline_t *p, const struct spw_launch_run_conf *conf, FILE *csv,
                   uint64_t now_ms, struct tally *ty)
{
    double total = 0;
    bool lag_zero = true;
    for (long t = 0; t < conf->trainers; t++) {
        struct spw_pipeline_trainer tr;
        spw_pipeline_scrape_trainer(p, t, &tr);
        if (isfinite(tr.examples)) {
            if (tr.examples < ty->last[t])
                ty->base[t] += ty->last[t];
            ty->last[t] = tr.examples;
        }
        if (tr.up && !(tr.lag == 0))
            lag_zero = false;
        if (!ty->wait0_set[t] && isfinite(tr.coord_wait_s)) {
            ty->wait0[t] = tr.coord_wait_s;
            ty->wait0_set[t] = true;
        }
        total += ty->base[t] + ty->last[t];
        if (csv)
            fprintf(csv, "%llu,%ld,%.0f,%.0f,%.0f,%.6g\n", (unsigned long long)now_ms, t,
                    isfinite(tr.step) ? tr.step : -1, isfinite(tr.clock) ? tr.clock : -1,
                    isfinite(tr.examples) ? tr.examples : -1,
                    isfinite(tr.logloss) ? tr.logloss : -1);
    }
    if (csv)
        fflush(csv);
    if (total != ty->total)
        ty->still_since = now_ms;
    if (ty->first_ms == 0 && total == 0) {
        ty->zero_seen = true;
        ty->zero_ms = now_ms;
    }
    if (ty->first_ms == 0 && total > 0)
        ty->first_ms = now_ms > 0 ? now_ms : 1;
    if (ty->reach_ms == 0 && conf->examples && total >= (double)conf->examples)
        ty->reach_ms = now_ms > 0 ? now_ms : 1;
    ty->total = total;
    ty->lag_zero = lag_zero;
}

struct run_state {
    bool failed, drained, timed_out, gen_done, interrupted, overcounted;
    double manifest_examples;
    long epoch;
    uint64_t requested_ms; /* the last checkpoint request; 0: none */
    /* serve's freshness at the last progress line: each line shows the updates since */
    struct spw_pipeline_hist fresh_before;
};

/* Handles a process that exited by itself; false when it is a failure (reported). */
static bool on_exit_seen(spw_pipeline_t *p, const struct spw_launch_run_conf *conf, int idx,
                         int status, struct run_state *st)
{
    const char *name = spw_launch_name(spw_pipeline_launch(p), idx);
    if (strcmp(name, "gen") == 0 && conf->examples && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0) {
        st->gen_done = true;
        if (!conf->quiet)
            printf("launch: gen produced its %llu examples\n", (unsigned long long)conf->examples);
        return true;
    }
    spw_pipeline_report_death(p, idx, status);
    return false;
}

/* Once every example produced is trained, asks the coordinator for the checkpoint that counts
 * them (SIGUSR1; again every LAUNCH_REQUEST_MS while the latest checkpoint counts fewer) instead of
 * waiting out its interval. latest: whether there is a LATEST manifest, of `examples`. */
static void request_checkpoint(spw_pipeline_t *p, const struct spw_launch_run_conf *conf,
                               const struct tally *ty, uint64_t now_ms, bool latest,
                               uint64_t examples, struct run_state *st)
{
    if ((latest && examples == conf->examples) || ty->total < (double)conf->examples ||
        (st->requested_ms != 0 && now_ms - st->requested_ms < LAUNCH_REQUEST_MS))
        return;
    spw_launch_t *l = spw_pipeline_launch(p);
    if (spw_launch_kill(l, spw_launch_find(l, "coordinator"), SIGUSR1) == SPW_OK)
        st->requested_ms = now_ms > 0 ? now_ms : 1;
}

/* True when the run with --examples is drained (see usage). */
static bool drained(spw_pipeline_t *p, const struct spw_launch_run_conf *conf,
                    const spw_chaos_t *chaos, const struct tally *ty, uint64_t now_ms,
                    bool checkpoints, struct run_state *st)
{
    if (!st->gen_done || !spw_chaos_done(chaos))
        return false;
    if (!checkpoints)
        return ty->lag_zero && ty->total > 0 && now_ms - ty->still_since >= LAUNCH_STILL_MS;
    uint64_t epoch = 0, examples = 0;
    bool latest = spw_pipeline_latest(p, &epoch, &examples) == SPW_OK;
    request_checkpoint(p, conf, ty, now_ms, latest, examples, st);
    if (!latest)
        return false;
    st->epoch = (long)epoch;
    st->manifest_examples = (double)examples;
    if (examples > conf->examples && !st->overcounted) {
        st->overcounted = true;
        fprintf(stderr,
                "sparrow launch: FAILED: checkpoint epoch %llu counts %llu examples, more than the "
                "%llu produced (examples trained twice); it cannot drain\n",
                (unsigned long long)epoch, (unsigned long long)examples,
                (unsigned long long)conf->examples);
    }
    return examples == conf->examples;
}

/* Fills r after the run: the final scrape, the trainers' "finished" lines, the generator's count.
 */
static void collect(spw_pipeline_t *p, const struct spw_launch_run_conf *conf,
                    const struct tally *ty, struct spw_pipeline_result *r)
{
    spw_launch_t *l = spw_pipeline_launch(p);
    r->examples_trained = 0;
    for (long t = 0; t < conf->trainers; t++) {
        char name[32];
        snprintf(name, sizeof(name), "trainer-%ld", t);
        const char *log = spw_launch_log(l, spw_launch_find(l, name));
        struct spw_pipeline_trainer *tr = &r->snap.trainer[t];
        double last = ty->last[t];
        double fin = spw_pipeline_log_value(log, " finished ", "examples");
        if (isfinite(fin) && fin >= last)
            last = fin;
        double v;
        if (isfinite(v = spw_pipeline_log_value(log, " finished ", "window_logloss")) && v > 0)
            tr->logloss = v;
        if (isfinite(v = spw_pipeline_log_value(log, " finished ", "window_auc")) && v > 0)
            tr->auc = v;
        if (isfinite(v = spw_pipeline_log_value(log, " finished ", "bayes_logloss")) && v > 0)
            tr->bayes_logloss = v;
        r->trainer_examples[t] = ty->base[t] + last;
        /* a restarted trainer's counter starts again: its difference means nothing */
        r->trainer_run_wait_s[t] =
            ty->wait0_set[t] && ty->base[t] == 0 && tr->coord_wait_s >= ty->wait0[t]
                ? tr->coord_wait_s - ty->wait0[t]
                : NAN;
        r->trainer_ex_per_s[t] = r->duration_s > 0 ? r->trainer_examples[t] / r->duration_s : NAN;
        r->examples_trained += r->trainer_examples[t];
    }
    double sums[4] = {0};
    int counts[4] = {0};
    for (long t = 0; t < conf->trainers; t++) {
        const struct spw_pipeline_trainer *tr = &r->snap.trainer[t];
        double vals[4] = {tr->logloss, tr->auc, tr->bayes_logloss, tr->bayes_auc};
        for (int k = 0; k < 4; k++)
            if (isfinite(vals[k]))
                sums[k] += vals[k], counts[k]++;
    }
    double *dst[4] = {&r->snap.logloss, &r->snap.auc, &r->snap.bayes_logloss, &r->snap.bayes_auc};
    for (int k = 0; k < 4; k++)
        *dst[k] = counts[k] ? sums[k] / counts[k] : NAN;
    r->ex_per_s = r->duration_s > 0 ? r->examples_trained / r->duration_s : NAN;
    /* with --examples: N over the time from the last sample that saw no example trained to the
     * first that saw N (at most one sampling interval more than the training took, so a lower
     * bound; counting from the first sample that saw some would drop what was trained before
     * it, most of a run that fits in a few intervals); without: the rate over the run */
    r->train_ex_per_s = r->ex_per_s;
    if (conf->examples)
        r->train_ex_per_s =
            ty->zero_seen && ty->first_ms && ty->reach_ms > ty->zero_ms
                ? (double)conf->examples * 1000.0 / (double)(ty->reach_ms - ty->zero_ms)
                : NAN;
    const char *gen_log = spw_launch_log(l, spw_launch_find(l, "gen"));
    r->examples_produced = spw_pipeline_log_value(gen_log, "gen done", "examples");
    uint64_t epoch, examples;
    if (spw_pipeline_latest(p, &epoch, &examples) == SPW_OK) {
        r->latest_epoch = (long)epoch;
        r->manifest_examples = (double)examples;
    }
}

static void print_summary(const struct spw_launch_run_conf *conf,
                          const struct spw_pipeline_result *r, const char *summary_path)
{
    printf("launch summary: %s mode=%s penalty=%s trainers=%ld shards=%ld %.1fs produced=%.0f "
           "trained=%.0f ex/s=%.0f train_ex/s=%.0f logloss=%.4f (bayes %.4f) auc=%.4f "
           "(bayes %.4f) tau p50/p99=%g/%g ckpt epoch=%ld examples=%.0f pause p50/p99=%g/%g "
           "kills=%ld restarts=%ld -> %s\n",
           r->ok ? "ok" : "FAILED", conf->mode, conf->penalty, conf->trainers, conf->shards,
           r->duration_s, r->examples_produced, r->examples_trained, r->ex_per_s, r->train_ex_per_s,
           r->snap.logloss, r->snap.bayes_logloss, r->snap.auc, r->snap.bayes_auc,
           spw_pipeline_hist_quantile(&r->snap.tau, 0.5),
           spw_pipeline_hist_quantile(&r->snap.tau, 0.99), r->latest_epoch, r->manifest_examples,
           spw_pipeline_hist_quantile(&r->snap.pause, 0.5),
           spw_pipeline_hist_quantile(&r->snap.pause, 0.99), r->kills, r->restarts, summary_path);
}

/* The main loop: until the duration, the drain, a death or a signal. */
static void run(spw_pipeline_t *p, const struct spw_launch_run_conf *conf, spw_chaos_t *chaos,
                FILE *csv, struct tally *ty, struct run_state *st, uint64_t t0)
{
    bool checkpoints = conf->checkpoints;
    uint64_t next_sample = 0, next_progress = LAUNCH_PROGRESS_MS, next_latest = 0;
    char errstr[512];
    for (;;) {
        uint64_t now = spw_time_mono_ms() - t0;
        if (spw_signal_stop_requested()) {
            st->interrupted = true;
            return;
        }
        int status = 0, dead;
        while ((dead = spw_launch_check(spw_pipeline_launch(p), &status)) >= 0)
            if (!on_exit_seen(p, conf, dead, status, st)) {
                st->failed = true;
                return;
            }
        if (spw_chaos_step(chaos, p, now, errstr, sizeof(errstr)) != SPW_OK) {
            fprintf(stderr, "sparrow launch: FAILED: %s\n", errstr);
            st->failed = true;
            return;
        }
        if (now >= next_sample) {
            next_sample = now + conf->samples_ms;
            sample(p, conf, csv, now, ty);
        }
        if (!conf->quiet && now >= next_progress) {
            next_progress = now + LAUNCH_PROGRESS_MS;
            struct spw_pipeline_snapshot snap;
            char line[512];
            spw_pipeline_scrape(p, &snap);
            spw_pipeline_fresh_since(&snap, &st->fresh_before);
            st->fresh_before = snap.fresh;
            spw_pipeline_format_line(&snap, (double)now / 1000.0, line, sizeof(line));
            printf("%s\n", line);
            fflush(stdout);
        }
        if (conf->examples && now >= next_latest) {
            next_latest = now + LAUNCH_LATEST_MS;
            if (drained(p, conf, chaos, ty, now, checkpoints, st)) {
                st->drained = true;
                return;
            }
            if (st->overcounted) {
                st->failed = true;
                return;
            }
        }
        if ((double)now >= conf->duration_s * 1000.0) {
            st->timed_out = conf->examples > 0;
            return;
        }
        spw_time_sleep_ms(20);
    }
}

int spw_launch_run(const struct spw_launch_run_conf *conf)
{
    char run_dir[1024], summary[1200], path[1200];
    if (conf->run_dir) {
        snprintf(run_dir, sizeof(run_dir), "%s", conf->run_dir);
    } else {
        snprintf(run_dir, sizeof(run_dir), "/tmp/sparrow-launch-XXXXXX");
        if (!mkdtemp(run_dir)) {
            perror("sparrow launch: mkdtemp");
            return 1;
        }
    }
    snprintf(summary, sizeof(summary), "%s", conf->summary ? conf->summary : "");
    if (!conf->summary)
        snprintf(summary, sizeof(summary), "%s/summary.json", run_dir);
    struct spw_pipeline_conf pipeline_conf = {
        .run_dir = run_dir,
        .prefix = "launch",
        .quiet = conf->quiet,
        .shards = conf->shards,
        .trainers = conf->trainers,
        .partitions = conf->partitions,
        .mode = conf->mode,
        .group = "launch-trainers",
        .gen_n = conf->examples,
        .seed = conf->seed,
        .drift = conf->drift,
        .rate = conf->rate,
        .serve = conf->serve,
        .gen_first = conf->backlog,
        .checkpoint_interval = conf->checkpoint_interval,
        .sets = conf->sets,
        .n_sets = conf->n_sets,
    };
    if (!conf->quiet)
        printf("launch: run directory %s (every process's log is there)\n", run_dir);
    char errstr[512];
    spw_pipeline_t *p = spw_pipeline_start(&pipeline_conf, errstr, sizeof(errstr));
    if (!p) {
        fprintf(stderr, "sparrow launch: %s\nsparrow launch: failed; logs under %s\n", errstr,
                run_dir);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/chaos.log", run_dir);
    spw_chaos_t *chaos = spw_chaos_new(&conf->chaos, path, conf->quiet);
    snprintf(path, sizeof(path), "%s/samples.csv", run_dir);
    FILE *csv = fopen(path, "w");
    if (!chaos || !csv) {
        fprintf(stderr, "sparrow launch: cannot write %s\n", path);
        if (csv)
            fclose(csv);
        spw_chaos_destroy(chaos);
        spw_pipeline_destroy(p);
        return 1;
    }
    fputs("t_ms,trainer,step,clock,examples,window_logloss\n", csv);
    if (!conf->quiet) {
        if (conf->examples)
            printf("launch: mode %s, until %llu examples are trained (timeout %.0f s)\n",
                   conf->mode, (unsigned long long)conf->examples, conf->duration_s);
        else
            printf("launch: mode %s, running for %.0f s\n", conf->mode, conf->duration_s);
        fflush(stdout);
    }

    struct tally ty = {0};
    struct run_state st = {.manifest_examples = NAN, .epoch = -1};
    uint64_t t0 = spw_time_mono_ms(), resumed = spw_pipeline_resumed_ms(p);
    if (resumed) {
        /* a backlog: the trainers were paused while it was produced, so none trained before
         * they were resumed, a few milliseconds before the first sample (which could already
         * see examples, leaving train_ex_per_s without its start: bench --quick, once) */
        t0 = resumed;
        ty.zero_seen = true;
        ty.zero_ms = 0;
    }
    run(p, conf, chaos, csv, &ty, &st, t0);
    struct spw_pipeline_result r = {
        .mode = conf->mode,
        .penalty = conf->penalty,
        .drained = st.drained,
        .duration_s = (double)(spw_time_mono_ms() - t0) / 1000.0,
        .latest_epoch = -1,
        .manifest_examples = NAN,
    };
    sample(p, conf, csv, spw_time_mono_ms() - t0, &ty);
    spw_pipeline_scrape(p, &r.snap);
    fclose(csv);
    if (st.timed_out)
        fprintf(stderr,
                "sparrow launch: FAILED: not drained after %.0f s (gen done: %s, chaos done: %s, "
                "latest manifest example_count %.0f of %llu, trained %.0f); logs under %s\n",
                conf->duration_s, st.gen_done ? "yes" : "no", spw_chaos_done(chaos) ? "yes" : "no",
                st.manifest_examples, (unsigned long long)conf->examples, ty.total, run_dir);
    if (st.interrupted)
        fprintf(stderr, "sparrow launch: interrupted\n");
    if (!conf->quiet) {
        printf("launch: stopping (SIGTERM, SIGKILL after %d s)\n", LAUNCH_GRACE_MS / 1000);
        fflush(stdout);
    }
    int unclean = spw_pipeline_stop(p, LAUNCH_GRACE_MS, true);
    collect(p, conf, &ty, &r);
    r.kills = spw_chaos_kills(chaos);
    r.restarts = spw_chaos_restarts(chaos);
    r.lost_to_retention = spw_pipeline_lost_records(p);
    bool lost = conf->examples && r.lost_to_retention > 0;
    if (lost) /* a finite stream must be trained whole */
        fprintf(stderr,
                "sparrow launch: FAILED: %llu records of the examples topic were deleted by the "
                "Kafka mock's retention (%u MiB per partition) before the trainers read them; "
                "use more --partitions, a lower --rate or fewer --examples (trainer-*.log, "
                "kafka-mock.log)\n",
                (unsigned long long)r.lost_to_retention, SPW_KAFKA_MOCK_RETENTION_BYTES >> 20);
    r.ok = !st.failed && !st.timed_out && !st.interrupted && unclean == 0 && !lost;
    if (spw_pipeline_summary_write(p, &r, summary) != SPW_OK) {
        fprintf(stderr, "sparrow launch: cannot write %s\n", summary);
        r.ok = false;
    }
    print_summary(conf, &r, summary);
    if (!r.ok)
        fprintf(stderr, "sparrow launch: failed; logs under %s\n", run_dir);
    spw_chaos_destroy(chaos);
    spw_pipeline_destroy(p);
    return r.ok ? 0 : 1;
}
