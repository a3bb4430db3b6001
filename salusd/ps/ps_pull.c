/* A node's workers' pulls: a slice per shard covering the range, from this daemon's shards
 * directly (ps_server.c) or from their servers over the net (one fetch per slice and bound,
 * shared by the co-located workers that read it meanwhile); the pull completes when every
 * slice is there, with the least done among them. */
#include "ps_retarget.h"
#include "ps_cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fetch_slice(ps_table_t *t, ps_pull_t *p, uint32_t shard, uint64_t min_done,
                       uint64_t first, uint64_t n, uint64_t out_index);

/* A slice of p answered -ESTALE (a read kept on a shard here that another server is the
 * primary of now): asked of the primary now. 0, or < 0 when it cannot be (it fails then). */
static int ask_again(ps_pull_t *p, uint64_t out_index)
{
    static int depth; /* (an answer that says -ESTALE again from inside: no loop) */
    ps_table_t *t = p->table;
    if (depth || !t || t->state != PS_TABLE_READY || out_index >= p->n)
        return -ESTALE;
    uint64_t from = p->offset + out_index, first, elems;
    uint32_t shard = ps_layout_shard_of(&t->layout, from);
    ps_layout_shard(&t->layout, shard, &first, &elems);
    uint64_t to = p->offset + p->n < first + elems ? p->offset + p->n : first + elems;
    depth++;
    int rc = fetch_slice(t, p, shard, ps_sync_min_done(&t->spec.sync, p->read.clock),
                         from - first, to - from, out_index);
    depth--;
    return rc;
}

void ps_pull_slice(ps_pull_t *p, int rc, const char *err, uint64_t out_index,
                   const float *values, uint64_t n, uint64_t done, uint64_t done_at_request,
                   uint64_t waited_ns, int waited)
{
    ps_t *ps = p->ps;
    if (rc == -ESTALE && ask_again(p, out_index) == 0)
        return; /* the slice still counts: it comes from the new primary */
    if (rc < 0 && p->rc == 0) {
        p->rc = rc;
        snprintf(p->err, sizeof(p->err), "%s", err ? err : strerror(-rc));
    }
    if (rc >= 0) {
        if (p->out && values)
            memcpy(p->out + out_index, values, n * sizeof(float));
        if (done < p->read.done)
            p->read.done = done;
        if (done_at_request < p->read.done_at_request)
            p->read.done_at_request = done_at_request;
        if (waited_ns > p->read.waited_ns)
            p->read.waited_ns = waited_ns;
        p->read.waited |= waited;
    }
    if (--p->slices_left > 0)
        return;
    LIST_REMOVE(p, link);
    if (p->rc == 0) {
        ps->stats.pulls++;
        ps->stats.pull_bytes += p->n * sizeof(float);
        if (p->read.waited) {
            ps->stats.staleness_waits++;
            ps->stats.staleness_wait_ns += p->read.waited_ns;
        }
    }
    if (p->owner)
        ps_call_pull(ps, p->owner, p->done, p->arg, p->rc, p->err, &p->read);
    free(p);
}

void ps_pull_fetch_finish(ps_fetch_t *f, int rc, const char *err, const float *values,
                          uint64_t done, uint64_t done_at_request, uint64_t waited_ns, int waited)
{
    ps_table_t *t = f->table;
    if (rc == -ESTALE && t->state == PS_TABLE_READY) {
        /* not the primary (now): kept for the next view or retry */
        char why[PS_ERR_BYTES];
        snprintf(why, sizeof(why), "server %s is not the primary of shard %u now", f->node,
                 f->shard);
        ps_retarget_stall(t, &f->stalled_ns, why);
        f->refused = 1;
        f->sent_ns = salusd_now_ns();
        f->next = t->ps->fetches;
        t->ps->fetches = f;
        ps_retarget_arm_retry(t->ps);
        return;
    }
    if (rc >= 0)
        ps_retarget_recovered(t, &f->stalled_ns, "read");
    while (f->riders) {
        ps_rider_t *r = f->riders;
        f->riders = r->next;
        ps_pull_slice(r->pull, rc, err, r->out_index, values, f->n, done, done_at_request,
                      waited_ns, waited);
        free(r);
    }
    free(f);
}

