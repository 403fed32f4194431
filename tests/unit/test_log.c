/* Unit tests of logging: level and format names, the rate limiter, the shape of a written line in
 * the text and the JSON format. */
#include "test_main.h" /* cmocka and what it needs first */

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sparrow/err.h"
#include "sparrow/log.h"

#define HOUR_MS UINT64_C(3600000)

static void test_log_level_parse(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        enum spw_log_level level;
    } good[] = {{"error", SPW_LOG_ERROR},
                {"warn", SPW_LOG_WARN},
                {"info", SPW_LOG_INFO},
                {"debug", SPW_LOG_DEBUG}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        enum spw_log_level level = (enum spw_log_level) - 1;
        assert_int_equal(spw_log_level_parse(good[i].text, &level), SPW_OK);
        assert_int_equal(level, good[i].level);
    }
    const char *bad[] = {"", "warning", "verbose", "info ", "trace", "inf"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        enum spw_log_level level = SPW_LOG_DEBUG;
        assert_int_equal(spw_log_level_parse(bad[i], &level), SPW_ERR_INVALID);
        assert_int_equal(level, SPW_LOG_DEBUG); /* untouched */
    }
}

static void test_log_ratelimit(void **state)
{
    (void)state;
    enum { CALLS = 10000 };
    struct spw_log_ratelimit rl = {0, 0};
    uint64_t suppressed = 99;
    int passed = 0;
    /* An hour-long interval: a tight loop cannot reach its end, so only the first call passes. */
    for (int i = 0; i < CALLS; i++)
        passed += spw_log_ratelimit_pass(&rl, HOUR_MS, &suppressed) ? 1 : 0;
    assert_int_equal(passed, 1);
    assert_int_equal(suppressed, 0); /* nothing was dropped before the first line */
    assert_int_equal(rl.suppressed, CALLS - 1);

    /* When the interval has run out, the next line passes and reports every dropped one. */
    rl.next_ns = 0;
    assert_true(spw_log_ratelimit_pass(&rl, HOUR_MS, &suppressed));
    assert_int_equal(suppressed, CALLS - 1);
    assert_int_equal(rl.suppressed, 0);
    assert_false(spw_log_ratelimit_pass(&rl, HOUR_MS, &suppressed));

    /* A zero interval lets every call through. */
    struct spw_log_ratelimit open = {0, 0};
    for (int i = 0; i < 100; i++)
        assert_true(spw_log_ratelimit_pass(&open, 0, &suppressed));
    assert_int_equal(suppressed, 0);
}

/* Runs fn with stderr redirected to a temporary file; returns what it wrote (caller frees). */
static char *capture_stderr(void (*fn)(void))
{
    char path[] = "/tmp/spw_test_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    fn();
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    assert_true(len >= 0);
    char *text = malloc((size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(pread(fd, text, (size_t)len, 0), len);
    text[len] = '\0';
    close(fd);
    return text;
}

static void write_one_line(void)
{
    spw_log_init("tester", SPW_LOG_INFO);
    SPW_WARN("disk almost full", "free_mb=%d path=%s", 12, "/data");
}

static void test_log_line_format(void **state)
{
    (void)state;
    time_t before = time(NULL);
    char *text = capture_stderr(write_one_line);
    time_t after = time(NULL);
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
                             "\\.[0-9]{3}Z WARN tester disk almost full free_mb=12 path=/data\n$",
                             REG_EXTENDED),
                     0);
    regmatch_t m[7];
    if (regexec(&re, text, 7, m, 0) != 0)
        fail_msg("unexpected line: '%s'", text);
    regfree(&re);
    /* The timestamp is UTC and current. */
    struct tm tm = {0};
    int f[6];
    for (int i = 0; i < 6; i++)
        f[i] = (int)strtol(text + m[i + 1].rm_so, NULL, 10);
    tm.tm_year = f[0] - 1900;
    tm.tm_mon = f[1] - 1;
    tm.tm_mday = f[2];
    tm.tm_hour = f[3];
    tm.tm_min = f[4];
    tm.tm_sec = f[5];
    time_t ts = timegm(&tm);
    assert_true(ts >= before - 1 && ts <= after + 1);
    free(text);
}

