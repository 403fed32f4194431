/* Unit tests of top-k compression with error feedback, its residual table, and gradient
 * accumulation. */
#include "test_main.h" /* cmocka and what it needs first */

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/ps_client.h"
#include "sparrow/pserver.h"
#include "sparrow/trainer.h"
#include "sparrow/wire.h"
#include "test_rng.h"

#define DIM 3

static spw_topk_t *new_topk(double ratio, bool ef, bool fp16, size_t max_rows)
{
    char errstr[256];
    struct spw_topk_conf conf = {.dim = DIM,
                                 .ratio = ratio,
                                 .error_feedback = ef,
                                 .fp16 = fp16,
                                 .residual_max_rows = max_rows};
    spw_topk_t *tk = spw_topk_new(&conf, NULL, errstr, sizeof(errstr));
    if (!tk)
        fail_msg("spw_topk_new: %s", errstr);
    return tk;
}

/* Index of key in a push set, or -1. */
static long find_key(const struct spw_push_set *set, uint64_t key)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->keys[i] == key)
            return (long)i;
    return -1;
}

static void test_trn_topk_ratio_one_sends_everything_unchanged(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(1.0, true, false, 100);
    const uint64_t keys[4] = {1, 2, 3, 4};
    float grads[4 * DIM], copy[4 * DIM];
    const uint32_t versions[4] = {7, 8, 9, 10};
    uint64_t s = 1;
    for (int i = 0; i < 4 * DIM; i++)
        grads[i] = copy[i] = rng_uniform(&s, -1, 1);
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, versions, 4, &set), SPW_OK);
    assert_int_equal(set.n, 4);
    assert_memory_equal(set.keys, keys, sizeof(keys));
    assert_memory_equal(set.versions, versions, sizeof(versions));
    assert_memory_equal(set.values, copy, sizeof(copy));
    assert_null(set.values_f16);
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.residual_rows, 0);
    assert_int_equal(st.bytes_sent, st.bytes_dense);
    assert_int_equal(st.bytes_sent, 4 * (SPW_TRN_PUSH_ROW_OVERHEAD + 4 * DIM));
    spw_topk_destroy(tk);
}

static void test_trn_topk_keeps_largest_and_feeds_back(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(0.5, true, false, 100);
    const uint64_t keys[4] = {10, 20, 30, 40};
    float grads[4 * DIM] = {1, 0, 0, /**/ 0, 3, 0, /**/ 0, 0, 0.5f, /**/ 2, 2, 2};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 4, &set), SPW_OK);
    assert_int_equal(set.n, 2);
    assert_true(find_key(&set, 20) >= 0 && find_key(&set, 40) >= 0);
    float res[DIM];
    assert_true(spw_topk_residual(tk, 10, res));
    assert_true(res[0] == 1.0f && res[1] == 0.0f);
    assert_true(spw_topk_residual(tk, 30, res));
    assert_false(spw_topk_residual(tk, 20, res));

    /* Next step: key 10's small new gradient plus its residual now outranks key 50's. */
    const uint64_t keys2[2] = {10, 50};
    float grads2[2 * DIM] = {0.75f, 0, 0, /**/ 1.5f, 0, 0};
    assert_int_equal(spw_topk_compress(tk, keys2, grads2, NULL, 2, &set), SPW_OK);
    assert_int_equal(set.n, 1);
    assert_true(set.keys[0] == 10);
    assert_true(set.values[0] == 1.75f);
    assert_false(spw_topk_residual(tk, 10, res));
    assert_true(spw_topk_residual(tk, 50, res) && res[0] == 1.5f);

    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.steps, 2);
    assert_int_equal(st.rows_in, 6);
    assert_int_equal(st.rows_sent, 3);
    assert_int_equal(st.rows_selected, 3);
    assert_int_equal(st.residual_rows, 2); /* 30 and 50 */
    assert_true(st.bytes_dense == 2 * st.bytes_sent);
    spw_topk_destroy(tk);
}

/*
 * Over random steps with overlapping keys, for every key: sum of everything sent plus its
 * residual equals the sum of everything computed. Runs with a table large enough and with one
 * small enough that residuals are forced out, and ends with a flush (sent must then equal
 * computed).
 */
