/* Unit tests of `sparrow eval`'s library: checkpoints with known rows give the hand-computed
 * sigmoid of the LR/FM sums and the exact logloss, AUC, calibration and baselines; live
 * (in-process) shards; missing and corrupt checkpoints and bad input give named errors. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/coordinator.h"
#include "sparrow/evaluate.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/pserver.h"
#include "sparrow/wire.h"
#include "test_dir.h"

/* One row of a test checkpoint: key and its dim weights. */
struct trow {
    uint64_t key;
    float w[4];
};

/* Writes <root>/checkpoints/<epoch>/shard-<i> (rows dealt round-robin over shards), the MANIFEST
 * and (latest) LATEST, as the coordinator leaves them. */
static void write_ckpt(const char *root, uint64_t epoch, uint32_t dim, uint32_t shards,
                       const struct trow *rows, size_t n, bool latest)
{
    char dir[512], errstr[256];
    snprintf(dir, sizeof(dir), "%s/checkpoints", root);
    mkdir(root, 0700);
    mkdir(dir, 0700);
    snprintf(dir, sizeof(dir), "%s/checkpoints/%llu", root, (unsigned long long)epoch);
    assert_int_equal(mkdir(dir, 0700), 0);
    struct spw_coord_manifest m = {0};
    m.epoch = epoch;
    m.shard_count = shards;
    m.checksums = calloc(shards, sizeof(*m.checksums));
    m.rows = calloc(shards, sizeof(*m.rows));
    struct spw_ps_ckpt_meta meta = {.dim = dim, .optimizer = SPW_PS_SGD};
    for (uint32_t s = 0; s < shards; s++) {
        snprintf(dir, sizeof(dir), "%s/checkpoints/%llu/shard-%u", root, (unsigned long long)epoch,
                 s);
        spw_ps_ckpt_writer_t *w = spw_ps_ckpt_writer_open(dir, &meta, NULL, errstr, sizeof(errstr));
        assert_non_null(w);
        for (size_t i = s; i < n; i += shards) {
            struct spw_ps_ckpt_row row = {.key = rows[i].key, .version = 1, .data = rows[i].w};
            assert_int_equal(spw_ps_ckpt_writer_add(w, &row, errstr, sizeof(errstr)), SPW_OK);
        }
        struct spw_ps_checkpoint_info info;
        assert_int_equal(spw_ps_ckpt_writer_finish(w, &info, errstr, sizeof(errstr)), SPW_OK);
        spw_ps_ckpt_writer_close(w);
        memcpy(m.checksums[s], info.checksum, sizeof(m.checksums[s]));
        m.rows[s] = info.rows;
    }
    assert_int_equal(spw_coord_manifest_write(root, &m, errstr, sizeof(errstr)), SPW_OK);
    if (latest)
        assert_int_equal(spw_coord_latest_write(root, epoch, errstr, sizeof(errstr)), SPW_OK);
    free(m.checksums);
    free(m.rows);
}

/* One input example: n features (keys, weights), label, oracle_p (NaN: none). */
struct tex {
    size_t n;
    uint64_t keys[4];
    float weights[4];
    float label;
    float oracle;
};

/* Writes examples as length-delimited sparrow.Example (pb) to path; garbage (may be NULL) is
 * appended as one extra record of that many bytes. */
static void write_pb(const char *path, const struct tex *ex, size_t n, const char *garbage)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) {
        Sparrow__Example e = SPARROW__EXAMPLE__INIT;
        uint32_t fields[4];
        for (size_t j = 0; j < ex[i].n; j++)
            fields[j] = (uint32_t)(j + 1);
        e.has_label = true;
        e.label = ex[i].label;
        e.n_fields = e.n_keys = e.n_weights = ex[i].n;
        e.fields = fields;
        e.keys = (uint64_t *)ex[i].keys;
        e.weights = (float *)ex[i].weights;
        if (!isnan(ex[i].oracle)) {
            e.has_oracle_p = true;
            e.oracle_p = ex[i].oracle;
        }
        uint8_t buf[512], pre[SPW_WIRE_VARINT_MAX];
        size_t len = protobuf_c_message_pack(&e.base, buf);
        size_t plen = spw_wire_put_varint(pre, len);
        assert_int_equal(fwrite(pre, 1, plen, f), plen);
        assert_int_equal(fwrite(buf, 1, len, f), len);
    }
    if (garbage) {
        uint8_t pre[SPW_WIRE_VARINT_MAX];
        size_t len = strlen(garbage), plen = spw_wire_put_varint(pre, len);
        fwrite(pre, 1, plen, f);
        fwrite(garbage, 1, len, f);
    }
    assert_int_equal(fclose(f), 0);
}

