/* Filesystem helpers (sparrow/fs.h): mkdir -p and rm -r. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/fs.h"

spw_err_t spw_fs_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(buf))
        return SPW_ERR_INVALID;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return SPW_ERR_IO;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return SPW_ERR_IO;
    return SPW_OK;
}

/* 0 when path and everything under it went, else -1 (errno of a failure). */
static int remove_tree(const char *path)
{
    /* opendir follows a link at the top, as rm -r of "link/" would: callers name directories */
    DIR *d = opendir(path);
    if (!d)
        return unlink(path);
    int rc = 0, saved = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char child[PATH_MAX];
        int n = snprintf(child, sizeof(child), "%s/%s", path, de->d_name);
        if (n < 0 || (size_t)n >= sizeof(child)) {
            rc = -1;
            saved = ENAMETOOLONG;
            continue;
        }
        struct stat st;
        int r = lstat(child, &st) == 0 && S_ISDIR(st.st_mode) ? remove_tree(child) : unlink(child);
        if (r != 0) {
            rc = -1;
            saved = errno;
        }
    }
    closedir(d);
    if (rmdir(path) != 0)
        return -1;
    if (rc != 0)
        errno = saved;
    return rc;
}

spw_err_t spw_fs_remove_tree(const char *path)
{
    if (remove_tree(path) == 0)
        return SPW_OK;
    return errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO;
}
