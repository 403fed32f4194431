/* Metrics registry: lock-free counters, gauges and histograms, rendered as Prometheus text 0.0.4.
 */
#include "sparrow/metrics.h"
#include "metrics_int.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/*
 * Layout: the registry holds families (one per metric name, in registration order); a family holds
 * its series (one per label set, in registration order). A handle (spw_counter_t, ...) points into
 * its series, which is allocated once and never moves, so updates need neither the lock nor the
 * family. The lock (reg->lock) guards the lists: registration appends, render walks them.
 *
 * Values:
 * - counter: an atomic u64;
 * - gauge: the bits of a double in an atomic u64 (set = store, add = CAS loop);
 * - histogram: one atomic u64 per bucket (not cumulative; render accumulates) plus the sum as the
 *   bits of a double updated by a CAS loop. The count is the sum of the buckets, so a rendered
 *   _count always equals the +Inf bucket, even while observations race with render.
 *
 * Labels are parsed at registration, sorted by name and kept in canonical rendered form
 * (k1="v1",k2="v2" with values escaped), so `a="1",b="2"` and `b="2",a="1"` are one series.
 */

#define MAX_LABELS    16
#define MAX_NAME_LEN  200
#define MAX_LABEL_LEN 1024

enum kind {
    KIND_COUNTER,
    KIND_GAUGE,
    KIND_HISTOGRAM,
};

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

struct spw_counter {
    _Atomic uint64_t value;
};

struct spw_gauge {
    _Atomic uint64_t bits; /* a double */
};

struct spw_histogram {
    size_t n_bounds;
    double bounds[SPW_HISTOGRAM_MAX_BUCKETS];
    _Atomic uint64_t buckets[SPW_HISTOGRAM_MAX_BUCKETS + 1]; /* last: above every bound (+Inf) */
    _Atomic uint64_t sum_bits;                               /* a double */
};

struct series {
    struct series *next;
    char *labels; /* canonical, without braces; "" when none */
    union {
        struct spw_counter counter;
        struct spw_gauge gauge;
        struct spw_histogram histogram;
    } m;
};

struct family {
    struct family *next;
    enum kind kind;
    char *name;
    char *help;
    struct series *first;
    struct series *last;
};

struct spw_metrics {
    pthread_mutex_t lock;
    struct family *first; /* guarded by lock */
    struct family *last;
    _Atomic bool process; /* render the process collector's families last */
};

static uint64_t dbl_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    return b;
}

static double bits_dbl(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof(v));
    return v;
}

/* ---- validation ------------------------------------------------------------------------------ */

static bool name_valid(const char *name, bool allow_colon)
{
    size_t n = strlen(name);
    if (n == 0 || n > MAX_NAME_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

/* True when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

/* ---- string builder -------------------------------------------------------------------------- */

struct sbuf {
    char *p;
    size_t len;
    size_t cap;
    bool oom; /* sticky: once set, appends do nothing */
};

static void sb_reserve(struct sbuf *sb, size_t extra)
{
    if (sb->oom)
        return;
    if (extra > SIZE_MAX / 2 - sb->len) {
        sb->oom = true;
        return;
    }
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap)
        return;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(sb->p, cap);
    if (!p) {
        sb->oom = true;
        return;
    }
    sb->p = p;
    sb->cap = cap;
    sb->p[sb->len] = '\0';
}

static void sb_putn(struct sbuf *sb, const char *s, size_t n)
{
    sb_reserve(sb, n);
    if (sb->oom)
        return;
    memcpy(sb->p + sb->len, s, n);
    sb->len += n;
    sb->p[sb->len] = '\0';
}

static void sb_puts(struct sbuf *sb, const char *s)
{
    sb_putn(sb, s, strlen(s));
}

static void sb_putc(struct sbuf *sb, char c)
{
    sb_putn(sb, &c, 1);
}

/* Appends s escaped for a HELP line (\\ and \n) or, with quote set, a label value (also \"). */
static void sb_escaped(struct sbuf *sb, const char *s, size_t n, bool quote)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\')
            sb_putn(sb, "\\\\", 2);
        else if (c == '\n')
            sb_putn(sb, "\\n", 2);
        else if (quote && c == '"')
            sb_putn(sb, "\\\"", 2);
        else
            sb_putc(sb, c);
    }
}

