/* Idempotent or transactional producer: every delivery report checked, failed records re-sent a
 * bounded number of times and then surfaced, headers, flush on shutdown. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kafka_int.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define RESEND_DEFAULT      3
#define QUEUE_FULL_WAIT_MS  50
#define TXN_INIT_TIMEOUT_MS 30000
#define TXN_RETRIES         10

/* Owned by one thread: the one that sends, polls and flushes (delivery reports run there). */
struct spw_kafka_producer {
    rd_kafka_t *rk;
    spw_kafka_delivery_fn on_delivery;
    void *opaque;
    int resend_max;
    bool transactional;
    uint64_t sent, reported, delivered, failed, resent;
    spw_counter_t *m_delivered, *m_failed, *m_resent;
};

/* Per record: the caller's opaque and the sends so far (rides in the message's _private). */
struct record_ctx {
    void *msg_opaque;
    int attempts;
};

static void inc(spw_counter_t *c)
{
    if (c)
        spw_counter_inc(c);
}

static bool resendable(rd_kafka_resp_err_t err)
{
    /* Errors where sending the same bytes again can succeed; others (too large, unknown topic,
     * authorisation) would fail again. */
    switch (err) {
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        return true;
    default:
        return false;
    }
}

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    spw_kafka_producer_t *p = opaque;
    struct record_ctx *ctx = rkm->_private;
    if (rkm->err && !p->transactional && ctx->attempts <= p->resend_max && resendable(rkm->err) &&
        !rd_kafka_fatal_error(rk, NULL, 0)) {
        rd_kafka_headers_t *hdrs = NULL, *copy = NULL;
        if (rd_kafka_message_headers(rkm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR)
            copy = rd_kafka_headers_copy(hdrs);
        ctx->attempts++;
        rd_kafka_resp_err_t err = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(rd_kafka_topic_name(rkm->rkt)),
            RD_KAFKA_V_PARTITION(rkm->partition), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(rkm->key, rkm->key_len), RD_KAFKA_V_VALUE(rkm->payload, rkm->len),
            RD_KAFKA_V_HEADERS(copy), RD_KAFKA_V_OPAQUE(ctx), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            p->resent++;
            inc(p->m_resent);
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "kafka delivery failed, re-sending",
                                "topic=%s attempt=%d error=\"%s\"", rd_kafka_topic_name(rkm->rkt),
                                ctx->attempts, rd_kafka_err2str(rkm->err));
            return; /* still outstanding */
        }
        if (copy)
            rd_kafka_headers_destroy(copy);
    }
    p->reported++;
    spw_err_t err = SPW_OK;
    if (rkm->err) {
        err = SPW_ERR_KAFKA;
        p->failed++;
        inc(p->m_failed);
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 1000, "kafka delivery failed",
                            "topic=%s partition=%" PRId32 " attempts=%d error=\"%s\"",
                            rd_kafka_topic_name(rkm->rkt), rkm->partition, ctx->attempts,
                            rd_kafka_err2str(rkm->err));
    } else {
        p->delivered++;
        inc(p->m_delivered);
    }
    if (p->on_delivery)
        p->on_delivery(p->opaque, ctx->msg_opaque, err, rkm->partition, rkm->offset);
    free(ctx);
}

static void make_metrics(spw_kafka_producer_t *p, spw_metrics_t *reg, const char *labels)
{
    if (!reg)
        return;
    const char *l = labels && labels[0] ? labels : NULL;
    p->m_delivered = spw_metrics_counter_new(reg, "sparrow_kafka_produced_total",
                                             "Records delivered to Kafka.", l);
    p->m_failed = spw_metrics_counter_new(
        reg, "sparrow_kafka_produce_failed_total",
        "Records whose delivery finally failed (after re-sends); surfaced to the caller.", l);
    p->m_resent = spw_metrics_counter_new(reg, "sparrow_kafka_produce_resent_total",
                                          "Re-sends of records whose delivery had failed.", l);
}

