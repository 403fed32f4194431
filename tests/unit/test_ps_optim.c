/* Unit tests of the shard's optimizers, clipping, L2, row init and staleness penalties, against
 * hand-computed values. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <string.h>

#include "ps_int.h"
#include "sparrow/hash.h"

#define TOL 1e-6

static struct spw_ps_optim_conf conf_of(enum spw_ps_optimizer kind, float lr)
{
    struct spw_ps_optim_conf c;
    spw_ps_optim_conf_default(&c);
    c.kind = kind;
    c.lr = lr;
    return c;
}

static void test_ps_optim_sgd(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_SGD, 0.1f);
    float w[2] = {1.0f, -2.0f};
    float g[2] = {0.5f, 1.0f};
    assert_true(spw_ps__row_apply(&c, 2, w, NULL, g, 1.0f));
    assert_float_equal(w[0], 0.95, TOL);
    assert_float_equal(w[1], -2.1, TOL);
}

static void test_ps_optim_sgd_l2(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_SGD, 0.1f);
    c.l2 = 0.1f;
    float w[2] = {1.0f, -2.0f};
    float g[2] = {0.5f, 1.0f};
    /* g' = g + l2·w = (0.6, 0.8) */
    assert_true(spw_ps__row_apply(&c, 2, w, NULL, g, 1.0f));
    assert_float_equal(w[0], 0.94, TOL);
    assert_float_equal(w[1], -2.08, TOL);
}

static void test_ps_optim_clip(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_SGD, 1.0f);
    c.clip_norm = 1.0f;
    float w[2] = {0.0f, 0.0f};
    float g[2] = {3.0f, 4.0f}; /* norm 5 -> scaled to (0.6, 0.8) */
    assert_true(spw_ps__row_apply(&c, 2, w, NULL, g, 1.0f));
    assert_float_equal(w[0], -0.6, TOL);
    assert_float_equal(w[1], -0.8, TOL);
    /* Below the clip norm the gradient is untouched. */
    float g2[2] = {0.3f, 0.4f};
    assert_true(spw_ps__row_apply(&c, 2, w, NULL, g2, 1.0f));
    assert_float_equal(w[0], -0.9, TOL);
    assert_float_equal(w[1], -1.2, TOL);
}

static void test_ps_optim_adagrad(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_ADAGRAD, 0.1f);
    float w[1] = {1.0f}, acc[1] = {0.0f}, g[1] = {2.0f};
    assert_true(spw_ps__row_apply(&c, 1, w, acc, g, 1.0f));
    assert_float_equal(acc[0], 4.0, TOL);
    assert_float_equal(w[0], 0.9, TOL); /* 1 - 0.1·2/2 */
    assert_true(spw_ps__row_apply(&c, 1, w, acc, g, 1.0f));
    assert_float_equal(acc[0], 8.0, TOL);
    assert_float_equal(w[0], 0.8292893218813453, TOL); /* 0.9 - 0.2/sqrt(8) */
}

/* The reference Adagrad step, scalar and in the order the optimizer documents. */
static void adagrad_ref(const struct spw_ps_optim_conf *c, uint32_t dim, float *w, float *acc,
                        const float *g, float alpha)
{
    double norm2 = 0.0;
    for (uint32_t j = 0; j < dim; j++)
        norm2 += (double)g[j] * g[j];
    float scale = 1.0f;
    if (c->clip_norm > 0.0f && norm2 > (double)c->clip_norm * c->clip_norm)
        scale = (float)(c->clip_norm / sqrt(norm2));
    float lr = c->lr * alpha;
    for (uint32_t j = 0; j < dim; j++) {
        float b = g[j] * scale + c->l2 * w[j];
        acc[j] += b * b;
        w[j] -= lr * b / (sqrtf(acc[j]) + c->eps);
    }
}

/* Every width (vector blocks and scalar tail), with clipping, L2 and a staleness scale: the
 * optimizer's result is bit-identical to the scalar reference. */
