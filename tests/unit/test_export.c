/* Unit tests of `sparrow export`'s library: checkpoints with known rows over several shards come
 * out merged in key order, exactly (TSV and .npy bytes); --since writes the new and changed rows
 * and the removed keys; bad requests (no epoch, a non-empty output, since >= epoch) fail naming
 * the cause and leave nothing; a deep model's dense blocks come out as its network's weights
 * (the initial weights plus the blocks), not as rows, and only for the network they belong to. */
#include "test_main.h" /* cmocka and what it needs first */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/coordinator.h"
#include "sparrow/export.h"
#include "sparrow/hash.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/pserver.h"
#include "test_dir.h"

#define DIM 3

struct trow {
    uint64_t key;
    float w[DIM];
};

/* Writes <root>/checkpoints/<epoch>/ with rows spread over shards by a key rule of its own (not
 * the jump hash: the export must not care where a key lives), its MANIFEST and LATEST. */
static void write_ckpt(const char *root, uint64_t epoch, uint32_t shards, const struct trow *rows,
                       size_t n)
{
    char dir[512], errstr[256];
    snprintf(dir, sizeof(dir), "%s/checkpoints", root);
    mkdir(root, 0700);
    mkdir(dir, 0700);
    snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64, root, epoch);
    assert_int_equal(mkdir(dir, 0700), 0);
    struct spw_coord_manifest m = {0};
    m.epoch = epoch;
    m.shard_count = shards;
    m.example_count = 100 * epoch;
    m.checksums = calloc(shards, sizeof(*m.checksums));
    m.rows = calloc(shards, sizeof(*m.rows));
    snprintf(m.model, sizeof(m.model), "fm");
    m.dim = DIM;
    struct spw_ps_ckpt_meta meta = {.dim = DIM, .optimizer = SPW_PS_ADAGRAD};
    float data[2 * DIM]; /* weights, then Adagrad's state */
    for (uint32_t s = 0; s < shards; s++) {
        snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64 "/shard-%u", root, epoch, s);
        spw_ps_ckpt_writer_t *w = spw_ps_ckpt_writer_open(dir, &meta, NULL, errstr, sizeof(errstr));
        assert_non_null(w);
        for (size_t i = 0; i < n; i++) {
            if (rows[i].key % shards != s)
                continue;
            memcpy(data, rows[i].w, sizeof(rows[i].w));
            for (int d = 0; d < DIM; d++)
                data[DIM + d] = 7.0f; /* optimizer state: never exported */
            struct spw_ps_ckpt_row row = {.key = rows[i].key, .version = 1, .data = data};
            assert_int_equal(spw_ps_ckpt_writer_add(w, &row, errstr, sizeof(errstr)), SPW_OK);
        }
        struct spw_ps_checkpoint_info info;
        assert_int_equal(spw_ps_ckpt_writer_finish(w, &info, errstr, sizeof(errstr)), SPW_OK);
        spw_ps_ckpt_writer_close(w);
        memcpy(m.checksums[s], info.checksum, sizeof(m.checksums[s]));
        m.rows[s] = info.rows;
    }
    assert_int_equal(spw_coord_manifest_write(root, &m, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(spw_coord_latest_write(root, epoch, errstr, sizeof(errstr)), SPW_OK);
    spw_coord_manifest_fini(&m);
}

/* The whole of a file (NUL-terminated; *len its size). */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static const char *path_in(const char *dir, const char *name)
{
    static char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return p;
}

/* Epoch 1 and 2 of one model under test_dir/ck, 3 shards at epoch 1 and 2 at epoch 2 (a
 * reshard in between changes nothing for an export). */
static const struct trow E1[] = {
    {0, {0.5f, 0, 0}}, {7, {1, 2, 3}},          {9, {-1, 0.25f, 4}},
    {12, {2, 2, 2}},   {UINT64_MAX, {9, 8, 7}},
};
static const struct trow E2[] = {
    {0, {0.75f, 0, 0}}, {7, {1, 2, 3}},          {10, {5, 5, 5}},
    {12, {2, 2, 2.5f}}, {UINT64_MAX, {9, 8, 7}},
};

static void make_epochs(char *root, size_t size)
{
    snprintf(root, size, "%s/ck", test_dir);
    write_ckpt(root, 1, 3, E1, sizeof(E1) / sizeof(E1[0]));
    write_ckpt(root, 2, 2, E2, sizeof(E2) / sizeof(E2[0]));
}

static void test_export_tsv_rows_in_key_order(void **state)
{
    (void)state;
    char root[256], out[256], errstr[512];
    make_epochs(root, sizeof(root));
    snprintf(out, sizeof(out), "%s/tsv1", test_dir);
    struct spw_export_conf conf = {.checkpoint = root, .epoch = 1, .to = out};
    struct spw_export_result res;
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(res.epoch, 1);
    assert_int_equal(res.rows, 5);
    assert_int_equal(res.dim, DIM);
    assert_int_equal(res.shards, 3);
    assert_string_equal(res.model, "fm");
    char *tsv = slurp(path_in(out, "rows.tsv"), NULL);
    assert_string_equal(tsv, "0\t0.5\t0\t0\n"
                             "7\t1\t2\t3\n"
                             "9\t-1\t0.25\t4\n"
                             "12\t2\t2\t2\n"
                             "18446744073709551615\t9\t8\t7\n");
    free(tsv);
    char *meta = slurp(path_in(out, "metadata.json"), NULL);
    assert_non_null(strstr(meta, "\"model\": \"fm\""));
    assert_non_null(strstr(meta, "\"dim\": 3,"));
    assert_non_null(strstr(meta, "\"epoch\": 1,"));
    assert_non_null(strstr(meta, "\"since_epoch\": null,"));
    assert_non_null(strstr(meta, "\"rows\": 5,"));
    assert_non_null(strstr(meta, "\"example_count\": 100,"));
    assert_non_null(strstr(meta, "\"key_hash\": \"xxh64\""));
    free(meta);
    assert_int_equal(access(path_in(out, "removed.tsv"), F_OK), -1); /* full export: none */
}

static void test_export_npy_exact_bytes(void **state)
{
    (void)state;
    char root[256], out[256], errstr[512];
    make_epochs(root, sizeof(root));
    snprintf(out, sizeof(out), "%s/npy2", test_dir);
    struct spw_export_conf conf = {.checkpoint = root, .to = out, .format = SPW_EXPORT_NPY};
    struct spw_export_result res;
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(res.epoch, 2); /* LATEST */
    size_t len;
    char *k = slurp(path_in(out, "keys.npy"), &len);
    assert_int_equal(len, 128 + 5 * 8);
    assert_memory_equal(k, "\x93NUMPY\x01\x00\x76\x00", 10);
    assert_non_null(strstr(k + 10, "{'descr': '<u8', 'fortran_order': False, 'shape': (5,), }"));
    assert_int_equal(k[127], '\n');
    uint64_t keys[5];
    memcpy(keys, k + 128, sizeof(keys));
    assert_true(keys[0] == 0 && keys[1] == 7 && keys[2] == 10 && keys[3] == 12 &&
                keys[4] == UINT64_MAX);
    free(k);
    char *w = slurp(path_in(out, "weights.npy"), &len);
    assert_int_equal(len, 128 + 5 * DIM * 4);
    assert_non_null(strstr(w + 10, "'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), }"));
    float weights[5 * DIM];
    memcpy(weights, w + 128, sizeof(weights));
    for (size_t i = 0; i < 5; i++)
        assert_memory_equal(&weights[i * DIM], E2[i].w, sizeof(E2[i].w));
    free(w);
}

static void test_export_since_changed_and_removed(void **state)
{
    (void)state;
    char root[256], out[256], errstr[512];
    make_epochs(root, sizeof(root));
    snprintf(out, sizeof(out), "%s/since", test_dir);
    /* the epoch directory names epoch 2 */
    char epoch_dir[300];
    snprintf(epoch_dir, sizeof(epoch_dir), "%s/checkpoints/2", root);
    struct spw_export_conf conf = {.checkpoint = epoch_dir, .since = 1, .to = out};
    struct spw_export_result res;
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(res.epoch, 2);
    assert_int_equal(res.since, 1);
    /* 0 and 12 changed, 10 is new; 7 and the top key are unchanged; 9 was removed */
    assert_int_equal(res.rows, 3);
    assert_int_equal(res.unchanged, 2);
    assert_int_equal(res.removed, 1);
    char *tsv = slurp(path_in(out, "rows.tsv"), NULL);
    assert_string_equal(tsv, "0\t0.75\t0\t0\n10\t5\t5\t5\n12\t2\t2\t2.5\n");
    free(tsv);
    char *rm = slurp(path_in(out, "removed.tsv"), NULL);
    assert_string_equal(rm, "9\n");
    free(rm);
    char *meta = slurp(path_in(out, "metadata.json"), NULL);
    assert_non_null(strstr(meta, "\"since_epoch\": 1,"));
    assert_non_null(strstr(meta, "\"removed\": 1,"));
    assert_non_null(strstr(meta, "\"removed\": \"removed.tsv\""));
    free(meta);
}

static void test_export_errors_leave_nothing(void **state)
{
    (void)state;
    char root[256], out[256], errstr[512];
    make_epochs(root, sizeof(root));
    snprintf(out, sizeof(out), "%s/err", test_dir);
    struct spw_export_result res;
    struct spw_export_conf conf = {.checkpoint = root, .epoch = 5, .to = out};
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_NOT_FOUND);
    assert_non_null(strstr(errstr, "epoch 5 not found"));
    assert_non_null(strstr(errstr, "epochs present: 2 1"));
    assert_int_equal(access(out, F_OK), -1);
    conf = (struct spw_export_conf){.checkpoint = root, .epoch = 2, .since = 2, .to = out};
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "older epoch"));
    conf = (struct spw_export_conf){.checkpoint = root, .since = 4, .epoch = 2, .to = out};
    assert_int_not_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_OK);
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/nowhere", test_dir);
    conf = (struct spw_export_conf){.checkpoint = missing, .to = out};
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_NOT_FOUND);
    assert_non_null(strstr(errstr, missing));
    /* a since epoch that is gone: the output directory made for it is removed again */
    conf = (struct spw_export_conf){.checkpoint = root, .epoch = 2, .since = 1, .to = out};
    char gone[300];
    snprintf(gone, sizeof(gone), "%s/checkpoints/1/MANIFEST", root);
    assert_int_equal(rename(gone, path_in(test_dir, "MANIFEST.1")), 0);
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_NOT_FOUND);
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(rename(path_in(test_dir, "MANIFEST.1"), gone), 0);
    /* a non-empty output directory is refused and kept as it was */
    mkdir(out, 0700);
    FILE *f = fopen(path_in(out, "keep"), "w");
    fclose(f);
    conf = (struct spw_export_conf){.checkpoint = root, .to = out};
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_EXISTS);
    assert_non_null(strstr(errstr, "not empty"));
    assert_int_equal(access(path_in(out, "keep"), F_OK), 0);
    assert_int_equal(access(path_in(out, "rows.tsv"), F_OK), -1);
}

