/* Unit tests of the shard checkpoint reader and writer (sparrow/ps_ckpt.h): a shard's checkpoint
 * read row by row equals its store bit for bit; rows written back form a checkpoint that a shard
 * restores and that reads back identically; corruption, a wrong manifest checksum, a missing or
 * incomplete checkpoint are refused; the decoders refuse malformed meta and rows. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_int.h"
#include "sparrow/fs.h"
#include "sparrow/ps_ckpt.h"
#include "test_dir.h"

enum { DIM = 4, NKEYS = 3000, ROWF = DIM * 3 + 1 /* Adam */ };

static spw_ps_store_t *open_at(const char *path)
{
    struct spw_ps_store_conf c = {0};
    c.shard = 0;
    c.dim = DIM;
    spw_ps_optim_conf_default(&c.optim);
    c.optim.kind = SPW_PS_ADAM;
    c.penalty.kind = SPW_PS_PENALTY_INVERSE;
    c.seed = 5;
    c.memory_bytes = 64 * 1024; /* part of the rows in RocksDB, part dirty in DRAM */
    c.db_path = path;
    char err[256] = "";
    spw_ps_store_t *s = spw_ps_store_open(&c, err, sizeof(err));
    if (!s)
        fail_msg("open %s: %s", path, err);
    return s;
}

static void train(spw_ps_store_t *s, uint64_t seed, int rounds)
{
    enum { B = 256 };
    uint64_t keys[B];
    float grads[B * DIM], vals[B * DIM];
    uint32_t ver[B];
    uint64_t rng = seed;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < B; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            keys[i] = (rng >> 33) % NKEYS;
            for (int j = 0; j < DIM; j++)
                grads[i * DIM + j] = (float)((int)((rng >> (8 * j)) & 0xff) - 128) / 64.0f;
        }
        assert_int_equal(spw_ps_store_pull(s, keys, B, vals, ver), SPW_OK);
        assert_int_equal(spw_ps_store_push(s, keys, B, grads, ver, NULL, NULL), SPW_OK);
    }
}

/* Every row the reader yields equals the store's (version, counters, weights, slots); the rows
 * come in strictly increasing key order and there are as many as the store holds. Returns the
 * row count. When w is set, every row is also added to it. */
static uint64_t read_all_and_compare(const char *dir, const char *want, spw_ps_store_t *s,
                                     spw_ps_ckpt_writer_t *w)
{
    char err[512] = "";
    spw_err_t rc = SPW_ERR_STATE;
    spw_ps_ckpt_reader_t *r = spw_ps_ckpt_reader_open(dir, want, NULL, &rc, err, sizeof(err));
    if (!r)
        fail_msg("reader %s: %s", dir, err);
    assert_int_equal(rc, SPW_OK);
    assert_int_equal(spw_ps_ckpt_reader_meta(r)->dim, DIM);
    assert_int_equal(spw_ps_ckpt_reader_meta(r)->optimizer, SPW_PS_ADAM);
    assert_int_equal(spw_ps_ckpt_row_floats(spw_ps_ckpt_reader_meta(r)), ROWF);
    size_t sz = sizeof(struct spw_ps_row_copy) + ROWF * sizeof(float);
    struct spw_ps_row_copy *rc_row = malloc(sz);
    struct spw_ps_ckpt_row row;
    uint64_t n = 0, prev = 0;
    while ((rc = spw_ps_ckpt_reader_next(r, &row, err, sizeof(err))) == SPW_OK) {
        assert_true(n == 0 || row.key > prev);
        prev = row.key;
        assert_int_equal(spw_ps_store_get_row(s, row.key, rc_row), SPW_OK);
        assert_int_equal(row.version, rc_row->version);
        assert_int_equal(row.last_update, rc_row->last_update);
        assert_int_equal(row.count, rc_row->count);
        assert_memory_equal(row.data, rc_row->data, ROWF * sizeof(float));
        if (w)
            assert_int_equal(spw_ps_ckpt_writer_add(w, &row, err, sizeof(err)), SPW_OK);
        n++;
    }
    assert_int_equal(rc, SPW_ERR_EOF);
    assert_int_equal(spw_ps_ckpt_reader_next(r, &row, err, sizeof(err)), SPW_ERR_EOF);
    spw_ps_ckpt_reader_close(r);
    uint64_t held = 0;
    for (uint64_t k = 0; k < NKEYS; k++)
        held += spw_ps_store_get_row(s, k, rc_row) == SPW_OK;
    assert_int_equal(n, held);
    free(rc_row);
    return n;
}

