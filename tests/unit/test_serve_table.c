/* Unit tests of the serving lookup table: put/get/delete, growth, capacity, concurrent readers. */
#include "test_main.h" /* cmocka and what it needs first */

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

static void test_serve_table_put_get_delete(void **state)
{
    (void)state;
    char errstr[128];
    spw_serve_table_t *t = spw_serve_table_new(3, 1000, errstr, sizeof(errstr));
    assert_non_null(t);
    float w[3] = {1, 2, 3}, got[3] = {0};
    uint32_t version = 0;
    assert_int_equal(spw_serve_table_get(t, 0, got, &version), SPW_ERR_NOT_FOUND);
    assert_int_equal(spw_serve_table_put(t, 0, w, 7), SPW_OK); /* key 0: the bias */
    assert_int_equal(spw_serve_table_get(t, 0, got, &version), SPW_OK);
    assert_memory_equal(got, w, sizeof(w));
    assert_int_equal(version, 7);
    w[1] = -5;
    assert_int_equal(spw_serve_table_put(t, 0, w, 8), SPW_OK);
    assert_int_equal(spw_serve_table_rows(t), 1);
    assert_int_equal(spw_serve_table_get(t, 0, got, &version), SPW_OK);
    assert_true(got[1] == -5.0f);
    assert_int_equal(version, 8);
    assert_int_equal(spw_serve_table_delete(t, 0), SPW_OK);
    assert_int_equal(spw_serve_table_delete(t, 0), SPW_ERR_NOT_FOUND);
    assert_int_equal(spw_serve_table_get(t, 0, got, NULL), SPW_ERR_NOT_FOUND);
    assert_int_equal(spw_serve_table_rows(t), 0);
    spw_serve_table_destroy(t);
    assert_null(spw_serve_table_new(0, 10, errstr, sizeof(errstr)));
    spw_serve_table_destroy(NULL);
}

/* Many keys, deletions interleaved: every survivor is found with its own value, no deleted key
 * is (exercises growth and backward-shift deletion across probe runs). */
static void test_serve_table_many_keys(void **state)
{
    (void)state;
    char errstr[128];
    spw_serve_table_t *t = spw_serve_table_new(2, 1u << 20, errstr, sizeof(errstr));
    assert_non_null(t);
    const uint64_t n = 50000;
    for (uint64_t k = 0; k < n; k++) {
        float w[2] = {(float)k, -(float)k};
        assert_int_equal(spw_serve_table_put(t, k * 7919u, w, (uint32_t)k), SPW_OK);
    }
    for (uint64_t k = 0; k < n; k += 3)
        assert_int_equal(spw_serve_table_delete(t, k * 7919u), SPW_OK);
    uint64_t alive = 0;
    for (uint64_t k = 0; k < n; k++) {
        float got[2];
        uint32_t v;
        spw_err_t rc = spw_serve_table_get(t, k * 7919u, got, &v);
        if (k % 3 == 0) {
            assert_int_equal(rc, SPW_ERR_NOT_FOUND);
        } else {
            assert_int_equal(rc, SPW_OK);
            assert_true(got[0] == (float)k && got[1] == -(float)k);
            assert_int_equal(v, (uint32_t)k);
            alive++;
        }
    }
    assert_int_equal(spw_serve_table_rows(t), alive);
    uint64_t keys[3] = {7919u, 0, 2 * 7919u};
    float rows[6];
    memset(rows, 0xff, sizeof(rows));
    assert_int_equal(spw_serve_table_get_many(t, keys, 3, rows), 2);
    assert_true(rows[0] == 1.0f && rows[2] == 0.0f && rows[3] == 0.0f && rows[4] == 2.0f);

    /* A batch read of more keys than one chunk (1024), in request order with repeats and absent
     * keys, gives exactly what one get per key gives. */
    enum { N_MANY = 2500 };
    static uint64_t many[N_MANY];
    static float batch[N_MANY * 2];
    size_t want_found = 0;
    for (size_t i = 0; i < N_MANY; i++)
        many[i] = (uint64_t)((i * 37u) % (n + 100)) * 7919u;
    memset(batch, 0xff, sizeof(batch));
    size_t got_found = spw_serve_table_get_many(t, many, N_MANY, batch);
    for (size_t i = 0; i < N_MANY; i++) {
        float one[2] = {0.0f, 0.0f};
        if (spw_serve_table_get(t, many[i], one, NULL) == SPW_OK)
            want_found++;
        assert_true(batch[2 * i] == one[0] && batch[2 * i + 1] == one[1]);
    }
    assert_int_equal(got_found, want_found);
    assert_true(want_found > 0 && want_found < N_MANY);
    /* A single example's keys (fewer than one chunk of 64), with repeats of a key and so of a
     * stripe, and absent keys: the same as one get each. */
    enum { N_SMALL = 39 };
    uint64_t small[N_SMALL];
    memcpy(small, many + 100, sizeof(small));
    small[N_SMALL - 1] = small[0];
    want_found = 0;
    memset(batch, 0xff, sizeof(batch));
    got_found = spw_serve_table_get_many(t, small, N_SMALL, batch);
    for (size_t i = 0; i < N_SMALL; i++) {
        float one[2] = {0.0f, 0.0f};
        if (spw_serve_table_get(t, small[i], one, NULL) == SPW_OK)
            want_found++;
        assert_true(batch[2 * i] == one[0] && batch[2 * i + 1] == one[1]);
    }
    assert_int_equal(got_found, want_found);
    assert_true(want_found > 0);
    spw_serve_table_destroy(t);
}

