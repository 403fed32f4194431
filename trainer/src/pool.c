/* trainer: the compute threads' pool: persistent workers, handed jobs and synchronised within a
 * job by waits that spin briefly before they sleep. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/time.h"

/*
 * A job is published to each worker that takes part in it (all, or all but worker 0 when the
 * owner runs thread 0: pool_run) by advancing that worker's gen (release) after fn and ctx are
 * written; the worker runs it once when it sees a gen it has not run, then decrements pending;
 * the owner waits for pending to reach 0. A worker that sits a job out is not woken for it.
 * The barrier's generation works the same way: the last of `threads` arrivals resets the count
 * and bumps the generation.
 *
 * Every wait (a worker for its next job, the owner for the job's end, a thread at the barrier)
 * first spins for up to SPIN_NS, pausing and then yielding the core, and only then sleeps on a
 * condition variable. A job's phases and the owner's work between two jobs are typically
 * shorter than waking a sleeping thread costs on a virtual machine (tens to hundreds of
 * microseconds, several times per batch); a thread that finds no one to wait for within
 * SPIN_NS sleeps, so that an idle pool or an oversubscribed machine loses at most that much
 * CPU per wait. The mutex guards only the sleeping: every state change that a sleeper waits for
 * is made, or followed by a broadcast, under it.
 */
#define SPIN_NS      100000u /* 100 µs */
#define SPIN_PAUSES  64u     /* pause instructions before the spin starts yielding */
#define SPIN_CLOCK_N 16u     /* iterations between two reads of the clock */

struct worker {
    _Atomic uint64_t gen; /* the last job published to this worker */
    pthread_cond_t go;    /* owner -> this worker: a new gen, or stop */
    pthread_t tid;
};

struct spw_trn__pool {
    uint32_t threads;
    struct worker *w; /* threads */
    uint32_t started;
    pthread_mutex_t mu;
    pthread_cond_t done; /* workers -> owner: pending reached 0 */
    pthread_cond_t bar;  /* barrier: a new bar_gen */
    uint64_t gen;        /* owner only: the last job's */
    _Atomic uint32_t pending;
    _Atomic bool stop;
    /* the job in flight: written by the owner before the gens' release, read after */
    spw_trn__pool_fn fn;
    void *ctx;
    _Atomic uint32_t bar_arrived;
    _Atomic uint64_t bar_gen;
};

