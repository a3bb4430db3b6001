/* A table's replica set in etcd, its transactions (ps_cluster.h: a table's replica set;
 * ps_replicas.c reads and watches): the first view created only when absent; a proposal reads
 * the view (its R, whether it is still `from`) and writes the new one by compare-and-swap on
 * its mod revision (the view's number); the fail-over's proposals (ps_replicas_failover_step
 * decides). Every request is bounded in time by the etcd client's (an unreachable etcd is an
 * error). */
#include "ps_cluster-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int view_key(const ps_replicas_t *vs, uid_t uid, const char *group, uint64_t epoch,
                    const char *table, char *out, size_t size)
{
    int n = snprintf(out, size, "%s/psv/%u/%s/%" PRIu64 "/%s", cluster_prefix(vs->ps->cl),
                     (unsigned)uid, group, epoch, table);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* ---- the fail-over --------------------------------------------------------------------------- */

typedef struct failover_s {
    ps_replicas_t *vs;
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    uint64_t epoch;
    char table[PS_NAME_BYTES];
    uint64_t from;
    char gone[PS_VIEW_SERVERS_BYTES];
} failover_t;

static int alive_cb(void *ctx, const char *node)
{
    return ps_replicas_member_alive(ctx, node);
}

static int propose(ps_replicas_t *vs, uid_t uid, const char *group, uint64_t epoch,
                   const char *table, uint64_t from, const char *servers, ps_view_done_fn done,
                   void *arg, void (*free_arg)(void *));

static void on_failover_done(void *arg, int rc, const char *err, const ps_view_t *view)
{
    failover_t *f = arg;
    ps_replicas_t *vs = f->vs;
    vtable_t *t = ps_replicas_table_find(vs, f->uid, f->group, f->epoch, f->table);
    if (rc == 0 && view) {
        LOG_WARN("ps: view of table %s/%s: %s left (lease ended): %s (view %" PRIu64 ")",
                 f->group, f->table, f->gone, view->servers, view->number);
        char gone[PS_VIEW_SERVERS_BYTES];
        snprintf(gone, sizeof(gone), "%s", f->gone);
        for (char *save = NULL, *n = strtok_r(gone, ",", &save); t && n;
             n = strtok_r(NULL, ",", &save))
            ps_replicas_rejoin_note(vs, t, n);
    }
    else if (rc == -ESTALE && view)
        LOG_INFO("ps: view of table %s/%s: another daemon changed view %" PRIu64 " first "
                 "(now view %" PRIu64 ": %s)", f->group, f->table, f->from, view->number,
                 view->servers);
    else
        LOG_WARN("ps: view of table %s/%s: the view without %s could not be proposed: %s",
                 f->group, f->table, f->gone, err && err[0] ? err : strerror(-rc));
    if (t) {
        ps_replicas_failover_result(&t->fo, rc, salusd_now_ns());
        ps_replicas_failover_eval(vs, t); /* lost: the view now there, judged again */
    }
    free(f);
}

void ps_replicas_failover_eval(ps_replicas_t *vs, vtable_t *t)
{
    ps_cluster_t *ps = vs->ps;
    if (!ps || !ps->started || cluster_lease_lost(ps->cl) || !cluster_members_read(ps->cl) ||
        !t->seen.number)
        return;
    char out[PS_VIEW_SERVERS_BYTES], gone[PS_VIEW_SERVERS_BYTES];
    ps_replicas_failover_act_t act = ps_replicas_failover_step(&t->fo, &t->seen, cluster_node(ps->cl), alive_cb,
                                             vs->d, salusd_now_ns(), out, sizeof(out), gone,
                                             sizeof(gone));
    if (act == PS_FAILOVER_GIVE_UP) {
        LOG_WARN("ps: view of table %s/%s: %d proposals without %s lost: this daemon leaves "
                 "view %" PRIu64 " to the others", t->group, t->table, PS_FAILOVER_MAX_TRIES,
                 gone, t->seen.number);
        return;
    }
    if (act != PS_FAILOVER_PROPOSE)
        return;
    failover_t *f = calloc(1, sizeof(*f));
    int rc = -ENOMEM;
    if (f) {
        f->vs = vs;
        f->uid = t->uid;
        f->epoch = t->epoch;
        f->from = t->seen.number;
        snprintf(f->group, sizeof(f->group), "%s", t->group);
        snprintf(f->table, sizeof(f->table), "%s", t->table);
        snprintf(f->gone, sizeof(f->gone), "%s", gone);
        LOG_INFO("ps: view of table %s/%s: %s no longer a member: proposing view %" PRIu64
                 " without it (%s)", t->group, t->table, gone, t->seen.number, out);
        rc = propose(vs, t->uid, t->group, t->epoch, t->table, t->seen.number, out,
                     on_failover_done, f, free);
    }
    if (rc < 0) {
        free(f);
        ps_replicas_failover_result(&t->fo, rc, salusd_now_ns());
    }
}

/* ---- a server back: rejoining ------------------------------------------------------------------ */

typedef struct rejoin_s {
    ps_replicas_t *vs;
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    uint64_t epoch;
    char table[PS_NAME_BYTES];
    char node[PS_NET_NODE_BYTES];
    uint64_t from;
} rejoin_t;

void ps_replicas_rejoin_note(ps_replicas_t *vs, vtable_t *t, const char *node)
{
    if (!vs->d->config.ps_rejoin || !node[0] || strlen(node) >= sizeof(t->rejoin[0].node))
        return;
    uint32_t i = 0;
    while (i < t->rejoins && strcmp(t->rejoin[i].node, node) != 0)
        i++;
    if (i == t->rejoins) {
        if (t->rejoins == PS_VIEW_REJOIN_MAX)
            return;
        t->rejoins++;
        memset(&t->rejoin[i], 0, sizeof(t->rejoin[i]));
        snprintf(t->rejoin[i].node, sizeof(t->rejoin[i].node), "%s", node);
    }
    t->rejoin[i].since_ns = salusd_now_ns();
}

static void rejoin_drop(vtable_t *t, uint32_t i)
{
    t->rejoin[i] = t->rejoin[--t->rejoins];
}

static void on_rejoin_done(void *arg, int rc, const char *err, const ps_view_t *view)
{
    rejoin_t *j = arg;
    vtable_t *t = ps_replicas_table_find(j->vs, j->uid, j->group, j->epoch, j->table);
    for (uint32_t i = 0; t && i < t->rejoins; i++)
        if (strcmp(t->rejoin[i].node, j->node) == 0)
            t->rejoin[i].busy = 0; /* (the tick forgets it once the view has it) */
    if (rc == 0 && view)
        LOG_WARN("ps: view of table %s/%s: %s rejoined (a live member again; its shards are "
                 "copied to it): %s (view %" PRIu64 ")", j->group, j->table, j->node,
                 view->servers, view->number);
    else if (rc == -ESTALE && view)
        LOG_INFO("ps: view of table %s/%s: view %" PRIu64 " changed before %s rejoined (now "
                 "view %" PRIu64 ": %s): judged again", j->group, j->table, j->from, j->node,
                 view->number, view->servers);
    else
        LOG_WARN("ps: view of table %s/%s: the view with %s back could not be proposed: %s",
                 j->group, j->table, j->node, err && err[0] ? err : strerror(-rc));
    free(j);
}

void ps_replicas_rejoin_eval(ps_replicas_t *vs, vtable_t *t)
{
    ps_cluster_t *ps = vs->ps;
    if (!t->rejoins || !ps || !ps->started || cluster_lease_lost(ps->cl) ||
        !cluster_members_read(ps->cl) || !t->seen.number)
        return;
    uint64_t now = salusd_now_ns();
    for (uint32_t i = 0; i < t->rejoins;) {
        vrejoin_t *r = &t->rejoin[i];
        int in = ps_replicas_has(t->seen.servers, r->node);
        if (r->busy) {
            i++;
            continue;
        }
        if (!vs->d->config.ps_rejoin || (in && r->out) ||
            (!r->out && in && now - r->since_ns > (uint64_t)PS_VIEW_REJOIN_FORGET_MS * 1000000ull)) {
            rejoin_drop(t, i); /* back (by itself or by a command), or never taken out */
            continue;
        }
        if (in) { /* the proposal without it is not in force yet */
            i++;
            continue;
        }
        r->out = 1;
        char with[PS_VIEW_SERVERS_BYTES];
        if (!ps_replicas_member_alive(vs->d, r->node) ||
            ps_replicas_with(t->seen.servers, r->node, with, sizeof(with)) < 0 ||
            ps_replicas_count(with) > PS_MAX_SERVERS) {
            i++;
            continue;
        }
        rejoin_t *j = calloc(1, sizeof(*j));
        if (!j)
            return;
        j->vs = vs;
        j->uid = t->uid;
        j->epoch = t->epoch;
        j->from = t->seen.number;
        snprintf(j->group, sizeof(j->group), "%s", t->group);
        snprintf(j->table, sizeof(j->table), "%s", t->table);
        snprintf(j->node, sizeof(j->node), "%s", r->node);
        LOG_INFO("ps: view of table %s/%s: %s, taken out by a fail-over, is a live member "
                 "again: proposing view %" PRIu64 " with it (%s)", t->group, t->table, r->node,
                 t->seen.number, with);
        if (propose(vs, t->uid, t->group, t->epoch, t->table, t->seen.number, with,
                    on_rejoin_done, j, free) < 0) {
            free(j);
            i++;
            continue;
        }
        r->busy = 1;
        i++;
    }
}

void ps_replicas_left(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                      const char *table, const char *node)
{
    int rc;
    ps_replicas_t *vs = cluster_of(d) ? ps_replicas_ready(d, &rc) : NULL;
    vtable_t *t = vs ? ps_replicas_table_find(vs, uid, group, epoch, table) : NULL;
    if (t)
        ps_replicas_rejoin_note(vs, t, node);
}

/* ---- create and propose ---------------------------------------------------------------------- */

static void req_finish(vreq_t *r, int rc, const char *err, const ps_view_t *view)
{
    ps_replicas_t *vs = r->vs;
    if (!r->cancelled && view && (rc == 0 || rc == -ESTALE)) {
        vtable_t *t = ps_replicas_table_find(vs, r->uid, r->group, r->epoch, r->table);
        if (t)
            ps_replicas_seen(vs, t, view);
    }
    if (!r->cancelled && r->done)
        r->done(r->arg, rc, err ? err : "", view);
    else if (r->free_arg)
        r->free_arg(r->arg);
    r->finished = 1;
}

/* The view a transaction's failure branch read (kvs): the view now there. */
static int read_current(vreq_t *r, const etcd_result_t *res, ps_view_t *v, char *err,
                        size_t err_size)
{
    if (res->count != 1) {
        snprintf(err, err_size, "the view of table '%s' is not in etcd (its group run is over)",
                 r->table);
        return -ENOENT;
    }
    char why[200];
    if (ps_replicas_parse(res->kvs[0].value, res->kvs[0].value_len, v, why, sizeof(why)) < 0 ||
        res->kvs[0].mod_revision <= 0) {
        snprintf(err, err_size, "the view of table '%s' in etcd is malformed: %s", r->table,
                 res->kvs[0].mod_revision <= 0 ? "no mod revision" : why);
        LOG_WARN("ps: %s", err);
        return -EPROTO;
    }
    v->number = (uint64_t)res->kvs[0].mod_revision;
    return 0;
}

static int send_txn(vreq_t *r, etcd_cmp_target_t target, int64_t rev);
static void on_req(void *ctx, const etcd_result_t *res);

static void on_req(void *ctx, const etcd_result_t *res)
{
    vreq_t *r = ctx;
    ps_replicas_t *vs = r->vs;
    char err[400] = "";
    ps_view_t v;
    int rc;
    if (res->error) {
        cluster_count_etcd_error(vs->ps->cl);
        snprintf(err, sizeof(err), "the view of table '%s' cannot be %s: %s", r->table,
                 r->kind == VREQ_CREATE ? "written" : "changed", res->message);
        ps_replicas_req_unlink(vs, r);
        req_finish(r, res->error, err, NULL);
        ps_replicas_req_free(r);
        return;
    }
    if (r->kind == VREQ_PROPOSE && r->stage == 0) { /* the view now: still `from`? */
        rc = read_current(r, res, &v, err, sizeof(err));
        if (rc == 0 && v.number != r->from) {
            rc = -ESTALE;
            snprintf(err, sizeof(err), "view %" PRIu64 " of table '%s' is no longer the "
                     "current one (view %" PRIu64 ")", r->from, r->table, v.number);
        }
        if (rc == 0 && !r->cancelled) {
            r->want.replicas = v.replicas;
            char why[200];
            if (ps_replicas_format(&r->want, r->value, sizeof(r->value), why, sizeof(why)) < 0)
                rc = -EINVAL;
            else if (send_txn(r, ETCD_CMP_MOD_REVISION, (int64_t)r->from) == 0)
                return; /* still on the list */
            else
                rc = -ENOMEM;
            snprintf(err, sizeof(err), "the view of table '%s' cannot be changed: %s",
                     r->table, strerror(-rc));
        }
        ps_replicas_req_unlink(vs, r);
        req_finish(r, rc, err, rc == 0 || rc == -ESTALE ? &v : NULL);
        ps_replicas_req_free(r);
        return;
    }
    ps_replicas_req_unlink(vs, r);
    if (res->succeeded) {
        v = r->want;
        v.number = (uint64_t)res->revision;
        rc = res->revision > 0 ? 0 : -EPROTO;
        if (rc == 0)
            LOG_DEBUG("ps: view %" PRIu64 " of table %s/%s written: %s", v.number, r->group,
                      r->table, v.servers);
        else
            snprintf(err, sizeof(err), "etcd answered the view's transaction without a "
                     "revision");
    } else {
        rc = read_current(r, res, &v, err, sizeof(err));
        if (rc == 0 && r->kind == VREQ_PROPOSE) {
            rc = -ESTALE;
            snprintf(err, sizeof(err), "view %" PRIu64 " of table '%s' was changed meanwhile "
                     "(view %" PRIu64 ")", r->from, r->table, v.number);
        } else if (rc == -ENOENT && r->kind == VREQ_CREATE) {
            rc = -EAGAIN; /* created and deleted meanwhile */
        }
    }
    req_finish(r, rc, err, rc == 0 || rc == -ESTALE ? &v : NULL);
    ps_replicas_req_free(r);
}

static int send_txn(vreq_t *r, etcd_cmp_target_t target, int64_t rev)
{
    etcd_txn_t txn = {.key = r->key, .target = target, .rev = rev,
                      .success = {.kind = ETCD_OP_PUT, .value = r->value,
                                  .value_len = strlen(r->value)},
                      .failure = {.kind = ETCD_OP_GET}};
    if (etcd_txn(cluster_etcd(r->vs->ps->cl), &txn, on_req, r) < 0)
        return -ENOMEM;
    r->stage = 1;
    return 0;
}

static void on_local_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    vreq_t *r = arg;
    ps_replicas_t *vs = r->vs;
    ps_replicas_req_unlink(vs, r);
    ps_view_t v = {.number = 1, .replicas = 1};
    snprintf(v.servers, sizeof(v.servers), "%s", ps_cluster_self(vs->d));
    req_finish(r, 0, "", &v);
    ps_replicas_req_free(r);
}

