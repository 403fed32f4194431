/* Checkpoint files: the CHECKSUM of a checkpoint directory, verification, and restore of the newest
 * valid checkpoint into a shard's RocksDB directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <rocksdb/c.h>
#include <xxhash.h>

#include "ps_int.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/fs.h"
#include "sparrow/log.h"

/*
 * CHECKSUM file (text, one line). Written in format 2:   "xxh3-64-files <16 hex digits>\n"
 *   XXH3-64 over, for every regular file of the directory except CHECKSUM, in byte order of
 *   name: name, NUL, size as 8 little-endian bytes, XXH3-64 of the contents as 8 little-endian
 *   bytes. Per-file digests let a checkpoint reuse those of the SST files it shares (hard links)
 *   with earlier ones, so that its cost follows the new data rather than the whole tier.
 * Format 1 is still verified:                            "xxh3-64 <16 hex digits>\n"
 *   one XXH3-64 stream over name, NUL, size as 8 little-endian bytes, contents.
 */
#define CHECKSUM_V1 "xxh3-64 "
#define CHECKSUM_V2 "xxh3-64-files "
#define MAX_FILES   4096
#define READ_CHUNK  (4u << 20)

bool spw_ps__path(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < size;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted names of regular files in dir (CHECKSUM excluded); caller frees names and array. */
static spw_err_t list_files(const char *dir, char ***names_out, size_t *n_out)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO;
    char **names = NULL;
    size_t n = 0;
    spw_err_t ret = SPW_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, SPW_CKPT_CHECKSUM) == 0)
            continue;
        if (n == MAX_FILES) {
            ret = SPW_ERR_TOO_BIG;
            break;
        }
        if (n % 64 == 0) {
            char **nn = realloc(names, (n + 64) * sizeof(char *));
            if (!nn) {
                ret = SPW_ERR_NOMEM;
                break;
            }
            names = nn;
        }
        names[n] = strdup(de->d_name);
        if (!names[n]) {
            ret = SPW_ERR_NOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (ret) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return ret;
    }
    if (n)
        qsort(names, n, sizeof(char *), cmp_str);
    *names_out = names;
    *n_out = n;
    return SPW_OK;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void le64(uint64_t v, uint8_t out[8])
{
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)(v >> (8 * b));
}

static bool is_sst(const char *name)
{
    size_t len = strlen(name);
    return len > 4 && strcmp(name + len - 4, ".sst") == 0;
}

static void file_id(const struct stat *sb, struct spw_ps__file_digest *d)
{
    d->dev = (uint64_t)sb->st_dev;
    d->ino = (uint64_t)sb->st_ino;
    d->size = (uint64_t)sb->st_size;
    d->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

static int cmp_file_id(const void *a, const void *b)
{
    const struct spw_ps__file_digest *x = a, *y = b;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    if (x->mtime_ns != y->mtime_ns)
        return x->mtime_ns < y->mtime_ns ? -1 : 1;
    return 0;
}

/* Feeds the size bytes of fd to st. SPW_ERR_CORRUPT when the file does not hold size bytes.
 * may_map: the file is the caller's own (just written), so it may be hashed through a mapping
 * (a file cut short under a mapping faults; files of unknown state are read() instead). */
static spw_err_t hash_fd(int fd, uint64_t size, XXH3_state_t *st, char *buf, bool may_map)
{
    /* Fresh SST files are often no longer cached (RocksDB's SstFileWriter drops the pages it
     * wrote): ask for the whole file up front so that the disk streams it. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    if (may_map && size >= READ_CHUNK && size <= SIZE_MAX) {
        /* Large files are hashed in place from the page cache: no copy into buf. */
        void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (map != MAP_FAILED) {
            (void)madvise(map, (size_t)size, MADV_SEQUENTIAL);
            XXH3_64bits_update(st, map, (size_t)size);
            munmap(map, (size_t)size);
            return SPW_OK;
        }
    }
    uint64_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf, READ_CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return SPW_ERR_IO;
        if (r == 0)
            break;
        XXH3_64bits_update(st, buf, (size_t)r);
        got += (uint64_t)r;
    }
    return got == size ? SPW_OK : SPW_ERR_CORRUPT;
}

spw_err_t spw_ps__file_identity(int fd, struct spw_ps__file_digest *out)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return SPW_ERR_IO;
    file_id(&sb, out);
    return SPW_OK;
}

spw_err_t spw_ps__digest_cache_add(struct spw_ps__digest_cache *cache,
                                   const struct spw_ps__file_digest *d)
{
    if (cache->n == cache->cap) {
        size_t cap = cache->cap ? cache->cap * 2 : 64;
        struct spw_ps__file_digest *e = realloc(cache->e, cap * sizeof(*e));
        if (!e)
            return SPW_ERR_NOMEM;
        cache->e = e;
        cache->cap = cap;
    }
    cache->e[cache->n++] = *d;
    return SPW_OK;
}

