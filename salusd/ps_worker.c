/* A node's workers of a table: pushes (summed per clock by ps_agg under BSP/SSP, sent on at
 * once under ASP), clocks, the update streams to the shards (one update in flight per shard,
 * resent with the same seq when not acknowledged in time), and pulls (a slice per shard,
 * from this daemon's shards directly or from their servers over the net). */
#include "ps-internal.h"

#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_worker_init(ps_table_t *t)
{
    if (t->group_id == 0 || t->self_source < 0)
        return 0;
    int i = 0;
    const char *nodes[PS_MAX_SOURCES];
    uint32_t ranks[PS_MAX_SOURCES];
    uint32_t n = ps_cluster_group_nodes(t->ps->d, t->group_id, nodes, ranks, PS_MAX_SOURCES);
    for (uint32_t k = 0; k < n; k++)
        if (strcmp(nodes[k], t->source_names[t->self_source]) == 0)
            i = (int)ranks[k];
    t->local_workers = (uint32_t)i;
    if (t->local_workers == 0 || t->local_workers > PS_MAX_LOCAL_WORKERS)
        return -EINVAL;
    t->streams = calloc(t->layout.shards, sizeof(*t->streams));
    if (!t->streams)
        return -ENOMEM;
    for (uint32_t s = 0; s < t->layout.shards; s++)
        t->streams[s].next_seq = 1;
    if (t->spec.sync.kind == PS_SYNC_ASP) {
        t->asp_seq = calloc(t->local_workers, sizeof(*t->asp_seq));
        t->asp_clock = calloc(t->local_workers, sizeof(*t->asp_clock));
        return t->asp_seq && t->asp_clock ? 0 : -ENOMEM;
    }
    t->agg = ps_agg_create(t->spec.count, &t->spec.sync, t->local_workers);
    return t->agg ? 0 : -ENOMEM;
}

static void update_free(ps_update_t *u)
{
    free(u->keys);
    free(u->owned);
    free(u);
}

void ps_worker_fini(ps_table_t *t)
{
    for (uint32_t s = 0; t->streams && s < t->layout.shards; s++) {
        ps_stream_t *st = &t->streams[s];
        while (st->head) {
            ps_update_t *u = st->head;
            st->head = u->next;
            if (u->outgoing && --u->outgoing->pending == 0)
                free(u->outgoing);
            update_free(u);
        }
    }
    free(t->streams);
    t->streams = NULL;
    ps_agg_destroy(t->agg);
    t->agg = NULL;
    free(t->asp_seq);
    free(t->asp_clock);
    t->asp_seq = t->asp_clock = NULL;
    t->local_workers = 0;
    /* pulls of this table's workers waiting on other servers: their answers go nowhere */
    for (ps_fetch_t **fp = &t->ps->fetches; *fp;) {
        ps_fetch_t *f = *fp;
        if (f->table == t) {
            *fp = f->next;
            ps_pull_slice(f->pull, -ECANCELED, "the table is gone", 0, NULL, 0, 0, 0, 0, 0);
            free(f);
        } else
            fp = &f->next;
    }
}

/* Sends (or applies here) the head of a shard's stream when nothing is in flight. */
static void pump(ps_table_t *t, uint32_t shard)
{
    ps_stream_t *st = &t->streams[shard];
    while (st->head && !st->in_flight) {
        ps_update_t *u = st->head;
        if ((int)t->owner[shard] == t->self_server) {
            int rc = ps_server_update(t, shard, (uint32_t)t->self_source, u);
            ps_worker_acked(t, shard, u->seq, rc < 0 ? rc : 0);
            continue;
        }
        st->in_flight = 1;
        st->sent_ns = salusd_now_ns();
        if (ps_msg_send_update(t, shard, u) < 0) {
            char err[PS_ERR_BYTES];
            snprintf(err, sizeof(err), "table '%s': server %s is unreachable", t->name,
                     ps_ring_name(t->ring, t->owner[shard]));
            ps_table_fail(t, -EHOSTUNREACH, err);
            return;
        }
    }
}

