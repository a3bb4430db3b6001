/* The shards this daemon serves: updates applied from the sources, reads answered at once
 * when the shard's done satisfies the reader's bound, else kept until it does. */
#include "ps-internal.h"
#include "ps_ckpt.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_server_update(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u)
{
    return ps_repl_update(t, shard, source, u, NULL);
}

int ps_server_apply(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u)
{
    if (shard >= t->layout.shards || !t->shards || !t->shards[shard] || source >= t->sources)
        return -EINVAL;
    ps_shard_t *sh = t->shards[shard];
    uint64_t before = ps_shard_done(sh);
    /* a close that cannot be taken (a gap, an older clock) refuses the whole update, before
     * its contribution is: never half applied */
    uint64_t closed = ps_shard_closed(sh, source);
    if (u->close && u->clock != closed && !(closed > 0 && u->clock == closed - 1))
        return -EINVAL;
    uint64_t refused_before = ps_shard_refused(sh);
    int rc = 1;
    if (u->n > 0)
        rc = ps_shard_contribute(sh, source, u->seq, u->clock, u->offset, u->n, u->keys,
                                 u->values);
    /* -ERANGE: taken, its values refused (their result would not be finite): its clock
     * closes all the same, so that the others go on */
    int refused = rc == -ERANGE;
    if (rc < 0 && !refused)
        return rc;
    /* a BSP/SSP update closes its clock; a duplicate's close repeats (0) harmlessly */
    if (u->close && (rc == 1 || refused) && ps_shard_close(sh, source, u->clock) < 0)
        return -EINVAL;
    if (refused || ps_shard_refused(sh) != refused_before) {
        LOG_WARN("ps: table '%s' of group %s, shard %u: %s of clock %llu refused: the result "
                 "would not be finite (float overflow); the shard keeps its last finite values",
                 t->name, t->group, shard, refused ? "an update" : "the sum",
                 (unsigned long long)u->clock);
        refused = 1;
    }
    if (rc == 1 || refused)
        t->ps->stats.updates_applied++;
    if (ps_shard_done(sh) != before)
        ps_server_wake(t, shard);
    return refused ? -ERANGE : rc;
}

void ps_server_answer(ps_table_t *t, ps_wait_t *w)
{
    ps_shard_t *sh = t->shards[w->shard];
    uint64_t waited_ns = w->since_ns ? salusd_now_ns() - w->since_ns : 0;
    if (w->pull) {
        ps_pull_slice(w->pull, 0, NULL, w->out_index, ps_shard_values(sh) + w->first, w->n,
                      ps_shard_done(sh), w->done_at_request, waited_ns, w->since_ns != 0);
        return;
    }
    ps_msg_send_pull_reply(t, w, 0, NULL);
}

/* The most `done` a shard can still reach (BSP, SSP): a source that said bye (or whose
 * workers here are over) closes no more clocks than it said, so done stops at the least of
 * those.
 * UINT64_MAX while every source may close more, and under ASP (reads never wait). */
static uint64_t reachable(const ps_table_t *t, uint32_t shard)
{
    uint64_t most = UINT64_MAX;
    if (t->spec.sync.kind == PS_SYNC_ASP || !t->source_over)
        return most;
    for (uint32_t s = 0; s < t->sources; s++)
        if (t->source_over[s]) {
            /* what its bye said it closed (its last updates may still be on their way),
             * else (gone without one) what came */
            uint64_t closed = t->source_final[s] != UINT64_MAX ? t->source_final[s]
                              : t->shards[shard] ? ps_shard_closed(t->shards[shard], s)
                                                 : UINT64_MAX;
            most = closed < most ? closed : most;
        }
    return most;
}

