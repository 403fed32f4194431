/* `sparrow eval`: scores a held-out file with a checkpoint's rows or live shards' and prints
 * logloss, exact AUC, calibration and the constant and Bayes baselines (sparrow/evaluate.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/evaluate.h"
#include "sparrow/log.h"

static const struct spw_cli_alias aliases[] = {
    {"--checkpoint", "eval.checkpoint"},
    {"--epoch", "eval.epoch"},
    {"--batch", "eval.batch"},
    {"--timeout", "eval.timeout"},
    {"--in", "trainer.in"},
    {"--format", "trainer.format"},
    {"--schema", "trainer.schema"},
    {"--shards", "trainer.shards"},
    {"--model", "trainer.model"},
    {"--latent-dim", "trainer.latent_dim"},
    {"--log-level", "log.level"},
};

/* --json takes no value. */
static const struct spw_cli_flag flags[] = {
    {"--json", "eval.json", "true", 0, NULL},
};

static const char usage[] =
    "usage: sparrow eval --checkpoint DIR [--epoch E] --in file:PATH [--format "
    "auto|pb|json|criteo]\n"
    "                    [--json]\n"
    "       sparrow eval --shards tcp://H:P,... [--model lr|fm] [--latent-dim K]\n"
    "                    --in file:PATH [--format auto|pb|json|criteo] [--json] [--timeout T]\n"
    "       [--schema FILE] [--batch B] [--log-level L] [--config FILE] [--set key=value]...\n"
    "       [--dump-config] [--help]\n\n"
    "Scores a held-out file with a trained model, without training (docs/ARCHITECTURE.md "
    "section 11).\n"
    "DIR is the coordinator's checkpoint root (the shards' pserver.checkpoint.dir: it holds\n"
    "checkpoints/LATEST and checkpoints/<E>/{MANIFEST,shard-<i>}) or that checkpoints/\n"
    "directory itself; the epoch is LATEST's unless --epoch is given. Every shard\n"
    "checkpoint is verified against the manifest. The coordinator's manifest does not\n"
    "record the model, so it is inferred from the rows' dim as `sparrow serve` does: dim 1\n"
    "is LR, dim 1 + k an FM of latent dimension k (--model/--latent-dim are ignored).\n"
    "A key absent from the checkpoint is scored with a zero row, as serve scores it (a\n"
    "shard would return its initial row, uniform in +-pserver.init.scale = 0.01 by\n"
    "default, from (key, pserver.seed)). With --shards the rows are pulled from live\n"
    "shards with the trainer's client (trainer.model and trainer.latent_dim, defaults\n"
    "fm and 8, must match the shards' dim); like a trainer's pull, that admits unseen\n"
    "keys on the shards with their initial rows.\n"
    "The input is read with the trainer's file reader and validation; invalid records are\n"
    "counted (rejected) and skipped. Predictions are the trainer's forward pass (its CPU\n"
    "backend). Printed: examples, rejected, logloss, exact AUC, mean prediction, click\n"
    "rate and calibration (their ratio), the constant predictor's logloss (the file's own\n"
    "click rate), the Bayes logloss and AUC of oracle_p when examples carry it, epoch,\n"
    "model and dim. --json prints one object with exactly the keys examples, rejected,\n"
    "logloss, auc, mean_prediction, click_rate, calibration, const_logloss,\n"
    "bayes_logloss, bayes_auc, epoch, model, dim (null: not defined, e.g. bayes_* without\n"
    "oracle_p, epoch with --shards, auc with one class).\n"
    "Exit status: 0 scored, 1 failed (checkpoint, input or shards; the message names the\n"
    "cause), 2 usage.\n";

/* A double as JSON: null when it is not a number. */
static void json_num(const char *key, double v, bool last)
{
    if (isfinite(v))
        printf("\"%s\":%.17g%s", key, v, last ? "" : ",");
    else
        printf("\"%s\":null%s", key, last ? "" : ",");
}