static vreq_t *req_new(ps_replicas_t *vs, int kind, uid_t uid, const char *group, uint64_t epoch,
                       const char *table, ps_view_done_fn done, void *arg)
{
    vreq_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->vs = vs;
    r->kind = kind;
    r->uid = uid;
    r->epoch = epoch;
    snprintf(r->group, sizeof(r->group), "%s", group);
    snprintf(r->table, sizeof(r->table), "%s", table);
    r->done = done;
    r->arg = arg;
    if (vs->ps && view_key(vs, uid, group, epoch, table, r->key, sizeof(r->key)) < 0) {
        free(r);
        return NULL;
    }
    return r;
}

int ps_replicas_create(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                       const char *table, const char *servers, uint32_t replicas,
                       ps_view_done_fn done, void *arg)
{
    char err[200];
    if (!done || !servers || !ps_replicas_args_ok(uid, group, epoch, table))
        return -EINVAL;
    ps_view_t want = {.replicas = replicas};
    if (snprintf(want.servers, sizeof(want.servers), "%s", servers) >= (int)sizeof(want.servers) ||
        ps_replicas_check(&want, err, sizeof(err)) < 0)
        return -EINVAL;
    int rc;
    ps_replicas_t *vs = ps_replicas_ready(d, &rc);
    if (!vs)
        return rc;
    vreq_t *r = req_new(vs, VREQ_CREATE, uid, group, epoch, table, done, arg);
    if (!r)
        return -ENOMEM;
    r->want = want;
    if (!vs->ps) {
        struct timeval now = {0, 0};
        r->ev = event_new(d->base, -1, 0, on_local_turn, r);
        if (!r->ev || event_add(r->ev, &now) < 0) {
            ps_replicas_req_free(r);
            return -ENOMEM;
        }
    } else if (ps_replicas_format(&want, r->value, sizeof(r->value), err, sizeof(err)) < 0 ||
               send_txn(r, ETCD_CMP_CREATE_REVISION, 0) < 0) {
        ps_replicas_req_free(r);
        return -ENOMEM;
    }
    r->next = vs->reqs;
    vs->reqs = r;
    return 0;
}

