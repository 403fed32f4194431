/* Unit tests of the trainer's worker loop with file input and in-process shards: it learns toward
 * the Bayes-optimal logloss, equals the single-process reference trainer (rows and progressive
 * validation, with and without compression and accumulation, flushes included), counts and skips
 * malformed records, runs its hooks in step order, stops cleanly, and reads its settings. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/fs.h"
#include "sparrow/hash.h"
#include "sparrow/metrics.h"
#include "sparrow/pserver.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/tools.h"
#include "sparrow/trainer.h"
#include "sparrow/trainer_loop.h"

/* The stream: `sparrow gen --n 200000 --seed 3 --format pb` (test_trn_ref's). */
#define GEN_N    200000
#define GEN_SEED 3
/* Keys of the first KEY_EXAMPLES examples are kept to compare rows. */
#define KEY_EXAMPLES 300u

static char g_pb_path[64];
static uint64_t g_keys[KEY_EXAMPLES * 64];
static size_t g_n_keys;

static int write_gen_file(char *path, size_t path_size, uint64_t n, enum spw_format format,
                          size_t garbage_every, uint64_t *keys, size_t *n_keys)
{
    char errstr[256];
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.n = n;
    gp.seed = GEN_SEED;
    snprintf(path, path_size, "/tmp/test_trn_loop_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "wb");
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    if (!f || !gen)
        return -1;
    struct spw_wire_buf buf = {0};
    for (uint64_t i = 0; i < n; i++) {
        buf.len = 0;
        const struct spw_gen_example *ex = spw_gen_next(gen);
        if (keys && i < KEY_EXAMPLES)
            for (size_t j = 0; j < ex->n_features && *n_keys < (size_t)KEY_EXAMPLES * 64; j++)
                keys[(*n_keys)++] = ex->keys[j];
        if (spw_gen_encode(gen, ex, format, &buf))
            return -1;
        if (fwrite(buf.data, 1, buf.len, f) != buf.len)
            return -1;
        if (garbage_every && i % garbage_every == garbage_every / 2) {
            fputs("{\"label\": 1, \"features\": [this is not json\n", f);
            fputs("{\"label\": 7, \"features\": {\"a\": \"b\"}}\n", f);
        }
    }
    free(buf.data);
    spw_gen_destroy(gen);
    return fclose(f) == 0 ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    return write_gen_file(g_pb_path, sizeof(g_pb_path), GEN_N, SPW_FORMAT_PB, 0, g_keys, &g_n_keys);
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_pb_path);
    return 0;
}

static struct spw_trainer_params base_params(enum spw_model_kind kind, uint32_t k)
{
    struct spw_trainer_params p;
    spw_trainer_params_default(&p);
    assert_int_equal(spw_model_init(&p.model, kind, k), SPW_OK);
    p.backend = SPW_BACKEND_CPU;
    p.batch = 256;
    p.lr = 0.02f;
    p.eval_window = 20000;
    p.topk.dim = p.model.dim;
    return p;
}

static char g_url[128];

static struct spw_trainer_loop_conf base_conf(const struct spw_trainer_params *p, const char *path)
{
    struct spw_trainer_loop_conf c;
    spw_trainer_loop_conf_default(&c);
    c.params = *p;
    snprintf(g_url, sizeof(g_url), "file:%s", path);
    c.in = g_url;
    c.format = SPW_FORMAT_PB;
    c.inproc_shards = 2;
    c.inproc_memory_bytes = 256u << 20;
    c.log_interval_ms = 0;
    c.grace_ms = 10000;
    return c;
}

