/* The property table of `sparrow launch` and its reading, with every check of values, into
 * struct spw_launch_run_conf. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/coordinator.h"
#include "sparrow/pipeline.h"
#include "sparrow/pserver.h"

/* A numeric limit as a string literal, for messages. */
#define STR_(x) #x
#define STR(x)  STR_(x)

/*
 * launch.shards, .trainers and .partitions take any integer the table can hold; their limits (the
 * pipeline's) are checked below, so that the message names the flag and the limit as `sparrow
 * launch` always has ("--shards wants an integer in [1, 16], got '17'"). The lists (slow, delay,
 * kill_at, set) are what the repeatable flags add up to; see cmd/launch.c.
 */
const struct spw_config_prop spw_launch_config_props[] = {
    {"launch.run_dir", SPW_CONFIG_STRING, NULL, 0, 1000, NULL,
     "Run directory (every process's log, samples.csv, chaos.log, checkpoints/); unset: a new "
     "/tmp/sparrow-launch-XXXXXX (--run-dir)."},
    {"launch.shards", SPW_CONFIG_INT, "2", 0, 1e6, NULL,
     "Parameter-server shards shard-<i>, 1 to " STR(SPW_PIPELINE_MAX_SHARDS) " (--shards)."},
    {"launch.trainers", SPW_CONFIG_INT, "2", 0, 1e6, NULL,
     "CPU trainers trainer-<i>, 1 to " STR(SPW_PIPELINE_MAX_TRAINERS) " (--trainers)."},
    {"launch.partitions", SPW_CONFIG_INT, "4", 0, 1e6, NULL,
     "Partitions of the examples topic, 1 to " STR(
         SPW_PIPELINE_MAX_PARTITIONS) "; only that many trainers get partitions (--partitions)."},
    {"launch.mode", SPW_CONFIG_STRING, "async", 1, 64, NULL,
     "Coordinator mode: async, sync, ssp:S, hybrid:K or group:G (--mode)."},
    {"launch.penalty", SPW_CONFIG_STRING, NULL, 0, 64, NULL,
     "pserver.staleness.penalty for every shard (dc:L also sets trainer.push.pulled=true on the "
     "trainers); unset: the shards' default (--penalty)."},
    {"launch.examples", SPW_CONFIG_INT, "0", 0, 1e12, NULL,
     "Examples the generator produces, the run ending once they are drained; 0: an endless "
     "stream for launch.duration (--examples)."},
    {"launch.rate", SPW_CONFIG_DOUBLE, "3000", 1, 1e9, NULL,
     "Examples per second the generator produces (--rate)."},
    {"launch.seed", SPW_CONFIG_INT, "7", 0, 9e18, NULL,
     "Seed of the generator's stream, and of the chaos schedule unless launch.chaos_seed is set "
     "(--seed)."},
    {"launch.drift", SPW_CONFIG_DOUBLE, "0.5", 0, 1000, NULL,
     "Drift of the planted model, radians per million examples (--drift)."},
    {"launch.duration", SPW_CONFIG_DOUBLE, NULL, 1, 604800, NULL,
     "Seconds to run; with launch.examples a timeout for the drain. Unset: 60, or 600 with "
     "launch.examples (--duration)."},
    {"launch.slow", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Comma list of I:FACTOR: trainer I runs FACTOR (>= 1) times slower "
     "(trainer.debug.slow_factor; each --slow adds one)."},
    {"launch.delay", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Comma list of I:MS: trainer I sleeps MS per step (trainer.debug.delay_ms; each --delay "
     "adds one)."},
    {"launch.set", SPW_CONFIG_STRING, "", 0, 16000, NULL,
     "Semicolon list of ROLE:key=value passed as --set key=value to ROLE (trainer, pserver, "
     "coordinator, gen, serve or all), after launch.penalty's and before launch.slow's and "
     "launch.delay's (each --set ROLE:key=value adds one)."},
    {"launch.kill", SPW_CONFIG_STRING, "", 0, 64, NULL,
     "Comma list of roles (trainer, pserver, coordinator) whose processes random kills pick "
     "from; goes with launch.kills (--kill)."},
    {"launch.kills", SPW_CONFIG_INT, "0", 0, 1e6, NULL,
     "Random kill -9s of launch.kill's processes, each restarted (--kills)."},
    {"launch.kill_interval", SPW_CONFIG_STRING, "2000:5000", 1, 64, NULL,
     "MIN_MS:MAX_MS between random kills (--kill-interval)."},
    {"launch.restart_after", SPW_CONFIG_INT, "500", 0, 3600000, NULL,
     "Milliseconds after a kill before the process is restarted with its arguments "
     "(--restart-after)."},
    {"launch.chaos_seed", SPW_CONFIG_INT, NULL, 0, 9e18, NULL,
     "Seed of the random kills; unset: launch.seed (--chaos-seed)."},
    {"launch.kill_at", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Comma list of SECONDS:NAME[:norestart]: kill -9 process NAME at that second (each "
     "--kill-at adds one; at most " STR(SPW_LAUNCH_RUN_MAX_AT) ")."},
    {"launch.serve", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Run `sparrow serve` on the model-update stream too (--serve, --no-serve)."},
    {"launch.checkpoint_interval", SPW_CONFIG_STRING, "10s", 1, 64, NULL,
     "Coordinator checkpoint interval: a duration (10s, 500ms, 2m), 0 for none "
     "(--checkpoint-interval)."},
    {"launch.summary", SPW_CONFIG_STRING, NULL, 0, 1000, NULL,
     "Where summary.json goes; unset: <run_dir>/summary.json (--summary)."},
    {"launch.samples_ms", SPW_CONFIG_INT, "500", 10, 600000, NULL,
     "Milliseconds between samples of every trainer into samples.csv (--samples-ms)."},
    {"launch.backlog", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Pause the trainers while launch.examples are produced, so that they set the pace "
     "(--backlog)."},
    {"launch.quiet", SPW_CONFIG_BOOL, "false", 0, 0, NULL,
     "Print nothing but failures and the summary line (--quiet)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_launch_config_n_props =
    sizeof(spw_launch_config_props) / sizeof(spw_launch_config_props[0]);

/* Fills errstr: "<flag> wants <what>, got '<got>' (<key>)". */
static spw_err_t bad(char *errstr, size_t errstr_size, const char *flag, const char *what,
                     const char *got, size_t got_len, const char *key)
{
    snprintf(errstr, errstr_size, "%s wants %s, got '%.*s' (%s)", flag, what,
             (int)(got_len > 200 ? 200 : got_len), got, key);
    return SPW_ERR_INVALID;
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
    /* a bare number is refused unless it is 0, as in every duration property (config.h) */
    double unit = strcmp(end, "ms") == 0 || (!*end && v == 0) ? 1
                  : strcmp(end, "s") == 0                     ? 1e3
                  : strcmp(end, "m") == 0                     ? 6e4
                  : strcmp(end, "h") == 0                     ? 3.6e6
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
static spw_err_t add_set(struct spw_launch_run_conf *c, enum spw_pipeline_role role, int trainer,
                         const char *key, const char *value, char *errstr, size_t errstr_size)
{
    if (c->n_sets == SPW_PIPELINE_MAX_SETS)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "more than %d --set, --slow, --delay and --penalty", SPW_PIPELINE_MAX_SETS);
    char *kv = c->kv[c->n_sets];
    int len = snprintf(kv, SPW_LAUNCH_RUN_KV_MAX, "%s%s%s", key ? key : "", key ? "=" : "", value);
    if (len < 0 || len >= SPW_LAUNCH_RUN_KV_MAX)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "--set value too long (%s)", value);
    c->sets[c->n_sets++] = (struct spw_pipeline_set){role, trainer, kv};
    return SPW_OK;
}

/* Calls fn on each entry of the sep-separated list of key (entries copied, NUL-terminated). */
static spw_err_t each(const spw_config_t *cfg, const char *key, char sep,
                      struct spw_launch_run_conf *c,
                      spw_err_t (*fn)(struct spw_launch_run_conf *c, const char *entry,
                                      char *errstr, size_t errstr_size),
                      char *errstr, size_t errstr_size)
{
    const char *s = spw_config_str(cfg, key);
    char entry[SPW_LAUNCH_RUN_KV_MAX * 2];
    while (s && *s) {
        size_t n = strcspn(s, (char[]){sep, '\0'});
        if (n >= sizeof(entry))
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "%s: an entry is longer than %zu bytes", key, sizeof(entry) - 1);
        memcpy(entry, s, n);
        entry[n] = '\0';
        spw_err_t err = fn(c, entry, errstr, errstr_size);
        if (err != SPW_OK)
            return err;
        s += n + (s[n] == sep);
    }
    return SPW_OK;
}

static spw_err_t slow_or_delay(struct spw_launch_run_conf *c, const char *v, bool slow,
                               char *errstr, size_t errstr_size)
{
    char head[SPW_LAUNCH_RUN_KV_MAX];
    const char *tail;
    double i, x;
    if (!(tail = split(v, head, sizeof(head))) ||
        !integer(head, 0, SPW_PIPELINE_MAX_TRAINERS - 1, &i) ||
        !(slow ? num(tail, 1, 1000, &x) : integer(tail, 0, 3600000, &x)))
        return bad(errstr, errstr_size, slow ? "--slow" : "--delay",
                   slow ? "I:FACTOR (trainer index, factor >= 1)" : "I:MS", v, strlen(v),
                   slow ? "launch.slow" : "launch.delay");
    return add_set(c, SPW_PIPELINE_TRAINER, (int)i,
                   slow ? "trainer.debug.slow_factor" : "trainer.debug.delay_ms", tail, errstr,
                   errstr_size);
}

static spw_err_t one_slow(struct spw_launch_run_conf *c, const char *v, char *errstr,
                          size_t errstr_size)
{
    return slow_or_delay(c, v, true, errstr, errstr_size);
}

static spw_err_t one_delay(struct spw_launch_run_conf *c, const char *v, char *errstr,
                           size_t errstr_size)
{
    return slow_or_delay(c, v, false, errstr, errstr_size);
}

static spw_err_t one_set(struct spw_launch_run_conf *c, const char *v, char *errstr,
                         size_t errstr_size)
{
    char head[SPW_LAUNCH_RUN_KV_MAX];
    const char *tail;
    int role = -1;
    if ((tail = split(v, head, sizeof(head))))
        role = spw_pipeline_role_parse(head, strlen(head));
    if (role < 0 || !strchr(tail, '=') || *tail == '=')
        return bad(errstr, errstr_size, "--set",
                   "ROLE:key=value (ROLE trainer, pserver, coordinator, gen, serve, all)", v,
                   strlen(v), "launch.set");
    return add_set(c, (enum spw_pipeline_role)role, -1, NULL, tail, errstr, errstr_size);
}

static spw_err_t one_kill_at(struct spw_launch_run_conf *c, const char *v, char *errstr,
                             size_t errstr_size)
{
    if (c->chaos.n_at == SPW_LAUNCH_RUN_MAX_AT)
        return bad(errstr, errstr_size, "--kill-at",
                   "at most " STR(SPW_LAUNCH_RUN_MAX_AT) " scheduled kills", v, strlen(v),
                   "launch.kill_at");
    struct spw_chaos_at *at = &c->at[c->chaos.n_at];
    char head[SPW_LAUNCH_RUN_KV_MAX];
    double x;
    const char *name = split(v, head, sizeof(head));
    size_t n = name ? strcspn(name, ":") : 0;
    if (!name || !num(head, 0, 7 * 86400, &x) || n == 0 || n >= sizeof(at->name) ||
        (name[n] && strcmp(name + n, ":norestart") != 0))
        return bad(errstr, errstr_size, "--kill-at", "SECONDS:NAME[:norestart]", v, strlen(v),
                   "launch.kill_at");
    memcpy(at->name, name, n);
    at->name[n] = '\0';
    at->at_ms = (uint64_t)(x * 1000.0);
    at->norestart = name[n] != '\0';
    c->chaos.n_at++;
    return SPW_OK;
}

/* Whether name is one of the processes c starts. */
static bool known_name(const struct spw_launch_run_conf *c, const char *name)
{
    char *end;
    if (strncmp(name, "trainer-", 8) == 0 || strncmp(name, "shard-", 6) == 0) {
        const char *digits = name + (name[0] == 't' ? 8 : 6);
        long i = strtol(digits, &end, 10);
        return end != digits && !*end && i >= 0 && i < (name[0] == 't' ? c->trainers : c->shards);
    }
    return strcmp(name, "coordinator") == 0 || strcmp(name, "gen") == 0 ||
           strcmp(name, "kafka-mock") == 0 || (c->serve && strcmp(name, "serve") == 0);
}

/* An integer property within [lo, hi], or the flag's message. */
static spw_err_t sized(const spw_config_t *cfg, const char *key, const char *flag, long hi,
                       const char *what, long *out, char *errstr, size_t errstr_size)
{
    int64_t v = spw_config_int(cfg, key);
    if (v < 1 || v > hi) {
        char got[32];
        snprintf(got, sizeof(got), "%lld", (long long)v);
        return bad(errstr, errstr_size, flag, what, got, strlen(got), key);
    }
    *out = (long)v;
    return SPW_OK;
}

static const char *optional(const spw_config_t *cfg, const char *key)
{
    const char *s = spw_config_str(cfg, key);
    return s && *s ? s : NULL;
}

spw_err_t spw_launch_run_conf_from_config(const spw_config_t *cfg, struct spw_launch_run_conf *c,
                                          char *errstr, size_t errstr_size)
{
    memset(c, 0, sizeof(*c));
    c->run_dir = optional(cfg, "launch.run_dir");
    c->summary = optional(cfg, "launch.summary");
    c->examples = (uint64_t)spw_config_int(cfg, "launch.examples");
    c->seed = (uint64_t)spw_config_int(cfg, "launch.seed");
    c->samples_ms = (uint64_t)spw_config_int(cfg, "launch.samples_ms");
    c->rate = spw_config_double(cfg, "launch.rate");
    c->drift = spw_config_double(cfg, "launch.drift");
    c->serve = spw_config_bool(cfg, "launch.serve");
    c->quiet = spw_config_bool(cfg, "launch.quiet");
    c->backlog = spw_config_bool(cfg, "launch.backlog");
    c->chaos.at = c->at;
    c->chaos.kills = (long)spw_config_int(cfg, "launch.kills");
    c->chaos.restart_after_ms = (uint64_t)spw_config_int(cfg, "launch.restart_after");
    c->chaos.seed = spw_config_is_set(cfg, "launch.chaos_seed")
                        ? (uint64_t)spw_config_int(cfg, "launch.chaos_seed")
                        : c->seed;
    c->duration_s = spw_config_is_set(cfg, "launch.duration")
                        ? spw_config_double(cfg, "launch.duration")
                        : (c->examples ? 600 : 60);

    spw_err_t err;
    if ((err = sized(cfg, "launch.shards", "--shards", SPW_PIPELINE_MAX_SHARDS,
                     "an integer in [1, " STR(SPW_PIPELINE_MAX_SHARDS) "]", &c->shards, errstr,
                     errstr_size)) != SPW_OK ||
        (err = sized(cfg, "launch.trainers", "--trainers", SPW_PIPELINE_MAX_TRAINERS,
                     "an integer in [1, " STR(SPW_PIPELINE_MAX_TRAINERS) "]", &c->trainers, errstr,
                     errstr_size)) != SPW_OK ||
        (err = sized(cfg, "launch.partitions", "--partitions", SPW_PIPELINE_MAX_PARTITIONS,
                     "an integer in [1, " STR(SPW_PIPELINE_MAX_PARTITIONS) "]", &c->partitions,
                     errstr, errstr_size)) != SPW_OK)
        return err;

    c->mode = spw_config_str(cfg, "launch.mode");
    struct spw_coord_mode mode;
    if (spw_coord_mode_parse(c->mode, &mode) != SPW_OK)
        return bad(errstr, errstr_size, "--mode", "async, sync, ssp:S, hybrid:K or group:G",
                   c->mode, strlen(c->mode), "launch.mode");
    const char *penalty = optional(cfg, "launch.penalty");
    c->penalty = penalty ? penalty : "default";
    if (penalty) {
        struct spw_ps_penalty pen;
        if (spw_ps_penalty_parse(penalty, &pen) != SPW_OK)
            return bad(errstr, errstr_size, "--penalty",
                       "a pserver.staleness.penalty (sparrow pserver --help)", penalty,
                       strlen(penalty), "launch.penalty");
        if ((err = add_set(c, SPW_PIPELINE_PSERVER, -1, "pserver.staleness.penalty", penalty,
                           errstr, errstr_size)) != SPW_OK)
            return err;
        /* delay compensation needs the values the trainers pulled */
        if (pen.kind == SPW_PS_PENALTY_DC &&
            (err = add_set(c, SPW_PIPELINE_TRAINER, -1, "trainer.push.pulled", "true", errstr,
                           errstr_size)) != SPW_OK)
            return err;
    }
    if ((err = each(cfg, "launch.set", ';', c, one_set, errstr, errstr_size)) != SPW_OK ||
        (err = each(cfg, "launch.slow", ',', c, one_slow, errstr, errstr_size)) != SPW_OK ||
        (err = each(cfg, "launch.delay", ',', c, one_delay, errstr, errstr_size)) != SPW_OK ||
        (err = each(cfg, "launch.kill_at", ',', c, one_kill_at, errstr, errstr_size)) != SPW_OK)
        return err;

    const char *kill = spw_config_str(cfg, "launch.kill");
    for (const char *s = kill; *s;) {
        size_t n = strcspn(s, ",");
        int role = spw_pipeline_role_parse(s, n);
        if (role < 0 || role > SPW_PIPELINE_COORDINATOR)
            return bad(errstr, errstr_size, "--kill",
                       "a comma list of trainer, pserver, coordinator", kill, strlen(kill),
                       "launch.kill");
        c->chaos.roles |= 1u << role;
        s += n + (s[n] == ',');
    }
    char head[SPW_LAUNCH_RUN_KV_MAX];
    const char *interval = spw_config_str(cfg, "launch.kill_interval"), *tail;
    double lo, hi, x;
    if (!(tail = split(interval, head, sizeof(head))) || !integer(head, 0, 864e5, &lo) ||
        !integer(tail, lo, 864e5, &hi))
        return bad(errstr, errstr_size, "--kill-interval", "MIN_MS:MAX_MS", interval,
                   strlen(interval), "launch.kill_interval");
    c->chaos.interval_min_ms = (uint64_t)lo;
    c->chaos.interval_max_ms = (uint64_t)hi;
    c->checkpoint_interval = spw_config_str(cfg, "launch.checkpoint_interval");
    if (!duration(c->checkpoint_interval, &x))
        return bad(errstr, errstr_size, "--checkpoint-interval",
                   "a duration (10s, 500ms, 2m, 0 for none)", c->checkpoint_interval,
                   strlen(c->checkpoint_interval), "launch.checkpoint_interval");
    c->checkpoints = x != 0;

    /* across properties */
    for (size_t i = 0; i < c->n_sets; i++)
        if (c->sets[i].trainer >= c->trainers)
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "--slow/--delay name trainer %d of %ld", c->sets[i].trainer,
                            c->trainers);
    if ((c->chaos.roles != 0) != (c->chaos.kills > 0))
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                        "--kill ROLES and --kills N go together (launch.kill, launch.kills)");
    for (size_t i = 0; i < c->chaos.n_at; i++)
        if (!known_name(c, c->at[i].name))
            return spw_errf(SPW_ERR_INVALID, errstr, errstr_size,
                            "--kill-at: no process called '%s'", c->at[i].name);
    if (c->backlog && !c->examples)
        return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "--backlog needs --examples");
    return SPW_OK;
}
