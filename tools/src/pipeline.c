/* The local pipeline: starts kafka-mock, shards, coordinator, gen, trainers and serve on loopback,
 * and stops them cleanly, producer first. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline_int.h"
#include "sparrow/kafka.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define PIPELINE_STARTUP_MS 20000
/* A consumer group without assignment changes this long counts as stable; one whose trainers
 * hold every partition between them, each some, after PIPELINE_SETTLED_MS. */
#define PIPELINE_STABLE_MS  3000
#define PIPELINE_SETTLED_MS 300
/* How long serve gets to fail at start before the pipeline goes on without it. */
#define PIPELINE_SERVE_CHECK_MS 1500

/* The arguments of one process: pointers into buf, copied by spw_launch_start. */
struct args {
    const char *v[SPW_LAUNCH_MAX_ARGS + 8];
    int n;
    bool overflow;
    char buf[16384];
    size_t used;
};

static void args_addf(struct args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void args_addf(struct args *a, const char *fmt, ...)
{
    if (a->n + 2 >= (int)(sizeof(a->v) / sizeof(a->v[0]))) {
        a->overflow = true;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(a->buf + a->used, sizeof(a->buf) - a->used, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof(a->buf) - a->used) {
        a->overflow = true;
        return;
    }
    a->v[a->n++] = a->buf + a->used;
    a->v[a->n] = NULL;
    a->used += (size_t)len + 1;
}

/* Adds the conf's --set values for role (trainer t when role is TRAINER). */
static void args_add_sets(struct args *a, const struct spw_pipeline_conf *c,
                          enum spw_pipeline_role role, long t)
{
    for (size_t i = 0; i < c->n_sets; i++) {
        const struct spw_pipeline_set *s = &c->sets[i];
        if (s->role != role && s->role != SPW_PIPELINE_ALL)
            continue;
        if (role == SPW_PIPELINE_TRAINER && s->trainer >= 0 && s->trainer != t)
            continue;
        args_addf(a, "--set");
        args_addf(a, "%s", s->kv);
    }
}

static void say(const spw_pipeline_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(const spw_pipeline_t *p, const char *fmt, ...)
{
    if (p->conf->quiet)
        return;
    printf("%s: ", p->conf->prefix);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static int start(spw_pipeline_t *p, const char *name, struct args *a, char *errstr,
                 size_t errstr_size)
{
    if (a->overflow) {
        snprintf(errstr, errstr_size, "cannot start %s: too many arguments", name);
        return -1;
    }
    char err[256];
    int idx = spw_launch_start(p->launch, name, a->v, err, sizeof(err));
    if (idx < 0)
        snprintf(errstr, errstr_size, "cannot start %s: %s", name, err);
    return idx;
}

/* Reads the first line of path into buf (newline stripped). */
static int read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    bool ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

static int start_kafka(spw_pipeline_t *p, char *errstr, size_t errstr_size)
{
    const struct spw_pipeline_conf *c = p->conf;
    char path[SPW_PIPELINE_PATH_MAX];
    snprintf(path, sizeof(path), "%s/kafka.port", c->run_dir);
    unlink(path);
    struct args a = {0};
    args_addf(&a, "kafka-mock");
    args_addf(&a, "--brokers");
    args_addf(&a, "1");
    long parts = spw_pipeline__examples_partitions(c);
    p->examples_partitions = parts;
    args_addf(&a, "--topic");
    args_addf(&a, "examples:%ld", parts);
    args_addf(&a, "--topic");
    args_addf(&a, "model-updates:1");
    args_addf(&a, "--port-file");
    args_addf(&a, "%s", path);
    int idx = start(p, "kafka-mock", &a, errstr, errstr_size);
    if (idx < 0)
        return -1;
    if (spw_launch_wait_file(path, PIPELINE_STARTUP_MS) != SPW_OK ||
        read_line(path, p->bootstrap, sizeof(p->bootstrap)) != 0) {
        snprintf(errstr, errstr_size, "FAILED: the Kafka mock did not start; read %s",
                 spw_launch_log(p->launch, idx));
        return -1;
    }
    snprintf(p->examples_url, sizeof(p->examples_url), "kafka://%s/examples", p->bootstrap);
    say(p, "kafka-mock at %s (topics examples:%ld, model-updates:1)", p->bootstrap, parts);
    long held = spw_pipeline__examples_held(parts);
    if (parts > c->partitions)
        say(p,
            "examples has %ld partitions, not %ld: the backlog of %llu examples (~%.0f MB) must "
            "fit the mock's retention of %u MiB per partition",
            parts, c->partitions, (unsigned long long)c->gen_n,
            (double)c->gen_n * SPW_PIPELINE_EXAMPLE_BYTES / 1e6,
            SPW_KAFKA_MOCK_RETENTION_BYTES >> 20);
    else
        say(p,
            "the mock keeps %u MiB per partition: examples holds ~%ld examples before the oldest "
            "are deleted (a trainer further behind loses records; kafka-mock.log warns)",
            SPW_KAFKA_MOCK_RETENTION_BYTES >> 20, held);
    return 0;
}

/*
 * spw_launch_free_port binds port 0 and releases it, so two calls can return the same port (the
 * kernel may hand out a released port again) before either role has bound it; with up to 64
 * trainers and 16 shards (2 ports each) the pipeline asks for some 100 ports in a row. Ports
 * already handed out are skipped.
 */
int spw_pipeline__port(spw_pipeline_t *p)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        int port = spw_launch_free_port();
        if (port == 0)
            return 0;
        bool seen = false;
        for (size_t i = 0; i < p->n_ports && !seen; i++)
            seen = p->ports[i] == port;
        if (seen)
            continue;
        if (p->n_ports < sizeof(p->ports) / sizeof(p->ports[0]))
            p->ports[p->n_ports++] = port;
        return port;
    }
    return 0;
}

static int start_shards(spw_pipeline_t *p, char *errstr, size_t errstr_size)
{
    const struct spw_pipeline_conf *c = p->conf;
    for (long i = 0; i < c->shards; i++) {
        p->shard_port[i] = spw_pipeline__port(p);
        p->shard_http[i] = spw_pipeline__port(p);
        char name[32];
        snprintf(name, sizeof(name), "shard-%ld", i);
        struct args a = {0};
        args_addf(&a, "pserver");
        args_addf(&a, "--listen");
        args_addf(&a, "tcp://127.0.0.1:%d", p->shard_port[i]);
        args_addf(&a, "--shard");
        args_addf(&a, "%ld", i);
        args_addf(&a, "--shards");
        args_addf(&a, "%ld", c->shards);
        args_addf(&a, "--dim");
        args_addf(&a, "5");
        args_addf(&a, "--data-dir");
        args_addf(&a, "%s/shard-%ld", c->run_dir, i);
        args_addf(&a, "--http-port");
        args_addf(&a, "%d", p->shard_http[i]);
        args_addf(&a, "--memory-mb");
        args_addf(&a, "64");
        args_addf(&a, "--set");
        args_addf(&a, "pserver.checkpoint.dir=%s", c->run_dir);
        args_addf(&a, "--set"); /* changed rows to model-updates, for serve */
        args_addf(&a, "pserver.publish.brokers=%s", p->bootstrap);
        args_add_sets(&a, c, SPW_PIPELINE_PSERVER, -1);
        if (start(p, name, &a, errstr, errstr_size) < 0)
            return -1;
        size_t used = strlen(p->shard_list);
        snprintf(p->shard_list + used, sizeof(p->shard_list) - used, "%stcp://127.0.0.1:%d",
                 i ? "," : "", p->shard_port[i]);
    }
    say(p, "%ld pserver shards at %s", c->shards, p->shard_list);
    return 0;
}

static int start_coordinator(spw_pipeline_t *p, char *errstr, size_t errstr_size)
{
    const struct spw_pipeline_conf *c = p->conf;
    snprintf(p->coord, sizeof(p->coord), "tcp://127.0.0.1:%d", spw_pipeline__port(p));
    struct args a = {0};
    args_addf(&a, "coordinator");
    args_addf(&a, "--listen");
    args_addf(&a, "%s", p->coord);
    args_addf(&a, "--mode");
    args_addf(&a, "%s", c->mode);
    args_addf(&a, "--shards");
    args_addf(&a, "%s", p->shard_list);
    args_addf(&a, "--checkpoint-dir"); /* checkpoints/ of shards and coordinator */
    args_addf(&a, "%s", c->run_dir);
    args_addf(&a, "--set");
    args_addf(&a, "coordinator.checkpoint.interval=%s", c->checkpoint_interval);
    args_addf(&a, "--set"); /* every trainer starts now: no need to wait out the grace */
    args_addf(&a, "coordinator.startup.trainers=%ld", c->trainers);
    args_add_sets(&a, c, SPW_PIPELINE_COORDINATOR, -1);
    if (start(p, "coordinator", &a, errstr, errstr_size) < 0)
        return -1;
    say(p, "coordinator at %s (checkpoints in %s/checkpoints)", p->coord, c->run_dir);
    return 0;
}

static int start_gen(spw_pipeline_t *p, char *errstr, size_t errstr_size)
{
    const struct spw_pipeline_conf *c = p->conf;
    struct args a = {0};
    args_addf(&a, "gen");
    args_addf(&a, "--n");
    args_addf(&a, "%llu", (unsigned long long)c->gen_n);
    args_addf(&a, "--seed");
    args_addf(&a, "%llu", (unsigned long long)c->seed);
    args_addf(&a, "--fields");
    args_addf(&a, "39");
    args_addf(&a, "--latent-dim");
    args_addf(&a, "4");
    args_addf(&a, "--drift");
    args_addf(&a, "%g", c->drift);
    args_addf(&a, "--rate");
    args_addf(&a, "%.0f", c->rate);
    args_addf(&a, "--start-ms"); /* event times from now: serve's freshness is measured on them */
    args_addf(&a, "%lld", (long long)spw_time_wall_ms());
    args_addf(&a, "--out");
    args_addf(&a, "%s", p->examples_url);
    args_add_sets(&a, c, SPW_PIPELINE_GEN, -1);
    if (start(p, "gen", &a, errstr, errstr_size) < 0)
        return -1;
    char n[64] = "";
    if (c->gen_n)
        snprintf(n, sizeof(n), "%llu examples ", (unsigned long long)c->gen_n);
    say(p, "gen -> %s %sat %.0f examples/s (39 fields, FM k=4, drift %g rad/M)", p->examples_url, n,
        c->rate, c->drift);
    return 0;
}

static int start_trainers(spw_pipeline_t *p, char *errstr, size_t errstr_size)
{
    const struct spw_pipeline_conf *c = p->conf;
    for (long t = 0; t < c->trainers; t++) {
        p->trainer_http[t] = spw_pipeline__port(p);
        char name[32];
        snprintf(name, sizeof(name), "trainer-%ld", t);
        struct args a = {0};
        args_addf(&a, "trainer");
        args_addf(&a, "--in");
        args_addf(&a, "%s", p->examples_url);
        args_addf(&a, "--shards");
        args_addf(&a, "%s", p->shard_list);
        args_addf(&a, "--model");
        args_addf(&a, "fm");
        args_addf(&a, "--latent-dim");
        args_addf(&a, "4");
        args_addf(&a, "--batch");
        args_addf(&a, "256");
        args_addf(&a, "--backend");
        args_addf(&a, "cpu");
        args_addf(&a, "--group");
        args_addf(&a, "%s", c->group);
        args_addf(&a, "--id");
        args_addf(&a, "%ld", t + 1); /* 0 would mean "derived" */
        args_addf(&a, "--http-port");
        args_addf(&a, "%d", p->trainer_http[t]);
        /* the trainer's progress gauges (window logloss, AUC) refresh at each progress line: a
         * finite run drained in a couple of seconds (its checkpoint asked for at once) would
         * otherwise end before samples.csv saw any */
        args_addf(&a, "--set");
        args_addf(&a, "trainer.log.interval=1s");
        args_addf(&a, "--set");
        args_addf(&a, "trainer.eval.window=20000");
        args_addf(&a, "--set");
        args_addf(&a, "trainer.push.fp16=true");
        /* a trainer gone (killed, paused) leaves the group after 6 s, not librdkafka's 45 s:
         * until then its partitions stand still */
        args_addf(&a, "--set");
        args_addf(&a, "kafka.session.timeout.ms=6000");
        args_addf(&a, "--set");
        args_addf(&a, "kafka.heartbeat.interval.ms=500");
        args_addf(&a, "--set");
        args_addf(&a, "trainer.coordinator=%s", p->coord);
        args_add_sets(&a, c, SPW_PIPELINE_TRAINER, t);
        if (start(p, name, &a, errstr, errstr_size) < 0)
            return -1;
    }
    say(p, "%ld CPU trainers in group %s", c->trainers, c->group);
    return 0;
}

/* From a trainer's log: the partitions it holds now (each "kafka partition assigned" line adds
 * one, each "kafka partitions revoked count=N" takes N away) and the assignment changes so far. */
static void log_assignment(const char *path, long *held, long *changes)
{
    *held = 0;
    *changes = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    static const char revoked[] = "kafka partitions revoked count=";
    char line[2048];
    while (fgets(line, sizeof(line), f)) {
        const char *r;
        if (strstr(line, "kafka partition assigned")) {
            (*held)++;
            (*changes)++;
        } else if ((r = strstr(line, revoked))) {
            *held -= strtol(r + sizeof(revoked) - 1, NULL, 10);
            (*changes)++;
        }
    }
    fclose(f);
}

/*
 * A finite stream is produced in one burst when the rate is high; produced before the trainers
 * consume, it can outgrow the Kafka mock's retention (librdkafka's mock keeps about 5 MiB per
 * partition). So the generator waits (at most PIPELINE_STARTUP_MS) until the trainers' consumer
 * group is stable: no assignment or revocation for PIPELINE_SETTLED_MS when the trainers hold
 * every partition between them and each holds some (when there are enough): the group then has
 * every trainer as a member, and no join is to come; PIPELINE_STABLE_MS otherwise (fewer
 * partitions than trainers, or a trainer that logs no assignment).
 */
static void wait_assigned(spw_pipeline_t *p)
{
    uint64_t start = spw_time_mono_ms(), changed = start;
    long events = -1;
    while (spw_time_mono_ms() < start + PIPELINE_STARTUP_MS && !spw_signal_stop_requested()) {
        long n = 0, held_all = 0;
        bool all = true;
        for (long t = 0; t < p->conf->trainers; t++) {
            char name[32];
            snprintf(name, sizeof(name), "trainer-%ld", t);
            int idx = spw_launch_find(p->launch, name);
            if (!spw_launch_alive(p->launch, idx))
                return; /* the caller's check reports it */
            long held, changes;
            log_assignment(spw_launch_log(p->launch, idx), &held, &changes);
            all = all && (held > 0 || t >= p->examples_partitions);
            held_all += held;
            n += changes;
        }
        uint64_t quiet = spw_time_mono_ms() - changed;
        if (n != events) {
            events = n;
            changed = spw_time_mono_ms();
        } else if (all && (quiet >= PIPELINE_STABLE_MS ||
                           (p->conf->trainers <= p->examples_partitions &&
                            held_all == p->examples_partitions && quiet >= PIPELINE_SETTLED_MS))) {
            return;
        }
        spw_time_sleep_ms(100);
    }
}

/* Sends sig to every trainer. */
static void signal_trainers(spw_pipeline_t *p, int sig)
{
    for (long t = 0; t < p->conf->trainers; t++) {
        char name[32];
        snprintf(name, sizeof(name), "trainer-%ld", t);
        spw_launch_kill(p->launch, spw_launch_find(p->launch, name), sig);
    }
}

/* Waits for the generator of a finite stream to finish (its exit is still reported once by
 * spw_launch_check); -1 with errstr when it failed. */
static int wait_gen(spw_pipeline_t *p, char *errstr, size_t errstr_size)
{
    int idx = spw_launch_find(p->launch, "gen");
    while (spw_launch_alive(p->launch, idx) && !spw_signal_stop_requested())
        spw_time_sleep_ms(50);
    int st = spw_launch_status(p->launch, idx);
    if (spw_launch_alive(p->launch, idx) || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char sts[32];
        snprintf(errstr, errstr_size, "FAILED: gen did not produce the stream (%s); read %s",
                 spw_launch_alive(p->launch, idx) ? "interrupted"
                                                  : spw_launch_status_str(st, sts, sizeof(sts)),
                 spw_launch_log(p->launch, idx));
        return -1;
    }
    say(p, "gen produced the stream while the trainers were paused");
    return 0;
}

/* serve is optional: the pipeline goes on without it when it does not start. */
static void start_serve(spw_pipeline_t *p)
{
    const struct spw_pipeline_conf *c = p->conf;
    int port = spw_pipeline__port(p);
    struct args a = {0};
    args_addf(&a, "serve");
    args_addf(&a, "--checkpoint-dir");
    args_addf(&a, "%s", c->run_dir);
    args_addf(&a, "--allow-empty"); /* it starts before the first checkpoint epoch */
    args_addf(&a, "--port");
    args_addf(&a, "%d", port);
    args_addf(&a, "--topic");
    args_addf(&a, "model-updates");
    args_addf(&a, "--brokers");
    args_addf(&a, "%s", p->bootstrap);
    args_add_sets(&a, c, SPW_PIPELINE_SERVE, -1);
    char errstr[512];
    int idx = start(p, "serve", &a, errstr, sizeof(errstr));
    if (idx < 0) {
        fprintf(stderr, "%s: %s\n", c->prefix, errstr);
        return;
    }
    spw_time_sleep_ms(PIPELINE_SERVE_CHECK_MS);
    int st = 0;
    if (!spw_launch_alive(p->launch, idx)) {
        spw_launch_check(p->launch, &st);
        char sts[32];
        say(p, "serve did not start (%s), going on without it; read %s",
            spw_launch_status_str(st, sts, sizeof(sts)), spw_launch_log(p->launch, idx));
    } else {
        p->serve_http = port;
        say(p, "serve on http://127.0.0.1:%d (/v1/predict)", port);
    }
}

int spw_pipeline_serve_port(const spw_pipeline_t *p)
{
    return p->serve_http;
}

spw_pipeline_t *spw_pipeline_start(const struct spw_pipeline_conf *conf, char *errstr,
                                   size_t errstr_size)
{
    spw_pipeline_t *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    p->conf = conf;
    /* the pipeline reads its children's logs as text lines: a log.format=json inherited from the
     * environment would blind its scrapes and summaries (a --set ROLE:log.format=json still wins)
     */
    setenv("SPARROW_LOG_FORMAT", "text", 1);
    p->launch = spw_launch_new(conf->run_dir, NULL, errstr, errstr_size);
    if (!p->launch)
        goto out_free;
    if (start_kafka(p, errstr, errstr_size) || start_shards(p, errstr, errstr_size) ||
        start_coordinator(p, errstr, errstr_size))
        goto out_free;
    if (start_trainers(p, errstr, errstr_size))
        goto out_free;
    /* before the stream: its start-up check would otherwise let resumed trainers train
     * unsampled (launch's train_ex_per_s counts from the last sample that saw none trained) */
    if (conf->serve)
        start_serve(p);
    if (conf->gen_n)
        wait_assigned(p);
    if (conf->gen_n && conf->gen_first) {
        /* the trainers are paused (SIGSTOP) while the stream is produced */
        signal_trainers(p, SIGSTOP);
        int err = start_gen(p, errstr, errstr_size) || wait_gen(p, errstr, errstr_size);
        p->resumed_ms = spw_time_mono_ms();
        signal_trainers(p, SIGCONT);
        if (err)
            goto out_free;
    } else if (start_gen(p, errstr, errstr_size)) {
        goto out_free;
    }
    fflush(stdout);
    return p;

out_free:
    spw_pipeline_destroy(p);
    return NULL;
}

void spw_pipeline_destroy(spw_pipeline_t *p)
{
    if (!p)
        return;
    spw_launch_destroy(p->launch);
    free(p);
}

spw_launch_t *spw_pipeline_launch(spw_pipeline_t *p)
{
    return p->launch;
}

uint64_t spw_pipeline_resumed_ms(const spw_pipeline_t *p)
{
    return p->resumed_ms;
}

int spw_pipeline_trainer_http(const spw_pipeline_t *p, long t)
{
    return p->trainer_http[t];
}

/* 1 when child idx did not exit 0 (and check asks for it to), with a line saying so. */
static int unclean_exit(spw_pipeline_t *p, int idx, int st, bool check)
{
    if (!check || (WIFEXITED(st) && WEXITSTATUS(st) == 0))
        return 0;
    char sts[32];
    fprintf(stderr, "sparrow %s: %s did not stop cleanly (%s); read %s\n", p->conf->prefix,
            spw_launch_name(p->launch, idx), spw_launch_status_str(st, sts, sizeof(sts)),
            spw_launch_log(p->launch, idx));
    return 1;
}

/* Stops the running children among names[0..n) together; returns how many stopped uncleanly. */
static int stop_together(spw_pipeline_t *p, const char *const *names, size_t n, uint64_t grace_ms,
                         bool check)
{
    int idx[SPW_LAUNCH_MAX_PROCS], st[SPW_LAUNCH_MAX_PROCS];
    size_t m = 0;
    for (size_t i = 0; i < n && m < SPW_LAUNCH_MAX_PROCS; i++) {
        int k = spw_launch_find(p->launch, names[i]);
        if (k >= 0 && spw_launch_alive(p->launch, k))
            idx[m++] = k;
    }
    if (m == 0)
        return 0;
    spw_launch_stop_group(p->launch, idx, m, grace_ms, st);
    int unclean = 0;
    for (size_t i = 0; i < m; i++)
        unclean += unclean_exit(p, idx[i], st[i], check);
    return unclean;
}

/* Stops name when it runs; returns 1 when it was checked and did not exit 0 in time. */
static int stop_one(spw_pipeline_t *p, const char *name, uint64_t grace_ms, bool check)
{
    return stop_together(p, &name, 1, grace_ms, check);
}

/* Trainers stop together: one by one, each departure would rebalance the Kafka group under the
 * trainers still closing (each close then waits out the rebalance). */
int spw_pipeline_stop(spw_pipeline_t *p, uint64_t grace_ms, bool check_all)
{
    char names[SPW_LAUNCH_MAX_PROCS][32];
    const char *trainers[SPW_LAUNCH_MAX_PROCS];
    size_t nt = 0;
    for (long t = 0; t < p->conf->trainers && nt < SPW_LAUNCH_MAX_PROCS; t++, nt++) {
        snprintf(names[nt], sizeof(names[nt]), "trainer-%ld", t);
        trainers[nt] = names[nt];
    }
    int unclean = stop_one(p, "gen", grace_ms, true) + stop_one(p, "serve", grace_ms, true);
    unclean += stop_together(p, trainers, nt, grace_ms, true);
    unclean += stop_one(p, "coordinator", grace_ms, check_all);
    for (long i = 0; i < p->conf->shards; i++) {
        char name[32];
        snprintf(name, sizeof(name), "shard-%ld", i);
        unclean += stop_one(p, name, grace_ms, check_all);
    }
    unclean += stop_one(p, "kafka-mock", grace_ms, check_all);
    spw_launch_stop_all(p->launch, grace_ms);
    return unclean;
}

void spw_pipeline_report_death(spw_pipeline_t *p, int idx, int status)
{
    spw_launch_t *l = p->launch;
    char st[32];
    fprintf(stderr, "\nsparrow %s: FAILED: %s died (%s); read %s\n", p->conf->prefix,
            spw_launch_name(l, idx), spw_launch_status_str(status, st, sizeof(st)),
            spw_launch_log(l, idx));
    FILE *f = fopen(spw_launch_log(l, idx), "r");
    if (!f)
        return;
    char lines[10][512];
    int n = 0;
    while (fgets(lines[n % 10], sizeof(lines[0]), f))
        n++;
    fclose(f);
    fprintf(stderr, "---- last lines of %s ----\n", spw_launch_log(l, idx));
    for (int i = n > 10 ? n - 10 : 0; i < n; i++)
        fputs(lines[i % 10], stderr);
}

int spw_pipeline_role_parse(const char *s, size_t len)
{
    static const char *const names[] = {"trainer", "pserver", "coordinator", "gen", "serve", "all"};
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0)
            return i;
    return -1;
}
