/* trainer: the worker loop — read, pull (pipelined), score, compute, compress, push, store
 * offsets of acknowledged pushes; hooks for the coordinator; clean stop with a final flush. */
#include "loop_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/hash.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"
#include "trainer_int.h"

/* Bytes of a push frame beyond its row blocks (header fields, protobuf tags). */
#define PUSH_FRAME_SLACK 4096u
/* A pull waited on for longer than this makes the trainer report itself not ready. */
#define PULL_NOT_READY_MS 2000u
/* Slice of a pull wait (between readiness updates). */
#define PULL_WAIT_SLICE_MS 500
/* Metrics are refreshed at least this often when the progress line is off. */
#define REPORT_DEFAULT_MS 5000u
#define SEQ_UNSET         UINT64_MAX

/* A micro-batch and the rows pulled for it. */
struct mb {
    spw_batch_t *batch;
    float *rows;
    size_t cap_rows;
    uint32_t *versions;
    size_t cap_versions;
    uint64_t token;
    uint64_t id;  /* micro-batch number, 1-based (offset marks refer to it) */
    bool filled;  /* holds examples not yet computed */
    bool pulling; /* pull started, not waited for */
    bool ready;   /* rows in hand */
    /* pushes echo_lo..echo_hi (0: none) write their rows into this one's as they are
     * acknowledged: it was pulled before they were pushed (fresh reads of own pushes) */
    uint64_t echo_lo, echo_hi;
};

/* A partition position reached by micro-batch batch_id; storable once push seq is acknowledged. */
struct mark {
    uint64_t batch_id;
    uint64_t seq; /* SEQ_UNSET until the step holding the micro-batch is pushed */
    int32_t part;
    int64_t offset; /* smark: the source high-water mark's value */
    uint32_t skip;
    uint64_t taken; /* the partition's examples handed out up to this position */
    bool smark;     /* a source high-water mark of (part, stopic, spart), not a position */
    uint32_t stopic;
    int32_t spart;
};

struct loop_metrics {
    spw_counter_t *examples, *micro_batches, *steps, *offsets_stored, *dropped;
    spw_gauge_t *window_logloss, *window_auc, *cum_logloss, *cum_auc, *bayes_window_logloss,
        *bayes_window_auc, *bayes_cum_logloss, *const_window_logloss, *ex_per_s, *bytes_per_example,
        *compression, *residual_rows, *step;
    spw_histogram_t *compute_s, *pull_wait_s;
};

/* Owned by the thread that runs it (see the header). */
struct spw_trainer_loop {
    char model_desc[SPW_MODEL_DESC_MAX]; /* spw_model_describe: the shards' hello carries it */
    struct spw_trainer_loop_conf conf;
    struct spw_trainer_hooks hooks;
    struct spw_trn__source src;
    struct spw_trn__inproc inproc;
    spw_ps_client_t *client;
    spw_backend_t *be;
    spw_topk_t *tk;      /* NULL: rows pushed as computed */
    spw_grad_acc_t *acc; /* NULL when acc_steps == 1 */
    spw_pv_t *pv;
    uint32_t dim;
    uint32_t trainer_id; /* the id the pushes carry */
    bool prefetch;
    /* two-phase steps (spw_trainer_loop_set_step): the tag of the step being computed (0: pushes
     * apply at once). Its pushes wait on the shards for the step's commit, so rows of the next
     * step are pulled only after the coordinator's proceed (never prefetched across a step). */
    uint64_t step_tag;

    struct mb mbs[2];
    struct mb *cur, *next;
    uint64_t next_mb_id;
    uint64_t filling_id;       /* the micro-batch whose marks snapshot() adds */
    uint64_t fill_deadline_ms; /* of the reading in progress (fill_begin): linger_ms after */
    uint64_t read_examples;
    bool eof;            /* the input ended (or max_examples) */
    bool reject_checked; /* Kafka: max_reject_ratio judged over the first records */
    bool stopped;        /* a stop request or a hook's SPW_ERR_STOPPED */
    bool ran;
    bool ready; /* reported to http */

    /* the step being accumulated */
    uint64_t step;
    uint32_t micro;
    uint64_t step_examples;
    double step_loss;
    int64_t step_max_event;
    uint64_t step_compute_ns, step_pull_ns;
    uint64_t compute_t0; /* when the micro-batch being computed started */
    uint64_t ahead_ns;   /* of which read_ahead's reading of the next one took this long */
    /* a staged micro-batch (staged_step): its pull, scoring and push on compute thread 0 */
    struct staged {
        spw_trainer_loop_t *loop;
        struct mb *mb;
        uint64_t tag, examples; /* of the push: the step's tag and examples with mb's */
        int64_t max_event;
        uint64_t t0, pulled_ns, posted_ns, pushed_ns; /* spw_time_mono_ns */
        uint64_t seq;                                 /* of the push */
        spw_err_t push_err;
        spw_err_t read_err; /* of the next micro-batch's reading (staged_read) */
        bool reading;       /* staged_read yielded: staged_score goes on with it */
    } staged;
    /* set by staged_pre once the pull is done: staged_read then yields the rest to staged_score */
    atomic_bool staged_pulled;
    /* set by staged_post once the push is done: staged_score stops populating the stores' slab */
    atomic_bool staged_pushed;
    /* pre, post: staged_pre, staged_post; beside: staged_read, staged_score; all on &staged */
    struct spw_backend_stages stages;
    uint64_t step_last_mb;

    float *grads, *preds;
    size_t cap_grads, cap_preds;
    struct mb *echo_to; /* while a step is pushed: the prefetched micro-batch to refresh */
    uint32_t *echo_pos; /* per shared pushed row: its index in echo_to's rows */
    size_t cap_echo_pos;
    uint64_t *split_keys; /* a pushed set reordered: the rows echo_to shares first */
    uint32_t *split_versions;
    void *split_values; /* f32 or f16 */
    float *split_pulled;
    size_t cap_split_keys, cap_split_versions, cap_split_values, cap_split_pulled;
    float *counter_grad; /* dim floats: the counter row's push (conf.counter_key) */

    struct mark *marks;                                    /* FIFO [head, n) */
    size_t marks_head, marks_n, marks_cap, marks_assigned; /* [head, assigned) have a seq */

    struct spw_trainer_loop_stats stats;
    uint64_t start_ns, last_report_ns, last_report_examples, last_commit_ns;
    struct loop_metrics m;

    /* straggler injection (conf.debug_slow_factor): the work since slow_mark_ns, less the time
     * spent in hooks (slow_hook_ns: coordinator waits), is stretched by sleeping; what is below
     * a millisecond is carried over (slow_debt_ns) */
    uint64_t slow_mark_ns, slow_hook_ns, slow_debt_ns;
};

/* ---- setup ---- */

static uint32_t derived_trainer_id(void)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    uint64_t h = spw_hash_mix64(spw_hash_key(0, host, strlen(host)) ^ (uint64_t)getpid());
    uint32_t id = (uint32_t)(h ^ (h >> 32));
    return id ? id : 1;
}

static void metrics_register(spw_trainer_loop_t *loop, spw_metrics_t *r)
{
    struct loop_metrics *m = &loop->m;
    m->examples =
        spw_metrics_counter_new(r, "sparrow_trainer_examples_total", "Examples trained on.", NULL);
    m->micro_batches = spw_metrics_counter_new(r, "sparrow_trainer_micro_batches_total",
                                               "Micro-batches computed.", NULL);
    m->steps = spw_metrics_counter_new(r, "sparrow_trainer_steps_total",
                                       "Steps pushed (acc_steps micro-batches each).", NULL);
    m->offsets_stored = spw_metrics_counter_new(
        r, "sparrow_trainer_offsets_stored_total",
        "Partition offsets stored for commit after their pushes were acknowledged.", NULL);
    m->dropped = spw_metrics_counter_new(r, "sparrow_trainer_dropped_examples_total",
                                         "Examples read but not trained (stopped during their "
                                         "pull; read again after a restart).",
                                         NULL);
    loop->src.m_duplicates = spw_metrics_counter_new(
        r, "sparrow_trainer_duplicates_dropped_total",
        "Examples dropped as duplicates: their source position is at or below the high-water mark "
        "already trained for their source partition in the same input partition.",
        NULL);
    loop->src.m_unchecked = spw_metrics_counter_new(
        r, "sparrow_trainer_duplicates_unchecked_total",
        "Examples with a source position trained without the duplicate check (no source topic, "
        "or beyond the trainer's mark limits).",
        NULL);
    loop->src.m_records = spw_metrics_counter_new(
        r, "sparrow_trainer_records_total",
        "Input records read (file: one example each; Kafka: one ExampleBatch each).", NULL);
    for (unsigned i = 0; i < SPW_REJECT__COUNT; i++) {
        char labels[64];
        snprintf(labels, sizeof(labels), "reason=\"%s\"",
                 i == SPW_REJECT_NONE ? "invalid" : spw_reject_reason_name(i));
        loop->src.m_rejected[i] = spw_metrics_counter_new(
            r, "sparrow_trainer_rejected_total",
            "Malformed input records and invalid examples, counted and skipped.", labels);
    }
    m->window_logloss = spw_metrics_gauge_new(
        r, "sparrow_trainer_window_logloss",
        "Progressive validation: logloss over the last trainer.eval.window examples.", NULL);
    m->window_auc = spw_metrics_gauge_new(r, "sparrow_trainer_window_auc",
                                          "Progressive validation: AUC over the window.", NULL);
    m->cum_logloss = spw_metrics_gauge_new(r, "sparrow_trainer_cumulative_logloss",
                                           "Progressive validation: logloss since start.", NULL);
    m->cum_auc = spw_metrics_gauge_new(r, "sparrow_trainer_cumulative_auc",
                                       "Progressive validation: AUC since start (binned).", NULL);
    m->bayes_window_logloss = spw_metrics_gauge_new(
        r, "sparrow_trainer_bayes_window_logloss",
        "Logloss of oracle_p (the Bayes-optimal predictor) over the window's examples that carry "
        "it; NaN when none do.",
        NULL);
    m->bayes_window_auc = spw_metrics_gauge_new(r, "sparrow_trainer_bayes_window_auc",
                                                "AUC of oracle_p over the window.", NULL);
    m->bayes_cum_logloss = spw_metrics_gauge_new(r, "sparrow_trainer_bayes_cumulative_logloss",
                                                 "Logloss of oracle_p since start.", NULL);
    m->const_window_logloss = spw_metrics_gauge_new(
        r, "sparrow_trainer_const_window_logloss",
        "Logloss of the best constant predictor on the window (entropy of its CTR).", NULL);
    m->ex_per_s = spw_metrics_gauge_new(r, "sparrow_trainer_examples_per_second",
                                        "Training rate over the last report interval.", NULL);
    m->bytes_per_example = spw_metrics_gauge_new(r, "sparrow_trainer_push_bytes_per_example",
                                                 "Push bytes sent per example trained.", NULL);
    m->compression = spw_metrics_gauge_new(
        r, "sparrow_trainer_compression_ratio",
        "Bytes the pushed rows would take uncompressed (fp32, every row) / bytes sent.", NULL);
    m->residual_rows =
        spw_metrics_gauge_new(r, "sparrow_trainer_residual_rows",
                              "Rows held in the error-feedback residual table.", NULL);
    m->step = spw_metrics_gauge_new(r, "sparrow_trainer_step", "Steps completed.", NULL);
    static const double secs[] = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};
    m->compute_s =
        spw_metrics_histogram_new(r, "sparrow_trainer_compute_seconds",
                                  "Forward, backward and compression time of one micro-batch.",
                                  NULL, secs, sizeof(secs) / sizeof(secs[0]));
    m->pull_wait_s = spw_metrics_histogram_new(
        r, "sparrow_trainer_pull_wait_seconds",
        "Time a micro-batch waited for its rows after its compute could start.", NULL, secs,
        sizeof(secs) / sizeof(secs[0]));
}

