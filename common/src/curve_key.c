/* CURVE key files (sparrow/curve_key.h): zcert files and bare Z85 keys. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "sparrow/curve_key.h"
#include "sparrow/log.h"

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The 40-character key of a line: between double quotes when there are any (zcert files:
 * `secret-key = "..."`), else the trimmed line. */
static bool line_key(const char *line, char out[SPW_CURVE_KEY_LEN + 1])
{
    const char *s = line, *e;
    const char *q = strchr(line, '"');
    if (q) {
        s = q + 1;
        e = strchr(s, '"');
        if (!e)
            return false;
    } else {
        while (is_blank(*s))
            s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || is_blank(e[-1])))
            e--;
    }
    if (e - s != SPW_CURVE_KEY_LEN)
        return false;
    memcpy(out, s, SPW_CURVE_KEY_LEN);
    out[SPW_CURVE_KEY_LEN] = '\0';
    return true;
}

/* A comment, a blank line, or a zcert section or metadata line. */
static bool skip_line(const char *line)
{
    while (is_blank(*line))
        line++;
    return *line == '#' || *line == '\n' || *line == '\r' || *line == '\0' ||
           strncmp(line, "metadata", 8) == 0 || strncmp(line, "curve", 5) == 0;
}

static FILE *open_key_file(const char *path, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "re");
    if (!f)
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
    return f;
}

spw_err_t spw_curve_key_read(const char *path, bool secret, char out[SPW_CURVE_KEY_LEN + 1],
                             char *errstr, size_t errstr_size)
{
    FILE *f = open_key_file(path, errstr, errstr_size);
    if (!f)
        return SPW_ERR_NOT_FOUND;
    struct stat st;
    if (secret && fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        SPW_WARN("secret key file readable by group or others", "path=%s", path);
    const char *want = secret ? "secret-key" : "public-key";
    const char *other = secret ? "public-key" : "secret-key";
    char line[SPW_CURVE_LINE_MAX + 1], key[SPW_CURVE_KEY_LEN + 1];
    bool found = false;
    while (fgets(line, sizeof(line), f)) {
        if (skip_line(line) || strstr(line, other))
            continue;
        bool named = strstr(line, want) != NULL;
        if ((named || !found) && line_key(line, key)) {
            memcpy(out, key, sizeof(key));
            found = true;
            if (named)
                break;
        }
    }
    fclose(f);
    memset(line, 0, sizeof(line));
    memset(key, 0, sizeof(key));
    if (!found) {
        snprintf(errstr, errstr_size, "%s: no 40-character Z85 %s key", path,
                 secret ? "secret" : "public");
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}

spw_err_t spw_curve_keys_foreach(const char *path,
                                 spw_err_t (*fn)(void *opaque, const char *key, int lineno,
                                                 char *errstr, size_t errstr_size),
                                 void *opaque, char *errstr, size_t errstr_size)
{
    FILE *f = open_key_file(path, errstr, errstr_size);
    if (!f)
        return SPW_ERR_NOT_FOUND;
    char line[SPW_CURVE_LINE_MAX + 1], key[SPW_CURVE_KEY_LEN + 1];
    int lineno = 0;
    spw_err_t rc = SPW_OK;
    while (rc == SPW_OK && fgets(line, sizeof(line), f)) {
        lineno++;
        if (skip_line(line) || strstr(line, "secret-key"))
            continue;
        if (!line_key(line, key)) {
            snprintf(errstr, errstr_size, "%s:%d: not a 40-character Z85 public key", path, lineno);
            rc = SPW_ERR_INVALID;
            break;
        }
        rc = fn(opaque, key, lineno, errstr, errstr_size);
    }
    fclose(f);
    return rc;
}
