/* dense: the CUDA network's entry points in a build without CUDA: each fails cleanly. */
#include "sparrow/dense.h"

#ifndef SPARROW_HAVE_CUDA
bool spw_dense_cuda_built(void)
{
    return false;
}

int spw_dense_cuda_device_count(void)
{
    return 0;
}

spw_dense_cuda_t *spw_dense_cuda_new(const struct spw_dense_spec *spec, int device, char *errstr,
                                     size_t errstr_size)
{
    (void)spec;
    (void)device;
    spw_errf(SPW_ERR_UNSUPPORTED, errstr, errstr_size,
             "dense CUDA network: not built (no nvcc at configuration)");
    return NULL;
}

void spw_dense_cuda_destroy(spw_dense_cuda_t *cu)
{
    (void)cu;
}

spw_err_t spw_dense_cuda_forward(spw_dense_cuda_t *cu, const float *params, const float *x,
                                 size_t n, float *logits, bool train)
{
    (void)cu;
    (void)params;
    (void)x;
    (void)n;
    (void)logits;
    (void)train;
    return SPW_ERR_UNSUPPORTED;
}

spw_err_t spw_dense_cuda_backward(spw_dense_cuda_t *cu, const float *dlogit, float *grads,
                                  float *dx)
{
    (void)cu;
    (void)dlogit;
    (void)grads;
    (void)dx;
    return SPW_ERR_UNSUPPORTED;
}

uint64_t spw_dense_cuda_train_forwards(const spw_dense_cuda_t *cu)
{
    (void)cu;
    return 0;
}

void spw_dense_cuda_set_train_forwards(spw_dense_cuda_t *cu, uint64_t t)
{
    (void)cu;
    (void)t;
}
#else
/* ISO C forbids an empty translation unit */
typedef int spw_dense__cuda_stub_unused;
#endif
