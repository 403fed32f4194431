/* Unit tests of the CURVE key-file reader (sparrow/curve_key.h): zcert files, bare keys, errors. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/curve_key.h"

#define PUB "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
#define SEC "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"

static char g_path[64];

static void write_file(const char *text)
{
    snprintf(g_path, sizeof(g_path), "/tmp/spw-test-curve-%ld", (long)getpid());
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_curve_key_zcert(void **state)
{
    (void)state;
    write_file("#   ****  Generated on 2026-12-01 by CZMQ  ****\n"
               "metadata\n    name = \"shard\"\ncurve\n"
               "    public-key = \"" PUB "\"\n"
               "    secret-key = \"" SEC "\"\n");
    char key[SPW_CURVE_KEY_LEN + 1], err[256];
    assert_int_equal(spw_curve_key_read(g_path, true, key, err, sizeof(err)), SPW_OK);
    assert_string_equal(key, SEC);
    assert_int_equal(spw_curve_key_read(g_path, false, key, err, sizeof(err)), SPW_OK);
    assert_string_equal(key, PUB);
    unlink(g_path);
}

static void test_curve_key_bare_and_errors(void **state)
{
    (void)state;
    char key[SPW_CURVE_KEY_LEN + 1], err[256];
    write_file("# a bare key\n\n  " PUB "  \r\n");
    assert_int_equal(spw_curve_key_read(g_path, false, key, err, sizeof(err)), SPW_OK);
    assert_string_equal(key, PUB);
    write_file("tooshort\n");
    assert_int_equal(spw_curve_key_read(g_path, true, key, err, sizeof(err)), SPW_ERR_INVALID);
    assert_non_null(strstr(err, "no 40-character Z85 secret key"));
    unlink(g_path);
    assert_int_equal(spw_curve_key_read(g_path, true, key, err, sizeof(err)), SPW_ERR_NOT_FOUND);
    assert_non_null(strstr(err, g_path));
}

static spw_err_t collect(void *opaque, const char *key, int lineno, char *errstr,
                         size_t errstr_size)
{
    (void)errstr, (void)errstr_size;
    int *n = opaque;
    assert_int_equal(strlen(key), SPW_CURVE_KEY_LEN);
    assert_true(lineno > 0);
    return ++*n == 3 ? SPW_ERR_TOO_BIG : SPW_OK;
}

static void test_curve_keys_foreach_allow_list(void **state)
{
    (void)state;
    char err[256];
    int n = 0;
    write_file("# clients\n" PUB "\n    public-key = \"" SEC "\"\nsecret-key = \"" SEC "\"\n");
    assert_int_equal(spw_curve_keys_foreach(g_path, collect, &n, err, sizeof(err)), SPW_OK);
    assert_int_equal(n, 2);
    n = 0;
    write_file(PUB "\n" PUB "\n" PUB "\n" PUB "\n");
    assert_int_equal(spw_curve_keys_foreach(g_path, collect, &n, err, sizeof(err)),
                     SPW_ERR_TOO_BIG); /* fn's error stops the walk */
    assert_int_equal(n, 3);
    n = 0;
    write_file(PUB "\nnot a key\n");
    assert_int_equal(spw_curve_keys_foreach(g_path, collect, &n, err, sizeof(err)),
                     SPW_ERR_INVALID);
    assert_non_null(strstr(err, ":2: not a 40-character Z85 public key"));
    unlink(g_path);
}

SPW_TEST_MAIN(test_curve_key_zcert, test_curve_key_bare_and_errors,
              test_curve_keys_foreach_allow_list)
