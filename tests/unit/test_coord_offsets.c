/* Unit tests of the offsets a completed checkpoint epoch records (coordinator/src/offset_merge.c):
 * the trainers' Kafka offsets merged into the previous manifest's (several trainers, a partition
 * that moved to another trainer, one nobody reported), the example count, and the model-update
 * stream's per-partition minima over the shards. */
#include "test_main.h" /* cmocka and what it needs first */
#include <stdio.h>

#include "coord_int.h"

/* One offset; a function, not a macro, so that its arguments need no parentheses. */
static struct spw_coord_offset off(const char *topic, int32_t partition, int64_t offset,
                                   uint32_t skip)
{
    struct spw_coord_offset o = {.partition = partition, .offset = offset, .skip = skip};
    snprintf(o.topic, sizeof(o.topic), "%s", topic);
    return o;
}

static void assert_offset(const struct spw_coord_offset *o, const char *topic, int32_t partition,
                          int64_t offset, uint32_t skip)
{
    assert_string_equal(o->topic, topic);
    assert_int_equal(o->partition, partition);
    assert_int_equal(o->offset, offset);
    assert_int_equal(o->skip, skip);
}

/* Two trainers own two partitions each; the previous manifest knew three of the four. Every
 * report overrides its partition in place, a new partition is appended after the base. */
static void test_coord_offsets_several_trainers(void **state)
{
    (void)state;
    const struct spw_coord_offset base[] = {off("ev", 0, 100, 0), off("ev", 1, 200, 3),
                                            off("ev", 2, 300, 0)};
    const struct spw_coord_offset a[] = {off("ev", 0, 150, 1), off("ev", 2, 310, 0)};
    const struct spw_coord_offset b[] = {off("ev", 3, 40, 0), off("ev", 1, 260, 0)};
    const struct spw_coord__report r[] = {{.offsets = {a, 2}}, {.offsets = {b, 2}}};
    struct spw_coord_offset out[3 + 2 + 2];
    size_t n = spw_coord__offsets_merge(out, base, 3, r, 2);
    assert_int_equal(n, 4);
    assert_offset(&out[0], "ev", 0, 150, 1);
    assert_offset(&out[1], "ev", 1, 260, 0); /* skip too comes from the report */
    assert_offset(&out[2], "ev", 2, 310, 0);
    assert_offset(&out[3], "ev", 3, 40, 0);
}

/* After a rebalance a partition is reported by its new owner: the new owner's offset replaces the
 * old owner's in the manifest. Of two reports of one partition in the same epoch (the server
 * aborts such an epoch first) the later wins. Topics tell partitions apart. */
static void test_coord_offsets_rebalance(void **state)
{
    (void)state;
    const struct spw_coord_offset base[] = {off("ev", 0, 100, 0), off("ev", 1, 200, 0)};
    /* trainer A owned 0 and 1; partition 1 moved to B, who read it further */
    const struct spw_coord_offset a[] = {off("ev", 0, 120, 0)};
    const struct spw_coord_offset b[] = {off("ev", 1, 250, 2)};
    const struct spw_coord__report r[] = {{.offsets = {a, 1}}, {.offsets = {b, 1}}};
    struct spw_coord_offset out[4];
    size_t n = spw_coord__offsets_merge(out, base, 2, r, 2);
    assert_int_equal(n, 2);
    assert_offset(&out[0], "ev", 0, 120, 0);
    assert_offset(&out[1], "ev", 1, 250, 2);

    /* both owners reported partition 1 (one lost it without knowing): the later report wins,
     * in the slot the base gave it */
    const struct spw_coord_offset a2[] = {off("ev", 1, 230, 0), off("other", 1, 7, 0)};
    const struct spw_coord__report r2[] = {{.offsets = {a2, 2}}, {.offsets = {b, 1}}};
    struct spw_coord_offset out2[5];
    n = spw_coord__offsets_merge(out2, base, 2, r2, 2);
    assert_int_equal(n, 3);
    assert_offset(&out2[0], "ev", 0, 100, 0);
    assert_offset(&out2[1], "ev", 1, 250, 2);
    assert_offset(&out2[2], "other", 1, 7, 0); /* same partition number, other topic: its own */
    /* in the other order the earlier owner's report is the later one */
    const struct spw_coord__report r3[] = {{.offsets = {b, 1}}, {.offsets = {a2, 2}}};
    n = spw_coord__offsets_merge(out2, base, 2, r3, 2);
    assert_int_equal(n, 3);
    assert_offset(&out2[1], "ev", 1, 230, 0);
}

