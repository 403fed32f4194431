/* Unit tests of the staleness penalties adaptive and dc (parsing, arithmetic against
 * hand-computed values, through the store with SGD), the row classes bias/top/rest and their
 * running means. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_int.h"
#include "sparrow/fs.h"
#include "test_dir.h"

#define TOL 1e-6

/* An SGD store of rows starting at 0 with the given penalty. */
static spw_ps_store_t *open_sgd(struct test_dir_fixture *fx, uint32_t dim, float lr,
                                const char *penalty)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/db%d", fx->dir, fx->n_db++);
    struct spw_ps_store_conf c = {0};
    c.dim = dim;
    spw_ps_optim_conf_default(&c.optim);
    c.optim.kind = SPW_PS_SGD;
    c.optim.lr = lr;
    c.optim.init_scale = 0.0f;
    assert_int_equal(spw_ps_penalty_parse(penalty, &c.penalty), SPW_OK);
    c.memory_bytes = 16u << 20;
    c.db_path = path;
    char err[256] = "";
    spw_ps_store_t *s = spw_ps_store_open(&c, err, sizeof(err));
    if (!s)
        fail_msg("open: %s", err);
    return s;
}

static void test_ps_penalty_parse_new_spellings(void **state)
{
    (void)state;
    struct spw_ps_penalty p;
    assert_int_equal(spw_ps_penalty_parse("adaptive", &p), SPW_OK);
    assert_int_equal(p.kind, SPW_PS_PENALTY_ADAPTIVE);
    assert_int_equal(spw_ps_penalty_parse("dc:0.04", &p), SPW_OK);
    assert_int_equal(p.kind, SPW_PS_PENALTY_DC);
    assert_float_equal(p.lambda, 0.04, 1e-12);
    assert_int_equal(spw_ps_penalty_parse("dc:0", &p), SPW_OK);
    assert_float_equal(p.lambda, 0.0, 0.0);
    assert_int_equal(spw_ps_penalty_parse("dc:2e1", &p), SPW_OK);
    assert_float_equal(p.lambda, 20.0, 1e-12);
    assert_int_equal(spw_ps_penalty_parse("dc:1e6", &p), SPW_OK);
    const char *bad[] = {"adaptive ", "adaptive:1", "Adaptive", "dc",      "dc:",   "dc:-0.1",
                         "dc:nan",    "dc:inf",     "dc:1e7",   "dc:0.1x", "dc: 1", "dc:0x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p.kind = SPW_PS_PENALTY_NONE;
        assert_int_equal(spw_ps_penalty_parse(bad[i], &p), SPW_ERR_INVALID);
        assert_int_equal(p.kind, SPW_PS_PENALTY_NONE); /* untouched on error */
    }
}

static void test_ps_penalty_alpha_values(void **state)
{
    (void)state;
    struct spw_ps_penalty p;
    assert_int_equal(spw_ps_penalty_parse("adaptive", &p), SPW_OK);
    /* min(1, (1 + ref) / (1 + tau)) */
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 0, 0.0), 1.0, TOL);
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 3, 1.0), 0.5, TOL);
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 1, 1.0), 1.0, TOL);
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 2, 5.0), 1.0, TOL); /* fresher than usual */
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 9, 1.5), 0.25, TOL);
    /* with a reference of 0 it is inverse, and never below inverse */
    assert_float_equal(spw_ps_penalty_alpha(&p, 3), 0.25, TOL);
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 3, -2.0), 0.25, TOL);
    struct spw_ps_penalty inv;
    assert_int_equal(spw_ps_penalty_parse("inverse", &inv), SPW_OK);
    for (uint32_t tau = 0; tau < 50; tau++)
        for (double ref = 0.0; ref < 20.0; ref += 0.7)
            assert_true(spw_ps_penalty_alpha_ref(&p, tau, ref) >= spw_ps_penalty_alpha(&inv, tau));
    /* the other kinds ignore the reference; dc scales nothing */
    assert_float_equal(spw_ps_penalty_alpha_ref(&inv, 3, 7.0), 0.25, TOL);
    assert_int_equal(spw_ps_penalty_parse("dc:0.5", &p), SPW_OK);
    assert_float_equal(spw_ps_penalty_alpha(&p, 5), 1.0, TOL);
    assert_float_equal(spw_ps_penalty_alpha_ref(&p, 5, 1.0), 1.0, TOL);
}

