/* tools: `sparrow hash`, the feature key (and shard) of a field's raw values, computed as the
 * trainer's file readers, ingest and serve compute them (docs/FORMATS.md, "Key hash"). */
#ifndef SPARROW_FEATURE_HASH_H
#define SPARROW_FEATURE_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/ingest.h"

/* The property table of `sparrow hash` (tools/src/feature_hash.c). */
extern const struct spw_config_prop spw_hash_config_props[];
extern const size_t spw_hash_config_n_props;

/*
 * The key of one raw value of a field, exactly as the readers of format hash it:
 *   json (and pb, whose producers hash as the JSON reader does): field id = the schema's id for
 *        field (schema may be NULL), else spw_hash_field_name(field); key =
 *        spw_ingest_feature_key(field id, value bytes), value being the JSON string's (or a
 *        number's literal) text;
 *   criteo: field must name a column I1..I13 or C1..C26 (its id is spw_hash_field_name of the
 *        name); an integer column's value must be a decimal integer and is bucketed
 *        (spw_hash_criteo_bucket) and hashed as the bucket's decimal text; C columns as their text.
 * SPW_ERR_INVALID with errstr for a Criteo field that names no column or an integer column's
 * value that is not an integer, SPW_ERR_NOT_FOUND for a name a strict schema lacks. Pure,
 * thread-safe.
 */
spw_err_t spw_feature_hash(const spw_schema_t *schema, enum spw_format format, const char *field,
                           const char *value, uint32_t *field_id, uint64_t *key, char *errstr,
                           size_t errstr_size);

#endif
