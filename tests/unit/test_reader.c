/* Unit tests for ingest: JSON, Criteo and pb parsers, validation, schema files and the reader. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <json-c/json_tokener.h>

#include "sparrow/hash.h"
#include "sparrow/ingest.h"
#include "sparrow/wire.h"

#include "ingest_int.h"

/* ---- helpers ---- */

static struct spw_ingest_limits limits_default(void)
{
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    return limits;
}

static uint64_t key_of(const char *field_name, const char *value)
{
    return spw_hash_key(spw_hash_field_name(field_name, strlen(field_name)), value, strlen(value));
}

static Sparrow__Example *json_ok(spw_arena_t *arena, const char *line, const spw_schema_t *schema,
                                 const struct spw_ingest_limits *limits)
{
    Sparrow__Example *ex = NULL;
    struct spw_parse_error err;
    spw_err_t rc = spw_parse_json_line(line, strlen(line), schema, limits, arena, &ex, &err);
    if (rc != SPW_OK)
        print_error("unexpected reject of %s: %s\n", line, err.message);
    assert_int_equal(rc, SPW_OK);
    assert_non_null(ex);
    return ex;
}

/* Asserts that a record is refused for reason with a message containing needle. */
static void check_reject(spw_err_t rc, const struct spw_parse_error *err, const char *what,
                         enum spw_reject_reason reason, const char *needle)
{
    if (rc != SPW_ERR_INVALID || err->reason != reason || !strstr(err->message, needle))
        print_error("%s: rc %d reason %s message \"%s\"; wanted %s with \"%s\"\n", what, rc,
                    spw_reject_reason_name(err->reason), err->message,
                    spw_reject_reason_name(reason), needle);
    assert_int_equal(rc, SPW_ERR_INVALID);
    assert_int_equal(err->reason, reason);
    assert_non_null(strstr(err->message, needle));
}

static void json_reject_len(const char *line, size_t len, const spw_schema_t *schema,
                            const struct spw_ingest_limits *limits, enum spw_reject_reason reason,
                            const char *needle)
{
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex = (Sparrow__Example *)1;
    struct spw_parse_error err = {0};
    spw_err_t rc = spw_parse_json_line(line, len, schema, limits, arena, &ex, &err);
    check_reject(rc, &err, line, reason, needle);
    assert_null(ex);
    spw_arena_destroy(arena);
}

static void json_reject(const char *line, enum spw_reject_reason reason, const char *needle)
{
    struct spw_ingest_limits limits = limits_default();
    json_reject_len(line, strlen(line), NULL, &limits, reason, needle);
}

static void criteo_reject(const char *line, const struct spw_ingest_limits *limits,
                          enum spw_reject_reason reason, const char *needle)
{
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex = NULL;
    struct spw_parse_error err = {0};
    spw_err_t rc = spw_parse_criteo_line(line, strlen(line), limits, arena, &ex, &err);
    check_reject(rc, &err, line, reason, needle);
    spw_arena_destroy(arena);
}

/* Writes len bytes to a new temp file; returns its path (static buffer per slot). */
static const char *temp_file(int slot, const void *data, size_t len)
{
    static char paths[4][64];
    snprintf(paths[slot], sizeof(paths[slot]), "/tmp/spw_test_reader_XXXXXX");
    int fd = mkstemp(paths[slot]);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return paths[slot];
}

/* A Criteo line from 40 column strings. */
static char *criteo_join(char *buf, size_t size, const char *const cols[40])
{
    size_t n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? "\t" : "", cols[i]);
    assert_true(n < size);
    return buf;
}

/* ---- JSON ---- */

static void test_reader_json_known_record(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();
    Sparrow__Example *ex =
        json_ok(arena,
                "{\"label\":1,\"ts\":1700000000000,\"id\":42,"
                "\"features\":{\"user\":\"u1\",\"item\":\"i9\",\"hour\":\"13\"},"
                "\"weight\":{\"item\":0.5},\"oracle_p\":0.25,\"extra\":[1,{\"x\":2}]}",
                NULL, &limits);
    assert_true(ex->has_label);
    assert_true(ex->label == 1.0f);
    assert_true(ex->has_event_time_ms);
    assert_int_equal(ex->event_time_ms, 1700000000000LL);
    assert_true(ex->has_id);
    assert_int_equal(ex->id, 42);
    assert_true(ex->has_oracle_p);
    assert_true(ex->oracle_p == 0.25f);
    assert_int_equal(ex->n_keys, 3);
    assert_int_equal(ex->n_fields, 3);
    assert_int_equal(ex->n_weights, 3);
    assert_int_equal(ex->fields[0], spw_hash_field_name("user", 4));
    assert_int_equal(ex->fields[1], spw_hash_field_name("item", 4));
    assert_int_equal(ex->fields[2], spw_hash_field_name("hour", 4));
    assert_int_equal(ex->keys[0], key_of("user", "u1"));
    assert_int_equal(ex->keys[1], key_of("item", "i9"));
    assert_int_equal(ex->keys[2], key_of("hour", "13"));
    assert_true(ex->weights[0] == 1.0f);
    assert_true(ex->weights[1] == 0.5f);
    assert_true(ex->weights[2] == 1.0f);

    /* Without "weight", weights stay empty (every feature weighs 1); labels may be bools. */
    ex = json_ok(arena, "{\"label\":false,\"features\":{\"user\":\"u1\"}}", NULL, &limits);
    assert_int_equal(ex->n_weights, 0);
    assert_true(ex->label == 0.0f);
    assert_false(ex->has_id);
    assert_false(ex->has_event_time_ms);
    assert_false(ex->has_oracle_p);
    /* A string id: decimal is its value, anything else is hashed. */
    ex = json_ok(arena, "{\"label\":1,\"id\":\"123\",\"features\":{}}", NULL, &limits);
    assert_int_equal(ex->id, 123);
    ex = json_ok(arena, "{\"label\":1,\"id\":\"ev-7\",\"features\":{}}", NULL, &limits);
    assert_int_equal(ex->id, spw_hash_key(0, "ev-7", 4));
    assert_int_equal(ex->n_keys, 0);
    /* Not NUL-terminated: only len bytes are read. */
    const char *text = "{\"label\":1,\"features\":{\"a\":\"b\"}}GARBAGE";
    Sparrow__Example *out;
    struct spw_parse_error err;
    assert_int_equal(spw_parse_json_line(text, strlen(text) - 7, NULL, &limits, arena, &out, &err),
                     SPW_OK);
    assert_int_equal(out->keys[0], key_of("a", "b"));
    spw_arena_destroy(arena);
}

static void test_reader_json_literal_rule(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();
    Sparrow__Example *ex =
        json_ok(arena,
                "{\"label\":1,\"features\":{\"a\":13,\"b\":\"13\",\"c\":1.50,\"d\":\"1.50\","
                "\"e\":1.5,\"f\":true,\"g\":\"true\",\"h\":-7,\"i\":1e3,\"j\":-0,"
                "\"k\":18446744073709551614,\"l\":\"\"}}",
                NULL, &limits);
    assert_int_equal(ex->n_keys, 12);
    /* A number is hashed as its literal text, so a string with the same text gives one key. */
    assert_int_equal(ex->keys[0], key_of("a", "13"));
    assert_int_equal(ex->keys[1], key_of("b", "13"));
    assert_int_equal(ex->keys[2], key_of("c", "1.50"));
    assert_int_equal(ex->keys[3], key_of("d", "1.50"));
    assert_int_equal(ex->keys[4], key_of("e", "1.5"));
    assert_int_equal(ex->keys[5], key_of("f", "true"));
    assert_int_equal(ex->keys[6], key_of("g", "true"));
    assert_int_equal(ex->keys[7], key_of("h", "-7"));
    assert_int_equal(ex->keys[8], key_of("i", "1e3"));
    assert_int_equal(ex->keys[9], key_of("j", "0")); /* documented: -0 is hashed as 0 */
    assert_int_equal(ex->keys[10], key_of("k", "18446744073709551614"));
    assert_int_equal(ex->keys[11], key_of("l", ""));

    /* Same field, same text: one key whatever the JSON type. */
    Sparrow__Example *as_num =
        json_ok(arena, "{\"label\":1,\"features\":{\"x\":13}}", NULL, &limits);
    Sparrow__Example *as_str =
        json_ok(arena, "{\"label\":1,\"features\":{\"x\":\"13\"}}", NULL, &limits);
    assert_int_equal(as_num->keys[0], as_str->keys[0]);
    Sparrow__Example *other =
        json_ok(arena, "{\"label\":1,\"features\":{\"x\":13.0}}", NULL, &limits);
    assert_int_not_equal(as_num->keys[0], other->keys[0]);

    /* null adds nothing; an array adds one feature per element, with the member's weight. */
    ex = json_ok(arena,
                 "{\"label\":1,\"features\":{\"n\":null,\"tags\":[\"x\",null,7],\"u\":\"v\"},"
                 "\"weight\":{\"tags\":2,\"n\":3}}",
                 NULL, &limits);
    assert_int_equal(ex->n_keys, 3);
    assert_int_equal(ex->keys[0], key_of("tags", "x"));
    assert_int_equal(ex->keys[1], key_of("tags", "7"));
    assert_int_equal(ex->keys[2], key_of("u", "v"));
    assert_int_equal(ex->fields[0], ex->fields[1]);
    assert_true(ex->weights[0] == 2.0f && ex->weights[1] == 2.0f && ex->weights[2] == 1.0f);
    /* Unicode escapes hash as their UTF-8 bytes. */
    ex = json_ok(arena, "{\"label\":1,\"features\":{\"c\":\"\\u00e9\"}}", NULL, &limits);
    assert_int_equal(ex->keys[0], key_of("c", "\xc3\xa9"));
    spw_arena_destroy(arena);
}

