/* The generator's random building blocks: xoshiro256** seeding and the rejection-inversion Zipf
 * sampler. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "gen_int.h"
#include "sparrow/hash.h"
#include "sparrow/tools.h"

void spw_gen_rng_seed(struct spw_gen_rng *rng, uint64_t seed)
{
    /* SplitMix64 outputs are never all zero together, which xoshiro's state must avoid. */
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ull;
        rng->s[i] = spw_hash_mix64(x);
    }
}

/*
 * Rejection-inversion (W. Hörmann, G. Derflinger, "Rejection-inversion to generate variates from
 * monotone discrete distributions", ACM TOMACS 6(3), 1996), following Apache Commons RNG's
 * RejectionInversionZipfSampler, used here for the ranks m..n above the alias table: h(x) = x^-s
 * is inverted through its integral H; a point u drawn uniformly in (H(m + 0.5) - h(m), H(n + 0.5)]
 * maps to x = H^-1(u) and rank k = round(x), accepted when u lies under the step of height h(k)
 * (rank m always is: that is why the interval starts there). The expected number of iterations is
 * below 1.2 for every s, and most draws are accepted by the squeeze `k - x <= squeeze` (derived at
 * k = 2, valid for every k >= 2) without evaluating H again.
 */

/* log(1 + x) / x, accurate near 0. log(1 + x) instead of log1p (twice as fast): rounding 1 + x
 * costs a relative error of about 2^-53 / |x| <= 1e-12 above 1e-4, and below it the series' first
 * omitted term, x^4 / 5, is under 1e-16. */
static double helper1(double x)
{
    if (fabs(x) > 1e-4)
        return log(1.0 + x) / x;
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* (exp(x) - 1) / x, accurate near 0. */
static double helper2(double x)
{
    if (fabs(x) > 1e-8)
        return expm1(x) / x;
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

/* H(x) = (x^(1-s) - 1) / (1 - s), or log(x) when s = 1, computed without the singularity. */
static double h_integral(double s, double x)
{
    double log_x = log(x);
    return helper2((1.0 - s) * log_x) * log_x;
}

static double h(double s, double x)
{
    return exp(-s * log(x));
}

static double h_integral_inverse(double s, double x)
{
    double t = x * (1.0 - s);
    if (t < -1.0) /* rounding can push t below -1, where log1p is undefined */
        t = -1.0;
    return exp(helper1(t) * x);
}

/* sum_{k=a}^{n} k^-s for a >= 2 by Euler-Maclaurin: the integral, the end-point average and
 * the B2 and B4 corrections. The first omitted term is of order a^(-s-5) / 30240, far below the
 * rounding of the sum for the a > SPW_GEN_ZIPF_HEAD it is used with. */
static double tail_mass(double s, double a, double n)
{
    double integral = h_integral(s, n) - h_integral(s, a);
    double fa = h(s, a), fn = h(s, n);
    double d1a = -s * fa / a, d1n = -s * fn / n;    /* first derivatives */
    double d3a = d1a * (s + 1) * (s + 2) / (a * a); /* third derivatives */
    double d3n = d1n * (s + 1) * (s + 2) / (n * n);
    return integral + 0.5 * (fa + fn) + (d1n - d1a) / 12.0 - (d3n - d3a) / 720.0;
}

/* Vose's alias method over weights w[0..m) (m <= SPW_GEN_ZIPF_HEAD). */
static void build_alias(struct spw_gen_zipf *z, const double *w, uint32_t m)
{
    double sum = 0.0, q[SPW_GEN_ZIPF_HEAD];
    uint32_t small[SPW_GEN_ZIPF_HEAD], large[SPW_GEN_ZIPF_HEAD], ns = 0, nl = 0;
    for (uint32_t i = m; i-- > 0;)
        sum += w[i];
    for (uint32_t i = 0; i < m; i++) {
        q[i] = w[i] / sum * m;
        if (q[i] < 1.0)
            small[ns++] = i;
        else
            large[nl++] = i;
    }
    for (uint32_t i = 0; i < m; i++) { /* defaults: keep every column */
        z->alias_keep[i] = UINT32_MAX;
        z->alias[i] = (uint8_t)i;
    }
    while (ns > 0 && nl > 0) {
        uint32_t lo = small[--ns], hi = large[--nl];
        /* keep lo with probability q[lo]: 32 random bits r keep it when r <= keep */
        double keep = floor(q[lo] * 0x1.0p32 + 0.5);
        z->alias_keep[lo] = keep < 1.0 ? 0 : keep >= 0x1.0p32 ? UINT32_MAX : (uint32_t)keep - 1;
        z->alias[lo] = (uint8_t)hi;
        q[hi] = (q[hi] + q[lo]) - 1.0;
        if (q[hi] < 1.0)
            small[ns++] = hi;
        else
            large[nl++] = hi;
    }
    /* what remains has q == 1 up to rounding: the defaults keep it */
}

void spw_gen_zipf_init(struct spw_gen_zipf *z, uint64_t n, double s)
{
    assert(n >= 1 && s >= 0.0);
    memset(z, 0, sizeof(*z));
    z->n = n;
    z->s = s;
    z->head = n < SPW_GEN_ZIPF_HEAD ? (uint32_t)n : SPW_GEN_ZIPF_HEAD;
    z->head_threshold = 1ull << 53;
    if (s == 0.0) /* uniform: sampled directly */
        return;
    double w[SPW_GEN_ZIPF_HEAD], head_mass = 0.0;
    for (uint32_t k = z->head; k >= 1; k--) {
        w[k - 1] = h(s, (double)k);
        head_mass += w[k - 1];
    }
    build_alias(z, w, z->head);
    if (n > z->head) {
        double first = (double)z->head + 1.0;
        double tail = tail_mass(s, first, (double)n);
        z->head_threshold = (uint64_t)(head_mass / (head_mass + tail) * 0x1.0p53);
        z->h_integral_lo = h_integral(s, first + 0.5) - h(s, first);
        z->h_integral_n = h_integral(s, (double)n + 0.5);
        z->squeeze = 2.0 - h_integral_inverse(s, h_integral(s, 2.5) - h(s, 2.0));
    }
}

uint64_t spw_gen__zipf_tail(const struct spw_gen_zipf *z, struct spw_gen_rng *rng)
{
    double first = (double)z->head + 1.0;
    for (;;) {
        double u =
            z->h_integral_n + spw_gen_rng_uniform(rng) * (z->h_integral_lo - z->h_integral_n);
        double x = h_integral_inverse(z->s, u);
        double kd = floor(x + 0.5);
        uint64_t k;
        if (kd < first)
            k = z->head + 1;
        else if (kd >= (double)z->n)
            k = z->n;
        else
            k = (uint64_t)kd;
        if ((double)k - x <= z->squeeze ||
            u >= h_integral(z->s, (double)k + 0.5) - h(z->s, (double)k))
            return k;
    }
}

uint64_t spw_gen_zipf_sample(const struct spw_gen_zipf *z, struct spw_gen_rng *rng)
{
    return spw_gen__zipf_draw(z, rng);
}

double spw_gen_zipf_pmf(const struct spw_gen_zipf *z, uint64_t k)
{
    double norm = 0.0;
    for (uint64_t i = z->n; i >= 1; i--) /* smallest terms first, for accuracy */
        norm += pow((double)i, -z->s);
    return pow((double)k, -z->s) / norm;
}
