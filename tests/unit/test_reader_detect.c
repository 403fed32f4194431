/* Unit tests for what the reader tells from an input's first bytes: the format (auto), gzip read
 * as it is, other compressions refused, and the end-of-input reject check of the roles. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "sparrow/ingest.h"

static const char json2[] = "{\"label\":1,\"features\":{\"a\":\"x\"}}\n"
                            "{\"label\":0,\"features\":{\"b\":\"y\"}}\n";
/* two Criteo lines of 40 columns: label, I1..I13, C1..C26 */
static const char criteo2[] =
    "1\t5\t\t\t\t\t\t\t\t\t\t\t\t\tabc\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n"
    "0\t\t3\t\t\t\t\t\t\t\t\t\t\t\txyz\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n";

/* Writes len bytes to a new temporary file; returns its path (static storage, one per slot). */
static const char *write_temp(int slot, const void *data, size_t len)
{
    static char paths[4][64];
    snprintf(paths[slot], sizeof(paths[slot]), "/tmp/spw_detect_XXXXXX");
    int fd = mkstemp(paths[slot]);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return paths[slot];
}

/* data gzip-compressed (one member) into out (size bytes); returns its length. */
static size_t gzip_bytes(const void *data, size_t len, unsigned char *out, size_t size)
{
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)size;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = size - z.avail_out;
    deflateEnd(&z);
    return n;
}

/* One pb record: varint length, then an Example holding only a label. */
static size_t pb_record(float label, unsigned char *out)
{
    out[0] = 5;
    out[1] = 0x15; /* field 2 (label), fixed32 */
    memcpy(out + 2, &label, 4);
    return 6;
}

/* Reads path to the end in format; returns the records accepted and fills the last error. */
static size_t read_all(const char *path, enum spw_format format, spw_err_t *last,
                       struct spw_parse_error *err, enum spw_format *resolved, char *explain,
                       size_t explain_size)
{
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    char errstr[256];
    spw_reader_t *reader = spw_reader_open(path, format, &limits, NULL, errstr, sizeof(errstr));
    assert_non_null(reader);
    spw_arena_t *arena = spw_arena_new(0, 0);
    size_t ok = 0;
    for (;;) {
        Sparrow__Example *ex;
        spw_arena_reset(arena);
        *last = spw_reader_next(reader, arena, &ex, err);
        if (*last == SPW_OK)
            ok++;
        else if (*last != SPW_ERR_INVALID)
            break;
    }
    *resolved = spw_reader_format(reader);
    spw_reader_explain(reader, "trainer.format", explain, explain_size);
    spw_reader_close(reader);
    spw_arena_destroy(arena);
    unlink(path);
    return ok;
}

