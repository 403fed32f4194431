/* Unit tests of the shard's ZeroMQ server, run in a thread of the test: pull/push round trips,
 * duplicate seqs, error replies for malformed, truncated, oversized and wrong-version frames
 * while a well-behaved client is served, wrong shard, checkpoint and CurveZMQ rejection. */
#include "test_main.h" /* cmocka and what it needs first */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_int.h"
#include "sparrow/fs.h"
#include "sparrow/hash.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"
#include "sparrow/wire.h"

enum { DIM = 4 };

struct env {
    char dir[64];
    spw_ps_server_t *srv;
    pthread_t thread;
    void *ctx;
    void *client;
    char endpoint[256];
    char server_pub[41];
    char client_pub[41], client_sec[41];
};

static void *run_server(void *arg)
{
    spw_ps_server_run(arg);
    return NULL;
}

static struct spw_ps_server_conf server_conf(struct env *e, const char *dir)
{
    struct spw_ps_server_conf c = {0};
    c.listen = "tcp://127.0.0.1:*";
    c.shards = 1;
    c.max_frame = 64 * 1024;
    c.data_dir = dir;
    c.restore = true;
    c.store.dim = DIM;
    spw_ps_optim_conf_default(&c.store.optim);
    c.store.optim.kind = SPW_PS_SGD;
    c.store.optim.lr = 1.0f;
    c.store.optim.init_scale = 0.0f;
    c.store.penalty.kind = SPW_PS_PENALTY_NONE;
    c.store.memory_bytes = 4u << 20;
    (void)e;
    return c;
}

static void start(struct env *e, const struct spw_ps_server_conf *c)
{
    char err[512] = "";
    spw_signal_reset();
    e->srv = spw_ps_server_new(c, err, sizeof(err));
    if (!e->srv)
        fail_msg("server: %s", err);
    snprintf(e->endpoint, sizeof(e->endpoint), "%s", spw_ps_server_endpoint(e->srv));
    assert_int_equal(pthread_create(&e->thread, NULL, run_server, e->srv), 0);
    e->ctx = zmq_ctx_new();
}

static void *connect_dealer(struct env *e, const char *server_pub, const char *pub, const char *sec)
{
    void *s = zmq_socket(e->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 3000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout, sizeof(timeout));
    if (server_pub) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    assert_int_equal(zmq_connect(s, e->endpoint), 0);
    return s;
}

static void stop(struct env *e)
{
    spw_signal_request_stop();
    pthread_join(e->thread, NULL);
    spw_ps_server_destroy(e->srv);
    if (e->client)
        zmq_close(e->client);
    e->client = NULL;
    zmq_ctx_term(e->ctx);
    spw_signal_reset();
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_ps_server.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    spw_fs_remove_tree(e->dir);
    free(e);
    return 0;
}

/* Sends one frame. A DEALER whose CURVE handshake was refused may have no peer to queue it to:
 * the send then gives up after the socket's ZMQ_SNDTIMEO (the frame is dropped and the reply's
 * wait times out) instead of blocking the test for good. */
static void send_raw(void *s, const void *data, size_t len)
{
    if (zmq_send(s, data, len, 0) < 0)
        assert_int_equal(zmq_errno(), EAGAIN);
}

/* Receives one reply; NULL on timeout. Decoded through arena. */
static Sparrow__Reply *recv_reply(void *s, spw_arena_t *arena)
{
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, s, 0) < 0) {
        zmq_msg_close(&msg);
        return NULL;
    }
    Sparrow__Reply *r = NULL;
    spw_err_t err =
        spw_wire_unpack_reply(zmq_msg_data(&msg), zmq_msg_size(&msg), 1u << 26, arena, &r);
    zmq_msg_close(&msg);
    assert_int_equal(err, SPW_OK);
    return r;
}

static void send_request(void *s, Sparrow__Request *req)
{
    struct spw_wire_buf buf = {0};
    assert_int_equal(spw_wire_pack(&req->base, &buf), SPW_OK);
    send_raw(s, buf.data, buf.len);
    free(buf.data);
}

static Sparrow__Reply *pull(void *s, spw_arena_t *arena, const uint64_t *keys, size_t n,
                            uint64_t id)
{
    Sparrow__PullRequest pr = SPARROW__PULL_REQUEST__INIT;
    pr.has_keys = true;
    pr.keys.data = (uint8_t *)keys;
    pr.keys.len = n * 8;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = 1;
    req.request_id = id;
    req.body_case = SPARROW__REQUEST__BODY_PULL;
    req.pull = &pr;
    send_request(s, &req);
    return recv_reply(s, arena);
}

