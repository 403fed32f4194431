/* Unit tests of the PS client's ZeroMQ transport against two spw_ps_server shards running in
 * threads: slicing, caller order, the push window, resend after a lost ack, flush, shard restart,
 * fp16, error replies, identity reuse, CURVE, stop requests and metrics. */
#include "test_main.h" /* cmocka and what it needs first */

#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "sparrow/hash.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

enum { DIM = 4, SHARDS = 2 };

struct env;

struct srv {
    struct env *e;
    uint32_t index;
    char dir[128];
    char listen[256]; /* "tcp://127.0.0.1:*" until the first start, then the bound endpoint */
    uint64_t delay_ms;
    pthread_t thread;
    bool running;
    int ready; /* 0 starting, 1 serving, -1 failed */
    char err[256];
};

struct env {
    char root[64];
    struct srv srv[SHARDS];
    bool curve;
    bool auto_dim; /* the shards start with pserver.dim=auto */
    char server_secret_file[160], allowed_file[160];
    char curve_server_file[160], curve_client_file[160];
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static struct spw_ps_server_conf server_conf(struct srv *sv)
{
    struct spw_ps_server_conf c = {0};
    c.listen = sv->listen;
    c.shards = SHARDS;
    c.max_frame = 1u << 20;
    c.data_dir = sv->dir;
    c.restore = false; /* keep the live DB across a restart */
    c.store.shard = sv->index;
    c.store.dim = sv->e->auto_dim ? 0 : DIM;
    spw_ps_optim_conf_default(&c.store.optim);
    c.store.optim.kind = SPW_PS_SGD;
    c.store.optim.lr = 1.0f;
    c.store.optim.init_scale = 0.0f;
    c.store.penalty.kind = SPW_PS_PENALTY_NONE;
    c.store.memory_bytes = 4u << 20;
    if (sv->e->curve) {
        c.curve_secret_key_file = sv->e->server_secret_file;
        c.curve_allowed_clients_file = sv->e->allowed_file;
    }
    return c;
}

static void *server_main(void *arg)
{
    struct srv *sv = arg;
    struct env *e = sv->e;
    if (sv->delay_ms)
        spw_time_sleep_ms(sv->delay_ms);
    spw_ps_server_t *srv = NULL;
    if (!spw_signal_stop_requested()) {
        struct spw_ps_server_conf c = server_conf(sv);
        srv = spw_ps_server_new(&c, sv->err, sizeof(sv->err));
    }
    pthread_mutex_lock(&e->mu);
    if (srv)
        snprintf(sv->listen, sizeof(sv->listen), "%s", spw_ps_server_endpoint(srv));
    sv->ready = srv ? 1 : -1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (srv) {
        spw_ps_server_run(srv);
        spw_ps_server_destroy(srv);
    }
    return NULL;
}

/* Starts both shards (after delay_ms, in their threads); with wait, returns once they serve. */
static void start_servers(struct env *e, uint64_t delay_ms, bool wait)
{
    for (int i = 0; i < SHARDS; i++) {
        struct srv *sv = &e->srv[i];
        sv->delay_ms = delay_ms;
        sv->ready = 0;
        assert_int_equal(pthread_create(&sv->thread, NULL, server_main, sv), 0);
        sv->running = true;
    }
    if (!wait)
        return;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < SHARDS; i++) {
        while (e->srv[i].ready == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->srv[i].ready < 0)
            fail_msg("server %d: %s", i, e->srv[i].err);
    }
    pthread_mutex_unlock(&e->mu);
}

static void stop_servers(struct env *e)
{
    spw_signal_request_stop();
    for (int i = 0; i < SHARDS; i++) {
        if (e->srv[i].running)
            pthread_join(e->srv[i].thread, NULL);
        e->srv[i].running = false;
    }
    spw_signal_reset();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->root, sizeof(e->root), "/tmp/test_psc_zmq.XXXXXX");
    if (!mkdtemp(e->root))
        return -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    for (int i = 0; i < SHARDS; i++) {
        e->srv[i].e = e;
        e->srv[i].index = (uint32_t)i;
        snprintf(e->srv[i].dir, sizeof(e->srv[i].dir), "%s/shard-%d", e->root, i);
        snprintf(e->srv[i].listen, sizeof(e->srv[i].listen), "tcp://127.0.0.1:*");
    }
    spw_signal_reset();
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    stop_servers(e);
    nftw(e->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    return 0;
}