static int evaluated;

static int count_evaluation(void)
{
    return ++evaluated;
}

static void write_filtered(void)
{
    spw_log_init("tester", SPW_LOG_WARN);
    SPW_INFO("not shown", "n=%d", count_evaluation());
    SPW_DEBUG("not shown", "n=%d", count_evaluation());
    SPW_ERROR("shown", "n=%d", count_evaluation());
    spw_log_write(SPW_LOG_INFO, "no fields", NULL);
    spw_log_init("tester", SPW_LOG_INFO);
}

static void test_log_threshold_skips_arguments(void **state)
{
    (void)state;
    evaluated = 0;
    char *text = capture_stderr(write_filtered);
    assert_int_equal(evaluated, 1); /* the filtered calls never evaluated their arguments */
    const char *second = strchr(text, '\n');
    assert_non_null(second);
    assert_non_null(strstr(text, " ERROR tester shown n=1\n"));
    assert_non_null(strstr(second, " INFO tester no fields\n")); /* no trailing space */
    assert_int_equal(strchr(second + 1, '\n')[1], '\0');         /* exactly two lines */
    free(text);
}

static void write_ratelimited(void)
{
    for (int i = 0; i < 1000; i++)
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, HOUR_MS, "dropping", "i=%d", i);
}

static void test_log_ratelimited_macro(void **state)
{
    (void)state;
    spw_log_init("tester", SPW_LOG_INFO);
    char *text = capture_stderr(write_ratelimited);
    assert_non_null(strstr(text, " WARN tester dropping i=0 suppressed=0\n"));
    assert_int_equal(strchr(text, '\n')[1], '\0'); /* one line in all */
    free(text);
}

static void write_long(void)
{
    static char msg[5000];
    memset(msg, 'm', sizeof(msg) - 1);
    spw_log_write(SPW_LOG_INFO, msg, "k=%s", "v");
}

static void test_log_long_line_truncated(void **state)
{
    (void)state;
    char *text = capture_stderr(write_long);
    size_t len = strlen(text);
    assert_true(len > 1000 && len <= 2048);
    assert_int_equal(text[len - 1], '\n');
    assert_null(memchr(text, '\n', len - 1)); /* one line */
    free(text);
}

static void test_log_format_parse(void **state)
{
    (void)state;
    enum spw_log_format f = SPW_LOG_JSON;
    assert_int_equal(spw_log_format_parse("text", &f), SPW_OK);
    assert_int_equal(f, SPW_LOG_TEXT);
    assert_int_equal(spw_log_format_parse("json", &f), SPW_OK);
    assert_int_equal(f, SPW_LOG_JSON);
    const char *bad[] = {"", "JSON", "jsonl", "text ", "logfmt"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = SPW_LOG_JSON;
        assert_int_equal(spw_log_format_parse(bad[i], &f), SPW_ERR_INVALID);
        assert_int_equal(f, SPW_LOG_JSON);
    }
}

/* Parses text as exactly one JSON object line: one '\n', at the end. */
static struct json_object *parse_json_line(const char *text)
{
    size_t len = strlen(text);
    assert_true(len > 0 && text[len - 1] == '\n');
    assert_null(memchr(text, '\n', len - 1));
    struct json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    struct json_object *obj = json_tokener_parse_ex(tok, text, (int)len - 1);
    if (!obj || json_tokener_get_parse_end(tok) != len - 1)
        fail_msg("not one JSON object: '%s'", text);
    json_tokener_free(tok);
    assert_true(json_object_is_type(obj, json_type_object));
    return obj;
}

static struct json_object *member(struct json_object *obj, const char *name)
{
    struct json_object *v = NULL;
    if (!json_object_object_get_ex(obj, name, &v))
        fail_msg("no member \"%s\" in %s", name, json_object_to_json_string(obj));
    return v;
}

