/* trainer: progressive validation — each batch scored before it is trained on. */
#include "trainer_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct spw_pv {
    spw_eval_t *model;  /* every scored example */
    spw_eval_t *oracle; /* oracle_p of the examples that carry it */
    uint64_t examples, oracle_examples;
};

spw_pv_t *spw_pv_new(size_t window, char *errstr, size_t errstr_size)
{
    spw_pv_t *pv = calloc(1, sizeof(*pv));
    if (!pv || window < 1)
        goto out_free_pv;
    pv->model = spw_eval_new(window);
    pv->oracle = spw_eval_new(window);
    if (!pv->model || !pv->oracle)
        goto out_free_pv;
    return pv;

out_free_pv:
    spw_pv_destroy(pv);
    snprintf(errstr, errstr_size, window < 1 ? "pv: window must be >= 1" : "pv: out of memory");
    return NULL;
}

void spw_pv_destroy(spw_pv_t *pv)
{
    if (!pv)
        return;
    spw_eval_destroy(pv->model);
    spw_eval_destroy(pv->oracle);
    free(pv);
}

void spw_pv_add(spw_pv_t *pv, const float *preds, const float *labels, const float *oracle,
                size_t n)
{
    for (size_t i = 0; i < n; i++) {
        spw_eval_add(pv->model, preds[i], labels[i]);
        if (oracle && !isnan(oracle[i])) {
            spw_eval_add(pv->oracle, oracle[i], labels[i]);
            pv->oracle_examples++;
        }
    }
    pv->examples += n;
}

/* Logloss of the best constant predictor (the mean label c): the binary entropy of c. */
static double entropy(double c)
{
    if (!(c > 0.0 && c < 1.0))
        return 0.0;
    return -(c * log(c) + (1.0 - c) * log(1.0 - c));
}

void spw_pv_report(spw_pv_t *pv, struct spw_pv_report *out)
{
    out->examples = pv->examples;
    out->oracle_examples = pv->oracle_examples;
    spw_eval_window(pv->model, &out->window);
    spw_eval_cumulative(pv->model, &out->cumulative);
    spw_eval_window(pv->oracle, &out->oracle_window);
    spw_eval_cumulative(pv->oracle, &out->oracle_cumulative);
    out->const_window = entropy(out->window.ctr);
    out->const_cumulative = entropy(out->cumulative.ctr);
}
