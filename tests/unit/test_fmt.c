/* Unit tests of the decimal formatters (sparrow/fmt.h) against printf. */
#include "test_main.h" /* cmocka and what it needs first */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sparrow/fmt.h"

static void check_u64(uint64_t v)
{
    char got[SPW_FMT_INT_MAX + 1], want[32];
    size_t n = spw_fmt_u64(got, v);
    got[n] = '\0';
    snprintf(want, sizeof(want), "%" PRIu64, v);
    assert_string_equal(got, want);
}

static void check_i64(int64_t v)
{
    char got[SPW_FMT_INT_MAX + 1], want[32];
    size_t n = spw_fmt_i64(got, v);
    got[n] = '\0';
    snprintf(want, sizeof(want), "%" PRId64, v);
    assert_string_equal(got, want);
}

static void test_fmt_u64_matches_printf(void **state)
{
    (void)state;
    const uint64_t edge[] = {0, 1, 9, 10, 99, 100, 4294967295u, 4294967296u, UINT64_MAX};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        check_u64(edge[i]);
    for (uint64_t v = 1, x = 12345; v < UINT64_MAX / 3; v *= 3, x = x * 6364136223846793005u + 1)
        check_u64(v), check_u64(x);
    char buf[SPW_FMT_INT_MAX];
    assert_int_equal(spw_fmt_u64(buf, UINT64_MAX), 20);
}

static void test_fmt_i64_matches_printf(void **state)
{
    (void)state;
    const int64_t edge[] = {0, -1, 1, -10, 10, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        check_i64(edge[i]);
    char buf[SPW_FMT_INT_MAX];
    assert_int_equal(spw_fmt_i64(buf, INT64_MIN), 20);
}

SPW_TEST_MAIN(test_fmt_u64_matches_printf, test_fmt_i64_matches_printf)
