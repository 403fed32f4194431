/* Unit tests of the trainer's worker loop over the ZeroMQ transport, with two shards served from
 * threads of this process: pipelined pulls with checkpoints that cancel and redo the prefetched
 * pull, fresh reads of the trainer's own pushes, a stop request while the shards are unreachable
 * (the loop neither hangs nor trains the micro-batch whose rows never came), and a deep model's
 * start while a shard is slow to answer its first pull. */
#include "test_main.h" /* cmocka and what it needs first */

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "sparrow/arena.h"
#include "sparrow/pserver.h"
#include "sparrow/sparrow.pb-c.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/tools.h"
#include "sparrow/trainer.h"
#include "sparrow/trainer_loop.h"
#include "sparrow/wire.h"

#define SHARDS 2
#define GEN_N  30000

static char g_root[64];
static char g_data[128];

struct srv {
    uint32_t index;
    char dir[160];
    char endpoint[256];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready; /* 0 starting, 1 serving, -1 failed */
    char err[256];
};

static struct srv g_srv[SHARDS];

static void *server_main(void *arg)
{
    struct srv *sv = arg;
    struct spw_ps_server_conf c = {0};
    c.listen = "tcp://127.0.0.1:*";
    c.shards = SHARDS;
    c.max_frame = 32u << 20;
    c.data_dir = sv->dir;
    c.store.shard = sv->index;
    c.store.dim = 5;
    spw_ps_optim_conf_default(&c.store.optim);
    c.store.optim.lr = 0.02f;
    c.store.penalty.kind = SPW_PS_PENALTY_INVERSE;
    c.store.memory_bytes = 64u << 20;
    spw_ps_server_t *srv = spw_ps_server_new(&c, sv->err, sizeof(sv->err));
    pthread_mutex_lock(&sv->mu);
    if (srv)
        snprintf(sv->endpoint, sizeof(sv->endpoint), "%s", spw_ps_server_endpoint(srv));
    sv->ready = srv ? 1 : -1;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (srv) {
        spw_ps_server_run(srv);
        spw_ps_server_destroy(srv);
    }
    return NULL;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    char errstr[256];
    snprintf(g_root, sizeof(g_root), "/tmp/test_trn_loop_zmq.XXXXXX");
    if (!mkdtemp(g_root))
        return -1;
    snprintf(g_data, sizeof(g_data), "%s/data.pb", g_root);
    FILE *f = fopen(g_data, "wb");
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.n = GEN_N;
    gp.seed = 4;
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    if (!f || !gen)
        return -1;
    struct spw_wire_buf buf = {0};
    for (uint64_t i = 0; i < GEN_N; i++) {
        buf.len = 0;
        if (spw_gen_encode(gen, spw_gen_next(gen), SPW_FORMAT_PB, &buf) ||
            fwrite(buf.data, 1, buf.len, f) != buf.len)
            return -1;
    }
    free(buf.data);
    spw_gen_destroy(gen);
    return fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static int g_cluster; /* numbers the shards' directories: every start is a fresh model */

static void start_servers(char *shards, size_t size)
{
    shards[0] = '\0';
    g_cluster++;
    for (uint32_t i = 0; i < SHARDS; i++) {
        struct srv *sv = &g_srv[i];
        memset(sv, 0, sizeof(*sv));
        sv->index = i;
        snprintf(sv->dir, sizeof(sv->dir), "%s/c%d-shard-%u", g_root, g_cluster, i);
        pthread_mutex_init(&sv->mu, NULL);
        pthread_cond_init(&sv->cv, NULL);
        assert_int_equal(pthread_create(&sv->thread, NULL, server_main, sv), 0);
        pthread_mutex_lock(&sv->mu);
        while (sv->ready == 0)
            pthread_cond_wait(&sv->cv, &sv->mu);
        pthread_mutex_unlock(&sv->mu);
        if (sv->ready < 0)
            fail_msg("shard %u: %s", i, sv->err);
        size_t len = strlen(shards);
        snprintf(shards + len, size - len, "%s%s", i ? "," : "", sv->endpoint);
    }
}

static void stop_servers(void)
{
    spw_signal_request_stop();
    for (uint32_t i = 0; i < SHARDS; i++) {
        pthread_join(g_srv[i].thread, NULL);
        pthread_mutex_destroy(&g_srv[i].mu);
        pthread_cond_destroy(&g_srv[i].cv);
    }
    spw_signal_reset();
}

static char g_url[160];

static struct spw_trainer_loop_conf zmq_conf(const char *shards)
{
    struct spw_trainer_loop_conf c;
    spw_trainer_loop_conf_default(&c);
    spw_model_init(&c.params.model, SPW_MODEL_FM, 4);
    c.params.topk.dim = c.params.model.dim;
    c.params.backend = SPW_BACKEND_CPU;
    c.params.batch = 256;
    c.params.eval_window = 10000;
    c.params.compress = true;
    c.params.topk.ratio = 0.2;
    snprintf(g_url, sizeof(g_url), "file:%s", g_data);
    c.in = g_url;
    c.client.shards = shards;
    c.client.push_timeout_ms = 500;
    c.client.pull_timeout_ms = 500;
    c.log_interval_ms = 0;
    c.grace_ms = 10000;
    return c;
}

struct ck {
    uint64_t every;
    int checkpoints;
    spw_err_t err;
    uint64_t seen;
};

static spw_err_t after_step(void *opaque, spw_trainer_loop_t *loop,
                            const struct spw_trainer_step_info *info)
{
    struct ck *k = opaque;
    k->seen += info->examples;
    if ((info->step + 1) % k->every)
        return SPW_OK;
    struct spw_trainer_position pos[1];
    size_t n = 7;
    spw_err_t err = spw_trainer_loop_checkpoint(loop, 20000, pos, 1, &n);
    if (!err && (n != 0 || spw_ps_client_outstanding(spw_trainer_loop_client(loop)) != 0 ||
                 spw_trainer_loop_topic(loop) != NULL))
        err = SPW_ERR_STATE;
    if (err && !k->err)
        k->err = err;
    k->checkpoints++;
    return SPW_OK;
}

/* Pipelined pulls with a checkpoint every 5 steps: each checkpoint cancels the prefetched pull
 * and pulls again, every example is trained once, every pull the loop waited for completed, and
 * the model learns. */
static void test_trn_loop_zmq_prefetch_with_checkpoints(void **state)
{
    (void)state;
    char shards[600];
    start_servers(shards, sizeof(shards));
    struct spw_trainer_loop_conf c = zmq_conf(shards);
    struct ck k = {.every = 5};
    struct spw_trainer_hooks hooks = {.opaque = &k, .after_step = after_step};
    char errstr[512];
    spw_trainer_loop_t *loop = spw_trainer_loop_new(&c, &hooks, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("loop: %s", errstr);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    struct spw_ps_client_stats cs;
    spw_ps_client_get_stats(spw_trainer_loop_client(loop), &cs);
    struct spw_pv_report r;
    spw_trainer_loop_report(loop, &r);
    print_message("zmq prefetch: %llu examples, %llu micro-batches, %llu pulls completed, %d "
                  "checkpoints, window logloss %.4f (const %.4f)\n",
                  (unsigned long long)st.examples, (unsigned long long)st.micro_batches,
                  (unsigned long long)cs.pulls, k.checkpoints, r.window.logloss, r.const_window);
    assert_int_equal(k.err, SPW_OK);
    assert_int_equal(st.examples, GEN_N);
    assert_int_equal(k.seen, GEN_N);
    assert_int_equal(st.dropped_examples, 0);
    assert_int_equal(k.checkpoints, (int)(st.steps / 5));
    assert_true(k.checkpoints >= 20);
    /* cancelled prefetches are not completed pulls: one completed pull per micro-batch */
    assert_int_equal(cs.pulls, st.micro_batches);
    assert_int_equal(cs.pushes_acked, cs.pushes);
    assert_int_equal(cs.rows_applied, cs.rows_pushed);
    assert_true(r.window.logloss < r.const_window);
    spw_trainer_loop_destroy(loop);
    stop_servers();
}

/* One run of the whole file against fresh shards; its progressive-validation report. */
static void run_once(bool prefetch, bool fresh, struct spw_pv_report *r,
                     struct spw_ps_client_stats *cs)
{
    char shards[600];
    start_servers(shards, sizeof(shards));
    struct spw_trainer_loop_conf c = zmq_conf(shards);
    c.prefetch = prefetch;
    c.fresh_reads = fresh;
    char errstr[512];
    spw_trainer_loop_t *loop = spw_trainer_loop_new(&c, NULL, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("loop: %s", errstr);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    spw_trainer_loop_report(loop, r);
    spw_ps_client_get_stats(spw_trainer_loop_client(loop), cs);
    spw_trainer_loop_destroy(loop);
    stop_servers();
}

/* Fresh reads: with prefetch, the acknowledgements of each push write the pushed rows back into
 * the micro-batch pulled before it, so one trainer computes with exactly the rows it would read
 * without prefetch (pulled after its push): every prediction, hence the progressive logloss, is
 * the same to the last bit (the shard's inverse penalty then sees tau 0 in both). Without fresh
 * reads the prefetched rows are a step stale and the run differs. */
static void test_trn_loop_zmq_fresh_reads_equal_no_prefetch(void **state)
{
    (void)state;
    struct spw_pv_report seq, fresh, stale;
    struct spw_ps_client_stats cs_seq, cs_fresh, cs_stale;
    run_once(false, true, &seq, &cs_seq);
    run_once(true, true, &fresh, &cs_fresh);
    run_once(true, false, &stale, &cs_stale);
    print_message("cumulative logloss: no prefetch %.9f, prefetch + fresh reads %.9f (%llu rows "
                  "echoed), prefetch without %.9f\n",
                  seq.cumulative.logloss, fresh.cumulative.logloss,
                  (unsigned long long)cs_fresh.rows_echoed, stale.cumulative.logloss);
    assert_true(cs_fresh.rows_echoed > 0);
    assert_int_equal(cs_seq.rows_echoed, 0);
    assert_int_equal(cs_stale.rows_echoed, 0);
    assert_true(fresh.cumulative.logloss == seq.cumulative.logloss);
    assert_true(fresh.window.logloss == seq.window.logloss);
    assert_true(stale.cumulative.logloss != seq.cumulative.logloss);
}

static void *stop_later(void *arg)
{
    (void)arg;
    spw_time_sleep_ms(600);
    spw_signal_request_stop();
    return NULL;
}

/* Nobody listens: the hello to the shards (their dim, before the first pull) never completes. A
 * stop request ends the run promptly and cleanly, nothing read, nothing trained. */
static void test_trn_loop_zmq_stop_while_shards_unreachable(void **state)
{
    (void)state;
    char shards[128];
    snprintf(shards, sizeof(shards), "tcp://127.0.0.1:1");
    struct spw_trainer_loop_conf c = zmq_conf(shards);
    c.client.shards = shards;
    c.grace_ms = 1000;
    char errstr[512];
    spw_trainer_loop_t *loop = spw_trainer_loop_new(&c, NULL, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("loop: %s", errstr);
    spw_signal_reset();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stop_later, NULL), 0);
    uint64_t t0 = spw_time_mono_ms();
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    uint64_t took = spw_time_mono_ms() - t0;
    pthread_join(t, NULL);
    spw_signal_reset();
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    print_message("stopped after %llu ms: %llu trained, %llu dropped\n", (unsigned long long)took,
                  (unsigned long long)st.examples, (unsigned long long)st.dropped_examples);
    assert_int_equal(st.examples, 0);
    assert_int_equal(st.steps, 0);
    /* the input is read only once the shards answered */
    assert_int_equal(st.dropped_examples, 0);
    assert_true(took < 10000);
    spw_trainer_loop_destroy(loop);
}

/* Every step tagged as a two-phase step that is never committed (no coordinator): the shards hold
 * what waits for a commit. trainer.sync.rows = all: every row of every step is held; dense: only
 * the bias is held, at most one row per step, and the embedding rows apply at once, so the model
 * learns. */
static spw_err_t tag_every_step(void *opaque, spw_trainer_loop_t *loop, uint64_t step)
{
    (void)opaque;
    spw_trainer_loop_set_step(loop, step + 1);
    return SPW_OK;
}

static void run_tagged(bool dense_only, struct spw_pv_report *r, struct spw_ps_client_stats *cs,
                       struct spw_trainer_loop_stats *st)
{
    char shards[600];
    start_servers(shards, sizeof(shards));
    struct spw_trainer_loop_conf c = zmq_conf(shards);
    c.sync_dense_only = dense_only;
    c.params.compress = false; /* no residual flush at the end: what applies is the steps' */
    struct spw_trainer_hooks hooks = {.before_step = tag_every_step};
    char errstr[512];
    spw_trainer_loop_t *loop = spw_trainer_loop_new(&c, &hooks, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("loop: %s", errstr);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    spw_trainer_loop_report(loop, r);
    spw_ps_client_get_stats(spw_trainer_loop_client(loop), cs);
    spw_trainer_loop_get_stats(loop, st);
    spw_trainer_loop_destroy(loop);
    stop_servers();
}

static void test_trn_loop_zmq_sync_rows_dense(void **state)
{
    (void)state;
    struct spw_pv_report all, dense;
    struct spw_ps_client_stats cs_all, cs_dense;
    struct spw_trainer_loop_stats st_all, st_dense;
    run_tagged(false, &all, &cs_all, &st_all);
    run_tagged(true, &dense, &cs_dense, &st_dense);
    print_message("rows pushed/applied: all %llu/%llu, dense %llu/%llu over %llu steps; window "
                  "logloss all %.4f dense %.4f (constant %.4f)\n",
                  (unsigned long long)cs_all.rows_pushed, (unsigned long long)cs_all.rows_applied,
                  (unsigned long long)cs_dense.rows_pushed,
                  (unsigned long long)cs_dense.rows_applied, (unsigned long long)st_dense.steps,
                  all.window.logloss, dense.window.logloss, dense.const_window);
    assert_true(st_all.steps > 50);
    /* all: every row is held */
    assert_int_equal(cs_all.rows_applied, 0);
    assert_true(cs_all.rows_pushed > 0);
    /* dense: only the bias (one row per tagged step at most) is held */
    uint64_t held = cs_dense.rows_pushed - cs_dense.rows_applied;
    assert_true(held > 0);
    assert_true(held <= st_dense.steps);
    assert_int_equal(cs_dense.pushes_acked, cs_dense.pushes);
    assert_true(dense.window.logloss < dense.const_window);
    assert_true(dense.window.logloss < all.window.logloss);
}

/* A proxy in front of one shard that holds the second pull it forwards (the first is the
 * client's hello) for hold_ms: a shard that answers the trainer's hello, then restarts.
 * Single-frame messages both ways (the client's). */
struct slow_proxy {
    const char *back;
    uint64_t hold_ms;
    char front[256];
    atomic_int ready, stop, held;
    int pulls;
    pthread_t thread;
};

static void *slow_proxy_main(void *arg)
{
    struct slow_proxy *px = arg;
    void *ctx = zmq_ctx_new();
    void *fr = zmq_socket(ctx, ZMQ_ROUTER), *bk = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(fr, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(bk, ZMQ_LINGER, &linger, sizeof(linger));
    size_t len = sizeof(px->front);
    if (zmq_bind(fr, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(fr, ZMQ_LAST_ENDPOINT, px->front, &len) != 0 ||
        zmq_connect(bk, px->back) != 0)
        atomic_store(&px->ready, -1);
    else
        atomic_store(&px->ready, 1);
    uint8_t id[256], buf[1 << 20];
    int id_len = 0;
    spw_arena_t *arena = spw_arena_new(1 << 16, 64u << 20);
    while (atomic_load(&px->ready) == 1 && !atomic_load(&px->stop)) {
        zmq_pollitem_t it[2] = {{fr, 0, ZMQ_POLLIN, 0}, {bk, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, 50) <= 0)
            continue;
        if (it[0].revents & ZMQ_POLLIN) {
            id_len = zmq_recv(fr, id, sizeof(id), 0);
            int n = zmq_recv(fr, buf, sizeof(buf), 0);
            Sparrow__Request *req = NULL;
            spw_arena_reset(arena);
            if (n > 0 && !atomic_load(&px->held) &&
                spw_wire_unpack_request(buf, (size_t)n, sizeof(buf), arena, &req) == SPW_OK &&
                req->body_case == SPARROW__REQUEST__BODY_PULL && ++px->pulls == 2) {
                atomic_store(&px->held, 1);
                spw_time_sleep_ms(px->hold_ms);
            }
            if (n >= 0)
                zmq_send(bk, buf, (size_t)n, 0);
        }
        if ((it[1].revents & ZMQ_POLLIN) && id_len > 0) {
            int n = zmq_recv(bk, buf, sizeof(buf), 0);
            if (n >= 0) {
                zmq_send(fr, id, (size_t)id_len, ZMQ_SNDMORE);
                zmq_send(fr, buf, (size_t)n, 0);
            }
        }
    }
    spw_arena_destroy(arena);
    zmq_close(fr);
    zmq_close(bk);
    zmq_ctx_term(ctx);
    return NULL;
}

/* A deep model's start checks the shards' dense blocks with one pull, after the hello. Each shard,
 * behind a proxy, holds that pull (its second) for 1.5 s, three of the loop's 500 ms waits: the
 * trainer waits for it (it once gave up after the first wait, "timed out", and exited) and then
 * trains. */
static void test_trn_loop_zmq_deep_start_waits_for_a_slow_shard(void **state)
{
    (void)state;
    char shards[600];
    start_servers(shards, sizeof(shards));
    static struct slow_proxy px[SHARDS];
    char via[600] = "";
    char *next = shards;
    for (int i = 0; i < SHARDS; i++) {
        memset(&px[i], 0, sizeof(px[i]));
        px[i].back = strsep(&next, ",");
        assert_non_null(px[i].back);
        px[i].hold_ms = 1500;
        assert_int_equal(pthread_create(&px[i].thread, NULL, slow_proxy_main, &px[i]), 0);
        while (atomic_load(&px[i].ready) == 0)
            spw_time_sleep_ms(5);
        assert_int_equal(atomic_load(&px[i].ready), 1);
        size_t len = strlen(via);
        snprintf(via + len, sizeof(via) - len, "%s%s", i ? "," : "", px[i].front);
    }
    struct spw_trainer_loop_conf c = zmq_conf(via);
    struct spw_model_field fields[SPW_TRN_MAX_FIELDS];
    uint32_t n_fields = 0;
    char errstr[512];
    assert_int_equal(spw_model_fields_parse("I1,C1", fields, &n_fields, errstr, sizeof(errstr)),
                     SPW_OK);
    if (spw_model_init_deep(&c.params.model, SPW_MODEL_DEEPFM, 4, fields, n_fields, "8", 0, 0.0f, 1,
                            errstr, sizeof(errstr)) != SPW_OK)
        fail_msg("model: %s", errstr);
    c.params.topk.dim = c.params.model.dim;
    c.max_examples = 2048;
    spw_trainer_loop_t *loop = spw_trainer_loop_new(&c, NULL, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("loop: %s", errstr);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    spw_trainer_loop_destroy(loop);
    for (int i = 0; i < SHARDS; i++) {
        atomic_store(&px[i].stop, 1);
        pthread_join(px[i].thread, NULL);
        assert_int_equal(atomic_load(&px[i].held), 1);
    }
    stop_servers();
    assert_int_equal(st.examples, 2048);
}

SPW_TEST_MAIN_GROUP(setup, teardown, test_trn_loop_zmq_prefetch_with_checkpoints,
                    test_trn_loop_zmq_fresh_reads_equal_no_prefetch,
                    test_trn_loop_zmq_stop_while_shards_unreachable,
                    test_trn_loop_zmq_sync_rows_dense,
                    test_trn_loop_zmq_deep_start_waits_for_a_slow_shard)
