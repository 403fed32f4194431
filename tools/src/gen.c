/* The synthetic click stream: Zipf vocabularies per field and a planted factorization machine
 * (docs/ARCHITECTURE.md §2; the model is described in sparrow/tools.h). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_int.h"
#include "sparrow/fmt.h"
#include "sparrow/hash.h"
#include "sparrow/tools.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* Domain separators: each seeded stream of the generator starts from mix64(seed ^ one of these),
 * so that no two of them share a state. */
#define DOM_STREAM 0x73747265616d3031ull /* the example stream's rng */
#define DOM_CALIB  0x63616c6962723031ull /* the calibration sample's rng */
#define DOM_VOCAB  0x766f636162733031ull /* the order of vocabulary sizes across fields */
#define DOM_RAW    0x72617776616c3031ull /* categorical raw values */
#define DOM_MODEL0 0x6d6f64656c673030ull /* planted parameters g_0 */
#define DOM_MODEL1 0x6d6f64656c673031ull /* planted parameters g_1 (drift) */

/* Scratch of one feature sample (the example's arrays, or the calibration's). */
struct sample {
    uint64_t *keys;
    uint64_t *value_ids;
    uint64_t *raw;
    int64_t *buckets;
};

static uint32_t raw_of(const struct spw_gen__field *f, uint64_t value_id)
{
    return (uint32_t)spw_hash_mix64(f->raw_base + value_id * GOLDEN);
}

/* spw_hash_key(field, text, 8), i.e. xxHash64 of 8 bytes seeded with the field id, unrolled for
 * exactly 8 bytes given as their little-endian word (the generator hashes every categorical
 * feature; test_gen checks that the two agree). */
static inline uint64_t hash_key8(uint32_t field, uint64_t text_word)
{
    const uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full,
                   p3 = 0x165667B19E3779F9ull, p4 = 0x85EBCA77C2B2AE63ull,
                   p5 = 0x27D4EB2F165667C5ull;
    uint64_t k1 = text_word * p2;
    k1 = ((k1 << 31) | (k1 >> 33)) * p1;
    uint64_t h = (uint64_t)field + p5 + 8;
    h ^= k1;
    h = ((h << 27) | (h >> 37)) * p1 + p4;
    h ^= h >> 33;
    h *= p2;
    h ^= h >> 29;
    h *= p3;
    h ^= h >> 32;
    return h;
}

/* Draws one value per field from rng; new values advance next_new. */
static void sample_features(const spw_gen_t *gen, struct spw_gen_rng *rng, uint64_t *next_new,
                            struct sample *out)
{
    for (uint32_t i = 0; i < gen->n_fields; i++) {
        const struct spw_gen__field *f = &gen->field[i];
        uint64_t v;
        if (!f->is_int && gen->new_threshold != 0 &&
            (spw_gen_rng_next(rng) >> 11) < gen->new_threshold)
            v = next_new[i]++;
        else
            v = spw_gen__zipf_draw(&f->zipf, rng) - 1;
        out->value_ids[i] = v;
        if (f->is_int) {
            /* integer fields draw no new values, so v < vocab and its bucket is in the table */
            int64_t b = v < f->n_small ? f->small_bucket[v] : spw_hash_criteo_bucket((int64_t)v);
            out->raw[i] = v;
            out->buckets[i] = b;
            out->keys[i] = f->bucket_keys[b];
        } else {
            uint32_t r = raw_of(f, v);
            out->raw[i] = r;
            out->buckets[i] = -1;
            out->keys[i] = hash_key8(f->id, spw_gen__hex8_word(r));
        }
    }
}

/* Fills r[0..n_params) with component c's raw parameters of key, each a uniform int32 (the
 * parameter is r * 2^-31 times its scale; w is r[0], v r[1..K]): one SplitMix64 output per two
 * parameters. */
static inline void raw_params(const spw_gen_t *gen, uint64_t key, int c, int32_t *r)
{
    uint64_t base = key + gen->model_seed[c];
    for (uint32_t j = 0; j < gen->n_params; j += 2) {
        uint64_t hbits = spw_hash_mix64(base + (j / 2 + 1) * GOLDEN);
        r[j] = (int32_t)(uint32_t)hbits;
        r[j + 1] = (int32_t)(uint32_t)(hbits >> 32);
    }
}

