/* Unit tests of the single-process reference trainer on generated data: it learns (below the
 * constant predictor, towards the Bayes-optimal logloss), compression at ratio 1 changes nothing,
 * accumulation over micro-batches equals one large batch, bad records are skipped. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/tools.h"
#include "sparrow/trainer.h"

/* The stream of the test: `sparrow gen --n 200000 --seed 3 --format pb`. */
#define GEN_N    200000
#define GEN_SEED 3

static char g_pb_path[64];

static void gen_params(struct spw_gen_params *gp, uint64_t n)
{
    spw_gen_params_default(gp);
    gp->n = n;
    gp->seed = GEN_SEED;
}

/* Writes n generated examples in format to a new temporary file; its path into path. */
static int write_gen_file(char *path, size_t path_size, uint64_t n, enum spw_format format,
                          size_t garbage_every)
{
    char errstr[256];
    struct spw_gen_params gp;
    gen_params(&gp, n);
    snprintf(path, path_size, "/tmp/test_trn_ref_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "wb");
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    if (!f || !gen)
        return -1;
    struct spw_wire_buf buf = {0};
    for (uint64_t i = 0; i < n; i++) {
        buf.len = 0;
        if (spw_gen_encode(gen, spw_gen_next(gen), format, &buf))
            return -1;
        if (fwrite(buf.data, 1, buf.len, f) != buf.len)
            return -1;
        if (garbage_every && i % garbage_every == garbage_every / 2)
            fputs("{\"label\": 1, \"features\": [this is not json\n", f);
    }
    free(buf.data);
    spw_gen_destroy(gen);
    return fclose(f) == 0 ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    return write_gen_file(g_pb_path, sizeof(g_pb_path), GEN_N, SPW_FORMAT_PB, 0);
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_pb_path);
    return 0;
}

static struct spw_trainer_params base_params(enum spw_model_kind kind, uint32_t k)
{
    struct spw_trainer_params p;
    spw_trainer_params_default(&p);
    assert_int_equal(spw_model_init(&p.model, kind, k), SPW_OK);
    p.backend = SPW_BACKEND_CPU;
    p.batch = 256;
    p.lr = 0.02f;
    p.eval_window = 20000;
    p.topk.dim = p.model.dim;
    return p;
}

static spw_ref_t *new_ref(const struct spw_trainer_params *p)
{
    char errstr[256];
    spw_ref_t *ref = spw_ref_new(p, errstr, sizeof(errstr));
    if (!ref)
        fail_msg("spw_ref_new: %s", errstr);
    return ref;
}

static spw_reader_t *open_reader(const char *path, enum spw_format format)
{
    char errstr[256];
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_reader_t *reader = spw_reader_open(path, format, &limits, NULL, errstr, sizeof(errstr));
    if (!reader)
        fail_msg("spw_reader_open: %s", errstr);
    return reader;
}

struct learn_result {
    struct spw_pv_report early, final;
};

/* Trains on the test stream from the file, reporting after `early` examples and at the end. */
static void learn(const struct spw_trainer_params *p, uint64_t early, struct learn_result *res,
                  const char *name)
{
    spw_ref_t *ref = new_ref(p);
    spw_reader_t *reader = open_reader(g_pb_path, SPW_FORMAT_PB);
    assert_int_equal(spw_ref_train_reader(ref, reader, early), SPW_OK);
    spw_ref_report(ref, &res->early);
    assert_int_equal(spw_ref_train_reader(ref, reader, 0), SPW_OK);
    assert_int_equal(spw_ref_flush(ref), SPW_OK);
    spw_ref_report(ref, &res->final);
    struct spw_ref_counts counts;
    spw_ref_get_counts(ref, &counts);
    assert_int_equal(counts.examples, GEN_N);
    assert_int_equal(counts.rejected, 0);
    assert_int_equal(res->final.examples, GEN_N);
    assert_int_equal(res->final.oracle_examples, GEN_N);
    const struct spw_pv_report *e = &res->early, *f = &res->final;
    print_message("%s: at %llu window logloss %.4f (const %.4f, bayes %.4f); at %llu window "
                  "logloss %.4f (const %.4f, bayes %.4f) auc %.4f (bayes %.4f), cumulative "
                  "%.4f (const %.4f, bayes %.4f), %zu rows\n",
                  name, (unsigned long long)e->examples, e->window.logloss, e->const_window,
                  e->oracle_window.logloss, (unsigned long long)f->examples, f->window.logloss,
                  f->const_window, f->oracle_window.logloss, f->window.auc, f->oracle_window.auc,
                  f->cumulative.logloss, f->const_cumulative, f->oracle_cumulative.logloss,
                  spw_ref_rows(ref));
    spw_reader_close(reader);
    spw_ref_destroy(ref);
}

