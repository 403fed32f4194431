/* The end-of-input verdict of a role that reads examples: nothing accepted, or too much rejected,
 * is the user's mistake (a wrong format, a compressed file), named, not a quiet success. */
#include "sparrow/ingest.h"

#include <inttypes.h>
#include <stdio.h>

spw_err_t spw_ingest_reject_check(const char *in, uint64_t records, uint64_t rejected,
                                  const uint64_t *by_reason, double max_ratio,
                                  const char *ratio_prop, const char *explain, char *errstr,
                                  size_t errstr_size)
{
    const char *sep = explain && explain[0] ? "; " : "";
    if (records == 0) {
        snprintf(errstr, errstr_size, "%s: no record in the input (it is empty)%s%s", in, sep,
                 explain ? explain : "");
        return SPW_ERR_INVALID;
    }
    if (rejected < records && (double)rejected <= max_ratio * (double)records)
        return SPW_OK;
    unsigned top = 0;
    for (unsigned r = 1; by_reason && r < SPW_REJECT__COUNT; r++)
        if (by_reason[r] > by_reason[top])
            top = r;
    char most[64] = "";
    if (by_reason && top > 0 && by_reason[top] > 0)
        snprintf(most, sizeof(most), ", most as %s",
                 spw_reject_reason_name((enum spw_reject_reason)top));
    snprintf(errstr, errstr_size,
             "%s: %" PRIu64 " of %" PRIu64 " records rejected (%.3g%%, above %s=%g)%s%s%s", in,
             rejected, records, 100.0 * (double)rejected / (double)records, ratio_prop, max_ratio,
             most, sep, explain ? explain : "");
    return SPW_ERR_INVALID;
}
