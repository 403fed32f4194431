/* Unit tests of the metrics registry; `test_metrics --render` prints a sample for promtool. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sparrow/metrics.h"

static char *render(spw_metrics_t *reg)
{
    size_t len = 0;
    char *text = spw_metrics_render(reg, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    return text;
}

static void test_metrics_counter_values(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    assert_non_null(reg);
    spw_counter_t *c = spw_metrics_counter_new(reg, "spw_events_total", "Events.", NULL);
    assert_non_null(c);
    assert_int_equal(spw_counter_get(c), 0);
    spw_counter_inc(c);
    spw_counter_add(c, 41);
    assert_int_equal(spw_counter_get(c), 42);
    spw_counter_add(c, UINT64_C(1) << 40);
    assert_int_equal(spw_counter_get(c), (UINT64_C(1) << 40) + 42);
    spw_metrics_destroy(reg);
}

static void test_metrics_gauge_values(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    spw_gauge_t *g = spw_metrics_gauge_new(reg, "spw_queue_depth", "Depth.", NULL);
    assert_non_null(g);
    assert_true(spw_gauge_get(g) == 0.0);
    spw_gauge_set(g, 2.5);
    assert_true(spw_gauge_get(g) == 2.5);
    spw_gauge_add(g, -4.0);
    assert_true(spw_gauge_get(g) == -1.5);
    spw_gauge_set(g, NAN);
    assert_true(isnan(spw_gauge_get(g)));
    spw_metrics_destroy(reg);
}

static void test_metrics_histogram_values(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    const double bounds[] = {0.25, 1.0};
    spw_histogram_t *h =
        spw_metrics_histogram_new(reg, "spw_lat_seconds", "Latency.", NULL, bounds, 2);
    assert_non_null(h);
    assert_int_equal(spw_histogram_count(h), 0);
    spw_histogram_observe(h, 0.25); /* on a bound: le is inclusive */
    spw_histogram_observe(h, 0.5);
    spw_histogram_observe(h, 2.0);
    spw_histogram_observe(h, -1.0);
    assert_int_equal(spw_histogram_count(h), 4);
    assert_true(spw_histogram_sum(h) == 1.75);

    char *text = render(reg);
    assert_non_null(strstr(text, "spw_lat_seconds_bucket{le=\"0.25\"} 2\n"
                                 "spw_lat_seconds_bucket{le=\"1\"} 3\n"
                                 "spw_lat_seconds_bucket{le=\"+Inf\"} 4\n"
                                 "spw_lat_seconds_sum 1.75\n"
                                 "spw_lat_seconds_count 4\n"));
    free(text);
    spw_metrics_destroy(reg);
}

/* A batch added by buckets renders as the same values observed one by one would. */
static void test_metrics_histogram_batch_equals_observe(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    const double bounds[] = {0, 1, 2, 4};
    spw_histogram_t *one = spw_metrics_histogram_new(reg, "spw_a", "A.", NULL, bounds, 4);
    spw_histogram_t *batch = spw_metrics_histogram_new(reg, "spw_b", "B.", NULL, bounds, 4);
    assert_non_null(one);
    assert_non_null(batch);
    const double v[] = {0, 0, 1, 3, 4, 5, 9, 2};
    uint64_t counts[5] = {0};
    double sum = 0;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        spw_histogram_observe(one, v[i]);
        counts[spw_histogram_bucket(batch, v[i])]++;
        sum += v[i];
    }
    assert_int_equal(spw_histogram_bucket(batch, 0), 0);
    assert_int_equal(spw_histogram_bucket(batch, 3), 3);
    assert_int_equal(spw_histogram_bucket(batch, 5), 4); /* +Inf */
    spw_histogram_add(batch, counts, sum);
    assert_int_equal(spw_histogram_count(batch), spw_histogram_count(one));
    assert_true(spw_histogram_sum(batch) == spw_histogram_sum(one));
    char *text = render(reg);
    assert_non_null(strstr(text, "spw_a_bucket{le=\"0\"} 2\n"
                                 "spw_a_bucket{le=\"1\"} 3\n"
                                 "spw_a_bucket{le=\"2\"} 4\n"
                                 "spw_a_bucket{le=\"4\"} 6\n"
                                 "spw_a_bucket{le=\"+Inf\"} 8\n"));
    assert_non_null(strstr(text, "spw_b_bucket{le=\"0\"} 2\n"
                                 "spw_b_bucket{le=\"1\"} 3\n"
                                 "spw_b_bucket{le=\"2\"} 4\n"
                                 "spw_b_bucket{le=\"4\"} 6\n"
                                 "spw_b_bucket{le=\"+Inf\"} 8\n"));
    free(text);
    spw_metrics_destroy(reg);
}

