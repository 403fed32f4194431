/* pserver_bench: the shard's rates as ratios against baselines measured in the same run (issue 3):
 * (a) flat-array Adagrad loop, (b) the row store, (c) RocksDB get+put alone, (d) ZeroMQ to a
 * `sparrow pserver` process against a raw ZeroMQ DEALER/ROUTER pair moving the same bytes, (e) (b)
 * with a model 10x the DRAM budget, (f) checkpoint vs dd, and resident memory per DRAM row.
 * Zipf(1.1) keys, dim 16, Adagrad, 4096 keys per batch. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rocksdb/c.h>
#include <zmq.h>

#include "ps_int.h"
#include "sparrow/fs.h"
#include "sparrow/arena.h"
#include "sparrow/hash.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"

#define DIM   16
#define BATCH 4096

struct opts {
    uint64_t keys, e_keys;
    int batches, c_batches, d_batches, e_batches;
    const char *sparrow, *dir;
    const char *only;            /* letters of the sections to run; NULL: all */
    const char *rocksdb_options; /* passed to the row stores of (b), (e), (f) */
};

static bool want(const struct opts *o, char section)
{
    return !o->only || strchr(o->only, section) != NULL;
}

static double now_s(void)
{
    return (double)spw_time_mono_ns() / 1e9;
}

/* CPU seconds of this thread (CLOCK_THREAD_CPUTIME_ID) or of the whole process. */
static double cpu_s(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Zipf(s) ranks 0..n-1 by inverse CDF over a table of n doubles, with a guide table (the first
 * rank of each 1/n-wide slice of [0, 1)) so that a draw searches a few entries, not log2(n). */
struct zipf {
    double *cdf;
    uint64_t *guide; /* n + 1 entries */
    uint64_t n;
    uint64_t rng;
};

static void zipf_init(struct zipf *z, uint64_t n, double s, uint64_t seed)
{
    z->cdf = malloc(n * sizeof(double));
    z->guide = malloc((n + 1) * sizeof(uint64_t));
    z->n = n;
    z->rng = seed;
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        sum += pow((double)(i + 1), -s);
        z->cdf[i] = sum;
    }
    for (uint64_t i = 0; i < n; i++)
        z->cdf[i] /= sum;
    uint64_t i = 0;
    for (uint64_t k = 0; k <= n; k++) {
        double u = (double)k / (double)n;
        while (i < n - 1 && z->cdf[i] < u)
            i++;
        z->guide[k] = i;
    }
}

static void zipf_fini(struct zipf *z)
{
    free(z->cdf);
    free(z->guide);
}

