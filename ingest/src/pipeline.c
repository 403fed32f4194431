/* The ingest role: the object's life (new, run, destroy), its input (a file reader or a Kafka
 * group consumer), the run loops and the drain that SIGTERM and the end of a file both lead to. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest_int.h"
#include "role_int.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

/* ---- events ---- */

/* The format of a Kafka input under auto, from its first non-empty record (logged). SPW_OK,
 * or SPW_ERR_UNSUPPORTED (the run fails) when it looks like none. */
static spw_err_t detect_format(struct spw_ingest *in, const void *data, size_t len)
{
    enum spw_format looks;
    char why[128];
    spw_err_t err = spw_format_sniff(data, len, &looks, why, sizeof(why));
    if (err == SPW_ERR_EOF)
        return SPW_OK; /* a blank record tells nothing: it is judged as the next will be */
    const char *comp = spw_format_compression(data, len);
    if (err != SPW_OK || comp) {
        SPW_ERROR("input format unknown",
                  "in=%s offset=0 error=\"cannot tell the format of the first record: %s; set "
                  "ingest.format\"",
                  in->in_label, comp ? "it is compressed" : why);
        spw_ingest__fail_run(in, SPW_ERR_UNSUPPORTED);
        return SPW_ERR_UNSUPPORTED;
    }
    in->format = looks;
    SPW_INFO("input format detected", "in=%s format=%s (from the first record)", in->in_label,
             spw_format_name(looks));
    return SPW_OK;
}

static spw_err_t parse_event(struct spw_ingest *in, const void *data, size_t len,
                             Sparrow__Example **ex, struct spw_parse_error *perr)
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

static void count_event(struct spw_ingest *in)
{
    if (in->n_events++ == 0)
        in->first_event_ns = spw_time_mono_ns();
    if (in->m_events)
        spw_counter_inc(in->m_events);
}

/* One raw event from Kafka: parsed into the open cycle or dead-lettered, offset noted. */
static void process_msg(struct spw_ingest *in, const struct spw_kafka_msg *msg)
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
        if (in->format == SPW_FORMAT_AUTO && detect_format(in, data, msg->len) != SPW_OK)
            return;
        err = in->format == SPW_FORMAT_AUTO
                  ? spw_ingest__fail(&perr, SPW_REJECT_UNDECODABLE, "blank record")
                  : parse_event(in, data, msg->len, &ex, &perr);
    }
    bool ok = err == SPW_OK && ex;
    if (ok)
        spw_ingest__add_example(in, ex, in->format == SPW_FORMAT_PB ? data : NULL, msg->len,
                                msg->partition, msg->offset);
    else if (err == SPW_ERR_INVALID)
        spw_ingest__dead_letter(in, msg->key, msg->key_len, data, msg->len, msg->partition,
                                msg->offset, &perr);
    /* the example is packed (or refused): its memory is reused by the next event, so the arena
     * only ever holds one event and running out of it is an error of that event */
    spw_arena_reset(in->arena);
    if (!ok && err != SPW_ERR_INVALID) {
        SPW_ERROR("event could not be processed", "error=%s offset=%" PRId64, spw_err_str(err),
                  msg->offset);
        spw_ingest__fail_run(in, err == SPW_OK ? SPW_ERR_STATE : err);
        return;
    }
    spw_ingest__note_offset(in, msg->partition, msg->offset);
}

/* ---- setup ---- */

static void make_metrics(struct spw_ingest *in)
{
    if (!in->metrics)
        return;
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
}

