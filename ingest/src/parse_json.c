/* JSON-lines parser: one object per line (docs/ARCHITECTURE.md §2) into a sparrow.Example: the
 * fast path (parse_json_fast.c) first, and json-c, the reference, for whatever the fast path hands
 * back. */
#include "ingest_int.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include <json-c/json.h>

#include "sparrow/fmt.h"
#include "sparrow/hash.h"

/*
 * The rules this file implements (the header gives the contract):
 *
 *   member      type                        becomes
 *   label       number | bool (required)    label (true = 1, false = 0)
 *   features    object (required)           one feature per scalar value, in the object's order
 *   weight      object name -> number       per-feature weights (absent names weigh 1)
 *   ts          integer                     event_time_ms
 *   id          integer >= 0 | string       id (a decimal string is its value, other strings
 *                                           are spw_hash_key(0, bytes))
 *   oracle_p    number in [0, 1]            oracle_p
 *   (other)     anything                    ignored, so producers can add members
 *
 * A feature value is hashed as text: a string as its decoded UTF-8 bytes; a number as its JSON
 * literal (json-c keeps a fractional or exponent literal verbatim; an integer is re-printed in
 * decimal, which is its literal for every integer JSON allows except -0, hashed as "0"), so
 * "13" and 13 give one key but 1.50 and 1.5 do not; a bool as "true" / "false" (so "true" and
 * true give one key). null means "no value" and adds nothing; an array adds one feature per
 * element (a multi-valued field), each with the feature's weight. Integers outside
 * (INT64_MIN, UINT64_MAX) and NaN / Infinity (which json-c accepts, JSON does not) are refused,
 * because json-c would give different literals one text. Optional members may be null.
 *
 * The json-c path below defines these rules exactly (duplicate names: the last value wins, in the
 * first one's place; NaN / Infinity; raw control bytes in strings; "1." and "-01"). The fast path
 * gives the same Example, decision and message for every input it takes and hands the rest back
 * (parse_json_fast.c says which); tests/fuzz/fuzz_json_diff.c compares the two.
 */

/* Numbers json-c saturated to its range ends: the literal cannot be recovered, so refuse. */
static bool int_in_range(struct json_object *v)
{
    int64_t i = json_object_get_int64(v);
    if (i == INT64_MIN)
        return false;
    return i < 0 || json_object_get_uint64(v) != UINT64_MAX;
}

static bool is_number(struct json_object *v)
{
    enum json_type t = json_object_get_type(v);
    return t == json_type_int || t == json_type_double;
}

/*
 * The bytes a scalar feature value is hashed as. scratch holds printed integers (>= 24 bytes).
 * *text is NULL for null (no feature). SPW_ERR_INVALID with err naming the feature for values
 * that have no text (objects, nested arrays, out-of-range integers, NaN / Infinity).
 */
static spw_err_t value_text(struct json_object *v, const char *name, bool in_array, char *scratch,
                            const char **text, size_t *len, struct spw_parse_error *err)
{
    char q[48];
    *text = NULL;
    *len = 0;
    switch (json_object_get_type(v)) {
    case json_type_null:
        return SPW_OK;
    case json_type_string:
        *text = json_object_get_string(v);
        *len = (size_t)json_object_get_string_len(v);
        return SPW_OK;
    case json_type_boolean:
        *text = json_object_get_boolean(v) ? "true" : "false";
        *len = strlen(*text);
        return SPW_OK;
    case json_type_int:
        if (!int_in_range(v))
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE,
                                    "feature \"%s\": integer out of range",
                                    spw_ingest__quote(q, name, strlen(name)));
        if (json_object_get_int64(v) < 0)
            *len = spw_fmt_i64(scratch, json_object_get_int64(v));
        else
            *len = spw_fmt_u64(scratch, json_object_get_uint64(v));
        *text = scratch;
        return SPW_OK;
    case json_type_double: {
        /* The literal as parsed (json_object_new_double_s keeps it). */
        const char *s = json_object_get_string(v);
        const char *d = s && s[0] == '-' ? s + 1 : s;
        if (!d || *d < '0' || *d > '9')
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE,
                                    "feature \"%s\": %s is not a JSON number",
                                    spw_ingest__quote(q, name, strlen(name)), s ? s : "value");
        *text = s;
        *len = strlen(s);
        return SPW_OK;
    }
    case json_type_array:
    case json_type_object:
        break;
    }
    return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "feature \"%s\": value is %s",
                            spw_ingest__quote(q, name, strlen(name)),
                            in_array ? "a nested array or object" : "an object");
}

