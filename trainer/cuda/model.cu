// CUDA backend: LR/FM forward and backward, per-row gradient norms and top-k selection on the
// device, behind the host-pointer functions of src/trainer_cuda.h.
//
// The kernels repeat the CPU oracle's arithmetic (src/model_cpu.c) operation for operation, and
// the library is built with --fmad=false, so that the two agree to rounding:
// - forward: one warp per example; lane f sums s_f and q_f over the example's occurrences in
//   order; lane 0 sums the linear term in order, then the per-f terms s_f^2 - q_f in order;
//   the sigmoid and the loss are computed in double from the float logit;
// - backward: a row's occurrences, in ascending order (a stable radix sort of the occurrences by
//   row, on the device: the order in which the CPU's scatter-add reaches that row; the host
//   emulation uses the same order from the host's counting sort), are cut into chunks of
//   kChunk; one warp per chunk, lane d summing the chunk in order, then one warp per row summing
//   its chunks in order. A row of at most kChunk occurrences is therefore summed exactly as the
//   CPU sums it; a heavier row (a frequent feature value: in every example, say) differs from the
//   CPU by rounding only, and no longer costs one serial pass over the whole batch. The bias row
//   adds the per-example sum last, as the CPU does, summed in the same chunks;
// - norms: a double sum per row, rounded once; top-k: the same 64-bit rank keys as the CPU
//   (norm bits, then lower index first) and an exact radix select of the m-th largest.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <math.h>
#include <new>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_cuda.h"

namespace
{

constexpr unsigned kWarp = 32;
constexpr unsigned kWarpsPerBlock = 4;
constexpr unsigned kWarpThreads = kWarp * kWarpsPerBlock;
constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 65535;
constexpr size_t kHistBlocks = 1024;
constexpr uint32_t kChunk = SPW_TRN_CUDA_CHUNK; // see trainer_cuda.h

cudaError_t device_alloc(void **p, size_t bytes)
{
    return cudaMalloc(p, bytes);
}

cudaError_t pinned_alloc(void **p, size_t bytes)
{
    return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}

// A buffer that grows (at least doubling) and is reused, allocated by Alloc and freed by Free.
// Grown only while no copy or kernel uses it.
template <typename T, cudaError_t (*Alloc)(void **, size_t), cudaError_t (*Free)(void *)>
struct growbuf {
    T *p = nullptr;
    size_t cap = 0;

    cudaError_t reserve(size_t n)
    {
        if (n == 0)
            n = 1;
        if (n <= cap)
            return cudaSuccess;
        size_t c = cap ? cap : 256;
        while (c < n)
            c *= 2;
        Free(p);
        p = nullptr;
        cap = 0;
        cudaError_t err = Alloc((void **)&p, c * sizeof(T));
        if (err == cudaSuccess)
            cap = c;
        return err;
    }

    ~growbuf()
    {
        Free(p);
    }
};

// On the device.
template <typename T> using dbuf = growbuf<T, device_alloc, cudaFree>;
// Pinned (page-locked) on the host: the staging area of the asynchronous copies (a copy from or
// to pageable memory makes the host wait for it).
template <typename T> using hbuf = growbuf<T, pinned_alloc, cudaFreeHost>;

size_t blocks_for(size_t items, size_t per_block, size_t max_blocks)
{
    size_t b = (items + per_block - 1) / per_block;
    if (b < 1)
        b = 1;
    return b < max_blocks ? b : max_blocks;
}

// ---- per-item code, shared by the kernels and by the host emulation below ----

__host__ __device__ inline double logloss_from_logit(float z, float y)
{
    double zd = z;
    return fmax(zd, 0.0) + log1p(exp(-fabs(zd))) - (double)y * zd;
}

__host__ __device__ inline float sigmoid_from_logit(float z)
{
    return (float)(1.0 / (1.0 + exp(-(double)z)));
}

__host__ __device__ inline uint32_t float_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    return bits;
#endif
}

struct fwd_args {
    size_t n;
    uint32_t k, dim;
    const uint32_t *off, *occ_idx;
    const float *occ_w, *rows, *labels;
    float grad_scale;
    float *S, *preds, *dz;
    double *loss;
};

// Phase 1 of example i for one lane: s_f and q_f over the occurrences in order, for f = lane,
// lane + 32, ...; t[f] = s_f^2 - q_f.
__host__ __device__ inline void forward_lane(const fwd_args &a, size_t i, unsigned lane, float *t)
{
    const uint32_t beg = a.off[i], end = a.off[i + 1];
    for (uint32_t f = lane; f < a.k; f += kWarp) {
        float s = 0.0f, q = 0.0f;
        for (uint32_t o = beg; o < end; o++) {
            const float vx = a.rows[(size_t)a.occ_idx[o] * a.dim + 1 + f] * a.occ_w[o];
            s += vx;
            q += vx * vx;
        }
        a.S[i * a.k + f] = s;
        t[f] = s * s - q;
    }
}

