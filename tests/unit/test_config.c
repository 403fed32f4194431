/* Unit tests of the configuration table: parsing, ranges, layers, files, dump, docs and the CLI. */
#include "test_main.h" /* cmocka and what it needs first */

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sparrow/config.h"

static const struct spw_config_prop props[] = {
    {"t.flag", SPW_CONFIG_BOOL, "false", 0, 0, NULL, "A boolean."},
    {"t.count", SPW_CONFIG_INT, "10", 1, 1024, NULL, "An integer | with a pipe."},
    {"t.big", SPW_CONFIG_INT, "0", -9.2e18, 9.2e18, NULL, "A wide integer."},
    {"t.ratio", SPW_CONFIG_DOUBLE, "0.5", 0, 1, NULL, "A double."},
    {"t.name", SPW_CONFIG_STRING, "x", 0, 8, NULL, "A short string."},
    {"t.path", SPW_CONFIG_STRING, NULL, 0, 0, NULL, "Unset by default."},
    {"t.format", SPW_CONFIG_ENUM, "pb", 0, 0, "pb|json|criteo", "Output format."},
    {"t.mode", SPW_CONFIG_ENUM, "async", 0, 0, "async|sync|ssp:|hybrid:", "Training mode."},
    {"t.timeout", SPW_CONFIG_DURATION_MS, "5s", 0, 3600000, NULL, "A duration."},
    {"t.dash-name", SPW_CONFIG_INT, "3", 0, 100, NULL, "Env mapping of '-'."},
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL, "Handed to librdkafka unchanged."},
    {"rocksdb.options", SPW_CONFIG_STRING, "", 0, 4096, NULL, "RocksDB option string."},
};
static const size_t n_props = sizeof(props) / sizeof(props[0]);

static const struct spw_cli_alias aliases[] = {
    {"--count", "t.count"},
    {"--mode", "t.mode"},
};

static char err[1024];

static spw_config_t *new_cfg(void)
{
    err[0] = '\0';
    spw_config_t *cfg = spw_config_new(props, n_props, err, sizeof(err));
    assert_non_null(cfg);
    return cfg;
}

static spw_err_t set(spw_config_t *cfg, const char *key, const char *value)
{
    err[0] = '\0';
    return spw_config_set(cfg, key, value, err, sizeof(err));
}

/* Asserts that err holds needle. */
static void assert_err_has(const char *needle)
{
    if (!strstr(err, needle))
        fail_msg("error message '%s' lacks '%s'", err, needle);
}

/* Writes text to a new temporary file; returns its path (static storage, one at a time). */
static const char *write_temp(const char *text, size_t len)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/spw_test_config_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

/* Reads what a writer function printed to a memory stream; the caller frees. */
static char *capture_dump(const spw_config_t *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    spw_config_dump(cfg, f);
    fclose(f);
    return buf;
}

/* Drops the comment lines of a dump in place, keeping the `key = value` lines. */
static void strip_comments(char *text)
{
    char *out = text;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (line[0] != '#' && line[0] != '\n') {
            memmove(out, line, len);
            out += len;
        }
        line += len;
    }
    *out = '\0';
}

static void test_config_defaults(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_false(spw_config_bool(cfg, "t.flag"));
    assert_int_equal(spw_config_int(cfg, "t.count"), 10);
    assert_true(spw_config_double(cfg, "t.ratio") == 0.5);
    assert_string_equal(spw_config_str(cfg, "t.name"), "x");
    assert_null(spw_config_str(cfg, "t.path"));
    assert_false(spw_config_is_set(cfg, "t.path"));
    assert_true(spw_config_is_set(cfg, "t.name"));
    assert_string_equal(spw_config_str(cfg, "t.format"), "pb");
    assert_int_equal(spw_config_duration_ms(cfg, "t.timeout"), 5000);
    assert_string_equal(spw_config_str(cfg, "rocksdb.options"), "");
    spw_config_destroy(cfg);
    spw_config_destroy(NULL);
}

static void test_config_bad_tables(void **state)
{
    (void)state;
    static const struct spw_config_prop bad_default[] = {
        {"a.n", SPW_CONFIG_INT, "0", 1, 10, NULL, "x"},
    };
    static const struct spw_config_prop twice[] = {
        {"a.n", SPW_CONFIG_INT, "1", 1, 10, NULL, "x"},
        {"a.n", SPW_CONFIG_INT, "1", 1, 10, NULL, "x"},
    };
    static const struct spw_config_prop env_clash[] = {
        {"a.b-c", SPW_CONFIG_INT, "1", 1, 10, NULL, "x"},
        {"a.b.c", SPW_CONFIG_INT, "1", 1, 10, NULL, "x"},
    };
    static const struct spw_config_prop pass_no_star[] = {
        {"kafka.", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL, "x"},
    };
    static const struct spw_config_prop bad_choices[] = {
        {"a.e", SPW_CONFIG_ENUM, "a", 0, 0, "a||b", "x"},
    };
    static const struct spw_config_prop inverted[] = {
        {"a.d", SPW_CONFIG_DOUBLE, "1", 2, 1, NULL, "x"},
    };
    assert_null(spw_config_new(bad_default, 1, err, sizeof(err)));
    assert_err_has("invalid default");
    assert_err_has("a.n: 0 is out of range [1, 10]");
    assert_null(spw_config_new(twice, 2, err, sizeof(err)));
    assert_err_has("twice");
    assert_null(spw_config_new(env_clash, 2, err, sizeof(err)));
    assert_err_has("SPARROW_A_B_C");
    assert_null(spw_config_new(pass_no_star, 1, err, sizeof(err)));
    assert_null(spw_config_new(bad_choices, 1, err, sizeof(err)));
    assert_err_has("choices");
    assert_null(spw_config_new(inverted, 1, err, sizeof(err)));
}

