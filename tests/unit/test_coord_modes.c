/* Tests of the coordinator's clocks with fake trainers (threads with real clients over loopback):
 * sync, ssp:S, async and hybrid:K, a trainer killed during sync, re-registration, and elastic
 * synchronisation with checkpoints due. */
#include "test_main.h" /* cmocka and what it needs first */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "sparrow/coord_client.h"
#include "sparrow/coordinator.h"
#include "sparrow/fs.h"
#include "sparrow/signal.h"
#include "sparrow/sparrow.pb-c.h"
#include "sparrow/time.h"

#define MAXT 4

struct harness {
    spw_coord_server_t *srv;
    pthread_t thread;
    _Atomic int stop;
    char dir[128];
    char endpoint[256];
    atomic_uint_fast64_t done[MAXT]; /* steps each trainer completed */
    atomic_int violations;
    atomic_int barriers_dropped;
    pthread_barrier_t joined; /* every trainer registered before any steps */
    struct spw_coord_mode mode;
    bool unbounded; /* elastic: one out of the barrier lags the others by design */
    int n;
};

struct trainer {
    struct harness *h;
    int idx;
    uint64_t steps;
    uint64_t delay_ms;
    uint64_t slow_ms, slow_until; /* steps 1..slow_until take slow_ms instead of delay_ms */
    /* asks for a checkpoint (SIGUSR1, as an operator would) at the start of each of its steps
     * slow_until+1 .. slow_until+ckpt_after_slow */
    uint64_t ckpt_after_slow;
    uint64_t examples;          /* per step, in its Clock (0: an idle tick, no step time) */
    uint64_t die_after;         /* 0: never */
    uint64_t leave_after;       /* 0: never; else stops cleanly (Leave) after this step */
    bool leave_at_end;          /* says Leave after its last step (else it just goes silent) */
    uint64_t finished_at_other; /* the slowest other trainer's steps when this one finished */
    spw_err_t rc;
};

static void *server_main(void *arg)
{
    struct harness *h = arg;
    spw_coord_server_run(h->srv);
    return NULL;
}

/* conf's other settings as the caller set them */
static void start_conf(struct harness *h, const char *mode, int n,
                       struct spw_coord_server_conf conf)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->dir, sizeof(h->dir), "/tmp/test_coord_modes.XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    conf.listen = "tcp://127.0.0.1:*";
    assert_int_equal(spw_coord_mode_parse(mode, &conf.mode), SPW_OK);
    conf.checkpoint_dir = h->dir;
    conf.checkpoint_timeout_ms = 5000;
    conf.keep = 2;
    conf.stop = &h->stop;
    char err[256];
    h->srv = spw_coord_server_new(&conf, err, sizeof(err));
    assert_non_null(h->srv);
    snprintf(h->endpoint, sizeof(h->endpoint), "%s", spw_coord_server_endpoint(h->srv));
    h->mode = conf.mode;
    h->n = n;
    assert_int_equal(pthread_create(&h->thread, NULL, server_main, h), 0);
}

/* startup_grace_ms and startup_trainers as coordinator.startup.grace and .trainers */
static void start_startup(struct harness *h, const char *mode, int n, uint64_t member_timeout_ms,
                          uint64_t startup_grace_ms, uint32_t startup_trainers)
{
    start_conf(h, mode, n,
               (struct spw_coord_server_conf){.member_timeout_ms = member_timeout_ms,
                                              .startup_grace_ms = startup_grace_ms,
                                              .startup_trainers = startup_trainers});
}

static void start_with(struct harness *h, const char *mode, int n, uint64_t member_timeout_ms)
{
    start_startup(h, mode, n, member_timeout_ms, 0, 0);
}

static void start(struct harness *h, const char *mode, int n)
{
    start_with(h, mode, n, 600);
}

static void finish(struct harness *h, struct spw_coord_server_stats *st)
{
    h->stop = 1;
    pthread_join(h->thread, NULL);
    if (st)
        spw_coord_server_get_stats(h->srv, st);
    spw_coord_server_destroy(h->srv);
    assert_int_equal(spw_fs_remove_tree(h->dir), SPW_OK);
}

static uint64_t min_other(struct harness *h, int self, bool include_dead)
{
    uint64_t m = UINT64_MAX;
    for (int j = 0; j < h->n; j++)
        if (j != self && (include_dead || atomic_load(&h->done[j]) != UINT64_MAX))
            if (atomic_load(&h->done[j]) < m)
                m = atomic_load(&h->done[j]);
    return m;
}