static void check_conservation_fp16(size_t max_rows, double ratio, bool fp16)
{
    enum { VOCAB = 200, STEPS = 60, ROWS = 50 };
    spw_topk_t *tk = new_topk(ratio, true, fp16, max_rows);
    /* with fp16 and a small table some rounding errors find no room: lost, at most 2^-11 of a
     * value (|value| < 60 here) each time it is sent */
    const bool lossy = fp16 && max_rows < 1000;
    const double tol = lossy ? 60.0 * STEPS / 2048.0 : 1e-4;
    double computed[VOCAB][DIM] = {{0}}, sent[VOCAB][DIM] = {{0}};
    uint64_t s = 99 + max_rows;
    uint64_t keys[ROWS];
    float grads[ROWS * DIM];
    struct spw_push_set set;
    for (int step = 0; step < STEPS; step++) {
        size_t n = 1 + rng_next(&s) % ROWS;
        for (size_t r = 0; r < n; r++) {
            bool dup;
            do { /* unique keys within a step */
                keys[r] = rng_next(&s) % VOCAB;
                dup = false;
                for (size_t q = 0; q < r; q++)
                    dup |= keys[q] == keys[r];
            } while (dup);
            for (int d = 0; d < DIM; d++) {
                grads[r * DIM + d] = rng_uniform(&s, -1, 1);
                computed[keys[r]][d] += grads[r * DIM + d];
            }
        }
        assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, n, &set), SPW_OK);
        for (size_t i = 0; i < set.n; i++) {
            assert_int_equal(find_key(&set, set.keys[i]), (long)i); /* unique */
            for (int d = 0; d < DIM; d++)
                sent[set.keys[i]][d] += set.values[i * DIM + d];
        }
        struct spw_topk_stats st;
        spw_topk_get_stats(tk, &st);
        assert_true(st.residual_rows <= max_rows);
    }
    size_t residuals = 0;
    for (int k = 0; k < VOCAB; k++) {
        float res[DIM] = {0, 0, 0};
        residuals += spw_topk_residual(tk, (uint64_t)k, res);
        for (int d = 0; d < DIM; d++)
            assert_float_equal(sent[k][d] + res[d], computed[k][d], tol);
    }
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.residual_rows, residuals);
    if (max_rows < 20)
        assert_true(st.rows_forced > 0);
    assert_int_equal(st.rows_sent, st.rows_selected + st.rows_forced);

    assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
    assert_int_equal(set.n, residuals);
    for (size_t i = 0; i < set.n; i++)
        for (int d = 0; d < DIM; d++)
            sent[set.keys[i]][d] += set.values[i * DIM + d];
    for (int k = 0; k < VOCAB; k++)
        for (int d = 0; d < DIM; d++)
            assert_float_equal(sent[k][d], computed[k][d], tol);
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.residual_rows, 0);
    if (fp16) {
        assert_false(set.fp16); /* a flush leaves no rounding error behind */
        assert_true(st.fp16_errors_kept > 0);
        if (!lossy)
            assert_int_equal(st.fp16_errors_lost, 0);
        else
            assert_true(st.fp16_errors_lost > 0);
    }
    spw_topk_destroy(tk);
}

static void check_conservation(size_t max_rows, double ratio)
{
    check_conservation_fp16(max_rows, ratio, false);
}

static void test_trn_topk_error_feedback_conserves_gradient(void **state)
{
    (void)state;
    check_conservation(100000, 0.1);
    check_conservation(100000, 0.5);
    check_conservation(7, 0.1); /* residuals forced out by the bound */
    /* fp16: the rounding errors are residuals too (a table with room for them) */
    check_conservation_fp16(100000, 0.3, true);
    check_conservation_fp16(100000, 1.0, true);
    /* a small table: every structure stays consistent (unique keys, counts) while slots are
     * held, reused and forced out */
    check_conservation_fp16(7, 0.1, true);
    check_conservation_fp16(40, 0.5, true);
    check_conservation_fp16(1, 0.3, true);
    check_conservation(0, 0.25); /* no room at all: every row is sent at once */
}

/* When the table is full, the residual whose key was computed longest ago is sent. */
static void test_trn_topk_full_table_sends_oldest(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(0.5, true, false, 2);
    float g[2 * DIM];
    struct spw_push_set set;
    const uint64_t a[2] = {1, 2}; /* 2 sent (larger), 1 kept */
    float ga[2 * DIM] = {1, 0, 0, 5, 0, 0};
    assert_int_equal(spw_topk_compress(tk, a, ga, NULL, 2, &set), SPW_OK);
    const uint64_t b[2] = {3, 4}; /* 4 sent, 3 kept: table {1, 3} */
    float gb[2 * DIM] = {1, 0, 0, 5, 0, 0};
    assert_int_equal(spw_topk_compress(tk, b, gb, NULL, 2, &set), SPW_OK);
    const uint64_t c[2] = {5, 6}; /* 6 sent, 5 kept: 1 (oldest) forced out */
    float gc[2 * DIM] = {1, 0, 0, 5, 0, 0};
    memcpy(g, gc, sizeof(g));
    assert_int_equal(spw_topk_compress(tk, c, g, NULL, 2, &set), SPW_OK);
    assert_int_equal(set.n, 2);
    assert_true(set.keys[0] == 6 && set.keys[1] == 1);
    float res[DIM];
    assert_false(spw_topk_residual(tk, 1, res));
    assert_true(spw_topk_residual(tk, 3, res));
    assert_true(spw_topk_residual(tk, 5, res));

    /* Touching 3 makes it the newest; the next overflow sends 5. */
    const uint64_t d[2] = {3, 7};
    float gd[2 * DIM] = {0.125f, 0, 0, 5, 0, 0};
    assert_int_equal(spw_topk_compress(tk, d, gd, NULL, 2, &set), SPW_OK);
    assert_int_equal(set.n, 1); /* 7 sent; 3 re-kept, table {5, 3} */
    const uint64_t e[2] = {8, 9};
    float ge[2 * DIM] = {1, 0, 0, 5, 0, 0};
    assert_int_equal(spw_topk_compress(tk, e, ge, NULL, 2, &set), SPW_OK);
    assert_int_equal(set.n, 2);
    assert_true(set.keys[1] == 5);

    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.rows_forced, 2);
    spw_topk_destroy(tk);
}