static spw_ps_client_t *new_client_dim(struct env *e, uint32_t dim, uint32_t window,
                                       uint32_t timeout_ms, uint32_t trainer, uint64_t epoch,
                                       bool swap, spw_metrics_t *metrics)
{
    char shards[600];
    int a = swap ? 1 : 0;
    snprintf(shards, sizeof(shards), "%s, %s", e->srv[a].listen, e->srv[1 - a].listen);
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = dim;
    conf.shards = shards;
    conf.trainer_id = trainer;
    conf.epoch = epoch;
    conf.push_window = window;
    conf.push_timeout_ms = timeout_ms;
    conf.pull_timeout_ms = timeout_ms;
    conf.max_frame = 1u << 20;
    conf.metrics = metrics;
    if (e->curve) {
        conf.curve_server_key_file = e->curve_server_file;
        conf.curve_client_key_file = e->curve_client_file;
    }
    char err[512] = "";
    spw_ps_client_t *c = spw_ps_client_new(&conf, err, sizeof(err));
    if (!c)
        fail_msg("client: %s", err);
    return c;
}

static spw_ps_client_t *new_client(struct env *e, uint32_t window, uint32_t timeout_ms)
{
    return new_client_dim(e, DIM, window, timeout_ms, 1, 1, false, NULL);
}

static uint64_t key_of(uint64_t i)
{
    return spw_hash_mix64(i * 7919 + 13);
}

/* A gradient row every float of which is exactly representable (sums stay exact). */
static void grad_of(uint64_t key, float scale, float *g)
{
    for (int d = 0; d < DIM; d++)
        g[d] = scale * (float)((key >> (8 * d)) % 16) * 0.25f;
}

static spw_err_t push_keys(spw_ps_client_t *c, const uint64_t *keys, size_t n, float scale,
                           const uint32_t *versions)
{
    float *g = malloc(n * DIM * sizeof(float));
    for (size_t i = 0; i < n; i++)
        grad_of(keys[i], scale, g + i * DIM);
    struct spw_ps_push p = {.n = n, .keys = keys, .versions = versions, .grads = g};
    p.max_event_time_ms = 1700000000000;
    p.examples = (uint32_t)n;
    spw_err_t err = spw_ps_client_push(c, &p, NULL);
    free(g);
    return err;
}

/* Pulls keys and checks each row equals -total_scale × grad (SGD lr 1 from zero). */
static void expect_rows(spw_ps_client_t *c, const uint64_t *keys, size_t n, float total_scale,
                        uint32_t version)
{
    float *rows = malloc(n * DIM * sizeof(float));
    uint32_t *vers = malloc(n * sizeof(uint32_t));
    uint64_t token = 0;
    assert_int_equal(spw_ps_client_pull_start(c, keys, n, rows, vers, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 20000), SPW_OK);
    for (size_t i = 0; i < n; i++) {
        float g[DIM];
        grad_of(keys[i], total_scale, g);
        for (int d = 0; d < DIM; d++)
            if (rows[i * DIM + d] != -g[d])
                fail_msg("key %zu dim %d: %g, want %g", i, d, rows[i * DIM + d], -g[d]);
        assert_int_equal(vers[i], version);
    }
    free(rows);
    free(vers);
}

