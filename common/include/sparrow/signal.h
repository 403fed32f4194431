/* SIGTERM/SIGINT handling: a flag that long-running loops observe; SIGUSR1: a request flag that
 * a role may act on (the coordinator: a checkpoint now), so that it never kills a process. */
#ifndef SPARROW_SIGNAL_H
#define SPARROW_SIGNAL_H

#include <stdbool.h>

/* Installs handlers for SIGTERM and SIGINT that set the stop flag and for SIGUSR1 that sets the
 * request flag (and unblocks SIGUSR1, which sparrow launch starts its children with blocked, so
 * that one sent before the handler waits for it), and ignores SIGPIPE.
 * Call once from the main thread before starting other threads. */
void spw_signal_install(void);

/* True once SIGTERM or SIGINT arrived or spw_signal_request_stop() was called. Thread-safe,
 * async-signal-safe. */
bool spw_signal_stop_requested(void);

/* Sets the stop flag as a signal would (tests, fatal errors in one thread). Thread-safe. */
void spw_signal_request_stop(void);

/* True when SIGUSR1 arrived since the last call, clearing the flag. Thread-safe,
 * async-signal-safe. */
bool spw_signal_take_usr1(void);

/* Clears the stop flag (tests only). */
void spw_signal_reset(void);

#endif
