/* Unit tests of streaming evaluation: exact and binned AUC, logloss, the sliding window. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/eval.h"

#define EPS 1e-12

static void assert_near(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.17g, want %.17g (tolerance %g)", got, want, tol);
}

/* sklearn's roc_auc_score example: positives at 0.35 and 0.8, negatives at 0.1 and 0.4; of the
 * 4 pairs only (0.35, 0.4) is misordered: 3/4. */
static void test_eval_auc_exact_simple(void **state)
{
    (void)state;
    const double p[] = {0.1, 0.4, 0.35, 0.8};
    const double y[] = {0, 0, 1, 1};
    assert_near(spw_eval_auc_exact(p, y, 4), 0.75, EPS);
}

/* Ties count half. Positives 0.5, 0.5, 0.9; negatives 0.2, 0.5, 0.1. Each positive at 0.5 beats
 * 0.2 and 0.1 and ties 0.5: 2.5, twice; 0.9 beats all three: 3. (2.5 + 2.5 + 3) / 9 = 8/9. The
 * input arrays stay as they were. */
static void test_eval_auc_exact_ties(void **state)
{
    (void)state;
    double p[] = {0.2, 0.5, 0.5, 0.5, 0.9, 0.1};
    double y[] = {0, 1, 0, 1, 1, 0};
    const double p0[] = {0.2, 0.5, 0.5, 0.5, 0.9, 0.1};
    const double y0[] = {0, 1, 0, 1, 1, 0};
    assert_near(spw_eval_auc_exact(p, y, 6), 8.0 / 9.0, EPS);
    assert_memory_equal(p, p0, sizeof(p));
    assert_memory_equal(y, y0, sizeof(y));

    /* all predictions equal: every pair ties, 0.5 */
    const double same[] = {0.3, 0.3, 0.3, 0.3};
    const double ys[] = {1, 0, 0, 1};
    assert_near(spw_eval_auc_exact(same, ys, 4), 0.5, EPS);
    /* perfectly reversed: 0; labels >= 0.5 are positive */
    const double pr[] = {0.9, 0.8, 0.2, 0.1};
    const double yr[] = {0.2, 0.4, 0.5, 1.0};
    assert_near(spw_eval_auc_exact(pr, yr, 4), 0.0, EPS);
}

static void test_eval_one_class_nan(void **state)
{
    (void)state;
    const double p[] = {0.1, 0.7, 0.3};
    const double pos[] = {1, 1, 1}, neg[] = {0, 0, 0};
    assert_true(isnan(spw_eval_auc_exact(p, pos, 3)));
    assert_true(isnan(spw_eval_auc_exact(p, neg, 3)));
    assert_true(isnan(spw_eval_auc_exact(p, pos, 0)));

    spw_eval_t *ev = spw_eval_new(10);
    assert_non_null(ev);
    struct spw_eval_summary s;
    spw_eval_window(ev, &s);
    assert_int_equal(s.count, 0);
    assert_true(isnan(s.auc) && isnan(s.logloss));
    for (int i = 0; i < 3; i++)
        spw_eval_add(ev, p[i], 1.0);
    spw_eval_window(ev, &s);
    assert_int_equal(s.count, 3);
    assert_true(isnan(s.auc));
    assert_near(s.ctr, 1.0, EPS);
    assert_false(isnan(s.logloss));
    spw_eval_cumulative(ev, &s);
    assert_true(isnan(s.auc));
    assert_true(isnan(s.auc_err));
    spw_eval_add(ev, 0.05, 0.0); /* one negative below every positive: AUC 1 */
    spw_eval_window(ev, &s);
    assert_near(s.auc, 1.0, EPS);
    spw_eval_cumulative(ev, &s);
    assert_near(s.auc, 1.0, EPS);
    assert_near(s.auc_err, 0.0, EPS);
    spw_eval_destroy(ev);
}

/* logloss of (0.1,0) (0.4,0) (0.35,1) (0.8,1) is
 * -(ln 0.9 + ln 0.6 + ln 0.35 + ln 0.8) / 4
 * = (0.1053605157 + 0.5108256238 + 1.0498221245 + 0.2231435513) / 4 = 0.4722879538. */
