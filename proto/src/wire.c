/* Packing into growable buffers, and unpacking through an arena followed by consistency checks. */
#include "sparrow/wire.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers and packing ---- */

spw_err_t spw_wire_buf_reserve(struct spw_wire_buf *buf, size_t extra)
{
    if (extra <= buf->cap - buf->len)
        return SPW_OK;
    if (extra > SIZE_MAX - buf->len)
        return SPW_ERR_NOMEM;
    size_t need = buf->len + extra;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *data = realloc(buf->data, cap);
    if (!data)
        return SPW_ERR_NOMEM;
    buf->data = data;
    buf->cap = cap;
    return SPW_OK;
}

spw_err_t spw_wire_pack(const ProtobufCMessage *msg, struct spw_wire_buf *buf)
{
    size_t size = protobuf_c_message_get_packed_size(msg);
    if (size == 0)
        return SPW_OK; /* an empty message: buf->data may still be NULL */
    spw_err_t rc = spw_wire_buf_reserve(buf, size);
    if (rc != SPW_OK)
        return rc;
    size_t wrote = protobuf_c_message_pack(msg, buf->data + buf->len);
    assert(wrote == size);
    buf->len += wrote;
    return SPW_OK;
}

spw_err_t spw_wire_pack_delimited(const ProtobufCMessage *msg, struct spw_wire_buf *buf)
{
    size_t size = protobuf_c_message_get_packed_size(msg);
    if (size > SIZE_MAX - SPW_WIRE_VARINT_MAX)
        return SPW_ERR_NOMEM;
    spw_err_t rc = spw_wire_buf_reserve(buf, SPW_WIRE_VARINT_MAX + size);
    if (rc != SPW_OK)
        return rc;
    buf->len += spw_wire_put_varint(buf->data + buf->len, size);
    size_t wrote = protobuf_c_message_pack(msg, buf->data + buf->len);
    assert(wrote == size);
    buf->len += wrote;
    return SPW_OK;
}

/* ---- the arena allocator ---- */

static void *arena_alloc(void *allocator_data, size_t size)
{
    return spw_arena_alloc(allocator_data, size);
}

/* Arena memory is released all at once by spw_arena_reset. */
static void arena_free(void *allocator_data, void *pointer)
{
    (void)allocator_data;
    (void)pointer;
}

ProtobufCAllocator spw_wire_arena_allocator(spw_arena_t *arena)
{
    return (ProtobufCAllocator){.alloc = arena_alloc, .free = arena_free, .allocator_data = arena};
}

/* The unpackers' allocator also remembers whether the arena refused, so that a spent budget
 * reads as SPW_ERR_NOMEM rather than as an undecodable buffer (protobuf-c returns NULL for
 * both). */
struct unpack_alloc {
    spw_arena_t *arena;
    bool failed;
};

static void *unpack_alloc(void *allocator_data, size_t size)
{
    struct unpack_alloc *ua = allocator_data;
    void *p = spw_arena_alloc(ua->arena, size);
    if (!p)
        ua->failed = true;
    return p;
}

/* Protobuf field numbers are 1..2^29-1. */
#define MAX_FIELD_NUMBER ((1u << 29) - 1)

/*
 * protobuf-c 1.4 refuses a tag of field number 0 only in its one-byte form: a padded encoding
 * (0x80 0x00) is kept as an unknown field with tag 0, which packs back to the one-byte form
 * and then fails to decode. Unknown fields are otherwise welcome (a newer peer's additions), so
 * only impossible field numbers are refused, in the message and every submessage.
 */
static bool unknown_fields_ok(const ProtobufCMessage *msg)
{
    for (unsigned i = 0; i < msg->n_unknown_fields; i++) {
        uint32_t tag = msg->unknown_fields[i].tag;
        if (tag == 0 || tag > MAX_FIELD_NUMBER)
            return false;
    }
    const ProtobufCMessageDescriptor *desc = msg->descriptor;
    const char *base = (const char *)msg;
    for (unsigned f = 0; f < desc->n_fields; f++) {
        const ProtobufCFieldDescriptor *field = &desc->fields[f];
        if (field->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (field->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + field->quantifier_offset);
            ProtobufCMessage *const *subs =
                *(ProtobufCMessage *const *const *)(base + field->offset);
            for (size_t j = 0; j < n; j++)
                if (!unknown_fields_ok(subs[j]))
                    return false;
            continue;
        }
        /* A oneof's members share storage: only the selected one is a message pointer. */
        if ((field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + field->quantifier_offset) != field->id)
            continue;
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + field->offset);
        if (sub && !unknown_fields_ok(sub))
            return false;
    }
    return true;
}