static double sigmoid(double z)
{
    return 1.0 / (1.0 + exp(-z));
}

static double ll(double p, double y)
{
    return -(y * log(p) + (1.0 - y) * log(1.0 - p));
}

static const struct trow *find_row(const struct trow *rows, size_t n, uint64_t key)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].key == key)
            return &rows[i];
    return NULL;
}

/* The FM sum by hand (k = dim - 1; LR when dim is 1); an absent key has a zero row. */
static double hand_p(const struct trow *rows, size_t nrows, uint32_t dim, const struct tex *ex)
{
    static const float zero[4] = {0};
    const float *b = find_row(rows, nrows, 0)->w;
    double z = b[0], lin = 0.0, sq[3] = {0}, s2[3] = {0};
    for (size_t i = 0; i < ex->n; i++) {
        const struct trow *r = find_row(rows, nrows, ex->keys[i]);
        const float *w = r ? r->w : zero;
        double x = ex->weights[i];
        lin += x * w[0];
        for (uint32_t f = 0; f + 1 < dim; f++) {
            sq[f] += x * w[1 + f];
            s2[f] += x * x * w[1 + f] * w[1 + f];
        }
    }
    z += lin;
    for (uint32_t f = 0; f + 1 < dim; f++)
        z += 0.5 * (sq[f] * sq[f] - s2[f]);
    return sigmoid(z);
}

/* FM, k = 2, two shards: bias row (key 0) and three feature rows; key 99 is absent. */
static const struct trow fm_rows[] = {
    {0, {-0.5f, 0.9f, -0.9f}}, /* the latent part of the bias row is never read */
    {11, {0.8f, 0.3f, -0.2f}},
    {22, {-0.4f, 0.5f, 0.7f}},
    {33, {1.2f, -0.6f, 0.1f}},
};
static const struct tex fm_ex[] = {
    {2, {11, 22}, {1, 1}, 1.0f, 0.7f},
    {3, {11, 33, 99}, {1, 0.5f, 2}, 0.0f, 0.4f},
    {1, {22}, {1.5f}, 0.0f, NAN},
    {3, {22, 33, 11}, {1, 1, 1}, 1.0f, 0.9f},
};

