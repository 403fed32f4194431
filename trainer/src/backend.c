/* trainer: backend selection (cpu | cuda | auto) and dispatch to the CPU oracle or the CUDA
 * backend. */
#include "trainer_cuda.h"
#include "trainer_int.h"

#include <assert.h>
#include <stdio.h>

#include "sparrow/log.h"
#include <stdlib.h>
#include <string.h>

struct spw_backend {
    enum spw_backend_kind kind; /* CPU or CUDA */
    struct spw_model model;
    struct spw_trn__cuda *cu; /* CUDA only */
    spw_deep_t *deep;  /* deep models: pooling and FM part on the host, the network on the host
                        * or (CUDA backend) on the device */
    uint64_t *scratch; /* CPU top-k */
    size_t cap_scratch;
    struct spw_trn__par *par; /* NULL: one compute thread (spw_backend_threads_start) */
    bool started;             /* a forward_backward_start not yet finished */
    bool cuda_started;        /* ... queued on the device (spw_trn__cuda_forward_start) */
    spw_err_t start_err;      /* its result when it ran on the caller or failed to start */
    double start_loss;
};

spw_err_t spw_backend_kind_parse(const char *text, enum spw_backend_kind *out)
{
    if (strcmp(text, "cpu") == 0)
        *out = SPW_BACKEND_CPU;
    else if (strcmp(text, "cuda") == 0)
        *out = SPW_BACKEND_CUDA;
    else if (strcmp(text, "auto") == 0)
        *out = SPW_BACKEND_AUTO;
    else
        return SPW_ERR_INVALID;
    return SPW_OK;
}

const char *spw_backend_kind_name(enum spw_backend_kind kind)
{
    switch (kind) {
    case SPW_BACKEND_CPU:
        return "cpu";
    case SPW_BACKEND_CUDA:
        return "cuda";
    case SPW_BACKEND_AUTO:
        return "auto";
    }
    return "?";
}

/* Adds a deep model's network to be; frees be and returns NULL on failure. The network runs on
 * OpenBLAS with the CPU backend and on cuBLAS with the CUDA one, or on the host when the device
 * network cannot be made (libcublas missing: dense/CMakeLists.txt), said in a warning. */
static spw_backend_t *with_deep(spw_backend_t *be, char *errstr, size_t errstr_size)
{
    if (!spw_model_is_deep(&be->model))
        return be;
    char derr[256] = "";
    be->deep = spw_deep_new(&be->model, derr, sizeof(derr));
    if (!be->deep) {
        snprintf(errstr, errstr_size, "backend: %s", derr);
        spw_backend_destroy(be);
        return NULL;
    }
    if (be->kind == SPW_BACKEND_CUDA &&
        spw_trn__deep_use_cuda(be->deep, 0, derr, sizeof(derr)) != SPW_OK)
        SPW_WARN("deep network on the host", "backend=cuda reason=\"%s\"", derr);
    return be;
}

const char *spw_backend_network(const spw_backend_t *be)
{
    if (!be->deep)
        return "none";
    return spw_trn__deep_on_cuda(be->deep) ? "cublas" : "openblas";
}

spw_backend_t *spw_backend_new(enum spw_backend_kind want, const struct spw_model *model,
                               char *errstr, size_t errstr_size)
{
    spw_backend_t *be = calloc(1, sizeof(*be));
    if (!be) {
        snprintf(errstr, errstr_size, "backend: out of memory");
        return NULL;
    }
    be->model = *model;
    be->kind = SPW_BACKEND_CPU;
    if (want == SPW_BACKEND_CPU)
        return with_deep(be, errstr, errstr_size);
    if (!spw_cuda_built()) {
        if (want == SPW_BACKEND_AUTO)
            return with_deep(be, errstr, errstr_size);
        snprintf(errstr, errstr_size,
                 "backend: cuda requested but this build has no CUDA backend (configured with "
                 "SPARROW_CUDA=off, or no nvcc)");
        goto out_free_be;
    }
    if (spw_cuda_device_count() < 1) {
        if (want == SPW_BACKEND_AUTO)
            return with_deep(be, errstr, errstr_size);
        snprintf(errstr, errstr_size, "backend: cuda requested but no CUDA device is usable");
        goto out_free_be;
    }
    char cuda_err[256] = "";
    be->cu = spw_trn__cuda_new(0, cuda_err, sizeof(cuda_err));
    if (!be->cu) {
        if (want == SPW_BACKEND_AUTO)
            return with_deep(be, errstr, errstr_size);
        snprintf(errstr, errstr_size, "backend: %s", cuda_err);
        goto out_free_be;
    }
    be->kind = SPW_BACKEND_CUDA;
    return with_deep(be, errstr, errstr_size);

out_free_be:
    free(be);
    return NULL;
}

