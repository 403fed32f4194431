/* trainer: gradient accumulation over micro-batches (per-key sums of gradient rows). */
#include "trainer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spw_grad_acc {
    uint32_t dim;
    size_t n;
    uint64_t *keys;
    float *grads; /* n × dim */
    uint32_t *versions;
    float *pulled;  /* n × dim: each row's values as pulled for the latest add holding its key */
    bool pulled_ok; /* every add since the reset carried pulled values */
    size_t cap_keys, cap_grads, cap_versions, cap_pulled;
    struct spw_trn__keyidx index; /* key -> row */
};

spw_grad_acc_t *spw_grad_acc_new(uint32_t dim, char *errstr, size_t errstr_size)
{
    spw_grad_acc_t *acc = calloc(1, sizeof(*acc));
    if (!acc) {
        snprintf(errstr, errstr_size, "grad_acc: out of memory");
        return NULL;
    }
    acc->dim = dim;
    spw_trn__keyidx_init(&acc->index);
    return acc;
}

void spw_grad_acc_destroy(spw_grad_acc_t *acc)
{
    if (!acc)
        return;
    free(acc->keys);
    free(acc->grads);
    free(acc->versions);
    free(acc->pulled);
    spw_trn__keyidx_fini(&acc->index);
    free(acc);
}

spw_err_t spw_grad_acc_add(spw_grad_acc_t *acc, const uint64_t *keys, const float *grads,
                           const uint32_t *versions, size_t n)
{
    return spw_grad_acc_add_pulled(acc, keys, grads, versions, NULL, n);
}

spw_err_t spw_grad_acc_add_pulled(spw_grad_acc_t *acc, const uint64_t *keys, const float *grads,
                                  const uint32_t *versions, const float *pulled, size_t n)
{
    const uint32_t dim = acc->dim;
    size_t need = acc->n + n;
    if (need >= UINT32_MAX)
        return SPW_ERR_NOMEM;
    if (spw_trn__grow((void **)&acc->keys, &acc->cap_keys, need, sizeof(uint64_t)) ||
        spw_trn__grow((void **)&acc->grads, &acc->cap_grads, need * dim, sizeof(float)) ||
        spw_trn__grow((void **)&acc->versions, &acc->cap_versions, need, sizeof(uint32_t)) ||
        (pulled &&
         spw_trn__grow((void **)&acc->pulled, &acc->cap_pulled, need * dim, sizeof(float))) ||
        spw_trn__keyidx_reserve(&acc->index, need))
        return SPW_ERR_NOMEM;
    if (n > 0)
        acc->pulled_ok = pulled && (acc->n == 0 || acc->pulled_ok);
    for (size_t r = 0; r < n; r++) {
        bool inserted;
        uint32_t version = versions ? versions[r] : 0;
        uint32_t row = spw_trn__keyidx_upsert(&acc->index, keys[r], (uint32_t)acc->n, &inserted);
        float *dst = acc->grads + (size_t)row * dim;
        const float *src = grads + r * dim;
        if (pulled) /* the latest micro-batch's values of the row */
            memcpy(acc->pulled + (size_t)row * dim, pulled + r * dim, dim * sizeof(float));
        if (inserted) {
            acc->keys[acc->n] = keys[r];
            acc->versions[acc->n] = version;
            memcpy(dst, src, dim * sizeof(float));
            acc->n++;
            continue;
        }
        for (uint32_t j = 0; j < dim; j++)
            dst[j] += src[j];
        if (version < acc->versions[row])
            acc->versions[row] = version;
    }
    return SPW_OK;
}

size_t spw_grad_acc_rows(const spw_grad_acc_t *acc)
{
    return acc->n;
}

const uint64_t *spw_grad_acc_keys(const spw_grad_acc_t *acc)
{
    return acc->keys;
}

float *spw_grad_acc_grads(spw_grad_acc_t *acc)
{
    return acc->grads;
}

const uint32_t *spw_grad_acc_versions(const spw_grad_acc_t *acc)
{
    return acc->versions;
}

const float *spw_grad_acc_pulled(const spw_grad_acc_t *acc)
{
    return acc->n > 0 && acc->pulled_ok ? acc->pulled : NULL;
}

void spw_grad_acc_reset(spw_grad_acc_t *acc)
{
    acc->n = 0;
    acc->pulled_ok = false;
    spw_trn__keyidx_clear(&acc->index);
}
