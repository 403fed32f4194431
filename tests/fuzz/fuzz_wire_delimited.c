/* Fuzzes spw_wire_read_delimited through fmemopen, cross-checked against walking the same bytes
 * with spw_wire_read_varint_prefix: both must see the same records and the same ending. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small enough that the corpus's too-big record trips it. */
#define FUZZ_DELIM_MAX (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct spw_wire_buf buf;
    if (size == 0)
        return 0; /* fmemopen refuses an empty buffer on some libcs */
    FILE *in = fmemopen((void *)data, size, "rb");
    FUZZ_CHECK(in != NULL);
    spw_arena_t *arena = fuzz_arena();
    size_t off = 0;
    for (;;) {
        spw_err_t rc = spw_wire_read_delimited(in, FUZZ_DELIM_MAX, &buf);
        size_t msg_len = 0, prefix_len = 0;
        spw_err_t want = spw_wire_read_varint_prefix(data + off, size - off, FUZZ_DELIM_MAX,
                                                     &msg_len, &prefix_len);
        if (want == SPW_OK && msg_len > size - off - prefix_len)
            want = SPW_ERR_INVALID; /* the body is cut short */
        FUZZ_CHECK(rc == want);
        if (rc != SPW_OK)
            break;
        FUZZ_CHECK(buf.len == msg_len);
        FUZZ_CHECK(msg_len == 0 || memcmp(buf.data, data + off + prefix_len, msg_len) == 0);
        off += prefix_len + msg_len;
        /* Records are examples in files: decode each as one would. */
        Sparrow__Example *ex;
        (void)spw_wire_unpack_example(buf.data, buf.len, FUZZ_DELIM_MAX, arena, &ex);
        spw_arena_reset(arena);
    }
    fclose(in);
    return 0;
}