/* The first rank whose cdf is >= u (as a binary search over the whole table would find). */
static uint64_t zipf_next(struct zipf *z)
{
    z->rng = z->rng * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(z->rng >> 11) * (1.0 / 9007199254740992.0);
    uint64_t k = (uint64_t)(u * (double)z->n);
    if (k >= z->n)
        k = z->n - 1;
    /* One slice of slack each way absorbs the rounding of u·n and of the guide's bounds. */
    uint64_t lo = z->guide[k > 0 ? k - 1 : 0], hi = z->guide[k + 2 <= z->n ? k + 2 : z->n];
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (z->cdf[mid] >= u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Batches of BATCH distinct ranks drawn from the Zipf stream. */
static uint32_t *make_batches(struct zipf *z, int n_batches)
{
    uint32_t *ranks = malloc((size_t)n_batches * BATCH * sizeof(uint32_t));
    uint32_t cap = 1u << 14;
    uint32_t *seen = malloc(cap * sizeof(uint32_t));
    for (int b = 0; b < n_batches; b++) {
        memset(seen, 0xff, cap * sizeof(uint32_t));
        int n = 0;
        while (n < BATCH) {
            uint32_t r = (uint32_t)zipf_next(z);
            uint32_t h = (uint32_t)(spw_hash_mix64(r) & (cap - 1));
            bool dup = false;
            while (seen[h] != UINT32_MAX) {
                if (seen[h] == r) {
                    dup = true;
                    break;
                }
                h = (h + 1) & (cap - 1);
            }
            if (dup)
                continue;
            seen[h] = r;
            ranks[(size_t)b * BATCH + n++] = r;
        }
    }
    free(seen);
    return ranks;
}

static float *make_grads(void)
{
    float *g = malloc(BATCH * DIM * sizeof(float));
    for (int i = 0; i < BATCH * DIM; i++)
        g[i] = (float)((i * 7919) % 1000 - 500) / 1000.0f;
    return g;
}

static struct spw_ps_store_conf store_conf(const struct opts *o, const char *path, uint64_t memory)
{
    struct spw_ps_store_conf c = {0};
    c.dim = DIM;
    spw_ps_optim_conf_default(&c.optim);
    c.penalty.kind = SPW_PS_PENALTY_INVERSE;
    c.memory_bytes = memory;
    c.db_path = path;
    c.seed = 1;
    c.rocksdb_options = o->rocksdb_options;
    return c;
}

/* Pushes one gradient to every key 0..n-1 (creating the rows, or making them dirty), in rank
 * order, or from the last rank to the first when coldest_first (so that a store smaller than
 * the model is left holding the most frequent ranks, as a shard that has been training would). */
static void fill(spw_ps_store_t *s, uint64_t n_keys, const float *g, bool coldest_first)
{
    uint64_t *keys = malloc(BATCH * 8);
    for (uint64_t base = 0; base < n_keys; base += BATCH) {
        size_t n = n_keys - base < BATCH ? n_keys - base : BATCH;
        for (size_t i = 0; i < n; i++)
            keys[i] = spw_hash_mix64(coldest_first ? n_keys - 1 - (base + i) : base + i);
        if (spw_ps_store_push(s, keys, n, g, NULL, NULL, NULL) != SPW_OK) {
            fprintf(stderr, "fill: push failed\n");
            exit(1);
        }
    }
    free(keys);
}

/* (a) plain loop over a dense array. */
static double bench_flat(const struct opts *o, const uint32_t *ranks, const float *g)
{
    float *w = malloc(o->keys * DIM * sizeof(float));
    float *acc = malloc(o->keys * DIM * sizeof(float));
    /* Touch every page before the clock starts: (a) times the update loop, not page faults (the
     * row store's rows exist before (b) is timed too). */
    memset(w, 0, o->keys * DIM * sizeof(float));
    memset(acc, 0, o->keys * DIM * sizeof(float));
    struct spw_ps_optim_conf oc;
    spw_ps_optim_conf_default(&oc);
    double t0 = now_s();
    for (int b = 0; b < o->batches; b++)
        for (int i = 0; i < BATCH; i++) {
            size_t r = ranks[(size_t)b * BATCH + i];
            spw_ps__row_apply(&oc, DIM, w + r * DIM, acc + r * DIM, g + (size_t)i * DIM, 1.0f);
        }
    double dt = now_s() - t0;
    free(w);
    free(acc);
    return (double)o->batches * BATCH / dt;
}

/* Pushes n_batches batches into store, each pulled first when pull_first (what a trainer does:
 * pull a batch's rows, compute, push their gradients with the versions pulled); rows pushed per
 * second. Exits unless every row was applied. */
static double run_store_pattern(spw_ps_store_t *s, const uint32_t *ranks, int n_batches,
                                const float *g, bool pull_first)
{
    uint64_t *keys = malloc(BATCH * sizeof(uint64_t));
    uint32_t *vers = calloc(BATCH, sizeof(uint32_t));
    float *vals = malloc(BATCH * DIM * sizeof(float));
    struct spw_ps_store_stats st0, st1;
    spw_ps_store_get_stats(s, &st0);
    double t0 = now_s();
    for (int b = 0; b < n_batches; b++) {
        for (int i = 0; i < BATCH; i++)
            keys[i] = spw_hash_mix64(ranks[(size_t)b * BATCH + i]);
        if (pull_first && spw_ps_store_pull(s, keys, BATCH, vals, vers) != SPW_OK) {
            fprintf(stderr, "pull failed\n");
            exit(1);
        }
        if (spw_ps_store_push(s, keys, BATCH, g, pull_first ? vers : NULL, NULL, NULL) != SPW_OK) {
            fprintf(stderr, "push failed\n");
            exit(1);
        }
    }
    double dt = now_s() - t0;
    spw_ps_store_get_stats(s, &st1);
    if (st1.rows_pushed - st0.rows_pushed != (uint64_t)n_batches * BATCH) {
        fprintf(stderr, "pushes applied %" PRIu64 " of %d rows\n",
                st1.rows_pushed - st0.rows_pushed, n_batches * BATCH);
        exit(1);
    }
    free(keys);
    free(vers);
    free(vals);
    return (double)n_batches * BATCH / dt;
}

/* Pushes only (run_store_pattern without pulls). */
static double run_store(spw_ps_store_t *s, const uint32_t *ranks, int n_batches, const float *g)
{
    return run_store_pattern(s, ranks, n_batches, g, false);
}

/* (c) RocksDB get + put per update, same value layout. */
static double bench_rocksdb(const struct opts *o, const uint32_t *ranks, const float *g)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/c-rocksdb", o->dir);
    rocksdb_options_t *opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(opts, 1);
    char *err = NULL;
    rocksdb_t *db = rocksdb_open(opts, path, &err);
    if (err) {
        fprintf(stderr, "rocksdb: %s\n", err);
        exit(1);
    }
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(wo, 1);
    struct spw_ps_optim_conf oc;
    spw_ps_optim_conf_default(&oc);
    /* the row store's value: version, last_update, count, weights, Adagrad slots */
    enum { HDR = SPW_PS_ROW_HDR - SPW_PS_DB_VALUE_OFF };
    size_t vlen = HDR + 2 * DIM * sizeof(float);
    char val[HDR + 2 * DIM * sizeof(float)];
    double t0 = now_s();
    for (int b = 0; b < o->c_batches; b++)
        for (int i = 0; i < BATCH; i++) {
            char k[8];
            spw_ps__key_encode(spw_hash_mix64(ranks[(size_t)b * BATCH + i]), k);
            size_t got = 0;
            char *v = rocksdb_get(db, ro, k, 8, &got, &err);
            if (v && got == vlen)
                memcpy(val, v, vlen);
            else
                memset(val, 0, vlen);
            rocksdb_free(v);
            float w[2 * DIM];
            memcpy(w, val + HDR, sizeof(w));
            spw_ps__row_apply(&oc, DIM, w, w + DIM, g + (size_t)i * DIM, 1.0f);
            memcpy(val + HDR, w, sizeof(w));
            rocksdb_put(db, wo, k, 8, val, vlen, &err);
        }
    double dt = now_s() - t0;
    rocksdb_readoptions_destroy(ro);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(opts);
    return (double)o->c_batches * BATCH / dt;
}

static void pack_push(const uint64_t *keys, size_t n, const float *g, const uint32_t *vers,
                      uint64_t seq, struct spw_wire_buf *out)
{
    Sparrow__PushRequest p = SPARROW__PUSH_REQUEST__INIT;
    p.has_trainer_id = p.has_epoch = p.has_seq = p.has_dim = true;
    p.trainer_id = 1;
    p.epoch = 1;
    p.seq = seq;
    p.dim = DIM;
    p.has_keys = p.has_grads = p.has_versions = true;
    p.keys.data = (uint8_t *)keys;
    p.keys.len = n * 8;
    p.grads.data = (uint8_t *)g;
    p.grads.len = n * DIM * 4;
    p.versions.data = (uint8_t *)vers;
    p.versions.len = n * 4;
    Sparrow__Request req = SPARROW__REQUEST__INIT;
    req.has_version = true;
    req.version = 1;
    req.body_case = SPARROW__REQUEST__BODY_PUSH;
    req.push = &p;
    spw_wire_pack(&req.base, out);
}

/* Sends msgs[0..n) with at most `window` unanswered; rows/s (0 on a reply timeout). *reply_bytes
 * (when not NULL) receives the mean size of the replies. */
static double send_windowed(void *s, struct spw_wire_buf *msgs, int n, double rows,
                            size_t *reply_bytes)
{
    uint64_t total = 0;
    const int window = 8;
    int sent = 0, got = 0;
    double t0 = now_s();
    while (got < n) {
        while (sent < n && sent - got < window) {
            zmq_send(s, msgs[sent].data, msgs[sent].len, 0);
            sent++;
        }
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            fprintf(stderr, "(d) reply timeout\n");
            zmq_msg_close(&m);
            return 0;
        }
        total += zmq_msg_size(&m);
        zmq_msg_close(&m);
        got++;
    }
    double dt = now_s() - t0;
    if (reply_bytes)
        *reply_bytes = n ? (size_t)(total / (uint64_t)n) : 0;
    return rows / dt;
}