static spw_err_t unpack(const ProtobufCMessageDescriptor *desc, const void *data, size_t len,
                        size_t max_len, spw_arena_t *arena, ProtobufCMessage **out)
{
    if (len > max_len || len > SPW_WIRE_HARD_MAX_FRAME)
        return SPW_ERR_TOO_BIG;
    struct unpack_alloc ua = {.arena = arena, .failed = false};
    ProtobufCAllocator allocator = {
        .alloc = unpack_alloc, .free = arena_free, .allocator_data = &ua};
    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, &allocator, len, data);
    if (!msg)
        return ua.failed ? SPW_ERR_NOMEM : SPW_ERR_INVALID;
    if (!unknown_fields_ok(msg))
        return SPW_ERR_INVALID;
    *out = msg;
    return SPW_OK;
}

/* ---- consistency checks ---- */

/* a * b * c without overflow; false when the product does not fit. */
static bool mul3(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, out))
        return false;
    return true;
}

static bool dim_ok(uint32_t dim)
{
    return dim >= 1 && dim <= SPW_WIRE_MAX_DIM;
}

static bool example_ok(const Sparrow__Example *ex)
{
    return ex->n_fields == ex->n_keys && (ex->n_weights == 0 || ex->n_weights == ex->n_keys) &&
           (!ex->has_source_partition || ex->source_partition >= 0) &&
           (!ex->has_source_offset || ex->source_offset >= 0);
}

static bool offsets_ok(Sparrow__PartitionOffset *const *offsets, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((offsets[i]->has_partition && offsets[i]->partition < 0) ||
            (offsets[i]->has_source_partition && offsets[i]->source_partition < 0))
            return false;
    return true;
}

/* An echo block: n' × u32 indices, strictly ascending, each < n. */
static bool echo_ok(const ProtobufCBinaryData *echo, size_t n)
{
    if (echo->len % 4 != 0 || echo->len / 4 > n)
        return false;
    uint32_t prev = 0;
    for (size_t i = 0; i < echo->len / 4; i++) {
        uint32_t v;
        memcpy(&v, echo->data + i * 4, 4);
        if (v >= n || (i > 0 && v <= prev))
            return false;
        prev = v;
    }
    return true;
}

/*
 * PushRequest blocks (n = keys.len / 8):
 *   | block    | bytes                  |
 *   | keys     | n * 8                  |
 *   | versions | n * 4                  |
 *   | grads    | n * dim * (fp16 ? 2:4) |
 *   | echo     | n' * 4, n' <= n        |
 *   | pulled   | 0 (absent), or n * dim * (fp16 ? 2:4): the same layout as grads |
 */
static bool push_ok(const Sparrow__PushRequest *push)
{
    if (!dim_ok(push->dim) || push->keys.len % 8 != 0)
        return false;
    size_t n = push->keys.len / 8, grads;
    if (!mul3(n, push->dim, push->fp16 ? 2 : 4, &grads))
        return false;
    return push->versions.len == n * 4 && push->grads.len == grads && echo_ok(&push->echo, n) &&
           (push->pulled.len == 0 || push->pulled.len == grads);
}

/* PushAck echo blocks (n' = echo_versions.len / 4): versions n' * 4, values n' * dim * 4; dim
 * is the request's, so only the shapes are checked here (the client checks dim). */
static bool push_ack_ok(const Sparrow__PushAck *ack)
{
    size_t n = ack->echo_versions.len;
    if (n % 4 != 0)
        return false;
    n /= 4;
    if (n == 0)
        return ack->echo_values.len == 0;
    return ack->echo_values.len % (n * 4) == 0 &&
           dim_ok(ack->echo_values.len / (n * 4) > UINT32_MAX
                      ? 0
                      : (uint32_t)(ack->echo_values.len / (n * 4)));
}

