/* Configuration tables: validation, layering (defaults < file < env < --set), dump, docs, CLI. */
#include "sparrow/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Where a value came from; printed by spw_config_dump. */
enum source { SRC_DEFAULT, SRC_FILE, SRC_ENV, SRC_SET };
static const char *const source_names[] = {"default", "file", "env", "set"};

#define NPOS    ((size_t)-1)
#define MSG_MAX 1024 /* an inner message, before a location prefix is added */

/* The value of one (non pass-through) property. */
struct value {
    char *text; /* as given, trimmed; NULL when unset */
    enum source src;
    bool b;    /* BOOL */
    int64_t i; /* INT, DURATION_MS (milliseconds) */
    double d;  /* DOUBLE */
};

/* One key set under a pass-through prefix, in the order first set. */
struct passthrough {
    char *key;   /* full key: "kafka.bootstrap.servers" */
    char *value; /* as given, trimmed */
    size_t prop; /* index of the ".*" property it falls under */
    enum source src;
};

struct spw_config {
    const struct spw_config_prop *props; /* borrowed; outlives cfg */
    size_t n_props;
    struct value *values; /* n_props entries, parallel to props */
    struct passthrough *pt;
    size_t n_pt, cap_pt;
    bool dump_secrets; /* spw_config_dump shows secret values (--dump-config-secrets) */
};

__attribute__((format(printf, 3, 4))) static void errf(char *errstr, size_t size, const char *fmt,
                                                       ...)
{
    if (!errstr || size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, size, fmt, ap);
    va_end(ap);
}

/* ---- small text helpers ---- */

static void trim(const char **s, size_t *len)
{
    while (*len > 0 && isspace((unsigned char)(*s)[0])) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && isspace((unsigned char)(*s)[*len - 1]))
        (*len)--;
}

static bool is_key_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-';
}

/* True when the len bytes at s hold word, without case. */
static bool has_word(const char *s, size_t len, const char *word)
{
    size_t wlen = strlen(word);
    for (size_t i = 0; i + wlen <= len; i++)
        if (strncasecmp(s + i, word, wlen) == 0)
            return true;
    return false;
}

static bool ends_with(const char *s, size_t len, const char *suffix)
{
    size_t slen = strlen(suffix);
    return len >= slen && strncasecmp(s + len - slen, suffix, slen) == 0;
}

/* spw_config_key_is_secret for len bytes of key. */
static bool secret_name(const char *key, size_t len)
{
    static const char *const paths[] = {"_file", ".file", ".location", ".path"};
    static const char *const words[] = {
        "password",           "passwd",     "secret", "token", "credential", "private",
        "oauthbearer.config", "ssl.key.pem"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (ends_with(key, len, paths[i]))
            return false;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (has_word(key, len, words[i]))
            return true;
    return false;
}

/* Copies at most len bytes of s into buf for a message, '?' for anything unprintable. */
static const char *printable(const char *s, size_t len, char *buf, size_t size)
{
    size_t n = len < size - 1 ? len : size - 1;
    for (size_t i = 0; i < n; i++)
        buf[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    buf[n] = '\0';
    return buf;
}

static const char *type_name(enum spw_config_type type)
{
    switch (type) {
    case SPW_CONFIG_BOOL:
        return "bool";
    case SPW_CONFIG_INT:
        return "int";
    case SPW_CONFIG_DOUBLE:
        return "double";
    case SPW_CONFIG_STRING:
        return "string";
    case SPW_CONFIG_ENUM:
        return "enum";
    case SPW_CONFIG_DURATION_MS:
        return "duration";
    case SPW_CONFIG_PASSTHROUGH:
        return "pass-through";
    }
    return "?";
}

void spw_config_env_name(const char *name, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "SPARROW_");
    for (const char *p = name; *p && n + 1 < size; p++)
        buf[n++] = (*p == '.' || *p == '-') ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
}

/* A duration in the largest unit that divides it exactly: "250ms", "5s", "2m", "1h". */
static void fmt_duration(double ms, char *buf, size_t size)
{
    if (ms != floor(ms) || fabs(ms) > 9.2e18)
        snprintf(buf, size, "%gms", ms);
    else if (ms != 0 && fmod(ms, 3600000.0) == 0)
        snprintf(buf, size, "%.0fh", ms / 3600000.0);
    else if (ms != 0 && fmod(ms, 60000.0) == 0)
        snprintf(buf, size, "%.0fm", ms / 60000.0);
    else if (ms != 0 && fmod(ms, 1000.0) == 0)
        snprintf(buf, size, "%.0fs", ms / 1000.0);
    else
        snprintf(buf, size, "%.0fms", ms);
}

/* A range bound of a property of the given type, as short as it can be without losing value. */
static void fmt_bound(enum spw_config_type type, double x, char *buf, size_t size)
{
    if (type == SPW_CONFIG_DURATION_MS) {
        fmt_duration(x, buf, size);
    } else if (type == SPW_CONFIG_INT && x == floor(x) && fabs(x) < 1e19) {
        snprintf(buf, size, "%.0f", x);
    } else {
        snprintf(buf, size, "%.15g", x);
        if (strtod(buf, NULL) != x)
            snprintf(buf, size, "%.17g", x);
    }
}

/* "[min, max]" of an INT, DOUBLE or DURATION_MS property. */
static void fmt_range(const struct spw_config_prop *prop, char *buf, size_t size)
{
    char lo[48], hi[48];
    fmt_bound(prop->type, prop->min, lo, sizeof(lo));
    fmt_bound(prop->type, prop->max, hi, sizeof(hi));
    snprintf(buf, size, "[%s, %s]", lo, hi);
}

/* The choices of an ENUM for a message: "none|inverse|exp:<value>". */
static void fmt_choices(const char *choices, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const char *c = choices; *c && n + 1 < size; c++) {
        const char *add = (*c == ':' && (c[1] == '|' || c[1] == '\0')) ? ":<value>" : NULL;
        if (add) {
            int w = snprintf(buf + n, size - n, "%s", add);
            n += (size_t)w < size - n ? (size_t)w : size - n - 1;
        } else {
            buf[n++] = *c;
            buf[n] = '\0';
        }
    }
}

