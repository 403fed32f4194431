/* Shard checkpoints as rows (ps_ckpt.h): decoding of the stored meta and rows, a verifying
 * read-only reader and a writer that stages rows in a scratch database and checkpoints it the way
 * a shard does (spw_ps__checkpoint_db). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <rocksdb/c.h>

#include "ps_int.h"
#include "sparrow/fs.h"
#include "sparrow/ps_ckpt.h"

#define META_PREFIX   "sparrow-ps "
#define META_MAX      128u
#define VALUE_HDR     (SPW_PS_ROW_HDR - SPW_PS_DB_VALUE_OFF) /* version, last_update, count */
#define WRITE_BATCH   4096u                                  /* rows per WriteBatch */
#define PATH_MAX_CKPT 4096u

size_t spw_ps_ckpt_row_floats(const struct spw_ps_ckpt_meta *meta)
{
    return meta->dim + spw_ps_slot_floats(meta->optimizer, meta->dim);
}

spw_err_t spw_ps_ckpt_meta_parse(const void *value, size_t len, struct spw_ps_ckpt_meta *meta)
{
    char text[META_MAX];
    if (len >= sizeof(text))
        return SPW_ERR_CORRUPT;
    memcpy(text, value, len);
    text[len] = '\0';
    if (strlen(text) != len)
        return SPW_ERR_CORRUPT; /* an embedded NUL */
    if (strncmp(text, META_PREFIX, strlen(META_PREFIX)) != 0)
        return SPW_ERR_CORRUPT;
    if (strncmp(text, "sparrow-ps 2 dim=", strlen("sparrow-ps 2 dim=")) != 0)
        return SPW_ERR_VERSION;
    const char *p = text + strlen("sparrow-ps 2 dim=");
    uint32_t dim = 0;
    size_t digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9' && digits < 5) {
        dim = dim * 10 + (uint32_t)(p[digits] - '0');
        digits++;
    }
    if (digits == 0 || dim < 1 || dim > SPW_PS_MAX_DIM || (digits > 1 && p[0] == '0'))
        return SPW_ERR_CORRUPT;
    p += digits;
    if (strncmp(p, " optimizer=", strlen(" optimizer=")) != 0)
        return SPW_ERR_CORRUPT;
    p += strlen(" optimizer=");
    enum spw_ps_optimizer opt;
    if (spw_ps_optimizer_parse(p, &opt) != SPW_OK)
        return SPW_ERR_CORRUPT;
    /* Only the canonical text: what the shard itself would compare against at open. */
    char canon[META_MAX];
    snprintf(canon, sizeof(canon), SPW_PS_META_FORMAT, dim, spw_ps_optimizer_name(opt));
    if (strcmp(canon, text) != 0)
        return SPW_ERR_CORRUPT;
    meta->dim = dim;
    meta->optimizer = opt;
    return SPW_OK;
}

spw_err_t spw_ps_ckpt_row_decode(const struct spw_ps_ckpt_meta *meta, const void *key, size_t klen,
                                 const void *value, size_t vlen, struct spw_ps_ckpt_row *row,
                                 float *data)
{
    size_t floats = spw_ps_ckpt_row_floats(meta);
    if (klen != 8 || vlen != VALUE_HDR + floats * sizeof(float))
        return SPW_ERR_CORRUPT;
    const char *v = value;
    row->key = spw_ps__key_decode(key);
    memcpy(&row->version, v, 4);
    memcpy(&row->last_update, v + 4, 4);
    memcpy(&row->count, v + 8, 4);
    memcpy(data, v + VALUE_HDR, floats * sizeof(float));
    row->data = data;
    return SPW_OK;
}

/* ---- reader ---- */

/* Owned by one thread (see ps_ckpt.h). */
struct spw_ps_ckpt_reader {
    rocksdb_options_t *opts;
    rocksdb_readoptions_t *ro;
    rocksdb_t *db;
    rocksdb_iterator_t *it;
    bool started;
    bool done; /* past the last row */
    spw_err_t sticky;
    struct spw_ps_ckpt_meta meta;
    char checksum[17];
    char *own_log_dir; /* the temporary log directory, or NULL */
    float *data;
};

static spw_err_t read_meta(spw_ps_ckpt_reader_t *r, const char *dir, char *errstr,
                           size_t errstr_size)
{
    char *err = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get(r->db, r->ro, SPW_PS_META_KEY, SPW_PS_META_KEY_LEN, &vlen, &err);
    if (err) {
        snprintf(errstr, errstr_size, "%s: rocksdb get meta: %s", dir, err);
        rocksdb_free(err);
        return SPW_ERR_STORE;
    }
    if (!val) {
        snprintf(errstr, errstr_size, "%s: no meta key (not a shard checkpoint)", dir);
        return SPW_ERR_CORRUPT;
    }
    spw_err_t rc = spw_ps_ckpt_meta_parse(val, vlen, &r->meta);
    if (rc != SPW_OK)
        snprintf(errstr, errstr_size, "%s: unsupported or malformed meta \"%.*s\"", dir,
                 (int)(vlen > 80 ? 80 : vlen), val);
    rocksdb_free(val);
    return rc;
}

