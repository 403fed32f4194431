/* Checks for reshard.sh: every row of a checkpoint (read through sparrow/ps_ckpt.h, verified
 * against its manifest) pulled from running shards bit for bit; two shard sets trained with the
 * same pushes stay bit-identical (optimizer state carried over); two manifests agree on
 * everything but their shards. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/config.h"
#include "sparrow/coordinator.h"
#include "sparrow/log.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/ps_client.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define CHUNK 4096u

struct rows {
    uint32_t dim;
    size_t n, cap;
    uint64_t *keys;
    uint32_t *versions;
    float *weights; /* n × dim */
};

/* Every row of every shard of root's epoch into *out. */
static int load_rows(const char *root, uint64_t epoch, struct rows *out)
{
    struct spw_coord_manifest m;
    char err[512];
    if (spw_coord_manifest_read(root, epoch, &m, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "manifest: %s\n", err);
        return -1;
    }
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < m.shard_count; i++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64 "/shard-%u", root, epoch, i);
        spw_err_t rc;
        spw_ps_ckpt_reader_t *r =
            spw_ps_ckpt_reader_open(dir, m.checksums[i], NULL, &rc, err, sizeof(err));
        if (!r) {
            fprintf(stderr, "reader: %s\n", err);
            return -1;
        }
        out->dim = spw_ps_ckpt_reader_meta(r)->dim;
        struct spw_ps_ckpt_row row;
        while ((rc = spw_ps_ckpt_reader_next(r, &row, err, sizeof(err))) == SPW_OK) {
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 4096;
                out->keys = realloc(out->keys, out->cap * sizeof(uint64_t));
                out->versions = realloc(out->versions, out->cap * sizeof(uint32_t));
                out->weights = realloc(out->weights, out->cap * out->dim * sizeof(float));
                if (!out->keys || !out->versions || !out->weights)
                    abort();
            }
            out->keys[out->n] = row.key;
            out->versions[out->n] = row.version;
            memcpy(out->weights + out->n * out->dim, row.data, out->dim * sizeof(float));
            out->n++;
        }
        spw_ps_ckpt_reader_close(r);
        if (rc != SPW_ERR_EOF) {
            fprintf(stderr, "read %s: %s\n", dir, err);
            return -1;
        }
    }
    spw_coord_manifest_fini(&m);
    return 0;
}

static void rows_free(struct rows *rows)
{
    free(rows->keys);
    free(rows->versions);
    free(rows->weights);
}

static spw_ps_client_t *connect_shards(const char *endpoints, uint32_t dim, uint32_t trainer)
{
    struct spw_ps_client_conf conf;
    spw_ps_client_conf_default(&conf);
    conf.dim = dim;
    conf.shards = endpoints;
    conf.trainer_id = trainer;
    conf.epoch = (uint64_t)spw_time_wall_ms();
    conf.push_timeout_ms = 5000;
    conf.pull_timeout_ms = 5000;
    char err[512];
    spw_ps_client_t *c = spw_ps_client_new(&conf, err, sizeof(err));
    if (!c)
        fprintf(stderr, "client: %s\n", err);
    return c;
}

static int pull(spw_ps_client_t *c, const uint64_t *keys, size_t n, float *w, uint32_t *v)
{
    uint64_t token;
    spw_err_t rc = spw_ps_client_pull_start(c, keys, n, w, v, &token);
    if (rc == SPW_OK)
        rc = spw_ps_client_pull_wait(c, token, 60000);
    if (rc != SPW_OK)
        fprintf(stderr, "pull: %s: %s\n", spw_err_str(rc), spw_ps_client_errstr(c));
    return rc == SPW_OK ? 0 : -1;
}

/* Pulls every row of rows from the shards at endpoints; all must equal, bit for bit. */
static int compare(const struct rows *rows, const char *endpoints)
{
    spw_ps_client_t *c = connect_shards(endpoints, rows->dim, 1);
    if (!c)
        return 1;
    float *w = malloc((size_t)CHUNK * rows->dim * sizeof(float));
    uint32_t *v = malloc(CHUNK * sizeof(uint32_t));
    size_t bad = 0;
    for (size_t off = 0; off < rows->n && bad == 0; off += CHUNK) {
        size_t n = rows->n - off < CHUNK ? rows->n - off : CHUNK;
        if (pull(c, rows->keys + off, n, w, v) != 0) {
            bad = 1;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (v[i] == rows->versions[off + i] &&
                memcmp(w + i * rows->dim, rows->weights + (off + i) * rows->dim,
                       rows->dim * sizeof(float)) == 0)
                continue;
            if (bad++ < 5)
                fprintf(stderr, "key %" PRIu64 ": version %u, checkpoint %u; weight[0] %a vs %a\n",
                        rows->keys[off + i], v[i], rows->versions[off + i], w[i * rows->dim],
                        rows->weights[(off + i) * rows->dim]);
        }
    }
    free(w);
    free(v);
    spw_ps_client_destroy(c);
    if (bad) {
        fprintf(stderr, "compare: %zu rows differ\n", bad);
        return 1;
    }
    printf("compare ok: %zu rows of dim %u equal bit for bit\n", rows->n, rows->dim);
    return 0;
}

/* Trains the shard sets a and b with the same pushes (versions from their own pulls, which must
 * agree) over the first keys of rows; every pull of both must be bit-identical. */
