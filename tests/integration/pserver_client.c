/* A small DEALER client for the pserver integration scripts: deterministic training traffic,
 * row dumps for bit-for-bit comparison, checkpoint and health requests. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "sparrow/arena.h"
#include "sparrow/wire.h"

#define BATCH 256

static void *sock;
static spw_arena_t *arena;
static uint64_t next_id = 1;

static Sparrow__Reply *call(Sparrow__Request *req)
{
    struct spw_wire_buf buf = {0};
    req->has_version = req->has_request_id = true;
    req->version = 1;
    req->request_id = next_id++;
    if (spw_wire_pack(&req->base, &buf) != SPW_OK || zmq_send(sock, buf.data, buf.len, 0) < 0) {
        fprintf(stderr, "send failed\n");
        exit(2);
    }
    free(buf.data);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, 0) < 0) {
        fprintf(stderr, "no reply: %s\n", zmq_strerror(zmq_errno()));
        exit(2);
    }
    spw_arena_reset(arena);
    Sparrow__Reply *r = NULL;
    if (spw_wire_unpack_reply(zmq_msg_data(&msg), zmq_msg_size(&msg), 1u << 28, arena, &r)) {
        fprintf(stderr, "undecodable reply\n");
        exit(2);
    }
    zmq_msg_close(&msg);
    return r;
}

static Sparrow__Reply *pull(const uint64_t *keys, size_t n)
{
    Sparrow__PullRequest pr = SPARROW__PULL_REQUEST__INIT;
    pr.has_keys = true;
    pr.keys.data = (uint8_t *)keys;
    pr.keys.len = n * 8;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_PULL;
    req.pull = &pr;
    Sparrow__Reply *r = call(&req);
    if (r->has_error && r->error) {
        fprintf(stderr, "pull error %d: %s\n", r->error, r->error_message);
        exit(3);
    }
    return r;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* train SEED ROUNDS NKEYS TRAINER: ROUNDS pull+push rounds of BATCH sorted unique keys. */
static int train(uint32_t dim, uint64_t seed, int rounds, uint64_t nkeys, uint32_t trainer)
{
    uint64_t keys[BATCH];
    float *grads = malloc(BATCH * dim * sizeof(float));
    uint32_t vers[BATCH];
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int r = 0; r < rounds; r++) {
        size_t n = 0;
        for (int i = 0; i < BATCH; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            keys[n++] = (rng >> 20) % nkeys;
        }
        qsort(keys, n, 8, cmp_u64);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || keys[u - 1] != keys[i])
                keys[u++] = keys[i];
        n = u;
        Sparrow__Reply *pr = pull(keys, n);
        memcpy(vers, pr->pull->versions.data, n * 4);
        for (size_t i = 0; i < n * dim; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            grads[i] = (float)((int)(rng >> 56) - 128) / 256.0f;
        }
        Sparrow__PushRequest p = SPARROW__PUSH_REQUEST__INIT;
        p.has_trainer_id = p.has_epoch = p.has_seq = p.has_dim = true;
        p.trainer_id = trainer;
        p.epoch = seed;
        p.seq = (uint64_t)r + 1;
        p.dim = dim;
        p.has_keys = p.has_grads = p.has_versions = true;
        p.keys.data = (uint8_t *)keys;
        p.keys.len = n * 8;
        p.grads.data = (uint8_t *)grads;
        p.grads.len = n * dim * 4;
        p.versions.data = (uint8_t *)vers;
        p.versions.len = n * 4;
        Sparrow__Request req = SPARROW__REQUEST__INIT;
        req.body_case = SPARROW__REQUEST__BODY_PUSH;
        req.push = &p;
        Sparrow__Reply *r2 = call(&req);
        if (r2->has_error && r2->error) {
            fprintf(stderr, "push error %d: %s\n", r2->error, r2->error_message);
            return 3;
        }
    }
    free(grads);
    return 0;
}

/* dump NKEYS FILE: values and versions of keys 0..NKEYS-1. */
static int dump(uint64_t nkeys, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 2;
    uint64_t keys[BATCH];
    for (uint64_t base = 0; base < nkeys; base += BATCH) {
        size_t n = nkeys - base < BATCH ? nkeys - base : BATCH;
        for (size_t i = 0; i < n; i++)
            keys[i] = base + i;
        Sparrow__Reply *r = pull(keys, n);
        fwrite(r->pull->values.data, 1, r->pull->values.len, f);
        fwrite(r->pull->versions.data, 1, r->pull->versions.len, f);
    }
    return fclose(f) == 0 ? 0 : 2;
}

static int checkpoint(uint64_t epoch)
{
    Sparrow__CheckpointRequest cr = SPARROW__CHECKPOINT_REQUEST__INIT;
    cr.has_epoch = true;
    cr.epoch = epoch;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_CHECKPOINT;
    req.checkpoint = &cr;
    Sparrow__Reply *r = call(&req);
    if (r->has_error && r->error) {
        printf("error %d %s\n", r->error, r->error_message ? r->error_message : "");
        return 3;
    }
    printf("ok %s %s\n", r->checkpoint->path, r->checkpoint->checksum);
    return 0;
}

static int health(void)
{
    Sparrow__HealthRequest hr = SPARROW__HEALTH_REQUEST__INIT;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.body_case = SPARROW__REQUEST__BODY_HEALTH;
    req.health = &hr;
    Sparrow__Reply *r = call(&req);
    printf("%s %s\n", r->health->ready ? "ready" : "not-ready", r->health->state);
    return r->health->ready ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: pserver_client ENDPOINT DIM train SEED ROUNDS NKEYS TRAINER |\n"
                        "       dump NKEYS FILE | checkpoint EPOCH | health\n");
        return 2;
    }
    uint32_t dim = (uint32_t)strtoul(argv[2], NULL, 10);
    void *ctx = zmq_ctx_new();
    sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, timeout = 20000;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    if (zmq_connect(sock, argv[1]) != 0)
        return 2;
    arena = spw_arena_new(0, 0);
    int rc = 2;
    const char *cmd = argv[3];
    if (strcmp(cmd, "train") == 0 && argc == 8)
        rc = train(dim, strtoull(argv[4], NULL, 10), atoi(argv[5]), strtoull(argv[6], NULL, 10),
                   (uint32_t)strtoul(argv[7], NULL, 10));
    else if (strcmp(cmd, "dump") == 0 && argc == 6)
        rc = dump(strtoull(argv[4], NULL, 10), argv[5]);
    else if (strcmp(cmd, "checkpoint") == 0 && argc == 5)
        rc = checkpoint(strtoull(argv[4], NULL, 10));
    else if (strcmp(cmd, "health") == 0)
        rc = health();
    spw_arena_destroy(arena);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return rc;
}
