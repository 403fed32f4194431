/* trainer: the single-process reference trainer — rows in memory, optimizer applied locally. */
#include "trainer_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/arena.h"
#include "sparrow/hash.h"

/* Budget of the arena that holds one decoded example at a time (records are limited to 1 MiB by
 * the reader's limits; decoding expands them by a small factor). */
#define REF_ARENA_MAX (64u << 20)

struct spw_ref {
    struct spw_trainer_params p;
    spw_backend_t *be;
    spw_topk_t *tk;      /* NULL: push rows as computed */
    spw_grad_acc_t *acc; /* NULL when acc_steps == 1 */
    spw_pv_t *pv;
    spw_batch_t *batch; /* for spw_ref_train_reader */
    spw_arena_t *arena;
    struct spw_ref_counts counts;
    uint32_t micro; /* micro-batches accumulated since the last step */

    /* rows: key -> row number; row r is table[r * stride ..]: weights (dim), then Adagrad's
     * accumulators (dim) */
    struct spw_trn__keyidx index;
    float *table;
    size_t cap_table; /* floats */
    size_t n_rows;
    uint32_t stride;

    /* per-batch buffers */
    float *rows, *grads, *preds;
    size_t cap_rows, cap_grads, cap_preds;
};

/* Uniform in [-1, 1) from 24 bits of a mixed hash of (key, seed, j): pserver/src/optim.c's
 * init_uniform, so that a shard and this trainer start from the same model. */