void spw_backend_destroy(spw_backend_t *be)
{
    if (!be)
        return;
    spw_trn__par_destroy(be->par);
    spw_trn__cuda_destroy(be->cu);
    spw_deep_destroy(be->deep);
    free(be->scratch);
    free(be);
}

spw_err_t spw_backend_threads_start(spw_backend_t *be, uint32_t threads, char *errstr,
                                    size_t errstr_size)
{
    if (threads < 1 || threads > SPW_TRN_MAX_THREADS) {
        snprintf(errstr, errstr_size, "backend: %u compute threads: must be 1 .. %u", threads,
                 SPW_TRN_MAX_THREADS);
        return SPW_ERR_INVALID;
    }
    if (be->par) {
        snprintf(errstr, errstr_size, "backend: compute threads already started");
        return SPW_ERR_STATE;
    }
    /* CUDA: one host thread drives the device, which is the parallel part (a deep model's network
     * then runs on the host on that one thread too) */
    if (threads == 1 || be->kind == SPW_BACKEND_CUDA)
        return SPW_OK;
    if (!(be->par = spw_trn__par_new(&be->model, threads, errstr, errstr_size)))
        return SPW_ERR_IO;
    return SPW_OK;
}

uint32_t spw_backend_threads(const spw_backend_t *be)
{
    return be->par ? spw_trn__par_threads(be->par) : 1;
}

enum spw_backend_kind spw_backend_kind(const spw_backend_t *be)
{
    return be->kind;
}

const struct spw_model *spw_backend_model(const spw_backend_t *be)
{
    return &be->model;
}

static struct spw_trn__cuda_batch cuda_batch(const spw_batch_t *batch)
{
    struct spw_trn__cuda_batch cb = {
        .n = batch->n,
        .n_occ = batch->n_occ,
        .n_uniq = batch->n_uniq,
        .offsets = batch->offsets,
        .occ_idx = batch->occ_idx,
        .occ_w = batch->occ_w,
        .labels = batch->labels,
    };
    return cb;
}

static spw_err_t cuda_run(spw_backend_t *be, const spw_batch_t *batch, const float *rows,
                          float grad_scale, float *preds, float *grads, double *loss_sum)
{
    const struct spw_trn__cuda_batch cb = cuda_batch(batch);
    double loss = 0.0;
    spw_err_t err = spw_trn__cuda_forward(be->cu, be->model.latent_dim, be->model.dim, &cb, rows,
                                          grad_scale, preds, grads, &loss);
    if (!err && loss_sum)
        *loss_sum = loss;
    return err;
}

bool spw_backend_computes_async(const spw_backend_t *be)
{
    return be->kind == SPW_BACKEND_CUDA && !be->deep;
}

/* Waits for the step a start queued on the device (if any): its result into start_err and
 * start_loss. */
static void cuda_wait(spw_backend_t *be)
{
    if (!be->cuda_started)
        return;
    be->cuda_started = false;
    be->start_err = spw_trn__cuda_forward_finish(be->cu, &be->start_loss);
}

spw_err_t spw_backend_forward(spw_backend_t *be, const spw_batch_t *batch, const float *rows,
                              float *preds, double *loss_sum)
{
    if (be->deep) {
        const float *dense = spw_trn__deep_gather_dense(be->deep, batch, rows);
        return dense ? spw_deep_forward(be->deep, batch, rows, dense, preds, loss_sum)
                     : SPW_ERR_INVALID;
    }
    if (be->kind == SPW_BACKEND_CUDA)
        return cuda_run(be, batch, rows, 0.0f, preds, NULL, loss_sum);
    double loss = spw_cpu_forward(&be->model, batch, rows, preds);
    if (loss_sum)
        *loss_sum = loss;
    return SPW_OK;
}

/* One thread (or a deep model on the CUDA backend, whose network calls cuBLAS): the whole batch
 * on the caller. A model without a network queues on the device instead (computes_async). */
static spw_err_t forward_backward_here(spw_backend_t *be, const spw_batch_t *batch,
                                       const float *rows, float grad_scale, float *preds,
                                       float *grads, double *loss_sum)
{
    if (be->deep) {
        const float *dense = spw_trn__deep_gather_dense(be->deep, batch, rows);
        return dense ? spw_deep_forward_backward(be->deep, batch, rows, dense, grad_scale, preds,
                                                 grads, loss_sum)
                     : SPW_ERR_INVALID;
    }
    double loss = spw_cpu_forward_backward(&be->model, batch, rows, grad_scale, preds, grads);
    if (loss_sum)
        *loss_sum = loss;
    return SPW_OK;
}

