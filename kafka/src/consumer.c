/* Group consumer: single-thread rd_kafka_consumer_poll, a rebalance callback that seeks to
 * caller-supplied offsets, manual offset store and commit, lag/rebalance metrics, and loud
 * reporting of offsets lost to retention. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kafka_int.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define LAG_INTERVAL_MS      1000
#define COMMITTED_TIMEOUT_MS 10000
#define WATERMARK_TIMEOUT_MS 5000

/* Owned by the polling thread; the callbacks librdkafka makes run on that thread too
 * (rebalance and offset-commit callbacks are served from rd_kafka_consumer_poll). */
struct spw_kafka_consumer {
    rd_kafka_t *rk;
    spw_kafka_assign_fn on_assign;
    spw_kafka_revoke_fn on_revoke;
    void *opaque;
    bool start_latest;
    enum spw_kafka_lost_policy lost_policy;
    bool closed;
    bool closing;         /* inside spw_kafka_consumer_close: the revoke commits without waiting */
    bool cooperative;     /* the group's protocol, as last seen (is_cooperative) */
    bool close_abandoned; /* the close failed or ran out of time: destroy must not
                           * wait for it again */
    int close_timeout_ms;
    spw_err_t sticky; /* set once offsets are lost under LOST_FAIL */

    uint64_t consumed, rebalances, lost;
    /* Where a held partition (spw_kafka_consumer_serve until spw_kafka_consumer_resume) resumes:
     * a paused partition drops what it had fetched, and librdkafka resumes one that delivered
     * nothing since its assignment from wherever its fetcher got to. The position is kept here,
     * not asked of librdkafka: rd_kafka_position() knows nothing after a seek until a record is
     * delivered, so a partition read to its end and resumed twice went back to where it was
     * assigned (records trained twice), or to the stored offset (records never trained). */
    bool paused;
    rd_kafka_topic_partition_list_t *pos; /* assigned partitions: the next offset to deliver (the
                                           * assignment's start, a seek's target or the last
                                           * record delivered + 1; logical until known) */
    rd_kafka_topic_partition_list_t *held_back; /* records not delivered while held: offset */
    int64_t lag;
    uint64_t next_lag_ms;

    spw_counter_t *m_consumed, *m_assigns, *m_revokes, *m_lost, *m_lost_events, *m_errors;
    spw_gauge_t *m_lag, *m_assigned;
    spw_metrics_t *metrics;   /* borrowed, for per-partition gauges; NULL: none */
    char metrics_labels[256]; /* the caller's extra labels, "" when none */
};

rd_kafka_t *spw_kafka__consumer_rk(spw_kafka_consumer_t *consumer)
{
    return consumer->rk;
}

rd_kafka_topic_partition_list_t *spw_kafka__parts_to_list(const struct spw_kafka_partition *parts,
                                                          size_t n)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(list, parts[i].topic, parts[i].partition)->offset =
            parts[i].offset;
    return list;
}

static struct spw_kafka_partition *list_to_parts(const rd_kafka_topic_partition_list_t *list)
{
    struct spw_kafka_partition *parts = calloc((size_t)list->cnt + 1, sizeof(*parts));
    if (!parts)
        return NULL;
    for (int i = 0; i < list->cnt; i++) {
        snprintf(parts[i].topic, sizeof(parts[i].topic), "%s", list->elems[i].topic);
        parts[i].partition = list->elems[i].partition;
        parts[i].offset = SPW_KAFKA_OFFSET_STORED;
    }
    return parts;
}

static void inc(spw_counter_t *c, uint64_t n)
{
    if (c)
        spw_counter_add(c, n);
}

/* Turns the logical start offsets (earliest/latest) of list into absolute ones with one
 * ListOffsets round trip per leader; a partition that cannot be resolved keeps its logical
 * offset. librdkafka resolves a logical offset itself, but partition by partition: seen with
 * kafka.debug=fetch, the first fetch after an assignment carried one partition, which soon
 * reached its end, and the broker held that fetch for fetch.wait.max.ms (500 ms) while the other
 * partitions, resolved meanwhile, waited; 0.5 to 1 s lost at every assignment. Absolute offsets
 * make every partition fetchable at once. */
static void resolve_logical(spw_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *list)
{
    rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_new(list->cnt);
    for (int i = 0; i < list->cnt; i++) {
        /* BEGINNING and END (-2, -1) are also the ListOffsets timestamps meaning the same */
        int64_t o = list->elems[i].offset;
        if (o == RD_KAFKA_OFFSET_BEGINNING || o == RD_KAFKA_OFFSET_END)
            rd_kafka_topic_partition_list_add(q, list->elems[i].topic, list->elems[i].partition)
                ->offset = o;
    }
    if (q->cnt > 0 &&
        rd_kafka_offsets_for_times(c->rk, q, WATERMARK_TIMEOUT_MS) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < q->cnt; i++) {
            const rd_kafka_topic_partition_t *r = &q->elems[i];
            rd_kafka_topic_partition_t *e =
                rd_kafka_topic_partition_list_find(list, r->topic, r->partition);
            if (e && r->err == RD_KAFKA_RESP_ERR_NO_ERROR && r->offset >= 0)
                e->offset = r->offset;
        }
    }
    rd_kafka_topic_partition_list_destroy(q);
}

