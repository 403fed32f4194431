/* The predict request parser: JSON bodies of one or many examples into key/weight lists. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "sparrow/serve.h"

#include "scan_int.h"

/* A key: a JSON integer or a string of its decimal digits, 0..2^64-1, no leading zeros. */
static bool key_text(const char *t, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20 || (len > 1 && t[0] == '0'))
        return false;
    uint64_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (!spw_serve__scan_is_digit(t[i]))
            return false;
        uint64_t d = (uint64_t)(t[i] - '0');
        if (k > (UINT64_MAX - d) / 10)
            return false;
        k = k * 10 + d;
    }
    *out = k;
    return true;
}

struct example_scan {
    size_t idx;
    bool seen_keys, seen_weights, seen_features, seen_weight;
    const char *features, *features_end, *weight, *weight_end; /* value texts */
    uint64_t *keys;
    size_t n_keys;
    float *weights;
    size_t n_weights;
};

/* The start of member `name`'s array value: false (refused or a syntax error, the value skipped
 * or the scan ended) when it is not an array or nests too deep, else *n its element count. */
static bool array_start(struct spw_serve__scan *s, const struct example_scan *ex, const char *name,
                        uint32_t depth, size_t *n)
{
    spw_serve__scan_ws(s);
    if (s->p >= s->end || *s->p != '[') {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu: \"%s\" is not an array", ex->idx,
                               name);
        spw_serve__scan_skip_value(s, depth);
        return false;
    }
    *n = spw_serve__scan_count_elements(s);
    if (depth + 1 > s->limits->max_depth) {
        spw_serve__scan_syntax(s, "nesting too deep");
        return false;
    }
    return true;
}

static void scan_keys(struct spw_serve__scan *s, struct example_scan *ex, uint32_t depth)
{
    size_t n;
    if (!array_start(s, ex, "keys", depth, &n))
        return;
    if (n > s->limits->max_features) {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID,
                               "example %zu: %zu features, more than the limit %u", ex->idx, n,
                               s->limits->max_features);
        spw_serve__scan_skip_value(s, depth);
        return;
    }
    ex->keys = spw_serve__scan_keeping(s)
                   ? spw_arena_alloc(s->arena, (n ? n : 1) * sizeof(*ex->keys))
                   : NULL;
    if (spw_serve__scan_keeping(s) && !ex->keys)
        spw_serve__scan_refuse(s, SPW_ERR_NOMEM, "out of memory");
    size_t i = SIZE_MAX;
    while (spw_serve__scan_next_element(s, &i)) {
        const char *t;
        size_t len;
        bool ok = false, flag;
        if (*s->p == '"') {
            if (!spw_serve__scan_string(s, &t, &len, &flag))
                return;
            ok = !flag && i < n && spw_serve__scan_keeping(s) && key_text(t, len, &ex->keys[i]);
        } else if (*s->p == '-' || spw_serve__scan_is_digit(*s->p)) {
            if (!spw_serve__scan_number(s, &t, &flag))
                return;
            ok = flag && *t != '-' && i < n && spw_serve__scan_keeping(s) &&
                 key_text(t, (size_t)(s->p - t), &ex->keys[i]);
        } else if (!spw_serve__scan_skip_value(s, depth + 1)) {
            return;
        }
        if (!ok)
            spw_serve__scan_refuse(
                s, SPW_ERR_INVALID,
                "example %zu: key %zu is not an integer in 0..18446744073709551615", ex->idx, i);
    }
    ex->n_keys = i == SIZE_MAX ? 0 : i + 1;
}

