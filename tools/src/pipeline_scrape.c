/* Reading the pipeline's state: /metrics pages of trainers and shards (Prometheus text), histogram
 * quantiles, key=value fields of log lines, and the demo's progress line. */
#include <math.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "pipeline_int.h"

/* The largest /metrics page read from a role. */
#define PIPELINE_METRICS_MAX (1u << 20)

/* The whole response of one HTTP/1.0 exchange with 127.0.0.1:port (malloc'd, NUL-terminated), or
 * NULL when unreachable. */
static char *http_exchange(int port, const char *req, size_t req_len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char *buf = NULL;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto out_close;
    if (send(fd, req, req_len, MSG_NOSIGNAL) != (ssize_t)req_len)
        goto out_close;
    size_t cap = 65536, len = 0;
    buf = malloc(cap);
    if (!buf)
        goto out_close;
    for (;;) {
        if (len + 1 == cap) {
            if (cap >= PIPELINE_METRICS_MAX)
                break;
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
out_close:
    close(fd);
    return buf;
}

char *spw_pipeline_http(int port, const char *method, const char *path, const char *body,
                        int *status)
{
    *status = 0;
    size_t body_len = body ? strlen(body) : 0;
    size_t cap = body_len + strlen(method) + strlen(path) + 128;
    char *req = malloc(cap);
    if (!req)
        return NULL;
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, body_len, body ? body : "");
    char *resp = n > 0 && (size_t)n < cap ? http_exchange(port, req, (size_t)n) : NULL;
    free(req);
    if (!resp)
        return NULL;
    int code = 0;
    const char *start = strstr(resp, "\r\n\r\n");
    if (strncmp(resp, "HTTP/1.", 7) != 0 || sscanf(resp + 8, " %d", &code) != 1 || !start) {
        free(resp);
        return NULL;
    }
    *status = code;
    memmove(resp, start + 4, strlen(start + 4) + 1);
    return resp;
}

char *spw_pipeline_metrics_get(int port)
{
    int status = 0;
    char *page = spw_pipeline_http(port, "GET", "/metrics", NULL, &status);
    if (page && status != 200) {
        free(page);
        page = NULL;
    }
    return page;
}

/* The value at the end of the line starting at line. */
static double line_value(const char *line)
{
    const char *eol = strchr(line, '\n');
    const char *sp = eol ? eol : line + strlen(line);
    while (sp > line && sp[-1] != ' ')
        sp--;
    return strtod(sp, NULL);
}

double spw_pipeline_metric_sum(const char *page, const char *name)
{
    size_t nlen = strlen(name);
    double sum = 0;
    bool found = false;
    for (const char *line = page; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, name, nlen) != 0 || (line[nlen] != ' ' && line[nlen] != '{'))
            continue;
        double v = line_value(line);
        if (isfinite(v)) {
            sum += v;
            found = true;
        }
    }
    return found ? sum : NAN;
}

/* Adds v to the cumulative bucket of h with upper bound bound. */
static void hist_bucket_add(struct spw_pipeline_hist *h, double bound, double v)
{
    size_t i = 0;
    while (i < h->n && h->le[i] != bound)
        i++;
    if (i == h->n) {
        if (h->n == SPW_PIPELINE_MAX_BUCKETS)
            return;
        h->le[h->n] = bound;
        h->count[h->n++] = 0;
    }
    h->count[i] += v;
}

/* The bound of a bucket line's le="..." label; false when it has none. */
static bool bucket_bound(const char *line, double *bound)
{
    const char *le = strstr(line, "le=\"");
    const char *eol = strchr(line, '\n');
    if (!le || (eol && le > eol))
        return false;
    *bound = strncmp(le + 4, "+Inf", 4) == 0 ? INFINITY : strtod(le + 4, NULL);
    return true;
}

void spw_pipeline_hist_add(struct spw_pipeline_hist *h, const char *page, const char *name)
{
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "%s_sum", name);
    double sum = spw_pipeline_metric_sum(page, prefix);
    if (isfinite(sum))
        h->sum += sum;
    snprintf(prefix, sizeof(prefix), "%s_bucket{", name);
    size_t plen = strlen(prefix);
    for (const char *line = page; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, prefix, plen) != 0)
            continue;
        double bound, v = line_value(line);
        if (bucket_bound(line, &bound) && isfinite(v))
            hist_bucket_add(h, bound, v);
    }
}

