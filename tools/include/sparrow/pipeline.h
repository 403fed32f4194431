/* The local pipeline behind `sparrow demo` and `sparrow launch`: starting every role on loopback,
 * scraping their /metrics, fault injection and the run's summary. */
#ifndef SPARROW_PIPELINE_H
#define SPARROW_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/config.h"
#include "sparrow/launch.h"

/*
 * Conventions: pointers are non-NULL unless a comment says otherwise; strings passed in are
 * borrowed for the call (or, for a conf, for the pipeline's life); a handle belongs to one thread.
 */

/* The scaling study runs up to 32 trainers; 64 leaves room. Every process of a pipeline (these,
 * kafka-mock, gen, the coordinator and serve) is a child of one launcher: see the check below. */
#define SPW_PIPELINE_MAX_TRAINERS   64
#define SPW_PIPELINE_MAX_SHARDS     16
#define SPW_PIPELINE_MAX_PARTITIONS 64
/* Processes of a pipeline besides its trainers and shards: kafka-mock, gen, coordinator, serve. */
#define SPW_PIPELINE_OTHER_PROCS 4
_Static_assert(SPW_PIPELINE_MAX_TRAINERS + SPW_PIPELINE_MAX_SHARDS + SPW_PIPELINE_OTHER_PROCS <=
                   SPW_LAUNCH_MAX_PROCS,
               "a pipeline of the largest size must fit in one launcher");
/* --set values given per role (all roles together). */
#define SPW_PIPELINE_MAX_SETS 32
/* Buckets kept of a histogram summed over processes. */
#define SPW_PIPELINE_MAX_BUCKETS 64

/* The roles a --set can address. */
enum spw_pipeline_role {
    SPW_PIPELINE_TRAINER,
    SPW_PIPELINE_PSERVER,
    SPW_PIPELINE_COORDINATOR,
    SPW_PIPELINE_GEN,
    SPW_PIPELINE_SERVE,
    SPW_PIPELINE_ALL,
};

/* Parses "trainer", "pserver", "coordinator", "gen", "serve" or "all"; -1 when none. */
int spw_pipeline_role_parse(const char *s, size_t len);

/* One `--set key=value` for a role; trainer >= 0 narrows a trainer set to trainer `trainer`. */
struct spw_pipeline_set {
    enum spw_pipeline_role role;
    int trainer;
    const char *kv; /* key=value, borrowed */
};

struct spw_pipeline_conf {
    const char *run_dir; /* created when missing */
    const char *prefix;  /* printed before each line: "demo", "launch" */
    bool quiet;          /* print nothing but failures */
    long shards, trainers, partitions;
    const char *mode;  /* coordinator --mode */
    const char *group; /* the trainers' consumer group */
    uint64_t gen_n;    /* examples to produce; 0: endless */
    uint64_t seed;
    double drift, rate;
    bool serve;
    bool gen_first; /* gen_n > 0: produce the whole stream while the trainers are paused */
    const char *checkpoint_interval; /* coordinator.checkpoint.interval */
    const struct spw_pipeline_set *sets;
    size_t n_sets;
};

typedef struct spw_pipeline spw_pipeline_t;

/*
 * Starts kafka-mock (topics examples:<partitions> and model-updates:1), shards shard-<i>, the
 * coordinator, trainers trainer-<i> (--id i+1), gen (a finite stream once the trainers' group is
 * stable) and, with conf->serve, serve, each logging to
 * <run_dir>/<name>.log, on free ports of 127.0.0.1. Prints one line per component unless quiet.
 * conf (and the strings it points to) must outlive the pipeline. NULL with errstr (naming the log
 * to read) on failure, every started process stopped.
 */
spw_pipeline_t *spw_pipeline_start(const struct spw_pipeline_conf *conf, char *errstr,
                                   size_t errstr_size);