static void set_ready(spw_trainer_loop_t *loop, bool ready, const char *why)
{
    if (loop->ready == ready)
        return;
    loop->ready = ready;
    if (loop->conf.http)
        spw_http_set_ready(loop->conf.http, ready, why);
}

spw_trainer_loop_t *spw_trainer_loop_new(const struct spw_trainer_loop_conf *conf,
                                         const struct spw_trainer_hooks *hooks, char *errstr,
                                         size_t errstr_size)
{
    spw_trainer_loop_t *loop = calloc(1, sizeof(*loop));
    if (!loop) {
        snprintf(errstr, errstr_size, "trainer: out of memory");
        return NULL;
    }
    loop->conf = *conf;
    if (hooks)
        loop->hooks = *hooks;
    struct spw_trainer_params *p = &loop->conf.params;
    p->topk.dim = p->model.dim;
    p->topk.pulled = conf->push_pulled;
    loop->dim = p->model.dim;
    if (!conf->in || p->batch < 1 || p->acc_steps < 1 || !(conf->debug_slow_factor >= 1.0)) {
        snprintf(errstr, errstr_size, "trainer: invalid loop settings");
        goto out_free_loop;
    }
    if (conf->metrics)
        metrics_register(loop, conf->metrics);

    /* compute */
    if (!(loop->be = spw_backend_new(p->backend, &p->model, errstr, errstr_size)))
        goto out_destroy;
    if (spw_backend_threads_start(loop->be, p->threads, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    if (p->compress && !(loop->tk = spw_topk_new(&p->topk, loop->be, errstr, errstr_size)))
        goto out_destroy;
    if (p->acc_steps > 1 && !(loop->acc = spw_grad_acc_new(p->model.dim, errstr, errstr_size)))
        goto out_destroy;
    if (!(loop->pv = spw_pv_new(p->eval_window, errstr, errstr_size)))
        goto out_destroy;
    for (int i = 0; i < 2; i++)
        if (!(loop->mbs[i].batch = spw_batch_new(p->batch, 40, errstr, errstr_size)) ||
            spw_batch_set_model(loop->mbs[i].batch, &p->model) != SPW_OK) {
            if (loop->mbs[i].batch)
                snprintf(errstr, errstr_size, "trainer: out of memory");
            goto out_destroy;
        }
    loop->cur = &loop->mbs[0];
    loop->next = &loop->mbs[1];

    /* parameter servers */
    struct spw_ps_client_conf cc = conf->client;
    cc.dim = p->model.dim;
    if (spw_model_describe(&p->model, loop->model_desc, sizeof(loop->model_desc)) < 0) {
        snprintf(errstr, errstr_size, "trainer: the model's description is too long");
        goto out_destroy;
    }
    cc.trainer_id = conf->trainer_id ? conf->trainer_id : derived_trainer_id();
    cc.epoch = conf->epoch ? conf->epoch : (uint64_t)spw_time_wall_ms();
    cc.metrics = conf->metrics;
    if (conf->inproc_shards) {
        if (spw_trn__inproc_open(&loop->inproc, &loop->conf, errstr, errstr_size))
            goto out_destroy;
        cc.stores = loop->inproc.stores;
        cc.n_stores = loop->inproc.n;
    }
    if (!(loop->client = spw_ps_client_new(&cc, errstr, errstr_size)))
        goto out_destroy;
    loop->prefetch = conf->prefetch && !conf->inproc_shards;
    loop->trainer_id = cc.trainer_id;

    /* input */
    spw_err_t err;
    if (strncmp(conf->in, "file:", 5) == 0)
        err = spw_trn__source_open_file(&loop->src, conf->in + 5, &loop->conf, errstr, errstr_size);
    else if (strncmp(conf->in, "kafka://", 8) == 0)
        err = spw_trn__source_open_kafka(&loop->src, conf->in + 8, &loop->conf, &loop->hooks, loop,
                                         errstr, errstr_size);
    else {
        snprintf(errstr, errstr_size, "trainer.in: expected file:PATH or kafka://HOST:PORT/TOPIC");
        err = SPW_ERR_INVALID;
    }
    if (err)
        goto out_destroy;
    SPW_INFO("started",
             "in=\"%s\" model=%s latent_dim=%u backend=%s network=%s threads=%u batch=%u "
             "acc_steps=%u topk=%g "
             "error_feedback=%d fp16=%d shards=%u transport=%s trainer_id=%u epoch=%llu "
             "prefetch=%d sync_rows=%s model_desc=\"%s\"",
             conf->in, spw_model_kind_name(p->model.kind), p->model.latent_dim,
             spw_backend_kind_name(spw_backend_kind(loop->be)), spw_backend_network(loop->be),
             spw_backend_threads(loop->be), p->batch, p->acc_steps,
             p->compress ? p->topk.ratio : 1.0, p->topk.error_feedback, p->topk.fp16,
             spw_ps_client_shards(loop->client), conf->inproc_shards ? "inproc" : "zmq",
             cc.trainer_id, (unsigned long long)cc.epoch, loop->prefetch,
             conf->sync_dense_only ? "dense" : "all", loop->model_desc);
    return loop;

out_destroy:
    spw_trainer_loop_destroy(loop);
    return NULL;
out_free_loop:
    free(loop);
    return NULL;
}

void spw_trainer_loop_destroy(spw_trainer_loop_t *loop)
{
    if (!loop)
        return;
    spw_trn__source_close(&loop->src);
    for (int i = 0; i < 2; i++) {
        struct mb *mb = &loop->mbs[i];
        if (mb->pulling && loop->client)
            spw_ps_client_pull_cancel(loop->client, mb->token);
        spw_batch_destroy(mb->batch);
        free(mb->rows);
        free(mb->versions);
    }
    spw_ps_client_destroy(loop->client);
    spw_trn__inproc_close(&loop->inproc);
    spw_topk_destroy(loop->tk);
    spw_grad_acc_destroy(loop->acc);
    spw_pv_destroy(loop->pv);
    spw_backend_destroy(loop->be);
    free(loop->grads);
    free(loop->counter_grad);
    free(loop->preds);
    free(loop->marks);
    free(loop->echo_pos);
    free(loop->split_keys);
    free(loop->split_versions);
    free(loop->split_values);
    free(loop->split_pulled);
    free(loop);
}

/* ---- offsets ---- */

static spw_err_t push_mark(spw_trainer_loop_t *loop, const struct mark *mk);

static spw_err_t add_mark(void *opaque, int32_t part, int64_t offset, uint32_t skip, uint64_t taken)
{
    spw_trainer_loop_t *loop = opaque;
    return push_mark(loop, &(struct mark){.batch_id = loop->filling_id,
                                          .seq = SEQ_UNSET,
                                          .part = part,
                                          .offset = offset,
                                          .skip = skip,
                                          .taken = taken});
}

static spw_err_t add_smark(void *opaque, int32_t part, uint32_t stopic, int32_t spart,
                           int64_t value)
{
    spw_trainer_loop_t *loop = opaque;
    return push_mark(loop, &(struct mark){.batch_id = loop->filling_id,
                                          .seq = SEQ_UNSET,
                                          .part = part,
                                          .offset = value,
                                          .smark = true,
                                          .stopic = stopic,
                                          .spart = spart});
}

static spw_err_t push_mark(spw_trainer_loop_t *loop, const struct mark *mk)
{
    if (loop->marks_head > 0 && loop->marks_head * 2 >= loop->marks_n) {
        size_t live = loop->marks_n - loop->marks_head;
        memmove(loop->marks, loop->marks + loop->marks_head, live * sizeof(*loop->marks));
        loop->marks_assigned -= loop->marks_head;
        loop->marks_n = live;
        loop->marks_head = 0;
    }
    if (spw_trn__grow((void **)&loop->marks, &loop->marks_cap, loop->marks_n + 1,
                      sizeof(*loop->marks)))
        return SPW_ERR_NOMEM;
    loop->marks[loop->marks_n++] = *mk;
    return SPW_OK;
}

/* The micro-batches up to upto are in a step whose pushes end at seq. */
static void assign_marks(spw_trainer_loop_t *loop, uint64_t upto, uint64_t seq)
{
    while (loop->marks_assigned < loop->marks_n &&
           loop->marks[loop->marks_assigned].batch_id <= upto)
        loop->marks[loop->marks_assigned++].seq = seq;
}

/* Stores the positions whose pushes are acknowledged, in order. */
static spw_err_t store_acked(spw_trainer_loop_t *loop)
{
    uint64_t acked = spw_ps_client_acked_through(loop->client);
    while (loop->marks_head < loop->marks_assigned && loop->marks[loop->marks_head].seq <= acked) {
        const struct mark *mk = &loop->marks[loop->marks_head];
        if (mk->smark) {
            spw_trn__source_store_smark(&loop->src, mk->part, mk->stopic, mk->spart, mk->offset);
            loop->marks_head++;
            continue;
        }
        bool stored = false;
        spw_err_t err =
            spw_trn__source_store(&loop->src, mk->part, mk->offset, mk->skip, mk->taken, &stored);
        if (err)
            return err;
        if (stored) {
            loop->stats.offsets_stored++;
            if (loop->m.offsets_stored)
                spw_counter_inc(loop->m.offsets_stored);
        }
        loop->marks_head++;
    }
    return SPW_OK;
}

/* ---- the shards' hello ---- */

/* Waits for pull token past its slices' timeouts (a shard restarting answers later), saying on
 * /readyz after PULL_NOT_READY_MS that the loop waits for the shards. SPW_ERR_STOPPED leaves the
 * pull in flight (the caller cancels it). */
static spw_err_t await_pull(spw_trainer_loop_t *loop, uint64_t token)
{
    uint64_t t0 = spw_time_mono_ms();
    spw_err_t err;
    while ((err = spw_ps_client_pull_wait(loop->client, token, PULL_WAIT_SLICE_MS)) ==
           SPW_ERR_TIMEOUT)
        if (spw_time_mono_ms() - t0 >= PULL_NOT_READY_MS)
            set_ready(loop, false, "waiting for parameter-server shards");
    return err;
}

/* Before the first pull: every shard's dim against the model's (a shard of pserver.dim=auto takes
 * it), so that a mismatch fails at connect as the configuration error it is, naming both sides.
 * Waits for shards that are not up yet as a pull does. SPW_ERR_INVALID (logged) on a mismatch. */
static spw_err_t hello_shards(spw_trainer_loop_t *loop)
{
    if (loop->conf.inproc_shards)
        return SPW_OK; /* made with the model's dim */
    uint32_t n = spw_ps_client_shards(loop->client), bad = 0;
    uint32_t *dims = calloc(n, sizeof(*dims));
    if (!dims)
        return SPW_ERR_NOMEM;
    uint64_t t0 = spw_time_mono_ms();
    spw_err_t err;
    while ((err = spw_ps_client_hello(loop->client, PULL_WAIT_SLICE_MS, dims, &bad)) ==
           SPW_ERR_TIMEOUT) {
        if (spw_time_mono_ms() - t0 >= PULL_NOT_READY_MS)
            set_ready(loop, false, "waiting for parameter-server shards");
    }
    if (err == SPW_ERR_INVALID) {
        const struct spw_model *m = &loop->conf.params.model;
        char need[96], fix[160];
        if (m->kind == SPW_MODEL_FM)
            snprintf(need, sizeof(need), "dim %u (trainer.latent_dim=%u + 1)", m->dim,
                     m->latent_dim);
        else
            snprintf(need, sizeof(need), "dim %u", m->dim);
        if (dims[bad] == 0)
            snprintf(fix, sizeof(fix), "start the shards with pserver.dim=%u", m->dim);
        else if (dims[bad] >= 2)
            snprintf(
                fix, sizeof(fix),
                "start the shards with pserver.dim=%u (or pserver.dim=auto on an empty shard), "
                "or train trainer.model=fm with trainer.latent_dim=%u",
                m->dim, dims[bad] - 1);
        else
            snprintf(
                fix, sizeof(fix),
                "start the shards with pserver.dim=%u (or pserver.dim=auto on an empty shard), "
                "or train trainer.model=lr",
                m->dim);
        SPW_ERROR("configuration mismatch with the shards",
                  "error=\"trainer.model=%s needs %s but shard %u (%s) serves pserver.dim=%u: "
                  "%s\"",
                  spw_model_kind_name(m->kind), need, bad,
                  spw_ps_client_endpoint(loop->client, bad), dims[bad], fix);
    } else if (err == SPW_OK) {
        SPW_INFO("shards agree on the dim", "shards=%u dim=%u", n, loop->dim);
    }
    free(dims);
    return err == SPW_ERR_STOPPED ? SPW_OK : err; /* a stop: the loop sees it and ends */
}

/* A deep model's dense blocks on the shards against its network: the blocks are pushed together,
 * so once trained (block 0's version > 0) the last of this network's blocks must be trained too
 * and the one after it must not exist. A network of another size (trainer.mlp, trainer.fields,
 * trainer.cross.layers changed between runs) would read another's weights: SPW_ERR_INVALID
 * (logged). Pulls of absent blocks read zero, version 0, and create nothing. */
static spw_err_t check_dense_blocks(spw_trainer_loop_t *loop)
{
    const struct spw_model *m = &loop->conf.params.model;
    if (!spw_model_is_deep(m) || m->dense_blocks == 0)
        return SPW_OK;
    const uint32_t d = m->dense_blocks;
    uint64_t keys[3] = {spw_dense_block_key(0), spw_dense_block_key(d - 1), spw_dense_block_key(d)};
    float *rows = calloc(3 * (size_t)loop->dim, sizeof(float));
    uint32_t v[3] = {0};
    if (!rows)
        return SPW_ERR_NOMEM;
    uint64_t token = 0;
    spw_err_t err = spw_ps_client_pull_start(loop->client, keys, 3, rows, v, &token);
    if (!err)
        err = await_pull(loop, token);
    if (err == SPW_ERR_STOPPED) {
        spw_ps_client_pull_cancel(loop->client, token); /* in flight: not into rows once freed */
        free(rows);
        return SPW_OK; /* a stop: the loop sees it and ends */
    }
    free(rows);
    if (!err && v[0] > 0 && (v[1] == 0 || v[2] > 0)) {
        SPW_ERROR("configuration mismatch with the shards",
                  "error=\"the shards hold the dense blocks of another network: this %s has %u "
                  "(block %u %s): trainer.mlp, trainer.fields or trainer.cross.layers differ "
                  "from the run that trained them; train with those, or on fresh shards\" "
                  "model_desc=\"%s\"",
                  spw_model_kind_name(m->kind), d, v[2] > 0 ? d : d - 1,
                  v[2] > 0 ? "is trained: theirs is larger" : "is not: theirs is smaller",
                  loop->model_desc);
        return SPW_ERR_INVALID;
    }
    return err;
}

/* ---- input ---- */

static uint64_t rejected_total(const spw_trainer_loop_t *loop)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < SPW_REJECT__COUNT; i++)
        n += loop->src.rejected[i];
    return n;
}

