/* trainer: a persistent pool of compute threads that run one function per phase (not API). */
#ifndef SPARROW_TRAINER_POOL_H
#define SPARROW_TRAINER_POOL_H

#include <stddef.h>
#include <stdint.h>

/*
 * A fixed set of `threads` compute threads, started once by spw_trn__pool_start and parked
 * between jobs, so that a batch costs no thread creation. A job is one call of fn on every
 * thread; the owner starts it (spw_trn__pool_submit) and is free to do other work (the trainer
 * reads its next micro-batch) until spw_trn__pool_wait, which returns after the last thread has
 * returned and so orders everything the job wrote before whatever the owner does next. Or the
 * owner takes thread 0's part itself (spw_trn__pool_run). Phases inside a job synchronise on
 * spw_trn__pool_barrier. Every wait spins for up to 100 µs before it sleeps (pool.c).
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

/* Runs a job with the owner as thread 0: fn(ctx, 0, threads) here, fn(ctx, t, threads) on
 * worker t for t >= 1 (worker 0 sits it out), and returns when every part has returned. Where
 * the owner would only wait, this saves waking worker 0 and then the owner for every job. At
 * most one job in flight, as for submit. Owner thread only. */
void spw_trn__pool_run(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx);

/* Waits for the job in flight (none: returns at once). Owner thread only. */
void spw_trn__pool_wait(struct spw_trn__pool *pool);

/* The job's barrier: returns once all `threads` parts of the job in flight have called it, and
 * orders what each wrote before it before what any does after it. Called from within fn, by
 * every part the same number of times. */
void spw_trn__pool_barrier(struct spw_trn__pool *pool);

/* Threads of the pool. */
uint32_t spw_trn__pool_threads(const struct spw_trn__pool *pool);

/* Waits for a job in flight, stops and joins the workers and frees the pool. NULL is a no-op.
 * Owner thread only. */
void spw_trn__pool_stop(struct spw_trn__pool *pool);

#endif
