/* Unit tests of the local launcher (tools/src/launch.c) with /bin/sh as the executable. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline_int.h"
#include "sparrow/kafka.h"
#include "sparrow/launch.h"
#include "sparrow/pipeline.h"
#include "sparrow/time.h"
#include "test_dir.h"

static spw_launch_t *new_launch(const char *sub)
{
    char path[300], err[256];
    snprintf(path, sizeof(path), "%s/%s", test_dir, sub);
    spw_launch_t *l = spw_launch_new(path, "/bin/sh", err, sizeof(err));
    assert_non_null(l);
    return l;
}

/* Waits for the launcher to report an unexpected exit. */
static int wait_check(spw_launch_t *l, int *status)
{
    for (int i = 0; i < 500; i++) {
        int idx = spw_launch_check(l, status);
        if (idx >= 0)
            return idx;
        spw_time_sleep_ms(10);
    }
    return -1;
}

static void test_launch_logs_and_reports_unexpected_exit(void **state)
{
    (void)state;
    spw_launch_t *l = new_launch("a/b");
    char err[256];
    const char *args[] = {"-c", "echo hello; echo oops >&2; exit 3", NULL};
    int idx = spw_launch_start(l, "role-1", args, err, sizeof(err));
    assert_int_equal(idx, 0);
    int status = 0;
    assert_int_equal(wait_check(l, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 3);
    assert_int_equal(spw_launch_check(l, &status), -1); /* reported once */
    FILE *f = fopen(spw_launch_log(l, idx), "r");
    assert_non_null(f);
    char buf[64] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, "hello\noops\n");
    char st[32];
    assert_string_equal(spw_launch_status_str(status, st, sizeof(st)), "exit 3");
    spw_launch_destroy(l);
}

/* A child starts with SIGUSR1 blocked (a role unblocks it once its handler is in), so that a
 * request sent right after a restart waits for the handler instead of killing the process; a
 * SIGUSR1 sent to it marks no exit as expected, so its death is still reported. */
static void test_launch_child_starts_with_sigusr1_blocked(void **state)
{
    (void)state;
    spw_launch_t *l = new_launch("usr1");
    char err[256];
    const char *show[] = {"-c", "exec grep SigBlk /proc/self/status", NULL};
    int idx = spw_launch_start(l, "show", show, err, sizeof(err));
    assert_int_equal(idx, 0);
    int status = 0;
    assert_int_equal(wait_check(l, &status), idx); /* exited, grep's output written */
    FILE *f = fopen(spw_launch_log(l, idx), "r");
    assert_non_null(f);
    unsigned long long mask = 0;
    assert_int_equal(fscanf(f, "SigBlk: %llx", &mask), 1);
    fclose(f);
    assert_true(mask >> (SIGUSR1 - 1) & 1);
    const char *wait[] = {"-c", "sleep 0.3; exit 4", NULL};
    int w = spw_launch_start(l, "waits", wait, err, sizeof(err));
    assert_int_equal(spw_launch_kill(l, w, SIGUSR1), SPW_OK);
    /* reported however it ended (dash unblocks every signal at start, so the request may kill a
     * shell; a sparrow role has its handler by then) */
    assert_int_equal(wait_check(l, &status), w);
    spw_launch_destroy(l);
}

static void test_launch_rejects_bad_and_duplicate_names(void **state)
{
    (void)state;
    spw_launch_t *l = new_launch("names");
    char err[256];
    const char *args[] = {"-c", "sleep 30", NULL};
    assert_int_equal(spw_launch_start(l, "../evil", args, err, sizeof(err)), -1);
    assert_int_equal(spw_launch_start(l, "", args, err, sizeof(err)), -1);
    assert_int_equal(spw_launch_start(l, "x", args, err, sizeof(err)), 0);
    assert_int_equal(spw_launch_start(l, "x", args, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "already used"));
    assert_int_equal(spw_launch_find(l, "x"), 0);
    assert_int_equal(spw_launch_find(l, "y"), -1);
    spw_launch_destroy(l); /* stops the sleeping child */
}