static void test_reader_json_rejects(void **state)
{
    (void)state;
    json_reject("not json", SPW_REJECT_UNDECODABLE, "JSON");
    json_reject("", SPW_REJECT_UNDECODABLE, "ends early");
    json_reject("[1,2]", SPW_REJECT_UNDECODABLE, "not an object");
    json_reject("{\"label\":1,\"features\":{\"a\":1}", SPW_REJECT_UNDECODABLE, "ends early");
    json_reject("{\"label\":1,\"features\":{}} {}", SPW_REJECT_UNDECODABLE, "JSON");
    json_reject("{\"label\":1,\"features\":{},}", SPW_REJECT_UNDECODABLE, "JSON");
    json_reject("{\"label\":1,\"x\":[[[[[[[[[[1]]]]]]]]]],\"features\":{}}", SPW_REJECT_UNDECODABLE,
                "nesting");
    json_reject("{\"label\":1,\"features\":{\"a\":\"\xff\"}}", SPW_REJECT_UNDECODABLE, "utf-8");
    json_reject("{\"features\":{\"a\":1}}", SPW_REJECT_BAD_LABEL, "label");
    json_reject("{\"label\":\"1\",\"features\":{}}", SPW_REJECT_BAD_LABEL, "label");
    json_reject("{\"label\":null,\"features\":{}}", SPW_REJECT_BAD_LABEL, "label");
    json_reject("{\"label\":2,\"features\":{}}", SPW_REJECT_BAD_LABEL, "label 2");
    json_reject("{\"label\":NaN,\"features\":{}}", SPW_REJECT_BAD_LABEL, "NaN");
    json_reject("{\"label\":1e999,\"features\":{}}", SPW_REJECT_BAD_LABEL, "infinite");
    json_reject("{\"label\":1}", SPW_REJECT_UNDECODABLE, "features");
    json_reject("{\"label\":1,\"features\":[1]}", SPW_REJECT_UNDECODABLE, "features");
    json_reject("{\"label\":1,\"features\":{\"ok\":1,\"bad\":{\"b\":1}}}", SPW_REJECT_UNDECODABLE,
                "feature \"bad\"");
    json_reject("{\"label\":1,\"features\":{\"deep\":[[1]]}}", SPW_REJECT_UNDECODABLE,
                "feature \"deep\"");
    json_reject("{\"label\":1,\"features\":{\"nan\":NaN}}", SPW_REJECT_UNDECODABLE,
                "feature \"nan\"");
    json_reject("{\"label\":1,\"features\":{\"big\":99999999999999999999999}}",
                SPW_REJECT_UNDECODABLE, "feature \"big\": integer out of range");
    json_reject("{\"label\":1,\"features\":{\"a\":1},\"weight\":{\"b\":2}}", SPW_REJECT_BAD_FIELD,
                "weight \"b\": no such feature");
    json_reject("{\"label\":1,\"features\":{\"a\":1},\"weight\":{\"a\":NaN}}",
                SPW_REJECT_NONFINITE_WEIGHT, "weight \"a\"");
    json_reject("{\"label\":1,\"features\":{\"a\":1},\"weight\":{\"a\":1e300}}",
                SPW_REJECT_NONFINITE_WEIGHT, "weight \"a\"");
    json_reject("{\"label\":1,\"features\":{\"a\":1},\"weight\":{\"a\":\"2\"}}",
                SPW_REJECT_UNDECODABLE, "weight \"a\": not a number");
    json_reject("{\"label\":1,\"features\":{\"a\":1},\"weight\":[1]}", SPW_REJECT_UNDECODABLE,
                "\"weight\"");
    json_reject("{\"label\":1,\"features\":{},\"oracle_p\":1.5}", SPW_REJECT_BAD_LABEL, "oracle_p");
    json_reject("{\"label\":1,\"features\":{},\"oracle_p\":\"x\"}", SPW_REJECT_BAD_LABEL,
                "oracle_p");
    json_reject("{\"label\":1,\"ts\":1.5,\"features\":{}}", SPW_REJECT_UNDECODABLE, "\"ts\"");
    json_reject("{\"label\":1,\"ts\":99999999999999999999,\"features\":{}}", SPW_REJECT_UNDECODABLE,
                "\"ts\" out of range");
    json_reject("{\"label\":1,\"id\":-1,\"features\":{}}", SPW_REJECT_UNDECODABLE, "\"id\"");
    json_reject("{\"label\":1,\"id\":[],\"features\":{}}", SPW_REJECT_UNDECODABLE, "\"id\"");
    /* A quote or newline in a name does not reach the message as-is. */
    json_reject("{\"label\":1,\"features\":{\"a\\n\\\"b\":{}}}", SPW_REJECT_UNDECODABLE,
                "feature \"a??b\"");

    /* A NUL byte after the object is trailing data, not an end. */
    struct spw_ingest_limits limits = limits_default();
    static const char with_nul[] = "{\"label\":1,\"features\":{}}\0{}";
    json_reject_len(with_nul, sizeof(with_nul) - 1, NULL, &limits, SPW_REJECT_UNDECODABLE,
                    "after the object");
}

static void test_reader_json_limits(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();
    limits.max_features = 3;
    /* Exactly max is fine, max + 1 is not; arrays count per element, nulls not at all. */
    json_ok(arena, "{\"label\":1,\"features\":{\"a\":1,\"b\":2,\"c\":3,\"d\":null}}", NULL,
            &limits);
    json_ok(arena, "{\"label\":1,\"features\":{\"a\":[1,2,null],\"c\":3}}", NULL, &limits);
    const char *four = "{\"label\":1,\"features\":{\"a\":1,\"b\":2,\"c\":3,\"d\":4}}";
    json_reject_len(four, strlen(four), NULL, &limits, SPW_REJECT_TOO_MANY_FEATURES,
                    "4 features, limit 3");
    const char *arr = "{\"label\":1,\"features\":{\"a\":[1,2,3,4]}}";
    json_reject_len(arr, strlen(arr), NULL, &limits, SPW_REJECT_TOO_MANY_FEATURES, "4 features");

    /* Field ids: names that are decimal numbers are their own id. */
    limits = limits_default();
    limits.max_field_id = 10;
    Sparrow__Example *ex =
        json_ok(arena, "{\"label\":1,\"features\":{\"10\":\"x\"}}", NULL, &limits);
    assert_int_equal(ex->fields[0], 10);
    const char *eleven = "{\"label\":1,\"features\":{\"11\":\"x\"}}";
    json_reject_len(eleven, strlen(eleven), NULL, &limits, SPW_REJECT_BAD_FIELD,
                    "feature \"11\": field id 11 above limit 10");

    /* Record size: exactly max_record_bytes is fine. */
    const char *line = "{\"label\":1,\"features\":{}}";
    limits = limits_default();
    limits.max_record_bytes = strlen(line);
    json_ok(arena, line, NULL, &limits);
    limits.max_record_bytes = strlen(line) - 1;
    json_reject_len(line, strlen(line), NULL, &limits, SPW_REJECT_OVERSIZED, "limit 24");

    /* Float targets when labels are not binary. */
    limits = limits_default();
    limits.binary_label = false;
    ex = json_ok(arena, "{\"label\":0.75,\"features\":{}}", NULL, &limits);
    assert_true(ex->label == 0.75f);
    spw_arena_destroy(arena);
}

static void test_reader_json_schema(void **state)
{
    (void)state;
    const char text[] = "# feature names\n"
                        "user = 7\n"
                        "\n"
                        "  item=9   # trailing comment\r\n"
                        "a b = 11\n"
                        "x=y = 12\n";
    const char *path = temp_file(0, text, sizeof(text) - 1);
    char errstr[256];
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();

    spw_schema_t *schema = spw_schema_load(path, false, errstr, sizeof(errstr));
    assert_non_null(schema);
    uint32_t id;
    assert_int_equal(spw_schema_field_id(schema, "user", 4, &id), SPW_OK);
    assert_int_equal(id, 7);
    assert_int_equal(spw_schema_field_id(schema, "item", 4, &id), SPW_OK);
    assert_int_equal(id, 9);
    assert_int_equal(spw_schema_field_id(schema, "a b", 3, &id), SPW_OK);
    assert_int_equal(id, 11);
    assert_int_equal(spw_schema_field_id(schema, "x=y", 3, &id), SPW_OK);
    assert_int_equal(id, 12);
    /* Not strict: unknown names are hashed. */
    assert_int_equal(spw_schema_field_id(schema, "hour", 4, &id), SPW_OK);
    assert_int_equal(id, spw_hash_field_name("hour", 4));
    assert_int_equal(spw_schema_field_id(NULL, "hour", 4, &id), SPW_OK);
    assert_int_equal(id, spw_hash_field_name("hour", 4));

    Sparrow__Example *ex = json_ok(
        arena, "{\"label\":1,\"features\":{\"user\":\"u1\",\"hour\":\"13\"}}", schema, &limits);
    assert_int_equal(ex->fields[0], 7);
    assert_int_equal(ex->keys[0], spw_hash_key(7, "u1", 2));
    assert_int_equal(ex->fields[1], spw_hash_field_name("hour", 4));
    spw_schema_destroy(schema);

    /* Strict: unknown names are refused, naming the feature. */
    schema = spw_schema_load(path, true, errstr, sizeof(errstr));
    assert_non_null(schema);
    assert_int_equal(spw_schema_field_id(schema, "hour", 4, &id), SPW_ERR_NOT_FOUND);
    ex = json_ok(arena, "{\"label\":1,\"features\":{\"user\":\"u1\",\"item\":null}}", schema,
                 &limits);
    assert_int_equal(ex->n_keys, 1);
    const char *bad = "{\"label\":1,\"features\":{\"user\":\"u1\",\"hour\":\"13\"}}";
    json_reject_len(bad, strlen(bad), schema, &limits, SPW_REJECT_BAD_FIELD,
                    "feature \"hour\": not in the schema");
    /* A schema id above the limit is refused per record. */
    limits.max_field_id = 8;
    const char *high = "{\"label\":1,\"features\":{\"item\":\"x\"}}";
    json_reject_len(high, strlen(high), schema, &limits, SPW_REJECT_BAD_FIELD, "feature \"item\"");
    spw_schema_destroy(schema);
    spw_schema_destroy(NULL);
    unlink(path);
    spw_arena_destroy(arena);
}

