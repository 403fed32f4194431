/* The mock cluster's retention, watched from its own process: each partition's watermarks (the low
 * one above 0: records deleted) and its estimated bytes (records held x the size of its newest
 * record) against what librdkafka's mock keeps, logged when a partition nears or passes it. */
#include "sparrow/kafka.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kafka_int.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define WATCH_MAX_PARTS   1024 /* partitions watched (the first ones listed) */
#define WATCH_TIMEOUT_MS  500  /* per metadata, watermark or probe request */
#define WATCH_NEAR_RATIO  0.8  /* estimated bytes at which a partition "nears" the retention */
#define DELETED_REPORT_MS 10000

struct part_state {
    char topic[SPW_KAFKA_MOCK_TOPIC_MAX + 1];
    int32_t partition;
    int64_t lo_reported; /* deleted records last reported (0: none yet) */
    uint64_t reported_ms;
    int64_t probed_hi;   /* high watermark when the newest record's size was read */
    size_t record_bytes; /* that size (0: unknown) */
    bool near_reported;  /* "nears" said since it last fell below the mark */
};

struct spw_kafka_mock_watch {
    rd_kafka_t *rk; /* a consumer of the mock itself */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    uint32_t interval_ms;
    struct part_state *parts;
    size_t n_parts;
    uint64_t deleted_total; /* records deleted to retention, every partition (last seen) */
};

static struct part_state *part_find(struct spw_kafka_mock_watch *w, const char *topic,
                                    int32_t partition)
{
    for (size_t i = 0; i < w->n_parts; i++)
        if (w->parts[i].partition == partition && strcmp(w->parts[i].topic, topic) == 0)
            return &w->parts[i];
    if (w->n_parts == WATCH_MAX_PARTS)
        return NULL;
    struct part_state *p = &w->parts[w->n_parts++];
    *p = (struct part_state){.partition = partition, .probed_hi = -1};
    snprintf(p->topic, sizeof(p->topic), "%s", topic);
    return p;
}

/* The size of the newest record of the partition (hi - 1), 0 when it cannot be read. */
static size_t probe_record(struct spw_kafka_mock_watch *w, const char *topic, int32_t partition,
                           int64_t hi)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(w->rk, topic, NULL);
    if (!rkt)
        return 0;
    size_t bytes = 0;
    if (rd_kafka_consume_start(rkt, partition, hi - 1) == 0) {
        rd_kafka_message_t *m = rd_kafka_consume(rkt, partition, WATCH_TIMEOUT_MS);
        if (m) {
            if (!m->err)
                bytes = m->len + m->key_len + 70; /* + a record's framing in its batch */
            rd_kafka_message_destroy(m);
        }
        rd_kafka_consume_stop(rkt, partition);
    }
    rd_kafka_topic_destroy(rkt);
    return bytes;
}