static void test_launch_kill9_and_restart(void **state)
{
    (void)state;
    spw_launch_t *l = new_launch("kill");
    char err[256];
    const char *args[] = {"-c", "echo started; exec sleep 30", NULL};
    int idx = spw_launch_start(l, "victim", args, err, sizeof(err));
    assert_int_equal(idx, 0);
    pid_t first = spw_launch_pid(l, idx);
    assert_true(first > 0);
    assert_int_equal(spw_launch_wait_file(spw_launch_log(l, idx), 5000), SPW_OK);
    assert_int_equal(spw_launch_kill(l, idx, SIGKILL), SPW_OK);
    assert_false(spw_launch_alive(l, idx));
    int status;
    assert_int_equal(spw_launch_check(l, &status),
                     -1); /* a kill through the launcher is expected */
    assert_int_equal(spw_launch_kill(l, idx, SIGKILL), SPW_ERR_STATE);
    assert_int_equal(spw_launch_restart(l, idx, err, sizeof(err)), SPW_OK);
    assert_true(spw_launch_alive(l, idx));
    assert_true(spw_launch_pid(l, idx) != first);
    FILE *f = NULL;
    char buf[64] = "";
    for (int i = 0; i < 500 && strcmp(buf, "started\nstarted\n") != 0; i++) {
        spw_time_sleep_ms(10);
        f = fopen(spw_launch_log(l, idx), "r");
        assert_non_null(f);
        size_t got = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[got] = '\0';
    }
    f = fopen(spw_launch_log(l, idx), "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, "started\nstarted\n"); /* the log is appended across restarts */
    spw_launch_destroy(l);
}

static void test_launch_stop_escalates_to_sigkill(void **state)
{
    (void)state;
    spw_launch_t *l = new_launch("stop");
    char err[256];
    const char *polite[] = {"-c", "exec sleep 30", NULL};
    const char *stubborn[] = {"-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done", NULL};
    int a = spw_launch_start(l, "polite", polite, err, sizeof(err));
    int b = spw_launch_start(l, "stubborn", stubborn, err, sizeof(err));
    assert_true(a >= 0 && b >= 0);
    char path[300];
    snprintf(path, sizeof(path), "%s/stop/stubborn.log", test_dir);
    assert_int_equal(spw_launch_wait_file(path, 5000), SPW_OK); /* the trap is set */
    int status = 0;
    assert_int_equal(spw_launch_stop(l, a, 5000, &status), SPW_OK);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    uint64_t t0 = spw_time_mono_ms();
    assert_int_equal(spw_launch_stop(l, b, 300, &status), SPW_ERR_TIMEOUT);
    assert_true(spw_time_mono_ms() - t0 >= 300);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(spw_launch_check(l, &status), -1);
    spw_launch_destroy(l);
}

/* A group stop signals every member at once and shares one deadline: two children that each take
 * 600 ms to exit after SIGTERM stop cleanly within a 1000 ms grace, which stopping them one
 * after the other would not allow the second; a third that ignores SIGTERM is killed. */
static void test_launch_stop_group_signals_together(void **state)
{
    (void)state;
    spw_launch_t *l = new_launch("group");
    char err[256];
    const char *slow[] = {
        "-c", "trap 'sleep 0.6; exit 0' TERM; echo ready; while :; do sleep 0.05; done", NULL};
    const char *stubborn[] = {"-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done", NULL};
    int idx[3] = {spw_launch_start(l, "a", slow, err, sizeof(err)),
                  spw_launch_start(l, "b", slow, err, sizeof(err)),
                  spw_launch_start(l, "c", stubborn, err, sizeof(err))};
    assert_true(idx[0] >= 0 && idx[1] >= 0 && idx[2] >= 0);
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        char path[300];
        snprintf(path, sizeof(path), "%s/group/%s.log", test_dir, names[i]);
        assert_int_equal(spw_launch_wait_file(path, 5000), SPW_OK); /* the trap is set */
    }
    int status[3] = {0};
    assert_int_equal(spw_launch_stop_group(l, idx, 2, 1000, status), SPW_OK);
    for (int i = 0; i < 2; i++)
        assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
    assert_int_equal(spw_launch_stop_group(l, idx, 3, 300, status), SPW_ERR_TIMEOUT);
    assert_true(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL);
    spw_launch_destroy(l);
}

