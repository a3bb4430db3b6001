/* The worker side's fail-over (ps_retarget.h): what a node's workers sent or asked of a
 * shard's primary goes again to the primary of the table's new view; what cannot reach a
 * primary waits for a view (R > 1), within a bound; recoveries measured.
 *
 * Why nothing acknowledged is lost: a worker's push is answered once its node has it; the
 * node then keeps each update (its clock's sum: ps_agg_release) until the shard's primary
 * acknowledged it, which the primary does only once every live standby has it. An update not
 * acknowledged is sent again (same seq: every replica applies it once) to whichever server is
 * the primary now, however often the view changes, and never dropped: an error answer or a
 * wait past the bound fails the table (its workers hear why), never silently. */
#include "ps_retarget.h"
#include "ps_cluster.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_retarget_replicated(const ps_table_t *t)
{
    return t->replicas > 1 && t->ring && ps_ring_size(t->ring) > 1;
}

uint64_t ps_retarget_limit_ns(const ps_t *ps)
{
    long long ttl_s = ps->d ? ps->d->config.cluster_lease_ttl_s : 0;
    if (ttl_s <= 0)
        ttl_s = 5;
    return (uint64_t)ttl_s * PS_FAILOVER_TTLS * 1000000000ull;
}

int ps_retarget_served_here(const ps_table_t *t, uint32_t shard)
{
    return (int)t->owner[shard] == t->self_server && t->shards && t->shards[shard];
}

const char *ps_retarget_primary(const ps_table_t *t, uint32_t shard)
{
    return ps_ring_name(t->ring, t->owner[shard]);
}

void ps_retarget_stall(ps_table_t *t, uint64_t *stalled_ns, const char *why)
{
    ps_retarget_stall_since(t, stalled_ns, why, salusd_now_ns());
}

void ps_retarget_stall_since(ps_table_t *t, uint64_t *stalled_ns, const char *why,
                             uint64_t since)
{
    if (*stalled_ns)
        return;
    *stalled_ns = since;
    if (t->outage_ns) {
        if (since < t->outage_ns) /* (an update unanswered since before it began) */
            t->outage_ns = since;
        return;
    }
    t->outage_ns = since;
    snprintf(t->outage_why, sizeof(t->outage_why), "%s", why);
    LOG_WARN("ps: table '%s' of group %s: %s: its updates and reads wait for a new view "
             "(at most %llu s)", t->name, t->group, why,
             (unsigned long long)(ps_retarget_limit_ns(t->ps) / 1000000000ull));
}

void ps_retarget_recovered(ps_table_t *t, uint64_t *stalled_ns, const char *what)
{
    if (!*stalled_ns)
        return;
    *stalled_ns = 0;
    if (!t->outage_ns)
        return; /* the outage ended already (another update or read first) */
    uint64_t took = salusd_now_ns() - t->outage_ns;
    t->outage_ns = 0;
    t->failovers++;
    t->failover_ns = took;
    t->ps->stats.failovers++;
    t->ps->stats.failover_last_ns = took;
    LOG_INFO("ps: table '%s' of group %s: recovered after %.3f s (%s): a stalled %s was "
             "answered", t->name, t->group, (double)took / 1e9, t->outage_why, what);
}

/* 1 when a stalled update or read still waits for a primary: its server answered -ESTALE
 * since the last view, or cannot be reached (one that is reachable and only keeps it, as a
 * primary keeps a read or update beyond its sources' clocks, is not waited for a view). */
static int waits_for_view(ps_t *ps, uint64_t stalled_ns, int refused, const char *node)
{
    return stalled_ns && (refused || !ps_cluster_reachable(ps->d, node));
}

/* The oldest stall that waits for a view in t, or 0. */
static uint64_t oldest_stall(const ps_table_t *t, uint32_t *shard, int *read)
{
    uint64_t oldest = 0;
    for (uint32_t s = 0; t->streams && s < t->layout.shards; s++) {
        const ps_stream_t *st = &t->streams[s];
        uint64_t at = st->stalled_ns;
        if (waits_for_view(t->ps, at, st->refused, st->sent_to) && (!oldest || at < oldest)) {
            oldest = at;
            *shard = s;
            *read = 0;
        }
    }
    for (const ps_fetch_t *f = t->ps->fetches; f; f = f->next)
        if (f->table == t && waits_for_view(t->ps, f->stalled_ns, f->refused, f->node) &&
            (!oldest || f->stalled_ns < oldest)) {
            oldest = f->stalled_ns;
            *shard = f->shard;
            *read = 1;
        }
    return oldest;
}

