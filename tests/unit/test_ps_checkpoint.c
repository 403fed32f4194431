/* Unit tests of shard checkpoints: snapshot, restore bit-identical, corrupt/incomplete skipped,
 * existing epoch refused, failure leaves earlier checkpoints intact, the admission sketch kept
 * (and a corrupt or older one handled). */
#include "test_main.h" /* cmocka and what it needs first */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "ps_int.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/fs.h"
#include "test_dir.h"

enum { DIM = 4, NKEYS = 3000, ROWF = DIM * 3 + 1 };

static void corrupt_one_file(const char *dir);

static struct spw_ps_store_conf conf_at(const char *path)
{
    struct spw_ps_store_conf c = {0};
    c.shard = 2;
    c.dim = DIM;
    spw_ps_optim_conf_default(&c.optim);
    c.optim.kind = SPW_PS_ADAM;
    c.penalty.kind = SPW_PS_PENALTY_INVERSE;
    c.seed = 3;
    c.memory_bytes = 64 * 1024; /* part of the model in RocksDB, part dirty in DRAM */
    c.db_path = path;
    return c;
}

static spw_ps_store_t *open_at(const char *path)
{
    char err[256] = "";
    struct spw_ps_store_conf c = conf_at(path);
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
        if (r % 2)
            ver[0] -= 1; /* some staleness */
        assert_int_equal(spw_ps_store_push(s, keys, B, grads, ver, NULL, NULL), SPW_OK);
    }
}

/* Every row of a and b equal (bit for bit, with versions and optimizer slots). */
static void assert_same_rows(spw_ps_store_t *a, spw_ps_store_t *b)
{
    size_t sz = sizeof(struct spw_ps_row_copy) + ROWF * sizeof(float);
    struct spw_ps_row_copy *ra = malloc(sz), *rb = malloc(sz);
    for (uint64_t k = 0; k < NKEYS; k++) {
        spw_err_t ea = spw_ps_store_get_row(a, k, ra);
        assert_int_equal(ea, spw_ps_store_get_row(b, k, rb));
        if (ea == SPW_OK) {
            assert_int_equal(ra->version, rb->version);
            assert_int_equal(ra->count, rb->count);
            assert_memory_equal(ra->data, rb->data, ROWF * sizeof(float));
        }
    }
    free(ra);
    free(rb);
}

static void test_ps_checkpoint_restore_bit_identical(void **state)
{
    (void)state;
    char live[128], ref[128], restored[128];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(ref, sizeof(ref), "%s/ref", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    spw_ps_store_t *s = open_at(live);
    train(s, 1, 40);
    struct spw_ps_checkpoint_info info;
    char err[512] = "";
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, &info, err, sizeof(err)), SPW_OK);
    assert_int_equal(strlen(info.checksum), 16);
    assert_non_null(strstr(info.path, "/checkpoints/1/shard-2"));
    assert_true(info.bytes > 0);
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_OK);
    /* The same epoch twice is refused. */
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, NULL, err, sizeof(err)),
                     SPW_ERR_EXISTS);

    /* Restore into a fresh directory; the restored shard and the live one continue identically. */
    uint64_t epoch = 0;
    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, restored, &epoch, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(epoch, 1);
    spw_ps_store_t *r = open_at(restored);
    assert_same_rows(s, r);
    train(s, 99, 20);
    train(r, 99, 20);
    assert_same_rows(s, r);
    spw_ps_store_close(r);
    spw_ps_store_close(s);
    (void)ref;
}

/* Many dirty rows (SST flushes), checkpoints that share SST files (digests reused), an
 * overwriting flush (RocksDB stamps a sequence number into the ingested file): every CHECKSUM
 * verifies, and the restored shard equals the live one bit for bit. */
