/* Metrics internals shared by metrics.c and process_metrics.c. */
#ifndef SPARROW_METRICS_INT_H
#define SPARROW_METRICS_INT_H

#include <stddef.h>

/* Largest text spw_metrics__process_text writes. */
#define SPW_METRICS_PROCESS_TEXT_MAX 4096

/* The process collector's families in the text format (sparrow/metrics.h,
 * spw_metrics_add_process) into out[0..cap), NUL-terminated; returns the length. Reads /proc/self
 * and getrlimit; a value that cannot be read leaves its family out. Thread-safe. */
size_t spw_metrics__process_text(char *out, size_t cap);

#endif
