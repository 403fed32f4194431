/* SIGTERM/SIGINT handling: a flag that long-running loops observe; SIGUSR1: a request flag. */
#include "sparrow/signal.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static atomic_int stop_flag;
static atomic_int usr1_flag;

static void on_signal(int signo)
{
    atomic_store(signo == SIGUSR1 ? &usr1_flag : &stop_flag, 1);
}

void spw_signal_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    /* a launcher may start us with SIGUSR1 blocked until now (sparrow launch does) */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_UNBLOCK, &usr1, NULL);
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

bool spw_signal_take_usr1(void)
{
    return atomic_exchange(&usr1_flag, 0) != 0;
}
