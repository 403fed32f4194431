/* The subcommands of the `sparrow` executable (cmd/sparrow.c holds the table). Each main is a thin
 * shell over its module's library object: flags and environment into the module's property table
 * (declared in the module's public header), the object made, run and destroyed. Only cmd/
 * includes this header. */
#ifndef SPARROW_CMD_COMMAND_TABLE_H
#define SPARROW_CMD_COMMAND_TABLE_H

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

int spw_gen_main(int argc, char **argv);         /* cmd/gen.c */
int spw_kafka_mock_main(int argc, char **argv);  /* cmd/kafka_mock.c */
int spw_ingest_main(int argc, char **argv);      /* cmd/ingest.c */
int spw_pserver_main(int argc, char **argv);     /* cmd/pserver.c */
int spw_trainer_main(int argc, char **argv);     /* cmd/trainer.c */
int spw_coordinator_main(int argc, char **argv); /* cmd/coordinator.c */
int spw_serve_main(int argc, char **argv);       /* cmd/serve.c */
/* The local pipeline behind `make demo` (cmd/demo.c). */
int spw_demo_main(int argc, char **argv);
/* A configurable local cluster with fault injection (cmd/launch.c). */
int spw_launch_main(int argc, char **argv);
/* A checkpoint rewritten for another shard count (cmd/reshard.c). */
int spw_reshard_main(int argc, char **argv);
/* A model's quality on held-out data, without training (cmd/eval.c). */
int spw_eval_main(int argc, char **argv);
/* CurveZMQ key pairs for the *.curve.* key files (cmd/curve_keygen.c). */
int spw_curve_keygen_main(int argc, char **argv);

#endif