/* Every slot width (16, 32, 64 bytes and multiples of 64: dims 1, 3, 4, 11, 12, 13, 29, 4096):
 * rows of distinct values survive growth, overwrites and deletions whole, by get and get_many,
 * and a get of an absent key leaves its output untouched. */
static void test_serve_table_slot_widths(void **state)
{
    (void)state;
    static const uint32_t dims[] = {1, 3, 4, 11, 12, 13, 29, SPW_SERVE_MAX_DIM};
    char errstr[128];
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
        const uint32_t dim = dims[d];
        /* 3000: past a few rehashes of every stripe; the widest row only fills them once */
        const uint64_t n = dim > 64 ? 300 : 3000;
        spw_serve_table_t *t = spw_serve_table_new(dim, n, errstr, sizeof(errstr));
        assert_non_null(t);
        assert_int_equal(spw_serve_table_dim(t), dim);
        float *w = malloc(dim * sizeof(float)), *got = malloc(dim * sizeof(float));
        assert_non_null(w);
        assert_non_null(got);
        for (uint64_t k = 0; k < n; k++) {
            for (uint32_t j = 0; j < dim; j++)
                w[j] = (float)(k * 1000 + j);
            assert_int_equal(spw_serve_table_put(t, k * 0x9e3779b1u, w, (uint32_t)k + 1), SPW_OK);
        }
        for (uint64_t k = 0; k < n; k += 4) { /* overwrite a quarter, delete another */
            for (uint32_t j = 0; j < dim; j++)
                w[j] = -(float)(k * 1000 + j);
            assert_int_equal(spw_serve_table_put(t, k * 0x9e3779b1u, w, 0), SPW_OK);
            assert_int_equal(spw_serve_table_delete(t, (k + 1) * 0x9e3779b1u), SPW_OK);
        }
        assert_int_equal(spw_serve_table_rows(t), n - n / 4);
        for (uint64_t k = 0; k < n; k++) {
            uint32_t v = 12345;
            for (uint32_t j = 0; j < dim; j++)
                got[j] = 7.0f;
            spw_err_t rc = spw_serve_table_get(t, k * 0x9e3779b1u, got, &v);
            if (k % 4 == 1) {
                assert_int_equal(rc, SPW_ERR_NOT_FOUND);
                assert_int_equal(v, 12345);
                for (uint32_t j = 0; j < dim; j++)
                    assert_true(got[j] == 7.0f);
                continue;
            }
            assert_int_equal(rc, SPW_OK);
            float sign = k % 4 == 0 ? -1.0f : 1.0f;
            assert_int_equal(v, k % 4 == 0 ? 0 : (uint32_t)k + 1);
            for (uint32_t j = 0; j < dim; j++)
                assert_true(got[j] == sign * (float)(k * 1000 + j));
        }
        /* 100 keys (two chunks of 64), present and absent in turn */
        enum { N_KEYS = 100 };
        uint64_t keys[N_KEYS];
        float *rows = malloc((size_t)N_KEYS * dim * sizeof(float));
        assert_non_null(rows);
        for (size_t i = 0; i < N_KEYS; i++)
            keys[i] = (uint64_t)(i % 8) * 0x9e3779b1u + (i % 2 ? 0 : 1u << 31);
        size_t want = 0;
        for (size_t i = 0; i < N_KEYS; i++)
            want += i % 2 && i % 8 % 4 != 1 ? 1 : 0;
        memset(rows, 0xff, (size_t)N_KEYS * dim * sizeof(float));
        assert_int_equal(spw_serve_table_get_many(t, keys, N_KEYS, rows), want);
        for (size_t i = 0; i < N_KEYS; i++) {
            uint64_t k = i % 8;
            bool present = i % 2 && k % 4 != 1;
            float sign = k % 4 == 0 ? -1.0f : 1.0f;
            for (uint32_t j = 0; j < dim; j++)
                assert_true(rows[i * dim + j] == (present ? sign * (float)(k * 1000 + j) : 0.0f));
        }
        free(rows);
        free(w);
        free(got);
        spw_serve_table_destroy(t);
    }
}

