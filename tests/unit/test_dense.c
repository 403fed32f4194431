/* dense: the spec and its errors, the parameter layout, the forward against a double-precision
 * triple-loop reference, finite-difference gradients of every layer type (parameters and
 * inputs), workspace reuse, the optimizer steps, and a small nonlinear learning problem. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/dense.h"
#include "test_main.h"
#include "test_rng.h"

/* Finite differences: central, step FD_H, on the double reference; the float analytic gradient
 * must be within GRAD_TOL * (1 + |numeric|) of it, for every parameter and every input. */
#define FD_H     1e-5
#define GRAD_TOL 1e-4
/* Forward: float network against the double reference, within FWD_TOL * (1 + |reference|). */
#define FWD_TOL 1e-5

/* ---- the reference: plain loops in double, the layout from the public header ---- */

/* logits (n) of the spec's network on params (double) and x (double, n × in_dim); train_t >= 0:
 * dropout with mask stream train_t. Returns the smallest |pre-activation| of the hidden layers
 * (how close the point is to a ReLU kink). */
static double ref_forward(const struct spw_dense_spec *s, const double *p, const double *x,
                          size_t n, long train_t, double *logits)
{
    size_t d = s->in_dim;
    double min_abs = INFINITY;
    double *x0 = malloc(d * sizeof(double)), *cur = malloc(4096 * sizeof(double)),
           *next = malloc(4096 * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        memcpy(x0, x + i * d, d * sizeof(double));
        memcpy(cur, x0, d * sizeof(double));
        size_t width = d;
        for (size_t li = 0; li < spw_dense_spec_layer_count(s); li++) {
            struct spw_dense_layer ly;
            spw_dense_spec_layer_at(s, li, &ly);
            for (uint32_t o = 0; o < ly.out; o++) {
                double z = p[ly.b_off + o];
                for (uint32_t j = 0; j < ly.in; j++)
                    z += p[ly.w_off + (size_t)o * ly.in + j] * cur[j];
                if (ly.kind == SPW_DENSE_CROSS) {
                    next[o] = x0[o] * z + cur[o];
                } else if (ly.kind == SPW_DENSE_HIDDEN) {
                    if (fabs(z) < min_abs)
                        min_abs = fabs(z);
                    double v = z > 0 ? z : 0;
                    if (train_t >= 0 && s->dropout > 0.0f) {
                        uint32_t k = (uint32_t)(li - s->cross_layers);
                        bool keep = spw_dense_dropout_keep(s->dropout_seed, (uint64_t)train_t, k,
                                                           i * ly.out + o, s->dropout);
                        v = keep ? v / (1.0 - (double)s->dropout) : 0.0;
                    }
                    next[o] = v;
                } else {
                    next[o] = z;
                }
            }
            width = ly.out;
            memcpy(cur, next, width * sizeof(double));
        }
        logits[i] = cur[0];
    }
    free(x0);
    free(cur);
    free(next);
    return min_abs;
}

static void fill_uniform(uint64_t *seed, float *a, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        a[i] = rng_uniform(seed, lo, hi);
}

static double *to_double(const float *a, size_t n)
{
    double *r = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        r[i] = a[i];
    return r;
}

static spw_dense_t *new_net(const struct spw_dense_spec *spec)
{
    char errstr[256];
    spw_dense_t *net = spw_dense_new(spec, errstr, sizeof(errstr));
    if (!net)
        fail_msg("spw_dense_new: %s", errstr);
    return net;
}

static struct spw_dense_spec make_spec(uint32_t in, uint32_t cross, const char *hidden,
                                       float dropout)
{
    struct spw_dense_spec s;
    spw_dense_spec_default(&s, in);
    s.cross_layers = cross;
    assert_int_equal(spw_dense_spec_parse_hidden(&s, hidden, NULL, 0), SPW_OK);
    s.dropout = dropout;
    s.dropout_seed = 99;
    return s;
}

/* ---- the spec ---- */

