/* Unit tests of the synthetic click stream generator (tools/src/gen*.c). */
#include "test_main.h" /* cmocka and what it needs first */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/arena.h"
#include "sparrow/config.h"
#include "sparrow/hash.h"
#include "sparrow/ingest.h"
#include "sparrow/tools.h"
#include "sparrow/wire.h"

static spw_gen_t *make_gen(const struct spw_gen_params *params)
{
    char errstr[256] = "";
    spw_gen_t *gen = spw_gen_new(params, errstr, sizeof(errstr));
    if (!gen)
        fail_msg("spw_gen_new: %s", errstr);
    return gen;
}

/* Draws `draws` ranks and checks the frequency of each rank in `ranks` (and of the ranks above
 * `tail_from`, when non-zero) against the exact pmf: within 5 binomial standard deviations. */
static void check_zipf(uint64_t n, double s, size_t draws, const uint64_t *ranks, size_t n_ranks,
                       uint64_t tail_from)
{
    struct spw_gen_zipf *z = malloc(sizeof(*z));
    assert_non_null(z);
    spw_gen_zipf_init(z, n, s);
    struct spw_gen_rng rng;
    spw_gen_rng_seed(&rng, 42);
    size_t *count = calloc(n_ranks, sizeof(*count));
    size_t tail = 0;
    assert_non_null(count);
    for (size_t i = 0; i < draws; i++) {
        uint64_t k = spw_gen_zipf_sample(z, &rng);
        assert_true(k >= 1 && k <= n);
        for (size_t j = 0; j < n_ranks; j++)
            if (k == ranks[j])
                count[j]++;
        if (tail_from && k >= tail_from)
            tail++;
    }
    /* the normaliser once, then each pmf value from it */
    double norm = 1.0 / spw_gen_zipf_pmf(z, 1);
    for (size_t j = 0; j < n_ranks; j++) {
        double p = pow((double)ranks[j], -s) / norm;
        double sd = sqrt((double)draws * p * (1 - p));
        double got = (double)count[j], want = (double)draws * p;
        if (fabs(got - want) > 5 * sd + 1)
            fail_msg("zipf n=%llu s=%g rank %llu: %zu draws, expected %.1f (sd %.1f)",
                     (unsigned long long)n, s, (unsigned long long)ranks[j], count[j], want, sd);
    }
    if (tail_from) {
        double p = 0.0;
        for (uint64_t k = n; k >= tail_from; k--)
            p += pow((double)k, -s);
        p /= norm;
        double sd = sqrt((double)draws * p * (1 - p));
        if (fabs((double)tail - (double)draws * p) > 5 * sd + 1)
            fail_msg("zipf n=%llu s=%g ranks >= %llu: %zu draws, expected %.1f (sd %.1f)",
                     (unsigned long long)n, s, (unsigned long long)tail_from, tail,
                     (double)draws * p, sd);
    }
    free(count);
    free(z);
}

static void test_gen_zipf_small_vocab_matches_pmf(void **state)
{
    (void)state;
    static const uint64_t all10[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    check_zipf(10, 1.1, 200000, all10, 10, 0);
    check_zipf(10, 0.0, 200000, all10, 10, 0); /* uniform */
    check_zipf(10, 1.0, 200000, all10, 10, 0); /* the H(x) = log(x) case */
    static const uint64_t all3[] = {1, 2, 3};
    check_zipf(3, 2.5, 100000, all3, 3, 0);
}

static void test_gen_zipf_head_and_tail_match_pmf(void **state)
{
    (void)state;
    /* ranks on both sides of the alias table's edge, and the tail's total mass */
    static const uint64_t ranks[] = {1, 2, 3, 10, 100, 255, 256, 257, 258, 300, 1000, 5000};
    check_zipf(5000, 1.1, 200000, ranks, sizeof(ranks) / sizeof(ranks[0]), 257);
    check_zipf(5000, 0.7, 200000, ranks, sizeof(ranks) / sizeof(ranks[0]), 257);
    check_zipf(5000, 0.0, 200000, ranks, sizeof(ranks) / sizeof(ranks[0]), 257);
    static const uint64_t big[] = {1, 2, 256, 257, 10000, 1000000};
    check_zipf(1000000, 1.1, 200000, big, sizeof(big) / sizeof(big[0]), 257);
    check_zipf(1000000, 1.0, 200000, big, sizeof(big) / sizeof(big[0]), 100000);
}

/* The alias table's share of the draws is the exact mass of ranks 1..256: the tail's mass comes
 * from the Euler-Maclaurin formula, which this compares with a plain sum. */
static void test_gen_zipf_head_share_is_exact(void **state)
{
    (void)state;
    static const double exps[] = {0.3, 0.9, 1.0, 1.1, 2.5};
    static const uint64_t sizes[] = {257, 300, 5000, 1000000};
    struct spw_gen_zipf z;
    for (size_t i = 0; i < sizeof(exps) / sizeof(exps[0]); i++) {
        for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
            spw_gen_zipf_init(&z, sizes[j], exps[i]);
            double head = 0.0, all = 0.0;
            for (uint64_t k = sizes[j]; k >= 1; k--) {
                double t = pow((double)k, -exps[i]);
                all += t;
                if (k <= SPW_GEN_ZIPF_HEAD)
                    head += t;
            }
            double share = (double)z.head_threshold * 0x1.0p-53;
            if (fabs(share - head / all) > 1e-12)
                fail_msg("n=%llu s=%g: head share %.15f, exact %.15f", (unsigned long long)sizes[j],
                         exps[i], share, head / all);
        }
    }
}

