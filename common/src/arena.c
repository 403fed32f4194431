/* Per-batch arena: bump allocation from chunks, freed all at once by reset. */
#include "sparrow/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct arena_chunk {
    struct arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    _Alignas(16) unsigned char data[];
};

struct spw_arena {
    struct arena_chunk *head; /* current chunk; older chunks follow */
    size_t chunk_size;
    size_t max_bytes;
    size_t reserved; /* sum of chunk sizes */
    size_t used;     /* bytes handed out since reset */
};

spw_arena_t *spw_arena_new(size_t chunk_size, size_t max_bytes)
{
    spw_arena_t *arena = calloc(1, sizeof(*arena));
    if (!arena)
        return NULL;
    arena->chunk_size = chunk_size ? chunk_size : 64 * 1024;
    arena->max_bytes = max_bytes;
    return arena;
}

void spw_arena_destroy(spw_arena_t *arena)
{
    if (!arena)
        return;
    struct arena_chunk *c = arena->head;
    while (c) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(arena);
}

void *spw_arena_alloc(spw_arena_t *arena, size_t size)
{
    size_t need = (size + 15) & ~(size_t)15;
    if (need < size)
        return NULL;
    struct arena_chunk *c = arena->head;
    if (!c || c->size - c->used < need) {
        size_t csize = need > arena->chunk_size ? need : arena->chunk_size;
        if (arena->max_bytes && arena->reserved + csize > arena->max_bytes)
            return NULL;
        if (csize > SIZE_MAX - sizeof(*c))
            return NULL;
        c = malloc(sizeof(*c) + csize);
        if (!c)
            return NULL;
        c->size = csize;
        c->used = 0;
        c->next = arena->head;
        arena->head = c;
        arena->reserved += csize;
    }
    void *p = c->data + c->used;
    c->used += need;
    arena->used += need;
    return p;
}

void *spw_arena_calloc(spw_arena_t *arena, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    void *p = spw_arena_alloc(arena, count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

char *spw_arena_strndup(spw_arena_t *arena, const char *s, size_t len)
{
    char *p = spw_arena_alloc(arena, len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

void spw_arena_reset(spw_arena_t *arena)
{
    struct arena_chunk *c = arena->head;
    if (!c)
        return;
    /* Keep the largest chunk (the oldest ones are the default size; a big one reflects need). */
    struct arena_chunk *keep = c;
    for (struct arena_chunk *it = c->next; it; it = it->next)
        if (it->size > keep->size)
            keep = it;
    while (c) {
        struct arena_chunk *next = c->next;
        if (c != keep)
            free(c);
        c = next;
    }
    keep->next = NULL;
    keep->used = 0;
    arena->head = keep;
    arena->reserved = keep->size;
    arena->used = 0;
}

size_t spw_arena_used(const spw_arena_t *arena)
{
    return arena->used;
}
