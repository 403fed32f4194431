/* Protobuf input: one sparrow.Example's bytes, decoded through the wire module and validated. */
#include "ingest_int.h"

#include <assert.h>

#include "sparrow/wire.h"

spw_err_t spw_parse_pb_example(const void *data, size_t len, const struct spw_ingest_limits *limits,
                               spw_arena_t *arena, Sparrow__Example **out,
                               struct spw_parse_error *err)
{
    assert((data || len == 0) && limits && arena && out && err);
    *out = NULL;
    if (len > limits->max_record_bytes)
        return spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "record of %zu bytes, limit %zu", len,
                                limits->max_record_bytes);
    Sparrow__Example *ex;
    static const uint8_t empty[1];
    spw_err_t rc =
        spw_wire_unpack_example(len ? data : empty, len, limits->max_record_bytes, arena, &ex);
    if (rc == SPW_ERR_NOMEM)
        return rc;
    if (rc == SPW_ERR_TOO_BIG)
        return spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "record of %zu bytes, limit %zu", len,
                                limits->max_record_bytes);
    if (rc != SPW_OK)
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE,
                                "not a valid sparrow.Example (%zu bytes): %s", len,
                                spw_err_str(rc));
    rc = spw_ingest_validate(ex, limits, err);
    if (rc != SPW_OK)
        return rc;
    *out = ex;
    return SPW_OK;
}