spw_ps_ckpt_reader_t *spw_ps_ckpt_reader_open(const char *dir, const char *want_checksum,
                                              const char *log_dir, spw_err_t *err, char *errstr,
                                              size_t errstr_size)
{
    spw_err_t rc = SPW_ERR_NOMEM;
    spw_ps_ckpt_reader_t *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(errstr, errstr_size, "no shard checkpoint at %s", dir);
        rc = SPW_ERR_NOT_FOUND;
        goto out_close;
    }
    rc = spw_ps_checkpoint_verify(dir, r->checksum);
    if (rc != SPW_OK) {
        snprintf(errstr, errstr_size, "%s does not verify: %s", dir,
                 rc == SPW_ERR_NOT_FOUND ? "no CHECKSUM file" : spw_err_str(rc));
        if (rc == SPW_ERR_NOT_FOUND)
            rc = SPW_ERR_CORRUPT;
        goto out_close;
    }
    if (want_checksum && strcmp(want_checksum, r->checksum) != 0) {
        snprintf(errstr, errstr_size, "%s has checksum %s, the manifest names %.16s", dir,
                 r->checksum, want_checksum);
        rc = SPW_ERR_CORRUPT;
        goto out_close;
    }
    if (!log_dir) {
        const char *tmp = "/tmp";
        size_t len = strlen(tmp) + sizeof("/sparrow-ckpt-log.XXXXXX");
        r->own_log_dir = malloc(len);
        if (!r->own_log_dir) {
            snprintf(errstr, errstr_size, "out of memory");
            rc = SPW_ERR_NOMEM;
            goto out_close;
        }
        snprintf(r->own_log_dir, len, "%s/sparrow-ckpt-log.XXXXXX", tmp);
        if (!mkdtemp(r->own_log_dir)) {
            snprintf(errstr, errstr_size, "mkdtemp %s: %s", r->own_log_dir, strerror(errno));
            free(r->own_log_dir);
            r->own_log_dir = NULL;
            rc = SPW_ERR_IO;
            goto out_close;
        }
        log_dir = r->own_log_dir;
    }
    r->opts = spw_ps__db_options();
    rocksdb_options_set_create_if_missing(r->opts, 0);
    /* The info log goes elsewhere: nothing is created in the checkpoint (its CHECKSUM covers
     * every file). */
    rocksdb_options_set_db_log_dir(r->opts, log_dir);
    rocksdb_options_set_max_open_files(r->opts, 256);
    char *rerr = NULL;
    r->db = rocksdb_open_for_read_only(r->opts, dir, 0, &rerr);
    if (!r->db) {
        snprintf(errstr, errstr_size, "open %s read-only: %s", dir, rerr ? rerr : "?");
        rocksdb_free(rerr);
        rc = SPW_ERR_STORE;
        goto out_close;
    }
    r->ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(r->ro, 0);
    rocksdb_readoptions_set_verify_checksums(r->ro, 1);
    if ((rc = read_meta(r, dir, errstr, errstr_size)) != SPW_OK)
        goto out_close;
    r->data = malloc(spw_ps_ckpt_row_floats(&r->meta) * sizeof(float));
    r->it = rocksdb_create_iterator(r->db, r->ro);
    if (!r->data || !r->it) {
        snprintf(errstr, errstr_size, "out of memory");
        rc = SPW_ERR_NOMEM;
        goto out_close;
    }
    rc = SPW_OK;
    goto out;
out_close:
    spw_ps_ckpt_reader_close(r);
    r = NULL;
out:
    if (err)
        *err = rc;
    return r;
}

const struct spw_ps_ckpt_meta *spw_ps_ckpt_reader_meta(const spw_ps_ckpt_reader_t *reader)
{
    return &reader->meta;
}

const char *spw_ps_ckpt_reader_checksum(const spw_ps_ckpt_reader_t *reader)
{
    return reader->checksum;
}

