/* JSON log lines (log.format=json): the text form's key=value pairs as members of one object. */
#include "log_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* A bounded writer: bytes past cap - reserve are refused (reserve keeps room to close the line);
 * a refused write sets full and writes nothing. */
struct jbuf {
    char *p;
    size_t len, cap, reserve;
    bool full;
};

static bool put(struct jbuf *b, const char *s, size_t n)
{
    size_t room = b->cap - b->reserve > b->len ? b->cap - b->reserve - b->len : 0;
    if (b->full || n > room) {
        b->full = true;
        return false;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

static bool puts_(struct jbuf *b, const char *s)
{
    return put(b, s, strlen(s));
}

/* Length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no overlongs, surrogates or code
 * points above U+10FFFF); 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A JSON string of s[0..n), quotes included. When the whole does not fit, as much as fits (whole
 * characters) and the closing quote; *cut tells. Returns false only when not even "" fits. */
static bool put_string(struct jbuf *b, const char *s, size_t n, bool *cut)
{
    static const char hex[] = "0123456789abcdef";
    b->reserve += 1; /* the closing quote always fits */
    if (!put(b, "\"", 1)) {
        b->reserve -= 1;
        return false;
    }
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        const char *out = esc;
        size_t out_len, used = 1;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, out_len = 2;
        } else if (c == '\n') {
            out = "\\n", out_len = 2;
        } else if (c == '\t') {
            out = "\\t", out_len = 2;
        } else if (c == '\r') {
            out = "\\r", out_len = 2;
        } else if (c < 0x20 || c == 0x7f) {
            esc[0] = '\\', esc[1] = 'u', esc[2] = '0', esc[3] = '0';
            esc[4] = hex[c >> 4], esc[5] = hex[c & 15], out_len = 6;
        } else if (c < 0x80) {
            out = (const char *)&s[i], out_len = 1;
        } else if ((used = utf8_len((const unsigned char *)s + i, n - i)) > 0) {
            out = s + i, out_len = used;
        } else {
            out = "\\ufffd", out_len = 6, used = 1;
        }
        if (!put(b, out, out_len)) {
            *cut = true;
            break;
        }
        i += used;
    }
    b->reserve -= 1;
    b->full = false;
    return put(b, "\"", 1);
}

/* True when s[0..n) is a JSON number (RFC 8259 grammar) a double holds exactly when it is an
 * integer: integers of at most 15 digits, or 16 up to 2^53 (9007199254740992). */
static bool json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    size_t int_start = i;
    if (i < n && s[i] == '0') {
        i++;
    } else if (i < n && s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return false;
    }
    size_t int_digits = i - int_start;
    bool integer = true;
    if (i < n && s[i] == '.') {
        integer = false;
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        integer = false;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i != n)
        return false;
    if (!integer || int_digits <= 15)
        return true;
    return int_digits == 16 && memcmp(s + int_start, "9007199254740992", 16) <= 0;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n';
}

/* The member names the line itself uses; a key=value key equal to one gets a leading '_'. */
static bool reserved(const char *key, size_t len)
{
    static const char *const names[] = {"ts", "level", "role", "msg", "text", "truncated"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == len && memcmp(names[i], key, len) == 0)
            return true;
    return false;
}

/* One member ,"name":value; false when it does not fit whole (b unchanged). */
static bool put_pair(struct jbuf *b, const char *name, size_t name_len, const char *val,
                     size_t val_len, bool quoted)
{
    size_t mark = b->len;
    bool cut = false;
    put(b, ",", 1);
    put_string(b, name, name_len, &cut);
    put(b, ":", 1);
    if (!quoted && json_number(val, val_len))
        put(b, val, val_len);
    else
        put_string(b, val, val_len, &cut);
    if (b->full || cut) {
        b->len = mark;
        b->full = false;
        return false;
    }
    return true;
}

/* The member of one key=value pair: its key, '_'-prefixed when the line uses the name. */
static bool put_member(struct jbuf *b, const char *key, size_t key_len, const char *val,
                       size_t val_len, bool quoted)
{
    char name[128];
    size_t n = 0;
    if (reserved(key, key_len))
        name[n++] = '_';
    if (key_len > sizeof(name) - n)
        key_len = sizeof(name) - n;
    memcpy(name + n, key, key_len);
    return put_pair(b, name, n + key_len, val, val_len, quoted);
}

/* Room kept for `,"truncated":true}` and the newline. */
#define CLOSE_RESERVE 24

size_t spw_log__json_line(char *out, size_t cap, const char *ts, enum spw_log_level level,
                          const char *role, const char *msg, const char *kv, bool kv_cut)
{
    static const char *const level_names[] = {"error", "warn", "info", "debug"};
    struct jbuf b = {out, 0, cap, CLOSE_RESERVE, false};
    bool truncated = false;
    puts_(&b, "{\"ts\":");
    put_string(&b, ts, strlen(ts), &truncated);
    puts_(&b, ",\"level\":");
    put_string(&b, level_names[level], strlen(level_names[level]), &truncated);
    puts_(&b, ",\"role\":");
    put_string(&b, role, strlen(role), &truncated);
    puts_(&b, ",\"msg\":");
    put_string(&b, msg, strlen(msg), &truncated);

    /* Words that are not key=value, joined by one space. */
    char text[1024];
    size_t text_len = 0;
    size_t n = kv ? strlen(kv) : 0;
    for (size_t i = 0; i < n && !truncated;) {
        while (i < n && is_space(kv[i]))
            i++;
        if (i == n)
            break;
        size_t k = i;
        while (i < n && !is_space(kv[i]) && kv[i] != '=')
            i++;
        if (i < n && kv[i] == '=' && i > k) {
            size_t key = k, key_len = i - k, v = ++i, v_end;
            bool quoted = v < n && kv[v] == '"';
            if (quoted) {
                /* the closing quote is the first one followed by a space or the end */
                size_t j = v + 1;
                while (j < n && !(kv[j] == '"' && (j + 1 == n || is_space(kv[j + 1]))))
                    j++;
                v++;
                v_end = j;
                i = j < n ? j + 1 : n;
            } else {
                while (i < n && !is_space(kv[i]))
                    i++;
                v_end = i;
            }
            if (!put_member(&b, kv + key, key_len, kv + v, v_end - v, quoted))
                truncated = true;
            continue;
        }
        while (i < n && !is_space(kv[i]))
            i++;
        size_t w = i - k;
        if (text_len + 1 + w > sizeof(text)) {
            truncated = true;
            break;
        }
        if (text_len)
            text[text_len++] = ' ';
        memcpy(text + text_len, kv + k, w);
        text_len += w;
    }
    if (text_len && !put_pair(&b, "text", 4, text, text_len, true))
        truncated = true;
    truncated |= kv_cut;
    b.reserve = 0;
    b.full = false;
    if (truncated)
        puts_(&b, ",\"truncated\":true");
    puts_(&b, "}\n");
    return b.len;
}
