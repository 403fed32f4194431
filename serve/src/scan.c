/* serve's JSON scanner: strict RFC 8259 syntax over a predict body, no document built. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "scan_int.h"

void spw_serve__scan_syntax(struct spw_serve__scan *s, const char *what)
{
    if (s->bad)
        return;
    s->bad = true;
    snprintf(s->errstr, s->errstr_size, "malformed JSON: %s",
             s->p >= s->end ? "unexpected end of input" : what);
    s->p = s->end;
}

void spw_serve__scan_refuse(struct spw_serve__scan *s, spw_err_t rc, const char *fmt, ...)
{
    if (s->refused != SPW_OK || s->bad)
        return;
    s->refused = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errstr, s->errstr_size, fmt, ap);
    va_end(ap);
}

/* Consumes ch after white space; a syntax error when it is not there. */
bool spw_serve__scan_expect(struct spw_serve__scan *s, char ch)
{
    spw_serve__scan_ws(s);
    if (s->p < s->end && *s->p == ch) {
        s->p++;
        return true;
    }
    spw_serve__scan_syntax(s, "unexpected character");
    return false;
}

/* A string at s->p ('"'): its raw contents [*str, *str + *len), *escaped when it holds escapes
 * (the contents are then not its value). */
bool spw_serve__scan_string(struct spw_serve__scan *s, const char **str, size_t *len, bool *escaped)
{
    const char *p = s->p + 1;
    *escaped = false;
    while (p < s->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            *str = s->p + 1;
            *len = (size_t)(p - *str);
            s->p = p + 1;
            return true;
        }
        if (ch < 0x20) {
            s->p = p;
            spw_serve__scan_syntax(s, "control character in a string");
            return false;
        }
        if (ch == '\\') {
            *escaped = true;
            if (++p >= s->end)
                break;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (p + i >= s->end || !strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) {
                        s->p = p;
                        spw_serve__scan_syntax(s, "bad \\u escape");
                        return false;
                    }
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                s->p = p;
                spw_serve__scan_syntax(s, "bad escape");
                return false;
            }
        }
        p++;
    }
    s->p = s->end;
    spw_serve__scan_syntax(s, "unterminated string");
    return false;
}

/* A number at s->p: its text [*text, s->p); *integer when it has no fraction or exponent. */
bool spw_serve__scan_number(struct spw_serve__scan *s, const char **text, bool *integer)
{
    const char *p = s->p, *e = s->end;
    *text = p;
    *integer = true;
    if (p < e && *p == '-')
        p++;
    if (p < e && *p == '0')
        p++;
    else if (p < e && spw_serve__scan_is_digit(*p))
        while (p < e && spw_serve__scan_is_digit(*p))
            p++;
    else
        goto out_bad;
    if (p < e && *p == '.') {
        *integer = false;
        if (++p >= e || !spw_serve__scan_is_digit(*p))
            goto out_bad;
        while (p < e && spw_serve__scan_is_digit(*p))
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        *integer = false;
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p >= e || !spw_serve__scan_is_digit(*p))
            goto out_bad;
        while (p < e && spw_serve__scan_is_digit(*p))
            p++;
    }
    s->p = p;
    return true;
out_bad:
    s->p = p;
    spw_serve__scan_syntax(s, "bad number");
    return false;
}

static bool scan_literal(struct spw_serve__scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) >= n && memcmp(s->p, word, n) == 0) {
        s->p += n;
        return true;
    }
    spw_serve__scan_syntax(s, "unexpected character");
    return false;
}

/* Checks and skips one value of any kind; depth: the nesting of containers it is inside. */
bool spw_serve__scan_skip_value(struct spw_serve__scan *s, uint32_t depth)
{
    spw_serve__scan_ws(s);
    if (s->p >= s->end) {
        spw_serve__scan_syntax(s, "");
        return false;
    }
    const char *str;
    size_t len;
    bool flag;
    char open = *s->p;
    switch (open) {
    case '"':
        return spw_serve__scan_string(s, &str, &len, &flag);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    case '{':
    case '[':
        break;
    default:
        return spw_serve__scan_number(s, &str, &flag);
    }
    if (depth + 1 > s->limits->max_depth) {
        spw_serve__scan_syntax(s, "nesting too deep");
        return false;
    }
    char close = open == '{' ? '}' : ']';
    s->p++;
    spw_serve__scan_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return true;
    }
    for (;;) {
        if (open == '{') {
            spw_serve__scan_ws(s);
            if (s->p >= s->end || *s->p != '"') {
                spw_serve__scan_syntax(s, "expected a member name");
                return false;
            }
            if (!spw_serve__scan_string(s, &str, &len, &flag) || !spw_serve__scan_expect(s, ':'))
                return false;
        }
        if (!spw_serve__scan_skip_value(s, depth + 1))
            return false;
        spw_serve__scan_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        return spw_serve__scan_expect(s, close);
    }
}

/* Elements of the array at s->p ('['), counted ahead of the scan that checks them (exact for
 * well-formed JSON; the scan never stores more than this many). */
size_t spw_serve__scan_count_elements(const struct spw_serve__scan *s)
{
    size_t depth = 0, commas = 0;
    bool any = false;
    for (const char *p = s->p; p < s->end; p++) {
        char ch = *p;
        if (ch == '"') {
            for (p++; p < s->end && *p != '"'; p++)
                if (*p == '\\')
                    p++;
            any = true;
        } else if (ch == '[' || ch == '{') {
            if (depth++ > 0)
                any = true;
        } else if (ch == ']' || ch == '}') {
            if (--depth == 0)
                break;
        } else if (ch == ',' && depth == 1) {
            commas++;
        } else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
            any = true;
        }
    }
    return any ? commas + 1 : 0;
}

/* Iterates over the elements of the array at s->p: call first with *i = SIZE_MAX; true while
 * there is an element at s->p (index *i), false at the end or on a syntax error. */
bool spw_serve__scan_next_element(struct spw_serve__scan *s, size_t *i)
{
    spw_serve__scan_ws(s);
    if (*i == SIZE_MAX) {
        s->p++; /* '[' */
        spw_serve__scan_ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return false;
        }
        *i = 0;
        return s->p < s->end || (spw_serve__scan_syntax(s, ""), false);
    }
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        (*i)++;
        spw_serve__scan_ws(s);
        return s->p < s->end || (spw_serve__scan_syntax(s, ""), false);
    }
    spw_serve__scan_expect(s, ']');
    return false;
}

/* The members of the object at s->p: call first with *first true; true with the name's raw
 * text while there is a member (s->p at its value), false at the end or on a syntax error. */
bool spw_serve__scan_next_member(struct spw_serve__scan *s, bool *first, const char **name,
                                 size_t *len, bool *escaped)
{
    spw_serve__scan_ws(s);
    if (*first) {
        *first = false;
        s->p++; /* '{' */
        spw_serve__scan_ws(s);
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return false;
        }
    } else if (s->p < s->end && *s->p == ',') {
        s->p++;
        spw_serve__scan_ws(s);
    } else {
        spw_serve__scan_expect(s, '}');
        return false;
    }
    if (s->p >= s->end || *s->p != '"') {
        spw_serve__scan_syntax(s, "expected a member name");
        return false;
    }
    return spw_serve__scan_string(s, name, len, escaped) && spw_serve__scan_expect(s, ':');
}

bool spw_serve__scan_name_is(const char *name, size_t len, bool escaped, const char *want)
{
    return !escaped && strlen(want) == len && memcmp(name, want, len) == 0;
}