/* PullReply blocks (n = versions.len / 4): versions n * 4, values n * dim * 4. */
static bool pull_reply_ok(const Sparrow__PullReply *pull)
{
    if (!dim_ok(pull->dim) || pull->versions.len % 4 != 0)
        return false;
    size_t values;
    if (!mul3(pull->versions.len / 4, pull->dim, 4, &values))
        return false;
    return pull->values.len == values;
}

static bool request_ok(const Sparrow__Request *req)
{
    switch (req->body_case) {
    case SPARROW__REQUEST__BODY_PULL:
        return req->pull->keys.len % 8 == 0;
    case SPARROW__REQUEST__BODY_PUSH:
        return push_ok(req->push);
    default:
        return true;
    }
}

static bool reply_ok(const Sparrow__Reply *reply)
{
    if (reply->body_case == SPARROW__REPLY__BODY_PULL)
        return pull_reply_ok(reply->pull);
    if (reply->body_case == SPARROW__REPLY__BODY_PUSH)
        return push_ack_ok(reply->push);
    return true;
}

static bool coord_ok(const Sparrow__CoordMessage *msg)
{
    if (msg->body_case == SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT)
        return offsets_ok(msg->checkpoint_report->offsets, msg->checkpoint_report->n_offsets);
    return true;
}

/* A batch (keys set): every block of n rows, weights n × dim with dim in range, tombstone flags
 * 0 or 1, and none of the single row's fields. A single row: its key, and no batch block. */