static void test_config_bool(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    const char *yes[] = {"true", "1", "yes", "on", "TRUE", "On"};
    const char *no[] = {"false", "0", "no", "off", "False"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        assert_int_equal(set(cfg, "t.flag", "false"), SPW_OK);
        assert_int_equal(set(cfg, "t.flag", yes[i]), SPW_OK);
        assert_true(spw_config_bool(cfg, "t.flag"));
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        assert_int_equal(set(cfg, "t.flag", "true"), SPW_OK);
        assert_int_equal(set(cfg, "t.flag", no[i]), SPW_OK);
        assert_false(spw_config_bool(cfg, "t.flag"));
    }
    assert_int_equal(set(cfg, "t.flag", "maybe"), SPW_ERR_INVALID);
    assert_err_has("t.flag: 'maybe' is not a boolean (true|false");
    assert_int_equal(set(cfg, "t.flag", ""), SPW_ERR_INVALID);
    assert_int_equal(set(cfg, "t.flag", "2"), SPW_ERR_INVALID);
    assert_false(spw_config_bool(cfg, "t.flag")); /* unchanged by the failures */
    spw_config_destroy(cfg);
}

static void test_config_parse_int64(void **state)
{
    (void)state;
    int64_t v = 42;
    assert_int_equal(spw_parse_int64("9223372036854775807", &v), SPW_OK);
    assert_true(v == INT64_MAX);
    assert_int_equal(spw_parse_int64("-9223372036854775808", &v), SPW_OK);
    assert_true(v == INT64_MIN);
    assert_int_equal(spw_parse_int64("+7", &v), SPW_OK);
    assert_int_equal(v, 7);
    assert_int_equal(spw_parse_int64("-0", &v), SPW_OK);
    assert_int_equal(v, 0);
    v = 42;
    const char *bad[] = {"9223372036854775808",
                         "-9223372036854775809",
                         "",
                         " 1",
                         "1 ",
                         "1.0",
                         "abc",
                         "0x1f",
                         "12abc",
                         "1e3",
                         "- 1",
                         "+",
                         "-"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (spw_parse_int64(bad[i], &v) != SPW_ERR_INVALID)
            fail_msg("'%s' parsed as an int64", bad[i]);
    }
    assert_int_equal(v, 42); /* untouched on failure */
}

static void test_config_parse_double(void **state)
{
    (void)state;
    double d = 0;
    assert_int_equal(spw_parse_double("0.5", &d), SPW_OK);
    assert_true(d == 0.5);
    assert_int_equal(spw_parse_double("-2.5e10", &d), SPW_OK);
    assert_true(d == -2.5e10);
    assert_int_equal(spw_parse_double("1e-3", &d), SPW_OK);
    assert_true(d == 1e-3);
    assert_int_equal(spw_parse_double("1e-400", &d), SPW_OK); /* underflow: a tiny number */
    assert_true(d >= 0 && d < 1e-300);
    d = 7;
    const char *bad[] = {"nan", "NaN", "inf", "-infinity", "1e400", "-1e400", "1.5x", "",
                         " 1",  "1 ",  ".",   "e5",        "--1",   "0x10",   "0x1p3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (spw_parse_double(bad[i], &d) != SPW_ERR_INVALID)
            fail_msg("'%s' parsed as a double", bad[i]);
    }
    assert_true(d == 7);
}

static void test_config_int_range(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "t.count", "1"), SPW_OK);
    assert_int_equal(spw_config_int(cfg, "t.count"), 1);
    assert_int_equal(set(cfg, "t.count", "1024"), SPW_OK);
    assert_int_equal(spw_config_int(cfg, "t.count"), 1024);
    assert_int_equal(set(cfg, "t.count", " 77 "), SPW_OK); /* surrounding blanks are trimmed */
    assert_int_equal(spw_config_int(cfg, "t.count"), 77);
    assert_int_equal(set(cfg, "t.count", "0"), SPW_ERR_INVALID);
    assert_string_equal(err, "t.count: 0 is out of range [1, 1024]");
    assert_int_equal(set(cfg, "t.count", "1025"), SPW_ERR_INVALID);
    assert_string_equal(err, "t.count: 1025 is out of range [1, 1024]");
    assert_int_equal(set(cfg, "t.count", "12abc"), SPW_ERR_INVALID);
    assert_err_has("t.count: '12abc' is not an integer");
    assert_err_has("[1, 1024]");
    assert_int_equal(set(cfg, "t.count", "5.0"), SPW_ERR_INVALID);
    assert_int_equal(spw_config_int(cfg, "t.count"), 77);

    assert_int_equal(set(cfg, "t.big", "9200000000000000000"), SPW_OK);
    assert_true(spw_config_int(cfg, "t.big") == INT64_C(9200000000000000000));
    assert_int_equal(set(cfg, "t.big", "-9200000000000000000"), SPW_OK);
    assert_int_equal(set(cfg, "t.big", "9223372036854775807"), SPW_ERR_INVALID);
    assert_err_has("out of range [-9200000000000000000, 9200000000000000000]");
    assert_int_equal(set(cfg, "t.big", "99999999999999999999"), SPW_ERR_INVALID);
    assert_err_has("not an integer");
    spw_config_destroy(cfg);
}

static void test_config_double_range(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "t.ratio", "0"), SPW_OK);
    assert_true(spw_config_double(cfg, "t.ratio") == 0);
    assert_int_equal(set(cfg, "t.ratio", "1"), SPW_OK);
    assert_true(spw_config_double(cfg, "t.ratio") == 1);
    assert_int_equal(set(cfg, "t.ratio", "0.125"), SPW_OK);
    assert_int_equal(set(cfg, "t.ratio", "1.0000001"), SPW_ERR_INVALID);
    assert_string_equal(err, "t.ratio: 1.0000001 is out of range [0, 1]");
    assert_int_equal(set(cfg, "t.ratio", "-0.001"), SPW_ERR_INVALID);
    assert_int_equal(set(cfg, "t.ratio", "nan"), SPW_ERR_INVALID);
    assert_err_has("t.ratio: 'nan' is not a finite number");
    assert_int_equal(set(cfg, "t.ratio", "inf"), SPW_ERR_INVALID);
    assert_true(spw_config_double(cfg, "t.ratio") == 0.125);
    spw_config_destroy(cfg);
}