// Phase 2 of example i (lane 0): the linear term and the sum of t in order, then p, loss, dz.
__host__ __device__ inline void forward_finish(const fwd_args &a, size_t i, const float *t)
{
    const uint32_t beg = a.off[i], end = a.off[i + 1];
    float lin = a.rows[0];
    for (uint32_t o = beg; o < end; o++)
        lin += a.rows[(size_t)a.occ_idx[o] * a.dim] * a.occ_w[o];
    float inter = 0.0f;
    for (uint32_t f = 0; f < a.k; f++)
        inter += t[f];
    const float z = lin + 0.5f * inter;
    const float y = a.labels[i];
    const float p = sigmoid_from_logit(z);
    a.preds[i] = p;
    a.loss[i] = logloss_from_logit(z, y);
    a.dz[i] = (p - y) * a.grad_scale;
}

struct bwd_args {
    size_t n, n_uniq;
    uint32_t k, dim;
    const uint32_t *row_start, *row_occ, *occ_ex;
    const float *occ_w, *rows, *S, *dz;
    // chunks: row_chunk[u] .. row_chunk[u + 1] are row u's; chunk c starts at chunk_beg[c] in
    // row_occ and belongs to row chunk_row[c]
    const uint32_t *row_chunk, *chunk_row, *chunk_beg;
    float *partial;      // n_chunks x dim
    float *bias_partial; // one per kChunk examples
    float *grads;
};

// Element d of chunk c: its occurrences in ascending order.
__host__ __device__ inline void backward_chunk_elem(const bwd_args &a, size_t c, uint32_t d)
{
    const uint32_t u = a.chunk_row[c], beg = a.chunk_beg[c];
    const uint32_t row_end = a.row_start[u + 1];
    const uint32_t end = row_end - beg > kChunk ? beg + kChunk : row_end;
    float acc = 0.0f;
    if (d == 0) {
        for (uint32_t j = beg; j < end; j++) {
            const uint32_t o = a.row_occ[j];
            const float dzx = a.dz[a.occ_ex[o]] * a.occ_w[o];
            acc += dzx;
        }
    } else {
        const uint32_t f = d - 1;
        const float v = a.rows[(size_t)u * a.dim + d];
        for (uint32_t j = beg; j < end; j++) {
            const uint32_t o = a.row_occ[j];
            const uint32_t i = a.occ_ex[o];
            const float x = a.occ_w[o];
            const float dzx = a.dz[i] * x;
            acc += dzx * (a.S[(size_t)i * a.k + f] - x * v);
        }
    }
    a.partial[c * a.dim + d] = acc;
}

// The sum of dz over examples b * kChunk .. (b + 1) * kChunk, in order.
__host__ __device__ inline void backward_bias_chunk(const bwd_args &a, size_t b)
{
    const size_t beg = b * kChunk, end = a.n - beg > kChunk ? beg + kChunk : a.n;
    float acc = 0.0f;
    for (size_t i = beg; i < end; i++)
        acc += a.dz[i];
    a.bias_partial[b] = acc;
}

// Gradient element d of unique row u: its chunks in order; the bias row (u = 0) adds the
// per-example sum last.
__host__ __device__ inline void backward_finish_elem(const bwd_args &a, size_t u, uint32_t d)
{
    float acc = 0.0f;
    for (uint32_t c = a.row_chunk[u]; c < a.row_chunk[u + 1]; c++)
        acc += a.partial[(size_t)c * a.dim + d];
    if (u == 0 && d == 0) {
        float bias = 0.0f;
        for (size_t b = 0; b * kChunk < a.n; b++)
            bias += a.bias_partial[b];
        acc += bias;
    }
    a.grads[u * a.dim + d] = acc;
}

__host__ __device__ inline float row_norm(const float *grads, size_t r, uint32_t dim)
{
    const float *g = grads + r * dim;
    double sum = 0.0;
    for (uint32_t j = 0; j < dim; j++)
        sum += (double)g[j] * (double)g[j];
    return (float)sqrt(sum);
}

// The CPU's rank_key (src/model_cpu.c): norm bits (NaN above +inf, <= 0 as 0), lower index first.
__host__ __device__ inline unsigned long long rank_key(float x, size_t r)
{
    uint32_t bits;
    if (x > 0.0f)
        bits = float_bits(x);
    else
        bits = x != x ? 0x7f800001u : 0u;
    return ((unsigned long long)bits << 32) | (unsigned long long)(0xffffffffu - (uint32_t)r);
}

// Radix select state: [0] prefix of the m-th largest key found so far, [1] mask of its known
// bits, [2] its rank among the keys that share the prefix (1 = the largest). Picks the digit of
// this pass (shift) that holds the wanted rank, then clears the histogram for the next pass.
__host__ __device__ inline void pick_digit(unsigned int *hist, unsigned long long *state, int shift)
{
    const unsigned long long remaining = state[2];
    unsigned long long above = 0;
    for (int d = 255; d >= 0; d--) {
        const unsigned long long c = hist[d];
        if (above + c >= remaining) {
            state[0] |= (unsigned long long)d << shift;
            state[1] |= 0xffull << shift;
            state[2] = remaining - above;
            break;
        }
        above += c;
    }
    for (int d = 0; d < 256; d++)
        hist[d] = 0;
}

