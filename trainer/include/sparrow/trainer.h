/* trainer: the worker of docs/ARCHITECTURE.md §4 — batches, LR/FM models on the CPU and CUDA
 * backends, top-k compression with error feedback, progressive validation and a single-process
 * reference loop. Device pointers never appear in this header. */
#ifndef SPARROW_TRAINER_H
#define SPARROW_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/dense.h"
#include "sparrow/eval.h"
#include "sparrow/err.h"
#include "sparrow/ingest.h"
#include "sparrow/sparrow.pb-c.h"

/*
 * Conventions (in addition to err.h's):
 * - A row is the parameters of one key: LR has dim 1 ([w]); FM has dim 1 + k ([w, v_1..v_k]).
 *   Blocks of rows and of gradients are n × dim floats, row-major, in the order of their keys.
 * - The model's global bias is the weight w of the reserved key SPW_TRN_BIAS_KEY (0), kept as
 *   an ordinary row of width dim on the parameter server (its latent part is never read and
 *   always gets a zero gradient). Every non-empty batch holds it as unique key 0. A real feature
 *   whose 64-bit hash happens to be 0 shares that row (a collision, accepted like any other).
 * - Loss: the mean logloss over a micro-batch, divided by acc_steps, so that the gradients of
 *   acc_steps micro-batches of B examples sum to the gradient of one batch of acc_steps × B.
 *   Labels may be soft (any value in [0,1]).
 * - Objects are owned by one thread at a time (none is internally locked) unless a function
 *   says otherwise. Nothing allocates per batch in steady state: buffers grow to the largest
 *   batch seen and are reused.
 */

/* The reserved key whose row's w is the global bias. */
#define SPW_TRN_BIAS_KEY 0ull
/* Largest FM latent dimension (dim = 1 + k stays far below SPW_WIRE_MAX_DIM). */
#define SPW_TRN_MAX_LATENT 256u
/* trainer.threads: compute threads of one trainer process. */
#define SPW_TRN_MAX_THREADS 64u
/* Most feature occurrences one batch may hold (indices are 32-bit). */
#define SPW_TRN_BATCH_MAX_OCC (1u << 30)
/* Bytes a pushed row costs beyond its values: key (u64) and version (u32). */
#define SPW_TRN_PUSH_ROW_OVERHEAD 12u

/* ---- models ---- */

enum spw_model_kind {
    SPW_MODEL_LR = 0,     /* logistic regression: p = sigmoid(b + sum_i x_i w_i) */
    SPW_MODEL_FM = 1,     /* factorization machine: adds 0.5 * sum_f ((sum_i x_i v_if)^2 -
                             sum_i x_i^2 v_if^2) */
    SPW_MODEL_DEEPFM = 2, /* FM + an MLP over the pooled field embeddings (sparrow/dense.h) */
    SPW_MODEL_DCNV2 = 3,  /* FM + full-rank cross layers stacked with the MLP */
};

/* Most fields a deep model has. */
#define SPW_TRN_MAX_FIELDS 256u
/* Longest model description (spw_model_describe), NUL included. */
#define SPW_MODEL_DESC_MAX 8192u

/* How a field's features (several values of a multi-valued field) become its one embedding. */
enum spw_pooling {
    SPW_POOL_SUM = 0,  /* sum of weight × v over the field's features */
    SPW_POOL_MEAN = 1, /* that sum divided by the number of the field's features */
};

struct spw_model_field {
    uint32_t id; /* the field id features carry (Example.fields) */
    enum spw_pooling pooling;
};

/*
 * A model. Deep models (DEEPFM, DCNV2) are the FM part plus a dense network (sparrow/dense.h)
 * whose input is the concatenation, in field order, of each field's pooled latent vector v (k
 * floats): in_dim = n_fields × k. A feature whose field is not one of the model's is counted and
 * left out of the network's input (it still counts in the FM part); a field without features in
 * an example is a zero embedding. logit = FM logit + network logit.
 *
 * The network's parameters (spw_model_dense_params floats) live on the parameter servers as
 * dense_blocks rows of dim floats at keys spw_dense_block_key(0 .. dense_blocks-1) (sparrow/
 * hash.h), zero-padded in the last block; a row holds the offset from the seeded initial weights
 * (spw_model_dense_init), so weights = init + row values. Every batch of a deep model carries the
 * blocks as its unique keys 1 .. dense_blocks (spw_batch_set_prefix), right after the bias.
 *
 * A two-tower model fits the same frame: its towers are two dense networks over two field sets
 * (user and item) with a dot product for the logit; the blocks of both on the shards, the item
 * tower's output exported per item for nearest-neighbour search.
 */
struct spw_model {
    enum spw_model_kind kind;
    uint32_t latent_dim; /* k (0 for LR) */
    uint32_t dim;        /* floats per row: 1 (LR) or 1 + k (FM and deep) */
    /* deep models only (zero otherwise) */
    uint32_t n_fields;
    struct spw_model_field fields[SPW_TRN_MAX_FIELDS];
    struct spw_dense_spec dense; /* in_dim = n_fields × k; DEEPFM: cross_layers 0 */
    uint64_t dense_seed;         /* seeds the initial weights and the dropout masks */
    uint32_t dense_blocks;       /* ceil(spw_dense_spec_param_count / dim) */
};

/* Fills *model. FM needs 1 <= latent_dim <= SPW_TRN_MAX_LATENT; LR ignores latent_dim (sets 0).
 * SPW_ERR_INVALID otherwise, and for the deep kinds (spw_model_init_deep makes them). */
