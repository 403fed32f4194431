/* Fuzz target: the predict request parser's protobuf form (HTTP bodies from outside) on arbitrary
 * bytes. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sparrow/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static spw_arena_t *arena;
    if (!arena)
        arena = spw_arena_new(1 << 16, 8u << 20);
    spw_arena_reset(arena);
    const struct spw_serve_limits limits = {
        .max_features = 64, .max_examples = 16, .max_depth = 16};
    struct spw_serve_request req;
    char errstr[256];
    spw_err_t rc =
        spw_serve_request_parse_pb(data, size, &limits, arena, &req, errstr, sizeof(errstr));
    if (rc == SPW_OK) {
        /* Every example is within the limits, its arrays are readable and its weights finite. */
        if (req.n < 1 || req.n > limits.max_examples)
            __builtin_trap();
        volatile uint64_t sink = 0;
        for (size_t i = 0; i < req.n; i++) {
            if (req.examples[i].n > limits.max_features || req.examples[i].fields)
                __builtin_trap();
            for (size_t j = 0; j < req.examples[i].n; j++) {
                if (!isfinite(req.examples[i].weights[j]))
                    __builtin_trap();
                uint32_t bits;
                memcpy(&bits, &req.examples[i].weights[j], sizeof(bits));
                sink ^= req.examples[i].keys[j] ^ bits;
            }
        }
        (void)sink;
    } else if (rc == SPW_ERR_INVALID && errstr[0] == '\0') {
        __builtin_trap(); /* a refusal always says why */
    } else if (rc != SPW_ERR_INVALID && rc != SPW_ERR_NOMEM) {
        __builtin_trap();
    }
    return 0;
}
