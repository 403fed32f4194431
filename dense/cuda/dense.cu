// dense: the CUDA network: the CPU network's forward and backward (src/dense_cpu.c) with the
// matrix products on cuBLAS (column-major: a row-major n × m array is the column-major m × n
// array, so every product below is the CPU's with its operands swapped) and small kernels for
// the bias, ReLU + dropout and the cross layers' elementwise terms. cuBLAS is opened at run
// time (dlopen), not linked: the sparrow binary of a CUDA build then runs where libcublas is
// absent (the CPU images), and a network on the device fails cleanly there, naming the library.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <new>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

// err.h has no C++ guard of its own
extern "C" {
#include "sparrow/err.h"
}
#include "sparrow/dense.h"

#include "dense_int.h"

namespace
{

// The five cuBLAS entry points the network uses, from the library dlopen found.
struct Blas {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemv_v2) sgemv;
    bool ok;
    char why[256]; // when !ok
};

Blas g_blas;
pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

template <typename F> bool load_sym(void *lib, const char *name, F *out)
{
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (!*out)
        snprintf(g_blas.why, sizeof(g_blas.why), "libcublas has no %s", name);
    return *out != nullptr;
}

// The library of the toolkit this was built with first (its major version), then any.
void blas_load()
{
    char major[32];
    snprintf(major, sizeof(major), "libcublas.so.%d", CUDART_VERSION / 1000);
    const char *names[] = {major, "libcublas.so"};
    void *lib = nullptr;
    for (const char *name : names)
        if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
            break;
    if (!lib) {
        snprintf(g_blas.why, sizeof(g_blas.why), "cannot open %s or libcublas.so (%s)", major,
                 dlerror());
        return;
    }
    g_blas.ok = load_sym(lib, "cublasCreate_v2", &g_blas.create) &&
                load_sym(lib, "cublasDestroy_v2", &g_blas.destroy) &&
                load_sym(lib, "cublasSetStream_v2", &g_blas.set_stream) &&
                load_sym(lib, "cublasSgemm_v2", &g_blas.sgemm) &&
                load_sym(lib, "cublasSgemv_v2", &g_blas.sgemv);
}

// The loaded library (nullptr and *why when it could not be opened). Thread-safe.
const Blas *blas(const char **why)
{
    pthread_once(&g_blas_once, blas_load);
    *why = g_blas.why;
    return g_blas.ok ? &g_blas : nullptr;
}

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 65535;

unsigned blocks_for(size_t items)
{
    size_t b = (items + kThreads - 1) / kThreads;
    if (b < 1)
        b = 1;
    return (unsigned)(b < kMaxBlocks ? b : kMaxBlocks);
}

// z[i, o] += b[o]; relu and dropout (hidden layers)
__global__ void bias_act(float *z, const float *b, size_t n, uint32_t out, int relu, int drop,
                         uint64_t seed, uint64_t t, uint32_t k, float p, float scale)
{
    size_t total = n * out;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x) {
        float v = z[j] + b[j % out];
        if (relu) {
            v = v > 0.0f ? v : 0.0f;
            if (drop)
                v = spw_dense__keep(seed, t, k, j, p) ? v * scale : 0.0f;
        }
        z[j] = v;
    }
}

// u += b (per column); xn = x0 * u + xl
__global__ void cross_fwd(float *u, const float *b, const float *x0, const float *xl, float *xn,
                          size_t total, uint32_t d)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x) {
        float v = u[j] + b[j % d];
        u[j] = v;
        xn[j] = x0[j] * v + xl[j];
    }
}

// g = h > 0 ? g * scale : 0
__global__ void relu_bwd(float *g, const float *h, size_t total, float scale)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x)
        g[j] = h[j] > 0.0f ? g[j] * scale : 0.0f;
}

// du = g * x0; gx0 += g * u
__global__ void cross_bwd(const float *g, const float *x0, const float *u, float *du, float *gx0,
                          size_t total)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x) {
        du[j] = g[j] * x0[j];
        gx0[j] += g[j] * u[j];
    }
}

__global__ void add_to(float *dst, const float *a, const float *b, size_t total)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x)
        dst[j] = a[j] + b[j];
}

__global__ void fill(float *p, float v, size_t total)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x)
        p[j] = v;
}

} // namespace