/* ---- JSON: the fast path against json-c ---- */

enum fast_want { FAST_DECIDES, FAST_HANDS_BACK };

/* Parses the line (copied to a buffer of exactly len bytes, so that ASan sees any read past it)
 * with the fast path, with json-c alone and with spw_parse_json_line; asserts that the fast path
 * decides it or hands it back as wanted and that all three give the same result. Returns the
 * json-c result (the Example from arena, or NULL with *err filled). */
static Sparrow__Example *json_both_len(spw_arena_t *arena, const char *text, size_t len,
                                       const spw_schema_t *schema,
                                       const struct spw_ingest_limits *limits, enum fast_want want,
                                       struct spw_parse_error *err)
{
    char *line = malloc(len ? len : 1);
    assert_non_null(line);
    memcpy(line, text, len);
    struct json_tokener *tok = spw_ingest__json_tokener_new();
    assert_non_null(tok);
    Sparrow__Example *ex_ref = NULL, *ex_fast = NULL, *ex_line = NULL;
    struct spw_parse_error err_fast = {0}, err_line = {0};
    spw_err_t rc_ref =
        spw_ingest__parse_json_jsonc(tok, line, len, schema, limits, arena, &ex_ref, err);
    spw_err_t rc_fast =
        spw_ingest__parse_json_fast(line, len, schema, limits, arena, &ex_fast, &err_fast);
    spw_err_t rc_line = spw_parse_json_line(line, len, schema, limits, arena, &ex_line, &err_line);
    json_tokener_free(tok);
    if ((rc_fast == SPW_INGEST__JSON_FALLBACK) != (want == FAST_HANDS_BACK))
        print_error("fast path on %.*s: rc %d\n", (int)len, text, rc_fast);
    assert_int_equal(rc_fast == SPW_INGEST__JSON_FALLBACK, want == FAST_HANDS_BACK);
    const struct {
        spw_err_t rc;
        const Sparrow__Example *ex;
        const struct spw_parse_error *err;
    } other[2] = {{rc_fast, ex_fast, &err_fast}, {rc_line, ex_line, &err_line}};
    for (int i = want == FAST_HANDS_BACK ? 1 : 0; i < 2; i++) {
        assert_int_equal(other[i].rc, rc_ref);
        if (rc_ref != SPW_OK) {
            assert_null(other[i].ex);
            assert_int_equal(other[i].err->reason, err->reason);
            assert_string_equal(other[i].err->message, err->message);
            continue;
        }
        const Sparrow__Example *a = ex_ref, *b = other[i].ex;
        assert_non_null(b);
        assert_int_equal(a->has_id, b->has_id);
        assert_int_equal(a->id, b->id);
        assert_int_equal(a->has_label, b->has_label);
        assert_memory_equal(&a->label, &b->label, sizeof(a->label));
        assert_int_equal(a->has_event_time_ms, b->has_event_time_ms);
        assert_int_equal(a->event_time_ms, b->event_time_ms);
        assert_int_equal(a->has_oracle_p, b->has_oracle_p);
        assert_memory_equal(&a->oracle_p, &b->oracle_p, sizeof(a->oracle_p));
        assert_int_equal(a->n_keys, b->n_keys);
        assert_int_equal(a->n_fields, b->n_fields);
        assert_int_equal(a->n_weights, b->n_weights);
        assert_int_equal(!a->weights, !b->weights);
        if (a->n_keys) {
            assert_memory_equal(a->keys, b->keys, a->n_keys * sizeof(*a->keys));
            assert_memory_equal(a->fields, b->fields, a->n_fields * sizeof(*a->fields));
        }
        if (a->n_weights)
            assert_memory_equal(a->weights, b->weights, a->n_weights * sizeof(*a->weights));
    }
    free(line);
    return ex_ref;
}

static Sparrow__Example *json_both(spw_arena_t *arena, const char *line, enum fast_want want)
{
    struct spw_ingest_limits limits = limits_default();
    struct spw_parse_error err;
    Sparrow__Example *ex = json_both_len(arena, line, strlen(line), NULL, &limits, want, &err);
    if (!ex)
        print_error("%s: refused: %s\n", line, err.message);
    assert_non_null(ex);
    return ex;
}

/* Both paths refuse the line for reason with a message containing needle. */
static void json_both_reject(const char *line, size_t len, enum fast_want want,
                             enum spw_reject_reason reason, const char *needle)
{
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();
    struct spw_parse_error err = {0};
    Sparrow__Example *ex = json_both_len(arena, line, len, NULL, &limits, want, &err);
    check_reject(ex ? SPW_OK : SPW_ERR_INVALID, &err, line, reason, needle);
    spw_arena_destroy(arena);
}

static void test_reader_json_fast_escapes(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    /* Every short escape, in a value, in a feature name and in a string id. */
    Sparrow__Example *ex = json_both(arena,
                                     "{\"label\":1,\"id\":\"x\\/1\",\"features\":{"
                                     "\"q\":\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\","
                                     "\"n\\tame\":\"v\",\"\\\"\":\"\"}}",
                                     FAST_DECIDES);
    assert_int_equal(ex->id, spw_hash_key(0, "x/1", 3));
    assert_int_equal(ex->n_keys, 3);
    assert_int_equal(ex->keys[0], key_of("q", "a\"b\\c/d\be\ff\ng\rh\ti"));
    assert_int_equal(ex->fields[1], spw_hash_field_name("n\tame", 5));
    assert_int_equal(ex->keys[1], key_of("n\tame", "v"));
    assert_int_equal(ex->keys[2], key_of("\"", ""));
    /* An escaped record member name is still that member; an escaped decimal id is decimal. */
    ex = json_both(arena, "{\"l\\u0061bel\":1,\"features\":{}}", FAST_HANDS_BACK);
    assert_true(ex->label == 1.0f);
    ex = json_both(arena, "{\"label\":0,\"i\\/d\":5,\"features\":{\"fe\\/at\":\"1\"}}",
                   FAST_DECIDES);
    assert_false(ex->has_id); /* "i/d" is not "id" */
    assert_int_equal(ex->keys[0], key_of("fe/at", "1"));
    /* Well-formed UTF-8 stays in the fast path; \u escapes go to json-c. */
    ex = json_both(arena,
                   "{\"label\":1,\"features\":{\"caf\xc3\xa9\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}}",
                   FAST_DECIDES);
    assert_int_equal(ex->keys[0], key_of("caf\xc3\xa9", "\xe2\x82\xac\xf0\x9f\x98\x80"));
    ex = json_both(arena, "{\"label\":1,\"features\":{\"s\":\"\\ud83d\\ude00\\u0041\"}}",
                   FAST_HANDS_BACK);
    assert_int_equal(ex->keys[0], key_of("s", "\xf0\x9f\x98\x80"
                                              "A"));
    /* What json-c takes and RFC 8259 does not (raw control bytes, lax UTF-8) goes to json-c. */
    ex = json_both(arena, "{\"label\":1,\"features\":{\"s\":\"a\x01\tb\"}}", FAST_HANDS_BACK);
    assert_int_equal(ex->keys[0], key_of("s", "a\x01\tb"));
    ex = json_both(arena, "{\"label\":1,\"features\":{\"s\":\"\xc0\x80\xed\xa0\x80\"}}",
                   FAST_HANDS_BACK);
    assert_int_equal(ex->keys[0], key_of("s", "\xc0\x80\xed\xa0\x80"));
    json_both_reject("{\"label\":1,\"features\":{\"s\":\"\\x\"}}", 31, FAST_HANDS_BACK,
                     SPW_REJECT_UNDECODABLE, "JSON");
    spw_arena_destroy(arena);
}

static void test_reader_json_fast_whitespace(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *compact = json_both(
        arena,
        "{\"label\":0,\"ts\":5,\"id\":7,\"features\":{\"a\":[1,\"x\",null,false],\"b\":null},"
        "\"weight\":{\"a\":2.5},\"oracle_p\":0.5}",
        FAST_DECIDES);
    Sparrow__Example *spaced = json_both(
        arena,
        " \t\r\n{ \"label\" : 0 ,\"ts\"\t:\t5 , \"id\":7,\r\n \"features\" : { \"a\" : [ 1 , \"x\""
        " , null , false ] , \"b\" : null } , \"weight\" : { \"a\" : 2.5 } ,\"oracle_p\": 0.5 }"
        "\n\t \r",
        FAST_DECIDES);
    assert_int_equal(compact->n_keys, 3);
    assert_int_equal(spaced->n_keys, 3);
    assert_memory_equal(compact->keys, spaced->keys, 3 * sizeof(*compact->keys));
    assert_true(spaced->weights[0] == 2.5f && spaced->weights[2] == 2.5f);
    assert_int_equal(spaced->event_time_ms, 5);
    assert_int_equal(spaced->id, 7);
    /* Only RFC whitespace: a vertical tab is json-c's to refuse. */
    json_both_reject("{\"label\":1,\"features\":{}}\v", 26, FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE,
                     "JSON");
    spw_arena_destroy(arena);
}

