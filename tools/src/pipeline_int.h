/* Not API: the pipeline handle's fields, shared by tools/src/pipeline*.c. */
#ifndef SPARROW_PIPELINE_INT_H
#define SPARROW_PIPELINE_INT_H

#include "sparrow/pipeline.h"

#define SPW_PIPELINE_PATH_MAX 1200

struct spw_pipeline {
    const struct spw_pipeline_conf *conf; /* borrowed */
    spw_launch_t *launch;                 /* owned */
    char bootstrap[512];                  /* kafka-mock's HOST:PORT */
    char examples_url[600];               /* kafka://HOST:PORT/examples */
    long examples_partitions;             /* spw_pipeline__examples_partitions */
    char coord[64];                       /* the coordinator's endpoint */
    char shard_list[SPW_PIPELINE_MAX_SHARDS * 32];
    int shard_port[SPW_PIPELINE_MAX_SHARDS], shard_http[SPW_PIPELINE_MAX_SHARDS];
    int trainer_http[SPW_PIPELINE_MAX_TRAINERS];
    int serve_http;      /* 0: serve does not run */
    uint64_t resumed_ms; /* spw_pipeline_resumed_ms */
    /* every port handed out so far (spw_pipeline__port), so that no two roles get the same */
    int ports[2 * SPW_PIPELINE_MAX_SHARDS + SPW_PIPELINE_MAX_TRAINERS + 2];
    size_t n_ports;
};

/* A free loopback port that this pipeline has not handed out before; 0 when none was found. */
int spw_pipeline__port(spw_pipeline_t *p);

/* Bytes an example of gen's default stream (39 fields) takes in the examples topic: about 530 in
 * its ExampleBatch record (a length-delimited Example per example), rounded up for the batch's
 * framing; the retention sizing's estimate. */
#define SPW_PIPELINE_EXAMPLE_BYTES 600.0
/* Share of the mock's retention a backlog is sized to fill (the rest is margin). */
#define SPW_PIPELINE_RETENTION_USE 0.8

/* The partitions of the examples topic: conf->partitions, or for a backlog (gen_first, a finite
 * stream produced before any trainer reads) enough that the stream fits the mock's retention
 * (SPW_KAFKA_MOCK_RETENTION_BYTES per partition, SPW_PIPELINE_RETENTION_USE of it), at most
 * SPW_PIPELINE_MAX_PARTITIONS. Pure. */
long spw_pipeline__examples_partitions(const struct spw_pipeline_conf *c);

/* Examples that partitions of the examples topic hold before the mock deletes the oldest. */
long spw_pipeline__examples_held(long partitions);

#endif
