/* Optimizers applied on the shard (SGD, Adagrad, Adam, FTRL-Proximal), row initialisation and the
 * staleness penalty. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ps_int.h"
#include "sparrow/hash.h"

void spw_ps_optim_conf_default(struct spw_ps_optim_conf *conf)
{
    memset(conf, 0, sizeof(*conf));
    conf->kind = SPW_PS_ADAGRAD;
    conf->lr = 0.05f;
    conf->lr_dense = 0.005f;
    conf->eps = 1e-8f;
    conf->beta1 = 0.9f;
    conf->beta2 = 0.999f;
    conf->ftrl_beta = 1.0f;
    conf->init_scale = 0.01f;
}

size_t spw_ps_slot_floats(enum spw_ps_optimizer opt, uint32_t dim)
{
    switch (opt) {
    case SPW_PS_SGD:
        return 0;
    case SPW_PS_ADAGRAD:
        return dim;
    case SPW_PS_ADAM:
        return 2 * (size_t)dim + 1;
    case SPW_PS_FTRL:
        return 2 * (size_t)dim;
    }
    return 0;
}

spw_err_t spw_ps_optimizer_parse(const char *text, enum spw_ps_optimizer *out)
{
    static const char *const names[] = {"sgd", "adagrad", "adam", "ftrl"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = (enum spw_ps_optimizer)i;
            return SPW_OK;
        }
    }
    return SPW_ERR_INVALID;
}

const char *spw_ps_optimizer_name(enum spw_ps_optimizer opt)
{
    switch (opt) {
    case SPW_PS_SGD:
        return "sgd";
    case SPW_PS_ADAGRAD:
        return "adagrad";
    case SPW_PS_ADAM:
        return "adam";
    case SPW_PS_FTRL:
        return "ftrl";
    }
    return "?";
}

spw_err_t spw_ps_penalty_parse(const char *text, struct spw_ps_penalty *out)
{
    struct spw_ps_penalty p = {.kind = SPW_PS_PENALTY_NONE, .beta = 1.0, .max_tau = 0, .lambda = 0};
    char *end;
    if (strcmp(text, "none") == 0) {
        p.kind = SPW_PS_PENALTY_NONE;
    } else if (strcmp(text, "inverse") == 0) {
        p.kind = SPW_PS_PENALTY_INVERSE;
    } else if (strncmp(text, "exp:", 4) == 0) {
        const char *num = text + 4;
        if (*num == '\0')
            return SPW_ERR_INVALID;
        double beta = strtod(num, &end);
        if (*end != '\0' || !isfinite(beta) || beta <= 0.0 || beta > 1.0)
            return SPW_ERR_INVALID;
        p.kind = SPW_PS_PENALTY_EXP;
        p.beta = beta;
    } else if (strncmp(text, "drop:", 5) == 0) {
        const char *num = text + 5;
        if (*num < '0' || *num > '9')
            return SPW_ERR_INVALID;
        unsigned long long v = strtoull(num, &end, 10);
        if (*end != '\0' || v > UINT32_MAX)
            return SPW_ERR_INVALID;
        p.kind = SPW_PS_PENALTY_DROP;
        p.max_tau = (uint32_t)v;
    } else if (strcmp(text, "adaptive") == 0) {
        p.kind = SPW_PS_PENALTY_ADAPTIVE;
    } else if (strncmp(text, "dc:", 3) == 0) {
        const char *num = text + 3;
        if (!((*num >= '0' && *num <= '9') || *num == '.')) /* no sign, no blank */
            return SPW_ERR_INVALID;
        double lambda = strtod(num, &end);
        if (*end != '\0' || !isfinite(lambda) || lambda < 0.0 || lambda > 1e6)
            return SPW_ERR_INVALID;
        p.kind = SPW_PS_PENALTY_DC;
        p.lambda = lambda;
    } else {
        return SPW_ERR_INVALID;
    }
    *out = p;
    return SPW_OK;
}

double spw_ps_penalty_alpha(const struct spw_ps_penalty *penalty, uint32_t tau)
{
    return spw_ps_penalty_alpha_ref(penalty, tau, 0.0);
}

double spw_ps_penalty_alpha_ref(const struct spw_ps_penalty *penalty, uint32_t tau, double tau_ref)
{
    switch (penalty->kind) {
    case SPW_PS_PENALTY_ADAPTIVE: {
        double a = (1.0 + (tau_ref > 0.0 ? tau_ref : 0.0)) / (1.0 + (double)tau);
        return a < 1.0 ? a : 1.0;
    }
    case SPW_PS_PENALTY_DC:
        return 1.0;
    case SPW_PS_PENALTY_NONE:
        return 1.0;
    case SPW_PS_PENALTY_INVERSE:
        return 1.0 / (1.0 + (double)tau);
    case SPW_PS_PENALTY_EXP:
        return pow(penalty->beta, (double)tau);
    case SPW_PS_PENALTY_DROP:
        return tau > penalty->max_tau ? -1.0 : 1.0;
    }
    return 1.0;
}

