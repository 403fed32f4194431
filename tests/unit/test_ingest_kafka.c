/* Unit test of the ingest role on Kafka (librdkafka's in-process mock cluster): raw events from a
 * topic become ExampleBatch records on another, invalid ones dead letters with their headers, and
 * a stop drains and exits cleanly. Labelled "kafka" (ThreadSanitizer runs skip it). */
#include "test_main.h" /* cmocka and what it needs first */

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sparrow/ingest.h"
#include "sparrow/kafka.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define WAIT_MS 90000 /* generous: the mock's group join can be slow on a loaded machine */
#define N_VALID 40
#define N_BAD   3

static spw_kafka_props_t *props_for(const char *bootstraps)
{
    spw_kafka_props_t *props = spw_kafka_props_new();
    assert_non_null(props);
    assert_int_equal(spw_kafka_props_set(props, "bootstrap.servers", bootstraps), SPW_OK);
    return props;
}

struct watch {
    const char *bootstraps;
    size_t examples, dead; /* seen on the output and dead-letter topics */
    bool bad_header;
};

/* Reads the outputs until every example and dead letter arrived (or the deadline), then stops
 * the ingest as SIGTERM would. */
static void *watch_outputs(void *arg)
{
    struct watch *w = arg;
    char errstr[256];
    spw_kafka_props_t *props = props_for(w->bootstraps);
    const char *topics[2] = {"examples", "examples.dlq"};
    struct spw_kafka_consumer_opts opts = {.group_id = "watch", .topics = topics, .n_topics = 2};
    spw_kafka_consumer_t *c = spw_kafka_consumer_new(props, &opts, errstr, sizeof(errstr));
    spw_kafka_props_destroy(props);
    uint64_t deadline = spw_time_mono_ms() + WAIT_MS;
    while (c && (w->examples < N_VALID || w->dead < N_BAD) && spw_time_mono_ms() < deadline) {
        struct spw_kafka_msg msg;
        if (spw_kafka_consumer_poll(c, 100, &msg) != SPW_OK)
            continue;
        if (strcmp(msg.topic, "examples") == 0) {
            Sparrow__ExampleBatch *b = sparrow__example_batch__unpack(NULL, msg.len, msg.value);
            if (b) {
                w->examples += b->n_examples;
                sparrow__example_batch__free_unpacked(b, NULL);
            }
        } else {
            const void *v;
            size_t len;
            if (spw_kafka_msg_header(&msg, "reason", &v, &len) != SPW_OK ||
                spw_kafka_msg_header(&msg, "source.topic", &v, &len) != SPW_OK || len != 6 ||
                memcmp(v, "events", 6) != 0)
                w->bad_header = true;
            w->dead++;
        }
        spw_kafka_msg_release(&msg);
    }
    spw_kafka_consumer_destroy(c);
    spw_signal_request_stop();
    return NULL;
}

static void test_ingest_kafka_topic_to_topic(void **state)
{
    (void)state;
    char errstr[256];
    spw_kafka_mock_t *mock = spw_kafka_mock_new(1, errstr, sizeof(errstr));
    assert_non_null(mock);
    assert_int_equal(spw_kafka_mock_topic_create(mock, "events", 2, errstr, sizeof(errstr)),
                     SPW_OK);
    assert_int_equal(spw_kafka_mock_topic_create(mock, "examples", 2, errstr, sizeof(errstr)),
                     SPW_OK);
    assert_int_equal(spw_kafka_mock_topic_create(mock, "examples.dlq", 1, errstr, sizeof(errstr)),
                     SPW_OK);
    const char *bs = spw_kafka_mock_bootstraps(mock);

    spw_kafka_props_t *props = props_for(bs);
    struct spw_kafka_producer_opts popts = {0};
    spw_kafka_producer_t *p = spw_kafka_producer_new(props, &popts, errstr, sizeof(errstr));
    assert_non_null(p);
    for (int i = 0; i < N_VALID + N_BAD; i++) {
        char line[128];
        if (i % 15 == 7)
            snprintf(line, sizeof(line), "{\"label\":%d", i); /* undecodable */
        else
            snprintf(line, sizeof(line), "{\"id\":%d,\"label\":1,\"features\":{\"u\":\"%d\"}}", i,
                     i % 5);
        assert_int_equal(
            spw_kafka_producer_send(p, "events", -1, NULL, 0, line, strlen(line), NULL, 0, NULL),
            SPW_OK);
    }
    assert_int_equal(spw_kafka_producer_flush(p, WAIT_MS), SPW_OK);
    spw_kafka_producer_destroy(p, 1000);
    spw_kafka_props_destroy(props);

    char url_in[256], url_out[256];
    snprintf(url_in, sizeof(url_in), "kafka://%s/events", bs);
    snprintf(url_out, sizeof(url_out), "kafka://%s/examples", bs);
    spw_config_t *cfg =
        spw_config_new(spw_ingest_config_props, spw_ingest_config_n_props, errstr, sizeof(errstr));
    assert_non_null(cfg);
    assert_int_equal(spw_config_set(cfg, "ingest.in", url_in, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(spw_config_set(cfg, "ingest.out", url_out, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(spw_config_set(cfg, "ingest.batch.linger", "5ms", errstr, sizeof(errstr)),
                     SPW_OK);
    assert_int_equal(
        spw_config_set(cfg, "kafka.session.timeout.ms", "6000", errstr, sizeof(errstr)), SPW_OK);
    struct spw_ingest_conf conf;
    assert_int_equal(spw_ingest_conf_from_config(cfg, &conf, errstr, sizeof(errstr)), SPW_OK);
    spw_ingest_t *in = spw_ingest_new(&conf, errstr, sizeof(errstr));
    if (!in)
        fail_msg("new: %s", errstr);

    struct watch w = {.bootstraps = bs};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, watch_outputs, &w), 0);
    assert_int_equal(spw_ingest_run(in), SPW_OK); /* until the watcher saw everything */
    pthread_join(t, NULL);
    struct spw_ingest_stats st;
    spw_ingest_stats(in, &st);
    spw_ingest_destroy(in);
    assert_int_equal(w.examples, N_VALID);
    assert_int_equal(w.dead, N_BAD);
    assert_false(w.bad_header);
    assert_int_equal(st.events, N_VALID + N_BAD);
    assert_int_equal(st.examples, N_VALID);
    assert_int_equal(st.rejected, N_BAD);
    spw_config_destroy(cfg);
    spw_kafka_mock_destroy(mock);
    spw_signal_reset();
}

SPW_TEST_MAIN(test_ingest_kafka_topic_to_topic)