static void test_ps_checkpoint_large_flush_restore(void **state)
{
    (void)state;
    enum { N = 40000, BATCH = 1000 };
    char live[128], restored[128];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    struct spw_ps_store_conf c = conf_at(live);
    c.memory_bytes = 32u << 20; /* all rows in DRAM, dirty at each checkpoint */
    char err[512] = "";
    spw_ps_store_t *s = spw_ps_store_open(&c, err, sizeof(err));
    assert_non_null(s);
    static uint64_t keys[BATCH];
    static float grads[BATCH * DIM];
    struct spw_ps_checkpoint_info info;
    for (int epoch = 1; epoch <= 3; epoch++) {
        for (uint64_t base = 0; base < N; base += BATCH) {
            if (epoch == 3 && (base / BATCH) % 3 != 0)
                continue; /* the third checkpoint rewrites a third of the rows */
            for (int i = 0; i < BATCH; i++) {
                keys[i] = (base + (uint64_t)i) * 0x9e3779b97f4a7c15ull;
                for (int j = 0; j < DIM; j++)
                    grads[i * DIM + j] = (float)((i + j + epoch) % 11 - 5) / 16.0f;
            }
            assert_int_equal(spw_ps_store_push(s, keys, BATCH, grads, NULL, NULL, NULL), SPW_OK);
        }
        assert_int_equal(
            spw_ps_store_checkpoint(s, test_dir, (uint64_t)epoch, &info, err, sizeof(err)), SPW_OK);
        assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_OK);
    }
    uint64_t epoch = 0;
    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, restored, &epoch, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(epoch, 3);
    struct spw_ps_store_conf rc = conf_at(restored);
    rc.memory_bytes = c.memory_bytes;
    spw_ps_store_t *r = spw_ps_store_open(&rc, err, sizeof(err));
    assert_non_null(r);
    size_t sz = sizeof(struct spw_ps_row_copy) + ROWF * sizeof(float);
    struct spw_ps_row_copy *ra = malloc(sz), *rb = malloc(sz);
    for (uint64_t k = 0; k < N; k++) {
        uint64_t key = k * 0x9e3779b97f4a7c15ull;
        assert_int_equal(spw_ps_store_get_row(s, key, ra), SPW_OK);
        assert_int_equal(spw_ps_store_get_row(r, key, rb), SPW_OK);
        assert_int_equal(ra->version, rb->version);
        assert_int_equal(ra->count, rb->count);
        assert_memory_equal(ra->data, rb->data, ROWF * sizeof(float));
    }
    free(ra);
    free(rb);
    spw_ps_store_close(r);
    spw_ps_store_close(s);
}

/* Checkpoints written before per-file digests (CHECKSUM format 1: one XXH3 stream over each
 * file's name, NUL, size and bytes) still verify, and still fail when a byte changes. */
static void test_ps_checkpoint_format1_checksum_verifies(void **state)
{
    (void)state;
    char live[128];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    spw_ps_store_t *s = open_at(live);
    train(s, 21, 10);
    struct spw_ps_checkpoint_info info;
    char err[512] = "";
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, &info, err, sizeof(err)), SPW_OK);
    spw_ps_store_close(s);
    /* Rewrite CHECKSUM in format 1. */
    DIR *d = opendir(info.path);
    assert_non_null(d);
    char *names[64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && strcmp(de->d_name, "CHECKSUM") != 0 && n < 64)
            names[n++] = strdup(de->d_name);
    closedir(d);
    for (int i = 0; i < n; i++) /* byte order of name */
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    static char buf[1 << 20];
    for (int i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", info.path, names[i]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        uint64_t size = (uint64_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t le[8];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(size >> (8 * b));
        XXH3_64bits_update(st, names[i], strlen(names[i]) + 1);
        XXH3_64bits_update(st, le, 8);
        size_t r;
        while ((r = fread(buf, 1, sizeof(buf), f)) > 0)
            XXH3_64bits_update(st, buf, r);
        fclose(f);
        free(names[i]);
    }
    uint64_t digest = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    char path[8192], hex[17], got[17];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)digest);
    snprintf(path, sizeof(path), "%s/CHECKSUM", info.path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "xxh3-64 %s\n", hex);
    fclose(f);
    assert_int_equal(spw_ps_checkpoint_verify(info.path, got), SPW_OK);
    assert_string_equal(got, hex);
    corrupt_one_file(info.path);
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_ERR_CORRUPT);
}

