/* Unit tests of the predict request parser's protobuf form: examples, weights, the JSON form's
 * equal, malformed bytes and the limits. */
#include "test_main.h" /* cmocka and what it needs first */

#include <math.h>
#include <string.h>

#include "sparrow/serve.h"
#include "sparrow/trainer.h"
#include "sparrow/wire.h"

static const struct spw_serve_limits LIMITS = {
    .max_features = 4, .max_examples = 3, .max_depth = 8};

/* An example's keys and weights (NULL: none) as a PredictExample. */
struct ex_spec {
    size_t n;
    const uint64_t *keys;
    const float *weights;
};

/* Packs a PredictRequest of n examples into buf (replaced). */
static void pack_request(const struct ex_spec *specs, size_t n, struct spw_wire_buf *buf)
{
    Sparrow__PredictExample exs[8], *ptrs[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        sparrow__predict_example__init(&exs[i]);
        exs[i].n_keys = specs[i].n;
        exs[i].keys = (uint64_t *)specs[i].keys;
        exs[i].n_weights = specs[i].weights ? specs[i].n : 0;
        exs[i].weights = (float *)specs[i].weights;
        ptrs[i] = &exs[i];
    }
    Sparrow__PredictRequest req = SPARROW__PREDICT_REQUEST__INIT;
    req.n_examples = n;
    req.examples = ptrs;
    buf->len = 0;
    assert_int_equal(spw_wire_pack(&req.base, buf), SPW_OK);
}

static spw_err_t parse(spw_arena_t *arena, const struct spw_wire_buf *buf,
                       struct spw_serve_request *out, char *errstr, size_t size)
{
    spw_arena_reset(arena);
    memset(out, 0, sizeof(*out));
    return spw_serve_request_parse_pb(buf->data, buf->len, &LIMITS, arena, out, errstr, size);
}

static void expect_bad_bytes(spw_arena_t *arena, const void *data, size_t len, const char *want)
{
    char errstr[256];
    struct spw_serve_request req;
    spw_arena_reset(arena);
    spw_err_t rc =
        spw_serve_request_parse_pb(data, len, &LIMITS, arena, &req, errstr, sizeof(errstr));
    if (rc != SPW_ERR_INVALID || !strstr(errstr, want))
        fail_msg("%zu bytes: rc %d errstr \"%s\", wanted \"%s\"", len, rc, errstr, want);
}

