/* Unit tests of the PS client's in-process transport against spw_ps_store_t shards (round trip,
 * staleness, slicing over several stores, fp16), its slicer, and its configuration rows. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_client_int.h"
#include "sparrow/fs.h"
#include "sparrow/hash.h"

enum { DIM = 3 };

struct env {
    char root[64];
    spw_ps_store_t *stores[3];
    uint32_t n;
};

static void open_stores(struct env *e, uint32_t n, enum spw_ps_penalty_kind penalty)
{
    for (uint32_t s = 0; s < n; s++) {
        char path[128], err[256];
        snprintf(path, sizeof(path), "%s/db-%u", e->root, s);
        struct spw_ps_store_conf sc = {0};
        sc.shard = s;
        sc.dim = DIM;
        spw_ps_optim_conf_default(&sc.optim);
        sc.optim.kind = SPW_PS_SGD;
        sc.optim.lr = 1.0f;
        sc.optim.init_scale = 0.0f;
        sc.penalty.kind = penalty;
        sc.penalty.lambda = 0.5; /* read by SPW_PS_PENALTY_DC only */
        sc.memory_bytes = 1u << 20;
        sc.db_path = path;
        e->stores[s] = spw_ps_store_open(&sc, err, sizeof(err));
        if (!e->stores[s])
            fail_msg("store: %s", err);
    }
    e->n = n;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->root, sizeof(e->root), "/tmp/test_psc_inproc.XXXXXX");
    if (!mkdtemp(e->root))
        return -1;
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    for (uint32_t s = 0; s < e->n; s++)
        spw_ps_store_close(e->stores[s]);
    spw_fs_remove_tree(e->root);
    free(e);
    return 0;
}

static spw_ps_client_t *new_client(struct env *e, spw_metrics_t *metrics)
{
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = DIM;
    conf.stores = e->stores;
    conf.n_stores = e->n;
    conf.trainer_id = 3;
    conf.metrics = metrics;
    char err[256] = "";
    spw_ps_client_t *c = spw_ps_client_new(&conf, err, sizeof(err));
    if (!c)
        fail_msg("client: %s", err);
    return c;
}

static void pull(spw_ps_client_t *c, const uint64_t *keys, size_t n, float *rows, uint32_t *vers)
{
    uint64_t token = 0;
    assert_int_equal(spw_ps_client_pull_start(c, keys, n, rows, vers, &token), SPW_OK);
    assert_int_equal(spw_ps_client_pull_wait(c, token, 0), SPW_OK);
}

static void test_psc_inproc_round_trip(void **state)
{
    struct env *e = *state;
    open_stores(e, 1, SPW_PS_PENALTY_NONE);
    spw_ps_client_t *c = new_client(e, NULL);
    assert_int_equal(spw_ps_client_shards(c), 1);
    uint64_t keys[4] = {50, 30, 90, 30};
    float rows[4 * DIM];
    uint32_t vers[4];
    memset(rows, 0xff, sizeof(rows));
    pull(c, keys, 4, rows, vers);
    for (int i = 0; i < 4 * DIM; i++)
        assert_true(rows[i] == 0.0f);
    for (int i = 0; i < 4; i++)
        assert_int_equal(vers[i], 0);

    uint64_t pk[2] = {90, 30};
    float g[2 * DIM] = {1, 2, 3, 4, 5, 6};
    uint32_t pv[2] = {0, 0};
    struct spw_ps_push p = {.n = 2, .keys = pk, .grads = g, .versions = pv};
    uint64_t seq = 0;
    assert_int_equal(spw_ps_client_push(c, &p, &seq), SPW_OK);
    assert_int_equal(seq, 1);
    assert_int_equal(spw_ps_client_next_seq(c), 2);
    assert_int_equal(spw_ps_client_outstanding(c), 0);
    assert_int_equal(spw_ps_client_flush(c, 0), SPW_OK);
    pull(c, keys, 4, rows, vers);
    float want[4][DIM] = {{0, 0, 0}, {-4, -5, -6}, {-1, -2, -3}, {-4, -5, -6}};
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < DIM; d++)
            assert_true(rows[i * DIM + d] == want[i][d]);
    assert_int_equal(vers[0], 0);
    assert_int_equal(vers[1], 1);
    assert_int_equal(vers[2], 1);
    assert_int_equal(vers[3], 1);
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    assert_int_equal(st.pushes, 1);
    assert_int_equal(st.pushes_acked, 1);
    assert_int_equal(st.rows_applied, 2);
    assert_int_equal(st.pulls, 2);
    assert_int_equal(st.rows_pulled, 6); /* 3 unique keys twice */

    /* Duplicate keys in a push are refused; nothing is applied. */
    uint64_t dk[3] = {7, 8, 7};
    float dg[3 * DIM] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    struct spw_ps_push d = {.n = 3, .keys = dk, .grads = dg};
    assert_int_equal(spw_ps_client_push(c, &d, NULL), SPW_ERR_INVALID);
    struct spw_ps_push none = {.n = 1, .keys = dk};
    assert_int_equal(spw_ps_client_push(c, &none, NULL), SPW_ERR_INVALID);
    assert_int_equal(spw_ps_client_next_seq(c), 2);
    spw_ps_client_get_stats(c, &st);
    assert_int_equal(st.rows_applied, 2);
    spw_ps_client_destroy(c);
}