/* max_reject_ratio: SPW_ERR_INVALID (logged, the likely cause named) when the input yielded no
 * example or rejected too much. File input: its records at its end. Kafka: examples and rejected
 * records once SPW_TRAINER_REJECT_CHECK_RECORDS were seen (the format is not in question there:
 * ExampleBatch records come from ingest). */
static spw_err_t check_rejects(spw_trainer_loop_t *loop)
{
    uint64_t rejected = rejected_total(loop);
    uint64_t records = loop->src.kafka ? loop->read_examples + rejected : loop->src.records;
    char explain[384] = "", errstr[1024];
    if (loop->src.reader)
        spw_reader_explain(loop->src.reader, "trainer.format", explain, sizeof(explain));
    else
        snprintf(explain, sizeof(explain),
                 "its records should be sparrow.ExampleBatch, as `sparrow ingest` writes them "
                 "(judged over the first %u)",
                 SPW_TRAINER_REJECT_CHECK_RECORDS);
    if (spw_ingest_reject_check(loop->conf.in, records, rejected, loop->src.rejected,
                                loop->conf.max_reject_ratio, "trainer.max_reject_ratio", explain,
                                errstr, sizeof(errstr)) == SPW_OK)
        return SPW_OK;
    SPW_ERROR("input rejected", "error=\"%s\"", errstr);
    return SPW_ERR_INVALID;
}

/* Logs a failure of the input itself (a read error, a damaged gzip file, an unknown format). */
static void log_input_error(spw_trainer_loop_t *loop, spw_err_t err)
{
    if (loop->src.kafka || err == SPW_ERR_STOPPED)
        return; /* the consumer logs its own failures */
    SPW_ERROR("input failed", "in=%s error=\"%s\" detail=\"%s\"", loop->conf.in, spw_err_str(err),
              loop->src.fail[0] ? loop->src.fail : "-");
}

/* fill's three parts: a reading may stop between examples and go on later (staged_read). */
static void fill_begin(spw_trainer_loop_t *loop, struct mb *mb)
{
    spw_batch_reset(mb->batch);
    mb->filled = mb->ready = mb->pulling = false;
    loop->fill_deadline_ms = spw_time_mono_ms() + loop->conf.linger_ms;
}

/* Reads examples into mb until it holds a batch, the input ends or stops, or (yield non-NULL)
 * *yield is set: then *more (non-NULL with yield) is true and fill_more may be called again. */
