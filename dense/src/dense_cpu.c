/* dense: the CPU network: forward and backward of a batch on OpenBLAS's sgemm, with a workspace
 * that grows to the largest batch and is reused. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/dense.h"

#include "dense_int.h"

/* Workspace of cap rows, one allocation (offsets in floats):
 *
 *     x[l]   (L + 1) blocks of cap × d     cross inputs x_0 .. x_L (x_0 a copy of the input)
 *     u[l]   L blocks of cap × d           W_l x_l + b_l
 *     h[k]   cap × hidden[k] each          hidden outputs after ReLU and dropout
 *     ga, gb cap × wmax each               the backward's running dL/d(activation)
 *     gx0    cap × d                       dL/dx_0 through the ⊙ x0 terms (cross only)
 */
struct spw_dense {
    struct spw_dense_spec spec;
    size_t n_params;
    uint32_t wmax;
    size_t cap;
    float *ws;
    float *x[SPW_DENSE_MAX_CROSS + 1];
    float *u[SPW_DENSE_MAX_CROSS];
    float *h[SPW_DENSE_MAX_HIDDEN];
    float *ga, *gb, *gx0;
    size_t n;          /* rows of the last forward */
    bool have_forward; /* the workspace holds the last forward's activations */
    float drop_scale;  /* 1 / (1 - p) of the last forward's dropout, 1 without */
    uint64_t t;        /* training forwards so far (the dropout stream) */
};

/* One BLAS thread per caller: a network belongs to one thread (trainers run one per compute
 * thread), and OpenBLAS's own pool, sized to the cores, only spins against them (about 40% of a
 * deep gen's samples were its threads yielding). OPENBLAS_NUM_THREADS set by the user wins. */
static void blas_threads_once(void)
{
    if (!getenv("OPENBLAS_NUM_THREADS"))
        openblas_set_num_threads(1);
}

spw_dense_t *spw_dense_new(const struct spw_dense_spec *spec, char *errstr, size_t errstr_size)
{
    static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
    pthread_once(&blas_once, blas_threads_once);
    if (spw_dense_spec_check(spec, errstr, errstr_size) != SPW_OK)
        return NULL;
    spw_dense_t *net = calloc(1, sizeof(*net));
    if (!net) {
        spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "dense network: out of memory");
        return NULL;
    }
    net->spec = *spec;
    net->n_params = spw_dense_spec_param_count(spec);
    net->wmax = spec->in_dim;
    for (uint32_t k = 0; k < spec->n_hidden; k++)
        if (spec->hidden[k] > net->wmax)
            net->wmax = spec->hidden[k];
    net->drop_scale = 1.0f;
    return net;
}

void spw_dense_destroy(spw_dense_t *net)
{
    if (!net)
        return;
    free(net->ws);
    free(net);
}

const struct spw_dense_spec *spw_dense_spec_of(const spw_dense_t *net)
{
    return &net->spec;
}

size_t spw_dense_param_count(const spw_dense_t *net)
{
    return net->n_params;
}

static spw_err_t reserve(spw_dense_t *net, size_t n)
{
    if (n <= net->cap)
        return SPW_OK;
    const struct spw_dense_spec *s = &net->spec;
    size_t d = s->in_dim, L = s->cross_layers;
    size_t per_row = (L + 1) * d + L * d + 2 * (size_t)net->wmax + (L ? d : 0);
    for (uint32_t k = 0; k < s->n_hidden; k++)
        per_row += s->hidden[k];
    free(net->ws);
    net->ws = NULL;
    net->cap = 0;
    net->have_forward = false;
    if (n > SIZE_MAX / sizeof(float) / per_row)
        return SPW_ERR_NOMEM;
    float *ws = malloc(n * per_row * sizeof(float));
    if (!ws)
        return SPW_ERR_NOMEM;
    float *p = ws;
    for (size_t l = 0; l <= L; l++, p += n * d)
        net->x[l] = p;
    for (size_t l = 0; l < L; l++, p += n * d)
        net->u[l] = p;
    for (uint32_t k = 0; k < s->n_hidden; k++) {
        net->h[k] = p;
        p += n * s->hidden[k];
    }
    net->ga = p;
    p += n * net->wmax;
    net->gb = p;
    p += n * net->wmax;
    net->gx0 = L ? p : NULL;
    net->ws = ws;
    net->cap = n;
    return SPW_OK;
}

/* z (n × out) = x (n × in) W^T + b */
static void linear_forward(size_t n, size_t in, size_t out, const float *x, const float *w,
                           const float *b, float *z)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f, x,
                (int)in, w, (int)in, 0.0f, z, (int)out);
    for (size_t i = 0; i < n; i++) {
        float *zi = z + i * out;
        for (size_t o = 0; o < out; o++)
            zi[o] += b[o];
    }
}

/* dW = dz^T x, db = column sums of dz; dx (when not NULL) = dz W + beta * dx */
static void linear_backward(size_t n, size_t in, size_t out, const float *dz, const float *x,
                            const float *w, float *dw, float *db, float *dx, float beta)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, 1.0f, dz,
                (int)out, x, (int)in, 0.0f, dw, (int)in);
    memset(db, 0, out * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const float *dzi = dz + i * out;
        for (size_t o = 0; o < out; o++)
            db[o] += dzi[o];
    }
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, 1.0f, dz,
                    (int)out, w, (int)in, beta, dx, (int)in);
}

