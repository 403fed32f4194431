/* Configuration: one property table per role that validates, dumps and documents itself. */
#ifndef SPARROW_CONFIG_H
#define SPARROW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sparrow/err.h"

/*
 * Precedence, lowest first: the table's defaults < a configuration file (`key = value` lines,
 * `#` comments) < environment variables < `--set key=value` arguments. The environment name of a
 * property is SPARROW_ followed by the name upper-cased with '.' and '-' turned into '_'
 * (pserver.memory.mb -> SPARROW_PSERVER_MEMORY_MB).
 *
 * A property whose name ends in ".*" (for example "kafka.*") is a pass-through prefix: any key
 * under it is accepted as a string and handed on unchanged (to librdkafka, RocksDB, ...); the
 * environment cannot set pass-through keys (their names are not recoverable from variable names),
 * the file and --set can.
 *
 * Every layer trims spaces and tabs around keys and values, and rejects values that hold control
 * characters other than tab (so that --dump-config always writes a file that loads back). In a
 * file, a line whose first non-blank character is '#' is a comment; '#' inside a value is kept,
 * and values are taken literally (no quotes, no escapes). The layering functions below apply in
 * the order they are called; spw_config_load and spw_cli_load call them in precedence order.
 * Each of them either applies all of its input or, on error, leaves cfg unchanged.
 */

/* Limits on configuration input (files, environment and arguments all come from outside). */
#define SPW_CONFIG_KEY_MAX         255     /* bytes in a key */
#define SPW_CONFIG_VALUE_MAX       16384   /* bytes in a value */
#define SPW_CONFIG_LINE_MAX        32768   /* bytes in one line of a file */
#define SPW_CONFIG_FILE_MAX        1048576 /* bytes in a configuration file (1 MiB) */
#define SPW_CONFIG_PASSTHROUGH_MAX 1024    /* distinct pass-through keys */

enum spw_config_type {
    SPW_CONFIG_BOOL,   /* true|false|1|0|yes|no|on|off */
    SPW_CONFIG_INT,    /* int64, full-consumption parse, within [min, max] */
    SPW_CONFIG_DOUBLE, /* finite double within [min, max] */
    SPW_CONFIG_STRING, /* any text (max = maximum length when > 0) */
    SPW_CONFIG_ENUM,   /* one of `choices` ("a|b|c"); a choice "name:" takes a suffix, "ssp:4" */
    SPW_CONFIG_DURATION_MS, /* "250ms", "5s", "2m", "1h", within [min, max]; a bare number only
                             * when 0 or when the name ends in "_ms" (milliseconds) */
    SPW_CONFIG_PASSTHROUGH, /* name ends in ".*": any key under the prefix, as a string */
};

/* One row of a property table. Tables are static const arrays owned by their module. */
struct spw_config_prop {
    const char *name; /* dotted, lower case: "pserver.memory.mb" */
    enum spw_config_type type;
    const char *def;     /* default as text (NULL: unset; required is checked by the role) */
    double min, max;     /* range for INT, DOUBLE, DURATION_MS; max length for STRING */
    const char *choices; /* ENUM only: "none|inverse|exp:|drop:" */
    const char *desc;    /* one sentence for --help, --dump-config and CONFIGURATION.md */
};

/* A set of values for one table. Not thread-safe while being set; read-only use from many
 * threads after loading is safe. */
typedef struct spw_config spw_config_t;

/* Creates a configuration holding every default of props (which must outlive it). Returns NULL
 * and fills errstr when a default fails its own validation (a bug in the table). */
spw_config_t *spw_config_new(const struct spw_config_prop *props, size_t n_props, char *errstr,
                             size_t errstr_size);

/* Frees cfg and its strings. NULL is a no-op. */
void spw_config_destroy(spw_config_t *cfg);

