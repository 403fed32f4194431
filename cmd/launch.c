/* `sparrow launch`: a configurable local cluster on loopback (shards, trainers, coordinator, the
 * generator through the Kafka mock) with fault injection, run to a duration or until drained,
 * writing samples.csv and summary.json. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "command_table.h"
#include "sparrow/coordinator.h"
#include "sparrow/pserver.h"
#include "sparrow/pipeline.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define LAUNCH_GRACE_MS    35000 /* above trainer.shutdown.grace (30 s): a role drains first */
#define LAUNCH_PROGRESS_MS 5000
#define LAUNCH_LATEST_MS   500
/* Without checkpoints: drained once lag is 0 and the examples trained stay put this long. */
#define LAUNCH_STILL_MS 3000
#define LAUNCH_MAX_AT   32
#define LAUNCH_KV_MAX   256
/* A numeric limit as a string literal, for messages. */
#define LAUNCH_STR_(x) #x
#define LAUNCH_STR(x)  LAUNCH_STR_(x)

struct launch_opts {
    const char *run_dir, *summary, *mode, *penalty, *checkpoint_interval;
    long shards, trainers, partitions;
    uint64_t examples, seed, samples_ms;
    double rate, drift, duration_s;
    bool duration_set, serve, quiet, backlog;
    struct spw_pipeline_set sets[SPW_PIPELINE_MAX_SETS];
    char kv[SPW_PIPELINE_MAX_SETS][LAUNCH_KV_MAX];
    size_t n_sets;
    struct spw_chaos_conf chaos;
    bool chaos_seed_set;
    struct spw_chaos_at at[LAUNCH_MAX_AT];
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: sparrow launch [--run-dir DIR] [--shards N] [--trainers M] [--partitions P]\n"
        "         [--mode async|sync|ssp:S|hybrid:K|group:G] [--penalty PENALTY]\n"
        "         [--examples N] [--rate EX_PER_S] [--seed S] [--drift D] [--duration SECONDS]\n"
        "         [--slow I:FACTOR]... [--delay I:MS]... [--set ROLE:key=value]...\n"
        "         [--kill ROLES --kills N [--kill-interval MIN_MS:MAX_MS] [--restart-after MS]\n"
        "          [--chaos-seed S]] [--kill-at SECONDS:NAME[:norestart]]...\n"
        "         [--serve | --no-serve] [--checkpoint-interval DUR] [--summary FILE]\n"
        "         [--samples-ms MS] [--backlog] [--quiet] [--help]\n\n"
        "Runs a local cluster on 127.0.0.1: `sparrow kafka-mock` (topics examples:P, default 4,\n"
        "and model-updates:1; P at most %d), N parameter-server shards shard-<i> (1..%d,\n"
        "default 2; --penalty sets pserver.staleness.penalty, and dc:L trainer.push.pulled=true\n"
        "on the trainers), the coordinator (--mode, default\n"
        "async; checkpoints every --checkpoint-interval, default 10s, under DIR/checkpoints),\n"
        "`sparrow gen` (seed 7, drift 0.5 rad/M, --rate 3000 examples/s) and M CPU trainers\n"
        "trainer-<i> (1..%d, default 2; FM k=4, batch 256, group launch-trainers), optionally\n"
        "`sparrow serve`. Only P trainers get partitions: give --partitions P >= M.\n\n"
        "Without --examples it runs for --duration seconds (default 60). With --examples N the\n"
        "generator produces exactly N examples and the run ends once it is drained: gen done,\n"
        "the chaos schedule complete, every killed process running again, and the coordinator's\n"
        "LATEST manifest counting N examples (without checkpoints: consumer lag 0 and the\n"
        "examples trained unchanged for 3 s); --duration (default 600) is then a timeout.\n"
        "--backlog pauses the trainers (SIGSTOP) while the N examples are produced, so that\n"
        "they, not the generator, set the pace; mind the Kafka mock's retention of about 5 MB\n"
        "(some 9000 examples) per partition (use enough --partitions) and keep the pause under\n"
        "coordinator.member.timeout (5 s; --set coordinator:coordinator.member.timeout=60s).\n\n"
        "--slow I:F and --delay I:MS slow trainer I (0..M-1; trainer.debug.slow_factor, "
        ".delay_ms).\n"
        "--set ROLE:key=value passes --set key=value to ROLE (trainer, pserver, coordinator, gen,\n"
        "serve or all). --kill ROLES (trainer,pserver,coordinator) --kills N: kill -9 a random\n"
        "running process of those roles N times, every MIN..MAX ms (--kill-interval, default\n"
        "2000:5000), each restarted with its arguments after --restart-after ms (default 500).\n"
        "--kill-at 10:trainer-1[:norestart] kills one named process at that second. Each kill\n"
        "and restart is logged to stdout and DIR/chaos.log.\n\n"
        "Every --samples-ms (default 500) DIR/samples.csv gets t_ms,trainer,step,clock,examples,\n"
        "window_logloss per trainer (-1 where a metric is absent). At the end every process is\n"
        "stopped (SIGTERM, SIGKILL after 35 s) and the summary (mode, throughput, window\n"
        "logloss/AUC against the Bayes-optimal per trainer, staleness histogram, and per row\n"
        "class where the shards export sparrow_ps_staleness_class, checkpoint\n"
        "epoch, example count and pause, kills, exit statuses) goes to --summary (default\n"
        "DIR/summary.json).\n"
        "Exits 0 on success, 1 when a process dies unexpectedly (naming its log), does not stop\n"
        "cleanly or the run does not drain in time, 2 on bad arguments.\n",
        SPW_PIPELINE_MAX_PARTITIONS, SPW_PIPELINE_MAX_SHARDS, SPW_PIPELINE_MAX_TRAINERS);
}

