/* GPU test: the CUDA gather against the CPU oracle; skips when no CUDA device is present. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sparrow/trainer.h"

static void require_device(void)
{
    if (spw_cuda_device_count() < 1) {
        print_message("no CUDA device: skipping\n");
        skip();
    }
}

static void test_cuda_gather_matches_cpu(void **state)
{
    (void)state;
    require_device();
    const size_t n_rows = 5000, n = 65536;
    const uint32_t dim = 17; /* not a multiple of a warp: exercises the tail */
    float *rows = malloc(n_rows * dim * sizeof(float));
    uint32_t *idx = malloc(n * sizeof(uint32_t));
    float *cpu = malloc(n * dim * sizeof(float)), *gpu = malloc(n * dim * sizeof(float));
    assert_non_null(rows);
    assert_non_null(idx);
    assert_non_null(cpu);
    assert_non_null(gpu);
    uint64_t s = 12345;
    for (size_t i = 0; i < n_rows * dim; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        rows[i] = (float)(s >> 40) / (float)(1u << 24) - 0.5f;
    }
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        idx[i] = (uint32_t)((s >> 33) % n_rows);
    }
    spw_cpu_gather_rows(rows, n_rows, dim, idx, n, cpu);
    assert_int_equal(spw_cuda_gather_rows(rows, n_rows, dim, idx, n, gpu), SPW_OK);
    assert_memory_equal(cpu, gpu, n * dim * sizeof(float));
    free(rows);
    free(idx);
    free(cpu);
    free(gpu);
}

static void test_cuda_gather_rejects_bad_index(void **state)
{
    (void)state;
    require_device();
    const float rows[4] = {1, 2, 3, 4};
    const uint32_t idx[2] = {1, 7};
    float out[4];
    assert_int_equal(spw_cuda_gather_rows(rows, 2, 2, idx, 2, out), SPW_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_gather_matches_cpu),
        cmocka_unit_test(test_cuda_gather_rejects_bad_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