static void scan_weights(struct spw_serve__scan *s, struct example_scan *ex, uint32_t depth)
{
    size_t n;
    if (!array_start(s, ex, "weights", depth, &n))
        return;
    /* more weights than features are refused below (by count), not stored */
    bool store = spw_serve__scan_keeping(s) && n <= s->limits->max_features;
    ex->weights = store ? spw_arena_alloc(s->arena, (n ? n : 1) * sizeof(*ex->weights)) : NULL;
    if (store && !ex->weights)
        spw_serve__scan_refuse(s, SPW_ERR_NOMEM, "out of memory");
    size_t i = SIZE_MAX;
    while (spw_serve__scan_next_element(s, &i)) {
        const char *t;
        bool flag, ok = false;
        if (*s->p == '-' || spw_serve__scan_is_digit(*s->p)) {
            if (!spw_serve__scan_number(s, &t, &flag))
                return;
            size_t len = (size_t)(s->p - t);
            if (ex->weights && i < n) {
                /* strtod needs a terminated copy; a number this long is rare (padding) */
                char buf[64];
                char *copy = len < sizeof(buf) ? buf : spw_arena_strndup(s->arena, t, len);
                if (copy == buf) {
                    memcpy(buf, t, len);
                    buf[len] = '\0';
                }
                double d = copy ? strtod(copy, NULL) : NAN;
                ok = isfinite(d) && isfinite((float)d);
                ex->weights[i] = (float)d;
            } else {
                ok = true; /* not stored: refused already, or by count below */
            }
        } else if (!spw_serve__scan_skip_value(s, depth + 1)) {
            return;
        }
        if (!ok)
            spw_serve__scan_refuse(s, SPW_ERR_INVALID,
                                   "example %zu: weight %zu is not a finite number", ex->idx, i);
    }
    ex->n_weights = i == SIZE_MAX ? 0 : i + 1;
}

/* Marks a member seen; a second one of the same name is refused. */
static bool first_time(struct spw_serve__scan *s, bool *seen, size_t idx, const char *name)
{
    if (*seen) {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu: \"%s\" twice", idx, name);
        return false;
    }
    *seen = true;
    return true;
}

/* One member of an example object (or of a body that is one example): false when the name is
 * not an example's (the caller decides). */
static bool example_member(struct spw_serve__scan *s, struct example_scan *ex, const char *name,
                           size_t len, bool escaped, uint32_t depth)
{
    if (spw_serve__scan_name_is(name, len, escaped, "keys")) {
        if (first_time(s, &ex->seen_keys, ex->idx, "keys"))
            scan_keys(s, ex, depth);
        else
            spw_serve__scan_skip_value(s, depth);
    } else if (spw_serve__scan_name_is(name, len, escaped, "weights")) {
        if (first_time(s, &ex->seen_weights, ex->idx, "weights"))
            scan_weights(s, ex, depth);
        else
            spw_serve__scan_skip_value(s, depth);
    } else if (spw_serve__scan_name_is(name, len, escaped, "features") ||
               spw_serve__scan_name_is(name, len, escaped, "weight")) {
        bool f = len == 8; /* "features" */
        const char **at = f ? &ex->features : &ex->weight;
        const char **at_end = f ? &ex->features_end : &ex->weight_end;
        first_time(s, f ? &ex->seen_features : &ex->seen_weight, ex->idx,
                   f ? "features" : "weight");
        spw_serve__scan_ws(s);
        *at = s->p;
        spw_serve__scan_skip_value(s, depth);
        *at_end = s->p;
    } else if (spw_serve__scan_name_is(name, len, escaped, "id") ||
               spw_serve__scan_name_is(name, len, escaped, "ts")) {
        spw_serve__scan_skip_value(s, depth);
    } else {
        return false;
    }
    return true;
}

/* A "features"/"weight" value's text through json-c (already checked by the scan; depth: its
 * nesting in the body). NULL on failure (refused). */
static struct json_object *json_of(struct spw_serve__scan *s, const char *text, const char *end)
{
    if (!s->tok) {
        s->tok = json_tokener_new_ex((int)s->limits->max_depth);
        if (!s->tok) {
            spw_serve__scan_refuse(s, SPW_ERR_NOMEM, "out of memory");
            return NULL;
        }
        json_tokener_set_flags(s->tok, JSON_TOKENER_STRICT);
    }
    json_tokener_reset(s->tok);
    struct json_object *v = json_tokener_parse_ex(s->tok, text, (int)(end - text));
    if (!v || json_tokener_get_error(s->tok) != json_tokener_success) {
        json_object_put(v);
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "malformed JSON: %s",
                               json_tokener_error_desc(json_tokener_get_error(s->tok)));
        return NULL;
    }
    return v;
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