/* Edit distance with adjacent transpositions (optimal string alignment), for "did you mean". */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > SPW_CONFIG_KEY_MAX || lb > SPW_CONFIG_KEY_MAX)
        return (size_t)-1;
    size_t rows[3][SPW_CONFIG_KEY_MAX + 1];
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (prev[j - 1] + cost < best)
                best = prev[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb];
}

/* The closest of names to word when it is close enough to be a likely typo; else NULL. */
static const char *closest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    size_t len = strlen(word);
    size_t limit = len < 6 ? 1 : len < 14 ? 2 : 3;
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(word, names[i]) == 0)
            return names[i];
        size_t d = edit_distance(word, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best_d <= limit ? best : NULL;
}

/* ---- number parsing ---- */

spw_err_t spw_parse_int64(const char *text, int64_t *out)
{
    if (!text || !text[0] || isspace((unsigned char)text[0]))
        return SPW_ERR_INVALID;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0')
        return SPW_ERR_INVALID;
    *out = (int64_t)v;
    return SPW_OK;
}

spw_err_t spw_parse_double(const char *text, double *out)
{
    /* strtod also takes hexadecimal ("0x1p3"); configuration numbers are decimal only. */
    if (!text || !text[0] || isspace((unsigned char)text[0]) || strpbrk(text, "xX"))
        return SPW_ERR_INVALID;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(v))
        return SPW_ERR_INVALID;
    /* ERANGE on underflow gives a usable tiny value (or 0); on overflow v is HUGE_VAL, caught
     * above as not finite. */
    *out = v;
    return SPW_OK;
}

/* A duration's text carries its unit, so that `trainer.log.interval=5` cannot silently mean 5 ms:
 * a bare number is taken only when it is 0 (the same in every unit) or when the property's own
 * name says milliseconds (ends in "_ms": trainer.debug.delay_ms=2). */
static bool bare_ms_allowed(const char *name)
{
    size_t n = strlen(name);
    return n >= 3 && strcmp(name + n - 3, "_ms") == 0;
}

/* "250ms", "5s", "2m", "1h" (or a bare number: *bare set, milliseconds); digits only, no sign, no
 * fraction. */
static spw_err_t parse_duration(const char *text, int64_t *ms, bool *bare)
{
    size_t digits = 0;
    while (text[digits] >= '0' && text[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 19)
        return SPW_ERR_INVALID;
    char num[20];
    memcpy(num, text, digits);
    num[digits] = '\0';
    int64_t v;
    if (spw_parse_int64(num, &v) != SPW_OK)
        return SPW_ERR_INVALID;
    const char *unit = text + digits;
    int64_t mul;
    *bare = unit[0] == '\0';
    if (strcmp(unit, "") == 0 || strcmp(unit, "ms") == 0)
        mul = 1;
    else if (strcmp(unit, "s") == 0)
        mul = 1000;
    else if (strcmp(unit, "m") == 0)
        mul = 60000;
    else if (strcmp(unit, "h") == 0)
        mul = 3600000;
    else
        return SPW_ERR_INVALID;
    if (__builtin_mul_overflow(v, mul, ms))
        return SPW_ERR_INVALID;
    return SPW_OK;
}

/* ---- validation of one value ---- */

static spw_err_t check_enum(const struct spw_config_prop *prop, const char *text, char *msg,
                            size_t msize)
{
    size_t tlen = strlen(text);
    /* First pass: an exact choice, or a "name:" choice with a non-empty suffix. */
    for (const char *c = prop->choices; *c;) {
        size_t clen = strcspn(c, "|");
        if (c[clen - 1] == ':') {
            if (tlen > clen && memcmp(text, c, clen) == 0)
                return SPW_OK;
        } else if (tlen == clen && memcmp(text, c, clen) == 0) {
            return SPW_OK;
        }
        c += clen + (c[clen] == '|');
    }
    char list[512];
    fmt_choices(prop->choices, list, sizeof(list));
    /* Second pass: "ssp" or "ssp:" for a choice "ssp:" lacks its suffix. */
    for (const char *c = prop->choices; *c;) {
        size_t clen = strcspn(c, "|");
        if (c[clen - 1] == ':' && (tlen == clen || tlen == clen - 1) &&
            memcmp(text, c, clen - 1) == 0) {
            errf(msg, msize, "%s: '%s' needs a value after ':' (%.*s<value>); choices: %s",
                 prop->name, text, (int)clen, c, list);
            return SPW_ERR_INVALID;
        }
        c += clen + (c[clen] == '|');
    }
    errf(msg, msize, "%s: '%.80s' is not one of %s", prop->name, text, list);
    return SPW_ERR_INVALID;
}

/* Parses text (trimmed, NUL-terminated, free of control characters) for prop into *v. */
static spw_err_t parse_value(const struct spw_config_prop *prop, const char *text, struct value *v,
                             char *msg, size_t msize)
{
    static const char *const truthy[] = {"true", "1", "yes", "on"};
    static const char *const falsy[] = {"false", "0", "no", "off"};
    char range[128];
    switch (prop->type) {
    case SPW_CONFIG_BOOL:
        for (size_t i = 0; i < 4; i++) {
            if (strcasecmp(text, truthy[i]) == 0 || strcasecmp(text, falsy[i]) == 0) {
                v->b = strcasecmp(text, truthy[i]) == 0;
                return SPW_OK;
            }
        }
        errf(msg, msize, "%s: '%.80s' is not a boolean (true|false|1|0|yes|no|on|off)", prop->name,
             text);
        return SPW_ERR_INVALID;
    case SPW_CONFIG_INT:
        fmt_range(prop, range, sizeof(range));
        if (spw_parse_int64(text, &v->i) != SPW_OK) {
            errf(msg, msize, "%s: '%.80s' is not an integer (expected one in %s)", prop->name, text,
                 range);
            return SPW_ERR_INVALID;
        }
        if ((double)v->i < prop->min || (double)v->i > prop->max) {
            errf(msg, msize, "%s: %.80s is out of range %s", prop->name, text, range);
            return SPW_ERR_INVALID;
        }
        return SPW_OK;
    case SPW_CONFIG_DOUBLE:
        fmt_range(prop, range, sizeof(range));
        if (spw_parse_double(text, &v->d) != SPW_OK) {
            errf(msg, msize, "%s: '%.80s' is not a finite number (expected one in %s)", prop->name,
                 text, range);
            return SPW_ERR_INVALID;
        }
        if (v->d < prop->min || v->d > prop->max) {
            errf(msg, msize, "%s: %.80s is out of range %s", prop->name, text, range);
            return SPW_ERR_INVALID;
        }
        return SPW_OK;
    case SPW_CONFIG_DURATION_MS:
        fmt_range(prop, range, sizeof(range));
        bool bare = false;
        if (parse_duration(text, &v->i, &bare) != SPW_OK) {
            errf(msg, msize,
                 "%s: '%.80s' is not a duration (a number and a unit: 250ms, 5s, 2m, 1h; "
                 "expected one in %s)",
                 prop->name, text, range);
            return SPW_ERR_INVALID;
        }
        if (bare && v->i != 0 && !bare_ms_allowed(prop->name)) {
            errf(msg, msize,
                 "%s: '%.80s' has no unit (write %.40sms, %.40ss, %.40sm or %.40sh; the accepted "
                 "units are ms, s, m and h)",
                 prop->name, text, text, text, text, text);
            return SPW_ERR_INVALID;
        }
        if ((double)v->i < prop->min || (double)v->i > prop->max) {
            errf(msg, msize, "%s: %s (%lld ms) is out of range %s", prop->name, text,
                 (long long)v->i, range);
            return SPW_ERR_INVALID;
        }
        return SPW_OK;
    case SPW_CONFIG_STRING:
        if (prop->max > 0 && (double)strlen(text) > prop->max) {
            errf(msg, msize, "%s: value is %zu bytes, longer than the limit of %.0f", prop->name,
                 strlen(text), prop->max);
            return SPW_ERR_TOO_BIG;
        }
        return SPW_OK;
    case SPW_CONFIG_ENUM:
        return check_enum(prop, text, msg, msize);
    case SPW_CONFIG_PASSTHROUGH:
        break;
    }
    errf(msg, msize, "%s: property of no settable type", prop->name);
    return SPW_ERR_INVALID;
}

/* ---- lookup and setting ---- */

static size_t find_prop(const spw_config_t *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->n_props; i++)
        if (cfg->props[i].type != SPW_CONFIG_PASSTHROUGH && strcmp(cfg->props[i].name, key) == 0)
            return i;
    return NPOS;
}

