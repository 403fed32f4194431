/* trainer: deep models (their fields and dense network), model descriptions and fields files. */
#include "trainer_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/hash.h"

/* Fields files are small: a bound keeps a wrong path (a data file) from being read whole. */
#define FIELDS_FILE_MAX_BYTES (1u << 20)

spw_err_t spw_model_init(struct spw_model *model, enum spw_model_kind kind, uint32_t latent_dim)
{
    switch (kind) {
    case SPW_MODEL_LR:
        *model = (struct spw_model){.kind = kind, .latent_dim = 0, .dim = 1};
        return SPW_OK;
    case SPW_MODEL_FM:
        if (latent_dim < 1 || latent_dim > SPW_TRN_MAX_LATENT)
            return SPW_ERR_INVALID;
        *model = (struct spw_model){.kind = kind, .latent_dim = latent_dim, .dim = 1 + latent_dim};
        return SPW_OK;
    case SPW_MODEL_DEEPFM:
    case SPW_MODEL_DCNV2:
        return SPW_ERR_INVALID; /* spw_model_init_deep */
    }
    return SPW_ERR_INVALID;
}

bool spw_model_is_deep(const struct spw_model *model)
{
    return model->kind == SPW_MODEL_DEEPFM || model->kind == SPW_MODEL_DCNV2;
}

size_t spw_model_dense_params(const struct spw_model *model)
{
    return spw_model_is_deep(model) ? spw_dense_spec_param_count(&model->dense) : 0;
}

void spw_model_dense_init(const struct spw_model *model, float *params)
{
    if (spw_model_is_deep(model))
        spw_dense_init_params(&model->dense, model->dense_seed, params);
}

spw_err_t spw_model_init_deep(struct spw_model *model, enum spw_model_kind kind,
                              uint32_t latent_dim, const struct spw_model_field *fields,
                              uint32_t n_fields, const char *hidden, uint32_t cross_layers,
                              float dropout, uint64_t seed, char *errstr, size_t errstr_size)
{
    if (kind != SPW_MODEL_DEEPFM && kind != SPW_MODEL_DCNV2)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "model %s is not a deep model",
                        spw_model_kind_name(kind));
    if (latent_dim < 1 || latent_dim > SPW_TRN_MAX_LATENT)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "latent_dim %u is not in 1..%u",
                        latent_dim, SPW_TRN_MAX_LATENT);
    if (n_fields < 1 || n_fields > SPW_TRN_MAX_FIELDS)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "a deep model needs 1..%u fields (trainer.fields), not %u",
                        SPW_TRN_MAX_FIELDS, n_fields);
    for (uint32_t f = 0; f < n_fields; f++) {
        if (fields[f].pooling != SPW_POOL_SUM && fields[f].pooling != SPW_POOL_MEAN)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "field %u: bad pooling",
                            fields[f].id);
        for (uint32_t g = 0; g < f; g++)
            if (fields[g].id == fields[f].id)
                return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "field id %u is listed twice",
                                fields[f].id);
    }
    if (kind == SPW_MODEL_DEEPFM && cross_layers != 0)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "deepfm has no cross layers (trainer.cross.layers=%u: use dcnv2)",
                        cross_layers);
    if (kind == SPW_MODEL_DCNV2 && cross_layers < 1)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "dcnv2 needs at least one cross layer (trainer.cross.layers)");
    if ((uint64_t)n_fields * latent_dim > SPW_DENSE_MAX_WIDTH)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "fields x latent_dim = %u x %u is above the network's %u inputs", n_fields,
                        latent_dim, SPW_DENSE_MAX_WIDTH);
    struct spw_model m = {.kind = kind,
                          .latent_dim = latent_dim,
                          .dim = 1 + latent_dim,
                          .n_fields = n_fields,
                          .dense_seed = seed};
    memcpy(m.fields, fields, n_fields * sizeof(*fields));
    spw_dense_spec_default(&m.dense, n_fields * latent_dim);
    m.dense.cross_layers = cross_layers;
    m.dense.dropout = dropout;
    m.dense.dropout_seed = seed;
    spw_err_t rc = spw_dense_spec_parse_hidden(&m.dense, hidden ? hidden : "", errstr, errstr_size);
    if (rc == SPW_OK)
        rc = spw_dense_spec_check(&m.dense, errstr, errstr_size);
    if (rc != SPW_OK)
        return rc;
    if (kind == SPW_MODEL_DEEPFM && m.dense.n_hidden == 0)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "deepfm needs at least one hidden layer (trainer.mlp)");
    size_t blocks = (spw_dense_spec_param_count(&m.dense) + m.dim - 1) / m.dim;
    if (blocks > SPW_DENSE_KEY_MAX_BLOCKS)
        return spw_errf(SPW_ERR_TOO_BIG, errstr, errstr_size,
                        "the dense network needs %zu blocks of %u floats, more than %u", blocks,
                        m.dim, SPW_DENSE_KEY_MAX_BLOCKS);
    m.dense_blocks = (uint32_t)blocks;
    *model = m;
    return SPW_OK;
}

