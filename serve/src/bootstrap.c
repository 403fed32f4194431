/* Bootstrap of the serving table from the LATEST checkpoint, read-only. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/log.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/pserver.h"
#include "sparrow/serve.h"

/* The shard checkpoints are read through the pserver's reader (sparrow/ps_ckpt.h), which verifies
 * them and refuses any other format than its own. */

void spw_serve_bootstrap_fini(struct spw_serve_bootstrap *boot)
{
    free(boot->offsets);
    memset(boot, 0, sizeof(*boot));
}

/* Loads one shard checkpoint directory (verified against the manifest's checksum) into the
 * table (created on the first shard). */
static spw_err_t load_shard(const char *dir, const char *checksum, const char *log_dir,
                            uint64_t max_rows, spw_serve_table_t **table,
                            struct spw_serve_bootstrap *boot, char *errstr, size_t errstr_size)
{
    spw_err_t rc;
    spw_ps_ckpt_reader_t *r =
        spw_ps_ckpt_reader_open(dir, checksum, log_dir, &rc, errstr, errstr_size);
    if (!r)
        return rc;
    uint32_t dim = spw_ps_ckpt_reader_meta(r)->dim;
    if (dim > SPW_SERVE_MAX_DIM) {
        snprintf(errstr, errstr_size, "%s: dim %u above serving's %u", dir, dim, SPW_SERVE_MAX_DIM);
        rc = SPW_ERR_VERSION;
        goto out_close;
    }
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
    struct spw_ps_ckpt_row row;
    char rerr[256];
    while ((rc = spw_ps_ckpt_reader_next(r, &row, rerr, sizeof(rerr))) == SPW_OK) {
        /* row.data starts with the weights: the only part serving needs */
        if ((rc = spw_serve_table_put(*table, row.key, row.data, row.version)) != SPW_OK) {
            snprintf(errstr, errstr_size, "table full at %" PRIu64 " rows (serve.max_rows)",
                     spw_serve_table_rows(*table));
            goto out_close;
        }
        boot->rows++;
    }
    if (rc == SPW_ERR_EOF)
        rc = SPW_OK;
    else
        snprintf(errstr, errstr_size, "%s: %s", dir, rerr);
out_close:
    spw_ps_ckpt_reader_close(r);
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
        SPW_INFO("no checkpoint (no LATEST)", "root=%s", root);
        return SPW_OK;
    }
    if (rc != SPW_OK) {
        char latest[PATH_MAX];
        spw_ckpt_latest_path(latest, sizeof(latest), root);
        snprintf(errstr, errstr_size, "%s: %s", latest, spw_err_str(rc));
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
        char dir[PATH_MAX];
        if (spw_ckpt_shard_path(dir, sizeof(dir), root, epoch, i) != SPW_OK) {
            snprintf(errstr, errstr_size, "path too long");
            rc = SPW_ERR_INVALID;
            goto out_fail;
        }
        if ((rc = load_shard(dir, m.checksums[i], log_dir, max_rows, table, boot, errstr,
                             errstr_size)) != SPW_OK)
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
