/* Bootstrap of the serving table from the LATEST checkpoint, read-only. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "sparrow/coordinator.h"
#include "sparrow/log.h"
#include "sparrow/pserver.h"
#include "sparrow/serve.h"

/*
 * The shard's RocksDB layout that this file reads (pserver/src/ps_int.h, format 2 of the meta key;
 * any other format is refused, so a layout change cannot be misread silently):
 *   key "\0meta" (5 bytes)  value "sparrow-ps 2 dim=<dim> optimizer=<name>"
 *   key 8 bytes, big-endian feature key
 *   value   offset  size      field
 *           0       4         version
 *           4       4         last_update (s)
 *           8       4         count
 *           12      4·dim     weights       <- the only part serving needs
 *           12+4dim 4·slots   optimizer state
 */
#define META_KEY     "\0meta"
#define META_KEY_LEN 5u
#define META_PREFIX  "sparrow-ps 2 dim="
#define VALUE_HDR    12u

void spw_serve_bootstrap_fini(struct spw_serve_bootstrap *boot)
{
    free(boot->offsets);
    memset(boot, 0, sizeof(*boot));
}

static uint64_t key_decode(const char *in)
{
    uint64_t key = 0;
    for (int i = 0; i < 8; i++)
        key = (key << 8) | (uint8_t)in[i];
    return key;
}

/* Reads the dim from a shard database's meta key. */
static spw_err_t read_dim(rocksdb_t *db, const rocksdb_readoptions_t *ro, uint32_t *dim,
                          char *errstr, size_t errstr_size)
{
    char *err = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get(db, ro, META_KEY, META_KEY_LEN, &vlen, &err);
    if (err) {
        snprintf(errstr, errstr_size, "rocksdb get meta: %s", err);
        rocksdb_free(err);
        return SPW_ERR_STORE;
    }
    char text[128] = {0};
    if (!val || vlen >= sizeof(text)) {
        rocksdb_free(val);
        snprintf(errstr, errstr_size, "shard checkpoint without a readable meta key");
        return SPW_ERR_CORRUPT;
    }
    memcpy(text, val, vlen);
    rocksdb_free(val);
    unsigned d = 0;
    if (strncmp(text, META_PREFIX, strlen(META_PREFIX)) != 0 ||
        sscanf(text + strlen(META_PREFIX), "%u", &d) != 1 || d < 1 || d > SPW_SERVE_MAX_DIM) {
        snprintf(errstr, errstr_size, "unsupported shard format \"%.100s\"", text);
        return SPW_ERR_VERSION;
    }
    *dim = d;
    return SPW_OK;
}

/* Loads one shard checkpoint directory into the table (created on the first shard). */
static spw_err_t load_shard(const char *dir, const char *log_dir, uint64_t max_rows,
                            spw_serve_table_t **table, struct spw_serve_bootstrap *boot,
                            char *errstr, size_t errstr_size)
{
    spw_err_t rc = SPW_OK;
    char *err = NULL;
    rocksdb_options_t *opts = rocksdb_options_create();
    /* The info log goes to our own directory: nothing is created in the checkpoint. */
    rocksdb_options_set_db_log_dir(opts, log_dir);
    rocksdb_options_set_max_open_files(opts, 256);
    rocksdb_t *db = rocksdb_open_for_read_only(opts, dir, 0, &err);
    if (!db) {
        snprintf(errstr, errstr_size, "open %s read-only: %s", dir, err ? err : "?");
        rocksdb_free(err);
        rc = SPW_ERR_STORE;
        goto out_destroy_opts;
    }
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(ro, 0);
    uint32_t dim = 0;
    if ((rc = read_dim(db, ro, &dim, errstr, errstr_size)) != SPW_OK)
        goto out_close;
    if (!*table) {
        *table = spw_serve_table_new(dim, max_rows, errstr, errstr_size);
        if (!*table) {
            rc = SPW_ERR_NOMEM;
            goto out_close;
        }
        boot->dim = dim;
    } else if (spw_serve_table_dim(*table) != dim) {
        snprintf(errstr, errstr_size, "%s: dim %u differs from other shards' %u", dir, dim,
                 spw_serve_table_dim(*table));
        rc = SPW_ERR_CORRUPT;
        goto out_close;
    }
    rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen = 0, vlen = 0;
        const char *k = rocksdb_iter_key(it, &klen);
        if (klen != 8)
            continue; /* the meta key */
        const char *v = rocksdb_iter_value(it, &vlen);
        if (vlen < VALUE_HDR + (size_t)dim * sizeof(float)) {
            snprintf(errstr, errstr_size, "%s: row value of %zu bytes", dir, vlen);
            rc = SPW_ERR_CORRUPT;
            break;
        }
        float w[SPW_SERVE_MAX_DIM];
        uint32_t version;
        memcpy(&version, v, sizeof(version));
        memcpy(w, v + VALUE_HDR, (size_t)dim * sizeof(float));
        if ((rc = spw_serve_table_put(*table, key_decode(k), w, version)) != SPW_OK) {
            snprintf(errstr, errstr_size, "table full at %" PRIu64 " rows (serve.max_rows)",
                     spw_serve_table_rows(*table));
            break;
        }
        boot->rows++;
    }
    if (rc == SPW_OK) {
        rocksdb_iter_get_error(it, &err);
        if (err) {
            snprintf(errstr, errstr_size, "%s: iterate: %s", dir, err);
            rocksdb_free(err);
            rc = SPW_ERR_STORE;
        }
    }
    rocksdb_iter_destroy(it);
