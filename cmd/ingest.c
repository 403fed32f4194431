/* `sparrow ingest`: raw events (Kafka or file) validated into ExampleBatch records, invalid ones
 * dead-lettered unchanged, input offsets committed only after the output holding them landed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command_table.h"
#include "sparrow/config.h"
#include "sparrow/hash.h"
#include "sparrow/http.h"
#include "sparrow/ingest.h"
#include "sparrow/kafka.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

extern char **environ;

const struct spw_config_prop spw_ingest_config_props[] = {
    {"ingest.in", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Input: kafka://HOST:PORT/TOPIC (one raw event per record) or file:PATH (- is stdin)."},
    {"ingest.out", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Output: kafka://HOST:PORT/TOPIC or file:PATH (length-delimited ExampleBatch records)."},
    {"ingest.dlq", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Dead-letter output (kafka://... or file:...); unset: the output topic or path plus .dlq."},
    {"ingest.format", SPW_CONFIG_ENUM, "json", 0, 0, "pb|json|criteo",
     "Raw event format: one sparrow.Example per record (pb), JSON lines, or Criteo TSV."},
    {"ingest.group", SPW_CONFIG_STRING, "sparrow-ingest", 0, 249, NULL,
     "Consumer group of the Kafka input."},
    {"ingest.start", SPW_CONFIG_ENUM, "earliest", 0, 0, "earliest|latest",
     "Where a partition without a committed offset starts."},
    {"ingest.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Exit with status 3 when committed offsets were lost to retention (else log, count and "
     "continue from the earliest record held)."},
    {"ingest.batch.size", SPW_CONFIG_INT, "1000", 1, 100000, NULL,
     "Examples per ExampleBatch record (per key bucket)."},
    {"ingest.batch.max_bytes", SPW_CONFIG_INT, "900000", 1024, 67108864, NULL,
     "Largest ExampleBatch record in bytes (keep under the topic's message.max.bytes)."},
    {"ingest.batch.linger", SPW_CONFIG_DURATION_MS, "50ms", 0, 60000, NULL,
     "Longest time an event waits for its batch to fill."},
    {"ingest.key.field", SPW_CONFIG_STRING, NULL, 0, 255, NULL,
     "Feature field (name as in the input, e.g. user) whose value keys the output records, so "
     "one user's events stay in one partition; unset: records are not keyed."},
    {"ingest.key.buckets", SPW_CONFIG_INT, "64", 1, 4096, NULL,
     "Key buckets when ingest.key.field is set: events of one value share a bucket and a record "
     "key."},
    {"ingest.max_features", SPW_CONFIG_INT, "4096", 1, 1048576, NULL,
     "Features per example; more is dead-lettered as too_many_features."},
    {"ingest.max_record_bytes", SPW_CONFIG_INT, "1048576", 64, 67108864, NULL,
     "Largest raw event; larger is dead-lettered as oversized."},
    {"ingest.max_field_id", SPW_CONFIG_INT, "2147483647", 0, 2147483647, NULL,
     "Largest accepted field id; above is dead-lettered as bad_field."},
    {"ingest.float_label", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Accept any finite label (regression targets) instead of 0/1."},
    {"ingest.schema", SPW_CONFIG_STRING, NULL, 0, 4096, NULL,
     "Schema file (`name = id` lines) for JSON field names; unset: names are hashed."},
    {"ingest.schema.strict", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Dead-letter JSON fields absent from the schema (bad_field) instead of hashing them."},
    {"ingest.inflight", SPW_CONFIG_INT, "64", 1, 4096, NULL,
     "Flushed batch cycles awaiting delivery before input is paused."},
    {"ingest.commit.interval", SPW_CONFIG_DURATION_MS, "1s", 10, 3600000, NULL,
     "How often delivered input offsets are committed."},
    {"ingest.shutdown.timeout", SPW_CONFIG_DURATION_MS, "30s", 0, 3600000, NULL,
     "Grace period on SIGTERM to deliver what is queued before exiting."},
    {"ingest.kafka.close.timeout", SPW_CONFIG_DURATION_MS, "10s", 100, 3600000, NULL,
     "On SIGTERM, after delivery: longest wait for the Kafka input's close (final commit, "
     "leaving the group); past it the partitions move on the group's session timeout."},
    SPW_CONFIG_PROPS_HTTP("ingest", "127.0.0.1", "0"),
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL,
     "librdkafka properties for the consumer and producers, passed through unchanged "
     "(kafka.security.protocol=SSL, ...)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_ingest_config_n_props =
    sizeof(spw_ingest_config_props) / sizeof(spw_ingest_config_props[0]);

static const struct spw_cli_alias aliases[] = {
    {"--in", "ingest.in"},
    {"--out", "ingest.out"},
    {"--dlq", "ingest.dlq"},
    {"--format", "ingest.format"},
    {"--group", "ingest.group"},
    {"--key-field", "ingest.key.field"},
    {"--batch-size", "ingest.batch.size"},
    {"--linger", "ingest.batch.linger"},
    {"--strict", "ingest.strict"},
    {"--log-level", "log.level"},
};

#define CYCLE_MAX_PARTS 256 /* input partitions one flush cycle tracks; more seals it early */
#define BUFFERED_MAX    (512u << 20) /* packed examples held in all buckets before a flush */
#define POLL_BURST      64           /* records taken from the consumer between housekeeping */
#define EXIT_LOST       3            /* strict mode: offsets were lost to retention */