/* The raw baseline of (d), in a child forked before any ZeroMQ context exists: a ROUTER that
 * answers each message, without looking into it, with a reply of the size the pserver gave
 * such a message (a pull request's size is pull_len; anything else is a push), received and
 * sent as the pserver does (one zmq_msg_recv, one zmq_send of a ready buffer). It waits for the
 * reply sizes on fd (two size_t and pull_len, written once the pserver was measured) and stops
 * at a 1-byte message. */
_Noreturn static void raw_router_main(const char *ep, int fd)
{
    size_t sizes[3]; /* push reply, pull reply, pull request */
    if (read(fd, sizes, sizeof(sizes)) != (ssize_t)sizeof(sizes))
        _exit(1);
    void *ctx = zmq_ctx_new();
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(r, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_bind(r, ep) != 0)
        _exit(1);
    size_t cap = sizes[0] > sizes[1] ? sizes[0] : sizes[1];
    char *reply = calloc(cap ? cap : 1, 1);
    for (;;) {
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&id, r, 0) < 0 || zmq_msg_recv(&body, r, 0) < 0)
            break;
        size_t len = zmq_msg_size(&body);
        zmq_msg_close(&body);
        if (len == 1)
            break;
        zmq_msg_send(&id, r, ZMQ_SNDMORE);
        zmq_send(r, reply, len == sizes[2] ? sizes[1] : sizes[0], 0);
    }
    free(reply);
    zmq_close(r);
    zmq_ctx_term(ctx);
    _exit(0);
}