static void test_config_string(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "t.name", "12345678"), SPW_OK);
    assert_string_equal(spw_config_str(cfg, "t.name"), "12345678");
    assert_int_equal(set(cfg, "t.name", "123456789"), SPW_ERR_TOO_BIG);
    assert_err_has("t.name: value is 9 bytes, longer than the limit of 8");
    assert_int_equal(set(cfg, "t.name", "a\nb"), SPW_ERR_INVALID);
    assert_err_has("control character");
    assert_int_equal(set(cfg, "t.name", "a\x1b[0m"), SPW_ERR_INVALID);
    assert_int_equal(set(cfg, "t.name", "\t a\tb \t"), SPW_OK); /* inner tab kept, ends trimmed */
    assert_string_equal(spw_config_str(cfg, "t.name"), "a\tb");
    assert_int_equal(set(cfg, "t.path", ""), SPW_OK);
    assert_true(spw_config_is_set(cfg, "t.path"));
    assert_string_equal(spw_config_str(cfg, "t.path"), "");

    /* No table maximum: the global value limit still holds. */
    char *big = malloc(SPW_CONFIG_VALUE_MAX + 2);
    assert_non_null(big);
    memset(big, 'v', SPW_CONFIG_VALUE_MAX + 1);
    big[SPW_CONFIG_VALUE_MAX + 1] = '\0';
    assert_int_equal(set(cfg, "t.path", big), SPW_ERR_TOO_BIG);
    assert_err_has("t.path: value is");
    big[SPW_CONFIG_VALUE_MAX] = '\0';
    assert_int_equal(set(cfg, "t.path", big), SPW_OK);
    assert_int_equal(strlen(spw_config_str(cfg, "t.path")), SPW_CONFIG_VALUE_MAX);
    free(big);
    spw_config_destroy(cfg);
}

static void test_config_enum(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "t.format", "json"), SPW_OK);
    assert_string_equal(spw_config_str(cfg, "t.format"), "json");
    assert_int_equal(set(cfg, "t.format", "xml"), SPW_ERR_INVALID);
    assert_string_equal(err, "t.format: 'xml' is not one of pb|json|criteo");
    assert_int_equal(set(cfg, "t.format", "PB"), SPW_ERR_INVALID); /* case matters */
    assert_int_equal(set(cfg, "t.format", "jso"), SPW_ERR_INVALID);
    assert_int_equal(set(cfg, "t.format", "jsonx"), SPW_ERR_INVALID);
    assert_string_equal(spw_config_str(cfg, "t.format"), "json");

    assert_int_equal(set(cfg, "t.mode", "ssp:4"), SPW_OK);
    assert_string_equal(spw_config_str(cfg, "t.mode"), "ssp:4");
    assert_int_equal(set(cfg, "t.mode", "hybrid:100"), SPW_OK);
    assert_int_equal(set(cfg, "t.mode", "sync"), SPW_OK);
    assert_int_equal(set(cfg, "t.mode", "ssp"), SPW_ERR_INVALID);
    assert_err_has("t.mode: 'ssp' needs a value after ':'");
    assert_int_equal(set(cfg, "t.mode", "ssp:"), SPW_ERR_INVALID);
    assert_err_has("needs a value after ':'");
    assert_int_equal(set(cfg, "t.mode", "sync:3"), SPW_ERR_INVALID); /* no suffix on "sync" */
    assert_err_has("is not one of async|sync|ssp:<value>|hybrid:<value>");
    assert_int_equal(set(cfg, "t.mode", "sspx"), SPW_ERR_INVALID);
    assert_string_equal(spw_config_str(cfg, "t.mode"), "sync");
    spw_config_destroy(cfg);
}

static void test_config_duration(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    static const struct {
        const char *text;
        int64_t ms;
    } good[] = {{"250ms", 250},  {"5s", 5000},     {"2m", 120000},
                {"1h", 3600000}, {"1500ms", 1500}, {"0", 0}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(set(cfg, "t.timeout", good[i].text), SPW_OK);
        assert_int_equal(spw_config_duration_ms(cfg, "t.timeout"), good[i].ms);
    }
    assert_int_equal(set(cfg, "t.timeout", "2h"), SPW_ERR_INVALID);
    assert_string_equal(err, "t.timeout: 2h (7200000 ms) is out of range [0ms, 1h]");
    const char *bad[] = {"5 s",
                         "-1s",
                         "1.5s",
                         "s",
                         "",
                         "10x",
                         "5sec",
                         "1d",
                         "5S",
                         "ms",
                         "+5",
                         "0x10",
                         "99999999999999999999",
                         "9223372036854775807h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (set(cfg, "t.timeout", bad[i]) != SPW_ERR_INVALID)
            fail_msg("'%s' accepted as a duration", bad[i]);
        assert_err_has("is not a duration");
    }
    assert_int_equal(spw_config_duration_ms(cfg, "t.timeout"), 0);
    spw_config_destroy(cfg);
}

/* A bare number is refused (it used to mean milliseconds: trainer.log.interval=5 was 5 ms), with
 * the property and the units named; 0 and a property named *_ms still take one. */
static void test_config_duration_bare(void **state)
{
    (void)state;
    static const struct spw_config_prop bare_props[] = {
        {"t.interval", SPW_CONFIG_DURATION_MS, "5s", 0, 3600000, NULL, "A duration."},
        {"t.delay_ms", SPW_CONFIG_DURATION_MS, "0", 0, 3600000, NULL, "Milliseconds by name."},
    };
    spw_config_t *cfg = spw_config_new(bare_props, 2, err, sizeof(err));
    assert_non_null(cfg);
    assert_int_equal(set(cfg, "t.interval", "5"), SPW_ERR_INVALID);
    assert_string_equal(err, "t.interval: '5' has no unit (write 5ms, 5s, 5m or 5h; the accepted "
                             "units are ms, s, m and h)");
    assert_int_equal(spw_config_duration_ms(cfg, "t.interval"), 5000); /* unchanged */
    assert_int_equal(set(cfg, "t.interval", "0"), SPW_OK);
    assert_int_equal(spw_config_duration_ms(cfg, "t.interval"), 0);
    assert_int_equal(set(cfg, "t.delay_ms", "40"), SPW_OK);
    assert_int_equal(spw_config_duration_ms(cfg, "t.delay_ms"), 40);
    assert_int_equal(set(cfg, "t.delay_ms", "2s"), SPW_OK);
    assert_int_equal(spw_config_duration_ms(cfg, "t.delay_ms"), 2000);
    /* every layer: a file line and an environment variable are refused alike */
    static const char file[] = "t.interval = 30\n";
    assert_int_equal(
        spw_config_load_buffer(cfg, "f.conf", file, sizeof(file) - 1, err, sizeof(err)),
        SPW_ERR_INVALID);
    assert_err_has("f.conf:1: t.interval: '30' has no unit");
    char *envp[] = {"SPARROW_T_INTERVAL=7", NULL};
    assert_int_equal(spw_config_load_env(cfg, envp, err, sizeof(err)), SPW_ERR_INVALID);
    assert_err_has("SPARROW_T_INTERVAL: t.interval: '7' has no unit");
    spw_config_destroy(cfg);
}