static void test_metrics_render_exact(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    spw_counter_t *ok =
        spw_metrics_counter_new(reg, "spw_requests_total", "Requests served.", "code=\"200\"");
    spw_counter_t *bad =
        spw_metrics_counter_new(reg, "spw_requests_total", "ignored: first wins", "code=\"500\"");
    spw_gauge_t *g = spw_metrics_gauge_new(reg, "spw_temperature", "Temperature.", NULL);
    const double bounds[] = {0.25, 1.0};
    spw_histogram_t *h =
        spw_metrics_histogram_new(reg, "spw_op_seconds", "Op latency.", "op=\"get\"", bounds, 2);
    spw_histogram_t *h0 =
        spw_metrics_histogram_new(reg, "spw_empty_seconds", "No bounds.", "", NULL, 0);
    assert_non_null(ok);
    assert_non_null(bad);
    assert_non_null(g);
    assert_non_null(h);
    assert_non_null(h0);
    spw_counter_add(ok, 3);
    spw_counter_inc(bad);
    spw_gauge_set(g, 1.5);
    spw_histogram_observe(h, 0.25);
    spw_histogram_observe(h, 0.5);
    spw_histogram_observe(h, 2.0);
    spw_histogram_observe(h0, 7.0);

    const char *expected = "# HELP spw_requests_total Requests served.\n"
                           "# TYPE spw_requests_total counter\n"
                           "spw_requests_total{code=\"200\"} 3\n"
                           "spw_requests_total{code=\"500\"} 1\n"
                           "# HELP spw_temperature Temperature.\n"
                           "# TYPE spw_temperature gauge\n"
                           "spw_temperature 1.5\n"
                           "# HELP spw_op_seconds Op latency.\n"
                           "# TYPE spw_op_seconds histogram\n"
                           "spw_op_seconds_bucket{op=\"get\",le=\"0.25\"} 1\n"
                           "spw_op_seconds_bucket{op=\"get\",le=\"1\"} 2\n"
                           "spw_op_seconds_bucket{op=\"get\",le=\"+Inf\"} 3\n"
                           "spw_op_seconds_sum{op=\"get\"} 2.75\n"
                           "spw_op_seconds_count{op=\"get\"} 3\n"
                           "# HELP spw_empty_seconds No bounds.\n"
                           "# TYPE spw_empty_seconds histogram\n"
                           "spw_empty_seconds_bucket{le=\"+Inf\"} 1\n"
                           "spw_empty_seconds_sum 7\n"
                           "spw_empty_seconds_count 1\n";
    char *text = render(reg);
    assert_string_equal(text, expected);
    free(text);
    spw_metrics_destroy(reg);
}

static void test_metrics_float_spelling(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {INFINITY, "+Inf"}, {-INFINITY, "-Inf"},
        {NAN, "NaN"},       {0.1, "0.1"},
        {1e-9, "1e-09"},    {123456789012.0, "123456789012"},
        {-0.5, "-0.5"},     {1.0 / 3.0, "0.3333333333333333"},
    };
    char labels[32], line[128];
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++) {
        snprintf(labels, sizeof(labels), "i=\"%zu\"", i);
        spw_gauge_t *g = spw_metrics_gauge_new(reg, "spw_value", "Values.", labels);
        assert_non_null(g);
        spw_gauge_set(g, cases[i].v);
    }
    char *text = render(reg);
    for (size_t i = 0; i < n; i++) {
        snprintf(line, sizeof(line), "spw_value{i=\"%zu\"} %s\n", i, cases[i].text);
        if (!strstr(text, line))
            fail_msg("missing line %s in:\n%s", line, text);
    }
    free(text);
    spw_metrics_destroy(reg);
}