/* Stops every running process (SIGKILL after 5 s) and frees. NULL: no-op. */
void spw_pipeline_destroy(spw_pipeline_t *p);

/* The launcher that owns the processes (owned by p). */
spw_launch_t *spw_pipeline_launch(spw_pipeline_t *p);

/* With conf->gen_first: when (spw_time_mono_ms) the trainers, paused while the stream was
 * produced, were sent SIGCONT, so that no example was trained before; 0 otherwise. */
uint64_t spw_pipeline_resumed_ms(const spw_pipeline_t *p);

/* The HTTP (/metrics) port of trainer t. */
int spw_pipeline_trainer_http(const spw_pipeline_t *p, long t);

/*
 * Clean stop, producer first: gen, serve, trainers, coordinator, shards, kafka-mock, each SIGTERM
 * then SIGKILL after grace_ms. A process that was running and did not exit 0 is reported on stderr
 * (naming its log) when it is gen, serve or a trainer, or any process with check_all. Returns how
 * many were reported.
 */
int spw_pipeline_stop(spw_pipeline_t *p, uint64_t grace_ms, bool check_all);

/* Records of the examples topic the trainers lost to the Kafka mock's retention: the lost= of
 * their "kafka offsets lost to retention" lines and, for a backlog (gen_first), what the mock's
 * retention watch saw deleted of the topic before it was read. From the logs; any thread. */
uint64_t spw_pipeline_lost_records(spw_pipeline_t *p);

/* Prints "<prefix>: FAILED: <name> died (<status>); read <log>" and the log's last lines. */
void spw_pipeline_report_death(spw_pipeline_t *p, int idx, int status);

/* ---- scraping /metrics ---- */

/* GET http://127.0.0.1:port/metrics (1 s timeouts): a malloc'd NUL-terminated page the caller
 * frees; NULL when unreachable or not 200. */
char *spw_pipeline_metrics_get(int port);

/* One HTTP/1.0 request to 127.0.0.1:port (1 s timeouts): method and path, body (NULL: none) sent
 * as application/json. Returns the response body (malloc'd, NUL-terminated, the caller frees) and
 * sets *status to the HTTP status; NULL (and *status 0) when unreachable or malformed. */
char *spw_pipeline_http(int port, const char *method, const char *path, const char *body,
                        int *status);

/* serve's HTTP port (/v1/predict, /metrics); 0 when serve does not run. */
int spw_pipeline_serve_port(const spw_pipeline_t *p);

/* Sum of the samples of metric name (any labels) in page; NAN when absent or not finite. */
double spw_pipeline_metric_sum(const char *page, const char *name);

/* Cumulative histogram buckets, summed over processes by their upper bound, and the sum of the
 * observations (the histogram's _sum, summed over processes). */
struct spw_pipeline_hist {
    double le[SPW_PIPELINE_MAX_BUCKETS], count[SPW_PIPELINE_MAX_BUCKETS];
    size_t n;
    double sum;
};

/* Adds the buckets and the _sum of histogram name in page to h. */
void spw_pipeline_hist_add(struct spw_pipeline_hist *h, const char *page, const char *name);

/* Histograms of one name split by the value of one label (the shards'
 * sparrow_ps_staleness_class{class="bias|top|rest"}), each summed over processes. */
#define SPW_PIPELINE_MAX_LABEL_VALUES 8
struct spw_pipeline_hist_by {
    char value[SPW_PIPELINE_MAX_LABEL_VALUES][32];
    struct spw_pipeline_hist h[SPW_PIPELINE_MAX_LABEL_VALUES];
    size_t n;
};

/* Adds the buckets and the _sum of histogram name in page to hb, per value of label (a series
 * without that label is skipped; values beyond SPW_PIPELINE_MAX_LABEL_VALUES are dropped). */
void spw_pipeline_hist_add_by(struct spw_pipeline_hist_by *hb, const char *page, const char *name,
                              const char *label);