/* A partition nobody reported this epoch (its trainer had no records, or it is unassigned)
 * keeps the previous manifest's offset; with no reports at all the base is copied unchanged,
 * and with no base the reports are taken in order. */
static void test_coord_offsets_missing_partition(void **state)
{
    (void)state;
    const struct spw_coord_offset base[] = {off("ev", 0, 100, 0), off("ev", 1, 200, 5),
                                            off("ev", 2, 300, 0)};
    const struct spw_coord_offset a[] = {off("ev", 2, 333, 0)};
    const struct spw_coord__report r[] = {{.offsets = {a, 1}}, {.offsets = {NULL, 0}}};
    struct spw_coord_offset out[4];
    size_t n = spw_coord__offsets_merge(out, base, 3, r, 2);
    assert_int_equal(n, 3);
    assert_offset(&out[0], "ev", 0, 100, 0);
    assert_offset(&out[1], "ev", 1, 200, 5);
    assert_offset(&out[2], "ev", 2, 333, 0);

    n = spw_coord__offsets_merge(out, base, 3, NULL, 0);
    assert_int_equal(n, 3);
    assert_offset(&out[1], "ev", 1, 200, 5);

    const struct spw_coord_offset b[] = {off("ev", 5, 1, 0), off("ev", 4, 2, 0)};
    const struct spw_coord__report rb[] = {{.offsets = {b, 2}}};
    n = spw_coord__offsets_merge(out, NULL, 0, rb, 1);
    assert_int_equal(n, 2);
    assert_offset(&out[0], "ev", 5, 1, 0);
    assert_offset(&out[1], "ev", 4, 2, 0);
}

/* The example count adds what each reporter reported beyond what earlier manifests counted. */
static void test_coord_offsets_examples(void **state)
{
    (void)state;
    const struct spw_coord__report r[] = {
        {.examples_reported = 1000, .examples_counted = 400}, /* +600 */
        {.examples_reported = 50, .examples_counted = 0},     /* +50: joined this epoch */
        {.examples_reported = 10, .examples_counted = 10},    /* idle: +0 */
        {.examples_reported = 5, .examples_counted = 9},      /* below its counted part: +0 */
    };
    assert_int_equal(spw_coord__examples_merge(7000, r, 4), 7650);
    assert_int_equal(spw_coord__examples_merge(7000, NULL, 0), 7000);
}

/* The update stream's offsets: per partition the minimum over the shards, in shard 0's order,
 * with shard 0's skip; a partition one shard did not report is left out; none at all when a
 * shard reported nothing or there is no shard. */
static void test_coord_offsets_update_minima(void **state)
{
    (void)state;
    const struct spw_coord_offset s0[] = {off("upd", 0, 90, 0), off("upd", 1, 50, 0),
                                          off("upd", 2, 70, 0)};
    const struct spw_coord_offset s1[] = {off("upd", 1, 60, 0), off("upd", 0, 80, 0),
                                          off("upd", 2, 75, 0)};
    /* shard 2 did not report partition 2 */
    const struct spw_coord_offset s2[] = {off("upd", 0, 85, 0), off("upd", 1, 40, 0)};
    struct spw_coord__offsets shards[] = {{s0, 3}, {s1, 3}, {s2, 2}};
    struct spw_coord_offset out[3];
    size_t n = spw_coord__update_offsets_min(out, shards, 3);
    assert_int_equal(n, 2);
    assert_offset(&out[0], "upd", 0, 80, 0);
    assert_offset(&out[1], "upd", 1, 40, 0);

    /* two shards that agree on the partitions: all three, each the lower of the two */
    n = spw_coord__update_offsets_min(out, shards, 2);
    assert_int_equal(n, 3);
    assert_offset(&out[0], "upd", 0, 80, 0);
    assert_offset(&out[1], "upd", 1, 50, 0);
    assert_offset(&out[2], "upd", 2, 70, 0);

    /* one shard alone: its own list */
    n = spw_coord__update_offsets_min(out, &shards[1], 1);
    assert_int_equal(n, 3);
    assert_offset(&out[0], "upd", 1, 60, 0);

    /* a shard that reported none: no update offsets at all */
    struct spw_coord__offsets with_empty[] = {{s0, 3}, {NULL, 0}};
    assert_int_equal(spw_coord__update_offsets_min(out, with_empty, 2), 0);
    assert_int_equal(spw_coord__update_offsets_min(out, shards, 0), 0);

    /* a partition of another topic with the same number is not the same partition */
    const struct spw_coord_offset t0[] = {off("a", 0, 10, 0)};
    const struct spw_coord_offset t1[] = {off("b", 0, 5, 0)};
    struct spw_coord__offsets topics[] = {{t0, 1}, {t1, 1}};
    assert_int_equal(spw_coord__update_offsets_min(out, topics, 2), 0);
}

