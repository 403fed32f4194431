/* libFuzzer target: positional arguments through the CLI rewrite and back. The input, split at NUL
 * bytes, is the argument list after "--"; the encoded list must decode to exactly those arguments,
 * in order. The raw input also goes straight to spw_cli_positional_split (a hand-set value). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct spw_cli_flag flags[] = {
    {"VALUE", "t.args", NULL, ' ', NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t n_direct = 0;
    spw_cli_positional_free(spw_cli_positional_split(buf, &n_direct));
    /* the arguments: NUL-separated pieces of the input */
    char *argv[4100];
    int argc = 0;
    argv[argc++] = "t";
    argv[argc++] = "--";
    int first = argc;
    for (size_t i = 0; i <= size && argc < 4096;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    struct spw_cli_args a;
    if (spw_cli_args_rewrite("t", argc, argv, flags, 1, &a) == 0) {
        /* "--set" "t.args=..." */
        if (a.argc != 3 || strncmp(a.argv[2], "t.args=", 7) != 0)
            abort();
        size_t n = 0;
        char **v = spw_cli_positional_split(a.argv[2] + 7, &n);
        if (v) {
            if (n != (size_t)(argc - first))
                abort();
            for (size_t i = 0; i < n; i++)
                if (strcmp(v[i], argv[first + (int)i]) != 0)
                    abort();
        }
        spw_cli_positional_free(v);
    }
    spw_cli_args_fini(&a);
    free(buf);
    return 0;
}