/* The upper bound of the first bucket holding quantile q; NAN when h is empty. */
double spw_pipeline_hist_quantile(const struct spw_pipeline_hist *h, double q);

/* *out = now - before, bucket by bucket: the observations of a cumulative histogram between two
 * scrapes (where before lacks a bound, its count at the largest bound below; a process that
 * restarted between them can make a count negative, clamped to 0). out may be now. */
void spw_pipeline_hist_since(struct spw_pipeline_hist *out, const struct spw_pipeline_hist *now,
                             const struct spw_pipeline_hist *before);

/* The total count of h (its +Inf bucket); 0 when empty. */
double spw_pipeline_hist_total(const struct spw_pipeline_hist *h);

/* The mean observation of h (sum over count); NAN when empty. */
double spw_pipeline_hist_mean(const struct spw_pipeline_hist *h);

/* One trainer as its /metrics shows it; NAN where unknown. */
struct spw_pipeline_trainer {
    bool up; /* the page was read */
    double examples, ex_per_s, logloss, auc, bayes_logloss, bayes_auc;
    double const_logloss; /* of the window's mean click rate, the constant predictor */
    double step, clock, lag, bytes_saved;
    double coord_wait_s; /* sum of sparrow_trainer_coord_wait_seconds: waits for the coordinator */
};

/* What one scrape of every role found. NAN where unknown. */
struct spw_pipeline_snapshot {
    double examples;     /* trained, all trainers */
    double ex_per_s;     /* sum of the trainers' rates */
    double logloss, auc; /* window, mean over trainers that report one */
    double bayes_logloss, bayes_auc;
    double const_logloss; /* the constant predictor on the same windows */
    /* serve's event time -> visible in serving (stage event_to_visible): fresh holds every
     * update since serve started, fresh_p50/p99 (seconds) its quantiles, or those of a window
     * once spw_pipeline_fresh_since narrowed them; NAN without serve or without updates */
    struct spw_pipeline_hist fresh;
    double fresh_p50, fresh_p99;
    double bytes_saved; /* push bytes saved by top-k compression, estimated */
    double lag;         /* consumer lag, all trainers */
    double tau_p50, tau_p99;
    long epoch; /* last completed checkpoint epoch (coordinator's log), -1 none */
    struct spw_pipeline_trainer trainer[SPW_PIPELINE_MAX_TRAINERS];
    struct spw_pipeline_hist tau; /* the shards' sparrow_ps_staleness */
    /* the shards' sparrow_ps_staleness_class by class (empty where the shards lack it) */
    struct spw_pipeline_hist_by tau_class;
    struct spw_pipeline_hist pause; /* the trainers' checkpoint pause, seconds */
};

/* Reads trainer t's /metrics into *tr. */
void spw_pipeline_scrape_trainer(const spw_pipeline_t *p, long t, struct spw_pipeline_trainer *tr);

/* Scrapes every trainer and shard and the coordinator's log into *s. */
void spw_pipeline_scrape(const spw_pipeline_t *p, struct spw_pipeline_snapshot *s);

/* Narrows s->fresh_p50/p99 to the updates serve applied after the scrape whose s->fresh was
 * before (a window: a histogram since serve started would keep the start-up's backlog in its
 * tail for the whole run); NAN when there were none. Returns how many there were. */
double spw_pipeline_fresh_since(struct spw_pipeline_snapshot *s,
                                const struct spw_pipeline_hist *before);

/* The demo's one-line progress: t=, examples=, ex/s=, logloss (const, bayes), auc, tau, saved,
 * ckpt, lag, and serve's freshness p99 when known. */
void spw_pipeline_format_line(const struct spw_pipeline_snapshot *s, double elapsed, char *line,
                              size_t size);

/* The value of " key=" in the last line of log_path containing marker; NAN when none. */
double spw_pipeline_log_value(const char *log_path, const char *marker, const char *key);

/* ---- fault injection ---- */

