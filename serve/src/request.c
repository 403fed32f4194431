/* The predict request parser: JSON bodies of one or many examples into key/weight lists. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "sparrow/serve.h"

/* A key given as a JSON integer or a decimal string, 0..2^64-1. */
static bool parse_key(struct json_object *v, uint64_t *out)
{
    enum json_type t = json_object_get_type(v);
    if (t == json_type_int) {
        int64_t i = json_object_get_int64(v);
        if (i >= 0 && i != INT64_MAX) {
            *out = (uint64_t)i;
            return true;
        }
        if (i < 0)
            return false;
        /* Saturated at INT64_MAX: json-c holds larger ones as uint64, saturating at UINT64_MAX
         * (refused as ambiguous, as ingest does; the decimal string form takes it). */
        uint64_t u = json_object_get_uint64(v);
        if (u == UINT64_MAX)
            return false;
        *out = u;
        return true;
    }
    if (t != json_type_string)
        return false;
    const char *s = json_object_get_string(v);
    size_t len = (size_t)json_object_get_string_len(v);
    if (len == 0 || len > 20 || strlen(s) != len)
        return false;
    uint64_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (k > (UINT64_MAX - d) / 10)
            return false;
        k = k * 10 + d;
    }
    if (len > 1 && s[0] == '0')
        return false;
    *out = k;
    return true;
}

static spw_err_t parse_keys(struct json_object *ex, struct json_object *keys,
                            struct json_object *weights, const struct spw_serve_limits *limits,
                            spw_arena_t *arena, struct spw_serve_example *out, size_t idx,
                            char *errstr, size_t errstr_size)
{
    (void)ex;
    if (!json_object_is_type(keys, json_type_array))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "example %zu: \"keys\" is not an array", idx);
    size_t n = json_object_array_length(keys);
    if (n > limits->max_features)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "example %zu: %zu features, more than the limit %u", idx, n,
                        limits->max_features);
    if (weights && !json_object_is_type(weights, json_type_array))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "example %zu: \"weights\" is not an array", idx);
    if (weights && json_object_array_length(weights) != n)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "example %zu: %zu weights for %zu keys", idx,
                        json_object_array_length(weights), n);
    uint64_t *k = spw_arena_alloc(arena, (n ? n : 1) * sizeof(*k));
    float *w = spw_arena_alloc(arena, (n ? n : 1) * sizeof(*w));
    if (!k || !w)
        return SPW_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!parse_key(json_object_array_get_idx(keys, i), &k[i]))
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: key %zu is not an integer in 0..18446744073709551615",
                            idx, i);
        w[i] = 1.0f;
        if (weights) {
            struct json_object *wv = json_object_array_get_idx(weights, i);
            enum json_type t = json_object_get_type(wv);
            double d = json_object_get_double(wv);
            if ((t != json_type_int && t != json_type_double) || !isfinite(d) ||
                !isfinite((float)d))
                return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                                "example %zu: weight %zu is not a finite number", idx, i);
            w[i] = (float)d;
        }
    }
    out->n = n;
    out->keys = k;
    out->weights = w;
    return SPW_OK;
}

/* Hashes "features"/"weight" exactly as ingest hashes the same event, through ingest's own step
 * (spw_ingest_json_features), after the checks ingest's tokener would have made of them. */
static spw_err_t parse_features(struct json_object *features, struct json_object *weight,
                                const struct spw_serve_limits *limits, const spw_schema_t *schema,
                                spw_arena_t *arena, struct spw_serve_example *out, size_t idx,
                                char *errstr, size_t errstr_size)
{
    if (!json_object_is_type(features, json_type_object))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "example %zu: \"features\" is not an object", idx);
    struct spw_ingest_limits il;
    spw_ingest_limits_default(&il);
    il.max_features = limits->max_features;
    struct spw_ingest_features f;
    struct spw_parse_error perr;
    spw_err_t rc = spw_ingest_json_features_check(features, weight, &perr);
    if (rc == SPW_OK)
        rc = spw_ingest_json_features(features, weight, schema, &il, arena, &f, &perr);
    if (rc == SPW_ERR_INVALID)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "example %zu: %s: %s", idx,
                        spw_reject_reason_name(perr.reason), perr.message);
    if (rc != SPW_OK)
        return rc;
    out->n = f.n;
    out->keys = f.keys;
    out->fields = f.fields;
    float *w = spw_arena_alloc(arena, (f.n ? f.n : 1) * sizeof(*w));
    if (!w)
        return SPW_ERR_NOMEM;
    for (size_t i = 0; i < f.n; i++)
        w[i] = f.weights ? f.weights[i] : 1.0f;
    out->weights = w;
    return SPW_OK;
}