spw_err_t spw_model_kind_parse(const char *text, enum spw_model_kind *out)
{
    static const char *const names[] = {"lr", "fm", "deepfm", "dcnv2"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(text, names[i]) == 0) {
            *out = (enum spw_model_kind)i;
            return SPW_OK;
        }
    return SPW_ERR_INVALID;
}

const char *spw_model_kind_name(enum spw_model_kind kind)
{
    switch (kind) {
    case SPW_MODEL_LR:
        return "lr";
    case SPW_MODEL_FM:
        return "fm";
    case SPW_MODEL_DEEPFM:
        return "deepfm";
    case SPW_MODEL_DCNV2:
        return "dcnv2";
    }
    return "?";
}

/* Appends to buf at *len; false once it no longer fits. */
static bool append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    if (*len >= size)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - *len) {
        *len = size;
        return false;
    }
    *len += (size_t)n;
    return true;
}

int spw_model_describe(const struct spw_model *model, char *buf, size_t size)
{
    size_t len = 0;
    bool ok = append(buf, size, &len, "%s", spw_model_kind_name(model->kind));
    if (model->kind != SPW_MODEL_LR)
        ok = ok && append(buf, size, &len, " k=%u", model->latent_dim);
    if (spw_model_is_deep(model)) {
        ok = ok && append(buf, size, &len, " fields=");
        for (uint32_t f = 0; f < model->n_fields; f++)
            ok = ok && append(buf, size, &len, "%s%u:%s", f ? "," : "", model->fields[f].id,
                              model->fields[f].pooling == SPW_POOL_MEAN ? "mean" : "sum");
        if (model->kind == SPW_MODEL_DCNV2)
            ok = ok && append(buf, size, &len, " cross=%u", model->dense.cross_layers);
        ok = ok && append(buf, size, &len, " mlp=");
        if (model->dense.n_hidden == 0)
            ok = ok && append(buf, size, &len, "none");
        for (uint32_t k = 0; k < model->dense.n_hidden; k++)
            ok = ok && append(buf, size, &len, "%s%u", k ? "," : "", model->dense.hidden[k]);
        ok = ok && append(buf, size, &len, " dropout=%.9g seed=%" PRIu64,
                          (double)model->dense.dropout, model->dense_seed);
    }
    if (!ok) {
        if (size)
            buf[0] = '\0';
        return SPW_ERR_TOO_BIG;
    }
    return (int)len;
}

