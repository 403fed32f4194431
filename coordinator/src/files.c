/* Checkpoint files of the coordinator: MANIFEST (written atomically, checksummed), LATEST,
 * pruning of epochs, and the choice of the recovery epoch. Where they live is
 * sparrow/ckpt_layout.h's. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "sparrow/arena.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/log.h"
#include "sparrow/time.h"
#include "sparrow/wire.h"
#include "coord_int.h"

/*
 * MANIFEST layout (little-endian):
 *   offset  size  field
 *   0       8     magic "SPWMANI1"
 *   8       4     n = length of the protobuf
 *   12      n     sparrow.CheckpointManifest
 *   12+n    8     XXH3-64 of bytes [0, 12+n)
 * LATEST: the epoch in decimal and a newline.
 */
#define MANIFEST_MAGIC  "SPWMANI1"
#define MANIFEST_FORMAT 1

static bool mkpath(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool mkpath(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < size;
}

void spw_coord_manifest_fini(struct spw_coord_manifest *m)
{
    free(m->checksums);
    free(m->rows);
    free(m->offsets);
    free(m->update_offsets);
    memset(m, 0, sizeof(*m));
}

static spw_err_t fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return SPW_ERR_IO;
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? SPW_OK : SPW_ERR_IO;
}

/* Writes data to dir/name through dir/name.tmp, fsync, rename, fsync(dir). */
static spw_err_t write_atomic(const char *dir, const char *name, const void *data, size_t len,
                              char *errstr, size_t errstr_size)
{
    char tmp[PATH_MAX], dst[PATH_MAX];
    if (!mkpath(tmp, sizeof(tmp), "%s/%s.tmp", dir, name) ||
        !mkpath(dst, sizeof(dst), "%s/%s", dir, name)) {
        snprintf(errstr, errstr_size, "path too long under %s", dir);
        return SPW_ERR_INVALID;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        goto err;
    const uint8_t *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto err_close;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0)
        goto err_close;
    if (close(fd) != 0) {
        fd = -1;
        goto err_unlink;
    }
    fd = -1;
    if (rename(tmp, dst) != 0)
        goto err_unlink;
    if (fsync_dir(dir) != SPW_OK)
        goto err;
    return SPW_OK;
err_close:
    close(fd);
err_unlink:
    unlink(tmp);
err:
    snprintf(errstr, errstr_size, "cannot write %s: %s", dst, strerror(errno));
    return SPW_ERR_IO;
}