/* The pass-through property ("kafka.*") whose prefix key extends; NPOS when none. */
static size_t find_passthrough_prop(const spw_config_t *cfg, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < cfg->n_props; i++) {
        if (cfg->props[i].type != SPW_CONFIG_PASSTHROUGH)
            continue;
        size_t plen = strlen(cfg->props[i].name) - 1; /* without the '*' */
        if (klen > plen && memcmp(key, cfg->props[i].name, plen) == 0)
            return i;
    }
    return NPOS;
}

/* Sets a pass-through key; takes ownership of value on success. */
static spw_err_t set_passthrough(spw_config_t *cfg, size_t prop, const char *key, char *value,
                                 enum source src, char *msg, size_t msize)
{
    for (size_t i = 0; i < cfg->n_pt; i++) {
        if (strcmp(cfg->pt[i].key, key) == 0) {
            free(cfg->pt[i].value);
            cfg->pt[i].value = value;
            cfg->pt[i].src = src;
            return SPW_OK;
        }
    }
    if (cfg->n_pt >= SPW_CONFIG_PASSTHROUGH_MAX) {
        errf(msg, msize, "%s: too many pass-through keys (limit %d)", key,
             SPW_CONFIG_PASSTHROUGH_MAX);
        return SPW_ERR_TOO_BIG;
    }
    if (cfg->n_pt == cfg->cap_pt) {
        size_t cap = cfg->cap_pt ? cfg->cap_pt * 2 : 8;
        struct passthrough *pt = realloc(cfg->pt, cap * sizeof(*pt));
        if (!pt)
            goto out_nomem;
        cfg->pt = pt;
        cfg->cap_pt = cap;
    }
    char *k = strdup(key);
    if (!k)
        goto out_nomem;
    cfg->pt[cfg->n_pt++] = (struct passthrough){k, value, prop, src};
    return SPW_OK;

out_nomem:
    errf(msg, msize, "%s: out of memory", key);
    return SPW_ERR_NOMEM;
}

static spw_err_t unknown_key(const spw_config_t *cfg, const char *key, char *msg, size_t msize)
{
    const char *names[256];
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_props && n < 256; i++)
        if (cfg->props[i].type != SPW_CONFIG_PASSTHROUGH)
            names[n++] = cfg->props[i].name;
    const char *near = closest(key, names, n);
    if (near)
        errf(msg, msize, "unknown key '%s' (did you mean '%s'?)", key, near);
    else
        errf(msg, msize, "unknown key '%s'", key);
    return SPW_ERR_NOT_FOUND;
}

/*
 * The one place a value enters cfg: key (klen bytes) and value (vlen bytes) need not be
 * NUL-terminated. Trims both, checks the limits, parses, and stores. Leaves cfg unchanged on
 * error.
 */
static spw_err_t set_value(spw_config_t *cfg, const char *key, size_t klen, const char *val,
                           size_t vlen, enum source src, char *msg, size_t msize)
{
    char name[SPW_CONFIG_KEY_MAX + 1], shown[64];
    trim(&key, &klen);
    trim(&val, &vlen);
    if (klen == 0) {
        errf(msg, msize, "empty key");
        return SPW_ERR_INVALID;
    }
    if (klen > SPW_CONFIG_KEY_MAX) {
        errf(msg, msize, "key '%s...' is longer than %d bytes", printable(key, 40, shown, 41),
             SPW_CONFIG_KEY_MAX);
        return SPW_ERR_INVALID;
    }
    for (size_t i = 0; i < klen; i++) {
        if (!is_key_char(key[i])) {
            errf(msg, msize, "'%s' is not a valid key (letters, digits, '.', '_' and '-')",
                 printable(key, klen, shown, sizeof(shown)));
            return SPW_ERR_INVALID;
        }
    }
    memcpy(name, key, klen);
    name[klen] = '\0';
    if (vlen > SPW_CONFIG_VALUE_MAX) {
        errf(msg, msize, "%s: value is %zu bytes, longer than the limit of %d", name, vlen,
             SPW_CONFIG_VALUE_MAX);
        return SPW_ERR_TOO_BIG;
    }
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)val[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            errf(msg, msize, "%s: value contains a control character (0x%02x)", name, c);
            return SPW_ERR_INVALID;
        }
    }
    char *text = strndup(val, vlen);
    if (!text) {
        errf(msg, msize, "%s: out of memory", name);
        return SPW_ERR_NOMEM;
    }
    spw_err_t err;
    size_t i = find_prop(cfg, name);
    if (i != NPOS) {
        struct value v = {0};
        err = parse_value(&cfg->props[i], text, &v, msg, msize);
        if (err != SPW_OK)
            goto out_free_text;
        v.text = text;
        v.src = src;
        free(cfg->values[i].text);
        cfg->values[i] = v;
        return SPW_OK;
    }
    i = find_passthrough_prop(cfg, name);
    if (i != NPOS) {
        err = set_passthrough(cfg, i, name, text, src, msg, msize);
        if (err != SPW_OK)
            goto out_free_text;
        return SPW_OK;
    }
    err = unknown_key(cfg, name, msg, msize);

