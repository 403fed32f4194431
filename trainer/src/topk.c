/* trainer: top-k compression of gradient rows with error feedback and a bounded residual table. */
#include "trainer_int.h"

#include "sparrow/hash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/wire.h"

/*
 * The residual table is a pool of slots (key, dim floats, version) linked oldest to newest, plus a
 * key index. A step first takes every residual of its keys out of the table (the row becomes
 * gradient + residual), and puts the unsent rows back as the newest, so "oldest" means "longest
 * since its key was last computed". The pool grows to residual_max_rows and is then reused.
 */
struct spw_topk {
    struct spw_topk_conf conf;
    spw_backend_t *be; /* borrowed; NULL: CPU functions */
    struct spw_topk_stats stats;
    uint64_t rng; /* SPW_TOPK_ROUND_STOCHASTIC's xorshift64* state */

    /* per-step scratch */
    float *norms;
    uint8_t *selected;
    uint8_t *pinned; /* the rows that rank first (dense blocks) */
    uint64_t *scratch;
    /* with fp16: the residual slot each step row's key had, held out of the age list (and out of
     * count) while the step may reuse it for the row's rounding error; SPW_TRN__NONE: none */
    uint32_t *step_slot;
    size_t detached; /* slots held so */
    size_t cap_norms, cap_selected, cap_pinned, cap_scratch, cap_step_slot;

    /* the push set */
    size_t out_n;
    uint64_t *out_keys;
    uint32_t *out_versions;
    float *out_values;
    uint16_t *out_f16;
    float *out_pulled; /* conf.pulled */
    uint32_t *out_src; /* the step row each sent row is (SPW_TRN__NONE: a residual sent alone) */
    size_t cap_out_keys, cap_out_versions, cap_out_values, cap_out_f16, cap_out_pulled, cap_out_src;

    /* residual table */
    struct spw_trn__keyidx index; /* key -> slot */
    uint64_t *res_keys;
    float *res_values;
    float *res_pulled; /* conf.pulled: the values each residual's gradient was computed from */
    uint32_t *res_versions;
    /* 1: the residual is the fp16 rounding error of a row sent at res_versions, and is pushed
     * with the version that push gave the row (one more), so that the shard measures its
     * staleness from there; resets are still judged by res_versions */
    uint8_t *res_post;
    uint32_t *prev, *next; /* age list; SPW_TRN__NONE ends it; next also links the free list */
    size_t pool_cap;       /* slots allocated */
    size_t pool_used;      /* slots ever handed out (the rest are fresh) */
    size_t count;          /* live residuals */
    uint32_t head, tail;   /* oldest, newest */
    uint32_t free_head;
};

/* Whether fp16 rounding errors are kept as residuals (error feedback of the rounding). */
static bool keeps_f16_errors(const spw_topk_t *tk)
{
    return tk->conf.fp16 && tk->conf.error_feedback && tk->conf.rounding == SPW_TOPK_ROUND_FEEDBACK;
}

spw_topk_t *spw_topk_new(const struct spw_topk_conf *conf, spw_backend_t *be, char *errstr,
                         size_t errstr_size)
{
    if (conf->dim < 1 || conf->dim > SPW_TRN_MAX_LATENT + 1 || !(conf->ratio > 0.0) ||
        conf->ratio > 1.0 || conf->residual_max_rows >= UINT32_MAX) {
        snprintf(errstr, errstr_size,
                 "topk: invalid configuration (dim %u, ratio %g, residual max rows %zu)", conf->dim,
                 conf->ratio, conf->residual_max_rows);
        return NULL;
    }
    if (be && spw_backend_model(be)->dim != conf->dim) {
        snprintf(errstr, errstr_size, "topk: backend rows have dim %u, compressor %u",
                 spw_backend_model(be)->dim, conf->dim);
        return NULL;
    }
    spw_topk_t *tk = calloc(1, sizeof(*tk));
    if (!tk) {
        snprintf(errstr, errstr_size, "topk: out of memory");
        return NULL;
    }
    tk->conf = *conf;
    tk->rng = spw_hash_mix64(conf->seed ^ UINT64_C(0x5eed0f16)) | 1; /* xorshift: never 0 */
    tk->be = be;
    spw_trn__keyidx_init(&tk->index);
    tk->head = tk->tail = tk->free_head = SPW_TRN__NONE;
    return tk;
}

