/* GPU test: the CUDA backend's forward, backward, row norms and top-k selection against the CPU
 * oracle on the same batches (generated and synthetic), deep models (the network on cuBLAS), and
 * the compressor and reference trainer on either backend. Skips when no CUDA device is present. */
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
#include "trainer_cuda.h" /* SPW_TRN_CUDA_CHUNK */
#include "../unit/test_rng.h"
#include "../unit/test_fields_batch.h"

#define REL_TOL 1e-5

static void require_device(void)
{
    if (spw_cuda_device_count() < 1) {
        print_message("no CUDA device: skipping\n");
        skip();
    }
}

static spw_backend_t *new_backend(enum spw_backend_kind kind, const struct spw_model *model)
{
    char errstr[256];
    spw_backend_t *be = spw_backend_new(kind, model, errstr, sizeof(errstr));
    if (!be)
        fail_msg("spw_backend_new(%s): %s", spw_backend_kind_name(kind), errstr);
    assert_int_equal(spw_backend_kind(be), kind);
    return be;
}

/* A batch of n generated examples (39 fields, Zipf vocabularies) starting at seed's stream. */
static spw_batch_t *gen_batch(size_t n, uint64_t seed, spw_gen_t **genp)
{
    char errstr[256];
    if (!*genp) {
        struct spw_gen_params gp;
        spw_gen_params_default(&gp);
        gp.seed = seed;
        *genp = spw_gen_new(&gp, errstr, sizeof(errstr));
        assert_non_null(*genp);
    }
    spw_batch_t *batch = spw_batch_new(n, 39, errstr, sizeof(errstr));
    assert_non_null(batch);
    for (size_t i = 0; i < n; i++) {
        const struct spw_gen_example *ex = spw_gen_next(*genp);
        assert_int_equal(spw_batch_add(batch, ex->label, ex->oracle_p, ex->event_time_ms,
                                       ex->n_features, ex->keys, NULL),
                         SPW_OK);
    }
    return batch;
}

/* Heavy duplication: a tiny vocabulary, weights != 1, soft labels, empty examples, repeated keys
 * inside examples, and a real feature whose key equals the bias key. */
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
            keys[j] = rng_next(&seed) % 50; /* key 0 is the bias key */
            w[j] = rng_uniform(&seed, -2.0f, 2.0f);
        }
        float label = rng_uniform(&seed, 0.0f, 1.0f);
        assert_int_equal(spw_batch_add(batch, label, NAN, 0, nf, keys, w), SPW_OK);
    }
    return batch;
}

static double rel_diff(double a, double b, double floor)
{
    double scale = fmax(fmax(fabs(a), fabs(b)), floor);
    return scale == 0.0 ? 0.0 : fabs(a - b) / scale;
}