/* Validates and sets one property. On error returns SPW_ERR_INVALID (malformed value, out of
 * range) or SPW_ERR_NOT_FOUND (unknown key), writes a message naming the key and the allowed
 * values into errstr, and leaves cfg unchanged. */
spw_err_t spw_config_set(spw_config_t *cfg, const char *key, const char *value, char *errstr,
                         size_t errstr_size);

/* Applies a `key = value` file; the first bad line stops it with an error naming file:line.
 * Files larger than SPW_CONFIG_FILE_MAX or with lines longer than SPW_CONFIG_LINE_MAX are
 * refused (SPW_ERR_TOO_BIG); a file that cannot be read gives SPW_ERR_NOT_FOUND or SPW_ERR_IO. */
spw_err_t spw_config_load_file(spw_config_t *cfg, const char *path, char *errstr,
                               size_t errstr_size);

/* Like spw_config_load_file for len bytes of file text at data (not NUL-terminated), which need
 * not outlive the call; name is used in messages ("name:line: ..."). */
spw_err_t spw_config_load_buffer(spw_config_t *cfg, const char *name, const void *data, size_t len,
                                 char *errstr, size_t errstr_size);

/* Applies SPARROW_* variables from envp (NULL-terminated "NAME=value" strings, e.g. environ)
 * that name a property of this table; others are ignored. */
spw_err_t spw_config_load_env(spw_config_t *cfg, char *const *envp, char *errstr,
                              size_t errstr_size);

/* The environment variable of property name into buf (size bytes, truncated): SPARROW_ and the
 * name upper-cased with '.' and '-' as '_' (pserver.memory.mb -> SPARROW_PSERVER_MEMORY_MB). */
void spw_config_env_name(const char *name, char *buf, size_t size);

/* One property table, for checks across every command's table. */
struct spw_config_table {
    const struct spw_config_prop *props;
    size_t n_props;
};

/*
 * The SPARROW_* variables of envp (NULL-terminated "NAME=value" strings) that name no property of
 * any of the n_tables tables and are not listed in ignore[0..n_ignore) (variables of the build
 * and test tools): fn is called for each with the variable's name (NUL-terminated, without the
 * value) and a hint, or NULL when none: "did you mean trainer.batch (SPARROW_TRAINER_BATCH)?"
 * for the property whose variable is nearest (at most 2 edits, a swap of neighbours counting as
 * one; ties: the first in table order), or a note that pass-through keys ("kafka.*") cannot be
 * set from the environment. Returns how many there were. envp, tables and ignore are borrowed;
 * pure apart from fn; thread-safe.
 */
size_t spw_config_env_unknown(char *const *envp, const struct spw_config_table *tables,
                              size_t n_tables, const char *const *ignore, size_t n_ignore,
                              void (*fn)(void *opaque, const char *var, const char *hint),
                              void *opaque);

/* Applies the layers in precedence order: file (may be NULL) < envp (may be NULL) < sets (n
 * "key=value" strings). */
spw_err_t spw_config_load(spw_config_t *cfg, const char *file, char *const *envp,
                          const char *const *sets, size_t n_sets, char *errstr, size_t errstr_size);

/* Typed getters. The key must name a property of the matching type (asserted): a wrong key is a
 * bug, not an input error. Strings are owned by cfg and valid until it changes. */
bool spw_config_bool(const spw_config_t *cfg, const char *key);
int64_t spw_config_int(const spw_config_t *cfg, const char *key);
double spw_config_double(const spw_config_t *cfg, const char *key);
const char *spw_config_str(const spw_config_t *cfg, const char *key); /* STRING, ENUM; NULL unset */
int64_t spw_config_duration_ms(const spw_config_t *cfg, const char *key);

/* True when the property key (any type but pass-through; asserted) has a value: a non-NULL
 * default or one set by a layer. The typed getters return 0/false for unset numbers. */
bool spw_config_is_set(const spw_config_t *cfg, const char *key);

/* Calls fn for every pass-through key under prefix ("kafka.") with the key less the prefix. Stops
 * at and returns the first non-zero return of fn. */