void spw_topk_destroy(spw_topk_t *tk)
{
    if (!tk)
        return;
    free(tk->norms);
    free(tk->selected);
    free(tk->pinned);
    free(tk->scratch);
    free(tk->step_slot);
    free(tk->out_src);
    free(tk->out_keys);
    free(tk->out_versions);
    free(tk->out_values);
    free(tk->out_f16);
    free(tk->out_pulled);
    free(tk->res_pulled);
    spw_trn__keyidx_fini(&tk->index);
    free(tk->res_keys);
    free(tk->res_values);
    free(tk->res_versions);
    free(tk->res_post);
    free(tk->prev);
    free(tk->next);
    free(tk);
}

static spw_err_t reserve_out(spw_topk_t *tk, size_t n)
{
    size_t dim = tk->conf.dim;
    if (spw_trn__grow((void **)&tk->out_keys, &tk->cap_out_keys, n, sizeof(uint64_t)) ||
        spw_trn__grow((void **)&tk->out_versions, &tk->cap_out_versions, n, sizeof(uint32_t)) ||
        spw_trn__grow((void **)&tk->out_values, &tk->cap_out_values, n * dim, sizeof(float)) ||
        spw_trn__grow((void **)&tk->out_src, &tk->cap_out_src, n, sizeof(uint32_t)) ||
        (tk->conf.fp16 &&
         spw_trn__grow((void **)&tk->out_f16, &tk->cap_out_f16, n * dim, sizeof(uint16_t))) ||
        (tk->conf.pulled &&
         spw_trn__grow((void **)&tk->out_pulled, &tk->cap_out_pulled, n * dim, sizeof(float))))
        return SPW_ERR_NOMEM;
    return SPW_OK;
}

/* pulled: the row's pulled values (dim floats; read only with conf.pulled). src: the step row
 * (SPW_TRN__NONE: a residual sent on its own). */
static void append_out(spw_topk_t *tk, uint64_t key, const float *values, uint32_t version,
                       const float *pulled, uint32_t src)
{
    size_t i = tk->out_n++;
    tk->out_src[i] = src;
    tk->out_keys[i] = key;
    tk->out_versions[i] = version;
    memcpy(tk->out_values + i * tk->conf.dim, values, tk->conf.dim * sizeof(float));
    if (tk->conf.pulled)
        memcpy(tk->out_pulled + i * tk->conf.dim, pulled, tk->conf.dim * sizeof(float));
}

/* The version a residual sent on its own is pushed with (see res_post). */
static uint32_t sent_version(const spw_topk_t *tk, uint32_t slot)
{
    return tk->res_versions[slot] + tk->res_post[slot];
}

/* Residual slot's pulled values (NULL without conf.pulled). */
static const float *res_pulled(const spw_topk_t *tk, uint32_t slot)
{
    return tk->conf.pulled ? tk->res_pulled + (size_t)slot * tk->conf.dim : NULL;
}

static spw_err_t keep_f16_errors(spw_topk_t *tk);

/* Packs the push set's values to fp16 (fp16: conf.fp16 and not a flush) and fills *out and the
 * byte counters. With error feedback the rounding error of every row sent as halves is kept as
 * that key's residual (keep_f16_errors). */
static spw_err_t finish_out(spw_topk_t *tk, struct spw_push_set *out, bool fp16)
{
    size_t dim = tk->conf.dim, vals = tk->out_n * dim;
    if (fp16 && vals) {
        if (tk->conf.rounding == SPW_TOPK_ROUND_STOCHASTIC)
            spw_wire_f32_to_f16_stochastic_n(tk->out_values, tk->out_f16, vals, &tk->rng);
        else
            spw_wire_f32_to_f16_n(tk->out_values, tk->out_f16, vals);
        /* The server applies the decoded halves: values must say exactly that (keep_f16_errors
         * writes them as it goes). */
        if (keeps_f16_errors(tk)) {
            spw_err_t err = keep_f16_errors(tk);
            if (err)
                return err;
        } else {
            spw_wire_f16_to_f32_n(tk->out_f16, tk->out_values, vals);
        }
    }
    tk->stats.rows_sent += tk->out_n;
    tk->stats.bytes_sent += tk->out_n * (SPW_TRN_PUSH_ROW_OVERHEAD + dim * (fp16 ? 2u : 4u));
    tk->stats.residual_rows = tk->count;
    *out = (struct spw_push_set){
        .n = tk->out_n,
        .dim = tk->conf.dim,
        .fp16 = fp16,
        .keys = tk->out_keys,
        .versions = tk->out_versions,
        .values = tk->out_values,
        .values_f16 = fp16 ? tk->out_f16 : NULL,
        .pulled = tk->conf.pulled ? tk->out_pulled : NULL,
    };
    return SPW_OK;
}

