/* A table's replica set in etcd, read and watched (ps_cluster.h: a table's replica set):
 * P/psv/UID/GROUP/EPOCH/TABLE created only when absent, changed by compare-and-swap on its mod
 * revision (the view's number); the watched tables' views read when watched and then from one
 * etcd watch per group name (the prefix P/psv/UID/GROUP/: every table of it, whatever its
 * epoch), handed to hooks.view_changed on a later loop turn, once per newer view, in order; the
 * fail-over (a member's lease ended: ps_replicas_failover_step decides who proposes what).
 * Without a cluster every view is {self}, number 1, R 1, and never changes. */
#include "ps_cluster-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ps_replicas_t *local_views; /* daemons without a cluster (several in tests) */

/* ---- bookkeeping ---------------------------------------------------------------------------- */

static ps_replicas_t *views_of(const salusd_t *d)
{
    ps_cluster_t *ps = ps_of(d);
    if (ps)
        return ps->views;
    for (ps_replicas_t *vs = local_views; vs; vs = vs->next)
        if (vs->d == d)
            return vs;
    return NULL;
}

static void on_tick(evutil_socket_t fd, short what, void *arg);
static void on_deliver(evutil_socket_t fd, short what, void *arg);

static ps_replicas_t *views_new(salusd_t *d, ps_cluster_t *ps)
{
    ps_replicas_t *vs = calloc(1, sizeof(*vs));
    if (!vs)
        return NULL;
    vs->d = d;
    vs->ps = ps;
    vs->deliver = event_new(d->base, -1, 0, on_deliver, vs);
    vs->tick = ps ? event_new(d->base, -1, EV_PERSIST, on_tick, vs) : NULL;
    if (!vs->deliver || (ps && !vs->tick)) {
        if (vs->deliver)
            event_free(vs->deliver);
        if (vs->tick)
            event_free(vs->tick);
        free(vs);
        return NULL;
    }
    return vs;
}

static ps_replicas_t *views_get(salusd_t *d)
{
    ps_replicas_t *vs = views_of(d);
    ps_cluster_t *ps = ps_of(d);
    if (vs || !ps)
        return vs;
    ps->views = views_new(d, ps);
    return ps->views;
}

static const ps_cluster_hooks_t *hooks_of(const ps_replicas_t *vs, void **ctx)
{
    if (vs->ps) {
        *ctx = vs->ps->ctx;
        return vs->ps->started ? &vs->ps->hooks : NULL;
    }
    *ctx = vs->ctx;
    return &vs->hooks;
}

vtable_t *ps_replicas_table_find(ps_replicas_t *vs, uid_t uid, const char *group, uint64_t epoch,
                                 const char *table)
{
    for (vtable_t *t = vs->tables; t; t = t->next)
        if (t->uid == uid && t->epoch == epoch && strcmp(t->group, group) == 0 &&
            strcmp(t->table, table) == 0)
            return t;
    return NULL;
}

static vgroup_t *group_find(ps_replicas_t *vs, uid_t uid, const char *group)
{
    for (vgroup_t *g = vs->groups; g; g = g->next)
        if (g->uid == uid && strcmp(g->group, group) == 0)
            return g;
    return NULL;
}