spw_err_t spw_ps_ckpt_reader_next(spw_ps_ckpt_reader_t *r, struct spw_ps_ckpt_row *row,
                                  char *errstr, size_t errstr_size)
{
    if (r->sticky) {
        snprintf(errstr, errstr_size, "reader failed earlier: %s", spw_err_str(r->sticky));
        return r->sticky;
    }
    if (r->done)
        return SPW_ERR_EOF;
    if (!r->started) {
        rocksdb_iter_seek_to_first(r->it);
        r->started = true;
    } else {
        rocksdb_iter_next(r->it);
    }
    for (; rocksdb_iter_valid(r->it); rocksdb_iter_next(r->it)) {
        size_t klen = 0, vlen = 0;
        const char *k = rocksdb_iter_key(r->it, &klen);
        if (klen == SPW_PS_META_KEY_LEN && memcmp(k, SPW_PS_META_KEY, klen) == 0)
            continue;
        const char *v = rocksdb_iter_value(r->it, &vlen);
        if (spw_ps_ckpt_row_decode(&r->meta, k, klen, v, vlen, row, r->data) != SPW_OK) {
            snprintf(errstr, errstr_size, "malformed row: key of %zu bytes, value of %zu bytes",
                     klen, vlen);
            return r->sticky = SPW_ERR_CORRUPT;
        }
        return SPW_OK;
    }
    char *err = NULL;
    rocksdb_iter_get_error(r->it, &err);
    if (err) {
        snprintf(errstr, errstr_size, "iterate: %s", err);
        rocksdb_free(err);
        return r->sticky = SPW_ERR_STORE;
    }
    r->done = true;
    return SPW_ERR_EOF;
}

void spw_ps_ckpt_reader_close(spw_ps_ckpt_reader_t *r)
{
    if (!r)
        return;
    if (r->it)
        rocksdb_iter_destroy(r->it);
    if (r->ro)
        rocksdb_readoptions_destroy(r->ro);
    if (r->db)
        rocksdb_close(r->db);
    if (r->opts)
        rocksdb_options_destroy(r->opts);
    if (r->own_log_dir) {
        spw_fs_remove_tree(r->own_log_dir);
        free(r->own_log_dir);
    }
    free(r->data);
    free(r);
}

/* ---- writer ---- */

/* Owned by one thread (see ps_ckpt.h). */
struct spw_ps_ckpt_writer {
    struct spw_ps_ckpt_meta meta;
    size_t value_len;
    char dir[PATH_MAX_CKPT];
    char build[PATH_MAX_CKPT + 16]; /* the scratch database */
    char tmp[PATH_MAX_CKPT + 16];   /* the checkpoint before its rename to dir */
    rocksdb_options_t *opts;
    rocksdb_writeoptions_t *wo;
    rocksdb_t *db;
    rocksdb_writebatch_t *wb;
    size_t batched;
    char *value; /* value_len bytes of scratch */
    bool finished;
};

static spw_err_t store_error(char *rerr, const char *what, const char *path, char *errstr,
                             size_t errstr_size)
{
    snprintf(errstr, errstr_size, "%s %s: %s", what, path, rerr ? rerr : "?");
    rocksdb_free(rerr);
    return SPW_ERR_STORE;
}

spw_ps_ckpt_writer_t *spw_ps_ckpt_writer_open(const char *dir, const struct spw_ps_ckpt_meta *meta,
                                              spw_err_t *err, char *errstr, size_t errstr_size)
{
    spw_err_t rc = SPW_ERR_NOMEM;
    spw_ps_ckpt_writer_t *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out;
    }
    w->meta = *meta;
    w->value_len = VALUE_HDR + spw_ps_ckpt_row_floats(meta) * sizeof(float);
    if (!spw_ps__path(w->dir, sizeof(w->dir), "%s", dir) ||
        !spw_ps__path(w->build, sizeof(w->build), "%s.build", dir) ||
        !spw_ps__path(w->tmp, sizeof(w->tmp), "%s.part", dir)) {
        snprintf(errstr, errstr_size, "checkpoint path too long");
        rc = SPW_ERR_INVALID;
        goto out_close;
    }
    struct stat st;
    if (stat(dir, &st) == 0) {
        snprintf(errstr, errstr_size, "%s exists", dir);
        rc = SPW_ERR_EXISTS;
        w->finished = true; /* not ours: close must not remove it */
        goto out_close;
    }
    w->value = malloc(w->value_len);
    w->wb = rocksdb_writebatch_create();
    w->wo = rocksdb_writeoptions_create();
    if (!w->value || !w->wb || !w->wo) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_close;
    }
    /* The scratch database is rebuilt from the rows if the process dies: no WAL. */
    rocksdb_writeoptions_disable_WAL(w->wo, 1);
    spw_fs_remove_tree(w->build);
    w->opts = spw_ps__db_options();
    char *rerr = NULL;
    w->db = rocksdb_open(w->opts, w->build, &rerr);
    if (!w->db) {
        rc = store_error(rerr, "rocksdb open", w->build, errstr, errstr_size);
        goto out_close;
    }
    char text[META_MAX];
    snprintf(text, sizeof(text), SPW_PS_META_FORMAT, meta->dim,
             spw_ps_optimizer_name(meta->optimizer));
    rocksdb_put(w->db, w->wo, SPW_PS_META_KEY, SPW_PS_META_KEY_LEN, text, strlen(text), &rerr);
    if (rerr) {
        rc = store_error(rerr, "rocksdb put meta", w->build, errstr, errstr_size);
        goto out_close;
    }
    rc = SPW_OK;
    goto out;
