/* `sparrow export`'s library (sparrow/export.h): a checkpoint epoch's rows, merged in key order
 * from its shard checkpoints, written as TSV or .npy files with a metadata.json. */
#include "sparrow/export.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"
#include "sparrow/dense.h"
#include "sparrow/fs.h"
#include "sparrow/hash.h"
#include "sparrow/ps_ckpt.h"
#include "sparrow/signal.h"
#include "ckpt_find_int.h"

/* Rows between two looks at a stop request. */
#define STOP_CHECK_ROWS 65536u

/*
 * The .npy header every file gets (format 1.0): written with the row count unknown and written
 * again, at the same size, once it is known.
 *   offset  size  field
 *   0       6     "\x93NUMPY"
 *   6       2     version 1, 0
 *   8       2     header length h = NPY_HEADER - 10, little-endian
 *   10      h     "{'descr': '<u8', 'fortran_order': False, 'shape': (n,), }", space-padded,
 *                 ending in '\n' (so the data starts at a multiple of 64)
 */
#define NPY_HEADER 128

/* ---- one epoch's rows in key order ---- */

/* The merge of an epoch's shard checkpoints (each read in key order). Owned by one thread. */
struct epoch_rows {
    uint64_t epoch;
    struct spw_coord_manifest m;
    uint32_t n, dim;
    const char *optimizer;
    spw_ps_ckpt_reader_t **r;
    struct spw_ps_ckpt_row *cur; /* each reader's current row (its data the reader's) */
    bool *live;                  /* a current row is there */
    uint64_t key;                /* the row returned last ... */
    float *w;                    /* ... and its weights, a copy (dim) */
};

static void epoch_close(struct epoch_rows *er)
{
    for (uint32_t i = 0; er->r && i < er->n; i++)
        spw_ps_ckpt_reader_close(er->r[i]);
    free(er->r);
    free(er->cur);
    free(er->live);
    free(er->w);
    spw_coord_manifest_fini(&er->m);
    memset(er, 0, sizeof(*er));
}

/* Reader i's next row into cur[i] (live[i] false at its end), keys strictly ascending. */
static spw_err_t advance(struct epoch_rows *er, uint32_t i, char *errstr, size_t errstr_size)
{
    uint64_t prev = er->cur[i].key;
    bool had = er->live[i];
    char rerr[256];
    spw_err_t rc = spw_ps_ckpt_reader_next(er->r[i], &er->cur[i], rerr, sizeof(rerr));
    if (rc == SPW_ERR_EOF) {
        er->live[i] = false;
        return SPW_OK;
    }
    if (rc != SPW_OK)
        return spw_errf(rc, errstr, errstr_size, "epoch %" PRIu64 " shard %u: %s", er->epoch, i,
                        rerr);
    if (had && er->cur[i].key <= prev)
        return spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                        "epoch %" PRIu64 " shard %u: keys out of order", er->epoch, i);
    er->live[i] = true;
    return SPW_OK;
}

static spw_err_t epoch_open(struct epoch_rows *er, const char *root, uint64_t epoch,
                            const char *log_dir, char *errstr, size_t errstr_size)
{
    memset(er, 0, sizeof(*er));
    er->epoch = epoch;
    char merr[512];
    spw_err_t rc = spw_coord_manifest_read(root, epoch, &er->m, merr, sizeof(merr));
    if (rc == SPW_ERR_NOT_FOUND) {
        char base[PATH_MAX];
        spw_ckpt_dir_path(base, sizeof(base), root);
        snprintf(errstr, errstr_size, "epoch %" PRIu64 " not found under %s", epoch, base);
        spw_tools__ckpt_list_epochs(root, errstr, errstr_size);
        return rc;
    }
    if (rc != SPW_OK)
        return spw_errf(rc, errstr, errstr_size, "epoch %" PRIu64 " MANIFEST: %s", epoch, merr);
    er->n = er->m.shard_count;
    if (er->n == 0)
        return spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                        "epoch %" PRIu64 " MANIFEST: no shards", epoch);
    er->r = calloc(er->n, sizeof(*er->r));
    er->cur = calloc(er->n, sizeof(*er->cur));
    er->live = calloc(er->n, sizeof(*er->live));
    if (!er->r || !er->cur || !er->live)
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
    for (uint32_t i = 0; i < er->n; i++) {
        char dir[PATH_MAX];
        if (spw_ckpt_shard_path(dir, sizeof(dir), root, epoch, i) != SPW_OK)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", root);
        /* verified against the manifest's checksum before a row is read */
        er->r[i] =
            spw_ps_ckpt_reader_open(dir, er->m.checksums[i], log_dir, &rc, errstr, errstr_size);
        if (!er->r[i])
            return rc;
        const struct spw_ps_ckpt_meta *meta = spw_ps_ckpt_reader_meta(er->r[i]);
        if (i == 0) {
            er->dim = meta->dim;
            er->optimizer = spw_ps_optimizer_name(meta->optimizer);
        } else if (meta->dim != er->dim) {
            return spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                            "%s: dim %u differs from shard 0's %u", dir, meta->dim, er->dim);
        }
    }
    if (!(er->w = calloc(er->dim, sizeof(float))))
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
    for (uint32_t i = 0; i < er->n; i++)
        if ((rc = advance(er, i, errstr, errstr_size)) != SPW_OK)
            return rc;
    return SPW_OK;
}