static spw_err_t fill_more(spw_trainer_loop_t *loop, struct mb *mb, const atomic_bool *yield,
                           bool *more)
{
    const struct spw_trainer_loop_conf *conf = &loop->conf;
    if (more)
        *more = false;
    if (loop->eof)
        return SPW_OK;
    spw_err_t err = SPW_OK;
    while (spw_batch_examples(mb->batch) < conf->params.batch) {
        if (yield && atomic_load_explicit(yield, memory_order_relaxed)) {
            *more = true;
            return SPW_OK;
        }
        if (spw_signal_stop_requested())
            break; /* train on what is read, then stop */
        if (conf->max_examples && loop->read_examples >= conf->max_examples) {
            loop->eof = true;
            break;
        }
        int timeout = 0;
        if (loop->src.kafka) {
            uint64_t now = spw_time_mono_ms();
            timeout = now >= loop->fill_deadline_ms ? 0 : (int)(loop->fill_deadline_ms - now);
        }
        Sparrow__Example *ex;
        err = spw_trn__source_next(&loop->src, timeout, &ex);
        if (err == SPW_ERR_EOF) {
            loop->eof = true;
            err = SPW_OK;
            break;
        }
        if (err == SPW_ERR_TIMEOUT) {
            err = SPW_OK;
            break;
        }
        if (err == SPW_ERR_INVALID) {
            err = SPW_OK;
            if (loop->src.kafka && !loop->reject_checked &&
                loop->read_examples + rejected_total(loop) >= SPW_TRAINER_REJECT_CHECK_RECORDS) {
                loop->reject_checked = true;
                if ((err = check_rejects(loop)))
                    break;
            }
            continue;
        }
        if (err) {
            log_input_error(loop, err);
            break;
        }
        err = spw_batch_add_example(mb->batch, ex);
        if (err == SPW_ERR_INVALID) {
            spw_trn__source_reject(&loop->src);
            err = SPW_OK;
            continue;
        }
        if (err)
            break;
        loop->read_examples++;
        if (loop->src.kafka && !loop->reject_checked &&
            loop->read_examples + rejected_total(loop) >= SPW_TRAINER_REJECT_CHECK_RECORDS) {
            loop->reject_checked = true;
            if ((err = check_rejects(loop)))
                break;
        }
    }
    return err;
}

/* Ends a reading that fill_more left with *more false and returned err. */
static spw_err_t fill_end(spw_trainer_loop_t *loop, struct mb *mb, spw_err_t err)
{
    loop->stats.records = loop->src.records;
    if (err)
        return err;
    mb->id = ++loop->next_mb_id;
    mb->filled = spw_batch_examples(mb->batch) > 0;
    loop->filling_id = mb->id;
    return spw_trn__source_snapshot(&loop->src, add_mark, add_smark, loop);
}

static spw_err_t fill(spw_trainer_loop_t *loop, struct mb *mb)
{
    fill_begin(loop, mb);
    if (loop->eof)
        return SPW_OK;
    return fill_end(loop, mb, fill_more(loop, mb, NULL, NULL));
}

/* ---- pulls ---- */

static spw_err_t start_pull(spw_trainer_loop_t *loop, struct mb *mb)
{
    size_t nu = spw_batch_unique(mb->batch);
    if (spw_trn__grow((void **)&mb->rows, &mb->cap_rows, nu * loop->dim, sizeof(float)) ||
        spw_trn__grow((void **)&mb->versions, &mb->cap_versions, nu, sizeof(uint32_t)))
        return SPW_ERR_NOMEM;
    spw_err_t err = spw_ps_client_pull_start(loop->client, spw_batch_keys(mb->batch), nu, mb->rows,
                                             mb->versions, &mb->token);
    if (err)
        return err;
    mb->pulling = true;
    return SPW_OK;
}

static spw_err_t wait_pull(spw_trainer_loop_t *loop, struct mb *mb)
{
    uint64_t t0 = spw_time_mono_ns();
    spw_err_t err = await_pull(loop, mb->token);
    uint64_t waited = spw_time_mono_ns() - t0;
    if (err == SPW_ERR_STOPPED)
        return err; /* still in flight: cancelled by the caller */
    mb->pulling = false;
    if (err)
        return err;
    mb->ready = true;
    set_ready(loop, true, NULL);
    loop->step_pull_ns += waited;
    loop->stats.pull_wait_ns += waited;
    if (loop->m.pull_wait_s)
        spw_histogram_observe(loop->m.pull_wait_s, (double)waited * 1e-9);
    return SPW_OK;
}

static void forget_pull(spw_trainer_loop_t *loop, struct mb *mb)
{
    if (mb->pulling)
        spw_ps_client_pull_cancel(loop->client, mb->token);
    if (mb->echo_hi)
        spw_ps_client_cancel_echo(loop->client, mb->echo_lo, mb->echo_hi);
    mb->pulling = mb->ready = false;
    mb->echo_lo = mb->echo_hi = 0;
}

/* Before a micro-batch is computed: the pushes that refresh its rows are acknowledged (their
 * rows written in), so it reads this trainer's own updates. */
static spw_err_t wait_echo(spw_trainer_loop_t *loop, struct mb *mb)
{
    if (!mb->echo_hi)
        return SPW_OK;
    uint64_t t0 = spw_time_mono_ns();
    spw_err_t err = spw_ps_client_wait_acked(loop->client, mb->echo_hi, -1);
    uint64_t waited = spw_time_mono_ns() - t0;
    loop->step_pull_ns += waited;
    loop->stats.pull_wait_ns += waited;
    if (err == SPW_ERR_STOPPED) /* the rows are not refreshed: not computed (finish drops it) */
        forget_pull(loop, mb);
    mb->echo_lo = mb->echo_hi = 0;
    return err;
}

/* ---- pushes ---- */

/* Pushes a set in frames below the frame limit. to (may be NULL): every row of the set is one the
 * prefetched micro-batch `to` holds, at to's unique index echo_pos[i]; the acks write them back
 * into it. examples: counted for the shards' rates (first frame); weight: the step_examples of a
 * tagged push. *last_seq gets the seq of the last push sent. */
static spw_err_t push_frames_weighted(spw_trainer_loop_t *loop, const struct spw_push_set *set,
                                      uint64_t examples, uint64_t weight, int64_t max_event,
                                      uint64_t step, struct mb *to, const uint32_t *echo_pos,
                                      uint64_t *last_seq)
{
    size_t row_bytes =
        SPW_TRN_PUSH_ROW_OVERHEAD + (size_t)loop->dim * sizeof(float) * (set->pulled ? 2 : 1);
    size_t frame = loop->conf.client.max_frame;
    size_t per = frame > PUSH_FRAME_SLACK + row_bytes ? (frame - PUSH_FRAME_SLACK) / row_bytes : 1;
    for (size_t off = 0; off < set->n; off += per) {
        size_t n = set->n - off < per ? set->n - off : per;
        struct spw_ps_push push = {
            .n = n,
            .keys = set->keys + off,
            .versions = set->versions ? set->versions + off : NULL,
            .grads = set->values ? set->values + off * set->dim : NULL,
            .grads_f16 = set->values_f16 ? set->values_f16 + off * set->dim : NULL,
            .fp16 = set->fp16,
            .pulled = set->pulled ? set->pulled + off * set->dim : NULL,
            .max_event_time_ms = max_event == INT64_MIN ? 0 : max_event,
            .examples = off == 0 ? (uint32_t)(examples > UINT32_MAX ? UINT32_MAX : examples) : 0,
            .step = step,
            .step_examples = (uint32_t)(weight > UINT32_MAX ? UINT32_MAX : weight),
            .echo_pos = to ? echo_pos + off : NULL,
            .echo_rows = to ? to->rows : NULL,
            .echo_versions = to ? to->versions : NULL,
        };
        uint64_t seq = 0;
        spw_err_t err;
        /* a stop request cuts the wait for window room short: drain (the grace period) and
         * send, so that the step is not lost */
        while ((err = spw_ps_client_push(loop->client, &push, &seq)) == SPW_ERR_STOPPED) {
            if ((err = spw_ps_client_drain(loop->client, loop->conf.grace_ms)))
                return err;
        }
        if (err)
            return err;
        *last_seq = seq;
        loop->stats.rows_pushed += n;
        if (to) {
            if (!to->echo_lo)
                to->echo_lo = seq;
            to->echo_hi = seq;
        }
    }
    return SPW_OK;
}

static spw_err_t push_frames(spw_trainer_loop_t *loop, const struct spw_push_set *set,
                             uint64_t examples, int64_t max_event, uint64_t step, struct mb *to,
                             const uint32_t *echo_pos, uint64_t *last_seq)
{
    return push_frames_weighted(loop, set, examples, examples, max_event, step, to, echo_pos,
                                last_seq);
}

/* Splits set into the loop's split buffers: the rows whose key `front` accepts first (head),
 * the others after them (tail; their order does not matter). front(ctx, key, &pos): with
 * keep_pos, pos is written to loop->echo_pos at the head row's index. */
typedef bool (*split_front_fn)(const void *ctx, uint64_t key, uint32_t *pos);

static spw_err_t split_set(spw_trainer_loop_t *loop, const struct spw_push_set *set,
                           split_front_fn front, const void *ctx, bool keep_pos,
                           struct spw_push_set *head, struct spw_push_set *tail)
{
    const size_t n = set->n, dim = set->dim;
    const size_t vbytes = set->fp16 ? sizeof(uint16_t) : sizeof(float);
    if ((keep_pos &&
         spw_trn__grow((void **)&loop->echo_pos, &loop->cap_echo_pos, n, sizeof(uint32_t))) ||
        spw_trn__grow((void **)&loop->split_keys, &loop->cap_split_keys, n, sizeof(uint64_t)) ||
        spw_trn__grow((void **)&loop->split_versions, &loop->cap_split_versions, n,
                      sizeof(uint32_t)) ||
        spw_trn__grow((void **)&loop->split_values, &loop->cap_split_values, n * dim, vbytes) ||
        (set->pulled && spw_trn__grow((void **)&loop->split_pulled, &loop->cap_split_pulled,
                                      n * dim, sizeof(float))))
        return SPW_ERR_NOMEM;
    size_t a = 0, b = n;
    const uint8_t *src =
        set->fp16 ? (const uint8_t *)set->values_f16 : (const uint8_t *)set->values;
    uint8_t *dst = loop->split_values;
    for (size_t i = 0; i < n; i++) {
        uint32_t pos = 0;
        bool in_head = front(ctx, set->keys[i], &pos);
        size_t j = in_head ? a++ : --b;
        if (in_head && keep_pos)
            loop->echo_pos[j] = pos;
        loop->split_keys[j] = set->keys[i];
        loop->split_versions[j] = set->versions ? set->versions[i] : 0;
        memcpy(dst + j * dim * vbytes, src + i * dim * vbytes, dim * vbytes);
        if (set->pulled)
            memcpy(loop->split_pulled + j * dim, set->pulled + i * dim, dim * sizeof(float));
    }
    *head = (struct spw_push_set){
        .n = a,
        .dim = set->dim,
        .fp16 = set->fp16,
        .keys = loop->split_keys,
        .versions = loop->split_versions,
        .values = set->fp16 ? NULL : (const float *)dst,
        .values_f16 = set->fp16 ? (const uint16_t *)dst : NULL,
        .pulled = set->pulled ? loop->split_pulled : NULL,
    };
    *tail = *head;
    tail->n = n - a;
    tail->keys += a;
    tail->versions += a;
    if (tail->pulled)
        tail->pulled += a * dim;
    if (tail->values)
        tail->values += a * dim;
    else
        tail->values_f16 += a * dim;
    return SPW_OK;
}

