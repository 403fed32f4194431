/* Unit tests of the deep models in the trainer: model descriptions and fields, the batch's dense
 * block prefix and field ids, the gradient of DeepFM and DCN-v2 (pooling, the network, the FM
 * part, the dense blocks) against finite differences, top-k pinning of the dense blocks, the
 * backend dispatch, and the reference trainer learning a nonlinear target. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/hash.h"
#include "sparrow/trainer.h"
#include "test_rng.h"

static const struct spw_model_field FIELDS3[3] = {
    {.id = 7, .pooling = SPW_POOL_SUM},
    {.id = 9, .pooling = SPW_POOL_MEAN},
    {.id = 11, .pooling = SPW_POOL_SUM},
};

static void deep_model(struct spw_model *m, enum spw_model_kind kind, uint32_t k, const char *mlp,
                       uint32_t cross)
{
    char err[256];
    spw_err_t rc =
        spw_model_init_deep(m, kind, k, FIELDS3, 3, mlp, cross, 0.0f, 5, err, sizeof(err));
    if (rc != SPW_OK)
        fail_msg("%s", err);
}

static void test_trn_deep_describe_round_trip(void **state)
{
    (void)state;
    struct spw_model m, back;
    char text[SPW_MODEL_DESC_MAX], err[256];
    deep_model(&m, SPW_MODEL_DCNV2, 4, "8,6", 2);
    int len = spw_model_describe(&m, text, sizeof(text));
    assert_true(len > 0);
    assert_string_equal(text, "dcnv2 k=4 fields=7:sum,9:mean,11:sum cross=2 mlp=8,6 dropout=0 "
                              "seed=5");
    assert_int_equal(spw_model_parse(text, &back, err, sizeof(err)), SPW_OK);
    assert_memory_equal(&m, &back, sizeof(m));
    assert_int_equal(back.dense.in_dim, 12);
    assert_int_equal(back.dense_blocks,
                     (spw_dense_spec_param_count(&back.dense) + back.dim - 1) / back.dim);

    struct spw_model fm;
    assert_int_equal(spw_model_init(&fm, SPW_MODEL_FM, 8), SPW_OK);
    assert_true(spw_model_describe(&fm, text, sizeof(text)) > 0);
    assert_string_equal(text, "fm k=8");
    assert_int_equal(spw_model_parse("lr", &back, err, sizeof(err)), SPW_OK);
    assert_int_equal(back.kind, SPW_MODEL_LR);
    assert_int_equal(spw_model_describe(&m, text, 10), SPW_ERR_TOO_BIG);

    /* untrusted descriptions: each refused with the item named */
    static const char *const bad[] = {
        "",
        "wide k=8",
        "fm k=0",
        "fm k",
        "deepfm k=4 fields=7:sum mlp=",          /* deepfm needs a hidden layer */
        "deepfm k=4 fields=7:max mlp=8",         /* pooling */
        "deepfm k=4 fields=7,7 mlp=8",           /* a field twice */
        "dcnv2 k=4 fields=7 cross=0 mlp=8",      /* dcnv2 without cross layers */
        "deepfm k=4 fields=7 mlp=8 dropout=1",   /* dropout range */
        "deepfm k=4 fields=7 mlp=8 colour=blue", /* unknown item */
        "deepfm k=4 fields=99999999999 mlp=8",   /* field id range */
        "deepfm k=4 fields=7 mlp=8,x",           /* width */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (spw_model_parse(bad[i], &back, err, sizeof(err)) == SPW_OK)
            fail_msg("\"%s\" was accepted", bad[i]);
}

