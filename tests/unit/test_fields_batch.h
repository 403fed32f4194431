/* Tests: a batch with fields for the deep models' tests (test_trn_threads, test_cuda_model):
 * n examples of 0 .. 6 features over a vocabulary of 40 keys (so that rows recur), fields among
 * TEST_FIELDS' ids (7, 9, 11) and an unknown one (5), weights in [0.25, 2], labels 0/1. Include
 * after cmocka, math.h, sparrow/trainer.h and test_rng.h. */
#ifndef SPARROW_TEST_FIELDS_BATCH_H
#define SPARROW_TEST_FIELDS_BATCH_H

static const struct spw_model_field TEST_FIELDS[3] = {
    {.id = 7, .pooling = SPW_POOL_SUM},
    {.id = 9, .pooling = SPW_POOL_MEAN},
    {.id = 11, .pooling = SPW_POOL_SUM},
};

/* The batch (free with spw_batch_destroy); set to model m when m is deep. */
static inline spw_batch_t *test_fields_batch(const struct spw_model *m, size_t n, uint64_t seed)
{
    char err[128];
    spw_batch_t *b = spw_batch_new(0, 0, err, sizeof(err));
    assert_non_null(b);
    if (spw_model_is_deep(m))
        assert_int_equal(spw_batch_set_model(b, m), SPW_OK);
    static const uint32_t field_ids[4] = {7, 9, 11, 5};
    for (size_t i = 0; i < n; i++) {
        uint64_t keys[6];
        float w[6];
        uint32_t fields[6];
        size_t nf = rng_next(&seed) % 7;
        for (size_t j = 0; j < nf; j++) {
            keys[j] = 100 + rng_next(&seed) % 40;
            w[j] = rng_uniform(&seed, 0.25f, 2.0f);
            fields[j] = field_ids[rng_next(&seed) % 4];
        }
        float label = (rng_next(&seed) & 1) ? 1.0f : 0.0f;
        assert_int_equal(spw_batch_add_fields(b, label, NAN, 0, nf, keys, w, fields), SPW_OK);
    }
    return b;
}

#endif