static void test_eval_logloss(void **state)
{
    (void)state;
    spw_eval_t *ev = spw_eval_new(100);
    spw_eval_add(ev, 0.1, 0);
    spw_eval_add(ev, 0.4, 0);
    spw_eval_add(ev, 0.35, 1);
    spw_eval_add(ev, 0.8, 1);
    struct spw_eval_summary w, c;
    spw_eval_window(ev, &w);
    spw_eval_cumulative(ev, &c);
    assert_int_equal(w.count, 4);
    assert_int_equal(c.count, 4);
    assert_near(w.logloss, 0.4722879538, 1e-9);
    assert_near(c.logloss, 0.4722879538, 1e-9);
    assert_near(w.auc, 0.75, EPS);
    assert_near(w.auc_err, 0.0, 0.0);
    assert_near(c.auc, 0.75, EPS); /* four distinct bins: exact */
    assert_near(c.auc_err, 0.0, 0.0);
    assert_near(w.ctr, 0.5, EPS);
    assert_near(w.mean_p, 1.65 / 4, EPS);
    assert_near(c.mean_p, 1.65 / 4, EPS);
    spw_eval_destroy(ev);

    /* clamping: p = 0 with label 1 costs -ln(1e-7) = 16.118095650958319, not infinity */
    ev = spw_eval_new(2);
    spw_eval_add(ev, 0.0, 1);
    spw_eval_add(ev, 1.0, 0);
    spw_eval_window(ev, &w);
    spw_eval_cumulative(ev, &c);
    assert_near(w.logloss, 16.118095650958319, 1e-6);
    assert_near(c.logloss, 16.118095650958319, 1e-6);
    /* a soft label uses the label as given: y = 0.25, p = 0.5 costs ln 2 */
    spw_eval_add(ev, 0.5, 0.25);
    spw_eval_add(ev, 0.5, 0.25);
    spw_eval_window(ev, &w);
    assert_near(w.logloss, log(2.0), 1e-12);
    assert_near(w.ctr, 0.25, EPS);
    spw_eval_destroy(ev);
}

