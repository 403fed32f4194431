/* Unit tests of the trainer's batches: key de-duplication, validation, reuse, and the key index. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/trainer.h"
#include "trainer_int.h"
#include "test_rng.h"

static spw_batch_t *new_batch(void)
{
    char errstr[128];
    spw_batch_t *batch = spw_batch_new(4, 2, errstr, sizeof(errstr));
    assert_non_null(batch);
    return batch;
}

static void test_trn_batch_dedups_keys_with_bias_first(void **state)
{
    (void)state;
    spw_batch_t *batch = new_batch();
    const uint64_t k1[3] = {10, 20, 10};
    const uint64_t k2[2] = {30, 20};
    const float w2[2] = {0.5f, 2.0f};
    assert_int_equal(spw_batch_add(batch, 1.0f, 0.25f, 100, 3, k1, NULL), SPW_OK);
    assert_int_equal(spw_batch_add(batch, 0.0f, NAN, 50, 2, k2, w2), SPW_OK);
    assert_int_equal(spw_batch_examples(batch), 2);
    assert_int_equal(spw_batch_occurrences(batch), 5);
    assert_int_equal(spw_batch_unique(batch), 4);
    const uint64_t *keys = spw_batch_keys(batch);
    assert_true(keys[0] == SPW_TRN_BIAS_KEY && keys[1] == 10 && keys[2] == 20 && keys[3] == 30);

    const uint32_t *idx;
    const float *w;
    assert_int_equal(spw_batch_example_features(batch, 0, &idx, &w), 3);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 2);
    assert_int_equal(idx[2], 1);
    assert_true(w[0] == 1.0f && w[1] == 1.0f && w[2] == 1.0f);
    assert_int_equal(spw_batch_example_features(batch, 1, &idx, &w), 2);
    assert_int_equal(idx[0], 3);
    assert_int_equal(idx[1], 2);
    assert_true(w[0] == 0.5f && w[1] == 2.0f);

    assert_true(spw_batch_labels(batch)[0] == 1.0f && spw_batch_labels(batch)[1] == 0.0f);
    assert_true(spw_batch_oracle(batch)[0] == 0.25f && isnan(spw_batch_oracle(batch)[1]));
    assert_int_equal(spw_batch_max_event_time(batch), 100);
    spw_batch_destroy(batch);
}

static void test_trn_batch_rejects_bad_input_unchanged(void **state)
{
    (void)state;
    spw_batch_t *batch = new_batch();
    const uint64_t keys[2] = {1, 2};
    const float bad_w[2] = {1.0f, INFINITY};
    assert_int_equal(spw_batch_add(batch, 1.0f, NAN, 0, 2, keys, NULL), SPW_OK);
    assert_int_equal(spw_batch_add(batch, NAN, NAN, 0, 2, keys, NULL), SPW_ERR_INVALID);
    assert_int_equal(spw_batch_add(batch, 1.0f, NAN, 0, 2, keys, bad_w), SPW_ERR_INVALID);

    Sparrow__Example ex = SPARROW__EXAMPLE__INIT;
    uint64_t ekeys[2] = {7, 8};
    float ew[1] = {1.0f};
    ex.n_keys = 2;
    ex.keys = ekeys;
    assert_int_equal(spw_batch_add_example(batch, &ex), SPW_ERR_INVALID); /* no label */
    ex.has_label = 1;
    ex.label = 1.0f;
    ex.n_weights = 1;
    ex.weights = ew;
    assert_int_equal(spw_batch_add_example(batch, &ex), SPW_ERR_INVALID); /* weights != keys */

    assert_int_equal(spw_batch_examples(batch), 1);
    assert_int_equal(spw_batch_occurrences(batch), 2);
    assert_int_equal(spw_batch_unique(batch), 3);
    spw_batch_destroy(batch);
}