void ps_retarget_check(ps_t *ps)
{
    uint64_t now = salusd_now_ns(), limit = ps_retarget_limit_ns(ps);
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        if (t->state != PS_TABLE_READY)
            continue;
        uint32_t shard = 0;
        int read = 0;
        uint64_t since = oldest_stall(t, &shard, &read);
        if (!since || now - since <= limit)
            continue;
        char err[2 * PS_ERR_BYTES]; /* (the table keeps PS_ERR_BYTES of it) */
        snprintf(err, sizeof(err), "table '%s': no primary of shard %u answered its %s for "
                 "%.1f s (%d lease TTLs), and no new view replaced it: %s", t->name, shard,
                 read ? "read" : "update", (double)(now - since) / 1e9, PS_FAILOVER_TTLS,
                 t->outage_why);
        LOG_WARN("ps: %s", err);
        ps_table_fail(t, -EHOSTUNREACH, err);
    }
}

/* The table's fetches that must be asked again now (their primary changed, or they wait for
 * one), off ps->fetches. */
static ps_fetch_t *take_retargeted(ps_table_t *t)
{
    ps_fetch_t *taken = NULL;
    for (ps_fetch_t **fp = &t->ps->fetches; *fp;) {
        ps_fetch_t *f = *fp;
        if (f->table == t &&
            (f->stalled_ns || strcmp(f->node, ps_retarget_primary(t, f->shard)) != 0)) {
            *fp = f->next;
            f->next = taken;
            taken = f;
        } else
            fp = &f->next;
    }
    return taken;
}

/* Reads of this node's workers kept on a shard here that this daemon no longer primaries:
 * each goes to the new primary as a slice answered -ESTALE does (ps_pull_slice). */
static uint32_t move_local_reads(ps_table_t *t)
{
    uint32_t moved = 0;
    for (ps_wait_t **wp = &t->waits; *wp;) {
        ps_wait_t *w = *wp;
        if (!w->pull || (int)t->owner[w->shard] == t->self_server) {
            wp = &w->next;
            continue;
        }
        *wp = w->next;
        ps_pull_slice(w->pull, -ESTALE, "the shard moved", w->out_index, NULL, 0, 0, 0, 0, 0);
        free(w);
        moved++;
    }
    return moved;
}

void ps_retarget_view_changed(ps_table_t *t)
{
    if (t->state != PS_TABLE_READY || !t->ring || !t->owner)
        return;
    uint32_t resent = 0, asked = 0, moved = 0;
    /* a new view is progress: what still waits for a primary has the whole bound again */
    uint64_t now = salusd_now_ns();
    for (uint32_t s = 0; t->streams && s < t->layout.shards; s++) {
        t->streams[s].refused = 0;
        if (t->streams[s].stalled_ns)
            t->streams[s].stalled_ns = now;
    }
    for (ps_fetch_t *f = t->ps->fetches; f; f = f->next)
        if (f->table == t) {
            f->refused = 0;
            if (f->stalled_ns)
                f->stalled_ns = now;
        }
    for (uint32_t s = 0; t->streams && s < t->layout.shards; s++) {
        ps_stream_t *st = &t->streams[s];
        if (!st->head || !st->in_flight)
            continue; /* nothing on its way: the next send goes to the new primary */
        if (!st->stalled_ns && strcmp(st->sent_to, ps_retarget_primary(t, s)) == 0)
            continue;
        LOG_DEBUG("ps: table '%s' shard %u: update %llu (clock %llu) sent again to %s (was %s)",
                  t->name, s, (unsigned long long)st->head->seq,
                  (unsigned long long)st->head->clock, ps_retarget_primary(t, s), st->sent_to);
        resent++;
        ps_worker_resend_head(t, s);
        if (t->state != PS_TABLE_READY)
            return;
    }
    for (ps_fetch_t *f = take_retargeted(t), *next; f; f = next) {
        next = f->next;
        asked++;
        ps_pull_fetch_ask(f, 0);
    }
    if (t->state == PS_TABLE_READY)
        moved = move_local_reads(t);
    if (resent || asked || moved || t->outage_ns)
        LOG_INFO("ps: table '%s' of group %s: new view: %u update(s) sent again, %u read(s) "
                 "asked again of the new primaries, %u read(s) here moved to them", t->name,
                 t->group, resent, asked, moved);
}