/* The next row of the epoch in key order into er->key / er->w. SPW_ERR_EOF after the last. */
static spw_err_t epoch_next(struct epoch_rows *er, char *errstr, size_t errstr_size)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < er->n; i++) {
        if (!er->live[i])
            continue;
        if (best != UINT32_MAX && er->cur[i].key == er->cur[best].key)
            return spw_errf(SPW_ERR_CORRUPT, errstr, errstr_size,
                            "epoch %" PRIu64 ": key %" PRIu64 " in shards %u and %u", er->epoch,
                            er->cur[i].key, best, i);
        if (best == UINT32_MAX || er->cur[i].key < er->cur[best].key)
            best = i;
    }
    if (best == UINT32_MAX)
        return SPW_ERR_EOF;
    er->key = er->cur[best].key;
    memcpy(er->w, er->cur[best].data, er->dim * sizeof(float)); /* weights lead the row */
    return advance(er, best, errstr, errstr_size);
}

/* ---- output files ---- */

/* One output file; path relative names kept for the metadata. */
struct out_file {
    FILE *f;
    char path[PATH_MAX];
    const char *name;
    const char *descr; /* npy: '<u8' or '<f4' */
    uint32_t cols;     /* npy: 0 for a 1-d array */
};

struct output {
    const char *dir;
    bool made_dir;
    enum spw_export_format format;
    uint32_t dim;
    struct out_file rows, keys, weights, removed; /* tsv: rows, removed; npy: the others */
    struct out_file dense;                        /* deep models: dense.tsv or dense.npy */
    struct out_file *opened[5];
    size_t n_opened;
    uint64_t n_rows, n_removed;
    /* a deep model: its network (NULL otherwise) and the dense blocks read so far (in key
     * order, so block i is the i-th), dense_blocks × dim floats */
    const struct spw_model *model;
    float *blocks;
    uint32_t n_blocks;
};

static spw_err_t npy_header(struct out_file *o, uint64_t n)
{
    char dict[NPY_HEADER];
    int len;
    if (o->cols)
        len = snprintf(dict, sizeof(dict),
                       "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ", %u), }",
                       o->descr, n, o->cols);
    else
        len = snprintf(dict, sizeof(dict),
                       "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }",
                       o->descr, n);
    const size_t h = NPY_HEADER - 10;
    if (len < 0 || (size_t)len >= h)
        return SPW_ERR_INVALID;
    memset(dict + len, ' ', h - 1 - (size_t)len);
    dict[h - 1] = '\n';
    static const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    unsigned char hl[2] = {(unsigned char)(h & 0xff), (unsigned char)(h >> 8)};
    if (fseek(o->f, 0, SEEK_SET) != 0 || fwrite(magic, 1, 8, o->f) != 8 ||
        fwrite(hl, 1, 2, o->f) != 2 || fwrite(dict, 1, h, o->f) != h)
        return SPW_ERR_IO;
    return SPW_OK;
}

