/* The subcommands of the `sparrow` executable. Each role's main lives in its module's cmd/ file. */
#ifndef SPARROW_TOOLS_COMMANDS_H
#define SPARROW_TOOLS_COMMANDS_H

#include <stddef.h>

#include "sparrow/config.h"

struct spw_command {
    const char *name;
    const char *summary;
    /* argv[0] is the command's name; returns the process exit code. */
    int (*main)(int argc, char **argv);
    /* The command's property table (documented in docs/CONFIGURATION.md); NULL when none. */
    const struct spw_config_prop *props;
    const size_t *n_props;
};

int spw_gen_main(int argc, char **argv);
int spw_kafka_mock_main(int argc, char **argv);
int spw_ingest_main(int argc, char **argv);
/* The property table of `sparrow ingest` (ingest/cmd/ingest.c). */
extern const struct spw_config_prop spw_ingest_config_props[];
extern const size_t spw_ingest_config_n_props;
int spw_pserver_main(int argc, char **argv);
/* The property table of `sparrow pserver` (pserver/src/ps_config.c). */
extern const struct spw_config_prop spw_pserver_config_props[];
extern const size_t spw_pserver_config_n_props;
int spw_trainer_main(int argc, char **argv);
/* The property table of `sparrow trainer` (trainer/src/trainer_config.c). */
extern const struct spw_config_prop spw_trainer_config_props[];
extern const size_t spw_trainer_config_n_props;

int spw_coordinator_main(int argc, char **argv);
/* The property table of `sparrow coordinator` (coordinator/src/coord_config.c). */
extern const struct spw_config_prop spw_coordinator_config_props[];
extern const size_t spw_coordinator_config_n_props;

int spw_serve_main(int argc, char **argv);
/* The property table of `sparrow serve` (serve/src/serve_config.c). */
extern const struct spw_config_prop spw_serve_config_props[];
extern const size_t spw_serve_config_n_props;

/* `sparrow demo` (tools/cmd/demo.c): the local pipeline behind `make demo`. */
int spw_demo_main(int argc, char **argv);
/* `sparrow launch` (tools/cmd/launch.c): a configurable local cluster with fault injection. */
int spw_launch_main(int argc, char **argv);
/* `sparrow reshard` (tools/cmd/reshard.c): a checkpoint rewritten for another shard count. */
int spw_reshard_main(int argc, char **argv);
/* `sparrow eval` (tools/cmd/eval.c): a model's quality on held-out data, without training; its
 * property table is spw_evaluate_config_props (sparrow/evaluate.h). */
int spw_eval_main(int argc, char **argv);

#endif
