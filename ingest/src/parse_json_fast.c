/* JSON-lines fast path: one allocation-free pass over an event that yields exactly what the json-c
 * parser (parse_json.c) yields, and hands every input it cannot decide exactly like it back. */
#include "ingest_int.h"

#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "sparrow/hash.h"

/*
 * What the fast path takes, and why that is exactly what json-c takes (parse_json.c holds the
 * rules; tests/fuzz/fuzz_json_diff.c checks the claim):
 *
 *   The fast path accepts only strict RFC 8259 text: whitespace is space, tab, LF, CR; numbers
 *   follow the RFC grammar (no leading zeros, digits after '.' and 'e'); strings hold no control
 *   bytes and only well-formed UTF-8 (RFC 3629: no overlongs, surrogates or code points above
 *   U+10FFFF) and the escapes \" \\ \/ \b \f \n \r \t. json-c in strict mode accepts all of that
 *   (and more: raw control bytes, lax UTF-8, "1.", "-01", "00", which go back to it). Values may
 *   nest as deep as json-c's depth of SPW_INGEST_JSON_MAX_DEPTH allows (a value inside seven
 *   containers, counting the record itself).
 *
 *   It hands back to json-c (SPW_INGEST__JSON_FALLBACK): \u escapes (json-c's surrogate
 *   repair), duplicate names in the record, "features" or "weight" (json-c keeps the last value
 *   in the first one's place), integers json-c saturates or refuses (beyond (INT64_MIN,
 *   UINT64_MAX)), decimals that one correctly rounded operation cannot convert (more than 19
 *   significant digits, a mantissa above 2^53, a power of ten beyond 1e22: within those, the
 *   conversion below equals strtod's), events beyond its scratch (FAST_MAX_*), and every record
 *   it would refuse, except the refusals of spw_ingest_validate on a decoded Example, which the
 *   same Example gives both paths. Only those records cost a second parse.
 *
 *   Memory: the Example comes from the arena in the same allocations, in the same order and of
 *   the same sizes as json-c's path; scratch (keys, names, decoded strings, about 23 KiB) lives on
 *   the stack, and a small per-thread memo keeps the hashes of the last record's feature names.
 */

#define FAST_MAX_MEMBERS 256  /* members of "features" */
#define FAST_MAX_KEYS    512  /* features produced */
#define FAST_MAX_WEIGHTS 256  /* members of "weight" */
#define FAST_POOL_BYTES  2048 /* escaped names and values, decoded */
#define FAST_MAX_LEVEL   (SPW_INGEST_JSON_MAX_DEPTH - 1)

/* One member of "features". */
struct fast_member {
    const char *name; /* decoded bytes: in the line, or in the pool when escaped */
    uint32_t name_len;
    uint32_t hash;      /* spw_hash_field_name(name): finds duplicates and weights */
    uint32_t first_key; /* its features: keys[first_key .. first_key + n_keys) */
    uint32_t n_keys;
    float weight;
    bool weighted;
};

/* One member of "weight". */
struct fast_weight {
    const char *name;
    uint32_t name_len;
    uint32_t hash;
    float value;
};

/* A number as scanned. */
struct fast_num {
    const char *text; /* its literal */
    size_t len;
    bool neg;
    bool is_int;   /* no fraction, no exponent */
    bool overflow; /* integer magnitude above UINT64_MAX */
    uint64_t mag;  /* integer magnitude (is_int) */
    uint64_t mant; /* significant digits, at most 19 */
    int64_t exp10; /* value = mant * 10^exp10 */
    bool inexact;  /* more significant digits than mant holds */
};

/* The per-call state (on the caller's stack; nothing in it is cleared up front). */
struct fast {
    const char *p, *end;
    const spw_schema_t *schema;
    const struct spw_ingest_limits *limits;
    uint32_t n_members, n_keys, n_weights;
    size_t pool_used;
    bool seen_label, seen_ts, seen_id, seen_oracle_p, seen_features, seen_weight;
    bool has_ts, has_id, has_oracle_p, has_weight;
    float label, oracle_p;
    int64_t ts;
    uint64_t id;
    struct fast_member members[FAST_MAX_MEMBERS];
    uint32_t fields[FAST_MAX_KEYS];
    uint64_t keys[FAST_MAX_KEYS];
    struct fast_weight weights[FAST_MAX_WEIGHTS];
    char pool[FAST_POOL_BYTES];
};

/* ---- scanning ---- */

