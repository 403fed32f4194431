/* Unit tests of the row store: pull/push through the store, staleness, spill to RocksDB and
 * read-back, admission, TTL, persistence. */
#include "test_main.h" /* cmocka and what it needs first */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_int.h"
#include "sparrow/hash.h"
#include "sparrow/fs.h"
#include "test_dir.h"

static struct spw_ps_store_conf base_conf(struct test_dir_fixture *fx, char *path, size_t path_size,
                                          enum spw_ps_optimizer opt, uint32_t dim)
{
    snprintf(path, path_size, "%s/db%d", fx->dir, fx->n_db++);
    struct spw_ps_store_conf c = {0};
    c.dim = dim;
    spw_ps_optim_conf_default(&c.optim);
    c.optim.kind = opt;
    c.penalty.kind = SPW_PS_PENALTY_NONE;
    c.seed = 7;
    c.memory_bytes = 16u << 20;
    c.db_path = path;
    return c;
}

static spw_ps_store_t *open_ok(const struct spw_ps_store_conf *c)
{
    char err[256] = "";
    spw_ps_store_t *s = spw_ps_store_open(c, err, sizeof(err));
    if (!s)
        fail_msg("open: %s", err);
    return s;
}

static void test_ps_store_pull_init_deterministic(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p1[128], p2[128];
    struct spw_ps_store_conf c1 = base_conf(fx, p1, sizeof(p1), SPW_PS_ADAGRAD, 8);
    struct spw_ps_store_conf c2 = base_conf(fx, p2, sizeof(p2), SPW_PS_ADAGRAD, 8);
    spw_ps_store_t *a = open_ok(&c1), *b = open_ok(&c2);
    uint64_t keys[3] = {1, 2, 0xffffffffffffffffull};
    float va[24], vb[24];
    uint32_t ver[3] = {9, 9, 9};
    assert_int_equal(spw_ps_store_pull(a, keys, 3, va, ver), SPW_OK);
    assert_int_equal(spw_ps_store_pull(b, keys, 3, vb, NULL), SPW_OK);
    assert_memory_equal(va, vb, sizeof(va));
    assert_int_equal(ver[0], 0);
    assert_memory_not_equal(va, va + 8, 8 * sizeof(float));
    float init[8 * 2];
    spw_ps__row_init(&c1.optim, 8, 7, 2, init);
    assert_memory_equal(va + 8, init, 8 * sizeof(float));
    spw_ps_store_close(a);
    spw_ps_store_close(b);
}

static void test_ps_store_push_versions_and_staleness(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 1);
    c.optim.lr = 1.0f;
    c.optim.init_scale = 0.0f;
    c.penalty.kind = SPW_PS_PENALTY_INVERSE;
    spw_ps_store_t *s = open_ok(&c);
    uint64_t key = 5;
    float g = 1.0f, w;
    uint32_t v0 = 0, tau = 99, ver;
    struct spw_ps_push_result r;
    assert_int_equal(spw_ps_store_push(s, &key, 1, &g, &v0, &tau, &r), SPW_OK);
    assert_int_equal(r.applied, 1);
    assert_int_equal(tau, 0);
    /* Pushed again from version 0: tau = 1, inverse penalty halves the step. */
    assert_int_equal(spw_ps_store_push(s, &key, 1, &g, &v0, &tau, &r), SPW_OK);
    assert_int_equal(tau, 1);
    assert_int_equal(spw_ps_store_pull(s, &key, 1, &w, &ver), SPW_OK);
    assert_float_equal(w, -1.5, 1e-6);
    assert_int_equal(ver, 2);
    /* A repeated key in one push is applied twice, in order. */
    uint64_t keys2[2] = {5, 5};
    float g2[2] = {1.0f, 1.0f};
    uint32_t vv[2] = {2, 2};
    assert_int_equal(spw_ps_store_push(s, keys2, 2, g2, vv, NULL, &r), SPW_OK);
    assert_int_equal(r.applied, 2);
    assert_int_equal(spw_ps_store_pull(s, &key, 1, &w, &ver), SPW_OK);
    assert_float_equal(w, -1.5 - 1.0 - 0.5, 1e-6);
    assert_int_equal(ver, 4);
    spw_ps_store_close(s);
}

static void test_ps_store_penalties_through_store(void **state)
{
    struct test_dir_fixture *fx = *state;
    const char *specs[] = {"none", "inverse", "exp:0.5", "drop:2"};
    const double want[] = {-1.0, -0.25, -0.125, 0.0}; /* tau = 3 */
    for (int i = 0; i < 4; i++) {
        char p[128];
        struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 1);
        c.optim.lr = 1.0f;
        c.optim.init_scale = 0.0f;
        assert_int_equal(spw_ps_penalty_parse(specs[i], &c.penalty), SPW_OK);
        spw_ps_store_t *s = open_ok(&c);
        uint64_t key = 1;
        float zero = 0.0f, one = 1.0f, w;
        for (uint32_t v = 0; v < 3; v++) /* three fresh updates of 0 bring the version to 3 */
            assert_int_equal(spw_ps_store_push(s, &key, 1, &zero, &v, NULL, NULL), SPW_OK);
        uint32_t pulled = 0, tau = 0;
        struct spw_ps_push_result r;
        assert_int_equal(spw_ps_store_push(s, &key, 1, &one, &pulled, &tau, &r), SPW_OK);
        assert_int_equal(tau, 3);
        assert_int_equal(r.dropped_stale, i == 3 ? 1 : 0);
        assert_int_equal(spw_ps_store_pull(s, &key, 1, &w, NULL), SPW_OK);
        assert_float_equal(w, want[i], 1e-6);
        spw_ps_store_close(s);
    }
}

static void test_ps_store_nonfinite_rejected(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAGRAD, 2);
    spw_ps_store_t *s = open_ok(&c);
    uint64_t keys[2] = {10, 11};
    float before[4], after[4];
    assert_int_equal(spw_ps_store_pull(s, keys, 2, before, NULL), SPW_OK);
    float g[4] = {NAN, 1.0f, 0.5f, 0.5f};
    struct spw_ps_push_result r;
    assert_int_equal(spw_ps_store_push(s, keys, 2, g, NULL, NULL, &r), SPW_OK);
    assert_int_equal(r.rejected, 1);
    assert_int_equal(r.applied, 1);
    uint32_t ver[2];
    assert_int_equal(spw_ps_store_pull(s, keys, 2, after, ver), SPW_OK);
    assert_memory_equal(before, after, 2 * sizeof(float));
    assert_int_equal(ver[0], 0);
    assert_int_equal(ver[1], 1);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.rejected_nonfinite, 1);
    spw_ps_store_close(s);
}