static spw_trainer_loop_t *new_loop(const struct spw_trainer_loop_conf *c,
                                    const struct spw_trainer_hooks *hooks)
{
    char errstr[512];
    spw_trainer_loop_t *loop = spw_trainer_loop_new(c, hooks, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("spw_trainer_loop_new: %s", errstr);
    return loop;
}

/* ---- hooks the tests use ---- */

struct hook_state {
    uint64_t before, after;   /* calls */
    bool order_ok;            /* before(s), after(s), before(s+1), ... */
    uint64_t expect_examples; /* per step (0: unchecked) */
    uint32_t expect_micro;
    uint64_t early_examples; /* report once this many examples were trained */
    struct spw_pv_report early;
    bool have_early;
    uint64_t seen_examples;
    uint64_t stop_after_step;  /* after_step returns SPW_ERR_STOPPED at this step (0: never) */
    uint64_t signal_at_step;   /* before_step requests a stop at this step (0: never) */
    uint64_t checkpoint_after; /* after_step checkpoints at this step (0: never) */
    int checkpoints;
    spw_err_t checkpoint_err;
};

static spw_err_t before_step(void *opaque, spw_trainer_loop_t *loop, uint64_t step)
{
    (void)loop;
    struct hook_state *h = opaque;
    if (h->before != h->after || step != h->before)
        h->order_ok = false;
    h->before++;
    if (h->signal_at_step && step == h->signal_at_step)
        spw_signal_request_stop();
    return SPW_OK;
}

static spw_err_t after_step(void *opaque, spw_trainer_loop_t *loop,
                            const struct spw_trainer_step_info *info)
{
    struct hook_state *h = opaque;
    if (h->before != h->after + 1 || info->step != h->after)
        h->order_ok = false;
    if (h->expect_examples && info->examples != h->expect_examples)
        h->order_ok = false;
    if (h->expect_micro && info->micro != h->expect_micro)
        h->order_ok = false;
    if (info->rows_pushed == 0 || info->seq == 0 || !(info->loss_sum > 0))
        h->order_ok = false;
    h->after++;
    h->seen_examples += info->examples;
    if (h->early_examples && !h->have_early && h->seen_examples >= h->early_examples) {
        spw_trainer_loop_report(loop, &h->early);
        h->have_early = true;
    }
    if (h->checkpoint_after && info->step == h->checkpoint_after) {
        struct spw_trainer_position pos[4];
        size_t n = 99;
        h->checkpoint_err = spw_trainer_loop_checkpoint(loop, 10000, pos, 4, &n);
        if (n != 0) /* file input has no partitions */
            h->checkpoint_err = SPW_ERR_STATE;
        if (spw_ps_client_outstanding(spw_trainer_loop_client(loop)) != 0)
            h->checkpoint_err = SPW_ERR_STATE;
        h->checkpoints++;
    }
    if (h->stop_after_step && info->step == h->stop_after_step)
        return SPW_ERR_STOPPED;
    return SPW_OK;
}

static struct spw_trainer_hooks hooks_of(struct hook_state *h)
{
    h->order_ok = true;
    return (struct spw_trainer_hooks){
        .opaque = h, .before_step = before_step, .after_step = after_step};
}

/* ---- learning ---- */

static void test_trn_loop_inproc_learns_toward_bayes(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    struct spw_trainer_loop_conf c = base_conf(&p, g_pb_path);
    struct hook_state h = {.early_examples = 40000};
    struct spw_trainer_hooks hooks = hooks_of(&h);
    spw_trainer_loop_t *loop = new_loop(&c, &hooks);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_pv_report f;
    spw_trainer_loop_report(loop, &f);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    assert_true(h.order_ok && h.have_early);
    assert_int_equal(st.examples, GEN_N);
    assert_int_equal(st.rejected, 0);
    assert_int_equal(st.records, GEN_N);
    assert_int_equal(st.steps, (GEN_N + p.batch - 1) / p.batch);
    assert_int_equal(h.after, st.steps);
    const struct spw_pv_report *e = &h.early;
    print_message("loop fm k=4 inproc: at %llu window logloss %.4f (bayes %.4f); at %llu %.4f "
                  "(const %.4f, bayes %.4f) auc %.4f; %.1f bytes/example\n",
                  (unsigned long long)e->examples, e->window.logloss, e->oracle_window.logloss,
                  (unsigned long long)f.examples, f.window.logloss, f.const_window,
                  f.oracle_window.logloss, f.window.auc,
                  (double)st.bytes_pushed / (double)st.examples);
    /* clearly below the best constant, above Bayes, closer to it than early on */
    assert_true(f.window.logloss < f.const_window - 0.01);
    double gap_early = e->window.logloss - e->oracle_window.logloss;
    double gap_final = f.window.logloss - f.oracle_window.logloss;
    assert_true(gap_final > 0.0);
    assert_true(gap_final < gap_early - 0.01);
    assert_true(f.window.auc > 0.6 && f.window.auc < f.oracle_window.auc);
    spw_trainer_loop_destroy(loop);
}

/* ---- equality with the reference trainer ---- */

/* Trains the reference on the first n examples of the file (flushing like the loop's end). */
static spw_ref_t *ref_on_file(const struct spw_trainer_params *p, uint64_t n, uint64_t flush_at)
{
    char errstr[256];
    spw_ref_t *ref = spw_ref_new(p, errstr, sizeof(errstr));
    assert_non_null(ref);
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_reader_t *reader =
        spw_reader_open(g_pb_path, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    if (flush_at) {
        assert_int_equal(spw_ref_train_reader(ref, reader, flush_at), SPW_OK);
        assert_int_equal(spw_ref_flush(ref), SPW_OK);
        n -= flush_at;
    }
    assert_int_equal(spw_ref_train_reader(ref, reader, n), SPW_OK);
    assert_int_equal(spw_ref_flush(ref), SPW_OK);
    spw_reader_close(reader);
    return ref;
}

/* Largest difference between the reference's rows and the in-process shards' (reopened from
 * root after the loop closed them) over the kept keys and the bias. */
static double max_row_diff(const spw_ref_t *ref, const struct spw_trainer_params *p,
                           const char *root, uint32_t n_shards)
{
    spw_ps_store_t *stores[2] = {NULL, NULL};
    for (uint32_t s = 0; s < n_shards; s++) {
        char path[256], errstr[256];
        snprintf(path, sizeof(path), "%s/shard-%u", root, s);
        struct spw_ps_store_conf sc = {0};
        sc.shard = s;
        sc.dim = p->model.dim;
        spw_ps_optim_conf_default(&sc.optim);
        sc.optim.kind = p->optimizer == SPW_REF_SGD ? SPW_PS_SGD : SPW_PS_ADAGRAD;
        sc.optim.lr = p->lr;
        sc.optim.init_scale = p->init_scale;
        sc.seed = p->seed;
        sc.memory_bytes = 64u << 20;
        sc.db_path = path;
        stores[s] = spw_ps_store_open(&sc, errstr, sizeof(errstr));
        if (!stores[s])
            fail_msg("reopen %s: %s", path, errstr);
    }
    size_t floats = p->model.dim * 3 + 4;
    struct spw_ps_row_copy *row = calloc(1, sizeof(*row) + floats * sizeof(float));
    assert_non_null(row);
    double worst = 0.0;
    size_t compared = 0;
    for (size_t i = 0; i <= g_n_keys; i++) {
        uint64_t key = i < g_n_keys ? g_keys[i] : SPW_TRN_BIAS_KEY;
        const float *r = spw_ref_row(ref, key);
        if (!r)
            continue;
        spw_err_t err = spw_ps_store_get_row(stores[spw_hash_shard(key, n_shards)], key, row);
        assert_int_equal(err, SPW_OK);
        for (uint32_t d = 0; d < p->model.dim; d++)
            worst = fmax(worst, fabs((double)r[d] - row->data[d]));
        compared++;
    }
    assert_true(compared > 1000);
    free(row);
    for (uint32_t s = 0; s < n_shards; s++)
        spw_ps_store_close(stores[s]);
    return worst;
}

/* The loop against the reference trainer: progressive validation within pv_tol, rows within
 * row_tol (0 and 1e-6 for one compute thread; looser with trainer.threads > 1, whose row sums
 * are reassociated). */
static void check_close_to_reference(const struct spw_trainer_params *p, uint64_t n,
                                     struct hook_state *h, uint64_t ref_flush_at, const char *name,
                                     double pv_tol, double row_tol)
{
    char root[64];
    snprintf(root, sizeof(root), "/tmp/test_trn_loop_db_XXXXXX");
    assert_non_null(mkdtemp(root));
    struct spw_trainer_loop_conf c = base_conf(p, g_pb_path);
    c.inproc_dir = root;
    c.max_examples = n;
    struct spw_trainer_hooks hooks = hooks_of(h);
    spw_trainer_loop_t *loop = new_loop(&c, &hooks);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_pv_report lr, rr;
    spw_trainer_loop_report(loop, &lr);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    spw_trainer_loop_destroy(loop);
    assert_true(h->order_ok);

    spw_ref_t *ref = ref_on_file(p, st.examples, ref_flush_at);
    spw_ref_report(ref, &rr);
    double diff = max_row_diff(ref, p, root, c.inproc_shards);
    print_message("%s: %llu examples, window logloss loop %.6f ref %.6f, max row diff %.3g\n", name,
                  (unsigned long long)st.examples, lr.window.logloss, rr.window.logloss, diff);
    assert_int_equal(lr.examples, rr.examples);
    assert_true(fabs(lr.window.logloss - rr.window.logloss) < pv_tol);
    assert_true(fabs(lr.cumulative.logloss - rr.cumulative.logloss) < pv_tol);
    assert_true(fabs(lr.window.auc - rr.window.auc) < pv_tol);
    assert_true(diff < row_tol);
    spw_ref_destroy(ref);
    spw_fs_remove_tree(root);
}

static void check_equals_reference(const struct spw_trainer_params *p, uint64_t n,
                                   struct hook_state *h, uint64_t ref_flush_at, const char *name)
{
    check_close_to_reference(p, n, h, ref_flush_at, name, 1e-9, 1e-6);
}

/* SGD, every row pushed: the loop over in-process shards is the reference trainer. */
static void test_trn_loop_inproc_equals_reference(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.optimizer = SPW_REF_SGD;
    p.lr = 0.5f;
    struct hook_state h = {.expect_micro = 1};
    /* a partial micro-batch at the end */
    check_equals_reference(&p, 30000 - 100, &h, 0, "sgd plain");
    assert_int_equal(h.after, (30000 - 100 + 255) / 256);
}

/* Two and four compute threads (trainer.threads) over 30,000 examples: the reference trainer
 * (one thread) to the float reassociation of each row's gradient sum. Tolerances: progressive
 * validation 1e-6, rows 1e-5 (SGD lr 0.5, so that a reassociated last bit shows in the rows
 * and compounds over 117 steps; measured differences are printed). */
static void test_trn_loop_inproc_threads_equal_reference(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.optimizer = SPW_REF_SGD;
    p.lr = 0.5f;
    for (uint32_t t = 2; t <= 4; t += 2) {
        p.threads = t;
        struct hook_state h = {.expect_micro = 1};
        check_close_to_reference(&p, 30000 - 100, &h, 0, t == 2 ? "sgd 2 threads" : "sgd 4 threads",
                                 1e-6, 1e-5);
    }
}

/* Two compute threads with in-process shards stage each micro-batch: its pull, scoring and push
 * run on a compute thread while the loop reads the next one. Adagrad with the compressor on the
 * push (on the compute thread): every row (ratio 1), in fp16 with error feedback; a checkpoint
 * from after_step at step 9 (the residuals pushed from the loop thread between staged steps), and
 * a stop request during step 5 in a second run: still the reference, progressive validation to
 * 1e-6, rows to 1e-4 (a reassociated gradient can round to the neighbouring half in fp16; measured
 * 9.6e-6 and 1.8e-6, printed). (Top-k below 1 is left out here: a reassociated last bit can change
 * which rows a selection keeps. With ratio 0.1 the staged and the unstaged threaded loop gave the
 * same figures, 0.00962 max row difference from the reference, when tried by hand.) */
static void test_trn_loop_inproc_threads_staged_compressed(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.threads = 2;
    p.compress = true;
    p.topk.ratio = 1.0;
    p.topk.fp16 = true;
    p.topk.error_feedback = true;
    struct hook_state h = {.expect_micro = 1, .checkpoint_after = 9};
    check_close_to_reference(&p, 30000 - 100, &h, (uint64_t)10 * 256,
                             "2 threads adagrad fp16 ef checkpoint at step 9", 1e-6, 1e-4);
    assert_int_equal(h.checkpoints, 1);
    assert_int_equal(h.checkpoint_err, SPW_OK);
    assert_int_equal(h.after, (30000 - 100 + 255) / 256);

    struct hook_state hs = {.signal_at_step = 5};
    spw_signal_reset();
    check_close_to_reference(&p, 0, &hs, 0, "2 threads stop at step 5", 1e-6, 1e-4);
    spw_signal_reset();
    assert_int_equal(hs.after, 6);
    assert_int_equal(hs.seen_examples, 6 * 256);
}

/* Adagrad, top-k 0.1 with error feedback in fp16, accumulation over 3 micro-batches, and a
 * partial step and residuals at the end: still the reference (whose flush the loop's end
 * performs). */
static void test_trn_loop_inproc_equals_reference_compressed(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.compress = true;
    p.topk.ratio = 0.1;
    p.topk.fp16 = true;
    p.topk.error_feedback = true;
    p.acc_steps = 3;
    struct hook_state h = {.expect_micro = 3};
    check_equals_reference(&p, 30000, &h, 0, "adagrad topk 0.1 fp16 ef acc 3");
}

/* A checkpoint from after_step pushes every residual and waits for the acknowledgements: the
 * model equals the reference flushed at the same point. */
static void test_trn_loop_checkpoint_flushes_residuals(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_LR, 0);
    p.compress = true;
    p.topk.ratio = 0.05;
    p.topk.error_feedback = true;
    struct hook_state h = {.checkpoint_after = 9};
    check_equals_reference(&p, 20000, &h, (uint64_t)10 * 256, "lr topk 0.05 checkpoint at step 9");
    assert_int_equal(h.checkpoints, 1);
    assert_int_equal(h.checkpoint_err, SPW_OK);
}

/* A stop request (SIGTERM) during step 5 finishes that step, then pushes the residuals: the
 * model equals the reference trained on 6 batches and flushed. */
static void test_trn_loop_stop_request_finishes_step_and_flushes(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.compress = true;
    p.topk.ratio = 0.1;
    p.topk.error_feedback = true;
    struct hook_state h = {.signal_at_step = 5};
    spw_signal_reset();
    check_equals_reference(&p, 0, &h, 0, "stop at step 5");
    spw_signal_reset();
    assert_int_equal(h.after, 6);
    assert_int_equal(h.seen_examples, 6 * 256);
}

/* ---- hooks, limits, bad input ---- */

static void test_trn_loop_hooks_run_in_step_order_and_stop(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_LR, 0);
    p.batch = 100;
    p.acc_steps = 2;
    struct spw_trainer_loop_conf c = base_conf(&p, g_pb_path);
    struct hook_state h = {.expect_examples = 200, .expect_micro = 2, .stop_after_step = 4};
    struct spw_trainer_hooks hooks = hooks_of(&h);
    spw_trainer_loop_t *loop = new_loop(&c, &hooks);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    assert_true(h.order_ok);
    assert_int_equal(h.before, 5);
    assert_int_equal(h.after, 5);
    assert_int_equal(st.steps, 5);
    assert_int_equal(st.micro_batches, 10);
    assert_int_equal(st.examples, 1000);
    assert_int_equal(st.dropped_examples, 0);
    /* run is once only */
    assert_int_equal(spw_trainer_loop_run(loop), SPW_ERR_STATE);
    spw_trainer_loop_destroy(loop);
}

