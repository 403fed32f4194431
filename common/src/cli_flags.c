/* Rewrites valueless and repeatable flags into `--set key=value` for spw_cli_load (sparrow/cli.h).
 */
#include "sparrow/cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char set_flag[] = "--set";

static char *keep(struct spw_cli_args *out, char *s)
{
    if (s)
        out->owned[out->n_owned++] = s;
    return s;
}

/* "key=value" in a fresh string. */
static char *key_value(const char *key, const char *value)
{
    size_t len = strlen(key) + strlen(value) + 2;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%s=%s", key, value);
    return s;
}

/* Which flag arg is (the `--flag` or `--flag=` part), NULL when none. *value gets what follows
 * '=', NULL without one. */
static const struct spw_cli_flag *match(const char *arg, const struct spw_cli_flag *flags,
                                        size_t n_flags, const char **value)
{
    size_t name_len = strcspn(arg, "=");
    for (size_t f = 0; f < n_flags; f++) {
        if (strlen(flags[f].flag) == name_len && memcmp(arg, flags[f].flag, name_len) == 0) {
            *value = arg[name_len] == '=' ? arg + name_len + 1 : NULL;
            return &flags[f];
        }
    }
    return NULL;
}

/* Appends v to flag f's list (its `--set key=V1<sep>V2...` argument, made at the first value).
 * 0, 2 for a value holding the separator (message on stderr), 1 when out of memory. */
static int add_value(const char *command, struct spw_cli_args *out, int *n, size_t *slot,
                     const struct spw_cli_flag *flags, const struct spw_cli_flag *f, const char *v)
{
    if (strchr(v, f->sep)) {
        if (f->sep == '\n')
            fprintf(stderr, "sparrow %s: %s '%s': a value may not hold a newline\n", command,
                    f->flag, v);
        else
            fprintf(stderr, "sparrow %s: %s '%s': a value may not hold '%c'\n", command, f->flag, v,
                    f->sep);
        return 2;
    }
    size_t fi = (size_t)(f - flags);
    if (!slot[fi]) {
        out->argv[(*n)++] = set_flag;
        slot[fi] = (size_t)*n;
        if (!(out->argv[(*n)++] = keep(out, key_value(f->key, v))))
            return 1;
        return 0;
    }
    /* another element of the list: grow the string in place */
    char *old = out->argv[slot[fi]];
    size_t olen = strlen(old), vlen = strlen(v);
    char *grown = realloc(old, olen + vlen + 2);
    if (!grown)
        return 1;
    grown[olen] = f->sep;
    memcpy(grown + olen + 1, v, vlen + 1);
    for (size_t k = 0; k < out->n_owned; k++)
        if (out->owned[k] == old)
            out->owned[k] = grown;
    out->argv[slot[fi]] = grown;
    return 0;
}

/* A positional argument as it travels in the configuration: every byte at or below ' ', DEL,
 * '%' and ',' as %XX (so that no value is empty, none is trimmed, and ' ' separates them). */
static bool must_escape(unsigned char c)
{
    return c <= ' ' || c == 0x7f || c == '%' || c == ',';
}

static char *encode(const char *v)
{
    size_t len = strlen(v), n = len ? 0 : 3;
    for (size_t i = 0; i < len; i++)
        n += must_escape((unsigned char)v[i]) ? 3 : 1;
    char *s = malloc(n + 1), *p = s;
    if (!s)
        return NULL;
    if (len == 0) /* the empty value: "%00" is no byte, it only marks the value */
        p += sprintf(p, "%%00");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)v[i];
        if (must_escape(c))
            p += sprintf(p, "%%%02X", c);
        else
            *p++ = (char)c;
    }
    *p = '\0';
    return s;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

char **spw_cli_positional_split(const char *list, size_t *n)
{
    *n = 0;
    size_t cap = 1;
    for (const char *p = list; p && *p; p++)
        cap += *p == ' ';
    char **out = calloc(cap + 1, sizeof(*out));
    if (!out)
        return NULL;
    for (const char *p = list; p && *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        size_t len = strcspn(p, " ");
        char *v = malloc(len + 1), *q = v;
        if (!v) {
            spw_cli_positional_free(out);
            return NULL;
        }
        for (size_t i = 0; i < len; i++) {
            int hi, lo;
            if (p[i] == '%' && i + 2 < len + 1 && (hi = hexval(p[i + 1])) >= 0 &&
                (lo = hexval(p[i + 2])) >= 0) {
                if (hi || lo) /* %00 marks the empty value */
                    *q++ = (char)(hi * 16 + lo);
                i += 2;
            } else {
                *q++ = p[i];
            }
        }
        *q = '\0';
        out[(*n)++] = v;
        p += len;
    }
    return out;
}