struct env_seen {
    char vars[4][64];
    char hints[4][256];
    size_t n;
};

static void env_collect(void *opaque, const char *var, const char *hint)
{
    struct env_seen *seen = opaque;
    assert_true(seen->n < 4);
    snprintf(seen->vars[seen->n], sizeof(seen->vars[0]), "%s", var);
    snprintf(seen->hints[seen->n], sizeof(seen->hints[0]), "%s", hint ? hint : "-");
    seen->n++;
}

/* SPARROW_* variables of no table are found, with the nearest property for a typo (a swap of
 * neighbours is one edit), a note for pass-through keys, nothing for far-off names; variables of
 * any table and the listed tool variables are not reported. */
static void test_config_env_unknown(void **state)
{
    (void)state;
    static const struct spw_config_prop other[] = {
        {"trainer.batch", SPW_CONFIG_INT, "1024", 1, 1 << 20, NULL, "Examples per batch."},
        {"trainer.batch.linger", SPW_CONFIG_DURATION_MS, "100ms", 0, 60000, NULL, "Linger."},
    };
    const struct spw_config_table tables[] = {{props, n_props}, {other, 2}};
    const char *const ignore[] = {"SPARROW_SKIP_DEPS"};
    char *envp[] = {"SPARROW_TRAINER_BACTH=4",
                    "SPARROW_T_COUNT=3",
                    "SPARROW_TRAINER_BATCH_LINGER=1s",
                    "SPARROW_SKIP_DEPS=1",
                    "SPARROW_KAFKA_BOOTSTRAP_SERVERS=h:1",
                    "SPARROW_COMPLETELY_DIFFERENT=1",
                    "PATH=/bin",
                    "SPARROW_T_CONT",
                    NULL};
    struct env_seen seen = {0};
    assert_int_equal(spw_config_env_unknown(envp, tables, 2, ignore, 1, env_collect, &seen), 4);
    assert_string_equal(seen.vars[0], "SPARROW_TRAINER_BACTH");
    assert_string_equal(seen.hints[0], "did you mean trainer.batch (SPARROW_TRAINER_BATCH)?");
    assert_string_equal(seen.vars[1], "SPARROW_KAFKA_BOOTSTRAP_SERVERS");
    assert_non_null(strstr(seen.hints[1], "kafka.* keys cannot be set from the environment"));
    assert_string_equal(seen.vars[2], "SPARROW_COMPLETELY_DIFFERENT");
    assert_string_equal(seen.hints[2], "-");
    assert_string_equal(seen.vars[3], "SPARROW_T_CONT");
    assert_string_equal(seen.hints[3], "did you mean t.count (SPARROW_T_COUNT)?");
}

static void test_config_unknown_key(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "t.cuont", "5"), SPW_ERR_NOT_FOUND);
    assert_string_equal(err, "unknown key 't.cuont' (did you mean 't.count'?)");
    assert_int_equal(set(cfg, "T.COUNT", "5"), SPW_ERR_NOT_FOUND);
    assert_err_has("did you mean 't.count'");
    assert_int_equal(set(cfg, "something.else.entirely", "5"), SPW_ERR_NOT_FOUND);
    assert_string_equal(err, "unknown key 'something.else.entirely'");
    assert_int_equal(set(cfg, "kafka.", "x"), SPW_ERR_NOT_FOUND); /* the prefix alone */
    assert_int_equal(set(cfg, "bad key", "5"), SPW_ERR_INVALID);
    assert_err_has("not a valid key");
    assert_int_equal(set(cfg, "", "5"), SPW_ERR_INVALID);
    assert_err_has("empty key");
    char key[SPW_CONFIG_KEY_MAX + 2];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    assert_int_equal(set(cfg, key, "5"), SPW_ERR_INVALID);
    assert_err_has("longer than");
    spw_config_destroy(cfg);
}

struct collected {
    char text[512];
    int calls;
    int stop_after;
};

static int collect(const char *key, const char *value, void *opaque)
{
    struct collected *c = opaque;
    size_t n = strlen(c->text);
    snprintf(c->text + n, sizeof(c->text) - n, "%s=%s;", key, value);
    return ++c->calls == c->stop_after ? 7 : 0;
}

static void test_config_passthrough(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "kafka.bootstrap.servers", "localhost:9092"), SPW_OK);
    assert_int_equal(set(cfg, "kafka.security.protocol", "SASL_SSL"), SPW_OK);
    assert_int_equal(set(cfg, "kafka.bootstrap.servers", "b1:9092,b2:9092"), SPW_OK);
    assert_int_equal(set(cfg, "rocksdb.options", "max_open_files=100;write_buffer_size=1M"),
                     SPW_OK);
    char *envp[] = {"SPARROW_KAFKA_CLIENT_ID=ignored", NULL};
    assert_int_equal(spw_config_load_env(cfg, envp, err, sizeof(err)), SPW_OK);

    struct collected c = {"", 0, 0};
    assert_int_equal(spw_config_foreach_passthrough(cfg, "kafka.", collect, &c), 0);
    assert_string_equal(c.text, "bootstrap.servers=b1:9092,b2:9092;security.protocol=SASL_SSL;");
    struct collected first = {"", 0, 1};
    assert_int_equal(spw_config_foreach_passthrough(cfg, "kafka.", collect, &first), 7);
    assert_int_equal(first.calls, 1);
    struct collected none = {"", 0, 0};
    assert_int_equal(spw_config_foreach_passthrough(cfg, "rocksdb.", collect, &none), 0);
    assert_int_equal(none.calls, 0);
    assert_string_equal(spw_config_str(cfg, "rocksdb.options"),
                        "max_open_files=100;write_buffer_size=1M");
    spw_config_destroy(cfg);
}