static int bad(const char *flag, const char *what, const char *got)
{
    fprintf(stderr, "sparrow launch: %s wants %s, got '%s'\n(sparrow launch --help)\n", flag, what,
            got);
    return 2;
}

/* A number in [lo, hi] that consumes all of s. */
static bool num(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

static bool integer(const char *s, double lo, double hi, double *out)
{
    return num(s, lo, hi, out) && *out == floor(*out) && !strpbrk(s, ".eE");
}

/* A duration as the roles take it: a number with ms, s, m or h, or plain milliseconds. */
static bool duration(const char *s, double *ms)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0))
        return false;
    double unit = strcmp(end, "ms") == 0 || !*end ? 1
                  : strcmp(end, "s") == 0         ? 1e3
                  : strcmp(end, "m") == 0         ? 6e4
                  : strcmp(end, "h") == 0         ? 3.6e6
                                                  : -1;
    *ms = v * unit;
    return unit > 0;
}

/* Splits "A:B" at the first ':' into a (size asize) and returns B, NULL when malformed. */
static const char *split(const char *s, char *a, size_t asize)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= asize)
        return NULL;
    memcpy(a, s, (size_t)(colon - s));
    a[colon - s] = '\0';
    return colon + 1;
}

/* Adds --set key=value (key NULL: value is key=value already) for role (trainer: one trainer). */
static int add_set(struct launch_opts *o, enum spw_pipeline_role role, int trainer, const char *key,
                   const char *value)
{
    if (o->n_sets == SPW_PIPELINE_MAX_SETS) {
        fprintf(stderr, "sparrow launch: more than %d --set, --slow, --delay and --penalty\n",
                SPW_PIPELINE_MAX_SETS);
        return 2;
    }
    char *kv = o->kv[o->n_sets];
    int len = snprintf(kv, LAUNCH_KV_MAX, "%s%s%s", key ? key : "", key ? "=" : "", value);
    if (len < 0 || len >= LAUNCH_KV_MAX) {
        fprintf(stderr, "sparrow launch: --set value too long\n");
        return 2;
    }
    o->sets[o->n_sets++] = (struct spw_pipeline_set){role, trainer, kv};
    return 0;
}

