/* Unit tests of the CPU backend: LR/FM forward against naive formulas, backward against finite
 * differences and per-example sums, row norms, top-k selection, backend selection. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/trainer.h"
#include "test_rng.h"

static spw_batch_t *new_batch(void)
{
    char errstr[128];
    spw_batch_t *batch = spw_batch_new(0, 0, errstr, sizeof(errstr));
    assert_non_null(batch);
    return batch;
}

/* A small batch with duplicate keys within and across examples, weights != 1, soft labels. */
static spw_batch_t *small_batch(void)
{
    spw_batch_t *batch = new_batch();
    const uint64_t k1[4] = {11, 12, 11, 13};
    const float w1[4] = {1.0f, 0.5f, 2.0f, -1.5f};
    const uint64_t k2[2] = {12, 14};
    const uint64_t k3[3] = {13, 11, 15};
    const float w3[3] = {0.25f, 1.0f, 3.0f};
    assert_int_equal(spw_batch_add(batch, 1.0f, NAN, 0, 4, k1, w1), SPW_OK);
    assert_int_equal(spw_batch_add(batch, 0.0f, NAN, 0, 2, k2, NULL), SPW_OK);
    assert_int_equal(spw_batch_add(batch, 0.3f, NAN, 0, 3, k3, w3), SPW_OK);
    assert_int_equal(spw_batch_add(batch, 0.0f, NAN, 0, 0, NULL, NULL), SPW_OK); /* bias only */
    return batch;
}

static float *random_rows(size_t n, uint32_t dim, uint64_t seed, float scale)
{
    float *rows = malloc(n * dim * sizeof(float));
    assert_non_null(rows);
    for (size_t i = 0; i < n * dim; i++)
        rows[i] = rng_uniform(&seed, -scale, scale);
    return rows;
}

/* z by the textbook formulas: b + sum x w + sum_{a<b} <v_a, v_b> x_a x_b, in double. */
static double naive_logit(const struct spw_model *model, const spw_batch_t *batch, size_t i,
                          const float *rows)
{
    const uint32_t *idx;
    const float *w;
    size_t nf = spw_batch_example_features(batch, i, &idx, &w);
    uint32_t dim = model->dim, k = model->latent_dim;
    double z = rows[0];
    for (size_t a = 0; a < nf; a++) {
        z += (double)rows[idx[a] * dim] * w[a];
        for (size_t b = a + 1; b < nf; b++)
            for (uint32_t f = 0; f < k; f++)
                z += (double)rows[idx[a] * dim + 1 + f] * rows[idx[b] * dim + 1 + f] * w[a] * w[b];
    }
    return z;
}

static void check_forward_matches_naive(enum spw_model_kind kind, uint32_t k)
{
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, kind, k), SPW_OK);
    spw_batch_t *batch = small_batch();
    float *rows = random_rows(spw_batch_unique(batch), model.dim, 3, 0.8f);
    float preds[4];
    double loss = spw_cpu_forward(&model, batch, rows, preds);
    double want_loss = 0.0;
    for (size_t i = 0; i < 4; i++) {
        double z = naive_logit(&model, batch, i, rows);
        double p = 1.0 / (1.0 + exp(-z)), y = spw_batch_labels(batch)[i];
        assert_float_equal(preds[i], p, 1e-6);
        want_loss += -(y * log(p) + (1.0 - y) * log(1.0 - p));
    }
    assert_float_equal(loss, want_loss, 1e-5);
    free(rows);
    spw_batch_destroy(batch);
}

static void test_trn_model_forward_matches_naive(void **state)
{
    (void)state;
    check_forward_matches_naive(SPW_MODEL_LR, 0);
    check_forward_matches_naive(SPW_MODEL_FM, 1);
    check_forward_matches_naive(SPW_MODEL_FM, 5);
}

