/* Count-min sketch of key sightings, for admission of new rows. */
#include <stdlib.h>

#include "ps_int.h"
#include "sparrow/hash.h"

spw_err_t spw_ps__sketch_init(struct spw_ps_sketch *sk, uint32_t width, uint32_t depth)
{
    uint32_t w = 1024;
    while (w < width && w < (1u << 28))
        w <<= 1;
    sk->width = w;
    sk->depth = depth;
    sk->cells = calloc((size_t)w * depth, sizeof(uint16_t));
    return sk->cells ? SPW_OK : SPW_ERR_NOMEM;
}

void spw_ps__sketch_fini(struct spw_ps_sketch *sk)
{
    free(sk->cells);
    sk->cells = NULL;
}

static size_t cell(const struct spw_ps_sketch *sk, uint64_t key, uint32_t row)
{
    uint64_t h = spw_hash_mix64(key + 0x632be59bd9b4e019ull * (row + 1));
    return (size_t)row * sk->width + (h & (sk->width - 1));
}

uint32_t spw_ps__sketch_add(struct spw_ps_sketch *sk, uint64_t key)
{
    uint32_t est = UINT16_MAX;
    for (uint32_t r = 0; r < sk->depth; r++) {
        uint16_t *c = &sk->cells[cell(sk, key, r)];
        if (*c < UINT16_MAX)
            (*c)++;
        if (*c < est)
            est = *c;
    }
    return est;
}

uint32_t spw_ps__sketch_get(const struct spw_ps_sketch *sk, uint64_t key)
{
    uint32_t est = UINT16_MAX;
    for (uint32_t r = 0; r < sk->depth; r++) {
        uint16_t c = sk->cells[cell(sk, key, r)];
        if (c < est)
            est = c;
    }
    return est;
}
