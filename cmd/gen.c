/* `sparrow gen`: writes the synthetic click stream (docs/ARCHITECTURE.md §2) to a file or
 * stdout. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command_table.h"
#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/eval.h"
#include "sparrow/kafka.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "sparrow/tools.h"

/* Output is handed to the writer thread in blocks of about this size (one write(2) each). */
#define GEN_FLUSH_BYTES (1u << 20)
/* Examples between checks of the stop flag and the progress clock. */
#define GEN_CHECK_EVERY 4096
#define GEN_PROGRESS_MS 10000
/* Kafka output: examples per ExampleBatch record, and the longest wait for deliveries at the end.
 */
#define GEN_KAFKA_BATCH    256
#define GEN_KAFKA_FLUSH_MS 30000
#define GEN_KAFKA_PREFIX   "kafka://"

static const struct spw_cli_alias aliases[] = {
    {"--n", "gen.n"},
    {"--seed", "gen.seed"},
    {"--fields", "gen.fields"},
    {"--latent-dim", "gen.latent_dim"},
    {"--vocab-min", "gen.vocab.min"},
    {"--vocab-max", "gen.vocab.max"},
    {"--zipf", "gen.zipf"},
    {"--ctr", "gen.ctr"},
    {"--signal", "gen.signal"},
    {"--drift", "gen.drift"},
    {"--new-values", "gen.new_values"},
    {"--format", "gen.format"},
    {"--out", "gen.out"},
    {"--start-ms", "gen.start_ms"},
    {"--rate", "gen.rate"},
    {"--compression", "gen.compression"},
    {"--log-level", "log.level"},
};

static const char usage[] =
    "usage: sparrow gen [--n N] [--seed S] [--fields F] [--latent-dim K] [--drift D]\n"
    "                   [--format pb|json|criteo] [--out -|FILE|kafka://H:P/TOPIC]\n"
    "                   [--ctr C] [--signal X]\n"
    "                   [--zipf A] [--vocab-min V] [--vocab-max V] [--new-values R]\n"
    "                   [--start-ms MS] [--rate R] [--compression none|gzip|snappy|lz4|zstd]\n"
    "                   [--log-level L]\n"
    "                   [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
    "Writes a synthetic click stream drawn from a planted factorization machine: Zipf\n"
    "vocabularies per field, a calibrated base CTR, optional drift and new values. Each\n"
    "example carries oracle_p, the true click probability. The output is a function of\n"
    "the seed alone. A summary (CTR, Bayes-optimal logloss and AUC, rate) ends on stderr.\n"
    "With --out kafka://HOST:PORT/TOPIC it produces ExampleBatch records of 256 examples\n"
    "paced in wall time at --rate examples/s (a live stream; --n 0 runs until SIGTERM),\n"
    "compressed by the producer with --compression (lz4 unless told otherwise).\n"
    "Each flag is shorthand for the property in the table below.\n";

/*
 * `--out kafka://HOST:PORT/TOPIC`: ExampleBatch records of GEN_KAFKA_BATCH examples, paced in wall
 * time at gen.rate examples/s (the steady stream of the demo), until gen.n or SIGTERM. An
 * ExampleBatch is `repeated Example examples = 1`, so each example is the pb encoding (varint
 * length + Example) behind the field's tag byte 0x0a. Returns the exit code.
 */