static void test_config_env(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    char *envp[] = {"PATH=/usr/bin",         "SPARROW_T_COUNT=20",   "SPARROW_T_DASH_NAME=7",
                    "SPARROW_UNKNOWN_KEY=1", "SPARROW_T_FLAG",       "SPARROW_T_TIMEOUT=2m",
                    "sparrow_t_count=99",    "SPARROW_T_MODE=ssp:2", NULL};
    assert_int_equal(spw_config_load_env(cfg, envp, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_config_int(cfg, "t.count"), 20);
    assert_int_equal(spw_config_int(cfg, "t.dash-name"), 7);
    assert_int_equal(spw_config_duration_ms(cfg, "t.timeout"), 120000);
    assert_string_equal(spw_config_str(cfg, "t.mode"), "ssp:2");
    assert_false(spw_config_bool(cfg, "t.flag"));

    /* A bad variable is named, and the good one before it is not applied either. */
    char *bad[] = {"SPARROW_T_RATIO=0.25", "SPARROW_T_COUNT=0", NULL};
    assert_int_equal(spw_config_load_env(cfg, bad, err, sizeof(err)), SPW_ERR_INVALID);
    assert_string_equal(
        err, "environment variable SPARROW_T_COUNT: t.count: 0 is out of range [1, 1024]");
    assert_true(spw_config_double(cfg, "t.ratio") == 0.5);
    assert_int_equal(spw_config_int(cfg, "t.count"), 20);
    assert_int_equal(spw_config_load_env(cfg, NULL, err, sizeof(err)), SPW_OK);
    spw_config_destroy(cfg);
}

static const char layered_file[] = "# layered test\n"
                                   "t.count = 2\n"
                                   "t.ratio = 0.25\n"
                                   "t.name = file\n"
                                   "t.format = json\n";

static void test_config_precedence(void **state)
{
    (void)state;
    const char *path = write_temp(layered_file, strlen(layered_file));
    char *envp[] = {"SPARROW_T_COUNT=3", "SPARROW_T_RATIO=0.75", "SPARROW_T_TIMEOUT=1s", NULL};
    const char *sets[] = {"t.count=4", "t.timeout = 2s", "t.count=5"};
    spw_config_t *cfg = new_cfg();
    assert_int_equal(spw_config_load(cfg, path, envp, sets, 3, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_config_int(cfg, "t.count"), 5);              /* last --set */
    assert_int_equal(spw_config_duration_ms(cfg, "t.timeout"), 2000); /* --set over env */
    assert_true(spw_config_double(cfg, "t.ratio") == 0.75);           /* env over file */
    assert_string_equal(spw_config_str(cfg, "t.name"), "file");       /* file over default */
    assert_string_equal(spw_config_str(cfg, "t.format"), "json");     /* file */
    assert_false(spw_config_bool(cfg, "t.flag"));                     /* default */

    char *dump = capture_dump(cfg);
    assert_non_null(strstr(dump, "[set]\nt.count = 5\n"));
    assert_non_null(strstr(dump, "[env]\nt.ratio = 0.75\n"));
    assert_non_null(strstr(dump, "[file]\nt.name = file\n"));
    assert_non_null(strstr(dump, "[default]\nt.flag = false\n"));
    free(dump);

    /* The same through the command line, with an alias between two --set. */
    spw_config_t *cli = new_cfg();
    char *argv[] = {
        "gen", "--set", "t.count=4", "--count=6", "--config", (char *)path, "--set=t.mode=hybrid:5",
        NULL};
    struct spw_cli_result res;
    assert_int_equal(spw_cli_load(cli, 7, argv, aliases, 2, envp, &res, err, sizeof(err)), SPW_OK);
    assert_false(res.help);
    assert_false(res.dump_config);
    assert_int_equal(spw_config_int(cli, "t.count"), 6);
    assert_true(spw_config_double(cli, "t.ratio") == 0.75);
    assert_string_equal(spw_config_str(cli, "t.name"), "file");
    assert_string_equal(spw_config_str(cli, "t.mode"), "hybrid:5");
    assert_int_equal(spw_config_duration_ms(cli, "t.timeout"), 1000);

    /* A failing layer leaves everything as it was. */
    const char *bad_sets[] = {"t.name=changed", "t.count=0"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, bad_sets, 2, err, sizeof(err)),
                     SPW_ERR_INVALID);
    assert_string_equal(err, "--set t.count=0: t.count: 0 is out of range [1, 1024]");
    assert_string_equal(spw_config_str(cfg, "t.name"), "file");
    const char *no_eq[] = {"t.count"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, no_eq, 1, err, sizeof(err)), SPW_ERR_INVALID);
    assert_err_has("expected key=value");

    unlink(path);
    spw_config_destroy(cli);
    spw_config_destroy(cfg);
}

static void test_config_file_format(void **state)
{
    (void)state;
    static const char text[] = "\xef\xbb\xbf# comment line\r\n"
                               "\r\n"
                               "   # indented comment\n"
                               "\tt.count\t=\t12  \r\n"
                               "t.name=a#b=c\n"
                               "t.path =\n"
                               "kafka.sasl.password = p=#1\n"
                               "t.flag = on"; /* no final newline */
    spw_config_t *cfg = new_cfg();
    const char *path = write_temp(text, sizeof(text) - 1);
    assert_int_equal(spw_config_load_file(cfg, path, err, sizeof(err)), SPW_OK);
    unlink(path);
    assert_int_equal(spw_config_int(cfg, "t.count"), 12);
    assert_string_equal(spw_config_str(cfg, "t.name"), "a#b=c");
    assert_string_equal(spw_config_str(cfg, "t.path"), "");
    assert_true(spw_config_bool(cfg, "t.flag"));
    struct collected c = {"", 0, 0};
    spw_config_foreach_passthrough(cfg, "kafka.", collect, &c);
    assert_string_equal(c.text, "sasl.password=p=#1;");
    assert_int_equal(spw_config_load_buffer(cfg, "empty", "", 0, err, sizeof(err)), SPW_OK);
    spw_config_destroy(cfg);
}