void ps_replicas_req_unlink(ps_replicas_t *vs, vreq_t *r)
{
    for (vreq_t **p = &vs->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

void ps_replicas_req_free(vreq_t *r)
{
    if (!r->finished && r->free_arg)
        r->free_arg(r->arg);
    if (r->ev)
        event_free(r->ev);
    free(r);
}

/* ---- views read ------------------------------------------------------------------------------ */


/* A view of a watched table read (from etcd, or a create's or proposal's answer): queued for
 * view_changed when newer than every one read before. */
void ps_replicas_seen(ps_replicas_t *vs, vtable_t *t, const ps_view_t *v)
{
    if (v->number <= t->seen.number)
        return;
    if (t->queued == t->queue_cap) {
        uint32_t cap = t->queue_cap ? t->queue_cap * 2 : 2;
        ps_view_t *q = realloc(t->queue, cap * sizeof(*q));
        if (!q) {
            LOG_ERROR("ps: out of memory: the view %" PRIu64 " of table %s/%s is not read",
                      v->number, t->group, t->table);
            return;
        }
        t->queue = q;
        t->queue_cap = cap;
    }
    t->queue[t->queued++] = *v;
    t->seen = *v;
    struct timeval now = {0, 0};
    event_add(vs->deliver, &now); /* a later loop turn */
    ps_replicas_failover_eval(vs, t);
}

static void on_deliver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_replicas_t *vs = arg;
    void *ctx;
    /* one view at a time, the table found again after each call: view_changed may unwatch */
    for (;;) {
        vtable_t *t = vs->tables;
        while (t && t->queued == 0)
            t = t->next;
        if (!t)
            return;
        ps_view_t v = t->queue[0];
        memmove(t->queue, t->queue + 1, (t->queued - 1) * sizeof(*t->queue));
        t->queued--;
        uid_t uid = t->uid;
        uint64_t epoch = t->epoch;
        char group[LAUNCH_GROUP_BYTES], table[PS_NAME_BYTES];
        snprintf(group, sizeof(group), "%s", t->group);
        snprintf(table, sizeof(table), "%s", t->table);
        if (vs->ps) /* (without a cluster the one view says nothing) */
            LOG_INFO("ps: view of table %s/%s: %s (view %" PRIu64 ", %u replica%s)", group,
                     table, v.servers, v.number, v.replicas, v.replicas == 1 ? "" : "s");
        const ps_cluster_hooks_t *h = hooks_of(vs, &ctx);
        if (h && h->view_changed)
            h->view_changed(ctx, uid, group, epoch, table, &v);
    }
}

/* One key read under a watched group's prefix (a listing or the watch): EPOCH/TABLE. */
static void kv_seen(ps_replicas_t *vs, const vgroup_t *g, const etcd_kv_t *kv)
{
    size_t plen = strlen(g->prefix);
    if (kv->key_len <= plen || memcmp(kv->key, g->prefix, plen) != 0 ||
        kv->key_len - plen >= 32 + PS_NAME_BYTES)
        return;
    char rest[32 + PS_NAME_BYTES], table[PS_NAME_BYTES];
    memcpy(rest, kv->key + plen, kv->key_len - plen);
    rest[kv->key_len - plen] = 0;
    unsigned long long epoch = 0;
    int used = 0;
    if (sscanf(rest, "%llu/%n", &epoch, &used) != 1 || used == 0 ||
        snprintf(table, sizeof(table), "%s", rest + used) >= (int)sizeof(table))
        return;
    vtable_t *t = ps_replicas_table_find(vs, g->uid, g->group, epoch, table);
    if (!t || kv->mod_revision <= 0 || (uint64_t)kv->mod_revision <= t->seen.number)
        return;
    ps_view_t v;
    char why[200];
    if (ps_replicas_parse(kv->value, kv->value_len, &v, why, sizeof(why)) < 0) {
        LOG_WARN("ps: the view of table %s/%s in etcd (revision %lld) is malformed: %s: ignored",
                 g->group, table, (long long)kv->mod_revision, why);
        return;
    }
    v.number = (uint64_t)kv->mod_revision;
    ps_replicas_seen(vs, t, &v);
}

static void on_watch(void *ctx, const etcd_event_t *events, size_t count, int64_t revision,
                     int error, const char *message)
{
    vgroup_t *g = ctx; /* alive: its watch is cancelled before it is freed */
    ps_replicas_t *vs = g->vs;
    (void)revision;
    if (error == -ERANGE) { /* compacted past what was read: read again, then watch again */
        LOG_WARN("ps: the views' watch of group %s fell behind etcd's compaction (%s): "
                 "reading again", g->group, message);
        etcd_watch_cancel(g->w);
        g->w = NULL;
        g->need_read = 1;
        return;
    }
    if (error) {
        cluster_count_etcd_error(vs->ps->cl);
        LOG_DEBUG("ps: the views' watch of group %s: %s", g->group, message);
        return;
    }
    for (size_t i = 0; i < count; i++)
        if (events[i].kind == ETCD_EVENT_PUT)
            kv_seen(vs, g, &events[i].kv);
    /* a deletion: the group run is over (ps_cluster_ring_forget); nothing to tell */
}

static void on_read(void *ctx, const etcd_result_t *res)
{
    vreq_t *r = ctx;
    ps_replicas_t *vs = r->vs;
    ps_replicas_req_unlink(vs, r);
    vgroup_t *g = r->cancelled ? NULL : group_find(vs, r->uid, r->group);
    if (g) {
        g->read_busy = 0;
        if (res->error) {
            cluster_count_etcd_error(vs->ps->cl);
            g->need_read = 1; /* the tick reads again */
            LOG_DEBUG("ps: reading the views of group %s: %s", g->group, res->message);
        } else {
            for (size_t i = 0; i < res->count; i++)
                kv_seen(vs, g, &res->kvs[i]);
            if (!g->w) {
                g->w = etcd_watch(cluster_etcd(vs->ps->cl), g->prefix, res->revision + 1,
                                  on_watch, g);
                if (!g->w)
                    g->need_read = 1;
            }
        }
    }
    ps_replicas_req_free(r);
}

/* Reads every view of g's run (and starts its watch after that read). */
static void group_read(ps_replicas_t *vs, vgroup_t *g)
{
    if (g->read_busy)
        return;
    g->need_read = 1;
    vreq_t *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    r->vs = vs;
    r->kind = VREQ_READ;
    r->uid = g->uid;
    snprintf(r->group, sizeof(r->group), "%s", g->group);
    if (etcd_get(cluster_etcd(vs->ps->cl), g->prefix, 1, on_read, r) < 0) {
        free(r);
        return;
    }
    r->next = vs->reqs;
    vs->reqs = r;
    g->read_busy = 1;
    g->need_read = 0;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_replicas_t *vs = arg;
    if (!vs->ps->started)
        return;
    for (vgroup_t *g = vs->groups; g; g = g->next)
        if (g->need_read || !g->w)
            group_read(vs, g);
    for (vtable_t *t = vs->tables; t; t = t->next) {
        ps_replicas_failover_eval(vs, t);
        ps_replicas_rejoin_eval(vs, t);
    }
}

void ps_replicas_node_gone(ps_cluster_t *ps, const char *node)
{
    ps_replicas_t *vs = ps->views;
    if (!vs)
        return;
    for (vtable_t *t = vs->tables; t; t = t->next)
        if (ps_replicas_has(t->seen.servers, node))
            ps_replicas_failover_eval(vs, t);
}

int ps_replicas_args_ok(uid_t uid, const char *group, uint64_t epoch, const char *table)
{
    (void)uid;
    return epoch > 0 && ps_key_name_ok(group, LAUNCH_GROUP_BYTES) &&
           ps_key_name_ok(table, PS_NAME_BYTES);
}

/* The views of daemon d, made when missing; NULL when d's cluster part is not started. */
ps_replicas_t *ps_replicas_ready(salusd_t *d, int *rc)
{
    cluster_t *cl = cluster_of(d);
    ps_cluster_t *ps = ps_of(d);
    *rc = -ENOTCONN;
    if (cl && (!ps || !ps->started))
        return NULL;
    ps_replicas_t *vs = views_get(d);
    *rc = vs ? 0 : (cl ? -ENOMEM : -ENOTCONN);
    return vs;
}

/* ---- watch ----------------------------------------------------------------------------------- */

int ps_replicas_watch(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                      const char *table)
{
    if (!ps_replicas_args_ok(uid, group, epoch, table))
        return -EINVAL;
    int rc;
    ps_replicas_t *vs = ps_replicas_ready(d, &rc);
    if (!vs)
        return rc;
    if (ps_replicas_table_find(vs, uid, group, epoch, table))
        return 0;
    vgroup_t *g = vs->ps ? group_find(vs, uid, group) : NULL;
    int new_group = vs->ps && !g;
    if (new_group) {
        g = calloc(1, sizeof(*g));
        if (!g)
            return -ENOMEM;
        g->vs = vs;
        g->uid = uid;
        snprintf(g->group, sizeof(g->group), "%s", group);
        int n = snprintf(g->prefix, sizeof(g->prefix), "%s/psv/%u/%s/", cluster_prefix(vs->ps->cl),
                         (unsigned)uid, group);
        if (n < 0 || (size_t)n >= sizeof(g->prefix)) {
            free(g);
            return -ENAMETOOLONG;
        }
    }
    vtable_t *t = calloc(1, sizeof(*t));
    if (!t) {
        if (new_group)
            free(g);
        return -ENOMEM;
    }
    t->uid = uid;
    t->epoch = epoch;
    snprintf(t->group, sizeof(t->group), "%s", group);
    snprintf(t->table, sizeof(t->table), "%s", table);
    t->next = vs->tables;
    vs->tables = t;
    if (!vs->ps) { /* {self}, number 1, R 1, on a later loop turn */
        ps_view_t v = {.number = 1, .replicas = 1};
        snprintf(v.servers, sizeof(v.servers), "%s", ps_cluster_self(d));
        ps_replicas_seen(vs, t, &v);
        return 0;
    }
    if (new_group) {
        g->next = vs->groups;
        vs->groups = g;
    }
    g->tables++;
    group_read(vs, g); /* a new table: its view now, whether or not the watch runs */
    struct timeval every = {.tv_sec = 0, .tv_usec = PS_VIEW_POLL_MS * 1000};
    if (!event_pending(vs->tick, EV_TIMEOUT, NULL))
        event_add(vs->tick, &every);
    return 0;
}

static void table_free(vtable_t *t)
{
    free(t->queue);
    free(t);
}

static void group_release(ps_replicas_t *vs, uid_t uid, const char *group)
{
    for (vgroup_t **p = &vs->groups; *p; p = &(*p)->next) {
        vgroup_t *g = *p;
        if (g->uid != uid || strcmp(g->group, group) != 0)
            continue;
        if (--g->tables == 0) {
            *p = g->next;
            etcd_watch_cancel(g->w); /* its read in flight finds no group: dropped */
            free(g);
            if (!vs->groups)
                event_del(vs->tick);
        }
        return;
    }
}

void ps_replicas_unwatch(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                         const char *table)
{
    ps_replicas_t *vs = views_of(d);
    if (!vs || !group || !table)
        return;
    for (vtable_t **p = &vs->tables; *p; p = &(*p)->next) {
        vtable_t *t = *p;
        if (t->uid != uid || t->epoch != epoch || strcmp(t->group, group) != 0 ||
            strcmp(t->table, table) != 0)
            continue;
        *p = t->next;
        table_free(t);
        if (vs->ps)
            group_release(vs, uid, group);
        return;
    }
}

int ps_replicas_member_alive(salusd_t *d, const char *node)
{
    if (!node)
        return 0;
    if (strcmp(node, ps_cluster_self(d)) == 0)
        return 1;
    cluster_t *cl = cluster_of(d);
    return cl && cluster_is_member(cl, node);
}

/* ---- start and stop -------------------------------------------------------------------------- */

int ps_replicas_local_start(salusd_t *d, const ps_cluster_hooks_t *hooks, void *ctx)
{
    ps_replicas_t *vs = views_of(d);
    if (!vs) {
        vs = views_new(d, NULL);
        if (!vs)
            return -ENOMEM;
        vs->next = local_views;
        local_views = vs;
    }
    if (hooks)
        vs->hooks = *hooks;
    vs->ctx = ctx;
    return 0;
}

static void views_clear(ps_replicas_t *vs, int etcd_gone)
{
    while (vs->tables) {
        vtable_t *t = vs->tables;
        vs->tables = t->next;
        table_free(t);
    }
    while (vs->groups) {
        vgroup_t *g = vs->groups;
        vs->groups = g->next;
        if (!etcd_gone)
            etcd_watch_cancel(g->w);
        free(g);
    }
    for (vreq_t **p = &vs->reqs; *p;) {
        vreq_t *r = *p;
        if (!etcd_gone && vs->ps && !r->ev) { /* in flight: its etcd callback frees it */
            r->cancelled = 1;
            p = &r->next;
            continue;
        }
        *p = r->next;
        ps_replicas_req_free(r);
    }
    if (vs->tick)
        event_del(vs->tick);
    event_del(vs->deliver);
}

static void views_free(ps_replicas_t *vs)
{
    views_clear(vs, 1);
    if (vs->tick)
        event_free(vs->tick);
    event_free(vs->deliver);
    free(vs);
}

void ps_replicas_local_stop(const salusd_t *d)
{
    for (ps_replicas_t **p = &local_views; *p; p = &(*p)->next)
        if ((*p)->d == d) {
            ps_replicas_t *vs = *p;
            *p = vs->next;
            views_free(vs);
            return;
        }
}

void ps_replicas_stop(ps_cluster_t *ps)
{
    if (ps->views)
        views_clear(ps->views, 0);
}

void ps_replicas_free(ps_cluster_t *ps)
{
    ps_replicas_servers_free(ps->d);
    if (ps->views)
        views_free(ps->views);
    ps->views = NULL;
}
