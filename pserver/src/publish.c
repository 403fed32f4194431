/* The shard's update-stream publisher: changed rows as absolute ModelUpdate records and TTL
 * tombstones to Kafka `model-updates`, from a thread of its own (docs/ARCHITECTURE.md §6). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps_int.h"
#include "sparrow/arena.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"
#include "sparrow/sparrow.pb-c.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

#define IDLE_POLL_MS     100
#define FINAL_FLUSH_MS   10000
#define SYNC_TIMEOUT_MS  5000 /* per step: flush, metadata, each watermark query */
#define SET_MIN_CAP      1024u
#define SET_PREFETCH     8u          /* keys between a slot's prefetch and its probe */
#define REQUEUE_MAX_KEYS (64u << 20) /* failed records remembered for re-publishing */
#define SCAN_TIMEOUT_MS  60000       /* reading the stream back after a restore */
#define SCAN_POLL_MS     200
#define SCAN_MAX_UPDATE  (1u << 20)
/* A batch record's value at most (Kafka's default limit is 1 MB); the topic's partition count
 * is asked again this often, waiting at most PARTITIONS_WAIT_MS (the round's rows wait too). */
#define RECORD_MAX_BYTES   (256u << 10)
#define PARTITIONS_TTL_MS  10000
#define PARTITIONS_WAIT_MS 2000
/* A batch row's bytes besides its weights: key, event and apply times, version, tombstone flag. */
#define BATCH_ROW_FIXED (8 + 8 + 8 + 4 + 1)

/* A changed key since the last hand-off: the newest event time and apply time behind it. */
struct pub_entry {
    uint64_t key;
    int64_t event_ms;
    int64_t applied_ms;
    uint8_t used;
    /* Evicted, or published before a restore: owes a tombstone unless the key has a row (then
     * the row is published). */
    uint8_t tomb;
};

/* Open-addressing set of changed keys (load <= 1/2). Owned by the loop thread. */
struct pub_set {
    struct pub_entry *e;
    size_t cap, n;
};

/* Rows copied for the publisher thread. Owned by the loop thread while idle, else by the
 * publisher thread. */
struct pub_batch {
    size_t n, cap;
    uint64_t epoch;
    struct pub_entry *meta; /* key, times, tomb (1: publish a tombstone) */
    uint32_t *versions;
    float *weights; /* n × dim */
};

/* What rides along with each produced record: its rows, to hand them off again if delivery
 * fails, and what its delivery adds to the metrics. */
struct pub_record {
    uint32_t n, n_tombs;
    uint32_t bytes;     /* the record's key and value */
    int64_t applied_ms; /* the newest of its rows' */
    struct pub_entry rows[];
};

struct spw_ps__publisher {
    uint32_t dim, shard;
    uint64_t interval_ms, next_ms;
    char *topic;
    spw_kafka_props_t *props;       /* for the restore scan's consumer */
    spw_kafka_producer_t *producer; /* used by the publisher thread only (after creation) */
    size_t row_floats;
    struct spw_ps_row_copy *row; /* loop thread scratch */
    struct pub_set set;
    struct pub_batch batch;
    uint8_t *buf; /* publisher thread: encoded record */
    size_t buf_cap;
    /* Publisher thread: batch records (batch_rows > 1) go to the partition of their rows' keys. */
    uint32_t batch_rows;
    char *partitioner;          /* the producer's `partitioner` property; NULL: the default */
    int32_t n_partitions;       /* of the topic; 0: unknown (then one record per row) */
    uint64_t partitions_due_ms; /* when to ask for the partition count again */
    uint32_t *order;            /* batch indices by partition, and their partitions */
    int32_t *part_of;
    size_t order_cap;
    spw_counter_t *m_rows, *m_tombs, *m_bytes, *m_failed, *m_restore_keys;
    spw_gauge_t *m_lag;

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu. */
    bool has_batch, busy, stop, want_sync, want_restore;
    uint64_t restore_epoch; /* the oldest restored epoch not yet scanned for */
    uint64_t sync_done;
    int sync_timeout_ms;
    spw_err_t sync_rc;
    struct spw_kafka_partition *marks;
    size_t n_marks;
    struct pub_entry *failed; /* keys whose delivery failed, to hand off again */
    size_t n_failed, cap_failed;
    uint64_t failed_total;
};

/* ---- changed-key set ---- */

static bool set_grow(struct pub_set *s)
{
    size_t cap = s->cap ? s->cap * 2 : SET_MIN_CAP;
    struct pub_entry *e = calloc(cap, sizeof(*e));
    if (!e)
        return false;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->e[i].used)
            continue;
        size_t j = spw_hash_mix64(s->e[i].key) & (cap - 1);
        while (e[j].used)
            j = (j + 1) & (cap - 1);
        e[j] = s->e[i];
    }
    free(s->e);
    s->e = e;
    s->cap = cap;
    return true;
}

/* The entry of key, inserted when absent (NULL when out of memory). */
static struct pub_entry *set_get(struct pub_set *s, uint64_t key)
{
    if ((s->n + 1) * 2 > s->cap && !set_grow(s))
        return NULL;
    size_t j = spw_hash_mix64(key) & (s->cap - 1);
    while (s->e[j].used) {
        if (s->e[j].key == key)
            return &s->e[j];
        j = (j + 1) & (s->cap - 1);
    }
    s->e[j].used = 1;
    s->e[j].key = key;
    s->e[j].event_ms = 0;
    s->e[j].applied_ms = 0;
    s->e[j].tomb = 0;
    s->n++;
    return &s->e[j];
}