static spw_err_t open_input(struct spw_ingest *in, const struct spw_ingest_conf *conf, char *errstr,
                            size_t errstr_size)
{
    const char *url = conf->in;
    char kerr[512];
    if (spw_ingest__is_file_url(url)) {
        in->in_label = strdup(url);
        if (!in->in_label) {
            snprintf(errstr, errstr_size, "out of memory");
            return SPW_ERR_NOMEM;
        }
        in->reader =
            spw_reader_open(url + 5, in->format, &in->limits, in->schema, kerr, sizeof(kerr));
        if (!in->reader) {
            snprintf(errstr, errstr_size, "cannot open input url=%s: %s", url, kerr);
            return SPW_ERR_IO;
        }
        return SPW_OK;
    }
    char *bootstrap = NULL;
    spw_err_t err = spw_ingest__parse_kafka_url(url, &bootstrap, &in->in_topic);
    if (err != SPW_OK) {
        snprintf(errstr, errstr_size,
                 "bad input url url=\"%s\" expected=kafka://HOST:PORT/TOPIC|file:PATH", url);
        return err;
    }
    err = SPW_ERR_NOMEM;
    snprintf(errstr, errstr_size, "out of memory");
    in->in_label = strdup(in->in_topic);
    spw_kafka_props_t *props = spw_kafka_props_new();
    if (!in->in_label || !props ||
        (conf->kafka_config && spw_kafka_props_from_config(props, conf->kafka_config) != SPW_OK))
        goto out_free;
    if (bootstrap[0] && spw_kafka_props_set(props, "bootstrap.servers", bootstrap) != SPW_OK)
        goto out_free;
    const char *topics[1] = {in->in_topic};
    struct spw_kafka_consumer_opts copts = {
        .group_id = conf->group,
        .topics = topics,
        .n_topics = 1,
        .start_latest = conf->start_latest,
        .lost = conf->strict ? SPW_KAFKA_LOST_FAIL : SPW_KAFKA_LOST_EARLIEST,
        .metrics = in->metrics,
        .close_timeout_ms = conf->kafka_close_timeout_ms,
    };
    in->consumer = spw_kafka_consumer_new(props, &copts, kerr, sizeof(kerr));
    if (!in->consumer) {
        snprintf(errstr, errstr_size, "kafka consumer failed: %s", kerr);
        err = SPW_ERR_KAFKA;
        goto out_free;
    }
    err = SPW_OK;
    errstr[0] = '\0';
out_free:
    spw_kafka_props_destroy(props);
    free(bootstrap);
    return err;
}

spw_ingest_t *spw_ingest_new(const struct spw_ingest_conf *conf, char *errstr, size_t errstr_size)
{
    struct spw_ingest *in = calloc(1, sizeof(*in));
    if (!in) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    in->format = conf->format;
    in->max_reject_ratio = conf->max_reject_ratio;
    in->limits = conf->limits;
    in->metrics = conf->metrics;
    in->http = conf->http;
    in->commit_interval_ms = conf->commit_interval_ms;
    in->shutdown_timeout_ms = conf->shutdown_timeout_ms;
    char why[512];
    if (conf->schema) {
        in->schema = spw_schema_load(conf->schema, conf->schema_strict, why, sizeof(why));
        if (!in->schema) {
            snprintf(errstr, errstr_size, "cannot load schema: %s", why);
            goto out_destroy;
        }
    }
    in->batch_size = conf->batch_size;
    in->max_bytes = conf->max_bytes;
    in->linger_ms = conf->linger_ms;
    const char *key_field = conf->key_field;
    in->keyed = key_field && key_field[0];
    in->by_source = !in->keyed && !spw_ingest__is_file_url(conf->in);
    in->n_buckets = in->keyed || in->by_source ? conf->key_buckets : 1;
    if (in->keyed &&
        spw_schema_field_id(in->schema, key_field, strlen(key_field), &in->key_field) != SPW_OK) {
        snprintf(errstr, errstr_size, "ingest.key.field is not in the schema field=%s", key_field);
        goto out_destroy;
    }
    in->buckets = calloc(in->n_buckets, sizeof(*in->buckets));
    /* Arena: the parsed example of one event (reset after every event; its bytes are packed into
     * a bucket at once). */
    in->arena = spw_arena_new(0, 512u << 20);
    if (!in->buckets || !in->arena ||
        spw_ingest__ring_init(&in->ring, conf->inflight + 1) != SPW_OK) {
        snprintf(errstr, errstr_size, "out of memory what=setup");
        goto out_destroy;
    }
    make_metrics(in);
    spw_ingest__ring_open(&in->ring);

    if (open_input(in, conf, errstr, errstr_size) != SPW_OK ||
        spw_ingest__sink_open(in, &in->out, conf->out, "out", conf->kafka_config, errstr,
                              errstr_size) != SPW_OK)
        goto out_destroy;
    const char *dlq_url = conf->dlq;
    char derived[4200];
    if (!dlq_url) {
        snprintf(derived, sizeof(derived), "%s.dlq", conf->out);
        dlq_url = derived;
    }
    if (spw_ingest__sink_open(in, &in->dlq, dlq_url, "dlq", conf->kafka_config, errstr,
                              errstr_size) != SPW_OK)
        goto out_destroy;
    SPW_INFO("ingest started",
             "in=%s out=%s dlq=%s format=%s batch=%zu linger_ms=%" PRIu64 " key_field=%s", conf->in,
             conf->out, dlq_url, spw_format_name(in->format), in->batch_size, in->linger_ms,
             in->keyed ? key_field : "-");
    return in;
out_destroy:
    spw_ingest_destroy(in);
    return NULL;
}

/* ---- loops ---- */

static void commit_now(struct spw_ingest *in, bool sync)
{
    if (!in->consumer || in->stored_since_commit == 0)
        return;
    if (spw_kafka_consumer_commit(in->consumer, sync) == SPW_OK)
        in->stored_since_commit = 0;
}