static void unlink_slot(spw_topk_t *tk, uint32_t slot)
{
    uint32_t p = tk->prev[slot], n = tk->next[slot];
    if (p != SPW_TRN__NONE)
        tk->next[p] = n;
    else
        tk->head = n;
    if (n != SPW_TRN__NONE)
        tk->prev[n] = p;
    else
        tk->tail = p;
    tk->next[slot] = tk->free_head;
    tk->free_head = slot;
    tk->count--;
}

/* A free slot, growing the pool up to residual_max_rows; SPW_TRN__NONE when out of memory. */
static uint32_t take_slot(spw_topk_t *tk)
{
    if (tk->free_head != SPW_TRN__NONE) {
        uint32_t slot = tk->free_head;
        tk->free_head = tk->next[slot];
        return slot;
    }
    if (tk->pool_used == tk->pool_cap) {
        size_t max = tk->conf.residual_max_rows, cap = tk->pool_cap * 2;
        if (cap < 1024)
            cap = 1024;
        if (cap > max)
            cap = max;
        size_t c1 = tk->pool_cap, c2 = tk->pool_cap, c3 = tk->pool_cap, c4 = tk->pool_cap;
        size_t c7 = tk->pool_cap;
        size_t c5 = tk->pool_cap * tk->conf.dim;
        if (spw_trn__grow((void **)&tk->res_keys, &c1, cap, sizeof(uint64_t)) ||
            spw_trn__grow((void **)&tk->res_versions, &c2, cap, sizeof(uint32_t)) ||
            spw_trn__grow((void **)&tk->res_post, &c7, cap, sizeof(uint8_t)) ||
            spw_trn__grow((void **)&tk->prev, &c3, cap, sizeof(uint32_t)) ||
            spw_trn__grow((void **)&tk->next, &c4, cap, sizeof(uint32_t)) ||
            spw_trn__grow((void **)&tk->res_values, &c5, cap * tk->conf.dim, sizeof(float)))
            return SPW_TRN__NONE;
        size_t c6 = tk->pool_cap * tk->conf.dim;
        if (tk->conf.pulled &&
            spw_trn__grow((void **)&tk->res_pulled, &c6, cap * tk->conf.dim, sizeof(float)))
            return SPW_TRN__NONE;
        /* spw_trn__grow may round up; the pool counts what every array holds. */
        tk->pool_cap = cap;
    }
    return (uint32_t)tk->pool_used++;
}

/* Fills slot with key's residual and links it as the newest; the index is the caller's. */
static void fill_slot(spw_topk_t *tk, uint32_t slot, uint64_t key, const float *values,
                      uint32_t version, const float *pulled)
{
    const size_t dim = tk->conf.dim;
    tk->res_keys[slot] = key;
    tk->res_versions[slot] = version;
    tk->res_post[slot] = 0;
    memcpy(tk->res_values + (size_t)slot * dim, values, dim * sizeof(float));
    if (tk->conf.pulled)
        memcpy(tk->res_pulled + (size_t)slot * dim, pulled, dim * sizeof(float));
    tk->prev[slot] = tk->tail;
    tk->next[slot] = SPW_TRN__NONE;
    if (tk->tail != SPW_TRN__NONE)
        tk->next[tk->tail] = slot;
    else
        tk->head = slot;
    tk->tail = slot;
    tk->count++;
}

/* Fills slot (taken by take_slot) with key's residual, links it as the newest and indexes it. */
static void link_residual(spw_topk_t *tk, uint32_t slot, uint64_t key, const float *values,
                          uint32_t version, const float *pulled)
{
    fill_slot(tk, slot, key, values, version, pulled);
    bool inserted;
    spw_trn__keyidx_upsert(&tk->index, key, slot, &inserted);
}

