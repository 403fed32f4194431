/* Unit tests of feature hashing, field naming, Criteo bucketing and shard placement. */
#include "test_main.h" /* cmocka and what it needs first */

#include <stdio.h>
#include <string.h>

#include "sparrow/hash.h"

#define PRIME32 UINT32_C(2654435761)           /* XXH_PRIME32_1, xxHash's sanity-test seed */
#define PRIME64 UINT64_C(11400714785074694797) /* XXH_PRIME64_1 */

/* xxHash's sanity-test buffer (cli/xsum_sanity_check.c): byte i is the top byte of a running
 * product seeded with PRIME32 and multiplied by PRIME64. */
static void sanity_buffer(uint8_t *buf, size_t len)
{
    uint64_t gen = PRIME32;
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(gen >> 56);
        gen *= PRIME64;
    }
}

static void test_hash_key_xxh64_vectors(void **state)
{
    (void)state;
    /* xxHash's published XXH64 sanity vectors; the seed-0 ones also checked with `xxhsum -H1`. */
    static const struct {
        size_t len;
        uint32_t seed;
        uint64_t want;
    } vectors[] = {
        {0, 0, UINT64_C(0xEF46DB3751D8E999)},         {0, PRIME32, UINT64_C(0xAC75FDA2929B17EF)},
        {1, 0, UINT64_C(0xE934A84ADB052768)},         {1, PRIME32, UINT64_C(0x5014607643A9B4C3)},
        {4, 0, UINT64_C(0x9136A0DCA57457EE)},         {14, 0, UINT64_C(0x8282DCC4994E35C8)},
        {14, PRIME32, UINT64_C(0xC3BD6BF63DEB6DF0)},  {222, 0, UINT64_C(0xB641AE8CB691C174)},
        {222, PRIME32, UINT64_C(0x20CB8AB7AE10C14A)},
    };
    uint8_t buf[222];
    sanity_buffer(buf, sizeof(buf));
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        uint64_t got = spw_hash_key(vectors[i].seed, buf, vectors[i].len);
        if (got != vectors[i].want)
            fail_msg("len %zu seed %u: got %016llx, want %016llx", vectors[i].len,
                     (unsigned)vectors[i].seed, (unsigned long long)got,
                     (unsigned long long)vectors[i].want);
    }
    /* Strings, reference values from `printf %s STR | xxhsum -H1`. */
    assert_true(spw_hash_key(0, "a", 1) == UINT64_C(0xd24ec4f1a98c6e5b));
    assert_true(spw_hash_key(0, "abc", 3) == UINT64_C(0x44bc2cf5ad770999));
    assert_true(spw_hash_key(0, "hello world", 11) == UINT64_C(0x45ab6734b21e6968));
}

static void test_hash_key_field_is_seed(void **state)
{
    (void)state;
    /* The same raw value in two fields gives two keys. */
    assert_true(spw_hash_key(1, "u1", 2) != spw_hash_key(2, "u1", 2));
    assert_true(spw_hash_key(7, "u1", 2) == spw_hash_key(7, "u1", 2));
    assert_true(spw_hash_key(7, "u1", 2) != spw_hash_key(7, "u2", 2));
}

static void test_hash_field_name(void **state)
{
    (void)state;
    /* Decimal names up to SPW_FIELD_ID_MAX are their own id. */
    assert_int_equal(spw_hash_field_name("0", 1), 0);
    assert_int_equal(spw_hash_field_name("7", 1), 7);
    assert_int_equal(spw_hash_field_name("13", 2), 13);
    assert_int_equal(spw_hash_field_name("2147483647", 10), 2147483647u);
    assert_int_equal(spw_hash_field_name("123abc", 3), 123); /* only len bytes count */

    /* Everything else: low 31 bits of xxHash64(name, 0), references from xxhsum -H1. */
    static const struct {
        const char *name;
        uint32_t want;
    } hashed[] = {
        {"01", 0x352ef0f5u}, /* leading zero: not canonical decimal */
        {"007", 0x72bcf864u},         {"2147483648", 0x21aed925u}, /* SPW_FIELD_ID_MAX + 1 */
        {"99999999999", 0x7eaceaceu}, {"-1", 0x27a6e2d8u},
        {"user", 0x44cfc9eeu},        {"", 0x51d8e999u},
    };
    for (size_t i = 0; i < sizeof(hashed) / sizeof(hashed[0]); i++) {
        uint32_t got = spw_hash_field_name(hashed[i].name, strlen(hashed[i].name));
        if (got != hashed[i].want)
            fail_msg("'%s': got %08x, want %08x", hashed[i].name, got, hashed[i].want);
    }
    char name[32];
    for (int i = 0; i < 10000; i++) {
        int len = snprintf(name, sizeof(name), "field_%d", i);
        assert_true(spw_hash_field_name(name, (size_t)len) <= SPW_FIELD_ID_MAX);
    }
}

static void test_hash_criteo_bucket(void **state)
{
    (void)state;
    /* floor(ln(x)^2) for x > 2, computed by hand: ln 3 = 1.0986 -> 1.207; ln 10 = 2.3026 ->
     * 5.302; ln 100 = 4.6052 -> 21.208; ln 1000 = 6.9078 -> 47.717; ln(2^63-1) = 43.668 ->
     * 1906.9. */
    assert_int_equal(spw_hash_criteo_bucket(0), 0);
    assert_int_equal(spw_hash_criteo_bucket(1), 1);
    assert_int_equal(spw_hash_criteo_bucket(2), 2);
    assert_int_equal(spw_hash_criteo_bucket(3), 1);
    assert_int_equal(spw_hash_criteo_bucket(10), 5);
    assert_int_equal(spw_hash_criteo_bucket(100), 21);
    assert_int_equal(spw_hash_criteo_bucket(1000), 47);
    assert_int_equal(spw_hash_criteo_bucket(INT64_MAX), 1906);
    assert_int_equal(spw_hash_criteo_bucket(-1), -1);
    assert_int_equal(spw_hash_criteo_bucket(-100), -100);
    assert_true(spw_hash_criteo_bucket(INT64_MIN) == INT64_MIN);
}