static void set_clear(struct pub_set *s)
{
    if (s->cap > SET_MIN_CAP && s->n * 8 < s->cap) {
        /* Shrink after a burst so that an idle shard does not hold a huge table. */
        free(s->e);
        s->e = NULL;
        s->cap = 0;
        s->n = 0;
        set_grow(s);
        return;
    }
    if (s->e)
        memset(s->e, 0, s->cap * sizeof(*s->e));
    s->n = 0;
}

/* ---- loop thread ---- */

void spw_ps__publisher_touch(spw_ps__publisher_t *pub, const uint64_t *keys, size_t n,
                             int64_t event_ms)
{
    int64_t now = spw_time_wall_ms();
    struct pub_set *s = &pub->set;
    /* Grown for the whole request first, so that each key's slot can be asked for a few keys
     * ahead of its probe (the set outgrows the caches: a miss per key otherwise). */
    while ((s->n + n + 1) * 2 > s->cap && set_grow(s))
        ;
    for (size_t i = 0; i < n; i++) {
        if (i + SET_PREFETCH < n && s->cap > 0)
            __builtin_prefetch(&s->e[spw_hash_mix64(keys[i + SET_PREFETCH]) & (s->cap - 1)], 1);
        struct pub_entry *e = set_get(s, keys[i]);
        if (!e) {
            SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 5000, "publish set out of memory", "key=%" PRIu64,
                                keys[i]);
            return;
        }
        /* tomb stays: a key evicted (or restored away) and pushed again without being admitted
         * still owes its tombstone; a key with a row again publishes the row. */
        if (event_ms > e->event_ms)
            e->event_ms = event_ms;
        e->applied_ms = now;
    }
}

void spw_ps__publisher_on_evict(void *opaque, uint64_t key, uint32_t version)
{
    (void)version;
    spw_ps__publisher_t *pub = opaque;
    struct pub_entry *e = set_get(&pub->set, key);
    if (!e) {
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 5000, "publish set out of memory", "key=%" PRIu64, key);
        return;
    }
    e->tomb = 1;
    e->applied_ms = spw_time_wall_ms();
}

/* Remembers e to be handed off again at the next round. mu held. */
static void requeue_add_locked(spw_ps__publisher_t *pub, const struct pub_entry *e)
{
    if (pub->n_failed == pub->cap_failed && pub->cap_failed < REQUEUE_MAX_KEYS) {
        size_t cap = pub->cap_failed ? pub->cap_failed * 2 : 256;
        struct pub_entry *f = realloc(pub->failed, cap * sizeof(*f));
        if (f) {
            pub->failed = f;
            pub->cap_failed = cap;
        }
    }
    if (pub->n_failed < pub->cap_failed)
        pub->failed[pub->n_failed++] = *e;
    else
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 5000, "publish: failed record not re-queued",
                            "key=%" PRIu64, e->key);
}

/* Moves keys whose delivery failed back into the set (unless changed again since). mu held. */
static void requeue_failed_locked(spw_ps__publisher_t *pub)
{
    for (size_t i = 0; i < pub->n_failed; i++) {
        const struct pub_entry *f = &pub->failed[i];
        size_t before = pub->set.n;
        struct pub_entry *e = set_get(&pub->set, f->key);
        if (e && pub->set.n != before) {
            e->event_ms = f->event_ms;
            e->applied_ms = f->applied_ms;
            e->tomb = f->tomb;
        } else if (e) {
            e->tomb |= f->tomb;
        }
    }
    pub->n_failed = 0;
}

static bool batch_reserve(struct pub_batch *b, size_t n, uint32_t dim)
{
    if (n <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n)
        cap *= 2;
    struct pub_entry *meta = realloc(b->meta, cap * sizeof(*meta));
    if (meta)
        b->meta = meta;
    uint32_t *v = realloc(b->versions, cap * sizeof(*v));
    if (v)
        b->versions = v;
    float *w = realloc(b->weights, cap * dim * sizeof(*w));
    if (w)
        b->weights = w;
    if (!meta || !v || !w)
        return false;
    b->cap = cap;
    return true;
}

/* Copies the changed rows into the batch and clears the set. The thread must be idle. */
static void fill_batch(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch)
{
    struct pub_batch *b = &pub->batch;
    b->n = 0;
    b->epoch = epoch;
    if (pub->set.n == 0)
        return;
    if (!batch_reserve(b, pub->set.n, pub->dim)) {
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 5000, "publish batch out of memory; retrying later",
                            "rows=%zu", pub->set.n);
        return; /* the set keeps its keys */
    }
    for (size_t i = 0; i < pub->set.cap; i++) {
        const struct pub_entry *e = &pub->set.e[i];
        if (!e->used)
            continue;
        spw_err_t rc = spw_ps_store_get_row(store, e->key, pub->row);
        struct pub_entry *m = &b->meta[b->n];
        *m = *e;
        if (rc == SPW_OK) {
            m->tomb = 0;
            b->versions[b->n] = pub->row->version;
            memcpy(&b->weights[b->n * pub->dim], pub->row->data, pub->dim * sizeof(float));
            b->n++;
        } else if (rc == SPW_ERR_NOT_FOUND) {
            if (e->tomb) { /* evicted and not recreated */
                b->versions[b->n] = 0;
                b->n++;
            } /* else never admitted: nothing to publish */
        } else {
            SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 5000, "publish: reading a row failed",
                                "key=%" PRIu64 " err=\"%s\"", e->key, spw_err_str(rc));
            /* Kept for the next round. */
            pthread_mutex_lock(&pub->mu);
            requeue_add_locked(pub, e);
            pthread_mutex_unlock(&pub->mu);
        }
    }
    set_clear(&pub->set);
}

