/* `sparrow demo`: the whole pipeline on this machine (Kafka mock, generator, coordinator, shards,
 * trainers, serve) under one run directory, with a live progress line and a final summary. */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "sparrow/launch.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#define DEMO_MAX_TRAINERS 8
#define DEMO_MAX_SHARDS   8
#define DEMO_PROGRESS_MS  2000
#define DEMO_GRACE_MS     10000
#define DEMO_STARTUP_MS   20000
/* The largest /metrics page read from a role. */
#define DEMO_METRICS_MAX (1u << 20)
/* Staleness histogram buckets kept while scraping the shards. */
#define DEMO_MAX_BUCKETS 64

struct demo_opts {
    double duration_s;
    double rate;
    long trainers;
    long shards;
    const char *run_dir;
    bool serve;
};

struct demo_ports {
    int shard[DEMO_MAX_SHARDS], shard_http[DEMO_MAX_SHARDS];
    int trainer_http[DEMO_MAX_TRAINERS];
    int coord, serve;
};

/* What one scrape of every role found. NAN where unknown. */
struct demo_snapshot {
    double examples;     /* trained, all trainers */
    double ex_per_s;     /* sum of the trainers' rates */
    double logloss, auc; /* window, mean over trainers that report one */
    double bayes_logloss, bayes_auc;
    double bytes_saved; /* push bytes saved by top-k compression, estimated */
    double lag;         /* consumer lag, all trainers */
    double tau_p50, tau_p99;
    long epoch; /* last completed checkpoint epoch, -1 none */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow demo [--duration SECONDS] [--rate EXAMPLES_PER_S] [--trainers N]\n"
            "                    [--shards N] [--run-dir DIR] [--no-serve] [--help]\n\n"
            "Runs the whole pipeline locally: `sparrow kafka-mock` (topics examples and\n"
            "model-updates), `sparrow gen` producing a drifting click stream to Kafka at a steady\n"
            "rate, the coordinator, N parameter-server shards (default 2), N CPU trainers reading\n"
            "Kafka (default 2) and `sparrow serve`. Prints one progress line every 2 s (a\n"
            "rewritten line on a terminal): examples/s, window logloss and AUC against the\n"
            "Bayes-optimal, staleness p50/p99, bytes saved by compression, last checkpoint\n"
            "epoch, consumer lag. After --duration seconds (default 60) or SIGINT/SIGTERM it\n"
            "stops every process cleanly and prints a summary naming the run directory, where\n"
            "every process's log lives. Exits non-zero, naming the log to read, when a component\n"
            "dies.\n");
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "sparrow demo: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct demo_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--no-serve") == 0) {
            o->serve = false;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "sparrow demo: unknown or incomplete argument '%s'\n", a);
            return 2;
        } else if (strcmp(a, "--duration") == 0) {
            if (parse_num(a, argv[++i], 1, 86400, &o->duration_s))
                return 2;
        } else if (strcmp(a, "--rate") == 0) {
            if (parse_num(a, argv[++i], 1, 1e7, &o->rate))
                return 2;
        } else if (strcmp(a, "--trainers") == 0) {
            if (parse_num(a, argv[++i], 1, DEMO_MAX_TRAINERS, &v))
                return 2;
            o->trainers = (long)v;
        } else if (strcmp(a, "--shards") == 0) {
            if (parse_num(a, argv[++i], 1, DEMO_MAX_SHARDS, &v))
                return 2;
            o->shards = (long)v;
        } else if (strcmp(a, "--run-dir") == 0) {
            o->run_dir = argv[++i];
        } else {
            fprintf(stderr, "sparrow demo: unknown argument '%s'\n(sparrow demo --help)\n", a);
            return 2;
        }
    }
    return -1;
}

