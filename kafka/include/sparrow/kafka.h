/* Kafka plumbing for every role: property pass-through, a group consumer, an idempotent (or
 * transactional) producer, and librdkafka's mock cluster for tests and demos. */
#ifndef SPARROW_KAFKA_H
#define SPARROW_KAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/metrics.h"

/*
 * Conventions (besides err.h's): every handle here is owned by one thread (the one that polls
 * it) unless a function says otherwise. librdkafka's own log lines are routed through
 * sparrow/log.h. librdkafka errors become SPW_ERR_KAFKA with the text in errstr or in the log.
 */

/* ---- properties: `kafka.*` pass-through ---- */

/* An ordered list of librdkafka properties (key = value). Later sets of one key win. */
typedef struct spw_kafka_props spw_kafka_props_t;

/* Creates an empty list. NULL when out of memory. */
spw_kafka_props_t *spw_kafka_props_new(void);

/* Frees the list. NULL is a no-op. */
void spw_kafka_props_destroy(spw_kafka_props_t *props);

/* Adds or replaces key = value (both copied). SPW_ERR_NOMEM or SPW_OK. */
spw_err_t spw_kafka_props_set(spw_kafka_props_t *props, const char *key, const char *value);

/* The value of key, NULL when unset. Owned by props; valid until it changes. */
const char *spw_kafka_props_get(const spw_kafka_props_t *props, const char *key);

/* Adds every `kafka.<key>` pass-through property of cfg as <key>. */
spw_err_t spw_kafka_props_from_config(spw_kafka_props_t *props, const spw_config_t *cfg);

/* Checks every property against librdkafka's table (as rd_kafka_conf_set would when a client is
 * created). On a bad one returns SPW_ERR_INVALID with errstr naming it ("kafka.foo: No such
 * configuration property"). Used to fail at startup, before any client exists. */
spw_err_t spw_kafka_props_validate(const spw_kafka_props_t *props, char *errstr,
                                   size_t errstr_size);

/* ---- messages ---- */

/* One header of a produced or consumed record. */
struct spw_kafka_header {
    const char *name;  /* NUL-terminated */
    const void *value; /* may be NULL */
    size_t len;
};

/* A consumed record. The pointers stay valid until spw_kafka_msg_release(). */
struct spw_kafka_msg {
    const char *topic;
    int32_t partition;
    int64_t offset;
    const void *key; /* NULL when the record has no key */
    size_t key_len;
    const void *value; /* NULL for a tombstone */
    size_t len;
    int64_t timestamp_ms; /* -1 when unknown */
    void *rkm__;          /* private: librdkafka's message */
};

/* The value of header name in msg (first match) into *value and *len. SPW_ERR_NOT_FOUND when
 * absent. The bytes belong to msg. */
spw_err_t spw_kafka_msg_header(const struct spw_kafka_msg *msg, const char *name,
                               const void **value, size_t *len);

/* Frees the record's librdkafka resources and clears *msg. Safe on a cleared msg. */
void spw_kafka_msg_release(struct spw_kafka_msg *msg);

/* ---- consumer ---- */

typedef struct spw_kafka_consumer spw_kafka_consumer_t;

/* A partition and the offset to start it from (the checkpoint manifest's, later). */
struct spw_kafka_partition {
    char topic[256];
    int32_t partition;
    int64_t offset; /* next offset to read; SPW_KAFKA_OFFSET_STORED: use the committed one */
};
#define SPW_KAFKA_OFFSET_STORED (-1000)

/*
 * Called on the polling thread when partitions are newly assigned, before any is fetched: the
 * callee may overwrite parts[i].offset (it arrives as SPW_KAFKA_OFFSET_STORED) with the offset
 * to resume from. Partitions left at STORED start from the committed offset, or, without one,
 * from `start` (earliest or latest). revoked: called with the partitions taken away (offsets
 * are the next offsets the caller has stored, -1 when none), after which records from them
 * must not be stored. Either may be NULL.
 */