/* The checks of a whole example, in the order of the documentation, into *out. */
static void finish_example(struct spw_serve__scan *s, struct example_scan *ex,
                           struct spw_serve_example *out)
{
    if (!spw_serve__scan_keeping(s))
        return;
    size_t idx = ex->idx;
    if (ex->features && ex->seen_keys) {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu: both \"features\" and \"keys\"",
                               idx);
    } else if (ex->features) {
        if (ex->seen_weights) {
            spw_serve__scan_refuse(s, SPW_ERR_INVALID,
                                   "example %zu: \"weights\" goes with \"keys\" (use \"weight\")",
                                   idx);
            return;
        }
        struct json_object *features = json_of(s, ex->features, ex->features_end);
        struct json_object *weight =
            features && ex->weight ? json_of(s, ex->weight, ex->weight_end) : NULL;
        if (features && (weight || !ex->weight)) {
            spw_err_t rc = parse_features(features, weight, s->limits, s->schema, s->arena, out,
                                          idx, s->errstr, s->errstr_size);
            if (rc != SPW_OK)
                s->refused = rc; /* errstr filled (SPW_ERR_NOMEM: by the caller) */
        }
        json_object_put(features);
        json_object_put(weight);
    } else if (ex->seen_keys) {
        if (ex->weight) {
            spw_serve__scan_refuse(
                s, SPW_ERR_INVALID,
                "example %zu: \"weight\" goes with \"features\" (use \"weights\")", idx);
            return;
        }
        if (ex->seen_weights && ex->n_weights != ex->n_keys) {
            spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu: %zu weights for %zu keys", idx,
                                   ex->n_weights, ex->n_keys);
            return;
        }
        float *w = ex->weights;
        if (!ex->seen_weights) {
            w = spw_arena_alloc(s->arena, (ex->n_keys ? ex->n_keys : 1) * sizeof(*w));
            if (!w) {
                spw_serve__scan_refuse(s, SPW_ERR_NOMEM, "out of memory");
                return;
            }
            for (size_t i = 0; i < ex->n_keys; i++)
                w[i] = 1.0f;
        }
        out->n = ex->n_keys;
        out->keys = ex->keys;
        out->weights = w;
        out->fields = NULL;
    } else {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu: needs \"features\" or \"keys\"",
                               idx);
    }
}

static void scan_example(struct spw_serve__scan *s, size_t idx, struct spw_serve_example *out,
                         uint32_t depth)
{
    spw_serve__scan_ws(s);
    if (s->p >= s->end || *s->p != '{') {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu is not an object", idx);
        spw_serve__scan_skip_value(s, depth);
        return;
    }
    if (depth + 1 > s->limits->max_depth) {
        spw_serve__scan_syntax(s, "nesting too deep");
        return;
    }
    struct example_scan ex = {.idx = idx};
    const char *name;
    size_t len;
    bool first = true, escaped;
    while (spw_serve__scan_next_member(s, &first, &name, &len, &escaped)) {
        if (!example_member(s, &ex, name, len, escaped, depth + 1)) {
            spw_serve__scan_refuse(s, SPW_ERR_INVALID, "example %zu: unknown field \"%.*s\"", idx,
                                   len > 64 ? 64 : (int)len, name);
            spw_serve__scan_skip_value(s, depth + 1);
        }
    }
    finish_example(s, &ex, out);
}

static void scan_examples(struct spw_serve__scan *s, struct spw_serve_request *out)
{
    spw_serve__scan_ws(s);
    if (s->p >= s->end || *s->p != '[') {
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "\"examples\" is not an array");
        spw_serve__scan_skip_value(s, 1);
        return;
    }
    if (2 > s->limits->max_depth) {
        spw_serve__scan_syntax(s, "nesting too deep");
        return;
    }
    /* Grown by doubling in the arena rather than counted ahead: a pre-count would read the
     * whole body a second time. */
    size_t max = s->limits->max_examples, cap = 0;
    struct spw_serve_example scratch;
    size_t i = SIZE_MAX;
    while (spw_serve__scan_next_element(s, &i)) {
        if (i >= max) { /* refused below, with the count */
            spw_serve__scan_skip_value(s, 2);
            continue;
        }
        if (i >= cap && spw_serve__scan_keeping(s)) {
            size_t cap2 = cap ? cap * 2 : 16;
            cap2 = cap2 < max ? cap2 : max;
            struct spw_serve_example *grown = spw_arena_alloc(s->arena, cap2 * sizeof(*grown));
            if (!grown) {
                spw_serve__scan_refuse(s, SPW_ERR_NOMEM, "out of memory");
            } else {
                if (cap)
                    memcpy(grown, out->examples, cap * sizeof(*grown));
                out->examples = grown;
                cap = cap2;
            }
        }
        memset(&scratch, 0, sizeof(scratch));
        bool keep = i < cap && spw_serve__scan_keeping(s);
        if (keep)
            memset(&out->examples[i], 0, sizeof(out->examples[i]));
        scan_example(s, i, keep ? &out->examples[i] : &scratch, 2);
    }
    size_t n = i == SIZE_MAX ? 0 : i + 1;
    if (n == 0 || n > max)
        spw_serve__scan_refuse(s, SPW_ERR_INVALID, "%zu examples (1..%zu allowed)", n, max);
    out->n = n;
}