/* Hands the changes to the thread. wait: wait for a busy thread first (else skip if busy). */
static void hand_off(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch, bool wait)
{
    pthread_mutex_lock(&pub->mu);
    requeue_failed_locked(pub);
    while (wait && (pub->busy || pub->has_batch))
        pthread_cond_wait(&pub->cv, &pub->mu);
    bool idle = !pub->busy && !pub->has_batch;
    pthread_mutex_unlock(&pub->mu);
    if (!idle || pub->set.n == 0)
        return;
    fill_batch(pub, store, epoch);
    if (pub->batch.n == 0)
        return;
    pthread_mutex_lock(&pub->mu);
    pub->has_batch = true;
    pthread_cond_broadcast(&pub->cv);
    pthread_mutex_unlock(&pub->mu);
}

void spw_ps__publisher_tick(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch)
{
    uint64_t now = spw_time_mono_ms();
    if (now < pub->next_ms)
        return;
    pub->next_ms = now + pub->interval_ms;
    hand_off(pub, store, epoch, false);
}

/* Asks the thread for the high-water offsets once what it holds is produced and flushed; the
 * ticket to wait for them with. */
static uint64_t sync_start(spw_ps__publisher_t *pub, int timeout_ms)
{
    pthread_mutex_lock(&pub->mu);
    while (pub->want_sync) /* one sync at a time (a ticket covers one request) */
        pthread_cond_wait(&pub->cv, &pub->mu);
    uint64_t ticket = pub->sync_done + 1;
    pub->want_sync = true;
    pub->sync_timeout_ms = timeout_ms;
    pthread_cond_broadcast(&pub->cv);
    pthread_mutex_unlock(&pub->mu);
    return ticket;
}

/* The offsets of sync ticket: into out (*n entries), or its error (*n = 0). */
static spw_err_t sync_wait(spw_ps__publisher_t *pub, uint64_t ticket,
                           struct spw_kafka_partition *out, size_t *n)
{
    *n = 0;
    pthread_mutex_lock(&pub->mu);
    while (pub->sync_done < ticket)
        pthread_cond_wait(&pub->cv, &pub->mu);
    spw_err_t rc = pub->sync_rc;
    if (rc == SPW_OK) {
        memcpy(out, pub->marks, pub->n_marks * sizeof(*out));
        *n = pub->n_marks;
    }
    pthread_mutex_unlock(&pub->mu);
    return rc;
}

spw_err_t spw_ps__publisher_sync(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch,
                                 int timeout_ms, struct spw_kafka_partition *out, size_t *n)
{
    hand_off(pub, store, epoch, true);
    return sync_wait(pub, sync_start(pub, timeout_ms), out, n);
}

uint64_t spw_ps__publisher_checkpoint_start(spw_ps__publisher_t *pub)
{
    return sync_start(pub, SYNC_TIMEOUT_MS);
}

void spw_ps__publisher_fill_offsets(spw_ps__publisher_t *pub, uint64_t ticket, uint64_t epoch,
                                    spw_arena_t *arena, Sparrow__CheckpointReply *ck)
{
    struct spw_kafka_partition *marks =
        spw_arena_alloc(arena, SPW_PS_PUBLISH_MAX_PARTITIONS * sizeof(*marks));
    size_t n = 0;
    if (!marks) { /* the sync goes on; the next one waits for it */
        SPW_ERROR("checkpoint without update offsets", "reason=\"out of memory\"");
        return;
    }
    spw_err_t rc = sync_wait(pub, ticket, marks, &n);
    if (rc != SPW_OK) {
        SPW_ERROR("checkpoint without update offsets", "epoch=%" PRIu64 " err=\"%s\"", epoch,
                  spw_err_str(rc));
        return;
    }
    Sparrow__PartitionOffset *po = spw_arena_alloc(arena, n * sizeof(*po));
    Sparrow__PartitionOffset **pp = spw_arena_alloc(arena, n * sizeof(*pp));
    if (n == 0 || !po || !pp)
        return;
    for (size_t i = 0; i < n; i++) {
        sparrow__partition_offset__init(&po[i]);
        po[i].topic = marks[i].topic;
        po[i].has_partition = po[i].has_offset = true;
        po[i].partition = marks[i].partition;
        po[i].offset = marks[i].offset;
        pp[i] = &po[i];
    }
    ck->n_update_offsets = n;
    ck->update_offsets = pp;
    SPW_INFO("checkpoint update offsets", "epoch=%" PRIu64 " partitions=%zu", epoch, n);
}

void spw_ps__publisher_restored(spw_ps__publisher_t *pub, uint64_t epoch)
{
    pthread_mutex_lock(&pub->mu);
    if (!pub->want_restore || epoch < pub->restore_epoch)
        pub->restore_epoch = epoch;
    pub->want_restore = true;
    pthread_cond_broadcast(&pub->cv);
    pthread_mutex_unlock(&pub->mu);
    SPW_INFO("restore: re-publishing the keys published since the restored epoch", "epoch=%" PRIu64,
             epoch);
}

