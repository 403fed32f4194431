/* trainer: the worker loop's input — a file of examples or a Kafka group of ExampleBatch records,
 * with per-partition positions (record offset + examples taken) for offset storage. */
#include "loop_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/log.h"
#include "sparrow/wire.h"

static void count_reject(struct spw_trn__source *src, enum spw_reject_reason reason)
{
    if ((unsigned)reason >= SPW_REJECT__COUNT)
        reason = SPW_REJECT_UNDECODABLE;
    src->rejected[reason]++;
    if (src->m_rejected[reason])
        spw_counter_inc(src->m_rejected[reason]);
}

void spw_trn__source_reject(struct spw_trn__source *src)
{
    count_reject(src, SPW_REJECT_NONE);
}

static void count_record(struct spw_trn__source *src)
{
    src->records++;
    if (src->m_records)
        spw_counter_inc(src->m_records);
}

static spw_err_t open_arena(struct spw_trn__source *src, size_t record_bytes, char *errstr,
                            size_t errstr_size)
{
    size_t budget = record_bytes * 8;
    if (budget < SPW_TRN__SOURCE_ARENA_MIN)
        budget = SPW_TRN__SOURCE_ARENA_MIN;
    if (!(src->arena = spw_arena_new(0, budget))) {
        snprintf(errstr, errstr_size, "trainer: out of memory");
        return SPW_ERR_NOMEM;
    }
    return SPW_OK;
}

/* ---- file ---- */

spw_err_t spw_trn__source_open_file(struct spw_trn__source *src, const char *path,
                                    const struct spw_trainer_loop_conf *conf, char *errstr,
                                    size_t errstr_size)
{
    src->limits = conf->limits;
    if (conf->schema_path && conf->schema_path[0] &&
        !(src->schema = spw_schema_load(conf->schema_path, false, errstr, errstr_size)))
        return SPW_ERR_INVALID;
    spw_err_t err = open_arena(src, conf->limits.max_record_bytes, errstr, errstr_size);
    if (err)
        return err;
    src->reader =
        spw_reader_open(path, conf->format, &src->limits, src->schema, errstr, errstr_size);
    return src->reader ? SPW_OK : SPW_ERR_NOT_FOUND;
}

static spw_err_t next_file(struct spw_trn__source *src, Sparrow__Example **ex)
{
    struct spw_parse_error perr;
    spw_arena_reset(src->arena);
    spw_err_t err = spw_reader_next(src->reader, src->arena, ex, &perr);
    if (err == SPW_ERR_EOF)
        return err;
    if (err != SPW_OK && err != SPW_ERR_INVALID && err != SPW_ERR_TOO_BIG) {
        snprintf(src->fail, sizeof(src->fail), "%s", perr.message);
        return err;
    }
    count_record(src);
    if (err == SPW_ERR_INVALID || err == SPW_ERR_TOO_BIG) {
        count_reject(src, perr.reason);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "input record skipped",
                            "at=\"%s\" reason=%s detail=\"%s\"", spw_reader_position(src->reader),
                            spw_reject_reason_name(perr.reason), perr.message);
        /* a pb length prefix beyond the limit ends the stream (the reader says EOF next) */
        return SPW_ERR_INVALID;
    }
    return err;
}

/* ---- source high-water marks (Kafka) ---- */

static bool stopic_find(struct spw_trn__source *src, const char *topic, bool add, uint32_t *idx)
{
    for (size_t i = 0; i < src->n_stopics; i++)
        if (strcmp(src->stopics[i], topic) == 0) {
            *idx = (uint32_t)i;
            return true;
        }
    if (!add || src->n_stopics == SPW_TRN__MAX_STOPICS ||
        !(src->stopics[src->n_stopics] = strdup(topic)))
        return false;
    *idx = (uint32_t)src->n_stopics++;
    return true;
}

