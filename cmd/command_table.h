/* The subcommands of the `sparrow` executable (cmd/sparrow.c holds the table). Each is a thin shell
 * over its module's library object: flags and environment into the module's property table
 * (declared in the module's public header), the object made, run and destroyed. Only cmd/
 * includes this header. */
#ifndef SPARROW_CMD_COMMAND_TABLE_H
#define SPARROW_CMD_COMMAND_TABLE_H

#include "sparrow/cli.h"

/* Each subcommand's front end and work (sparrow/cli.h), defined by its file in cmd/. */
extern const struct spw_cli_command spw_cmd_gen;         /* cmd/gen.c */
extern const struct spw_cli_command spw_cmd_kafka_mock;  /* cmd/kafka_mock.c */
extern const struct spw_cli_command spw_cmd_ingest;      /* cmd/ingest.c */
extern const struct spw_cli_command spw_cmd_pserver;     /* cmd/pserver.c */
extern const struct spw_cli_command spw_cmd_trainer;     /* cmd/trainer.c */
extern const struct spw_cli_command spw_cmd_coordinator; /* cmd/coordinator.c */
extern const struct spw_cli_command spw_cmd_serve;       /* cmd/serve.c */
/* The local pipeline behind `make demo` (cmd/demo.c). */
extern const struct spw_cli_command spw_cmd_demo;
/* A model's quality on held-out data, without training (cmd/eval.c). */
extern const struct spw_cli_command spw_cmd_eval;
/* A checkpoint rewritten for another shard count (cmd/reshard.c). */
extern const struct spw_cli_command spw_cmd_reshard;
/* A configurable local cluster with fault injection (cmd/launch.c). */
extern const struct spw_cli_command spw_cmd_launch;
/* A checkpoint's rows as files (cmd/export.c). */
extern const struct spw_cli_command spw_cmd_export;
/* The feature keys of a field's values (cmd/hash.c). */
extern const struct spw_cli_command spw_cmd_hash;

/* The commands without a property table, which parse their own arguments. */
int spw_curve_keygen_main(int argc, char **argv); /* CurveZMQ key pairs (cmd/curve_keygen.c) */

#endif