static bool in_batch(const void *ctx, uint64_t key, uint32_t *pos)
{
    *pos = spw_trn__keyidx_find(&((const struct mb *)ctx)->batch->dedup, key);
    return *pos != SPW_TRN__NONE;
}

static bool is_dense_param(const void *ctx, uint64_t key, uint32_t *pos)
{
    (void)ctx, (void)pos;
    return key == SPW_TRN_BIAS_KEY || spw_key_is_dense(key);
}

/* Pushes a set. With an echo target (loop->echo_to), the rows it shares go first, in pushes of
 * their own that ask for the rows back: the acknowledgement the next micro-batch waits for then
 * comes as soon as the shard applied those, while it applies the rest during the next compute. */
static spw_err_t push_set(spw_trainer_loop_t *loop, const struct spw_push_set *set,
                          uint64_t examples, int64_t max_event, uint64_t step, uint64_t *last_seq)
{
    struct mb *to = loop->echo_to;
    if (!to)
        return push_frames(loop, set, examples, max_event, step, NULL, NULL, last_seq);
    struct spw_push_set shared, rest;
    spw_err_t err = split_set(loop, set, in_batch, to, true, &shared, &rest);
    if (!err)
        err = push_frames(loop, &shared, examples, max_event, step, to, loop->echo_pos, last_seq);
    if (!err)
        err = push_frames(loop, &rest, shared.n ? 0 : examples, max_event, step, NULL, NULL,
                          last_seq);
    return err;
}

/* trainer.sync.rows = dense: of a two-phase step's set, the bias and the dense blocks go tagged
 * with the step (weighted by the step's examples, applied at the commit), the other rows untagged
 * (applied at once, counted for the rates). Two-phase steps never echo (loop->echo_to is NULL),
 * so the split buffers are free. */
static spw_err_t push_dense_tagged(spw_trainer_loop_t *loop, const struct spw_push_set *set,
                                   uint64_t examples, int64_t max_event, uint64_t step,
                                   uint64_t *last_seq)
{
    struct spw_push_set dense, rows;
    spw_err_t err = split_set(loop, set, is_dense_param, NULL, false, &dense, &rows);
    if (!err)
        err =
            push_frames_weighted(loop, &dense, 0, examples, max_event, step, NULL, NULL, last_seq);
    if (!err && rows.n)
        err = push_frames(loop, &rows, examples, max_event, 0, NULL, NULL, last_seq);
    return err;
}

/* Compresses (when configured) and pushes n gradient rows; pulled (NULL: not sent) are the row
 * values they were computed from. */
static spw_err_t push_rows(spw_trainer_loop_t *loop, const uint64_t *keys, float *grads,
                           const uint32_t *versions, const float *pulled, size_t n,
                           uint64_t examples, int64_t max_event, uint64_t step, uint64_t *last_seq)
{
    struct spw_push_set set = {.n = n,
                               .dim = loop->dim,
                               .keys = keys,
                               .versions = versions,
                               .values = grads,
                               .pulled = pulled};
    if (loop->tk) {
        spw_err_t err = spw_topk_compress_pulled(loop->tk, keys, grads, versions, pulled, n, &set);
        if (err)
            return err;
    }
    if (step && loop->conf.sync_dense_only)
        return push_dense_tagged(loop, &set, examples, max_event, step, last_seq);
    return push_set(loop, &set, examples, max_event, step, last_seq);
}

/* The step's example count to the counter key (conf.counter_key), uncompressed. */
static spw_err_t push_counter(spw_trainer_loop_t *loop, uint64_t examples, uint64_t step,
                              uint64_t *last_seq)
{
    static const uint32_t version0 = 0;
    if (!loop->counter_grad &&
        !(loop->counter_grad = calloc(loop->dim ? loop->dim : 1, sizeof(float))))
        return SPW_ERR_NOMEM;
    loop->counter_grad[0] = (float)examples;
    struct spw_push_set set = {.n = 1,
                               .dim = loop->dim,
                               .keys = &loop->conf.counter_key,
                               .versions = &version0,
                               .values = loop->counter_grad};
    return push_set(loop, &set, step ? examples : 0, INT64_MIN, step, last_seq);
}

static void step_reset(spw_trainer_loop_t *loop)
{
    loop->micro = 0;
    loop->step_examples = 0;
    loop->step_loss = 0.0;
    loop->step_max_event = INT64_MIN;
    loop->step_compute_ns = loop->step_pull_ns = 0;
}

/* The step's gradient (the accumulator, or mb's) to the shards; *seq: the last push's. */
static spw_err_t step_push(spw_trainer_loop_t *loop, struct mb *mb, uint64_t tag, uint64_t *seq)
{
    spw_err_t err;
    if (loop->acc)
        err = push_rows(loop, spw_grad_acc_keys(loop->acc), spw_grad_acc_grads(loop->acc),
                        spw_grad_acc_versions(loop->acc), spw_grad_acc_pulled(loop->acc),
                        spw_grad_acc_rows(loop->acc), loop->step_examples, loop->step_max_event,
                        tag, seq);
    else
        err = push_rows(loop, spw_batch_keys(mb->batch), loop->grads, mb->versions,
                        loop->conf.push_pulled ? mb->rows : NULL, spw_batch_unique(mb->batch),
                        loop->step_examples, loop->step_max_event, tag, seq);
    loop->echo_to = NULL;
    if (loop->acc)
        spw_grad_acc_reset(loop->acc);
    return err;
}

/* The rest of end_step once step_push returned err (seq, after push_ns): the counter push, the
 * offset marks, the step's accounting and after_step. before: stats.rows_pushed before the
 * step's push. */
static spw_err_t end_step_rest(spw_trainer_loop_t *loop, bool hooks, uint64_t tag, uint64_t before,
                               uint64_t seq, spw_err_t err, uint64_t push_ns)
{
    uint64_t t0 = spw_time_mono_ns();
    if (!err && loop->conf.counter_key && loop->step_examples)
        err = push_counter(loop, loop->step_examples, tag, &seq);
    if (err) {
        /* the compressor has taken the gradient in: a retry would count it twice */
        step_reset(loop);
        return err;
    }
    uint64_t dt = push_ns + (spw_time_mono_ns() - t0);
    loop->step_compute_ns += dt;
    loop->stats.compute_ns += dt;
    /* with nothing sent, the step's offsets wait for every earlier push */
    uint64_t upto_seq = seq ? seq : spw_ps_client_next_seq(loop->client) - 1;
    assign_marks(loop, loop->step_last_mb, upto_seq);
    struct spw_trainer_step_info info = {
        .step = loop->step,
        .seq = seq,
        .micro = loop->micro,
        .examples = loop->step_examples,
        .loss_sum = loop->step_loss,
        .rows_pushed = (size_t)(loop->stats.rows_pushed - before),
        .compute_ns = loop->step_compute_ns,
        .pull_wait_ns = loop->step_pull_ns,
    };
    loop->step++;
    loop->stats.steps++;
    if (loop->m.steps) {
        spw_counter_inc(loop->m.steps);
        spw_gauge_set(loop->m.step, (double)loop->step);
    }
    step_reset(loop);
    if (!hooks || !loop->hooks.after_step)
        return SPW_OK;
    uint64_t h0 = spw_time_mono_ns();
    err = loop->hooks.after_step(loop->hooks.opaque, loop, &info);
    loop->slow_hook_ns += spw_time_mono_ns() - h0;
    return err;
}

/* Ends the step: pushes its gradient (the accumulator, or mb's), assigns its offset marks, calls
 * after_step when hooks is set. A step ended outside the hooks (a checkpoint, the end of a run) is
 * not one the coordinator clocks, so its pushes apply at once. */
static spw_err_t end_step(spw_trainer_loop_t *loop, struct mb *mb, bool hooks)
{
    uint64_t t0 = spw_time_mono_ns();
    uint64_t before = loop->stats.rows_pushed;
    uint64_t seq = 0;
    uint64_t tag = hooks ? loop->step_tag : 0;
    /* the next micro-batch's rows were pulled before this push: its acknowledgement brings the
     * pushed rows back into them, so that the trainer is never stale against itself (two-phase
     * steps pull the next step's rows after the commit instead) */
    struct mb *next = loop->next;
    loop->echo_to = loop->conf.fresh_reads && !tag && next != mb && next->filled &&
                            (next->pulling || next->ready)
                        ? next
                        : NULL;
    spw_err_t err = step_push(loop, mb, tag, &seq);
    return end_step_rest(loop, hooks, tag, before, seq, err, spw_time_mono_ns() - t0);
}

/* Straggler injection: sleeps (slow_factor - 1) times the loop's own work since the last call
 * (reading, pulling, computing, pushing: the time since then less the hooks' waits), so that
 * the whole loop, not only its compute, runs slow_factor times slower. */
static void slow_down(spw_trainer_loop_t *loop)
{
    uint64_t now = spw_time_mono_ns();
    if (loop->conf.debug_slow_factor > 1.0) {
        uint64_t span = now - loop->slow_mark_ns;
        uint64_t work = span > loop->slow_hook_ns ? span - loop->slow_hook_ns : 0;
        loop->slow_debt_ns += (uint64_t)((double)work * (loop->conf.debug_slow_factor - 1.0));
        if (loop->slow_debt_ns >= 1000000u) {
            spw_time_sleep_ms(loop->slow_debt_ns / 1000000u);
            uint64_t slept = spw_time_mono_ns() - now;
            loop->slow_debt_ns = loop->slow_debt_ns > slept ? loop->slow_debt_ns - slept : 0;
            loop->stats.slowed_ns += slept;
            now += slept;
        }
    }
    loop->slow_mark_ns = now;
    loop->slow_hook_ns = 0;
}

