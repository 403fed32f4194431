/* The start every subcommand's main shares (configuration from argv and the environment, --help,
 * --dump-config, logging and signal handlers) and the main of the long-running roles
 * (sparrow/cli.h). */
#include <stdio.h>
#include <stdlib.h>

#include "sparrow/cli.h"
#include "sparrow/config.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"

extern char **environ;

void spw_cli_command_usage(const struct spw_cli_command *cmd, FILE *out)
{
    fprintf(out, "%s\nproperties:\n", cmd->usage);
    spw_config_doc_help(cmd->props, *cmd->n_props, out);
}

/* Loads cfg from the rewritten argv; 0 to go on, else the exit code (help and dump answered). */
static int load(const struct spw_cli_command *cmd, spw_config_t *cfg, int argc, char **argv)
{
    char errstr[1024];
    struct spw_cli_result res = {0};
    if (spw_cli_load(cfg, argc, argv, cmd->aliases, cmd->n_aliases, environ, &res, errstr,
                     sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "sparrow %s: %s\n(sparrow %s --help lists the options)\n", cmd->name,
                errstr, cmd->name);
        return 2;
    }
    if (res.help) {
        spw_cli_command_usage(cmd, stdout);
        return -1;
    }
    if (res.dump_config) {
        spw_config_dump(cfg, stdout);
        return -1;
    }
    return 0;
}

static const struct spw_config_table *all_tables;
static size_t n_all_tables;

void spw_cli_set_all_tables(const struct spw_config_table *tables, size_t n_tables)
{
    all_tables = tables;
    n_all_tables = n_tables;
}

const char *const spw_cli_tool_env[] = {
    "SPARROW_SKIP_DEPS",     "SPARROW_SANITIZE",
    "SPARROW_CUDA",          "SPARROW_WERROR",
    "SPARROW_NVCC",          "SPARROW_BENCH",
    "SPARROW_TESTS",         "SPARROW_FUZZ",
    "SPARROW_SCALING_MODES", "SPARROW_SCALING_CANDIDATES",
};
const size_t spw_cli_tool_env_n = sizeof(spw_cli_tool_env) / sizeof(spw_cli_tool_env[0]);

static void warn_env(void *opaque, const char *var, const char *hint)
{
    const struct spw_cli_command *cmd = opaque;
    if (hint)
        SPW_WARN("unknown environment variable ignored", "var=%s command=%s hint=\"%s\"", var,
                 cmd->name, hint);
    else
        SPW_WARN("unknown environment variable ignored",
                 "var=%s command=%s hint=\"no property has this name (sparrow %s --help lists "
                 "them)\"",
                 var, cmd->name, cmd->name);
}

/* Warns about the SPARROW_* variables no command knows. */
static void check_env(const struct spw_cli_command *cmd)
{
    struct spw_config_table own = {cmd->props, *cmd->n_props};
    const struct spw_config_table *tables = all_tables ? all_tables : &own;
    size_t n = all_tables ? n_all_tables : 1;
    spw_config_env_unknown(environ, tables, n, spw_cli_tool_env, spw_cli_tool_env_n, warn_env,
                           (void *)cmd);
}

spw_config_t *spw_cli_command_init(const struct spw_cli_command *cmd, int argc, char **argv,
                                   int *exit_code)
{
    char errstr[1024];
    spw_config_t *cfg = spw_config_new(cmd->props, *cmd->n_props, errstr, sizeof(errstr));
    if (!cfg) {
        fprintf(stderr, "sparrow %s: %s\n", cmd->name, errstr);
        *exit_code = 1;
        return NULL;
    }
    struct spw_cli_args args;
    int rc = spw_cli_args_rewrite(cmd->name, argc, argv, cmd->flags, cmd->n_flags, &args);
    if (rc == 0)
        rc = load(cmd, cfg, args.argc, args.argv);
    spw_cli_args_fini(&args);
    if (rc != 0) {
        *exit_code = rc < 0 ? 0 : rc;
        spw_config_destroy(cfg);
        return NULL;
    }
    enum spw_log_level level = SPW_LOG_INFO;
    const char *text = spw_config_str(cfg, "log.level");
    if (text)
        spw_log_level_parse(text, &level);
    enum spw_log_format format = SPW_LOG_TEXT;
    text = spw_config_str(cfg, "log.format");
    if (text)
        spw_log_format_parse(text, &format);
    spw_log_set_format(format);
    spw_log_init(cmd->name, level);
    check_env(cmd);
    spw_signal_install();
    return cfg;
}

/* A role's life around role->run: its conf, metrics and HTTP endpoint. */
static int run_role(const struct spw_cli_role *role, const char *name, const spw_config_t *cfg)
{
    char errstr[1024];
    void *conf = calloc(1, role->conf_size);
    if (!conf) {
        SPW_ERROR("out of memory", NULL);
        return 1;
    }
    int rc = 1;
    if (role->conf_from_config(cfg, conf, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        rc = 2;
        goto out_free_conf;
    }
    spw_metrics_t *metrics = spw_metrics_new();
    if (!metrics) {
        SPW_ERROR("out of memory", NULL);
        goto out_free_conf;
    }
    spw_http_t *http = NULL;
    if (spw_http_start_from_config(cfg, name, metrics, role->http_max_body, &http, errstr,
                                   sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("http endpoint failed", "error=\"%s\"", errstr);
        goto out_destroy_metrics;
    }
    rc = role->run(conf, metrics, http);
    spw_http_stop(http);
out_destroy_metrics:
    spw_metrics_destroy(metrics);
out_free_conf:
    free(conf);
    return rc;
}

int spw_cli_command_main(const struct spw_cli_command *cmd, int argc, char **argv)
{
    int rc = 1;
    spw_config_t *cfg = spw_cli_command_init(cmd, argc, argv, &rc);
    if (!cfg)
        return rc;
    rc = cmd->run ? cmd->run(cfg) : run_role(cmd->role, cmd->name, cfg);
    spw_config_destroy(cfg);
    return rc;
}