out_free_text:
    free(text);
    return err;
}

/* ---- lifecycle ---- */

/* Checks the table itself: names, types, ranges, choices (defaults are checked by setting). */
static spw_err_t check_table(const struct spw_config_prop *props, size_t n, char *errstr,
                             size_t size)
{
    char env_i[SPW_CONFIG_KEY_MAX + 16], env_j[SPW_CONFIG_KEY_MAX + 16];
    for (size_t i = 0; i < n; i++) {
        const struct spw_config_prop *p = &props[i];
        size_t len = p->name ? strlen(p->name) : 0;
        if (len == 0 || len > SPW_CONFIG_KEY_MAX) {
            errf(errstr, size, "property %zu: missing or overlong name", i);
            return SPW_ERR_INVALID;
        }
        bool pass = p->type == SPW_CONFIG_PASSTHROUGH;
        size_t body = pass ? len - 1 : len;
        for (size_t k = 0; k < body; k++) {
            if (!is_key_char(p->name[k])) {
                errf(errstr, size, "%s: invalid character in property name", p->name);
                return SPW_ERR_INVALID;
            }
        }
        if (pass != (len >= 3 && strcmp(p->name + len - 2, ".*") == 0)) {
            errf(errstr, size, "%s: pass-through properties, and only they, end in \".*\"",
                 p->name);
            return SPW_ERR_INVALID;
        }
        if (pass && p->def) {
            errf(errstr, size, "%s: a pass-through prefix has no default", p->name);
            return SPW_ERR_INVALID;
        }
        if ((p->type == SPW_CONFIG_INT || p->type == SPW_CONFIG_DOUBLE ||
             p->type == SPW_CONFIG_DURATION_MS) &&
            !(p->min <= p->max)) {
            errf(errstr, size, "%s: min is above max", p->name);
            return SPW_ERR_INVALID;
        }
        if (p->type == SPW_CONFIG_ENUM) {
            const char *c = p->choices;
            bool ok = c && c[0] && c[0] != '|' && c[strlen(c) - 1] != '|' && !strstr(c, "||") &&
                      c[0] != ':' && !strstr(c, "|:");
            if (!ok) {
                errf(errstr, size, "%s: malformed choices", p->name);
                return SPW_ERR_INVALID;
            }
        }
        spw_config_env_name(p->name, env_i, sizeof(env_i));
        for (size_t j = 0; j < i; j++) {
            if (strcmp(props[j].name, p->name) == 0) {
                errf(errstr, size, "%s: property listed twice", p->name);
                return SPW_ERR_INVALID;
            }
            spw_config_env_name(props[j].name, env_j, sizeof(env_j));
            if (!pass && props[j].type != SPW_CONFIG_PASSTHROUGH && strcmp(env_i, env_j) == 0) {
                errf(errstr, size, "%s and %s share the environment variable %s", props[j].name,
                     p->name, env_i);
                return SPW_ERR_INVALID;
            }
        }
    }
    return SPW_OK;
}

spw_config_t *spw_config_new(const struct spw_config_prop *props, size_t n_props, char *errstr,
                             size_t errstr_size)
{
    if (check_table(props, n_props, errstr, errstr_size) != SPW_OK)
        return NULL;
    spw_config_t *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        goto out_nomem;
    cfg->props = props;
    cfg->n_props = n_props;
    cfg->values = calloc(n_props ? n_props : 1, sizeof(*cfg->values));
    if (!cfg->values)
        goto out_destroy;
    for (size_t i = 0; i < n_props; i++) {
        const struct spw_config_prop *p = &props[i];
        if (!p->def || p->type == SPW_CONFIG_PASSTHROUGH)
            continue;
        char msg[MSG_MAX];
        spw_err_t err = set_value(cfg, p->name, strlen(p->name), p->def, strlen(p->def),
                                  SRC_DEFAULT, msg, sizeof(msg));
        if (err == SPW_ERR_NOMEM)
            goto out_destroy;
        if (err != SPW_OK) {
            errf(errstr, errstr_size, "invalid default in the property table: %s", msg);
            spw_config_destroy(cfg);
            return NULL;
        }
    }
    return cfg;

out_destroy:
    spw_config_destroy(cfg);
out_nomem:
    errf(errstr, errstr_size, "out of memory");
    return NULL;
}

void spw_config_destroy(spw_config_t *cfg)
{
    if (!cfg)
        return;
    if (cfg->values)
        for (size_t i = 0; i < cfg->n_props; i++)
            free(cfg->values[i].text);
    free(cfg->values);
    for (size_t i = 0; i < cfg->n_pt; i++) {
        free(cfg->pt[i].key);
        free(cfg->pt[i].value);
    }
    free(cfg->pt);
    free(cfg);
}