static void corrupt_one_file(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    char path[8192] = "";
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 4 && strcmp(de->d_name + len - 4, ".sst") == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            break;
        }
    }
    closedir(d);
    assert_true(path[0] != '\0');
    /* Checkpoint SSTs are hard links to the live database's: write a copy, not in place. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(n > 100);
    buf[n / 2] ^= 0x5a;
    unlink(path);
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

static void test_ps_checkpoint_corrupt_and_incomplete_skipped(void **state)
{
    (void)state;
    char live[128], restored[128], path[8192];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    spw_ps_store_t *s = open_at(live);
    train(s, 5, 20);
    char err[512] = "";
    struct spw_ps_checkpoint_info info;
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 3, &info, err, sizeof(err)), SPW_OK);
    /* Reference copy of epoch 3's rows. */
    char ref[128];
    snprintf(ref, sizeof(ref), "%s/ref", test_dir);
    uint64_t epoch = 0;
    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, ref, &epoch, err, sizeof(err)), SPW_OK);
    assert_int_equal(epoch, 3);
    train(s, 6, 20);
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 4, &info, err, sizeof(err)), SPW_OK);
    corrupt_one_file(info.path);
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_ERR_CORRUPT);
    train(s, 7, 5);
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 5, &info, err, sizeof(err)), SPW_OK);
    snprintf(path, sizeof(path), "%s/CHECKSUM", info.path);
    assert_int_equal(unlink(path), 0); /* incomplete: no checksum */
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_ERR_NOT_FOUND);
    /* A stray temporary directory and a non-numeric entry are ignored. */
    snprintf(path, sizeof(path), "%s/checkpoints/9/.shard-2.tmp", test_dir);
    assert_int_equal(mkdir(path, 0755) == 0 || 1, 1);
    snprintf(path, sizeof(path), "%s/checkpoints/junk", test_dir);
    mkdir(path, 0755);

    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, restored, &epoch, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(epoch, 3);
    spw_ps_store_t *r = open_at(restored), *e3 = open_at(ref);
    assert_same_rows(r, e3);
    spw_ps_store_close(e3);
    spw_ps_store_close(r);
    spw_ps_store_close(s);
    /* A shard with no checkpoint at all. */
    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 7, restored, &epoch, err, sizeof(err)),
                     SPW_ERR_NOT_FOUND);
}

static void test_ps_checkpoint_failure_leaves_previous(void **state)
{
    (void)state;
    char live[128], bad_root[128], restored[128];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    spw_ps_store_t *s = open_at(live);
    train(s, 11, 10);
    char err[512] = "";
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, NULL, err, sizeof(err)), SPW_OK);
    /* A root whose checkpoints/ is a file cannot take a checkpoint. */
    snprintf(bad_root, sizeof(bad_root), "%s/badroot", test_dir);
    mkdir(bad_root, 0755);
    char f[256];
    snprintf(f, sizeof(f), "%s/checkpoints", bad_root);
    FILE *fp = fopen(f, "w");
    fclose(fp);
    assert_int_not_equal(spw_ps_store_checkpoint(s, bad_root, 2, NULL, err, sizeof(err)), SPW_OK);
    assert_true(err[0] != '\0');
    /* The store keeps serving and the previous checkpoint still restores. */
    train(s, 12, 2);
    uint64_t epoch = 0;
    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, restored, &epoch, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(epoch, 1);
    spw_ps_store_close(s);
}

/* ---- the admission sketch in a checkpoint ---- */

enum { ADMIT = 5 };

static spw_ps_store_t *open_admitting(const char *path)
{
    char err[256] = "";
    struct spw_ps_store_conf c = conf_at(path);
    c.admit_min_count = ADMIT;
    spw_ps_store_t *s = spw_ps_store_open(&c, err, sizeof(err));
    if (!s)
        fail_msg("open %s: %s", path, err);
    return s;
}

/* Pushes key once to s; true when the push was applied (the key has a row). */
static bool push_key(spw_ps_store_t *s, uint64_t key)
{
    float g[DIM] = {0.5f, 0.5f, 0.5f, 0.5f};
    uint32_t v = 0;
    struct spw_ps_push_result res;
    assert_int_equal(spw_ps_store_push(s, &key, 1, g, &v, NULL, &res), SPW_OK);
    return res.applied == 1;
}

/* Pushes of key until one is applied: how many it took (at most 2 * ADMIT). */
static int pushes_to_admit(spw_ps_store_t *s, uint64_t key)
{
    for (int n = 1; n <= 2 * ADMIT; n++)
        if (push_key(s, key))
            return n;
    return -1;
}