static void print_json(const struct spw_evaluate_result *r, uint64_t epoch,
                       const struct spw_model *model)
{
    printf("{\"examples\":%" PRIu64 ",\"rejected\":%" PRIu64 ",", r->examples, r->rejected);
    json_num("logloss", r->logloss, false);
    json_num("auc", r->auc, false);
    json_num("mean_prediction", r->mean_prediction, false);
    json_num("click_rate", r->click_rate, false);
    json_num("calibration", r->calibration, false);
    json_num("const_logloss", r->const_logloss, false);
    json_num("bayes_logloss", r->bayes_logloss, false);
    json_num("bayes_auc", r->bayes_auc, false);
    if (epoch)
        printf("\"epoch\":%" PRIu64 ",", epoch);
    else
        printf("\"epoch\":null,");
    printf("\"model\":\"%s\",\"dim\":%u}\n", spw_model_kind_name(model->kind), model->dim);
}

static void print_text(const struct spw_evaluate_result *r, uint64_t epoch, uint64_t rows,
                       const struct spw_model *model, const char *source)
{
    if (epoch)
        printf("epoch            %" PRIu64 " (%s, %" PRIu64 " rows)\n", epoch, source, rows);
    else
        printf("epoch            - (live shards %s)\n", source);
    char desc[SPW_MODEL_DESC_MAX];
    if (spw_model_describe(model, desc, sizeof(desc)) < 0)
        snprintf(desc, sizeof(desc), "%s", spw_model_kind_name(model->kind));
    printf("model            %s dim=%u\n", desc, model->dim);
    printf("examples         %" PRIu64 "\n", r->examples);
    printf("rejected         %" PRIu64 " of %" PRIu64 " records\n", r->rejected, r->records);
    printf("logloss          %.6f\n", r->logloss);
    printf("const_logloss    %.6f (predicting the click rate)\n", r->const_logloss);
    if (r->oracle_examples)
        printf("bayes_logloss    %.6f (oracle_p, %" PRIu64 " examples)\n", r->bayes_logloss,
               r->oracle_examples);
    else
        printf("bayes_logloss    - (no oracle_p)\n");
    printf("auc              %.6f\n", r->auc);
    if (r->oracle_examples)
        printf("bayes_auc        %.6f\n", r->bayes_auc);
    else
        printf("bayes_auc        -\n");
    printf("mean_prediction  %.6f\n", r->mean_prediction);
    printf("click_rate       %.6f\n", r->click_rate);
    printf("calibration      %.6f (mean prediction / click rate)\n", r->calibration);
}