static spw_err_t out_open(struct output *out, struct out_file *o, const char *name,
                          const char *descr, uint32_t cols, char *errstr, size_t errstr_size)
{
    o->name = name;
    o->descr = descr;
    o->cols = cols;
    if (snprintf(o->path, sizeof(o->path), "%s/%s", out->dir, name) >= (int)sizeof(o->path))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", out->dir);
    if (!(o->f = fopen(o->path, "wb")))
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "%s: %s", o->path, strerror(errno));
    out->opened[out->n_opened++] = o;
    if (descr && npy_header(o, 0) != SPW_OK)
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "%s: %s", o->path, strerror(errno));
    return SPW_OK;
}

/* Closes o, its npy header rewritten for n entries first. */
static spw_err_t out_close(struct out_file *o, uint64_t n, char *errstr, size_t errstr_size)
{
    if (!o->f)
        return SPW_OK;
    bool ok = (!o->descr || npy_header(o, n) == SPW_OK) && fflush(o->f) == 0 && !ferror(o->f);
    ok = fclose(o->f) == 0 && ok;
    o->f = NULL;
    if (!ok)
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "%s: %s", o->path, strerror(errno));
    return SPW_OK;
}

/* The output directory: made (with its parents) unless it exists, when it must be empty. */
static spw_err_t output_dir(struct output *out, char *errstr, size_t errstr_size)
{
    DIR *d = opendir(out->dir);
    if (d) {
        struct dirent *e;
        bool empty = true;
        while (empty && (e = readdir(d)))
            empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        closedir(d);
        if (!empty)
            return spw_errf(SPW_ERR_EXISTS, errstr, errstr_size,
                            "export.to=%s is not empty (an export writes a directory of its own)",
                            out->dir);
        return SPW_OK;
    }
    if (errno != ENOENT)
        return spw_errf(errno == ENOTDIR ? SPW_ERR_EXISTS : SPW_ERR_IO, errstr, errstr_size,
                        "export.to=%s: %s", out->dir, strerror(errno));
    if (spw_fs_mkdir_p(out->dir) != SPW_OK)
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "export.to=%s: %s", out->dir,
                        strerror(errno));
    out->made_dir = true;
    return SPW_OK;
}

static spw_err_t output_open(struct output *out, bool since, char *errstr, size_t errstr_size)
{
    spw_err_t rc;
    bool tsv = out->format == SPW_EXPORT_TSV;
    if (tsv) {
        rc = out_open(out, &out->rows, "rows.tsv", NULL, 0, errstr, errstr_size);
        if (rc == SPW_OK && since)
            rc = out_open(out, &out->removed, "removed.tsv", NULL, 0, errstr, errstr_size);
    } else {
        rc = out_open(out, &out->keys, "keys.npy", "<u8", 0, errstr, errstr_size);
        if (rc == SPW_OK)
            rc = out_open(out, &out->weights, "weights.npy", "<f4", out->dim, errstr, errstr_size);
        if (rc == SPW_OK && since)
            rc = out_open(out, &out->removed, "removed.npy", "<u8", 0, errstr, errstr_size);
    }
    if (rc == SPW_OK && out->model)
        rc = out_open(out, &out->dense, tsv ? "dense.tsv" : "dense.npy", tsv ? NULL : "<f4", 0,
                      errstr, errstr_size);
    return rc;
}

/* Little-endian bytes of what the host holds (every platform Sparrow builds on is little-endian;
 * the npy descriptors say '<' so that a reader elsewhere never guesses). */
static spw_err_t put_row(struct output *out, uint64_t key, const float *w)
{
    out->n_rows++;
    if (out->format == SPW_EXPORT_NPY) {
        if (fwrite(&key, sizeof(key), 1, out->keys.f) != 1 ||
            fwrite(w, sizeof(float), out->dim, out->weights.f) != out->dim)
            return SPW_ERR_IO;
        return SPW_OK;
    }
    if (fprintf(out->rows.f, "%" PRIu64, key) < 0)
        return SPW_ERR_IO;
    for (uint32_t i = 0; i < out->dim; i++)
        if (fprintf(out->rows.f, "\t%.9g", (double)w[i]) < 0)
            return SPW_ERR_IO;
    return fputc('\n', out->rows.f) == EOF ? SPW_ERR_IO : SPW_OK;
}

