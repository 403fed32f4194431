/* The CUDA kernels' per-item code, run on the host by the backend's emulation, against the CPU
 * oracle: bit-for-bit equal predictions, norms and top-k sets; gradients bit-for-bit equal for
 * every row of at most SPW_TRN_CUDA_CHUNK occurrences (the bias element too when the batch has at
 * most that many examples), and for the heavier rows, which the device sums in chunks, within
 * 1e-5 of the element or of the batch's largest gradient element. Needs no device (the device
 * itself is tested by test_cuda_model); built with the CUDA backend. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/tools.h"
#include "sparrow/trainer.h"
#include "trainer_cuda.h"
#include "trainer_int.h"
#include "../unit/test_rng.h"

static spw_batch_t *gen_batch(size_t n, spw_gen_t *gen)
{
    char errstr[256];
    spw_batch_t *batch = spw_batch_new(n, 39, errstr, sizeof(errstr));
    assert_non_null(batch);
    for (size_t i = 0; i < n; i++) {
        const struct spw_gen_example *ex = spw_gen_next(gen);
        assert_int_equal(spw_batch_add(batch, ex->label, ex->oracle_p, ex->event_time_ms,
                                       ex->n_features, ex->keys, NULL),
                         SPW_OK);
    }
    return batch;
}

/* Tiny vocabulary (key 0 included: a real feature on the bias row), weights, soft labels,
 * empty examples. */
static spw_batch_t *dup_batch(size_t n, uint64_t seed)
{
    char errstr[256];
    spw_batch_t *batch = spw_batch_new(n, 12, errstr, sizeof(errstr));
    assert_non_null(batch);
    uint64_t keys[40];
    float w[40];
    for (size_t i = 0; i < n; i++) {
        size_t nf = rng_next(&seed) % 40;
        for (size_t j = 0; j < nf; j++) {
            keys[j] = rng_next(&seed) % 50;
            w[j] = rng_uniform(&seed, -2.0f, 2.0f);
        }
        assert_int_equal(spw_batch_add(batch, rng_uniform(&seed, 0, 1), NAN, 0, nf, keys, w),
                         SPW_OK);
    }
    return batch;
}

/* The worst relative difference seen over every call, for the log. */
static double worst_chunked;

static void compare_grads(const struct spw_model *model, const spw_batch_t *batch,
                          const uint32_t *row_start, const float *gc, const float *ge)
{
    size_t nu = spw_batch_unique(batch), dim = model->dim;
    double gmax = 0.0;
    for (size_t i = 0; i < nu * dim; i++)
        gmax = fmax(gmax, fabs(gc[i]));
    for (size_t u = 0; u < nu; u++) {
        bool exact = row_start[u + 1] - row_start[u] <= SPW_TRN_CUDA_CHUNK;
        for (size_t d = 0; d < dim; d++) {
            float c = gc[u * dim + d], e = ge[u * dim + d];
            if (exact && !(u == 0 && d == 0 && batch->n > SPW_TRN_CUDA_CHUNK)) {
                if (memcmp(&c, &e, sizeof(c)) != 0)
                    fail_msg("row %zu (%u occurrences) element %zu: cpu %.9g cuda %.9g", u,
                             row_start[u + 1] - row_start[u], d, c, e);
                continue;
            }
            /* relative to the element or to the largest one: a chunked sum of terms that cancel
             * differs from the sequential one by rounding of the terms, not of the result */
            double scale = fmax(fmax(fabs(c), fabs(e)), gmax);
            double rel = scale == 0.0 ? 0.0 : fabs((double)c - e) / scale;
            worst_chunked = fmax(worst_chunked, rel);
            if (rel > 1e-5)
                fail_msg("row %zu (%u occurrences, chunked) element %zu: cpu %.9g cuda %.9g", u,
                         row_start[u + 1] - row_start[u], d, c, e);
        }
    }
}

static void compare(const struct spw_model *model, const spw_batch_t *batch, uint64_t seed)
{
    size_t n = spw_batch_examples(batch), nu = spw_batch_unique(batch), nv = nu * model->dim;
    float *rows = malloc(nv * 4 + 4), *pc = malloc(n * 4 + 4), *pe = malloc(n * 4 + 4);
    float *gc = malloc(nv * 4 + 4), *ge = malloc(nv * 4 + 4);
    uint32_t *row_start = malloc((nu + 1) * 4), *row_occ = malloc(batch->n_occ * 4 + 4);
    assert_true(rows && pc && pe && gc && ge && row_start && row_occ);
    for (size_t i = 0; i < nv; i++)
        rows[i] = rng_uniform(&seed, -0.4f, 0.4f);
    spw_trn__batch_row_csr(batch, row_start, row_occ);
    struct spw_trn__cuda_batch cb = {.n = batch->n,
                                     .n_occ = batch->n_occ,
                                     .n_uniq = batch->n_uniq,
                                     .offsets = batch->offsets,
                                     .occ_idx = batch->occ_idx,
                                     .occ_w = batch->occ_w,
                                     .occ_ex = batch->occ_ex,
                                     .labels = batch->labels,
                                     .row_start = row_start,
                                     .row_occ = row_occ};
    const float scale = 1.0f / (float)(n ? n : 1);
    double lc = spw_cpu_forward_backward(model, batch, rows, scale, pc, gc), le = -1;
    assert_int_equal(
        spw_trn__cuda_emulate_forward(model->latent_dim, model->dim, &cb, rows, scale, pe, ge, &le),
        SPW_OK);
    assert_memory_equal(pc, pe, n * sizeof(float));
    compare_grads(model, batch, row_start, gc, ge);
    assert_true(lc == le);

    float *nc = malloc(nv * 4 + 4), *ne = malloc(nv * 4 + 4);
    uint8_t *sc = malloc(nu + 1), *se = malloc(nu + 1);
    uint64_t *scratch = malloc(nu * 8 + 8);
    assert_true(nc && ne && sc && se && scratch);
    spw_cpu_row_norms(gc, nu, model->dim, nc);
    spw_trn__cuda_emulate_row_norms(gc, nu, model->dim, ne);
    assert_memory_equal(nc, ne, nu * sizeof(float));
    const size_t ms[] = {0, 1, nu / 10, nu / 2, nu};
    for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++) {
        spw_cpu_topk_select(nc, nu, ms[j], scratch, sc);
        assert_int_equal(spw_trn__cuda_emulate_topk_select(nc, nu, ms[j], se), SPW_OK);
        assert_memory_equal(sc, se, nu);
    }
    free(rows);
    free(pc);
    free(pe);
    free(gc);
    free(ge);
    free(row_start);
    free(row_occ);
    free(nc);
    free(ne);
    free(sc);
    free(se);
    free(scratch);
}