/* ---- compute ---- */

/* Starts the forward and backward of mb (on the compute threads when trainer.threads > 1, else
 * here, to the end); compute_finish completes it. */
static spw_err_t compute_start(spw_trainer_loop_t *loop, struct mb *mb)
{
    const spw_batch_t *b = mb->batch;
    const size_t n = spw_batch_examples(b), nu = spw_batch_unique(b);
    if (spw_trn__grow((void **)&loop->grads, &loop->cap_grads, nu * loop->dim, sizeof(float)) ||
        spw_trn__grow((void **)&loop->preds, &loop->cap_preds, n, sizeof(float)))
        return SPW_ERR_NOMEM;
    loop->compute_t0 = spw_time_mono_ns();
    float scale = (float)(1.0 / ((double)n * loop->conf.params.acc_steps));
    spw_backend_forward_backward_start(loop->be, b, mb->rows, scale, loop->preds, loop->grads);
    return SPW_OK;
}

/* Whether the loop reads its next micro-batch while this one computes. */
static bool reads_ahead(const spw_trainer_loop_t *loop)
{
    return (spw_backend_threads(loop->be) >= 2 || spw_backend_computes_async(loop->be)) &&
           !loop->next->filled && !loop->eof && !loop->stopped && !spw_signal_stop_requested();
}

/* While the compute threads (or the device) work on cur, the next micro-batch is read (decoded
 * and de-duplicated into next's batch), the part of the loop that would otherwise leave them
 * idle. Only its
 * reading: the pull stays where prefetch (or its absence) puts it. With prefetch on, next is
 * already filled here. */
static spw_err_t read_ahead(spw_trainer_loop_t *loop)
{
    loop->ahead_ns = 0;
    if (!reads_ahead(loop))
        return SPW_OK;
    uint64_t t0 = spw_time_mono_ns();
    spw_err_t err = fill(loop, loop->next);
    loop->ahead_ns = spw_time_mono_ns() - t0;
    return err;
}

static void compute_account(spw_trainer_loop_t *loop, struct mb *mb, double loss, uint64_t dt);

static spw_err_t compute_finish(spw_trainer_loop_t *loop, struct mb *mb)
{
    const spw_batch_t *b = mb->batch;
    const size_t n = spw_batch_examples(b), nu = spw_batch_unique(b);
    double loss = 0.0;
    spw_err_t err = spw_backend_forward_backward_finish(loop->be, &loss);
    if (err)
        return err;
    /* the predictions came from rows not yet trained on this batch: progressive validation */
    spw_pv_add(loop->pv, loop->preds, spw_batch_labels(b), spw_batch_oracle(b), n);
    if (loop->acc &&
        (err = spw_grad_acc_add_pulled(loop->acc, spw_batch_keys(b), loop->grads, mb->versions,
                                       loop->conf.push_pulled ? mb->rows : NULL, nu)))
        return err;
    uint64_t dt =
        spw_time_mono_ns() - loop->compute_t0 - loop->ahead_ns; /* reading is not compute */
    compute_account(loop, mb, loss, dt);
    return SPW_OK;
}

/* A computed micro-batch's accounting: loss (summed), dt (its compute, ns). */
static void compute_account(spw_trainer_loop_t *loop, struct mb *mb, double loss, uint64_t dt)
{
    const spw_batch_t *b = mb->batch;
    const size_t n = spw_batch_examples(b);
    mb->filled = false;
    mb->ready = false;
    loop->micro++;
    loop->step_examples += n;
    loop->step_loss += loss;
    int64_t ev = spw_batch_max_event_time(b);
    if (ev > loop->step_max_event)
        loop->step_max_event = ev;
    loop->step_last_mb = mb->id;
    loop->step_compute_ns += dt;
    loop->stats.compute_ns += dt;
    loop->stats.examples += n;
    loop->stats.micro_batches++;
    if (loop->m.examples) {
        spw_counter_add(loop->m.examples, n);
        spw_counter_inc(loop->m.micro_batches);
        spw_histogram_observe(loop->m.compute_s, (double)dt * 1e-9);
    }
}

/* ---- staged micro-batches ---- */

static spw_err_t hook_result(spw_trainer_loop_t *loop, spw_err_t err);

/*
 * With compute threads and in-process shards (whose pull and push are the loop's own work, not a
 * wait), a micro-batch's pull and its step's push run on compute thread 0 around the forward and
 * backward (spw_backend_forward_backward_start_staged), in the order one thread runs them, while
 * compute thread 1 reads the next micro-batch beside the pull (staged_read) and scores this one
 * beside the push (staged_score), then reads what it had not read when the pull was done; this
 * thread only waits. What each touches:
 * - pull and push (thread 0): mb (its rows, versions, pull state), the client and its stores,
 *   grads, the push buffers (tk, split_*, echo_*), stats.rows_pushed;
 * - the reading (thread 1, beside the pull and the push): the source, the other mb, the marks,
 *   read_examples, eof, fill_deadline_ms, stats.records;
 * - the scoring (thread 1, beside the push): pv, preds; then the population of the stores' slab
 *   ahead of their rows (inproc.ahead, noted by thread 0 after the pull; the kernel's page
 *   faults, no store memory changed).
 * The sets are disjoint; finish's wait orders all of it before this thread reads it.
 */
static bool can_stage(const spw_trainer_loop_t *loop, const struct mb *cur)
{
    return spw_backend_threads(loop->be) >= 2 && loop->inproc.stores && !loop->src.kafka &&
           !loop->acc && !loop->prefetch && !cur->echo_hi && !cur->pulling && !loop->next->filled &&
           !loop->eof && !loop->stopped && !spw_signal_stop_requested();
}

static spw_err_t staged_pre(void *ctx)
{
    struct staged *st = ctx;
    spw_trainer_loop_t *loop = st->loop;
    struct mb *mb = st->mb;
    spw_err_t err = mb->ready ? SPW_OK : start_pull(loop, mb); /* rows already grown: no alloc */
    while (!err && mb->pulling &&
           (err = spw_ps_client_pull_wait(loop->client, mb->token, PULL_WAIT_SLICE_MS)) ==
               SPW_ERR_TIMEOUT)
        err = SPW_OK; /* in-process: answered at once; the loop stays for the contract */
    if (!err && mb->pulling) {
        mb->pulling = false;
        mb->ready = true;
    }
    st->pulled_ns = spw_time_mono_ns();
    atomic_store_explicit(&loop->staged_pulled, true, memory_order_relaxed);
    spw_trn__inproc_note_ahead(&loop->inproc); /* for staged_score to populate */
    return err;
}

/* Reads the next micro-batch until the pull is done (staged_pulled), leaving the rest of it to
 * staged_score: the pull and the push together are about as long as the reading and the
 * scoring, where the pull alone may be shorter. Where it yields changes nothing in the batch. */
static void staged_read(void *ctx)
{
    struct staged *st = ctx;
    spw_trainer_loop_t *loop = st->loop;
    if (!reads_ahead(loop))
        return;
    fill_begin(loop, loop->next);
    bool more;
    spw_err_t err = fill_more(loop, loop->next, &loop->staged_pulled, &more);
    st->reading = more;
    if (!more)
        st->read_err = fill_end(loop, loop->next, err);
}

static spw_err_t staged_post(void *ctx)
{
    struct staged *st = ctx;
    spw_trainer_loop_t *loop = st->loop;
    st->posted_ns = spw_time_mono_ns();
    /* step_push with the step's figures as compute_account will leave them */
    uint64_t examples = loop->step_examples, seq = 0;
    int64_t max_event = loop->step_max_event;
    loop->step_examples = st->examples;
    loop->step_max_event = st->max_event;
    loop->echo_to = NULL; /* next is being read, not pulled (can_stage: no prefetch) */
    st->push_err = step_push(loop, st->mb, st->tag, &seq);
    loop->step_examples = examples;
    loop->step_max_event = max_event;
    st->seq = seq;
    st->pushed_ns = spw_time_mono_ns();
    atomic_store_explicit(&loop->staged_pushed, true, memory_order_relaxed);
    return SPW_OK; /* a push error is end_step's to handle (push_err) */
}

/* The rest of a reading that staged_read yielded, if any. */
static void staged_read_rest(struct staged *st)
{
    if (!st->reading)
        return;
    spw_err_t err = fill_more(st->loop, st->loop->next, NULL, NULL);
    st->read_err = fill_end(st->loop, st->loop->next, err);
    st->reading = false;
}

static void staged_score(void *ctx)
{
    struct staged *st = ctx;
    const spw_batch_t *b = st->mb->batch;
    spw_pv_add(st->loop->pv, st->loop->preds, spw_batch_labels(b), spw_batch_oracle(b),
               spw_batch_examples(b));
    staged_read_rest(st);
    /* while thread 0 pushes: the pages the next pulls' new rows will be written to, faulted in
     * (and zeroed) here rather than on thread 0 in the middle of a pull */
    spw_trn__inproc_populate_ahead(&st->loop->inproc, &st->loop->staged_pushed);
}

