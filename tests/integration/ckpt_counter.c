/* For coord_exactly_once.sh: reads checkpoints/LATEST under ROOT, its MANIFEST and every shard
 * checkpoint (verified against the manifest), and prints the epoch, the manifest's example count,
 * the counter row's w[0] and the Kafka offsets (partition:offset+skip):
 *   epoch=E examples=N counter=V offsets=0:12+0,1:9+0,... [marks=0/3:1200,...]
 * (exit 1 when the key is absent; marks: the source high-water marks, partition/source
 * partition:highest source offset trained).
 * With KEY "--dump" (sync_equivalence.sh) it prints every row instead, one per line:
 *   KEY VERSION W0 W1 ... (weights as %.9g, shards in order, keys ascending within a shard). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/coordinator.h"
#include "sparrow/ps_ckpt.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_counter ROOT KEY\n");
        return 2;
    }
    const char *root = argv[1];
    bool dump = strcmp(argv[2], "--dump") == 0;
    uint64_t key = dump ? 0 : strtoull(argv[2], NULL, 10);
    uint64_t epoch;
    if (spw_coord_latest_read(root, &epoch) != SPW_OK) {
        fprintf(stderr, "no readable %s/checkpoints/LATEST\n", root);
        return 1;
    }
    struct spw_coord_manifest m;
    char err[512];
    if (spw_coord_manifest_read(root, epoch, &m, err, sizeof(err)) != SPW_OK) {
        fprintf(stderr, "manifest of epoch %" PRIu64 ": %s\n", epoch, err);
        return 1;
    }
    int rc = 1;
    double counter = 0.0;
    if (dump)
        rc = 0;
    for (uint32_t i = 0; i < m.shard_count && (dump || rc != 0); i++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/checkpoints/%" PRIu64 "/shard-%u", root, epoch, i);
        spw_ps_ckpt_reader_t *r =
            spw_ps_ckpt_reader_open(dir, m.checksums[i], NULL, NULL, err, sizeof(err));
        if (!r) {
            fprintf(stderr, "%s: %s\n", dir, err);
            break;
        }
        struct spw_ps_ckpt_row row;
        spw_err_t e;
        uint32_t dim = spw_ps_ckpt_reader_meta(r)->dim;
        while ((e = spw_ps_ckpt_reader_next(r, &row, err, sizeof(err))) == SPW_OK) {
            if (dump) {
                printf("%" PRIu64 " %u", row.key, row.version);
                for (uint32_t d = 0; d < dim; d++)
                    printf(" %.9g", row.data[d]);
                printf("\n");
            } else if (row.key == key) {
                counter = row.data[0];
                rc = 0;
                break;
            }
        }
        if (e != SPW_OK && e != SPW_ERR_EOF) {
            fprintf(stderr, "%s: %s\n", dir, err);
            if (dump)
                rc = 1;
        }
        spw_ps_ckpt_reader_close(r);
    }
    if (dump) {
        /* the rows are the output */
    } else if (rc == 0) {
        printf("epoch=%" PRIu64 " examples=%" PRIu64 " counter=%.1f offsets=", epoch,
               m.example_count, counter);
        const char *sep = "";
        for (size_t i = 0; i < m.n_offsets; i++) {
            if (m.offsets[i].mark)
                continue;
            printf("%s%d:%" PRId64 "+%u", sep, (int)m.offsets[i].partition, m.offsets[i].offset,
                   m.offsets[i].skip);
            sep = ",";
        }
        /* source high-water marks: partition/source partition:highest source offset */
        sep = " marks=";
        for (size_t i = 0; i < m.n_offsets; i++) {
            if (!m.offsets[i].mark)
                continue;
            printf("%s%d/%d:%" PRId64, sep, (int)m.offsets[i].partition,
                   (int)m.offsets[i].source_partition, m.offsets[i].offset);
            sep = ",";
        }
        printf("\n");
    } else {
        fprintf(stderr, "key %" PRIu64 " not in epoch %" PRIu64 "\n", key, epoch);
    }
    spw_coord_manifest_fini(&m);
    return rc;
}
