/* The trainer's side of the coordinator (docs/ARCHITECTURE.md §5): clocks after every step and
 * while idle, checkpoint reports, recovery, and Kafka group membership kept alive while held at a
 * barrier. */
#ifndef SPARROW_TRAINER_COORD_SESSION_H
#define SPARROW_TRAINER_COORD_SESSION_H

#include <stdint.h>

#include "sparrow/err.h"
#include "sparrow/trainer_loop.h"

struct spw_metrics;
typedef struct spw_trainer_coord spw_trainer_coord_t;

/* Registers with the coordinator at conf->coordinator (waiting up to a minute) as
 * "trainer-<id>" (conf->trainer_id 0: "trainer-<host>-<pid>"), over CurveZMQ when
 * conf->coordinator_curve_server_key_file is set (the key files are read here: one that cannot
 * be read fails, naming its property), registering its metrics in conf->metrics (may be NULL).
 * Fills *hooks for spw_trainer_loop_new. NULL with errstr on failure. One thread uses it. */
spw_trainer_coord_t *spw_trainer_coord_new(const struct spw_trainer_loop_conf *conf,
                                           struct spw_trainer_hooks *hooks, char *errstr,
                                           size_t errstr_size);

/* Clock 0 before any data, once the loop exists (the loop is borrowed from now on), so that
 * trainers started together share the coordinator's clock base and the startup recovery runs.
 * SPW_ERR_STOPPED on a stop request. */
spw_err_t spw_trainer_coord_start(spw_trainer_coord_t *tc, spw_trainer_loop_t *loop);

/* After the loop ran to the end of a file: tells the coordinator the input ended
 * (Clock.input_done) and clocks until a checkpoint epoch this trainer reported completes, so that
 * everything it trained is in LATEST and its Leave rolls nothing back. Retried over up to three
 * aborted epochs. SPW_OK; SPW_ERR_TIMEOUT (logged) when no epoch completed; SPW_ERR_STOPPED on a
 * stop request; a report's error. */
spw_err_t spw_trainer_coord_finish(spw_trainer_coord_t *tc);

/* Tells the coordinator this trainer leaves (spw_coord_client_leave), stops the heartbeat,
 * frees. NULL is a no-op. */
void spw_trainer_coord_destroy(spw_trainer_coord_t *tc);

#endif