// Device buffers, with the CPU workspace's shape (src/dense_cpu.c) plus the parameters, the
// gradients, the input's dlogit and a column of ones (bias sums as a gemv).
struct spw_dense_cuda {
    struct spw_dense_spec spec;
    size_t n_params;
    uint32_t wmax;
    int device;
    cudaStream_t stream;
    const Blas *bl; // the library (set when blas is)
    cublasHandle_t blas;
    float *params, *grads; // n_params each
    size_t cap;
    float *ws; // cap rows
    float *x[SPW_DENSE_MAX_CROSS + 1];
    float *u[SPW_DENSE_MAX_CROSS];
    float *h[SPW_DENSE_MAX_HIDDEN];
    float *ga, *gb, *gx0, *dlogit, *logits, *ones;
    size_t n;
    bool have_forward;
    float drop_scale;
    uint64_t t;
};

static spw_err_t cuda_fail(cudaError_t err)
{
    return err == cudaErrorMemoryAllocation ? SPW_ERR_NOMEM : SPW_ERR_CUDA;
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            return cuda_fail(err_);                                                                \
    } while (0)
#define BL(call)                                                                                   \
    do {                                                                                           \
        if ((call) != CUBLAS_STATUS_SUCCESS)                                                       \
            return SPW_ERR_CUDA;                                                                   \
    } while (0)

extern "C" bool spw_dense_cuda_built(void)
{
    return true;
}

extern "C" int spw_dense_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" void spw_dense_cuda_destroy(spw_dense_cuda_t *cu)
{
    if (!cu)
        return;
    cudaSetDevice(cu->device);
    if (cu->blas)
        cu->bl->destroy(cu->blas);
    if (cu->stream)
        cudaStreamDestroy(cu->stream);
    cudaFree(cu->params);
    cudaFree(cu->grads);
    cudaFree(cu->ws);
    delete cu;
}

extern "C" spw_dense_cuda_t *spw_dense_cuda_new(const struct spw_dense_spec *spec, int device,
                                                char *errstr, size_t errstr_size)
{
    if (spw_dense_spec_check(spec, errstr, errstr_size) != SPW_OK)
        return nullptr;
    if (device < 0 || device >= spw_dense_cuda_device_count()) {
        spw_errf(SPW_ERR_CUDA, errstr, errstr_size, "dense CUDA network: no CUDA device %d",
                 device);
        return nullptr;
    }
    spw_dense_cuda_t *cu = new (std::nothrow) spw_dense_cuda();
    if (!cu) {
        spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "dense CUDA network: out of memory");
        return nullptr;
    }
    cu->spec = *spec;
    cu->n_params = spw_dense_spec_param_count(spec);
    cu->wmax = spec->in_dim;
    for (uint32_t k = 0; k < spec->n_hidden; k++)
        if (spec->hidden[k] > cu->wmax)
            cu->wmax = spec->hidden[k];
    cu->device = device;
    cu->drop_scale = 1.0f;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess)
        err = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (err == cudaSuccess)
        err = cudaMalloc(&cu->params, cu->n_params * sizeof(float));
    if (err == cudaSuccess)
        err = cudaMalloc(&cu->grads, cu->n_params * sizeof(float));
    if (err != cudaSuccess) {
        spw_errf(SPW_ERR_CUDA, errstr, errstr_size, "dense CUDA network: %s",
                 cudaGetErrorString(err));
        spw_dense_cuda_destroy(cu);
        return nullptr;
    }
    const char *why = "";
    const Blas *bl = blas(&why);
    if (!bl) {
        spw_errf(SPW_ERR_UNSUPPORTED, errstr, errstr_size, "dense CUDA network: %s", why);
        spw_dense_cuda_destroy(cu);
        return nullptr;
    }
    cu->bl = bl;
    if (bl->create(&cu->blas) != CUBLAS_STATUS_SUCCESS) {
        spw_errf(SPW_ERR_CUDA, errstr, errstr_size, "dense CUDA network: cublasCreate failed");
        cu->blas = nullptr;
        spw_dense_cuda_destroy(cu);
        return nullptr;
    }
    if (bl->set_stream(cu->blas, cu->stream) != CUBLAS_STATUS_SUCCESS) {
        spw_errf(SPW_ERR_CUDA, errstr, errstr_size, "dense CUDA network: cublasSetStream failed");
        spw_dense_cuda_destroy(cu);
        return nullptr;
    }
    return cu;
}

