/* The parameter-server service (ps.h): start and stop, the deferred callbacks, and the entry
 * points the local endpoint calls; the work is in ps_tables.c (open, quota), ps_worker.c
 * (pushes, clocks, pulls), ps_server.c (shards served here), ps_msg.c (messages between
 * daemons) and ps_report.c (salusctl groups, /metrics). */
#include "ps-internal.h"
#include "ps_ckpt.h"
#include "ps_cluster.h"
#include "ps_fed_table-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run_calls(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_t *ps = arg;
    ps_tables_reap(ps); /* failed tables' worker side (ps_table_fail) */
    /* the calls queued before this turn: a callback may queue more (they run on the next
     * turn) or forget an owner (its calls leave the queue before they are reached) */
    size_t n = 0;
    ps_call_t *c;
    TAILQ_FOREACH(c, &ps->calls, link)
        n++;
    while (n-- > 0 && (c = TAILQ_FIRST(&ps->calls)) != NULL) {
        TAILQ_REMOVE(&ps->calls, c, link);
        if (c->done)
            c->done(c->arg, c->rc, c->rc < 0 ? c->err : NULL);
        else if (c->pull)
            c->pull(c->arg, c->rc, c->rc < 0 ? c->err : NULL, &c->read);
        free(c);
    }
    if (!TAILQ_EMPTY(&ps->calls))
        event_active(ps->call_event, EV_TIMEOUT, 1);
}

static ps_call_t *queue_call(ps_t *ps, const void *owner, void *arg, int rc, const char *err)
{
    ps_call_t *c = calloc(1, sizeof(*c));
    if (!c) {
        LOG_ERROR("ps: out of memory: a callback is lost");
        return NULL;
    }
    c->owner = owner ? owner : (const void *)ps; /* NULL owners are the daemon's own */
    c->arg = arg;
    c->rc = rc;
    snprintf(c->err, sizeof(c->err), "%s", err ? err : "");
    TAILQ_INSERT_TAIL(&ps->calls, c, link);
    event_active(ps->call_event, EV_TIMEOUT, 1);
    return c;
}

void ps_call_done(ps_t *ps, const void *owner, ps_done_fn done, void *arg, int rc,
                  const char *err)
{
    ps_call_t *c = done ? queue_call(ps, owner, arg, rc, err) : NULL;
    if (c)
        c->done = done;
}

void ps_call_pull(ps_t *ps, const void *owner, ps_pull_fn fn, void *arg, int rc,
                  const char *err, const ps_read_t *read)
{
    ps_call_t *c = fn ? queue_call(ps, owner, arg, rc, err) : NULL;
    if (c) {
        c->pull = fn;
        if (read)
            c->read = *read;
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_retarget_retry(arg);
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_worker_pump_later(arg);
}

static void on_peer_down(void *ctx, const char *node)
{
    ps_t *ps = ctx;
    LOG_INFO("ps: node %s is unreachable: what waits on it fails", node);
    ps_retarget_node_down(ps, node);
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        ps_server_drop_waits(t, node, NULL);
        if (t->state == PS_TABLE_OPENING && t->opens_pending) {
            for (size_t i = 0; t->ring && i < ps_ring_size(t->ring); i++)
                if (strcmp(ps_ring_name(t->ring, i), node) == 0) {
                    char err[PS_ERR_BYTES];
                    snprintf(err, sizeof(err), "table '%s': server %s is unreachable",
                             t->name, node);
                    ps_table_fail(t, -EHOSTUNREACH, err);
                    break;
                }
            continue;
        }
        int source = 0;
        for (uint32_t s = 0; s < t->sources; s++)
            if (strcmp(t->source_names[s], node) == 0 && !t->source_over[s]) {
                t->source_over[s] = 1;
                source = 1;
            }
        if (source && t->state == PS_TABLE_READY && t->spec.sync.kind != PS_SYNC_ASP) {
            /* its clocks can no longer complete: what waits for them fails, and so does
             * what the table's workers here ask next */
            char err[PS_ERR_BYTES];
            snprintf(err, sizeof(err), "table '%s': node %s (it runs ranks of group %s) is "
                     "unreachable", t->name, node, t->group);
            if (t->local_workers)
                ps_table_fail(t, -EHOSTUNREACH, err);
            else
                ps_server_fail_waits(t, -EHOSTUNREACH, err);
        }
        ps_table_maybe_free(t);
    }
}