static void test_ps_penalty_dc_correct_by_hand(void **state)
{
    (void)state;
    const float g[3] = {1.0f, -2.0f, 0.5f};
    const float now[3] = {0.5f, 1.0f, -1.0f};
    const float pulled[3] = {0.25f, 2.0f, -1.0f};
    float out[3];
    /* g + 0.1 g^2 (now - pulled): 1 + 0.1*1*0.25, -2 + 0.1*4*(-1), 0.5 + 0 */
    spw_ps_dc_correct(3, 0.1f, g, now, pulled, out);
    assert_float_equal(out[0], 1.025, TOL);
    assert_float_equal(out[1], -2.4, TOL);
    assert_float_equal(out[2], 0.5, TOL);
    /* in place */
    float gi[3] = {1.0f, -2.0f, 0.5f};
    spw_ps_dc_correct(3, 0.1f, gi, now, pulled, gi);
    assert_memory_equal(gi, out, sizeof(out));
    /* lambda 0: the gradient as it is */
    spw_ps_dc_correct(3, 0.0f, g, now, pulled, out);
    assert_memory_equal(out, g, sizeof(g));
}

/* dc through the store with SGD (lr 0.5, lambda 0.5): the corrected step by hand. */
static void test_ps_penalty_dc_through_store(void **state)
{
    spw_ps_store_t *s = open_sgd(*state, 2, 0.5f, "dc:0.5");
    uint64_t key = 9;
    uint32_t v0 = 0, tau = 99;
    float w[2];
    struct spw_ps_push_result r;
    /* fresh: w = 0 - 0.5 * (-2, 4) = (1, -2), version 1 */
    const float g0[2] = {-2.0f, 4.0f};
    const float pulled0[2] = {0.0f, 0.0f};
    struct spw_ps_push_args a = {
        .n = 1, .keys = &key, .grads = g0, .versions = &v0, .pulled = pulled0, .taus = &tau};
    assert_int_equal(spw_ps_store_push_args(s, &a, &r), SPW_OK);
    assert_int_equal(tau, 0);
    assert_int_equal(r.dc_corrected, 0); /* tau 0: nothing to correct */
    assert_int_equal(spw_ps_store_pull(s, &key, 1, w, NULL), SPW_OK);
    assert_float_equal(w[0], 1.0, TOL);
    assert_float_equal(w[1], -2.0, TOL);
    /* stale (tau 1), computed from w_pulled = (0, 0), g = (1, 0.5):
     * g' = (1 + 0.5*1*(1-0), 0.5 + 0.5*0.25*(-2-0)) = (1.5, 0.25)
     * w  = (1 - 0.5*1.5, -2 - 0.5*0.25) = (0.25, -2.125) */
    const float g1[2] = {1.0f, 0.5f};
    a.grads = g1;
    assert_int_equal(spw_ps_store_push_args(s, &a, &r), SPW_OK);
    assert_int_equal(tau, 1);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.dc_corrected, 1);
    assert_int_equal(r.dc_uncorrected, 0);
    assert_int_equal(spw_ps_store_pull(s, &key, 1, w, NULL), SPW_OK);
    assert_float_equal(w[0], 0.25, TOL);
    assert_float_equal(w[1], -2.125, TOL);
    /* stale (tau 2) without pulled values: applied as it is, alpha 1, counted */
    const float g2[2] = {1.0f, 1.0f};
    assert_int_equal(spw_ps_store_push(s, &key, 1, g2, &v0, &tau, &r), SPW_OK);
    assert_int_equal(tau, 2);
    assert_int_equal(r.dc_uncorrected, 1);
    assert_int_equal(spw_ps_store_pull(s, &key, 1, w, NULL), SPW_OK);
    assert_float_equal(w[0], -0.25, TOL);
    assert_float_equal(w[1], -2.625, TOL);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.dc_corrected, 1);
    assert_int_equal(st.dc_uncorrected, 1);
    spw_ps_store_close(s);
}