/* One micro-batch that ends its step (acc_steps 1), staged; see can_stage. */
static spw_err_t staged_step(spw_trainer_loop_t *loop, struct mb *mb)
{
    const spw_batch_t *b = mb->batch;
    const size_t n = spw_batch_examples(b), nu = spw_batch_unique(b);
    if (spw_trn__grow((void **)&loop->grads, &loop->cap_grads, nu * loop->dim, sizeof(float)) ||
        spw_trn__grow((void **)&loop->preds, &loop->cap_preds, n, sizeof(float)) ||
        spw_trn__grow((void **)&mb->rows, &mb->cap_rows, nu * loop->dim, sizeof(float)) ||
        spw_trn__grow((void **)&mb->versions, &mb->cap_versions, nu, sizeof(uint32_t)))
        return SPW_ERR_NOMEM;
    struct staged *st = &loop->staged;
    int64_t ev = spw_batch_max_event_time(b);
    *st = (struct staged){
        .loop = loop,
        .mb = mb,
        .tag = loop->step_tag,
        .examples = loop->step_examples + n,
        .max_event = ev > loop->step_max_event ? ev : loop->step_max_event,
        .t0 = spw_time_mono_ns(),
    };
    atomic_store_explicit(&loop->staged_pulled, false, memory_order_relaxed);
    atomic_store_explicit(&loop->staged_pushed, false, memory_order_relaxed);
    loop->stages = (struct spw_backend_stages){.pre = staged_pre,
                                               .post = staged_post,
                                               .beside_pre = staged_read,
                                               .beside_post = staged_score,
                                               .ctx = st};
    const uint64_t before = loop->stats.rows_pushed;
    float scale = (float)(1.0 / ((double)n * loop->conf.params.acc_steps));
    spw_backend_forward_backward_start_staged(loop->be, b, mb->rows, scale, loop->preds,
                                              loop->grads, &loop->stages);
    double loss = 0.0;
    spw_err_t err = spw_backend_forward_backward_finish(loop->be, &loss);
    staged_read_rest(st); /* a failed batch skips staged_score */
    if (err)
        return err; /* a failed pull leaves mb pulling or not: finish() drops it */
    uint64_t waited = st->pulled_ns - st->t0;
    set_ready(loop, true, NULL);
    loop->step_pull_ns += waited;
    loop->stats.pull_wait_ns += waited;
    if (loop->m.pull_wait_s)
        spw_histogram_observe(loop->m.pull_wait_s, (double)waited * 1e-9);
    compute_account(loop, mb, loss, st->posted_ns - st->pulled_ns);
    /* the push went out: its step is ended here even when the reading failed */
    err = hook_result(loop, end_step_rest(loop, true, st->tag, before, st->seq, st->push_err,
                                          st->pushed_ns - st->posted_ns));
    return err ? err : st->read_err;
}

/* ---- reports ---- */

static void report(spw_trainer_loop_t *loop, bool log_line, const char *msg)
{
    uint64_t now = spw_time_mono_ns();
    double dt = (double)(now - loop->last_report_ns) * 1e-9;
    double rate = dt > 0 ? (double)(loop->stats.examples - loop->last_report_examples) / dt : 0.0;
    loop->last_report_ns = now;
    loop->last_report_examples = loop->stats.examples;
    struct spw_pv_report r;
    spw_pv_report(loop->pv, &r);
    struct spw_ps_client_stats cs;
    spw_ps_client_get_stats(loop->client, &cs);
    double bpe = loop->stats.examples ? (double)cs.bytes_pushed / (double)loop->stats.examples : 0;
    struct spw_topk_stats ts = {0};
    if (loop->tk)
        spw_topk_get_stats(loop->tk, &ts);
    double compression = ts.bytes_sent ? (double)ts.bytes_dense / (double)ts.bytes_sent : 1.0;
    double bayes = r.oracle_window.count ? r.oracle_window.logloss : NAN;
    struct loop_metrics *m = &loop->m;
    if (m->window_logloss) {
        spw_gauge_set(m->window_logloss, r.window.logloss);
        spw_gauge_set(m->window_auc, r.window.auc);
        spw_gauge_set(m->cum_logloss, r.cumulative.logloss);
        spw_gauge_set(m->cum_auc, r.cumulative.auc);
        spw_gauge_set(m->bayes_window_logloss, bayes);
        spw_gauge_set(m->bayes_window_auc, r.oracle_window.count ? r.oracle_window.auc : NAN);
        spw_gauge_set(m->bayes_cum_logloss,
                      r.oracle_cumulative.count ? r.oracle_cumulative.logloss : NAN);
        spw_gauge_set(m->const_window_logloss, r.const_window);
        spw_gauge_set(m->ex_per_s, rate);
        spw_gauge_set(m->bytes_per_example, bpe);
        spw_gauge_set(m->compression, compression);
        spw_gauge_set(m->residual_rows, (double)ts.residual_rows);
    }
    if (!log_line)
        return;
    uint64_t rejected = 0;
    for (unsigned i = 0; i < SPW_REJECT__COUNT; i++)
        rejected += loop->src.rejected[i];
    SPW_INFO(msg,
             "examples=%llu ex_per_s=%.0f window_logloss=%.5f window_auc=%.4f bayes_logloss=%.5f "
             "const_logloss=%.5f cumulative_logloss=%.5f bytes_per_example=%.1f "
             "compression=%.2f residual_rows=%zu steps=%llu rejected=%llu window=%u",
             (unsigned long long)loop->stats.examples, rate, r.window.logloss, r.window.auc, bayes,
             r.const_window, r.cumulative.logloss, bpe, compression, ts.residual_rows,
             (unsigned long long)loop->stats.steps, (unsigned long long)rejected, cs.window);
}

static spw_err_t periodic(spw_trainer_loop_t *loop)
{
    uint64_t now = spw_time_mono_ns();
    uint64_t every = loop->conf.log_interval_ms ? loop->conf.log_interval_ms : REPORT_DEFAULT_MS;
    if ((now - loop->last_report_ns) / 1000000u >= every)
        report(loop, loop->conf.log_interval_ms > 0, "progress");
    if (loop->src.kafka && loop->conf.commit_interval_ms &&
        (now - loop->last_commit_ns) / 1000000u >= loop->conf.commit_interval_ms) {
        loop->last_commit_ns = now;
        spw_err_t err = spw_trn__source_commit(&loop->src, false);
        if (err)
            SPW_LOG_RATELIMITED(SPW_LOG_WARN, 10000, "offset commit failed", "error=\"%s\"",
                                spw_err_str(err));
    }
    return SPW_OK;
}

/* Pushes every residual of the compressor (checkpoints, the end of a run). */
static spw_err_t flush_residuals(spw_trainer_loop_t *loop)
{
    if (!loop->tk)
        return SPW_OK;
    struct spw_ps_client_stats before, after;
    spw_ps_client_get_stats(loop->client, &before);
    struct spw_push_set set;
    uint64_t seq = 0;
    spw_err_t err = spw_topk_flush(loop->tk, &set);
    if (!err)
        err = push_set(loop, &set, 0, 0, 0, &seq);
    spw_ps_client_get_stats(loop->client, &after);
    loop->stats.bytes_flushed += after.bytes_pushed - before.bytes_pushed;
    return err;
}

/* ---- the public calls ---- */

spw_err_t spw_trainer_loop_checkpoint(spw_trainer_loop_t *loop, int64_t timeout_ms,
                                      struct spw_trainer_position *positions, size_t n_max,
                                      size_t *n)
{
    spw_err_t err;
    if (loop->micro > 0 && (err = end_step(loop, loop->cur, false)))
        return err;
    if ((err = flush_residuals(loop)))
        return err;
    if ((err = spw_ps_client_flush(loop->client, timeout_ms)))
        return err;
    if ((err = store_acked(loop)))
        return err;
    /* micro-batches read but not computed see the rows as of the checkpoint */
    spw_trainer_loop_drop_rows(loop);
    *n = spw_trn__source_positions(&loop->src, positions, n_max);
    return SPW_OK;
}

size_t spw_trainer_loop_marks(const spw_trainer_loop_t *loop, struct spw_trainer_mark *out,
                              size_t n_max)
{
    return spw_trn__source_smarks(&loop->src, out, n_max);
}

spw_err_t spw_trainer_loop_set_mark(spw_trainer_loop_t *loop, const struct spw_trainer_mark *mark)
{
    int32_t p = mark->partition;
    if (!loop->src.kafka || p < 0 || (size_t)p >= loop->src.n_parts ||
        !loop->src.parts[p].assigned || !mark->source_topic)
        return SPW_OK;
    return spw_trn__source_set_smark(&loop->src, p, mark->source_topic, mark->source_partition,
                                     mark->offset);
}

void spw_trainer_loop_set_step(spw_trainer_loop_t *loop, uint64_t step)
{
    loop->step_tag = step;
}

uint32_t spw_trainer_loop_trainer_id(const spw_trainer_loop_t *loop)
{
    return loop->trainer_id;
}

void spw_trainer_loop_drop_rows(spw_trainer_loop_t *loop)
{
    for (int i = 0; i < 2; i++)
        if (loop->mbs[i].filled)
            forget_pull(loop, &loop->mbs[i]);
}

spw_err_t spw_trainer_loop_inproc_checkpoint(spw_trainer_loop_t *loop, const char *root,
                                             uint64_t epoch, struct spw_ps_checkpoint_info *infos,
                                             size_t n_max, size_t *n, char *errstr,
                                             size_t errstr_size)
{
    *n = loop->inproc.n;
    if (loop->inproc.n == 0 || n_max < loop->inproc.n) {
        snprintf(errstr, errstr_size, "%s",
                 loop->inproc.n ? "too many shards" : "no in-process shards");
        return SPW_ERR_INVALID;
    }
    for (uint32_t s = 0; s < loop->inproc.n; s++) {
        spw_err_t err = spw_ps_store_checkpoint(loop->inproc.stores[s], root, epoch, &infos[s],
                                                errstr, errstr_size);
        if (err)
            return err;
    }
    return SPW_OK;
}

spw_err_t spw_trainer_loop_restore(spw_trainer_loop_t *loop, spw_trainer_resume_fn resume,
                                   void *opaque)
{
    if (!loop->src.kafka) {
        /* a file is read once, from its start: a recovery before its first record (the
         * coordinator's recovery at start) leaves nothing to rewind */
        if (loop->src.records == 0 && loop->stats.steps == 0)
            return SPW_OK;
        SPW_ERROR("recovery needs to rewind the input, which file input cannot do",
                  "records_read=%llu hint=\"use Kafka input with a coordinator, or restart the "
                  "run\"",
                  (unsigned long long)loop->src.records);
        return SPW_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < 2; i++) {
        struct mb *mb = &loop->mbs[i];
        if (!mb->filled)
            continue;
        forget_pull(loop, mb); /* its examples are read again after the seek */
        mb->filled = false;
    }
    if (loop->acc)
        spw_grad_acc_reset(loop->acc);
    step_reset(loop);
    size_t residuals = loop->tk ? spw_topk_drop_all(loop->tk) : 0;
    uint32_t pushes = spw_ps_client_abandon_pushes(loop->client);
    loop->marks_head = loop->marks_n = loop->marks_assigned = 0;
    SPW_INFO("recovery: dropped state", "residuals=%zu pushes_abandoned=%u", residuals, pushes);
    return spw_trn__source_seek(&loop->src, resume, opaque);
}

