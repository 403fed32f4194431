/* The coordinator (docs/ARCHITECTURE.md §5): membership with heartbeats, clocks for the trainer
 * modes, checkpoint epochs with Kafka offsets (MANIFEST + LATEST), pruning, and global recovery. */
#ifndef SPARROW_COORDINATOR_H
#define SPARROW_COORDINATOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"

/*
 * Conventions: pointers are non-NULL unless said otherwise. A server is owned by the thread that
 * runs it; nothing in it is locked. The mode and file helpers are pure or touch only the files
 * named and are thread-safe.
 *
 * Protocol (CoordMessage over a ROUTER socket; members hold a DEALER):
 *   Register(role, member_id, incarnation)  -> ClockReply(registered, generation, latest_epoch,
 *                                              offsets of LATEST)
 *   Heartbeat(member_id, step)              -> no reply; silence beyond member.timeout removes it
 *   Clock(member_id, step)                  -> ClockReply, now or later (see below)
 *   CheckpointReport(member_id, epoch, offsets, examples) -> no reply (the held Clock answers)
 *   RestoreReport(member_id, generation)    -> no reply (the held Clock answers)
 * A trainer sends Clock(step) after each step (and again while idle). The coordinator answers
 * proceed=true when the mode lets it go on; otherwise it holds the Clock and answers later, with
 * proceed=true, or with checkpoint_epoch=E (flush, report offsets, Clock again), or with
 * restore=true (drop state, seek to offsets, RestoreReport, Clock again).
 *
 * Clock semantics (a trainer's clock is the number of steps it completed; a trainer that joins
 * starts at the slowest live trainer's clock):
 *   async      every Clock proceeds.
 *   sync       synchronous training (two-phase steps, docs/ARCHITECTURE.md §3): once every live
 *              trainer sent Clock(c) (its step-c pushes, tagged c, are acknowledged, so they wait
 *              in the shards' pending tables), every shard gets CommitRequest(c, the trainers'
 *              push ids, the step's examples) and applies the example-weighted mean of their
 *              gradients once per row; only then does Clock(c) proceed, with step = c + 1 (the
 *              tag of the next step's pushes). Checkpoint epochs open only while every trainer
 *              is held at the step just committed. A failed commit recovers everyone.
 *   ssp:S      Clock(c) proceeds once c - (slowest live clock) <= S.
 *   hybrid:K   as async, except at clocks that are multiples of K: a barrier (every live trainer
 *              reaches it) after which the trainers drop their cached rows; checkpoints are taken
 *              at barriers.
 *
 * Checkpoint epoch E (every checkpoint.steps steps of the fastest trainer, or checkpoint.interval;
 * in hybrid mode at barriers): every live trainer reports; then every shard gets
 * CheckpointRequest(E); then checkpoints/E/MANIFEST is written (temporary file, fsync, rename),
 * then checkpoints/LATEST is replaced (rename), older epochs beyond `keep` are removed, and the
 * trainers resume with commit=true (they commit the offsets they reported to the consumer group:
 * a coordinator is not a group member, and Kafka refuses commits from non-members of an active
 * group). A shard that fails a checkpoint aborts the epoch (no manifest; the trainers resume).
 * A trainer whose input ended (a file; Clock.input_done) gets an epoch at once (trigger "final";
 * in two-phase modes between steps, in hybrid mode without waiting for a barrier); once an epoch
 * it reported after that completes, everything it trained is in LATEST and its removal (Leave,
 * timeout) starts no recovery.
 *
 * Recovery (generation G): whenever state may have been lost or duplicated - a trainer removed
 * or (re)registered, a shard restarted or unreachable, the coordinator itself started - every
 * trainer is told restore=true and drops its state; once all have reported, every shard gets
 * RestoreRequest(E) for the recovery epoch E (LATEST, or the newest older one whose shard
 * checkpoints all verify: a corrupt shard checkpoint moves every shard back together); then the
 * trainers resume from E's offsets. Pushes made before a restore are fenced by the trainers
 * dropping their unacknowledged pushes before reporting.
 */

