/* Fault injection on the local pipeline: kill -9 of random processes of chosen roles at random
 * intervals and of named processes at set times, each restarted with its arguments after a delay.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_int.h"
#include "sparrow/hash.h"

/* A kill waiting for its restart. */
struct pending {
    int idx;
    uint64_t at_ms;
};

struct spw_chaos {
    struct spw_chaos_conf conf; /* at borrowed */
    FILE *log;                  /* NULL when none */
    bool quiet;
    uint64_t next_kill_ms; /* next random kill, ms after the run started */
    uint64_t rng;
    long kills, restarts, random_done;
    bool *at_done;
    struct pending pending[SPW_LAUNCH_MAX_PROCS];
    size_t n_pending;
};

static uint64_t splitmix(uint64_t *x)
{
    return spw_hash_mix64(*x += 0x9e3779b97f4a7c15ull);
}

static uint64_t next_interval(spw_chaos_t *c)
{
    uint64_t span = c->conf.interval_max_ms - c->conf.interval_min_ms + 1;
    return c->conf.interval_min_ms + splitmix(&c->rng) % span;
}

spw_chaos_t *spw_chaos_new(const struct spw_chaos_conf *conf, const char *log_path, bool quiet)
{
    spw_chaos_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->conf = *conf;
    c->quiet = quiet;
    c->rng = conf->seed;
    c->at_done = calloc(conf->n_at + 1, sizeof(bool));
    if (!c->at_done) {
        free(c);
        return NULL;
    }
    if (log_path && (conf->kills > 0 || conf->n_at > 0))
        c->log = fopen(log_path, "a");
    c->next_kill_ms = conf->kills > 0 ? next_interval(c) : UINT64_MAX;
    return c;
}

void spw_chaos_destroy(spw_chaos_t *c)
{
    if (!c)
        return;
    if (c->log)
        fclose(c->log);
    free(c->at_done);
    free(c);
}

static void note(spw_chaos_t *c, uint64_t now_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note(spw_chaos_t *c, uint64_t now_ms, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!c->quiet) {
        printf("chaos: t=%.3fs %s\n", (double)now_ms / 1000.0, msg);
        fflush(stdout);
    }
    if (c->log) {
        fprintf(c->log, "t=%.3fs %s\n", (double)now_ms / 1000.0, msg);
        fflush(c->log);
    }
}

static bool is_pending(const spw_chaos_t *c, int idx)
{
    for (size_t i = 0; i < c->n_pending; i++)
        if (c->pending[i].idx == idx)
            return true;
    return false;
}

/* Whether process name belongs to one of the roles in mask. */
static bool in_roles(unsigned mask, const char *name)
{
    if ((mask & (1u << SPW_PIPELINE_TRAINER)) && strncmp(name, "trainer-", 8) == 0)
        return true;
    if ((mask & (1u << SPW_PIPELINE_PSERVER)) && strncmp(name, "shard-", 6) == 0)
        return true;
    return (mask & (1u << SPW_PIPELINE_COORDINATOR)) && strcmp(name, "coordinator") == 0;
}

static void kill_one(spw_chaos_t *c, spw_launch_t *l, int idx, uint64_t now_ms, bool restart)
{
    pid_t pid = spw_launch_pid(l, idx);
    spw_launch_kill(l, idx, SIGKILL);
    c->kills++;
    note(c, now_ms, "kill -9 %s (pid %d)%s", spw_launch_name(l, idx), (int)pid,
         restart ? "" : ", not restarted");
    if (restart)
        c->pending[c->n_pending++] = (struct pending){idx, now_ms + c->conf.restart_after_ms};
}

spw_err_t spw_chaos_step(spw_chaos_t *c, spw_pipeline_t *p, uint64_t now_ms, char *errstr,
                         size_t errstr_size)
{
    spw_launch_t *l = p->launch;
    for (size_t i = 0; i < c->n_pending;) {
        if (c->pending[i].at_ms > now_ms) {
            i++;
            continue;
        }
        int idx = c->pending[i].idx;
        c->pending[i] = c->pending[--c->n_pending];
        char err[256];
        if (spw_launch_restart(l, idx, err, sizeof(err)) != SPW_OK) {
            snprintf(errstr, errstr_size, "cannot restart %s: %s", spw_launch_name(l, idx), err);
            return SPW_ERR_IO;
        }
        c->restarts++;
        note(c, now_ms, "restart %s (pid %d)", spw_launch_name(l, idx),
             (int)spw_launch_pid(l, idx));
    }
    for (size_t i = 0; i < c->conf.n_at; i++) {
        const struct spw_chaos_at *at = &c->conf.at[i];
        if (c->at_done[i] || at->at_ms > now_ms)
            continue;
        int idx = spw_launch_find(l, at->name);
        if (idx < 0 || is_pending(c, idx) || !spw_launch_alive(l, idx))
            continue; /* not running (yet): try again next step */
        c->at_done[i] = true;
        kill_one(c, l, idx, now_ms, !at->norestart);
    }
    if (c->random_done < c->conf.kills && now_ms >= c->next_kill_ms) {
        int cand[SPW_LAUNCH_MAX_PROCS], n = 0;
        for (int idx = 0; idx < spw_launch_count(l); idx++)
            if (in_roles(c->conf.roles, spw_launch_name(l, idx)) && !is_pending(c, idx) &&
                spw_launch_alive(l, idx))
                cand[n++] = idx;
        if (n > 0) {
            kill_one(c, l, cand[splitmix(&c->rng) % (uint64_t)n], now_ms, true);
            c->random_done++;
            c->next_kill_ms = now_ms + next_interval(c);
        }
    }
    return SPW_OK;
}

bool spw_chaos_done(const spw_chaos_t *c)
{
    if (c->random_done < c->conf.kills || c->n_pending > 0)
        return false;
    for (size_t i = 0; i < c->conf.n_at; i++)
        if (!c->at_done[i])
            return false;
    return true;
}

long spw_chaos_kills(const spw_chaos_t *c)
{
    return c->kills;
}

long spw_chaos_restarts(const spw_chaos_t *c)
{
    return c->restarts;
}