static int parse_flag(struct launch_opts *o, const char *a, const char *v)
{
    double x;
    char head[LAUNCH_KV_MAX];
    const char *tail;
    if (strcmp(a, "--run-dir") == 0) {
        o->run_dir = v;
    } else if (strcmp(a, "--shards") == 0) {
        if (!integer(v, 1, SPW_PIPELINE_MAX_SHARDS, &x))
            return bad(a, "an integer in [1, " LAUNCH_STR(SPW_PIPELINE_MAX_SHARDS) "]", v);
        o->shards = (long)x;
    } else if (strcmp(a, "--trainers") == 0) {
        if (!integer(v, 1, SPW_PIPELINE_MAX_TRAINERS, &x))
            return bad(a, "an integer in [1, " LAUNCH_STR(SPW_PIPELINE_MAX_TRAINERS) "]", v);
        o->trainers = (long)x;
    } else if (strcmp(a, "--partitions") == 0) {
        if (!integer(v, 1, SPW_PIPELINE_MAX_PARTITIONS, &x))
            return bad(a, "an integer in [1, " LAUNCH_STR(SPW_PIPELINE_MAX_PARTITIONS) "]", v);
        o->partitions = (long)x;
    } else if (strcmp(a, "--mode") == 0) {
        struct spw_coord_mode mode;
        if (spw_coord_mode_parse(v, &mode) != SPW_OK)
            return bad(a, "async, sync, ssp:S, hybrid:K or group:G", v);
        o->mode = v;
    } else if (strcmp(a, "--penalty") == 0) {
        struct spw_ps_penalty penalty;
        if (spw_ps_penalty_parse(v, &penalty) != SPW_OK)
            return bad(a, "a pserver.staleness.penalty (sparrow pserver --help)", v);
        bool dc = penalty.kind == SPW_PS_PENALTY_DC;
        o->penalty = v;
        int rc = add_set(o, SPW_PIPELINE_PSERVER, -1, "pserver.staleness.penalty", v);
        /* delay compensation needs the values the trainers pulled */
        if (rc == 0 && dc)
            rc = add_set(o, SPW_PIPELINE_TRAINER, -1, "trainer.push.pulled", "true");
        return rc;
    } else if (strcmp(a, "--examples") == 0) {
        if (!integer(v, 1, 1e12, &x))
            return bad(a, "an integer in [1, 1e12]", v);
        o->examples = (uint64_t)x;
    } else if (strcmp(a, "--rate") == 0) {
        if (!num(v, 1, 1e9, &o->rate))
            return bad(a, "a number in [1, 1e9]", v);
    } else if (strcmp(a, "--seed") == 0) {
        if (!integer(v, 0, 9e18, &x))
            return bad(a, "a non-negative integer", v);
        o->seed = (uint64_t)x;
    } else if (strcmp(a, "--drift") == 0) {
        if (!num(v, 0, 1000, &o->drift))
            return bad(a, "a number in [0, 1000]", v);
    } else if (strcmp(a, "--duration") == 0) {
        if (!num(v, 1, 7 * 86400, &o->duration_s))
            return bad(a, "seconds in [1, 604800]", v);
        o->duration_set = true;
    } else if (strcmp(a, "--slow") == 0 || strcmp(a, "--delay") == 0) {
        bool slow = a[2] == 's';
        double i;
        if (!(tail = split(v, head, sizeof(head))) ||
            !integer(head, 0, SPW_PIPELINE_MAX_TRAINERS - 1, &i) ||
            !(slow ? num(tail, 1, 1000, &x) : integer(tail, 0, 3600000, &x)))
            return bad(a, slow ? "I:FACTOR (trainer index, factor >= 1)" : "I:MS", v);
        return add_set(o, SPW_PIPELINE_TRAINER, (int)i,
                       slow ? "trainer.debug.slow_factor" : "trainer.debug.delay_ms", tail);
    } else if (strcmp(a, "--set") == 0) {
        int role = -1;
        if ((tail = split(v, head, sizeof(head))))
            role = spw_pipeline_role_parse(head, strlen(head));
        if (role < 0 || !strchr(tail, '=') || *tail == '=')
            return bad(a, "ROLE:key=value (ROLE trainer, pserver, coordinator, gen, serve, all)",
                       v);
        return add_set(o, (enum spw_pipeline_role)role, -1, NULL, tail);
    } else if (strcmp(a, "--kill") == 0) {
        o->chaos.roles = 0;
        const char *s = v;
        while (*s) {
            size_t n = strcspn(s, ",");
            int role = spw_pipeline_role_parse(s, n);
            if (role < 0 || role > SPW_PIPELINE_COORDINATOR)
                return bad(a, "a comma list of trainer, pserver, coordinator", v);
            o->chaos.roles |= 1u << role;
            s += n + (s[n] == ',');
        }
        if (!o->chaos.roles)
            return bad(a, "a comma list of trainer, pserver, coordinator", v);
    } else if (strcmp(a, "--kills") == 0) {
        if (!integer(v, 1, 1e6, &x))
            return bad(a, "an integer >= 1", v);
        o->chaos.kills = (long)x;
    } else if (strcmp(a, "--kill-interval") == 0) {
        double hi;
        if (!(tail = split(v, head, sizeof(head))) || !integer(head, 0, 864e5, &x) ||
            !integer(tail, x, 864e5, &hi))
            return bad(a, "MIN_MS:MAX_MS", v);
        o->chaos.interval_min_ms = (uint64_t)x;
        o->chaos.interval_max_ms = (uint64_t)hi;
    } else if (strcmp(a, "--restart-after") == 0) {
        if (!integer(v, 0, 36e5, &x))
            return bad(a, "milliseconds", v);
        o->chaos.restart_after_ms = (uint64_t)x;
    } else if (strcmp(a, "--chaos-seed") == 0) {
        if (!integer(v, 0, 9e18, &x))
            return bad(a, "a non-negative integer", v);
        o->chaos.seed = (uint64_t)x;
        o->chaos_seed_set = true;
    } else if (strcmp(a, "--kill-at") == 0) {
        if (o->chaos.n_at == LAUNCH_MAX_AT)
            return bad(a, "at most 32 scheduled kills", v);
        struct spw_chaos_at *at = &o->at[o->chaos.n_at];
        const char *name = split(v, head, sizeof(head));
        if (!name || !num(head, 0, 7 * 86400, &x))
            return bad(a, "SECONDS:NAME[:norestart]", v);
        size_t n = strcspn(name, ":");
        if (n == 0 || n >= sizeof(at->name) || (name[n] && strcmp(name + n, ":norestart") != 0))
            return bad(a, "SECONDS:NAME[:norestart]", v);
        memcpy(at->name, name, n);
        at->name[n] = '\0';
        at->at_ms = (uint64_t)(x * 1000.0);
        at->norestart = name[n] != '\0';
        o->chaos.n_at++;
    } else if (strcmp(a, "--checkpoint-interval") == 0) {
        if (!duration(v, &x))
            return bad(a, "a duration (10s, 500ms, 2m, 0 for none)", v);
        o->checkpoint_interval = v;
    } else if (strcmp(a, "--summary") == 0) {
        o->summary = v;
    } else if (strcmp(a, "--samples-ms") == 0) {
        if (!integer(v, 10, 600000, &x))
            return bad(a, "milliseconds in [10, 600000]", v);
        o->samples_ms = (uint64_t)x;
    } else {
        fprintf(stderr, "sparrow launch: unknown argument '%s'\n(sparrow launch --help)\n", a);
        return 2;
    }
    return 0;
}

