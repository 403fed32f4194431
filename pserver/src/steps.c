/* The shard's pending table of two-phase steps (docs/ARCHITECTURE.md §3): pushes tagged with a
 * step wait here, per contributor, until the coordinator commits the step; the commit sums them
 * per row. */
#include <stdlib.h>
#include <string.h>

#include "ps_int.h"
#include "sparrow/hash.h"

/* One tagged push as it arrived; one allocation (keys, versions, grads follow the header). */
struct contrib {
    uint64_t step;
    uint32_t trainer_id;
    uint32_t examples;
    int64_t max_event_ms;
    size_t n;
    uint64_t *keys;
    uint32_t *versions;
    float *grads; /* n × dim */
};

/* Owned by the shard's thread. */
struct spw_ps__steps {
    uint32_t dim;
    size_t max_bytes, bytes;
    uint64_t committed; /* highest step committed (0: none) */
    struct contrib **c;
    size_t n, cap;
    /* aggregation scratch, reused by every take */
    uint64_t *slot_key; /* open addressing (slot_idx EMPTY_IDX: free) */
    uint32_t *slot_idx;
    size_t slots; /* allocated */
    size_t mask;  /* of the part in use by the current take (cleared for it) */
    uint64_t *keys;
    uint32_t *versions;
    double *sums;
    float *grads;
    size_t rows_cap;
};

#define EMPTY_IDX UINT32_MAX

spw_ps__steps_t *spw_ps__steps_new(uint32_t dim, size_t max_bytes)
{
    spw_ps__steps_t *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->dim = dim;
    st->max_bytes = max_bytes;
    return st;
}

static size_t contrib_bytes(uint32_t dim, size_t n)
{
    return sizeof(struct contrib) + n * (8 + 4 + (size_t)dim * sizeof(float));
}

static void drop_at(spw_ps__steps_t *st, size_t i)
{
    st->bytes -= contrib_bytes(st->dim, st->c[i]->n);
    free(st->c[i]);
    st->c[i] = st->c[--st->n];
}

void spw_ps__steps_clear(spw_ps__steps_t *st)
{
    while (st->n > 0)
        drop_at(st, st->n - 1);
    st->committed = 0;
}

void spw_ps__steps_destroy(spw_ps__steps_t *st)
{
    if (!st)
        return;
    spw_ps__steps_clear(st);
    free(st->c);
    free(st->slot_key);
    free(st->slot_idx);
    free(st->keys);
    free(st->versions);
    free(st->sums);
    free(st->grads);
    free(st);
}

uint64_t spw_ps__steps_committed(const spw_ps__steps_t *st)
{
    return st->committed;
}

size_t spw_ps__steps_pending(const spw_ps__steps_t *st)
{
    return st->n;
}

spw_err_t spw_ps__steps_add(spw_ps__steps_t *st, const struct spw_ps__step_push *p)
{
    size_t bytes = contrib_bytes(st->dim, p->n);
    if (st->bytes + bytes > st->max_bytes)
        return SPW_ERR_TOO_BIG;
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        struct contrib **c = realloc(st->c, cap * sizeof(*c));
        if (!c)
            return SPW_ERR_NOMEM;
        st->c = c;
        st->cap = cap;
    }
    struct contrib *c = malloc(bytes);
    if (!c)
        return SPW_ERR_NOMEM;
    c->step = p->step;
    c->trainer_id = p->trainer_id;
    c->examples = p->examples;
    c->max_event_ms = p->max_event_ms;
    c->n = p->n;
    c->keys = (uint64_t *)(c + 1);
    c->grads = (float *)(c->keys + p->n);
    c->versions = (uint32_t *)(c->grads + p->n * st->dim);
    memcpy(c->keys, p->keys, p->n * sizeof(uint64_t));
    memcpy(c->grads, p->grads, p->n * st->dim * sizeof(float));
    if (p->versions)
        memcpy(c->versions, p->versions, p->n * sizeof(uint32_t));
    else
        memset(c->versions, 0, p->n * sizeof(uint32_t));
    st->c[st->n++] = c;
    st->bytes += bytes;
    return SPW_OK;
}