/* When a stall on a node found down now began: when the update or read went there (a cut link
 * is found down later than that), but not before one lease TTL ago. A server is found down at
 * most a TTL after it fell silent (its lease ends then), and a read or update it kept before
 * that was waiting for its clock (BSP: the other ranks' pushes), not for a server: a read kept
 * 14 s for a slow rank must not fail the moment its server dies. */
static uint64_t stalled_since(const ps_t *ps, uint64_t went_ns)
{
    uint64_t now = salusd_now_ns(), ttl = ps_retarget_limit_ns(ps) / PS_FAILOVER_TTLS;
    uint64_t floor = now > ttl ? now - ttl : 1; /* (0 would mean "not stalled") */
    return went_ns && went_ns > floor ? went_ns : floor;
}

void ps_retarget_node_down(ps_t *ps, const char *node)
{
    char err[PS_ERR_BYTES];
    snprintf(err, sizeof(err), "server %s is unreachable", node);
    for (ps_fetch_t **fp = &ps->fetches; *fp;) {
        ps_fetch_t *f = *fp;
        if (strcmp(f->node, node) != 0) {
            fp = &f->next;
        } else if (ps_retarget_replicated(f->table) && f->table->state == PS_TABLE_READY) {
            /* kept for the next view's primary; not answered since it was asked (or a TTL) */
            ps_retarget_stall_since(f->table, &f->stalled_ns, err, stalled_since(ps, f->asked_ns));
            fp = &f->next;
        } else {
            *fp = f->next;
            ps_pull_fetch_finish(f, -EHOSTUNREACH, err, NULL, 0, 0, 0, 0);
        }
    }
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        if (!t->streams || t->state != PS_TABLE_READY)
            continue;
        int replicated = ps_retarget_replicated(t);
        for (uint32_t s = 0; s < t->layout.shards; s++) {
            ps_stream_t *st = &t->streams[s];
            int sent_there = st->in_flight && strcmp(st->sent_to, node) == 0;
            int served_there = (int)t->owner[s] != t->self_server &&
                               strcmp(ps_retarget_primary(t, s), node) == 0;
            if (!sent_there && !served_there)
                continue;
            if (!replicated) {
                snprintf(err, sizeof(err), "table '%s': server %s is unreachable", t->name,
                         node);
                ps_table_fail(t, -EHOSTUNREACH, err);
                break;
            }
            /* an update on its way there has not been answered since it first went (a cut
             * link is found down later than that) */
            if (st->head && st->in_flight)
                ps_retarget_stall_since(
                    t, &st->stalled_ns, err,
                    sent_there && st->first_sent_ns ? stalled_since(ps, st->first_sent_ns)
                                                    : salusd_now_ns());
        }
    }
}

/* ---- the retry timer: updates and reads on their way ---------------------------------- */
void ps_retarget_arm_retry(ps_t *ps)
{
    if (!evtimer_pending(ps->retry_timer, NULL)) { /* (idle daemons never wake) */
        struct timeval every = {0, 250000};
        evtimer_add(ps->retry_timer, &every);
    }
}

void ps_retarget_update_sent(ps_t *ps, uint64_t handle, uint32_t shard, uint64_t seq, int ok)
{
    for (ps_table_t *t = ps->tables; t; t = t->next) {
        if (t->handle != handle || !t->streams || shard >= t->layout.shards)
            continue;
        ps_stream_t *st = &t->streams[shard];
        if (st->in_flight && st->head && st->head->seq == seq) {
            st->sent = 1;
            st->sent_ns = ok ? salusd_now_ns() : 0; /* not sent: the next retry resends */
        }
    }
}