/* A schedule of kill -9 and restarts over the pipeline's processes. Owned by one thread. */
typedef struct spw_chaos spw_chaos_t;

/* One scheduled kill: name at at_ms after the start, restarted unless norestart. */
struct spw_chaos_at {
    uint64_t at_ms;
    char name[SPW_LAUNCH_NAME_MAX];
    bool norestart;
};

struct spw_chaos_conf {
    /* random kills: roles (bit 1<<SPW_PIPELINE_TRAINER | PSERVER | COORDINATOR), 0: none */
    unsigned roles;
    long kills;
    uint64_t interval_min_ms, interval_max_ms;
    uint64_t restart_after_ms;
    uint64_t seed;
    const struct spw_chaos_at *at; /* borrowed for the schedule's life */
    size_t n_at;
};

/* A schedule starting now; log_path (appended, may be NULL) and stdout (unless quiet) get one
 * line per kill and restart. NULL on out of memory. */
spw_chaos_t *spw_chaos_new(const struct spw_chaos_conf *conf, const char *log_path, bool quiet);
void spw_chaos_destroy(spw_chaos_t *c);

/* Performs what is due at now_ms (ms since the run started) on p's processes. SPW_ERR_IO (errstr)
 * when a restart failed. */
spw_err_t spw_chaos_step(spw_chaos_t *c, spw_pipeline_t *p, uint64_t now_ms, char *errstr,
                         size_t errstr_size);

/* True when every kill was made and every process to restart runs again. */
bool spw_chaos_done(const spw_chaos_t *c);

/* Kills and restarts performed so far. */
long spw_chaos_kills(const spw_chaos_t *c);
long spw_chaos_restarts(const spw_chaos_t *c);

/* ---- the run's summary ---- */

/* What `sparrow launch` measured; NAN (written as null) where unknown. */
struct spw_pipeline_result {
    const char *mode, *penalty; /* borrowed */
    bool ok, drained;
    double duration_s;
    double examples_produced, examples_trained, ex_per_s;
    double train_ex_per_s; /* examples trained over the span in which they were trained */
    double trainer_examples[SPW_PIPELINE_MAX_TRAINERS];
    double trainer_ex_per_s[SPW_PIPELINE_MAX_TRAINERS];
    /* seconds trainer t waited for the coordinator between the run's first sample and the final
     * scrape (its coord_wait_s then minus at the first sample; NAN when either is unknown) */
    double trainer_run_wait_s[SPW_PIPELINE_MAX_TRAINERS];
    struct spw_pipeline_snapshot snap; /* the last scrape, window metrics overridden from the
                                          trainers' "finished" lines */
    long latest_epoch;                 /* -1: no checkpoint */
    double manifest_examples;          /* LATEST manifest's example_count */
    long kills, restarts;
    uint64_t lost_to_retention; /* spw_pipeline_lost_records after the stop */
};

/* Writes r as JSON to path, with every process's name and last exit status. SPW_ERR_IO. */
spw_err_t spw_pipeline_summary_write(const spw_pipeline_t *p, const struct spw_pipeline_result *r,
                                     const char *path);

/* Reads the coordinator's LATEST checkpoint under the run directory: *epoch and the manifest's
 * example_count. SPW_ERR_NOT_FOUND when there is none, or the manifest's read error. */
spw_err_t spw_pipeline_latest(const spw_pipeline_t *p, uint64_t *epoch, uint64_t *examples);

/* ---- `sparrow launch` ---- */

/* The property table of `sparrow launch` (launch.*, tools/src/launch_config.c). */
extern const struct spw_config_prop spw_launch_config_props[];
extern const size_t spw_launch_config_n_props;

#define SPW_LAUNCH_RUN_MAX_AT 32  /* scheduled kills (launch.kill_at) */
#define SPW_LAUNCH_RUN_KV_MAX 256 /* bytes of one key=value passed to a role */