/* ---- publisher thread ---- */

/* What the restore scan tracks per partition: the high watermark to reach, the next offset. */
struct scan_part {
    int32_t partition;
    int64_t target, next;
};

struct scan_state {
    struct scan_part *parts;
    size_t n;
};

static struct scan_part *scan_part_of(struct scan_state *st, int32_t partition)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->parts[i].partition == partition)
            return &st->parts[i];
    return NULL;
}

static bool scan_done(const struct scan_state *st)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->parts[i].next < st->parts[i].target)
            return false;
    return true;
}

/*
 * After a restore to epoch: reads the update stream back from its beginning up to the high
 * watermarks (taken after every earlier record was flushed) and re-queues, as owing a
 * tombstone, every key this shard published with an epoch >= the restored one. Those are the
 * keys whose published value may be newer than the restored store (a record published after
 * checkpoint E carries epoch >= E); the next hand-off publishes each key's restored row, or a
 * tombstone when the restored store lacks it, after every stale record of the key in its
 * partition. So any reader of the stream (serve) converges to the restored state. Runs on the
 * publisher thread (mu not held).
 */
static void restore_scan(spw_ps__publisher_t *pub, uint64_t epoch)
{
    uint64_t t0 = spw_time_mono_ms();
    if (spw_kafka_producer_flush(pub->producer, SYNC_TIMEOUT_MS) != SPW_OK)
        SPW_WARN("restore scan: flush timed out", "outstanding=%" PRIu64,
                 spw_kafka_producer_outstanding(pub->producer));
    size_t n = 0;
    if (spw_kafka_producer_high_watermarks(pub->producer, pub->topic, pub->marks,
                                           SPW_PS_PUBLISH_MAX_PARTITIONS, &n,
                                           SYNC_TIMEOUT_MS) != SPW_OK) {
        SPW_ERROR("restore scan failed: serving replicas may keep rows newer than the restored "
                  "epoch",
                  "epoch=%" PRIu64 " reason=\"high watermarks unknown\"", epoch);
        return;
    }
    struct scan_state st = {calloc(n ? n : 1, sizeof(struct scan_part)), n};
    spw_arena_t *arena = spw_arena_new(1 << 16, 4 * (size_t)SCAN_MAX_UPDATE);
    if (!st.parts || !arena) {
        SPW_ERROR("restore scan failed", "epoch=%" PRIu64 " reason=\"out of memory\"", epoch);
        goto out_free;
    }
    for (size_t i = 0; i < n; i++)
        st.parts[i] = (struct scan_part){pub->marks[i].partition, pub->marks[i].offset, 0};
    if (scan_done(&st))
        goto out_free; /* nothing was ever published */
    char group[128], errstr[256];
    snprintf(group, sizeof(group), "sparrow-ps-restore-%u-%ld-%" PRId64, pub->shard, (long)getpid(),
             spw_time_wall_ms());
    const char *topics[1] = {pub->topic};
    struct spw_kafka_consumer_opts co = {
        .group_id = group,
        .topics = topics,
        .n_topics = 1,
        .start_latest = false,
        .lost = SPW_KAFKA_LOST_EARLIEST,
    };
    spw_kafka_consumer_t *c = spw_kafka_consumer_new(pub->props, &co, errstr, sizeof(errstr));
    if (!c) {
        SPW_ERROR("restore scan failed", "epoch=%" PRIu64 " reason=\"%s\"", epoch, errstr);
        goto out_free;
    }
    uint64_t keys = 0, records = 0;
    /* a stop request ends the scan: the next start restores and scans again */
    while (!scan_done(&st) && !spw_signal_stop_requested() &&
           spw_time_mono_ms() - t0 < SCAN_TIMEOUT_MS) {
        struct spw_kafka_msg msg;
        spw_err_t rc = spw_kafka_consumer_poll(c, SCAN_POLL_MS, &msg);
        if (rc == SPW_ERR_TIMEOUT || rc == SPW_ERR_CORRUPT)
            continue;
        if (rc != SPW_OK)
            break;
        struct scan_part *sp = scan_part_of(&st, msg.partition);
        if (sp && msg.offset + 1 > sp->next)
            sp->next = msg.offset + 1;
        Sparrow__ModelUpdate *u = NULL;
        spw_arena_reset(arena);
        records++;
        struct spw_wire_update_rows rows;
        if (msg.value &&
            spw_wire_unpack_model_update(msg.value, msg.len, SCAN_MAX_UPDATE, arena, &u) ==
                SPW_OK &&
            u->has_shard && u->shard == pub->shard && (!u->has_epoch || u->epoch >= epoch) &&
            spw_wire_model_update_rows(u, &rows) == SPW_OK) {
            int64_t now = spw_time_wall_ms();
            pthread_mutex_lock(&pub->mu);
            for (size_t i = 0; i < rows.n; i++) {
                struct pub_entry e = {.key = rows.keys[i], .used = 1, .tomb = 1, .applied_ms = now};
                requeue_add_locked(pub, &e);
            }
            pthread_mutex_unlock(&pub->mu);
            keys += rows.n;
        }
        spw_kafka_msg_release(&msg);
    }
    bool complete = scan_done(&st);
    spw_kafka_consumer_destroy(c);
    if (pub->m_restore_keys)
        spw_counter_add(pub->m_restore_keys, keys);
    if (complete)
        SPW_INFO("restore scan done: keys re-queued for publishing",
                 "epoch=%" PRIu64 " records=%" PRIu64 " keys=%" PRIu64 " ms=%" PRIu64, epoch,
                 records, keys, spw_time_mono_ms() - t0);
    else if (spw_signal_stop_requested())
        SPW_INFO("restore scan stopped (the next start restores and scans again)",
                 "epoch=%" PRIu64 " records=%" PRIu64 " keys=%" PRIu64, epoch, records, keys);
    else
        SPW_ERROR("restore scan incomplete: serving replicas may keep rows newer than the "
                  "restored epoch",
                  "epoch=%" PRIu64 " records=%" PRIu64 " keys=%" PRIu64, epoch, records, keys);
out_free:
    spw_arena_destroy(arena);
    free(st.parts);
}