/* Applies the same pseudo-random pushes to a store whose DRAM holds a fraction of the keys and to
 * one that holds all of them; every row must be bit-identical. Evicted rows in the cold file, or
 * (cold_off) in RocksDB. */
static void spill_readback_identical(struct test_dir_fixture *fx, bool cold_off)
{
    char p1[128], p2[128];
    const uint32_t dim = 4, n_keys = 20000;
    struct spw_ps_store_conf small = base_conf(fx, p1, sizeof(p1), SPW_PS_ADAM, dim);
    small.memory_bytes = 200 * 1024; /* ~1/10 of the model */
    small.cold_off = cold_off;
    struct spw_ps_store_conf big = base_conf(fx, p2, sizeof(p2), SPW_PS_ADAM, dim);
    spw_ps_store_t *a = open_ok(&small), *b = open_ok(&big);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(a, &st);
    assert_true(st.rows_dram_max * 5 < n_keys);
    enum { BATCH = 512 };
    uint64_t keys[BATCH];
    float grads[BATCH * 4], va[BATCH * 4], vb[BATCH * 4];
    uint32_t vera[BATCH], verb[BATCH];
    uint64_t rng = 1;
    for (int round = 0; round < 120; round++) {
        for (int i = 0; i < BATCH; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            keys[i] = (rng >> 33) % n_keys;
            for (uint32_t j = 0; j < dim; j++)
                grads[i * dim + j] = (float)((int)((rng >> (j * 8)) & 0xff) - 128) / 128.0f;
        }
        assert_int_equal(spw_ps_store_pull(a, keys, BATCH, va, vera), SPW_OK);
        assert_int_equal(spw_ps_store_pull(b, keys, BATCH, vb, verb), SPW_OK);
        assert_memory_equal(va, vb, sizeof(va));
        assert_memory_equal(vera, verb, sizeof(vera));
        assert_int_equal(spw_ps_store_push(a, keys, BATCH, grads, vera, NULL, NULL), SPW_OK);
        assert_int_equal(spw_ps_store_push(b, keys, BATCH, grads, verb, NULL, NULL), SPW_OK);
    }
    spw_ps_store_get_stats(a, &st);
    assert_true(st.evictions > 0);
    assert_true((cold_off ? st.db_reads : st.cold_reads) > 0);
    assert_int_equal(cold_off ? st.cold_reads : st.db_reads, 0);
    assert_true(st.rows_dram <= st.rows_dram_max);
    /* a row lives in DRAM or in the cold file, never both */
    assert_int_equal(st.rows_cold + st.rows_dram, cold_off ? st.rows_dram : st.rows_created);
    size_t sz = sizeof(struct spw_ps_row_copy) + (dim + 2 * dim + 1) * sizeof(float);
    struct spw_ps_row_copy *ra = malloc(sz), *rb = malloc(sz);
    int found = 0;
    for (uint64_t k = 0; k < n_keys; k++) {
        spw_err_t ea = spw_ps_store_get_row(a, k, ra);
        spw_err_t eb = spw_ps_store_get_row(b, k, rb);
        assert_int_equal(ea, eb);
        if (ea == SPW_OK) {
            found++;
            assert_int_equal(ra->version, rb->version);
            assert_int_equal(ra->count, rb->count);
            assert_memory_equal(ra->data, rb->data, (dim * 3 + 1) * sizeof(float));
        }
    }
    assert_true(found > (int)n_keys / 2);
    free(ra);
    free(rb);
    spw_ps_store_close(a);
    spw_ps_store_close(b);
}

static void test_ps_store_spill_readback_identical(void **state)
{
    spill_readback_identical(*state, false);
    spill_readback_identical(*state, true);
}

/* The index is sized for the rows held, not for the whole budget: a store with a large budget
 * and few rows uses little memory, and the index keeps finding every row as it grows. */
static void test_ps_store_index_grows_with_rows(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    const uint32_t dim = 4;
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAGRAD, dim);
    c.memory_bytes = 256u << 20;
    spw_ps_store_t *s = open_ok(&c);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(s, &st);
    assert_true(st.rows_dram_max > 1000000);
    assert_true(st.bytes_dram < (64u << 10));
    enum { BATCH = 1000, N = 100000 };
    static uint64_t keys[BATCH];
    static float grads[BATCH * 4];
    for (int i = 0; i < BATCH * 4; i++)
        grads[i] = 0.01f * (float)(i % 7);
    for (uint64_t base = 0; base < N; base += BATCH) {
        for (int i = 0; i < BATCH; i++)
            keys[i] = (base + (uint64_t)i) * 0x9e3779b97f4a7c15ull;
        assert_int_equal(spw_ps_store_push(s, keys, BATCH, grads, NULL, NULL, NULL), SPW_OK);
        if (base == 0) {
            spw_ps_store_get_stats(s, &st);
            assert_true(st.bytes_dram < (512u << 10)); /* ~1000 rows, not the budget's index */
        }
    }
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.rows_dram, N);
    assert_int_equal(st.evictions, 0);
    /* rows plus an index of at most 8 bytes / (3/8 load) per row */
    assert_true(st.bytes_dram >= (uint64_t)N * st.row_bytes);
    assert_true(st.bytes_dram <= (uint64_t)N * (st.row_bytes + 22));
    size_t sz = sizeof(struct spw_ps_row_copy) + 2 * dim * sizeof(float);
    struct spw_ps_row_copy *row = malloc(sz);
    for (uint64_t k = 0; k < N; k++) {
        assert_int_equal(spw_ps_store_get_row(s, k * 0x9e3779b97f4a7c15ull, row), SPW_OK);
        assert_int_equal(row->version, 1);
    }
    assert_int_equal(spw_ps_store_get_row(s, 12345, row), SPW_ERR_NOT_FOUND);
    free(row);
    spw_ps_store_close(s);
}

/* Copies of every row of keys[0..n) (dim + 2·dim + 1 floats each, Adam). */
static struct spw_ps_row_copy **snapshot_rows(spw_ps_store_t *s, const uint64_t *keys, size_t n,
                                              uint32_t dim)
{
    size_t sz = sizeof(struct spw_ps_row_copy) + (3 * dim + 1) * sizeof(float);
    struct spw_ps_row_copy **rows = calloc(n, sizeof(*rows));
    for (size_t i = 0; i < n; i++) {
        rows[i] = malloc(sz);
        assert_int_equal(spw_ps_store_get_row(s, keys[i], rows[i]), SPW_OK);
    }
    return rows;
}

static void assert_rows_equal(spw_ps_store_t *s, const uint64_t *keys, size_t n, uint32_t dim,
                              struct spw_ps_row_copy **want)
{
    size_t sz = sizeof(struct spw_ps_row_copy) + (3 * dim + 1) * sizeof(float);
    struct spw_ps_row_copy *row = malloc(sz);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(spw_ps_store_get_row(s, keys[i], row), SPW_OK);
        assert_int_equal(row->version, want[i]->version);
        assert_int_equal(row->count, want[i]->count);
        assert_int_equal(row->last_update, want[i]->last_update);
        assert_memory_equal(row->data, want[i]->data, (3 * dim + 1) * sizeof(float));
    }
    free(row);
}