void spw_ps__digest_cache_fini(struct spw_ps__digest_cache *cache)
{
    free(cache->e);
    memset(cache, 0, sizeof(*cache));
}

/* Digest of dir in format 1 or 2 (see the top of the file). In format 2, SST files found in
 * cache (may be NULL) are not read, and seen (may be NULL) receives every SST's digest. own: dir
 * is a checkpoint being written by this process (see hash_fd's may_map). */
static spw_err_t digest_dir(const char *dir, int format, bool own,
                            struct spw_ps__digest_cache *cache, struct spw_ps__digest_cache *seen,
                            uint64_t *digest, uint64_t *bytes)
{
    char **names;
    size_t n;
    spw_err_t ret = list_files(dir, &names, &n);
    if (ret)
        return ret;
    XXH3_state_t *st = XXH3_createState();
    XXH3_state_t *file_st = XXH3_createState();
    char *buf = malloc(READ_CHUNK);
    if (!st || !file_st || !buf) {
        ret = SPW_ERR_NOMEM;
        goto out_free;
    }
    if (cache && cache->n > 1)
        qsort(cache->e, cache->n, sizeof(*cache->e), cmp_file_id);
    XXH3_64bits_reset(st);
    uint64_t total = 0;
    for (size_t i = 0; i < n && ret == SPW_OK; i++) {
        char path[4096];
        if (!spw_ps__path(path, sizeof(path), "%s/%s", dir, names[i])) {
            ret = SPW_ERR_INVALID;
            break;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            if (fd >= 0)
                close(fd);
            ret = SPW_ERR_IO;
            break;
        }
        uint8_t le[8];
        uint64_t size = (uint64_t)sb.st_size;
        le64(size, le);
        XXH3_64bits_update(st, names[i], strlen(names[i]) + 1);
        XXH3_64bits_update(st, le, 8);
        if (format == 1) {
            ret = hash_fd(fd, size, st, buf, own);
        } else {
            struct spw_ps__file_digest d;
            file_id(&sb, &d);
            bool sst = is_sst(names[i]);
            const struct spw_ps__file_digest *hit =
                sst && cache && cache->n ? bsearch(&d, cache->e, cache->n, sizeof(d), cmp_file_id)
                                         : NULL;
            if (hit) {
                d.digest = hit->digest;
            } else {
                XXH3_64bits_reset(file_st);
                ret = hash_fd(fd, size, file_st, buf, own);
                d.digest = XXH3_64bits_digest(file_st);
            }
            le64(d.digest, le);
            XXH3_64bits_update(st, le, 8);
            if (ret == SPW_OK && sst && seen)
                ret = spw_ps__digest_cache_add(seen, &d);
        }
        close(fd);
        total += size;
    }
    *digest = XXH3_64bits_digest(st);
    if (bytes)
        *bytes = total;
out_free:
    free(buf);
    if (st)
        XXH3_freeState(st);
    if (file_st)
        XXH3_freeState(file_st);
    free_names(names, n);
    return ret;
}

static spw_err_t fsync_path(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0)
        return SPW_ERR_IO;
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? SPW_OK : SPW_ERR_IO;
}

spw_err_t spw_ps__checksum_dir(const char *dir, struct spw_ps__digest_cache *cache, char hex[17],
                               uint64_t *bytes)
{
    uint64_t digest;
    struct spw_ps__digest_cache seen = {0};
    spw_err_t ret = digest_dir(dir, 2, true, cache, cache ? &seen : NULL, &digest, bytes);
    if (ret) {
        spw_ps__digest_cache_fini(&seen);
        return ret;
    }
    if (cache) { /* keep the digests of this checkpoint's SSTs, forget the rest */
        spw_ps__digest_cache_fini(cache);
        *cache = seen;
    }
    snprintf(hex, 17, "%016" PRIx64, digest);
    char path[4096];
    if (!spw_ps__path(path, sizeof(path), "%s/%s", dir, SPW_CKPT_CHECKSUM))
        return SPW_ERR_INVALID;
    FILE *f = fopen(path, "we");
    if (!f)
        return SPW_ERR_IO;
    int ok = fprintf(f, CHECKSUM_V2 "%s\n", hex) > 0;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok)
        return SPW_ERR_IO;
    return fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

