/* Unit tests of the trainer's source high-water marks (trainer/src/loop_source.c): duplicates
 * dropped per (input partition, source partition) pair, out-of-order examples across pairs kept,
 * acknowledged values stored in order, and a recovery's marks restored. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdlib.h>
#include <string.h>

#include "loop_int.h"

/* A Kafka source with partitions 0..n-1 assigned and no consumer. */
static void src_init(struct spw_trn__source *src, size_t n)
{
    memset(src, 0, sizeof(*src));
    src->kafka = true;
    src->parts = calloc(n, sizeof(*src->parts));
    assert_non_null(src->parts);
    src->n_parts = n;
    for (size_t i = 0; i < n; i++)
        src->parts[i] = (struct spw_trn__part){.assigned = true, .offset = -1, .skip_at = -1};
}

/* A replay within one pair is dropped at and below the mark; the next new offset is kept. */
static void test_trn_smark_duplicates_dropped(void **state)
{
    (void)state;
    struct spw_trn__source src;
    src_init(&src, 1);
    for (int64_t o = 10; o < 20; o++)
        assert_false(spw_trn__source_duplicate(&src, 0, "events", 0, o));
    /* ingest crashed and replays from 15 */
    for (int64_t o = 15; o < 20; o++)
        assert_true(spw_trn__source_duplicate(&src, 0, "events", 0, o));
    assert_false(spw_trn__source_duplicate(&src, 0, "events", 0, 20));
    assert_int_equal(src.duplicates, 5);
    spw_trn__source_close(&src);
}

/* Order is kept per pair only: a lower source offset of another source partition, of another
 * input partition, or of another source topic is no duplicate. */
static void test_trn_smark_pairs_independent(void **state)
{
    (void)state;
    struct spw_trn__source src;
    src_init(&src, 2);
    assert_false(spw_trn__source_duplicate(&src, 0, "events", 0, 100));
    assert_false(spw_trn__source_duplicate(&src, 0, "events", 1, 5));  /* other source part */
    assert_false(spw_trn__source_duplicate(&src, 1, "events", 0, 50)); /* other input part */
    assert_false(spw_trn__source_duplicate(&src, 0, "other", 0, 1));   /* other source topic */
    assert_true(spw_trn__source_duplicate(&src, 0, "events", 1, 5));
    assert_true(spw_trn__source_duplicate(&src, 1, "events", 0, 50));
    assert_false(spw_trn__source_duplicate(&src, 1, "events", 0, 51));
    assert_int_equal(src.duplicates, 2);
    /* without a source topic nothing is checked */
    assert_false(spw_trn__source_duplicate(&src, 0, NULL, 0, 1));
    assert_int_equal(src.unchecked, 1);
    spw_trn__source_close(&src);
}

struct seen {
    int n;
    int32_t part, spart;
    uint32_t stopic;
    int64_t value;
};

static spw_err_t no_pos(void *opaque, int32_t part, int64_t offset, uint32_t skip, uint64_t taken)
{
    (void)opaque, (void)part, (void)offset, (void)skip, (void)taken;
    return SPW_OK;
}

static spw_err_t take_smark(void *opaque, int32_t part, uint32_t stopic, int32_t spart,
                            int64_t value)
{
    struct seen *s = opaque;
    *s = (struct seen){s->n + 1, part, spart, stopic, value};
    return SPW_OK;
}

/* A snapshot hands out moved marks once; only stored (acknowledged) values are reported, a
 * revoked partition's are forgotten, and restored marks drop their replays at once. */
static void test_trn_smark_store_and_restore(void **state)
{
    (void)state;
    struct spw_trn__source src;
    src_init(&src, 2);
    assert_false(spw_trn__source_duplicate(&src, 1, "events", 3, 41));
    struct seen s = {0};
    assert_int_equal(spw_trn__source_snapshot(&src, no_pos, take_smark, &s), SPW_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.part, 1);
    assert_int_equal(s.spart, 3);
    assert_int_equal(s.value, 41);
    assert_int_equal(spw_trn__source_snapshot(&src, no_pos, take_smark, &s), SPW_OK);
    assert_int_equal(s.n, 1); /* nothing moved since */
    struct spw_trainer_mark out[4];
    assert_int_equal(spw_trn__source_smarks(&src, out, 4), 0); /* not acknowledged yet */
    spw_trn__source_store_smark(&src, s.part, s.stopic, s.spart, s.value);
    assert_int_equal(spw_trn__source_smarks(&src, out, 4), 1);
    assert_int_equal(out[0].partition, 1);
    assert_int_equal(out[0].source_partition, 3);
    assert_int_equal(out[0].offset, 41);
    assert_string_equal(out[0].source_topic, "events");
    /* a recovery's manifest restores a mark of partition 0 */
    assert_int_equal(spw_trn__source_set_smark(&src, 0, "events", 7, 900), SPW_OK);
    assert_true(spw_trn__source_duplicate(&src, 0, "events", 7, 900));
    assert_false(spw_trn__source_duplicate(&src, 0, "events", 7, 901));
    assert_int_equal(spw_trn__source_smarks(&src, out, 4), 2);
    /* unassigned: no longer reported */
    src.parts[1].assigned = false;
    assert_int_equal(spw_trn__source_smarks(&src, out, 4), 1);
    assert_int_equal(out[0].partition, 0);
    spw_trn__source_close(&src);
}

SPW_TEST_MAIN(test_trn_smark_duplicates_dropped, test_trn_smark_pairs_independent,
              test_trn_smark_store_and_restore)
