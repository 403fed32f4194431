/* Per-batch arena: bump allocation from chunks, freed all at once by reset. */
#ifndef SPARROW_ARENA_H
#define SPARROW_ARENA_H

#include <stddef.h>

/* Opaque arena. Owned by one thread at a time; not thread-safe. */
typedef struct spw_arena spw_arena_t;

/* Creates an arena whose chunks are at least chunk_size bytes (0 means 64 KiB), never holding more
 * than max_bytes in all (0 means no limit). Returns NULL when out of memory. */
spw_arena_t *spw_arena_new(size_t chunk_size, size_t max_bytes);

/* Frees the arena and everything allocated from it. NULL is a no-op. */
void spw_arena_destroy(spw_arena_t *arena);

/* Returns size bytes aligned to 16, valid until the next reset or destroy; NULL when the budget
 * or memory is exhausted. The arena owns the memory. */
void *spw_arena_alloc(spw_arena_t *arena, size_t size);

/* Like spw_arena_alloc, zero-filled. */
void *spw_arena_calloc(spw_arena_t *arena, size_t count, size_t size);

/* Copies len bytes of s and a terminating NUL into the arena. */
char *spw_arena_strndup(spw_arena_t *arena, const char *s, size_t len);

/* Releases every allocation at once; keeps the first chunk for reuse so that a steady batch loop
 * does not call malloc. */
void spw_arena_reset(spw_arena_t *arena);

/* Bytes handed out since the last reset. */
size_t spw_arena_used(const spw_arena_t *arena);

#endif