/* Whether name is one of the processes the options start. */
static bool known_name(const struct launch_opts *o, const char *name)
{
    char *end;
    if (strncmp(name, "trainer-", 8) == 0 || strncmp(name, "shard-", 6) == 0) {
        const char *digits = name + (name[0] == 't' ? 8 : 6);
        long i = strtol(digits, &end, 10);
        return end != digits && !*end && i >= 0 && i < (name[0] == 't' ? o->trainers : o->shards);
    }
    return strcmp(name, "coordinator") == 0 || strcmp(name, "gen") == 0 ||
           strcmp(name, "kafka-mock") == 0 || (o->serve && strcmp(name, "serve") == 0);
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct launch_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--serve") == 0 || strcmp(a, "--no-serve") == 0) {
            o->serve = a[2] == 's';
        } else if (strcmp(a, "--quiet") == 0) {
            o->quiet = true;
        } else if (strcmp(a, "--backlog") == 0) {
            o->backlog = true;
        } else if (i + 1 >= argc || strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "sparrow launch: unknown or incomplete argument '%s'\n", a);
            return 2;
        } else if ((rc = parse_flag(o, a, argv[++i])) != 0) {
            return rc;
        }
    }
    for (size_t i = 0; i < o->n_sets; i++)
        if (o->sets[i].trainer >= o->trainers) {
            fprintf(stderr, "sparrow launch: --slow/--delay name trainer %d of %ld\n",
                    o->sets[i].trainer, o->trainers);
            return 2;
        }
    if ((o->chaos.roles != 0) != (o->chaos.kills > 0)) {
        fprintf(stderr, "sparrow launch: --kill ROLES and --kills N go together\n");
        return 2;
    }
    for (size_t i = 0; i < o->chaos.n_at; i++)
        if (!known_name(o, o->at[i].name)) {
            fprintf(stderr, "sparrow launch: --kill-at: no process called '%s'\n", o->at[i].name);
            return 2;
        }
    if (o->backlog && !o->examples) {
        fprintf(stderr, "sparrow launch: --backlog needs --examples\n");
        return 2;
    }
    if (!o->chaos_seed_set)
        o->chaos.seed = o->seed;
    if (!o->duration_set)
        o->duration_s = o->examples ? 600 : 60;
    return -1;
}

