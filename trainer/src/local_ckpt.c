/* The checkpoints of a trainer without a coordinator over in-process shards: see local_ckpt.h.
 * The files are the coordinator's (MANIFEST, LATEST: spw_coord_manifest_write and friends) and
 * the pserver's (shard checkpoints: spw_ps_store_checkpoint), so every reader of a coordinator's
 * checkpoints reads these. */
#include "local_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/fs.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

struct spw_trn__local_ckpt {
    const char *root; /* borrowed from the conf */
    uint64_t interval_ms, last_ms;
    uint32_t keep, shards;
    uint64_t next_epoch;
    uint64_t examples_base; /* the restored manifest's example count */
    struct spw_model model;
    spw_trainer_loop_t *loop;
    struct spw_ps_checkpoint_info *infos; /* shards */
};

static spw_err_t local_after_step(void *opaque, spw_trainer_loop_t *loop,
                                  const struct spw_trainer_step_info *info)
{
    (void)loop;
    (void)info;
    spw_trn__local_ckpt_t *lc = opaque;
    if (lc->interval_ms == 0 || spw_time_mono_ms() - lc->last_ms < lc->interval_ms)
        return SPW_OK;
    return spw_trn__local_ckpt_take(lc, "interval");
}

spw_trn__local_ckpt_t *spw_trn__local_ckpt_new(const struct spw_trainer_loop_conf *conf,
                                               uint64_t *restore_epoch,
                                               struct spw_trainer_hooks *hooks, char *errstr,
                                               size_t errstr_size)
{
    *restore_epoch = 0;
    const char *root = conf->checkpoint_dir;
    if (spw_fs_mkdir_p(root) != SPW_OK) {
        snprintf(errstr, errstr_size, "trainer.checkpoint.dir=%s: cannot create it: %s", root,
                 strerror(errno));
        return NULL;
    }
    spw_trn__local_ckpt_t *lc = calloc(1, sizeof(*lc));
    if (!lc || !(lc->infos = calloc(conf->inproc_shards, sizeof(*lc->infos)))) {
        free(lc);
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    lc->root = root;
    lc->interval_ms = conf->checkpoint_interval_ms;
    lc->keep = conf->checkpoint_keep ? conf->checkpoint_keep : 1;
    lc->shards = conf->inproc_shards;
    lc->model = conf->params.model;
    lc->last_ms = spw_time_mono_ms();
    uint64_t latest = 0, top = 0;
    spw_err_t rc = spw_coord_latest_read(root, &latest);
    if (rc == SPW_OK) {
        struct spw_coord_manifest m;
        char why[512];
        if (spw_coord_manifest_read(root, latest, &m, why, sizeof(why)) != SPW_OK) {
            snprintf(errstr, errstr_size,
                     "trainer.checkpoint.dir=%s: LATEST names epoch %" PRIu64 ": %s", root, latest,
                     why);
            goto out_free;
        }
        bool same = m.shard_count == lc->shards;
        lc->examples_base = m.example_count;
        uint32_t have = m.shard_count;
        spw_coord_manifest_fini(&m);
        if (!same) {
            snprintf(errstr, errstr_size,
                     "trainer.checkpoint.dir=%s: epoch %" PRIu64 " has %u shards, "
                     "trainer.shards=inproc:%u (sparrow reshard rewrites a checkpoint for another "
                     "count)",
                     root, latest, have, lc->shards);
            goto out_free;
        }
        *restore_epoch = latest;
    } else if (rc != SPW_ERR_NOT_FOUND) {
        snprintf(errstr, errstr_size, "trainer.checkpoint.dir=%s: LATEST: %s", root,
                 spw_err_str(rc));
        goto out_free;
    }
    if (spw_coord_epochs_list(root, &top, 1) < 0)
        top = 0;
    lc->next_epoch = (top > latest ? top : latest) + 1;
    SPW_INFO("checkpoints",
             "dir=%s latest=%" PRIu64 " next_epoch=%" PRIu64 " interval_ms=%" PRIu64
             " keep=%u shards=inproc:%u",
             root, latest, lc->next_epoch, lc->interval_ms, lc->keep, lc->shards);
    *hooks = (struct spw_trainer_hooks){.opaque = lc, .after_step = local_after_step};
    return lc;
out_free:
    spw_trn__local_ckpt_destroy(lc);
    return NULL;
}

void spw_trn__local_ckpt_set_loop(spw_trn__local_ckpt_t *lc, spw_trainer_loop_t *loop)
{
    lc->loop = loop;
}

spw_err_t spw_trn__local_ckpt_take(spw_trn__local_ckpt_t *lc, const char *trigger)
{
    uint64_t t0 = spw_time_mono_ms();
    lc->last_ms = t0;
    uint64_t epoch = lc->next_epoch++;
    size_t n = 0;
    char errstr[1024] = "";
    /* every push acknowledged and every residual pushed: the shards hold everything trained */
    spw_err_t err = spw_trainer_loop_checkpoint(lc->loop, -1, NULL, 0, &n);
    if (err == SPW_OK)
        err = spw_trainer_loop_inproc_checkpoint(lc->loop, lc->root, epoch, lc->infos, lc->shards,
                                                 &n, errstr, sizeof(errstr));
    struct spw_coord_manifest m = {0};
    if (err == SPW_OK) {
        struct spw_trainer_loop_stats st;
        spw_trainer_loop_get_stats(lc->loop, &st);
        m.epoch = epoch;
        m.shard_count = lc->shards;
        m.example_count = lc->examples_base + st.examples;
        m.created_ms = spw_time_wall_ms();
        snprintf(m.model, sizeof(m.model), "%s", spw_model_kind_name(lc->model.kind));
        m.dim = lc->model.dim;
        m.checksums = calloc(lc->shards, sizeof(*m.checksums));
        m.rows = calloc(lc->shards, sizeof(*m.rows));
        if (!m.checksums || !m.rows) {
            snprintf(errstr, sizeof(errstr), "out of memory");
            err = SPW_ERR_NOMEM;
        }
        for (uint32_t i = 0; err == SPW_OK && i < lc->shards; i++) {
            memcpy(m.checksums[i], lc->infos[i].checksum, sizeof(m.checksums[i]));
            m.rows[i] = lc->infos[i].rows;
        }
    }
    if (err == SPW_OK &&
        (err = spw_coord_manifest_write(lc->root, &m, errstr, sizeof(errstr))) == SPW_OK)
        err = spw_coord_latest_write(lc->root, epoch, errstr, sizeof(errstr));
    if (err != SPW_OK) {
        SPW_ERROR("checkpoint failed", "epoch=%" PRIu64 " trigger=%s error=\"%s\" detail=\"%s\"",
                  epoch, trigger, spw_err_str(err), errstr);
        spw_coord_manifest_fini(&m);
        spw_ckpt_epoch_remove(lc->root, epoch); /* its leftovers; LATEST stays as it was */
        return err;
    }
    uint64_t rows = 0;
    for (uint32_t i = 0; i < lc->shards; i++)
        rows += m.rows[i];
    spw_coord_prune(lc->root, epoch, lc->keep, 0);
    SPW_INFO("checkpoint completed",
             "epoch=%" PRIu64 " trigger=%s examples=%" PRIu64 " rows=%" PRIu64
             " shards=%u dir=%s seconds=%.3f",
             epoch, trigger, m.example_count, rows, lc->shards, lc->root,
             (double)(spw_time_mono_ms() - t0) / 1e3);
    spw_coord_manifest_fini(&m);
    return SPW_OK;
}

void spw_trn__local_ckpt_destroy(spw_trn__local_ckpt_t *lc)
{
    if (!lc)
        return;
    free(lc->infos);
    free(lc);
}
