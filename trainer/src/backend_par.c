/* trainer: the CPU backend's forward and backward of a batch split over compute threads. */
#include "pool.h"
#include "trainer_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * One job on the pool per batch, two phases separated by the job's barrier; the owner thread is
 * free between spw_trn__par_start and spw_trn__par_finish (the loop reads its next micro-batch).
 *
 * Phase 1 (compute): thread t takes examples [n t / T, n (t + 1) / T) and runs the single-thread
 * code on them into its own buffer: thread 0 into the caller's grads, thread t > 0 into
 * slot[t].grads, each the whole unique × dim block (zeroed by the model code). A deep model's
 * slice runs its own network (slot[t].deep) with the batch's dropout stream and row offset, so
 * that the masks are the whole batch's; its network gradient lands in the dense-block rows like
 * any other row's, so one reduction covers both.
 *
 * Phase 2 (reduce): thread t sums rows [U t / T, U (t + 1) / T) of the T buffers into grads, in
 * thread order: grads = ((g_0 + g_1) + g_2) + ... The result is deterministic for a given T and
 * differs from one thread's only where a row has occurrences in more than one slice, by the
 * reassociation of its float sum (and, for a deep model, of the network's gradient sum over
 * examples, which OpenBLAS's sgemm orders by its own blocking anyway).
 *
 * A staged batch (spw_trn__par_start_staged) adds the owner's serial work on thread 0: its pre
 * stage (the pull of the batch's rows) before phase 1 and its post stage (the push) after phase
 * 2, behind one more barrier, with the stages' beside work on thread 1 at the same time (the
 * reading of the next micro-batch beside the pull, the scoring beside the push), the others
 * waiting at the barrier. The owner thread is thread 0 (spw_trn__pool_run; pool worker 0 sits
 * the job out): on a machine with as many cores as compute threads, no third thread takes a
 * core from a thread that a barrier waits for, and no batch waits for the owner to wake.
 *
 * Nothing is shared for writing between threads within a phase: preds slices, loss and error
 * per slot, row ranges of grads. The barrier orders phase 1's writes before phase 2's reads, the
 * pool's wait the job's before the owner's.
 */
struct slot {
    float *grads; /* t > 0: unique × dim; t = 0 writes the caller's */
    size_t cap_grads;
    spw_deep_t *deep; /* t > 0, deep models: this thread's workspace and network */
    double loss;
    spw_err_t err;
};

struct spw_trn__par {
    struct spw_model model;
    uint32_t threads;
    struct spw_trn__pool *pool;
    bool in_flight;    /* started, not finished */
    struct slot *slot; /* threads */
    /* the batch of the phase in flight (owner-written before the phase, read-only during it) */
    spw_deep_t *deep0;
    const spw_batch_t *batch;
    const float *rows, *dense;
    float grad_scale;
    float *preds, *grads;
    uint64_t t; /* the batch's training forward (deep models) */
    /* a staged batch (spw_trn__par_start_staged): the owner's serial work around it, on thread 0
     * (NULL: none); stage_err is thread 0's, read by the others after a barrier */
    const struct spw_backend_stages *stages;
    spw_err_t stage_err;
};

struct spw_trn__par *spw_trn__par_new(const struct spw_model *model, uint32_t threads, char *errstr,
                                      size_t errstr_size)
{
    struct spw_trn__par *par = calloc(1, sizeof(*par));
    if (!par || !(par->slot = calloc(threads, sizeof(*par->slot)))) {
        free(par);
        snprintf(errstr, errstr_size, "compute threads: out of memory");
        return NULL;
    }
    par->model = *model;
    par->threads = threads;
    for (uint32_t t = 1; spw_model_is_deep(model) && t < threads; t++)
        if (!(par->slot[t].deep = spw_deep_new(model, errstr, errstr_size)))
            goto out_destroy;
    if (!(par->pool = spw_trn__pool_start(threads, errstr, errstr_size)))
        goto out_destroy;
    return par;

out_destroy:
    spw_trn__par_destroy(par);
    return NULL;
}

void spw_trn__par_destroy(struct spw_trn__par *par)
{
    if (!par)
        return;
    spw_trn__pool_stop(par->pool);
    for (uint32_t t = 0; t < par->threads; t++) {
        free(par->slot[t].grads);
        spw_deep_destroy(par->slot[t].deep);
    }
    free(par->slot);
    free(par);
}

uint32_t spw_trn__par_threads(const struct spw_trn__par *par)
{
    return par->threads;
}

/* [n t / T, n (t + 1) / T): contiguous, in order, sizes differing by at most one. */
static size_t part(size_t n, uint32_t t, uint32_t threads)
{
    return n * t / threads; /* n <= 2^32 examples or rows, t < 64: no overflow */
}

static void compute_phase(struct spw_trn__par *par, uint32_t t, uint32_t threads)
{
    struct slot *sl = &par->slot[t];
    const spw_batch_t *b = par->batch;
    const size_t i0 = part(b->n, t, threads), i1 = part(b->n, t + 1, threads);
    const size_t need = b->n_uniq * par->model.dim;
    sl->loss = 0.0;
    sl->err = SPW_OK;
    float *grads = par->grads;
    if (t > 0) {
        if (spw_trn__grow((void **)&sl->grads, &sl->cap_grads, need, sizeof(float))) {
            sl->err = SPW_ERR_NOMEM;
            return;
        }
        grads = sl->grads;
    }
    if (!spw_model_is_deep(&par->model)) {
        sl->loss = spw_trn__fm_backward_slice(&par->model, b, i0, i1, par->rows, NULL,
                                              par->grad_scale, par->preds + i0, grads, NULL);
        return;
    }
    spw_deep_t *deep = t ? sl->deep : par->deep0;
    sl->err = spw_trn__deep_backward_slice(deep, b, par->rows, par->dense, i0, i1, par->t,
                                           par->grad_scale, par->preds + i0, grads, &sl->loss);
}

static void reduce_phase(struct spw_trn__par *par, uint32_t t, uint32_t threads)
{
    const size_t dim = par->model.dim, nu = par->batch->n_uniq;
    const size_t j0 = part(nu, t, threads) * dim, j1 = part(nu, t + 1, threads) * dim;
    float *restrict out = par->grads;
    for (uint32_t s = 1; s < threads; s++) {
        const float *restrict g = par->slot[s].grads;
        for (size_t j = j0; j < j1; j++)
            out[j] += g[j];
    }
}

/* Staged batches: thread 0 runs the owner's pre stage (the pull) and a deep model's gather of
 * the network's weights from the rows it brought, while the others wait at the barrier. */
static void pre_phase(struct spw_trn__par *par)
{
    spw_err_t err = par->stages->pre ? par->stages->pre(par->stages->ctx) : SPW_OK;
    if (!err && par->deep0 &&
        !(par->dense = spw_trn__deep_gather_dense(par->deep0, par->batch, par->rows)))
        err = SPW_ERR_INVALID;
    par->stage_err = err;
}

static void job(void *ctx, uint32_t t, uint32_t threads)
{
    struct spw_trn__par *par = ctx;
    const struct spw_backend_stages *st = par->stages;
    if (st) {
        if (t == 0)
            pre_phase(par);
        else if (t == 1 && st->beside_pre)
            st->beside_pre(st->ctx);
        spw_trn__pool_barrier(par->pool);
        if (par->stage_err != SPW_OK)
            return; /* every thread sees it after the barrier: none computes */
    }
    compute_phase(par, t, threads);
    spw_trn__pool_barrier(par->pool);
    for (uint32_t s = 0; s < threads; s++)
        if (par->slot[s].err != SPW_OK)
            return; /* the batch failed: finish reports it, grads are unspecified */
    if (par->batch->n_uniq)
        reduce_phase(par, t, threads);
    if (!st || (!st->post && !st->beside_post))
        return;
    spw_trn__pool_barrier(par->pool); /* every row reduced before post reads grads */
    if (t == 0 && st->post)
        par->stage_err = st->post(st->ctx);
    else if (t == 1 && st->beside_post)
        st->beside_post(st->ctx);
}

void spw_trn__par_start(struct spw_trn__par *par, spw_deep_t *deep, const spw_batch_t *batch,
                        const float *rows, const float *dense, float grad_scale, float *preds,
                        float *grads)
{
    par->deep0 = deep;
    par->batch = batch;
    par->rows = rows;
    par->dense = dense;
    par->grad_scale = grad_scale;
    par->preds = preds;
    par->grads = grads;
    par->stages = NULL;
    par->stage_err = SPW_OK;
    par->in_flight = true;
    if (deep && batch->n == 0)
        return; /* as spw_deep_forward_backward: nothing written, no forward counted */
    par->t = deep ? spw_trn__deep_train_forwards(deep) : 0;
    spw_trn__pool_submit(par->pool, job, par);
}

void spw_trn__par_start_staged(struct spw_trn__par *par, spw_deep_t *deep, const spw_batch_t *batch,
                               const float *rows, float grad_scale, float *preds, float *grads,
                               const struct spw_backend_stages *stages)
{
    assert(batch->n > 0);
    par->deep0 = deep;
    par->batch = batch;
    par->rows = rows;
    par->dense = NULL; /* pre_phase gathers it once the rows are in */
    par->grad_scale = grad_scale;
    par->preds = preds;
    par->grads = grads;
    par->stages = stages;
    par->stage_err = SPW_OK;
    par->in_flight = true;
    par->t = deep ? spw_trn__deep_train_forwards(deep) : 0;
    spw_trn__pool_run(par->pool, job, par);
}

spw_err_t spw_trn__par_finish(struct spw_trn__par *par, double *loss_sum)
{
    par->in_flight = false;
    if (par->deep0 && par->batch->n == 0) {
        if (loss_sum)
            *loss_sum = 0.0;
        return SPW_OK;
    }
    spw_trn__pool_wait(par->pool);
    if (par->stages && par->stage_err != SPW_OK)
        return par->stage_err; /* pre failed (nothing computed) or post did */
    double loss = 0.0;
    for (uint32_t t = 0; t < par->threads; t++) {
        if (par->slot[t].err != SPW_OK)
            return par->slot[t].err;
        loss += par->slot[t].loss;
    }
    if (par->deep0)
        spw_trn__deep_set_train_forwards(par->deep0, par->t + 1);
    if (loss_sum)
        *loss_sum = loss;
    return SPW_OK;
}

bool spw_trn__par_in_flight(const struct spw_trn__par *par)
{
    return par->in_flight;
}
