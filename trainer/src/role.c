/* The trainer role: the worker loop and its coordinator session, as `sparrow trainer` runs them;
 * without a coordinator, its checkpoints (trainer.checkpoint.dir): a coordinator thread over
 * ZeroMQ shards, or its own epochs over in-process shards. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/curve.h"
#include "sparrow/fs.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "coord_session.h"
#include "local_ckpt.h"
#include "sparrow/trainer_loop.h"

/* A member that stays silent this long is removed by the trainer's own coordinator (the trainer
 * heartbeats every 200 ms from a thread of its own). */
#define LOCAL_MEMBER_TIMEOUT_MS 10000

struct spw_trainer {
    spw_trainer_loop_t *loop;
    spw_trainer_coord_t *coord;        /* NULL without a coordinator */
    spw_trn__local_ckpt_t *local_ckpt; /* in-process shards with trainer.checkpoint.dir */
    /* ZeroMQ shards with trainer.checkpoint.dir: the coordinator thread (it owns local_coord
     * while it runs; local_stop ends it), its ipc socket's private directory */
    spw_coord_server_t *local_coord;
    pthread_t local_thread;
    bool local_running;
    _Atomic int local_stop;
    char *local_dir;
    char local_endpoint[PATH_MAX + 16];
    const char *checkpoint_dir;
    uint32_t n_shards;
};

static void *local_coord_main(void *arg)
{
    struct spw_trainer *trainer = arg;
    spw_coord_server_run(trainer->local_coord);
    return NULL;
}

/* Counts the entries of a comma-separated endpoint list. */
static uint32_t count_shards(const char *list)
{
    uint32_t n = 0;
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        n += l > 0;
        p += l + (comma ? 1 : 0);
    }
    return n;
}

/* The coordinator of a trainer without one: async, over the trainer's shards, its checkpoint
 * epochs under trainer.checkpoint.dir; bound to an ipc:// socket in a directory only this user can
 * enter (no port to pick, none open to other users). */
static spw_err_t local_coord_start(struct spw_trainer *trainer,
                                   const struct spw_trainer_loop_conf *conf, char *errstr,
                                   size_t errstr_size)
{
    if (spw_fs_mkdir_p(conf->checkpoint_dir) != SPW_OK) {
        snprintf(errstr, errstr_size, "trainer.checkpoint.dir=%s: cannot create it: %s",
                 conf->checkpoint_dir, strerror(errno));
        return SPW_ERR_IO;
    }
    trainer->local_dir = strdup("/tmp/sparrow-coord-XXXXXX");
    if (!trainer->local_dir || !mkdtemp(trainer->local_dir)) {
        snprintf(errstr, errstr_size, "trainer: mkdtemp: %s", strerror(errno));
        free(trainer->local_dir);
        trainer->local_dir = NULL;
        return SPW_ERR_IO;
    }
    snprintf(trainer->local_endpoint, sizeof(trainer->local_endpoint), "ipc://%s/coordinator",
             trainer->local_dir);
    struct spw_coord_server_conf cc = {
        .listen = trainer->local_endpoint,
        .recovery = SPW_COORD_RECOVERY_ROLLBACK,
        .mode = {SPW_COORD_ASYNC, 0},
        .shards = conf->client.shards,
        .checkpoint_dir = conf->checkpoint_dir,
        .member_timeout_ms = LOCAL_MEMBER_TIMEOUT_MS,
        .checkpoint_interval_ms = conf->checkpoint_interval_ms,
        .checkpoint_timeout_ms = conf->checkpoint_timeout_ms,
        .keep = conf->checkpoint_keep,
        .startup_grace_ms = 0, /* the one member registers right after */
        .curve_server_key_file = conf->client.curve_server_key_file,
        .curve_client_key_file = conf->client.curve_client_key_file,
        .stop = &trainer->local_stop,
    };
    trainer->local_coord = spw_coord_server_new(&cc, errstr, errstr_size);
    if (!trainer->local_coord)
        return SPW_ERR_RPC;
    if (pthread_create(&trainer->local_thread, NULL, local_coord_main, trainer) != 0) {
        snprintf(errstr, errstr_size, "cannot start the coordinator thread");
        return SPW_ERR_NOMEM;
    }
    trainer->local_running = true;
    SPW_INFO("checkpoints by the trainer's own coordinator",
             "dir=%s interval_ms=%" PRIu64 " keep=%u shards=%u hint=\"every pserver needs "
             "pserver.checkpoint.dir=%s\"",
             conf->checkpoint_dir, conf->checkpoint_interval_ms, conf->checkpoint_keep,
             trainer->n_shards, conf->checkpoint_dir);
    return SPW_OK;
}

static void local_coord_stop(struct spw_trainer *trainer)
{
    if (trainer->local_running) {
        atomic_store(&trainer->local_stop, 1);
        pthread_join(trainer->local_thread, NULL);
        trainer->local_running = false;
    }
    spw_coord_server_destroy(trainer->local_coord);
    trainer->local_coord = NULL;
    if (trainer->local_dir)
        spw_fs_remove_tree(trainer->local_dir);
    free(trainer->local_dir);
    trainer->local_dir = NULL;
}

/* The shards wrote their checkpoints into their own pserver.checkpoint.dir: after the final epoch
 * every one of them must be under trainer.checkpoint.dir, or the manifest there names files that
 * are somewhere else. */
