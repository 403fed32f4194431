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
 *   The arena running out of budget is SPW_ERR_NOMEM. On any failure *out is untouched and the
 *   arena may hold partial allocations until its next reset.
 * - What each unpacker checks beyond decoding: row widths (dim) are 1..SPW_WIRE_MAX_DIM; a push
 *   has keys n x 8, versions n x 4, grads n x dim x (fp16 ? 2 : 4) bytes, echo ascending
 *   indices below n, and pulled either empty or as long as grads; a pull request
 *   keys n x 8; a pull reply versions n x 4 and values n x dim x 4; a model update either is a
 *   tombstone without weights or has dim x 4 bytes of weights; a manifest has shard_count >= 1
 *   entries naming each shard 0..shard_count-1 once; partitions (source partitions and
 *   source offsets of examples and marks too) are >= 0. A Request or
 *   CoordMessage without a body still decodes, so that the receiver can read its version and
 *   answer VERSION or MALFORMED itself. Key order, finiteness, versions and enum values are the
 *   receiver's to judge. Absent strings are NULL; a string holding a NUL byte reads as cut there.
 * - Pack functions write into a caller buffer grown with realloc (struct spw_wire_buf).
 * - All functions are thread-safe given distinct arenas and buffers.
 */

#define SPW_WIRE_DEFAULT_MAX_FRAME (64u << 20) /* 64 MiB */

/* Widest row (floats per key) a message may carry; unpackers reject a larger dim. */
#define SPW_WIRE_MAX_DIM 4096u

/* Frames above this are SPW_ERR_TOO_BIG whatever max_len says: protobuf-c 1.4 keeps member
 * lengths in `unsigned`. */
#define SPW_WIRE_HARD_MAX_FRAME (1u << 30) /* 1 GiB */

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
spw_err_t spw_wire_unpack_example(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                  Sparrow__Example **out);
spw_err_t spw_wire_unpack_example_batch(const void *data, size_t len, size_t max_len,
                                        spw_arena_t *arena, Sparrow__ExampleBatch **out);
spw_err_t spw_wire_unpack_request(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                  Sparrow__Request **out);
spw_err_t spw_wire_unpack_reply(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                Sparrow__Reply **out);
spw_err_t spw_wire_unpack_coord(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                Sparrow__CoordMessage **out);
spw_err_t spw_wire_unpack_model_update(const void *data, size_t len, size_t max_len,
                                       spw_arena_t *arena, Sparrow__ModelUpdate **out);
spw_err_t spw_wire_unpack_manifest(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                   Sparrow__CheckpointManifest **out);

/* The rows of a model update as views, one shape for a single row and a batch (proto's
 * ModelUpdate): row i is keys[i], versions[i], event_ms[i] (0: unknown), applied_ms[i] (0:
 * unknown), tombs[i] (1: delete the row), weights[i·dim .. i·dim+dim) (dim 0 for a single
 * tombstone, which has no weights). The views point into the update (alive while its arena is)
 * and, for a single row, into this struct (do not copy it). */
struct spw_wire_update_rows {
    size_t n;
    uint32_t dim;
    const uint64_t *keys;
    const uint32_t *versions;
    const int64_t *event_ms, *applied_ms;
    const uint8_t *tombs;
    const float *weights;
    uint64_t one_key; /* a single row's fields, which the views above point to */
    uint32_t one_version;
    int64_t one_event_ms, one_applied_ms;
    uint8_t one_tomb;
};

/* Fills *rows from update, which spw_wire_unpack_model_update accepted. SPW_ERR_INVALID only for
 * an update that unpacker would have refused or whose blocks are misaligned. */
spw_err_t spw_wire_model_update_rows(const Sparrow__ModelUpdate *update,
                                     struct spw_wire_update_rows *rows);
/* A predict request (serve's protobuf bodies): decoded only. Its receiver checks weights against
 * keys, unknown fields and its limits itself, so that a refusal can name the example. */
spw_err_t spw_wire_unpack_predict_request(const void *data, size_t len, size_t max_len,
                                          spw_arena_t *arena, Sparrow__PredictRequest **out);