/* Where records go: a Kafka topic (with the sink's own producer) or a file. */
struct sink {
    char *topic;                    /* kafka: topic */
    spw_kafka_producer_t *producer; /* kafka */
    FILE *file;                     /* file */
    char *path;
};

/* One flush cycle: what it sent and which input offsets it covers. Offsets are stored once this
 * cycle and every older one are fully delivered. Owned by the main thread. */
struct cycle {
    uint64_t outstanding; /* records sent, not yet reported */
    bool sealed, failed;
    size_t n_parts;
    int32_t part[CYCLE_MAX_PARTS];
    int64_t next[CYCLE_MAX_PARTS];
};

/* The examples of one key bucket, packed as they arrive: buf holds the ExampleBatch record
 * itself (one length-delimited "examples" field per example), so an Example need not outlive its
 * event and is sized and packed once. */
struct bucket {
    struct spw_wire_buf buf;
    size_t n;
};

struct ingest {
    spw_config_t *cfg;
    enum spw_format format;
    struct spw_ingest_limits limits;
    spw_schema_t *schema;
    spw_arena_t *arena;

    /* input */
    spw_kafka_consumer_t *consumer;
    char *in_topic;
    spw_reader_t *reader;
    char *in_label; /* source name in DLQ headers */

    struct sink out, dlq;

    /* batching */
    size_t batch_size, max_bytes;
    uint64_t linger_ms;
    bool keyed;
    uint32_t key_field;
    size_t n_buckets;
    struct bucket *buckets;
    size_t cycle_events;
    uint64_t cycle_start_ms;
    size_t buffered; /* bytes in all buckets */

    /* cycles ring */
    struct cycle *ring;
    size_t ring_cap, head, count;

    bool fatal;
    uint64_t stored_since_commit;

    spw_metrics_t *metrics;
    spw_counter_t *m_events, *m_examples, *m_batches, *m_rejected[SPW_REJECT__COUNT];
    spw_counter_t *m_delivery_failed;
    uint64_t n_events, n_examples, n_rejected;
    /* monotonic: the first event taken, and the end of the burst (or file) that held the last;
     * events_seconds in the stop line */
    uint64_t first_event_ns, last_event_ns;
};

/* ---- URLs ---- */

/* kafka://bootstrap/topic -> bootstrap, topic (malloc'd). */
static int parse_kafka_url(const char *url, char **bootstrap, char **topic)
{
    if (strncmp(url, "kafka://", 8) != 0)
        return -1;
    const char *rest = url + 8;
    const char *slash = strrchr(rest, '/');
    if (!slash || !slash[1])
        return -1;
    *bootstrap = strndup(rest, (size_t)(slash - rest));
    *topic = strdup(slash + 1);
    if (!*bootstrap || !*topic) {
        free(*bootstrap);
        free(*topic);
        return -1;
    }
    return 0;
}

static bool is_file_url(const char *url)
{
    return strncmp(url, "file:", 5) == 0 && url[5];
}

/* ---- sinks ---- */

static void cycle_delivered(void *opaque, void *msg_opaque, spw_err_t err, int32_t partition,
                            int64_t offset)
{
    struct ingest *in = opaque;
    struct cycle *c = msg_opaque;
    (void)partition;
    (void)offset;
    c->outstanding--;
    if (err != SPW_OK) {
        c->failed = true;
        if (in->m_delivery_failed)
            spw_counter_inc(in->m_delivery_failed);
    }
}

static int sink_open(struct ingest *in, struct sink *s, const char *url, const char *what)
{
    char errstr[512];
    if (is_file_url(url)) {
        s->path = strdup(url + 5);
        s->file = strcmp(s->path, "-") == 0 ? stdout : fopen(s->path, "wb");
        if (!s->file) {
            SPW_ERROR("cannot open output", "what=%s path=%s error=\"%s\"", what, s->path,
                      strerror(errno));
            return -1;
        }
        return 0;
    }
    char *bootstrap = NULL;
    if (parse_kafka_url(url, &bootstrap, &s->topic) != 0) {
        SPW_ERROR("bad output url", "what=%s url=\"%s\" expected=kafka://HOST:PORT/TOPIC|file:PATH",
                  what, url);
        return -1;
    }
    spw_kafka_props_t *props = spw_kafka_props_new();
    int rc = -1;
    if (!props || spw_kafka_props_from_config(props, in->cfg) != SPW_OK)
        goto out_free;
    if (bootstrap[0] && spw_kafka_props_set(props, "bootstrap.servers", bootstrap) != SPW_OK)
        goto out_free;
    char labels[64];
    snprintf(labels, sizeof(labels), "sink=\"%s\"", what);
    struct spw_kafka_producer_opts popts = {
        .on_delivery = cycle_delivered,
        .opaque = in,
        .metrics = in->metrics,
        .metrics_labels = labels,
    };
    s->producer = spw_kafka_producer_new(props, &popts, errstr, sizeof(errstr));
    if (!s->producer) {
        SPW_ERROR("kafka producer failed", "what=%s error=\"%s\"", what, errstr);
        goto out_free;
    }
    rc = 0;
out_free:
    spw_kafka_props_destroy(props);
    free(bootstrap);
    return rc;
}

