/* Unit tests of ingest's offset ring: only delivered cycles' offsets are handed on, oldest first,
 * and a cycle not yet delivered (or failed) holds back every newer one. */
#include "test_main.h" /* cmocka and what it needs first */

#include "role_int.h"

struct stored {
    size_t n;
    int32_t part[16];
    int64_t next[16];
};

static void store(void *opaque, int32_t partition, int64_t next)
{
    struct stored *s = opaque;
    assert_true(s->n < 16);
    s->part[s->n] = partition;
    s->next[s->n] = next;
    s->n++;
}

static void test_ingest_offsets_note_keeps_highest(void **state)
{
    (void)state;
    struct spw_ingest__ring ring;
    assert_int_equal(spw_ingest__ring_init(&ring, 4), SPW_OK);
    struct spw_ingest__cycle *c = spw_ingest__ring_open(&ring);
    assert_non_null(c);
    assert_true(spw_ingest__cycle_note(c, 0, 10));
    assert_true(spw_ingest__cycle_note(c, 1, 3));
    assert_true(spw_ingest__cycle_note(c, 0, 7)); /* older offset: the next stays 11 */
    assert_int_equal(c->n_parts, 2);
    assert_int_equal(c->next[0], 11);
    assert_int_equal(c->next[1], 4);
    c->sealed = true;
    struct stored s = {0};
    assert_int_equal(spw_ingest__ring_advance(&ring, store, &s), SPW_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.part[0], 0);
    assert_int_equal(s.next[0], 11);
    assert_int_equal(s.part[1], 1);
    assert_int_equal(s.next[1], 4);
    assert_int_equal(ring.count, 0);
    spw_ingest__ring_fini(&ring);
}

static void test_ingest_offsets_gap_held_then_in_order(void **state)
{
    (void)state;
    struct spw_ingest__ring ring;
    assert_int_equal(spw_ingest__ring_init(&ring, 4), SPW_OK);
    struct spw_ingest__cycle *c1 = spw_ingest__ring_open(&ring);
    spw_ingest__cycle_note(c1, 0, 4);
    c1->outstanding = 1; /* a record in flight */
    c1->sealed = true;
    struct spw_ingest__cycle *c2 = spw_ingest__ring_open(&ring);
    spw_ingest__cycle_note(c2, 0, 9);
    c2->sealed = true; /* delivered, but after an undelivered cycle */
    struct spw_ingest__cycle *c3 = spw_ingest__ring_open(&ring);
    spw_ingest__cycle_note(c3, 0, 12); /* still open */

    struct stored s = {0};
    assert_int_equal(spw_ingest__ring_advance(&ring, store, &s), SPW_OK);
    assert_int_equal(s.n, 0); /* the gap holds c2 back */
    assert_int_equal(ring.count, 3);

    c1->outstanding = 0; /* the delivery report */
    assert_int_equal(spw_ingest__ring_advance(&ring, store, &s), SPW_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.next[0], 5);  /* c1 first */
    assert_int_equal(s.next[1], 10); /* then c2 */
    assert_int_equal(ring.count, 1); /* the open cycle stays */
    assert_ptr_equal(spw_ingest__ring_cur(&ring), c3);
    spw_ingest__ring_fini(&ring);
}

static void test_ingest_offsets_failed_cycle_stops(void **state)
{
    (void)state;
    struct spw_ingest__ring ring;
    assert_int_equal(spw_ingest__ring_init(&ring, 3), SPW_OK);
    struct spw_ingest__cycle *c1 = spw_ingest__ring_open(&ring);
    spw_ingest__cycle_note(c1, 2, 1);
    c1->sealed = true;
    c1->failed = true;
    struct spw_ingest__cycle *c2 = spw_ingest__ring_open(&ring);
    spw_ingest__cycle_note(c2, 2, 5);
    c2->sealed = true;
    assert_non_null(spw_ingest__ring_open(&ring));
    assert_null(spw_ingest__ring_open(&ring)); /* full */
    struct stored s = {0};
    assert_int_equal(spw_ingest__ring_advance(&ring, store, &s), SPW_ERR_IO);
    assert_int_equal(s.n, 0); /* nothing past the record that did not land */
    assert_int_equal(spw_ingest__ring_advance(&ring, store, &s), SPW_ERR_IO);
    assert_int_equal(s.n, 0);
    assert_int_equal(ring.count, 3);
    spw_ingest__ring_fini(&ring);
}

static void test_ingest_offsets_partition_table_full(void **state)
{
    (void)state;
    struct spw_ingest__ring ring;
    assert_int_equal(spw_ingest__ring_init(&ring, 2), SPW_OK);
    struct spw_ingest__cycle *c = spw_ingest__ring_open(&ring);
    for (int32_t p = 0; p < SPW_INGEST__CYCLE_MAX_PARTS; p++)
        assert_true(spw_ingest__cycle_note(c, p, 0));
    assert_true(spw_ingest__cycle_note(c, 0, 1)); /* a known partition still fits */
    assert_false(spw_ingest__cycle_note(c, SPW_INGEST__CYCLE_MAX_PARTS, 0));
    assert_int_equal(c->n_parts, SPW_INGEST__CYCLE_MAX_PARTS);
    spw_ingest__ring_fini(&ring);
}

SPW_TEST_MAIN(test_ingest_offsets_note_keeps_highest, test_ingest_offsets_gap_held_then_in_order,
              test_ingest_offsets_failed_cycle_stops, test_ingest_offsets_partition_table_full)
