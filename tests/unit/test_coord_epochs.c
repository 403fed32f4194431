/* Tests of checkpoint epochs against fake shards (threads answering the PS protocol's
 * Checkpoint, Restore and Stats requests): MANIFEST with offsets and example counts, LATEST,
 * pruning to `keep`, a failing shard aborting the epoch, and a shard restart causing a global
 * restore. */
#include "test_main.h" /* cmocka and what it needs first */

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "sparrow/arena.h"
#include "sparrow/coord_client.h"
#include "sparrow/coordinator.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

#include "coord_fake_shard.h"

static void env_start(struct coord_env *e, const char *mode, uint64_t steps, uint32_t keep)
{
    struct spw_coord_server_conf conf = {0};
    assert_int_equal(spw_coord_mode_parse(mode, &conf.mode), SPW_OK);
    conf.member_timeout_ms = 1000;
    conf.checkpoint_steps = steps;
    conf.checkpoint_timeout_ms = 3000;
    conf.keep = keep;
    coord_env_start(e, &conf);
}

/* One fake trainer: partition `part` of "examples", one record of 2 examples per step. */
struct trainer_state {
    int64_t offset; /* next record */
    uint64_t examples;
    int restores, checkpoints, commits;
};

static spw_err_t train(spw_coord_client_t *c, struct trainer_state *t, int part, uint64_t steps,
                       uint64_t *clock)
{
    for (uint64_t s = 0; s < steps; s++) {
        t->offset++;
        t->examples += 2;
        ++*clock;
        for (;;) {
            struct spw_coord_event ev;
            spw_err_t rc = spw_coord_client_clock(c, *clock, &ev);
            if (rc != SPW_OK)
                return rc;
            if (ev.kind == SPW_COORD_EV_RESTORE) {
                int64_t off;
                uint32_t skip;
                t->offset =
                    spw_coord_client_offset(c, "examples", part, &off, &skip) == SPW_OK ? off : 0;
                t->examples = 0;
                t->restores++;
                spw_coord_client_restore_report(c, ev.generation);
                continue;
            }
            if (ev.kind == SPW_COORD_EV_CHECKPOINT) {
                struct spw_coord_offset o = {
                    .topic = "examples", .partition = part, .offset = t->offset};
                t->checkpoints++;
                spw_coord_client_checkpoint_report(c, ev.epoch, &o, 1, t->examples);
                continue;
            }
            t->commits += ev.commit;
            break;
        }
    }
    return SPW_OK;
}

static spw_coord_client_t *connect_trainer(struct coord_env *e, const char *id)
{
    struct spw_coord_client_conf cc = {
        spw_coord_server_endpoint(e->srv), id, SPARROW__MEMBER_ROLE__ROLE_TRAINER, 50, 1000, NULL};
    char err[256];
    spw_coord_client_t *c = spw_coord_client_new(&cc, 5000, err, sizeof(err));
    assert_non_null(c);
    return c;
}

static void test_coord_epochs_manifest_offsets_and_prune(void **state)
{
    (void)state;
    struct coord_env e;
    env_start(&e, "async", 10, 2);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 3, 45, &clock), SPW_OK);
    spw_coord_client_destroy(c);
    struct spw_coord_server_stats st;
    coord_env_stop(&e, &st);
    assert_true(st.epochs_completed >= 3);
    assert_true(t.commits >= 3);
    uint64_t latest = 0;
    assert_int_equal(spw_coord_latest_read(e.root, &latest), SPW_OK);
    assert_int_equal(latest, st.latest_epoch);
    struct spw_coord_manifest m;
    char err[256];
    assert_int_equal(spw_coord_manifest_read(e.root, latest, &m, err, sizeof(err)), SPW_OK);
    assert_int_equal(m.shard_count, 2);
    assert_int_equal(m.n_offsets, 1);
    assert_int_equal(m.offsets[0].partition, 3);
    /* each record holds 2 examples: the count and the offset agree exactly */
    assert_int_equal(m.example_count, 2 * (uint64_t)m.offsets[0].offset);
    char hex[17];
    snprintf(hex, sizeof(hex), "%016" PRIx64, latest * 16 + 1);
    assert_string_equal(m.checksums[1], hex);
    spw_coord_manifest_fini(&m);
    uint64_t epochs[16];
    assert_int_equal(spw_coord_epochs_list(e.root, epochs, 16), 2); /* keep = 2 */
    coord_env_clean(&e);
}