/* The learning bounds shared by LR and FM (observed margins are about twice these). */
static void check_learned(const struct learn_result *r, double below_const, double gap_closed)
{
    const struct spw_pv_report *e = &r->early, *f = &r->final;
    /* clearly below the best constant (which knows the window's ctr in hindsight) */
    assert_true(f->window.logloss < f->const_window - below_const);
    assert_true(f->cumulative.logloss < f->const_cumulative - below_const / 2);
    /* above the Bayes-optimal predictor, and closer to it than early on */
    double gap_early = e->window.logloss - e->oracle_window.logloss;
    double gap_final = f->window.logloss - f->oracle_window.logloss;
    assert_true(gap_final > 0.0);
    assert_true(gap_final < gap_early - gap_closed);
    assert_true(f->window.auc > 0.6);
    assert_true(f->window.auc < f->oracle_window.auc);
}

static void test_trn_ref_fm_learns_toward_bayes(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    struct learn_result r;
    learn(&p, 40000, &r, "fm k=4 adagrad");
    check_learned(&r, 0.01, 0.01);
}

static void test_trn_ref_lr_learns_toward_bayes(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_LR, 0);
    struct learn_result r;
    learn(&p, 40000, &r, "lr adagrad");
    check_learned(&r, 0.01, 0.01);
}

/* Top-k at 0.1 with error feedback still learns, on a tenth of the rows per push. */
static void test_trn_ref_topk_with_error_feedback_learns(void **state)
{
    (void)state;
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.compress = true;
    p.topk.ratio = 0.1;
    p.topk.fp16 = true;
    p.topk.error_feedback = true;
    spw_ref_t *ref = new_ref(&p);
    spw_reader_t *reader = open_reader(g_pb_path, SPW_FORMAT_PB);
    assert_int_equal(spw_ref_train_reader(ref, reader, 0), SPW_OK);
    struct spw_pv_report r;
    spw_ref_report(ref, &r);
    struct spw_topk_stats st;
    spw_ref_topk_stats(ref, &st);
    double ratio = (double)st.bytes_dense / (double)st.bytes_sent;
    print_message("fm topk 0.1 fp16 ef: window logloss %.4f (const %.4f), %.1f bytes/example, "
                  "compression %.1fx, residual rows %zu, forced %llu\n",
                  r.window.logloss, r.const_window, (double)st.bytes_sent / GEN_N, ratio,
                  st.residual_rows, (unsigned long long)st.rows_forced);
    assert_true(ratio > 10.0);
    assert_true(r.window.logloss < r.const_window - 0.005);
    assert_true(st.residual_rows > 0);
    spw_reader_close(reader);
    spw_ref_destroy(ref);
}

/* ---- equivalences on batches built straight from the generator ---- */

struct batches {
    spw_batch_t **b;
    size_t n;
    uint64_t *keys; /* every key seen (with repeats) */
    size_t n_keys, cap_keys;
};