spw_err_t spw_model_init(struct spw_model *model, enum spw_model_kind kind, uint32_t latent_dim);

/* A deep model of kind DEEPFM or DCNV2: latent_dim as FM's, n_fields (1 .. SPW_TRN_MAX_FIELDS)
 * distinct field ids with their pooling, hidden widths "400,400" (spw_dense_spec_parse_hidden;
 * DCNV2 may have none), cross_layers (DCNV2: 1 .. SPW_DENSE_MAX_CROSS; DEEPFM: 0), dropout in
 * [0, 1), seed. SPW_ERR_INVALID / SPW_ERR_TOO_BIG with errstr naming the setting. Thread-safe. */
spw_err_t spw_model_init_deep(struct spw_model *model, enum spw_model_kind kind,
                              uint32_t latent_dim, const struct spw_model_field *fields,
                              uint32_t n_fields, const char *hidden, uint32_t cross_layers,
                              float dropout, uint64_t seed, char *errstr, size_t errstr_size);

/* Whether the model has a dense network. */
bool spw_model_is_deep(const struct spw_model *model);

/* Floats of the dense network's parameters (0 for LR and FM). */
size_t spw_model_dense_params(const struct spw_model *model);

/* The seeded initial dense weights (spw_model_dense_params floats): weights = these + the rows of
 * the dense blocks. Thread-safe. */
void spw_model_dense_init(const struct spw_model *model, float *params);

/*
 * The model as one line of text that spw_model_parse reads back: "fm k=8", "lr",
 * "deepfm k=8 fields=1:sum,2:mean mlp=400,400 dropout=0 seed=1",
 * "dcnv2 k=8 fields=... cross=3 mlp=64 dropout=0 seed=1". It travels in the shards' hello, is kept
 * in their store and checkpoints, and tells serve, eval and export the model. Returns the length,
 * or SPW_ERR_TOO_BIG (negative) when size is too small. Thread-safe.
 */
int spw_model_describe(const struct spw_model *model, char *buf, size_t size);

/* Parses a description (untrusted: a checkpoint's or a shard's) into *model. SPW_ERR_INVALID
 * with errstr naming the bad item. Thread-safe. */
spw_err_t spw_model_parse(const char *text, struct spw_model *model, char *errstr,
                          size_t errstr_size);

/* "lr" | "fm" | "deepfm" | "dcnv2" -> kind; SPW_ERR_INVALID for anything else. */
spw_err_t spw_model_kind_parse(const char *text, enum spw_model_kind *out);
const char *spw_model_kind_name(enum spw_model_kind kind);

/*
 * The fields of a deep model, as trainer.fields gives them: a comma-separated list of fields in
 * the network's input order, each "name[:sum|:mean]" (a name's id is spw_hash_field_name's, as
 * ingest maps names without a schema: "I1,I2,C1:mean"; a decimal name is its own id), or
 * "@PATH", a fields file of one field per line, "name [sum|mean]" or "name = id [sum|mean]" (the
 * ingest schema's lines with an optional pooling; the default is sum), '#' starting a comment.
 * Fills fields[0 .. *n) (at most SPW_TRN_MAX_FIELDS, no id twice). SPW_ERR_NOT_FOUND /
 * SPW_ERR_IO / SPW_ERR_INVALID with errstr naming the file and line or the item. Thread-safe.
 */
spw_err_t spw_model_fields_parse(const char *text, struct spw_model_field *fields, uint32_t *n,
                                 char *errstr, size_t errstr_size);
/* A fields file (the "@PATH" form). */
spw_err_t spw_model_fields_load(const char *path, struct spw_model_field *fields, uint32_t *n,
                                char *errstr, size_t errstr_size);

/* ---- batches ---- */

/*
 * A mini-batch with its keys de-duplicated: the unique key list (bias first) and, per feature
 * occurrence, an index into it and a weight. Examples keep their label, oracle_p (NaN when
 * absent) and event time. Capacity grows geometrically when a batch is larger than any before
 * and is kept across spw_batch_reset; the key index uses generation stamps, so reset is O(1).
 */
typedef struct spw_batch spw_batch_t;

/* Creates an empty batch sized for about examples_hint examples of features_hint features (0s
 * are fine; it grows). NULL with errstr when out of memory. */
spw_batch_t *spw_batch_new(size_t examples_hint, size_t features_hint, char *errstr,
                           size_t errstr_size);

/* Frees batch. NULL is a no-op. */
void spw_batch_destroy(spw_batch_t *batch);

/* Empties batch, keeping its capacity. */
void spw_batch_reset(spw_batch_t *batch);

/*
 * Appends one example with n features (keys[i], weights[i]; weights NULL: all 1). oracle_p is
 * NaN when unknown. The arrays are copied. SPW_ERR_INVALID for a non-finite label or weight,
 * SPW_ERR_TOO_BIG when the batch would exceed SPW_TRN_BATCH_MAX_OCC occurrences, SPW_ERR_NOMEM
 * when it cannot grow; on any error the batch is unchanged.
 */
spw_err_t spw_batch_add(spw_batch_t *batch, float label, float oracle_p, int64_t event_time_ms,
                        size_t n, const uint64_t *keys, const float *weights);

/* spw_batch_add with each feature's field id (fields NULL: none known, the deep network's input
 * is then zero). */
spw_err_t spw_batch_add_fields(spw_batch_t *batch, float label, float oracle_p,
                               int64_t event_time_ms, size_t n, const uint64_t *keys,
                               const float *weights, const uint32_t *fields);

