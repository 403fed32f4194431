/* Logging internals shared by log.c and log_json.c. */
#ifndef SPARROW_LOG_INT_H
#define SPARROW_LOG_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "sparrow/log.h"

/* One JSON log line (log.h says what it holds) into out[0..cap), newline included, not
 * NUL-terminated; returns its length (<= cap). ts, role and msg are NUL-terminated; kv is the
 * formatted key=value text (NULL or "" for none); kv_cut: it was cut short (the line says
 * "truncated"). cap >= 256. Pure; thread-safe. */
size_t spw_log__json_line(char *out, size_t cap, const char *ts, enum spw_log_level level,
                          const char *role, const char *msg, const char *kv, bool kv_cut);

#endif