static void test_psc_zmq_sliced_in_caller_order(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client(e, 8, 2000);
    enum { N = 300 };
    uint64_t keys[N];
    for (int i = 0; i < N; i++)
        keys[i] = key_of((uint64_t)i);
    assert_int_equal(push_keys(c, keys, N, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_OK);
    /* Pull in another order with duplicates. */
    enum { M = 2 * N };
    uint64_t pk[M];
    for (int i = 0; i < M; i++)
        pk[i] = keys[(i * 37 + 11) % N];
    expect_rows(c, pk, M, 1.0f, 1);
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_int_equal(st.pushes_acked, 1);
    assert_int_equal(st.rows_applied, N);
    assert_int_equal(st.rows_pulled, N); /* unique per shard */
    assert_int_equal(st.error_replies, 0);
    spw_ps_client_destroy(c);
    stop_servers(e);

    /* Each shard's database holds its own keys only. */
    for (uint32_t s = 0; s < SHARDS; s++) {
        struct spw_ps_server_conf sc = server_conf(&e->srv[s]);
        char db[200];
        snprintf(db, sizeof(db), "%s/db", e->srv[s].dir);
        sc.store.db_path = db;
        char err[256];
        spw_ps_store_t *store = spw_ps_store_open(&sc.store, err, sizeof(err));
        if (!store)
            fail_msg("open: %s", err);
        struct spw_ps_row_copy *row = malloc(sizeof(*row) + 64 * sizeof(float));
        size_t mine = 0;
        for (int i = 0; i < N; i++) {
            spw_err_t rc = spw_ps_store_get_row(store, keys[i], row);
            if (spw_hash_shard(keys[i], SHARDS) == s) {
                assert_int_equal(rc, SPW_OK);
                mine++;
            } else {
                assert_int_equal(rc, SPW_ERR_NOT_FOUND);
            }
        }
        assert_true(mine > N / 4); /* both shards got a fair share */
        free(row);
        spw_ps_store_close(store);
    }
}

static void test_psc_zmq_window_bound_and_flush(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true); /* learn the endpoints */
    stop_servers(e);
    spw_ps_client_t *c = new_client(e, 4, 100);
    enum { PUSHES = 6 };
    uint64_t keys[PUSHES][3];
    for (int p = 0; p < PUSHES; p++)
        for (int j = 0; j < 3; j++)
            keys[p][j] = key_of(100 + (uint64_t)p * 3 + (uint64_t)j);
    /* Shards down: four pushes fill the window, the fifth has to wait. */
    for (int p = 0; p < 4; p++)
        assert_int_equal(push_keys(c, keys[p], 3, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_outstanding(c), 4);
    assert_int_equal(spw_ps_client_wait_window(c, 50), SPW_ERR_TIMEOUT);
    assert_int_equal(spw_ps_client_flush(c, 150), SPW_ERR_TIMEOUT);
    assert_int_equal(spw_ps_client_outstanding(c), 4);
    /* The shards come up later; the blocked push goes through then. */
    start_servers(e, 300, false);
    assert_int_equal(push_keys(c, keys[4], 3, 1.0f, NULL), SPW_OK);
    assert_int_equal(push_keys(c, keys[5], 3, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, -1), SPW_OK);
    assert_int_equal(spw_ps_client_outstanding(c), 0);
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_int_equal(st.window_max, 4);
    assert_int_equal(st.pushes_acked, PUSHES);
    assert_true(st.timeouts >= 1);
    assert_true(st.reconnects >= 1);
    /* Every push applied exactly once, whatever was resent. */
    for (int p = 0; p < PUSHES; p++)
        expect_rows(c, keys[p], 3, 1.0f, 1);
    spw_ps_client_destroy(c);
}

static void test_psc_zmq_lost_ack_applied_once(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client(e, 4, 100);
    uint64_t keys[8];
    for (int i = 0; i < 8; i++)
        keys[i] = key_of(500 + (uint64_t)i);
    spw_psc__debug_drop_acks(c, 1);
    assert_int_equal(push_keys(c, keys, 8, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_OK);
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_true(st.resends >= 1);
    assert_true(st.reconnects >= 1);
    assert_true(st.duplicate_acks >=
                1); /* more when a slow machine times out the other shard too */
    assert_int_equal(st.pushes_acked, 1);
    expect_rows(c, keys, 8, 1.0f, 1);
    spw_ps_client_destroy(c);
}

static void test_psc_zmq_restart_recovers(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client(e, 8, 100);
    enum { N = 40 };
    uint64_t keys[N];
    for (int i = 0; i < N; i++)
        keys[i] = key_of(900 + (uint64_t)i);
    assert_int_equal(push_keys(c, keys, N, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_OK);
    stop_servers(e);
    /* Both shards are down: a push and a pull wait (resending, reconnecting) until they are
     * back on the same endpoints. */
    assert_int_equal(push_keys(c, keys, N, 2.0f, NULL), SPW_OK);
    float rows[N * DIM];
    uint32_t vers[N];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, keys, N, rows, vers, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 300), SPW_ERR_TIMEOUT);
    start_servers(e, 300, false);
    assert_int_equal(spw_ps_client_pull_wait(c, token, -1), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, -1), SPW_OK);
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_true(st.timeouts >= 2);
    assert_true(st.reconnects >= 2);
    assert_int_equal(st.error_replies, 0);
    expect_rows(c, keys, N, 3.0f, 2); /* both pushes applied once each */
    spw_ps_client_destroy(c);
}