int spw_config_foreach_passthrough(const spw_config_t *cfg, const char *prefix,
                                   int (*fn)(const char *key, const char *value, void *opaque),
                                   void *opaque);

/* Writes every effective value as `key = value` lines (a valid configuration file), each with
 * its source (default, file, env, set) as a comment. Secret values (keys that
 * spw_config_key_is_secret names: kafka.sasl.password, kafka.ssl.key.password, ...) are written
 * as a comment, `# key = (redacted; ...)`, so that the dump loads back without them, unless
 * spw_config_set_dump_secrets(cfg, true) (the CLI's --dump-config-secrets) asked for them. */
void spw_config_dump(const spw_config_t *cfg, FILE *out);

/* Whether spw_config_dump writes secret values in clear (default false). */
void spw_config_set_dump_secrets(spw_config_t *cfg, bool show);

/* True when key names a secret value, by name (rows and pass-through keys alike, compared without
 * case): its name holds "password", "passwd", "secret", "token", "credential", "private" or
 * "oauthbearer.config", or it is an inline PEM key ("ssl.key.pem"), unless the name
 * ends in "_file", ".file", ".location" or ".path" (a path to a secret, shown: the file's contents
 * are never read into the configuration). A row holding a secret must be named so that this rule
 * catches it (a flag on the row would need every table's initialisers changed). */
bool spw_config_key_is_secret(const char *key);

/* Writes the table as a Markdown section (heading `title`) for docs/CONFIGURATION.md: a table
 * of property, type, default, range or choices, environment variable and description. */
void spw_config_doc_markdown(const struct spw_config_prop *props, size_t n_props, const char *title,
                             FILE *out);

/* Writes the table as `--help` text (name, type, default, range, description): one aligned line
 * per property followed by its description, indented and wrapped at 100 columns. */
void spw_config_doc_help(const struct spw_config_prop *props, size_t n_props, FILE *out);

/* Parses a whole string as an int64 / finite double (no trailing garbage, no overflow).
 * Returns SPW_OK or SPW_ERR_INVALID. */
spw_err_t spw_parse_int64(const char *text, int64_t *out);
spw_err_t spw_parse_double(const char *text, double *out);

/* ---- command-line front end shared by every subcommand ---- */

/* A flag that is shorthand for one property: {"--n", "gen.n"} makes `--n 5` and `--n=5` mean
 * `--set gen.n=5`. */
struct spw_cli_alias {
    const char *flag;
    const char *key;
};

/* The rows every role's table shares: one spelling, range and description each. */

/* The logging rows of every command's table (two rows: one table entry each): log.level, the
 * lowest level of log line written to stderr (def: "info" for the roles), and log.format, text
 * or JSON lines (sparrow/log.h). spw_cli_command_init applies both. */
#define SPW_CONFIG_PROP_LOG_LEVEL(def)                                                             \
    {"log.level",                                                                                  \
     SPW_CONFIG_ENUM,                                                                              \
     def,                                                                                          \
     0,                                                                                            \
     0,                                                                                            \
     "error|warn|info|debug",                                                                      \
     "Lowest level of log line written to stderr."},                                               \
    {                                                                                              \
        "log.format", SPW_CONFIG_ENUM, "text", 0, 0, "text|json",                                  \
            "Log line format on stderr: text (`ts LEVEL role msg key=value ...`) or json (one "    \
            "object per line: ts, level, role, msg, and each key=value as a member)."              \
    }

/* ROLE.http.*: the role's HTTP endpoint (/metrics, /healthz, /readyz and its own routes), started
 * by spw_http_start_from_config: addr, port and the bounds on slow and hostile clients
 * (struct spw_http_limits; the defaults are SPW_HTTP_DEFAULT_*). role is a string literal. */
