/* Local launcher: fork/exec of the sparrow binary per role, logs under one run directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sparrow/fs.h"
#include "sparrow/launch.h"
#include "sparrow/time.h"

struct launch_proc {
    char name[SPW_LAUNCH_NAME_MAX];
    char *log_path;
    char **argv; /* argv[0] = "sparrow", NULL-terminated */
    pid_t pid;   /* 0 when not running */
    bool expected_exit;
    bool reported;
    int status;
};

struct spw_launch {
    char *dir;
    char exe[PATH_MAX];
    struct launch_proc procs[SPW_LAUNCH_MAX_PROCS];
    int n;
};

spw_launch_t *spw_launch_new(const char *run_dir, const char *exe, char *errstr, size_t errstr_size)
{
    spw_launch_t *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    if (exe) {
        if (strlen(exe) >= sizeof(l->exe)) {
            snprintf(errstr, errstr_size, "executable path too long");
            goto out_free;
        }
        strcpy(l->exe, exe);
    } else {
        ssize_t n = readlink("/proc/self/exe", l->exe, sizeof(l->exe) - 1);
        if (n <= 0) {
            snprintf(errstr, errstr_size, "/proc/self/exe: %s", strerror(errno));
            goto out_free;
        }
        l->exe[n] = '\0';
    }
    if (spw_fs_mkdir_p(run_dir) != SPW_OK) {
        snprintf(errstr, errstr_size, "cannot create run directory %s: %s", run_dir,
                 strerror(errno));
        goto out_free;
    }
    l->dir = strdup(run_dir);
    if (!l->dir) {
        snprintf(errstr, errstr_size, "out of memory");
        goto out_free;
    }
    return l;

out_free:
    free(l);
    return NULL;
}

static void proc_free(struct launch_proc *p)
{
    if (p->argv)
        for (char **a = p->argv; *a; a++)
            free(*a);
    free(p->argv);
    free(p->log_path);
}

void spw_launch_destroy(spw_launch_t *launch)
{
    if (!launch)
        return;
    spw_launch_stop_all(launch, 5000);
    for (int i = 0; i < launch->n; i++)
        proc_free(&launch->procs[i]);
    free(launch->dir);
    free(launch);
}

const char *spw_launch_dir(const spw_launch_t *launch)
{
    return launch->dir;
}

static bool name_ok(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len >= SPW_LAUNCH_NAME_MAX)
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_' || *c == '.'))
            return false;
    return true;
}

/* Forks and execs p; returns 0 or -1 with errstr. */
static int proc_spawn(spw_launch_t *l, struct launch_proc *p, char *errstr, size_t errstr_size)
{
    int log_fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        snprintf(errstr, errstr_size, "%s: %s", p->log_path, strerror(errno));
        return -1;
    }
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) {
        snprintf(errstr, errstr_size, "/dev/null: %s", strerror(errno));
        close(log_fd);
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(errstr, errstr_size, "fork: %s", strerror(errno));
        close(null_fd);
        close(log_fd);
        return -1;
    }
    if (pid == 0) {
        /* child: only async-signal-safe calls from here */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        /* SIGUSR1 (a request to a role) stays blocked until the role has its handler
         * (spw_signal_install unblocks it): one sent early waits instead of killing */
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigprocmask(SIG_SETMASK, &usr1, NULL);
        signal(SIGPIPE, SIG_DFL);
        dup2(null_fd, STDIN_FILENO);
        dup2(log_fd, STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
        execv(l->exe, p->argv);
        _exit(127);
    }
    close(null_fd);
    close(log_fd);
    p->pid = pid;
    p->expected_exit = false;
    p->reported = false;
    p->status = 0;
    return 0;
}

int spw_launch_start(spw_launch_t *launch, const char *name, const char *const *args, char *errstr,
                     size_t errstr_size)
{
    if (!name_ok(name)) {
        snprintf(errstr, errstr_size, "bad process name \"%.64s\"", name);
        return -1;
    }
    if (spw_launch_find(launch, name) >= 0) {
        snprintf(errstr, errstr_size, "process name \"%s\" already used", name);
        return -1;
    }
    if (launch->n == SPW_LAUNCH_MAX_PROCS) {
        snprintf(errstr, errstr_size, "more than %d processes", SPW_LAUNCH_MAX_PROCS);
        return -1;
    }
    size_t n_args = 0;
    while (args[n_args])
        n_args++;
    if (n_args > SPW_LAUNCH_MAX_ARGS) {
        snprintf(errstr, errstr_size, "more than %d arguments", SPW_LAUNCH_MAX_ARGS);
        return -1;
    }
    struct launch_proc *p = &launch->procs[launch->n];
    memset(p, 0, sizeof(*p));
    strcpy(p->name, name);
    p->argv = calloc(n_args + 2, sizeof(char *));
    size_t plen = strlen(launch->dir) + strlen(name) + 8;
    p->log_path = malloc(plen);
    if (!p->argv || !p->log_path)
        goto out_nomem;
    snprintf(p->log_path, plen, "%s/%s.log", launch->dir, name);
    p->argv[0] = strdup("sparrow");
    if (!p->argv[0])
        goto out_nomem;
    for (size_t i = 0; i < n_args; i++) {
        p->argv[i + 1] = strdup(args[i]);
        if (!p->argv[i + 1])
            goto out_nomem;
    }
    if (proc_spawn(launch, p, errstr, errstr_size) != 0)
        goto out_free_proc;
    return launch->n++;

out_nomem:
    snprintf(errstr, errstr_size, "out of memory");
out_free_proc:
    proc_free(p);
    memset(p, 0, sizeof(*p));
    return -1;
}

