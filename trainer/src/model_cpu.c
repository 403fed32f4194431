/* trainer: the CPU backend (the oracle): LR/FM forward and backward, row norms, top-k selection. */
#include "trainer_int.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * The arithmetic below is written so that the CUDA kernels (trainer/cuda/model.cu, built without
 * fused multiply-add) can repeat it operation for operation: every sum runs in occurrence order,
 * the sigmoid and the loss are computed in double from the float logit, and the bias gradient is
 * summed apart and added last. Change both files together.
 */

/* log(1 + e^z) - y z, stable for any z. */
static inline double logloss_from_logit(float z, float y)
{
    double zd = z;
    return fmax(zd, 0.0) + log1p(exp(-fabs(zd))) - (double)y * zd;
}

static inline float sigmoid_from_logit(float z)
{
    return (float)(1.0 / (1.0 + exp(-(double)z)));
}

/* One pass over examples i0 .. i1 - 1 of the batch; backward is a compile-time constant at each
 * call site. preds, extra and dz_out are indexed from i0 (preds[i - i0]); grads covers every
 * unique row (zeroed here). extra (NULL: none) adds a logit per example (a deep model's network);
 * dz_out (NULL: not wanted) receives each example's dL/dlogit × grad_scale. */
static inline double run_batch(const struct spw_model *model, const spw_batch_t *batch, size_t i0,
                               size_t i1, const float *restrict rows, float grad_scale,
                               float *restrict preds, float *restrict grads, bool backward,
                               const float *restrict extra, float *restrict dz_out)
{
    const uint32_t dim = model->dim, k = model->latent_dim;
    const uint32_t *restrict off = batch->offsets;
    const uint32_t *restrict occ_idx = batch->occ_idx;
    const float *restrict occ_w = batch->occ_w;
    float s[SPW_TRN_MAX_LATENT], q[SPW_TRN_MAX_LATENT];
    double loss = 0.0;
    float bias_grad = 0.0f;

    if (backward && batch->n_uniq)
        memset(grads, 0, batch->n_uniq * dim * sizeof(float));
    for (size_t i = i0; i < i1; i++) {
        const uint32_t beg = off[i], end = off[i + 1];
        float lin = rows[0];
        for (uint32_t o = beg; o < end; o++)
            lin += rows[(size_t)occ_idx[o] * dim] * occ_w[o];
        float inter = 0.0f;
        if (k) {
            for (uint32_t f = 0; f < k; f++)
                s[f] = q[f] = 0.0f;
            for (uint32_t o = beg; o < end; o++) {
                const float *restrict v = rows + (size_t)occ_idx[o] * dim + 1;
                const float x = occ_w[o];
                for (uint32_t f = 0; f < k; f++) {
                    float vx = v[f] * x;
                    s[f] += vx;
                    q[f] += vx * vx;
                }
            }
            for (uint32_t f = 0; f < k; f++)
                inter += s[f] * s[f] - q[f];
        }
        const float z = lin + 0.5f * inter + (extra ? extra[i - i0] : 0.0f);
        const float y = batch->labels[i];
        const float p = sigmoid_from_logit(z);
        preds[i - i0] = p;
        loss += logloss_from_logit(z, y);
        if (!backward)
            continue;

        const float dz = (p - y) * grad_scale;
        if (dz_out)
            dz_out[i - i0] = dz;
        bias_grad += dz;
        for (uint32_t o = beg; o < end; o++) {
            const size_t r = (size_t)occ_idx[o] * dim;
            const float x = occ_w[o];
            const float dzx = dz * x;
            grads[r] += dzx;
            if (k) {
                const float *restrict v = rows + r + 1;
                float *restrict g = grads + r + 1;
                for (uint32_t f = 0; f < k; f++)
                    g[f] += dzx * (s[f] - x * v[f]);
            }
        }
    }
    if (backward && batch->n_uniq)
        grads[0] += bias_grad;
    return loss;
}

double spw_cpu_forward(const struct spw_model *model, const spw_batch_t *batch, const float *rows,
                       float *preds)
{
    return run_batch(model, batch, 0, batch->n, rows, 0.0f, preds, NULL, false, NULL, NULL);
}