static void test_psc_zmq_fp16_rounded(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client(e, 4, 2000);
    enum { N = 16 };
    uint64_t keys[N];
    float g[N * DIM];
    for (int i = 0; i < N; i++) {
        keys[i] = key_of(2000 + (uint64_t)i);
        for (int d = 0; d < DIM; d++)
            g[i * DIM + d] = 0.1f * (float)(i + 1) + 1.0f / (float)(3 + d);
    }
    struct spw_ps_push p = {.n = N, .keys = keys, .grads = g, .fp16 = true};
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    /* The same values given as halves by the caller. */
    uint16_t h[N * DIM];
    spw_wire_f32_to_f16_n(g, h, (size_t)N * DIM);
    struct spw_ps_push q = {.n = N, .keys = keys, .grads_f16 = h, .fp16 = true};
    assert_int_equal(spw_ps_client_push(c, &q, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_OK);
    float rows[N * DIM];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, keys, N, rows, NULL, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 20000), SPW_OK);
    int differs = 0;
    for (int i = 0; i < N * DIM; i++) {
        float r = spw_wire_f16_to_f32(h[i]);
        assert_true(rows[i] == -r - r);
        differs += r != g[i];
    }
    assert_true(differs > 0); /* the rounding was real */
    spw_ps_client_destroy(c);
}

static void test_psc_zmq_wrong_dim_is_sticky(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client_dim(e, DIM - 1, 4, 2000, 1, 1, false, NULL);
    uint64_t k = key_of(1);
    float g[DIM] = {1, 1, 1, 1};
    struct spw_ps_push p = {.n = 1, .keys = &k, .grads = g};
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_ERR_RPC);
    assert_non_null(strstr(spw_ps_client_errstr(c), "malformed"));
    assert_non_null(strstr(spw_ps_client_errstr(c), "dim"));
    float rows[DIM];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, &k, 1, rows, NULL, &token), SPW_ERR_RPC);
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_ERR_RPC);
    spw_ps_client_destroy(c);

    /* A pull reply of the wrong width is refused too. */
    c = new_client_dim(e, DIM + 1, 4, 2000, 1, 1, false, NULL);
    float rows5[DIM + 1];
    assert_int_equal(spw_ps_client_pull_start(c, &k, 1, rows5, NULL, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 20000), SPW_ERR_RPC);
    assert_non_null(strstr(spw_ps_client_errstr(c), "dim"));
    spw_ps_client_destroy(c);
}

/* The hello: every shard's dim before the first pull, a mismatch named by shard (not sticky);
 * shards of pserver.dim=auto take the first client's dim, keep it for a client of another, and
 * restart with the dim of their database. */
static void test_psc_zmq_hello_dims(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    uint32_t dims[SHARDS] = {0}, bad = 99;
    spw_ps_client_t *c = new_client_dim(e, DIM, 4, 2000, 1, 1, false, NULL);
    assert_int_equal(spw_ps_client_hello(c, 20000, dims, &bad), SPW_OK);
    assert_int_equal(dims[0], DIM);
    assert_int_equal(dims[1], DIM);
    assert_int_equal(bad, 99);
    spw_ps_client_destroy(c);
    c = new_client_dim(e, DIM + 2, 4, 2000, 1, 2, true, NULL);
    assert_int_equal(spw_ps_client_hello(c, 20000, dims, &bad), SPW_ERR_INVALID);
    assert_int_equal(bad, 0);
    assert_int_equal(dims[0], DIM);
    assert_string_equal(spw_ps_client_endpoint(c, 0), e->srv[1].listen); /* swapped order */
    assert_string_equal(spw_ps_client_errstr(c), "");                    /* not sticky */
    spw_ps_client_destroy(c);
    stop_servers(e);

    /* auto over the databases just written: their dim */
    e->auto_dim = true;
    start_servers(e, 0, true);
    c = new_client_dim(e, DIM + 2, 4, 2000, 1, 3, false, NULL);
    assert_int_equal(spw_ps_client_hello(c, 20000, dims, &bad), SPW_ERR_INVALID);
    assert_int_equal(dims[0], DIM);
    assert_int_equal(dims[1], DIM);
    spw_ps_client_destroy(c);
    stop_servers(e);

    /* auto over empty shards: the first client's dim, then fixed */
    nftw(e->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    assert_int_equal(mkdir(e->root, 0700), 0);
    start_servers(e, 0, true);
    c = new_client_dim(e, DIM + 2, 4, 2000, 1, 4, false, NULL);
    assert_int_equal(spw_ps_client_hello(c, 20000, dims, &bad), SPW_OK);
    assert_int_equal(dims[0], DIM + 2);
    assert_int_equal(dims[1], DIM + 2);
    uint64_t k = key_of(1);
    float rows[DIM + 2];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, &k, 1, rows, NULL, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 20000), SPW_OK);
    spw_ps_client_destroy(c);
    c = new_client_dim(e, DIM, 4, 2000, 1, 5, false, NULL);
    assert_int_equal(spw_ps_client_hello(c, 20000, dims, &bad), SPW_ERR_INVALID);
    assert_int_equal(dims[1], DIM + 2);
    spw_ps_client_destroy(c);
    e->auto_dim = false;
}

