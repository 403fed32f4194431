/* tools: the synthetic click stream generator (`sparrow gen`). */
#ifndef SPARROW_TOOLS_H
#define SPARROW_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/ingest.h"
#include "sparrow/wire.h"

/*
 * The generator (docs/ARCHITECTURE.md §2). Each example has one feature per field. With F >= 13
 * fields the first 13 are integer-valued (named I1..I13, Criteo's integer columns) and the rest
 * categorical (C1..C(F-13)); with F < 13 every field is categorical (C1..CF). A field's id is
 * spw_hash_field_name(name).
 *
 * Values. Each field has a vocabulary whose size is log-spaced between vocab_min and vocab_max
 * across fields (assigned to fields in a seeded order); a draw takes rank r in [1, size] from a
 * Zipf law of exponent `zipf`, value id r - 1. A fraction new_values of categorical draws instead
 * takes a never-seen id (size + a per-field counter). Raw values:
 *   categorical: 8 lower-case hex digits of the low 32 bits of a seeded mix of (field, id);
 *   integer:     x = id (so 0 is the most popular); its feature is the Criteo bucket
 *                b = spw_hash_criteo_bucket(x), whose raw text is b in decimal.
 * key = spw_hash_key(field id, raw text), so the pb, JSON and Criteo outputs parse (with ingest's
 * parsers) to identical keys.
 *
 * The planted model is a factorization machine over keys, so that oracle_p is a function of the
 * observable features and the Bayes-optimal prediction:
 *   p = sigmoid(bias + sum_i w(k_i, t) + 0.5 * (||sum_i v(k_i, t)||^2 - sum_i ||v(k_i, t)||^2))
 * Parameters come from a hash of (seed, key), no tables: g_c(key) uniform with zero mean, variance
 * signal^2 / F for w and signal * sqrt(2 / (F (F-1) K)) for each of the K latent components, so
 * that the linear and pairwise terms each have variance about signal^2. Drift rotates them:
 * w(k, t) = cos(theta) g_0(k) + sin(theta) g_1(k), theta = drift * t / 1e6, t the example index.
 * The bias makes the mean p of a fixed calibration sample (a separate seeded stream) equal to ctr.
 * With drift the popular keys' weights rotate, and the mean p would swing with them, so the bias
 * is calibrated at SPW_GEN_BIAS_ANGLES angles of theta and interpolated: bias(theta mod 2 pi).
 * oracle_p is then the Bayes-optimal prediction given the features and the example's index (or
 * event time). label ~ Bernoulli(p); event time start_ms + floor(t * 1000 / rate); id = t.
 *
 * The deep model (model = SPW_GEN_MODEL_DEEP, `gen.model = deep`) adds a nonlinear part to that
 * logit, so that a model with a dense tower (DeepFM, DCN-v2) has something an FM cannot learn:
 *   logit += deep_mul * mlp(e_1(k_1) .. e_D(k_D))   (the first D = deep_fields fields, 0: all F)
 * where e_i(k) = spw_dense_planted_embedding(field index i, key k) (deep_dim floats, a pure
 * function of (seed, i, k); each field always has its one feature, so no field is missing) and mlp
 * is sparrow/dense.h's planted network (hidden layers deep_hidden, ReLU, one logit; its weights
 * drawn from the seed). deep_mul = deep_scale / (the standard deviation of mlp over the
 * calibration sample), so that deep_scale is the deep part's logit spread. The deep part does not
 * drift. The bias is calibrated over the total logit (FM + deep), oracle_p = sigmoid(total) is
 * still the Bayes-optimal prediction, and the features, event times and label draws come from
 * the same stream as with the FM model (only oracle_p and so the labels differ). The network runs
 * on blocks of SPW_GEN_DEEP_BLOCK examples, generated ahead; the output stays a function of the
 * seed alone (a shorter run is a prefix of a longer one).
 *
 * Everything is a function of the seed: no time, pid or address enters the output.
 */