/* The recovery generation push() sends (0: none). */
static uint64_t push_generation;
/* Two-phase fields push() adds when set (0: an immediate push), and an echo of pushed rows. */
static uint64_t push_step;
static uint32_t push_step_examples;
static const uint32_t *push_echo;
static size_t push_n_echo;
/* PushRequest.pulled push() adds when set (push_pulled_len bytes). */
static const float *push_pulled;
static size_t push_pulled_len;

static Sparrow__Reply *push(void *s, spw_arena_t *arena, uint32_t trainer, uint64_t epoch,
                            uint64_t seq, const uint64_t *keys, size_t n, const float *grads,
                            const uint32_t *versions)
{
    Sparrow__PushRequest p = SPARROW__PUSH_REQUEST__INIT;
    p.has_generation = push_generation != 0;
    p.generation = push_generation;
    p.has_trainer_id = p.has_epoch = p.has_seq = p.has_dim = true;
    p.trainer_id = trainer;
    p.epoch = epoch;
    p.seq = seq;
    p.dim = DIM;
    p.has_keys = p.has_grads = p.has_versions = true;
    p.keys.data = (uint8_t *)keys;
    p.keys.len = n * 8;
    p.grads.data = (uint8_t *)grads;
    p.grads.len = n * DIM * 4;
    p.versions.data = (uint8_t *)versions;
    p.versions.len = n * 4;
    p.has_step = p.has_step_examples = push_step != 0;
    p.step = push_step;
    p.step_examples = push_step_examples;
    p.has_echo = push_n_echo > 0;
    p.echo.data = (uint8_t *)push_echo;
    p.echo.len = push_n_echo * 4;
    p.has_pulled = push_pulled != NULL;
    p.pulled.data = (uint8_t *)push_pulled;
    p.pulled.len = push_pulled ? push_pulled_len : 0;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = 1;
    req.request_id = seq;
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = &p;
    send_request(s, &req);
    return recv_reply(s, arena);
}

static Sparrow__Reply *commit(void *s, spw_arena_t *arena, uint64_t step, const uint32_t *ids,
                              size_t n_ids, uint64_t examples)
{
    Sparrow__CommitRequest cr = SPARROW__COMMIT_REQUEST__INIT;
    cr.has_step = cr.has_examples = true;
    cr.step = step;
    cr.examples = examples;
    cr.trainer_ids = (uint32_t *)ids;
    cr.n_trainer_ids = n_ids;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = 1;
    req.request_id = 1000 + step;
    req.body_case = SPARROW__REQUEST__BODY_COMMIT;
    req.commit = &cr;
    send_request(s, &req);
    return recv_reply(s, arena);
}

/* RestoreRequest(epoch, generation; 0: none) and its reply. */
static Sparrow__Reply *restore(void *s, spw_arena_t *arena, uint64_t epoch, uint64_t generation)
{
    Sparrow__RestoreRequest rr = SPARROW__RESTORE_REQUEST__INIT;
    rr.has_epoch = true;
    rr.epoch = epoch;
    rr.has_generation = generation != 0;
    rr.generation = generation;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = 1;
    req.request_id = 99;
    req.body_case = SPARROW__REQUEST__BODY_RESTORE;
    req.restore = &rr;
    send_request(s, &req);
    return recv_reply(s, arena);
}

static float pull_one(void *s, spw_arena_t *arena, uint64_t key, uint32_t *version)
{
    Sparrow__Reply *r = pull(s, arena, &key, 1, 7);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_PULL);
    float v;
    memcpy(&v, r->pull->values.data, sizeof(v));
    if (version)
        memcpy(version, r->pull->versions.data, sizeof(*version));
    return v;
}

static void test_ps_server_pull_push_dedup(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t keys[2] = {10, 20};
    float g[2 * DIM] = {1, 1, 1, 1, 2, 2, 2, 2};
    uint32_t v[2] = {0, 0};
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 5, keys, 2, g, v);
    assert_non_null(r);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_PUSH);
    assert_int_equal(r->push->applied, 2);
    assert_false(r->push->duplicate);
    /* The same seq again: acknowledged as duplicate, not applied. */
    r = push(e->client, arena, 1, 1, 5, keys, 2, g, v);
    assert_true(r->push->has_duplicate && r->push->duplicate);
    /* An older seq inside the window, not yet seen: applied. */
    r = push(e->client, arena, 1, 1, 3, keys, 1, g, v);
    assert_int_equal(r->push->applied, 1);
    assert_false(r->push->duplicate);
    r = push(e->client, arena, 1, 1, 3, keys, 1, g, v);
    assert_true(r->push->duplicate);
    /* Another trainer's seq 5 is its own. */
    r = push(e->client, arena, 2, 1, 5, keys + 1, 1, g + DIM, v);
    assert_int_equal(r->push->applied, 1);
    r = pull(e->client, arena, keys, 2, 77);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_PULL);
    assert_int_equal(r->request_id, 77);
    assert_int_equal(r->pull->dim, DIM);
    assert_int_equal(r->pull->values.len, 2 * DIM * 4);
    float vals[2 * DIM];
    uint32_t vers[2];
    memcpy(vals, r->pull->values.data, sizeof(vals));
    memcpy(vers, r->pull->versions.data, sizeof(vers));
    assert_float_equal(vals[0], -2.0, 1e-6);   /* two applied pushes of 1 on key 10 */
    assert_float_equal(vals[DIM], -4.0, 1e-6); /* 2 (seq 5) + 2 (trainer 2) on key 20 */
    assert_int_equal(vers[0], 2);
    assert_int_equal(vers[1], 2);
    spw_arena_destroy(arena);
    stop(e);
}