/* A deep copy that the multi-step loaders work on, so that an error leaves cfg unchanged. */
static spw_config_t *config_clone(const spw_config_t *cfg)
{
    spw_config_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->props = cfg->props;
    c->n_props = cfg->n_props;
    c->dump_secrets = cfg->dump_secrets;
    c->values = calloc(cfg->n_props ? cfg->n_props : 1, sizeof(*c->values));
    if (!c->values)
        goto out_destroy;
    for (size_t i = 0; i < cfg->n_props; i++) {
        struct value v = cfg->values[i];
        if (v.text && !(v.text = strdup(v.text)))
            goto out_destroy;
        c->values[i] = v;
    }
    if (cfg->n_pt) {
        c->pt = calloc(cfg->n_pt, sizeof(*c->pt));
        if (!c->pt)
            goto out_destroy;
        c->cap_pt = cfg->n_pt;
        for (size_t i = 0; i < cfg->n_pt; i++) {
            struct passthrough e = cfg->pt[i];
            e.key = strdup(e.key);
            e.value = strdup(e.value);
            c->pt[c->n_pt++] = e; /* counted at once so that destroy frees a half copy */
            if (!e.key || !e.value)
                goto out_destroy;
        }
    }
    return c;

out_destroy:
    spw_config_destroy(c);
    return NULL;
}

/* Moves the contents of next into cfg and frees what cfg held. */
static void config_commit(spw_config_t *cfg, spw_config_t *next)
{
    struct spw_config old = *cfg;
    *cfg = *next;
    *next = old;
    spw_config_destroy(next);
}

/* ---- layers ---- */

spw_err_t spw_config_set(spw_config_t *cfg, const char *key, const char *value, char *errstr,
                         size_t errstr_size)
{
    return set_value(cfg, key, strlen(key), value, strlen(value), SRC_SET, errstr, errstr_size);
}

static spw_err_t apply_buffer(spw_config_t *cfg, const char *name, const char *data, size_t len,
                              char *errstr, size_t errstr_size)
{
    if (len > SPW_CONFIG_FILE_MAX) {
        errf(errstr, errstr_size, "%s: larger than the limit of %d bytes", name,
             SPW_CONFIG_FILE_MAX);
        return SPW_ERR_TOO_BIG;
    }
    if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0) { /* UTF-8 byte order mark */
        data += 3;
        len -= 3;
    }
    size_t pos = 0, line_no = 0;
    while (pos < len) {
        const char *line = data + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - line) : len - pos;
        pos += llen + (nl != NULL);
        line_no++;
        if (llen > SPW_CONFIG_LINE_MAX) {
            errf(errstr, errstr_size, "%s:%zu: line longer than %d bytes", name, line_no,
                 SPW_CONFIG_LINE_MAX);
            return SPW_ERR_TOO_BIG;
        }
        if (memchr(line, '\0', llen)) {
            errf(errstr, errstr_size, "%s:%zu: NUL byte in line", name, line_no);
            return SPW_ERR_INVALID;
        }
        trim(&line, &llen);
        if (llen == 0 || line[0] == '#')
            continue;
        const char *eq = memchr(line, '=', llen);
        if (!eq) {
            char shown[64];
            /* a mistyped "kafka.sasl.password: x" must not put the password in a message */
            errf(errstr, errstr_size, "%s:%zu: expected 'key = value', got '%s'", name, line_no,
                 secret_name(line, llen) ? "(a line naming a secret; not shown)"
                                         : printable(line, llen, shown, sizeof(shown)));
            return SPW_ERR_INVALID;
        }
        char msg[MSG_MAX];
        spw_err_t err = set_value(cfg, line, (size_t)(eq - line), eq + 1,
                                  llen - (size_t)(eq - line) - 1, SRC_FILE, msg, sizeof(msg));
        if (err != SPW_OK) {
            errf(errstr, errstr_size, "%s:%zu: %s", name, line_no, msg);
            return err;
        }
    }
    return SPW_OK;
}

spw_err_t spw_config_load_buffer(spw_config_t *cfg, const char *name, const void *data, size_t len,
                                 char *errstr, size_t errstr_size)
{
    spw_config_t *next = config_clone(cfg);
    if (!next) {
        errf(errstr, errstr_size, "%s: out of memory", name);
        return SPW_ERR_NOMEM;
    }
    spw_err_t err = apply_buffer(next, name, data, len, errstr, errstr_size);
    if (err != SPW_OK) {
        spw_config_destroy(next);
        return err;
    }
    config_commit(cfg, next);
    return SPW_OK;
}

/* Reads at most SPW_CONFIG_FILE_MAX bytes of path into a new buffer (*data, freed by the caller).
 * Works on pipes too (`--config <(...)`). */
static spw_err_t read_file(const char *path, char **data, size_t *len, char *errstr,
                           size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        errf(errstr, errstr_size, "%s: cannot open: %s", path, strerror(e));
        return e == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO;
    }
    spw_err_t err = SPW_OK;
    char *buf = malloc(SPW_CONFIG_FILE_MAX + 1);
    if (!buf) {
        errf(errstr, errstr_size, "%s: out of memory", path);
        err = SPW_ERR_NOMEM;
        goto out_close;
    }
    size_t n = fread(buf, 1, SPW_CONFIG_FILE_MAX + 1, f);
    if (ferror(f)) {
        errf(errstr, errstr_size, "%s: cannot read: %s", path, strerror(errno));
        err = SPW_ERR_IO;
        goto out_free_buf;
    }
    if (n > SPW_CONFIG_FILE_MAX) {
        errf(errstr, errstr_size, "%s: larger than the limit of %d bytes", path,
             SPW_CONFIG_FILE_MAX);
        err = SPW_ERR_TOO_BIG;
        goto out_free_buf;
    }
    *data = buf;
    *len = n;
    fclose(f);
    return SPW_OK;

out_free_buf:
    free(buf);
out_close:
    fclose(f);
    return err;
}

static spw_err_t apply_file(spw_config_t *cfg, const char *path, char *errstr, size_t errstr_size)
{
    char *data;
    size_t len;
    spw_err_t err = read_file(path, &data, &len, errstr, errstr_size);
    if (err != SPW_OK)
        return err;
    err = apply_buffer(cfg, path, data, len, errstr, errstr_size);
    free(data);
    return err;
}

spw_err_t spw_config_load_file(spw_config_t *cfg, const char *path, char *errstr,
                               size_t errstr_size)
{
    char *data;
    size_t len;
    spw_err_t err = read_file(path, &data, &len, errstr, errstr_size);
    if (err != SPW_OK)
        return err;
    err = spw_config_load_buffer(cfg, path, data, len, errstr, errstr_size);
    free(data);
    return err;
}