/* The planted model (gen.model). */
enum spw_gen_model {
    SPW_GEN_MODEL_FM,   /* "fm": the factorization machine alone */
    SPW_GEN_MODEL_DEEP, /* "deep": the FM plus the planted MLP over field embeddings */
};

/* Room for gen.deep.hidden's text, NUL included. */
#define SPW_GEN_DEEP_HIDDEN_MAX 64

/* The generator's settings (the gen.* properties). */
struct spw_gen_params {
    uint64_t n; /* examples to write; 0 = until stopped (used by the command only) */
    uint64_t seed;
    uint32_t fields;     /* 1..SPW_GEN_MAX_FIELDS */
    uint32_t latent_dim; /* 0..SPW_GEN_MAX_LATENT (0: logistic regression) */
    uint64_t vocab_min;  /* 1 <= vocab_min <= vocab_max <= SPW_GEN_MAX_VOCAB */
    uint64_t vocab_max;
    double zipf;       /* exponent >= 0 (0: uniform) */
    double ctr;        /* target mean p, in (0, 1) */
    double signal;     /* scale of the planted weights, >= 0 */
    double drift;      /* radians of rotation per million examples, >= 0 */
    double new_values; /* fraction of categorical draws that take a new value, in [0, 1] */
    int64_t start_ms;  /* event time of example 0 */
    double rate;       /* examples per second of event time, > 0 */
    enum spw_gen_model model;
    /* the deep model's (ignored with fm): */
    char deep_hidden[SPW_GEN_DEEP_HIDDEN_MAX]; /* hidden widths, "32,16" */
    uint32_t deep_dim;                         /* floats per field embedding, 1..64 */
    double deep_scale;                         /* the deep logit's standard deviation, > 0 */
    uint32_t deep_fields; /* fields the planted network reads: the first deep_fields (the
                           * integer fields come first); 0: all */
};

#define SPW_GEN_MAX_FIELDS  1024
#define SPW_GEN_MAX_LATENT  64
#define SPW_GEN_MAX_VOCAB   1000000000ull
#define SPW_GEN_INT_FIELDS  13 /* integer fields when fields >= 13 */
#define SPW_GEN_CRITEO_CATS 26 /* Criteo's categorical columns */
/* Examples of the bias calibration sample. */
#define SPW_GEN_CALIBRATION_N 8192
/* Angles of the drift's rotation at which the bias is calibrated. */
#define SPW_GEN_BIAS_ANGLES 32
/* Examples per block of the deep model's network (generated ahead, then handed out). */
#define SPW_GEN_DEEP_BLOCK   256
#define SPW_GEN_MAX_DEEP_DIM 64

/* The model's name ("fm", "deep"); NULL for a value outside the enum. Thread-safe. */
const char *spw_gen_model_name(enum spw_gen_model model);

/* Parses "fm" or "deep" into *model; SPW_ERR_INVALID otherwise (*model unchanged). Thread-safe. */
spw_err_t spw_gen_model_parse(const char *text, enum spw_gen_model *model);

/* The property table of `sparrow gen` (gen.*). */
extern const struct spw_config_prop spw_gen_config_props[];
extern const size_t spw_gen_config_n_props;

/* Fills params with the table's defaults (the same values as a fresh spw_config_t). */
void spw_gen_params_default(struct spw_gen_params *params);

/* Reads the gen.* properties of cfg (a configuration of spw_gen_config_props) into params.
 * Range checks are the table's; cross-property checks are spw_gen_new's. */
void spw_gen_params_from_config(const spw_config_t *cfg, struct spw_gen_params *params);

/* ---- building blocks, exposed for tests ---- */

/* xoshiro256** (Blackman & Vigna): the stream's PRNG. Plain struct; one owner. */
struct spw_gen_rng {
    uint64_t s[4];
};

/* Seeds rng from seed through SplitMix64 (any seed, 0 included, gives a valid state). */
void spw_gen_rng_seed(struct spw_gen_rng *rng, uint64_t seed);

