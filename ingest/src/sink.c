/* The ingest's outputs: a Kafka topic with its own producer, or a file (length-delimited
 * ExampleBatch records, or dead-letter lines); every record accounted to the open flush cycle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "role_int.h"
#include "sparrow/log.h"

spw_err_t spw_ingest__parse_kafka_url(const char *url, char **bootstrap, char **topic)
{
    *bootstrap = *topic = NULL;
    if (strncmp(url, "kafka://", 8) != 0)
        return SPW_ERR_INVALID;
    const char *rest = url + 8;
    const char *slash = strrchr(rest, '/');
    if (!slash || !slash[1])
        return SPW_ERR_INVALID;
    *bootstrap = strndup(rest, (size_t)(slash - rest));
    *topic = strdup(slash + 1);
    if (!*bootstrap || !*topic) {
        free(*bootstrap);
        free(*topic);
        *bootstrap = *topic = NULL;
        return SPW_ERR_NOMEM;
    }
    return SPW_OK;
}

bool spw_ingest__is_file_url(const char *url)
{
    return strncmp(url, "file:", 5) == 0 && url[5];
}

/* A producer's delivery report: msg_opaque is the cycle the record was sent in. */
static void cycle_delivered(void *opaque, void *msg_opaque, spw_err_t err, int32_t partition,
                            int64_t offset)
{
    struct spw_ingest *in = opaque;
    struct spw_ingest__cycle *c = msg_opaque;
    (void)partition;
    (void)offset;
    c->outstanding--;
    if (err != SPW_OK) {
        c->failed = true;
        if (in->m_delivery_failed)
            spw_counter_inc(in->m_delivery_failed);
    }
}

spw_err_t spw_ingest__sink_open(struct spw_ingest *in, struct spw_ingest__sink *s, const char *url,
                                const char *what, const spw_config_t *kafka_config, char *errstr,
                                size_t errstr_size)
{
    if (spw_ingest__is_file_url(url)) {
        s->path = strdup(url + 5);
        if (!s->path) {
            snprintf(errstr, errstr_size, "out of memory");
            return SPW_ERR_NOMEM;
        }
        s->file = strcmp(s->path, "-") == 0 ? stdout : fopen(s->path, "wb");
        if (!s->file) {
            snprintf(errstr, errstr_size, "cannot open output what=%s path=%s: %s", what, s->path,
                     strerror(errno));
            return SPW_ERR_IO;
        }
        return SPW_OK;
    }
    char *bootstrap = NULL;
    spw_err_t err = spw_ingest__parse_kafka_url(url, &bootstrap, &s->topic);
    if (err != SPW_OK) {
        snprintf(errstr, errstr_size,
                 "bad output url what=%s url=\"%s\" expected=kafka://HOST:PORT/TOPIC|file:PATH",
                 what, url);
        return err;
    }
    spw_kafka_props_t *props = spw_kafka_props_new();
    err = SPW_ERR_NOMEM;
    snprintf(errstr, errstr_size, "out of memory");
    if (!props || (kafka_config && spw_kafka_props_from_config(props, kafka_config) != SPW_OK))
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
    char kerr[512];
    s->producer = spw_kafka_producer_new(props, &popts, kerr, sizeof(kerr));
    if (!s->producer) {
        snprintf(errstr, errstr_size, "kafka producer failed what=%s: %s", what, kerr);
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

void spw_ingest__sink_close(struct spw_ingest__sink *s, uint64_t timeout_ms)
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

spw_err_t spw_ingest__sink_send(struct spw_ingest *in, struct spw_ingest__sink *s, const void *key,
                                size_t key_len, const void *value, size_t len,
                                const struct spw_kafka_header *hdrs, size_t n_hdrs)
{
    struct spw_ingest__cycle *c = spw_ingest__ring_cur(&in->ring);
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
            return SPW_ERR_IO;
        }
        return SPW_OK;
    }
    c->outstanding++;
    spw_err_t err = spw_kafka_producer_send(s->producer, s->topic, -1, key, key_len, value, len,
                                            hdrs, n_hdrs, c);
    if (err != SPW_OK) {
        c->outstanding--;
        c->failed = true;
    }
    return err;
}

void spw_ingest__poll_sinks(struct spw_ingest *in, int timeout_ms)
{
    if (in->out.producer)
        spw_kafka_producer_poll(in->out.producer, timeout_ms);
    if (in->dlq.producer)
        spw_kafka_producer_poll(in->dlq.producer, in->out.producer ? 0 : timeout_ms);
}