static spw_err_t check_shard_dirs(const struct spw_trainer *trainer)
{
    uint64_t epoch = 0;
    if (spw_coord_latest_read(trainer->checkpoint_dir, &epoch) != SPW_OK)
        return SPW_ERR_NOT_FOUND;
    for (uint32_t i = 0; i < trainer->n_shards; i++) {
        char dir[PATH_MAX];
        spw_err_t rc = spw_ckpt_shard_path(dir, sizeof(dir), trainer->checkpoint_dir, epoch, i);
        if (rc == SPW_OK)
            rc = spw_ps_checkpoint_verify(dir, NULL);
        if (rc != SPW_OK) {
            SPW_ERROR("a shard's checkpoint is not under trainer.checkpoint.dir",
                      "epoch=%" PRIu64 " shard=%u dir=%s error=\"%s\" hint=\"start every pserver "
                      "with --set pserver.checkpoint.dir=%s (the same directory, shared)\"",
                      epoch, i, dir, spw_err_str(rc), trainer->checkpoint_dir);
            return SPW_ERR_NOT_FOUND;
        }
    }
    return SPW_OK;
}

spw_trainer_t *spw_trainer_new(const struct spw_trainer_loop_conf *conf, char *errstr,
                               size_t errstr_size)
{
    struct spw_trainer *trainer = calloc(1, sizeof(*trainer));
    if (!trainer) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    struct spw_trainer_loop_conf loop_conf = *conf;
    struct spw_trainer_hooks hooks = {0};
    bool has_hooks = false;
    /* The shards' key files are read again when the PS client opens; reading them here as well
     * makes a bad one fail at once, not after the coordinator's registration (up to a minute). */
    struct spw_curve_client_keys keys;
    spw_err_t kerr = spw_curve_client_load(
        &keys, "trainer.curve.server_key_file", conf->client.curve_server_key_file,
        "trainer.curve.client_key_file", conf->client.curve_client_key_file, errstr, errstr_size);
    spw_curve_client_wipe(&keys);
    if (kerr != SPW_OK)
        goto out_free;
    bool has_coordinator = conf->coordinator && conf->coordinator[0];
    if (!has_coordinator && conf->checkpoint_dir) {
        trainer->checkpoint_dir = conf->checkpoint_dir;
        if (conf->inproc_shards) {
            uint64_t restore = 0;
            trainer->local_ckpt =
                spw_trn__local_ckpt_new(conf, &restore, &hooks, errstr, errstr_size);
            if (!trainer->local_ckpt)
                goto out_free;
            has_hooks = true;
            loop_conf.inproc_restore_root = conf->checkpoint_dir;
            loop_conf.inproc_restore_epoch = restore;
        } else {
            trainer->n_shards = count_shards(conf->client.shards);
            if (local_coord_start(trainer, conf, errstr, errstr_size) != SPW_OK)
                goto out_free;
            loop_conf.coordinator = trainer->local_endpoint;
            loop_conf.coordinator_curve_server_key_file = NULL; /* ipc, this user's only */
            loop_conf.coordinator_curve_client_key_file = NULL;
            has_coordinator = true;
        }
    }
    if (has_coordinator) {
        char why[512];
        trainer->coord = spw_trainer_coord_new(&loop_conf, &hooks, why, sizeof(why));
        if (!trainer->coord) {
            snprintf(errstr, errstr_size, "coordinator registration failed: %s", why);
            goto out_free;
        }
        has_hooks = true;
        loop_conf.commit_interval_ms = 0; /* offsets are committed on the coordinator's signal */
    }
    trainer->loop =
        spw_trainer_loop_new(&loop_conf, has_hooks ? &hooks : NULL, errstr, errstr_size);
    if (!trainer->loop)
        goto out_free;
    if (trainer->local_ckpt)
        spw_trn__local_ckpt_set_loop(trainer->local_ckpt, trainer->loop);
    return trainer;

out_free:
    spw_trainer_coord_destroy(trainer->coord);
    local_coord_stop(trainer);
    spw_trn__local_ckpt_destroy(trainer->local_ckpt);
    free(trainer);
    return NULL;
}

spw_err_t spw_trainer_run(spw_trainer_t *trainer)
{
    if (trainer->coord) {
        spw_err_t err = spw_trainer_coord_start(trainer->coord, trainer->loop);
        if (err != SPW_OK) {
            SPW_ERROR("coordinator clock failed", "error=\"%s\"", spw_err_str(err));
            return err;
        }
    }
    spw_err_t err = spw_trainer_loop_run(trainer->loop);
    /* The end of a file (not a stop request): the final checkpoint, so that everything trained is
     * in LATEST. Kafka input never ends by itself (max_examples, SIGTERM: none is taken). */
    bool ended = err == SPW_OK && !spw_signal_stop_requested() &&
                 spw_trainer_loop_topic(trainer->loop) == NULL;
    if (ended && trainer->coord) {
        err = spw_trainer_coord_finish(trainer->coord);
        if (err == SPW_OK && trainer->local_coord)
            err = check_shard_dirs(trainer);
    } else if (ended && trainer->local_ckpt) {
        err = spw_trn__local_ckpt_take(trainer->local_ckpt, "final");
    }
    return err;
}

void spw_trainer_destroy(spw_trainer_t *trainer)
{
    if (!trainer)
        return;
    spw_trainer_loop_destroy(trainer->loop);
    spw_trainer_coord_destroy(trainer->coord); /* its Leave reaches the coordinator thread */
    local_coord_stop(trainer);
    spw_trn__local_ckpt_destroy(trainer->local_ckpt);
    free(trainer);
}