static void test_config_file_errors(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    static const char bad_value[] = "t.name = first\n# ok\nt.count = 0\nt.flag = true\n";
    const char *path = write_temp(bad_value, strlen(bad_value));
    char want[256];
    assert_int_equal(spw_config_load_file(cfg, path, err, sizeof(err)), SPW_ERR_INVALID);
    snprintf(want, sizeof(want), "%s:3: t.count: 0 is out of range [1, 1024]", path);
    assert_string_equal(err, want);
    assert_string_equal(spw_config_str(cfg, "t.name"), "x"); /* line 1 not applied either */
    unlink(path);

    static const char no_eq[] = "t.count = 3\nt.count 4\n";
    assert_int_equal(
        spw_config_load_buffer(cfg, "cfg.conf", no_eq, strlen(no_eq), err, sizeof(err)),
        SPW_ERR_INVALID);
    assert_string_equal(err, "cfg.conf:2: expected 'key = value', got 't.count 4'");
    static const char unknown[] = "\n\nt.cont = 3\n";
    assert_int_equal(
        spw_config_load_buffer(cfg, "cfg.conf", unknown, strlen(unknown), err, sizeof(err)),
        SPW_ERR_NOT_FOUND);
    assert_string_equal(err, "cfg.conf:3: unknown key 't.cont' (did you mean 't.count'?)");
    static const char empty_key[] = "= 3\n";
    assert_int_equal(
        spw_config_load_buffer(cfg, "c", empty_key, strlen(empty_key), err, sizeof(err)),
        SPW_ERR_INVALID);
    assert_string_equal(err, "c:1: empty key");
    static const char nul[] = "t.count = 3\nt.name = a\0b\n";
    assert_int_equal(spw_config_load_buffer(cfg, "c", nul, sizeof(nul) - 1, err, sizeof(err)),
                     SPW_ERR_INVALID);
    assert_string_equal(err, "c:2: NUL byte in line");

    /* Limits: line length and file size. */
    size_t big_len = SPW_CONFIG_FILE_MAX + 1;
    char *big = malloc(big_len);
    assert_non_null(big);
    memset(big, '#', big_len);
    assert_int_equal(
        spw_config_load_buffer(cfg, "c", big, SPW_CONFIG_LINE_MAX + 1, err, sizeof(err)),
        SPW_ERR_TOO_BIG);
    assert_err_has("c:1: line longer than");
    for (size_t i = 80; i < big_len; i += 80)
        big[i] = '\n';
    assert_int_equal(spw_config_load_buffer(cfg, "c", big, big_len - 1, err, sizeof(err)),
                     SPW_OK); /* just at the limit: only comments */
    path = write_temp(big, big_len);
    assert_int_equal(spw_config_load_file(cfg, path, err, sizeof(err)), SPW_ERR_TOO_BIG);
    assert_err_has("larger than the limit");
    assert_err_has(path);
    unlink(path);
    free(big);

    assert_int_equal(spw_config_load_file(cfg, "/nonexistent/sparrow.conf", err, sizeof(err)),
                     SPW_ERR_NOT_FOUND);
    assert_err_has("/nonexistent/sparrow.conf: cannot open");
    assert_int_equal(spw_config_load_file(cfg, "/tmp", err, sizeof(err)), SPW_ERR_IO);
    assert_err_has("/tmp: cannot read");
    assert_int_equal(spw_config_int(cfg, "t.count"), 10);
    spw_config_destroy(cfg);
}

static void test_config_dump_roundtrip(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    const char *sets[][2] = {
        {"t.flag", "yes"},         {"t.count", "1024"},
        {"t.big", "-12345678901"}, {"t.ratio", "0.1"},
        {"t.name", "#a=b\tc"},     {"t.mode", "ssp:3"},
        {"t.timeout", "90s"},      {"kafka.bootstrap.servers", "h:1"},
        {"kafka.client.id", "me"}, {"rocksdb.options", "a=1;b=2"},
    };
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
        assert_int_equal(set(cfg, sets[i][0], sets[i][1]), SPW_OK);
    char *dump = capture_dump(cfg);
    assert_non_null(strstr(dump, "\n# t.path =\n")); /* unset stays unset */

    spw_config_t *back = new_cfg();
    const char *path = write_temp(dump, strlen(dump));
    assert_int_equal(spw_config_load_file(back, path, err, sizeof(err)), SPW_OK);
    unlink(path);
    assert_true(spw_config_bool(back, "t.flag"));
    assert_int_equal(spw_config_int(back, "t.count"), 1024);
    assert_true(spw_config_int(back, "t.big") == INT64_C(-12345678901));
    assert_true(spw_config_double(back, "t.ratio") == 0.1);
    assert_string_equal(spw_config_str(back, "t.name"), "#a=b\tc");
    assert_null(spw_config_str(back, "t.path"));
    assert_string_equal(spw_config_str(back, "t.format"), "pb");
    assert_string_equal(spw_config_str(back, "t.mode"), "ssp:3");
    assert_int_equal(spw_config_duration_ms(back, "t.timeout"), 90000);
    assert_int_equal(spw_config_int(back, "t.dash-name"), 3);
    assert_string_equal(spw_config_str(back, "rocksdb.options"), "a=1;b=2");
    struct collected a = {"", 0, 0}, b = {"", 0, 0};
    spw_config_foreach_passthrough(cfg, "kafka.", collect, &a);
    spw_config_foreach_passthrough(back, "kafka.", collect, &b);
    assert_string_equal(a.text, "bootstrap.servers=h:1;client.id=me;");
    assert_string_equal(a.text, b.text);

    /* The dump of the reloaded copy differs only in its comments (the sources). */
    char *again = capture_dump(back);
    strip_comments(dump);
    strip_comments(again);
    assert_string_equal(dump, again);
    assert_non_null(strstr(dump, "t.name = #a=b\tc\n"));
    free(again);
    free(dump);
    spw_config_destroy(back);
    spw_config_destroy(cfg);
}

/* Secrets (kafka.sasl.password and the like) are redacted from the dump, from messages and from
 * error lines unless --dump-config-secrets asks for them. */
