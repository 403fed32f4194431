/* Schema files: `name = id` lines that map JSON feature names to field ids. */
#include "ingest_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/hash.h"

/* Bounds on a schema file, so that a wrong path (a data file, /dev/zero) fails cleanly. */
#define SCHEMA_MAX_BYTES   (16u << 20)
#define SCHEMA_MAX_NAME    256
#define SCHEMA_MAX_ENTRIES (1u << 20)

struct schema_entry {
    char *name; /* NUL-terminated copy; owned */
    uint32_t len;
    uint32_t id;
    uint32_t line;
    uint64_t hash;
};

/* Read-only after load; entries live in an open-addressing table of 2^k slots. */
struct spw_schema {
    bool strict;
    size_t n;
    size_t mask;                /* slots - 1 */
    struct schema_entry *slots; /* name == NULL: empty */
};

static uint64_t name_hash(const char *name, size_t len)
{
    return spw_hash_key(0, name, len);
}

static struct schema_entry *find_slot(const spw_schema_t *schema, const char *name, size_t len,
                                      uint64_t hash)
{
    for (size_t i = hash & schema->mask;; i = (i + 1) & schema->mask) {
        struct schema_entry *e = &schema->slots[i];
        if (!e->name || (e->hash == hash && e->len == len && memcmp(e->name, name, len) == 0))
            return e;
    }
}

/* Doubles the table when it is half full. */
static bool grow(spw_schema_t *schema)
{
    size_t slots = (schema->mask + 1) * 2;
    struct schema_entry *old = schema->slots;
    size_t old_slots = schema->mask + 1;
    schema->slots = calloc(slots, sizeof(*schema->slots));
    if (!schema->slots) {
        schema->slots = old;
        return false;
    }
    schema->mask = slots - 1;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].name)
            *find_slot(schema, old[i].name, old[i].len, old[i].hash) = old[i];
    free(old);
    return true;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && is_space(**s))
        (*s)++;
    while (*e > *s && is_space((*e)[-1]))
        (*e)--;
}