static void expect_parse_error(const char *text, const char *needle)
{
    struct spw_dense_spec s = make_spec(4, 0, "3", 0.0f);
    char errstr[256] = "";
    assert_int_equal(spw_dense_spec_parse_hidden(&s, text, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    if (!strstr(errstr, needle))
        fail_msg("error for \"%s\" is \"%s\", does not name \"%s\"", text, errstr, needle);
    assert_int_equal(s.n_hidden, 1); /* unchanged */
    assert_int_equal(s.hidden[0], 3);
}

static void test_dense_spec_parse(void **state)
{
    (void)state;
    struct spw_dense_spec s = make_spec(4, 0, "400,400", 0.0f);
    assert_int_equal(s.n_hidden, 2);
    assert_int_equal(s.hidden[0], 400);
    assert_int_equal(s.hidden[1], 400);
    s = make_spec(4, 0, "7", 0.0f);
    assert_int_equal(s.n_hidden, 1);
    s = make_spec(4, 0, "", 0.0f);
    assert_int_equal(s.n_hidden, 0);
    s = make_spec(4, 0, "none", 0.0f);
    assert_int_equal(s.n_hidden, 0);
    expect_parse_error("400,,4", "item 2 is empty");
    expect_parse_error("400,", "item 2 is empty");
    expect_parse_error("abc", "\"abc\"");
    expect_parse_error("4x", "\"4x\"");
    expect_parse_error("-4", "\"-4\"");
    expect_parse_error(" 4", "\" 4\"");
    expect_parse_error("0", "\"0\"");
    expect_parse_error("16385", "\"16385\"");
    expect_parse_error("99999999999999999999999", "\"99999999999999999999999\"");
    expect_parse_error("1234567890123456789012345678901234567890", "item 1 is too long");
    expect_parse_error("1,2,3,4,5,6,7,8,9", "more than 8");
}

static void expect_check_error(const struct spw_dense_spec *s, spw_err_t want, const char *needle)
{
    char errstr[256] = "";
    assert_int_equal(spw_dense_spec_check(s, errstr, sizeof(errstr)), want);
    if (!strstr(errstr, needle))
        fail_msg("error \"%s\" does not name \"%s\"", errstr, needle);
    errstr[0] = '\0';
    assert_null(spw_dense_new(s, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, needle));
}

static void test_dense_spec_check(void **state)
{
    (void)state;
    struct spw_dense_spec s = make_spec(0, 0, "4", 0.0f);
    expect_check_error(&s, SPW_ERR_INVALID, "in_dim 0");
    s = make_spec(20000, 0, "4", 0.0f);
    expect_check_error(&s, SPW_ERR_INVALID, "in_dim 20000");
    s = make_spec(4, 17, "4", 0.0f);
    expect_check_error(&s, SPW_ERR_INVALID, "cross layers 17");
    s = make_spec(4, 0, "4,5", 0.0f);
    s.hidden[1] = 0;
    expect_check_error(&s, SPW_ERR_INVALID, "hidden layer 2 width 0");
    s.n_hidden = 9;
    expect_check_error(&s, SPW_ERR_INVALID, "hidden layer count 9");
    s = make_spec(4, 0, "4", 1.0f);
    expect_check_error(&s, SPW_ERR_INVALID, "dropout 1");
    s = make_spec(4, 0, "4", -0.5f);
    expect_check_error(&s, SPW_ERR_INVALID, "dropout -0.5");
    s = make_spec(4, 0, "4", NAN);
    expect_check_error(&s, SPW_ERR_INVALID, "dropout nan");
    s = make_spec(16384, 2, "", 0.0f);
    expect_check_error(&s, SPW_ERR_TOO_BIG, "536920065 parameters");
    s = make_spec(16384, 0, "8192,8192", 0.0f);
    assert_int_equal(spw_dense_spec_check(&s, NULL, 0), SPW_OK);
}

static void test_dense_layout(void **state)
{
    (void)state;
    struct spw_dense_spec s = make_spec(3, 2, "4,2", 0.0f);
    assert_int_equal(spw_dense_spec_layer_count(&s), 5);
    /* cross 2 × (9 + 3), hidden 4 × 3 + 4, hidden 2 × 4 + 2, head 2 + 1 */
    assert_int_equal(spw_dense_spec_param_count(&s), 24 + 16 + 10 + 3);
    const struct {
        enum spw_dense_layer_kind kind;
        uint32_t in, out;
        size_t w_off, b_off;
    } want[] = {{SPW_DENSE_CROSS, 3, 3, 0, 9},
                {SPW_DENSE_CROSS, 3, 3, 12, 21},
                {SPW_DENSE_HIDDEN, 3, 4, 24, 36},
                {SPW_DENSE_HIDDEN, 4, 2, 40, 48},
                {SPW_DENSE_OUTPUT, 2, 1, 50, 52}};
    for (size_t i = 0; i < 5; i++) {
        struct spw_dense_layer ly;
        spw_dense_spec_layer_at(&s, i, &ly);
        assert_int_equal(ly.kind, want[i].kind);
        assert_int_equal(ly.in, want[i].in);
        assert_int_equal(ly.out, want[i].out);
        assert_int_equal(ly.w_off, want[i].w_off);
        assert_int_equal(ly.b_off, want[i].b_off);
    }
    spw_dense_t *net = new_net(&s);
    assert_int_equal(spw_dense_param_count(net), 53);
    assert_int_equal(spw_dense_spec_of(net)->cross_layers, 2);
    spw_dense_destroy(net);
    spw_dense_destroy(NULL);

    /* init: seeded, biases zero, weights inside their bounds, hidden ones He-scaled */
    float a[53], b[53];
    spw_dense_init_params(&s, 7, a);
    spw_dense_init_params(&s, 7, b);
    assert_memory_equal(a, b, sizeof(a));
    spw_dense_init_params(&s, 8, b);
    assert_memory_not_equal(a, b, sizeof(a));
    for (size_t i = 9; i < 12; i++)
        assert_true(a[i] == 0.0f);
    for (size_t i = 0; i < 9; i++)
        assert_true(fabsf(a[i]) <= sqrtf(6.0f / 6.0f));
    for (size_t i = 24; i < 36; i++)
        assert_true(fabsf(a[i]) <= sqrtf(6.0f / 3.0f));
}

/* ---- forward against the reference ---- */

static const char *const k_specs[][2] = {
    /* name, "in cross hidden" */
    {"linear", "5 0 none"},     {"relu-mlp", "5 0 6,4"},     {"cross", "4 1 none"},
    {"dcnv2", "4 2 5,3"},       {"deep-mlp", "6 0 8,8,8,8"}, {"cross3", "3 3 none"},
    {"dcnv2-wide", "12 2 16,8"}};

static struct spw_dense_spec spec_named(size_t i, float dropout)
{
    unsigned in, cross;
    char hidden[64];
    assert_int_equal(sscanf(k_specs[i][1], "%u %u %63s", &in, &cross, hidden), 3);
    return make_spec(in, cross, hidden, dropout);
}

static void test_dense_forward_reference(void **state)
{
    (void)state;
    for (size_t si = 0; si < sizeof(k_specs) / sizeof(k_specs[0]); si++) {
        struct spw_dense_spec s = spec_named(si, 0.0f);
        spw_dense_t *net = new_net(&s);
        size_t np = spw_dense_param_count(net), n = 37, d = s.in_dim;
        float *p = malloc(np * sizeof(float)), *x = malloc(n * d * sizeof(float));
        float *logits = malloc(n * sizeof(float));
        double *ref = malloc(n * sizeof(double));
        uint64_t seed = 100 + si;
        spw_dense_init_params(&s, seed, p);
        fill_uniform(&seed, p, np, -0.5f, 0.5f); /* non-zero biases too */
        fill_uniform(&seed, x, n * d, -1.0f, 1.0f);
        double *pd = to_double(p, np), *xd = to_double(x, n * d);
        ref_forward(&s, pd, xd, n, -1, ref);
        assert_int_equal(spw_dense_forward(net, p, x, n, logits, false), SPW_OK);
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double err = fabs(logits[i] - ref[i]) / (1.0 + fabs(ref[i]));
            if (err > worst)
                worst = err;
        }
        print_message("forward %-10s worst relative error %.2e (tolerance %.0e)\n", k_specs[si][0],
                      worst, FWD_TOL);
        assert_true(worst <= FWD_TOL);
        free(pd);
        free(xd);
        free(p);
        free(x);
        free(logits);
        free(ref);
        spw_dense_destroy(net);
    }
}

/* ---- gradients by finite differences ---- */

/* L = sum_i c_i logit_i, so dL/dlogit = c. */
static double ref_loss(const struct spw_dense_spec *s, const double *p, const double *x, size_t n,
                       long t, const double *c, double *min_abs)
{
    double *lg = malloc(n * sizeof(double));
    double m = ref_forward(s, p, x, n, t, lg);
    if (min_abs && m < *min_abs)
        *min_abs = m;
    double l = 0;
    for (size_t i = 0; i < n; i++)
        l += c[i] * lg[i];
    free(lg);
    return l;
}

static double check_block(const char *what, const float *analytic, double *v, size_t count,
                          const struct spw_dense_spec *s, double *pd, double *xd, size_t n, long t,
                          const double *cd, double *min_abs)
{
    double worst = 0;
    for (size_t j = 0; j < count; j++) {
        double keep = v[j];
        v[j] = keep + FD_H;
        double lp = ref_loss(s, pd, xd, n, t, cd, min_abs);
        v[j] = keep - FD_H;
        double lm = ref_loss(s, pd, xd, n, t, cd, min_abs);
        v[j] = keep;
        double num = (lp - lm) / (2 * FD_H);
        double err = fabs(analytic[j] - num) / (1.0 + fabs(num));
        if (err > worst)
            worst = err;
        if (err > GRAD_TOL)
            fail_msg("%s[%zu]: analytic %.8g numeric %.8g", what, j, (double)analytic[j], num);
    }
    return worst;
}

static void grad_check(size_t si, float dropout)
{
    struct spw_dense_spec s = spec_named(si, dropout);
    spw_dense_t *net = new_net(&s);
    size_t np = spw_dense_param_count(net), n = 5, d = s.in_dim;
    float *p = malloc(np * sizeof(float)), *x = malloc(n * d * sizeof(float));
    float *logits = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    float *grads = malloc(np * sizeof(float)), *dx = malloc(n * d * sizeof(float));
    uint64_t seed = 200 + si;
    spw_dense_init_params(&s, seed, p);
    for (size_t j = 0; j < np; j++) /* biases off zero too, away from ties */
        p[j] += rng_uniform(&seed, -0.2f, 0.2f);
    fill_uniform(&seed, x, n * d, -1.0f, 1.0f);
    fill_uniform(&seed, c, n, -1.0f, 1.0f);
    assert_int_equal(spw_dense_forward(net, p, x, n, logits, true), SPW_OK); /* stream t = 0 */
    memset(grads, 0x7f, np * sizeof(float)); /* overwritten, not accumulated */
    assert_int_equal(spw_dense_backward(net, p, c, grads, dx), SPW_OK);
    double *pd = to_double(p, np), *xd = to_double(x, n * d), *cd = to_double(c, n);
    double min_abs = INFINITY;
    ref_loss(&s, pd, xd, n, 0, cd, &min_abs);
    double wp = check_block("param", grads, pd, np, &s, pd, xd, n, 0, cd, &min_abs);
    double wx = check_block("input", dx, xd, n * d, &s, pd, xd, n, 0, cd, &min_abs);
    print_message("gradient %-10s dropout %.1f: worst relative error params %.2e inputs %.2e "
                  "(tolerance %.0e, h %.0e, nearest ReLU kink %.1e)\n",
                  k_specs[si][0], (double)dropout, wp, wx, GRAD_TOL, FD_H, min_abs);
    /* a pre-activation within FD_H of zero would make the numeric gradient meaningless */
    assert_true(min_abs > 10 * FD_H);
    free(pd);
    free(xd);
    free(cd);
    free(p);
    free(x);
    free(logits);
    free(c);
    free(grads);
    free(dx);
    spw_dense_destroy(net);
}

static void test_dense_grad_linear(void **state)
{
    (void)state;
    grad_check(0, 0.0f);
}

static void test_dense_grad_relu_mlp(void **state)
{
    (void)state;
    grad_check(1, 0.0f);
    grad_check(4, 0.0f);
}

static void test_dense_grad_cross(void **state)
{
    (void)state;
    grad_check(2, 0.0f);
    grad_check(5, 0.0f);
}

static void test_dense_grad_dcnv2(void **state)
{
    (void)state;
    grad_check(3, 0.0f);
    grad_check(6, 0.0f);
}

static void test_dense_grad_dropout(void **state)
{
    (void)state;
    grad_check(1, 0.3f);
    grad_check(6, 0.5f);
}

/* ---- workspace reuse and state ---- */

static void test_dense_workspace_reuse(void **state)
{
    (void)state;
    struct spw_dense_spec s = spec_named(6, 0.0f);
    spw_dense_t *net = new_net(&s), *fresh = NULL;
    size_t np = spw_dense_param_count(net), d = s.in_dim;
    float *p = malloc(np * sizeof(float)), *x = malloc(64 * d * sizeof(float));
    float a[64], b[64];
    float *g1 = malloc(np * sizeof(float)), *g2 = malloc(np * sizeof(float)), c[64];
    uint64_t seed = 5;
    spw_dense_init_params(&s, 3, p);
    fill_uniform(&seed, x, 64 * d, -1.0f, 1.0f);
    fill_uniform(&seed, c, 64, -1.0f, 1.0f);
    assert_int_equal(spw_dense_backward(net, p, c, g1, NULL), SPW_ERR_STATE);
    assert_int_equal(spw_dense_forward(net, p, x, 0, a, true), SPW_OK);
    assert_int_equal(spw_dense_backward(net, p, c, g1, NULL), SPW_ERR_STATE);
    assert_int_equal(spw_dense_forward(net, p, x, 64, a, false), SPW_OK);
    assert_int_equal(spw_dense_forward(net, p, x + 10 * d, 16, b, false), SPW_OK);
    /* OpenBLAS blocks by the matrix sizes: rows of a smaller batch agree to rounding only */
    for (int i = 0; i < 16; i++)
        assert_true(fabsf(a[10 + i] - b[i]) <= 1e-5f * (1.0f + fabsf(b[i])));
    assert_int_equal(spw_dense_backward(net, p, c, g1, NULL), SPW_OK);
    fresh = new_net(&s);
    assert_int_equal(spw_dense_forward(fresh, p, x + 10 * d, 16, b, false), SPW_OK);
    assert_int_equal(spw_dense_backward(fresh, p, c, g2, NULL), SPW_OK);
    assert_memory_equal(g1, g2, np * sizeof(float));
    assert_int_equal(spw_dense_forward(net, p, x, 64, b, false), SPW_OK);
    assert_memory_equal(a, b, sizeof(a));
    free(p);
    free(x);
    free(g1);
    free(g2);
    spw_dense_destroy(net);
    spw_dense_destroy(fresh);
}

/* ---- the optimizer ---- */

static void test_dense_opt_adagrad(void **state)
{
    (void)state;
    struct spw_dense_opt opt;
    spw_dense_opt_default(&opt, SPW_DENSE_OPT_ADAGRAD);
    opt.lr = 0.5f;
    opt.l2 = 0.1f;
    assert_int_equal(spw_dense_opt_check(&opt, NULL, 0), SPW_OK);
    assert_int_equal(spw_dense_opt_state_count(SPW_DENSE_OPT_ADAGRAD, 3), 3);
    float p[3] = {1.0f, -2.0f, 0.5f}, st[3];
    const float g1[3] = {0.3f, -0.1f, 0.0f}, g2[3] = {-0.2f, 0.4f, 1.0f};
    double pd[3] = {1.0, -2.0, 0.5}, ad[3];
    spw_dense_opt_init_state(&opt, 3, st);
    for (int i = 0; i < 3; i++) {
        assert_true(st[i] == 0.1f);
        ad[i] = 0.1f;
    }
    for (int step = 1; step <= 2; step++) {
        const float *g = step == 1 ? g1 : g2;
        spw_dense_opt_step(&opt, 3, p, g, st, (uint64_t)step);
        for (int i = 0; i < 3; i++) {
            double gg = g[i] + 0.1f * pd[i];
            ad[i] += gg * gg;
            pd[i] -= 0.5 * gg / (sqrt(ad[i]) + 1e-8);
            assert_true(fabs(p[i] - pd[i]) < 1e-6);
            assert_true(fabs(st[i] - ad[i]) < 1e-6);
        }
    }
}

static void test_dense_opt_adam(void **state)
{
    (void)state;
    struct spw_dense_opt opt;
    spw_dense_opt_default(&opt, SPW_DENSE_OPT_ADAM);
    opt.lr = 0.01f;
    assert_int_equal(spw_dense_opt_state_count(SPW_DENSE_OPT_ADAM, 3), 6);
    float p[3] = {1.0f, -2.0f, 0.5f}, st[6];
    memset(st, 0x7f, sizeof(st));
    spw_dense_opt_init_state(&opt, 3, st);
    for (int i = 0; i < 6; i++)
        assert_true(st[i] == 0.0f);
    /* the first step moves each parameter by lr against its gradient's sign (bias correction) */
    const float g1[3] = {0.3f, -0.1f, 2.0f}, g2[3] = {-0.2f, 0.4f, 1.0f};
    spw_dense_opt_step(&opt, 3, p, g1, st, 1);
    assert_true(fabsf(p[0] - 0.99f) < 1e-6f);
    assert_true(fabsf(p[1] - -1.99f) < 1e-6f);
    assert_true(fabsf(p[2] - 0.49f) < 1e-6f);
    double pd[3] = {p[0], p[1], p[2]}, m[3], v[3];
    for (int i = 0; i < 3; i++) {
        m[i] = 0.1 * g1[i];
        v[i] = 0.001 * (double)g1[i] * g1[i];
        assert_true(fabs(st[i] - m[i]) < 1e-7);
        assert_true(fabs(st[3 + i] - v[i]) < 1e-7);
    }
    spw_dense_opt_step(&opt, 3, p, g2, st, 2);
    for (int i = 0; i < 3; i++) {
        m[i] = 0.9 * m[i] + 0.1 * g2[i];
        v[i] = 0.999 * v[i] + 0.001 * (double)g2[i] * g2[i];
        double mh = m[i] / (1 - 0.9 * 0.9), vh = v[i] / (1 - 0.999 * 0.999);
        pd[i] -= 0.01 * mh / (sqrt(vh) + 1e-8);
        assert_true(fabs(p[i] - pd[i]) < 1e-6);
    }
    /* errors name the field */
    char errstr[128];
    opt.beta2 = 1.0f;
    assert_int_equal(spw_dense_opt_check(&opt, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "beta2 1"));
    spw_dense_opt_default(&opt, SPW_DENSE_OPT_ADAGRAD);
    opt.lr = 0.0f;
    assert_int_equal(spw_dense_opt_check(&opt, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "lr 0"));
    opt.lr = 0.1f;
    opt.init_accum = -1.0f;
    assert_int_equal(spw_dense_opt_check(&opt, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "init_accum -1"));
}

static void test_dense_logloss(void **state)
{
    (void)state;
    const float logits[4] = {0.0f, 2.0f, -3.0f, 100.0f}, labels[4] = {1.0f, 0.0f, 0.25f, 1.0f};
    float dl[4];
    double l = spw_dense_logloss(logits, labels, 4, 0.5f, dl);
    double want = log(2.0) + log1p(exp(2.0)) + (log1p(exp(-3.0)) + 0.25 * 3.0) + 0.0;
    assert_true(fabs(l - want) < 1e-9);
    assert_true(fabsf(dl[0] - 0.5f * (0.5f - 1.0f)) < 1e-7f);
    assert_true(fabsf(dl[1] - 0.5f * (float)(1.0 / (1.0 + exp(-2.0)))) < 1e-7f);
    assert_true(fabsf(dl[3]) < 1e-7f);
}

/* ---- learning: XOR-like data that no linear model separates ---- */

/* y = 1 when x0 * x1 > 0; x2, x3 are noise inputs. */
static void xor_data(uint64_t *seed, float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < 4; j++)
            x[i * 4 + j] = rng_uniform(seed, -1.0f, 1.0f);
        y[i] = x[i * 4] * x[i * 4 + 1] > 0.0f ? 1.0f : 0.0f;
    }
}