/* The histogram of hb for the value of label in the {...} that starts at braces; NULL when the
 * series lacks label or hb is full. */
static struct spw_pipeline_hist *hist_of_label(struct spw_pipeline_hist_by *hb, const char *braces,
                                               const char *label)
{
    const char *close = strchr(braces, '}');
    size_t llen = strlen(label);
    for (const char *at = braces; close && at < close; at++) {
        if ((*at != '{' && *at != ',') || strncmp(at + 1, label, llen) != 0 ||
            strncmp(at + 1 + llen, "=\"", 2) != 0)
            continue;
        const char *v = at + 1 + llen + 2, *end = strchr(v, '"');
        if (!end || end > close || (size_t)(end - v) >= sizeof(hb->value[0]))
            return NULL;
        size_t vlen = (size_t)(end - v);
        for (size_t i = 0; i < hb->n; i++)
            if (strlen(hb->value[i]) == vlen && strncmp(hb->value[i], v, vlen) == 0)
                return &hb->h[i];
        if (hb->n == SPW_PIPELINE_MAX_LABEL_VALUES)
            return NULL;
        memcpy(hb->value[hb->n], v, vlen);
        hb->value[hb->n][vlen] = '\0';
        return &hb->h[hb->n++];
    }
    return NULL;
}

void spw_pipeline_hist_add_by(struct spw_pipeline_hist_by *hb, const char *page, const char *name,
                              const char *label)
{
    char bucket[128], sum[128];
    snprintf(bucket, sizeof(bucket), "%s_bucket{", name);
    snprintf(sum, sizeof(sum), "%s_sum{", name);
    size_t blen = strlen(bucket), slen = strlen(sum);
    for (const char *line = page; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        bool is_bucket = strncmp(line, bucket, blen) == 0;
        if (!is_bucket && strncmp(line, sum, slen) != 0)
            continue;
        struct spw_pipeline_hist *h =
            hist_of_label(hb, line + (is_bucket ? blen : slen) - 1, label);
        double bound, v = line_value(line);
        if (!h || !isfinite(v))
            continue;
        if (!is_bucket)
            h->sum += v;
        else if (bucket_bound(line, &bound))
            hist_bucket_add(h, bound, v);
    }
}

void spw_pipeline_hist_since(struct spw_pipeline_hist *out, const struct spw_pipeline_hist *now,
                             const struct spw_pipeline_hist *before)
{
    struct spw_pipeline_hist d = *now;
    d.sum -= before->sum;
    for (size_t i = 0; i < d.n; i++) {
        /* before's count up to this bound: that of its largest bound not above it */
        double le = -INFINITY, count = 0;
        for (size_t j = 0; j < before->n; j++)
            if (before->le[j] <= d.le[i] && before->le[j] >= le)
                le = before->le[j], count = before->count[j];
        d.count[i] = d.count[i] > count ? d.count[i] - count : 0;
    }
    *out = d;
}

double spw_pipeline_hist_total(const struct spw_pipeline_hist *h)
{
    for (size_t i = 0; i < h->n; i++)
        if (isinf(h->le[i]))
            return h->count[i];
    return 0;
}

double spw_pipeline_hist_mean(const struct spw_pipeline_hist *h)
{
    double total = spw_pipeline_hist_total(h);
    return total > 0 ? h->sum / total : NAN;
}

double spw_pipeline_hist_quantile(const struct spw_pipeline_hist *h, double q)
{
    double total = spw_pipeline_hist_total(h);
    if (total <= 0)
        return NAN;
    double best = INFINITY;
    for (size_t i = 0; i < h->n; i++)
        if (h->count[i] >= q * total && h->le[i] < best)
            best = h->le[i];
    return best;
}

double spw_pipeline_fresh_since(struct spw_pipeline_snapshot *s,
                                const struct spw_pipeline_hist *before)
{
    struct spw_pipeline_hist window;
    spw_pipeline_hist_since(&window, &s->fresh, before);
    s->fresh_p50 = spw_pipeline_hist_quantile(&window, 0.5);
    s->fresh_p99 = spw_pipeline_hist_quantile(&window, 0.99);
    return spw_pipeline_hist_total(&window);
}

