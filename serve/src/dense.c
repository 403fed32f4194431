/* serve: a deep model's dense weights as reference-counted immutable snapshots, swapped whole. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

struct snap {
    struct spw_serve_dense_snap pub;
    atomic_uint refs; /* the owner's (while current) + each reader's */
    float w[];
};

struct spw_serve_dense {
    struct spw_model model;
    size_t params;
    float *init;          /* the seeded initial weights */
    pthread_mutex_t lock; /* guards cur's swap and the readers' acquire (a few instructions) */
    struct snap *cur;     /* NULL before the first refresh */
    atomic_ullong swaps, mixed;
};

spw_serve_dense_t *spw_serve_dense_new(const struct spw_model *model, char *errstr,
                                       size_t errstr_size)
{
    if (!spw_model_is_deep(model)) {
        snprintf(errstr, errstr_size, "dense weights: %s has no network",
                 spw_model_kind_name(model->kind));
        return NULL;
    }
    spw_serve_dense_t *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(errstr, errstr_size, "dense weights: out of memory");
        return NULL;
    }
    d->model = *model;
    d->params = spw_model_dense_params(model);
    d->init = malloc(d->params * sizeof(float));
    if (!d->init || pthread_mutex_init(&d->lock, NULL) != 0) {
        free(d->init);
        free(d);
        snprintf(errstr, errstr_size, "dense weights: out of memory");
        return NULL;
    }
    spw_model_dense_init(model, d->init);
    return d;
}

static void snap_put(struct snap *s)
{
    if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        free(s);
}

void spw_serve_dense_destroy(spw_serve_dense_t *d)
{
    if (!d)
        return;
    snap_put(d->cur);
    pthread_mutex_destroy(&d->lock);
    free(d->init);
    free(d);
}

spw_err_t spw_serve_dense_refresh(spw_serve_dense_t *d, spw_serve_table_t *table)
{
    const uint32_t dim = d->model.dim, blocks = d->model.dense_blocks;
    struct snap *s = malloc(sizeof(*s) + (size_t)blocks * dim * sizeof(float));
    if (!s)
        return SPW_ERR_NOMEM;
    uint32_t version = 0;
    for (uint32_t b = 0; b < blocks; b++) {
        uint32_t v = 0;
        if (spw_serve_table_get(table, spw_dense_block_key(b), s->w + (size_t)b * dim, &v) !=
                SPW_OK ||
            (b > 0 && v != version)) {
            free(s);
            if (b > 0)
                atomic_fetch_add_explicit(&d->mixed, 1, memory_order_relaxed);
            return SPW_ERR_STATE;
        }
        version = v;
    }
    if (d->cur && d->cur->pub.version == version) {
        free(s);
        return SPW_ERR_STATE;
    }
    for (size_t j = 0; j < d->params; j++)
        s->w[j] += d->init[j];
    s->pub.version = version;
    s->pub.w = s->w;
    atomic_init(&s->refs, 1);
    pthread_mutex_lock(&d->lock);
    struct snap *old = d->cur;
    d->cur = s;
    pthread_mutex_unlock(&d->lock);
    snap_put(old);
    atomic_fetch_add_explicit(&d->swaps, 1, memory_order_relaxed);
    return SPW_OK;
}

const struct spw_serve_dense_snap *spw_serve_dense_acquire(spw_serve_dense_t *d)
{
    pthread_mutex_lock(&d->lock);
    struct snap *s = d->cur;
    if (s)
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&d->lock);
    return s ? &s->pub : NULL;
}

void spw_serve_dense_release(spw_serve_dense_t *d, const struct spw_serve_dense_snap *snap)
{
    (void)d;
    if (snap)
        snap_put((struct snap *)((char *)snap - offsetof(struct snap, pub)));
}

uint64_t spw_serve_dense_swaps(const spw_serve_dense_t *d)
{
    return atomic_load_explicit(&d->swaps, memory_order_relaxed);
}

uint64_t spw_serve_dense_mixed(const spw_serve_dense_t *d)
{
    return atomic_load_explicit(&d->mixed, memory_order_relaxed);
}
