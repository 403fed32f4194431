/* dense: the optimizer step on the flat parameter block (Adagrad, Adam) and the logloss. */
#include <math.h>
#include <string.h>

#include "sparrow/dense.h"

void spw_dense_opt_default(struct spw_dense_opt *opt, enum spw_dense_opt_kind kind)
{
    memset(opt, 0, sizeof(*opt));
    opt->kind = kind;
    opt->eps = 1e-8f;
    if (kind == SPW_DENSE_OPT_ADAGRAD) {
        opt->lr = 0.01f;
        opt->init_accum = 0.1f;
    } else {
        opt->lr = 0.001f;
        opt->beta1 = 0.9f;
        opt->beta2 = 0.999f;
    }
}

spw_err_t spw_dense_opt_check(const struct spw_dense_opt *opt, char *errstr, size_t errstr_size)
{
    if (opt->kind != SPW_DENSE_OPT_ADAGRAD && opt->kind != SPW_DENSE_OPT_ADAM)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "dense optimizer kind %d unknown",
                        (int)opt->kind);
    if (!(opt->lr > 0.0f) || !isfinite(opt->lr))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "dense optimizer lr %g is not > 0",
                        (double)opt->lr);
    if (!(opt->eps > 0.0f) || !isfinite(opt->eps))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "dense optimizer eps %g is not > 0",
                        (double)opt->eps);
    if (!(opt->l2 >= 0.0f) || !isfinite(opt->l2))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "dense optimizer l2 %g is not >= 0",
                        (double)opt->l2);
    if (opt->kind == SPW_DENSE_OPT_ADAM) {
        if (!(opt->beta1 >= 0.0f && opt->beta1 < 1.0f))
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "dense optimizer beta1 %g is not in [0, 1)", (double)opt->beta1);
        if (!(opt->beta2 >= 0.0f && opt->beta2 < 1.0f))
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "dense optimizer beta2 %g is not in [0, 1)", (double)opt->beta2);
    } else if (!(opt->init_accum >= 0.0f) || !isfinite(opt->init_accum)) {
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "dense optimizer init_accum %g is not >= 0", (double)opt->init_accum);
    }
    return SPW_OK;
}

size_t spw_dense_opt_state_count(enum spw_dense_opt_kind kind, size_t n)
{
    return kind == SPW_DENSE_OPT_ADAM ? 2 * n : n;
}

void spw_dense_opt_init_state(const struct spw_dense_opt *opt, size_t n, float *state)
{
    if (opt->kind == SPW_DENSE_OPT_ADAM) {
        memset(state, 0, 2 * n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++)
        state[i] = opt->init_accum;
}

void spw_dense_opt_step(const struct spw_dense_opt *opt, size_t n, float *params,
                        const float *grads, float *state, uint64_t step)
{
    const float lr = opt->lr, eps = opt->eps, l2 = opt->l2;
    if (opt->kind == SPW_DENSE_OPT_ADAGRAD) {
        float *acc = state;
        for (size_t i = 0; i < n; i++) {
            float g = grads[i] + l2 * params[i];
            acc[i] += g * g;
            params[i] -= lr * g / (sqrtf(acc[i]) + eps);
        }
        return;
    }
    float *m = state, *v = state + n;
    const float b1 = opt->beta1, b2 = opt->beta2;
    double t = (double)(step ? step : 1);
    const float c1 = (float)(1.0 / (1.0 - pow(b1, t)));
    const float c2 = (float)(1.0 / (1.0 - pow(b2, t)));
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] + l2 * params[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        params[i] -= lr * (m[i] * c1) / (sqrtf(v[i] * c2) + eps);
    }
}

double spw_dense_logloss(const float *logits, const float *labels, size_t n, float scale,
                         float *dlogit)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double z = logits[i], y = labels[i];
        /* log(1 + e^z) - y z, without overflow */
        double softplus = z > 0.0 ? z + log1p(exp(-z)) : log1p(exp(z));
        sum += softplus - y * z;
        if (dlogit) {
            double p = z >= 0.0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
            dlogit[i] = (float)(scale * (p - y));
        }
    }
    return sum;
}