static void test_gen_params_default_matches_table(void **state)
{
    (void)state;
    char errstr[256];
    spw_config_t *cfg =
        spw_config_new(spw_gen_config_props, spw_gen_config_n_props, errstr, sizeof(errstr));
    assert_non_null(cfg);
    struct spw_gen_params a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    spw_gen_params_default(&a);
    spw_gen_params_from_config(cfg, &b);
    assert_int_equal(a.n, b.n);
    assert_int_equal(a.seed, b.seed);
    assert_int_equal(a.fields, b.fields);
    assert_int_equal(a.latent_dim, b.latent_dim);
    assert_int_equal(a.vocab_min, b.vocab_min);
    assert_int_equal(a.vocab_max, b.vocab_max);
    assert_true(a.zipf == b.zipf && a.ctr == b.ctr && a.signal == b.signal);
    assert_true(a.drift == b.drift && a.new_values == b.new_values && a.rate == b.rate);
    assert_int_equal(a.start_ms, b.start_ms);
    assert_int_equal(a.model, b.model);
    assert_int_equal(a.model, SPW_GEN_MODEL_FM);
    assert_string_equal(a.deep_hidden, b.deep_hidden);
    assert_int_equal(a.deep_dim, b.deep_dim);
    assert_true(a.deep_scale == b.deep_scale);
    assert_int_equal(a.deep_fields, b.deep_fields);
    spw_config_destroy(cfg);
}

static void test_gen_rejects_bad_params(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.vocab_min = 100;
    p.vocab_max = 10;
    char errstr[256] = "";
    assert_null(spw_gen_new(&p, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "gen.vocab.min"));
    spw_gen_params_default(&p);
    p.ctr = 1.0;
    assert_null(spw_gen_new(&p, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "gen.ctr"));
}

/* gen.model: a value other than fm or deep is refused, by the property table (naming the
 * choices) and by spw_gen_new; so is a bad deep network. */
static void test_gen_rejects_bad_model(void **state)
{
    (void)state;
    char errstr[256] = "";
    spw_config_t *cfg =
        spw_config_new(spw_gen_config_props, spw_gen_config_n_props, errstr, sizeof(errstr));
    assert_non_null(cfg);
    assert_int_equal(spw_config_set(cfg, "gen.model", "dnn", errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "gen.model"));
    assert_non_null(strstr(errstr, "fm|deep"));
    assert_int_equal(spw_config_set(cfg, "gen.model", "deep", errstr, sizeof(errstr)), SPW_OK);
    struct spw_gen_params p;
    spw_gen_params_from_config(cfg, &p);
    assert_int_equal(p.model, SPW_GEN_MODEL_DEEP);
    spw_config_destroy(cfg);

    enum spw_gen_model m = SPW_GEN_MODEL_DEEP;
    assert_int_equal(spw_gen_model_parse("FM", &m), SPW_ERR_INVALID);
    assert_int_equal(m, SPW_GEN_MODEL_DEEP);
    assert_int_equal(spw_gen_model_parse("fm", &m), SPW_OK);
    assert_int_equal(m, SPW_GEN_MODEL_FM);
    assert_string_equal(spw_gen_model_name(SPW_GEN_MODEL_DEEP), "deep");

    spw_gen_params_default(&p);
    p.model = (enum spw_gen_model)7;
    assert_null(spw_gen_new(&p, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "gen.model must be fm or deep"));
    spw_gen_params_default(&p);
    p.model = SPW_GEN_MODEL_DEEP;
    snprintf(p.deep_hidden, sizeof(p.deep_hidden), "32,x");
    assert_null(spw_gen_new(&p, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "gen.deep.hidden"));
    spw_gen_params_default(&p);
    p.model = SPW_GEN_MODEL_DEEP;
    p.deep_scale = 0.0;
    assert_null(spw_gen_new(&p, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "gen.deep.scale"));
}