/* A hook that stands still for wait_ms at every step (a coordinator wait). */
static uint64_t g_wait_ms;
static spw_err_t waiting_after_step(void *opaque, spw_trainer_loop_t *loop,
                                    const struct spw_trainer_step_info *info)
{
    (void)opaque, (void)loop, (void)info;
    spw_time_sleep_ms(g_wait_ms);
    return SPW_OK;
}

/* trainer.debug.slow_factor F sleeps (F - 1) times the loop's own work, however short each
 * micro-batch (a compute below a millisecond was never slowed), and not the hooks' waits. */
static void test_trn_loop_slow_factor_stretches_work_not_waits(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.batch = 64; /* micro-batches well below a millisecond of compute */
    struct spw_trainer_loop_conf c = base_conf(&p, g_pb_path);
    c.max_examples = 64 * 200;
    c.debug_slow_factor = 3.0;
    spw_trainer_loop_t *loop = new_loop(&c, NULL);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    assert_int_equal(st.micro_batches, 200);
    /* the work includes every compute: at least 2x the compute was slept, less the carry */
    assert_true(st.slowed_ns + 1000000u >= 2 * st.compute_ns);
    assert_true(st.slowed_ns < st.elapsed_ns);
    spw_trainer_loop_destroy(loop);

    /* 10 steps that each wait 40 ms in a hook: the 400 ms of waits are not stretched */
    g_wait_ms = 40;
    c.max_examples = 64 * 10;
    c.debug_slow_factor = 2.0;
    struct spw_trainer_hooks hooks = {.after_step = waiting_after_step};
    loop = new_loop(&c, &hooks);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    spw_trainer_loop_get_stats(loop, &st);
    assert_int_equal(st.steps, 10);
    /* elapsed = work + waits + slept, and slept ~ (2 - 1) x work when the waits are not
     * stretched: elapsed - 2 x slept is then the 400 ms of waits (0 if they were stretched too),
     * whatever the machine's speed */
    assert_true(st.elapsed_ns >= 2 * st.slowed_ns + 300u * 1000000u);
    spw_trainer_loop_destroy(loop);

    /* factor 1: no sleep at all */
    c.debug_slow_factor = 1.0;
    loop = new_loop(&c, NULL);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    spw_trainer_loop_get_stats(loop, &st);
    assert_int_equal(st.slowed_ns, 0);
    spw_trainer_loop_destroy(loop);
}

