/* `sparrow eval`'s library: a checkpoint's rows (or live shards) and a held-out file scored with
 * the trainer's forward pass, summarised as logloss, exact AUC, calibration and baselines. */
#include "sparrow/evaluate.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sparrow/arena.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/eval.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/serve.h"
#include "ckpt_find_int.h"

/* The reader's arena: as the trainer's file input sizes it (trainer/src/loop_source.c). */
#define ARENA_MIN (64u << 20)

/*
 * A model source. Checkpoint rows live in serve's lookup table (sparrow/serve.h), whose
 * get_many gives an absent key a zero row: the same rows, and the same answer for a missing key,
 * as `sparrow serve` after its bootstrap. Owned by one thread.
 */
struct spw_evaluate_model {
    struct spw_model model;
    uint64_t epoch;           /* 0: shards */
    uint64_t rows;            /* loaded from the checkpoint */
    spw_serve_table_t *table; /* checkpoint rows; NULL for shards */
    spw_ps_client_t *client;  /* shards; NULL for a checkpoint */
    int64_t timeout_ms;       /* per lookup, shards */
    char shards[256];         /* for messages */
    spw_deep_t *deep;         /* deep models (spw_evaluate_model_set_model) */
    float *dense;             /* their network's weights, per batch */
};

/* Loads one verified shard checkpoint into em->table (created at the first shard). */
static spw_err_t load_shard(spw_evaluate_model_t *em, const char *dir, const char *checksum,
                            uint64_t want_rows, uint64_t max_rows, const char *log_dir,
                            char *errstr, size_t errstr_size)
{
    spw_err_t rc;
    spw_ps_ckpt_reader_t *r =
        spw_ps_ckpt_reader_open(dir, checksum, log_dir, &rc, errstr, errstr_size);
    if (!r)
        return rc;
    uint32_t dim = spw_ps_ckpt_reader_meta(r)->dim;
    if (!em->table) {
        /* serve's inference: dim 1 is LR, 1 + k is FM (spw_model_init bounds k) */
        rc = dim == 1 ? spw_model_init(&em->model, SPW_MODEL_LR, 0)
                      : spw_model_init(&em->model, SPW_MODEL_FM, dim - 1);
        if (rc != SPW_OK || dim > SPW_SERVE_MAX_DIM) {
            rc = spw_errf(SPW_ERR_VERSION, errstr, errstr_size,
                          "%s: dim %u is neither LR's (1) nor an FM's (1 + k, k <= %u)", dir, dim,
                          SPW_TRN_MAX_LATENT);
            goto out_close;
        }
        em->table = spw_serve_table_new(dim, max_rows ? max_rows : 1, errstr, errstr_size);
        if (!em->table) {
            rc = SPW_ERR_NOMEM;
            goto out_close;
        }
    } else if (dim != em->model.dim) {
        rc = spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size, "%s: dim %u differs from shard 0's %u",
                      dir, dim, em->model.dim);
        goto out_close;
    }
    struct spw_ps_ckpt_row row;
    char rerr[256];
    uint64_t n = 0;
    while ((rc = spw_ps_ckpt_reader_next(r, &row, rerr, sizeof(rerr))) == SPW_OK) {
        /* row.data starts with the weights, all that scoring needs */
        if (spw_serve_table_put(em->table, row.key, row.data, row.version) != SPW_OK) {
            rc = spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                          "%s: more rows than twice the manifest's estimate (%" PRIu64 ")", dir,
                          max_rows);
            goto out_close;
        }
        n++;
    }
    if (rc != SPW_ERR_EOF) {
        spw_errf(rc, errstr, errstr_size, "%s: %s", dir, rerr);
        goto out_close;
    }
    rc = SPW_OK;
    /* the manifest's row count is RocksDB's estimate (rocksdb.estimate-num-keys: overwritten
     * keys counted until compaction), so it only sizes the table; the checksum verified the
     * checkpoint */
    (void)want_rows;
    em->rows += n;
out_close:
    spw_ps_ckpt_reader_close(r);
    return rc;
}

