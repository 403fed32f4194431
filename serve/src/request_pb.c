/* The predict request parser's protobuf form: PredictRequest bodies into key/weight lists. */
#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "sparrow/serve.h"
#include "sparrow/wire.h"

/* A base-128 varint at *p (< end): false when truncated or longer than 10 bytes. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *out = v;
            return true;
        }
    }
    return false;
}

/*
 * The top level of a PredictRequest, walked before protobuf-c allocates anything: field 1
 * (examples, length-delimited) counted into *n, any other field refused. A body of many empty
 * examples costs 2 bytes each on the wire and about 64 bytes unpacked, so the count is checked
 * against max_examples here, not after the unpack. Returns false with errstr filled.
 *
 *   tag     varint (field << 3 | wire type)     field 1, wire type 2 only
 *   length  varint                               <= the bytes left
 *   value   length bytes                         a PredictExample (decoded later)
 */
static bool count_examples(const uint8_t *p, const uint8_t *end, size_t *n, char *errstr,
                           size_t errstr_size)
{
    size_t count = 0;
    while (p < end) {
        uint64_t tag, len;
        if (!read_varint(&p, end, &tag)) {
            spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "undecodable protobuf: truncated tag");
            return false;
        }
        if (tag >> 3 != 1) {
            spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                     "PredictRequest: unknown field %llu (only examples = 1)",
                     (unsigned long long)(tag >> 3));
            return false;
        }
        if ((tag & 7) != 2 || !read_varint(&p, end, &len) || len > (uint64_t)(end - p)) {
            spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                     "undecodable protobuf: example %zu is not a whole length-delimited message",
                     count);
            return false;
        }
        p += len;
        count++;
    }
    *n = count;
    return true;
}

bool spw_serve_content_is_pb(const char *content_type)
{
    static const char want[] = "application/x-protobuf";
    if (!content_type)
        return false;
    while (*content_type == ' ' || *content_type == '\t')
        content_type++;
    if (strncasecmp(content_type, want, sizeof(want) - 1) != 0)
        return false;
    const char *rest = content_type + sizeof(want) - 1;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    return *rest == '\0' || *rest == ';';
}

spw_err_t spw_serve_request_parse_pb(const uint8_t *body, size_t len,
                                     const struct spw_serve_limits *limits, spw_arena_t *arena,
                                     struct spw_serve_request *out, char *errstr,
                                     size_t errstr_size)
{
    out->n = 0;
    out->examples = NULL;
    if (errstr_size)
        errstr[0] = '\0';
    if (len > INT32_MAX)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "body too large");
    size_t n = 0, max = limits->max_examples;
    if (!count_examples(body, body + len, &n, errstr, errstr_size))
        return SPW_ERR_INVALID;
    if (n == 0 || n > max)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%zu examples (1..%zu allowed)", n,
                        max);
    Sparrow__PredictRequest *msg = NULL;
    spw_err_t rc = spw_wire_unpack_predict_request(body, len, len, arena, &msg);
    if (rc == SPW_ERR_NOMEM)
        return spw_errf(rc, errstr, errstr_size, "out of memory");
    if (rc != SPW_OK)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "undecodable protobuf");
    assert(msg->n_examples == n);
    struct spw_serve_example *examples = spw_arena_alloc(arena, n * sizeof(*examples));
    if (!examples)
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const Sparrow__PredictExample *ex = msg->examples[i];
        if (ex->base.n_unknown_fields)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: unknown field %u (keys = 1, weights = 2)", i,
                            (unsigned)(ex->base.unknown_fields[0].tag));
        if (ex->n_keys > limits->max_features)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: %zu features, more than the limit %u", i, ex->n_keys,
                            limits->max_features);
        if (ex->n_weights && ex->n_weights != ex->n_keys)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "example %zu: %zu weights for %zu keys", i, ex->n_weights, ex->n_keys);
        float *w = ex->weights;
        if (ex->n_weights) {
            for (size_t j = 0; j < ex->n_weights; j++)
                if (!isfinite(w[j]))
                    return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                                    "example %zu: weight %zu is not a finite number", i, j);
        } else {
            w = spw_arena_alloc(arena, (ex->n_keys ? ex->n_keys : 1) * sizeof(*w));
            if (!w)
                return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
            for (size_t j = 0; j < ex->n_keys; j++)
                w[j] = 1.0f;
        }
        examples[i] = (struct spw_serve_example){
            .n = ex->n_keys, .keys = ex->keys, .weights = w, .fields = NULL};
    }
    out->n = n;
    out->examples = examples;
    return SPW_OK;
}