spw_err_t spw_trainer_loop_hold_input(spw_trainer_loop_t *loop, int timeout_ms)
{
    return spw_trn__source_hold(&loop->src, timeout_ms);
}

spw_err_t spw_trainer_loop_release_input(spw_trainer_loop_t *loop)
{
    return spw_trn__source_release(&loop->src);
}

const char *spw_trainer_loop_topic(const spw_trainer_loop_t *loop)
{
    return loop->src.kafka ? loop->src.topic : NULL;
}

spw_err_t spw_trainer_loop_commit(spw_trainer_loop_t *loop, bool sync)
{
    return spw_trn__source_commit(&loop->src, sync);
}

spw_ps_client_t *spw_trainer_loop_client(spw_trainer_loop_t *loop)
{
    return loop->client;
}

void spw_trainer_loop_report(spw_trainer_loop_t *loop, struct spw_pv_report *out)
{
    spw_pv_report(loop->pv, out);
}

void spw_trainer_loop_get_stats(const spw_trainer_loop_t *loop, struct spw_trainer_loop_stats *out)
{
    *out = loop->stats;
    out->records = loop->src.records;
    out->duplicates = loop->src.duplicates;
    out->lost = loop->src.consumer ? spw_kafka_consumer_lost(loop->src.consumer) : 0;
    out->rejected = 0;
    for (unsigned i = 0; i < SPW_REJECT__COUNT; i++)
        out->rejected += loop->src.rejected[i];
    struct spw_ps_client_stats cs;
    spw_ps_client_get_stats(loop->client, &cs);
    out->bytes_pushed = cs.bytes_pushed;
    if (!loop->ran || !out->elapsed_ns)
        out->elapsed_ns = loop->start_ns ? spw_time_mono_ns() - loop->start_ns : 0;
}

/* A hook's verdict: SPW_ERR_STOPPED stops cleanly (*stop), others are errors. */
static spw_err_t hook_result(spw_trainer_loop_t *loop, spw_err_t err)
{
    if (err == SPW_ERR_STOPPED) {
        loop->stopped = true;
        return SPW_OK;
    }
    return err;
}

static void drop_micro_batch(spw_trainer_loop_t *loop, struct mb *mb)
{
    if (!mb->filled)
        return;
    forget_pull(loop, mb);
    uint64_t n = spw_batch_examples(mb->batch);
    loop->stats.dropped_examples += n;
    if (loop->m.dropped)
        spw_counter_add(loop->m.dropped, n);
    mb->filled = false;
}

/* The end of a run: push what is pending, drain, store and commit offsets. */
static spw_err_t finish(spw_trainer_loop_t *loop, spw_err_t run_err)
{
    set_ready(loop, false, "stopping");
    drop_micro_batch(loop, loop->cur);
    drop_micro_batch(loop, loop->next);
    spw_err_t err = SPW_OK;
    if (loop->micro > 0)
        err = end_step(loop, loop->cur, false);
    if (!err)
        err = flush_residuals(loop);
    spw_err_t derr = spw_ps_client_drain(loop->client, loop->conf.grace_ms);
    if (derr == SPW_ERR_TIMEOUT)
        SPW_ERROR("pushes not acknowledged within the grace period", "outstanding=%u grace_ms=%llu",
                  spw_ps_client_outstanding(loop->client), (unsigned long long)loop->conf.grace_ms);
    if (!err)
        err = derr;
    spw_err_t serr = store_acked(loop);
    if (!err)
        err = serr;
    if (loop->src.kafka) {
        spw_err_t cerr = spw_trn__source_commit(&loop->src, true);
        if (cerr)
            SPW_WARN("final offset commit failed", "error=\"%s\"", spw_err_str(cerr));
    }
    loop->stats.elapsed_ns = spw_time_mono_ns() - loop->start_ns;
    report(loop, false, "finished");
    struct spw_pv_report r;
    spw_pv_report(loop->pv, &r);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    struct spw_topk_stats ts = {0};
    if (loop->tk)
        spw_topk_get_stats(loop->tk, &ts);
    double secs = (double)st.elapsed_ns * 1e-9;
    SPW_INFO("finished",
             "examples=%llu ex_per_s=%.0f window_logloss=%.5f window_auc=%.4f "
             "bayes_logloss=%.5f const_logloss=%.5f cumulative_logloss=%.5f "
             "bayes_cumulative_logloss=%.5f bytes_per_example=%.2f "
             "step_bytes_per_example=%.2f rows_pushed=%llu "
             "residual_flushed=%llu steps=%llu rejected=%llu records=%llu "
             "dropped=%llu duplicates=%llu lost_to_retention=%llu offsets_stored=%llu "
             "seconds=%.3f compute_s=%.3f "
             "pull_wait_s=%.3f "
             "slowed_s=%.3f status=\"%s\"",
             (unsigned long long)st.examples, secs > 0 ? (double)st.examples / secs : 0.0,
             r.window.logloss, r.window.auc, r.oracle_window.count ? r.oracle_window.logloss : NAN,
             r.const_window, r.cumulative.logloss,
             r.oracle_cumulative.count ? r.oracle_cumulative.logloss : NAN,
             st.examples ? (double)st.bytes_pushed / (double)st.examples : 0.0,
             st.examples ? (double)(st.bytes_pushed - st.bytes_flushed) / (double)st.examples : 0.0,
             (unsigned long long)st.rows_pushed, (unsigned long long)ts.rows_flushed,
             (unsigned long long)st.steps, (unsigned long long)st.rejected,
             (unsigned long long)st.records, (unsigned long long)st.dropped_examples,
             (unsigned long long)st.duplicates, (unsigned long long)st.lost,
             (unsigned long long)st.offsets_stored, secs, (double)st.compute_ns * 1e-9,
             (double)st.pull_wait_ns * 1e-9, (double)st.slowed_ns * 1e-9,
             spw_err_str(run_err ? run_err : err));
    return run_err ? run_err : err;
}

spw_err_t spw_trainer_loop_run(spw_trainer_loop_t *loop)
{
    if (loop->ran)
        return SPW_ERR_STATE;
    loop->ran = true;
    loop->start_ns = loop->last_report_ns = loop->last_commit_ns = spw_time_mono_ns();
    loop->slow_mark_ns = loop->start_ns;
    step_reset(loop);
    const uint32_t acc_steps = loop->conf.params.acc_steps;
    spw_err_t err = hello_shards(loop);
    if (!err)
        err = check_dense_blocks(loop);
    if (err) {
        SPW_ERROR("trainer start failed", "error=\"%s\" detail=\"%s\"", spw_err_str(err),
                  spw_ps_client_errstr(loop->client));
        return finish(loop, err);
    }
    err = fill(loop, loop->cur);
    while (!err) {
        if (loop->stopped || spw_signal_stop_requested())
            break;
        struct mb *cur = loop->cur;
        if (!cur->filled) {
            if (loop->eof)
                break;
            /* Kafka without input: keep hooks and reports going */
            if (loop->hooks.idle &&
                (err = hook_result(loop, loop->hooks.idle(loop->hooks.opaque, loop))))
                break;
            if (loop->stopped || (err = store_acked(loop)) || (err = periodic(loop)))
                break;
            loop->slow_mark_ns = spw_time_mono_ns(); /* idle is no work to slow down */
            loop->slow_hook_ns = 0;
            err = fill(loop, cur);
            continue;
        }
        if (loop->micro == 0) {
            uint64_t h0 = spw_time_mono_ns(); /* waits, not work (slow_down) */
            if (loop->conf.debug_delay_ms)
                spw_time_sleep_ms(loop->conf.debug_delay_ms);
            if (loop->hooks.before_step &&
                (err = hook_result(loop,
                                   loop->hooks.before_step(loop->hooks.opaque, loop, loop->step))))
                break;
            loop->slow_hook_ns += spw_time_mono_ns() - h0;
            if (loop->stopped)
                break;
        }
        if (can_stage(loop, cur)) {
            if ((err = staged_step(loop, cur)))
                break;
            goto stepped;
        }
        if (!cur->ready && !cur->pulling && (err = start_pull(loop, cur)))
            break;
        /* in a two-phase step, the next micro-batch's rows are read here only when it belongs
         * to the same step (they change only at the step's commit) */
        bool same_step = !loop->step_tag || loop->micro + 1 < acc_steps;
        if (loop->prefetch && !loop->next->filled && (err = fill(loop, loop->next)))
            break;
        if (loop->prefetch && same_step && loop->next->filled && !loop->next->pulling &&
            !loop->next->ready && (err = start_pull(loop, loop->next)))
            break;
        if ((!cur->ready && (err = wait_pull(loop, cur))) || (err = wait_echo(loop, cur))) {
            if (err == SPW_ERR_STOPPED)
                err = SPW_OK; /* finish() drops the micro-batch */
            break;
        }
        if ((err = compute_start(loop, cur)))
            break;
        spw_err_t ahead = read_ahead(loop);
        if ((err = compute_finish(loop, cur)) || (err = ahead))
            break;
        if (loop->micro == acc_steps && (err = hook_result(loop, end_step(loop, cur, true))))
            break;
    stepped:
        slow_down(loop);
        if ((err = store_acked(loop)) || (err = periodic(loop)))
            break;
        loop->cur = loop->next;
        loop->next = cur;
        if (loop->stopped)
            break;
        if (!loop->cur->filled)
            err = fill(loop, loop->cur);
    }
    /* the end of a file (or max_examples) is where its records are judged */
    if (!err && loop->eof && !loop->src.kafka && !spw_signal_stop_requested())
        err = check_rejects(loop);
    if (err)
        SPW_ERROR("trainer loop failed", "error=\"%s\" detail=\"%s\"", spw_err_str(err),
                  spw_ps_client_errstr(loop->client));
    return finish(loop, err);
}
