/* trainer: private declarations of the worker loop's files (loop*.c; not API). */
#ifndef SPARROW_LOOP_INT_H
#define SPARROW_LOOP_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/arena.h"
#include "sparrow/ingest.h"
#include "sparrow/metrics.h"
#include "sparrow/trainer_loop.h"

#include "sparrow/kafka.h"

/* Budget of the input arena: one decoded file record, or one Kafka record's ExampleBatch (whose
 * bytes are bounded by max_record_bytes; decoding expands them by a small factor). */
#define SPW_TRN__SOURCE_ARENA_MIN (64u << 20)

/* A partition's input state (Kafka). Index = partition number. */
struct spw_trn__part {
    bool assigned;
    bool touched;      /* read from since the last snapshot */
    int64_t offset;    /* position after the examples taken: next record ... */
    uint32_t skip;     /* ... and examples of it already taken */
    int64_t skip_at;   /* a resume position from on_assign: skip examples of this record */
    uint32_t skip_n;   /* (-1: none) */
    bool stored_valid; /* stored_*: the last position handed to the consumer */
    int64_t stored_offset;
    uint32_t stored_skip;
    uint64_t stored_taken; /* taken at the stored position (0 before the first store) */
    uint64_t taken;        /* valid examples handed out since the assignment */
};

/* Source high-water marks (docs/ARCHITECTURE.md §5) a trainer keeps, over every partition, and
 * distinct raw-event topics it names; beyond them examples are trained without the check (and
 * counted in sparrow_trainer_duplicates_unchecked_total). */
#define SPW_TRN__MAX_SMARKS  65536u
#define SPW_TRN__MAX_STOPICS 64u

/* One source high-water mark: of (examples partition `part`, raw-event partition (stopic, spart))
 * the highest source offset taken (live) and the one whose pushes are acknowledged (stored; -1
 * none). Order is kept per such pair, so an example at or below `live` is a duplicate. */
struct spw_trn__smark {
    int32_t part;
    uint32_t stopic; /* index into src->stopics */
    int32_t spart;
    int64_t live, stored;
    bool dirty; /* live moved since the last snapshot */
};

/*
 * The loop's input: a file reader (one Example per record) or a Kafka group consumer (one
 * ExampleBatch per record). Owned by the loop's thread; Kafka callbacks run inside next().
 */
struct spw_trn__source {
    bool kafka;
    struct spw_ingest_limits limits;
    spw_arena_t *arena;
    uint64_t records;
    uint64_t rejected[SPW_REJECT__COUNT]; /* by reason; [0] = invalid for the batch */
    spw_counter_t *m_rejected[SPW_REJECT__COUNT];
    spw_counter_t *m_records;
    /* file */
    spw_reader_t *reader;
    spw_schema_t *schema;
    char fail[160]; /* why the reader failed (a read error, a damaged gzip file) */
    /* Kafka */
    const struct spw_trainer_hooks *hooks; /* the loop's (borrowed) */
    spw_trainer_loop_t *loop;
    size_t max_record_bytes;
    char *topic;
    void *consumer; /* spw_kafka_consumer_t */
    bool closing;   /* the consumer is closing: its final revoke is not the hooks' business */
    struct spw_kafka_msg msg;
    bool have_msg;
    int32_t cur_part;
    int64_t cur_offset;
    Sparrow__ExampleBatch *eb;
    size_t next_ex;
    struct spw_trn__part *parts;
    size_t n_parts; /* entries (highest partition seen + 1) */
    bool lost;      /* offsets lost to retention were reported */
    struct spw_trn__smark *smarks;
    size_t n_smarks, cap_smarks, last_smark; /* last_smark: the last hit (a lookup hint) */
    char *stopics[SPW_TRN__MAX_STOPICS];
    size_t n_stopics;
    uint64_t duplicates, unchecked;
    spw_counter_t *m_duplicates, *m_unchecked;
};

/* Opens a file source for "PATH" (after "file:"). SPW_OK or an error with errstr. */
spw_err_t spw_trn__source_open_file(struct spw_trn__source *src, const char *path,
                                    const struct spw_trainer_loop_conf *conf, char *errstr,
                                    size_t errstr_size);

/* Opens a Kafka source for "BOOTSTRAP/TOPIC" (after "kafka://"). hooks and loop are borrowed
 * for the assignment callbacks. SPW_ERR_UNSUPPORTED without the Kafka library. */
spw_err_t spw_trn__source_open_kafka(struct spw_trn__source *src, const char *url,
                                     const struct spw_trainer_loop_conf *conf,
                                     const struct spw_trainer_hooks *hooks,
                                     spw_trainer_loop_t *loop, char *errstr, size_t errstr_size);

/* Leaves the group (Kafka) and frees everything. Safe on a zeroed source. */
void spw_trn__source_close(struct spw_trn__source *src);

/*
 * The next example (valid until the next call). SPW_OK; SPW_ERR_EOF at the end of a file;
 * SPW_ERR_TIMEOUT when Kafka had nothing within timeout_ms; SPW_ERR_INVALID for a record or
 * example that was counted (by *reason) and skipped (call again); SPW_ERR_IO, SPW_ERR_NOMEM,
 * SPW_ERR_CORRUPT (offsets lost, strict) or SPW_ERR_KAFKA otherwise.
 */