/* The forward of rows row0 .. row0 + n - 1 of a batch whose dropout masks are stream t. */
static spw_err_t forward_at(spw_dense_t *net, const float *params, const float *x, size_t n,
                            float *logits, bool train, uint64_t t, uint64_t row0)
{
    if (n == 0)
        return SPW_OK;
    spw_err_t rc = reserve(net, n);
    if (rc != SPW_OK)
        return rc;
    const struct spw_dense_spec *s = &net->spec;
    size_t d = s->in_dim;
    struct spw_dense_layer ly;
    memcpy(net->x[0], x, n * d * sizeof(float));
    const float *x0 = net->x[0];
    for (uint32_t l = 0; l < s->cross_layers; l++) {
        spw_dense_spec_layer_at(s, l, &ly);
        const float *xl = net->x[l];
        float *u = net->u[l], *xn = net->x[l + 1];
        linear_forward(n, d, d, xl, params + ly.w_off, params + ly.b_off, u);
        for (size_t j = 0; j < n * d; j++)
            xn[j] = x0[j] * u[j] + xl[j];
    }
    const float *hin = net->x[s->cross_layers];
    size_t in = d;
    bool drop = train && s->dropout > 0.0f;
    float scale = drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
    for (uint32_t k = 0; k < s->n_hidden; k++) {
        spw_dense_spec_layer_at(s, s->cross_layers + k, &ly);
        float *h = net->h[k];
        size_t out = ly.out;
        linear_forward(n, in, out, hin, params + ly.w_off, params + ly.b_off, h);
        for (size_t j = 0; j < n * out; j++) {
            float v = h[j] > 0.0f ? h[j] : 0.0f;
            if (drop)
                v = spw_dense__keep(s->dropout_seed, t, k, row0 * out + j, s->dropout) ? v * scale
                                                                                       : 0.0f;
            h[j] = v;
        }
        hin = h;
        in = out;
    }
    spw_dense_spec_layer_at(s, s->cross_layers + s->n_hidden, &ly);
    linear_forward(n, in, 1, hin, params + ly.w_off, params + ly.b_off, logits);
    net->n = n;
    net->drop_scale = scale;
    net->have_forward = true;
    return SPW_OK;
}

spw_err_t spw_dense_forward(spw_dense_t *net, const float *params, const float *x, size_t n,
                            float *logits, bool train)
{
    if (n == 0)
        return SPW_OK;
    spw_err_t rc = forward_at(net, params, x, n, logits, train, net->t, 0);
    if (rc == SPW_OK && train)
        net->t++;
    return rc;
}

spw_err_t spw_dense_forward_rows(spw_dense_t *net, const float *params, const float *x, size_t n,
                                 float *logits, bool train, uint64_t t, uint64_t row0)
{
    return forward_at(net, params, x, n, logits, train, t, row0);
}

uint64_t spw_dense_train_forwards(const spw_dense_t *net)
{
    return net->t;
}

void spw_dense_set_train_forwards(spw_dense_t *net, uint64_t t)
{
    net->t = t;
}

spw_err_t spw_dense_backward(spw_dense_t *net, const float *params, const float *dlogit,
                             float *grads, float *dx)
{
    if (!net->have_forward)
        return SPW_ERR_STATE;
    const struct spw_dense_spec *s = &net->spec;
    size_t n = net->n, d = s->in_dim, L = s->cross_layers, K = s->n_hidden;
    struct spw_dense_layer ly;
    /* the head: dz = dlogit (n × 1) */
    spw_dense_spec_layer_at(s, L + K, &ly);
    const float *hin = K ? net->h[K - 1] : net->x[L];
    float *g = net->ga, *gnext = net->gb;
    linear_backward(n, ly.in, 1, dlogit, hin, params + ly.w_off, grads + ly.w_off, grads + ly.b_off,
                    g, 0.0f);
    for (size_t k = K; k-- > 0;) {
        spw_dense_spec_layer_at(s, L + k, &ly);
        const float *h = net->h[k];
        /* ReLU and dropout: a unit passed gradient iff its output is positive */
        for (size_t j = 0; j < n * ly.out; j++)
            g[j] = h[j] > 0.0f ? g[j] * net->drop_scale : 0.0f;
        hin = k ? net->h[k - 1] : net->x[L];
        linear_backward(n, ly.in, ly.out, g, hin, params + ly.w_off, grads + ly.w_off,
                        grads + ly.b_off, gnext, 0.0f);
        float *tmp = g;
        g = gnext;
        gnext = tmp;
    }
    /* g = dL/dx_L; through each cross layer: x_{l+1} = x0 ⊙ u_l + x_l */
    if (L) {
        const float *x0 = net->x[0];
        float *du = gnext, *gx0 = net->gx0;
        memset(gx0, 0, n * d * sizeof(float));
        for (size_t l = L; l-- > 0;) {
            spw_dense_spec_layer_at(s, l, &ly);
            const float *u = net->u[l];
            for (size_t j = 0; j < n * d; j++) {
                du[j] = g[j] * x0[j];
                gx0[j] += g[j] * u[j];
            }
            /* g (dL/dx_l) = g (the identity path) + du W_l */
            linear_backward(n, d, d, du, net->x[l], params + ly.w_off, grads + ly.w_off,
                            grads + ly.b_off, g, 1.0f);
        }
        if (dx)
            for (size_t j = 0; j < n * d; j++)
                dx[j] = g[j] + gx0[j];
    } else if (dx) {
        memcpy(dx, g, n * d * sizeof(float));
    }
    return SPW_OK;
}