static int propose(ps_replicas_t *vs, uid_t uid, const char *group, uint64_t epoch,
                   const char *table, uint64_t from, const char *servers, ps_view_done_fn done,
                   void *arg, void (*free_arg)(void *))
{
    vreq_t *r = req_new(vs, VREQ_PROPOSE, uid, group, epoch, table, done, arg);
    if (!r)
        return -ENOMEM;
    r->from = from;
    snprintf(r->want.servers, sizeof(r->want.servers), "%s", servers);
    /* first the view now (its R, and whether it is still `from`), then the transaction */
    if (etcd_get(cluster_etcd(vs->ps->cl), r->key, 0, on_req, r) < 0) {
        free(r); /* (arg stays the caller's) */
        return -ENOMEM;
    }
    r->free_arg = free_arg;
    r->next = vs->reqs;
    vs->reqs = r;
    return 0;
}

int ps_replicas_propose(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                        const char *table, uint64_t from, const char *servers,
                        ps_view_done_fn done, void *arg)
{
    char err[200];
    if (!done || !servers || from == 0 || !ps_replicas_args_ok(uid, group, epoch, table) ||
        ps_cluster_ring_servers_check(servers, PS_VIEW_SERVERS_BYTES, err, sizeof(err)) < 0)
        return -EINVAL;
    if (!cluster_of(d))
        return -EOPNOTSUPP; /* without a cluster the view never changes */
    int rc;
    ps_replicas_t *vs = ps_replicas_ready(d, &rc);
    if (!vs)
        return rc;
    return propose(vs, uid, group, epoch, table, from, servers, done, arg, NULL);
}