static void watch_partition(struct spw_kafka_mock_watch *w, const char *topic, int32_t partition)
{
    int64_t lo = -1, hi = -1;
    if (rd_kafka_query_watermark_offsets(w->rk, topic, partition, &lo, &hi, WATCH_TIMEOUT_MS) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        lo < 0 || hi < lo)
        return; /* a broker down (a fault test): next round */
    struct part_state *p = part_find(w, topic, partition);
    if (!p)
        return;
    uint64_t now = spw_time_mono_ms();
    if (lo > p->lo_reported && (p->lo_reported == 0 || now - p->reported_ms >= DELETED_REPORT_MS)) {
        SPW_WARN("kafka-mock deleted records to its retention",
                 "topic=%s partition=%" PRId32 " deleted=%" PRId64 " held=%" PRId64
                 " retention_bytes=%u hint=\"offsets below %" PRId64
                 " are gone: a consumer that had not read them loses them (it logs 'kafka "
                 "offsets lost to retention'); use more partitions, fewer records or faster "
                 "consumers\"",
                 topic, partition, lo, hi - lo, SPW_KAFKA_MOCK_RETENTION_BYTES, lo);
        w->deleted_total += (uint64_t)(lo - p->lo_reported);
        p->lo_reported = lo;
        p->reported_ms = now;
    }
    if (hi == lo)
        return;
    if (hi != p->probed_hi) {
        size_t b = probe_record(w, topic, partition, hi);
        if (b) {
            p->record_bytes = b;
            p->probed_hi = hi;
        }
    }
    double est = (double)(hi - lo) * (double)p->record_bytes;
    bool near = est >= WATCH_NEAR_RATIO * SPW_KAFKA_MOCK_RETENTION_BYTES;
    if (near && !p->near_reported && lo == 0)
        SPW_WARN("kafka-mock partition nears its retention",
                 "topic=%s partition=%" PRId32 " held=%" PRId64 " est_bytes=%.0f "
                 "retention_bytes=%u hint=\"past it the oldest records are deleted, read or "
                 "not (estimated from the newest record's size)\"",
                 topic, partition, hi - lo, est, SPW_KAFKA_MOCK_RETENTION_BYTES);
    p->near_reported = near;
}

static void watch_round(struct spw_kafka_mock_watch *w)
{
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(w->rk, 1, NULL, &md, WATCH_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    size_t watched = 0;
    for (int t = 0; t < md->topic_cnt; t++) {
        const rd_kafka_metadata_topic_t *mt = &md->topics[t];
        if (mt->err || mt->topic[0] == '_')
            continue; /* __consumer_offsets and the like */
        for (int i = 0; i < mt->partition_cnt && watched < WATCH_MAX_PARTS; i++, watched++) {
            pthread_mutex_lock(&w->mu);
            bool stop = w->stop;
            pthread_mutex_unlock(&w->mu);
            if (stop)
                goto out;
            watch_partition(w, mt->topic, mt->partitions[i].id);
        }
    }
out:
    rd_kafka_metadata_destroy(md);
}

static void *watch_main(void *arg)
{
    struct spw_kafka_mock_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += w->interval_ms / 1000;
        ts.tv_nsec += (long)(w->interval_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        watch_round(w);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

spw_kafka_mock_watch_t *spw_kafka_mock_watch_start(const char *bootstraps, uint32_t interval_ms,
                                                   char *errstr, size_t errstr_size)
{
    struct spw_kafka_mock_watch *w = calloc(1, sizeof(*w));
    if (w)
        w->parts = calloc(WATCH_MAX_PARTS, sizeof(*w->parts));
    if (!w || !w->parts) {
        free(w);
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    w->interval_ms = interval_ms ? interval_ms : 1000;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    spw_kafka__conf_route_log(conf);
    char rkerr[512];
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, rkerr, sizeof(rkerr)) ||
        rd_kafka_conf_set(conf, "group.id", "sparrow-kafka-mock-watch", rkerr, sizeof(rkerr)) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", rkerr, sizeof(rkerr)) ||
        rd_kafka_conf_set(conf, "log_level", "3", rkerr, sizeof(rkerr))) {
        rd_kafka_conf_destroy(conf);
        snprintf(errstr, errstr_size, "watcher conf: %s", rkerr);
        goto out_free;
    }
    w->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, rkerr, sizeof(rkerr));
    if (!w->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(errstr, errstr_size, "watcher: rd_kafka_new: %s", rkerr);
        goto out_free;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        snprintf(errstr, errstr_size, "watcher: pthread_create failed");
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        rd_kafka_destroy(w->rk);
        goto out_free;
    }
    return w;
out_free:
    free(w->parts);
    free(w);
    return NULL;
}

uint64_t spw_kafka_mock_watch_stop(spw_kafka_mock_watch_t *w)
{
    if (!w)
        return 0;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    uint64_t deleted = w->deleted_total;
    rd_kafka_destroy(w->rk);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->parts);
    free(w);
    return deleted;
}