/* Formats v as Prometheus (Go's ParseFloat) reads it: +Inf, -Inf, NaN, else the shortest of
 * %.15g..%.17g that reads back to the same double. */
static void fmt_double(char *out, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, size, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, size, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void sb_double(struct sbuf *sb, double v)
{
    char tmp[40];
    fmt_double(tmp, sizeof(tmp), v);
    sb_puts(sb, tmp);
}

static void sb_u64(struct sbuf *sb, uint64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);
    sb_puts(sb, tmp);
}

/* ---- labels ---------------------------------------------------------------------------------- */

struct label {
    const char *name;
    size_t name_len;
    char *value; /* unescaped, malloc'd */
    size_t value_len;
};

static int label_cmp(const void *a, const void *b)
{
    const struct label *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static void skip_ws(const char **s)
{
    while (**s == ' ' || **s == '\t')
        (*s)++;
}

/*
 * Parses `k1="v1",k2="v2"` (spaces around tokens and a trailing comma allowed; values may use the
 * escapes \\ \" \n) into the canonical form: sorted by name, values escaped. Label names follow
 * [a-zA-Z_][a-zA-Z0-9_]*, must not start with "__" (reserved), must be unique and, for histograms,
 * must not be "le". Returns a malloc'd string ("" for NULL or empty input) or NULL when invalid
 * or out of memory.
 */
static char *labels_canonical(const char *text, enum kind kind)
{
    struct label labels[MAX_LABELS];
    size_t n = 0;
    char *out = NULL;
    struct sbuf sb = {0};

    if (!text)
        text = "";
    if (strlen(text) > MAX_LABEL_LEN)
        return NULL;
    const char *s = text;
    for (;;) {
        skip_ws(&s);
        if (*s == '\0')
            break;
        if (n == MAX_LABELS)
            goto out_free_labels;
        const char *name = s;
        while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' ||
               (s > name && *s >= '0' && *s <= '9'))
            s++;
        size_t name_len = (size_t)(s - name);
        if (name_len == 0 || (name_len >= 2 && name[0] == '_' && name[1] == '_'))
            goto out_free_labels;
        if (kind == KIND_HISTOGRAM && name_len == 2 && memcmp(name, "le", 2) == 0)
            goto out_free_labels;
        skip_ws(&s);
        if (*s++ != '=')
            goto out_free_labels;
        skip_ws(&s);
        if (*s++ != '"')
            goto out_free_labels;
        char *value = malloc(strlen(s) + 1);
        if (!value)
            goto out_free_labels;
        size_t vlen = 0;
        while (*s != '"') {
            if (*s == '\0') {
                free(value);
                goto out_free_labels;
            }
            if (*s == '\\') {
                s++;
                if (*s == '\\' || *s == '"') {
                    value[vlen++] = *s;
                } else if (*s == 'n') {
                    value[vlen++] = '\n';
                } else {
                    free(value);
                    goto out_free_labels;
                }
                s++;
            } else {
                value[vlen++] = *s++;
            }
        }
        s++; /* closing quote */
        if (!utf8_valid((const unsigned char *)value, vlen)) {
            free(value);
            goto out_free_labels;
        }
        labels[n++] = (struct label){name, name_len, value, vlen};
        skip_ws(&s);
        if (*s == ',')
            s++;
        else if (*s != '\0')
            goto out_free_labels;
    }

    qsort(labels, n, sizeof(labels[0]), label_cmp);
    for (size_t i = 1; i < n; i++)
        if (label_cmp(&labels[i - 1], &labels[i]) == 0)
            goto out_free_labels;
    sb_reserve(&sb, 0);
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_putc(&sb, ',');
        sb_putn(&sb, labels[i].name, labels[i].name_len);
        sb_putn(&sb, "=\"", 2);
        sb_escaped(&sb, labels[i].value, labels[i].value_len, true);
        sb_putc(&sb, '"');
    }
    if (sb.oom)
        free(sb.p);
    else
        out = sb.p;

out_free_labels:
    for (size_t i = 0; i < n; i++)
        free(labels[i].value);
    return out;
}

/* ---- registry -------------------------------------------------------------------------------- */

