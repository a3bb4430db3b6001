/* The ring records of ps_cluster (ps_cluster.h): a table's ring agreed in etcd by a
 * transaction that creates P/ps/UID/GROUP/EPOCH/TABLE only when absent (else read back and
 * checked), retried while the group's record is not read yet; without a cluster agreed on the
 * next loop turn; a group run's records (and its tables' views, P/psv/UID/GROUP/E/TABLE, E
 * each record's epoch) deleted once it is over everywhere. */
#include "ps_cluster-internal.h"

#include "groups.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Agreements of daemons without a cluster (one daemon per process; several in tests). */
static ring_req_t *local_reqs;

void ps_cluster_forget_epoch(cluster_t *cl, uint32_t uid, const char *name, int64_t epoch)
{
    if (epoch <= 0 || !cluster_etcd(cl))
        return;
    char key[512];
    int n = snprintf(key, sizeof(key), "%s/ps/%u/%s/%lld/", cluster_prefix(cl), uid, name,
                     (long long)epoch);
    if (n < 0 || (size_t)n >= sizeof(key))
        return;
    LOG_DEBUG("ps: the ring records and views of group %s (epoch %lld) go", name,
              (long long)epoch);
    /* the views first (their keys are named by the ring records' epochs), then the records */
    ps_cluster_t *ps = cluster_observer_state(cl);
    if (!ps || ps_replicas_forget(ps, uid, name, key) < 0)
        etcd_delete(cluster_etcd(cl), key, 1, NULL, NULL);
}

void ps_cluster_req_free(ring_req_t *r)
{
    if (r->ev)
        event_free(r->ev);
    free(r);
}

void ps_cluster_reqs_cancel(ring_req_t **list, const salusd_t *d)
{
    for (ring_req_t **p = list; *p;) {
        ring_req_t *r = *p;
        if (r->d != d) {
            p = &r->next;
            continue;
        }
        if (r->in_flight) { /* its etcd callback frees it */
            r->cancelled = 1;
            p = &r->next;
            continue;
        }
        *p = r->next;
        ps_cluster_req_free(r);
    }
}

void ps_cluster_ring_stop(const salusd_t *d)
{
    ps_cluster_reqs_cancel(&local_reqs, d);
}

/* ---- the ring record ------------------------------------------------------------------------ */

static void req_done(ring_req_t *r, int rc, const char *err, const ps_ring_record_t *rec)
{
    if (!r->cancelled && r->done)
        r->done(r->arg, rc, err, rec);
}