static void test_trn_model_lr_by_hand(void **state)
{
    (void)state;
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_LR, 7), SPW_OK);
    assert_int_equal(model.dim, 1);
    spw_batch_t *batch = new_batch();
    const uint64_t keys[2] = {5, 6};
    const float w[2] = {2.0f, 1.0f};
    assert_int_equal(spw_batch_add(batch, 1.0f, NAN, 0, 2, keys, w), SPW_OK);
    const float rows[3] = {0.5f, 0.25f, -1.0f}; /* bias, w5, w6: z = 0.5 + 0.5 - 1 = 0 */
    float pred, grads[3];
    double loss = spw_cpu_forward_backward(&model, batch, rows, 1.0f, &pred, grads);
    assert_true(pred == 0.5f);
    assert_float_equal(loss, log(2.0), 1e-12);
    /* dL/dz = p - y = -0.5 */
    assert_true(grads[0] == -0.5f && grads[1] == -1.0f && grads[2] == -0.5f);
    spw_batch_destroy(batch);
}

/* Central differences of the double loss against the analytic gradient, for every parameter. */
static void check_gradient(enum spw_model_kind kind, uint32_t k)
{
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, kind, k), SPW_OK);
    spw_batch_t *batch = small_batch();
    size_t nu = spw_batch_unique(batch), n = nu * model.dim;
    float *rows = random_rows(nu, model.dim, 11, 0.7f);
    float *grads = malloc(n * sizeof(float));
    float preds[4];
    assert_non_null(grads);
    const float scale = 0.25f;
    spw_cpu_forward_backward(&model, batch, rows, scale, preds, grads);
    for (size_t j = 0; j < n; j++) {
        const float h = 1e-3f;
        float keep = rows[j];
        rows[j] = keep + h;
        double up = spw_cpu_forward(&model, batch, rows, preds);
        rows[j] = keep - h;
        double down = spw_cpu_forward(&model, batch, rows, preds);
        rows[j] = keep;
        double hh = ((double)(keep + h) - (double)(keep - h));
        double num = scale * (up - down) / hh;
        if (fabs(num - grads[j]) > 2e-3 * fmax(1.0, fabs(num)))
            fail_msg("param %zu: analytic %g numeric %g", j, grads[j], num);
        if (j > 0 && j < model.dim)
            assert_true(grads[j] == 0.0f); /* the bias row's latent part is never used */
    }
    free(rows);
    free(grads);
    spw_batch_destroy(batch);
}

static void test_trn_model_gradient_matches_finite_differences(void **state)
{
    (void)state;
    check_gradient(SPW_MODEL_LR, 0);
    check_gradient(SPW_MODEL_FM, 1);
    check_gradient(SPW_MODEL_FM, 4);
}

/* The gradient of a batch is the sum over its examples' gradients (duplicate keys reduce). */
static void test_trn_model_reduces_duplicate_keys(void **state)
{
    (void)state;
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 3), SPW_OK);
    const uint32_t dim = model.dim;
    spw_batch_t *batch = new_batch(), *single = new_batch();
    uint64_t s = 5;
    enum { EX = 64, NF = 6, VOCAB = 9 };
    uint64_t keys[EX][NF];
    float w[EX][NF], labels[EX];
    for (int i = 0; i < EX; i++) {
        for (int j = 0; j < NF; j++) {
            keys[i][j] = 100 + rng_next(&s) % VOCAB;
            w[i][j] = rng_uniform(&s, 0.1f, 2.0f);
        }
        labels[i] = (float)(rng_next(&s) & 1);
        assert_int_equal(spw_batch_add(batch, labels[i], NAN, 0, NF, keys[i], w[i]), SPW_OK);
    }
    /* rows by key: the batch's order; single batches look theirs up */
    size_t nu = spw_batch_unique(batch);
    float *rows = random_rows(nu, dim, 9, 0.5f);
    float *grads = calloc(nu * dim, sizeof(float)), *sum = calloc(nu * dim, sizeof(float));
    float preds[EX], p1;
    spw_cpu_forward_backward(&model, batch, rows, 1.0f / EX, preds, grads);
    const uint64_t *bkeys = spw_batch_keys(batch);
    for (int i = 0; i < EX; i++) {
        spw_batch_reset(single);
        assert_int_equal(spw_batch_add(single, labels[i], NAN, 0, NF, keys[i], w[i]), SPW_OK);
        size_t su = spw_batch_unique(single);
        float srows[(1 + NF) * 4], sgrads[(1 + NF) * 4];
        const uint64_t *skeys = spw_batch_keys(single);
        size_t map[1 + NF];
        for (size_t u = 0; u < su; u++) {
            map[u] = nu;
            for (size_t b = 0; b < nu; b++)
                if (bkeys[b] == skeys[u])
                    map[u] = b;
            assert_true(map[u] < nu);
            memcpy(srows + u * dim, rows + map[u] * dim, dim * sizeof(float));
        }
        spw_cpu_forward_backward(&model, single, srows, 1.0f / EX, &p1, sgrads);
        assert_float_equal(p1, preds[i], 1e-7);
        for (size_t u = 0; u < su; u++)
            for (uint32_t d = 0; d < dim; d++)
                sum[map[u] * dim + d] += sgrads[u * dim + d];
    }
    for (size_t j = 0; j < nu * dim; j++)
        assert_float_equal(grads[j], sum[j], 1e-6);
    free(rows);
    free(grads);
    free(sum);
    spw_batch_destroy(batch);
    spw_batch_destroy(single);
}