/* A read that can never be answered (its bound beyond what the shard can reach) fails. */
static void fail_stranded(ps_table_t *t, ps_wait_t *w, uint64_t most)
{
    char err[PS_ERR_BYTES];
    snprintf(err, sizeof(err), "table '%s': a node of group %s left after %llu clock(s); a read "
             "needing %llu can never complete", t->name, t->group, (unsigned long long)most,
             (unsigned long long)w->min_done);
    if (w->pull)
        ps_pull_slice(w->pull, -EPIPE, err, 0, NULL, 0, 0, 0, 0, 0);
    else
        ps_msg_send_pull_reply(t, w, -EPIPE, err);
    free(w);
}

void ps_server_fail_stranded(ps_table_t *t)
{
    for (ps_wait_t **wp = &t->waits; *wp;) {
        ps_wait_t *w = *wp;
        uint64_t most = t->shards && t->shards[w->shard] ? reachable(t, w->shard) : UINT64_MAX;
        if (w->min_done > most) {
            *wp = w->next;
            fail_stranded(t, w, most);
        } else
            wp = &w->next;
    }
}

int ps_server_read(ps_table_t *t, ps_wait_t *w)
{
    if (w->shard < t->layout.shards && t->shards && !t->shards[w->shard] && t->repl &&
        t->repl[w->shard].loading) {
        /* the primary here, its state on its way (a joined server): kept until it is */
        uint64_t first, elems;
        ps_layout_shard(&t->layout, w->shard, &first, &elems);
        if (w->first > elems || w->n > elems - w->first) {
            free(w);
            return -EINVAL;
        }
        w->since_ns = salusd_now_ns();
        w->next = t->waits;
        t->waits = w;
        return 0;
    }
    if (w->shard >= t->layout.shards || !t->shards || !t->shards[w->shard]) {
        free(w);
        return -EINVAL;
    }
    ps_shard_t *sh = t->shards[w->shard];
    if (w->first > ps_shard_elems(sh) || w->n > ps_shard_elems(sh) - w->first) {
        free(w);
        return -EINVAL;
    }
    w->done_at_request = ps_shard_done(sh);
    if (w->done_at_request >= w->min_done) {
        ps_server_answer(t, w);
        free(w);
        return 1;
    }
    uint64_t most = reachable(t, w->shard);
    if (w->min_done > most) {
        fail_stranded(t, w, most);
        return 1;
    }
    w->since_ns = salusd_now_ns();
    w->next = t->waits;
    t->waits = w;
    return 0;
}

void ps_server_wake(ps_table_t *t, uint32_t shard)
{
    if (!t->shards[shard])
        return;
    uint64_t done = ps_shard_done(t->shards[shard]);
    ps_ckpt_shard_done(t, shard); /* a checkpoint's snapshot at this clock (ps_ckpt.h) */
    /* taken off the list first: an answer may complete a pull whose callback is deferred,
     * but nothing here runs a worker's code, so the list does not change under us */
    for (ps_wait_t **wp = &t->waits; *wp;) {
        ps_wait_t *w = *wp;
        if (w->shard == shard && done >= w->min_done) {
            *wp = w->next;
            ps_server_answer(t, w);
            free(w);
        } else
            wp = &w->next;
    }
}

void ps_server_drop_waits(ps_table_t *t, const char *node, const ps_pull_t *pull)
{
    for (ps_wait_t **wp = &t->waits; *wp;) {
        ps_wait_t *w = *wp;
        int match = (!node && !pull) || (node && !w->pull && strcmp(w->node, node) == 0) ||
                    (pull && w->pull == pull);
        if (!match) {
            wp = &w->next;
            continue;
        }
        *wp = w->next;
        if (w->pull)
            ps_pull_slice(w->pull, -ECANCELED, "the table is gone", 0, NULL, 0, 0, 0, 0, 0);
        free(w);
    }
}

void ps_server_fail_waits(ps_table_t *t, int rc, const char *err)
{
    while (t->waits) {
        ps_wait_t *w = t->waits;
        t->waits = w->next;
        if (w->pull)
            ps_pull_slice(w->pull, rc, err, 0, NULL, 0, 0, 0, 0, 0);
        else
            ps_msg_send_pull_reply(t, w, rc, err);
        free(w);
    }
}