/* A restore of generation G fences pushes of older generations (sent before the restore, still
 * in flight): acknowledged as fenced, not applied; pushes without a generation (trainers without
 * a coordinator) and of G or newer are applied. */
static void test_ps_server_restore_fences_older_generations(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t key = 10;
    float g[DIM] = {1, 1, 1, 1};
    uint32_t v = 0;
    push_generation = 5;
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 1, &key, 1, g, &v);
    assert_int_equal(r->push->applied, 1);
    assert_false(r->push->fenced);
    r = restore(e->client, arena, 0, 6); /* back to empty, generation 6 */
    assert_false(r->has_error && r->error != 0);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_RESTORE);
    /* generation 5's late push: fenced */
    r = push(e->client, arena, 1, 1, 2, &key, 1, g, &v);
    assert_true(r->push->has_fenced && r->push->fenced);
    assert_int_equal(r->push->applied, 0);
    r = pull(e->client, arena, &key, 1, 7);
    float val;
    memcpy(&val, r->pull->values.data, sizeof(val));
    assert_float_equal(val, 0.0, 1e-6); /* the restored (empty) state: init scale 0 */
    /* generation 6 and an unversioned push: applied */
    push_generation = 6;
    r = push(e->client, arena, 1, 2, 1, &key, 1, g, &v);
    assert_int_equal(r->push->applied, 1);
    assert_false(r->push->fenced);
    push_generation = 0;
    r = push(e->client, arena, 2, 1, 1, &key, 1, g, &v);
    assert_int_equal(r->push->applied, 1);
    spw_arena_destroy(arena);
    stop(e);
}

/* Two-phase steps: pushes tagged with a step are held (not visible to pulls) until the step's
 * commit, which applies each row once with the example-weighted mean of the listed trainers'
 * gradients and bumps its version once; an unlisted trainer's contribution is discarded, a push
 * for a committed step is late, and a restore drops what is pending. */
static void test_ps_server_two_phase_steps(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t k10 = 10, k20 = 20;
    float g1[DIM] = {1, 1, 1, 1}, g3[DIM] = {3, 3, 3, 3}, g8[DIM] = {8, 8, 8, 8};
    uint32_t v = 0;
    push_step = 1;
    push_step_examples = 10; /* trainer 1: mean gradient 1 over 10 examples */
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 1, &k10, 1, g1, &v);
    assert_true(r->push->has_pending && r->push->pending);
    assert_int_equal(r->push->applied, 0);
    push_step_examples = 30; /* trainer 2: mean 3 over 30 */
    r = push(e->client, arena, 2, 1, 1, &k10, 1, g3, &v);
    assert_true(r->push->pending);
    r = push(e->client, arena, 3, 1, 1, &k20, 1, g8, &v); /* trainer 3: not listed below */
    assert_true(r->push->pending);
    /* nothing is visible before the commit */
    uint32_t ver;
    assert_float_equal(pull_one(e->client, arena, k10, &ver), 0.0, 1e-6);
    assert_int_equal(ver, 0);
    /* a resend of trainer 1's push is a duplicate, not a second contribution */
    push_step_examples = 10;
    r = push(e->client, arena, 1, 1, 1, &k10, 1, g1, &v);
    assert_true(r->push->duplicate);
    const uint32_t ids[] = {1, 2};
    r = commit(e->client, arena, 1, ids, 2, 40);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_COMMIT);
    assert_int_equal(r->commit->rows, 1);
    assert_int_equal(r->commit->contributions, 2);
    assert_int_equal(r->commit->discarded, 1);
    /* (10*1 + 30*3) / 40 = 2.5, applied once (SGD, lr 1) */
    assert_float_equal(pull_one(e->client, arena, k10, &ver), -2.5, 1e-6);
    assert_int_equal(ver, 1);
    assert_float_equal(pull_one(e->client, arena, k20, &ver), 0.0, 1e-6);
    assert_int_equal(ver, 0);
    /* a push for step 1 after its commit: late */
    r = push(e->client, arena, 3, 1, 2, &k20, 1, g8, &v);
    assert_true(r->push->has_late && r->push->late);
    /* the coordinator's weight covers trainers with no key on this shard: 10 here, 40 in all */
    push_step = 2;
    r = push(e->client, arena, 1, 1, 2, &k20, 1, g8, &v);
    assert_true(r->push->pending);
    r = commit(e->client, arena, 2, ids, 2, 40);
    assert_int_equal(r->commit->rows, 1);
    assert_float_equal(pull_one(e->client, arena, k20, NULL), -2.0, 1e-6); /* 10*8/40 */
    /* a restore discards an open step whole */
    push_step = 3;
    r = push(e->client, arena, 1, 1, 3, &k10, 1, g8, &v);
    assert_true(r->push->pending);
    r = restore(e->client, arena, 0, 0);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_RESTORE);
    r = commit(e->client, arena, 3, ids, 2, 10);
    assert_int_equal(r->commit->rows, 0);
    assert_int_equal(r->commit->contributions, 0);
    assert_float_equal(pull_one(e->client, arena, k10, NULL), 0.0, 1e-6);
    push_step = 0;
    push_step_examples = 0;
    spw_arena_destroy(arena);
    stop(e);
}

