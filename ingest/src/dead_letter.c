/* Dead letters: an invalid event goes to the dead-letter output unchanged, with why and where it
 * came from in headers (a file output: one tab-separated line per event). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "role_int.h"
#include "sparrow/log.h"

void spw_ingest__dead_letter(struct spw_ingest *in, const void *key, size_t key_len,
                             const void *data, size_t len, int32_t partition, int64_t offset,
                             const struct spw_parse_error *perr)
{
    char part_text[16], off_text[24];
    const char *reason = spw_reject_reason_name(perr->reason);
    snprintf(part_text, sizeof(part_text), "%" PRId32, partition);
    snprintf(off_text, sizeof(off_text), "%" PRId64, offset);
    /* A file sink writes the first four and the event: keep this order. */
    struct spw_kafka_header hdrs[5] = {
        {"reason", reason, strlen(reason)},
        {"source.topic", in->in_label, strlen(in->in_label)},
        {"source.partition", part_text, strlen(part_text)},
        {"source.offset", off_text, strlen(off_text)},
        {"detail", perr->message, strnlen(perr->message, sizeof(perr->message))},
    };
    in->n_rejected++;
    if ((unsigned)perr->reason < SPW_REJECT__COUNT)
        in->rejected_by[perr->reason]++;
    if (in->m_rejected[perr->reason])
        spw_counter_inc(in->m_rejected[perr->reason]);
    SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "event dead-lettered",
                        "reason=%s partition=%" PRId32 " offset=%" PRId64 " detail=\"%s\"", reason,
                        partition, offset, perr->message);
    spw_ingest__sink_send(in, &in->dlq, key, key_len, data, len, hdrs, 5);
}
