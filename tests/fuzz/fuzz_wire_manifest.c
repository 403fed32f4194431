/* Fuzzes spw_wire_unpack_manifest: no crash, and accepted input survives a re-pack round trip. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_offsets(Sparrow__PartitionOffset *const *offsets, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(!offsets[i]->has_partition || offsets[i]->partition >= 0);
        fuzz_touch_str(offsets[i]->topic);
    }
}

static void touch_manifest(const Sparrow__CheckpointManifest *m)
{
    FUZZ_CHECK(m->shard_count >= 1 && m->n_shards == m->shard_count);
    uint64_t sum = 0;
    for (size_t i = 0; i < m->n_shards; i++) {
        FUZZ_CHECK(m->shards[i]->shard < m->shard_count);
        sum += m->shards[i]->shard;
        fuzz_touch_str(m->shards[i]->checksum);
    }
    /* Each of 0..count-1 exactly once, so they add up to count*(count-1)/2. */
    FUZZ_CHECK(sum == (uint64_t)m->shard_count * (m->shard_count - 1) / 2);
    touch_offsets(m->offsets, m->n_offsets);
    touch_offsets(m->update_offsets, m->n_update_offsets);
    fuzz_touch_str(m->model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_WIRE_ROUND_TRIP(spw_wire_unpack_manifest, Sparrow__CheckpointManifest, touch_manifest,
                         data, size);
    return 0;
}
