/* The checkpoint directory layout: the one place that spells the names under a checkpoint root
 * (checkpoints/, epoch directories, shard-<i>, MANIFEST, LATEST, CHECKSUM) and walks them.
 *
 * A module of its own (sparrow_ckpt, over common only) rather than part of common/ or pserver/:
 * the layout is an on-disk format with writers in two modules that do not link each other (the
 * pserver writes the shard checkpoints, the coordinator the MANIFEST and LATEST and prunes whole
 * epochs) and readers in three more (serve, tools, `sparrow reshard`); common/ holds helpers, not
 * formats. Each file's contents stay with the module that writes it (noted below). */
#ifndef SPARROW_CKPT_LAYOUT_H
#define SPARROW_CKPT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"

/*
 * The tree under a checkpoint root (pserver.checkpoint.dir = coordinator.checkpoint.dir):
 *
 *   <root>/
 *     checkpoints/                    SPW_CKPT_DIR
 *       LATEST                        newest complete epoch, decimal + "\n" (the coordinator,
 *                                     coordinator/src/files.c; LATEST.tmp while replaced)
 *       <E>/                          one epoch: E >= 1 in canonical decimal (no leading zero)
 *         MANIFEST                    Kafka offsets, update offsets, example count and every
 *                                     shard's checksum and rows (the coordinator, files.c;
 *                                     MANIFEST.tmp while written); an epoch without one is
 *                                     incomplete, and pruned
 *         shard-<i>/                  shard i's checkpoint: a RocksDB checkpoint (the pserver,
 *                                     sparrow/ps_ckpt.h for its rows)
 *           CHECKSUM                  digest of every other file (pserver/src/checkpoint.c)
           SKETCH                    the admission count-min sketch, when admission is on
                                     (pserver/src/state.c; absent in older checkpoints)
           DEDUP                     the push de-duplication windows per trainer (state.c;
                                     absent in older checkpoints and in rewritten ones)
 *         .shard-<i>.tmp/             shard i's checkpoint being written, renamed to shard-<i>
 *
 * Conventions: pointers are non-NULL; paths are written into caller buffers (out, size) and a
 * path that does not fit is SPW_ERR_INVALID with out left undefined. SPW_CKPT_PATH_MAX is enough
 * for any root of up to 3900 bytes. Every function is thread-safe: the path functions are pure,
 * the others only read or remove files (two processes pruning one root race as rm -r would).
 */

#define SPW_CKPT_DIR      "checkpoints"
#define SPW_CKPT_MANIFEST "MANIFEST"
#define SPW_CKPT_LATEST   "LATEST"
#define SPW_CKPT_CHECKSUM "CHECKSUM"
#define SPW_CKPT_SKETCH   "SKETCH"
#define SPW_CKPT_DEDUP    "DEDUP"
#define SPW_CKPT_PATH_MAX 4096

/* <root>/checkpoints. */
spw_err_t spw_ckpt_dir_path(char *out, size_t size, const char *root);

/* <root>/checkpoints/LATEST. */
spw_err_t spw_ckpt_latest_path(char *out, size_t size, const char *root);

/* <root>/checkpoints/<epoch>. */
spw_err_t spw_ckpt_epoch_path(char *out, size_t size, const char *root, uint64_t epoch);

/* <root>/checkpoints/<epoch>/MANIFEST. */
spw_err_t spw_ckpt_manifest_path(char *out, size_t size, const char *root, uint64_t epoch);

/* <root>/checkpoints/<epoch>/shard-<shard>. */
spw_err_t spw_ckpt_shard_path(char *out, size_t size, const char *root, uint64_t epoch,
                              uint32_t shard);

/* <root>/checkpoints/<epoch>/.shard-<shard>.tmp: where a shard stages its checkpoint. */
spw_err_t spw_ckpt_shard_tmp_path(char *out, size_t size, const char *root, uint64_t epoch,
                                  uint32_t shard);

/* <shard_dir>/CHECKSUM. */
spw_err_t spw_ckpt_checksum_path(char *out, size_t size, const char *shard_dir);

/* True when name (one path component) is an epoch directory's: canonical decimal of 1..2^63-1;
 * *epoch receives it. Untrusted input. */
bool spw_ckpt_epoch_parse(const char *name, uint64_t *epoch);

/* What a path names, by its last components alone (nothing is read). */
enum spw_ckpt_path_kind {
    SPW_CKPT_PATH_OTHER, /* anything else: maybe a root */
    SPW_CKPT_PATH_DIR,   /* ".../checkpoints" */
    SPW_CKPT_PATH_EPOCH, /* ".../checkpoints/<E>" */
};

/* Classifies path (trailing slashes ignored). For DIR and EPOCH, root receives the directory
 * above checkpoints/ ("." or "/" when there is none), and for EPOCH *epoch the epoch; for OTHER
 * root receives path without its trailing slashes. SPW_ERR_INVALID when root does not fit. */
spw_err_t spw_ckpt_path_split(const char *path, enum spw_ckpt_path_kind *kind, char *root,
                              size_t root_size, uint64_t *epoch);

/* The epochs under <root>/checkpoints (directory names spw_ckpt_epoch_parse accepts), newest
 * first, into epochs (n_max of them at most, caller-owned; NULL when n_max is 0). Returns how many
 * there are (may exceed n_max; 0 when checkpoints/ does not exist), or SPW_ERR_IO / SPW_ERR_NOMEM /
 * SPW_ERR_INVALID. */
long spw_ckpt_epochs_list(const char *root, uint64_t *epochs, size_t n_max);

/* True when <root>/checkpoints/<epoch>/MANIFEST exists (the epoch was completed). */
bool spw_ckpt_epoch_has_manifest(const char *root, uint64_t epoch);

/* Removes <root>/checkpoints/<epoch> and everything in it (the shards' checkpoints included).
 * SPW_OK, SPW_ERR_NOT_FOUND, SPW_ERR_IO (errno set; what could go went) or SPW_ERR_INVALID. */
spw_err_t spw_ckpt_epoch_remove(const char *root, uint64_t epoch);

#endif