/* Decides the start offset of each newly assigned partition: the caller's, else the committed
 * one, else earliest/latest. Explicit offsets keep auto.offset.reset=error from firing for
 * partitions that simply have no commit yet, so that it fires only for real retention loss. */
static void resolve_offsets(spw_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *list)
{
    /* librdkafka hands the list over with INVALID offsets: start from "use the committed". */
    for (int i = 0; i < list->cnt; i++)
        list->elems[i].offset = RD_KAFKA_OFFSET_STORED;
    struct spw_kafka_partition *parts = list_to_parts(list);
    if (parts && c->on_assign) {
        c->on_assign(c->opaque, parts, (size_t)list->cnt);
        for (int i = 0; i < list->cnt; i++)
            list->elems[i].offset = parts[i].offset == SPW_KAFKA_OFFSET_STORED
                                        ? RD_KAFKA_OFFSET_STORED
                                        : parts[i].offset;
    }
    free(parts);

    rd_kafka_topic_partition_list_t *want = rd_kafka_topic_partition_list_new(list->cnt);
    for (int i = 0; i < list->cnt; i++)
        if (list->elems[i].offset == RD_KAFKA_OFFSET_STORED)
            rd_kafka_topic_partition_list_add(want, list->elems[i].topic, list->elems[i].partition);
    if (want->cnt > 0) {
        rd_kafka_resp_err_t err = rd_kafka_committed(c->rk, want, COMMITTED_TIMEOUT_MS);
        if (err) {
            /* Leave them STORED: librdkafka asks again; "no committed offset" is handled in
             * poll. */
            SPW_WARN("kafka committed offsets unavailable", "error=\"%s\"", rd_kafka_err2str(err));
        } else {
            for (int i = 0; i < want->cnt; i++) {
                rd_kafka_topic_partition_t *w = &want->elems[i];
                rd_kafka_topic_partition_t *e =
                    rd_kafka_topic_partition_list_find(list, w->topic, w->partition);
                if (!e)
                    continue;
                if (w->err == RD_KAFKA_RESP_ERR_NO_ERROR && w->offset >= 0)
                    e->offset = w->offset;
                else if (w->err == RD_KAFKA_RESP_ERR_NO_ERROR)
                    e->offset = c->start_latest ? RD_KAFKA_OFFSET_END : RD_KAFKA_OFFSET_BEGINNING;
            }
        }
    }
    rd_kafka_topic_partition_list_destroy(want);
    resolve_logical(c, list);
}

/* The lag gauge of one partition (registered on first use; the registry returns it after). */
static spw_gauge_t *partition_lag_gauge(spw_kafka_consumer_t *c, const char *topic,
                                        int32_t partition)
{
    if (!c->metrics)
        return NULL;
    char labels[512];
    snprintf(labels, sizeof(labels), "%s%spartition=\"%" PRId32 "\",topic=\"%s\"",
             c->metrics_labels, c->metrics_labels[0] ? "," : "", partition, topic);
    return spw_metrics_gauge_new(c->metrics, "sparrow_kafka_consumer_partition_lag",
                                 "Records behind the high watermark per assigned partition "
                                 "(from the last fetch; 0 once revoked).",
                                 labels);
}

static void report_revoke(spw_kafka_consumer_t *c, const rd_kafka_topic_partition_list_t *list)
{
    if (!c->on_revoke)
        return;
    struct spw_kafka_partition *parts = list_to_parts(list);
    if (!parts)
        return;
    rd_kafka_topic_partition_list_t *pos = rd_kafka_topic_partition_list_copy(list);
    rd_kafka_position(c->rk, pos);
    for (int i = 0; i < list->cnt; i++)
        parts[i].offset = pos->elems[i].offset >= 0 ? pos->elems[i].offset : -1;
    rd_kafka_topic_partition_list_destroy(pos);
    c->on_revoke(c->opaque, parts, (size_t)list->cnt);
    free(parts);
}

/* From the kept positions (one per assigned partition), not rd_kafka_assignment(): that asks
 * librdkafka's main thread and waits for its answer without a bound, and in the revoke of a
 * closing consumer the answer never came (trainers hung at stop until SIGKILL). */
static void update_assigned_gauge(spw_kafka_consumer_t *c)
{
    if (c->m_assigned)
        spw_gauge_set(c->m_assigned, c->pos->cnt);
}

/* Sets (replacing) or removes topic/partition in a held list. */
static void held_set(rd_kafka_topic_partition_list_t *held, const char *topic, int32_t partition,
                     int64_t offset, bool remove)
{
    if (!held)
        return;
    if (remove) {
        rd_kafka_topic_partition_list_del(held, topic, partition);
        return;
    }
    rd_kafka_topic_partition_t *e = rd_kafka_topic_partition_list_find(held, topic, partition);
    if (!e)
        e = rd_kafka_topic_partition_list_add(held, topic, partition);
    e->offset = offset;
}

/* Partitions assigned are at the offset they were assigned with; what was noted while held for
 * partitions that moved no longer applies. */
static void note_rebalance(spw_kafka_consumer_t *c, const rd_kafka_topic_partition_list_t *list,
                           bool assign)
{
    for (int i = 0; i < list->cnt; i++) {
        const rd_kafka_topic_partition_t *e = &list->elems[i];
        held_set(c->held_back, e->topic, e->partition, 0, true);
        held_set(c->pos, e->topic, e->partition, e->offset, !assign);
    }
}

