/* Unit tests of the shard's pending table of two-phase steps (pserver/src/steps.c): the commit
 * rule of a unit (members listed, members too late, trainers outside the unit), the weights of
 * late contributions, the counter row of a dropped one, and the per-trainer watermarks. */
#include "test_main.h" /* cmocka and what it needs first */

#include "ps_int.h"

#define DIM     2
#define COUNTER 999u
#define TOL     1e-6

static void add(spw_ps__steps_t *st, uint64_t step, uint32_t trainer, uint32_t examples,
                uint64_t key, float g0, float g1)
{
    uint64_t keys[1] = {key};
    float grads[DIM] = {g0, g1};
    uint32_t versions[1] = {3};
    struct spw_ps__step_push p = {.step = step,
                                  .trainer_id = trainer,
                                  .examples = examples,
                                  .n = 1,
                                  .keys = keys,
                                  .grads = grads,
                                  .versions = versions};
    assert_int_equal(spw_ps__steps_add(st, &p), SPW_OK);
}

/* The row of key in sum (its two gradient values), or fails. */
static const float *row(const struct spw_ps__step_sum *sum, uint64_t key)
{
    for (size_t i = 0; i < sum->n; i++)
        if (sum->keys[i] == key)
            return sum->grads + i * DIM;
    fail_msg("key %llu not in the commit", (unsigned long long)key);
    return NULL;
}

/* Backup workers, late contributions dropped: trainers 1 and 2 of the unit {1, 2, 3} are
 * listed, 3's pending contribution is discarded, but its counter row still counts; trainer 9
 * (another group) keeps its contribution of the same step. */
static void test_ps_steps_backup_drop(void **state)
{
    (void)state;
    spw_ps__steps_t *st = spw_ps__steps_new(DIM, 1 << 20);
    add(st, 5, 1, 100, 7, 1.0f, 2.0f);
    add(st, 5, 2, 300, 7, 3.0f, 4.0f);
    add(st, 5, 3, 200, 7, 100.0f, 100.0f);
    add(st, 5, 3, 200, COUNTER, 200.0f, 0.0f);
    add(st, 5, 9, 50, 7, -1.0f, -1.0f);
    uint32_t listed[] = {1, 2};
    uint32_t members[] = {1, 2, 3};
    struct spw_ps__step_commit c = {.step = 5,
                                    .trainer_ids = listed,
                                    .n_trainers = 2,
                                    .member_ids = members,
                                    .n_members = 3,
                                    .examples = 400,
                                    .counter_key = COUNTER};
    struct spw_ps__step_sum sum;
    assert_int_equal(spw_ps__steps_take(st, &c, &sum), SPW_OK);
    assert_int_equal(sum.contributions, 2);
    assert_int_equal(sum.discarded, 2);
    assert_int_equal(sum.n_late, 0);
    assert_int_equal(sum.n, 2);
    /* (100·(1,2) + 300·(3,4)) / 400 */
    assert_float_equal(row(&sum, 7)[0], 2.5, TOL);
    assert_float_equal(row(&sum, 7)[1], 3.5, TOL);
    assert_float_equal(row(&sum, COUNTER)[0], 200.0, TOL);
    /* trainer 9's contribution stays for its own unit's commit */
    assert_int_equal(spw_ps__steps_pending(st), 1);
    /* 3's push of step 5 arriving now is late and dropped; 9's is not late */
    struct spw_ps__step_lateness l = spw_ps__steps_lateness(st, 3, 5, 200);
    assert_true(l.late);
    assert_false(l.apply);
    assert_int_equal(l.committed, 5);
    assert_false(spw_ps__steps_lateness(st, 3, 6, 200).late);
    assert_false(spw_ps__steps_lateness(st, 9, 5, 50).late);
    uint32_t listed9[] = {9};
    struct spw_ps__step_commit c9 = {.step = 5,
                                     .trainer_ids = listed9,
                                     .n_trainers = 1,
                                     .member_ids = listed9,
                                     .n_members = 1,
                                     .examples = 50};
    assert_int_equal(spw_ps__steps_take(st, &c9, &sum), SPW_OK);
    assert_int_equal(sum.contributions, 1);
    assert_float_equal(row(&sum, 7)[0], -1.0, TOL);
    assert_int_equal(spw_ps__steps_pending(st), 0);
    assert_true(spw_ps__steps_lateness(st, 9, 5, 50).late);
    spw_ps__steps_destroy(st);
}

/* Late contributions applied: the unlisted member's pending gradient comes back weighted as one
 * contributor more of the step (200 / (400 + 200)), its counter row unweighted; its push of the
 * same step arriving after the commit is applied with weight 100 / (400 + 100). */
