/* Unit tests of the trainer-side recovery calls the coordinator needs: dropping every residual
 * (top-k), abandoning unacknowledged pushes (PS client), seeking assigned partitions (Kafka). */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdio.h>
#include <string.h>

#include "sparrow/kafka.h"
#include "sparrow/launch.h"
#include "sparrow/ps_client.h"
#include "sparrow/trainer.h"

static void test_coord_restore_topk_drop_all(void **state)
{
    (void)state;
    struct spw_topk_conf conf = {
        .dim = 2, .ratio = 0.5, .error_feedback = true, .residual_max_rows = 16};
    char err[256];
    spw_topk_t *tk = spw_topk_new(&conf, NULL, err, sizeof(err));
    assert_non_null(tk);
    uint64_t keys[4] = {1, 2, 3, 4};
    float grads[8] = {4, 4, 3, 3, 2, 2, 1, 1};
    struct spw_push_set set;
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 4, &set), SPW_OK);
    assert_int_equal(set.n, 2); /* half sent, half kept */
    float r[2];
    assert_true(spw_topk_residual(tk, 4, r));
    assert_int_equal(spw_topk_drop_all(tk), 2);
    assert_false(spw_topk_residual(tk, 3, r));
    assert_false(spw_topk_residual(tk, 4, r));
    struct spw_topk_stats st;
    spw_topk_get_stats(tk, &st);
    assert_int_equal(st.residual_rows, 0);
    assert_int_equal(st.rows_dropped, 2);
    assert_int_equal(spw_topk_flush(tk, &set), SPW_OK);
    assert_int_equal(set.n, 0); /* nothing left to flush */
    assert_int_equal(spw_topk_drop_all(tk), 0);
    /* the table works again after the drop */
    assert_int_equal(spw_topk_compress(tk, keys, grads, NULL, 4, &set), SPW_OK);
    assert_true(spw_topk_residual(tk, 4, r));
    spw_topk_destroy(tk);
}

static void test_coord_restore_ps_client_abandon(void **state)
{
    (void)state;
    /* a shard that never answers: pushes stay outstanding until abandoned */
    char shards[64];
    snprintf(shards, sizeof(shards), "tcp://127.0.0.1:%d", spw_launch_free_port());
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.shards = shards;
    conf.dim = 2;
    conf.push_window = 4;
    char err[256];
    spw_ps_client_t *c = spw_ps_client_new(&conf, err, sizeof(err));
    assert_non_null(c);
    uint64_t keys[1] = {7};
    float g[2] = {1, 1};
    struct spw_ps_push push = {.n = 1, .keys = keys, .grads = g, .examples = 1};
    uint64_t seq1 = 0, seq2 = 0;
    assert_int_equal(spw_ps_client_push(c, &push, &seq1), SPW_OK);
    assert_int_equal(spw_ps_client_push(c, &push, &seq2), SPW_OK);
    assert_int_equal(spw_ps_client_outstanding(c), 2);
    assert_int_equal(spw_ps_client_acked_through(c), seq1 - 1);
    assert_int_equal(spw_ps_client_abandon_pushes(c), 2);
    assert_int_equal(spw_ps_client_outstanding(c), 0);
    assert_int_equal(spw_ps_client_acked_through(c), seq2); /* nothing outstanding */
    assert_int_equal(spw_ps_client_flush(c, 100), SPW_OK);  /* nothing to wait for */
    assert_int_equal(spw_ps_client_next_seq(c), seq2 + 1);  /* seqs go on */
    assert_int_equal(spw_ps_client_abandon_pushes(c), 0);
    spw_ps_client_destroy(c);
}

static void test_coord_restore_kafka_seek(void **state)
{
    (void)state;
    char err[512];
    spw_kafka_mock_t *mock = spw_kafka_mock_new(1, err, sizeof(err));
    assert_non_null(mock);
    assert_int_equal(spw_kafka_mock_topic_create(mock, "t", 1, err, sizeof(err)), SPW_OK);
    spw_kafka_props_t *props = spw_kafka_props_new();
    assert_non_null(props);
    assert_int_equal(
        spw_kafka_props_set(props, "bootstrap.servers", spw_kafka_mock_bootstraps(mock)), SPW_OK);
    struct spw_kafka_producer_opts popts = {0};
    spw_kafka_producer_t *prod = spw_kafka_producer_new(props, &popts, err, sizeof(err));
    assert_non_null(prod);
    for (int i = 0; i < 5; i++) {
        char v[8];
        int n = snprintf(v, sizeof(v), "m%d", i);
        assert_int_equal(
            spw_kafka_producer_send(prod, "t", 0, NULL, 0, v, (size_t)n, NULL, 0, NULL), SPW_OK);
    }
    assert_int_equal(spw_kafka_producer_flush(prod, 10000), SPW_OK);
    const char *topics[] = {"t"};
    struct spw_kafka_consumer_opts copts = {.group_id = "g", .topics = topics, .n_topics = 1};
    spw_kafka_consumer_t *cons = spw_kafka_consumer_new(props, &copts, err, sizeof(err));
    assert_non_null(cons);
    struct spw_kafka_msg msg = {0};
    int64_t last = -1;
    for (int tries = 0; tries < 200 && last < 3; tries++) {
        if (spw_kafka_consumer_poll(cons, 100, &msg) == SPW_OK) {
            last = msg.offset;
            spw_kafka_msg_release(&msg);
        }
    }
    assert_int_equal(last, 3); /* read 0..3 */
    struct spw_kafka_partition p = {.topic = "t", .partition = 0, .offset = 1};
    assert_int_equal(spw_kafka_consumer_seek(cons, &p, 1, 5000), SPW_OK);
    int64_t first = -1;
    for (int tries = 0; tries < 200 && first < 0; tries++) {
        if (spw_kafka_consumer_poll(cons, 100, &msg) == SPW_OK) {
            first = msg.offset;
            spw_kafka_msg_release(&msg);
        }
    }
    assert_int_equal(first, 1); /* records fetched before the seek were discarded */
    p.offset = -1;              /* the earliest */
    assert_int_equal(spw_kafka_consumer_seek(cons, &p, 1, 5000), SPW_OK);
    first = -1;
    for (int tries = 0; tries < 200 && first < 0; tries++) {
        if (spw_kafka_consumer_poll(cons, 100, &msg) == SPW_OK) {
            first = msg.offset;
            spw_kafka_msg_release(&msg);
        }
    }
    assert_int_equal(first, 0);
    spw_kafka_consumer_destroy(cons);
    spw_kafka_producer_destroy(prod, 1000);
    spw_kafka_props_destroy(props);
    spw_kafka_mock_destroy(mock);
}

SPW_TEST_MAIN(test_coord_restore_topk_drop_all, test_coord_restore_ps_client_abandon,
              test_coord_restore_kafka_seek)