/* A commit of few rows after one of many: the aggregation table of the first must not leak into
 * the second (a bug lost the counter row's sums in sync runs whose steps varied in size). */
static void test_ps_server_commit_after_larger_commit(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    enum { MANY = 200 };
    uint64_t keys[MANY];
    float g[MANY * DIM];
    uint32_t v[MANY] = {0};
    for (int i = 0; i < MANY; i++) {
        keys[i] = 10 + (uint64_t)i;
        for (int d = 0; d < DIM; d++)
            g[i * DIM + d] = 1.0f;
    }
    const uint32_t ids[] = {1};
    push_step = 1;
    push_step_examples = 1;
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 1, keys, MANY, g, v);
    assert_true(r->push->pending);
    r = commit(e->client, arena, 1, ids, 1, 1);
    assert_int_equal(r->commit->rows, MANY);
    for (uint64_t step = 2; step <= 4; step++) {
        push_step = step;
        r = push(e->client, arena, 1, 1, step, &keys[MANY - 1], 1, g, v);
        assert_true(r->push->pending);
        r = commit(e->client, arena, step, ids, 1, 1);
        assert_int_equal(r->commit->rows, 1);
    }
    uint32_t ver;
    assert_float_equal(pull_one(e->client, arena, keys[MANY - 1], &ver), -4.0, 1e-6);
    assert_int_equal(ver, 4);
    push_step = 0;
    push_step_examples = 0;
    spw_arena_destroy(arena);
    stop(e);
}

/* An immediate push with an echo returns the named rows as they are after the push. */
static void test_ps_server_push_echo(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t keys[3] = {10, 20, 30};
    float g[3 * DIM] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    uint32_t v[3] = {0, 0, 0};
    const uint32_t echo[2] = {0, 2};
    push_echo = echo;
    push_n_echo = 2;
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 1, keys, 3, g, v);
    push_echo = NULL;
    push_n_echo = 0;
    assert_int_equal(r->push->applied, 3);
    assert_int_equal(r->push->echo_versions.len, 2 * 4);
    assert_int_equal(r->push->echo_values.len, 2 * DIM * 4);
    float vals[2 * DIM];
    uint32_t vers[2];
    memcpy(vals, r->push->echo_values.data, sizeof(vals));
    memcpy(vers, r->push->echo_versions.data, sizeof(vers));
    assert_float_equal(vals[0], -1.0, 1e-6);
    assert_float_equal(vals[DIM], -3.0, 1e-6);
    assert_int_equal(vers[0], 1);
    assert_int_equal(vers[1], 1);
    /* an echo index out of range is malformed */
    const uint32_t bad[1] = {3};
    push_echo = bad;
    push_n_echo = 1;
    r = push(e->client, arena, 1, 1, 2, keys, 3, g, v);
    push_echo = NULL;
    push_n_echo = 0;
    assert_true(r->has_error);
    assert_int_equal(r->error, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    spw_arena_destroy(arena);
    stop(e);
}

/* Penalty dc through the server: a stale push carrying its pulled values is corrected, one
 * without is applied as it is, a malformed pulled block is answered MALFORMED; the class
 * histogram sees each pushed row. */
