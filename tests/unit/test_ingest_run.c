/* Unit tests of the ingest role from a file input to a file output: records cut at the batch
 * size, keyed buckets, dead letters for invalid events, the counts of a whole run. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "role_int.h"
#include "sparrow/hash.h"
#include "test_dir.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(1 << 20);
    assert_non_null(buf);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* The ExampleBatch records of a length-delimited file: each record's examples. */
struct records {
    size_t n;
    Sparrow__ExampleBatch *rec[64];
};

static void read_records(const char *path, struct records *out)
{
    size_t len;
    uint8_t *buf = read_all(path, &len);
    out->n = 0;
    for (size_t at = 0; at < len;) {
        size_t msg_len, pre;
        assert_int_equal(spw_wire_read_varint_prefix(buf + at, len - at, len, &msg_len, &pre),
                         SPW_OK);
        assert_true(at + pre + msg_len <= len);
        assert_true(out->n < 64);
        out->rec[out->n] = sparrow__example_batch__unpack(NULL, msg_len, buf + at + pre);
        assert_non_null(out->rec[out->n]);
        out->n++;
        at += pre + msg_len;
    }
    free(buf);
}

static void free_records(struct records *r)
{
    for (size_t i = 0; i < r->n; i++)
        sparrow__example_batch__free_unpacked(r->rec[i], NULL);
    r->n = 0;
}

/* A conf from the property table with sets "key=value" applied; the config outlives the run. */
static spw_config_t *conf_with(struct spw_ingest_conf *conf, const char *const *sets, size_t n)
{
    char errstr[256];
    spw_config_t *cfg =
        spw_config_new(spw_ingest_config_props, spw_ingest_config_n_props, errstr, sizeof(errstr));
    assert_non_null(cfg);
    for (size_t i = 0; i < n; i++) {
        char key[128];
        const char *eq = strchr(sets[i], '=');
        assert_non_null(eq);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - sets[i]), sets[i]);
        if (spw_config_set(cfg, key, eq + 1, errstr, sizeof(errstr)) != SPW_OK)
            fail_msg("%s: %s", sets[i], errstr);
    }
    assert_int_equal(spw_ingest_conf_from_config(cfg, conf, errstr, sizeof(errstr)), SPW_OK);
    return cfg;
}

static void event(char *line, size_t size, int id, const char *user, int label)
{
    snprintf(line, size, "{\"id\":%d,\"label\":%d,\"features\":{\"user\":\"%s\",\"hour\":%d}}\n",
             id, label, user, id % 24);
}

/* Seven valid events in batches of three: records of 3, 3 and 1 examples, in input order; three
 * invalid ones dead-lettered with their reasons, the record index and the raw line. */
static void test_ingest_run_file_batches_and_dead_letters(void **state)
{
    (void)state;
    char in_path[128], out_path[128], dlq_path[160], text[4096] = "", line[256];
    snprintf(in_path, sizeof(in_path), "%s/in.json", test_dir);
    snprintf(out_path, sizeof(out_path), "%s/out.pb", test_dir);
    snprintf(dlq_path, sizeof(dlq_path), "%s.dlq", out_path);
    for (int i = 0; i < 7; i++) {
        event(line, sizeof(line), i, "u", i % 2);
        strcat(text, line);
        if (i == 1)
            strcat(text, "{not json\n");
        if (i == 3)
            strcat(text, "{\"label\":3,\"features\":{\"a\":\"b\"}}\n");
    }
    strcat(text, "{\"label\":1,\"features\":{\"a\":\"b\"},\"weight\":{\"a\":1e999}}\n");
    write_file(in_path, text);

    char in_set[160], out_set[160];
    snprintf(in_set, sizeof(in_set), "ingest.in=file:%s", in_path);
    snprintf(out_set, sizeof(out_set), "ingest.out=file:%s", out_path);
    const char *sets[] = {in_set, out_set, "ingest.batch.size=3"};
    struct spw_ingest_conf conf;
    spw_config_t *cfg = conf_with(&conf, sets, 3);
    spw_metrics_t *metrics = spw_metrics_new();
    conf.metrics = metrics;
    char errstr[256];
    spw_ingest_t *in = spw_ingest_new(&conf, errstr, sizeof(errstr));
    if (!in)
        fail_msg("new: %s", errstr);
    assert_int_equal(spw_ingest_run(in), SPW_OK);
    struct spw_ingest_stats st;
    spw_ingest_stats(in, &st);
    assert_int_equal(st.events, 10);
    assert_int_equal(st.examples, 7);
    assert_int_equal(st.rejected, 3);
    assert_int_equal(in->ring.count, 0); /* every cycle, the last too, delivered and popped */
    spw_ingest_destroy(in);

    struct records r;
    read_records(out_path, &r);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.rec[0]->n_examples, 3);
    assert_int_equal(r.rec[1]->n_examples, 3);
    assert_int_equal(r.rec[2]->n_examples, 1);
    uint64_t id = 0;
    for (size_t i = 0; i < r.n; i++)
        for (size_t j = 0; j < r.rec[i]->n_examples; j++) {
            const Sparrow__Example *ex = r.rec[i]->examples[j];
            assert_true(ex->has_id && ex->id == id);
            assert_true(ex->label == (float)(id % 2));
            assert_int_equal(ex->n_keys, 2);
            uint32_t f = spw_hash_field_name("user", 4);
            assert_true(ex->fields[0] == f && ex->keys[0] == spw_hash_key(f, "u", 1));
            id++;
        }
    assert_int_equal(id, 7);
    free_records(&r);

    size_t len;
    char *dlq = (char *)read_all(dlq_path, &len);
    dlq[len] = '\0';
    char want[1024];
    snprintf(want, sizeof(want),
             "undecodable\tfile:%s\t-1\t2\t{not json\n"
             "bad_label\tfile:%s\t-1\t5\t{\"label\":3,\"features\":{\"a\":\"b\"}}\n"
             "nonfinite_weight\tfile:%s\t-1\t9\t"
             "{\"label\":1,\"features\":{\"a\":\"b\"},\"weight\":{\"a\":1e999}}\n",
             in_path, in_path, in_path);
    assert_string_equal(dlq, want);
    free(dlq);

    char *render = spw_metrics_render(metrics, NULL);
    if (render) {
        assert_non_null(strstr(render, "sparrow_ingest_events_total 10"));
        assert_non_null(strstr(render, "sparrow_ingest_batches_total 3"));
        assert_non_null(strstr(render, "sparrow_ingest_rejected_total{reason=\"bad_label\"} 1"));
        free(render);
    }
    spw_metrics_destroy(metrics);
    spw_config_destroy(cfg);
}

