/* Local launcher: runs Sparrow roles as child processes of one run directory (demo, tests,
 * benches). */
#ifndef SPARROW_LAUNCH_H
#define SPARROW_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sparrow/err.h"

/*
 * A launcher owns a run directory and up to SPW_LAUNCH_MAX_PROCS named child processes, each an
 * exec of the `sparrow` binary (by default /proc/self/exe, resolved once at creation) with the
 * given arguments. A child's stdout and stderr are appended to <run_dir>/<name>.log, its stdin is
 * /dev/null, it runs in its own process group and receives SIGTERM if the launcher's process dies.
 * A handle belongs to one thread.
 */
typedef struct spw_launch spw_launch_t;

/* Sized for the largest `sparrow launch` pipeline (64 trainers, 16 shards and 4 more, see
 * sparrow/pipeline.h) with room for other callers. */
#define SPW_LAUNCH_MAX_PROCS 128
#define SPW_LAUNCH_MAX_ARGS  64
#define SPW_LAUNCH_NAME_MAX  64

/* Creates run_dir (and its parents) when missing. exe: the binary to exec, NULL for this process's
 * own executable. NULL with errstr on failure. */
spw_launch_t *spw_launch_new(const char *run_dir, const char *exe, char *errstr,
                             size_t errstr_size);

/* Stops every running child (spw_launch_stop_all with grace_ms 5000) and frees. NULL: no-op. */
void spw_launch_destroy(spw_launch_t *launch);

/* The run directory (owned by launch). */
const char *spw_launch_dir(const spw_launch_t *launch);

/*
 * Starts child `name` (letters, digits, '-', '_', '.'; unique) with args (NULL-terminated, the
 * arguments after the executable, copied; at most SPW_LAUNCH_MAX_ARGS). Returns its index (>= 0)
 * or -1 with errstr (bad name, too many, fork/log failure).
 */
int spw_launch_start(spw_launch_t *launch, const char *name, const char *const *args, char *errstr,
                     size_t errstr_size);

/* How many children were started (indexes 0 .. count-1). */
int spw_launch_count(const spw_launch_t *launch);

/* Index of the child called name, -1 when none. */
int spw_launch_find(const spw_launch_t *launch, const char *name);

/* Name, pid (0 when not running) and log path of child idx (strings owned by launch). */
const char *spw_launch_name(const spw_launch_t *launch, int idx);
pid_t spw_launch_pid(const spw_launch_t *launch, int idx);
const char *spw_launch_log(const spw_launch_t *launch, int idx);

/* The wait status of child idx's last exit (0 before any). */
int spw_launch_status(const spw_launch_t *launch, int idx);

/* Reaps exited children without blocking. true when child idx is still running. */
bool spw_launch_alive(spw_launch_t *launch, int idx);

/*
 * Reaps without blocking and returns the index of a child that exited without being stopped or
 * killed through the launcher (an unexpected exit), -1 when none; *status receives its wait
 * status. Each unexpected exit is reported once.
 */
int spw_launch_check(spw_launch_t *launch, int *status);

/* Sends sig (e.g. SIGKILL) to child idx and, for SIGKILL, waits for it. The exit counts as
 * expected (SIGSTOP and SIGCONT only pause and resume it). SPW_ERR_STATE when it is not
 * running. */
spw_err_t spw_launch_kill(spw_launch_t *launch, int idx, int sig);

/* Restarts child idx with its original arguments (stopping it first with SIGKILL if running). */
spw_err_t spw_launch_restart(spw_launch_t *launch, int idx, char *errstr, size_t errstr_size);

/*
 * Clean stop of child idx: SIGTERM, then SIGKILL when it has not exited after grace_ms. *status
 * (may be NULL) receives the wait status. SPW_OK also when it had already exited; SPW_ERR_TIMEOUT
 * when SIGKILL was needed.
 */
spw_err_t spw_launch_stop(spw_launch_t *launch, int idx, uint64_t grace_ms, int *status);

/*
 * Clean stop of the n children idx[0..n) together: SIGTERM to all, then SIGKILL to those still
 * running after grace_ms (one deadline for the group). status[i] (status may be NULL) receives
 * child idx[i]'s wait status. SPW_ERR_TIMEOUT when any needed SIGKILL. Members of one group
 * (trainers of one Kafka consumer group) stop together this way instead of each one's departure
 * rebalancing the others in turn.
 */
spw_err_t spw_launch_stop_group(spw_launch_t *launch, const int *idx, size_t n, uint64_t grace_ms,
                                int *status);

/* Stops every running child, the last started first, each with spw_launch_stop. */
void spw_launch_stop_all(spw_launch_t *launch, uint64_t grace_ms);

/* Waits up to timeout_ms for path to exist and be non-empty (a port file). SPW_ERR_TIMEOUT. */
spw_err_t spw_launch_wait_file(const char *path, uint64_t timeout_ms);

/* A free TCP port on 127.0.0.1 (bound then released; racy but fine on loopback). 0 on error. */
int spw_launch_free_port(void);

/* Describes a wait status ("exit 3", "signal 9") into buf. Returns buf. */
const char *spw_launch_status_str(int status, char *buf, size_t size);

#endif