static void test_psc_zmq_wrong_shard_order_is_sticky(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client_dim(e, DIM, 4, 2000, 1, 1, true, NULL);
    uint64_t keys[16];
    for (int i = 0; i < 16; i++)
        keys[i] = key_of(3000 + (uint64_t)i);
    float rows[16 * DIM];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, keys, 16, rows, NULL, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 20000), SPW_ERR_RPC);
    assert_non_null(strstr(spw_ps_client_errstr(c), "wrong_shard"));
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_true(st.error_replies >= 1);
    spw_ps_client_destroy(c);
}

static void test_psc_zmq_reused_identity_detected(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    uint64_t keys[4];
    for (int i = 0; i < 4; i++)
        keys[i] = key_of(4000 + (uint64_t)i);
    spw_ps_client_t *a = new_client_dim(e, DIM, 4, 2000, 7, 5, false, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(push_keys(a, keys, 4, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(a, 20000), SPW_OK);
    spw_ps_client_destroy(a);
    /* Same trainer and epoch: seq 1 was applied for the first client already. */
    spw_ps_client_t *b = new_client_dim(e, DIM, 4, 2000, 7, 5, false, NULL);
    assert_int_equal(push_keys(b, keys, 4, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(b, 20000), SPW_ERR_STATE);
    assert_non_null(strstr(spw_ps_client_errstr(b), "fresh epoch"));
    spw_ps_client_destroy(b);
    /* A fresh epoch is fine. */
    spw_ps_client_t *d = new_client_dim(e, DIM, 4, 2000, 7, 6, false, NULL);
    assert_int_equal(push_keys(d, keys, 4, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(d, 20000), SPW_OK);
    expect_rows(d, keys, 4, 4.0f, 4);
    spw_ps_client_destroy(d);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
}

static void test_psc_zmq_curve(void **state)
{
    struct env *e = *state;
    char spub[41], ssec[41], cpub[41], csec[41], text[256];
    assert_int_equal(zmq_curve_keypair(spub, ssec), 0);
    assert_int_equal(zmq_curve_keypair(cpub, csec), 0);
    e->curve = true;
    snprintf(e->server_secret_file, sizeof(e->server_secret_file), "%s/server.key", e->root);
    snprintf(e->allowed_file, sizeof(e->allowed_file), "%s/allowed", e->root);
    snprintf(e->curve_server_file, sizeof(e->curve_server_file), "%s/server.pub", e->root);
    snprintf(e->curve_client_file, sizeof(e->curve_client_file), "%s/client.key", e->root);
    write_file(e->server_secret_file, ssec);
    snprintf(text, sizeof(text), "%s\n", cpub);
    write_file(e->allowed_file, text);
    snprintf(text, sizeof(text), "metadata\ncurve\n    public-key = \"%s\"\n", spub);
    write_file(e->curve_server_file, text);
    snprintf(text, sizeof(text),
             "# client certificate\ncurve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
             cpub, csec);
    write_file(e->curve_client_file, text);
    start_servers(e, 0, true);
    spw_ps_client_t *c = new_client(e, 4, 2000);
    uint64_t keys[10];
    for (int i = 0; i < 10; i++)
        keys[i] = key_of(5000 + (uint64_t)i);
    assert_int_equal(push_keys(c, keys, 10, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_OK);
    expect_rows(c, keys, 10, 1.0f, 1);
    spw_ps_client_destroy(c);

    /* A key the shards do not allow: no reply ever comes; the failed handshakes are reported
     * and counted while the client waits. */
    char opub[41], osec[41];
    assert_int_equal(zmq_curve_keypair(opub, osec), 0);
    snprintf(text, sizeof(text), "%s\n", osec);
    write_file(e->curve_client_file, text);
    c = new_client(e, 4, 100);
    assert_int_equal(push_keys(c, keys, 10, 1.0f, NULL), SPW_OK);
    struct spw_ps_client_stats st = {0};
    for (int i = 0; i < 100 && st.auth_failures == 0; i++) {
        assert_int_equal(spw_ps_client_flush(c, 100), SPW_ERR_TIMEOUT);
        spw_ps_client_get_stats(c, &st);
    }
    assert_true(st.auth_failures >= 1);
    assert_int_equal(st.pushes_acked, 0);
    spw_ps_client_destroy(c);

    /* A client key file without a usable key is refused at creation. */
    write_file(e->curve_client_file, "not a key\n");
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = DIM;
    conf.shards = e->srv[0].listen;
    conf.curve_server_key_file = e->curve_server_file;
    conf.curve_client_key_file = e->curve_client_file;
    char err[512] = "";
    assert_null(spw_ps_client_new(&conf, err, sizeof(err)));
    assert_non_null(strstr(err, "secret"));
}

static void test_psc_zmq_stop_interrupts_waits(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    stop_servers(e);
    spw_ps_client_t *c = new_client(e, 1, 100);
    uint64_t k = key_of(6000);
    assert_int_equal(push_keys(c, &k, 1, 1.0f, NULL), SPW_OK);
    spw_signal_request_stop();
    uint64_t t0 = spw_time_mono_ms();
    assert_int_equal(spw_ps_client_flush(c, -1), SPW_ERR_STOPPED);
    assert_int_equal(push_keys(c, &k, 1, 1.0f, NULL), SPW_ERR_STOPPED); /* window full */
    float row[DIM];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, &k, 1, row, NULL, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, -1), SPW_ERR_STOPPED);
    spw_ps_client_pull_cancel(c, token);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 0), SPW_ERR_NOT_FOUND);
    assert_true(spw_time_mono_ms() - t0 < 5000);
    /* drain is for shutdown: the stop flag does not cut it short, its deadline does. */
    assert_int_equal(spw_ps_client_drain(c, 200), SPW_ERR_TIMEOUT);
    assert_int_equal(spw_ps_client_outstanding(c), 1);
    spw_signal_reset();
    spw_ps_client_destroy(c);
}

/* The value of a sample line "series value" (series includes the trailing space). */
static double metric_value(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, len) == 0)
            return strtod(p + len, NULL);
    return -1;
}