void spw_ps_dc_correct(uint32_t dim, float lambda, const float *g, const float *w_now,
                       const float *w_pulled, float *out)
{
    for (uint32_t j = 0; j < dim; j++)
        out[j] = g[j] + lambda * g[j] * g[j] * (w_now[j] - w_pulled[j]);
}

const char *spw_ps_row_class_name(enum spw_ps_row_class cls)
{
    switch (cls) {
    case SPW_PS_CLASS_BIAS:
        return "bias";
    case SPW_PS_CLASS_TOP:
        return "top";
    case SPW_PS_CLASS_REST:
        return "rest";
    }
    return "?";
}

/* The learning rate (FTRL: alpha) of elements 1..dim-1. */
static inline float lr_latent(const struct spw_ps_optim_conf *conf)
{
    return conf->lr_latent > 0.0f ? conf->lr_latent : conf->lr;
}

/* Uniform in [-1, 1) from 24 bits of a mixed hash of (key, seed, j); mix is mix_j(seed). */
static inline float init_uniform(uint64_t mix, uint64_t key)
{
    uint64_t h = spw_hash_mix64(key ^ mix);
    return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

void spw_ps__row_init_mixes(uint64_t seed, uint32_t dim, uint64_t *mix)
{
    for (uint32_t j = 0; j < dim; j++)
        mix[j] = spw_hash_mix64(seed + 0x9e3779b97f4a7c15ull * (j + 1));
}

void spw_ps__row_init(const struct spw_ps_optim_conf *conf, uint32_t dim, uint64_t seed,
                      uint64_t key, float *data)
{
    uint64_t mix[SPW_PS_MAX_DIM];
    spw_ps__row_init_mixes(seed, dim, mix);
    spw_ps__row_init_mixed(conf, dim, mix, key, data);
}

void spw_ps__row_init_mixed(const struct spw_ps_optim_conf *conf, uint32_t dim, const uint64_t *mix,
                            uint64_t key, float *data)
{
    size_t slots = spw_ps_slot_floats(conf->kind, dim);
    /* a deep model's dense blocks hold offsets from the trainer's seeded initial weights */
    bool zero = conf->init_scale == 0.0f || spw_key_is_dense(key);
    for (uint32_t j = 0; j < dim; j++)
        data[j] = zero ? 0.0f : conf->init_scale * init_uniform(mix[j], key);
    memset(data + dim, 0, slots * sizeof(float));
    if (conf->kind == SPW_PS_FTRL) {
        /* z such that FTRL's closed form at n = 0 gives back the initial weight:
         * w = -(z - sgn(z)·l1) / (beta/alpha + l2). */
        float *z = data + dim;
        float d0 = conf->ftrl_beta / conf->lr + conf->l2;
        float d1 = conf->ftrl_beta / lr_latent(conf) + conf->l2;
        for (uint32_t j = 0; j < dim; j++) {
            float w = data[j], d = j == 0 ? d0 : d1;
            z[j] = w > 0.0f ? -w * d - conf->ftrl_l1 : (w < 0.0f ? -w * d + conf->ftrl_l1 : 0.0f);
        }
    }
}

/* lr0 steps element 0 (the linear weight), lr1 the others (the latent vector). */
static void apply_sgd(uint32_t dim, float *restrict w, const float *restrict g, float lr0,
                      float lr1)
{
    if (dim == 0)
        return;
    w[0] -= lr0 * g[0];
    for (uint32_t j = 1; j < dim; j++)
        w[j] -= lr1 * g[j];
}

/* Adagrad on g·scale + l2·w, fused into one pass. The SSE2 path does the same single-precision
 * operations in the same order as the scalar one (IEEE sqrt and division are exact in both),
 * so results are bit-identical whichever runs; GCC at -O2 does not vectorise this loop itself. */
static void apply_adagrad(uint32_t dim, float *restrict w, float *restrict acc,
                          const float *restrict g, float scale, float l2, float lr, float eps)
{
    uint32_t j = 0;
#if defined(__SSE2__)
    const __m128 vs = _mm_set1_ps(scale), vl2 = _mm_set1_ps(l2), vlr = _mm_set1_ps(lr);
    const __m128 veps = _mm_set1_ps(eps);
    for (; j + 4 <= dim; j += 4) {
        __m128 vw = _mm_loadu_ps(w + j);
        __m128 b = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(g + j), vs), _mm_mul_ps(vl2, vw));
        __m128 a = _mm_add_ps(_mm_loadu_ps(acc + j), _mm_mul_ps(b, b));
        _mm_storeu_ps(acc + j, a);
        vw = _mm_sub_ps(vw, _mm_div_ps(_mm_mul_ps(vlr, b), _mm_add_ps(_mm_sqrt_ps(a), veps)));
        _mm_storeu_ps(w + j, vw);
    }