/* CPU seconds (user + system, every thread) the process pid has used; 0 when unreadable. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces */
    unsigned long long utime = 0, stime = 0;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return 0;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

struct zmq_rates {
    double cold, push, pull;   /* the pserver's */
    double cold_cpu, push_cpu; /* the pserver process's CPU microseconds per row of each */
    double raw_push, raw_pull; /* the raw pair's, same messages, same replies' sizes */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..3) (reorders v). */
static double median3(double *v)
{
    qsort(v, 3, sizeof(*v), cmp_double);
    return v[1];
}

/* (d) through ZeroMQ to a sparrow pserver process; windowed, pre-packed messages. The server
 * starts empty: a first pass pushes every key once (rows created: the cold rate), then the Zipf
 * batches are pushed (rows exist, as in (b)) and pulled, and the same push and pull messages go,
 * the same way, to the raw pair (raw_router_main): what ZeroMQ alone moves; three rounds of the
 * four, interleaved, each rate their median. */
static void bench_zmq(const struct opts *o, const uint32_t *ranks, const float *g,
                      struct zmq_rates *rates)
{
    memset(rates, 0, sizeof(*rates));
    int port = 20000 + (int)(getpid() % 20000);
    char ep[64], raw_ep[64], data[4096], mem[32];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
    snprintf(raw_ep, sizeof(raw_ep), "tcp://127.0.0.1:%d", port + 1);
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return;
    pid_t raw_pid = fork();
    if (raw_pid == 0) {
        close(pipefd[1]);
        raw_router_main(raw_ep, pipefd[0]);
    }
    close(pipefd[0]);
    snprintf(data, sizeof(data), "--data-dir=%s/d-pserver", o->dir);
    snprintf(mem, sizeof(mem), "--memory-mb=%" PRIu64, o->keys * 256 / (1 << 20) + 64);
    pid_t pid = fork();
    if (pid == 0) {
        execl(o->sparrow, o->sparrow, "pserver", "--listen", ep, "--dim", "16", data, mem,
              "--http-port", "0", "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, timeout = 30000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    zmq_connect(s, ep);
    int nb = o->d_batches;
    int nw = (int)((o->keys + BATCH - 1) / BATCH);
    struct spw_wire_buf *warm_msgs = calloc((size_t)nw, sizeof(*warm_msgs));
    struct spw_wire_buf *push_msgs = calloc((size_t)nb, sizeof(*push_msgs));
    struct spw_wire_buf *pull_msgs = calloc((size_t)nb, sizeof(*pull_msgs));
    uint64_t *keys = malloc(BATCH * 8);
    uint32_t *vers = calloc(BATCH, 4);
    for (int b = 0; b < nw; b++) {
        size_t n = 0;
        for (uint64_t k = (uint64_t)b * BATCH; k < o->keys && n < BATCH; k++)
            keys[n++] = spw_hash_mix64(k);
        pack_push(keys, n, g, vers, (uint64_t)b + 1, &warm_msgs[b]);
    }
    for (int b = 0; b < nb; b++) {
        for (int i = 0; i < BATCH; i++)
            keys[i] = spw_hash_mix64(ranks[(size_t)b * BATCH + i]);
        pack_push(keys, BATCH, g, vers, (uint64_t)(nw + b) + 1, &push_msgs[b]);
        Sparrow__PullRequest pr = SPARROW__PULL_REQUEST__INIT;
        pr.has_keys = true;
        pr.keys.data = (uint8_t *)keys;
        pr.keys.len = BATCH * 8;
        Sparrow__Request req = SPARROW__REQUEST__INIT;
        req.has_version = true;
        req.version = 1;
        req.body_case = SPARROW__REQUEST__BODY_PULL;
        req.pull = &pr;
        spw_wire_pack(&req.base, &pull_msgs[b]);
    }
    /* wait for the server */
    Sparrow__HealthRequest hr = SPARROW__HEALTH_REQUEST__INIT;
    Sparrow__Request hreq = SPARROW__REQUEST__INIT;
    hreq.has_version = true;
    hreq.version = 1;
    hreq.body_case = SPARROW__REQUEST__BODY_HEALTH;
    hreq.health = &hr;
    struct spw_wire_buf hb = {0};
    spw_wire_pack(&hreq.base, &hb);
    zmq_send(s, hb.data, hb.len, 0);
    char tmp[256];
    if (zmq_recv(s, tmp, sizeof(tmp), 0) < 0) {
        fprintf(stderr, "(d) pserver did not answer\n");
        goto out_kill;
    }
    size_t sizes[3] = {0, 0, pull_msgs[0].len}; /* push reply, pull reply, pull request */
    /* The pserver's CPU time per row too: on a loaded machine the wall-clock rates swing with
     * what else runs, its CPU time far less. */
    double cpu0 = proc_cpu_s(pid);
    rates->cold = send_windowed(s, warm_msgs, nw, (double)o->keys, NULL);
    double cpu1 = proc_cpu_s(pid);
    rates->cold_cpu = (cpu1 - cpu0) / (double)o->keys * 1e6;
    /* Then ROUNDS interleaved rounds of pserver push, pull, raw push, raw pull (the raw child
     * learns the reply sizes after the first pserver round), each rate the median of its rounds:
     * a shared machine's contention swings one pass by 2x, and lands on both sides alike. */
    enum { ROUNDS = 3 };
    double push[ROUNDS], pull[ROUNDS], raw_push[ROUNDS], raw_pull[ROUNDS];
    void *rs = NULL;
    int r = 0;
    for (; r < ROUNDS; r++) {
        double c0 = proc_cpu_s(pid);
        push[r] = send_windowed(s, push_msgs, nb, (double)nb * BATCH, r ? NULL : &sizes[0]);
        if (r == 0)
            rates->push_cpu = (proc_cpu_s(pid) - c0) / ((double)nb * BATCH) * 1e6;
        pull[r] = push[r] > 0
                      ? send_windowed(s, pull_msgs, nb, (double)nb * BATCH, r ? NULL : &sizes[1])
                      : 0;
        if (pull[r] <= 0)
            break;
        if (r == 0) {
            if (write(pipefd[1], sizes, sizeof(sizes)) != (ssize_t)sizeof(sizes))
                break;
            rs = zmq_socket(ctx, ZMQ_DEALER);
            zmq_setsockopt(rs, ZMQ_LINGER, &linger, sizeof(linger));
            zmq_setsockopt(rs, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
            zmq_connect(rs, raw_ep);
        }
        raw_push[r] = send_windowed(rs, push_msgs, nb, (double)nb * BATCH, NULL);
        raw_pull[r] = send_windowed(rs, pull_msgs, nb, (double)nb * BATCH, NULL);
    }
    if (r == ROUNDS) {
        rates->push = median3(push);
        rates->pull = median3(pull);
        rates->raw_push = median3(raw_push);
        rates->raw_pull = median3(raw_pull);
    }
    if (rs) {
        zmq_send(rs, "q", 1, 0);
        zmq_close(rs);
    }
out_kill:
    close(pipefd[1]); /* a raw child still waiting for the sizes exits */
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    waitpid(raw_pid, NULL, 0);
    for (int b = 0; b < nw; b++)
        free(warm_msgs[b].data);
    for (int b = 0; b < nb; b++) {
        free(push_msgs[b].data);
        free(pull_msgs[b].data);
    }
    free(warm_msgs);
    free(push_msgs);
    free(pull_msgs);
    free(hb.data);
    free(keys);
    free(vers);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

static double bench_dd(const struct opts *o, uint64_t bytes)
{
    char cmd[8192];
    uint64_t mb = bytes / (1 << 20) + 1;
    snprintf(cmd, sizeof(cmd),
             "dd if=/dev/zero of=%s/f-dd bs=1M count=%" PRIu64 " conv=fdatasync status=none",
             o->dir, mb);
    sync();
    double t0 = now_s();
    if (system(cmd) != 0)
        return 0;
    double dt = now_s() - t0;
    snprintf(cmd, sizeof(cmd), "%s/f-dd", o->dir);
    unlink(cmd);
    return (double)(mb << 20) / dt;
}

/* (e): the row store with a model 10x its DRAM budget, evicted rows in the cold file (or, with
 * cold_off, in RocksDB alone): pushes, then pulls then pushes, then the flush a checkpoint
 * makes of the rows left dirty. Prints its lines; non-zero on a failure. */
static int bench_e(const struct opts *o, const uint32_t *er, int e_warm, const float *g, double b,
                   double b_pp, bool cold_off)
{
    char path[4096], err[512];
    const char *tag =
        cold_off ? "(e') RocksDB only, no cold file" : "(e) row store, model 10x DRAM";
    const char *e = cold_off ? "(e')" : "(e)";
    snprintf(path, sizeof(path), "%s/e-store%s", o->dir, cold_off ? "-rocksdb" : "");
    uint64_t model = o->e_keys * (SPW_PS_ROW_HDR + 2 * DIM * sizeof(float));
    struct spw_ps_store_conf ec = store_conf(o, path, model / 10);
    ec.cold_off = cold_off;
    spw_ps_store_t *es = spw_ps_store_open(&ec, err, sizeof(err));
    if (!es) {
        fprintf(stderr, "store e: %s\n", err);
        return 1;
    }
    /* Every key gets a row, so the model is e_keys rows. (e) is to time a shard in its steady
     * state, DRAM holding the rows its eviction policy keeps. Filled hottest rank first, DRAM
     * would start with the ranks least likely to be pushed and (e) would time the warming of
     * the hot set instead (at full size 31.5% of rows read from RocksDB, against 25.4% with
     * this start, and about 26% in a simulation of CLOCK on these batches after 1000). So the
     * coldest ranks go first, and untimed warm-up batches let DRAM settle from there to what
     * the eviction policy keeps. */
    fill(es, o->e_keys, g, true);
    /* The fill leaves dirty rows in the cold file and, without it, RocksDB flushes and
     * compactions behind: a checkpoint's flush, then idle RocksDB, so that (e) times its own
     * work, not the fill's. */
    double t0 = now_s();
    bool settled = spw_ps_store_flush(es) == SPW_OK && spw_ps__store_wait_idle(es, 120000);
    double settle = now_s() - t0;
    struct spw_ps_store_stats st, st0, stw;
    spw_ps_store_get_stats(es, &stw);
    (void)run_store(es, er, e_warm, g);
    spw_ps_store_get_stats(es, &st0);
    double warm_miss = 100.0 *
                       (double)(st0.db_reads + st0.cold_reads - stw.db_reads - stw.cold_reads) /
                       ((double)(e_warm > 0 ? e_warm : 1) * BATCH);
    er += (size_t)e_warm * BATCH;
    double rows_e = (double)o->e_batches * BATCH;
    double cpu0 = cpu_s(CLOCK_THREAD_CPUTIME_ID), all0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    double rate = run_store(es, er, o->e_batches, g);
    double cpu1 = cpu_s(CLOCK_THREAD_CPUTIME_ID), all1 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    spw_ps_store_get_stats(es, &st);
    printf("%-34s %12.0f rows/s   %s/b = %.2f (target >= 0.1); DRAM rows %" PRIu64 " of %" PRIu64
           ", rows read from the cold file %.1f%%, from RocksDB %.1f%%, settled %.1f s%s, "
           "after %d untimed batches (read %.1f%%)\n",
           tag, rate, cold_off ? "e'" : "e", rate / b, st.rows_dram, o->e_keys,
           100.0 * (double)(st.cold_reads - st0.cold_reads) / rows_e,
           100.0 * (double)(st.db_reads - st0.db_reads) / rows_e, settle,
           settled ? "" : " (timed out)", e_warm, warm_miss);
    /* CPU time, which a loaded machine disturbs far less than the wall-clock rate above. */
    printf("    %s CPU per row: pushing thread %.3f us, all threads (RocksDB's included) "
           "%.3f us; wall %.3f us\n",
           e, (cpu1 - cpu0) / rows_e * 1e6, (all1 - all0) / rows_e * 1e6, 1e6 / rate);
    /* As a trainer drives it: each batch pulled (the pull brings the missing rows in), then
     * pushed with the versions pulled; against (b) the same way. */
    er += (size_t)o->e_batches * BATCH;
    spw_ps_store_get_stats(es, &st0);
    cpu0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    all0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    double t_pp = now_s();
    double ep = run_store_pattern(es, er, o->e_batches, g, true);
    t_pp = now_s() - t_pp;
    cpu1 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    all1 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    spw_ps_store_get_stats(es, &st);
    printf("    %-30s %12.0f rows/s   vs (b) pull then push: %.2f "
           "(target >= 0.1); rows read from the cold file %.1f%%, from RocksDB %.1f%%; CPU per "
           "row: pulling and pushing thread %.3f us, all threads %.3f us; wall %.3f us\n",
           cold_off ? "(e') pull then push" : "(e) pull then push", ep, b_pp > 0 ? ep / b_pp : 0,
           100.0 * (double)(st.cold_reads - st0.cold_reads) / rows_e,
           100.0 * (double)(st.db_reads - st0.db_reads) / rows_e, (cpu1 - cpu0) / rows_e * 1e6,
           (all1 - all0) / rows_e * 1e6, 1e6 / ep);
    /* What a checkpoint then costs: the dirty rows written to RocksDB (with the cold file, every
     * row changed since the last flush; without it, those changed since their eviction), and
     * the RocksDB work that leaves. Charged to the pulls and pushes above, against (b) without
     * its own flush. */
    spw_ps_store_get_stats(es, &st0);
    double tf = now_s();
    if (spw_ps_store_flush(es) != SPW_OK) {
        fprintf(stderr, "store e: flush failed\n");
        return 1;
    }
    tf = now_s() - tf;
    double tw = now_s();
    settled = spw_ps__store_wait_idle(es, 120000);
    tw = now_s() - tw;
    spw_ps_store_get_stats(es, &st);
    double with_flush = rows_e / (rows_e / rate + t_pp + tf + tw) * 2;
    printf("    %s then a checkpoint's flush: %" PRIu64 " rows in %.2f s, RocksDB idle %.2f s%s "
           "later; pushes and pulls-then-pushes with it: %.0f rows/s, flush charged = %.2f of (b) "
           "pushes (cold file %.0f MB)\n",
           e, st.rows_db_written - st0.rows_db_written, tf, tw, settled ? "" : " (timed out)",
           with_flush, with_flush / b, (double)st.bytes_cold / (1 << 20));
    spw_ps_store_close(es);
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pserver_bench --sparrow PATH [--dir DIR (an existing directory: the bench\n"
            "                     works in a fresh one inside it)] [--keys N] [--e-keys N]\n"
            "                     [--batches N] [--c-batches N] [--d-batches N] [--e-batches N]\n"
            "                     [--rocksdb-options STRING]\n"
            "                     [--only LETTERS]   (sections to run, e.g. \"abf\"; b is needed\n"
            "                                         for f and for the ratios)\n"
            "       full issue sizes: --keys 4000000 --e-keys 40000000 --batches 2000\n");
}

int main(int argc, char **argv)
{
    struct opts o = {.keys = 1000000,
                     .e_keys = 4000000,
                     .batches = 2000,
                     .c_batches = 25,
                     .d_batches = 1000,
                     .e_batches = 400,
                     .sparrow = NULL,
                     .dir = NULL};
    if (argc % 2 == 0) { /* options come in pairs: a lone one (--help) is no run */
        usage();
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--sparrow"))
            o.sparrow = v;
        else if (!strcmp(k, "--dir"))
            o.dir = v;
        else if (!strcmp(k, "--keys"))
            o.keys = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--e-keys"))
            o.e_keys = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--batches"))
            o.batches = atoi(v);
        else if (!strcmp(k, "--c-batches"))
            o.c_batches = atoi(v);
        else if (!strcmp(k, "--d-batches"))
            o.d_batches = atoi(v);
        else if (!strcmp(k, "--e-batches"))
            o.e_batches = atoi(v);
        else if (!strcmp(k, "--rocksdb-options"))
            o.rocksdb_options = v;
        else if (!strcmp(k, "--only"))
            o.only = v;
        else {
            usage();
            return 2;
        }
    }
    if (o.keys < BATCH * 2 || o.e_keys < BATCH * 2) {
        usage();
        return 2;
    }
    /* Its own fresh directory, inside --dir (which must exist) or /tmp, removed at the end: never
     * the caller's directory itself, which may hold anything. */
    char tmpl[4096];
    int tn = snprintf(tmpl, sizeof(tmpl), "%s/pserver_bench.XXXXXX", o.dir ? o.dir : "/tmp");
    if (tn < 0 || (size_t)tn >= sizeof(tmpl) || !(o.dir = mkdtemp(tmpl))) {
        fprintf(stderr, "pserver_bench: cannot make a directory %s: %s\n", tmpl, strerror(errno));
        return 2;
    }
    printf("pserver_bench: Zipf(1.1), dim %d, Adagrad, %d keys/batch, keys %" PRIu64
           ", e-keys %" PRIu64 "\n",
           DIM, BATCH, o.keys, o.e_keys);
    struct zipf z;
    zipf_init(&z, o.keys, 1.1, 42);
    int nb = o.batches > o.d_batches ? o.batches : o.d_batches;
    uint32_t *ranks = make_batches(&z, nb);
    float *g = make_grads();

    double a = 0, b = 0, b_pp = 0; /* b_pp: (b) pulled then pushed */
    if (want(&o, 'a')) {
        a = bench_flat(&o, ranks, g);
        printf("(a) flat array Adagrad loop        %12.0f rows/s\n", a);
    }

    char path[4096], err[512];
    struct spw_ps_store_stats st;
    if (want(&o, 'b') || want(&o, 'f')) {
        /* (b) plus the resident memory per DRAM row: every key gets a row first. */
        snprintf(path, sizeof(path), "%s/b-store", o.dir);
        uint64_t budget = o.keys * 256 + (64u << 20);
        struct spw_ps_store_conf sc = store_conf(&o, path, budget);
        uint64_t rss0 = rss_bytes();
        spw_ps_store_t *s = spw_ps_store_open(&sc, err, sizeof(err));
        if (!s) {
            fprintf(stderr, "store: %s\n", err);
            return 1;
        }
        fill(s, o.keys, g, false);
        uint64_t rss1 = rss_bytes();
        spw_ps_store_get_stats(s, &st);
        double per_row = (double)(rss1 - rss0) / (double)st.rows_dram;
        double payload = 2.0 * DIM * sizeof(float);
        b = run_store(s, ranks, o.batches, g);
        printf("(b) row store, batched pushes      %12.0f rows/s   b/a = %.2f (target >= 0.5)\n", b,
               b / a);
        double bp = run_store_pattern(s, ranks, o.batches, g, true);
        b_pp = bp;
        printf(
            "    (b) pull then push             %12.0f rows/s   (a trainer's pattern: each batch "
            "pulled, then pushed with the versions pulled)\n",
            bp);
        printf("    resident per DRAM row           %10.1f bytes   payload %.0f -> limit %.1f "
               "(1.3 x payload + 24) %s\n",
               per_row, payload, 1.3 * payload + 24,
               per_row <= 1.3 * payload + 24 ? "met" : "MISSED");

        if (want(&o, 'f')) {
            /* (f) checkpoint of the dirty rows vs dd writing as many bytes. */
            fill(s, o.keys, g, false); /* make every row dirty */
            struct spw_ps_checkpoint_info info;
            sync(); /* both the checkpoint and dd start with no other writes in flight */
            double t0 = now_s();
            if (spw_ps_store_checkpoint(s, o.dir, 1, &info, err, sizeof(err)) != SPW_OK) {
                fprintf(stderr, "checkpoint: %s\n", err);
                return 1;
            }
            double dt = now_s() - t0;
            double rate = (double)info.bytes / dt;
            double dd = bench_dd(&o, info.bytes);
            printf("(f) checkpoint of %" PRIu64 " dirty rows  %8.1f MB/s (%" PRIu64
                   " bytes, %.2f s)   dd %.1f MB/s   f/dd = %.2f (target >= 0.3)\n",
                   o.keys, rate / 1e6, info.bytes, dt, dd / 1e6, dd > 0 ? rate / dd : 0);
        }
        spw_ps_store_close(s);
    }

    if (want(&o, 'c')) {
        double c = bench_rocksdb(&o, ranks, g);
        printf("(c) RocksDB get+put per update     %12.0f rows/s   b/c = %.1f (target >= 20)\n", c,
               b / c);
    }

    if (want(&o, 'd') && o.sparrow) {
        struct zmq_rates zr;
        bench_zmq(&o, ranks, g, &zr);
        printf("(d) ZeroMQ push to sparrow pserver %12.0f rows/s   d/b = %.2f (target >= 0.25); "
               "vs raw ZeroMQ pair %.0f rows/s: %.2f (target >= 0.5)\n",
               zr.push, zr.push / b, zr.raw_push, zr.raw_push > 0 ? zr.push / zr.raw_push : 0);
        printf("    ZeroMQ pull                    %12.0f rows/s   vs raw ZeroMQ pair %.0f "
               "rows/s: %.2f (target >= 0.5)\n",
               zr.pull, zr.raw_pull, zr.raw_pull > 0 ? zr.pull / zr.raw_pull : 0);
        printf(
            "    ZeroMQ push, rows created      %12.0f rows/s   (first push of every key, Adagrad "
            "applied; target >= 3000000)\n",
            zr.cold);
        printf("    pserver CPU per row (all its threads): rows created %.3f us, push %.3f us\n",
               zr.cold_cpu, zr.push_cpu);
    } else if (want(&o, 'd')) {
        printf("(d) skipped (no --sparrow PATH)\n");
    }

    if (want(&o, 'e')) {
        /* (e) 10x the DRAM budget */
        struct zipf ze;
        zipf_init(&ze, o.e_keys, 1.1, 43);
        /* e_batches / 2 untimed warm-up batches first, then the e_batches timed ones, then
         * e_batches more, timed pulled then pushed (the trainer's pattern). */
        int e_warm = o.e_batches / 2;
        uint32_t *er = make_batches(&ze, e_warm + 2 * o.e_batches);
        zipf_fini(&ze);
        if (bench_e(&o, er, e_warm, g, b, b_pp, false) != 0 ||
            bench_e(&o, er, e_warm, g, b, b_pp, true) != 0)
            return 1;
        free(er);
    }
    spw_fs_remove_tree(o.dir);
    free(ranks);
    free(g);
    zipf_fini(&z);
    return 0;
}