spw_err_t spw_trn__source_next(struct spw_trn__source *src, int timeout_ms, Sparrow__Example **ex);

/* Kafka input held (spw_kafka_consumer_serve: rebalances served, nothing consumed, at most
 * timeout_ms) and released again. No-ops for file input. */
spw_err_t spw_trn__source_hold(struct spw_trn__source *src, int timeout_ms);
spw_err_t spw_trn__source_release(struct spw_trn__source *src);

/* Counts one example the batch refused (reason index 0). */
void spw_trn__source_reject(struct spw_trn__source *src);

/* Calls fn for every partition read from since the last call, with its position now and its
 * examples taken, then smark_fn for every source high-water mark moved since (value: the highest
 * source offset taken), and clears the marks. Returns the first non-zero return of a callback (the
 * marks of later partitions are kept then). */
spw_err_t spw_trn__source_snapshot(struct spw_trn__source *src,
                                   spw_err_t (*fn)(void *opaque, int32_t part, int64_t offset,
                                                   uint32_t skip, uint64_t taken),
                                   spw_err_t (*smark_fn)(void *opaque, int32_t part,
                                                         uint32_t stopic, int32_t spart,
                                                         int64_t value),
                                   void *opaque);

/* The acknowledged value of a source high-water mark (from a snapshot): ignored for partitions
 * no longer assigned. */
void spw_trn__source_store_smark(struct spw_trn__source *src, int32_t part, uint32_t stopic,
                                 int32_t spart, int64_t value);

/* The filter on its own: true when (part, stopic, spart, offset) is at or below the live mark
 * (a duplicate: counted); else the mark moves to offset. stopic NULL or beyond the limits:
 * false (counted as unchecked). */
bool spw_trn__source_duplicate(struct spw_trn__source *src, int32_t part, const char *stopic,
                               int32_t spart, int64_t offset);

/* Sets a mark's live and stored value (a recovery's manifest). SPW_ERR_NOMEM, SPW_ERR_TOO_BIG
 * beyond the limits. */
spw_err_t spw_trn__source_set_smark(struct spw_trn__source *src, int32_t part, const char *stopic,
                                    int32_t spart, int64_t value);

/* Stored marks of assigned partitions with a value (see spw_trainer_loop_marks). */
size_t spw_trn__source_smarks(const struct spw_trn__source *src, struct spw_trainer_mark *out,
                              size_t n_max);

/* Hands a partition's position to the consumer (offset only; skip and taken, the partition's
 * examples handed out up to the position, are kept for checkpoints). *stored is set when the
 * consumer was given a new offset. Ignored for partitions no longer assigned. */
spw_err_t spw_trn__source_store(struct spw_trn__source *src, int32_t part, int64_t offset,
                                uint32_t skip, uint64_t taken, bool *stored);

/* Positions of the assigned partitions as last stored (see spw_trainer_loop_checkpoint). */
size_t spw_trn__source_positions(const struct spw_trn__source *src,
                                 struct spw_trainer_position *out, size_t n_max);

/* Seeks every assigned partition to resume()'s position (see spw_trainer_loop_restore): the
 * current record is released, resume positions are skipped into as on assignment, and the
 * stored positions become the resume positions. */
spw_err_t spw_trn__source_seek(struct spw_trn__source *src, spw_trainer_resume_fn resume,
                               void *opaque);
/* Commits stored offsets (Kafka). */
spw_err_t spw_trn__source_commit(struct spw_trn__source *src, bool sync);

/* ---- in-process shards (loop_inproc.c) ---- */

struct spw_trn__inproc {
    spw_ps_store_t **stores;
    /* per store, its slab ahead of its rows as of the last spw_trn__inproc_note_ahead */
    struct spw_ps_slab_range *ahead;
    uint32_t n;
    char *root;     /* directory of the shards' databases */
    bool temporary; /* root is removed at close */
};

/* Opens n stores under conf->inproc_dir (or a new temporary directory) with the trainer's local
 * optimizer settings (params: optimizer, lr, eps, init_scale, seed). */
spw_err_t spw_trn__inproc_open(struct spw_trn__inproc *ip, const struct spw_trainer_loop_conf *conf,
                               char *errstr, size_t errstr_size);
/* Closes the stores and removes a temporary root. Safe on a zeroed struct. */
void spw_trn__inproc_close(struct spw_trn__inproc *ip);

/* Notes each store's slab ahead of its rows (spw_ps_store_slab_ahead). The stores' thread. */
void spw_trn__inproc_note_ahead(struct spw_trn__inproc *ip);

/* Populates the ranges the last note_ahead gave, for the stores' next new rows, 2 MiB at a time
 * until done or *stop is set (the rest is faulted in by the stores' thread as it writes rows).
 * Any one thread, ordered after note_ahead, also while the stores' thread uses the stores (it
 * changes no memory). */
void spw_trn__inproc_populate_ahead(const struct spw_trn__inproc *ip, const atomic_bool *stop);

#endif
