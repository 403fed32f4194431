/* `sparrow reshard`: rewrites a checkpoint epoch (MANIFEST + one checkpoint per shard) for another
 * shard count, every row moved to the shard spw_hash_shard gives it, through the pserver's
 * checkpoint reader and writer (sparrow/ps_ckpt.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "command_table.h"
#include "sparrow/coordinator.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/pserver.h"

/* Most shard checkpoints written in one pass over the source rows (each an open RocksDB). */
#define WRITERS_PER_PASS 32u

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow reshard --from CHECKPOINT --shards N --to DIR [--log-level LEVEL]\n\n"
            "Rewrites a checkpoint for N shards (1..%u). CHECKPOINT is an epoch directory\n"
            "<root>/checkpoints/<E> (MANIFEST and shard-<i>/ for every shard), or a root whose\n"
            "checkpoints/LATEST names one. Every shard checkpoint is verified against the\n"
            "manifest; every row (weights, optimizer state, version, counters) goes to shard\n"
            "jump-hash(mix64(key), N). Writes DIR/checkpoints/<E>/ (N shard checkpoints and a\n"
            "MANIFEST with the same Kafka offsets, update offsets and example count) and\n"
            "DIR/checkpoints/LATEST = E. DIR must not exist or be empty; it appears whole (built\n"
            "in a temporary sibling directory, then renamed). Start the N shards with\n"
            "pserver.checkpoint.dir = DIR and pserver.restore = true (or let the coordinator\n"
            "restore E).\n"
            "Exit status: 0 done, 1 failed (nothing written), 2 usage.\n",
            SPW_COORD_MAX_SHARDS);
}

/* Splits "<root>/checkpoints/<E>" into root and E; or takes a root's LATEST. */
static int locate(const char *from, char *root, size_t root_size, uint64_t *epoch)
{
    char path[PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof(path), "%s/MANIFEST", from) < (int)sizeof(path) &&
        stat(path, &st) == 0) {
        char buf[PATH_MAX];
        snprintf(buf, sizeof(buf), "%s", from);
        size_t len = strlen(buf);
        while (len > 1 && buf[len - 1] == '/')
            buf[--len] = '\0';
        char *slash = strrchr(buf, '/');
        const char *name = slash ? slash + 1 : buf;
        char *end = NULL;
        errno = 0;
        unsigned long long e = strtoull(name, &end, 10);
        if (errno || end == name || *end || name[0] < '0' || name[0] > '9') {
            fprintf(stderr, "sparrow reshard: %s: the epoch directory's name is not a number\n",
                    from);
            return -1;
        }
        if (slash)
            *slash = '\0';
        else
            snprintf(buf, sizeof(buf), ".");
        /* buf is now <root>/checkpoints */
        slash = strrchr(buf, '/');
        const char *parent = slash ? slash + 1 : buf;
        if (strcmp(parent, "checkpoints") != 0) {
            fprintf(stderr, "sparrow reshard: %s is not under a checkpoints/ directory\n", from);
            return -1;
        }
        if (slash)
            *slash = '\0';
        else
            snprintf(buf, sizeof(buf), ".");
        snprintf(root, root_size, "%s", slash && buf[0] == '\0' ? "/" : buf);
        *epoch = e;
        return 0;
    }
    spw_err_t rc = spw_coord_latest_read(from, epoch);
    if (rc != SPW_OK) {
        fprintf(stderr,
                "sparrow reshard: %s: neither an epoch directory (no MANIFEST) nor a root with "
                "checkpoints/LATEST (%s)\n",
                from, rc == SPW_ERR_NOT_FOUND ? "not found" : spw_err_str(rc));
        return -1;
    }
    snprintf(root, root_size, "%s", from);
    return 0;
}

