/* The local pipeline against the Kafka mock's fixed retention (5 MiB per partition): the examples
 * topic sized for a backlog, and the records the trainers lost to it, read from the logs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_int.h"
#include "sparrow/kafka.h"

long spw_pipeline__examples_partitions(const struct spw_pipeline_conf *c)
{
    if (!c->gen_n || !c->gen_first)
        return c->partitions; /* consumed as produced: the lag, not the stream, must fit */
    double hold = SPW_PIPELINE_RETENTION_USE * SPW_KAFKA_MOCK_RETENTION_BYTES;
    double need = ceil((double)c->gen_n * SPW_PIPELINE_EXAMPLE_BYTES / hold);
    if (need > SPW_PIPELINE_MAX_PARTITIONS)
        need = SPW_PIPELINE_MAX_PARTITIONS;
    return (long)need > c->partitions ? (long)need : c->partitions;
}

long spw_pipeline__examples_held(long partitions)
{
    return (long)(SPW_PIPELINE_RETENTION_USE * SPW_KAFKA_MOCK_RETENTION_BYTES * (double)partitions /
                  SPW_PIPELINE_EXAMPLE_BYTES);
}

/* Sum of " key=" over every line of path holding marker. */
static double sum_values(const char *path, const char *marker, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char pat[64], line[4096];
    snprintf(pat, sizeof(pat), " %s=", key);
    double sum = 0;
    while (fgets(line, sizeof(line), f)) {
        const char *e = strstr(line, marker) ? strstr(line, pat) : NULL;
        if (e)
            sum += strtod(e + strlen(pat), NULL);
    }
    fclose(f);
    return sum;
}

/* The records of topic examples the mock deleted, from its retention warnings (each partition's
 * last count: they are cumulative). */
static double mock_deleted_examples(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    double *last = calloc(SPW_PIPELINE_MAX_PARTITIONS, sizeof(*last));
    char line[4096];
    while (last && fgets(line, sizeof(line), f)) {
        const char *m = strstr(line, "deleted records to its retention topic=examples partition=");
        const char *d = m ? strstr(m, " deleted=") : NULL;
        if (!d)
            continue;
        long part = strtol(strchr(m, '=') + strlen("examples partition="), NULL, 10);
        if (part >= 0 && part < SPW_PIPELINE_MAX_PARTITIONS)
            last[part] = strtod(d + strlen(" deleted="), NULL);
    }
    fclose(f);
    double sum = 0;
    for (long i = 0; last && i < SPW_PIPELINE_MAX_PARTITIONS; i++)
        sum += last[i];
    free(last);
    return sum;
}

uint64_t spw_pipeline_lost_records(spw_pipeline_t *p)
{
    spw_launch_t *l = p->launch;
    double lost = 0;
    for (long t = 0; t < p->conf->trainers; t++) {
        char name[32];
        snprintf(name, sizeof(name), "trainer-%ld", t);
        int idx = spw_launch_find(l, name);
        if (idx >= 0)
            lost += sum_values(spw_launch_log(l, idx), "kafka offsets lost to retention", "lost");
    }
    /* a backlog is produced before any trainer reads: whatever the mock deleted of it is lost
     * (a group that starts after the deletion begins at the earliest record held, silently) */
    int mock = spw_launch_find(l, "kafka-mock");
    if (p->conf->gen_n && p->conf->gen_first && mock >= 0) {
        double deleted = mock_deleted_examples(spw_launch_log(l, mock));
        if (deleted > lost)
            lost = deleted;
    }
    return lost > 0 ? (uint64_t)lost : 0;
}