static void test_config_dump_secrets(void **state)
{
    (void)state;
    static const char pw[] = "hunter2-sasl", keypw[] = "s3cr3t-keypass", oauth[] = "oauth-xyz";
    assert_true(spw_config_key_is_secret("kafka.sasl.password"));
    assert_true(spw_config_key_is_secret("kafka.ssl.key.password"));
    assert_true(spw_config_key_is_secret("kafka.SSL.KEYSTORE.PASSWORD"));
    assert_true(spw_config_key_is_secret("kafka.sasl.oauthbearer.client.secret"));
    assert_true(spw_config_key_is_secret("kafka.sasl.oauthbearer.config"));
    assert_true(spw_config_key_is_secret("kafka.ssl.key.pem"));
    assert_false(spw_config_key_is_secret("kafka.bootstrap.servers"));
    assert_false(spw_config_key_is_secret("kafka.ssl.key.location")); /* a path */
    assert_false(spw_config_key_is_secret("serve.auth.token_file"));  /* a path */
    assert_false(spw_config_key_is_secret("pserver.curve.secret_key_file"));

    spw_config_t *cfg = new_cfg();
    assert_int_equal(set(cfg, "kafka.sasl.password", pw), SPW_OK);
    assert_int_equal(set(cfg, "kafka.ssl.key.password", keypw), SPW_OK);
    assert_int_equal(set(cfg, "kafka.sasl.oauthbearer.client.secret", oauth), SPW_OK);
    assert_int_equal(set(cfg, "kafka.bootstrap.servers", "h:1"), SPW_OK);
    char *dump = capture_dump(cfg);
    assert_null(strstr(dump, pw));
    assert_null(strstr(dump, keypw));
    assert_null(strstr(dump, oauth));
    assert_non_null(strstr(dump, "\n# kafka.sasl.password = (redacted"));
    assert_non_null(strstr(dump, "\nkafka.bootstrap.servers = h:1\n"));
    /* The redacted dump still loads back, without the secrets. */
    spw_config_t *back = new_cfg();
    const char *path = write_temp(dump, strlen(dump));
    assert_int_equal(spw_config_load_file(back, path, err, sizeof(err)), SPW_OK);
    unlink(path);
    struct collected c = {"", 0, 0};
    spw_config_foreach_passthrough(back, "kafka.", collect, &c);
    assert_string_equal(c.text, "bootstrap.servers=h:1;");
    spw_config_destroy(back);
    free(dump);

    spw_config_set_dump_secrets(cfg, true);
    dump = capture_dump(cfg);
    assert_non_null(strstr(dump, "\nkafka.sasl.password = hunter2-sasl\n"));
    assert_non_null(strstr(dump, "\nkafka.ssl.key.password = s3cr3t-keypass\n"));
    assert_non_null(strstr(dump, oauth));
    free(dump);
    spw_config_destroy(cfg);

    /* The CLI: --dump-config redacts, --dump-config-secrets shows; neither leaks in errors. */
    struct spw_cli_result res;
    cfg = new_cfg();
    char *plain[] = {"gen", "--set", "kafka.sasl.password=hunter2-sasl", "--dump-config", NULL};
    assert_int_equal(spw_cli_load(cfg, 4, plain, aliases, 2, NULL, &res, err, sizeof(err)), SPW_OK);
    assert_true(res.dump_config);
    assert_false(res.dump_secrets);
    dump = capture_dump(cfg);
    assert_null(strstr(dump, pw));
    free(dump);
    char *shown[] = {"gen", "--set", "kafka.sasl.password=hunter2-sasl", "--dump-config-secrets",
                     NULL};
    assert_int_equal(spw_cli_load(cfg, 4, shown, aliases, 2, NULL, &res, err, sizeof(err)), SPW_OK);
    assert_true(res.dump_config && res.dump_secrets);
    dump = capture_dump(cfg);
    assert_non_null(strstr(dump, "\nkafka.sasl.password = hunter2-sasl\n"));
    free(dump);
    spw_config_destroy(cfg);

    cfg = new_cfg();
    char *bad_set[] = {"gen", "--set", "kafka.sasl.password=hunter2-sasl\x01", NULL};
    assert_int_not_equal(spw_cli_load(cfg, 3, bad_set, aliases, 2, NULL, &res, err, sizeof(err)),
                         SPW_OK);
    assert_err_has("kafka.sasl.password=(secret)");
    assert_null(strstr(err, pw));
    char *stray[] = {"gen", "--kafka.sasl.password=hunter2-sasl", NULL};
    assert_int_not_equal(spw_cli_load(cfg, 2, stray, aliases, 2, NULL, &res, err, sizeof(err)),
                         SPW_OK);
    assert_err_has("unknown argument");
    assert_null(strstr(err, pw));
    static const char line[] = "kafka.sasl.password: hunter2-sasl\n";
    assert_int_not_equal(
        spw_config_load_buffer(cfg, "f.conf", line, strlen(line), err, sizeof(err)), SPW_OK);
    assert_err_has("f.conf:1:");
    assert_null(strstr(err, pw));
    spw_config_destroy(cfg);
}