/* The mark of (part, stopic, spart), created (-1, -1) when add; NULL when absent or full. */
static struct spw_trn__smark *smark_get(struct spw_trn__source *src, int32_t part, uint32_t stopic,
                                        int32_t spart, bool add)
{
    struct spw_trn__smark *m =
        src->last_smark < src->n_smarks ? &src->smarks[src->last_smark] : NULL;
    if (m && m->part == part && m->stopic == stopic && m->spart == spart)
        return m;
    for (size_t i = 0; i < src->n_smarks; i++) {
        m = &src->smarks[i];
        if (m->part == part && m->stopic == stopic && m->spart == spart) {
            src->last_smark = i;
            return m;
        }
    }
    if (!add || src->n_smarks == SPW_TRN__MAX_SMARKS)
        return NULL;
    if (src->n_smarks == src->cap_smarks) {
        size_t cap = src->cap_smarks ? src->cap_smarks * 2 : 16;
        struct spw_trn__smark *nm = realloc(src->smarks, cap * sizeof(*nm));
        if (!nm)
            return NULL;
        src->smarks = nm;
        src->cap_smarks = cap;
    }
    src->last_smark = src->n_smarks;
    m = &src->smarks[src->n_smarks++];
    *m = (struct spw_trn__smark){
        .part = part, .stopic = stopic, .spart = spart, .live = -1, .stored = -1};
    return m;
}

/* Forgets every mark of partition part (assigned anew, revoked, or seeked for a recovery). */
static void smarks_clear(struct spw_trn__source *src, int32_t part)
{
    size_t k = 0;
    for (size_t i = 0; i < src->n_smarks; i++)
        if (src->smarks[i].part != part)
            src->smarks[k++] = src->smarks[i];
    src->n_smarks = k;
}

bool spw_trn__source_duplicate(struct spw_trn__source *src, int32_t part, const char *stopic,
                               int32_t spart, int64_t offset)
{
    uint32_t t;
    struct spw_trn__smark *m = NULL;
    if (stopic && stopic_find(src, stopic, true, &t))
        m = smark_get(src, part, t, spart, true);
    if (!m) {
        src->unchecked++;
        if (src->m_unchecked)
            spw_counter_inc(src->m_unchecked);
        return false;
    }
    if (offset <= m->live) {
        src->duplicates++;
        if (src->m_duplicates)
            spw_counter_inc(src->m_duplicates);
        return true;
    }
    m->live = offset;
    m->dirty = true;
    return false;
}

void spw_trn__source_store_smark(struct spw_trn__source *src, int32_t part, uint32_t stopic,
                                 int32_t spart, int64_t value)
{
    if (part < 0 || (size_t)part >= src->n_parts || !src->parts[part].assigned)
        return;
    struct spw_trn__smark *m = smark_get(src, part, stopic, spart, false);
    if (m && value > m->stored)
        m->stored = value;
}

spw_err_t spw_trn__source_set_smark(struct spw_trn__source *src, int32_t part, const char *stopic,
                                    int32_t spart, int64_t value)
{
    uint32_t t;
    if (!stopic_find(src, stopic, true, &t))
        return SPW_ERR_TOO_BIG;
    struct spw_trn__smark *m = smark_get(src, part, t, spart, true);
    if (!m)
        return SPW_ERR_TOO_BIG;
    m->live = m->stored = value;
    m->dirty = false;
    return SPW_OK;
}

size_t spw_trn__source_smarks(const struct spw_trn__source *src, struct spw_trainer_mark *out,
                              size_t n_max)
{
    size_t n = 0;
    for (size_t i = 0; i < src->n_smarks; i++) {
        const struct spw_trn__smark *m = &src->smarks[i];
        if (m->stored < 0 || m->part < 0 || (size_t)m->part >= src->n_parts ||
            !src->parts[m->part].assigned)
            continue;
        if (n < n_max)
            out[n] = (struct spw_trainer_mark){.partition = m->part,
                                               .source_partition = m->spart,
                                               .offset = m->stored,
                                               .source_topic = src->stopics[m->stopic]};
        n++;
    }
    return n;
}

/* ---- positions (Kafka) ---- */

static struct spw_trn__part *part_get(struct spw_trn__source *src, int32_t p)
{
    if (p < 0)
        return NULL;
    if ((size_t)p >= src->n_parts) {
        size_t n = (size_t)p + 1;
        struct spw_trn__part *np = realloc(src->parts, n * sizeof(*np));
        if (!np)
            return NULL;
        for (size_t i = src->n_parts; i < n; i++)
            np[i] = (struct spw_trn__part){.offset = -1, .skip_at = -1};
        src->parts = np;
        src->n_parts = n;
    }
    return &src->parts[p];
}

