/* Unit tests of trainer.threads: the CPU backend's forward/backward split over 2 and 4 compute
 * threads gives one thread's predictions, loss and gradients (FM, LR, DeepFM with dropout,
 * DCN-v2), for batches that do not divide evenly, batches smaller than the thread count and
 * empty ones, over several batches (the buffers' reuse and the dropout stream), staged batches
 * (the owner's pull and push around the compute on a thread), and the setting's range. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/trainer.h"
#include "test_rng.h"
#include "test_fields_batch.h"

/*
 * Tolerance: a row's gradient is a float sum over its occurrences; with T threads it is summed
 * per slice and then across slices, so it may differ from one thread's by the reassociation of
 * that sum: |g_T - g_1| <= ATOL + RTOL |g_1|. Predictions and per-example terms are computed
 * by the same code on the same rows and are compared to PTOL (a deep model's network runs
 * sgemm on a slice instead of the batch: OpenBLAS may block a smaller product differently).
 */
#define ATOL 1e-6
#define RTOL 1e-5
#define PTOL 1e-6
/* The loss sums the per-example terms of those predictions: relative to float precision (a deep
 * model's 37-example batch on 4 threads: 24.9856551767 vs 24.9856552437, 2.7e-9, with Debian 12's
 * OpenBLAS on an AMD EPYC; FM and LR agree exactly). */
#define LTOL 1e-7

static void make_model(struct spw_model *m, enum spw_model_kind kind)
{
    char err[256];
    spw_err_t rc;
    if (kind == SPW_MODEL_FM)
        rc = spw_model_init(m, kind, 4);
    else if (kind == SPW_MODEL_LR)
        rc = spw_model_init(m, kind, 0);
    else if (kind == SPW_MODEL_DEEPFM) /* dropout on: the slices must draw the batch's masks */
        rc = spw_model_init_deep(m, kind, 3, TEST_FIELDS, 3, "8,6", 0, 0.3f, 5, err, sizeof(err));
    else
        rc = spw_model_init_deep(m, kind, 3, TEST_FIELDS, 3, "5", 2, 0.0f, 5, err, sizeof(err));
    if (rc != SPW_OK)
        fail_msg("model: %s", err);
}

struct result {
    float *preds, *grads;
    double loss;
};

static void run(spw_backend_t *be, const spw_batch_t *b, const float *rows, struct result *r)
{
    size_t n = spw_batch_examples(b), nu = spw_batch_unique(b);
    uint32_t dim = spw_backend_model(be)->dim;
    r->preds = calloc(n + 1, sizeof(float));
    r->grads = calloc(nu * dim + 1, sizeof(float));
    assert_non_null(r->preds);
    assert_non_null(r->grads);
    r->loss = -1.0;
    float scale = n ? 1.0f / (float)n : 1.0f;
    assert_int_equal(spw_backend_forward_backward(be, b, rows, scale, r->preds, r->grads, &r->loss),
                     SPW_OK);
}

static void check_same(const struct result *one, const struct result *many, size_t n, size_t nf,
                       const char *what)
{
    if (fabs(one->loss - many->loss) > LTOL * (1.0 + fabs(one->loss)))
        fail_msg("%s: loss %.12g vs %.12g", what, one->loss, many->loss);
    for (size_t i = 0; i < n; i++)
        if (fabs((double)one->preds[i] - many->preds[i]) > PTOL)
            fail_msg("%s: pred %zu: %.9g vs %.9g", what, i, (double)one->preds[i],
                     (double)many->preds[i]);
    size_t nonzero = 0;
    for (size_t j = 0; j < nf; j++) {
        double a = one->grads[j], b = many->grads[j];
        if (fabs(a - b) > ATOL + RTOL * fabs(a))
            fail_msg("%s: grad %zu: %.9g vs %.9g", what, j, a, b);
        nonzero += a != 0.0;
    }
    if (n >= 3)
        assert_true(nonzero > nf / 4); /* the comparison covered real gradients */
}

static void free_result(struct result *r)
{
    free(r->preds);
    free(r->grads);
}

/* Batches of 37, 3, 1, 0 and 50 examples (in that order: the buffers grow, shrink in use and
 * grow again; the dropout stream advances once per non-empty batch on every backend). */
