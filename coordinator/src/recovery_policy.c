/* The recovery policy (coordinator.recovery): which membership events roll everyone back. */
#include <string.h>

#include "sparrow/coordinator.h"

bool spw_coord_recovery_rolls_back(enum spw_coord_recovery policy,
                                   enum spw_coord_member_event event)
{
    if (policy == SPW_COORD_RECOVERY_ROLLBACK)
        return true;
    /* continue: a trainer's state is its own (what it pushed stays applied, its partitions'
     * positions since LATEST are re-read by their next owner); a restarted shard lost rows that
     * every trainer's pushes since LATEST built on, and the shards' checkpoints must agree on one
     * epoch, so only a global restore makes the model consistent again */
    return event == SPW_COORD_EVENT_SHARD_RESTARTED;
}

spw_err_t spw_coord_recovery_parse(const char *s, enum spw_coord_recovery *out)
{
    if (s && strcmp(s, "rollback") == 0)
        *out = SPW_COORD_RECOVERY_ROLLBACK;
    else if (s && strcmp(s, "continue") == 0)
        *out = SPW_COORD_RECOVERY_CONTINUE;
    else
        return SPW_ERR_INVALID;
    return SPW_OK;
}
