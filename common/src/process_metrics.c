/* The process collector: the standard process_* metrics from /proc/self and sparrow_build_info,
 * rendered at each scrape (the names and meanings of the Prometheus client libraries'). */
#include "metrics_int.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sparrow_build_info.h" /* generated: SPW_BUILD_* (cmake/SparrowBuildInfo.cmake) */

/* What /proc/self/stat holds that we need (proc(5) fields 14, 15, 22, 23, 24). */
struct proc_stat {
    unsigned long long utime, stime; /* clock ticks */
    unsigned long long starttime;    /* clock ticks after boot */
    unsigned long long vsize;        /* bytes */
    long long rss;                   /* pages */
};

/* Reads a small /proc file whole into buf (NUL-terminated); false when it cannot. */
static bool read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

static bool read_stat(struct proc_stat *st)
{
    char buf[1024];
    if (!read_small("/proc/self/stat", buf, sizeof(buf)))
        return false;
    /* Field 2, the command name, is in parentheses and may hold spaces or ')': the fields
     * after it start past the last ')'. Field 3 (state) comes first there. */
    const char *p = strrchr(buf, ')');
    if (!p)
        return false;
    char *end;
    p += 2;
    unsigned long long v[22]; /* fields 3..24; field 3 is a letter */
    if (*p == '\0')
        return false;
    p++;
    for (int i = 1; i < 22; i++) {
        v[i] = strtoull(p, &end, 10);
        if (end == p)
            return false;
        p = end;
    }
    st->utime = v[14 - 3];
    st->stime = v[15 - 3];
    st->starttime = v[22 - 3];
    st->vsize = v[23 - 3];
    st->rss = (long long)v[24 - 3];
    return true;
}

/* The boot time (btime of /proc/stat), seconds since the epoch; 0 when unknown. */
static long long boot_time(void)
{
    char buf[8192];
    if (!read_small("/proc/stat", buf, sizeof(buf)))
        return 0;
    const char *p = strstr(buf, "\nbtime ");
    return p ? strtoll(p + 7, NULL, 10) : 0;
}

/* Open descriptors: the entries of /proc/self/fd less the one the listing itself holds. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

struct out {
    char *p;
    size_t len, cap;
};

__attribute__((format(printf, 2, 3))) static void outf(struct out *o, const char *fmt, ...)
{
    if (o->len >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len = (size_t)n < o->cap - o->len ? o->len + (size_t)n : o->cap - 1;
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    outf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

size_t spw_metrics__process_text(char *out, size_t cap)
{
    struct out o = {out, 0, cap};
    out[0] = '\0';
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    struct proc_stat st;
    bool have_stat = ticks > 0 && page > 0 && read_stat(&st);
    if (have_stat) {
        family(&o, "process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.");
        outf(&o, "process_cpu_seconds_total %.2f\n", (double)(st.utime + st.stime) / (double)ticks);
    }
    long long fds = open_fds();
    if (fds >= 0) {
        family(&o, "process_open_fds", "gauge", "Number of open file descriptors.");
        outf(&o, "process_open_fds %lld\n", fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        family(&o, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        if (rl.rlim_cur == RLIM_INFINITY)
            outf(&o, "process_max_fds +Inf\n");
        else
            outf(&o, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
    if (have_stat) {
        family(&o, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        outf(&o, "process_virtual_memory_bytes %llu\n", st.vsize);
        family(&o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        outf(&o, "process_resident_memory_bytes %lld\n", st.rss * (long long)page);
        long long btime = boot_time();
        if (btime > 0) {
            family(&o, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.");
            outf(&o, "process_start_time_seconds %.2f\n",
                 (double)btime + (double)st.starttime / (double)ticks);
        }
    }
    family(&o, "sparrow_build_info", "gauge",
           "The build of this binary (version, commit, build type, compiler); always 1.");
    outf(&o,
         "sparrow_build_info{version=\"%s\",commit=\"%s\",build_type=\"%s\",compiler=\"%s\"} 1\n",
         SPW_BUILD_VERSION, SPW_BUILD_COMMIT, SPW_BUILD_TYPE, SPW_BUILD_COMPILER);
    return o.len;
}