/* Takes slot out of the age list (and count), keeping it and its key's index entry for the step
 * to reuse (step_slot). */
static void detach_slot(spw_topk_t *tk, uint32_t slot)
{
    uint32_t p = tk->prev[slot], n = tk->next[slot];
    if (p != SPW_TRN__NONE)
        tk->next[p] = n;
    else
        tk->head = n;
    if (n != SPW_TRN__NONE)
        tk->prev[n] = p;
    else
        tk->tail = p;
    tk->count--;
    tk->detached++;
}

/* Frees every slot the step still holds (its key leaves the index). */
static void release_detached(spw_topk_t *tk, const uint64_t *keys, size_t n)
{
    for (size_t r = 0; r < n && tk->detached; r++) {
        uint32_t slot = tk->step_slot[r];
        if (slot == SPW_TRN__NONE)
            continue;
        spw_trn__keyidx_remove(&tk->index, keys[r]);
        tk->next[slot] = tk->free_head;
        tk->free_head = slot;
        tk->step_slot[r] = SPW_TRN__NONE;
        tk->detached--;
    }
}

/* Stores an unsent row as the newest residual, first sending the oldest when the table is full
 * (the push set has room: reserve_out covered every row of the step). */
static spw_err_t keep_residual(spw_topk_t *tk, uint64_t key, const float *values, uint32_t version,
                               const float *pulled)
{
    const size_t dim = tk->conf.dim;
    if (tk->conf.residual_max_rows == 0 ||
        (tk->count == 0 && tk->detached == tk->conf.residual_max_rows)) {
        /* no room, and nothing older to send instead (every slot is held by the step) */
        append_out(tk, key, values, version, pulled, SPW_TRN__NONE);
        tk->stats.rows_forced++;
        return SPW_OK;
    }
    if (tk->count + tk->detached >= tk->conf.residual_max_rows) {
        uint32_t old = tk->head;
        append_out(tk, tk->res_keys[old], tk->res_values + (size_t)old * dim, sent_version(tk, old),
                   res_pulled(tk, old), SPW_TRN__NONE);
        tk->stats.rows_forced++;
        spw_trn__keyidx_remove(&tk->index, tk->res_keys[old]);
        unlink_slot(tk, old);
    }
    uint32_t slot = take_slot(tk);
    if (slot == SPW_TRN__NONE)
        return SPW_ERR_NOMEM;
    link_residual(tk, slot, key, values, version, pulled);
    tk->stats.rows_kept++;
    return SPW_OK;
}

/* Error feedback of the fp16 rounding: for every row of the push set (out_f16 packed, out_values
 * still the f32 values), value - half(value) becomes the key's residual, so that sent (the
 * decoded half) + residual = computed; out_values receives the decoded halves. The push set's
 * keys are unique and none of them is in the age list any more (folded, or sent because the table
 * was full), so each error takes its key's held slot (step_slot) or a fresh one. A fresh slot is
 * taken only while the table has room: making room would send an older residual, whose own
 * rounding error would need a slot in turn. Errors that find no room, and non-finite ones (a
 * value beyond the half range: the shard refuses the row anyway), are counted in
 * fp16_errors_lost. */
