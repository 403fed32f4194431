/* The cold file: rows evicted from DRAM, in a file-backed open-addressing table of fixed-size
 * records (docs/ARCHITECTURE.md §3). A miss reads one record in place and an eviction writes one;
 * there is no memtable, no compaction and no block to search. The page cache holds what memory
 * allows and the kernel writes the rest back. */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ps_int.h"
#include "sparrow/hash.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#define COLD_SALT     0x2545f4914f6cdd1dull
#define COLD_MIN_CAP  4096u
#define COLD_MAX_CAP  (1ull << 32)
#define COLD_LOAD_NUM 7u /* records at most 7/10 of the capacity */
#define COLD_LOAD_DEN 10u

static inline uint64_t home_of(const struct spw_ps__cold *c, uint64_t key)
{
    return spw_hash_mix64(key ^ COLD_SALT) & c->mask;
}

static inline bool rec_full(const struct spw_ps_row *r)
{
    return (r->flags & SPW_PS_COLD_FULL) != 0;
}

static inline void mark(struct spw_ps__cold *c, uint64_t i, bool dirty)
{
    uint64_t bit = 1ull << (i & 63);
    if (dirty)
        c->dirty[i >> 6] |= bit;
    else
        c->dirty[i >> 6] &= ~bit;
}

static inline bool marked(const struct spw_ps__cold *c, uint64_t i)
{
    return (c->dirty[i >> 6] >> (i & 63)) & 1;
}

/* The dirty bitmap of cap records (cap a multiple of 64), zeroed; NULL when out of memory. */
static uint64_t *bitmap_new(uint64_t cap)
{
    return calloc(cap / 64, sizeof(uint64_t));
}

/* Maps a new file of cap records at path (replacing any), its blocks allocated up front so that
 * a full disk is an error here rather than a SIGBUS at a later write. */
static spw_err_t map_file(const char *path, size_t stride, uint64_t cap, int *fd_out,
                          uint8_t **map_out, char *errstr, size_t errstr_size)
{
    size_t bytes = (size_t)cap * stride;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(errstr, errstr_size, "open %s: %s", path, strerror(errno));
        return SPW_ERR_IO;
    }
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc != 0) {
        snprintf(errstr, errstr_size, "allocating %zu bytes for %s: %s", bytes, path, strerror(rc));
        close(fd);
        unlink(path);
        return SPW_ERR_IO;
    }
    uint8_t *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(errstr, errstr_size, "mmap %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return SPW_ERR_IO;
    }
    /* records are read one at a time at random: no read-ahead around a faulted page */
    (void)madvise(map, bytes, MADV_RANDOM);
    *fd_out = fd;
    *map_out = map;
    return SPW_OK;
}

spw_err_t spw_ps__cold_open(struct spw_ps__cold *c, const char *path, size_t stride,
                            uint64_t cap_hint, char *errstr, size_t errstr_size)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    uint64_t cap = COLD_MIN_CAP;
    while (cap < cap_hint && cap < COLD_MAX_CAP)
        cap <<= 1;
    size_t len = strlen(path);
    c->path = malloc(len + 1);
    c->grow_path = malloc(len + 6);
    if (!c->path || !c->grow_path) {
        free(c->path);
        free(c->grow_path);
        c->path = c->grow_path = NULL;
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    memcpy(c->path, path, len + 1);
    snprintf(c->grow_path, len + 6, "%s.grow", path);
    unlink(c->grow_path); /* left by a crash during a growth */
    c->dirty = bitmap_new(cap);
    spw_err_t err = c->dirty ? map_file(path, stride, cap, &c->fd, &c->map, errstr, errstr_size)
                             : SPW_ERR_NOMEM;
    if (err) {
        if (err == SPW_ERR_NOMEM)
            snprintf(errstr, errstr_size, "out of memory");
        free(c->dirty);
        free(c->path);
        free(c->grow_path);
        c->path = c->grow_path = NULL;
        c->dirty = NULL;
        return err;
    }
    c->stride = stride;
    c->cap = cap;
    c->mask = cap - 1;
    return SPW_OK;
}

