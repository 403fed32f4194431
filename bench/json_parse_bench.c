/* json_parse_bench: events/s of the JSON-lines parser (fast path with json-c fallback) against
 * the json-c parser alone, on the same lines in the same run (e.g. `sparrow gen --format json`).
 * usage: json_parse_bench FILE [ROUNDS]   (ROUNDS of every parser, interleaved; default 5) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json_tokener.h>

#include "sparrow/ingest.h"

#include "ingest_int.h"

#define BATCH 1000 /* lines per arena reset, as `sparrow ingest` resets per batch */

struct line {
    const char *text;
    size_t len;
};

enum parser { OLD_PER_CALL, OLD_REUSED, NEW, FAST_ONLY, N_PARSERS };

static const char *const parser_name[N_PARSERS] = {
    "json-c, tokener per call (old spw_parse_json_line)",
    "json-c, reused tokener   (old reader path)",
    "fast path + fallback     (new spw_parse_json_line)",
    "fast path alone          (no fallback)",
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nbuf = realloc(buf, cap * 2);
        if (!nbuf) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nbuf;
        cap *= 2;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* One pass of parser over every line; returns the examples accepted (-1 on an error). */
static long run(enum parser parser, const struct line *lines, size_t n, struct json_tokener *tok,
                spw_arena_t *arena, const struct spw_ingest_limits *limits)
{
    long ok = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % BATCH == 0)
            spw_arena_reset(arena);
        Sparrow__Example *ex;
        struct spw_parse_error err;
        spw_err_t rc;
        switch (parser) {
        case OLD_PER_CALL: {
            struct json_tokener *t = spw_ingest__json_tokener_new();
            if (!t)
                return -1;
            rc = spw_ingest__parse_json_jsonc(t, lines[i].text, lines[i].len, NULL, limits, arena,
                                              &ex, &err);
            json_tokener_free(t);
            break;
        }
        case OLD_REUSED:
            rc = spw_ingest__parse_json_jsonc(tok, lines[i].text, lines[i].len, NULL, limits, arena,
                                              &ex, &err);
            break;
        case NEW:
            rc = spw_parse_json_line(lines[i].text, lines[i].len, NULL, limits, arena, &ex, &err);
            break;
        default:
            rc = spw_ingest__parse_json_fast(lines[i].text, lines[i].len, NULL, limits, arena, &ex,
                                             &err);
            break;
        }
        if (rc == SPW_ERR_NOMEM)
            return -1;
        ok += rc == SPW_OK;
    }
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [ROUNDS]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
    if (rounds < 1)
        rounds = 1;
    size_t size;
    char *data = read_all(argv[1], &size);
    if (!data) {
        fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    size_t n = 0, cap = 1024;
    struct line *lines = malloc(cap * sizeof(*lines));
    for (size_t i = 0; lines && i < size;) {
        const char *nl = memchr(data + i, '\n', size - i);
        size_t end = nl ? (size_t)(nl - data) : size;
        if (end > i) {
            if (n == cap) {
                struct line *nlines = realloc(lines, 2 * cap * sizeof(*lines));
                if (!nlines)
                    break;
                lines = nlines;
                cap *= 2;
            }
            lines[n].text = data + i;
            lines[n].len = end - i;
            n++;
        }
        i = end + 1;
    }
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    struct json_tokener *tok = spw_ingest__json_tokener_new();
    spw_arena_t *arena = spw_arena_new(0, 0);
    if (!lines || n == 0 || !tok || !arena) {
        fprintf(stderr, "no lines, or out of memory\n");
        if (tok)
            json_tokener_free(tok);
        spw_arena_destroy(arena);
        free(lines);
        free(data);
        return 1;
    }

    /* The same decisions, and how many lines the fast path decides alone. */
    long accepted[N_PARSERS];
    for (int p = 0; p < N_PARSERS; p++)
        accepted[p] = run((enum parser)p, lines, n, tok, arena, &limits);
    size_t decided = 0;
    for (size_t i = 0; i < n; i++) {
        Sparrow__Example *ex;
        struct spw_parse_error err;
        spw_arena_reset(arena);
        decided += spw_ingest__parse_json_fast(lines[i].text, lines[i].len, NULL, &limits, arena,
                                               &ex, &err) != SPW_INGEST__JSON_FALLBACK;
    }

    double best[N_PARSERS];
    for (int p = 0; p < N_PARSERS; p++)
        best[p] = 1e30;
    for (int r = 0; r < rounds; r++) {
        for (int p = 0; p < N_PARSERS; p++) {
            double t0 = now_s();
            if (run((enum parser)p, lines, n, tok, arena, &limits) < 0)
                return 1;
            double dt = now_s() - t0;
            if (dt < best[p])
                best[p] = dt;
        }
    }
    printf("json_parse_bench: %zu lines (%.0f bytes/line) from %s, best of %d rounds\n", n,
           (double)size / (double)n, argv[1], rounds);
    printf("  fast path decides %zu of %zu lines alone; accepted: old %ld, new %ld\n", decided, n,
           accepted[OLD_PER_CALL], accepted[NEW]);
    for (int p = 0; p < N_PARSERS; p++)
        printf("  %-52s %10.0f events/s   x%.2f\n", parser_name[p], (double)n / best[p],
               best[OLD_PER_CALL] / best[p]);
    json_tokener_free(tok);
    spw_arena_destroy(arena);
    free(lines);
    free(data);
    return accepted[OLD_PER_CALL] == accepted[NEW] && accepted[OLD_REUSED] == accepted[NEW] ? 0 : 1;
}