static void test_config_cli(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    struct spw_cli_result res;
    char *ok[] = {"gen",        "--count",       "5", "--mode=ssp:3", "--set",
                  "t.flag=yes", "--dump-config", NULL};
    assert_int_equal(spw_cli_load(cfg, 7, ok, aliases, 2, NULL, &res, err, sizeof(err)), SPW_OK);
    assert_true(res.dump_config);
    assert_false(res.help);
    assert_int_equal(spw_config_int(cfg, "t.count"), 5);
    assert_string_equal(spw_config_str(cfg, "t.mode"), "ssp:3");
    assert_true(spw_config_bool(cfg, "t.flag"));

    /* --help stops at once and leaves cfg alone, even before a bad argument. */
    char *help[] = {"gen", "--count", "7", "-h", "--count", "0", "--bogus", NULL};
    assert_int_equal(spw_cli_load(cfg, 7, help, aliases, 2, NULL, &res, err, sizeof(err)), SPW_OK);
    assert_true(res.help);
    assert_int_equal(spw_config_int(cfg, "t.count"), 5);

    static const struct {
        int argc;
        char *argv[6];
        const char *want;
    } bad[] = {
        {2, {"gen", "--bogus"}, "unknown argument '--bogus'"},
        {2, {"gen", "--cuont=3"}, "unknown argument '--cuont=3' (did you mean '--count'?)"},
        {2, {"gen", "positional"}, "unknown argument 'positional'"},
        {2, {"gen", "--count"}, "--count needs a value"},
        {4, {"gen", "--count", "--mode", "sync"}, "--count needs a value"},
        {2, {"gen", "--set"}, "--set needs a value"},
        {3, {"gen", "--set", "t.count"}, "--set 't.count': expected key=value"},
        {3, {"gen", "--count", "0"}, "--count 0: t.count: 0 is out of range [1, 1024]"},
        {2, {"gen", "--mode=xml"}, "--mode=xml: t.mode: 'xml' is not one of"},
        {3, {"gen", "--set", "t.nope=1"}, "--set t.nope=1: unknown key 't.nope'"},
        {2, {"gen", "--dump-config=yes"}, "--dump-config takes no value"},
        {5, {"gen", "--config", "a", "--config", "b"}, "--config given twice"},
        {2, {"gen", "--config="}, "--config needs a file name"},
        {3, {"gen", "--config", "/nonexistent/x.conf"}, "/nonexistent/x.conf: cannot open"},
        {4, {"gen", "--count", "9", "--mode=bad"}, "'bad' is not one of"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        spw_err_t rc = spw_cli_load(cfg, bad[i].argc, (char **)bad[i].argv, aliases, 2, NULL, &res,
                                    err, sizeof(err));
        if (rc == SPW_OK || !strstr(err, bad[i].want))
            fail_msg("case %zu: rc %d, error '%s', expected '%s'", i, rc, err, bad[i].want);
    }
    assert_int_equal(spw_config_int(cfg, "t.count"), 5); /* no failed call changed it */
    char *none[] = {"gen", NULL};
    assert_int_equal(spw_cli_load(cfg, 1, none, NULL, 0, NULL, &res, err, sizeof(err)), SPW_OK);
    assert_false(res.help || res.dump_config);
    spw_config_destroy(cfg);
}

static void test_config_doc_markdown(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    spw_config_doc_markdown(props, n_props, "sparrow test", f);
    fclose(f);
    assert_true(strncmp(buf, "## sparrow test\n\n| Property | Type | Default | Range / choices |",
                        63) == 0);
    for (size_t i = 0; i < n_props; i++) {
        char cell[128];
        snprintf(cell, sizeof(cell), "| `%s` |", props[i].name);
        if (!strstr(buf, cell))
            fail_msg("markdown lacks %s", cell);
    }
    size_t rows = 0;
    for (const char *p = buf; (p = strstr(p, "\n| `")) != NULL; p++)
        rows++;
    assert_int_equal(rows, n_props);
    assert_non_null(strstr(buf, "`SPARROW_T_COUNT`"));
    assert_non_null(strstr(buf, "`SPARROW_T_DASH_NAME`"));
    assert_non_null(strstr(buf, "An integer \\| with a pipe."));
    assert_non_null(strstr(buf, "`pb`, `json`, `criteo`"));
    assert_non_null(strstr(buf, "`ssp:<value>`"));
    assert_non_null(strstr(buf, "[1, 1024]"));
    assert_non_null(strstr(buf, "[0ms, 1h]"));
    assert_non_null(strstr(buf, "(unset)"));
    assert_non_null(strstr(buf, "(file or `--set` only)"));
    /* every table row has the header's 7 pipes, apart from escaped ones */
    for (const char *line = buf; *line;) {
        const char *nl = strchr(line, '\n');
        size_t pipes = 0;
        for (const char *c = line; c < nl; c++)
            pipes += *c == '|' && (c == line || c[-1] != '\\');
        assert_true(line[0] != '|' || pipes == 7);
        line = nl + 1;
    }
    free(buf);
}

static void test_config_doc_help(void **state)
{
    (void)state;
    static const struct spw_config_prop long_desc[] = {
        {"a.n", SPW_CONFIG_INT, "1", 0, 10, NULL,
         "A description long enough that it has to be wrapped over more than one line of the "
         "help text, because no terminal line should exceed one hundred columns in width."},
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    spw_config_doc_help(props, n_props, f);
    spw_config_doc_help(long_desc, 1, f);
    fclose(f);
    for (size_t i = 0; i < n_props; i++) {
        assert_non_null(strstr(buf, props[i].name));
        assert_non_null(strstr(buf, props[i].desc));
    }
    assert_non_null(strstr(buf, "default 10"));
    assert_non_null(strstr(buf, "[1, 1024]"));
    assert_non_null(strstr(buf, "async|sync|ssp:<value>|hybrid:<value>"));
    assert_non_null(strstr(buf, "      A description long enough"));
    for (const char *line = buf; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        assert_true(nl - line <= 100);
        line = nl + 1;
    }
    free(buf);
}

/* Runs fn in a child process; true when the child died of SIGABRT. */
static bool aborts(void (*fn)(const spw_config_t *cfg), const spw_config_t *cfg)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        fn(cfg);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void get_missing(const spw_config_t *cfg)
{
    (void)spw_config_int(cfg, "t.missing");
}

static void get_wrong_type(const spw_config_t *cfg)
{
    (void)spw_config_int(cfg, "t.ratio");
}

static void get_right(const spw_config_t *cfg)
{
    (void)spw_config_int(cfg, "t.count");
}

static void test_config_getters_assert(void **state)
{
    (void)state;
    spw_config_t *cfg = new_cfg();
    assert_true(aborts(get_missing, cfg));
    assert_true(aborts(get_wrong_type, cfg));
    assert_false(aborts(get_right, cfg));
    spw_config_destroy(cfg);
}

SPW_TEST_MAIN(test_config_defaults, test_config_bad_tables, test_config_bool,
              test_config_parse_int64, test_config_parse_double, test_config_int_range,
              test_config_double_range, test_config_string, test_config_enum, test_config_duration,
              test_config_duration_bare, test_config_env_unknown, test_config_unknown_key,
              test_config_passthrough, test_config_env, test_config_precedence,
              test_config_file_format, test_config_file_errors, test_config_dump_roundtrip,
              test_config_dump_secrets, test_config_cli, test_config_doc_markdown,
              test_config_doc_help, test_config_getters_assert)