static void assert_member_str(struct json_object *obj, const char *name, const char *want)
{
    struct json_object *v = member(obj, name);
    assert_true(json_object_is_type(v, json_type_string));
    assert_string_equal(json_object_get_string(v), want);
}

static void assert_member_int(struct json_object *obj, const char *name, int64_t want)
{
    struct json_object *v = member(obj, name);
    assert_true(json_object_is_type(v, json_type_int));
    assert_int_equal(json_object_get_int64(v), want);
}

static void write_json_lines(void)
{
    spw_log_init("tester", SPW_LOG_INFO);
    spw_log_set_format(SPW_LOG_JSON);
    SPW_WARN("disk almost full",
             "free_mb=%d path=%s err=\"%s\" key=%llu small=%llu ratio=%.2f neg=%d lead=%s ts=%d "
             "msg=%s stray words level=x",
             12, "/data", "no space left", 18446744073709551615ull, 9007199254740992ull, 0.5, -3,
             "007", 3, "again");
    spw_log_write(SPW_LOG_ERROR, "ctl \x01 tab\t quote\" back\\ bad \xff ok \xc3\xa9", NULL);
    SPW_DEBUG("not shown", "n=%d", 1);
    spw_log_set_format(SPW_LOG_TEXT);
}

static void test_log_json_line(void **state)
{
    (void)state;
    char *text = capture_stderr(write_json_lines);
    const char *second = strchr(text, '\n');
    assert_non_null(second);
    second++;
    assert_int_equal(strchr(second, '\n')[1], '\0'); /* two lines: DEBUG is below the threshold */
    char *first = strndup(text, (size_t)(second - text));
    assert_non_null(first);
    struct json_object *a = parse_json_line(first);
    free(first);

    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$",
                             REG_EXTENDED),
                     0);
    assert_int_equal(regexec(&re, json_object_get_string(member(a, "ts")), 0, NULL, 0), 0);
    regfree(&re);
    assert_member_str(a, "level", "warn");
    assert_member_str(a, "role", "tester");
    assert_member_str(a, "msg", "disk almost full");
    assert_member_int(a, "free_mb", 12);
    assert_member_str(a, "path", "/data");
    assert_member_str(a, "err", "no space left");             /* quoted: a string */
    assert_member_str(a, "key", "18446744073709551615");      /* beyond 2^53: a string */
    assert_member_int(a, "small", INT64_C(9007199254740992)); /* 2^53: a number */
    assert_true(json_object_get_double(member(a, "ratio")) == 0.5);
    assert_member_int(a, "neg", -3);
    assert_member_str(a, "lead", "007"); /* not a JSON number */
    assert_member_int(a, "_ts", 3);      /* the line's names kept */
    assert_member_str(a, "_msg", "again");
    assert_member_str(a, "_level", "x");
    assert_member_str(a, "text", "stray words");
    assert_false(json_object_object_get_ex(a, "truncated", NULL));
    /* members in the order of the text form */
    const char *order[] = {"ts",    "level", "role", "msg",  "free_mb", "path", "err",    "key",
                           "small", "ratio", "neg",  "lead", "_ts",     "_msg", "_level", "text"};
    size_t i = 0;
    json_object_object_foreach(a, name, val)
    {
        (void)val;
        assert_true(i < sizeof(order) / sizeof(order[0]));
        assert_string_equal(name, order[i++]);
    }
    assert_int_equal(i, sizeof(order) / sizeof(order[0]));
    json_object_put(a);

    struct json_object *b = parse_json_line(second);
    assert_member_str(b, "level", "error");
    /* control bytes escaped, a byte that is not UTF-8 becomes U+FFFD, valid UTF-8 kept */
    assert_member_str(b, "msg", "ctl \x01 tab\t quote\" back\\ bad \xef\xbf\xbd ok \xc3\xa9");
    assert_non_null(strstr(second, "\\u0001"));
    assert_int_equal(json_object_object_length(b), 4); /* ts, level, role, msg */
    json_object_put(b);
    free(text);
}

