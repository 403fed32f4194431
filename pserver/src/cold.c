/* The cold file: rows evicted from DRAM, in file-backed open-addressing tables of fixed-size
 * records (docs/ARCHITECTURE.md §3). A miss reads one record in place and an eviction writes one;
 * there is no memtable, no compaction and no block to search. The page cache holds what memory
 * allows and the kernel writes the rest back. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ps_int.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define COLD_SALT      0x2545f4914f6cdd1dull
#define COLD_MIN_CAP   1024u /* records of a segment at least (a multiple of 64) */
#define COLD_MAX_CAP   (1ull << 32)
#define COLD_LOAD_NUM  7u /* records at most 7/10 of a segment's capacity */
#define COLD_LOAD_DEN  10u
#define SEG_SHIFT      58u   /* the hash's top 6 bits pick the segment, the low bits the home */
#define GROW_NOTICE_MS 100.0 /* growths this long or longer are logged at info, others at debug */

_Static_assert(SPW_PS_COLD_SEGS == 1u << (64 - SEG_SHIFT), "segments match the hash bits");

static inline uint64_t hash_of(uint64_t key)
{
    return spw_hash_mix64(key ^ COLD_SALT);
}

static inline uint64_t home_of(const struct spw_ps__cold_seg *s, uint64_t key)
{
    return hash_of(key) & s->mask;
}

static inline struct spw_ps_row *rec_at(const struct spw_ps__cold_seg *s, size_t stride, uint64_t i)
{
    return (struct spw_ps_row *)(s->map + (size_t)i * stride);
}

static inline bool rec_full(const struct spw_ps_row *r)
{
    return (r->flags & SPW_PS_COLD_FULL) != 0;
}

static inline void mark(struct spw_ps__cold_seg *s, uint64_t i, bool dirty)
{
    uint64_t bit = 1ull << (i & 63);
    if (dirty)
        s->dirty[i >> 6] |= bit;
    else
        s->dirty[i >> 6] &= ~bit;
}

static inline bool marked(const struct spw_ps__cold_seg *s, uint64_t i)
{
    return (s->dirty[i >> 6] >> (i & 63)) & 1;
}

/* Maps a new file of cap records at path (replacing any), its blocks allocated up front so that
 * a full disk is an error here rather than a SIGBUS at a later write, with its zeroed dirty
 * bitmap. */
static spw_err_t seg_map(struct spw_ps__cold_seg *s, const char *path, size_t stride, uint64_t cap,
                         char *errstr, size_t errstr_size)
{
    size_t bytes = (size_t)cap * stride;
    s->dirty = calloc(cap / 64, sizeof(uint64_t));
    if (!s->dirty) {
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(errstr, errstr_size, "open %s: %s", path, strerror(errno));
        goto fail;
    }
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc != 0) {
        snprintf(errstr, errstr_size, "allocating %zu bytes for %s: %s", bytes, path, strerror(rc));
        goto fail_fd;
    }
    uint8_t *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(errstr, errstr_size, "mmap %s: %s", path, strerror(errno));
        goto fail_fd;
    }
    /* records are read one at a time at random: no read-ahead around a faulted page */
    (void)madvise(map, bytes, MADV_RANDOM);
    /* The mapping keeps the file: no descriptor held per segment (64 per store; a trainer with
     * many in-process shards would run out). */
    close(fd);
    s->map = map;
    s->cap = cap;
    s->mask = cap - 1;
    s->n = 0;
    return SPW_OK;

fail_fd:
    close(fd);
    unlink(path);
fail:
    free(s->dirty);
    s->dirty = NULL;
    return SPW_ERR_IO;
}

static void seg_unmap(struct spw_ps__cold_seg *s, size_t stride)
{
    if (s->map)
        munmap(s->map, (size_t)s->cap * stride);
    free(s->dirty);
    s->map = NULL;
    s->dirty = NULL;
}

