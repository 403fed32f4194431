/* trainer: a persistent pool of compute threads that run one function per phase (not API). */
#ifndef SPARROW_TRAINER_POOL_H
#define SPARROW_TRAINER_POOL_H

#include <stddef.h>
#include <stdint.h>

/*
 * A fixed set of `threads` compute threads: the caller of spw_trn__pool_run is thread 0, and
 * threads - 1 workers are started once by spw_trn__pool_start and parked on a condition variable
 * between phases, so that a batch costs no thread creation. One phase is one call of fn on every
 * thread; spw_trn__pool_run returns after the last of them has returned, which orders everything
 * the phase wrote before whatever the caller does next (the mutex is the barrier).
 *
 * Ownership: the pool belongs to one owner thread, the only one that may call spw_trn__pool_run
 * and spw_trn__pool_stop. ctx is borrowed for the duration of one phase.
 */
struct spw_trn__pool;

/* fn(ctx, t, threads): the phase's work for thread t (0 .. threads - 1). Must not fail: a phase
 * reports errors through ctx. */
typedef void (*spw_trn__pool_fn)(void *ctx, uint32_t t, uint32_t threads);

/* Starts threads - 1 workers (threads in 1 .. 64; 1 starts none). NULL with errstr when a thread
 * cannot be created (those started are stopped) or memory runs out. */
struct spw_trn__pool *spw_trn__pool_start(uint32_t threads, char *errstr, size_t errstr_size);

/* Runs one phase: fn(ctx, t, threads) on every thread, t = 0 on the caller. Returns when all
 * have returned. Owner thread only. */
void spw_trn__pool_run(struct spw_trn__pool *pool, spw_trn__pool_fn fn, void *ctx);

/* Threads of the pool (the caller included). */
uint32_t spw_trn__pool_threads(const struct spw_trn__pool *pool);

/* Stops and joins the workers and frees the pool. NULL is a no-op. Owner thread only, never
 * during a phase. */
void spw_trn__pool_stop(struct spw_trn__pool *pool);

#endif