/* Runs both backends on batch and compares predictions, gradients and loss. */
static void compare_on_batch(spw_backend_t *cpu, spw_backend_t *gpu, const spw_batch_t *batch,
                             uint64_t seed, const char *what)
{
    const struct spw_model *model = spw_backend_model(cpu);
    size_t n = spw_batch_examples(batch), nu = spw_batch_unique(batch), nv = nu * model->dim;
    float *rows = malloc(nv * sizeof(float) + 4);
    float *pc = malloc(n * sizeof(float) + 4), *pg = malloc(n * sizeof(float) + 4);
    float *gc = malloc(nv * sizeof(float) + 4), *gg = malloc(nv * sizeof(float) + 4);
    assert_true(rows && pc && pg && gc && gg);
    for (size_t i = 0; i < nv; i++)
        rows[i] = rng_uniform(&seed, -0.3f, 0.3f);
    const float scale = 1.0f / (float)(n ? n : 1);
    double lc, lg;
    assert_int_equal(spw_backend_forward_backward(cpu, batch, rows, scale, pc, gc, &lc), SPW_OK);
    assert_int_equal(spw_backend_forward_backward(gpu, batch, rows, scale, pg, gg, &lg), SPW_OK);
    double gmax = 0.0, worst_p = 0.0, worst_g = 0.0;
    for (size_t i = 0; i < nv; i++)
        gmax = fmax(gmax, fabs(gc[i]));
    for (size_t i = 0; i < n; i++) {
        worst_p = fmax(worst_p, rel_diff(pc[i], pg[i], 0.0));
        if (rel_diff(pc[i], pg[i], 0.0) > REL_TOL)
            fail_msg("%s: prediction %zu cpu %.9g cuda %.9g", what, i, pc[i], pg[i]);
    }
    /* rows of more than SPW_TRN_CUDA_CHUNK occurrences (and the bias element of a batch of more
     * examples) are summed in chunks on the device: within REL_TOL of the element or of the
     * largest element, as a different summation order of terms that cancel gives */
    uint32_t *count = calloc(nu + 1, sizeof(uint32_t));
    assert_non_null(count);
    for (size_t i = 0; i < n; i++) {
        const uint32_t *idx;
        const float *w;
        size_t nf = spw_batch_example_features(batch, i, &idx, &w);
        for (size_t j = 0; j < nf; j++)
            count[idx[j]]++;
    }
    for (size_t i = 0; i < nv; i++) {
        size_t u = i / model->dim;
        bool chunked = count[u] > SPW_TRN_CUDA_CHUNK || (i == 0 && n > SPW_TRN_CUDA_CHUNK);
        double d = rel_diff(gc[i], gg[i], chunked ? gmax : 1e-6 * gmax);
        worst_g = fmax(worst_g, d);
        if (d > REL_TOL)
            fail_msg("%s: gradient %zu (row %zu, %u occurrences) cpu %.9g cuda %.9g", what, i, u,
                     count[u], gc[i], gg[i]);
    }
    free(count);
    assert_true(rel_diff(lc, lg, 0.0) < 1e-9);
    /* forward alone gives the same predictions */
    assert_int_equal(spw_backend_forward(gpu, batch, rows, pg, &lg), SPW_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(rel_diff(pc[i], pg[i], 0.0) <= REL_TOL);
    print_message("%s: %zu examples, %zu rows: worst relative difference %.3g (preds) %.3g "
                  "(grads)\n",
                  what, n, nu, worst_p, worst_g);
    free(rows);
    free(pc);
    free(pg);
    free(gc);
    free(gg);
}

static void check_model(enum spw_model_kind kind, uint32_t k)
{
    struct spw_model model;
    char what[64];
    assert_int_equal(spw_model_init(&model, kind, k), SPW_OK);
    spw_backend_t *cpu = new_backend(SPW_BACKEND_CPU, &model);
    spw_backend_t *gpu = new_backend(SPW_BACKEND_CUDA, &model);
    spw_gen_t *gen = NULL;
    /* growing, shrinking and empty batches through the same device buffers */
    const size_t sizes[] = {4096, 17, 8192, 1, 300};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        spw_batch_t *batch = gen_batch(sizes[s], 5, &gen);
        snprintf(what, sizeof(what), "%s k=%u gen batch", spw_model_kind_name(kind), k);
        compare_on_batch(cpu, gpu, batch, 100 + s, what);
        spw_batch_destroy(batch);
    }
    spw_batch_t *batch = dup_batch(2000, 9);
    snprintf(what, sizeof(what), "%s k=%u duplicates", spw_model_kind_name(kind), k);
    compare_on_batch(cpu, gpu, batch, 7, what);
    spw_batch_reset(batch);
    compare_on_batch(cpu, gpu, batch, 8, "empty batch");
    spw_batch_destroy(batch);
    spw_gen_destroy(gen);
    spw_backend_destroy(cpu);
    spw_backend_destroy(gpu);
}

static void test_cuda_model_lr_matches_cpu(void **state)
{
    (void)state;
    require_device();
    check_model(SPW_MODEL_LR, 0);
}

static void test_cuda_model_fm_matches_cpu(void **state)
{
    (void)state;
    require_device();
    const uint32_t ks[] = {1, 4, 16, 33, 64};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        check_model(SPW_MODEL_FM, ks[i]);
}

/* The CUDA backend computes between start and finish while the host works (here: the CPU
 * backend on the same batch), from its own copies of the batch and rows (the caller's rows are
 * overwritten right after start); back-to-back batches of different sizes; the results equal
 * spw_backend_forward_backward's, and the CPU's within compare_on_batch's tolerance. */