/* Features the object will produce (null values and null elements add none). */
static size_t count_features(struct json_object *features)
{
    size_t n = 0;
    struct lh_entry *e;
    lh_foreach(json_object_get_object(features), e)
    {
        struct json_object *v = lh_entry_v(e);
        if (json_object_get_type(v) == json_type_array) {
            size_t m = json_object_array_length(v);
            for (size_t i = 0; i < m; i++)
                n += json_object_get_type(json_object_array_get_idx(v, i)) != json_type_null;
        } else {
            n += json_object_get_type(v) != json_type_null;
        }
    }
    return n;
}

/* Checks the weight object against the features: numbers, finite as float, known names. */
static spw_err_t check_weights(struct json_object *weight, struct json_object *features,
                               struct spw_parse_error *err)
{
    char q[48];
    struct lh_entry *e;
    lh_foreach(json_object_get_object(weight), e)
    {
        const char *name = lh_entry_k(e);
        struct json_object *v = lh_entry_v(e);
        if (!is_number(v))
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "weight \"%s\": not a number",
                                    spw_ingest__quote(q, name, strlen(name)));
        if (!json_object_object_get_ex(features, name, NULL))
            return spw_ingest__fail(err, SPW_REJECT_BAD_FIELD, "weight \"%s\": no such feature",
                                    spw_ingest__quote(q, name, strlen(name)));
        if (!isfinite((float)json_object_get_double(v)))
            return spw_ingest__fail(err, SPW_REJECT_NONFINITE_WEIGHT,
                                    "weight \"%s\": not a finite float",
                                    spw_ingest__quote(q, name, strlen(name)));
    }
    return SPW_OK;
}

spw_err_t spw_ingest_json_feature(const char *name, struct json_object *value, float weight,
                                  const spw_schema_t *schema,
                                  const struct spw_ingest_limits *limits,
                                  struct spw_ingest_features *out, struct spw_parse_error *err)
{
    char q[48], scratch[24];
    size_t name_len = strlen(name);
    bool array = json_object_get_type(value) == json_type_array;
    size_t n = array ? json_object_array_length(value) : 1;
    if (!array && json_object_get_type(value) == json_type_null)
        return SPW_OK; /* no feature, and no field id looked up for it */

    uint32_t field;
    if (spw_schema_field_id(schema, name, name_len, &field) != SPW_OK)
        return spw_ingest__fail(err, SPW_REJECT_BAD_FIELD, "feature \"%s\": not in the schema",
                                spw_ingest__quote(q, name, name_len));
    if (field > limits->max_field_id)
        return spw_ingest__fail(err, SPW_REJECT_BAD_FIELD,
                                "feature \"%s\": field id %u above limit %u",
                                spw_ingest__quote(q, name, name_len), field, limits->max_field_id);
    for (size_t i = 0; i < n; i++) {
        struct json_object *item = array ? json_object_array_get_idx(value, i) : value;
        const char *text;
        size_t len;
        spw_err_t rc = value_text(item, name, array, scratch, &text, &len, err);
        if (rc != SPW_OK)
            return rc;
        if (!text)
            continue;
        size_t k = out->n++;
        out->fields[k] = field;
        out->keys[k] = spw_ingest_feature_key(field, text, len);
        if (out->weights)
            out->weights[k] = weight;
    }
    return SPW_OK;
}

spw_err_t spw_ingest_json_features(struct json_object *features, struct json_object *weight,
                                   const spw_schema_t *schema,
                                   const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                   struct spw_ingest_features *out, struct spw_parse_error *err)
{
    assert(json_object_get_type(features) == json_type_object);
    memset(out, 0, sizeof(*out));
    spw_err_t rc;
    if (weight) {
        if (json_object_get_type(weight) != json_type_object)
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "\"weight\" is not an object");
        if ((rc = check_weights(weight, features, err)) != SPW_OK)
            return rc;
    }
    size_t n = count_features(features);
    if (n > limits->max_features)
        return spw_ingest__fail(err, SPW_REJECT_TOO_MANY_FEATURES, "%zu features, limit %u", n,
                                limits->max_features);
    if (n > 0) {
        out->fields = spw_arena_alloc(arena, n * sizeof(*out->fields));
        out->keys = spw_arena_alloc(arena, n * sizeof(*out->keys));
        if (!out->fields || !out->keys)
            return SPW_ERR_NOMEM;
        if (weight) {
            out->weights = spw_arena_alloc(arena, n * sizeof(*out->weights));
            if (!out->weights)
                return SPW_ERR_NOMEM;
        }
    }
    struct lh_entry *e;
    lh_foreach(json_object_get_object(features), e)
    {
        const char *name = lh_entry_k(e);
        float w = 1.0f;
        struct json_object *wv;
        if (weight && json_object_object_get_ex(weight, name, &wv))
            w = (float)json_object_get_double(wv);
        if ((rc = spw_ingest_json_feature(name, lh_entry_v(e), w, schema, limits, out, err)) !=
            SPW_OK)
            return rc;
    }
    assert(out->n == n);
    return SPW_OK;
}