static void test_ps_ckpt_io_roundtrip(void **state)
{
    (void)state;
    char live[128], out[256], restored[128], root2[128], err[512] = "";
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    snprintf(root2, sizeof(root2), "%s/root2", test_dir);
    spw_ps_store_t *s = open_at(live);
    train(s, 1, 40);
    struct spw_ps_checkpoint_info info;
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, &info, err, sizeof(err)), SPW_OK);
    train(s, 2, 5); /* the live rows move on; the checkpoint must not */
    spw_ps_store_close(s);
    /* the checkpoint's own rows: restore it to compare against */
    assert_int_equal(spw_ps_checkpoint_restore_epoch(test_dir, 0, 1, restored, err, sizeof(err)),
                     SPW_OK);
    s = open_at(restored);

    /* Read and write back into another root as shard 0 of epoch 1. */
    snprintf(out, sizeof(out), "%s/checkpoints", root2);
    assert_int_equal(mkdir(root2, 0755), 0);
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(out, sizeof(out), "%s/checkpoints/1", root2);
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(out, sizeof(out), "%s/checkpoints/1/shard-0", root2);
    struct spw_ps_ckpt_meta meta = {.dim = DIM, .optimizer = SPW_PS_ADAM};
    spw_err_t rc = SPW_ERR_STATE;
    spw_ps_ckpt_writer_t *w = spw_ps_ckpt_writer_open(out, &meta, &rc, err, sizeof(err));
    if (!w)
        fail_msg("writer: %s", err);
    uint64_t n = read_all_and_compare(info.path, info.checksum, s, w);
    assert_true(n > 1000);
    struct spw_ps_checkpoint_info winfo;
    assert_int_equal(spw_ps_ckpt_writer_finish(w, &winfo, err, sizeof(err)), SPW_OK);
    spw_ps_ckpt_writer_close(w);
    assert_int_equal(winfo.rows, n);
    assert_string_equal(winfo.path, out);
    char hex[17];
    assert_int_equal(spw_ps_checkpoint_verify(out, hex), SPW_OK);
    assert_string_equal(hex, winfo.checksum);
    /* nothing of the staging is left beside it */
    char path[300];
    struct stat st;
    snprintf(path, sizeof(path), "%s.build", out);
    assert_int_not_equal(stat(path, &st), 0);
    snprintf(path, sizeof(path), "%s.part", out);
    assert_int_not_equal(stat(path, &st), 0);

    /* The written checkpoint reads back identically and a shard restores it bit for bit. */
    assert_int_equal(read_all_and_compare(out, winfo.checksum, s, NULL), n);
    char restored2[128];
    snprintf(restored2, sizeof(restored2), "%s/restored2", test_dir);
    assert_int_equal(spw_ps_checkpoint_restore_epoch(root2, 0, 1, restored2, err, sizeof(err)),
                     SPW_OK);
    spw_ps_store_t *s2 = open_at(restored2);
    size_t sz = sizeof(struct spw_ps_row_copy) + ROWF * sizeof(float);
    struct spw_ps_row_copy *a = malloc(sz), *b = malloc(sz);
    for (uint64_t k = 0; k < NKEYS; k++) {
        spw_err_t ea = spw_ps_store_get_row(s, k, a);
        assert_int_equal(ea, spw_ps_store_get_row(s2, k, b));
        if (ea == SPW_OK) {
            assert_int_equal(a->version, b->version);
            assert_int_equal(a->last_update, b->last_update);
            assert_int_equal(a->count, b->count);
            assert_memory_equal(a->data, b->data, ROWF * sizeof(float));
        }
    }
    /* and both continue identically (optimizer state restored) */
    train(s, 9, 10);
    train(s2, 9, 10);
    for (uint64_t k = 0; k < NKEYS; k++) {
        spw_err_t ea = spw_ps_store_get_row(s, k, a);
        assert_int_equal(ea, spw_ps_store_get_row(s2, k, b));
        if (ea == SPW_OK)
            assert_memory_equal(a->data, b->data, ROWF * sizeof(float));
    }
    free(a);
    free(b);
    spw_ps_store_close(s2);
    spw_ps_store_close(s);

    /* A writer refuses an existing directory and leaves it alone. */
    w = spw_ps_ckpt_writer_open(out, &meta, &rc, err, sizeof(err));
    assert_null(w);
    assert_int_equal(rc, SPW_ERR_EXISTS);
    assert_int_equal(spw_ps_checkpoint_verify(out, NULL), SPW_OK);
    /* A writer closed before finish leaves nothing. */
    snprintf(out, sizeof(out), "%s/checkpoints/1/shard-1", root2);
    w = spw_ps_ckpt_writer_open(out, &meta, &rc, err, sizeof(err));
    assert_non_null(w);
    float data[ROWF] = {1, 2, 3, 4};
    struct spw_ps_ckpt_row row = {.key = 7, .version = 1, .data = data};
    assert_int_equal(spw_ps_ckpt_writer_add(w, &row, err, sizeof(err)), SPW_OK);
    spw_ps_ckpt_writer_close(w);
    snprintf(path, sizeof(path), "%s/checkpoints/1", root2);
    DIR *d = opendir(path);
    assert_non_null(d);
    struct dirent *de;
    int entries = 0;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            entries++;
        else if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            entries += 100; /* a hidden leftover */
    closedir(d);
    assert_int_equal(entries, 1);
}