static void test_cuda_model_start_finish_overlaps_host_work(void **state)
{
    (void)state;
    require_device();
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 16), SPW_OK);
    spw_backend_t *cpu = new_backend(SPW_BACKEND_CPU, &model);
    spw_backend_t *gpu = new_backend(SPW_BACKEND_CUDA, &model);
    assert_true(spw_backend_computes_async(gpu));
    assert_false(spw_backend_computes_async(cpu));
    spw_gen_t *gen = NULL;
    const size_t sizes[] = {4096, 100, 8192, 0, 2000};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        spw_batch_t *batch = gen_batch(sizes[s], 21, &gen);
        size_t n = spw_batch_examples(batch), nv = spw_batch_unique(batch) * model.dim;
        float *rows = malloc(nv * sizeof(float) + 4), *scribbled = malloc(nv * sizeof(float) + 4);
        float *pc = calloc(n + 1, sizeof(float)), *pg = calloc(n + 1, sizeof(float));
        float *gc = calloc(nv + 1, sizeof(float)), *gg = calloc(nv + 1, sizeof(float));
        float *ps = calloc(n + 1, sizeof(float)), *gs = calloc(nv + 1, sizeof(float));
        assert_true(rows && scribbled && pc && pg && gc && gg && ps && gs);
        uint64_t seed = 300 + s;
        for (size_t i = 0; i < nv; i++)
            rows[i] = scribbled[i] = rng_uniform(&seed, -0.3f, 0.3f);
        const float scale = 1.0f / (float)(n ? n : 1);
        double lc = -1.0, lg = -1.0, ls = -1.0;
        spw_backend_forward_backward_start(gpu, batch, scribbled, scale, pg, gg);
        for (size_t i = 0; i < nv; i++)
            scribbled[i] = NAN; /* start copied the rows */
        assert_int_equal(spw_backend_forward_backward(cpu, batch, rows, scale, pc, gc, &lc),
                         SPW_OK);
        assert_int_equal(spw_backend_forward_backward_finish(gpu, &lg), SPW_OK);
        /* the synchronous call gives bit-identical results */
        assert_int_equal(spw_backend_forward_backward(gpu, batch, rows, scale, ps, gs, &ls),
                         SPW_OK);
        assert_memory_equal(pg, ps, n * sizeof(float));
        assert_memory_equal(gg, gs, nv * sizeof(float));
        assert_true(lg == ls);
        assert_true(rel_diff(lc, lg, 0.0) < 1e-9);
        for (size_t i = 0; i < n; i++)
            assert_true(rel_diff(pc[i], pg[i], 0.0) <= REL_TOL);
        free(rows);
        free(scribbled);
        free(pc);
        free(pg);
        free(gc);
        free(gg);
        free(ps);
        free(gs);
        spw_batch_destroy(batch);
    }
    spw_gen_destroy(gen);
    spw_backend_destroy(cpu);
    spw_backend_destroy(gpu);
}

/* Deep models: the network on cuBLAS (the backend says so), pooling and the FM part on the host;
 * against the CPU backend (OpenBLAS) on the same rows, dropout masks included, over growing,
 * shrinking and empty batches. Tolerance as tests/gpu/test_cuda_dense.c's: a block's largest
 * difference over its largest CPU element (the products sum in other orders on the device). */
#define DEEP_TOL 1e-4

static double block_diff(const float *gpu, const float *cpu, size_t n)
{
    double diff = 0.0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]);
        if (!(d <= diff)) /* NaN counts as a failure */
            diff = isnan(d) ? INFINITY : d;
        scale = fmax(scale, fabs(cpu[i]));
    }
    return diff / scale;
}

static void check_deep(enum spw_model_kind kind, uint32_t cross, const char *mlp, float dropout)
{
    char err[256];
    struct spw_model m;
    if (spw_model_init_deep(&m, kind, 4, TEST_FIELDS, 3, mlp, cross, dropout, 5, err,
                            sizeof(err)) != SPW_OK)
        fail_msg("model: %s", err);
    spw_backend_t *cpu = new_backend(SPW_BACKEND_CPU, &m);
    spw_backend_t *gpu = new_backend(SPW_BACKEND_CUDA, &m);
    assert_string_equal(spw_backend_network(cpu), "openblas");
    assert_string_equal(spw_backend_network(gpu), "cublas");
    const size_t sizes[] = {37, 4096, 3, 0, 1, 500};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        spw_batch_t *b = test_fields_batch(&m, sizes[s], 11 + s);
        size_t n = spw_batch_examples(b), nv = spw_batch_unique(b) * m.dim;
        float *rows = malloc(nv * sizeof(float) + 4);
        float *pc = calloc(n + 1, sizeof(float)), *pg = calloc(n + 1, sizeof(float));
        float *gc = calloc(nv + 1, sizeof(float)), *gg = calloc(nv + 1, sizeof(float));
        assert_true(rows && pc && pg && gc && gg);
        uint64_t seed = 99 + s;
        for (size_t j = 0; j < nv; j++)
            rows[j] = rng_uniform(&seed, -0.3f, 0.3f);
        const float scale = 1.0f / (float)(n ? n : 1);
        double lc = -1, lg = -1;
        assert_int_equal(spw_backend_forward_backward(cpu, b, rows, scale, pc, gc, &lc), SPW_OK);
        assert_int_equal(spw_backend_forward_backward(gpu, b, rows, scale, pg, gg, &lg), SPW_OK);
        double dp = block_diff(pg, pc, n), dg = block_diff(gg, gc, nv);
        print_message("%s, %zu examples: preds %.3g, grads %.3g (relative to the largest)\n",
                      spw_model_kind_name(kind), n, dp, dg);
        if (n > 0 && (dp > DEEP_TOL || dg > DEEP_TOL))
            fail_msg("%s, %zu examples: cuda differs from cpu: preds %.3g grads %.3g",
                     spw_model_kind_name(kind), n, dp, dg);
        assert_true(fabs(lc - lg) <= DEEP_TOL * (1.0 + fabs(lc)));
        /* scoring alone (no dropout) agrees too */
        assert_int_equal(spw_backend_forward(cpu, b, rows, pc, &lc), SPW_OK);
        assert_int_equal(spw_backend_forward(gpu, b, rows, pg, &lg), SPW_OK);
        if (n > 0 && block_diff(pg, pc, n) > DEEP_TOL)
            fail_msg("%s, %zu examples: forward differs", spw_model_kind_name(kind), n);
        free(rows);
        free(pc);
        free(pg);
        free(gc);
        free(gg);
        spw_batch_destroy(b);
    }
    spw_backend_destroy(cpu);
    spw_backend_destroy(gpu);
}

