/* Monotonic and wall-clock time helpers. */
#include "sparrow/time.h"
#include "sparrow/signal.h"

#include <errno.h>
#include <time.h>

uint64_t spw_time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t spw_time_mono_ms(void)
{
    return spw_time_mono_ns() / 1000000ull;
}

int64_t spw_time_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void spw_time_sleep_ms(uint64_t ms)
{
    struct timespec req = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
        if (spw_signal_stop_requested())
            return;
    }
}