static void test_trn_batch_adds_decoded_example(void **state)
{
    (void)state;
    spw_batch_t *batch = new_batch();
    Sparrow__Example ex = SPARROW__EXAMPLE__INIT;
    uint64_t keys[3] = {5, 6, 5};
    float w[3] = {1.0f, 3.0f, 2.0f};
    uint32_t fields[3] = {1, 2, 1};
    ex.has_label = 1;
    ex.label = 0.75f;
    ex.has_oracle_p = 1;
    ex.oracle_p = 0.5f;
    ex.has_event_time_ms = 1;
    ex.event_time_ms = 1234;
    ex.n_keys = ex.n_weights = ex.n_fields = 3;
    ex.keys = keys;
    ex.weights = w;
    ex.fields = fields;
    assert_int_equal(spw_batch_add_example(batch, &ex), SPW_OK);
    assert_int_equal(spw_batch_unique(batch), 3);
    const uint32_t *idx;
    const float *wt;
    assert_int_equal(spw_batch_example_features(batch, 0, &idx, &wt), 3);
    assert_int_equal(idx[2], idx[0]);
    assert_true(wt[1] == 3.0f);
    assert_true(spw_batch_labels(batch)[0] == 0.75f);
    assert_true(spw_batch_oracle(batch)[0] == 0.5f);
    assert_int_equal(spw_batch_max_event_time(batch), 1234);
    spw_batch_destroy(batch);
}

/* Many batches of random keys through one batch object: every batch's unique list and indices
 * match a naive de-duplication, so nothing leaks from one batch into the next. */
static void test_trn_batch_reuse_matches_naive_dedup(void **state)
{
    (void)state;
    spw_batch_t *batch = new_batch();
    uint64_t s = 42;
    enum { MAX_F = 60, EX = 300 };
    uint64_t keys[MAX_F];
    uint64_t *all = malloc(sizeof(uint64_t) * EX * MAX_F);
    assert_non_null(all);
    for (int round = 0; round < 30; round++) {
        spw_batch_reset(batch);
        size_t n_ex = 1 + rng_next(&s) % EX, total = 0;
        uint64_t vocab = 1 + rng_next(&s) % 2000; /* small vocabularies: many duplicates */
        for (size_t i = 0; i < n_ex; i++) {
            size_t nf = rng_next(&s) % MAX_F;
            for (size_t j = 0; j < nf; j++)
                keys[j] = 1 + (rng_next(&s) % vocab) * 0x100000001ull + (uint64_t)round;
            assert_int_equal(spw_batch_add(batch, 0.0f, NAN, 0, nf, keys, NULL), SPW_OK);
            memcpy(all + total, keys, nf * sizeof(uint64_t));
            total += nf;
        }
        assert_int_equal(spw_batch_examples(batch), n_ex);
        assert_int_equal(spw_batch_occurrences(batch), total);
        const uint64_t *uniq = spw_batch_keys(batch);
        size_t nu = spw_batch_unique(batch);
        /* uniq: the bias, then first appearances in order */
        size_t expect = 1;
        assert_true(uniq[0] == SPW_TRN_BIAS_KEY);
        for (size_t o = 0; o < total; o++) {
            bool seen = false;
            for (size_t p = 0; p < o && !seen; p++)
                seen = all[p] == all[o];
            if (!seen) {
                assert_true(expect < nu);
                assert_true(uniq[expect] == all[o]);
                expect++;
            }
        }
        assert_int_equal(expect, nu);
        size_t o = 0;
        for (size_t i = 0; i < n_ex; i++) {
            const uint32_t *idx;
            const float *w;
            size_t nf = spw_batch_example_features(batch, i, &idx, &w);
            for (size_t j = 0; j < nf; j++, o++)
                assert_true(uniq[idx[j]] == all[o]);
        }
    }
    free(all);
    spw_batch_destroy(batch);
}