/* The group's protocol is cooperative. rd_kafka_rebalance_protocol() returns NULL while the
 * consumer closes (the revoke of rd_kafka_consumer_close: strcmp on it crashed trainers at stop),
 * so the protocol last seen is kept: an eager rd_kafka_assign(NULL) in a cooperative group's
 * final revoke is refused, the revoke never completes, and librdkafka 2.0.2 then aborted the
 * process in rd_kafka_cgrp_terminated ("assert: !rd_kafka_assignment_in_progress"). */
static bool is_cooperative(spw_kafka_consumer_t *c)
{
    const char *proto = rd_kafka_rebalance_protocol(c->rk);
    if (proto)
        c->cooperative = strcmp(proto, "COOPERATIVE") == 0;
    return c->cooperative;
}

/* Gives up the revoked partitions with the call the protocol wants; when librdkafka refuses it
 * (the protocol unknown at close), the other one. */
static void unassign(spw_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *list,
                     bool cooperative)
{
    for (int attempt = 0; attempt < 2; attempt++, cooperative = !cooperative) {
        const char *why = NULL;
        rd_kafka_error_t *e = NULL;
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (cooperative) {
            if ((e = rd_kafka_incremental_unassign(c->rk, list)))
                why = rd_kafka_error_string(e);
        } else if ((err = rd_kafka_assign(c->rk, NULL))) {
            why = rd_kafka_err2str(err);
        }
        if (!why)
            return;
        SPW_WARN("kafka unassign refused", "call=%s error=\"%s\"",
                 cooperative ? "incremental_unassign" : "assign(NULL)", why);
        if (e)
            rd_kafka_error_destroy(e);
    }
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
    spw_kafka_consumer_t *c = opaque;
    bool cooperative = is_cooperative(c);
    c->rebalances++;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        inc(c->m_assigns, 1);
        resolve_offsets(c, list);
        for (int i = 0; i < list->cnt; i++)
            SPW_INFO("kafka partition assigned", "topic=%s partition=%" PRId32 " offset=%" PRId64,
                     list->elems[i].topic, list->elems[i].partition, list->elems[i].offset);
        note_rebalance(c, list, true);
        if (cooperative) {
            rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, list);
            if (e) {
                SPW_ERROR("kafka assign failed", "error=\"%s\"", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
            }
        } else {
            rd_kafka_resp_err_t e = rd_kafka_assign(rk, list);
            if (e)
                SPW_ERROR("kafka assign failed", "error=\"%s\"", rd_kafka_err2str(e));
        }
        /* librdkafka keeps a partition's pause across a revoke and a new assignment: a
         * partition paused by an earlier hold must not come back paused */
        if (!c->paused)
            rd_kafka_resume_partitions(rk, list);
    } else {
        inc(c->m_revokes, 1);
        SPW_INFO("kafka partitions revoked", "count=%d lost=%d", list->cnt,
                 rd_kafka_assignment_lost(rk));
        /* What was stored was processed: commit it before another member takes over. While
         * closing, the commit is asynchronous: the close waits for it within its own deadline,
         * where a synchronous commit would wait for the broker's answer without any bound. */
        if (!rd_kafka_assignment_lost(rk)) {
            rd_kafka_resp_err_t ce = rd_kafka_commit(rk, NULL, c->closing);
            if (ce && ce != RD_KAFKA_RESP_ERR__NO_OFFSET)
                SPW_WARN("kafka commit on revoke failed", "error=\"%s\"", rd_kafka_err2str(ce));
        }
        report_revoke(c, list);
        note_rebalance(c, list, false);
        for (int i = 0; i < list->cnt; i++) {
            spw_gauge_t *g = partition_lag_gauge(c, list->elems[i].topic, list->elems[i].partition);
            if (g)
                spw_gauge_set(g, 0);
        }
        unassign(c, list, cooperative);
    }
    update_assigned_gauge(c);
}

static void make_metrics(spw_kafka_consumer_t *c, spw_metrics_t *reg, const char *extra)
{
    if (!reg)
        return;
    char lab[512];
    const char *x = extra && extra[0] ? extra : NULL;
#define LAB(kv)                                                                                    \
    (snprintf(lab, sizeof(lab), "%s%s%s", x ? x : "", x && (kv)[0] ? "," : "", kv),                \
     lab[0] ? lab : NULL)
    c->m_consumed = spw_metrics_counter_new(reg, "sparrow_kafka_consumed_total",
                                            "Records returned by the consumer.", LAB(""));
    c->m_assigns =
        spw_metrics_counter_new(reg, "sparrow_kafka_rebalances_total",
                                "Consumer group rebalances seen, by kind.", LAB("kind=\"assign\""));
    c->m_revokes =
        spw_metrics_counter_new(reg, "sparrow_kafka_rebalances_total",
                                "Consumer group rebalances seen, by kind.", LAB("kind=\"revoke\""));
    c->m_lost = spw_metrics_counter_new(
        reg, "sparrow_kafka_offsets_lost_total",
        "Records deleted by retention before they were consumed (offset out of range).", LAB(""));
    c->m_lost_events = spw_metrics_counter_new(
        reg, "sparrow_kafka_offset_lost_events_total",
        "Times a partition's committed or requested offset was found out of range.", LAB(""));
    c->m_errors = spw_metrics_counter_new(reg, "sparrow_kafka_consumer_errors_total",
                                          "Transient consumer errors (broker down, ...).", LAB(""));
    c->m_lag = spw_metrics_gauge_new(reg, "sparrow_kafka_consumer_lag",
                                     "Records behind the high watermark, summed over assigned "
                                     "partitions (from the last fetch).",
                                     LAB(""));
    c->m_assigned =
        spw_metrics_gauge_new(reg, "sparrow_kafka_assigned_partitions",
                              "Partitions currently assigned to this consumer.", LAB(""));
#undef LAB
}