static void free_rows(struct spw_ps_row_copy **rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rows[i]);
    free(rows);
}

/* Flushes of many dirty rows go through SST files (in parts, on threads, several rounds when
 * spw_ps__flush_part_rows is small, several files per part when spw_ps__sst_file_rows is);
 * overwriting flushes must win over what RocksDB holds, for crowded keys (small integers) and
 * spread ones (hashes) alike; no file of a flush is left behind. */
/* Files of db_path named as a flush names its SST files before they are ingested. */
static int count_ingest_files(const char *db_path)
{
    DIR *d = opendir(db_path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, "SPARROW-INGEST-", 15) == 0;
    closedir(d);
    return n;
}

static void test_ps_store_large_flush_roundtrip(void **state)
{
    struct test_dir_fixture *fx = *state;
    const uint32_t dim = 3;
    enum { N = 3 * SPW_PS_SST_MIN_ROWS, BATCH = 1024 };
    static uint64_t keys[N];
    static float grads[BATCH * 3];
    size_t saved_part_rows = spw_ps__flush_part_rows, saved_file_rows = spw_ps__sst_file_rows;
    for (int variant = 0; variant < 3; variant++) {
        char p[128];
        struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAM, dim);
        c.memory_bytes = 64u << 20; /* every row stays in DRAM until a flush */
        for (size_t i = 0; i < N; i++)
            keys[i] = variant == 0 ? i : (i + 1) * 0xd6e8feb86659fd93ull;
        /* variant 1: parts of 5000 rows, so several rounds of FLUSH_THREADS parts; variant 2:
         * files of 1000 rows too, so several files per part (4 of 1250: the most a part takes) */
        spw_ps__flush_part_rows = variant == 0 ? saved_part_rows : 5000;
        spw_ps__sst_file_rows = variant == 2 ? 1000 : saved_file_rows;
        spw_ps_store_t *s = open_ok(&c);
        for (int round = 0; round < 3; round++) {
            for (size_t base = 0; base < N; base += BATCH) {
                size_t n = N - base < BATCH ? N - base : BATCH;
                for (size_t i = 0; i < n * dim; i++)
                    grads[i] = (float)((int)((base + i + (size_t)round * 7) % 13) - 6) / 8.0f;
                /* round 2 touches half the rows: a flush over rows RocksDB already holds */
                if (round == 2 && (base / BATCH) % 2)
                    continue;
                assert_int_equal(spw_ps_store_push(s, keys + base, n, grads, NULL, NULL, NULL),
                                 SPW_OK);
            }
            struct spw_ps_row_copy **want = snapshot_rows(s, keys, N, dim);
            struct spw_ps_store_stats before, after;
            spw_ps_store_get_stats(s, &before);
            assert_int_equal(spw_ps_store_flush(s), SPW_OK);
            spw_ps_store_get_stats(s, &after);
            assert_true(after.rows_db_written - before.rows_db_written >= N / 2);
            assert_int_equal(count_ingest_files(c.db_path), 0);
            /* closing flushes nothing more; reopening reads every row back from RocksDB */
            spw_ps_store_close(s);
            s = open_ok(&c);
            assert_rows_equal(s, keys, N, dim, want);
            spw_ps_store_get_stats(s, &after);
            assert_int_equal(after.db_reads, N);
            free_rows(want, N);
        }
        spw_ps_store_close(s);
    }
    spw_ps__flush_part_rows = saved_part_rows;
    spw_ps__sst_file_rows = saved_file_rows;
}

static void test_ps_store_admission(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 2);
    c.admit_min_count = 3;
    c.optim.lr = 1.0f;
    spw_ps_store_t *s = open_ok(&c);
    uint64_t key = 77;
    float init[2], v[2], g[2] = {1.0f, 1.0f};
    spw_ps__row_init(&c.optim, 2, 7, key, init);
    uint32_t ver = 5;
    assert_int_equal(spw_ps_store_pull(s, &key, 1, v, &ver), SPW_OK);
    assert_memory_equal(v, init, sizeof(v));
    assert_int_equal(ver, 0);
    size_t sz = sizeof(struct spw_ps_row_copy) + 2 * sizeof(float);
    struct spw_ps_row_copy *row = malloc(sz);
    assert_int_equal(spw_ps_store_get_row(s, key, row), SPW_ERR_NOT_FOUND);
    struct spw_ps_push_result r;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(spw_ps_store_push(s, &key, 1, g, NULL, NULL, &r), SPW_OK);
        assert_int_equal(r.unadmitted, 1);
        assert_int_equal(r.applied, 0);
    }
    assert_int_equal(spw_ps_store_get_row(s, key, row), SPW_ERR_NOT_FOUND);
    assert_int_equal(spw_ps_store_push(s, &key, 1, g, NULL, NULL, &r), SPW_OK);
    assert_int_equal(r.applied, 1);
    assert_int_equal(spw_ps_store_get_row(s, key, row), SPW_OK);
    assert_int_equal(row->version, 1);
    assert_float_equal(row->data[0], init[0] - 1.0f, 1e-6);
    free(row);
    spw_ps_store_close(s);
}

/* The counter key: starts at zero, adds its gradient's first value, no optimizer, no penalty
 * (even at a large tau under drop), rejects non-finite values; other keys train as usual. */
static void test_ps_store_counter_key(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAGRAD, 3);
    c.counter_key = 0x5eed;
    c.optim.init_scale = 0.1f;
    assert_int_equal(spw_ps_penalty_parse("drop:2", &c.penalty), SPW_OK);
    spw_ps_store_t *s = open_ok(&c);
    uint64_t keys[2] = {0x5eed, 42};
    float v[6];
    uint32_t ver[2];
    assert_int_equal(spw_ps_store_pull(s, keys, 2, v, ver), SPW_OK);
    assert_float_equal(v[0], 0.0, 0.0);
    assert_float_equal(v[1], 0.0, 0.0);
    const float w42 = v[3];
    float g[6] = {256, 0, 0, 0.5f, 0.5f, 0.5f};
    uint32_t stale[2] = {0, 0};
    struct spw_ps_push_result r;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(spw_ps_store_push(s, keys, 2, g, stale, NULL, &r), SPW_OK);
        assert_int_equal(r.applied + r.dropped_stale, 2);
    }
    /* far behind: key 42 is dropped by the penalty, the counter is not */
    assert_int_equal(spw_ps_store_push(s, keys, 2, g, stale, NULL, &r), SPW_OK);
    assert_int_equal(r.dropped_stale, 1);
    float bad[6] = {NAN, 0, 0, 0, 0, 0};
    assert_int_equal(spw_ps_store_push(s, keys, 1, bad, NULL, NULL, &r), SPW_OK);
    assert_int_equal(r.rejected, 1);
    assert_int_equal(spw_ps_store_pull(s, keys, 2, v, ver), SPW_OK);
    assert_float_equal(v[0], 11 * 256.0, 0.0);
    assert_float_equal(v[1], 0.0, 0.0);
    assert_true(v[3] < w42); /* key 42 trained (adagrad steps against its gradient) */
    spw_ps_store_close(s);
}