static void *trainer_main(void *arg)
{
    struct trainer *t = arg;
    struct harness *h = t->h;
    char id[32];
    snprintf(id, sizeof(id), "trainer-%d", t->idx);
    struct spw_coord_client_conf cc = {h->endpoint, id,   SPARROW__MEMBER_ROLE__ROLE_TRAINER,
                                       50,          1000, NULL};
    char err[256];
    spw_coord_client_t *c = spw_coord_client_new(&cc, 5000, err, sizeof(err));
    if (!c) {
        t->rc = SPW_ERR_RPC;
        pthread_barrier_wait(&h->joined);
        return NULL;
    }
    pthread_barrier_wait(&h->joined);
    for (uint64_t s = 1; s <= t->steps; s++) {
        if (s > t->slow_until && s <= t->slow_until + t->ckpt_after_slow)
            raise(SIGUSR1); /* a step ahead of its Clock: the request is seen first */
        uint64_t delay_ms = s <= t->slow_until ? t->slow_ms : t->delay_ms;
        if (delay_ms)
            spw_time_sleep_ms(delay_ms);
        atomic_store(&h->done[t->idx], s);
        if (t->die_after && s == t->die_after) {
            /* killed: no more heartbeats, never clocks again */
            atomic_store(&h->done[t->idx], UINT64_MAX);
            spw_coord_client_destroy(c);
            return NULL;
        }
        if (t->leave_after && s == t->leave_after) {
            atomic_store(&h->done[t->idx], UINT64_MAX);
            spw_coord_client_leave(c);
            spw_coord_client_destroy(c);
            return NULL;
        }
        struct spw_coord_event ev;
        for (;;) {
            t->rc = spw_coord_client_clock_step(c, s, t->examples, &ev);
            if (t->rc != SPW_OK)
                goto out;
            if (ev.kind == SPW_COORD_EV_RESTORE) {
                spw_coord_client_restore_report(c, ev.generation);
                continue;
            }
            if (ev.kind == SPW_COORD_EV_CHECKPOINT) {
                spw_coord_client_checkpoint_report(c, ev.epoch, NULL, 0, s);
                continue;
            }
            break;
        }
        uint64_t lo = min_other(h, t->idx, false);
        if (lo == UINT64_MAX)
            lo = s;
        if (!h->unbounded && !spw_coord_mode_may_proceed(&h->mode, s, lo)) {
            fprintf(stderr, "violation: trainer %d went on at %llu, slowest at %llu\n", t->idx,
                    (unsigned long long)s, (unsigned long long)lo);
            atomic_fetch_add(&h->violations, 1);
        }
        if (ev.drop_cache)
            atomic_fetch_add(&h->barriers_dropped, 1);
    }
    t->finished_at_other = min_other(h, t->idx, false);
    if (t->leave_at_end)
        spw_coord_client_leave(c);
out:
    spw_coord_client_destroy(c);
    return NULL;
}