static void test_trn_deep_fields(void **state)
{
    (void)state;
    struct spw_model_field f[SPW_TRN_MAX_FIELDS];
    uint32_t n = 0;
    char err[512];
    assert_int_equal(spw_model_fields_parse("I1, C2:mean ,17", f, &n, err, sizeof(err)), SPW_OK);
    assert_int_equal(n, 3);
    assert_int_equal(f[0].id, spw_hash_field_name("I1", 2));
    assert_int_equal(f[0].pooling, SPW_POOL_SUM);
    assert_int_equal(f[1].id, spw_hash_field_name("C2", 2));
    assert_int_equal(f[1].pooling, SPW_POOL_MEAN);
    assert_int_equal(f[2].id, 17);
    assert_int_equal(spw_model_fields_parse("I1,I1", f, &n, err, sizeof(err)), SPW_ERR_INVALID);
    assert_non_null(strstr(err, "twice"));
    assert_int_equal(spw_model_fields_parse("I1,,C1", f, &n, err, sizeof(err)), SPW_ERR_INVALID);
    assert_int_equal(spw_model_fields_parse("C1:max", f, &n, err, sizeof(err)), SPW_ERR_INVALID);

    char path[] = "/tmp/spw_test_fieldsXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    fprintf(fp, "# the fields\nuser = 3\n\n  item = 4 mean  # multi-valued\nC7\n");
    fclose(fp);
    char at[64];
    snprintf(at, sizeof(at), "@%s", path);
    assert_int_equal(spw_model_fields_parse(at, f, &n, err, sizeof(err)), SPW_OK);
    assert_int_equal(n, 3);
    assert_int_equal(f[0].id, 3);
    assert_int_equal(f[1].id, 4);
    assert_int_equal(f[1].pooling, SPW_POOL_MEAN);
    assert_int_equal(f[2].id, spw_hash_field_name("C7", 2));
    fp = fopen(path, "w");
    fprintf(fp, "user = 3\nitem = x\n");
    fclose(fp);
    assert_int_equal(spw_model_fields_parse(at, f, &n, err, sizeof(err)), SPW_ERR_INVALID);
    assert_non_null(strstr(err, ":2:")); /* names the line */
    unlink(path);
    assert_int_equal(spw_model_fields_parse(at, f, &n, err, sizeof(err)), SPW_ERR_NOT_FOUND);
    assert_non_null(strstr(err, path));
}

/* A batch of 4 examples over fields 7 (single), 9 (multi-valued, mean), 11, and an unknown 5. */
static spw_batch_t *deep_batch(const struct spw_model *m)
{
    char err[128];
    spw_batch_t *b = spw_batch_new(0, 0, err, sizeof(err));
    assert_non_null(b);
    assert_int_equal(spw_batch_set_model(b, m), SPW_OK);
    const uint64_t k1[5] = {101, 201, 202, 301, 501};
    const uint32_t f1[5] = {7, 9, 9, 11, 5};
    const float w1[5] = {1.0f, 1.0f, 0.5f, 2.0f, 1.0f};
    const uint64_t k2[2] = {102, 201};
    const uint32_t f2[2] = {7, 9};
    const uint64_t k3[3] = {101, 203, 302};
    const uint32_t f3[3] = {7, 9, 11};
    const float w3[3] = {0.5f, 1.5f, 1.0f};
    assert_int_equal(spw_batch_add_fields(b, 1.0f, NAN, 0, 5, k1, w1, f1), SPW_OK);
    assert_int_equal(spw_batch_add_fields(b, 0.0f, NAN, 0, 2, k2, NULL, f2), SPW_OK);
    assert_int_equal(spw_batch_add_fields(b, 0.7f, NAN, 0, 3, k3, w3, f3), SPW_OK);
    assert_int_equal(spw_batch_add_fields(b, 0.0f, NAN, 0, 0, NULL, NULL, NULL), SPW_OK);
    return b;
}