spw_kafka_consumer_t *spw_kafka_consumer_new(const spw_kafka_props_t *props,
                                             const struct spw_kafka_consumer_opts *opts,
                                             char *errstr, size_t errstr_size)
{
    if (!opts->group_id || !opts->group_id[0] || opts->n_topics == 0) {
        snprintf(errstr, errstr_size, "consumer needs a group id and at least one topic");
        return NULL;
    }
    spw_kafka_consumer_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    c->on_assign = opts->on_assign;
    c->pos = rd_kafka_topic_partition_list_new(8);
    c->on_revoke = opts->on_revoke;
    c->opaque = opts->opaque;
    c->start_latest = opts->start_latest;
    c->lost_policy = opts->lost;
    c->close_timeout_ms = opts->close_timeout_ms > 0 ? opts->close_timeout_ms : 10000;
    make_metrics(c, opts->metrics, opts->metrics_labels);
    c->metrics = opts->metrics;
    snprintf(c->metrics_labels, sizeof(c->metrics_labels), "%s",
             opts->metrics_labels ? opts->metrics_labels : "");

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    spw_kafka__conf_route_log(conf);
    /* A broker may hold a fetch that found a partition's end for fetch.wait.max.ms (librdkafka's
     * default 500 ms) while new records arrive (the mock cluster does): each record would wait
     * that long, and serve, behind a fast update stream, fell behind it for good. 50 ms unless
     * the pass-through sets it (applied next, so it wins). */
    if (spw_kafka__conf_force(conf, "fetch.wait.max.ms", "50", errstr, errstr_size) ||
        spw_kafka__conf_apply(conf, props, errstr, errstr_size) != SPW_OK)
        goto out_destroy_conf;
    /* The wrapper's semantics rest on these; they override the pass-through. */
    if (spw_kafka__conf_force(conf, "group.id", opts->group_id, errstr, errstr_size) ||
        spw_kafka__conf_force(conf, "enable.auto.commit", "false", errstr, errstr_size) ||
        spw_kafka__conf_force(conf, "enable.auto.offset.store", "false", errstr, errstr_size) ||
        spw_kafka__conf_force(conf, "auto.offset.reset", "error", errstr, errstr_size) ||
        spw_kafka__conf_force(conf, "isolation.level",
                              opts->read_committed ? "read_committed" : "read_uncommitted", errstr,
                              errstr_size))
        goto out_destroy_conf;
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_opaque(conf, c);

    char rkerr[512];
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, rkerr, sizeof(rkerr));
    if (!c->rk) {
        snprintf(errstr, errstr_size, "kafka consumer: %s", rkerr);
        goto out_destroy_conf;
    }
    /* conf is owned by rk from here. */
    rd_kafka_poll_set_consumer(c->rk);

    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new((int)opts->n_topics);
    for (size_t i = 0; i < opts->n_topics; i++)
        rd_kafka_topic_partition_list_add(topics, opts->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (err) {
        snprintf(errstr, errstr_size, "kafka subscribe: %s", rd_kafka_err2str(err));
        goto out_destroy_rk;
    }
    return c;

out_destroy_rk:
    rd_kafka_destroy(c->rk);
    rd_kafka_topic_partition_list_destroy(c->pos);
    free(c);
    return NULL;
out_destroy_conf:
    rd_kafka_conf_destroy(conf);
    rd_kafka_topic_partition_list_destroy(c->pos);
    free(c);
    return NULL;
}