/* A dense block of a deep model's checkpoint (key spw_key_is_dense) kept for the dense file:
 * blocks come in key order, so the i-th is block i; one past the network's is another network. */
static spw_err_t take_block(struct output *out, uint64_t key, const float *w, char *errstr,
                            size_t errstr_size)
{
    uint32_t block = (uint32_t)(key - SPW_DENSE_KEY_BASE);
    if (block != out->n_blocks || block >= out->model->dense_blocks)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "the checkpoint's dense blocks are not the model's (%s, %u blocks): "
                        "block %u %s",
                        spw_model_kind_name(out->model->kind), out->model->dense_blocks, block,
                        block >= out->model->dense_blocks ? "is past its last" : "comes early");
    memcpy(out->blocks + (size_t)block * out->dim, w, out->dim * sizeof(float));
    out->n_blocks++;
    return SPW_OK;
}

/* The network's weights (the seeded initial weights plus the blocks) into the dense file. */
static spw_err_t put_dense(struct output *out, size_t *params_written, char *errstr,
                           size_t errstr_size)
{
    if (!out->model)
        return SPW_OK;
    if (out->n_blocks != out->model->dense_blocks)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "the checkpoint holds %u dense blocks, the model (%s) %u: trainer.* "
                        "must describe the network that was trained",
                        out->n_blocks, spw_model_kind_name(out->model->kind),
                        out->model->dense_blocks);
    size_t n = spw_model_dense_params(out->model);
    float *p = malloc(n * sizeof(float));
    if (!p)
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
    spw_model_dense_init(out->model, p);
    for (size_t i = 0; i < n; i++)
        p[i] += out->blocks[i];
    bool ok = true;
    if (out->format == SPW_EXPORT_NPY)
        ok = fwrite(p, sizeof(float), n, out->dense.f) == n;
    for (size_t i = 0; ok && out->format == SPW_EXPORT_TSV && i < n; i++)
        ok = fprintf(out->dense.f, "%.9g\n", (double)p[i]) >= 0;
    free(p);
    if (!ok)
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "%s: %s", out->dense.path,
                        strerror(errno));
    *params_written = n;
    return SPW_OK;
}

static spw_err_t put_removed(struct output *out, uint64_t key)
{
    out->n_removed++;
    if (out->format == SPW_EXPORT_NPY)
        return fwrite(&key, sizeof(key), 1, out->removed.f) == 1 ? SPW_OK : SPW_ERR_IO;
    return fprintf(out->removed.f, "%" PRIu64 "\n", key) < 0 ? SPW_ERR_IO : SPW_OK;
}

/* Removes everything the export wrote (after a failure). */
static void output_discard(struct output *out)
{
    for (size_t i = 0; i < out->n_opened; i++) {
        if (out->opened[i]->f)
            fclose(out->opened[i]->f);
        out->opened[i]->f = NULL;
        unlink(out->opened[i]->path);
    }
    char meta[PATH_MAX];
    if (snprintf(meta, sizeof(meta), "%s/metadata.json", out->dir) < (int)sizeof(meta))
        unlink(meta);
    if (out->made_dir)
        rmdir(out->dir);
}

/* metadata.json's "dense" member: what a reader needs to run the network on the exported rows. */
static void write_dense_metadata(FILE *f, const struct output *out,
                                 const struct spw_export_result *res)
{
    const struct spw_model *m = out->model;
    char desc[SPW_MODEL_DESC_MAX];
    if (spw_model_describe(m, desc, sizeof(desc)) < 0)
        desc[0] = '\0';
    fprintf(f,
            "  \"dense\": {\n"
            "    \"file\": \"%s\",\n"
            "    \"params\": %zu,\n"
            "    \"blocks\": %u,\n"
            "    \"description\": \"%s\",\n"
            "    \"in_dim\": %u,\n"
            "    \"fields\": [",
            out->dense.name, res->dense_params, m->dense_blocks, desc, m->dense.in_dim);
    for (uint32_t i = 0; i < m->n_fields; i++)
        fprintf(f, "%s{\"id\": %u, \"pooling\": \"%s\"}", i ? ", " : "", m->fields[i].id,
                m->fields[i].pooling == SPW_POOL_MEAN ? "mean" : "sum");
    fprintf(f, "],\n    \"layers\": [");
    size_t layers = spw_dense_spec_layer_count(&m->dense);
    for (size_t i = 0; i < layers; i++) {
        struct spw_dense_layer l;
        spw_dense_spec_layer_at(&m->dense, i, &l);
        const char *kind = l.kind == SPW_DENSE_CROSS    ? "cross"
                           : l.kind == SPW_DENSE_HIDDEN ? "hidden"
                                                        : "output";
        fprintf(f,
                "%s\n      {\"kind\": \"%s\", \"in\": %u, \"out\": %u, \"weight_offset\": %zu, "
                "\"bias_offset\": %zu}",
                i ? "," : "", kind, l.in, l.out, l.w_off, l.b_off);
    }
    fprintf(f, "\n    ]\n  },\n");
}