static void test_ps_steps_backup_apply(void **state)
{
    (void)state;
    spw_ps__steps_t *st = spw_ps__steps_new(DIM, 1 << 20);
    add(st, 2, 1, 100, 7, 1.0f, 2.0f);
    add(st, 2, 2, 300, 7, 3.0f, 4.0f);
    add(st, 2, 3, 200, 8, 6.0f, -3.0f);
    add(st, 2, 3, 200, COUNTER, 200.0f, 0.0f);
    add(st, 3, 1, 100, 7, 9.0f, 9.0f); /* the next step stays */
    uint32_t listed[] = {1, 2};
    uint32_t members[] = {1, 2, 3};
    struct spw_ps__step_commit c = {.step = 2,
                                    .trainer_ids = listed,
                                    .n_trainers = 2,
                                    .member_ids = members,
                                    .n_members = 3,
                                    .examples = 400,
                                    .counter_key = COUNTER,
                                    .apply_late = true};
    struct spw_ps__step_sum sum;
    assert_int_equal(spw_ps__steps_take(st, &c, &sum), SPW_OK);
    assert_int_equal(sum.contributions, 2);
    assert_int_equal(sum.discarded, 0);
    assert_int_equal(sum.n, 1);
    assert_float_equal(row(&sum, 7)[0], 2.5, TOL);
    assert_int_equal(sum.n_late, 2);
    size_t seen = 0;
    for (size_t i = 0; i < sum.n_late; i++) {
        assert_int_equal(sum.late[i].n, 1);
        if (sum.late[i].keys[0] == 8) {
            assert_float_equal(sum.late[i].grads[0], 6.0 / 3.0, TOL);
            assert_float_equal(sum.late[i].grads[1], -3.0 / 3.0, TOL);
            assert_int_equal(sum.late[i].versions[0], 3);
            seen++;
        } else {
            assert_int_equal(sum.late[i].keys[0], COUNTER);
            assert_float_equal(sum.late[i].grads[0], 200.0, TOL);
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    assert_int_equal(spw_ps__steps_pending(st), 1);
    struct spw_ps__step_lateness l = spw_ps__steps_lateness(st, 3, 2, 100);
    assert_true(l.late);
    assert_true(l.apply);
    assert_float_equal(l.weight, 100.0 / 500.0, TOL);
    assert_int_equal(spw_ps__steps_lateness(st, 1, 2, 100).committed, 2);
    spw_ps__steps_destroy(st);
}

/* Without member ids (a plain sync commit): every pending contribution of the step or an older
 * one is the unit's; every trainer's watermark is the step. A clear drops the watermarks. */
static void test_ps_steps_whole_job(void **state)
{
    (void)state;
    spw_ps__steps_t *st = spw_ps__steps_new(DIM, 1 << 20);
    add(st, 1, 4, 10, 7, 1.0f, 1.0f);
    add(st, 2, 1, 10, 7, 2.0f, 2.0f);
    add(st, 2, 2, 30, 7, 6.0f, 6.0f);
    add(st, 2, 5, 10, 7, 50.0f, 50.0f); /* not listed */
    uint32_t listed[] = {1, 2};
    struct spw_ps__step_commit c = {
        .step = 2, .trainer_ids = listed, .n_trainers = 2, .examples = 0};
    struct spw_ps__step_sum sum;
    assert_int_equal(spw_ps__steps_take(st, &c, &sum), SPW_OK);
    assert_int_equal(sum.contributions, 2);
    assert_int_equal(sum.discarded, 2);
    /* examples 0: the sum of what arrived, 40: (10·2 + 30·6) / 40 */
    assert_float_equal(row(&sum, 7)[0], 5.0, TOL);
    assert_true(spw_ps__steps_lateness(st, 77, 2, 1).late);
    assert_false(spw_ps__steps_lateness(st, 77, 3, 1).late);
    spw_ps__steps_clear(st);
    assert_false(spw_ps__steps_lateness(st, 1, 2, 1).late);
    assert_int_equal(spw_ps__steps_lateness(st, 1, 2, 1).committed, 0);
    spw_ps__steps_destroy(st);
}

/* The table's bound: a push beyond max_bytes is refused and nothing is kept. */
static void test_ps_steps_bound(void **state)
{
    (void)state;
    spw_ps__steps_t *st = spw_ps__steps_new(DIM, 1);
    uint64_t keys[1] = {7};
    float grads[DIM] = {1, 1};
    struct spw_ps__step_push p = {.step = 1, .trainer_id = 1, .n = 1, .keys = keys, .grads = grads};
    assert_int_equal(spw_ps__steps_add(st, &p), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_ps__steps_pending(st), 0);
    spw_ps__steps_destroy(st);
}

SPW_TEST_MAIN(test_ps_steps_backup_drop, test_ps_steps_backup_apply, test_ps_steps_whole_job,
              test_ps_steps_bound)