static void test_trn_topk_flush_and_drop(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(0.25, true, false, 100);
    const uint64_t keys[4] = {1, 2, 3, 4};
    float grads[4 * DIM] = {1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0};
    const uint32_t versions[4] = {11, 12, 13, 14};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, versions, 4, &set), SPW_OK);
    assert_int_equal(set.n, 1);
    assert_true(set.keys[0] == 4 && set.versions[0] == 14);
    assert_true(spw_topk_drop(tk, 2));
    assert_false(spw_topk_drop(tk, 2));
    assert_false(spw_topk_drop(tk, 4));
    assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
    assert_int_equal(set.n, 2);
    assert_true(set.keys[0] == 1 && set.values[0] == 1.0f && set.versions[0] == 11);
    assert_true(set.keys[1] == 3 && set.values[DIM] == 3.0f && set.versions[1] == 13);
    assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
    assert_int_equal(set.n, 0);
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.rows_dropped, 1);
    assert_int_equal(st.rows_flushed, 2);
    /* the table is usable after a flush */
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 4, &set), SPW_OK);
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.residual_rows, 3);
    spw_topk_destroy(tk);
}

static void test_trn_topk_without_error_feedback_discards(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(0.5, false, false, 100);
    const uint64_t keys[4] = {1, 2, 3, 4};
    float grads[4 * DIM] = {1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 4, &set), SPW_OK);
    assert_int_equal(set.n, 2);
    float res[DIM];
    assert_false(spw_topk_residual(tk, 1, res));
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.rows_discarded, 2);
    assert_int_equal(st.residual_rows, 0);
    assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
    assert_int_equal(set.n, 0);
    spw_topk_destroy(tk);
}

static void test_trn_topk_fp16_values_are_what_the_server_decodes(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(1.0, true, true, 100);
    const uint64_t keys[2] = {1, 2};
    float grads[2 * DIM] = {0.1f, 1.0f / 3.0f, -2.0e-3f, 65504.0f, 1e-8f, -7.25f};
    float orig[2 * DIM];
    memcpy(orig, grads, sizeof(orig));
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 2, &set), SPW_OK);
    assert_true(set.fp16);
    assert_non_null(set.values_f16);
    for (int i = 0; i < 2 * DIM; i++) {
        assert_int_equal(set.values_f16[i], spw_wire_f32_to_f16(orig[i]));
        assert_true(set.values[i] == spw_wire_f16_to_f32(set.values_f16[i]));
        assert_float_equal(set.values[i], orig[i], fabs(orig[i]) * 1e-3 + 1e-7);
    }
    assert_true(set.values[2 * DIM - 1] == -7.25f); /* exact in half */
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.bytes_sent, 2 * (SPW_TRN_PUSH_ROW_OVERHEAD + 2 * DIM));
    spw_topk_destroy(tk);
}

/* fp16 with error feedback: for every row, the decoded half sent plus the residual kept equals
 * the gradient computed; without error feedback nothing is kept. */
static void test_trn_topk_fp16_rounding_fed_back(void **state)
{
    (void)state;
    enum { ROWS = 64 };
    uint64_t s = 4242, keys[ROWS];
    float grads[ROWS * DIM], orig[ROWS * DIM];
    for (size_t r = 0; r < ROWS; r++) {
        keys[r] = 1000 + r;
        for (int d = 0; d < DIM; d++)
            grads[r * DIM + d] = rng_uniform(&s, -3, 3) * (r % 2 ? 1e-3f : 1.0f);
    }
    grads[0] = 1e-8f;  /* below the half range: sent as 0, all of it a residual */
    grads[1] = -7.25f; /* exact in half: no error */
    grads[2] = -7.25f;
    memcpy(orig, grads, sizeof(orig));
    for (int ef = 1; ef >= 0; ef--) {
        for (int ratio_one = 1; ratio_one >= 0; ratio_one--) {
            memcpy(grads, orig, sizeof(grads));
            spw_topk_t *tk = new_topk(ratio_one ? 1.0 : 0.5, ef, true, 1000);
            struct spw_push_set set;
            assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, ROWS, &set), SPW_OK);
            assert_true(set.fp16);
            size_t kept = 0, rounded = 0;
            for (size_t r = 0; r < ROWS; r++) {
                long i = find_key(&set, keys[r]);
                float res[DIM] = {0, 0, 0};
                bool has = spw_topk_residual(tk, keys[r], res);
                kept += has;
                if (!ef)
                    assert_false(has);
                bool err = false;
                for (int d = 0; d < DIM; d++) {
                    float sent = i >= 0 ? set.values[(size_t)i * DIM + d] : 0.0f;
                    if (i >= 0) /* what the shard decodes */
                        assert_true(sent == spw_wire_f16_to_f32(set.values_f16[i * DIM + d]));
                    err |= i >= 0 && sent != orig[r * DIM + d];
                    if (ef)
                        assert_float_equal(sent + res[d], orig[r * DIM + d],
                                           fabsf(orig[r * DIM + d]) * 1e-6f);
                }
                rounded += err;
                if (ef && i >= 0)
                    assert_true(has == err); /* a residual exactly when rounding lost something */
            }
            struct spw_topk_stats st;
            spw_topk_get_stats(tk, &st);
            assert_int_equal(st.residual_rows, kept);
            assert_true(rounded > 0);
            if (ef) {
                assert_int_equal(st.fp16_errors_kept, rounded);
                assert_true(kept >= rounded);
            } else {
                assert_int_equal(kept, 0);
                assert_int_equal(st.fp16_errors_kept, 0);
            }
            spw_topk_destroy(tk);
        }
    }
}

