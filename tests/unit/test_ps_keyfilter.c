/* Unit tests of the filter of keys written to RocksDB: no false negatives, a bounded false
 * positive rate, rewrites not counted, and "maybe" for every key once it is not valid. */
#include "test_main.h" /* cmocka and what it needs first */

#include "ps_int.h"
#include "sparrow/hash.h"

static void test_ps_keyfilter_no_false_negatives(void **state)
{
    (void)state;
    struct spw_ps__keyfilter f;
    assert_int_equal(spw_ps__keyfilter_init(&f, 100000, true), SPW_OK);
    assert_false(spw_ps__keyfilter_may_contain(&f, 1)); /* empty */
    for (uint64_t k = 0; k < 100000; k++)
        spw_ps__keyfilter_add(&f, spw_hash_mix64(k));
    for (uint64_t k = 0; k < 100000; k++)
        assert_true(spw_ps__keyfilter_may_contain(&f, spw_hash_mix64(k)));
    /* keys never added: 8 bits per key, 6 probes in one block: about 2-3% */
    uint32_t fp = 0;
    for (uint64_t k = 100000; k < 200000; k++)
        fp += spw_ps__keyfilter_may_contain(&f, spw_hash_mix64(k));
    assert_true(fp < 5000);
    assert_true(f.valid);
    spw_ps__keyfilter_fini(&f);
}

static void test_ps_keyfilter_rewrites_not_counted(void **state)
{
    (void)state;
    struct spw_ps__keyfilter f;
    assert_int_equal(spw_ps__keyfilter_init(&f, 1000, true), SPW_OK);
    for (int round = 0; round < 50; round++) /* a checkpoint rewriting the same rows */
        for (uint64_t k = 0; k < 500; k++)
            spw_ps__keyfilter_add(&f, k);
    assert_true(f.added <= 500);
    assert_true(f.valid);
    spw_ps__keyfilter_fini(&f);
}

static void test_ps_keyfilter_gives_up_past_capacity(void **state)
{
    (void)state;
    struct spw_ps__keyfilter f;
    assert_int_equal(spw_ps__keyfilter_init(&f, 1000, true), SPW_OK);
    for (uint64_t k = 0; k < 5000; k++)
        spw_ps__keyfilter_add(&f, k);
    assert_false(f.valid);
    for (uint64_t k = 1u << 20; k < (1u << 20) + 1000; k++)
        assert_true(spw_ps__keyfilter_may_contain(&f, k));
    spw_ps__keyfilter_fini(&f);

    /* not valid from the start (a database that held rows): never rules a key out */
    assert_int_equal(spw_ps__keyfilter_init(&f, 1000, false), SPW_OK);
    assert_true(spw_ps__keyfilter_may_contain(&f, 7));
    spw_ps__keyfilter_add(&f, 7);
    assert_true(spw_ps__keyfilter_may_contain(&f, 8));
    spw_ps__keyfilter_fini(&f);
}

SPW_TEST_MAIN(test_ps_keyfilter_no_false_negatives, test_ps_keyfilter_rewrites_not_counted,
              test_ps_keyfilter_gives_up_past_capacity)
