/* Unit tests of the command-line front end (sparrow/cli.h): the rewrite of valueless and
 * repeatable flags, and spw_cli_command_init's answers (help, dump, bad arguments, values). */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/cli.h"

static bool not_upper(const char *value)
{
    return value[0] < 'A' || value[0] > 'Z';
}

static const struct spw_cli_flag flags[] = {
    {"--quiet", "t.quiet", "true", 0, NULL},
    {"--no-serve", "t.serve", "false", 0, NULL},
    {"--topic", "t.topics", NULL, ',', NULL},
    {"--tag", "t.tags", NULL, ';', not_upper},
};

static const struct spw_config_prop props[] = {
    {"t.quiet", SPW_CONFIG_BOOL, "false", 0, 0, NULL, "Quiet."},
    {"t.serve", SPW_CONFIG_BOOL, "true", 0, 0, NULL, "Serve."},
    {"t.topics", SPW_CONFIG_STRING, "", 0, 4096, NULL, "Topics, comma-separated."},
    {"t.tags", SPW_CONFIG_STRING, "", 0, 4096, NULL, "Tags, semicolon-separated."},
    {"t.count", SPW_CONFIG_INT, "1", 1, 100, NULL, "A count."},
    SPW_CONFIG_PROP_LOG_LEVEL("warn"),
    SPW_CONFIG_PROPS_HTTP("t", "127.0.0.1", "-1"),
};

static const struct spw_cli_alias aliases[] = {{"--count", "t.count"}};
static const size_t n_props = SPW_CLI_COUNT(props);

/* A command's work: the exit code is t.count, so the test sees the configuration it got. */
static int run_count(const spw_config_t *cfg)
{
    return (int)spw_config_int(cfg, "t.count");
}

static const struct spw_cli_command cmd = {
    .name = "t",
    .summary = "a test command",
    .props = props,
    .n_props = &n_props,
    .aliases = aliases,
    .n_aliases = SPW_CLI_COUNT(aliases),
    .flags = flags,
    .n_flags = SPW_CLI_COUNT(flags),
    .usage = "usage: sparrow t [--quiet] [--topic T]...\n",
    .run = run_count,
};

/* The rewritten vector from argv[1] on, joined by spaces. */
static void joined(const struct spw_cli_args *a, char *out, size_t size)
{
    out[0] = '\0';
    for (int i = 1; i < a->argc; i++) {
        strncat(out, a->argv[i], size - strlen(out) - 1);
        if (i + 1 < a->argc)
            strncat(out, " ", size - strlen(out) - 1);
    }
    assert_null(a->argv[a->argc]);
}

static void test_cli_rewrite_valueless_and_lists(void **state)
{
    (void)state;
    char *argv[] = {"t",   "--quiet", "--topic", "a:2", "--count",     "3",         "--topic",
                    "b:1", "--tag=x", "--tag",   "Y",   "--topic=c:4", "--no-serve"};
    struct spw_cli_args a;
    assert_int_equal(
        spw_cli_args_rewrite("t", SPW_CLI_COUNT(argv), argv, flags, SPW_CLI_COUNT(flags), &a), 0);
    char text[512];
    joined(&a, text, sizeof(text));
    /* a list at its first occurrence; a value the accept hook refuses is left as it was */
    assert_string_equal(text, "--set t.quiet=true --set t.topics=a:2,b:1,c:4 --count 3 "
                              "--set t.tags=x --tag Y --set t.serve=false");
    spw_cli_args_fini(&a);
    spw_cli_args_fini(&a); /* zeroed: safe again */
}

static void test_cli_rewrite_refusals(void **state)
{
    (void)state;
    struct spw_cli_args a;
    char *missing[] = {"t", "--topic"};
    assert_int_equal(spw_cli_args_rewrite("t", 2, missing, flags, SPW_CLI_COUNT(flags), &a), 2);
    spw_cli_args_fini(&a);
    char *flag_next[] = {"t", "--topic", "--quiet"};
    assert_int_equal(spw_cli_args_rewrite("t", 3, flag_next, flags, SPW_CLI_COUNT(flags), &a), 2);
    spw_cli_args_fini(&a);
    char *holds_sep[] = {"t", "--topic", "a,b"};
    assert_int_equal(spw_cli_args_rewrite("t", 3, holds_sep, flags, SPW_CLI_COUNT(flags), &a), 2);
    spw_cli_args_fini(&a);
    /* a valueless flag given a value is left for spw_cli_load to refuse */
    char *valued[] = {"t", "--quiet=1"};
    assert_int_equal(spw_cli_args_rewrite("t", 2, valued, flags, SPW_CLI_COUNT(flags), &a), 0);
    assert_int_equal(a.argc, 2);
    assert_string_equal(a.argv[1], "--quiet=1");
    spw_cli_args_fini(&a);
}

/* spw_cli_command_init with stdout sent to /dev/null (--help and --dump-config print there). */
static spw_config_t *init_quiet(int argc, char **argv, int *rc)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *null = freopen("/dev/null", "w", stdout);
    assert_non_null(null);
    spw_config_t *cfg = spw_cli_command_init(&cmd, argc, argv, rc);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    return cfg;
}