static void part_advance(struct spw_trn__source *src, int32_t p, int64_t offset, uint32_t skip)
{
    struct spw_trn__part *pt = part_get(src, p);
    if (!pt)
        return; /* out of memory: the position is not stored (at-least-once) */
    pt->offset = offset;
    pt->skip = skip;
    pt->touched = true;
}

spw_err_t spw_trn__source_snapshot(struct spw_trn__source *src,
                                   spw_err_t (*fn)(void *opaque, int32_t part, int64_t offset,
                                                   uint32_t skip, uint64_t taken),
                                   spw_err_t (*smark_fn)(void *opaque, int32_t part,
                                                         uint32_t stopic, int32_t spart,
                                                         int64_t value),
                                   void *opaque)
{
    for (size_t i = 0; i < src->n_smarks; i++) {
        struct spw_trn__smark *m = &src->smarks[i];
        if (!m->dirty)
            continue;
        spw_err_t err = smark_fn(opaque, m->part, m->stopic, m->spart, m->live);
        if (err)
            return err;
        m->dirty = false;
    }
    for (size_t p = 0; p < src->n_parts; p++) {
        struct spw_trn__part *pt = &src->parts[p];
        if (!pt->touched)
            continue;
        spw_err_t err = fn(opaque, (int32_t)p, pt->offset, pt->skip, pt->taken);
        if (err)
            return err;
        pt->touched = false;
    }
    return SPW_OK;
}

size_t spw_trn__source_positions(const struct spw_trn__source *src,
                                 struct spw_trainer_position *out, size_t n_max)
{
    size_t n = 0;
    for (size_t p = 0; p < src->n_parts; p++) {
        const struct spw_trn__part *pt = &src->parts[p];
        if (!pt->assigned)
            continue;
        if (n < n_max)
            out[n] = (struct spw_trainer_position){
                .partition = (int32_t)p,
                .offset = pt->stored_valid ? pt->stored_offset : SPW_TRAINER_OFFSET_STORED,
                .skip = pt->stored_valid ? pt->stored_skip : 0,
                .taken = pt->stored_taken,
            };
        n++;
    }
    return n;
}

static void on_assign(void *opaque, struct spw_kafka_partition *parts, size_t n)
{
    struct spw_trn__source *src = opaque;
    struct spw_trainer_position *pos = calloc(n ? n : 1, sizeof(*pos));
    for (size_t i = 0; pos && i < n; i++)
        pos[i] = (struct spw_trainer_position){.partition = parts[i].partition,
                                               .offset = SPW_TRAINER_OFFSET_STORED};
    if (pos && src->hooks->on_assign) {
        src->hooks->on_assign(src->hooks->opaque, pos, n);
        for (size_t i = 0; i < n; i++)
            parts[i].offset = pos[i].offset;
    }
    for (size_t i = 0; i < n; i++) {
        struct spw_trn__part *pt = part_get(src, parts[i].partition);
        if (!pt)
            continue;
        *pt = (struct spw_trn__part){.assigned = true, .offset = -1, .skip_at = -1};
        smarks_clear(src, parts[i].partition);
        if (pos && pos[i].offset >= 0 && pos[i].skip > 0) {
            pt->skip_at = pos[i].offset;
            pt->skip_n = pos[i].skip;
        }
    }
    free(pos);
}

static void on_revoke(void *opaque, const struct spw_kafka_partition *parts, size_t n)
{
    struct spw_trn__source *src = opaque;
    struct spw_trainer_position *pos = calloc(n ? n : 1, sizeof(*pos));
    for (size_t i = 0; i < n; i++) {
        struct spw_trn__part *pt = part_get(src, parts[i].partition);
        if (pos)
            pos[i] = (struct spw_trainer_position){
                .partition = parts[i].partition,
                .offset = pt && pt->stored_valid ? pt->stored_offset : -1,
                .skip = pt && pt->stored_valid ? pt->stored_skip : 0,
                .read_valid = pt && pt->offset >= 0,
                .read_offset = pt ? pt->offset : -1,
                .read_skip = pt ? pt->skip : 0,
                .taken = pt ? pt->taken : 0,
            };
        if (pt)
            *pt = (struct spw_trn__part){.offset = -1, .skip_at = -1};
        smarks_clear(src, parts[i].partition);
        /* the rest of a current record of a revoked partition belongs to its new owner */
        if (src->eb && src->cur_part == parts[i].partition)
            src->next_ex = src->eb->n_examples;
    }
    if (pos && src->hooks->on_revoke && !src->closing)
        src->hooks->on_revoke(src->hooks->opaque, pos, n);
    free(pos);
}