static void test_trn_loop_max_examples_and_metrics(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    struct spw_trainer_loop_conf c = base_conf(&p, g_pb_path);
    c.max_examples = 5000;
    spw_metrics_t *metrics = spw_metrics_new();
    assert_non_null(metrics);
    c.metrics = metrics;
    spw_trainer_loop_t *loop = new_loop(&c, NULL);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    assert_int_equal(st.examples, 5000);
    assert_int_equal(st.steps, (5000 + 255) / 256);
    assert_true(st.bytes_pushed > 0 && st.rows_pushed > 0);
    size_t len = 0;
    char *text = spw_metrics_render(metrics, &len);
    assert_non_null(text);
    assert_non_null(strstr(text, "sparrow_trainer_examples_total 5000\n"));
    assert_non_null(strstr(text, "sparrow_trainer_window_logloss 0."));
    assert_non_null(strstr(text, "sparrow_trainer_bayes_window_logloss 0."));
    assert_non_null(strstr(text, "sparrow_trainer_push_bytes_per_example "));
    assert_non_null(strstr(text, "sparrow_trainer_rejected_total{reason=\"undecodable\"} 0\n"));
    assert_non_null(strstr(text, "sparrow_trainer_ps_"));
    free(text);
    spw_trainer_loop_destroy(loop);
    spw_metrics_destroy(metrics);
}

