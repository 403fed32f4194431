/* Unit tests of progressive validation (model vs oracle vs constant). */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <string.h>

#include "sparrow/trainer.h"

static double ll(double p, double y)
{
    return -(y * log(p) + (1 - y) * log(1 - p));
}

static void test_trn_pv_reports_model_oracle_and_constant(void **state)
{
    (void)state;
    char errstr[128];
    spw_pv_t *pv = spw_pv_new(3, errstr, sizeof(errstr));
    assert_non_null(pv);
    const float preds[4] = {0.9f, 0.2f, 0.6f, 0.3f};
    const float labels[4] = {1, 0, 1, 0};
    const float oracle[4] = {0.8f, NAN, 0.7f, 0.1f};
    spw_pv_add(pv, preds, labels, oracle, 2);
    spw_pv_add(pv, preds + 2, labels + 2, oracle + 2, 2);
    struct spw_pv_report r;
    spw_pv_report(pv, &r);
    assert_int_equal(r.examples, 4);
    assert_int_equal(r.oracle_examples, 3);
    assert_int_equal(r.cumulative.count, 4);
    assert_int_equal(r.window.count, 3);
    double cum = (ll(0.9f, 1) + ll(0.2f, 0) + ll(0.6f, 1) + ll(0.3f, 0)) / 4;
    assert_float_equal(r.cumulative.logloss, cum, 1e-9);
    double win = (ll(0.2f, 0) + ll(0.6f, 1) + ll(0.3f, 0)) / 3;
    assert_float_equal(r.window.logloss, win, 1e-9);
    assert_float_equal(r.window.auc, 1.0, 1e-12);
    assert_int_equal(r.oracle_cumulative.count, 3);
    double orc = (ll(0.8f, 1) + ll(0.7f, 1) + ll(0.1f, 0)) / 3;
    assert_float_equal(r.oracle_cumulative.logloss, orc, 1e-9);
    /* the best constant of the window (ctr 1/3) and of everything (ctr 1/2) */
    assert_float_equal(r.const_window, ll(1.0 / 3, 1) / 3 + 2 * ll(1.0 / 3, 0) / 3, 1e-9);
    assert_float_equal(r.const_cumulative, log(2.0), 1e-9);
    spw_pv_destroy(pv);
}

static void test_trn_pv_without_oracle(void **state)
{
    (void)state;
    char errstr[128];
    spw_pv_t *pv = spw_pv_new(10, errstr, sizeof(errstr));
    assert_non_null(pv);
    const float preds[2] = {0.5f, 0.5f};
    const float labels[2] = {1, 1};
    spw_pv_add(pv, preds, labels, NULL, 2);
    struct spw_pv_report r;
    spw_pv_report(pv, &r);
    assert_int_equal(r.oracle_examples, 0);
    assert_int_equal(r.oracle_window.count, 0);
    assert_float_equal(r.cumulative.logloss, log(2.0), 1e-9);
    assert_true(r.const_cumulative == 0.0); /* one class: the constant is perfect */
    spw_pv_destroy(pv);
    assert_null(spw_pv_new(0, errstr, sizeof(errstr)));
    spw_pv_destroy(NULL);
}

SPW_TEST_MAIN(test_trn_pv_reports_model_oracle_and_constant, test_trn_pv_without_oracle)
