/* A store database's dim and optimizer, read from its meta key without opening the store
 * (pserver.dim=auto takes the dim its database was written with). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <rocksdb/c.h>

#include "ps_int.h"
#include "sparrow/ps_ckpt.h"

spw_err_t spw_ps_store_peek_dim(const char *db_path, uint32_t *dim,
                                enum spw_ps_optimizer *optimizer, char *errstr, size_t errstr_size)
{
    struct stat st;
    if (stat(db_path, &st) != 0)
        return SPW_ERR_NOT_FOUND;
    rocksdb_options_t *opts = spw_ps__db_options();
    rocksdb_options_set_create_if_missing(opts, 0);
    char *rerr = NULL;
    rocksdb_t *db = rocksdb_open_for_read_only(opts, db_path, 0, &rerr);
    spw_err_t rc = SPW_ERR_STORE;
    if (!db) {
        snprintf(errstr, errstr_size, "open %s read-only: %s", db_path, rerr ? rerr : "?");
        rocksdb_free(rerr);
        goto out_opts;
    }
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    size_t vlen = 0;
    char *val = rocksdb_get(db, ro, SPW_PS_META_KEY, SPW_PS_META_KEY_LEN, &vlen, &rerr);
    if (rerr) {
        snprintf(errstr, errstr_size, "%s: rocksdb get meta: %s", db_path, rerr);
        rocksdb_free(rerr);
    } else if (!val) {
        rc = SPW_ERR_NOT_FOUND; /* created, never written: as good as none */
    } else {
        struct spw_ps_ckpt_meta meta;
        rc = spw_ps_ckpt_meta_parse(val, vlen, &meta);
        if (rc == SPW_OK) {
            *dim = meta.dim;
            *optimizer = meta.optimizer;
        } else {
            snprintf(errstr, errstr_size, "%s: meta '%.*s' is not a shard's", db_path,
                     (int)(vlen > 80 ? 80 : vlen), val);
        }
        rocksdb_free(val);
    }
    rocksdb_readoptions_destroy(ro);
    rocksdb_close(db);
out_opts:
    rocksdb_options_destroy(opts);
    return rc;
}