/* Held-out logloss (mean) after `steps` Adam steps of batch 64. */
static double train_xor(uint32_t cross, const char *hidden, unsigned steps)
{
    struct spw_dense_spec s = make_spec(4, cross, hidden, 0.0f);
    spw_dense_t *net = new_net(&s);
    size_t np = spw_dense_param_count(net);
    struct spw_dense_opt opt;
    spw_dense_opt_default(&opt, SPW_DENSE_OPT_ADAM);
    opt.lr = 0.01f;
    float *p = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
    float *st = malloc(spw_dense_opt_state_count(opt.kind, np) * sizeof(float));
    spw_dense_init_params(&s, 11, p);
    spw_dense_opt_init_state(&opt, np, st);
    float x[64 * 4], y[64], lg[64], dl[64];
    uint64_t seed = 12345;
    for (unsigned step = 1; step <= steps; step++) {
        xor_data(&seed, x, y, 64);
        assert_int_equal(spw_dense_forward(net, p, x, 64, lg, true), SPW_OK);
        spw_dense_logloss(lg, y, 64, 1.0f / 64, dl);
        assert_int_equal(spw_dense_backward(net, p, dl, g, NULL), SPW_OK);
        spw_dense_opt_step(&opt, np, p, g, st, step);
    }
    static float hx[2048 * 4], hy[2048], hl[2048];
    uint64_t hseed = 999;
    xor_data(&hseed, hx, hy, 2048);
    assert_int_equal(spw_dense_forward(net, p, hx, 2048, hl, false), SPW_OK);
    double loss = spw_dense_logloss(hl, hy, 2048, 1.0f, NULL) / 2048;
    free(p);
    free(g);
    free(st);
    spw_dense_destroy(net);
    return loss;
}

