/* Logging: one line per event on stderr, `ts level role msg key=value ...` (log.format=text) or
 * one JSON object per line (log.format=json). */
#ifndef SPARROW_LOG_H
#define SPARROW_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum spw_log_level {
    SPW_LOG_ERROR = 0,
    SPW_LOG_WARN = 1,
    SPW_LOG_INFO = 2,
    SPW_LOG_DEBUG = 3,
};

/* Longest JSON line written, newline included (the text form's bound is 2048). */
#define SPW_LOG_JSON_MAX 4096

/* How a line is written (log.format). */
enum spw_log_format {
    SPW_LOG_TEXT = 0, /* `2026-11-29T13:29:32.123Z INFO role msg key=value...` */
    SPW_LOG_JSON = 1, /* {"ts":"2026-11-29T13:29:32.123Z","level":"info","role":"role",
                          "msg":"msg","key":value,...} */
};

/* The current threshold; messages above it are not formatted. Atomic, read with relaxed loads
 * (SPW_LOG_ENABLED): it guards no other data, so no ordering is needed, and a level change reaches
 * other threads on a later call. Written only by spw_log_init. */
extern _Atomic int spw_log_threshold;

/* True when a message of level would be written. Thread-safe. */
#define SPW_LOG_ENABLED(level)                                                                     \
    ((int)(level) <= atomic_load_explicit(&spw_log_threshold, memory_order_relaxed))

/* Sets the role printed on every line (copied, at most 31 bytes) and the threshold. Call from the
 * main thread before other threads start. */
void spw_log_init(const char *role, enum spw_log_level level);

/* Parses "error|warn|info|debug" into *level. Returns 0 or SPW_ERR_INVALID. */
int spw_log_level_parse(const char *text, enum spw_log_level *level);

/* Parses "text|json" into *format. Returns 0 or SPW_ERR_INVALID. */
int spw_log_format_parse(const char *text, enum spw_log_format *format);

/* Sets the line format (text until called). Atomic: safe from any thread, though meant for the
 * main thread at start, next to spw_log_init. */
void spw_log_set_format(enum spw_log_format format);

/*
 * JSON lines: one object per line with "ts" (UTC, milliseconds), "level" (lower case), "role",
 * "msg", then one member per key=value of the text form, in order: a value written "..." becomes
 * a string (without the quotes), a bare one a number when it is a JSON number (integers only up
 * to 2^53 in magnitude, so that readers holding doubles keep them exact), else a string. A key
 * that is one of the four above gets a leading '_'; words that are not key=value are gathered in
 * "text". Strings are escaped (control bytes as six-byte u00XX escapes, bytes that are not UTF-8
 * as U+FFFD). A line longer than SPW_LOG_JSON_MAX bytes is cut before a member, its strings
 * shortened as needed, and carries "truncated":true.
 */

/* Writes one line in the current format: `2026-11-29T13:29:32.123Z INFO role msg key=value...`
 * or its JSON object. kv_fmt formats the key=value part (may be NULL). The line is written with one
 * write(2), so lines from several threads do not interleave. Thread-safe. Prefer the SPW_LOG_*
 * macros, which check the level first. */
void spw_log_write(enum spw_log_level level, const char *msg, const char *kv_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Per-call-site state of a rate-limited log statement. */
struct spw_log_ratelimit {
    uint64_t next_ns;    /* earliest time of the next line */
    uint64_t suppressed; /* lines dropped since the last one written */
};

/* True when a rate-limited line may be written now (at most one per interval_ms per call site);
 * *suppressed receives the count of lines dropped since the previous one. Thread-safe (a race can
 * let two lines through, never more). */
int spw_log_ratelimit_pass(struct spw_log_ratelimit *rl, uint64_t interval_ms,
                           uint64_t *suppressed);

#define SPW_LOG(level, msg, ...)                                                                   \
    do {                                                                                           \
        if (SPW_LOG_ENABLED(level))                                                                \
            spw_log_write((level), (msg), __VA_ARGS__);                                            \
    } while (0)

#define SPW_ERROR(msg, ...) SPW_LOG(SPW_LOG_ERROR, msg, __VA_ARGS__)
#define SPW_WARN(msg, ...)  SPW_LOG(SPW_LOG_WARN, msg, __VA_ARGS__)
#define SPW_INFO(msg, ...)  SPW_LOG(SPW_LOG_INFO, msg, __VA_ARGS__)
#define SPW_DEBUG(msg, ...) SPW_LOG(SPW_LOG_DEBUG, msg, __VA_ARGS__)

/* Logs at most once per interval_ms from this call site; the line carries suppressed=N. */
#define SPW_LOG_RATELIMITED(level, interval_ms, msg, kv_fmt, ...)                                  \
    do {                                                                                           \
        static struct spw_log_ratelimit spw__rl;                                                   \
        uint64_t spw__sup;                                                                         \
        if (SPW_LOG_ENABLED(level) && spw_log_ratelimit_pass(&spw__rl, (interval_ms), &spw__sup))  \
            spw_log_write((level), (msg), kv_fmt " suppressed=%llu", __VA_ARGS__,                  \
                          (unsigned long long)spw__sup);                                           \
    } while (0)

#endif
