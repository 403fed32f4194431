/* Tests of the wire module; `test_wire --write-corpus DIR` regenerates the wire fuzz corpora. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sparrow/wire.h"

#define MAX_FRAME SPW_WIRE_DEFAULT_MAX_FRAME

/* ---- helpers ---- */

static spw_arena_t *new_arena(void)
{
    spw_arena_t *arena = spw_arena_new(0, 0);
    assert_non_null(arena);
    return arena;
}

/* Packs msg into buf, replacing what buf held. */
static void pack_into(const void *msg, struct spw_wire_buf *buf)
{
    buf->len = 0;
    assert_int_equal(spw_wire_pack(msg, buf), SPW_OK);
}

static ProtobufCBinaryData bin(const void *data, size_t len)
{
    return (ProtobufCBinaryData){.len = len, .data = (uint8_t *)data};
}

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* Sample data, sized for up to 4 keys of dim 4. */
static const uint64_t keys4[4] = {0x1111111111111111ull, 0x2222222222222222ull, 3,
                                  0xffffffffffffffffull};
static const uint32_t versions4[4] = {7, 0, 9, 0xffffffffu};
static const float values16[16] = {0.5f, -1.0f, 2.0f, 3.25f, 1e-3f, -1e3f, 0.0f, -0.0f,
                                   1.0f, 2.0f,  3.0f, 4.0f,  5.0f,  6.0f,  7.0f, 8.0f};
static const uint16_t halves16[16] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x3555,
                                      0x0000, 0x8000, 0x3c00, 0x4000, 0x4200, 0x4400,
                                      0x4500, 0x4600, 0x4700, 0x4800};

/* ---- message builders (shared by the tests and --write-corpus) ---- */

static uint32_t ex_fields[3] = {1, 2, 3};
static uint64_t ex_keys[3] = {0xdeadbeefull, 42, 0x8000000000000000ull};
static float ex_weights[3] = {1.0f, 0.5f, 2.0f};

static Sparrow__Example example_msg(void)
{
    Sparrow__Example ex = SPARROW__EXAMPLE__INIT;
    ex.has_id = 1;
    ex.id = 12345;
    ex.has_label = 1;
    ex.label = 1.0f;
    ex.has_event_time_ms = 1;
    ex.event_time_ms = 1700000000000;
    ex.n_fields = 3;
    ex.fields = ex_fields;
    ex.n_keys = 3;
    ex.keys = ex_keys;
    ex.n_weights = 3;
    ex.weights = ex_weights;
    ex.has_oracle_p = 1;
    ex.oracle_p = 0.25f;
    return ex;
}

static Sparrow__PushRequest push_msg(size_t n, uint32_t dim, int fp16)
{
    Sparrow__PushRequest push = SPARROW__PUSH_REQUEST__INIT;
    push.has_trainer_id = 1;
    push.trainer_id = 3;
    push.has_epoch = 1;
    push.epoch = 2;
    push.has_seq = 1;
    push.seq = 99;
    push.has_dim = 1;
    push.dim = dim;
    push.has_keys = 1;
    push.keys = bin(keys4, n * 8);
    push.has_grads = 1;
    push.grads = fp16 ? bin(halves16, n * dim * 2) : bin(values16, n * dim * 4);
    push.has_fp16 = 1;
    push.fp16 = fp16;
    push.has_versions = 1;
    push.versions = bin(versions4, n * 4);
    push.has_max_event_time_ms = 1;
    push.max_event_time_ms = -5;
    push.has_examples = 1;
    push.examples = 128;
    return push;
}

static Sparrow__PullReply pull_reply_msg(size_t n, uint32_t dim)
{
    Sparrow__PullReply pull = SPARROW__PULL_REPLY__INIT;
    pull.has_dim = 1;
    pull.dim = dim;
    pull.has_values = 1;
    pull.values = bin(values16, n * dim * 4);
    pull.has_versions = 1;
    pull.versions = bin(versions4, n * 4);
    return pull;
}

static Sparrow__PartitionOffset offset_a = SPARROW__PARTITION_OFFSET__INIT;
static Sparrow__PartitionOffset offset_b = SPARROW__PARTITION_OFFSET__INIT;
static Sparrow__PartitionOffset *offsets2[2] = {&offset_a, &offset_b};

static void init_offsets(void)
{
    offset_a.topic = "examples";
    offset_a.has_partition = 1;
    offset_a.partition = 0;
    offset_a.has_offset = 1;
    offset_a.offset = 1000;
    offset_b.topic = "examples";
    offset_b.has_partition = 1;
    offset_b.partition = 7;
    offset_b.has_offset = 1;
    offset_b.offset = -1001;
}

static Sparrow__ShardCheckpoint shard_cps[3] = {SPARROW__SHARD_CHECKPOINT__INIT,
                                                SPARROW__SHARD_CHECKPOINT__INIT,
                                                SPARROW__SHARD_CHECKPOINT__INIT};
static Sparrow__ShardCheckpoint *shard_ptrs[3] = {&shard_cps[0], &shard_cps[1], &shard_cps[2]};

/* A manifest whose three shard entries name shards 2, 0, 1 (any order is fine). */
static Sparrow__CheckpointManifest manifest_msg(void)
{
    init_offsets();
    static const uint32_t order[3] = {2, 0, 1};
    for (int i = 0; i < 3; i++) {
        shard_cps[i].has_shard = 1;
        shard_cps[i].shard = order[i];
        shard_cps[i].checksum = "0123abcd";
        shard_cps[i].has_rows = 1;
        shard_cps[i].rows = 1000ull * (uint64_t)(i + 1);
    }
    Sparrow__CheckpointManifest m = SPARROW__CHECKPOINT_MANIFEST__INIT;
    m.has_format_version = 1;
    m.format_version = 1;
    m.has_epoch = 1;
    m.epoch = 17;
    m.has_shard_count = 1;
    m.shard_count = 3;
    m.n_shards = 3;
    m.shards = shard_ptrs;
    m.n_offsets = 2;
    m.offsets = offsets2;
    m.has_example_count = 1;
    m.example_count = 123456789;
    m.n_update_offsets = 1;
    m.update_offsets = offsets2;
    m.has_created_ms = 1;
    m.created_ms = 1700000000123;
    m.model = "fm";
    m.has_dim = 1;
    m.dim = 9;
    return m;
}

/* ---- buffers and the allocator ---- */

static void test_wire_buf_reserve_grows(void **state)
{
    (void)state;
    struct spw_wire_buf buf = {0};
    assert_int_equal(spw_wire_buf_reserve(&buf, 10), SPW_OK);
    assert_true(buf.cap >= 10);
    buf.len = 10;
    size_t cap = buf.cap;
    assert_int_equal(spw_wire_buf_reserve(&buf, cap - 10), SPW_OK);
    assert_int_equal(buf.cap, cap); /* fits: no growth */
    assert_int_equal(spw_wire_buf_reserve(&buf, cap), SPW_OK);
    assert_true(buf.cap >= 10 + cap);
    assert_int_equal(spw_wire_buf_reserve(&buf, SIZE_MAX), SPW_ERR_NOMEM);
    free(buf.data);
}

static void test_wire_allocator_uses_arena(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    ProtobufCAllocator alloc = spw_wire_arena_allocator(arena);
    void *p = alloc.alloc(alloc.allocator_data, 100);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 16, 0);
    assert_true(spw_arena_used(arena) >= 100);
    alloc.free(alloc.allocator_data, p); /* a no-op: the arena still holds it */
    assert_true(spw_arena_used(arena) >= 100);

    /* protobuf-c itself can use it. */
    Sparrow__Example ex = example_msg();
    struct spw_wire_buf buf = {0};
    pack_into(&ex, &buf);
    Sparrow__Example *out = sparrow__example__unpack(&alloc, buf.len, buf.data);
    assert_non_null(out);
    assert_int_equal(out->n_keys, 3);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* ---- round trips ---- */

static void test_wire_example_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Example ex = example_msg();
    pack_into(&ex, &buf);
    Sparrow__Example *out = NULL;
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    assert_true(out->has_id && out->id == 12345);
    assert_true(out->has_label && out->label == 1.0f);
    assert_int_equal(out->event_time_ms, 1700000000000);
    assert_int_equal(out->n_keys, 3);
    assert_memory_equal(out->keys, ex_keys, sizeof(ex_keys));
    assert_memory_equal(out->fields, ex_fields, sizeof(ex_fields));
    assert_memory_equal(out->weights, ex_weights, sizeof(ex_weights));
    assert_true(out->has_oracle_p && out->oracle_p == 0.25f);

    /* Without weights (every feature weighs 1) and without features at all. */
    ex.n_weights = 0;
    ex.weights = NULL;
    pack_into(&ex, &buf);
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    assert_int_equal(out->n_weights, 0);
    Sparrow__Example empty = SPARROW__EXAMPLE__INIT;
    pack_into(&empty, &buf);
    assert_int_equal(buf.len, 0);
    assert_int_equal(spw_wire_unpack_example(buf.data, 0, MAX_FRAME, arena, &out), SPW_OK);
    assert_int_equal(out->n_keys, 0);
    assert_false(out->has_label);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_wire_example_batch_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Example ex[3] = {example_msg(), example_msg(), example_msg()};
    ex[1].id = 2;
    ex[2].n_weights = 0;
    ex[2].weights = NULL;
    Sparrow__Example *exs[3] = {&ex[0], &ex[1], &ex[2]};
    Sparrow__ExampleBatch batch = SPARROW__EXAMPLE_BATCH__INIT;
    batch.n_examples = 3;
    batch.examples = exs;
    pack_into(&batch, &buf);
    Sparrow__ExampleBatch *out = NULL;
    assert_int_equal(spw_wire_unpack_example_batch(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_OK);
    assert_int_equal(out->n_examples, 3);
    assert_int_equal(out->examples[1]->id, 2);
    assert_int_equal(out->examples[2]->n_weights, 0);
    assert_memory_equal(out->examples[0]->keys, ex_keys, sizeof(ex_keys));
    free(buf.data);
    spw_arena_destroy(arena);
}