/* key0="<ten control bytes>" key1=... : 3000 bytes of text, twice that as JSON (each byte is a
 * six-byte escape there). */
static char escaped_kv[3000];
/* a=0 a=1 ...: more text than the JSON line's bound. */
static char long_kv[6000];

static void write_json_long(void)
{
    static char msg[5000];
    memset(msg, 'm', sizeof(msg) - 1);
    size_t n = 0;
    for (int i = 0; n + 40 < sizeof(escaped_kv); i++)
        n += (size_t)snprintf(escaped_kv + n, sizeof(escaped_kv) - n, "key%d=\"%s\" ", i,
                              "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c");
    n = 0;
    for (int i = 0; n + 20 < sizeof(long_kv); i++)
        n += (size_t)snprintf(long_kv + n, sizeof(long_kv) - n, "a%d=%d ", i, i);
    spw_log_set_format(SPW_LOG_JSON);
    spw_log_write(SPW_LOG_INFO, msg, "k=%s", "v");
    spw_log_write(SPW_LOG_INFO, "short", "%s", escaped_kv);
    spw_log_write(SPW_LOG_INFO, "long", "%s", long_kv);
    spw_log_set_format(SPW_LOG_TEXT);
}

static void test_log_json_long_line_truncated(void **state)
{
    (void)state;
    char *text = capture_stderr(write_json_long);
    const char *second = strchr(text, '\n') + 1;
    char *first = strndup(text, (size_t)(second - text));
    assert_non_null(first);
    assert_true(strlen(first) <= SPW_LOG_JSON_MAX && strlen(first) > 1000);
    struct json_object *a = parse_json_line(first);
    free(first);
    assert_true(json_object_get_boolean(member(a, "truncated")));
    const char *msg = json_object_get_string(member(a, "msg"));
    assert_true(strlen(msg) > 1000 && strspn(msg, "m") == strlen(msg));
    json_object_put(a);

    /* a line of many members is cut before the first that does not fit whole */
    const char *third = strchr(second, '\n') + 1;
    char *line = strndup(second, (size_t)(third - second));
    assert_non_null(line);
    assert_true(strlen(line) <= SPW_LOG_JSON_MAX);
    struct json_object *b = parse_json_line(line);
    free(line);
    assert_true(json_object_get_boolean(member(b, "truncated")));
    assert_member_str(b, "msg", "short");
    int i = 0;
    json_object_object_foreach(b, name, val)
    {
        if (strncmp(name, "key", 3) != 0)
            continue;
        char want[16];
        snprintf(want, sizeof(want), "key%d", i++);
        assert_string_equal(name, want);
        assert_string_equal(json_object_get_string(val),
                            "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c");
    }
    assert_true(i > 20 && i < 100); /* some, not all (about 100) */

    /* key=value text beyond the bound: cut at a pair, and said so */
    assert_true(strlen(third) <= SPW_LOG_JSON_MAX);
    struct json_object *c = parse_json_line(third);
    assert_true(json_object_get_boolean(member(c, "truncated")));
    i = 0;
    json_object_object_foreach(c, name2, val2)
    {
        if (name2[0] != 'a')
            continue;
        char want[16];
        snprintf(want, sizeof(want), "a%d", i);
        assert_string_equal(name2, want);
        assert_int_equal(json_object_get_int(val2), i);
        i++;
    }
    assert_true(i > 100 && i < 700);
    json_object_put(b);
    json_object_put(c);
    free(text);
}

SPW_TEST_MAIN(test_log_level_parse, test_log_ratelimit, test_log_line_format,
              test_log_threshold_skips_arguments, test_log_ratelimited_macro,
              test_log_long_line_truncated, test_log_format_parse, test_log_json_line,
              test_log_json_long_line_truncated)