static void test_psc_inproc_staleness_versions(void **state)
{
    struct env *e = *state;
    open_stores(e, 1, SPW_PS_PENALTY_INVERSE);
    spw_ps_client_t *c = new_client(e, NULL);
    uint64_t k = 42;
    float row[DIM];
    uint32_t v;
    pull(c, &k, 1, row, &v);
    assert_int_equal(v, 0);
    float g[DIM] = {2, 4, 8};
    /* Two gradients computed from version 0: the second is one update stale, alpha 1/2. */
    struct spw_ps_push p = {.n = 1, .keys = &k, .grads = g, .versions = &v};
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    pull(c, &k, 1, row, &v);
    assert_int_equal(v, 2);
    assert_true(row[0] == -3.0f);
    assert_true(row[1] == -6.0f);
    assert_true(row[2] == -12.0f);
    /* A fresh version is not penalised. */
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    float r2[DIM];
    pull(c, &k, 1, r2, &v);
    assert_true(r2[0] == -5.0f);
    assert_int_equal(v, 3);
    spw_ps_client_destroy(c);
}

/* spw_ps_push.pulled reaches an in-process dc shard (f32 and fp16): the stale push is corrected,
 * g' = g + 0.5 g^2 (w_now - w_pulled), SGD lr 1. */
static void test_psc_inproc_pulled_dc(void **state)
{
    struct env *e = *state;
    open_stores(e, 1, SPW_PS_PENALTY_DC);
    spw_ps_client_t *c = new_client(e, NULL);
    for (int fp16 = 0; fp16 <= 1; fp16++) {
        uint64_t k = 42 + (uint64_t)fp16;
        float row[DIM];
        uint32_t v0;
        pull(c, &k, 1, row, &v0);
        const float pulled[DIM] = {row[0], row[1], row[2]}; /* zeros */
        float g0[DIM] = {1, 0, 0};
        struct spw_ps_push p = {.n = 1, .keys = &k, .grads = g0, .versions = &v0, .fp16 = fp16};
        assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK); /* w = (-1, 0, 0) */
        float g1[DIM] = {1, 1, 0};
        p.grads = g1;
        p.pulled = pulled; /* tau 1: (1 + 0.5*(-1), 1 + 0, 0) = (0.5, 1, 0) */
        assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
        uint32_t v;
        pull(c, &k, 1, row, &v);
        assert_int_equal(v, 2);
        assert_float_equal(row[0], -1.5, 1e-6);
        assert_float_equal(row[1], -1.0, 1e-6);
        assert_float_equal(row[2], 0.0, 1e-6);
    }
    struct spw_ps_store_stats st;
    spw_ps_store_get_stats(e->stores[0], &st);
    assert_int_equal(st.dc_corrected, 2);
    assert_int_equal(st.dc_uncorrected, 0);
    spw_ps_client_destroy(c);
}

static uint64_t key_of(uint64_t i)
{
    return spw_hash_mix64(i + 77);
}