static void test_trn_loop_skips_malformed_records(void **state)
{
    (void)state;
    char path[64];
    assert_int_equal(write_gen_file(path, sizeof(path), 5000, SPW_FORMAT_JSON, 100, NULL, NULL), 0);
    struct spw_trainer_params p = base_params(SPW_MODEL_LR, 0);
    struct spw_trainer_loop_conf c = base_conf(&p, path);
    c.format = SPW_FORMAT_JSON;
    spw_metrics_t *metrics = spw_metrics_new();
    c.metrics = metrics;
    spw_trainer_loop_t *loop = new_loop(&c, NULL);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    assert_int_equal(st.examples, 5000);
    assert_int_equal(st.rejected, 100);
    assert_int_equal(st.records, 5100);
    size_t len = 0;
    char *text = spw_metrics_render(metrics, &len);
    assert_non_null(strstr(text, "sparrow_trainer_rejected_total{reason=\"undecodable\"} 50\n"));
    assert_non_null(strstr(text, "sparrow_trainer_rejected_total{reason=\"bad_label\"} 50\n"));
    free(text);
    spw_trainer_loop_destroy(loop);
    spw_metrics_destroy(metrics);
    unlink(path);
}

static void test_trn_loop_missing_input_fails_to_start(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_LR, 0);
    struct spw_trainer_loop_conf c = base_conf(&p, "/nonexistent/sparrow/input.pb");
    char errstr[256] = "";
    assert_null(spw_trainer_loop_new(&c, NULL, errstr, sizeof(errstr)));
    assert_true(strlen(errstr) > 0);
    c.in = "ftp://x";
    assert_null(spw_trainer_loop_new(&c, NULL, errstr, sizeof(errstr)));
}