static spw_err_t reserve(spw_dense_cuda_t *cu, size_t n)
{
    if (n <= cu->cap)
        return SPW_OK;
    const struct spw_dense_spec *s = &cu->spec;
    size_t d = s->in_dim, L = s->cross_layers;
    size_t per_row = (L + 1) * d + L * d + 2 * (size_t)cu->wmax + (L ? d : 0) + 3;
    for (uint32_t k = 0; k < s->n_hidden; k++)
        per_row += s->hidden[k];
    cudaFree(cu->ws);
    cu->ws = nullptr;
    cu->cap = 0;
    cu->have_forward = false;
    float *ws = nullptr;
    CU(cudaMalloc(&ws, n * per_row * sizeof(float)));
    float *p = ws;
    for (size_t l = 0; l <= L; l++, p += n * d)
        cu->x[l] = p;
    for (size_t l = 0; l < L; l++, p += n * d)
        cu->u[l] = p;
    for (uint32_t k = 0; k < s->n_hidden; k++) {
        cu->h[k] = p;
        p += n * s->hidden[k];
    }
    cu->ga = p;
    p += n * cu->wmax;
    cu->gb = p;
    p += n * cu->wmax;
    cu->gx0 = p;
    p += L ? n * d : 0;
    cu->dlogit = p;
    p += n;
    cu->logits = p;
    p += n;
    cu->ones = p;
    cu->ws = ws;
    cu->cap = n;
    fill<<<blocks_for(n), kThreads, 0, cu->stream>>>(cu->ones, 1.0f, n);
    CU(cudaGetLastError());
    return SPW_OK;
}

// row-major z (n × out) = x (n × in) W^T (the bias is added by the caller's kernel)
static spw_err_t linear_forward(spw_dense_cuda_t *cu, size_t n, size_t in, size_t out,
                                const float *x, const float *w, float *z)
{
    const float one = 1.0f, zero = 0.0f;
    BL(cu->bl->sgemm(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w,
                     (int)in, x, (int)in, &zero, z, (int)out));
    return SPW_OK;
}

// dW = dz^T x, db = dz^T 1, dx = dz W + beta dx (dx may be NULL)
static spw_err_t linear_backward(spw_dense_cuda_t *cu, size_t n, size_t in, size_t out,
                                 const float *dz, const float *x, const float *w, float *dw,
                                 float *db, float *dx, float beta)
{
    const float one = 1.0f, zero = 0.0f;
    BL(cu->bl->sgemm(cu->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)n, &one, x,
                     (int)in, dz, (int)out, &zero, dw, (int)in));
    BL(cu->bl->sgemv(cu->blas, CUBLAS_OP_N, (int)out, (int)n, &one, dz, (int)out, cu->ones, 1,
                     &zero, db, 1));
    if (dx)
        BL(cu->bl->sgemm(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)n, (int)out, &one, w,
                         (int)in, dz, (int)out, &beta, dx, (int)in));
    return SPW_OK;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        spw_err_t rc_ = (call);                                                                    \
        if (rc_ != SPW_OK)                                                                         \
            return rc_;                                                                            \
    } while (0)

extern "C" spw_err_t spw_dense_cuda_forward(spw_dense_cuda_t *cu, const float *params,
                                            const float *x, size_t n, float *logits, bool train)
{
    if (n == 0)
        return SPW_OK;
    CU(cudaSetDevice(cu->device));
    TRY(reserve(cu, n));
    const struct spw_dense_spec *s = &cu->spec;
    size_t d = s->in_dim;
    struct spw_dense_layer ly;
    CU(cudaMemcpyAsync(cu->params, params, cu->n_params * sizeof(float), cudaMemcpyHostToDevice,
                       cu->stream));
    CU(cudaMemcpyAsync(cu->x[0], x, n * d * sizeof(float), cudaMemcpyHostToDevice, cu->stream));
    const float *P = cu->params;
    for (uint32_t l = 0; l < s->cross_layers; l++) {
        spw_dense_spec_layer_at(s, l, &ly);
        TRY(linear_forward(cu, n, d, d, cu->x[l], P + ly.w_off, cu->u[l]));
        cross_fwd<<<blocks_for(n * d), kThreads, 0, cu->stream>>>(
            cu->u[l], P + ly.b_off, cu->x[0], cu->x[l], cu->x[l + 1], n * d, (uint32_t)d);
        CU(cudaGetLastError());
    }
    const float *hin = cu->x[s->cross_layers];
    size_t in = d;
    bool drop = train && s->dropout > 0.0f;
    float scale = drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
    for (uint32_t k = 0; k < s->n_hidden; k++) {
        spw_dense_spec_layer_at(s, s->cross_layers + k, &ly);
        TRY(linear_forward(cu, n, in, ly.out, hin, P + ly.w_off, cu->h[k]));
        bias_act<<<blocks_for(n * ly.out), kThreads, 0, cu->stream>>>(
            cu->h[k], P + ly.b_off, n, ly.out, 1, drop, s->dropout_seed, cu->t, k, s->dropout,
            scale);
        CU(cudaGetLastError());
        hin = cu->h[k];
        in = ly.out;
    }
    spw_dense_spec_layer_at(s, s->cross_layers + s->n_hidden, &ly);
    TRY(linear_forward(cu, n, in, 1, hin, P + ly.w_off, cu->logits));
    bias_act<<<blocks_for(n), kThreads, 0, cu->stream>>>(cu->logits, P + ly.b_off, n, 1, 0, 0, 0, 0,
                                                         0, 0.0f, 1.0f);
    CU(cudaGetLastError());
    CU(cudaMemcpyAsync(logits, cu->logits, n * sizeof(float), cudaMemcpyDeviceToHost, cu->stream));
    CU(cudaStreamSynchronize(cu->stream));
    if (train)
        cu->t++;
    cu->n = n;
    cu->drop_scale = scale;
    cu->have_forward = true;
    return SPW_OK;
}