// Cuts each row's occurrences (row_start, n_uniq rows) into chunks of kChunk, a row with none
// getting one empty chunk: fills row_chunk (n_uniq + 1), chunk_row and chunk_beg (room for
// max_chunks(n_uniq, n_occ)) and returns the number of chunks.
inline size_t max_chunks(size_t n_uniq, size_t n_occ)
{
    return n_uniq + n_occ / kChunk + 1;
}

size_t make_chunks(const uint32_t *row_start, size_t n_uniq, uint32_t *row_chunk,
                   uint32_t *chunk_row, uint32_t *chunk_beg)
{
    size_t c = 0;
    for (size_t u = 0; u < n_uniq; u++) {
        row_chunk[u] = (uint32_t)c;
        uint32_t beg = row_start[u];
        const uint32_t end = row_start[u + 1];
        do {
            chunk_row[c] = (uint32_t)u;
            chunk_beg[c] = beg;
            c++;
            beg = end - beg > kChunk ? beg + kChunk : end;
        } while (beg < end);
    }
    row_chunk[n_uniq] = (uint32_t)c;
    return c;
}

// ---- kernels ----

// One warp per example; shared memory holds each warp's t for lane 0's ordered sum.
__global__ void forward_kernel(fwd_args a)
{
    extern __shared__ float shared[];
    const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    float *t = shared + (size_t)warp * a.k;
    for (size_t i = (size_t)blockIdx.x * kWarpsPerBlock + warp; i < a.n;
         i += (size_t)gridDim.x * kWarpsPerBlock) {
        forward_lane(a, i, lane, t);
        __syncwarp();
        if (lane == 0)
            forward_finish(a, i, t);
        __syncwarp();
    }
}

// One warp per chunk (lane d computes elements d, d + 32, ...); the first threads of the grid
// also sum the bias chunks.
__global__ void backward_chunk_kernel(bwd_args a)
{
    const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const size_t n_chunks = a.row_chunk[a.n_uniq];
    for (size_t c = (size_t)blockIdx.x * kWarpsPerBlock + warp; c < n_chunks;
         c += (size_t)gridDim.x * kWarpsPerBlock)
        for (uint32_t d = lane; d < a.dim; d += kWarp)
            backward_chunk_elem(a, c, d);
    for (size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; b * kChunk < a.n;
         b += (size_t)gridDim.x * blockDim.x)
        backward_bias_chunk(a, b);
}

// ---- the backward's indexes, built on the device from the batch's offsets and occ_idx ----

// occ_ex[o]: the example of occurrence o; seq[o] = o (the values the sort carries).
__global__ void occ_ex_kernel(const uint32_t *__restrict__ off, size_t n,
                              uint32_t *__restrict__ occ_ex, uint32_t *__restrict__ seq)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        for (uint32_t o = off[i]; o < off[i + 1]; o++) {
            occ_ex[o] = (uint32_t)i;
            seq[o] = o;
        }
}

// count[u] += occurrences of row u (count zeroed, n_uniq + 1 entries).
__global__ void row_count_kernel(const uint32_t *__restrict__ occ_idx, size_t n_occ,
                                 uint32_t *__restrict__ count)
{
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_occ;
         o += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&count[occ_idx[o]], 1u);
}

// n_chunk[u]: the chunks of row u (at least one); n_chunk[n_uniq] = 0, for the scan's total.
__global__ void chunk_count_kernel(const uint32_t *__restrict__ row_start, size_t n_uniq,
                                   uint32_t *__restrict__ n_chunk)
{
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u <= n_uniq;
         u += (size_t)gridDim.x * blockDim.x) {
        if (u == n_uniq) {
            n_chunk[u] = 0;
            continue;
        }
        const uint32_t cnt = row_start[u + 1] - row_start[u];
        n_chunk[u] = cnt > kChunk ? (cnt + kChunk - 1) / kChunk : 1;
    }
}

// make_chunks' chunk_row and chunk_beg from row_start and row_chunk (the scan of n_chunk).
__global__ void chunk_fill_kernel(const uint32_t *__restrict__ row_start,
                                  const uint32_t *__restrict__ row_chunk, size_t n_uniq,
                                  uint32_t *__restrict__ chunk_row,
                                  uint32_t *__restrict__ chunk_beg)
{
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < n_uniq;
         u += (size_t)gridDim.x * blockDim.x)
        for (uint32_t c = row_chunk[u]; c < row_chunk[u + 1]; c++) {
            chunk_row[c] = (uint32_t)u;
            chunk_beg[c] = row_start[u] + (c - row_chunk[u]) * kChunk;
        }
}

// One warp per unique row; lane d computes elements d, d + 32, ...
__global__ void backward_finish_kernel(bwd_args a)
{
    const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    for (size_t u = (size_t)blockIdx.x * kWarpsPerBlock + warp; u < a.n_uniq;
         u += (size_t)gridDim.x * kWarpsPerBlock)
        for (uint32_t d = lane; d < a.dim; d += kWarp)
            backward_finish_elem(a, u, d);
}

__global__ void norms_kernel(const float *__restrict__ grads, size_t n, uint32_t dim,
                             float *__restrict__ norms)
{
    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < n;
         r += (size_t)gridDim.x * blockDim.x)
        norms[r] = row_norm(grads, r, dim);
}