/* Parses a decimal u64 of the whole of text. */
static bool parse_u64(const char *text, uint64_t *out)
{
    if (text[0] < '0' || text[0] > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

static spw_err_t parse_pooling(const char *text, enum spw_pooling *out)
{
    if (strcmp(text, "sum") == 0)
        *out = SPW_POOL_SUM;
    else if (strcmp(text, "mean") == 0)
        *out = SPW_POOL_MEAN;
    else
        return SPW_ERR_INVALID;
    return SPW_OK;
}

/* "1:sum,2:mean" into fields. */
static spw_err_t parse_fields(char *text, struct spw_model_field *fields, uint32_t *n, char *errstr,
                              size_t errstr_size)
{
    *n = 0;
    for (char *save = NULL, *item = strtok_r(text, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        uint64_t id = 0;
        if (*n == SPW_TRN_MAX_FIELDS)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "more than %u fields",
                            SPW_TRN_MAX_FIELDS);
        if (colon)
            *colon = '\0';
        if (!parse_u64(item, &id) || id > SPW_FIELD_ID_MAX ||
            (colon && parse_pooling(colon + 1, &fields[*n].pooling) != SPW_OK))
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "bad field \"%s%s%s\"", item,
                            colon ? ":" : "", colon ? colon + 1 : "");
        if (!colon)
            fields[*n].pooling = SPW_POOL_SUM;
        fields[(*n)++].id = (uint32_t)id;
    }
    return SPW_OK;
}

spw_err_t spw_model_parse(const char *text, struct spw_model *model, char *errstr,
                          size_t errstr_size)
{
    size_t tlen = strnlen(text, SPW_MODEL_DESC_MAX);
    if (tlen >= SPW_MODEL_DESC_MAX)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "model description longer than %u bytes", SPW_MODEL_DESC_MAX - 1);
    char *copy = malloc(tlen + 1);
    struct spw_model_field *fields = malloc(SPW_TRN_MAX_FIELDS * sizeof(*fields));
    if (!copy || !fields) {
        free(copy);
        free(fields);
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "model description: out of memory");
    }
    memcpy(copy, text, tlen + 1);
    spw_err_t rc = SPW_OK;
    enum spw_model_kind kind = SPW_MODEL_LR;
    uint64_t k = 0, cross = 0, seed = 0;
    uint32_t n_fields = 0;
    double dropout = 0.0;
    const char *mlp = "";
    char *save = NULL, *tok = strtok_r(copy, " ", &save);
    if (!tok || spw_model_kind_parse(tok, &kind) != SPW_OK) {
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                      "model description \"%.64s\": no "
                      "model kind first (lr, fm, deepfm, dcnv2)",
                      text);
        goto out;
    }
    while (rc == SPW_OK && (tok = strtok_r(NULL, " ", &save))) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "model description: \"%.64s\" "
                          "is not key=value",
                          tok);
            break;
        }
        *eq = '\0';
        const char *val = eq + 1;
        bool ok = true;
        if (strcmp(tok, "k") == 0)
            ok = parse_u64(val, &k) && k <= SPW_TRN_MAX_LATENT;
        else if (strcmp(tok, "fields") == 0)
            rc = parse_fields(eq + 1, fields, &n_fields, errstr, errstr_size);
        else if (strcmp(tok, "cross") == 0)
            ok = parse_u64(val, &cross) && cross <= SPW_DENSE_MAX_CROSS;
        else if (strcmp(tok, "mlp") == 0)
            mlp = val;
        else if (strcmp(tok, "seed") == 0)
            ok = parse_u64(val, &seed);
        else if (strcmp(tok, "dropout") == 0) {
            char *end = NULL;
            dropout = strtod(val, &end);
            ok = end != val && *end == '\0' && dropout >= 0.0 && dropout < 1.0;
        } else
            ok = false;
        if (!ok)
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "model description: bad item \"%.32s=%.64s\"", tok, val);
    }
    if (rc != SPW_OK)
        goto out;
    if (kind == SPW_MODEL_DEEPFM || kind == SPW_MODEL_DCNV2)
        rc = spw_model_init_deep(model, kind, (uint32_t)k, fields, n_fields,
                                 strcmp(mlp, "none") == 0 ? "" : mlp, (uint32_t)cross,
                                 (float)dropout, seed, errstr, errstr_size);
    else if (spw_model_init(model, kind, (uint32_t)k) != SPW_OK)
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                      "model description: %s k=%" PRIu64 " is not a valid model",
                      spw_model_kind_name(kind), k);
out:
    free(copy);
    free(fields);
    return rc;
}

/* Trims spaces and tabs at both ends of [*s, *s + *len). */
static void trim(const char **s, size_t *len)
{
    while (*len && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*len)--;
    }
    while (*len && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t' || (*s)[*len - 1] == '\r'))
        (*len)--;
}

/* One field "[name =] id [sum|mean]" or "name [sum|mean]" (a name's id is spw_hash_field_name's,
 * as ingest gives it without a schema; a decimal name is its own id). */