spw_evaluate_model_t *spw_evaluate_model_open_checkpoint(const char *dir, uint64_t epoch,
                                                         const char *log_dir, spw_err_t *err,
                                                         char *errstr, size_t errstr_size)
{
    spw_err_t rc;
    spw_err_t dummy;
    if (!err)
        err = &dummy;
    char root[PATH_MAX];
    if ((rc = spw_tools__ckpt_root(dir, root, sizeof(root), errstr, errstr_size)) != SPW_OK) {
        *err = rc;
        return NULL;
    }
    if (epoch == 0 && (rc = spw_tools__ckpt_latest(root, &epoch, errstr, errstr_size)) != SPW_OK) {
        *err = rc;
        return NULL;
    }
    struct spw_coord_manifest m;
    char merr[512];
    rc = spw_coord_manifest_read(root, epoch, &m, merr, sizeof(merr));
    if (rc != SPW_OK) {
        if (rc == SPW_ERR_NOT_FOUND) {
            char base[PATH_MAX];
            spw_ckpt_dir_path(base, sizeof(base), root);
            snprintf(errstr, errstr_size, "epoch %" PRIu64 " not found under %s", epoch, base);
            spw_tools__ckpt_list_epochs(root, errstr, errstr_size);
        } else {
            snprintf(errstr, errstr_size, "epoch %" PRIu64 " MANIFEST: %s", epoch, merr);
        }
        *err = rc;
        return NULL;
    }
    spw_evaluate_model_t *em = calloc(1, sizeof(*em));
    if (!em) {
        rc = spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
        goto out_fini;
    }
    em->epoch = epoch;
    if (m.shard_count == 0) {
        rc = spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size, "epoch %" PRIu64 " MANIFEST: no shards",
                      epoch);
        goto out_fail;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < m.shard_count; i++)
        total += m.rows[i];
    for (uint32_t i = 0; i < m.shard_count; i++) {
        char sdir[PATH_MAX];
        if (spw_ckpt_shard_path(sdir, sizeof(sdir), root, epoch, i) != SPW_OK) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", root);
            goto out_fail;
        }
        /* twice the estimate, and some: it can be off either way */
        rc = load_shard(em, sdir, m.checksums[i], m.rows[i], 2 * total + 65536, log_dir, errstr,
                        errstr_size);
        if (rc != SPW_OK)
            goto out_fail;
    }
    spw_coord_manifest_fini(&m);
    return em;
out_fail:
    spw_evaluate_model_close(em);
    em = NULL;
out_fini:
    spw_coord_manifest_fini(&m);
    *err = rc;
    return em;
}

spw_evaluate_model_t *spw_evaluate_model_open_shards(const struct spw_ps_client_conf *conf,
                                                     const struct spw_model *model,
                                                     int64_t timeout_ms, char *errstr,
                                                     size_t errstr_size)
{
    if (timeout_ms <= 0) {
        spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "timeout must be positive");
        return NULL;
    }
    spw_evaluate_model_t *em = calloc(1, sizeof(*em));
    if (!em) {
        spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
        return NULL;
    }
    em->model = *model;
    em->timeout_ms = timeout_ms;
    snprintf(em->shards, sizeof(em->shards), "%s",
             conf->stores ? "in-process" : (conf->shards ? conf->shards : ""));
    struct spw_ps_client_conf c = *conf;
    c.dim = model->dim;
    if (!(em->client = spw_ps_client_new(&c, errstr, errstr_size))) {
        free(em);
        return NULL;
    }
    return em;
}

void spw_evaluate_model_close(spw_evaluate_model_t *em)
{
    if (!em)
        return;
    spw_serve_table_destroy(em->table);
    spw_ps_client_destroy(em->client);
    spw_deep_destroy(em->deep);
    free(em->dense);
    free(em);
}

