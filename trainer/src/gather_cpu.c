/* CPU backend: gather of embedding rows (the oracle for the CUDA kernel). */
#include "sparrow/trainer.h"

#include <assert.h>
#include <string.h>

void spw_cpu_gather_rows(const float *rows, size_t n_rows, uint32_t dim, const uint32_t *idx,
                         size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        assert(idx[i] < n_rows);
        (void)n_rows;
        memcpy(out + i * dim, rows + (size_t)idx[i] * dim, (size_t)dim * sizeof(float));
    }
}
