/* libFuzzer target: one JSON line through spw_parse_json_line with a fresh arena. */
#include <stdint.h>
#include <stdlib.h>

#include "sparrow/ingest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    limits.max_features = 64; /* low enough that inputs reach the limit */
    spw_arena_t *arena = spw_arena_new(4096, 16u << 20);
    if (!arena)
        return 0;
    Sparrow__Example *ex = NULL;
    struct spw_parse_error err = {0};
    spw_err_t rc = spw_parse_json_line((const char *)data, size, NULL, &limits, arena, &ex, &err);
    if (rc == SPW_OK) {
        /* What the parser promises about an accepted record. */
        if (!ex || ex->n_fields != ex->n_keys || ex->n_keys > limits.max_features ||
            (ex->n_weights != 0 && ex->n_weights != ex->n_keys) || !ex->has_label)
            abort();
    } else if (rc == SPW_ERR_INVALID) {
        if (err.reason == SPW_REJECT_NONE || err.message[0] == '\0' || ex)
            abort();
    }
    spw_arena_destroy(arena);
    return 0;
}