static void sink_close(struct sink *s, uint64_t timeout_ms)
{
    if (s->producer)
        spw_kafka_producer_destroy(s->producer, (int)timeout_ms);
    if (s->file && s->file != stdout)
        fclose(s->file);
    else if (s->file)
        fflush(s->file);
    free(s->topic);
    free(s->path);
    memset(s, 0, sizeof(*s));
}

/* Sends one record, accounted to the open cycle. A file write is delivered at once. */
static int sink_send(struct ingest *in, struct sink *s, const void *key, size_t key_len,
                     const void *value, size_t len, const struct spw_kafka_header *hdrs,
                     size_t n_hdrs)
{
    struct cycle *c = &in->ring[(in->head + in->count - 1) % in->ring_cap];
    if (s->file) {
        bool ok = true;
        if (n_hdrs) { /* dead letter: reason \t source \t partition \t offset \t raw */
            for (size_t i = 0; i < n_hdrs && i < 4; i++)
                ok &= fprintf(s->file, "%.*s\t", (int)hdrs[i].len, (const char *)hdrs[i].value) > 0;
            ok &= fwrite(value, 1, len, s->file) == len;
            ok &= fputc('\n', s->file) != EOF;
        } else { /* length-delimited ExampleBatch */
            uint8_t pre[SPW_WIRE_VARINT_MAX];
            size_t n = spw_wire_put_varint(pre, len);
            ok &= fwrite(pre, 1, n, s->file) == n && fwrite(value, 1, len, s->file) == len;
        }
        if (!ok) {
            SPW_ERROR("output write failed", "path=%s error=\"%s\"", s->path, strerror(errno));
            c->failed = true;
            return -1;
        }
        return 0;
    }
    c->outstanding++;
    spw_err_t err = spw_kafka_producer_send(s->producer, s->topic, -1, key, key_len, value, len,
                                            hdrs, n_hdrs, c);
    if (err != SPW_OK) {
        c->outstanding--;
        c->failed = true;
        return -1;
    }
    return 0;
}

/* ---- cycles ---- */

static void poll_sinks(struct ingest *in, int timeout_ms)
{
    if (in->out.producer)
        spw_kafka_producer_poll(in->out.producer, timeout_ms);
    if (in->dlq.producer)
        spw_kafka_producer_poll(in->dlq.producer, in->out.producer ? 0 : timeout_ms);
}

/* Pops delivered cycles in order and stores their input offsets. */
static void advance(struct ingest *in)
{
    while (in->count > 0) {
        struct cycle *c = &in->ring[in->head];
        if (!c->sealed || c->outstanding > 0)
            return;
        if (c->failed) {
            /* Never store past a record that did not land: a restart re-reads it. */
            if (!in->fatal)
                SPW_ERROR("delivery failed; stopping without committing past it", "%s", "");
            in->fatal = true;
            return;
        }
        for (size_t i = 0; i < c->n_parts && in->consumer; i++) {
            spw_kafka_consumer_store(in->consumer, in->in_topic, c->part[i], c->next[i]);
            in->stored_since_commit++;
        }
        in->head = (in->head + 1) % in->ring_cap;
        in->count--;
    }
}

/* Opens a new cycle, waiting for the oldest to finish when the ring is full. */
static void cycle_open(struct ingest *in)
{
    uint64_t deadline = 0;
    while (in->count == in->ring_cap && !in->fatal) {
        poll_sinks(in, 10);
        advance(in);
        /* Output stalled (brokers down) and SIGTERM came: wait the grace period, then give up
         * without committing what was not delivered. */
        if (spw_signal_stop_requested()) {
            uint64_t now = spw_time_mono_ms();
            if (!deadline)
                deadline =
                    now + (uint64_t)spw_config_duration_ms(in->cfg, "ingest.shutdown.timeout");
            if (now >= deadline) {
                SPW_ERROR("shutdown grace period over with output undelivered", "cycles=%zu",
                          in->count);
                in->fatal = true;
            }
        }
    }
    if (in->count == in->ring_cap)
        return; /* fatal: the caller stops */
    struct cycle *c = &in->ring[(in->head + in->count) % in->ring_cap];
    memset(c, 0, sizeof(*c));
    in->count++;
}

