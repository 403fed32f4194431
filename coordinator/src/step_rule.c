/* The rules of the two-phase modes (sync, group:G), pure: which trainers a step waits for
 * (backup workers), how trainers are put in groups, and when a straggler leaves or rejoins the
 * barrier (elastic). The server (server.c) applies them. */
#include <math.h>
#include <stdlib.h>

#include "sparrow/coordinator.h"

uint32_t spw_coord_step_need(uint32_t in_barrier, uint32_t backup)
{
    if (in_barrier == 0)
        return 0;
    uint32_t b = backup < in_barrier ? backup : in_barrier - 1;
    return in_barrier - b;
}

bool spw_coord_step_ready(const struct spw_coord_step_member *members, size_t n, uint64_t step,
                          uint32_t backup)
{
    uint32_t in = 0, ready = 0;
    for (size_t i = 0; i < n; i++) {
        if (!members[i].in_barrier)
            continue;
        in++;
        if (members[i].clock >= step)
            ready++;
    }
    return in > 0 && ready >= spw_coord_step_need(in, backup);
}

struct rank {
    size_t index;
    double key;
};

static int by_key(const void *a, const void *b)
{
    const struct rank *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

spw_err_t spw_coord_groups_assign(const double *step_ms, size_t n, uint32_t size,
                                  uint32_t *group_out)
{
    if (size == 0)
        return SPW_ERR_INVALID;
    struct rank *r = malloc((n ? n : 1) * sizeof(*r));
    if (!r)
        return SPW_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        r[i].index = i;
        /* by order: every key equal; by speed: the unmeasured after the measured, in order */
        r[i].key = !step_ms ? 0.0 : step_ms[i] > 0 && isfinite(step_ms[i]) ? step_ms[i] : INFINITY;
    }
    qsort(r, n, sizeof(*r), by_key);
    for (size_t k = 0; k < n; k++)
        group_out[r[k].index] = (uint32_t)(k / size);
    free(r);
    return SPW_OK;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double spw_coord_median(double *values, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(values, n, sizeof(*values), by_double);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* Weight of the newest step time in a trainer's running mean. */
#define ELASTIC_EWMA 0.3

enum spw_coord_elastic_move spw_coord_elastic_observe(struct spw_coord_elastic *e, double step_ms,
                                                      double others_median_ms, double factor,
                                                      uint32_t steps, bool may_leave)
{
    e->ewma_ms = e->measured ? (1.0 - ELASTIC_EWMA) * e->ewma_ms + ELASTIC_EWMA * step_ms : step_ms;
    e->measured = true;
    if (factor <= 0 || others_median_ms <= 0)
        return SPW_COORD_ELASTIC_STAY;
    if (!e->out) {
        e->fast_run = 0;
        e->slow_run = e->ewma_ms > factor * others_median_ms ? e->slow_run + 1 : 0;
        if (e->slow_run >= steps && may_leave) {
            e->out = true;
            e->slow_run = 0;
            return SPW_COORD_ELASTIC_LEAVE;
        }
        return SPW_COORD_ELASTIC_STAY;
    }
    /* rejoins below half-way between the others and the leaving threshold (hysteresis) */
    e->slow_run = 0;
    e->fast_run = e->ewma_ms <= 0.5 * (1.0 + factor) * others_median_ms ? e->fast_run + 1 : 0;
    if (e->fast_run >= steps) {
        e->out = false;
        e->fast_run = 0;
        return SPW_COORD_ELASTIC_REJOIN;
    }
    return SPW_COORD_ELASTIC_STAY;
}
