/* Fuzzes spw_wire_unpack_request: no crash, accepted blocks view cleanly, and accepted input
 * survives a re-pack round trip. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the shard does with an accepted push: view every block with the counts it implies. */
static void touch_push(const Sparrow__PushRequest *push)
{
    size_t n;
    FUZZ_CHECK(spw_wire_block_count(&push->keys, 8, &n) == SPW_OK);
    const uint64_t *keys;
    const uint32_t *versions;
    FUZZ_CHECK(spw_wire_block_u64(&push->keys, n, &keys) == SPW_OK);
    FUZZ_CHECK(spw_wire_block_u32(&push->versions, n, &versions) == SPW_OK);
    fuzz_touch(keys, n * 8);
    fuzz_touch(versions, n * 4);
    size_t cells = n * push->dim;
    if (push->fp16) {
        const uint16_t *grads;
        FUZZ_CHECK(spw_wire_block_u16(&push->grads, cells, &grads) == SPW_OK);
        for (size_t i = 0; i < cells; i++) {
            float f = spw_wire_f16_to_f32(grads[i]);
            fuzz_touch(&f, sizeof(f));
        }
    } else {
        const float *grads;
        FUZZ_CHECK(spw_wire_block_f32(&push->grads, cells, &grads) == SPW_OK);
        fuzz_touch(grads, cells * 4);
    }
    if (push->pulled.len > 0) { /* delay compensation: laid out as grads */
        if (push->fp16) {
            const uint16_t *pulled;
            FUZZ_CHECK(spw_wire_block_u16(&push->pulled, cells, &pulled) == SPW_OK);
            fuzz_touch(pulled, cells * 2);
        } else {
            const float *pulled;
            FUZZ_CHECK(spw_wire_block_f32(&push->pulled, cells, &pulled) == SPW_OK);
            fuzz_touch(pulled, cells * 4);
        }
    }
}

static void touch_request(const Sparrow__Request *req)
{
    switch (req->body_case) {
    case SPARROW__REQUEST__BODY_PULL: {
        size_t n;
        const uint64_t *keys;
        FUZZ_CHECK(spw_wire_block_count(&req->pull->keys, 8, &n) == SPW_OK);
        FUZZ_CHECK(spw_wire_block_u64(&req->pull->keys, n, &keys) == SPW_OK);
        fuzz_touch(keys, n * 8);
        break;
    }
    case SPARROW__REQUEST__BODY_PUSH:
        touch_push(req->push);
        break;
    case SPARROW__REQUEST__BODY_CHECKPOINT:
        fuzz_touch_str(req->checkpoint->dir);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_WIRE_ROUND_TRIP(spw_wire_unpack_request, Sparrow__Request, touch_request, data, size);
    return 0;
}