/* Reads f's riders of the shard here (this daemon is its primary now). 1 when some are left
 * (-ESTALE: the shard is not ready to serve here yet), else 0. */
static int ask_here(ps_fetch_t *f)
{
    ps_table_t *t = f->table;
    while (f->riders) {
        ps_rider_t *r = f->riders;
        ps_wait_t *w = calloc(1, sizeof(*w));
        int rc = -ENOMEM;
        if (w) {
            w->shard = f->shard;
            w->min_done = f->min_done;
            w->first = f->first;
            w->n = f->n;
            w->pull = r->pull;
            w->out_index = r->out_index;
            /* (w is kept, or freed; a shard whose state is not here yet: not ready) */
            if (ps_retarget_served_here(t, f->shard))
                rc = ps_server_read(t, w);
            else {
                free(w);
                rc = -ESTALE;
            }
        }
        if (rc == -ESTALE)
            return 1;
        f->riders = r->next;
        if (rc < 0)
            ps_pull_slice(r->pull, rc == -ENOMEM ? rc : -EIO,
                          rc == -ENOMEM ? "out of memory" : "the shard refused the read", 0,
                          NULL, 0, 0, 0, 0, 0);
        free(r);
    }
    return 0;
}

void ps_pull_fetch_ask(ps_fetch_t *f, int first)
{
    ps_table_t *t = f->table;
    ps_t *ps = t->ps;
    char why[PS_ERR_BYTES];
    const char *primary = ps_retarget_primary(t, f->shard);
    f->sent_ns = salusd_now_ns();
    if (first || strcmp(f->node, primary) != 0)
        f->asked_ns = f->sent_ns;
    snprintf(f->node, sizeof(f->node), "%s", primary);
    if ((int)t->owner[f->shard] == t->self_server) {
        if (!ask_here(f)) {
            ps_retarget_recovered(t, &f->stalled_ns, "read");
            free(f);
            return;
        }
        snprintf(why, sizeof(why), "this daemon is not yet the primary of shard %u", f->shard);
        ps_retarget_stall(t, &f->stalled_ns, why);
        f->refused = 1;
    } else if (ps_msg_send_pull(t, f) < 0) {
        snprintf(why, sizeof(why), "server %s is unreachable", f->node);
        if (ps_retarget_replicated(t))
            ps_retarget_stall(t, &f->stalled_ns, why); /* the next view's primary */
        else if (first) {
            snprintf(why, sizeof(why), "table '%s': server %s is unreachable", t->name, f->node);
            ps_pull_fetch_finish(f, -EHOSTUNREACH, why, NULL, 0, 0, 0, 0);
            return;
        } /* else asked again at the next retry (a link that dropped; or the node goes down) */
    }
    f->next = ps->fetches;
    ps->fetches = f;
    ps_retarget_arm_retry(ps);
}

/* A slice of a shard served elsewhere (or here, not ready yet): rides along a fetch of the
 * same slice and bound on its way, or asks the shard's primary. 0 or -ENOMEM. */
static int fetch_slice(ps_table_t *t, ps_pull_t *p, uint32_t shard, uint64_t min_done,
                       uint64_t first, uint64_t n, uint64_t out_index)
{
    ps_t *ps = t->ps;
    ps_rider_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->pull = p;
    r->out_index = out_index;
    for (ps_fetch_t *f = ps->fetches; f; f = f->next)
        if (f->table == t && f->shard == shard && f->min_done == min_done && f->first == first &&
            f->n == n) {
            r->next = f->riders;
            f->riders = r;
            return 0;
        }
    ps_fetch_t *f = calloc(1, sizeof(*f));
    if (!f) {
        free(r);
        return -ENOMEM;
    }
    f->req = ps->next_req++;
    f->table = t;
    f->shard = shard;
    f->min_done = min_done;
    f->first = first;
    f->n = n;
    f->riders = r;
    ps_pull_fetch_ask(f, 1); /* (a failed send fails the slice: R 1) */
    return 0;
}