static void test_cuda_emulated_kernels_match_cpu(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.seed = 17;
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    assert_non_null(gen);
    const uint32_t ks[] = {0, 1, 4, 16, 33, 64};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        struct spw_model model;
        assert_int_equal(spw_model_init(&model, ks[i] ? SPW_MODEL_FM : SPW_MODEL_LR, ks[i]),
                         SPW_OK);
        spw_batch_t *batch = gen_batch(1000, gen);
        compare(&model, batch, 3 + i);
        spw_batch_destroy(batch);
        batch = gen_batch(i % 2 ? 200 : 8192, gen); /* the bias in one chunk, and in many */
        compare(&model, batch, 13 + i);
        spw_batch_destroy(batch);
        batch = dup_batch(500, 11 + i);
        compare(&model, batch, 5 + i);
        spw_batch_reset(batch);
        compare(&model, batch, 6);
        spw_batch_destroy(batch);
    }
    spw_gen_destroy(gen);
    print_message("chunked rows: worst relative difference %.3g\n", worst_chunked);
}

/* Large selections with ties, NaN and sorted input. */
static void test_cuda_emulated_topk_matches_cpu(void **state)
{
    (void)state;
    const size_t n = 100000;
    float *norms = malloc(n * sizeof(float));
    uint8_t *sc = malloc(n), *se = malloc(n);
    uint64_t *scratch = malloc(n * sizeof(uint64_t)), s = 5;
    assert_true(norms && sc && se && scratch);
    for (int trial = 0; trial < 3; trial++) {
        for (size_t r = 0; r < n; r++)
            norms[r] = trial == 0   ? rng_uniform(&s, 0, 10)
                       : trial == 1 ? (float)(rng_next(&s) % 4)
                                    : (float)r;
        norms[7] = NAN;
        norms[9] = -1.0f;
        const size_t ms[] = {1, 3, n / 100, n / 3, n - 1};
        for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++) {
            spw_cpu_topk_select(norms, n, ms[j], scratch, sc);
            assert_int_equal(spw_trn__cuda_emulate_topk_select(norms, n, ms[j], se), SPW_OK);
            assert_memory_equal(sc, se, n);
        }
    }
    free(norms);
    free(sc);
    free(se);
    free(scratch);
}

/* spw_backend_topk_rows on the CPU backend against the CUDA backend's emulated norms, pinning
 * and selection: the same set, the pinned rows in it whenever m allows. */
static void test_cuda_emulated_topk_rows_matches_cpu(void **state)
{
    (void)state;
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 16), SPW_OK);
    char errstr[256];
    spw_backend_t *cpu = spw_backend_new(SPW_BACKEND_CPU, &model, errstr, sizeof(errstr));
    assert_non_null(cpu);
    const size_t n = 20000, dim = model.dim;
    float *g = malloc(n * dim * sizeof(float)), *norms = malloc(n * sizeof(float));
    uint8_t *pin = malloc(n), *sc = malloc(n), *se = malloc(n);
    assert_true(g && norms && pin && sc && se);
    uint64_t s = 9;
    for (size_t i = 0; i < n * dim; i++)
        g[i] = rng_uniform(&s, -1.0f, 1.0f) * (float)(1 + rng_next(&s) % 100);
    size_t pinned = 0;
    for (size_t r = 0; r < n; r++)
        pinned += pin[r] = r % 97 == 3;
    const size_t ms[] = {1, pinned, pinned + 5, n / 3, n - 1};
    for (int with_pins = 0; with_pins < 2; with_pins++)
        for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++) {
            const uint8_t *p = with_pins ? pin : NULL;
            assert_int_equal(spw_backend_topk_rows(cpu, g, n, ms[j], p, norms, sc), SPW_OK);
            assert_int_equal(spw_trn__cuda_emulate_topk_rows(g, n, (uint32_t)dim, ms[j], p, se),
                             SPW_OK);
            assert_memory_equal(sc, se, n);
            size_t chosen = 0, pins_in = 0;
            for (size_t r = 0; r < n; r++) {
                chosen += sc[r];
                pins_in += sc[r] && pin[r];
            }
            assert_int_equal(chosen, ms[j]);
            if (with_pins)
                assert_int_equal(pins_in, ms[j] < pinned ? ms[j] : pinned);
        }
    free(g);
    free(norms);
    free(pin);
    free(sc);
    free(se);
    spw_backend_destroy(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_emulated_kernels_match_cpu),
        cmocka_unit_test(test_cuda_emulated_topk_matches_cpu),
        cmocka_unit_test(test_cuda_emulated_topk_rows_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
