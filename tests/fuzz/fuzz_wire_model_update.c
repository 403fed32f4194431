/* Fuzzes spw_wire_unpack_model_update and spw_wire_model_update_rows: no crash, an accepted
 * update's rows (single or batch) view cleanly, and accepted input survives a re-pack round
 * trip. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_update(const Sparrow__ModelUpdate *up)
{
    struct spw_wire_update_rows rows;
    FUZZ_CHECK(spw_wire_model_update_rows(up, &rows) == SPW_OK);
    FUZZ_CHECK(rows.n >= 1);
    for (size_t i = 0; i < rows.n; i++) {
        fuzz_touch(&rows.keys[i], 8);
        fuzz_touch(&rows.versions[i], 4);
        fuzz_touch(&rows.event_ms[i], 8);
        fuzz_touch(&rows.applied_ms[i], 8);
        FUZZ_CHECK(rows.tombs[i] <= 1);
    }
    if (rows.dim)
        fuzz_touch(rows.weights, rows.n * rows.dim * 4);
    if (up->keys.len) {
        FUZZ_CHECK(rows.dim >= 1 && rows.dim <= SPW_WIRE_MAX_DIM);
        return;
    }
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