/* json-c's UTF-8 check of JSON_TOKENER_VALIDATE_UTF8 (json_tokener_validate_utf8 in json-c
 * 0.16): structure only, a lead byte of 2, 3 or 4 bytes followed by that many continuation
 * bytes; overlongs, surrogates and code points above U+10FFFF pass, as they do there. */
static bool jsonc_utf8_ok(const char *s, size_t len)
{
    unsigned more = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (more) {
            if ((c & 0xc0) != 0x80)
                return false;
            more--;
        } else if (c >= 0x80) {
            if ((c & 0xe0) == 0xc0)
                more = 1;
            else if ((c & 0xf0) == 0xe0)
                more = 2;
            else if ((c & 0xf8) == 0xf0)
                more = 3;
            else
                return false;
        }
    }
    return more == 0;
}

/* The tokener's checks of v, at container depth level (the record is 1), in text order. */
static spw_err_t check_value(struct json_object *v, unsigned level, const char *what,
                             struct spw_parse_error *err)
{
    enum json_type t = json_object_get_type(v);
    if (t == json_type_string) {
        if (!jsonc_utf8_ok(json_object_get_string(v), (size_t)json_object_get_string_len(v)))
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE,
                                    "JSON: invalid utf-8 string in \"%s\"", what);
        return SPW_OK;
    }
    if (t != json_type_object && t != json_type_array)
        return SPW_OK;
    if (level >= SPW_INGEST_JSON_MAX_DEPTH)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "JSON: nesting too deep in \"%s\"",
                                what);
    spw_err_t rc;
    if (t == json_type_array) {
        size_t n = json_object_array_length(v);
        for (size_t i = 0; i < n; i++)
            if ((rc = check_value(json_object_array_get_idx(v, i), level + 1, what, err)) != SPW_OK)
                return rc;
        return SPW_OK;
    }
    struct lh_entry *e;
    lh_foreach(json_object_get_object(v), e)
    {
        const char *name = lh_entry_k(e);
        if (!jsonc_utf8_ok(name, strlen(name)))
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE,
                                    "JSON: invalid utf-8 string in \"%s\"", what);
        if ((rc = check_value(lh_entry_v(e), level + 1, what, err)) != SPW_OK)
            return rc;
    }
    return SPW_OK;
}

spw_err_t spw_ingest_json_features_check(struct json_object *features, struct json_object *weight,
                                         struct spw_parse_error *err)
{
    spw_err_t rc = check_value(features, 2, "features", err);
    if (rc == SPW_OK && weight)
        rc = check_value(weight, 2, "weight", err);
    return rc;
}

/* The optional "id": a non-negative integer, or a string (decimal, else hashed). */
static spw_err_t parse_id(struct json_object *v, Sparrow__Example *ex, struct spw_parse_error *err)
{
    if (json_object_get_type(v) == json_type_int) {
        if (json_object_get_int64(v) < 0 || !int_in_range(v))
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "\"id\" out of range");
        ex->id = json_object_get_uint64(v);
    } else if (json_object_get_type(v) == json_type_string) {
        const char *s = json_object_get_string(v);
        size_t len = (size_t)json_object_get_string_len(v), i = 0;
        uint64_t id = 0;
        bool decimal = len > 0 && len <= 19;
        for (; decimal && i < len; i++) {
            if (s[i] < '0' || s[i] > '9')
                decimal = false;
            else
                id = id * 10 + (uint64_t)(s[i] - '0');
        }
        ex->id = decimal ? id : spw_hash_key(0, s, len);
    } else {
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "\"id\" is not an integer or string");
    }
    ex->has_id = true;
    return SPW_OK;
}

/* The optional "ts": an int64 of milliseconds. */
static spw_err_t parse_ts(struct json_object *v, Sparrow__Example *ex, struct spw_parse_error *err)
{
    if (json_object_get_type(v) != json_type_int)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "\"ts\" is not an integer");
    int64_t ts = json_object_get_int64(v);
    if (ts == INT64_MIN || (ts == INT64_MAX && json_object_get_uint64(v) > INT64_MAX))
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "\"ts\" out of range");
    ex->has_event_time_ms = true;
    ex->event_time_ms = ts;
    return SPW_OK;
}