static spw_err_t write_metadata(const struct output *out, const struct epoch_rows *e,
                                const struct spw_export_result *res, char *errstr,
                                size_t errstr_size)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    if (snprintf(path, sizeof(path), "%s/metadata.json", out->dir) >= (int)sizeof(path))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", out->dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "%s: %s", tmp, strerror(errno));
    bool npy = out->format == SPW_EXPORT_NPY, since = res->since > 0;
    char since_text[24] = "null";
    if (since)
        snprintf(since_text, sizeof(since_text), "%" PRIu64, res->since);
    fprintf(f,
            "{\n"
            "  \"format\": \"sparrow-export\",\n"
            "  \"format_version\": 1,\n"
            "  \"files_format\": \"%s\",\n"
            "  \"model\": \"%s\",\n"
            "  \"dim\": %u,\n"
            "  \"latent_dim\": %u,\n"
            "  \"epoch\": %" PRIu64 ",\n"
            "  \"since_epoch\": %s,\n"
            "  \"rows\": %" PRIu64 ",\n"
            "  \"removed\": %" PRIu64 ",\n"
            "  \"unchanged\": %" PRIu64 ",\n"
            "  \"shards\": %u,\n"
            "  \"example_count\": %" PRIu64 ",\n"
            "  \"created_ms\": %" PRId64 ",\n"
            "  \"optimizer\": \"%s\",\n"
            "  \"bias_key\": 0,\n"
            "  \"key_hash\": \"xxh64\",\n"
            "  \"key_hash_detail\": \"key = XXH64(value bytes, seed = field id); field id = the "
            "name when decimal <= 2147483647, else XXH64(name bytes, seed 0) & 0x7fffffff, unless "
            "a schema maps it\",\n"
            "  \"shard_hash\": \"jump_hash(splitmix64_mix(key), shards)\",\n",
            npy ? "npy" : "tsv", res->model, res->dim, res->dim > 1 ? res->dim - 1 : 0, res->epoch,
            since_text, res->rows, res->removed, res->unchanged, res->shards, e->m.example_count,
            e->m.created_ms, e->optimizer ? e->optimizer : "");
    if (out->model)
        write_dense_metadata(f, out, res);
    else
        fprintf(f, "  \"dense\": null,\n");
    /* the files as output_open named them */
    if (npy)
        fprintf(f, "  \"files\": {\"keys\": \"%s\", \"weights\": \"%s\"", out->keys.name,
                out->weights.name);
    else
        fprintf(f, "  \"files\": {\"rows\": \"%s\"", out->rows.name);
    if (since)
        fprintf(f, ", \"removed\": \"%s\"", out->removed.name);
    if (out->model)
        fprintf(f, ", \"dense\": \"%s\"", out->dense.name);
    fprintf(f, "}\n}\n");
    bool ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return spw_errf(SPW_ERR_IO, errstr, errstr_size, "%s: %s", path, strerror(errno));
    }
    return SPW_OK;
}

/* ---- the export ---- */