typedef void (*spw_kafka_assign_fn)(void *opaque, struct spw_kafka_partition *parts, size_t n);
typedef void (*spw_kafka_revoke_fn)(void *opaque, const struct spw_kafka_partition *parts,
                                    size_t n);

/* What to do with a committed or supplied offset that retention has already deleted. */
enum spw_kafka_lost_policy {
    SPW_KAFKA_LOST_FAIL,     /* log, count, return SPW_ERR_CORRUPT from poll (strict mode) */
    SPW_KAFKA_LOST_EARLIEST, /* log, count, continue from the earliest offset still held */
};

struct spw_kafka_consumer_opts {
    const char *group_id;      /* required */
    const char *const *topics; /* subscribed topics */
    size_t n_topics;
    bool start_latest;               /* without a committed offset: latest (else earliest) */
    enum spw_kafka_lost_policy lost; /* default SPW_KAFKA_LOST_FAIL */
    spw_kafka_assign_fn on_assign;   /* may be NULL */
    spw_kafka_revoke_fn on_revoke;   /* may be NULL */
    void *opaque;                    /* passed to the callbacks */
    spw_metrics_t *metrics;          /* may be NULL; borrowed, must outlive the consumer */
    const char *metrics_labels;      /* extra labels for every metric, may be NULL */
    bool read_committed;             /* isolation.level=read_committed */
    int close_timeout_ms;            /* the most spw_kafka_consumer_close waits; <= 0: 10000 */
};

/*
 * Creates a group consumer and subscribes it. props (borrowed) are applied first, then the
 * settings this wrapper relies on (enable.auto.offset.store=false, enable.auto.commit=false,
 * auto.offset.reset=error, group.id) override them. A bad property fails with errstr naming it.
 * Returns NULL on failure.
 */
spw_kafka_consumer_t *spw_kafka_consumer_new(const spw_kafka_props_t *props,
                                             const struct spw_kafka_consumer_opts *opts,
                                             char *errstr, size_t errstr_size);

/*
 * Waits up to timeout_ms for one record (rd_kafka_consumer_poll; rebalances run inside).
 * SPW_OK: *msg is filled and must be released. SPW_ERR_TIMEOUT: nothing arrived. SPW_ERR_CORRUPT:
 * offsets were lost to retention under SPW_KAFKA_LOST_FAIL (already logged and counted; the
 * consumer should be closed). SPW_ERR_KAFKA: a fatal consumer error (logged). Transient errors
 * (broker down, partition EOF) are logged rate-limited and reported as SPW_ERR_TIMEOUT.
 */
spw_err_t spw_kafka_consumer_poll(spw_kafka_consumer_t *consumer, int timeout_ms,
                                  struct spw_kafka_msg *msg);

/* Marks topic/partition as processed up to offset_next (the next offset to read) for the next
 * commit. Storing for a partition no longer assigned is ignored (returns SPW_OK). */
spw_err_t spw_kafka_consumer_store(spw_kafka_consumer_t *consumer, const char *topic,
                                   int32_t partition, int64_t offset_next);

/* Moves the fetch position of assigned partitions parts[0..n) to their offsets (offset < 0: the
 * earliest offset held), discarding records already fetched for them (a recovery seeks to a
 * checkpoint manifest's offsets). Waits up to timeout_ms. SPW_ERR_KAFKA with the failure logged
 * (a partition not assigned fails). */
spw_err_t spw_kafka_consumer_seek(spw_kafka_consumer_t *consumer,
                                  const struct spw_kafka_partition *parts, size_t n,
                                  int timeout_ms);
/*
 * Serves the group without consuming, for a caller that must not take records now (a trainer
 * held at a coordinator barrier) but must keep taking part in rebalances: pauses every assigned
 * partition (paused partitions are not fetched; records already fetched for them are dropped and
 * fetched again after the resume), then polls for at most timeout_ms, which runs rebalance
 * callbacks. A record that still arrives (a partition assigned during this call) is not
 * delivered: its partition is sought back to it. Call spw_kafka_consumer_resume to consume again.
 * Same thread as spw_kafka_consumer_poll.
 */
