/* Fuzzes configuration files: any input loads or fails cleanly, and an accepted one dumps back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct spw_config_prop props[] = {
    {"f.flag", SPW_CONFIG_BOOL, "false", 0, 0, NULL, "A boolean."},
    {"f.count", SPW_CONFIG_INT, "10", 1, 1024, NULL, "An integer."},
    {"f.wide", SPW_CONFIG_INT, "0", -9.2e18, 9.2e18, NULL, "A wide integer."},
    {"f.ratio", SPW_CONFIG_DOUBLE, "0.5", 0, 1, NULL, "A double."},
    {"f.any", SPW_CONFIG_DOUBLE, "0", -1e300, 1e300, NULL, "A wide double."},
    {"f.name", SPW_CONFIG_STRING, "x", 0, 16, NULL, "A short string."},
    {"f.path", SPW_CONFIG_STRING, NULL, 0, 0, NULL, "Unset by default."},
    {"f.format", SPW_CONFIG_ENUM, "pb", 0, 0, "pb|json|criteo", "A plain enum."},
    {"f.mode", SPW_CONFIG_ENUM, "async", 0, 0, "async|sync|ssp:|hybrid:", "An enum with suffixes."},
    {"f.timeout", SPW_CONFIG_DURATION_MS, "5s", 0, 86400000, NULL, "A duration."},
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL, "Pass-through keys."},
};

static int count_keys(const char *key, const char *value, void *opaque)
{
    if (!key[0] || !value)
        abort(); /* a pass-through key always has a name under its prefix */
    (*(size_t *)opaque)++;
    return 0;
}

/* The dump without its comment lines (the sources differ between a config and its reload). */
static char *dump_values(const spw_config_t *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        abort();
    spw_config_dump(cfg, f);
    fclose(f);
    char *out = buf;
    for (const char *line = buf; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (line[0] != '#' && line[0] != '\n') {
            memmove(out, line, n);
            out += n;
        }
        line += n;
    }
    *out = '\0';
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    spw_config_t *cfg = spw_config_new(props, sizeof(props) / sizeof(props[0]), err, sizeof(err));
    if (!cfg)
        abort();
    memset(err, 'x', sizeof(err));
    if (spw_config_load_buffer(cfg, "fuzz", data, size, err, sizeof(err)) != SPW_OK) {
        if (!memchr(err, '\0', sizeof(err)) || strncmp(err, "fuzz:", 5) != 0)
            abort(); /* an error always names the input and is terminated */
        spw_config_destroy(cfg);
        return 0;
    }
    /* Accepted: every getter works, and the dump loads back to the same values. */
    (void)spw_config_bool(cfg, "f.flag");
    (void)spw_config_int(cfg, "f.count");
    (void)spw_config_double(cfg, "f.ratio");
    (void)spw_config_str(cfg, "f.path");
    (void)spw_config_duration_ms(cfg, "f.timeout");
    size_t n_keys = 0;
    spw_config_foreach_passthrough(cfg, "kafka.", count_keys, &n_keys);
    if (n_keys > SPW_CONFIG_PASSTHROUGH_MAX)
        abort();

    char *dump = dump_values(cfg);
    spw_config_t *back = spw_config_new(props, sizeof(props) / sizeof(props[0]), err, sizeof(err));
    if (!back || spw_config_load_buffer(back, "dump", dump, strlen(dump), err, sizeof(err)) != 0)
        abort();
    char *again = dump_values(back);
    if (strcmp(dump, again) != 0 ||
        spw_config_int(cfg, "f.wide") != spw_config_int(back, "f.wide") ||
        spw_config_double(cfg, "f.any") != spw_config_double(back, "f.any"))
        abort();
    free(again);
    free(dump);
    spw_config_destroy(back);
    spw_config_destroy(cfg);
    return 0;
}