static void test_ps_server_push_pulled_dc(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    c.store.optim.lr = 0.5f;
    assert_int_equal(spw_ps_penalty_parse("dc:0.5", &c.store.penalty), SPW_OK);
    spw_metrics_t *reg = spw_metrics_new();
    assert_non_null(reg);
    c.metrics = reg;
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t key = 5;
    uint32_t v0 = 0;
    /* fresh: w = 0 - 0.5 * (-2, 4, 0, 0) = (1, -2, 0, 0), version 1 */
    float g0[DIM] = {-2, 4, 0, 0};
    assert_int_equal(push(e->client, arena, 1, 1, 1, &key, 1, g0, &v0)->push->applied, 1);
    /* stale (tau 1), pulled at version 0 = (0, 0, 0, 0): g' = g + 0.5 g^2 (w_now - w_pulled)
     * = (1 + 0.5, 0.5 + 0.5 * 0.25 * -2, 0, 0) = (1.5, 0.25, 0, 0); w = (0.25, -2.125, 0, 0) */
    float g1[DIM] = {1, 0.5f, 0, 0};
    const float pulled[DIM] = {0, 0, 0, 0};
    push_pulled = pulled;
    push_pulled_len = sizeof(pulled);
    assert_int_equal(push(e->client, arena, 1, 1, 2, &key, 1, g1, &v0)->push->applied, 1);
    push_pulled = NULL;
    uint32_t ver = 0;
    assert_float_equal(pull_one(e->client, arena, key, &ver), 0.25, 1e-6);
    assert_int_equal(ver, 2);
    /* without pulled values: applied uncorrected, w0 = 0.25 - 0.5 * 1 */
    float g2[DIM] = {1, 1, 1, 1};
    assert_int_equal(push(e->client, arena, 1, 1, 3, &key, 1, g2, &v0)->push->applied, 1);
    assert_float_equal(pull_one(e->client, arena, key, NULL), -0.25, 1e-6);
    /* a pulled block of the wrong length never reaches the store */
    push_pulled = pulled;
    push_pulled_len = sizeof(pulled) - 4;
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 4, &key, 1, g2, &v0);
    push_pulled = NULL;
    assert_true(r->has_error);
    assert_int_equal(r->error, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    assert_float_equal(pull_one(e->client, arena, key, NULL), -0.25, 1e-6);
    size_t len = 0;
    char *text = spw_metrics_render(reg, &len);
    assert_non_null(text);
    assert_non_null(strstr(text, "sparrow_ps_staleness_class_count{class=\"rest\"} 3"));
    assert_non_null(strstr(text, "sparrow_ps_staleness_class_count{class=\"bias\"} 0"));
    assert_non_null(strstr(text, "sparrow_ps_top_count_threshold"));
    free(text);
    spw_arena_destroy(arena);
    stop(e);
    spw_metrics_destroy(reg);
}

static void expect_error(void *s, spw_arena_t *arena, Sparrow__ErrorCode code)
{
    Sparrow__Reply *r = recv_reply(s, arena);
    assert_non_null(r);
    assert_true(r->has_error);
    assert_int_equal(r->error, code);
    assert_non_null(r->error_message);
}

