/* Shard state that a checkpoint keeps beside its RocksDB files: the admission sketch (SKETCH) and
 * the push de-duplication window (DEDUP), written, checked and read back (docs/ARCHITECTURE.md §3).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ps_int.h"
#include "sparrow/ckpt_layout.h"
#include "sparrow/log.h"

/*
 * Both files are little-endian, end with the XXH3-64 of every byte before it, and are covered
 * by the checkpoint's CHECKSUM like its other files. They are read as untrusted input: every size
 * is checked against the file's length before anything is allocated or read, and a loader is told
 * the shape it expects (the store's sketch) and refuses another.
 *
 * SKETCH (the count-min sketch of pserver.admit.min_count; only when admission is on):
 *
 *   offset  size       field
 *   0       8          magic "SPWSKET1"
 *   8       4          width: a power of two, SPW_PS_STATE_SKETCH_MIN_WIDTH..MAX_WIDTH
 *   12      4          depth: 1..SPW_PS_STATE_SKETCH_MAX_DEPTH
 *   16      4          encoding: 0 dense, 1 sparse
 *   20      4          0
 *   24      8          n: dense, width × depth cells; sparse, entries (< width × depth)
 *   32      …          dense: n × u16, the cells row by row
 *                      sparse: n × (u32 cell index, u16 count), indices strictly ascending,
 *                      counts non-zero; the cells not listed are 0
 *   32+…    8          XXH3-64 of bytes [0, 32+…)
 *
 *   The sparse form is written when it is smaller: a sketch sized for a large DRAM budget is
 *   mostly zero while few keys wait for admission.
 *
 * DEDUP (the shard's per-trainer windows of push seqs, server.c):
 *
 *   offset  size       field
 *   0       8          magic "SPWDDUP1"
 *   8       4          n: entries, <= SPW_PS_DEDUP_TRAINERS
 *   12      4          window: SPW_PS_DEDUP_WINDOW (the bits of `window` below)
 *   16      8          clock: the LRU clock the entries' `touched` count in
 *   24      n × 36     trainer_id u32, epoch u64, high u64, window u64, touched u64
 *   24+36n  8          XXH3-64 of bytes [0, 24+36n)
 */
#define SKETCH_HDR   32u
#define DEDUP_HDR    24u
#define DEDUP_ENTRY  36u
#define SPARSE_ENTRY 6u
#define ENC_DENSE    0u
#define ENC_SPARSE   1u
#define IO_CHUNK     (64u << 10)

/* The magics as bytes (no terminator is written). */
static const uint8_t SKETCH_MAGIC[8] = {'S', 'P', 'W', 'S', 'K', 'E', 'T', '1'};
static const uint8_t DEDUP_MAGIC[8] = {'S', 'P', 'W', 'D', 'D', 'U', 'P', '1'};

static void put32(uint8_t *p, uint32_t v)
{
    for (int b = 0; b < 4; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int b = 3; b >= 0; b--)
        v = (v << 8) | p[b];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = (v << 8) | p[b];
    return v;
}

/* ---- writing ---- */

/* A file written through a buffer with its running digest. */
struct writer {
    FILE *f;
    XXH3_state_t *st;
    bool failed;
};

static void w_put(struct writer *w, const void *p, size_t len)
{
    if (w->failed)
        return;
    XXH3_64bits_update(w->st, p, len);
    if (fwrite(p, 1, len, w->f) != len)
        w->failed = true;
}

static spw_err_t w_open(struct writer *w, const char *dir, const char *name, char *path,
                        size_t path_size)
{
    memset(w, 0, sizeof(*w));
    if (!spw_ps__path(path, path_size, "%s/%s", dir, name))
        return SPW_ERR_INVALID;
    w->st = XXH3_createState();
    if (!w->st)
        return SPW_ERR_NOMEM;
    XXH3_64bits_reset(w->st);
    w->f = fopen(path, "we");
    if (!w->f) {
        XXH3_freeState(w->st);
        return SPW_ERR_IO;
    }
    return SPW_OK;
}

/* Appends the digest, syncs and closes. */
static spw_err_t w_close(struct writer *w)
{
    uint8_t d[8];
    put64(d, XXH3_64bits_digest(w->st));
    if (!w->failed && fwrite(d, 1, 8, w->f) != 8)
        w->failed = true;
    bool ok = !w->failed && fflush(w->f) == 0 && fsync(fileno(w->f)) == 0;
    ok &= fclose(w->f) == 0;
    XXH3_freeState(w->st);
    return ok ? SPW_OK : SPW_ERR_IO;
}

