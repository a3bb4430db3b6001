/* A node's aggregation of its co-located workers' pushes (BSP, SSP): per open clock, the sum of
 * every local worker's contributions over the whole table; a clock is complete once every
 * worker has closed it, and its sum stays until the daemon releases it. A released clock's
 * buffers are kept for the next clock (no fresh pages to fault in and zero each clock), and
 * a clock's first push of the whole table is copied in (checked in the same pass), not added
 * to zeros. */
#include "ps_core.h"
#include "ps_core_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct agg_worker_s {
    uint64_t last_seq;
    int have_seq;        /* no push yet: every seq is new */
    uint64_t clock;      /* current: clocks 0 .. clock-1 closed */
} agg_worker_t;

typedef struct agg_clock_s {
    uint64_t clock;
    float *sum;          /* count values; undefined until filled */
    uint8_t *written;    /* a bit per element some push of the clock wrote */
    int filled;          /* sum holds the clock's sum (zeros and what was pushed) */
} agg_clock_t;

struct ps_agg_s {
    uint64_t count;
    ps_sync_t sync;
    uint32_t workers;
    agg_worker_t *worker;
    agg_clock_t *open;   /* sorted by clock: open ones and complete ones not yet released */
    size_t nopen, open_cap;
    float *spare_sum;    /* a released clock's buffers, for the next clock */
    uint8_t *spare_written;
};

ps_agg_t *ps_agg_create(uint64_t count, const ps_sync_t *sync, uint32_t workers)
{
    if (count == 0 || count > SIZE_MAX / sizeof(float) || !ps_sync_valid(sync) ||
        sync->kind == PS_SYNC_ASP || workers == 0 || workers > PS_MAX_LOCAL_WORKERS)
        return NULL;
    ps_agg_t *agg = calloc(1, sizeof(*agg));
    if (agg == NULL)
        return NULL;
    agg->count = count;
    agg->sync = *sync;
    agg->workers = workers;
    agg->worker = calloc(workers, sizeof(*agg->worker));
    if (agg->worker == NULL) {
        free(agg);
        return NULL;
    }
    return agg;
}

ps_agg_t *ps_agg_create_at(uint64_t count, const ps_sync_t *sync, uint32_t workers,
                           uint64_t clock)
{
    if (clock > (uint64_t)INT64_MAX) /* far from any wrap of a later close or window sum */
        return NULL;
    ps_agg_t *agg = ps_agg_create(count, sync, workers);
    if (agg == NULL)
        return NULL;
    /* clocks before `clock` hold no sum: complete and released, as after their last release */
    for (uint32_t w = 0; w < workers; w++)
        agg->worker[w].clock = clock;
    return agg;
}

void ps_agg_destroy(ps_agg_t *agg)
{
    if (agg == NULL)
        return;
    for (size_t i = 0; i < agg->nopen; i++) {
        free(agg->open[i].sum);
        free(agg->open[i].written);
    }
    free(agg->open);
    free(agg->spare_sum);
    free(agg->spare_written);
    free(agg->worker);
    free(agg);
}

static uint64_t written_bytes(uint64_t count)
{
    return (count + 7) / 8;
}

/* The least current clock of the local workers: clocks below it are complete. */
static uint64_t min_clock(const ps_agg_t *agg)
{
    uint64_t least = agg->worker[0].clock;
    for (uint32_t w = 1; w < agg->workers; w++)
        if (agg->worker[w].clock < least)
            least = agg->worker[w].clock;
    return least;
}

/* 1 when a worker at `clock` is too far ahead: beyond the window from the slowest local
 * worker, or beyond window + 1 from the oldest sum held (complete, not yet released: the
 * servers' acknowledgements may lag a correct worker's pull by one clock). */
static int beyond_window(const ps_agg_t *agg, uint64_t clock)
{
    uint64_t window = ps_sync_window(&agg->sync), least = min_clock(agg);
    if (clock - least > window)
        return 1;
    uint64_t oldest = agg->nopen > 0 && agg->open[0].clock < least ? agg->open[0].clock : least;
    return clock - oldest > window + 1;
}

static size_t find_slot(const ps_agg_t *agg, uint64_t clock)
{
    size_t at = 0;
    while (at < agg->nopen && agg->open[at].clock < clock)
        at++;
    return at;
}

static agg_clock_t *find_clock(const ps_agg_t *agg, uint64_t clock)
{
    size_t at = find_slot(agg, clock);
    return at < agg->nopen && agg->open[at].clock == clock ? &agg->open[at] : NULL;
}

