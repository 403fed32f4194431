/* Unit tests of the trainer's worker loop with Kafka input (librdkafka's mock cluster in this
 * process) and in-process shards: ExampleBatch records over three partitions with malformed
 * records and invalid examples, which are counted and skipped; checkpoint positions (record
 * offset + examples taken, and the count taken up to them) that account for exactly the examples
 * trained, not a prefetched micro-batch's; offsets committed at
 * the end, so that the group resumes after them (only a record added later is trained); and a
 * resume from checkpoint positions through on_assign that trains exactly the rest. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/config.h"
#include "sparrow/kafka.h"
#include "sparrow/log.h"
#include "sparrow/time.h"
#include "sparrow/tools.h"
#include "sparrow/trainer.h"
#include "sparrow/trainer_loop.h"
#include "sparrow/wire.h"

#define TOPIC     "examples"
#define PARTS     3
#define RECORDS   60
#define MAX_EX    240
#define BAD_REC   10 /* undecodable bytes */
#define BAD_EX    25 /* example 3 has label 7 */
#define EMPTY_REC 31 /* an ExampleBatch of no examples */
#define WAIT_MS   60000

struct record {
    int64_t offset;
    int part;
    uint32_t n;            /* examples in it (0 for the bad record) */
    uint8_t valid[MAX_EX]; /* 1: trainable */
};

static struct record g_rec[RECORDS];
static uint64_t g_total_valid;
static spw_kafka_mock_t *g_mock;
static char g_url[512];

static void on_delivery(void *opaque, void *msg_opaque, spw_err_t err, int32_t partition,
                        int64_t offset)
{
    (void)opaque;
    struct record *r = msg_opaque;
    assert_int_equal(err, SPW_OK);
    assert_int_equal(partition, r->part);
    r->offset = offset;
}

/* Produces the records; example counts vary, some are malformed. */
static int setup(void **state)
{
    (void)state;
    char errstr[256];
    g_mock = spw_kafka_mock_new(1, errstr, sizeof(errstr));
    if (!g_mock || spw_kafka_mock_topic_create(g_mock, TOPIC, PARTS, errstr, sizeof(errstr)))
        return -1;
    snprintf(g_url, sizeof(g_url), "kafka://%s/%s", spw_kafka_mock_bootstraps(g_mock), TOPIC);
    spw_kafka_props_t *props = spw_kafka_props_new();
    spw_kafka_props_set(props, "bootstrap.servers", spw_kafka_mock_bootstraps(g_mock));
    struct spw_kafka_producer_opts popts = {.on_delivery = on_delivery};
    spw_kafka_producer_t *prod = spw_kafka_producer_new(props, &popts, errstr, sizeof(errstr));
    if (!prod)
        return -1;
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.n = 0;
    gp.seed = 11;
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    Sparrow__Example *exs = calloc(MAX_EX, sizeof(*exs));
    Sparrow__Example **ptrs = calloc(MAX_EX, sizeof(Sparrow__Example *));
    uint64_t *keys = calloc((size_t)MAX_EX * gp.fields, sizeof(uint64_t));
    uint32_t *fields = calloc((size_t)MAX_EX * gp.fields, sizeof(uint32_t));
    if (!gen || !exs || !ptrs || !keys || !fields)
        return -1;
    struct spw_wire_buf buf = {0};
    for (int r = 0; r < RECORDS; r++) {
        struct record *rec = &g_rec[r];
        rec->part = r % PARTS;
        rec->n = r == BAD_REC ? 0 : r == EMPTY_REC ? 0 : 20 + (uint32_t)(r * 37) % 200;
        for (uint32_t i = 0; i < rec->n; i++) {
            const struct spw_gen_example *g = spw_gen_next(gen);
            Sparrow__Example *e = &exs[i];
            sparrow__example__init(e);
            e->has_id = 1;
            e->id = g->id;
            e->has_label = 1;
            e->label = r == BAD_EX && i == 3 ? 7.0f : g->label;
            e->has_event_time_ms = 1;
            e->event_time_ms = g->event_time_ms;
            e->has_oracle_p = 1;
            e->oracle_p = g->oracle_p;
            memcpy(keys + (size_t)i * gp.fields, g->keys, g->n_features * sizeof(uint64_t));
            memcpy(fields + (size_t)i * gp.fields, g->fields, g->n_features * sizeof(uint32_t));
            e->n_keys = e->n_fields = g->n_features;
            e->keys = keys + (size_t)i * gp.fields;
            e->fields = fields + (size_t)i * gp.fields;
            ptrs[i] = e;
            rec->valid[i] = !(r == BAD_EX && i == 3);
            g_total_valid += rec->valid[i];
        }
        Sparrow__ExampleBatch eb = SPARROW__EXAMPLE_BATCH__INIT;
        eb.n_examples = rec->n;
        eb.examples = ptrs;
        buf.len = 0;
        static const char garbage[] = "\xff\xff\xff\xff not a protobuf";
        const void *value = garbage;
        size_t len = sizeof(garbage) - 1;
        if (r != BAD_REC) {
            if (spw_wire_pack(&eb.base, &buf))
                return -1;
            value = buf.data;
            len = buf.len;
        }
        if (spw_kafka_producer_send(prod, TOPIC, rec->part, NULL, 0, value, len, NULL, 0, rec))
            return -1;
        /* one at a time, so that offsets within a partition follow r */
        if (spw_kafka_producer_flush(prod, WAIT_MS))
            return -1;
    }
    free(buf.data);
    free(exs);
    free(ptrs);
    free(keys);
    free(fields);
    spw_gen_destroy(gen);
    spw_kafka_producer_destroy(prod, 1000);
    spw_kafka_props_destroy(props);
    return 0;
}

