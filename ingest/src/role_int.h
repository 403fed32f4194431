/* Internals of the ingest role (not API): the object, its sinks, flush cycles and buckets, shared
 * between ingest_config.c, sink.c, offsets.c, batch.c, dead_letter.c and pipeline.c. */
#ifndef SPARROW_INGEST_ROLE_INT_H
#define SPARROW_INGEST_ROLE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/ingest.h"
#include "sparrow/kafka.h"
#include "sparrow/metrics.h"
#include "sparrow/wire.h"

/* Input partitions one cycle tracks; more seals it early. */
#define SPW_INGEST__CYCLE_MAX_PARTS 256
#define SPW_INGEST__BUFFERED_MAX    (512u << 20) /* packed examples in all buckets before a flush */
#define SPW_INGEST__POLL_BURST      64 /* records taken from the consumer between housekeeping */

/* ---- URLs (sink.c) ---- */

/* kafka://bootstrap/topic -> bootstrap, topic (malloc'd, the caller frees both). SPW_ERR_INVALID
 * for another form, SPW_ERR_NOMEM. */
spw_err_t spw_ingest__parse_kafka_url(const char *url, char **bootstrap, char **topic);

/* True for file:PATH with a non-empty PATH. */
bool spw_ingest__is_file_url(const char *url);

/* ---- flush cycles and the offset ring (offsets.c) ---- */

/* One flush cycle: what it sent and which input offsets it covers. Its offsets are stored once
 * it and every older cycle are sealed and fully delivered. Owned by the ingest's thread. */
struct spw_ingest__cycle {
    uint64_t outstanding; /* records sent, not yet reported */
    bool sealed, failed;
    size_t n_parts;
    int32_t part[SPW_INGEST__CYCLE_MAX_PARTS];
    int64_t next[SPW_INGEST__CYCLE_MAX_PARTS]; /* the next offset to read after the cycle */
};

/* The cycles from the oldest undelivered to the open one, in order. */
struct spw_ingest__ring {
    struct spw_ingest__cycle *slots;
    size_t cap, head, count;
};

/* Where a delivered cycle's offsets go: called once per partition, oldest cycle first. */
typedef void (*spw_ingest__store_fn)(void *opaque, int32_t partition, int64_t next);

/* Allocates cap (>= 2) slots, empty. SPW_ERR_NOMEM. */
spw_err_t spw_ingest__ring_init(struct spw_ingest__ring *ring, size_t cap);
void spw_ingest__ring_fini(struct spw_ingest__ring *ring);

/* Opens a new, cleared cycle after the others; NULL when all cap slots are in use. */
struct spw_ingest__cycle *spw_ingest__ring_open(struct spw_ingest__ring *ring);

/* The newest (open) cycle; the ring is not empty. */
struct spw_ingest__cycle *spw_ingest__ring_cur(struct spw_ingest__ring *ring);

/* Records that the open cycle covers partition's offset (its next offset becomes at least
 * offset + 1). False, with nothing changed, when the cycle tracks SPW_INGEST__CYCLE_MAX_PARTS
 * other partitions already: the caller seals it and notes again in the next. */
bool spw_ingest__cycle_note(struct spw_ingest__cycle *cycle, int32_t partition, int64_t offset);

/* Pops the sealed, fully delivered cycles from the oldest on, in order, giving each one's offsets
 * to store (which may be NULL). Stops at the first cycle still open or outstanding. SPW_ERR_IO
 * when the oldest cycle's delivery failed: it stays, and nothing past it is ever stored. */
spw_err_t spw_ingest__ring_advance(struct spw_ingest__ring *ring, spw_ingest__store_fn store,
                                   void *opaque);

/* ---- outputs (sink.c) ---- */

/* Where records go: a Kafka topic (with the sink's own producer) or a file. */
struct spw_ingest__sink {
    char *topic;                    /* kafka: topic */
    spw_kafka_producer_t *producer; /* kafka */
    FILE *file;                     /* file */
    char *path;
};

/* ---- the object ---- */

/* The examples of one key bucket, packed as they arrive: buf holds the ExampleBatch record
 * itself (one length-delimited "examples" field per example), so an Example need not outlive its
 * event and is sized and packed once. */
struct spw_ingest__bucket {
    struct spw_wire_buf buf;
    size_t n;
};

/* Owned by one thread (the one that runs it). err is sticky: after the first failure the run
 * stops and nothing past the failure is stored. */
struct spw_ingest {
    enum spw_format format;
    struct spw_ingest_limits limits;
    spw_schema_t *schema;
    spw_arena_t *arena; /* the parsed example of one event, reset after every event */

    /* input */
    spw_kafka_consumer_t *consumer;
    char *in_topic;
    spw_reader_t *reader;
    char *in_label; /* source name in dead-letter headers */

    struct spw_ingest__sink out, dlq;

