/* Unit tests of the serving bootstrap: a real shard checkpoint read back row for row, read-only,
 * with the manifest's update offsets; missing and corrupt checkpoints. */
#include "test_main.h" /* cmocka and what it needs first */

#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sparrow/fs.h"
#include "sparrow/coordinator.h"
#include "sparrow/hash.h"
#include "sparrow/pserver.h"
#include "sparrow/serve.h"

#define DIM    5u
#define SHARDS 2u
#define NKEYS  300u

static char g_root[256], g_logs[300];

/* A digest of every file's path, size and mtime under a tree. */
static uint64_t g_sig;
static int sig_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag;
    (void)ftw;
    g_sig = spw_hash_mix64(g_sig ^ spw_hash_key(1, path, strlen(path)) ^ (uint64_t)st->st_size ^
                           ((uint64_t)st->st_mtim.tv_nsec << 20) ^ (uint64_t)st->st_mtim.tv_sec);
    return 0;
}
static uint64_t tree_sig(const char *dir)
{
    g_sig = 0;
    nftw(dir, sig_one, 16, FTW_PHYS);
    return g_sig;
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_root, sizeof(g_root), "/tmp/spw_serve_boot_XXXXXX");
    if (!mkdtemp(g_root))
        return -1;
    snprintf(g_logs, sizeof(g_logs), "%s/logs", g_root);
    mkdir(g_logs, 0755);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    spw_fs_remove_tree(g_root);
    return 0;
}

/* Trains SHARDS stores, checkpoints them as epoch 4 with a manifest and LATEST; returns the
 * stores still open (for comparison). */