/* One more record of EXTRA examples on partition 0 (after run 1). */
#define EXTRA 5u
static void produce_extra(void)
{
    char errstr[256];
    spw_kafka_props_t *props = spw_kafka_props_new();
    spw_kafka_props_set(props, "bootstrap.servers", spw_kafka_mock_bootstraps(g_mock));
    struct spw_kafka_producer_opts popts = {0};
    spw_kafka_producer_t *prod = spw_kafka_producer_new(props, &popts, errstr, sizeof(errstr));
    assert_non_null(prod);
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.seed = 12;
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    assert_non_null(gen);
    Sparrow__Example exs[EXTRA], *ptrs[EXTRA];
    uint64_t keys[EXTRA][64];
    uint32_t fields[EXTRA][64];
    for (uint32_t i = 0; i < EXTRA; i++) {
        const struct spw_gen_example *g = spw_gen_next(gen);
        sparrow__example__init(&exs[i]);
        exs[i].has_label = 1;
        exs[i].label = g->label;
        memcpy(keys[i], g->keys, g->n_features * sizeof(uint64_t));
        memcpy(fields[i], g->fields, g->n_features * sizeof(uint32_t));
        exs[i].n_keys = exs[i].n_fields = g->n_features;
        exs[i].keys = keys[i];
        exs[i].fields = fields[i];
        ptrs[i] = &exs[i];
    }
    Sparrow__ExampleBatch eb = SPARROW__EXAMPLE_BATCH__INIT;
    eb.n_examples = EXTRA;
    eb.examples = ptrs;
    struct spw_wire_buf buf = {0};
    assert_int_equal(spw_wire_pack(&eb.base, &buf), SPW_OK);
    assert_int_equal(
        spw_kafka_producer_send(prod, TOPIC, 0, NULL, 0, buf.data, buf.len, NULL, 0, NULL), SPW_OK);
    assert_int_equal(spw_kafka_producer_flush(prod, WAIT_MS), SPW_OK);
    free(buf.data);
    spw_gen_destroy(gen);
    spw_kafka_producer_destroy(prod, 1000);
    spw_kafka_props_destroy(props);
}

static int teardown(void **state)
{
    (void)state;
    spw_kafka_mock_destroy(g_mock);
    return 0;
}

/* Valid examples before position (offset, skip) of partition p. */
static uint64_t trained_before(int p, int64_t offset, uint32_t skip)
{
    uint64_t n = 0;
    for (int r = 0; r < RECORDS; r++) {
        const struct record *rec = &g_rec[r];
        if (rec->part != p || rec->offset > offset)
            continue;
        uint32_t upto = rec->offset < offset ? rec->n : skip;
        for (uint32_t i = 0; i < upto && i < rec->n; i++)
            n += rec->valid[i];
    }
    return n;
}

