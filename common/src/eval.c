/* Streaming evaluation: exact logloss/AUC over a sliding window, cumulative logloss and binned AUC.
 */
#include "sparrow/eval.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BINS  65536
#define P_CLAMP_LO 1e-7
#define P_CLAMP_HI (1.0 - 1e-7)

/*
 * Cumulative AUC from bins, and why auc_err bounds its error.
 *
 * Every example goes to bin b = floor(p * 2^16) (p = 1 goes to the last bin). Multiplying by a
 * power of two is exact and floor is monotone, so p_i < p_j implies bin(p_i) <= bin(p_j): the bins
 * are ordered like the predictions. The exact AUC is
 *     A = (1 / (P N)) * sum over (positive i, negative j) of s(i,j),
 *     s = 1 if p_i > p_j, 1/2 if p_i = p_j, 0 if p_i < p_j.
 * The binned AUC uses the same sum with p replaced by the bin index. For a pair in different bins
 * the bin order equals the prediction order, so its term is exact. For a pair in the same bin the
 * binned term is 1/2 while the exact term is 0, 1/2 or 1: an error of at most 1/2. Bin b holds
 * pos_b * neg_b such pairs, so
 *     |A_binned - A| <= (1/2) * sum_b(pos_b * neg_b) / (P N) = auc_err.
 * The bound is tight (all positives above all negatives inside one bin reaches it), and it is
 * small whenever predictions spread over many bins.
 */

/* One example as the window's AUC sort sees it. */
struct scored {
    double p;
    int pos;
};

struct spw_eval {
    size_t window;
    size_t head;   /* next slot to write in the ring */
    size_t filled; /* examples in the ring, <= window */
    double *ring_p;
    double *ring_label;
    struct scored *scratch; /* window entries, for the window AUC sort */

    uint64_t count;
    double ll_sum, ll_comp; /* Neumaier-compensated sums, so billions of adds stay exact */
    double label_sum, label_comp;
    double p_sum, p_comp;
    uint64_t *pos_bins; /* EVAL_BINS each */
    uint64_t *neg_bins;
};

/* Neumaier's compensated summation: *sum + *comp carries the sum of every x added. */
static void ksum_add(double *sum, double *comp, double x)
{
    double t = *sum + x;
    if (fabs(*sum) >= fabs(x))
        *comp += (*sum - t) + x;
    else
        *comp += (x - t) + *sum;
    *sum = t;
}

/* p as every statistic sees it: within [0,1], NaN as 0 (the contract says p is in [0,1]; a
 * broken model must not index outside the bins). */
static double sane_p(double p)
{
    if (!(p >= 0.0))
        return 0.0;
    return p > 1.0 ? 1.0 : p;
}

static double logloss_one(double p, double label)
{
    double q = p < P_CLAMP_LO ? P_CLAMP_LO : (p > P_CLAMP_HI ? P_CLAMP_HI : p);
    /* one log for a 0/1 label (the same value: the other term is a signed zero) */
    if (label == 1.0)
        return -log(q);
    if (label == 0.0)
        return -log(1.0 - q);
    return -(label * log(q) + (1.0 - label) * log(1.0 - q));
}

spw_eval_t *spw_eval_new(size_t window)
{
    if (window == 0 || window > SIZE_MAX / sizeof(struct scored))
        return NULL;
    spw_eval_t *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return NULL;
    ev->window = window;
    ev->ring_p = malloc(window * sizeof(double));
    ev->ring_label = malloc(window * sizeof(double));
    ev->scratch = malloc(window * sizeof(struct scored));
    ev->pos_bins = calloc(EVAL_BINS, sizeof(uint64_t));
    ev->neg_bins = calloc(EVAL_BINS, sizeof(uint64_t));
    if (!ev->ring_p || !ev->ring_label || !ev->scratch || !ev->pos_bins || !ev->neg_bins) {
        spw_eval_destroy(ev);
        return NULL;
    }
    return ev;
}

void spw_eval_destroy(spw_eval_t *ev)
{
    if (!ev)
        return;
    free(ev->ring_p);
    free(ev->ring_label);
    free(ev->scratch);
    free(ev->pos_bins);
    free(ev->neg_bins);
    free(ev);
}