static void test_metrics_escaping(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    /* help: backslash and newline escaped, quote kept; label value: raw newline escaped, the
     * escapes \" and \\ of the input kept as they are */
    spw_counter_t *c = spw_metrics_counter_new(reg, "spw_esc_total", "a\\b \"q\"\nnext",
                                               "path=\"/a\\\"b\\\\c\nd\"");
    assert_non_null(c);
    char *text = render(reg);
    assert_string_equal(text, "# HELP spw_esc_total a\\\\b \"q\"\\nnext\n"
                              "# TYPE spw_esc_total counter\n"
                              "spw_esc_total{path=\"/a\\\"b\\\\c\\nd\"} 0\n");
    free(text);
    /* the escaped spelling of the same value is the same series */
    assert_ptr_equal(spw_metrics_counter_new(reg, "spw_esc_total", "", "path=\"/a\\\"b\\\\c\\nd\""),
                     c);
    spw_metrics_destroy(reg);
}

static void test_metrics_same_handle_and_label_order(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    spw_counter_t *a = spw_metrics_counter_new(reg, "spw_x_total", "X.", "b=\"2\",a=\"1\"");
    spw_counter_t *b = spw_metrics_counter_new(reg, "spw_x_total", "X.", " a = \"1\" , b=\"2\",");
    spw_counter_t *other = spw_metrics_counter_new(reg, "spw_x_total", "X.", "a=\"1\",b=\"3\"");
    spw_counter_t *none1 = spw_metrics_counter_new(reg, "spw_x_total", "X.", NULL);
    spw_counter_t *none2 = spw_metrics_counter_new(reg, "spw_x_total", "X.", "");
    assert_non_null(a);
    assert_ptr_equal(a, b);
    assert_non_null(other);
    assert_ptr_not_equal(a, other);
    assert_non_null(none1);
    assert_ptr_equal(none1, none2);
    spw_counter_inc(a);
    char *text = render(reg);
    assert_non_null(strstr(text, "spw_x_total{a=\"1\",b=\"2\"} 1\n"));
    assert_non_null(strstr(text, "spw_x_total{a=\"1\",b=\"3\"} 0\n"));
    assert_non_null(strstr(text, "spw_x_total 0\n"));
    /* one family: one HELP line */
    assert_null(strstr(strstr(text, "# HELP") + 1, "# HELP"));
    free(text);

    const double b1[] = {1, 2}, b2[] = {1, 3};
    spw_histogram_t *h = spw_metrics_histogram_new(reg, "spw_h", "H.", NULL, b1, 2);
    assert_non_null(h);
    assert_ptr_equal(spw_metrics_histogram_new(reg, "spw_h", "H.", NULL, b1, 2), h);
    assert_null(spw_metrics_histogram_new(reg, "spw_h", "H.", NULL, b2, 2));
    assert_null(spw_metrics_histogram_new(reg, "spw_h", "H.", "k=\"v\"", b2, 2));
    assert_non_null(spw_metrics_histogram_new(reg, "spw_h", "H.", "k=\"v\"", b1, 2));
    spw_metrics_destroy(reg);
}

