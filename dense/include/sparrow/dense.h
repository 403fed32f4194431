/* dense: the dense towers of the deep CTR models (DeepFM's MLP, DCN-v2's cross layers + MLP):
 * a network spec, its parameters as ONE flat float block, forward and backward for a batch on
 * OpenBLAS (and on cuBLAS when built with CUDA), and the optimizer step on the flat block.
 *
 * The network (DCN-v2's "stacked" structure; with no cross layers it is DeepFM's MLP):
 *
 *     x0 = x                                      (in_dim inputs: the concatenated embeddings)
 *     x_{l+1} = x0 ⊙ (W_l x_l + b_l) + x_l        l = 0 .. cross_layers-1, W_l in_dim × in_dim
 *     h_0 = x_L
 *     h_{k+1} = dropout(relu(V_k h_k + c_k))      k = 0 .. n_hidden-1, V_k hidden[k] × width(h_k)
 *     logit = w · h_K + b                         the head: one logit
 *
 * Parameter layout (floats, in this order, with nothing between; spw_dense_layer_at gives the
 * offsets): for each layer in the order above (cross 0..L-1, hidden 0..K-1, the head) its
 * weight matrix W (out × in, row-major: W[o * in + i] maps input i to output o) at w_off, then
 * its bias (out floats) at b_off = w_off + out * in.
 *
 *     layer            kind     in        out        w_off                  b_off
 *     cross l          CROSS    in_dim    in_dim     l * (d*d + d)          w_off + d*d
 *     hidden k         HIDDEN   width_k   hidden[k]  after the layer before  w_off + out*in
 *     head             OUTPUT   width_K   1          after the layer before  w_off + in
 *
 * Gradients have the same layout; so do the optimizer's state arrays (Adagrad: one accumulator
 * block; Adam: the first-moment block, then the second-moment block).
 *
 * Thread-safety: a spw_dense_t (and a spw_dense_cuda_t) holds the batch's activations; one
 * object per thread. Parameter, gradient and state arrays are the caller's; the functions read
 * and write only the arrays they are given. OpenBLAS may use its own threads inside one call.
 */
#ifndef SPARROW_DENSE_H
#define SPARROW_DENSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPW_DENSE_MAX_HIDDEN 8          /* hidden layers */
#define SPW_DENSE_MAX_CROSS  16         /* cross layers */
#define SPW_DENSE_MAX_WIDTH  16384u     /* in_dim and every hidden width */
#define SPW_DENSE_MAX_PARAMS (1u << 28) /* floats in the parameter block (1 GiB) */

struct spw_dense_spec {
    uint32_t in_dim;       /* inputs per example, 1 .. SPW_DENSE_MAX_WIDTH */
    uint32_t cross_layers; /* full-rank cross layers before the MLP, 0 .. SPW_DENSE_MAX_CROSS */
    uint32_t n_hidden;     /* hidden ReLU layers, 0 .. SPW_DENSE_MAX_HIDDEN */
    uint32_t hidden[SPW_DENSE_MAX_HIDDEN]; /* their widths, 1 .. SPW_DENSE_MAX_WIDTH */
    float dropout;         /* [0, 1): a hidden unit's drop probability in training; 0 = off */
    uint64_t dropout_seed; /* seeds the masks (see spw_dense_forward) */
};

/* A spec of in_dim inputs, no cross layer, no hidden layer, no dropout (a linear model). */
void spw_dense_spec_default(struct spw_dense_spec *spec, uint32_t in_dim);

/* Parses hidden widths "400,400" (comma-separated decimal integers; "" or "none": no hidden
 * layer) into spec->hidden / n_hidden. SPW_ERR_INVALID naming the bad item; spec unchanged on
 * failure. Thread-safe. */
spw_err_t spw_dense_spec_parse_hidden(struct spw_dense_spec *spec, const char *text, char *errstr,
                                      size_t errstr_size);

/* Checks every field against its range; SPW_ERR_INVALID (or SPW_ERR_TOO_BIG for a parameter
 * block over SPW_DENSE_MAX_PARAMS) with the field and value named. Thread-safe. */
spw_err_t spw_dense_spec_check(const struct spw_dense_spec *spec, char *errstr, size_t errstr_size);

/* Floats in the parameter block of a valid spec. Thread-safe. */
size_t spw_dense_spec_param_count(const struct spw_dense_spec *spec);

enum spw_dense_layer_kind { SPW_DENSE_CROSS, SPW_DENSE_HIDDEN, SPW_DENSE_OUTPUT };

struct spw_dense_layer {
    enum spw_dense_layer_kind kind;
    uint32_t in, out; /* W is out × in */
    size_t w_off;     /* W's first float in the block */
    size_t b_off;     /* the bias's first float (= w_off + out * in) */
};

/* Layers of a valid spec: cross_layers + n_hidden + 1. Thread-safe. */
size_t spw_dense_spec_layer_count(const struct spw_dense_spec *spec);