void spw_eval_add(spw_eval_t *ev, double p, double label)
{
    p = sane_p(p);
    ev->ring_p[ev->head] = p;
    ev->ring_label[ev->head] = label;
    ev->head = ev->head + 1 == ev->window ? 0 : ev->head + 1;
    if (ev->filled < ev->window)
        ev->filled++;

    ev->count++;
    ksum_add(&ev->ll_sum, &ev->ll_comp, logloss_one(p, label));
    ksum_add(&ev->label_sum, &ev->label_comp, label);
    ksum_add(&ev->p_sum, &ev->p_comp, p);
    size_t bin = (size_t)(p * EVAL_BINS);
    if (bin >= EVAL_BINS)
        bin = EVAL_BINS - 1;
    if (label >= 0.5)
        ev->pos_bins[bin]++;
    else
        ev->neg_bins[bin]++;
}

static int scored_cmp(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    return (x->p > y->p) - (x->p < y->p);
}

/* Exact AUC of n scored examples; sorts v in place. NaN with one class. */
static double auc_sorted(struct scored *v, size_t n)
{
    qsort(v, n, sizeof(*v), scored_cmp);
    double neg_below = 0.0, pos_total = 0.0, wins = 0.0;
    size_t i = 0;
    while (i < n) {
        double pos_g = 0.0, neg_g = 0.0;
        size_t j = i;
        for (; j < n && v[j].p == v[i].p; j++) {
            if (v[j].pos)
                pos_g += 1.0;
            else
                neg_g += 1.0;
        }
        wins += pos_g * neg_below + 0.5 * pos_g * neg_g;
        neg_below += neg_g;
        pos_total += pos_g;
        i = j;
    }
    if (pos_total == 0.0 || neg_below == 0.0)
        return NAN;
    return wins / (pos_total * neg_below);
}

void spw_eval_window(spw_eval_t *ev, struct spw_eval_summary *out)
{
    size_t n = ev->filled;
    memset(out, 0, sizeof(*out));
    out->count = n;
    if (n == 0) {
        out->logloss = out->auc = out->ctr = out->mean_p = NAN;
        return;
    }
    /* recomputed from the ring each time: no drift from adding and removing running sums */
    double ll = 0.0, lab = 0.0, psum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double p = ev->ring_p[i], label = ev->ring_label[i];
        ll += logloss_one(p, label);
        lab += label;
        psum += p;
        ev->scratch[i] = (struct scored){p, label >= 0.5};
    }
    out->logloss = ll / (double)n;
    out->ctr = lab / (double)n;
    out->mean_p = psum / (double)n;
    out->auc = auc_sorted(ev->scratch, n);
    out->auc_err = 0.0;
}

void spw_eval_cumulative(const spw_eval_t *ev, struct spw_eval_summary *out)
{
    memset(out, 0, sizeof(*out));
    out->count = ev->count;
    if (ev->count == 0) {
        out->logloss = out->auc = out->auc_err = out->ctr = out->mean_p = NAN;
        return;
    }
    double n = (double)ev->count;
    out->logloss = (ev->ll_sum + ev->ll_comp) / n;
    out->ctr = (ev->label_sum + ev->label_comp) / n;
    out->mean_p = (ev->p_sum + ev->p_comp) / n;

    double neg_below = 0.0, pos_total = 0.0, wins = 0.0, same_bin = 0.0;
    for (size_t b = 0; b < EVAL_BINS; b++) {
        double pos_b = (double)ev->pos_bins[b], neg_b = (double)ev->neg_bins[b];
        wins += pos_b * neg_below + 0.5 * pos_b * neg_b;
        same_bin += pos_b * neg_b;
        neg_below += neg_b;
        pos_total += pos_b;
    }
    if (pos_total == 0.0 || neg_below == 0.0) {
        out->auc = out->auc_err = NAN; /* undefined with one class, so is its error */
        return;
    }
    double pairs = pos_total * neg_below;
    out->auc = wins / pairs;
    out->auc_err = 0.5 * same_bin / pairs;
}

double spw_eval_auc_exact(const double *p, const double *label, size_t n)
{
    if (n == 0 || n > SIZE_MAX / sizeof(struct scored))
        return NAN;
    struct scored *v = malloc(n * sizeof(*v));
    if (!v)
        return NAN;
    for (size_t i = 0; i < n; i++)
        v[i] = (struct scored){sane_p(p[i]), label[i] >= 0.5}; /* NaN would break the sort */
    double auc = auc_sorted(v, n);
    free(v);
    return auc;
}