static void test_trn_model_row_norms(void **state)
{
    (void)state;
    const float g[6] = {3, 4, 0, 0, -1, 0};
    float norms[3];
    spw_cpu_row_norms(g, 3, 2, norms);
    assert_true(norms[0] == 5.0f && norms[1] == 0.0f && norms[2] == 1.0f);
}

/* Top-k against a naive O(n^2) rank: a row is chosen iff fewer than m rows outrank it. */
static void check_topk(const float *norms, size_t n, size_t m)
{
    uint64_t *scratch = malloc(n * sizeof(uint64_t) + 1);
    uint8_t *sel = malloc(n + 1);
    assert_non_null(scratch);
    assert_non_null(sel);
    spw_cpu_topk_select(norms, n, m, scratch, sel);
    size_t chosen = 0;
    for (size_t r = 0; r < n; r++) {
        float a = norms[r];
        double ka = isnan(a) ? INFINITY : (a > 0 ? a : 0);
        size_t above = 0;
        for (size_t q = 0; q < n; q++) {
            float b = norms[q];
            double kb = isnan(b) ? INFINITY : (b > 0 ? b : 0);
            bool nan_a = isnan(a), nan_b = isnan(b);
            bool outranks = nan_b != nan_a ? nan_b : (kb > ka || (kb == ka && q < r));
            above += outranks;
        }
        assert_int_equal(sel[r], above < m);
        chosen += sel[r];
    }
    assert_int_equal(chosen, m < n ? m : n);
    free(scratch);
    free(sel);
}

static void test_trn_model_topk_select_matches_rank(void **state)
{
    (void)state;
    uint64_t s = 77;
    enum { N = 1500 };
    float *norms = malloc(N * sizeof(float));
    assert_non_null(norms);
    for (int trial = 0; trial < 12; trial++) {
        size_t n = 1 + rng_next(&s) % N;
        unsigned levels = trial % 3 == 0 ? 3 : 1000000; /* many ties, or few */
        for (size_t r = 0; r < n; r++)
            norms[r] = (float)(rng_next(&s) % levels) * 0.125f;
        if (trial == 5) {
            norms[0] = NAN;
            norms[n - 1] = -1.0f;
        }
        check_topk(norms, n, 0);
        check_topk(norms, n, 1);
        check_topk(norms, n, n / 10);
        check_topk(norms, n, n / 2 + 1);
        check_topk(norms, n, n);
    }
    /* sorted inputs, the classic quickselect worst cases */
    for (size_t r = 0; r < N; r++)
        norms[r] = (float)r;
    check_topk(norms, N, 100);
    for (size_t r = 0; r < N; r++)
        norms[r] = (float)(N - r);
    check_topk(norms, N, 100);
    free(norms);
}