static bool model_update_ok(const Sparrow__ModelUpdate *update)
{
    const Sparrow__ModelUpdate *u = update;
    if (u->keys.len == 0) {
        if (!u->has_key || u->versions.len || u->event_times_ms.len || u->applied_times_ms.len ||
            u->tombstones.len)
            return false;
        if (u->tombstone)
            return u->weights.len == 0;
        size_t len = u->weights.len;
        return len % 4 == 0 && dim_ok(len / 4 > UINT32_MAX ? 0 : (uint32_t)(len / 4));
    }
    if (u->keys.len % 8 != 0 || u->has_key || u->has_tombstone || u->has_version ||
        u->has_event_time_ms || u->has_applied_ms)
        return false;
    size_t n = u->keys.len / 8;
    if (u->versions.len != 4 * n || u->event_times_ms.len != 8 * n ||
        u->applied_times_ms.len != 8 * n || u->tombstones.len != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (u->tombstones.data[i] > 1)
            return false;
    size_t row_bytes = u->weights.len / n;
    return u->weights.len % n == 0 && row_bytes % 4 == 0 &&
           dim_ok(row_bytes / 4 > UINT32_MAX ? 0 : (uint32_t)(row_bytes / 4));
}

spw_err_t spw_wire_model_update_rows(const Sparrow__ModelUpdate *update,
                                     struct spw_wire_update_rows *rows)
{
    const Sparrow__ModelUpdate *u = update;
    *rows = (struct spw_wire_update_rows){0};
    if (u->keys.len == 0) {
        rows->n = 1;
        rows->one_key = u->key;
        rows->one_version = u->has_version ? u->version : 0;
        rows->one_event_ms = u->has_event_time_ms ? u->event_time_ms : 0;
        rows->one_applied_ms = u->has_applied_ms ? u->applied_ms : 0;
        rows->one_tomb = u->tombstone ? 1 : 0;
        rows->keys = &rows->one_key;
        rows->versions = &rows->one_version;
        rows->event_ms = &rows->one_event_ms;
        rows->applied_ms = &rows->one_applied_ms;
        rows->tombs = &rows->one_tomb;
        rows->dim = (uint32_t)(u->weights.len / 4);
        if (rows->dim == 0)
            return SPW_OK; /* a single tombstone carries no weights */
        return spw_wire_block_f32(&u->weights, rows->dim, &rows->weights);
    }
    size_t n = u->keys.len / 8;
    rows->n = n;
    rows->dim = (uint32_t)(u->weights.len / 4 / n);
    const uint64_t *ev, *ap;
    spw_err_t rc = spw_wire_block_u64(&u->keys, n, &rows->keys);
    if (rc == SPW_OK)
        rc = spw_wire_block_u32(&u->versions, n, &rows->versions);
    if (rc == SPW_OK)
        rc = spw_wire_block_u64(&u->event_times_ms, n, &ev);
    if (rc == SPW_OK)
        rc = spw_wire_block_u64(&u->applied_times_ms, n, &ap);
    if (rc == SPW_OK)
        rc = spw_wire_block_f32(&u->weights, n * rows->dim, &rows->weights);
    if (rc != SPW_OK)
        return rc;
    rows->event_ms = (const int64_t *)(const void *)ev;
    rows->applied_ms = (const int64_t *)(const void *)ap;
    rows->tombs = u->tombstones.data;
    return SPW_OK;
}

/* Each shard 0..shard_count-1 exactly once; a byte per shard from the arena marks those seen. */
static spw_err_t manifest_check(const Sparrow__CheckpointManifest *m, spw_arena_t *arena)
{
    if (m->shard_count == 0 || m->n_shards != m->shard_count)
        return SPW_ERR_INVALID;
    if (m->has_dim && !dim_ok(m->dim))
        return SPW_ERR_INVALID;
    if (!offsets_ok(m->offsets, m->n_offsets) ||
        !offsets_ok(m->update_offsets, m->n_update_offsets))
        return SPW_ERR_INVALID;
    uint8_t *seen = spw_arena_calloc(arena, m->shard_count, 1);
    if (!seen)
        return SPW_ERR_NOMEM;
    for (size_t i = 0; i < m->n_shards; i++) {
        uint32_t shard = m->shards[i]->shard;
        if (shard >= m->shard_count || seen[shard])
            return SPW_ERR_INVALID;
        seen[shard] = 1;
    }
    return SPW_OK;
}

/* ---- typed unpackers ---- */

spw_err_t spw_wire_unpack_example(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                  Sparrow__Example **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__example__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__Example *ex = (Sparrow__Example *)msg;
    if (!example_ok(ex))
        return SPW_ERR_INVALID;
    *out = ex;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_example_batch(const void *data, size_t len, size_t max_len,
                                        spw_arena_t *arena, Sparrow__ExampleBatch **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__example_batch__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__ExampleBatch *batch = (Sparrow__ExampleBatch *)msg;
    for (size_t i = 0; i < batch->n_examples; i++)
        if (!example_ok(batch->examples[i]))
            return SPW_ERR_INVALID;
    *out = batch;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_request(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                  Sparrow__Request **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__request__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__Request *req = (Sparrow__Request *)msg;
    if (!request_ok(req))
        return SPW_ERR_INVALID;
    *out = req;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_reply(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                Sparrow__Reply **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__reply__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__Reply *reply = (Sparrow__Reply *)msg;
    if (!reply_ok(reply))
        return SPW_ERR_INVALID;
    *out = reply;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_coord(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                Sparrow__CoordMessage **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__coord_message__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__CoordMessage *coord = (Sparrow__CoordMessage *)msg;
    if (!coord_ok(coord))
        return SPW_ERR_INVALID;
    *out = coord;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_model_update(const void *data, size_t len, size_t max_len,
                                       spw_arena_t *arena, Sparrow__ModelUpdate **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__model_update__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__ModelUpdate *update = (Sparrow__ModelUpdate *)msg;
    if (!model_update_ok(update))
        return SPW_ERR_INVALID;
    *out = update;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_manifest(const void *data, size_t len, size_t max_len, spw_arena_t *arena,
                                   Sparrow__CheckpointManifest **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc =
        unpack(&sparrow__checkpoint_manifest__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    Sparrow__CheckpointManifest *manifest = (Sparrow__CheckpointManifest *)msg;
    rc = manifest_check(manifest, arena);
    if (rc != SPW_OK)
        return rc;
    *out = manifest;
    return SPW_OK;
}

spw_err_t spw_wire_unpack_predict_request(const void *data, size_t len, size_t max_len,
                                          spw_arena_t *arena, Sparrow__PredictRequest **out)
{
    ProtobufCMessage *msg;
    spw_err_t rc = unpack(&sparrow__predict_request__descriptor, data, len, max_len, arena, &msg);
    if (rc != SPW_OK)
        return rc;
    *out = (Sparrow__PredictRequest *)msg;
    return SPW_OK;
}