static void test_cuda_model_deep_matches_cpu(void **state)
{
    (void)state;
    require_device();
    check_deep(SPW_MODEL_DEEPFM, 0, "16,8", 0.3f); /* dropout: the device draws the same masks */
    check_deep(SPW_MODEL_DCNV2, 2, "8", 0.0f);
}

/* n rows of dim gradients, uniform in ±[1, 1000], drawn from *s (advanced). */
static float *random_grads(size_t n, uint32_t dim, uint64_t *s)
{
    float *g = malloc(n * dim * sizeof(float));
    assert_non_null(g);
    for (size_t i = 0; i < n * dim; i++)
        g[i] = rng_uniform(s, -1.0f, 1.0f) * (float)(1 + rng_next(s) % 1000);
    return g;
}

static void test_cuda_model_norms_and_topk_match_cpu(void **state)
{
    (void)state;
    require_device();
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 16), SPW_OK);
    spw_backend_t *cpu = new_backend(SPW_BACKEND_CPU, &model);
    spw_backend_t *gpu = new_backend(SPW_BACKEND_CUDA, &model);
    const size_t n = 300000;
    uint64_t s = 21;
    float *g = random_grads(n, model.dim, &s);
    float *nc = malloc(n * sizeof(float)), *ng = malloc(n * sizeof(float));
    uint8_t *sc = malloc(n), *sg = malloc(n);
    assert_true(nc && ng && sc && sg);
    assert_int_equal(spw_backend_row_norms(cpu, g, n, nc), SPW_OK);
    assert_int_equal(spw_backend_row_norms(gpu, g, n, ng), SPW_OK);
    for (size_t r = 0; r < n; r++)
        assert_true(rel_diff(nc[r], ng[r], 0.0) <= 1e-6);
    /* the same norms into both selections, so that ties decide alike */
    for (int trial = 0; trial < 4; trial++) {
        if (trial == 1) /* heavy ties */
            for (size_t r = 0; r < n; r++)
                nc[r] = (float)(rng_next(&s) % 5);
        if (trial == 2) { /* NaN, zeros, negatives */
            nc[3] = NAN;
            nc[n - 1] = NAN;
            for (size_t r = 10; r < 1000; r++)
                nc[r] = r % 2 ? 0.0f : -1.0f;
        }
        if (trial == 3) /* sorted */
            for (size_t r = 0; r < n; r++)
                nc[r] = (float)r;
        const size_t ms[] = {1, 2, n / 100, n / 10, n / 2, n - 1};
        for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++) {
            assert_int_equal(spw_backend_topk_select(cpu, nc, n, ms[j], sc), SPW_OK);
            assert_int_equal(spw_backend_topk_select(gpu, nc, n, ms[j], sg), SPW_OK);
            size_t chosen = 0;
            for (size_t r = 0; r < n; r++)
                chosen += sg[r];
            assert_int_equal(chosen, ms[j]);
            assert_memory_equal(sc, sg, n);
        }
    }
    free(g);
    free(nc);
    free(ng);
    free(sc);
    free(sg);
    spw_backend_destroy(cpu);
    spw_backend_destroy(gpu);
}

/* The reference trainer on either backend learns the same model (to accumulated rounding). */
/* spw_backend_topk_rows on the device (norms, pinning and selection without the norms' round
 * trip) against the CPU: m rows, the pinned ones among them, and none left out whose CPU norm is
 * above a chosen one's by more than the device's rounding of the norms (1e-6 relative). */
