/* The file reader: records of one format from a file, stdin or a stream, through one bounded
 * buffer, with every bad record reported by position and reason. */
#include "ingest_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <zlib.h>

#include "sparrow/log.h"
#include "sparrow/wire.h"

#define READER_CHUNK     (64u << 10) /* the first buffer, for limits above 16 KiB */
#define READER_MIN_CHUNK 1024u       /* the least buffer, whatever the limit */
#define PB_MAX_PREFIX    10          /* bytes of a varint length prefix */
#define SNIFF_BYTES      512u        /* enough of the first line to tell the format */
#define MAGIC_BYTES      10u         /* the longest compression magic (spw_format_compression) */
#define GZIP_CHUNK       (64u << 10) /* compressed bytes read at a time */

/*
 * Buffer:  buf[0 .. start)    consumed
 *          buf[start .. end)  read, not yet consumed (start is byte `consumed` of the input)
 *          buf[end .. cap)    free
 * cap grows (realloc, never per record) up to max_cap: one record plus its newline or prefix,
 * so memory stays bounded by max_record_bytes whatever the input. A longer text line is skipped
 * through the buffer without being kept.
 */
struct spw_reader {
    int fd;                    /* >= 0: read(2) from it, else fread from stream */
    FILE *stream;              /* borrowed */
    bool close_fd;             /* the reader opened fd */
    enum spw_format format;    /* what records are read as (AUTO until started) */
    enum spw_format requested; /* what the caller asked for */
    bool started;              /* compression and format looked at (the first next) */
    bool looks_known;          /* looks_like holds what the first bytes look like */
    enum spw_format looks_like;
    const char *compression; /* "gzip" when the input is inflated, else NULL */
    z_stream *z;             /* gzip: the inflater of the raw bytes */
    unsigned char *zin;      /* gzip: compressed bytes read, z->next_in into them */
    bool raw_eof;            /* gzip: the compressed input has no more bytes */
    bool member_end;         /* gzip: a member ended (another may follow: concatenated .gz) */
    char fail[160];          /* why a sticky io_err other than a read error happened */
    struct spw_ingest_limits limits;
    const spw_schema_t *schema; /* borrowed */
    struct json_tokener *tok;   /* JSON only */

    char *buf;
    size_t cap, max_cap;
    size_t start, end;
    size_t scan;       /* bytes after start already searched for '\n' */
    bool eof;          /* the input has no more bytes */
    bool broken;       /* a pb stream lost its framing: the next call is EOF */
    spw_err_t io_err;  /* sticky read error */
    uint64_t consumed; /* input offset of buf[start] */
    uint64_t line;     /* text lines consumed */

    uint64_t rec_no, rec_line, rec_byte; /* the last record's position */
    const char *raw;
    size_t raw_len;
    uint64_t records, rejected;
    char pos[64];
};

/* Reads up to room bytes of the raw input into dst: *n of them, 0 at its end. */
static spw_err_t raw_read(spw_reader_t *reader, void *dst, size_t room, size_t *n)
{
    if (reader->fd >= 0) {
        for (;;) {
            ssize_t k = read(reader->fd, dst, room);
            if (k >= 0) {
                *n = (size_t)k;
                return SPW_OK;
            }
            if (errno != EINTR)
                return SPW_ERR_IO;
        }
    }
    *n = fread(dst, 1, room, reader->stream);
    return *n == 0 && ferror(reader->stream) ? SPW_ERR_IO : SPW_OK;
}

/* Inflates into buf[end .. cap): at least one byte, or eof at the end of the last member.
 * SPW_ERR_CORRUPT (fail says why) for a damaged or truncated gzip stream. */