static void test_psc_inproc_three_stores_sliced(void **state)
{
    struct env *e = *state;
    open_stores(e, 3, SPW_PS_PENALTY_NONE);
    spw_metrics_t *reg = spw_metrics_new();
    spw_ps_client_t *c = new_client(e, reg);
    enum { N = 500 };
    uint64_t *keys = malloc(N * sizeof(uint64_t));
    float *g = malloc((size_t)N * DIM * sizeof(float));
    for (int i = 0; i < N; i++) {
        keys[i] = key_of((uint64_t)i);
        for (int d = 0; d < DIM; d++)
            g[i * DIM + d] = (float)(i % 50) + 0.5f * (float)d;
    }
    struct spw_ps_push p = {.n = N, .keys = keys, .grads = g};
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    struct spw_ps_row_copy *row = malloc(sizeof(*row) + 16 * sizeof(float));
    uint32_t per[3] = {0};
    for (int i = 0; i < N; i++) {
        uint32_t s = spw_hash_shard(keys[i], 3);
        per[s]++;
        for (uint32_t t = 0; t < 3; t++)
            assert_int_equal(spw_ps_store_get_row(e->stores[t], keys[i], row),
                             t == s ? SPW_OK : SPW_ERR_NOT_FOUND);
        assert_true(row->data[1] == -g[i * DIM + 1]);
    }
    for (int s = 0; s < 3; s++)
        assert_true(per[s] > N / 6);
    /* Pull back in reverse order. */
    uint64_t *rk = malloc(N * sizeof(uint64_t));
    for (int i = 0; i < N; i++)
        rk[i] = keys[N - 1 - i];
    float *rows = malloc((size_t)N * DIM * sizeof(float));
    uint32_t *vers = malloc(N * sizeof(uint32_t));
    pull(c, rk, N, rows, vers);
    for (int i = 0; i < N; i++) {
        for (int d = 0; d < DIM; d++)
            assert_true(rows[i * DIM + d] == -g[(N - 1 - i) * DIM + d]);
        assert_int_equal(vers[i], 1);
    }
    size_t len;
    char *text = spw_metrics_render(reg, &len);
    assert_non_null(strstr(text, "sparrow_trainer_ps_rows_total{op=\"push\"} 500"));
    assert_non_null(strstr(text, "sparrow_trainer_ps_rows_total{op=\"pull\"} 500"));
    free(text);
    free(rows);
    free(vers);
    free(rk);
    free(row);
    free(keys);
    free(g);
    spw_ps_client_destroy(c);
    spw_metrics_destroy(reg);
}

static void test_psc_inproc_fp16_rounded(void **state)
{
    struct env *e = *state;
    open_stores(e, 2, SPW_PS_PENALTY_NONE);
    spw_ps_client_t *c = new_client(e, NULL);
    uint64_t keys[8];
    float g[8 * DIM];
    for (int i = 0; i < 8; i++) {
        keys[i] = key_of(1000 + (uint64_t)i);
        for (int d = 0; d < DIM; d++)
            g[i * DIM + d] = 0.1f + 1.0f / (float)(3 + i + d);
    }
    struct spw_ps_push p = {.n = 8, .keys = keys, .grads = g, .fp16 = true};
    assert_int_equal(spw_ps_client_push(c, &p, NULL), SPW_OK);
    float rows[8 * DIM];
    pull(c, keys, 8, rows, NULL);
    int differs = 0;
    for (int i = 0; i < 8 * DIM; i++) {
        float r = spw_wire_f16_to_f32(spw_wire_f32_to_f16(g[i]));
        assert_true(rows[i] == -r);
        differs += r != g[i];
    }
    assert_true(differs > 0);
    spw_ps_client_destroy(c);
}

/* st holds keys[0..n) sorted by (shard of 5, key, pos), each position once. */
static void assert_sliced(const struct spw_psc__sorter *st, const uint64_t *keys, size_t n)
{
    assert_int_equal(st->seg[0], 0);
    assert_int_equal(st->seg[5], n);
    uint8_t *seen = calloc(n + 1, 1);
    for (uint32_t s = 0; s < 5; s++) {
        for (uint32_t j = st->seg[s]; j < st->seg[s + 1]; j++) {
            const struct spw_psc__ent *x = &st->a[j];
            assert_int_equal(spw_hash_shard(x->key, 5), s);
            assert_int_equal(keys[x->pos], x->key);
            assert_false(seen[x->pos]);
            seen[x->pos] = 1;
            if (j > st->seg[s]) {
                const struct spw_psc__ent *y = &st->a[j - 1];
                assert_true(y->key < x->key || (y->key == x->key && y->pos < x->pos));
            }
        }
    }
    free(seen);
}