spw_err_t spw_ps__checkpoint_db(rocksdb_t *db, const char *tmp, const char *final,
                                const struct spw_ps_sketch *sketch,
                                const struct spw_ps__dedup *dedup,
                                struct spw_ps__digest_cache *cache, char hex[17], uint64_t *bytes,
                                char *errstr, size_t errstr_size)
{
    spw_fs_remove_tree(tmp);
    char *rerr = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(db, &rerr);
    if (!rerr)
        rocksdb_checkpoint_create(cp, tmp, 0, &rerr);
    if (cp)
        rocksdb_checkpoint_object_destroy(cp);
    if (rerr) {
        snprintf(errstr, errstr_size, "rocksdb checkpoint %s: %s", tmp, rerr);
        rocksdb_free(rerr);
        spw_fs_remove_tree(tmp);
        char rtmp[4200]; /* RocksDB stages the checkpoint in "<dir>.tmp" */
        if (spw_ps__path(rtmp, sizeof(rtmp), "%s.tmp", tmp))
            spw_fs_remove_tree(rtmp);
        return SPW_ERR_IO;
    }
    spw_err_t err = spw_ps__state_write(tmp, sketch, dedup, errstr, errstr_size);
    if (err) {
        spw_fs_remove_tree(tmp);
        return err;
    }
    err = spw_ps__checksum_dir(tmp, cache, hex, bytes);
    if (err) {
        snprintf(errstr, errstr_size, "writing checksum in %s: %s", tmp, strerror(errno));
        spw_fs_remove_tree(tmp);
        return err;
    }
    if (rename(tmp, final) != 0) {
        snprintf(errstr, errstr_size, "rename %s: %s", tmp, strerror(errno));
        spw_fs_remove_tree(tmp);
        return SPW_ERR_IO;
    }
    return SPW_OK;
}

spw_err_t spw_ps_checkpoint_verify(const char *dir, char hex[17])
{
    char path[4096];
    if (!spw_ps__path(path, sizeof(path), "%s/%s", dir, SPW_CKPT_CHECKSUM))
        return SPW_ERR_INVALID;
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO;
    char line[64] = {0};
    char *got = fgets(line, sizeof(line), f);
    fclose(f);
    if (!got)
        return SPW_ERR_CORRUPT;
    int format;
    size_t tag;
    if (strncmp(line, CHECKSUM_V2, strlen(CHECKSUM_V2)) == 0) {
        format = 2;
        tag = strlen(CHECKSUM_V2);
    } else if (strncmp(line, CHECKSUM_V1, strlen(CHECKSUM_V1)) == 0) {
        format = 1;
        tag = strlen(CHECKSUM_V1);
    } else {
        return SPW_ERR_CORRUPT;
    }
    if (strlen(line) != tag + 16 + 1 || line[tag + 16] != '\n')
        return SPW_ERR_CORRUPT;
    char want[17];
    memcpy(want, line + tag, 16);
    want[16] = '\0';
    uint64_t digest;
    spw_err_t ret = digest_dir(dir, format, false, NULL, NULL, &digest, NULL);
    if (ret)
        return ret;
    char have[17];
    snprintf(have, sizeof(have), "%016" PRIx64, digest);
    if (strcmp(have, want) != 0)
        return SPW_ERR_CORRUPT;
    /* The state files passed the digest; their own framing is checked too (a CHECKSUM rewritten
     * over a bad file, or a writer's bug, must not reach a loader). */
    char why[SPW_CKPT_PATH_MAX + 128];
    if ((ret = spw_ps__state_check(dir, why, sizeof(why))) != SPW_OK) {
        SPW_WARN("checkpoint state file refused", "reason=\"%s\"", why);
        return ret == SPW_ERR_IO ? SPW_ERR_IO : SPW_ERR_CORRUPT;
    }
    if (hex)
        memcpy(hex, have, 17);
    return SPW_OK;
}

static spw_err_t copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return SPW_ERR_IO;
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return SPW_ERR_IO;
    }
    spw_err_t ret = SPW_OK;
    char buf[1 << 16];
    for (;;) {
        ssize_t r = read(in, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r < 0)
                ret = SPW_ERR_IO;
            break;
        }
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                ret = SPW_ERR_IO;
                break;
            }
            off += w;
        }
        if (ret)
            break;
    }
    if (ret == SPW_OK && fsync(out) != 0)
        ret = SPW_ERR_IO;
    close(in);
    if (close(out) != 0)
        ret = SPW_ERR_IO;
    return ret;
}

/* Replaces db_path by the files of checkpoint dir: SST files (immutable) hard-linked when on the
 * same filesystem, everything else copied, so that the live database never writes into a
 * checkpoint's files. */
