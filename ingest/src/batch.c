/* Batching: examples packed into per-key-bucket ExampleBatch records, flushed a cycle at a time;
 * a cycle's input offsets stored once it is delivered. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "role_int.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

void spw_ingest__fail_run(struct spw_ingest *in, spw_err_t err)
{
    if (in->err == SPW_OK)
        in->err = err;
}

static void store_offset(void *opaque, int32_t partition, int64_t next)
{
    struct spw_ingest *in = opaque;
    spw_kafka_consumer_store(in->consumer, in->in_topic, partition, next);
    in->stored_since_commit++;
}

void spw_ingest__advance(struct spw_ingest *in)
{
    spw_err_t err = spw_ingest__ring_advance(&in->ring, in->consumer ? store_offset : NULL, in);
    if (err != SPW_OK) {
        if (in->err == SPW_OK)
            SPW_ERROR("delivery failed; stopping without committing past it", "%s", "");
        spw_ingest__fail_run(in, err);
    }
}

void spw_ingest__cycle_open(struct spw_ingest *in)
{
    uint64_t deadline = 0;
    while (in->ring.count == in->ring.cap && in->err == SPW_OK) {
        spw_ingest__poll_sinks(in, 10);
        spw_ingest__advance(in);
        /* Output stalled (brokers down) and SIGTERM came: wait the grace period, then give up
         * without committing what was not delivered. */
        if (spw_signal_stop_requested()) {
            uint64_t now = spw_time_mono_ms();
            if (!deadline)
                deadline = now + in->shutdown_timeout_ms;
            if (now >= deadline) {
                SPW_ERROR("shutdown grace period over with output undelivered", "cycles=%zu",
                          in->ring.count);
                spw_ingest__fail_run(in, SPW_ERR_TIMEOUT);
            }
        }
    }
    /* full only when the run failed: the caller stops */
    spw_ingest__ring_open(&in->ring);
}

/* ExampleBatch.source_topic (field 2) after the examples: the topic of their source positions. */
static spw_err_t append_source_topic(struct spw_ingest *in, struct spw_ingest__bucket *bk)
{
    size_t len = strlen(in->in_topic);
    if (spw_wire_buf_reserve(&bk->buf, 1 + SPW_WIRE_VARINT_MAX + len) != SPW_OK) {
        SPW_ERROR("out of memory", "what=batch bytes=%zu", bk->buf.len + len);
        spw_ingest__fail_run(in, SPW_ERR_NOMEM);
        return SPW_ERR_NOMEM;
    }
    uint8_t *at = bk->buf.data + bk->buf.len;
    at[0] = 2 << 3 | 2;
    size_t n = 1 + spw_wire_put_varint(at + 1, len);
    memcpy(at + n, in->in_topic, len);
    bk->buf.len += n + len;
    return SPW_OK;
}

void spw_ingest__flush_cycle(struct spw_ingest *in)
{
    struct spw_ingest__cycle *c = spw_ingest__ring_cur(&in->ring);
    if (in->cycle_events == 0 && c->n_parts == 0 && c->outstanding == 0)
        return;
    for (size_t b = 0; b < in->n_buckets; b++) {
        struct spw_ingest__bucket *bk = &in->buckets[b];
        if (bk->n == 0) {
            /* a bucket idle for a whole cycle gives its memory back (keyed input: many) */
            free(bk->buf.data);
            memset(&bk->buf, 0, sizeof(bk->buf));
            continue;
        }
        if (in->in_topic && append_source_topic(in, bk) != SPW_OK)
            return;
        char key[16];
        int klen = snprintf(key, sizeof(key), "%zu", b);
        /* the producer copies the value: the buffer is reused at once */
        bool keyed = in->keyed || in->by_source;
        spw_ingest__sink_send(in, &in->out, keyed ? key : NULL, keyed ? (size_t)klen : 0,
                              bk->buf.data, bk->buf.len, NULL, 0);
        in->n_examples += bk->n;
        if (in->m_examples)
            spw_counter_add(in->m_examples, bk->n);
        if (in->m_batches)
            spw_counter_inc(in->m_batches);
        bk->n = 0;
        bk->buf.len = 0;
    }
    in->cycle_events = 0;
    in->buffered = 0;
    c->sealed = true;
    spw_ingest__cycle_open(in);
}