/* A DeepFM of k = 2 (dim 3, as the rows here) over fields 1 and 2, one hidden layer of hidden. */
static void deep_model(struct spw_model *m, const char *hidden)
{
    char errstr[256];
    const struct spw_model_field fields[] = {{1, SPW_POOL_SUM}, {2, SPW_POOL_MEAN}};
    assert_int_equal(spw_model_init_deep(m, SPW_MODEL_DEEPFM, DIM - 1, fields, 2, hidden, 0, 0.0f,
                                         7, errstr, sizeof(errstr)),
                     SPW_OK);
}

static void test_export_deep_network(void **state)
{
    (void)state;
    char root[256], out[256], errstr[512];
    struct spw_model m;
    deep_model(&m, "4");
    size_t np = spw_model_dense_params(&m); /* 4 * 4 + 4 + 4 + 1 = 25: 9 blocks of 3 */
    assert_int_equal(m.dense_blocks, (np + DIM - 1) / DIM);
    struct trow rows[3 + 16];
    size_t n = 0;
    rows[n++] = (struct trow){0, {0.5f, 0, 0}};
    rows[n++] = (struct trow){7, {1, 2, 3}};
    rows[n++] = (struct trow){UINT64_MAX - 1, {4, 5, 6}}; /* in the dense range, past the blocks */
    for (uint32_t b = 0; b < m.dense_blocks; b++)
        rows[n++] = (struct trow){spw_dense_block_key(b), {0.25f * (float)b, -1.0f, 0.125f}};
    snprintf(root, sizeof(root), "%s/deep", test_dir);
    write_ckpt(root, 1, 2, rows, n);
    struct spw_export_result res;

    /* with the network: the rows without the blocks, and dense.npy = init + blocks */
    snprintf(out, sizeof(out), "%s/deep-npy", test_dir);
    struct spw_export_conf conf = {.checkpoint = root, .to = out, .format = SPW_EXPORT_NPY};
    conf.model = m;
    rows[2].key = spw_dense_block_key(m.dense_blocks); /* a block past the network's: refused */
    write_ckpt(root, 2, 2, rows, n);
    conf.epoch = 2;
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "past its last"));
    assert_int_equal(access(out, F_OK), -1);
    conf.epoch = 1;
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "not the model's")); /* UINT64_MAX - 1 is a block too */
    rows[2].key = 9;
    write_ckpt(root, 3, 2, rows, n);
    conf.epoch = 3;
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(res.rows, 3);
    assert_int_equal(res.dense_params, np);
    assert_string_equal(res.model, "deepfm");
    size_t len;
    char *d = slurp(path_in(out, "dense.npy"), &len);
    assert_int_equal(len, 128 + np * 4);
    char shape[64];
    snprintf(shape, sizeof(shape), "'shape': (%zu,), }", np);
    assert_non_null(strstr(d + 10, shape));
    float *init = malloc(np * sizeof(float)), got[64];
    assert_true(np <= sizeof(got) / sizeof(got[0]));
    spw_model_dense_init(&m, init);
    memcpy(got, d + 128, np * sizeof(float));
    for (size_t i = 0; i < np; i++) {
        const float *block = rows[3 + i / DIM].w;
        assert_true(got[i] == init[i] + block[i % DIM]);
    }
    free(init);
    free(d);
    char *meta = slurp(path_in(out, "metadata.json"), NULL);
    assert_non_null(strstr(meta, "\"model\": \"deepfm\""));
    assert_non_null(strstr(meta, "\"fields\": [{\"id\": 1, \"pooling\": \"sum\"}, {\"id\": 2, "
                                 "\"pooling\": \"mean\"}]"));
    assert_non_null(strstr(meta, "{\"kind\": \"hidden\", \"in\": 4, \"out\": 4, "
                                 "\"weight_offset\": 0, \"bias_offset\": 16}"));
    assert_non_null(strstr(meta, "\"dense\": \"dense.npy\"}"));
    free(meta);
    char *k = slurp(path_in(out, "keys.npy"), &len);
    assert_int_equal(len, 128 + 3 * 8);
    free(k);

    /* without the network, or with another one: refused, nothing left */
    snprintf(out, sizeof(out), "%s/deep-bad", test_dir);
    conf = (struct spw_export_conf){.checkpoint = root, .to = out};
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "holds a deep model's dense blocks"));
    assert_int_equal(access(out, F_OK), -1);
    deep_model(&conf.model, "8");
    assert_int_equal(spw_export_run(&conf, &res, errstr, sizeof(errstr)), SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "dense blocks, the model"));
    assert_int_equal(access(out, F_OK), -1);
}

SPW_TEST_MAIN_EACH(test_dir_setup, test_dir_teardown, test_export_tsv_rows_in_key_order,
                   test_export_npy_exact_bytes, test_export_since_changed_and_removed,
                   test_export_errors_leave_nothing, test_export_deep_network)
