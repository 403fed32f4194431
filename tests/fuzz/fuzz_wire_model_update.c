/* Fuzzes spw_wire_unpack_model_update: no crash, accepted weights view cleanly, and accepted
 * input survives a re-pack round trip. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_update(const Sparrow__ModelUpdate *up)
{
    if (up->tombstone) {
        FUZZ_CHECK(up->weights.len == 0);
        return;
    }
    size_t dim;
    const float *w;
    FUZZ_CHECK(spw_wire_block_count(&up->weights, 4, &dim) == SPW_OK);
    FUZZ_CHECK(dim >= 1 && dim <= SPW_WIRE_MAX_DIM);
    FUZZ_CHECK(spw_wire_block_f32(&up->weights, dim, &w) == SPW_OK);
    fuzz_touch(w, dim * 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_WIRE_ROUND_TRIP(spw_wire_unpack_model_update, Sparrow__ModelUpdate, touch_update, data,
                         size);
    return 0;
}