static void test_reader_json_fast_skips_nested(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    /* Unknown members of any shape are checked and skipped, up to json-c's depth. */
    Sparrow__Example *ex = json_both(
        arena,
        "{\"meta\":{\"k\":[1,{\"label\":[true,false,null,\"s\\\"]\",-1.5e-3]},[]],\"e\":{}},"
        "\"label\":1,\"features\":{\"f\":1},\"tail\":[[[[[[7]]]]]],\"t2\":[[[[[[{}]]]]]],"
        "\"t3\":{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":[]}}}}}},\"big\":99999999999999999999}",
        FAST_DECIDES);
    assert_int_equal(ex->n_keys, 1);
    assert_int_equal(ex->keys[0], key_of("f", "1"));
    /* One level deeper is json-c's "nesting too deep", as is an element in the deepest array. */
    const char *deep = "{\"label\":1,\"tail\":[[[[[[[7]]]]]]],\"features\":{}}";
    json_both_reject(deep, strlen(deep), FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE, "nesting");
    const char *deep2 =
        "{\"label\":1,\"t\":{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":1}}}}}}}"
        ",\"features\":{}}";
    json_both_reject(deep2, strlen(deep2), FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE, "nesting");
    /* Malformed skipped values are json-c's to refuse. */
    const char *bad[] = {
        "{\"label\":1,\"x\":[1,],\"features\":{}}",
        "{\"label\":1,\"x\":{\"a\"},\"features\":{}}",
        "{\"label\":1,\"x\":[1 2],\"features\":{}}",
        "{\"label\":1,\"x\":tru,\"features\":{}}",
        "{\"label\":1,\"x\":{\"a\":1,},\"features\":{}}",
        "{\"label\":1,\"x\":[}\"features\":{}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        json_both_reject(bad[i], strlen(bad[i]), FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE, "JSON");
    spw_arena_destroy(arena);
}

static void test_reader_json_fast_numbers(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    /* Feature numbers hash as their literal text (integers re-printed: only -0 changes). */
    Sparrow__Example *ex = json_both(
        arena,
        "{\"label\":1.0,\"features\":{\"a\":0,\"b\":-0,\"c\":-0.0,\"d\":1.50,\"e\":1E+5,"
        "\"f\":9223372036854775807,\"g\":-9223372036854775807,"
        "\"h\":18446744073709551614,\"i\":0.1e-7,\"j\":123456789012345678901234567890.0}}",
        FAST_DECIDES);
    const char *texts[] = {"0",
                           "0",
                           "-0.0",
                           "1.50",
                           "1E+5",
                           "9223372036854775807",
                           "-9223372036854775807",
                           "18446744073709551614",
                           "0.1e-7",
                           NULL};
    const char *names = "abcdefghi";
    for (int i = 0; texts[i]; i++) {
        char name[2] = {names[i], 0};
        assert_int_equal(ex->keys[i], key_of(name, texts[i]));
    }
    assert_int_equal(ex->n_keys, 10); /* a decimal of any size keeps its literal */
    assert_int_equal(ex->keys[9], key_of("j", "123456789012345678901234567890.0"));
    /* Values converted like json-c: strtod, then float. */
    ex = json_both(arena,
                   "{\"label\":1e0,\"oracle_p\":0.123456789,\"features\":{\"a\":1,\"b\":2},"
                   "\"weight\":{\"a\":0.1,\"b\":-3}}",
                   FAST_DECIDES);
    assert_true(ex->label == 1.0f);
    assert_true(ex->oracle_p == (float)strtod("0.123456789", NULL));
    assert_true(ex->weights[0] == 0.1f && ex->weights[1] == -3.0f);
    ex = json_both(arena, "{\"label\":-0.0,\"oracle_p\":1.23456789e-5,\"features\":{}}",
                   FAST_DECIDES);
    assert_true(signbit(ex->label));
    assert_true(ex->oracle_p == (float)strtod("1.23456789e-5", NULL));
    /* Decimals beyond one exact operation go to json-c's strtod. */
    ex = json_both(arena, "{\"label\":1,\"oracle_p\":0.12345678901234567890123,\"features\":{}}",
                   FAST_HANDS_BACK);
    assert_true(ex->oracle_p == (float)strtod("0.12345678901234567890123", NULL));
    ex = json_both(arena, "{\"label\":1,\"oracle_p\":1e-30,\"features\":{}}", FAST_HANDS_BACK);
    assert_true(ex->oracle_p == 1e-30f);
    /* ts and id at the edges of their ranges. */
    ex = json_both(arena,
                   "{\"label\":1,\"ts\":-9223372036854775807,\"id\":18446744073709551614,"
                   "\"features\":{}}",
                   FAST_DECIDES);
    assert_int_equal(ex->event_time_ms, -INT64_MAX);
    assert_int_equal(ex->id, UINT64_MAX - 1);
    ex = json_both(arena, "{\"label\":1,\"ts\":9223372036854775807,\"id\":-0,\"features\":{}}",
                   FAST_DECIDES);
    assert_int_equal(ex->event_time_ms, INT64_MAX);
    assert_true(ex->has_id);
    assert_int_equal(ex->id, 0);
    /* Integers json-c saturates or cannot print back are its to refuse. */
    const char *min = "{\"label\":1,\"features\":{\"m\":-9223372036854775808}}";
    json_both_reject(min, strlen(min), FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE,
                     "integer out of range");
    const char *max = "{\"label\":1,\"features\":{\"m\":18446744073709551615}}";
    json_both_reject(max, strlen(max), FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE,
                     "integer out of range");
    const char *id = "{\"label\":1,\"id\":18446744073709551615,\"features\":{}}";
    json_both_reject(id, strlen(id), FAST_HANDS_BACK, SPW_REJECT_UNDECODABLE, "\"id\"");
    /* Non-RFC numbers json-c accepts ("1.", "-01", "00") are decided by json-c. */
    ex = json_both(arena, "{\"label\":00,\"features\":{\"a\":-01,\"b\":1.}}", FAST_HANDS_BACK);
    assert_int_equal(ex->keys[0], key_of("a", "-1"));
    assert_int_equal(ex->keys[1], key_of("b", "1."));
    json_both_reject("{\"label\":1,\"features\":{\"a\":01}}", 32, FAST_HANDS_BACK,
                     SPW_REJECT_UNDECODABLE, "JSON");
    json_both_reject("{\"label\":1,\"features\":{\"a\":.5}}", 32, FAST_HANDS_BACK,
                     SPW_REJECT_UNDECODABLE, "JSON");
    spw_arena_destroy(arena);
}

static void test_reader_json_fast_names(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    /* A repeated feature: json-c keeps the last value in the first one's place. */
    Sparrow__Example *ex = json_both(
        arena, "{\"label\":1,\"features\":{\"a\":\"1\",\"b\":\"x\",\"a\":\"2\"}}", FAST_HANDS_BACK);
    assert_int_equal(ex->n_keys, 2);
    assert_int_equal(ex->keys[0], key_of("a", "2"));
    assert_int_equal(ex->keys[1], key_of("b", "x"));
    /* A repeated record member: the last wins. */
    ex = json_both(arena, "{\"label\":1,\"features\":{},\"label\":0}", FAST_HANDS_BACK);
    assert_true(ex->label == 0.0f);
    /* "weight" may come first, may name null features, and weighs every element of an array. */
    ex = json_both(arena,
                   "{\"weight\":{\"b\":0.25,\"a\":3,\"c\":7},\"label\":1,"
                   "\"features\":{\"a\":[\"x\",\"y\"],\"b\":\"z\",\"c\":null,\"d\":\"w\"}}",
                   FAST_DECIDES);
    assert_int_equal(ex->n_weights, 4);
    assert_true(ex->weights[0] == 3.0f && ex->weights[1] == 3.0f);
    assert_true(ex->weights[2] == 0.25f && ex->weights[3] == 1.0f);
    /* An empty "weight" still gives every feature a weight of 1; no features, no weights. */
    ex = json_both(arena, "{\"label\":1,\"features\":{\"a\":1},\"weight\":{}}", FAST_DECIDES);
    assert_int_equal(ex->n_weights, 1);
    ex = json_both(arena, "{\"label\":1,\"features\":{\"a\":null},\"weight\":{\"a\":2}}",
                   FAST_DECIDES);
    assert_int_equal(ex->n_weights, 0);
    assert_null(ex->weights);
    const char *twice = "{\"label\":1,\"features\":{\"a\":1},\"weight\":{\"a\":1,\"a\":2}}";
    struct spw_ingest_limits limits = limits_default();
    struct spw_parse_error err;
    ex = json_both_len(arena, twice, strlen(twice), NULL, &limits, FAST_HANDS_BACK, &err);
    assert_true(ex->weights[0] == 2.0f);
    const char *unknown = "{\"label\":1,\"features\":{\"a\":1},\"weight\":{\"c\":1}}";
    json_both_reject(unknown, strlen(unknown), FAST_HANDS_BACK, SPW_REJECT_BAD_FIELD,
                     "weight \"c\": no such feature");
    /* Refusals of a decoded Example come from the fast path itself, with json-c's message. */
    const char *label2 = "{\"label\":2,\"features\":{\"a\":1}}";
    json_both_reject(label2, strlen(label2), FAST_DECIDES, SPW_REJECT_BAD_LABEL, "label 2");
    const char *far = "{\"label\":1,\"features\":{},\"oracle_p\":1.5}";
    json_both_reject(far, strlen(far), FAST_DECIDES, SPW_REJECT_BAD_LABEL, "oracle_p");
    spw_arena_destroy(arena);
}