/* Keys every non-empty batch holds as unique keys 1 .. n, right after the bias (a deep model's
 * dense blocks: spw_batch_set_model). Copied; kept across resets. Call on an empty batch.
 * SPW_ERR_NOMEM. */
spw_err_t spw_batch_set_prefix(spw_batch_t *batch, const uint64_t *keys, size_t n);

/* spw_batch_set_prefix with the dense block keys of model (none for LR and FM). */
spw_err_t spw_batch_set_model(spw_batch_t *batch, const struct spw_model *model);

/* Field id of every occurrence (UINT32_MAX: unknown), in occurrence order; see
 * spw_batch_example_features for an example's range. */
const uint32_t *spw_batch_occ_fields(const spw_batch_t *batch);

/* Appends a decoded Example (borrowed; nothing of it is kept). Besides spw_batch_add's errors,
 * SPW_ERR_INVALID when the label is missing or weights are neither empty nor one per key. */
spw_err_t spw_batch_add_example(spw_batch_t *batch, const Sparrow__Example *ex);

/* Sizes: examples, unique keys (bias included once the batch is non-empty), occurrences. */
size_t spw_batch_examples(const spw_batch_t *batch);
size_t spw_batch_unique(const spw_batch_t *batch);
size_t spw_batch_occurrences(const spw_batch_t *batch);

/* Views valid until the batch changes. keys: the unique keys (keys[0] = SPW_TRN_BIAS_KEY);
 * labels and oracle: one per example (oracle NaN when absent). */
const uint64_t *spw_batch_keys(const spw_batch_t *batch);
const float *spw_batch_labels(const spw_batch_t *batch);
const float *spw_batch_oracle(const spw_batch_t *batch);

/* Example i's occurrences: *idx (indices into the unique keys) and *weights, count returned. */
size_t spw_batch_example_features(const spw_batch_t *batch, size_t i, const uint32_t **idx,
                                  const float **weights);

/* Newest event time among the examples (INT64_MIN when none had one). */
int64_t spw_batch_max_event_time(const spw_batch_t *batch);

/* ---- CPU backend (the oracle). Pure functions of their inputs; thread-safe. ---- */

/*
 * Gather: out[i*dim .. (i+1)*dim) = rows[idx[i]*dim .. (idx[i]+1)*dim) for i < n. This is how a
 * batch's feature occurrences pick their embedding rows out of the block of unique pulled rows.
 * Every idx[i] must be < n_rows (asserted on the CPU; checked on the GPU, see below).
 */
void spw_cpu_gather_rows(const float *rows, size_t n_rows, uint32_t dim, const uint32_t *idx,
                         size_t n, float *out);

/* Forward: preds[i] = p of example i given rows (spw_batch_unique × model->dim, in the order of
 * spw_batch_keys). Returns the summed logloss of the batch (computed from the logit, stable). */
double spw_cpu_forward(const struct spw_model *model, const spw_batch_t *batch, const float *rows,
                       float *preds);

/* Forward and backward: preds as above; grads (unique × dim, overwritten) receives the gradient
 * of grad_scale × the summed logloss (pass 1 / (examples × acc_steps) for the convention above),
 * reduced over duplicate keys. Returns the summed logloss (unscaled). */
double spw_cpu_forward_backward(const struct spw_model *model, const spw_batch_t *batch,
                                const float *rows, float grad_scale, float *preds, float *grads);

/* norms[r] = L2 norm of grads row r (n rows of dim; summed in double, rounded once). */
void spw_cpu_row_norms(const float *grads, size_t n, uint32_t dim, float *norms);

/*
 * Top-k selection: selected[r] = 1 for the m rows of largest norm, 0 for the others (n < 2^32).
 * Ties go to the lower row index; NaN ranks above every number and a norm <= 0 ranks as 0, so
 * the selected set is unique and equal on every backend. scratch: n u64 of caller storage.
 * Introselect (quickselect with a sort fallback): O(n) expected, never a full sort of n.
 */
void spw_cpu_topk_select(const float *norms, size_t n, size_t m, uint64_t *scratch,
                         uint8_t *selected);

/* spw_cpu_row_norms into norms (n floats), NaN for the rows marked in pinned (n bytes; NULL:
 * none) so that they rank first, then spw_cpu_topk_select. */
void spw_cpu_topk_rows(const float *grads, size_t n, uint32_t dim, size_t m, const uint8_t *pinned,
                       float *norms, uint64_t *scratch, uint8_t *selected);

/* ---- deep models on the CPU (the FM part above plus the dense network, OpenBLAS) ---- */

/*
 * The workspace of a deep model's forward and backward: the network's activations, the pooled
 * inputs, the field index. One owner thread; one per thread for concurrent use (serve: one per
 * request context). Buffers grow to the largest batch and are reused.
 */
typedef struct spw_deep spw_deep_t;

/* A workspace for model (copied; must be deep). NULL with errstr. */
spw_deep_t *spw_deep_new(const struct spw_model *model, char *errstr, size_t errstr_size);
void spw_deep_destroy(spw_deep_t *deep);

/*
 * Forward of a batch: rows are the batch's unique rows (spw_batch_unique × dim, in key order;
 * the dense-block rows among them are not read), dense the network's weights
 * (spw_model_dense_params floats: init + block rows). preds receives p per example; *loss_sum
 * (may be NULL) the summed logloss. SPW_ERR_NOMEM when a buffer cannot grow.
 */
