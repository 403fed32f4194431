/* The CUDA entry points of builds without nvcc: they report that the backend is absent. */
#include "sparrow/trainer.h"

#ifndef SPARROW_HAVE_CUDA
bool spw_cuda_built(void)
{
    return false;
}

int spw_cuda_device_count(void)
{
    return 0;
}

spw_err_t spw_cuda_gather_rows(const float *rows, size_t n_rows, uint32_t dim,
                               const uint32_t *idx, size_t n, float *out)
{
    (void)rows, (void)n_rows, (void)dim, (void)idx, (void)n, (void)out;
    return SPW_ERR_UNSUPPORTED;
}
#endif