static void test_psc_zmq_metrics(void **state)
{
    struct env *e = *state;
    start_servers(e, 0, true);
    spw_metrics_t *reg = spw_metrics_new();
    spw_ps_client_t *c = new_client_dim(e, DIM, 4, 100, 1, 1, false, reg);
    uint64_t keys[20];
    for (int i = 0; i < 20; i++)
        keys[i] = key_of(7000 + (uint64_t)i);
    spw_psc__debug_drop_acks(c, 1);
    assert_int_equal(push_keys(c, keys, 20, 1.0f, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 20000), SPW_OK);
    expect_rows(c, keys, 20, 1.0f, 1);
    size_t len;
    char *text = spw_metrics_render(reg, &len);
    assert_non_null(text);
    assert_true(metric_value(text, "sparrow_trainer_ps_rows_total{op=\"push\"} ") == 20);
    assert_true(metric_value(text, "sparrow_trainer_ps_rows_total{op=\"pull\"} ") == 20);
    assert_true(metric_value(text, "sparrow_trainer_ps_bytes_total{op=\"push\"} ") > 20 * 28);
    assert_true(metric_value(text, "sparrow_trainer_ps_bytes_total{op=\"pull\"} ") >= 20 * 20);
    assert_true(metric_value(text, "sparrow_trainer_ps_resends_total ") >= 1);
    assert_true(metric_value(text, "sparrow_trainer_ps_reconnects_total ") >= 1);
    assert_true(metric_value(text, "sparrow_trainer_ps_duplicate_acks_total ") >= 1);
    assert_true(metric_value(text, "sparrow_trainer_ps_push_window ") == 0);
    assert_true(metric_value(text, "sparrow_trainer_ps_pull_latency_seconds_count ") == 1);
    free(text);
    spw_ps_client_destroy(c);
    spw_metrics_destroy(reg);
}

/* A fake shard: a ROUTER socket driven by the test itself. */
struct fake {
    void *ctx, *sock;
    char endpoint[256];
    zmq_msg_t ident;
    spw_arena_t *arena;
};

