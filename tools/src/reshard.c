/* `sparrow reshard` (sparrow/reshard.h): rewrites a checkpoint epoch (MANIFEST + one checkpoint
 * per shard) for another shard count, every row moved to the shard spw_hash_shard gives it,
 * through the pserver's checkpoint reader and writer (sparrow/ps_ckpt.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/fs.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/pserver.h"
#include "sparrow/reshard.h"
#include "sparrow/signal.h"

_Static_assert(SPW_RESHARD_MAX_SHARDS == SPW_COORD_MAX_SHARDS, "one shard limit");

/* Most shard checkpoints written in one pass over the source rows (each an open RocksDB). */
#define WRITERS_PER_PASS 32u
/* Source rows between two looks at the stop flag. */
#define STOP_CHECK_ROWS 65536u

/* Splits "<root>/checkpoints/<E>" into root and E; or takes a root's LATEST. */
static spw_err_t locate(const char *from, char *root, size_t root_size, uint64_t *epoch,
                        char *errstr, size_t errstr_size)
{
    char path[PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof(path), "%s/" SPW_CKPT_MANIFEST, from) < (int)sizeof(path) &&
        stat(path, &st) == 0) {
        enum spw_ckpt_path_kind kind;
        if (spw_ckpt_path_split(from, &kind, root, root_size, epoch) != SPW_OK)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", from);
        if (kind != SPW_CKPT_PATH_EPOCH)
            return spw_errf(
                SPW_ERR_INVALID, errstr, errstr_size,
                "%s is not an epoch directory (<root>/" SPW_CKPT_DIR "/<E>, E a number)", from);
        return SPW_OK;
    }
    spw_err_t rc = spw_coord_latest_read(from, epoch);
    if (rc != SPW_OK)
        return spw_errf(rc, errstr, errstr_size,
                        "%s: neither an epoch directory (no " SPW_CKPT_MANIFEST
                        ") nor a root with " SPW_CKPT_DIR "/" SPW_CKPT_LATEST " (%s)",
                        from, rc == SPW_ERR_NOT_FOUND ? "not found" : spw_err_str(rc));
    snprintf(root, root_size, "%s", from);
    return SPW_OK;
}

/* SPW_OK when to does not exist or is an empty directory. */
static spw_err_t check_target(const char *to, char *errstr, size_t errstr_size)
{
    struct stat st;
    if (stat(to, &st) != 0)
        return errno == ENOENT
                   ? SPW_OK
                   : spw_errf(SPW_ERR_IO, errstr, errstr_size, "--to %s: %s", to, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return spw_errf(SPW_ERR_EXISTS, errstr, errstr_size,
                        "--to %s exists and is not a directory", to);
    DIR *d = opendir(to);
    if (!d)
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "--to %s: %s", to, strerror(errno));
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    if (n)
        return spw_errf(SPW_ERR_EXISTS, errstr, errstr_size, "--to %s exists and is not empty", to);
    return SPW_OK;
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
    char *errstr;
    size_t errstr_size;
};

/* Opens every source shard once: verifies them and agrees on dim and optimizer. */
static spw_err_t check_sources(struct job *job)
{
    for (uint32_t i = 0; i < job->src->shard_count; i++) {
        char dir[PATH_MAX], err[512];
        spw_err_t rc;
        if (spw_ckpt_shard_path(dir, sizeof(dir), job->root, job->epoch, i) != SPW_OK)
            return spw_errf(SPW_ERR_INVALID, job->errstr, job->errstr_size, "path too long");
        spw_ps_ckpt_reader_t *r =
            spw_ps_ckpt_reader_open(dir, job->src->checksums[i], NULL, &rc, err, sizeof(err));
        if (!r)
            return spw_errf(rc, job->errstr, job->errstr_size, "shard %u: %s", i, err);
        const struct spw_ps_ckpt_meta *m = spw_ps_ckpt_reader_meta(r);
        if (i == 0) {
            job->meta = *m;
        } else if (m->dim != job->meta.dim || m->optimizer != job->meta.optimizer) {
            spw_errf(SPW_ERR_CORRUPT, job->errstr, job->errstr_size,
                     "shard %u holds dim=%u optimizer=%s, shard 0 dim=%u optimizer=%s", i, m->dim,
                     spw_ps_optimizer_name(m->optimizer), job->meta.dim,
                     spw_ps_optimizer_name(job->meta.optimizer));
            spw_ps_ckpt_reader_close(r);
            return SPW_ERR_CORRUPT;
        }
        spw_ps_ckpt_reader_close(r);
    }
    return SPW_OK;
}

