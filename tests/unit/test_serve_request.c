/* Unit tests of the predict request parser: hashing as ingest does, pre-hashed keys, refusals. */
#include "test_main.h" /* cmocka and what it needs first */

#include <string.h>

#include "sparrow/hash.h"
#include "sparrow/serve.h"

static const struct spw_serve_limits LIMITS = {
    .max_features = 4, .max_examples = 3, .max_depth = 8};

static spw_err_t parse(spw_arena_t *arena, const char *body, struct spw_serve_request *out,
                       char *errstr, size_t size)
{
    spw_arena_reset(arena);
    memset(out, 0, sizeof(*out));
    return spw_serve_request_parse(body, strlen(body), &LIMITS, NULL, arena, out, errstr, size);
}

/* Raw features give exactly the keys and weights ingest gives the same event. */
static void test_serve_request_features_hash_like_ingest(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    char errstr[256];
    struct spw_serve_request req;
    const char *feats = "{\"user\":\"u1\",\"hour\":13,\"price\":1.50,\"tag\":\"a\\/b\"}";
    char body[512], line[512];
    snprintf(body, sizeof(body), "{\"features\":%s,\"weight\":{\"user\":0.5},\"id\":7}", feats);
    assert_int_equal(parse(arena, body, &req, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(req.n, 1);
    const struct spw_serve_example *ex = &req.examples[0];
    assert_int_equal(ex->n, 4);

    spw_arena_t *arena2 = spw_arena_new(4096, 1 << 20);
    snprintf(line, sizeof(line), "{\"label\":1,\"features\":%s,\"weight\":{\"user\":0.5}}", feats);
    struct spw_ingest_limits il;
    spw_ingest_limits_default(&il);
    Sparrow__Example *want = NULL;
    struct spw_parse_error perr;
    assert_int_equal(spw_parse_json_line(line, strlen(line), NULL, &il, arena2, &want, &perr),
                     SPW_OK);
    assert_int_equal(want->n_keys, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_true(ex->keys[i] == want->keys[i]);
        assert_true(ex->weights[i] == (want->n_weights ? want->weights[i] : 1.0f));
    }
    /* And those keys are hash64(field, text) as docs/ARCHITECTURE.md §2 says. */
    uint32_t f = spw_hash_field_name("hour", 4);
    assert_true(ex->keys[1] == spw_hash_key(f, "13", 2));
    assert_true(ex->weights[0] == 0.5f);
    spw_arena_destroy(arena2);
    spw_arena_destroy(arena);
}

/* Short feature names and values: the keys of ingest's parser. This once failed as "oversized"
 * (the request was printed into a line and parsed again, and the packed Example outgrew it). */
static void test_serve_request_short_features_accepted(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    char errstr[256];
    struct spw_serve_request req;
    assert_int_equal(
        parse(arena, "{\"features\":{\"a\":1,\"b\":2,\"c\":3}}", &req, errstr, sizeof(errstr)),
        SPW_OK);
    assert_int_equal(req.examples[0].n, 3);
    const char *names[] = {"a", "b", "c"}, *values[] = {"1", "2", "3"};
    for (size_t i = 0; i < 3; i++)
        assert_true(req.examples[0].keys[i] ==
                    spw_hash_key(spw_hash_field_name(names[i], 1), values[i], 1));
    spw_arena_destroy(arena);
}

static void test_serve_request_keys_and_batches(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    char errstr[256];
    struct spw_serve_request req;
    const char *body = "{\"examples\":[{\"keys\":[0,\"18446744073709551615\",9223372036854775808],"
                       "\"weights\":[1,2.5,-1]},{\"keys\":[]},{\"features\":{\"a\":\"b\"}}]}";
    assert_int_equal(parse(arena, body, &req, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(req.n, 3);
    assert_int_equal(req.examples[0].n, 3);
    assert_true(req.examples[0].keys[0] == 0);
    assert_true(req.examples[0].keys[1] == UINT64_MAX);
    assert_true(req.examples[0].keys[2] == 9223372036854775808ull);
    assert_true(req.examples[0].weights[1] == 2.5f);
    assert_int_equal(req.examples[1].n, 0);
    assert_int_equal(req.examples[2].n, 1);
    assert_int_equal(parse(arena, " {\"keys\":[5]} \n", &req, errstr, sizeof(errstr)), SPW_OK);
    assert_true(req.examples[0].weights[0] == 1.0f);
    /* White space wherever JSON allows it. */
    assert_int_equal(parse(arena,
                           "{ \"examples\" : [ { \"keys\" : [ 7 , \"8\" ] , \"weights\" : [ 0.5 ,"
                           "\n\t2 ] } , {\"id\": {\"x\": [true, null]}, \"keys\":[ ]} ] }",
                           &req, errstr, sizeof(errstr)),
                     SPW_OK);
    assert_int_equal(req.n, 2);
    assert_int_equal(req.examples[0].n, 2);
    assert_true(req.examples[0].keys[0] == 7 && req.examples[0].keys[1] == 8);
    assert_true(req.examples[0].weights[0] == 0.5f && req.examples[0].weights[1] == 2.0f);
    assert_int_equal(req.examples[1].n, 0);
    /* The largest key as a JSON integer is exact (not saturated). */
    assert_int_equal(
        parse(arena, "{\"keys\":[18446744073709551615]}", &req, errstr, sizeof(errstr)), SPW_OK);
    assert_true(req.examples[0].keys[0] == UINT64_MAX);
    spw_arena_destroy(arena);
}

static void expect_bad(spw_arena_t *arena, const char *body, const char *needle)
{
    char errstr[256] = "";
    struct spw_serve_request req;
    spw_err_t rc = parse(arena, body, &req, errstr, sizeof(errstr));
    if (rc != SPW_ERR_INVALID || !strstr(errstr, needle))
        fail_msg("body %s: rc %d, message \"%s\", wanted \"%s\"", body, rc, errstr, needle);
}

static void test_serve_request_refusals(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    expect_bad(arena, "{\"keys\":[1,2", "malformed JSON");
    expect_bad(arena, "not json", "malformed JSON");
    expect_bad(arena, "{\"keys\":[1]} x", "malformed JSON");
    expect_bad(arena, "[1,2]", "not a JSON object");
    expect_bad(arena, "{\"keys\":[1],\"colour\":1}", "unknown field \"colour\"");
    expect_bad(arena, "{\"keys\":[1,2,3,4,5]}", "more than the limit");
    expect_bad(arena, "{\"features\":{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5}}",
               "too_many_features");
    expect_bad(arena,
               "{\"examples\":[{\"keys\":[1]},{\"keys\":[1]},{\"keys\":[1]},{\"keys\":[1]}]}",
               "4 examples");
    expect_bad(arena, "{\"examples\":[]}", "0 examples");
    expect_bad(arena, "{\"examples\":[{\"keys\":[1]}],\"keys\":[2]}", "only field");
    expect_bad(arena, "{\"examples\":[{\"keys\":[1]},{\"nope\":1}]}", "example 1: unknown");
    expect_bad(arena, "{\"keys\":[1],\"weights\":[1e39]}", "finite");
    expect_bad(arena, "{\"keys\":[1],\"weights\":[1,2]}", "2 weights for 1 keys");
    expect_bad(arena, "{\"keys\":[-1]}", "key 0");
    expect_bad(arena, "{\"keys\":[\"18446744073709551616\"]}", "key 0");
    expect_bad(arena, "{\"keys\":[\"007\"]}", "key 0");
    expect_bad(arena, "{\"keys\":[1.5]}", "key 0");
    expect_bad(arena, "{\"keys\":[1],\"features\":{}}", "both");
    expect_bad(arena, "{}", "needs \"features\" or \"keys\"");
    expect_bad(arena, "{\"features\":[1]}", "not an object");
    expect_bad(arena, "{\"features\":{\"a\":{\"b\":1}}}", "example 0:");
    expect_bad(arena, "{\"keys\":[[[[[[[[[[[[1]]]]]]]]]]]]}", "malformed JSON");
    /* A syntax error later in the body wins over a refusal of content before it. */
    expect_bad(arena, "{\"keys\":[-1],\"id\":[1,}", "malformed JSON");
    expect_bad(arena, "{\"keys\":[1,]}", "malformed JSON");
    expect_bad(arena, "{\"keys\":[01]}", "malformed JSON");
    expect_bad(arena, "{\"keys\":[1],\"id\":\"a\x01\"}", "malformed JSON");
    expect_bad(arena, "{\"keys\":[1],\"keys\":[2]}", "twice");
    expect_bad(arena, "{\"keys\":[1], \"weights\":[\"1\"]}", "weight 0");
    expect_bad(arena, "{\"keys\":[1],\"features\":{\"a\":1}", "malformed JSON");
    char errstr[64];
    struct spw_serve_request req;
    assert_int_equal(
        spw_serve_request_parse("", 0, &LIMITS, NULL, arena, &req, errstr, sizeof(errstr)),
        SPW_ERR_INVALID);
    /* A NUL byte inside the body is not JSON. */
    assert_int_equal(spw_serve_request_parse("{\"keys\":[1]}\0x", 14, &LIMITS, NULL, arena, &req,
                                             errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    spw_arena_destroy(arena);
}

SPW_TEST_MAIN(test_serve_request_features_hash_like_ingest,
              test_serve_request_short_features_accepted, test_serve_request_keys_and_batches,
              test_serve_request_refusals)
