/* dense: the planted nonlinear model that `sparrow gen --set gen.model=deep` draws labels from. */
#include <math.h>
#include <stdlib.h>

#include "sparrow/dense.h"

#include "dense_int.h"

struct spw_dense_planted {
    spw_dense_t *net;
    float *params;
    uint32_t fields, dim;
    uint64_t seed;
};

spw_dense_planted_t *spw_dense_planted_new(uint32_t fields, uint32_t dim, const char *hidden,
                                           float scale, uint64_t seed, char *errstr,
                                           size_t errstr_size)
{
    if (fields < 1 || dim < 1 || (uint64_t)fields * dim > SPW_DENSE_MAX_WIDTH) {
        spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                 "planted deep model: fields %u × dim %u is not in 1..%u inputs", fields, dim,
                 SPW_DENSE_MAX_WIDTH);
        return NULL;
    }
    if (!(scale > 0.0f) || !isfinite(scale)) {
        spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "planted deep model: scale %g is not > 0",
                 (double)scale);
        return NULL;
    }
    struct spw_dense_spec spec;
    spw_dense_spec_default(&spec, fields * dim);
    if (spw_dense_spec_parse_hidden(&spec, hidden, errstr, errstr_size) != SPW_OK)
        return NULL;
    spw_dense_planted_t *pl = calloc(1, sizeof(*pl));
    if (!pl) {
        spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "planted deep model: out of memory");
        return NULL;
    }
    pl->fields = fields;
    pl->dim = dim;
    pl->seed = seed;
    pl->net = spw_dense_new(&spec, errstr, errstr_size);
    if (!pl->net)
        goto out_free;
    size_t np = spw_dense_param_count(pl->net);
    pl->params = malloc(np * sizeof(float));
    if (!pl->params) {
        spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "planted deep model: out of memory");
        goto out_free;
    }
    spw_dense_init_params(&spec, seed, pl->params);
    struct spw_dense_layer head;
    spw_dense_spec_layer_at(&spec, spw_dense_spec_layer_count(&spec) - 1, &head);
    /* Xavier on a 1-wide head gives logits of spread ~1: scale sets it */
    for (uint32_t i = 0; i < head.in; i++)
        pl->params[head.w_off + i] *= scale;
    return pl;
out_free:
    spw_dense_planted_destroy(pl);
    return NULL;
}

void spw_dense_planted_destroy(spw_dense_planted_t *pl)
{
    if (!pl)
        return;
    spw_dense_destroy(pl->net);
    free(pl->params);
    free(pl);
}

void spw_dense_planted_embedding(const spw_dense_planted_t *pl, uint32_t field, uint64_t value,
                                 float *out)
{
    uint64_t base = spw_dense__mix(pl->seed ^ spw_dense__mix(((uint64_t)field << 40) ^ value));
    for (uint32_t j = 0; j < pl->dim; j++) {
        uint64_t h = spw_dense__mix(base + j * 0x9e3779b97f4a7c15ull);
        float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
        out[j] = (2.0f * u - 1.0f) * 1.7320508f;
    }
}

spw_err_t spw_dense_planted_logits(spw_dense_planted_t *pl, const float *x, size_t n, float *logits)
{
    return spw_dense_forward(pl->net, pl->params, x, n, logits, false);
}
