/* tools: where a checkpoint given on a command line lives (a root, its checkpoints/ directory)
 * and the epochs present, for the messages of `sparrow eval` and `sparrow export`. Not API. */
#ifndef SPARROW_TOOLS_CKPT_FIND_INT_H
#define SPARROW_TOOLS_CKPT_FIND_INT_H

#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"

/* The checkpoint root of dir: dir itself when it holds checkpoints/, its parent when dir is a
 * directory named "checkpoints". SPW_ERR_NOT_FOUND (no such directory, or neither) /
 * SPW_ERR_IO / SPW_ERR_INVALID with errstr naming dir. Thread-safe. */
spw_err_t spw_tools__ckpt_root(const char *dir, char *root, size_t root_size, char *errstr,
                               size_t errstr_size);

/* The epoch root's LATEST names, into *epoch. Otherwise the error, with errstr naming LATEST and,
 * when it is missing, the epochs present (give --epoch). Thread-safe. */
spw_err_t spw_tools__ckpt_latest(const char *root, uint64_t *epoch, char *errstr,
                                 size_t errstr_size);

/* Appends " (epochs present: 7 6 5)" or " (no epoch present)" to msg (size bytes). */
void spw_tools__ckpt_list_epochs(const char *root, char *msg, size_t size);

#endif