/* fp16 with stochastic rounding keeps no rounding error: with ratio 1 the residual table stays
 * empty and a flush sends nothing; with ratio < 1 only the unsent rows are residuals. Each value
 * sent is one of the two halves around the gradient, and over many steps of the same gradient
 * the sum sent is the sum computed (unbiased), where rounding to nearest without feedback is off
 * by the rounding error every step. */
static void test_trn_topk_fp16_stochastic(void **state)
{
    (void)state;
    enum { ROWS = 64, STEPS = 4000 };
    uint64_t s = 99, keys[ROWS];
    float orig[ROWS * DIM], grads[ROWS * DIM];
    for (size_t r = 0; r < ROWS; r++) {
        keys[r] = 500 + r;
        for (int d = 0; d < DIM; d++)
            orig[r * DIM + d] = rng_uniform(&s, -3, 3) * (r % 2 ? 1e-3f : 1.0f);
    }
    for (int ratio_one = 1; ratio_one >= 0; ratio_one--) {
        char errstr[256];
        struct spw_topk_conf conf = {.dim = DIM,
                                     .ratio = ratio_one ? 1.0 : 0.5,
                                     .error_feedback = true,
                                     .fp16 = true,
                                     .rounding = SPW_TOPK_ROUND_STOCHASTIC,
                                     .seed = 3,
                                     .residual_max_rows = 1000};
        spw_topk_t *tk = spw_topk_new(&conf, NULL, errstr, sizeof(errstr));
        assert_non_null(tk);
        double sent_sum[ROWS * DIM] = {0}, near_sum[ROWS * DIM] = {0};
        for (int step = 0; step < (ratio_one ? STEPS : 1); step++) {
            memcpy(grads, orig, sizeof(grads));
            struct spw_push_set set;
            assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, ROWS, &set), SPW_OK);
            assert_true(set.fp16);
            assert_int_equal(set.n, ratio_one ? ROWS : ROWS / 2);
            for (size_t i = 0; i < set.n; i++) {
                size_t r = set.keys[i] - 500;
                for (int d = 0; d < DIM; d++) {
                    float x = orig[r * DIM + d], v = set.values[i * DIM + d];
                    assert_true(v == spw_wire_f16_to_f32(set.values_f16[i * DIM + d]));
                    /* within one half-step (2^-10 relative, or a subnormal's 2^-24) */
                    assert_true(fabsf(v - x) <= fabsf(x) * 0x1p-10f + 0x1p-24f);
                    sent_sum[r * DIM + d] += v;
                    near_sum[r * DIM + d] += spw_wire_f16_to_f32(spw_wire_f32_to_f16(x));
                }
            }
            struct spw_topk_stats st;
            spw_topk_get_stats(tk, &st);
            /* no rounding error kept: only the unsent rows */
            assert_int_equal(st.residual_rows, ratio_one ? 0 : ROWS - set.n);
            assert_int_equal(st.fp16_errors_kept, 0);
        }
        if (ratio_one) {
            struct spw_push_set flushed;
            assert_int_equal(spw_topk_flush(tk, &flushed), SPW_OK);
            assert_int_equal(flushed.n, 0);
            /* the sums: stochastic within 5 standard deviations of STEPS draws of at most a
             * half-step each; nearest is off by STEPS times its error, more than that in total */
            double sto_err = 0, near_err = 0;
            for (size_t i = 0; i < ROWS * DIM; i++) {
                double want = (double)STEPS * orig[i];
                double step = fabs(orig[i]) * 0x1p-10 + 0x1p-24;
                assert_true(fabs(sent_sum[i] - want) <= 5 * step * sqrt(STEPS) / 2);
                sto_err += fabs(sent_sum[i] - want);
                near_err += fabs(near_sum[i] - want);
            }
            assert_true(sto_err * 4 < near_err);
        }
        spw_topk_destroy(tk);
    }
}

/* A rounding error is the remainder of a row sent at version v: sent on its own it carries v + 1,
 * the version that push gave the row, so that the shard does not count the trainer's own push as
 * staleness; a pull that still shows v (taken before the push landed) is no reset. */