static spw_err_t field_parse(const char *where, const char *s, size_t len,
                             struct spw_model_field *field, char *errstr, size_t errstr_size)
{
    char buf[512];
    if (len >= sizeof(buf))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: field too long", where);
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *eq = strchr(buf, '=');
    char *save = NULL, *tok = strtok_r(eq ? eq + 1 : buf, " \t:", &save);
    char *pool = strtok_r(NULL, " \t:", &save);
    uint64_t v = 0;
    if (!tok || (eq && (!parse_u64(tok, &v) || v > SPW_FIELD_ID_MAX)))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "%s: expected \"name = id [sum|mean]\" or \"name [sum|mean]\"", where);
    field->id = eq ? (uint32_t)v : spw_hash_field_name(tok, strlen(tok));
    field->pooling = SPW_POOL_SUM;
    if (pool && parse_pooling(pool, &field->pooling) != SPW_OK)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "%s: pooling \"%s\" is neither sum nor mean", where, pool);
    if (strtok_r(NULL, " \t", &save))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: text after the pooling", where);
    return SPW_OK;
}

/* Adds fields[*n] unless full or a repeat. */
static spw_err_t field_check_add(const char *where, struct spw_model_field *fields, uint32_t *n,
                                 char *errstr, size_t errstr_size)
{
    for (uint32_t g = 0; g < *n; g++)
        if (fields[g].id == fields[*n].id)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s: field id %u is listed twice",
                            where, fields[*n].id);
    (*n)++;
    return SPW_OK;
}

spw_err_t spw_model_fields_parse(const char *text, struct spw_model_field *fields, uint32_t *n,
                                 char *errstr, size_t errstr_size)
{
    if (text[0] == '@')
        return spw_model_fields_load(text + 1, fields, n, errstr, errstr_size);
    *n = 0;
    spw_err_t rc = SPW_OK;
    for (const char *p = text; rc == SPW_OK && *p;) {
        size_t len = strcspn(p, ",");
        const char *s = p;
        p += len + (p[len] == ',');
        size_t tl = len;
        trim(&s, &tl);
        if (tl == 0)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "fields \"%.64s\": an empty item",
                            text);
        if (*n == SPW_TRN_MAX_FIELDS)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "more than %u fields",
                            SPW_TRN_MAX_FIELDS);
        if ((rc = field_parse("fields", s, tl, &fields[*n], errstr, errstr_size)) == SPW_OK)
            rc = field_check_add("fields", fields, n, errstr, errstr_size);
    }
    if (rc == SPW_OK && *n == 0)
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "no field given");
    return rc;
}

spw_err_t spw_model_fields_load(const char *path, struct spw_model_field *fields, uint32_t *n,
                                char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return spw_errf(errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO, errstr, errstr_size,
                        "fields file %s: %s", path, strerror(errno));
    char *text = malloc(FIELDS_FILE_MAX_BYTES + 1);
    size_t size = text ? fread(text, 1, FIELDS_FILE_MAX_BYTES + 1, f) : 0;
    bool read_err = ferror(f);
    fclose(f);
    if (!text)
        return spw_errf(SPW_ERR_NOMEM, errstr, errstr_size, "fields file: out of memory");
    spw_err_t rc = SPW_OK;
    if (read_err || size > FIELDS_FILE_MAX_BYTES) {
        rc = spw_errf(read_err ? SPW_ERR_IO : SPW_ERR_INVALID, errstr, errstr_size,
                      "fields file %s: %s", path,
                      read_err ? "read error" : "larger than 1 MiB: not a fields file");
        goto out;
    }
    *n = 0;
    unsigned line = 0;
    for (size_t pos = 0; pos < size && rc == SPW_OK;) {
        const char *s = text + pos;
        size_t len = strcspn(s, "\n");
        if (pos + len > size)
            len = size - pos;
        pos += len + 1;
        line++;
        const char *hash = memchr(s, '#', len);
        if (hash)
            len = (size_t)(hash - s);
        trim(&s, &len);
        if (len == 0)
            continue;
        if (memchr(s, '\0', len)) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                          "%s:%u: NUL byte: not a fields "
                          "file",
                          path, line);
            break;
        }
        if (*n == SPW_TRN_MAX_FIELDS) {
            rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "%s:%u: more than %u fields", path,
                          line, SPW_TRN_MAX_FIELDS);
            break;
        }
        char where[300];
        snprintf(where, sizeof(where), "%.256s:%u", path, line);
        if ((rc = field_parse(where, s, len, &fields[*n], errstr, errstr_size)) == SPW_OK)
            rc = field_check_add(where, fields, n, errstr, errstr_size);
    }
    if (rc == SPW_OK && *n == 0)
        rc = spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "fields file %s names no field", path);
out:
    free(text);
    return rc;
}