static void test_reader_detect_sniff(void **state)
{
    (void)state;
    enum spw_format f;
    char why[128];
    assert_int_equal(spw_format_sniff(json2, strlen(json2), &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_JSON);
    /* a byte-order mark and blank lines first, then JSON */
    const char bom[] = "\xef\xbb\xbf\n  \r\n{\"label\":1}";
    assert_int_equal(spw_format_sniff(bom, strlen(bom), &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_JSON);
    assert_int_equal(spw_format_sniff(criteo2, strlen(criteo2), &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_CRITEO);
    /* UTF-8 text with a tab is still text */
    const char utf8[] = "1\t\xc3\xa9t\xc3\xa9\n";
    assert_int_equal(spw_format_sniff(utf8, strlen(utf8), &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_CRITEO);
    unsigned char pb[16];
    size_t n = pb_record(1.0f, pb);
    assert_int_equal(spw_format_sniff(pb, n, &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_PB);
    /* a pb record of 123 bytes starts with '{' but is no text */
    const unsigned char brace[] = {'{', 0x08, 0x01, 0x15};
    assert_int_equal(spw_format_sniff(brace, sizeof(brace), &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_PB);
    /* invalid UTF-8 is not text */
    const char bad_utf8[] = "1\t\xff\xfe\n";
    assert_int_equal(spw_format_sniff(bad_utf8, strlen(bad_utf8), &f, why, sizeof(why)), SPW_OK);
    assert_int_equal(f, SPW_FORMAT_PB);
    const char csv[] = "label,user,item\n1,2,3\n";
    assert_int_equal(spw_format_sniff(csv, strlen(csv), &f, why, sizeof(why)), SPW_ERR_INVALID);
    assert_non_null(strstr(why, "neither a JSON object nor tab-separated"));
    assert_non_null(strstr(why, "\"label,user,item\""));
    assert_int_equal(spw_format_sniff(" \n\n", 3, &f, why, sizeof(why)), SPW_ERR_EOF);

    assert_string_equal(spw_format_compression("\x1f\x8b\x08", 3), "gzip");
    assert_string_equal(spw_format_compression("\x28\xb5\x2f\xfd", 4), "zstd");
    assert_string_equal(spw_format_compression("\xfd"
                                               "7zXZ\x00",
                                               6),
                        "xz");
    assert_string_equal(spw_format_compression("BZh91AY&SY", 10), "bzip2");
    assert_string_equal(spw_format_compression("PK\x03\x04", 4), "zip");
    assert_null(spw_format_compression("BZh9 text", 9));
    assert_null(spw_format_compression(json2, strlen(json2)));

    enum spw_format parsed;
    assert_int_equal(spw_format_parse("auto", &parsed), SPW_OK);
    assert_int_equal(parsed, SPW_FORMAT_AUTO);
    assert_string_equal(spw_format_name(SPW_FORMAT_AUTO), "auto");
}

/* auto reads each format as what it is; gzip (one member or several) is inflated on the way. */
static void test_reader_detect_auto_and_gzip(void **state)
{
    (void)state;
    spw_err_t last;
    struct spw_parse_error err;
    enum spw_format f;
    char explain[256];
    assert_int_equal(read_all(write_temp(0, json2, strlen(json2)), SPW_FORMAT_AUTO, &last, &err, &f,
                              explain, sizeof(explain)),
                     2);
    assert_int_equal(last, SPW_ERR_EOF);
    assert_int_equal(f, SPW_FORMAT_JSON);
    assert_string_equal(explain, "the input was read as trainer.format=json (detected)");
    assert_int_equal(read_all(write_temp(0, criteo2, strlen(criteo2)), SPW_FORMAT_AUTO, &last, &err,
                              &f, explain, sizeof(explain)),
                     2);
    assert_int_equal(f, SPW_FORMAT_CRITEO);
    unsigned char pb[12];
    size_t n = pb_record(1.0f, pb);
    n += pb_record(0.0f, pb + n);
    assert_int_equal(
        read_all(write_temp(0, pb, n), SPW_FORMAT_AUTO, &last, &err, &f, explain, sizeof(explain)),
        2);
    assert_int_equal(f, SPW_FORMAT_PB);

    /* gzip: two members back to back (cat a.gz b.gz) read as one stream */
    unsigned char gz[1024];
    size_t gn = gzip_bytes(json2, strlen(json2), gz, sizeof(gz));
    gn += gzip_bytes(json2, strlen(json2), gz + gn, sizeof(gz) - gn);
    assert_int_equal(
        read_all(write_temp(1, gz, gn), SPW_FORMAT_AUTO, &last, &err, &f, explain, sizeof(explain)),
        4);
    assert_int_equal(last, SPW_ERR_EOF);
    assert_int_equal(f, SPW_FORMAT_JSON);
    assert_string_equal(explain, "the input (gzip, inflated) was read as trainer.format=json "
                                 "(detected)");
    /* an explicit format reads gzip too */
    assert_int_equal(
        read_all(write_temp(1, gz, gn), SPW_FORMAT_JSON, &last, &err, &f, explain, sizeof(explain)),
        4);
    /* a truncated gzip file is an error that says so, after the records before the cut */
    size_t big = 0;
    char *lines = malloc(64 * 1024);
    assert_non_null(lines);
    for (int i = 0; big + 64 < 64 * 1024; i++)
        big +=
            (size_t)snprintf(lines + big, 64, "{\"label\":%d,\"features\":{\"n\":%d}}\n", i & 1, i);
    unsigned char *gzbig = malloc(64 * 1024);
    assert_non_null(gzbig);
    size_t gbig = gzip_bytes(lines, big, gzbig, 64 * 1024);
    size_t ok = read_all(write_temp(2, gzbig, gbig / 2), SPW_FORMAT_AUTO, &last, &err, &f, explain,
                         sizeof(explain));
    assert_true(ok > 0);
    assert_int_equal(last, SPW_ERR_CORRUPT);
    assert_string_equal(err.message, "gzip stream truncated");
    free(lines);
    free(gzbig);
}

/* Another compression, or text of no format under auto, is a sticky error that says why; an
 * explicit format the data does not look like is read as asked and explained. */
static void test_reader_detect_refusals(void **state)
{
    (void)state;
    spw_err_t last;
    struct spw_parse_error err;
    enum spw_format f;
    char explain[256];
    const char xz[] = "\xfd"
                      "7zXZ\x00\x00\x04\xe6\xd6\xb4\x46";
    assert_int_equal(read_all(write_temp(0, xz, sizeof(xz) - 1), SPW_FORMAT_PB, &last, &err, &f,
                              explain, sizeof(explain)),
                     0);
    assert_int_equal(last, SPW_ERR_UNSUPPORTED);
    assert_string_equal(err.message, "the input is compressed with xz; only gzip is read as it is "
                                     "(decompress it first)");
    const char csv[] = "label,user\n1,2\n";
    assert_int_equal(read_all(write_temp(0, csv, strlen(csv)), SPW_FORMAT_AUTO, &last, &err, &f,
                              explain, sizeof(explain)),
                     0);
    assert_int_equal(last, SPW_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "cannot tell the input's format"));
    /* Criteo read as pb: every record refused, and the explanation names both formats */
    assert_int_equal(read_all(write_temp(0, criteo2, strlen(criteo2)), SPW_FORMAT_PB, &last, &err,
                              &f, explain, sizeof(explain)),
                     0);
    assert_string_equal(explain, "the input was read as trainer.format=pb but looks like Criteo "
                                 "TSV (criteo): set trainer.format=criteo, or trainer.format=auto "
                                 "to detect it");
    /* an empty input under auto explains nothing (there is nothing to tell from) */
    assert_int_equal(
        read_all(write_temp(0, "", 0), SPW_FORMAT_AUTO, &last, &err, &f, explain, sizeof(explain)),
        0);
    assert_int_equal(last, SPW_ERR_EOF);
    assert_string_equal(explain, "");
}

static void test_reader_detect_reject_check(void **state)
{
    (void)state;
    char errstr[512];
    uint64_t by[SPW_REJECT__COUNT] = {0};
    /* a few bad lines pass; at or under the ratio passes */
    assert_int_equal(spw_ingest_reject_check("file:a", 1000, 3, by, 0.5, "trainer.max_reject_ratio",
                                             "", errstr, sizeof(errstr)),
                     SPW_OK);
    assert_int_equal(spw_ingest_reject_check("file:a", 10, 5, by, 0.5, "trainer.max_reject_ratio",
                                             "", errstr, sizeof(errstr)),
                     SPW_OK);
    by[SPW_REJECT_UNDECODABLE] = 6;
    by[SPW_REJECT_BAD_LABEL] = 1;
    assert_int_equal(spw_ingest_reject_check("file:a", 10, 7, by, 0.5, "trainer.max_reject_ratio",
                                             "the input was read as trainer.format=pb", errstr,
                                             sizeof(errstr)),
                     SPW_ERR_INVALID);
    assert_string_equal(errstr, "file:a: 7 of 10 records rejected (70%, above "
                                "trainer.max_reject_ratio=0.5), most as undecodable; the input "
                                "was read as trainer.format=pb");
    /* every record rejected fails even at ratio 1; nothing at all fails */
    assert_int_equal(spw_ingest_reject_check("file:a", 4, 4, NULL, 1.0, "ingest.max_reject_ratio",
                                             NULL, errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    assert_string_equal(errstr, "file:a: 4 of 4 records rejected (100%, above "
                                "ingest.max_reject_ratio=1)");
    assert_int_equal(spw_ingest_reject_check("file:e", 0, 0, NULL, 0.5, "ingest.max_reject_ratio",
                                             "", errstr, sizeof(errstr)),
                     SPW_ERR_INVALID);
    assert_string_equal(errstr, "file:e: no record in the input (it is empty)");
}

SPW_TEST_MAIN(test_reader_detect_sniff, test_reader_detect_auto_and_gzip,
              test_reader_detect_refusals, test_reader_detect_reject_check)