static void test_ps_server_bad_frames_answered(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    void *bad = connect_dealer(e, NULL, NULL, NULL);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t key = 1;
    float g[DIM] = {1, 1, 1, 1};
    uint32_t v = 0;

    /* garbage */
    send_raw(bad, "\xff\xff\xff\xff\xff", 5);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* a well-behaved client is served in between */
    assert_non_null(pull(e->client, arena, &key, 1, 1));
    /* truncated: a valid push cut in half */
    Sparrow__PushRequest p = SPARROW__PUSH_REQUEST__INIT;
    p.has_trainer_id = p.has_seq = p.has_dim = p.has_keys = p.has_grads = p.has_versions = true;
    p.dim = DIM;
    p.keys.data = (uint8_t *)&key;
    p.keys.len = 8;
    p.grads.data = (uint8_t *)g;
    p.grads.len = sizeof(g);
    p.versions.data = (uint8_t *)&v;
    p.versions.len = 4;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = true;
    req.version = 1;
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = &p;
    struct spw_wire_buf buf = {0};
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    send_raw(bad, buf.data, buf.len / 2);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* inconsistent blocks: grads for 2 rows, 1 key */
    float g2[2 * DIM] = {0};
    p.grads.data = (uint8_t *)g2;
    p.grads.len = sizeof(g2);
    buf.len = 0;
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    send_raw(bad, buf.data, buf.len);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* wrong dim */
    p.grads.data = (uint8_t *)g;
    p.grads.len = 2 * sizeof(float);
    p.dim = 2;
    buf.len = 0;
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    send_raw(bad, buf.data, buf.len);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* wrong version */
    p.dim = DIM;
    p.grads.len = sizeof(g);
    req.version = 7;
    buf.len = 0;
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    send_raw(bad, buf.data, buf.len);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_VERSION);
    /* no version at all */
    req.has_version = false;
    buf.len = 0;
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    send_raw(bad, buf.data, buf.len);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_VERSION);
    /* empty frame */
    send_raw(bad, "", 0);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_VERSION);
    /* oversized, just above the limit: TOO_BIG reply */
    size_t big = c.max_frame + 100;
    uint8_t *huge = calloc(1, big);
    send_raw(bad, huge, big);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_TOO_BIG);
    /* far above the limit: ZeroMQ drops the connection; the server goes on */
    void *worse = connect_dealer(e, NULL, NULL, NULL);
    uint8_t *huger = calloc(1, c.max_frame * 3);
    send_raw(worse, huger, c.max_frame * 3);
    /* three frames after the identity */
    zmq_send(bad, "a", 1, ZMQ_SNDMORE);
    zmq_send(bad, "b", 1, ZMQ_SNDMORE);
    zmq_send(bad, "c", 1, 0);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* request without a body */
    Sparrow__Request empty = SPARROW__REQUEST__INIT;
    empty.has_version = true;
    empty.version = 1;
    buf.len = 0;
    assert_int_equal(spw_wire_pack(&empty.base, &buf), SPW_OK);
    send_raw(bad, buf.data, buf.len);
    expect_error(bad, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* the well-behaved client is still served, and nothing bad was applied */
    Sparrow__Reply *r = push(e->client, arena, 9, 1, 1, &key, 1, g, &v);
    assert_int_equal(r->push->applied, 1);
    r = pull(e->client, arena, &key, 1, 2);
    uint32_t ver;
    memcpy(&ver, r->pull->versions.data, 4);
    assert_int_equal(ver, 1);
    free(huge);
    free(huger);
    free(buf.data);
    zmq_close(worse);
    zmq_close(bad);
    spw_arena_destroy(arena);
    stop(e);
}

/* CheckpointRequest(epoch) through the protocol; the reply's path. */
static void checkpoint_rpc(void *s, spw_arena_t *arena, uint64_t epoch)
{
    Sparrow__CheckpointRequest cr = SPARROW__CHECKPOINT_REQUEST__INIT;
    cr.has_epoch = true;
    cr.epoch = epoch;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = true;
    req.version = 1;
    req.body_case = SPARROW__REQUEST__BODY_CHECKPOINT;
    req.checkpoint = &cr;
    send_request(s, &req);
    Sparrow__Reply *r = recv_reply(s, arena);
    assert_false(r->has_error && r->error != 0);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_CHECKPOINT);
}

/*
 * The de-duplication windows and the admission sketch are part of a checkpoint. A shard that
 * restarts from epoch 1 acknowledges as duplicates the pushes it had applied by then (a trainer
 * resending them after the crash), applies those that came after (lost with the crash), and
 * admits a key on the same push count as before; so does a RestoreRequest of the live shard.
 */
static void test_ps_server_checkpoint_keeps_dedup_and_sketch(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    c.store.admit_min_count = 3;
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    const uint64_t hot = 10, cold = 20;
    float g[DIM] = {1, 1, 1, 1};
    uint32_t v = 0;
    /* seqs 1..3 admit hot (applied at the third), seq 4 sees cold once */
    for (uint64_t seq = 1; seq <= 3; seq++) {
        Sparrow__Reply *r = push(e->client, arena, 1, 1, seq, &hot, 1, g, &v);
        assert_int_equal(r->push->applied, seq == 3 ? 1 : 0);
    }
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 4, &cold, 1, g, &v);
    assert_int_equal(r->push->applied, 0);
    checkpoint_rpc(e->client, arena, 1);
    r = push(e->client, arena, 1, 1, 5, &hot, 1, g, &v); /* after the epoch */
    assert_int_equal(r->push->applied, 1);
    spw_arena_destroy(arena);
    stop(e);

    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: a restart from epoch 1; pass 1: a RestoreRequest(1) of the live shard, which
         * saw seq 5 (and seq 6 below) since */
        if (pass == 0)
            start(e, &c);
        e->client = connect_dealer(e, NULL, NULL, NULL);
        arena = spw_arena_new(0, 0);
        if (pass == 1) {
            r = restore(e->client, arena, 1, 0);
            assert_int_equal(r->body_case, SPARROW__REPLY__BODY_RESTORE);
        }
        assert_float_equal(pull_one(e->client, arena, hot, NULL), -1.0, 1e-6);
        /* seq 3 was applied by epoch 1: a duplicate, not applied again */
        r = push(e->client, arena, 1, 1, 3, &hot, 1, g, &v);
        assert_true(r->push->has_duplicate && r->push->duplicate);
        assert_int_equal(r->push->applied, 0);
        assert_float_equal(pull_one(e->client, arena, hot, NULL), -1.0, 1e-6);
        /* seq 5 came after it: applied */
        r = push(e->client, arena, 1, 1, 5, &hot, 1, g, &v);
        assert_false(r->push->duplicate);
        assert_int_equal(r->push->applied, 1);
        assert_float_equal(pull_one(e->client, arena, hot, NULL), -2.0, 1e-6);
        /* cold was seen once by epoch 1: its second push is not enough, the third admits it, as
         * on the shard that never stopped */
        r = push(e->client, arena, 1, 1, 6, &cold, 1, g, &v);
        assert_int_equal(r->push->applied, 0);
        r = push(e->client, arena, 1, 1, 7, &cold, 1, g, &v);
        assert_int_equal(r->push->applied, 1);
        spw_arena_destroy(arena);
        zmq_close(e->client);
        e->client = NULL;
    }
    stop(e);
}

