/* Monotonic and wall-clock time helpers. */
#ifndef SPARROW_TIME_H
#define SPARROW_TIME_H

#include <stdint.h>

/* Monotonic nanoseconds (CLOCK_MONOTONIC), for intervals and deadlines. Thread-safe. */
uint64_t spw_time_mono_ns(void);

/* Monotonic milliseconds. Thread-safe. */
uint64_t spw_time_mono_ms(void);

/* Wall-clock milliseconds since the Unix epoch (CLOCK_REALTIME), for event times. Thread-safe. */
int64_t spw_time_wall_ms(void);

/* Sleeps for ms milliseconds, resuming after signals until the time has passed or
 * spw_signal_stop_requested() turns true. Thread-safe. */
void spw_time_sleep_ms(uint64_t ms);

#endif
