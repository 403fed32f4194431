/* Staleness statistics per row class: the running mean tau that penalty adaptive scales by, the
 * mean step scale applied, and the count threshold of the hot-row class (docs/ARCHITECTURE.md
 * §3). */
#include <string.h>

#include "ps_int.h"

void spw_ps__stale_init(struct spw_ps__stale *st)
{
    memset(st, 0, sizeof(*st));
    for (int c = 0; c < SPW_PS_CLASSES; c++)
        st->alpha_mean[c] = 1.0;
    st->top_threshold = UINT32_MAX;
    st->period = 1;
}

static void heap_sift_down(uint32_t *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] < h[m])
            m = l;
        if (r < n && h[r] < h[m])
            m = r;
        if (m == i)
            return;
        uint32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Keeps count if it is among the SPW_PS_TOP_ROWS largest offered this period. */
static void heap_offer(struct spw_ps__stale *st, uint32_t count)
{
    uint32_t *h = st->heap;
    if (st->heap_n < SPW_PS_TOP_ROWS) {
        uint32_t i = st->heap_n++;
        h[i] = count;
        while (i > 0) {
            uint32_t p = (i - 1) / 2;
            if (h[p] <= h[i])
                break;
            uint32_t t = h[p];
            h[p] = h[i];
            h[i] = t;
            i = p;
        }
        return;
    }
    if (count <= h[0])
        return;
    h[0] = count;
    heap_sift_down(h, st->heap_n, 0);
}

/* The SPW_PS_TOP_ROWS-th largest count of the period (or the smallest, when it saw fewer rows)
 * becomes the threshold; a new period starts. */
static void end_period(struct spw_ps__stale *st)
{
    if (st->heap_n > 0)
        st->top_threshold = st->heap[0] > 0 ? st->heap[0] : 1;
    st->heap_n = 0;
    st->period_rows = 0;
    st->period = st->period == 0xffffu ? 1 : st->period + 1;
}

enum spw_ps_row_class spw_ps__stale_classify(struct spw_ps__stale *st, uint64_t key,
                                             struct spw_ps_row *row)
{
    if (key == SPW_PS_BIAS_KEY)
        return SPW_PS_CLASS_BIAS;
    if (!row)
        return SPW_PS_CLASS_REST;
    uint32_t count = row->count;
    uint32_t tag = row->flags >> SPW_PS_ROW_TAG_SHIFT;
    if (tag != st->period) {
        row->flags = (row->flags & ~SPW_PS_ROW_TAG_MASK) | (st->period << SPW_PS_ROW_TAG_SHIFT);
        heap_offer(st, count);
    }
    enum spw_ps_row_class cls = count >= st->top_threshold ? SPW_PS_CLASS_TOP : SPW_PS_CLASS_REST;
    if (++st->period_rows >= SPW_PS_TOP_PERIOD)
        end_period(st);
    return cls;
}

void spw_ps__stale_observe(struct spw_ps__stale *st, enum spw_ps_row_class cls, uint32_t tau,
                           double alpha)
{
    uint64_t n = ++st->rows[cls];
    /* the plain mean while the class has seen fewer rows than the window, then an EWMA */
    double rate = n < SPW_PS_STALE_WINDOW ? 1.0 / (double)n : 1.0 / SPW_PS_STALE_WINDOW;
    st->tau_ref[cls] += rate * ((double)tau - st->tau_ref[cls]);
    st->alpha_mean[cls] += rate * (alpha - st->alpha_mean[cls]);
}