static void fake_open(struct fake *f)
{
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_ROUTER);
    int linger = 0, timeout = 5000;
    zmq_setsockopt(f->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(f->sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(zmq_bind(f->sock, "tcp://127.0.0.1:*"), 0);
    size_t len = sizeof(f->endpoint);
    zmq_getsockopt(f->sock, ZMQ_LAST_ENDPOINT, f->endpoint, &len);
    zmq_msg_init(&f->ident);
    f->arena = spw_arena_new(0, 0);
}

static void fake_close(struct fake *f)
{
    zmq_msg_close(&f->ident);
    zmq_close(f->sock);
    zmq_ctx_term(f->ctx);
    spw_arena_destroy(f->arena);
}

/* Receives one request (blocking up to 5 s; NULL on timeout), remembering who sent it. */
static Sparrow__Request *fake_recv(struct fake *f, int timeout_ms)
{
    zmq_setsockopt(f->sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    zmq_msg_t ident, body;
    zmq_msg_init(&ident);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&ident, f->sock, 0) < 0) {
        zmq_msg_close(&ident);
        zmq_msg_close(&body);
        return NULL;
    }
    assert_true(zmq_msg_more(&ident));
    assert_true(zmq_msg_recv(&body, f->sock, 0) >= 0);
    assert_false(zmq_msg_more(&body));
    zmq_msg_close(&f->ident);
    zmq_msg_init(&f->ident);
    zmq_msg_move(&f->ident, &ident);
    zmq_msg_close(&ident);
    Sparrow__Request *req = NULL;
    assert_int_equal(
        spw_wire_unpack_request(zmq_msg_data(&body), zmq_msg_size(&body), 1u << 20, f->arena, &req),
        SPW_OK);
    zmq_msg_close(&body);
    return req;
}