/* "BOOTSTRAP/TOPIC": the topic is after the last '/'. */
static spw_err_t split_url(const char *url, char **bootstrap, char **topic)
{
    const char *slash = strrchr(url, '/');
    if (!slash || slash == url || !slash[1])
        return SPW_ERR_INVALID;
    *bootstrap = strndup(url, (size_t)(slash - url));
    *topic = strdup(slash + 1);
    if (!*bootstrap || !*topic) {
        free(*bootstrap);
        free(*topic);
        return SPW_ERR_NOMEM;
    }
    return SPW_OK;
}

spw_err_t spw_trn__source_open_kafka(struct spw_trn__source *src, const char *url,
                                     const struct spw_trainer_loop_conf *conf,
                                     const struct spw_trainer_hooks *hooks,
                                     spw_trainer_loop_t *loop, char *errstr, size_t errstr_size)
{
    char *bootstrap = NULL;
    src->kafka = true;
    src->limits = conf->limits;
    src->hooks = hooks;
    src->loop = loop;
    src->max_record_bytes = conf->max_record_bytes;
    spw_err_t err = split_url(url, &bootstrap, &src->topic);
    if (err) {
        snprintf(errstr, errstr_size, "trainer.in: expected kafka://HOST:PORT/TOPIC");
        return SPW_ERR_INVALID;
    }
    if ((err = open_arena(src, conf->max_record_bytes, errstr, errstr_size)))
        goto out_free_bootstrap;
    spw_kafka_props_t *props = spw_kafka_props_new();
    err = SPW_ERR_NOMEM;
    if (!props || (conf->kafka_config && spw_kafka_props_from_config(props, conf->kafka_config)) ||
        (bootstrap[0] && spw_kafka_props_set(props, "bootstrap.servers", bootstrap))) {
        snprintf(errstr, errstr_size, "trainer: out of memory");
        goto out_destroy_props;
    }
    /* librdkafka's 45 s session: a member gone without leaving (a killed trainer, or a member
     * id orphaned by a retried join) holds the group's next rebalance, and so every partition,
     * that long. The heartbeats come from librdkafka's own thread, whatever the loop does, so
     * the 10 s of Kafka before 3.0 is safe; a setting of the user's wins. */
    if (!spw_kafka_props_get(props, "session.timeout.ms") &&
        !spw_kafka_props_get(props, "heartbeat.interval.ms") &&
        (spw_kafka_props_set(props, "session.timeout.ms", "10000") ||
         spw_kafka_props_set(props, "heartbeat.interval.ms", "1000"))) {
        snprintf(errstr, errstr_size, "trainer: out of memory");
        goto out_destroy_props;
    }
    if ((err = spw_kafka_props_validate(props, errstr, errstr_size)))
        goto out_destroy_props;
    const char *topics[1] = {src->topic};
    struct spw_kafka_consumer_opts opts = {
        .group_id = conf->group,
        .topics = topics,
        .n_topics = 1,
        .start_latest = conf->start_latest,
        .lost = conf->strict_offsets ? SPW_KAFKA_LOST_FAIL : SPW_KAFKA_LOST_EARLIEST,
        .on_assign = on_assign,
        .on_revoke = on_revoke,
        .opaque = src,
        .metrics = conf->metrics,
        .metrics_labels = "role=\"trainer\"",
        .close_timeout_ms = (int)conf->kafka_close_ms,
    };
    src->consumer = spw_kafka_consumer_new(props, &opts, errstr, errstr_size);
    err = src->consumer ? SPW_OK : SPW_ERR_KAFKA;
out_destroy_props:
    spw_kafka_props_destroy(props);
out_free_bootstrap:
    free(bootstrap);
    return err;
}