/* Overwrites one byte in the middle of the largest SST file of dir. */
static void corrupt_largest_sst(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    char best[512] = "";
    off_t best_size = 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".sst") != 0)
            continue;
        char p[512];
        if (snprintf(p, sizeof(p), "%s/%s", dir, de->d_name) >= (int)sizeof(p))
            continue;
        struct stat st;
        if (stat(p, &st) == 0 && st.st_size > best_size) {
            best_size = st.st_size;
            snprintf(best, sizeof(best), "%s", p);
        }
    }
    closedir(d);
    assert_true(best_size > 0);
    /* the SST may be hard-linked elsewhere: replace the file rather than write through it */
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.x", best);
    FILE *in = fopen(best, "rb"), *outf = fopen(tmp, "wb");
    assert_non_null(in);
    assert_non_null(outf);
    int c;
    off_t i = 0;
    while ((c = fgetc(in)) != EOF) {
        if (i++ == best_size / 2)
            c ^= 0x5a;
        fputc(c, outf);
    }
    fclose(in);
    assert_int_equal(fclose(outf), 0);
    assert_int_equal(rename(tmp, best), 0);
}

static void test_ps_ckpt_io_refuses_corrupt(void **state)
{
    (void)state;
    char live[128], err[512] = "", path[600];
    snprintf(live, sizeof(live), "%s/live2", test_dir);
    spw_ps_store_t *s = open_at(live);
    train(s, 3, 20);
    struct spw_ps_checkpoint_info info;
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 4, &info, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 5, NULL, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 6, NULL, err, sizeof(err)), SPW_OK);
    spw_ps_store_close(s);
    spw_err_t rc = SPW_OK;

    /* absent */
    snprintf(path, sizeof(path), "%s/checkpoints/99/shard-0", test_dir);
    assert_null(spw_ps_ckpt_reader_open(path, NULL, NULL, &rc, err, sizeof(err)));
    assert_int_equal(rc, SPW_ERR_NOT_FOUND);
    /* a checksum other than the manifest's */
    assert_null(
        spw_ps_ckpt_reader_open(info.path, "0123456789abcdef", NULL, &rc, err, sizeof(err)));
    assert_int_equal(rc, SPW_ERR_CORRUPT);
    assert_non_null(strstr(err, "manifest"));
    /* the right one opens */
    spw_ps_ckpt_reader_t *r =
        spw_ps_ckpt_reader_open(info.path, info.checksum, NULL, &rc, err, sizeof(err));
    assert_non_null(r);
    assert_string_equal(spw_ps_ckpt_reader_checksum(r), info.checksum);
    spw_ps_ckpt_reader_close(r);
    /* nothing was written into the checkpoint by reading it */
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_OK);
    /* a flipped byte in an SST file */
    corrupt_largest_sst(info.path);
    assert_null(spw_ps_ckpt_reader_open(info.path, NULL, NULL, &rc, err, sizeof(err)));
    assert_int_equal(rc, SPW_ERR_CORRUPT);
    assert_non_null(strstr(err, "does not verify"));
    /* no CHECKSUM file (an incomplete checkpoint) */
    snprintf(path, sizeof(path), "%s/checkpoints/5/shard-0/CHECKSUM", test_dir);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/checkpoints/5/shard-0", test_dir);
    assert_null(spw_ps_ckpt_reader_open(path, NULL, NULL, &rc, err, sizeof(err)));
    assert_int_equal(rc, SPW_ERR_CORRUPT);
    /* a file added after the checksum */
    snprintf(path, sizeof(path), "%s/checkpoints/6/shard-0/extra", test_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/checkpoints/6/shard-0", test_dir);
    assert_null(spw_ps_ckpt_reader_open(path, NULL, NULL, &rc, err, sizeof(err)));
    assert_int_equal(rc, SPW_ERR_CORRUPT);
}