void spw_backend_forward_backward_start(spw_backend_t *be, const spw_batch_t *batch,
                                        const float *rows, float grad_scale, float *preds,
                                        float *grads)
{
    assert(!be->started);
    be->started = true;
    be->start_err = SPW_OK;
    be->start_loss = 0.0;
    if (spw_backend_computes_async(be)) {
        const struct spw_trn__cuda_batch cb = cuda_batch(batch);
        be->start_err = spw_trn__cuda_forward_start(be->cu, be->model.latent_dim, be->model.dim,
                                                    &cb, rows, grad_scale, preds, grads);
        be->cuda_started = be->start_err == SPW_OK;
        return;
    }
    if (!be->par) {
        be->start_err =
            forward_backward_here(be, batch, rows, grad_scale, preds, grads, &be->start_loss);
        return;
    }
    const float *dense = NULL;
    if (be->deep && !(dense = spw_trn__deep_gather_dense(be->deep, batch, rows))) {
        be->start_err = SPW_ERR_INVALID;
        return;
    }
    spw_trn__par_start(be->par, be->deep, batch, rows, dense, grad_scale, preds, grads);
}

void spw_backend_forward_backward_start_staged(spw_backend_t *be, const spw_batch_t *batch,
                                               float *rows, float grad_scale, float *preds,
                                               float *grads,
                                               const struct spw_backend_stages *stages)
{
    assert(!be->started);
    if (be->par) {
        be->started = true;
        be->start_err = SPW_OK;
        be->start_loss = 0.0;
        spw_trn__par_start_staged(be->par, be->deep, batch, rows, grad_scale, preds, grads, stages);
        return;
    }
    spw_err_t err = stages->pre ? stages->pre(stages->ctx) : SPW_OK;
    if (stages->beside_pre)
        stages->beside_pre(stages->ctx);
    if (err) {
        be->started = true;
        be->start_err = err;
        be->start_loss = 0.0;
        return;
    }
    spw_backend_forward_backward_start(be, batch, rows, grad_scale, preds, grads);
    cuda_wait(be); /* post reads the gradients: the device's step must be done */
    if (be->start_err)
        return;
    /* as on the compute threads: beside_post runs whenever post does, whatever post returns */
    if (stages->post)
        be->start_err = stages->post(stages->ctx);
    if (stages->beside_post)
        stages->beside_post(stages->ctx);
}

spw_err_t spw_backend_forward_backward_finish(spw_backend_t *be, double *loss_sum)
{
    assert(be->started);
    be->started = false;
    cuda_wait(be);
    spw_err_t err = be->start_err;
    double loss = be->start_loss;
    if (be->par && spw_trn__par_in_flight(be->par))
        err = spw_trn__par_finish(be->par, &loss);
    if (!err && loss_sum)
        *loss_sum = loss;
    return err;
}

spw_err_t spw_backend_forward_backward(spw_backend_t *be, const spw_batch_t *batch,
                                       const float *rows, float grad_scale, float *preds,
                                       float *grads, double *loss_sum)
{
    spw_backend_forward_backward_start(be, batch, rows, grad_scale, preds, grads);
    return spw_backend_forward_backward_finish(be, loss_sum);
}

spw_err_t spw_backend_row_norms(spw_backend_t *be, const float *grads, size_t n, float *norms)
{
    if (be->kind == SPW_BACKEND_CUDA)
        return spw_trn__cuda_row_norms(be->cu, grads, n, be->model.dim, norms);
    spw_cpu_row_norms(grads, n, be->model.dim, norms);
    return SPW_OK;
}

spw_err_t spw_backend_topk_select(spw_backend_t *be, const float *norms, size_t n, size_t m,
                                  uint8_t *selected)
{
    if (n >= UINT32_MAX)
        return SPW_ERR_TOO_BIG;
    if (be->kind == SPW_BACKEND_CUDA)
        return spw_trn__cuda_topk_select(be->cu, norms, n, m, selected);
    if (spw_trn__grow((void **)&be->scratch, &be->cap_scratch, n, sizeof(uint64_t)))
        return SPW_ERR_NOMEM;
    spw_cpu_topk_select(norms, n, m, be->scratch, selected);
    return SPW_OK;
}

spw_err_t spw_backend_topk_rows(spw_backend_t *be, const float *grads, size_t n, size_t m,
                                const uint8_t *pinned, float *norms, uint8_t *selected)
{
    if (n >= UINT32_MAX)
        return SPW_ERR_TOO_BIG;
    if (be->kind == SPW_BACKEND_CUDA)
        return spw_trn__cuda_topk_rows(be->cu, grads, n, be->model.dim, m, pinned, selected);
    if (spw_trn__grow((void **)&be->scratch, &be->cap_scratch, n, sizeof(uint64_t)))
        return SPW_ERR_NOMEM;
    spw_cpu_topk_rows(grads, n, be->model.dim, m, pinned, norms, be->scratch, selected);
    return SPW_OK;
}
