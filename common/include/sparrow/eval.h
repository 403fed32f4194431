/* Streaming evaluation: logloss and AUC over a sliding window (exact) and cumulatively (binned,
 * with a reported error bound). Used by trainers, the generator and benchmarks. */
#ifndef SPARROW_EVAL_H
#define SPARROW_EVAL_H

#include <stddef.h>
#include <stdint.h>

/* Not thread-safe: one owner adds and reads. */
typedef struct spw_eval spw_eval_t;

struct spw_eval_summary {
    uint64_t count; /* examples in scope */
    double logloss; /* mean binary cross-entropy (predictions clamped to [1e-7, 1-1e-7]) */
    double auc;     /* ROC AUC; NaN when only one class is present */
    double auc_err; /* bound on |auc - exact auc| (0 for the exact window AUC) */
    double ctr;     /* mean label */
    double mean_p;  /* mean prediction */
};

/* Creates an evaluator with a sliding window of the last `window` examples (>= 1). Returns NULL
 * when out of memory. */
spw_eval_t *spw_eval_new(size_t window);

/* Frees it. NULL is a no-op. */
void spw_eval_destroy(spw_eval_t *ev);

/* Adds one scored example: prediction p in [0,1], label in [0,1] (a label >= 0.5 is positive for
 * AUC; logloss uses the label as given). */
void spw_eval_add(spw_eval_t *ev, double p, double label);

/* Summary of the last min(window, total) examples; AUC exact (sort-based, ties counted half). */
void spw_eval_window(spw_eval_t *ev, struct spw_eval_summary *out);

/* Summary of every example since creation; AUC from 2^16 prediction bins with ties inside a bin
 * counted half: auc_err = 0.5 * sum_b(pos_b * neg_b) / (P * N) bounds the error. */
void spw_eval_cumulative(const spw_eval_t *ev, struct spw_eval_summary *out);

/* Exact AUC of n (p, label) pairs; reorders nothing (sorts a private copy). NaN with one class. */
double spw_eval_auc_exact(const double *p, const double *label, size_t n);

#endif
