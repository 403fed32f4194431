/* Names of the raw event formats and of the reasons a record is refused, and what the first
 * bytes of an input say about its format and compression. */
#include "sparrow/ingest.h"

#include <stdio.h>
#include <string.h>

static const char *const format_names[] = {"pb", "json", "criteo", "auto"};
static const char *const format_titles[] = {"length-delimited protobuf (pb)", "JSON lines (json)",
                                            "Criteo TSV (criteo)", "auto"};

spw_err_t spw_format_parse(const char *name, enum spw_format *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, format_names[i]) == 0) {
            *out = (enum spw_format)i;
            return SPW_OK;
        }
    }
    return SPW_ERR_INVALID;
}

const char *spw_format_name(enum spw_format format)
{
    return format_names[format];
}

const char *spw_format_title(enum spw_format format)
{
    return format_titles[format];
}

const char *spw_reject_reason_name(enum spw_reject_reason reason)
{
    static const char *const names[SPW_REJECT__COUNT] = {
        "none",      "undecodable",      "bad_label", "too_many_features",
        "bad_field", "nonfinite_weight", "oversized",
    };
    return (unsigned)reason < SPW_REJECT__COUNT ? names[reason] : "unknown";
}

/*
 * Magic numbers at the start of a compressed file:
 *   gzip   1f 8b
 *   zstd   28 b5 2f fd
 *   xz     fd 37 7a 58 5a 00
 *   bzip2  "BZh" '1'..'9' 31 41 59 26 53 59   (the block magic follows the header)
 *   lz4    04 22 4d 18
 *   zip    "PK" 03 04
 */
const char *spw_format_compression(const void *data, size_t len)
{
    const unsigned char *b = data;
    if (len >= 2 && b[0] == 0x1f && b[1] == 0x8b)
        return "gzip";
    if (len >= 4 && memcmp(b, "\x28\xb5\x2f\xfd", 4) == 0)
        return "zstd";
    if (len >= 6 && memcmp(b, "\xfd\x37\x7a\x58\x5a\x00", 6) == 0)
        return "xz";
    if (len >= 10 && memcmp(b, "BZh", 3) == 0 && b[3] >= '1' && b[3] <= '9' &&
        memcmp(b + 4, "\x31\x41\x59\x26\x53\x59", 6) == 0)
        return "bzip2";
    if (len >= 4 && memcmp(b, "\x04\x22\x4d\x18", 4) == 0)
        return "lz4";
    if (len >= 4 && memcmp(b, "PK\x03\x04", 4) == 0)
        return "zip";
    return NULL;
}

/* Length of the valid UTF-8 sequence of 2..4 bytes at b (n bytes available), 0 when none. */
static size_t utf8_seq(const unsigned char *b, size_t n)
{
    size_t want = b[0] >= 0xf0 && b[0] <= 0xf4 ? 4 : b[0] >= 0xe0 ? 3 : b[0] >= 0xc2 ? 2 : 0;
    if (want == 0 || b[0] > 0xf4)
        return 0;
    for (size_t i = 1; i < want; i++)
        if (i >= n || (b[i] & 0xc0) != 0x80)
            return i >= n ? want : 0; /* cut off by the window: text so far */
    return want;
}

spw_err_t spw_format_sniff(const void *data, size_t len, enum spw_format *out, char *why,
                           size_t why_size)
{
    const unsigned char *b = data;
    size_t i = 0;
    if (len >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0)
        i = 3; /* a UTF-8 byte-order mark */
    while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'))
        i++;
    if (i == len) {
        snprintf(why, why_size, "no data to tell the format from");
        return SPW_ERR_EOF;
    }
    /* the first line (or what the window holds of it): text, and with a tab? */
    size_t start = i, tabs = 0;
    bool text = true;
    for (size_t k = i; k < len && b[k] != '\n' && text;) {
        if (b[k] == '\t') {
            tabs++;
            k++;
        } else if (b[k] >= 0x20 && b[k] < 0x7f) {
            k++;
        } else if (b[k] == '\r') {
            k++;
        } else if (b[k] >= 0x80) {
            size_t n = utf8_seq(b + k, len - k);
            text = n > 0;
            k += n;
        } else {
            text = false;
        }
    }
    if (!text) {
        *out = SPW_FORMAT_PB;
        return SPW_OK;
    }
    if (b[start] == '{') {
        *out = SPW_FORMAT_JSON;
        return SPW_OK;
    }
    if (tabs > 0) {
        *out = SPW_FORMAT_CRITEO;
        return SPW_OK;
    }
    size_t show = 0;
    while (start + show < len && b[start + show] != '\n' && b[start + show] != '\r' && show < 60)
        show++;
    snprintf(why, why_size,
             "the first line is text but neither a JSON object nor tab-separated (Criteo): "
             "\"%.*s\"",
             (int)show, (const char *)b + start);
    return SPW_ERR_INVALID;
}