static spw_err_t install(const char *dir, const char *db_path)
{
    char **names;
    size_t n;
    spw_err_t ret = list_files(dir, &names, &n);
    if (ret)
        return ret;
    spw_fs_remove_tree(db_path);
    if (mkdir(db_path, 0755) != 0) {
        free_names(names, n);
        return SPW_ERR_IO;
    }
    for (size_t i = 0; i < n && ret == SPW_OK; i++) {
        char src[4096], dst[4096];
        if (!spw_ps__path(src, sizeof(src), "%s/%s", dir, names[i]) ||
            !spw_ps__path(dst, sizeof(dst), "%s/%s", db_path, names[i])) {
            ret = SPW_ERR_INVALID;
            break;
        }
        /* The state files are read from the checkpoint itself (spw_ps__sketch_load and
         * spw_ps__dedup_load): a copy in the live database would go stale at its first push. */
        if (strcmp(names[i], SPW_CKPT_SKETCH) == 0 || strcmp(names[i], SPW_CKPT_DEDUP) == 0)
            continue;
        size_t len = strlen(names[i]);
        bool sst = len > 4 && strcmp(names[i] + len - 4, ".sst") == 0;
        if (sst && link(src, dst) == 0)
            continue;
        ret = copy_file(src, dst);
    }
    free_names(names, n);
    if (ret == SPW_OK)
        ret = fsync_path(db_path, O_RDONLY | O_DIRECTORY);
    return ret;
}

spw_err_t spw_ps_checkpoint_restore(const char *root, uint32_t shard, const char *db_path,
                                    uint64_t *epoch, char *errstr, size_t errstr_size)
{
    char base[4096];
    struct stat st;
    if (spw_ckpt_dir_path(base, sizeof(base), root) != SPW_OK || stat(base, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
        snprintf(errstr, errstr_size, "no checkpoints under %s", base);
        return SPW_ERR_NOT_FOUND;
    }
    long listed = spw_ckpt_epochs_list(root, NULL, 0);
    uint64_t *epochs = listed > 0 ? malloc((size_t)listed * sizeof(uint64_t)) : NULL;
    if (listed < 0 || (listed > 0 && !epochs)) {
        free(epochs);
        snprintf(errstr, errstr_size, "listing %s: %s", base,
                 spw_err_str(listed < 0 ? (spw_err_t)listed : SPW_ERR_NOMEM));
        return listed < 0 ? (spw_err_t)listed : SPW_ERR_NOMEM;
    }
    size_t n = 0;
    if (listed > 0) {
        long again = spw_ckpt_epochs_list(root, epochs, (size_t)listed);
        n = again < 0 ? 0 : (size_t)(again < listed ? again : listed);
    }
    spw_err_t ret = SPW_ERR_NOT_FOUND;
    snprintf(errstr, errstr_size, "no valid checkpoint of shard %u under %s", shard, base);
    for (size_t i = 0; i < n; i++) {
        char dir[4096];
        if (spw_ckpt_shard_path(dir, sizeof(dir), root, epochs[i], shard) != SPW_OK ||
            stat(dir, &st) != 0)
            continue;
        spw_err_t v = spw_ps_checkpoint_verify(dir, NULL);
        if (v != SPW_OK) {
            SPW_WARN("skipping checkpoint", "path=%s reason=\"%s\"", dir, spw_err_str(v));
            continue;
        }
        ret = install(dir, db_path);
        if (ret != SPW_OK) {
            snprintf(errstr, errstr_size, "installing %s into %s: %s", dir, db_path,
                     strerror(errno));
            break;
        }
        *epoch = epochs[i];
        SPW_INFO("restored checkpoint", "path=%s epoch=%" PRIu64, dir, epochs[i]);
        break;
    }
    free(epochs);
    return ret;
}

spw_err_t spw_ps_checkpoint_restore_epoch(const char *root, uint32_t shard, uint64_t epoch,
                                          const char *db_path, char *errstr, size_t errstr_size)
{
    char dir[4096];
    struct stat st;
    if (spw_ckpt_shard_path(dir, sizeof(dir), root, epoch, shard) != SPW_OK ||
        stat(dir, &st) != 0) {
        snprintf(errstr, errstr_size, "no checkpoint of shard %u at epoch %" PRIu64 " under %s",
                 shard, epoch, root);
        return SPW_ERR_NOT_FOUND;
    }
    spw_err_t ret = spw_ps_checkpoint_verify(dir, NULL);
    if (ret != SPW_OK) {
        snprintf(errstr, errstr_size, "checkpoint %s does not verify: %s", dir, spw_err_str(ret));
        return ret == SPW_ERR_NOT_FOUND ? SPW_ERR_CORRUPT : ret;
    }
    ret = install(dir, db_path);
    if (ret != SPW_OK)
        snprintf(errstr, errstr_size, "installing %s into %s: %s", dir, db_path, strerror(errno));
    else
        SPW_INFO("restored checkpoint", "path=%s epoch=%" PRIu64, dir, epoch);
    return ret;
}
