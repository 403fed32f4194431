/* Varint length prefixes and the length-delimited file format (one prefix, then one message). */
#include "sparrow/wire.h"

#include <stdint.h>

/*
 * A length-delimited stream is a sequence of records:
 *   | bytes  | content                                                   |
 *   | 1..10  | message length, base-128 varint, low group first          |
 *   | length | the packed message                                        |
 * The 10th varint byte may only carry bit 63 (value 0 or 1): anything more overflows 64 bits.
 */

size_t spw_wire_put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

spw_err_t spw_wire_read_varint_prefix(const uint8_t *data, size_t len, size_t max_len,
                                      size_t *msg_len, size_t *prefix_len)
{
    if (len == 0)
        return SPW_ERR_EOF;
    uint64_t v = 0;
    for (size_t i = 0; i < len && i < SPW_WIRE_VARINT_MAX; i++) {
        uint8_t b = data[i];
        if (i == SPW_WIRE_VARINT_MAX - 1 && b > 1)
            return SPW_ERR_INVALID; /* over-long, or a value past 64 bits */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b & 0x80)
            continue;
        *prefix_len = i + 1;
        *msg_len = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
        return v > max_len ? SPW_ERR_TOO_BIG : SPW_OK;
    }
    return SPW_ERR_INVALID; /* the data ends inside the varint */
}

/* Reads the body in steps that grow with what has arrived, so that a prefix claiming far more
 * than the stream holds costs memory in proportion to the bytes actually there. */
#define BODY_STEP_MIN (64u << 10)

spw_err_t spw_wire_read_delimited(FILE *in, size_t max_len, struct spw_wire_buf *buf)
{
    uint8_t prefix[SPW_WIRE_VARINT_MAX];
    size_t got = 0;
    while (got < sizeof(prefix)) {
        int c = getc(in);
        if (c == EOF)
            break;
        prefix[got++] = (uint8_t)c;
        if (!(c & 0x80))
            break;
    }
    if (ferror(in))
        return SPW_ERR_IO;
    size_t msg_len, prefix_len;
    spw_err_t rc = spw_wire_read_varint_prefix(prefix, got, max_len, &msg_len, &prefix_len);
    if (rc != SPW_OK)
        return rc;

    buf->len = 0;
    while (buf->len < msg_len) {
        size_t want = msg_len - buf->len;
        if (buf->cap == buf->len) {
            size_t step = buf->len > BODY_STEP_MIN ? buf->len : BODY_STEP_MIN;
            rc = spw_wire_buf_reserve(buf, want < step ? want : step);
            if (rc != SPW_OK)
                return rc;
        }
        size_t room = buf->cap - buf->len;
        size_t chunk = want < room ? want : room;
        size_t n = fread(buf->data + buf->len, 1, chunk, in);
        buf->len += n;
        if (n < chunk)
            return ferror(in) ? SPW_ERR_IO : SPW_ERR_INVALID;
    }
    return SPW_OK;
}
