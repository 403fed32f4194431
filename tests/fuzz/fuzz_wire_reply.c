/* Fuzzes spw_wire_unpack_reply: no crash, accepted blocks view cleanly, and accepted input
 * survives a re-pack round trip. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_reply(const Sparrow__Reply *reply)
{
    fuzz_touch_str(reply->error_message);
    switch (reply->body_case) {
    case SPARROW__REPLY__BODY_PULL: {
        size_t n;
        const uint32_t *versions;
        const float *values;
        FUZZ_CHECK(spw_wire_block_count(&reply->pull->versions, 4, &n) == SPW_OK);
        FUZZ_CHECK(spw_wire_block_u32(&reply->pull->versions, n, &versions) == SPW_OK);
        FUZZ_CHECK(spw_wire_block_f32(&reply->pull->values, n * reply->pull->dim, &values) ==
                   SPW_OK);
        fuzz_touch(versions, n * 4);
        fuzz_touch(values, n * reply->pull->dim * 4);
        break;
    }
    case SPARROW__REPLY__BODY_CHECKPOINT:
        fuzz_touch_str(reply->checkpoint->path);
        fuzz_touch_str(reply->checkpoint->checksum);
        break;
    case SPARROW__REPLY__BODY_HEALTH:
        fuzz_touch_str(reply->health->state);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_WIRE_ROUND_TRIP(spw_wire_unpack_reply, Sparrow__Reply, touch_reply, data, size);
    return 0;
}