void spw_ingest__note_offset(struct spw_ingest *in, int32_t partition, int64_t offset)
{
    struct spw_ingest__cycle *c = spw_ingest__ring_cur(&in->ring);
    bool fresh = c->n_parts == 0 && in->cycle_events == 0;
    if (!spw_ingest__cycle_note(c, partition, offset)) {
        spw_ingest__flush_cycle(in);
        c = spw_ingest__ring_cur(&in->ring);
        fresh = c->n_parts == 0 && in->cycle_events == 0;
        spw_ingest__cycle_note(c, partition, offset);
    }
    if (fresh) /* a cycle of dead letters lingers too */
        in->cycle_start_ms = spw_time_mono_ms();
}

size_t spw_ingest__bucket_of(const struct spw_ingest *in, const Sparrow__Example *ex,
                             int32_t src_partition)
{
    if (in->by_source)
        return src_partition > 0 ? (size_t)src_partition % in->n_buckets : 0;
    if (!in->keyed)
        return 0;
    for (size_t i = 0; i < ex->n_fields && i < ex->n_keys; i++)
        if (ex->fields[i] == in->key_field)
            return (size_t)(spw_hash_mix64(ex->keys[i]) % in->n_buckets);
    return 0; /* events without the field share bucket 0 */
}

/* raw, when not NULL, is the sparrow.Example that ex was decoded from (pb input): it goes into the
 * record as it came. Decoding those bytes gives ex again, whichever decoder reads them, so
 * re-packing ex would only spend a sizing and a packing pass per event to normalise the
 * encoding. */
/* Example.source_partition (field 8) and source_offset (field 9) as varint fields into out (room
 * for 2 * (1 + SPW_WIRE_VARINT_MAX) bytes): appended to an encoded Example they override any
 * earlier value (protobuf: the last one wins). Returns the length. */
static size_t put_source(uint8_t *out, int32_t partition, int64_t offset)
{
    size_t n = 0;
    out[n++] = 8 << 3 | 0;
    n += spw_wire_put_varint(out + n, (uint64_t)partition);
    out[n++] = 9 << 3 | 0;
    n += spw_wire_put_varint(out + n, (uint64_t)offset);
    return n;
}

void spw_ingest__add_example(struct spw_ingest *in, Sparrow__Example *ex, const void *raw,
                             size_t raw_len, int32_t src_partition, int64_t src_offset)
{
    size_t b = spw_ingest__bucket_of(in, ex, src_partition);
    struct spw_ingest__bucket *bk = &in->buckets[b];
    uint8_t src[2 * (1 + SPW_WIRE_VARINT_MAX)];
    size_t src_len = 0;
    if (src_partition >= 0 && raw) {
        src_len = put_source(src, src_partition, src_offset);
    } else if (src_partition >= 0) {
        ex->has_source_partition = ex->has_source_offset = true;
        ex->source_partition = src_partition;
        ex->source_offset = src_offset;
    }
    size_t size = (raw ? raw_len + src_len : sparrow__example__get_packed_size(ex));
    uint8_t pre[1 + SPW_WIRE_VARINT_MAX];
    pre[0] = 1 << 3 | 2; /* ExampleBatch.examples: field 1, length-delimited */
    size_t pre_len = 1 + spw_wire_put_varint(pre + 1, size);
    size_t rec = pre_len + size;
    if ((bk->n > 0 && bk->buf.len + rec > in->max_bytes) ||
        (in->buffered > 0 && in->buffered + rec > SPW_INGEST__BUFFERED_MAX))
        spw_ingest__flush_cycle(in);
    if (spw_wire_buf_reserve(&bk->buf, rec) != SPW_OK) {
        SPW_ERROR("out of memory", "what=batch bytes=%zu", bk->buf.len + rec);
        spw_ingest__fail_run(in, SPW_ERR_NOMEM);
        return;
    }
    uint8_t *at = bk->buf.data + bk->buf.len;
    memcpy(at, pre, pre_len);
    size_t wrote = size;
    if (raw) {
        memcpy(at + pre_len, raw, raw_len);
        memcpy(at + pre_len + raw_len, src, src_len);
    } else
        wrote = sparrow__example__pack(ex, at + pre_len);
    if (wrote != size) { /* cannot happen: protobuf-c packs exactly the size it reports */
        SPW_ERROR("example packed to an unexpected size", "size=%zu wrote=%zu", size, wrote);
        spw_ingest__fail_run(in, SPW_ERR_STATE);
        return;
    }
    bk->buf.len += rec;
    bk->n++;
    in->buffered += rec;
    if (in->cycle_events++ == 0)
        in->cycle_start_ms = spw_time_mono_ms();
    if (bk->n == in->batch_size)
        spw_ingest__flush_cycle(in);
}
