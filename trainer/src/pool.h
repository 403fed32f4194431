/* trainer: a persistent pool of compute threads that run one function per phase (not API). */
#ifndef SPARROW_TRAINER_POOL_H
#define SPARROW_TRAINER_POOL_H

#include <stddef.h>
#include <stdint.h>

/*
 * A fixed set of `threads` compute threads, started once by spw_trn__pool_start and parked on a
 * condition variable between jobs, so that a batch costs no thread creation. A job is one call
 * of fn on every thread; the owner starts it (spw_trn__pool_submit) and is free to do other work
 * (the trainer reads its next micro-batch) until spw_trn__pool_wait, which returns after the last
 * thread has returned and so orders everything the job wrote before whatever the owner does next
 * (the mutex is the barrier). Phases inside a job synchronise on the job's own barrier.
 *
 * Ownership: the pool belongs to one owner thread, the only one that may submit, wait and stop.
 * ctx is borrowed from submit until wait returns.
 */
struct spw_trn__pool;

/* fn(ctx, t, threads): the phase's work for thread t (0 .. threads - 1). Must not fail: a phase
 * reports errors through ctx. */
typedef void (*spw_trn__pool_fn)(void *ctx, uint32_t t, uint32_t threads);

/* Starts `threads` workers (1 .. 64). NULL with errstr when a thread cannot be created (those
 * started are stopped) or memory runs out. */
struct spw_trn__pool *spw_trn__pool_start(uint32_t threads, char *errstr, size_t errstr_size);

/* Starts a job: fn(ctx, t, threads) on every thread t. At most one job in flight: the previous
 * one must have been waited for. Owner thread only. */
void spw_trn__pool_submit(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx);

/* Waits for the job in flight (none: returns at once). Owner thread only. */
void spw_trn__pool_wait(struct spw_trn__pool *pool);

/* Threads of the pool. */
uint32_t spw_trn__pool_threads(const struct spw_trn__pool *pool);

/* Waits for a job in flight, stops and joins the workers and frees the pool. NULL is a no-op.
 * Owner thread only. */
void spw_trn__pool_stop(struct spw_trn__pool *pool);

#endif