/* ---- a group run's views go ------------------------------------------------------------------ */

static void on_forget_read(void *ctx, const etcd_result_t *res)
{
    vreq_t *r = ctx;
    ps_replicas_t *vs = r->vs;
    ps_replicas_req_unlink(vs, r);
    if (res->error) {
        LOG_DEBUG("ps: the ring records of group %s cannot be read (%s): its views stay",
                  r->group, res->message);
    } else {
        size_t plen = strlen(r->key);
        for (size_t i = 0; i < res->count; i++) {
            const etcd_kv_t *kv = &res->kvs[i];
            char key[700];
            if (kv->key_len <= plen || kv->create_revision <= 0 ||
                memchr(kv->key + plen, '/', kv->key_len - plen))
                continue;
            int n = snprintf(key, sizeof(key), "%s/psv/%u/%s/%lld/%.*s", cluster_prefix(vs->ps->cl),
                             (unsigned)r->uid, r->group, (long long)kv->create_revision,
                             (int)(kv->key_len - plen), kv->key + plen);
            if (n > 0 && (size_t)n < sizeof(key))
                etcd_delete(cluster_etcd(vs->ps->cl), key, 0, NULL, NULL);
        }
    }
    etcd_delete(cluster_etcd(vs->ps->cl), r->key, 1, NULL, NULL);
    ps_replicas_req_free(r);
}

int ps_replicas_forget(ps_cluster_t *ps, uint32_t uid, const char *name,
                       const char *ring_prefix)
{
    int rc;
    ps_replicas_t *vs = ps_replicas_ready(ps->d, &rc);
    if (!vs || !vs->ps)
        return rc < 0 ? rc : -ENOTCONN;
    vreq_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->vs = vs;
    r->kind = VREQ_FORGET;
    r->uid = uid;
    snprintf(r->group, sizeof(r->group), "%s", name);
    if (snprintf(r->key, sizeof(r->key), "%s", ring_prefix) >= (int)sizeof(r->key) ||
        etcd_get(cluster_etcd(ps->cl), r->key, 1, on_forget_read, r) < 0) {
        free(r);
        return -ENOMEM;
    }
    r->next = vs->reqs;
    vs->reqs = r;
    return 0;
}
