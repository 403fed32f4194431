/* Tests of checkpoint epochs against fake shards (threads answering the PS protocol's
 * Checkpoint, Restore and Stats requests): MANIFEST with offsets and example counts, LATEST,
 * pruning to `keep`, a failing shard aborting the epoch, and a shard restart causing a global
 * restore. */
#include "test_main.h" /* cmocka and what it needs first */

#include <inttypes.h>
#include <pthread.h>
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
#include "sparrow/time.h"
#include "sparrow/wire.h"

struct fake_shard {
    int idx;
    const char *root;
    void *ctx, *sock;
    char endpoint[128];
    _Atomic int stop;
    atomic_int fail_checkpoints; /* reply ERROR_UNAVAILABLE to checkpoints */
    atomic_llong started_ms;
    atomic_int restores;
    atomic_ullong last_restore_epoch;
    pthread_t thread;
};

static void reply(struct fake_shard *fs, zmq_msg_t *rid, Sparrow__Reply *rep)
{
    struct spw_wire_buf buf = {0};
    rep->has_version = true;
    rep->version = 1;
    assert_int_equal(spw_wire_pack(&rep->base, &buf), SPW_OK);
    zmq_msg_send(rid, fs->sock, ZMQ_SNDMORE);
    zmq_send(fs->sock, buf.data, buf.len, 0);
    free(buf.data);
}

static void *shard_main(void *arg)
{
    struct fake_shard *fs = arg;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 22);
    while (!fs->stop) {
        zmq_pollitem_t it = {fs->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0)
            continue;
        zmq_msg_t rid, body;
        zmq_msg_init(&rid);
        zmq_msg_init(&body);
        zmq_msg_recv(&rid, fs->sock, 0);
        zmq_msg_recv(&body, fs->sock, 0);
        Sparrow__Request *req = NULL;
        spw_arena_reset(arena);
        if (spw_wire_unpack_request(zmq_msg_data(&body), zmq_msg_size(&body), 1 << 20, arena,
                                    &req) == SPW_OK) {
            Sparrow__Reply rep = SPARROW__REPLY__INIT;
            rep.has_request_id = true;
            rep.request_id = req->request_id;
            Sparrow__StatsReply st = SPARROW__STATS_REPLY__INIT;
            Sparrow__CheckpointReply ck = SPARROW__CHECKPOINT_REPLY__INIT;
            Sparrow__RestoreReply rs = SPARROW__RESTORE_REPLY__INIT;
            char hex[17];
            if (req->body_case == SPARROW__REQUEST__BODY_STATS) {
                st.has_started_ms = true;
                st.started_ms = atomic_load(&fs->started_ms);
                rep.body_case = SPARROW__REPLY__BODY_STATS;
                rep.stats = &st;
            } else if (req->body_case == SPARROW__REQUEST__BODY_CHECKPOINT) {
                if (atomic_load(&fs->fail_checkpoints)) {
                    rep.has_error = true;
                    rep.error = SPARROW__ERROR_CODE__ERROR_UNAVAILABLE;
                } else {
                    char d[512], f[600];
                    snprintf(d, sizeof(d), "%s/checkpoints", fs->root);
                    mkdir(d, 0755);
                    snprintf(d, sizeof(d), "%s/checkpoints/%" PRIu64, fs->root,
                             req->checkpoint->epoch);
                    mkdir(d, 0755);
                    snprintf(d, sizeof(d), "%s/checkpoints/%" PRIu64 "/shard-%d", fs->root,
                             req->checkpoint->epoch, fs->idx);
                    mkdir(d, 0755);
                    snprintf(hex, sizeof(hex), "%016" PRIx64,
                             req->checkpoint->epoch * 16 + (uint64_t)fs->idx);
                    snprintf(f, sizeof(f), "%s/CHECKSUM", d);
                    FILE *fp = fopen(f, "w");
                    fprintf(fp, "xxh3-64-files %s\n", hex);
                    fclose(fp);
                    ck.has_epoch = ck.has_rows = true;
                    ck.epoch = req->checkpoint->epoch;
                    ck.rows = 5;
                    ck.checksum = hex;
                    rep.body_case = SPARROW__REPLY__BODY_CHECKPOINT;
                    rep.checkpoint = &ck;
                }
            } else if (req->body_case == SPARROW__REQUEST__BODY_RESTORE) {
                atomic_fetch_add(&fs->restores, 1);
                atomic_store(&fs->last_restore_epoch, req->restore->epoch);
                rs.has_epoch = true;
                rs.epoch = req->restore->epoch;
                rep.body_case = SPARROW__REPLY__BODY_RESTORE;
                rep.restore = &rs;
            }
            reply(fs, &rid, &rep);
        }
        zmq_msg_close(&rid);
        zmq_msg_close(&body);
    }
    spw_arena_destroy(arena);
    return NULL;
}

static void shard_start(struct fake_shard *fs, int idx, const char *root, void *ctx)
{
    memset(fs, 0, sizeof(*fs));
    fs->idx = idx;
    fs->root = root;
    fs->ctx = ctx;
    fs->sock = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(fs->sock, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_bind(fs->sock, "tcp://127.0.0.1:*"), 0);
    size_t l = sizeof(fs->endpoint);
    zmq_getsockopt(fs->sock, ZMQ_LAST_ENDPOINT, fs->endpoint, &l);
    atomic_store(&fs->started_ms, 1000 + idx);
    assert_int_equal(pthread_create(&fs->thread, NULL, shard_main, fs), 0);
}