static void req_unlink(ring_req_t **list, ring_req_t *r)
{
    for (ring_req_t **p = list; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

static void on_local_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ring_req_t *r = arg;
    req_unlink(&local_reqs, r);
    ps_ring_record_t rec = r->want;
    rec.epoch = 1;
    req_done(r, 0, "", &rec);
    ps_cluster_req_free(r);
}

static void on_txn(void *ctx, const etcd_result_t *res)
{
    ring_req_t *r = ctx;
    ps_cluster_t *ps = r->ps;
    if (ps)
        req_unlink(&ps->reqs, r);
    char err[400];
    if (res->error) {
        if (ps)
            cluster_count_etcd_error(ps->cl);
        snprintf(err, sizeof(err), "the ring of table '%s' cannot be agreed: %s", r->table,
                 res->message);
        req_done(r, res->error, err, NULL);
    } else if (res->succeeded) {
        ps_ring_record_t rec = r->want;
        rec.epoch = (uint64_t)res->revision;
        LOG_INFO("ps: table '%s' of group %s: ring record written (epoch %" PRIu64 ", servers %s)",
                 r->table, r->group, rec.epoch, rec.servers);
        if (res->revision <= 0)
            req_done(r, -EPROTO, "etcd answered the ring's transaction without a revision", NULL);
        else
            req_done(r, 0, "", &rec);
    } else if (res->count != 1) {
        snprintf(err, sizeof(err), "the ring record of table '%s' was deleted meanwhile",
                 r->table);
        req_done(r, -EAGAIN, err, NULL);
    } else {
        ps_ring_record_t rec;
        char why[200];
        if (ps_ring_record_parse(res->kvs[0].value, res->kvs[0].value_len, &rec, why,
                                 sizeof(why)) < 0 ||
            res->kvs[0].create_revision <= 0) {
            snprintf(err, sizeof(err), "the ring record of table '%s' in etcd is malformed: %s",
                     r->table, res->kvs[0].create_revision <= 0 ? "no create revision" : why);
            LOG_WARN("ps: %s", err);
            req_done(r, -EPROTO, err, NULL);
        } else {
            rec.epoch = (uint64_t)res->kvs[0].create_revision;
            req_done(r, 0, "", &rec);
        }
    }
    ps_cluster_req_free(r);
}

/* Sends the transaction once the group's record (its epoch) is known: 1 sent, 0 not yet. */
static int req_try(ps_cluster_t *ps, ring_req_t *r)
{
    cluster_t *cl = ps->cl;
    int64_t epoch = cluster_group_epoch(cl, (uint32_t)r->uid, r->group);
    if (epoch <= 0)
        return 0;
    char key[600];
    snprintf(key, sizeof(key), "%s/ps/%u/%s/%lld/%s", cluster_prefix(cl), (unsigned)r->uid,
             r->group, (long long)epoch, r->table);
    etcd_txn_t txn = {.key = key, .target = ETCD_CMP_CREATE_REVISION, .rev = 0,
                      .success = {.kind = ETCD_OP_PUT, .value = r->value,
                                  .value_len = strlen(r->value)},
                      .failure = {.kind = ETCD_OP_GET}};
    if (etcd_txn(cluster_etcd(cl), &txn, on_txn, r) < 0)
        return 0; /* out of memory: the retry tries again */
    r->in_flight = 1;
    LOG_DEBUG("ps: agreeing on %s: %s", key, r->value);
    return 1;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_cluster_t *ps = arg;
    uint64_t now = salusd_now_ns();
    int waiting = 0;
    for (ring_req_t *r = ps->reqs, *next; r; r = next) {
        next = r->next;
        if (r->in_flight || r->cancelled)
            continue;
        if (req_try(ps, r))
            continue;
        if (now >= r->deadline_ns) {
            char err[300];
            snprintf(err, sizeof(err), "the cluster record of group %s is not known on node "
                     "%s: table '%s' cannot be agreed", r->group, cluster_node(ps->cl), r->table);
            req_unlink(&ps->reqs, r);
            req_done(r, -ETIMEDOUT, err, NULL);
            ps_cluster_req_free(r);
            continue;
        }
        waiting = 1;
    }
    if (!waiting && ps->retry)
        event_del(ps->retry);
}

int ps_cluster_ring_agree(salusd_t *d, uid_t uid, const char *group, const char *table,
                          const ps_ring_record_t *want, ps_ring_done_fn done, void *arg)
{
    char err[200];
    if (!group || !table || !want || !done || !ps_key_name_ok(group, LAUNCH_GROUP_BYTES) ||
        !ps_key_name_ok(table, PS_NAME_BYTES) || ps_ring_record_check(want, err, sizeof(err)) < 0)
        return -EINVAL;
    cluster_t *cl = cluster_of(d);
    ps_cluster_t *ps = ps_of(d);
    if (cl && (!ps || !ps->started))
        return -ENOTCONN;
    ring_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->ps = ps;
    r->d = d;
    r->uid = uid;
    snprintf(r->group, sizeof(r->group), "%s", group);
    snprintf(r->table, sizeof(r->table), "%s", table);
    r->want = *want;
    r->want.epoch = 0;
    if (ps_ring_record_format(&r->want, r->value, sizeof(r->value), err, sizeof(err)) < 0) {
        free(r);
        return -EINVAL;
    }
    r->done = done;
    r->arg = arg;
    if (!cl) {
        struct timeval now = {0, 0};
        r->ev = event_new(d->base, -1, 0, on_local_turn, r);
        if (!r->ev || event_add(r->ev, &now) < 0) {
            ps_cluster_req_free(r);
            return -ENOMEM;
        }
        r->next = local_reqs;
        local_reqs = r;
        return 0;
    }
    r->deadline_ns = salusd_now_ns() + RING_WAIT_S * 1000000000ull;
    r->next = ps->reqs;
    ps->reqs = r;
    if (req_try(ps, r) == 1)
        return 0;
    /* the group's record is not read yet (or etcd_txn had no memory): tried again */
    if (!ps->retry)
        ps->retry = event_new(d->base, -1, EV_PERSIST, on_retry, ps);
    struct timeval every = {.tv_sec = 0, .tv_usec = RING_RETRY_MS * 1000};
    if (!ps->retry || event_add(ps->retry, &every) < 0) {
        req_unlink(&ps->reqs, r);
        ps_cluster_req_free(r);
        return -ENOMEM;
    }
    return 0;
}

void ps_cluster_ring_forget(salusd_t *d, uid_t uid, const char *group)
{
    cluster_t *cl = cluster_of(d);
    if (!cl || !group || !ps_key_name_ok(group, LAUNCH_GROUP_BYTES))
        return;
    int64_t epoch = cluster_group_epoch(cl, (uint32_t)uid, group);
    if (epoch > 0)
        ps_cluster_forget_epoch(cl, (uint32_t)uid, group, epoch);
}