static struct cycle *cycle_cur(struct ingest *in)
{
    return &in->ring[(in->head + in->count - 1) % in->ring_cap];
}

/* Sends every non-empty bucket's record, seals the cycle, opens the next. */
static void flush_cycle(struct ingest *in)
{
    struct cycle *c = cycle_cur(in);
    if (in->cycle_events == 0 && c->n_parts == 0 && c->outstanding == 0)
        return;
    for (size_t b = 0; b < in->n_buckets; b++) {
        struct bucket *bk = &in->buckets[b];
        if (bk->n == 0) {
            /* a bucket idle for a whole cycle gives its memory back (keyed input: many) */
            free(bk->buf.data);
            memset(&bk->buf, 0, sizeof(bk->buf));
            continue;
        }
        char key[16];
        int klen = snprintf(key, sizeof(key), "%zu", b);
        /* the producer copies the value: the buffer is reused at once */
        sink_send(in, &in->out, in->keyed ? key : NULL, in->keyed ? (size_t)klen : 0, bk->buf.data,
                  bk->buf.len, NULL, 0);
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
    cycle_open(in);
}

static void note_offset(struct ingest *in, int32_t partition, int64_t offset)
{
    struct cycle *c = cycle_cur(in);
    for (size_t i = 0; i < c->n_parts; i++) {
        if (c->part[i] == partition) {
            if (offset + 1 > c->next[i])
                c->next[i] = offset + 1;
            return;
        }
    }
    if (c->n_parts == CYCLE_MAX_PARTS) {
        flush_cycle(in);
        c = cycle_cur(in);
    }
    if (c->n_parts == 0 && in->cycle_events == 0)
        in->cycle_start_ms = spw_time_mono_ms(); /* a cycle of dead letters lingers too */
    c->part[c->n_parts] = partition;
    c->next[c->n_parts] = offset + 1;
    c->n_parts++;
}

/* ---- events ---- */

static void dead_letter(struct ingest *in, const void *key, size_t key_len, const void *data,
                        size_t len, int32_t partition, int64_t offset,
                        const struct spw_parse_error *perr)
{
    char part_text[16], off_text[24];
    const char *reason = spw_reject_reason_name(perr->reason);
    snprintf(part_text, sizeof(part_text), "%" PRId32, partition);
    snprintf(off_text, sizeof(off_text), "%" PRId64, offset);
    struct spw_kafka_header hdrs[5] = {
        {"reason", reason, strlen(reason)},
        {"source.topic", in->in_label, strlen(in->in_label)},
        {"source.partition", part_text, strlen(part_text)},
        {"source.offset", off_text, strlen(off_text)},
        {"detail", perr->message, strnlen(perr->message, sizeof(perr->message))},
    };
    in->n_rejected++;
    if (in->m_rejected[perr->reason])
        spw_counter_inc(in->m_rejected[perr->reason]);
    SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "event dead-lettered",
                        "reason=%s partition=%" PRId32 " offset=%" PRId64 " detail=\"%s\"", reason,
                        partition, offset, perr->message);
    sink_send(in, &in->dlq, key, key_len, data, len, hdrs, 5);
}

static size_t bucket_of(const struct ingest *in, const Sparrow__Example *ex)
{
    if (!in->keyed)
        return 0;
    for (size_t i = 0; i < ex->n_fields && i < ex->n_keys; i++)
        if (ex->fields[i] == in->key_field)
            return (size_t)(spw_hash_mix64(ex->keys[i]) % in->n_buckets);
    return 0; /* events without the field share bucket 0 */
}

/* Packs ex into its bucket's record (ex may be dropped after), flushing first when the record
 * would pass ingest.batch.max_bytes (a lone example larger than that still goes alone). raw, when
 * not NULL, is the sparrow.Example that ex was decoded from (pb input): it goes into the record
 * as it came. Decoding those bytes gives ex again, whichever decoder reads them, so re-packing
 * ex would only spend a sizing and a packing pass per event to normalise the encoding. */