struct kstate {
    /* checkpoints taken from after_step every `every` steps */
    uint64_t every;
    int checkpoints;
    int mid_record; /* checkpoint positions inside a record (skip > 0) */
    bool positions_ok;
    struct spw_trainer_position saved[PARTS];
    size_t n_saved;
    uint64_t seen_at_saved;
    uint64_t seen;
    /* resume positions given to on_assign (n_resume 0: none) */
    const struct spw_trainer_position *resume;
    size_t n_resume;
    bool assigned;
    /* idle stop */
    uint64_t idle_since_ms;
    uint64_t idle_stop_ms;
    uint64_t start_ms;
    /* trainer.threads (0: 1); with 2 the loop reads the next micro-batch while one is computed,
     * so a checkpoint has one read and not trained (in-process shards: no prefetch) */
    uint32_t threads;
};

static spw_err_t k_after_step(void *opaque, spw_trainer_loop_t *loop,
                              const struct spw_trainer_step_info *info)
{
    struct kstate *k = opaque;
    k->seen += info->examples;
    k->idle_since_ms = 0;
    if (!k->every || (info->step + 1) % k->every != 0)
        return SPW_OK;
    struct spw_trainer_position pos[8];
    size_t n = 0;
    assert_int_equal(spw_trainer_loop_checkpoint(loop, WAIT_MS, pos, 8, &n), SPW_OK);
    assert_true(n <= PARTS);
    uint64_t sum = 0, taken = 0;
    bool mid = false;
    for (size_t i = 0; i < n; i++) {
        taken += pos[i].taken;
        if (pos[i].offset >= 0) {
            sum += trained_before(pos[i].partition, pos[i].offset, pos[i].skip);
            k->mid_record += pos[i].skip > 0;
            mid |= pos[i].skip > 0;
        }
    }
    /* taken: the examples up to the stored positions, never a prefetched micro-batch's (the
     * coordinator glue of recovery=continue counts a partition's examples since LATEST by it) */
    if (sum != k->seen || taken != k->seen) {
        print_message("checkpoint %d: positions account for %llu examples (taken %llu), "
                      "trained %llu\n",
                      k->checkpoints, (unsigned long long)sum, (unsigned long long)taken,
                      (unsigned long long)k->seen);
        k->positions_ok = false;
    }
    /* the first checkpoint after the first, with a position inside a record, is resumed from */
    if (++k->checkpoints >= 2 && k->n_saved == 0 && mid) {
        memcpy(k->saved, pos, n * sizeof(pos[0]));
        k->n_saved = n;
        k->seen_at_saved = k->seen;
    }
    return SPW_OK;
}

static void k_on_assign(void *opaque, struct spw_trainer_position *parts, size_t n)
{
    struct kstate *k = opaque;
    k->assigned = true;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < k->n_resume; j++)
            if (k->resume[j].partition == parts[i].partition && k->resume[j].offset >= 0) {
                parts[i].offset = k->resume[j].offset;
                parts[i].skip = k->resume[j].skip;
            }
}

/* Stops the loop once partitions are assigned and nothing arrived for idle_stop_ms (0: never;
 * the run ends at max_examples). */
static spw_err_t k_idle(void *opaque, spw_trainer_loop_t *loop)
{
    (void)loop;
    struct kstate *k = opaque;
    uint64_t now = spw_time_mono_ms();
    if (now - k->start_ms > WAIT_MS)
        return SPW_ERR_TIMEOUT;
    if (!k->assigned || !k->idle_stop_ms)
        return SPW_OK;
    if (!k->idle_since_ms)
        k->idle_since_ms = now;
    return now - k->idle_since_ms >= k->idle_stop_ms ? SPW_ERR_STOPPED : SPW_OK;
}

static spw_config_t *kafka_cfg(void)
{
    char errstr[256];
    spw_config_t *cfg = spw_config_new(spw_trainer_config_props, spw_trainer_config_n_props, errstr,
                                       sizeof(errstr));
    assert_non_null(cfg);
    const char *sets[] = {"kafka.session.timeout.ms=6000", "kafka.heartbeat.interval.ms=500",
                          "kafka.topic.metadata.refresh.interval.ms=1000"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, sets, 3, errstr, sizeof(errstr)), SPW_OK);
    return cfg;
}