static void test_trn_topk_fp16_error_versions(void **state)
{
    (void)state;
    for (int refold = 0; refold < 2; refold++) {
        spw_topk_t *tk = new_topk(1.0, true, true, 100);
        const uint64_t key = 1;
        float g[DIM] = {1.0f / 3.0f, 0.1f, -0.7f};
        const uint32_t v = 5;
        struct spw_push_set set;
        assert_int_equal(spw_topk_compress(tk, &key, g, &v, 1, &set), SPW_OK);
        assert_int_equal(set.versions[0], 5);
        float res[DIM];
        assert_true(spw_topk_residual(tk, key, res));
        if (refold) {
            float g2[DIM] = {0.25f, 0.25f, 0.25f};
            assert_int_equal(spw_topk_compress(tk, &key, g2, &v, 1, &set), SPW_OK);
            struct spw_topk_stats st;
            spw_topk_get_stats(tk, &st);
            assert_int_equal(st.rows_reset, 0);
            assert_float_equal(set.values[0], 0.25f + res[0], 1e-3);
        } else {
            assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
            assert_int_equal(set.n, 1);
            assert_int_equal(set.versions[0], 6);
            for (int d = 0; d < DIM; d++)
                assert_true(set.values[d] == res[d]);
        }
        spw_topk_destroy(tk);
    }
}

/* A rounding error that finds no room in the residual table is counted, and does not force an
 * older residual out (whose own error would need a slot in turn). */
static void test_trn_topk_fp16_error_needs_room(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(0.5, true, true, 1);
    const uint64_t keys[2] = {1, 2};
    float grads[2 * DIM] = {1.0f / 3.0f, 1.0f / 3.0f, 1.0f / 3.0f, 1e-3f, 0.0f, 0.0f};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 2, &set), SPW_OK);
    assert_int_equal(set.n, 1); /* key 1; key 2 took the only slot */
    float res[DIM];
    assert_true(spw_topk_residual(tk, 2, res));
    assert_false(spw_topk_residual(tk, 1, res));
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.fp16_errors_lost, 1);
    assert_int_equal(st.rows_forced, 0);
    spw_topk_destroy(tk);
}

/* A residual whose row the shard evicted since (the pulled version went back) is dropped, not
 * folded into the fresh row; one of an older version than the pull is folded. */
static void test_trn_topk_drops_residual_of_reset_row(void **state)
{
    (void)state;
    spw_topk_t *tk = new_topk(0.5, true, false, 100);
    const uint64_t keys[2] = {1, 2};
    float grads[2 * DIM] = {5, 5, 5, 1, 1, 1};
    const uint32_t v1[2] = {7, 9};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, v1, 2, &set), SPW_OK);
    float res[DIM];
    assert_true(spw_topk_residual(tk, 2, res)); /* computed from version 9 */
    /* key 2 comes back at version 0: evicted and created anew */
    const uint64_t k2[1] = {2};
    float g2[DIM] = {0.5f, 0.5f, 0.5f};
    const uint32_t v2[1] = {0};
    assert_int_equal(spw_topk_compress(tk, k2, g2, v2, 1, &set), SPW_OK);
    assert_int_equal(set.n, 1);
    assert_float_equal(set.values[0], 0.5, 0.0); /* the stale residual was not added */
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.rows_reset, 1);
    assert_int_equal(st.rows_dropped, 1);
    /* a newer version folds as before; a wrapped version counts as newer */
    spw_topk_t *tk2 = new_topk(0.5, true, false, 100);
    const uint32_t v3[2] = {7, UINT32_MAX - 1};
    float g3[2 * DIM] = {5, 5, 5, 1, 1, 1};
    assert_int_equal(spw_topk_compress(tk2, keys, g3, v3, 2, &set), SPW_OK);
    float g4[DIM] = {0.5f, 0.5f, 0.5f};
    const uint32_t v4[1] = {3};
    assert_int_equal(spw_topk_compress(tk2, k2, g4, v4, 1, &set), SPW_OK);
    assert_float_equal(set.values[0], 1.5, 0.0);
    spw_topk_get_stats(tk2, &st);
    assert_int_equal(st.rows_reset, 0);
    spw_topk_destroy(tk2);
    spw_topk_destroy(tk);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Pulls keys through the client into rows and vers. */
static void psc_pull(spw_ps_client_t *c, const uint64_t *keys, size_t n, float *rows,
                     uint32_t *vers)
{
    uint64_t token = 0;
    assert_int_equal(spw_ps_client_pull_start(c, keys, n, rows, vers, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 0), SPW_OK);
}

static void psc_push_set(spw_ps_client_t *c, const struct spw_push_set *set)
{
    struct spw_ps_push p = {.n = set->n,
                            .keys = set->keys,
                            .versions = set->versions,
                            .grads = set->values,
                            .grads_f16 = set->values_f16,
                            .fp16 = set->fp16};
    uint64_t seq = 0;
    assert_int_equal(spw_ps_client_push(c, &p, &seq), SPW_OK);
    assert_int_equal(spw_ps_client_flush(c, 0), SPW_OK);
}

/*
 * End to end over an in-process shard (the transport of trainer.shards=inproc): a residual of
 * key 2 is left by top-k; the shard then evicts the row (TTL) and creates it anew at version 0.
 * The next step pulls that version, so the compressor drops the residual instead of pushing the
 * old row's gradient into the fresh one. Without the eviction the same residual is folded in, and
 * so it is when a DRAM budget too small for the rows spills the row to RocksDB (the eviction the
 * memory budget forces keeps the row, version and all: the residual stays valid).
 */
