/* A trainer-shaped driver of the PS client for the integration scripts: pipelined pulls and
 * windowed pushes of known gradients against `sparrow pserver` processes, in two phases with a
 * pause between them (the script kills and restarts shards there), checking every row exactly. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/config.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/ps_client.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define KEYS 512

static uint32_t dim;
static uint64_t keys[KEYS];

/* Exactly representable gradient values, so that sums are exact whatever the order. */
static float grad(size_t i, uint32_t d)
{
    return (float)((i * 7 + (size_t)d * 3) % 16) * 0.125f;
}

/* Runs steps pipelined steps: the pull of step t+1 is in flight while step t pushes. */
static int run_steps(spw_ps_client_t *c, int steps, float *rows, uint32_t *vers, float *g)
{
    uint64_t token;
    if (spw_ps_client_pull_start(c, keys, KEYS, rows, vers, &token) != SPW_OK)
        return 1;
    for (int t = 0; t < steps; t++) {
        spw_err_t err = spw_ps_client_pull_wait(c, token, -1);
        if (err) {
            fprintf(stderr, "pull: %s: %s\n", spw_err_str(err), spw_ps_client_errstr(c));
            return 1;
        }
        struct spw_ps_push p = {.n = KEYS, .keys = keys, .versions = vers, .grads = g};
        p.max_event_time_ms = spw_time_wall_ms();
        p.examples = 100;
        err = spw_ps_client_push(c, &p, NULL);
        if (err) {
            fprintf(stderr, "push: %s: %s\n", spw_err_str(err), spw_ps_client_errstr(c));
            return 1;
        }
        if (spw_ps_client_pull_start(c, keys, KEYS, rows, vers, &token) != SPW_OK)
            return 1;
    }
    spw_err_t err = spw_ps_client_pull_wait(c, token, -1);
    if (!err)
        err = spw_ps_client_flush(c, -1);
    if (err) {
        fprintf(stderr, "flush: %s: %s\n", spw_err_str(err), spw_ps_client_errstr(c));
        return 1;
    }
    return 0;
}

/* Pushes steps times without pulling in between: the window fills while a shard is down. */
static int run_burst(spw_ps_client_t *c, int steps, const uint32_t *vers, const float *g)
{
    for (int t = 0; t < steps; t++) {
        struct spw_ps_push p = {.n = KEYS, .keys = keys, .versions = vers, .grads = g};
        spw_err_t err = spw_ps_client_push(c, &p, NULL);
        if (err) {
            fprintf(stderr, "push: %s: %s\n", spw_err_str(err), spw_ps_client_errstr(c));
            return 1;
        }
    }
    return 0;
}

/* Pulls every key and checks row i == -steps_of(shard) × grad(i). */
static int verify(spw_ps_client_t *c, float *rows, uint32_t *vers, const int *steps_of)
{
    uint64_t token;
    if (spw_ps_client_pull_start(c, keys, KEYS, rows, vers, &token) != SPW_OK ||
        spw_ps_client_pull_wait(c, token, -1) != SPW_OK)
        return 1;
    uint32_t shards = spw_ps_client_shards(c);
    for (size_t i = 0; i < KEYS; i++) {
        int steps = steps_of[spw_hash_shard(keys[i], shards)];
        for (uint32_t d = 0; d < dim; d++) {
            float want = -(float)steps * grad(i, d);
            if (rows[i * dim + d] != want) {
                fprintf(stderr, "key %zu dim %u: %g, want %g\n", i, d, rows[i * dim + d], want);
                return 1;
            }
        }
        if (vers[i] != (uint32_t)steps) {
            fprintf(stderr, "key %zu: version %u, want %d\n", i, vers[i], steps);
            return 1;
        }
    }
    return 0;
}

static void touch(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static int wait_file(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (int i = 0; i < 1200; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        spw_time_sleep_ms(50);
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: psc_driver SHARDS DIM DIR STEPS RESTARTED_SHARD\n");
        return 2;
    }
    spw_log_init("psc_driver", SPW_LOG_INFO);
    spw_signal_install();
    int64_t dim_arg, steps_arg, restarted_arg;
    if (spw_parse_int64(argv[2], &dim_arg) || spw_parse_int64(argv[4], &steps_arg) ||
        spw_parse_int64(argv[5], &restarted_arg) || dim_arg < 1 || dim_arg > 64 || steps_arg < 1 ||
        steps_arg > 100000) {
        fprintf(stderr, "psc_driver: bad DIM, STEPS or RESTARTED_SHARD\n");
        return 2;
    }
    dim = (uint32_t)dim_arg;
    const char *dir = argv[3];
    int steps = (int)steps_arg;
    int restarted = (int)restarted_arg;
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = dim;
    conf.shards = argv[1];
    conf.trainer_id = 1;
    conf.epoch = (uint64_t)spw_time_wall_ms(); /* fresh per run */
    conf.push_window = 8;
    conf.push_timeout_ms = 200;
    conf.pull_timeout_ms = 200;
    char err[512];
    spw_ps_client_t *c = spw_ps_client_new(&conf, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "client: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < KEYS; i++)
        keys[i] = spw_hash_mix64(i + 1000);
    float *rows = malloc((size_t)KEYS * dim * sizeof(float));
    float *g = malloc((size_t)KEYS * dim * sizeof(float));
    uint32_t *vers = malloc(KEYS * sizeof(uint32_t));
    for (size_t i = 0; i < KEYS; i++)
        for (uint32_t d = 0; d < dim; d++)
            g[i * dim + d] = grad(i, d);
    int steps_of[64];
    uint32_t shards = spw_ps_client_shards(c);
    int rc = 1;
    for (uint32_t s = 0; s < shards && s < 64; s++)
        steps_of[s] = steps;
    if (run_steps(c, steps, rows, vers, g) || verify(c, rows, vers, steps_of)) {
        fprintf(stderr, "phase 1 failed\n");
        goto out_free;
    }
    printf("phase 1 ok\n");
    fflush(stdout);
    touch(dir, "phase1");
    if (wait_file(dir, "go")) {
        fprintf(stderr, "no go file\n");
        goto out_free;
    }
    /* Phase 2: a burst of pushes (filling the window while a shard is down), then pipelined
     * steps. The restarted shard started empty: it holds phase 2 only, each push once. */
    for (uint32_t s = 0; s < shards && s < 64; s++)
        steps_of[s] = (int)s == restarted ? 2 * steps : 3 * steps;
    if (run_burst(c, steps, vers, g) || run_steps(c, steps, rows, vers, g) ||
        verify(c, rows, vers, steps_of)) {
        fprintf(stderr, "phase 2 failed\n");
        goto out_free;
    }
    struct spw_ps_client_stats st;
    spw_ps_client_get_stats(c, &st);
    printf("phase 2 ok pushes=%" PRIu64 " acked=%" PRIu64 " resends=%" PRIu64 " reconnects=%" PRIu64
           " timeouts=%" PRIu64 " window_max=%u\n",
           st.pushes, st.pushes_acked, st.resends, st.reconnects, st.timeouts, st.window_max);
    rc = 0;
out_free:
    free(rows);
    free(g);
    free(vers);
    spw_ps_client_destroy(c);
    return rc;
}
