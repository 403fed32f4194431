/* Fuzzes spw_wire_unpack_coord: no crash, and accepted input survives a re-pack round trip. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_coord(const Sparrow__CoordMessage *msg)
{
    switch (msg->body_case) {
    case SPARROW__COORD_MESSAGE__BODY_REGISTER:
        fuzz_touch_str(msg->register_->member_id);
        fuzz_touch_str(msg->register_->endpoint);
        break;
    case SPARROW__COORD_MESSAGE__BODY_HEARTBEAT:
        fuzz_touch_str(msg->heartbeat->member_id);
        break;
    case SPARROW__COORD_MESSAGE__BODY_CLOCK:
        fuzz_touch_str(msg->clock->member_id);
        break;
    case SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT:
        fuzz_touch_str(msg->checkpoint_report->member_id);
        for (size_t i = 0; i < msg->checkpoint_report->n_offsets; i++) {
            const Sparrow__PartitionOffset *po = msg->checkpoint_report->offsets[i];
            FUZZ_CHECK(!po->has_partition || po->partition >= 0);
            fuzz_touch_str(po->topic);
        }
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_WIRE_ROUND_TRIP(spw_wire_unpack_coord, Sparrow__CoordMessage, touch_coord, data, size);
    return 0;
}
