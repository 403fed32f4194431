/* The ring of flush cycles: input offsets are handed on only once every record that holds their
 * events, and every older cycle's, was delivered, oldest first (at-least-once). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "role_int.h"

spw_err_t spw_ingest__ring_init(struct spw_ingest__ring *ring, size_t cap)
{
    assert(cap >= 2);
    memset(ring, 0, sizeof(*ring));
    ring->slots = calloc(cap, sizeof(*ring->slots));
    if (!ring->slots)
        return SPW_ERR_NOMEM;
    ring->cap = cap;
    return SPW_OK;
}

void spw_ingest__ring_fini(struct spw_ingest__ring *ring)
{
    free(ring->slots);
    memset(ring, 0, sizeof(*ring));
}

struct spw_ingest__cycle *spw_ingest__ring_open(struct spw_ingest__ring *ring)
{
    if (ring->count == ring->cap)
        return NULL;
    struct spw_ingest__cycle *c = &ring->slots[(ring->head + ring->count) % ring->cap];
    memset(c, 0, sizeof(*c));
    ring->count++;
    return c;
}

struct spw_ingest__cycle *spw_ingest__ring_cur(struct spw_ingest__ring *ring)
{
    assert(ring->count > 0);
    return &ring->slots[(ring->head + ring->count - 1) % ring->cap];
}

bool spw_ingest__cycle_note(struct spw_ingest__cycle *c, int32_t partition, int64_t offset)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        if (c->part[i] == partition) {
            if (offset + 1 > c->next[i])
                c->next[i] = offset + 1;
            return true;
        }
    }
    if (c->n_parts == SPW_INGEST__CYCLE_MAX_PARTS)
        return false;
    c->part[c->n_parts] = partition;
    c->next[c->n_parts] = offset + 1;
    c->n_parts++;
    return true;
}

spw_err_t spw_ingest__ring_advance(struct spw_ingest__ring *ring, spw_ingest__store_fn store,
                                   void *opaque)
{
    while (ring->count > 0) {
        struct spw_ingest__cycle *c = &ring->slots[ring->head];
        if (!c->sealed || c->outstanding > 0)
            return SPW_OK;
        if (c->failed)
            return SPW_ERR_IO; /* never store past a record that did not land */
        for (size_t i = 0; i < c->n_parts && store; i++)
            store(opaque, c->part[i], c->next[i]);
        ring->head = (ring->head + 1) % ring->cap;
        ring->count--;
    }
    return SPW_OK;
}
