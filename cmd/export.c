/* `sparrow export`: a checkpoint's rows, or the rows changed between two epochs, as TSV or .npy
 * files with a metadata.json (sparrow/export.h, docs/FORMATS.md). */
#include <inttypes.h>
#include <stdio.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/export.h"

static const struct spw_cli_alias aliases[] = {
    {"--checkpoint", "export.checkpoint"}, {"--epoch", "export.epoch"},
    {"--since", "export.since"},           {"--to", "export.to"},
    {"--format", "export.format"},         {"--log-level", "log.level"},
};

static const char usage[] =
    "usage: sparrow export --checkpoint DIR [--epoch E] [--since E0] --to PATH\n"
    "                      [--format tsv|npy] [--log-level L]\n"
    "                      [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
    "Writes the rows of checkpoint epoch E (default: LATEST) of DIR (a checkpoint root,\n"
    "its checkpoints/ directory, or an epoch directory) into the directory PATH, which must\n"
    "not exist or be empty: every row's u64 key and its dim float weights (the optimizer\n"
    "state is not exported; key 0 is the bias), ascending by key, as rows.tsv (tsv) or\n"
    "keys.npy + weights.npy (npy), and metadata.json (model, dim, epoch, key hash, row\n"
    "count). A deep model's network is written too, as its weights (dense.tsv or\n"
    "dense.npy, with its layers in metadata.json): give the model with the trainer's\n"
    "settings (--set trainer.model=deepfm|dcnv2, trainer.fields, trainer.mlp, ...), which\n"
    "must be the network the checkpoint holds.\n"
    "--since E0: only the rows new or changed since epoch E0, and the keys E0 held\n"
    "that E does not (removed.tsv / removed.npy). Every shard checkpoint is verified against\n"
    "its manifest and read in key order, so memory stays small for any model size.\n"
    "docs/FORMATS.md describes the files. Exit status: 0 done, 1 failed (nothing\n"
    "left in PATH), 2 usage.\n";

static int run(const spw_config_t *cfg)
{
    char errstr[1024];
    struct spw_export_conf conf;
    if (spw_export_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow export: %s\n\n", errstr);
        spw_cli_command_usage(&spw_cmd_export, stderr);
        return 2;
    }
    struct spw_export_result res;
    if (spw_export_run(&conf, &res, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow export: %s\n", errstr);
        return 1;
    }
    if (res.since)
        printf("exported epoch %" PRIu64 " since %" PRIu64 " to %s: %" PRIu64
               " rows changed, %" PRIu64 " removed, %" PRIu64 " unchanged (model %s, dim %u)\n",
               res.epoch, res.since, conf.to, res.rows, res.removed, res.unchanged, res.model,
               res.dim);
    else
        printf("exported epoch %" PRIu64 " to %s: %" PRIu64 " rows (model %s, dim %u, %u "
               "shards)\n",
               res.epoch, conf.to, res.rows, res.model, res.dim, res.shards);
    if (res.dense_params)
        printf("dense network: %zu weights\n", res.dense_params);
    return 0;
}

const struct spw_cli_command spw_cmd_export = {"export",
                                               "write a checkpoint's rows (or those changed since "
                                               "an epoch) as TSV or .npy files",
                                               spw_export_config_props,
                                               &spw_export_config_n_props,
                                               aliases,
                                               SPW_CLI_COUNT(aliases),
                                               NULL,
                                               0,
                                               usage,
                                               run,
                                               NULL};