static void update_lag(spw_kafka_consumer_t *c)
{
    rd_kafka_topic_partition_list_t *assigned = NULL;
    if (rd_kafka_assignment(c->rk, &assigned) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    rd_kafka_position(c->rk, assigned);
    int64_t lag = 0;
    for (int i = 0; i < assigned->cnt; i++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_topic_partition_t *p = &assigned->elems[i];
        if (rd_kafka_get_watermark_offsets(c->rk, p->topic, p->partition, &lo, &hi) || hi < 0)
            continue;
        int64_t pos = p->offset >= 0 ? p->offset : lo;
        int64_t behind = pos >= 0 && hi > pos ? hi - pos : 0;
        lag += behind;
        spw_gauge_t *g = partition_lag_gauge(c, p->topic, p->partition);
        if (g)
            spw_gauge_set(g, (double)behind);
    }
    rd_kafka_topic_partition_list_destroy(assigned);
    c->lag = lag;
    if (c->m_lag)
        spw_gauge_set(c->m_lag, (double)lag);
}

/* An out-of-range offset (auto.offset.reset=error) or a partition with no start offset. */
static spw_err_t handle_offset_reset(spw_kafka_consumer_t *c, rd_kafka_message_t *rkm)
{
    const char *topic = rd_kafka_topic_name(rkm->rkt);
    int32_t partition = rkm->partition;
    const char *why = rd_kafka_message_errstr(rkm);
    int64_t lo = -1, hi = -1;
    rd_kafka_resp_err_t werr =
        rd_kafka_query_watermark_offsets(c->rk, topic, partition, &lo, &hi, WATERMARK_TIMEOUT_MS);
    bool out_of_range = strstr(why, "ut of range") != NULL || strstr(why, "OUT_OF_RANGE") != NULL;
    int64_t target = lo >= 0 ? lo : RD_KAFKA_OFFSET_BEGINNING;

    if (!out_of_range) {
        /* No committed offset reached librdkafka (committed() failed at assignment). */
        target = c->start_latest ? RD_KAFKA_OFFSET_END : RD_KAFKA_OFFSET_BEGINNING;
        SPW_WARN("kafka partition without start offset",
                 "topic=%s partition=%" PRId32 " start=%s detail=\"%s\"", topic, partition,
                 c->start_latest ? "latest" : "earliest", why);
    } else {
        int64_t lost = werr == RD_KAFKA_RESP_ERR_NO_ERROR && rkm->offset >= 0 && lo > rkm->offset
                           ? lo - rkm->offset
                           : 0;
        c->lost += (uint64_t)lost;
        inc(c->m_lost, (uint64_t)lost);
        inc(c->m_lost_events, 1);
        SPW_ERROR("kafka offsets lost to retention",
                  "topic=%s partition=%" PRId32 " requested=%" PRId64 " earliest=%" PRId64
                  " latest=%" PRId64 " lost=%" PRId64 " policy=%s detail=\"%s\" what=\"records "
                  "%" PRId64 "..%" PRId64 " were deleted by the broker's retention before they "
                  "were read: %s (counted in sparrow_kafka_offsets_lost_total)\"",
                  topic, partition, rkm->offset, lo, hi, lost,
                  c->lost_policy == SPW_KAFKA_LOST_FAIL ? "fail" : "earliest", why, rkm->offset,
                  lo - 1,
                  c->lost_policy == SPW_KAFKA_LOST_FAIL
                      ? "the run ends (strict)"
                      : "they are skipped and reading goes on from the earliest record held");
        if (c->lost_policy == SPW_KAFKA_LOST_FAIL) {
            c->sticky = SPW_ERR_CORRUPT;
            return SPW_ERR_CORRUPT;
        }
    }
    /* After auto.offset.reset=error the partition's fetcher is stopped and a seek does not
     * restart it: take the partition out of the assignment and put it back at target. */
    held_set(c->pos, topic, partition, target, false);
    held_set(c->held_back, topic, partition, 0, true);
    rd_kafka_error_t *e = NULL;
    if (is_cooperative(c)) {
        rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(list, topic, partition)->offset = target;
        e = rd_kafka_incremental_unassign(c->rk, list);
        if (!e)
            e = rd_kafka_incremental_assign(c->rk, list);
        rd_kafka_topic_partition_list_destroy(list);
    } else {
        /* Eager: the whole assignment again, each partition at its position (this one at
         * target, just set; one that delivered nothing yet where it was assigned, since a
         * committed offset that does not exist would send it through here again) */
        rd_kafka_topic_partition_list_t *list = NULL;
        rd_kafka_resp_err_t aerr = rd_kafka_assignment(c->rk, &list);
        if (!aerr) {
            for (int i = 0; i < list->cnt; i++) {
                rd_kafka_topic_partition_t *p = &list->elems[i];
                const rd_kafka_topic_partition_t *st =
                    rd_kafka_topic_partition_list_find(c->pos, p->topic, p->partition);
                p->offset = st && st->offset != RD_KAFKA_OFFSET_INVALID ? st->offset
                                                                        : RD_KAFKA_OFFSET_STORED;
            }
            aerr = rd_kafka_assign(c->rk, list);
        }
        if (list)
            rd_kafka_topic_partition_list_destroy(list);
        if (aerr)
            e = rd_kafka_error_new(aerr, "re-assign: %s", rd_kafka_err2str(aerr));
    }
    if (e) {
        SPW_ERROR("kafka seek failed", "topic=%s partition=%" PRId32 " error=\"%s\"", topic,
                  partition, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return SPW_ERR_KAFKA;
    }
    return SPW_ERR_TIMEOUT;
}

/* spw_kafka_consumer_poll; a record is counted as consumed only when deliver is true (serve hands
 * records it refuses back to their partition). */
static spw_err_t poll_one(spw_kafka_consumer_t *c, int timeout_ms, struct spw_kafka_msg *msg,
                          bool deliver)
{
    memset(msg, 0, sizeof(*msg));
    if (c->sticky)
        return c->sticky;
    if (c->closed)
        return SPW_ERR_STATE;
    rd_kafka_message_t *rkm = rd_kafka_consumer_poll(c->rk, timeout_ms);
    uint64_t now = spw_time_mono_ms();
    if (now >= c->next_lag_ms) {
        c->next_lag_ms = now + LAG_INTERVAL_MS;
        update_lag(c);
    }
    if (!rkm)
        return SPW_ERR_TIMEOUT;
    if (rkm->err) {
        spw_err_t ret = SPW_ERR_TIMEOUT;
        if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            /* not an error */
        } else if (rkm->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
                   rkm->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
            ret = handle_offset_reset(c, rkm);
        } else if (rkm->err == RD_KAFKA_RESP_ERR__FATAL) {
            char fatal[512];
            rd_kafka_fatal_error(c->rk, fatal, sizeof(fatal));
            SPW_ERROR("kafka consumer fatal error", "error=\"%s\"", fatal);
            c->sticky = ret = SPW_ERR_KAFKA;
        } else {
            inc(c->m_errors, 1);
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "kafka consumer error", "error=\"%s\"",
                                rd_kafka_message_errstr(rkm));
        }
        rd_kafka_message_destroy(rkm);
        return ret;
    }
    msg->topic = rd_kafka_topic_name(rkm->rkt);
    msg->partition = rkm->partition;
    msg->offset = rkm->offset;
    msg->key = rkm->key;
    msg->key_len = rkm->key_len;
    msg->value = rkm->payload;
    msg->len = rkm->len;
    msg->timestamp_ms = rd_kafka_message_timestamp(rkm, NULL);
    msg->rkm__ = rkm;
    if (deliver) {
        held_set(c->pos, msg->topic, msg->partition, msg->offset + 1, false);
        c->consumed++;
        inc(c->m_consumed, 1);
    }
    return SPW_OK;
}