static void test_reader_json_fast_bounds(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();
    struct spw_parse_error err;
    /* Every prefix of a record is refused alike, and nothing past len is read (ASan). */
    const char *line = "{\"label\":1,\"ts\":12,\"features\":{\"a\":\"x\\ty\",\"b\":[1.5e3,true,"
                       "null],\"c\":-12},\"weight\":{\"a\":2},\"z\":{\"q\":[false]}}";
    size_t len = strlen(line);
    for (size_t n = 0; n < len; n++) {
        Sparrow__Example *ex = json_both_len(arena, line, n, NULL, &limits, FAST_HANDS_BACK, &err);
        assert_null(ex);
        assert_int_equal(err.reason, SPW_REJECT_UNDECODABLE);
    }
    assert_non_null(json_both_len(arena, line, len, NULL, &limits, FAST_DECIDES, &err));
    /* Events wider than the fast path's scratch go to json-c whole. */
    char *wide = malloc(16384);
    assert_non_null(wide);
    size_t w = (size_t)snprintf(wide, 16384, "{\"label\":1,\"features\":{");
    for (int i = 0; i < 600; i++)
        w += (size_t)snprintf(wide + w, 16384 - w, "%s\"f%d\":%d", i ? "," : "", i, i);
    w += (size_t)snprintf(wide + w, 16384 - w, "}}");
    Sparrow__Example *ex = json_both_len(arena, wide, w, NULL, &limits, FAST_HANDS_BACK, &err);
    assert_non_null(ex);
    assert_int_equal(ex->n_keys, 600);
    assert_int_equal(ex->keys[599], key_of("f599", "599"));
    free(wide);
    /* A strict schema: a null feature needs no id, an array (even empty) does. */
    const char text[] = "a = 1\n";
    const char *path = temp_file(2, text, sizeof(text) - 1);
    char errstr[256];
    spw_schema_t *schema = spw_schema_load(path, true, errstr, sizeof(errstr));
    assert_non_null(schema);
    const char *nul = "{\"label\":1,\"features\":{\"a\":\"x\",\"zz\":null}}";
    ex = json_both_len(arena, nul, strlen(nul), schema, &limits, FAST_DECIDES, &err);
    assert_non_null(ex);
    assert_int_equal(ex->fields[0], 1);
    const char *empty = "{\"label\":1,\"features\":{\"a\":\"x\",\"zz\":[]}}";
    assert_null(json_both_len(arena, empty, strlen(empty), schema, &limits, FAST_HANDS_BACK, &err));
    assert_int_equal(err.reason, SPW_REJECT_BAD_FIELD);
    spw_schema_destroy(schema);
    unlink(path);
    spw_arena_destroy(arena);
}

/* Loads text as a schema and expects failure with an errstr containing "path:<needle>". */
static void schema_fails(const char *text, const char *needle)
{
    const char *path = temp_file(1, text, strlen(text));
    char errstr[256] = "";
    spw_schema_t *schema = spw_schema_load(path, false, errstr, sizeof(errstr));
    char want[128];
    snprintf(want, sizeof(want), "%s:%s", path, needle);
    if (schema || !strstr(errstr, want))
        print_error("schema \"%s\": got \"%s\", wanted \"%s\"\n", text, errstr, want);
    assert_null(schema);
    assert_non_null(strstr(errstr, want));
    unlink(path);
}

static void test_reader_schema_errors(void **state)
{
    (void)state;
    schema_fails("a = 1\nb = 2\na = 3\n", "3: duplicate name \"a\" (first on line 1)");
    schema_fails("a = 2147483648\n", "1: field id \"2147483648\"");
    schema_fails("# c\na = -1\n", "2: field id \"-1\"");
    schema_fails("a = 12345678901\n", "1: field id");
    schema_fails("a = 1x\n", "1: field id \"1x\"");
    schema_fails("a = \n", "1: field id");
    schema_fails("a\n", "1: expected `name = id`");
    schema_fails("ok = 1\n = 2\n", "2: name must have");
    char errstr[256];
    assert_null(spw_schema_load("/nonexistent/schema.txt", false, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "/nonexistent/schema.txt"));
    /* The largest id is fine; an empty file is an empty schema. */
    const char *path = temp_file(1, "a = 2147483647\n", 15);
    spw_schema_t *schema = spw_schema_load(path, false, errstr, sizeof(errstr));
    assert_non_null(schema);
    uint32_t id;
    assert_int_equal(spw_schema_field_id(schema, "a", 1, &id), SPW_OK);
    assert_int_equal(id, 2147483647u);
    spw_schema_destroy(schema);
    unlink(path);
    /* Many names (the table grows). */
    char *big = malloc(100000);
    size_t n = 0;
    for (int i = 0; i < 5000; i++)
        n += (size_t)snprintf(big + n, 100000 - n, "name%d = %d\n", i, i * 3);
    path = temp_file(1, big, n);
    free(big);
    schema = spw_schema_load(path, true, errstr, sizeof(errstr));
    assert_non_null(schema);
    for (int i = 0; i < 5000; i += 7) {
        char name[16];
        int len = snprintf(name, sizeof(name), "name%d", i);
        assert_int_equal(spw_schema_field_id(schema, name, (size_t)len, &id), SPW_OK);
        assert_int_equal(id, (uint32_t)i * 3);
    }
    assert_int_equal(spw_schema_field_id(schema, "name5000", 8, &id), SPW_ERR_NOT_FOUND);
    spw_schema_destroy(schema);
    unlink(path);
}

/* ---- Criteo ---- */

static void test_reader_criteo_field_ids(void **state)
{
    (void)state;
    for (unsigned col = 0; col < 39; col++) {
        char name[4];
        int len = col < 13 ? snprintf(name, sizeof(name), "I%u", col + 1)
                           : snprintf(name, sizeof(name), "C%u", col - 12);
        assert_int_equal(spw_criteo_field_id(col), spw_hash_field_name(name, (size_t)len));
    }
}

static void test_reader_criteo_known_record(void **state)
{
    (void)state;
    const char *cols[40] = {"1", "5", "-1", "", "1000", "0", "", "", "", "", "", "", "", "2"};
    const char *cats[26] = {"68fd1e64", "", "a", "b"};
    for (int i = 14; i < 40; i++)
        cols[i] = cats[i - 14] ? cats[i - 14] : "";
    char line[1024];
    criteo_join(line, sizeof(line), cols);

    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_ingest_limits limits = limits_default();
    Sparrow__Example *ex = NULL;
    struct spw_parse_error err;
    assert_int_equal(spw_parse_criteo_line(line, strlen(line), &limits, arena, &ex, &err), SPW_OK);
    assert_true(ex->label == 1.0f);
    assert_false(ex->has_id || ex->has_event_time_ms || ex->has_oracle_p);
    assert_int_equal(ex->n_weights, 0);
    /* I1=5, I2=-1, I4=1000, I5=0, I13=2, C1, C3, C4 */
    static const struct {
        unsigned col;
        int64_t value;
        const char *text;
    } want[] = {{0, 5, NULL},  {1, -1, NULL},       {3, 1000, NULL}, {4, 0, NULL},
                {12, 2, NULL}, {13, 0, "68fd1e64"}, {15, 0, "a"},    {16, 0, "b"}};
    assert_int_equal(ex->n_keys, 8);
    assert_int_equal(ex->n_fields, 8);
    for (size_t i = 0; i < 8; i++) {
        char text[32];
        if (want[i].text)
            snprintf(text, sizeof(text), "%s", want[i].text);
        else
            snprintf(text, sizeof(text), "%lld", (long long)spw_hash_criteo_bucket(want[i].value));
        uint32_t field = spw_criteo_field_id(want[i].col);
        assert_int_equal(ex->fields[i], field);
        assert_int_equal(ex->keys[i], spw_hash_key(field, text, strlen(text)));
    }
    /* 1000 buckets to floor(ln(1000)^2) = 47. */
    assert_int_equal(ex->keys[2], spw_hash_key(spw_criteo_field_id(3), "47", 2));

    /* A trailing \r changes nothing. */
    size_t len = strlen(line);
    line[len] = '\r';
    Sparrow__Example *ex2 = NULL;
    assert_int_equal(spw_parse_criteo_line(line, len + 1, &limits, arena, &ex2, &err), SPW_OK);
    assert_int_equal(ex2->n_keys, 8);
    assert_memory_equal(ex2->keys, ex->keys, 8 * sizeof(uint64_t));

    /* All empty: a label and no features. */
    const char *empty[40] = {"0"};
    for (int i = 1; i < 40; i++)
        empty[i] = "";
    criteo_join(line, sizeof(line), empty);
    assert_int_equal(spw_parse_criteo_line(line, strlen(line), &limits, arena, &ex, &err), SPW_OK);
    assert_true(ex->label == 0.0f);
    assert_int_equal(ex->n_keys, 0);
    spw_arena_destroy(arena);
}