static bool listed(const uint32_t *ids, size_t n_ids, uint32_t id)
{
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static spw_err_t grow_scratch(spw_ps__steps_t *st, size_t rows)
{
    size_t slots = 16;
    while (slots < rows * 2)
        slots *= 2;
    if (slots > st->slots) {
        uint64_t *k = realloc(st->slot_key, slots * sizeof(*k));
        if (!k)
            return SPW_ERR_NOMEM;
        st->slot_key = k;
        uint32_t *x = realloc(st->slot_idx, slots * sizeof(*x));
        if (!x)
            return SPW_ERR_NOMEM;
        st->slot_idx = x;
        st->slots = slots;
    }
    if (rows > st->rows_cap) {
        uint64_t *k = realloc(st->keys, rows * sizeof(*k));
        if (!k)
            return SPW_ERR_NOMEM;
        st->keys = k;
        uint32_t *v = realloc(st->versions, rows * sizeof(*v));
        if (!v)
            return SPW_ERR_NOMEM;
        st->versions = v;
        double *s = realloc(st->sums, rows * st->dim * sizeof(*s));
        if (!s)
            return SPW_ERR_NOMEM;
        st->sums = s;
        float *g = realloc(st->grads, rows * st->dim * sizeof(*g));
        if (!g)
            return SPW_ERR_NOMEM;
        st->grads = g;
        st->rows_cap = rows;
    }
    /* only the part this take uses is cleared and probed: a smaller take after a larger one
     * must not meet the larger one's entries */
    for (size_t i = 0; i < slots; i++)
        st->slot_idx[i] = EMPTY_IDX;
    st->mask = slots - 1;
    return SPW_OK;
}

/* The row index of key in the aggregation, added (zeroed) when new. */
static uint32_t row_of(spw_ps__steps_t *st, uint64_t key, uint32_t version, size_t *rows)
{
    size_t mask = st->mask;
    size_t h = (size_t)spw_hash_mix64(key) & mask;
    while (st->slot_idx[h] != EMPTY_IDX) {
        if (st->slot_key[h] == key) {
            uint32_t r = st->slot_idx[h];
            if (version < st->versions[r])
                st->versions[r] = version;
            return r;
        }
        h = (h + 1) & mask;
    }
    uint32_t r = (uint32_t)(*rows)++;
    st->slot_key[h] = key;
    st->slot_idx[h] = r;
    st->keys[r] = key;
    st->versions[r] = version;
    memset(st->sums + (size_t)r * st->dim, 0, st->dim * sizeof(double));
    return r;
}

spw_err_t spw_ps__steps_take(spw_ps__steps_t *st, const struct spw_ps__step_commit *commit,
                             struct spw_ps__step_sum *out)
{
    const uint32_t dim = st->dim;
    memset(out, 0, sizeof(*out));
    out->max_event_ms = 0;
    size_t rows_max = 0;
    uint64_t examples = 0;
    for (size_t i = 0; i < st->n; i++) {
        const struct contrib *c = st->c[i];
        if (c->step == commit->step &&
            listed(commit->trainer_ids, commit->n_trainers, c->trainer_id)) {
            rows_max += c->n;
            examples += c->examples;
        }
    }
    spw_err_t err = grow_scratch(st, rows_max ? rows_max : 1);
    if (err)
        return err;
    /* the step's weight: every listed trainer's examples, told by the coordinator (a trainer
     * whose batch had no key here still counts); what arrived here when it did not say */
    double total = commit->examples ? (double)commit->examples : (double)examples;
    size_t rows = 0;
    for (size_t i = 0; i < st->n;) {
        struct contrib *c = st->c[i];
        if (c->step > commit->step) {
            i++;
            continue;
        }
        if (c->step < commit->step ||
            !listed(commit->trainer_ids, commit->n_trainers, c->trainer_id)) {
            out->discarded++;
            drop_at(st, i);
            continue;
        }
        double w = (double)c->examples;
        for (size_t k = 0; k < c->n; k++) {
            uint32_t r = row_of(st, c->keys[k], c->versions[k], &rows);
            double *s = st->sums + (size_t)r * dim;
            const float *g = c->grads + k * dim;
            /* the counter row (pserver.debug.counter_key) is a plain sum of its pushes */
            double wk = commit->counter_key && c->keys[k] == commit->counter_key ? 1.0 : w;
            for (uint32_t d = 0; d < dim; d++)
                s[d] += wk * (double)g[d];
        }
        if (c->max_event_ms > out->max_event_ms)
            out->max_event_ms = c->max_event_ms;
        out->contributions++;
        drop_at(st, i);
    }
    for (size_t r = 0; r < rows; r++) {
        bool counter = commit->counter_key && st->keys[r] == commit->counter_key;
        double div = counter || total <= 0 ? 1.0 : total;
        for (uint32_t d = 0; d < dim; d++)
            st->grads[r * dim + d] = (float)(st->sums[r * dim + d] / div);
    }
    if (commit->step > st->committed)
        st->committed = commit->step;
    out->n = rows;
    out->keys = st->keys;
    out->versions = st->versions;
    out->grads = st->grads;
    return SPW_OK;
}