static spw_err_t write_sketch(const char *dir, const struct spw_ps_sketch *sk, char *errstr,
                              size_t errstr_size)
{
    uint64_t cells = (uint64_t)sk->width * sk->depth, nz = 0;
    for (uint64_t i = 0; i < cells; i++)
        nz += sk->cells[i] != 0;
    bool sparse = cells <= UINT32_MAX && nz * SPARSE_ENTRY < cells * 2;
    char path[SPW_CKPT_PATH_MAX];
    struct writer w;
    spw_err_t err = w_open(&w, dir, SPW_CKPT_SKETCH, path, sizeof(path));
    if (err) {
        snprintf(errstr, errstr_size, "creating %s/%s: %s", dir, SPW_CKPT_SKETCH,
                 err == SPW_ERR_IO ? strerror(errno) : spw_err_str(err));
        return err;
    }
    uint8_t hdr[SKETCH_HDR] = {0};
    memcpy(hdr, SKETCH_MAGIC, 8);
    put32(hdr + 8, sk->width);
    put32(hdr + 12, sk->depth);
    put32(hdr + 16, sparse ? ENC_SPARSE : ENC_DENSE);
    put64(hdr + 24, sparse ? nz : cells);
    w_put(&w, hdr, sizeof(hdr));
    uint8_t buf[IO_CHUNK];
    size_t used = 0;
    for (uint64_t i = 0; i < cells; i++) {
        uint16_t c = sk->cells[i];
        if (sparse) {
            if (c == 0)
                continue;
            put32(buf + used, (uint32_t)i);
            buf[used + 4] = (uint8_t)c;
            buf[used + 5] = (uint8_t)(c >> 8);
            used += SPARSE_ENTRY;
        } else {
            buf[used] = (uint8_t)c;
            buf[used + 1] = (uint8_t)(c >> 8);
            used += 2;
        }
        if (used + SPARSE_ENTRY > sizeof(buf)) {
            w_put(&w, buf, used);
            used = 0;
        }
    }
    w_put(&w, buf, used);
    if ((err = w_close(&w)) != SPW_OK)
        snprintf(errstr, errstr_size, "writing %s: %s", path, strerror(errno));
    return err;
}

static spw_err_t write_dedup(const char *dir, const struct spw_ps__dedup *dd, char *errstr,
                             size_t errstr_size)
{
    uint32_t n = 0;
    for (size_t i = 0; i < SPW_PS_DEDUP_TRAINERS; i++)
        n += dd->e[i].used;
    char path[SPW_CKPT_PATH_MAX];
    struct writer w;
    spw_err_t err = w_open(&w, dir, SPW_CKPT_DEDUP, path, sizeof(path));
    if (err) {
        snprintf(errstr, errstr_size, "creating %s/%s: %s", dir, SPW_CKPT_DEDUP,
                 err == SPW_ERR_IO ? strerror(errno) : spw_err_str(err));
        return err;
    }
    uint8_t hdr[DEDUP_HDR];
    memcpy(hdr, DEDUP_MAGIC, 8);
    put32(hdr + 8, n);
    put32(hdr + 12, SPW_PS_DEDUP_WINDOW);
    put64(hdr + 16, dd->clock);
    w_put(&w, hdr, sizeof(hdr));
    for (size_t i = 0; i < SPW_PS_DEDUP_TRAINERS; i++) {
        const struct spw_ps__dedup_entry *e = &dd->e[i];
        if (!e->used)
            continue;
        uint8_t rec[DEDUP_ENTRY];
        put32(rec, e->trainer_id);
        put64(rec + 4, e->epoch);
        put64(rec + 12, e->high);
        put64(rec + 20, e->window);
        put64(rec + 28, e->touched);
        w_put(&w, rec, sizeof(rec));
    }
    if ((err = w_close(&w)) != SPW_OK)
        snprintf(errstr, errstr_size, "writing %s: %s", path, strerror(errno));
    return err;
}

spw_err_t spw_ps__state_write(const char *dir, const struct spw_ps_sketch *sketch,
                              const struct spw_ps__dedup *dedup, char *errstr, size_t errstr_size)
{
    spw_err_t err = SPW_OK;
    if (sketch && sketch->cells)
        err = write_sketch(dir, sketch, errstr, errstr_size);
    if (!err && dedup)
        err = write_dedup(dir, dedup, errstr, errstr_size);
    return err;
}

/* ---- reading ---- */

/* A file read through a buffer, digesting what it reads; the last 8 bytes (the digest) are
 * kept apart. */
struct reader {
    FILE *f;
    XXH3_state_t *st;
    uint64_t size; /* of the file */
    uint64_t left; /* bytes before the digest not read yet */
};

