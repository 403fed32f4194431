/* Shard checkpoints as rows: a reader that iterates the rows of one shard checkpoint and a writer
 * that creates a shard checkpoint from rows, in the shard's own format (for `sparrow reshard`,
 * serve's bootstrap and tests). */
#ifndef SPARROW_PS_CKPT_H
#define SPARROW_PS_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"
#include "sparrow/pserver.h"

/*
 * Conventions: pointers are non-NULL unless said otherwise. A reader or writer is owned by one
 * thread; nothing in it is locked. Different readers and writers may be used from different
 * threads at once. The decoding helpers are pure and thread-safe.
 *
 * A shard checkpoint is a directory (<root>/checkpoints/<epoch>/shard-<i>, laid out by
 * sparrow/ckpt_layout.h) holding a RocksDB checkpoint and a CHECKSUM file over its files
 * (pserver/src/checkpoint.c). Its rows:
 *   key "\0meta" (5 bytes)   value "sparrow-ps 2 dim=<dim> optimizer=<name>"
 *   key 8 bytes, the feature key big-endian
 *   value   offset  size      field
 *           0       4         version       applied updates (wraps)
 *           4       4         last_update   seconds
 *           8       4         count         pushes that touched the row
 *           12      4·dim     weights
 *           12+4dim 4·slots   optimizer state (spw_ps_slot_floats), host byte order
 */

/* What every row of a checkpoint has in common. */
struct spw_ps_ckpt_meta {
    uint32_t dim; /* 1..SPW_PS_MAX_DIM */
    enum spw_ps_optimizer optimizer;
};

/* Floats of one row: weights then optimizer state. */
size_t spw_ps_ckpt_row_floats(const struct spw_ps_ckpt_meta *meta);

/* One row. data holds spw_ps_ckpt_row_floats floats (weights, then optimizer state). */
struct spw_ps_ckpt_row {
    uint64_t key;
    uint32_t version;
    uint32_t last_update;
    uint32_t count;
    const float *data;
};

/* Parses the meta value (len bytes, not NUL-terminated) into *meta. SPW_ERR_VERSION for another
 * format, SPW_ERR_CORRUPT for a malformed one. Untrusted input. */
spw_err_t spw_ps_ckpt_meta_parse(const void *value, size_t len, struct spw_ps_ckpt_meta *meta);

/* Decodes one stored (key, value) pair of a checkpoint with meta into *row, copying the floats
 * into data (spw_ps_ckpt_row_floats floats, caller-owned); row->data points at data.
 * SPW_ERR_CORRUPT when the key is not 8 bytes or the value not exactly the row's size.
 * Untrusted input. */
spw_err_t spw_ps_ckpt_row_decode(const struct spw_ps_ckpt_meta *meta, const void *key, size_t klen,
                                 const void *value, size_t vlen, struct spw_ps_ckpt_row *row,
                                 float *data);

/* ---- reader ---- */

typedef struct spw_ps_ckpt_reader spw_ps_ckpt_reader_t;

/*
 * Opens the shard checkpoint directory dir read-only after verifying it: its CHECKSUM file must
 * match its files and, when want_checksum is not NULL, name exactly want_checksum (the
 * manifest's). log_dir receives RocksDB's info log (nothing is written into dir); NULL: a
 * temporary directory of the reader's own, removed at close. NULL with errstr on failure; *err
 * (may be NULL) receives SPW_ERR_NOT_FOUND (no such checkpoint), SPW_ERR_CORRUPT (it does not
 * verify, or its meta key is missing or malformed), SPW_ERR_VERSION (another format) or
 * SPW_ERR_IO / SPW_ERR_STORE / SPW_ERR_NOMEM.
 */
spw_ps_ckpt_reader_t *spw_ps_ckpt_reader_open(const char *dir, const char *want_checksum,
                                              const char *log_dir, spw_err_t *err, char *errstr,
                                              size_t errstr_size);

/* The checkpoint's dim and optimizer. Owned by the reader. */
const struct spw_ps_ckpt_meta *spw_ps_ckpt_reader_meta(const spw_ps_ckpt_reader_t *reader);

/* The checkpoint's checksum (16 hex digits). Owned by the reader. */
const char *spw_ps_ckpt_reader_checksum(const spw_ps_ckpt_reader_t *reader);

/* The next row in key order into *row (row->data owned by the reader, valid until the next call).
 * SPW_ERR_EOF after the last row; SPW_ERR_CORRUPT (a malformed key or value) or SPW_ERR_STORE
 * (RocksDB, e.g. a block checksum) with errstr. Errors are sticky. */
spw_err_t spw_ps_ckpt_reader_next(spw_ps_ckpt_reader_t *reader, struct spw_ps_ckpt_row *row,
                                  char *errstr, size_t errstr_size);

/* Closes the database and removes the reader's temporary log directory. NULL is a no-op. */
void spw_ps_ckpt_reader_close(spw_ps_ckpt_reader_t *reader);

/* ---- writer ---- */

typedef struct spw_ps_ckpt_writer spw_ps_ckpt_writer_t;

/*
 * Starts a shard checkpoint that will appear at dir (which must not exist; its parent must) for
 * rows of meta. The rows are staged in a scratch database "<dir>.build" (removed at finish or
 * close). NULL with errstr on failure: SPW_ERR_EXISTS when dir exists, else I/O or RocksDB
 * errors (*err, may be NULL, receives the code).
 */
spw_ps_ckpt_writer_t *spw_ps_ckpt_writer_open(const char *dir, const struct spw_ps_ckpt_meta *meta,
                                              spw_err_t *err, char *errstr, size_t errstr_size);

/* Adds one row (data: spw_ps_ckpt_row_floats floats, copied). Rows may come in any order; a key
 * added twice keeps the last row. SPW_ERR_STORE with errstr when RocksDB fails. */
spw_err_t spw_ps_ckpt_writer_add(spw_ps_ckpt_writer_t *writer, const struct spw_ps_ckpt_row *row,
                                 char *errstr, size_t errstr_size);

/* Writes the checkpoint: dir appears atomically (renamed from a temporary directory) with its
 * CHECKSUM, exactly as a shard's own checkpoint. *info (may be NULL) receives the path, the exact
 * row count, the bytes and the checksum (info->epoch is 0). The writer can only be closed
 * afterwards. On failure nothing of dir is left. */
spw_err_t spw_ps_ckpt_writer_finish(spw_ps_ckpt_writer_t *writer,
                                    struct spw_ps_checkpoint_info *info, char *errstr,
                                    size_t errstr_size);

/* Frees the writer; before a successful finish, removes everything it wrote. NULL is a no-op. */
void spw_ps_ckpt_writer_close(spw_ps_ckpt_writer_t *writer);

#endif
