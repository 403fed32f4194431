/* GPU test: the dense CUDA network (cuBLAS) against the CPU network (OpenBLAS), the oracle, on
 * the same parameters and batches: logits, parameter gradients and input gradients, for every
 * layer type, with dropout, and over growing and shrinking batches. Skips without a device.
 * Tolerance: each block's largest difference over its largest CPU element, at most REL_TOL
 * (the two sum in different orders and cuBLAS fuses multiply-adds). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/dense.h"
#include "../unit/test_main.h"
#include "../unit/test_rng.h"

#define REL_TOL 1e-4

static void require_device(void)
{
    if (spw_dense_cuda_device_count() < 1) {
        print_message("no CUDA device: skipping\n");
        skip();
    }
}

static double rel_diff(const float *gpu, const float *cpu, size_t n)
{
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]);
        if (!(d <= diff)) /* NaN counts as a failure */
            diff = isnan(d) ? INFINITY : d;
        if (fabs(cpu[i]) > scale)
            scale = fabs(cpu[i]);
    }
    return diff / scale;
}

static void compare(const char *name, uint32_t in, uint32_t cross, const char *hidden,
                    float dropout, const size_t *sizes, size_t n_sizes)
{
    char errstr[256];
    struct spw_dense_spec s;
    spw_dense_spec_default(&s, in);
    s.cross_layers = cross;
    assert_int_equal(spw_dense_spec_parse_hidden(&s, hidden, errstr, sizeof(errstr)), SPW_OK);
    s.dropout = dropout;
    s.dropout_seed = 5;
    spw_dense_t *cpu = spw_dense_new(&s, errstr, sizeof(errstr));
    assert_non_null(cpu);
    spw_dense_cuda_t *gpu = spw_dense_cuda_new(&s, 0, errstr, sizeof(errstr));
    if (!gpu)
        fail_msg("spw_dense_cuda_new: %s", errstr);
    size_t np = spw_dense_param_count(cpu), nmax = 0;
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i] > nmax)
            nmax = sizes[i];
    float *p = malloc(np * sizeof(float)), *x = malloc(nmax * in * sizeof(float));
    float *lc = malloc(nmax * sizeof(float)), *lg = malloc(nmax * sizeof(float));
    float *dl = malloc(nmax * sizeof(float)), *gc = malloc(np * sizeof(float));
    float *gg = malloc(np * sizeof(float)), *xc = malloc(nmax * in * sizeof(float));
    float *xg = malloc(nmax * in * sizeof(float));
    assert_int_equal(spw_dense_cuda_backward(gpu, dl, gg, NULL), SPW_ERR_STATE);
    uint64_t seed = 77;
    spw_dense_init_params(&s, 3, p);
    double worst = 0;
    for (size_t si = 0; si < n_sizes; si++) {
        size_t n = sizes[si];
        for (size_t j = 0; j < n * in; j++)
            x[j] = rng_uniform(&seed, -1.0f, 1.0f);
        for (size_t j = 0; j < n; j++)
            dl[j] = rng_uniform(&seed, -1.0f, 1.0f) / (float)n;
        assert_int_equal(spw_dense_forward(cpu, p, x, n, lc, true), SPW_OK);
        assert_int_equal(spw_dense_cuda_forward(gpu, p, x, n, lg, true), SPW_OK);
        assert_int_equal(spw_dense_backward(cpu, p, dl, gc, xc), SPW_OK);
        assert_int_equal(spw_dense_cuda_backward(gpu, dl, gg, xg), SPW_OK);
        double dlog = rel_diff(lg, lc, n), dgr = rel_diff(gg, gc, np);
        double dx = rel_diff(xg, xc, n * in);
        print_message("%-8s n %6zu: worst relative difference logits %.2e grads %.2e dx %.2e\n",
                      name, n, dlog, dgr, dx);
        assert_true(dlog <= REL_TOL);
        assert_true(dgr <= REL_TOL);
        assert_true(dx <= REL_TOL);
        worst = fmax(worst, fmax(dlog, fmax(dgr, dx)));
        /* the gradient with dx NULL is the same */
        assert_int_equal(spw_dense_cuda_backward(gpu, dl, gc, NULL), SPW_OK);
        assert_memory_equal(gc, gg, np * sizeof(float));
    }
    print_message("%-8s worst relative difference %.2e (tolerance %.0e)\n", name, worst, REL_TOL);
    free(p);
    free(x);
    free(lc);
    free(lg);
    free(dl);
    free(gc);
    free(gg);
    free(xc);
    free(xg);
    spw_dense_cuda_destroy(gpu);
    spw_dense_destroy(cpu);
}

static const size_t k_sizes[] = {1, 37, 1000, 4096, 300, 4096};

static void test_cuda_dense_linear(void **state)
{
    (void)state;
    require_device();
    compare("linear", 24, 0, "none", 0.0f, k_sizes, 6);
}

static void test_cuda_dense_mlp(void **state)
{
    (void)state;
    require_device();
    compare("mlp", 64, 0, "128,64", 0.0f, k_sizes, 6);
}

static void test_cuda_dense_cross(void **state)
{
    (void)state;
    require_device();
    compare("cross", 48, 2, "none", 0.0f, k_sizes, 6);
}

static void test_cuda_dense_dcnv2(void **state)
{
    (void)state;
    require_device();
    compare("dcnv2", 96, 3, "128,64", 0.0f, k_sizes, 6);
}

static void test_cuda_dense_dropout(void **state)
{
    (void)state;
    require_device();
    compare("dropout", 64, 1, "128,128", 0.25f, k_sizes, 6);
}

static void test_cuda_dense_bad_spec(void **state)
{
    (void)state;
    assert_true(spw_dense_cuda_built());
    char errstr[256] = "";
    struct spw_dense_spec s;
    spw_dense_spec_default(&s, 0);
    assert_null(spw_dense_cuda_new(&s, 0, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "in_dim 0"));
    spw_dense_spec_default(&s, 4);
    assert_null(spw_dense_cuda_new(&s, 1000, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "device 1000"));
    spw_dense_cuda_destroy(NULL);
}

SPW_TEST_MAIN(test_cuda_dense_bad_spec, test_cuda_dense_linear, test_cuda_dense_mlp,
              test_cuda_dense_cross, test_cuda_dense_dcnv2, test_cuda_dense_dropout)
