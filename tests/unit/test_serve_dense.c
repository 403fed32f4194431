/* serve's dense snapshots: taken only from a complete set of blocks of one version, swapped
 * whole while reader threads predict (no reader ever sees two versions in one snapshot), and
 * kept alive while a reader holds one. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

static struct spw_model model;
static float *init;
static spw_serve_dense_t *dense;
static atomic_bool stop;
static atomic_ulong checked;

static void setup_model(void)
{
    const struct spw_model_field f[3] = {{.id = 1}, {.id = 2}, {.id = 3}};
    char err[256];
    assert_int_equal(spw_model_init_deep(&model, SPW_MODEL_DEEPFM, 4, f, 3, "16,8", 0, 0.0f, 9, err,
                                         sizeof(err)),
                     SPW_OK);
    init = malloc(spw_model_dense_params(&model) * sizeof(float));
    spw_model_dense_init(&model, init);
}

/* Puts every block with all offsets = value, at version; the first `blocks` only. */
static void put_blocks(spw_serve_table_t *t, float value, uint32_t version, uint32_t blocks)
{
    float row[8];
    for (uint32_t j = 0; j < model.dim; j++)
        row[j] = value;
    for (uint32_t b = 0; b < blocks; b++)
        assert_int_equal(spw_serve_table_put(t, spw_dense_block_key(b), row, version), SPW_OK);
}

static void *reader(void *arg)
{
    (void)arg;
    size_t p = spw_model_dense_params(&model);
    while (!atomic_load(&stop)) {
        const struct spw_serve_dense_snap *s = spw_serve_dense_acquire(dense);
        if (!s)
            continue;
        float want = (float)s->version; /* the writer puts offsets equal to the version */
        for (size_t j = 0; j < p; j++)
            if (fabsf(s->w[j] - init[j] - want) > 1e-4f * (1.0f + want)) {
                fprintf(stderr, "snapshot %u mixes versions at %zu: %g\n", s->version, j,
                        (double)(s->w[j] - init[j]));
                abort();
            }
        spw_serve_dense_release(dense, s);
        atomic_fetch_add(&checked, 1);
    }
    return NULL;
}

static void test_serve_dense_complete_sets_only(void **state)
{
    (void)state;
    setup_model();
    char err[256];
    spw_serve_table_t *t = spw_serve_table_new(model.dim, 1 << 16, err, sizeof(err));
    dense = spw_serve_dense_new(&model, err, sizeof(err));
    assert_non_null(dense);
    assert_null(spw_serve_dense_acquire(dense));
    /* no blocks, then a partial set: nothing */
    assert_int_equal(spw_serve_dense_refresh(dense, t), SPW_ERR_STATE);
    put_blocks(t, 1.0f, 1, model.dense_blocks - 1);
    assert_int_equal(spw_serve_dense_refresh(dense, t), SPW_ERR_STATE);
    put_blocks(t, 1.0f, 1, model.dense_blocks);
    assert_int_equal(spw_serve_dense_refresh(dense, t), SPW_OK);
    const struct spw_serve_dense_snap *s1 = spw_serve_dense_acquire(dense);
    assert_int_equal(s1->version, 1);
    assert_float_equal(s1->w[0], init[0] + 1.0f, 1e-6);
    /* the same version again swaps nothing; a set half of version 2: mixed, nothing */
    assert_int_equal(spw_serve_dense_refresh(dense, t), SPW_ERR_STATE);
    put_blocks(t, 2.0f, 2, model.dense_blocks / 2);
    assert_int_equal(spw_serve_dense_refresh(dense, t), SPW_ERR_STATE);
    assert_true(spw_serve_dense_mixed(dense) >= 1);
    put_blocks(t, 2.0f, 2, model.dense_blocks);
    assert_int_equal(spw_serve_dense_refresh(dense, t), SPW_OK);
    /* the old snapshot stays valid while held */
    assert_int_equal(s1->version, 1);
    assert_float_equal(s1->w[spw_model_dense_params(&model) - 1],
                       init[spw_model_dense_params(&model) - 1] + 1.0f, 1e-6);
    spw_serve_dense_release(dense, s1);
    assert_int_equal(spw_serve_dense_swaps(dense), 2);
    spw_serve_dense_destroy(dense);
    spw_serve_table_destroy(t);
    free(init);
}

/* Four readers check every snapshot they get while the writer applies 300 versions, each block
 * by block (a reader predicting from the table directly would see the half-written sets). */
static void test_serve_dense_concurrent_readers(void **state)
{
    (void)state;
    setup_model();
    char err[256];
    spw_serve_table_t *t = spw_serve_table_new(model.dim, 1 << 16, err, sizeof(err));
    dense = spw_serve_dense_new(&model, err, sizeof(err));
    atomic_store(&stop, false);
    atomic_store(&checked, 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader, NULL), 0);
    for (uint32_t v = 1; v <= 300; v++) {
        float row[8];
        for (uint32_t j = 0; j < model.dim; j++)
            row[j] = (float)v;
        for (uint32_t b = 0; b < model.dense_blocks; b++) {
            assert_int_equal(spw_serve_table_put(t, spw_dense_block_key(b), row, v), SPW_OK);
            if (b % 7 == 0) /* refreshes in the middle of a set find it mixed */
                spw_serve_dense_refresh(dense, t);
        }
        spw_serve_dense_refresh(dense, t);
        /* the readers are running before the next 299 versions: on busy cores the writer could
         * otherwise finish before any reader thread was scheduled */
        while (v == 1 && atomic_load(&checked) == 0)
            sched_yield();
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    print_message("%lu snapshots checked, %lu swaps, %lu mixed refreshes\n",
                  (unsigned long)atomic_load(&checked), (unsigned long)spw_serve_dense_swaps(dense),
                  (unsigned long)spw_serve_dense_mixed(dense));
    assert_int_equal(spw_serve_dense_swaps(dense), 300); /* one per version, none mixed */
    assert_true(atomic_load(&checked) > 0);
    assert_true(spw_serve_dense_mixed(dense) > 0);
    spw_serve_dense_destroy(dense);
    spw_serve_table_destroy(t);
    free(init);
}

SPW_TEST_MAIN(test_serve_dense_complete_sets_only, test_serve_dense_concurrent_readers)
