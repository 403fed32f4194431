/* `sparrow hash`'s library (sparrow/feature_hash.h): raw values to feature keys. */
#include "sparrow/feature_hash.h"

#include <stdio.h>
#include <string.h>

#include "sparrow/fmt.h"
#include "sparrow/hash.h"
#include "sparrow/ingest.h"

const struct spw_config_prop spw_hash_config_props[] = {
    {"hash.args", SPW_CONFIG_STRING, NULL, 0, 16384, NULL,
     "The command line's bare arguments, FIELD then one or more VALUEs (set from the command line: "
     "space-separated, each %-encoded)."},
    {"hash.format", SPW_CONFIG_ENUM, "json", 0, 0, "json|criteo|pb",
     "Whose hashing: json (and pb) hash a value's text under the field's id; criteo takes FIELD "
     "as a column I1..I13 or C1..C26 and buckets integer columns as the Criteo reader does."},
    {"hash.schema", SPW_CONFIG_STRING, NULL, 0, 4000, NULL,
     "Schema file (`name = id` lines, as trainer.schema / ingest.schema / serve.schema) mapping "
     "FIELD to its id; unset: names are hashed."},
    {"hash.schema.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "A FIELD absent from the schema is an error (as trainer.schema.strict)."},
    {"hash.shards", SPW_CONFIG_INT, "0", 0, 65536, NULL,
     "When above 0, each line also gives the key's shard among this many "
     "(jump_hash(mix64(key), n), as pserver.shards places it)."},
    SPW_CONFIG_PROP_LOG_LEVEL("warn"),
};
const size_t spw_hash_config_n_props =
    sizeof(spw_hash_config_props) / sizeof(spw_hash_config_props[0]);

spw_err_t spw_feature_hash(const spw_schema_t *schema, enum spw_format format, const char *field,
                           const char *value, uint32_t *field_id, uint64_t *key, char *errstr,
                           size_t errstr_size)
{
    size_t flen = strlen(field);
    if (format != SPW_FORMAT_CRITEO) {
        if (spw_schema_field_id(schema, field, flen, field_id) != SPW_OK) {
            snprintf(errstr, errstr_size, "field \"%s\" is not in the strict schema", field);
            return SPW_ERR_NOT_FOUND;
        }
        *key = spw_ingest_feature_key(*field_id, value, strlen(value));
        return SPW_OK;
    }
    unsigned col = 0;
    int64_t n = 0;
    bool integer = field[0] == 'I';
    if ((field[0] != 'I' && field[0] != 'C') ||
        !spw_parse_criteo_int(field + 1, strlen(field + 1), &n) || field[1] == '0' ||
        field[1] == '-' || n < 1 || n > (integer ? 13 : 26)) {
        snprintf(errstr, errstr_size, "criteo: field \"%s\" names no column (I1..I13, C1..C26)",
                 field);
        return SPW_ERR_INVALID;
    }
    col = (unsigned)n - 1 + (integer ? 0 : 13);
    *field_id = spw_criteo_field_id(col);
    if (!integer) {
        *key = spw_hash_key(*field_id, value, strlen(value));
        return SPW_OK;
    }
    int64_t v;
    if (!spw_parse_criteo_int(value, strlen(value), &v)) {
        snprintf(errstr, errstr_size, "criteo: %s: \"%s\" is not an integer", field, value);
        return SPW_ERR_INVALID;
    }
    char digits[24];
    size_t len = spw_fmt_i64(digits, spw_hash_criteo_bucket(v));
    *key = spw_hash_key(*field_id, digits, len);
    return SPW_OK;
}