spw_err_t spw_coord_manifest_write(const char *root, const struct spw_coord_manifest *m,
                                   char *errstr, size_t errstr_size)
{
    spw_err_t rc = SPW_ERR_NOMEM;
    Sparrow__CheckpointManifest pb = SPARROW__CHECKPOINT_MANIFEST__INIT;
    Sparrow__ShardCheckpoint *shards = calloc(m->shard_count ? m->shard_count : 1, sizeof(*shards));
    Sparrow__ShardCheckpoint **shard_ptrs =
        calloc(m->shard_count ? m->shard_count : 1, sizeof(*shard_ptrs));
    Sparrow__PartitionOffset *offs = calloc(m->n_offsets ? m->n_offsets : 1, sizeof(*offs));
    Sparrow__PartitionOffset **off_ptrs =
        calloc(m->n_offsets ? m->n_offsets : 1, sizeof(*off_ptrs));
    Sparrow__PartitionOffset *uoffs =
        calloc(m->n_update_offsets ? m->n_update_offsets : 1, sizeof(*uoffs));
    Sparrow__PartitionOffset **uoff_ptrs =
        calloc(m->n_update_offsets ? m->n_update_offsets : 1, sizeof(*uoff_ptrs));
    struct spw_wire_buf buf = {0};
    if (!shards || !shard_ptrs || !offs || !off_ptrs || !uoffs || !uoff_ptrs) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_free;
    }
    pb.has_format_version = pb.has_epoch = pb.has_shard_count = true;
    pb.has_example_count = pb.has_created_ms = true;
    pb.format_version = MANIFEST_FORMAT;
    pb.epoch = m->epoch;
    pb.shard_count = m->shard_count;
    pb.example_count = m->example_count;
    pb.created_ms = m->created_ms;
    for (uint32_t i = 0; i < m->shard_count; i++) {
        sparrow__shard_checkpoint__init(&shards[i]);
        shards[i].has_shard = shards[i].has_rows = true;
        shards[i].shard = i;
        shards[i].checksum = m->checksums[i];
        shards[i].rows = m->rows[i];
        shard_ptrs[i] = &shards[i];
    }
    pb.n_shards = m->shard_count;
    pb.shards = shard_ptrs;
    for (size_t i = 0; i < m->n_offsets; i++) {
        spw_coord__offset_to_pb(&m->offsets[i], &offs[i]);
        off_ptrs[i] = &offs[i];
    }
    pb.n_offsets = m->n_offsets;
    pb.offsets = off_ptrs;
    for (size_t i = 0; i < m->n_update_offsets; i++) {
        sparrow__partition_offset__init(&uoffs[i]);
        uoffs[i].topic = (char *)m->update_offsets[i].topic;
        uoffs[i].has_partition = uoffs[i].has_offset = true;
        uoffs[i].partition = m->update_offsets[i].partition;
        uoffs[i].offset = m->update_offsets[i].offset;
        uoff_ptrs[i] = &uoffs[i];
    }
    pb.n_update_offsets = m->n_update_offsets;
    pb.update_offsets = uoff_ptrs;
    if (m->model[0])
        pb.model = (char *)m->model;
    pb.has_dim = m->dim > 0;
    pb.dim = m->dim;
    if (spw_wire_buf_reserve(&buf, 12) != SPW_OK)
        goto out_free;
    memcpy(buf.data, MANIFEST_MAGIC, 8);
    buf.len = 12;
    if (spw_wire_pack(&pb.base, &buf) != SPW_OK || spw_wire_buf_reserve(&buf, 8) != SPW_OK)
        goto out_free;
    uint32_t n = (uint32_t)(buf.len - 12);
    for (int i = 0; i < 4; i++)
        buf.data[8 + i] = (uint8_t)(n >> (8 * i));
    uint64_t h = XXH3_64bits(buf.data, buf.len);
    for (int i = 0; i < 8; i++)
        buf.data[buf.len + (size_t)i] = (uint8_t)(h >> (8 * i));
    buf.len += 8;
    char dir[PATH_MAX];
    if (spw_ckpt_epoch_path(dir, sizeof(dir), root, m->epoch) != SPW_OK) {
        snprintf(errstr, errstr_size, "path too long");
        rc = SPW_ERR_INVALID;
        goto out_free;
    }
    char parent[PATH_MAX];
    if (spw_ckpt_dir_path(parent, sizeof(parent), root) == SPW_OK)
        mkdir(parent, 0755);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(errstr, errstr_size, "cannot create %s: %s", dir, strerror(errno));
        rc = SPW_ERR_IO;
        goto out_free;
    }
    rc = write_atomic(dir, SPW_CKPT_MANIFEST, buf.data, buf.len, errstr, errstr_size);
out_free:
    free(buf.data);
    free(uoff_ptrs);
    free(uoffs);
    free(off_ptrs);
    free(offs);
    free(shard_ptrs);
    free(shards);
    return rc;
}

static spw_err_t read_file(const char *path, size_t max, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO;
    uint8_t *data = malloc(max + 1);
    if (!data) {
        fclose(f);
        return SPW_ERR_NOMEM;
    }
    size_t n = fread(data, 1, max + 1, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad || n > max) {
        free(data);
        return bad ? SPW_ERR_IO : SPW_ERR_CORRUPT;
    }
    *out = data;
    *len = n;
    return SPW_OK;
}