static void test_dense_learns_xor(void **state)
{
    (void)state;
    double linear = train_xor(0, "none", 1500);
    double mlp = train_xor(0, "16,16", 1500);
    double cross = train_xor(1, "none", 1500);
    double dcn = train_xor(1, "8", 1500);
    print_message("XOR held-out logloss: linear %.4f, MLP 16,16 %.4f, cross 1 %.4f, "
                  "DCN-v2 (cross 1 + 8) %.4f\n",
                  linear, mlp, cross, dcn);
    assert_true(linear > 0.65); /* ln 2 = 0.693: a linear model learns nothing here */
    assert_true(mlp < 0.25);
    assert_true(cross < 0.35); /* x0 ⊙ (W x) holds the product x0 x1 */
    assert_true(dcn < 0.25);
}

/* ---- the planted deep model ---- */

static void test_dense_planted(void **state)
{
    (void)state;
    char errstr[256] = "";
    assert_null(spw_dense_planted_new(0, 4, "8", 1.0f, 1, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "fields 0"));
    assert_null(spw_dense_planted_new(3, 4, "8", 0.0f, 1, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "scale 0"));
    assert_null(spw_dense_planted_new(3, 4, "8,x", 1.0f, 1, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "\"x\""));
    spw_dense_planted_t *a = spw_dense_planted_new(3, 4, "16,8", 2.0f, 42, errstr, sizeof(errstr));
    spw_dense_planted_t *b = spw_dense_planted_new(3, 4, "16,8", 2.0f, 42, errstr, sizeof(errstr));
    assert_non_null(a);
    assert_non_null(b);
    float x[50 * 12], la[50], lb[50], e1[4], e2[4];
    spw_dense_planted_embedding(a, 1, 7, e1);
    spw_dense_planted_embedding(b, 1, 7, e2);
    assert_memory_equal(e1, e2, sizeof(e1));
    spw_dense_planted_embedding(a, 2, 7, e2); /* another field, another embedding */
    assert_memory_not_equal(e1, e2, sizeof(e1));
    for (size_t i = 0; i < 50; i++)
        for (uint32_t f = 0; f < 3; f++)
            spw_dense_planted_embedding(a, f, i % 9 + f, x + i * 12 + f * 4);
    assert_int_equal(spw_dense_planted_logits(a, x, 50, la), SPW_OK);
    assert_int_equal(spw_dense_planted_logits(b, x, 50, lb), SPW_OK);
    assert_memory_equal(la, lb, sizeof(la));
    double mean = 0, var = 0;
    for (size_t i = 0; i < 50; i++)
        mean += la[i] / 50.0;
    for (size_t i = 0; i < 50; i++)
        var += (la[i] - mean) * (la[i] - mean) / 50.0;
    print_message("planted deep logits: mean %.3f sd %.3f\n", mean, sqrt(var));
    assert_true(sqrt(var) > 0.1); /* the logits vary with the fields */
    spw_dense_planted_destroy(a);
    spw_dense_planted_destroy(b);
    spw_dense_planted_destroy(NULL);
}

SPW_TEST_MAIN(test_dense_spec_parse, test_dense_spec_check, test_dense_layout,
              test_dense_forward_reference, test_dense_grad_linear, test_dense_grad_relu_mlp,
              test_dense_grad_cross, test_dense_grad_dcnv2, test_dense_grad_dropout,
              test_dense_workspace_reuse, test_dense_opt_adagrad, test_dense_opt_adam,
              test_dense_logloss, test_dense_learns_xor, test_dense_planted)