static void test_trn_deep_batch_prefix(void **state)
{
    (void)state;
    struct spw_model m;
    deep_model(&m, SPW_MODEL_DEEPFM, 3, "4", 0);
    spw_batch_t *b = deep_batch(&m);
    const uint64_t *keys = spw_batch_keys(b);
    assert_int_equal(keys[0], SPW_TRN_BIAS_KEY);
    for (uint32_t i = 0; i < m.dense_blocks; i++)
        assert_true(keys[1 + i] == spw_dense_block_key(i));
    assert_true(keys[1 + m.dense_blocks] == 101);
    assert_int_equal(spw_batch_unique(b), 1 + m.dense_blocks + 8);
    assert_int_equal(spw_batch_occ_fields(b)[4], 5);
    /* the prefix survives a reset, and cannot change on a non-empty batch */
    assert_int_equal(spw_batch_set_prefix(b, NULL, 0), SPW_ERR_STATE);
    spw_batch_reset(b);
    assert_int_equal(
        spw_batch_add_fields(b, 0.0f, NAN, 0, 1, (uint64_t[]){42}, NULL, (uint32_t[]){7}), SPW_OK);
    assert_true(spw_batch_keys(b)[1] == spw_dense_block_key(0));
    assert_int_equal(spw_batch_unique(b), 2 + m.dense_blocks);
    spw_batch_destroy(b);
}

static float *random_rows(size_t n, uint32_t dim, uint64_t seed, float scale)
{
    float *rows = malloc(n * dim * sizeof(float));
    assert_non_null(rows);
    for (size_t i = 0; i < n * dim; i++)
        rows[i] = rng_uniform(&seed, -scale, scale);
    return rows;
}

static double loss_of(spw_deep_t *deep, const spw_batch_t *b, const float *rows)
{
    float dense[4096], preds[8];
    spw_deep_dense_from_rows(deep, rows, dense);
    double loss = 0.0;
    assert_int_equal(spw_deep_forward(deep, b, rows, dense, preds, &loss), SPW_OK);
    return loss;
}

/* Every float of every row (features, bias, dense blocks) against central differences. */
static void check_gradient(enum spw_model_kind kind, const char *mlp, uint32_t cross)
{
    struct spw_model m;
    deep_model(&m, kind, 3, mlp, cross);
    assert_true(spw_model_dense_params(&m) <= 4096);
    spw_batch_t *b = deep_batch(&m);
    char err[256];
    spw_deep_t *deep = spw_deep_new(&m, err, sizeof(err));
    assert_non_null(deep);
    size_t nu = spw_batch_unique(b), n = nu * m.dim;
    float *rows = random_rows(nu, m.dim, 11, 0.6f);
    float *grads = malloc(n * sizeof(float));
    float dense[4096], preds[8];
    const float scale = 0.5f;
    double loss = 0.0;
    spw_deep_dense_from_rows(deep, rows, dense);
    assert_int_equal(spw_deep_forward_backward(deep, b, rows, dense, scale, preds, grads, &loss),
                     SPW_OK);
    assert_float_equal(loss, loss_of(deep, b, rows), 1e-9);
    size_t nonzero_blocks = 0;
    for (size_t j = 0; j < n; j++) {
        const float h = 1e-3f;
        float keep = rows[j];
        rows[j] = keep + h;
        double up = loss_of(deep, b, rows);
        rows[j] = keep - h;
        double down = loss_of(deep, b, rows);
        rows[j] = keep;
        double num = scale * (up - down) / ((double)(keep + h) - (double)(keep - h));
        if (fabs(num - grads[j]) > 3e-3 * fmax(1.0, fabs(num)))
            fail_msg("%s row %zu float %zu: analytic %g numeric %g", spw_model_kind_name(kind),
                     j / m.dim, j % m.dim, grads[j], num);
        if (j >= m.dim && j < (1 + (size_t)m.dense_blocks) * m.dim)
            nonzero_blocks += grads[j] != 0.0f;
    }
    assert_true(nonzero_blocks > spw_model_dense_params(&m) / 2); /* the network is trained */
    /* the padding of the last block never moves */
    for (size_t j = m.dim + spw_model_dense_params(&m); j < (1 + (size_t)m.dense_blocks) * m.dim;
         j++)
        assert_true(grads[j] == 0.0f);
    /* the unknown field's feature (key 501) reaches the FM part only */
    assert_true(spw_deep_unknown_field_features(deep) > 0);
    free(rows);
    free(grads);
    spw_deep_destroy(deep);
    spw_batch_destroy(b);
}

