/* Fuzz target: the state files of a shard checkpoint (pserver/src/state.c): SKETCH and DEDUP,
 * checked (spw_ps__state_check) and loaded (into a 1024 x 4 sketch, a de-duplication table).
 * Input: one byte of options, then the file. Options bit 0: the file is DEDUP (else SKETCH); bit
 * 1: the harness rewrites the file's last 8 bytes with the digest of the rest, so that inputs get
 * past the checksum to the parsing behind it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ps_int.h"
#include "sparrow/ckpt_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

static char dir[64];

static void remove_dir(void)
{
    rmdir(dir); /* empty: every input's file is removed after it */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/fuzz_ps_state.XXXXXX");
        FUZZ_CHECK(mkdtemp(dir) != NULL);
        atexit(remove_dir);
    }
    bool dedup = data[0] & 1, fix = data[0] & 2;
    data++;
    size--;
    char path[128], other[128];
    snprintf(path, sizeof(path), "%s/%s", dir, dedup ? SPW_CKPT_DEDUP : SPW_CKPT_SKETCH);
    snprintf(other, sizeof(other), "%s/%s", dir, dedup ? SPW_CKPT_SKETCH : SPW_CKPT_DEDUP);
    unlink(other);
    uint8_t *buf = malloc(size ? size : 1);
    FUZZ_CHECK(buf);
    memcpy(buf, data, size);
    if (fix && size >= 8) {
        uint64_t d = XXH3_64bits(buf, size - 8);
        for (int b = 0; b < 8; b++)
            buf[size - 8 + b] = (uint8_t)(d >> (8 * b));
    }
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f && fwrite(buf, 1, size, f) == size && fclose(f) == 0);
    free(buf);

    char err[512];
    spw_err_t check = spw_ps__state_check(dir, err, sizeof(err));
    FUZZ_CHECK(check == SPW_OK || check == SPW_ERR_CORRUPT);
    if (!dedup) {
        struct spw_ps_sketch sk;
        FUZZ_CHECK(spw_ps__sketch_init(&sk, 1024, 4) == SPW_OK);
        spw_err_t rc = spw_ps__sketch_load(dir, &sk, err, sizeof(err));
        FUZZ_CHECK(rc == SPW_OK || rc == SPW_ERR_CORRUPT || rc == SPW_ERR_INVALID);
        /* a file the check accepts loads, unless it is of another shape */
        FUZZ_CHECK(check != SPW_OK || rc != SPW_ERR_CORRUPT);
        if (rc != SPW_OK) /* refused or of another shape: the sketch is left empty */
            for (size_t i = 0; i < (size_t)sk.width * sk.depth; i++)
                FUZZ_CHECK(sk.cells[i] == 0);
        spw_ps__sketch_fini(&sk);
    } else {
        struct spw_ps__dedup dd = {.e = calloc(SPW_PS_DEDUP_TRAINERS, sizeof(*dd.e))};
        FUZZ_CHECK(dd.e);
        spw_err_t rc = spw_ps__dedup_load(dir, &dd, err, sizeof(err));
        FUZZ_CHECK(rc == SPW_OK || rc == SPW_ERR_CORRUPT);
        FUZZ_CHECK((rc == SPW_OK) == (check == SPW_OK));
        size_t used = 0;
        for (size_t i = 0; i < SPW_PS_DEDUP_TRAINERS; i++) {
            if (!dd.e[i].used)
                continue;
            used++;
            FUZZ_CHECK(dd.e[i].touched <= dd.clock);
            for (size_t j = 0; j < i; j++)
                FUZZ_CHECK(!dd.e[j].used || dd.e[j].trainer_id != dd.e[i].trainer_id);
        }
        FUZZ_CHECK(rc == SPW_OK || used == 0);
        free(dd.e);
    }
    unlink(path);
    return 0;
}