spw_err_t spw_deep_forward(spw_deep_t *deep, const spw_batch_t *batch, const float *rows,
                           const float *dense, float *preds, double *loss_sum);

/*
 * Forward and backward (training: dropout applies when the model has it). grads (unique × dim,
 * overwritten) receives the gradient of grad_scale × the summed logloss for every row, the dense
 * blocks included: the batch must carry them as keys 1 .. dense_blocks (spw_batch_set_model);
 * SPW_ERR_INVALID otherwise.
 */
spw_err_t spw_deep_forward_backward(spw_deep_t *deep, const spw_batch_t *batch, const float *rows,
                                    const float *dense, float grad_scale, float *preds,
                                    float *grads, double *loss_sum);

/* Gathers the network's weights from a batch's rows: dense = init + rows 1 .. dense_blocks
 * (spw_model_dense_params floats). The batch must carry the blocks (spw_batch_set_model). */
void spw_deep_dense_from_rows(const spw_deep_t *deep, const float *rows, float *dense);

/* Feature occurrences seen whose field is not one of the model's (left out of the network). */
uint64_t spw_deep_unknown_field_features(const spw_deep_t *deep);

/* ---- CUDA availability and the standalone gather ---- */

/* True when this build has the CUDA backend (nvcc was found at configure time). */
bool spw_cuda_built(void);

/* Number of usable CUDA devices (0 without a driver, a device, or the CUDA backend). */
int spw_cuda_device_count(void);

/* The same gather on the GPU: copies rows and idx from host memory to device 0, runs the kernel,
 * copies the result into out (host). Returns SPW_ERR_UNSUPPORTED without the CUDA backend,
 * SPW_ERR_CUDA when no device is usable or a CUDA call fails, SPW_ERR_INVALID when an index is
 * out of range (found by the kernel; out is then unspecified). Thread-safe (each call uses its
 * own stream and buffers). */
spw_err_t spw_cuda_gather_rows(const float *rows, size_t n_rows, uint32_t dim, const uint32_t *idx,
                               size_t n, float *out);

/* ---- backends (trainer.backend = cpu | cuda | auto) ---- */

enum spw_backend_kind {
    SPW_BACKEND_CPU = 0,
    SPW_BACKEND_CUDA = 1,
    SPW_BACKEND_AUTO = 2, /* CUDA when built and a device is usable, else CPU */
};

/* "cpu" | "cuda" | "auto" -> kind; SPW_ERR_INVALID otherwise. */
spw_err_t spw_backend_kind_parse(const char *text, enum spw_backend_kind *out);
const char *spw_backend_kind_name(enum spw_backend_kind kind);

/*
 * A compute backend for one model: the CPU oracle or the CUDA backend (device 0, its own stream
 * and device buffers that grow to the largest batch and are reused). Every function takes and
 * returns host memory; the CUDA backend copies in and out. One owner thread.
 */
typedef struct spw_backend spw_backend_t;

/* Creates a backend of kind want for model (copied). SPW_BACKEND_CUDA fails (NULL, errstr) when
 * the backend is not built or no device is usable; AUTO then gives the CPU backend. */
spw_backend_t *spw_backend_new(enum spw_backend_kind want, const struct spw_model *model,
                               char *errstr, size_t errstr_size);

/* Frees be (and its device buffers). NULL is a no-op. */
void spw_backend_destroy(spw_backend_t *be);

/*
 * Splits spw_backend_forward_backward over `threads` compute threads (trainer.threads, 1 ..
 * SPW_TRN_MAX_THREADS): that many workers are started here (none for 1) and kept until
 * spw_backend_destroy, so that the owner thread is free while they compute (see
 * spw_backend_forward_backward_start). Each thread computes a slice
 * of the batch's examples into its own gradient buffer, and each row's gradient is then summed
 * across the buffers in thread order: equal to one thread's up to the order of float additions
 * (deterministic for a given count). A deep model's network runs once per slice, one OpenBLAS
 * thread each (dense/: openblas_set_num_threads(1) unless OPENBLAS_NUM_THREADS is set). The CUDA
 * backend keeps one host thread (the device is the parallel part): there this sets nothing and
 * spw_backend_threads stays 1. spw_backend_forward (scoring only) stays on one thread.
 * Call once, before the first batch; SPW_ERR_STATE on a second call, SPW_ERR_INVALID out of
 * range, SPW_ERR_NOMEM or SPW_ERR_IO (a thread cannot start) with errstr. Owner thread only.
 */
spw_err_t spw_backend_threads_start(spw_backend_t *be, uint32_t threads, char *errstr,
                                    size_t errstr_size);

/* Compute threads in use (1 unless spw_backend_threads_start started more). */
uint32_t spw_backend_threads(const spw_backend_t *be);

/* Whether spw_backend_forward_backward_start returns while the batch computes on a device (the
 * CUDA backend, models without a network), leaving the owner thread free until finish. */
bool spw_backend_computes_async(const spw_backend_t *be);

/* The kind in use: CPU or CUDA, never AUTO. */
enum spw_backend_kind spw_backend_kind(const spw_backend_t *be);

/* Where a deep model's network runs: "openblas" (CPU backend, or a CUDA one whose device network
 * could not be made), "cublas" (on the device), "none" (LR, FM). Static string; thread-safe. */
const char *spw_backend_network(const spw_backend_t *be);

/* The model be computes. */
const struct spw_model *spw_backend_model(const spw_backend_t *be);