extern "C" uint64_t spw_dense_cuda_train_forwards(const spw_dense_cuda_t *cu)
{
    return cu->t;
}

extern "C" void spw_dense_cuda_set_train_forwards(spw_dense_cuda_t *cu, uint64_t t)
{
    cu->t = t;
}

extern "C" spw_err_t spw_dense_cuda_backward(spw_dense_cuda_t *cu, const float *dlogit,
                                             float *grads, float *dx)
{
    if (!cu->have_forward)
        return SPW_ERR_STATE;
    CU(cudaSetDevice(cu->device));
    const struct spw_dense_spec *s = &cu->spec;
    size_t n = cu->n, d = s->in_dim, L = s->cross_layers, K = s->n_hidden;
    struct spw_dense_layer ly;
    const float *P = cu->params;
    float *G = cu->grads;
    CU(cudaMemcpyAsync(cu->dlogit, dlogit, n * sizeof(float), cudaMemcpyHostToDevice, cu->stream));
    spw_dense_spec_layer_at(s, L + K, &ly);
    const float *hin = K ? cu->h[K - 1] : cu->x[L];
    float *g = cu->ga, *gnext = cu->gb;
    TRY(linear_backward(cu, n, ly.in, 1, cu->dlogit, hin, P + ly.w_off, G + ly.w_off, G + ly.b_off,
                        g, 0.0f));
    for (size_t k = K; k-- > 0;) {
        spw_dense_spec_layer_at(s, L + k, &ly);
        relu_bwd<<<blocks_for(n * ly.out), kThreads, 0, cu->stream>>>(g, cu->h[k], n * ly.out,
                                                                      cu->drop_scale);
        CU(cudaGetLastError());
        hin = k ? cu->h[k - 1] : cu->x[L];
        TRY(linear_backward(cu, n, ly.in, ly.out, g, hin, P + ly.w_off, G + ly.w_off, G + ly.b_off,
                            gnext, 0.0f));
        float *tmp = g;
        g = gnext;
        gnext = tmp;
    }
    if (L) {
        float *du = gnext;
        CU(cudaMemsetAsync(cu->gx0, 0, n * d * sizeof(float), cu->stream));
        for (size_t l = L; l-- > 0;) {
            spw_dense_spec_layer_at(s, l, &ly);
            cross_bwd<<<blocks_for(n * d), kThreads, 0, cu->stream>>>(g, cu->x[0], cu->u[l], du,
                                                                      cu->gx0, n * d);
            CU(cudaGetLastError());
            TRY(linear_backward(cu, n, d, d, du, cu->x[l], P + ly.w_off, G + ly.w_off, G + ly.b_off,
                                g, 1.0f));
        }
        if (dx) {
            add_to<<<blocks_for(n * d), kThreads, 0, cu->stream>>>(gnext, g, cu->gx0, n * d);
            CU(cudaGetLastError());
            g = gnext;
        }
    }
    if (dx)
        CU(cudaMemcpyAsync(dx, g, n * d * sizeof(float), cudaMemcpyDeviceToHost, cu->stream));
    CU(cudaMemcpyAsync(grads, G, cu->n_params * sizeof(float), cudaMemcpyDeviceToHost, cu->stream));
    CU(cudaStreamSynchronize(cu->stream));
    return SPW_OK;
}