int spw_launch_count(const spw_launch_t *launch)
{
    return launch->n;
}

int spw_launch_find(const spw_launch_t *launch, const char *name)
{
    for (int i = 0; i < launch->n; i++)
        if (strcmp(launch->procs[i].name, name) == 0)
            return i;
    return -1;
}

const char *spw_launch_name(const spw_launch_t *launch, int idx)
{
    return launch->procs[idx].name;
}

pid_t spw_launch_pid(const spw_launch_t *launch, int idx)
{
    return launch->procs[idx].pid;
}

const char *spw_launch_log(const spw_launch_t *launch, int idx)
{
    return launch->procs[idx].log_path;
}

int spw_launch_status(const spw_launch_t *launch, int idx)
{
    return launch->procs[idx].status;
}

/* Reap of child p (blocking or not). */
static void proc_reap(struct launch_proc *p, bool block)
{
    if (p->pid <= 0)
        return;
    int status;
    pid_t r;
    do {
        r = waitpid(p->pid, &status, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->status = r == p->pid ? status : 0;
        p->pid = 0;
    }
}

bool spw_launch_alive(spw_launch_t *launch, int idx)
{
    struct launch_proc *p = &launch->procs[idx];
    proc_reap(p, false);
    return p->pid > 0;
}

int spw_launch_check(spw_launch_t *launch, int *status)
{
    for (int i = 0; i < launch->n; i++) {
        struct launch_proc *p = &launch->procs[i];
        proc_reap(p, false);
        if (p->pid == 0 && !p->expected_exit && !p->reported && p->argv) {
            p->reported = true;
            if (status)
                *status = p->status;
            return i;
        }
    }
    return -1;
}

spw_err_t spw_launch_kill(spw_launch_t *launch, int idx, int sig)
{
    struct launch_proc *p = &launch->procs[idx];
    proc_reap(p, false);
    if (p->pid <= 0)
        return SPW_ERR_STATE;
    /* a signal meant to end it (not a pause, a probe or the roles' request signal) */
    if (sig != SIGSTOP && sig != SIGCONT && sig != 0 && sig != SIGUSR1)
        p->expected_exit = true;
    if (kill(p->pid, sig) != 0)
        return SPW_ERR_STATE;
    if (sig == SIGKILL)
        proc_reap(p, true);
    return SPW_OK;
}

spw_err_t spw_launch_restart(spw_launch_t *launch, int idx, char *errstr, size_t errstr_size)
{
    struct launch_proc *p = &launch->procs[idx];
    if (spw_launch_alive(launch, idx))
        spw_launch_kill(launch, idx, SIGKILL);
    return proc_spawn(launch, p, errstr, errstr_size) == 0 ? SPW_OK : SPW_ERR_IO;
}

spw_err_t spw_launch_stop_group(spw_launch_t *launch, const int *idx, size_t n, uint64_t grace_ms,
                                int *status)
{
    for (size_t i = 0; i < n; i++) {
        struct launch_proc *p = &launch->procs[idx[i]];
        proc_reap(p, false);
        if (p->pid > 0) {
            p->expected_exit = true;
            kill(p->pid, SIGTERM);
        }
    }
    uint64_t deadline = spw_time_mono_ms() + grace_ms;
    for (;;) {
        bool running = false;
        for (size_t i = 0; i < n; i++) {
            proc_reap(&launch->procs[idx[i]], false);
            running |= launch->procs[idx[i]].pid > 0;
        }
        if (!running || spw_time_mono_ms() >= deadline)
            break;
        spw_time_sleep_ms(20);
    }
    spw_err_t err = SPW_OK;
    for (size_t i = 0; i < n; i++) {
        struct launch_proc *p = &launch->procs[idx[i]];
        if (p->pid > 0) {
            kill(p->pid, SIGKILL);
            proc_reap(p, true);
            err = SPW_ERR_TIMEOUT;
        }
        if (status)
            status[i] = p->status;
    }
    return err;
}

spw_err_t spw_launch_stop(spw_launch_t *launch, int idx, uint64_t grace_ms, int *status)
{
    return spw_launch_stop_group(launch, &idx, 1, grace_ms, status);
}

void spw_launch_stop_all(spw_launch_t *launch, uint64_t grace_ms)
{
    for (int i = launch->n - 1; i >= 0; i--)
        spw_launch_stop(launch, i, grace_ms, NULL);
}

spw_err_t spw_launch_wait_file(const char *path, uint64_t timeout_ms)
{
    uint64_t deadline = spw_time_mono_ms() + timeout_ms;
    for (;;) {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size > 0)
            return SPW_OK;
        if (spw_time_mono_ms() >= deadline)
            return SPW_ERR_TIMEOUT;
        spw_time_sleep_ms(50);
    }
}

int spw_launch_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

const char *spw_launch_status_str(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "signal %d", WTERMSIG(status));
    else
        snprintf(buf, size, "status %d", status);
    return buf;
}