static spw_err_t apply_env(spw_config_t *cfg, char *const *envp, char *errstr, size_t errstr_size)
{
    char var[SPW_CONFIG_KEY_MAX + 16];
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "SPARROW_", 8) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        size_t nlen = (size_t)(eq - *e);
        for (size_t i = 0; i < cfg->n_props; i++) {
            const struct spw_config_prop *p = &cfg->props[i];
            if (p->type == SPW_CONFIG_PASSTHROUGH)
                continue;
            spw_config_env_name(p->name, var, sizeof(var));
            if (strlen(var) != nlen || memcmp(var, *e, nlen) != 0)
                continue;
            char msg[MSG_MAX];
            spw_err_t err = set_value(cfg, p->name, strlen(p->name), eq + 1, strlen(eq + 1),
                                      SRC_ENV, msg, sizeof(msg));
            if (err != SPW_OK) {
                errf(errstr, errstr_size, "environment variable %s: %s", var, msg);
                return err;
            }
            break;
        }
    }
    return SPW_OK;
}

spw_err_t spw_config_load_env(spw_config_t *cfg, char *const *envp, char *errstr,
                              size_t errstr_size)
{
    spw_config_t *next = config_clone(cfg);
    if (!next) {
        errf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    spw_err_t err = apply_env(next, envp, errstr, errstr_size);
    if (err != SPW_OK) {
        spw_config_destroy(next);
        return err;
    }
    config_commit(cfg, next);
    return SPW_OK;
}

/* Applies one "key=value" argument of --set. */
static spw_err_t apply_set_arg(spw_config_t *cfg, const char *arg, char *errstr, size_t errstr_size)
{
    const char *eq = strchr(arg, '=');
    char msg[MSG_MAX];
    if (!eq) {
        errf(errstr, errstr_size, "--set '%.80s': expected key=value", arg);
        return SPW_ERR_INVALID;
    }
    spw_err_t err =
        set_value(cfg, arg, (size_t)(eq - arg), eq + 1, strlen(eq + 1), SRC_SET, msg, sizeof(msg));
    if (err != SPW_OK)
        errf(errstr, errstr_size, "--set %.80s: %s", arg, msg);
    return err;
}

spw_err_t spw_config_load(spw_config_t *cfg, const char *file, char *const *envp,
                          const char *const *sets, size_t n_sets, char *errstr, size_t errstr_size)
{
    spw_config_t *next = config_clone(cfg);
    if (!next) {
        errf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    spw_err_t err = SPW_OK;
    if (file)
        err = apply_file(next, file, errstr, errstr_size);
    if (err == SPW_OK)
        err = apply_env(next, envp, errstr, errstr_size);
    for (size_t i = 0; err == SPW_OK && i < n_sets; i++)
        err = apply_set_arg(next, sets[i], errstr, errstr_size);
    if (err != SPW_OK) {
        spw_config_destroy(next);
        return err;
    }
    config_commit(cfg, next);
    return SPW_OK;
}

/* ---- getters ---- */

/* The value of key, which must be a property of type t1 or t2: anything else is a bug. */
static const struct value *typed(const spw_config_t *cfg, const char *key, enum spw_config_type t1,
                                 enum spw_config_type t2)
{
    size_t i = find_prop(cfg, key);
    if (i == NPOS || (cfg->props[i].type != t1 && cfg->props[i].type != t2)) {
        fprintf(stderr, "sparrow: bug: configuration key '%s' %s\n", key,
                i == NPOS ? "is not in the property table" : "is read as the wrong type");
        abort();
    }
    return &cfg->values[i];
}

bool spw_config_bool(const spw_config_t *cfg, const char *key)
{
    return typed(cfg, key, SPW_CONFIG_BOOL, SPW_CONFIG_BOOL)->b;
}

int64_t spw_config_int(const spw_config_t *cfg, const char *key)
{
    return typed(cfg, key, SPW_CONFIG_INT, SPW_CONFIG_INT)->i;
}

double spw_config_double(const spw_config_t *cfg, const char *key)
{
    return typed(cfg, key, SPW_CONFIG_DOUBLE, SPW_CONFIG_DOUBLE)->d;
}

const char *spw_config_str(const spw_config_t *cfg, const char *key)
{
    return typed(cfg, key, SPW_CONFIG_STRING, SPW_CONFIG_ENUM)->text;
}

int64_t spw_config_duration_ms(const spw_config_t *cfg, const char *key)
{
    return typed(cfg, key, SPW_CONFIG_DURATION_MS, SPW_CONFIG_DURATION_MS)->i;
}

bool spw_config_is_set(const spw_config_t *cfg, const char *key)
{
    size_t i = find_prop(cfg, key);
    if (i == NPOS) {
        fprintf(stderr, "sparrow: bug: configuration key '%s' is not in the property table\n", key);
        abort();
    }
    return cfg->values[i].text != NULL;
}

int spw_config_foreach_passthrough(const spw_config_t *cfg, const char *prefix,
                                   int (*fn)(const char *key, const char *value, void *opaque),
                                   void *opaque)
{
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < cfg->n_pt; i++) {
        if (strncmp(cfg->pt[i].key, prefix, plen) != 0)
            continue;
        int r = fn(cfg->pt[i].key + plen, cfg->pt[i].value, opaque);
        if (r != 0)
            return r;
    }
    return 0;
}

/* ---- secrets, dump and documentation ---- */

bool spw_config_key_is_secret(const char *key)
{
    return secret_name(key, strlen(key));
}

void spw_config_set_dump_secrets(spw_config_t *cfg, bool show)
{
    cfg->dump_secrets = show;
}

/* Writes `key = value`, or the line commented out and redacted when the value is a secret. */
static void dump_value(const spw_config_t *cfg, const char *key, const char *value, FILE *out)
{
    if (!cfg->dump_secrets && secret_name(key, strlen(key)))
        fprintf(out, "# %s = (redacted: a secret; --dump-config-secrets shows it)\n", key);
    else
        fprintf(out, "%s = %s\n", key, value);
}

void spw_config_dump(const spw_config_t *cfg, FILE *out)
{
    fprintf(out, "# Effective Sparrow configuration; load it back with --config FILE.\n"
                 "# Each value's source is in brackets: default, file, env or set.\n");
    if (!cfg->dump_secrets)
        fprintf(out, "# Secret values are commented out and redacted (--dump-config-secrets "
                     "shows them).\n");
    for (size_t i = 0; i < cfg->n_props; i++) {
        const struct spw_config_prop *p = &cfg->props[i];
        const char *desc = p->desc ? p->desc : "";
        if (p->type == SPW_CONFIG_PASSTHROUGH) {
            size_t n = 0;
            for (size_t k = 0; k < cfg->n_pt; k++) {
                if (cfg->pt[k].prop != i)
                    continue;
                fprintf(out, "\n# %s [%s; %s]\n", desc, p->name, source_names[cfg->pt[k].src]);
                dump_value(cfg, cfg->pt[k].key, cfg->pt[k].value, out);
                n++;
            }
            if (n == 0)
                fprintf(out, "\n# %s [%s; none set]\n", desc, p->name);
            continue;
        }
        const struct value *v = &cfg->values[i];
        if (v->text) {
            fprintf(out, "\n# %s [%s]\n", desc, source_names[v->src]);
            dump_value(cfg, p->name, v->text, out);
        } else
            fprintf(out, "\n# %s [unset]\n# %s =\n", desc, p->name);
    }
}

/* Writes text into a Markdown table cell: '|' escaped, line breaks as spaces. */
static void md_text(const char *text, FILE *out)
{
    for (const char *c = text; *c; c++) {
        if (*c == '|')
            fputs("\\|", out);
        else if (*c == '\n' || *c == '\r')
            fputc(' ', out);
        else
            fputc(*c, out);
    }
}

/* The "Range / choices" column of the Markdown table. */
static void md_range(const struct spw_config_prop *p, FILE *out)
{
    char range[128];
    switch (p->type) {
    case SPW_CONFIG_BOOL:
        fputs("`true`, `false`", out);
        break;
    case SPW_CONFIG_INT:
    case SPW_CONFIG_DOUBLE:
    case SPW_CONFIG_DURATION_MS:
        fmt_range(p, range, sizeof(range));
        fputs(range, out);
        break;
    case SPW_CONFIG_STRING:
        if (p->max > 0)
            fprintf(out, "at most %.0f bytes", p->max);
        else
            fputs("any text", out);
        break;
    case SPW_CONFIG_ENUM:
        for (const char *c = p->choices; *c;) {
            size_t clen = strcspn(c, "|");
            fprintf(out, "%s`%.*s%s`", c == p->choices ? "" : ", ", (int)clen, c,
                    c[clen - 1] == ':' ? "<value>" : "");
            c += clen + (c[clen] == '|');
        }
        break;
    case SPW_CONFIG_PASSTHROUGH:
        fprintf(out, "any key under `%.*s`", (int)strlen(p->name) - 1, p->name);
        break;
    }
}

void spw_config_doc_markdown(const struct spw_config_prop *props, size_t n_props, const char *title,
                             FILE *out)
{
    char var[SPW_CONFIG_KEY_MAX + 16];
    fprintf(out, "## %s\n\n", title);
    fputs("| Property | Type | Default | Range / choices | Environment | Description |\n"
          "|---|---|---|---|---|---|\n",
          out);
    for (size_t i = 0; i < n_props; i++) {
        const struct spw_config_prop *p = &props[i];
        fprintf(out, "| `%s` | %s | ", p->name, type_name(p->type));
        if (p->type == SPW_CONFIG_PASSTHROUGH)
            fputs("", out);
        else if (!p->def)
            fputs("(unset)", out);
        else if (!p->def[0])
            fputs("(empty)", out);
        else {
            fputc('`', out);
            md_text(p->def, out);
            fputc('`', out);
        }
        fputs(" | ", out);
        md_range(p, out);
        if (p->type == SPW_CONFIG_PASSTHROUGH) {
            fputs(" | (file or `--set` only) | ", out);
        } else {
            spw_config_env_name(p->name, var, sizeof(var));
            fprintf(out, " | `%s` | ", var);
        }
        md_text(p->desc ? p->desc : "", out);
        fputs(" |\n", out);
    }
}

/* Writes text wrapped at width columns, each line indented by indent spaces. */
static void wrap(const char *text, int indent, int width, FILE *out)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        int col = indent;
        fprintf(out, "%*s", indent, "");
        bool first = true;
        while (*p) {
            size_t wlen = strcspn(p, " ");
            if (!first && col + 1 + (int)wlen > width)
                break;
            if (!first) {
                fputc(' ', out);
                col++;
            }
            fprintf(out, "%.*s", (int)wlen, p);
            col += (int)wlen;
            first = false;
            p += wlen;
            while (*p == ' ')
                p++;
        }
        fputc('\n', out);
    }
}

