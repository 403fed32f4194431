/* Validation of decoded examples against the named ingest limits, and the error helpers the
 * parsers share. */
#include "ingest_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sparrow/config.h"
#include "sparrow/hash.h"

void spw_ingest_limits_default(struct spw_ingest_limits *limits)
{
    limits->max_features = 4096;
    limits->max_field_id = SPW_FIELD_ID_MAX;
    limits->max_record_bytes = 1u << 20;
    limits->binary_label = true;
}

void spw_ingest_limits_from_config(const struct spw_config *cfg, const char *prefix,
                                   struct spw_ingest_limits *limits)
{
    char name[96];
    snprintf(name, sizeof(name), "%s.max_features", prefix);
    limits->max_features = (uint32_t)spw_config_int(cfg, name);
    snprintf(name, sizeof(name), "%s.max_field_id", prefix);
    limits->max_field_id = (uint32_t)spw_config_int(cfg, name);
    snprintf(name, sizeof(name), "%s.max_record_bytes", prefix);
    limits->max_record_bytes = (size_t)spw_config_int(cfg, name);
    snprintf(name, sizeof(name), "%s.float_label", prefix);
    limits->binary_label = !spw_config_bool(cfg, name);
}

spw_err_t spw_ingest__fail(struct spw_parse_error *err, enum spw_reject_reason reason,
                           const char *fmt, ...)
{
    err->reason = reason;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return SPW_ERR_INVALID;
}

char *spw_ingest__quote(char *dst, const char *name, size_t len)
{
    size_t n = len > 40 ? 40 : len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        dst[i] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? (char)c : '?';
    }
    if (n < len) {
        memcpy(dst + n, "...", 4);
    } else {
        dst[n] = '\0';
    }
    return dst;
}

spw_err_t spw_ingest_validate(const Sparrow__Example *ex, const struct spw_ingest_limits *limits,
                              struct spw_parse_error *err)
{
    assert(ex && limits && err);
    if (!ex->has_label)
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "missing label");
    if (!isfinite(ex->label))
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "label is %s",
                                isnan(ex->label) ? "NaN" : "infinite");
    if (limits->binary_label && ex->label != 0.0f && ex->label != 1.0f)
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "label %.9g is not 0 or 1",
                                (double)ex->label);
    if (ex->n_fields != ex->n_keys)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "%zu field ids for %zu keys",
                                ex->n_fields, ex->n_keys);
    if (ex->n_weights != 0 && ex->n_weights != ex->n_keys)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "%zu weights for %zu keys",
                                ex->n_weights, ex->n_keys);
    if (ex->n_keys > limits->max_features)
        return spw_ingest__fail(err, SPW_REJECT_TOO_MANY_FEATURES, "%zu features, limit %u",
                                ex->n_keys, limits->max_features);
    for (size_t i = 0; i < ex->n_fields; i++) {
        if (ex->fields[i] > limits->max_field_id)
            return spw_ingest__fail(err, SPW_REJECT_BAD_FIELD,
                                    "feature %zu: field id %u above limit %u", i, ex->fields[i],
                                    limits->max_field_id);
    }
    for (size_t i = 0; i < ex->n_weights; i++) {
        if (!isfinite(ex->weights[i]))
            return spw_ingest__fail(err, SPW_REJECT_NONFINITE_WEIGHT,
                                    "feature %zu (field %u): weight is %s", i, ex->fields[i],
                                    isnan(ex->weights[i]) ? "NaN" : "infinite");
    }
    if (ex->has_oracle_p && !(ex->oracle_p >= 0.0f && ex->oracle_p <= 1.0f))
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "oracle_p %.9g outside [0, 1]",
                                (double)ex->oracle_p);
    /* The exact size costs a pass over the fields; skip it when a bound already fits: per
     * feature at most 5 (field varint) + 8 (key) + 4 (weight) bytes, and 96 for the rest (id,
     * label, time, oracle_p, three packed-field headers). n_keys <= max_features (a u32) here,
     * so the bound cannot overflow. Unknown fields kept from a pb input are not bounded. */
    size_t bound = 96 + ex->n_keys * 17;
    size_t size = 0;
    if (bound > limits->max_record_bytes || ex->base.n_unknown_fields > 0)
        size = sparrow__example__get_packed_size(ex);
    if (size > limits->max_record_bytes)
        return spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "example of %zu bytes, limit %zu", size,
                                limits->max_record_bytes);
    err->reason = SPW_REJECT_NONE;
    err->message[0] = '\0';
    return SPW_OK;
}