/* pserver.dim=auto: the dim of a checkpoint restored at start; with no database, requests wait
 * (UNAVAILABLE) but stats, an empty restore and a checkpoint's restore (its dim) are served. */
static void test_ps_server_auto_dim(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    const uint64_t key = 10;
    float g[DIM] = {1, 1, 1, 1};
    uint32_t v = 0;
    Sparrow__Reply *r = push(e->client, arena, 1, 1, 1, &key, 1, g, &v);
    assert_int_equal(r->push->applied, 1);
    checkpoint_rpc(e->client, arena, 1);
    stop(e);

    /* restarted with auto: the checkpoint's dim */
    c.store.dim = 0;
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    assert_float_equal(pull_one(e->client, arena, key, NULL), -1.0, 1e-6);
    stop(e);

    /* no database (not restored): waiting for a dim */
    char db[128];
    snprintf(db, sizeof(db), "%s/db", e->dir);
    spw_fs_remove_tree(db);
    c.restore = false;
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    r = pull(e->client, arena, &key, 1, 7);
    assert_int_equal(r->error, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE);
    assert_non_null(strstr(r->error_message, "pserver.dim=auto"));
    r = restore(e->client, arena, 0, 0);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_RESTORE);
    r = pull(e->client, arena, &key, 1, 8);
    assert_int_equal(r->error, SPARROW__ERROR_CODE__ERROR_UNAVAILABLE); /* still no dim */
    r = restore(e->client, arena, 1, 0); /* the coordinator's recovery: the checkpoint's dim */
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_RESTORE);
    assert_float_equal(pull_one(e->client, arena, key, NULL), -1.0, 1e-6);
    spw_arena_destroy(arena);
    stop(e);
}