spw_err_t spw_kafka_consumer_poll(spw_kafka_consumer_t *c, int timeout_ms,
                                  struct spw_kafka_msg *msg)
{
    return poll_one(c, timeout_ms, msg, true);
}

spw_err_t spw_kafka_msg_header(const struct spw_kafka_msg *msg, const char *name,
                               const void **value, size_t *len)
{
    rd_kafka_headers_t *hdrs;
    if (!msg->rkm__ || rd_kafka_message_headers(msg->rkm__, &hdrs))
        return SPW_ERR_NOT_FOUND;
    if (rd_kafka_header_get(hdrs, 0, name, value, len))
        return SPW_ERR_NOT_FOUND;
    return SPW_OK;
}

void spw_kafka_msg_release(struct spw_kafka_msg *msg)
{
    if (msg->rkm__)
        rd_kafka_message_destroy(msg->rkm__);
    memset(msg, 0, sizeof(*msg));
}

spw_err_t spw_kafka_consumer_store(spw_kafka_consumer_t *c, const char *topic, int32_t partition,
                                   int64_t offset_next)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset_next;
    rd_kafka_resp_err_t err = rd_kafka_offsets_store(c->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    /* __STATE / __UNKNOWN_PARTITION: no longer assigned, another member owns it now. */
    if (err && err != RD_KAFKA_RESP_ERR__STATE && err != RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION &&
        err != RD_KAFKA_RESP_ERR__INVALID_ARG) {
        SPW_WARN("kafka offset store failed", "topic=%s partition=%" PRId32 " error=\"%s\"", topic,
                 partition, rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
    return SPW_OK;
}

/* Pauses (or resumes) every partition of the current assignment. */
static spw_err_t pause_assignment(spw_kafka_consumer_t *c, bool pause)
{
    rd_kafka_topic_partition_list_t *list = NULL;
    rd_kafka_resp_err_t err = rd_kafka_assignment(c->rk, &list);
    if (!err && list->cnt > 0)
        err = pause ? rd_kafka_pause_partitions(c->rk, list)
                    : rd_kafka_resume_partitions(c->rk, list);
    if (list)
        rd_kafka_topic_partition_list_destroy(list);
    if (err) {
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "kafka pause/resume failed",
                            "pause=%d error=\"%s\"", pause, rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
    return SPW_OK;
}

/* The timeout_ms argument that makes rd_kafka_seek_partitions wait up to ms milliseconds.
 * librdkafka before 2.1.0 waited a thousandth of the timeout it was given (its #4230, "seek
 * partition timeout was one thousand times lower than the passed value"; Debian 12 ships 2.0.2):
 * a 1 s wait was 1 ms, so a seek the broker thread answered in more than 1 ms "timed out", and the
 * retry re-sent it at once, again and again. */
static int seek_wait_arg(int ms)
{
    return rd_kafka_version() < 0x02010000 ? ms * 1000 : ms;
}

/* Seeks every partition of list to its offset. A partition whose fetcher is (re)starting (just
 * assigned) refuses a seek with __STATE, and a busy broker thread may not answer in time: both
 * are retried for up to timeout_ms. Failures are logged. */
static spw_err_t seek_list(spw_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *list,
                           int timeout_ms)
{
    uint64_t deadline = spw_time_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    int wait_ms = timeout_ms < 1 ? 1 : timeout_ms < 1000 ? timeout_ms : 1000; /* 0 would not wait */
    rd_kafka_topic_partition_list_t *todo = rd_kafka_topic_partition_list_copy(list);
    spw_err_t ret = SPW_OK;
    for (;;) {
        rd_kafka_error_t *error = rd_kafka_seek_partitions(c->rk, todo, seek_wait_arg(wait_ms));
        if (error) {
            bool retry = rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__TIMED_OUT &&
                         spw_time_mono_ms() < deadline;
            SPW_LOG_RATELIMITED(retry ? SPW_LOG_WARN : SPW_LOG_ERROR, 2000, "kafka seek failed",
                                "error=\"%s\" retry=%d", rd_kafka_error_string(error), retry);
            rd_kafka_error_destroy(error);
            if (retry)
                continue;
            ret = SPW_ERR_KAFKA;
            break;
        }
        rd_kafka_topic_partition_list_t *again = rd_kafka_topic_partition_list_new(todo->cnt);
        for (int i = 0; i < todo->cnt; i++) {
            rd_kafka_topic_partition_t *e = &todo->elems[i];
            if (e->err == RD_KAFKA_RESP_ERR__STATE && spw_time_mono_ms() < deadline) {
                rd_kafka_topic_partition_t *a =
                    rd_kafka_topic_partition_list_add(again, e->topic, e->partition);
                a->offset =
                    rd_kafka_topic_partition_list_find(list, e->topic, e->partition)->offset;
            } else if (e->err) {
                SPW_ERROR("kafka seek failed", "topic=%s partition=%d error=\"%s\"", e->topic,
                          (int)e->partition, rd_kafka_err2str(e->err));
                ret = SPW_ERR_KAFKA;
            }
        }
        rd_kafka_topic_partition_list_destroy(todo);
        todo = again;
        if (todo->cnt == 0)
            break;
        spw_time_sleep_ms(20);
    }
    rd_kafka_topic_partition_list_destroy(todo);
    return ret;
}

spw_err_t spw_kafka_consumer_serve(spw_kafka_consumer_t *c, int timeout_ms)
{
    if (c->sticky)
        return c->sticky;
    if (c->closed)
        return SPW_ERR_STATE;
    if (!c->paused) {
        if (c->held_back)
            rd_kafka_topic_partition_list_destroy(c->held_back);
        c->held_back = rd_kafka_topic_partition_list_new(4);
        c->paused = true;
    }
    /* again at every call: a rebalance may have assigned new (unpaused) partitions */
    spw_err_t ret = pause_assignment(c, true);
    struct spw_kafka_msg msg;
    spw_err_t err = poll_one(c, timeout_ms, &msg, false);
    if (err == SPW_OK) {
        /* fetched before its partition was paused: not delivered, read again after the resume */
        rd_kafka_topic_partition_t *e =
            rd_kafka_topic_partition_list_find(c->held_back, msg.topic, msg.partition);
        if (!e || msg.offset < e->offset)
            held_set(c->held_back, msg.topic, msg.partition, msg.offset, false);
        spw_kafka_msg_release(&msg);
        err = pause_assignment(c, true);
    }
    if (err == SPW_ERR_TIMEOUT)
        err = SPW_OK;
    return err ? err : ret;
}

spw_err_t spw_kafka_consumer_resume(spw_kafka_consumer_t *c)
{
    if (!c->paused || c->closed)
        return SPW_OK;
    /* where each assigned partition goes on: a record noted while held, else its position (the
     * record after the last delivered, a seek's target, the offset it was assigned with) */
    rd_kafka_topic_partition_list_t *list = NULL;
    spw_err_t ret = SPW_OK;
    if (rd_kafka_assignment(c->rk, &list) == RD_KAFKA_RESP_ERR_NO_ERROR && list->cnt > 0) {
        rd_kafka_position(c->rk, list);
        for (int i = 0; i < list->cnt; i++) {
            rd_kafka_topic_partition_t *e = &list->elems[i];
            const rd_kafka_topic_partition_t *b =
                rd_kafka_topic_partition_list_find(c->held_back, e->topic, e->partition);
            const rd_kafka_topic_partition_t *st =
                rd_kafka_topic_partition_list_find(c->pos, e->topic, e->partition);
            if (b)
                e->offset = b->offset;
            else if (st)
                e->offset = st->offset;
            if (e->offset == RD_KAFKA_OFFSET_INVALID) /* not known: librdkafka decides */
                e->offset = RD_KAFKA_OFFSET_STORED;
        }
        ret = pause_assignment(c, false);
        spw_err_t serr = seek_list(c, list, 5000);
        if (serr)
            ret = serr;
    }
    if (list)
        rd_kafka_topic_partition_list_destroy(list);
    if (c->held_back)
        rd_kafka_topic_partition_list_destroy(c->held_back);
    c->held_back = NULL;
    c->paused = false;
    return ret;
}

spw_err_t spw_kafka_consumer_seek(spw_kafka_consumer_t *c, const struct spw_kafka_partition *parts,
                                  size_t n, int timeout_ms)
{
    if (n == 0)
        return SPW_OK;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n);
    if (!list)
        return SPW_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int64_t off = parts[i].offset >= 0 ? parts[i].offset : RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_topic_partition_list_add(list, parts[i].topic, parts[i].partition)->offset = off;
        /* held: the resume seeks there (a record refused while held no longer applies) */
        held_set(c->held_back, parts[i].topic, parts[i].partition, off, false);
        held_set(c->pos, parts[i].topic, parts[i].partition, off, false);
    }
    spw_err_t ret = c->paused ? SPW_OK : seek_list(c, list, timeout_ms);
    rd_kafka_topic_partition_list_destroy(list);
    return ret;
}

spw_err_t spw_kafka_consumer_commit(spw_kafka_consumer_t *c, bool sync)
{
    if (c->closed)
        return SPW_ERR_STATE;
    rd_kafka_resp_err_t err = rd_kafka_commit(c->rk, NULL, sync ? 0 : 1);
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        SPW_WARN("kafka commit failed", "error=\"%s\"", rd_kafka_err2str(err));
        return SPW_ERR_KAFKA;
    }
    return SPW_OK;
}