/* spw_cpu_forward / spw_cpu_forward_backward on be; *loss_sum (may be NULL) gets the summed
 * logloss. SPW_ERR_CUDA or SPW_ERR_NOMEM on a device or staging failure (outputs unspecified).
 * The CUDA results equal the CPU's (same summation order, no fused multiply-add), except that the
 * device sums the gradient of a row with more than 256 occurrences in the batch (and the bias
 * over more than 256 examples) in chunks of 256: equal to rounding there. */
spw_err_t spw_backend_forward(spw_backend_t *be, const spw_batch_t *batch, const float *rows,
                              float *preds, double *loss_sum);
spw_err_t spw_backend_forward_backward(spw_backend_t *be, const spw_batch_t *batch,
                                       const float *rows, float grad_scale, float *preds,
                                       float *grads, double *loss_sum);

/*
 * spw_backend_forward_backward in two halves, so that the owner thread can do other work while
 * the compute threads (spw_backend_threads_start) work: start borrows batch, rows, preds and
 * grads until finish, which waits and returns what spw_backend_forward_backward would (outputs
 * unspecified on an error). With one compute thread, start computes the whole batch itself.
 * The CUDA backend (of a model without a network) queues the batch on the device and returns
 * (spw_backend_computes_async). Every start is followed by exactly one finish before the next
 * start or any other use of be. Owner thread only.
 */
void spw_backend_forward_backward_start(spw_backend_t *be, const spw_batch_t *batch,
                                        const float *rows, float grad_scale, float *preds,
                                        float *grads);
spw_err_t spw_backend_forward_backward_finish(spw_backend_t *be, double *loss_sum);

/*
 * The owner's serial work around a batch, handed to spw_backend_forward_backward_start_staged:
 * pre (may be NULL) brings the batch's rows into the rows buffer given to start (the pull), post
 * (may be NULL) consumes preds and grads (scoring, the push). On the compute threads both run
 * on thread 0, which is the owner thread itself (start returns when the batch is done). A non-zero
 * return fails the batch (pre's: nothing computed, post not called) and finish returns it. ctx is
 * the callbacks'.
 */
struct spw_backend_stages {
    spw_err_t (*pre)(void *ctx);
    spw_err_t (*post)(void *ctx);
    /* Work that runs beside pre and beside post (may be NULL): on compute thread 1 at the same
     * time as pre / post on thread 0, so it must touch nothing that they (or the forward and
     * backward) touch; with one compute thread, after pre / post. It cannot fail the batch: it
     * keeps its own outcome in ctx. On the compute threads it is how the owner's other work
     * (reading the next micro-batch, scoring this one) runs on a thread that would otherwise
     * wait, with no third thread competing for the cores. */
    void (*beside_pre)(void *ctx);
    void (*beside_post)(void *ctx);
    void *ctx;
};

/* spw_backend_forward_backward_start with stages: pre, the forward and backward, post, in that
 * order. On the compute threads (spw_backend_threads > 1) all of it runs there, with the caller
 * as compute thread 0, and start returns when it is done; otherwise start runs the three in
 * the caller. batch holds at least one example. rows, preds, grads and stages are borrowed until
 * finish, which returns the first error. Owner thread only. */
void spw_backend_forward_backward_start_staged(spw_backend_t *be, const spw_batch_t *batch,
                                               float *rows, float grad_scale, float *preds,
                                               float *grads,
                                               const struct spw_backend_stages *stages);

/* spw_cpu_row_norms over rows of the model's dim. */
spw_err_t spw_backend_row_norms(spw_backend_t *be, const float *grads, size_t n, float *norms);

/* spw_cpu_topk_select (the same selected set), with scratch owned by be. */
spw_err_t spw_backend_topk_select(spw_backend_t *be, const float *norms, size_t n, size_t m,
                                  uint8_t *selected);

/* The m of n rows of grads with the largest norms into selected (as spw_backend_row_norms then
 * spw_backend_topk_select), the rows marked in pinned (n bytes; NULL: none) ranking first (NaN
 * norms). norms: n floats of the caller's scratch (the CPU backend writes the norms there). On
 * the CUDA backend one upload of grads and pinned and one download of selected: the norms stay
 * on the device. Caller's thread; be not shared. */
spw_err_t spw_backend_topk_rows(spw_backend_t *be, const float *grads, size_t n, size_t m,
                                const uint8_t *pinned, float *norms, uint8_t *selected);

/* ---- gradient accumulation over micro-batches ---- */

/*
 * Sums per-key gradient rows over acc_steps micro-batches (keys differ between micro-batches).
 * Rows keep first-seen order; each row's version is the smallest it was added with (the oldest
 * pull its gradient depends on).
 */
typedef struct spw_grad_acc spw_grad_acc_t;

/* Creates an accumulator of rows of dim floats. NULL with errstr when out of memory. */
spw_grad_acc_t *spw_grad_acc_new(uint32_t dim, char *errstr, size_t errstr_size);
void spw_grad_acc_destroy(spw_grad_acc_t *acc);

/* Adds n rows (keys unique within the call; grads n × dim; versions NULL means 0). Copies.
 * SPW_ERR_NOMEM when it cannot grow (acc unchanged). */
spw_err_t spw_grad_acc_add(spw_grad_acc_t *acc, const uint64_t *keys, const float *grads,
                           const uint32_t *versions, size_t n);

/* spw_grad_acc_add that also keeps the row values the gradients were computed from (pulled,
 * n × dim, may be NULL): a row's are those of the latest add holding its key (its version stays
 * the oldest). */