/* GET http://127.0.0.1:port/metrics into a malloc'd NUL-terminated string; NULL on failure. */
static char *http_get_metrics(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char *buf = NULL;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto out_close;
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1))
        goto out_close;
    size_t cap = 65536, len = 0;
    buf = malloc(cap);
    if (!buf)
        goto out_close;
    for (;;) {
        if (len + 1 == cap) {
            if (cap >= DEMO_METRICS_MAX)
                break;
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (strncmp(buf, "HTTP/1.", 7) != 0 || !strstr(buf, " 200")) {
        free(buf);
        buf = NULL;
    }
out_close:
    close(fd);
    return buf;
}

/* Sum of the samples of metric name (any labels) in page; NAN when absent or not finite. */
static double metric_sum(const char *page, const char *name)
{
    size_t nlen = strlen(name);
    double sum = 0;
    bool found = false;
    for (const char *line = page; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, name, nlen) != 0 || (line[nlen] != ' ' && line[nlen] != '{'))
            continue;
        const char *eol = strchr(line, '\n');
        const char *sp = eol ? eol : line + strlen(line);
        while (sp > line && sp[-1] != ' ')
            sp--;
        double v = strtod(sp, NULL);
        if (isfinite(v)) {
            sum += v;
            found = true;
        }
    }
    return found ? sum : NAN;
}

struct hist {
    double le[DEMO_MAX_BUCKETS], count[DEMO_MAX_BUCKETS];
    size_t n;
};

/* Adds the cumulative buckets of histogram name in page to h (matched by their le). */
static void hist_add(struct hist *h, const char *page, const char *name)
{
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "%s_bucket{", name);
    size_t plen = strlen(prefix);
    for (const char *line = page; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, prefix, plen) != 0)
            continue;
        const char *le = strstr(line, "le=\"");
        const char *eol = strchr(line, '\n');
        if (!le || (eol && le > eol))
            continue;
        double bound = strncmp(le + 4, "+Inf", 4) == 0 ? INFINITY : strtod(le + 4, NULL);
        const char *sp = eol ? eol : line + strlen(line);
        while (sp > line && sp[-1] != ' ')
            sp--;
        double v = strtod(sp, NULL);
        size_t i = 0;
        while (i < h->n && h->le[i] != bound)
            i++;
        if (i == h->n) {
            if (h->n == DEMO_MAX_BUCKETS)
                continue;
            h->le[h->n] = bound;
            h->count[h->n++] = 0;
        }
        h->count[i] += v;
    }
}

/* The bound of the first bucket holding quantile q of h; NAN when empty. */
static double hist_quantile(const struct hist *h, double q)
{
    double total = 0;
    for (size_t i = 0; i < h->n; i++)
        if (isinf(h->le[i]))
            total = h->count[i];
    if (total <= 0)
        return NAN;
    double best = INFINITY;
    for (size_t i = 0; i < h->n; i++)
        if (h->count[i] >= q * total && h->le[i] < best)
            best = h->le[i];
    return best;
}

/* The epoch of the last "checkpoint completed" line in the coordinator's log, -1 when none. */
static long last_epoch(const char *log_path)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return -1;
    long epoch = -1;
    char line[2048];
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, "checkpoint completed"))
            continue;
        const char *e = strstr(line, " epoch=");
        if (e)
            epoch = strtol(e + 7, NULL, 10);
    }
    fclose(f);
    return epoch;
}