static void release_msg(struct spw_trn__source *src)
{
    if (src->have_msg)
        spw_kafka_msg_release(&src->msg);
    src->have_msg = false;
    src->eb = NULL;
    src->next_ex = 0;
}

static spw_err_t next_kafka(struct spw_trn__source *src, int timeout_ms, Sparrow__Example **ex)
{
    for (;;) {
        if (src->eb && src->next_ex < src->eb->n_examples) {
            size_t i = src->next_ex++;
            Sparrow__Example *e = src->eb->examples[i];
            if (src->next_ex == src->eb->n_examples)
                part_advance(src, src->cur_part, src->cur_offset + 1, 0);
            else
                part_advance(src, src->cur_part, src->cur_offset, (uint32_t)src->next_ex);
            struct spw_parse_error perr;
            if (!e || spw_ingest_validate(e, &src->limits, &perr) != SPW_OK) {
                count_reject(src, e ? perr.reason : SPW_REJECT_UNDECODABLE);
                SPW_LOG_RATELIMITED(
                    SPW_LOG_WARN, 5000, "input example skipped",
                    "partition=%d offset=%lld index=%zu reason=%s", src->cur_part,
                    (long long)src->cur_offset, i,
                    spw_reject_reason_name(e ? perr.reason : SPW_REJECT_UNDECODABLE));
                return SPW_ERR_INVALID;
            }
            /* a raw event trained before (ingest replayed it): counted, not trained again */
            if (e->has_source_partition && e->has_source_offset &&
                spw_trn__source_duplicate(src, src->cur_part, src->eb->source_topic,
                                          e->source_partition, e->source_offset))
                continue;
            struct spw_trn__part *tp = part_get(src, src->cur_part);
            if (tp)
                tp->taken++;
            *ex = e;
            return SPW_OK;
        }
        release_msg(src);
        spw_arena_reset(src->arena);
        spw_err_t err = spw_kafka_consumer_poll(src->consumer, timeout_ms, &src->msg);
        if (err) {
            if (err == SPW_ERR_CORRUPT)
                src->lost = true;
            return err;
        }
        src->have_msg = true;
        count_record(src);
        src->cur_part = src->msg.partition;
        src->cur_offset = src->msg.offset;
        struct spw_trn__part *pt = part_get(src, src->cur_part);
        /* an empty record (a tombstone, or a batch of no examples) holds nothing to train */
        static Sparrow__ExampleBatch empty = SPARROW__EXAMPLE_BATCH__INIT;
        Sparrow__ExampleBatch *eb = &empty;
        err = src->msg.value && src->msg.len
                  ? spw_wire_unpack_example_batch(src->msg.value, src->msg.len,
                                                  src->max_record_bytes, src->arena, &eb)
                  : SPW_OK;
        if (err) {
            part_advance(src, src->cur_part, src->cur_offset + 1, 0);
            count_reject(src,
                         err == SPW_ERR_TOO_BIG ? SPW_REJECT_OVERSIZED : SPW_REJECT_UNDECODABLE);
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "input record skipped",
                                "partition=%d offset=%lld bytes=%zu error=\"%s\"", src->cur_part,
                                (long long)src->cur_offset, src->msg.len, spw_err_str(err));
            release_msg(src);
            return SPW_ERR_INVALID;
        }
        src->eb = eb;
        src->next_ex = 0;
        if (pt && pt->skip_at >= 0) {
            /* resuming inside a record trained before a checkpoint */
            if (pt->skip_at == src->cur_offset)
                src->next_ex = pt->skip_n < eb->n_examples ? pt->skip_n : eb->n_examples;
            pt->skip_at = -1;
        }
        if (src->next_ex == eb->n_examples) /* an empty batch, or all skipped */
            part_advance(src, src->cur_part, src->cur_offset + 1, 0);
        /* a zero timeout for the rest of this call: one record per wait */
        timeout_ms = 0;
    }
}