spw_err_t spw_grad_acc_add_pulled(spw_grad_acc_t *acc, const uint64_t *keys, const float *grads,
                                  const uint32_t *versions, const float *pulled, size_t n);

/* Rows held, and views of them valid until the next add or reset. grads is writable so that it
 * can be handed to spw_topk_compress without a copy. */
size_t spw_grad_acc_rows(const spw_grad_acc_t *acc);
const uint64_t *spw_grad_acc_keys(const spw_grad_acc_t *acc);
float *spw_grad_acc_grads(spw_grad_acc_t *acc);
const uint32_t *spw_grad_acc_versions(const spw_grad_acc_t *acc);
/* The rows' pulled values (n × dim), or NULL unless every add since the reset carried them. */
const float *spw_grad_acc_pulled(const spw_grad_acc_t *acc);

/* Empties acc, keeping its capacity (O(1) for the key index). */
void spw_grad_acc_reset(spw_grad_acc_t *acc);

/* ---- top-k compression with error feedback ---- */

/* How fp16 pushes round values to halves. */
enum spw_topk_rounding {
    /* to nearest, each sent row's rounding error kept as its key's residual (with error feedback:
     * it rides on the key's next push, or the flush) */
    SPW_TOPK_ROUND_FEEDBACK = 0,
    /* stochastically (spw_wire_f32_to_f16_stochastic_n: unbiased), keeping nothing: a sent row
     * leaves no residual, so with ratio 1 the table stays empty and a flush sends nothing */
    SPW_TOPK_ROUND_STOCHASTIC,
};

struct spw_topk_conf {
    uint32_t dim;        /* floats per row */
    double ratio;        /* fraction of a step's rows sent, in (0, 1]; 1 sends every row */
    bool error_feedback; /* keep unsent rows as residuals (false: discard them) */
    bool fp16;           /* values travel as IEEE half */
    enum spw_topk_rounding rounding; /* fp16's rounding */
    uint64_t seed;                   /* SPW_TOPK_ROUND_STOCHASTIC's random bits */
    size_t residual_max_rows;        /* bound of the residual table (0: no residual can be kept, so
                                        every row is sent at once) */
    /* the push sets carry pulled values (spw_topk_compress_pulled): a residual keeps those of
     * the step that left it (dim more floats per residual) */
    bool pulled;
};

/* The rows to push: views owned by the compressor, valid until its next compress or flush.
 * Keys are unique. values is what the server will apply: when fp16 is set, the f32 decoding of
 * values_f16 (the wire block); values_f16 is NULL otherwise. */
struct spw_push_set {
    size_t n;
    uint32_t dim;
    bool fp16;
    const uint64_t *keys;
    const uint32_t *versions;
    const float *values;
    const uint16_t *values_f16;
    /* n × dim row values the gradients were computed from (f32 whatever fp16 says), or NULL */
    const float *pulled;
};

struct spw_topk_stats {
    uint64_t steps;            /* compress calls */
    uint64_t rows_in;          /* rows offered */
    uint64_t rows_sent;        /* rows pushed, by every path */
    uint64_t rows_selected;    /* of which chosen by top-k */
    uint64_t rows_forced;      /* of which residuals sent because the table was full */
    uint64_t rows_flushed;     /* of which residuals sent by spw_topk_flush */
    uint64_t rows_kept;        /* unsent rows stored as residual */
    uint64_t rows_discarded;   /* unsent rows thrown away (error feedback off) */
    uint64_t rows_dropped;     /* residuals removed by spw_topk_drop (rows_reset included) */
    uint64_t rows_reset;       /* of which dropped because the shard evicted the row since */
    uint64_t fp16_errors_kept; /* sent rows whose fp16 rounding error became their residual */
    uint64_t fp16_errors_lost; /* ... not kept: the table was full, or the error not finite */
    uint64_t bytes_sent;       /* SPW_TRN_PUSH_ROW_OVERHEAD + dim × (2 | 4) per row sent */
    uint64_t bytes_dense;      /* what rows_in would cost as fp32 without compression */
    size_t residual_rows;      /* rows in the residual table now */
};

/*
 * Top-k compressor. Per step: add each row's residual, keep the ceil(ratio × n) rows of largest
 * gradient norm, and (with error feedback) store the rest as residuals; when the table is full
 * the oldest residuals are sent instead of being dropped. With fp16 the rounding error of each row
 * sent as halves (value - half(value)) is kept as that key's residual too, while the table has
 * room (fp16_errors_lost counts the rest); sent on its own, such an error carries the version its
 * row's push gave the row (one more than pulled), so that the shard's staleness penalty does not
 * count the trainer's own push. Conserves the gradient: over any sequence of steps,
 * sent (as the shard decodes it) + residual = computed (to float rounding). Without error
 * feedback nothing is kept.
 *
 * Evictions: a shard that evicts a row (TTL) and creates it anew restarts its version at 0. A step
 * whose pulled version of a key is older than the version its residual was computed from drops
 * that residual (spw_topk_drop; rows_reset) instead of folding it into the fresh row: the pull
 * reply's versions are the signal (docs/ARCHITECTURE.md §4).
 */
typedef struct spw_topk spw_topk_t;

/* Creates a compressor. be (borrowed, may be NULL for the CPU functions) computes norms and the
 * selection. NULL with errstr for an invalid conf or when out of memory. */
spw_topk_t *spw_topk_new(const struct spw_topk_conf *conf, spw_backend_t *be, char *errstr,
                         size_t errstr_size);