static void test_metrics_invalid_names(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    static const char *const bad_names[] = {"", "1abc", "a-b", "a b", "a.b", "é"};
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        assert_null(spw_metrics_counter_new(reg, bad_names[i], "h", NULL));
        assert_null(spw_metrics_gauge_new(reg, bad_names[i], "h", NULL));
    }
    assert_non_null(spw_metrics_gauge_new(reg, "ns:sub_name9", "colons are allowed", NULL));
    static const char *const bad_labels[] = {
        "1a=\"x\"",         /* name starts with a digit */
        "__x=\"y\"",        /* reserved */
        "a=\"unterminated", /* no closing quote */
        "a=x",              /* not quoted */
        "a=\"1\",a=\"2\"",  /* duplicate */
        "a=\"\\t\"",        /* unknown escape */
        "a=\"1\" b=\"2\"",  /* no comma */
        "a:b=\"1\"",        /* colon not allowed in label names */
        "a=\"\xff\xfe\"",   /* not UTF-8 */
        "=\"1\"",           /* empty name */
    };
    for (size_t i = 0; i < sizeof(bad_labels) / sizeof(bad_labels[0]); i++) {
        if (spw_metrics_counter_new(reg, "spw_ok_total", "h", bad_labels[i]))
            fail_msg("labels accepted: %s", bad_labels[i]);
    }
    assert_null(spw_metrics_counter_new(reg, "spw_ok_total", "bad \xc3 utf8", NULL));

    const double ok[] = {1, 2};
    const double unsorted[] = {2, 1}, dup[] = {1, 1}, nan_b[] = {1, NAN}, inf_b[] = {1, INFINITY};
    double many[SPW_HISTOGRAM_MAX_BUCKETS + 1];
    for (size_t i = 0; i < SPW_HISTOGRAM_MAX_BUCKETS + 1; i++)
        many[i] = (double)i;
    assert_null(spw_metrics_histogram_new(reg, "spw_h1", "h", "le=\"1\"", ok, 2));
    assert_null(spw_metrics_histogram_new(reg, "spw_h2", "h", NULL, unsorted, 2));
    assert_null(spw_metrics_histogram_new(reg, "spw_h3", "h", NULL, dup, 2));
    assert_null(spw_metrics_histogram_new(reg, "spw_h4", "h", NULL, nan_b, 2));
    assert_null(spw_metrics_histogram_new(reg, "spw_h5", "h", NULL, inf_b, 2));
    assert_null(
        spw_metrics_histogram_new(reg, "spw_h6", "h", NULL, many, SPW_HISTOGRAM_MAX_BUCKETS + 1));
    assert_non_null(
        spw_metrics_histogram_new(reg, "spw_h7", "h", NULL, many, SPW_HISTOGRAM_MAX_BUCKETS));

    /* nothing rejected left a trace */
    char *text = render(reg);
    assert_null(strstr(text, "spw_ok_total"));
    assert_null(strstr(text, "spw_h1"));
    free(text);
    spw_metrics_destroy(reg);
}

static void test_metrics_type_conflict(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    const double b[] = {1};
    assert_non_null(spw_metrics_counter_new(reg, "spw_c", "c", NULL));
    assert_null(spw_metrics_gauge_new(reg, "spw_c", "c", NULL));
    assert_null(spw_metrics_gauge_new(reg, "spw_c", "c", "k=\"v\""));
    assert_null(spw_metrics_histogram_new(reg, "spw_c", "c", NULL, b, 1));
    /* a histogram prints x_bucket, x_sum, x_count: those names clash both ways */
    assert_non_null(spw_metrics_histogram_new(reg, "spw_h", "h", NULL, b, 1));
    assert_null(spw_metrics_gauge_new(reg, "spw_h_count", "g", NULL));
    assert_null(spw_metrics_counter_new(reg, "spw_h_bucket", "g", NULL));
    assert_non_null(spw_metrics_gauge_new(reg, "spw_g_sum", "g", NULL));
    assert_null(spw_metrics_histogram_new(reg, "spw_g", "h", NULL, b, 1));
    assert_non_null(spw_metrics_gauge_new(reg, "spw_h_other", "g", NULL));
    spw_metrics_destroy(reg);
}

#define THREADS 4
#define ROUNDS  100000

struct worker {
    spw_counter_t *c;
    spw_gauge_t *g;
    spw_histogram_t *h;
    spw_metrics_t *reg;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        spw_counter_inc(w->c);
        spw_counter_add(w->c, 2);
        spw_gauge_add(w->g, 1.0);
        spw_histogram_observe(w->h, (double)(i % 4)); /* 0,1,2,3: buckets le=1 gets 0 and 1 */
        if (i % 20000 == 0) {
            /* registering and rendering while others update (no cmocka asserts off the main
             * thread: they longjmp) */
            if (spw_metrics_counter_new(w->reg, "spw_conc_total", "C.", NULL) != w->c)
                return w;
            char *text = spw_metrics_render(w->reg, NULL);
            if (!text)
                return w;
            free(text);
        }
    }
    return NULL;
}