/* Writes the new shards [first, first + count) in one pass over every source row. */
static spw_err_t write_pass(struct job *job, uint32_t first, uint32_t count)
{
    spw_ps_ckpt_writer_t *w[WRITERS_PER_PASS] = {0};
    char err[512];
    spw_err_t ret = SPW_ERR_INVALID;
    for (uint32_t j = 0; j < count; j++) {
        char dir[PATH_MAX];
        if (spw_ckpt_shard_path(dir, sizeof(dir), job->tmp_root, job->epoch, first + j) != SPW_OK) {
            spw_errf(SPW_ERR_INVALID, job->errstr, job->errstr_size, "path too long");
            goto out_close;
        }
        w[j] = spw_ps_ckpt_writer_open(dir, &job->meta, &ret, err, sizeof(err));
        if (!w[j]) {
            spw_errf(ret, job->errstr, job->errstr_size, "new shard %u: %s", first + j, err);
            goto out_close;
        }
    }
    uint64_t rows_in = 0;
    for (uint32_t i = 0; i < job->src->shard_count; i++) {
        char dir[PATH_MAX];
        spw_err_t rc;
        if (spw_ckpt_shard_path(dir, sizeof(dir), job->root, job->epoch, i) != SPW_OK) {
            ret = spw_errf(SPW_ERR_INVALID, job->errstr, job->errstr_size, "path too long");
            goto out_close;
        }
        /* Verified again: the files may have changed since check_sources. */
        spw_ps_ckpt_reader_t *r =
            spw_ps_ckpt_reader_open(dir, job->src->checksums[i], NULL, &rc, err, sizeof(err));
        if (!r) {
            ret = spw_errf(rc, job->errstr, job->errstr_size, "shard %u: %s", i, err);
            goto out_close;
        }
        struct spw_ps_ckpt_row row;
        while ((rc = spw_ps_ckpt_reader_next(r, &row, err, sizeof(err))) == SPW_OK) {
            if (++rows_in % STOP_CHECK_ROWS == 0 && spw_signal_stop_requested()) {
                rc =
                    spw_errf(SPW_ERR_STOPPED, job->errstr, job->errstr_size, "stopped by a signal");
                break;
            }
            if (spw_hash_shard(row.key, job->src->shard_count) != i) {
                rc = spw_errf(SPW_ERR_CORRUPT, job->errstr, job->errstr_size,
                              "shard %u holds key %" PRIu64 " of shard %u: not a checkpoint of %u "
                              "shards",
                              i, row.key, spw_hash_shard(row.key, job->src->shard_count),
                              job->src->shard_count);
                break;
            }
            uint32_t to = spw_hash_shard(row.key, job->n);
            if (to < first || to >= first + count)
                continue;
            if ((rc = spw_ps_ckpt_writer_add(w[to - first], &row, err, sizeof(err))) != SPW_OK) {
                spw_errf(rc, job->errstr, job->errstr_size, "new shard %u: %s", to, err);
                break;
            }
        }
        spw_ps_ckpt_reader_close(r);
        if (rc == SPW_ERR_EOF)
            continue;
        if (!job->errstr[0]) /* the reader's own error */
            spw_errf(rc, job->errstr, job->errstr_size, "shard %u: %s", i, err);
        ret = rc;
        goto out_close;
    }
    for (uint32_t j = 0; j < count; j++) {
        struct spw_ps_checkpoint_info info;
        if ((ret = spw_ps_ckpt_writer_finish(w[j], &info, err, sizeof(err))) != SPW_OK) {
            spw_errf(ret, job->errstr, job->errstr_size, "new shard %u: %s", first + j, err);
            goto out_close;
        }
        job->out.rows[first + j] = info.rows;
        memcpy(job->out.checksums[first + j], info.checksum, 17);
        SPW_INFO("shard written", "shard=%u rows=%" PRIu64 " bytes=%" PRIu64 " checksum=%s",
                 first + j, info.rows, info.bytes, info.checksum);
    }
    job->rows_in = rows_in;
    ret = SPW_OK;
out_close:
    for (uint32_t j = 0; j < count; j++)
        spw_ps_ckpt_writer_close(w[j]);
    return ret;
}

/* Creates <tmp_root>/checkpoints/<epoch>, tmp_root itself new. */
static spw_err_t make_tmp_tree(const char *tmp_root, uint64_t epoch)
{
    char path[PATH_MAX];
    if (spw_ckpt_epoch_path(path, sizeof(path), tmp_root, epoch) != SPW_OK)
        return SPW_ERR_INVALID;
    if (mkdir(tmp_root, 0755) != 0)
        return SPW_ERR_IO;
    return spw_fs_mkdir_p(path);
}