static void test_cli_command_init(void **state)
{
    (void)state;
    int rc = -7;
    char *ok[] = {"t", "--quiet", "--topic", "a", "--topic", "b", "--count", "5"};
    spw_config_t *cfg = init_quiet(SPW_CLI_COUNT(ok), ok, &rc);
    assert_non_null(cfg);
    assert_true(spw_config_bool(cfg, "t.quiet"));
    assert_true(spw_config_bool(cfg, "t.serve"));
    assert_string_equal(spw_config_str(cfg, "t.topics"), "a,b");
    assert_int_equal(spw_config_int(cfg, "t.count"), 5);
    spw_config_destroy(cfg);

    /* a later --set wins over the list, as over any alias */
    char *later[] = {"t", "--topic", "a", "--set", "t.topics=z"};
    cfg = init_quiet(SPW_CLI_COUNT(later), later, &rc);
    assert_non_null(cfg);
    assert_string_equal(spw_config_str(cfg, "t.topics"), "z");
    spw_config_destroy(cfg);

    char *help[] = {"t", "--help"};
    rc = -7;
    assert_null(init_quiet(2, help, &rc));
    assert_int_equal(rc, 0);
    char *dump[] = {"t", "--dump-config"};
    rc = -7;
    assert_null(init_quiet(2, dump, &rc));
    assert_int_equal(rc, 0);
    char *bad[][2] = {{"t", "--count=0"}, {"t", "--nope"}, {"t", "--quiet=1"}, {"t", "--topic"}};
    for (size_t i = 0; i < SPW_CLI_COUNT(bad); i++) {
        rc = -7;
        assert_null(init_quiet(2, bad[i], &rc));
        assert_int_equal(rc, 2);
    }
}

static void test_cli_command_usage(void **state)
{
    (void)state;
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_non_null(f);
    spw_cli_command_usage(&cmd, f);
    fclose(f);
    assert_non_null(strstr(buf, "usage: sparrow t [--quiet] [--topic T]...\n\nproperties:\n"));
    assert_non_null(strstr(buf, "t.topics"));
    assert_non_null(strstr(buf, "log.level"));
}

static void test_cli_command_main_runs(void **state)
{
    (void)state;
    char *argv[] = {"t", "--count", "9"};
    assert_int_equal(spw_cli_command_main(&cmd, SPW_CLI_COUNT(argv), argv), 9);
    char *bad[] = {"t", "--count", "x"};
    assert_int_equal(spw_cli_command_main(&cmd, SPW_CLI_COUNT(bad), bad), 2);
}

struct role_conf {
    int64_t count;
    bool quiet;
};

static spw_err_t role_conf_from_config(const spw_config_t *cfg, void *conf, char *errstr,
                                       size_t errstr_size)
{
    struct role_conf *c = conf;
    c->count = spw_config_int(cfg, "t.count");
    c->quiet = spw_config_bool(cfg, "t.quiet");
    if (c->count == 13) {
        snprintf(errstr, errstr_size, "t.count 13 is refused");
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}

/* The role's run: its conf as the front end made it, metrics always, no HTTP (port -1). */
static int role_run(void *conf, struct spw_metrics *metrics, struct spw_http *http)
{
    const struct role_conf *c = conf;
    if (!metrics || http)
        return 99;
    return (int)c->count + (c->quiet ? 50 : 0);
}

static void test_cli_command_main_role(void **state)
{
    (void)state;
    static const struct spw_cli_role role = {sizeof(struct role_conf), 4096, role_conf_from_config,
                                             role_run};
    struct spw_cli_command role_cmd = cmd;
    role_cmd.run = NULL;
    role_cmd.role = &role;
    char *argv[] = {"t", "--quiet", "--count", "4"};
    assert_int_equal(spw_cli_command_main(&role_cmd, SPW_CLI_COUNT(argv), argv), 54);
    char *refused[] = {"t", "--count", "13"};
    assert_int_equal(spw_cli_command_main(&role_cmd, SPW_CLI_COUNT(refused), refused), 2);
}

/* Positional arguments: bare ones (not an option's value), "-", and all after "--", encoded so
 * that any byte survives the configuration, and decoded again in order. */
static void test_cli_rewrite_positional(void **state)
{
    (void)state;
    static const struct spw_cli_flag pflags[] = {
        {"--quiet", "t.quiet", "true", 0, NULL},
        {"FIELD VALUE", "t.args", NULL, ' ', NULL},
    };
    char *argv[] = {"t", "user",  "--count",       "3",  "a b", "--quiet", "50%,x", "",
                    "-", "--set", "t.serve=false", "--", "-5",  "--quiet"};
    struct spw_cli_args a;
    assert_int_equal(
        spw_cli_args_rewrite("t", SPW_CLI_COUNT(argv), argv, pflags, SPW_CLI_COUNT(pflags), &a), 0);
    char text[512];
    joined(&a, text, sizeof(text));
    assert_string_equal(text, "--set t.args=user a%20b 50%25%2Cx %00 - -5 --quiet --count 3 "
                              "--set t.quiet=true --set t.serve=false");
    size_t n = 0;
    char **v = spw_cli_positional_split(a.argv[2] + strlen("t.args="), &n);
    assert_non_null(v);
    assert_int_equal(n, 7);
    const char *want[] = {"user", "a b", "50%,x", "", "-", "-5", "--quiet"};
    for (size_t i = 0; i < n; i++)
        assert_string_equal(v[i], want[i]);
    assert_null(v[n]);
    spw_cli_positional_free(v);
    spw_cli_args_fini(&a);
}

SPW_TEST_MAIN(test_cli_rewrite_valueless_and_lists, test_cli_rewrite_positional,
              test_cli_rewrite_refusals, test_cli_command_init, test_cli_command_usage,
              test_cli_command_main_runs, test_cli_command_main_role)