struct evicted {
    uint64_t keys[64];
    int n;
};

static void on_evict(void *opaque, uint64_t key, uint32_t version)
{
    struct evicted *ev = opaque;
    (void)version;
    if (ev->n < 64)
        ev->keys[ev->n++] = key;
}

static bool has_key(const struct evicted *ev, uint64_t key)
{
    for (int i = 0; i < ev->n; i++)
        if (ev->keys[i] == key)
            return true;
    return false;
}

/* Rows past their TTL go from every tier, each reported once: in DRAM, in the cold file (variant
 * 1, and variant 2 where a flush also put them in RocksDB) or in RocksDB alone (variant 0). */
static void ttl_expiry(struct test_dir_fixture *fx, int variant)
{
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 4);
    c.ttl_s = 10;
    c.memory_bytes = 16 * 1024; /* ~100 rows: most keys live outside DRAM */
    c.cold_off = variant == 0;
    struct evicted ev = {0};
    c.on_evict = on_evict;
    c.evict_opaque = &ev;
    spw_ps_store_t *s = open_ok(&c);
    float g[4] = {1, 1, 1, 1};
    spw_ps_store_set_now(s, 1000);
    for (uint64_t k = 0; k < 20; k++) /* old rows 0..19 */
        assert_int_equal(spw_ps_store_push(s, &k, 1, g, NULL, NULL, NULL), SPW_OK);
    spw_ps_store_set_now(s, 1005);
    for (uint64_t k = 1000; k < 2000; k++) /* newer rows push the old ones out of DRAM */
        assert_int_equal(spw_ps_store_push(s, &k, 1, g, NULL, NULL, NULL), SPW_OK);
    uint64_t hot = 3; /* a row updated recently stays */
    assert_int_equal(spw_ps_store_push(s, &hot, 1, g, NULL, NULL, NULL), SPW_OK);
    if (variant == 2)
        assert_int_equal(spw_ps_store_flush(s), SPW_OK);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(s, &st);
    assert_true(st.evictions > 0);
    /* a row lives in DRAM or in the cold file, never both */
    assert_int_equal(st.rows_cold + st.rows_dram, variant == 0 ? st.rows_dram : 1020);
    spw_ps_store_set_now(s, 1012);
    size_t total = 0, n;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(spw_ps_store_expire(s, 1000, &n), SPW_OK);
        total += n;
    }
    assert_int_equal(total, 19);
    assert_int_equal(ev.n, 19);
    size_t sz = sizeof(struct spw_ps_row_copy) + 4 * sizeof(float);
    struct spw_ps_row_copy *row = malloc(sz);
    for (uint64_t k = 0; k < 20; k++) {
        assert_int_equal(has_key(&ev, k), k != hot);
        assert_int_equal(spw_ps_store_get_row(s, k, row), k == hot ? SPW_OK : SPW_ERR_NOT_FOUND);
    }
    assert_int_equal(spw_ps_store_get_row(s, 1500, row), SPW_OK);
    free(row);
    spw_ps_store_close(s);
}

static void test_ps_store_ttl(void **state)
{
    for (int variant = 0; variant < 3; variant++)
        ttl_expiry(*state, variant);
}

/* A deep model's dense blocks (sparrow/hash.h): their rows start at zero, are admitted at the
 * first push whatever admit_min_count says, never expire, and step at optim.lr_dense. */
static void test_ps_store_dense_blocks(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 4);
    c.admit_min_count = 3;
    c.ttl_s = 10;
    c.optim.lr = 1.0f;
    c.optim.lr_dense = 0.1f;
    spw_ps_store_t *s = open_ok(&c);
    uint64_t key = spw_dense_block_key(5);
    float v[4] = {1, 1, 1, 1}, g[4] = {0.5f, 0.5f, 0.5f, 0.5f}, zero[4] = {0};
    assert_int_equal(spw_ps_store_pull(s, &key, 1, v, NULL), SPW_OK);
    assert_memory_equal(v, zero, sizeof(v));
    spw_ps_store_set_now(s, 1000);
    struct spw_ps_push_result r;
    assert_int_equal(spw_ps_store_push(s, &key, 1, g, NULL, NULL, &r), SPW_OK);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.unadmitted, 0);
    spw_ps_store_set_now(s, 5000);
    size_t n = 0;
    for (int i = 0; i < 10; i++)
        assert_int_equal(spw_ps_store_expire(s, 1000, &n), SPW_OK);
    size_t sz = sizeof(struct spw_ps_row_copy) + 4 * sizeof(float);
    struct spw_ps_row_copy *row = malloc(sz);
    assert_int_equal(spw_ps_store_get_row(s, key, row), SPW_OK);
    assert_float_equal(row->data[0], -0.05f, 1e-6);
    free(row);
    spw_ps_store_close(s);
}

/* A committed step's dense_lr_scale multiplies the dense blocks' rate only: an embedding row
 * of the same push steps at its own rate. */
static void test_ps_store_dense_lr_scale(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 2);
    c.optim.init_scale = 0.0f;
    c.optim.lr = 1.0f;
    c.optim.lr_dense = 0.1f;
    spw_ps_store_t *s = open_ok(&c);
    uint64_t keys[2] = {spw_dense_block_key(0), 77};
    float g[4] = {0.5f, 0.5f, 0.5f, 0.5f}, v[4];
    struct spw_ps_push_args args = {.n = 2, .keys = keys, .grads = g, .dense_lr_scale = 3.0f};
    struct spw_ps_push_result r;
    assert_int_equal(spw_ps_store_push_args(s, &args, &r), SPW_OK);
    assert_int_equal(r.applied, 2);
    assert_int_equal(spw_ps_store_pull(s, keys, 2, v, NULL), SPW_OK);
    assert_float_equal(v[0], -0.15f, 1e-6); /* 0.1 x 3 x 0.5 */
    assert_float_equal(v[1], -0.15f, 1e-6);
    assert_float_equal(v[2], -0.5f, 1e-6); /* 1.0 x 0.5, unscaled */
    assert_float_equal(v[3], -0.5f, 1e-6);
    args.dense_lr_scale = 0.0f; /* 0: the configured rate */
    assert_int_equal(spw_ps_store_push_args(s, &args, &r), SPW_OK);
    assert_int_equal(spw_ps_store_pull(s, keys, 2, v, NULL), SPW_OK);
    assert_float_equal(v[0], -0.2f, 1e-6);
    assert_float_equal(v[2], -1.0f, 1e-6);
    spw_ps_store_close(s);
}