// The pinned rows' norms to NaN, so that they rank first (topk.c: a deep model's dense blocks).
__global__ void pin_kernel(float *__restrict__ norms, const uint8_t *__restrict__ pinned, size_t n)
{
    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < n;
         r += (size_t)gridDim.x * blockDim.x)
        if (pinned[r])
            norms[r] = __int_as_float(0x7fc00000); // the host's NAN
}

__global__ void rank_keys_kernel(const float *__restrict__ norms, size_t n,
                                 unsigned long long *__restrict__ keys)
{
    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < n;
         r += (size_t)gridDim.x * blockDim.x)
        keys[r] = rank_key(norms[r], r);
}

__global__ void hist_kernel(const unsigned long long *__restrict__ keys, size_t n,
                            const unsigned long long *__restrict__ state, int shift,
                            unsigned int *__restrict__ hist)
{
    __shared__ unsigned int h[256];
    for (unsigned t = threadIdx.x; t < 256; t += blockDim.x)
        h[t] = 0;
    __syncthreads();
    const unsigned long long prefix = state[0], mask = state[1];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const unsigned long long key = keys[i];
        if ((key & mask) == prefix)
            atomicAdd(&h[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    for (unsigned t = threadIdx.x; t < 256; t += blockDim.x)
        if (h[t])
            atomicAdd(&hist[t], h[t]);
}

__global__ void pick_kernel(unsigned int *__restrict__ hist, unsigned long long *__restrict__ state,
                            int shift)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        pick_digit(hist, state, shift);
}

__global__ void flags_kernel(const unsigned long long *__restrict__ keys, size_t n,
                             const unsigned long long *__restrict__ state,
                             uint8_t *__restrict__ flags)
{
    const unsigned long long threshold = state[0];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        flags[i] = keys[i] >= threshold ? 1 : 0;
}

} // namespace

struct spw_trn__cuda {
    int device = 0;
    cudaStream_t stream = nullptr;
    dbuf<uint32_t> offsets, occ_idx, occ_ex, row_start, row_occ, row_chunk, chunk_row, chunk_beg;
    dbuf<float> occ_w, labels, rows, preds, dz, S, grads, norms, partial, bias_partial;
    dbuf<double> loss;
    dbuf<unsigned long long> keys, state;
    dbuf<unsigned int> hist;
    dbuf<uint8_t> flags;
    dbuf<uint32_t> seq, sorted_idx, count; // the backward's sort and scans
    dbuf<unsigned char> temp;              // cub's temporary storage
    // the forward's pinned staging: the batch and rows copied in at start, the results copied
    // out at finish
    hbuf<uint32_t> h_offsets, h_occ_idx;
    hbuf<float> h_occ_w, h_labels, h_rows, h_preds, h_grads;
    hbuf<double> h_loss;
    // a started forward: where finish copies its results (grads NULL: a forward only)
    bool in_flight = false;
    size_t pend_n = 0, pend_grads = 0;
    float *pend_preds = nullptr, *pend_grad_out = nullptr;

    ~spw_trn__cuda()
    {
        if (stream) {
            cudaStreamSynchronize(stream); // a started forward's copies into the staging
            cudaStreamDestroy(stream);
        }
    }
};

// Converts a failed CUDA call into SPW_ERR_CUDA. Work queued before the failure may still be
// copying into the caller's buffers: wait for the stream before returning (errors cleared).
#define CU_TRY(call)                                                                               \
    do {                                                                                           \
        if ((call) != cudaSuccess) {                                                               \
            cudaGetLastError();                                                                    \
            cudaStreamSynchronize(cu->stream);                                                     \
            cudaGetLastError();                                                                    \
            return SPW_ERR_CUDA;                                                                   \
        }                                                                                          \
    } while (0)

extern "C" struct spw_trn__cuda *spw_trn__cuda_new(int device, char *errstr, size_t errstr_size)
{
    spw_trn__cuda *cu = new (std::nothrow) spw_trn__cuda;
    if (!cu) {
        snprintf(errstr, errstr_size, "cuda: out of memory");
        return nullptr;
    }
    cu->device = device;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess)
        err = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        snprintf(errstr, errstr_size, "cuda: device %d: %s", device, cudaGetErrorString(err));
        cudaGetLastError();
        delete cu;
        return nullptr;
    }
    return cu;
}

extern "C" void spw_trn__cuda_destroy(struct spw_trn__cuda *cu)
{
    if (cu) {
        cudaSetDevice(cu->device);
        delete cu;
    }
}

// Copies n elements of src into the pinned staging buffer h (grown) and queues their upload into
// the device buffer d (grown) on the stream.
template <typename T>
static cudaError_t stage_upload(cudaStream_t st, hbuf<T> &h, dbuf<T> &d, const T *src, size_t n)
{
    cudaError_t err = h.reserve(n);
    if (err == cudaSuccess)
        err = d.reserve(n);
    if (err != cudaSuccess || n == 0)
        return err;
    memcpy(h.p, src, n * sizeof(T));
    return cudaMemcpyAsync(d.p, h.p, n * sizeof(T), cudaMemcpyHostToDevice, st);
}