static void test_hash_mix64(void **state)
{
    (void)state;
    /* SplitMix64 seeded with 0 outputs mix64(k * golden gamma) for k = 1, 2, 3: its well-known
     * first three values. */
    const uint64_t gamma = UINT64_C(0x9e3779b97f4a7c15);
    assert_true(spw_hash_mix64(gamma) == UINT64_C(0xe220a8397b1dcdaf));
    assert_true(spw_hash_mix64(gamma * 2) == UINT64_C(0x6e789e6aa1b965f4));
    assert_true(spw_hash_mix64(gamma * 3) == UINT64_C(0x06c45d188009454f));
    assert_true(spw_hash_mix64(0) == 0);
}

/* Lamping & Veach's JumpConsistentHash, transcribed from the paper for comparison. */
static int32_t paper_jump(uint64_t key, int32_t num_buckets)
{
    int64_t b = -1, j = 0;
    while (j < num_buckets) {
        b = j;
        key = key * 2862933555777941757ULL + 1;
        j = (int64_t)((double)(b + 1) * ((double)(1LL << 31) / (double)((key >> 33) + 1)));
    }
    return (int32_t)b;
}

static void test_hash_jump_vectors(void **state)
{
    (void)state;
    /* Published vectors of other jump-hash implementations (go-jump, python-jump-consistent-
     * hash, Jumper). */
    static const struct {
        uint64_t key;
        uint32_t buckets, want;
    } vectors[] = {
        {1, 1, 0},
        {42, 57, 43},
        {0xDEAD10CC, 1, 0},
        {0xDEAD10CC, 666, 361},
        {256, 1024, 520},
        {0, 1, 0},
        {4, 2, 1},
        {7, 2, 0},
        {1, 128, 55},
        {129, 128, 120},
        {128, 100000000, 38172097},
        {UINT64_MAX, 128, 92},
    };
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        uint32_t got = spw_hash_jump(vectors[i].key, vectors[i].buckets);
        if (got != vectors[i].want)
            fail_msg("jump(%llu, %u) = %u, want %u", (unsigned long long)vectors[i].key,
                     vectors[i].buckets, got, vectors[i].want);
    }
    for (uint64_t k = 0; k < 2000; k++) {
        uint64_t key = spw_hash_mix64(k + 1);
        int32_t n = (int32_t)(1 + k % 997);
        assert_int_equal(spw_hash_jump(key, (uint32_t)n), (uint32_t)paper_jump(key, n));
    }
}

static void test_hash_jump_consistency(void **state)
{
    (void)state;
    enum { KEYS = 100000 };
    static const uint32_t sizes[] = {1, 2, 3, 7, 10, 32};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint32_t n = sizes[s];
        unsigned moved = 0;
        for (uint64_t k = 0; k < KEYS; k++) {
            uint64_t key = spw_hash_mix64(k);
            uint32_t before = spw_hash_jump(key, n);
            uint32_t after = spw_hash_jump(key, n + 1);
            assert_true(before < n);
            assert_true(after < n + 1);
            if (after != before) {
                assert_int_equal(after, n); /* a key only ever moves to the new bucket */
                moved++;
            }
        }
        /* About 1/(n+1) of the keys move; the binomial sd is below 160 keys here. */
        double expect = (double)KEYS / (n + 1);
        if (moved < expect - 1000 || moved > expect + 1000)
            fail_msg("%u -> %u buckets moved %u keys, expected about %.0f", n, n + 1, moved,
                     expect);
    }
}

static void test_hash_shard_balance(void **state)
{
    (void)state;
    enum { KEYS = 100000, SHARDS = 8 };
    unsigned count[SHARDS] = {0};
    for (uint64_t key = 0; key < KEYS; key++) { /* sequential keys: mix64 must spread them */
        uint32_t s = spw_hash_shard(key, SHARDS);
        assert_true(s < SHARDS);
        count[s]++;
        assert_int_equal(spw_hash_shard(key, 1), 0);
    }
    for (int s = 0; s < SHARDS; s++) {
        /* 12500 expected, sd about 105: 5% is 6 sd. */
        if (count[s] < 11875 || count[s] > 13125)
            fail_msg("shard %d holds %u of %d keys", s, count[s], KEYS);
    }
    assert_int_equal(spw_hash_shard(12345, SHARDS), spw_hash_jump(spw_hash_mix64(12345), SHARDS));
    /* a deep model's dense blocks all live on shard 0 (one shard applies a step's whole update) */
    for (uint32_t b = 0; b < 1000; b++)
        assert_int_equal(spw_hash_shard(spw_dense_block_key(b), SHARDS), 0);
    assert_true(spw_key_is_dense(SPW_DENSE_KEY_BASE) && !spw_key_is_dense(SPW_DENSE_KEY_BASE - 1));
}

SPW_TEST_MAIN(test_hash_key_xxh64_vectors, test_hash_key_field_is_seed, test_hash_field_name,
              test_hash_criteo_bucket, test_hash_mix64, test_hash_jump_vectors,
              test_hash_jump_consistency, test_hash_shard_balance)