static void test_cuda_model_topk_rows_match_cpu(void **state)
{
    (void)state;
    require_device();
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 16), SPW_OK);
    spw_backend_t *cpu = new_backend(SPW_BACKEND_CPU, &model);
    spw_backend_t *gpu = new_backend(SPW_BACKEND_CUDA, &model);
    const size_t n = 300000;
    uint64_t s = 23;
    float *g = random_grads(n, model.dim, &s);
    float *nc = malloc(n * sizeof(float)), *ng = malloc(n * sizeof(float));
    uint8_t *pin = malloc(n), *sc = malloc(n), *sg = malloc(n);
    assert_true(nc && ng && pin && sc && sg);
    size_t pinned = 0;
    for (size_t r = 0; r < n; r++)
        pinned += pin[r] = r % 1000 == 7;
    const size_t ms[] = {1, pinned, pinned + 1, n / 10, n - 1};
    for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++) {
        assert_int_equal(spw_backend_topk_rows(cpu, g, n, ms[j], pin, nc, sc), SPW_OK);
        assert_int_equal(spw_backend_topk_rows(gpu, g, n, ms[j], pin, ng, sg), SPW_OK);
        float lo = INFINITY, hi = 0.0f; /* unpinned: the smallest chosen, the largest not */
        size_t chosen = 0, pins_in = 0;
        for (size_t r = 0; r < n; r++) {
            chosen += sg[r];
            pins_in += sg[r] && pin[r];
            if (pin[r])
                continue;
            if (sg[r] && nc[r] < lo)
                lo = nc[r];
            if (!sg[r] && nc[r] > hi)
                hi = nc[r];
        }
        assert_int_equal(chosen, ms[j]);
        assert_int_equal(pins_in, ms[j] < pinned ? ms[j] : pinned);
        if (ms[j] > pinned)
            assert_true(hi <= lo * (1.0f + 1e-6f));
    }
    free(g);
    free(nc);
    free(ng);
    free(pin);
    free(sc);
    free(sg);
    spw_backend_destroy(cpu);
    spw_backend_destroy(gpu);
}

static void test_cuda_model_reference_trainer_agrees(void **state)
{
    (void)state;
    require_device();
    char errstr[256];
    struct spw_trainer_params p;
    spw_trainer_params_default(&p);
    assert_int_equal(spw_model_init(&p.model, SPW_MODEL_FM, 16), SPW_OK);
    p.topk.dim = p.model.dim;
    p.batch = 1024;
    p.lr = 0.02f;
    p.compress = true;
    p.topk.ratio = 0.25;
    p.eval_window = 10000;
    struct spw_trainer_params pc = p, pg = p;
    pc.backend = SPW_BACKEND_CPU;
    pg.backend = SPW_BACKEND_CUDA;
    spw_ref_t *rc = spw_ref_new(&pc, errstr, sizeof(errstr));
    spw_ref_t *rg = spw_ref_new(&pg, errstr, sizeof(errstr));
    assert_non_null(rc);
    assert_non_null(rg);
    assert_int_equal(spw_ref_backend(rg), SPW_BACKEND_CUDA);
    spw_gen_t *gen = NULL;
    for (int b = 0; b < 40; b++) {
        spw_batch_t *batch = gen_batch(1024, 13, &gen);
        assert_int_equal(spw_ref_train_batch(rc, batch), SPW_OK);
        assert_int_equal(spw_ref_train_batch(rg, batch), SPW_OK);
        spw_batch_destroy(batch);
    }
    struct spw_pv_report a, b;
    spw_ref_report(rc, &a);
    spw_ref_report(rg, &b);
    print_message("reference trainer: cumulative logloss cpu %.6f cuda %.6f\n",
                  a.cumulative.logloss, b.cumulative.logloss);
    assert_float_equal(a.cumulative.logloss, b.cumulative.logloss, 1e-4);
    assert_int_equal(spw_ref_rows(rc), spw_ref_rows(rg));
    spw_gen_destroy(gen);
    spw_ref_destroy(rc);
    spw_ref_destroy(rg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_model_lr_matches_cpu),
        cmocka_unit_test(test_cuda_model_fm_matches_cpu),
        cmocka_unit_test(test_cuda_model_start_finish_overlaps_host_work),
        cmocka_unit_test(test_cuda_model_deep_matches_cpu),
        cmocka_unit_test(test_cuda_model_norms_and_topk_match_cpu),
        cmocka_unit_test(test_cuda_model_topk_rows_match_cpu),
        cmocka_unit_test(test_cuda_model_reference_trainer_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
