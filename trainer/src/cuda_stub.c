/* The CUDA entry points of builds without nvcc: they report that the backend is absent. */
#include "trainer_cuda.h"
#include "sparrow/trainer.h" /* both declare spw_cuda_*: the compiler checks that they agree */

#include <stdio.h>

#ifndef SPARROW_HAVE_CUDA
bool spw_cuda_built(void)
{
    return false;
}

int spw_cuda_device_count(void)
{
    return 0;
}

spw_err_t spw_cuda_gather_rows(const float *rows, size_t n_rows, uint32_t dim, const uint32_t *idx,
                               size_t n, float *out)
{
    (void)rows, (void)n_rows, (void)dim, (void)idx, (void)n, (void)out;
    return SPW_ERR_UNSUPPORTED;
}

struct spw_trn__cuda *spw_trn__cuda_new(int device, char *errstr, size_t errstr_size)
{
    (void)device;
    snprintf(errstr, errstr_size, "this build has no CUDA backend");
    return NULL;
}

void spw_trn__cuda_destroy(struct spw_trn__cuda *cu)
{
    (void)cu;
}

spw_err_t spw_trn__cuda_forward(struct spw_trn__cuda *cu, uint32_t k, uint32_t dim,
                                const struct spw_trn__cuda_batch *batch, const float *rows,
                                float grad_scale, float *preds, float *grads, double *loss_sum)
{
    (void)cu, (void)k, (void)dim, (void)batch, (void)rows, (void)grad_scale, (void)preds;
    (void)grads, (void)loss_sum;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_forward_start(struct spw_trn__cuda *cu, uint32_t k, uint32_t dim,
                                      const struct spw_trn__cuda_batch *batch, const float *rows,
                                      float grad_scale, float *preds, float *grads)
{
    (void)cu, (void)k, (void)dim, (void)batch, (void)rows, (void)grad_scale, (void)preds;
    (void)grads;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_forward_finish(struct spw_trn__cuda *cu, double *loss_sum)
{
    (void)cu, (void)loss_sum;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_row_norms(struct spw_trn__cuda *cu, const float *grads, size_t n,
                                  uint32_t dim, float *norms)
{
    (void)cu, (void)grads, (void)n, (void)dim, (void)norms;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_topk_select(struct spw_trn__cuda *cu, const float *norms, size_t n,
                                    size_t m, uint8_t *selected)
{
    (void)cu, (void)norms, (void)n, (void)m, (void)selected;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_topk_rows(struct spw_trn__cuda *cu, const float *grads, size_t n,
                                  uint32_t dim, size_t m, const uint8_t *pinned, uint8_t *selected)
{
    (void)cu, (void)grads, (void)n, (void)dim, (void)m, (void)pinned, (void)selected;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_emulate_forward(uint32_t k, uint32_t dim,
                                        const struct spw_trn__cuda_batch *batch, const float *rows,
                                        float grad_scale, float *preds, float *grads,
                                        double *loss_sum)
{
    (void)k, (void)dim, (void)batch, (void)rows, (void)grad_scale, (void)preds, (void)grads;
    (void)loss_sum;
    return SPW_ERR_UNSUPPORTED;
}

void spw_trn__cuda_emulate_row_norms(const float *grads, size_t n, uint32_t dim, float *norms)
{
    (void)grads, (void)n, (void)dim, (void)norms;
}

spw_err_t spw_trn__cuda_emulate_topk_select(const float *norms, size_t n, size_t m,
                                            uint8_t *selected)
{
    (void)norms, (void)n, (void)m, (void)selected;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_trn__cuda_emulate_topk_rows(const float *grads, size_t n, uint32_t dim, size_t m,
                                          const uint8_t *pinned, uint8_t *selected)
{
    (void)grads, (void)n, (void)dim, (void)m, (void)pinned, (void)selected;
    return SPW_ERR_UNSUPPORTED;
}
#endif