static void enqueue(ps_table_t *t, uint32_t shard, ps_update_t *u)
{
    ps_stream_t *st = &t->streams[shard];
    u->seq = st->next_seq++;
    if (st->tail)
        st->tail->next = u;
    else
        st->head = u;
    st->tail = u;
    t->ps->stats.updates_sent++;
    pump(t, shard);
}

void ps_worker_acked(ps_table_t *t, uint32_t shard, uint64_t seq, int rc)
{
    if (!t->streams || shard >= t->layout.shards)
        return;
    ps_stream_t *st = &t->streams[shard];
    ps_update_t *u = st->head;
    if (!u || u->seq != seq)
        return; /* an old duplicate's ack */
    if (rc < 0)
        LOG_WARN("ps: table '%s' shard %u refused update %llu: %s", t->name, shard,
                 (unsigned long long)seq, strerror(-rc));
    st->head = u->next;
    if (!st->head)
        st->tail = NULL;
    st->in_flight = 0;
    if (u->outgoing && --u->outgoing->pending == 0) {
        ps_agg_release(t->agg, u->outgoing->clock);
        free(u->outgoing);
    }
    update_free(u);
    if (st->head && (int)t->owner[shard] != t->self_server)
        pump(t, shard);
}

void ps_worker_retry(ps_t *ps)
{
    uint64_t now = salusd_now_ns();
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        for (uint32_t s = 0; t->streams && s < t->layout.shards; s++) {
            ps_stream_t *st = &t->streams[s];
            if (!st->in_flight || now - st->sent_ns < PS_UPDATE_RETRY_MS * 1000000ull)
                continue;
            LOG_DEBUG("ps: table '%s' shard %u: update %llu resent", t->name, s,
                      (unsigned long long)st->head->seq);
            st->sent_ns = now;
            if (ps_msg_send_update(t, s, st->head) < 0)
                break;
        }
    }
}

/* Bad input with a clear message: nothing is taken. */
static int check_values(const ps_table_t *t, uint64_t offset, uint64_t n, const uint64_t *keys,
                        const float *values, char *err, size_t err_size)
{
    if (n == 0 || !values) {
        snprintf(err, err_size, "an empty push");
        return -EINVAL;
    }
    if (!keys && (offset > t->spec.count || n > t->spec.count - offset)) {
        snprintf(err, err_size, "push of [%llu, %llu) is outside table '%s' of %llu elements",
                 (unsigned long long)offset, (unsigned long long)(offset + n), t->name,
                 (unsigned long long)t->spec.count);
        return -EINVAL;
    }
    for (uint64_t i = 0; keys && i < n; i++)
        if (keys[i] >= t->spec.count) {
            snprintf(err, err_size, "key %llu is outside table '%s' of %llu elements",
                     (unsigned long long)keys[i], t->name, (unsigned long long)t->spec.count);
            return -EINVAL;
        }
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(values[i])) {
            snprintf(err, err_size, "value %llu of the push is not finite",
                     (unsigned long long)i);
            return -EINVAL;
        }
    return 0;
}