#endif
    for (; j < dim; j++) {
        float b = g[j] * scale + l2 * w[j];
        acc[j] += b * b;
        w[j] -= lr * b / (sqrtf(acc[j]) + eps);
    }
}

/* True when every g[j] is finite (exponent bits not all ones). */
static bool all_finite(const float *g, uint32_t dim)
{
    uint32_t j = 0;
#if defined(__SSE2__)
    const __m128i exp_mask = _mm_set1_epi32(0x7f800000);
    __m128i bad = _mm_setzero_si128();
    for (; j + 4 <= dim; j += 4) {
        __m128i bits =
            _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(g + j)), exp_mask);
        bad = _mm_or_si128(bad, _mm_cmpeq_epi32(bits, exp_mask));
    }
    if (_mm_movemask_epi8(bad) != 0)
        return false;
#endif
    for (; j < dim; j++)
        if (!isfinite(g[j]))
            return false;
    return true;
}

static void apply_adam(const struct spw_ps_optim_conf *conf, uint32_t dim, float *restrict w,
                       float *restrict slots, const float *restrict g, float lr0, float lr1)
{
    float *restrict m = slots;
    float *restrict v = slots + dim;
    uint32_t step;
    memcpy(&step, slots + 2 * (size_t)dim, sizeof(step));
    step++;
    memcpy(slots + 2 * (size_t)dim, &step, sizeof(step));
    float b1 = conf->beta1, b2 = conf->beta2;
    float c1 = 1.0f / (1.0f - powf(b1, (float)step));
    float c2 = 1.0f / (1.0f - powf(b2, (float)step));
    for (uint32_t j = 0; j < dim; j++) {
        float lr = j == 0 ? lr0 : lr1;
        m[j] = b1 * m[j] + (1.0f - b1) * g[j];
        v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
        w[j] -= lr * (m[j] * c1) / (sqrtf(v[j] * c2) + conf->eps);
    }
}

static void apply_ftrl(const struct spw_ps_optim_conf *conf, uint32_t dim, float *restrict w,
                       float *restrict slots, const float *restrict g)
{
    float *restrict z = slots;
    float *restrict n = slots + dim;
    float alpha0 = conf->lr, alpha1 = lr_latent(conf), l1 = conf->ftrl_l1;
    for (uint32_t j = 0; j < dim; j++) {
        float alpha = j == 0 ? alpha0 : alpha1;
        float n_new = n[j] + g[j] * g[j];
        float sigma = (sqrtf(n_new) - sqrtf(n[j])) / alpha;
        z[j] += g[j] - sigma * w[j];
        n[j] = n_new;
        float az = fabsf(z[j]);
        if (az <= l1)
            w[j] = 0.0f;
        else
            w[j] = -(z[j] - copysignf(l1, z[j])) /
                   ((conf->ftrl_beta + sqrtf(n_new)) / alpha + conf->l2);
    }
}

bool spw_ps__row_apply(const struct spw_ps_optim_conf *conf, uint32_t dim, float *w, float *slots,
                       const float *g, float alpha)
{
    if (!all_finite(g, dim))
        return false;
    float scale = 1.0f;
    if (conf->clip_norm > 0.0f) {
        double norm2 = 0.0;
        for (uint32_t j = 0; j < dim; j++)
            norm2 += (double)g[j] * g[j];
        if (norm2 > (double)conf->clip_norm * conf->clip_norm)
            scale = (float)(conf->clip_norm / sqrt(norm2));
    }
    float buf[SPW_PS_MAX_DIM];
    /* FTRL has no step to scale: staleness scales its gradient; its l2 lives in the closed form. */
    if (conf->kind == SPW_PS_FTRL) {
        scale *= alpha;
        for (uint32_t j = 0; j < dim; j++)
            buf[j] = g[j] * scale;
        apply_ftrl(conf, dim, w, slots, buf);
        return true;
    }
    float l2 = conf->l2;
    float lr = conf->lr * alpha, lr1 = lr_latent(conf) * alpha;
    if (conf->kind == SPW_PS_ADAGRAD) {
        if (lr1 == lr || dim == 1) {
            apply_adagrad(dim, w, slots, g, scale, l2, lr, conf->eps);
        } else { /* elementwise: the split gives each element what the whole row would */
            apply_adagrad(1, w, slots, g, scale, l2, lr, conf->eps);
            apply_adagrad(dim - 1, w + 1, slots + 1, g + 1, scale, l2, lr1, conf->eps);
        }
        return true;
    }
    for (uint32_t j = 0; j < dim; j++)
        buf[j] = g[j] * scale + l2 * w[j];
    switch (conf->kind) {
    case SPW_PS_SGD:
        apply_sgd(dim, w, buf, lr, lr1);
        break;
    case SPW_PS_ADAM:
        apply_adam(conf, dim, w, slots, buf, lr, lr1);
        break;
    case SPW_PS_ADAGRAD:
    case SPW_PS_FTRL:
        break;
    }
    return true;
}