/* Takes clock slot `at` out of the list: its buffers become the spare ones (or are freed
 * when there are spare ones already). */
static void drop_slot(ps_agg_t *agg, size_t at)
{
    if (agg->spare_sum == NULL) {
        agg->spare_sum = agg->open[at].sum;
        agg->spare_written = agg->open[at].written;
    } else {
        free(agg->open[at].sum);
        free(agg->open[at].written);
    }
    agg->nopen--;
    memmove(&agg->open[at], &agg->open[at + 1], (agg->nopen - at) * sizeof(*agg->open));
    if (agg->nopen == 0) { /* nothing open: no list either (bytes says so) */
        free(agg->open);
        agg->open = NULL;
        agg->open_cap = 0;
    }
}

/* The sum of clock, made (not filled yet) when absent; NULL when out of memory (nothing
 * changed). */
static agg_clock_t *clock_get(ps_agg_t *agg, uint64_t clock)
{
    size_t at = find_slot(agg, clock);
    if (at < agg->nopen && agg->open[at].clock == clock)
        return &agg->open[at];
    if (agg->nopen == agg->open_cap) {
        size_t cap = agg->open_cap ? agg->open_cap * 2 : 4;
        agg_clock_t *grown = realloc(agg->open, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        agg->open = grown;
        agg->open_cap = cap;
    }
    float *sum = agg->spare_sum ? agg->spare_sum : malloc(agg->count * sizeof(float));
    uint8_t *written = agg->spare_written ? agg->spare_written
                                          : malloc(written_bytes(agg->count));
    if (sum == NULL || written == NULL) {
        if (sum != agg->spare_sum)
            free(sum);
        if (written != agg->spare_written)
            free(written);
        return NULL;
    }
    agg->spare_sum = NULL;
    agg->spare_written = NULL;
    memset(written, 0, written_bytes(agg->count));
    memmove(&agg->open[at + 1], &agg->open[at], (agg->nopen - at) * sizeof(*agg->open));
    agg->open[at] = (agg_clock_t){.clock = clock, .sum = sum, .written = written, .filled = 0};
    agg->nopen++;
    return &agg->open[at];
}

static void fill_zeros(const ps_agg_t *agg, agg_clock_t *c)
{
    if (!c->filled)
        memset(c->sum, 0, agg->count * sizeof(float));
    c->filled = 1;
}

/* A refused push made clock c (nopen: the count before): it goes again, and buffers allocated
 * for it are freed (had_spare: the spare ones were taken), so that nothing changed. */
static void unmake(ps_agg_t *agg, agg_clock_t *c, size_t nopen, int had_spare)
{
    if (agg->nopen == nopen)
        return;
    drop_slot(agg, (size_t)(c - agg->open));
    if (!had_spare) {
        free(agg->spare_sum);
        free(agg->spare_written);
        agg->spare_sum = NULL;
        agg->spare_written = NULL;
    }
}

int ps_agg_push(ps_agg_t *agg, uint32_t worker, uint64_t seq, uint64_t clock, uint64_t offset,
                uint64_t n, const uint64_t *keys, const float *values)
{
    if (agg == NULL || worker >= agg->workers)
        return -EINVAL;
    /* the whole table (the usual push): checked as it is copied (the clock's first: each
     * value read once, ps_agg_clock_fresh) or added below */
    int whole = keys == NULL && offset == 0 && n == agg->count && values != NULL;
    if (!whole && !ps_span_valid(agg->count, offset, n, keys, values))
        return -EINVAL;
    agg_worker_t *w = &agg->worker[worker];
    if (w->have_seq && seq <= w->last_seq)
        return whole && !ps_vec_finite(values, n) ? -EINVAL : 0; /* a retry taken already */
    /* the worker's own clock, within the sync mode's window (memory) */
    if (clock != w->clock)
        return -EINVAL;
    if (beyond_window(agg, clock))
        return -EAGAIN;
    size_t nopen = agg->nopen;
    int had_spare = agg->spare_sum != NULL;
    agg_clock_t *c = clock_get(agg, clock);
    if (c == NULL)
        return -ENOMEM;
    if (whole && !c->filled) {
        /* the clock's first push: copied in, each value read once and checked */
        if (!ps_vec_copy_finite(c->sum, values, n)) {
            unmake(agg, c, nopen, had_spare);
            return -EINVAL;
        }
        c->filled = 1;
        ps_bits_set(c->written, 0, agg->count);
    } else {
        /* a whole push into a sum already filled: its values are checked by the update's
         * own pass (a value that is not finite makes a sum that is not; which of the two
         * it was is found only then) */
        int checked = whole && c->filled;
        if (whole && !checked && !ps_vec_finite(values, n)) {
            unmake(agg, c, nopen, had_spare);
            return -EINVAL;
        }
        fill_zeros(agg, c);
        /* a sum that would not be finite is refused (nothing changed) */
        int rc = ps_span_update_finite(c->sum, NULL, NULL, NULL, offset, n, keys, values);
        if (rc <= 0) {
            unmake(agg, c, nopen, had_spare);
            if (rc == 0 && checked && !ps_vec_finite(values, n))
                return -EINVAL;
            return rc < 0 ? rc : -ERANGE;
        }
        ps_span_mark(c->written, offset, n, keys);
    }
    w->last_seq = seq;
    w->have_seq = 1;
    return 1;
}

int ps_agg_close(ps_agg_t *agg, uint32_t worker, uint64_t clock)
{
    if (agg == NULL || worker >= agg->workers)
        return -EINVAL;
    agg_worker_t *w = &agg->worker[worker];
    if (w->clock > 0 && clock == w->clock - 1)
        return 0; /* a repeat */
    if (clock != w->clock)
        return -EINVAL;
    if (beyond_window(agg, clock + 1))
        return -EAGAIN;
    int completes = 1;
    for (uint32_t o = 0; o < agg->workers; o++)
        if (o != worker && agg->worker[o].clock <= clock)
            completes = 0;
    /* a complete clock always has its sum (zeros when nobody pushed) until released */
    if (completes) {
        agg_clock_t *c = clock_get(agg, clock);
        if (c == NULL)
            return -ENOMEM;
        fill_zeros(agg, c);
    }
    w->clock++;
    return completes ? 1 : 2;
}

int ps_agg_clock_fresh(const ps_agg_t *agg, uint64_t clock)
{
    if (agg == NULL)
        return 0;
    const agg_clock_t *c = find_clock(agg, clock);
    return c == NULL || !c->filled;
}

uint64_t ps_agg_clock_of(const ps_agg_t *agg, uint32_t worker)
{
    if (agg == NULL || worker >= agg->workers)
        return 0;
    return agg->worker[worker].clock;
}

const float *ps_agg_sum(const ps_agg_t *agg, uint64_t clock)
{
    if (agg == NULL || clock >= min_clock(agg))
        return NULL;
    const agg_clock_t *c = find_clock(agg, clock);
    return c ? c->sum : NULL;
}

const uint8_t *ps_agg_written(const ps_agg_t *agg, uint64_t clock)
{
    if (agg == NULL || clock >= min_clock(agg))
        return NULL;
    const agg_clock_t *c = find_clock(agg, clock);
    return c ? c->written : NULL;
}

void ps_agg_release(ps_agg_t *agg, uint64_t clock)
{
    if (agg == NULL || clock >= min_clock(agg))
        return; /* not complete: its sum is still being made */
    size_t at = find_slot(agg, clock);
    if (at >= agg->nopen || agg->open[at].clock != clock)
        return;
    drop_slot(agg, at);
}

uint64_t ps_agg_bytes(const ps_agg_t *agg)
{
    if (agg == NULL)
        return 0;
    return sizeof(*agg) + (uint64_t)agg->workers * sizeof(*agg->worker) +
           agg->open_cap * sizeof(*agg->open) +
           (agg->nopen + (agg->spare_sum != NULL)) *
               (agg->count * sizeof(float) + written_bytes(agg->count));
}

uint64_t ps_agg_push_bytes(const ps_agg_t *agg, uint32_t worker)
{
    if (agg == NULL || worker >= agg->workers || agg->spare_sum != NULL ||
        find_clock(agg, agg->worker[worker].clock) != NULL)
        return 0;
    return agg->count * sizeof(float) + written_bytes(agg->count);
}

uint64_t ps_agg_sum_bytes(const ps_agg_t *agg)
{
    if (agg == NULL)
        return 0;
    return agg->open_cap * sizeof(*agg->open) +
           (agg->nopen + (agg->spare_sum != NULL)) *
               (agg->count * sizeof(float) + written_bytes(agg->count));
}
