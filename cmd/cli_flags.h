/* Flags that spw_cli_load has no form for (a flag without a value, a flag whose repeats add up),
 * rewritten into `--set key=value` before the shared front end reads argv. Only cmd/ includes
 * this header. */
#ifndef SPARROW_CMD_CLI_FLAGS_H
#define SPARROW_CMD_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

/*
 * One such flag. With value non-NULL the flag takes no value and means `--set key=value`
 * (`--no-serve` is `--set demo.serve=false`). With value NULL it takes one (`--flag V` or
 * `--flag=V`) and repeats accumulate: every occurrence's value, in order, joined by sep, becomes
 * one `--set key=V1<sep>V2...` at the place of the first occurrence (so a later `--set key=...`
 * still wins over it, as for any alias); a value holding sep is refused. accept (may be NULL)
 * narrows which values of a repeatable flag are taken; the others are left for spw_cli_load
 * (launch's `--set ROLE:key=value` against the shared `--set key=value`).
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
 * (also after an error). Not thread-safe: call from main.
 */
int spw_cli_args_rewrite(const char *command, int argc, char **argv,
                         const struct spw_cli_flag *flags, size_t n_flags,
                         struct spw_cli_args *out);

/* Frees what spw_cli_args_rewrite made. Safe on a zeroed struct. */
void spw_cli_args_fini(struct spw_cli_args *args);

#endif