static void test_evaluate_checkpoint_fm_exact(void **state)
{
    (void)state;
    char root[300], in[300], errstr[512];
    snprintf(root, sizeof(root), "%s/fm", test_dir);
    write_ckpt(root, 4, 3, 2, fm_rows, 4, true);
    snprintf(in, sizeof(in), "%s/fm.pb", test_dir);
    write_pb(in, fm_ex, 4, NULL);

    spw_err_t err = 0;
    spw_evaluate_model_t *em =
        spw_evaluate_model_open_checkpoint(root, 0, NULL, &err, errstr, sizeof(errstr));
    assert_non_null(em);
    assert_int_equal(spw_evaluate_model_epoch(em), 4);
    assert_int_equal(spw_evaluate_model_rows(em), 4);
    const struct spw_model *model = spw_evaluate_model_model(em);
    assert_int_equal(model->kind, SPW_MODEL_FM);
    assert_int_equal(model->latent_dim, 2);
    assert_int_equal(model->dim, 3);

    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_reader_t *reader =
        spw_reader_open(in, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct spw_evaluate_result r;
    float *preds = NULL;
    /* batch 3: two batches, the second with one example */
    assert_int_equal(spw_evaluate_reader(em, reader, 3, &r, &preds, errstr, sizeof(errstr)),
                     SPW_OK);
    spw_reader_close(reader);
    assert_int_equal(r.examples, 4);
    assert_int_equal(r.rejected, 0);
    assert_int_equal(r.oracle_examples, 3);

    double p[4], llsum = 0, psum = 0, ysum = 0;
    for (size_t i = 0; i < 4; i++) {
        p[i] = hand_p(fm_rows, 4, 3, &fm_ex[i]);
        assert_true(fabs(preds[i] - p[i]) < 1e-6);
        llsum += ll(p[i], fm_ex[i].label);
        psum += p[i];
        ysum += fm_ex[i].label;
    }
    free(preds);
    assert_true(fabs(r.logloss - llsum / 4) < 1e-6);
    assert_true(fabs(r.mean_prediction - psum / 4) < 1e-6);
    assert_true(fabs(r.click_rate - ysum / 4) < 1e-12);
    assert_true(fabs(ysum / 4 - 0.5) < 1e-12);
    assert_true(fabs(r.calibration - (psum / 4) / 0.5) < 1e-6);
    assert_true(fabs(r.const_logloss - log(2.0)) < 1e-9);
    /* AUC by hand: the fraction of (positive, negative) pairs ordered right */
    double wins = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            if (fm_ex[a].label == 1 && fm_ex[b].label == 0)
                wins += p[a] > p[b] ? 1 : (p[a] == p[b] ? 0.5 : 0);
    assert_true(fabs(r.auc - wins / 4) < 1e-12);
    /* Bayes over the three with oracle_p: 0.7 (y 1), 0.4 (y 0), 0.9 (y 1) */
    assert_true(fabs(r.bayes_logloss - (ll(0.7, 1) + ll(0.4, 0) + ll(0.9, 1)) / 3) < 1e-6);
    assert_true(fabs(r.bayes_auc - 1.0) < 1e-12);
    spw_evaluate_model_close(em);
}

/* LR, one shard, an explicit epoch through the checkpoints/ directory itself; no oracle_p; a
 * corrupt record is counted and skipped. */
static void test_evaluate_checkpoint_lr_epoch(void **state)
{
    (void)state;
    static const struct trow rows[] = {{0, {0.25f}}, {5, {-1.5f}}, {6, {2.0f}}};
    static const struct tex ex[] = {
        {2, {5, 6}, {1, 1}, 1.0f, NAN},
        {1, {5}, {2}, 0.0f, NAN},
        {1, {7}, {1}, 0.0f, NAN}, /* absent: zero row, p = sigmoid(bias) */
    };
    char root[300], dir[340], in[300], errstr[512];
    snprintf(root, sizeof(root), "%s/lr", test_dir);
    write_ckpt(root, 2, 1, 1, rows, 3, true);
    write_ckpt(root, 5, 1, 1, rows, 1, false); /* newer, not LATEST: only the bias */
    snprintf(in, sizeof(in), "%s/lr.pb", test_dir);
    write_pb(in, ex, 3, "\x0a\xff\xff");

    snprintf(dir, sizeof(dir), "%s/checkpoints/", root);
    spw_evaluate_model_t *em =
        spw_evaluate_model_open_checkpoint(dir, 2, NULL, NULL, errstr, sizeof(errstr));
    assert_non_null(em);
    assert_int_equal(spw_evaluate_model_model(em)->kind, SPW_MODEL_LR);
    assert_int_equal(spw_evaluate_model_model(em)->dim, 1);
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_reader_t *reader =
        spw_reader_open(in, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    struct spw_evaluate_result r;
    float *preds;
    assert_int_equal(spw_evaluate_reader(em, reader, 64, &r, &preds, errstr, sizeof(errstr)),
                     SPW_OK);
    spw_reader_close(reader);
    assert_int_equal(r.examples, 3);
    assert_int_equal(r.rejected, 1);
    assert_int_equal(r.records, 4);
    double p0 = sigmoid(0.25 - 1.5 + 2.0), p1 = sigmoid(0.25 - 3.0), p2 = sigmoid(0.25);
    assert_true(fabs(preds[0] - p0) < 1e-6);
    assert_true(fabs(preds[1] - p1) < 1e-6);
    assert_true(fabs(preds[2] - p2) < 1e-6);
    free(preds);
    assert_true(fabs(r.logloss - (ll(p0, 1) + ll(p1, 0) + ll(p2, 0)) / 3) < 1e-6);
    assert_true(fabs(r.auc - 1.0) < 1e-12);
    double c = 1.0 / 3;
    assert_true(fabs(r.const_logloss - ll(c, 0) * 2 / 3 - ll(c, 1) / 3) < 1e-9);
    assert_true(isnan(r.bayes_logloss));
    assert_true(isnan(r.bayes_auc));
    spw_evaluate_model_close(em);

    /* epoch 0 means LATEST (2), not the newest directory (5) */
    em = spw_evaluate_model_open_checkpoint(root, 0, NULL, NULL, errstr, sizeof(errstr));
    assert_non_null(em);
    assert_int_equal(spw_evaluate_model_epoch(em), 2);
    spw_evaluate_model_close(em);
}

/* Live shards through the in-process transport: rows as a pull returns them (the trained rows
 * and, for a never-seen key, the shard's initial row), scored by the same forward pass. */
static void test_evaluate_shards_inproc(void **state)
{
    (void)state;
    char db[300], in[300], errstr[512];
    snprintf(db, sizeof(db), "%s/store", test_dir);
    struct spw_ps_store_conf sc = {0};
    sc.dim = 3;
    spw_ps_optim_conf_default(&sc.optim);
    sc.optim.kind = SPW_PS_SGD;
    sc.optim.lr = 1.0f;
    sc.optim.init_scale = 0.1f;
    sc.seed = 7;
    sc.memory_bytes = 16u << 20;
    sc.db_path = db;
    spw_ps_store_t *store = spw_ps_store_open(&sc, errstr, sizeof(errstr));
    assert_non_null(store);
    /* move key 11 away from its initial row */
    uint64_t k11 = 11;
    float g[3] = {-0.5f, 0.25f, -0.25f};
    struct spw_ps_push_result pr;
    assert_int_equal(spw_ps_store_push(store, &k11, 1, g, NULL, NULL, &pr), SPW_OK);
    static const struct tex ex[] = {
        {2, {11, 22}, {1, 1}, 1.0f, NAN},
        {1, {33}, {2}, 0.0f, NAN},
    };
    snprintf(in, sizeof(in), "%s/live.pb", test_dir);
    write_pb(in, ex, 2, NULL);

    struct spw_ps_client_conf cc;
    spw_ps_client_conf_default(&cc);
    spw_ps_store_t *stores[1] = {store};
    cc.stores = stores;
    cc.n_stores = 1;
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 2), SPW_OK);
    spw_evaluate_model_t *em =
        spw_evaluate_model_open_shards(&cc, &model, 1000, errstr, sizeof(errstr));
    assert_non_null(em);
    assert_int_equal(spw_evaluate_model_epoch(em), 0);
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_reader_t *reader =
        spw_reader_open(in, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    struct spw_evaluate_result r;
    float *preds;
    assert_int_equal(spw_evaluate_reader(em, reader, 64, &r, &preds, errstr, sizeof(errstr)),
                     SPW_OK);
    spw_reader_close(reader);
    /* the rows the store returns now, as a hand-made table */
    uint64_t keys[4] = {0, 11, 22, 33};
    float vals[12];
    assert_int_equal(spw_ps_store_pull(store, keys, 4, vals, NULL), SPW_OK);
    struct trow rows[4];
    for (int i = 0; i < 4; i++) {
        rows[i].key = keys[i];
        memcpy(rows[i].w, vals + 3 * i, 3 * sizeof(float));
    }
    assert_true(rows[1].w[0] != 0.0f && rows[3].w[0] != 0.0f);
    for (int i = 0; i < 2; i++)
        assert_true(fabs(preds[i] - hand_p(rows, 4, 3, &ex[i])) < 1e-6);
    free(preds);
    spw_evaluate_model_close(em);
    spw_ps_store_close(store);
}

static void expect_open_fail(const char *dir, uint64_t epoch, spw_err_t want, const char *text)
{
    char errstr[512] = "";
    spw_err_t err = 0;
    spw_evaluate_model_t *em =
        spw_evaluate_model_open_checkpoint(dir, epoch, NULL, &err, errstr, sizeof(errstr));
    assert_null(em);
    assert_int_equal(err, want);
    if (!strstr(errstr, text))
        fail_msg("'%s' lacks '%s'", errstr, text);
}

static void test_evaluate_checkpoint_errors(void **state)
{
    (void)state;
    char root[300], path[400], errstr[512];
    expect_open_fail("/nonexistent/spw", 0, SPW_ERR_NOT_FOUND, "No such file");
    expect_open_fail(test_dir, 0, SPW_ERR_NOT_FOUND, "no checkpoints/");
    snprintf(root, sizeof(root), "%s/err", test_dir);
    write_ckpt(root, 3, 3, 2, fm_rows, 4, false);
    expect_open_fail(root, 0, SPW_ERR_NOT_FOUND, "LATEST: missing");
    expect_open_fail(root, 8, SPW_ERR_NOT_FOUND, "epoch 8 not found");
    expect_open_fail(root, 8, SPW_ERR_NOT_FOUND, "epochs present: 3");
    /* a shard checkpoint whose files no longer match its checksum */
    snprintf(path, sizeof(path), "%s/checkpoints/3/shard-1/CHECKSUM", root);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("0123456789abcdef\n", f);
    fclose(f);
    char errbuf[512];
    spw_err_t err = 0;
    assert_null(spw_evaluate_model_open_checkpoint(root, 3, NULL, &err, errbuf, sizeof(errbuf)));
    assert_int_equal(err, SPW_ERR_CORRUPT);
    /* a manifest with one byte flipped */
    snprintf(path, sizeof(path), "%s/checkpoints/3/MANIFEST", root);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 6, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 6, SEEK_SET);
    fputc(c ^ 0x55, f);
    fclose(f);
    expect_open_fail(root, 3, SPW_ERR_CORRUPT, "MANIFEST");
    (void)errstr;
}