/* ---- configuration ---- */

static spw_err_t conf_with(const char *const *sets, size_t n, struct spw_trainer_loop_conf *c,
                           spw_config_t **cfg_out)
{
    char errstr[512];
    spw_config_t *cfg = spw_config_new(spw_trainer_config_props, spw_trainer_config_n_props, errstr,
                                       sizeof(errstr));
    assert_non_null(cfg);
    assert_int_equal(spw_config_load(cfg, NULL, NULL, sets, n, errstr, sizeof(errstr)), SPW_OK);
    spw_err_t err = spw_trainer_loop_conf_from_config(cfg, c, errstr, sizeof(errstr));
    *cfg_out = cfg;
    return err;
}

static void test_trn_loop_conf_from_config(void **state)
{
    (void)state;
    struct spw_trainer_loop_conf c;
    spw_config_t *cfg;
    const char *inproc[] = {"trainer.in=file:/x.json",       "trainer.format=json",
                            "trainer.shards=inproc:3",       "trainer.debug.delay_ms=25ms",
                            "trainer.debug.slow_factor=2.5", "trainer.max_examples=7",
                            "trainer.pull.prefetch=false",   "trainer.http.port=-1"};
    assert_int_equal(conf_with(inproc, 8, &c, &cfg), SPW_OK);
    assert_string_equal(c.in, "file:/x.json");
    assert_int_equal(c.format, SPW_FORMAT_JSON);
    assert_int_equal(c.inproc_shards, 3);
    assert_int_equal(c.debug_delay_ms, 25);
    assert_true(c.debug_slow_factor == 2.5);
    assert_int_equal(c.max_examples, 7);
    assert_false(c.prefetch);
    spw_config_destroy(cfg);

    const char *zmq[] = {"trainer.in=kafka://127.0.0.1:9092/examples",
                         "trainer.shards=tcp://a:1,tcp://b:2", "trainer.push.window=8",
                         "trainer.group=g1", "trainer.start=latest"};
    assert_int_equal(conf_with(zmq, 5, &c, &cfg), SPW_OK);
    assert_int_equal(c.inproc_shards, 0);
    assert_string_equal(c.client.shards, "tcp://a:1,tcp://b:2");
    assert_int_equal(c.client.push_window, 8);
    assert_string_equal(c.group, "g1");
    assert_true(c.start_latest);
    assert_true(c.prefetch);
    spw_config_destroy(cfg);

    const char *no_in[] = {"trainer.model=lr"};
    assert_int_equal(conf_with(no_in, 1, &c, &cfg), SPW_ERR_INVALID);
    spw_config_destroy(cfg);
    const char *bad_in[] = {"trainer.in=kafka://host-only"};
    assert_int_equal(conf_with(bad_in, 1, &c, &cfg), SPW_ERR_INVALID);
    spw_config_destroy(cfg);
    const char *bad_inproc[] = {"trainer.in=file:x", "trainer.shards=inproc:0"};
    assert_int_equal(conf_with(bad_inproc, 2, &c, &cfg), SPW_ERR_INVALID);
    spw_config_destroy(cfg);
    const char *bad_shards[] = {"trainer.in=file:x", "trainer.shards=nowhere"};
    assert_int_equal(conf_with(bad_shards, 2, &c, &cfg), SPW_ERR_INVALID);
    spw_config_destroy(cfg);
}

SPW_TEST_MAIN_GROUP(setup, teardown, test_trn_loop_inproc_learns_toward_bayes,
                    test_trn_loop_inproc_equals_reference,
                    test_trn_loop_inproc_threads_equal_reference,
                    test_trn_loop_inproc_threads_staged_compressed,
                    test_trn_loop_inproc_equals_reference_compressed,
                    test_trn_loop_checkpoint_flushes_residuals,
                    test_trn_loop_stop_request_finishes_step_and_flushes,
                    test_trn_loop_hooks_run_in_step_order_and_stop,
                    test_trn_loop_slow_factor_stretches_work_not_waits,
                    test_trn_loop_max_examples_and_metrics, test_trn_loop_skips_malformed_records,
                    test_trn_loop_missing_input_fails_to_start, test_trn_loop_conf_from_config)