static void test_reader_criteo_rejects(void **state)
{
    (void)state;
    struct spw_ingest_limits limits = limits_default();
    const char *cols[40];
    for (int i = 0; i < 40; i++)
        cols[i] = i == 0 ? "1" : i <= 13 ? "3" : "abc";
    char line[1024], longer[1100];
    criteo_join(line, sizeof(line), cols);

    /* Column counts. */
    snprintf(longer, sizeof(longer), "%s\tx", line);
    criteo_reject(longer, &limits, SPW_REJECT_UNDECODABLE, "more than 40 columns");
    *strrchr(line, '\t') = '\0';
    criteo_reject(line, &limits, SPW_REJECT_UNDECODABLE, "39 columns, expected 40");
    criteo_reject("", &limits, SPW_REJECT_UNDECODABLE, "1 columns");

    /* Label. */
    const char *bad[40];
    memcpy(bad, cols, sizeof(bad));
    bad[0] = "2";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_BAD_LABEL,
                  "label \"2\"");
    bad[0] = "";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_BAD_LABEL, "label");
    bad[0] = "1.0";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_BAD_LABEL, "label");

    /* Integer columns: full consumption, no overflow, named column. */
    memcpy(bad, cols, sizeof(bad));
    bad[5] = "12x";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_UNDECODABLE,
                  "I5: \"12x\" is not an integer");
    bad[5] = "3";
    bad[13] = "99999999999999999999";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_UNDECODABLE, "I13");
    bad[13] = "-";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_UNDECODABLE, "I13");
    bad[13] = " 1";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_UNDECODABLE, "I13");
    bad[13] = "-9223372036854775808"; /* the smallest int64 is an integer */
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex;
    struct spw_parse_error err;
    criteo_join(line, sizeof(line), bad);
    assert_int_equal(spw_parse_criteo_line(line, strlen(line), &limits, arena, &ex, &err), SPW_OK);
    bad[13] = "9223372036854775807";
    criteo_join(line, sizeof(line), bad);
    assert_int_equal(spw_parse_criteo_line(line, strlen(line), &limits, arena, &ex, &err), SPW_OK);
    bad[13] = "9223372036854775808";
    criteo_reject(criteo_join(line, sizeof(line), bad), &limits, SPW_REJECT_UNDECODABLE, "I13");

    /* max_features boundary: 39 features; 39 is fine, 38 is one short. */
    criteo_join(line, sizeof(line), cols);
    limits.max_features = 39;
    assert_int_equal(spw_parse_criteo_line(line, strlen(line), &limits, arena, &ex, &err), SPW_OK);
    assert_int_equal(ex->n_keys, 39);
    limits.max_features = 38;
    criteo_reject(line, &limits, SPW_REJECT_TOO_MANY_FEATURES, "39 features, limit 38");

    /* Field ids above the limit name the column. */
    limits = limits_default();
    limits.max_field_id = 0x10000000u; /* below I1's id */
    criteo_reject(line, &limits, SPW_REJECT_BAD_FIELD, "I1: field id");

    /* Size. */
    limits = limits_default();
    limits.max_record_bytes = 10;
    criteo_reject(line, &limits, SPW_REJECT_OVERSIZED, "limit 10");
    spw_arena_destroy(arena);
}

/* ---- pb and validation ---- */

/* Packs an example with n features (field i+1, key 100+i, weight w[i] when w). */
static void pack_example(struct spw_wire_buf *buf, bool delimited, bool has_label, float label,
                         size_t n, const float *w)
{
    Sparrow__Example ex = SPARROW__EXAMPLE__INIT;
    uint32_t fields[64];
    uint64_t keys[64];
    float weights[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        fields[i] = (uint32_t)i + 1;
        keys[i] = 100 + i;
        if (w)
            weights[i] = w[i];
    }
    ex.has_label = has_label;
    ex.label = label;
    ex.has_id = true;
    ex.id = 77;
    ex.n_fields = ex.n_keys = n;
    ex.fields = fields;
    ex.keys = keys;
    ex.n_weights = w ? n : 0;
    ex.weights = weights;
    spw_err_t rc =
        delimited ? spw_wire_pack_delimited(&ex.base, buf) : spw_wire_pack(&ex.base, buf);
    assert_int_equal(rc, SPW_OK);
}

static void pb_reject(const struct spw_wire_buf *buf, const struct spw_ingest_limits *limits,
                      enum spw_reject_reason reason, const char *needle)
{
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex;
    struct spw_parse_error err = {0};
    spw_err_t rc = spw_parse_pb_example(buf->data, buf->len, limits, arena, &ex, &err);
    check_reject(rc, &err, "pb", reason, needle);
    spw_arena_destroy(arena);
}

static void test_reader_pb_example(void **state)
{
    (void)state;
    struct spw_ingest_limits limits = limits_default();
    spw_arena_t *arena = spw_arena_new(0, 0);
    struct spw_wire_buf buf = {0};
    const float w[3] = {1.0f, 0.5f, 2.0f};
    pack_example(&buf, false, true, 1.0f, 3, w);
    Sparrow__Example *ex;
    struct spw_parse_error err;
    assert_int_equal(spw_parse_pb_example(buf.data, buf.len, &limits, arena, &ex, &err), SPW_OK);
    assert_int_equal(ex->n_keys, 3);
    assert_int_equal(ex->fields[2], 3);
    assert_int_equal(ex->keys[1], 101);
    assert_true(ex->weights[1] == 0.5f);
    assert_int_equal(ex->id, 77);

    buf.len = 0;
    pack_example(&buf, false, false, 0.0f, 1, NULL);
    pb_reject(&buf, &limits, SPW_REJECT_BAD_LABEL, "missing label");
    buf.len = 0;
    pack_example(&buf, false, true, 0.5f, 1, NULL);
    pb_reject(&buf, &limits, SPW_REJECT_BAD_LABEL, "label 0.5");
    buf.len = 0;
    const float nan_w[2] = {1.0f, NAN};
    pack_example(&buf, false, true, 1.0f, 2, nan_w);
    pb_reject(&buf, &limits, SPW_REJECT_NONFINITE_WEIGHT, "feature 1 (field 2): weight is NaN");
    buf.len = 0;
    pack_example(&buf, false, true, 1.0f, 5, NULL);
    limits.max_field_id = 4;
    pb_reject(&buf, &limits, SPW_REJECT_BAD_FIELD, "feature 4: field id 5 above limit 4");
    limits = limits_default();
    limits.max_features = 4;
    pb_reject(&buf, &limits, SPW_REJECT_TOO_MANY_FEATURES, "5 features, limit 4");
    limits.max_features = 5;
    assert_int_equal(spw_parse_pb_example(buf.data, buf.len, &limits, arena, &ex, &err), SPW_OK);
    limits = limits_default();
    limits.max_record_bytes = buf.len - 1;
    pb_reject(&buf, &limits, SPW_REJECT_OVERSIZED, "record of");
    limits = limits_default();
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0x01, 0x02};
    struct spw_wire_buf junk = {.data = (uint8_t *)garbage, .len = sizeof(garbage)};
    pb_reject(&junk, &limits, SPW_REJECT_UNDECODABLE, "not a valid sparrow.Example");
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_reader_validate(void **state)
{
    (void)state;
    struct spw_ingest_limits limits = limits_default();
    struct spw_parse_error err;
    uint32_t fields[2] = {1, 2};
    uint64_t keys[2] = {3, 4};
    float weights[2] = {1.0f, INFINITY};
    Sparrow__Example ex = SPARROW__EXAMPLE__INIT;
    ex.has_label = true;
    ex.label = 1.0f;
    ex.n_fields = 2;
    ex.fields = fields;
    ex.n_keys = 2;
    ex.keys = keys;
    assert_int_equal(spw_ingest_validate(&ex, &limits, &err), SPW_OK);
    assert_int_equal(err.reason, SPW_REJECT_NONE);

    ex.n_fields = 1;
    check_reject(spw_ingest_validate(&ex, &limits, &err), &err, "fields", SPW_REJECT_UNDECODABLE,
                 "1 field ids for 2 keys");
    ex.n_fields = 2;
    ex.n_weights = 1;
    ex.weights = weights;
    check_reject(spw_ingest_validate(&ex, &limits, &err), &err, "weights", SPW_REJECT_UNDECODABLE,
                 "1 weights for 2 keys");
    ex.n_weights = 2;
    check_reject(spw_ingest_validate(&ex, &limits, &err), &err, "inf", SPW_REJECT_NONFINITE_WEIGHT,
                 "infinite");
    ex.n_weights = 0;
    ex.label = INFINITY;
    check_reject(spw_ingest_validate(&ex, &limits, &err), &err, "label", SPW_REJECT_BAD_LABEL,
                 "infinite");
    ex.label = 0.0f;
    ex.has_oracle_p = true;
    ex.oracle_p = NAN;
    check_reject(spw_ingest_validate(&ex, &limits, &err), &err, "oracle", SPW_REJECT_BAD_LABEL,
                 "oracle_p");
    ex.oracle_p = 1.0f;
    assert_int_equal(spw_ingest_validate(&ex, &limits, &err), SPW_OK);
    limits.max_record_bytes = 8;
    check_reject(spw_ingest_validate(&ex, &limits, &err), &err, "size", SPW_REJECT_OVERSIZED,
                 "limit 8");
    limits = limits_default();
    limits.binary_label = false;
    ex.label = -3.5f;
    assert_int_equal(spw_ingest_validate(&ex, &limits, &err), SPW_OK);

    assert_string_equal(spw_reject_reason_name(SPW_REJECT_OVERSIZED), "oversized");
    enum spw_format format;
    assert_int_equal(spw_format_parse("criteo", &format), SPW_OK);
    assert_int_equal(format, SPW_FORMAT_CRITEO);
    assert_int_equal(spw_format_parse("csv", &format), SPW_ERR_INVALID);
}

/* ---- reader ---- */

struct read_result {
    spw_err_t rc;
    enum spw_reject_reason reason;
    char position[64];
    char message[160];
    size_t n_keys;
    char raw[64];
};

/* Reads up to max records; returns how many calls were made before EOF. */
static size_t read_all(spw_reader_t *reader, struct read_result *res, size_t max)
{
    spw_arena_t *arena = spw_arena_new(0, 0);
    size_t n = 0;
    for (; n < max; n++) {
        Sparrow__Example *ex;
        struct spw_parse_error err;
        spw_arena_reset(arena);
        spw_err_t rc = spw_reader_next(reader, arena, &ex, &err);
        if (rc == SPW_ERR_EOF)
            break;
        res[n].rc = rc;
        res[n].reason = err.reason;
        snprintf(res[n].position, sizeof(res[n].position), "%s", spw_reader_position(reader));
        snprintf(res[n].message, sizeof(res[n].message), "%s", err.message);
        res[n].n_keys = rc == SPW_OK ? ex->n_keys : 0;
        size_t len;
        const char *raw = spw_reader_raw(reader, &len);
        snprintf(res[n].raw, sizeof(res[n].raw), "%.*s", (int)(len < 63 ? len : 63),
                 raw ? raw : "");
    }
    spw_arena_destroy(arena);
    return n;
}