static void test_ps_optim_adagrad_widths_bit_exact(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_ADAGRAD, 0.05f);
    c.l2 = 0.01f;
    c.clip_norm = 2.0f;
    uint64_t rng = 12345;
    for (uint32_t dim = 1; dim <= 37; dim++) {
        float w[37], acc[37], g[37], w_ref[37], acc_ref[37];
        for (int round = 0; round < 20; round++) {
            for (uint32_t j = 0; j < dim; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                g[j] = (float)((int)(rng >> 40) % 2001 - 1000) / 700.0f;
                if (round == 0) {
                    w[j] = w_ref[j] = (float)((int)(rng >> 20) % 201 - 100) / 1000.0f;
                    acc[j] = acc_ref[j] = 0.0f;
                }
            }
            float alpha = round % 3 == 0 ? 1.0f : 1.0f / (float)(1 + round % 5);
            assert_true(spw_ps__row_apply(&c, dim, w, acc, g, alpha));
            adagrad_ref(&c, dim, w_ref, acc_ref, g, alpha);
            assert_memory_equal(w, w_ref, dim * sizeof(float));
            assert_memory_equal(acc, acc_ref, dim * sizeof(float));
        }
    }
}

/* A non-finite value anywhere (in a vector block or in the tail) rejects the whole row. */
static void test_ps_optim_nonfinite_any_position(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_ADAGRAD, 0.1f);
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (uint32_t pos = 0; pos < 11; pos++) {
        for (int b = 0; b < 3; b++) {
            float w[11], acc[11], g[11];
            for (uint32_t j = 0; j < 11; j++) {
                w[j] = 0.5f;
                acc[j] = 1.0f;
                g[j] = 0.25f;
            }
            g[pos] = bad[b];
            assert_false(spw_ps__row_apply(&c, 11, w, acc, g, 1.0f));
            for (uint32_t j = 0; j < 11; j++) {
                assert_true(w[j] == 0.5f);
                assert_true(acc[j] == 1.0f);
            }
        }
    }
}

static void test_ps_optim_adam(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_ADAM, 0.1f);
    float w[1] = {0.0f}, slots[3] = {0};
    float g1[1] = {1.0f}, g2[1] = {2.0f};
    assert_true(spw_ps__row_apply(&c, 1, w, slots, g1, 1.0f));
    assert_float_equal(w[0], -0.1, TOL);
    assert_true(spw_ps__row_apply(&c, 1, w, slots, g2, 1.0f));
    assert_float_equal(slots[0], 0.29, TOL);     /* m */
    assert_float_equal(slots[1], 0.004999, TOL); /* v */
    uint32_t step;
    memcpy(&step, &slots[2], sizeof(step));
    assert_int_equal(step, 2);
    assert_float_equal(w[0], -0.1965182009718337, TOL);
}

static void test_ps_optim_ftrl(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_FTRL, 0.1f);
    c.ftrl_beta = 1.0f;
    c.ftrl_l1 = 0.5f;
    float w[1] = {0.0f}, slots[2] = {0};
    float g1[1] = {1.0f}, g2[1] = {-0.5f};
    assert_true(spw_ps__row_apply(&c, 1, w, slots, g1, 1.0f));
    assert_float_equal(slots[0], 1.0, TOL); /* z */
    assert_float_equal(slots[1], 1.0, TOL); /* n */
    assert_float_equal(w[0], -0.025, TOL);
    assert_true(spw_ps__row_apply(&c, 1, w, slots, g2, 1.0f));
    assert_float_equal(slots[0], 0.5295084971874737, TOL);
    assert_float_equal(slots[1], 1.25, TOL);
    assert_float_equal(w[0], -0.0013932022500210309, TOL);
    /* |z| <= l1 makes the weight exactly zero. */
    float w3[1] = {0.0f}, s3[2] = {0}, g3[1] = {0.4f};
    assert_true(spw_ps__row_apply(&c, 1, w3, s3, g3, 1.0f));
    assert_true(w3[0] == 0.0f);
}

static void test_ps_optim_ftrl_init_consistent(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_FTRL, 0.1f);
    c.ftrl_l1 = 0.2f;
    c.l2 = 0.3f;
    c.init_scale = 0.5f;
    float data[4 * 3];
    spw_ps__row_init(&c, 4, 7, 12345, data);
    float before[4];
    memcpy(before, data, sizeof(before));
    float zero[4] = {0};
    assert_true(spw_ps__row_apply(&c, 4, data, data + 4, zero, 1.0f));
    for (int j = 0; j < 4; j++)
        assert_float_equal(data[j], before[j], 1e-6);
}

/* The initial weights are the documented formula, bit for bit, whichever code path (vector or
 * scalar, any dim's tail) computes them: scale * ((h >> 40) * 2^-23 - 1), h = mix64(key ^
 * mix64(seed + 0x9e3779b97f4a7c15 * (j + 1))). Trainers and serving compute the same rows. */