/* An input of which no record is valid names the likely cause; an empty one says so. */
static void test_evaluate_input_errors(void **state)
{
    (void)state;
    char root[300], in[300], errstr[512];
    snprintf(root, sizeof(root), "%s/inp", test_dir);
    write_ckpt(root, 1, 3, 1, fm_rows, 4, true);
    snprintf(in, sizeof(in), "%s/inp.pb", test_dir);
    write_pb(in, fm_ex, 4, NULL);
    spw_evaluate_model_t *em =
        spw_evaluate_model_open_checkpoint(root, 0, NULL, NULL, errstr, sizeof(errstr));
    assert_non_null(em);
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    struct spw_evaluate_result r;
    /* a pb file read as JSON lines */
    spw_reader_t *reader =
        spw_reader_open(in, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_int_equal(spw_evaluate_reader(em, reader, 64, &r, NULL, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    spw_reader_close(reader);
    assert_non_null(strstr(errstr, "wrong --format"));
    assert_int_equal(r.examples, 0);
    assert_true(r.rejected > 0);
    /* empty */
    snprintf(in, sizeof(in), "%s/empty.json", test_dir);
    fclose(fopen(in, "w"));
    reader = spw_reader_open(in, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_int_equal(spw_evaluate_reader(em, reader, 64, &r, NULL, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    spw_reader_close(reader);
    assert_non_null(strstr(errstr, "no record"));
    /* batch out of range */
    reader = spw_reader_open(in, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_int_equal(spw_evaluate_reader(em, reader, 0, &r, NULL, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    spw_reader_close(reader);
    spw_evaluate_model_close(em);
}

/* Shards that never answer: SPW_ERR_TIMEOUT, "unreachable". */
static void test_evaluate_shards_unreachable(void **state)
{
    (void)state;
    char errstr[512];
    struct spw_ps_client_conf cc;
    spw_ps_client_conf_default(&cc);
    cc.shards = "tcp://127.0.0.1:9"; /* discard: nothing listens */
    cc.pull_timeout_ms = 50;
    struct spw_model model;
    spw_model_init(&model, SPW_MODEL_LR, 0);
    spw_evaluate_model_t *em =
        spw_evaluate_model_open_shards(&cc, &model, 200, errstr, sizeof(errstr));
    assert_non_null(em);
    uint64_t keys[2] = {0, 1};
    float rows[2];
    assert_int_equal(spw_evaluate_model_rows_get(em, keys, 2, rows, errstr, sizeof(errstr)),
                     SPW_ERR_TIMEOUT);
    assert_non_null(strstr(errstr, "unreachable"));
    spw_evaluate_model_close(em);
    spw_evaluate_model_close(NULL);
}

SPW_TEST_MAIN_GROUP(test_dir_setup, test_dir_teardown, test_evaluate_checkpoint_fm_exact,
                    test_evaluate_checkpoint_lr_epoch, test_evaluate_shards_inproc,
                    test_evaluate_checkpoint_errors, test_evaluate_input_errors,
                    test_evaluate_shards_unreachable)