/* `sparrow launch` at its largest (SPW_PIPELINE_MAX_TRAINERS trainers, SPW_PIPELINE_MAX_SHARDS
 * shards and kafka-mock, gen, coordinator, serve) fits one launcher: it starts
 * SPW_LAUNCH_MAX_PROCS children and refuses the next with a message, then stops them all. */
static void test_launch_holds_the_largest_pipeline(void **state)
{
    (void)state;
    assert_true(SPW_PIPELINE_MAX_TRAINERS >= 64 && SPW_PIPELINE_MAX_SHARDS >= 16);
    assert_true(SPW_PIPELINE_MAX_TRAINERS + SPW_PIPELINE_MAX_SHARDS + SPW_PIPELINE_OTHER_PROCS <=
                SPW_LAUNCH_MAX_PROCS);
    spw_launch_t *l = new_launch("many");
    char err[256], name[32];
    const char *args[] = {"-c", "exec sleep 30", NULL};
    for (int i = 0; i < SPW_LAUNCH_MAX_PROCS; i++) {
        snprintf(name, sizeof(name), "p-%d", i);
        assert_int_equal(spw_launch_start(l, name, args, err, sizeof(err)), i);
    }
    assert_int_equal(spw_launch_count(l), SPW_LAUNCH_MAX_PROCS);
    assert_int_equal(spw_launch_start(l, "one-more", args, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "more than"));
    for (int i = 0; i < SPW_LAUNCH_MAX_PROCS; i++)
        assert_true(spw_launch_alive(l, i));
    int status;
    assert_int_equal(spw_launch_check(l, &status), -1);
    int idx[SPW_LAUNCH_MAX_PROCS];
    for (int i = 0; i < SPW_LAUNCH_MAX_PROCS; i++)
        idx[i] = i;
    assert_int_equal(spw_launch_stop_group(l, idx, SPW_LAUNCH_MAX_PROCS, 5000, NULL), SPW_OK);
    for (int i = 0; i < SPW_LAUNCH_MAX_PROCS; i++)
        assert_false(spw_launch_alive(l, i));
    spw_launch_destroy(l);
}

static void test_launch_free_port_and_wait_file(void **state)
{
    (void)state;
    int port = spw_launch_free_port();
    assert_true(port > 0 && port < 65536);
    char path[300];
    snprintf(path, sizeof(path), "%s/never", test_dir);
    assert_int_equal(spw_launch_wait_file(path, 100), SPW_ERR_TIMEOUT);
}

/* The per-label histogram launch's summary.json gets from the shards (staleness_class): series
 * summed per value of the label over pages, the label anywhere in the braces, other histograms
 * whose names share the prefix (sparrow_ps_staleness) not counted, series lacking the label
 * skipped; the unlabelled reader of sparrow_ps_staleness does not see the class histogram. */