spw_err_t spw_evaluate_model_set_model(spw_evaluate_model_t *em, const struct spw_model *model,
                                       char *errstr, size_t errstr_size)
{
    if (model->dim != em->model.dim)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "the model %s k=%u has rows of %u floats, the source's are %u",
                        spw_model_kind_name(model->kind), model->latent_dim, model->dim,
                        em->model.dim);
    spw_deep_t *deep = NULL;
    float *dense = NULL;
    if (spw_model_is_deep(model) && em->table) {
        /* the checkpoint's dense blocks are the network's: all of them, and no more */
        float w[SPW_SERVE_MAX_DIM];
        uint32_t have = 0;
        while (have <= model->dense_blocks &&
               spw_serve_table_get(em->table, spw_dense_block_key(have), w, NULL) == SPW_OK)
            have++;
        if (have != model->dense_blocks)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "the checkpoint holds %s%u dense blocks, the model %s (trainer.* "
                            "settings) has %u: trained with another network? check "
                            "trainer.model, trainer.mlp, trainer.fields, trainer.cross.layers",
                            have > model->dense_blocks ? "more than " : "", have,
                            spw_model_kind_name(model->kind), model->dense_blocks);
    }
    if (spw_model_is_deep(model)) {
        deep = spw_deep_new(model, errstr, errstr_size);
        dense = malloc(spw_model_dense_params(model) * sizeof(float));
        if (!deep || !dense) {
            spw_deep_destroy(deep);
            free(dense);
            return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
        }
    }
    spw_deep_destroy(em->deep);
    free(em->dense);
    em->deep = deep;
    em->dense = dense;
    em->model = *model;
    return SPW_OK;
}

bool spw_evaluate_model_has_dense_blocks(spw_evaluate_model_t *em)
{
    float w[SPW_SERVE_MAX_DIM];
    return em->table && spw_serve_table_get(em->table, spw_dense_block_key(0), w, NULL) == SPW_OK;
}

const struct spw_model *spw_evaluate_model_model(const spw_evaluate_model_t *em)
{
    return &em->model;
}

uint64_t spw_evaluate_model_epoch(const spw_evaluate_model_t *em)
{
    return em->epoch;
}

uint64_t spw_evaluate_model_rows(const spw_evaluate_model_t *em)
{
    return em->rows;
}

spw_err_t spw_evaluate_model_rows_get(spw_evaluate_model_t *em, const uint64_t *keys, size_t n,
                                      float *rows, char *errstr, size_t errstr_size)
{
    if (em->table) {
        spw_serve_table_get_many(em->table, keys, n, rows);
        return SPW_OK;
    }
    uint64_t token;
    spw_err_t rc = spw_ps_client_pull_start(em->client, keys, n, rows, NULL, &token);
    if (rc == SPW_OK)
        rc = spw_ps_client_pull_wait(em->client, token, em->timeout_ms);
    if (rc == SPW_OK)
        return SPW_OK;
    if (rc == SPW_ERR_TIMEOUT) {
        spw_ps_client_pull_cancel(em->client, token);
        return spw_errf(rc, errstr, errstr_size,
                        "shards unreachable: no answer from %s within %" PRId64 " ms", em->shards,
                        em->timeout_ms);
    }
    const char *why = spw_ps_client_errstr(em->client);
    return spw_errf(rc, errstr, errstr_size, "pull from %s: %s%s%s", em->shards, spw_err_str(rc),
                    why[0] ? ": " : "", why);
}

/* ---- scoring ---- */

/* Every (p, label) of one population, for the exact AUC; summaries from spw_eval. */
struct population {
    spw_eval_t *ev; /* window 1: only its cumulative (compensated) sums are read */
    double *p, *label;
    size_t n, cap;
};

static bool population_init(struct population *pop)
{
    memset(pop, 0, sizeof(*pop));
    return (pop->ev = spw_eval_new(1)) != NULL;
}

static void population_fini(struct population *pop)
{
    spw_eval_destroy(pop->ev);
    free(pop->p);
    free(pop->label);
}