static void add_example(struct ingest *in, const Sparrow__Example *ex, const void *raw,
                        size_t raw_len)
{
    size_t b = bucket_of(in, ex);
    struct bucket *bk = &in->buckets[b];
    size_t size = raw ? raw_len : sparrow__example__get_packed_size(ex);
    uint8_t pre[1 + SPW_WIRE_VARINT_MAX];
    pre[0] = 1 << 3 | 2; /* ExampleBatch.examples: field 1, length-delimited */
    size_t pre_len = 1 + spw_wire_put_varint(pre + 1, size);
    size_t rec = pre_len + size;
    if ((bk->n > 0 && bk->buf.len + rec > in->max_bytes) ||
        (in->buffered > 0 && in->buffered + rec > BUFFERED_MAX))
        flush_cycle(in);
    if (spw_wire_buf_reserve(&bk->buf, rec) != SPW_OK) {
        SPW_ERROR("out of memory", "what=batch bytes=%zu", bk->buf.len + rec);
        in->fatal = true;
        return;
    }
    uint8_t *at = bk->buf.data + bk->buf.len;
    memcpy(at, pre, pre_len);
    size_t wrote = size;
    if (raw)
        memcpy(at + pre_len, raw, size);
    else
        wrote = sparrow__example__pack(ex, at + pre_len);
    if (wrote != size) { /* cannot happen: protobuf-c packs exactly the size it reports */
        SPW_ERROR("example packed to an unexpected size", "size=%zu wrote=%zu", size, wrote);
        in->fatal = true;
        return;
    }
    bk->buf.len += rec;
    bk->n++;
    in->buffered += rec;
    if (in->cycle_events++ == 0)
        in->cycle_start_ms = spw_time_mono_ms();
    if (bk->n == in->batch_size)
        flush_cycle(in);
}

static spw_err_t parse_event(struct ingest *in, const void *data, size_t len, Sparrow__Example **ex,
                             struct spw_parse_error *perr)
{
    switch (in->format) {
    case SPW_FORMAT_JSON:
        return spw_parse_json_line(data, len, in->schema, &in->limits, in->arena, ex, perr);
    case SPW_FORMAT_CRITEO:
        return spw_parse_criteo_line(data, len, &in->limits, in->arena, ex, perr);
    case SPW_FORMAT_PB:
    default:
        return spw_parse_pb_example(data, len, &in->limits, in->arena, ex, perr);
    }
}

static void count_event(struct ingest *in)
{
    if (in->n_events++ == 0)
        in->first_event_ns = spw_time_mono_ns();
    if (in->m_events)
        spw_counter_inc(in->m_events);
}

/* One raw event from Kafka: parsed into the open cycle or dead-lettered, offset noted. */
static void process_msg(struct ingest *in, const struct spw_kafka_msg *msg)
{
    count_event(in);
    struct spw_parse_error perr = {0};
    Sparrow__Example *ex = NULL;
    spw_err_t err;
    const void *data = msg->value ? msg->value : "";
    if (msg->len > in->limits.max_record_bytes) {
        perr.reason = SPW_REJECT_OVERSIZED;
        snprintf(perr.message, sizeof(perr.message), "record of %zu bytes above %zu", msg->len,
                 in->limits.max_record_bytes);
        err = SPW_ERR_INVALID;
    } else {
        err = parse_event(in, data, msg->len, &ex, &perr);
    }
    bool ok = err == SPW_OK && ex;
    if (ok)
        add_example(in, ex, in->format == SPW_FORMAT_PB ? data : NULL, msg->len);
    else if (err == SPW_ERR_INVALID)
        dead_letter(in, msg->key, msg->key_len, data, msg->len, msg->partition, msg->offset, &perr);
    /* the example is packed (or refused): its memory is reused by the next event, so the arena
     * only ever holds one event and running out of it is an error of that event */
    spw_arena_reset(in->arena);
    if (!ok && err != SPW_ERR_INVALID) {
        SPW_ERROR("event could not be processed", "error=%s offset=%" PRId64, spw_err_str(err),
                  msg->offset);
        in->fatal = true;
        return;
    }
    note_offset(in, msg->partition, msg->offset);
}

/* ---- setup ---- */

static int make_metrics(struct ingest *in)
{
    in->metrics = spw_metrics_new();
    if (!in->metrics)
        return -1;
    in->m_events = spw_metrics_counter_new(in->metrics, "sparrow_ingest_events_total",
                                           "Raw events read.", NULL);
    in->m_examples =
        spw_metrics_counter_new(in->metrics, "sparrow_ingest_examples_total",
                                "Valid examples written in ExampleBatch records.", NULL);
    in->m_batches = spw_metrics_counter_new(in->metrics, "sparrow_ingest_batches_total",
                                            "ExampleBatch records written.", NULL);
    in->m_delivery_failed =
        spw_metrics_counter_new(in->metrics, "sparrow_ingest_delivery_failed_total",
                                "Output or dead-letter records that could not be delivered.", NULL);
    for (int r = 1; r < SPW_REJECT__COUNT; r++) {
        char labels[64];
        snprintf(labels, sizeof(labels), "reason=\"%s\"",
                 spw_reject_reason_name((enum spw_reject_reason)r));
        in->m_rejected[r] = spw_metrics_counter_new(in->metrics, "sparrow_ingest_rejected_total",
                                                    "Events dead-lettered, by reason.", labels);
    }
    return 0;
}