struct worker_arg {
    struct spw_trn__pool *pool;
    uint32_t t;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Whether ready(ctx) became true within SPIN_NS of spinning: SPIN_PAUSES pause instructions,
 * then sched_yield, the clock read every SPIN_CLOCK_N turns. */
static bool spin(bool (*ready)(const void *ctx), const void *ctx)
{
    uint64_t deadline = 0;
    for (uint32_t i = 0;; i++) {
        if (ready(ctx))
            return true;
        if (i < SPIN_PAUSES) {
            cpu_relax();
            continue;
        }
        if (i % SPIN_CLOCK_N == 0) {
            uint64_t now = spw_time_mono_ns();
            if (!deadline)
                deadline = now + SPIN_NS;
            else if (now >= deadline)
                return false;
        }
        sched_yield();
    }
}

struct changed {
    const _Atomic uint64_t *v;
    uint64_t old;
};

static bool has_changed(const void *ctx)
{
    const struct changed *c = ctx;
    return atomic_load_explicit(c->v, memory_order_acquire) != c->old;
}

/* Whether *v differs from old within the spin (acquire). */
static bool spin_until_changed(const _Atomic uint64_t *v, uint64_t old)
{
    return spin(has_changed, &(struct changed){v, old});
}

static bool is_zero(const void *ctx)
{
    return atomic_load_explicit((const _Atomic uint32_t *)ctx, memory_order_acquire) == 0;
}

/* Worker w's next gen after seen, or 0 on stop. */
static uint64_t await_job(struct spw_trn__pool *pool, struct worker *w, uint64_t seen)
{
    if (!spin_until_changed(&w->gen, seen)) {
        pthread_mutex_lock(&pool->mu);
        while (!atomic_load_explicit(&pool->stop, memory_order_relaxed) &&
               atomic_load_explicit(&w->gen, memory_order_acquire) == seen)
            pthread_cond_wait(&w->go, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
    if (atomic_load_explicit(&pool->stop, memory_order_acquire))
        return 0;
    return atomic_load_explicit(&w->gen, memory_order_acquire);
}

static void *worker_main(void *opaque)
{
    struct worker_arg arg = *(struct worker_arg *)opaque;
    free(opaque);
    struct spw_trn__pool *pool = arg.pool;
    uint64_t seen = 0;
    while ((seen = await_job(pool, &pool->w[arg.t], seen)) != 0) {
        pool->fn(pool->ctx, arg.t, pool->threads);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

struct spw_trn__pool *spw_trn__pool_start(uint32_t threads, char *errstr, size_t errstr_size)
{
    struct spw_trn__pool *pool = calloc(1, sizeof(*pool));
    if (!pool || !(pool->w = calloc(threads, sizeof(*pool->w)))) {
        snprintf(errstr, errstr_size, "compute threads: out of memory");
        free(pool);
        return NULL;
    }
    pool->threads = threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->done, NULL);
    pthread_cond_init(&pool->bar, NULL);
    for (uint32_t t = 0; t < threads; t++)
        pthread_cond_init(&pool->w[t].go, NULL);
    for (uint32_t t = 0; t < threads; t++) {
        struct worker_arg *arg = malloc(sizeof(*arg));
        int rc = arg ? 0 : -1;
        if (arg) {
            arg->pool = pool;
            arg->t = t;
            rc = pthread_create(&pool->w[t].tid, NULL, worker_main, arg);
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

static void publish(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx, uint32_t first)
{
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, pool->threads - first, memory_order_relaxed);
    pool->gen++;
    pthread_mutex_lock(&pool->mu);
    for (uint32_t t = first; t < pool->threads; t++) {
        atomic_store_explicit(&pool->w[t].gen, pool->gen, memory_order_release);
        pthread_cond_signal(&pool->w[t].go);
    }
    pthread_mutex_unlock(&pool->mu);
}

void spw_trn__pool_submit(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx)
{
    publish(pool, fn, ctx, 0);
}

void spw_trn__pool_run(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx)
{
    publish(pool, fn, ctx, 1);
    fn(ctx, 0, pool->threads);
    spw_trn__pool_wait(pool);
}

void spw_trn__pool_wait(struct spw_trn__pool *pool)
{
    if (spin(is_zero, (const void *)&pool->pending))
        return;
    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->pending, memory_order_acquire))
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

void spw_trn__pool_barrier(struct spw_trn__pool *pool)
{
    uint64_t g = atomic_load_explicit(&pool->bar_gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->bar_arrived, 1, memory_order_acq_rel) + 1 ==
        pool->threads) {
        atomic_store_explicit(&pool->bar_arrived, 0, memory_order_relaxed);
        pthread_mutex_lock(&pool->mu);
        atomic_store_explicit(&pool->bar_gen, g + 1, memory_order_release);
        pthread_cond_broadcast(&pool->bar);
        pthread_mutex_unlock(&pool->mu);
        return;
    }
    if (spin_until_changed(&pool->bar_gen, g))
        return;
    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->bar_gen, memory_order_acquire) == g)
        pthread_cond_wait(&pool->bar, &pool->mu);
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
    atomic_store_explicit(&pool->stop, true, memory_order_release);
    for (uint32_t t = 0; t < pool->threads; t++)
        pthread_cond_signal(&pool->w[t].go);
    pthread_mutex_unlock(&pool->mu);
    for (uint32_t i = 0; i < pool->started; i++)
        pthread_join(pool->w[i].tid, NULL);
    for (uint32_t t = 0; t < pool->threads; t++)
        pthread_cond_destroy(&pool->w[t].go);
    pthread_cond_destroy(&pool->bar);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    free(pool->w);
    free(pool);
}