static void test_psc_slice_sorted_by_shard_and_key(void **state)
{
    (void)state;
    struct spw_psc__sorter st;
    assert_int_equal(spw_psc__sorter_init(&st, 5), SPW_OK);
    enum { N = 3000 };
    uint64_t *keys = malloc(N * sizeof(uint64_t));
    for (int round = 0; round < 5; round++) {
        size_t n = round == 0 ? 0 : round == 1 ? 7 : N;
        for (size_t i = 0; i < n; i++) {
            if (round <= 2) /* hashed keys with duplicates, and small keys */
                keys[i] = i % 3 == 0 ? key_of(i / 2) : (uint64_t)(i % 17);
            else if (round == 3) /* one key N times */
                keys[i] = 12345;
            else /* descending, equal in their low bytes */
                keys[i] = (uint64_t)(N - i) << 20;
        }
        assert_int_equal(spw_psc__slice(&st, keys, n), SPW_OK);
        assert_sliced(&st, keys, n);
    }
    free(keys);
    spw_psc__sorter_fini(&st);
}

/* A slice of the last call's keys keeps its result (a step's push after its pull); a key changed
 * in place, a shorter or longer list, or other keys in between are sorted again. */
static void test_psc_slice_reuses_the_last_sort(void **state)
{
    (void)state;
    struct spw_psc__sorter st;
    assert_int_equal(spw_psc__sorter_init(&st, 5), SPW_OK);
    enum { N = 2000 };
    uint64_t *keys = malloc(N * sizeof(uint64_t)), *copy = malloc(N * sizeof(uint64_t));
    for (size_t i = 0; i < N; i++)
        keys[i] = key_of(i % 700);
    memcpy(copy, keys, N * sizeof(uint64_t));
    assert_int_equal(spw_psc__slice(&st, keys, N), SPW_OK);
    assert_true(st.last_valid);
    assert_int_equal(spw_psc__slice(&st, copy, N), SPW_OK); /* equal keys, another buffer */
    assert_true(st.last_valid);
    assert_sliced(&st, copy, N);

    keys[N / 2] = key_of(5000); /* changed in place: the same buffer, other contents */
    assert_int_equal(spw_psc__slice(&st, keys, N), SPW_OK);
    assert_sliced(&st, keys, N);
    assert_int_equal(spw_psc__slice(&st, keys, N - 1), SPW_OK); /* a prefix */
    assert_sliced(&st, keys, N - 1);
    assert_int_equal(spw_psc__slice(&st, copy, 3), SPW_OK); /* other keys, then back */
    assert_sliced(&st, copy, 3);
    assert_int_equal(spw_psc__slice(&st, keys, N), SPW_OK);
    assert_sliced(&st, keys, N);
    assert_int_equal(spw_psc__slice(&st, keys, 0), SPW_OK);
    assert_int_equal(st.seg[5], 0);
    free(keys);
    free(copy);
    spw_psc__sorter_fini(&st);
}

/* A pair of sorters (the client's): a step's push after the next micro-batch's pipelined pull
 * finds its pull's sort in the other sorter, unchanged; a third key set overwrites the one used
 * least recently; every result is the sort of its keys. */
static void test_psc_slice2_keeps_the_pull_before_the_last(void **state)
{
    (void)state;
    struct spw_psc__sorter pair[2];
    uint32_t next = 0;
    assert_int_equal(spw_psc__sorter_init(&pair[0], 5), SPW_OK);
    assert_int_equal(spw_psc__sorter_init(&pair[1], 5), SPW_OK);
    enum { N = 1500 };
    uint64_t *a = malloc(N * sizeof(uint64_t)), *b = malloc(N * sizeof(uint64_t));
    uint64_t *c = malloc(N * sizeof(uint64_t));
    assert_true(a && b && c);
    for (size_t i = 0; i < N; i++) {
        a[i] = key_of(i);
        b[i] = key_of(i + N);
        c[i] = key_of(i + 2 * N);
    }
    const struct spw_psc__sorter *sa = spw_psc__slice2(pair, &next, a, N); /* pull of step 1 */
    const struct spw_psc__sorter *sb = spw_psc__slice2(pair, &next, b, N); /* pull of step 2 */
    assert_non_null(sa);
    assert_non_null(sb);
    assert_ptr_not_equal(sa, sb);
    struct spw_psc__ent first = sa->a[0];
    assert_ptr_equal(spw_psc__slice2(pair, &next, a, N), sa); /* push of step 1: kept */
    assert_memory_equal(&sa->a[0], &first, sizeof(first));
    assert_sliced(sa, a, N);
    /* the pull of step 3 overwrites step 2's (used before step 1's push), not step 1's */
    assert_ptr_equal(spw_psc__slice2(pair, &next, c, N), sb);
    assert_sliced(sb, c, N);
    assert_ptr_equal(spw_psc__slice2(pair, &next, a, N), sa);
    assert_sliced(sa, a, N);
    /* b is in neither now: sorted again, into the one used least recently (c's) */
    assert_ptr_equal(spw_psc__slice2(pair, &next, b, N), sb);
    assert_sliced(sb, b, N);
    free(a);
    free(b);
    free(c);
    spw_psc__sorter_fini(&pair[0]);
    spw_psc__sorter_fini(&pair[1]);
}