static void assert_same_example(const struct spw_gen_example *a, const struct spw_gen_example *b)
{
    assert_int_equal(a->id, b->id);
    assert_int_equal(a->event_time_ms, b->event_time_ms);
    assert_true(a->label == b->label);
    assert_true(a->oracle_p == b->oracle_p);
    assert_int_equal(a->n_features, b->n_features);
    assert_memory_equal(a->fields, b->fields, a->n_features * sizeof(*a->fields));
    assert_memory_equal(a->keys, b->keys, a->n_features * sizeof(*a->keys));
    assert_memory_equal(a->raw, b->raw, a->n_features * sizeof(*a->raw));
}

static void test_gen_deterministic_for_a_seed(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.seed = 5;
    p.drift = 3.0;
    p.new_values = 0.01;
    spw_gen_t *a = make_gen(&p), *b = make_gen(&p);
    p.seed = 6;
    spw_gen_t *c = make_gen(&p);
    assert_true(spw_gen_bias(a, 0) == spw_gen_bias(b, 0));
    assert_true(spw_gen_bias(a, 777777) == spw_gen_bias(b, 777777));
    size_t key_diffs = 0, n_keys = 0;
    for (int i = 0; i < 3000; i++) {
        const struct spw_gen_example *ea = spw_gen_next(a), *eb = spw_gen_next(b);
        const struct spw_gen_example *ec = spw_gen_next(c);
        assert_same_example(ea, eb);
        assert_int_equal(ea->id, (uint64_t)i);
        assert_int_equal(ea->event_time_ms, 1700000000000 + i); /* rate 1000/s: 1 ms apart */
        for (uint32_t f = 0; f < ea->n_features; f++, n_keys++)
            key_diffs += ea->keys[f] != ec->keys[f];
    }
    /* another seed: other vocabularies, raw values and weights, so (nearly) every key differs */
    assert_true(key_diffs > n_keys * 9 / 10);
    spw_gen_destroy(a);
    spw_gen_destroy(b);
    spw_gen_destroy(c);
}

/* The deep model: equal seeds give equal examples across several network blocks; the features
 * and event times are the FM stream's of the same seed, oracle_p is not; another seed differs. */
static void test_gen_deep_deterministic_for_a_seed(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.seed = 5;
    p.new_values = 0.01;
    spw_gen_t *fm = make_gen(&p);
    p.model = SPW_GEN_MODEL_DEEP;
    spw_gen_t *a = make_gen(&p), *b = make_gen(&p);
    p.seed = 6;
    spw_gen_t *c = make_gen(&p);
    assert_true(spw_gen_bias(a, 0) == spw_gen_bias(b, 0));
    assert_true(spw_gen_bias(a, 0) != spw_gen_bias(fm, 0));
    size_t p_diffs = 0, c_diffs = 0;
    const int n = 3 * SPW_GEN_DEEP_BLOCK + 17;
    for (int i = 0; i < n; i++) {
        const struct spw_gen_example *ea = spw_gen_next(a), *eb = spw_gen_next(b);
        const struct spw_gen_example *ef = spw_gen_next(fm), *ec = spw_gen_next(c);
        assert_same_example(ea, eb);
        assert_int_equal(ea->id, (uint64_t)i);
        assert_int_equal(ea->event_time_ms, ef->event_time_ms);
        assert_memory_equal(ea->keys, ef->keys, ea->n_features * sizeof(*ea->keys));
        assert_memory_equal(ea->value_ids, ef->value_ids, ea->n_features * sizeof(uint64_t));
        p_diffs += ea->oracle_p != ef->oracle_p;
        c_diffs += ea->oracle_p != ec->oracle_p;
    }
    assert_true(p_diffs > (size_t)n * 9 / 10);
    assert_true(c_diffs > (size_t)n * 9 / 10);
    spw_gen_destroy(fm);
    spw_gen_destroy(a);
    spw_gen_destroy(b);
    spw_gen_destroy(c);
}

/* The deep model's oracle_p is sigmoid(bias + FM + deep): the FM part as the FM model computes it
 * (same seed, same keys) and the deep part one example at a time; the deep part has the logit
 * spread gen.deep.scale asks for; mean oracle_p is gen.ctr and the labels' rate matches it within
 * sampling error. */