static spw_err_t keep_f16_errors(spw_topk_t *tk)
{
    const size_t dim = tk->conf.dim;
    float err[SPW_TRN_MAX_LATENT + 1], half[SPW_TRN_MAX_LATENT + 1];
    for (size_t i = 0; i < tk->out_n; i++) {
        float *v = tk->out_values + i * dim;
        spw_wire_f16_to_f32_n(tk->out_f16 + i * dim, half, dim);
        bool any = false, finite = true;
        for (size_t j = 0; j < dim; j++) {
            err[j] = v[j] - half[j];
            v[j] = half[j];
            any |= err[j] != 0.0f;
            finite &= isfinite(err[j]) != 0;
        }
        if (!any)
            continue;
        uint32_t src = tk->out_src[i];
        uint32_t held = src != SPW_TRN__NONE && tk->step_slot ? tk->step_slot[src] : SPW_TRN__NONE;
        if (!finite ||
            (held == SPW_TRN__NONE && tk->count + tk->detached >= tk->conf.residual_max_rows)) {
            tk->stats.fp16_errors_lost++;
            continue;
        }
        const float *pulled = tk->conf.pulled ? tk->out_pulled + i * dim : NULL;
        uint32_t slot = held;
        if (held != SPW_TRN__NONE) { /* the key's slot, still indexed */
            fill_slot(tk, held, tk->out_keys[i], err, tk->out_versions[i], pulled);
            tk->step_slot[src] = SPW_TRN__NONE;
            tk->detached--;
        } else {
            if ((slot = take_slot(tk)) == SPW_TRN__NONE)
                return SPW_ERR_NOMEM;
            link_residual(tk, slot, tk->out_keys[i], err, tk->out_versions[i], pulled);
        }
        tk->res_post[slot] = 1;
        tk->stats.fp16_errors_kept++;
    }
    return SPW_OK;
}

/* Frees the residual in slot, whose key is out of the index already, as a drop. */
static void drop_slot(spw_topk_t *tk, uint32_t slot)
{
    unlink_slot(tk, slot);
    tk->stats.rows_dropped++;
    tk->stats.residual_rows = tk->count;
}

/* Whether the shard's row was reset since a residual was computed from it: its version now (the
 * step's pulled one) is older than the residual's (wrapping compare). A row's version only grows
 * while it lives; it starts again at 0 when the shard evicts the row (TTL) and creates it anew.
 * A residual of version 0 is never reset: a row that had no update is re-created bit-identical
 * (its initial values come from key and seed). The pull reply's versions are the whole signal:
 * a re-created row that other trainers pushed to as often as the old one had been before this
 * trainer pulls it again goes unnoticed. */
static bool row_reset(uint32_t residual_version, uint32_t pulled_version)
{
    return (int32_t)(pulled_version - residual_version) < 0;
}

spw_err_t spw_topk_compress(spw_topk_t *tk, const uint64_t *keys, float *grads,
                            const uint32_t *versions, size_t n, struct spw_push_set *out)
{
    return spw_topk_compress_pulled(tk, keys, grads, versions, NULL, n, out);
}

/* key's residual slot (SPW_TRN__NONE: none), with the lines its fold will touch hinted. */
static uint32_t find_hinted(const spw_topk_t *tk, uint64_t key)
{
    uint32_t slot = spw_trn__keyidx_find(&tk->index, key);
    if (slot != SPW_TRN__NONE) {
        const float *res = tk->res_values + (size_t)slot * tk->conf.dim;
        __builtin_prefetch(res);
        __builtin_prefetch(res + tk->conf.dim - 1);
        __builtin_prefetch(&tk->res_versions[slot]);
        __builtin_prefetch(&tk->prev[slot]);
        __builtin_prefetch(&tk->next[slot]);
    }
    return slot;
}

/* spw_topk_compress_pulled but for freeing the slots it leaves held (its caller does). */
static spw_err_t compress_step(spw_topk_t *tk, const uint64_t *keys, float *grads,
                               const uint32_t *versions, const float *pulled, size_t n,
                               struct spw_push_set *out)
{
    const size_t dim = tk->conf.dim;
    const bool ef = tk->conf.error_feedback;
    spw_err_t err;
    if (n >= UINT32_MAX)
        return SPW_ERR_TOO_BIG;
    if (tk->conf.pulled && !pulled && n > 0)
        return SPW_ERR_INVALID;
    /* the unsent rows, and with fp16 the rounding errors of up to 2n rows sent */
    size_t index_need = tk->count + (keeps_f16_errors(tk) ? 3 * n : n);
    if (index_need > tk->conf.residual_max_rows)
        index_need = tk->conf.residual_max_rows;
    if (spw_trn__grow((void **)&tk->norms, &tk->cap_norms, n, sizeof(float)) ||
        spw_trn__grow((void **)&tk->selected, &tk->cap_selected, n, sizeof(uint8_t)) ||
        (!tk->be && spw_trn__grow((void **)&tk->scratch, &tk->cap_scratch, n, sizeof(uint64_t))) ||
        spw_trn__grow((void **)&tk->pinned, &tk->cap_pinned, n, sizeof(uint8_t)) ||
        reserve_out(tk, 2 * n) || (ef && spw_trn__keyidx_reserve(&tk->index, index_need)) ||
        (ef && spw_trn__grow((void **)&tk->step_slot, &tk->cap_step_slot, n, sizeof(uint32_t))))
        return SPW_ERR_NOMEM;