static void test_serve_request_pb_single_example(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    struct spw_wire_buf buf = {0};
    const uint64_t keys[] = {1, 42, UINT64_MAX};
    pack_request(&(struct ex_spec){3, keys, NULL}, 1, &buf);
    struct spw_serve_request req;
    char errstr[256];
    assert_int_equal(parse(arena, &buf, &req, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(req.n, 1);
    assert_int_equal(req.examples[0].n, 3);
    assert_null(req.examples[0].fields);
    for (size_t i = 0; i < 3; i++) {
        assert_true(req.examples[0].keys[i] == keys[i]);
        assert_true(req.examples[0].weights[i] == 1.0f);
    }
    /* An example without keys is allowed, as {"keys": []} is. */
    pack_request(&(struct ex_spec){0, NULL, NULL}, 1, &buf);
    assert_int_equal(parse(arena, &buf, &req, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(req.n, 1);
    assert_int_equal(req.examples[0].n, 0);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_serve_request_pb_batch_and_weights(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    struct spw_wire_buf buf = {0};
    const uint64_t k0[] = {7}, k1[] = {8, 9, 10, 11}, k2[] = {12, 13};
    const float w1[] = {0.5f, -2.0f, 0.0f, 1e30f};
    const struct ex_spec specs[] = {{1, k0, NULL}, {4, k1, w1}, {2, k2, NULL}};
    pack_request(specs, 3, &buf);
    struct spw_serve_request req;
    char errstr[256];
    assert_int_equal(parse(arena, &buf, &req, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(req.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(req.examples[i].n, specs[i].n);
        for (size_t j = 0; j < specs[i].n; j++) {
            assert_true(req.examples[i].keys[j] == specs[i].keys[j]);
            float w = specs[i].weights ? specs[i].weights[j] : 1.0f;
            assert_true(req.examples[i].weights[j] == w);
        }
    }
    free(buf.data);
    spw_arena_destroy(arena);
}

/* The prediction of rows made up from the keys, through the batch and forward serve uses. */
static void predict(const struct spw_serve_request *req, float *preds)
{
    char errstr[128];
    spw_batch_t *batch = spw_batch_new(1, 8, errstr, sizeof(errstr));
    assert_non_null(batch);
    for (size_t i = 0; i < req->n; i++) {
        const struct spw_serve_example *ex = &req->examples[i];
        assert_int_equal(
            spw_batch_add_fields(batch, 0.0f, NAN, 0, ex->n, ex->keys, ex->weights, ex->fields),
            SPW_OK);
    }
    struct spw_model model;
    assert_int_equal(spw_model_init(&model, SPW_MODEL_FM, 3), SPW_OK);
    size_t nu = spw_batch_unique(batch);
    const uint64_t *keys = spw_batch_keys(batch);
    float *rows = calloc(nu * model.dim, sizeof(float));
    for (size_t u = 0; u < nu; u++)
        for (uint32_t d = 0; d < model.dim; d++)
            rows[u * model.dim + d] =
                (float)((keys[u] * 2654435761u + d * 40503u) % 1000) / 2500.0f;
    spw_cpu_forward(&model, batch, rows, preds);
    free(rows);
    spw_batch_destroy(batch);
}

/* The protobuf form of an example is the JSON form's: the same keys and weights, so the same
 * probability, exactly (keys above 2^53 included). */
static void test_serve_request_pb_same_prediction_as_json(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20), *arena2 = spw_arena_new(4096, 1 << 20);
    const uint64_t k0[] = {3, 18446744073709551615u, 9007199254740993u, 77};
    const float w0[] = {0.25f, 1.5f, -0.75f, 3.0f};
    const uint64_t k1[] = {5, 77};
    const struct ex_spec specs[] = {{4, k0, w0}, {2, k1, NULL}};
    struct spw_wire_buf buf = {0};
    pack_request(specs, 2, &buf);
    const char *json = "{\"examples\":[{\"keys\":[3,\"18446744073709551615\",\"9007199254740993\","
                       "77],\"weights\":[0.25,1.5,-0.75,3]},{\"keys\":[5,77]}]}";
    struct spw_serve_request pb, js;
    char errstr[256];
    assert_int_equal(parse(arena, &buf, &pb, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(spw_serve_request_parse(json, strlen(json), &LIMITS, NULL, arena2, &js, errstr,
                                             sizeof(errstr)),
                     SPW_OK);
    assert_int_equal(pb.n, js.n);
    for (size_t i = 0; i < pb.n; i++) {
        assert_int_equal(pb.examples[i].n, js.examples[i].n);
        assert_memory_equal(pb.examples[i].keys, js.examples[i].keys,
                            pb.examples[i].n * sizeof(uint64_t));
        assert_memory_equal(pb.examples[i].weights, js.examples[i].weights,
                            pb.examples[i].n * sizeof(float));
    }
    float p_pb[2], p_js[2];
    predict(&pb, p_pb);
    predict(&js, p_js);
    assert_memory_equal(p_pb, p_js, sizeof(p_pb));
    assert_true(p_pb[0] != 0.5f && p_pb[0] != p_pb[1]);
    free(buf.data);
    spw_arena_destroy(arena2);
    spw_arena_destroy(arena);
}

static void test_serve_request_pb_malformed(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    expect_bad_bytes(arena, "", 0, "0 examples");
    expect_bad_bytes(arena, "{\"keys\":[1]}", 12, "unknown field"); /* JSON sent as protobuf */
    expect_bad_bytes(arena, "\x0a", 1, "not a whole length-delimited message");
    expect_bad_bytes(arena, "\x0a\x05\x0a\x08", 4, "not a whole");      /* length past the end */
    expect_bad_bytes(arena, "\x08\x01", 2, "example 0 is not a whole"); /* wrong wire type */
    expect_bad_bytes(arena, "\x0a\x00\x80", 3, "truncated tag");
    expect_bad_bytes(arena, "\x12\x00", 2, "unknown field 2");
    /* an example of keys whose packed block is not a multiple of 8 bytes */
    expect_bad_bytes(arena, "\x0a\x05\x0a\x03\x01\x02\x03", 7, "undecodable protobuf");
    /* an example with an unknown field (3, varint) */
    expect_bad_bytes(arena, "\x0a\x02\x18\x01", 4, "example 0: unknown field 3");
    /* weights that are not one per key, or not finite */
    struct spw_wire_buf buf = {0};
    Sparrow__PredictExample ex = SPARROW__PREDICT_EXAMPLE__INIT, *ptr = &ex;
    uint64_t keys[] = {1, 2};
    float weights[] = {1.0f, INFINITY};
    ex.n_keys = 2;
    ex.keys = keys;
    ex.n_weights = 1;
    ex.weights = weights;
    Sparrow__PredictRequest req = SPARROW__PREDICT_REQUEST__INIT;
    req.n_examples = 1;
    req.examples = &ptr;
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    expect_bad_bytes(arena, buf.data, buf.len, "1 weights for 2 keys");
    ex.n_weights = 2;
    buf.len = 0;
    assert_int_equal(spw_wire_pack(&req.base, &buf), SPW_OK);
    expect_bad_bytes(arena, buf.data, buf.len, "weight 1 is not a finite number");
    /* every prefix of a good request is refused or is a smaller good one, never a crash */
    const uint64_t k[] = {1, 2, 3};
    const float w[] = {1, 2, 3};
    const struct ex_spec specs[] = {{3, k, w}, {3, k, NULL}};
    pack_request(specs, 2, &buf);
    char errstr[256];
    for (size_t len = 0; len < buf.len; len++) {
        struct spw_serve_request out;
        spw_arena_reset(arena);
        spw_err_t rc =
            spw_serve_request_parse_pb(buf.data, len, &LIMITS, arena, &out, errstr, sizeof(errstr));
        assert_true(rc == SPW_ERR_INVALID || (rc == SPW_OK && out.n == 1));
    }
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_serve_request_pb_limits(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 1 << 20);
    struct spw_wire_buf buf = {0};
    const uint64_t k[] = {1, 2, 3, 4, 5};
    const struct ex_spec four[] = {{1, k, NULL}, {1, k, NULL}, {1, k, NULL}, {1, k, NULL}};
    pack_request(four, 4, &buf);
    expect_bad_bytes(arena, buf.data, buf.len, "4 examples (1..3 allowed)");
    const struct ex_spec wide[] = {{4, k, NULL}, {5, k, NULL}};
    pack_request(wide, 2, &buf);
    expect_bad_bytes(arena, buf.data, buf.len, "example 1: 5 features, more than the limit 4");
    /* 100,000 empty examples (2 bytes each) are refused from their count, before the unpack
     * could spend the arena on them */
    uint8_t *many = malloc(200000);
    for (size_t i = 0; i < 100000; i++) {
        many[2 * i] = 0x0a;
        many[2 * i + 1] = 0x00;
    }
    spw_arena_t *small = spw_arena_new(4096, 64 * 1024);
    struct spw_serve_request out;
    char errstr[256];
    assert_int_equal(
        spw_serve_request_parse_pb(many, 200000, &LIMITS, small, &out, errstr, sizeof(errstr)),
        SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "100000 examples"));
    assert_true(spw_arena_used(small) == 0);
    /* a request within the limits but beyond the arena's budget is SPW_ERR_NOMEM */
    const struct ex_spec three[] = {{4, k, NULL}, {4, k, NULL}, {4, k, NULL}};
    pack_request(three, 3, &buf);
    spw_arena_t *tiny = spw_arena_new(64, 64);
    assert_int_equal(
        spw_serve_request_parse_pb(buf.data, buf.len, &LIMITS, tiny, &out, errstr, sizeof(errstr)),
        SPW_ERR_NOMEM);
    spw_arena_destroy(tiny);
    spw_arena_destroy(small);
    free(many);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_serve_request_pb_content_type(void **state)
{
    (void)state;
    assert_true(spw_serve_content_is_pb("application/x-protobuf"));
    assert_true(spw_serve_content_is_pb("Application/X-Protobuf; proto=sparrow.PredictRequest"));
    assert_true(spw_serve_content_is_pb(" application/x-protobuf "));
    assert_false(spw_serve_content_is_pb(NULL));
    assert_false(spw_serve_content_is_pb("application/json"));
    assert_false(spw_serve_content_is_pb("application/x-protobuffer"));
    assert_false(spw_serve_content_is_pb(""));
}

SPW_TEST_MAIN(test_serve_request_pb_single_example, test_serve_request_pb_batch_and_weights,
              test_serve_request_pb_same_prediction_as_json, test_serve_request_pb_malformed,
              test_serve_request_pb_limits, test_serve_request_pb_content_type)
