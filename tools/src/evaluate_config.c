/* The property table of `sparrow eval`: its own eval.* rows and the trainer's rows (same names
 * and defaults) for the model, the input and the parameter-server client. */
#include "sparrow/evaluate.h"
#include "sparrow/ingest.h"
#include "sparrow/ps_client.h"

const struct spw_config_prop spw_evaluate_config_props[] = {
    {"eval.checkpoint", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Checkpoint to score: the coordinator's checkpoint root (pserver.checkpoint.dir, holding "
     "checkpoints/) or that checkpoints/ directory; unset: score the live trainer.shards."},
    {"eval.epoch", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL,
     "Checkpoint epoch to score; 0: the epoch checkpoints/LATEST names."},
    {"eval.json", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Print one JSON object instead of human-readable lines (--json)."},
    {"eval.batch", SPW_CONFIG_INT, "4096", 1, SPW_EVALUATE_MAX_BATCH, NULL,
     "Examples scored per batch (one pull per batch from live shards)."},
    {"eval.timeout", SPW_CONFIG_DURATION_MS, "10s", 1, 3600000, NULL,
     "Longest wait for live shards to answer one pull before they are reported unreachable."},
    /* the trainer's rows (trainer/src/trainer_config.c), same names and defaults */
    /* a checkpoint's model is inferred from its dim as serve does (LR or FM) unless these say
     * otherwise; a deep model's (dense blocks in the checkpoint) needs them */
    SPW_TRAINER_MODEL_CONFIG_PROPS,
    {"trainer.in", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Held-out input: file:PATH (file:- is stdin)."},
    {"trainer.format", SPW_CONFIG_ENUM, "auto", 0, 0, "auto|pb|json|criteo",
     "Format of the input: length-delimited sparrow.Example, JSON lines, or Criteo TSV."},
    {"trainer.schema", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Schema file (`name = id` lines) for JSON field names; unset: names are hashed."},
    SPW_INGEST_LIMIT_CONFIG_PROPS("trainer", "16777216", 268435456),
    {"trainer.shards", SPW_CONFIG_STRING, NULL, 0, 16384, NULL,
     "Live parameter-server shards to score (comma-separated ZeroMQ endpoints, shard 0 first); "
     "unset: score eval.checkpoint."},
    SPW_PS_CLIENT_LINK_CONFIG_PROPS,
    SPW_CONFIG_PROP_LOG_LEVEL("warn"),
};
const size_t spw_evaluate_config_n_props =
    sizeof(spw_evaluate_config_props) / sizeof(spw_evaluate_config_props[0]);