extern "C" spw_err_t spw_trn__cuda_forward_start(struct spw_trn__cuda *cu, uint32_t k, uint32_t dim,
                                                 const struct spw_trn__cuda_batch *batch,
                                                 const float *rows, float grad_scale, float *preds,
                                                 float *grads)
{
    const size_t n = batch->n, n_occ = batch->n_occ, n_uniq = batch->n_uniq;
    if (cu->in_flight)
        return SPW_ERR_STATE;
    cu->pend_n = 0;
    cu->pend_grads = 0;
    if (n == 0) {
        cu->in_flight = true;
        return SPW_OK;
    }
    cudaStream_t st = cu->stream;
    CU_TRY(cudaSetDevice(cu->device));
    CU_TRY(cu->h_preds.reserve(n));
    CU_TRY(cu->h_loss.reserve(n));
    if (grads)
        CU_TRY(cu->h_grads.reserve(n_uniq * dim));
    CU_TRY(stage_upload(st, cu->h_offsets, cu->offsets, batch->offsets, n + 1));
    CU_TRY(stage_upload(st, cu->h_occ_idx, cu->occ_idx, batch->occ_idx, n_occ));
    CU_TRY(stage_upload(st, cu->h_occ_w, cu->occ_w, batch->occ_w, n_occ));
    CU_TRY(stage_upload(st, cu->h_labels, cu->labels, batch->labels, n));
    CU_TRY(stage_upload(st, cu->h_rows, cu->rows, rows, n_uniq * dim));
    CU_TRY(cu->preds.reserve(n));
    CU_TRY(cu->dz.reserve(n));
    CU_TRY(cu->loss.reserve(n));
    CU_TRY(cu->S.reserve(n * k));

    const size_t fwd_blocks = blocks_for(n, kWarpsPerBlock, kMaxBlocks);
    const size_t shared = (size_t)kWarpsPerBlock * k * sizeof(float);
    const fwd_args fa = {n,           k,          dim,          cu->offsets.p, cu->occ_idx.p,
                         cu->occ_w.p, cu->rows.p, cu->labels.p, grad_scale,    cu->S.p,
                         cu->preds.p, cu->dz.p,   cu->loss.p};
    forward_kernel<<<(unsigned)fwd_blocks, kWarpThreads, shared, st>>>(fa);
    CU_TRY(cudaGetLastError());

    if (grads) {
        // the backward's indexes, on the device: occurrences sorted by row (stable, so each row's
        // in ascending order), row_start by a scan of the per-row counts, then the chunks
        const size_t n_chunks_max = max_chunks(n_uniq, n_occ);
        int bits = 1;
        while (bits < 32 && (1ull << bits) < n_uniq)
            bits++;
        size_t sort_bytes = 0, scan_bytes = 0;
        CU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint32_t *)nullptr,
                                               (uint32_t *)nullptr, (const uint32_t *)nullptr,
                                               (uint32_t *)nullptr, n_occ, 0, bits, st));
        CU_TRY(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, (const uint32_t *)nullptr,
                                             (uint32_t *)nullptr, n_uniq + 1, st));
        CU_TRY(cu->temp.reserve(sort_bytes > scan_bytes ? sort_bytes : scan_bytes));
        CU_TRY(cu->occ_ex.reserve(n_occ));
        CU_TRY(cu->seq.reserve(n_occ));
        CU_TRY(cu->sorted_idx.reserve(n_occ));
        CU_TRY(cu->row_occ.reserve(n_occ));
        CU_TRY(cu->count.reserve(n_uniq + 1));
        CU_TRY(cu->row_start.reserve(n_uniq + 1));
        CU_TRY(cu->row_chunk.reserve(n_uniq + 1));
        CU_TRY(cu->chunk_row.reserve(n_chunks_max));
        CU_TRY(cu->chunk_beg.reserve(n_chunks_max));
        CU_TRY(cu->partial.reserve(n_chunks_max * dim));
        CU_TRY(cu->bias_partial.reserve((n + kChunk - 1) / kChunk));
        CU_TRY(cu->grads.reserve(n_uniq * dim));
        const unsigned ex_blocks = (unsigned)blocks_for(n, kThreads, kMaxBlocks);
        const unsigned occ_blocks = (unsigned)blocks_for(n_occ, kThreads, kMaxBlocks);
        const unsigned row_blocks = (unsigned)blocks_for(n_uniq + 1, kThreads, kMaxBlocks);
        occ_ex_kernel<<<ex_blocks, kThreads, 0, st>>>(cu->offsets.p, n, cu->occ_ex.p, cu->seq.p);
        CU_TRY(cudaGetLastError());
        CU_TRY(cudaMemsetAsync(cu->count.p, 0, (n_uniq + 1) * sizeof(uint32_t), st));
        row_count_kernel<<<occ_blocks, kThreads, 0, st>>>(cu->occ_idx.p, n_occ, cu->count.p);
        CU_TRY(cudaGetLastError());
        size_t bytes = cu->temp.cap;
        CU_TRY(cub::DeviceScan::ExclusiveSum(cu->temp.p, bytes, cu->count.p, cu->row_start.p,
                                             n_uniq + 1, st));
        bytes = cu->temp.cap;
        CU_TRY(cub::DeviceRadixSort::SortPairs(cu->temp.p, bytes, cu->occ_idx.p, cu->sorted_idx.p,
                                               cu->seq.p, cu->row_occ.p, n_occ, 0, bits, st));
        chunk_count_kernel<<<row_blocks, kThreads, 0, st>>>(cu->row_start.p, n_uniq, cu->count.p);
        CU_TRY(cudaGetLastError());
        bytes = cu->temp.cap;
        CU_TRY(cub::DeviceScan::ExclusiveSum(cu->temp.p, bytes, cu->count.p, cu->row_chunk.p,
                                             n_uniq + 1, st));
        chunk_fill_kernel<<<row_blocks, kThreads, 0, st>>>(cu->row_start.p, cu->row_chunk.p, n_uniq,
                                                           cu->chunk_row.p, cu->chunk_beg.p);
        CU_TRY(cudaGetLastError());
        bwd_args ba = {};
        ba.n = n;
        ba.n_uniq = n_uniq;
        ba.k = k;
        ba.dim = dim;
        ba.row_start = cu->row_start.p;
        ba.row_occ = cu->row_occ.p;
        ba.occ_ex = cu->occ_ex.p;
        ba.occ_w = cu->occ_w.p;
        ba.rows = cu->rows.p;
        ba.S = cu->S.p;
        ba.dz = cu->dz.p;
        ba.row_chunk = cu->row_chunk.p;
        ba.chunk_row = cu->chunk_row.p;
        ba.chunk_beg = cu->chunk_beg.p;
        ba.partial = cu->partial.p;
        ba.bias_partial = cu->bias_partial.p;
        ba.grads = cu->grads.p;
        backward_chunk_kernel<<<(unsigned)blocks_for(n_chunks_max, kWarpsPerBlock, kMaxBlocks),
                                kWarpThreads, 0, st>>>(ba);
        CU_TRY(cudaGetLastError());
        backward_finish_kernel<<<(unsigned)blocks_for(n_uniq, kWarpsPerBlock, kMaxBlocks),
                                 kWarpThreads, 0, st>>>(ba);
        CU_TRY(cudaGetLastError());
        CU_TRY(cudaMemcpyAsync(cu->h_grads.p, cu->grads.p, n_uniq * dim * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
    }
    CU_TRY(
        cudaMemcpyAsync(cu->h_preds.p, cu->preds.p, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    CU_TRY(
        cudaMemcpyAsync(cu->h_loss.p, cu->loss.p, n * sizeof(double), cudaMemcpyDeviceToHost, st));
    cu->pend_n = n;
    cu->pend_grads = grads ? n_uniq * dim : 0;
    cu->pend_preds = preds;
    cu->pend_grad_out = grads;
    cu->in_flight = true;
    return SPW_OK;
}

extern "C" spw_err_t spw_trn__cuda_forward_finish(struct spw_trn__cuda *cu, double *loss_sum)
{
    *loss_sum = 0.0;
    if (!cu->in_flight)
        return SPW_ERR_STATE;
    cu->in_flight = false;
    if (cu->pend_n == 0)
        return SPW_OK;
    CU_TRY(cudaSetDevice(cu->device));
    CU_TRY(cudaStreamSynchronize(cu->stream));
    memcpy(cu->pend_preds, cu->h_preds.p, cu->pend_n * sizeof(float));
    if (cu->pend_grads)
        memcpy(cu->pend_grad_out, cu->h_grads.p, cu->pend_grads * sizeof(float));
    double sum = 0.0; // in example order, as the CPU sums
    for (size_t i = 0; i < cu->pend_n; i++)
        sum += cu->h_loss.p[i];
    *loss_sum = sum;
    return SPW_OK;
}

extern "C" spw_err_t spw_trn__cuda_forward(struct spw_trn__cuda *cu, uint32_t k, uint32_t dim,
                                           const struct spw_trn__cuda_batch *batch,
                                           const float *rows, float grad_scale, float *preds,
                                           float *grads, double *loss_sum)
{
    *loss_sum = 0.0;
    spw_err_t err = spw_trn__cuda_forward_start(cu, k, dim, batch, rows, grad_scale, preds, grads);
    return err ? err : spw_trn__cuda_forward_finish(cu, loss_sum);
}

// Sets the device and queues on the stream the upload of grads (n × dim host floats) and their
// row norms into cu->norms.
static spw_err_t queue_norms(struct spw_trn__cuda *cu, const float *grads, size_t n, uint32_t dim)
{
    if (cu->in_flight) // its buffers are the forward's
        return SPW_ERR_STATE;
    cudaStream_t st = cu->stream;
    CU_TRY(cudaSetDevice(cu->device));
    CU_TRY(cu->grads.reserve(n * dim));
    CU_TRY(cu->norms.reserve(n));
    CU_TRY(
        cudaMemcpyAsync(cu->grads.p, grads, n * dim * sizeof(float), cudaMemcpyHostToDevice, st));
    norms_kernel<<<(unsigned)blocks_for(n, kThreads, kMaxBlocks), kThreads, 0, st>>>(
        cu->grads.p, n, dim, cu->norms.p);
    CU_TRY(cudaGetLastError());
    return SPW_OK;
}

extern "C" spw_err_t spw_trn__cuda_row_norms(struct spw_trn__cuda *cu, const float *grads, size_t n,
                                             uint32_t dim, float *norms)
{
    if (n == 0)
        return SPW_OK;
    cudaStream_t st = cu->stream;
    spw_err_t err = queue_norms(cu, grads, n, dim);
    if (err)
        return err;
    CU_TRY(cudaMemcpyAsync(norms, cu->norms.p, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    CU_TRY(cudaStreamSynchronize(st));
    return SPW_OK;
}

// The selection of m < n rows by the norms already in cu->norms (queued on the stream) into
// selected (host), then a synchronisation.
static spw_err_t select_by_device_norms(struct spw_trn__cuda *cu, size_t n, size_t m,
                                        uint8_t *selected)
{
    cudaStream_t st = cu->stream;
    CU_TRY(cu->keys.reserve(n));
    CU_TRY(cu->flags.reserve(n));
    CU_TRY(cu->state.reserve(3));
    CU_TRY(cu->hist.reserve(256));
    const unsigned long long init[3] = {0ull, 0ull, (unsigned long long)m};
    CU_TRY(cudaMemcpyAsync(cu->state.p, init, sizeof(init), cudaMemcpyHostToDevice, st));
    CU_TRY(cudaMemsetAsync(cu->hist.p, 0, 256 * sizeof(unsigned int), st));
    const unsigned blocks = (unsigned)blocks_for(n, kThreads, kHistBlocks);
    rank_keys_kernel<<<blocks, kThreads, 0, st>>>(cu->norms.p, n, cu->keys.p);
    CU_TRY(cudaGetLastError());
    for (int pass = 0; pass < 8; pass++) {
        const int shift = 56 - 8 * pass;
        hist_kernel<<<blocks, kThreads, 0, st>>>(cu->keys.p, n, cu->state.p, shift, cu->hist.p);
        pick_kernel<<<1, 1, 0, st>>>(cu->hist.p, cu->state.p, shift);
    }
    CU_TRY(cudaGetLastError());
    flags_kernel<<<blocks, kThreads, 0, st>>>(cu->keys.p, n, cu->state.p, cu->flags.p);
    CU_TRY(cudaGetLastError());
    CU_TRY(cudaMemcpyAsync(selected, cu->flags.p, n, cudaMemcpyDeviceToHost, st));
    CU_TRY(cudaStreamSynchronize(st));
    return SPW_OK;
}

extern "C" spw_err_t spw_trn__cuda_topk_select(struct spw_trn__cuda *cu, const float *norms,
                                               size_t n, size_t m, uint8_t *selected)
{
    if (m >= n || m == 0) {
        memset(selected, m ? 1 : 0, n);
        return SPW_OK;
    }
    if (cu->in_flight)
        return SPW_ERR_STATE;
    CU_TRY(cudaSetDevice(cu->device));
    CU_TRY(cu->norms.reserve(n));
    CU_TRY(
        cudaMemcpyAsync(cu->norms.p, norms, n * sizeof(float), cudaMemcpyHostToDevice, cu->stream));
    return select_by_device_norms(cu, n, m, selected);
}

extern "C" spw_err_t spw_trn__cuda_topk_rows(struct spw_trn__cuda *cu, const float *grads, size_t n,
                                             uint32_t dim, size_t m, const uint8_t *pinned,
                                             uint8_t *selected)
{
    if (m >= n || m == 0) {
        memset(selected, m ? 1 : 0, n);
        return SPW_OK;
    }
    cudaStream_t st = cu->stream;
    spw_err_t err = queue_norms(cu, grads, n, dim);
    if (err)
        return err;
    if (pinned) { // through flags, which the selection overwrites after (same stream)
        CU_TRY(cu->flags.reserve(n));
        CU_TRY(cudaMemcpyAsync(cu->flags.p, pinned, n, cudaMemcpyHostToDevice, st));
        pin_kernel<<<(unsigned)blocks_for(n, kThreads, kMaxBlocks), kThreads, 0, st>>>(
            cu->norms.p, cu->flags.p, n);
        CU_TRY(cudaGetLastError());
    }
    return select_by_device_norms(cu, n, m, selected);
}

// ---- host emulation: the kernels' per-item code run sequentially (lanes in order, phase 1 of
// every lane before phase 2, as the warp synchronisation orders them), so that their arithmetic
// and indexing are tested against the CPU oracle on machines without a device ----

// The backward kernels' work: every chunk, the bias chunks, then every row.
static spw_err_t emulate_backward(const struct spw_trn__cuda_batch *batch, uint32_t k, uint32_t dim,
                                  const float *rows, const float *S, const float *dz, float *grads)
{
    const size_t n = batch->n, n_uniq = batch->n_uniq, cap = max_chunks(n_uniq, batch->n_occ);
    uint32_t *row_chunk = (uint32_t *)malloc((n_uniq + 1 + 2 * cap) * sizeof(uint32_t));
    float *partial = (float *)malloc((cap * dim + 1) * sizeof(float));
    float *bias_partial = (float *)malloc((n / kChunk + 1) * sizeof(float));
    spw_err_t err = SPW_ERR_NOMEM;
    if (row_chunk && partial && bias_partial) {
        uint32_t *chunk_row = row_chunk + n_uniq + 1, *chunk_beg = chunk_row + cap;
        const size_t n_chunks =
            make_chunks(batch->row_start, n_uniq, row_chunk, chunk_row, chunk_beg);
        bwd_args ba = {};
        ba.n = n;
        ba.n_uniq = n_uniq;
        ba.k = k;
        ba.dim = dim;
        ba.row_start = batch->row_start;
        ba.row_occ = batch->row_occ;
        ba.occ_ex = batch->occ_ex;
        ba.occ_w = batch->occ_w;
        ba.rows = rows;
        ba.S = S;
        ba.dz = dz;
        ba.row_chunk = row_chunk;
        ba.chunk_row = chunk_row;
        ba.chunk_beg = chunk_beg;
        ba.partial = partial;
        ba.bias_partial = bias_partial;
        ba.grads = grads;
        for (size_t c = 0; c < n_chunks; c++)
            for (uint32_t d = 0; d < dim; d++)
                backward_chunk_elem(ba, c, d);
        for (size_t b = 0; b * kChunk < n; b++)
            backward_bias_chunk(ba, b);
        for (size_t u = 0; u < n_uniq; u++)
            for (uint32_t d = 0; d < dim; d++)
                backward_finish_elem(ba, u, d);
        err = SPW_OK;
    }
    free(row_chunk);
    free(partial);
    free(bias_partial);
    return err;
}

extern "C" spw_err_t spw_trn__cuda_emulate_forward(uint32_t k, uint32_t dim,
                                                   const struct spw_trn__cuda_batch *batch,
                                                   const float *rows, float grad_scale,
                                                   float *preds, float *grads, double *loss_sum)
{
    const size_t n = batch->n;
    float *S = (float *)malloc((n * k + 1) * sizeof(float));
    float *dz = (float *)malloc((n + 1) * sizeof(float));
    double *loss = (double *)malloc((n + 1) * sizeof(double));
    float *t = (float *)malloc((k + 1) * sizeof(float));
    spw_err_t err = SPW_ERR_NOMEM;
    if (S && dz && loss && t) {
        const fwd_args fa = {n,
                             k,
                             dim,
                             batch->offsets,
                             batch->occ_idx,
                             batch->occ_w,
                             rows,
                             batch->labels,
                             grad_scale,
                             S,
                             preds,
                             dz,
                             loss};
        for (size_t i = 0; i < n; i++) {
            for (unsigned lane = 0; lane < kWarp; lane++)
                forward_lane(fa, i, lane, t);
            forward_finish(fa, i, t);
        }
        err = grads ? emulate_backward(batch, k, dim, rows, S, dz, grads) : SPW_OK;
        double sum = 0.0;
        for (size_t i = 0; i < n; i++)
            sum += loss[i];
        *loss_sum = sum;
    }
    free(S);
    free(dz);
    free(loss);
    free(t);
    return err;
}

extern "C" void spw_trn__cuda_emulate_row_norms(const float *grads, size_t n, uint32_t dim,
                                                float *norms)
{
    for (size_t r = 0; r < n; r++)
        norms[r] = row_norm(grads, r, dim);
}

extern "C" spw_err_t spw_trn__cuda_emulate_topk_select(const float *norms, size_t n, size_t m,
                                                       uint8_t *selected)
{
    if (m >= n || m == 0) {
        memset(selected, m ? 1 : 0, n);
        return SPW_OK;
    }
    unsigned long long *keys = (unsigned long long *)malloc(n * sizeof(*keys));
    if (!keys)
        return SPW_ERR_NOMEM;
    unsigned long long state[3] = {0ull, 0ull, (unsigned long long)m};
    unsigned int hist[256] = {0};
    for (size_t r = 0; r < n; r++)
        keys[r] = rank_key(norms[r], r);
    for (int pass = 0; pass < 8; pass++) {
        const int shift = 56 - 8 * pass;
        for (size_t i = 0; i < n; i++)
            if ((keys[i] & state[1]) == state[0])
                hist[(keys[i] >> shift) & 0xffu]++;
        pick_digit(hist, state, shift);
    }
    for (size_t i = 0; i < n; i++)
        selected[i] = keys[i] >= state[0] ? 1 : 0;
    free(keys);
    return SPW_OK;
}

extern "C" spw_err_t spw_trn__cuda_emulate_topk_rows(const float *grads, size_t n, uint32_t dim,
                                                     size_t m, const uint8_t *pinned,
                                                     uint8_t *selected)
{
    float *norms = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!norms)
        return SPW_ERR_NOMEM;
    spw_trn__cuda_emulate_row_norms(grads, n, dim, norms);
    for (size_t r = 0; pinned && r < n; r++)
        if (pinned[r])
            norms[r] = NAN;
    spw_err_t err = spw_trn__cuda_emulate_topk_select(norms, n, m, selected);
    free(norms);
    return err;
}
