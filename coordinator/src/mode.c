/* Trainer modes: parsing and the clock rules of async, sync, ssp:S, hybrid:K and group:G. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sparrow/coordinator.h"

static spw_err_t parse_param(const char *text, int64_t min, int64_t max, uint32_t *out)
{
    int64_t v;
    if (spw_parse_int64(text, &v) != SPW_OK || v < min || v > max)
        return SPW_ERR_INVALID;
    *out = (uint32_t)v;
    return SPW_OK;
}

spw_err_t spw_coord_mode_parse(const char *text, struct spw_coord_mode *out)
{
    struct spw_coord_mode m = {0};
    if (strcmp(text, "async") == 0) {
        m.kind = SPW_COORD_ASYNC;
    } else if (strcmp(text, "sync") == 0) {
        m.kind = SPW_COORD_SYNC;
    } else if (strncmp(text, "ssp:", 4) == 0) {
        m.kind = SPW_COORD_SSP;
        if (parse_param(text + 4, 0, 1000000, &m.param) != SPW_OK)
            return SPW_ERR_INVALID;
    } else if (strncmp(text, "hybrid:", 7) == 0) {
        m.kind = SPW_COORD_HYBRID;
        if (parse_param(text + 7, 1, 1000000000, &m.param) != SPW_OK)
            return SPW_ERR_INVALID;
    } else if (strncmp(text, "group:", 6) == 0) {
        m.kind = SPW_COORD_GROUP;
        if (parse_param(text + 6, 1, SPW_COORD_MAX_MEMBERS, &m.param) != SPW_OK)
            return SPW_ERR_INVALID;
    } else {
        return SPW_ERR_INVALID;
    }
    *out = m;
    return SPW_OK;
}

void spw_coord_mode_format(const struct spw_coord_mode *mode, char *buf, size_t size)
{
    switch (mode->kind) {
    case SPW_COORD_ASYNC:
        snprintf(buf, size, "async");
        break;
    case SPW_COORD_SYNC:
        snprintf(buf, size, "sync");
        break;
    case SPW_COORD_SSP:
        snprintf(buf, size, "ssp:%" PRIu32, mode->param);
        break;
    case SPW_COORD_HYBRID:
        snprintf(buf, size, "hybrid:%" PRIu32, mode->param);
        break;
    case SPW_COORD_GROUP:
        snprintf(buf, size, "group:%" PRIu32, mode->param);
        break;
    }
}

bool spw_coord_mode_two_phase(const struct spw_coord_mode *mode)
{
    return mode->kind == SPW_COORD_SYNC || mode->kind == SPW_COORD_GROUP;
}

bool spw_coord_mode_barrier(const struct spw_coord_mode *mode, uint64_t clock)
{
    return mode->kind == SPW_COORD_HYBRID && clock > 0 && clock % mode->param == 0;
}

bool spw_coord_mode_may_proceed(const struct spw_coord_mode *mode, uint64_t clock,
                                uint64_t min_clock)
{
    switch (mode->kind) {
    case SPW_COORD_ASYNC:
        return true;
    case SPW_COORD_SYNC:
    case SPW_COORD_GROUP: /* the server releases by the unit's commits (step_rule.c) */
        return min_clock >= clock;
    case SPW_COORD_SSP:
        return clock <= min_clock || clock - min_clock <= mode->param;
    case SPW_COORD_HYBRID:
        return !spw_coord_mode_barrier(mode, clock) || min_clock >= clock;
    }
    return true;
}
