/* Unit tests of the two-phase modes' rules (coordinator/src/step_rule.c) against hand-computed
 * values: which trainers a step waits for (backup workers, out of the barrier), how groups are
 * formed (by order, by speed), and the elastic moves (leave after `steps` slow steps, hysteresis,
 * rejoin). */
#include "test_main.h" /* cmocka and what it needs first */

#include "sparrow/coordinator.h"

static void test_coord_step_need(void **state)
{
    (void)state;
    assert_int_equal(spw_coord_step_need(0, 0), 0);
    assert_int_equal(spw_coord_step_need(4, 0), 4);
    assert_int_equal(spw_coord_step_need(4, 1), 3);
    assert_int_equal(spw_coord_step_need(4, 3), 1);
    /* a step always waits for someone */
    assert_int_equal(spw_coord_step_need(4, 9), 1);
    assert_int_equal(spw_coord_step_need(1, 1), 1);
}

static void test_coord_step_ready(void **state)
{
    (void)state;
    /* step 6 of a unit of four: two pushed it, one is at 5, one is out of the barrier */
    struct spw_coord_step_member m[4] = {
        {.clock = 6, .in_barrier = true},
        {.clock = 6, .in_barrier = true},
        {.clock = 5, .in_barrier = true},
        {.clock = 2, .in_barrier = false},
    };
    /* backup 0: waits for the three in the barrier */
    assert_false(spw_coord_step_ready(m, 4, 6, 0));
    /* backup 1: the first 3 - 1 = 2 suffice; the one out of the barrier never counts */
    assert_true(spw_coord_step_ready(m, 4, 6, 1));
    assert_true(spw_coord_step_ready(m, 4, 5, 0));
    m[2].clock = 6;
    assert_true(spw_coord_step_ready(m, 4, 6, 0));
    assert_false(spw_coord_step_ready(m, 4, 7, 2)); /* need 1: nobody pushed 7 */
    /* nobody in the barrier: nothing to commit */
    struct spw_coord_step_member out[1] = {{.clock = 9, .in_barrier = false}};
    assert_false(spw_coord_step_ready(out, 1, 9, 0));
}

static void test_coord_groups_by_index(void **state)
{
    (void)state;
    uint32_t g[5];
    assert_int_equal(spw_coord_groups_assign(NULL, 5, 2, g), SPW_OK);
    uint32_t want[5] = {0, 0, 1, 1, 2};
    for (int i = 0; i < 5; i++)
        assert_int_equal(g[i], want[i]);
    assert_int_equal(spw_coord_groups_assign(NULL, 5, 0, g), SPW_ERR_INVALID);
}

static void test_coord_groups_by_speed(void **state)
{
    (void)state;
    /* trainers 1 and 3 are slow, 4 unmeasured: fast ones first, the unmeasured last */
    double ms[5] = {10.0, 40.0, 11.0, 45.0, 0.0};
    uint32_t g[5];
    assert_int_equal(spw_coord_groups_assign(ms, 5, 2, g), SPW_OK);
    assert_int_equal(g[0], 0);
    assert_int_equal(g[2], 0);
    assert_int_equal(g[1], 1);
    assert_int_equal(g[3], 1);
    assert_int_equal(g[4], 2);
}

static void test_coord_median(void **state)
{
    (void)state;
    double a[3] = {5, 1, 3};
    assert_float_equal(spw_coord_median(a, 3), 3.0, 1e-12);
    double b[4] = {4, 1, 3, 2};
    assert_float_equal(spw_coord_median(b, 4), 2.5, 1e-12);
    assert_float_equal(spw_coord_median(NULL, 0), 0.0, 1e-12);
}

static void test_coord_elastic(void **state)
{
    (void)state;
    struct spw_coord_elastic e = {0};
    /* running mean 0.7 old + 0.3 new; the first sample is taken as is */
    assert_int_equal(spw_coord_elastic_observe(&e, 10, 10, 2, 3, true), SPW_COORD_ELASTIC_STAY);
    assert_float_equal(e.ewma_ms, 10.0, 1e-9);
    /* 100 ms steps against others at 10: the mean 37, 55.9, 69.13 passes 2 x 10 at once; the
     * third slow step leaves */
    assert_int_equal(spw_coord_elastic_observe(&e, 100, 10, 2, 3, true), SPW_COORD_ELASTIC_STAY);
    assert_float_equal(e.ewma_ms, 37.0, 1e-9);
    assert_int_equal(spw_coord_elastic_observe(&e, 100, 10, 2, 3, true), SPW_COORD_ELASTIC_STAY);
    assert_int_equal(spw_coord_elastic_observe(&e, 100, 10, 2, 3, true), SPW_COORD_ELASTIC_LEAVE);
    assert_true(e.out);
    /* fast again: rejoins once the mean stays within (1 + 2) / 2 x 10 = 15 for 3 steps */
    int moves = 0, steps = 0;
    while (moves == 0 && steps < 100) {
        moves = spw_coord_elastic_observe(&e, 10, 10, 2, 3, true) == SPW_COORD_ELASTIC_REJOIN;
        steps++;
    }
    assert_true(moves);
    assert_false(e.out);
    /* the mean fell 69.13 -> 51.4, 38.9, 30.3, 24.2, 19.9, 16.9, 14.9 (<= 15: 1st), 13.4, 12.4 */
    assert_int_equal(steps, 9);
}

static void test_coord_elastic_not_allowed(void **state)
{
    (void)state;
    struct spw_coord_elastic e = {0};
    for (int i = 0; i < 10; i++)
        assert_int_equal(spw_coord_elastic_observe(&e, 100, 10, 2, 3, false),
                         SPW_COORD_ELASTIC_STAY);
    assert_false(e.out);
    /* factor 0: no moves whatever the times; the mean is still kept (groups by speed) */
    struct spw_coord_elastic f = {0};
    for (int i = 0; i < 10; i++)
        assert_int_equal(spw_coord_elastic_observe(&f, 100, 10, 0, 3, true),
                         SPW_COORD_ELASTIC_STAY);
    assert_true(f.measured);
    assert_float_equal(f.ewma_ms, 100.0, 1e-9);
}

static void test_coord_mode_group(void **state)
{
    (void)state;
    struct spw_coord_mode m;
    assert_int_equal(spw_coord_mode_parse("group:4", &m), SPW_OK);
    assert_int_equal(m.kind, SPW_COORD_GROUP);
    assert_int_equal(m.param, 4);
    assert_true(spw_coord_mode_two_phase(&m));
    char buf[32];
    spw_coord_mode_format(&m, buf, sizeof(buf));
    assert_string_equal(buf, "group:4");
    assert_int_equal(spw_coord_mode_parse("group:0", &m), SPW_ERR_INVALID);
    assert_int_equal(spw_coord_mode_parse("group:", &m), SPW_ERR_INVALID);
    assert_int_equal(spw_coord_mode_parse("group:100000", &m), SPW_ERR_INVALID);
    assert_int_equal(spw_coord_mode_parse("hybrid:3", &m), SPW_OK);
    assert_false(spw_coord_mode_two_phase(&m));
}

SPW_TEST_MAIN(test_coord_step_need, test_coord_step_ready, test_coord_groups_by_index,
              test_coord_groups_by_speed, test_coord_median, test_coord_elastic,
              test_coord_elastic_not_allowed, test_coord_mode_group)