spw_err_t spw_kafka_consumer_serve(spw_kafka_consumer_t *consumer, int timeout_ms);

/* Resumes every assigned partition (after spw_kafka_consumer_serve). No-op when none paused. */
spw_err_t spw_kafka_consumer_resume(spw_kafka_consumer_t *consumer);

/* Commits the stored offsets. sync waits for the broker's answer. Nothing stored: SPW_OK. */
spw_err_t spw_kafka_consumer_commit(spw_kafka_consumer_t *consumer, bool sync);

/* Records consumed, sum of lag over assigned partitions (from the last fetch), rebalances seen,
 * offsets reported lost. */
uint64_t spw_kafka_consumer_consumed(const spw_kafka_consumer_t *consumer);
int64_t spw_kafka_consumer_lag(spw_kafka_consumer_t *consumer);
uint64_t spw_kafka_consumer_rebalances(const spw_kafka_consumer_t *consumer);
uint64_t spw_kafka_consumer_lost(const spw_kafka_consumer_t *consumer);

/*
 * Leaves the group: the revoke callbacks run on this thread, what was stored is committed, and
 * the group is told. Waits at most opts.close_timeout_ms: past it, logs, returns
 * SPW_ERR_TIMEOUT and leaves the partitions to the group's session timeout (a later
 * spw_kafka_consumer_destroy then frees without closing again). Idempotent.
 */
spw_err_t spw_kafka_consumer_close(spw_kafka_consumer_t *consumer);

/* Closes (if needed) and frees. After a close that failed or timed out, librdkafka's handle is
 * destroyed on a detached thread (its destroy would wait for the stalled group), so this returns
 * at once. NULL is a no-op. */
void spw_kafka_consumer_destroy(spw_kafka_consumer_t *consumer);

/* ---- producer ---- */

typedef struct spw_kafka_producer spw_kafka_producer_t;

/*
 * Delivery report, on the thread that calls spw_kafka_producer_poll/flush: err is SPW_OK or the
 * final error of a record that could not be delivered after the wrapper's retries.
 * msg_opaque is the value given to spw_kafka_producer_send.
 */
typedef void (*spw_kafka_delivery_fn)(void *opaque, void *msg_opaque, spw_err_t err,
                                      int32_t partition, int64_t offset);

struct spw_kafka_producer_opts {
    const char *transactional_id;      /* NULL: idempotent producer; else transactional */
    spw_kafka_delivery_fn on_delivery; /* may be NULL (failures still logged and counted) */
    void *opaque;
    int resend_max;             /* re-sends of a record whose delivery failed (default 0 -> 3) */
    spw_metrics_t *metrics;     /* may be NULL; borrowed */
    const char *metrics_labels; /* may be NULL */
};

/* Creates an idempotent producer (enable.idempotence=true, acks=all) from props (borrowed).
 * With a transactional_id it also initialises transactions (may take a few seconds). NULL with
 * errstr (naming a bad property) on failure. */
spw_kafka_producer_t *spw_kafka_producer_new(const spw_kafka_props_t *props,
                                             const struct spw_kafka_producer_opts *opts,
                                             char *errstr, size_t errstr_size);

/*
 * Queues one record (key, value and headers copied). partition -1 lets the partitioner pick by
 * key. Blocks, serving delivery reports, while the local queue is full. SPW_ERR_STOPPED when the
 * producer has a fatal error; SPW_ERR_KAFKA for other refusals (unknown topic, too large).
 */
spw_err_t spw_kafka_producer_send(spw_kafka_producer_t *producer, const char *topic,
                                  int32_t partition, const void *key, size_t key_len,
                                  const void *value, size_t len,
                                  const struct spw_kafka_header *headers, size_t n_headers,
                                  void *msg_opaque);

/* Serves delivery reports for up to timeout_ms. Returns the number served. */
int spw_kafka_producer_poll(spw_kafka_producer_t *producer, int timeout_ms);

/* Waits until every queued record is delivered or failed (reports served), at most timeout_ms.
 * SPW_ERR_TIMEOUT when records remain. */