static spw_err_t fill_gzip(spw_reader_t *reader)
{
    z_stream *z = reader->z;
    for (;;) {
        if (z->avail_in == 0 && !reader->raw_eof) {
            size_t n;
            spw_err_t rc = raw_read(reader, reader->zin, GZIP_CHUNK, &n);
            if (rc != SPW_OK)
                return rc;
            reader->raw_eof = n == 0;
            z->next_in = reader->zin;
            z->avail_in = (uInt)n;
        }
        if (reader->member_end) {
            if (z->avail_in == 0) {
                if (reader->raw_eof) {
                    reader->eof = true;
                    return SPW_OK;
                }
                continue;
            }
            inflateReset(z); /* concatenated members read as one stream, as gzip -d does */
            reader->member_end = false;
        }
        if (z->avail_in == 0 && reader->raw_eof) {
            snprintf(reader->fail, sizeof(reader->fail), "gzip stream truncated");
            return SPW_ERR_CORRUPT;
        }
        size_t room = reader->cap - reader->end;
        z->next_out = (Bytef *)reader->buf + reader->end;
        z->avail_out = (uInt)(room > UINT32_MAX ? UINT32_MAX : room);
        uInt before = z->avail_out;
        int zrc = inflate(z, Z_NO_FLUSH);
        reader->end += before - z->avail_out;
        if (zrc == Z_STREAM_END) {
            reader->member_end = true;
        } else if (zrc != Z_OK && zrc != Z_BUF_ERROR) {
            snprintf(reader->fail, sizeof(reader->fail), "gzip: %s", z->msg ? z->msg : zError(zrc));
            return SPW_ERR_CORRUPT;
        }
        if (before != z->avail_out)
            return SPW_OK;
    }
}

/* Reads more bytes into buf[end .. cap) (end < cap). Sets eof at the end of the input. */
static spw_err_t fill(spw_reader_t *reader)
{
    size_t room = reader->cap - reader->end;
    assert(room > 0);
    if (reader->z)
        return fill_gzip(reader);
    size_t n;
    spw_err_t rc = raw_read(reader, reader->buf + reader->end, room, &n);
    if (rc != SPW_OK)
        return rc;
    reader->end += n;
    reader->eof = n == 0;
    return SPW_OK;
}

/* Moves the unconsumed bytes to the front and makes cap >= want (want <= max_cap) with room
 * for at least one more byte. */
static spw_err_t make_room(spw_reader_t *reader, size_t want)
{
    assert(want <= reader->max_cap);
    if (reader->start > 0) {
        memmove(reader->buf, reader->buf + reader->start, reader->end - reader->start);
        reader->end -= reader->start;
        reader->start = 0;
    }
    if (reader->cap < want || reader->end == reader->cap) {
        size_t cap = reader->cap * 2 > want ? reader->cap * 2 : want;
        if (cap > reader->max_cap)
            cap = reader->max_cap;
        assert(cap > reader->end);
        char *buf = realloc(reader->buf, cap);
        if (!buf)
            return SPW_ERR_NOMEM;
        reader->buf = buf;
        reader->cap = cap;
    }
    return SPW_OK;
}

/* Reads until at least need unconsumed bytes are buffered or the input ends. */
static spw_err_t ensure(spw_reader_t *reader, size_t need)
{
    while (reader->end - reader->start < need && !reader->eof) {
        spw_err_t rc;
        if (reader->cap - reader->start < need || reader->end == reader->cap) {
            if ((rc = make_room(reader, need)) != SPW_OK)
                return rc;
        }
        if ((rc = fill(reader)) != SPW_OK)
            return rc;
    }
    return SPW_OK;
}

static void consume(spw_reader_t *reader, size_t n)
{
    reader->start += n;
    reader->consumed += n;
    reader->scan = 0;
}

/* Skips the rest of a line that is already longer than the limit, reading through the buffer
 * without keeping it. *len is the line's full length. */
static spw_err_t skip_line(spw_reader_t *reader, uint64_t *len)
{
    uint64_t skipped = reader->end - reader->start;
    reader->consumed += skipped;
    reader->start = reader->end = reader->scan = 0;
    for (;;) {
        if (reader->eof) {
            *len = skipped;
            return SPW_OK;
        }
        spw_err_t rc = fill(reader);
        if (rc != SPW_OK)
            return rc;
        const char *nl = memchr(reader->buf, '\n', reader->end);
        if (nl) {
            size_t k = (size_t)(nl - reader->buf);
            *len = skipped + k;
            consume(reader, k + 1);
            return SPW_OK;
        }
        skipped += reader->end;
        reader->consumed += reader->end;
        reader->end = 0;
    }
}