static void test_trn_model_backend_selection(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_model model;
    enum spw_backend_kind kind;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 4), SPW_OK);
    assert_int_equal(spw_backend_kind_parse("auto", &kind), SPW_OK);
    assert_int_equal(kind, SPW_BACKEND_AUTO);
    assert_int_equal(spw_backend_kind_parse("gpu", &kind), SPW_ERR_INVALID);
    assert_string_equal(spw_backend_kind_name(SPW_BACKEND_CUDA), "cuda");

    spw_backend_t *cpu = spw_backend_new(SPW_BACKEND_CPU, &model, errstr, sizeof(errstr));
    assert_non_null(cpu);
    assert_int_equal(spw_backend_kind(cpu), SPW_BACKEND_CPU);
    assert_int_equal(spw_backend_model(cpu)->dim, 5);
    spw_backend_destroy(cpu);

    spw_backend_t *aut = spw_backend_new(SPW_BACKEND_AUTO, &model, errstr, sizeof(errstr));
    assert_non_null(aut);
    bool gpu = spw_cuda_built() && spw_cuda_device_count() > 0;
    assert_int_equal(spw_backend_kind(aut), gpu ? SPW_BACKEND_CUDA : SPW_BACKEND_CPU);
    spw_backend_destroy(aut);

    errstr[0] = '\0';
    spw_backend_t *cuda = spw_backend_new(SPW_BACKEND_CUDA, &model, errstr, sizeof(errstr));
    if (gpu) {
        assert_non_null(cuda);
        spw_backend_destroy(cuda);
    } else {
        assert_null(cuda);
        assert_non_null(strstr(errstr, "cuda"));
    }
    spw_backend_destroy(NULL);

    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 0), SPW_ERR_INVALID);
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, SPW_TRN_MAX_LATENT + 1), SPW_ERR_INVALID);
    enum spw_model_kind mk;
    assert_int_equal(spw_model_kind_parse("fm", &mk), SPW_OK);
    assert_int_equal(mk, SPW_MODEL_FM);
    assert_int_equal(spw_model_kind_parse("deepfm", &mk), SPW_OK);
    assert_int_equal(mk, SPW_MODEL_DEEPFM);
    assert_int_equal(spw_model_init(&model, SPW_MODEL_DEEPFM, 8), SPW_ERR_INVALID);
    assert_int_equal(spw_model_kind_parse("wide", &mk), SPW_ERR_INVALID);
}

/* The CPU backend object gives what the pure functions give. */
static void test_trn_model_backend_cpu_dispatch(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 2), SPW_OK);
    spw_backend_t *be = spw_backend_new(SPW_BACKEND_CPU, &model, errstr, sizeof(errstr));
    assert_non_null(be);
    spw_batch_t *batch = small_batch();
    size_t nu = spw_batch_unique(batch);
    float *rows = random_rows(nu, model.dim, 4, 0.5f);
    float p1[4], p2[4], g1[64], g2[64], n1[16], n2[16];
    uint8_t s1[16], s2[16];
    uint64_t scratch[16];
    double l1, l2 = spw_cpu_forward_backward(&model, batch, rows, 0.5f, p2, g2);
    assert_int_equal(spw_backend_forward_backward(be, batch, rows, 0.5f, p1, g1, &l1), SPW_OK);
    assert_memory_equal(p1, p2, sizeof(p1));
    assert_memory_equal(g1, g2, nu * model.dim * sizeof(float));
    assert_true(l1 == l2);
    assert_int_equal(spw_backend_forward(be, batch, rows, p1, &l1), SPW_OK);
    assert_memory_equal(p1, p2, sizeof(p1));
    assert_int_equal(spw_backend_row_norms(be, g1, nu, n1), SPW_OK);
    spw_cpu_row_norms(g1, nu, model.dim, n2);
    assert_memory_equal(n1, n2, nu * sizeof(float));
    assert_int_equal(spw_backend_topk_select(be, n1, nu, 2, s1), SPW_OK);
    spw_cpu_topk_select(n1, nu, 2, scratch, s2);
    assert_memory_equal(s1, s2, nu);
    free(rows);
    spw_batch_destroy(batch);
    spw_backend_destroy(be);
}

SPW_TEST_MAIN(test_trn_model_forward_matches_naive, test_trn_model_lr_by_hand,
              test_trn_model_gradient_matches_finite_differences,
              test_trn_model_reduces_duplicate_keys, test_trn_model_row_norms,
              test_trn_model_topk_select_matches_rank, test_trn_model_backend_selection,
              test_trn_model_backend_cpu_dispatch)
