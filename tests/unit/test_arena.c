/* Unit tests of the per-batch arena: alignment, growth, budget, reset, calloc and strndup. */
#include "test_main.h" /* cmocka and what it needs first */

#include <string.h>

#include "sparrow/arena.h"

static void test_arena_alignment(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    assert_non_null(arena);
    static const size_t sizes[] = {1, 3, 16, 17, 5, 31, 64, 1, 100, 7};
    unsigned char *prev = NULL;
    size_t prev_size = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *p = spw_arena_alloc(arena, sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        if (prev) /* no overlap with the previous block (same chunk: it comes after it) */
            assert_true(p >= prev + prev_size || p + sizes[i] <= prev);
        memset(p, 0x5a, sizes[i]);
        prev = p;
        prev_size = sizes[i];
    }
    assert_int_equal(spw_arena_used(arena), 16 + 16 + 16 + 32 + 16 + 32 + 64 + 16 + 112 + 16);
    spw_arena_destroy(arena);
    spw_arena_destroy(NULL);
}

static void test_arena_growth_past_chunk(void **state)
{
    (void)state;
    enum { N = 100, SIZE = 64 };
    spw_arena_t *arena = spw_arena_new(256, 0);
    assert_non_null(arena);
    unsigned char *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = spw_arena_alloc(arena, SIZE);
        assert_non_null(blocks[i]);
        memset(blocks[i], i, SIZE);
    }
    /* One allocation larger than a chunk gets a chunk of its own. */
    unsigned char *big = spw_arena_alloc(arena, 10000);
    assert_non_null(big);
    memset(big, 0xee, 10000);
    for (int i = 0; i < N; i++) /* nothing written later clobbered an earlier block */
        for (int b = 0; b < SIZE; b++)
            assert_int_equal(blocks[i][b], (unsigned char)i);
    assert_int_equal(spw_arena_used(arena), N * SIZE + 10000);
    spw_arena_destroy(arena);
}

static void test_arena_budget(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(1024, 2048);
    assert_non_null(arena);
    for (int i = 0; i < 4; i++) /* two chunks of 1024 fill the budget exactly */
        assert_non_null(spw_arena_alloc(arena, 512));
    assert_null(spw_arena_alloc(arena, 16));
    assert_null(spw_arena_alloc(arena, 4096));
    assert_int_equal(spw_arena_used(arena), 2048);
    spw_arena_reset(arena); /* one chunk kept: 1024 of the budget free again */
    assert_non_null(spw_arena_alloc(arena, 1024));
    assert_non_null(spw_arena_alloc(arena, 1024));
    assert_null(spw_arena_alloc(arena, 1));
    spw_arena_destroy(arena);

    arena = spw_arena_new(1024, 100); /* a budget below one chunk allows nothing */
    assert_non_null(arena);
    assert_null(spw_arena_alloc(arena, 16));
    spw_arena_destroy(arena);
}

static void test_arena_reset_reuses_memory(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(256, 0);
    assert_non_null(arena);
    void *first = spw_arena_alloc(arena, 200);
    void *second = spw_arena_alloc(arena, 200); /* does not fit: a second chunk */
    assert_non_null(first);
    assert_non_null(second);
    spw_arena_reset(arena);
    assert_int_equal(spw_arena_used(arena), 0);
    /* The kept chunk serves the next batch from its start, without a new malloc. */
    void *again = spw_arena_alloc(arena, 200);
    assert_true(again == first || again == second);
    spw_arena_reset(arena);
    assert_ptr_equal(spw_arena_alloc(arena, 200), again);

    /* After a big batch the big chunk is the one kept. */
    unsigned char *big = spw_arena_alloc(arena, 4096);
    assert_non_null(big);
    spw_arena_reset(arena);
    assert_ptr_equal(spw_arena_alloc(arena, 4000), big);
    spw_arena_reset(arena);
    spw_arena_reset(arena); /* twice in a row is harmless */
    assert_int_equal(spw_arena_used(arena), 0);
    spw_arena_destroy(arena);

    arena = spw_arena_new(0, 0);
    spw_arena_reset(arena); /* reset before any allocation */
    assert_non_null(spw_arena_alloc(arena, 8));
    spw_arena_destroy(arena);
}

static void test_arena_calloc(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(4096, 0);
    assert_non_null(arena);
    unsigned char *dirty = spw_arena_alloc(arena, 1000);
    assert_non_null(dirty);
    memset(dirty, 0xab, 1000);
    spw_arena_reset(arena);
    uint32_t *z = spw_arena_calloc(arena, 250, sizeof(uint32_t));
    assert_ptr_equal(z, dirty); /* the same memory, now zeroed */
    for (int i = 0; i < 250; i++)
        assert_int_equal(z[i], 0);
    assert_null(spw_arena_calloc(arena, SIZE_MAX / 2, 4)); /* count * size overflows */
    assert_null(spw_arena_calloc(arena, 4, SIZE_MAX / 2));
    assert_null(spw_arena_alloc(arena, SIZE_MAX));      /* rounding up overflows */
    assert_null(spw_arena_alloc(arena, SIZE_MAX - 20)); /* header would overflow */
    assert_int_equal(spw_arena_used(arena), 1008);      /* failures hand out nothing */
    spw_arena_destroy(arena);
}

static void test_arena_strndup(void **state)
{
    (void)state;
    spw_arena_t *arena = spw_arena_new(0, 0);
    assert_non_null(arena);
    const char src[] = "hello, world";
    char *s = spw_arena_strndup(arena, src, 5);
    assert_non_null(s);
    assert_string_equal(s, "hello");
    assert_true(s != src);
    char *empty = spw_arena_strndup(arena, src, 0);
    assert_non_null(empty);
    assert_string_equal(empty, "");
    const char with_nul[] = {'a', '\0', 'b'}; /* copies len bytes, NULs included */
    char *bytes = spw_arena_strndup(arena, with_nul, 3);
    assert_memory_equal(bytes, with_nul, 3);
    assert_int_equal(bytes[3], '\0');
    assert_string_equal(s, "hello"); /* earlier copies intact */
    spw_arena_destroy(arena);
}

SPW_TEST_MAIN(test_arena_alignment, test_arena_growth_past_chunk, test_arena_budget,
              test_arena_reset_reuses_memory, test_arena_calloc, test_arena_strndup)