static void test_ps_store_reopen_persists_and_checks_layout(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_FTRL, 3);
    spw_ps_store_t *s = open_ok(&c);
    uint64_t key = 42;
    float g[3] = {0.1f, -0.2f, 0.3f}, before[3], after[3];
    assert_int_equal(spw_ps_store_push(s, &key, 1, g, NULL, NULL, NULL), SPW_OK);
    assert_int_equal(spw_ps_store_pull(s, &key, 1, before, NULL), SPW_OK);
    spw_ps_store_close(s);
    s = open_ok(&c);
    uint32_t ver;
    assert_int_equal(spw_ps_store_pull(s, &key, 1, after, &ver), SPW_OK);
    assert_memory_equal(before, after, sizeof(before));
    assert_int_equal(ver, 1);
    spw_ps_store_close(s);
    c.dim = 4;
    char err[256] = "";
    assert_null(spw_ps_store_open(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "dim=3"));
}

/* Keys never written to RocksDB get their row without a RocksDB read; a row written there
 * (evicted, flushed) is read back, not created again; a store opened on a database that holds
 * rows reads RocksDB for every new key. */
static void new_keys_skip_lookups(struct test_dir_fixture *fx, bool cold_off)
{
    char p[128];
    const uint32_t dim = 2;
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAGRAD, dim);
    c.memory_bytes = 64 * 1024; /* a few hundred rows: pushes below evict */
    c.cold_off = cold_off;
    spw_ps_store_t *s = open_ok(&c);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(s, &st);
    const uint32_t n = (uint32_t)st.rows_dram_max * 4;
    uint64_t *keys = malloc(n * sizeof(uint64_t));
    float *g = malloc((size_t)n * dim * sizeof(float)),
          *v = malloc((size_t)n * dim * sizeof(float));
    uint32_t *ver = malloc(n * sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++) {
        keys[i] = spw_hash_mix64(i + 1);
        g[i * dim] = 0.5f;
        g[i * dim + 1] = -0.25f;
    }
    /* first push of every key: no row anywhere, none looked up in RocksDB until one was
     * written there */
    for (uint32_t off = 0; off < n; off += 64) {
        size_t m = n - off < 64 ? n - off : 64;
        assert_int_equal(spw_ps_store_push(s, keys + off, m, g + off * dim, NULL, NULL, NULL),
                         SPW_OK);
    }
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.rows_created, n);
    assert_int_equal(st.db_misses, n);
    assert_true(st.evictions > 0);
    assert_true(st.db_skipped > st.rows_dram_max); /* those before the first eviction at least */
    assert_true(st.db_skipped <= n);
    /* every key again: each row is found (DRAM, the cold file or RocksDB), once pushed, none
     * created anew */
    assert_int_equal(spw_ps_store_pull(s, keys, n, v, ver), SPW_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(ver[i], 1);
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.rows_created, n);
    assert_true((cold_off ? st.db_reads : st.cold_reads) > 0);
    assert_int_equal(cold_off ? st.cold_reads : st.db_reads, 0);
    spw_ps_store_close(s);

    /* reopened on a database with rows: the filter cannot know them, so nothing is skipped */
    s = open_ok(&c);
    uint64_t fresh = 0xabcdef;
    assert_int_equal(spw_ps_store_push(s, &fresh, 1, g, NULL, NULL, NULL), SPW_OK);
    assert_int_equal(spw_ps_store_pull(s, keys, 1, v, ver), SPW_OK);
    assert_int_equal(ver[0], 1);
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.db_skipped, 0);
    assert_int_equal(st.db_misses, 1);
    assert_int_equal(st.db_reads, 1); /* a new cold file is empty: the row came from RocksDB */
    spw_ps_store_close(s);
    free(keys);
    free(g);
    free(v);
    free(ver);
}

static void test_ps_store_new_keys_skip_rocksdb(void **state)
{
    new_keys_skip_lookups(*state, false);
    new_keys_skip_lookups(*state, true);
}

/* GCLOCK: with DRAM full, rows touched by several requests outlast rows touched once. A quarter
 * of the rows is pulled twice more (heat 3), then as many new keys as half the rows are pushed:
 * the evictions take rows touched once only, and the hot quarter is still in DRAM (pulling it
 * reads nothing from RocksDB). Under CLOCK's single reference bit the hand's second pass evicted
 * the hot quarter first, as it holds the first slots. */
static void test_ps_store_eviction_keeps_hot_rows(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    const uint32_t dim = 2;
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAGRAD, dim);
    c.memory_bytes = 64 * 1024;
    spw_ps_store_t *s = open_ok(&c);
    struct spw_ps_store_stats st0, st;
    spw_ps_store_get_stats(s, &st0);
    const uint32_t r = (uint32_t)st0.rows_dram_max, hot = r / 4, fresh = r / 2;
    assert_true(r >= 256);
    uint64_t *keys = malloc((size_t)(r + fresh) * sizeof(uint64_t));
    float *g = calloc((size_t)(r + fresh) * dim, sizeof(float));
    float *v = malloc((size_t)r * dim * sizeof(float));
    for (uint32_t i = 0; i < r + fresh; i++)
        keys[i] = spw_hash_mix64(i + 1);
    for (uint32_t off = 0; off < r; off += 32) /* DRAM full, every row touched once */
        assert_int_equal(
            spw_ps_store_push(s, keys + off, r - off < 32 ? r - off : 32, g, NULL, NULL, NULL),
            SPW_OK);
    for (int t = 0; t < 2; t++)
        assert_int_equal(spw_ps_store_pull(s, keys, hot, v, NULL), SPW_OK);
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.evictions, 0);
    for (uint32_t off = r; off < r + fresh; off += 32)
        assert_int_equal(spw_ps_store_push(s, keys + off,
                                           r + fresh - off < 32 ? r + fresh - off : 32, g, NULL,
                                           NULL, NULL),
                         SPW_OK);
    spw_ps_store_get_stats(s, &st0);
    assert_true(st0.evictions >= fresh);
    assert_int_equal(spw_ps_store_pull(s, keys, hot, v, NULL), SPW_OK);
    spw_ps_store_get_stats(s, &st);
    assert_int_equal(st.db_reads, st0.db_reads);
    assert_int_equal(st.rows_created, st0.rows_created);
    spw_ps_store_close(s);
    free(keys);
    free(g);
    free(v);
}