/*
 * The next line without its '\n': SPW_OK with *line and *len, or with *oversized set (the line
 * was longer than max_record_bytes and is consumed; *len is its length, *line NULL);
 * SPW_ERR_EOF; SPW_ERR_IO; SPW_ERR_NOMEM.
 */
static spw_err_t next_line(spw_reader_t *reader, const char **line, uint64_t *len, bool *oversized)
{
    size_t max = reader->limits.max_record_bytes;
    *oversized = false;
    *line = NULL;
    for (;;) {
        size_t avail = reader->end - reader->start;
        if (reader->scan < avail) {
            const char *from = reader->buf + reader->start;
            const char *nl = memchr(from + reader->scan, '\n', avail - reader->scan);
            if (nl) {
                *len = (size_t)(nl - from);
                if (*len > max)
                    *oversized = true;
                else
                    *line = from;
                consume(reader, (size_t)*len + 1);
                return SPW_OK;
            }
            reader->scan = avail;
        }
        if (avail > max) {
            *oversized = true;
            return skip_line(reader, len);
        }
        if (reader->eof) {
            if (avail == 0)
                return SPW_ERR_EOF;
            *line = reader->buf + reader->start;
            *len = avail;
            consume(reader, avail);
            return SPW_OK;
        }
        spw_err_t rc = make_room(reader, avail + 1);
        if (rc == SPW_OK)
            rc = fill(reader);
        if (rc != SPW_OK)
            return rc;
    }
}

static spw_err_t next_text(spw_reader_t *reader, spw_arena_t *arena, Sparrow__Example **out,
                           struct spw_parse_error *err)
{
    for (;;) {
        const char *line;
        uint64_t len;
        bool oversized;
        spw_err_t rc = next_line(reader, &line, &len, &oversized);
        if (rc != SPW_OK)
            return rc;
        reader->line++;
        if (!oversized && (len == 0 || (len == 1 && line[0] == '\r')))
            continue; /* blank lines separate nothing and are not records */
        reader->rec_line = reader->line;
        reader->records++;
        if (oversized) {
            reader->rejected++;
            return spw_ingest__fail(err, SPW_REJECT_OVERSIZED,
                                    "line of %" PRIu64 " bytes, limit %zu", len,
                                    reader->limits.max_record_bytes);
        }
        reader->raw = line;
        reader->raw_len = (size_t)len;
        if (reader->format == SPW_FORMAT_JSON)
            rc = spw_ingest__parse_json(reader->tok, line, (size_t)len, reader->schema,
                                        &reader->limits, arena, out, err);
        else
            rc = spw_parse_criteo_line(line, (size_t)len, &reader->limits, arena, out, err);
        if (rc == SPW_ERR_INVALID)
            reader->rejected++;
        return rc;
    }
}

/*
 * pb files: records back to back, each
 *   varint  n          the message's length (1..10 bytes)
 *   n bytes            a sparrow.Example
 * A bad length cannot be skipped (the next record's start is unknown), so it ends the stream.
 */
