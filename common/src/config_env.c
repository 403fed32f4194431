/* SPARROW_* environment variables that name no property: found, and the nearest property named. */
#include "sparrow/config.h"

#include <stdio.h>
#include <string.h>

#define ENV_NAME_MAX   (SPW_CONFIG_KEY_MAX + 16)
#define HINT_MAX_EDITS 2 /* a typo: "BACTH" for "BATCH" is one (a swap), "BTCH" one */

/* Edit distance of a[0..na) and b[0..nb) (insertions, deletions, substitutions and swaps of
 * neighbours, each 1: optimal string alignment), stopping early above limit (returns limit + 1). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb, size_t limit)
{
    if (na > nb ? na - nb > limit : nb - na > limit)
        return limit + 1;
    if (nb >= ENV_NAME_MAX)
        return limit + 1;
    size_t rows[3][ENV_NAME_MAX + 1];
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= nb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = i;
        size_t row_min = cur[0];
        for (size_t j = 1; j <= nb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t d = prev[j - 1] + cost;
            if (prev[j] + 1 < d)
                d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
            if (d < row_min)
                row_min = d;
        }
        if (row_min > limit)
            return limit + 1;
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[nb];
}

/* Whether the variable name[0..len) is the variable of a settable property, and otherwise the
 * hint for it in hint (empty when none). */
static bool known(const char *name, size_t len, const struct spw_config_table *tables,
                  size_t n_tables, char *hint, size_t hint_size)
{
    char var[ENV_NAME_MAX];
    size_t best = HINT_MAX_EDITS + 1;
    hint[0] = '\0';
    for (size_t t = 0; t < n_tables; t++) {
        for (size_t i = 0; i < tables[t].n_props; i++) {
            const struct spw_config_prop *p = &tables[t].props[i];
            spw_config_env_name(p->name, var, sizeof(var));
            size_t vlen = strlen(var);
            if (p->type == SPW_CONFIG_PASSTHROUGH) {
                /* "kafka.*" -> SPARROW_KAFKA__: its variables start with SPARROW_KAFKA_ */
                if (vlen >= 2 && len > vlen - 1 && memcmp(name, var, vlen - 1) == 0 && best > 0) {
                    best = 0;
                    snprintf(hint, hint_size,
                             "%s keys cannot be set from the environment (their names are not "
                             "recoverable from a variable's); use --set or --config",
                             p->name);
                }
                continue;
            }
            if (vlen == len && memcmp(var, name, len) == 0)
                return true;
            if (best == 0)
                continue;
            /* strictly nearer than the best so far: ties keep the first in table order */
            size_t d = edit_distance(name, len, var, vlen, best - 1);
            if (d < best) {
                best = d;
                snprintf(hint, hint_size, "did you mean %s (%s)?", p->name, var);
            }
        }
    }
    return false;
}

size_t spw_config_env_unknown(char *const *envp, const struct spw_config_table *tables,
                              size_t n_tables, const char *const *ignore, size_t n_ignore,
                              void (*fn)(void *opaque, const char *var, const char *hint),
                              void *opaque)
{
    size_t n = 0;
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "SPARROW_", 8) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (len >= ENV_NAME_MAX)
            len = ENV_NAME_MAX - 1;
        bool ignored = false;
        for (size_t i = 0; i < n_ignore && !ignored; i++)
            ignored = strlen(ignore[i]) == len && memcmp(ignore[i], *e, len) == 0;
        char hint[512];
        if (ignored || known(*e, len, tables, n_tables, hint, sizeof(hint)))
            continue;
        char var[ENV_NAME_MAX];
        memcpy(var, *e, len);
        var[len] = '\0';
        n++;
        fn(opaque, var, hint[0] ? hint : NULL);
    }
    return n;
}
