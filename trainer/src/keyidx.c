/* trainer: the open-addressing key index used for batch de-duplication, gradient accumulation,
 * the residual table and the reference trainer's rows. */
#include "trainer_int.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define KEYIDX_MIN_CAP 16

/* Keys are hashes already, but structured test keys (0, 1, 2, ...) must spread too. */
static inline size_t home_of(uint64_t key, size_t mask)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & mask;
}

spw_err_t spw_trn__grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return SPW_OK;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2 / elem)
            return SPW_ERR_NOMEM;
        cap2 *= 2;
    }
    void *q = realloc(*p, cap2 * elem);
    if (!q)
        return SPW_ERR_NOMEM;
    *p = q;
    *cap = cap2;
    return SPW_OK;
}

void spw_trn__keyidx_init(struct spw_trn__keyidx *idx)
{
    memset(idx, 0, sizeof(*idx));
    idx->gen = 1;
}

void spw_trn__keyidx_fini(struct spw_trn__keyidx *idx)
{
    free(idx->slots);
    memset(idx, 0, sizeof(*idx));
}

spw_err_t spw_trn__keyidx_reserve(struct spw_trn__keyidx *idx, size_t n)
{
    if (n <= idx->cap / 2)
        return SPW_OK;
    size_t cap = idx->cap ? idx->cap : KEYIDX_MIN_CAP;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof(struct spw_trn__kslot))
            return SPW_ERR_NOMEM;
        cap *= 2;
    }
    struct spw_trn__kslot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return SPW_ERR_NOMEM;
    size_t mask = cap - 1;
    for (size_t i = 0; i < idx->cap; i++) {
        const struct spw_trn__kslot *s = &idx->slots[i];
        if (s->gen != idx->gen)
            continue;
        size_t j = home_of(s->key, mask);
        while (slots[j].gen == 1)
            j = (j + 1) & mask;
        slots[j] = (struct spw_trn__kslot){.key = s->key, .val = s->val, .gen = 1};
    }
    free(idx->slots);
    idx->slots = slots;
    idx->cap = cap;
    idx->gen = 1;
    return SPW_OK;
}

uint32_t spw_trn__keyidx_find(const struct spw_trn__keyidx *idx, uint64_t key)
{
    if (idx->count == 0)
        return SPW_TRN__NONE;
    size_t mask = idx->cap - 1;
    for (size_t j = home_of(key, mask);; j = (j + 1) & mask) {
        const struct spw_trn__kslot *s = &idx->slots[j];
        if (s->gen != idx->gen)
            return SPW_TRN__NONE;
        if (s->key == key)
            return s->val;
    }
}

void spw_trn__keyidx_prefetch(const struct spw_trn__keyidx *idx, uint64_t key)
{
    if (idx->cap)
        __builtin_prefetch(&idx->slots[home_of(key, idx->cap - 1)], 1);
}

uint32_t spw_trn__keyidx_upsert(struct spw_trn__keyidx *idx, uint64_t key, uint32_t val,
                                bool *inserted)
{
    assert(idx->cap > 0);
    size_t mask = idx->cap - 1;
    for (size_t j = home_of(key, mask);; j = (j + 1) & mask) {
        struct spw_trn__kslot *s = &idx->slots[j];
        if (s->gen != idx->gen) {
            assert(idx->count < idx->cap / 2);
            *s = (struct spw_trn__kslot){.key = key, .val = val, .gen = idx->gen};
            idx->count++;
            *inserted = true;
            return val;
        }
        if (s->key == key) {
            *inserted = false;
            return s->val;
        }
    }
}

void spw_trn__keyidx_set(struct spw_trn__keyidx *idx, uint64_t key, uint32_t val)
{
    size_t mask = idx->cap - 1;
    for (size_t j = home_of(key, mask);; j = (j + 1) & mask) {
        struct spw_trn__kslot *s = &idx->slots[j];
        assert(s->gen == idx->gen);
        if (s->key == key) {
            s->val = val;
            return;
        }
    }
}

uint32_t spw_trn__keyidx_remove(struct spw_trn__keyidx *idx, uint64_t key)
{
    if (idx->count == 0)
        return SPW_TRN__NONE;
    size_t mask = idx->cap - 1;
    size_t i = home_of(key, mask);
    for (;; i = (i + 1) & mask) {
        if (idx->slots[i].gen != idx->gen)
            return SPW_TRN__NONE;
        if (idx->slots[i].key == key)
            break;
    }
    uint32_t val = idx->slots[i].val;
    /* Backward-shift deletion: move back every later entry of the run whose home does not lie
     * cyclically in (i, j], so that lookups never stop early at the hole. */
    for (size_t j = (i + 1) & mask; idx->slots[j].gen == idx->gen; j = (j + 1) & mask) {
        size_t h = home_of(idx->slots[j].key, mask);
        bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays)
            continue;
        idx->slots[i] = idx->slots[j];
        i = j;
    }
    idx->slots[i].gen = 0;
    idx->count--;
    return val;
}

void spw_trn__keyidx_clear(struct spw_trn__keyidx *idx)
{
    idx->count = 0;
    if (++idx->gen == 0) {
        for (size_t i = 0; i < idx->cap; i++)
            idx->slots[i].gen = 0;
        idx->gen = 1;
    }
}
