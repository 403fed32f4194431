/* `sparrow hash FIELD VALUE...`: the feature keys the readers give a field's values
 * (sparrow/feature_hash.h), one line per value. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/feature_hash.h"
#include "sparrow/hash.h"

static const struct spw_cli_alias aliases[] = {
    {"--format", "hash.format"},
    {"--schema", "hash.schema"},
    {"--shards", "hash.shards"},
    {"--log-level", "log.level"},
};

static const struct spw_cli_flag flags[] = {
    {"FIELD VALUE", "hash.args", NULL, ' ', NULL},
};

static const char usage[] =
    "usage: sparrow hash [--format json|criteo] [--schema FILE] [--shards N] [--]\n"
    "                    FIELD VALUE...\n"
    "                    [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
    "Prints the feature key (u64, decimal) of each VALUE of field FIELD, one line per\n"
    "value in order, exactly as the trainer's file readers, ingest and serve hash them\n"
    "(xxHash64 of the value's bytes seeded with the field id; docs/FORMATS.md): the\n"
    "keys of `sparrow export`'s rows and of GET /v1/rows/KEY. --shards N adds a second\n"
    "column, the shard (0..N-1) that holds the key. A value of JSON input is hashed as its\n"
    "text (the number 13 as \"13\"); --format criteo takes FIELD as a column I1..I13 or\n"
    "C1..C26 and buckets integer columns as the Criteo reader does. Values starting with\n"
    "'-' go after \"--\".\n";

static int run(const spw_config_t *cfg)
{
    size_t n = 0;
    char **args = spw_cli_positional_split(spw_config_str(cfg, "hash.args"), &n);
    if (!args)
        return 1;
    if (n < 2) {
        spw_cli_positional_free(args);
        fprintf(stderr, "sparrow hash: FIELD and at least one VALUE are required\n\n");
        spw_cli_command_usage(&spw_cmd_hash, stderr);
        return 2;
    }
    enum spw_format format = SPW_FORMAT_JSON;
    spw_format_parse(spw_config_str(cfg, "hash.format"), &format); /* the table's enum: known */
    char errstr[512];
    spw_schema_t *schema = NULL;
    const char *schema_path = spw_config_str(cfg, "hash.schema");
    if (schema_path && schema_path[0] &&
        !(schema = spw_schema_load(schema_path, spw_config_bool(cfg, "hash.schema.strict"), errstr,
                                   sizeof(errstr)))) {
        fprintf(stderr, "sparrow hash: hash.schema: %s\n", errstr);
        spw_cli_positional_free(args);
        return 1;
    }
    uint32_t shards = (uint32_t)spw_config_int(cfg, "hash.shards");
    int rc = 0;
    for (size_t i = 1; i < n; i++) {
        uint32_t id;
        uint64_t key;
        if (spw_feature_hash(schema, format, args[0], args[i], &id, &key, errstr, sizeof(errstr)) !=
            SPW_OK) {
            fprintf(stderr, "sparrow hash: %s\n", errstr);
            rc = 1;
            break;
        }
        if (shards)
            printf("%" PRIu64 "\t%u\n", key, spw_hash_shard(key, shards));
        else
            printf("%" PRIu64 "\n", key);
    }
    spw_cli_positional_free(args);
    spw_schema_destroy(schema);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}

const struct spw_cli_command spw_cmd_hash = {"hash",
                                             "print the feature keys of a field's values",
                                             spw_hash_config_props,
                                             &spw_hash_config_n_props,
                                             aliases,
                                             SPW_CLI_COUNT(aliases),
                                             flags,
                                             SPW_CLI_COUNT(flags),
                                             usage,
                                             run,
                                             NULL};
