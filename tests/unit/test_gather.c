/* Unit test of the CPU backend's row gather (the oracle of the CUDA kernel). */
#include "test_main.h" /* cmocka and what it needs first */

#include <string.h>

#include "sparrow/trainer.h"

static void test_gather_picks_rows_in_index_order(void **state)
{
    (void)state;
    const float rows[3 * 2] = {1, 2, 3, 4, 5, 6};
    const uint32_t idx[4] = {2, 0, 2, 1};
    float out[4 * 2];
    spw_cpu_gather_rows(rows, 3, 2, idx, 4, out);
    const float want[8] = {5, 6, 1, 2, 5, 6, 3, 4};
    assert_memory_equal(out, want, sizeof(want));
}

static void test_gather_empty_batch_writes_nothing(void **state)
{
    (void)state;
    const float rows[2] = {1, 2};
    float out[2] = {-1, -1};
    spw_cpu_gather_rows(rows, 1, 2, NULL, 0, out);
    assert_true(out[0] == -1 && out[1] == -1);
}

static void test_gather_cuda_reports_absence(void **state)
{
    (void)state;
    if (spw_cuda_built() && spw_cuda_device_count() > 0)
        skip();
    const float rows[2] = {1, 2};
    const uint32_t idx[1] = {0};
    float out[2];
    spw_err_t err = spw_cuda_gather_rows(rows, 1, 2, idx, 1, out);
    assert_int_equal(err, spw_cuda_built() ? SPW_ERR_CUDA : SPW_ERR_UNSUPPORTED);
}

SPW_TEST_MAIN(test_gather_picks_rows_in_index_order, test_gather_empty_batch_writes_nothing,
              test_gather_cuda_reports_absence)