static void test_metrics_concurrent_updates(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    const double b[] = {1, 2};
    struct worker w = {
        .c = spw_metrics_counter_new(reg, "spw_conc_total", "C.", NULL),
        .g = spw_metrics_gauge_new(reg, "spw_conc_gauge", "G.", NULL),
        .h = spw_metrics_histogram_new(reg, "spw_conc_hist", "H.", NULL, b, 2),
        .reg = reg,
    };
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w), 0);
    for (int i = 0; i < THREADS; i++) {
        void *failed = NULL;
        pthread_join(tid[i], &failed);
        assert_null(failed);
    }
    assert_int_equal(spw_counter_get(w.c), 3ull * THREADS * ROUNDS);
    assert_true(spw_gauge_get(w.g) == (double)THREADS * ROUNDS);
    assert_int_equal(spw_histogram_count(w.h), (uint64_t)THREADS * ROUNDS);
    /* each thread observes 0+1+2+3 per 4 rounds: sum 1.5 * ROUNDS, exact in a double */
    assert_true(spw_histogram_sum(w.h) == 1.5 * THREADS * ROUNDS);
    char *text = render(reg);
    char line[128];
    snprintf(line, sizeof(line), "spw_conc_hist_bucket{le=\"1\"} %d\n", THREADS * ROUNDS / 2);
    assert_non_null(strstr(text, line));
    snprintf(line, sizeof(line), "spw_conc_hist_bucket{le=\"2\"} %d\n", THREADS * ROUNDS * 3 / 4);
    assert_non_null(strstr(text, line));
    free(text);
    spw_metrics_destroy(reg);
}

static void test_metrics_destroy_null(void **state)
{
    (void)state;
    spw_metrics_destroy(NULL);
}

/* The value of the sample line that starts with prefix (name, labels and a space); -1 when none. */
static double sample(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0)
            return strtod(p + n, NULL);
    return -1;
}

static void test_metrics_process_collector(void **state)
{
    (void)state;
    spw_metrics_t *reg = spw_metrics_new();
    assert_non_null(spw_metrics_counter_new(reg, "spw_x_total", "X.", NULL));
    char *text = render(reg);
    assert_null(strstr(text, "process_")); /* only when asked for */
    assert_null(strstr(text, "sparrow_build_info"));
    free(text);

    spw_metrics_add_process(reg);
    spw_metrics_add_process(reg); /* idempotent */
    text = render(reg);
    const char *families[] = {"process_cpu_seconds_total counter",
                              "process_open_fds gauge",
                              "process_max_fds gauge",
                              "process_virtual_memory_bytes gauge",
                              "process_resident_memory_bytes gauge",
                              "process_start_time_seconds gauge",
                              "sparrow_build_info gauge"};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char line[96];
        snprintf(line, sizeof(line), "# TYPE %s\n", families[i]);
        const char *at = strstr(text, line);
        if (!at || strstr(at + 1, line))
            fail_msg("want one '%s' in:\n%s", line, text);
    }
    /* the registry's own families come first */
    assert_true(strstr(text, "spw_x_total") < strstr(text, "process_cpu_seconds_total"));

    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(sample(text, "process_max_fds ") == (double)rl.rlim_cur);
    assert_true(sample(text, "process_cpu_seconds_total ") >= 0);
    assert_true(sample(text, "process_resident_memory_bytes ") > 1e5);
    assert_true(sample(text, "process_virtual_memory_bytes ") >=
                sample(text, "process_resident_memory_bytes "));
    double start = sample(text, "process_start_time_seconds ");
    double now = (double)time(NULL);
    assert_true(start > now - 3600 && start <= now + 1); /* this test started within the hour */
    char build[160];
    snprintf(build, sizeof(build), "sparrow_build_info{version=\"%s\",commit=\"", SPARROW_VERSION);
    const char *b = strstr(text, build);
    assert_non_null(b);
    assert_non_null(strstr(b, "\",build_type=\""));
    assert_non_null(strstr(b, "\",compiler=\""));
    assert_true(strstr(b, "} 1\n") == strchr(b, '}'));

    /* open descriptors are counted exactly: one more file open, one more */
    double fds = sample(text, "process_open_fds ");
    free(text);
    FILE *f = fopen("/proc/self/stat", "r");
    assert_non_null(f);
    text = render(reg);
    assert_true(sample(text, "process_open_fds ") == fds + 1);
    free(text);
    fclose(f);
    text = render(reg);
    assert_true(sample(text, "process_open_fds ") == fds);
    free(text);
    spw_metrics_destroy(reg);
}

