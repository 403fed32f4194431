/* libFuzzer target: the JSON fast path against the json-c reference parser on the same line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json_tokener.h>

#include "sparrow/hash.h"

#include "ingest_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Limits and schemas under which every input runs: each exercises a different rule. */
struct config {
    const char *name;
    uint32_t max_features;
    uint32_t max_field_id;
    size_t max_record_bytes;
    bool binary_label;
    int schema; /* 0 none, 1 lenient, 2 strict */
};

static const struct config configs[] = {
    {"default", 4096, SPW_FIELD_ID_MAX, 1u << 20, true, 0},
    {"lenient schema, few features", 3, 1000, 1u << 20, false, 1},
    {"strict schema", 64, SPW_FIELD_ID_MAX, 1u << 20, true, 2},
    {"short records, low field ids", 4096, 100, 48, false, 0},
};

static spw_schema_t *schemas[3];
static struct json_tokener *tok;

/* The schemas, written once to a temp file: two names share an id, one name is numeric. */
static void setup(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    static const char text[] = "user = 1\nitem = 2\nhour = 3\na = 7\nb = 7\n5 = 50\nc = 2000\n";
    char path[] = "/tmp/fuzz_json_diff_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, sizeof(text) - 1) != (ssize_t)(sizeof(text) - 1))
        abort();
    close(fd);
    char errstr[256];
    schemas[1] = spw_schema_load(path, false, errstr, sizeof(errstr));
    schemas[2] = spw_schema_load(path, true, errstr, sizeof(errstr));
    unlink(path);
    tok = spw_ingest__json_tokener_new();
    if (!schemas[1] || !schemas[2] || !tok)
        abort();
}

static bool same_bits(const void *a, const void *b, size_t n)
{
    if (n == 0)
        return true;
    return a && b && memcmp(a, b, n) == 0;
}

/* Everything an Example carries that a JSON line can set. */
static bool same_example(const Sparrow__Example *a, const Sparrow__Example *b)
{
    return a->has_id == b->has_id && a->id == b->id && a->has_label == b->has_label &&
           same_bits(&a->label, &b->label, sizeof(a->label)) &&
           a->has_event_time_ms == b->has_event_time_ms && a->event_time_ms == b->event_time_ms &&
           a->has_oracle_p == b->has_oracle_p &&
           same_bits(&a->oracle_p, &b->oracle_p, sizeof(a->oracle_p)) &&
           a->n_fields == b->n_fields && a->n_keys == b->n_keys && a->n_weights == b->n_weights &&
           !a->fields == !b->fields && !a->keys == !b->keys && !a->weights == !b->weights &&
           same_bits(a->fields, b->fields, a->n_fields * sizeof(*a->fields)) &&
           same_bits(a->keys, b->keys, a->n_keys * sizeof(*a->keys)) &&
           same_bits(a->weights, b->weights, a->n_weights * sizeof(*a->weights)) &&
           a->base.n_unknown_fields == 0 && b->base.n_unknown_fields == 0;
}

static void print_example(const char *who, const Sparrow__Example *ex)
{
    fprintf(stderr, "%s: id %d/%llu label %d/%.9g ts %d/%lld oracle_p %d/%.9g n %zu/%zu/%zu\n", who,
            ex->has_id, (unsigned long long)ex->id, ex->has_label, (double)ex->label,
            ex->has_event_time_ms, (long long)ex->event_time_ms, ex->has_oracle_p,
            (double)ex->oracle_p, ex->n_fields, ex->n_keys, ex->n_weights);
    for (size_t i = 0; i < ex->n_keys; i++)
        fprintf(stderr, "  [%zu] field %u key %016llx weight %.9g\n", i, ex->fields[i],
                (unsigned long long)ex->keys[i], ex->weights ? (double)ex->weights[i] : 1.0);
}

/* Aborts with both results when they differ. */
static void check(const char *what, const struct config *cfg, const uint8_t *data, size_t size,
                  spw_err_t rc_ref, const Sparrow__Example *ex_ref,
                  const struct spw_parse_error *err_ref, spw_err_t rc, const Sparrow__Example *ex,
                  const struct spw_parse_error *err)
{
    bool same = rc == rc_ref && !ex == !ex_ref;
    if (same && rc == SPW_OK)
        same = ex && same_example(ex, ex_ref) && err->reason == SPW_REJECT_NONE &&
               err_ref->reason == SPW_REJECT_NONE;
    if (same && rc == SPW_ERR_INVALID)
        same = err->reason == err_ref->reason && strcmp(err->message, err_ref->message) == 0;
    if (same)
        return;
    fprintf(stderr, "json_diff: %s differs from json-c under \"%s\" on %zu bytes: %.*s\n", what,
            cfg->name, size, (int)(size > 400 ? 400 : size), (const char *)data);
    fprintf(stderr, "json-c: rc %d reason %s \"%s\"\n", rc_ref,
            spw_reject_reason_name(err_ref->reason), err_ref->message);
    fprintf(stderr, "%s: rc %d reason %s \"%s\"\n", what, rc, spw_reject_reason_name(err->reason),
            err->message);
    if (ex_ref)
        print_example("json-c", ex_ref);
    if (ex)
        print_example(what, ex);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    const char *line = (const char *)data;
    for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
        const struct config *cfg = &configs[c];
        struct spw_ingest_limits limits;
        spw_ingest_limits_default(&limits);
        limits.max_features = cfg->max_features;
        limits.max_field_id = cfg->max_field_id;
        limits.max_record_bytes = cfg->max_record_bytes;
        limits.binary_label = cfg->binary_label;
        const spw_schema_t *schema = schemas[cfg->schema];

        /* Separate arenas, so that neither result can point into the other's memory. */
        spw_arena_t *a_ref = spw_arena_new(4096, 16u << 20);
        spw_arena_t *a_fast = spw_arena_new(4096, 16u << 20);
        spw_arena_t *a_line = spw_arena_new(4096, 16u << 20);
        if (!a_ref || !a_fast || !a_line)
            abort();
        Sparrow__Example *ex_ref = NULL, *ex_fast = NULL, *ex_line = NULL;
        struct spw_parse_error err_ref = {0}, err_fast = {0}, err_line = {0};
        spw_err_t rc_ref = spw_ingest__parse_json_jsonc(tok, line, size, schema, &limits, a_ref,
                                                        &ex_ref, &err_ref);
        spw_err_t rc_fast =
            spw_ingest__parse_json_fast(line, size, schema, &limits, a_fast, &ex_fast, &err_fast);
        spw_err_t rc_line =
            spw_parse_json_line(line, size, schema, &limits, a_line, &ex_line, &err_line);

        if (rc_fast == SPW_INGEST__JSON_FALLBACK) {
            /* Handed back: nothing decided, nothing allocated. */
            if (ex_fast || err_fast.reason != SPW_REJECT_NONE || err_fast.message[0] ||
                spw_arena_used(a_fast) != 0)
                abort();
        } else {
            check("fast path", cfg, data, size, rc_ref, ex_ref, &err_ref, rc_fast, ex_fast,
                  &err_fast);
            /* The same allocations as json-c's path. */
            if (spw_arena_used(a_fast) != spw_arena_used(a_ref))
                abort();
        }
        check("spw_parse_json_line", cfg, data, size, rc_ref, ex_ref, &err_ref, rc_line, ex_line,
              &err_line);
        spw_arena_destroy(a_ref);
        spw_arena_destroy(a_fast);
        spw_arena_destroy(a_line);
    }
    return 0;
}
