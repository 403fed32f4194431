/* serve's private JSON scanner (serve/src/scan.c): strict RFC 8259 syntax over a body, without
 * building a document, for the predict request parser (request.c). Not API. A scan is owned by
 * the one thread that parses its body; every pointer it hands out is borrowed from that body. */
#ifndef SPARROW_SERVE_SCAN_INT_H
#define SPARROW_SERVE_SCAN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "sparrow/serve.h"

/*
 * The predict parser's state. One pass over the body, without building a document: a strict RFC
 * 8259 scanner that takes "keys" and "weights" arrays straight into the arena (the pre-hashed form,
 * the one batch clients send, costs no allocation per element), and hands only the text of a
 * "features" or "weight" value to json-c, for ingest's hashing step (spw_ingest_json_features), so
 * that raw features are hashed exactly as ingest hashes them.
 *
 * Errors: a syntax error anywhere wins over a refusal of content (as when the whole body was
 * parsed first): the first refusal is kept in errstr while the scan goes on to the end, and a
 * later syntax error replaces it. Of two refusals, the first in the body is reported.
 */
struct spw_serve__scan {
    const char *p, *end;
    const struct spw_serve_limits *limits;
    const spw_schema_t *schema;
    spw_arena_t *arena;
    struct json_tokener *tok; /* for "features" values; made on first use */
    bool bad;                 /* a syntax error: the scan stopped */
    spw_err_t refused;        /* the first refusal of content (SPW_OK: none) */
    char *errstr;
    size_t errstr_size;
};

/* A syntax error at s->p (what; "unexpected end of input" past the end): errstr says so, the scan
 * stops (s->p = s->end) and later calls do nothing. Only the first counts. */
void spw_serve__scan_syntax(struct spw_serve__scan *s, const char *what);

/* Records a refusal of content (rc, message) unless one was recorded or the syntax failed. */
void spw_serve__scan_refuse(struct spw_serve__scan *s, spw_err_t rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True while nothing was refused and the syntax holds: what the scan reads is still kept. */
static inline bool spw_serve__scan_keeping(const struct spw_serve__scan *s)
{
    return s->refused == SPW_OK && !s->bad;
}

/* Skips white space. */
static inline void spw_serve__scan_ws(struct spw_serve__scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Consumes ch after white space; a syntax error when it is not there. */
bool spw_serve__scan_expect(struct spw_serve__scan *s, char ch);

/* The string at s->p ('"'): its raw contents [*str, *str + *len) (borrowed from the body),
 * *escaped when it holds escapes (the contents are then not its value). False: syntax error. */
bool spw_serve__scan_string(struct spw_serve__scan *s, const char **str, size_t *len,
                            bool *escaped);

static inline bool spw_serve__scan_is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* The number at s->p: its text [*text, s->p); *integer when it has no fraction or exponent. */
bool spw_serve__scan_number(struct spw_serve__scan *s, const char **text, bool *integer);

/* Checks and skips one value of any kind; depth: the containers it is inside (a container value
 * deeper than limits->max_depth is a syntax error). */
bool spw_serve__scan_skip_value(struct spw_serve__scan *s, uint32_t depth);

/* Elements of the array at s->p ('['), counted ahead (exact for well-formed JSON). */
size_t spw_serve__scan_count_elements(const struct spw_serve__scan *s);

/* The elements of the array at s->p: call first with *i = SIZE_MAX; true while there is an
 * element at s->p (index *i), false at the end or on a syntax error. */
bool spw_serve__scan_next_element(struct spw_serve__scan *s, size_t *i);

/* The members of the object at s->p: call first with *first true; true with the name's raw text
 * while there is a member (s->p at its value), false at the end or on a syntax error. */
bool spw_serve__scan_next_member(struct spw_serve__scan *s, bool *first, const char **name,
                                 size_t *len, bool *escaped);

/* True when a member name's raw text is want (an escaped name never is). */
bool spw_serve__scan_name_is(const char *name, size_t len, bool escaped, const char *want);

#endif