spw_err_t spw_ps__cold_open(struct spw_ps__cold *c, const char *prefix, size_t stride,
                            uint64_t cap_hint, char *errstr, size_t errstr_size)
{
    memset(c, 0, sizeof(*c));
    c->stride = stride;
    uint64_t cap = COLD_MIN_CAP;
    while (cap * SPW_PS_COLD_SEGS < cap_hint && cap < COLD_MAX_CAP)
        cap <<= 1;
    size_t len = strlen(prefix) + 16;
    for (uint32_t g = 0; g < SPW_PS_COLD_SEGS; g++) {
        struct spw_ps__cold_seg *s = &c->seg[g];
        s->path = malloc(len);
        s->grow_path = malloc(len + 5);
        if (!s->path || !s->grow_path) {
            snprintf(errstr, errstr_size, "out of memory");
            c->open = true;
            spw_ps__cold_close(c);
            return SPW_ERR_NOMEM;
        }
        snprintf(s->path, len, "%s-%02u.rows", prefix, g);
        snprintf(s->grow_path, len + 5, "%s.grow", s->path);
        unlink(s->grow_path); /* left by a crash during a growth */
        spw_err_t err = seg_map(s, s->path, stride, cap, errstr, errstr_size);
        if (err) {
            c->open = true;
            spw_ps__cold_close(c);
            return err;
        }
        c->bytes += cap * stride;
    }
    c->open = true;
    return SPW_OK;
}

void spw_ps__cold_close(struct spw_ps__cold *c)
{
    if (!c->open)
        return;
    for (uint32_t g = 0; g < SPW_PS_COLD_SEGS; g++) {
        struct spw_ps__cold_seg *s = &c->seg[g];
        bool mapped = s->map != NULL;
        seg_unmap(s, c->stride);
        if (mapped)
            unlink(s->path);
        free(s->path);
        free(s->grow_path);
    }
    memset(c, 0, sizeof(*c));
}

static inline struct spw_ps__cold_seg *seg_of(const struct spw_ps__cold *c, uint64_t key,
                                              uint32_t *g)
{
    *g = (uint32_t)(hash_of(key) >> SEG_SHIFT);
    return (struct spw_ps__cold_seg *)&c->seg[*g];
}

void spw_ps__cold_prefetch(const struct spw_ps__cold *c, uint64_t key)
{
    uint32_t g;
    const struct spw_ps__cold_seg *s = seg_of(c, key, &g);
    const uint8_t *r = (const uint8_t *)rec_at(s, c->stride, home_of(s, key));
    __builtin_prefetch(r);
    __builtin_prefetch(r + c->stride - 1);
}

bool spw_ps__cold_find(const struct spw_ps__cold *c, uint64_t key, struct spw_ps__cold_pos *at)
{
    uint32_t g;
    const struct spw_ps__cold_seg *s = seg_of(c, key, &g);
    for (uint64_t i = home_of(s, key);; i = (i + 1) & s->mask) {
        const struct spw_ps_row *r = rec_at(s, c->stride, i);
        if (!rec_full(r))
            return false;
        if (r->key == key) {
            *at = (struct spw_ps__cold_pos){.seg = g, .idx = i};
            return true;
        }
    }
}

/* Writes row (stride bytes, its flags replaced by flags: FULL and maybe DIRTY) at the end of its
 * key's probe sequence in s, or over the record of the same key, whose flags it returns (0: a
 * new record). s is below its load limit, so the sequence ends at an empty record. */
static uint32_t put_in(struct spw_ps__cold_seg *s, size_t stride, const struct spw_ps_row *row,
                       uint32_t flags)
{
    uint64_t i = home_of(s, row->key);
    uint32_t replaced = 0;
    for (;; i = (i + 1) & s->mask) {
        struct spw_ps_row *r = rec_at(s, stride, i);
        if (!rec_full(r))
            break;
        if (r->key == row->key) {
            replaced = r->flags;
            break;
        }
    }
    struct spw_ps_row *r = rec_at(s, stride, i);
    memcpy(r, row, stride);
    r->flags = flags;
    s->n += replaced == 0;
    mark(s, i, (flags & SPW_PS_ROW_DIRTY) != 0);
    return replaced;
}