spw_err_t spw_serve_request_parse(const char *body, size_t len,
                                  const struct spw_serve_limits *limits, const spw_schema_t *schema,
                                  spw_arena_t *arena, struct spw_serve_request *out, char *errstr,
                                  size_t errstr_size)
{
    if (len == 0 || len > INT32_MAX)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        len ? "body too large" : "empty body");
    if (errstr_size)
        errstr[0] = '\0';
    struct spw_serve__scan s = {.p = body,
                                .end = body + len,
                                .limits = limits,
                                .schema = schema,
                                .arena = arena,
                                .errstr = errstr,
                                .errstr_size = errstr_size};
    out->n = 0;
    out->examples = NULL;
    spw_serve__scan_ws(&s);
    if (s.p < s.end && *s.p != '{') {
        spw_serve__scan_skip_value(&s, 0);
        spw_serve__scan_refuse(&s, SPW_ERR_INVALID, "the body is not a JSON object");
    } else if (s.p < s.end && limits->max_depth < 1) {
        spw_serve__scan_syntax(&s, "nesting too deep");
    } else if (s.p < s.end) {
        /* members of the body: "examples" alone, or those of one example */
        struct example_scan ex = {.idx = 0};
        bool first = true, escaped, examples = false;
        size_t others = 0;
        const char *name;
        size_t nlen;
        while (spw_serve__scan_next_member(&s, &first, &name, &nlen, &escaped)) {
            if (spw_serve__scan_name_is(name, nlen, escaped, "examples")) {
                if (examples)
                    spw_serve__scan_refuse(&s, SPW_ERR_INVALID, "\"examples\" twice");
                examples = true;
                if (others == 0 && spw_serve__scan_keeping(&s))
                    scan_examples(&s, out);
                else
                    spw_serve__scan_skip_value(&s, 1);
                continue;
            }
            others++;
            if (examples) {
                spw_serve__scan_refuse(&s, SPW_ERR_INVALID, "\"examples\" must be the only field");
                spw_serve__scan_skip_value(&s, 1);
            } else if (!example_member(&s, &ex, name, nlen, escaped, 1)) {
                spw_serve__scan_refuse(&s, SPW_ERR_INVALID, "example 0: unknown field \"%.*s\"",
                                       nlen > 64 ? 64 : (int)nlen, name);
                spw_serve__scan_skip_value(&s, 1);
            }
        }
        if (examples && others)
            spw_serve__scan_refuse(&s, SPW_ERR_INVALID, "\"examples\" must be the only field");
        else if (!examples && spw_serve__scan_keeping(&s)) {
            out->examples = spw_arena_calloc(arena, 1, sizeof(*out->examples));
            if (!out->examples)
                spw_serve__scan_refuse(&s, SPW_ERR_NOMEM, "out of memory");
            else {
                finish_example(&s, &ex, &out->examples[0]);
                out->n = 1;
            }
        }
    } else {
        spw_serve__scan_syntax(&s, "");
    }
    /* Nothing but white space may follow the value. */
    spw_serve__scan_ws(&s);
    if (!s.bad && s.p < s.end)
        spw_serve__scan_syntax(&s, "trailing bytes after the value");
    if (s.tok)
        json_tokener_free(s.tok);
    if (s.bad)
        return SPW_ERR_INVALID;
    return s.refused;
}
