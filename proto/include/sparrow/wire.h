/* The wire module: every pack and unpack of Sparrow's protobuf messages, with size limits checked
 * before decoding and unpacking through an arena. */
#ifndef SPARROW_WIRE_H
#define SPARROW_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/arena.h"
#include "sparrow/err.h"
#include "sparrow/sparrow.pb-c.h"

/*
 * Conventions:
 * - Unpack functions check len against max_len before decoding (SPW_ERR_TOO_BIG), decode through
 *   the arena (every byte of the result lives in it, valid until spw_arena_reset), and then check
 *   the message's own consistency (SPW_ERR_INVALID): block lengths are multiples of their element
 *   size and agree with each other, Example's weights are empty or as many as its keys, fields
 *   as many as keys. An undecodable buffer is SPW_ERR_INVALID. Nothing is allocated with malloc.
 * - Pack functions write into a caller buffer grown with realloc (struct spw_wire_buf).
 * - All functions are thread-safe given distinct arenas and buffers.
 */

#define SPW_WIRE_DEFAULT_MAX_FRAME (64u << 20) /* 64 MiB */

/* A growable output buffer. Initialise with {0}; free data with free(). */
struct spw_wire_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
};

/* Ensures room for extra more bytes. SPW_ERR_NOMEM on failure. */
spw_err_t spw_wire_buf_reserve(struct spw_wire_buf *buf, size_t extra);

/* A protobuf-c allocator that draws from arena (free is a no-op). */
ProtobufCAllocator spw_wire_arena_allocator(spw_arena_t *arena);

/* Packs any message, appending to buf. */
spw_err_t spw_wire_pack(const ProtobufCMessage *msg, struct spw_wire_buf *buf);

/* Appends msg as a varint length prefix followed by the message (length-delimited files). */
spw_err_t spw_wire_pack_delimited(const ProtobufCMessage *msg, struct spw_wire_buf *buf);

/* Typed unpackers (see conventions). */
spw_err_t spw_wire_unpack_example(const void *data, size_t len, size_t max_len,
                                  spw_arena_t *arena, Sparrow__Example **out);
spw_err_t spw_wire_unpack_example_batch(const void *data, size_t len, size_t max_len,
                                        spw_arena_t *arena, Sparrow__ExampleBatch **out);
spw_err_t spw_wire_unpack_request(const void *data, size_t len, size_t max_len,
                                  spw_arena_t *arena, Sparrow__Request **out);
spw_err_t spw_wire_unpack_reply(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                Sparrow__Reply **out);
spw_err_t spw_wire_unpack_coord(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                Sparrow__CoordMessage **out);
spw_err_t spw_wire_unpack_model_update(const void *data, size_t len, size_t max_len,
                                       spw_arena_t *arena, Sparrow__ModelUpdate **out);
spw_err_t spw_wire_unpack_manifest(const void *data, size_t len, size_t max_len,
                                   spw_arena_t *arena, Sparrow__CheckpointManifest **out);

/* Reads one varint length prefix from data[0..len): on success *msg_len is the message length,
 * *prefix_len the prefix's bytes. SPW_ERR_EOF when len == 0; SPW_ERR_INVALID for a truncated or
 * over-long varint; SPW_ERR_TOO_BIG when the length exceeds max_len. */
spw_err_t spw_wire_read_varint_prefix(const uint8_t *data, size_t len, size_t max_len,
                                      size_t *msg_len, size_t *prefix_len);

/* Reads one length-delimited message's bytes from a stream into *buf (grown as needed; reused
 * across calls). SPW_ERR_EOF at a clean end; SPW_ERR_INVALID for a truncated prefix or message;
 * SPW_ERR_TOO_BIG when the prefix exceeds max_len (the stream cannot be resynchronised then). */
spw_err_t spw_wire_read_delimited(FILE *in, size_t max_len, struct spw_wire_buf *buf);

/* Views over packed little-endian blocks. Each checks that block->len is exactly n elements
 * (SPW_ERR_INVALID otherwise) and returns a pointer into the block (the arena keeps bytes 16-byte
 * aligned, so no copy is made on little-endian hosts). */
spw_err_t spw_wire_block_u64(const ProtobufCBinaryData *block, size_t n, const uint64_t **out);
spw_err_t spw_wire_block_u32(const ProtobufCBinaryData *block, size_t n, const uint32_t **out);
spw_err_t spw_wire_block_f32(const ProtobufCBinaryData *block, size_t n, const float **out);

/* Element count of a block of elem_size-byte elements; SPW_ERR_INVALID when len is not a
 * multiple. */
spw_err_t spw_wire_block_count(const ProtobufCBinaryData *block, size_t elem_size, size_t *n);

/* IEEE half <-> single conversions for fp16 gradients (round to nearest even; inf/nan kept). */
uint16_t spw_wire_f32_to_f16(float f);
float spw_wire_f16_to_f32(uint16_t h);

#endif