/* Per trainer: the examples counted by earlier incarnations (a restart resets the counter). */
struct tally {
    double base[SPW_PIPELINE_MAX_TRAINERS], last[SPW_PIPELINE_MAX_TRAINERS];
    double total;         /* latest sum */
    uint64_t still_since; /* when total last changed, ms since start */
    uint64_t first_ms;    /* first sample with examples trained; 0: none yet */
    double first_total;   /* the total then */
    uint64_t reach_ms;    /* first sample where total >= the examples produced; 0: none */
    bool lag_zero;        /* every trainer that answered reports lag 0 */
    /* coord_wait_s at the first sample that read it (the waits before the run started) */
    double wait0[SPW_PIPELINE_MAX_TRAINERS];
    bool wait0_set[SPW_PIPELINE_MAX_TRAINERS];
};

/* Samples every trainer: a samples.csv line each, and the tally. */
static void sample(spw_pipeline_t *p, const struct launch_opts *o, FILE *csv, uint64_t now_ms,
                   struct tally *ty)
{
    double total = 0;
    bool lag_zero = true;
    for (long t = 0; t < o->trainers; t++) {
        struct spw_pipeline_trainer tr;
        spw_pipeline_scrape_trainer(p, t, &tr);
        if (isfinite(tr.examples)) {
            if (tr.examples < ty->last[t])
                ty->base[t] += ty->last[t];
            ty->last[t] = tr.examples;
        }
        if (tr.up && !(tr.lag == 0))
            lag_zero = false;
        if (!ty->wait0_set[t] && isfinite(tr.coord_wait_s)) {
            ty->wait0[t] = tr.coord_wait_s;
            ty->wait0_set[t] = true;
        }
        total += ty->base[t] + ty->last[t];
        if (csv)
            fprintf(csv, "%llu,%ld,%.0f,%.0f,%.0f,%.6g\n", (unsigned long long)now_ms, t,
                    isfinite(tr.step) ? tr.step : -1, isfinite(tr.clock) ? tr.clock : -1,
                    isfinite(tr.examples) ? tr.examples : -1,
                    isfinite(tr.logloss) ? tr.logloss : -1);
    }
    if (csv)
        fflush(csv);
    if (total != ty->total)
        ty->still_since = now_ms;
    if (ty->first_ms == 0 && total > 0) {
        ty->first_ms = now_ms > 0 ? now_ms : 1;
        ty->first_total = total;
    }
    if (ty->reach_ms == 0 && o->examples && total >= (double)o->examples)
        ty->reach_ms = now_ms > 0 ? now_ms : 1;
    ty->total = total;
    ty->lag_zero = lag_zero;
}

struct run_state {
    bool failed, drained, timed_out, gen_done, interrupted, overcounted;
    double manifest_examples;
    long epoch;
};

/* Handles a process that exited by itself; false when it is a failure (reported). */
static bool on_exit_seen(spw_pipeline_t *p, const struct launch_opts *o, int idx, int status,
                         struct run_state *st)
{
    const char *name = spw_launch_name(spw_pipeline_launch(p), idx);
    if (strcmp(name, "gen") == 0 && o->examples && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        st->gen_done = true;
        if (!o->quiet)
            printf("launch: gen produced its %llu examples\n", (unsigned long long)o->examples);
        return true;
    }
    spw_pipeline_report_death(p, idx, status);
    return false;
}

