// CUDA backend: gather of embedding rows on the device. Only trainer/cuda/ includes CUDA headers.
#include <cuda_runtime.h>

#include "trainer_cuda.h"

namespace
{

// One thread per output element; a bad index raises *bad instead of reading out of bounds.
__global__ void gather_rows_kernel(const float *rows, size_t n_rows, uint32_t dim,
                                   const uint32_t *idx, size_t n, float *out, int *bad)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = n * dim;
    for (; t < total; t += (size_t)gridDim.x * blockDim.x) {
        size_t i = t / dim, d = t % dim;
        uint32_t r = idx[i];
        if (r >= n_rows) {
            *bad = 1;
            continue;
        }
        out[t] = rows[(size_t)r * dim + d];
    }
}

struct device_buffers {
    float *rows = nullptr;
    uint32_t *idx = nullptr;
    float *out = nullptr;
    int *bad = nullptr;
    cudaStream_t stream = nullptr;

    ~device_buffers()
    {
        cudaFree(rows);
        cudaFree(idx);
        cudaFree(out);
        cudaFree(bad);
        if (stream)
            cudaStreamDestroy(stream);
    }
};

} // namespace

extern "C" bool spw_cuda_built(void)
{
    return true;
}

extern "C" int spw_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" spw_err_t spw_cuda_gather_rows(const float *rows, size_t n_rows, uint32_t dim,
                                          const uint32_t *idx, size_t n, float *out)
{
    if (spw_cuda_device_count() < 1)
        return SPW_ERR_CUDA;
    if (n == 0 || dim == 0)
        return SPW_OK;
    device_buffers d;
    size_t rows_bytes = n_rows * dim * sizeof(float), out_bytes = n * dim * sizeof(float);
    int bad = 0;
    if (cudaStreamCreate(&d.stream) != cudaSuccess ||
        cudaMalloc(&d.rows, rows_bytes ? rows_bytes : 1) != cudaSuccess ||
        cudaMalloc(&d.idx, n * sizeof(uint32_t)) != cudaSuccess ||
        cudaMalloc(&d.out, out_bytes) != cudaSuccess ||
        cudaMalloc(&d.bad, sizeof(int)) != cudaSuccess)
        return SPW_ERR_CUDA;
    if (cudaMemcpyAsync(d.rows, rows, rows_bytes, cudaMemcpyHostToDevice, d.stream) !=
            cudaSuccess ||
        cudaMemcpyAsync(d.idx, idx, n * sizeof(uint32_t), cudaMemcpyHostToDevice, d.stream) !=
            cudaSuccess ||
        cudaMemsetAsync(d.bad, 0, sizeof(int), d.stream) != cudaSuccess)
        return SPW_ERR_CUDA;
    size_t total = n * dim;
    unsigned threads = 256;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    if (blocks > 65535)
        blocks = 65535;
    gather_rows_kernel<<<blocks, threads, 0, d.stream>>>(d.rows, n_rows, dim, d.idx, n, d.out,
                                                         d.bad);
    if (cudaGetLastError() != cudaSuccess ||
        cudaMemcpyAsync(out, d.out, out_bytes, cudaMemcpyDeviceToHost, d.stream) != cudaSuccess ||
        cudaMemcpyAsync(&bad, d.bad, sizeof(int), cudaMemcpyDeviceToHost, d.stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(d.stream) != cudaSuccess)
        return SPW_ERR_CUDA;
    return bad ? SPW_ERR_INVALID : SPW_OK;
}