void spw_config_doc_help(const struct spw_config_prop *props, size_t n_props, FILE *out)
{
    int name_w = 0;
    for (size_t i = 0; i < n_props; i++) {
        int len = (int)strlen(props[i].name);
        if (len > name_w)
            name_w = len;
    }
    if (name_w > 32)
        name_w = 32;
    int def_w = 0; /* width of "default <value>" */
    for (size_t i = 0; i < n_props; i++) {
        const char *def = props[i].def ? props[i].def : "(unset)";
        int len = props[i].type == SPW_CONFIG_PASSTHROUGH ? 0 : 8 + (int)strlen(def);
        if (len > def_w)
            def_w = len;
    }
    if (def_w > 28)
        def_w = 28;
    for (size_t i = 0; i < n_props; i++) {
        const struct spw_config_prop *p = &props[i];
        char range[600];
        range[0] = '\0';
        switch (p->type) {
        case SPW_CONFIG_INT:
        case SPW_CONFIG_DOUBLE:
        case SPW_CONFIG_DURATION_MS:
            fmt_range(p, range, sizeof(range));
            break;
        case SPW_CONFIG_ENUM:
            fmt_choices(p->choices, range, sizeof(range));
            break;
        case SPW_CONFIG_STRING:
            if (p->max > 0)
                snprintf(range, sizeof(range), "at most %.0f bytes", p->max);
            break;
        case SPW_CONFIG_BOOL:
            snprintf(range, sizeof(range), "true|false");
            break;
        case SPW_CONFIG_PASSTHROUGH:
            snprintf(range, sizeof(range), "file or --set only");
            break;
        }
        fprintf(out, "  %-*s  %-12s  ", name_w, p->name, type_name(p->type));
        int w = 0;
        if (p->type != SPW_CONFIG_PASSTHROUGH)
            w = fprintf(out, "default %s", p->def ? (p->def[0] ? p->def : "\"\"") : "(unset)");
        if (range[0])
            fprintf(out, "%*s  %s", w < def_w ? def_w - w : 0, "", range);
        fputc('\n', out);
        if (p->desc && p->desc[0])
            wrap(p->desc, 6, 100, out);
    }
}