spw_err_t spw_reshard_run(const struct spw_reshard_conf *conf, FILE *report, char *errstr,
                          size_t errstr_size)
{
    char root[PATH_MAX], err[512];
    uint32_t n = conf->shards;
    struct job job = {.n = n, .errstr = errstr, .errstr_size = errstr_size};
    errstr[0] = '\0';
    spw_err_t rc = locate(conf->from, root, sizeof(root), &job.epoch, errstr, errstr_size);
    if (rc != SPW_OK)
        return rc;
    if ((rc = check_target(conf->to, errstr, errstr_size)) != SPW_OK)
        return rc;
    struct spw_coord_manifest src;
    if ((rc = spw_coord_manifest_read(root, job.epoch, &src, err, sizeof(err))) != SPW_OK)
        return spw_errf(rc, errstr, errstr_size, "%s", err);
    if (src.shard_count == 0) {
        spw_coord_manifest_fini(&src);
        return spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                        "the manifest of epoch %" PRIu64 " lists no shards", job.epoch);
    }
    char tmp_root[PATH_MAX];
    job.root = root;
    job.src = &src;
    job.tmp_root = tmp_root;
    char to_clean[PATH_MAX];
    snprintf(to_clean, sizeof(to_clean), "%s", conf->to);
    size_t len = strlen(to_clean);
    while (len > 1 && to_clean[len - 1] == '/')
        to_clean[--len] = '\0';
    if (snprintf(tmp_root, sizeof(tmp_root), "%s.reshard-%ld.tmp", to_clean, (long)getpid()) >=
        (int)sizeof(tmp_root)) {
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "path too long");
        goto out_fini;
    }
    if ((rc = check_sources(&job)) != SPW_OK)
        goto out_fini;
    /* The new manifest: the source's, with the new shards' checksums and row counts. */
    job.out = src;
    job.out.shard_count = n;
    job.out.checksums = calloc(n, sizeof(*job.out.checksums));
    job.out.rows = calloc(n, sizeof(*job.out.rows));
    if (!job.out.checksums || !job.out.rows) {
        rc = spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
        goto out_free_out;
    }
    spw_fs_remove_tree(tmp_root);
    if ((rc = make_tmp_tree(tmp_root, job.epoch)) != SPW_OK) {
        spw_errf(rc, errstr, errstr_size, "creating %s: %s", tmp_root, strerror(errno));
        goto out_rm;
    }
    SPW_INFO("resharding", "from=%s epoch=%" PRIu64 " shards=%u to=%s new_shards=%u", root,
             job.epoch, src.shard_count, conf->to, n);
    uint64_t rows_in = 0;
    for (uint32_t first = 0; first < n; first += WRITERS_PER_PASS) {
        uint32_t count = n - first < WRITERS_PER_PASS ? n - first : WRITERS_PER_PASS;
        if ((rc = write_pass(&job, first, count)) != SPW_OK)
            goto out_rm;
        if (first > 0 && job.rows_in != rows_in) {
            rc =
                spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size, "the source changed during the run");
            goto out_rm;
        }
        rows_in = job.rows_in;
    }
    uint64_t rows_out = 0;
    for (uint32_t j = 0; j < n; j++)
        rows_out += job.out.rows[j];
    if (rows_out != rows_in) {
        rc = spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                      "%" PRIu64 " rows read but %" PRIu64 " written (a key in two shards?)",
                      rows_in, rows_out);
        goto out_rm;
    }
    if ((rc = spw_coord_manifest_write(tmp_root, &job.out, err, sizeof(err))) != SPW_OK ||
        (rc = spw_coord_latest_write(tmp_root, job.epoch, err, sizeof(err))) != SPW_OK) {
        spw_errf(rc, errstr, errstr_size, "%s", err);
        goto out_rm;
    }
    /* rename(2) replaces an empty directory; check_target refused anything else. */
    if (rename(tmp_root, to_clean) != 0) {
        rc = spw_errf(SPW_ERR_IO, errstr, errstr_size, "rename %s to %s: %s", tmp_root, to_clean,
                      strerror(errno));
        goto out_rm;
    }
    fsync_parent(to_clean);
    if (report) {
        fprintf(report,
                "resharded epoch %" PRIu64 ": %u shards -> %u shards, %" PRIu64 " rows, into %s\n",
                job.epoch, src.shard_count, n, rows_out, to_clean);
        for (uint32_t j = 0; j < n; j++)
            fprintf(report, "  shard-%u rows=%" PRIu64 " checksum=%s\n", j, job.out.rows[j],
                    job.out.checksums[j]);
    }
    rc = SPW_OK;
    goto out_free_out;
out_rm:
    spw_fs_remove_tree(tmp_root);
out_free_out:
    free(job.out.checksums);
    free(job.out.rows);
out_fini:
    spw_coord_manifest_fini(&src);
    return rc;
}