int ps_pull_range_check(const ps_table_t *t, uint64_t offset, uint64_t n, char *err,
                        size_t err_size)
{
    if (n == 0 || offset > t->spec.count || n > t->spec.count - offset) {
        snprintf(err, err_size, "pull of [%llu, %llu) is outside table '%s' of %llu elements",
                 (unsigned long long)offset, (unsigned long long)(offset + n), t->name,
                 (unsigned long long)t->spec.count);
        return -EINVAL;
    }
    return 0;
}

int ps_pull_start(ps_table_t *t, const ps_worker_t *w, uint64_t clock, uint64_t offset,
                  uint64_t n, float *out, ps_pull_fn done, void *arg, char *err,
                  size_t err_size)
{
    ps_t *ps = t->ps;
    int range = ps_pull_range_check(t, offset, n, err, err_size);
    if (range < 0)
        return range;
    int i = ps_cluster_local_index(ps->d, w->group_id, w->rank);
    uint64_t now_clock = t->agg ? ps_agg_clock_of(t->agg, (uint32_t)i) : t->asp_clock[i];
    if (clock > now_clock) {
        snprintf(err, err_size, "pull at clock %llu, but rank %u is at clock %llu",
                 (unsigned long long)clock, w->rank, (unsigned long long)now_clock);
        return -EINVAL;
    }
    uint32_t s0 = ps_layout_shard_of(&t->layout, offset);
    uint32_t s1 = ps_layout_shard_of(&t->layout, offset + n - 1);
    ps_pull_t *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    p->ps = ps;
    p->table = t;
    p->owner = w->owner ? w->owner : (const void *)ps;
    p->done = done;
    p->arg = arg;
    p->out = out;
    p->offset = offset;
    p->n = n;
    p->read.clock = clock;
    p->read.done = p->read.done_at_request = UINT64_MAX;
    p->started_ns = salusd_now_ns();
    p->slices_left = s1 - s0 + 1 + 1; /* one more, dropped below: none completes it early */
    LIST_INSERT_HEAD(&ps->pulls, p, link);
    uint64_t min_done = ps_sync_min_done(&t->spec.sync, clock);
    for (uint32_t s = s0; s <= s1; s++) {
        uint64_t first, elems;
        ps_layout_shard(&t->layout, s, &first, &elems);
        uint64_t from = offset > first ? offset : first;
        uint64_t to = offset + n < first + elems ? offset + n : first + elems;
        if ((int)t->owner[s] == t->self_server) {
            ps_wait_t *wt = calloc(1, sizeof(*wt));
            if (!wt) {
                ps_pull_slice(p, -ENOMEM, "out of memory", 0, NULL, 0, 0, 0, 0, 0);
                continue;
            }
            wt->shard = s;
            wt->min_done = min_done;
            wt->first = from - first;
            wt->n = to - from;
            wt->pull = p;
            wt->out_index = from - offset;
            int rc = -ESTALE;
            if (ps_retarget_served_here(t, s))
                rc = ps_server_read(t, wt);
            else
                free(wt);
            if (rc == -ESTALE) /* not ready to serve here yet: kept as a fetch, asked again */
                rc = fetch_slice(t, p, s, min_done, from - first, to - from, from - offset);
            if (rc < 0)
                ps_pull_slice(p, rc == -ENOMEM ? rc : -EIO,
                              rc == -ENOMEM ? "out of memory" : "the shard refused the read", 0,
                              NULL, 0, 0, 0, 0, 0);
            continue;
        }
        if (fetch_slice(t, p, s, min_done, from - first, to - from, from - offset) < 0)
            ps_pull_slice(p, -ENOMEM, "out of memory", 0, NULL, 0, 0, 0, 0, 0);
    }
    ps_pull_slice(p, 0, NULL, 0, NULL, 0, UINT64_MAX, UINT64_MAX, 0, 0);
    return 0;
}
