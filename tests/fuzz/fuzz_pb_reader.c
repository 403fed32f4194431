/* libFuzzer target: the input as a file read through the reader until EOF, as a pb stream,
 * (with a small line limit, to reach the oversized-line paths) as JSON and Criteo lines, and as
 * whatever its first bytes look like (auto); input that starts like gzip is inflated. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sparrow/ingest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_stream(const uint8_t *data, size_t size, enum spw_format format,
                        size_t max_record_bytes)
{
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f)
        return;
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    limits.max_record_bytes = max_record_bytes;
    limits.max_features = 16;
    char errstr[128];
    spw_reader_t *reader = spw_reader_open_stream(f, format, &limits, NULL, errstr, sizeof(errstr));
    spw_arena_t *arena = spw_arena_new(4096, 16u << 20);
    if (!reader || !arena)
        goto out;
    /* Every call that is not the end consumes at least one byte (of the inflated input, when it
     * is gzip: deflate expands at most 1032 times). */
    for (size_t calls = 0;; calls++) {
        Sparrow__Example *ex;
        struct spw_parse_error err;
        spw_arena_reset(arena);
        spw_err_t rc = spw_reader_next(reader, arena, &ex, &err);
        /* after the call: the reader tells the compression from the first bytes it reads */
        size_t bound = spw_reader_compression(reader) ? size * 1032 : size;
        if (calls > bound + 1)
            abort();
        if (rc == SPW_ERR_EOF || rc == SPW_ERR_IO || rc == SPW_ERR_NOMEM || rc == SPW_ERR_CORRUPT ||
            rc == SPW_ERR_UNSUPPORTED) {
            /* a failure is sticky, and says why */
            if (rc != SPW_ERR_EOF &&
                (!err.message[0] || spw_reader_next(reader, arena, &ex, &err) != rc))
                abort();
            break;
        }
        if (spw_reader_format(reader) == SPW_FORMAT_AUTO)
            abort(); /* the first record decided it */
        size_t raw_len;
        const uint8_t *raw = spw_reader_raw(reader, &raw_len);
        if (raw_len > bound || raw_len > max_record_bytes + 10 || (raw_len && !raw))
            abort();
        if (rc == SPW_OK && (!ex || ex->n_keys > limits.max_features))
            abort();
        if ((rc == SPW_ERR_INVALID || rc == SPW_ERR_TOO_BIG) && err.reason == SPW_REJECT_NONE)
            abort();
        (void)spw_reader_position(reader);
    }
    if (spw_reader_rejected(reader) > spw_reader_records(reader))
        abort();
out:
    spw_arena_destroy(arena);
    spw_reader_close(reader);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;                                /* fmemopen refuses an empty buffer */
    read_stream(data, size, SPW_FORMAT_PB, 300); /* a 1 KiB buffer: records straddle refills */
    read_stream(data, size, SPW_FORMAT_JSON, 256);
    read_stream(data, size, SPW_FORMAT_CRITEO, 256);
    read_stream(data, size, SPW_FORMAT_AUTO, 300);
    return 0;
}