enum spw_coord_mode_kind {
    SPW_COORD_ASYNC = 0,
    SPW_COORD_SYNC = 1,
    SPW_COORD_SSP = 2,
    SPW_COORD_HYBRID = 3,
    SPW_COORD_GROUP = 4, /* semi-synchronous groups: sync inside a group of G, async between */
};

struct spw_coord_mode {
    enum spw_coord_mode_kind kind;
    uint32_t param; /* SSP: S (>= 0); HYBRID: K (>= 1); GROUP: G (>= 1) */
};

/* Parses "async", "sync", "ssp:S" (0 <= S <= 1e6), "hybrid:K" (1 <= K <= 1e9) or "group:G"
 * (1 <= G <= SPW_COORD_MAX_MEMBERS). SPW_ERR_INVALID for anything else. */
spw_err_t spw_coord_mode_parse(const char *text, struct spw_coord_mode *out);

/* Writes the mode as text ("ssp:4") into buf. */
void spw_coord_mode_format(const struct spw_coord_mode *mode, char *buf, size_t size);

/* The clock rule: may a trainer that completed `clock` steps go on, given the slowest live
 * trainer's clock `min_clock`? (Hybrid barriers: see spw_coord_mode_barrier.) */
bool spw_coord_mode_may_proceed(const struct spw_coord_mode *mode, uint64_t clock,
                                uint64_t min_clock);

/* True when `clock` is a hybrid barrier (a positive multiple of K). */
bool spw_coord_mode_barrier(const struct spw_coord_mode *mode, uint64_t clock);

/* True in the two-phase modes (sync, group:G): a step's pushes wait on the shards for its
 * commit. */
bool spw_coord_mode_two_phase(const struct spw_coord_mode *mode);

/* ---- the rules of the two-phase modes (step_rule.c; pure, thread-safe) ----
 * A synchronous unit is the whole job in sync, one group in group:G. Its step t commits when
 * the first n - b of its n trainers in the barrier pushed t (backup workers b; at least one);
 * the others' step-t contributions are late. A trainer that elastic synchronisation moved out of
 * the barrier trains asynchronously and is not waited for. */

/* One trainer of a unit, as the commit rule sees it. */
struct spw_coord_step_member {
    uint64_t clock;  /* the last step it pushed */
    bool in_barrier; /* false: elastic moved it out (async, not waited for) */
};

/* Trainers a step of a unit with in_barrier trainers waits for: in_barrier - backup, at least
 * one (0 when in_barrier is 0). */
uint32_t spw_coord_step_need(uint32_t in_barrier, uint32_t backup);

/* May step `step` of the unit of these members commit (enough in-barrier members pushed it)? */
bool spw_coord_step_ready(const struct spw_coord_step_member *members, size_t n, uint64_t step,
                          uint32_t backup);

/* Puts n trainers in groups of `size`: by their order (step_ms NULL), or by step time (fastest
 * first; unmeasured, <= 0, after the measured in their order), so that a straggler does not hold
 * a fast group. group_out[i] receives trainer i's group (0-based). SPW_ERR_INVALID for size 0,
 * SPW_ERR_NOMEM. */
spw_err_t spw_coord_groups_assign(const double *step_ms, size_t n, uint32_t size,
                                  uint32_t *group_out);

/* The median of values (sorted in place; 0 for none). */
double spw_coord_median(double *values, size_t n);

/* Elastic synchronisation, one trainer's state: the running mean of its step time (from its
 * release to its next Clock: compute and push, not the barrier's wait). */
struct spw_coord_elastic {
    double ewma_ms;
    bool measured;
    bool out; /* out of the barrier */
    uint32_t slow_run, fast_run;
};

enum spw_coord_elastic_move {
    SPW_COORD_ELASTIC_STAY = 0,
    SPW_COORD_ELASTIC_LEAVE = 1,  /* slower than factor x the others' median for `steps` steps */
    SPW_COORD_ELASTIC_REJOIN = 2, /* back within (1 + factor) / 2 x for `steps` steps */
};

