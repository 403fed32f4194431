/* Unit tests of the checkpoint layout (sparrow/ckpt_layout.h): the paths spelled as the on-disk
 * format has them, epoch names, path splitting, listing and removal. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/ckpt_layout.h"
#include "sparrow/fs.h"

static void test_ckpt_layout_paths(void **state)
{
    (void)state;
    char p[SPW_CKPT_PATH_MAX];
    assert_int_equal(spw_ckpt_dir_path(p, sizeof(p), "/r"), SPW_OK);
    assert_string_equal(p, "/r/checkpoints");
    assert_int_equal(spw_ckpt_latest_path(p, sizeof(p), "/r"), SPW_OK);
    assert_string_equal(p, "/r/checkpoints/LATEST");
    assert_int_equal(spw_ckpt_epoch_path(p, sizeof(p), "/r", 12), SPW_OK);
    assert_string_equal(p, "/r/checkpoints/12");
    assert_int_equal(spw_ckpt_manifest_path(p, sizeof(p), "/r", 12), SPW_OK);
    assert_string_equal(p, "/r/checkpoints/12/MANIFEST");
    assert_int_equal(spw_ckpt_shard_path(p, sizeof(p), "/r", 12, 3), SPW_OK);
    assert_string_equal(p, "/r/checkpoints/12/shard-3");
    assert_int_equal(spw_ckpt_shard_tmp_path(p, sizeof(p), "/r", 12, 3), SPW_OK);
    assert_string_equal(p, "/r/checkpoints/12/.shard-3.tmp");
    assert_int_equal(spw_ckpt_checksum_path(p, sizeof(p), "/r/checkpoints/12/shard-3"), SPW_OK);
    assert_string_equal(p, "/r/checkpoints/12/shard-3/CHECKSUM");
    char small[16];
    assert_int_equal(spw_ckpt_shard_path(small, sizeof(small), "/r", 12, 3), SPW_ERR_INVALID);
}

static void test_ckpt_layout_epoch_parse(void **state)
{
    (void)state;
    uint64_t e = 0;
    assert_true(spw_ckpt_epoch_parse("1", &e) && e == 1);
    assert_true(spw_ckpt_epoch_parse("9223372036854775807", &e) && e == INT64_MAX);
    const char *bad[] = {"",
                         "0",
                         "007",
                         "12a",
                         "-1",
                         "+1",
                         " 1",
                         "9223372036854775808",
                         "99999999999999999999",
                         "LATEST",
                         ".shard-1.tmp"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(spw_ckpt_epoch_parse(bad[i], &e));
}

static void expect_split(const char *path, enum spw_ckpt_path_kind kind, const char *root,
                         uint64_t epoch)
{
    enum spw_ckpt_path_kind k;
    char r[SPW_CKPT_PATH_MAX];
    uint64_t e = 0;
    assert_int_equal(spw_ckpt_path_split(path, &k, r, sizeof(r), &e), SPW_OK);
    assert_int_equal(k, kind);
    assert_string_equal(r, root);
    if (kind == SPW_CKPT_PATH_EPOCH)
        assert_int_equal(e, epoch);
}

static void test_ckpt_layout_path_split(void **state)
{
    (void)state;
    expect_split("/a/b/checkpoints/7", SPW_CKPT_PATH_EPOCH, "/a/b", 7);
    expect_split("/a/b/checkpoints/7//", SPW_CKPT_PATH_EPOCH, "/a/b", 7);
    expect_split("checkpoints/7", SPW_CKPT_PATH_EPOCH, ".", 7);
    expect_split("/checkpoints/7", SPW_CKPT_PATH_EPOCH, "/", 7);
    expect_split("/a/checkpoints", SPW_CKPT_PATH_DIR, "/a", 0);
    expect_split("/a/checkpoints/", SPW_CKPT_PATH_DIR, "/a", 0);
    expect_split("checkpoints", SPW_CKPT_PATH_DIR, ".", 0);
    expect_split("/checkpoints", SPW_CKPT_PATH_DIR, "/", 0);
    expect_split("/a/other/7", SPW_CKPT_PATH_OTHER, "/a/other/7", 0);
    expect_split("/a/checkpoints/007", SPW_CKPT_PATH_OTHER, "/a/checkpoints/007", 0);
    expect_split("/a/run/", SPW_CKPT_PATH_OTHER, "/a/run", 0);
}

static void test_ckpt_layout_list_and_remove(void **state)
{
    (void)state;
    char root[64] = "/tmp/spw-test-ckpt-layout-XXXXXX";
    assert_non_null(mkdtemp(root));
    uint64_t epochs[8];
    assert_int_equal(spw_ckpt_epochs_list(root, epochs, 8), 0); /* no checkpoints/ */
    char p[SPW_CKPT_PATH_MAX];
    const uint64_t made[] = {3, 10, 2};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(spw_ckpt_shard_path(p, sizeof(p), root, made[i], 0), SPW_OK);
        assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    }
    /* not epochs: ignored */
    snprintf(p, sizeof(p), "%s/checkpoints/007", root);
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    snprintf(p, sizeof(p), "%s/checkpoints/junk", root);
    assert_int_equal(spw_fs_mkdir_p(p), SPW_OK);
    assert_int_equal(spw_ckpt_epochs_list(root, epochs, 8), 3);
    assert_int_equal(epochs[0], 10);
    assert_int_equal(epochs[1], 3);
    assert_int_equal(epochs[2], 2);
    assert_int_equal(spw_ckpt_epochs_list(root, epochs, 1), 3); /* the count, one written */
    assert_int_equal(epochs[0], 10);
    assert_int_equal(spw_ckpt_epochs_list(root, NULL, 0), 3);
    assert_false(spw_ckpt_epoch_has_manifest(root, 3));
    assert_int_equal(spw_ckpt_manifest_path(p, sizeof(p), root, 3), SPW_OK);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    assert_true(spw_ckpt_epoch_has_manifest(root, 3));
    assert_int_equal(spw_ckpt_epoch_remove(root, 3), SPW_OK);
    assert_int_equal(spw_ckpt_epoch_remove(root, 3), SPW_ERR_NOT_FOUND);
    assert_int_equal(spw_ckpt_epochs_list(root, epochs, 8), 2);
    assert_int_equal(epochs[1], 2);
    assert_int_equal(spw_fs_remove_tree(root), SPW_OK);
}

SPW_TEST_MAIN(test_ckpt_layout_paths, test_ckpt_layout_epoch_parse, test_ckpt_layout_path_split,
              test_ckpt_layout_list_and_remove)