/* A registry with every kind, labels, escapes and special values, for `promtool check metrics`. */
static int render_sample(void)
{
    spw_metrics_t *reg = spw_metrics_new();
    if (!reg)
        return 1;
    const double bounds[] = {0.001, 0.01, 0.1, 1, 10};
    spw_counter_t *c1 = spw_metrics_counter_new(reg, "spw_requests_total",
                                                "Requests \"served\", by path\\code.\nSecond line.",
                                                "path=\"/v1/\\\"x\\\"\",code=\"200\"");
    spw_counter_t *c2 =
        spw_metrics_counter_new(reg, "spw_requests_total", "", "path=\"/a\\\\b\nc\",code=\"500\"");
    spw_gauge_t *g1 = spw_metrics_gauge_new(reg, "spw_ratio", "A ratio.", "kind=\"pos\"");
    spw_gauge_t *g2 = spw_metrics_gauge_new(reg, "spw_ratio", "", "kind=\"neg\"");
    spw_gauge_t *g3 = spw_metrics_gauge_new(reg, "spw_ratio", "", "kind=\"nan\"");
    spw_gauge_t *g4 = spw_metrics_gauge_new(reg, "spw_ratio", "", "kind=\"small\"");
    spw_gauge_t *g5 = spw_metrics_gauge_new(reg, "spw_up", "Plain gauge.", NULL);
    spw_histogram_t *h1 = spw_metrics_histogram_new(
        reg, "spw_request_duration_seconds", "Request duration.", "path=\"/metrics\"", bounds, 5);
    spw_histogram_t *h2 = spw_metrics_histogram_new(reg, "spw_request_duration_seconds", "",
                                                    "path=\"/healthz\"", bounds, 5);
    spw_histogram_t *h3 =
        spw_metrics_histogram_new(reg, "spw_batch_size", "Batch size.", NULL, NULL, 0);
    if (!c1 || !c2 || !g1 || !g2 || !g3 || !g4 || !g5 || !h1 || !h2 || !h3) {
        spw_metrics_destroy(reg);
        return 1;
    }
    spw_counter_add(c1, 12345);
    spw_counter_inc(c2);
    spw_gauge_set(g1, INFINITY);
    spw_gauge_set(g2, -INFINITY);
    spw_gauge_set(g3, NAN);
    spw_gauge_set(g4, 1.25e-300);
    spw_gauge_set(g5, 1);
    for (int i = 0; i < 100; i++)
        spw_histogram_observe(h1, 0.0005 * i);
    spw_histogram_observe(h2, 20);
    spw_histogram_observe(h3, 512);
    spw_metrics_add_process(reg); /* the process collector's families pass promtool too */
    size_t len = 0;
    char *text = spw_metrics_render(reg, &len);
    spw_metrics_destroy(reg);
    if (!text)
        return 1;
    int rc = fwrite(text, 1, len, stdout) == len ? 0 : 1;
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--render") == 0)
        return render_sample();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_counter_values),
        cmocka_unit_test(test_metrics_gauge_values),
        cmocka_unit_test(test_metrics_histogram_values),
        cmocka_unit_test(test_metrics_histogram_batch_equals_observe),
        cmocka_unit_test(test_metrics_render_exact),
        cmocka_unit_test(test_metrics_float_spelling),
        cmocka_unit_test(test_metrics_escaping),
        cmocka_unit_test(test_metrics_same_handle_and_label_order),
        cmocka_unit_test(test_metrics_invalid_names),
        cmocka_unit_test(test_metrics_type_conflict),
        cmocka_unit_test(test_metrics_concurrent_updates),
        cmocka_unit_test(test_metrics_destroy_null),
        cmocka_unit_test(test_metrics_process_collector),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
