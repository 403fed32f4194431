/* Ingest internals shared between the parser, validation and reader files (not API). */
#ifndef SPARROW_INGEST_INT_H
#define SPARROW_INGEST_INT_H

#include <stdarg.h>

#include "sparrow/ingest.h"

struct json_tokener;

/* Nesting accepted in a JSON line: the record, "features", a feature's array of values, and a
 * little room for unknown top-level members. */
#define SPW_INGEST_JSON_MAX_DEPTH 8

/* Fills err with reason and a printf-style message (truncated to fit). Returns SPW_ERR_INVALID. */
spw_err_t spw_ingest__fail(struct spw_parse_error *err, enum spw_reject_reason reason,
                           const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies at most 40 bytes of name into dst (size >= 48) for a message: bytes outside printable
 * ASCII, quotes and backslashes become '?', and a cut name ends with "...". Returns dst. */
char *spw_ingest__quote(char *dst, const char *name, size_t len);

/* A tokener configured for JSON lines (strict, UTF-8 checked, depth-limited); NULL when out of
 * memory. Free with json_tokener_free. */
struct json_tokener *spw_ingest__json_tokener_new(void);

/* spw_parse_json_line with a caller-held tokener, so that a reader does not create one per line:
 * the fast path, and json-c (through tok) for whatever the fast path hands back. tok may be NULL:
 * a tokener is then made for a record that needs one (NOMEM when that fails). */
spw_err_t spw_ingest__parse_json(struct json_tokener *tok, const char *line, size_t len,
                                 const spw_schema_t *schema, const struct spw_ingest_limits *limits,
                                 spw_arena_t *arena, Sparrow__Example **out,
                                 struct spw_parse_error *err);

/* The reference parser: the same contract, through json-c only (parse_json.c). */
spw_err_t spw_ingest__parse_json_jsonc(struct json_tokener *tok, const char *line, size_t len,
                                       const spw_schema_t *schema,
                                       const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                       Sparrow__Example **out, struct spw_parse_error *err);

/* What spw_ingest__parse_json_fast returns for a record it leaves to json-c (not an error). */
#define SPW_INGEST__JSON_FALLBACK 1

/* The fast path (parse_json_fast.c): a single pass without json-c. Returns what the reference
 * parser returns for the same input (SPW_OK, SPW_ERR_INVALID, SPW_ERR_NOMEM, with the same
 * Example and err), or SPW_INGEST__JSON_FALLBACK with *out NULL and err untouched when the record
 * needs json-c. Allocates from arena only what the reference parser allocates. Thread-safe given
 * distinct arenas. */
spw_err_t spw_ingest__parse_json_fast(const char *line, size_t len, const spw_schema_t *schema,
                                      const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                      Sparrow__Example **out, struct spw_parse_error *err);

#endif
