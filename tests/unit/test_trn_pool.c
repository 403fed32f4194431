/* Unit tests of the compute threads' pool (trainer/src/pool.c): every part of every job runs
 * exactly once, on a thread of its own (the owner for thread 0 of a pool_run job, worker 0
 * sitting it out), wait orders the job's writes before the owner's reads, the barrier holds
 * every part until all have arrived, jobs follow each other at once (the spinning waits) and
 * after pauses longer than the spin (the sleeping waits), and stop joins the workers in either
 * state. Also run under ThreadSanitizer. */
#include "test_main.h" /* cmocka and what it needs first */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "pool.h"

#define MAX_T  4
#define ROUNDS 3 /* barrier rounds per job */
#define JOBS   200

struct job_state {
    struct spw_trn__pool *pool;
    bool barriers;
    uint64_t job;                 /* owner-written before each job */
    uint32_t runs[MAX_T];         /* parts run, per part */
    pthread_t who[MAX_T];         /* the thread that ran part t, this job */
    uint64_t slot[ROUNDS][MAX_T]; /* part t's value for round r, written before the barrier */
    uint64_t sum[MAX_T][ROUNDS];  /* what part t summed of all parts' values after it */
};

static void job_fn(void *ctx, uint32_t t, uint32_t threads)
{
    struct job_state *js = ctx;
    js->runs[t]++;
    js->who[t] = pthread_self();
    if (!js->barriers)
        return;
    for (int r = 0; r < ROUNDS; r++) {
        js->slot[r][t] = js->job * 1000 + (uint64_t)r * 10 + t;
        spw_trn__pool_barrier(js->pool);
        uint64_t sum = 0;
        for (uint32_t u = 0; u < threads; u++)
            sum += js->slot[r][u];
        js->sum[t][r] = sum;
    }
}

static void pause_past_spin(void)
{
    struct timespec ts = {0, 2 * 1000 * 1000}; /* 2 ms: well past the 100 µs spin */
    nanosleep(&ts, NULL);
}

/* JOBS jobs on a pool of `threads`, alternating submit + wait and run (owner as thread 0),
 * pausing past the spin every `pause_every` jobs (0: never). */
static void run_jobs(uint32_t threads, bool barriers, uint32_t pause_every)
{
    char err[256] = "";
    struct spw_trn__pool *pool = spw_trn__pool_start(threads, err, sizeof(err));
    assert_non_null(pool);
    assert_int_equal(spw_trn__pool_threads(pool), threads);
    struct job_state js = {.pool = pool, .barriers = barriers};
    uint32_t expect_runs = 0;
    for (uint64_t j = 1; j <= JOBS; j++) {
        js.job = j;
        memset(js.who, 0, sizeof(js.who));
        bool owner_runs = j % 2 == 0;
        if (owner_runs) {
            spw_trn__pool_run(pool, job_fn, &js);
        } else {
            spw_trn__pool_submit(pool, job_fn, &js);
            spw_trn__pool_wait(pool);
        }
        expect_runs++;
        for (uint32_t t = 0; t < threads; t++) {
            assert_int_equal(js.runs[t], expect_runs);
            /* the owner ran part 0 of a run job, and only that part */
            assert_true(pthread_equal(js.who[t], pthread_self()) == (owner_runs && t == 0));
            for (uint32_t u = 0; u < t; u++)
                assert_false(pthread_equal(js.who[t], js.who[u]));
            if (!barriers)
                continue;
            for (int r = 0; r < ROUNDS; r++) {
                uint64_t want = 0;
                for (uint32_t u = 0; u < threads; u++)
                    want += j * 1000 + (uint64_t)r * 10 + u;
                assert_int_equal(js.sum[t][r], want);
            }
        }
        if (pause_every && j % pause_every == 0)
            pause_past_spin();
    }
    if (pause_every)
        pause_past_spin(); /* stop finds the workers asleep */
    spw_trn__pool_stop(pool);
}

static void test_trn_pool_jobs_back_to_back(void **state)
{
    (void)state;
    for (uint32_t threads = 1; threads <= MAX_T; threads++)
        run_jobs(threads, false, 0);
}

static void test_trn_pool_barrier_back_to_back(void **state)
{
    (void)state;
    for (uint32_t threads = 1; threads <= MAX_T; threads++)
        run_jobs(threads, true, 0);
}

static void test_trn_pool_after_pauses_past_the_spin(void **state)
{
    (void)state;
    run_jobs(2, true, 1);  /* every job starts with the workers asleep */
    run_jobs(3, true, 17); /* some do */
}

static void test_trn_pool_stop_without_jobs(void **state)
{
    (void)state;
    char err[256] = "";
    struct spw_trn__pool *pool = spw_trn__pool_start(3, err, sizeof(err));
    assert_non_null(pool);
    spw_trn__pool_wait(pool); /* none in flight: returns at once */
    spw_trn__pool_stop(pool); /* workers still spinning or just asleep */
    spw_trn__pool_stop(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trn_pool_jobs_back_to_back),
        cmocka_unit_test(test_trn_pool_barrier_back_to_back),
        cmocka_unit_test(test_trn_pool_after_pauses_past_the_spin),
        cmocka_unit_test(test_trn_pool_stop_without_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