static void on_delivery(void *opaque, void *msg_opaque, spw_err_t err, int32_t partition,
                        int64_t offset)
{
    (void)partition;
    (void)offset;
    spw_ps__publisher_t *pub = opaque;
    struct pub_record *r = msg_opaque;
    if (err == SPW_OK) {
        if (pub->m_tombs && r->n_tombs)
            spw_counter_add(pub->m_tombs, r->n_tombs);
        if (pub->m_rows && r->n > r->n_tombs)
            spw_counter_add(pub->m_rows, r->n - r->n_tombs);
        if (pub->m_bytes)
            spw_counter_add(pub->m_bytes, r->bytes);
        if (pub->m_lag && r->applied_ms > 0) {
            int64_t lag = spw_time_wall_ms() - r->applied_ms;
            spw_gauge_set(pub->m_lag, lag > 0 ? (double)lag / 1000.0 : 0.0);
        }
        free(r);
        return;
    }
    if (pub->m_failed)
        spw_counter_add(pub->m_failed, r->n);
    pthread_mutex_lock(&pub->mu);
    pub->failed_total += r->n;
    for (uint32_t i = 0; i < r->n; i++)
        requeue_add_locked(pub, &r->rows[i]);
    pthread_mutex_unlock(&pub->mu);
    free(r);
}

/* The record of batch rows idx[0..n) (one row when the record is keyed), or NULL when out of
 * memory. */
static struct pub_record *record_new(const struct pub_batch *b, const uint32_t *idx, size_t n)
{
    struct pub_record *r = malloc(sizeof(*r) + n * sizeof(r->rows[0]));
    if (!r)
        return NULL;
    *r = (struct pub_record){.n = (uint32_t)n};
    for (size_t i = 0; i < n; i++) {
        const struct pub_entry *m = &b->meta[idx[i]];
        r->rows[i] = *m;
        r->rows[i].used = 1;
        r->n_tombs += m->tomb;
        if (m->applied_ms > r->applied_ms)
            r->applied_ms = m->applied_ms;
    }
    return r;
}

/* Encodes u into pub->buf and queues it with key (may be NULL) to partition (-1: by key); r
 * rides along. A refused record's rows are handed off again, as a failed delivery's. */
static void produce(spw_ps__publisher_t *pub, Sparrow__ModelUpdate *u, const void *key,
                    size_t key_len, int32_t partition, struct pub_record *r)
{
    size_t len = sparrow__model_update__get_packed_size(u);
    if (len > pub->buf_cap) {
        uint8_t *nb = realloc(pub->buf, len);
        if (!nb) {
            on_delivery(pub, r, SPW_ERR_NOMEM, -1, -1);
            return;
        }
        pub->buf = nb;
        pub->buf_cap = len;
    }
    sparrow__model_update__pack(u, pub->buf);
    r->bytes = (uint32_t)(len + key_len);
    spw_err_t rc = spw_kafka_producer_send(pub->producer, pub->topic, partition, key, key_len,
                                           pub->buf, len, NULL, 0, r);
    if (rc == SPW_OK)
        return;
    SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 5000, "publish: produce refused", "err=\"%s\"",
                        spw_err_str(rc));
    on_delivery(pub, r, SPW_ERR_KAFKA, -1, -1);
}

/* Out of memory for a record: its rows are handed off again at the next round. */
static void requeue_rows(spw_ps__publisher_t *pub, const struct pub_batch *b, const uint32_t *idx,
                         size_t n)
{
    pthread_mutex_lock(&pub->mu);
    for (size_t i = 0; i < n; i++)
        requeue_add_locked(pub, &b->meta[idx[i]]);
    pthread_mutex_unlock(&pub->mu);
}

/* One record of batch row i, keyed by its feature key. */
static void produce_one(spw_ps__publisher_t *pub, const struct pub_batch *b, uint32_t i)
{
    const struct pub_entry *m = &b->meta[i];
    Sparrow__ModelUpdate u = SPARROW__MODEL_UPDATE__INIT;
    u.has_key = u.has_version = u.has_epoch = u.has_shard = u.has_applied_ms = true;
    u.key = m->key;
    u.version = b->versions[i];
    u.epoch = b->epoch;
    u.shard = pub->shard;
    u.applied_ms = m->applied_ms;
    if (m->event_ms > 0) {
        u.has_event_time_ms = true;
        u.event_time_ms = m->event_ms;
    }
    if (m->tomb) {
        u.has_tombstone = true;
        u.tombstone = true;
    } else {
        u.has_weights = true;
        u.weights.data = (uint8_t *)&b->weights[i * pub->dim];
        u.weights.len = pub->dim * sizeof(float);
    }
    struct pub_record *r = record_new(b, &i, 1);
    if (!r) {
        requeue_rows(pub, b, &i, 1);
        return;
    }
    char key[8];
    spw_ps__key_encode(m->key, key);
    produce(pub, &u, key, sizeof(key), -1, r);
}

