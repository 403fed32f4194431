/* dense: the network spec (parsing, checks), the parameter block's layout and initialisation. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/dense.h"

#include "dense_int.h"

void spw_dense_spec_default(struct spw_dense_spec *spec, uint32_t in_dim)
{
    memset(spec, 0, sizeof(*spec));
    spec->in_dim = in_dim;
}

spw_err_t spw_dense_spec_parse_hidden(struct spw_dense_spec *spec, const char *text, char *errstr,
                                      size_t errstr_size)
{
    uint32_t widths[SPW_DENSE_MAX_HIDDEN];
    uint32_t n = 0;
    if (text[0] != '\0' && strcmp(text, "none") != 0) {
        const char *p = text;
        for (;;) {
            size_t len = strcspn(p, ",");
            if (n == SPW_DENSE_MAX_HIDDEN)
                return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                                "hidden layers \"%s\": more than %d layers", text,
                                SPW_DENSE_MAX_HIDDEN);
            char item[32];
            if (len == 0 || len >= sizeof(item))
                return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                                "hidden layers \"%s\": item %u is %s", text, n + 1,
                                len == 0 ? "empty" : "too long");
            memcpy(item, p, len);
            item[len] = '\0';
            char *end = NULL;
            errno = 0;
            unsigned long v = strtoul(item, &end, 10);
            if (errno != 0 || *end != '\0' || item[0] < '0' || item[0] > '9' || v < 1 ||
                v > SPW_DENSE_MAX_WIDTH)
                return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                                "hidden layers \"%s\": width \"%s\" is not an integer in 1..%u",
                                text, item, SPW_DENSE_MAX_WIDTH);
            widths[n++] = (uint32_t)v;
            if (p[len] == '\0')
                break;
            p += len + 1;
        }
    }
    spec->n_hidden = n;
    memset(spec->hidden, 0, sizeof(spec->hidden));
    memcpy(spec->hidden, widths, n * sizeof(widths[0]));
    return SPW_OK;
}

spw_err_t spw_dense_spec_check(const struct spw_dense_spec *spec, char *errstr, size_t errstr_size)
{
    if (spec->in_dim < 1 || spec->in_dim > SPW_DENSE_MAX_WIDTH)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "dense in_dim %u is not in 1..%u",
                        spec->in_dim, SPW_DENSE_MAX_WIDTH);
    if (spec->cross_layers > SPW_DENSE_MAX_CROSS)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "dense cross layers %u is not in 0..%d", spec->cross_layers,
                        SPW_DENSE_MAX_CROSS);
    if (spec->n_hidden > SPW_DENSE_MAX_HIDDEN)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "dense hidden layer count %u is not in 0..%d", spec->n_hidden,
                        SPW_DENSE_MAX_HIDDEN);
    for (uint32_t k = 0; k < spec->n_hidden; k++)
        if (spec->hidden[k] < 1 || spec->hidden[k] > SPW_DENSE_MAX_WIDTH)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "dense hidden layer %u width %u is not in 1..%u", k + 1,
                            spec->hidden[k], SPW_DENSE_MAX_WIDTH);
    if (!(spec->dropout >= 0.0f && spec->dropout < 1.0f))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "dense dropout %g is not in [0, 1)",
                        (double)spec->dropout);
    /* widths are at most 2^14, so each layer is below 2^29 floats and the sum cannot wrap */
    uint64_t total = 0;
    uint64_t d = spec->in_dim, in = d;
    total += (uint64_t)spec->cross_layers * (d * d + d);
    for (uint32_t k = 0; k < spec->n_hidden; k++) {
        total += spec->hidden[k] * in + spec->hidden[k];
        in = spec->hidden[k];
    }
    total += in + 1;
    if (total > SPW_DENSE_MAX_PARAMS)
        return spw_errf(SPW_ERR_TOO_BIG, errstr, errstr_size,
                        "dense network of %llu parameters is over the limit of %u",
                        (unsigned long long)total, SPW_DENSE_MAX_PARAMS);
    return SPW_OK;
}

size_t spw_dense_spec_layer_count(const struct spw_dense_spec *spec)
{
    return (size_t)spec->cross_layers + spec->n_hidden + 1;
}

void spw_dense_spec_layer_at(const struct spw_dense_spec *spec, size_t i,
                             struct spw_dense_layer *layer)
{
    size_t d = spec->in_dim;
    size_t off = 0, in = d;
    if (i < spec->cross_layers) {
        layer->kind = SPW_DENSE_CROSS;
        layer->in = layer->out = (uint32_t)d;
        layer->w_off = i * (d * d + d);
        layer->b_off = layer->w_off + d * d;
        return;
    }
    off = spec->cross_layers * (d * d + d);
    size_t k = i - spec->cross_layers;
    for (size_t j = 0; j < k; j++) {
        off += (size_t)spec->hidden[j] * in + spec->hidden[j];
        in = spec->hidden[j];
    }
    layer->kind = k < spec->n_hidden ? SPW_DENSE_HIDDEN : SPW_DENSE_OUTPUT;
    layer->in = (uint32_t)in;
    layer->out = k < spec->n_hidden ? spec->hidden[k] : 1u;
    layer->w_off = off;
    layer->b_off = off + (size_t)layer->out * in;
}

size_t spw_dense_spec_param_count(const struct spw_dense_spec *spec)
{
    struct spw_dense_layer head;
    spw_dense_spec_layer_at(spec, spw_dense_spec_layer_count(spec) - 1, &head);
    return head.b_off + 1;
}

void spw_dense_init_params(const struct spw_dense_spec *spec, uint64_t seed, float *params)
{
    size_t n_layers = spw_dense_spec_layer_count(spec);
    uint64_t ctr = 0;
    for (size_t i = 0; i < n_layers; i++) {
        struct spw_dense_layer ly;
        spw_dense_spec_layer_at(spec, i, &ly);
        double limit =
            ly.kind == SPW_DENSE_HIDDEN ? sqrt(6.0 / ly.in) : sqrt(6.0 / ((double)ly.in + ly.out));
        size_t nw = (size_t)ly.in * ly.out;
        for (size_t j = 0; j < nw; j++) {
            uint64_t h = spw_dense__mix(seed ^ spw_dense__mix(++ctr));
            double u = (double)(h >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
            params[ly.w_off + j] = (float)((2.0 * u - 1.0) * limit);
        }
        memset(params + ly.b_off, 0, ly.out * sizeof(float));
    }
}

bool spw_dense_dropout_keep(uint64_t seed, uint64_t t, uint32_t k, uint64_t j, float p)
{
    return spw_dense__keep(seed, t, k, j, p) != 0;
}