void spw_topk_destroy(spw_topk_t *tk);

/*
 * Compresses one step of n rows (keys unique; versions, the versions pulled, NULL means 0: no
 * reset is detected then). grads is used in place:
 * on return it holds gradient + residual. Fills *out. SPW_ERR_NOMEM when a buffer cannot grow
 * (the residual table may then hold fewer rows: the step should be treated as failed).
 */
spw_err_t spw_topk_compress(spw_topk_t *tk, const uint64_t *keys, float *grads,
                            const uint32_t *versions, size_t n, struct spw_push_set *out);

/* spw_topk_compress with the row values the gradients were computed from (pulled, n × dim; may
 * be NULL only when conf.pulled is false, and is ignored then): with conf.pulled, out->pulled
 * holds each sent row's (a row with its residual folded in: this step's; a residual sent on its
 * own: the step's that left it). SPW_ERR_INVALID for conf.pulled without pulled. */
spw_err_t spw_topk_compress_pulled(spw_topk_t *tk, const uint64_t *keys, float *grads,
                                   const uint32_t *versions, const float *pulled, size_t n,
                                   struct spw_push_set *out);

/* Moves every residual into *out (oldest first) and empties the table (checkpoints use it). The
 * set is f32 (out->fp16 false) even with conf.fp16, so that nothing is left behind. */
spw_err_t spw_topk_flush(spw_topk_t *tk, struct spw_push_set *out);

/* Forgets the residual of key (the server evicted its row). True when there was one. */
bool spw_topk_drop(spw_topk_t *tk, uint64_t key);

/* Forgets every residual (a recovery restored the model to a checkpoint, which the residuals
 * postdate); counted in rows_dropped. Returns how many there were. */
size_t spw_topk_drop_all(spw_topk_t *tk);

/* The residual of key copied into out (dim floats); false when there is none. For tests and
 * inspection. */
bool spw_topk_residual(const spw_topk_t *tk, uint64_t key, float *out);

/* Counters since creation. compression ratio = bytes_dense / bytes_sent. */
void spw_topk_get_stats(const spw_topk_t *tk, struct spw_topk_stats *out);

/* ---- progressive validation ---- */

/* Scores seen before training: the model's logloss/AUC over a window and cumulatively, and the
 * same for oracle_p (the Bayes-optimal predictor) over the examples that carry it. */
typedef struct spw_pv spw_pv_t;

struct spw_pv_report {
    uint64_t examples;        /* scored */
    uint64_t oracle_examples; /* of which carried oracle_p */
    struct spw_eval_summary window, cumulative;
    struct spw_eval_summary oracle_window, oracle_cumulative; /* count 0: no oracle_p seen */
    double const_window;     /* logloss of the best constant on the window: H(window ctr) */
    double const_cumulative; /* the same over everything */
};

spw_pv_t *spw_pv_new(size_t window, char *errstr, size_t errstr_size);
void spw_pv_destroy(spw_pv_t *pv);

/* Adds n scored examples (oracle may be NULL; NaN entries mean absent). */
void spw_pv_add(spw_pv_t *pv, const float *preds, const float *labels, const float *oracle,
                size_t n);

/* Fills *out (the window AUC sorts the window: call every few seconds, not per batch). */
void spw_pv_report(spw_pv_t *pv, struct spw_pv_report *out);

/* ---- configuration (trainer.*) ---- */

/* The properties of the model (trainer.model, latent_dim, fields, mlp, cross.layers, dropout,
 * dense.seed): in the trainer's table and in those of the tools that read a model (eval). */
#define SPW_TRAINER_MODEL_CONFIG_PROPS                                                             \
    {"trainer.model",                                                                              \
     SPW_CONFIG_ENUM,                                                                              \
     "fm",                                                                                         \
     0,                                                                                            \
     0,                                                                                            \
     "lr|fm|deepfm|dcnv2",                                                                         \
     "Model: logistic regression, factorization machine (rows of 1 or 1 + latent_dim floats), "    \
     "DeepFM (the FM plus an MLP over the pooled field embeddings) or DCN-v2 (the FM plus "        \
     "full-rank cross layers stacked with the MLP). The deep models need trainer.fields."},        \
        {"trainer.latent_dim",                                                                     \
         SPW_CONFIG_INT,                                                                           \
         "8",                                                                                      \
         1,                                                                                        \
         SPW_TRN_MAX_LATENT,                                                                       \
         NULL,                                                                                     \
         "Latent dimension k of the factorization machine and of each field's embedding in the "   \
         "deep "                                                                                   \
         "models (ignored by lr)."},                                                               \
        {"trainer.fields",                                                                         \
         SPW_CONFIG_STRING,                                                                        \
         NULL,                                                                                     \
         0,                                                                                        \
         65536,                                                                                    \
         NULL,                                                                                     \
         "Deep models: the fields whose pooled embeddings are the network's input, in order: a "   \
         "list "                                                                                   \
         "\"I1,I2,C1:mean\" of field names (or ids) with an optional pooling (sum, the default, "  \
         "or "                                                                                     \
         "mean) for multi-valued fields, or @PATH, a file of one \"name [sum|mean]\" or "          \
         "\"name = id [sum|mean]\" per line. A feature of another field is counted and left out "  \
         "of the network (it stays in the FM part); a field without features is a zero "           \
         "embedding."},                                                                            \
        {"trainer.mlp",                                                                            \
         SPW_CONFIG_STRING,                                                                        \
         "128,64",                                                                                 \
         0,                                                                                        \
         256,                                                                                      \
         NULL,                                                                                     \
         "Deep models: widths of the MLP's hidden ReLU layers, comma-separated (\"400,400\"); "    \
         "dcnv2 may have none."},                                                                  \
        {"trainer.cross.layers",                                                                   \
         SPW_CONFIG_INT,                                                                           \
         "2",                                                                                      \
         1,                                                                                        \
         SPW_DENSE_MAX_CROSS,                                                                      \
         NULL,                                                                                     \
         "dcnv2: full-rank cross layers before the MLP (ignored by the other models)."},           \
        {"trainer.dropout",                                                                        \
         SPW_CONFIG_DOUBLE,                                                                        \
         "0",                                                                                      \
         0,                                                                                        \
         0.99,                                                                                     \
         NULL,                                                                                     \
         "Deep models: drop probability of a hidden unit in training (0: off)."},                  \
    {                                                                                              \
        "trainer.dense.seed", SPW_CONFIG_INT, "1", 0, 9.2e18, NULL,                                \
            "Deep models: seed of the network's initial weights and dropout masks (part of the "   \
            "model: "                                                                              \
            "every trainer of a job must use the same)."                                           \
    }