static void check_model(enum spw_model_kind kind)
{
    struct spw_model m;
    make_model(&m, kind);
    char err[256];
    spw_backend_t *be[3];
    const uint32_t threads[3] = {1, 2, 4};
    for (int t = 0; t < 3; t++) {
        be[t] = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
        assert_non_null(be[t]);
        assert_int_equal(spw_backend_threads_start(be[t], threads[t], err, sizeof(err)), SPW_OK);
        assert_int_equal(spw_backend_threads(be[t]), threads[t]);
        assert_string_equal(spw_backend_network(be[t]),
                            spw_model_is_deep(&m) ? "openblas" : "none");
    }
    static const size_t sizes[] = {37, 3, 1, 0, 50};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        spw_batch_t *b = test_fields_batch(&m, sizes[s], 11 + s);
        size_t nu = spw_batch_unique(b), nf = nu * m.dim;
        uint64_t seed = 99 + s;
        float *rows = malloc((nf + 1) * sizeof(float));
        assert_non_null(rows);
        for (size_t j = 0; j < nf; j++)
            rows[j] = rng_uniform(&seed, -0.3f, 0.3f);
        struct result r[3];
        for (int t = 0; t < 3; t++)
            run(be[t], b, rows, &r[t]);
        for (int t = 1; t < 3; t++) {
            char what[96];
            snprintf(what, sizeof(what), "%s, %zu examples, %u threads", spw_model_kind_name(kind),
                     sizes[s], threads[t]);
            check_same(&r[0], &r[t], sizes[s], nf, what);
        }
        for (int t = 0; t < 3; t++)
            free_result(&r[t]);
        free(rows);
        spw_batch_destroy(b);
    }
    for (int t = 0; t < 3; t++)
        spw_backend_destroy(be[t]);
}

static void test_trn_threads_fm_equals_one_thread(void **state)
{
    (void)state;
    check_model(SPW_MODEL_FM);
    check_model(SPW_MODEL_LR);
}

static void test_trn_threads_deepfm_equals_one_thread(void **state)
{
    (void)state;
    check_model(SPW_MODEL_DEEPFM);
}

static void test_trn_threads_dcnv2_equals_one_thread(void **state)
{
    (void)state;
    check_model(SPW_MODEL_DCNV2);
}

/* Dropout masks follow the batch, not the slice: with dropout on, two threads give one
 * thread's result (checked above); here a forward-only pass afterwards (no dropout) agrees too,
 * so the threaded path left the backend's state as one thread would. */
static void test_trn_threads_forward_after_training(void **state)
{
    (void)state;
    struct spw_model m;
    make_model(&m, SPW_MODEL_DEEPFM);
    char err[256];
    spw_backend_t *one = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    spw_backend_t *two = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    assert_non_null(one);
    assert_non_null(two);
    assert_int_equal(spw_backend_threads_start(two, 2, err, sizeof(err)), SPW_OK);
    spw_batch_t *b = test_fields_batch(&m, 21, 5);
    size_t nf = spw_batch_unique(b) * m.dim;
    float *rows = malloc(nf * sizeof(float));
    assert_non_null(rows);
    uint64_t seed = 3;
    for (size_t j = 0; j < nf; j++)
        rows[j] = rng_uniform(&seed, -0.3f, 0.3f);
    struct result r1, r2;
    run(one, b, rows, &r1);
    run(two, b, rows, &r2);
    check_same(&r1, &r2, 21, nf, "deepfm training");
    float p1[21], p2[21];
    double l1 = 0, l2 = 0;
    assert_int_equal(spw_backend_forward(one, b, rows, p1, &l1), SPW_OK);
    assert_int_equal(spw_backend_forward(two, b, rows, p2, &l2), SPW_OK);
    assert_memory_equal(p1, p2, sizeof(p1));
    assert_true(l1 == l2);
    free_result(&r1);
    free_result(&r2);
    free(rows);
    spw_batch_destroy(b);
    spw_backend_destroy(one);
    spw_backend_destroy(two);
}

/* A staged batch's stages (spw_backend_forward_backward_start_staged): pre brings the rows in,
 * post copies the outputs out, each counted; fail_pre makes pre fail. */
struct stage_ctx {
    const float *src_rows;
    float *rows;
    size_t nf, n;
    const float *preds, *grads;
    struct result out;
    int pres, posts;
    bool fail_pre;
};

