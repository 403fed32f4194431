/* trainer: private declarations shared by the files of the module (not API). */
#ifndef SPARROW_TRAINER_INT_H
#define SPARROW_TRAINER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/trainer.h"

/*
 * Key index: open addressing with linear probing over u64 keys, mapping each to a u32 value.
 * Capacity is a power of two kept at most half full. A slot is live when its gen equals the
 * index's gen, so clearing is one increment; removal shifts later entries back (no tombstones).
 *
 *   slot  offset size
 *   key   0      8     the key
 *   val   8      4     the caller's value (a row or slot number)
 *   gen   12     4     live when == index gen (never 0)
 */
struct spw_trn__kslot {
    uint64_t key;
    uint32_t val;
    uint32_t gen;
};

struct spw_trn__keyidx {
    struct spw_trn__kslot *slots;
    size_t cap; /* 0 or a power of two */
    size_t count;
    uint32_t gen;
};

#define SPW_TRN__NONE UINT32_MAX

void spw_trn__keyidx_init(struct spw_trn__keyidx *idx);
void spw_trn__keyidx_fini(struct spw_trn__keyidx *idx);
/* Makes room for n live keys without rehashing later. SPW_ERR_NOMEM leaves idx unchanged. */
spw_err_t spw_trn__keyidx_reserve(struct spw_trn__keyidx *idx, size_t n);
/* Value of key, or SPW_TRN__NONE. */
uint32_t spw_trn__keyidx_find(const struct spw_trn__keyidx *idx, uint64_t key);
/* Value of key; inserts (key, val) when absent (room must be reserved) and sets *inserted. */
uint32_t spw_trn__keyidx_upsert(struct spw_trn__keyidx *idx, uint64_t key, uint32_t val,
                                bool *inserted);
/* Hints the CPU to fetch key's home slot (a batch's keys are upserted a few after the hint, so
 * that the table's cache misses overlap). No effect on the contents; read-only. */
void spw_trn__keyidx_prefetch(const struct spw_trn__keyidx *idx, uint64_t key);
/* Removes key; its value, or SPW_TRN__NONE when absent. */
uint32_t spw_trn__keyidx_remove(struct spw_trn__keyidx *idx, uint64_t key);
/* Replaces the value of a present key (asserted). */
void spw_trn__keyidx_set(struct spw_trn__keyidx *idx, uint64_t key, uint32_t val);
/* Forgets every key in O(1) (amortised). */
void spw_trn__keyidx_clear(struct spw_trn__keyidx *idx);

/* Grows *p (elements of elem bytes, capacity *cap) to hold need elements: at least doubling.
 * SPW_ERR_NOMEM leaves *p and *cap unchanged. */
spw_err_t spw_trn__grow(void **p, size_t *cap, size_t need, size_t elem);

/*
 * The batch. Example i's occurrences are [offsets[i], offsets[i+1]); occurrence o has unique
 * index occ_idx[o] (into keys), weight occ_w[o] and example occ_ex[o].
 */
struct spw_batch {
    size_t n;      /* examples */
    size_t n_occ;  /* occurrences */
    size_t n_uniq; /* unique keys, bias at 0 when n > 0 */
    int64_t max_event_time_ms;

    float *labels;     /* n */
    float *oracle;     /* n, NaN when absent */
    uint32_t *offsets; /* n + 1 */
    size_t cap_labels, cap_oracle, cap_offsets;

    uint32_t *occ_idx;
    float *occ_w;
    uint32_t *occ_ex;
    uint32_t *occ_field; /* field id, UINT32_MAX unknown */
    size_t cap_occ_idx, cap_occ_w, cap_occ_ex, cap_occ_field;

    uint64_t *prefix; /* keys at unique indices 1 .. n_prefix (spw_batch_set_prefix) */
    size_t n_prefix;

    uint64_t *keys;
    size_t cap_keys;

    struct spw_trn__keyidx dedup; /* key -> unique index */
};

/* Rows-to-occurrences index of a batch, for the GPU's per-row reduction: row u's occurrences are
 * row_occ[row_start[u] .. row_start[u+1]) in ascending order (a stable counting sort).
 * row_start: n_uniq + 1, row_occ: n_occ (caller storage). */
void spw_trn__batch_row_csr(const spw_batch_t *batch, uint32_t *row_start, uint32_t *row_occ);

/* The FM part of a deep model (model_cpu.c): spw_cpu_forward / spw_cpu_forward_backward with
 * extra[i] added to example i's logit; dz (n floats) receives grad_scale × dL/dlogit_i. */
double spw_trn__fm_forward_extra(const struct spw_model *model, const spw_batch_t *batch,
                                 const float *rows, const float *extra, float *preds);
double spw_trn__fm_backward_extra(const struct spw_model *model, const spw_batch_t *batch,
                                  const float *rows, const float *extra, float grad_scale,
                                  float *preds, float *grads, float *dz);