/* Restores the newest checkpoint of shard 2 under test_dir into path and opens it with its
 * sketch. */
static spw_ps_store_t *restore_admitting(const char *path, uint64_t want_epoch)
{
    char err[512] = "", dir[4096];
    uint64_t epoch = 0;
    assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, path, &epoch, err, sizeof(err)),
                     SPW_OK);
    assert_int_equal(epoch, want_epoch);
    spw_ps_store_t *s = open_admitting(path);
    assert_int_equal(spw_ckpt_shard_path(dir, sizeof(dir), test_dir, epoch, 2), SPW_OK);
    spw_ps__store_restore_sketch(s, dir);
    return s;
}

/* A key seen ADMIT - 2 times before a checkpoint is admitted by the restored shard on the same
 * push as by the shard that went on uninterrupted; the sketch is not copied into the live
 * database. Without the SKETCH file (a checkpoint of the older format) the restored shard counts
 * from zero. */
static void test_ps_checkpoint_keeps_admission_sketch(void **state)
{
    (void)state;
    char live[128], restored[128], path[8192], err[256];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    spw_ps_store_t *s = open_admitting(live);
    const uint64_t key = 77, other = 78;
    for (int i = 0; i < ADMIT - 2; i++)
        assert_false(push_key(s, key));
    for (int i = 0; i < ADMIT; i++) /* one admitted row, so that the database has rows */
        push_key(s, other);
    struct spw_ps_checkpoint_info info;
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, &info, err, sizeof(err)), SPW_OK);
    snprintf(path, sizeof(path), "%s/%s", info.path, SPW_CKPT_SKETCH);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < 4096); /* sparse: few cells are set */
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_OK);

    spw_ps_store_t *r = restore_admitting(restored, 1);
    snprintf(path, sizeof(path), "%s/%s", restored, SPW_CKPT_SKETCH);
    assert_int_not_equal(stat(path, &st), 0);
    int live_n = pushes_to_admit(s, key), restored_n = pushes_to_admit(r, key);
    assert_int_equal(live_n, 2);
    assert_int_equal(restored_n, live_n);
    spw_ps_store_close(r);
    spw_fs_remove_tree(restored);

    /* the older format: no SKETCH (and a CHECKSUM over what is left) */
    snprintf(path, sizeof(path), "%s/%s", info.path, SPW_CKPT_SKETCH);
    assert_int_equal(unlink(path), 0);
    char hex[17];
    assert_int_equal(spw_ps__checksum_dir(info.path, NULL, hex, NULL), SPW_OK);
    assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_OK);
    r = restore_admitting(restored, 1);
    assert_int_equal(pushes_to_admit(r, key), ADMIT);
    spw_ps_store_close(r);
    spw_ps_store_close(s);
}

