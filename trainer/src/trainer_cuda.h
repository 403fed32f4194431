/* trainer: the C interface of the CUDA backend (the .cu files in trainer/cuda), in plain host
 * arrays so that the .cu files include no Sparrow header but this one and err.h. Not API. */
#ifndef SPARROW_TRAINER_CUDA_H
#define SPARROW_TRAINER_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Declared in sparrow/trainer.h too; cuda_stub.c includes both so the compiler checks they agree.
 */
bool spw_cuda_built(void);
int spw_cuda_device_count(void);
spw_err_t spw_cuda_gather_rows(const float *rows, size_t n_rows, uint32_t dim, const uint32_t *idx,
                               size_t n, float *out);

/* The backward sums a row's occurrences in chunks of this many, each in order, then the chunks in
 * order (the bias: the examples in chunks). A row with no more occurrences than this is summed
 * exactly as the CPU sums it. */
#define SPW_TRN_CUDA_CHUNK 256u

/* A batch as host arrays (see struct spw_batch in trainer_int.h). */
struct spw_trn__cuda_batch {
    size_t n, n_occ, n_uniq;
    const uint32_t *offsets; /* n + 1 */
    const uint32_t *occ_idx; /* n_occ */
    const float *occ_w;      /* n_occ */
    const uint32_t *occ_ex;  /* n_occ (the host emulation only: the device derives it) */
    const float *labels;     /* n */
    /* the backward's per-row occurrence lists (spw_trn__batch_row_csr): read by the host
     * emulation only; the device builds its own */
    const uint32_t *row_start; /* n_uniq + 1 */
    const uint32_t *row_occ;   /* n_occ */
};

/* Device context: a device, a stream, device buffers grown to the largest batch. One owner. */
struct spw_trn__cuda;

/* NULL with errstr when the device cannot be used. */
struct spw_trn__cuda *spw_trn__cuda_new(int device, char *errstr, size_t errstr_size);
void spw_trn__cuda_destroy(struct spw_trn__cuda *cu);

/* Forward (grads NULL) or forward + backward of the model (latent k, dim = 1 + k; k = 0 is LR)
 * on batch and rows (n_uniq × dim host floats). preds: n; grads: n_uniq × dim; *loss_sum the
 * summed logloss. SPW_ERR_CUDA / SPW_ERR_NOMEM on failure. start + finish. */
spw_err_t spw_trn__cuda_forward(struct spw_trn__cuda *cu, uint32_t k, uint32_t dim,
                                const struct spw_trn__cuda_batch *batch, const float *rows,
                                float grad_scale, float *preds, float *grads, double *loss_sum);
/* The same in two halves, so that the host works while the device computes. start copies the
 * batch and rows into the context's pinned buffers and queues their upload, the kernels and the
 * results' download on the stream, then returns: batch and rows are free again at once; preds
 * and grads are written by finish, which waits for the device. One forward in flight per
 * context: a second start, or a norm or top-k call before finish, is SPW_ERR_STATE. A failed
 * start leaves nothing in flight. */
spw_err_t spw_trn__cuda_forward_start(struct spw_trn__cuda *cu, uint32_t k, uint32_t dim,
                                      const struct spw_trn__cuda_batch *batch, const float *rows,
                                      float grad_scale, float *preds, float *grads);
spw_err_t spw_trn__cuda_forward_finish(struct spw_trn__cuda *cu, double *loss_sum);

/* spw_cpu_row_norms and spw_cpu_topk_select on the device. */
spw_err_t spw_trn__cuda_row_norms(struct spw_trn__cuda *cu, const float *grads, size_t n,
                                  uint32_t dim, float *norms);
spw_err_t spw_trn__cuda_topk_select(struct spw_trn__cuda *cu, const float *norms, size_t n,
                                    size_t m, uint8_t *selected);
/* Both in one: the norms of grads (n × dim host floats), those of the rows marked in pinned
 * (n bytes, may be NULL) NaN, and the m-of-n selection by them into selected; one upload of
 * grads and pinned, one download of selected, the norms never leaving the device. */
spw_err_t spw_trn__cuda_topk_rows(struct spw_trn__cuda *cu, const float *grads, size_t n,
                                  uint32_t dim, size_t m, const uint8_t *pinned, uint8_t *selected);

/* The kernels' per-item code run on the host in the order the device's synchronisation
 * imposes, for tests of the CUDA backend's arithmetic and indexing on machines without a device
 * (SPW_ERR_UNSUPPORTED in builds without CUDA). Same contracts as above; allocate with malloc. */
spw_err_t spw_trn__cuda_emulate_forward(uint32_t k, uint32_t dim,
                                        const struct spw_trn__cuda_batch *batch, const float *rows,
                                        float grad_scale, float *preds, float *grads,
                                        double *loss_sum);
void spw_trn__cuda_emulate_row_norms(const float *grads, size_t n, uint32_t dim, float *norms);
spw_err_t spw_trn__cuda_emulate_topk_select(const float *norms, size_t n, size_t m,
                                            uint8_t *selected);
spw_err_t spw_trn__cuda_emulate_topk_rows(const float *grads, size_t n, uint32_t dim, size_t m,
                                          const uint8_t *pinned, uint8_t *selected);

#ifdef __cplusplus
}
#endif

#endif