static int gen_to_kafka(spw_gen_t *gen, const struct spw_gen_params *params, const char *url,
                        const char *compression, spw_eval_t *ev)
{
    char errstr[512];
    char bootstrap[512];
    const char *rest = url + strlen(GEN_KAFKA_PREFIX);
    const char *slash = strchr(rest, '/');
    if (!slash || slash == rest || !slash[1] || (size_t)(slash - rest) >= sizeof(bootstrap) ||
        strlen(slash + 1) > 249) {
        SPW_ERROR("bad Kafka output", "out=%s expected=kafka://HOST:PORT/TOPIC", url);
        return 2;
    }
    memcpy(bootstrap, rest, (size_t)(slash - rest));
    bootstrap[slash - rest] = '\0';
    const char *topic = slash + 1;
    int rc = 1;
    spw_kafka_props_t *props = spw_kafka_props_new();
    if (!props || spw_kafka_props_set(props, "bootstrap.servers", bootstrap) != SPW_OK ||
        spw_kafka_props_set(props, "linger.ms", "5") != SPW_OK ||
        spw_kafka_props_set(props, "compression.type", compression) != SPW_OK) {
        SPW_ERROR("out of memory", "%s", "");
        goto out_destroy_props;
    }
    struct spw_kafka_producer_opts opts = {0};
    spw_kafka_producer_t *prod = spw_kafka_producer_new(props, &opts, errstr, sizeof(errstr));
    if (!prod) {
        SPW_ERROR("cannot create the Kafka producer", "error=\"%s\"", errstr);
        goto out_destroy_props;
    }
    /* Records go round-robin over the topic's partitions: the default partitioner sends keyless
     * records of a burst (a high --rate) to few partitions, which then outgrow their retention.
     * Unknown partition count (metadata unavailable): the partitioner decides (-1). */
    static struct spw_kafka_partition wm[4096];
    size_t n_parts = 0;
    if (spw_kafka_producer_high_watermarks(prod, topic, wm, sizeof(wm) / sizeof(wm[0]), &n_parts,
                                           5000) != SPW_OK)
        n_parts = 0;
    SPW_INFO("gen start", "n=%llu seed=%llu fields=%u latent_dim=%u out=%s rate=%g drift=%g",
             (unsigned long long)params->n, (unsigned long long)params->seed, params->fields,
             params->latent_dim, url, params->rate, params->drift);
    struct spw_wire_buf buf = {0};
    uint64_t written = 0, records = 0, in_batch = 0;
    uint64_t t0 = spw_time_mono_ns(), next_progress = spw_time_mono_ms() + GEN_PROGRESS_MS;
    spw_err_t err = SPW_OK;
    while ((params->n == 0 || written < params->n) && !spw_signal_stop_requested()) {
        /* pacing: example `written` is due at t0 + written / rate */
        uint64_t due_ns = t0 + (uint64_t)((double)written / params->rate * 1e9);
        uint64_t now = spw_time_mono_ns();
        if (in_batch == 0 && due_ns > now) {
            uint64_t ms = (due_ns - now) / 1000000u;
            spw_kafka_producer_poll(prod, ms > 100 ? 100 : (int)ms);
            continue;
        }
        const struct spw_gen_example *ex = spw_gen_next(gen);
        if ((err = spw_wire_buf_reserve(&buf, 1)) != SPW_OK)
            break;
        buf.data[buf.len++] = 0x0a;
        if ((err = spw_gen_encode(gen, ex, SPW_FORMAT_PB, &buf)) != SPW_OK)
            break;
        spw_eval_add(ev, ex->oracle_p, ex->label);
        written++;
        in_batch++;
        if (in_batch == GEN_KAFKA_BATCH || written == params->n) {
            int32_t part = n_parts ? (int32_t)(records % n_parts) : -1;
            err = spw_kafka_producer_send(prod, topic, part, NULL, 0, buf.data, buf.len, NULL, 0,
                                          NULL);
            if (err != SPW_OK)
                break;
            records++;
            buf.len = 0;
            in_batch = 0;
            spw_kafka_producer_poll(prod, 0);
        }
        if (spw_time_mono_ms() >= next_progress) {
            next_progress += GEN_PROGRESS_MS;
            SPW_INFO("gen progress", "examples=%llu records=%llu", (unsigned long long)written,
                     (unsigned long long)records);
        }
    }
    if (err == SPW_OK && in_batch > 0) { /* stopped mid-batch: send what is there */
        int32_t part = n_parts ? (int32_t)(records % n_parts) : -1;
        err = spw_kafka_producer_send(prod, topic, part, NULL, 0, buf.data, buf.len, NULL, 0, NULL);
        if (err == SPW_OK)
            records++;
    }
    spw_err_t ferr = spw_kafka_producer_flush(prod, GEN_KAFKA_FLUSH_MS);
    uint64_t failed = spw_kafka_producer_failed(prod);
    double seconds = (double)(spw_time_mono_ns() - t0) / 1e9;
    struct spw_eval_summary sum;
    spw_eval_cumulative(ev, &sum);
    if (err != SPW_OK || ferr != SPW_OK || failed > 0) {
        SPW_ERROR("Kafka output failed", "out=%s error=\"%s\" failed_records=%llu", url,
                  spw_err_str(err != SPW_OK ? err : ferr), (unsigned long long)failed);
    } else {
        rc = 0;
    }
    SPW_INFO("gen done",
             "examples=%llu records=%llu ctr=%.5f bayes_logloss=%.5f bayes_auc=%.5f "
             "seconds=%.3f examples_per_s=%.0f stopped=%d",
             (unsigned long long)written, (unsigned long long)records, sum.ctr, sum.logloss,
             sum.auc, seconds, seconds > 0 ? (double)written / seconds : 0.0,
             spw_signal_stop_requested() ? 1 : 0);
    free(buf.data);
    spw_kafka_producer_destroy(prod, GEN_KAFKA_FLUSH_MS);
out_destroy_props:
    spw_kafka_props_destroy(props);
    return rc;
}