static void test_trn_batch_row_csr_groups_occurrences(void **state)
{
    (void)state;
    spw_batch_t *batch = new_batch();
    const uint64_t k1[3] = {10, 20, 10};
    const uint64_t k2[2] = {30, 20};
    assert_int_equal(spw_batch_add(batch, 1.0f, NAN, 0, 3, k1, NULL), SPW_OK);
    assert_int_equal(spw_batch_add(batch, 0.0f, NAN, 0, 2, k2, NULL), SPW_OK);
    uint32_t row_start[5], row_occ[5];
    spw_trn__batch_row_csr(batch, row_start, row_occ);
    const uint32_t want_start[5] = {0, 0, 2, 4, 5};
    const uint32_t want_occ[5] = {0, 2, 1, 4, 3};
    assert_memory_equal(row_start, want_start, sizeof(want_start));
    assert_memory_equal(row_occ, want_occ, sizeof(want_occ));
    spw_batch_destroy(batch);
}

/* The key index against a naive map under random inserts, removes (backward shift) and clears. */
static void test_trn_batch_keyidx_matches_naive_map(void **state)
{
    (void)state;
    enum { UNIVERSE = 700 };
    struct spw_trn__keyidx idx;
    spw_trn__keyidx_init(&idx);
    uint32_t naive[UNIVERSE];
    for (int i = 0; i < UNIVERSE; i++)
        naive[i] = SPW_TRN__NONE;
    size_t live = 0;
    uint64_t s = 7;
    for (int op = 0; op < 200000; op++) {
        /* keys that collide a lot: small universe, spread over few home slots */
        uint64_t k = rng_next(&s) % UNIVERSE;
        uint64_t key = k * 1024;
        unsigned what = (unsigned)(rng_next(&s) % 100);
        if (what < 55) {
            assert_int_equal(spw_trn__keyidx_reserve(&idx, live + 1), SPW_OK);
            bool inserted;
            uint32_t v = spw_trn__keyidx_upsert(&idx, key, (uint32_t)op, &inserted);
            assert_int_equal(inserted, naive[k] == SPW_TRN__NONE);
            if (inserted) {
                naive[k] = (uint32_t)op;
                live++;
            }
            assert_int_equal(v, naive[k]);
        } else if (what < 95) {
            uint32_t v = spw_trn__keyidx_remove(&idx, key);
            assert_int_equal(v, naive[k]);
            if (naive[k] != SPW_TRN__NONE)
                live--;
            naive[k] = SPW_TRN__NONE;
        } else if (what < 96) {
            spw_trn__keyidx_clear(&idx);
            for (int i = 0; i < UNIVERSE; i++)
                naive[i] = SPW_TRN__NONE;
            live = 0;
        } else {
            for (int i = 0; i < UNIVERSE; i++)
                assert_int_equal(spw_trn__keyidx_find(&idx, (uint64_t)i * 1024), naive[i]);
        }
        assert_int_equal(idx.count, live);
    }
    spw_trn__keyidx_fini(&idx);
}

/* Clearing 2^32 times wraps the generation: stale slots must not come back to life. */
static void test_trn_batch_keyidx_generation_wrap(void **state)
{
    (void)state;
    struct spw_trn__keyidx idx;
    spw_trn__keyidx_init(&idx);
    assert_int_equal(spw_trn__keyidx_reserve(&idx, 4), SPW_OK);
    bool inserted;
    spw_trn__keyidx_upsert(&idx, 99, 1, &inserted);
    idx.gen = UINT32_MAX; /* as after 2^32 - 2 clears; the slot above holds gen 1 */
    spw_trn__keyidx_clear(&idx);
    assert_int_equal(idx.gen, 1);
    assert_int_equal(spw_trn__keyidx_find(&idx, 99), SPW_TRN__NONE);
    spw_trn__keyidx_fini(&idx);
}

SPW_TEST_MAIN(test_trn_batch_dedups_keys_with_bias_first,
              test_trn_batch_rejects_bad_input_unchanged, test_trn_batch_adds_decoded_example,
              test_trn_batch_reuse_matches_naive_dedup, test_trn_batch_row_csr_groups_occurrences,
              test_trn_batch_keyidx_matches_naive_map, test_trn_batch_keyidx_generation_wrap)