static void test_coord_epochs_failed_shard_aborts_epoch(void **state)
{
    (void)state;
    struct coord_env e;
    env_start(&e, "async", 5, 3);
    atomic_store(&e.shards[1].fail_checkpoints, 1);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 0, 20, &clock), SPW_OK);
    spw_coord_client_destroy(c);
    struct spw_coord_server_stats st;
    coord_env_stop(&e, &st);
    assert_int_equal(st.epochs_completed, 0);
    assert_true(st.epochs_aborted >= 2);
    uint64_t latest;
    assert_int_equal(spw_coord_latest_read(e.root, &latest), SPW_ERR_NOT_FOUND);
    coord_env_clean(&e);
}

static void test_coord_epochs_shard_restart_restores_everyone(void **state)
{
    (void)state;
    struct coord_env e;
    env_start(&e, "async", 10, 3);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 0, 25, &clock), SPW_OK);
    int restores_before = atomic_load(&e.shards[0].restores);
    int trainer_restores = t.restores;
    /* shard 1 "restarts": the coordinator notices on its next stats poll */
    atomic_store(&e.shards[1].started_ms, 99999);
    /* steps until the restore comes (the poll's timing is the machine's: no fixed wait), then 2 */
    uint64_t deadline = spw_time_mono_ms() + 30000;
    while (t.restores == trainer_restores) {
        assert_true(spw_time_mono_ms() < deadline);
        spw_time_sleep_ms(20);
        assert_int_equal(train(c, &t, 0, 1, &clock), SPW_OK);
    }
    assert_int_equal(train(c, &t, 0, 2, &clock), SPW_OK);
    assert_true(t.restores > trainer_restores);
    assert_true(atomic_load(&e.shards[0].restores) > restores_before);
    /* everyone went back to LATEST: the trainer's offset is the manifest's plus the 2 steps
     * after the restore (the step during which the restore came is dropped with its record) */
    struct spw_coord_server_stats st;
    spw_coord_client_destroy(c);
    coord_env_stop(&e, &st);
    assert_int_equal(atomic_load(&e.shards[0].last_restore_epoch), st.latest_epoch);
    struct spw_coord_manifest m;
    char err[256];
    assert_int_equal(spw_coord_manifest_read(e.root, st.latest_epoch, &m, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(t.offset, m.offsets[0].offset + 2);
    assert_int_equal(m.example_count, 2 * (uint64_t)m.offsets[0].offset);
    spw_coord_manifest_fini(&m);
    coord_env_clean(&e);
}

/* A trainer trains, leaves (with or without a final epoch first), then another joins: the stats
 * after the stop say whether the first one's Leave rolled the model back. Returns the trainers'
 * state; *st receives the coordinator's stats. */
static void leave_then_join(bool final, struct trainer_state *t, struct spw_coord_server_stats *st)
{
    struct coord_env e;
    env_start(&e, "async", 0, 3); /* no step or time trigger: only a final epoch checkpoints */
    spw_coord_client_t *a = connect_trainer(&e, "trainer-a");
    uint64_t clock = 0;
    assert_int_equal(train(a, t, 0, 5, &clock), SPW_OK);
    if (final) {
        spw_coord_client_set_input_done(a);
        int commits = t->commits, checkpoints = t->checkpoints;
        for (int i = 0; i < 10 && t->commits == commits; i++) {
            struct spw_coord_event ev;
            assert_int_equal(spw_coord_client_clock(a, ++clock, &ev), SPW_OK);
            while (ev.kind == SPW_COORD_EV_CHECKPOINT) {
                struct spw_coord_offset o = {
                    .topic = "examples", .partition = 0, .offset = t->offset};
                t->checkpoints++;
                spw_coord_client_checkpoint_report(a, ev.epoch, &o, 1, t->examples);
                assert_int_equal(spw_coord_client_clock(a, clock, &ev), SPW_OK);
            }
            assert_int_equal(ev.kind, SPW_COORD_EV_PROCEED);
            t->commits += ev.commit;
        }
        /* the first clock after input_done got the epoch at once, which completed */
        assert_int_equal(t->checkpoints, checkpoints + 1);
        assert_int_equal(t->commits, commits + 1);
    }
    spw_coord_client_leave(a);
    spw_coord_client_destroy(a); /* waits for the Leave to go out */
    spw_coord_client_t *b = connect_trainer(&e, "trainer-b");
    struct trainer_state tb = {0};
    uint64_t cb = 0;
    assert_int_equal(train(b, &tb, 1, 2, &cb), SPW_OK);
    coord_env_stop(&e, st);
    spw_coord_client_destroy(b);
    if (final) { /* everything a trained is in LATEST */
        struct spw_coord_manifest m;
        char err[256];
        assert_int_equal(spw_coord_manifest_read(e.root, st->latest_epoch, &m, err, sizeof(err)),
                         SPW_OK);
        assert_int_equal(m.example_count, t->examples);
        assert_int_equal(m.offsets[0].offset, t->offset);
        spw_coord_manifest_fini(&m);
    }
    coord_env_clean(&e);
}

static void test_coord_epochs_final_epoch_then_leave_without_rollback(void **state)
{
    (void)state;
    struct trainer_state t = {0};
    struct spw_coord_server_stats st;
    leave_then_join(true, &t, &st);
    assert_int_equal(st.members_removed, 1); /* a's Leave was processed */
    assert_int_equal(st.epochs_completed, 1);
    /* the coordinator's start and b's join; a's Leave after its final epoch rolled nothing back */
    assert_int_equal(st.recoveries, 2);
}

static void test_coord_epochs_leave_without_final_rolls_back(void **state)
{
    (void)state;
    struct trainer_state t = {0};
    struct spw_coord_server_stats st;
    leave_then_join(false, &t, &st);
    assert_int_equal(st.members_removed, 1);
    assert_int_equal(st.epochs_completed, 0);
    assert_int_equal(st.recoveries, 3); /* start, a's Leave, b's join */
}

/* SIGUSR1 asks for a checkpoint: with neither an interval nor a step trigger no epoch opens, until
 * the signal, after which exactly one does, counting every example trained before it. */
static void test_coord_epochs_sigusr1_requests_checkpoint(void **state)
{
    (void)state;
    spw_signal_install();
    struct coord_env e;
    env_start(&e, "async", 0, 2);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 0, 20, &clock), SPW_OK);
    assert_int_equal(t.checkpoints, 0);
    uint64_t before = t.examples;
    assert_int_equal(raise(SIGUSR1), 0);
    for (int i = 0; i < 500 && t.checkpoints == 0; i++) {
        spw_time_sleep_ms(10);
        assert_int_equal(train(c, &t, 0, 1, &clock), SPW_OK);
    }
    assert_int_equal(t.checkpoints, 1);
    assert_int_equal(train(c, &t, 0, 20, &clock), SPW_OK); /* no second one */
    spw_coord_client_destroy(c);
    struct spw_coord_server_stats st;
    coord_env_stop(&e, &st);
    assert_int_equal(st.epochs_completed, 1);
    struct spw_coord_manifest m;
    char err[256];
    assert_int_equal(spw_coord_manifest_read(e.root, st.latest_epoch, &m, err, sizeof(err)),
                     SPW_OK);
    assert_true(m.example_count > before);
    spw_coord_manifest_fini(&m);
    coord_env_clean(&e);
}

SPW_TEST_MAIN(test_coord_epochs_manifest_offsets_and_prune,
              test_coord_epochs_sigusr1_requests_checkpoint,
              test_coord_epochs_final_epoch_then_leave_without_rollback,
              test_coord_epochs_leave_without_final_rolls_back,
              test_coord_epochs_failed_shard_aborts_epoch,
              test_coord_epochs_shard_restart_restores_everyone)