static int open_input(struct ingest *in, const char *url)
{
    char errstr[512];
    if (is_file_url(url)) {
        in->in_label = strdup(url);
        in->reader =
            spw_reader_open(url + 5, in->format, &in->limits, in->schema, errstr, sizeof(errstr));
        if (!in->reader) {
            SPW_ERROR("cannot open input", "url=%s error=\"%s\"", url, errstr);
            return -1;
        }
        return 0;
    }
    char *bootstrap = NULL;
    if (parse_kafka_url(url, &bootstrap, &in->in_topic) != 0) {
        SPW_ERROR("bad input url", "url=\"%s\" expected=kafka://HOST:PORT/TOPIC|file:PATH", url);
        return -1;
    }
    in->in_label = strdup(in->in_topic);
    spw_kafka_props_t *props = spw_kafka_props_new();
    int rc = -1;
    if (!props || spw_kafka_props_from_config(props, in->cfg) != SPW_OK)
        goto out_free;
    if (bootstrap[0] && spw_kafka_props_set(props, "bootstrap.servers", bootstrap) != SPW_OK)
        goto out_free;
    const char *topics[1] = {in->in_topic};
    struct spw_kafka_consumer_opts copts = {
        .group_id = spw_config_str(in->cfg, "ingest.group"),
        .topics = topics,
        .n_topics = 1,
        .start_latest = strcmp(spw_config_str(in->cfg, "ingest.start"), "latest") == 0,
        .lost = spw_config_bool(in->cfg, "ingest.strict") ? SPW_KAFKA_LOST_FAIL
                                                          : SPW_KAFKA_LOST_EARLIEST,
        .metrics = in->metrics,
        .close_timeout_ms = (int)spw_config_duration_ms(in->cfg, "ingest.kafka.close.timeout"),
    };
    in->consumer = spw_kafka_consumer_new(props, &copts, errstr, sizeof(errstr));
    if (!in->consumer) {
        SPW_ERROR("kafka consumer failed", "error=\"%s\"", errstr);
        goto out_free;
    }
    rc = 0;
out_free:
    spw_kafka_props_destroy(props);
    free(bootstrap);
    return rc;
}

static int setup(struct ingest *in)
{
    spw_config_t *cfg = in->cfg;
    const char *in_url = spw_config_str(cfg, "ingest.in");
    const char *out_url = spw_config_str(cfg, "ingest.out");
    if (!in_url || !out_url) {
        SPW_ERROR("ingest.in and ingest.out are required", "in=%s out=%s", in_url ? in_url : "-",
                  out_url ? out_url : "-");
        return -1;
    }
    /* Bad kafka.* properties fail here, naming the property, before anything connects. */
    char errstr[512];
    spw_kafka_props_t *props = spw_kafka_props_new();
    if (!props)
        return -1;
    spw_err_t perr = spw_kafka_props_from_config(props, cfg);
    if (perr == SPW_OK)
        perr = spw_kafka_props_validate(props, errstr, sizeof(errstr));
    else
        snprintf(errstr, sizeof(errstr), "kafka.* properties: %s", spw_err_str(perr));
    spw_kafka_props_destroy(props);
    if (perr != SPW_OK) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        return -1;
    }
    spw_format_parse(spw_config_str(cfg, "ingest.format"), &in->format);
    spw_ingest_limits_from_config(cfg, "ingest", &in->limits);
    const char *schema = spw_config_str(cfg, "ingest.schema");
    if (schema) {
        in->schema = spw_schema_load(schema, spw_config_bool(cfg, "ingest.schema.strict"), errstr,
                                     sizeof(errstr));
        if (!in->schema) {
            SPW_ERROR("cannot load schema", "error=\"%s\"", errstr);
            return -1;
        }
    }
    in->batch_size = (size_t)spw_config_int(cfg, "ingest.batch.size");
    in->max_bytes = (size_t)spw_config_int(cfg, "ingest.batch.max_bytes");
    in->linger_ms = (uint64_t)spw_config_duration_ms(cfg, "ingest.batch.linger");
    const char *key_field = spw_config_str(cfg, "ingest.key.field");
    in->keyed = key_field && key_field[0];
    in->n_buckets = in->keyed ? (size_t)spw_config_int(cfg, "ingest.key.buckets") : 1;
    if (in->keyed &&
        spw_schema_field_id(in->schema, key_field, strlen(key_field), &in->key_field) != SPW_OK) {
        SPW_ERROR("ingest.key.field is not in the schema", "field=%s", key_field);
        return -1;
    }
    in->buckets = calloc(in->n_buckets, sizeof(*in->buckets));
    in->ring_cap = (size_t)spw_config_int(cfg, "ingest.inflight") + 1;
    in->ring = calloc(in->ring_cap, sizeof(*in->ring));
    /* Arena: the parsed example of one event (reset after every event; its bytes are packed into
     * a bucket at once). */
    in->arena = spw_arena_new(0, 512u << 20);
    if (!in->buckets || !in->ring || !in->arena || make_metrics(in) != 0) {
        SPW_ERROR("out of memory", "what=setup");
        return -1;
    }
    cycle_open(in);

    if (open_input(in, in_url) != 0 || sink_open(in, &in->out, out_url, "out") != 0)
        return -1;
    const char *dlq_url = spw_config_str(cfg, "ingest.dlq");
    char derived[4200];
    if (!dlq_url) {
        snprintf(derived, sizeof(derived), "%s.dlq", out_url);
        dlq_url = derived;
    }
    if (sink_open(in, &in->dlq, dlq_url, "dlq") != 0)
        return -1;
    SPW_INFO("ingest started",
             "in=%s out=%s dlq=%s format=%s batch=%zu linger_ms=%" PRIu64 " key_field=%s", in_url,
             out_url, dlq_url, spw_format_name(in->format), in->batch_size, in->linger_ms,
             in->keyed ? key_field : "-");
    return 0;
}