spw_kafka_producer_t *spw_kafka_producer_new(const spw_kafka_props_t *props,
                                             const struct spw_kafka_producer_opts *opts,
                                             char *errstr, size_t errstr_size)
{
    spw_kafka_producer_t *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    p->on_delivery = opts->on_delivery;
    p->opaque = opts->opaque;
    p->resend_max = opts->resend_max > 0 ? opts->resend_max : RESEND_DEFAULT;
    p->transactional = opts->transactional_id != NULL;
    make_metrics(p, opts->metrics, opts->metrics_labels);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    spw_kafka__conf_route_log(conf);
    /* lz4 unless kafka.compression.type says otherwise: an example batch shrinks 2.3x (gen's
     * stream), so the brokers store, copy and send less, for a decompression on the consumer far
     * cheaper than the copies it saves; librdkafka sends a batch that does not shrink as it is. */
    if (spw_kafka__conf_force(conf, "compression.type", "lz4", errstr, errstr_size) ||
        spw_kafka__conf_apply(conf, props, errstr, errstr_size) != SPW_OK)
        goto out_destroy_conf;
    if (spw_kafka__conf_force(conf, "enable.idempotence", "true", errstr, errstr_size) ||
        spw_kafka__conf_force(conf, "acks", "all", errstr, errstr_size))
        goto out_destroy_conf;
    if (p->transactional && spw_kafka__conf_force(conf, "transactional.id", opts->transactional_id,
                                                  errstr, errstr_size))
        goto out_destroy_conf;
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_opaque(conf, p);

    char rkerr[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, rkerr, sizeof(rkerr));
    if (!p->rk) {
        snprintf(errstr, errstr_size, "kafka producer: %s", rkerr);
        goto out_destroy_conf;
    }
    if (p->transactional) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(p->rk, TXN_INIT_TIMEOUT_MS);
        if (e) {
            snprintf(errstr, errstr_size, "kafka init_transactions: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
            rd_kafka_destroy(p->rk);
            free(p);
            return NULL;
        }
    }
    return p;

out_destroy_conf:
    rd_kafka_conf_destroy(conf);
    free(p);
    return NULL;
}

spw_err_t spw_kafka_producer_send(spw_kafka_producer_t *p, const char *topic, int32_t partition,
                                  const void *key, size_t key_len, const void *value, size_t len,
                                  const struct spw_kafka_header *headers, size_t n_headers,
                                  void *msg_opaque)
{
    struct record_ctx *ctx = malloc(sizeof(*ctx));
    if (!ctx)
        return SPW_ERR_NOMEM;
    ctx->msg_opaque = msg_opaque;
    ctx->attempts = 1;
    for (;;) {
        rd_kafka_headers_t *hdrs = NULL;
        if (n_headers) {
            hdrs = rd_kafka_headers_new(n_headers);
            for (size_t i = 0; i < n_headers; i++)
                rd_kafka_header_add(hdrs, headers[i].name, -1, headers[i].value,
                                    (ssize_t)headers[i].len);
        }
        rd_kafka_resp_err_t err =
            rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *)value, len),
                              RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(ctx), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            p->sent++;
            return SPW_OK; /* ctx is freed by the final delivery report */
        }
        if (hdrs)
            rd_kafka_headers_destroy(hdrs);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            /* Backpressure: serve delivery reports until there is room. */
            rd_kafka_poll(p->rk, QUEUE_FULL_WAIT_MS);
            continue;
        }
        free(ctx);
        if (err == RD_KAFKA_RESP_ERR__FATAL) {
            char fatal[512];
            rd_kafka_fatal_error(p->rk, fatal, sizeof(fatal));
            SPW_ERROR("kafka producer fatal error", "error=\"%s\"", fatal);
            return SPW_ERR_STOPPED;
        }
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 1000, "kafka produce refused", "topic=%s error=\"%s\"",
                            topic, rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
}

int spw_kafka_producer_poll(spw_kafka_producer_t *p, int timeout_ms)
{
    return rd_kafka_poll(p->rk, timeout_ms);
}

spw_err_t spw_kafka_producer_flush(spw_kafka_producer_t *p, int timeout_ms)
{
    uint64_t deadline = spw_time_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    /* rd_kafka_flush serves reports; re-sends made from them are waited for too. */
    while (p->reported < p->sent) {
        uint64_t now = spw_time_mono_ms();
        if (now >= deadline)
            return SPW_ERR_TIMEOUT;
        rd_kafka_flush(p->rk, (int)(deadline - now < 100 ? deadline - now : 100));
    }
    return SPW_OK;
}

uint64_t spw_kafka_producer_outstanding(const spw_kafka_producer_t *p)
{
    return p->sent - p->reported;
}

uint64_t spw_kafka_producer_delivered(const spw_kafka_producer_t *p)
{
    return p->delivered;
}

