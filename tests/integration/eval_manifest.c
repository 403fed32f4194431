/* For eval_cli.sh: completes a checkpoint epoch that the shards wrote on request (pserver_client
 * checkpoint E) the way the coordinator does: reads each checkpoints/E/shard-<i> (verified by the
 * pserver's reader), writes checkpoints/E/MANIFEST with its checksums and row counts, then
 * checkpoints/LATEST = E (a file-input trainer cannot run under a coordinator).
 *   eval_manifest ROOT EPOCH SHARDS */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/coordinator.h"
#include "sparrow/ps_ckpt.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: eval_manifest ROOT EPOCH SHARDS\n");
        return 2;
    }
    const char *root = argv[1];
    uint64_t epoch = strtoull(argv[2], NULL, 10);
    uint32_t shards = (uint32_t)strtoul(argv[3], NULL, 10);
    struct spw_coord_manifest m = {0};
    m.epoch = epoch;
    m.shard_count = shards;
    m.checksums = calloc(shards, sizeof(*m.checksums));
    m.rows = calloc(shards, sizeof(*m.rows));
    if (!m.checksums || !m.rows)
        return 1;
    char err[512];
    for (uint32_t i = 0; i < shards; i++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64 "/shard-%u", root, epoch, i);
        spw_ps_ckpt_reader_t *r = spw_ps_ckpt_reader_open(dir, NULL, NULL, NULL, err, sizeof(err));
        if (!r) {
            fprintf(stderr, "%s: %s\n", dir, err);
            return 1;
        }
        snprintf(m.checksums[i], sizeof(m.checksums[i]), "%s", spw_ps_ckpt_reader_checksum(r));
        struct spw_ps_ckpt_row row;
        spw_err_t rc;
        while ((rc = spw_ps_ckpt_reader_next(r, &row, err, sizeof(err))) == SPW_OK)
            m.rows[i]++;
        spw_ps_ckpt_reader_close(r);
        if (rc != SPW_ERR_EOF) {
            fprintf(stderr, "%s: %s\n", dir, err);
            return 1;
        }
    }
    if (spw_coord_manifest_write(root, &m, err, sizeof(err)) != SPW_OK ||
        spw_coord_latest_write(root, epoch, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("epoch=%" PRIu64 " shards=%u rows=%" PRIu64 "\n", epoch, shards, m.rows[0]);
    free(m.checksums);
    free(m.rows);
    return 0;
}
