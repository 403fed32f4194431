/* Tests' fake parameter-server shard for the coordinator (a thread answering the PS protocol's
 * Checkpoint, Restore and Stats requests, writing checkpoints/<epoch>/shard-<i>), and a coordinator
 * over two of them run in a thread (struct coord_env), shared by the coordinator's test programs.
 * Include after test_main.h. */
#ifndef SPARROW_TEST_COORD_FAKE_SHARD_H
#define SPARROW_TEST_COORD_FAKE_SHARD_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "sparrow/arena.h"
#include "sparrow/coordinator.h"
#include "sparrow/fs.h"
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

/* A coordinator over two fake shards under a fresh directory, its server in a thread. */
struct coord_env {
    char root[128];
    void *ctx;
    struct fake_shard shards[2];
    spw_coord_server_t *srv;
    pthread_t thread;
    _Atomic int stop;
};

static void *coord_env_main(void *arg)
{
    struct coord_env *e = arg;
    spw_coord_server_run(e->srv);
    return NULL;
}

/* Starts the shards and the coordinator of conf (mode, timeouts, steps, keep, policy: the
 * caller's), which gets the listen address, the shards, the directory and the stop flag. */
static void coord_env_start(struct coord_env *e, struct spw_coord_server_conf *conf)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->root, sizeof(e->root), "/tmp/spw-test-coord.XXXXXX");
    assert_non_null(mkdtemp(e->root));
    e->ctx = zmq_ctx_new();
    shard_start(&e->shards[0], 0, e->root, e->ctx);
    shard_start(&e->shards[1], 1, e->root, e->ctx);
    char list[300];
    snprintf(list, sizeof(list), "%s,%s", e->shards[0].endpoint, e->shards[1].endpoint);
    conf->listen = "tcp://127.0.0.1:*";
    conf->shards = list;
    conf->checkpoint_dir = e->root;
    conf->stop = &e->stop;
    char err[256];
    e->srv = spw_coord_server_new(conf, err, sizeof(err));
    assert_non_null(e->srv);
    assert_int_equal(pthread_create(&e->thread, NULL, coord_env_main, e), 0);
}

/* Stops the coordinator (its stats into *st) and the shards; the directory stays until
 * coord_env_clean, for the test to read. */
static void coord_env_stop(struct coord_env *e, struct spw_coord_server_stats *st)
{
    e->stop = 1;
    pthread_join(e->thread, NULL);
    spw_coord_server_get_stats(e->srv, st);
    spw_coord_server_destroy(e->srv);
    shard_stop(&e->shards[0]);
    shard_stop(&e->shards[1]);
    zmq_ctx_term(e->ctx);
}

static void coord_env_clean(struct coord_env *e)
{
    assert_int_equal(spw_fs_remove_tree(e->root), SPW_OK);
}

#endif