static void on_peer_up(void *ctx, const char *node)
{
    LOG_DEBUG("ps: node %s is reachable", node);
    ps_repl_peer_up(ctx, node); /* a server restarted within its lease: its tables again */
}

static void on_peer_restarted(void *ctx, const char *node)
{
    ps_repl_peer_restarted(ctx, node);
}

static void on_repl_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_repl_check(arg);
}

static const ps_cluster_hooks_t hooks = {
    .recv = ps_msg_recv,
    .peer_down = on_peer_down,
    .peer_up = on_peer_up,
    .view_changed = ps_repl_view_changed,
    .peer_restarted = on_peer_restarted,
};

int ps_start(salusd_t *d)
{
    ps_t *ps = calloc(1, sizeof(*ps));
    if (!ps) {
        LOG_ERROR("ps: out of memory at start-up");
        return -1;
    }
    ps->d = d;
    ps->next_handle = 1;
    ps->next_req = 1;
    TAILQ_INIT(&ps->calls);
    LIST_INIT(&ps->pulls);
    ps->call_event = event_new(d->base, -1, 0, run_calls, ps);
    ps->retry_timer = event_new(d->base, -1, EV_PERSIST, on_retry, ps); /* armed while an
                                                                        * update is out */
    ps->pump_timer = evtimer_new(d->base, on_pump, ps);
    ps->repl_timer = event_new(d->base, -1, EV_PERSIST, on_repl_timer, ps); /* armed while
                                                                         * forwards wait */
    if (!ps->call_event || !ps->retry_timer || !ps->pump_timer || !ps->repl_timer) {
        LOG_ERROR("ps: cannot create its events");
        goto fail;
    }
    d->ps = ps;
    if (ps_cluster_start(d, &hooks, ps) < 0) {
        d->ps = NULL;
        goto fail;
    }
    return 0;
fail:
    if (ps->call_event)
        event_free(ps->call_event);
    if (ps->retry_timer)
        event_free(ps->retry_timer);
    if (ps->pump_timer)
        event_free(ps->pump_timer);
    if (ps->repl_timer)
        event_free(ps->repl_timer);
    free(ps);
    return -1;
}

void ps_stop(salusd_t *d)
{
    ps_t *ps = ps_of(d);
    if (!ps)
        return;
    ps_cluster_stop(d);
    ps_ckpt_stop(d); /* checkpoints (ps_ckpt.h) */
    while (ps->tables)
        ps_table_free(ps->tables);
    ps_pull_t *p;
    while ((p = LIST_FIRST(&ps->pulls)) != NULL) {
        LIST_REMOVE(p, link);
        free(p);
    }
    ps_call_t *c;
    while ((c = TAILQ_FIRST(&ps->calls)) != NULL) {
        TAILQ_REMOVE(&ps->calls, c, link);
        free(c);
    }
    event_free(ps->call_event);
    event_free(ps->retry_timer);
    event_free(ps->pump_timer);
    event_free(ps->repl_timer);
    free(ps);
    d->ps = NULL;
}

static int not_started(char *err, size_t err_size)
{
    snprintf(err, err_size, "the parameter-server role is not running");
    return -ENOTSUP;
}

int ps_open(salusd_t *d, const ps_worker_t *w, const ps_table_spec_t *spec, uint64_t *handle,
            ps_done_fn done, void *arg, char *err, size_t err_size)
{
    ps_t *ps = ps_of(d);
    if (!ps)
        return not_started(err, err_size);
    int rc = ps_table_open(ps, w, spec, handle, done, arg, err, err_size);
    if (rc < 0)
        ps->stats.refused++;
    return rc;
}