/* The epoch of the last "checkpoint completed" line in the coordinator's log, -1 when none. */
static long last_epoch(const char *log_path)
{
    double e = spw_pipeline_log_value(log_path, "checkpoint completed", "epoch");
    return isfinite(e) ? (long)e : -1;
}

double spw_pipeline_log_value(const char *log_path, const char *marker, const char *key)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return NAN;
    char pat[80];
    snprintf(pat, sizeof(pat), " %s=", key);
    double v = NAN;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, marker))
            continue;
        const char *e = strstr(line, pat);
        if (e) {
            char *end;
            double x = strtod(e + strlen(pat), &end);
            if (end != e + strlen(pat))
                v = x;
        }
    }
    fclose(f);
    return v;
}

/* Fills *tr from trainer page (NULL: down) and adds its checkpoint pauses to pause (may be NULL).
 */
static void trainer_from_page(const char *page, struct spw_pipeline_trainer *tr,
                              struct spw_pipeline_hist *pause)
{
    *tr = (struct spw_pipeline_trainer){false, NAN, NAN, NAN, NAN, NAN, NAN,
                                        NAN,   NAN, NAN, NAN, NAN, NAN};
    if (!page)
        return;
    tr->up = true;
    tr->examples = spw_pipeline_metric_sum(page, "sparrow_trainer_examples_total");
    tr->ex_per_s = spw_pipeline_metric_sum(page, "sparrow_trainer_examples_per_second");
    tr->lag = spw_pipeline_metric_sum(page, "sparrow_kafka_consumer_lag");
    tr->step = spw_pipeline_metric_sum(page, "sparrow_trainer_step");
    tr->clock = spw_pipeline_metric_sum(page, "sparrow_trainer_clock");
    tr->coord_wait_s = spw_pipeline_metric_sum(page, "sparrow_trainer_coord_wait_seconds_sum");
    double bpe = spw_pipeline_metric_sum(page, "sparrow_trainer_push_bytes_per_example");
    double ratio = spw_pipeline_metric_sum(page, "sparrow_trainer_compression_ratio");
    if (isfinite(tr->examples) && isfinite(bpe) && isfinite(ratio) && ratio >= 1)
        tr->bytes_saved = tr->examples * bpe * (ratio - 1);
    /* 0 means "no window yet" for these gauges */
    static const char *const names[] = {
        "sparrow_trainer_window_logloss", "sparrow_trainer_window_auc",
        "sparrow_trainer_bayes_window_logloss", "sparrow_trainer_bayes_window_auc",
        "sparrow_trainer_const_window_logloss"};
    double *dst[] = {&tr->logloss, &tr->auc, &tr->bayes_logloss, &tr->bayes_auc,
                     &tr->const_logloss};
    for (size_t i = 0; i < 5; i++) {
        double v = spw_pipeline_metric_sum(page, names[i]);
        *dst[i] = isfinite(v) && v > 0 ? v : NAN;
    }
    if (pause)
        spw_pipeline_hist_add(pause, page, "sparrow_trainer_checkpoint_pause_seconds");
}

void spw_pipeline_scrape_trainer(const spw_pipeline_t *p, long t, struct spw_pipeline_trainer *tr)
{
    char *page = spw_pipeline_metrics_get(p->trainer_http[t]);
    trainer_from_page(page, tr, NULL);
    free(page);
}

/* *acc += v when v is finite (*acc NAN counts as 0). */
static void add(double *acc, double v)
{
    if (isfinite(v))
        *acc = (isfinite(*acc) ? *acc : 0) + v;
}

/* Mean of the finite field values of the trainers; NAN when none. */
static double mean(const struct spw_pipeline_snapshot *s, long n, size_t offset)
{
    double sum = 0;
    int k = 0;
    for (long t = 0; t < n; t++) {
        double v = *(const double *)((const char *)&s->trainer[t] + offset);
        if (isfinite(v))
            sum += v, k++;
    }
    return k ? sum / k : NAN;
}