static spw_err_t parse_example(struct json_object *ex, const struct spw_serve_limits *limits,
                               const spw_schema_t *schema, spw_arena_t *arena,
                               struct spw_serve_example *out, size_t idx, char *errstr,
                               size_t errstr_size)
{
    if (!json_object_is_type(ex, json_type_object))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "example %zu is not an object", idx);
    struct json_object *features = NULL, *weight = NULL, *keys = NULL, *weights = NULL;
    json_object_object_foreach(ex, name, val)
    {
        if (strcmp(name, "features") == 0)
            features = val;
        else if (strcmp(name, "weight") == 0)
            weight = val;
        else if (strcmp(name, "keys") == 0)
            keys = val;
        else if (strcmp(name, "weights") == 0)
            weights = val;
        else if (strcmp(name, "id") == 0 || strcmp(name, "ts") == 0)
            continue;
        else
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: unknown field \"%.64s\"", idx, name);
    }
    if (features && keys)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "example %zu: both \"features\" and \"keys\"", idx);
    if (features) {
        if (weights)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: \"weights\" goes with \"keys\" (use \"weight\")", idx);
        return parse_features(features, weight, limits, schema, arena, out, idx, errstr,
                              errstr_size);
    }
    if (keys) {
        if (weight)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: \"weight\" goes with \"features\" (use \"weights\")",
                            idx);
        return parse_keys(ex, keys, weights, limits, arena, out, idx, errstr, errstr_size);
    }
    return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                    "example %zu: needs \"features\" or \"keys\"", idx);
}

spw_err_t spw_serve_request_parse(const char *body, size_t len,
                                  const struct spw_serve_limits *limits, const spw_schema_t *schema,
                                  spw_arena_t *arena, struct spw_serve_request *out, char *errstr,
                                  size_t errstr_size)
{
    if (len == 0 || len > INT32_MAX)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        len ? "body too large" : "empty body");
    struct json_tokener *tok = json_tokener_new_ex((int)limits->max_depth);
    if (!tok)
        return SPW_ERR_NOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *root = json_tokener_parse_ex(tok, body, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    spw_err_t rc = SPW_OK;
    if (!root || jerr != json_tokener_success) {
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "malformed JSON: %s",
                      jerr == json_tokener_continue ? "unexpected end of input"
                                                    : json_tokener_error_desc(jerr));
        goto out_free_tok;
    }
    /* Nothing but white space may follow the value. */
    for (size_t i = json_tokener_get_parse_end(tok); i < len; i++) {
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\n' && body[i] != '\r') {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "malformed JSON: trailing bytes after the value");
            goto out_put_root;
        }
    }
    if (!json_object_is_type(root, json_type_object)) {
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "the body is not a JSON object");
        goto out_put_root;
    }
    struct json_object *examples = NULL;
    if (json_object_object_get_ex(root, "examples", &examples)) {
        if (json_object_object_length(root) != 1) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "\"examples\" must be the only field");
            goto out_put_root;
        }
        if (!json_object_is_type(examples, json_type_array)) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "\"examples\" is not an array");
            goto out_put_root;
        }
        size_t n = json_object_array_length(examples);
        if (n == 0 || n > limits->max_examples) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%zu examples (1..%u allowed)", n,
                          limits->max_examples);
            goto out_put_root;
        }
        out->examples = spw_arena_calloc(arena, n, sizeof(*out->examples));
        if (!out->examples) {
            rc = SPW_ERR_NOMEM;
            goto out_put_root;
        }
        for (size_t i = 0; i < n && rc == SPW_OK; i++)
            rc = parse_example(json_object_array_get_idx(examples, i), limits, schema, arena,
                               &out->examples[i], i, errstr, errstr_size);
        out->n = n;
    } else {
        out->examples = spw_arena_calloc(arena, 1, sizeof(*out->examples));
        if (!out->examples) {
            rc = SPW_ERR_NOMEM;
            goto out_put_root;
        }
        rc = parse_example(root, limits, schema, arena, &out->examples[0], 0, errstr, errstr_size);
        out->n = 1;
    }
out_put_root:
    json_object_put(root);
out_free_tok:
    json_tokener_free(tok);
    return rc;
}