/* Reads the whole file (bounded). Returns malloc'd bytes or NULL with errstr. */
static char *read_file(const char *path, size_t *len, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        goto out_nomem;
    for (;;) {
        if (n == cap) {
            if (cap >= SCHEMA_MAX_BYTES) {
                snprintf(errstr, errstr_size, "%s: larger than %u bytes", path, SCHEMA_MAX_BYTES);
                goto out_free_buf;
            }
            char *nbuf = realloc(buf, cap * 2);
            if (!nbuf)
                goto out_nomem;
            buf = nbuf;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(errstr, errstr_size, "%s: read error", path);
        goto out_free_buf;
    }
    fclose(f);
    *len = n;
    return buf;

out_nomem:
    snprintf(errstr, errstr_size, "%s: out of memory", path);
out_free_buf:
    free(buf);
    fclose(f);
    return NULL;
}

/* Parses one line (comment and blanks already allowed); adds its entry. */
static bool parse_line(spw_schema_t *schema, const char *s, const char *e, const char *path,
                       unsigned lineno, char *errstr, size_t errstr_size)
{
    char q[48];
    const char *hash = memchr(s, '#', (size_t)(e - s));
    if (hash)
        e = hash;
    trim(&s, &e);
    if (s == e)
        return true;
    if (memchr(s, '\0', (size_t)(e - s))) {
        snprintf(errstr, errstr_size, "%s:%u: NUL byte", path, lineno);
        return false;
    }
    const char *eq = NULL;
    for (const char *p = s; p < e; p++)
        if (*p == '=')
            eq = p;
    if (!eq) {
        snprintf(errstr, errstr_size, "%s:%u: expected `name = id`", path, lineno);
        return false;
    }
    const char *ns = s, *ne = eq, *is = eq + 1, *ie = e;
    trim(&ns, &ne);
    trim(&is, &ie);
    size_t len = (size_t)(ne - ns);
    if (len == 0 || len > SCHEMA_MAX_NAME) {
        snprintf(errstr, errstr_size, "%s:%u: name must have 1 to %d bytes", path, lineno,
                 SCHEMA_MAX_NAME);
        return false;
    }
    uint64_t id = 0;
    bool ok = is < ie && ie - is <= 10;
    for (const char *p = is; ok && p < ie; p++) {
        ok = *p >= '0' && *p <= '9';
        id = id * 10 + (uint64_t)(*p - '0');
    }
    if (!ok || id > SPW_FIELD_ID_MAX) {
        snprintf(errstr, errstr_size, "%s:%u: field id \"%s\" is not an integer in [0, %u]", path,
                 lineno, spw_ingest__quote(q, is, (size_t)(ie - is)), SPW_FIELD_ID_MAX);
        return false;
    }
    if (schema->n >= SCHEMA_MAX_ENTRIES) {
        snprintf(errstr, errstr_size, "%s:%u: more than %u names", path, lineno,
                 SCHEMA_MAX_ENTRIES);
        return false;
    }
    if ((schema->n + 1) * 2 > schema->mask + 1 && !grow(schema)) {
        snprintf(errstr, errstr_size, "%s: out of memory", path);
        return false;
    }
    uint64_t h = name_hash(ns, len);
    struct schema_entry *slot = find_slot(schema, ns, len, h);
    if (slot->name) {
        snprintf(errstr, errstr_size, "%s:%u: duplicate name \"%s\" (first on line %u)", path,
                 lineno, spw_ingest__quote(q, ns, len), slot->line);
        return false;
    }
    slot->name = malloc(len + 1);
    if (!slot->name) {
        snprintf(errstr, errstr_size, "%s: out of memory", path);
        return false;
    }
    memcpy(slot->name, ns, len);
    slot->name[len] = '\0';
    slot->len = (uint32_t)len;
    slot->id = (uint32_t)id;
    slot->line = lineno;
    slot->hash = h;
    schema->n++;
    return true;
}

spw_schema_t *spw_schema_load(const char *path, bool strict, char *errstr, size_t errstr_size)
{
    size_t len;
    char *text = read_file(path, &len, errstr, errstr_size);
    if (!text)
        return NULL;
    spw_schema_t *schema = calloc(1, sizeof(*schema));
    if (!schema) {
        snprintf(errstr, errstr_size, "%s: out of memory", path);
        goto out_free_text;
    }
    schema->strict = strict;
    schema->mask = 15;
    schema->slots = calloc(schema->mask + 1, sizeof(*schema->slots));
    if (!schema->slots) {
        snprintf(errstr, errstr_size, "%s: out of memory", path);
        goto out_destroy_schema;
    }

    unsigned lineno = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        lineno++;
        if (!parse_line(schema, p, e, path, lineno, errstr, errstr_size))
            goto out_destroy_schema;
        p = nl ? nl + 1 : end;
    }
    free(text);
    return schema;

out_destroy_schema:
    spw_schema_destroy(schema);
out_free_text:
    free(text);
    return NULL;
}

void spw_schema_destroy(spw_schema_t *schema)
{
    if (!schema)
        return;
    if (schema->slots) {
        for (size_t i = 0; i <= schema->mask; i++)
            free(schema->slots[i].name);
        free(schema->slots);
    }
    free(schema);
}

spw_err_t spw_schema_field_id(const spw_schema_t *schema, const char *name, size_t len,
                              uint32_t *id)
{
    if (schema) {
        const struct schema_entry *e = find_slot(schema, name, len, name_hash(name, len));
        if (e->name) {
            *id = e->id;
            return SPW_OK;
        }
        if (schema->strict)
            return SPW_ERR_NOT_FOUND;
    }
    *id = spw_hash_field_name(name, len);
    return SPW_OK;
}