uint64_t ps_table_count(salusd_t *d, const ps_worker_t *w, uint64_t handle)
{
    ps_t *ps = ps_of(d);
    ps_table_t *t = ps ? ps_table_by_handle(ps, w, handle) : NULL;
    return t && t->state == PS_TABLE_READY ? t->spec.count : 0;
}

/* The table of handle for this worker, ready, and the worker's index among the local ones. */
static ps_table_t *worker_table(ps_t *ps, const ps_worker_t *w, uint64_t handle,
                                uint32_t *index, int *rc, char *err, size_t err_size)
{
    ps_table_t *t = ps ? ps_table_by_handle(ps, w, handle) : NULL;
    if (!t || t->state == PS_TABLE_OPENING) {
        snprintf(err, err_size, "no open table with handle %llu in group %s",
                 (unsigned long long)handle, w->group ? w->group : "?");
        *rc = -ENOENT;
        return NULL;
    }
    if (t->state == PS_TABLE_FAILED) {
        snprintf(err, err_size, "%s", t->error_text);
        *rc = t->error;
        return NULL;
    }
    int i = ps_cluster_local_index(ps->d, w->group_id, w->rank);
    if (i < 0 || (uint32_t)i >= t->local_workers) {
        snprintf(err, err_size, "rank %u is not a worker of table '%s' on this node", w->rank,
                 t->name);
        *rc = -EPERM;
        return NULL;
    }
    *index = (uint32_t)i;
    return t;
}

/* A worker's call (push, clock, pull) on the table of handle: the table, as worker_table,
 * and the service in *psp (NULL with *rc -ENOTSUP: the role is not running). */
static ps_table_t *call_table(salusd_t *d, const ps_worker_t *w, uint64_t handle, ps_t **psp,
                              uint32_t *index, int *rc, char *err, size_t err_size)
{
    ps_t *ps = *psp = ps_of(d);
    if (!ps) {
        *rc = not_started(err, err_size);
        return NULL;
    }
    return worker_table(ps, w, handle, index, rc, err, err_size);
}

/* A call refused (rc < 0): counted when the role runs. */
static int call_refused(ps_t *ps, int rc)
{
    if (ps)
        ps->stats.refused++;
    return rc;
}