spw_err_t spw_coord_manifest_read(const char *root, uint64_t epoch, struct spw_coord_manifest *m,
                                  char *errstr, size_t errstr_size)
{
    char path[PATH_MAX];
    memset(m, 0, sizeof(*m));
    if (spw_ckpt_manifest_path(path, sizeof(path), root, epoch) != SPW_OK) {
        snprintf(errstr, errstr_size, "path too long");
        return SPW_ERR_INVALID;
    }
    uint8_t *data = NULL;
    size_t len = 0;
    spw_err_t rc = read_file(path, SPW_COORD_MAX_FRAME, &data, &len);
    if (rc != SPW_OK) {
        snprintf(errstr, errstr_size, "%s: %s", path, spw_err_str(rc));
        return rc;
    }
    rc = SPW_ERR_CORRUPT;
    spw_arena_t *arena = NULL;
    if (len < 20 || memcmp(data, MANIFEST_MAGIC, 8) != 0)
        goto out_free;
    uint32_t n = (uint32_t)data[8] | (uint32_t)data[9] << 8 | (uint32_t)data[10] << 16 |
                 (uint32_t)data[11] << 24;
    if ((size_t)n != len - 20)
        goto out_free;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)data[12 + n + (size_t)i] << (8 * i);
    if (h != XXH3_64bits(data, 12 + (size_t)n))
        goto out_free;
    arena = spw_arena_new(1 << 16, (size_t)SPW_COORD_MAX_FRAME * 4);
    if (!arena) {
        rc = SPW_ERR_NOMEM;
        goto out_free;
    }
    Sparrow__CheckpointManifest *pb = NULL;
    if (spw_wire_unpack_manifest(data + 12, n, SPW_COORD_MAX_FRAME, arena, &pb) != SPW_OK)
        goto out_free;
    if (pb->epoch != epoch || pb->shard_count > SPW_COORD_MAX_SHARDS ||
        pb->n_offsets > SPW_COORD_MAX_PARTITIONS || pb->n_update_offsets > SPW_COORD_MAX_PARTITIONS)
        goto out_free;
    m->epoch = pb->epoch;
    m->shard_count = pb->shard_count;
    m->example_count = pb->example_count;
    m->created_ms = pb->created_ms;
    m->checksums = calloc(pb->shard_count, sizeof(*m->checksums));
    m->rows = calloc(pb->shard_count, sizeof(*m->rows));
    m->offsets = calloc(pb->n_offsets ? pb->n_offsets : 1, sizeof(*m->offsets));
    m->update_offsets =
        calloc(pb->n_update_offsets ? pb->n_update_offsets : 1, sizeof(*m->update_offsets));
    if (!m->checksums || !m->rows || !m->offsets || !m->update_offsets) {
        spw_coord_manifest_fini(m);
        rc = SPW_ERR_NOMEM;
        goto out_free;
    }
    for (size_t i = 0; i < pb->n_shards; i++) {
        const Sparrow__ShardCheckpoint *s = pb->shards[i];
        snprintf(m->checksums[s->shard], sizeof(m->checksums[0]), "%s",
                 s->checksum ? s->checksum : "");
        m->rows[s->shard] = s->rows;
    }
    for (size_t i = 0; i < pb->n_offsets; i++) {
        spw_coord__offset_from_pb(pb->offsets[i], &m->offsets[i]);
    }
    m->n_offsets = pb->n_offsets;
    for (size_t i = 0; i < pb->n_update_offsets; i++) {
        const Sparrow__PartitionOffset *o = pb->update_offsets[i];
        snprintf(m->update_offsets[i].topic, sizeof(m->update_offsets[i].topic), "%s",
                 o->topic ? o->topic : "");
        m->update_offsets[i].partition = o->partition;
        m->update_offsets[i].offset = o->offset;
    }
    m->n_update_offsets = pb->n_update_offsets;
    if (pb->model && strlen(pb->model) < sizeof(m->model))
        snprintf(m->model, sizeof(m->model), "%s", pb->model);
    m->dim = pb->has_dim ? pb->dim : 0;
    rc = SPW_OK;
out_free:
    if (rc == SPW_ERR_CORRUPT)
        snprintf(errstr, errstr_size, "%s: corrupt manifest", path);
    spw_arena_destroy(arena);
    free(data);
    return rc;
}

spw_err_t spw_coord_latest_write(const char *root, uint64_t epoch, char *errstr, size_t errstr_size)
{
    char dir[PATH_MAX], text[32];
    if (spw_ckpt_dir_path(dir, sizeof(dir), root) != SPW_OK)
        return SPW_ERR_INVALID;
    int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", epoch);
    return write_atomic(dir, SPW_CKPT_LATEST, text, (size_t)n, errstr, errstr_size);
}

spw_err_t spw_coord_latest_read(const char *root, uint64_t *epoch)
{
    char path[PATH_MAX];
    if (spw_ckpt_latest_path(path, sizeof(path), root) != SPW_OK)
        return SPW_ERR_INVALID;
    uint8_t *data = NULL;
    size_t len = 0;
    spw_err_t rc = read_file(path, 31, &data, &len);
    if (rc != SPW_OK)
        return rc == SPW_ERR_CORRUPT ? SPW_ERR_CORRUPT : rc;
    char text[32];
    memcpy(text, data, len);
    free(data);
    text[len] = '\0';
    if (len > 0 && text[len - 1] == '\n')
        text[len - 1] = '\0';
    int64_t v;
    if (spw_parse_int64(text, &v) != SPW_OK || v < 0)
        return SPW_ERR_CORRUPT;
    *epoch = (uint64_t)v;
    return SPW_OK;
}

