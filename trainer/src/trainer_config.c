/* trainer: the property table of `sparrow trainer` (trainer.*) and its reading into params. */
#include "trainer_int.h"

#include "sparrow/ingest.h"
#include "sparrow/ps_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults are written once here; spw_trainer_params_default reads them through a config. */
const struct spw_config_prop spw_trainer_config_props[] = {
    SPW_TRAINER_MODEL_CONFIG_PROPS,
    {"trainer.batch", SPW_CONFIG_INT, "1024", 1, 1 << 20, NULL,
     "Examples per micro-batch (keys are de-duplicated per micro-batch)."},
    {"trainer.acc_steps", SPW_CONFIG_INT, "1", 1, 1024, NULL,
     "Micro-batches whose gradients are summed before one push; the loss is divided by it so that "
     "a step matches one batch of acc_steps x batch examples."},
    {"trainer.topk.ratio", SPW_CONFIG_DOUBLE, "1", 1e-6, 1, NULL,
     "Fraction of a step's rows pushed, those of largest gradient norm; 1 pushes every row."},
    {"trainer.error_feedback", SPW_CONFIG_BOOL, "true", 0, 0, NULL,
     "Keep the rows top-k leaves out as residuals added to the next gradients (false: drop "
     "them)."},
    {"trainer.residual.max_rows", SPW_CONFIG_INT, "1000000", 1, 1e9, NULL,
     "Bound of the residual table; when it is full the oldest residuals are pushed."},
    {"trainer.push.fp16", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Push gradient values as IEEE half floats instead of single."},
    {"trainer.push.fp16.rounding", SPW_CONFIG_ENUM, "stochastic", 0, 0, "stochastic|feedback",
     "How trainer.push.fp16 rounds: stochastic (each value to one of the two halves around it, "
     "unbiased; nothing is kept) or feedback (to nearest, each sent row's rounding error kept in "
     "the residual table, sent with the key's next push and flushed at every checkpoint: with "
     "trainer.topk.ratio 1, every row the trainer touched since the last checkpoint, pushed in "
     "f32 while the checkpoint waits; launch's 4-trainer pipeline flushed 17% as many rows as it "
     "pushed)."},
    {"trainer.push.pulled", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Pushes also carry the row values each gradient was computed from (for the shards' "
     "pserver.staleness.penalty dc:<lambda>): as pulled for the latest micro-batch of the step "
     "that held the key (a top-k residual sent alone: those of the step that left it). Pushes "
     "grow by n*dim*4 bytes (2 with trainer.push.fp16)."},
    {"trainer.backend", SPW_CONFIG_ENUM, "auto", 0, 0, "cpu|cuda|auto",
     "Compute backend; auto uses CUDA when it is built and a device is usable, else the CPU."},
    {"trainer.threads", SPW_CONFIG_INT, "1", 1, SPW_TRN_MAX_THREADS, NULL,
     "Compute threads of this trainer process: each micro-batch's forward and backward is split "
     "over them by examples and each row's gradient summed across them (CPU backend; CUDA keeps "
     "one). Equal to one thread's result up to float rounding. Several trainers on one host "
     "should share its cores out between them."},
    {"trainer.eval.window", SPW_CONFIG_INT, "100000", 1, 1e8, NULL,
     "Examples in the progressive-validation window (logloss and AUC scored before training)."},
    {"trainer.optimizer", SPW_CONFIG_ENUM, "adagrad", 0, 0, "sgd|adagrad",
     "Optimizer of the local reference trainer and of in-process shards (with parameter servers "
     "the shard's applies)."},
    {"trainer.lr", SPW_CONFIG_DOUBLE, "0.05", 0, 100, NULL,
     "Learning rate of the local reference trainer and of in-process shards."},
    {"trainer.lr.dense", SPW_CONFIG_DOUBLE, "0.005", 0, 100, NULL,
     "In-process shards: learning rate of a deep model's dense network, as pserver.lr.dense on "
     "a shard (0: trainer.lr)."},
    {"trainer.eps", SPW_CONFIG_DOUBLE, "1e-3", 0, 1, NULL,
     "Adagrad denominator epsilon of the local reference trainer and of in-process shards. It "
     "damps a row's first steps (with 1e-8 each element's first step is the whole learning rate, "
     "which over tens of fields sets the FM's interactions off badly: 20,000 rows ended worse "
     "than the constant predictor); see pserver.eps."},
    {"trainer.init_scale", SPW_CONFIG_DOUBLE, "0.01", 0, 10, NULL,
     "Local reference trainer and in-process shards: rows start uniform in [-init_scale, "
     "init_scale) from (key, seed), as on a shard."},
    {"trainer.seed", SPW_CONFIG_INT, "1", 0, 9.2e18, NULL,
     "Local reference trainer and in-process shards: seed of the row initialisation; every "
     "trainer: seed of trainer.push.fp16's stochastic rounding."},
    /* the worker loop (trainer_loop.h) */
    {"trainer.in", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Input: file:PATH (file:- is stdin) or kafka://HOST:PORT[,HOST:PORT...]/TOPIC (records are "
     "sparrow.ExampleBatch)."},
    {"trainer.format", SPW_CONFIG_ENUM, "auto", 0, 0, "auto|pb|json|criteo",
     "Format of file input: length-delimited sparrow.Example, JSON lines, or Criteo TSV; auto "
     "tells it from the file's first bytes and logs it (as ingest.format). gzip files are read "
     "as they are, whatever the format."},
    {"trainer.max_reject_ratio", SPW_CONFIG_DOUBLE, "0.5", 0, 1, NULL,
     "Largest share of input records that may be rejected: a file input above it (or yielding "
     "no example) ends the run with exit 1 and a message naming the likely cause (the format); "
     "a Kafka input is judged once, over its first 1000 examples and rejected records, and then "
     "only counts (1: never fail)."},
    {"trainer.schema", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Schema file (`name = id` lines) for JSON field names; unset: names are hashed."},
    SPW_INGEST_LIMIT_CONFIG_PROPS("trainer", "16777216", 268435456),
    {"trainer.group", SPW_CONFIG_STRING, "sparrow-trainers", 1, 249, NULL,
     "Consumer group of Kafka input."},
    {"trainer.start", SPW_CONFIG_ENUM, "earliest", 0, 0, "earliest|latest",
     "Where a Kafka partition without a committed offset starts."},
    {"trainer.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "End with an error when committed offsets were lost to retention (else log, count and "
     "continue from the earliest record held)."},
    {"trainer.batch.linger", SPW_CONFIG_DURATION_MS, "100ms", 0, 60000, NULL,
     "Kafka input: longest wait for a micro-batch to fill before training on what arrived."},
    {"trainer.max_examples", SPW_CONFIG_INT, "0", 0, 1e15, NULL,
     "Stop (cleanly, as on SIGTERM) after this many examples; 0: at the end of a file, never for "
     "Kafka."},
    {"trainer.id", SPW_CONFIG_INT, "0", 0, 4294967295.0, NULL,
     "Trainer id carried by pushes (shards de-duplicate by id, epoch and seq); 0: derived from "
     "the host name and process id."},
    {"trainer.epoch", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL,
     "Push epoch; 0: the wall-clock milliseconds at start. Must be fresh for every run: shards "
     "acknowledge a reused (id, epoch, seq) as a duplicate without applying it."},
    {"trainer.pull.prefetch", SPW_CONFIG_BOOL, "true", 0, 0, NULL,
     "Pull the next micro-batch's rows while the current one computes; in-process shards never "
     "prefetch."},
    {"trainer.sync.rows", SPW_CONFIG_ENUM, "all", 0, 0, "all|dense",
     "In the two-phase steps of sync, hybrid:K and group:G: which rows wait for the step's commit "
     "(averaged over the unit's trainers, applied once). all: every row; dense: only the dense "
     "parameters (the bias and a deep model's dense blocks), while the embedding rows apply at "
     "once as in async (Persia's hybrid). A late step's dense part is dropped as usual, its rows "
     "were applied."},
    {"trainer.pull.fresh", SPW_CONFIG_BOOL, "true", 0, 0, NULL,
     "With prefetch: each push's acknowledgement carries the pushed rows that the prefetched "
     "micro-batch shares, written into it before it is computed, so a trainer never reads rows "
     "older than its own acknowledged pushes (false: those rows are one update stale)."},
    {"trainer.inproc.dir", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Root of the in-process shards' databases (trainer.shards=inproc or inproc:N); empty: a "
     "temporary directory removed at exit."},
    {"trainer.inproc.memory.mb", SPW_CONFIG_INT, "1024", 1, 16777216, NULL,
     "DRAM budget of each in-process shard (colder rows go to its RocksDB)."},
    {"trainer.inproc.penalty", SPW_CONFIG_ENUM, "inverse", 0, 0,
     "none|inverse|exp:|drop:|adaptive|dc:",
     "Staleness penalty of the in-process shards (as pserver.staleness.penalty)."},
    {"trainer.log.interval", SPW_CONFIG_DURATION_MS, "5s", 0, 3600000, NULL,
     "Period of the progress log line (progressive validation, rates); 0: none."},
    {"trainer.commit.interval", SPW_CONFIG_DURATION_MS, "5s", 0, 3600000, NULL,
     "How often stored Kafka offsets are committed; 0: never (a coordinator commits them)."},
    {"trainer.shutdown.grace", SPW_CONFIG_DURATION_MS, "30s", 0, 3600000, NULL,
     "On SIGTERM or at the end: longest wait for outstanding pushes to be acknowledged."},
    {"trainer.kafka.close.timeout", SPW_CONFIG_DURATION_MS, "10s", 100, 3600000, NULL,
     "On SIGTERM or at the end, after the pushes: longest wait for the Kafka consumer's close "
     "(final commit, leaving the group); past it the partitions move on the group's session "
     "timeout."},
    {"trainer.debug.delay_ms", SPW_CONFIG_DURATION_MS, "0", 0, 3600000, NULL,
     "Straggler injection: sleep this long before every step."},
    {"trainer.debug.slow_factor", SPW_CONFIG_DOUBLE, "1", 1, 1000, NULL,
     "Straggler injection: stretch the trainer's own work (reading, pulling, computing, pushing; "
     "not its waits for the coordinator) to this many times its duration, by sleeping after "
     "every micro-batch."},
    {"trainer.debug.counter_key", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL,
     "Every step also pushes its example count, uncompressed, to this reserved key (the shards "
     "count it with pserver.debug.counter_key): the exactly-once test. 0: off."},
    {"trainer.coordinator", SPW_CONFIG_STRING, "", 0, 255, NULL,
     "Coordinator endpoint (tcp://host:port): clocks, checkpoint epochs and recovery; offsets are "
     "then committed on its signal only. Empty: no coordinator."},
    {"trainer.coordinator.curve.server_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File with the coordinator's Z85 CURVE public key (the pair of its "
     "coordinator.curve.secret_key_file): CurveZMQ to the coordinator with this trainer's "
     "trainer.curve.client_key_file, which it then requires. Empty: plaintext."},
    {"trainer.checkpoint.dir", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Without trainer.coordinator: root of checkpoints/<epoch>/ (MANIFEST, LATEST and the "
     "shards' checkpoints, the coordinator's layout, which sparrow serve, eval and export read), "
     "taken every trainer.checkpoint.interval and at the end of a file; the shards start from its "
     "LATEST (empty without one). In-process shards: the trainer writes them itself; ZeroMQ "
     "shards: a coordinator runs inside the trainer and every pserver needs "
     "pserver.checkpoint.dir set to this same directory. Empty: no checkpoints."},
    {"trainer.checkpoint.interval", SPW_CONFIG_DURATION_MS, "30s", 0, 86400000, NULL,
     "With trainer.checkpoint.dir: a checkpoint at least this often; 0: only the final one at "
     "the end of a file."},
    {"trainer.checkpoint.keep", SPW_CONFIG_INT, "3", 1, 1000, NULL,
     "With trainer.checkpoint.dir: checkpoint epochs kept; older ones are removed."},
    {"trainer.checkpoint.timeout", SPW_CONFIG_DURATION_MS, "60s", 100, 3600000, NULL,
     "With trainer.checkpoint.dir and ZeroMQ shards: longest wait for the shards' checkpoints of "
     "one epoch."},
    SPW_CONFIG_PROPS_HTTP("trainer", "0.0.0.0", "9200"),
    SPW_PS_CLIENT_CONFIG_PROPS,
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL,
     "librdkafka properties of the consumer, passed through unchanged "
     "(kafka.security.protocol=SSL, ...)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_trainer_config_n_props =
    sizeof(spw_trainer_config_props) / sizeof(spw_trainer_config_props[0]);

static spw_err_t deep_model_from_config(const spw_config_t *cfg, enum spw_model_kind kind,
                                        uint32_t k, struct spw_model *model, char *errstr,
                                        size_t errstr_size)
{
    const char *fields_text = spw_config_str(cfg, "trainer.fields");
    if (!fields_text || !fields_text[0])
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "trainer: trainer.model=%s needs trainer.fields (the fields of the "
                        "network's input, e.g. trainer.fields=I1,I2,C1 or @fields.txt)",
                        spw_model_kind_name(kind));
    struct spw_model_field *fields = malloc(SPW_TRN_MAX_FIELDS * sizeof(*fields));
    if (!fields)
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "trainer: out of memory");
    uint32_t n = 0;
    char err[512];
    spw_err_t rc = spw_model_fields_parse(fields_text, fields, &n, err, sizeof(err));
    if (rc == SPW_OK)
        rc = spw_model_init_deep(
            model, kind, k, fields, n, spw_config_str(cfg, "trainer.mlp"),
            kind == SPW_MODEL_DCNV2 ? (uint32_t)spw_config_int(cfg, "trainer.cross.layers") : 0,
            (float)spw_config_double(cfg, "trainer.dropout"),
            (uint64_t)spw_config_int(cfg, "trainer.dense.seed"), err, sizeof(err));
    free(fields);
    if (rc != SPW_OK)
        snprintf(errstr, errstr_size, "trainer: trainer.fields / trainer.mlp: %s", err);
    return rc;
}

spw_err_t spw_trainer_model_from_config(const spw_config_t *cfg, struct spw_model *model,
                                        char *errstr, size_t errstr_size)
{
    enum spw_model_kind kind;
    if (spw_model_kind_parse(spw_config_str(cfg, "trainer.model"), &kind))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "trainer: bad trainer.model");
    uint32_t k = (uint32_t)spw_config_int(cfg, "trainer.latent_dim");
    if (kind == SPW_MODEL_DEEPFM || kind == SPW_MODEL_DCNV2)
        return deep_model_from_config(cfg, kind, k, model, errstr, errstr_size);
    if (spw_model_init(model, kind, k))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "trainer: trainer.latent_dim out of range");
    return SPW_OK;
}

spw_err_t spw_trainer_params_from_config(const spw_config_t *cfg, struct spw_trainer_params *params,
                                         char *errstr, size_t errstr_size)
{
    enum spw_model_kind kind;
    enum spw_backend_kind backend;
    if (spw_model_kind_parse(spw_config_str(cfg, "trainer.model"), &kind) ||
        spw_backend_kind_parse(spw_config_str(cfg, "trainer.backend"), &backend)) {
        snprintf(errstr, errstr_size, "trainer: bad trainer.model or trainer.backend");
        return SPW_ERR_INVALID;
    }
    memset(params, 0, sizeof(*params));
    spw_err_t rc = spw_trainer_model_from_config(cfg, &params->model, errstr, errstr_size);
    if (rc != SPW_OK)
        return rc;
    params->backend = backend;
    params->batch = (uint32_t)spw_config_int(cfg, "trainer.batch");
    params->threads = (uint32_t)spw_config_int(cfg, "trainer.threads");
    params->acc_steps = (uint32_t)spw_config_int(cfg, "trainer.acc_steps");
    params->topk = (struct spw_topk_conf){
        .dim = params->model.dim,
        .ratio = spw_config_double(cfg, "trainer.topk.ratio"),
        .error_feedback = spw_config_bool(cfg, "trainer.error_feedback"),
        .fp16 = spw_config_bool(cfg, "trainer.push.fp16"),
        .rounding = strcmp(spw_config_str(cfg, "trainer.push.fp16.rounding"), "feedback") == 0
                        ? SPW_TOPK_ROUND_FEEDBACK
                        : SPW_TOPK_ROUND_STOCHASTIC,
        .seed = (uint64_t)spw_config_int(cfg, "trainer.seed"),
        .residual_max_rows = (size_t)spw_config_int(cfg, "trainer.residual.max_rows"),
    };
    params->compress = params->topk.ratio < 1.0 || params->topk.fp16;
    params->eval_window = (size_t)spw_config_int(cfg, "trainer.eval.window");
    params->optimizer = strcmp(spw_config_str(cfg, "trainer.optimizer"), "sgd") == 0
                            ? SPW_REF_SGD
                            : SPW_REF_ADAGRAD;
    params->lr = (float)spw_config_double(cfg, "trainer.lr");
    params->lr_dense = (float)spw_config_double(cfg, "trainer.lr.dense");
    params->eps = (float)spw_config_double(cfg, "trainer.eps");
    params->init_scale = (float)spw_config_double(cfg, "trainer.init_scale");
    params->seed = (uint64_t)spw_config_int(cfg, "trainer.seed");
    return SPW_OK;
}

void spw_trainer_params_default(struct spw_trainer_params *params)
{
    char errstr[256];
    spw_config_t *cfg = spw_config_new(spw_trainer_config_props, spw_trainer_config_n_props, errstr,
                                       sizeof(errstr));
    /* The table's defaults validate (a unit test checks it); only OOM can fail here. */
    if (!cfg || spw_trainer_params_from_config(cfg, params, errstr, sizeof(errstr))) {
        memset(params, 0, sizeof(*params));
        spw_model_init(&params->model, SPW_MODEL_FM, 8);
        params->backend = SPW_BACKEND_AUTO;
        params->batch = 1024;
        params->threads = 1;
        params->acc_steps = 1;
        params->topk = (struct spw_topk_conf){.dim = params->model.dim,
                                              .ratio = 1.0,
                                              .error_feedback = true,
                                              .rounding = SPW_TOPK_ROUND_STOCHASTIC,
                                              .seed = 1,
                                              .residual_max_rows = 1000000};
        params->eval_window = 100000;
        params->optimizer = SPW_REF_ADAGRAD;
        params->lr = 0.05f;
        params->lr_dense = 0.005f;
        params->eps = 1e-8f;
        params->init_scale = 0.01f;
        params->seed = 1;
    }
    spw_config_destroy(cfg);
}