/* Pushed keys (a skewed draw, distinct per batch) over n keys. */
static void skewed_batch(uint64_t *rng, uint64_t *keys, uint32_t m, uint32_t n)
{
    for (uint32_t i = 0; i < m;) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(*rng >> 11) / 9007199254740992.0;
        uint64_t k = spw_hash_mix64((uint64_t)(u * u * u * n) + 1);
        bool dup = false;
        for (uint32_t j = 0; j < i && !dup; j++)
            dup = keys[j] == k;
        if (!dup)
            keys[i++] = k;
    }
}

/* A discarded store writes nothing: reopened, it holds what its last flush wrote, from DRAM and
 * from the cold file alike. */
static void test_ps_store_discard_keeps_last_flush(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_SGD, 2);
    c.memory_bytes = 16 * 1024; /* most of the 2000 rows in the cold file */
    spw_ps_store_t *s = open_ok(&c);
    enum { N = 2000 };
    static uint64_t keys[N];
    static float g[N * 2], v[N * 2], want[N * 2];
    for (uint32_t i = 0; i < N; i++) {
        keys[i] = i + 1;
        g[2 * i] = 0.5f;
        g[2 * i + 1] = -0.25f;
    }
    assert_int_equal(spw_ps_store_push(s, keys, N, g, NULL, NULL, NULL), SPW_OK);
    assert_int_equal(spw_ps_store_flush(s), SPW_OK);
    assert_int_equal(spw_ps_store_pull(s, keys, N, want, NULL), SPW_OK);
    assert_int_equal(spw_ps_store_push(s, keys, N, g, NULL, NULL, NULL), SPW_OK);
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(s, &st);
    assert_true(st.rows_cold > N / 2);
    spw_ps_store_discard(s);
    s = open_ok(&c);
    assert_int_equal(spw_ps_store_pull(s, keys, N, v, NULL), SPW_OK);
    assert_memory_equal(v, want, sizeof(v));
    spw_ps_store_close(s);
    spw_ps_store_discard(NULL);
}

/* Descriptors open in this process (entries of /proc/self/fd, the listing's own included). */
static size_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    size_t n = 0;
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* The cold file's tables against a plain array: random puts, finds and deletes over a key range
 * crowded enough for long probe runs (so deletions shift records back) and for growths of the
 * segments. */
static void test_ps_store_cold_file_table(void **state)
{
    struct test_dir_fixture *fx = *state;
    enum { KEYS = 120000, OPS = 400000 };
    const size_t stride = SPW_PS_ROW_HDR + 8;
    char prefix[256], path[300], err[256] = "";
    snprintf(prefix, sizeof(prefix), "%s/cold", fx->dir);
    struct spw_ps__cold c;
    size_t fds = open_fds();
    assert_int_equal(spw_ps__cold_open(&c, prefix, stride, 0, err, sizeof(err)), SPW_OK);
    assert_int_equal(open_fds(), fds); /* the mappings hold the files, no descriptors */
    assert_int_equal(c.bytes, (uint64_t)SPW_PS_COLD_SEGS * 1024 * stride); /* 1024 per segment */
    static uint32_t value[KEYS]; /* 0: absent; else the record's version */
    static uint8_t dirty[KEYS];
    memset(value, 0, sizeof(value));
    uint64_t n = 0, n_dirty = 0, rng = 11;
    uint8_t buf[SPW_PS_ROW_HDR + 8] = {0};
    struct spw_ps_row *row = (struct spw_ps_row *)buf;
    for (uint32_t op = 1; op <= OPS; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t k = (uint32_t)(rng >> 33) % KEYS;
        uint64_t key = (uint64_t)k * 0x10000 + 7; /* keys equal modulo small powers of two */
        struct spw_ps__cold_pos at;
        bool found = spw_ps__cold_find(&c, key, &at);
        assert_int_equal(found, value[k] != 0);
        if (found) {
            const struct spw_ps_row *r = spw_ps__cold_rec(&c, at);
            assert_int_equal(r->version, value[k]);
            assert_int_equal(r->flags, SPW_PS_COLD_FULL | (dirty[k] ? SPW_PS_ROW_DIRTY : 0));
        }
        /* deletes while the table fills, then as many as puts */
        if (found && (rng >> 20) % 3 == 0) {
            spw_ps__cold_delete_at(&c, at);
            n--;
            n_dirty -= dirty[k];
            value[k] = 0;
        } else if ((rng >> 24) % 2 == 0) {
            row->key = key;
            row->version = op;
            row->flags = ((rng >> 40) & 1) ? SPW_PS_ROW_DIRTY | SPW_PS_ROW_PIN : 0;
            assert_int_equal(spw_ps__cold_put(&c, row), SPW_OK);
            n += value[k] == 0;
            if (value[k] != 0)
                n_dirty -= dirty[k];
            n_dirty += (row->flags & SPW_PS_ROW_DIRTY) != 0;
            value[k] = op;
            dirty[k] = (row->flags & SPW_PS_ROW_DIRTY) != 0;
        }
        assert_int_equal(c.n, n);
        assert_int_equal(c.n_dirty, n_dirty);
        if (op % 20000 == 0) { /* the dirty bitmaps name exactly the dirty records */
            uint64_t seen = 0;
            for (struct spw_ps__cold_pos d = {0}; spw_ps__cold_next_dirty(&c, &d); d.idx++, seen++)
                assert_int_equal(spw_ps__cold_rec(&c, d)->flags,
                                 SPW_PS_COLD_FULL | SPW_PS_ROW_DIRTY);
            assert_int_equal(seen, n_dirty);
        }
    }
    assert_true(c.grows >= 8);
    for (uint32_t g = 0; g < SPW_PS_COLD_SEGS; g++)
        assert_true(c.seg[g].n * 10 <= c.seg[g].cap * 7);
    for (uint32_t k = 0; k < KEYS; k++) {
        struct spw_ps__cold_pos at;
        assert_int_equal(spw_ps__cold_find(&c, (uint64_t)k * 0x10000 + 7, &at), value[k] != 0);
    }
    spw_ps__cold_close(&c);
    for (uint32_t g = 0; g < SPW_PS_COLD_SEGS; g++) { /* removed at close */
        snprintf(path, sizeof(path), "%s-%02u.rows", prefix, g);
        assert_int_equal(access(path, F_OK), -1);
    }
}

enum cold_tier {
    TIER_COLD_FILE,    /* evicted rows in the cold file, growing from its first size */
    TIER_SST,          /* no cold file: in RocksDB */
    TIER_FILE_NO_GROW, /* the cold file cannot grow: rows beyond it go to RocksDB */
};

