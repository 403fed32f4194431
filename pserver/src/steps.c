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

/* A trainer's committed watermark: the last step its unit committed. */
struct watermark {
    uint32_t trainer_id;
    bool apply_late;
    uint64_t step;
    uint64_t examples; /* that step's examples (the weight of a late push applied) */
};

/* Owned by the shard's thread. */
struct spw_ps__steps {
    uint32_t dim;
    size_t max_bytes, bytes;
    uint64_t committed;   /* of commits without member ids: every trainer's (0: none) */
    struct watermark *wm; /* per trainer, of commits naming their unit */
    size_t n_wm, cap_wm;
    struct contrib **c;
    size_t n, cap;
    /* the last take's late contributions (apply_late), freed by the next take or a clear */
    struct contrib **late_c;
    struct spw_ps__step_late *late;
    size_t n_late, cap_late;
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

static void free_late(spw_ps__steps_t *st)
{
    for (size_t i = 0; i < st->n_late; i++)
        free(st->late_c[i]);
    st->n_late = 0;
}

void spw_ps__steps_clear(spw_ps__steps_t *st)
{
    while (st->n > 0)
        drop_at(st, st->n - 1);
    free_late(st);
    st->committed = 0;
    st->n_wm = 0;
}

void spw_ps__steps_destroy(spw_ps__steps_t *st)
{
    if (!st)
        return;
    spw_ps__steps_clear(st);
    free(st->c);
    free(st->wm);
    free(st->late_c);
    free(st->late);
    free(st->slot_key);
    free(st->slot_idx);
    free(st->keys);
    free(st->versions);
    free(st->sums);
    free(st->grads);
    free(st);
}

static struct watermark *find_wm(const spw_ps__steps_t *st, uint32_t trainer_id)
{
    for (size_t i = 0; i < st->n_wm; i++)
        if (st->wm[i].trainer_id == trainer_id)
            return &st->wm[i];
    return NULL;
}

static spw_err_t set_wm(spw_ps__steps_t *st, uint32_t trainer_id, uint64_t step, uint64_t examples,
                        bool apply_late)
{
    struct watermark *w = find_wm(st, trainer_id);
    if (!w) {
        if (st->n_wm == st->cap_wm) {
            size_t cap = st->cap_wm ? st->cap_wm * 2 : 16;
            struct watermark *x = realloc(st->wm, cap * sizeof(*x));
            if (!x)
                return SPW_ERR_NOMEM;
            st->wm = x;
            st->cap_wm = cap;
        }
        w = &st->wm[st->n_wm++];
        w->trainer_id = trainer_id;
        w->step = 0;
    }
    if (step >= w->step) {
        w->step = step;
        w->examples = examples;
        w->apply_late = apply_late;
    }
    return SPW_OK;
}

/* A late contribution's weight: one contributor more of a step of step_examples examples, its
 * share of the step's examples with it. */
static double late_weight(uint64_t examples, double step_examples)
{
    return (double)examples / (step_examples + (double)examples);
}

struct spw_ps__step_lateness spw_ps__steps_lateness(const spw_ps__steps_t *st, uint32_t trainer_id,
                                                    uint64_t step, uint64_t examples)
{
    struct spw_ps__step_lateness l = {.committed = st->committed, .weight = 1.0};
    const struct watermark *w = find_wm(st, trainer_id);
    if (w && w->step > l.committed)
        l.committed = w->step;
    l.late = step <= l.committed;
    if (l.late && w && w->apply_late && step <= w->step && examples > 0) {
        l.apply = true;
        l.weight = late_weight(examples, (double)w->examples);
    }
    return l;
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

static bool is_member(const struct spw_ps__step_commit *commit, uint32_t id)
{
    return commit->n_members == 0 || listed(commit->member_ids, commit->n_members, id) ||
           listed(commit->trainer_ids, commit->n_trainers, id);
}

/* Keeps c (taken out of the table; c->examples > 0) as a late contribution, weighted as one
 * contributor more of a step of `total` examples; its counter row stays a plain sum. */
static spw_err_t keep_late(spw_ps__steps_t *st, struct contrib *c, double total,
                           uint64_t counter_key)
{
    if (st->n_late == st->cap_late) {
        size_t cap = st->cap_late ? st->cap_late * 2 : 16;
        struct contrib **x = realloc(st->late_c, cap * sizeof(*x));
        if (!x)
            return SPW_ERR_NOMEM;
        st->late_c = x;
        struct spw_ps__step_late *l = realloc(st->late, cap * sizeof(*l));
        if (!l)
            return SPW_ERR_NOMEM;
        st->late = l;
        st->cap_late = cap;
    }
    double w = late_weight(c->examples, total);
    for (size_t k = 0; k < c->n; k++) {
        if (counter_key && c->keys[k] == counter_key)
            continue;
        float *g = c->grads + k * st->dim;
        for (uint32_t d = 0; d < st->dim; d++)
            g[d] = (float)(w * (double)g[d]);
    }
    st->late_c[st->n_late] = c;
    st->late[st->n_late] = (struct spw_ps__step_late){.n = c->n,
                                                      .keys = c->keys,
                                                      .grads = c->grads,
                                                      .versions = c->versions,
                                                      .max_event_ms = c->max_event_ms};
    st->n_late++;
    return SPW_OK;
}

spw_err_t spw_ps__steps_take(spw_ps__steps_t *st, const struct spw_ps__step_commit *commit,
                             struct spw_ps__step_sum *out)
{
    const uint32_t dim = st->dim;
    memset(out, 0, sizeof(*out));
    free_late(st);
    size_t rows_max = 0;
    uint64_t examples = 0;
    for (size_t i = 0; i < st->n; i++) {
        const struct contrib *c = st->c[i];
        if (c->step > commit->step || !is_member(commit, c->trainer_id))
            continue;
        rows_max += c->n; /* a discarded one may bring its counter row */
        if (c->step == commit->step &&
            listed(commit->trainer_ids, commit->n_trainers, c->trainer_id))
            examples += c->examples;
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
        if (c->step > commit->step || !is_member(commit, c->trainer_id)) {
            i++;
            continue;
        }
        bool summed = c->step == commit->step &&
                      listed(commit->trainer_ids, commit->n_trainers, c->trainer_id);
        /* a late contribution without examples has no weight: discarded like a dropped one */
        if (!summed && commit->apply_late && c->examples > 0) {
            /* taken out of the table without freeing: the late list owns it now */
            st->bytes -= contrib_bytes(dim, c->n);
            st->c[i] = st->c[--st->n];
            if ((err = keep_late(st, c, total, commit->counter_key))) {
                free(c);
                return err;
            }
            continue;
        }
        double w = (double)c->examples;
        for (size_t k = 0; k < c->n; k++) {
            /* the counter row (pserver.debug.counter_key) is a plain sum of its pushes, also
             * of a discarded one: it counts the examples consumed, not the gradients applied */
            bool counter = commit->counter_key && c->keys[k] == commit->counter_key;
            if (!summed && !counter)
                continue;
            uint32_t r = row_of(st, c->keys[k], c->versions[k], &rows);
            double *s = st->sums + (size_t)r * dim;
            const float *g = c->grads + k * dim;
            double wk = counter ? 1.0 : w;
            for (uint32_t d = 0; d < dim; d++)
                s[d] += wk * (double)g[d];
        }
        if (summed) {
            if (c->max_event_ms > out->max_event_ms)
                out->max_event_ms = c->max_event_ms;
            out->contributions++;
        } else {
            out->discarded++;
        }
        drop_at(st, i);
    }
    for (size_t r = 0; r < rows; r++) {
        bool counter = commit->counter_key && st->keys[r] == commit->counter_key;
        double div = counter || total <= 0 ? 1.0 : total;
        for (uint32_t d = 0; d < dim; d++)
            st->grads[r * dim + d] = (float)(st->sums[r * dim + d] / div);
    }
    uint64_t step_examples = (uint64_t)total;
    if (commit->n_members == 0) {
        if (commit->step > st->committed)
            st->committed = commit->step;
    } else {
        for (size_t i = 0; i < commit->n_members; i++)
            if ((err = set_wm(st, commit->member_ids[i], commit->step, step_examples,
                              commit->apply_late)))
                return err;
    }
    for (size_t i = 0; i < commit->n_trainers; i++)
        if ((err = set_wm(st, commit->trainer_ids[i], commit->step, step_examples,
                          commit->apply_late)))
            return err;
    out->n = rows;
    out->keys = st->keys;
    out->versions = st->versions;
    out->grads = st->grads;
    out->late = st->late;
    out->n_late = st->n_late;
    return SPW_OK;
}