/* One batch record of rows idx[0..n), all of partition: the blocks of proto's ModelUpdate,
 * built in one allocation. */
static void produce_rows(spw_ps__publisher_t *pub, const struct pub_batch *b, const uint32_t *idx,
                         size_t n, int32_t partition)
{
    const uint32_t dim = pub->dim;
    size_t w_bytes = n * dim * sizeof(float);
    unsigned char *blk = malloc(n * BATCH_ROW_FIXED + w_bytes);
    struct pub_record *r = blk ? record_new(b, idx, n) : NULL;
    if (!r) {
        free(blk);
        requeue_rows(pub, b, idx, n);
        return;
    }
    uint64_t *keys = (uint64_t *)(void *)blk;
    int64_t *ev = (int64_t *)(void *)(blk + 8 * n), *ap = (int64_t *)(void *)(blk + 16 * n);
    float *w = (float *)(void *)(blk + 24 * n);
    uint32_t *ver = (uint32_t *)(void *)(blk + 24 * n + w_bytes);
    uint8_t *tomb = blk + 28 * n + w_bytes;
    for (size_t j = 0; j < n; j++) {
        const struct pub_entry *m = &b->meta[idx[j]];
        keys[j] = m->key;
        ev[j] = m->event_ms > 0 ? m->event_ms : 0;
        ap[j] = m->applied_ms;
        ver[j] = b->versions[idx[j]];
        tomb[j] = m->tomb;
        if (m->tomb)
            memset(&w[j * dim], 0, dim * sizeof(float));
        else
            memcpy(&w[j * dim], &b->weights[(size_t)idx[j] * dim], dim * sizeof(float));
    }
    Sparrow__ModelUpdate u = SPARROW__MODEL_UPDATE__INIT;
    u.has_epoch = u.has_shard = true;
    u.epoch = b->epoch;
    u.shard = pub->shard;
    u.has_keys = u.has_versions = u.has_event_times_ms = u.has_applied_times_ms = u.has_tombstones =
        u.has_weights = true;
    u.keys = (ProtobufCBinaryData){8 * n, (uint8_t *)keys};
    u.event_times_ms = (ProtobufCBinaryData){8 * n, (uint8_t *)ev};
    u.applied_times_ms = (ProtobufCBinaryData){8 * n, (uint8_t *)ap};
    u.versions = (ProtobufCBinaryData){4 * n, (uint8_t *)ver};
    u.tombstones = (ProtobufCBinaryData){n, tomb};
    u.weights = (ProtobufCBinaryData){w_bytes, (uint8_t *)w};
    produce(pub, &u, NULL, 0, partition, r);
    free(blk);
}

/* The topic's partition count, asked again every PARTITIONS_TTL_MS; 0 while unknown. */
static int32_t partitions(spw_ps__publisher_t *pub)
{
    uint64_t now = spw_time_mono_ms();
    if (now >= pub->partitions_due_ms) {
        int32_t n = 0;
        if (spw_kafka_producer_partition_count(pub->producer, pub->topic, PARTITIONS_WAIT_MS, &n) ==
            SPW_OK)
            pub->n_partitions = n;
        uint64_t took = spw_time_mono_ms() - now;
        if (took > PARTITIONS_WAIT_MS / 4)
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 60000, "publish: the topic's metadata was slow",
                                "ms=%" PRIu64 " partitions=%" PRId32, took, pub->n_partitions);
        pub->partitions_due_ms = spw_time_mono_ms() + PARTITIONS_TTL_MS;
    }
    return pub->n_partitions;
}

/* Produces the batch: records of up to batch_rows rows (and RECORD_MAX_BYTES), each of the rows
 * of one partition, in the order the batch holds them; one keyed record per row when
 * batch_rows is 1 or the partition count is unknown. */
static bool order_reserve(spw_ps__publisher_t *pub, size_t n)
{
    if (n <= pub->order_cap)
        return true;
    uint32_t *o = realloc(pub->order, n * sizeof(*o));
    if (o)
        pub->order = o;
    int32_t *p = realloc(pub->part_of, n * sizeof(*p));
    if (p)
        pub->part_of = p;
    if (!o || !p)
        return false;
    pub->order_cap = n;
    return true;
}

static void produce_batch(spw_ps__publisher_t *pub, const struct pub_batch *b)
{
    int32_t n_parts = pub->batch_rows > 1 ? partitions(pub) : 0;
    /* Rows by partition, stably: a counting sort over the partitions of the rows' keys. */
    size_t *start = n_parts > 0 && order_reserve(pub, b->n)
                        ? calloc((size_t)n_parts + 1, sizeof(*start))
                        : NULL;
    if (!start) {
        for (uint32_t i = 0; i < b->n; i++)
            produce_one(pub, b, i);
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        char key[8];
        spw_ps__key_encode(b->meta[i].key, key);
        pub->part_of[i] = spw_kafka_key_partition(pub->partitioner, key, sizeof(key), n_parts);
        start[pub->part_of[i] + 1]++;
    }
    for (int32_t p = 0; p < n_parts; p++)
        start[p + 1] += start[p];
    for (size_t i = 0; i < b->n; i++)
        pub->order[start[pub->part_of[i]]++] = (uint32_t)i;
    size_t per_record = RECORD_MAX_BYTES / (BATCH_ROW_FIXED + (size_t)pub->dim * sizeof(float));
    if (per_record > pub->batch_rows)
        per_record = pub->batch_rows;
    if (per_record == 0)
        per_record = 1;
    for (size_t i = 0; i < b->n;) {
        int32_t p = pub->part_of[pub->order[i]];
        size_t j = i + 1;
        while (j < b->n && j - i < per_record && pub->part_of[pub->order[j]] == p)
            j++;
        produce_rows(pub, b, &pub->order[i], j - i, p);
        i = j;
    }
    free(start);
}