/* A window of 3 keeps only the last 3 examples; the cumulative view keeps everything. */
static void test_eval_window_eviction(void **state)
{
    (void)state;
    spw_eval_t *ev = spw_eval_new(3);
    struct spw_eval_summary w, c;
    spw_eval_add(ev, 0.9, 1);
    spw_eval_add(ev, 0.1, 0);
    spw_eval_add(ev, 0.2, 1);
    spw_eval_window(ev, &w);
    assert_int_equal(w.count, 3);
    assert_near(w.auc, 1.0, EPS); /* 0.9 and 0.2 both above 0.1 */
    spw_eval_add(ev, 0.8, 0);     /* evicts (0.9, 1) */
    spw_eval_window(ev, &w);
    assert_int_equal(w.count, 3);
    assert_near(w.auc, 0.5, EPS); /* 0.2 beats 0.1, loses to 0.8 */
    assert_near(w.ctr, 1.0 / 3.0, EPS);
    assert_near(w.mean_p, 1.1 / 3.0, EPS);
    spw_eval_cumulative(ev, &c);
    assert_int_equal(c.count, 4);
    assert_near(c.auc, 0.75, EPS); /* 0.9 beats 0.1 and 0.8, 0.2 beats 0.1 */
    assert_near(c.ctr, 0.5, EPS);
    spw_eval_add(ev, 0.5, 1);
    spw_eval_add(ev, 0.6, 1); /* window: (0.8,0) (0.5,1) (0.6,1): both positives below */
    spw_eval_window(ev, &w);
    assert_near(w.auc, 0.0, EPS);
    spw_eval_add(ev, 0.7, 1); /* window: all positive */
    spw_eval_window(ev, &w);
    assert_true(isnan(w.auc));
    assert_int_equal(w.count, 3);
    spw_eval_cumulative(ev, &c);
    assert_int_equal(c.count, 7);
    spw_eval_destroy(ev);
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: deterministic, good enough for test data */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

#define N_RANDOM 100000

/* 100k examples with label ~ Bernoulli(p): the binned AUC is within its auc_err of the exact AUC,
 * logloss matches a direct sum, and the window matches an exact computation of its last part. */
static void test_eval_cumulative_random(void **state)
{
    (void)state;
    const size_t window = 1000;
    double *p = malloc(N_RANDOM * sizeof(double));
    double *y = malloc(N_RANDOM * sizeof(double));
    assert_non_null(p);
    assert_non_null(y);
    spw_eval_t *ev = spw_eval_new(window);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    double ll = 0.0, ysum = 0.0;
    for (size_t i = 0; i < N_RANDOM; i++) {
        /* quantise some predictions so that exact ties occur too */
        p[i] = rng_unit(&seed);
        if (i % 3 == 0)
            p[i] = floor(p[i] * 1000.0) / 1000.0;
        y[i] = rng_unit(&seed) < p[i] ? 1.0 : 0.0;
        double q = p[i] < 1e-7 ? 1e-7 : (p[i] > 1 - 1e-7 ? 1 - 1e-7 : p[i]);
        ll -= y[i] * log(q) + (1 - y[i]) * log(1 - q);
        ysum += y[i];
        spw_eval_add(ev, p[i], y[i]);
    }
    struct spw_eval_summary c, w;
    spw_eval_cumulative(ev, &c);
    double exact = spw_eval_auc_exact(p, y, N_RANDOM);
    assert_int_equal(c.count, N_RANDOM);
    assert_true(exact > 0.8 && exact < 0.87); /* E[AUC] for uniform p is 5/6 */
    assert_true(c.auc_err > 0.0);             /* 100k in 65536 bins: some bins mix classes */
    assert_true(c.auc_err < 1e-3);
    if (!(fabs(c.auc - exact) <= c.auc_err + EPS))
        fail_msg("binned %.12f exact %.12f err bound %.3g", c.auc, exact, c.auc_err);
    assert_near(c.logloss, ll / N_RANDOM, 1e-12);
    assert_near(c.ctr, ysum / N_RANDOM, EPS);

    spw_eval_window(ev, &w);
    assert_int_equal(w.count, window);
    size_t off = N_RANDOM - window;
    assert_near(w.auc, spw_eval_auc_exact(p + off, y + off, window), EPS);
    double wll = 0.0;
    for (size_t i = off; i < N_RANDOM; i++) {
        double q = p[i] < 1e-7 ? 1e-7 : (p[i] > 1 - 1e-7 ? 1 - 1e-7 : p[i]);
        wll -= y[i] * log(q) + (1 - y[i]) * log(1 - q);
    }
    assert_near(w.logloss, wll / (double)window, 1e-12);
    spw_eval_destroy(ev);
    free(p);
    free(y);
}

/* Inside one bin the binned AUC cannot see the order: positives all just above negatives gives an
 * exact AUC of 1, a binned 0.5, and auc_err 0.5 - the bound is tight. */
static void test_eval_cumulative_bound_tight(void **state)
{
    (void)state;
    spw_eval_t *ev = spw_eval_new(8);
    const double base = 0.5, step = 1e-9; /* bin width is 2^-16, about 1.5e-5 */
    double p[8], y[8];
    for (int i = 0; i < 8; i++) {
        p[i] = base + step * i;
        y[i] = i >= 4;
        spw_eval_add(ev, p[i], y[i]);
    }
    struct spw_eval_summary c;
    spw_eval_cumulative(ev, &c);
    double exact = spw_eval_auc_exact(p, y, 8);
    assert_near(exact, 1.0, EPS);
    assert_near(c.auc, 0.5, EPS);
    assert_near(c.auc_err, 0.5, EPS);
    assert_true(fabs(c.auc - exact) <= c.auc_err + EPS);
    spw_eval_destroy(ev);
}

static void test_eval_new_rejects_zero(void **state)
{
    (void)state;
    assert_null(spw_eval_new(0));
    assert_null(spw_eval_new(SIZE_MAX));
    spw_eval_destroy(NULL);
}

SPW_TEST_MAIN(test_eval_auc_exact_simple, test_eval_auc_exact_ties, test_eval_one_class_nan,
              test_eval_logloss, test_eval_window_eviction, test_eval_cumulative_random,
              test_eval_cumulative_bound_tight, test_eval_new_rejects_zero)