void spw_ps__cold_close(struct spw_ps__cold *c)
{
    if (!c->path)
        return;
    if (c->map)
        munmap(c->map, (size_t)c->cap * c->stride);
    if (c->fd >= 0)
        close(c->fd);
    if (c->path)
        unlink(c->path);
    free(c->dirty);
    free(c->path);
    free(c->grow_path);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

void spw_ps__cold_prefetch(const struct spw_ps__cold *c, uint64_t key)
{
    const uint8_t *r = c->map + (size_t)home_of(c, key) * c->stride;
    __builtin_prefetch(r);
    __builtin_prefetch(r + c->stride - 1);
}

int64_t spw_ps__cold_find(const struct spw_ps__cold *c, uint64_t key)
{
    for (uint64_t i = home_of(c, key);; i = (i + 1) & c->mask) {
        const struct spw_ps_row *r = spw_ps__cold_rec(c, i);
        if (!rec_full(r))
            return -1;
        if (r->key == key)
            return (int64_t)i;
    }
}

/* Writes row (stride bytes, its flags replaced by FULL and its DIRTY bit) at the end of key's
 * probe sequence or over the record of the same key. The table is below its load limit, so the
 * sequence ends at an empty record. */
static void put_at_home(struct spw_ps__cold *c, const struct spw_ps_row *row, uint32_t flags)
{
    uint64_t i = home_of(c, row->key);
    for (;; i = (i + 1) & c->mask) {
        struct spw_ps_row *r = spw_ps__cold_rec(c, i);
        if (!rec_full(r))
            break;
        if (r->key == row->key) {
            if (r->flags & SPW_PS_ROW_DIRTY)
                c->n_dirty--;
            c->n--;
            break;
        }
    }
    struct spw_ps_row *r = spw_ps__cold_rec(c, i);
    memcpy(r, row, c->stride);
    r->flags = flags;
    c->n++;
    if (flags & SPW_PS_ROW_DIRTY)
        c->n_dirty++;
    mark(c, i, (flags & SPW_PS_ROW_DIRTY) != 0);
}

/* Doubles the table into a new file, then renames it over the old one. */
static spw_err_t grow(struct spw_ps__cold *c)
{
    if (c->cap >= COLD_MAX_CAP || c->grow_failed)
        return SPW_ERR_NOMEM;
    char why[512] = "out of memory";
    uint64_t t0 = spw_time_mono_ns();
    struct spw_ps__cold next = *c;
    next.dirty = bitmap_new(c->cap * 2);
    spw_err_t err = next.dirty ? map_file(c->grow_path, c->stride, c->cap * 2, &next.fd, &next.map,
                                          why, sizeof(why))
                               : SPW_ERR_NOMEM;
    if (err) {
        free(next.dirty);
        /* Logged once: evictions go to RocksDB from now on, as without a cold file. */
        SPW_ERROR("cold file cannot grow: evicted rows go to RocksDB from now on",
                  "path=%s rows=%" PRIu64 " err=\"%s\"", c->path, c->n, why);
        c->grow_failed = true;
        return err;
    }
    next.cap = c->cap * 2;
    next.mask = next.cap - 1;
    next.n = 0;
    next.n_dirty = 0;
    for (uint64_t i = 0; i < c->cap; i++) {
        const struct spw_ps_row *r = spw_ps__cold_rec(c, i);
        if (rec_full(r))
            put_at_home(&next, r, r->flags);
    }
    if (rename(c->grow_path, c->path) != 0) {
        SPW_ERROR("cold file cannot grow: evicted rows go to RocksDB from now on",
                  "path=%s err=\"rename: %s\"", c->path, strerror(errno));
        munmap(next.map, (size_t)next.cap * next.stride);
        close(next.fd);
        free(next.dirty);
        unlink(c->grow_path);
        c->grow_failed = true;
        return SPW_ERR_IO;
    }
    munmap(c->map, (size_t)c->cap * c->stride);
    close(c->fd);
    free(c->dirty);
    *c = next;
    c->grows++;
    /* the shard's thread stops for this: rows moved at memory (or disk) speed */
    SPW_INFO("cold file grown", "path=%s records=%" PRIu64 " rows=%" PRIu64 " ms=%.0f", c->path,
             c->cap, c->n, (double)(spw_time_mono_ns() - t0) / 1e6);
    return SPW_OK;
}

spw_err_t spw_ps__cold_put(struct spw_ps__cold *c, const struct spw_ps_row *row)
{
    if ((c->n + 1) * COLD_LOAD_DEN > c->cap * COLD_LOAD_NUM) {
        spw_err_t err = grow(c);
        if (err)
            return err;
    }
    put_at_home(c, row, SPW_PS_COLD_FULL | (row->flags & SPW_PS_ROW_DIRTY));
    return SPW_OK;
}

void spw_ps__cold_delete_at(struct spw_ps__cold *c, uint64_t i)
{
    struct spw_ps_row *hole = spw_ps__cold_rec(c, i);
    if (hole->flags & SPW_PS_ROW_DIRTY)
        c->n_dirty--;
    c->n--;
    /* Backward-shift deletion: a later record of the run whose home does not lie in (hole, j]
     * moves into the hole, so that every probe sequence stays unbroken without tombstones. */
    for (uint64_t j = (i + 1) & c->mask;; j = (j + 1) & c->mask) {
        struct spw_ps_row *r = spw_ps__cold_rec(c, j);
        if (!rec_full(r))
            break;
        uint64_t home = home_of(c, r->key);
        if (((j - home) & c->mask) >= ((j - i) & c->mask)) {
            memcpy(hole, r, c->stride);
            mark(c, i, marked(c, j));
            hole = r;
            i = j;
        }
    }
    hole->flags = 0;
    mark(c, i, false);
}

void spw_ps__cold_clean(struct spw_ps__cold *c, uint64_t i)
{
    struct spw_ps_row *r = spw_ps__cold_rec(c, i);
    if (r->flags & SPW_PS_ROW_DIRTY) {
        r->flags &= ~SPW_PS_ROW_DIRTY;
        c->n_dirty--;
        mark(c, i, false);
    }
}

bool spw_ps__cold_next_dirty(const struct spw_ps__cold *c, uint64_t *i)
{
    uint64_t w = *i >> 6;
    if (*i >= c->cap)
        return false;
    uint64_t bits = c->dirty[w] & (~0ull << (*i & 63));
    while (bits == 0) {
        if (++w >= c->cap / 64)
            return false;
        bits = c->dirty[w];
    }
    *i = (w << 6) + (uint64_t)__builtin_ctzll(bits);
    return true;
}