/* Adds one step time and decides a move, given the median of the unit's other trainers' running
 * means (0: none known) and whether leaving is allowed (the unit keeps someone in the barrier).
 * factor 0 disables every move. */
enum spw_coord_elastic_move spw_coord_elastic_observe(struct spw_coord_elastic *e, double step_ms,
                                                      double others_median_ms, double factor,
                                                      uint32_t steps, bool may_leave);

/* ---- checkpoint files ---- */

/* Most partitions a manifest records; most members and shards a coordinator tracks. */
#define SPW_COORD_MAX_PARTITIONS 65536u
#define SPW_COORD_MAX_MEMBERS    1024u
#define SPW_COORD_MAX_SHARDS     1024u
/* Largest MANIFEST or coordination message accepted. */
#define SPW_COORD_MAX_FRAME (4u << 20)

/* A consumer position of an `examples` partition, or (mark set) a source high-water mark of it:
 * the highest offset of raw-event partition (source_topic, source_partition) trained from
 * (topic, partition), kept in `offset` (docs/ARCHITECTURE.md §5). Both kinds share the
 * manifest's and the messages' offset lists; a zeroed entry is a position. */
struct spw_coord_offset {
    char topic[256];
    int32_t partition;
    int64_t offset; /* next record; a mark: the highest source offset trained */
    uint32_t skip;  /* examples of that record already trained (positions only) */
    bool mark;
    int32_t source_partition;
    char source_topic[256];
};

/* A manifest in memory. offsets is owned (malloc) and freed by spw_coord_manifest_fini. */
struct spw_coord_manifest {
    uint64_t epoch;
    uint32_t shard_count;
    char (*checksums)[17]; /* shard_count hex digests */
    uint64_t *rows;        /* shard_count */
    struct spw_coord_offset *offsets;
    size_t n_offsets;
    uint64_t example_count;
    int64_t created_ms;
    /* The model-update stream's next offsets at the checkpoint (docs/ARCHITECTURE.md §6), owned
     * (malloc) like offsets; skip is unused. A reader starting there replays every later update. */
    struct spw_coord_offset *update_offsets;
    size_t n_update_offsets;
    /* The model, when the writer knows it (a trainer's own checkpoints): "lr" or "fm" and the
     * row width; "" and 0 otherwise (the coordinator's: readers take the width from the shards'
     * checkpoints, and dim 1 for LR, 1 + k for FM). */
    char model[8];
    uint32_t dim;
};

void spw_coord_manifest_fini(struct spw_coord_manifest *m);

/* Writes <root>/checkpoints/<epoch>/MANIFEST atomically (temporary file, fsync, rename, fsync of
 * the directory) with a trailing xxh3-64 of its bytes. SPW_ERR_IO with errstr. */
spw_err_t spw_coord_manifest_write(const char *root, const struct spw_coord_manifest *m,
                                   char *errstr, size_t errstr_size);

/* Reads and verifies <root>/checkpoints/<epoch>/MANIFEST into *m (fini it).
 * SPW_ERR_NOT_FOUND, SPW_ERR_CORRUPT (checksum, decode or limits) or SPW_ERR_IO. */
spw_err_t spw_coord_manifest_read(const char *root, uint64_t epoch, struct spw_coord_manifest *m,
                                  char *errstr, size_t errstr_size);

/* Replaces <root>/checkpoints/LATEST with `epoch` (temporary file, fsync, rename). */
spw_err_t spw_coord_latest_write(const char *root, uint64_t epoch, char *errstr,
                                 size_t errstr_size);

/* Reads LATEST: SPW_OK with *epoch, SPW_ERR_NOT_FOUND when absent, SPW_ERR_CORRUPT when
 * malformed. */
spw_err_t spw_coord_latest_read(const char *root, uint64_t *epoch);

/* The epochs present under <root>/checkpoints (numeric directory names), newest first, into
 * epochs (n_max); returns how many there are (may exceed n_max), or a negative spw_err_t.
 * Exactly spw_ckpt_epochs_list (sparrow/ckpt_layout.h), which new callers use. */
long spw_coord_epochs_list(const char *root, uint64_t *epochs, size_t n_max);