static void check_deep(double ctr, double scale)
{
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.seed = 11;
    p.ctr = ctr;
    spw_gen_t *fm = make_gen(&p);
    p.model = SPW_GEN_MODEL_DEEP;
    p.deep_scale = scale;
    spw_gen_t *gen = make_gen(&p);
    const int n = 40000;
    double sum_p = 0, sum_var = 0, sum_label = 0, sum_d = 0, sum_dd = 0;
    for (int i = 0; i < n; i++) {
        const struct spw_gen_example *ex = spw_gen_next(gen);
        assert_true(ex->label == 0.0f || ex->label == 1.0f);
        sum_p += ex->oracle_p;
        sum_var += (double)ex->oracle_p * (1.0 - (double)ex->oracle_p);
        sum_label += ex->label;
        if (i % 40 == 0) {
            double lf = log(spw_gen_model_p(fm, ex->keys, ex->n_features, ex->id));
            lf -= log1p(-spw_gen_model_p(fm, ex->keys, ex->n_features, ex->id));
            double d = spw_gen_deep_logit(gen, ex->keys);
            double logit = lf - spw_gen_bias(fm, ex->id) + spw_gen_bias(gen, ex->id) + d;
            double prob = 1.0 / (1.0 + exp(-logit));
            if (fabs(prob - (double)ex->oracle_p) > 1e-5)
                fail_msg("example %d: oracle_p %.9g, recomputed %.9g", i, (double)ex->oracle_p,
                         prob);
            assert_true(fabs(spw_gen_model_p(gen, ex->keys, ex->n_features, ex->id) - prob) < 1e-9);
            sum_d += d;
            sum_dd += d * d;
        }
    }
    int m = n / 40;
    double sd = sqrt(sum_dd / m - (sum_d / m) * (sum_d / m));
    if (fabs(sd - scale) > 0.1 * scale)
        fail_msg("deep logit spread %.4f, gen.deep.scale %g", sd, scale);
    double mean_p = sum_p / n, rate = sum_label / n, sigma = sqrt(sum_var) / n;
    if (fabs(mean_p - ctr) > 0.006 + 0.05 * ctr || fabs(rate - mean_p) > 4.5 * sigma)
        fail_msg("ctr %g scale %g: mean p %.5f, label rate %.5f (sigma %.5f)", ctr, scale, mean_p,
                 rate, sigma);
    spw_gen_destroy(fm);
    spw_gen_destroy(gen);
}

static void test_gen_deep_calibrated_and_oracle(void **state)
{
    (void)state;
    check_deep(0.2, 1.0);
    check_deep(0.05, 2.0);
}

static void check_ctr(double ctr, double signal)
{
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.ctr = ctr;
    p.signal = signal;
    p.seed = 11;
    spw_gen_t *gen = make_gen(&p);
    const int n = 50000;
    double sum_label = 0, sum_p = 0;
    for (int i = 0; i < n; i++) {
        const struct spw_gen_example *ex = spw_gen_next(gen);
        assert_true(ex->label == 0.0f || ex->label == 1.0f);
        assert_true(ex->oracle_p > 0.0f && ex->oracle_p < 1.0f);
        sum_label += ex->label;
        sum_p += ex->oracle_p;
    }
    /* the calibration sample's own noise plus 50k labels: a few thousandths; 0.1 ctr leaves room */
    double tol = 0.012 + 0.1 * ctr;
    if (fabs(sum_p / n - ctr) > 0.5 * tol || fabs(sum_label / n - ctr) > tol)
        fail_msg("ctr %g signal %g: mean p %.4f, label mean %.4f", ctr, signal, sum_p / n,
                 sum_label / n);
    spw_gen_destroy(gen);
}

static void test_gen_calibrated_ctr(void **state)
{
    (void)state;
    check_ctr(0.2, 0.8);
    check_ctr(0.03, 1.5);
    check_ctr(0.5, 0.0);
}

/* With drift the popular keys' weights rotate; the bias follows, so that the mean p stays at ctr
 * in every stretch of the stream (without the per-angle bias it swings by about 0.06 here). */
static void test_gen_calibrated_ctr_under_drift(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.drift = 100.0; /* a full turn every 62832 examples */
    spw_gen_t *gen = make_gen(&p);
    const int windows = 10, per = 8000;
    for (int w = 0; w < windows; w++) {
        double sum_p = 0;
        for (int i = 0; i < per; i++)
            sum_p += spw_gen_next(gen)->oracle_p;
        if (fabs(sum_p / per - p.ctr) > 0.012)
            fail_msg("window %d: mean p %.4f, ctr %.2f", w, sum_p / per, p.ctr);
    }
    /* the bias does move with the angle */
    assert_true(spw_gen_bias(gen, 0) != spw_gen_bias(gen, 15708));
    spw_gen_destroy(gen);
}

