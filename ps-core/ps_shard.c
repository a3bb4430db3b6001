/* A shard on its server: its values, each source's last sequence number and closed clocks,
 * and (BSP, SSP) the summed contributions of every clock not yet applied, applied whole and in
 * clock order once every source has closed the clock. Under ASP a contribution is applied when
 * it arrives; closes still count `done`. An applied clock's buffers are kept for the next clock
 * (no fresh pages to fault in and zero), and a clock's first contribution of the whole shard
 * is copied in (checked in the same pass), not added to zeros. The whole state saved, loaded
 * and compared: ps_shard_state.c. */
#include "ps_core.h"
#include "ps_core_internal.h"
#include "ps_shard_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

ps_shard_t *ps_shard_create(uint64_t elems, const ps_rule_t *rule, const ps_sync_t *sync,
                            uint32_t sources)
{
    if (elems == 0 || elems > PS_SHARD_MAX_ELEMS || !ps_rule_valid(rule) ||
        !ps_sync_valid(sync) || sources == 0 || sources > PS_MAX_SOURCES)
        return NULL;
    ps_shard_t *shard = calloc(1, sizeof(*shard));
    if (shard == NULL)
        return NULL;
    shard->elems = elems;
    shard->rule = *rule;
    shard->sync = *sync;
    shard->sources = sources;
    shard->values = calloc(elems, sizeof(float));
    shard->source = calloc(sources, sizeof(*shard->source));
    if (shard->values == NULL || shard->source == NULL) {
        ps_shard_destroy(shard);
        return NULL;
    }
    return shard;
}

static void pending_free(shard_pending_t *p)
{
    free(p->sum);
    free(p->touched);
}

void ps_shard_destroy(ps_shard_t *shard)
{
    if (shard == NULL)
        return;
    for (size_t i = 0; i < shard->npending; i++)
        pending_free(&shard->pending[i]);
    free(shard->pending);
    pending_free(&shard->spare);
    free(shard->source);
    free(shard->values);
    free(shard);
}

/* Takes pending entry `at` out of the list: its buffers become the spare ones (or are freed
 * when there are spare ones already). */
static void drop_pending(ps_shard_t *shard, size_t at)
{
    if (shard->spare.sum == NULL)
        shard->spare = shard->pending[at];
    else
        pending_free(&shard->pending[at]);
    shard->npending--;
    memmove(&shard->pending[at], &shard->pending[at + 1],
            (shard->npending - at) * sizeof(*shard->pending));
    if (shard->npending == 0) { /* nothing pending: no list either (bytes says so) */
        free(shard->pending);
        shard->pending = NULL;
        shard->pending_cap = 0;
    }
}

/* The pending entry of clock, made (not filled yet) when absent; NULL when out of memory
 * (nothing changed then). */