static const struct spw_config_prop table[] = {
    {"trainer.batch", SPW_CONFIG_INT, "1024", 1, 1 << 20, NULL, "Examples per batch."},
    SPW_PS_CLIENT_CONFIG_PROPS,
};

static void test_psc_config_rows(void **state)
{
    (void)state;
    char err[512] = "";
    spw_config_t *cfg = spw_config_new(table, sizeof(table) / sizeof(table[0]), err, sizeof(err));
    assert_non_null(cfg);
    spw_config_t *own =
        spw_config_new(spw_ps_client_config_props, spw_ps_client_config_n_props, err, sizeof(err));
    assert_non_null(own);
    spw_config_destroy(own);

    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = 9;
    assert_int_equal(spw_ps_client_conf_from_config(cfg, &conf, err, sizeof(err)), SPW_OK);
    assert_string_equal(conf.shards, "tcp://127.0.0.1:7000");
    assert_int_equal(conf.push_window, 16);
    assert_int_equal(conf.push_timeout_ms, 2000);
    assert_int_equal(conf.max_frame, 33554432);
    assert_null(conf.curve_server_key_file);
    assert_int_equal(conf.dim, 9); /* not the table's */

    const char *sets[] = {"trainer.shards= tcp://a:1 ,tcp://b:2", "trainer.push.window=64",
                          "trainer.push.timeout=250ms", "trainer.pull.timeout=3s"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, sets, 4, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_ps_client_conf_from_config(cfg, &conf, err, sizeof(err)), SPW_OK);
    assert_int_equal(conf.push_window, 64);
    assert_int_equal(conf.push_timeout_ms, 250);
    assert_int_equal(conf.pull_timeout_ms, 3000);
    uint32_t n = 0;
    assert_int_equal(spw_psc__split_shards(conf.shards, &n, NULL, NULL, err, sizeof(err)), SPW_OK);
    assert_int_equal(n, 2);

    /* The table bounds the window by the shard's de-duplication window. */
    assert_int_not_equal(spw_config_set(cfg, "trainer.push.window", "65", err, sizeof(err)),
                         SPW_OK);
    const char *bad[] = {"tcp://a:1,,tcp://b:2", "a:1", " ", "tcp://"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(spw_config_set(cfg, "trainer.shards", bad[i], err, sizeof(err)), SPW_OK);
        assert_int_equal(spw_ps_client_conf_from_config(cfg, &conf, err, sizeof(err)),
                         SPW_ERR_INVALID);
        assert_non_null(strstr(err, "trainer.shards"));
    }
    assert_int_equal(spw_config_set(cfg, "trainer.shards", "tcp://a:1", err, sizeof(err)), SPW_OK);
    assert_int_equal(
        spw_config_set(cfg, "trainer.curve.server_key_file", "/x/server.pub", err, sizeof(err)),
        SPW_OK);
    assert_int_equal(spw_ps_client_conf_from_config(cfg, &conf, err, sizeof(err)), SPW_ERR_INVALID);
    spw_config_destroy(cfg);

    /* The constructor checks what a hand-made conf could get wrong. */
    spw_ps_client_conf_default(&conf);
    conf.dim = 4;
    conf.shards = "tcp://127.0.0.1:1";
    conf.push_window = SPW_PS_CLIENT_MAX_WINDOW + 1;
    assert_null(spw_ps_client_new(&conf, err, sizeof(err)));
    assert_non_null(strstr(err, "window"));
    conf.push_window = 4;
    conf.dim = 0;
    assert_null(spw_ps_client_new(&conf, err, sizeof(err)));
    conf.dim = 4;
    conf.shards = "nonsense";
    assert_null(spw_ps_client_new(&conf, err, sizeof(err)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_psc_inproc_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psc_inproc_staleness_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psc_inproc_three_stores_sliced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psc_inproc_fp16_rounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psc_inproc_pulled_dc, setup, teardown),
        cmocka_unit_test(test_psc_slice_sorted_by_shard_and_key),
        cmocka_unit_test(test_psc_slice_reuses_the_last_sort),
        cmocka_unit_test(test_psc_slice2_keeps_the_pull_before_the_last),
        cmocka_unit_test(test_psc_config_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