static void test_ps_optim_init_matches_formula(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_SGD, 0.1f);
    c.init_scale = 0.37f;
    const uint64_t keys[] = {1, 99, 0xdeadbeefcafef00dull, 1ull << 40};
    float got[40];
    for (uint32_t dim = 1; dim <= 40; dim++)
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            spw_ps__row_init(&c, dim, 42 + dim, keys[k], got);
            for (uint32_t j = 0; j < dim; j++) {
                uint64_t mix = spw_hash_mix64(42 + dim + 0x9e3779b97f4a7c15ull * (j + 1));
                uint64_t h = spw_hash_mix64(keys[k] ^ mix);
                volatile float u = (float)(h >> 40) * (1.0f / 8388608.0f); /* exact */
                volatile float v = u - 1.0f;
                float want = c.init_scale * v;
                assert_memory_equal(&got[j], &want, sizeof(float));
            }
        }
}

static void test_ps_optim_init_deterministic(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_ADAGRAD, 0.1f);
    float a[16 * 2], b[16 * 2], d[16 * 2];
    spw_ps__row_init(&c, 16, 42, 99, a);
    spw_ps__row_init(&c, 16, 42, 99, b);
    spw_ps__row_init(&c, 16, 43, 99, d);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, d, 16 * sizeof(float));
    for (int j = 0; j < 16; j++) {
        assert_true(fabsf(a[j]) <= c.init_scale);
        assert_true(a[16 + j] == 0.0f); /* accumulator */
    }
}

static void test_ps_optim_nonfinite_rejected(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_ADAGRAD, 0.1f);
    float w[2] = {1.0f, 2.0f}, acc[2] = {0.5f, 0.5f};
    float g_nan[2] = {0.1f, NAN}, g_inf[2] = {INFINITY, 0.1f};
    assert_false(spw_ps__row_apply(&c, 2, w, acc, g_nan, 1.0f));
    assert_false(spw_ps__row_apply(&c, 2, w, acc, g_inf, 1.0f));
    assert_true(w[0] == 1.0f && w[1] == 2.0f && acc[0] == 0.5f && acc[1] == 0.5f);
}

static void test_ps_optim_staleness_scales_step(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_SGD, 1.0f);
    float w[1] = {0.0f}, g[1] = {1.0f};
    assert_true(spw_ps__row_apply(&c, 1, w, NULL, g, 0.25f));
    assert_float_equal(w[0], -0.25, TOL);
}

static void test_ps_optim_penalty_values(void **state)
{
    (void)state;
    struct spw_ps_penalty p;
    assert_int_equal(spw_ps_penalty_parse("none", &p), SPW_OK);
    assert_float_equal(spw_ps_penalty_alpha(&p, 7), 1.0, TOL);
    assert_int_equal(spw_ps_penalty_parse("inverse", &p), SPW_OK);
    assert_float_equal(spw_ps_penalty_alpha(&p, 0), 1.0, TOL);
    assert_float_equal(spw_ps_penalty_alpha(&p, 3), 0.25, TOL);
    assert_int_equal(spw_ps_penalty_parse("exp:0.5", &p), SPW_OK);
    assert_float_equal(spw_ps_penalty_alpha(&p, 3), 0.125, TOL);
    assert_float_equal(spw_ps_penalty_alpha(&p, 0), 1.0, TOL);
    assert_int_equal(spw_ps_penalty_parse("drop:2", &p), SPW_OK);
    assert_float_equal(spw_ps_penalty_alpha(&p, 2), 1.0, TOL);
    assert_true(spw_ps_penalty_alpha(&p, 3) < 0.0);
}

/* pserver.lr.latent with SGD, by hand: element 0 (the linear weight) steps by lr, elements 1..
 * (the FM latent vector) by lr_latent, both times the staleness scale. */
static void test_ps_optim_lr_latent_sgd(void **state)
{
    (void)state;
    struct spw_ps_optim_conf c = conf_of(SPW_PS_SGD, 0.1f);
    c.lr_latent = 0.01f;
    float w[3] = {1.0f, 1.0f, 1.0f};
    const float g[3] = {1.0f, 2.0f, 3.0f};
    assert_true(spw_ps__row_apply(&c, 3, w, NULL, g, 1.0f));
    assert_float_equal(w[0], 0.9, TOL);  /* 1 - 0.1 * 1 */
    assert_float_equal(w[1], 0.98, TOL); /* 1 - 0.01 * 2 */
    assert_float_equal(w[2], 0.97, TOL); /* 1 - 0.01 * 3 */
    assert_true(spw_ps__row_apply(&c, 3, w, NULL, g, 0.5f));
    assert_float_equal(w[0], 0.85, TOL);
    assert_float_equal(w[1], 0.97, TOL);
    assert_float_equal(w[2], 0.955, TOL);
    /* 0 means pserver.lr for the whole row; LR rows (dim 1) have no latent part */
    c.lr_latent = 0.0f;
    float w2[2] = {1.0f, 1.0f};
    assert_true(spw_ps__row_apply(&c, 2, w2, NULL, g, 1.0f));
    assert_float_equal(w2[0], 0.9, TOL);
    assert_float_equal(w2[1], 0.8, TOL);
    c.lr_latent = 5.0f;
    float w1 = 1.0f;
    assert_true(spw_ps__row_apply(&c, 1, &w1, NULL, g, 1.0f));
    assert_float_equal(w1, 0.9, TOL);
}

