/* The command-line front end of every `sparrow` subcommand: flags that spw_cli_load has no form
 * for, the start every command shares (configuration, --help, --dump-config, logging, signals),
 * and the main of the long-running roles. Everything here is called from main, once: not
 * thread-safe. */
#ifndef SPARROW_CLI_H
#define SPARROW_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "sparrow/config.h"

/* Elements of a static array. */
#define SPW_CLI_COUNT(array) (sizeof(array) / sizeof((array)[0]))
/* A decimal macro as a string literal, for usage texts: SPW_CLI_STR(SPW_PIPELINE_MAX_SHARDS). */
#define SPW_CLI_STR_(x) #x
#define SPW_CLI_STR(x)  SPW_CLI_STR_(x)

/*
 * A flag spw_cli_load has no form for. With value non-NULL the flag takes no value and means
 * `--set key=value` (`--no-serve` is `--set demo.serve=false`). With value NULL it takes one
 * (`--flag V` or `--flag=V`) and repeats accumulate: every occurrence's value, in order, joined by
 * sep, becomes one `--set key=V1<sep>V2...` at the place of the first occurrence (so a later
 * `--set key=...` still wins over it, as for any alias); a value holding sep is refused. accept
 * (may be NULL) narrows which values of a repeatable flag are taken; the others are left for
 * spw_cli_load (launch's `--set ROLE:key=value` against the shared `--set key=value`).
 *
 * At most one entry whose flag does not start with '-' (its name in messages: "VALUE") takes the
 * positional arguments, as a repeatable flag of its key takes values: every argument that does not
 * start with '-' (or is "-") and is not the value of the option before it (every option but the
 * valueless ones, --help, -h, --dump-config and --dump-config-secrets, given without '=' takes
 * the next argument), and every argument after a "--". Any byte may appear in them: each is
 * encoded (spaces, control bytes, '%' and ',' as %XX; the empty argument as %00) and they are
 * joined by ' ' (its sep must be ' '); spw_cli_positional_split gives them back.
 */
struct spw_cli_flag {
    const char *flag;
    const char *key;
    const char *value;
    char sep;
    bool (*accept)(const char *value);
};

/* The rewritten argument vector: argv holds argc pointers and a NULL, into the caller's argv and
 * into storage owned by this struct. */
struct spw_cli_args {
    int argc;
    char **argv;
    char **owned; /* strings made for the rewrite */
    size_t n_owned;
};

/*
 * Rewrites argv[1..argc) (argv[0], the command's name, is kept) for flags[0..n_flags) into *out.
 * Returns 0, or 2 with a message naming the flag on stderr ("sparrow <command>: --topic needs a
 * value") for a repeatable flag without a value or a value that holds its separator, 1 when out
 * of memory. --help and everything else pass through unchanged. Free with spw_cli_args_fini
 * (also after an error).
 */
int spw_cli_args_rewrite(const char *command, int argc, char **argv,
                         const struct spw_cli_flag *flags, size_t n_flags,
                         struct spw_cli_args *out);

/* Frees what spw_cli_args_rewrite made. Safe on a zeroed struct. */
void spw_cli_args_fini(struct spw_cli_args *args);

/* The positional arguments of a command (the value of its positional flag's key, NULL: none),
 * decoded, in order: a NULL-terminated array of *n strings (free with spw_cli_positional_free),
 * NULL when out of memory. */
char **spw_cli_positional_split(const char *list, size_t *n);
void spw_cli_positional_free(char **values);

struct spw_metrics;
struct spw_http;

/* A long-running role (pserver, trainer, coordinator, ingest): its conf struct, made from the
 * configuration, and the object it runs, with a metrics registry and an HTTP endpoint. */
struct spw_cli_role {
    size_t conf_size;     /* the role's conf struct, allocated zeroed by the front end */
    size_t http_max_body; /* largest request body of the role's HTTP endpoint */
    /* Every value check: cfg into the role's conf at conf (borrowing cfg's strings). An error
     * (errstr filled) exits 2 before anything starts. */
    spw_err_t (*conf_from_config)(const spw_config_t *cfg, void *conf, char *errstr,
                                  size_t errstr_size);
    /* new, run, destroy, with the process's metrics registry and HTTP endpoint (NULL when its
     * port is -1), both borrowed; returns the exit code. */
    int (*run)(void *conf, struct spw_metrics *metrics, struct spw_http *http);
};

/* A subcommand: its property table, flags and --help text, and what it does. Static, borrowed. */
struct spw_cli_command {
    const char *name;    /* "pserver": `sparrow pserver`, messages and the log's role */
    const char *summary; /* one line for `sparrow --help` */
    const struct spw_config_prop *props;
    const size_t *n_props;
    const struct spw_cli_alias *aliases; /* `--flag value` shorthands of properties */
    size_t n_aliases;
    const struct spw_cli_flag *flags; /* valueless and repeatable flags (may be NULL) */
    size_t n_flags;
    const char *usage; /* synopsis and description; --help prints it, then the properties */
    /* Exactly one of: the command's work on its configuration (logging and signal handlers
     * installed; returns the exit code), or the role it runs. */
    int (*run)(const spw_config_t *cfg);
    const struct spw_cli_role *role;
};

/* Writes cmd's --help: its usage text, "properties:" and the table (spw_config_doc_help). */
void spw_cli_command_usage(const struct spw_cli_command *cmd, FILE *out);

/* Every command's property table (borrowed; static), so that spw_cli_command_init can tell a
 * misspelt SPARROW_* variable from one meant for another command. Call once from main, before
 * any command starts; without it only the command's own table is known. */
void spw_cli_set_all_tables(const struct spw_config_table *tables, size_t n_tables);

/* SPARROW_* variables that are no property but belong to the build, test and benchmark tools
 * (SPARROW_SKIP_DEPS, SPARROW_SANITIZE, ...): never warned about. */
extern const char *const spw_cli_tool_env[];
extern const size_t spw_cli_tool_env_n;

/*
 * The start every subcommand shares: rewrites cmd's flags, creates a configuration of its table,
 * loads it with spw_cli_load (argv, environ), answers --help and --dump-config, then initialises
 * logging (cmd->name, the table's "log.level" and "log.format") and the SIGTERM/SIGINT handlers,
 * and warns (one WARN line each, with the nearest property when there is an obvious one) about
 * every SPARROW_* variable that names no property of any command (spw_cli_set_all_tables). Returns
 * the configuration (the caller destroys it) or NULL with *exit_code set: 0 after --help or
 * --dump-config, 2 for a bad argument or value (the message is on stderr), 1 when out of memory.
 */
spw_config_t *spw_cli_command_init(const struct spw_cli_command *cmd, int argc, char **argv,
                                   int *exit_code);

/*
 * The main of every subcommand (argv[0] is its name): spw_cli_command_init, then cmd->run, or for
 * a role its conf (role->conf_from_config), a metrics registry, the HTTP endpoint of its http.*
 * rows (SPW_CONFIG_PROPS_HTTP) and role->run. Returns the exit code: run's, 2 for a bad argument
 * or value, 1 when the endpoint cannot start.
 */
int spw_cli_command_main(const struct spw_cli_command *cmd, int argc, char **argv);

#endif
