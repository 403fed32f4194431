/* Filesystem helpers every module needs: create a directory with its parents, remove a tree. */
#ifndef SPARROW_FS_H
#define SPARROW_FS_H

#include "sparrow/err.h"

/*
 * Conventions: paths are NUL-terminated and non-NULL; nothing is allocated or kept. Both
 * functions are thread-safe (they touch only the filesystem), but two threads working on the
 * same tree race as any two processes would. errno is left as the failing call set it, so that
 * callers can name the cause with strerror(errno).
 */

/* Creates path and every missing parent with mode 0755 (mkdir -p). SPW_OK when path exists
 * afterwards (as a directory or not: a file in the way shows up at first use); SPW_ERR_INVALID
 * when path is empty or longer than PATH_MAX; SPW_ERR_IO when a mkdir fails otherwise. */
spw_err_t spw_fs_mkdir_p(const char *path);

/* Removes path and, when it is a directory (a symbolic link to one included), everything under
 * it; links below path are removed, never followed (rm -r). Best effort: what can be removed is,
 * even after a failure. SPW_OK when all was removed, SPW_ERR_NOT_FOUND when path did not exist,
 * SPW_ERR_IO when something stayed. */
spw_err_t spw_fs_remove_tree(const char *path);

#endif