static void *publisher_main(void *arg)
{
    spw_ps__publisher_t *pub = arg;
    pthread_mutex_lock(&pub->mu);
    for (;;) {
        if (pub->has_batch) {
            pub->has_batch = false;
            pub->busy = true;
            pthread_mutex_unlock(&pub->mu);
            produce_batch(pub, &pub->batch);
            spw_kafka_producer_poll(pub->producer, 0);
            pthread_mutex_lock(&pub->mu);
            pub->busy = false;
            pthread_cond_broadcast(&pub->cv);
            continue;
        }
        if (pub->want_sync) {
            int timeout_ms = pub->sync_timeout_ms;
            pthread_mutex_unlock(&pub->mu);
            /* The flush only saves replays: the offsets are right either way, since the server
             * loop changes nothing until they are taken (later changes land above them). */
            if (spw_kafka_producer_flush(pub->producer, timeout_ms) != SPW_OK)
                SPW_WARN("publish: flush timed out before a checkpoint", "outstanding=%" PRIu64,
                         spw_kafka_producer_outstanding(pub->producer));
            size_t n = 0;
            spw_err_t rc =
                spw_kafka_producer_high_watermarks(pub->producer, pub->topic, pub->marks,
                                                   SPW_PS_PUBLISH_MAX_PARTITIONS, &n, timeout_ms);
            pthread_mutex_lock(&pub->mu);
            pub->n_marks = n;
            pub->sync_rc = rc;
            pub->want_sync = false;
            pub->sync_done++;
            pthread_cond_broadcast(&pub->cv);
            continue;
        }
        if (pub->want_restore) {
            uint64_t epoch = pub->restore_epoch;
            pub->want_restore = false;
            pub->busy = true;
            pthread_mutex_unlock(&pub->mu);
            restore_scan(pub, epoch);
            pthread_mutex_lock(&pub->mu);
            pub->busy = false;
            pthread_cond_broadcast(&pub->cv);
            continue;
        }
        if (pub->stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += IDLE_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int w = pthread_cond_timedwait(&pub->cv, &pub->mu, &ts);
        if (w == ETIMEDOUT && spw_kafka_producer_outstanding(pub->producer) > 0) {
            pthread_mutex_unlock(&pub->mu);
            spw_kafka_producer_poll(pub->producer, 0);
            pthread_mutex_lock(&pub->mu);
        }
    }
    pthread_mutex_unlock(&pub->mu);
    return NULL;
}

/* ---- lifecycle ---- */

static const char *bootstrap_of(const struct spw_ps_server_conf *conf,
                                const spw_kafka_props_t *props)
{
    if (conf->publish_brokers && conf->publish_brokers[0])
        return conf->publish_brokers;
    return spw_kafka_props_get(props, "bootstrap.servers");
}

spw_ps__publisher_t *spw_ps__publisher_new(const struct spw_ps_server_conf *conf,
                                           struct spw_metrics *metrics, char *errstr,
                                           size_t errstr_size)
{
    errstr[0] = '\0';
    if (conf->publish_interval_ms == 0)
        return NULL;
    spw_kafka_props_t *props = spw_kafka_props_new();
    if (!props) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    if (conf->kafka_config && spw_kafka_props_from_config(props, conf->kafka_config) != SPW_OK) {
        snprintf(errstr, errstr_size, "kafka properties: out of memory");
        goto out_destroy_props;
    }
    const char *bootstrap = bootstrap_of(conf, props);
    if (!bootstrap || !bootstrap[0]) {
        SPW_INFO("update publishing off: no kafka.bootstrap.servers or pserver.publish.brokers",
                 NULL);
        goto out_destroy_props;
    }
    if (bootstrap == conf->publish_brokers &&
        spw_kafka_props_set(props, "bootstrap.servers", bootstrap) != SPW_OK) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_destroy_props;
    }
    spw_ps__publisher_t *pub = calloc(1, sizeof(*pub));
    if (!pub) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_destroy_props;
    }
    pub->dim = conf->store.dim;
    pub->shard = conf->store.shard;
    pub->interval_ms = conf->publish_interval_ms;
    pub->batch_rows = conf->publish_batch_rows;
    const char *partitioner = spw_kafka_props_get(props, "partitioner");
    if (partitioner && partitioner[0] && !(pub->partitioner = strdup(partitioner))) {
        free(pub);
        snprintf(errstr, errstr_size, "out of memory");
        goto out_destroy_props;
    }
    pub->next_ms = spw_time_mono_ms() + pub->interval_ms;
    pub->topic = strdup(conf->publish_topic && conf->publish_topic[0] ? conf->publish_topic
                                                                      : "model-updates");
    pub->marks = calloc(SPW_PS_PUBLISH_MAX_PARTITIONS, sizeof(*pub->marks));
    if (!pub->topic || !pub->marks || !set_grow(&pub->set) ||
        spw_ps__publisher_set_dim(pub, conf->store.dim, conf->store.optim.kind) != SPW_OK) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_free_pub;
    }
    if (metrics) {
        pub->m_rows = spw_metrics_counter_new(metrics, "sparrow_ps_published_total",
                                              "Model updates delivered to the update stream.",
                                              "kind=\"row\"");
        pub->m_tombs = spw_metrics_counter_new(metrics, "sparrow_ps_published_total",
                                               "Model updates delivered to the update stream.",
                                               "kind=\"tombstone\"");
        pub->m_bytes = spw_metrics_counter_new(
            metrics, "sparrow_ps_published_bytes_total",
            "Bytes (record keys and values) delivered to the update stream.", NULL);
        pub->m_failed = spw_metrics_counter_new(
            metrics, "sparrow_ps_publish_failures_total",
            "Model-update deliveries that failed (the key is published again).", NULL);
        pub->m_restore_keys = spw_metrics_counter_new(
            metrics, "sparrow_ps_restore_republished_total",
            "Keys re-published after restores (found in the stream since the restored epoch).",
            NULL);
        pub->m_lag = spw_metrics_gauge_new(
            metrics, "sparrow_ps_publish_lag_seconds",
            "Applied on the shard to delivered to Kafka, of the last delivered update.", NULL);
    }
    char labels[64];
    snprintf(labels, sizeof(labels), "role=\"pserver-publish\"");
    struct spw_kafka_producer_opts po = {
        .on_delivery = on_delivery,
        .opaque = pub,
        .metrics = metrics,
        .metrics_labels = labels,
    };
    pub->producer = spw_kafka_producer_new(props, &po, errstr, errstr_size);
    if (!pub->producer)
        goto out_free_pub;
    pthread_mutex_init(&pub->mu, NULL);
    pthread_cond_init(&pub->cv, NULL);
    if (pthread_create(&pub->thread, NULL, publisher_main, pub) != 0) {
        snprintf(errstr, errstr_size, "pthread_create failed");
        goto out_destroy_sync;
    }
    SPW_INFO("publishing model updates",
             "topic=%s interval_ms=%" PRIu64 " batch_rows=%" PRIu32 " brokers=%s", pub->topic,
             pub->interval_ms, pub->batch_rows, spw_kafka_props_get(props, "bootstrap.servers"));
    pub->props = props;
    return pub;

