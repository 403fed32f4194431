/* The baseline of ingest_bench: a bare librdkafka consumer that reads n records of a topic from
 * the beginning (rd_kafka_consumer_poll, no processing) and prints records/s from the first record
 * to the n-th, the same window `sparrow ingest` is timed over. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: ingest_bench_consume BOOTSTRAP TOPIC N\n");
        return 2;
    }
    char *end;
    long long n = strtoll(argv[3], &end, 10);
    if (*end || n <= 0) {
        fprintf(stderr, "bad N\n");
        return 2;
    }
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "group.id", "ingest-bench-bare", errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr))) {
        fprintf(stderr, "%s\n", errstr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "%s\n", errstr);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[2], NULL);
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) || md->topic_cnt != 1) {
        fprintf(stderr, "no metadata for %s\n", argv[2]);
        return 1;
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
    for (int i = 0; i < md->topics[0].partition_cnt; i++)
        rd_kafka_topic_partition_list_add(parts, argv[2], md->topics[0].partitions[i].id)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);

    long long got = 0;
    double t0 = 0, deadline = now_s() + 120;
    while (got < n && now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err) {
            if (got++ == 0)
                t0 = now_s();
        }
        rd_kafka_message_destroy(m);
    }
    double t1 = now_s();
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (got < n) {
        fprintf(stderr, "read %lld of %lld\n", got, n);
        return 1;
    }
    printf("%.0f\n", (double)n / (t1 - t0));
    return 0;
}