spw_err_t spw_trn__source_store(struct spw_trn__source *src, int32_t part, int64_t offset,
                                uint32_t skip, uint64_t taken, bool *stored)
{
    *stored = false;
    if (part < 0 || (size_t)part >= src->n_parts || !src->parts[part].assigned)
        return SPW_OK;
    struct spw_trn__part *pt = &src->parts[part];
    bool changed = !pt->stored_valid || pt->stored_offset != offset;
    pt->stored_valid = true;
    pt->stored_offset = offset;
    pt->stored_skip = skip;
    pt->stored_taken = taken;
    if (!changed)
        return SPW_OK;
    *stored = true;
    return spw_kafka_consumer_store(src->consumer, src->topic, part, offset);
}

spw_err_t spw_trn__source_seek(struct spw_trn__source *src, spw_trainer_resume_fn resume,
                               void *opaque)
{
    if (!src->kafka)
        return SPW_ERR_UNSUPPORTED;
    release_msg(src);
    size_t n = 0;
    for (size_t p = 0; p < src->n_parts; p++)
        n += src->parts[p].assigned;
    struct spw_kafka_partition *kp = calloc(n ? n : 1, sizeof(*kp));
    if (!kp)
        return SPW_ERR_NOMEM;
    size_t k = 0;
    for (size_t p = 0; p < src->n_parts; p++) {
        struct spw_trn__part *pt = &src->parts[p];
        if (!pt->assigned)
            continue;
        int64_t offset = -1;
        uint32_t skip = 0;
        if (resume(opaque, src->topic, (int32_t)p, &offset, &skip) != SPW_OK || offset < 0) {
            /* not in the manifest: from the first record (an absolute offset; a logical one
             * races with the fetcher's own start-offset lookup right after an assignment) */
            offset = 0;
            skip = 0;
        }
        smarks_clear(src, (int32_t)p); /* the recovery's manifest sets them again */
        *pt = (struct spw_trn__part){.assigned = true,
                                     .offset = -1,
                                     .skip_at = skip > 0 ? offset : -1,
                                     .skip_n = skip,
                                     .stored_valid = true,
                                     .stored_offset = offset,
                                     .stored_skip = skip};
        snprintf(kp[k].topic, sizeof(kp[k].topic), "%s", src->topic);
        kp[k].partition = (int32_t)p;
        kp[k].offset = offset;
        k++;
    }
    spw_err_t err = spw_kafka_consumer_seek(src->consumer, kp, k, 10000);
    free(kp);
    if (err == SPW_OK)
        SPW_INFO("partitions seeked for a recovery", "partitions=%zu", k);
    return err;
}

spw_err_t spw_trn__source_commit(struct spw_trn__source *src, bool sync)
{
    if (!src->consumer)
        return SPW_OK;
    return spw_kafka_consumer_commit(src->consumer, sync);
}

spw_err_t spw_trn__source_hold(struct spw_trn__source *src, int timeout_ms)
{
    return src->consumer ? spw_kafka_consumer_serve(src->consumer, timeout_ms) : SPW_OK;
}

spw_err_t spw_trn__source_release(struct spw_trn__source *src)
{
    return src->consumer ? spw_kafka_consumer_resume(src->consumer) : SPW_OK;
}

spw_err_t spw_trn__source_next(struct spw_trn__source *src, int timeout_ms, Sparrow__Example **ex)
{
    return src->kafka ? next_kafka(src, timeout_ms, ex) : next_file(src, ex);
}

void spw_trn__source_close(struct spw_trn__source *src)
{
    release_msg(src);
    if (src->consumer) {
        /* The trainer is leaving: the partitions' next owners rejoin the coordinator on their
         * assignment, which starts the recovery; a rejoin of this trainer would start one whose
         * restore it never reports (the others then wait for it until the coordinator gives up). */
        src->closing = true;
        spw_kafka_consumer_close(src->consumer);
        spw_kafka_consumer_destroy(src->consumer);
    }
    src->consumer = NULL;
    spw_reader_close(src->reader);
    spw_schema_destroy(src->schema);
    spw_arena_destroy(src->arena);
    free(src->topic);
    free(src->parts);
    free(src->smarks);
    for (size_t i = 0; i < src->n_stopics; i++)
        free(src->stopics[i]);
    memset(src, 0, sizeof(*src));
}
