/* The offsets a completed checkpoint epoch records: the trainers' Kafka offsets merged into the
 * previous manifest's, the examples counted, and the model-update stream's per-partition minima
 * over the shards. Pure functions over caller-owned arrays (no server state, no I/O). */
#include <stdio.h>
#include <string.h>

#include "coord_int.h"

static bool same_partition(const struct spw_coord_offset *a, const struct spw_coord_offset *b)
{
    if (a->partition != b->partition || a->mark != b->mark || strcmp(a->topic, b->topic) != 0)
        return false;
    return !a->mark || (a->source_partition == b->source_partition &&
                        strcmp(a->source_topic, b->source_topic) == 0);
}

void spw_coord__offset_to_pb(const struct spw_coord_offset *o, Sparrow__PartitionOffset *pb)
{
    sparrow__partition_offset__init(pb);
    pb->topic = (char *)o->topic;
    pb->has_partition = pb->has_offset = true;
    pb->partition = o->partition;
    pb->offset = o->offset;
    if (o->mark) {
        pb->has_source_partition = true;
        pb->source_partition = o->source_partition;
        pb->source_topic = (char *)o->source_topic;
    } else {
        pb->has_skip = true;
        pb->skip = o->skip;
    }
}

void spw_coord__offset_from_pb(const Sparrow__PartitionOffset *pb, struct spw_coord_offset *o)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->topic, sizeof(o->topic), "%s", pb->topic ? pb->topic : "");
    o->partition = pb->partition;
    o->offset = pb->offset;
    o->skip = pb->skip;
    if (pb->has_source_partition) {
        o->mark = true;
        o->skip = 0;
        o->source_partition = pb->source_partition;
        snprintf(o->source_topic, sizeof(o->source_topic), "%s",
                 pb->source_topic ? pb->source_topic : "");
    }
}

/* The index of o's partition in v[0..n), or n when absent. */
static size_t find_partition(const struct spw_coord_offset *v, size_t n,
                             const struct spw_coord_offset *o)
{
    size_t k = 0;
    while (k < n && !same_partition(&v[k], o))
        k++;
    return k;
}

size_t spw_coord__offsets_merge(struct spw_coord_offset *out, const struct spw_coord_offset *base,
                                size_t n_base, const struct spw_coord__report *reports,
                                size_t n_reports)
{
    size_t n = 0;
    for (size_t i = 0; i < n_base; i++)
        out[n++] = base[i];
    for (size_t r = 0; r < n_reports; r++) {
        const struct spw_coord__offsets *rep = &reports[r].offsets;
        for (size_t j = 0; j < rep->n; j++) {
            size_t k = find_partition(out, n, &rep->v[j]);
            out[k] = rep->v[j]; /* offset and skip both: the report is the newer position */
            if (k == n)
                n++;
        }
    }
    return n;
}

uint64_t spw_coord__examples_merge(uint64_t base, const struct spw_coord__report *reports,
                                   size_t n_reports)
{
    uint64_t examples = base;
    for (size_t r = 0; r < n_reports; r++)
        if (reports[r].examples_reported > reports[r].examples_counted)
            examples += reports[r].examples_reported - reports[r].examples_counted;
    return examples;
}

size_t spw_coord__update_offsets_min(struct spw_coord_offset *out,
                                     const struct spw_coord__offsets *shards, size_t n_shards)
{
    if (n_shards == 0)
        return 0;
    for (size_t i = 0; i < n_shards; i++)
        if (shards[i].n == 0)
            return 0;
    size_t n = 0;
    for (size_t j = 0; j < shards[0].n; j++) {
        struct spw_coord_offset o = shards[0].v[j];
        bool everywhere = true;
        for (size_t i = 1; i < n_shards && everywhere; i++) {
            size_t k = find_partition(shards[i].v, shards[i].n, &o);
            everywhere = k < shards[i].n;
            if (everywhere && shards[i].v[k].offset < o.offset)
                o.offset = shards[i].v[k].offset;
        }
        if (everywhere)
            out[n++] = o;
    }
    return n;
}