/* Recomputes oracle_p from the parameters, with the FM's pairwise term as an explicit sum over
 * pairs, and checks keys and raw values against the documented derivation. */
static void check_oracle(const spw_gen_t *gen, const struct spw_gen_example *ex)
{
    const struct spw_gen_params *p = spw_gen_params(gen);
    uint32_t k = p->latent_dim, n = ex->n_features;
    double *w = calloc(n, sizeof(*w)), *v = calloc((size_t)n * (k ? k : 1), sizeof(*v));
    assert_non_null(w);
    assert_non_null(v);
    for (uint32_t i = 0; i < n; i++) {
        char name[16], text[32];
        const char *gname = spw_gen_field_name(gen, i);
        bool is_int = i < ex->n_int;
        snprintf(name, sizeof(name), "%c%u", is_int ? 'I' : 'C',
                 is_int ? i + 1 : i - ex->n_int + 1);
        assert_string_equal(gname, name);
        assert_int_equal(ex->fields[i], spw_hash_field_name(name, strlen(name)));
        if (is_int) {
            assert_int_equal(ex->raw[i], ex->value_ids[i]);
            assert_int_equal(ex->buckets[i], spw_hash_criteo_bucket((int64_t)ex->raw[i]));
            snprintf(text, sizeof(text), "%lld", (long long)ex->buckets[i]);
        } else {
            snprintf(text, sizeof(text), "%08x", (unsigned)ex->raw[i]);
        }
        assert_int_equal(ex->keys[i], spw_hash_key(ex->fields[i], text, strlen(text)));
        spw_gen_model_params(gen, ex->keys[i], ex->id, &w[i], &v[(size_t)i * k]);
    }
    double logit = spw_gen_bias(gen, ex->id);
    for (uint32_t i = 0; i < n; i++)
        logit += w[i];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            for (uint32_t d = 0; d < k; d++)
                logit += v[(size_t)i * k + d] * v[(size_t)j * k + d];
    double prob = 1.0 / (1.0 + exp(-logit));
    if (fabs(prob - (double)ex->oracle_p) > 1e-6)
        fail_msg("example %llu: oracle_p %.9g, recomputed %.9g", (unsigned long long)ex->id,
                 (double)ex->oracle_p, prob);
    assert_true(fabs(spw_gen_model_p(gen, ex->keys, n, ex->id) - prob) < 1e-12);
    free(w);
    free(v);
}

static void test_gen_oracle_is_the_planted_model(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.signal = 2.0; /* spread p away from the bias alone */
    p.drift = 40.0;
    p.new_values = 0.02;
    spw_gen_t *gen = make_gen(&p);
    double min_p = 1, max_p = 0;
    for (int i = 0; i < 2000; i++) {
        const struct spw_gen_example *ex = spw_gen_next(gen);
        if (i % 97 == 0 || i == 1999)
            check_oracle(gen, ex);
        min_p = fmin(min_p, ex->oracle_p);
        max_p = fmax(max_p, ex->oracle_p);
    }
    assert_true(max_p - min_p > 0.5); /* oracle_p does depend on the features */
    spw_gen_destroy(gen);

    /* logistic regression (no latent factors) and an odd latent dimension */
    p.latent_dim = 0;
    gen = make_gen(&p);
    check_oracle(gen, spw_gen_next(gen));
    spw_gen_destroy(gen);
    p.latent_dim = 5;
    p.fields = 7;
    gen = make_gen(&p);
    for (int i = 0; i < 10; i++)
        check_oracle(gen, spw_gen_next(gen));
    spw_gen_destroy(gen);
}

static void test_gen_drift_moves_weights(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.drift = 1.0; /* one radian per million examples */
    spw_gen_t *gen = make_gen(&p);
    uint64_t key = 0x1234567890abcdefull;
    double w0, w1, wq, v0[4], v1[4], vq[4];
    spw_gen_model_params(gen, key, 0, &w0, v0);
    spw_gen_model_params(gen, key, 1000000, &w1, v1);
    /* theta = pi/2 gives g_1 alone, so w(theta = 1) = cos(1) w(0) + sin(1) w(pi/2) */
    spw_gen_model_params(gen, key, (uint64_t)(M_PI / 2 * 1e6 + 0.5), &wq, vq);
    assert_true(fabs(w1 - w0) > 1e-6 || fabs(v1[0] - v0[0]) > 1e-6);
    assert_true(fabs(w1 - (cos(1.0) * w0 + sin(1.0) * wq)) < 1e-5 * (fabs(w0) + fabs(wq) + 1e-9));
    for (int d = 0; d < 4; d++)
        assert_true(fabs(v1[d] - (cos(1.0) * v0[d] + sin(1.0) * vq[d])) <
                    1e-5 * (fabs(v0[d]) + fabs(vq[d]) + 1e-9));
    spw_gen_destroy(gen);

    p.drift = 0.0;
    gen = make_gen(&p);
    double wa, wb, va[4], vb[4];
    spw_gen_model_params(gen, key, 0, &wa, va);
    spw_gen_model_params(gen, key, 123456789012ull, &wb, vb);
    assert_true(wa == wb);
    assert_memory_equal(va, vb, sizeof(va));
    assert_true(wa == w0); /* component g_0 is the same with and without drift */
    spw_gen_destroy(gen);
}

