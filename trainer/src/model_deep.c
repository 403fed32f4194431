/* trainer: deep models (DeepFM, DCN-v2): field pooling into the network's input, the network on
 * sparrow/dense.h (OpenBLAS, or cuBLAS on a device for the CUDA backend), and the FM part of
 * model_cpu.c. */
#include "trainer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/hash.h"

/* Field id -> slot: open addressing over 2 × SPW_TRN_MAX_FIELDS entries (ids are <= 2^31 - 1,
 * so UINT32_MAX marks an empty entry). */
#define SLOT_TABLE 512u

struct spw_deep {
    struct spw_model model;
    spw_dense_t *net;     /* the host network; its count of training forwards is the model's */
    spw_dense_cuda_t *cu; /* the network on a device (spw_trn__deep_use_cuda), or NULL */
    float *base;          /* the initial weights (P) */
    float *dgrad;         /* the network's gradient (P) */
    float *dense;         /* weights gathered from rows (P, spw_deep_dense_from_rows) */
    float *x, *dx;        /* n × in_dim */
    float *extra, *dz;    /* n */
    uint32_t *occ_slot;   /* per occurrence: the field's slot, UINT32_MAX unknown */
    float *occ_scale;     /* per occurrence: weight (sum) or weight / count (mean) */
    size_t cap_x, cap_dx, cap_extra, cap_dz, cap_occ_slot, cap_occ_scale;
    uint32_t count[SPW_TRN_MAX_FIELDS]; /* per example: features per slot */
    uint32_t table_id[SLOT_TABLE];
    uint32_t table_slot[SLOT_TABLE];
    uint64_t unknown;
};

static uint32_t slot_of(const spw_deep_t *deep, uint32_t id)
{
    if (id == UINT32_MAX)
        return UINT32_MAX;
    for (uint32_t h = (uint32_t)spw_hash_mix64(id) & (SLOT_TABLE - 1);;
         h = (h + 1) & (SLOT_TABLE - 1)) {
        if (deep->table_id[h] == id)
            return deep->table_slot[h];
        if (deep->table_id[h] == UINT32_MAX)
            return UINT32_MAX;
    }
}

spw_deep_t *spw_deep_new(const struct spw_model *model, char *errstr, size_t errstr_size)
{
    if (!spw_model_is_deep(model)) {
        snprintf(errstr, errstr_size, "deep: model %s has no dense network",
                 spw_model_kind_name(model->kind));
        return NULL;
    }
    spw_deep_t *deep = calloc(1, sizeof(*deep));
    if (!deep) {
        snprintf(errstr, errstr_size, "deep: out of memory");
        return NULL;
    }
    deep->model = *model;
    size_t p = spw_model_dense_params(model);
    deep->base = malloc(p * sizeof(float));
    deep->dgrad = malloc(p * sizeof(float));
    deep->dense = malloc(p * sizeof(float));
    if (!deep->base || !deep->dgrad || !deep->dense) {
        snprintf(errstr, errstr_size, "deep: out of memory for %zu dense parameters", p);
        goto out_fail;
    }
    spw_model_dense_init(model, deep->base);
    if (!(deep->net = spw_dense_new(&model->dense, errstr, errstr_size)))
        goto out_fail;
    memset(deep->table_id, 0xff, sizeof(deep->table_id));
    for (uint32_t f = 0; f < model->n_fields; f++) {
        uint32_t h = (uint32_t)spw_hash_mix64(model->fields[f].id) & (SLOT_TABLE - 1);
        while (deep->table_id[h] != UINT32_MAX)
            h = (h + 1) & (SLOT_TABLE - 1);
        deep->table_id[h] = model->fields[f].id;
        deep->table_slot[h] = f;
    }
    return deep;

out_fail:
    spw_deep_destroy(deep);
    return NULL;
}

void spw_deep_destroy(spw_deep_t *deep)
{
    if (!deep)
        return;
    spw_dense_cuda_destroy(deep->cu);
    spw_dense_destroy(deep->net);
    free(deep->base);
    free(deep->dgrad);
    free(deep->dense);
    free(deep->x);
    free(deep->dx);
    free(deep->extra);
    free(deep->dz);
    free(deep->occ_slot);
    free(deep->occ_scale);
    free(deep);
}

spw_err_t spw_trn__deep_use_cuda(spw_deep_t *deep, int device, char *errstr, size_t errstr_size)
{
    if (deep->cu)
        return SPW_OK;
    deep->cu = spw_dense_cuda_new(&deep->model.dense, device, errstr, errstr_size);
    return deep->cu ? SPW_OK : SPW_ERR_UNSUPPORTED;
}

bool spw_trn__deep_on_cuda(const spw_deep_t *deep)
{
    return deep->cu != NULL;
}