/* Adagrad, Adam and FTRL with lr_latent: each element as the same optimizer with that element's
 * rate, and FTRL's initial z still gives back the initial weights. */
static void test_ps_optim_lr_latent_others(void **state)
{
    (void)state;
    const float g[5] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
    enum spw_ps_optimizer kinds[3] = {SPW_PS_ADAGRAD, SPW_PS_ADAM, SPW_PS_FTRL};
    for (int k = 0; k < 3; k++) {
        struct spw_ps_optim_conf both = conf_of(kinds[k], 0.2f);
        both.lr_latent = 0.03f;
        struct spw_ps_optim_conf lin = conf_of(kinds[k], 0.2f);
        struct spw_ps_optim_conf lat = conf_of(kinds[k], 0.03f);
        float row[5 * 3 + 1], rlin[5 * 3 + 1], rlat[5 * 3 + 1];
        spw_ps__row_init(&both, 5, 3, 42, row);
        spw_ps__row_init(&lin, 5, 3, 42, rlin);
        spw_ps__row_init(&lat, 5, 3, 42, rlat);
        for (int step = 0; step < 3; step++) {
            assert_true(spw_ps__row_apply(&both, 5, row, row + 5, g, 0.5f));
            assert_true(spw_ps__row_apply(&lin, 5, rlin, rlin + 5, g, 0.5f));
            assert_true(spw_ps__row_apply(&lat, 5, rlat, rlat + 5, g, 0.5f));
        }
        assert_float_equal(row[0], rlin[0], 1e-6);
        for (int j = 1; j < 5; j++)
            assert_float_equal(row[j], rlat[j], 1e-6);
    }
    struct spw_ps_optim_conf f = conf_of(SPW_PS_FTRL, 0.2f);
    f.lr_latent = 0.05f;
    f.ftrl_l1 = 0.001f;
    f.init_scale = 0.1f;
    float row[3 + 6], w0[3 + 6], zero[3] = {0, 0, 0};
    spw_ps__row_init(&f, 3, 1, 7, row);
    memcpy(w0, row, sizeof(row));
    assert_true(spw_ps__row_apply(&f, 3, row, row + 3, zero, 1.0f));
    for (int j = 0; j < 3; j++)
        assert_float_equal(row[j], w0[j], 1e-6);
}

static void test_ps_optim_penalty_parse_rejects(void **state)
{
    (void)state;
    struct spw_ps_penalty p;
    const char *bad[] = {"",        "inv",      "exp:",  "exp:0",  "exp:1.5", "exp:-1",
                         "exp:nan", "exp:0.5x", "drop:", "drop:x", "drop:-1", "drop:99999999999",
                         "none "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(spw_ps_penalty_parse(bad[i], &p), SPW_ERR_INVALID);
    enum spw_ps_optimizer o;
    assert_int_equal(spw_ps_optimizer_parse("ftrl", &o), SPW_OK);
    assert_int_equal(o, SPW_PS_FTRL);
    assert_int_equal(spw_ps_optimizer_parse("adamw", &o), SPW_ERR_INVALID);
}

SPW_TEST_MAIN(test_ps_optim_sgd, test_ps_optim_sgd_l2, test_ps_optim_clip, test_ps_optim_adagrad,
              test_ps_optim_adagrad_widths_bit_exact, test_ps_optim_nonfinite_any_position,
              test_ps_optim_adam, test_ps_optim_ftrl, test_ps_optim_ftrl_init_consistent,
              test_ps_optim_init_deterministic, test_ps_optim_init_matches_formula,
              test_ps_optim_nonfinite_rejected, test_ps_optim_staleness_scales_step,
              test_ps_optim_penalty_values, test_ps_optim_penalty_parse_rejects,
              test_ps_optim_lr_latent_sgd, test_ps_optim_lr_latent_others)
