/* The generator's output formats: length-delimited sparrow.Example, JSON lines and Criteo TSV. */
#include <stdio.h>
#include <string.h>

#include "gen_int.h"
#include "sparrow/fmt.h"
#include "sparrow/tools.h"

spw_err_t spw_gen_check_format(const spw_gen_t *gen, enum spw_format format, char *errstr,
                               size_t errstr_size)
{
    if (format == SPW_FORMAT_CRITEO && gen->n_fields - gen->n_int > SPW_GEN_CRITEO_CATS) {
        snprintf(errstr, errstr_size,
                 "the criteo format holds at most %d fields (13 integer + 26 categorical), "
                 "gen.fields is %u",
                 SPW_GEN_INT_FIELDS + SPW_GEN_CRITEO_CATS, gen->n_fields);
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}

static spw_err_t encode_pb(const struct spw_gen_example *ex, struct spw_wire_buf *buf)
{
    Sparrow__Example msg = SPARROW__EXAMPLE__INIT;
    msg.has_id = 1;
    msg.id = ex->id;
    msg.has_label = 1;
    msg.label = ex->label;
    msg.has_event_time_ms = 1;
    msg.event_time_ms = ex->event_time_ms;
    /* protobuf-c's message struct is not const-correct; packing only reads the arrays */
    msg.n_fields = ex->n_features;
    msg.fields = (uint32_t *)ex->fields;
    msg.n_keys = ex->n_features;
    msg.keys = (uint64_t *)ex->keys;
    msg.has_oracle_p = 1;
    msg.oracle_p = ex->oracle_p;
    return spw_wire_pack_delimited(&msg.base, buf);
}

static char *put(char *p, const char *s, size_t len)
{
    memcpy(p, s, len);
    return p + len;
}

#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

static spw_err_t encode_json(const spw_gen_t *gen, const struct spw_gen_example *ex,
                             struct spw_wire_buf *buf)
{
    /* per feature: "name":"value", with a name of < 8 bytes and a value of <= 20 */
    size_t need = 160 + (size_t)ex->n_features * 40;
    spw_err_t err = spw_wire_buf_reserve(buf, need);
    if (err != SPW_OK)
        return err;
    char *start = (char *)buf->data + buf->len, *p = start;
    p = PUT_LIT(p, "{\"id\":");
    p += spw_fmt_u64(p, ex->id);
    p = PUT_LIT(p, ",\"label\":");
    *p++ = ex->label != 0.0f ? '1' : '0';
    p = PUT_LIT(p, ",\"ts\":");
    p += spw_fmt_i64(p, ex->event_time_ms);
    p = PUT_LIT(p, ",\"features\":{");
    for (uint32_t i = 0; i < ex->n_features; i++) {
        const struct spw_gen__field *f = &gen->field[i];
        if (i)
            *p++ = ',';
        *p++ = '"';
        p = put(p, f->name, f->name_len);
        p = PUT_LIT(p, "\":\"");
        if (f->is_int) {
            p += spw_fmt_i64(p, ex->buckets[i]);
        } else {
            spw_gen__fmt_hex8(p, (uint32_t)ex->raw[i]);
            p += 8;
        }
        *p++ = '"';
    }
    p = PUT_LIT(p, "},\"oracle_p\":");
    /* 9 significant digits make any float read back exactly */
    p += snprintf(p, 32, "%.9g", (double)ex->oracle_p);
    p = PUT_LIT(p, "}\n");
    buf->len += (size_t)(p - start);
    return SPW_OK;
}

static spw_err_t encode_criteo(const struct spw_gen_example *ex, struct spw_wire_buf *buf)
{
    /* label, 13 integers of <= 20 digits, 26 hex values of 8, 39 tabs and a newline */
    spw_err_t err = spw_wire_buf_reserve(buf, 2 + 13 * 21 + 26 * 9 + 2);
    if (err != SPW_OK)
        return err;
    char *start = (char *)buf->data + buf->len, *p = start;
    *p++ = ex->label != 0.0f ? '1' : '0';
    for (uint32_t c = 0; c < SPW_GEN_INT_FIELDS; c++) {
        *p++ = '\t';
        if (c < ex->n_int)
            p += spw_fmt_u64(p, ex->raw[c]);
    }
    uint32_t n_cat = ex->n_features - ex->n_int;
    for (uint32_t c = 0; c < SPW_GEN_CRITEO_CATS; c++) {
        *p++ = '\t';
        if (c < n_cat) {
            spw_gen__fmt_hex8(p, (uint32_t)ex->raw[ex->n_int + c]);
            p += 8;
        }
    }
    *p++ = '\n';
    buf->len += (size_t)(p - start);
    return SPW_OK;
}

spw_err_t spw_gen_encode(const spw_gen_t *gen, const struct spw_gen_example *ex,
                         enum spw_format format, struct spw_wire_buf *buf)
{
    switch (format) {
    case SPW_FORMAT_PB:
        return encode_pb(ex, buf);
    case SPW_FORMAT_JSON:
        return encode_json(gen, ex, buf);
    case SPW_FORMAT_CRITEO:
        return encode_criteo(ex, buf);
    case SPW_FORMAT_AUTO: /* a reader's choice, not a format to write */
        break;
    }
    return SPW_ERR_INVALID;
}
