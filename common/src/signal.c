/* SIGTERM/SIGINT handling: a flag that long-running loops observe. */
#include "sparrow/signal.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static atomic_int stop_flag;

static void on_signal(int signo)
{
    (void)signo;
    atomic_store(&stop_flag, 1);
}

void spw_signal_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

bool spw_signal_stop_requested(void)
{
    return atomic_load(&stop_flag) != 0;
}

void spw_signal_request_stop(void)
{
    atomic_store(&stop_flag, 1);
}

void spw_signal_reset(void)
{
    atomic_store(&stop_flag, 0);
}