/* Rotation of the parameters at example t: cos and sin of theta (1, 0 without drift). */
static void drift_at(const spw_gen_t *gen, uint64_t t, double *c, double *s)
{
    if (gen->params.drift == 0.0) {
        *c = 1.0;
        *s = 0.0;
        return;
    }
    double theta = gen->params.drift * ((double)t / 1e6);
    *c = cos(theta);
    *s = sin(theta);
}

/* The rotated raw parameters g[0..n_params) of key under (c, s), in units of 2^-31. */
static inline void rotated_params(const spw_gen_t *gen, uint64_t key, double c, double s, double *g)
{
    int32_t r0[SPW_GEN_MAX_LATENT + 2], r1[SPW_GEN_MAX_LATENT + 2];
    uint32_t n = gen->n_params;
    raw_params(gen, key, 0, r0);
    if (s == 0.0) {
        for (uint32_t d = 0; d < n; d++)
            g[d] = (double)r0[d];
        return;
    }
    raw_params(gen, key, 1, r1);
    for (uint32_t d = 0; d < n; d++)
        g[d] = c * (double)r0[d] + s * (double)r1[d];
}

/* The logit without the bias, under rotation (c, s). Sums the raw parameters and scales once at the
 * end; every parameter has its own accumulators so that the additions do not form one serial chain.
 */
