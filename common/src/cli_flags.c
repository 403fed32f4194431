/* Rewrites valueless and repeatable flags into `--set key=value` for spw_cli_load (sparrow/cli.h).
 */
#include "sparrow/cli.h"

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
    int n = 0;
    out->argv[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        const struct spw_cli_flag *f = match(argv[i], flags, n_flags, &value);
        if (!f) {
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
        if (strchr(v, f->sep)) {
            fprintf(stderr, "sparrow %s: %s '%s': a value may not hold '%c'\n", command, f->flag, v,
                    f->sep);
            free(slot);
            return 2;
        }
        size_t fi = (size_t)(f - flags);
        if (!slot[fi]) {
            out->argv[n++] = set_flag;
            slot[fi] = (size_t)n;
            if (!(out->argv[n++] = keep(out, key_value(f->key, v))))
                goto out_nomem;
            continue;
        }
        /* another element of the list: grow the string in place */
        char *old = out->argv[slot[fi]];
        size_t olen = strlen(old), vlen = strlen(v);
        char *grown = realloc(old, olen + vlen + 2);
        if (!grown)
            goto out_nomem;
        grown[olen] = f->sep;
        memcpy(grown + olen + 1, v, vlen + 1);
        for (size_t k = 0; k < out->n_owned; k++)
            if (out->owned[k] == old)
                out->owned[k] = grown;
        out->argv[slot[fi]] = grown;
    }
    out->argv[n] = NULL;
    out->argc = n;
    free(slot);
    return 0;

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