/* run_batch's backward over examples i0 .. i1 - 1 only (one compute thread's slice): preds,
 * extra (NULL: none) and dz (NULL: not wanted) are indexed from i0; grads (unique × dim) is
 * overwritten with the slice's gradient of every row, the bias's included. */
double spw_trn__fm_backward_slice(const struct spw_model *model, const spw_batch_t *batch,
                                  size_t i0, size_t i1, const float *rows, const float *extra,
                                  float grad_scale, float *preds, float *grads, float *dz);

/* spw_deep_forward_backward over examples i0 .. i1 - 1 only, with the network's masks of the
 * batch's training forward t (spw_dense_forward_rows); preds is indexed from i0, grads (unique ×
 * dim) is overwritten with the slice's gradient (zeros for an empty slice), *loss_sum gets the
 * slice's loss. Does not advance deep's count of training forwards. deep: one owner thread. */
spw_err_t spw_trn__deep_backward_slice(spw_deep_t *deep, const spw_batch_t *batch,
                                       const float *rows, const float *dense, size_t i0, size_t i1,
                                       uint64_t t, float grad_scale, float *preds, float *grads,
                                       double *loss_sum);
/* Runs deep's network on CUDA device `device` (cuBLAS) from now on: the whole batch at a time
 * (spw_trn__deep_backward_slice of a slice not starting at row 0 fails with SPW_ERR_STATE), the
 * same masks as on the host. SPW_ERR_UNSUPPORTED with errstr when the device network cannot be
 * made (no CUDA build, device or libcublas): deep stays on the host. One owner thread. */
spw_err_t spw_trn__deep_use_cuda(spw_deep_t *deep, int device, char *errstr, size_t errstr_size);

/* Whether deep's network runs on a device. */
bool spw_trn__deep_on_cuda(const spw_deep_t *deep);

/* deep's count of training forwards (the next batch's mask stream), and its setter. */
uint64_t spw_trn__deep_train_forwards(const spw_deep_t *deep);
void spw_trn__deep_set_train_forwards(spw_deep_t *deep, uint64_t t);

/*
 * The CPU backend's forward and backward split over compute threads (backend_par.c): each
 * thread computes a contiguous slice of the batch's examples into its own gradient buffer
 * (unique × dim, thread 0's is the caller's), then the rows are summed across the buffers in
 * thread order, each thread a range of rows. Buffers and networks are per thread and grow to the
 * largest batch: no allocation for a batch no larger than an earlier one. One owner thread.
 */
struct spw_trn__par;

/* threads (2 .. SPW_TRN_MAX_THREADS) compute threads for model, started here. NULL with
 * errstr. */
struct spw_trn__par *spw_trn__par_new(const struct spw_model *model, uint32_t threads, char *errstr,
                                      size_t errstr_size);
/* Stops the threads and frees everything. NULL is a no-op. */
void spw_trn__par_destroy(struct spw_trn__par *par);
uint32_t spw_trn__par_threads(const struct spw_trn__par *par);
/* Starts spw_cpu_forward_backward (deep == NULL) or spw_deep_forward_backward (deep: the
 * backend's own workspace, thread 0's; dense: the gathered weights) of batch on the threads and
 * returns at once; everything passed is borrowed until spw_trn__par_finish, which waits for the
 * threads and returns the batch's error or SPW_OK and *loss_sum (may be NULL). One batch in
 * flight at a time. The gradient equals the single-thread one up to the order of float
 * additions (see backend_par.c). */
void spw_trn__par_start(struct spw_trn__par *par, spw_deep_t *deep, const spw_batch_t *batch,
                        const float *rows, const float *dense, float grad_scale, float *preds,
                        float *grads);
/* spw_trn__par_start with the owner's serial stages on thread 0 (see spw_backend_stages): pre
 * before the compute (then, for a deep model, the gather of the network's weights from rows,
 * which pre may fill), post after the reduction, with the caller as thread 0: it returns when
 * the batch is done. batch holds at least one example. finish returns the first error of pre,
 * the compute or post. stages is borrowed until finish. */
void spw_trn__par_start_staged(struct spw_trn__par *par, spw_deep_t *deep, const spw_batch_t *batch,
                               const float *rows, float grad_scale, float *preds, float *grads,
                               const struct spw_backend_stages *stages);
spw_err_t spw_trn__par_finish(struct spw_trn__par *par, double *loss_sum);
/* Whether a batch was started and not finished. */
bool spw_trn__par_in_flight(const struct spw_trn__par *par);

/* The network's weights from a batch's rows (init + blocks), in deep's own buffer; NULL when a
 * non-empty batch does not carry the blocks (spw_batch_set_model). */
const float *spw_trn__deep_gather_dense(spw_deep_t *deep, const spw_batch_t *batch,
                                        const float *rows);

/* Per-row initial weights, identical to a parameter-server shard's spw_ps__row_init for SGD and
 * Adagrad: uniform in [-init_scale, init_scale) from a hash of (key, seed, j). */
void spw_trn__row_init(uint64_t seed, float init_scale, uint64_t key, uint32_t dim, float *w);

#endif