/* Everything after json-c has produced root; kept apart so the caller frees root in one place. */
static spw_err_t parse_root(struct json_object *root, const spw_schema_t *schema,
                            const struct spw_ingest_limits *limits, spw_arena_t *arena,
                            Sparrow__Example **out, struct spw_parse_error *err)
{
    if (json_object_get_type(root) != json_type_object)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "top level is not an object");

    Sparrow__Example *ex = spw_arena_alloc(arena, sizeof(*ex));
    if (!ex)
        return SPW_ERR_NOMEM;
    sparrow__example__init(ex);

    struct json_object *v;
    if (!json_object_object_get_ex(root, "label", &v))
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "missing \"label\"");
    if (!is_number(v) && json_object_get_type(v) != json_type_boolean)
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "\"label\" is not a number");
    ex->has_label = true;
    ex->label = (float)json_object_get_double(v);

    spw_err_t rc;
    if (json_object_object_get_ex(root, "ts", &v) && v && (rc = parse_ts(v, ex, err)) != SPW_OK)
        return rc;
    if (json_object_object_get_ex(root, "id", &v) && v && (rc = parse_id(v, ex, err)) != SPW_OK)
        return rc;
    if (json_object_object_get_ex(root, "oracle_p", &v) && v) {
        if (!is_number(v))
            return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "\"oracle_p\" is not a number");
        ex->has_oracle_p = true;
        ex->oracle_p = (float)json_object_get_double(v);
    }

    struct json_object *features, *weight = NULL;
    if (!json_object_object_get_ex(root, "features", &features) ||
        json_object_get_type(features) != json_type_object)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "missing \"features\" object");
    if (!json_object_object_get_ex(root, "weight", &weight))
        weight = NULL;

    struct spw_ingest_features f;
    if ((rc = spw_ingest_json_features(features, weight, schema, limits, arena, &f, err)) != SPW_OK)
        return rc;
    ex->fields = f.fields;
    ex->keys = f.keys;
    ex->weights = f.weights;
    ex->n_keys = f.n;
    ex->n_fields = f.n;
    ex->n_weights = f.weights ? f.n : 0;

    if ((rc = spw_ingest_validate(ex, limits, err)) != SPW_OK)
        return rc;
    *out = ex;
    return SPW_OK;
}

struct json_tokener *spw_ingest__json_tokener_new(void)
{
    struct json_tokener *tok = json_tokener_new_ex(SPW_INGEST_JSON_MAX_DEPTH);
    if (tok)
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    return tok;
}

spw_err_t spw_ingest__parse_json_jsonc(struct json_tokener *tok, const char *line, size_t len,
                                       const spw_schema_t *schema,
                                       const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                       Sparrow__Example **out, struct spw_parse_error *err)
{
    assert(tok && (line || len == 0) && limits && arena && out && err);
    *out = NULL;
    if (len > limits->max_record_bytes || len > INT_MAX)
        return spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "line of %zu bytes, limit %zu", len,
                                limits->max_record_bytes);
    json_tokener_reset(tok);
    /* json-c 0.16's reset leaves a pending high surrogate of a line that ended inside "\ud83d"
     * (found by fuzz_json_diff): the next line's first \u escape would pair with it. The field
     * is public, if marked deprecated; nothing else carries over between lines. */
    tok->high_surrogate = 0;
    struct json_object *root = json_tokener_parse_ex(tok, len ? line : "", (int)len);
    if (!root) {
        enum json_tokener_error jerr = json_tokener_get_error(tok);
        if (jerr == json_tokener_continue)
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "JSON ends early");
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "JSON: %s at byte %zu",
                                json_tokener_error_desc(jerr), json_tokener_get_parse_end(tok));
    }
    spw_err_t rc;
    if (json_tokener_get_parse_end(tok) != len)
        rc = spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "data after the object at byte %zu",
                              json_tokener_get_parse_end(tok));
    else
        rc = parse_root(root, schema, limits, arena, out, err);
    json_object_put(root);
    return rc;
}

spw_err_t spw_ingest__parse_json(struct json_tokener *tok, const char *line, size_t len,
                                 const spw_schema_t *schema, const struct spw_ingest_limits *limits,
                                 spw_arena_t *arena, Sparrow__Example **out,
                                 struct spw_parse_error *err)
{
    assert((line || len == 0) && limits && arena && out && err);
    spw_err_t rc = spw_ingest__parse_json_fast(line, len, schema, limits, arena, out, err);
    if (rc != SPW_INGEST__JSON_FALLBACK)
        return rc;
    if (tok)
        return spw_ingest__parse_json_jsonc(tok, line, len, schema, limits, arena, out, err);
    tok = spw_ingest__json_tokener_new();
    if (!tok)
        return SPW_ERR_NOMEM;
    rc = spw_ingest__parse_json_jsonc(tok, line, len, schema, limits, arena, out, err);
    json_tokener_free(tok);
    return rc;
}

spw_err_t spw_parse_json_line(const char *line, size_t len, const spw_schema_t *schema,
                              const struct spw_ingest_limits *limits, spw_arena_t *arena,
                              Sparrow__Example **out, struct spw_parse_error *err)
{
    return spw_ingest__parse_json(NULL, line, len, schema, limits, arena, out, err);
}