static void make_checkpoint(spw_ps_store_t **stores, char checksums[][17], uint64_t *rows)
{
    for (uint32_t s = 0; s < SHARDS; s++) {
        char db[400], err[256] = "";
        snprintf(db, sizeof(db), "%s/db-%u", g_root, s);
        struct spw_ps_store_conf c = {0};
        c.shard = s;
        c.dim = DIM;
        spw_ps_optim_conf_default(&c.optim);
        c.seed = 9;
        c.memory_bytes = 32 * 1024; /* some rows only in RocksDB */
        c.db_path = db;
        stores[s] = spw_ps_store_open(&c, err, sizeof(err));
        if (!stores[s])
            fail_msg("open: %s", err);
    }
    float g[DIM];
    for (uint64_t k = 0; k < NKEYS; k++) {
        uint64_t key = k == 0 ? 0 : spw_hash_mix64(k);
        for (uint32_t j = 0; j < DIM; j++)
            g[j] = (float)((int)(k % 7) - 3) * 0.1f + (float)j * 0.01f;
        struct spw_ps_push_result res;
        assert_int_equal(
            spw_ps_store_push(stores[spw_hash_shard(key, SHARDS)], &key, 1, g, NULL, NULL, &res),
            SPW_OK);
    }
    for (uint32_t s = 0; s < SHARDS; s++) {
        struct spw_ps_checkpoint_info info;
        char err[256] = "";
        assert_int_equal(spw_ps_store_checkpoint(stores[s], g_root, 4, &info, err, sizeof(err)),
                         SPW_OK);
        memcpy(checksums[s], info.checksum, 17);
        rows[s] = info.rows;
    }
    struct spw_coord_offset uo[3] = {
        {.topic = "model-updates", .partition = 0, .offset = 17},
        {.topic = "other", .partition = 1, .offset = 99},
        {.topic = "model-updates", .partition = 2, .offset = 5},
    };
    struct spw_coord_manifest m = {.epoch = 4,
                                   .shard_count = SHARDS,
                                   .checksums = checksums,
                                   .rows = rows,
                                   .update_offsets = uo,
                                   .n_update_offsets = 3};
    char err[256] = "";
    assert_int_equal(spw_coord_manifest_write(g_root, &m, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_coord_latest_write(g_root, 4, err, sizeof(err)), SPW_OK);
}

static void test_serve_bootstrap_loads_checkpoint_read_only(void **state)
{
    (void)state;
    spw_ps_store_t *stores[SHARDS];
    char checksums[SHARDS][17];
    uint64_t rows[SHARDS];
    make_checkpoint(stores, checksums, rows);
    char ckdir[400];
    snprintf(ckdir, sizeof(ckdir), "%s/checkpoints", g_root);
    uint64_t before = tree_sig(ckdir);

    spw_serve_table_t *table = NULL;
    struct spw_serve_bootstrap boot;
    char err[256] = "";
    assert_int_equal(spw_serve_bootstrap_load(g_root, g_logs, "model-updates", 1000000, &table,
                                              &boot, err, sizeof(err)),
                     SPW_OK);
    assert_non_null(table);
    assert_int_equal(boot.epoch, 4);
    assert_int_equal(boot.dim, DIM);
    assert_int_equal(boot.rows, rows[0] + rows[1]);
    assert_int_equal(spw_serve_table_rows(table), NKEYS);
    assert_int_equal(boot.n_offsets, 2);
    assert_int_equal(boot.offsets[0].partition, 0);
    assert_int_equal(boot.offsets[0].offset, 17);
    assert_int_equal(boot.offsets[1].partition, 2);
    assert_int_equal(boot.offsets[1].offset, 5);
    /* Every row equals the shard's own weights, bit for bit. */
    for (uint64_t k = 0; k < NKEYS; k++) {
        uint64_t key = k == 0 ? 0 : spw_hash_mix64(k);
        float want[DIM], got[DIM];
        uint32_t wv, gv;
        assert_int_equal(spw_ps_store_pull(stores[spw_hash_shard(key, SHARDS)], &key, 1, want, &wv),
                         SPW_OK);
        assert_int_equal(spw_serve_table_get(table, key, got, &gv), SPW_OK);
        assert_memory_equal(want, got, sizeof(want));
        assert_int_equal(wv, gv);
    }
    /* Nothing in the checkpoint tree was created, removed or touched. */
    assert_true(tree_sig(ckdir) == before);
    spw_serve_table_destroy(table);
    spw_serve_bootstrap_fini(&boot);

    /* A shard checkpoint that does not verify fails the bootstrap, leaving no table. */
    char path[500];
    snprintf(path, sizeof(path), "%s/checkpoints/4/shard-1/CHECKSUM", g_root);
    FILE *f = fopen(path, "r+");
    assert_non_null(f);
    char line[64] = {0};
    assert_non_null(fgets(line, sizeof(line), f));
    char *hex = strchr(line, '\n') - 16;
    hex[0] = hex[0] == '0' ? '1' : '0';
    rewind(f);
    fputs(line, f);
    fclose(f);
    assert_int_not_equal(spw_serve_bootstrap_load(g_root, g_logs, "model-updates", 1000000, &table,
                                                  &boot, err, sizeof(err)),
                         SPW_OK);
    assert_null(table);
    assert_non_null(strstr(err, "shard-1"));
    for (uint32_t s = 0; s < SHARDS; s++)
        spw_ps_store_close(stores[s]);
}

static void test_serve_bootstrap_without_checkpoint(void **state)
{
    (void)state;
    char empty[400], err[256] = "";
    snprintf(empty, sizeof(empty), "%s/none", g_root);
    mkdir(empty, 0755);
    spw_serve_table_t *table = (spw_serve_table_t *)1;
    struct spw_serve_bootstrap boot;
    assert_int_equal(spw_serve_bootstrap_load(empty, g_logs, "model-updates", 10, &table, &boot,
                                              err, sizeof(err)),
                     SPW_OK);
    assert_null(table);
    assert_int_equal(boot.epoch, 0);
    assert_int_equal(boot.n_offsets, 0);
    spw_serve_bootstrap_fini(&boot);
}

SPW_TEST_MAIN_GROUP(setup, teardown, test_serve_bootstrap_loads_checkpoint_read_only,
                    test_serve_bootstrap_without_checkpoint)