static bool population_add(struct population *pop, double p, double label)
{
    if (pop->n == pop->cap) {
        size_t cap = pop->cap ? 2 * pop->cap : 4096;
        double *np = realloc(pop->p, cap * sizeof(*np));
        if (!np)
            return false;
        pop->p = np;
        double *nl = realloc(pop->label, cap * sizeof(*nl));
        if (!nl)
            return false;
        pop->label = nl;
        pop->cap = cap;
    }
    pop->p[pop->n] = p;
    pop->label[pop->n] = label;
    pop->n++;
    spw_eval_add(pop->ev, p, label);
    return true;
}

/* The logloss of always predicting c when the mean label is ctr (the mean of spw_eval's
 * clamped logloss over labels whose mean is ctr: the logloss is linear in the label). */
static double const_logloss(double ctr)
{
    double q = ctr < 1e-7 ? 1e-7 : (ctr > 1.0 - 1e-7 ? 1.0 - 1e-7 : ctr);
    return -(ctr * log(q) + (1.0 - ctr) * log(1.0 - q));
}

/* Scoring state of one evaluation. */
struct scorer {
    spw_evaluate_model_t *em;
    spw_batch_t *batch;
    float *rows, *bpreds;
    size_t rows_cap, preds_cap;
    struct population model, oracle;
    float *all; /* every prediction, when asked for */
    size_t all_n, all_cap;
    bool keep;
};

static bool grow_floats(float **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t cap2 = *cap ? *cap : 1024;
    while (cap2 < need)
        cap2 *= 2;
    float *np = realloc(*p, cap2 * sizeof(*np));
    if (!np)
        return false;
    *p = np;
    *cap = cap2;
    return true;
}

static spw_err_t score_batch(struct scorer *s, char *errstr, size_t errstr_size)
{
    size_t n = spw_batch_examples(s->batch);
    if (n == 0)
        return SPW_OK;
    uint32_t dim = s->em->model.dim;
    size_t nu = spw_batch_unique(s->batch);
    if (!grow_floats(&s->rows, &s->rows_cap, nu * dim) ||
        !grow_floats(&s->bpreds, &s->preds_cap, n) ||
        (s->keep && !grow_floats(&s->all, &s->all_cap, s->all_n + n)))
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
    spw_err_t rc = spw_evaluate_model_rows_get(s->em, spw_batch_keys(s->batch), nu, s->rows, errstr,
                                               errstr_size);
    if (rc != SPW_OK)
        return rc;
    /* the trainer's forward pass (its CPU backend, the oracle of the CUDA one); a deep model's
     * batches carry its dense blocks (keys 1 .. D), whose rows are the network's offsets */
    if (s->em->deep) {
        spw_deep_dense_from_rows(s->em->deep, s->rows, s->em->dense);
        rc = spw_deep_forward(s->em->deep, s->batch, s->rows, s->em->dense, s->bpreds, NULL);
        if (rc != SPW_OK)
            return spw_errf(rc, errstr, errstr_size, "deep forward: %s", spw_err_str(rc));
    } else {
        spw_cpu_forward(&s->em->model, s->batch, s->rows, s->bpreds);
    }
    const float *labels = spw_batch_labels(s->batch);
    const float *oracle = spw_batch_oracle(s->batch);
    for (size_t i = 0; i < n; i++) {
        if (!population_add(&s->model, s->bpreds[i], labels[i]) ||
            (!isnan(oracle[i]) && !population_add(&s->oracle, oracle[i], labels[i])))
            return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
    }
    if (s->keep) {
        memcpy(s->all + s->all_n, s->bpreds, n * sizeof(float));
        s->all_n += n;
    }
    spw_batch_reset(s->batch);
    return SPW_OK;
}