/* n examples from the generator cut into batches of size. */
static void make_batches(struct batches *out, uint64_t n, size_t size)
{
    char errstr[256];
    struct spw_gen_params gp;
    gen_params(&gp, n);
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    assert_non_null(gen);
    memset(out, 0, sizeof(*out));
    out->b = calloc(n / size + 1, sizeof(*out->b));
    assert_non_null(out->b);
    for (uint64_t i = 0; i < n; i++) {
        if (i % size == 0) {
            out->b[out->n++] = spw_batch_new(size, gp.fields, errstr, sizeof(errstr));
            assert_non_null(out->b[out->n - 1]);
        }
        const struct spw_gen_example *ex = spw_gen_next(gen);
        assert_int_equal(spw_batch_add(out->b[out->n - 1], ex->label, ex->oracle_p,
                                       ex->event_time_ms, ex->n_features, ex->keys, NULL),
                         SPW_OK);
        if (out->n_keys + ex->n_features > out->cap_keys) {
            out->cap_keys = 2 * (out->n_keys + ex->n_features);
            out->keys = realloc(out->keys, out->cap_keys * sizeof(uint64_t));
            assert_non_null(out->keys);
        }
        memcpy(out->keys + out->n_keys, ex->keys, ex->n_features * sizeof(uint64_t));
        out->n_keys += ex->n_features;
    }
    spw_gen_destroy(gen);
}

static void free_batches(struct batches *bs)
{
    for (size_t i = 0; i < bs->n; i++)
        spw_batch_destroy(bs->b[i]);
    free(bs->b);
    free(bs->keys);
}

static void train_all(spw_ref_t *ref, const struct batches *bs)
{
    for (size_t i = 0; i < bs->n; i++)
        assert_int_equal(spw_ref_train_batch(ref, bs->b[i]), SPW_OK);
    assert_int_equal(spw_ref_flush(ref), SPW_OK);
}

/* Compares the rows of every key (and the bias) of two trainers; returns the largest
 * difference. */
static double max_row_diff(const spw_ref_t *a, const spw_ref_t *b, const struct batches *bs,
                           uint32_t dim)
{
    double worst = 0.0;
    assert_int_equal(spw_ref_rows(a), spw_ref_rows(b));
    for (size_t i = 0; i <= bs->n_keys; i++) {
        uint64_t key = i < bs->n_keys ? bs->keys[i] : SPW_TRN_BIAS_KEY;
        const float *ra = spw_ref_row(a, key), *rb = spw_ref_row(b, key);
        assert_non_null(ra);
        assert_non_null(rb);
        for (uint32_t d = 0; d < dim; d++)
            worst = fmax(worst, fabs((double)ra[d] - rb[d]));
    }
    return worst;
}

static void test_trn_ref_topk_ratio_one_equals_no_compression(void **state)
{
    (void)state;
    struct batches bs;
    make_batches(&bs, 20000, 256);
    struct spw_trainer_params plain = base_params(SPW_MODEL_FM, 4), topk = plain;
    topk.compress = true; /* through the compressor, keeping every row */
    topk.topk.ratio = 1.0;
    spw_ref_t *a = new_ref(&plain), *b = new_ref(&topk);
    train_all(a, &bs);
    train_all(b, &bs);
    assert_true(max_row_diff(a, b, &bs, plain.model.dim) == 0.0);
    struct spw_topk_stats st;
    spw_ref_topk_stats(b, &st);
    assert_true(st.rows_in > 0 && st.rows_sent == st.rows_in && st.residual_rows == 0);
    spw_ref_topk_stats(a, &st);
    assert_int_equal(st.rows_in, 0);
    spw_ref_destroy(a);
    spw_ref_destroy(b);
    free_batches(&bs);
}

/* SGD: n micro-batches of B accumulated equal one batch of n x B (float tolerance), and both
 * differ clearly from taking n separate steps. */
static void test_trn_ref_accumulation_equals_large_batch(void **state)
{
    (void)state;
    struct batches small, large;
    make_batches(&small, 16384, 64);
    make_batches(&large, 16384, 256);
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.optimizer = SPW_REF_SGD;
    p.lr = 2.0f;
    struct spw_trainer_params acc = p, steps = p;
    acc.acc_steps = 4;
    spw_ref_t *ra = new_ref(&acc), *rl = new_ref(&p), *rs = new_ref(&steps);
    train_all(ra, &small);
    train_all(rl, &large);
    train_all(rs, &small);
    struct spw_ref_counts ca, cl;
    spw_ref_get_counts(ra, &ca);
    spw_ref_get_counts(rl, &cl);
    assert_int_equal(ca.steps, cl.steps);
    assert_int_equal(ca.batches, 4 * cl.batches);
    double same = max_row_diff(ra, rl, &large, p.model.dim);
    double other = max_row_diff(rs, rl, &large, p.model.dim);
    print_message("accumulation: max row difference %.3g vs large batch (%.3g for 4x the steps)\n",
                  same, other);
    assert_true(same < 1e-4);
    assert_true(other > 100 * same && other > 1e-3);
    spw_ref_destroy(ra);
    spw_ref_destroy(rl);
    spw_ref_destroy(rs);
    free_batches(&small);
    free_batches(&large);
}