/* True when the run with --examples is drained (see usage). */
static bool drained(spw_pipeline_t *p, const struct launch_opts *o, const spw_chaos_t *chaos,
                    const struct tally *ty, uint64_t now_ms, bool checkpoints, struct run_state *st)
{
    if (!st->gen_done || !spw_chaos_done(chaos))
        return false;
    if (!checkpoints)
        return ty->lag_zero && ty->total > 0 && now_ms - ty->still_since >= LAUNCH_STILL_MS;
    uint64_t epoch, examples;
    if (spw_pipeline_latest(p, &epoch, &examples) != SPW_OK)
        return false;
    st->epoch = (long)epoch;
    st->manifest_examples = (double)examples;
    if (examples > o->examples && !st->overcounted) {
        st->overcounted = true;
        fprintf(stderr,
                "sparrow launch: FAILED: checkpoint epoch %llu counts %llu examples, more than the "
                "%llu produced (examples trained twice); it cannot drain\n",
                (unsigned long long)epoch, (unsigned long long)examples,
                (unsigned long long)o->examples);
    }
    return examples == o->examples;
}

/* Fills r after the run: the final scrape, the trainers' "finished" lines, the generator's count.
 */
static void collect(spw_pipeline_t *p, const struct launch_opts *o, const struct tally *ty,
                    struct spw_pipeline_result *r)
{
    spw_launch_t *l = spw_pipeline_launch(p);
    r->examples_trained = 0;
    for (long t = 0; t < o->trainers; t++) {
        char name[32];
        snprintf(name, sizeof(name), "trainer-%ld", t);
        const char *log = spw_launch_log(l, spw_launch_find(l, name));
        struct spw_pipeline_trainer *tr = &r->snap.trainer[t];
        double last = ty->last[t];
        double fin = spw_pipeline_log_value(log, " finished ", "examples");
        if (isfinite(fin) && fin >= last)
            last = fin;
        double v;
        if (isfinite(v = spw_pipeline_log_value(log, " finished ", "window_logloss")) && v > 0)
            tr->logloss = v;
        if (isfinite(v = spw_pipeline_log_value(log, " finished ", "window_auc")) && v > 0)
            tr->auc = v;
        if (isfinite(v = spw_pipeline_log_value(log, " finished ", "bayes_logloss")) && v > 0)
            tr->bayes_logloss = v;
        r->trainer_examples[t] = ty->base[t] + last;
        /* a restarted trainer's counter starts again: its difference means nothing */
        r->trainer_run_wait_s[t] =
            ty->wait0_set[t] && ty->base[t] == 0 && tr->coord_wait_s >= ty->wait0[t]
                ? tr->coord_wait_s - ty->wait0[t]
                : NAN;
        r->trainer_ex_per_s[t] = r->duration_s > 0 ? r->trainer_examples[t] / r->duration_s : NAN;
        r->examples_trained += r->trainer_examples[t];
    }
    double sums[4] = {0};
    int counts[4] = {0};
    for (long t = 0; t < o->trainers; t++) {
        const struct spw_pipeline_trainer *tr = &r->snap.trainer[t];
        double vals[4] = {tr->logloss, tr->auc, tr->bayes_logloss, tr->bayes_auc};
        for (int k = 0; k < 4; k++)
            if (isfinite(vals[k]))
                sums[k] += vals[k], counts[k]++;
    }
    double *dst[4] = {&r->snap.logloss, &r->snap.auc, &r->snap.bayes_logloss, &r->snap.bayes_auc};
    for (int k = 0; k < 4; k++)
        *dst[k] = counts[k] ? sums[k] / counts[k] : NAN;
    r->ex_per_s = r->duration_s > 0 ? r->examples_trained / r->duration_s : NAN;
    /* with --examples: the examples trained between the first sample that saw any and the first
     * that saw N, over that time; without: the rate over the run */
    r->train_ex_per_s = r->ex_per_s;
    if (o->examples)
        r->train_ex_per_s = ty->reach_ms > ty->first_ms
                                ? ((double)o->examples - ty->first_total) * 1000.0 /
                                      (double)(ty->reach_ms - ty->first_ms)
                                : NAN;
    const char *gen_log = spw_launch_log(l, spw_launch_find(l, "gen"));
    r->examples_produced = spw_pipeline_log_value(gen_log, "gen done", "examples");
    uint64_t epoch, examples;
    if (spw_pipeline_latest(p, &epoch, &examples) == SPW_OK) {
        r->latest_epoch = (long)epoch;
        r->manifest_examples = (double)examples;
    }
}

