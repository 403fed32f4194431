/* Metrics registry: counters, gauges and fixed-bucket histograms with labels, rendered in the
 * Prometheus text exposition format. */
#ifndef SPARROW_METRICS_H
#define SPARROW_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/err.h"

/*
 * Thread-safety: registration (spw_metrics_*_new) takes the registry's lock and may be called
 * from any thread; updates (inc, add, set, observe) are lock-free atomics and are meant for hot
 * paths. A metric handle is owned by its registry and valid until the registry is destroyed.
 *
 * Labels: each metric may carry one fixed label set, written "k1=\"v1\",k2=\"v2\"" (without
 * braces). Several metrics may share a name with different label sets (one family).
 */

typedef struct spw_metrics spw_metrics_t;
typedef struct spw_counter spw_counter_t;
typedef struct spw_gauge spw_gauge_t;
typedef struct spw_histogram spw_histogram_t;

#define SPW_HISTOGRAM_MAX_BUCKETS 32

/* Creates an empty registry. Returns NULL when out of memory. */
spw_metrics_t *spw_metrics_new(void);

/* Frees the registry and every metric in it. NULL is a no-op. */
void spw_metrics_destroy(spw_metrics_t *reg);

/* Registers (or returns the existing) counter name{labels}. help is copied. labels may be NULL.
 * Returns NULL when out of memory or when name is registered with another type. */
spw_counter_t *spw_metrics_counter_new(spw_metrics_t *reg, const char *name, const char *help,
                                       const char *labels);
spw_gauge_t *spw_metrics_gauge_new(spw_metrics_t *reg, const char *name, const char *help,
                                   const char *labels);

/* Histogram with n_bounds ascending upper bounds (at most SPW_HISTOGRAM_MAX_BUCKETS; +Inf is
 * implicit). */
spw_histogram_t *spw_metrics_histogram_new(spw_metrics_t *reg, const char *name, const char *help,
                                           const char *labels, const double *bounds,
                                           size_t n_bounds);

void spw_counter_inc(spw_counter_t *c);
void spw_counter_add(spw_counter_t *c, uint64_t n);
uint64_t spw_counter_get(const spw_counter_t *c);

void spw_gauge_set(spw_gauge_t *g, double v);
void spw_gauge_add(spw_gauge_t *g, double delta);
double spw_gauge_get(const spw_gauge_t *g);

void spw_histogram_observe(spw_histogram_t *h, double v);
/* For observations batched by the caller (one atomic add per bucket instead of two per value):
 * the index in 0..n_bounds of the bucket v falls in (n_bounds: above every bound), and the
 * addition of counts[0..n_bounds] (per bucket, in that indexing) whose values sum to sum.
 * Thread-safe like spw_histogram_observe. */
size_t spw_histogram_bucket(const spw_histogram_t *h, double v);
void spw_histogram_add(spw_histogram_t *h, const uint64_t *counts, double sum);
/* Count of observations and their sum. */
uint64_t spw_histogram_count(const spw_histogram_t *h);
double spw_histogram_sum(const spw_histogram_t *h);

/*
 * Adds the process collector to reg: every render then ends with the standard process metrics of
 * the Prometheus client libraries, read from /proc/self at that moment (process_cpu_seconds_total,
 * process_open_fds, process_max_fds, process_virtual_memory_bytes, process_resident_memory_bytes,
 * process_start_time_seconds; one that cannot be read is left out) and
 * sparrow_build_info{version,commit,build_type,compiler} 1. Idempotent. Every role's HTTP
 * endpoint adds it to the registry its /metrics serves (spw_http_start*). Thread-safe.
 */
void spw_metrics_add_process(spw_metrics_t *reg);

/* Renders every metric in the Prometheus text format (version 0.0.4) into a malloc'd,
 * NUL-terminated buffer that the caller frees; *len_out receives its length. NULL when out of
 * memory. Thread-safe. */
char *spw_metrics_render(spw_metrics_t *reg, size_t *len_out);

#endif