static void test_pipeline_hist_by_label(void **state)
{
    (void)state;
    static const char page[] =
        "# TYPE sparrow_ps_staleness histogram\n"
        "sparrow_ps_staleness_bucket{le=\"0\"} 10\n"
        "sparrow_ps_staleness_bucket{le=\"+Inf\"} 20\n"
        "sparrow_ps_staleness_sum 30\n"
        "sparrow_ps_staleness_count 20\n"
        "sparrow_ps_staleness_class_bucket{class=\"bias\",le=\"0\"} 1\n"
        "sparrow_ps_staleness_class_bucket{class=\"bias\",le=\"4\"} 3\n"
        "sparrow_ps_staleness_class_bucket{class=\"bias\",le=\"+Inf\"} 4\n"
        "sparrow_ps_staleness_class_sum{class=\"bias\"} 9\n"
        "sparrow_ps_staleness_class_count{class=\"bias\"} 4\n"
        "sparrow_ps_staleness_class_bucket{le=\"0\",shard=\"0\",class=\"rest\"} 5\n"
        "sparrow_ps_staleness_class_bucket{le=\"+Inf\",shard=\"0\",class=\"rest\"} 6\n"
        "sparrow_ps_staleness_class_sum{shard=\"0\",class=\"rest\"} 2\n"
        "sparrow_ps_staleness_class_bucket{subclass=\"x\",le=\"+Inf\"} 100\n";
    struct spw_pipeline_hist_by hb;
    memset(&hb, 0, sizeof(hb));
    spw_pipeline_hist_add_by(&hb, page, "sparrow_ps_staleness_class", "class");
    spw_pipeline_hist_add_by(&hb, page, "sparrow_ps_staleness_class", "class"); /* shard 2 */
    assert_int_equal(hb.n, 2);
    assert_string_equal(hb.value[0], "bias");
    assert_string_equal(hb.value[1], "rest");
    assert_true(spw_pipeline_hist_total(&hb.h[0]) == 8);
    assert_true(hb.h[0].sum == 18);
    assert_true(spw_pipeline_hist_mean(&hb.h[0]) == 18.0 / 8);
    assert_true(spw_pipeline_hist_quantile(&hb.h[0], 0.5) == 4);
    assert_true(spw_pipeline_hist_total(&hb.h[1]) == 12);
    assert_true(hb.h[1].sum == 4);
    struct spw_pipeline_hist h;
    memset(&h, 0, sizeof(h));
    spw_pipeline_hist_add(&h, page, "sparrow_ps_staleness");
    assert_true(spw_pipeline_hist_total(&h) == 20 && h.sum == 30);
    struct spw_pipeline_hist_by none;
    memset(&none, 0, sizeof(none));
    spw_pipeline_hist_add_by(&none, page, "sparrow_ps_staleness", "class");
    assert_int_equal(none.n, 0);
}

/* A window of a cumulative histogram: the observations between two scrapes, bucket by bucket.
 * The start-up's slow updates, in the first scrape, leave the window's p99 (the demo's freshness
 * over its last seconds); a bucket the first scrape lacks counts whole, none goes negative. */
static void test_pipeline_hist_since_is_a_window(void **state)
{
    (void)state;
    static const char *const fmt = "sparrow_serve_freshness_seconds_bucket{le=\"0.5\"} %d\n"
                                   "sparrow_serve_freshness_seconds_bucket{le=\"1\"} %d\n"
                                   "%s"
                                   "sparrow_serve_freshness_seconds_bucket{le=\"+Inf\"} %d\n"
                                   "sparrow_serve_freshness_seconds_sum %d\n";
    char page[512];
    struct spw_pipeline_snapshot before, now;
    memset(&before, 0, sizeof(before));
    memset(&now, 0, sizeof(now));
    /* start-up: 10 updates, 5 of them 10 s late (the backlog) */
    snprintf(page, sizeof(page), fmt, 5, 5, "", 10, 52);
    spw_pipeline_hist_add(&before.fresh, page, "sparrow_serve_freshness_seconds");
    /* then 100 updates within 0.5 s; a bound (le=5) the first scrape lacked: none new there */
    snprintf(page, sizeof(page), fmt, 105, 105,
             "sparrow_serve_freshness_seconds_bucket{le=\"5\"} 105\n", 110, 77);
    spw_pipeline_hist_add(&now.fresh, page, "sparrow_serve_freshness_seconds");
    assert_true(spw_pipeline_hist_quantile(&now.fresh, 0.99) == INFINITY); /* since the start */
    struct spw_pipeline_hist w;
    spw_pipeline_hist_since(&w, &now.fresh, &before.fresh);
    assert_true(spw_pipeline_hist_total(&w) == 100);
    assert_true(w.sum == 25);
    for (size_t i = 0; i < w.n; i++)
        assert_true(w.count[i] == 100); /* every bound, le=5 from before's le=1 */
    assert_true(spw_pipeline_fresh_since(&now, &before.fresh) == 100);
    assert_true(now.fresh_p50 == 0.5 && now.fresh_p99 == 0.5);
    /* nothing new: no quantile; a count that fell (serve restarted) is clamped to 0 */
    assert_true(spw_pipeline_fresh_since(&before, &now.fresh) == 0);
    assert_true(isnan(before.fresh_p99));
    spw_pipeline_hist_since(&w, &before.fresh, &now.fresh);
    for (size_t i = 0; i < w.n; i++)
        assert_true(w.count[i] == 0);
}