/* SPW_ERR_NOT_FOUND when the file is absent. */
static spw_err_t r_open(struct reader *r, const char *path)
{
    memset(r, 0, sizeof(*r));
    r->f = fopen(path, "re");
    if (!r->f)
        return errno == ENOENT ? SPW_ERR_NOT_FOUND : SPW_ERR_IO;
    struct stat sb;
    if (fstat(fileno(r->f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(r->f);
        return SPW_ERR_IO;
    }
    r->st = XXH3_createState();
    if (!r->st) {
        fclose(r->f);
        return SPW_ERR_NOMEM;
    }
    XXH3_64bits_reset(r->st);
    r->size = (uint64_t)sb.st_size;
    r->left = r->size >= 8 ? r->size - 8 : 0;
    return SPW_OK;
}

static bool r_get(struct reader *r, void *p, size_t len)
{
    if (len > r->left || fread(p, 1, len, r->f) != len)
        return false;
    XXH3_64bits_update(r->st, p, len);
    r->left -= len;
    return true;
}

/* True when everything was read and the digest matches. */
static bool r_digest_ok(struct reader *r)
{
    uint8_t d[8];
    return r->left == 0 && r->size >= 8 && fread(d, 1, 8, r->f) == 8 &&
           get64(d) == XXH3_64bits_digest(r->st) && fgetc(r->f) == EOF;
}

static void r_close(struct reader *r)
{
    if (r->f)
        fclose(r->f);
    if (r->st)
        XXH3_freeState(r->st);
}

static spw_err_t corrupt(char *errstr, size_t errstr_size, const char *path, const char *why)
{
    snprintf(errstr, errstr_size, "%s: %s", path, why);
    return SPW_ERR_CORRUPT;
}

/* Opens the state file name of dir into r (path receives its path, for messages). */
static spw_err_t open_state(const char *dir, const char *name, char path[SPW_CKPT_PATH_MAX],
                            struct reader *r, char *errstr, size_t errstr_size)
{
    if (!spw_ps__path(path, SPW_CKPT_PATH_MAX, "%s/%s", dir, name))
        return SPW_ERR_INVALID;
    spw_err_t err = r_open(r, path);
    if (err)
        snprintf(errstr, errstr_size, "%s: %s", path,
                 err == SPW_ERR_NOT_FOUND ? "absent" : strerror(errno));
    return err;
}

/* Reads the SKETCH file of dir: checks it, and with sk (may be NULL: check only) decodes it into
 * sk, whose width and depth it must have (SPW_ERR_INVALID otherwise, sk untouched). On
 * SPW_ERR_CORRUPT sk may hold part of the file: the caller clears it. */
static spw_err_t read_sketch(const char *dir, struct spw_ps_sketch *sk, char *errstr,
                             size_t errstr_size)
{
    char path[SPW_CKPT_PATH_MAX];
    struct reader r;
    spw_err_t err = open_state(dir, SPW_CKPT_SKETCH, path, &r, errstr, errstr_size);
    if (err)
        return err;
    uint8_t hdr[SKETCH_HDR];
    if (!r_get(&r, hdr, sizeof(hdr))) {
        err = corrupt(errstr, errstr_size, path, "shorter than its header");
        goto out;
    }
    uint32_t width = get32(hdr + 8), depth = get32(hdr + 12), enc = get32(hdr + 16);
    uint64_t n = get64(hdr + 24);
    if (memcmp(hdr, SKETCH_MAGIC, 8) != 0 || get32(hdr + 20) != 0) {
        err = corrupt(errstr, errstr_size, path, "not a sketch file (magic)");
        goto out;
    }
    if (width < SPW_PS_STATE_SKETCH_MIN_WIDTH || width > SPW_PS_STATE_SKETCH_MAX_WIDTH ||
        (width & (width - 1)) != 0 || depth < 1 || depth > SPW_PS_STATE_SKETCH_MAX_DEPTH ||
        (enc != ENC_DENSE && enc != ENC_SPARSE)) {
        err = corrupt(errstr, errstr_size, path, "width, depth or encoding out of range");
        goto out;
    }
    uint64_t cells = (uint64_t)width * depth;
    uint64_t rec = enc == ENC_DENSE ? 2u : SPARSE_ENTRY;
    if ((enc == ENC_DENSE ? n != cells : n >= cells || cells > UINT32_MAX) ||
        r.size != SKETCH_HDR + n * rec + 8) {
        err = corrupt(errstr, errstr_size, path, "entry count does not match the file size");
        goto out;
    }
    if (sk && (sk->width != width || sk->depth != depth)) {
        snprintf(errstr, errstr_size,
                 "%s: sketch of %" PRIu32 " x %" PRIu32 " cells, the shard's is %" PRIu32
                 " x %" PRIu32 " (pserver.memory.mb changed?)",
                 path, width, depth, sk->width, sk->depth);
        err = SPW_ERR_INVALID;
        goto out;
    }
    uint8_t buf[IO_CHUNK];
    uint64_t prev = 0, done = 0;
    while (done < n) {
        uint64_t m = (sizeof(buf) / rec) < n - done ? sizeof(buf) / rec : n - done;
        if (!r_get(&r, buf, (size_t)(m * rec))) {
            err = corrupt(errstr, errstr_size, path, "truncated");
            goto out;
        }
        for (uint64_t i = 0; i < m; i++) {
            const uint8_t *p = buf + i * rec;
            if (enc == ENC_DENSE) {
                if (sk)
                    sk->cells[done + i] = (uint16_t)(p[0] | p[1] << 8);
                continue;
            }
            uint64_t idx = get32(p);
            uint16_t c = (uint16_t)(p[4] | p[5] << 8);
            if (idx >= cells || (done + i > 0 && idx <= prev) || c == 0) {
                err = corrupt(errstr, errstr_size, path, "sparse entry out of order or range");
                goto out;
            }
            prev = idx;
            if (sk)
                sk->cells[idx] = c;
        }
        done += m;
    }
    if (!r_digest_ok(&r))
        err = corrupt(errstr, errstr_size, path, "checksum mismatch");
out:
    r_close(&r);
    return err;
}

/* As read_sketch for the DEDUP file; dd (may be NULL) receives the entries. */
static spw_err_t read_dedup(const char *dir, struct spw_ps__dedup *dd, char *errstr,
                            size_t errstr_size)
{
    char path[SPW_CKPT_PATH_MAX];
    struct reader r;
    spw_err_t err = open_state(dir, SPW_CKPT_DEDUP, path, &r, errstr, errstr_size);
    if (err)
        return err;
    uint8_t hdr[DEDUP_HDR];
    if (!r_get(&r, hdr, sizeof(hdr)) || memcmp(hdr, DEDUP_MAGIC, 8) != 0) {
        err = corrupt(errstr, errstr_size, path, "not a de-duplication file (magic)");
        goto out;
    }
    uint32_t n = get32(hdr + 8);
    if (n > SPW_PS_DEDUP_TRAINERS || get32(hdr + 12) != SPW_PS_DEDUP_WINDOW ||
        r.size != DEDUP_HDR + (uint64_t)n * DEDUP_ENTRY + 8) {
        err = corrupt(errstr, errstr_size, path, "entry count or window does not match");
        goto out;
    }
    struct spw_ps__dedup_entry *tmp = calloc(SPW_PS_DEDUP_TRAINERS, sizeof(*tmp));
    if (!tmp) {
        err = SPW_ERR_NOMEM;
        snprintf(errstr, errstr_size, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint8_t rec[DEDUP_ENTRY];
        if (!r_get(&r, rec, sizeof(rec))) {
            err = corrupt(errstr, errstr_size, path, "truncated");
            break;
        }
        struct spw_ps__dedup_entry *e = &tmp[i];
        e->used = true;
        e->trainer_id = get32(rec);
        e->epoch = get64(rec + 4);
        e->high = get64(rec + 12);
        e->window = get64(rec + 20);
        e->touched = get64(rec + 28);
        for (uint32_t j = 0; j < i && !err; j++)
            if (tmp[j].trainer_id == e->trainer_id)
                err = corrupt(errstr, errstr_size, path, "a trainer listed twice");
        if (err)
            break;
    }
    if (!err && !r_digest_ok(&r))
        err = corrupt(errstr, errstr_size, path, "checksum mismatch");
    if (!err && dd) {
        memcpy(dd->e, tmp, SPW_PS_DEDUP_TRAINERS * sizeof(*tmp));
        dd->clock = get64(hdr + 16);
        for (uint32_t i = 0; i < n; i++) /* an LRU clock behind its entries would misorder */
            if (tmp[i].touched > dd->clock)
                dd->clock = tmp[i].touched;
    }
    free(tmp);
out:
    r_close(&r);
    return err;
}

spw_err_t spw_ps__state_check(const char *dir, char *errstr, size_t errstr_size)
{
    spw_err_t err = read_sketch(dir, NULL, errstr, errstr_size);
    if (err == SPW_ERR_NOT_FOUND)
        err = SPW_OK;
    if (!err)
        err = read_dedup(dir, NULL, errstr, errstr_size);
    return err == SPW_ERR_NOT_FOUND ? SPW_OK : err;
}

spw_err_t spw_ps__sketch_load(const char *dir, struct spw_ps_sketch *sk, char *errstr,
                              size_t errstr_size)
{
    spw_err_t err = read_sketch(dir, sk, errstr, errstr_size);
    if (err == SPW_ERR_CORRUPT || err == SPW_ERR_IO)
        memset(sk->cells, 0, (size_t)sk->width * sk->depth * sizeof(uint16_t));
    return err;
}

spw_err_t spw_ps__dedup_load(const char *dir, struct spw_ps__dedup *dd, char *errstr,
                             size_t errstr_size)
{
    return read_dedup(dir, dd, errstr, errstr_size);
}