static Sparrow__Request *request_round_trip(Sparrow__Request *req, spw_arena_t *arena)
{
    struct spw_wire_buf buf = {0};
    pack_into(req, &buf);
    Sparrow__Request *out = NULL;
    assert_int_equal(spw_wire_unpack_request(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    free(buf.data);
    assert_int_equal(out->version, req->version);
    assert_int_equal(out->request_id, req->request_id);
    assert_int_equal(out->body_case, req->body_case);
    return out;
}

static void test_wire_request_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = 1;
    req.version = SPARROW__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    req.has_request_id = 1;
    req.request_id = 0xabcdef0123ull;

    Sparrow__PullRequest pull = SPARROW__PULL_REQUEST__INIT;
    pull.has_keys = 1;
    pull.keys = bin(keys4, sizeof(keys4));
    req.body_case = SPARROW__REQUEST__BODY_PULL;
    req.pull = &pull;
    Sparrow__Request *out = request_round_trip(&req, arena);
    const uint64_t *keys;
    assert_int_equal(spw_wire_block_u64(&out->pull->keys, 4, &keys), SPW_OK);
    assert_memory_equal(keys, keys4, sizeof(keys4));

    for (int fp16 = 0; fp16 <= 1; fp16++) {
        Sparrow__PushRequest push = push_msg(4, 4, fp16);
        req.body_case = SPARROW__REQUEST__BODY_PUSH;
        req.push = &push;
        out = request_round_trip(&req, arena);
        assert_int_equal(out->push->trainer_id, 3);
        assert_int_equal(out->push->seq, 99);
        assert_int_equal(out->push->dim, 4);
        assert_int_equal(out->push->fp16, fp16);
        assert_int_equal(out->push->max_event_time_ms, -5);
        assert_int_equal(out->push->examples, 128);
        const uint32_t *versions;
        assert_int_equal(spw_wire_block_u32(&out->push->versions, 4, &versions), SPW_OK);
        assert_memory_equal(versions, versions4, sizeof(versions4));
        if (fp16) {
            const uint16_t *grads;
            assert_int_equal(spw_wire_block_u16(&out->push->grads, 16, &grads), SPW_OK);
            assert_memory_equal(grads, halves16, sizeof(halves16));
        } else {
            const float *grads;
            assert_int_equal(spw_wire_block_f32(&out->push->grads, 16, &grads), SPW_OK);
            assert_memory_equal(grads, values16, sizeof(values16));
        }
    }

    Sparrow__StatsRequest stats = SPARROW__STATS_REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_STATS;
    req.stats = &stats;
    out = request_round_trip(&req, arena);
    assert_non_null(out->stats);

    Sparrow__CheckpointRequest cp = SPARROW__CHECKPOINT_REQUEST__INIT;
    cp.has_epoch = 1;
    cp.epoch = 5;
    cp.dir = "/data/checkpoints";
    req.body_case = SPARROW__REQUEST__BODY_CHECKPOINT;
    req.checkpoint = &cp;
    out = request_round_trip(&req, arena);
    assert_int_equal(out->checkpoint->epoch, 5);
    assert_string_equal(out->checkpoint->dir, "/data/checkpoints");

    Sparrow__HealthRequest health = SPARROW__HEALTH_REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_HEALTH;
    req.health = &health;
    out = request_round_trip(&req, arena);
    assert_non_null(out->health);
    spw_arena_destroy(arena);
}

static Sparrow__Reply *reply_round_trip(Sparrow__Reply *reply, spw_arena_t *arena)
{
    struct spw_wire_buf buf = {0};
    pack_into(reply, &buf);
    Sparrow__Reply *out = NULL;
    assert_int_equal(spw_wire_unpack_reply(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    free(buf.data);
    assert_int_equal(out->request_id, reply->request_id);
    assert_int_equal(out->error, reply->error);
    assert_int_equal(out->body_case, reply->body_case);
    return out;
}

static void test_wire_reply_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__Reply reply = SPARROW__REPLY__INIT;
    reply.has_version = 1;
    reply.version = 1;
    reply.has_request_id = 1;
    reply.request_id = 77;

    Sparrow__PullReply pull = pull_reply_msg(4, 4);
    reply.body_case = SPARROW__REPLY__BODY_PULL;
    reply.pull = &pull;
    Sparrow__Reply *out = reply_round_trip(&reply, arena);
    const float *values;
    assert_int_equal(spw_wire_block_f32(&out->pull->values, 16, &values), SPW_OK);
    assert_memory_equal(values, values16, sizeof(values16));
    assert_int_equal(out->pull->dim, 4);

    Sparrow__PushAck ack = SPARROW__PUSH_ACK__INIT;
    ack.has_seq = 1;
    ack.seq = 99;
    ack.has_applied = 1;
    ack.applied = 4000;
    ack.has_rejected = 1;
    ack.rejected = 2;
    ack.has_dropped_stale = 1;
    ack.dropped_stale = 3;
    ack.has_duplicate = 1;
    ack.duplicate = 1;
    reply.body_case = SPARROW__REPLY__BODY_PUSH;
    reply.push = &ack;
    out = reply_round_trip(&reply, arena);
    assert_int_equal(out->push->applied, 4000);
    assert_int_equal(out->push->dropped_stale, 3);
    assert_true(out->push->duplicate);

    Sparrow__StatsReply stats = SPARROW__STATS_REPLY__INIT;
    stats.has_shard = 1;
    stats.shard = 2;
    stats.has_rows_total = 1;
    stats.rows_total = 1ull << 40;
    reply.body_case = SPARROW__REPLY__BODY_STATS;
    reply.stats = &stats;
    out = reply_round_trip(&reply, arena);
    assert_int_equal(out->stats->rows_total, 1ull << 40);
    assert_false(out->stats->has_pulls);

    Sparrow__CheckpointReply cp = SPARROW__CHECKPOINT_REPLY__INIT;
    cp.has_epoch = 1;
    cp.epoch = 5;
    cp.path = "/data/checkpoints/5/shard-2";
    cp.checksum = "ffee";
    reply.body_case = SPARROW__REPLY__BODY_CHECKPOINT;
    reply.checkpoint = &cp;
    out = reply_round_trip(&reply, arena);
    assert_string_equal(out->checkpoint->path, cp.path);
    assert_string_equal(out->checkpoint->checksum, "ffee");

    Sparrow__HealthReply health = SPARROW__HEALTH_REPLY__INIT;
    health.has_ready = 1;
    health.ready = 1;
    health.state = "serving";
    reply.body_case = SPARROW__REPLY__BODY_HEALTH;
    reply.health = &health;
    out = reply_round_trip(&reply, arena);
    assert_string_equal(out->health->state, "serving");

    reply.body_case = SPARROW__REPLY__BODY__NOT_SET;
    reply.has_error = 1;
    reply.error = SPARROW__ERROR_CODE__ERROR_WRONG_SHARD;
    reply.error_message = "key belongs to shard 1";
    out = reply_round_trip(&reply, arena);
    assert_string_equal(out->error_message, reply.error_message);
    spw_arena_destroy(arena);
}

static Sparrow__CoordMessage *coord_round_trip(Sparrow__CoordMessage *msg, spw_arena_t *arena)
{
    struct spw_wire_buf buf = {0};
    pack_into(msg, &buf);
    Sparrow__CoordMessage *out = NULL;
    assert_int_equal(spw_wire_unpack_coord(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    free(buf.data);
    assert_int_equal(out->body_case, msg->body_case);
    return out;
}

static void test_wire_coord_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    msg.has_version = 1;
    msg.version = 1;

    Sparrow__Register reg = SPARROW__REGISTER__INIT;
    reg.has_role = 1;
    reg.role = SPARROW__MEMBER_ROLE__ROLE_TRAINER;
    reg.member_id = "trainer-0";
    reg.endpoint = "tcp://10.0.0.1:7000";
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_REGISTER;
    msg.register_ = &reg;
    Sparrow__CoordMessage *out = coord_round_trip(&msg, arena);
    assert_int_equal(out->register_->role, SPARROW__MEMBER_ROLE__ROLE_TRAINER);
    assert_string_equal(out->register_->endpoint, reg.endpoint);

    Sparrow__Heartbeat hb = SPARROW__HEARTBEAT__INIT;
    hb.member_id = "trainer-0";
    hb.has_step = 1;
    hb.step = 10;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_HEARTBEAT;
    msg.heartbeat = &hb;
    out = coord_round_trip(&msg, arena);
    assert_int_equal(out->heartbeat->step, 10);

    Sparrow__Clock clock = SPARROW__CLOCK__INIT;
    clock.member_id = "trainer-1";
    clock.has_step = 1;
    clock.step = 11;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK;
    msg.clock = &clock;
    out = coord_round_trip(&msg, arena);
    assert_string_equal(out->clock->member_id, "trainer-1");

    Sparrow__ClockReply cr = SPARROW__CLOCK_REPLY__INIT;
    cr.has_proceed = 1;
    cr.proceed = 1;
    cr.has_min_step = 1;
    cr.min_step = 9;
    cr.has_checkpoint_epoch = 1;
    cr.checkpoint_epoch = 4;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK_REPLY;
    msg.clock_reply = &cr;
    out = coord_round_trip(&msg, arena);
    assert_true(out->clock_reply->proceed);
    assert_int_equal(out->clock_reply->checkpoint_epoch, 4);

    init_offsets();
    Sparrow__CheckpointReport rep = SPARROW__CHECKPOINT_REPORT__INIT;
    rep.member_id = "trainer-1";
    rep.has_epoch = 1;
    rep.epoch = 4;
    rep.n_offsets = 2;
    rep.offsets = offsets2;
    rep.has_examples = 1;
    rep.examples = 5000;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT;
    msg.checkpoint_report = &rep;
    out = coord_round_trip(&msg, arena);
    assert_int_equal(out->checkpoint_report->n_offsets, 2);
    assert_string_equal(out->checkpoint_report->offsets[1]->topic, "examples");
    assert_int_equal(out->checkpoint_report->offsets[1]->partition, 7);
    assert_int_equal(out->checkpoint_report->offsets[1]->offset, -1001);
    spw_arena_destroy(arena);
}

static void test_wire_model_update_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__ModelUpdate up = SPARROW__MODEL_UPDATE__INIT;
    up.has_key = 1;
    up.key = 0xfedcba9876543210ull;
    up.has_weights = 1;
    up.weights = bin(values16, (size_t)9 * 4);
    up.has_version = 1;
    up.version = 3;
    up.has_epoch = 1;
    up.epoch = 2;
    up.has_shard = 1;
    up.shard = 1;
    up.has_event_time_ms = 1;
    up.event_time_ms = 1700000000000;
    up.has_applied_ms = 1;
    up.applied_ms = 1700000000500;
    pack_into(&up, &buf);
    Sparrow__ModelUpdate *out = NULL;
    assert_int_equal(spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_OK);
    assert_int_equal(out->key, up.key);
    const float *w;
    assert_int_equal(spw_wire_block_f32(&out->weights, 9, &w), SPW_OK);
    assert_memory_equal(w, values16, (size_t)9 * 4);
    assert_int_equal(out->applied_ms, 1700000000500);

    Sparrow__ModelUpdate tomb = SPARROW__MODEL_UPDATE__INIT;
    tomb.has_key = 1;
    tomb.key = 5;
    tomb.has_tombstone = 1;
    tomb.tombstone = 1;
    pack_into(&tomb, &buf);
    assert_int_equal(spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_OK);
    assert_true(out->tombstone);
    assert_int_equal(out->weights.len, 0);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* A batch of 3 rows of dim 2 (row 1 a tombstone) in blocks, as the shards publish them. */
static Sparrow__ModelUpdate batch_update(const uint64_t *keys, const uint32_t *versions,
                                         const int64_t *ev, const int64_t *ap, const uint8_t *tombs)
{
    Sparrow__ModelUpdate up = SPARROW__MODEL_UPDATE__INIT;
    up.has_epoch = up.has_shard = 1;
    up.epoch = 7;
    up.shard = 1;
    up.has_keys = up.has_versions = up.has_event_times_ms = up.has_applied_times_ms = 1;
    up.has_tombstones = up.has_weights = 1;
    up.keys = bin(keys, 3 * 8);
    up.versions = bin(versions, 3 * 4);
    up.event_times_ms = bin(ev, 3 * 8);
    up.applied_times_ms = bin(ap, 3 * 8);
    up.tombstones = bin(tombs, 3);
    up.weights = bin(values16, (size_t)3 * 2 * 4);
    return up;
}

static void test_wire_model_update_batch_rows(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    const uint64_t keys[3] = {11, 0xfedcba9876543210ull, 13};
    const uint32_t versions[3] = {1, 0, 4};
    const int64_t ev[3] = {1700000000000, 0, 1700000000100};
    const int64_t ap[3] = {1700000000500, 1700000000600, 1700000000700};
    const uint8_t tombs[3] = {0, 1, 0};
    Sparrow__ModelUpdate up = batch_update(keys, versions, ev, ap, tombs);
    pack_into(&up, &buf);
    Sparrow__ModelUpdate *out = NULL;
    assert_int_equal(spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_OK);
    struct spw_wire_update_rows rows;
    assert_int_equal(spw_wire_model_update_rows(out, &rows), SPW_OK);
    assert_int_equal(rows.n, 3);
    assert_int_equal(rows.dim, 2);
    assert_memory_equal(rows.keys, keys, sizeof(keys));
    assert_memory_equal(rows.versions, versions, sizeof(versions));
    assert_memory_equal(rows.event_ms, ev, sizeof(ev));
    assert_memory_equal(rows.applied_ms, ap, sizeof(ap));
    assert_memory_equal(rows.tombs, tombs, sizeof(tombs));
    assert_memory_equal(rows.weights, values16, (size_t)3 * 2 * 4);

    /* A single row reads as a batch of one, its unset times as 0. */
    Sparrow__ModelUpdate one = SPARROW__MODEL_UPDATE__INIT;
    one.has_key = one.has_version = one.has_weights = 1;
    one.key = 42;
    one.version = 9;
    one.weights = bin(values16, (size_t)4 * 4);
    pack_into(&one, &buf);
    assert_int_equal(spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_OK);
    assert_int_equal(spw_wire_model_update_rows(out, &rows), SPW_OK);
    assert_int_equal(rows.n, 1);
    assert_int_equal(rows.dim, 4);
    assert_int_equal(rows.keys[0], 42);
    assert_int_equal(rows.versions[0], 9);
    assert_int_equal(rows.event_ms[0], 0);
    assert_int_equal(rows.tombs[0], 0);
    assert_memory_equal(rows.weights, values16, (size_t)4 * 4);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* Batches whose blocks disagree on the row count, or that mix in a single row's fields, are
 * refused. */
static void test_wire_model_update_batch_rejects(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    const uint64_t keys[3] = {1, 2, 3};
    const uint32_t versions[3] = {1, 1, 1};
    const int64_t times[3] = {0, 0, 0};
    const uint8_t tombs[3] = {0, 0, 0}, bad_tomb[3] = {0, 2, 0};
    Sparrow__ModelUpdate *out = NULL;
    for (int c = 0; c < 7; c++) {
        Sparrow__ModelUpdate up = batch_update(keys, versions, times, times, tombs);
        if (c == 0)
            up.versions.len = 8; /* 2 versions for 3 keys */
        else if (c == 1)
            up.event_times_ms.len = 16;
        else if (c == 2)
            up.weights.len = 3 * 4 + 2; /* not n x dim floats */
        else if (c == 3)
            up.tombstones = bin(bad_tomb, 3);
        else if (c == 4)
            up.has_key = 1; /* a single row's field in a batch */
        else if (c == 5)
            up.keys.len = 20; /* not whole keys */
        else
            up.tombstones.len = 0; /* no tombstone flags */
        pack_into(&up, &buf);
        assert_int_equal(spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out),
                         SPW_ERR_INVALID);
    }
    /* a single row carrying a batch block */
    Sparrow__ModelUpdate one = SPARROW__MODEL_UPDATE__INIT;
    one.has_key = one.has_weights = one.has_versions = 1;
    one.weights = bin(values16, 4);
    one.versions = bin(versions, 4);
    pack_into(&one, &buf);
    assert_int_equal(spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_wire_manifest_round_trip(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__CheckpointManifest m = manifest_msg();
    pack_into(&m, &buf);
    Sparrow__CheckpointManifest *out = NULL;
    assert_int_equal(spw_wire_unpack_manifest(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    assert_int_equal(out->epoch, 17);
    assert_int_equal(out->shard_count, 3);
    assert_int_equal(out->n_shards, 3);
    assert_int_equal(out->shards[0]->shard, 2);
    assert_string_equal(out->shards[2]->checksum, "0123abcd");
    assert_int_equal(out->n_offsets, 2);
    assert_int_equal(out->n_update_offsets, 1);
    assert_int_equal(out->example_count, 123456789);
    assert_string_equal(out->model, "fm");
    assert_int_equal(out->dim, 9);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* ---- consistency checks ---- */

static void test_wire_example_rejects_inconsistent(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Example *out = NULL;

    Sparrow__Example ex = example_msg();
    ex.n_fields = 2; /* fewer fields than keys */
    pack_into(&ex, &buf);
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);

    ex = example_msg();
    ex.n_weights = 2; /* weights neither empty nor one per key */
    pack_into(&ex, &buf);
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);

    ex = example_msg();
    ex.n_keys = 0; /* fields without keys */
    ex.n_weights = 0;
    pack_into(&ex, &buf);
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);
    assert_null(out);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_wire_example_batch_rejects_bad_example(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Example ex[2] = {example_msg(), example_msg()};
    ex[1].n_weights = 1;
    Sparrow__Example *exs[2] = {&ex[0], &ex[1]};
    Sparrow__ExampleBatch batch = SPARROW__EXAMPLE_BATCH__INIT;
    batch.n_examples = 2;
    batch.examples = exs;
    pack_into(&batch, &buf);
    Sparrow__ExampleBatch *out = NULL;
    assert_int_equal(spw_wire_unpack_example_batch(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);
    assert_null(out);
    free(buf.data);
    spw_arena_destroy(arena);
}

static spw_err_t unpack_push(const Sparrow__PushRequest *push, spw_arena_t *arena)
{
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = (Sparrow__PushRequest *)push;
    struct spw_wire_buf buf = {0};
    pack_into(&req, &buf);
    Sparrow__Request *out = NULL;
    spw_err_t rc = spw_wire_unpack_request(buf.data, buf.len, MAX_FRAME, arena, &out);
    free(buf.data);
    assert_true(rc == SPW_OK ? out != NULL : out == NULL);
    return rc;
}

static void test_wire_request_rejects_bad_push(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__PushRequest push = push_msg(3, 4, 0);
    assert_int_equal(unpack_push(&push, arena), SPW_OK);

    push = push_msg(3, 4, 0);
    push.keys.len = 23; /* not a multiple of 8 */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(3, 4, 0);
    push.grads.len -= 4; /* one float short */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(3, 4, 0);
    push.fp16 = 1; /* f32-sized grads claimed as f16 */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(3, 4, 1);
    push.fp16 = 0; /* f16-sized grads claimed as f32 */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(3, 4, 0);
    push.versions.len = 8; /* two versions for three keys */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(3, 4, 0);
    push.has_versions = 0; /* versions absent */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(0, 4, 0);
    push.dim = 0; /* no width */
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);

    push = push_msg(0, 4, 0);
    push.dim = SPW_WIRE_MAX_DIM + 1;
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
    push.dim = SPW_WIRE_MAX_DIM; /* widest allowed, no rows */
    assert_int_equal(unpack_push(&push, arena), SPW_OK);

    /* A dim that would overflow n * dim * 4 in 32 bits is refused, not wrapped. */
    push = push_msg(1, 4, 0);
    push.dim = 0x40000001u;
    push.grads.len = 4;
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
    spw_arena_destroy(arena);
}

/* PushRequest.pulled (delay compensation): absent, or exactly as long as grads (n × dim × 4, or
 * × 2 when fp16); anything else is refused by the decoder. */
static void test_wire_request_push_pulled(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    static uint8_t room[256]; /* backs the wrong lengths below */
    for (int fp16 = 0; fp16 <= 1; fp16++) {
        size_t es = fp16 ? 2 : 4;
        Sparrow__PushRequest push = push_msg(3, 4, fp16);
        push.has_pulled = 1;
        memcpy(room, fp16 ? (const void *)halves16 : values16, 3 * 4 * es);
        push.pulled = bin(room, 3 * 4 * es);
        assert_int_equal(unpack_push(&push, arena), SPW_OK);

        Sparrow__Request req = SPARROW__REQUEST__INIT;
        req.body_case = SPARROW__REQUEST__BODY_PUSH;
        req.push = &push;
        Sparrow__Request *out = request_round_trip(&req, arena);
        assert_int_equal(out->push->pulled.len, 3 * 4 * es);
        assert_memory_equal(out->push->pulled.data, fp16 ? (const void *)halves16 : values16,
                            3 * 4 * es);
        if (!fp16) {
            const float *pulled;
            assert_int_equal(spw_wire_block_f32(&out->push->pulled, 12, &pulled), SPW_OK);
            assert_memory_equal(pulled, values16, 12 * sizeof(float));
        }

        push.pulled.len = 3 * 4 * es - es; /* one value short */
        assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
        push.pulled.len = 3 * 4 * es + es; /* one value too many */
        assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
        push.pulled.len = 3 * 4 * (fp16 ? 4 : 2); /* the other precision's length */
        assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
        push.pulled.len = 1;
        assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
        push.pulled.len = 0; /* present but empty: the same as absent */
        assert_int_equal(unpack_push(&push, arena), SPW_OK);
    }
    /* no rows: only an empty pulled block */
    Sparrow__PushRequest push = push_msg(0, 4, 0);
    push.has_pulled = 1;
    push.pulled = bin(values16, 16);
    assert_int_equal(unpack_push(&push, arena), SPW_ERR_INVALID);
    spw_arena_destroy(arena);
}

static void test_wire_request_rejects_bad_pull(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__PullRequest pull = SPARROW__PULL_REQUEST__INIT;
    pull.has_keys = 1;
    pull.keys = bin(keys4, 12);
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_PULL;
    req.pull = &pull;
    pack_into(&req, &buf);
    Sparrow__Request *out = NULL;
    assert_int_equal(spw_wire_unpack_request(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);
    pull.keys.len = 16;
    pack_into(&req, &buf);
    assert_int_equal(spw_wire_unpack_request(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_wire_request_without_body_decodes(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = 1;
    req.version = 9; /* a future version: the receiver answers VERSION, so it must decode */
    req.has_request_id = 1;
    req.request_id = 4;
    pack_into(&req, &buf);
    Sparrow__Request *out = NULL;
    assert_int_equal(spw_wire_unpack_request(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    assert_int_equal(out->body_case, SPARROW__REQUEST__BODY__NOT_SET);
    assert_int_equal(out->version, 9);
    assert_int_equal(out->request_id, 4);

    /* A body field this build does not know (number 99) is kept as unknown, not an error. */
    static const uint8_t future[] = {0x08, 0x02, 0x10, 0x05, 0x9a, 0x06, 0x01, 0x00};
    assert_int_equal(spw_wire_unpack_request(future, sizeof(future), MAX_FRAME, arena, &out),
                     SPW_OK);
    assert_int_equal(out->version, 2);
    assert_int_equal(out->body_case, SPARROW__REQUEST__BODY__NOT_SET);
    free(buf.data);
    spw_arena_destroy(arena);
}

static spw_err_t unpack_pull_reply(const Sparrow__PullReply *pull, spw_arena_t *arena)
{
    Sparrow__Reply reply = SPARROW__REPLY__INIT;
    reply.body_case = SPARROW__REPLY__BODY_PULL;
    reply.pull = (Sparrow__PullReply *)pull;
    struct spw_wire_buf buf = {0};
    pack_into(&reply, &buf);
    Sparrow__Reply *out = NULL;
    spw_err_t rc = spw_wire_unpack_reply(buf.data, buf.len, MAX_FRAME, arena, &out);
    free(buf.data);
    return rc;
}

static void test_wire_reply_rejects_bad_pull(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__PullReply pull = pull_reply_msg(2, 4);
    assert_int_equal(unpack_pull_reply(&pull, arena), SPW_OK);
    pull.values.len = 2 * 4 * 4 - 4; /* one value short */
    assert_int_equal(unpack_pull_reply(&pull, arena), SPW_ERR_INVALID);
    pull = pull_reply_msg(2, 4);
    pull.versions.len = 6; /* not a multiple of 4 */
    assert_int_equal(unpack_pull_reply(&pull, arena), SPW_ERR_INVALID);
    pull = pull_reply_msg(2, 4);
    pull.versions.len = 12; /* three versions, two rows of values */
    assert_int_equal(unpack_pull_reply(&pull, arena), SPW_ERR_INVALID);
    pull = pull_reply_msg(0, 4);
    pull.dim = 0;
    assert_int_equal(unpack_pull_reply(&pull, arena), SPW_ERR_INVALID);
    spw_arena_destroy(arena);
}

static spw_err_t unpack_update(const Sparrow__ModelUpdate *up, spw_arena_t *arena)
{
    struct spw_wire_buf buf = {0};
    pack_into(up, &buf);
    Sparrow__ModelUpdate *out = NULL;
    spw_err_t rc = spw_wire_unpack_model_update(buf.data, buf.len, MAX_FRAME, arena, &out);
    free(buf.data);
    return rc;
}

static void test_wire_model_update_rejects_bad_weights(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__ModelUpdate up = SPARROW__MODEL_UPDATE__INIT;
    up.has_key = 1;
    up.key = 1;
    up.has_weights = 1;
    up.weights = bin(values16, 6); /* not a multiple of 4 */
    assert_int_equal(unpack_update(&up, arena), SPW_ERR_INVALID);
    up.weights.len = 0; /* neither weights nor a tombstone */
    assert_int_equal(unpack_update(&up, arena), SPW_ERR_INVALID);
    up.weights.len = 8;
    up.has_tombstone = 1;
    up.tombstone = 1; /* a tombstone with weights */
    assert_int_equal(unpack_update(&up, arena), SPW_ERR_INVALID);
    up.tombstone = 0;
    assert_int_equal(unpack_update(&up, arena), SPW_OK);

    /* Wider than SPW_WIRE_MAX_DIM floats. */
    size_t wide_len = ((size_t)SPW_WIRE_MAX_DIM + 1) * 4;
    uint8_t *wide = calloc(1, wide_len);
    assert_non_null(wide);
    up.weights = bin(wide, wide_len);
    assert_int_equal(unpack_update(&up, arena), SPW_ERR_INVALID);
    up.weights.len -= 4;
    assert_int_equal(unpack_update(&up, arena), SPW_OK);
    free(wide);
    spw_arena_destroy(arena);
}

static spw_err_t unpack_manifest(const Sparrow__CheckpointManifest *m, spw_arena_t *arena)
{
    struct spw_wire_buf buf = {0};
    pack_into(m, &buf);
    Sparrow__CheckpointManifest *out = NULL;
    spw_err_t rc = spw_wire_unpack_manifest(buf.data, buf.len, MAX_FRAME, arena, &out);
    free(buf.data);
    return rc;
}

static void test_wire_manifest_rejects_bad_shards(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    Sparrow__CheckpointManifest m = manifest_msg();
    assert_int_equal(unpack_manifest(&m, arena), SPW_OK);

    m.shard_count = 4; /* four shards, three entries */
    assert_int_equal(unpack_manifest(&m, arena), SPW_ERR_INVALID);

    m = manifest_msg();
    shard_cps[1].shard = 2; /* shard 2 twice, shard 0 missing */
    assert_int_equal(unpack_manifest(&m, arena), SPW_ERR_INVALID);

    m = manifest_msg();
    shard_cps[1].shard = 3; /* out of range */
    assert_int_equal(unpack_manifest(&m, arena), SPW_ERR_INVALID);

    m = manifest_msg();
    m.has_shard_count = 0; /* no shards at all */
    m.shard_count = 0;
    m.n_shards = 0;
    assert_int_equal(unpack_manifest(&m, arena), SPW_ERR_INVALID);

    m = manifest_msg();
    m.dim = 0;
    assert_int_equal(unpack_manifest(&m, arena), SPW_ERR_INVALID);

    m = manifest_msg();
    offset_b.partition = -1;
    assert_int_equal(unpack_manifest(&m, arena), SPW_ERR_INVALID);
    init_offsets();
    spw_arena_destroy(arena);
}

static void test_wire_coord_rejects_negative_partition(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    init_offsets();
    offset_a.partition = -3;
    Sparrow__CheckpointReport rep = SPARROW__CHECKPOINT_REPORT__INIT;
    rep.n_offsets = 2;
    rep.offsets = offsets2;
    Sparrow__CoordMessage msg = SPARROW__COORD_MESSAGE__INIT;
    msg.body_case = SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT;
    msg.checkpoint_report = &rep;
    struct spw_wire_buf buf = {0};
    pack_into(&msg, &buf);
    Sparrow__CoordMessage *out = NULL;
    assert_int_equal(spw_wire_unpack_coord(buf.data, buf.len, MAX_FRAME, arena, &out),
                     SPW_ERR_INVALID);
    init_offsets();
    pack_into(&msg, &buf);
    assert_int_equal(spw_wire_unpack_coord(buf.data, buf.len, MAX_FRAME, arena, &out), SPW_OK);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* ---- sizes and broken input ---- */

static void test_wire_too_big_rejected_before_decoding(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Example ex = example_msg();
    pack_into(&ex, &buf);
    Sparrow__Example *ex_out = NULL;
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, buf.len - 1, arena, &ex_out),
                     SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_example(buf.data, buf.len, buf.len, arena, &ex_out), SPW_OK);
    spw_arena_reset(arena);

    /* Garbage above the limit is TOO_BIG, not INVALID, and leaves the arena untouched: nothing
     * was decoded. */
    static uint8_t garbage[64];
    memset(garbage, 0xff, sizeof(garbage));
    Sparrow__Request *req = NULL;
    Sparrow__Reply *reply = NULL;
    Sparrow__CoordMessage *coord = NULL;
    Sparrow__ModelUpdate *up = NULL;
    Sparrow__CheckpointManifest *m = NULL;
    Sparrow__ExampleBatch *batch = NULL;
    assert_int_equal(spw_wire_unpack_example(garbage, 64, 63, arena, &ex_out), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_example_batch(garbage, 64, 63, arena, &batch),
                     SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_request(garbage, 64, 63, arena, &req), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_reply(garbage, 64, 63, arena, &reply), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_coord(garbage, 64, 63, arena, &coord), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_model_update(garbage, 64, 63, arena, &up), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_unpack_manifest(garbage, 64, 63, arena, &m), SPW_ERR_TOO_BIG);
    assert_int_equal(spw_arena_used(arena), 0);
    /* The hard ceiling holds whatever max_len says (the data is never read). */
    assert_int_equal(spw_wire_unpack_example(garbage, (size_t)SPW_WIRE_HARD_MAX_FRAME + 1, SIZE_MAX,
                                             arena, &ex_out),
                     SPW_ERR_TOO_BIG);
    assert_int_equal(spw_arena_used(arena), 0);
    free(buf.data);
    spw_arena_destroy(arena);
}

static void test_wire_truncated_and_garbage_rejected(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    Sparrow__PushRequest push = push_msg(4, 4, 0);
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = &push;
    pack_into(&req, &buf);
    Sparrow__Request *out = NULL;
    /* Every proper prefix cuts the push submessage (the only top-level field), so each must
     * fail, whether as undecodable or as inconsistent. */
    for (size_t len = 1; len < buf.len; len++) {
        spw_arena_reset(arena);
        assert_int_equal(spw_wire_unpack_request(buf.data, len, MAX_FRAME, arena, &out),
                         SPW_ERR_INVALID);
    }
    assert_null(out);

    static const uint8_t garbage[][8] = {
        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, /* endless varint tag */
        {0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* field 1, group start */
        {0x0f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* wire type 7 */
        {0x52, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* pull with 127 bytes, 6 present */
        {0x0d, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00}, /* version as fixed32 */
        {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* field number 0 */
    };
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        assert_int_equal(spw_wire_unpack_request(garbage[i], 8, MAX_FRAME, arena, &out),
                         SPW_ERR_INVALID);
        Sparrow__Example *ex = NULL;
        assert_int_equal(spw_wire_unpack_example(garbage[i], 8, MAX_FRAME, arena, &ex),
                         SPW_ERR_INVALID);
    }
    /* Example keys are packed fixed64: a 5-byte packed run is undecodable. */
    static const uint8_t bad_keys[] = {0x2a, 0x05, 1, 2, 3, 4, 5};
    Sparrow__Example *ex = NULL;
    assert_int_equal(spw_wire_unpack_example(bad_keys, sizeof(bad_keys), MAX_FRAME, arena, &ex),
                     SPW_ERR_INVALID);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* Found by fuzzing: protobuf-c keeps a padded tag of field number 0 as an unknown field, which
 * packs back in a form it then refuses. */
static void test_wire_field_number_zero_rejected(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    static const uint8_t top[] = {0x80, 0x00, 0x60};
    Sparrow__Example *ex = NULL;
    assert_int_equal(spw_wire_unpack_example(top, sizeof(top), MAX_FRAME, arena, &ex),
                     SPW_ERR_INVALID);
    /* The same inside a submessage (a pull body), and inside a repeated one (a batch). */
    static const uint8_t nested[] = {0x52, 0x03, 0x80, 0x00, 0x00};
    Sparrow__Request *req = NULL;
    assert_int_equal(spw_wire_unpack_request(nested, sizeof(nested), MAX_FRAME, arena, &req),
                     SPW_ERR_INVALID);
    static const uint8_t in_batch[] = {0x0a, 0x00, 0x0a, 0x03, 0x80, 0x00, 0x00};
    Sparrow__ExampleBatch *batch = NULL;
    assert_int_equal(
        spw_wire_unpack_example_batch(in_batch, sizeof(in_batch), MAX_FRAME, arena, &batch),
        SPW_ERR_INVALID);
    /* A field number past 2^29-1 (a five-byte tag naming field 2^30). */
    static const uint8_t past_max[] = {0x80, 0x80, 0x80, 0x80, 0x20, 0x00};
    assert_int_equal(spw_wire_unpack_example(past_max, sizeof(past_max), MAX_FRAME, arena, &ex),
                     SPW_ERR_INVALID);
    /* Unknown fields with real numbers stay welcome, nested too. */
    static const uint8_t nested_ok[] = {0x52, 0x03, 0xf8, 0x01, 0x05};
    assert_int_equal(spw_wire_unpack_request(nested_ok, sizeof(nested_ok), MAX_FRAME, arena, &req),
                     SPW_OK);
    assert_int_equal(req->pull->base.n_unknown_fields, 1);
    assert_int_equal(req->pull->base.unknown_fields[0].tag, 31);
    spw_arena_destroy(arena);
}

static void test_wire_arena_budget_is_nomem(void **state)
{
    (void)state;
    struct spw_wire_buf buf = {0};
    Sparrow__Example ex[8];
    Sparrow__Example *exs[8];
    for (int i = 0; i < 8; i++) {
        ex[i] = example_msg();
        exs[i] = &ex[i];
    }
    Sparrow__ExampleBatch batch = SPARROW__EXAMPLE_BATCH__INIT;
    batch.n_examples = 8;
    batch.examples = exs;
    pack_into(&batch, &buf);
    spw_arena_t *small = spw_arena_new(256, 512);
    assert_non_null(small);
    Sparrow__ExampleBatch *out = NULL;
    assert_int_equal(spw_wire_unpack_example_batch(buf.data, buf.len, MAX_FRAME, small, &out),
                     SPW_ERR_NOMEM);
    assert_null(out);
    spw_arena_destroy(small);
    free(buf.data);
}

/* ---- varints and length-delimited streams ---- */

static void test_wire_varint_prefix_edges(void **state)
{
    (void)state;
    size_t msg_len = 0, prefix_len = 0;
    static const uint8_t zero[] = {0x00};
    assert_int_equal(spw_wire_read_varint_prefix(zero, 0, 100, &msg_len, &prefix_len), SPW_ERR_EOF);
    assert_int_equal(spw_wire_read_varint_prefix(zero, 1, 100, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(msg_len, 0);
    assert_int_equal(prefix_len, 1);

    static const uint8_t v127[] = {0x7f, 0xaa};
    assert_int_equal(spw_wire_read_varint_prefix(v127, 2, 127, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(msg_len, 127);
    assert_int_equal(prefix_len, 1);
    msg_len = prefix_len = 0;
    assert_int_equal(spw_wire_read_varint_prefix(v127, 2, 126, &msg_len, &prefix_len),
                     SPW_ERR_TOO_BIG);
    assert_int_equal(msg_len, 127); /* still reported, so a caller may skip it */
    assert_int_equal(prefix_len, 1);

    static const uint8_t v300[] = {0xac, 0x02};
    assert_int_equal(spw_wire_read_varint_prefix(v300, 2, 1000, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(msg_len, 300);
    assert_int_equal(prefix_len, 2);
    /* Truncated: the continuation bit promises a byte that is not there. */
    assert_int_equal(spw_wire_read_varint_prefix(v300, 1, 1000, &msg_len, &prefix_len),
                     SPW_ERR_INVALID);

    /* Non-canonical zero in two bytes is still a valid varint. */
    static const uint8_t zero2[] = {0x80, 0x00};
    assert_int_equal(spw_wire_read_varint_prefix(zero2, 2, 1, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(msg_len, 0);
    assert_int_equal(prefix_len, 2);

    /* UINT64_MAX takes exactly 10 bytes. */
    static const uint8_t max10[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_int_equal(spw_wire_read_varint_prefix(max10, 10, SIZE_MAX, &msg_len, &prefix_len),
                     SPW_OK);
    assert_true(msg_len == SIZE_MAX);
    assert_int_equal(prefix_len, 10);
    assert_int_equal(spw_wire_read_varint_prefix(max10, 10, MAX_FRAME, &msg_len, &prefix_len),
                     SPW_ERR_TOO_BIG);
    assert_int_equal(spw_wire_read_varint_prefix(max10, 9, SIZE_MAX, &msg_len, &prefix_len),
                     SPW_ERR_INVALID);

    /* A 10th byte above 1 overflows 64 bits. */
    static const uint8_t over[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    assert_int_equal(spw_wire_read_varint_prefix(over, 10, SIZE_MAX, &msg_len, &prefix_len),
                     SPW_ERR_INVALID);
    /* An 11-byte varint is too long even when its value would fit. */
    static const uint8_t long11[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                     0x80, 0x80, 0x80, 0x80, 0x00};
    assert_int_equal(spw_wire_read_varint_prefix(long11, 11, SIZE_MAX, &msg_len, &prefix_len),
                     SPW_ERR_INVALID);
    /* Ten bytes ending in 0x00 or 0x01 are fine (bit 63 only). */
    static const uint8_t zero10[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    assert_int_equal(spw_wire_read_varint_prefix(zero10, 10, 5, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(msg_len, 0);
    assert_int_equal(prefix_len, 10);
}

static void test_wire_pack_delimited_prefix(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    Sparrow__Example ex = example_msg();
    size_t size = sparrow__example__get_packed_size(&ex);
    assert_int_equal(spw_wire_pack_delimited(&ex.base, &buf), SPW_OK);
    /* Two messages back to back, the second after the first. */
    Sparrow__ModelUpdate up = SPARROW__MODEL_UPDATE__INIT;
    up.has_key = 1;
    up.has_weights = 1;
    up.weights = bin(values16, 64); /* 64 bytes: a 1-byte prefix for a 75-byte message */
    assert_int_equal(spw_wire_pack_delimited(&up.base, &buf), SPW_OK);

    size_t msg_len, prefix_len;
    assert_int_equal(
        spw_wire_read_varint_prefix(buf.data, buf.len, MAX_FRAME, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(msg_len, size);
    Sparrow__Example *out = NULL;
    assert_int_equal(
        spw_wire_unpack_example(buf.data + prefix_len, msg_len, MAX_FRAME, arena, &out), SPW_OK);
    assert_memory_equal(out->keys, ex_keys, sizeof(ex_keys));
    size_t off = prefix_len + msg_len;
    assert_int_equal(spw_wire_read_varint_prefix(buf.data + off, buf.len - off, MAX_FRAME, &msg_len,
                                                 &prefix_len),
                     SPW_OK);
    Sparrow__ModelUpdate *up_out = NULL;
    assert_int_equal(spw_wire_unpack_model_update(buf.data + off + prefix_len, msg_len, MAX_FRAME,
                                                  arena, &up_out),
                     SPW_OK);
    assert_int_equal(up_out->weights.len, 64);
    assert_int_equal(off + prefix_len + msg_len, buf.len);

    /* A message above 127 bytes takes a 2-byte prefix. */
    buf.len = 0;
    up.weights = bin(values16, 64);
    Sparrow__ModelUpdate big = up;
    uint8_t wide[400] = {0};
    big.weights = bin(wide, sizeof(wide));
    assert_int_equal(spw_wire_pack_delimited(&big.base, &buf), SPW_OK);
    assert_int_equal(
        spw_wire_read_varint_prefix(buf.data, buf.len, MAX_FRAME, &msg_len, &prefix_len), SPW_OK);
    assert_int_equal(prefix_len, 2);
    assert_int_equal(prefix_len + msg_len, buf.len);
    free(buf.data);
    spw_arena_destroy(arena);
}

/* A tmpfile holding bytes, rewound. */
static FILE *stream_of(const uint8_t *data, size_t len)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    rewind(f);
    return f;
}

static void test_wire_read_delimited_stream(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf out = {0}, in = {0};
    Sparrow__Example ex = example_msg();
    for (int i = 0; i < 3; i++) {
        ex.id = (uint64_t)i;
        assert_int_equal(spw_wire_pack_delimited(&ex.base, &in), SPW_OK);
    }
    Sparrow__Example empty = SPARROW__EXAMPLE__INIT; /* a zero-length message */
    assert_int_equal(spw_wire_pack_delimited(&empty.base, &in), SPW_OK);

    FILE *f = stream_of(in.data, in.len);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_OK);
        Sparrow__Example *got = NULL;
        assert_int_equal(spw_wire_unpack_example(out.data, out.len, MAX_FRAME, arena, &got),
                         SPW_OK);
        assert_int_equal(got->id, (uint64_t)i);
    }
    size_t cap = out.cap;
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_OK);
    assert_int_equal(out.len, 0);
    assert_int_equal(out.cap, cap); /* the buffer is reused, not shrunk */
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_EOF);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_EOF);
    fclose(f);

    f = stream_of(NULL, 0); /* an empty file is a clean end at once */
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_EOF);
    fclose(f);

    /* A body larger than the first read step arrives whole. */
    size_t big_len = 200000;
    uint8_t *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (uint8_t)(i * 7);
    Sparrow__ModelUpdate up = SPARROW__MODEL_UPDATE__INIT;
    up.has_weights = 1;
    up.weights = bin(big, big_len);
    in.len = 0;
    assert_int_equal(spw_wire_pack_delimited(&up.base, &in), SPW_OK);
    f = stream_of(in.data, in.len);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_OK);
    assert_int_equal(out.len, in.len - 3); /* 3-byte prefix */
    assert_memory_equal(out.data, in.data + 3, out.len);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_EOF);
    fclose(f);
    free(big);
    free(in.data);
    free(out.data);
    spw_arena_destroy(arena);
}

static void test_wire_read_delimited_truncated_body(void **state)
{
    (void)state;
    struct spw_wire_buf out = {0}, in = {0};
    Sparrow__Example ex = example_msg();
    assert_int_equal(spw_wire_pack_delimited(&ex.base, &in), SPW_OK);
    assert_int_equal(spw_wire_pack_delimited(&ex.base, &in), SPW_OK);
    FILE *f = stream_of(in.data, in.len - 1);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_OK);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_INVALID);
    fclose(f);

    /* A prefix that promises a megabyte over three bytes of body. */
    static const uint8_t liar[] = {0x80, 0x80, 0x40, 1, 2, 3};
    f = stream_of(liar, sizeof(liar));
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_INVALID);
    assert_true(out.cap < (1u << 20)); /* memory followed the bytes, not the claim */
    fclose(f);
    free(in.data);
    free(out.data);
}

static void test_wire_read_delimited_truncated_prefix(void **state)
{
    (void)state;
    struct spw_wire_buf out = {0};
    static const uint8_t cut[] = {0x05, 1, 2, 3, 4, 5, 0xac}; /* one message, half a prefix */
    FILE *f = stream_of(cut, sizeof(cut));
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_OK);
    assert_int_equal(out.len, 5);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_INVALID);
    fclose(f);

    static const uint8_t overlong[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                       0x80, 0x80, 0x80, 0x80, 0x00};
    f = stream_of(overlong, sizeof(overlong));
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_INVALID);
    fclose(f);
    free(out.data);
}

static void test_wire_read_delimited_too_big(void **state)
{
    (void)state;
    struct spw_wire_buf out = {0};
    static const uint8_t big[] = {0x81, 0x08, 0x00}; /* 1025 bytes claimed */
    FILE *f = stream_of(big, sizeof(big));
    assert_int_equal(spw_wire_read_delimited(f, 1024, &out), SPW_ERR_TOO_BIG);
    assert_null(out.data); /* refused before any allocation */
    fclose(f);
}

static void test_wire_read_delimited_io_error(void **state)
{
    (void)state;
    struct spw_wire_buf out = {0};
    FILE *f = fopen("/dev/null", "wb"); /* reading a write-only stream fails */
    assert_non_null(f);
    assert_int_equal(spw_wire_read_delimited(f, MAX_FRAME, &out), SPW_ERR_IO);
    fclose(f);
}

/* ---- blocks ---- */

static void test_wire_block_views(void **state)
{
    (void)state;
    _Alignas(16) static uint8_t raw[64];
    for (size_t i = 0; i < sizeof(raw); i++)
        raw[i] = (uint8_t)i;
    ProtobufCBinaryData block = bin(raw, 32);
    const uint64_t *u64;
    assert_int_equal(spw_wire_block_u64(&block, 4, &u64), SPW_OK);
    assert_ptr_equal(u64, raw); /* a view, not a copy */
    assert_true(u64[1] == 0x0f0e0d0c0b0a0908ull);
    const uint32_t *u32;
    assert_int_equal(spw_wire_block_u32(&block, 8, &u32), SPW_OK);
    assert_int_equal(u32[1], 0x07060504u);
    const uint16_t *u16;
    assert_int_equal(spw_wire_block_u16(&block, 16, &u16), SPW_OK);
    assert_int_equal(u16[1], 0x0302);
    const float *f32;
    assert_int_equal(spw_wire_block_f32(&block, 8, &f32), SPW_OK);
    assert_int_equal(f32_bits(f32[0]), 0x03020100u);

    /* Wrong element counts. */
    assert_int_equal(spw_wire_block_u64(&block, 3, &u64), SPW_ERR_INVALID);
    assert_int_equal(spw_wire_block_u32(&block, 9, &u32), SPW_ERR_INVALID);
    assert_int_equal(spw_wire_block_f32(&block, 0, &f32), SPW_ERR_INVALID);
    assert_int_equal(spw_wire_block_u64(&block, SIZE_MAX / 4, &u64), SPW_ERR_INVALID);

    /* An empty block views a non-NULL address, so that memcpy of 0 bytes from it is defined. */
    ProtobufCBinaryData empty = {0, NULL};
    u64 = NULL;
    assert_int_equal(spw_wire_block_u64(&empty, 0, &u64), SPW_OK);
    assert_non_null(u64);
    assert_int_equal(spw_wire_block_u64(&empty, 1, &u64), SPW_ERR_INVALID);
}

static void test_wire_block_view_rejects_misaligned(void **state)
{
    (void)state;
    _Alignas(16) static uint8_t raw[40];
    ProtobufCBinaryData block = bin(raw + 4, 32);
    const uint64_t *u64 = NULL;
    assert_int_equal(spw_wire_block_u64(&block, 4, &u64), SPW_ERR_INVALID);
    assert_null(u64);
    const uint32_t *u32;
    assert_int_equal(spw_wire_block_u32(&block, 8, &u32), SPW_OK); /* 4-aligned is enough */
    block = bin(raw + 1, 32);
    assert_int_equal(spw_wire_block_u32(&block, 8, &u32), SPW_ERR_INVALID);
    const float *f32;
    assert_int_equal(spw_wire_block_f32(&block, 8, &f32), SPW_ERR_INVALID);
    const uint16_t *u16;
    assert_int_equal(spw_wire_block_u16(&block, 16, &u16), SPW_ERR_INVALID);
    /* The copy takes any alignment. */
    uint64_t copy[4];
    raw[1] = 0x2a;
    assert_int_equal(spw_wire_block_copy(&block, 8, 4, copy), SPW_OK);
    assert_true(copy[0] == 0x2a);
}

static void test_wire_block_count_and_copy(void **state)
{
    (void)state;
    ProtobufCBinaryData block = bin(keys4, 32);
    size_t n = 0;
    assert_int_equal(spw_wire_block_count(&block, 8, &n), SPW_OK);
    assert_int_equal(n, 4);
    assert_int_equal(spw_wire_block_count(&block, 4, &n), SPW_OK);
    assert_int_equal(n, 8);
    block.len = 30;
    assert_int_equal(spw_wire_block_count(&block, 8, &n), SPW_ERR_INVALID);
    assert_int_equal(spw_wire_block_count(&block, 2, &n), SPW_OK);
    assert_int_equal(n, 15);

    block.len = 32;
    uint64_t copy[4] = {0};
    assert_int_equal(spw_wire_block_copy(&block, 8, 3, copy), SPW_ERR_INVALID);
    assert_int_equal(spw_wire_block_copy(&block, 8, 4, copy), SPW_OK);
    assert_memory_equal(copy, keys4, sizeof(keys4));
    ProtobufCBinaryData empty = {0, NULL};
    assert_int_equal(spw_wire_block_copy(&empty, 8, 0, copy), SPW_OK);
}

static void test_wire_blocks_aligned_after_unpack(void **state)
{
    (void)state;
    spw_arena_t *arena = new_arena();
    struct spw_wire_buf buf = {0};
    /* Odd block sizes (3 keys: 24, 12 and 3*3*2 = 18 bytes) so that packing them back to back
     * in the arena would misalign the next one if the allocator did not round up. */
    Sparrow__PushRequest push = push_msg(3, 3, 1);
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = &push;
    pack_into(&req, &buf);
    for (int round = 0; round < 3; round++) {
        Sparrow__Request *out = NULL;
        assert_int_equal(spw_wire_unpack_request(buf.data, buf.len, MAX_FRAME, arena, &out),
                         SPW_OK);
        assert_int_equal((uintptr_t)out->push->keys.data % 16, 0);
        assert_int_equal((uintptr_t)out->push->versions.data % 16, 0);
        assert_int_equal((uintptr_t)out->push->grads.data % 16, 0);
        const uint64_t *keys;
        const uint32_t *versions;
        const uint16_t *grads;
        assert_int_equal(spw_wire_block_u64(&out->push->keys, 3, &keys), SPW_OK);
        assert_int_equal(spw_wire_block_u32(&out->push->versions, 3, &versions), SPW_OK);
        assert_int_equal(spw_wire_block_u16(&out->push->grads, 9, &grads), SPW_OK);
        assert_true(keys[2] == keys4[2]);
        assert_int_equal(versions[2], versions4[2]);
        assert_int_equal(grads[8], halves16[8]);
    }
    free(buf.data);
    spw_arena_destroy(arena);
}

/* ---- fp16 ---- */

static void test_wire_f16_known_values(void **state)
{
    (void)state;
    assert_int_equal(spw_wire_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(spw_wire_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(spw_wire_f32_to_f16(0.5f), 0x3800);
    assert_int_equal(spw_wire_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(spw_wire_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(spw_wire_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(spw_wire_f32_to_f16(-65504.0f), 0xfbff);
    assert_int_equal(spw_wire_f32_to_f16(0.333333343f), 0x3555);
    assert_int_equal(spw_wire_f32_to_f16(0x1p-14f), 0x0400); /* smallest normal */

    assert_true(spw_wire_f16_to_f32(0x3c00) == 1.0f);
    assert_true(spw_wire_f16_to_f32(0xc000) == -2.0f);
    assert_true(spw_wire_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(spw_wire_f16_to_f32(0x0400) == 0x1p-14f);
    assert_true(spw_wire_f16_to_f32(0x3555) == 0.333251953125f);
    assert_int_equal(f32_bits(spw_wire_f16_to_f32(0x8000)), 0x80000000u);
    assert_int_equal(f32_bits(spw_wire_f16_to_f32(0x0000)), 0);
}

static void test_wire_f16_round_to_even(void **state)
{
    (void)state;
    /* Halfway between 1.0 (0x3c00, even) and 1+2^-10 (0x3c01): to even. */
    assert_int_equal(spw_wire_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    /* Just above halfway: up. */
    assert_int_equal(spw_wire_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    /* Just below halfway: down. */
    assert_int_equal(spw_wire_f32_to_f16(1.0f + 0x1p-11f - 0x1p-20f), 0x3c00);
    /* Halfway between 0x3c01 (odd) and 0x3c02: up to even. */
    assert_int_equal(spw_wire_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    /* Spacing 2 at 2048: 2049 ties to 2048 (even), 2051 to 2052. */
    assert_int_equal(spw_wire_f32_to_f16(2049.0f), 0x6800);
    assert_int_equal(spw_wire_f32_to_f16(2051.0f), 0x6802);
    /* Rounding carries into the exponent: 2047.5 lies halfway to 2048 from 2047 (odd). */
    assert_int_equal(spw_wire_f32_to_f16(2047.5f), 0x6800);
    /* Around the top: 65519 rounds down to 65504, 65520 (a tie toward the even 65536) and
     * anything bigger to inf. */
    assert_int_equal(spw_wire_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(spw_wire_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(spw_wire_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(spw_wire_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(spw_wire_f32_to_f16(1e6f), 0x7c00);
    assert_int_equal(spw_wire_f32_to_f16(3.4e38f), 0x7c00);
}

static void test_wire_f16_subnormals(void **state)
{
    (void)state;
    assert_int_equal(spw_wire_f32_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(spw_wire_f32_to_f16(-0x1p-24f), 0x8001);
    assert_int_equal(spw_wire_f32_to_f16(1023 * 0x1p-24f), 0x03ff); /* largest subnormal */
    assert_int_equal(spw_wire_f32_to_f16(0x1p-25f), 0x0000);        /* tie, to even zero */
    assert_int_equal(spw_wire_f32_to_f16(-0x1p-25f), 0x8000);
    assert_int_equal(spw_wire_f32_to_f16(0x1.000002p-25f), 0x0001); /* just above the tie */
    assert_int_equal(spw_wire_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* 1.5 ulp ties to 2 */
    assert_int_equal(spw_wire_f32_to_f16(5 * 0x1p-25f), 0x0002);    /* 2.5 ulp ties to 2 */
    assert_int_equal(spw_wire_f32_to_f16(1e-8f), 0x0000);           /* below half the smallest */
    assert_int_equal(spw_wire_f32_to_f16(1e-7f), 0x0002);           /* 1.68 ulp */
    assert_int_equal(spw_wire_f32_to_f16(1e-30f), 0x0000);          /* far below */
    assert_int_equal(spw_wire_f32_to_f16(0x1p-149f), 0x0000);       /* a float subnormal */
    /* The largest subnormal plus half an ulp ties to the even 0x0400, the smallest normal. */
    assert_int_equal(spw_wire_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
    assert_int_equal(spw_wire_f32_to_f16(1022.5f * 0x1p-24f), 0x03fe);

    assert_true(spw_wire_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(spw_wire_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    assert_true(spw_wire_f16_to_f32(0x0200) == 0x1p-15f);
    assert_true(spw_wire_f16_to_f32(0x8001) == -0x1p-24f);
}

static void test_wire_f16_inf_nan(void **state)
{
    (void)state;
    assert_int_equal(spw_wire_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(spw_wire_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t h = spw_wire_f32_to_f16(NAN);
    assert_int_equal(h & 0x7c00, 0x7c00);
    assert_int_not_equal(h & 0x03ff, 0);
    /* A signalling NaN whose payload lies only in the low 13 bits still stays a NaN. */
    h = spw_wire_f32_to_f16(bits_f32(0xff800001u));
    assert_int_equal(h & 0xfc00, 0xfc00);
    assert_int_not_equal(h & 0x03ff, 0);

    assert_true(isinf(spw_wire_f16_to_f32(0x7c00)) && spw_wire_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(spw_wire_f16_to_f32(0xfc00)) && spw_wire_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(spw_wire_f16_to_f32(0x7e00)));
    assert_true(isnan(spw_wire_f16_to_f32(0x7c01)));
    assert_true(isnan(spw_wire_f16_to_f32(0xfe00)));
}

/* Every half converts to a float and back to itself (NaNs to some NaN). */
static void test_wire_f16_all_halves_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = spw_wire_f16_to_f32((uint16_t)h);
        uint16_t back = spw_wire_f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_int_equal(back & 0x7c00, 0x7c00);
            assert_int_not_equal(back & 0x3ff, 0);
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else if (back != h) {
            fail_msg("half 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        }
    }
}

/*
 * Against an independent oracle: the nearest half is the one whose value is closest to f, ties
 * to the even mantissa. Computed here in double by brute force over the two neighbours found by
 * bisection over the ordered finite halves, for floats spread over the whole range.
 */
static uint16_t f16_reference(float f)
{
    if (isnan(f))
        return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0)
        return sign | 0x7c00;
    /* Halves 0x0000..0x7bff are ordered by value; bisect for the largest <= a. */
    uint32_t lo = 0, hi = 0x7bff;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if ((double)spw_wire_f16_to_f32((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7bff)
        return sign | 0x7bff;
    double below = spw_wire_f16_to_f32((uint16_t)lo);
    double above = spw_wire_f16_to_f32((uint16_t)(lo + 1));
    uint32_t pick;
    if (a - below < above - a)
        pick = lo;
    else if (a - below > above - a)
        pick = lo + 1;
    else
        pick = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | pick);
}

static void test_wire_f16_matches_reference(void **state)
{
    (void)state;
    /* A stride through every float bit pattern, plus every float near each half boundary. */
    for (uint64_t x = 0; x <= 0xffffffffull; x += 65521) {
        float f = bits_f32((uint32_t)x);
        if (isnan(f))
            continue;
        uint16_t got = spw_wire_f32_to_f16(f), want = f16_reference(f);
        if (got != want)
            fail_msg("float %a (0x%08x): got 0x%04x want 0x%04x", (double)f, (uint32_t)x, got,
                     want);
    }
    for (uint32_t h = 0; h < 0x7c00; h++) {
        /* The exact midpoint to the next half (as a float: halves have 11 significant bits, so
         * midpoints are exact in 24), and its neighbours one float ulp away. */
        double mid = ((double)spw_wire_f16_to_f32((uint16_t)h) +
                      (h == 0x7bff ? 65536.0 : (double)spw_wire_f16_to_f32((uint16_t)(h + 1)))) /
                     2;
        float m = (float)mid;
        assert_true((double)m == mid);
        const float probes[3] = {nextafterf(m, 0.0f), m, nextafterf(m, INFINITY)};
        for (int i = 0; i < 3; i++) {
            uint16_t got = spw_wire_f32_to_f16(probes[i]), want = f16_reference(probes[i]);
            if (got != want)
                fail_msg("float %a: got 0x%04x want 0x%04x", (double)probes[i], got, want);
        }
    }
#ifdef __FLT16_MAX__
    /* And the compiler's own conversion, where it has _Float16. */
    for (uint64_t x = 0; x <= 0xffffffffull; x += 4099) {
        float f = bits_f32((uint32_t)x);
        if (isnan(f))
            continue;
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, sizeof(want));
        assert_int_equal(spw_wire_f32_to_f16(f), want);
    }
#endif
}

/* Stochastic rounding: every result is one of the two halves around the value (the value itself
 * when it is one), and over many draws the mean half is the value: for normal halves, subnormal
 * ones, a carry into the next binade, both signs. */
static void test_wire_f16_stochastic_unbiased(void **state)
{
    (void)state;
    const float values[] = {1.0f + 0x1p-12f,    /* a quarter step above 1 */
                            -(1.0f + 0x1p-12f), /* the same below -1 */
                            0.1f,               /* 0.1's rounding error, up */
                            2047.9f,            /* between 2047 and 2048: into the next binade */
                            3e-7f,              /* a subnormal half: 5.03 units of 2^-24 */
                            -1e-8f,             /* below half the smallest: 0.17 units */
                            1023.7f * 0x1p-24f, /* the largest subnormal into the smallest normal */
                            60000.3f};          /* near the top */
    enum { DRAWS = 200000 };
    static float src[DRAWS];
    static uint16_t dst[DRAWS];
    uint64_t rng = 12345;
    for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
        const float x = values[v];
        for (size_t i = 0; i < DRAWS; i++)
            src[i] = x;
        spw_wire_f32_to_f16_stochastic_n(src, dst, DRAWS, &rng);
        /* the halves around x: the nearest, and its neighbour on x's other side */
        uint16_t near = spw_wire_f32_to_f16(x);
        float nearf = spw_wire_f16_to_f32(near);
        uint16_t other = fabsf(nearf) > fabsf(x) ? (uint16_t)(near - 1) : (uint16_t)(near + 1);
        float otherf = spw_wire_f16_to_f32(other);
        double lo = fmin(nearf, otherf), hi = fmax(nearf, otherf);
        double sum = 0.0;
        size_t ups = 0;
        for (size_t i = 0; i < DRAWS; i++) {
            assert_true(dst[i] == near || dst[i] == other);
            double h = spw_wire_f16_to_f32(dst[i]);
            sum += h;
            ups += h == hi;
        }
        double p = ((double)x - lo) / (hi - lo); /* the chance of the half above */
        double sd = sqrt(p * (1 - p) / DRAWS);
        double got = (double)ups / DRAWS;
        if (fabs(got - p) > 5 * sd + 1e-9) {
            fprintf(stderr, "value %.9g: the half above %.9g drawn %.5f of the time, want %.5f\n",
                    (double)x, hi, got, p);
            fail();
        }
        /* so the mean is the value, within 5 standard deviations of the draws */
        assert_true(fabs(sum / DRAWS - (double)x) <= 5 * sd * (hi - lo) + 1e-12);
    }
    /* exact halves stay themselves; zero keeps its sign; the top, inf and nan as nearest */
    const float exact[] = {1.0f, -2.0f, 0x1p-24f, 0.0f, -0.0f, 65504.0f, INFINITY, -INFINITY};
    for (size_t v = 0; v < sizeof(exact) / sizeof(exact[0]); v++) {
        uint16_t h;
        spw_wire_f32_to_f16_stochastic_n(&exact[v], &h, 1, &rng);
        assert_int_equal(h, spw_wire_f32_to_f16(exact[v]));
    }
    float nan_in = NAN, big = 1e6f, tiny = 0x1p-70f;
    uint16_t h;
    spw_wire_f32_to_f16_stochastic_n(&nan_in, &h, 1, &rng);
    assert_true(isnan(spw_wire_f16_to_f32(h)));
    spw_wire_f32_to_f16_stochastic_n(&big, &h, 1, &rng);
    assert_int_equal(h, 0x7c00);
    spw_wire_f32_to_f16_stochastic_n(&tiny, &h, 1, &rng);
    assert_int_equal(h, 0x0000);
    /* the same state and values give the same halves */
    uint64_t a = 7, b = 7;
    uint16_t ha[64], hb[64];
    for (size_t i = 0; i < 64; i++)
        src[i] = 0.1f * (float)i;
    spw_wire_f32_to_f16_stochastic_n(src, ha, 64, &a);
    spw_wire_f32_to_f16_stochastic_n(src, hb, 64, &b);
    assert_memory_equal(ha, hb, sizeof(ha));
    assert_true(a == b && a != 7);
}

static void test_wire_f16_bulk_matches_scalar(void **state)
{
    (void)state;
    float src[64];
    uint16_t half[64];
    float back[64];
    for (int i = 0; i < 64; i++)
        src[i] = (float)(i - 32) * 0.37f + (i % 5 == 0 ? 1e-6f : 0.0f);
    src[3] = INFINITY;
    src[4] = 70000.0f;
    spw_wire_f32_to_f16_n(src, half, 64);
    spw_wire_f16_to_f32_n(half, back, 64);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(half[i], spw_wire_f32_to_f16(src[i]));
        assert_int_equal(f32_bits(back[i]), f32_bits(spw_wire_f16_to_f32(half[i])));
    }
    spw_wire_f32_to_f16_n(src, half, 0); /* n == 0 touches nothing */
    /* every half through the array conversion (vectorised where the CPU has F16C) equals the
     * scalar one, bit for bit (NaN for NaN: a signalling NaN may come out quiet) */
    static uint16_t all[65536 + 3];
    static float out[65536 + 3];
    for (uint32_t h = 0; h < 65536 + 3; h++)
        all[h] = (uint16_t)h;
    spw_wire_f16_to_f32_n(all, out, 65536 + 3); /* a tail after the last 8 */
    for (uint32_t h = 0; h < 65536 + 3; h++) {
        float want = spw_wire_f16_to_f32(all[h]);
        if (isnan(want))
            assert_true(isnan(out[h]));
        else
            assert_int_equal(f32_bits(out[h]), f32_bits(want));
    }
}

/* ---- corpus writer ---- */

static int write_file(const char *dir, const char *target, const char *name, const void *data,
                      size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/fuzz_wire_%s", dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/fuzz_wire_%s/%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t wrote = len ? fwrite(data, 1, len, f) : 0;
    int rc = (wrote == len && fclose(f) == 0) ? 0 : -1;
    if (wrote != len)
        fclose(f);
    return rc;
}

/* Packs msg and writes it whole as <name>, and cut by a third as <name>-cut. */
static int write_msg(const char *dir, const char *target, const char *name, const void *msg,
                     int also_cut)
{
    struct spw_wire_buf buf = {0};
    if (spw_wire_pack(msg, &buf) != SPW_OK)
        return -1;
    int rc = write_file(dir, target, name, buf.data, buf.len);
    if (rc == 0 && also_cut && buf.len > 2) {
        char cut[256];
        snprintf(cut, sizeof(cut), "%s-cut", name);
        rc = write_file(dir, target, cut, buf.data, buf.len * 2 / 3);
    }
    free(buf.data);
    return rc;
}

static int write_corpus(const char *dir)
{
    int rc = 0;
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0x0b, 0x00, 0x0f};

    /* example */
    Sparrow__Example ex = example_msg();
    rc |= write_msg(dir, "example", "valid-weights", &ex, 1);
    Sparrow__Example ex2 = example_msg();
    ex2.n_weights = 0;
    rc |= write_msg(dir, "example", "valid-unweighted", &ex2, 0);
    Sparrow__Example bad = example_msg();
    bad.n_fields = 2;
    rc |= write_msg(dir, "example", "bad-fields-count", &bad, 0);
    bad = example_msg();
    bad.n_weights = 1;
    rc |= write_msg(dir, "example", "bad-weights-count", &bad, 0);
    rc |= write_file(dir, "example", "garbage", garbage, sizeof(garbage));
    static const uint8_t padded_zero[] = {0x80, 0x00, 0x60}; /* test_wire_field_number_zero_... */
    rc |= write_file(dir, "example", "regress-padded-field-zero", padded_zero, sizeof(padded_zero));

    /* example_batch */
    Sparrow__Example *exs[3] = {&ex, &ex2, &ex};
    Sparrow__ExampleBatch batch = SPARROW__EXAMPLE_BATCH__INIT;
    batch.n_examples = 3;
    batch.examples = exs;
    rc |= write_msg(dir, "example_batch", "valid-three", &batch, 1);
    Sparrow__ExampleBatch empty_batch = SPARROW__EXAMPLE_BATCH__INIT;
    rc |= write_msg(dir, "example_batch", "valid-empty", &empty_batch, 0);
    exs[1] = &bad;
    rc |= write_msg(dir, "example_batch", "bad-example", &batch, 0);
    exs[1] = &ex2;
    rc |= write_file(dir, "example_batch", "garbage", garbage, sizeof(garbage));

    /* request */
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = 1;
    req.version = 1;
    req.has_request_id = 1;
    req.request_id = 42;
    Sparrow__PullRequest pull = SPARROW__PULL_REQUEST__INIT;
    pull.has_keys = 1;
    pull.keys = bin(keys4, 32);
    req.body_case = SPARROW__REQUEST__BODY_PULL;
    req.pull = &pull;
    rc |= write_msg(dir, "request", "valid-pull", &req, 0);
    pull.keys.len = 31;
    rc |= write_msg(dir, "request", "bad-pull-keys", &req, 0);
    Sparrow__PushRequest push = push_msg(4, 4, 0);
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = &push;
    rc |= write_msg(dir, "request", "valid-push-f32", &req, 1);
    push = push_msg(4, 4, 1);
    rc |= write_msg(dir, "request", "valid-push-f16", &req, 0);
    push.grads.len -= 2;
    rc |= write_msg(dir, "request", "bad-push-grads", &req, 0);
    push = push_msg(4, 4, 0);
    push.has_pulled = 1;
    push.pulled = bin(values16, 64);
    rc |= write_msg(dir, "request", "valid-push-pulled-f32", &req, 0);
    push.pulled.len = 32; /* f16-sized pulled values in an f32 push */
    rc |= write_msg(dir, "request", "bad-push-pulled", &req, 0);
    push = push_msg(4, 4, 1);
    push.has_pulled = 1;
    push.pulled = bin(halves16, 32);
    rc |= write_msg(dir, "request", "valid-push-pulled-f16", &req, 0);
    push = push_msg(2, 4, 0);
    push.dim = 0;
    rc |= write_msg(dir, "request", "bad-push-dim", &req, 0);
    Sparrow__StatsRequest stats = SPARROW__STATS_REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_STATS;
    req.stats = &stats;
    rc |= write_msg(dir, "request", "valid-stats", &req, 0);
    Sparrow__CheckpointRequest cp = SPARROW__CHECKPOINT_REQUEST__INIT;
    cp.has_epoch = 1;
    cp.epoch = 3;
    cp.dir = "/var/lib/sparrow/checkpoints";
    req.body_case = SPARROW__REQUEST__BODY_CHECKPOINT;
    req.checkpoint = &cp;
    rc |= write_msg(dir, "request", "valid-checkpoint", &req, 0);
    Sparrow__HealthRequest health = SPARROW__HEALTH_REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_HEALTH;
    req.health = &health;
    rc |= write_msg(dir, "request", "valid-health", &req, 0);
    rc |= write_file(dir, "request", "garbage", garbage, sizeof(garbage));
    static const uint8_t nested_zero[] = {0x52, 0x03, 0x80, 0x00, 0x00};
    rc |= write_file(dir, "request", "regress-nested-field-zero", nested_zero, sizeof(nested_zero));

    /* reply */
    Sparrow__Reply reply = SPARROW__REPLY__INIT;
    reply.has_version = 1;
    reply.version = 1;
    reply.has_request_id = 1;
    reply.request_id = 42;
    Sparrow__PullReply pr = pull_reply_msg(4, 4);
    reply.body_case = SPARROW__REPLY__BODY_PULL;
    reply.pull = &pr;
    rc |= write_msg(dir, "reply", "valid-pull", &reply, 1);
    pr.values.len -= 4;
    rc |= write_msg(dir, "reply", "bad-pull-values", &reply, 0);
    Sparrow__PushAck ack = SPARROW__PUSH_ACK__INIT;
    ack.has_seq = 1;
    ack.seq = 9;
    ack.has_applied = 1;
    ack.applied = 4;
    reply.body_case = SPARROW__REPLY__BODY_PUSH;
    reply.push = &ack;
    rc |= write_msg(dir, "reply", "valid-push-ack", &reply, 0);
    Sparrow__StatsReply sr = SPARROW__STATS_REPLY__INIT;
    sr.has_rows_dram = 1;
    sr.rows_dram = 100;
    reply.body_case = SPARROW__REPLY__BODY_STATS;
    reply.stats = &sr;
    rc |= write_msg(dir, "reply", "valid-stats", &reply, 0);
    Sparrow__CheckpointReply cpr = SPARROW__CHECKPOINT_REPLY__INIT;
    cpr.path = "/x/3/shard-0";
    cpr.checksum = "abcd";
    reply.body_case = SPARROW__REPLY__BODY_CHECKPOINT;
    reply.checkpoint = &cpr;
    rc |= write_msg(dir, "reply", "valid-checkpoint", &reply, 0);
    Sparrow__HealthReply hr = SPARROW__HEALTH_REPLY__INIT;
    hr.has_ready = 1;
    hr.ready = 1;
    hr.state = "ready";
    reply.body_case = SPARROW__REPLY__BODY_HEALTH;
    reply.health = &hr;
    rc |= write_msg(dir, "reply", "valid-health", &reply, 0);
    reply.body_case = SPARROW__REPLY__BODY__NOT_SET;
    reply.has_error = 1;
    reply.error = SPARROW__ERROR_CODE__ERROR_MALFORMED;
    reply.error_message = "bad push";
    rc |= write_msg(dir, "reply", "valid-error", &reply, 0);
    rc |= write_file(dir, "reply", "garbage", garbage, sizeof(garbage));

    /* coord */
    init_offsets();
    Sparrow__CoordMessage coord = SPARROW__COORD_MESSAGE__INIT;
    coord.has_version = 1;
    coord.version = 1;
    Sparrow__Register reg = SPARROW__REGISTER__INIT;
    reg.has_role = 1;
    reg.role = SPARROW__MEMBER_ROLE__ROLE_PSERVER;
    reg.member_id = "pserver-0";
    reg.endpoint = "tcp://127.0.0.1:7100";
    coord.body_case = SPARROW__COORD_MESSAGE__BODY_REGISTER;
    coord.register_ = &reg;
    rc |= write_msg(dir, "coord", "valid-register", &coord, 0);
    Sparrow__Heartbeat hb = SPARROW__HEARTBEAT__INIT;
    hb.member_id = "trainer-0";
    hb.has_step = 1;
    hb.step = 3;
    coord.body_case = SPARROW__COORD_MESSAGE__BODY_HEARTBEAT;
    coord.heartbeat = &hb;
    rc |= write_msg(dir, "coord", "valid-heartbeat", &coord, 0);
    Sparrow__Clock clock = SPARROW__CLOCK__INIT;
    clock.member_id = "trainer-0";
    clock.has_step = 1;
    clock.step = 4;
    coord.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK;
    coord.clock = &clock;
    rc |= write_msg(dir, "coord", "valid-clock", &coord, 0);
    Sparrow__ClockReply cr = SPARROW__CLOCK_REPLY__INIT;
    cr.has_proceed = 1;
    cr.proceed = 1;
    coord.body_case = SPARROW__COORD_MESSAGE__BODY_CLOCK_REPLY;
    coord.clock_reply = &cr;
    rc |= write_msg(dir, "coord", "valid-clock-reply", &coord, 0);
    Sparrow__CheckpointReport rep = SPARROW__CHECKPOINT_REPORT__INIT;
    rep.member_id = "trainer-0";
    rep.has_epoch = 1;
    rep.epoch = 2;
    rep.n_offsets = 2;
    rep.offsets = offsets2;
    coord.body_case = SPARROW__COORD_MESSAGE__BODY_CHECKPOINT_REPORT;
    coord.checkpoint_report = &rep;
    rc |= write_msg(dir, "coord", "valid-report", &coord, 1);
    offset_a.partition = -1;
    rc |= write_msg(dir, "coord", "bad-partition", &coord, 0);
    init_offsets();
    rc |= write_file(dir, "coord", "garbage", garbage, sizeof(garbage));

    /* model_update */
    Sparrow__ModelUpdate up = SPARROW__MODEL_UPDATE__INIT;
    up.has_key = 1;
    up.key = 77;
    up.has_weights = 1;
    up.weights = bin(values16, 16);
    up.has_version = 1;
    up.version = 5;
    up.has_event_time_ms = 1;
    up.event_time_ms = 1700000000000;
    rc |= write_msg(dir, "model_update", "valid-weights", &up, 1);
    up.weights.len = 6;
    rc |= write_msg(dir, "model_update", "bad-weights-len", &up, 0);
    Sparrow__ModelUpdate tomb = SPARROW__MODEL_UPDATE__INIT;
    tomb.has_key = 1;
    tomb.key = 78;
    tomb.has_tombstone = 1;
    tomb.tombstone = 1;
    rc |= write_msg(dir, "model_update", "valid-tombstone", &tomb, 0);
    tomb.has_weights = 1;
    tomb.weights = bin(values16, 8);
    rc |= write_msg(dir, "model_update", "bad-tombstone-weights", &tomb, 0);
    rc |= write_file(dir, "model_update", "garbage", garbage, sizeof(garbage));

    /* manifest */
    Sparrow__CheckpointManifest m = manifest_msg();
    rc |= write_msg(dir, "manifest", "valid-three-shards", &m, 1);
    m.shard_count = 2;
    rc |= write_msg(dir, "manifest", "bad-shard-count", &m, 0);
    m = manifest_msg();
    shard_cps[0].shard = 1;
    rc |= write_msg(dir, "manifest", "bad-duplicate-shard", &m, 0);
    m = manifest_msg();
    rc |= write_file(dir, "manifest", "garbage", garbage, sizeof(garbage));

    /* delimited */
    struct spw_wire_buf stream = {0};
    for (int i = 0; i < 3; i++)
        rc |= spw_wire_pack_delimited(&ex.base, &stream) == SPW_OK ? 0 : -1;
    Sparrow__Example empty_ex = SPARROW__EXAMPLE__INIT;
    rc |= spw_wire_pack_delimited(&empty_ex.base, &stream) == SPW_OK ? 0 : -1;
    rc |= write_file(dir, "delimited", "valid-four", stream.data, stream.len);
    rc |= write_file(dir, "delimited", "truncated-body", stream.data, stream.len / 2);
    static const uint8_t cut_prefix[] = {0x02, 0x08, 0x01, 0xac};
    rc |= write_file(dir, "delimited", "truncated-prefix", cut_prefix, sizeof(cut_prefix));
    static const uint8_t too_big[] = {0x80, 0x80, 0x80, 0x01, 0x00}; /* 2 MiB claimed */
    rc |= write_file(dir, "delimited", "too-big", too_big, sizeof(too_big));
    static const uint8_t overlong[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                       0xff, 0xff, 0xff, 0xff, 0x01};
    rc |= write_file(dir, "delimited", "overlong-prefix", overlong, sizeof(overlong));
    free(stream.data);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--write-corpus DIR]\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_buf_reserve_grows),
        cmocka_unit_test(test_wire_allocator_uses_arena),
        cmocka_unit_test(test_wire_example_round_trip),
        cmocka_unit_test(test_wire_example_batch_round_trip),
        cmocka_unit_test(test_wire_request_round_trip),
        cmocka_unit_test(test_wire_reply_round_trip),
        cmocka_unit_test(test_wire_coord_round_trip),
        cmocka_unit_test(test_wire_model_update_round_trip),
        cmocka_unit_test(test_wire_model_update_batch_rows),
        cmocka_unit_test(test_wire_model_update_batch_rejects),
        cmocka_unit_test(test_wire_manifest_round_trip),
        cmocka_unit_test(test_wire_example_rejects_inconsistent),
        cmocka_unit_test(test_wire_example_batch_rejects_bad_example),
        cmocka_unit_test(test_wire_request_rejects_bad_push),
        cmocka_unit_test(test_wire_request_push_pulled),
        cmocka_unit_test(test_wire_request_rejects_bad_pull),
        cmocka_unit_test(test_wire_request_without_body_decodes),
        cmocka_unit_test(test_wire_reply_rejects_bad_pull),
        cmocka_unit_test(test_wire_model_update_rejects_bad_weights),
        cmocka_unit_test(test_wire_manifest_rejects_bad_shards),
        cmocka_unit_test(test_wire_coord_rejects_negative_partition),
        cmocka_unit_test(test_wire_too_big_rejected_before_decoding),
        cmocka_unit_test(test_wire_truncated_and_garbage_rejected),
        cmocka_unit_test(test_wire_field_number_zero_rejected),
        cmocka_unit_test(test_wire_arena_budget_is_nomem),
        cmocka_unit_test(test_wire_varint_prefix_edges),
        cmocka_unit_test(test_wire_pack_delimited_prefix),
        cmocka_unit_test(test_wire_read_delimited_stream),
        cmocka_unit_test(test_wire_read_delimited_truncated_body),
        cmocka_unit_test(test_wire_read_delimited_truncated_prefix),
        cmocka_unit_test(test_wire_read_delimited_too_big),
        cmocka_unit_test(test_wire_read_delimited_io_error),
        cmocka_unit_test(test_wire_block_views),
        cmocka_unit_test(test_wire_block_view_rejects_misaligned),
        cmocka_unit_test(test_wire_block_count_and_copy),
        cmocka_unit_test(test_wire_blocks_aligned_after_unpack),
        cmocka_unit_test(test_wire_f16_known_values),
        cmocka_unit_test(test_wire_f16_round_to_even),
        cmocka_unit_test(test_wire_f16_subnormals),
        cmocka_unit_test(test_wire_f16_inf_nan),
        cmocka_unit_test(test_wire_f16_all_halves_round_trip),
        cmocka_unit_test(test_wire_f16_matches_reference),
        cmocka_unit_test(test_wire_f16_bulk_matches_scalar),
        cmocka_unit_test(test_wire_f16_stochastic_unbiased),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