static void print_summary(const struct launch_opts *o, const struct spw_pipeline_result *r,
                          const char *summary_path)
{
    printf("launch summary: %s mode=%s penalty=%s trainers=%ld shards=%ld %.1fs produced=%.0f "
           "trained=%.0f ex/s=%.0f train_ex/s=%.0f logloss=%.4f (bayes %.4f) auc=%.4f "
           "(bayes %.4f) tau p50/p99=%g/%g ckpt epoch=%ld examples=%.0f pause p50/p99=%g/%g "
           "kills=%ld restarts=%ld -> %s\n",
           r->ok ? "ok" : "FAILED", o->mode, o->penalty, o->trainers, o->shards, r->duration_s,
           r->examples_produced, r->examples_trained, r->ex_per_s, r->train_ex_per_s,
           r->snap.logloss, r->snap.bayes_logloss, r->snap.auc, r->snap.bayes_auc,
           spw_pipeline_hist_quantile(&r->snap.tau, 0.5),
           spw_pipeline_hist_quantile(&r->snap.tau, 0.99), r->latest_epoch, r->manifest_examples,
           spw_pipeline_hist_quantile(&r->snap.pause, 0.5),
           spw_pipeline_hist_quantile(&r->snap.pause, 0.99), r->kills, r->restarts, summary_path);
}

/* The main loop: until the duration, the drain, a death or a signal. */
static void run(spw_pipeline_t *p, const struct launch_opts *o, spw_chaos_t *chaos, FILE *csv,
                struct tally *ty, struct run_state *st, uint64_t t0)
{
    bool checkpoints = true;
    double ckpt_ms = 0;
    if (duration(o->checkpoint_interval, &ckpt_ms) && ckpt_ms == 0)
        checkpoints = false;
    uint64_t next_sample = 0, next_progress = LAUNCH_PROGRESS_MS, next_latest = 0;
    char errstr[512];
    for (;;) {
        uint64_t now = spw_time_mono_ms() - t0;
        if (spw_signal_stop_requested()) {
            st->interrupted = true;
            return;
        }
        int status = 0, dead;
        while ((dead = spw_launch_check(spw_pipeline_launch(p), &status)) >= 0)
            if (!on_exit_seen(p, o, dead, status, st)) {
                st->failed = true;
                return;
            }
        if (spw_chaos_step(chaos, p, now, errstr, sizeof(errstr)) != SPW_OK) {
            fprintf(stderr, "sparrow launch: FAILED: %s\n", errstr);
            st->failed = true;
            return;
        }
        if (now >= next_sample) {
            next_sample = now + o->samples_ms;
            sample(p, o, csv, now, ty);
        }
        if (!o->quiet && now >= next_progress) {
            next_progress = now + LAUNCH_PROGRESS_MS;
            struct spw_pipeline_snapshot snap;
            char line[512];
            spw_pipeline_scrape(p, &snap);
            spw_pipeline_format_line(&snap, (double)now / 1000.0, line, sizeof(line));
            printf("%s\n", line);
            fflush(stdout);
        }
        if (o->examples && now >= next_latest) {
            next_latest = now + LAUNCH_LATEST_MS;
            if (drained(p, o, chaos, ty, now, checkpoints, st)) {
                st->drained = true;
                return;
            }
            if (st->overcounted) {
                st->failed = true;
                return;
            }
        }
        if ((double)now >= o->duration_s * 1000.0) {
            st->timed_out = o->examples > 0;
            return;
        }
        spw_time_sleep_ms(20);
    }
}