static void run_trainers(struct harness *h, struct trainer *t, int n)
{
    pthread_t th[MAXT];
    pthread_barrier_init(&h->joined, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        t[i].h = h;
        t[i].idx = i;
        assert_int_equal(pthread_create(&th[i], NULL, trainer_main, &t[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&h->joined);
}

static void test_coord_modes_sync_waits_for_slowest(void **state)
{
    (void)state;
    struct harness h;
    start(&h, "sync", 3);
    struct trainer t[3] = {{.steps = 30}, {.steps = 30}, {.steps = 30, .delay_ms = 10}};
    run_trainers(&h, t, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t[i].rc, SPW_OK);
    assert_int_equal(atomic_load(&h.violations), 0);
    finish(&h, NULL);
}

static void test_coord_modes_ssp_bounds_gap(void **state)
{
    (void)state;
    struct harness h;
    start(&h, "ssp:3", 2);
    struct trainer t[2] = {{.steps = 40}, {.steps = 40, .delay_ms = 8}};
    run_trainers(&h, t, 2);
    assert_int_equal(t[0].rc, SPW_OK);
    assert_int_equal(t[1].rc, SPW_OK);
    assert_int_equal(atomic_load(&h.violations), 0);
    finish(&h, NULL);
}

static void test_coord_modes_async_runs_ahead(void **state)
{
    (void)state;
    struct harness h;
    start(&h, "async", 2);
    struct trainer t[2] = {{.steps = 40}, {.steps = 40, .delay_ms = 20}};
    run_trainers(&h, t, 2);
    assert_int_equal(t[0].rc, SPW_OK);
    /* the fast trainer finished while the slow one was far behind */
    assert_true(t[0].finished_at_other < 30);
    finish(&h, NULL);
}

static void test_coord_modes_hybrid_barriers(void **state)
{
    (void)state;
    struct harness h;
    start(&h, "hybrid:5", 2);
    struct trainer t[2] = {{.steps = 20}, {.steps = 20, .delay_ms = 5}};
    run_trainers(&h, t, 2);
    assert_int_equal(t[0].rc, SPW_OK);
    assert_int_equal(atomic_load(&h.violations), 0);
    /* barriers at 5, 10, 15, 20 for each trainer drop caches */
    assert_true(atomic_load(&h.barriers_dropped) >= 6);
    struct spw_coord_server_stats st;
    finish(&h, &st);
    /* checkpoint.steps 0 in hybrid: an epoch at every barrier (no shards: manifests only) */
    assert_true(st.epochs_completed >= 3);
}

/* Fails the test with the trainers' steps when they are not done within limit_ms (a coordinator
 * that holds every trainer for good), instead of leaving it to ctest's timeout. */
struct watchdog {
    struct harness *h;
    atomic_int done;
    uint64_t limit_ms;
};

static void *watchdog_main(void *arg)
{
    struct watchdog *w = arg;
    uint64_t start = spw_time_mono_ms();
    while (!atomic_load(&w->done)) {
        if (spw_time_mono_ms() - start > w->limit_ms) {
            fprintf(stderr, "watchdog: trainers not done after %llu ms; steps:",
                    (unsigned long long)w->limit_ms);
            for (int i = 0; i < w->h->n; i++)
                fprintf(stderr, " %llu", (unsigned long long)atomic_load(&w->h->done[i]));
            fprintf(stderr, "\n");
            _exit(1);
        }
        spw_time_sleep_ms(50);
    }
    return NULL;
}

/* run_trainers under the watchdog (90 s: the sanitizers' builds are slow); each must end SPW_OK. */
static void run_watched(struct harness *h, struct trainer *t, int n)
{
    struct watchdog w = {.h = h, .limit_ms = 90 * 1000};
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, watchdog_main, &w), 0);
    run_trainers(h, t, n);
    atomic_store(&w.done, 1);
    pthread_join(wt, NULL);
    for (int i = 0; i < n; i++)
        assert_int_equal(t[i].rc, SPW_OK);
}

/* A checkpoint interval shorter than an epoch's round trip: each epoch needs a step since the
 * last one, so that the trainers are released between epochs (else the next epoch opened before
 * any release, and no trainer went past its second step). */
static void test_coord_modes_sync_checkpoint_interval_below_epoch(void **state)
{
    (void)state;
    struct harness h;
    start_conf(
        &h, "sync", 3,
        (struct spw_coord_server_conf){.member_timeout_ms = 5000, .checkpoint_interval_ms = 1});
    struct trainer t[3] = {{.steps = 30, .examples = 64, .leave_at_end = true},
                           {.steps = 30, .examples = 64, .leave_at_end = true},
                           {.steps = 30, .delay_ms = 2, .examples = 64, .leave_at_end = true}};
    run_watched(&h, t, 3);
    assert_int_equal(atomic_load(&h.violations), 0);
    struct spw_coord_server_stats st;
    finish(&h, &st);
    assert_true(st.epochs_completed >= 10);
    assert_int_equal(st.epochs_aborted, 0);
}

/* Elastic synchronisation with checkpoints. Trainer 2 is slow for its first 15 steps: it leaves
 * the barrier (elastic factor 4 over 3 steps) and goes on asynchronously, behind its unit (about
 * 25 steps here); then it keeps up again and rejoins. At the start of each of its next 30 steps it
 * asks for a checkpoint (SIGUSR1), so that one is due when it rejoins; trainers 0 and 1 differ in
 * speed, so that one of them has often pushed the unit's next step and waits for its commit then.
 * A trainer that rejoined at that Clock, behind its unit, held that step, while the due checkpoint
 * held its release: nobody went on (the coordinator before the fix stalled so in 6 of 10 runs of
 * this case; the watchdog turns a stall into a failure). It rejoins at its release: every trainer
 * must finish, both moves must happen, and the checkpoints must go on completing. */
static void test_coord_modes_sync_elastic_rejoin_with_checkpoints(void **state)
{
    (void)state;
    spw_signal_install(); /* SIGUSR1: the coordinator's checkpoint request, not the default kill */
    struct harness h;
    struct spw_coord_server_conf conf = {.member_timeout_ms = 5000, .checkpoint_interval_ms = 30};
    conf.sync.elastic_factor = 4;
    conf.sync.elastic_steps = 3;
    start_conf(&h, "sync", 3, conf);
    h.unbounded = true;
    struct trainer t[3] = {{.steps = 300, .delay_ms = 1, .examples = 64, .leave_at_end = true},
                           {.steps = 300, .delay_ms = 8, .examples = 64, .leave_at_end = true},
                           {.steps = 300,
                            .delay_ms = 1,
                            .examples = 64,
                            .slow_ms = 100,
                            .slow_until = 15,
                            .ckpt_after_slow = 30,
                            .leave_at_end = true}};
    run_watched(&h, t, 3);
    struct spw_coord_server_stats st;
    finish(&h, &st);
    assert_true(st.elastic_leaves >= 1);
    assert_true(st.elastic_rejoins >= 1);
    assert_true(st.epochs_completed >= 3);
    assert_int_equal(st.epochs_aborted, 0);
}

/* Three sync trainers of 25 steps; the third departs as `third` says. The other two must finish
 * with the mode kept and one member removed. */
static void sync_third_departs(struct trainer third, uint64_t member_timeout_ms,
                               struct spw_coord_server_stats *st)
{
    struct harness h;
    start_with(&h, "sync", 3, member_timeout_ms);
    struct trainer t[3] = {{.steps = 25}, {.steps = 25}, third};
    run_trainers(&h, t, 3);
    assert_int_equal(t[0].rc, SPW_OK);
    assert_int_equal(t[1].rc, SPW_OK);
    assert_int_equal(atomic_load(&h.violations), 0);
    finish(&h, st);
    assert_int_equal(st->members_removed, 1);
}

static void test_coord_modes_sync_member_killed(void **state)
{
    (void)state;
    struct spw_coord_server_stats st;
    sync_third_departs((struct trainer){.steps = 25, .die_after = 5}, 600, &st);
    assert_true(st.recoveries >= 2); /* start, joins, and the removal */
}

/* A trainer that stops cleanly says so: with a member timeout of an hour, the others can only
 * finish their steps because the coordinator removes the leaver at once. */
static void test_coord_modes_sync_member_leaves(void **state)
{
    (void)state;
    struct spw_coord_server_stats st;
    sync_third_departs((struct trainer){.steps = 25, .leave_after = 5}, 3600 * 1000, &st);
}

/* With coordinator.startup.trainers 3 the first recovery begins once the three trainers have
 * registered, long before the hour of grace. Sync trainers are not released before the first
 * recovery, so without the early end this test would wait the hour (ctest's timeout). */
static void test_coord_modes_startup_trainers_end_grace(void **state)
{
    (void)state;
    struct harness h;
    start_startup(&h, "sync", 3, 600, 3600 * 1000, 3);
    struct trainer t[3] = {{.steps = 20, .delay_ms = 5}, {.steps = 20}, {.steps = 20}};
    run_trainers(&h, t, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t[i].rc, SPW_OK);
    assert_int_equal(atomic_load(&h.violations), 0);
    struct spw_coord_server_stats st;
    finish(&h, &st);
    assert_int_equal(st.recoveries, 1);
}

/* Hostile member frames are refused and counted (sparrow_coord_malformed_messages_total): bytes
 * that are no CoordMessage, and a CoordMessage of another protocol version; a member's valid
 * Register on the same connection is still answered, after them (one peer's frames are handled
 * in order). */
static void test_coord_modes_malformed_counted(void **state)
{
    (void)state;
    struct harness h;
    start(&h, "async", 0);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, timeout = 10000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(zmq_connect(s, h.endpoint), 0);
    static const char junk[][8] = {{(char)0xff, (char)0xff, (char)0xff}, {0x0a, 0x7f}, {0x42}};
    for (size_t i = 0; i < 3; i++)
        assert_true(zmq_send(s, junk[i], strlen(junk[i]), 0) >= 0);
    uint8_t buf[256];
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    Sparrow__Register r = SPARROW__REGISTER__INIT;
    r.has_role = r.has_incarnation = true;
    r.role = SPARROW__MEMBER_ROLE__ROLE_TRAINER;
    r.member_id = "hostile-test";
    r.incarnation = 1;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_REGISTER;
    msg.register_ = &r;
    msg.has_version = true;
    msg.version = (Sparrow__ProtocolVersion)7;
    size_t len = sparrow__coord_message__pack(&msg, buf);
    assert_true(zmq_send(s, buf, len, 0) >= 0);
    msg.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    len = sparrow__coord_message__pack(&msg, buf);
    assert_true(zmq_send(s, buf, len, 0) >= 0);
    assert_true(zmq_recv(s, buf, sizeof(buf), 0) > 0); /* the valid Register's reply */
    zmq_close(s);
    zmq_ctx_term(ctx);
    struct spw_coord_server_stats st;
    finish(&h, &st);
    assert_int_equal(st.malformed, 4);
}

SPW_TEST_MAIN(test_coord_modes_sync_waits_for_slowest, test_coord_modes_ssp_bounds_gap,
              test_coord_modes_async_runs_ahead, test_coord_modes_hybrid_barriers,
              test_coord_modes_sync_member_killed, test_coord_modes_sync_member_leaves,
              test_coord_modes_malformed_counted, test_coord_modes_startup_trainers_end_grace,
              test_coord_modes_sync_checkpoint_interval_below_epoch,
              test_coord_modes_sync_elastic_rejoin_with_checkpoints)