spw_err_t spw_kafka_producer_flush(spw_kafka_producer_t *producer, int timeout_ms);

/* Records queued and not yet reported. */
uint64_t spw_kafka_producer_outstanding(const spw_kafka_producer_t *producer);

/* Delivered and finally failed records. */
uint64_t spw_kafka_producer_delivered(const spw_kafka_producer_t *producer);
uint64_t spw_kafka_producer_failed(const spw_kafka_producer_t *producer);

/* Transactions (transactional producers only). begin/commit/abort as librdkafka's; send_offsets
 * adds the consumer's current positions of its assigned partitions (the next offsets to read)
 * to the transaction. A retriable error is retried inside; an abortable one returns
 * SPW_ERR_STATE (call abort, rewind, redo); a fatal one SPW_ERR_KAFKA. */
spw_err_t spw_kafka_producer_txn_begin(spw_kafka_producer_t *producer);
spw_err_t spw_kafka_producer_txn_send_offsets(spw_kafka_producer_t *producer,
                                              spw_kafka_consumer_t *consumer,
                                              const struct spw_kafka_partition *offsets, size_t n,
                                              int timeout_ms);
spw_err_t spw_kafka_producer_txn_commit(spw_kafka_producer_t *producer, int timeout_ms);
spw_err_t spw_kafka_producer_txn_abort(spw_kafka_producer_t *producer, int timeout_ms);

/*
 * The high-water offset (the offset the next record will get) of every partition of topic,
 * asked from the brokers (metadata for the partitions, then one watermark query each; at most
 * timeout_ms per query). Fills out[0..*n) with topic, partition and offset, in partition order.
 * SPW_ERR_INVALID when the topic has more than max partitions, SPW_ERR_KAFKA (logged) when a
 * query fails or the topic is unknown. On the producer's thread.
 */
spw_err_t spw_kafka_producer_high_watermarks(spw_kafka_producer_t *producer, const char *topic,
                                             struct spw_kafka_partition *out, size_t max, size_t *n,
                                             int timeout_ms);

/* The number of partitions of topic (metadata from the brokers, at most timeout_ms) into
 * *count. SPW_ERR_KAFKA (logged) when the query fails or the topic is unknown. On the producer's
 * thread. */
spw_err_t spw_kafka_producer_partition_count(spw_kafka_producer_t *producer, const char *topic,
                                             int timeout_ms, int32_t *count);

/* The partition (0..count-1) that librdkafka's partitioner named partitioner (its `partitioner`
 * property; NULL: the default, consistent_random) gives a record with this non-empty key, so that
 * a caller routing records itself puts them where keyed records of the same key go. The
 * *_random partitioners differ only for empty keys. Pure; thread-safe. */
int32_t spw_kafka_key_partition(const char *partitioner, const void *key, size_t key_len,
                                int32_t count);

/* Flushes (at most timeout_ms), logs what could not be delivered, and frees. NULL is a no-op. */
void spw_kafka_producer_destroy(spw_kafka_producer_t *producer, int timeout_ms);

/* ---- mock cluster (tests, demo) ---- */

typedef struct spw_kafka_mock spw_kafka_mock_t;

/* Starts librdkafka's mock cluster of n_brokers (1..16) in this process (it runs on its own
 * thread). NULL with errstr on failure. */
spw_kafka_mock_t *spw_kafka_mock_new(int n_brokers, char *errstr, size_t errstr_size);

/* Stops the cluster. NULL is a no-op. */
void spw_kafka_mock_destroy(spw_kafka_mock_t *mock);

/* "127.0.0.1:port,..." owned by mock. */
const char *spw_kafka_mock_bootstraps(const spw_kafka_mock_t *mock);

/* Creates topic with partitions (1..10000), replication 1. */
spw_err_t spw_kafka_mock_topic_create(spw_kafka_mock_t *mock, const char *topic, int partitions,
                                      char *errstr, size_t errstr_size);