/* One stripe grown past half of a 2 MiB chunk (its array then mapped on its own) and back to
 * empty, beside rows of other stripes in shared chunks: rows survive every move. The keys of one
 * stripe are found with the table's hash (stripe = top byte of mix64(key ^ 0x9e3779b97f4a7c15));
 * were the hash to change, the test would still pass without reaching the large mapping. */
static void test_serve_table_large_stripe(void **state)
{
    (void)state;
    enum { DIM = SPW_SERVE_MAX_DIM, N_ONE = 80 }; /* 80 rows: cap 128 × 16448 bytes > 1 MiB */
    char errstr[128];
    spw_serve_table_t *t = spw_serve_table_new(DIM, 1000, errstr, sizeof(errstr));
    assert_non_null(t);
    static float w[DIM], got[DIM];
    uint64_t keys[N_ONE];
    size_t n = 0;
    for (uint64_t k = 1; n < N_ONE; k++)
        if (spw_hash_mix64(k ^ 0x9e3779b97f4a7c15ull) >> 56 == 7)
            keys[n++] = k;
    for (size_t i = 0; i < N_ONE; i++) {
        for (uint32_t j = 0; j < DIM; j += 512)
            w[j] = (float)(i + j);
        assert_int_equal(spw_serve_table_put(t, keys[i], w, (uint32_t)i), SPW_OK);
        /* a row of another stripe now and then */
        w[0] = -(float)i;
        assert_int_equal(spw_serve_table_put(t, 1u << 20 | i, w, 0), SPW_OK);
    }
    for (size_t i = 0; i < N_ONE; i++) {
        uint32_t v;
        assert_int_equal(spw_serve_table_get(t, keys[i], got, &v), SPW_OK);
        assert_int_equal(v, (uint32_t)i);
        for (uint32_t j = 0; j < DIM; j += 512)
            assert_true(got[j] == (float)(i + j));
        assert_int_equal(spw_serve_table_get(t, 1u << 20 | i, got, NULL), SPW_OK);
        assert_true(got[0] == -(float)i);
    }
    for (size_t i = 0; i < N_ONE; i++)
        assert_int_equal(spw_serve_table_delete(t, keys[i]), SPW_OK);
    assert_int_equal(spw_serve_table_rows(t), N_ONE);
    assert_int_equal(spw_serve_table_get(t, keys[0], got, NULL), SPW_ERR_NOT_FOUND);
    spw_serve_table_destroy(t);
}