static void scrape(const struct demo_opts *o, const struct demo_ports *ports, const char *coord_log,
                   struct demo_snapshot *s)
{
    *s = (struct demo_snapshot){NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, -1};
    double ll = 0, auc = 0, bll = 0, bauc = 0;
    int n_ll = 0, n_auc = 0, n_bll = 0, n_bauc = 0;
    for (long t = 0; t < o->trainers; t++) {
        char *page = http_get_metrics(ports->trainer_http[t]);
        if (!page)
            continue;
        double ex = metric_sum(page, "sparrow_trainer_examples_total");
        double rate = metric_sum(page, "sparrow_trainer_examples_per_second");
        double bpe = metric_sum(page, "sparrow_trainer_push_bytes_per_example");
        double ratio = metric_sum(page, "sparrow_trainer_compression_ratio");
        double lag = metric_sum(page, "sparrow_kafka_consumer_lag");
        double v;
        if (isfinite(ex))
            s->examples = (isfinite(s->examples) ? s->examples : 0) + ex;
        if (isfinite(rate))
            s->ex_per_s = (isfinite(s->ex_per_s) ? s->ex_per_s : 0) + rate;
        if (isfinite(lag) && lag >= 0)
            s->lag = (isfinite(s->lag) ? s->lag : 0) + lag;
        if (isfinite(ex) && isfinite(bpe) && isfinite(ratio) && ratio >= 1)
            s->bytes_saved =
                (isfinite(s->bytes_saved) ? s->bytes_saved : 0) + ex * bpe * (ratio - 1);
        if (isfinite(v = metric_sum(page, "sparrow_trainer_window_logloss")) && v > 0)
            ll += v, n_ll++;
        if (isfinite(v = metric_sum(page, "sparrow_trainer_window_auc")) && v > 0)
            auc += v, n_auc++;
        if (isfinite(v = metric_sum(page, "sparrow_trainer_bayes_window_logloss")) && v > 0)
            bll += v, n_bll++;
        if (isfinite(v = metric_sum(page, "sparrow_trainer_bayes_window_auc")) && v > 0)
            bauc += v, n_bauc++;
        free(page);
    }
    if (n_ll)
        s->logloss = ll / n_ll;
    if (n_auc)
        s->auc = auc / n_auc;
    if (n_bll)
        s->bayes_logloss = bll / n_bll;
    if (n_bauc)
        s->bayes_auc = bauc / n_bauc;
    struct hist h = {0};
    for (long i = 0; i < o->shards; i++) {
        char *page = http_get_metrics(ports->shard_http[i]);
        if (!page)
            continue;
        hist_add(&h, page, "sparrow_ps_staleness");
        free(page);
    }
    s->tau_p50 = hist_quantile(&h, 0.5);
    s->tau_p99 = hist_quantile(&h, 0.99);
    s->epoch = last_epoch(coord_log);
}

/* Formats v with prec decimals, or "-" when not finite. */
static const char *fmt_num(char *buf, size_t size, int prec, double v)
{
    if (isfinite(v))
        snprintf(buf, size, "%.*f", prec, v);
    else
        snprintf(buf, size, "-");
    return buf;
}

static void format_line(const struct demo_snapshot *s, double elapsed, char *line, size_t size)
{
    char a[10][32];
    char ep[32];
    if (s->epoch >= 0)
        snprintf(ep, sizeof(ep), "%ld", s->epoch);
    else
        snprintf(ep, sizeof(ep), "none");
    snprintf(
        line, size,
        "t=%3.0fs examples=%s ex/s=%s logloss=%s (bayes %s) auc=%s (bayes %s) tau p50/p99=%s/%s "
        "saved=%sMB ckpt=%s lag=%s",
        elapsed, fmt_num(a[0], 32, 0, s->examples), fmt_num(a[1], 32, 0, s->ex_per_s),
        fmt_num(a[2], 32, 4, s->logloss), fmt_num(a[3], 32, 4, s->bayes_logloss),
        fmt_num(a[4], 32, 4, s->auc), fmt_num(a[5], 32, 4, s->bayes_auc),
        fmt_num(a[6], 32, 0, s->tau_p50), fmt_num(a[7], 32, 0, s->tau_p99),
        fmt_num(a[8], 32, 1, s->bytes_saved / 1e6), ep, fmt_num(a[9], 32, 0, s->lag));
}