static void test_trn_topk_inproc_eviction_drops_residual(void **state)
{
    (void)state;
    enum { KEEP, TTL, SPILL };
    for (int evict = KEEP; evict <= SPILL; evict++) {
        char root[64], path[128], err[256];
        snprintf(root, sizeof(root), "/tmp/test_trn_topk.XXXXXX");
        assert_non_null(mkdtemp(root));
        snprintf(path, sizeof(path), "%s/db", root);
        struct spw_ps_store_conf sc = {0};
        sc.dim = DIM;
        spw_ps_optim_conf_default(&sc.optim);
        sc.optim.kind = SPW_PS_SGD;
        sc.optim.lr = 1.0f;
        sc.optim.init_scale = 0.0f;
        sc.memory_bytes = evict == SPILL ? 24u << 10 : 1u << 20; /* SPILL: ~200 rows in DRAM */
        sc.ttl_s = 60;
        sc.db_path = path;
        spw_ps_store_t *store = spw_ps_store_open(&sc, err, sizeof(err));
        if (!store)
            fail_msg("store: %s", err);
        spw_ps_store_set_now(store, 1000);
        struct spw_ps_client_conf cc;
        spw_ps_client_conf_default(&cc);
        cc.dim = DIM;
        cc.stores = &store;
        cc.n_stores = 1;
        spw_ps_client_t *c = spw_ps_client_new(&cc, err, sizeof(err));
        if (!c)
            fail_msg("client: %s", err);
        spw_topk_t *tk = new_topk(0.5, true, false, 100);

        const uint64_t keys[2] = {1, 2};
        float rows[2 * DIM];
        uint32_t vers[2];
        /* step 1: both rows updated once, pushed as computed */
        float g0[2 * DIM] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
        psc_pull(c, keys, 2, rows, vers);
        struct spw_push_set direct = {
            .n = 2, .dim = DIM, .keys = keys, .versions = vers, .values = g0};
        psc_push_set(c, &direct);
        /* step 2: key 1 sent, key 2 kept as a residual computed from version 1 */
        psc_pull(c, keys, 2, rows, vers);
        assert_int_equal(vers[1], 1);
        float g1[2 * DIM] = {5, 5, 5, 1, 1, 1};
        struct spw_push_set set;
        assert_int_equal(spw_topk_compress(tk, keys, g1, vers, 2, &set), SPW_OK);
        assert_int_equal(set.n, 1);
        psc_push_set(c, &set);
        if (evict == TTL) {
            spw_ps_store_set_now(store, 1000 + 61);
            size_t evicted = 0;
            assert_int_equal(spw_ps_store_expire(store, 1000, &evicted), SPW_OK);
            assert_int_equal(evicted, 2);
        } else if (evict == SPILL) { /* 4000 other rows push keys 1 and 2 out of DRAM */
            static uint64_t many[4000];
            static float gm[4000 * DIM];
            for (size_t i = 0; i < 4000; i++)
                many[i] = 100 + i;
            struct spw_push_set other = {.n = 4000, .dim = DIM, .keys = many, .values = gm};
            psc_push_set(c, &other);
            struct spw_ps_store_stats ss;
            spw_ps_store_get_stats(store, &ss);
            assert_true(ss.evictions > 0);
            assert_true(ss.rows_dram < 1000);
        }
        /* step 3: key 2 again */
        const uint64_t k2[1] = {2};
        psc_pull(c, k2, 1, rows, vers);
        assert_int_equal(vers[0], evict == TTL ? 0 : 1);
        float g2[DIM] = {0.5f, 0.5f, 0.5f};
        assert_int_equal(spw_topk_compress(tk, k2, g2, vers, 1, &set), SPW_OK);
        assert_int_equal(set.n, 1);
        psc_push_set(c, &set);
        psc_pull(c, k2, 1, rows, vers);
        struct spw_topk_stats st;
        spw_topk_get_stats(tk, &st);
        /* SGD, lr 1: the row is minus what was applied to it */
        if (evict == TTL) {
            assert_int_equal(st.rows_reset, 1);
            assert_float_equal(rows[0], -0.5, 1e-6); /* the fresh row got this step's only */
        } else {
            assert_int_equal(st.rows_reset, 0);
            assert_float_equal(rows[0], -(0.25 + 1.0 + 0.5), 1e-6);
        }
        float res[DIM];
        assert_false(spw_topk_residual(tk, 2, res));
        spw_topk_destroy(tk);
        spw_ps_client_destroy(c);
        spw_ps_store_close(store);
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

static void test_trn_topk_rejects_bad_conf(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_topk_conf conf = {.dim = DIM, .ratio = 0.0, .residual_max_rows = 1};
    assert_null(spw_topk_new(&conf, NULL, errstr, sizeof(errstr)));
    conf.ratio = 1.5;
    assert_null(spw_topk_new(&conf, NULL, errstr, sizeof(errstr)));
    conf.ratio = NAN;
    assert_null(spw_topk_new(&conf, NULL, errstr, sizeof(errstr)));
    conf.ratio = 0.5;
    conf.dim = 0;
    assert_null(spw_topk_new(&conf, NULL, errstr, sizeof(errstr)));
    /* a backend of another width */
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 8), SPW_OK);
    spw_backend_t *be = spw_backend_new(SPW_BACKEND_CPU, &model, errstr, sizeof(errstr));
    assert_non_null(be);
    conf.dim = DIM;
    assert_null(spw_topk_new(&conf, be, errstr, sizeof(errstr)));
    spw_backend_destroy(be);
    spw_topk_destroy(NULL);
}