/*
 * What `sparrow launch` runs (the launch.* properties), checked. Strings are borrowed from the
 * configuration. sets[i].kv points into kv and chaos.at into at: the struct is not to be copied.
 * Plain struct, one owner.
 */
struct spw_launch_run_conf {
    const char *run_dir; /* NULL: a new /tmp/sparrow-launch-XXXXXX */
    const char *summary; /* NULL: <run_dir>/summary.json */
    const char *mode, *penalty, *checkpoint_interval;
    bool checkpoints; /* checkpoint_interval is not 0 */
    long shards, trainers, partitions;
    uint64_t examples; /* 0: run for duration_s */
    uint64_t seed, samples_ms;
    double rate, drift, duration_s;
    bool serve, quiet, backlog;
    /* per-role --set values: the penalty's, launch.set's, launch.slow's, launch.delay's */
    struct spw_pipeline_set sets[SPW_PIPELINE_MAX_SETS];
    char kv[SPW_PIPELINE_MAX_SETS][SPW_LAUNCH_RUN_KV_MAX];
    size_t n_sets;
    struct spw_chaos_conf chaos;
    struct spw_chaos_at at[SPW_LAUNCH_RUN_MAX_AT];
};

/*
 * Fills conf from a configuration of spw_launch_config_props; every check of values is here.
 * SPW_ERR_INVALID with errstr naming the flag, what it wants and the key ("--shards wants an
 * integer in [1, 16], got '17' (launch.shards)") for a malformed list entry, a mode or penalty the
 * roles refuse, a trainer index beyond launch.trainers, a kill-at name no process has, kill roles
 * without kills, backlog without examples. Strings borrowed from cfg, which must outlive conf.
 * Pure; thread-safe on a cfg no one changes.
 */
spw_err_t spw_launch_run_conf_from_config(const spw_config_t *cfg, struct spw_launch_run_conf *conf,
                                          char *errstr, size_t errstr_size);

/*
 * Runs `sparrow launch` (tools/src/pipeline_launch.c): starts the pipeline of conf, samples the
 * trainers into <run_dir>/samples.csv, applies the chaos schedule, runs to the duration or until
 * drained, stops every process and writes the summary. SIGTERM/SIGINT interrupt it (the caller has
 * run spw_signal_install). Returns the exit code: 0 on success, 1 when a process died, the stop
 * was unclean, the run did not drain in time or a file could not be written. Call from main.
 */
int spw_launch_run(const struct spw_launch_run_conf *conf);

/* ---- `sparrow demo` ---- */

/* The property table of `sparrow demo` (demo.*, tools/src/demo_config.c). */
extern const struct spw_config_prop spw_demo_config_props[];
extern const size_t spw_demo_config_n_props;

/* What `sparrow demo` runs (the demo.* properties). Strings borrowed from the configuration. */
struct spw_demo_conf {
    double duration_s;
    double rate; /* examples per second produced */
    long trainers, shards;
    const char *run_dir; /* NULL: a new /tmp/sparrow-demo-XXXXXX */
    bool serve;
};

/* Fills conf from a configuration of spw_demo_config_props (the table's ranges are the only
 * checks; strings borrowed from cfg). Pure; thread-safe on a cfg no one changes. */
void spw_demo_conf_from_config(const spw_config_t *cfg, struct spw_demo_conf *conf);

/*
 * Runs the demo (tools/src/pipeline_demo.c): the pipeline of conf on loopback, a progress line
 * every 2 s on stdout (rewritten in place on a terminal), then a clean stop and a summary naming
 * the run directory. Stops early on SIGTERM/SIGINT (the caller has run spw_signal_install, as
 * spw_cli_role_init does) or when a
 * component dies (reported, naming its log). Returns the exit code: 0 after a clean run, 1 when a
 * component died, the stop was unclean or the pipeline did not start. Call from main.
 */
int spw_demo_run(const struct spw_demo_conf *conf);

#endif