/* Fails loudly: names the process, its exit and the log to read; prints the log's tail. */
static void report_death(spw_launch_t *l, int idx, int status)
{
    char st[32];
    fprintf(stderr, "\nsparrow demo: FAILED: %s died (%s); read %s\n", spw_launch_name(l, idx),
            spw_launch_status_str(status, st, sizeof(st)), spw_launch_log(l, idx));
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

static int start(spw_launch_t *l, const char *name, const char *const *args)
{
    char errstr[256];
    int idx = spw_launch_start(l, name, args, errstr, sizeof(errstr));
    if (idx < 0)
        fprintf(stderr, "sparrow demo: cannot start %s: %s\n", name, errstr);
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

int spw_demo_main(int argc, char **argv)
{
    struct demo_opts o = {
        .duration_s = 60, .rate = 3000, .trainers = 2, .shards = 2, .serve = true};
    int early = parse_args(argc, argv, &o);
    if (early >= 0)
        return early;
    char run_dir[1024];
    if (o.run_dir) {
        snprintf(run_dir, sizeof(run_dir), "%s", o.run_dir);
    } else {
        snprintf(run_dir, sizeof(run_dir), "/tmp/sparrow-demo-XXXXXX");
        if (!mkdtemp(run_dir)) {
            perror("sparrow demo: mkdtemp");
            return 1;
        }
    }
    char errstr[512];
    spw_launch_t *l = spw_launch_new(run_dir, NULL, errstr, sizeof(errstr));
    if (!l) {
        fprintf(stderr, "sparrow demo: %s\n", errstr);
        return 1;
    }
    spw_signal_install();
    bool tty = isatty(STDOUT_FILENO);
    int rc = 1;
    struct demo_ports ports = {0};
    char path[1200], bootstrap[512], buf[8][1400];
    printf("demo: run directory %s (every process's log is there)\n", run_dir);

    /* Kafka */
    snprintf(path, sizeof(path), "%s/kafka.port", run_dir);
    unlink(path);
    const char *kafka_args[] = {
        "kafka-mock", "--brokers",       "1",           "--topic", "examples:4",
        "--topic",    "model-updates:1", "--port-file", path,      NULL};
    int k_idx = start(l, "kafka-mock", kafka_args);
    if (k_idx < 0)
        goto out_stop;
    if (spw_launch_wait_file(path, DEMO_STARTUP_MS) != SPW_OK ||
        read_line(path, bootstrap, sizeof(bootstrap)) != 0) {
        fprintf(stderr, "sparrow demo: FAILED: the Kafka mock did not start; read %s\n",
                spw_launch_log(l, k_idx));
        goto out_stop;
    }
    printf("demo: kafka-mock at %s (topics examples:4, model-updates:1)\n", bootstrap);

    /* shards */
    char shard_list[DEMO_MAX_SHARDS * 32] = "";
    char nshards[16];
    snprintf(nshards, sizeof(nshards), "%ld", o.shards);
    for (long i = 0; i < o.shards; i++) {
        ports.shard[i] = spw_launch_free_port();
        ports.shard_http[i] = spw_launch_free_port();
        char name[32], listen[64], idx[16], http[16], data[1200], ckpt[1300];
        snprintf(ckpt, sizeof(ckpt), "pserver.checkpoint.dir=%s", run_dir);
        snprintf(name, sizeof(name), "shard-%ld", i);
        snprintf(listen, sizeof(listen), "tcp://127.0.0.1:%d", ports.shard[i]);
        snprintf(idx, sizeof(idx), "%ld", i);
        snprintf(http, sizeof(http), "%d", ports.shard_http[i]);
        snprintf(data, sizeof(data), "%s/shard-%ld", run_dir, i);
        const char *args[] = {"pserver", "--listen",    listen, "--shard",    idx,  "--shards",
                              nshards,   "--dim",       "5",    "--data-dir", data, "--http-port",
                              http,      "--memory-mb", "64",   "--set",      ckpt, NULL};
        if (start(l, name, args) < 0)
            goto out_stop;
        size_t used = strlen(shard_list);
        snprintf(shard_list + used, sizeof(shard_list) - used, "%s%s", i ? "," : "", listen);
    }
    printf("demo: %ld pserver shards at %s\n", o.shards, shard_list);

    /* coordinator */
    ports.coord = spw_launch_free_port();
    snprintf(buf[0], sizeof(buf[0]), "tcp://127.0.0.1:%d", ports.coord);
    snprintf(buf[1], sizeof(buf[1]), "%s", run_dir); /* checkpoints/ of shards and coordinator */
    const char *coord_args[] = {"coordinator",
                                "--listen",
                                buf[0],
                                "--mode",
                                "async",
                                "--shards",
                                shard_list,
                                "--checkpoint-dir",
                                buf[1],
                                "--set",
                                "coordinator.checkpoint.interval=10s",
                                NULL};
    int c_idx = start(l, "coordinator", coord_args);
    if (c_idx < 0)
        goto out_stop;
    printf("demo: coordinator at %s (checkpoints in %s/checkpoints)\n", buf[0], buf[1]);

    /* generator */
    snprintf(buf[2], sizeof(buf[2]), "kafka://%s/examples", bootstrap);
    snprintf(buf[3], sizeof(buf[3]), "%.0f", o.rate);
    const char *gen_args[] = {"gen",  "--n",          "0",    "--seed",  "7",   "--fields",
                              "39",   "--latent-dim", "4",    "--drift", "0.5", "--rate",
                              buf[3], "--out",        buf[2], NULL};
    if (start(l, "gen", gen_args) < 0)
        goto out_stop;
    printf("demo: gen -> %s at %s examples/s (39 fields, FM k=4, drift 0.5 rad/M)\n", buf[2],
           buf[3]);

    /* trainers */
    for (long t = 0; t < o.trainers; t++) {
        ports.trainer_http[t] = spw_launch_free_port();
        char name[32], id[16], http[16], coord_set[1500];
        snprintf(coord_set, sizeof(coord_set), "trainer.coordinator=%s", buf[0]);
        snprintf(name, sizeof(name), "trainer-%ld", t);
        snprintf(id, sizeof(id), "%ld", t + 1); /* 0 would mean "derived" */
        snprintf(http, sizeof(http), "%d", ports.trainer_http[t]);
        const char *args[] = {"trainer",
                              "--in",
                              buf[2],
                              "--shards",
                              shard_list,
                              "--model",
                              "fm",
                              "--latent-dim",
                              "4",
                              "--batch",
                              "256",
                              "--backend",
                              "cpu",
                              "--group",
                              "demo-trainers",
                              "--id",
                              id,
                              "--http-port",
                              http,
                              "--set",
                              "trainer.log.interval=5s",
                              "--set",
                              "trainer.eval.window=20000",
                              "--set",
                              "trainer.push.fp16=true",
                              "--set",
                              coord_set,
                              NULL};
        if (start(l, name, args) < 0)
            goto out_stop;
    }
    printf("demo: %ld CPU trainers in group demo-trainers\n", o.trainers);

    /* serve (optional: the demo goes on without it when it does not start) */
    int s_idx = -1;
    if (o.serve) {
        ports.serve = spw_launch_free_port();
        char port[16];
        snprintf(port, sizeof(port), "%d", ports.serve);
        const char *serve_args[] = {"serve",   "--checkpoint-dir", buf[1],      "--port",  port,
                                    "--topic", "model-updates",    "--brokers", bootstrap, NULL};
        s_idx = start(l, "serve", serve_args);
        spw_time_sleep_ms(1500);
        int st = 0;
        if (s_idx >= 0 && !spw_launch_alive(l, s_idx)) {
            spw_launch_check(l, &st);
            char sts[32];
            printf("demo: serve did not start (%s), going on without it; read %s\n",
                   spw_launch_status_str(st, sts, sizeof(sts)), spw_launch_log(l, s_idx));
        } else if (s_idx >= 0) {
            printf("demo: serve on http://127.0.0.1:%s (/v1/predict)\n", port);
        }
    }
    printf("demo: running for %.0f s\n", o.duration_s);
    fflush(stdout);

    snprintf(path, sizeof(path), "%s/coordinator.log", run_dir);
    uint64_t t0 = spw_time_mono_ms(), next = t0 + DEMO_PROGRESS_MS;
    struct demo_snapshot snap = {.epoch = -1, .examples = NAN};
    uint64_t snap_ms = t0;
    char line[512];
    bool failed = false;
    while (!spw_signal_stop_requested()) {
        int status = 0;
        int dead = spw_launch_check(l, &status);
        if (dead >= 0) {
            report_death(l, dead, status);
            failed = true;
            break;
        }
        uint64_t now = spw_time_mono_ms();
        if ((double)(now - t0) >= o.duration_s * 1000.0)
            break;
        if (now >= next) {
            next += DEMO_PROGRESS_MS;
            double prev = snap.examples;
            uint64_t prev_ms = snap_ms;
            scrape(&o, &ports, path, &snap);
            snap_ms = now;
            if (isfinite(prev) && isfinite(snap.examples) && now > prev_ms)
                snap.ex_per_s = (snap.examples - prev) * 1000.0 / (double)(now - prev_ms);
            format_line(&snap, (double)(now - t0) / 1000.0, line, sizeof(line));
            if (tty)
                printf("\r\033[K%s", line);
            else
                printf("%s\n", line);
            fflush(stdout);
        }
        spw_time_sleep_ms(100);
    }
    if (tty)
        printf("\n");
    double elapsed = (double)(spw_time_mono_ms() - t0) / 1000.0;
    if (!failed) {
        double prev = snap.examples, rate = snap.ex_per_s;
        scrape(&o, &ports, path, &snap);
        snap.ex_per_s = isfinite(prev) && isfinite(snap.examples) && elapsed > 0
                            ? snap.examples / elapsed
                            : rate;
    }

    /* clean stop: producer first, then trainers (drain), serve, coordinator, shards, Kafka */
    printf("demo: stopping (SIGTERM, SIGKILL after %d s)\n", DEMO_GRACE_MS / 1000);
    fflush(stdout);
    bool unclean = false;
    const char *order[] = {"gen", "serve", NULL};
    for (const char **n = order; *n; n++) {
        int idx = spw_launch_find(l, *n);
        int st = 0;
        if (idx >= 0 && spw_launch_alive(l, idx)) {
            if (spw_launch_stop(l, idx, DEMO_GRACE_MS, &st) != SPW_OK ||
                !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                char sts[32];
                fprintf(stderr, "sparrow demo: %s did not stop cleanly (%s); read %s\n", *n,
                        spw_launch_status_str(st, sts, sizeof(sts)), spw_launch_log(l, idx));
                unclean = true;
            }
        }
    }
    for (long t = 0; t < o.trainers; t++) {
        char name[32];
        snprintf(name, sizeof(name), "trainer-%ld", t);
        int idx = spw_launch_find(l, name), st = 0;
        if (idx >= 0 && spw_launch_alive(l, idx) &&
            (spw_launch_stop(l, idx, DEMO_GRACE_MS, &st) != SPW_OK ||
             !(WIFEXITED(st) && WEXITSTATUS(st) == 0))) {
            char sts[32];
            fprintf(stderr, "sparrow demo: %s did not stop cleanly (%s); read %s\n", name,
                    spw_launch_status_str(st, sts, sizeof(sts)), spw_launch_log(l, idx));
            unclean = true;
        }
    }
    spw_launch_stop_all(l, DEMO_GRACE_MS);

    char sl[512];
    format_line(&snap, elapsed, sl, sizeof(sl));
    printf("demo summary: %s\n", failed ? "FAILED" : unclean ? "finished, unclean stop" : "ok");
    printf("  ran %.0f s (ex/s averaged over the run): %s\n", elapsed, sl);
    printf("  run directory: %s\n", run_dir);
    printf("  logs: %s/{kafka-mock,gen,coordinator,shard-*,trainer-*,serve}.log\n", run_dir);
    rc = failed ? 1 : unclean ? 1 : 0;
out_stop:
    if (rc != 0 && !failed)
        fprintf(stderr, "sparrow demo: failed; logs under %s\n", run_dir);
    spw_launch_destroy(l);
    return rc;
}