/* The mock's retention, per partition: librdkafka 2.0.2's mock deletes a partition's oldest
 * message sets (produce batches) once it holds more than 5 MiB of them or more than 100000 of
 * them (rdkafka_mock.c; fixed, no API sets it). Deleted records are gone whether or not a
 * consumer read them: a finite stream larger than partitions x this, produced before it is
 * consumed, loses its start. */
#define SPW_KAFKA_MOCK_RETENTION_BYTES   (5u << 20)
#define SPW_KAFKA_MOCK_RETENTION_MSGSETS 100000u

/* A thread that watches a mock cluster's partitions (a client of its own, bootstrapped to
 * bootstraps) every interval_ms (0: 1 s): it logs WARN "kafka-mock partition nears its
 * retention" when a partition's estimated bytes (records held x its newest record's size) pass
 * 80% of SPW_KAFKA_MOCK_RETENTION_BYTES before anything was deleted, and WARN "kafka-mock deleted
 * records to its retention" (at most every 10 s per partition) once its low watermark is above 0.
 * At most 1024 partitions are watched. NULL with errstr on failure. Owned by the caller. */
typedef struct spw_kafka_mock_watch spw_kafka_mock_watch_t;
spw_kafka_mock_watch_t *spw_kafka_mock_watch_start(const char *bootstraps, uint32_t interval_ms,
                                                   char *errstr, size_t errstr_size);
/* Stops and frees the watcher; returns the records it saw deleted, every partition together.
 * NULL: 0. */
uint64_t spw_kafka_mock_watch_stop(spw_kafka_mock_watch_t *watch);

/* ---- the `sparrow kafka-mock` process ---- */

/* The property table of `sparrow kafka-mock` (kafka_mock.*). */
extern const struct spw_config_prop spw_kafka_mock_config_props[];
extern const size_t spw_kafka_mock_config_n_props;

#define SPW_KAFKA_MOCK_MAX_TOPICS 64
#define SPW_KAFKA_MOCK_TOPIC_MAX  255 /* bytes of a topic name in kafka_mock.topics */
#define SPW_KAFKA_MOCK_MAX_PARTS  10000

/* One topic to create at start. */
struct spw_kafka_mock_topic {
    char name[SPW_KAFKA_MOCK_TOPIC_MAX + 1];
    int partitions;
};

/* What `sparrow kafka-mock` runs (the kafka_mock.* properties). Plain struct, one owner. */
struct spw_kafka_mock_conf {
    int brokers; /* 1..16 */
    struct spw_kafka_mock_topic topics[SPW_KAFKA_MOCK_MAX_TOPICS];
    size_t n_topics;
    const char *port_file; /* borrowed from the configuration; NULL: none */
    bool stdin_eof_exits;  /* exit at the end of stdin (else only on a signal) */
    uint32_t watch_ms;     /* retention watch period (spw_kafka_mock_watch_start); 0: off */
};

/* Fills conf from a configuration of spw_kafka_mock_config_props (port_file borrowed from cfg).
 * SPW_ERR_INVALID with errstr naming the entry for a malformed kafka_mock.topics entry
 * (NAME[:PARTITIONS], PARTITIONS 1..10000, at most SPW_KAFKA_MOCK_MAX_TOPICS); names are checked
 * by spw_kafka_mock_topic_create. Pure; thread-safe on a cfg no one changes. */
spw_err_t spw_kafka_mock_conf_from_config(const spw_config_t *cfg, struct spw_kafka_mock_conf *conf,
                                          char *errstr, size_t errstr_size);

/*
 * Applies one fault command line: `down <broker>`, `up <broker>`, `rtt <broker> <ms>`,
 * `error <api> <code> <count>` (api: a Kafka ApiKey number or name such as Produce, Fetch;
 * code: an error code number or name such as NOT_LEADER_FOR_PARTITION), `topic <name>
 * <partitions>`. Empty lines and `#` comments do nothing. SPW_ERR_INVALID with errstr on a bad
 * line. Thread-safe (the mock serialises through its own thread).
 */
spw_err_t spw_kafka_mock_command(spw_kafka_mock_t *mock, const char *line, char *errstr,
                                 size_t errstr_size);

#endif