/* A call's own check failed: NULL, with *rc and err set. */
static ps_table_t *call_invalid(int *rc, char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static ps_table_t *call_invalid(int *rc, char *err, size_t err_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
    *rc = -EINVAL;
    return NULL;
}

int ps_push(salusd_t *d, const ps_worker_t *w, uint64_t handle, const ps_push_id_t *id,
            uint64_t offset, uint64_t n, const uint64_t *keys, const float *values,
            ps_done_fn done, void *arg, char *err, size_t err_size)
{
    ps_t *ps;
    uint32_t worker;
    int rc;
    ps_table_t *t = call_table(d, w, handle, &ps, &worker, &rc, err, err_size);
    if (t && (!id || id->rank != w->rank))
        t = call_invalid(&rc, err, err_size, "a push's id must name the pushing rank %u",
                         w->rank);
    if (t && t->fed) /* federated: salus_ps_fed_push */
        t = call_invalid(&rc, err, err_size,
                         "table '%s' is federated: push with salus_ps_fed_push", t->name);
    if (t)
        rc = ps_worker_push(t, worker, id, offset, n, keys, values, err, err_size);
    if (rc < 0)
        return call_refused(ps, rc);
    if (rc == 0)
        ps->stats.pushes_duplicate++;
    else {
        ps->stats.pushes++;
        ps->stats.push_bytes += n * sizeof(float);
    }
    ps_call_done(ps, w->owner, done, arg, rc == 0 ? 1 : 0, NULL); /* 1: this one a duplicate */
    return 0;
}

int ps_push_reads_once(salusd_t *d, const ps_worker_t *w, uint64_t handle)
{
    ps_t *ps = ps_of(d);
    uint32_t worker;
    int rc;
    char err[PS_ERR_BYTES];
    ps_table_t *t = ps ? worker_table(ps, w, handle, &worker, &rc, err, sizeof(err)) : NULL;
    return t && t->state == PS_TABLE_READY && t->agg != NULL &&
           ps_agg_clock_fresh(t->agg, ps_agg_clock_of(t->agg, worker));
}

int ps_clock(salusd_t *d, const ps_worker_t *w, uint64_t handle, uint64_t clock,
             ps_done_fn done, void *arg, char *err, size_t err_size)
{
    ps_t *ps;
    uint32_t worker;
    int rc;
    ps_table_t *t = call_table(d, w, handle, &ps, &worker, &rc, err, err_size);
    if (t)
        rc = t->fed ? ps_fed_table_clock(t, worker, clock, err, err_size)
                    : ps_worker_clock(t, worker, clock, err, err_size);
    if (rc < 0)
        return call_refused(ps, rc);
    ps_call_done(ps, w->owner, done, arg, 0, NULL);
    return 0;
}

int ps_pull(salusd_t *d, const ps_worker_t *w, uint64_t handle, uint64_t clock,
            uint64_t offset, uint64_t n, float *out, ps_pull_fn done, void *arg, char *err,
            size_t err_size)
{
    ps_t *ps;
    uint32_t worker;
    int rc;
    ps_table_t *t = call_table(d, w, handle, &ps, &worker, &rc, err, err_size);
    if (t && !out)
        t = call_invalid(&rc, err, err_size, "a pull needs a buffer");
    if (t)
        rc = t->fed ? ps_fed_table_pull(t, worker, clock, offset, n, out, done, arg, w->owner,
                                        err, err_size)
                    : ps_pull_start(t, w, clock, offset, n, out, done, arg, err, err_size);
    return rc < 0 ? call_refused(ps, rc) : 0;
}

void ps_forget_owner(salusd_t *d, const void *owner)
{
    ps_t *ps = ps_of(d);
    if (!ps || !owner)
        return;
    ps_call_t *c, *next;
    for (c = TAILQ_FIRST(&ps->calls); c; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->owner == owner) {
            TAILQ_REMOVE(&ps->calls, c, link);
            free(c);
        }
    }
    ps_fed_table_forget_owner(ps, owner);
    ps_pull_t *p;
    LIST_FOREACH(p, &ps->pulls, link)
        if (p->owner == owner) {
            p->owner = NULL; /* its slices still arrive: they go nowhere */
            p->out = NULL;
        }
    for (ps_table_t *t = ps->tables; t; t = t->next)
        for (ps_open_wait_t **wp = &t->waiters; *wp;) {
            ps_open_wait_t *wt = *wp;
            if (wt->owner == owner) {
                *wp = wt->next;
                free(wt);
            } else
                wp = &wt->next;
        }
}

void ps_group_over(salusd_t *d, uint64_t group_id)
{
    ps_t *ps = ps_of(d);
    if (!ps || !group_id)
        return;
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        if (t->group_id != group_id)
            continue;
        LOG_INFO("ps: group %s is over here: table '%s' goes", t->group, t->name);
        if (t->state == PS_TABLE_OPENING)
            ps_table_fail(t, -ECANCELED, "the group is over");
        else {
            ps_msg_send_bye(t);
            if (t->self_source >= 0)
                t->source_final[t->self_source] = ps_worker_clocks_sent(t);
            ps_worker_fini(t);
            t->worker_over = 1;
            t->group_id = 0;
            if (t->self_source >= 0)
                t->source_over[t->self_source] = 1;
            ps_server_fail_stranded(t);
            ps_table_maybe_free(t);
        }
    }
}

const jobs_observer_t ps_jobs_observer = {
    .group_over = ps_group_over,
    .pack_group_tables = ps_report_group_tables,
};