static bool cycle_pending(struct spw_ingest *in)
{
    return in->cycle_events > 0 || spw_ingest__ring_cur(&in->ring)->n_parts > 0;
}

/* The cause of a bad share of rejects, for the message: the format read against the format the
 * dead letters look like is not known for Kafka input; what was read is. */
static void kafka_explain(const struct spw_ingest *in, char *buf, size_t size)
{
    snprintf(buf, size, "the events were read as ingest.format=%s; check the topic's format",
             spw_format_name(in->format));
}

/* A Kafka input is judged once, when SPW_INGEST_REJECT_CHECK_EVENTS events were read: a wrong
 * format shows at once, while later bad events of a healthy stream must not stop it. */
static void check_kafka_rejects(struct spw_ingest *in)
{
    if (in->reject_checked || in->n_events < SPW_INGEST_REJECT_CHECK_EVENTS)
        return;
    in->reject_checked = true;
    char explain[256], errstr[768];
    kafka_explain(in, explain, sizeof(explain));
    if (spw_ingest_reject_check(in->in_label, in->n_events, in->n_rejected, in->rejected_by,
                                in->max_reject_ratio, "ingest.max_reject_ratio", explain, errstr,
                                sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("input rejected", "error=\"%s (judged over the first %u events)\"", errstr,
                  SPW_INGEST_REJECT_CHECK_EVENTS);
        spw_ingest__fail_run(in, SPW_ERR_INVALID);
    } else {
        SPW_INFO("input reject share checked",
                 "events=%" PRIu64 " rejected=%" PRIu64
                 " max_reject_ratio=%g (from now on rejects are only counted)",
                 in->n_events, in->n_rejected, in->max_reject_ratio);
    }
}

static spw_err_t run_kafka(struct spw_ingest *in)
{
    uint64_t next_commit = spw_time_mono_ms() + in->commit_interval_ms;
    while (!spw_signal_stop_requested() && in->err == SPW_OK) {
        int wait = 100;
        if (cycle_pending(in)) {
            uint64_t due = in->cycle_start_ms + in->linger_ms, now = spw_time_mono_ms();
            wait = due > now ? (int)(due - now < 100 ? due - now : 100) : 0;
        }
        /* Up to POLL_BURST records already fetched are taken before the housekeeping below (the
         * clock, the producers' delivery reports, offsets). bench/ingest_bench.sh's protobuf
         * rate, housekeeping once per record: 0.50-0.78 M events/s in 3 runs; per burst:
         * 0.88-0.95 M in 3 runs. */
        spw_err_t err = SPW_OK;
        uint64_t events_before = in->n_events;
        for (int i = 0; i < SPW_INGEST__POLL_BURST && err == SPW_OK && in->err == SPW_OK; i++) {
            struct spw_kafka_msg msg;
            err = spw_kafka_consumer_poll(in->consumer, i == 0 ? wait : 0, &msg);
            if (err == SPW_OK) {
                process_msg(in, &msg);
                spw_kafka_msg_release(&msg);
                check_kafka_rejects(in);
            }
        }
        uint64_t now_ns = spw_time_mono_ns(), now = now_ns / 1000000u;
        if (in->n_events > events_before)
            in->last_event_ns = now_ns;
        if (err != SPW_OK && err != SPW_ERR_TIMEOUT)
            return err; /* SPW_ERR_CORRUPT: offsets lost (strict), logged by the consumer */
        if (cycle_pending(in) && now >= in->cycle_start_ms + in->linger_ms)
            spw_ingest__flush_cycle(in);
        spw_ingest__poll_sinks(in, 0);
        spw_ingest__advance(in);
        if (now >= next_commit) {
            commit_now(in, false);
            next_commit = now + in->commit_interval_ms;
        }
    }
    return SPW_OK; /* a failure is in->err, which drain reports */
}

static spw_err_t run_file(struct spw_ingest *in)
{
    for (;;) {
        if (spw_signal_stop_requested() || in->err != SPW_OK)
            return in->err;
        Sparrow__Example *ex = NULL;
        struct spw_parse_error perr = {0};
        spw_arena_reset(in->arena); /* the previous record is packed or refused */
        spw_err_t err = spw_reader_next(in->reader, in->arena, &ex, &perr);
        if (err == SPW_ERR_EOF)
            return SPW_OK;
        count_event(in);
        int64_t index = (int64_t)spw_reader_records(in->reader) - 1;
        if (err == SPW_OK && ex) {
            size_t raw_len = 0;
            const void *raw = spw_reader_format(in->reader) == SPW_FORMAT_PB
                                  ? spw_reader_raw(in->reader, &raw_len)
                                  : NULL;
            spw_ingest__add_example(in, ex, raw, raw_len, -1, 0);
        } else if (err == SPW_ERR_INVALID || err == SPW_ERR_TOO_BIG) {
            size_t len = 0;
            const void *raw = spw_reader_raw(in->reader, &len);
            if (err == SPW_ERR_TOO_BIG)
                perr.reason = SPW_REJECT_OVERSIZED;
            spw_ingest__dead_letter(in, NULL, 0, raw ? raw : "", len, -1, index, &perr);
        } else {
            SPW_ERROR("input read failed", "in=%s error=%s position=\"%s\" detail=\"%s\"",
                      in->in_label, spw_err_str(err), spw_reader_position(in->reader),
                      perr.message);
            return err == SPW_OK ? SPW_ERR_STATE : err;
        }
        spw_ingest__poll_sinks(in, 0);
        spw_ingest__advance(in);
    }
}

/* At the end of a file: no example, or too many rejects, is a failed run, the likely cause named
 * (the output is still drained: the dead letters show what was refused). */
static spw_err_t check_file_rejects(struct spw_ingest *in)
{
    char explain[384], errstr[1024];
    spw_reader_explain(in->reader, "ingest.format", explain, sizeof(explain));
    if (spw_ingest_reject_check(in->in_label, in->n_events, in->n_rejected, in->rejected_by,
                                in->max_reject_ratio, "ingest.max_reject_ratio", explain, errstr,
                                sizeof(errstr)) == SPW_OK)
        return SPW_OK;
    SPW_ERROR("input rejected", "error=\"%s\"", errstr);
    return SPW_ERR_INVALID;
}

/* Flush, deliver, store, commit: what SIGTERM and the end of a file input both do. SPW_OK when
 * everything sent was delivered and stored. */
static spw_err_t drain(struct spw_ingest *in)
{
    uint64_t deadline = spw_time_mono_ms() + in->shutdown_timeout_ms;
    if (in->err == SPW_OK)
        spw_ingest__flush_cycle(in);
    spw_ingest__ring_cur(&in->ring)->sealed = true;
    while (in->ring.count > 1 && in->err == SPW_OK && spw_time_mono_ms() < deadline) {
        spw_ingest__poll_sinks(in, 50);
        spw_ingest__advance(in);
    }
    spw_ingest__advance(in);
    bool complete = in->ring.count <= 1 && in->err == SPW_OK;
    if (!complete)
        SPW_ERROR("shutdown with undelivered output", "cycles=%zu fatal=%d", in->ring.count - 1,
                  in->err != SPW_OK);
    commit_now(in, true);
    if (in->out.file)
        fflush(in->out.file);
    if (in->dlq.file)
        fflush(in->dlq.file);
    if (complete)
        return SPW_OK;
    return in->err != SPW_OK ? in->err : SPW_ERR_TIMEOUT;
}

spw_err_t spw_ingest_run(spw_ingest_t *in)
{
    if (in->http)
        spw_http_set_ready(in->http, true, NULL);
    spw_err_t err;
    if (in->reader) {
        err = run_file(in);
        in->last_event_ns = spw_time_mono_ns(); /* the file's end (or the stop) */
        if (err == SPW_OK && !spw_signal_stop_requested())
            err = check_file_rejects(in);
    } else {
        err = run_kafka(in);
    }
    spw_err_t derr = drain(in);
    if (in->http)
        spw_http_set_ready(in->http, false, "stopping");
    return err != SPW_OK ? err : derr;
}

void spw_ingest_stats(const spw_ingest_t *in, struct spw_ingest_stats *stats)
{
    stats->events = in->n_events;
    stats->examples = in->n_examples;
    stats->rejected = in->n_rejected;
    /* from taking the first event to having processed the last, as a bare consumer is timed
     * from its first record to its last (bench/ingest_bench.sh divides one by the other) */
    stats->events_seconds = in->n_events && in->last_event_ns >= in->first_event_ns
                                ? (double)(in->last_event_ns - in->first_event_ns) / 1e9
                                : 0.0;
}

void spw_ingest_destroy(spw_ingest_t *in)
{
    if (!in)
        return;
    if (in->consumer) {
        spw_kafka_consumer_close(in->consumer);
        spw_kafka_consumer_destroy(in->consumer);
    }
    spw_ingest__sink_close(&in->out, 5000);
    spw_ingest__sink_close(&in->dlq, 5000);
    spw_reader_close(in->reader);
    for (size_t b = 0; b < in->n_buckets && in->buckets; b++)
        free(in->buckets[b].buf.data);
    free(in->buckets);
    spw_ingest__ring_fini(&in->ring);
    free(in->in_topic);
    free(in->in_label);
    spw_arena_destroy(in->arena);
    spw_schema_destroy(in->schema);
    free(in);
}