/* Longest base-128 varint: 64 bits in 7-bit groups. */
#define SPW_WIRE_VARINT_MAX 10

/* Writes v as a base-128 varint (low group first) at out, which has room for
 * SPW_WIRE_VARINT_MAX bytes; returns its length. Pure; thread-safe. */
size_t spw_wire_put_varint(uint8_t *out, uint64_t v);

/* Reads one varint length prefix from data[0..len): on success *msg_len is the message length,
 * *prefix_len the prefix's bytes. SPW_ERR_EOF when len == 0; SPW_ERR_INVALID for a truncated or
 * over-long varint; SPW_ERR_TOO_BIG when the length exceeds max_len (both outputs are set
 * then too, so that a caller holding the whole buffer may skip the message). */
spw_err_t spw_wire_read_varint_prefix(const uint8_t *data, size_t len, size_t max_len,
                                      size_t *msg_len, size_t *prefix_len);

/* Reads one length-delimited message's bytes from a stream into *buf (grown as needed; reused
 * across calls). SPW_ERR_EOF at a clean end; SPW_ERR_INVALID for a truncated prefix or message;
 * SPW_ERR_TOO_BIG when the prefix exceeds max_len (the stream cannot be resynchronised then).
 * On success buf->len is the message's length (the previous contents are replaced; data may stay
 * NULL for an empty message); SPW_ERR_IO when the stream reports a read error. Memory grows with
 * the bytes actually read, not with what a prefix claims. */
spw_err_t spw_wire_read_delimited(FILE *in, size_t max_len, struct spw_wire_buf *buf);

/* Views over packed little-endian blocks. Each checks that block->len is exactly n elements
 * (SPW_ERR_INVALID otherwise) and returns a pointer into the block (the arena keeps bytes 16-byte
 * aligned, so no copy is made on little-endian hosts). */
spw_err_t spw_wire_block_u64(const ProtobufCBinaryData *block, size_t n, const uint64_t **out);
spw_err_t spw_wire_block_u32(const ProtobufCBinaryData *block, size_t n, const uint32_t **out);
spw_err_t spw_wire_block_f32(const ProtobufCBinaryData *block, size_t n, const float **out);
/* The same for f16 gradients (raw IEEE half bits; see spw_wire_f16_to_f32_n). */
spw_err_t spw_wire_block_u16(const ProtobufCBinaryData *block, size_t n, const uint16_t **out);

/* Copies a block of exactly n elem_size-byte elements into dst (caller storage of n * elem_size
 * bytes), for callers that need their own copy or hold a block whose bytes did not come from an
 * unpacker (a view refuses a misaligned block with SPW_ERR_INVALID). */
spw_err_t spw_wire_block_copy(const ProtobufCBinaryData *block, size_t elem_size, size_t n,
                              void *dst);

/* Element count of a block of elem_size-byte elements; SPW_ERR_INVALID when len is not a
 * multiple. */
spw_err_t spw_wire_block_count(const ProtobufCBinaryData *block, size_t elem_size, size_t *n);

/* IEEE half <-> single conversions for fp16 gradients (round to nearest even; inf/nan kept). */
uint16_t spw_wire_f32_to_f16(float f);
float spw_wire_f16_to_f32(uint16_t h);

/* Converts n values between arrays (same rounding as the scalar functions). src and dst must
 * not overlap. */
void spw_wire_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void spw_wire_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* Converts n values to halves with stochastic rounding: each value goes to one of the two halves
 * around it, the farther one with probability its distance from the nearer over their spacing, so
 * that the expected half equals the value (unbiased: rounding to nearest moves a value that
 * recurs the same way every time, and sends every magnitude below 2^-25 as zero). Subnormal
 * halves are rounded so too; values of 2^-63 and less in magnitude become zero; at or beyond 65504
 * in magnitude, inf and nan convert as spw_wire_f32_to_f16. *rng is an xorshift64* state, owned by
 * the caller and advanced once per value (one state per thread; 0 is replaced by a fixed nonzero
 * seed); the same state and values give the same halves. src and dst must not overlap. */
void spw_wire_f32_to_f16_stochastic_n(const float *src, uint16_t *dst, size_t n, uint64_t *rng);

#endif