spw_metrics_t *spw_metrics_new(void)
{
    spw_metrics_t *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return NULL;
    if (pthread_mutex_init(&reg->lock, NULL) != 0) {
        free(reg);
        return NULL;
    }
    atomic_init(&reg->process, false);
    return reg;
}

void spw_metrics_destroy(spw_metrics_t *reg)
{
    if (!reg)
        return;
    struct family *f = reg->first;
    while (f) {
        struct family *fnext = f->next;
        struct series *s = f->first;
        while (s) {
            struct series *snext = s->next;
            free(s->labels);
            free(s);
            s = snext;
        }
        free(f->name);
        free(f->help);
        free(f);
        f = fnext;
    }
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

/* True when a family (name, kind) prints sample lines named `sample`. */
static bool family_prints(const char *name, enum kind kind, const char *sample)
{
    static const char *const hist_suffixes[] = {"_bucket", "_sum", "_count"};
    if (kind != KIND_HISTOGRAM)
        return strcmp(name, sample) == 0;
    size_t len = strlen(name);
    if (strncmp(name, sample, len) != 0)
        return false;
    for (size_t i = 0; i < 3; i++)
        if (strcmp(sample + len, hist_suffixes[i]) == 0)
            return true;
    return false;
}

/* True when the new family (name, kind) and `other` would print sample lines of the same name
 * (a histogram "x" prints x_bucket, x_sum and x_count, so it clashes with a gauge "x_sum"). */
static bool names_clash(const char *name, enum kind kind, const struct family *other)
{
    if (kind != KIND_HISTOGRAM)
        return family_prints(other->name, other->kind, name);
    if (other->kind != KIND_HISTOGRAM)
        return family_prints(name, kind, other->name);
    return false; /* two distinct histogram names never print the same sample name */
}

static bool bounds_valid(const double *bounds, size_t n_bounds)
{
    if (n_bounds > SPW_HISTOGRAM_MAX_BUCKETS)
        return false;
    for (size_t i = 0; i < n_bounds; i++) {
        if (!isfinite(bounds[i]))
            return false;
        if (i > 0 && !(bounds[i] > bounds[i - 1]))
            return false;
    }
    return true;
}

static bool same_bounds(const struct spw_histogram *h, const double *bounds, size_t n_bounds)
{
    return h->n_bounds == n_bounds &&
           (n_bounds == 0 || memcmp(h->bounds, bounds, n_bounds * sizeof(double)) == 0);
}

/* Finds or creates name{labels} of kind; NULL when a name or label is invalid, the name is taken
 * by another kind, the histogram bounds differ from the family's, or out of memory. */
static struct series *series_get(spw_metrics_t *reg, enum kind kind, const char *name,
                                 const char *help, const char *labels, const double *bounds,
                                 size_t n_bounds)
{
    struct series *result = NULL;

    if (!name || !name_valid(name, true))
        return NULL;
    if (!help)
        help = "";
    if (!utf8_valid((const unsigned char *)help, strlen(help)))
        return NULL;
    if (kind == KIND_HISTOGRAM && !bounds_valid(bounds, n_bounds))
        return NULL;
    char *canon = labels_canonical(labels, kind);
    if (!canon)
        return NULL;

    pthread_mutex_lock(&reg->lock);
    struct family *fam = NULL;
    for (struct family *f = reg->first; f; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            fam = f;
            break;
        }
        if (names_clash(name, kind, f))
            goto out_unlock;
    }
    if (fam) {
        if (fam->kind != kind)
            goto out_unlock;
        for (struct series *s = fam->first; s; s = s->next) {
            if (strcmp(s->labels, canon) == 0) {
                if (kind == KIND_HISTOGRAM && !same_bounds(&s->m.histogram, bounds, n_bounds))
                    goto out_unlock;
                result = s;
                goto out_unlock;
            }
        }
        /* one family shares its buckets, so that sum(rate(x_bucket)) by (le) makes sense */
        if (kind == KIND_HISTOGRAM && fam->first &&
            !same_bounds(&fam->first->m.histogram, bounds, n_bounds))
            goto out_unlock;
    }

    struct series *s = calloc(1, sizeof(*s));
    if (!s)
        goto out_unlock;
    s->labels = canon;
    if (kind == KIND_HISTOGRAM) {
        s->m.histogram.n_bounds = n_bounds;
        if (n_bounds)
            memcpy(s->m.histogram.bounds, bounds, n_bounds * sizeof(double));
        atomic_init(&s->m.histogram.sum_bits, dbl_bits(0.0));
    } else if (kind == KIND_GAUGE) {
        atomic_init(&s->m.gauge.bits, dbl_bits(0.0));
    }

    if (!fam) {
        fam = calloc(1, sizeof(*fam));
        if (!fam)
            goto out_free_series;
        fam->kind = kind;
        fam->name = strdup(name);
        fam->help = strdup(help);
        if (!fam->name || !fam->help)
            goto out_free_family;
        if (reg->last)
            reg->last->next = fam;
        else
            reg->first = fam;
        reg->last = fam;
    }
    if (fam->last)
        fam->last->next = s;
    else
        fam->first = s;
    fam->last = s;
    canon = NULL; /* owned by s */
    result = s;
    goto out_unlock;

out_free_family:
    free(fam->name);
    free(fam->help);
    free(fam);
out_free_series:
    free(s);
out_unlock:
    pthread_mutex_unlock(&reg->lock);
    free(canon);
    return result;
}