static spw_err_t stage_pre(void *opaque)
{
    struct stage_ctx *sc = opaque;
    sc->pres++;
    if (sc->fail_pre)
        return SPW_ERR_IO;
    memcpy(sc->rows, sc->src_rows, sc->nf * sizeof(float));
    return SPW_OK;
}

static spw_err_t stage_post(void *opaque)
{
    struct stage_ctx *sc = opaque;
    sc->posts++;
    memcpy(sc->out.preds, sc->preds, sc->n * sizeof(float));
    memcpy(sc->out.grads, sc->grads, sc->nf * sizeof(float));
    return SPW_OK;
}

/* Staged on 1, 2 and 4 threads, three batches each: pre and post run once per batch, and on one
 * thread the result is the unstaged one's. Then staged on 2 threads against an unstaged single
 * thread, batch by batch: pre's rows are the ones computed on (a deep model's network weights
 * gathered from them after pre), post sees the reduced gradient; and a failing pre computes
 * nothing, skips post and is finish's error. */
static void check_staged(enum spw_model_kind kind)
{
    struct spw_model m;
    make_model(&m, kind);
    char err[256];
    spw_backend_t *ref = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    assert_non_null(ref);
    const uint32_t threads[3] = {1, 2, 4};
    for (int t = 0; t < 3; t++) {
        spw_backend_t *be = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
        assert_non_null(be);
        assert_int_equal(spw_backend_threads_start(be, threads[t], err, sizeof(err)), SPW_OK);
        for (size_t s = 0; s < 3; s++) {
            const size_t n = 29 + 7 * s;
            spw_batch_t *b = test_fields_batch(&m, n, 40 + s);
            size_t nf = spw_batch_unique(b) * m.dim;
            float *src = malloc(nf * sizeof(float)), *rows = calloc(nf, sizeof(float));
            float *preds = calloc(n, sizeof(float)), *grads = calloc(nf, sizeof(float));
            assert_true(src && rows && preds && grads);
            uint64_t seed = 7 + s;
            for (size_t j = 0; j < nf; j++)
                src[j] = rng_uniform(&seed, -0.3f, 0.3f);
            struct result one;
            if (t == 0)
                run(ref, b, src, &one); /* the reference's dropout stream: one per batch */
            struct stage_ctx sc = {
                .src_rows = src, .rows = rows, .nf = nf, .n = n, .preds = preds, .grads = grads};
            sc.out.preds = calloc(n, sizeof(float));
            sc.out.grads = calloc(nf, sizeof(float));
            assert_true(sc.out.preds && sc.out.grads);
            struct spw_backend_stages st = {.pre = stage_pre, .post = stage_post, .ctx = &sc};
            spw_backend_forward_backward_start_staged(be, b, rows, 1.0f / (float)n, preds, grads,
                                                      &st);
            assert_int_equal(spw_backend_forward_backward_finish(be, &sc.out.loss), SPW_OK);
            assert_int_equal(sc.pres, 1);
            assert_int_equal(sc.posts, 1);
            if (t == 0) {
                char what[96];
                snprintf(what, sizeof(what), "%s staged, %zu examples, 1 thread",
                         spw_model_kind_name(kind), n);
                check_same(&one, &sc.out, n, nf, what);
                free_result(&one);
            }
            free_result(&sc.out);
            free(src);
            free(rows);
            free(preds);
            free(grads);
            spw_batch_destroy(b);
        }
        spw_backend_destroy(be);
    }
    /* the same three batches through a fresh reference and a staged 2-thread backend, compared */
    spw_backend_destroy(ref);
    spw_backend_t *one = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    spw_backend_t *two = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    assert_true(one && two);
    assert_int_equal(spw_backend_threads_start(two, 2, err, sizeof(err)), SPW_OK);
    for (size_t s = 0; s < 3; s++) {
        const size_t n = 29 + 7 * s;
        spw_batch_t *b = test_fields_batch(&m, n, 40 + s);
        size_t nf = spw_batch_unique(b) * m.dim;
        float *src = malloc(nf * sizeof(float)), *rows = calloc(nf, sizeof(float));
        float *preds = calloc(n, sizeof(float)), *grads = calloc(nf, sizeof(float));
        assert_true(src && rows && preds && grads);
        uint64_t seed = 7 + s;
        for (size_t j = 0; j < nf; j++)
            src[j] = rng_uniform(&seed, -0.3f, 0.3f);
        struct result r1;
        run(one, b, src, &r1);
        struct stage_ctx sc = {
            .src_rows = src, .rows = rows, .nf = nf, .n = n, .preds = preds, .grads = grads};
        sc.out.preds = calloc(n, sizeof(float));
        sc.out.grads = calloc(nf, sizeof(float));
        assert_true(sc.out.preds && sc.out.grads);
        struct spw_backend_stages st = {.pre = stage_pre, .post = stage_post, .ctx = &sc};
        spw_backend_forward_backward_start_staged(two, b, rows, 1.0f / (float)n, preds, grads, &st);
        assert_int_equal(spw_backend_forward_backward_finish(two, &sc.out.loss), SPW_OK);
        char what[96];
        snprintf(what, sizeof(what), "%s staged, %zu examples, 2 threads",
                 spw_model_kind_name(kind), n);
        check_same(&r1, &sc.out, n, nf, what);
        /* a failing pre: nothing computed (grads untouched), no post, the error from finish */
        memset(grads, 0x7f, nf * sizeof(float));
        sc.fail_pre = true;
        sc.pres = sc.posts = 0;
        spw_backend_forward_backward_start_staged(two, b, rows, 1.0f / (float)n, preds, grads, &st);
        assert_int_equal(spw_backend_forward_backward_finish(two, NULL), SPW_ERR_IO);
        assert_int_equal(sc.pres, 1);
        assert_int_equal(sc.posts, 0);
        for (size_t j = 0; j < nf; j++)
            assert_true(memcmp(&grads[j], &(uint32_t){0x7f7f7f7fu}, sizeof(float)) == 0);
        free_result(&r1);
        free_result(&sc.out);
        free(src);
        free(rows);
        free(preds);
        free(grads);
        spw_batch_destroy(b);
    }
    spw_backend_destroy(one);
    spw_backend_destroy(two);
}