void spw_cli_positional_free(char **values)
{
    for (size_t i = 0; values && values[i]; i++)
        free(values[i]);
    free(values);
}

/* Whether option arg (starting with '-') is followed by its value as the next argument: every
 * option is but the valueless ones (flags with a value, --help, --dump-config) and those given as
 * `--flag=value`. */
static bool takes_next(const char *arg, const struct spw_cli_flag *flags, size_t n_flags)
{
    static const char *const valueless[] = {"--help", "-h", "--dump-config",
                                            "--dump-config-secrets"};
    if (strchr(arg, '='))
        return false;
    for (size_t i = 0; i < sizeof(valueless) / sizeof(valueless[0]); i++)
        if (strcmp(arg, valueless[i]) == 0)
            return false;
    for (size_t f = 0; f < n_flags; f++)
        if (flags[f].value && strcmp(arg, flags[f].flag) == 0)
            return false;
    return true;
}

int spw_cli_args_rewrite(const char *command, int argc, char **argv,
                         const struct spw_cli_flag *flags, size_t n_flags, struct spw_cli_args *out)
{
    memset(out, 0, sizeof(*out));
    /* each argument becomes at most two; a list per flag at most */
    out->argv = calloc((size_t)argc * 2 + 1, sizeof(*out->argv));
    out->owned = calloc((size_t)argc + n_flags + 1, sizeof(*out->owned));
    size_t *slot = calloc(n_flags + 1, sizeof(*slot)); /* argv index of a list's value, 0: none */
    if (!out->argv || !out->owned || !slot)
        goto out_nomem;
    const struct spw_cli_flag *positional = NULL; /* the flag bare arguments are values of */
    for (size_t f = 0; f < n_flags; f++)
        if (flags[f].flag[0] != '-')
            positional = &flags[f];
    bool rest_positional = false, value_next = false;
    int n = 0, rc;
    out->argv[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (positional && (rest_positional || (argv[i][0] != '-' && !value_next) ||
                           (argv[i][0] == '-' && argv[i][1] == '\0' && !value_next))) {
            value_next = false;
            char *enc = encode(argv[i]);
            if (!enc)
                goto out_nomem;
            rc = add_value(command, out, &n, slot, flags, positional, enc);
            free(enc);
            if (rc != 0)
                goto out_rc;
            continue;
        }
        if (positional && strcmp(argv[i], "--") == 0 && !value_next) {
            rest_positional = true;
            continue;
        }
        value_next =
            positional && argv[i][0] == '-' && !value_next && takes_next(argv[i], flags, n_flags);
        const char *value = NULL;
        const struct spw_cli_flag *f =
            argv[i][0] == '-' || !positional ? match(argv[i], flags, n_flags, &value) : NULL;
        if (!f || f == positional) {
            out->argv[n++] = argv[i];
            continue;
        }
        if (f->value) {
            if (value) { /* --no-serve=x: left for spw_cli_load to refuse */
                out->argv[n++] = argv[i];
                continue;
            }
            out->argv[n++] = set_flag;
            if (!(out->argv[n++] = keep(out, key_value(f->key, f->value))))
                goto out_nomem;
            continue;
        }
        value_next = false; /* a repeatable flag takes its value here */
        const char *v = value;
        if (!v && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            v = argv[i + 1];
        if (v && f->accept && !f->accept(v)) {
            out->argv[n++] = argv[i];
            continue;
        }
        if (!v) {
            fprintf(stderr, "sparrow %s: %s needs a value\n(sparrow %s --help lists the options)\n",
                    command, f->flag, command);
            free(slot);
            return 2;
        }
        if (!value)
            i++;
        if ((rc = add_value(command, out, &n, slot, flags, f, v)) != 0)
            goto out_rc;
    }
    out->argv[n] = NULL;
    out->argc = n;
    free(slot);
    return 0;

out_rc:
    free(slot);
    if (rc == 1)
        fprintf(stderr, "sparrow %s: out of memory\n", command);
    return rc;
out_nomem:
    free(slot);
    fprintf(stderr, "sparrow %s: out of memory\n", command);
    return 1;
}

void spw_cli_args_fini(struct spw_cli_args *args)
{
    for (size_t k = 0; args->owned && k < args->n_owned; k++)
        free(args->owned[k]);
    free(args->owned);
    free(args->argv);
    memset(args, 0, sizeof(*args));
}