static spw_err_t next_pb(spw_reader_t *reader, spw_arena_t *arena, Sparrow__Example **out,
                         struct spw_parse_error *err)
{
    size_t max = reader->limits.max_record_bytes;
    spw_err_t rc = ensure(reader, PB_MAX_PREFIX);
    if (rc != SPW_OK)
        return rc;
    size_t avail = reader->end - reader->start;
    if (avail == 0)
        return SPW_ERR_EOF;
    reader->rec_no++;
    reader->rec_byte = reader->consumed;
    reader->records++;
    const uint8_t *from = (const uint8_t *)reader->buf + reader->start;
    size_t msg_len = 0, prefix_len = 0;
    rc = spw_wire_read_varint_prefix(from, avail, max, &msg_len, &prefix_len);
    if (rc != SPW_OK) {
        reader->rejected++;
        reader->broken = true;
        reader->raw = (const char *)from;
        reader->raw_len = avail < PB_MAX_PREFIX ? avail : PB_MAX_PREFIX;
        consume(reader, avail);
        if (rc == SPW_ERR_TOO_BIG) {
            reader->raw = NULL; /* an oversized record is not kept */
            reader->raw_len = 0;
            if (msg_len > max)
                spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "record of %zu bytes, limit %zu",
                                 msg_len, max);
            else
                spw_ingest__fail(err, SPW_REJECT_OVERSIZED, "length prefix above limit %zu", max);
            return SPW_ERR_TOO_BIG;
        }
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "%s length prefix",
                                avail < PB_MAX_PREFIX ? "truncated" : "malformed");
    }
    if ((rc = ensure(reader, prefix_len + msg_len)) != SPW_OK)
        return rc;
    from = (const uint8_t *)reader->buf + reader->start;
    avail = reader->end - reader->start;
    reader->raw = (const char *)from + prefix_len;
    if (avail < prefix_len + msg_len) {
        reader->rejected++;
        reader->broken = true;
        reader->raw_len = avail - prefix_len;
        consume(reader, avail);
        return spw_ingest__fail(err, SPW_REJECT_UNDECODABLE, "truncated record: %zu of %zu bytes",
                                avail - prefix_len, msg_len);
    }
    reader->raw_len = msg_len;
    consume(reader, prefix_len + msg_len);
    rc = spw_parse_pb_example(reader->raw, msg_len, &reader->limits, arena, out, err);
    if (rc == SPW_ERR_INVALID)
        reader->rejected++;
    return rc;
}

/* From here on the raw bytes are inflated: the bytes buffered so far are the first compressed
 * ones. */
static spw_err_t start_gzip(spw_reader_t *reader)
{
    reader->z = calloc(1, sizeof(*reader->z));
    reader->zin = malloc(GZIP_CHUNK);
    if (!reader->z || !reader->zin)
        return SPW_ERR_NOMEM;
    if (inflateInit2(reader->z, 15 + 16) != Z_OK) { /* 15 + 16: a gzip wrapper, 32 KiB window */
        free(reader->z);
        reader->z = NULL;
        return SPW_ERR_NOMEM;
    }
    size_t avail = reader->end - reader->start;
    memcpy(reader->zin, reader->buf + reader->start, avail);
    reader->z->next_in = reader->zin;
    reader->z->avail_in = (uInt)avail;
    reader->raw_eof = reader->eof;
    reader->eof = false;
    reader->start = reader->end = reader->scan = 0;
    reader->compression = "gzip";
    return SPW_OK;
}

/* Buffers the first line, or SNIFF_BYTES of it, or the whole input when it is shorter. */
static spw_err_t buffer_first_line(spw_reader_t *reader)
{
    for (;;) {
        size_t avail = reader->end - reader->start;
        if (reader->eof || avail >= SNIFF_BYTES || memchr(reader->buf + reader->start, '\n', avail))
            return SPW_OK;
        spw_err_t rc = make_room(reader, avail + 1);
        if (rc == SPW_OK)
            rc = fill(reader);
        if (rc != SPW_OK)
            return rc;
    }
}

/*
 * The first call's look at the input: its compression by magic number (gzip is inflated from
 * here on; another is an error, as the parsers would refuse every record), then what its first
 * bytes look like (spw_format_sniff): the format of SPW_FORMAT_AUTO (logged), or a warning when
 * an explicit format is not what the data looks like (the roles' reject check explains it).
 */