static void summarise(struct scorer *s, struct spw_evaluate_result *out)
{
    struct spw_eval_summary sum;
    out->examples = s->model.n;
    out->oracle_examples = s->oracle.n;
    out->logloss = out->auc = out->mean_prediction = out->click_rate = NAN;
    out->calibration = out->const_logloss = out->bayes_logloss = out->bayes_auc = NAN;
    if (s->model.n > 0) {
        spw_eval_cumulative(s->model.ev, &sum);
        out->logloss = sum.logloss;
        out->mean_prediction = sum.mean_p;
        out->click_rate = sum.ctr;
        out->calibration = sum.ctr > 0.0 ? sum.mean_p / sum.ctr : NAN;
        out->const_logloss = const_logloss(sum.ctr);
        out->auc = spw_eval_auc_exact(s->model.p, s->model.label, s->model.n);
    }
    if (s->oracle.n > 0) {
        spw_eval_cumulative(s->oracle.ev, &sum);
        out->bayes_logloss = sum.logloss;
        out->bayes_auc = spw_eval_auc_exact(s->oracle.p, s->oracle.label, s->oracle.n);
    }
}

spw_err_t spw_evaluate_reader(spw_evaluate_model_t *em, spw_reader_t *reader, size_t batch,
                              struct spw_evaluate_result *out, float **preds, char *errstr,
                              size_t errstr_size)
{
    memset(out, 0, sizeof(*out));
    if (preds)
        *preds = NULL;
    if (batch == 0 || batch > SPW_EVALUATE_MAX_BATCH)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "batch %zu outside 1..%u", batch,
                        SPW_EVALUATE_MAX_BATCH);
    struct scorer s = {.em = em, .keep = preds != NULL};
    spw_err_t rc = SPW_ERR_NOMEM;
    spw_arena_t *arena = spw_arena_new(0, ARENA_MIN);
    /* both initialised even when the first fails: the cleanup frees both */
    bool model_ok = population_init(&s.model);
    bool pop_ok = population_init(&s.oracle) && model_ok;
    if (!arena || !pop_ok || !(s.batch = spw_batch_new(batch, 0, errstr, errstr_size)) ||
        spw_batch_set_model(s.batch, &em->model) != SPW_OK) {
        spw_errf(rc, errstr, errstr_size, "out of memory");
        goto out;
    }
    char first_bad[256] = "";
    for (;;) {
        Sparrow__Example *ex;
        struct spw_parse_error perr;
        spw_arena_reset(arena);
        rc = spw_reader_next(reader, arena, &ex, &perr);
        if (rc == SPW_ERR_EOF)
            break;
        out->records++;
        if (rc == SPW_ERR_INVALID || rc == SPW_ERR_TOO_BIG) {
            /* counted and skipped like the trainer's file input (a bad pb prefix ends the
             * stream: the reader says EOF next) */
            out->rejected++;
            if (!first_bad[0])
                snprintf(first_bad, sizeof(first_bad), "%s: %s: %s", spw_reader_position(reader),
                         spw_reject_reason_name(perr.reason), perr.message);
            continue;
        }
        if (rc != SPW_OK) {
            spw_errf(rc, errstr, errstr_size, "reading the input at %s: %s",
                     spw_reader_position(reader), spw_err_str(rc));
            goto out;
        }
        rc = spw_batch_add_example(s.batch, ex);
        if (rc == SPW_ERR_INVALID) {
            out->rejected++;
            continue;
        }
        if (rc != SPW_OK) {
            spw_errf(rc, errstr, errstr_size, "batch: %s", spw_err_str(rc));
            goto out;
        }
        if (spw_batch_examples(s.batch) >= batch &&
            (rc = score_batch(&s, errstr, errstr_size)) != SPW_OK)
            goto out;
    }
    if ((rc = score_batch(&s, errstr, errstr_size)) != SPW_OK)
        goto out;
    if (s.model.n == 0) {
        if (out->records == 0)
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "the input holds no record (an empty file?)");
        else
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "no valid example in %" PRIu64 " records (likely a wrong --format, or a "
                          "compressed file); first refused at %s",
                          out->records, first_bad);
        goto out;
    }
    rc = SPW_OK;
out:
    summarise(&s, out);
    if (preds && rc == SPW_OK) {
        *preds = s.all;
        s.all = NULL;
    }
    free(s.all);
    free(s.rows);
    free(s.bpreds);
    spw_batch_destroy(s.batch);
    population_fini(&s.model);
    population_fini(&s.oracle);
    spw_arena_destroy(arena);
    return rc;
}