long spw_coord_epochs_list(const char *root, uint64_t *epochs, size_t n_max)
{
    return spw_ckpt_epochs_list(root, epochs, n_max);
}

size_t spw_coord_prune(const char *root, uint64_t latest, uint32_t keep, uint64_t spare)
{
    uint64_t epochs[4096];
    long n = spw_coord_epochs_list(root, epochs, 4096);
    if (n <= 0)
        return 0;
    if (n > 4096)
        n = 4096;
    size_t removed = 0;
    uint32_t kept = 0;
    for (long i = 0; i < n; i++) {
        uint64_t e = epochs[i];
        bool has_manifest = spw_ckpt_epoch_has_manifest(root, e);
        bool drop;
        if (e == spare)
            drop = false;
        else if (e > latest || !has_manifest) /* orphans of aborted or interrupted epochs */
            drop = true;
        else
            drop = kept++ >= keep;
        if (!drop)
            continue;
        spw_err_t rc = spw_ckpt_epoch_remove(root, e);
        if (rc == SPW_ERR_INVALID)
            continue;
        if (rc == SPW_OK) {
            removed++;
            SPW_INFO("checkpoint pruned", "epoch=%" PRIu64 " latest=%" PRIu64, e, latest);
        } else {
            SPW_WARN("checkpoint prune failed", "epoch=%" PRIu64 " err=\"%s\"", e, strerror(errno));
        }
    }
    return removed;
}

spw_err_t spw_coord_verify_default(const char *shard_dir, const char *checksum)
{
    char path[PATH_MAX];
    if (spw_ckpt_checksum_path(path, sizeof(path), shard_dir) != SPW_OK)
        return SPW_ERR_INVALID;
    uint8_t *data = NULL;
    size_t len = 0;
    spw_err_t rc = read_file(path, 4096, &data, &len);
    if (rc != SPW_OK)
        return rc;
    size_t cl = strlen(checksum);
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == ' '))
        len--;
    bool ok = cl > 0 && len >= cl && memcmp(data + len - cl, checksum, cl) == 0;
    free(data);
    return ok ? SPW_OK : SPW_ERR_CORRUPT;
}

static bool epoch_verifies(const char *root, uint64_t e, uint32_t shards,
                           spw_coord_verify_fn verify, struct spw_coord_manifest *m)
{
    char err[512];
    if (spw_coord_manifest_read(root, e, m, err, sizeof(err)) != SPW_OK) {
        SPW_WARN("recovery skips epoch", "epoch=%" PRIu64 " reason=\"%s\"", e, err);
        return false;
    }
    if (m->shard_count != shards) {
        SPW_WARN("recovery skips epoch", "epoch=%" PRIu64 " reason=\"%u shards, expected %u\"", e,
                 m->shard_count, shards);
        spw_coord_manifest_fini(m);
        return false;
    }
    for (uint32_t i = 0; i < shards; i++) {
        char dir[PATH_MAX];
        if (spw_ckpt_shard_path(dir, sizeof(dir), root, e, i) != SPW_OK)
            return false;
        spw_err_t v = verify(dir, m->checksums[i]);
        if (v != SPW_OK) {
            SPW_WARN("recovery skips epoch", "epoch=%" PRIu64 " shard=%u reason=\"%s\"", e, i,
                     spw_err_str(v));
            spw_coord_manifest_fini(m);
            return false;
        }
    }
    return true;
}

uint64_t spw_coord_recovery_epoch(const char *root, uint32_t shards, spw_coord_verify_fn verify,
                                  struct spw_coord_manifest *m)
{
    memset(m, 0, sizeof(*m));
    if (!verify)
        verify = spw_coord_verify_default;
    uint64_t latest = 0;
    if (spw_coord_latest_read(root, &latest) == SPW_ERR_NOT_FOUND)
        return 0;
    uint64_t epochs[4096];
    long n = spw_coord_epochs_list(root, epochs, 4096);
    if (n > 4096)
        n = 4096;
    for (long i = 0; i < n; i++) {
        if (epochs[i] > latest && latest != 0)
            continue;
        if (epoch_verifies(root, epochs[i], shards, verify, m))
            return epochs[i];
    }
    memset(m, 0, sizeof(*m));
    return 0;
}