    /* batching */
    size_t batch_size, max_bytes;
    uint64_t linger_ms;
    bool keyed;
    /* unkeyed Kafka input: a bucket per source partition (modulo the buckets), keyed by the
     * bucket, so that a replayed event lands in the examples partition it went to before and
     * the trainers' source high-water marks see it (docs/ARCHITECTURE.md §5) */
    bool by_source;
    uint32_t key_field;
    size_t n_buckets;
    struct spw_ingest__bucket *buckets;
    size_t cycle_events;
    uint64_t cycle_start_ms;
    size_t buffered; /* bytes in all buckets */

    struct spw_ingest__ring ring;
    uint64_t commit_interval_ms, shutdown_timeout_ms;

    spw_err_t err;
    uint64_t stored_since_commit;

    spw_metrics_t *metrics; /* borrowed */
    struct spw_http *http;  /* borrowed */
    spw_counter_t *m_events, *m_examples, *m_batches, *m_rejected[SPW_REJECT__COUNT];
    spw_counter_t *m_delivery_failed;
    uint64_t n_events, n_examples, n_rejected;
    uint64_t rejected_by[SPW_REJECT__COUNT];
    double max_reject_ratio;
    bool reject_checked; /* Kafka input: the first SPW_INGEST_REJECT_CHECK_EVENTS were judged */
    /* monotonic: the first event taken, and the end of the burst (or file) that held the last;
     * events_seconds in the stop line */
    uint64_t first_event_ns, last_event_ns;
};

/* Records the first failure (sticky); later ones are ignored. */
void spw_ingest__fail_run(struct spw_ingest *in, spw_err_t err);

/* Opens sink s on url (file:PATH or kafka://HOST:PORT/TOPIC), what naming it in logs and
 * metrics ("out", "dlq"). Deliveries are accounted to the cycle each record was sent in. errstr on
 * failure; s is left for spw_ingest__sink_close either way. */
spw_err_t spw_ingest__sink_open(struct spw_ingest *in, struct spw_ingest__sink *s, const char *url,
                                const char *what, const spw_config_t *kafka_config, char *errstr,
                                size_t errstr_size);

/* Flushes (a producer: at most timeout_ms), closes and clears s. Safe on a cleared sink. */
void spw_ingest__sink_close(struct spw_ingest__sink *s, uint64_t timeout_ms);

/* Sends one record, accounted to the open cycle (a file write is delivered at once). With
 * headers, a file sink writes the dead-letter line "h0 \t h1 \t h2 \t h3 \t value \n"; without,
 * a length-delimited record. The value is copied. Marks the cycle failed on error. */
spw_err_t spw_ingest__sink_send(struct spw_ingest *in, struct spw_ingest__sink *s, const void *key,
                                size_t key_len, const void *value, size_t len,
                                const struct spw_kafka_header *hdrs, size_t n_hdrs);

/* Serves the producers' delivery reports for up to timeout_ms. */
void spw_ingest__poll_sinks(struct spw_ingest *in, int timeout_ms);

/* ---- batching (batch.c) ---- */

/* Pops delivered cycles and stores their offsets in the consumer; a failed cycle stops the run. */
void spw_ingest__advance(struct spw_ingest *in);

/* Opens a new cycle, waiting (serving deliveries) while the ring is full; gives up with the run
 * failed after the shutdown grace period once a stop was requested. */
void spw_ingest__cycle_open(struct spw_ingest *in);

/* Sends every non-empty bucket's record, seals the open cycle, opens the next. */
void spw_ingest__flush_cycle(struct spw_ingest *in);

/* The bucket ex goes to: the key field's first key mixed, modulo the buckets; by_source: the
 * source partition modulo the buckets; 0 unkeyed or without the field. */
size_t spw_ingest__bucket_of(const struct spw_ingest *in, const Sparrow__Example *ex,
                             int32_t src_partition);

/* Packs ex into its bucket (ex may be dropped after), flushing first when the record would pass
 * max_bytes, and after when the bucket holds batch_size. raw (pb input): the bytes ex was decoded
 * from, written as they came. src_partition >= 0 (Kafka input): the event's source position,
 * written into the example (source_partition, source_offset; the record names in_topic). */
void spw_ingest__add_example(struct spw_ingest *in, Sparrow__Example *ex, const void *raw,
                             size_t raw_len, int32_t src_partition, int64_t src_offset);

/* Notes that the open cycle covers partition/offset (sealing it first when its table is full). */
void spw_ingest__note_offset(struct spw_ingest *in, int32_t partition, int64_t offset);

/* ---- dead letters (dead_letter.c) ---- */

/* Sends the raw event (data, len; key from the input record, may be NULL) to the dead-letter
 * output with headers reason, source.topic, source.partition, source.offset, detail, and counts
 * it. partition -1 and offset = record index for a file input. */
void spw_ingest__dead_letter(struct spw_ingest *in, const void *key, size_t key_len,
                             const void *data, size_t len, int32_t partition, int64_t offset,
                             const struct spw_parse_error *perr);

#endif