/* Doubles segment s into a new file, then renames it over the old one. */
static spw_err_t grow(struct spw_ps__cold *c, struct spw_ps__cold_seg *s)
{
    if (s->cap >= COLD_MAX_CAP || c->grow_failed)
        return SPW_ERR_NOMEM;
    char why[512];
    uint64_t t0 = spw_time_mono_ns();
    struct spw_ps__cold_seg next = *s;
    spw_err_t err = seg_map(&next, s->grow_path, c->stride, s->cap * 2, why, sizeof(why));
    if (err == SPW_OK && rename(s->grow_path, s->path) != 0) {
        snprintf(why, sizeof(why), "rename %s: %s", s->grow_path, strerror(errno));
        seg_unmap(&next, c->stride);
        unlink(s->grow_path);
        err = SPW_ERR_IO;
    }
    if (err) {
        /* Logged once: evictions go to RocksDB from now on, as without a cold file. */
        SPW_ERROR("cold file cannot grow: evicted rows go to RocksDB from now on",
                  "path=%s rows=%" PRIu64 " err=\"%s\"", s->path, c->n, why);
        c->grow_failed = true;
        return err;
    }
    for (uint64_t i = 0; i < s->cap; i++) {
        const struct spw_ps_row *r = rec_at(s, c->stride, i);
        if (rec_full(r))
            (void)put_in(&next, c->stride, r, r->flags);
    }
    c->bytes += s->cap * c->stride;
    seg_unmap(s, c->stride);
    *s = next;
    c->grows++;
    /* the shard's thread stops for this: a segment's rows moved at memory (or disk) speed. A
     * growing model grows each of the 64 segments about once per doubling: a line each at info
     * would be hundreds of lines, so info is for the pauses a client would notice. */
    const double ms = (double)(spw_time_mono_ns() - t0) / 1e6;
    SPW_LOG(ms >= GROW_NOTICE_MS ? SPW_LOG_INFO : SPW_LOG_DEBUG, "cold file grown",
            "path=%s records=%" PRIu64 " rows=%" PRIu64 " ms=%.0f", s->path, s->cap, s->n, ms);
    return SPW_OK;
}

spw_err_t spw_ps__cold_put(struct spw_ps__cold *c, const struct spw_ps_row *row)
{
    uint32_t g;
    struct spw_ps__cold_seg *s = seg_of(c, row->key, &g);
    if ((s->n + 1) * COLD_LOAD_DEN > s->cap * COLD_LOAD_NUM) {
        spw_err_t err = grow(c, s);
        if (err)
            return err;
    }
    uint32_t flags = SPW_PS_COLD_FULL | (row->flags & SPW_PS_ROW_DIRTY);
    uint32_t replaced = put_in(s, c->stride, row, flags);
    c->n += replaced == 0;
    c->n_dirty += (flags & SPW_PS_ROW_DIRTY) != 0;
    c->n_dirty -= (replaced & SPW_PS_ROW_DIRTY) != 0;
    return SPW_OK;
}

void spw_ps__cold_delete_at(struct spw_ps__cold *c, struct spw_ps__cold_pos p)
{
    struct spw_ps__cold_seg *s = &c->seg[p.seg];
    uint64_t i = p.idx;
    struct spw_ps_row *hole = rec_at(s, c->stride, i);
    if (hole->flags & SPW_PS_ROW_DIRTY)
        c->n_dirty--;
    c->n--;
    s->n--;
    /* Backward-shift deletion: a later record of the run whose home does not lie in (hole, j]
     * moves into the hole, so that every probe sequence stays unbroken without tombstones. */
    for (uint64_t j = (i + 1) & s->mask;; j = (j + 1) & s->mask) {
        struct spw_ps_row *r = rec_at(s, c->stride, j);
        if (!rec_full(r))
            break;
        uint64_t home = home_of(s, r->key);
        if (((j - home) & s->mask) >= ((j - i) & s->mask)) {
            memcpy(hole, r, c->stride);
            mark(s, i, marked(s, j));
            hole = r;
            i = j;
        }
    }
    hole->flags = 0;
    mark(s, i, false);
}

void spw_ps__cold_clean(struct spw_ps__cold *c, struct spw_ps__cold_pos p)
{
    struct spw_ps_row *r = spw_ps__cold_rec(c, p);
    if (r->flags & SPW_PS_ROW_DIRTY) {
        r->flags &= ~SPW_PS_ROW_DIRTY;
        c->n_dirty--;
        mark(&c->seg[p.seg], p.idx, false);
    }
}

bool spw_ps__cold_next_dirty(const struct spw_ps__cold *c, struct spw_ps__cold_pos *at)
{
    for (uint32_t g = at->seg; g < SPW_PS_COLD_SEGS; g++) {
        const struct spw_ps__cold_seg *s = &c->seg[g];
        uint64_t i = g == at->seg ? at->idx : 0;
        if (i >= s->cap)
            continue;
        uint64_t w = i >> 6, bits = s->dirty[w] & (~0ull << (i & 63));
        while (bits == 0 && ++w < s->cap / 64)
            bits = s->dirty[w];
        if (bits != 0) {
            *at = (struct spw_ps__cold_pos){.seg = g,
                                            .idx = (w << 6) + (uint64_t)__builtin_ctzll(bits)};
            return true;
        }
    }
    return false;
}