/* adaptive through the store (the bias row, so that the class is known): the reference is the
 * class's mean tau of the rows before. SGD lr 1, rows start at 0. */
static void test_ps_penalty_adaptive_through_store(void **state)
{
    spw_ps_store_t *s = open_sgd(*state, 1, 1.0f, "adaptive");
    uint64_t key = SPW_PS_BIAS_KEY;
    const float zero = 0.0f, one = 1.0f;
    uint32_t tau;
    uint8_t cls = 0xff;
    struct spw_ps_push_args a = {.n = 1, .keys = &key, .taus = &tau, .classes = &cls};
    for (uint32_t v = 0; v < 3; v++) { /* three fresh rows: the bias class's mean tau is 0 */
        a.grads = &zero;
        a.versions = &v;
        assert_int_equal(spw_ps_store_push_args(s, &a, NULL), SPW_OK);
        assert_int_equal(cls, SPW_PS_CLASS_BIAS);
    }
    /* version 3; pushed from version 2: tau 1, alpha = (1 + 0) / (1 + 1) = 0.5, w = -0.5 */
    uint32_t v = 2;
    a.grads = &one;
    a.versions = &v;
    assert_int_equal(spw_ps_store_push_args(s, &a, NULL), SPW_OK);
    assert_int_equal(tau, 1);
    float w;
    assert_int_equal(spw_ps_store_pull(s, &key, 1, &w, NULL), SPW_OK);
    assert_float_equal(w, -0.5, TOL);
    /* the mean is now (0+0+0+1)/4 = 0.25; version 4 pushed from 0: tau 4,
     * alpha = 1.25 / 5 = 0.25, w = -0.75 */
    v = 0;
    assert_int_equal(spw_ps_store_push_args(s, &a, NULL), SPW_OK);
    assert_int_equal(tau, 4);
    assert_int_equal(spw_ps_store_pull(s, &key, 1, &w, NULL), SPW_OK);
    assert_float_equal(w, -0.75, TOL);
    struct spw_ps_stale_stats ss;
    spw_ps_store_get_staleness(s, &ss);
    assert_int_equal(ss.rows[SPW_PS_CLASS_BIAS], 5);
    assert_int_equal(ss.rows[SPW_PS_CLASS_REST], 0);
    assert_float_equal(ss.tau_ref[SPW_PS_CLASS_BIAS], 1.0, TOL);     /* (0+0+0+1+4)/5 */
    assert_float_equal(ss.alpha_mean[SPW_PS_CLASS_BIAS], 0.75, TOL); /* (1+1+1+.5+.25)/5 */
    assert_int_equal(ss.top_threshold, UINT32_MAX);                  /* no period ended */
    /* another class's reference is its own: a rest row at tau 1 against a mean of 0 */
    uint64_t k2 = 77;
    uint32_t v2 = 0;
    a.keys = &k2;
    a.versions = &v2;
    a.grads = &zero;
    assert_int_equal(spw_ps_store_push_args(s, &a, NULL), SPW_OK);
    assert_int_equal(cls, SPW_PS_CLASS_REST);
    a.grads = &one;
    assert_int_equal(spw_ps_store_push_args(s, &a, NULL), SPW_OK); /* tau 1 */
    assert_int_equal(spw_ps_store_pull(s, &k2, 1, &w, NULL), SPW_OK);
    assert_float_equal(w, -0.5, TOL);
    spw_ps_store_close(s);
}