/* A compressor that selects with a backend behaves like one that uses the CPU functions. */
static void test_trn_topk_backend_selection_matches_cpu(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, DIM - 1), SPW_OK);
    spw_backend_t *be = spw_backend_new(SPW_BACKEND_AUTO, &model, errstr, sizeof(errstr));
    assert_non_null(be);
    struct spw_topk_conf conf = {
        .dim = DIM, .ratio = 0.3, .error_feedback = true, .residual_max_rows = 1000};
    spw_topk_t *a = spw_topk_new(&conf, be, errstr, sizeof(errstr));
    spw_topk_t *b = spw_topk_new(&conf, NULL, errstr, sizeof(errstr));
    assert_non_null(a);
    assert_non_null(b);
    uint64_t s = 3, keys[100];
    float ga[100 * DIM], gb[100 * DIM];
    for (int step = 0; step < 20; step++) {
        for (int r = 0; r < 100; r++)
            keys[r] = (uint64_t)(step * 37 + r);
        for (int i = 0; i < 100 * DIM; i++)
            ga[i] = gb[i] = rng_uniform(&s, -1, 1);
        struct spw_push_set sa, sb;
        assert_int_equal(spw_topk_compress(a, keys, ga, NULL, 100, &sa), SPW_OK);
        assert_int_equal(spw_topk_compress(b, keys, gb, NULL, 100, &sb), SPW_OK);
        assert_int_equal(sa.n, sb.n);
        assert_memory_equal(sa.keys, sb.keys, sa.n * sizeof(uint64_t));
        assert_memory_equal(sa.values, sb.values, sa.n * DIM * sizeof(float));
    }
    spw_topk_destroy(a);
    spw_topk_destroy(b);
    spw_backend_destroy(be);
}

static void test_trn_topk_grad_acc_sums_rows(void **state)
{
    (void)state;
    char errstr[256];
    spw_grad_acc_t *acc = spw_grad_acc_new(2, errstr, sizeof(errstr));
    assert_non_null(acc);
    const uint64_t k1[2] = {5, 6};
    const float g1[4] = {1, 2, 3, 4};
    const uint32_t v1[2] = {10, 3};
    const uint64_t k2[2] = {6, 7};
    const float g2[4] = {0.5f, 0.25f, -1, -2};
    const uint32_t v2[2] = {2, 9};
    assert_int_equal(spw_grad_acc_add(acc, k1, g1, v1, 2), SPW_OK);
    assert_int_equal(spw_grad_acc_add(acc, k2, g2, v2, 2), SPW_OK);
    assert_int_equal(spw_grad_acc_rows(acc), 3);
    const uint64_t want_k[3] = {5, 6, 7};
    const float want_g[6] = {1, 2, 3.5f, 4.25f, -1, -2};
    const uint32_t want_v[3] = {10, 2, 9};
    assert_memory_equal(spw_grad_acc_keys(acc), want_k, sizeof(want_k));
    assert_memory_equal(spw_grad_acc_grads(acc), want_g, sizeof(want_g));
    assert_memory_equal(spw_grad_acc_versions(acc), want_v, sizeof(want_v));
    spw_grad_acc_reset(acc);
    assert_int_equal(spw_grad_acc_rows(acc), 0);
    assert_int_equal(spw_grad_acc_add(acc, k2, g2, NULL, 2), SPW_OK);
    assert_int_equal(spw_grad_acc_rows(acc), 2);
    assert_true(spw_grad_acc_keys(acc)[0] == 6 && spw_grad_acc_grads(acc)[0] == 0.5f);
    assert_int_equal(spw_grad_acc_versions(acc)[0], 0);
    spw_grad_acc_destroy(acc);
    spw_grad_acc_destroy(NULL);
}

/* trainer.push.pulled through the compressor: a sent row carries this step's pulled values, a
 * residual sent later (forced out or flushed) those of the step that left it. */