uint64_t spw_deep_unknown_field_features(const spw_deep_t *deep)
{
    return deep->unknown;
}

void spw_deep_dense_from_rows(const spw_deep_t *deep, const float *rows, float *dense)
{
    size_t p = spw_model_dense_params(&deep->model);
    const float *blocks = rows + deep->model.dim; /* unique keys 1 .. dense_blocks */
    for (size_t j = 0; j < p; j++)
        dense[j] = deep->base[j] + blocks[j];
}

/* Whether batch carries the model's dense blocks as its unique keys 1 .. dense_blocks. */
static bool has_blocks(const struct spw_model *m, const spw_batch_t *batch)
{
    return batch->n_uniq >= 1 + (size_t)m->dense_blocks &&
           (m->dense_blocks == 0 || batch->keys[1] == spw_dense_block_key(0));
}

const float *spw_trn__deep_gather_dense(spw_deep_t *deep, const spw_batch_t *batch,
                                        const float *rows)
{
    if (batch->n == 0)
        return deep->dense; /* not read: an empty batch carries no rows to gather from */
    if (!has_blocks(&deep->model, batch))
        return NULL;
    spw_deep_dense_from_rows(deep, rows, deep->dense);
    return deep->dense;
}

static spw_err_t reserve(spw_deep_t *deep, size_t n, size_t occ, bool backward)
{
    size_t in = deep->model.dense.in_dim;
    if (spw_trn__grow((void **)&deep->x, &deep->cap_x, n * in, sizeof(float)) ||
        spw_trn__grow((void **)&deep->extra, &deep->cap_extra, n, sizeof(float)) ||
        spw_trn__grow((void **)&deep->occ_slot, &deep->cap_occ_slot, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&deep->occ_scale, &deep->cap_occ_scale, occ, sizeof(float)))
        return SPW_ERR_NOMEM;
    if (backward && (spw_trn__grow((void **)&deep->dx, &deep->cap_dx, n * in, sizeof(float)) ||
                     spw_trn__grow((void **)&deep->dz, &deep->cap_dz, n, sizeof(float))))
        return SPW_ERR_NOMEM;
    return SPW_OK;
}

/* The network's input for examples i0 .. i1 - 1: x[i - i0] = the pooled latent vectors of
 * example i's fields, in field order. */
static void pool(spw_deep_t *deep, const spw_batch_t *batch, const float *rows, size_t i0,
                 size_t i1)
{
    const uint32_t k = deep->model.latent_dim, dim = deep->model.dim, nf = deep->model.n_fields;
    const size_t in = deep->model.dense.in_dim;
    const uint32_t *fields = spw_batch_occ_fields(batch);
    memset(deep->x, 0, (i1 - i0) * in * sizeof(float));
    for (size_t i = i0; i < i1; i++) {
        const uint32_t beg = batch->offsets[i], end = batch->offsets[i + 1];
        memset(deep->count, 0, nf * sizeof(deep->count[0]));
        for (uint32_t o = beg; o < end; o++) {
            uint32_t s = slot_of(deep, fields[o]);
            deep->occ_slot[o] = s;
            if (s == UINT32_MAX)
                deep->unknown++;
            else
                deep->count[s]++;
        }
        float *xi = deep->x + (i - i0) * in;
        for (uint32_t o = beg; o < end; o++) {
            uint32_t s = deep->occ_slot[o];
            if (s == UINT32_MAX)
                continue;
            float scale = batch->occ_w[o];
            if (deep->model.fields[s].pooling == SPW_POOL_MEAN)
                scale /= (float)deep->count[s];
            deep->occ_scale[o] = scale;
            const float *v = rows + (size_t)batch->occ_idx[o] * dim + 1;
            float *xs = xi + (size_t)s * k;
            for (uint32_t j = 0; j < k; j++)
                xs[j] += scale * v[j];
        }
    }
}

spw_err_t spw_deep_forward(spw_deep_t *deep, const spw_batch_t *batch, const float *rows,
                           const float *dense, float *preds, double *loss_sum)
{
    size_t n = batch->n;
    if (n == 0) {
        if (loss_sum)
            *loss_sum = 0.0;
        return SPW_OK;
    }
    spw_err_t rc = reserve(deep, n, batch->n_occ, false);
    if (rc != SPW_OK)
        return rc;
    pool(deep, batch, rows, 0, n);
    rc = deep->cu ? spw_dense_cuda_forward(deep->cu, dense, deep->x, n, deep->extra, false)
                  : spw_dense_forward(deep->net, dense, deep->x, n, deep->extra, false);
    if (rc != SPW_OK)
        return rc;
    double loss = spw_trn__fm_forward_extra(&deep->model, batch, rows, deep->extra, preds);
    if (loss_sum)
        *loss_sum = loss;
    return SPW_OK;
}