/* Rewrites bytes [off, off + len) of file with data, or truncates it to off when data is NULL. */
static void patch_file(const char *file, long off, const void *data, size_t len)
{
    if (!data) {
        assert_int_equal(truncate(file, off), 0);
        return;
    }
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* A SKETCH that is damaged is refused: by the CHECKSUM, and, when the CHECKSUM was written over
 * it, by its own framing, with an error that names the file and the fault; the restore then
 * falls back to the older epoch. A sketch of another shape is not loaded (sketch untouched). */
static void test_ps_checkpoint_corrupt_sketch_refused(void **state)
{
    (void)state;
    char live[128], restored[128], path[8192], err[512], hex[17];
    snprintf(live, sizeof(live), "%s/live", test_dir);
    snprintf(restored, sizeof(restored), "%s/restored", test_dir);
    spw_ps_store_t *s = open_admitting(live);
    for (uint64_t k = 1; k <= 2000; k++) /* dense enough to be written dense */
        push_key(s, k);
    struct spw_ps_checkpoint_info info;
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 1, &info, err, sizeof(err)), SPW_OK);
    assert_int_equal(spw_ps_store_checkpoint(s, test_dir, 2, &info, err, sizeof(err)), SPW_OK);
    snprintf(path, sizeof(path), "%s/%s", info.path, SPW_CKPT_SKETCH);
    struct spw_ps_sketch *live_sk = spw_ps__store_sketch(s);
    assert_non_null(live_sk);

    struct {
        long off;
        const char *data;
        size_t len;
        const char *why;
    } cases[] = {
        {40, "\x7f", 1, "checksum mismatch"},
        {0, "SPWXXXX1", 8, "magic"},
        {8, "\x00\x00\x00\x40", 4, "out of range"},          /* width 2^30 */
        {12, "\xff\xff\xff\x00", 4, "out of range"},         /* depth 2^24 - 1 */
        {24, "\xff\xff\xff\xff\xff\xff\xff\x0f", 8, "size"}, /* a huge count */
        {100, NULL, 0, "size"},                              /* truncated */
    };
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    char *orig = malloc((size_t)st.st_size);
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(orig, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    fclose(f);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        patch_file(path, cases[i].off, cases[i].data, cases[i].len);
        /* the CHECKSUM catches it first */
        assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_ERR_CORRUPT);
        /* written over it, the file's own checks do */
        assert_int_equal(spw_ps__checksum_dir(info.path, NULL, hex, NULL), SPW_OK);
        assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_ERR_CORRUPT);
        err[0] = '\0';
        assert_int_equal(spw_ps__state_check(info.path, err, sizeof(err)), SPW_ERR_CORRUPT);
        assert_non_null(strstr(err, SPW_CKPT_SKETCH));
        if (!strstr(err, cases[i].why))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].why);
        /* a loader refuses it too and leaves the sketch empty */
        spw_ps_store_t *r = open_admitting(restored);
        struct spw_ps_sketch *sk = spw_ps__store_sketch(r);
        assert_int_equal(spw_ps__sketch_load(info.path, sk, err, sizeof(err)), SPW_ERR_CORRUPT);
        for (size_t c = 0; c < (size_t)sk->width * sk->depth; c++)
            assert_int_equal(sk->cells[c], 0);
        spw_ps_store_close(r);
        spw_fs_remove_tree(restored);
        /* the restore skips epoch 2 for epoch 1 */
        uint64_t epoch = 0;
        assert_int_equal(spw_ps_checkpoint_restore(test_dir, 2, restored, &epoch, err, sizeof(err)),
                         SPW_OK);
        assert_int_equal(epoch, 1);
        spw_fs_remove_tree(restored);
        /* back to the good file */
        f = fopen(path, "wb");
        assert_int_equal(fwrite(orig, 1, (size_t)st.st_size, f), (size_t)st.st_size);
        fclose(f);
        assert_int_equal(spw_ps__checksum_dir(info.path, NULL, hex, NULL), SPW_OK);
        assert_int_equal(spw_ps_checkpoint_verify(info.path, NULL), SPW_OK);
    }
    free(orig);

    /* the good file loads into a sketch of its shape and equals the live one */
    spw_ps_store_t *r = open_admitting(restored);
    struct spw_ps_sketch *sk = spw_ps__store_sketch(r);
    assert_int_equal(spw_ps__sketch_load(info.path, sk, err, sizeof(err)), SPW_OK);
    assert_memory_equal(sk->cells, live_sk->cells,
                        (size_t)sk->width * sk->depth * sizeof(uint16_t));
    /* another shape (a shard with another DRAM budget) is not loaded */
    struct spw_ps_sketch other;
    assert_int_equal(spw_ps__sketch_init(&other, sk->width * 2, sk->depth), SPW_OK);
    assert_int_equal(spw_ps__sketch_load(info.path, &other, err, sizeof(err)), SPW_ERR_INVALID);
    assert_non_null(strstr(err, "memory"));
    for (size_t c = 0; c < (size_t)other.width * other.depth; c++)
        assert_int_equal(other.cells[c], 0);
    spw_ps__sketch_fini(&other);
    spw_ps_store_close(r);
    spw_ps_store_close(s);
}

SPW_TEST_MAIN_EACH(test_dir_setup, test_dir_teardown, test_ps_checkpoint_restore_bit_identical,
                   test_ps_checkpoint_corrupt_and_incomplete_skipped,
                   test_ps_checkpoint_failure_leaves_previous,
                   test_ps_checkpoint_large_flush_restore,
                   test_ps_checkpoint_format1_checksum_verifies,
                   test_ps_checkpoint_keeps_admission_sketch,
                   test_ps_checkpoint_corrupt_sketch_refused)