/* The cold tiers: rows evicted and read back by pushes alone and by pulls then pushes keep their
 * values, optimizer state, version, count and last update exactly, against a store holding
 * every row in DRAM; so do all rows after a close (flush) and reopen. TIER_SST goes through
 * RocksDB's table files (the model is larger than the memtables), with the options
 * spw_ps__db_options sets (one restart point per row, hashed block index, no block cache).
 * TIER_COLD_FILE flushes halfway too (a checkpoint: its dirty records become clean, and the
 * pushes after it dirty them again), so that the reopen reads rows from both flushes. */
static void cold_tier_readback_exact(struct test_dir_fixture *fx, enum cold_tier tier)
{
    char p1[128], p2[128];
    const uint32_t dim = 16, n_keys = 80000, batch = 1024;
    struct spw_ps_store_conf small = base_conf(fx, p1, sizeof(p1), SPW_PS_ADAGRAD, dim);
    small.memory_bytes = n_keys * (SPW_PS_ROW_HDR + 2 * dim * sizeof(float)) / 10;
    small.cold_off = tier == TIER_SST;
    if (tier == TIER_FILE_NO_GROW) { /* a directory where each grown segment would be made */
        char grow[256];
        assert_int_equal(spw_fs_mkdir_p(p1), SPW_OK);
        for (uint32_t g = 0; g < SPW_PS_COLD_SEGS; g++) {
            snprintf(grow, sizeof(grow), "%s/SPARROW-COLD-%02u.rows.grow", p1, g);
            assert_int_equal(mkdir(grow, 0755), 0);
        }
    }
    struct spw_ps_store_conf big = base_conf(fx, p2, sizeof(p2), SPW_PS_ADAGRAD, dim);
    big.memory_bytes = 64u << 20;
    spw_ps_store_t *a = open_ok(&small), *b = open_ok(&big);
    spw_ps_store_set_now(a, 1000);
    spw_ps_store_set_now(b, 1000);
    uint64_t *keys = malloc(n_keys * sizeof(uint64_t));
    float *g = malloc((size_t)batch * dim * sizeof(float));
    float *va = malloc((size_t)batch * dim * sizeof(float));
    float *vb = malloc((size_t)batch * dim * sizeof(float));
    uint32_t *vera = malloc(batch * sizeof(uint32_t)), *verb = malloc(batch * sizeof(uint32_t));
    for (uint32_t i = 0; i < batch * dim; i++)
        g[i] = (float)((int)(i * 7919 % 1000) - 500) / 1000.0f;
    /* every key once, so that most rows live in RocksDB's table files */
    for (uint32_t i = 0; i < n_keys; i++)
        keys[i] = spw_hash_mix64(i + 1);
    for (uint32_t off = 0; off < n_keys; off += batch) {
        uint32_t m = n_keys - off < batch ? n_keys - off : batch;
        assert_int_equal(spw_ps_store_push(a, keys + off, m, g, NULL, NULL, NULL), SPW_OK);
        assert_int_equal(spw_ps_store_push(b, keys + off, m, g, NULL, NULL, NULL), SPW_OK);
    }
    assert_true(spw_ps__store_wait_idle(a, 60000)); /* the memtables' flushes done */
    char *sst = spw_ps__store_property(a, "rocksdb.live-sst-files-size");
    assert_non_null(sst);
    if (tier == TIER_SST)
        assert_true(strtoull(sst, NULL, 10) > (4u << 20));
    else if (tier == TIER_FILE_NO_GROW) { /* the rows beyond the full segments: in RocksDB */
        char *keys_db = spw_ps__store_property(a, "rocksdb.estimate-num-keys");
        assert_non_null(keys_db);
        assert_true(strtoull(keys_db, NULL, 10) > 10000);
        free(keys_db);
    } else
        assert_int_equal(strtoull(sst, NULL, 10), 0); /* nothing written there yet */
    free(sst);
    struct spw_ps_store_stats st0, st;
    spw_ps_store_get_stats(a, &st0);
    if (tier == TIER_COLD_FILE) /* grown from 64 x 1024 records to hold the evicted rows */
        assert_true(st0.rows_cold > n_keys / 2 && st0.bytes_cold > 65536u * st0.row_bytes);
    if (tier == TIER_FILE_NO_GROW) /* every segment full at 7/10 of its 1024 records */
        assert_int_equal(st0.rows_cold, SPW_PS_COLD_SEGS * (1024u * 7 / 10));
    uint64_t rng = 3;
    for (int round = 0; round < 60; round++) {
        if (tier == TIER_COLD_FILE && round == 30)
            assert_int_equal(spw_ps_store_flush(a), SPW_OK);
        spw_ps_store_set_now(a, 1001 + (uint32_t)round);
        spw_ps_store_set_now(b, 1001 + (uint32_t)round);
        skewed_batch(&rng, keys, batch, n_keys);
        for (uint32_t i = 0; i < batch * dim; i++)
            g[i] = -g[i] * 0.9f;
        if (round % 2 == 0) { /* pushes alone: the push's own lookups read the misses */
            assert_int_equal(spw_ps_store_push(a, keys, batch, g, NULL, NULL, NULL), SPW_OK);
            assert_int_equal(spw_ps_store_push(b, keys, batch, g, NULL, NULL, NULL), SPW_OK);
            continue;
        }
        assert_int_equal(spw_ps_store_pull(a, keys, batch, va, vera), SPW_OK);
        assert_int_equal(spw_ps_store_pull(b, keys, batch, vb, verb), SPW_OK);
        assert_memory_equal(va, vb, (size_t)batch * dim * sizeof(float));
        assert_memory_equal(vera, verb, batch * sizeof(uint32_t));
        assert_int_equal(spw_ps_store_push(a, keys, batch, g, vera, NULL, NULL), SPW_OK);
        assert_int_equal(spw_ps_store_push(b, keys, batch, g, verb, NULL, NULL), SPW_OK);
    }
    spw_ps_store_get_stats(a, &st);
    assert_true(st.evictions - st0.evictions > 10000);
    if (tier == TIER_COLD_FILE) {
        assert_true(st.cold_reads - st0.cold_reads > 10000);
        assert_int_equal(st.db_reads, 0);
        assert_int_equal(st.rows_cold + st.rows_dram, n_keys);
    } else {
        assert_true(st.db_reads - st0.db_reads > (tier == TIER_SST ? 10000 : 1000));
    }
    size_t sz = sizeof(struct spw_ps_row_copy) + 2 * dim * sizeof(float);
    struct spw_ps_row_copy *ra = malloc(sz), *rb = malloc(sz);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* every row from RocksDB after the close's flush */
            spw_ps_store_close(a);
            a = open_ok(&small);
            spw_ps_store_get_stats(a, &st);
            /* a new file, sized at open for the rows beyond DRAM (it need not grow) */
            assert_int_equal(st.rows_cold, 0);
            if (tier == TIER_COLD_FILE)
                assert_true(st.bytes_cold * 7 >= (n_keys - st.rows_dram_max) * 10 * st.row_bytes);
        }
        for (uint32_t i = 0; i < n_keys; i++) {
            uint64_t k = spw_hash_mix64(i + 1);
            assert_int_equal(spw_ps_store_get_row(a, k, ra), SPW_OK);
            assert_int_equal(spw_ps_store_get_row(b, k, rb), SPW_OK);
            assert_int_equal(ra->version, rb->version);
            assert_int_equal(ra->count, rb->count);
            assert_int_equal(ra->last_update, rb->last_update);
            assert_memory_equal(ra->data, rb->data, 2 * dim * sizeof(float));
        }
    }
    free(ra);
    free(rb);
    spw_ps_store_close(a);
    spw_ps_store_close(b);
    free(keys);
    free(g);
    free(va);
    free(vb);
    free(vera);
    free(verb);
}