int spw_launch_main(int argc, char **argv)
{
    static struct launch_opts o = {
        .shards = 2,
        .trainers = 2,
        .partitions = 4,
        .mode = "async",
        .penalty = "default",
        .checkpoint_interval = "10s",
        .seed = 7,
        .rate = 3000,
        .drift = 0.5,
        .samples_ms = 500,
        .chaos = {.interval_min_ms = 2000, .interval_max_ms = 5000, .restart_after_ms = 500},
    };
    int early = parse_args(argc, argv, &o);
    if (early >= 0)
        return early;
    o.chaos.at = o.at;
    char run_dir[1024], summary[1200], path[1200];
    if (o.run_dir) {
        snprintf(run_dir, sizeof(run_dir), "%s", o.run_dir);
    } else {
        snprintf(run_dir, sizeof(run_dir), "/tmp/sparrow-launch-XXXXXX");
        if (!mkdtemp(run_dir)) {
            perror("sparrow launch: mkdtemp");
            return 1;
        }
    }
    snprintf(summary, sizeof(summary), "%s", o.summary ? o.summary : "");
    if (!o.summary)
        snprintf(summary, sizeof(summary), "%s/summary.json", run_dir);
    struct spw_pipeline_conf conf = {
        .run_dir = run_dir,
        .prefix = "launch",
        .quiet = o.quiet,
        .shards = o.shards,
        .trainers = o.trainers,
        .partitions = o.partitions,
        .mode = o.mode,
        .group = "launch-trainers",
        .gen_n = o.examples,
        .seed = o.seed,
        .drift = o.drift,
        .rate = o.rate,
        .serve = o.serve,
        .gen_first = o.backlog,
        .checkpoint_interval = o.checkpoint_interval,
        .sets = o.sets,
        .n_sets = o.n_sets,
    };
    if (!o.quiet)
        printf("launch: run directory %s (every process's log is there)\n", run_dir);
    spw_signal_install();
    char errstr[512];
    spw_pipeline_t *p = spw_pipeline_start(&conf, errstr, sizeof(errstr));
    if (!p) {
        fprintf(stderr, "sparrow launch: %s\nsparrow launch: failed; logs under %s\n", errstr,
                run_dir);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/chaos.log", run_dir);
    spw_chaos_t *chaos = spw_chaos_new(&o.chaos, path, o.quiet);
    snprintf(path, sizeof(path), "%s/samples.csv", run_dir);
    FILE *csv = fopen(path, "w");
    if (!chaos || !csv) {
        fprintf(stderr, "sparrow launch: cannot write %s\n", path);
        if (csv)
            fclose(csv);
        spw_chaos_destroy(chaos);
        spw_pipeline_destroy(p);
        return 1;
    }
    fputs("t_ms,trainer,step,clock,examples,window_logloss\n", csv);
    if (!o.quiet) {
        if (o.examples)
            printf("launch: mode %s, until %llu examples are trained (timeout %.0f s)\n", o.mode,
                   (unsigned long long)o.examples, o.duration_s);
        else
            printf("launch: mode %s, running for %.0f s\n", o.mode, o.duration_s);
        fflush(stdout);
    }

    struct tally ty = {0};
    struct run_state st = {.manifest_examples = NAN, .epoch = -1};
    uint64_t t0 = spw_time_mono_ms();
    run(p, &o, chaos, csv, &ty, &st, t0);
    struct spw_pipeline_result r = {
        .mode = o.mode,
        .penalty = o.penalty,
        .drained = st.drained,
        .duration_s = (double)(spw_time_mono_ms() - t0) / 1000.0,
        .latest_epoch = -1,
        .manifest_examples = NAN,
    };
    sample(p, &o, csv, spw_time_mono_ms() - t0, &ty);
    spw_pipeline_scrape(p, &r.snap);
    fclose(csv);
    if (st.timed_out)
        fprintf(stderr,
                "sparrow launch: FAILED: not drained after %.0f s (gen done: %s, chaos done: %s, "
                "latest manifest example_count %.0f of %llu, trained %.0f); logs under %s\n",
                o.duration_s, st.gen_done ? "yes" : "no", spw_chaos_done(chaos) ? "yes" : "no",
                st.manifest_examples, (unsigned long long)o.examples, ty.total, run_dir);
    if (st.interrupted)
        fprintf(stderr, "sparrow launch: interrupted\n");
    if (!o.quiet) {
        printf("launch: stopping (SIGTERM, SIGKILL after %d s)\n", LAUNCH_GRACE_MS / 1000);
        fflush(stdout);
    }
    int unclean = spw_pipeline_stop(p, LAUNCH_GRACE_MS, true);
    collect(p, &o, &ty, &r);
    r.kills = spw_chaos_kills(chaos);
    r.restarts = spw_chaos_restarts(chaos);
    r.ok = !st.failed && !st.timed_out && !st.interrupted && unclean == 0;
    if (spw_pipeline_summary_write(p, &r, summary) != SPW_OK) {
        fprintf(stderr, "sparrow launch: cannot write %s\n", summary);
        r.ok = false;
    }
    print_summary(&o, &r, summary);
    if (!r.ok)
        fprintf(stderr, "sparrow launch: failed; logs under %s\n", run_dir);
    spw_chaos_destroy(chaos);
    spw_pipeline_destroy(p);
    return r.ok ? 0 : 1;
}
