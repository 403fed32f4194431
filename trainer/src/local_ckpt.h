/* The checkpoints of a trainer without a coordinator over in-process shards (trainer.checkpoint.dir
 * with trainer.shards=inproc[:N]): epochs in the coordinator's layout (sparrow/ckpt_layout.h),
 * written by the trainer itself between steps. Not API: the role's (role.c). */
#ifndef SPARROW_TRAINER_LOCAL_CKPT_H
#define SPARROW_TRAINER_LOCAL_CKPT_H

#include <stdint.h>

#include "sparrow/err.h"
#include "sparrow/trainer_loop.h"

typedef struct spw_trn__local_ckpt spw_trn__local_ckpt_t;

/*
 * Prepares checkpoints under conf->checkpoint_dir (created with its parents): reads its LATEST
 * (its manifest must read and have conf->inproc_shards shards) into *restore_epoch (0: none, the
 * shards start empty) and numbers new epochs above every epoch directory present. Fills *hooks
 * (after_step: the interval's epochs) for spw_trainer_loop_new. NULL with errstr on failure,
 * naming the directory. One thread uses it (the loop's).
 */
spw_trn__local_ckpt_t *spw_trn__local_ckpt_new(const struct spw_trainer_loop_conf *conf,
                                               uint64_t *restore_epoch,
                                               struct spw_trainer_hooks *hooks, char *errstr,
                                               size_t errstr_size);

/* The loop whose shards it checkpoints (borrowed from now on). */
void spw_trn__local_ckpt_set_loop(spw_trn__local_ckpt_t *lc, spw_trainer_loop_t *loop);

/* Takes an epoch now (from a hook, or after the loop's run): every push acknowledged, each shard's
 * checkpoint, then MANIFEST (example count, model, dim), LATEST and pruning to the keep count.
 * trigger names it in the log ("interval", "final"). SPW_OK or the failing step's error
 * (logged); an epoch that fails leaves LATEST as it was. */
spw_err_t spw_trn__local_ckpt_take(spw_trn__local_ckpt_t *lc, const char *trigger);

/* Frees. NULL is a no-op. */
void spw_trn__local_ckpt_destroy(spw_trn__local_ckpt_t *lc);

#endif
