/* Fuzz target: the decoders of a shard checkpoint's stored bytes (sparrow/ps_ckpt.h): the meta
 * value, then one (key, value) row under the parsed meta (or one derived from the input when the
 * meta is refused). Input: meta text, '\n', 8 bytes of key (fewer: a short key), the value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/ps_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t meta_len = nl ? (size_t)(nl - data) : size;
    struct spw_ps_ckpt_meta meta;
    spw_err_t rc = spw_ps_ckpt_meta_parse(data, meta_len, &meta);
    FUZZ_CHECK(rc == SPW_OK || rc == SPW_ERR_CORRUPT || rc == SPW_ERR_VERSION);
    if (rc == SPW_OK) {
        FUZZ_CHECK(meta.dim >= 1 && meta.dim <= SPW_PS_MAX_DIM);
    } else {
        meta.dim = size ? (uint32_t)data[0] % 16 + 1 : 1;
        meta.optimizer = (enum spw_ps_optimizer)(size > 1 ? data[1] % 4 : 0);
    }
    if (!nl)
        return 0;
    const uint8_t *rest = nl + 1;
    size_t left = size - meta_len - 1;
    size_t klen = left < 8 ? left : 8;
    size_t floats = spw_ps_ckpt_row_floats(&meta);
    float *buf = malloc(floats * sizeof(float));
    FUZZ_CHECK(buf);
    struct spw_ps_ckpt_row row;
    rc = spw_ps_ckpt_row_decode(&meta, rest, klen, rest + klen, left - klen, &row, buf);
    FUZZ_CHECK(rc == SPW_OK || rc == SPW_ERR_CORRUPT);
    if (rc == SPW_OK) {
        FUZZ_CHECK(left - klen == 12 + floats * sizeof(float) && row.data == buf);
        FUZZ_CHECK(memcmp(buf, rest + klen + 12, floats * sizeof(float)) == 0);
    }
    free(buf);
    return 0;
}