spw_counter_t *spw_metrics_counter_new(spw_metrics_t *reg, const char *name, const char *help,
                                       const char *labels)
{
    struct series *s = series_get(reg, KIND_COUNTER, name, help, labels, NULL, 0);
    return s ? &s->m.counter : NULL;
}

spw_gauge_t *spw_metrics_gauge_new(spw_metrics_t *reg, const char *name, const char *help,
                                   const char *labels)
{
    struct series *s = series_get(reg, KIND_GAUGE, name, help, labels, NULL, 0);
    return s ? &s->m.gauge : NULL;
}

spw_histogram_t *spw_metrics_histogram_new(spw_metrics_t *reg, const char *name, const char *help,
                                           const char *labels, const double *bounds,
                                           size_t n_bounds)
{
    if (n_bounds > 0 && !bounds)
        return NULL;
    struct series *s = series_get(reg, KIND_HISTOGRAM, name, help, labels, bounds, n_bounds);
    return s ? &s->m.histogram : NULL;
}

/* ---- updates (lock-free) --------------------------------------------------------------------- */

void spw_counter_inc(spw_counter_t *c)
{
    atomic_fetch_add_explicit(&c->value, 1, memory_order_relaxed);
}

void spw_counter_add(spw_counter_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}

uint64_t spw_counter_get(const spw_counter_t *c)
{
    return atomic_load_explicit(&((spw_counter_t *)c)->value, memory_order_relaxed);
}

void spw_gauge_set(spw_gauge_t *g, double v)
{
    atomic_store_explicit(&g->bits, dbl_bits(v), memory_order_relaxed);
}