out_destroy_sync:
    pthread_cond_destroy(&pub->cv);
    pthread_mutex_destroy(&pub->mu);
    spw_kafka_producer_destroy(pub->producer, 0);
out_free_pub:
    free(pub->partitioner);
    free(pub->set.e);
    free(pub->marks);
    free(pub->row);
    free(pub->topic);
    free(pub);
out_destroy_props:
    spw_kafka_props_destroy(props);
    return NULL;
}

spw_err_t spw_ps__publisher_set_dim(spw_ps__publisher_t *pub, uint32_t dim,
                                    enum spw_ps_optimizer kind)
{
    size_t floats = dim + spw_ps_slot_floats(kind, dim);
    struct spw_ps_row_copy *row = malloc(sizeof(*row) + floats * sizeof(float));
    if (!row)
        return SPW_ERR_NOMEM;
    free(pub->row);
    pub->row = row;
    pub->row_floats = floats;
    pub->dim = dim;
    return SPW_OK;
}

void spw_ps__publisher_destroy(spw_ps__publisher_t *pub, spw_ps_store_t *store, uint64_t epoch)
{
    if (!pub)
        return;
    if (store) {
        /* Final publish: everything changed so far, re-sending failures once more. */
        struct spw_kafka_partition *marks = calloc(SPW_PS_PUBLISH_MAX_PARTITIONS, sizeof(*marks));
        size_t n = 0;
        for (int round = 0; round < 3; round++) {
            if (marks)
                spw_ps__publisher_sync(pub, store, epoch, FINAL_FLUSH_MS, marks, &n);
            pthread_mutex_lock(&pub->mu);
            bool again = pub->n_failed > 0;
            pthread_mutex_unlock(&pub->mu);
            if (!again && pub->set.n == 0)
                break;
        }
        free(marks);
    }
    pthread_mutex_lock(&pub->mu);
    pub->stop = true;
    size_t lost = pub->n_failed + pub->set.n;
    uint64_t failures = pub->failed_total;
    pthread_cond_broadcast(&pub->cv);
    pthread_mutex_unlock(&pub->mu);
    pthread_join(pub->thread, NULL);
    spw_kafka_producer_destroy(pub->producer, FINAL_FLUSH_MS);
    if (lost)
        SPW_ERROR("model updates not published at shutdown", "keys=%zu", lost);
    SPW_INFO("update publisher stopped", "delivery_failures=%" PRIu64, failures);
    pthread_cond_destroy(&pub->cv);
    pthread_mutex_destroy(&pub->mu);
    free(pub->failed);
    free(pub->batch.meta);
    free(pub->batch.versions);
    free(pub->batch.weights);
    free(pub->buf);
    free(pub->order);
    free(pub->part_of);
    free(pub->partitioner);
    free(pub->set.e);
    free(pub->marks);
    free(pub->row);
    free(pub->topic);
    spw_kafka_props_destroy(pub->props);
    free(pub);
}