void spw_pipeline_scrape(const spw_pipeline_t *p, struct spw_pipeline_snapshot *s)
{
    memset(s, 0, sizeof(*s));
    s->examples = s->ex_per_s = s->bytes_saved = s->lag = NAN;
    long n = p->conf->trainers;
    for (long t = 0; t < n; t++) {
        struct spw_pipeline_trainer *tr = &s->trainer[t];
        char *page = spw_pipeline_metrics_get(p->trainer_http[t]);
        trainer_from_page(page, tr, &s->pause);
        free(page);
        add(&s->examples, tr->examples);
        add(&s->ex_per_s, tr->ex_per_s);
        add(&s->bytes_saved, tr->bytes_saved);
        if (tr->lag >= 0)
            add(&s->lag, tr->lag);
    }
    s->logloss = mean(s, n, offsetof(struct spw_pipeline_trainer, logloss));
    s->auc = mean(s, n, offsetof(struct spw_pipeline_trainer, auc));
    s->bayes_logloss = mean(s, n, offsetof(struct spw_pipeline_trainer, bayes_logloss));
    s->bayes_auc = mean(s, n, offsetof(struct spw_pipeline_trainer, bayes_auc));
    s->const_logloss = mean(s, n, offsetof(struct spw_pipeline_trainer, const_logloss));
    char *serve_page = p->serve_http ? spw_pipeline_metrics_get(p->serve_http) : NULL;
    if (serve_page) {
        struct spw_pipeline_hist_by fresh = {0};
        spw_pipeline_hist_add_by(&fresh, serve_page, "sparrow_serve_freshness_seconds", "stage");
        for (size_t i = 0; i < fresh.n; i++)
            if (strcmp(fresh.value[i], "event_to_visible") == 0)
                s->fresh = fresh.h[i];
        free(serve_page);
    }
    spw_pipeline_fresh_since(s, &(struct spw_pipeline_hist){0}); /* since serve started */
    for (long i = 0; i < p->conf->shards; i++) {
        char *page = spw_pipeline_metrics_get(p->shard_http[i]);
        if (!page)
            continue;
        spw_pipeline_hist_add(&s->tau, page, "sparrow_ps_staleness");
        spw_pipeline_hist_add_by(&s->tau_class, page, "sparrow_ps_staleness_class", "class");
        free(page);
    }
    s->tau_p50 = spw_pipeline_hist_quantile(&s->tau, 0.5);
    s->tau_p99 = spw_pipeline_hist_quantile(&s->tau, 0.99);
    char path[SPW_PIPELINE_PATH_MAX];
    snprintf(path, sizeof(path), "%s/coordinator.log", p->conf->run_dir);
    s->epoch = last_epoch(path);
}

/* Formats v with prec decimals, or "-" when not finite. */
static const char *fmt_num(char *buf, size_t size, int prec, double v)
{
    if (isfinite(v))
        snprintf(buf, size, "%.*f", prec, v);
    else
        snprintf(buf, size, "-");
    return buf;
}

void spw_pipeline_format_line(const struct spw_pipeline_snapshot *s, double elapsed, char *line,
                              size_t size)
{
    char a[13][32];
    char ep[32], fresh[64] = "";
    if (s->epoch >= 0)
        snprintf(ep, sizeof(ep), "%ld", s->epoch);
    else
        snprintf(ep, sizeof(ep), "none");
    if (isfinite(s->fresh_p99))
        snprintf(fresh, sizeof(fresh), " fresh p99=%ss", fmt_num(a[12], 32, 2, s->fresh_p99));
    snprintf(line, size,
             "t=%3.0fs examples=%s ex/s=%s logloss=%s (const %s, bayes %s) auc=%s (bayes %s) "
             "tau p50/p99=%s/%s saved=%sMB ckpt=%s lag=%s%s",
             elapsed, fmt_num(a[0], 32, 0, s->examples), fmt_num(a[1], 32, 0, s->ex_per_s),
             fmt_num(a[2], 32, 4, s->logloss), fmt_num(a[10], 32, 4, s->const_logloss),
             fmt_num(a[3], 32, 4, s->bayes_logloss), fmt_num(a[4], 32, 4, s->auc),
             fmt_num(a[5], 32, 4, s->bayes_auc), fmt_num(a[6], 32, 0, s->tau_p50),
             fmt_num(a[7], 32, 0, s->tau_p99), fmt_num(a[8], 32, 1, s->bytes_saved / 1e6), ep,
             fmt_num(a[9], 32, 0, s->lag), fresh);
}