uint64_t spw_kafka_producer_failed(const spw_kafka_producer_t *p)
{
    return p->failed;
}

/* Converts a transactional API error, retrying retriable ones by calling again (fn != NULL). */
static spw_err_t txn_err(spw_kafka_producer_t *p, const char *what, rd_kafka_error_t *e)
{
    spw_err_t ret = SPW_ERR_KAFKA;
    if (rd_kafka_error_txn_requires_abort(e))
        ret = SPW_ERR_STATE;
    else if (rd_kafka_error_is_retriable(e))
        ret = SPW_ERR_TIMEOUT;
    SPW_LOG(ret == SPW_ERR_TIMEOUT ? SPW_LOG_WARN : SPW_LOG_ERROR, "kafka transaction error",
            "op=%s error=\"%s\" retriable=%d abortable=%d fatal=%d", what, rd_kafka_error_string(e),
            rd_kafka_error_is_retriable(e), rd_kafka_error_txn_requires_abort(e),
            rd_kafka_error_is_fatal(e));
    rd_kafka_error_destroy(e);
    (void)p;
    return ret;
}

spw_err_t spw_kafka_producer_txn_begin(spw_kafka_producer_t *p)
{
    if (!p->transactional)
        return SPW_ERR_STATE;
    rd_kafka_error_t *e = rd_kafka_begin_transaction(p->rk);
    return e ? txn_err(p, "begin", e) : SPW_OK;
}

spw_err_t spw_kafka_producer_txn_send_offsets(spw_kafka_producer_t *p,
                                              spw_kafka_consumer_t *consumer,
                                              const struct spw_kafka_partition *offsets, size_t n,
                                              int timeout_ms)
{
    if (!p->transactional)
        return SPW_ERR_STATE;
    rd_kafka_t *crk = spw_kafka__consumer_rk(consumer);
    rd_kafka_topic_partition_list_t *list = NULL;
    if (offsets) {
        list = spw_kafka__parts_to_list(offsets, n);
    } else {
        if (rd_kafka_assignment(crk, &list) != RD_KAFKA_RESP_ERR_NO_ERROR)
            return SPW_ERR_KAFKA;
        rd_kafka_position(crk, list);
    }
    rd_kafka_consumer_group_metadata_t *cgmd = rd_kafka_consumer_group_metadata(crk);
    spw_err_t ret = SPW_OK;
    for (int attempt = 0; attempt < TXN_RETRIES; attempt++) {
        rd_kafka_error_t *e = rd_kafka_send_offsets_to_transaction(p->rk, list, cgmd, timeout_ms);
        ret = e ? txn_err(p, "send_offsets", e) : SPW_OK;
        if (ret != SPW_ERR_TIMEOUT)
            break;
    }
    rd_kafka_consumer_group_metadata_destroy(cgmd);
    rd_kafka_topic_partition_list_destroy(list);
    return ret;
}

spw_err_t spw_kafka_producer_txn_commit(spw_kafka_producer_t *p, int timeout_ms)
{
    if (!p->transactional)
        return SPW_ERR_STATE;
    spw_err_t ret = SPW_OK;
    for (int attempt = 0; attempt < TXN_RETRIES; attempt++) {
        rd_kafka_error_t *e = rd_kafka_commit_transaction(p->rk, timeout_ms);
        /* commit_transaction flushes: serve the delivery reports it produced. */
        rd_kafka_poll(p->rk, 0);
        ret = e ? txn_err(p, "commit", e) : SPW_OK;
        if (ret != SPW_ERR_TIMEOUT)
            break;
    }
    return ret;
}

spw_err_t spw_kafka_producer_txn_abort(spw_kafka_producer_t *p, int timeout_ms)
{
    if (!p->transactional)
        return SPW_ERR_STATE;
    spw_err_t ret = SPW_OK;
    for (int attempt = 0; attempt < TXN_RETRIES; attempt++) {
        rd_kafka_error_t *e = rd_kafka_abort_transaction(p->rk, timeout_ms);
        rd_kafka_poll(p->rk, 0);
        ret = e ? txn_err(p, "abort", e) : SPW_OK;
        if (ret != SPW_ERR_TIMEOUT)
            break;
    }
    return ret;
}