static shard_pending_t *pending_get(ps_shard_t *shard, uint64_t clock)
{
    size_t at = 0;
    while (at < shard->npending && shard->pending[at].clock < clock)
        at++;
    if (at < shard->npending && shard->pending[at].clock == clock)
        return &shard->pending[at];

    if (shard->npending == shard->pending_cap) {
        size_t cap = shard->pending_cap ? shard->pending_cap * 2 : 4;
        shard_pending_t *grown = realloc(shard->pending, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        shard->pending = grown;
        shard->pending_cap = cap;
    }
    shard_pending_t fresh = shard->spare;
    shard->spare = (shard_pending_t){.sum = NULL};
    fresh.clock = clock;
    fresh.filled = 0;
    if (fresh.sum == NULL)
        fresh.sum = malloc(shard->elems * sizeof(float));
    if (shard->rule.kind == PS_RULE_ASSIGN && fresh.touched == NULL)
        fresh.touched = malloc(ps_shard_touched_bytes(shard->elems));
    if (fresh.sum == NULL || (shard->rule.kind == PS_RULE_ASSIGN && fresh.touched == NULL)) {
        pending_free(&fresh);
        return NULL;
    }
    if (fresh.touched)
        memset(fresh.touched, 0, ps_shard_touched_bytes(shard->elems));
    memmove(&shard->pending[at + 1], &shard->pending[at],
            (shard->npending - at) * sizeof(*shard->pending));
    shard->pending[at] = fresh;
    shard->npending++;
    return &shard->pending[at];
}

/* A refused contribution made pending entry p (npending: the count before): it goes again,
 * and buffers allocated for it are freed (had_spare: the spare ones were taken), so that
 * nothing changed. */
static void unmake(ps_shard_t *shard, shard_pending_t *p, size_t npending, int had_spare)
{
    if (shard->npending == npending)
        return;
    drop_pending(shard, (size_t)(p - shard->pending));
    if (!had_spare) {
        pending_free(&shard->spare);
        shard->spare = (shard_pending_t){.sum = NULL};
    }
}

int ps_shard_contribute(ps_shard_t *shard, uint32_t source, uint64_t seq, uint64_t clock,
                        uint64_t offset, uint64_t n, const uint64_t *keys, const float *values)
{
    if (shard == NULL || source >= shard->sources)
        return -EINVAL;
    /* the whole shard under BSP/SSP (the usual update): checked as it is copied or added */
    int whole = keys == NULL && offset == 0 && n == shard->elems && values != NULL &&
                shard->sync.kind != PS_SYNC_ASP;
    if (!whole && !ps_span_valid(shard->elems, offset, n, keys, values))
        return -EINVAL;
    shard_source_t *src = &shard->source[source];
    if (src->have_seq && seq <= src->last_seq) /* a retry of a contribution taken already */
        return whole && !ps_vec_finite(values, n) ? -EINVAL : 0;
    if (clock < src->closed)
        return -EINVAL;
    /* clock >= closed >= done, so the difference cannot wrap; ASP holds no clock's sum */
    if (shard->sync.kind != PS_SYNC_ASP && clock - shard->done > ps_sync_window(&shard->sync))
        return -EAGAIN;

    if (shard->sync.kind == PS_SYNC_ASP) {
        int rc = ps_span_update_finite(shard->values, NULL, NULL, &shard->rule, offset, n, keys,
                                       values);
        if (rc < 0)
            return rc;
        if (rc == 0)
            goto refused;
    } else {
        size_t npending = shard->npending;
        int had_spare = shard->spare.sum != NULL;
        shard_pending_t *p = pending_get(shard, clock);
        if (p == NULL)
            return -ENOMEM;
        /* the clock applied next, to the values as they are now (always so under BSP): its
         * sum with this contribution must make finite values; a later clock's is checked when
         * it is applied (apply_done_clock) */
        const float *base = p == shard->pending && clock == shard->done ? shard->values : NULL;
        if (whole && !p->filled) {
            /* the clock's first contribution: copied in, each value read once and checked
             * (and, with a base, what it makes of it: in the same pass) */
            uint32_t bad = base ? ps_vec_copy_rule_bad(&shard->rule, p->sum, values, base, n)
                                : (ps_vec_copy_finite(p->sum, values, n) ? 0u : 1u);
            if (bad & 1u) {
                unmake(shard, p, npending, had_spare);
                return -EINVAL;
            }
            if (bad & 2u) {
                unmake(shard, p, npending, had_spare);
                goto refused;
            }
            if (p->touched)
                ps_bits_set(p->touched, 0, shard->elems);
        } else {
            /* a whole contribution to a sum already filled: its values are checked by the
             * update's own pass (a value that is not finite makes a result that is not;
             * which of the two it was is found only then) */
            int checked = whole && p->filled;
            if (whole && !checked && !ps_vec_finite(values, n)) {
                unmake(shard, p, npending, had_spare);
                return -EINVAL;
            }
            if (!p->filled)
                memset(p->sum, 0, shard->elems * sizeof(float));
            int rc = ps_span_update_finite(p->sum, base, &shard->rule, NULL, offset, n, keys,
                                           values);
            if (rc <= 0) {
                unmake(shard, p, npending, had_spare);
                if (rc < 0)
                    return rc;
                if (checked && !ps_vec_finite(values, n))
                    return -EINVAL;
                goto refused;
            }
            if (p->touched)
                ps_span_mark(p->touched, offset, n, keys);
        }
        p->filled = 1;
    }
    src->last_seq = seq;
    src->have_seq = 1;
    return 1;
refused:
    /* taken (a retry is a duplicate), its values not applied */
    src->last_seq = seq;
    src->have_seq = 1;
    return -ERANGE;
}

/* Applies clock `done` (its pending sum, if any contribution came) and counts it done. */
static void apply_done_clock(ps_shard_t *shard)
{
    if (shard->npending > 0 && shard->pending[0].clock == shard->done) {
        const shard_pending_t *p = &shard->pending[0];
        float *restrict values = shard->values;
        const float *sum = p->sum;
        uint64_t elems = shard->elems;
        if (shard->rule.kind == PS_RULE_ASSIGN) {
            /* the written elements take the clock's sum (finite: ps_shard_contribute) */
            for (uint64_t i = 0; i < elems; i++) {
                if (!(p->touched[i >> 3] & (1u << (i & 7))))
                    continue; /* assign: nobody wrote this element in this clock */
                values[i] = ps_rule_apply(&shard->rule, values[i], sum[i]);
            }
        } else {
            /* the new values are made in the sum's buffer, which becomes the values when
             * every one is finite; else the clock is refused whole (values as they were) */
            float *restrict next = p->sum;
            uint32_t bad = 0;
            uint64_t i = 0;
            if (shard->rule.kind == PS_RULE_ADD) {
                for (; i + PS_VEC_BLOCK <= elems; i += PS_VEC_BLOCK) /* vector code */
                    for (int k = 0; k < PS_VEC_BLOCK; k++) {
                        next[i + k] = values[i + k] + next[i + k];
                        bad |= ps_float_bad(next[i + k]);
                    }
                for (; i < elems; i++) {
                    next[i] = values[i] + next[i];
                    bad |= ps_float_bad(next[i]);
                }
            } else {
                float lr = shard->rule.lr;
                for (; i + PS_VEC_BLOCK <= elems; i += PS_VEC_BLOCK)
                    for (int k = 0; k < PS_VEC_BLOCK; k++) {
                        next[i + k] = values[i + k] - lr * next[i + k];
                        bad |= ps_float_bad(next[i + k]);
                    }
                for (; i < elems; i++) {
                    next[i] = values[i] - lr * next[i];
                    bad |= ps_float_bad(next[i]);
                }
            }
            if (bad) {
                shard->refused++;
            } else {
                shard->pending[0].sum = shard->values;
                shard->values = next;
            }
        }
        drop_pending(shard, 0);
    }
    shard->done++;
}

static int every_source_closed(const ps_shard_t *shard, uint64_t clock)
{
    for (uint32_t s = 0; s < shard->sources; s++)
        if (shard->source[s].closed <= clock)
            return 0;
    return 1;
}

int ps_shard_close(ps_shard_t *shard, uint32_t source, uint64_t clock)
{
    if (shard == NULL || source >= shard->sources)
        return -EINVAL;
    shard_source_t *src = &shard->source[source];
    if (src->closed > 0 && clock == src->closed - 1)
        return 0; /* a repeat */
    if (clock != src->closed)
        return -EINVAL; /* a gap, or older than the last */
    src->closed++;
    while (every_source_closed(shard, shard->done))
        apply_done_clock(shard);
    return 1;
}

uint64_t ps_shard_refused(const ps_shard_t *shard)
{
    return shard ? shard->refused : 0;
}

uint64_t ps_shard_done(const ps_shard_t *shard)
{
    return shard ? shard->done : 0;
}

uint64_t ps_shard_closed(const ps_shard_t *shard, uint32_t source)
{
    return shard && source < shard->sources ? shard->source[source].closed : 0;
}

uint64_t ps_shard_elems(const ps_shard_t *shard)
{
    return shard ? shard->elems : 0;
}

const float *ps_shard_values(const ps_shard_t *shard)
{
    return shard ? shard->values : NULL;
}

/* A pending clock's buffers: its sum, and (assign) its written bits. */
static uint64_t pending_entry_bytes(const ps_shard_t *shard)
{
    return shard->elems * sizeof(float) +
           (shard->rule.kind == PS_RULE_ASSIGN ? ps_shard_touched_bytes(shard->elems) : 0);
}

uint64_t ps_shard_bytes(const ps_shard_t *shard)
{
    if (shard == NULL)
        return 0;
    uint64_t per_pending = pending_entry_bytes(shard);
    return sizeof(*shard) + shard->elems * sizeof(float) +
           (uint64_t)shard->sources * sizeof(*shard->source) +
           shard->pending_cap * sizeof(*shard->pending) +
           (shard->npending + (shard->spare.sum != NULL)) * per_pending;
}

uint64_t ps_shard_pending_bytes(const ps_shard_t *shard)
{
    if (shard == NULL)
        return 0;
    uint64_t per_pending = pending_entry_bytes(shard);
    return shard->pending_cap * sizeof(*shard->pending) +
           (shard->npending + (shard->spare.sum != NULL)) * per_pending;
}
