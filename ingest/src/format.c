/* Names of the raw event formats and of the reasons a record is refused. */
#include "sparrow/ingest.h"

#include <string.h>

static const char *const format_names[] = {"pb", "json", "criteo"};

spw_err_t spw_format_parse(const char *name, enum spw_format *out)
{
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, format_names[i]) == 0) {
            *out = (enum spw_format)i;
            return SPW_OK;
        }
    }
    return SPW_ERR_INVALID;
}

const char *spw_format_name(enum spw_format format)
{
    return format_names[format];
}

const char *spw_reject_reason_name(enum spw_reject_reason reason)
{
    static const char *const names[SPW_REJECT__COUNT] = {
        "none",      "undecodable",      "bad_label", "too_many_features",
        "bad_field", "nonfinite_weight", "oversized",
    };
    return (unsigned)reason < SPW_REJECT__COUNT ? names[reason] : "unknown";
}