static int run(const spw_config_t *cfg)
{
    char errstr[512];
    int rc = 1;

    struct spw_gen_params params;
    spw_gen_params_from_config(cfg, &params);
    enum spw_format format;
    if (spw_format_parse(spw_config_str(cfg, "gen.format"), &format) != SPW_OK) {
        SPW_ERROR("bad format", "format=%s", spw_config_str(cfg, "gen.format"));
        rc = 2;
        goto out;
    }
    spw_gen_t *gen = spw_gen_new(&params, errstr, sizeof(errstr));
    if (!gen) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        rc = 2;
        goto out;
    }
    if (spw_gen_check_format(gen, format, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        rc = 2;
        goto out_destroy_gen;
    }
    spw_eval_t *ev = spw_eval_new(1);
    if (!ev) {
        SPW_ERROR("out of memory", "%s", "");
        goto out_destroy_gen;
    }
    const char *path = spw_config_str(cfg, "gen.out");
    if (strncmp(path, GEN_KAFKA_PREFIX, strlen(GEN_KAFKA_PREFIX)) == 0) {
        rc = gen_to_kafka(gen, &params, path, spw_config_str(cfg, "gen.compression"), ev);
        goto out_destroy_eval;
    }
    bool to_stdout = strcmp(path, "-") == 0;
    int fd = to_stdout ? STDOUT_FILENO : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        SPW_ERROR("cannot open output", "path=%s error=\"%s\"", path, strerror(errno));
        goto out_destroy_eval;
    }
    spw_gen_output_t *out = spw_gen_output_start(fd, GEN_FLUSH_BYTES, errstr, sizeof(errstr));
    if (!out) {
        SPW_ERROR("cannot start the output", "error=\"%s\"", errstr);
        goto out_close_fd;
    }
    SPW_INFO("gen start",
             "n=%llu seed=%llu fields=%u latent_dim=%u format=%s out=%s ctr=%g signal=%g "
             "drift=%g new_values=%g model=%s bias=%.6f",
             (unsigned long long)params.n, (unsigned long long)params.seed, params.fields,
             params.latent_dim, spw_format_name(format), path, params.ctr, params.signal,
             params.drift, params.new_values, spw_gen_model_name(params.model),
             spw_gen_bias(gen, 0));

    uint64_t t0 = spw_time_mono_ns(), next_progress = spw_time_mono_ms() + GEN_PROGRESS_MS;
    uint64_t written = 0, submitted = 0;
    bool stopped = false;
    spw_err_t err = SPW_OK;
    struct spw_wire_buf *buf = spw_gen_output_buf(out);
    while (params.n == 0 || written < params.n) {
        if (written % GEN_CHECK_EVERY == 0) {
            if (spw_signal_stop_requested()) {
                stopped = true;
                break;
            }
            if (spw_time_mono_ms() >= next_progress) {
                next_progress += GEN_PROGRESS_MS;
                SPW_INFO("gen progress", "examples=%llu bytes=%llu", (unsigned long long)written,
                         (unsigned long long)(submitted + buf->len));
            }
        }
        const struct spw_gen_example *ex = spw_gen_next(gen);
        err = spw_gen_encode(gen, ex, format, buf);
        if (err != SPW_OK)
            break;
        spw_eval_add(ev, ex->oracle_p, ex->label);
        written++;
        if (buf->len >= GEN_FLUSH_BYTES) {
            submitted += buf->len;
            err = spw_gen_output_submit(out, &buf);
            if (err != SPW_OK)
                break;
        }
    }
    uint64_t bytes = 0;
    int io_errno = 0;
    spw_err_t out_err = spw_gen_output_finish(out, &bytes, &io_errno);
    if (err == SPW_OK)
        err = out_err;
    if (!to_stdout && close(fd) != 0 && err == SPW_OK) {
        io_errno = errno;
        err = SPW_ERR_IO;
    }
    double seconds = (double)(spw_time_mono_ns() - t0) / 1e9;

    if (err == SPW_ERR_STOPPED) {
        SPW_INFO("output closed by its reader", "out=%s", path);
        stopped = true;
    } else if (err != SPW_OK) {
        SPW_ERROR("write failed", "out=%s error=\"%s\"", path,
                  err == SPW_ERR_IO ? strerror(io_errno) : spw_err_str(err));
        goto out_destroy_eval;
    }
    struct spw_eval_summary sum;
    spw_eval_cumulative(ev, &sum);
    SPW_INFO("gen done",
             "examples=%llu ctr=%.5f mean_p=%.5f bayes_logloss=%.5f bayes_auc=%.5f "
             "auc_err=%.1e bytes=%llu seconds=%.3f examples_per_s=%.0f stopped=%d",
             (unsigned long long)written, sum.ctr, sum.mean_p, sum.logloss, sum.auc, sum.auc_err,
             (unsigned long long)bytes, seconds, seconds > 0 ? (double)written / seconds : 0.0,
             stopped ? 1 : 0);
    rc = 0;
    goto out_destroy_eval;

out_close_fd:
    if (!to_stdout)
        close(fd);
out_destroy_eval:
    spw_eval_destroy(ev);
out_destroy_gen:
    spw_gen_destroy(gen);
out:
    return rc;
}

const struct spw_cli_command spw_cmd_gen = {
    "gen",
    "write a synthetic click stream from a planted FM model",
    spw_gen_config_props,
    &spw_gen_config_n_props,
    aliases,
    SPW_CLI_COUNT(aliases),
    NULL,
    0,
    usage,
    run,
    NULL};
