/* The checkpoint directory layout (sparrow/ckpt_layout.h): paths, epoch names, listing, removal. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/fs.h"

static spw_err_t path(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static spw_err_t path(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < size ? SPW_OK : SPW_ERR_INVALID;
}

spw_err_t spw_ckpt_dir_path(char *out, size_t size, const char *root)
{
    return path(out, size, "%s/" SPW_CKPT_DIR, root);
}

spw_err_t spw_ckpt_latest_path(char *out, size_t size, const char *root)
{
    return path(out, size, "%s/" SPW_CKPT_DIR "/" SPW_CKPT_LATEST, root);
}

spw_err_t spw_ckpt_epoch_path(char *out, size_t size, const char *root, uint64_t epoch)
{
    return path(out, size, "%s/" SPW_CKPT_DIR "/%" PRIu64, root, epoch);
}

spw_err_t spw_ckpt_manifest_path(char *out, size_t size, const char *root, uint64_t epoch)
{
    return path(out, size, "%s/" SPW_CKPT_DIR "/%" PRIu64 "/" SPW_CKPT_MANIFEST, root, epoch);
}

spw_err_t spw_ckpt_shard_path(char *out, size_t size, const char *root, uint64_t epoch,
                              uint32_t shard)
{
    return path(out, size, "%s/" SPW_CKPT_DIR "/%" PRIu64 "/shard-%" PRIu32, root, epoch, shard);
}

spw_err_t spw_ckpt_shard_tmp_path(char *out, size_t size, const char *root, uint64_t epoch,
                                  uint32_t shard)
{
    return path(out, size, "%s/" SPW_CKPT_DIR "/%" PRIu64 "/.shard-%" PRIu32 ".tmp", root, epoch,
                shard);
}

spw_err_t spw_ckpt_checksum_path(char *out, size_t size, const char *shard_dir)
{
    return path(out, size, "%s/" SPW_CKPT_CHECKSUM, shard_dir);
}

bool spw_ckpt_epoch_parse(const char *name, uint64_t *epoch)
{
    /* exactly what "%" PRIu64 writes for 1..INT64_MAX: 19 digits at most, no leading zero */
    size_t len = strlen(name);
    if (len == 0 || len > 19 || name[0] == '0')
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return false;
    *epoch = v;
    return true;
}

spw_err_t spw_ckpt_path_split(const char *p, enum spw_ckpt_path_kind *kind, char *root,
                              size_t root_size, uint64_t *epoch)
{
    char buf[SPW_CKPT_PATH_MAX];
    if (path(buf, sizeof(buf), "%s", p) != SPW_OK)
        return SPW_ERR_INVALID;
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    *kind = SPW_CKPT_PATH_OTHER;
    /* the last component, and the one above it */
    char *slash = strrchr(buf, '/');
    const char *last = slash ? slash + 1 : buf;
    uint64_t e = 0;
    char *cut = NULL; /* where root ends */
    if (strcmp(last, SPW_CKPT_DIR) == 0) {
        *kind = SPW_CKPT_PATH_DIR;
        cut = slash ? slash : buf;
    } else if (slash && spw_ckpt_epoch_parse(last, &e)) {
        *slash = '\0';
        char *up = strrchr(buf, '/');
        const char *parent = up ? up + 1 : buf;
        if (strcmp(parent, SPW_CKPT_DIR) == 0) {
            *kind = SPW_CKPT_PATH_EPOCH;
            *epoch = e;
            cut = up ? up : buf;
        } else {
            *slash = '/';
        }
    }
    if (*kind == SPW_CKPT_PATH_OTHER)
        return path(root, root_size, "%s", buf);
    if (cut == buf) /* no directory above checkpoints/ in the path */
        return path(root, root_size, "%s", buf[0] == '/' ? "/" : ".");
    *cut = '\0';
    return path(root, root_size, "%s", buf[0] ? buf : "/");
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

long spw_ckpt_epochs_list(const char *root, uint64_t *epochs, size_t n_max)
{
    char base[SPW_CKPT_PATH_MAX];
    if (spw_ckpt_dir_path(base, sizeof(base), root) != SPW_OK)
        return SPW_ERR_INVALID;
    DIR *d = opendir(base);
    if (!d)
        return errno == ENOENT ? 0 : SPW_ERR_IO;
    size_t cap = 64, n = 0;
    uint64_t *all = malloc(cap * sizeof(*all));
    if (!all) {
        closedir(d);
        return SPW_ERR_NOMEM;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t e;
        if (!spw_ckpt_epoch_parse(de->d_name, &e))
            continue;
        if (n == cap) {
            uint64_t *na = realloc(all, 2 * cap * sizeof(*all));
            if (!na) {
                free(all);
                closedir(d);
                return SPW_ERR_NOMEM;
            }
            all = na;
            cap *= 2;
        }
        all[n++] = e;
    }
    closedir(d);
    qsort(all, n, sizeof(*all), cmp_desc);
    if (n && n_max)
        memcpy(epochs, all, (n < n_max ? n : n_max) * sizeof(*all));
    free(all);
    return (long)n;
}

bool spw_ckpt_epoch_has_manifest(const char *root, uint64_t epoch)
{
    char man[SPW_CKPT_PATH_MAX];
    struct stat st;
    return spw_ckpt_manifest_path(man, sizeof(man), root, epoch) == SPW_OK && stat(man, &st) == 0;
}

spw_err_t spw_ckpt_epoch_remove(const char *root, uint64_t epoch)
{
    char dir[SPW_CKPT_PATH_MAX];
    if (spw_ckpt_epoch_path(dir, sizeof(dir), root, epoch) != SPW_OK)
        return SPW_ERR_INVALID;
    return spw_fs_remove_tree(dir);
}