uint64_t spw_kafka_consumer_consumed(const spw_kafka_consumer_t *c)
{
    return c->consumed;
}

int64_t spw_kafka_consumer_lag(spw_kafka_consumer_t *c)
{
    update_lag(c);
    return c->lag;
}

uint64_t spw_kafka_consumer_rebalances(const spw_kafka_consumer_t *c)
{
    return c->rebalances;
}

uint64_t spw_kafka_consumer_lost(const spw_kafka_consumer_t *c)
{
    return c->lost;
}

/* One event of the close queue: a rebalance (the final revoke) runs the rebalance callback; records
 * fetched before the close (forwarded to the same queue) and anything else are dropped. */
static void serve_close_event(spw_kafka_consumer_t *c, rd_kafka_event_t *ev)
{
    if (!ev)
        return;
    if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE)
        rebalance_cb(c->rk, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev), c);
    rd_kafka_event_destroy(ev);
}

/* Leaves the group before the close, within deadline: the final revoke (its commit, the unassign)
 * runs here, from the consumer's own poll, and the partitions have stopped before the close
 * starts. Closing with the assignment still held, librdkafka 2.0.2 could terminate the group
 * while that assignment was still being taken apart and abort the process in
 * rd_kafka_cgrp_terminated ("assert: !rd_kafka_assignment_in_progress"; seen with 16 trainers
 * leaving at once). Records polled meanwhile are dropped: their offsets were never stored, so
 * the partition's next owner reads them. Done when the assignment has been empty for a while
 * (the unassign's fetch stops are asynchronous). */
