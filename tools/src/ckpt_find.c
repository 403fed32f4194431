/* tools: a checkpoint's root from a command-line path, and the epochs present (ckpt_find_int.h). */
#include "ckpt_find_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/coordinator.h"

/* Most epochs named in a "not found" message. */
#define EPOCHS_LISTED 16u

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

spw_err_t spw_tools__ckpt_root(const char *dir, char *root, size_t root_size, char *errstr,
                               size_t errstr_size)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return spw_errf(errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO, errstr, errstr_size,
                        "checkpoint directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return spw_errf(SPW_ERR_NOT_FOUND, errstr, errstr_size,
                        "checkpoint directory %s is not a directory", dir);
    char sub[PATH_MAX];
    if (spw_ckpt_dir_path(sub, sizeof(sub), dir) != SPW_OK)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", dir);
    if (is_dir(sub)) {
        snprintf(root, root_size, "%s", dir);
        return SPW_OK;
    }
    enum spw_ckpt_path_kind kind;
    uint64_t epoch;
    if (spw_ckpt_path_split(dir, &kind, root, root_size, &epoch) != SPW_OK)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: path too long", dir);
    if (kind != SPW_CKPT_PATH_DIR)
        return spw_errf(SPW_ERR_NOT_FOUND, errstr, errstr_size,
                        "%s holds no " SPW_CKPT_DIR
                        "/ directory (give the coordinator's checkpoint "
                        "root, pserver.checkpoint.dir, or its " SPW_CKPT_DIR "/ directory)",
                        dir);
    return SPW_OK;
}

void spw_tools__ckpt_list_epochs(const char *root, char *msg, size_t size)
{
    uint64_t epochs[EPOCHS_LISTED];
    long n = spw_ckpt_epochs_list(root, epochs, EPOCHS_LISTED);
    size_t len = strlen(msg);
    if (len + 1 >= size)
        return;
    if (n <= 0) {
        snprintf(msg + len, size - len, " (no epoch present)");
        return;
    }
    len += (size_t)snprintf(msg + len, size - len, " (epochs present:");
    for (long i = 0; i < n && i < (long)EPOCHS_LISTED && len < size; i++)
        len += (size_t)snprintf(msg + len, size - len, " %" PRIu64, epochs[i]);
    if (len < size)
        snprintf(msg + len, size - len, "%s)", n > (long)EPOCHS_LISTED ? " ..." : "");
}

spw_err_t spw_tools__ckpt_latest(const char *root, uint64_t *epoch, char *errstr,
                                 size_t errstr_size)
{
    spw_err_t rc = spw_coord_latest_read(root, epoch);
    if (rc == SPW_OK)
        return SPW_OK;
    char latest[PATH_MAX];
    spw_ckpt_latest_path(latest, sizeof(latest), root);
    snprintf(errstr, errstr_size, "%s: %s", latest,
             rc == SPW_ERR_NOT_FOUND ? "missing (no complete checkpoint; give --epoch)"
                                     : spw_err_str(rc));
    if (rc == SPW_ERR_NOT_FOUND)
        spw_tools__ckpt_list_epochs(root, errstr, errstr_size);
    return rc;
}