static inline uint64_t spw_gen_rng_next(struct spw_gen_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double spw_gen_rng_uniform(struct spw_gen_rng *rng)
{
    return (double)(spw_gen_rng_next(rng) >> 11) * 0x1.0p-53;
}

/* Ranks drawn from the Zipf sampler's alias table (the rest by rejection-inversion). */
#define SPW_GEN_ZIPF_HEAD 256

/*
 * Zipf law over ranks 1..n with P(k) proportional to k^-s, sampled in O(1) time. The first
 * SPW_GEN_ZIPF_HEAD ranks, which hold most of the mass, come from a Walker/Vose alias table (two
 * random words, no transcendental function); the tail's ranks come from rejection-inversion
 * (Hörmann & Derflinger 1996, as Apache Commons RNG's RejectionInversionZipfSampler) restricted to
 * ranks above the head. The head's share is exact up to rounding: the tail's mass is summed with
 * the Euler-Maclaurin formula (relative error far below 1e-12). s = 0 is the uniform law. Plain
 * struct, read-only after init.
 */
struct spw_gen_zipf {
    uint64_t n;
    double s;
    uint32_t head;           /* ranks 1..head come from the alias table */
    uint64_t head_threshold; /* P(rank <= head) * 2^53 */
    /* tail: rejection-inversion over head+1..n */
    double h_integral_lo; /* H(head + 1.5) - h(head + 1): the tail's first rank is always kept */
    double h_integral_n;  /* H(n + 0.5) */
    double squeeze;       /* Commons' `s`: accept k without the exact test when k - x <= squeeze */
    /* head: column c keeps rank c + 1 when 32 random bits are <= alias_keep[c], else moves to
     * rank alias[c] + 1 */
    uint32_t alias_keep[SPW_GEN_ZIPF_HEAD];
    uint8_t alias[SPW_GEN_ZIPF_HEAD];
};

/* Initialises z for n >= 1 ranks and exponent s >= 0 (asserted). */
void spw_gen_zipf_init(struct spw_gen_zipf *z, uint64_t n, double s);

/* Draws a rank in [1, n]. */
uint64_t spw_gen_zipf_sample(const struct spw_gen_zipf *z, struct spw_gen_rng *rng);

/* The exact probability of rank k under z (sums the normaliser; O(n), for tests). */
double spw_gen_zipf_pmf(const struct spw_gen_zipf *z, uint64_t k);

/* ---- the generator ---- */

typedef struct spw_gen spw_gen_t;

/* One generated example. Every array is owned by the generator and valid until its next
 * spw_gen_next or spw_gen_destroy. Feature i belongs to field i. */
struct spw_gen_example {
    uint64_t id; /* the example index t */
    int64_t event_time_ms;
    float label;            /* 0 or 1 */
    float oracle_p;         /* the planted model's p, as written (float) */
    uint32_t n_features;    /* = params.fields */
    uint32_t n_int;         /* the first n_int features are integer-valued (13 or 0) */
    const uint32_t *fields; /* field ids */
    const uint64_t *keys;
    const uint64_t *value_ids; /* rank - 1, or >= the field's vocabulary size for a new value */
    /* Raw value: integer fields x (the Criteo column); categorical fields the 32 bits written
     * as 8 hex digits. */
    const uint64_t *raw;
    const int64_t *buckets; /* integer fields: spw_hash_criteo_bucket(x); categorical: -1 */
};

/* Creates a generator positioned at example 0 and calibrates its bias (the cost of about
 * SPW_GEN_CALIBRATION_N examples, twice that with drift). Copies params. Returns NULL and fills
 * errstr on invalid params (vocab_min > vocab_max, ranges) or when out of memory. */
spw_gen_t *spw_gen_new(const struct spw_gen_params *params, char *errstr, size_t errstr_size);

/* Frees gen. NULL is a no-op. */
void spw_gen_destroy(spw_gen_t *gen);

/* Generates the next example into gen's buffers and returns a view of it (never NULL). No
 * allocation. Not thread-safe: one generator per thread. */
const struct spw_gen_example *spw_gen_next(spw_gen_t *gen);

/* The settings gen was created with (bias not included). */
const struct spw_gen_params *spw_gen_params(const spw_gen_t *gen);

/* Name of field i ("I3", "C7"); static storage owned by gen. */
const char *spw_gen_field_name(const spw_gen_t *gen, uint32_t i);

/* Vocabulary size of field i (new values take ids from this size upwards). */
uint64_t spw_gen_vocab_size(const spw_gen_t *gen, uint32_t i);

/* The planted model's bias at example index t (constant without drift). Pure; thread-safe. */
double spw_gen_bias(const spw_gen_t *gen, uint64_t t);

/* The planted parameters of key at example index t: *w and v[0..latent_dim). Pure; thread-safe. */
void spw_gen_model_params(const spw_gen_t *gen, uint64_t key, uint64_t t, double *w, double *v);

/* The planted model's p for n keys at example index t (the value oracle_p rounds). With the FM
 * model pure and thread-safe. With the deep model keys must be one example's n = fields keys in
 * field order, and the deep part is computed by gen's network: gen's owner thread only, and
 * within float rounding of oracle_p's (the network ran on a block there, on one example here). */
double spw_gen_model_p(const spw_gen_t *gen, const uint64_t *keys, size_t n, uint64_t t);

/* The deep part of the logit (deep_mul * mlp, see above) of one example's `fields` keys, in field
 * order; 0 with the FM model, NAN when the network is out of memory. Owner thread only. */
double spw_gen_deep_logit(const spw_gen_t *gen, const uint64_t *keys);

/* ---- output ---- */

/* SPW_OK when gen's examples can be written in format: Criteo TSV holds at most 13 integer and
 * 26 categorical columns, so fields <= 39. SPW_ERR_INVALID with errstr otherwise. */
spw_err_t spw_gen_check_format(const spw_gen_t *gen, enum spw_format format, char *errstr,
                               size_t errstr_size);

/*
 * Appends ex in format to buf (grown with realloc):
 *   pb:     a varint length prefix and a sparrow.Example (id, label, event_time_ms, fields, keys,
 *           no weights, oracle_p);
 *   json:   {"id":..,"label":..,"ts":..,"features":{"I1":"<bucket>",..,"C1":"<hex>",..},
 *           "oracle_p":..}\n  (oracle_p with 9 significant digits: it reads back as the same
 * float); criteo: label, I1..I13 (the integers x), C1..C26 (hex), tab-separated; columns gen lacks
 * are empty. The format must have passed spw_gen_check_format. SPW_ERR_NOMEM when buf cannot grow.
 */
spw_err_t spw_gen_encode(const spw_gen_t *gen, const struct spw_gen_example *ex,
                         enum spw_format format, struct spw_wire_buf *buf);

/* ---- the command's writer ---- */

/* A double-buffered writer: the caller fills one buffer while a thread writes the other to fd, so
 * that the write(2) calls cost the generating thread nothing. The handle belongs to one caller
 * thread (plus its own writer thread). */
typedef struct spw_gen_output spw_gen_output_t;

/* Starts the writer thread over fd (borrowed: never closed). Blocks are handed over at about
 * block_bytes. NULL with errstr when out of memory or when the thread cannot start. */
spw_gen_output_t *spw_gen_output_start(int fd, size_t block_bytes, char *errstr,
                                       size_t errstr_size);

/* The buffer to append to (owned by out; valid until the next submit or finish). */
struct spw_wire_buf *spw_gen_output_buf(spw_gen_output_t *out);

/* Hands the current buffer to the writer (waiting while the previous block is still being written)
 * and sets *buf to the now empty other buffer. Returns the writer's first error, if any:
 * SPW_ERR_STOPPED when the reader of a pipe went away, SPW_ERR_IO for another write error
 * (nothing more is written after an error). */
spw_err_t spw_gen_output_submit(spw_gen_output_t *out, struct spw_wire_buf **buf);

/* Writes what remains, stops the thread and frees out. Returns the first error as submit does;
 * *bytes receives the bytes written, *io_errno the errno of an SPW_ERR_IO. */
spw_err_t spw_gen_output_finish(spw_gen_output_t *out, uint64_t *bytes, int *io_errno);

#endif