/* One trainer (every row fresh): adaptive applies the same steps as none. */
static void test_ps_penalty_adaptive_fresh_is_none(void **state)
{
    spw_ps_store_t *a = open_sgd(*state, 2, 0.1f, "adaptive");
    spw_ps_store_t *b = open_sgd(*state, 2, 0.1f, "none");
    uint64_t keys[3] = {0, 5, 6};
    float g[6] = {0.5f, 0, 1, -1, 2, 0.25f};
    for (int step = 0; step < 20; step++) {
        uint32_t ver[3];
        float w[6];
        assert_int_equal(spw_ps_store_pull(a, keys, 3, w, ver), SPW_OK);
        assert_int_equal(spw_ps_store_push(a, keys, 3, g, ver, NULL, NULL), SPW_OK);
        assert_int_equal(spw_ps_store_pull(b, keys, 3, w, ver), SPW_OK);
        assert_int_equal(spw_ps_store_push(b, keys, 3, g, ver, NULL, NULL), SPW_OK);
    }
    float wa[6], wb[6];
    assert_int_equal(spw_ps_store_pull(a, keys, 3, wa, NULL), SPW_OK);
    assert_int_equal(spw_ps_store_pull(b, keys, 3, wb, NULL), SPW_OK);
    assert_memory_equal(wa, wb, sizeof(wa));
    spw_ps_store_close(a);
    spw_ps_store_close(b);
}

static struct spw_ps_row *new_row(uint32_t count)
{
    struct spw_ps_row *r = calloc(1, sizeof(*r) + sizeof(float));
    assert_non_null(r);
    r->count = count;
    return r;
}

/* Class assignment: bias by key; top from the first estimate on, by the SPW_PS_TOP_ROWS-th
 * largest count of the distinct rows a period saw; rest otherwise. */
static void test_ps_penalty_classes(void **state)
{
    (void)state;
    struct spw_ps__stale st;
    spw_ps__stale_init(&st);
    enum { N = 2000 };
    struct spw_ps_row **rows = calloc(N, sizeof(*rows));
    assert_non_null(rows);
    for (uint32_t i = 0; i < N; i++)
        rows[i] = new_row(i + 1); /* counts 1..2000 */
    assert_int_equal(spw_ps__stale_classify(&st, SPW_PS_BIAS_KEY, rows[0]), SPW_PS_CLASS_BIAS);
    assert_int_equal(spw_ps__stale_classify(&st, SPW_PS_BIAS_KEY, NULL), SPW_PS_CLASS_BIAS);
    assert_int_equal(spw_ps__stale_classify(&st, 3, NULL), SPW_PS_CLASS_REST);
    /* before the first estimate nothing is top */
    assert_int_equal(spw_ps__stale_classify(&st, 1, rows[N - 1]), SPW_PS_CLASS_REST);
    /* a period's worth of pushes over the 2000 rows, each seen many times */
    uint32_t pushed = 1; /* the row above; the bias and row-less ones do not count */
    while (pushed < SPW_PS_TOP_PERIOD) {
        uint32_t i = pushed % N;
        spw_ps__stale_classify(&st, 1000 + i, rows[i]);
        pushed++;
    }
    /* the 1000 largest counts are 1001..2000 */
    assert_int_equal(st.top_threshold, 1001);
    assert_int_equal(spw_ps__stale_classify(&st, 1000 + 1000, rows[1000]), SPW_PS_CLASS_TOP);
    assert_int_equal(spw_ps__stale_classify(&st, 1000 + 999, rows[999]), SPW_PS_CLASS_REST);
    assert_int_equal(spw_ps__stale_classify(&st, 7, rows[N - 1]), SPW_PS_CLASS_TOP);
    assert_int_equal(spw_ps__stale_classify(&st, 3, NULL), SPW_PS_CLASS_REST);
    assert_int_equal(spw_ps__stale_classify(&st, SPW_PS_BIAS_KEY, rows[N - 1]), SPW_PS_CLASS_BIAS);

    /* a period that sees only 500 distinct rows (counts 10..509), each many times: a row enters
     * the estimate once, so every one of them is top (threshold 10), not only the hottest */
    for (uint32_t i = 0; i < 500; i++)
        rows[i]->count = 10 + i;
    while (st.top_threshold == 1001)
        for (uint32_t i = 0; i < 500 && st.top_threshold == 1001; i++)
            spw_ps__stale_classify(&st, 1000 + i, rows[i]);
    assert_int_equal(st.top_threshold, 10);
    assert_int_equal(spw_ps__stale_classify(&st, 5, rows[0]), SPW_PS_CLASS_TOP);
    struct spw_ps_row *cold = new_row(9);
    assert_int_equal(spw_ps__stale_classify(&st, 6, cold), SPW_PS_CLASS_REST);
    free(cold);
    for (uint32_t i = 0; i < N; i++)
        free(rows[i]);
    free(rows);
}

