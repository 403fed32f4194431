/* trainer: the compute threads' pool: persistent workers, one condition variable per direction. */
#include "pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every field below the mutex is guarded by it. A job is published by bumping gen; each
 * worker runs it once when it sees a gen it has not run, then decrements pending; the owner
 * waits for pending to reach 0. */
struct spw_trn__pool {
    uint32_t threads;
    pthread_t *tids; /* threads workers */
    uint32_t started;
    pthread_mutex_t mu;
    pthread_cond_t go;   /* owner -> workers: a new gen, or stop */
    pthread_cond_t done; /* workers -> owner: pending reached 0 */
    uint64_t gen;
    uint32_t pending;
    bool stop;
    spw_trn__pool_fn fn;
    void *ctx;
};

struct worker_arg {
    struct spw_trn__pool *pool;
    uint32_t t;
};

static void *worker_main(void *opaque)
{
    struct worker_arg arg = *(struct worker_arg *)opaque;
    free(opaque);
    struct spw_trn__pool *pool = arg.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->gen == seen)
            pthread_cond_wait(&pool->go, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->gen;
        spw_trn__pool_fn fn = pool->fn;
        void *ctx = pool->ctx;
        pthread_mutex_unlock(&pool->mu);
        fn(ctx, arg.t, pool->threads);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

struct spw_trn__pool *spw_trn__pool_start(uint32_t threads, char *errstr, size_t errstr_size)
{
    struct spw_trn__pool *pool = calloc(1, sizeof(*pool));
    if (!pool || !(pool->tids = calloc(threads, sizeof(pthread_t)))) {
        snprintf(errstr, errstr_size, "compute threads: out of memory");
        free(pool);
        return NULL;
    }
    pool->threads = threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->go, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (uint32_t t = 0; t < threads; t++) {
        struct worker_arg *arg = malloc(sizeof(*arg));
        int rc = arg ? 0 : -1;
        if (arg) {
            arg->pool = pool;
            arg->t = t;
            rc = pthread_create(&pool->tids[t], NULL, worker_main, arg);
        }
        if (rc != 0) {
            free(arg);
            snprintf(errstr, errstr_size, "compute threads: cannot start thread %u of %u: %s", t,
                     threads, rc > 0 ? strerror(rc) : "out of memory");
            spw_trn__pool_stop(pool);
            return NULL;
        }
        pool->started++;
    }
    return pool;
}

void spw_trn__pool_submit(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx)
{
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->pending = pool->threads;
    pool->gen++;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->mu);
}

void spw_trn__pool_wait(struct spw_trn__pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    while (pool->pending)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

uint32_t spw_trn__pool_threads(const struct spw_trn__pool *pool)
{
    return pool->threads;
}

void spw_trn__pool_stop(struct spw_trn__pool *pool)
{
    if (!pool)
        return;
    spw_trn__pool_wait(pool);
    pthread_mutex_lock(&pool->mu);
    pool->stop = true;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->mu);
    for (uint32_t i = 0; i < pool->started; i++)
        pthread_join(pool->tids[i], NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->go);
    pthread_mutex_destroy(&pool->mu);
    free(pool->tids);
    free(pool);
}
