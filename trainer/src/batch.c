/* trainer: mini-batches built from decoded examples, with keys de-duplicated per batch. */
#include "trainer_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

spw_batch_t *spw_batch_new(size_t examples_hint, size_t features_hint, char *errstr,
                           size_t errstr_size)
{
    spw_batch_t *batch = calloc(1, sizeof(*batch));
    if (!batch)
        goto out_nomem;
    spw_trn__keyidx_init(&batch->dedup);
    batch->max_event_time_ms = INT64_MIN;
    size_t ex = examples_hint ? examples_hint : 1;
    size_t occ = ex * (features_hint ? features_hint : 1);
    if (spw_trn__grow((void **)&batch->labels, &batch->cap_labels, ex, sizeof(float)) ||
        spw_trn__grow((void **)&batch->oracle, &batch->cap_oracle, ex, sizeof(float)) ||
        spw_trn__grow((void **)&batch->offsets, &batch->cap_offsets, ex + 1, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->occ_idx, &batch->cap_occ_idx, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->occ_w, &batch->cap_occ_w, occ, sizeof(float)) ||
        spw_trn__grow((void **)&batch->occ_ex, &batch->cap_occ_ex, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->occ_field, &batch->cap_occ_field, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->keys, &batch->cap_keys, occ + 1, sizeof(uint64_t)) ||
        spw_trn__keyidx_reserve(&batch->dedup, occ + 1))
        goto out_free_batch;
    batch->offsets[0] = 0;
    return batch;

out_free_batch:
    spw_batch_destroy(batch);
out_nomem:
    snprintf(errstr, errstr_size, "batch: out of memory");
    return NULL;
}

void spw_batch_destroy(spw_batch_t *batch)
{
    if (!batch)
        return;
    free(batch->labels);
    free(batch->oracle);
    free(batch->offsets);
    free(batch->occ_idx);
    free(batch->occ_w);
    free(batch->occ_ex);
    free(batch->occ_field);
    free(batch->prefix);
    free(batch->keys);
    spw_trn__keyidx_fini(&batch->dedup);
    free(batch);
}

void spw_batch_reset(spw_batch_t *batch)
{
    batch->n = batch->n_occ = batch->n_uniq = 0;
    batch->max_event_time_ms = INT64_MIN;
    spw_trn__keyidx_clear(&batch->dedup);
}

/* Makes room for one more example of n features; nothing changes on failure. */
static spw_err_t reserve_example(spw_batch_t *batch, size_t n)
{
    size_t ex = batch->n + 1, occ = batch->n_occ + n;
    size_t uniq = batch->n_uniq + n + 1 + (batch->n ? 0 : batch->n_prefix);
    if (spw_trn__grow((void **)&batch->labels, &batch->cap_labels, ex, sizeof(float)) ||
        spw_trn__grow((void **)&batch->oracle, &batch->cap_oracle, ex, sizeof(float)) ||
        spw_trn__grow((void **)&batch->offsets, &batch->cap_offsets, ex + 1, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->occ_idx, &batch->cap_occ_idx, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->occ_w, &batch->cap_occ_w, occ, sizeof(float)) ||
        spw_trn__grow((void **)&batch->occ_ex, &batch->cap_occ_ex, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->occ_field, &batch->cap_occ_field, occ, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&batch->keys, &batch->cap_keys, uniq, sizeof(uint64_t)) ||
        spw_trn__keyidx_reserve(&batch->dedup, uniq))
        return SPW_ERR_NOMEM;
    return SPW_OK;
}

spw_err_t spw_batch_set_prefix(spw_batch_t *batch, const uint64_t *keys, size_t n)
{
    if (batch->n)
        return SPW_ERR_STATE;
    uint64_t *copy = NULL;
    if (n) {
        copy = malloc(n * sizeof(*copy));
        if (!copy)
            return SPW_ERR_NOMEM;
        memcpy(copy, keys, n * sizeof(*copy));
    }
    free(batch->prefix);
    batch->prefix = copy;
    batch->n_prefix = n;
    return SPW_OK;
}

spw_err_t spw_batch_set_model(spw_batch_t *batch, const struct spw_model *model)
{
    if (!spw_model_is_deep(model))
        return spw_batch_set_prefix(batch, NULL, 0);
    uint64_t *keys = malloc(model->dense_blocks * sizeof(*keys));
    if (!keys)
        return SPW_ERR_NOMEM;
    for (uint32_t i = 0; i < model->dense_blocks; i++)
        keys[i] = spw_dense_block_key(i);
    spw_err_t rc = spw_batch_set_prefix(batch, keys, model->dense_blocks);
    free(keys);
    return rc;
}

spw_err_t spw_batch_add(spw_batch_t *batch, float label, float oracle_p, int64_t event_time_ms,
                        size_t n, const uint64_t *keys, const float *weights)
{
    return spw_batch_add_fields(batch, label, oracle_p, event_time_ms, n, keys, weights, NULL);
}