static void test_gen_new_values_rate(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.new_values = 0.05;
    spw_gen_t *gen = make_gen(&p);
    uint32_t nf = p.fields;
    uint64_t *expect_next = calloc(nf, sizeof(*expect_next));
    assert_non_null(expect_next);
    for (uint32_t f = 0; f < nf; f++)
        expect_next[f] = spw_gen_vocab_size(gen, f);
    size_t draws = 0, news = 0;
    for (int i = 0; i < 20000; i++) {
        const struct spw_gen_example *ex = spw_gen_next(gen);
        for (uint32_t f = 0; f < nf; f++) {
            uint64_t id = ex->value_ids[f];
            if (f < ex->n_int) { /* integer fields draw from their vocabulary only */
                assert_true(id < spw_gen_vocab_size(gen, f));
                continue;
            }
            draws++;
            if (id >= spw_gen_vocab_size(gen, f)) {
                /* a new value is one never drawn before: the field's next fresh id */
                assert_int_equal(id, expect_next[f]);
                expect_next[f]++;
                news++;
            }
        }
    }
    double rate = (double)news / (double)draws;
    if (fabs(rate - 0.05) > 0.003)
        fail_msg("new value rate %.4f over %zu draws", rate, draws);
    spw_gen_destroy(gen);

    p.new_values = 0.0;
    gen = make_gen(&p);
    for (int i = 0; i < 2000; i++) {
        const struct spw_gen_example *ex = spw_gen_next(gen);
        for (uint32_t f = 0; f < nf; f++)
            assert_true(ex->value_ids[f] < spw_gen_vocab_size(gen, f));
    }
    spw_gen_destroy(gen);
    free(expect_next);
}

static void test_gen_vocab_sizes_span_the_range(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.vocab_min = 7;
    p.vocab_max = 70000;
    spw_gen_t *gen = make_gen(&p);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t f = 0; f < p.fields; f++) {
        lo = spw_gen_vocab_size(gen, f) < lo ? spw_gen_vocab_size(gen, f) : lo;
        hi = spw_gen_vocab_size(gen, f) > hi ? spw_gen_vocab_size(gen, f) : hi;
    }
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 70000);
    spw_gen_destroy(gen);
}

