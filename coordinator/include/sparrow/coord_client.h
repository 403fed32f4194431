/* The coordinator's client library for trainers (clocks, checkpoint epochs, recovery) and other
 * members (membership by heartbeats). */
#ifndef SPARROW_COORD_CLIENT_H
#define SPARROW_COORD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/coordinator.h"
#include "sparrow/curve.h"
#include "sparrow/err.h"

/*
 * Conventions: a client is owned by one thread (the trainer loop's), except that it runs one
 * heartbeat thread of its own with its own socket, so that a member blocked in a long step or a
 * barrier is not taken for dead. Calls block at most as documented; every wait sends heartbeats
 * and notices stop requests (spw_signal_stop_requested: SPW_ERR_STOPPED).
 *
 * A trainer's use:
 *   after every step:  spw_coord_client_clock(client, step + 1, &ev) and act on ev until
 *                      ev.kind is SPW_COORD_EV_PROCEED:
 *     CHECKPOINT: flush pushes and residuals, wait for acks, then
 *                 spw_coord_client_checkpoint_report(client, ev.epoch, offsets, n, examples)
 *                 and call spw_coord_client_clock again with the same clock;
 *     RESTORE:    drop cached rows, residuals and unacknowledged pushes, seek every assigned
 *                 partition to spw_coord_client_offset(), then
 *                 spw_coord_client_restore_report(client, ev.generation) and clock again.
 *   On PROCEED, ev.drop_cache asks to drop cached rows (hybrid barrier), ev.commit to commit the
 *   offsets reported at the checkpoint that just completed.
 *   On a partition assignment: spw_coord_client_offset for each partition, and
 *   spw_coord_client_rejoin (the coordinator runs a recovery, since partitions moved).
 */

enum spw_coord_ev_kind {
    SPW_COORD_EV_PROCEED = 0,
    SPW_COORD_EV_CHECKPOINT = 1,
    SPW_COORD_EV_RESTORE = 2,
};

struct spw_coord_event {
    enum spw_coord_ev_kind kind;
    uint64_t epoch;      /* CHECKPOINT: the epoch to report for; RESTORE: the epoch restored */
    uint64_t generation; /* current recovery generation */
    bool drop_cache;     /* PROCEED */
    bool commit;         /* PROCEED */
    uint64_t step;       /* PROCEED in a two-phase mode (sync): tag the next step's pushes with
                            it; its rows are read after the step before it committed (0: none) */
    bool has_clock;      /* PROCEED: the coordinator sent clock */
    uint64_t clock;      /* the clock as the coordinator counts it (the modes bound these) */
};

struct spw_coord_client_conf {
    const char *endpoint;         /* coordinator, "tcp://host:port" */
    const char *member_id;        /* unique per member ("trainer-0") */
    int role;                     /* SPARROW__MEMBER_ROLE__ROLE_TRAINER, ... */
    uint64_t heartbeat_ms;        /* heartbeat period (>= 10) */
    uint64_t register_timeout_ms; /* resend Register after this silence */
    /* CurveZMQ: the coordinator's public key and this member's key pair (spw_curve_client_load;
     * copied, the caller may wipe its own). NULL or disabled: plaintext. A key the coordinator
     * does not allow shows as a registration that times out (the coordinator logs the refusal). */
    const struct spw_curve_client_keys *curve;
};

typedef struct spw_coord_client spw_coord_client_t;

/* Creates the client, connects, registers (waiting for the reply, resending every
 * register_timeout_ms, up to wait_ms; < 0: forever) and starts the heartbeat thread. conf strings
 * are copied. NULL with errstr on failure or timeout. */
spw_coord_client_t *spw_coord_client_new(const struct spw_coord_client_conf *conf, int64_t wait_ms,
                                         char *errstr, size_t errstr_size);

/* Stops the heartbeat thread, closes the sockets, frees. NULL is a no-op. */
void spw_coord_client_destroy(spw_coord_client_t *client);

/* Sends Clock(clock) and waits for the answer (see conventions). A coordinator that stays silent
 * for register_timeout_ms (restarted) is registered with again and the Clock resent; so is a
 * Clock whose member registered again while it waited (spw_coord_client_rejoin from the wait
 * function). SPW_ERR_STOPPED on a stop request. */
spw_err_t spw_coord_client_clock(spw_coord_client_t *client, uint64_t clock,
                                 struct spw_coord_event *ev);

/* The id this trainer's pushes carry, sent with every Clock from now on (two-phase commits name
 * their contributors by it). Same thread as the clock calls. */
