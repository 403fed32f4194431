/* Unit tests of the filesystem helpers (sparrow/fs.h): mkdir -p and rm -r. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/fs.h"
#include "test_dir.h"

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}

static void test_fs_mkdir_p_creates_parents(void **state)
{
    (void)state;
    char p[256];
    snprintf(p, sizeof(p), "%s/a/b/c", test_dir);
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    assert_true(is_dir(p));
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);   /* exists already */
    snprintf(p, sizeof(p), "%s/a/b/d/", test_dir); /* a trailing slash */
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    assert_true(is_dir(p));
}

static void test_fs_mkdir_p_refuses(void **state)
{
    (void)state;
    assert_int_equal(spw_fs_mkdir_p(""), SPW_ERR_INVALID);
    char *long_path = malloc(8192);
    assert_non_null(long_path);
    memset(long_path, 'a', 8191);
    long_path[8191] = '\0';
    assert_int_equal(spw_fs_mkdir_p(long_path), SPW_ERR_INVALID);
    free(long_path);
    /* a file where a parent should be */
    char f[256], p[300];
    snprintf(f, sizeof(f), "%s/file", test_dir);
    touch(f);
    snprintf(p, sizeof(p), "%s/sub", f);
    assert_int_equal(spw_fs_mkdir_p(p), SPW_ERR_IO);
}

static void test_fs_remove_tree_removes_all(void **state)
{
    (void)state;
    char root[256], p[300];
    snprintf(root, sizeof(root), "%s/tree", test_dir);
    snprintf(p, sizeof(p), "%s/x/y/z", root);
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    snprintf(p, sizeof(p), "%s/x/y/file", root);
    touch(p);
    snprintf(p, sizeof(p), "%s/top", root);
    touch(p);
    /* a link below the root is removed, its target kept */
    char keep[256], keep_file[300];
    snprintf(keep, sizeof(keep), "%s/keep", test_dir);
    assert_int_equal(spw_fs_mkdir_p(keep), SPW_OK);
    snprintf(keep_file, sizeof(keep_file), "%s/precious", keep);
    touch(keep_file);
    snprintf(p, sizeof(p), "%s/x/link", root);
    assert_int_equal(symlink(keep, p), 0);
    assert_int_equal(spw_fs_remove_tree(root), SPW_OK);
    struct stat st;
    assert_int_not_equal(lstat(root, &st), 0);
    assert_int_equal(stat(keep_file, &st), 0);
    /* gone already; a plain file */
    assert_int_equal(spw_fs_remove_tree(root), SPW_ERR_NOT_FOUND);
    assert_int_equal(spw_fs_remove_tree(keep_file), SPW_OK);
    assert_int_not_equal(stat(keep_file, &st), 0);
}

static void test_fs_remove_tree_reports_leftovers(void **state)
{
    (void)state;
    if (geteuid() == 0)
        skip(); /* root removes what the mode forbids */
    char root[256], p[300];
    snprintf(root, sizeof(root), "%s/locked", test_dir);
    snprintf(p, sizeof(p), "%s/inner", root);
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    snprintf(p, sizeof(p), "%s/inner/file", root);
    touch(p);
    snprintf(p, sizeof(p), "%s/inner", root);
    assert_int_equal(chmod(p, 0555), 0);
    assert_int_equal(spw_fs_remove_tree(root), SPW_ERR_IO);
    assert_true(is_dir(p));
    assert_int_equal(chmod(p, 0755), 0);
    assert_int_equal(spw_fs_remove_tree(root), SPW_OK);
}

SPW_TEST_MAIN_GROUP(test_dir_setup, test_dir_teardown, test_fs_mkdir_p_creates_parents,
                    test_fs_mkdir_p_refuses, test_fs_remove_tree_removes_all,
                    test_fs_remove_tree_reports_leftovers)