/* Keyed by user into four buckets: every record holds the events of one bucket only, each
 * user's events stay in one record, in input order. */
static void test_ingest_run_file_keyed_buckets(void **state)
{
    (void)state;
    char in_path[128], out_path[128], text[8192] = "", line[256];
    snprintf(in_path, sizeof(in_path), "%s/keyed.json", test_dir);
    snprintf(out_path, sizeof(out_path), "%s/keyed.pb", test_dir);
    const char *users[] = {"ann", "bob", "cy", "dee", "eve", "fay"};
    for (int i = 0; i < 30; i++) {
        event(line, sizeof(line), i, users[i % 6], 1);
        strcat(text, line);
    }
    write_file(in_path, text);
    char in_set[160], out_set[160];
    snprintf(in_set, sizeof(in_set), "ingest.in=file:%s", in_path);
    snprintf(out_set, sizeof(out_set), "ingest.out=file:%s", out_path);
    const char *sets[] = {in_set, out_set, "ingest.key.field=user", "ingest.key.buckets=4"};
    struct spw_ingest_conf conf;
    spw_config_t *cfg = conf_with(&conf, sets, 4);
    char errstr[256];
    spw_ingest_t *in = spw_ingest_new(&conf, errstr, sizeof(errstr));
    if (!in)
        fail_msg("new: %s", errstr);
    assert_int_equal(spw_ingest_run(in), SPW_OK);
    spw_ingest_destroy(in);

    uint32_t f = spw_hash_field_name("user", 4);
    size_t want_records = 0;
    bool used[4] = {false};
    for (int u = 0; u < 6; u++) {
        size_t b = (size_t)(spw_hash_mix64(spw_hash_key(f, users[u], strlen(users[u]))) % 4);
        want_records += !used[b];
        used[b] = true;
    }
    struct records r;
    read_records(out_path, &r);
    assert_int_equal(r.n, want_records);
    size_t total = 0;
    for (size_t i = 0; i < r.n; i++) {
        size_t bucket = SIZE_MAX;
        uint64_t last_id = 0;
        for (size_t j = 0; j < r.rec[i]->n_examples; j++) {
            const Sparrow__Example *ex = r.rec[i]->examples[j];
            size_t b = (size_t)(spw_hash_mix64(ex->keys[0]) % 4);
            if (bucket == SIZE_MAX)
                bucket = b;
            assert_int_equal(b, bucket);
            assert_true(j == 0 || ex->id > last_id);
            last_id = ex->id;
        }
        total += r.rec[i]->n_examples;
    }
    assert_int_equal(total, 30);
    free_records(&r);
    spw_config_destroy(cfg);
}

/* What new refuses names the cause in errstr. */
static void test_ingest_run_new_refusals(void **state)
{
    (void)state;
    char errstr[256];
    struct spw_ingest_conf conf;
    const char *missing[] = {"ingest.in=file:/nonexistent/in.json", "ingest.out=file:/dev/null"};
    spw_config_t *cfg = conf_with(&conf, missing, 2);
    assert_null(spw_ingest_new(&conf, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "cannot open input"));
    spw_config_destroy(cfg);

    const char *bad_url[] = {"ingest.in=file:/dev/null", "ingest.out=http://x/y"};
    cfg = conf_with(&conf, bad_url, 2);
    assert_null(spw_ingest_new(&conf, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "bad output url"));
    spw_config_destroy(cfg);

    cfg =
        spw_config_new(spw_ingest_config_props, spw_ingest_config_n_props, errstr, sizeof(errstr));
    assert_int_equal(spw_ingest_conf_from_config(cfg, &conf, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    assert_non_null(strstr(errstr, "ingest.in and ingest.out are required"));
    spw_config_destroy(cfg);
    spw_ingest_destroy(NULL);
}

SPW_TEST_MAIN_GROUP(test_dir_setup, test_dir_teardown,
                    test_ingest_run_file_batches_and_dead_letters,
                    test_ingest_run_file_keyed_buckets, test_ingest_run_new_refusals)