/* 0 when path does not exist or is an empty directory. */
static int check_target(const char *to)
{
    struct stat st;
    if (stat(to, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "sparrow reshard: --to %s exists and is not a directory\n", to);
        return -1;
    }
    DIR *d = opendir(to);
    if (!d) {
        fprintf(stderr, "sparrow reshard: --to %s: %s\n", to, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    if (n) {
        fprintf(stderr, "sparrow reshard: --to %s exists and is not empty\n", to);
        return -1;
    }
    return 0;
}

static void rmtree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
            continue;
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rmtree(sub);
        else
            unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

/* Makes the rename of path durable (best effort: the data itself was synced by its writers). */
static void fsync_parent(const char *path)
{
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof(parent), ".");
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

struct job {
    const char *root;
    uint64_t epoch;
    const struct spw_coord_manifest *src;
    uint32_t n;
    const char *tmp_root; /* the output being built */
    struct spw_ps_ckpt_meta meta;
    uint64_t rows_in;
    struct spw_coord_manifest out;
};

static int src_dir(const struct job *job, uint32_t i, char *dir, size_t size)
{
    return snprintf(dir, size, "%s/checkpoints/%" PRIu64 "/shard-%u", job->root, job->epoch, i) <
                   (int)size
               ? 0
               : -1;
}

/* Opens every source shard once: verifies them and agrees on dim and optimizer. */
static int check_sources(struct job *job)
{
    for (uint32_t i = 0; i < job->src->shard_count; i++) {
        char dir[PATH_MAX], err[512];
        spw_err_t rc;
        if (src_dir(job, i, dir, sizeof(dir)) != 0)
            return -1;
        spw_ps_ckpt_reader_t *r =
            spw_ps_ckpt_reader_open(dir, job->src->checksums[i], NULL, &rc, err, sizeof(err));
        if (!r) {
            fprintf(stderr, "sparrow reshard: shard %u: %s\n", i, err);
            return -1;
        }
        const struct spw_ps_ckpt_meta *m = spw_ps_ckpt_reader_meta(r);
        if (i == 0) {
            job->meta = *m;
        } else if (m->dim != job->meta.dim || m->optimizer != job->meta.optimizer) {
            fprintf(stderr,
                    "sparrow reshard: shard %u holds dim=%u optimizer=%s, shard 0 dim=%u "
                    "optimizer=%s\n",
                    i, m->dim, spw_ps_optimizer_name(m->optimizer), job->meta.dim,
                    spw_ps_optimizer_name(job->meta.optimizer));
            spw_ps_ckpt_reader_close(r);
            return -1;
        }
        spw_ps_ckpt_reader_close(r);
    }
    return 0;
}

/* Writes the new shards [first, first + count) in one pass over every source row. */
static int write_pass(struct job *job, uint32_t first, uint32_t count)
{
    spw_ps_ckpt_writer_t *w[WRITERS_PER_PASS] = {0};
    char err[512];
    int ret = -1;
    for (uint32_t j = 0; j < count; j++) {
        char dir[PATH_MAX];
        spw_err_t rc;
        if (snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64 "/shard-%u", job->tmp_root,
                     job->epoch, first + j) >= (int)sizeof(dir)) {
            fprintf(stderr, "sparrow reshard: path too long\n");
            goto out_close;
        }
        w[j] = spw_ps_ckpt_writer_open(dir, &job->meta, &rc, err, sizeof(err));
        if (!w[j]) {
            fprintf(stderr, "sparrow reshard: new shard %u: %s\n", first + j, err);
            goto out_close;
        }
    }
    uint64_t rows_in = 0;
    for (uint32_t i = 0; i < job->src->shard_count; i++) {
        char dir[PATH_MAX];
        spw_err_t rc;
        if (src_dir(job, i, dir, sizeof(dir)) != 0)
            goto out_close;
        /* Verified again: the files may have changed since check_sources. */
        spw_ps_ckpt_reader_t *r =
            spw_ps_ckpt_reader_open(dir, job->src->checksums[i], NULL, &rc, err, sizeof(err));
        if (!r) {
            fprintf(stderr, "sparrow reshard: shard %u: %s\n", i, err);
            goto out_close;
        }
        struct spw_ps_ckpt_row row;
        while ((rc = spw_ps_ckpt_reader_next(r, &row, err, sizeof(err))) == SPW_OK) {
            rows_in++;
            if (spw_hash_shard(row.key, job->src->shard_count) != i) {
                fprintf(stderr,
                        "sparrow reshard: shard %u holds key %" PRIu64
                        " of shard %u: not a checkpoint of %u shards\n",
                        i, row.key, spw_hash_shard(row.key, job->src->shard_count),
                        job->src->shard_count);
                rc = SPW_ERR_CORRUPT;
                break;
            }
            uint32_t to = spw_hash_shard(row.key, job->n);
            if (to < first || to >= first + count)
                continue;
            if ((rc = spw_ps_ckpt_writer_add(w[to - first], &row, err, sizeof(err))) != SPW_OK) {
                fprintf(stderr, "sparrow reshard: new shard %u: %s\n", to, err);
                break;
            }
        }
        spw_ps_ckpt_reader_close(r);
        if (rc == SPW_ERR_EOF)
            continue;
        if (rc == SPW_ERR_CORRUPT || rc == SPW_ERR_STORE)
            fprintf(stderr, "sparrow reshard: shard %u: %s\n", i, err);
        goto out_close;
    }
    for (uint32_t j = 0; j < count; j++) {
        struct spw_ps_checkpoint_info info;
        if (spw_ps_ckpt_writer_finish(w[j], &info, err, sizeof(err)) != SPW_OK) {
            fprintf(stderr, "sparrow reshard: new shard %u: %s\n", first + j, err);
            goto out_close;
        }
        job->out.rows[first + j] = info.rows;
        memcpy(job->out.checksums[first + j], info.checksum, 17);
        SPW_INFO("shard written", "shard=%u rows=%" PRIu64 " bytes=%" PRIu64 " checksum=%s",
                 first + j, info.rows, info.bytes, info.checksum);
    }
    job->rows_in = rows_in;
    ret = 0;
out_close:
    for (uint32_t j = 0; j < count; j++)
        spw_ps_ckpt_writer_close(w[j]);
    return ret;
}

static int reshard(const char *from, uint32_t n, const char *to)
{
    char root[PATH_MAX], err[512];
    struct job job = {.n = n};
    if (locate(from, root, sizeof(root), &job.epoch) != 0)
        return 1;
    if (check_target(to) != 0)
        return 1;
    struct spw_coord_manifest src;
    if (spw_coord_manifest_read(root, job.epoch, &src, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "sparrow reshard: %s\n", err);
        return 1;
    }
    if (src.shard_count == 0) {
        fprintf(stderr, "sparrow reshard: the manifest of epoch %" PRIu64 " lists no shards\n",
                job.epoch);
        spw_coord_manifest_fini(&src);
        return 1;
    }
    int ret = 1;
    char tmp_root[PATH_MAX], path[PATH_MAX];
    job.root = root;
    job.src = &src;
    job.tmp_root = tmp_root;
    char to_clean[PATH_MAX];
    snprintf(to_clean, sizeof(to_clean), "%s", to);
    size_t len = strlen(to_clean);
    while (len > 1 && to_clean[len - 1] == '/')
        to_clean[--len] = '\0';
    if (snprintf(tmp_root, sizeof(tmp_root), "%s.reshard-%ld.tmp", to_clean, (long)getpid()) >=
        (int)sizeof(tmp_root)) {
        fprintf(stderr, "sparrow reshard: path too long\n");
        goto out_fini;
    }
    if (check_sources(&job) != 0)
        goto out_fini;
    /* The new manifest: the source's, with the new shards' checksums and row counts. */
    job.out = src;
    job.out.shard_count = n;
    job.out.checksums = calloc(n, sizeof(*job.out.checksums));
    job.out.rows = calloc(n, sizeof(*job.out.rows));
    if (!job.out.checksums || !job.out.rows) {
        fprintf(stderr, "sparrow reshard: out of memory\n");
        goto out_free_out;
    }
    rmtree(tmp_root);
    if (snprintf(path, sizeof(path), "%s/checkpoints/%" PRIu64, tmp_root, job.epoch) >=
            (int)sizeof(path) ||
        mkdir(tmp_root, 0755) != 0 ||
        snprintf(path, sizeof(path), "%s/checkpoints", tmp_root) >= (int)sizeof(path) ||
        mkdir(path, 0755) != 0 ||
        snprintf(path, sizeof(path), "%s/checkpoints/%" PRIu64, tmp_root, job.epoch) >=
            (int)sizeof(path) ||
        mkdir(path, 0755) != 0) {
        fprintf(stderr, "sparrow reshard: creating %s: %s\n", tmp_root, strerror(errno));
        goto out_rm;
    }
    SPW_INFO("resharding", "from=%s epoch=%" PRIu64 " shards=%u to=%s new_shards=%u", root,
             job.epoch, src.shard_count, to, n);
    uint64_t rows_in = 0;
    for (uint32_t first = 0; first < n; first += WRITERS_PER_PASS) {
        uint32_t count = n - first < WRITERS_PER_PASS ? n - first : WRITERS_PER_PASS;
        if (write_pass(&job, first, count) != 0)
            goto out_rm;
        if (first > 0 && job.rows_in != rows_in) {
            fprintf(stderr, "sparrow reshard: the source changed during the run\n");
            goto out_rm;
        }
        rows_in = job.rows_in;
    }
    uint64_t rows_out = 0;
    for (uint32_t j = 0; j < n; j++)
        rows_out += job.out.rows[j];
    if (rows_out != rows_in) {
        fprintf(stderr,
                "sparrow reshard: %" PRIu64 " rows read but %" PRIu64
                " written (a key in two shards?)\n",
                rows_in, rows_out);
        goto out_rm;
    }
    if (spw_coord_manifest_write(tmp_root, &job.out, err, sizeof(err)) != SPW_OK ||
        spw_coord_latest_write(tmp_root, job.epoch, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "sparrow reshard: %s\n", err);
        goto out_rm;
    }
    /* rename(2) replaces an empty directory; check_target refused anything else. */
    if (rename(tmp_root, to_clean) != 0) {
        fprintf(stderr, "sparrow reshard: rename %s to %s: %s\n", tmp_root, to_clean,
                strerror(errno));
        goto out_rm;
    }
    fsync_parent(to_clean);
    printf("resharded epoch %" PRIu64 ": %u shards -> %u shards, %" PRIu64 " rows, into %s\n",
           job.epoch, src.shard_count, n, rows_out, to_clean);
    for (uint32_t j = 0; j < n; j++)
        printf("  shard-%u rows=%" PRIu64 " checksum=%s\n", j, job.out.rows[j],
               job.out.checksums[j]);
    ret = 0;
    goto out_free_out;
out_rm:
    rmtree(tmp_root);
out_free_out:
    free(job.out.checksums);
    free(job.out.rows);
out_fini:
    spw_coord_manifest_fini(&src);
    return ret;
}

int spw_reshard_main(int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *shards = NULL, *level = "info";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "sparrow reshard: unknown or incomplete argument '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (strcmp(a, "--from") == 0)
            from = argv[++i];
        else if (strcmp(a, "--to") == 0)
            to = argv[++i];
        else if (strcmp(a, "--shards") == 0)
            shards = argv[++i];
        else if (strcmp(a, "--log-level") == 0)
            level = argv[++i];
        else {
            fprintf(stderr, "sparrow reshard: unknown argument '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!from || !to || !shards || !from[0] || !to[0]) {
        fprintf(stderr, "sparrow reshard: --from, --shards and --to are required\n\n");
        usage(stderr);
        return 2;
    }
    int64_t n = 0;
    if (spw_parse_int64(shards, &n) != SPW_OK || n < 1 || n > SPW_COORD_MAX_SHARDS) {
        fprintf(stderr, "sparrow reshard: --shards '%s' is not an integer in 1..%u\n", shards,
                SPW_COORD_MAX_SHARDS);
        return 2;
    }
    enum spw_log_level lv;
    if (spw_log_level_parse(level, &lv) != SPW_OK) {
        fprintf(stderr, "sparrow reshard: --log-level '%s' is not a level\n", level);
        return 2;
    }
    spw_log_init("reshard", lv);
    return reshard(from, (uint32_t)n, to);
}