/* ---- loops ---- */

static void commit_now(struct ingest *in, bool sync)
{
    if (!in->consumer || in->stored_since_commit == 0)
        return;
    if (spw_kafka_consumer_commit(in->consumer, sync) == SPW_OK)
        in->stored_since_commit = 0;
}

static int run_kafka(struct ingest *in)
{
    uint64_t commit_ms = (uint64_t)spw_config_duration_ms(in->cfg, "ingest.commit.interval");
    uint64_t next_commit = spw_time_mono_ms() + commit_ms;
    int rc = 0;
    while (!spw_signal_stop_requested() && !in->fatal) {
        int wait = 100;
        bool pending = in->cycle_events > 0 || cycle_cur(in)->n_parts > 0;
        if (pending) {
            uint64_t due = in->cycle_start_ms + in->linger_ms, now = spw_time_mono_ms();
            wait = due > now ? (int)(due - now < 100 ? due - now : 100) : 0;
        }
        /* Up to POLL_BURST records already fetched are taken before the housekeeping below (the
         * clock, the producers' delivery reports, offsets). bench/ingest_bench.sh's protobuf
         * rate, housekeeping once per record: 0.50-0.78 M events/s in 3 runs; per burst:
         * 0.88-0.95 M in 3 runs. */
        spw_err_t err = SPW_OK;
        uint64_t events_before = in->n_events;
        for (int i = 0; i < POLL_BURST && err == SPW_OK && !in->fatal; i++) {
            struct spw_kafka_msg msg;
            err = spw_kafka_consumer_poll(in->consumer, i == 0 ? wait : 0, &msg);
            if (err == SPW_OK) {
                process_msg(in, &msg);
                spw_kafka_msg_release(&msg);
            }
        }
        uint64_t now_ns = spw_time_mono_ns(), now = now_ns / 1000000u;
        if (in->n_events > events_before)
            in->last_event_ns = now_ns;
        if (err == SPW_ERR_CORRUPT) {
            rc = EXIT_LOST;
            break;
        } else if (err != SPW_OK && err != SPW_ERR_TIMEOUT) {
            rc = 1;
            break;
        }
        pending = in->cycle_events > 0 || cycle_cur(in)->n_parts > 0;
        if (pending && now >= in->cycle_start_ms + in->linger_ms)
            flush_cycle(in);
        poll_sinks(in, 0);
        advance(in);
        if (now >= next_commit) {
            commit_now(in, false);
            next_commit = now + commit_ms;
        }
    }
    return rc;
}

static int run_file(struct ingest *in)
{
    for (;;) {
        if (spw_signal_stop_requested() || in->fatal)
            return in->fatal ? 1 : 0;
        Sparrow__Example *ex = NULL;
        struct spw_parse_error perr = {0};
        spw_arena_reset(in->arena); /* the previous record is packed or refused */
        spw_err_t err = spw_reader_next(in->reader, in->arena, &ex, &perr);
        if (err == SPW_ERR_EOF)
            return 0;
        count_event(in);
        int64_t index = (int64_t)spw_reader_records(in->reader) - 1;
        if (err == SPW_OK && ex) {
            size_t raw_len = 0;
            const void *raw =
                in->format == SPW_FORMAT_PB ? spw_reader_raw(in->reader, &raw_len) : NULL;
            add_example(in, ex, raw, raw_len);
        } else if (err == SPW_ERR_INVALID || err == SPW_ERR_TOO_BIG) {
            size_t len = 0;
            const void *raw = spw_reader_raw(in->reader, &len);
            if (err == SPW_ERR_TOO_BIG)
                perr.reason = SPW_REJECT_OVERSIZED;
            dead_letter(in, NULL, 0, raw ? raw : "", len, -1, index, &perr);
        } else {
            SPW_ERROR("input read failed", "error=%s position=\"%s\"", spw_err_str(err),
                      spw_reader_position(in->reader));
            return 1;
        }
        poll_sinks(in, 0);
        advance(in);
    }
}