static void test_trn_deep_gradient_matches_finite_differences(void **state)
{
    (void)state;
    check_gradient(SPW_MODEL_DEEPFM, "5,4", 0);
    check_gradient(SPW_MODEL_DCNV2, "4", 2);
    check_gradient(SPW_MODEL_DCNV2, "", 1);
}

/* The backend computes a deep model with the weights init + block rows; a batch without the
 * blocks is refused for training. */
static void test_trn_deep_backend_dispatch(void **state)
{
    (void)state;
    struct spw_model m;
    deep_model(&m, SPW_MODEL_DEEPFM, 3, "4", 0);
    char err[256];
    spw_backend_t *be = spw_backend_new(SPW_BACKEND_CPU, &m, err, sizeof(err));
    assert_non_null(be);
    spw_batch_t *b = deep_batch(&m);
    size_t nu = spw_batch_unique(b);
    float *rows = random_rows(nu, m.dim, 3, 0.3f);
    float *g1 = malloc(nu * m.dim * sizeof(float)), *g2 = malloc(nu * m.dim * sizeof(float));
    float p1[4], p2[4], dense[4096];
    double l1, l2;
    assert_int_equal(spw_backend_forward_backward(be, b, rows, 0.25f, p1, g1, &l1), SPW_OK);
    spw_deep_t *deep = spw_deep_new(&m, err, sizeof(err));
    spw_deep_dense_from_rows(deep, rows, dense);
    float init[4096];
    spw_model_dense_init(&m, init);
    assert_float_equal(dense[0], init[0] + rows[m.dim], 1e-7);
    assert_int_equal(spw_deep_forward_backward(deep, b, rows, dense, 0.25f, p2, g2, &l2), SPW_OK);
    assert_memory_equal(p1, p2, sizeof(p1));
    assert_memory_equal(g1, g2, nu * m.dim * sizeof(float));

    char e2[128];
    spw_batch_t *plain = spw_batch_new(0, 0, e2, sizeof(e2));
    assert_int_equal(
        spw_batch_add_fields(plain, 1.0f, NAN, 0, 1, (uint64_t[]){5}, NULL, (uint32_t[]){7}),
        SPW_OK);
    assert_int_equal(spw_deep_forward_backward(deep, plain, rows, dense, 1.0f, p2, g2, &l2),
                     SPW_ERR_INVALID);
    /* the backend reads the blocks from the rows: it refuses a batch without them */
    assert_int_equal(spw_backend_forward(be, plain, rows, p2, &l2), SPW_ERR_INVALID);
    assert_int_equal(spw_backend_forward_backward(be, plain, rows, 1.0f, p2, g2, &l2),
                     SPW_ERR_INVALID);
    spw_batch_destroy(plain);
    spw_deep_destroy(deep);
    spw_batch_destroy(b);
    spw_backend_destroy(be);
    free(rows);
    free(g1);
    free(g2);
}