static int train_both(const struct rows *rows, const char *a_eps, const char *b_eps, int steps)
{
    spw_ps_client_t *a = connect_shards(a_eps, rows->dim, 7);
    spw_ps_client_t *b = connect_shards(b_eps, rows->dim, 7);
    if (!a || !b)
        return 1;
    size_t n = rows->n < CHUNK ? rows->n : CHUNK;
    size_t floats = n * rows->dim;
    float *wa = malloc(floats * sizeof(float)), *wb = malloc(floats * sizeof(float));
    float *g = malloc(floats * sizeof(float));
    uint32_t *va = malloc(n * sizeof(uint32_t)), *vb = malloc(n * sizeof(uint32_t));
    int rc = 1;
    for (int t = 0; t <= steps; t++) {
        if (pull(a, rows->keys, n, wa, va) != 0 || pull(b, rows->keys, n, wb, vb) != 0)
            goto out;
        if (memcmp(wa, wb, floats * sizeof(float)) != 0 || memcmp(va, vb, n * 4) != 0) {
            fprintf(stderr, "train: the shard sets differ after %d steps\n", t);
            goto out;
        }
        if (t == steps) {
            /* every push applied: the versions moved by exactly steps */
            for (size_t i = 0; i < n; i++)
                if (va[i] != rows->versions[i] + (uint32_t)steps) {
                    fprintf(stderr, "train: key %" PRIu64 " at version %u, expected %u\n",
                            rows->keys[i], va[i], rows->versions[i] + (uint32_t)steps);
                    goto out;
                }
            break;
        }
        for (size_t i = 0; i < floats; i++)
            g[i] = (float)((int)((i * 7 + (size_t)t * 13) % 33) - 16) / 64.0f;
        struct spw_ps_push p = {.n = n, .keys = rows->keys, .versions = va, .grads = g};
        p.max_event_time_ms = spw_time_wall_ms();
        p.examples = 1;
        if (spw_ps_client_push(a, &p, NULL) != SPW_OK ||
            spw_ps_client_push(b, &p, NULL) != SPW_OK || spw_ps_client_flush(a, 60000) != SPW_OK ||
            spw_ps_client_flush(b, 60000) != SPW_OK) {
            fprintf(stderr, "push: %s / %s\n", spw_ps_client_errstr(a), spw_ps_client_errstr(b));
            goto out;
        }
    }
    printf("train ok: %d steps over %zu rows, both shard sets bit-identical\n", steps, n);
    rc = 0;
out:
    free(wa);
    free(wb);
    free(g);
    free(va);
    free(vb);
    spw_ps_client_destroy(a);
    spw_ps_client_destroy(b);
    return rc;
}

static int same_offsets(const struct spw_coord_offset *x, size_t nx,
                        const struct spw_coord_offset *y, size_t ny)
{
    if (nx != ny)
        return 0;
    for (size_t i = 0; i < nx; i++)
        if (strcmp(x[i].topic, y[i].topic) != 0 || x[i].partition != y[i].partition ||
            x[i].offset != y[i].offset || x[i].skip != y[i].skip)
            return 0;
    return 1;
}

/* The manifests of a and b at epoch agree on offsets, update offsets and example count; b has
 * shards shard counts and its row counts add up to a's rows read. */
static int manifests(const char *a_root, const char *b_root, uint64_t epoch, uint32_t shards)
{
    struct spw_coord_manifest a, b;
    char err[512];
    if (spw_coord_manifest_read(a_root, epoch, &a, err, sizeof(err)) != SPW_OK ||
        spw_coord_manifest_read(b_root, epoch, &b, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "manifest: %s\n", err);
        return 1;
    }
    uint64_t latest = 0;
    int ok = spw_coord_latest_read(b_root, &latest) == SPW_OK && latest == epoch;
    ok = ok && b.shard_count == shards && a.example_count == b.example_count;
    ok = ok && a.created_ms == b.created_ms;
    ok = ok && same_offsets(a.offsets, a.n_offsets, b.offsets, b.n_offsets);
    ok = ok &&
         same_offsets(a.update_offsets, a.n_update_offsets, b.update_offsets, b.n_update_offsets);
    printf("manifests: epoch %" PRIu64 " shards %u -> %u, examples %" PRIu64 ", %zu offsets, %zu "
           "update offsets: %s\n",
           epoch, a.shard_count, b.shard_count, b.example_count, b.n_offsets, b.n_update_offsets,
           ok ? "ok" : "DIFFER");
    spw_coord_manifest_fini(&a);
    spw_coord_manifest_fini(&b);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    spw_log_init("reshard_check", SPW_LOG_WARN);
    spw_signal_install();
    int64_t epoch = 0, extra = 0;
    if (argc >= 4 && spw_parse_int64(argv[3], &epoch) == SPW_OK) {
        struct rows rows;
        if (strcmp(argv[1], "compare") == 0 && argc == 5) {
            if (load_rows(argv[2], (uint64_t)epoch, &rows) != 0)
                return 1;
            int rc = compare(&rows, argv[4]);
            rows_free(&rows);
            return rc;
        }
        if (strcmp(argv[1], "train") == 0 && argc == 7 &&
            spw_parse_int64(argv[6], &extra) == SPW_OK) {
            if (load_rows(argv[2], (uint64_t)epoch, &rows) != 0)
                return 1;
            int rc = train_both(&rows, argv[4], argv[5], (int)extra);
            rows_free(&rows);
            return rc;
        }
        if (strcmp(argv[1], "manifests") == 0 && argc == 6 &&
            spw_parse_int64(argv[5], &extra) == SPW_OK)
            return manifests(argv[2], argv[4], (uint64_t)epoch, (uint32_t)extra);
    }
    fprintf(stderr, "usage: reshard_check compare ROOT EPOCH ENDPOINTS\n"
                    "       reshard_check train ROOT EPOCH ENDPOINTS_A ENDPOINTS_B STEPS\n"
                    "       reshard_check manifests ROOT_A EPOCH ROOT_B SHARDS\n");
    return 2;
}