static void skip_ws(struct fast *f)
{
    const char *p = f->p, *end = f->end;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    f->p = p;
}

/* Consumes c (after whitespace); false when the next byte is something else. */
static bool expect(struct fast *f, char c)
{
    skip_ws(f);
    if (f->p == f->end || *f->p != c)
        return false;
    f->p++;
    return true;
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629 section 4), 0 when ill-formed. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    size_t avail = (size_t)(end - p);
    unsigned char c = p[0];
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (avail < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

static bool is_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* The first byte at or after p that is not plain string content (or end). Eight bytes at a time
 * where the machine is little-endian: a word's special bytes (quote, backslash, below 0x20, from
 * 0x80) set their high bits in `special`, and the lowest set bit is the first of them exactly
 * (a borrow only runs on from a byte that matched). */
#if defined(__SSE2__)
/* Bit i set when byte i of the 16 at p is not plain: a signed compare below 0x20 catches both the
 * control bytes and every byte from 0x80 (negative as signed), so with the quote and the
 * backslash three compares find exactly the bytes is_plain refuses. */
static inline unsigned special16(const unsigned char *p)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i sp = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
        _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return (unsigned)_mm_movemask_epi8(sp);
}
#endif

static const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__)
    while (end - p >= 16) {
        unsigned mask = special16(p);
        if (mask)
            return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
        uint64_t special = ((q - ones) & ~q) | ((b - ones) & ~b) | ((v - ones * 0x20) & ~v) | v;
        special &= highs;
        if (special)
            return p + (__builtin_ctzll(special) >> 3);
        p += 8;
    }
#endif
    while (p < end && is_plain(*p))
        p++;
    return p;
}

/* A string at f->p (its opening quote): the raw bytes between the quotes in (*s, *n), *esc when
 * they hold escapes. False for what json-c might read differently (\u) and what RFC 8259 refuses.
 */
static bool scan_string_any(struct fast *f, const char **s, size_t *n, bool *esc)
{
    const unsigned char *p = (const unsigned char *)f->p + 1;
    const unsigned char *end = (const unsigned char *)f->end;
    bool e = false;
    *s = (const char *)p;
    for (;;) {
        /* The common run: printable ASCII other than the quote and the backslash. */
        p = skip_plain(p, end);
        if (p == end)
            return false;
        unsigned char c = *p;
        if (c == '"')
            break;
        if (c == '\\') {
            if (end - p < 2)
                return false;
            switch (p[1]) {
            case '"':
            case '\\':
            case '/':
            case 'b':
            case 'f':
            case 'n':
            case 'r':
            case 't':
                break;
            default: /* \u and invalid escapes */
                return false;
            }
            e = true;
            p += 2;
        } else if (c < 0x20) {
            return false;
        } else {
            size_t k = utf8_len(p, end);
            if (k == 0)
                return false;
            p += k;
        }
    }
    *n = (size_t)(p - (const unsigned char *)*s);
    *esc = e;
    f->p = (const char *)p + 1;
    return true;
}

/* scan_string_any, with the usual string (plain bytes, closed within 16) settled inline: when the
 * first byte that is not plain is the closing quote, scan_string_any would stop there too. */
static inline bool scan_string(struct fast *f, const char **s, size_t *n, bool *esc)
{
#if defined(__SSE2__)
    const unsigned char *p = (const unsigned char *)f->p + 1;
    if ((const unsigned char *)f->end - p >= 16) {
        unsigned mask = special16(p);
        if (mask) {
            unsigned k = (unsigned)__builtin_ctz(mask);
            if (p[k] == '"') {
                *s = (const char *)p;
                *n = k;
                *esc = false;
                f->p = (const char *)p + k + 1;
                return true;
            }
        }
    }
#endif
    return scan_string_any(f, s, n, esc);
}

/* Decodes the escapes of a scanned string into the pool (json-c's decoding for these escapes).
 * NULL when the pool is full. The caller releases temporary decodings by resetting pool_used. */
static const char *decode(struct fast *f, const char *s, size_t n, size_t *out_len)
{
    if (n > FAST_POOL_BYTES - f->pool_used)
        return NULL;
    char *dst = f->pool + f->pool_used, *d = dst;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\') {
            c = s[++i];
            switch (c) {
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            default: /* '"', '\\', '/' stand for themselves */
                break;
            }
        }
        *d++ = c;
    }
    *out_len = (size_t)(d - dst);
    f->pool_used += *out_len;
    return dst;
}