/* The root and epoch conf names (an epoch directory gives both; 0: LATEST). */
static spw_err_t resolve(const struct spw_export_conf *conf, char *root, size_t root_size,
                         uint64_t *epoch, char *errstr, size_t errstr_size)
{
    enum spw_ckpt_path_kind kind;
    uint64_t path_epoch = 0;
    if (spw_ckpt_path_split(conf->checkpoint, &kind, root, root_size, &path_epoch) != SPW_OK)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long",
                        conf->checkpoint);
    *epoch = conf->epoch;
    if (kind == SPW_CKPT_PATH_EPOCH) {
        if (conf->epoch && conf->epoch != path_epoch)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "export.epoch=%" PRIu64 " but export.checkpoint names epoch %" PRIu64,
                            conf->epoch, path_epoch);
        *epoch = path_epoch;
    } else {
        spw_err_t rc = spw_tools__ckpt_root(conf->checkpoint, root, root_size, errstr, errstr_size);
        if (rc != SPW_OK)
            return rc;
    }
    if (*epoch == 0) {
        spw_err_t rc = spw_tools__ckpt_latest(root, epoch, errstr, errstr_size);
        if (rc != SPW_OK)
            return rc;
    }
    if (conf->since && conf->since >= *epoch)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "export.since=%" PRIu64 " must be an older epoch than %" PRIu64,
                        conf->since, *epoch);
    return SPW_OK;
}

static spw_err_t stop_check(uint64_t n)
{
    return n % STOP_CHECK_ROWS == 0 && spw_signal_stop_requested() ? SPW_ERR_STOPPED : SPW_OK;
}

/* The next feature row of er (SPW_ERR_EOF after the last). With a deep model the dense blocks
 * on the way are taken for the dense file (keep_dense) or passed over; without one a key of the
 * dense range is a feature's (a hash collision, as on the shards), except block 0's: the
 * checkpoint of a deep model, refused (as eval refuses it). */
static spw_err_t feature_next(struct output *out, struct epoch_rows *er, bool keep_dense,
                              char *errstr, size_t errstr_size)
{
    for (;;) {
        spw_err_t rc = epoch_next(er, errstr, errstr_size);
        if (rc != SPW_OK || !spw_key_is_dense(er->key))
            return rc;
        if (!out->model) {
            if (er->key != spw_dense_block_key(0))
                return SPW_OK;
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "the checkpoint holds a deep model's dense blocks: give its model "
                            "(--set trainer.model=deepfm|dcnv2 and the trainer's trainer.fields, "
                            "trainer.mlp, ...)");
        }
        if (keep_dense && (rc = take_block(out, er->key, er->w, errstr, errstr_size)) != SPW_OK)
            return rc;
    }
}

/* Every row of cur. */
static spw_err_t export_all(struct output *out, struct epoch_rows *cur, char *errstr,
                            size_t errstr_size)
{
    spw_err_t rc;
    for (uint64_t n = 1;; n++) {
        if ((rc = feature_next(out, cur, true, errstr, errstr_size)) != SPW_OK)
            return rc == SPW_ERR_EOF ? SPW_OK : rc;
        if (put_row(out, cur->key, cur->w) != SPW_OK)
            return SPW_ERR_IO;
        if (stop_check(n) != SPW_OK)
            return spw_errf(SPW_ERR_STOPPED, errstr, errstr_size, "stopped");
    }
}

/* The rows of cur new or changed against old, and old's keys cur lacks: both in key order. */
static spw_err_t export_since(struct output *out, struct epoch_rows *cur, struct epoch_rows *old,
                              uint64_t *unchanged, char *errstr, size_t errstr_size)
{
    spw_err_t ra = feature_next(out, cur, true, errstr, errstr_size);
    spw_err_t rb = feature_next(out, old, false, errstr, errstr_size);
    for (uint64_t n = 1;; n++) {
        if ((ra != SPW_OK && ra != SPW_ERR_EOF) || (rb != SPW_OK && rb != SPW_ERR_EOF))
            return ra != SPW_OK && ra != SPW_ERR_EOF ? ra : rb;
        bool a = ra == SPW_OK, b = rb == SPW_OK;
        if (!a && !b)
            return SPW_OK;
        if (a && (!b || cur->key < old->key)) { /* new in cur */
            if (put_row(out, cur->key, cur->w) != SPW_OK)
                return SPW_ERR_IO;
            ra = feature_next(out, cur, true, errstr, errstr_size);
        } else if (!a || old->key < cur->key) { /* gone from cur */
            if (put_removed(out, old->key) != SPW_OK)
                return SPW_ERR_IO;
            rb = feature_next(out, old, false, errstr, errstr_size);
        } else { /* in both: changed when any weight's bits differ */
            if (memcmp(cur->w, old->w, cur->dim * sizeof(float)) != 0) {
                if (put_row(out, cur->key, cur->w) != SPW_OK)
                    return SPW_ERR_IO;
            } else {
                ++*unchanged;
            }
            ra = feature_next(out, cur, true, errstr, errstr_size);
            rb = feature_next(out, old, false, errstr, errstr_size);
        }
        if (stop_check(n) != SPW_OK)
            return spw_errf(SPW_ERR_STOPPED, errstr, errstr_size, "stopped");
    }
}