/* Fills *layer with layer i (0 .. layer_count-1) of a valid spec. Thread-safe. */
void spw_dense_spec_layer_at(const struct spw_dense_spec *spec, size_t i,
                             struct spw_dense_layer *layer);

/* Fills params (param_count floats) with a seeded initialisation: cross and head weights Xavier
 * uniform (±sqrt(6 / (in + out))), hidden weights He uniform (±sqrt(6 / in)), biases 0. The
 * same seed gives the same block on every machine. Thread-safe. */
void spw_dense_init_params(const struct spw_dense_spec *spec, uint64_t seed, float *params);

/* ---- the CPU network (OpenBLAS) ---- */

typedef struct spw_dense spw_dense_t;

/* A network of a copy of spec (checked as spw_dense_spec_check does). NULL with errstr on a bad
 * spec or no memory. Free with spw_dense_destroy. */
spw_dense_t *spw_dense_new(const struct spw_dense_spec *spec, char *errstr, size_t errstr_size);

/* Frees net and its workspace. NULL does nothing. */
void spw_dense_destroy(spw_dense_t *net);

/* The spec the network was made with (owned by net). */
const struct spw_dense_spec *spw_dense_spec_of(const spw_dense_t *net);

/* Floats in its parameter (and gradient) block. */
size_t spw_dense_param_count(const spw_dense_t *net);

/* Forward of n examples: x is n × in_dim row-major, logits receives n floats. params is the
 * block (read only). train: dropout applies (when spec.dropout > 0) and the activations are kept
 * for spw_dense_backward; the t-th training forward of an object (t = 0, 1, ...) draws its masks
 * from (dropout_seed, t) (spw_dense_dropout_keep). Without train the kept state is the same
 * (backward may follow) but no dropout applies. The workspace grows to the largest n seen and is
 * reused: no allocation for a batch no larger than an earlier one. n = 0 is a no-op.
 * SPW_ERR_NOMEM when the workspace cannot grow (the last forward's state is then lost). */
spw_err_t spw_dense_forward(spw_dense_t *net, const float *params, const float *x, size_t n,
                            float *logits, bool train);

/* spw_dense_forward of rows row0 .. row0 + n - 1 of a larger batch, as one of several networks
 * that share it out (a trainer's compute threads, each with its own network): the masks are
 * those that the training forward number t of the whole batch draws for these rows, so the
 * slices together apply exactly the whole batch's masks. net's own count of training forwards
 * is neither read nor advanced: the caller keeps t. Same workspace, state and errors as
 * spw_dense_forward; one owner thread per net. */
spw_err_t spw_dense_forward_rows(spw_dense_t *net, const float *params, const float *x, size_t n,
                                 float *logits, bool train, uint64_t t, uint64_t row0);

/* The count of training forwards run so far (the next one's mask stream t), and a setter for a
 * caller that runs a batch's forward in slices (spw_dense_forward_rows) and advances the count
 * once for the batch. One owner thread. */
uint64_t spw_dense_train_forwards(const spw_dense_t *net);
void spw_dense_set_train_forwards(spw_dense_t *net, uint64_t t);

/* Backward of the last forward (same params, which must not have changed): dlogit holds n
 * floats dL/dlogit_i; grads (param_count floats) is OVERWRITTEN with dL/dparams summed over the
 * batch; dx (n × in_dim, may be NULL when not needed) receives dL/dx. SPW_ERR_STATE when no
 * forward has run since the last failure. No allocation. */
spw_err_t spw_dense_backward(spw_dense_t *net, const float *params, const float *dlogit,
                             float *grads, float *dx);

/* Whether unit j (0-based, over the n × width outputs of the batch, row-major) of hidden layer k
 * is kept by mask stream t of seed at drop probability p: the masks that spw_dense_forward and
 * the CUDA network use. Thread-safe. */
bool spw_dense_dropout_keep(uint64_t seed, uint64_t t, uint32_t k, uint64_t j, float p);

/* Logloss of n logits against labels in [0, 1]: returns the summed loss (natural log) and
 * writes dlogit_i = scale * (sigmoid(logit_i) - label_i) when dlogit is not NULL. Thread-safe. */
double spw_dense_logloss(const float *logits, const float *labels, size_t n, float scale,
                         float *dlogit);

/* ---- the optimizer on the flat block ---- */

enum spw_dense_opt_kind { SPW_DENSE_OPT_ADAGRAD, SPW_DENSE_OPT_ADAM };

struct spw_dense_opt {
    enum spw_dense_opt_kind kind;
    float lr;           /* > 0 */
    float eps;          /* > 0, added to the root of the second moment */
    float l2;           /* >= 0: grad += l2 * param before the update */
    float beta1, beta2; /* Adam only, [0, 1) */
    float init_accum;   /* Adagrad only, >= 0: the accumulator's initial value */
};

/* Defaults: Adagrad lr 0.01, eps 1e-8, init_accum 0.1; Adam lr 0.001, beta1 0.9, beta2 0.999,
 * eps 1e-8; l2 0. */
