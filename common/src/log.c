/* Logging: one line per event on stderr, `ts level role msg key=value ...` or its JSON object. */
#include "sparrow/log.h"
#include "log_int.h"
#include "sparrow/err.h"
#include "sparrow/time.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Atomic int spw_log_threshold = SPW_LOG_INFO;
static _Atomic int log_format = SPW_LOG_TEXT;
static char log_role[32] = "sparrow";

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void spw_log_init(const char *role, enum spw_log_level level)
{
    snprintf(log_role, sizeof(log_role), "%s", role);
    atomic_store_explicit(&spw_log_threshold, (int)level, memory_order_relaxed);
}

int spw_log_level_parse(const char *text, enum spw_log_level *level)
{
    static const char *const lower[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(text, lower[i]) == 0) {
            *level = (enum spw_log_level)i;
            return SPW_OK;
        }
    }
    return SPW_ERR_INVALID;
}

int spw_log_format_parse(const char *text, enum spw_log_format *format)
{
    if (strcmp(text, "text") == 0)
        *format = SPW_LOG_TEXT;
    else if (strcmp(text, "json") == 0)
        *format = SPW_LOG_JSON;
    else
        return SPW_ERR_INVALID;
    return SPW_OK;
}

void spw_log_set_format(enum spw_log_format format)
{
    atomic_store_explicit(&log_format, (int)format, memory_order_relaxed);
}

/* The JSON form of a line: the key=value text formatted first, then turned into members. */
__attribute__((format(printf, 4, 0))) static void write_json(enum spw_log_level level,
                                                             const char *stamp, const char *msg,
                                                             const char *kv_fmt, va_list ap)
{
    char kv[SPW_LOG_JSON_MAX], line[SPW_LOG_JSON_MAX];
    bool cut = false;
    kv[0] = '\0';
    if (kv_fmt && kv_fmt[0]) {
        int n = vsnprintf(kv, sizeof(kv), kv_fmt, ap);
        if (n < 0) {
            kv[0] = '\0';
        } else if ((size_t)n >= sizeof(kv)) {
            /* cut short: drop the last pair, which may be a piece of one */
            char *space = strrchr(kv, ' ');
            *(space ? space : kv) = '\0';
            cut = true;
        }
    }
    size_t n = spw_log__json_line(line, sizeof(line), stamp, level, log_role, msg, kv, cut);
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void spw_log_write(enum spw_log_level level, const char *msg, const char *kv_fmt, ...)
{
    char line[2048], stamp[64];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
    if (atomic_load_explicit(&log_format, memory_order_relaxed) == SPW_LOG_JSON) {
        va_list ap;
        va_start(ap, kv_fmt);
        write_json(level, stamp, msg, kv_fmt, ap);
        va_end(ap);
        return;
    }
    int n = snprintf(line, sizeof(line), "%s %s %s %s", stamp, level_names[level], log_role, msg);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(line) - 2 && kv_fmt && kv_fmt[0]) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, kv_fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, kv_fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2; /* truncated: keep the newline */
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

int spw_log_ratelimit_pass(struct spw_log_ratelimit *rl, uint64_t interval_ms, uint64_t *suppressed)
{
    uint64_t now = spw_time_mono_ns();
    uint64_t next = __atomic_load_n(&rl->next_ns, __ATOMIC_RELAXED);
    if (now < next) {
        __atomic_fetch_add(&rl->suppressed, 1, __ATOMIC_RELAXED);
        return 0;
    }
    __atomic_store_n(&rl->next_ns, now + interval_ms * 1000000ull, __ATOMIC_RELAXED);
    *suppressed = __atomic_exchange_n(&rl->suppressed, 0, __ATOMIC_RELAXED);
    return 1;
}
