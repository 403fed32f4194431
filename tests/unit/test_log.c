/* Unit tests of logging: level names, the rate limiter and the shape of a written line. */
#include "test_main.h" /* cmocka and what it needs first */

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

SPW_TEST_MAIN(test_log_level_parse, test_log_ratelimit, test_log_line_format,
              test_log_threshold_skips_arguments, test_log_ratelimited_macro,
              test_log_long_line_truncated)