static float init_uniform(uint64_t seed, uint64_t key, uint32_t j)
{
    uint64_t h = spw_hash_mix64(key ^ spw_hash_mix64(seed + 0x9e3779b97f4a7c15ull * (j + 1)));
    return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

void spw_trn__row_init(uint64_t seed, float init_scale, uint64_t key, uint32_t dim, float *w)
{
    for (uint32_t j = 0; j < dim; j++)
        w[j] = init_scale == 0.0f ? 0.0f : init_scale * init_uniform(seed, key, j);
}

spw_ref_t *spw_ref_new(const struct spw_trainer_params *params, char *errstr, size_t errstr_size)
{
    struct spw_model check;
    bool model_ok =
        spw_model_is_deep(&params->model)
            ? params->model.dim == 1 + params->model.latent_dim && params->model.dense_blocks > 0
            : spw_model_init(&check, params->model.kind, params->model.latent_dim) == SPW_OK &&
                  check.dim == params->model.dim;
    if (!model_ok || params->batch < 1 || params->acc_steps < 1 || params->eval_window < 1 ||
        !(params->lr >= 0.0f) || !(params->eps >= 0.0f)) {
        snprintf(errstr, errstr_size, "ref: invalid parameters");
        return NULL;
    }
    spw_ref_t *ref = calloc(1, sizeof(*ref));
    if (!ref) {
        snprintf(errstr, errstr_size, "ref: out of memory");
        return NULL;
    }
    ref->p = *params;
    ref->p.topk.dim = params->model.dim;
    ref->stride = params->model.dim * (params->optimizer == SPW_REF_ADAGRAD ? 2u : 1u);
    spw_trn__keyidx_init(&ref->index);
    if (!(ref->be = spw_backend_new(params->backend, &params->model, errstr, errstr_size)))
        goto out_destroy_ref;
    if (params->compress && !(ref->tk = spw_topk_new(&ref->p.topk, ref->be, errstr, errstr_size)))
        goto out_destroy_ref;
    if (params->acc_steps > 1 &&
        !(ref->acc = spw_grad_acc_new(params->model.dim, errstr, errstr_size)))
        goto out_destroy_ref;
    if (!(ref->pv = spw_pv_new(params->eval_window, errstr, errstr_size)))
        goto out_destroy_ref;
    if (!(ref->batch = spw_batch_new(params->batch, 40, errstr, errstr_size)))
        goto out_destroy_ref;
    if (spw_batch_set_model(ref->batch, &params->model) != SPW_OK) {
        snprintf(errstr, errstr_size, "ref: out of memory");
        goto out_destroy_ref;
    }
    if (!(ref->arena = spw_arena_new(0, REF_ARENA_MAX))) {
        snprintf(errstr, errstr_size, "ref: out of memory");
        goto out_destroy_ref;
    }
    return ref;

out_destroy_ref:
    spw_ref_destroy(ref);
    return NULL;
}

void spw_ref_destroy(spw_ref_t *ref)
{
    if (!ref)
        return;
    spw_topk_destroy(ref->tk);
    spw_backend_destroy(ref->be);
    spw_grad_acc_destroy(ref->acc);
    spw_pv_destroy(ref->pv);
    spw_batch_destroy(ref->batch);
    spw_arena_destroy(ref->arena);
    spw_trn__keyidx_fini(&ref->index);
    free(ref->table);
    free(ref->rows);
    free(ref->grads);
    free(ref->preds);
    free(ref);
}

/* The optimizer step on one row, exactly as pserver/src/optim.c applies it (no l2, no clip). */
static void apply_row(spw_ref_t *ref, uint64_t key, const float *restrict g)
{
    uint32_t r = spw_trn__keyidx_find(&ref->index, key);
    assert(r != SPW_TRN__NONE); /* every pushed key was gathered first */
    const uint32_t dim = ref->p.model.dim;
    float *restrict w = ref->table + (size_t)r * ref->stride;
    const float lr = ref->p.lr;
    if (ref->p.optimizer == SPW_REF_SGD) {
        for (uint32_t j = 0; j < dim; j++)
            w[j] -= lr * g[j];
        return;
    }
    float *restrict acc = w + dim;
    const float eps = ref->p.eps;
    for (uint32_t j = 0; j < dim; j++) {
        acc[j] += g[j] * g[j];
        w[j] -= lr * g[j] / (sqrtf(acc[j]) + eps);
    }
}

static void apply_set(spw_ref_t *ref, const struct spw_push_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        apply_row(ref, set->keys[i], set->values + i * set->dim);
}

/* One optimizer step over n gradient rows (grads is scratch for the compressor). */
static spw_err_t step(spw_ref_t *ref, const uint64_t *keys, float *grads, size_t n)
{
    ref->counts.steps++;
    if (!ref->tk) {
        for (size_t i = 0; i < n; i++)
            apply_row(ref, keys[i], grads + i * ref->p.model.dim);
        return SPW_OK;
    }
    struct spw_push_set set;
    spw_err_t err = spw_topk_compress(ref->tk, keys, grads, NULL, n, &set);
    if (err)
        return err;
    apply_set(ref, &set);
    return SPW_OK;
}

/* Copies the rows of the batch's keys into ref->rows, creating missing ones. */
static spw_err_t gather(spw_ref_t *ref, const spw_batch_t *batch)
{
    const size_t nu = spw_batch_unique(batch), dim = ref->p.model.dim;
    const uint64_t *keys = spw_batch_keys(batch);
    if (ref->n_rows + nu >= UINT32_MAX)
        return SPW_ERR_NOMEM;
    if (spw_trn__keyidx_reserve(&ref->index, ref->n_rows + nu) ||
        spw_trn__grow((void **)&ref->table, &ref->cap_table, (ref->n_rows + nu) * ref->stride,
                      sizeof(float)))
        return SPW_ERR_NOMEM;
    for (size_t u = 0; u < nu; u++) {
        bool inserted;
        uint32_t r = spw_trn__keyidx_upsert(&ref->index, keys[u], (uint32_t)ref->n_rows, &inserted);
        float *w = ref->table + (size_t)r * ref->stride;
        if (inserted) {
            spw_trn__row_init(ref->p.seed, spw_key_is_dense(keys[u]) ? 0.0f : ref->p.init_scale,
                              keys[u], (uint32_t)dim, w);
            memset(w + dim, 0, (ref->stride - dim) * sizeof(float));
            ref->n_rows++;
        }
        memcpy(ref->rows + u * dim, w, dim * sizeof(float));
    }
    return SPW_OK;
}

spw_err_t spw_ref_train_batch(spw_ref_t *ref, const spw_batch_t *batch)
{
    const size_t n = spw_batch_examples(batch), nu = spw_batch_unique(batch);
    const size_t dim = ref->p.model.dim;
    spw_err_t err;
    if (n == 0)
        return SPW_OK;
    if (spw_trn__grow((void **)&ref->rows, &ref->cap_rows, nu * dim, sizeof(float)) ||
        spw_trn__grow((void **)&ref->grads, &ref->cap_grads, nu * dim, sizeof(float)) ||
        spw_trn__grow((void **)&ref->preds, &ref->cap_preds, n, sizeof(float)))
        return SPW_ERR_NOMEM;
    if ((err = gather(ref, batch)))
        return err;
    float scale = (float)(1.0 / ((double)n * ref->p.acc_steps));
    if ((err = spw_backend_forward_backward(ref->be, batch, ref->rows, scale, ref->preds,
                                            ref->grads, NULL)))
        return err;
    /* The predictions came from rows not yet updated with this batch: progressive validation. */
    spw_pv_add(ref->pv, ref->preds, spw_batch_labels(batch), spw_batch_oracle(batch), n);
    ref->counts.examples += n;
    ref->counts.batches++;

    if (!ref->acc)
        return step(ref, spw_batch_keys(batch), ref->grads, nu);
    if ((err = spw_grad_acc_add(ref->acc, spw_batch_keys(batch), ref->grads, NULL, nu)))
        return err;
    if (++ref->micro < ref->p.acc_steps)
        return SPW_OK;
    err = step(ref, spw_grad_acc_keys(ref->acc), spw_grad_acc_grads(ref->acc),
               spw_grad_acc_rows(ref->acc));
    spw_grad_acc_reset(ref->acc);
    ref->micro = 0;
    return err;
}

spw_err_t spw_ref_train_reader(spw_ref_t *ref, spw_reader_t *reader, uint64_t max_examples)
{
    spw_batch_t *batch = ref->batch;
    uint64_t taken = 0;
    spw_err_t err = SPW_OK;
    spw_batch_reset(batch);
    while (!max_examples || taken < max_examples) {
        Sparrow__Example *ex;
        struct spw_parse_error perr;
        spw_arena_reset(ref->arena);
        err = spw_reader_next(reader, ref->arena, &ex, &perr);
        if (err == SPW_ERR_EOF) {
            err = SPW_OK;
            break;
        }
        if (err == SPW_ERR_INVALID || err == SPW_ERR_TOO_BIG) {
            ref->counts.rejected++;
            continue;
        }
        if (err)
            break;
        err = spw_batch_add_example(batch, ex);
        if (err == SPW_ERR_INVALID) {
            ref->counts.rejected++;
            continue;
        }
        if (err)
            break;
        taken++;
        if (spw_batch_examples(batch) == ref->p.batch) {
            if ((err = spw_ref_train_batch(ref, batch)))
                break;
            spw_batch_reset(batch);
        }
    }
    if (!err && spw_batch_examples(batch))
        err = spw_ref_train_batch(ref, batch);
    spw_batch_reset(batch);
    spw_arena_reset(ref->arena);
    return err;
}

spw_err_t spw_ref_flush(spw_ref_t *ref)
{
    spw_err_t err;
    if (ref->acc && ref->micro) {
        err = step(ref, spw_grad_acc_keys(ref->acc), spw_grad_acc_grads(ref->acc),
                   spw_grad_acc_rows(ref->acc));
        spw_grad_acc_reset(ref->acc);
        ref->micro = 0;
        if (err)
            return err;
    }
    if (ref->tk) {
        struct spw_push_set set;
        if ((err = spw_topk_flush(ref->tk, &set)))
            return err;
        apply_set(ref, &set);
    }
    return SPW_OK;
}

const float *spw_ref_row(const spw_ref_t *ref, uint64_t key)
{
    uint32_t r = spw_trn__keyidx_find(&ref->index, key);
    return r == SPW_TRN__NONE ? NULL : ref->table + (size_t)r * ref->stride;
}

size_t spw_ref_rows(const spw_ref_t *ref)
{
    return ref->n_rows;
}

void spw_ref_get_counts(const spw_ref_t *ref, struct spw_ref_counts *out)
{
    *out = ref->counts;
}

void spw_ref_report(spw_ref_t *ref, struct spw_pv_report *out)
{
    spw_pv_report(ref->pv, out);
}

void spw_ref_topk_stats(const spw_ref_t *ref, struct spw_topk_stats *out)
{
    if (ref->tk)
        spw_topk_get_stats(ref->tk, out);
    else
        memset(out, 0, sizeof(*out));
}

enum spw_backend_kind spw_ref_backend(const spw_ref_t *ref)
{
    return spw_backend_kind(ref->be);
}
