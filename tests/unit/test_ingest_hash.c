/* Unit tests of ingest's exported feature hashing: the same keys, fields and weights as the JSON
 * line parser (fast path and json-c) gives the same event, and the tokener's checks. */
#include "test_main.h" /* cmocka and what it needs first */

#include <string.h>

#include <json-c/json.h>

#include "sparrow/hash.h"
#include "sparrow/ingest.h"

static const char *const FEATURES[] = {
    "{\"user\":\"u1\",\"hour\":13,\"price\":1.50,\"tag\":\"a\\/b\"}",
    "{\"a\":-0,\"b\":1E5,\"c\":true,\"d\":null,\"e\":[1,null,\"2\",false],\"f\":\"\\u00e9\"}",
    "{\"x\":\"y\",\"x\":\"z\",\"n\":18446744073709551614,\"m\":-9223372036854775807}",
    "{}",
};

/* The parser's Example for {"label":1,"features":F[,"weight":W]} against the exported step. */
static void compare(const char *features, const char *weight)
{
    char line[1024];
    snprintf(line, sizeof(line), "{\"label\":1,\"features\":%s%s%s}", features,
             weight ? ",\"weight\":" : "", weight ? weight : "");
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    Sparrow__Example *ex = NULL;
    struct spw_parse_error perr;
    if (spw_parse_json_line(line, strlen(line), NULL, &limits, arena, &ex, &perr) != SPW_OK)
        fail_msg("%s: %s", line, perr.message);

    struct json_object *f = json_tokener_parse(features);
    struct json_object *w = weight ? json_tokener_parse(weight) : NULL;
    assert_non_null(f);
    struct spw_ingest_features got;
    assert_int_equal(spw_ingest_json_features_check(f, w, &perr), SPW_OK);
    assert_int_equal(spw_ingest_json_features(f, w, NULL, &limits, arena, &got, &perr), SPW_OK);
    assert_int_equal(got.n, ex->n_keys);
    assert_int_equal(got.weights != NULL, ex->n_weights != 0);
    for (size_t i = 0; i < got.n; i++) {
        assert_true(got.keys[i] == ex->keys[i]);
        assert_true(got.fields[i] == ex->fields[i]);
        if (got.weights)
            assert_true(got.weights[i] == ex->weights[i]);
    }
    json_object_put(f);
    json_object_put(w);
    spw_arena_destroy(arena);
}

static void test_ingest_hash_matches_parser(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(FEATURES) / sizeof(FEATURES[0]); i++) {
        compare(FEATURES[i], NULL);
        compare(FEATURES[i], "{}");
    }
    compare(FEATURES[0], "{\"user\":0.5,\"price\":2}");
    compare(FEATURES[1], "{\"e\":3}");
}

/* One field's values, by the documented rule: hash64(field, text). */
static void test_ingest_hash_one_field(void **state)
{
    (void)state;
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    struct json_object *v = json_tokener_parse("[13,\"13\",true,null,1.50]");
    uint32_t fields[4];
    uint64_t keys[4];
    float weights[4];
    struct spw_ingest_features out = {0, fields, keys, weights};
    struct spw_parse_error perr;
    assert_int_equal(spw_ingest_json_feature("hour", v, 0.25f, NULL, &limits, &out, &perr), SPW_OK);
    uint32_t f = spw_hash_field_name("hour", 4);
    assert_int_equal(out.n, 4);
    assert_true(keys[0] == spw_ingest_feature_key(f, "13", 2));
    assert_true(keys[1] == keys[0]); /* "13" and 13 give one key */
    assert_true(keys[2] == spw_hash_key(f, "true", 4));
    assert_true(keys[3] == spw_hash_key(f, "1.50", 4));
    assert_true(fields[3] == f && weights[3] == 0.25f);
    json_object_put(v);

    limits.max_field_id = 10;
    v = json_tokener_parse("1");
    out.n = 0;
    assert_int_equal(spw_ingest_json_feature("hour", v, 1.0f, NULL, &limits, &out, &perr),
                     SPW_ERR_INVALID);
    assert_int_equal(perr.reason, SPW_REJECT_BAD_FIELD);
    json_object_put(v);
}

/* The checks the parser's tokener makes: json-c's UTF-8 structure, nesting. */
static void test_ingest_hash_check(void **state)
{
    (void)state;
    struct spw_parse_error perr;
    struct json_object *f = json_object_new_object();
    json_object_object_add(f, "a", json_object_new_string_len("\xc3", 1)); /* truncated */
    assert_int_equal(spw_ingest_json_features_check(f, NULL, &perr), SPW_ERR_INVALID);
    assert_int_equal(perr.reason, SPW_REJECT_UNDECODABLE);
    json_object_object_add(f, "a", json_object_new_string_len("\xc0\xaf", 2)); /* overlong */
    assert_int_equal(spw_ingest_json_features_check(f, NULL, &perr), SPW_OK);
    json_object_put(f);
    f = json_tokener_parse("{\"a\":[[[[[1]]]]]}"); /* seven containers with the record */
    assert_int_equal(spw_ingest_json_features_check(f, NULL, &perr), SPW_OK);
    json_object_put(f);
    f = json_tokener_parse("{\"a\":[[[[[[1]]]]]]}");
    assert_int_equal(spw_ingest_json_features_check(f, NULL, &perr), SPW_ERR_INVALID);
    json_object_put(f);
}

SPW_TEST_MAIN(test_ingest_hash_matches_parser, test_ingest_hash_one_field, test_ingest_hash_check)