static void test_ps_server_wrong_shard_and_rpc_checkpoint(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    c.shards = 4;
    c.store.shard = 1;
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t mine = 0, other = 0;
    for (uint64_t k = 1; !mine || !other; k++) {
        if (spw_hash_shard(k, 4) == 1)
            mine = mine ? mine : k;
        else
            other = other ? other : k;
    }
    Sparrow__Reply *r = pull(e->client, arena, &other, 1, 1);
    assert_true(r->has_error);
    assert_int_equal(r->error, SPARROW__ERROR_CODE__ERROR_WRONG_SHARD);
    float g[DIM] = {1, 2, 3, 4};
    uint32_t v = 0;
    r = push(e->client, arena, 1, 1, 1, &mine, 1, g, &v);
    assert_int_equal(r->push->applied, 1);
    /* checkpoint through the protocol */
    Sparrow__CheckpointRequest cr = SPARROW__CHECKPOINT_REQUEST__INIT;
    cr.has_epoch = true;
    cr.epoch = 3;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = true;
    req.version = 1;
    req.body_case = SPARROW__REQUEST__BODY_CHECKPOINT;
    req.checkpoint = &cr;
    send_request(e->client, &req);
    r = recv_reply(e->client, arena);
    assert_false(r->has_error && r->error != 0);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_CHECKPOINT);
    assert_non_null(strstr(r->checkpoint->path, "checkpoints/3/shard-1"));
    assert_int_equal(spw_ps_checkpoint_verify(r->checkpoint->path, NULL), SPW_OK);
    /* a directory chosen by the peer is refused */
    cr.epoch = 4;
    cr.dir = "/etc";
    send_request(e->client, &req);
    expect_error(e->client, arena, SPARROW__ERROR_CODE__ERROR_MALFORMED);
    /* stats and health */
    Sparrow__StatsRequest sreq = SPARROW__STATS_REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_STATS;
    req.stats = &sreq;
    send_request(e->client, &req);
    r = recv_reply(e->client, arena);
    assert_int_equal(r->body_case, SPARROW__REPLY__BODY_STATS);
    assert_int_equal(r->stats->shard, 1);
    assert_int_equal(r->stats->epoch, 3);
    Sparrow__HealthRequest hreq = SPARROW__HEALTH_REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_HEALTH;
    req.health = &hreq;
    send_request(e->client, &req);
    r = recv_reply(e->client, arena);
    assert_true(r->health->ready);
    spw_arena_destroy(arena);
    stop(e);

    /* A restart restores epoch 3 with the pushed row. */
    start(e, &c);
    e->client = connect_dealer(e, NULL, NULL, NULL);
    arena = spw_arena_new(0, 0);
    r = pull(e->client, arena, &mine, 1, 1);
    float vals[DIM];
    memcpy(vals, r->pull->values.data, sizeof(vals));
    assert_float_equal(vals[3], -4.0, 1e-6);
    spw_arena_destroy(arena);
    stop(e);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_ps_server_curve_rejects_unknown_clients(void **state)
{
    struct env *e = *state;
    char server_pub[41], server_sec[41], good_pub[41], good_sec[41], bad_pub[41], bad_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(good_pub, good_sec), 0);
    assert_int_equal(zmq_curve_keypair(bad_pub, bad_sec), 0);
    char keyfile[128], allowfile[128], text[256];
    snprintf(keyfile, sizeof(keyfile), "%s/server.key", e->dir);
    snprintf(allowfile, sizeof(allowfile), "%s/allowed", e->dir);
    snprintf(text, sizeof(text), "# server secret\n%s\n", server_sec);
    write_file(keyfile, text);
    snprintf(text, sizeof(text), "# trainers\n%s\n", good_pub);
    write_file(allowfile, text);
    char data[128];
    snprintf(data, sizeof(data), "%s/data", e->dir);
    struct spw_ps_server_conf c = server_conf(e, data);
    c.curve_secret_key_file = keyfile;
    c.curve_allowed_clients_file = allowfile;
    start(e, &c);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t key = 5;
    float g[DIM] = {1, 1, 1, 1};
    uint32_t v = 0;
    /* an unlisted key, and plain text, get nothing */
    void *bad = connect_dealer(e, server_pub, bad_pub, bad_sec);
    assert_null(push(bad, arena, 1, 1, 1, &key, 1, g, &v));
    void *plain = connect_dealer(e, NULL, NULL, NULL);
    assert_null(pull(plain, arena, &key, 1, 1));
    /* the listed client is served, and the refused push was not applied */
    e->client = connect_dealer(e, server_pub, good_pub, good_sec);
    Sparrow__Reply *r = pull(e->client, arena, &key, 1, 1);
    assert_non_null(r);
    uint32_t ver;
    memcpy(&ver, r->pull->versions.data, 4);
    assert_int_equal(ver, 0);
    zmq_close(bad);
    zmq_close(plain);
    spw_arena_destroy(arena);
    stop(e);
}

static void test_ps_server_req_socket_envelope(void **state)
{
    struct env *e = *state;
    struct spw_ps_server_conf c = server_conf(e, e->dir);
    start(e, &c);
    e->client = zmq_socket(e->ctx, ZMQ_REQ);
    int linger = 0, timeout = 3000;
    zmq_setsockopt(e->client, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(e->client, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(zmq_connect(e->client, e->endpoint), 0);
    spw_arena_t *arena = spw_arena_new(0, 0);
    uint64_t key = 3;
    Sparrow__Reply *r = pull(e->client, arena, &key, 1, 9);
    assert_non_null(r);
    assert_int_equal(r->request_id, 9);
    spw_arena_destroy(arena);
    stop(e);
}

SPW_TEST_MAIN_EACH(setup, teardown, test_ps_server_pull_push_dedup,
                   test_ps_server_bad_frames_answered,
                   test_ps_server_restore_fences_older_generations,
                   test_ps_server_checkpoint_keeps_dedup_and_sketch,
                   test_ps_server_wrong_shard_and_rpc_checkpoint,
                   test_ps_server_curve_rejects_unknown_clients, test_ps_server_req_socket_envelope,
                   test_ps_server_two_phase_steps, test_ps_server_push_echo,
                   test_ps_server_push_pulled_dc, test_ps_server_commit_after_larger_commit,
                   test_ps_server_auto_dim)