static void test_serve_table_capacity(void **state)
{
    (void)state;
    char errstr[128];
    spw_serve_table_t *t = spw_serve_table_new(1, 10, errstr, sizeof(errstr));
    float w = 1;
    for (uint64_t k = 0; k < 10; k++)
        assert_int_equal(spw_serve_table_put(t, k, &w, 0), SPW_OK);
    assert_int_equal(spw_serve_table_put(t, 99, &w, 0), SPW_ERR_NOMEM);
    w = 2;
    assert_int_equal(spw_serve_table_put(t, 3, &w, 1), SPW_OK); /* existing keys still update */
    assert_int_equal(spw_serve_table_delete(t, 4), SPW_OK);
    assert_int_equal(spw_serve_table_put(t, 99, &w, 0), SPW_OK);
    spw_serve_table_destroy(t);
}

/* One writer rewrites rows whose floats all equal one value; readers must never see a row
 * mixing two writes (torn), a version of another write than the values, or a missing key that
 * is always present. */
struct race {
    spw_serve_table_t *t;
    atomic_int stop;
    atomic_int bad;
};

static void *reader(void *arg)
{
    struct race *r = arg;
    float got[16];
    while (!atomic_load(&r->stop)) {
        for (uint64_t k = 0; k < 64; k++) {
            uint32_t version = UINT32_MAX;
            if (spw_serve_table_get(r->t, k, got, &version) != SPW_OK) {
                atomic_fetch_add(&r->bad, 1);
                continue;
            }
            for (int i = 1; i < 16; i++)
                if (got[i] != got[0])
                    atomic_fetch_add(&r->bad, 1);
            /* the version is the one written with these values (round r: values r, version r) */
            if (got[0] != (float)version)
                atomic_fetch_add(&r->bad, 1);
        }
        /* A batch read (grouped by stripe) sees every row whole as well. */
        enum { N_BATCH = 200 };
        uint64_t keys[N_BATCH];
        float rows[N_BATCH * 16];
        for (size_t j = 0; j < N_BATCH; j++)
            keys[j] = (j * 13u) % 64u;
        if (spw_serve_table_get_many(r->t, keys, N_BATCH, rows) != N_BATCH)
            atomic_fetch_add(&r->bad, 1);
        for (size_t j = 0; j < N_BATCH; j++)
            for (int i = 1; i < 16; i++)
                if (rows[j * 16 + i] != rows[j * 16])
                    atomic_fetch_add(&r->bad, 1);
        /* ... and so does a single example's (several stripes' read locks held at once, a
         * stripe of repeated keys locked once) */
        enum { N_ONE = 39 };
        for (size_t j = 0; j < N_ONE; j++)
            keys[j] = (j * 5u) % 32u;
        if (spw_serve_table_get_many(r->t, keys, N_ONE, rows) != N_ONE)
            atomic_fetch_add(&r->bad, 1);
        for (size_t j = 0; j < N_ONE; j++)
            for (int i = 1; i < 16; i++)
                if (rows[j * 16 + i] != rows[j * 16])
                    atomic_fetch_add(&r->bad, 1);
    }
    return NULL;
}

static void test_serve_table_concurrent_readers(void **state)
{
    (void)state;
    char errstr[128];
    struct race r = {.t = spw_serve_table_new(16, 1u << 20, errstr, sizeof(errstr))};
    atomic_init(&r.stop, 0);
    atomic_init(&r.bad, 0);
    float w[16] = {0};
    for (uint64_t k = 0; k < 64; k++)
        assert_int_equal(spw_serve_table_put(r.t, k, w, 0), SPW_OK);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, reader, &r);
    for (uint32_t round = 1; round <= 2000; round++) {
        for (int i = 0; i < 16; i++)
            w[i] = (float)round;
        for (uint64_t k = 0; k < 64; k++)
            spw_serve_table_put(r.t, k, w, round);
        /* Growth and deletion of other keys while readers run. */
        spw_serve_table_put(r.t, 1000 + round, w, round);
        if (round % 2 == 0)
            spw_serve_table_delete(r.t, 1000 + round - 1);
    }
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&r.bad), 0);
    spw_serve_table_destroy(r.t);
}

SPW_TEST_MAIN(test_serve_table_put_get_delete, test_serve_table_many_keys,
              test_serve_table_slot_widths, test_serve_table_large_stripe,
              test_serve_table_capacity, test_serve_table_concurrent_readers)