static void test_trn_topk_pulled_follow_rows(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_topk_conf conf = {
        .dim = DIM, .ratio = 0.5, .error_feedback = true, .residual_max_rows = 1, .pulled = true};
    spw_topk_t *tk = spw_topk_new(&conf, NULL, errstr, sizeof(errstr));
    assert_non_null(tk);
    const uint64_t keys[2] = {1, 2};
    float grads[2 * DIM] = {10, 10, 10, 0.1f, 0.1f, 0.1f}; /* key 1 is sent, key 2 kept */
    const float pulled[2 * DIM] = {1, 1, 1, 2, 2, 2};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 2, &set), SPW_ERR_INVALID);
    assert_int_equal(spw_topk_compress_pulled(tk, keys, grads, NULL, pulled, 2, &set), SPW_OK);
    assert_int_equal(set.n, 1);
    assert_int_equal(set.keys[0], 1);
    assert_non_null(set.pulled);
    assert_float_equal(set.pulled[0], 1.0, 0.0);
    /* the next step: key 3 sent, key 4 kept, which forces key 2's residual out (table of 1) */
    const uint64_t keys2[2] = {3, 4};
    float grads2[2 * DIM] = {10, 10, 10, 0.2f, 0.2f, 0.2f};
    const float pulled2[2 * DIM] = {3, 3, 3, 4, 4, 4};
    assert_int_equal(spw_topk_compress_pulled(tk, keys2, grads2, NULL, pulled2, 2, &set), SPW_OK);
    long i2 = find_key(&set, 2), i3 = find_key(&set, 3);
    assert_true(i2 >= 0 && i3 >= 0);
    assert_float_equal(set.pulled[i2 * DIM], 2.0, 0.0); /* the step that left it */
    assert_float_equal(set.pulled[i3 * DIM + 2], 3.0, 0.0);
    /* key 4 comes back: its residual folds into the new row, which carries the new values */
    const uint64_t keys3[1] = {4};
    float grads3[DIM] = {1, 1, 1};
    const float pulled3[DIM] = {5, 5, 5};
    assert_int_equal(spw_topk_compress_pulled(tk, keys3, grads3, NULL, pulled3, 1, &set), SPW_OK);
    assert_int_equal(set.n, 1);
    assert_float_equal(set.values[0], 1.2, 1e-6);
    assert_float_equal(set.pulled[0], 5.0, 0.0);
    /* a flushed residual carries its own */
    const uint64_t keys4[2] = {5, 6};
    float grads4[2 * DIM] = {10, 10, 10, 0.3f, 0.3f, 0.3f};
    const float pulled4[2 * DIM] = {5, 5, 5, 6, 6, 6};
    assert_int_equal(spw_topk_compress_pulled(tk, keys4, grads4, NULL, pulled4, 2, &set), SPW_OK);
    assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
    assert_int_equal(set.n, 1);
    assert_int_equal(set.keys[0], 6);
    assert_float_equal(set.pulled[0], 6.0, 0.0);
    spw_topk_destroy(tk);
    /* without conf.pulled the sets carry none */
    tk = new_topk(1.0, true, false, 10);
    assert_int_equal(spw_topk_compress_pulled(tk, keys, grads, NULL, pulled, 2, &set), SPW_OK);
    assert_null(set.pulled);
    spw_topk_destroy(tk);
}

/* Gradient accumulation keeps, per key, the pulled values of the latest micro-batch holding it
 * (the version stays the oldest); one add without them and there are none for the step. */
static void test_trn_acc_pulled_latest(void **state)
{
    (void)state;
    char errstr[256];
    spw_grad_acc_t *acc = spw_grad_acc_new(DIM, errstr, sizeof(errstr));
    assert_non_null(acc);
    const uint64_t k1[2] = {1, 2}, k2[2] = {2, 3};
    const float g[2 * DIM] = {1, 1, 1, 1, 1, 1};
    const float p1[2 * DIM] = {1, 1, 1, 2, 2, 2}, p2[2 * DIM] = {20, 20, 20, 30, 30, 30};
    const uint32_t v1[2] = {5, 5}, v2[2] = {7, 7};
    assert_int_equal(spw_grad_acc_add_pulled(acc, k1, g, v1, p1, 2), SPW_OK);
    assert_int_equal(spw_grad_acc_add_pulled(acc, k2, g, v2, p2, 2), SPW_OK);
    assert_int_equal(spw_grad_acc_rows(acc), 3);
    const float *pulled = spw_grad_acc_pulled(acc);
    assert_non_null(pulled);
    assert_float_equal(pulled[0], 1.0, 0.0);            /* key 1: its only micro-batch */
    assert_float_equal(pulled[DIM], 20.0, 0.0);         /* key 2: the latest */
    assert_float_equal(pulled[2 * DIM], 30.0, 0.0);     /* key 3 */
    assert_int_equal(spw_grad_acc_versions(acc)[1], 5); /* key 2's oldest version */
    assert_float_equal(spw_grad_acc_grads(acc)[DIM], 2.0, 0.0);
    assert_int_equal(spw_grad_acc_add(acc, k1, g, v1, 2), SPW_OK);
    assert_null(spw_grad_acc_pulled(acc));
    spw_grad_acc_reset(acc);
    assert_null(spw_grad_acc_pulled(acc));
    assert_int_equal(spw_grad_acc_add_pulled(acc, k1, g, v1, p1, 2), SPW_OK);
    assert_non_null(spw_grad_acc_pulled(acc));
    spw_grad_acc_destroy(acc);
}

SPW_TEST_MAIN(test_trn_topk_pulled_follow_rows, test_trn_acc_pulled_latest,
              test_trn_topk_ratio_one_sends_everything_unchanged,
              test_trn_topk_keeps_largest_and_feeds_back,
              test_trn_topk_error_feedback_conserves_gradient,
              test_trn_topk_full_table_sends_oldest, test_trn_topk_flush_and_drop,
              test_trn_topk_without_error_feedback_discards,
              test_trn_topk_fp16_values_are_what_the_server_decodes,
              test_trn_topk_fp16_rounding_fed_back, test_trn_topk_fp16_stochastic,
              test_trn_topk_fp16_error_needs_room, test_trn_topk_fp16_error_versions,
              test_trn_topk_drops_residual_of_reset_row,
              test_trn_topk_inproc_eviction_drops_residual, test_trn_topk_rejects_bad_conf,
              test_trn_topk_backend_selection_matches_cpu, test_trn_topk_grad_acc_sums_rows)