spw_err_t spw_batch_add_fields(spw_batch_t *batch, float label, float oracle_p,
                               int64_t event_time_ms, size_t n, const uint64_t *keys,
                               const float *weights, const uint32_t *fields)
{
    if (!isfinite(label))
        return SPW_ERR_INVALID;
    if (weights) {
        for (size_t j = 0; j < n; j++)
            if (!isfinite(weights[j]))
                return SPW_ERR_INVALID;
    }
    if (n > SPW_TRN_BATCH_MAX_OCC - batch->n_occ || batch->n + 1 >= SPW_TRN_BATCH_MAX_OCC)
        return SPW_ERR_TOO_BIG;
    spw_err_t err = reserve_example(batch, n);
    if (err)
        return err;

    bool inserted;
    if (batch->n == 0) {
        spw_trn__keyidx_upsert(&batch->dedup, SPW_TRN_BIAS_KEY, 0, &inserted);
        batch->keys[0] = SPW_TRN_BIAS_KEY;
        batch->n_uniq = 1;
        for (size_t j = 0; j < batch->n_prefix; j++) {
            uint32_t u = spw_trn__keyidx_upsert(&batch->dedup, batch->prefix[j],
                                                (uint32_t)batch->n_uniq, &inserted);
            assert(inserted); /* distinct block keys, none the bias */
            (void)u;
            batch->keys[batch->n_uniq++] = batch->prefix[j];
        }
    }
    uint32_t ex = (uint32_t)batch->n;
    size_t o = batch->n_occ, n_uniq = batch->n_uniq;
    enum { AHEAD = 8 }; /* keys hinted before their upsert: the table is larger than the caches */
    for (size_t j = 0; j < n && j < AHEAD; j++)
        spw_trn__keyidx_prefetch(&batch->dedup, keys[j]);
    for (size_t j = 0; j < n; j++, o++) {
        if (j + AHEAD < n)
            spw_trn__keyidx_prefetch(&batch->dedup, keys[j + AHEAD]);
        uint32_t u = spw_trn__keyidx_upsert(&batch->dedup, keys[j], (uint32_t)n_uniq, &inserted);
        if (inserted)
            batch->keys[n_uniq++] = keys[j];
        batch->occ_idx[o] = u;
        batch->occ_w[o] = weights ? weights[j] : 1.0f;
        batch->occ_ex[o] = ex;
        batch->occ_field[o] = fields ? fields[j] : UINT32_MAX;
    }
    batch->n_uniq = n_uniq;
    batch->n_occ = o;
    batch->labels[ex] = label;
    batch->oracle[ex] = oracle_p;
    batch->offsets[ex + 1] = (uint32_t)o;
    batch->n = ex + 1u;
    if (event_time_ms > batch->max_event_time_ms)
        batch->max_event_time_ms = event_time_ms;
    return SPW_OK;
}

spw_err_t spw_batch_add_example(spw_batch_t *batch, const Sparrow__Example *ex)
{
    if (!ex->has_label)
        return SPW_ERR_INVALID;
    if (ex->n_weights != 0 && ex->n_weights != ex->n_keys)
        return SPW_ERR_INVALID;
    return spw_batch_add_fields(batch, ex->label, ex->has_oracle_p ? ex->oracle_p : NAN,
                                ex->has_event_time_ms ? ex->event_time_ms : INT64_MIN, ex->n_keys,
                                ex->keys, ex->n_weights ? ex->weights : NULL,
                                ex->n_fields == ex->n_keys ? ex->fields : NULL);
}

size_t spw_batch_examples(const spw_batch_t *batch)
{
    return batch->n;
}

size_t spw_batch_unique(const spw_batch_t *batch)
{
    return batch->n_uniq;
}

size_t spw_batch_occurrences(const spw_batch_t *batch)
{
    return batch->n_occ;
}

const uint64_t *spw_batch_keys(const spw_batch_t *batch)
{
    return batch->keys;
}

const float *spw_batch_labels(const spw_batch_t *batch)
{
    return batch->labels;
}

const float *spw_batch_oracle(const spw_batch_t *batch)
{
    return batch->oracle;
}

size_t spw_batch_example_features(const spw_batch_t *batch, size_t i, const uint32_t **idx,
                                  const float **weights)
{
    assert(i < batch->n);
    uint32_t beg = batch->offsets[i];
    *idx = batch->occ_idx + beg;
    *weights = batch->occ_w + beg;
    return batch->offsets[i + 1] - beg;
}

const uint32_t *spw_batch_occ_fields(const spw_batch_t *batch)
{
    return batch->occ_field;
}

int64_t spw_batch_max_event_time(const spw_batch_t *batch)
{
    return batch->max_event_time_ms;
}

void spw_trn__batch_row_csr(const spw_batch_t *batch, uint32_t *row_start, uint32_t *row_occ)
{
    size_t n_uniq = batch->n_uniq;
    memset(row_start, 0, (n_uniq + 1) * sizeof(uint32_t));
    for (size_t o = 0; o < batch->n_occ; o++)
        row_start[batch->occ_idx[o] + 1]++;
    for (size_t u = 0; u < n_uniq; u++)
        row_start[u + 1] += row_start[u];
    /* Fill with a moving cursor per row (row_start[u] advanced, then shifted back). */
    for (size_t o = 0; o < batch->n_occ; o++)
        row_occ[row_start[batch->occ_idx[o]]++] = (uint32_t)o;
    for (size_t u = n_uniq; u > 0; u--)
        row_start[u] = row_start[u - 1];
    row_start[0] = 0;
}
