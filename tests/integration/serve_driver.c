/* Test driver for `sparrow serve`: produces ModelUpdate records to Kafka and writes a shard
 * checkpoint (through the pserver store) with a manifest, from text lines on stdin.
 *   serve_driver produce BROKERS TOPIC     lines: "put KEY VERSION EPOCH EVENT_MS W1 .. Wd"
 *                                                 "del KEY EPOCH"
 *   serve_driver checkpoint ROOT EPOCH DIM TOPIC P:OFF,...   lines: "KEY W1 .. Wd"
 * and pulls rows from shards for comparisons:
 *   serve_driver pull ENDPOINT,... DIM     lines: "KEY"; prints "KEY VERSION W1 .. Wd", the row
 *                                          of the key's shard (in shard order; version 0: none) */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "sparrow/coordinator.h"
#include "sparrow/hash.h"
#include "sparrow/kafka.h"
#include "sparrow/arena.h"
#include "sparrow/pserver.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

#define MAXD 64

static int produce(const char *brokers, const char *topic)
{
    char err[512];
    spw_kafka_props_t *props = spw_kafka_props_new();
    spw_kafka_props_set(props, "bootstrap.servers", brokers);
    struct spw_kafka_producer_opts opts = {0};
    spw_kafka_producer_t *p = spw_kafka_producer_new(props, &opts, err, sizeof(err));
    if (!p) {
        fprintf(stderr, "producer: %s\n", err);
        return 1;
    }
    char line[4096];
    long n = 0;
    while (fgets(line, sizeof(line), stdin)) {
        Sparrow__ModelUpdate u = SPARROW__MODEL_UPDATE__INIT;
        float w[MAXD];
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok)
            continue;
        u.has_key = true;
        u.key = strtoull(strtok_r(NULL, " \n", &save), NULL, 10);
        if (strcmp(tok, "del") == 0) {
            u.has_tombstone = u.tombstone = true;
            u.has_epoch = true;
            u.epoch = strtoull(strtok_r(NULL, " \n", &save), NULL, 10);
        } else {
            u.has_version = u.has_epoch = u.has_event_time_ms = u.has_applied_ms = true;
            u.version = (uint32_t)strtoul(strtok_r(NULL, " \n", &save), NULL, 10);
            u.epoch = strtoull(strtok_r(NULL, " \n", &save), NULL, 10);
            u.event_time_ms = strtoll(strtok_r(NULL, " \n", &save), NULL, 10);
            u.applied_ms = spw_time_wall_ms();
            size_t d = 0;
            while ((tok = strtok_r(NULL, " \n", &save)) && d < MAXD)
                w[d++] = strtof(tok, NULL);
            u.weights.data = (uint8_t *)w;
            u.weights.len = d * sizeof(float);
            u.has_weights = true;
        }
        struct spw_wire_buf buf = {0};
        spw_wire_pack(&u.base, &buf);
        uint8_t key[8];
        for (int i = 0; i < 8; i++)
            key[i] = (uint8_t)(u.key >> (56 - 8 * i));
        if (spw_kafka_producer_send(p, topic, -1, key, 8, buf.data, buf.len, NULL, 0, NULL) !=
            SPW_OK) {
            fprintf(stderr, "send failed\n");
            return 1;
        }
        free(buf.data);
        n++;
    }
    int rc =
        spw_kafka_producer_flush(p, 30000) == SPW_OK && spw_kafka_producer_failed(p) == 0 ? 0 : 1;
    spw_kafka_producer_destroy(p, 5000);
    spw_kafka_props_destroy(props);
    fprintf(stderr, "produced %ld rc=%d\n", n, rc);
    return rc;
}

static int checkpoint(const char *root, uint64_t epoch, uint32_t dim, const char *topic,
                      const char *offsets)
{
    char db[4096], err[512] = "";
    snprintf(db, sizeof(db), "%s/db", root);
    struct spw_ps_store_conf c = {0};
    c.dim = dim;
    spw_ps_optim_conf_default(&c.optim);
    /* SGD with lr 1 from zero: a pushed gradient g leaves exactly w = -g. */
    c.optim.kind = SPW_PS_SGD;
    c.optim.lr = 1.0f;
    c.optim.init_scale = 0.0f;
    c.memory_bytes = 1 << 20;
    c.db_path = db;
    spw_ps_store_t *st = spw_ps_store_open(&c, err, sizeof(err));
    if (!st) {
        fprintf(stderr, "store: %s\n", err);
        return 1;
    }
    char line[4096];
    while (fgets(line, sizeof(line), stdin)) {
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok)
            continue;
        uint64_t key = strtoull(tok, NULL, 10);
        float g[MAXD] = {0};
        for (uint32_t d = 0; d < dim && (tok = strtok_r(NULL, " \n", &save)); d++)
            g[d] = -strtof(tok, NULL);
        struct spw_ps_push_result res;
        if (spw_ps_store_push(st, &key, 1, g, NULL, NULL, &res) != SPW_OK || res.applied != 1) {
            fprintf(stderr, "push failed\n");
            return 1;
        }
    }
    struct spw_ps_checkpoint_info info;
    if (spw_ps_store_checkpoint(st, root, epoch, &info, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "checkpoint: %s\n", err);
        return 1;
    }
    spw_ps_store_close(st);
    struct spw_coord_offset uo[64];
    size_t n = 0;
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", offsets);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save)) {
        snprintf(uo[n].topic, sizeof(uo[n].topic), "%s", topic);
        uo[n].partition = (int32_t)strtol(t, &t, 10);
        uo[n].offset = strtoll(t + 1, NULL, 10);
        uo[n].skip = 0;
        n++;
    }
    char sums[1][17];
    memcpy(sums[0], info.checksum, 17);
    uint64_t rows[1] = {info.rows};
    struct spw_coord_manifest m = {.epoch = epoch,
                                   .shard_count = 1,
                                   .checksums = sums,
                                   .rows = rows,
                                   .update_offsets = uo,
                                   .n_update_offsets = n};
    if (spw_coord_manifest_write(root, &m, err, sizeof(err)) != SPW_OK ||
        spw_coord_latest_write(root, epoch, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "manifest: %s\n", err);
        return 1;
    }
    return 0;
}