/* The running means: the plain mean for the first SPW_PS_STALE_WINDOW rows of a class, then an
 * exponential average with weight 1 / SPW_PS_STALE_WINDOW. */
static void test_ps_penalty_running_means(void **state)
{
    (void)state;
    struct spw_ps__stale st;
    spw_ps__stale_init(&st);
    assert_float_equal(st.alpha_mean[SPW_PS_CLASS_TOP], 1.0, 0.0);
    spw_ps__stale_observe(&st, SPW_PS_CLASS_TOP, 2, 0.5);
    spw_ps__stale_observe(&st, SPW_PS_CLASS_TOP, 4, 0.25);
    assert_float_equal(st.tau_ref[SPW_PS_CLASS_TOP], 3.0, TOL);
    assert_float_equal(st.alpha_mean[SPW_PS_CLASS_TOP], 0.375, TOL);
    assert_float_equal(st.tau_ref[SPW_PS_CLASS_REST], 0.0, 0.0); /* classes apart */
    for (uint32_t i = 0; i < SPW_PS_STALE_WINDOW; i++)
        spw_ps__stale_observe(&st, SPW_PS_CLASS_REST, 0, 1.0);
    spw_ps__stale_observe(&st, SPW_PS_CLASS_REST, 1000, 1.0);
    assert_float_equal(st.tau_ref[SPW_PS_CLASS_REST], 1000.0 / SPW_PS_STALE_WINDOW, TOL);
}

/* The store reports each pushed row's class: the bias key, and rest for rows before the first
 * estimate. */
static void test_ps_penalty_store_classes(void **state)
{
    spw_ps_store_t *s = open_sgd(*state, 1, 0.1f, "inverse");
    uint64_t keys[3] = {0, 11, 12};
    const float g[3] = {1, 1, 1};
    uint32_t ver[3] = {0, 0, 0}, taus[3];
    uint8_t cls[3] = {0xff, 0xff, 0xff};
    struct spw_ps_push_args a = {
        .n = 3, .keys = keys, .grads = g, .versions = ver, .taus = taus, .classes = cls};
    assert_int_equal(spw_ps_store_push_args(s, &a, NULL), SPW_OK);
    assert_int_equal(cls[0], SPW_PS_CLASS_BIAS);
    assert_int_equal(cls[1], SPW_PS_CLASS_REST);
    assert_int_equal(cls[2], SPW_PS_CLASS_REST);
    struct spw_ps_stale_stats ss;
    spw_ps_store_get_staleness(s, &ss);
    assert_int_equal(ss.rows[SPW_PS_CLASS_BIAS], 1);
    assert_int_equal(ss.rows[SPW_PS_CLASS_REST], 2);
    assert_string_equal(spw_ps_row_class_name(SPW_PS_CLASS_BIAS), "bias");
    assert_string_equal(spw_ps_row_class_name(SPW_PS_CLASS_TOP), "top");
    assert_string_equal(spw_ps_row_class_name(SPW_PS_CLASS_REST), "rest");
    spw_ps_store_close(s);
}

/* every test gets a fresh directory (those without a store ignore it) */
SPW_TEST_MAIN_EACH(test_fixture_setup, test_fixture_teardown, test_ps_penalty_parse_new_spellings,
                   test_ps_penalty_alpha_values, test_ps_penalty_dc_correct_by_hand,
                   test_ps_penalty_dc_through_store, test_ps_penalty_adaptive_through_store,
                   test_ps_penalty_adaptive_fresh_is_none, test_ps_penalty_classes,
                   test_ps_penalty_running_means, test_ps_penalty_store_classes)