    tk->stats.steps++;
    tk->stats.rows_in += n;
    tk->stats.bytes_dense += n * (SPW_TRN_PUSH_ROW_OVERHEAD + 4u * dim);
    tk->out_n = 0;

    /* Error feedback: fold each key's residual into its row, holding its slot (step_slot) for
     * the step to reuse: the row's new residual or rounding error goes back into it without a
     * second index lookup. A residual of a row the shard evicted since is dropped instead
     * (row_reset). */
    if (ef) {
        for (size_t r = 0; r < n; r++)
            tk->step_slot[r] = SPW_TRN__NONE;
    }
    if (ef && tk->count) {
        /* Two stages, as the table outgrows the caches: a key's index entry is hinted 2·AHEAD
         * keys before its turn, its slot found AHEAD keys before (kept in step_slot until then)
         * and the slot's residual, version and age links hinted. Processing a key removes or
         * detaches only its own slot, so a slot found ahead stays valid. */
        enum { AHEAD = 8 };
        for (size_t r = 0; r < n && r < 2 * AHEAD; r++)
            spw_trn__keyidx_prefetch(&tk->index, keys[r]);
        for (size_t r = 0; r < n && r < AHEAD; r++)
            tk->step_slot[r] = find_hinted(tk, keys[r]);
        for (size_t r = 0; r < n; r++) {
            if (r + 2 * AHEAD < n)
                spw_trn__keyidx_prefetch(&tk->index, keys[r + 2 * AHEAD]);
            if (r + AHEAD < n)
                tk->step_slot[r + AHEAD] = find_hinted(tk, keys[r + AHEAD]);
            uint32_t slot = tk->step_slot[r];
            tk->step_slot[r] = SPW_TRN__NONE;
            if (slot == SPW_TRN__NONE)
                continue;
            if (versions && row_reset(tk->res_versions[slot], versions[r])) {
                spw_trn__keyidx_remove(&tk->index, keys[r]);
                drop_slot(tk, slot); /* spw_topk_drop, its key already out of the index */
                tk->stats.rows_reset++;
                continue;
            }
            float *g = grads + r * dim;
            const float *res = tk->res_values + (size_t)slot * dim;
            for (size_t j = 0; j < dim; j++)
                g[j] += res[j];
            detach_slot(tk, slot);
            tk->step_slot[r] = slot;
        }
    }

    /* a deep model's dense blocks are always sent (they are in every step, and the network's
     * layers must move together): they rank first (a NaN norm), over the m of the others */
    size_t pinned = 0;
    for (size_t r = 0; r < n; r++)
        pinned += spw_key_is_dense(keys[r]);
    size_t m = n;
    if (tk->conf.ratio < 1.0 && n > pinned) {
        double want = ceil(tk->conf.ratio * (double)(n - pinned) - 1e-9);
        m = pinned + (want < 1.0 ? 1 : (want > (double)(n - pinned) ? n - pinned : (size_t)want));
    }
    if (m < n) {
        for (size_t r = 0; pinned && r < n; r++)
            tk->pinned[r] = spw_key_is_dense(keys[r]) ? 1 : 0;
        const uint8_t *pin = pinned ? tk->pinned : NULL;
        if (!tk->be)
            spw_cpu_topk_rows(grads, n, (uint32_t)dim, m, pin, tk->norms, tk->scratch,
                              tk->selected);
        else if ((err = spw_backend_topk_rows(tk->be, grads, n, m, pin, tk->norms, tk->selected)))
            return err;
    } else if (n) {
        memset(tk->selected, 1, n);
    }
    tk->stats.rows_selected += m;