/* The model those properties describe. SPW_ERR_INVALID with errstr naming the setting. */
spw_err_t spw_trainer_model_from_config(const spw_config_t *cfg, struct spw_model *model,
                                        char *errstr, size_t errstr_size);

/* The trainer's property table. */
extern const struct spw_config_prop spw_trainer_config_props[];
extern const size_t spw_trainer_config_n_props;

enum spw_ref_optimizer {
    SPW_REF_SGD = 0,
    SPW_REF_ADAGRAD = 1,
};

/* The trainer.* settings the compute core uses. */
struct spw_trainer_params {
    struct spw_model model;
    enum spw_backend_kind backend;
    uint32_t batch;            /* examples per micro-batch */
    uint32_t threads;          /* compute threads (spw_backend_threads_start) */
    uint32_t acc_steps;        /* micro-batches per step */
    bool compress;             /* false when topk.ratio is 1 and fp16 is off: push rows as is */
    struct spw_topk_conf topk; /* dim filled from the model */
    size_t eval_window;
    /* the local (reference) optimizer; with parameter servers the shard's settings apply */
    enum spw_ref_optimizer optimizer;
    float lr;
    float lr_dense; /* in-process shards: a deep model's dense blocks (pserver.lr.dense) */
    float eps;
    float init_scale;
    uint64_t seed;
};

/* The table's defaults (FM k=8, batch 1024, ...), as a fresh configuration would give. */
void spw_trainer_params_default(struct spw_trainer_params *params);

/* Reads cfg (a configuration of spw_trainer_config_props). SPW_ERR_INVALID with errstr for a
 * cross-property error (none today beyond the table's ranges). */
spw_err_t spw_trainer_params_from_config(const spw_config_t *cfg, struct spw_trainer_params *params,
                                         char *errstr, size_t errstr_size);

/* ---- the single-process reference trainer ---- */

/*
 * Baseline (a) of the trainer benchmark and the reference of the tests: every row in an
 * in-memory table (initialised from (key, seed) exactly like a parameter-server shard's), the
 * optimizer applied locally (SGD or Adagrad, as the shard applies them), with the same batching,
 * accumulation, compression and progressive validation as the distributed trainer. Rows are
 * never evicted: memory grows with the vocabulary.
 */
typedef struct spw_ref spw_ref_t;

struct spw_ref_counts {
    uint64_t examples; /* trained on */
    uint64_t rejected; /* bad input records skipped */
    uint64_t batches;  /* micro-batches */
    uint64_t steps;    /* optimizer steps (each acc_steps micro-batches) */
};

/* Creates a reference trainer (params copied). NULL with errstr on invalid params or OOM. */
spw_ref_t *spw_ref_new(const struct spw_trainer_params *params, char *errstr, size_t errstr_size);
void spw_ref_destroy(spw_ref_t *ref);

/* Scores (progressive validation), then trains on one micro-batch; every acc_steps micro-batches
 * the accumulated gradient is compressed (when configured) and applied. */
spw_err_t spw_ref_train_batch(spw_ref_t *ref, const spw_batch_t *batch);

/*
 * Reads examples from reader in micro-batches of params.batch and trains on them, up to
 * max_examples (0: to the end). Bad records are counted and skipped. Returns SPW_OK at the end
 * or the limit, SPW_ERR_IO on a read error, or a training error.
 */
spw_err_t spw_ref_train_reader(spw_ref_t *ref, spw_reader_t *reader, uint64_t max_examples);

/* Applies a pending partial accumulation and every residual (end of a run, or a checkpoint). */
spw_err_t spw_ref_flush(spw_ref_t *ref);

/* The row of key (dim floats, valid until the next training call), NULL when never touched. */
const float *spw_ref_row(const spw_ref_t *ref, uint64_t key);
size_t spw_ref_rows(const spw_ref_t *ref);

void spw_ref_get_counts(const spw_ref_t *ref, struct spw_ref_counts *out);
/* The progressive validation of everything trained on so far. */
void spw_ref_report(spw_ref_t *ref, struct spw_pv_report *out);
/* Compression counters (zero when compression is off). */
void spw_ref_topk_stats(const spw_ref_t *ref, struct spw_topk_stats *out);
/* The backend kind in use. */
enum spw_backend_kind spw_ref_backend(const spw_ref_t *ref);

#endif