/* Adds delta to the double stored in *bits. */
static void atomic_add_double(_Atomic uint64_t *bits, double delta)
{
    uint64_t old = atomic_load_explicit(bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(bits, &old, dbl_bits(bits_dbl(old) + delta),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void spw_gauge_add(spw_gauge_t *g, double delta)
{
    atomic_add_double(&g->bits, delta);
}

double spw_gauge_get(const spw_gauge_t *g)
{
    return bits_dbl(atomic_load_explicit(&((spw_gauge_t *)g)->bits, memory_order_relaxed));
}

size_t spw_histogram_bucket(const spw_histogram_t *h, double v)
{
    /* first bound >= v (Prometheus' le); NaN compares false everywhere and lands in +Inf */
    size_t lo = 0, hi = h->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->bounds[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void spw_histogram_observe(spw_histogram_t *h, double v)
{
    atomic_fetch_add_explicit(&h->buckets[spw_histogram_bucket(h, v)], 1, memory_order_relaxed);
    atomic_add_double(&h->sum_bits, v);
}

void spw_histogram_add(spw_histogram_t *h, const uint64_t *counts, double sum)
{
    for (size_t i = 0; i <= h->n_bounds; i++)
        if (counts[i])
            atomic_fetch_add_explicit(&h->buckets[i], counts[i], memory_order_relaxed);
    atomic_add_double(&h->sum_bits, sum);
}

uint64_t spw_histogram_count(const spw_histogram_t *h)
{
    spw_histogram_t *mh = (spw_histogram_t *)h;
    uint64_t count = 0;
    for (size_t i = 0; i <= h->n_bounds; i++)
        count += atomic_load_explicit(&mh->buckets[i], memory_order_relaxed);
    return count;
}

double spw_histogram_sum(const spw_histogram_t *h)
{
    return bits_dbl(atomic_load_explicit(&((spw_histogram_t *)h)->sum_bits, memory_order_relaxed));
}

/* ---- render ---------------------------------------------------------------------------------- */

/* Writes `name[suffix]{labels[,extra]}` (no braces when both are empty). */
static void sb_sample_name(struct sbuf *sb, const char *name, const char *suffix,
                           const char *labels, const char *extra)
{
    sb_puts(sb, name);
    if (suffix)
        sb_puts(sb, suffix);
    bool has_labels = labels[0] != '\0';
    if (!has_labels && !extra)
        return;
    sb_putc(sb, '{');
    sb_puts(sb, labels);
    if (extra) {
        if (has_labels)
            sb_putc(sb, ',');
        sb_puts(sb, extra);
    }
    sb_putc(sb, '}');
}

static void render_histogram(struct sbuf *sb, const char *name, const struct series *s)
{
    spw_histogram_t *h = (spw_histogram_t *)&s->m.histogram;
    uint64_t cum = 0;
    char le[64], num[40];
    for (size_t i = 0; i <= h->n_bounds; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < h->n_bounds)
            fmt_double(num, sizeof(num), h->bounds[i]);
        else
            snprintf(num, sizeof(num), "+Inf");
        snprintf(le, sizeof(le), "le=\"%s\"", num);
        sb_sample_name(sb, name, "_bucket", s->labels, le);
        sb_putc(sb, ' ');
        sb_u64(sb, cum);
        sb_putc(sb, '\n');
    }
    sb_sample_name(sb, name, "_sum", s->labels, NULL);
    sb_putc(sb, ' ');
    sb_double(sb, spw_histogram_sum(h));
    sb_putc(sb, '\n');
    sb_sample_name(sb, name, "_count", s->labels, NULL);
    sb_putc(sb, ' ');
    sb_u64(sb, cum);
    sb_putc(sb, '\n');
}

void spw_metrics_add_process(spw_metrics_t *reg)
{
    atomic_store_explicit(&reg->process, true, memory_order_relaxed);
}

char *spw_metrics_render(spw_metrics_t *reg, size_t *len_out)
{
    struct sbuf sb = {0};
    sb_reserve(&sb, 4096);

    pthread_mutex_lock(&reg->lock);
    for (const struct family *f = reg->first; f; f = f->next) {
        sb_puts(&sb, "# HELP ");
        sb_puts(&sb, f->name);
        sb_putc(&sb, ' ');
        sb_escaped(&sb, f->help, strlen(f->help), false);
        sb_puts(&sb, "\n# TYPE ");
        sb_puts(&sb, f->name);
        sb_putc(&sb, ' ');
        sb_puts(&sb, kind_names[f->kind]);
        sb_putc(&sb, '\n');
        for (const struct series *s = f->first; s; s = s->next) {
            switch (f->kind) {
            case KIND_COUNTER:
                sb_sample_name(&sb, f->name, NULL, s->labels, NULL);
                sb_putc(&sb, ' ');
                sb_u64(&sb, spw_counter_get(&s->m.counter));
                sb_putc(&sb, '\n');
                break;
            case KIND_GAUGE:
                sb_sample_name(&sb, f->name, NULL, s->labels, NULL);
                sb_putc(&sb, ' ');
                sb_double(&sb, spw_gauge_get(&s->m.gauge));
                sb_putc(&sb, '\n');
                break;
            case KIND_HISTOGRAM:
                render_histogram(&sb, f->name, s);
                break;
            }
        }
    }
    pthread_mutex_unlock(&reg->lock);
    if (atomic_load_explicit(&reg->process, memory_order_relaxed)) {
        char text[SPW_METRICS_PROCESS_TEXT_MAX];
        sb_putn(&sb, text, spw_metrics__process_text(text, sizeof(text)));
    }

    if (sb.oom) {
        free(sb.p);
        return NULL;
    }
    if (len_out)
        *len_out = sb.len;
    return sb.p;
}