/* ---- command line ---- */

/* One --set or alias argument, applied after the file and the environment. */
struct cli_set {
    const char *key; /* klen bytes, not NUL-terminated for --set */
    size_t klen;
    const char *value;
    const char *arg;  /* the flag argument as given, for messages */
    const char *next; /* the separate value argument, or NULL for --flag=value */
};

static bool is_flag(const char *arg, const char *flag, size_t name_len)
{
    return strlen(flag) == name_len && memcmp(arg, flag, name_len) == 0;
}

static void unknown_argument(const char *arg, const struct spw_cli_alias *aliases, size_t n_aliases,
                             char *errstr, size_t errstr_size)
{
    const char *names[64] = {"--config", "--set", "--dump-config", "--dump-config-secrets",
                             "--help"};
    size_t n = 5;
    for (size_t i = 0; i < n_aliases && n < 64; i++)
        names[n++] = aliases[i].flag;
    char flag[SPW_CONFIG_KEY_MAX + 1];
    size_t flen = strcspn(arg, "=");
    if (flen > SPW_CONFIG_KEY_MAX)
        flen = SPW_CONFIG_KEY_MAX;
    memcpy(flag, arg, flen);
    flag[flen] = '\0';
    const char *near = arg[0] == '-' ? closest(flag, names, n) : NULL;
    /* "kafka.sasl.password=x" given without --set: name the argument, not its value */
    const char *shown = secret_name(arg, strlen(arg)) ? flag : arg;
    const char *redacted = shown == flag && arg[flen] == '=' ? "=(secret)" : "";
    if (near)
        errf(errstr, errstr_size, "unknown argument '%.80s%s' (did you mean '%s'?)", shown,
             redacted, near);
    else
        errf(errstr, errstr_size, "unknown argument '%.80s%s'", shown, redacted);
}

spw_err_t spw_cli_load(spw_config_t *cfg, int argc, char **argv,
                       const struct spw_cli_alias *aliases, size_t n_aliases, char *const *envp,
                       struct spw_cli_result *res, char *errstr, size_t errstr_size)
{
    memset(res, 0, sizeof(*res));
    spw_err_t err = SPW_ERR_INVALID;
    const char *file = NULL;
    struct cli_set *sets = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*sets));
    size_t n_sets = 0;
    if (!sets) {
        errf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            res->help = true;
            err = SPW_OK;
            goto out_free_sets; /* cfg unchanged: help must work with a broken configuration */
        }
        if (strcmp(arg, "--dump-config") == 0) {
            res->dump_config = true;
            continue;
        }
        if (strcmp(arg, "--dump-config-secrets") == 0) {
            res->dump_config = res->dump_secrets = true;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            unknown_argument(arg, aliases, n_aliases, errstr, errstr_size);
            goto out_free_sets;
        }
        /* A flag with a value: --name value or --name=value. */
        size_t name_len = strcspn(arg, "=");
        const char *value = arg[name_len] == '=' ? arg + name_len + 1 : NULL;
        const char *alias_key = NULL;
        for (size_t a = 0; a < n_aliases && !alias_key; a++)
            if (is_flag(arg, aliases[a].flag, name_len))
                alias_key = aliases[a].key;
        bool known =
            alias_key || is_flag(arg, "--config", name_len) || is_flag(arg, "--set", name_len);
        if (!known) {
            if (is_flag(arg, "--help", name_len) || is_flag(arg, "--dump-config", name_len) ||
                is_flag(arg, "--dump-config-secrets", name_len))
                errf(errstr, errstr_size, "%.*s takes no value (got '%.80s')", (int)name_len, arg,
                     arg);
            else
                unknown_argument(arg, aliases, n_aliases, errstr, errstr_size);
            goto out_free_sets;
        }
        const char *next_arg = NULL;
        if (!value) {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0) {
                errf(errstr, errstr_size, "%.*s needs a value", (int)name_len, arg);
                goto out_free_sets;
            }
            value = next_arg = argv[++i];
        }
        if (is_flag(arg, "--config", name_len)) {
            if (file) {
                errf(errstr, errstr_size, "--config given twice ('%.80s' and '%.80s')", file,
                     value);
                goto out_free_sets;
            }
            if (!value[0]) {
                errf(errstr, errstr_size, "--config needs a file name");
                goto out_free_sets;
            }
            file = value;
        } else if (alias_key) {
            sets[n_sets++] = (struct cli_set){alias_key, strlen(alias_key), value, arg, next_arg};
        } else {
            const char *eq = strchr(value, '=');
            if (!eq) {
                errf(errstr, errstr_size, "--set '%.80s': expected key=value", value);
                goto out_free_sets;
            }
            sets[n_sets++] = (struct cli_set){value, (size_t)(eq - value), eq + 1, arg, next_arg};
        }
    }

    spw_config_t *next = config_clone(cfg);
    if (!next) {
        errf(errstr, errstr_size, "out of memory");
        err = SPW_ERR_NOMEM;
        goto out_free_sets;
    }
    err = file ? apply_file(next, file, errstr, errstr_size) : SPW_OK;
    if (err == SPW_OK)
        err = apply_env(next, envp, errstr, errstr_size);
    for (size_t k = 0; err == SPW_OK && k < n_sets; k++) {
        char msg[MSG_MAX];
        const struct cli_set *s = &sets[k];
        err =
            set_value(next, s->key, s->klen, s->value, strlen(s->value), SRC_SET, msg, sizeof(msg));
        if (err != SPW_OK && secret_name(s->key, s->klen)) /* the value stays out of it */
            errf(errstr, errstr_size, "--set %.*s=(secret): %s", (int)s->klen, s->key, msg);
        else if (err != SPW_OK)
            errf(errstr, errstr_size, "%.80s%s%.80s: %s", s->arg, s->next ? " " : "",
                 s->next ? s->next : "", msg);
    }
    if (err != SPW_OK) {
        spw_config_destroy(next);
    } else {
        config_commit(cfg, next);
        if (res->dump_secrets)
            cfg->dump_secrets = true;
    }

out_free_sets:
    free(sets);
    return err;
}