static void test_trn_threads_staged_equals_one_thread(void **state)
{
    (void)state;
    check_staged(SPW_MODEL_FM);
    check_staged(SPW_MODEL_DEEPFM);
}

/* 1 .. SPW_TRN_MAX_THREADS; a second start is refused; the setting's table refuses 0 and 65. */
static void test_trn_threads_range(void **state)
{
    (void)state;
    struct spw_model m;
    make_model(&m, SPW_MODEL_FM);
    char err[256];
    spw_backend_t *be = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    assert_non_null(be);
    assert_int_equal(spw_backend_threads_start(be, 0, err, sizeof(err)), SPW_ERR_INVALID);
    assert_non_null(strstr(err, "1 .. 64"));
    assert_int_equal(spw_backend_threads_start(be, SPW_TRN_MAX_THREADS + 1, err, sizeof(err)),
                     SPW_ERR_INVALID);
    assert_int_equal(spw_backend_threads(be), 1);
    assert_int_equal(spw_backend_threads_start(be, 3, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_backend_threads(be), 3);
    assert_int_equal(spw_backend_threads_start(be, 2, err, sizeof(err)), SPW_ERR_STATE);
    spw_backend_destroy(be);

    spw_config_t *cfg =
        spw_config_new(spw_trainer_config_props, spw_trainer_config_n_props, err, sizeof(err));
    assert_non_null(cfg);
    assert_int_not_equal(spw_config_set(cfg, "trainer.threads", "0", err, sizeof(err)), SPW_OK);
    assert_int_not_equal(spw_config_set(cfg, "trainer.threads", "65", err, sizeof(err)), SPW_OK);
    assert_int_not_equal(spw_config_set(cfg, "trainer.threads", "2x", err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_config_set(cfg, "trainer.threads", "16", err, sizeof(err)), SPW_OK);
    struct spw_trainer_params p;
    assert_int_equal(spw_trainer_params_from_config(cfg, &p, err, sizeof(err)), SPW_OK);
    assert_int_equal(p.threads, 16);
    spw_config_destroy(cfg);
    spw_trainer_params_default(&p);
    assert_int_equal(p.threads, 1);
}

SPW_TEST_MAIN(test_trn_threads_fm_equals_one_thread, test_trn_threads_deepfm_equals_one_thread,
              test_trn_threads_dcnv2_equals_one_thread, test_trn_threads_forward_after_training,
              test_trn_threads_staged_equals_one_thread, test_trn_threads_range)