spw_err_t spw_export_run(const struct spw_export_conf *conf, struct spw_export_result *res,
                         char *errstr, size_t errstr_size)
{
    memset(res, 0, sizeof(*res));
    char root[PATH_MAX];
    uint64_t epoch = 0;
    spw_err_t rc = resolve(conf, root, sizeof(root), &epoch, errstr, errstr_size);
    if (rc != SPW_OK)
        return rc;
    struct epoch_rows cur, old;
    memset(&old, 0, sizeof(old));
    struct output out = {.dir = conf->to,
                         .format = conf->format,
                         .model = spw_model_is_deep(&conf->model) ? &conf->model : NULL};
    if ((rc = epoch_open(&cur, root, epoch, conf->log_dir, errstr, errstr_size)) != SPW_OK)
        goto out_close;
    if (conf->since) {
        if ((rc = epoch_open(&old, root, conf->since, conf->log_dir, errstr, errstr_size)) !=
            SPW_OK)
            goto out_close;
        if (old.dim != cur.dim) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "epoch %" PRIu64 " has rows of %u floats, epoch %" PRIu64 " of %u",
                          conf->since, old.dim, epoch, cur.dim);
            goto out_close;
        }
    }
    res->epoch = epoch;
    res->since = conf->since;
    res->dim = out.dim = cur.dim;
    res->shards = cur.n;
    if (out.model) {
        if (out.model->dim != cur.dim) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "the checkpoint's rows have %u floats, the model's (%s, "
                          "trainer.latent_dim=%u) %u",
                          cur.dim, spw_model_kind_name(out.model->kind), out.model->latent_dim,
                          out.model->dim);
            goto out_close;
        }
        if (!(out.blocks = calloc((size_t)out.model->dense_blocks * cur.dim, sizeof(float)))) {
            rc = spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "out of memory");
            goto out_close;
        }
        snprintf(res->model, sizeof(res->model), "%s", spw_model_kind_name(out.model->kind));
    } else if (cur.m.model[0])
        snprintf(res->model, sizeof(res->model), "%s", cur.m.model);
    else /* serve's and eval's inference: dim 1 is LR, 1 + k is FM */
        snprintf(res->model, sizeof(res->model), "%s", cur.dim == 1 ? "lr" : "fm");
    if ((rc = output_dir(&out, errstr, errstr_size)) != SPW_OK)
        goto out_close;
    if ((rc = output_open(&out, conf->since > 0, errstr, errstr_size)) != SPW_OK)
        goto out_discard;
    rc = conf->since ? export_since(&out, &cur, &old, &res->unchanged, errstr, errstr_size)
                     : export_all(&out, &cur, errstr, errstr_size);
    if (rc == SPW_ERR_IO)
        spw_errf(rc, errstr, errstr_size, "writing under %s: %s", out.dir, strerror(errno));
    if (rc == SPW_OK)
        rc = put_dense(&out, &res->dense_params, errstr, errstr_size);
    for (size_t i = 0; i < out.n_opened && rc == SPW_OK; i++) {
        struct out_file *o = out.opened[i];
        uint64_t n = o == &out.removed ? out.n_removed
                     : o == &out.dense ? res->dense_params
                                       : out.n_rows;
        rc = out_close(o, n, errstr, errstr_size);
    }
    res->rows = out.n_rows;
    res->removed = out.n_removed;
    if (rc == SPW_OK)
        rc = write_metadata(&out, &cur, res, errstr, errstr_size);
    if (rc == SPW_OK)
        goto out_close;
out_discard:
    output_discard(&out);
out_close:
    free(out.blocks);
    epoch_close(&cur);
    epoch_close(&old);
    return rc;
}