static void test_ps_ckpt_io_decoders(void **state)
{
    (void)state;
    struct spw_ps_ckpt_meta m;
    const char *good = "sparrow-ps 2 dim=16 optimizer=adagrad";
    assert_int_equal(spw_ps_ckpt_meta_parse(good, strlen(good), &m), SPW_OK);
    assert_int_equal(m.dim, 16);
    assert_int_equal(m.optimizer, SPW_PS_ADAGRAD);
    const char *older = "sparrow-ps 1 dim=16 optimizer=adagrad";
    assert_int_equal(spw_ps_ckpt_meta_parse(older, strlen(older), &m), SPW_ERR_VERSION);
    const char *bad[] = {
        "",
        "sparrow-ps 2 dim=0 optimizer=sgd",
        "sparrow-ps 2 dim=1025 optimizer=sgd",
        "sparrow-ps 2 dim=016 optimizer=sgd",
        "sparrow-ps 2 dim=16 optimizer=rmsprop",
        "sparrow-ps 2 dim=16 optimizer=sgd ",
        "sparrow-ps 2 dim=16optimizer=sgd",
        "sparrow-ps 2 dim=99999999999 optimizer=sgd",
        "something else",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(spw_ps_ckpt_meta_parse(bad[i], strlen(bad[i]), &m), SPW_ERR_CORRUPT);
    char nul[] = "sparrow-ps 2 dim=4 optimizer=sgd\0x";
    assert_int_equal(spw_ps_ckpt_meta_parse(nul, sizeof(nul) - 1, &m), SPW_ERR_CORRUPT);
    char longer[300];
    memset(longer, 'a', sizeof(longer));
    assert_int_equal(spw_ps_ckpt_meta_parse(longer, sizeof(longer), &m), SPW_ERR_CORRUPT);

    /* rows: the key is 8 bytes, the value exactly 12 + 4·(dim + slots) */
    struct spw_ps_ckpt_meta sgd = {.dim = 2, .optimizer = SPW_PS_SGD};
    uint8_t key[8] = {0, 0, 0, 0, 0, 0, 1, 2};
    uint8_t value[12 + 8];
    uint32_t u[3] = {7, 8, 9};
    float wts[2] = {0.5f, -1.25f};
    memcpy(value, u, 12);
    memcpy(value + 12, wts, 8);
    float data[2];
    struct spw_ps_ckpt_row row;
    assert_int_equal(spw_ps_ckpt_row_decode(&sgd, key, 8, value, sizeof(value), &row, data),
                     SPW_OK);
    assert_int_equal(row.key, 0x102);
    assert_int_equal(row.version, 7);
    assert_int_equal(row.last_update, 8);
    assert_int_equal(row.count, 9);
    assert_memory_equal(row.data, wts, sizeof(wts));
    assert_int_equal(spw_ps_ckpt_row_decode(&sgd, key, 7, value, sizeof(value), &row, data),
                     SPW_ERR_CORRUPT);
    assert_int_equal(spw_ps_ckpt_row_decode(&sgd, key, 8, value, sizeof(value) - 1, &row, data),
                     SPW_ERR_CORRUPT);
    assert_int_equal(spw_ps_ckpt_row_decode(&sgd, key, 8, value, 0, &row, data), SPW_ERR_CORRUPT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ps_ckpt_io_roundtrip, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_ps_ckpt_io_refuses_corrupt, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test(test_ps_ckpt_io_decoders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