/* One PullRequest of n keys to sock; the reply's values (n × dim) and versions (n). */
static int pull_one(void *sock, spw_arena_t *arena, const uint64_t *keys, size_t n, uint32_t dim,
                    float *values, uint32_t *versions)
{
    static uint64_t next_id = 1;
    Sparrow__PullRequest pr = SPARROW__PULL_REQUEST__INIT;
    pr.has_keys = true;
    pr.keys.data = (uint8_t *)keys;
    pr.keys.len = n * 8;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = req.has_request_id = true;
    req.version = 1;
    req.request_id = next_id++;
    req.body_case = SPARROW__REQUEST__BODY_PULL;
    req.pull = &pr;
    struct spw_wire_buf buf = {0};
    if (spw_wire_pack(&req.base, &buf) != SPW_OK || zmq_send(sock, buf.data, buf.len, 0) < 0)
        return -1;
    free(buf.data);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, 0) < 0)
        return -1;
    spw_arena_reset(arena);
    Sparrow__Reply *r = NULL;
    int rc = -1;
    if (spw_wire_unpack_reply(zmq_msg_data(&msg), zmq_msg_size(&msg), 1u << 28, arena, &r) ==
            SPW_OK &&
        r->pull && r->pull->values.len == n * dim * 4 && r->pull->versions.len == n * 4) {
        memcpy(values, r->pull->values.data, n * dim * 4);
        memcpy(versions, r->pull->versions.data, n * 4);
        rc = 0;
    }
    zmq_msg_close(&msg);
    return rc;
}

static int pull(const char *endpoints, uint32_t dim)
{
    enum { MAXS = 16, BATCH = 256 };
    void *ctx = zmq_ctx_new(), *socks[MAXS];
    size_t ns = 0;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", endpoints);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && ns < MAXS; t = strtok_r(NULL, ",", &save)) {
        socks[ns] = zmq_socket(ctx, ZMQ_DEALER);
        int ms = 20000;
        zmq_setsockopt(socks[ns], ZMQ_RCVTIMEO, &ms, sizeof(ms));
        if (zmq_connect(socks[ns], t) != 0)
            return 1;
        ns++;
    }
    if (ns == 0 || dim == 0 || dim > MAXD)
        return 1;
    spw_arena_t *arena = spw_arena_new(1 << 20, 1u << 30);
    /* One key at a time, each from the shard that owns it (spw_hash_shard): slow but simple. */
    float vals[MAXD];
    uint32_t ver;
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        if (line[0] < '0' || line[0] > '9')
            continue;
        uint64_t key = strtoull(line, NULL, 10);
        void *sock = socks[ns > 1 ? spw_hash_shard(key, (uint32_t)ns) : 0];
        if (pull_one(sock, arena, &key, 1, dim, vals, &ver) != 0) {
            fprintf(stderr, "pull failed\n");
            return 1;
        }
        printf("%" PRIu64 " %u", key, ver);
        for (uint32_t d = 0; d < dim; d++)
            printf(" %.9g", (double)vals[d]);
        printf("\n");
    }
    for (size_t s = 0; s < ns; s++)
        zmq_close(socks[s]);
    zmq_ctx_term(ctx);
    spw_arena_destroy(arena);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "pull") == 0)
        return pull(argv[2], (uint32_t)atoi(argv[3]));
    if (argc == 4 && strcmp(argv[1], "produce") == 0)
        return produce(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "checkpoint") == 0)
        return checkpoint(argv[2], strtoull(argv[3], NULL, 10), (uint32_t)atoi(argv[4]), argv[5],
                          argv[6]);
    fprintf(stderr, "usage: see the header of serve_driver.c\n");
    return 2;
}