/* Removes every epoch directory except the `keep` newest whose epoch is <= latest, and every
 * directory newer than latest other than `spare` (an epoch being written; 0: none). Logs each
 * removal. Returns how many were removed. */
size_t spw_coord_prune(const char *root, uint64_t latest, uint32_t keep, uint64_t spare);

/*
 * Checks a shard checkpoint: returns SPW_OK when it verifies. The default verifier (used when a
 * server's conf leaves it NULL) checks that the checkpoint directory exists and that its CHECKSUM
 * file names the manifest's checksum; the pserver's full verification can be plugged in.
 */
typedef spw_err_t (*spw_coord_verify_fn)(const char *shard_dir, const char *checksum);
spw_err_t spw_coord_verify_default(const char *shard_dir, const char *checksum);

/* Picks the recovery epoch: LATEST if its manifest reads and every shard checkpoint verifies,
 * else the newest older epoch that does (logging each one skipped). 0 when none (start empty).
 * *m receives its manifest (zeroed when 0). */
uint64_t spw_coord_recovery_epoch(const char *root, uint32_t shards, spw_coord_verify_fn verify,
                                  struct spw_coord_manifest *m);

/* ---- the server ---- */

typedef struct spw_coord_server spw_coord_server_t;
struct spw_metrics;

/* The settings of the two-phase modes. */
struct spw_coord_sync_conf {
    uint32_t backup;        /* backup workers: a step waits for the first n - backup */
    bool apply_late;        /* late contributions applied (penalised), else dropped */
    double elastic_factor;  /* 0: no elastic moves */
    uint32_t elastic_steps; /* consecutive steps before a move */
    bool group_by_speed;    /* group:G: groups of similar step time, else by trainer order */
};

/* What a membership change does to the model (coordinator.recovery). */
enum spw_coord_recovery {
    /* every change rolls every shard and trainer back to LATEST: exactly-once */
    SPW_COORD_RECOVERY_ROLLBACK = 0,
    /* a trainer removed, joined or moving partitions changes nothing else: the shards keep their
     * rows, the other trainers keep training, partitions that change owner resume from LATEST's
     * offsets on the new one (at-least-once for their examples since LATEST, counted). A shard
     * restart still rolls back (the shard lost rows the others' state depends on). */
    SPW_COORD_RECOVERY_CONTINUE,
};

/* The membership events a recovery policy decides on. */
enum spw_coord_member_event {
    SPW_COORD_EVENT_TRAINER_REMOVED,  /* member timeout or Leave */
    SPW_COORD_EVENT_TRAINER_JOINED,   /* a new process registered */
    SPW_COORD_EVENT_TRAINER_REJOINED, /* a live trainer's partitions moved (it registered again) */
    SPW_COORD_EVENT_SHARD_RESTARTED,  /* a shard came back with a new started_ms (rows lost) */
};

/* Whether `event` starts a global recovery (every shard restores LATEST, every trainer seeks to
 * its offsets) under `policy`: always under rollback; under continue only a shard restart.
 * Pure. */
bool spw_coord_recovery_rolls_back(enum spw_coord_recovery policy,
                                   enum spw_coord_member_event event);

/* Parses "rollback" or "continue". SPW_ERR_INVALID otherwise. */
spw_err_t spw_coord_recovery_parse(const char *s, enum spw_coord_recovery *out);

