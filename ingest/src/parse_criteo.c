/* Criteo TSV parser: label, 13 integer and 26 categorical columns into a sparrow.Example. */
#include "ingest_int.h"

#include <assert.h>
#include <string.h>

#include "sparrow/fmt.h"
#include "sparrow/hash.h"

#define CRITEO_COLUMNS  40 /* label, I1..I13, C1..C26 */
#define CRITEO_INTEGERS 13

/* spw_hash_field_name("I1".."I13", "C1".."C26"), precomputed; test_reader checks the table. */
static const uint32_t criteo_field_ids[CRITEO_COLUMNS - 1] = {
    0x4e67040eu, 0x6b7d79b3u, 0x60e44e5fu, 0x6533d901u, 0x5fe7a3bbu, 0x69cfef96u, 0x57d4909cu,
    0x2d338b6eu, 0x0169b179u, 0x1da13e4au, 0x549a1ac4u, 0x07359aa7u, 0x34e463e4u, /* I1..I13 */
    0x5f451f4du, 0x2b2c9022u, 0x4a1676a8u, 0x496855ddu, 0x7274233au, 0x77581aa5u, 0x0eba6b87u,
    0x0e33fb79u, 0x7e8f9fc3u, 0x596293ffu, 0x5f3fd774u, 0x6e001e46u, 0x36cffaafu, 0x12dc3249u,
    0x63110e8du, 0x79ada8d5u, 0x5792bf26u, 0x6aa893b0u, 0x776e6e2cu, 0x14847611u, 0x530c2b6au,
    0x3dcc5473u, 0x7f242c85u, 0x5b09adeau, 0x3b93598au, 0x1dddf045u, /* C1..C26 */
};

uint32_t spw_criteo_field_id(unsigned col)
{
    assert(col < CRITEO_COLUMNS - 1);
    return criteo_field_ids[col];
}

/* The column's name for messages: "I7", "C12". */
static void column_name(char *buf, unsigned col)
{
    unsigned n = col < CRITEO_INTEGERS ? col + 1 : col + 1 - CRITEO_INTEGERS;
    buf[0] = col < CRITEO_INTEGERS ? 'I' : 'C';
    if (n >= 10) {
        buf[1] = (char)('0' + n / 10);
        buf[2] = (char)('0' + n % 10);
        buf[3] = '\0';
    } else {
        buf[1] = (char)('0' + n);
        buf[2] = '\0';
    }
}

bool spw_parse_criteo_int(const char *s, size_t len, int64_t *out)
{
    bool neg = len > 0 && s[0] == '-';
    size_t i = neg;
    if (i == len || len - i > 19)
        return false;
    uint64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0'); /* 19 digits cannot wrap a u64 */
    }
    if (v > (uint64_t)INT64_MAX + neg)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

spw_err_t spw_parse_criteo_line(const char *line, size_t len,
                                const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                Sparrow__Example **out, struct spw_parse_error *err)
{
    assert((line || len == 0) && limits && arena && out && err);
    *out = NULL;
    if (len > limits->max_record_bytes)
        return spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "line of %zu bytes, limit %zu", len,
                                limits->max_record_bytes);
    if (len > 0 && line[len - 1] == '\r')
        len--;

    /* Split into columns. Columns are a few bytes long, so a plain loop beats a memchr call per
     * column (measured: memchr's call overhead was a fifth of the parse). */
    const char *col_start[CRITEO_COLUMNS];
    size_t col_len[CRITEO_COLUMNS];
    const char *p = line, *end = line + len;
    unsigned ncol = 0;
    for (;;) {
        const char *q = p;
        while (q < end && *q != '\t')
            q++;
        if (ncol == CRITEO_COLUMNS)
            return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "more than %d columns",
                                    CRITEO_COLUMNS);
        col_start[ncol] = p;
        col_len[ncol] = (size_t)(q - p);
        ncol++;
        if (q == end)
            break;
        p = q + 1;
    }
    if (ncol != CRITEO_COLUMNS)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "%u columns, expected %d", ncol,
                                CRITEO_COLUMNS);

    if (col_len[0] != 1 || (col_start[0][0] != '0' && col_start[0][0] != '1')) {
        char q[48];
        return spw_ingest__fail(err, SPW_REJECT_BAD_LABEL, "label \"%s\" is not 0 or 1",
                                spw_ingest__quote(q, col_start[0], col_len[0]));
    }

    size_t n = 0;
    for (unsigned c = 1; c < CRITEO_COLUMNS; c++)
        n += col_len[c] != 0;
    if (n > limits->max_features)
        return spw_ingest__fail(err, SPW_REJECT_TOO_MANY_FEATURES, "%zu features, limit %u", n,
                                limits->max_features);

    Sparrow__Example *ex = spw_arena_alloc(arena, sizeof(*ex));
    if (!ex)
        return SPW_ERR_NOMEM;
    sparrow__example__init(ex);
    ex->has_label = true;
    ex->label = col_start[0][0] == '1' ? 1.0f : 0.0f;
    if (n > 0) {
        ex->fields = spw_arena_alloc(arena, n * sizeof(*ex->fields));
        ex->keys = spw_arena_alloc(arena, n * sizeof(*ex->keys));
        if (!ex->fields || !ex->keys)
            return SPW_ERR_NOMEM;
    }
    for (unsigned c = 1; c < CRITEO_COLUMNS; c++) {
        if (col_len[c] == 0)
            continue;
        unsigned col = c - 1;
        uint32_t field = criteo_field_ids[col];
        const char *text = col_start[c];
        size_t text_len = col_len[c];
        char digits[24];
        if (field > limits->max_field_id) {
            char name[4];
            column_name(name, col);
            return spw_ingest__fail(err, SPW_REJECT_BAD_FIELD, "%s: field id %u above limit %u",
                                    name, field, limits->max_field_id);
        }
        if (col < CRITEO_INTEGERS) {
            int64_t v;
            if (!spw_parse_criteo_int(text, text_len, &v)) {
                char name[4], q[48];
                column_name(name, col);
                return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "%s: \"%s\" is not an integer",
                                        name, spw_ingest__quote(q, text, text_len));
            }
            text_len = spw_fmt_i64(digits, spw_hash_criteo_bucket(v));
            text = digits;
        }
        ex->fields[ex->n_keys] = field;
        ex->keys[ex->n_keys] = spw_hash_key(field, text, text_len);
        ex->n_keys++;
    }
    ex->n_fields = ex->n_keys;

    spw_err_t rc = spw_ingest_validate(ex, limits, err);
    if (rc != SPW_OK)
        return rc;
    *out = ex;
    return SPW_OK;
}