static spw_err_t start(spw_reader_t *reader)
{
    reader->started = true;
    spw_err_t rc = ensure(reader, MAGIC_BYTES);
    if (rc != SPW_OK)
        return rc;
    const char *comp =
        spw_format_compression(reader->buf + reader->start, reader->end - reader->start);
    if (comp && strcmp(comp, "gzip") == 0) {
        if ((rc = start_gzip(reader)) != SPW_OK)
            return rc;
    } else if (comp) {
        snprintf(reader->fail, sizeof(reader->fail),
                 "the input is compressed with %s; only gzip is read as it is (decompress it "
                 "first)",
                 comp);
        return SPW_ERR_UNSUPPORTED;
    }
    if ((rc = buffer_first_line(reader)) != SPW_OK)
        return rc;
    char why[128];
    enum spw_format looks;
    spw_err_t sniffed = spw_format_sniff(reader->buf + reader->start, reader->end - reader->start,
                                         &looks, why, sizeof(why));
    if (sniffed == SPW_OK) {
        reader->looks_known = true;
        reader->looks_like = looks;
    }
    if (reader->requested != SPW_FORMAT_AUTO) {
        if (sniffed == SPW_OK && looks != reader->requested)
            SPW_WARN("input does not look like its format",
                     "format=%s looks_like=%s compression=%s", spw_format_name(reader->requested),
                     spw_format_name(looks), reader->compression ? reader->compression : "none");
        return SPW_OK;
    }
    if (sniffed == SPW_ERR_INVALID) {
        snprintf(reader->fail, sizeof(reader->fail), "cannot tell the input's format: %s", why);
        return SPW_ERR_UNSUPPORTED;
    }
    /* nothing but blanks: no record whatever the format; the text reader says EOF */
    reader->format = sniffed == SPW_OK ? looks : SPW_FORMAT_JSON;
    if (reader->format == SPW_FORMAT_JSON && !(reader->tok = spw_ingest__json_tokener_new()))
        return SPW_ERR_NOMEM;
    if (sniffed == SPW_OK)
        SPW_INFO("input format detected", "format=%s compression=%s",
                 spw_format_name(reader->format),
                 reader->compression ? reader->compression : "none");
    return SPW_OK;
}

spw_err_t spw_reader_next(spw_reader_t *reader, spw_arena_t *arena, Sparrow__Example **out,
                          struct spw_parse_error *err)
{
    assert(reader && arena && out && err);
    *out = NULL;
    reader->raw = NULL;
    reader->raw_len = 0;
    err->reason = SPW_REJECT_NONE;
    err->message[0] = '\0';
    if (reader->io_err) {
        snprintf(err->message, sizeof(err->message), "%s", reader->fail);
        return reader->io_err;
    }
    if (reader->broken)
        return SPW_ERR_EOF;
    spw_err_t rc = reader->started ? SPW_OK : start(reader);
    bool start_failed = rc != SPW_OK; /* sticky too: the reader is not set up to read */
    if (rc == SPW_ERR_NOMEM)
        snprintf(reader->fail, sizeof(reader->fail), "out of memory");
    if (rc == SPW_OK)
        rc = reader->format == SPW_FORMAT_PB ? next_pb(reader, arena, out, err)
                                             : next_text(reader, arena, out, err);
    if (start_failed || rc == SPW_ERR_IO || rc == SPW_ERR_CORRUPT || rc == SPW_ERR_UNSUPPORTED) {
        reader->io_err = rc;
        if (rc == SPW_ERR_IO)
            snprintf(reader->fail, sizeof(reader->fail), "read error: %s", strerror(errno));
        snprintf(err->message, sizeof(err->message), "%s", reader->fail);
    }
    return rc;
}

/* Everything but the input. */
static spw_reader_t *reader_new(enum spw_format format, const struct spw_ingest_limits *limits,
                                const spw_schema_t *schema, const char *name, char *errstr,
                                size_t errstr_size)
{
    spw_reader_t *reader = calloc(1, sizeof(*reader));
    if (!reader)
        goto out_nomem;
    reader->fd = -1;
    reader->format = reader->requested = format;
    reader->limits = *limits;
    reader->schema = schema;
    size_t slack = format == SPW_FORMAT_PB || format == SPW_FORMAT_AUTO ? PB_MAX_PREFIX : 1;
    if (reader->limits.max_record_bytes > SIZE_MAX / 2)
        reader->limits.max_record_bytes = SIZE_MAX / 2;
    /* The first buffer holds a few records (so that a small limit still reads in blocks) and
     * grows only for a record longer than it. */
    reader->max_cap = reader->limits.max_record_bytes + slack;
    reader->cap = reader->max_cap > READER_CHUNK / 4 ? READER_CHUNK : reader->max_cap * 4;
    if (reader->cap < READER_MIN_CHUNK)
        reader->cap = READER_MIN_CHUNK;
    if (reader->max_cap < reader->cap)
        reader->max_cap = reader->cap;
    reader->buf = malloc(reader->cap);
    if (!reader->buf)
        goto out_free_reader;
    if (format == SPW_FORMAT_JSON) {
        reader->tok = spw_ingest__json_tokener_new();
        if (!reader->tok)
            goto out_free_buf;
    }
    return reader;

out_free_buf:
    free(reader->buf);
out_free_reader:
    free(reader);
out_nomem:
    snprintf(errstr, errstr_size, "%s: out of memory", name);
    return NULL;
}