void spw_dense_opt_default(struct spw_dense_opt *opt, enum spw_dense_opt_kind kind);

/* SPW_ERR_INVALID naming the bad field. Thread-safe. */
spw_err_t spw_dense_opt_check(const struct spw_dense_opt *opt, char *errstr, size_t errstr_size);

/* Floats of optimizer state for n parameters: Adagrad n (the accumulators), Adam 2n (m, then
 * v, each in the parameter layout). */
size_t spw_dense_opt_state_count(enum spw_dense_opt_kind kind, size_t n);

/* Initialises the state (spw_dense_opt_state_count floats): Adagrad init_accum, Adam zeros. */
void spw_dense_opt_init_state(const struct spw_dense_opt *opt, size_t n, float *state);

/* One update of params[0..n) by grads[0..n) (as given: the caller scales them, e.g. by 1/batch):
 *   Adagrad: a += g*g;  p -= lr * g / (sqrt(a) + eps)
 *   Adam:    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g*g;
 *            p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
 * step (Adam's bias correction) is the update's number, 1 for the first; a checkpoint must keep
 * it with the state. Thread-safe for disjoint arrays. */
void spw_dense_opt_step(const struct spw_dense_opt *opt, size_t n, float *params,
                        const float *grads, float *state, uint64_t step);

/* ---- a planted nonlinear model (for `sparrow gen --set gen.model=deep`) ---- */

/* A random MLP over planted field embeddings: example logit += scale * mlp(e_1 .. e_F), with
 * e_f = spw_dense_planted_embedding(field f, its value). Gen adds it to the planted FM logit and
 * keeps oracle_p = sigmoid(total logit), so the Bayes-optimal loss stays known. */
typedef struct spw_dense_planted spw_dense_planted_t;

/* fields × dim inputs, the MLP `hidden` ("32,16" style), head scaled by scale (> 0; the
 * nonlinear part's logit spread), all drawn from seed. NULL with errstr on a bad argument.
 * Free with spw_dense_planted_destroy. One owner thread (the forward keeps a workspace). */
spw_dense_planted_t *spw_dense_planted_new(uint32_t fields, uint32_t dim, const char *hidden,
                                           float scale, uint64_t seed, char *errstr,
                                           size_t errstr_size);

/* NULL does nothing. */
void spw_dense_planted_destroy(spw_dense_planted_t *pl);

/* The planted embedding (dim floats, uniform in ±sqrt(3), unit variance) of value `value` of
 * field `field`: a pure function of (seed, field, value). Thread-safe. */
void spw_dense_planted_embedding(const spw_dense_planted_t *pl, uint32_t field, uint64_t value,
                                 float *out);

/* The nonlinear logits of n examples: x is n × (fields × dim), field f's embedding at columns
 * f*dim .. f*dim+dim-1 (a missing field: zeros; a multi-valued one: the mean of its values'
 * embeddings). SPW_ERR_NOMEM when the workspace cannot grow. */
spw_err_t spw_dense_planted_logits(spw_dense_planted_t *pl, const float *x, size_t n,
                                   float *logits);

/* ---- the CUDA network (cuBLAS); every function fails cleanly in builds without CUDA ---- */

/* Whether the CUDA network was built in. */
bool spw_dense_cuda_built(void);

/* CUDA devices usable (0 without CUDA, a driver or a device). Thread-safe. */
int spw_dense_cuda_device_count(void);

typedef struct spw_dense_cuda spw_dense_cuda_t;

/* The spec's network on device `device`: a stream, a cuBLAS handle, device buffers grown to the
 * largest batch. NULL with errstr on a bad spec, without CUDA (SPW_ERR_UNSUPPORTED's text) or
 * when the device cannot be used. Free with spw_dense_cuda_destroy. */
spw_dense_cuda_t *spw_dense_cuda_new(const struct spw_dense_spec *spec, int device, char *errstr,
                                     size_t errstr_size);

/* NULL does nothing. */
void spw_dense_cuda_destroy(spw_dense_cuda_t *cu);

/* spw_dense_forward and spw_dense_backward with host arrays: params and x are copied to the
 * device, logits, grads and dx back (dx NULL: not computed). Same masks as the CPU network for
 * the same seed and training-forward count. SPW_ERR_CUDA / SPW_ERR_NOMEM on a device failure,
 * SPW_ERR_STATE for a backward without a forward. */
spw_err_t spw_dense_cuda_forward(spw_dense_cuda_t *cu, const float *params, const float *x,
                                 size_t n, float *logits, bool train);
spw_err_t spw_dense_cuda_backward(spw_dense_cuda_t *cu, const float *dlogit, float *grads,
                                  float *dx);

/* The count of training forwards (the next one's dropout mask stream, as
 * spw_dense_train_forwards), and its setter. One owner thread. */
uint64_t spw_dense_cuda_train_forwards(const spw_dense_cuda_t *cu);
void spw_dense_cuda_set_train_forwards(spw_dense_cuda_t *cu, uint64_t t);

#ifdef __cplusplus
}
#endif

#endif