void ps_retarget_retry(ps_t *ps)
{
    uint64_t now = salusd_now_ns();
    ps_retarget_check(ps); /* what waited for a primary too long fails its table */
    /* remote reads not answered in time: asked again (a read is idempotent; the server
     * answers a request it still holds once); those that wait for a primary, of the shard's
     * primary now */
    ps_fetch_t *due = NULL;
    for (ps_fetch_t **fp = &ps->fetches; *fp;) {
        ps_fetch_t *f = *fp;
        uint64_t after_ms = f->stalled_ns ? PS_STALLED_RETRY_MS : PS_FETCH_RESEND_MS;
        if (now - f->sent_ns < after_ms * 1000000ull) {
            fp = &f->next;
        } else if (f->stalled_ns) {
            *fp = f->next;
            f->next = due;
            due = f;
        } else {
            LOG_DEBUG("ps: table '%s' shard %u: read %llu asked again of %s", f->table->name,
                      f->shard, (unsigned long long)f->req, f->node);
            ps_msg_send_pull(f->table, f);
            f->sent_ns = now;
            fp = &f->next;
        }
    }
    for (ps_fetch_t *f = due, *next; f; f = next) {
        next = f->next;
        LOG_DEBUG("ps: table '%s' shard %u: read %llu asked again of %s", f->table->name,
                  f->shard, (unsigned long long)f->req, ps_retarget_primary(f->table, f->shard));
        ps_pull_fetch_ask(f, 0);
    }
    int out = 0;
    for (ps_table_t *t = ps->tables; t && !out; t = t->next)
        for (uint32_t s = 0; t->streams && t->state != PS_TABLE_FAILED && s < t->layout.shards;
             s++)
            out |= t->streams[s].in_flight;
    out |= ps->fetches != NULL;
    if (!out) {
        evtimer_del(ps->retry_timer);
        return;
    }
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        for (uint32_t s = 0; t->streams && t->state != PS_TABLE_FAILED && s < t->layout.shards;
             s++) {
            ps_stream_t *st = &t->streams[s];
            if (st->head && st->head->seq != st->backoff_seq) {
                st->backoff_seq = st->head->seq;
                st->backoff = 0;
            }
            /* A head whose primary is reachable but slow to acknowledge (it waits for its
             * standbys: with replicas a large clock takes seconds) is sent again less and
             * less often: each resend is forwarded again to the standbys still missing it, and
             * resending every 2 s under such load only grew the queues. A view change sends it
             * again at once (ps_retarget_view_changed), whatever its backoff. */
            uint32_t shift = st->backoff < PS_UPDATE_BACKOFF_MAX ? st->backoff
                                                                 : PS_UPDATE_BACKOFF_MAX;
            uint64_t after_ms = st->stalled_ns ? PS_STALLED_RETRY_MS
                                               : (uint64_t)PS_UPDATE_RETRY_MS << shift;
            if (!st->in_flight || !st->sent || now - st->sent_ns < after_ms * 1000000ull)
                continue;
            if (!st->stalled_ns)
                st->backoff++;
            if (!st->stalled_ns && st->first_sent_ns && st->warned_ns != st->first_sent_ns &&
                now - st->first_sent_ns > ps_retarget_limit_ns(ps)) {
                /* its primary is reachable and keeps it: waiting on a standby, or beyond the
                 * sync window of a slow source; never a silent wait */
                st->warned_ns = st->first_sent_ns;
                LOG_WARN("ps: table '%s' of group %s shard %u: update %llu (clock %llu) not "
                         "acknowledged by %s for %.1f s: sent again (its primary waits for "
                         "a standby, or for slower ranks' clocks)", t->name, t->group, s,
                         (unsigned long long)st->head->seq,
                         (unsigned long long)st->head->clock, st->sent_to,
                         (double)(now - st->first_sent_ns) / 1e9);
            }
            LOG_DEBUG("ps: table '%s' shard %u: update %llu resent to %s", t->name, s,
                      (unsigned long long)st->head->seq, ps_retarget_primary(t, s));
            ps_worker_resend_head(t, s); /* here, or to the primary now */
        }
    }
}
