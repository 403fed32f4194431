/* Shared scaffolding of the wire fuzz targets: a reused arena and buffers, and the re-pack check.
 */
#ifndef SPARROW_FUZZ_WIRE_H
#define SPARROW_FUZZ_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/wire.h"

#define FUZZ_MAX_FRAME SPW_WIRE_DEFAULT_MAX_FRAME

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* One arena per process, reset per input; a budget keeps a hostile input from eating memory
 * (a spent budget is SPW_ERR_NOMEM, a clean rejection). */
static inline spw_arena_t *fuzz_arena(void)
{
    static spw_arena_t *arena;
    if (!arena) {
        arena = spw_arena_new(0, 512u << 20);
        FUZZ_CHECK(arena != NULL);
    }
    spw_arena_reset(arena);
    return arena;
}

/* Packs msg into *buf (replacing its contents); buffers are static and reused. */
static inline void fuzz_pack(const ProtobufCMessage *msg, struct spw_wire_buf *buf)
{
    buf->len = 0;
    FUZZ_CHECK(spw_wire_pack(msg, buf) == SPW_OK);
}

/* Folds bytes into a sink the optimiser cannot drop, so that ASan sees every byte read. */
static volatile uint64_t fuzz_sink;

static inline void fuzz_touch(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t acc = 0;
    for (size_t i = 0; i < len; i++)
        acc = acc * 31 + p[i];
    fuzz_sink += acc;
}

static inline void fuzz_touch_str(const char *s)
{
    if (s)
        fuzz_touch(s, strlen(s));
}

/*
 * The round trip every wire target checks on an accepted input:
 *   first  = pack(unpack(input))             must unpack again (validation agrees with packing)
 *   second = pack(unpack(first))             must equal first (packing is a fixed point)
 * UNPACK is the typed unpacker, TYPE its message type, TOUCH a function reading every field.
 */
#define FUZZ_WIRE_ROUND_TRIP(UNPACK, TYPE, TOUCH, data, size)                                      \
    do {                                                                                           \
        static struct spw_wire_buf first, second;                                                  \
        spw_arena_t *arena_ = fuzz_arena();                                                        \
        TYPE *msg_ = NULL;                                                                         \
        spw_err_t rc_ = UNPACK((data), (size), FUZZ_MAX_FRAME, arena_, &msg_);                     \
        FUZZ_CHECK(rc_ == SPW_OK || rc_ == SPW_ERR_INVALID || rc_ == SPW_ERR_NOMEM);               \
        if (rc_ != SPW_OK)                                                                         \
            return 0;                                                                              \
        TOUCH(msg_);                                                                               \
        fuzz_pack(&msg_->base, &first);                                                            \
        TYPE *again_ = NULL;                                                                       \
        rc_ = UNPACK(first.data, first.len, FUZZ_MAX_FRAME, arena_, &again_);                      \
        FUZZ_CHECK(rc_ == SPW_OK);                                                                 \
        TOUCH(again_);                                                                             \
        fuzz_pack(&again_->base, &second);                                                         \
        FUZZ_CHECK(first.len == second.len);                                                       \
        FUZZ_CHECK(first.len == 0 || memcmp(first.data, second.data, first.len) == 0);             \
    } while (0)

#endif