/* ASP: the push goes to each shard it touches as one contribution, at once. */
static int asp_push(ps_table_t *t, const uint64_t *keys, uint64_t offset, uint64_t n,
                    const float *values)
{
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        uint64_t first, elems, m = 0;
        ps_layout_shard(&t->layout, s, &first, &elems);
        if (!keys && (offset >= first + elems || offset + n <= first))
            continue;
        ps_update_t *u = calloc(1, sizeof(*u));
        if (!u)
            return -ENOMEM;
        if (keys) {
            for (uint64_t i = 0; i < n; i++)
                m += keys[i] >= first && keys[i] < first + elems;
            if (m == 0) {
                free(u);
                continue;
            }
            u->keys = malloc(m * sizeof(*u->keys));
            u->owned = malloc(m * sizeof(float));
            if (!u->keys || !u->owned) {
                update_free(u);
                return -ENOMEM;
            }
            for (uint64_t i = 0, j = 0; i < n; i++)
                if (keys[i] >= first && keys[i] < first + elems) {
                    u->keys[j] = keys[i] - first;
                    u->owned[j++] = values[i];
                }
        } else {
            uint64_t from = offset > first ? offset : first;
            uint64_t to = offset + n < first + elems ? offset + n : first + elems;
            m = to - from;
            u->offset = from - first;
            u->owned = malloc(m * sizeof(float));
            if (!u->owned) {
                update_free(u);
                return -ENOMEM;
            }
            memcpy(u->owned, values + (from - offset), m * sizeof(float));
        }
        u->n = m;
        u->values = u->owned;
        u->clock = 0; /* ASP applies on arrival: the clock plays no part (ps_core.h) */
        enqueue(t, s, u);
    }
    return 1;
}

int ps_worker_push(ps_table_t *t, uint32_t worker, const ps_push_id_t *id, uint64_t offset,
                   uint64_t n, const uint64_t *keys, const float *values, char *err,
                   size_t err_size)
{
    int rc = check_values(t, offset, n, keys, values, err, err_size);
    if (rc < 0)
        return rc;
    if (id->seq == 0) {
        snprintf(err, err_size, "a push's seq starts at 1");
        return -EINVAL;
    }
    if (t->spec.sync.kind == PS_SYNC_ASP) {
        if (id->seq <= t->asp_seq[worker])
            return 0; /* a retry: applied once */
        if (id->clock != t->asp_clock[worker]) {
            snprintf(err, err_size, "push for clock %llu, but rank %u is at clock %llu",
                     (unsigned long long)id->clock, id->rank,
                     (unsigned long long)t->asp_clock[worker]);
            return -EINVAL;
        }
        rc = asp_push(t, keys, offset, n, values);
        if (rc < 0) {
            snprintf(err, err_size, "out of memory");
            return rc;
        }
        t->asp_seq[worker] = id->seq;
        return 1;
    }
    rc = ps_agg_push(t->agg, worker, id->seq, id->clock, offset, n, keys, values);
    if (rc < 0)
        snprintf(err, err_size, "push (seq %llu) for clock %llu refused: rank %u is at clock %llu",
                 (unsigned long long)id->seq, (unsigned long long)id->clock, id->rank,
                 (unsigned long long)ps_agg_clock_of(t->agg, worker));
    return rc;
}

/* A clock complete on this node: its sum goes to every shard as one update. */
static void send_clock(ps_table_t *t, uint64_t clock)
{
    const float *sum = ps_agg_sum(t->agg, clock);
    ps_outgoing_t *out = sum ? calloc(1, sizeof(*out)) : NULL;
    if (!out) {
        ps_table_fail(t, -ENOMEM, "out of memory sending a clock's updates");
        return;
    }
    out->clock = clock;
    out->pending = t->layout.shards;
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        ps_update_t *u = calloc(1, sizeof(*u));
        if (!u) {
            ps_table_fail(t, -ENOMEM, "out of memory sending a clock's updates");
            return;
        }
        uint64_t first, elems;
        ps_layout_shard(&t->layout, s, &first, &elems);
        u->clock = clock;
        u->close = 1;
        u->n = elems;
        u->values = sum + first;
        u->outgoing = out;
        enqueue(t, s, u);
        if (t->state == PS_TABLE_FAILED)
            return;
    }
}