/* Flush, deliver, store, commit: what SIGTERM and the end of a file input both do. */
static int drain(struct ingest *in)
{
    uint64_t timeout = (uint64_t)spw_config_duration_ms(in->cfg, "ingest.shutdown.timeout");
    uint64_t deadline = spw_time_mono_ms() + timeout;
    if (!in->fatal)
        flush_cycle(in);
    cycle_cur(in)->sealed = true;
    while (in->count > 1 && !in->fatal && spw_time_mono_ms() < deadline) {
        poll_sinks(in, 50);
        advance(in);
    }
    advance(in);
    bool complete = in->count <= 1 && !in->fatal;
    if (!complete)
        SPW_ERROR("shutdown with undelivered output", "cycles=%zu fatal=%d", in->count - 1,
                  in->fatal);
    commit_now(in, true);
    if (in->out.file)
        fflush(in->out.file);
    if (in->dlq.file)
        fflush(in->dlq.file);
    return complete ? 0 : 1;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: sparrow ingest --in kafka://HOST:PORT/TOPIC|file:PATH\n"
        "                      --out kafka://HOST:PORT/TOPIC|file:PATH [--dlq URL]\n"
        "                      [--format pb|json|criteo] [--group G] [--key-field NAME]\n"
        "                      [--batch-size N] [--linger 50ms] [--strict true]\n"
        "                      [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
        "Reads raw events, validates them into ExampleBatch records (batched per key bucket)\n"
        "and writes them out; invalid events go to the dead-letter output unchanged, with\n"
        "headers reason, source.topic, source.partition, source.offset, detail. Input offsets\n"
        "are committed only after the records holding their events were delivered\n"
        "(at-least-once). SIGTERM: stop, flush, commit, exit 0.\n\n"
        "properties:\n");
    spw_config_doc_help(spw_ingest_config_props, spw_ingest_config_n_props, out);
}

int spw_ingest_main(int argc, char **argv)
{
    char errstr[512];
    struct ingest in;
    memset(&in, 0, sizeof(in));
    in.cfg =
        spw_config_new(spw_ingest_config_props, spw_ingest_config_n_props, errstr, sizeof(errstr));
    if (!in.cfg) {
        fprintf(stderr, "sparrow ingest: %s\n", errstr);
        return 1;
    }
    int rc = 1;
    struct spw_cli_result res = {0};
    if (spw_cli_load(in.cfg, argc, argv, aliases, sizeof(aliases) / sizeof(aliases[0]), environ,
                     &res, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow ingest: %s\n(sparrow ingest --help lists the options)\n", errstr);
        rc = 2;
        goto out_destroy_cfg;
    }
    if (res.help || res.dump_config) {
        if (res.help)
            usage(stdout);
        else
            spw_config_dump(in.cfg, stdout);
        rc = 0;
        goto out_destroy_cfg;
    }
    enum spw_log_level level = SPW_LOG_INFO;
    spw_log_level_parse(spw_config_str(in.cfg, "log.level"), &level);
    spw_log_init("ingest", level);
    spw_signal_install();

    spw_http_t *http = NULL;
    if (setup(&in) != 0) {
        rc = 2;
        goto out_teardown;
    }
    if (spw_http_start_from_config(in.cfg, "ingest", in.metrics, 4096, &http, errstr,
                                   sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("http endpoint failed", "error=\"%s\"", errstr);
        goto out_teardown;
    }
    if (http)
        spw_http_set_ready(http, true, NULL);

    if (in.reader) {
        rc = run_file(&in);
        in.last_event_ns = spw_time_mono_ns(); /* the file's end (or the stop) */
    } else {
        rc = run_kafka(&in);
    }
    int drc = drain(&in);
    if (rc == 0)
        rc = drc;
    /* events_seconds: from taking the first event to having processed the last, as a bare
     * consumer is timed from its first record to its last (bench/ingest_bench.sh divides one by
     * the other) */
    SPW_INFO("ingest stopped",
             "events=%" PRIu64 " examples=%" PRIu64 " rejected=%" PRIu64
             " exit=%d events_seconds=%.6f",
             in.n_events, in.n_examples, in.n_rejected, rc,
             in.n_events ? (double)(in.last_event_ns - in.first_event_ns) / 1e9 : 0.0);

out_teardown:
    if (http)
        spw_http_set_ready(http, false, "stopping");
    if (in.consumer) {
        spw_kafka_consumer_close(in.consumer);
        spw_kafka_consumer_destroy(in.consumer);
    }
    sink_close(&in.out, 5000);
    sink_close(&in.dlq, 5000);
    spw_reader_close(in.reader);
    spw_http_stop(http);
    for (size_t b = 0; b < in.n_buckets && in.buckets; b++)
        free(in.buckets[b].buf.data);
    free(in.buckets);
    free(in.ring);
    free(in.in_topic);
    free(in.in_label);
    spw_arena_destroy(in.arena);
    spw_schema_destroy(in.schema);
    spw_metrics_destroy(in.metrics);
out_destroy_cfg:
    spw_config_destroy(in.cfg);
    return rc;
}