static void shard_stop(struct fake_shard *fs)
{
    fs->stop = 1;
    pthread_join(fs->thread, NULL);
    zmq_close(fs->sock);
}

struct env {
    char root[128];
    void *ctx;
    struct fake_shard shards[2];
    spw_coord_server_t *srv;
    pthread_t thread;
    _Atomic int stop;
};

static void *server_main(void *arg)
{
    struct env *e = arg;
    spw_coord_server_run(e->srv);
    return NULL;
}

static void env_start(struct env *e, const char *mode, uint64_t steps, uint32_t keep)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->root, sizeof(e->root), "/tmp/test_coord_epochs.XXXXXX");
    assert_non_null(mkdtemp(e->root));
    e->ctx = zmq_ctx_new();
    shard_start(&e->shards[0], 0, e->root, e->ctx);
    shard_start(&e->shards[1], 1, e->root, e->ctx);
    char list[300];
    snprintf(list, sizeof(list), "%s,%s", e->shards[0].endpoint, e->shards[1].endpoint);
    struct spw_coord_server_conf conf = {0};
    conf.listen = "tcp://127.0.0.1:*";
    assert_int_equal(spw_coord_mode_parse(mode, &conf.mode), SPW_OK);
    conf.shards = list;
    conf.checkpoint_dir = e->root;
    conf.member_timeout_ms = 1000;
    conf.checkpoint_steps = steps;
    conf.checkpoint_timeout_ms = 3000;
    conf.keep = keep;
    conf.stop = &e->stop;
    char err[256];
    e->srv = spw_coord_server_new(&conf, err, sizeof(err));
    assert_non_null(e->srv);
    assert_int_equal(pthread_create(&e->thread, NULL, server_main, e), 0);
}

static void env_stop(struct env *e, struct spw_coord_server_stats *st)
{
    e->stop = 1;
    pthread_join(e->thread, NULL);
    spw_coord_server_get_stats(e->srv, st);
    spw_coord_server_destroy(e->srv);
    shard_stop(&e->shards[0]);
    shard_stop(&e->shards[1]);
    zmq_ctx_term(e->ctx);
}

static void env_clean(struct env *e)
{
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", e->root);
    assert_int_equal(system(cmd), 0);
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

static spw_coord_client_t *connect_trainer(struct env *e, const char *id)
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
    struct env e;
    env_start(&e, "async", 10, 2);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 3, 45, &clock), SPW_OK);
    spw_coord_client_destroy(c);
    struct spw_coord_server_stats st;
    env_stop(&e, &st);
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
    env_clean(&e);
}

static void test_coord_epochs_failed_shard_aborts_epoch(void **state)
{
    (void)state;
    struct env e;
    env_start(&e, "async", 5, 3);
    atomic_store(&e.shards[1].fail_checkpoints, 1);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 0, 20, &clock), SPW_OK);
    spw_coord_client_destroy(c);
    struct spw_coord_server_stats st;
    env_stop(&e, &st);
    assert_int_equal(st.epochs_completed, 0);
    assert_true(st.epochs_aborted >= 2);
    uint64_t latest;
    assert_int_equal(spw_coord_latest_read(e.root, &latest), SPW_ERR_NOT_FOUND);
    env_clean(&e);
}

static void test_coord_epochs_shard_restart_restores_everyone(void **state)
{
    (void)state;
    struct env e;
    env_start(&e, "async", 10, 3);
    spw_coord_client_t *c = connect_trainer(&e, "trainer-0");
    struct trainer_state t = {0};
    uint64_t clock = 0;
    assert_int_equal(train(c, &t, 0, 25, &clock), SPW_OK);
    int restores_before = atomic_load(&e.shards[0].restores);
    int trainer_restores = t.restores;
    /* shard 1 "restarts": the coordinator notices on its next stats poll */
    atomic_store(&e.shards[1].started_ms, 99999);
    spw_time_sleep_ms(600);
    assert_int_equal(train(c, &t, 0, 3, &clock), SPW_OK);
    assert_true(t.restores > trainer_restores);
    assert_true(atomic_load(&e.shards[0].restores) > restores_before);
    /* everyone went back to LATEST: the trainer's offset is the manifest's plus the 2 steps
     * after the restore (the step during which the restore came is dropped with its record) */
    struct spw_coord_server_stats st;
    spw_coord_client_destroy(c);
    env_stop(&e, &st);
    assert_int_equal(atomic_load(&e.shards[0].last_restore_epoch), st.latest_epoch);
    struct spw_coord_manifest m;
    char err[256];
    assert_int_equal(spw_coord_manifest_read(e.root, st.latest_epoch, &m, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(t.offset, m.offsets[0].offset + 2);
    assert_int_equal(m.example_count, 2 * (uint64_t)m.offsets[0].offset);
    spw_coord_manifest_fini(&m);
    env_clean(&e);
}

SPW_TEST_MAIN(test_coord_epochs_manifest_offsets_and_prune,
              test_coord_epochs_failed_shard_aborts_epoch,
              test_coord_epochs_shard_restart_restores_everyone)