out_close:
    spw_ps_ckpt_writer_close(w);
    w = NULL;
out:
    if (err)
        *err = rc;
    return w;
}

static spw_err_t write_batch(spw_ps_ckpt_writer_t *w, char *errstr, size_t errstr_size)
{
    if (w->batched == 0)
        return SPW_OK;
    char *rerr = NULL;
    rocksdb_write(w->db, w->wo, w->wb, &rerr);
    rocksdb_writebatch_clear(w->wb);
    w->batched = 0;
    return rerr ? store_error(rerr, "rocksdb write", w->build, errstr, errstr_size) : SPW_OK;
}

spw_err_t spw_ps_ckpt_writer_add(spw_ps_ckpt_writer_t *w, const struct spw_ps_ckpt_row *row,
                                 char *errstr, size_t errstr_size)
{
    char key[8];
    spw_ps__key_encode(row->key, key);
    memcpy(w->value, &row->version, 4);
    memcpy(w->value + 4, &row->last_update, 4);
    memcpy(w->value + 8, &row->count, 4);
    memcpy(w->value + VALUE_HDR, row->data, w->value_len - VALUE_HDR);
    rocksdb_writebatch_put(w->wb, key, sizeof(key), w->value, w->value_len);
    if (++w->batched < WRITE_BATCH)
        return SPW_OK;
    return write_batch(w, errstr, errstr_size);
}

/* Exact number of rows of the scratch database (keys added twice count once). */
static spw_err_t count_rows(spw_ps_ckpt_writer_t *w, uint64_t *rows, char *errstr,
                            size_t errstr_size)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(ro, 0);
    rocksdb_iterator_t *it = rocksdb_create_iterator(w->db, ro);
    uint64_t n = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen = 0;
        rocksdb_iter_key(it, &klen);
        n += klen == 8;
    }
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (rerr)
        return store_error(rerr, "rocksdb iterate", w->build, errstr, errstr_size);
    *rows = n;
    return SPW_OK;
}

spw_err_t spw_ps_ckpt_writer_finish(spw_ps_ckpt_writer_t *w, struct spw_ps_checkpoint_info *info,
                                    char *errstr, size_t errstr_size)
{
    spw_err_t rc = write_batch(w, errstr, errstr_size);
    if (rc)
        return rc;
    /* Memtable rows into SST files, so that the checkpoint links files rather than replaying a
     * log (the WAL is off). */
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    char *rerr = NULL;
    rocksdb_flush(w->db, fo, &rerr);
    rocksdb_flushoptions_destroy(fo);
    if (rerr)
        return store_error(rerr, "rocksdb flush", w->build, errstr, errstr_size);
    uint64_t rows = 0;
    if ((rc = count_rows(w, &rows, errstr, errstr_size)) != SPW_OK)
        return rc;
    char hex[17];
    uint64_t bytes = 0;
    rc = spw_ps__checkpoint_db(w->db, w->tmp, w->dir, NULL, NULL, NULL, hex, &bytes, errstr,
                               errstr_size);
    if (rc)
        return rc;
    w->finished = true;
    if (info) {
        info->epoch = 0;
        info->rows = rows;
        info->bytes = bytes;
        snprintf(info->path, sizeof(info->path), "%s", w->dir);
        memcpy(info->checksum, hex, sizeof(info->checksum));
    }
    return SPW_OK;
}

void spw_ps_ckpt_writer_close(spw_ps_ckpt_writer_t *w)
{
    if (!w)
        return;
    if (w->db)
        rocksdb_close(w->db);
    if (w->opts)
        rocksdb_options_destroy(w->opts);
    if (w->wo)
        rocksdb_writeoptions_destroy(w->wo);
    if (w->wb)
        rocksdb_writebatch_destroy(w->wb);
    if (w->build[0])
        spw_fs_remove_tree(w->build);
    if (!w->finished && w->tmp[0]) {
        spw_fs_remove_tree(w->tmp);
        char rtmp[PATH_MAX_CKPT + 32];
        if (spw_ps__path(rtmp, sizeof(rtmp), "%s.tmp", w->tmp))
            spw_fs_remove_tree(rtmp);
    }
    free(w->value);
    free(w);
}