static void fake_reply(struct fake *f, Sparrow__Reply *reply)
{
    struct spw_wire_buf buf = {0};
    assert_int_equal(spw_wire_pack(&reply->base, &buf), SPW_OK);
    zmq_msg_t id;
    zmq_msg_init(&id);
    zmq_msg_copy(&id, &f->ident);
    assert_true(zmq_msg_send(&id, f->sock, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(f->sock, buf.data, buf.len, 0) >= 0);
    free(buf.data);
}

static void fake_error(struct fake *f, uint64_t request_id, Sparrow__ErrorCode code)
{
    Sparrow__Reply r = SPARROW__REPLY__INIT;
    r.has_version = r.has_request_id = r.has_error = true;
    r.version = 1;
    r.request_id = request_id;
    r.error = code;
    r.error_message = "injected";
    fake_reply(f, &r);
}

static void test_psc_zmq_error_replies(void **state)
{
    (void)state;
    struct fake f;
    fake_open(&f);
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = 2;
    conf.shards = f.endpoint;
    conf.trainer_id = 9;
    conf.epoch = 4;
    conf.push_window = 2;
    conf.push_timeout_ms = 100;
    char err[512];
    spw_ps_client_t *c = spw_ps_client_new(&conf, err, sizeof(err));
    assert_non_null(c);
    /* The request as it travels: keys sorted, rows and versions moved with them. */
    uint64_t keys[3] = {9, 3, 7};
    float g[6] = {9, 90, 3, 30, 7, 70};
    uint32_t v[3] = {19, 13, 17};
    struct spw_ps_push p = {.n = 3, .keys = keys, .grads = g, .versions = v};
    p.max_event_time_ms = 1234;
    p.examples = 5;
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    Sparrow__Request *req = fake_recv(&f, 5000);
    assert_non_null(req);
    assert_int_equal(req->version, 1);
    assert_int_equal(req->body_case, SPARROW__REQUEST__BODY_PUSH);
    const Sparrow__PushRequest *pr = req->push;
    assert_int_equal(pr->trainer_id, 9);
    assert_int_equal(pr->epoch, 4);
    assert_int_equal(pr->seq, 1);
    assert_int_equal(pr->dim, 2);
    assert_int_equal(pr->max_event_time_ms, 1234);
    assert_int_equal(pr->examples, 5);
    assert_false(pr->fp16);
    uint64_t wk[3];
    uint32_t wv[3];
    float wg[6];
    assert_int_equal(spw_wire_block_copy(&pr->keys, 8, 3, wk), SPW_OK);
    assert_int_equal(spw_wire_block_copy(&pr->versions, 4, 3, wv), SPW_OK);
    assert_int_equal(spw_wire_block_copy(&pr->grads, 4, 6, wg), SPW_OK);
    assert_true(wk[0] == 3 && wk[1] == 7 && wk[2] == 9);
    assert_true(wv[0] == 13 && wv[1] == 17 && wv[2] == 19);
    assert_true(wg[0] == 3 && wg[1] == 30 && wg[2] == 7 && wg[3] == 70 && wg[4] == 9);

    /* UNAVAILABLE is transient: counted, and the push is resent after its timeout. */
    fake_error(&f, req->request_id, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE);
    assert_int_equal(spw_ps_client_flush(c, 50), SPW_ERR_TIMEOUT);
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_int_equal(st.error_replies, 1);
    assert_int_equal(spw_ps_client_flush(c, 350), SPW_ERR_TIMEOUT); /* resends in here */
    /* Answer the newest resend (older ones went out on sockets the client has closed). */
    Sparrow__Request *r;
    uint64_t last_id = 0, last_seq = 0;
    int resends = 0;
    while ((r = fake_recv(&f, 200)) != NULL) {
        if (r->body_case == SPARROW__REQUEST__BODY_PUSH && r->push) {
            last_id = r->request_id;
            last_seq = r->push->seq;
            resends++;
        }
    }
    assert_true(resends >= 1);
    assert_int_equal(last_seq, 1);
    Sparrow__PushAck ack = SPARROW__PUSH_ACK__INIT;
    ack.has_seq = ack.has_applied = true;
    ack.seq = 1;
    ack.applied = 3;
    Sparrow__Reply rep = SPARROW__REPLY__INIT;
    rep.has_version = rep.has_request_id = true;
    rep.version = 1;
    rep.request_id = last_id;
    rep.body_case = SPARROW__REPLY__BODY_PUSH;
    rep.push = &ack;
    fake_reply(&f, &rep);
    assert_int_equal(spw_ps_client_flush(c, 5000), SPW_OK);
    spw_ps_client_get_stats(c, &st);
    assert_true(st.resends >= 1);
    assert_int_equal(st.rows_applied, 3);

    /* TOO_BIG is a configuration error: sticky, named. */
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    req = fake_recv(&f, 5000);
    assert_non_null(req);
    assert_int_equal(req->push->seq, 2);
    fake_error(&f, req->request_id, SPARROW__ERROR_CODE__ERROR_TOO_BIG);
    assert_int_equal(spw_ps_client_flush(c, 5000), SPW_ERR_TOO_BIG);
    assert_non_null(strstr(spw_ps_client_errstr(c), "too_big"));
    assert_non_null(strstr(spw_ps_client_errstr(c), "push seq 2"));
    assert_int_equal(spw_ps_client_poll(c), SPW_ERR_TOO_BIG);
    spw_ps_client_destroy(c);

    /* A reply the shard could not attribute (request_id 0), e.g. VERSION, fails the client. */
    c = spw_ps_client_new(&conf, err, sizeof(err));
    assert_non_null(c);
    float rows[3 * 2];
    uint64_t token;
    assert_int_equal(spw_ps_client_pull_start(c, keys, 3, rows, NULL, &token), SPW_OK);
    req = fake_recv(&f, 5000);
    assert_non_null(req);
    assert_int_equal(req->body_case, SPARROW__REQUEST__BODY_PULL);
    assert_int_equal(req->pull->keys.len, 24);
    fake_error(&f, 0, SPARROW__ERROR_CODE__ERROR_VERSION);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 5000), SPW_ERR_VERSION);
    assert_non_null(strstr(spw_ps_client_errstr(c), "version"));
    spw_ps_client_destroy(c);

    /* A frame the client would send above max_frame is refused before sending. */
    conf.max_frame = 1024;
    c = spw_ps_client_new(&conf, err, sizeof(err));
    assert_non_null(c);
    enum { BIG = 100 };
    uint64_t bk[BIG];
    float bg[BIG * 2] = {0};
    for (int i = 0; i < BIG; i++)
        bk[i] = (uint64_t)i;
    struct spw_ps_push big = {.n = BIG, .keys = bk, .grads = bg};
    assert_int_equal(spw_ps_client_push(c, &big, NULL), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_ps_client_outstanding(c), 0);
    assert_int_equal(spw_ps_client_pull_start(c, bk, BIG, bg, NULL, &token), SPW_ERR_TOO_BIG);
    spw_ps_client_destroy(c);
    fake_close(&f);
}

SPW_TEST_MAIN_EACH(setup, teardown, test_psc_zmq_sliced_in_caller_order,
                   test_psc_zmq_window_bound_and_flush, test_psc_zmq_lost_ack_applied_once,
                   test_psc_zmq_restart_recovers, test_psc_zmq_fp16_rounded,
                   test_psc_zmq_wrong_dim_is_sticky, test_psc_zmq_hello_dims,
                   test_psc_zmq_wrong_shard_order_is_sticky, test_psc_zmq_reused_identity_detected,
                   test_psc_zmq_curve, test_psc_zmq_stop_interrupts_waits, test_psc_zmq_metrics,
                   test_psc_zmq_error_replies)