out_close:
    rocksdb_readoptions_destroy(ro);
    rocksdb_close(db);
out_destroy_opts:
    rocksdb_options_destroy(opts);
    return rc;
}

spw_err_t spw_serve_bootstrap_load(const char *root, const char *log_dir, const char *topic,
                                   uint64_t max_rows, spw_serve_table_t **table,
                                   struct spw_serve_bootstrap *boot, char *errstr,
                                   size_t errstr_size)
{
    memset(boot, 0, sizeof(*boot));
    *table = NULL;
    uint64_t epoch = 0;
    spw_err_t rc = spw_coord_latest_read(root, &epoch);
    if (rc == SPW_ERR_NOT_FOUND) {
        SPW_INFO("no checkpoint: starting empty", "root=%s", root);
        return SPW_OK;
    }
    if (rc != SPW_OK) {
        snprintf(errstr, errstr_size, "%s/checkpoints/LATEST: %s", root, spw_err_str(rc));
        return rc;
    }
    struct spw_coord_manifest m;
    if ((rc = spw_coord_manifest_read(root, epoch, &m, errstr, errstr_size)) != SPW_OK)
        return rc;
    boot->offsets = calloc(m.n_update_offsets ? m.n_update_offsets : 1, sizeof(*boot->offsets));
    if (!boot->offsets) {
        rc = SPW_ERR_NOMEM;
        goto out_fini;
    }
    for (size_t i = 0; i < m.n_update_offsets; i++) {
        if (strcmp(m.update_offsets[i].topic, topic) != 0)
            continue;
        boot->offsets[boot->n_offsets].partition = m.update_offsets[i].partition;
        boot->offsets[boot->n_offsets].offset = m.update_offsets[i].offset;
        boot->n_offsets++;
    }
    for (uint32_t i = 0; i < m.shard_count; i++) {
        char dir[PATH_MAX], hex[17];
        if (snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64 "/shard-%u", root, epoch, i) >=
            (int)sizeof(dir)) {
            snprintf(errstr, errstr_size, "path too long");
            rc = SPW_ERR_INVALID;
            goto out_fail;
        }
        rc = spw_ps_checkpoint_verify(dir, hex);
        if (rc == SPW_OK && strcmp(hex, m.checksums[i]) != 0)
            rc = SPW_ERR_CORRUPT;
        if (rc != SPW_OK) {
            snprintf(errstr, errstr_size, "%s does not verify: %s", dir, spw_err_str(rc));
            goto out_fail;
        }
        if ((rc = load_shard(dir, log_dir, max_rows, table, boot, errstr, errstr_size)) != SPW_OK)
            goto out_fail;
    }
    boot->epoch = epoch;
    SPW_INFO("checkpoint loaded",
             "epoch=%" PRIu64 " shards=%u rows=%" PRIu64 " dim=%u "
             "update_partitions=%zu",
             epoch, m.shard_count, boot->rows, boot->dim, boot->n_offsets);
    goto out_fini;
out_fail:
    spw_serve_table_destroy(*table);
    *table = NULL;
    spw_serve_bootstrap_fini(boot);
out_fini:
    spw_coord_manifest_fini(&m);
    return rc;
}