int ps_worker_clock(ps_table_t *t, uint32_t worker, uint64_t clock, char *err, size_t err_size)
{
    if (t->spec.sync.kind == PS_SYNC_ASP) {
        if (clock + 1 == t->asp_clock[worker])
            return 0;
        if (clock != t->asp_clock[worker])
            goto bad;
        t->asp_clock[worker]++;
        return 0;
    }
    int rc = ps_agg_close(t->agg, worker, clock);
    if (rc < 0)
        goto bad;
    if (rc == 1)
        send_clock(t, clock);
    return 0;
bad:
    snprintf(err, err_size, "clock %llu is not the rank's current clock %llu of table '%s'",
             (unsigned long long)clock,
             (unsigned long long)(t->agg ? ps_agg_clock_of(t->agg, worker)
                                         : t->asp_clock[worker]),
             t->name);
    return -EINVAL;
}

void ps_pull_slice(ps_pull_t *p, int rc, const char *err, uint64_t out_index,
                   const float *values, uint64_t n, uint64_t done, uint64_t done_at_request,
                   uint64_t waited_ns, int waited)
{
    ps_t *ps = p->ps;
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

int ps_worker_pull(ps_table_t *t, const ps_worker_t *w, uint64_t clock, uint64_t offset,
                   uint64_t n, float *out, ps_pull_fn done, void *arg, char *err,
                   size_t err_size)
{
    ps_t *ps = t->ps;
    if (n == 0 || offset > t->spec.count || n > t->spec.count - offset) {
        snprintf(err, err_size, "pull of [%llu, %llu) is outside table '%s' of %llu elements",
                 (unsigned long long)offset, (unsigned long long)(offset + n), t->name,
                 (unsigned long long)t->spec.count);
        return -EINVAL;
    }
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
            if (ps_server_read(t, wt) < 0)
                ps_pull_slice(p, -EIO, "the shard refused the read", 0, NULL, 0, 0, 0, 0, 0);
            continue;
        }
        ps_fetch_t *f = calloc(1, sizeof(*f));
        if (!f) {
            ps_pull_slice(p, -ENOMEM, "out of memory", 0, NULL, 0, 0, 0, 0, 0);
            continue;
        }
        f->req = ps->next_req++;
        snprintf(f->node, sizeof(f->node), "%s", ps_ring_name(t->ring, t->owner[s]));
        f->table = t;
        f->pull = p;
        f->out_index = from - offset;
        f->n = to - from;
        if (ps_msg_send_pull(t, f, s, min_done, from - first) < 0) {
            char why[PS_ERR_BYTES];
            snprintf(why, sizeof(why), "table '%s': server %s is unreachable", t->name,
                     f->node);
            ps_pull_slice(p, -EHOSTUNREACH, why, 0, NULL, 0, 0, 0, 0, 0);
            free(f);
            continue;
        }
        f->next = ps->fetches;
        ps->fetches = f;
    }
    ps_pull_slice(p, 0, NULL, 0, NULL, 0, UINT64_MAX, UINT64_MAX, 0, 0);
    return 0;
}

void ps_worker_node_down(ps_t *ps, const char *node)
{
    char err[PS_ERR_BYTES];
    snprintf(err, sizeof(err), "server %s is unreachable", node);
    for (ps_fetch_t **fp = &ps->fetches; *fp;) {
        ps_fetch_t *f = *fp;
        if (strcmp(f->node, node) == 0) {
            *fp = f->next;
            ps_pull_slice(f->pull, -EHOSTUNREACH, err, 0, NULL, 0, 0, 0, 0, 0);
            free(f);
        } else
            fp = &f->next;
    }
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        if (!t->streams || t->state != PS_TABLE_READY)
            continue;
        for (uint32_t s = 0; s < t->layout.shards; s++)
            if ((int)t->owner[s] != t->self_server &&
                strcmp(ps_ring_name(t->ring, t->owner[s]), node) == 0) {
                snprintf(err, sizeof(err), "table '%s': server %s is unreachable", t->name,
                         node);
                ps_table_fail(t, -EHOSTUNREACH, err);
                break;
            }
    }
}
