/* Fuzzes spw_wire_unpack_example_batch: no crash, and accepted input survives a re-pack round trip.
 */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_batch(const Sparrow__ExampleBatch *batch)
{
    for (size_t i = 0; i < batch->n_examples; i++) {
        const Sparrow__Example *ex = batch->examples[i];
        FUZZ_CHECK(ex->n_fields == ex->n_keys);
        FUZZ_CHECK(ex->n_weights == 0 || ex->n_weights == ex->n_keys);
        fuzz_touch(ex->fields, ex->n_fields * sizeof(*ex->fields));
        fuzz_touch(ex->keys, ex->n_keys * sizeof(*ex->keys));
        fuzz_touch(ex->weights, ex->n_weights * sizeof(*ex->weights));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_WIRE_ROUND_TRIP(spw_wire_unpack_example_batch, Sparrow__ExampleBatch, touch_batch, data,
                         size);
    return 0;
}