/* The examples topic is sized for a backlog that must fit the mock's retention; the records lost
 * to it are read from the trainers' lines and, for a backlog, from the mock's deletions. */
static void test_pipeline_retention(void **state)
{
    (void)state;
    struct spw_pipeline_conf c = {.partitions = 4, .trainers = 2, .gen_n = 20000};
    assert_int_equal(spw_pipeline__examples_partitions(&c), 4); /* consumed as produced */
    c.gen_first = true;
    assert_int_equal(spw_pipeline__examples_partitions(&c), 4); /* 12 MB fit in 4 x 4 MiB */
    c.gen_n = 200000;                                           /* 120 MB: 29 partitions of 4 MiB */
    long parts = spw_pipeline__examples_partitions(&c);
    assert_int_equal(parts, 29);
    assert_true(spw_pipeline__examples_held(parts) >= 200000);
    assert_true(spw_pipeline__examples_held(4) < 30000);

    struct spw_pipeline p = {.conf = &c, .launch = new_launch("retention")};
    char err[256];
    const char *t0[] = {"-c",
                        "echo 'x ERROR trainer kafka offsets lost to retention topic=examples "
                        "partition=0 requested=10 earliest=22 latest=60 lost=12 policy=earliest'; "
                        "echo 'x ERROR trainer kafka offsets lost to retention topic=examples "
                        "partition=1 requested=3 earliest=8 latest=9 lost=5 policy=earliest'",
                        NULL};
    const char *t1[] = {"-c", "echo 'x INFO trainer finished examples=5 lost_to_retention=0'",
                        NULL};
    const char *mock[] = {"-c",
                          "echo 'x WARN kafka-mock kafka-mock deleted records to its retention "
                          "topic=examples partition=0 deleted=20 held=4'; "
                          "echo 'x WARN kafka-mock kafka-mock deleted records to its retention "
                          "topic=examples partition=0 deleted=30 held=4'; "
                          "echo 'x WARN kafka-mock kafka-mock deleted records to its retention "
                          "topic=model-updates partition=0 deleted=99 held=4'",
                          NULL};
    assert_true(spw_launch_start(p.launch, "trainer-0", t0, err, sizeof(err)) >= 0);
    assert_true(spw_launch_start(p.launch, "trainer-1", t1, err, sizeof(err)) >= 0);
    assert_true(spw_launch_start(p.launch, "kafka-mock", mock, err, sizeof(err)) >= 0);
    int status;
    for (int n = 0; n < 3;)
        n += wait_check(p.launch, &status) >= 0;
    assert_int_equal(spw_pipeline_lost_records(&p), 30); /* the backlog's deletions, latest */
    c.gen_first = false;
    assert_int_equal(spw_pipeline_lost_records(&p), 17); /* what the trainers said */
    spw_launch_destroy(p.launch);
}

SPW_TEST_MAIN_GROUP(test_dir_setup, test_dir_teardown, test_launch_logs_and_reports_unexpected_exit,
                    test_launch_child_starts_with_sigusr1_blocked,
                    test_launch_rejects_bad_and_duplicate_names, test_launch_kill9_and_restart,
                    test_launch_stop_escalates_to_sigkill, test_launch_stop_group_signals_together,
                    test_launch_holds_the_largest_pipeline, test_launch_free_port_and_wait_file,
                    test_pipeline_hist_by_label, test_pipeline_hist_since_is_a_window,
                    test_pipeline_retention)