static void test_ps_store_cold_tier_readback_exact(void **state)
{
    cold_tier_readback_exact(*state, TIER_COLD_FILE);
    cold_tier_readback_exact(*state, TIER_SST);
    cold_tier_readback_exact(*state, TIER_FILE_NO_GROW);
}

/* The shard database's options, as RocksDB persisted them: the memtable insert hint (applied
 * through an options string) is there, and applying it kept the table options set before it
 * (bloom filters, XXH3 checksums, one restart point per row, the hash ratio, no block cache). */
static void test_ps_store_db_options_insert_hint(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p[128];
    struct spw_ps_store_conf c = base_conf(fx, p, sizeof(p), SPW_PS_ADAGRAD, 4);
    spw_ps_store_t *s = open_ok(&c);
    DIR *d = opendir(p);
    assert_non_null(d);
    char name[512] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) /* the newest OPTIONS file: highest number */
        if (strncmp(e->d_name, "OPTIONS-", 8) == 0 &&
            (!name[0] || strtoull(e->d_name + 8, NULL, 10) > strtoull(name + 8, NULL, 10)))
            snprintf(name, sizeof(name), "%s", e->d_name);
    closedir(d);
    assert_true(name[0] != '\0');
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", p, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(
        strstr(text, "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.0"));
    assert_non_null(strstr(text, "bloomfilter"));
    assert_non_null(strstr(text, "checksum=kXXH3"));
    assert_non_null(strstr(text, "allow_mmap_reads=true"));
    assert_non_null(strstr(text, " block_restart_interval=1\n"));
    assert_non_null(strstr(text, "data_block_hash_table_util_ratio=0.250000"));
    assert_non_null(strstr(text, "no_block_cache=true"));
    spw_ps_store_close(s);
}

/* spw_ps_store_slab_ahead: page-aligned ranges of the slab, each after the last, none while no
 * row is created or once the slab is used up; populating them (MADV_POPULATE_WRITE) changes no
 * row: the store pulls what a store left alone pulls. */
static void test_ps_store_slab_ahead(void **state)
{
    struct test_dir_fixture *fx = *state;
    char p1[128], p2[128];
    struct spw_ps_store_conf c1 = base_conf(fx, p1, sizeof(p1), SPW_PS_ADAGRAD, 8);
    struct spw_ps_store_conf c2 = base_conf(fx, p2, sizeof(p2), SPW_PS_ADAGRAD, 8);
    spw_ps_store_t *a = open_ok(&c1), *b = open_ok(&c2);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct spw_ps_slab_range r0, r1, r;
    spw_ps_store_slab_ahead(a, &r0);
    assert_true(r0.len > 0);
    assert_int_equal((uintptr_t)r0.addr % page, 0);
    assert_int_equal(r0.len % page, 0);
    spw_ps_store_slab_ahead(a, &r);
    assert_int_equal(r.len, 0); /* nothing created since: nothing new ahead */
    enum { N = 4096 };
    static uint64_t keys[N];
    static float va[N * 8], vb[N * 8];
    uint64_t next = 1;
    struct spw_ps_store_stats st;
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < N; i++)
            keys[i] = spw_hash_mix64(next++);
        assert_int_equal(spw_ps_store_pull(a, keys, N, va, NULL), SPW_OK);
        assert_int_equal(spw_ps_store_pull(b, keys, N, vb, NULL), SPW_OK);
        assert_memory_equal(va, vb, sizeof(va));
        spw_ps_store_slab_ahead(a, &r1);
        if (round == 0) { /* the first rows were written into r0: the next range follows it */
            assert_true(r1.len > 0);
            assert_ptr_equal(r1.addr, (char *)r0.addr + r0.len);
        }
        if (r1.len) {
            assert_int_equal((uintptr_t)r1.addr % page, 0);
            assert_int_equal(r1.len % page, 0);
#ifdef MADV_POPULATE_WRITE
            int rc = madvise(r1.addr, r1.len, MADV_POPULATE_WRITE);
            assert_true(rc == 0 || errno == EINVAL); /* EINVAL: a kernel before 5.14 */
#endif
        }
        spw_ps_store_get_stats(a, &st);
        if (st.evictions > 0)
            break; /* the slab is used up */
    }
    assert_true(st.evictions > 0);
    spw_ps_store_slab_ahead(a, &r);
    assert_int_equal(r.len, 0);
    /* the rows written before the ranges were populated read back as the other store's */
    for (size_t i = 0; i < N; i++)
        keys[i] = spw_hash_mix64(next - N + i);
    assert_int_equal(spw_ps_store_pull(a, keys, N, va, NULL), SPW_OK);
    assert_int_equal(spw_ps_store_pull(b, keys, N, vb, NULL), SPW_OK);
    assert_memory_equal(va, vb, sizeof(va));
    spw_ps_store_close(a);
    spw_ps_store_close(b);
}

SPW_TEST_MAIN_EACH(test_fixture_setup, test_fixture_teardown, test_ps_store_pull_init_deterministic,
                   test_ps_store_push_versions_and_staleness, test_ps_store_penalties_through_store,
                   test_ps_store_nonfinite_rejected, test_ps_store_spill_readback_identical,
                   test_ps_store_index_grows_with_rows, test_ps_store_large_flush_roundtrip,
                   test_ps_store_admission, test_ps_store_counter_key, test_ps_store_ttl,
                   test_ps_store_dense_blocks, test_ps_store_dense_lr_scale,
                   test_ps_store_reopen_persists_and_checks_layout,
                   test_ps_store_db_options_insert_hint, test_ps_store_new_keys_skip_rocksdb,
                   test_ps_store_cold_tier_readback_exact, test_ps_store_cold_file_table,
                   test_ps_store_discard_keeps_last_flush, test_ps_store_eviction_keeps_hot_rows,
                   test_ps_store_slab_ahead)