    for (size_t r = 0; r < n; r++)
        if (tk->selected[r])
            append_out(tk, keys[r], grads + r * dim, versions ? versions[r] : 0,
                       pulled ? pulled + r * dim : NULL, (uint32_t)r);
    /* Without fp16 (or with stochastic rounding) a sent row leaves nothing: its slot is free for
     * the unsent rows at once, as if it had never been held. With fp16's rounding errors kept it
     * waits for the row's. */
    if (ef && !keeps_f16_errors(tk) && tk->detached) {
        for (size_t r = 0; r < n; r++) {
            if (!tk->selected[r] || tk->step_slot[r] == SPW_TRN__NONE)
                continue;
            spw_trn__keyidx_remove(&tk->index, keys[r]);
            tk->next[tk->step_slot[r]] = tk->free_head;
            tk->free_head = tk->step_slot[r];
            tk->step_slot[r] = SPW_TRN__NONE;
            tk->detached--;
        }
    }
    for (size_t r = 0; r < n; r++) {
        if (tk->selected[r])
            continue;
        if (!ef) {
            tk->stats.rows_discarded++;
            continue;
        }
        const uint32_t version = versions ? versions[r] : 0;
        const float *row_pulled = pulled ? pulled + r * dim : NULL;
        if (tk->step_slot[r] != SPW_TRN__NONE) { /* its own slot, still indexed */
            fill_slot(tk, tk->step_slot[r], keys[r], grads + r * dim, version, row_pulled);
            tk->step_slot[r] = SPW_TRN__NONE;
            tk->detached--;
            tk->stats.rows_kept++;
            continue;
        }
        if ((err = keep_residual(tk, keys[r], grads + r * dim, version, row_pulled)))
            return err;
    }
    return finish_out(tk, out, tk->conf.fp16);
}

spw_err_t spw_topk_compress_pulled(spw_topk_t *tk, const uint64_t *keys, float *grads,
                                   const uint32_t *versions, const float *pulled, size_t n,
                                   struct spw_push_set *out)
{
    tk->detached = 0;
    spw_err_t err = compress_step(tk, keys, grads, versions, pulled, n, out);
    if (tk->detached)
        release_detached(tk, keys, n);
    tk->stats.residual_rows = tk->count;
    return err;
}

spw_err_t spw_topk_flush(spw_topk_t *tk, struct spw_push_set *out)
{
    const size_t dim = tk->conf.dim;
    if (reserve_out(tk, tk->count))
        return SPW_ERR_NOMEM;
    tk->out_n = 0;
    for (uint32_t slot = tk->head; slot != SPW_TRN__NONE; slot = tk->next[slot])
        append_out(tk, tk->res_keys[slot], tk->res_values + (size_t)slot * dim,
                   sent_version(tk, slot), res_pulled(tk, slot), SPW_TRN__NONE);
    tk->stats.rows_flushed += tk->out_n;
    tk->count = 0;
    tk->pool_used = 0;
    tk->head = tk->tail = tk->free_head = SPW_TRN__NONE;
    spw_trn__keyidx_clear(&tk->index);
    /* In f32 even with fp16: a flush empties the table (checkpoints, the end of a run), so no
     * rounding error may be left behind, and flushes are rare enough for the bytes not to matter.
     */
    return finish_out(tk, out, false);
}

bool spw_topk_drop(spw_topk_t *tk, uint64_t key)
{
    uint32_t slot = spw_trn__keyidx_remove(&tk->index, key);
    if (slot == SPW_TRN__NONE)
        return false;
    drop_slot(tk, slot);
    return true;
}

size_t spw_topk_drop_all(spw_topk_t *tk)
{
    size_t n = tk->count;
    tk->stats.rows_dropped += n;
    tk->count = 0;
    tk->pool_used = 0;
    tk->head = tk->tail = tk->free_head = SPW_TRN__NONE;
    spw_trn__keyidx_clear(&tk->index);
    tk->stats.residual_rows = 0;
    return n;
}

bool spw_topk_residual(const spw_topk_t *tk, uint64_t key, float *out)
{
    uint32_t slot = spw_trn__keyidx_find(&tk->index, key);
    if (slot == SPW_TRN__NONE)
        return false;
    memcpy(out, tk->res_values + (size_t)slot * tk->conf.dim, tk->conf.dim * sizeof(float));
    return true;
}

void spw_topk_get_stats(const spw_topk_t *tk, struct spw_topk_stats *out)
{
    *out = tk->stats;
    out->residual_rows = tk->count;
}