#define SPW_CONFIG_PROPS_HTTP(role, addr, port)                                                    \
    {role ".http.addr",                                                                            \
     SPW_CONFIG_STRING,                                                                            \
     addr,                                                                                         \
     1,                                                                                            \
     255,                                                                                          \
     NULL,                                                                                         \
     "Address the HTTP endpoint (/metrics, /healthz, /readyz and the role's routes) binds: "       \
     "0.0.0.0 for every interface, 127.0.0.1 for this host only."},                                \
        {role ".http.port",                                                                        \
         SPW_CONFIG_INT,                                                                           \
         port,                                                                                     \
         -1,                                                                                       \
         65535,                                                                                    \
         NULL,                                                                                     \
         "Port of the HTTP endpoint (0: any free port, logged; -1: no endpoint)."},                \
        {role ".http.max_connections",                                                             \
         SPW_CONFIG_INT,                                                                           \
         "1024",                                                                                   \
         1,                                                                                        \
         1000000,                                                                                  \
         NULL,                                                                                     \
         "Connections the HTTP endpoint holds open at once; at the limit a new connection evicts " \
         "the oldest one that has not delivered its request (slow clients first, then idle "       \
         "keep-alive ones) and is refused only when all are busy. Lowered (logged) to fit the "    \
         "open-file limit, which is raised to its hard limit at start."},                          \
        {role ".http.per_ip_connections",                                                          \
         SPW_CONFIG_INT,                                                                           \
         "0",                                                                                      \
         0,                                                                                        \
         1000000,                                                                                  \
         NULL,                                                                                     \
         "Most connections one client address may hold; more are refused (0: no per-address "      \
         "limit). Leave 0 behind a proxy or load balancer, whose connections share one address."}, \
        {role ".http.header_timeout",                                                              \
         SPW_CONFIG_DURATION_MS,                                                                   \
         "10s",                                                                                    \
         100,                                                                                      \
         3600000,                                                                                  \
         NULL,                                                                                     \
         "Longest a connection may take to deliver a request's headers, counted from its accept "  \
         "or the end of its previous request (idle keep-alive included); then it is closed."},     \
        {role ".http.body_timeout",                                                                \
         SPW_CONFIG_DURATION_MS,                                                                   \
         "30s",                                                                                    \
         100,                                                                                      \
         3600000,                                                                                  \
         NULL,                                                                                     \
         "Longest a request may take to deliver its body once its headers are in; then the "       \
         "connection is closed."},                                                                 \
    {                                                                                              \
        role ".http.threads", SPW_CONFIG_INT, "4", 1, 64, NULL,                                    \
            "Threads serving the HTTP endpoint's connections (an epoll loop each); route "         \
            "handlers run on them."                                                                \
    }

struct spw_cli_result {
    bool help;         /* --help or -h was given */
    bool dump_config;  /* --dump-config or --dump-config-secrets was given */
    bool dump_secrets; /* --dump-config-secrets: the dump shows secret values (set on cfg too) */
};

/*
 * Loads cfg from argv[1..argc) and envp with the documented precedence. Understands
 * `--config FILE`, `--set key=value` (repeatable), `--dump-config`, `--dump-config-secrets` (a
 * dump that shows secret values: spw_config_set_dump_secrets(cfg, true) once loaded),
 * `--help`/`-h`, and the aliases (each `--flag value` or `--flag=value`). Later --set/aliases win
 * over earlier ones. Anything else is an error naming the argument. Writes flags seen into *res.
 * --help/-h stops at once: SPW_OK with res->help set and cfg unchanged (help works even when the
 * file or environment is broken). --config may appear once. A flag whose value is missing (last
 * argument, or the next argument starts with "--") is an error. On error cfg is unchanged.
 */
spw_err_t spw_cli_load(spw_config_t *cfg, int argc, char **argv,
                       const struct spw_cli_alias *aliases, size_t n_aliases, char *const *envp,
                       struct spw_cli_result *res, char *errstr, size_t errstr_size);

#endif
