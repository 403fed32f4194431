/* Tests of the coordinator's checkpoint files: MANIFEST round trip and corruption, LATEST,
 * pruning, and the recovery epoch falling back for all shards together. */
#include "test_main.h" /* cmocka and what it needs first */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparrow/coordinator.h"

static char root[256];

static void mk_root(void)
{
    snprintf(root, sizeof(root), "/tmp/test_coord_files.XXXXXX");
    assert_non_null(mkdtemp(root));
    char d[512];
    snprintf(d, sizeof(d), "%s/checkpoints", root);
    assert_int_equal(mkdir(d, 0755), 0);
}

static void rm_root(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* A shard checkpoint directory with a CHECKSUM naming hex. */
static void mk_shard(uint64_t e, int shard, const char *hex)
{
    char d[512], f[600];
    snprintf(d, sizeof(d), "%s/checkpoints/%" PRIu64, root, e);
    mkdir(d, 0755);
    snprintf(d, sizeof(d), "%s/checkpoints/%" PRIu64 "/shard-%d", root, e, shard);
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(f, sizeof(f), "%s/CHECKSUM", d);
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    fprintf(fp, "xxh3-64-files %s\n", hex);
    fclose(fp);
}

static void mk_epoch(uint64_t e, uint64_t examples)
{
    struct spw_coord_manifest m = {0};
    char cs[2][17] = {"00000000000000a1", "00000000000000b2"};
    uint64_t rows[2] = {10, 20};
    struct spw_coord_offset offs[2] = {{.topic = "examples", .offset = (int64_t)e * 100, .skip = 3},
                                       {.topic = "examples",
                                        .partition = 0,
                                        .offset = (int64_t)e * 1000 + 5,
                                        .mark = true,
                                        .source_partition = 2,
                                        .source_topic = "events"}};
    mk_shard(e, 0, cs[0]);
    mk_shard(e, 1, cs[1]);
    m.epoch = e;
    m.shard_count = 2;
    m.checksums = cs;
    m.rows = rows;
    m.offsets = offs;
    m.n_offsets = 2;
    m.example_count = examples;
    char err[256];
    assert_int_equal(spw_coord_manifest_write(root, &m, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_coord_latest_write(root, e, err, sizeof(err)), SPW_OK);
}

static void test_coord_files_manifest_roundtrip(void **state)
{
    (void)state;
    mk_root();
    mk_epoch(7, 1234);
    struct spw_coord_manifest m;
    char err[256];
    assert_int_equal(spw_coord_manifest_read(root, 7, &m, err, sizeof(err)), SPW_OK);
    assert_int_equal(m.epoch, 7);
    assert_int_equal(m.shard_count, 2);
    assert_int_equal(m.example_count, 1234);
    assert_string_equal(m.checksums[1], "00000000000000b2");
    assert_int_equal(m.rows[1], 20);
    assert_int_equal(m.n_offsets, 2);
    assert_string_equal(m.offsets[0].topic, "examples");
    assert_int_equal(m.offsets[0].offset, 700);
    assert_int_equal(m.offsets[0].skip, 3);
    assert_false(m.offsets[0].mark);
    /* the source high-water mark of (examples 0, events 2) comes back as a mark */
    assert_true(m.offsets[1].mark);
    assert_int_equal(m.offsets[1].partition, 0);
    assert_int_equal(m.offsets[1].offset, 7005);
    assert_int_equal(m.offsets[1].source_partition, 2);
    assert_string_equal(m.offsets[1].source_topic, "events");
    spw_coord_manifest_fini(&m);
    uint64_t latest = 0;
    assert_int_equal(spw_coord_latest_read(root, &latest), SPW_OK);
    assert_int_equal(latest, 7);
    /* no temporary file is left behind */
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s/checkpoints/7/MANIFEST.tmp", root);
    assert_int_not_equal(access(tmp, F_OK), 0);
    rm_root();
}

static void test_coord_files_manifest_corrupt(void **state)
{
    (void)state;
    mk_root();
    mk_epoch(3, 5);
    char path[600];
    snprintf(path, sizeof(path), "%s/checkpoints/3/MANIFEST", root);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 14, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, 14, SEEK_SET);
    fputc(c ^ 0x55, fp);
    fclose(fp);
    struct spw_coord_manifest m;
    char err[256];
    assert_int_equal(spw_coord_manifest_read(root, 3, &m, err, sizeof(err)), SPW_ERR_CORRUPT);
    assert_int_equal(spw_coord_manifest_read(root, 4, &m, err, sizeof(err)), SPW_ERR_NOT_FOUND);
    /* truncated */
    assert_int_equal(truncate(path, 10), 0);
    assert_int_equal(spw_coord_manifest_read(root, 3, &m, err, sizeof(err)), SPW_ERR_CORRUPT);
    rm_root();
}

static void test_coord_files_prune_keeps_newest(void **state)
{
    (void)state;
    mk_root();
    for (uint64_t e = 1; e <= 5; e++)
        mk_epoch(e, e);
    mk_shard(6, 0, "00000000000000a1"); /* an orphan newer than LATEST (aborted epoch) */
    mk_shard(2, 2, "00000000000000a1");
    assert_int_equal(spw_coord_prune(root, 5, 2, 0), 4); /* 1, 2, 3 and the orphan 6 */
    uint64_t epochs[8];
    assert_int_equal(spw_coord_epochs_list(root, epochs, 8), 2);
    assert_int_equal(epochs[0], 5);
    assert_int_equal(epochs[1], 4);
    rm_root();
}

static void test_coord_files_recovery_falls_back_for_all_shards(void **state)
{
    (void)state;
    mk_root();
    mk_epoch(1, 10);
    mk_epoch(2, 20);
    struct spw_coord_manifest m;
    assert_int_equal(spw_coord_recovery_epoch(root, 2, NULL, &m), 2);
    assert_int_equal(m.example_count, 20);
    spw_coord_manifest_fini(&m);
    /* shard 1 of epoch 2 is corrupt: epoch 1 for everyone */
    char path[600];
    snprintf(path, sizeof(path), "%s/checkpoints/2/shard-1/CHECKSUM", root);
    FILE *fp = fopen(path, "w");
    fprintf(fp, "xxh3-64-files 0000000000000bad\n");
    fclose(fp);
    assert_int_equal(spw_coord_recovery_epoch(root, 2, NULL, &m), 1);
    assert_int_equal(m.example_count, 10);
    assert_int_equal(m.offsets[0].offset, 100);
    spw_coord_manifest_fini(&m);
    /* a different shard count matches nothing */
    assert_int_equal(spw_coord_recovery_epoch(root, 3, NULL, &m), 0);
    rm_root();
}

static void test_coord_files_mode_parse(void **state)
{
    (void)state;
    struct spw_coord_mode m;
    assert_int_equal(spw_coord_mode_parse("ssp:4", &m), SPW_OK);
    assert_int_equal(m.kind, SPW_COORD_SSP);
    assert_int_equal(m.param, 4);
    assert_int_equal(spw_coord_mode_parse("hybrid:0", &m), SPW_ERR_INVALID);
    assert_int_equal(spw_coord_mode_parse("hybrid:x", &m), SPW_ERR_INVALID);
    assert_int_equal(spw_coord_mode_parse("ssp:", &m), SPW_ERR_INVALID);
    assert_int_equal(spw_coord_mode_parse("bsp", &m), SPW_ERR_INVALID);
    assert_true(spw_coord_mode_may_proceed(&m, 10, 6));
    assert_false(spw_coord_mode_may_proceed(&m, 11, 6));
    assert_int_equal(spw_coord_mode_parse("hybrid:5", &m), SPW_OK);
    assert_true(spw_coord_mode_may_proceed(&m, 9, 1));
    assert_false(spw_coord_mode_may_proceed(&m, 10, 9));
    assert_true(spw_coord_mode_may_proceed(&m, 10, 10));
    char buf[32];
    spw_coord_mode_format(&m, buf, sizeof(buf));
    assert_string_equal(buf, "hybrid:5");
}

SPW_TEST_MAIN(test_coord_files_manifest_roundtrip, test_coord_files_manifest_corrupt,
              test_coord_files_prune_keeps_newest,
              test_coord_files_recovery_falls_back_for_all_shards, test_coord_files_mode_parse)
