/* Private to the generator's files: the generator's state. */
#ifndef SPARROW_TOOLS_GEN_INT_H
#define SPARROW_TOOLS_GEN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/dense.h"
#include "sparrow/hash.h"
#include "sparrow/tools.h"

/* Integer values whose Criteo bucket is looked up rather than computed (most draws: Zipf). */
#define SPW_GEN__SMALL_INTS 1024

struct spw_gen__field {
    struct spw_gen_zipf zipf;
    uint64_t vocab;    /* ranks 1..vocab; new values take ids vocab, vocab + 1, ... */
    uint64_t raw_base; /* seeds the field's categorical raw values */
    uint32_t id;       /* spw_hash_field_name(name) */
    bool is_int;
    char name[8]; /* "I13", "C1011" */
    uint32_t name_len;
    uint64_t *bucket_keys; /* integer fields: key of each Criteo bucket their values reach */
    uint64_t n_small;      /* integer fields: values below this have their bucket in the table */
    uint16_t small_bucket[SPW_GEN__SMALL_INTS];
};

/* One owner (see spw_gen_next). Arrays have n_fields entries. */
struct spw_gen {
    struct spw_gen_params params;
    uint32_t n_fields, n_int, latent_dim;
    uint32_t n_params; /* raw parameters per key: w, K latent, and one of padding when K is even */
    struct spw_gen__field *field;
    uint64_t new_threshold;  /* a categorical draw is new when 53 random bits fall below this */
    uint64_t model_seed[2];  /* g_0 and g_1 of the planted parameters */
    double scale_w, scale_v; /* half-widths of the parameters' uniform laws */
    /* the bias at n_angles angles of theta evenly over [0, 2 pi), and again at 2 pi */
    uint32_t n_angles;
    double bias[SPW_GEN_BIAS_ANGLES + 1];
    struct spw_gen_rng rng; /* the example stream */
    uint64_t t;             /* index of the next example */
    uint64_t *next_new;     /* next new value id per field */
    /* the current example */
    uint32_t *fields;
    uint64_t *keys;
    uint64_t *value_ids;
    uint64_t *raw;
    int64_t *buckets;
    struct spw_gen_example ex;
    /* the deep model (NULL / unused with fm): blocks of SPW_GEN_DEEP_BLOCK examples, generated
     * ahead; row r of each array is example blk_t0 + r */
    spw_dense_planted_t *planted;
    uint32_t deep_fields; /* fields the planted network reads (params.deep_fields, 0 -> all) */
    double deep_mul;      /* deep_scale / the planted network's spread on the calibration sample */
    float *deep_x;        /* SPW_GEN_DEEP_BLOCK × (n_fields × deep_dim) embeddings */
    float *deep_logit;    /* SPW_GEN_DEEP_BLOCK raw network logits */
    double *blk_u;        /* the label's uniform draw of each row */
    uint64_t *blk_keys, *blk_value_ids, *blk_raw; /* SPW_GEN_DEEP_BLOCK × n_fields */
    int64_t *blk_buckets;
    uint32_t blk_next, blk_len; /* next row to hand out; rows filled */
};

/* ---- the deep model (gen_deep.c) ---- */

/* Creates gen->planted and the block arrays from gen->params (model deep). SPW_ERR_INVALID naming
 * the gen.deep.* property, or SPW_ERR_NOMEM, with errstr. */
spw_err_t spw_gen__deep_init(spw_gen_t *gen, char *errstr, size_t errstr_size);

/* Frees what spw_gen__deep_init made (NULLs are fine). */
void spw_gen__deep_free(spw_gen_t *gen);

/* Writes the concatenated planted embeddings of one example's n_fields keys to x. */
void spw_gen__deep_embed(const spw_gen_t *gen, const uint64_t *keys, float *x);

/* A Zipf rank above z->head, by rejection-inversion (gen_zipf.c). */
uint64_t spw_gen__zipf_tail(const struct spw_gen_zipf *z, struct spw_gen_rng *rng);

/* spw_gen_zipf_sample, inlined into the generator's loop: the alias table's path is a few
 * instructions, the tail's a call. */
static inline uint64_t spw_gen__zipf_draw(const struct spw_gen_zipf *z, struct spw_gen_rng *rng)
{
    if (z->s == 0.0) { /* uniform */
        uint64_t k = (uint64_t)(spw_gen_rng_uniform(rng) * (double)z->n);
        return (k < z->n ? k : z->n - 1) + 1;
    }
    if (z->head < z->n && (spw_gen_rng_next(rng) >> 11) >= z->head_threshold)
        return spw_gen__zipf_tail(z, rng);
    uint64_t r = spw_gen_rng_next(rng);
    uint32_t col = (uint32_t)(((r >> 32) * z->head) >> 32);
    return ((uint32_t)r <= z->alias_keep[col] ? col : z->alias[col]) + 1u;
}

/* Decimal text of v into out (room for 20 / 21 bytes); returns the length. */

/* The 8 lower-case hex digits of v (Criteo's spelling, most significant first) as the
 * little-endian 64-bit word of their bytes, computed in registers: the nibbles are spread one per
 * byte, reversed, and mapped to '0'..'9' / 'a'..'f'. */
static inline uint64_t spw_gen__hex8_word(uint32_t v)
{
    uint64_t x = v;
    x = ((x & 0xffff0000ull) << 16) | (x & 0x0000ffffull);
    x = ((x & 0x0000ff000000ff00ull) << 8) | (x & 0x000000ff000000ffull);
    x = ((x & 0x00f000f000f000f0ull) << 4) | (x & 0x000f000f000f000full);
    /* byte i now holds nibble i (least significant first); the text starts with the top one */
    x = ((x & 0x00000000ffffffffull) << 32) | (x >> 32);
    x = ((x & 0x0000ffff0000ffffull) << 16) | ((x >> 16) & 0x0000ffff0000ffffull);
    x = ((x & 0x00ff00ff00ff00ffull) << 8) | ((x >> 8) & 0x00ff00ff00ff00ffull);
    uint64_t letters = ((x + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull; /* >= 10 */
    return x + 0x3030303030303030ull + letters * ('a' - '0' - 10);
}

/* Writes the 8 hex digits of v to out (no NUL). */
static inline void spw_gen__fmt_hex8(char *out, uint32_t v)
{
    uint64_t w = spw_gen__hex8_word(v);
    for (int i = 0; i < 8; i++)
        out[i] = (char)(w >> (8 * i));
}

#endif