static struct spw_trainer_loop_stats run_loop(const char *group, uint64_t max_examples,
                                              struct kstate *k)
{
    spw_config_t *cfg = kafka_cfg();
    struct spw_trainer_loop_conf c;
    spw_trainer_loop_conf_default(&c);
    spw_model_init(&c.params.model, SPW_MODEL_FM, 4);
    c.params.topk.dim = c.params.model.dim;
    c.params.backend = SPW_BACKEND_CPU;
    c.params.batch = 100;
    c.params.threads = k->threads ? k->threads : 1;
    c.params.eval_window = 5000;
    c.in = g_url;
    c.group = group;
    c.kafka_config = cfg;
    c.inproc_shards = 1;
    c.inproc_memory_bytes = 64u << 20;
    c.max_examples = max_examples;
    c.commit_interval_ms = 200;
    c.log_interval_ms = 0;
    k->start_ms = spw_time_mono_ms();
    struct spw_trainer_hooks hooks = {
        .opaque = k, .after_step = k_after_step, .on_assign = k_on_assign, .idle = k_idle};
    char errstr[512];
    spw_trainer_loop_t *loop = spw_trainer_loop_new(&c, &hooks, errstr, sizeof(errstr));
    if (!loop)
        fail_msg("loop: %s", errstr);
    assert_int_equal(spw_trainer_loop_run(loop), SPW_OK);
    struct spw_trainer_loop_stats st;
    spw_trainer_loop_get_stats(loop, &st);
    spw_trainer_loop_destroy(loop);
    spw_config_destroy(cfg);
    return st;
}

/* Everything once, bad input skipped, checkpoint positions exact; then the group resumes after
 * the committed offsets (nothing left), and a new group resumes from saved positions. */
static void test_trn_loop_kafka_trains_commits_and_resumes(void **state)
{
    (void)state;
    struct kstate k1 = {.every = 7, .positions_ok = true, .threads = 2};
    struct spw_trainer_loop_stats st = run_loop("trainers-1", g_total_valid, &k1);
    print_message("run 1: %llu examples of %llu, %llu records, %llu rejected, %llu offsets "
                  "stored, %d checkpoints\n",
                  (unsigned long long)st.examples, (unsigned long long)g_total_valid,
                  (unsigned long long)st.records, (unsigned long long)st.rejected,
                  (unsigned long long)st.offsets_stored, k1.checkpoints);
    assert_int_equal(st.examples, g_total_valid);
    assert_int_equal(st.rejected, 2); /* the undecodable record and the label-7 example */
    assert_true(st.records >= RECORDS - PARTS && st.records <= RECORDS);
    assert_true(st.offsets_stored > 0);
    assert_true(k1.checkpoints >= 3);
    assert_true(k1.mid_record > 0);
    assert_true(k1.positions_ok);
    assert_true(k1.n_saved > 0 && k1.seen_at_saved > 0 && k1.seen_at_saved < g_total_valid);

    /* the same group: every trained record was committed, so only a new record is trained */
    produce_extra();
    struct kstate k2 = {.idle_stop_ms = 3000};
    st = run_loop("trainers-1", 0, &k2);
    print_message("run 2 (same group): %llu examples, %llu records, %llu rejected\n",
                  (unsigned long long)st.examples, (unsigned long long)st.records,
                  (unsigned long long)st.rejected);
    assert_int_equal(st.examples, EXTRA);

    /* a new group resumed from the second checkpoint's positions trains exactly the rest */
    struct kstate k3 = {.idle_stop_ms = 3000, .resume = k1.saved, .n_resume = k1.n_saved};
    st = run_loop("trainers-3", 0, &k3);
    uint64_t expect = g_total_valid - k1.seen_at_saved + EXTRA;
    print_message("run 3 (resume): %llu examples, expected %llu\n", (unsigned long long)st.examples,
                  (unsigned long long)expect);
    assert_int_equal(st.examples, expect);
}

int main(void)
{
    spw_log_init("test", SPW_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trn_loop_kafka_trains_commits_and_resumes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