static void test_reader_json_file_positions(void **state)
{
    (void)state;
    const char text[] = "{\"label\":1,\"features\":{\"a\":\"x\"}}\n"     /* 1 ok */
                        "{\"label\":1,\"features\":\n"                   /* 2 undecodable */
                        "\n"                                             /* 3 blank */
                        "\r\n"                                           /* 4 blank */
                        "{\"label\":7,\"features\":{}}\r\n"              /* 5 bad label */
                        "{\"label\":0,\"features\":{\"a\":1,\"b\":2}}\n" /* 6 ok */
                        "{\"label\":0,\"features\":{\"c\":3}}";          /* 7 ok, no newline */
    const char *path = temp_file(0, text, sizeof(text) - 1);
    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    spw_reader_t *reader =
        spw_reader_open(path, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct read_result res[10] = {0};
    size_t n = read_all(reader, res, 10);
    assert_int_equal(n, 5);
    assert_int_equal(res[0].rc, SPW_OK);
    assert_string_equal(res[0].position, "line 1");
    assert_int_equal(res[0].n_keys, 1);
    assert_string_equal(res[0].raw, "{\"label\":1,\"features\":{\"a\":\"x\"}}");
    assert_int_equal(res[1].rc, SPW_ERR_INVALID);
    assert_int_equal(res[1].reason, SPW_REJECT_UNDECODABLE);
    assert_string_equal(res[1].position, "line 2");
    assert_string_equal(res[1].raw, "{\"label\":1,\"features\":");
    assert_int_equal(res[2].rc, SPW_ERR_INVALID);
    assert_int_equal(res[2].reason, SPW_REJECT_BAD_LABEL);
    assert_string_equal(res[2].position, "line 5");
    assert_int_equal(res[3].rc, SPW_OK);
    assert_string_equal(res[3].position, "line 6");
    assert_int_equal(res[3].n_keys, 2);
    assert_int_equal(res[4].rc, SPW_OK);
    assert_string_equal(res[4].position, "line 7");
    assert_int_equal(spw_reader_records(reader), 5);
    assert_int_equal(spw_reader_rejected(reader), 2);
    /* EOF stays EOF. */
    assert_int_equal(read_all(reader, res, 10), 0);
    spw_reader_close(reader);
    spw_reader_close(NULL);
    unlink(path);
}

/* A line that ends inside a surrogate pair must not change how the next line decodes (json-c
 * 0.16 keeps the pending surrogate in a reused tokener across its reset). */
static void test_reader_json_surrogate_across_lines(void **state)
{
    (void)state;
    const char text[] = "{\"label\":1,\"features\":{\"a\":\"\\ud83d\n"
                        "{\"label\":1,\"features\":{\"\\u0060\":\"\\u00e9\"}}\n";
    const char *path = temp_file(0, text, sizeof(text) - 1);
    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    spw_reader_t *reader =
        spw_reader_open(path, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex = NULL;
    struct spw_parse_error err;
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_INVALID);
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_OK);
    assert_int_equal(ex->n_keys, 1);
    assert_int_equal(ex->fields[0], spw_hash_field_name("`", 1));
    assert_int_equal(ex->keys[0], key_of("`", "\xc3\xa9"));
    spw_arena_destroy(arena);
    spw_reader_close(reader);
    unlink(path);
}

static void test_reader_oversized_line(void **state)
{
    (void)state;
    /* Lines 2 and 6 are far longer than the reader's buffer (skipped through it, line 6 up to
     * the end of the file); line 4 is a little over the limit. */
    size_t big = 200000, cap = big * 2 + 1000, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "{\"label\":1,\"features\":{\"a\":1}}\n");
    text[n++] = '{';
    memset(text + n, ' ', big);
    n += big;
    text[n++] = '\n';
    n += (size_t)snprintf(text + n, cap - n, "{\"label\":0,\"features\":{}}\n");
    n += (size_t)snprintf(text + n, cap - n, "{\"label\":0,\"features\":{\"%0300d\":1}}\n", 0);
    n += (size_t)snprintf(text + n, cap - n, "{\"label\":1,\"features\":{\"b\":2}}\n");
    memset(text + n, 'x', big);
    n += big;
    const char *path = temp_file(0, text, n);
    free(text);

    struct spw_ingest_limits limits = limits_default();
    limits.max_record_bytes = 100;
    char errstr[128];
    spw_reader_t *reader =
        spw_reader_open(path, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct read_result res[10] = {0};
    assert_int_equal(read_all(reader, res, 10), 6);
    assert_int_equal(res[0].rc, SPW_OK);
    assert_int_equal(res[1].rc, SPW_ERR_INVALID);
    assert_int_equal(res[1].reason, SPW_REJECT_OVERSIZED);
    assert_string_equal(res[1].position, "line 2");
    assert_non_null(strstr(res[1].message, "line of 200001 bytes, limit 100"));
    assert_string_equal(res[1].raw, "");
    assert_int_equal(res[2].rc, SPW_OK);
    assert_string_equal(res[2].position, "line 3");
    assert_int_equal(res[3].reason, SPW_REJECT_OVERSIZED);
    assert_string_equal(res[3].position, "line 4");
    assert_int_equal(res[4].rc, SPW_OK);
    assert_string_equal(res[4].position, "line 5");
    assert_int_equal(res[5].reason, SPW_REJECT_OVERSIZED);
    assert_string_equal(res[5].position, "line 6");
    assert_non_null(strstr(res[5].message, "line of 200000 bytes"));
    assert_int_equal(spw_reader_records(reader), 6);
    assert_int_equal(spw_reader_rejected(reader), 3);
    spw_reader_close(reader);
    unlink(path);
}

static void test_reader_long_line_within_limit(void **state)
{
    (void)state;
    /* A 300 KB line (several buffer fills) under the default 1 MiB limit parses. */
    size_t cap = 400000, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "{\"label\":1,\"features\":{");
    for (int i = 0; i < 4000; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s\"f%d\":\"%070d\"", i ? "," : "", i, i);
    n += (size_t)snprintf(text + n, cap - n, "}}\n{\"label\":0,\"features\":{}}\n");
    assert_true(n > 300000 && n < cap);
    const char *path = temp_file(0, text, n);
    free(text);
    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    spw_reader_t *reader =
        spw_reader_open(path, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct read_result res[4] = {0};
    assert_int_equal(read_all(reader, res, 4), 2);
    assert_int_equal(res[0].rc, SPW_OK);
    assert_int_equal(res[0].n_keys, 4000);
    assert_int_equal(res[1].rc, SPW_OK);
    assert_string_equal(res[1].position, "line 2");
    spw_reader_close(reader);
    unlink(path);
}

/* Many records, so that records straddle buffer refills, with a limit that makes the buffer
 * small (1 KiB) and with the default one (64 KiB). */
static void test_reader_many_records(void **state)
{
    (void)state;
    enum { N = 6000 };
    size_t cap = (size_t)N * 64, n = 0;
    char *text = malloc(cap);
    struct spw_wire_buf pb = {0};
    for (int i = 0; i < N; i++) {
        n += (size_t)snprintf(text + n, cap - n, "{\"label\":%d,\"features\":{\"n\":%d}}\n", i & 1,
                              i);
        Sparrow__Example ex = SPARROW__EXAMPLE__INIT;
        uint32_t field = (uint32_t)i % 7;
        uint64_t key = (uint64_t)i;
        ex.has_label = true;
        ex.label = (float)(i & 1);
        ex.n_fields = ex.n_keys = (size_t)(i % 3); /* 0..2 features: records of varied size */
        ex.fields = (uint32_t[]){field, field};
        ex.keys = (uint64_t[]){key, key};
        assert_int_equal(spw_wire_pack_delimited(&ex.base, &pb), SPW_OK);
    }
    const char *json_path = temp_file(0, text, n);
    const char *pb_path = temp_file(1, pb.data, pb.len);
    free(text);
    free(pb.data);

    spw_arena_t *arena = spw_arena_new(0, 0);
    for (int pass = 0; pass < 4; pass++) {
        bool is_pb = pass & 1;
        struct spw_ingest_limits limits = limits_default();
        if (pass < 2)
            limits.max_record_bytes = 200;
        char errstr[128];
        spw_reader_t *reader =
            spw_reader_open(is_pb ? pb_path : json_path, is_pb ? SPW_FORMAT_PB : SPW_FORMAT_JSON,
                            &limits, NULL, errstr, sizeof(errstr));
        assert_non_null(reader);
        for (int i = 0; i < N; i++) {
            Sparrow__Example *ex;
            struct spw_parse_error err;
            spw_arena_reset(arena);
            spw_err_t rc = spw_reader_next(reader, arena, &ex, &err);
            if (rc != SPW_OK)
                print_error("pass %d record %d: %s\n", pass, i, err.message);
            assert_int_equal(rc, SPW_OK);
            assert_true(ex->label == (float)(i & 1));
            if (is_pb) {
                assert_int_equal(ex->n_keys, (size_t)(i % 3));
                if (ex->n_keys)
                    assert_int_equal(ex->keys[0], (uint64_t)i);
            } else {
                char value[16];
                snprintf(value, sizeof(value), "%d", i);
                assert_int_equal(ex->n_keys, 1);
                assert_int_equal(ex->keys[0], key_of("n", value));
            }
        }
        Sparrow__Example *ex;
        struct spw_parse_error err;
        assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_EOF);
        assert_int_equal(spw_reader_records(reader), N);
        assert_int_equal(spw_reader_rejected(reader), 0);
        spw_reader_close(reader);
    }
    spw_arena_destroy(arena);
    unlink(json_path);
    unlink(pb_path);
}