void spw_coord_client_set_trainer_id(spw_coord_client_t *client, uint32_t trainer_id);

/* The trainer's input ended (a file was read to its end): every Clock from now on carries
 * Clock.input_done, which makes the coordinator open a checkpoint epoch ("final"). Once an epoch
 * this trainer reported after the call completes (a PROCEED with commit), everything it trained is
 * in LATEST, and its Leave starts no recovery. Same thread as the clock calls. */
void spw_coord_client_set_input_done(spw_coord_client_t *client);

/* spw_coord_client_clock for a trainer's step: examples is how many the step trained (the weight
 * of its gradients in a two-phase commit; 0 for an idle tick). Same thread rules. */
spw_err_t spw_coord_client_clock_step(spw_coord_client_t *client, uint64_t clock, uint64_t examples,
                                      struct spw_coord_event *ev);

/* While spw_coord_client_clock waits, it calls wait(opaque, budget_ms) about every 20 ms from the
 * calling thread; wait may block for up to budget_ms and may call spw_coord_client_rejoin (a
 * trainer keeps its Kafka group membership alive there). NULL: none. */
typedef void (*spw_coord_wait_fn)(void *opaque, int budget_ms);
void spw_coord_client_set_wait(spw_coord_client_t *client, spw_coord_wait_fn wait, void *opaque);

/* Reports a checkpoint: offsets (n, borrowed) and the examples trained since the last restore
 * (cumulative: the coordinator counts the difference). */
spw_err_t spw_coord_client_checkpoint_report(spw_coord_client_t *client, uint64_t epoch,
                                             const struct spw_coord_offset *offsets, size_t n,
                                             uint64_t examples);

/* Reports that the trainer side of recovery `generation` is done. */
spw_err_t spw_coord_client_restore_report(spw_coord_client_t *client, uint64_t generation);

/* Tells the coordinator this member stops (call right before spw_coord_client_destroy, which then
 * waits up to 500 ms for the message to go out): it is removed at once rather than after
 * coordinator.member.timeout, so barriers and restores do not wait for it. */
spw_err_t spw_coord_client_leave(spw_coord_client_t *client);

/* Re-registers (after a partition assignment): the coordinator starts a recovery. */
spw_err_t spw_coord_client_rejoin(spw_coord_client_t *client);

/* Asks the coordinator for LATEST's offsets now and waits up to timeout_ms for them (on a socket
 * of its own, so a Clock held on the main one is not disturbed): afterwards
 * spw_coord_client_offset answers from the newest checkpoint. coordinator.recovery=continue calls
 * it before resuming a partition taken over, since a checkpoint may have completed after the
 * offsets of the last reply. SPW_ERR_TIMEOUT when no answer came (the offsets stay as they
 * were), SPW_ERR_NOT_FOUND when the coordinator does not know this member. Same thread as the
 * clock calls. */
spw_err_t spw_coord_client_refresh_offsets(spw_coord_client_t *client, int timeout_ms);

/* Every entry of the latest manifest the coordinator sent, positions and source high-water
 * marks (mark set) alike: *n entries, owned by the client, valid until its next clock call. */
const struct spw_coord_offset *spw_coord_client_offsets(const spw_coord_client_t *client,
                                                        size_t *n);

/* The offset to resume partition from, per the latest manifest the coordinator sent: SPW_OK with
 * *offset and *skip, SPW_ERR_NOT_FOUND when the manifest does not name it (start from the
 * beginning). */
spw_err_t spw_coord_client_offset(const spw_coord_client_t *client, const char *topic,
                                  int32_t partition, int64_t *offset, uint32_t *skip);

/* The latest checkpoint epoch and recovery generation the coordinator announced. */
uint64_t spw_coord_client_latest_epoch(const spw_coord_client_t *client);

/* Whether the coordinator's last reply said coordinator.recovery=continue: partitions moving
 * between trainers are followed by no restore, so a newly assigned partition resumes from
 * LATEST's offsets (spw_coord_client_offset) and one kept resumes where it was. Same thread as
 * the clock calls. */
bool spw_coord_client_recovery_continue(const spw_coord_client_t *client);

/* The last reply's ClockReply.clock_interval_ms: in async mode, the trainer need not send a Clock
 * more often than this (0: after every step). Same thread as the clock calls. */
uint32_t spw_coord_client_clock_interval_ms(const spw_coord_client_t *client);
uint64_t spw_coord_client_generation(const spw_coord_client_t *client);

#endif