spw_reader_t *spw_reader_open(const char *path, enum spw_format format,
                              const struct spw_ingest_limits *limits, const spw_schema_t *schema,
                              char *errstr, size_t errstr_size)
{
    bool is_stdin = strcmp(path, "-") == 0;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
        goto out_close_fd;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(errstr, errstr_size, "%s: is a directory", path);
        goto out_close_fd;
    }
    if (S_ISREG(st.st_mode))
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    spw_reader_t *reader = reader_new(format, limits, schema, path, errstr, errstr_size);
    if (!reader)
        goto out_close_fd;
    reader->fd = fd;
    reader->close_fd = !is_stdin;
    return reader;

out_close_fd:
    if (!is_stdin)
        close(fd);
    return NULL;
}

spw_reader_t *spw_reader_open_stream(FILE *stream, enum spw_format format,
                                     const struct spw_ingest_limits *limits,
                                     const spw_schema_t *schema, char *errstr, size_t errstr_size)
{
    spw_reader_t *reader = reader_new(format, limits, schema, "stream", errstr, errstr_size);
    if (reader)
        reader->stream = stream;
    return reader;
}

void spw_reader_close(spw_reader_t *reader)
{
    if (!reader)
        return;
    if (reader->close_fd)
        close(reader->fd);
    if (reader->tok)
        json_tokener_free(reader->tok);
    if (reader->z) {
        inflateEnd(reader->z);
        free(reader->z);
    }
    free(reader->zin);
    free(reader->buf);
    free(reader);
}

enum spw_format spw_reader_format(const spw_reader_t *reader)
{
    return reader->format;
}

const char *spw_reader_compression(const spw_reader_t *reader)
{
    return reader->compression;
}

void spw_reader_explain(const spw_reader_t *reader, const char *format_prop, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!reader->started || reader->io_err)
        return;
    const char *comp = reader->compression ? " (gzip, inflated)" : "";
    if (!reader->looks_known && reader->requested == SPW_FORMAT_AUTO)
        return; /* nothing was told from the input (it holds no data) */
    if (reader->looks_known && reader->looks_like != reader->format)
        snprintf(buf, size,
                 "the input%s was read as %s=%s but looks like %s: set %s=%s, or %s=auto to "
                 "detect it",
                 comp, format_prop, spw_format_name(reader->format),
                 spw_format_title(reader->looks_like), format_prop,
                 spw_format_name(reader->looks_like), format_prop);
    else
        snprintf(buf, size, "the input%s was read as %s=%s%s", comp, format_prop,
                 spw_format_name(reader->format),
                 reader->requested == SPW_FORMAT_AUTO ? " (detected)" : "");
}

const char *spw_reader_position(const spw_reader_t *reader)
{
    /* pos is a formatting cache: filled on demand so that good records cost no snprintf. The
     * reader itself is never a const object, so writing through the cast is defined. */
    spw_reader_t *r = (spw_reader_t *)reader;
    if (r->format == SPW_FORMAT_PB)
        snprintf(r->pos, sizeof(r->pos), "record %" PRIu64 " at byte %" PRIu64, r->rec_no,
                 r->rec_byte);
    else
        snprintf(r->pos, sizeof(r->pos), "line %" PRIu64, r->rec_line);
    return r->pos;
}

const void *spw_reader_raw(const spw_reader_t *reader, size_t *len)
{
    *len = reader->raw_len;
    return reader->raw;
}

uint64_t spw_reader_records(const spw_reader_t *reader)
{
    return reader->records;
}

uint64_t spw_reader_rejected(const spw_reader_t *reader)
{
    return reader->rejected;
}
