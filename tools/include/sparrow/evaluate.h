/* tools: `sparrow eval` — a model's quality on held-out data (docs/ARCHITECTURE.md §11), from a
 * checkpoint or from live shards, scored with the trainer's forward pass; no training. */
#ifndef SPARROW_EVALUATE_H
#define SPARROW_EVALUATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/ingest.h"
#include "sparrow/ps_client.h"
#include "sparrow/trainer.h"

/*
 * Conventions: pointers are non-NULL unless said otherwise; errors are negative spw_err_t with a
 * message in errstr naming the cause. A model source is owned by one thread (nothing in it is
 * locked); different sources may be used from different threads at once.
 *
 * Where the rows come from (spw_evaluate_model_t):
 *   checkpoint  every row of one checkpoint epoch is read into memory (the shard checkpoints are
 *               verified against the MANIFEST's checksums by the pserver's reader, as serve's
 *               bootstrap does). The coordinator does not record the model in the manifest, so
 *               it is inferred from the shards' dim exactly as `sparrow serve` infers it: dim 1 is
 *               LR, dim 1 + k is FM with latent dimension k. A key absent from the checkpoint is
 *               scored with a zero row, as serve scores it (a shard would instead return its
 *               deterministic initial row, uniform in +-pserver.init.scale, 0.01 by default).
 *   shards      rows are pulled from live shards with the trainer's parameter-server client;
 *               the model kind and latent dimension come from the caller (trainer.model,
 *               trainer.latent_dim). The shards answer a key they never saw with its initial row
 *               and, like a trainer's pull, admit it (the row is created on the shard).
 * Scoring uses spw_cpu_forward, the trainer's CPU backend (the oracle), on batches built with
 * spw_batch_add_example, exactly as the trainer scores a batch before training on it.
 */

/* Largest number of examples one scoring batch holds. */
#define SPW_EVALUATE_MAX_BATCH (1u << 20)

typedef struct spw_evaluate_model spw_evaluate_model_t;

/*
 * Opens checkpoint epoch `epoch` (0: the one named by checkpoints/LATEST) under dir, which is the
 * coordinator's checkpoint root (holding checkpoints/) or that checkpoints/ directory itself, and
 * loads every row of every shard. NULL with errstr and *err (may be NULL) on failure:
 * SPW_ERR_NOT_FOUND (dir, checkpoints/, LATEST or the epoch missing; the message lists the
 * epochs present), SPW_ERR_CORRUPT (manifest or shard checkpoint does not verify, shards of
 * different dims, a row count that differs from the manifest's), SPW_ERR_VERSION (another
 * format, or a dim that is neither LR's nor an FM's), SPW_ERR_IO, SPW_ERR_STORE, SPW_ERR_NOMEM.
 * log_dir (may be NULL: temporary directories) receives RocksDB's info logs.
 * The caller owns the result (spw_evaluate_model_close).
 */
spw_evaluate_model_t *spw_evaluate_model_open_checkpoint(const char *dir, uint64_t epoch,
                                                         const char *log_dir, spw_err_t *err,
                                                         char *errstr, size_t errstr_size);

/*
 * A source over live shards: a parameter-server client from conf (copied; conf->dim is replaced
 * by model->dim; stores may be set for the in-process transport) for model (copied). Each
 * lookup waits at most timeout_ms (> 0) for every shard to answer. Connecting does not wait: an
 * unreachable shard shows at the first lookup. NULL with errstr on an invalid conf or model.
 */
spw_evaluate_model_t *spw_evaluate_model_open_shards(const struct spw_ps_client_conf *conf,
                                                     const struct spw_model *model,
                                                     int64_t timeout_ms, char *errstr,
                                                     size_t errstr_size);

/* Frees the rows (and the client). NULL is a no-op. */
void spw_evaluate_model_close(spw_evaluate_model_t *em);

/* Scores with model instead of the one inferred from the rows' dim (a checkpoint holds only
 * rows: LR for dim 1, FM otherwise): a deep model (DeepFM, DCN-v2), whose network's weights are
 * the initial ones plus the dense-block rows the source holds. SPW_ERR_INVALID when model's dim
 * is not the source's, SPW_ERR_NOMEM. */
spw_err_t spw_evaluate_model_set_model(spw_evaluate_model_t *em, const struct spw_model *model,
                                       char *errstr, size_t errstr_size);

/* Whether a checkpoint source holds a deep model's dense blocks (false for shards). */
bool spw_evaluate_model_has_dense_blocks(spw_evaluate_model_t *em);

/* The model scored. Owned by em. */
const struct spw_model *spw_evaluate_model_model(const spw_evaluate_model_t *em);

/* The checkpoint epoch loaded; 0 for shards. */
uint64_t spw_evaluate_model_epoch(const spw_evaluate_model_t *em);

/* Rows loaded from the checkpoint (0 for shards). */
uint64_t spw_evaluate_model_rows(const spw_evaluate_model_t *em);

/*
 * The rows of n keys into rows (n × dim floats, caller storage): a checkpoint's row, or zeros
 * when the checkpoint lacks the key; or the shards' rows. SPW_ERR_TIMEOUT ("shards
 * unreachable") when a shard did not answer within the timeout, or the client's sticky error
 * (dimension or protocol mismatch), with errstr. Never fails for a checkpoint.
 */
spw_err_t spw_evaluate_model_rows_get(spw_evaluate_model_t *em, const uint64_t *keys, size_t n,
                                      float *rows, char *errstr, size_t errstr_size);

/* What an evaluation measured. Means are over the examples scored; a value that does not exist
 * (AUC with one class, Bayes figures without oracle_p, anything over 0 examples) is NaN. */
struct spw_evaluate_result {
    uint64_t examples;        /* scored */
    uint64_t records;         /* read from the input, good and bad */
    uint64_t rejected;        /* invalid records skipped (reader validation or batch checks) */
    uint64_t oracle_examples; /* examples that carried oracle_p */
    double logloss;           /* the model's mean logloss (spw_eval: p clamped to 1e-7) */
    double auc;               /* exact ROC AUC (spw_eval_auc_exact) */
    double mean_prediction;
    double click_rate;    /* mean label */
    double calibration;   /* mean_prediction / click_rate */
    double const_logloss; /* logloss of always predicting click_rate */
    double bayes_logloss; /* oracle_p's logloss over the examples that carry it */
    double bayes_auc;     /* oracle_p's exact AUC over them */
};

/*
 * Reads every record of reader, scores the valid ones in batches of `batch` examples
 * (1..SPW_EVALUATE_MAX_BATCH) with em's rows, and fills *out. Invalid records are counted
 * (out->rejected) and skipped, as the trainer's file input skips them. preds (may be NULL)
 * receives every prediction in input order, as a malloc'd array of out->examples floats (the
 * caller frees it). SPW_ERR_INVALID when no valid example was read (the message names the likely
 * cause: a wrong format or a compressed file), SPW_ERR_IO on a read error, a rows_get error, or
 * SPW_ERR_NOMEM; *out holds the counts so far on error.
 */
spw_err_t spw_evaluate_reader(spw_evaluate_model_t *em, spw_reader_t *reader, size_t batch,
                              struct spw_evaluate_result *out, float **preds, char *errstr,
                              size_t errstr_size);

/* The property table of `sparrow eval` (eval.* and the trainer's model, input and client rows,
 * under the trainer's names and defaults). */
extern const struct spw_config_prop spw_evaluate_config_props[];
extern const size_t spw_evaluate_config_n_props;

#endif