/* A source high-water mark of (topic, partition, source topic, source partition). */
static struct spw_coord_offset smark(const char *topic, int32_t partition, const char *stopic,
                                     int32_t spart, int64_t offset)
{
    struct spw_coord_offset o = off(topic, partition, offset, 0);
    o.mark = true;
    o.source_partition = spart;
    snprintf(o.source_topic, sizeof(o.source_topic), "%s", stopic);
    return o;
}

/* Marks merge beside the positions: a mark never overwrites the position of its partition nor
 * one of another source partition or topic; a report's mark replaces the previous manifest's of
 * the same pair; a mark nobody reported stays. */
static void test_coord_offsets_marks_merge(void **state)
{
    (void)state;
    const struct spw_coord_offset base[] = {off("ex", 0, 100, 2), smark("ex", 0, "ev", 0, 40),
                                            smark("ex", 0, "ev", 1, 70),
                                            smark("ex", 1, "ev", 0, 9)};
    const struct spw_coord_offset a[] = {off("ex", 0, 130, 0), smark("ex", 0, "ev", 1, 95),
                                         smark("ex", 0, "ev2", 1, 5)};
    const struct spw_coord__report r[] = {{.offsets = {a, 3}}};
    struct spw_coord_offset out[4 + 3];
    size_t n = spw_coord__offsets_merge(out, base, 4, r, 1);
    assert_int_equal(n, 5);
    assert_offset(&out[0], "ex", 0, 130, 0);
    assert_false(out[0].mark);
    assert_true(out[1].mark);
    assert_int_equal(out[1].source_partition, 0);
    assert_int_equal(out[1].offset, 40); /* not reported: kept */
    assert_int_equal(out[2].source_partition, 1);
    assert_int_equal(out[2].offset, 95); /* reported: replaced */
    assert_int_equal(out[3].partition, 1);
    assert_int_equal(out[3].offset, 9);
    assert_string_equal(out[4].source_topic, "ev2"); /* another source topic: its own mark */
    assert_int_equal(out[4].offset, 5);
}

/* A mark and a position survive the message conversion both ways, and a position stays one. */
static void test_coord_offsets_marks_pb(void **state)
{
    (void)state;
    struct spw_coord_offset in[2] = {off("ex", 3, 77, 4), smark("ex", 3, "events", 2, 1234)};
    for (int i = 0; i < 2; i++) {
        Sparrow__PartitionOffset pb;
        spw_coord__offset_to_pb(&in[i], &pb);
        struct spw_coord_offset back;
        spw_coord__offset_from_pb(&pb, &back);
        assert_int_equal(back.mark, in[i].mark);
        assert_string_equal(back.topic, "ex");
        assert_int_equal(back.partition, 3);
        assert_int_equal(back.offset, in[i].offset);
        assert_int_equal(back.skip, in[i].skip);
        assert_int_equal(back.source_partition, in[i].source_partition);
        assert_string_equal(back.source_topic, in[i].source_topic);
    }
}

SPW_TEST_MAIN(test_coord_offsets_several_trainers, test_coord_offsets_rebalance,
              test_coord_offsets_missing_partition, test_coord_offsets_examples,
              test_coord_offsets_update_minima, test_coord_offsets_marks_merge,
              test_coord_offsets_marks_pb)