static void test_reader_criteo_stream(void **state)
{
    (void)state;
    const char *cols[40];
    for (int i = 0; i < 40; i++)
        cols[i] = i == 0 ? "0" : i <= 13 ? "" : "cat";
    char line[512], text[2048];
    criteo_join(line, sizeof(line), cols);
    snprintf(text, sizeof(text), "%s\r\n1\tshort\r\n\n%s\n", line, line);
    FILE *f = fmemopen(text, strlen(text), "r");
    assert_non_null(f);
    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    spw_reader_t *reader =
        spw_reader_open_stream(f, SPW_FORMAT_CRITEO, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct read_result res[8] = {0};
    assert_int_equal(read_all(reader, res, 8), 3);
    assert_int_equal(res[0].rc, SPW_OK);
    assert_int_equal(res[0].n_keys, 26);
    assert_int_equal(res[1].reason, SPW_REJECT_UNDECODABLE);
    assert_string_equal(res[1].position, "line 2");
    assert_string_equal(res[1].raw, "1\tshort\r");
    assert_int_equal(res[2].rc, SPW_OK);
    assert_string_equal(res[2].position, "line 4");
    spw_reader_close(reader);
    /* The reader did not close the stream it was lent. */
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fgetc(f), '0');
    fclose(f);
}

static void test_reader_pb_stream(void **state)
{
    (void)state;
    struct spw_wire_buf buf = {0};
    pack_example(&buf, true, true, 1.0f, 3, NULL); /* record 1 */
    size_t second = buf.len;
    pack_example(&buf, true, false, 0.0f, 2, NULL); /* record 2: no label */
    size_t third = buf.len;
    /* record 3: a valid prefix over bytes that are no Example */
    static const uint8_t junk[] = {0x04, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(spw_wire_buf_reserve(&buf, sizeof(junk)), SPW_OK);
    memcpy(buf.data + buf.len, junk, sizeof(junk));
    buf.len += sizeof(junk);
    size_t fourth = buf.len;
    pack_example(&buf, true, true, 0.0f, 4, NULL); /* record 4 */
    size_t fifth = buf.len;
    pack_example(&buf, true, true, 1.0f, 5, NULL); /* record 5, cut short below */
    size_t full = buf.len;

    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    FILE *f = fmemopen(buf.data, full - 3, "r");
    spw_reader_t *reader =
        spw_reader_open_stream(f, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct read_result res[8] = {0};
    assert_int_equal(read_all(reader, res, 8), 5);
    assert_int_equal(res[0].rc, SPW_OK);
    assert_int_equal(res[0].n_keys, 3);
    assert_string_equal(res[0].position, "record 1 at byte 0");
    assert_int_equal(res[1].reason, SPW_REJECT_BAD_LABEL);
    char want[64];
    snprintf(want, sizeof(want), "record 2 at byte %zu", second);
    assert_string_equal(res[1].position, want);
    assert_int_equal(res[2].reason, SPW_REJECT_UNDECODABLE);
    snprintf(want, sizeof(want), "record 3 at byte %zu", third);
    assert_string_equal(res[2].position, want);
    assert_int_equal(res[3].rc, SPW_OK);
    assert_int_equal(res[3].n_keys, 4);
    snprintf(want, sizeof(want), "record 4 at byte %zu", fourth);
    assert_string_equal(res[3].position, want);
    assert_int_equal(res[4].rc, SPW_ERR_INVALID);
    assert_int_equal(res[4].reason, SPW_REJECT_UNDECODABLE);
    assert_non_null(strstr(res[4].message, "truncated record"));
    snprintf(want, sizeof(want), "record 5 at byte %zu", fifth);
    assert_string_equal(res[4].position, want);
    assert_int_equal(spw_reader_records(reader), 5);
    assert_int_equal(spw_reader_rejected(reader), 3);
    spw_reader_close(reader);
    fclose(f);

    /* A length prefix above the limit ends the stream: TOO_BIG, then EOF. */
    limits.max_record_bytes = 20;
    f = fmemopen(buf.data + fifth, full - fifth, "r");
    reader = spw_reader_open_stream(f, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex;
    struct spw_parse_error err;
    size_t raw_len;
    uint8_t first = buf.data[fifth];
    assert_true(first > 20 && first < 0x80); /* a one-byte prefix over the limit */
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_TOO_BIG);
    assert_int_equal(err.reason, SPW_REJECT_OVERSIZED);
    assert_non_null(strstr(err.message, "limit 20"));
    assert_string_equal(spw_reader_position(reader), "record 1 at byte 0");
    assert_null(spw_reader_raw(reader, &raw_len));
    assert_int_equal(raw_len, 0);
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_EOF);
    spw_reader_close(reader);
    fclose(f);

    /* A prefix cut inside its varint. */
    static const uint8_t cut[] = {0x80, 0x80};
    f = fmemopen((void *)cut, sizeof(cut), "r");
    reader = spw_reader_open_stream(f, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_INVALID);
    assert_non_null(strstr(err.message, "truncated length prefix"));
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_EOF);
    spw_reader_close(reader);
    fclose(f);

    /* The same stream from a file by path. */
    limits = limits_default();
    const char *path = temp_file(0, buf.data, fifth);
    reader = spw_reader_open(path, SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    assert_int_equal(read_all(reader, res, 4), 4); /* stops before the EOF call */
    assert_int_equal(res[3].rc, SPW_OK);
    const uint8_t *raw = spw_reader_raw(reader, &raw_len);
    assert_int_equal(raw_len, fifth - fourth - 1); /* record bytes without the 1-byte prefix */
    assert_memory_equal(raw, buf.data + fourth + 1, raw_len);
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_EOF);
    spw_reader_close(reader);
    unlink(path);
    spw_arena_destroy(arena);
    free(buf.data);
}

static void test_reader_stdin_and_open_errors(void **state)
{
    (void)state;
    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    assert_null(spw_reader_open("/nonexistent/events.json", SPW_FORMAT_JSON, &limits, NULL, errstr,
                                sizeof(errstr)));
    assert_non_null(strstr(errstr, "/nonexistent/events.json"));
    assert_null(spw_reader_open("/tmp", SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "is a directory"));

    const char text[] = "{\"label\":1,\"features\":{\"a\":\"x\"}}\n";
    const char *path = temp_file(0, text, sizeof(text) - 1);
    int saved = dup(STDIN_FILENO);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    assert_true(dup2(fileno(in), STDIN_FILENO) >= 0);
    spw_reader_t *reader =
        spw_reader_open("-", SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    struct read_result res[2] = {0};
    assert_int_equal(read_all(reader, res, 2), 1);
    assert_int_equal(res[0].rc, SPW_OK);
    spw_reader_close(reader);
    /* stdin stays open after close. */
    assert_int_not_equal(fcntl(STDIN_FILENO, F_GETFD), -1);
    dup2(saved, STDIN_FILENO);
    close(saved);
    fclose(in);
    unlink(path);
}

static void test_reader_io_error_and_arena_budget(void **state)
{
    (void)state;
    struct spw_ingest_limits limits = limits_default();
    char errstr[128];
    spw_arena_t *arena = spw_arena_new(0, 0);
    Sparrow__Example *ex;
    struct spw_parse_error err;
    /* A stream open for writing fails every read: SPW_ERR_IO, and it sticks. */
    FILE *f = fopen("/dev/null", "w");
    assert_non_null(f);
    spw_reader_t *reader =
        spw_reader_open_stream(f, SPW_FORMAT_JSON, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_IO);
    assert_non_null(strstr(err.message, "read error"));
    assert_int_equal(spw_reader_next(reader, arena, &ex, &err), SPW_ERR_IO);
    spw_reader_close(reader);
    fclose(f);
    spw_arena_destroy(arena);

    /* An arena without room is SPW_ERR_NOMEM, not a reject and not a crash. */
    arena = spw_arena_new(64, 64);
    const char *json = "{\"label\":1,\"features\":{\"a\":1}}";
    assert_int_equal(spw_parse_json_line(json, strlen(json), NULL, &limits, arena, &ex, &err),
                     SPW_ERR_NOMEM);
    const char *cols[40] = {"1"};
    for (int i = 1; i < 40; i++)
        cols[i] = "7";
    char line[256];
    criteo_join(line, sizeof(line), cols);
    assert_int_equal(spw_parse_criteo_line(line, strlen(line), &limits, arena, &ex, &err),
                     SPW_ERR_NOMEM);
    spw_arena_destroy(arena);
}

SPW_TEST_MAIN(test_reader_json_known_record, test_reader_json_literal_rule,
              test_reader_json_rejects, test_reader_json_limits, test_reader_json_schema,
              test_reader_json_fast_escapes, test_reader_json_fast_whitespace,
              test_reader_json_fast_skips_nested, test_reader_json_fast_numbers,
              test_reader_json_fast_names, test_reader_json_fast_bounds, test_reader_schema_errors,
              test_reader_criteo_field_ids, test_reader_criteo_known_record,
              test_reader_criteo_rejects, test_reader_pb_example, test_reader_validate,
              test_reader_json_file_positions, test_reader_json_surrogate_across_lines,
              test_reader_oversized_line, test_reader_long_line_within_limit,
              test_reader_many_records, test_reader_criteo_stream, test_reader_pb_stream,
              test_reader_stdin_and_open_errors, test_reader_io_error_and_arena_budget)