/* Top-k never leaves a dense block behind, and keeps ratio of the other rows. */
static void test_trn_deep_topk_pins_dense_blocks(void **state)
{
    (void)state;
    enum { BLOCKS = 6, OTHER = 20, N = 1 + BLOCKS + OTHER, DIM = 4 };
    uint64_t keys[N];
    float grads[N * DIM];
    keys[0] = 0;
    for (int i = 0; i < BLOCKS; i++)
        keys[1 + i] = spw_dense_block_key((uint32_t)i);
    for (int i = 0; i < OTHER; i++)
        keys[1 + BLOCKS + i] = 1000 + (uint64_t)i;
    for (int r = 0; r < N * DIM; r++) /* the blocks' gradients are the smallest */
        grads[r] = r / DIM >= 1 && r / DIM <= BLOCKS ? 1e-6f : 1.0f + (float)r;
    struct spw_topk_conf conf = {
        .dim = DIM, .ratio = 0.25, .error_feedback = true, .residual_max_rows = 1000};
    char err[128];
    spw_topk_t *tk = spw_topk_new(&conf, NULL, err, sizeof(err));
    assert_non_null(tk);
    struct spw_push_set out;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, N, &out), SPW_OK);
    /* 6 blocks + ceil(0.25 × 21) = 6 others */
    assert_int_equal(out.n, BLOCKS + 6);
    int blocks_sent = 0;
    for (size_t i = 0; i < out.n; i++)
        blocks_sent += spw_key_is_dense(out.keys[i]);
    assert_int_equal(blocks_sent, BLOCKS);
    spw_topk_destroy(tk);
}

/* Window logloss of the reference trainer on a three-way parity of three binary fields after
 * 800 batches: no pairwise model can fit it (every pair of fields is independent of the label),
 * a network over the three embeddings can. */
static double parity3_logloss(struct spw_trainer_params *p)
{
    char err[256], e2[128];
    p->topk.dim = p->model.dim;
    p->batch = 64;
    p->eval_window = 4000;
    spw_ref_t *ref = spw_ref_new(p, err, sizeof(err));
    assert_non_null(ref);
    spw_batch_t *b = spw_batch_new(0, 0, e2, sizeof(e2));
    assert_int_equal(spw_batch_set_model(b, &p->model), SPW_OK);
    uint64_t rng = 17;
    for (int step = 0; step < 800; step++) {
        spw_batch_reset(b);
        for (int i = 0; i < 64; i++) {
            uint64_t r = rng_next(&rng);
            uint32_t a = r & 1, c = (r >> 1) & 1, d = (r >> 2) & 1;
            float y = (a ^ c ^ d) ? 1.0f : 0.0f;
            uint64_t keys[3] = {100 + a, 200 + c, 300 + d};
            assert_int_equal(
                spw_batch_add_fields(b, y, NAN, 0, 3, keys, NULL, (uint32_t[]){1, 2, 3}), SPW_OK);
        }
        assert_int_equal(spw_ref_train_batch(ref, b), SPW_OK);
    }
    struct spw_pv_report r;
    spw_ref_report(ref, &r);
    spw_batch_destroy(b);
    spw_ref_destroy(ref);
    return r.window.logloss;
}

/* The reference trainer with DeepFM learns what FM cannot. */
static void test_trn_deep_ref_learns_beyond_fm(void **state)
{
    (void)state;
    struct spw_trainer_params p;
    spw_trainer_params_default(&p);
    assert_int_equal(spw_model_init(&p.model, SPW_MODEL_FM, 4), SPW_OK);
    double fm = parity3_logloss(&p);
    const struct spw_model_field f3[3] = {{.id = 1}, {.id = 2}, {.id = 3}};
    char err[256];
    assert_int_equal(spw_model_init_deep(&p.model, SPW_MODEL_DEEPFM, 4, f3, 3, "16", 0, 0.0f, 3,
                                         err, sizeof(err)),
                     SPW_OK);
    double deep = parity3_logloss(&p);
    print_message("three-way parity: fm %.4f deepfm %.4f (constant ln 2 = 0.6931)\n", fm, deep);
    assert_true(fm > 0.6); /* the constant predictor's ln 2, give or take noise */
    if (!(deep < 0.2))
        fail_msg("deepfm window logloss %g on three-way parity (fm %g)", deep, fm);
}

SPW_TEST_MAIN(test_trn_deep_describe_round_trip, test_trn_deep_fields, test_trn_deep_batch_prefix,
              test_trn_deep_gradient_matches_finite_differences, test_trn_deep_backend_dispatch,
              test_trn_deep_topk_pins_dense_blocks, test_trn_deep_ref_learns_beyond_fm)