/* A partial accumulation is applied by flush, and flush also applies every residual. */
static void test_trn_ref_flush_applies_pending(void **state)
{
    (void)state;
    struct batches bs;
    make_batches(&bs, 5 * 128, 128);
    struct spw_trainer_params p = base_params(SPW_MODEL_LR, 0);
    p.acc_steps = 3;
    p.compress = true;
    p.topk.ratio = 0.05;
    spw_ref_t *ref = new_ref(&p);
    for (size_t i = 0; i < bs.n; i++)
        assert_int_equal(spw_ref_train_batch(ref, bs.b[i]), SPW_OK);
    struct spw_ref_counts c;
    spw_ref_get_counts(ref, &c);
    assert_int_equal(c.batches, 5);
    assert_int_equal(c.steps, 1);
    struct spw_topk_stats st;
    spw_ref_topk_stats(ref, &st);
    assert_true(st.residual_rows > 0);
    assert_int_equal(spw_ref_flush(ref), SPW_OK);
    spw_ref_get_counts(ref, &c);
    assert_int_equal(c.steps, 2);
    spw_ref_topk_stats(ref, &st);
    assert_int_equal(st.residual_rows, 0);
    assert_true(st.rows_flushed > 0);
    spw_ref_destroy(ref);
    free_batches(&bs);
}

static void test_trn_ref_skips_malformed_records(void **state)
{
    (void)state;
    char path[64];
    assert_int_equal(write_gen_file(path, sizeof(path), 3000, SPW_FORMAT_JSON, 1000), 0);
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    spw_ref_t *ref = new_ref(&p);
    spw_reader_t *reader = open_reader(path, SPW_FORMAT_JSON);
    assert_int_equal(spw_ref_train_reader(ref, reader, 0), SPW_OK);
    struct spw_ref_counts c;
    spw_ref_get_counts(ref, &c);
    assert_int_equal(c.examples, 3000);
    assert_int_equal(c.rejected, 3);
    assert_int_equal(c.batches, (3000 + 255) / 256);
    spw_reader_close(reader);
    spw_ref_destroy(ref);
    unlink(path);
}

/* The reference starts from a shard's initial rows: uniform in [-init_scale, init_scale). */
static void test_trn_ref_rows_start_like_a_shard(void **state)
{
    (void)state;
    struct batches bs;
    make_batches(&bs, 1, 1);
    struct spw_trainer_params p = base_params(SPW_MODEL_FM, 4);
    p.lr = 0.0f; /* rows stay at their initial values */
    spw_ref_t *a = new_ref(&p), *b = new_ref(&p);
    train_all(a, &bs);
    train_all(b, &bs);
    assert_true(max_row_diff(a, b, &bs, p.model.dim) == 0.0);
    const float *row = spw_ref_row(a, bs.keys[0]);
    assert_non_null(row);
    bool any_nonzero = false;
    for (uint32_t d = 0; d < p.model.dim; d++) {
        assert_true(row[d] >= -p.init_scale && row[d] < p.init_scale);
        any_nonzero |= row[d] != 0.0f;
    }
    assert_true(any_nonzero);
    assert_null(spw_ref_row(a, 12345));
    spw_ref_destroy(a);
    spw_ref_destroy(b);
    free_batches(&bs);
}

SPW_TEST_MAIN_GROUP(setup, teardown, test_trn_ref_fm_learns_toward_bayes,
                    test_trn_ref_lr_learns_toward_bayes,
                    test_trn_ref_topk_with_error_feedback_learns,
                    test_trn_ref_topk_ratio_one_equals_no_compression,
                    test_trn_ref_accumulation_equals_large_batch,
                    test_trn_ref_flush_applies_pending, test_trn_ref_skips_malformed_records,
                    test_trn_ref_rows_start_like_a_shard)