static int run(const spw_config_t *cfg)
{
    int rc = 1;

    char errstr[1024];
    spw_evaluate_model_t *em = NULL;
    spw_reader_t *reader = NULL;
    spw_schema_t *schema = NULL;
    const char *ckpt = spw_config_str(cfg, "eval.checkpoint");
    const char *shards = spw_config_str(cfg, "trainer.shards");
    const char *in = spw_config_str(cfg, "trainer.in");
    rc = 2;
    if ((ckpt && ckpt[0]) == (shards && shards[0])) {
        fprintf(stderr, "sparrow eval: give exactly one of --checkpoint DIR and --shards "
                        "ENDPOINTS\n(sparrow eval --help lists the options)\n");
        goto out;
    }
    if (!in || !in[0]) {
        fprintf(stderr, "sparrow eval: --in file:PATH is required\n");
        goto out;
    }
    const char *path = in;
    if (strncmp(in, "file:", 5) == 0)
        path = in + 5;
    else if (strstr(in, "://")) {
        fprintf(stderr, "sparrow eval: --in %s: only file:PATH input is scored\n", in);
        goto out;
    }
    enum spw_format format;
    const char *fmt = spw_config_str(cfg, "trainer.format");
    if (spw_format_parse(fmt, &format) != SPW_OK) {
        fprintf(stderr, "sparrow eval: unknown format '%s' (pb, json or criteo)\n", fmt);
        goto out;
    }
    rc = 1;

    struct spw_ingest_limits limits;
    spw_ingest_limits_from_config(cfg, "trainer", &limits);
    const char *schema_path = spw_config_str(cfg, "trainer.schema");
    if (schema_path && schema_path[0] &&
        !(schema = spw_schema_load(schema_path, false, errstr, sizeof(errstr)))) {
        fprintf(stderr, "sparrow eval: schema: %s\n", errstr);
        goto out;
    }
    /* the input first: a missing file is reported before a checkpoint is loaded */
    if (!(reader = spw_reader_open(path, format, &limits, schema, errstr, sizeof(errstr)))) {
        fprintf(stderr, "sparrow eval: input %s: %s\n", in, errstr);
        goto out;
    }

    struct spw_model model;
    if (spw_trainer_model_from_config(cfg, &model, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow eval: %s\n", errstr);
        rc = 2;
        goto out;
    }
    char source[512];
    if (ckpt && ckpt[0]) {
        spw_err_t err;
        em = spw_evaluate_model_open_checkpoint(ckpt, (uint64_t)spw_config_int(cfg, "eval.epoch"),
                                                NULL, &err, errstr, sizeof(errstr));
        if (!em) {
            fprintf(stderr, "sparrow eval: checkpoint: %s\n", errstr);
            goto out;
        }
        snprintf(source, sizeof(source), "checkpoint %s", ckpt);
        if (spw_model_is_deep(&model)) {
            if (spw_evaluate_model_set_model(em, &model, errstr, sizeof(errstr)) != SPW_OK) {
                fprintf(stderr, "sparrow eval: checkpoint %s: %s\n", ckpt, errstr);
                rc = 2;
                goto out;
            }
        } else if (spw_evaluate_model_has_dense_blocks(em)) {
            fprintf(stderr,
                    "sparrow eval: checkpoint %s holds a deep model's dense blocks: give its "
                    "model (--set trainer.model=deepfm|dcnv2 and the trainer's trainer.fields, "
                    "trainer.mlp, ...)\n",
                    ckpt);
            rc = 2;
            goto out;
        }
    } else {
        struct spw_ps_client_conf conf;
        spw_ps_client_conf_default(&conf);
        conf.shards = shards;
        conf.max_frame = (size_t)spw_config_int(cfg, "trainer.ps.max_frame");
        conf.curve_server_key_file = spw_config_str(cfg, "trainer.curve.server_key_file");
        conf.curve_client_key_file = spw_config_str(cfg, "trainer.curve.client_key_file");
        int64_t timeout = spw_config_duration_ms(cfg, "eval.timeout");
        /* a pull unanswered for a quarter of the wait is resent on a fresh connection */
        conf.pull_timeout_ms = (uint32_t)(timeout / 4 > 0 ? timeout / 4 : 1);
        em = spw_evaluate_model_open_shards(&conf, &model, timeout, errstr, sizeof(errstr));
        if (!em) {
            fprintf(stderr, "sparrow eval: shards %s: %s\n", shards, errstr);
            goto out;
        }
        if (spw_model_is_deep(&model) &&
            spw_evaluate_model_set_model(em, &model, errstr, sizeof(errstr)) != SPW_OK) {
            fprintf(stderr, "sparrow eval: shards %s: %s\n", shards, errstr);
            goto out;
        }
        snprintf(source, sizeof(source), "%s", shards);
    }

    struct spw_evaluate_result res;
    spw_err_t err = spw_evaluate_reader(em, reader, (size_t)spw_config_int(cfg, "eval.batch"), &res,
                                        NULL, errstr, sizeof(errstr));
    if (err != SPW_OK) {
        fprintf(stderr, "sparrow eval: %s: %s\n", in, errstr);
        goto out;
    }
    if (spw_config_bool(cfg, "eval.json"))
        print_json(&res, spw_evaluate_model_epoch(em), spw_evaluate_model_model(em));
    else
        print_text(&res, spw_evaluate_model_epoch(em), spw_evaluate_model_rows(em),
                   spw_evaluate_model_model(em), source);
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    spw_evaluate_model_close(em);
    spw_reader_close(reader);
    spw_schema_destroy(schema);
    return rc;
}

const struct spw_cli_command spw_cmd_eval = {
    "eval",
    "score held-out data with a checkpoint or live shards (logloss, AUC, calibration)",
    spw_evaluate_config_props,
    &spw_evaluate_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    flags,
    SPW_CLI_COUNT(flags),
    usage,
    run,
    NULL};