static double logit_of(const spw_gen_t *gen, const uint64_t *keys, size_t n, double c, double s)
{
    uint32_t k = gen->latent_dim, np = gen->n_params;
    double sum[SPW_GEN_MAX_LATENT + 2] = {0}, sq[SPW_GEN_MAX_LATENT + 2] = {0};
    if (s == 0.0) { /* no drift: straight from the hash words */
        uint64_t seed = gen->model_seed[0];
        for (size_t i = 0; i < n; i++) {
            uint64_t base = keys[i] + seed;
            for (uint32_t j = 0; j < np; j += 2) {
                uint64_t hbits = spw_hash_mix64(base + (j / 2 + 1) * GOLDEN);
                double lo = (double)(int32_t)(uint32_t)hbits;
                double hi = (double)(int32_t)(uint32_t)(hbits >> 32);
                sum[j] += lo;
                sq[j] += lo * lo;
                sum[j + 1] += hi;
                sq[j + 1] += hi * hi;
            }
        }
    } else {
        double g[SPW_GEN_MAX_LATENT + 2];
        for (size_t i = 0; i < n; i++) {
            rotated_params(gen, keys[i], c, s, g);
            for (uint32_t d = 0; d < np; d++) {
                sum[d] += g[d];
                sq[d] += g[d] * g[d];
            }
        }
    }
    double pair = 0.0; /* over the latent components 1..K, not the padding parameter */
    for (uint32_t d = 1; d <= k && d < np; d++)
        pair += sum[d] * sum[d] - sq[d];
    double unit_w = gen->scale_w * 0x1.0p-31, unit_v = gen->scale_v * 0x1.0p-31;
    return unit_w * sum[0] + 0.5 * unit_v * unit_v * pair;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* The bias b with mean(sigmoid(b + logit[e])) = ctr: Newton's method on that increasing function,
 * kept inside a shrinking bracket (bisecting whenever a step would leave it). start is a guess. */
static double solve_bias(const double *logit, size_t n, double ctr, double start)
{
    double lo = -200.0, hi = 200.0, b = start;
    for (int it = 0; it < 200 && hi - lo > 1e-12; it++) {
        double f = 0.0, df = 0.0;
        for (size_t e = 0; e < n; e++) {
            double p = sigmoid(b + logit[e]);
            f += p;
            df += p * (1.0 - p);
        }
        f = f / (double)n - ctr;
        df /= (double)n;
        if (f < 0)
            lo = b;
        else
            hi = b;
        double next = df > 0 ? b - f / df : 0.5 * (lo + hi);
        if (!(next > lo && next < hi))
            next = 0.5 * (lo + hi);
        if (fabs(next - b) < 1e-13)
            return next;
        b = next;
    }
    return 0.5 * (lo + hi);
}

/*
 * The logit of one example as a function of the angle: with g = c r0 + s r1 for each parameter,
 *   logit(c, s) = uw (c A + s B) + 0.5 uv^2 (c^2 P00 + 2 c s P01 + s^2 P11)
 * where A, B sum w's raw g_0 and g_1 parts and P.. are the pairwise sums
 *   Pxy = sum_d (sum_i rx_id) (sum_i ry_id) - sum_i rx_id ry_id.
 * So one pass over the keys serves every calibration angle.
 */
struct angle_moments {
    double a, b, p00, p01, p11;
};

static void moments_of(const spw_gen_t *gen, const uint64_t *keys, size_t n, bool drift,
                       struct angle_moments *m)
{
    uint32_t k = gen->latent_dim;
    int32_t r0[SPW_GEN_MAX_LATENT + 2], r1[SPW_GEN_MAX_LATENT + 2] = {0};
    double s0[SPW_GEN_MAX_LATENT + 1] = {0}, s1[SPW_GEN_MAX_LATENT + 1] = {0};
    double q00 = 0.0, q01 = 0.0, q11 = 0.0;
    memset(m, 0, sizeof(*m));
    for (size_t i = 0; i < n; i++) {
        raw_params(gen, keys[i], 0, r0);
        if (drift)
            raw_params(gen, keys[i], 1, r1);
        m->a += r0[0];
        m->b += r1[0];
        for (uint32_t d = 1; d <= k && d < gen->n_params; d++) {
            double x = r0[d], y = r1[d];
            s0[d] += x;
            s1[d] += y;
            q00 += x * x;
            q01 += x * y;
            q11 += y * y;
        }
    }
    for (uint32_t d = 1; d <= k; d++) {
        m->p00 += s0[d] * s0[d];
        m->p01 += s0[d] * s1[d];
        m->p11 += s1[d] * s1[d];
    }
    m->p00 -= q00;
    m->p01 -= q01;
    m->p11 -= q11;
}

/* Calibration example e of n (keys): embeds it into row e % SPW_GEN_DEEP_BLOCK of the block and,
 * when the block is full or e is the last, runs the network over it into raw[e0..e]. Blocks of the
 * same size as the stream's. */
static spw_err_t deep_logits(spw_gen_t *gen, const uint64_t *keys, size_t e, size_t n, double *raw)
{
    size_t width = (size_t)gen->deep_fields * gen->params.deep_dim, r = e % SPW_GEN_DEEP_BLOCK;
    spw_gen__deep_embed(gen, keys, gen->deep_x + r * width);
    if (r + 1 < SPW_GEN_DEEP_BLOCK && e + 1 < n)
        return SPW_OK;
    spw_err_t err = spw_dense_planted_logits(gen->planted, gen->deep_x, r + 1, gen->deep_logit);
    for (size_t i = 0; i <= r; i++)
        raw[e - r + i] = gen->deep_logit[i];
    return err;
}

/* deep_mul: deep_scale over the standard deviation of the network's logits raw[0..n). */
static void scale_deep(spw_gen_t *gen, const double *raw, size_t n)
{
    double sum = 0.0, sq = 0.0;
    for (size_t e = 0; e < n; e++)
        sum += raw[e];
    double mean = sum / (double)n;
    for (size_t e = 0; e < n; e++)
        sq += (raw[e] - mean) * (raw[e] - mean);
    double sd = sqrt(sq / (double)n);
    gen->deep_mul = sd > 0.0 ? gen->params.deep_scale / sd : 0.0;
}

/* Sets the bias table: for each of the angles (one without drift) the bias that makes the mean p
 * of a fixed calibration sample (its own seeded stream) equal to params.ctr. */
static int calibrate(spw_gen_t *gen)
{
    uint32_t nf = gen->n_fields;
    const size_t n = SPW_GEN_CALIBRATION_N;
    double *logit = malloc(n * sizeof(*logit));
    struct angle_moments *mom = malloc(n * sizeof(*mom));
    uint64_t *scratch = malloc((size_t)nf * 4 * sizeof(uint64_t));
    int64_t *buckets = malloc((size_t)nf * sizeof(*buckets));
    bool deep = gen->planted != NULL;
    double *deep_raw = deep ? malloc(n * sizeof(*deep_raw)) : NULL;
    int rc = SPW_ERR_NOMEM;
    if (!logit || !mom || !scratch || !buckets || (deep && !deep_raw))
        goto out_free;
    uint64_t *next_new = scratch + 3 * (size_t)nf;
    for (uint32_t i = 0; i < nf; i++)
        next_new[i] = gen->field[i].vocab;
    struct spw_gen_rng rng;
    spw_gen_rng_seed(&rng, spw_hash_mix64(gen->params.seed ^ DOM_CALIB));
    struct sample smp = {scratch, scratch + nf, scratch + 2 * (size_t)nf, buckets};
    for (size_t e = 0; e < n; e++) {
        sample_features(gen, &rng, next_new, &smp);
        moments_of(gen, smp.keys, nf, gen->n_angles > 1, &mom[e]);
        if (deep && deep_logits(gen, smp.keys, e, n, deep_raw) != SPW_OK)
            goto out_free;
    }
    if (deep)
        scale_deep(gen, deep_raw, n);
    double uw = gen->scale_w * 0x1.0p-31, uv = gen->scale_v * 0x1.0p-31;
    double b = log(gen->params.ctr / (1.0 - gen->params.ctr));
    for (uint32_t a = 0; a < gen->n_angles; a++) {
        double theta = 2.0 * M_PI * (double)a / (double)gen->n_angles;
        double c = a ? cos(theta) : 1.0, s = a ? sin(theta) : 0.0;
        for (size_t e = 0; e < n; e++) {
            const struct angle_moments *m = &mom[e];
            logit[e] = uw * (c * m->a + s * m->b) +
                       0.5 * uv * uv * (c * c * m->p00 + 2.0 * c * s * m->p01 + s * s * m->p11);
            if (deep)
                logit[e] += gen->deep_mul * deep_raw[e];
        }
        b = solve_bias(logit, n, gen->params.ctr, b);
        gen->bias[a] = b;
    }
    gen->bias[gen->n_angles] = gen->bias[0]; /* the table is periodic */
    rc = SPW_OK;
out_free:
    free(deep_raw);
    free(logit);
    free(mom);
    free(scratch);
    free(buckets);
    return rc;
}

/* The bias at example t: the calibrated table interpolated at theta mod 2 pi. */
static double bias_at(const spw_gen_t *gen, uint64_t t)
{
    if (gen->n_angles == 1)
        return gen->bias[0];
    double turns = gen->params.drift * ((double)t / 1e6) / (2.0 * M_PI);
    double x = (turns - floor(turns)) * gen->n_angles;
    uint32_t j = (uint32_t)x;
    if (j >= gen->n_angles) /* turns - floor(turns) rounded up to 1 */
        j = gen->n_angles - 1;
    double frac = x - (double)j;
    return gen->bias[j] + frac * (gen->bias[j + 1] - gen->bias[j]);
}

/* Keep in step with gen_config.c's table (test_gen checks that they agree). */
void spw_gen_params_default(struct spw_gen_params *params)
{
    *params = (struct spw_gen_params){
        .n = 100000,
        .seed = 1,
        .fields = 39,
        .latent_dim = 4,
        .vocab_min = 10,
        .vocab_max = 1000000,
        .zipf = 1.1,
        .ctr = 0.2,
        .signal = 0.8,
        .drift = 0.0,
        .new_values = 0.001,
        .start_ms = 1700000000000,
        .rate = 1000.0,
        .model = SPW_GEN_MODEL_FM,
        .deep_hidden = "32,16",
        .deep_dim = 4,
        .deep_scale = 2.0,
        .deep_fields = 8,
    };
}

static int check_params(const struct spw_gen_params *p, char *errstr, size_t errstr_size)
{
    const char *why = NULL;
    if (p->fields < 1 || p->fields > SPW_GEN_MAX_FIELDS)
        why = "gen.fields must be in [1, 1024]";
    else if (p->latent_dim > SPW_GEN_MAX_LATENT)
        why = "gen.latent_dim must be in [0, 64]";
    else if (p->vocab_min < 1 || p->vocab_max > SPW_GEN_MAX_VOCAB)
        why = "gen.vocab.min and gen.vocab.max must be in [1, 1e9]";
    else if (p->vocab_min > p->vocab_max)
        why = "gen.vocab.min must not exceed gen.vocab.max";
    else if (!(p->zipf >= 0.0 && p->zipf <= 100.0))
        why = "gen.zipf must be in [0, 100]";
    else if (!(p->ctr > 0.0 && p->ctr < 1.0))
        why = "gen.ctr must be in (0, 1)";
    else if (!(p->signal >= 0.0 && p->signal <= 100.0))
        why = "gen.signal must be in [0, 100]";
    else if (!(p->drift >= 0.0 && isfinite(p->drift)))
        why = "gen.drift must be finite and >= 0";
    else if (!(p->new_values >= 0.0 && p->new_values <= 1.0))
        why = "gen.new_values must be in [0, 1]";
    else if (!(p->rate > 0.0 && isfinite(p->rate)))
        why = "gen.rate must be finite and > 0";
    else if (!spw_gen_model_name(p->model))
        why = "gen.model must be fm or deep";
    else if (p->model == SPW_GEN_MODEL_DEEP &&
             (p->deep_dim < 1 || p->deep_dim > SPW_GEN_MAX_DEEP_DIM))
        why = "gen.deep.dim must be in [1, 64]";
    else if (p->model == SPW_GEN_MODEL_DEEP && !(p->deep_scale > 0.0 && p->deep_scale <= 100.0))
        why = "gen.deep.scale must be in (0, 100]";
    else if (p->model == SPW_GEN_MODEL_DEEP &&
             !memchr(p->deep_hidden, '\0', sizeof(p->deep_hidden)))
        why = "gen.deep.hidden is not a terminated string";
    if (why) {
        snprintf(errstr, errstr_size, "%s", why);
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}

/* Vocabulary sizes log-spaced from vocab_min to vocab_max, dealt to fields in a seeded order. */
static void assign_vocab(spw_gen_t *gen)
{
    uint32_t nf = gen->n_fields;
    double lmin = log((double)gen->params.vocab_min), lmax = log((double)gen->params.vocab_max);
    struct spw_gen_rng rng;
    spw_gen_rng_seed(&rng, spw_hash_mix64(gen->params.seed ^ DOM_VOCAB));
    for (uint32_t i = 0; i < nf; i++) {
        double frac = nf > 1 ? (double)i / (double)(nf - 1) : 1.0;
        double size = floor(exp(lmin + frac * (lmax - lmin)) + 0.5);
        uint64_t v = (uint64_t)size;
        if (v < gen->params.vocab_min)
            v = gen->params.vocab_min;
        if (v > gen->params.vocab_max)
            v = gen->params.vocab_max;
        gen->field[i].vocab = v;
    }
    for (uint32_t i = nf; i > 1; i--) { /* Fisher-Yates: swap entry i - 1 with one of 0..i-1 */
        uint32_t j = (uint32_t)(spw_gen_rng_next(&rng) % i);
        uint64_t tmp = gen->field[i - 1].vocab;
        gen->field[i - 1].vocab = gen->field[j].vocab;
        gen->field[j].vocab = tmp;
    }
}

spw_gen_t *spw_gen_new(const struct spw_gen_params *params, char *errstr, size_t errstr_size)
{
    if (check_params(params, errstr, errstr_size) != SPW_OK)
        return NULL;
    spw_gen_t *gen = calloc(1, sizeof(*gen));
    if (!gen)
        goto out_nomem;
    gen->params = *params;
    uint32_t nf = params->fields;
    gen->n_fields = nf;
    gen->latent_dim = params->latent_dim;
    gen->n_params = 2 * ((params->latent_dim + 2) / 2);
    gen->n_int = nf >= SPW_GEN_INT_FIELDS ? SPW_GEN_INT_FIELDS : 0;
    gen->field = calloc(nf, sizeof(*gen->field));
    gen->fields = calloc(nf, sizeof(*gen->fields));
    gen->keys = calloc(nf, sizeof(*gen->keys));
    gen->value_ids = calloc(nf, sizeof(*gen->value_ids));
    gen->raw = calloc(nf, sizeof(*gen->raw));
    gen->buckets = calloc(nf, sizeof(*gen->buckets));
    gen->next_new = calloc(nf, sizeof(*gen->next_new));
    if (!gen->field || !gen->fields || !gen->keys || !gen->value_ids || !gen->raw ||
        !gen->buckets || !gen->next_new)
        goto out_free_gen;

    assign_vocab(gen);
    uint64_t raw_seed = spw_hash_mix64(params->seed ^ DOM_RAW);
    for (uint32_t i = 0; i < nf; i++) {
        struct spw_gen__field *f = &gen->field[i];
        f->is_int = i < gen->n_int;
        f->name_len = (uint32_t)snprintf(f->name, sizeof(f->name), "%c%u", f->is_int ? 'I' : 'C',
                                         f->is_int ? i + 1 : i - gen->n_int + 1);
        f->id = spw_hash_field_name(f->name, f->name_len);
        f->raw_base = spw_hash_mix64(raw_seed + (uint64_t)i * GOLDEN);
        spw_gen_zipf_init(&f->zipf, f->vocab, params->zipf);
        if (f->is_int) { /* the keys of every bucket the field's values 0..vocab-1 reach */
            size_t nb = (size_t)spw_hash_criteo_bucket((int64_t)f->vocab - 1) + 1;
            f->bucket_keys = malloc(nb * sizeof(*f->bucket_keys));
            if (!f->bucket_keys)
                goto out_free_gen;
            for (size_t b = 0; b < nb; b++) {
                char text[24];
                size_t len = spw_fmt_u64(text, b);
                f->bucket_keys[b] = spw_hash_key(f->id, text, len);
            }
            f->n_small = f->vocab < SPW_GEN__SMALL_INTS ? f->vocab : SPW_GEN__SMALL_INTS;
            for (uint64_t x = 0; x < f->n_small; x++)
                f->small_bucket[x] = (uint16_t)spw_hash_criteo_bucket((int64_t)x);
        }
        gen->fields[i] = f->id;
        gen->next_new[i] = f->vocab;
    }
    /* 2^53 * fraction, compared with 53 random bits; 1.0 gives 2^53, always below */
    gen->new_threshold = (uint64_t)(params->new_values * 0x1.0p53);
    gen->model_seed[0] = spw_hash_mix64(params->seed ^ DOM_MODEL0);
    gen->model_seed[1] = spw_hash_mix64(params->seed ^ DOM_MODEL1);
    /* uniform on [-a, a] has variance a^2 / 3 */
    double sigma_w = params->signal / sqrt((double)nf);
    double pairs = 0.5 * (double)nf * (double)(nf > 1 ? nf - 1 : 1);
    double sigma_v =
        gen->latent_dim ? sqrt(params->signal / sqrt(pairs * (double)gen->latent_dim)) : 0.0;
    gen->scale_w = sqrt(3.0) * sigma_w;
    gen->scale_v = sqrt(3.0) * sigma_v;

    if (params->model == SPW_GEN_MODEL_DEEP &&
        spw_gen__deep_init(gen, errstr, errstr_size) != SPW_OK) {
        spw_gen_destroy(gen);
        return NULL;
    }
    gen->n_angles = params->drift > 0.0 ? SPW_GEN_BIAS_ANGLES : 1;
    if (calibrate(gen) != SPW_OK)
        goto out_free_gen;
    spw_gen_rng_seed(&gen->rng, spw_hash_mix64(params->seed ^ DOM_STREAM));

    gen->ex.n_features = nf;
    gen->ex.n_int = gen->n_int;
    gen->ex.fields = gen->fields;
    gen->ex.keys = gen->keys;
    gen->ex.value_ids = gen->value_ids;
    gen->ex.raw = gen->raw;
    gen->ex.buckets = gen->buckets;
    return gen;

out_free_gen:
    spw_gen_destroy(gen);
out_nomem:
    snprintf(errstr, errstr_size, "out of memory creating the generator");
    return NULL;
}

void spw_gen_destroy(spw_gen_t *gen)
{
    if (!gen)
        return;
    for (uint32_t i = 0; gen->field && i < gen->n_fields; i++)
        free(gen->field[i].bucket_keys);
    free(gen->field);
    free(gen->fields);
    free(gen->keys);
    free(gen->value_ids);
    free(gen->raw);
    free(gen->buckets);
    free(gen->next_new);
    spw_gen__deep_free(gen);
    free(gen);
}

/* The deep model's next block: the same draws as the FM stream's examples (features, then the
 * label's uniform), the embeddings, and the network over the block. The rows' arrays replace the
 * example's. */
static void deep_fill_block(spw_gen_t *gen)
{
    uint32_t nf = gen->n_fields;
    size_t width = (size_t)gen->deep_fields * gen->params.deep_dim;
    for (size_t r = 0; r < SPW_GEN_DEEP_BLOCK; r++) {
        size_t o = r * nf;
        struct sample smp = {gen->blk_keys + o, gen->blk_value_ids + o, gen->blk_raw + o,
                             gen->blk_buckets + o};
        sample_features(gen, &gen->rng, gen->next_new, &smp);
        gen->blk_u[r] = spw_gen_rng_uniform(&gen->rng);
        spw_gen__deep_embed(gen, smp.keys, gen->deep_x + r * width);
    }
    /* the workspace was sized for this block in calibration: no allocation, no failure */
    spw_err_t err =
        spw_dense_planted_logits(gen->planted, gen->deep_x, SPW_GEN_DEEP_BLOCK, gen->deep_logit);
    assert(err == SPW_OK);
    (void)err;
    gen->blk_next = 0;
    gen->blk_len = SPW_GEN_DEEP_BLOCK;
}

static const struct spw_gen_example *deep_next(spw_gen_t *gen)
{
    if (gen->blk_next == gen->blk_len)
        deep_fill_block(gen);
    uint32_t r = gen->blk_next++;
    size_t o = (size_t)r * gen->n_fields;
    uint64_t t = gen->t++;
    struct spw_gen_example *ex = &gen->ex;
    ex->keys = gen->blk_keys + o;
    ex->value_ids = gen->blk_value_ids + o;
    ex->raw = gen->blk_raw + o;
    ex->buckets = gen->blk_buckets + o;
    double c, s;
    drift_at(gen, t, &c, &s);
    double logit = bias_at(gen, t) + logit_of(gen, ex->keys, gen->n_fields, c, s) +
                   gen->deep_mul * (double)gen->deep_logit[r];
    double p = sigmoid(logit);
    ex->id = t;
    double dt = floor((double)t * 1000.0 / gen->params.rate);
    double room = (double)INT64_MAX - (double)gen->params.start_ms;
    ex->event_time_ms = dt < room ? gen->params.start_ms + (int64_t)dt : INT64_MAX;
    ex->oracle_p = (float)p;
    ex->label = gen->blk_u[r] < p ? 1.0f : 0.0f;
    return ex;
}

const struct spw_gen_example *spw_gen_next(spw_gen_t *gen)
{
    if (gen->planted)
        return deep_next(gen);
    uint64_t t = gen->t++;
    struct sample smp = {gen->keys, gen->value_ids, gen->raw, gen->buckets};
    sample_features(gen, &gen->rng, gen->next_new, &smp);
    double p = spw_gen_model_p(gen, gen->keys, gen->n_fields, t);
    struct spw_gen_example *ex = &gen->ex;
    ex->id = t;
    double dt = floor((double)t * 1000.0 / gen->params.rate);
    double room = (double)INT64_MAX - (double)gen->params.start_ms;
    ex->event_time_ms = dt < room ? gen->params.start_ms + (int64_t)dt : INT64_MAX;
    ex->oracle_p = (float)p;
    ex->label = spw_gen_rng_uniform(&gen->rng) < p ? 1.0f : 0.0f;
    return ex;
}

const struct spw_gen_params *spw_gen_params(const spw_gen_t *gen)
{
    return &gen->params;
}

const char *spw_gen_field_name(const spw_gen_t *gen, uint32_t i)
{
    assert(i < gen->n_fields);
    return gen->field[i].name;
}

uint64_t spw_gen_vocab_size(const spw_gen_t *gen, uint32_t i)
{
    assert(i < gen->n_fields);
    return gen->field[i].vocab;
}

double spw_gen_bias(const spw_gen_t *gen, uint64_t t)
{
    return bias_at(gen, t);
}

void spw_gen_model_params(const spw_gen_t *gen, uint64_t key, uint64_t t, double *w, double *v)
{
    double c, s, g[SPW_GEN_MAX_LATENT + 2] = {0};
    drift_at(gen, t, &c, &s);
    rotated_params(gen, key, c, s, g);
    *w = gen->scale_w * 0x1.0p-31 * g[0];
    for (uint32_t d = 0; d < gen->latent_dim; d++)
        v[d] = gen->scale_v * 0x1.0p-31 * g[1 + d];
}

double spw_gen_model_p(const spw_gen_t *gen, const uint64_t *keys, size_t n, uint64_t t)
{
    double c, s;
    drift_at(gen, t, &c, &s);
    double deep = 0.0;
    if (gen->planted) {
        assert(n == gen->n_fields);
        deep = spw_gen_deep_logit(gen, keys);
    }
    return sigmoid(bias_at(gen, t) + logit_of(gen, keys, n, c, s) + deep);
}