double spw_cpu_forward_backward(const struct spw_model *model, const spw_batch_t *batch,
                                const float *rows, float grad_scale, float *preds, float *grads)
{
    return run_batch(model, batch, 0, batch->n, rows, grad_scale, preds, grads, true, NULL, NULL);
}

double spw_trn__fm_forward_extra(const struct spw_model *model, const spw_batch_t *batch,
                                 const float *rows, const float *extra, float *preds)
{
    return run_batch(model, batch, 0, batch->n, rows, 0.0f, preds, NULL, false, extra, NULL);
}

double spw_trn__fm_backward_extra(const struct spw_model *model, const spw_batch_t *batch,
                                  const float *rows, const float *extra, float grad_scale,
                                  float *preds, float *grads, float *dz)
{
    return run_batch(model, batch, 0, batch->n, rows, grad_scale, preds, grads, true, extra, dz);
}

double spw_trn__fm_backward_slice(const struct spw_model *model, const spw_batch_t *batch,
                                  size_t i0, size_t i1, const float *rows, const float *extra,
                                  float grad_scale, float *preds, float *grads, float *dz)
{
    return run_batch(model, batch, i0, i1, rows, grad_scale, preds, grads, true, extra, dz);
}

void spw_cpu_row_norms(const float *grads, size_t n, uint32_t dim, float *norms)
{
    for (size_t r = 0; r < n; r++) {
        const float *g = grads + r * dim;
        double sum = 0.0;
        for (uint32_t j = 0; j < dim; j++)
            sum += (double)g[j] * g[j];
        norms[r] = (float)sqrt(sum);
    }
}

/* Total order of the selection: norm bits (NaN above +inf, <= 0 as 0), then lower index first.
 * Norms are >= 0, so their IEEE bits order like their values. The CUDA kernel uses the same. */
static inline uint64_t rank_key(float norm, size_t r)
{
    uint32_t bits;
    if (norm > 0.0f)
        memcpy(&bits, &norm, sizeof(bits));
    else
        bits = norm != norm ? 0x7f800001u : 0u;
    return ((uint64_t)bits << 32) | (uint32_t)(UINT32_MAX - (uint32_t)r);
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : (x > y ? -1 : 0);
}

/* The k-th largest (0-based) of n distinct values, reordering a: Wirth's quickselect with a
 * median-of-three pivot, falling back to a sort of the remaining range after about 2 log2(n)
 * rounds (introselect), so that the worst case stays O(n log n). */
static uint64_t select_kth_largest(uint64_t *a, size_t n, size_t k)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, kk = (ptrdiff_t)k;
    int budget = 2;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (lo < hi) {
        if (budget-- == 0) {
            qsort(a + lo, (size_t)(hi - lo + 1), sizeof(*a), cmp_desc);
            return a[k];
        }
        uint64_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
        uint64_t pivot = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
        ptrdiff_t i = lo, j = hi;
        do {
            while (a[i] > pivot)
                i++;
            while (pivot > a[j])
                j--;
            if (i <= j) {
                uint64_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        } while (i <= j);
        /* a[lo..j] >= pivot >= a[i..hi]; anything between equals the pivot. */
        if (j < kk)
            lo = i;
        if (kk < i)
            hi = j;
    }
    return a[k];
}

void spw_cpu_topk_select(const float *norms, size_t n, size_t m, uint64_t *scratch,
                         uint8_t *selected)
{
    assert(n < UINT32_MAX);
    if (m >= n || m == 0) {
        memset(selected, m ? 1 : 0, n);
        return;
    }
    for (size_t r = 0; r < n; r++)
        scratch[r] = rank_key(norms[r], r);
    uint64_t threshold = select_kth_largest(scratch, n, m - 1);
    for (size_t r = 0; r < n; r++)
        selected[r] = rank_key(norms[r], r) >= threshold;
}

void spw_cpu_topk_rows(const float *grads, size_t n, uint32_t dim, size_t m, const uint8_t *pinned,
                       float *norms, uint64_t *scratch, uint8_t *selected)
{
    spw_cpu_row_norms(grads, n, dim, norms);
    for (size_t r = 0; pinned && r < n; r++)
        if (pinned[r])
            norms[r] = NAN;
    spw_cpu_topk_select(norms, n, m, scratch, selected);
}