/* A string's decoded bytes: the line's own bytes, or a decoding in the pool. */
static bool string_value(struct fast *f, const char **text, size_t *len)
{
    const char *s;
    size_t n;
    bool esc;
    if (!scan_string(f, &s, &n, &esc))
        return false;
    if (!esc) {
        *text = s;
        *len = n;
        return true;
    }
    *text = decode(f, s, n, len);
    return *text != NULL;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A number at f->p by the RFC 8259 grammar. */
static bool scan_number(struct fast *f, struct fast_num *num)
{
    const char *p = f->p, *end = f->end;
    num->text = p;
    num->neg = false;
    num->is_int = true;
    num->overflow = false;
    num->inexact = false;
    num->mag = 0;
    num->exp10 = 0;
    if (p < end && *p == '-') {
        num->neg = true;
        p++;
    }
    if (p == end || !is_digit(*p))
        return false;
    unsigned nd = 0; /* significant digits in mag */
    if (*p == '0') {
        p++;
    } else {
        for (; p < end && is_digit(*p); p++) {
            unsigned d = (unsigned)(*p - '0');
            if (num->mag > (UINT64_MAX - d) / 10)
                num->overflow = true;
            else
                num->mag = num->mag * 10 + d;
            nd++;
        }
    }
    num->mant = num->mag;
    if (nd > 19)
        num->inexact = true;
    if (p < end && *p == '.') {
        num->is_int = false;
        p++;
        if (p == end || !is_digit(*p))
            return false;
        for (; p < end && is_digit(*p); p++) {
            unsigned d = (unsigned)(*p - '0');
            if (num->mant == 0 && d == 0) {
                num->exp10--;
            } else if (nd < 19) {
                num->mant = num->mant * 10 + d;
                nd++;
                num->exp10--;
            } else {
                num->inexact = true;
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->is_int = false;
        p++;
        bool eneg = false;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p == end || !is_digit(*p))
            return false;
        int64_t e = 0;
        for (; p < end && is_digit(*p); p++)
            if (e < 100000)
                e = e * 10 + (*p - '0');
        num->exp10 += eneg ? -e : e;
    }
    num->len = (size_t)(p - num->text);
    f->p = p;
    return true;
}

/* The number's value as json-c's json_object_get_double() gives it: strtod's result for a decimal
 * literal, the integer converted for an integer one. False when that cannot be had exactly here. */
static bool num_double(const struct fast_num *num, double *out)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (num->is_int) {
        if (num->overflow || (num->neg && num->mag > (uint64_t)INT64_MAX) || num->mag == UINT64_MAX)
            return false;
        *out = num->neg ? (double)-(int64_t)num->mag : (double)num->mag;
        return true;
    }
    double d;
    if (num->inexact)
        return false;
    if (num->mant == 0) {
        d = 0.0;
    } else {
        /* Clinger's fast path: both operands exact, one correctly rounded operation. */
        if (num->mant > (1ull << 53) || num->exp10 < -22 || num->exp10 > 22)
            return false;
        d = (double)num->mant;
        d = num->exp10 < 0 ? d / pow10[-num->exp10] : d * pow10[num->exp10];
    }
    *out = num->neg ? -d : d;
    return true;
}

/* "true", "false" or "null" at f->p; *which is 1, 0 or -1. */
static bool scan_literal(struct fast *f, int *which)
{
    size_t avail = (size_t)(f->end - f->p);
    if (avail >= 4 && memcmp(f->p, "true", 4) == 0) {
        *which = 1;
        f->p += 4;
        return true;
    }
    if (avail >= 5 && memcmp(f->p, "false", 5) == 0) {
        *which = 0;
        f->p += 5;
        return true;
    }
    if (avail >= 4 && memcmp(f->p, "null", 4) == 0) {
        *which = -1;
        f->p += 4;
        return true;
    }
    return false;
}

/* A member name and its colon, for an object whose '{' or ',' has just been read. */
static bool member_name(struct fast *f, const char **s, size_t *n, bool *esc)
{
    skip_ws(f);
    if (f->p == f->end || *f->p != '"' || !scan_string(f, s, n, esc))
        return false;
    return expect(f, ':');
}

/* Skips any value at f->p whose level (containers around it, the record counted) is level,
 * checking it as strictly as the rest; false beyond json-c's depth. */
static bool skip_value(struct fast *f, unsigned level)
{
    uint32_t is_object = 0; /* bit d: the container at depth d (1-based) is an object */
    unsigned depth = 0;
    for (;;) {
        /* A value at level + depth. */
        if (level + depth > FAST_MAX_LEVEL)
            return false;
        skip_ws(f);
        if (f->p == f->end)
            return false;
        const char *s;
        size_t n;
        bool esc;
        int lit;
        struct fast_num num;
        switch (*f->p) {
        case '"':
            if (!scan_string(f, &s, &n, &esc))
                return false;
            break;
        case '{':
            f->p++;
            skip_ws(f);
            if (f->p < f->end && *f->p == '}') {
                f->p++;
                break;
            }
            depth++;
            is_object |= 1u << depth;
            if (!member_name(f, &s, &n, &esc))
                return false;
            continue;
        case '[':
            f->p++;
            skip_ws(f);
            if (f->p < f->end && *f->p == ']') {
                f->p++;
                break;
            }
            depth++;
            is_object &= ~(1u << depth);
            continue;
        case 't':
        case 'f':
        case 'n':
            if (!scan_literal(f, &lit))
                return false;
            break;
        default:
            if (!scan_number(f, &num))
                return false;
            break;
        }
        /* The value is complete: close containers until one continues. */
        for (;;) {
            if (depth == 0)
                return true;
            skip_ws(f);
            if (f->p == f->end)
                return false;
            bool obj = (is_object >> depth) & 1;
            char c = *f->p++;
            if (c == ',') {
                if (obj && !member_name(f, &s, &n, &esc))
                    return false;
                break;
            }
            if (c != (obj ? '}' : ']'))
                return false;
            depth--;
        }
    }
}

/* ---- the event's members ---- */

/* A feature's scalar value at f->p: its text, or *text NULL for null. False for what json-c
 * refuses or might read differently (objects, arrays, integers it cannot print back). */
static bool feature_text(struct fast *f, const char **text, size_t *len)
{
    struct fast_num num;
    int lit;
    switch (*f->p) {
    case '"':
        return string_value(f, text, len);
    case 't':
    case 'f':
    case 'n':
        if (!scan_literal(f, &lit))
            return false;
        *text = lit < 0 ? NULL : lit ? "true" : "false";
        *len = lit < 0 ? 0 : lit ? 4 : 5;
        return true;
    case '{':
    case '[':
        return false;
    default:
        if (!scan_number(f, &num))
            return false;
        if (num.is_int) {
            /* json-c re-prints integers: the RFC literal itself, but "0" for "-0". */
            if (num.overflow || num.mag == UINT64_MAX || (num.neg && num.mag > (uint64_t)INT64_MAX))
                return false;
            if (num.neg && num.mag == 0) {
                *text = "0";
                *len = 1;
                return true;
            }
        }
        *text = num.text;
        *len = num.len;
        return true;
    }
}

/* Adds the feature for one scalar of member m (null adds none). */
static bool add_value(struct fast *f, uint32_t field, struct fast_member *m)
{
    size_t mark = f->pool_used;
    const char *text;
    size_t len;
    if (!feature_text(f, &text, &len))
        return false;
    if (text) {
        if (f->n_keys == FAST_MAX_KEYS)
            return false;
        f->fields[f->n_keys] = field;
        f->keys[f->n_keys] = spw_ingest_feature_key(field, text, len);
        f->n_keys++;
        m->n_keys++;
    }
    f->pool_used = mark;
    return true;
}

/*
 * The previous record's feature names by position, with their hashes, per thread: a stream's
 * events name their features alike and in one order, so a compare of a few bytes replaces a hash
 * (the hash is a pure function of the name, so the memo cannot change a result). len1 is the
 * name's length + 1; 0 marks an empty slot.
 */
#define NAME_CACHE_SLOTS 64
#define NAME_CACHE_BYTES 23

struct name_cache_slot {
    uint8_t len1;
    char name[NAME_CACHE_BYTES];
    uint32_t hash;
};

static _Thread_local struct name_cache_slot name_cache[NAME_CACHE_SLOTS];

/* spw_hash_field_name(name) of the i-th member, through the cache. */
static uint32_t member_hash(uint32_t i, const char *name, size_t len)
{
    if (i >= NAME_CACHE_SLOTS || len > NAME_CACHE_BYTES)
        return spw_hash_field_name(name, len);
    struct name_cache_slot *slot = &name_cache[i];
    if (slot->len1 == len + 1 && memcmp(slot->name, name, len) == 0)
        return slot->hash;
    slot->hash = spw_hash_field_name(name, len);
    memcpy(slot->name, name, len);
    slot->len1 = (uint8_t)(len + 1);
    return slot->hash;
}

/* One member of "features": a scalar or an array of scalars. */
static bool feature_member(struct fast *f, const char *name, size_t name_len)
{
    if (f->n_members == FAST_MAX_MEMBERS || name_len > UINT32_MAX)
        return false;
    struct fast_member *m = &f->members[f->n_members++];
    m->name = name;
    m->name_len = (uint32_t)name_len;
    m->hash = member_hash(f->n_members - 1, name, name_len);
    m->first_key = f->n_keys;
    m->n_keys = 0;
    m->weighted = false;
    skip_ws(f);
    if (f->p == f->end)
        return false;
    const char *p = f->p;
    if ((size_t)(f->end - p) >= 4 && memcmp(p, "null", 4) == 0) {
        f->p += 4; /* no feature, and json-c looks no field id up for it */
        return true;
    }
    uint32_t field = m->hash;
    if (f->schema && spw_schema_field_id(f->schema, name, name_len, &field) != SPW_OK)
        return false;
    if (field > f->limits->max_field_id)
        return false;
    if (*p != '[')
        return add_value(f, field, m);
    f->p++;
    skip_ws(f);
    if (f->p < f->end && *f->p == ']') {
        f->p++;
        return true;
    }
    for (;;) {
        skip_ws(f);
        if (f->p == f->end || !add_value(f, field, m))
            return false;
        skip_ws(f);
        if (f->p == f->end)
            return false;
        char c = *f->p++;
        if (c == ']')
            return true;
        if (c != ',')
            return false;
    }
}

/* The members of an object whose '{' is at f->p; each value handled by member(). */
static bool object_members(struct fast *f,
                           bool (*member)(struct fast *f, const char *name, size_t len))
{
    if (!expect(f, '{'))
        return false;
    skip_ws(f);
    if (f->p < f->end && *f->p == '}') {
        f->p++;
        return true;
    }
    for (;;) {
        const char *s, *name;
        size_t n, name_len;
        bool esc;
        if (!member_name(f, &s, &n, &esc))
            return false;
        name = s;
        name_len = n;
        if (esc && !(name = decode(f, s, n, &name_len)))
            return false; /* names stay in the pool: duplicates and weights need them */
        if (!member(f, name, name_len))
            return false;
        skip_ws(f);
        if (f->p == f->end)
            return false;
        char c = *f->p++;
        if (c == '}')
            return true;
        if (c != ',')
            return false;
    }
}

/* One member of "weight": a number that is finite as a float. */
static bool weight_member(struct fast *f, const char *name, size_t name_len)
{
    if (f->n_weights == FAST_MAX_WEIGHTS || name_len > UINT32_MAX)
        return false;
    skip_ws(f);
    struct fast_num num;
    double d;
    if (f->p == f->end || !(*f->p == '-' || is_digit(*f->p)) || !scan_number(f, &num) ||
        !num_double(&num, &d) || !isfinite((float)d))
        return false;
    struct fast_weight *w = &f->weights[f->n_weights++];
    w->name = name;
    w->name_len = (uint32_t)name_len;
    w->hash = spw_hash_field_name(name, name_len);
    w->value = (float)d;
    return true;
}

/* A number at f->p (after whitespace) as json-c's get_double gives it. */
static bool number_value(struct fast *f, struct fast_num *num, double *d)
{
    if (f->p == f->end || !(*f->p == '-' || is_digit(*f->p)))
        return false;
    return scan_number(f, num) && num_double(num, d);
}

/* True when f->p is at a null, which it consumes (optional members may be null). */
static bool take_null(struct fast *f)
{
    if ((size_t)(f->end - f->p) >= 4 && memcmp(f->p, "null", 4) == 0) {
        f->p += 4;
        return true;
    }
    return false;
}

static bool member_label(struct fast *f)
{
    struct fast_num num;
    double d;
    int lit;
    if (f->p < f->end && (*f->p == 't' || *f->p == 'f')) {
        if (!scan_literal(f, &lit) || lit < 0)
            return false;
        f->label = lit ? 1.0f : 0.0f;
        return true;
    }
    if (!number_value(f, &num, &d))
        return false;
    f->label = (float)d;
    return true;
}

static bool member_ts(struct fast *f)
{
    struct fast_num num;
    if (take_null(f))
        return true;
    if (f->p == f->end || !(*f->p == '-' || is_digit(*f->p)) || !scan_number(f, &num) ||
        !num.is_int || num.overflow || num.mag > (uint64_t)INT64_MAX)
        return false;
    f->has_ts = true;
    f->ts = num.neg ? -(int64_t)num.mag : (int64_t)num.mag;
    return true;
}

static bool member_id(struct fast *f)
{
    if (take_null(f))
        return true;
    if (f->p < f->end && *f->p == '"') {
        size_t mark = f->pool_used;
        const char *s;
        size_t len;
        if (!string_value(f, &s, &len))
            return false;
        uint64_t id = 0;
        bool decimal = len > 0 && len <= 19;
        for (size_t i = 0; decimal && i < len; i++) {
            if (!is_digit(s[i]))
                decimal = false;
            else
                id = id * 10 + (uint64_t)(s[i] - '0');
        }
        f->id = decimal ? id : spw_hash_key(0, s, len);
        f->pool_used = mark;
    } else {
        struct fast_num num;
        if (f->p == f->end || !(*f->p == '-' || is_digit(*f->p)) || !scan_number(f, &num) ||
            !num.is_int || num.overflow || num.mag == UINT64_MAX || (num.neg && num.mag != 0))
            return false;
        f->id = num.mag;
    }
    f->has_id = true;
    return true;
}

static bool member_oracle_p(struct fast *f)
{
    struct fast_num num;
    double d;
    if (take_null(f))
        return true;
    if (!number_value(f, &num, &d))
        return false;
    f->has_oracle_p = true;
    f->oracle_p = (float)d;
    return true;
}

static bool member_weight(struct fast *f)
{
    if (take_null(f))
        return true;
    f->has_weight = true;
    return object_members(f, weight_member);
}

/* Dispatches one member of the record by its (decoded) name; false for a repeated known name. */
static bool record_member(struct fast *f, const char *name, size_t len)
{
    bool *seen;
    bool (*parse)(struct fast *);
    if (len == 5 && memcmp(name, "label", 5) == 0) {
        seen = &f->seen_label;
        parse = member_label;
    } else if (len == 2 && memcmp(name, "ts", 2) == 0) {
        seen = &f->seen_ts;
        parse = member_ts;
    } else if (len == 2 && memcmp(name, "id", 2) == 0) {
        seen = &f->seen_id;
        parse = member_id;
    } else if (len == 8 && memcmp(name, "oracle_p", 8) == 0) {
        seen = &f->seen_oracle_p;
        parse = member_oracle_p;
    } else if (len == 8 && memcmp(name, "features", 8) == 0) {
        if (f->seen_features)
            return false;
        f->seen_features = true;
        return object_members(f, feature_member);
    } else if (len == 6 && memcmp(name, "weight", 6) == 0) {
        seen = &f->seen_weight;
        parse = member_weight;
    } else {
        return skip_value(f, 1);
    }
    if (*seen)
        return false;
    *seen = true;
    skip_ws(f);
    return parse(f);
}

/* The record object, then nothing but whitespace. */
static bool parse_record(struct fast *f)
{
    if (!expect(f, '{'))
        return false;
    for (;;) {
        const char *s, *name;
        size_t n, name_len;
        bool esc;
        if (!member_name(f, &s, &n, &esc))
            return false; /* also "{}", which lacks "label" */
        size_t mark = f->pool_used;
        name = s;
        name_len = n;
        if (esc && !(name = decode(f, s, n, &name_len)))
            return false;
        f->pool_used = mark; /* the name is compared at once, then not needed */
        if (!record_member(f, name, name_len))
            return false;
        skip_ws(f);
        if (f->p == f->end)
            return false;
        char c = *f->p++;
        if (c == '}')
            break;
        if (c != ',')
            return false;
    }
    skip_ws(f);
    return f->p == f->end;
}

/* ---- the Example ---- */

static bool same_name(const char *a, uint32_t a_len, const char *b, uint32_t b_len)
{
    return a_len == b_len && memcmp(a, b, a_len) == 0;
}

/* Finds repeated feature names and gives each weight to its feature; false when json-c would
 * refuse the record or read it differently. */
static bool match_names(struct fast *f)
{
    uint16_t slots[2 * FAST_MAX_MEMBERS]; /* index + 1 of a member; 0: empty */
    unsigned bits = 4;
    while ((1u << bits) < 2 * f->n_members)
        bits++;
    uint32_t mask = (1u << bits) - 1;
    memset(slots, 0, sizeof(slots[0]) << bits);
    for (uint32_t i = 0; i < f->n_members; i++) {
        const struct fast_member *m = &f->members[i];
        uint32_t s = (m->hash * 0x9e3779b1u) >> (32 - bits);
        for (; slots[s]; s = (s + 1) & mask) {
            const struct fast_member *o = &f->members[slots[s] - 1];
            if (o->hash == m->hash && same_name(o->name, o->name_len, m->name, m->name_len))
                return false;
        }
        slots[s] = (uint16_t)(i + 1);
    }
    for (uint32_t j = 0; j < f->n_weights; j++) {
        const struct fast_weight *w = &f->weights[j];
        uint32_t s = (w->hash * 0x9e3779b1u) >> (32 - bits);
        struct fast_member *m = NULL;
        for (; slots[s]; s = (s + 1) & mask) {
            struct fast_member *o = &f->members[slots[s] - 1];
            if (o->hash == w->hash && same_name(o->name, o->name_len, w->name, w->name_len)) {
                m = o;
                break;
            }
        }
        if (!m || m->weighted) /* no such feature (BAD_FIELD), or a repeated weight */
            return false;
        m->weight = w->value;
        m->weighted = true;
    }
    return true;
}

spw_err_t spw_ingest__parse_json_fast(const char *line, size_t len, const spw_schema_t *schema,
                                      const struct spw_ingest_limits *limits, spw_arena_t *arena,
                                      Sparrow__Example **out, struct spw_parse_error *err)
{
    *out = NULL;
    if (len == 0 || len > limits->max_record_bytes)
        return SPW_INGEST__JSON_FALLBACK;
    struct fast f;
    f.p = line;
    f.end = line + len;
    f.schema = schema;
    f.limits = limits;
    f.n_members = f.n_keys = f.n_weights = 0;
    f.pool_used = 0;
    f.seen_label = f.seen_ts = f.seen_id = f.seen_oracle_p = f.seen_features = false;
    f.seen_weight = f.has_ts = f.has_id = f.has_oracle_p = f.has_weight = false;
    if (!parse_record(&f) || !f.seen_label || !f.seen_features || !match_names(&f) ||
        f.n_keys > limits->max_features)
        return SPW_INGEST__JSON_FALLBACK;

    /* The allocations of json-c's path, in its order. */
    Sparrow__Example *ex = spw_arena_alloc(arena, sizeof(*ex));
    if (!ex)
        return SPW_ERR_NOMEM;
    sparrow__example__init(ex);
    ex->has_label = true;
    ex->label = f.label;
    ex->has_event_time_ms = f.has_ts;
    ex->event_time_ms = f.has_ts ? f.ts : 0;
    ex->has_id = f.has_id;
    ex->id = f.has_id ? f.id : 0;
    ex->has_oracle_p = f.has_oracle_p;
    ex->oracle_p = f.has_oracle_p ? f.oracle_p : 0.0f;
    size_t n = f.n_keys;
    if (n > 0) {
        ex->fields = spw_arena_alloc(arena, n * sizeof(*ex->fields));
        ex->keys = spw_arena_alloc(arena, n * sizeof(*ex->keys));
        if (!ex->fields || !ex->keys)
            return SPW_ERR_NOMEM;
        memcpy(ex->fields, f.fields, n * sizeof(*ex->fields));
        memcpy(ex->keys, f.keys, n * sizeof(*ex->keys));
        if (f.has_weight) {
            ex->weights = spw_arena_alloc(arena, n * sizeof(*ex->weights));
            if (!ex->weights)
                return SPW_ERR_NOMEM;
            for (uint32_t i = 0; i < f.n_members; i++) {
                const struct fast_member *m = &f.members[i];
                float w = m->weighted ? m->weight : 1.0f;
                for (uint32_t k = 0; k < m->n_keys; k++)
                    ex->weights[m->first_key + k] = w;
            }
        }
    }
    ex->n_keys = n;
    ex->n_fields = n;
    ex->n_weights = ex->weights ? n : 0;

    spw_err_t rc = spw_ingest_validate(ex, limits, err);
    if (rc != SPW_OK)
        return rc;
    *out = ex;
    return SPW_OK;
}