/* The backward of examples i0 .. i1 - 1 (n = i1 - i0 > 0) with the network's training forward
 * t of the batch; see spw_trn__deep_backward_slice. */
static spw_err_t backward_rows(spw_deep_t *deep, const spw_batch_t *batch, const float *rows,
                               const float *dense, size_t i0, size_t i1, uint64_t t,
                               float grad_scale, float *preds, float *grads, double *loss_sum)
{
    const struct spw_model *m = &deep->model;
    const size_t n = i1 - i0;
    spw_err_t rc = reserve(deep, n, batch->n_occ, true);
    if (rc != SPW_OK)
        return rc;
    pool(deep, batch, rows, i0, i1);
    if (deep->cu) { /* the whole batch (one host thread drives the device): the masks of rows 0.. */
        if (i0 != 0)
            return SPW_ERR_STATE;
        spw_dense_cuda_set_train_forwards(deep->cu, t);
        rc = spw_dense_cuda_forward(deep->cu, dense, deep->x, n, deep->extra, true);
    } else {
        rc = spw_dense_forward_rows(deep->net, dense, deep->x, n, deep->extra, true, t, i0);
    }
    if (rc != SPW_OK)
        return rc;
    double loss = spw_trn__fm_backward_slice(m, batch, i0, i1, rows, deep->extra, grad_scale, preds,
                                             grads, deep->dz);
    rc = deep->cu ? spw_dense_cuda_backward(deep->cu, deep->dz, deep->dgrad, deep->dx)
                  : spw_dense_backward(deep->net, dense, deep->dz, deep->dgrad, deep->dx);
    if (rc != SPW_OK)
        return rc;
    /* the network's gradient into the dense-block rows, its input's into the latent vectors */
    size_t p = spw_model_dense_params(m);
    float *blocks = grads + m->dim;
    for (size_t j = 0; j < p; j++)
        blocks[j] += deep->dgrad[j];
    const uint32_t k = m->latent_dim, dim = m->dim;
    const size_t in = m->dense.in_dim;
    for (size_t i = i0; i < i1; i++) {
        const float *dxi = deep->dx + (i - i0) * in;
        for (uint32_t o = batch->offsets[i]; o < batch->offsets[i + 1]; o++) {
            uint32_t s = deep->occ_slot[o];
            if (s == UINT32_MAX)
                continue;
            const float scale = deep->occ_scale[o];
            const float *d = dxi + (size_t)s * k;
            float *g = grads + (size_t)batch->occ_idx[o] * dim + 1;
            for (uint32_t j = 0; j < k; j++)
                g[j] += scale * d[j];
        }
    }
    *loss_sum = loss;
    return SPW_OK;
}

spw_err_t spw_deep_forward_backward(spw_deep_t *deep, const spw_batch_t *batch, const float *rows,
                                    const float *dense, float grad_scale, float *preds,
                                    float *grads, double *loss_sum)
{
    size_t n = batch->n;
    if (n == 0) {
        if (loss_sum)
            *loss_sum = 0.0;
        return SPW_OK;
    }
    if (!has_blocks(&deep->model, batch))
        return SPW_ERR_INVALID; /* the batch does not carry the dense blocks */
    uint64_t t = spw_dense_train_forwards(deep->net);
    double loss = 0.0;
    spw_err_t rc =
        backward_rows(deep, batch, rows, dense, 0, n, t, grad_scale, preds, grads, &loss);
    if (rc != SPW_OK)
        return rc;
    spw_dense_set_train_forwards(deep->net, t + 1);
    if (loss_sum)
        *loss_sum = loss;
    return SPW_OK;
}

spw_err_t spw_trn__deep_backward_slice(spw_deep_t *deep, const spw_batch_t *batch,
                                       const float *rows, const float *dense, size_t i0, size_t i1,
                                       uint64_t t, float grad_scale, float *preds, float *grads,
                                       double *loss_sum)
{
    *loss_sum = 0.0;
    if (i0 == i1) {
        memset(grads, 0, batch->n_uniq * deep->model.dim * sizeof(float));
        return SPW_OK;
    }
    if (!has_blocks(&deep->model, batch))
        return SPW_ERR_INVALID;
    return backward_rows(deep, batch, rows, dense, i0, i1, t, grad_scale, preds, grads, loss_sum);
}

uint64_t spw_trn__deep_train_forwards(const spw_deep_t *deep)
{
    return spw_dense_train_forwards(deep->net);
}

void spw_trn__deep_set_train_forwards(spw_deep_t *deep, uint64_t t)
{
    spw_dense_set_train_forwards(deep->net, t);
}