static void leave_group(spw_kafka_consumer_t *c, uint64_t deadline)
{
    if (rd_kafka_unsubscribe(c->rk) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    uint64_t empty_since = 0;
    for (uint64_t now = spw_time_mono_ms(); now < deadline; now = spw_time_mono_ms()) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 20);
        if (m)
            rd_kafka_message_destroy(m);
        rd_kafka_topic_partition_list_t *a = NULL;
        bool empty = rd_kafka_assignment(c->rk, &a) == RD_KAFKA_RESP_ERR_NO_ERROR && a->cnt == 0;
        if (a)
            rd_kafka_topic_partition_list_destroy(a);
        if (!empty)
            empty_since = 0;
        else if (!empty_since)
            empty_since = now;
        else if (now - empty_since >= 200)
            return;
    }
}

/* librdkafka's own close waits for the revoke, the final commit and the LeaveGroup without a
 * bound of its own (a group coordinator that does not answer holds a stopping process past any
 * grace period). The close runs in librdkafka's background instead, its callbacks served here
 * until it ends or the deadline. */
spw_err_t spw_kafka_consumer_close(spw_kafka_consumer_t *c)
{
    if (c->closed)
        return c->close_abandoned ? SPW_ERR_KAFKA : SPW_OK;
    c->closed = true;
    c->closing = true;
    leave_group(c, spw_time_mono_ms() + (uint64_t)c->close_timeout_ms / 2);
    rd_kafka_queue_t *q = rd_kafka_queue_new(c->rk);
    rd_kafka_error_t *e = rd_kafka_consumer_close_queue(c->rk, q);
    spw_err_t ret = SPW_OK;
    if (e) {
        SPW_WARN("kafka consumer close", "error=\"%s\"", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        ret = SPW_ERR_KAFKA;
    } else {
        uint64_t deadline = spw_time_mono_ms() + (uint64_t)c->close_timeout_ms;
        while (!rd_kafka_consumer_closed(c->rk)) {
            uint64_t now = spw_time_mono_ms();
            if (now >= deadline) {
                SPW_WARN("kafka consumer close timed out",
                         "after_ms=%d note=\"the group reassigns this member's partitions after "
                         "its session timeout, from their last committed offsets\"",
                         c->close_timeout_ms);
                ret = SPW_ERR_TIMEOUT;
                break;
            }
            uint64_t left = deadline - now;
            serve_close_event(c, rd_kafka_queue_poll(q, left < 100 ? (int)left : 100));
        }
    }
    rd_kafka_queue_destroy(q);
    c->closing = false;
    c->close_abandoned = ret != SPW_OK;
    return ret;
}

static void free_consumer(spw_kafka_consumer_t *c)
{
    if (c->pos)
        rd_kafka_topic_partition_list_destroy(c->pos);
    if (c->held_back)
        rd_kafka_topic_partition_list_destroy(c->held_back);
    free(c);
}

/* Even without a consumer close, rd_kafka_destroy waits until the group's outstanding requests
 * (the final commit, the LeaveGroup) are answered or time out: that is the stall the close gave
 * up on. The handle is destroyed on a detached thread instead; nothing calls back into the
 * consumer meanwhile, since no one serves its queues. */
static void *destroy_abandoned(void *arg)
{
    spw_kafka_consumer_t *c = arg;
    rd_kafka_destroy_flags(c->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    free_consumer(c);
    return NULL;
}

void spw_kafka_consumer_destroy(spw_kafka_consumer_t *c)
{
    if (!c)
        return;
    spw_kafka_consumer_close(c);
    if (c->close_abandoned) {
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&thread, &attr, destroy_abandoned, c);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            return;
        SPW_WARN("kafka consumer destroy waits", "error=\"no thread: %s\"", strerror(rc));
        rd_kafka_destroy_flags(c->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    } else {
        rd_kafka_destroy(c->rk);
    }
    free_consumer(c);
}