void spw_kafka_producer_destroy(spw_kafka_producer_t *p, int timeout_ms)
{
    if (!p)
        return;
    if (spw_kafka_producer_flush(p, timeout_ms) != SPW_OK) {
        SPW_ERROR("kafka producer closing with undelivered records", "outstanding=%" PRIu64,
                  p->sent - p->reported);
        /* Purge so that each remaining record gets its (failed) report. */
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        p->resend_max = 0;
        for (int i = 0; i < 20 && p->reported < p->sent; i++)
            rd_kafka_poll(p->rk, 50);
    }
    rd_kafka_destroy(p->rk);
    free(p);
}

/* topic's metadata (one topic with at least one partition) into *md, for
 * rd_kafka_metadata_destroy; SPW_ERR_KAFKA (logged) otherwise. */
static spw_err_t topic_metadata(spw_kafka_producer_t *p, const char *topic, int timeout_ms,
                                const struct rd_kafka_metadata **md)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(p->rk, topic, NULL);
    if (!rkt)
        return SPW_ERR_KAFKA;
    rd_kafka_resp_err_t err = rd_kafka_metadata(p->rk, 0, rkt, md, timeout_ms);
    rd_kafka_topic_destroy(rkt);
    if (err) {
        SPW_WARN("kafka metadata failed", "topic=%s error=\"%s\"", topic, rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
    const struct rd_kafka_metadata *m = *md;
    if (m->topic_cnt != 1 || m->topics[0].err || m->topics[0].partition_cnt <= 0) {
        SPW_WARN("kafka topic unknown", "topic=%s error=\"%s\"", topic,
                 m->topic_cnt == 1 ? rd_kafka_err2str(m->topics[0].err) : "no metadata");
        rd_kafka_metadata_destroy(m);
        return SPW_ERR_KAFKA;
    }
    return SPW_OK;
}

spw_err_t spw_kafka_producer_partition_count(spw_kafka_producer_t *p, const char *topic,
                                             int timeout_ms, int32_t *count)
{
    const struct rd_kafka_metadata *md = NULL;
    spw_err_t rc = topic_metadata(p, topic, timeout_ms, &md);
    if (rc != SPW_OK)
        return rc;
    *count = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    return SPW_OK;
}

int32_t spw_kafka_key_partition(const char *partitioner, const void *key, size_t key_len,
                                int32_t count)
{
    if (partitioner && (!strcmp(partitioner, "murmur2") || !strcmp(partitioner, "murmur2_random")))
        return rd_kafka_msg_partitioner_murmur2(NULL, key, key_len, count, NULL, NULL);
    if (partitioner && (!strcmp(partitioner, "fnv1a") || !strcmp(partitioner, "fnv1a_random")))
        return rd_kafka_msg_partitioner_fnv1a(NULL, key, key_len, count, NULL, NULL);
    return rd_kafka_msg_partitioner_consistent(NULL, key, key_len, count, NULL, NULL);
}

spw_err_t spw_kafka_producer_high_watermarks(spw_kafka_producer_t *p, const char *topic,
                                             struct spw_kafka_partition *out, size_t max, size_t *n,
                                             int timeout_ms)
{
    *n = 0;
    if (strlen(topic) >= sizeof(out[0].topic))
        return SPW_ERR_INVALID;
    const struct rd_kafka_metadata *md = NULL;
    spw_err_t rc = topic_metadata(p, topic, timeout_ms, &md);
    if (rc != SPW_OK)
        return rc;
    const rd_kafka_metadata_topic_t *t = &md->topics[0];
    if ((size_t)t->partition_cnt > max) {
        rc = SPW_ERR_INVALID;
        goto out_destroy_md;
    }
    for (int i = 0; i < t->partition_cnt; i++) {
        int64_t lo = 0, hi = 0;
        int32_t part = t->partitions[i].id;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(p->rk, topic, part, &lo, &hi, timeout_ms);
        if (err) {
            SPW_WARN("kafka watermark query failed", "topic=%s partition=%" PRId32 " error=\"%s\"",
                     topic, part, rd_kafka_err2str(err));
            rc = SPW_ERR_KAFKA;
            goto out_destroy_md;
        }
        /* Insertion in partition order (metadata need not be sorted). */
        size_t j = *n;
        while (j > 0 && out[j - 1].partition > part) {
            out[j] = out[j - 1];
            j--;
        }
        snprintf(out[j].topic, sizeof(out[j].topic), "%s", topic);
        out[j].partition = part;
        out[j].offset = hi;
        (*n)++;
    }
out_destroy_md:
    if (rc != SPW_OK)
        *n = 0;
    rd_kafka_metadata_destroy(md);
    return rc;
}
