/* The deep planted model of `sparrow gen --set gen.model=deep`: the planted network of
 * sparrow/dense.h over per-field embeddings of the keys (the model is described in
 * sparrow/tools.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_int.h"

/* Domain separator of the planted network's seed (see gen.c's DOM_*). */
#define DOM_DEEP 0x646565706d6c7031ull

spw_err_t spw_gen__deep_init(spw_gen_t *gen, char *errstr, size_t errstr_size)
{
    const struct spw_gen_params *p = &gen->params;
    uint32_t nf = gen->n_fields, dim = p->deep_dim;
    uint32_t nd = p->deep_fields && p->deep_fields < nf ? p->deep_fields : nf;
    gen->deep_fields = nd;
    char why[256] = "";
    gen->planted = spw_dense_planted_new(nd, dim, p->deep_hidden, 1.0f,
                                         spw_hash_mix64(p->seed ^ DOM_DEEP), why, sizeof(why));
    if (!gen->planted)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "gen.deep.hidden=\"%s\" gen.deep.dim=%u gen.fields=%u: %s", p->deep_hidden,
                        dim, nf, why);
    size_t rows = SPW_GEN_DEEP_BLOCK, width = (size_t)nd * dim;
    gen->deep_x = malloc(rows * width * sizeof(float));
    gen->deep_logit = malloc(rows * sizeof(float));
    gen->blk_u = malloc(rows * sizeof(double));
    gen->blk_keys = malloc(rows * nf * sizeof(uint64_t));
    gen->blk_value_ids = malloc(rows * nf * sizeof(uint64_t));
    gen->blk_raw = malloc(rows * nf * sizeof(uint64_t));
    gen->blk_buckets = malloc(rows * nf * sizeof(int64_t));
    if (!gen->deep_x || !gen->deep_logit || !gen->blk_u || !gen->blk_keys || !gen->blk_value_ids ||
        !gen->blk_raw || !gen->blk_buckets)
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size,
                        "out of memory creating the deep model");
    return SPW_OK;
}

void spw_gen__deep_free(spw_gen_t *gen)
{
    spw_dense_planted_destroy(gen->planted);
    free(gen->deep_x);
    free(gen->deep_logit);
    free(gen->blk_u);
    free(gen->blk_keys);
    free(gen->blk_value_ids);
    free(gen->blk_raw);
    free(gen->blk_buckets);
}

void spw_gen__deep_embed(const spw_gen_t *gen, const uint64_t *keys, float *x)
{
    uint32_t dim = gen->params.deep_dim;
    for (uint32_t i = 0; i < gen->deep_fields; i++)
        spw_dense_planted_embedding(gen->planted, i, keys[i], x + (size_t)i * dim);
}

double spw_gen_deep_logit(const spw_gen_t *gen, const uint64_t *keys)
{
    if (gen->params.model != SPW_GEN_MODEL_DEEP)
        return 0.0;
    size_t width = (size_t)gen->deep_fields * gen->params.deep_dim;
    float *x = malloc(width * sizeof(float)), logit = 0.0f;
    if (!x)
        return NAN;
    spw_gen__deep_embed(gen, keys, x);
    spw_err_t err = spw_dense_planted_logits(gen->planted, x, 1, &logit);
    free(x);
    return err == SPW_OK ? gen->deep_mul * (double)logit : NAN;
}

const char *spw_gen_model_name(enum spw_gen_model model)
{
    switch (model) {
    case SPW_GEN_MODEL_FM:
        return "fm";
    case SPW_GEN_MODEL_DEEP:
        return "deep";
    }
    return NULL;
}

spw_err_t spw_gen_model_parse(const char *text, enum spw_gen_model *model)
{
    if (strcmp(text, "fm") == 0)
        *model = SPW_GEN_MODEL_FM;
    else if (strcmp(text, "deep") == 0)
        *model = SPW_GEN_MODEL_DEEP;
    else
        return SPW_ERR_INVALID;
    return SPW_OK;
}