struct spw_coord_server_conf {
    const char *listen;               /* ZeroMQ endpoint to bind, e.g. "tcp://0.0.0.0:7100" */
    enum spw_coord_recovery recovery; /* what a trainer's removal does (coordinator.recovery) */
    struct spw_coord_mode mode;
    struct spw_coord_sync_conf sync;
    const char *shards;              /* comma-separated shard endpoints ("" or NULL: none) */
    const char *checkpoint_dir;      /* root of checkpoints/ (the shards' pserver.checkpoint.dir) */
    uint64_t member_timeout_ms;      /* silence that removes a member */
    uint64_t checkpoint_steps;       /* 0: no step trigger (hybrid: 0 means every barrier) */
    uint64_t checkpoint_interval_ms; /* 0: no time trigger */
    /* async only: the trainers clock at most this often (0: after every step); see
     * coordinator.async.clock_interval */
    uint32_t async_clock_interval_ms;
    uint64_t checkpoint_timeout_ms; /* longest wait for shards (and trainers) in an epoch */
    uint32_t keep;                  /* epochs kept (>= 1) */
    uint64_t startup_grace_ms;      /* wait for members to (re)join before the first recovery */
    uint32_t startup_trainers;      /* this many registered end the grace early (0: never) */
    spw_coord_verify_fn verify;     /* NULL: spw_coord_verify_default */
    /* CurveZMQ (each NULL or "": off). Towards members, a CURVE server: its secret key and the
     * members' allowed public keys (coordinator.curve.secret_key_file, .allowed_clients_file);
     * towards the shards, a CURVE client: their public key and its own secret key, whose public
     * key the shards must allow (coordinator.curve.server_key_file, .client_key_file). Read by
     * spw_coord_server_new; a file that cannot be read fails it, naming the property. */
    const char *curve_secret_key_file, *curve_allowed_clients_file;
    const char *curve_server_key_file, *curve_client_key_file;
    struct spw_metrics *metrics; /* borrowed; may be NULL */
    /* borrowed; may be NULL. Non-zero stops run (besides signals); another thread may set it
     * while run polls it (atomic: a volatile int there was a data race). */
    _Atomic int *stop;
};

/* Binds, reads LATEST, connects to the shards. NULL with errstr on failure. */
spw_coord_server_t *spw_coord_server_new(const struct spw_coord_server_conf *conf, char *errstr,
                                         size_t errstr_size);

/* Runs until a stop request (signal or *conf->stop). SPW_OK then. */
spw_err_t spw_coord_server_run(spw_coord_server_t *srv);

/* The endpoint actually bound (wildcard port resolved). Owned by server. */
const char *spw_coord_server_endpoint(const spw_coord_server_t *srv);

struct spw_coord_server_stats {
    uint64_t members_removed;
    uint64_t epochs_completed;
    uint64_t epochs_aborted;
    uint64_t recoveries;
    uint64_t latest_epoch;
    uint64_t generation;
    uint64_t example_count; /* of LATEST */
    uint32_t trainers;      /* live */
    /* two-phase modes */
    uint64_t step_commits;    /* steps committed (every unit) */
    uint64_t step_waited;     /* trainers listed in them (their contributions averaged) */
    uint64_t step_late;       /* trainers of a unit a commit did not wait for (backup, elastic) */
    uint64_t elastic_leaves;  /* stragglers moved out of the barrier */
    uint64_t elastic_rejoins; /* moved back in */
    uint32_t out_of_barrier;  /* trainers out of the barrier now */
    uint32_t units;           /* synchronous units (groups) now */
    uint64_t auth_refused;    /* members refused by the CURVE allow-list (ZAP) */
    uint64_t malformed;       /* member messages refused: undecodable or another version */
    /* coordinator.recovery=continue: membership changes that did not roll back. examples_retrained
     * (both policies): examples trained since LATEST (by the trainers' Clocks) that will be
     * trained again: a rollback's, every trainer's; a removal under continue, the removed
     * trainer's (its partitions' new owners re-read them: at-least-once) */
    uint64_t continued;
    uint64_t examples_retrained;
};

/* A snapshot (for tests, from the running thread or after run returned). */
void spw_coord_server_get_stats(const spw_coord_server_t *srv, struct spw_coord_server_stats *out);

/* Closes the sockets, frees. NULL is a no-op. */
void spw_coord_server_destroy(spw_coord_server_t *srv);

/* Fills conf from a configuration of spw_coordinator_config_props (strings borrowed). */
spw_err_t spw_coord_server_conf_from_config(const spw_config_t *cfg,
                                            struct spw_coord_server_conf *conf, char *errstr,
                                            size_t errstr_size);

extern const struct spw_config_prop spw_coordinator_config_props[];
extern const size_t spw_coordinator_config_n_props;

#endif