static void test_gen_criteo_holds_at_most_39_fields(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    char errstr[256] = "";
    p.fields = 40;
    spw_gen_t *gen = make_gen(&p);
    assert_int_equal(spw_gen_check_format(gen, SPW_FORMAT_CRITEO, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "criteo"));
    assert_int_equal(spw_gen_check_format(gen, SPW_FORMAT_PB, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(spw_gen_check_format(gen, SPW_FORMAT_JSON, errstr, sizeof(errstr)), SPW_OK);
    spw_gen_destroy(gen);
    p.fields = 39;
    gen = make_gen(&p);
    assert_int_equal(spw_gen_check_format(gen, SPW_FORMAT_CRITEO, errstr, sizeof(errstr)), SPW_OK);
    spw_gen_destroy(gen);
}

/* Writes n examples of gen in format to a temporary file; returns its path (caller unlinks). */
static char *write_examples(spw_gen_t *gen, enum spw_format format, int n)
{
    char *path = strdup("/tmp/test_gen_XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    struct spw_wire_buf buf = {0};
    for (int i = 0; i < n; i++)
        assert_int_equal(spw_gen_encode(gen, spw_gen_next(gen), format, &buf), SPW_OK);
    assert_int_equal(write(fd, buf.data, buf.len), (ssize_t)buf.len);
    close(fd);
    free(buf.data);
    return path;
}

/* Generates the same stream in each format and reads it back with ingest's reader: the same
 * keys and labels everywhere, and id, event time and oracle_p where the format carries them. */
static void check_roundtrip(uint32_t fields)
{
    const int n = 400;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.fields = fields;
    p.seed = 99;
    p.new_values = 0.05;
    static const enum spw_format formats[] = {SPW_FORMAT_PB, SPW_FORMAT_JSON, SPW_FORMAT_CRITEO};
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_arena_t *arena = spw_arena_new(0, 0);
    assert_non_null(arena);
    for (size_t fi = 0; fi < 3; fi++) {
        enum spw_format format = formats[fi];
        spw_gen_t *writer = make_gen(&p), *truth = make_gen(&p);
        char *path = write_examples(writer, format, n);
        char errstr[256] = "";
        spw_reader_t *reader = spw_reader_open(path, format, &limits, NULL, errstr, sizeof(errstr));
        if (!reader)
            fail_msg("%s: %s", spw_format_name(format), errstr);
        for (int i = 0; i < n; i++) {
            const struct spw_gen_example *ex = spw_gen_next(truth);
            Sparrow__Example *got = NULL;
            struct spw_parse_error perr;
            memset(&perr, 0, sizeof(perr));
            spw_arena_reset(arena);
            spw_err_t err = spw_reader_next(reader, arena, &got, &perr);
            if (err != SPW_OK)
                fail_msg("%s fields=%u record %d: %s (%s)", spw_format_name(format), fields, i,
                         spw_err_str(err), perr.message);
            assert_int_equal(got->n_keys, ex->n_features);
            assert_int_equal(got->n_fields, ex->n_features);
            assert_memory_equal(got->keys, ex->keys, ex->n_features * sizeof(uint64_t));
            assert_memory_equal(got->fields, ex->fields, ex->n_features * sizeof(uint32_t));
            assert_true(got->n_weights == 0);
            assert_true(got->has_label && got->label == ex->label);
            if (format != SPW_FORMAT_CRITEO) {
                assert_true(got->has_id && got->id == ex->id);
                assert_true(got->has_event_time_ms && got->event_time_ms == ex->event_time_ms);
                assert_true(got->has_oracle_p && got->oracle_p == ex->oracle_p);
            }
        }
        Sparrow__Example *extra = NULL;
        struct spw_parse_error perr;
        assert_int_equal(spw_reader_next(reader, arena, &extra, &perr), SPW_ERR_EOF);
        assert_int_equal(spw_reader_rejected(reader), 0);
        spw_reader_close(reader);
        unlink(path);
        free(path);
        spw_gen_destroy(writer);
        spw_gen_destroy(truth);
    }
    spw_arena_destroy(arena);
}

static void test_gen_formats_read_back_identically(void **state)
{
    (void)state;
    check_roundtrip(39); /* every Criteo column */
    check_roundtrip(20); /* 13 integer, 7 categorical: Criteo's C8..C26 empty */
    check_roundtrip(5);  /* categorical only: Criteo's I1..I13 empty */
}

static void test_gen_encodings_are_as_documented(void **state)
{
    (void)state;
    struct spw_gen_params p;
    spw_gen_params_default(&p);
    p.fields = 14; /* I1..I13, C1 */
    spw_gen_t *gen = make_gen(&p);
    const struct spw_gen_example *ex = spw_gen_next(gen);
    struct spw_wire_buf buf = {0};

    assert_int_equal(spw_gen_encode(gen, ex, SPW_FORMAT_CRITEO, &buf), SPW_OK);
    char want[1024];
    int len = snprintf(want, sizeof(want), "%d", (int)ex->label);
    for (int c = 0; c < 13; c++)
        len += snprintf(want + len, sizeof(want) - (size_t)len, "\t%llu",
                        (unsigned long long)ex->raw[c]);
    len += snprintf(want + len, sizeof(want) - (size_t)len, "\t%08x", (unsigned)ex->raw[13]);
    for (int c = 1; c < 26; c++)
        want[len++] = '\t';
    want[len++] = '\n';
    assert_int_equal(buf.len, (size_t)len);
    assert_memory_equal(buf.data, want, (size_t)len);

    buf.len = 0;
    assert_int_equal(spw_gen_encode(gen, ex, SPW_FORMAT_JSON, &buf), SPW_OK);
    len = snprintf(want, sizeof(want), "{\"id\":0,\"label\":%d,\"ts\":1700000000000,\"features\":{",
                   (int)ex->label);
    for (int c = 0; c < 13; c++)
        len += snprintf(want + len, sizeof(want) - (size_t)len, "\"I%d\":\"%lld\",", c + 1,
                        (long long)ex->buckets[c]);
    len += snprintf(want + len, sizeof(want) - (size_t)len, "\"C1\":\"%08x\"},\"oracle_p\":%.9g}\n",
                    (unsigned)ex->raw[13], (double)ex->oracle_p);
    assert_int_equal(buf.len, (size_t)len);
    assert_memory_equal(buf.data, want, (size_t)len);
    free(buf.data);
    spw_gen_destroy(gen);
}

static void test_gen_output_writes_blocks_in_order(void **state)
{
    (void)state;
    char path[] = "/tmp/test_gen_out_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char errstr[256];
    spw_gen_output_t *out = spw_gen_output_start(fd, 4096, errstr, sizeof(errstr));
    assert_non_null(out);
    struct spw_wire_buf *buf = spw_gen_output_buf(out);
    size_t total = 0;
    for (int block = 0; block < 50; block++) {
        size_t len = 1000 + (size_t)block * 97;
        assert_int_equal(spw_wire_buf_reserve(buf, len), SPW_OK);
        for (size_t i = 0; i < len; i++)
            buf->data[buf->len + i] = (uint8_t)((total + i) * 31 + 7);
        buf->len += len;
        total += len;
        assert_int_equal(spw_gen_output_submit(out, &buf), SPW_OK);
        assert_int_equal(buf->len, 0);
    }
    buf->data[0] = (uint8_t)(total * 31 + 7); /* a last partial block, written by finish */
    buf->len = 1;
    total++;
    uint64_t bytes = 0;
    int io_errno = 0;
    assert_int_equal(spw_gen_output_finish(out, &bytes, &io_errno), SPW_OK);
    assert_int_equal(bytes, total);
    uint8_t *back = malloc(total + 1);
    assert_non_null(back);
    assert_int_equal(pread(fd, back, total + 1, 0), (ssize_t)total);
    for (size_t i = 0; i < total; i++)
        if (back[i] != (uint8_t)(i * 31 + 7))
            fail_msg("byte %zu out of order", i);
    free(back);
    close(fd);
    unlink(path);
}

static void test_gen_output_reports_write_errors(void **state)
{
    (void)state;
    char errstr[256];
    uint64_t bytes = 1;
    int io_errno = 0;
    struct spw_wire_buf *buf;
    /* a full device: SPW_ERR_IO with its errno, at the next submit or at finish */
    int fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) {
        spw_gen_output_t *out = spw_gen_output_start(fd, 1024, errstr, sizeof(errstr));
        assert_non_null(out);
        buf = spw_gen_output_buf(out);
        spw_err_t err = SPW_OK;
        for (int i = 0; i < 10 && err == SPW_OK; i++) {
            assert_int_equal(spw_wire_buf_reserve(buf, 2048), SPW_OK);
            memset(buf->data, 'x', 2048);
            buf->len = 2048;
            err = spw_gen_output_submit(out, &buf);
        }
        assert_int_equal(err, SPW_ERR_IO);
        assert_int_equal(spw_gen_output_finish(out, &bytes, &io_errno), SPW_ERR_IO);
        assert_int_equal(io_errno, ENOSPC);
        assert_int_equal(bytes, 0);
        close(fd);
    }
    /* a pipe whose reader is gone: SPW_ERR_STOPPED */
    signal(SIGPIPE, SIG_IGN);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    close(fds[0]);
    spw_gen_output_t *out = spw_gen_output_start(fds[1], 1024, errstr, sizeof(errstr));
    assert_non_null(out);
    buf = spw_gen_output_buf(out);
    assert_int_equal(spw_wire_buf_reserve(buf, 10), SPW_OK);
    memcpy(buf->data, "0123456789", 10);
    buf->len = 10;
    assert_int_equal(spw_gen_output_finish(out, &bytes, &io_errno), SPW_ERR_STOPPED);
    close(fds[1]);
}

SPW_TEST_MAIN(test_gen_rejects_bad_model, test_gen_deep_deterministic_for_a_seed,
              test_gen_deep_calibrated_and_oracle, test_gen_zipf_small_vocab_matches_pmf,
              test_gen_zipf_head_and_tail_match_pmf, test_gen_zipf_head_share_is_exact,
              test_gen_params_default_matches_table, test_gen_rejects_bad_params,
              test_gen_deterministic_for_a_seed, test_gen_calibrated_ctr,
              test_gen_calibrated_ctr_under_drift, test_gen_oracle_is_the_planted_model,
              test_gen_drift_moves_weights, test_gen_new_values_rate,
              test_gen_vocab_sizes_span_the_range, test_gen_criteo_holds_at_most_39_fields,
              test_gen_formats_read_back_identically, test_gen_encodings_are_as_documented,
              test_gen_output_writes_blocks_in_order, test_gen_output_reports_write_errors)
