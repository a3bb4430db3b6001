/* Replication's data path (the design: ps_repl.c): a primary forwards each update it takes to
 * the shard's standbys and acknowledges the source once every live standby has acknowledged;
 * a standby that refuses (behind, or without the shard) gets a whole-state copy; copies and
 * their acknowledgements; the timer that re-checks liveness and resends copies.
 *
 * Messages (header after ps_msg_begin's common part; ps_msg.c has the others):
 *   REPL_UPDATE     as UPDATE: u32 shard, u32 source, u64 seq, u64 clock, u8 close, u8 keyed,
 *                   u64 offset, u64 n               payload n floats (then n u64 keys)
 *   REPL_ACK        u32 shard, u32 source, u64 seq, i32 rc
 *   SHARD_STATE     u32 shard, u64 req, u8 handover  payload ps_shard_save's bytes
 *   SHARD_STATE_ACK u32 shard, u64 req, i32 rc */
#include "ps_msg-internal.h"
#include "ps_cluster.h"
#include "ps_retarget.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_repl_alive(ps_t *ps, const char *node)
{
    if (strcmp(node, ps_cluster_self(ps->d)) == 0)
        return 1;
    return ps->member_alive ? ps->member_alive(ps->d, node)
                            : ps_replicas_member_alive(ps->d, node);
}

void ps_repl_arm(ps_t *ps)
{
    static const struct timeval every = {0, 100000};
    if (ps->repl_timer && !evtimer_pending(ps->repl_timer, NULL))
        evtimer_add(ps->repl_timer, &every);
}

static ps_forward_t *find_forward(ps_table_t *t, uint32_t shard, uint32_t source, uint64_t seq)
{
    for (ps_forward_t *f = t->forwards; f; f = f->next)
        if (f->shard == shard && f->source == source && f->seq == seq)
            return f;
    return NULL;
}

static int standby_index(const ps_table_t *t, uint32_t shard, const char *node)
{
    const ps_repl_shard_t *rs = &t->repl[shard];
    for (uint32_t k = 0; k < rs->nstandbys; k++)
        if (strcmp(rs->standby[k].node, node) == 0)
            return (int)k;
    return -1;
}

static void send_forward(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u,
                         const char *node)
{
    wbuf_t w;
    ps_msg_begin(&w, MSG_REPL_UPDATE, t);
    ps_msg_put_update(&w, shard, source, u);
    int rc;
    if (!u->keys) {
        rc = ps_msg_send(t->ps, node, &w, u->values, u->n * sizeof(float));
    } else {
        size_t len = u->n * (sizeof(float) + sizeof(uint64_t));
        uint8_t *payload = malloc(len);
        rc = -ENOMEM;
        if (payload) {
            memcpy(payload, u->values, u->n * sizeof(float));
            memcpy(payload + u->n * sizeof(float), u->keys, u->n * sizeof(uint64_t));
            rc = ps_msg_send(t->ps, node, &w, payload, len);
            free(payload);
        }
    }
    if (rc < 0) /* the source's resend forwards it again; a dead standby is not waited for */
        LOG_DEBUG("ps: '%s' shard %u: update %llu not forwarded to %s: %s", t->name, shard,
                  (unsigned long long)u->seq, node, strerror(-rc));
}

/* Acknowledges (then frees) forwards that wait on nobody any more; a standby that is not
 * alive is not waited for. The acks go out after the walk: an ack to this daemon's own
 * workers may send (and take here) their next update. */
static void settle(ps_table_t *t)
{
    ps_forward_t *done = NULL;
    for (ps_forward_t **fp = &t->forwards; *fp;) {
        ps_forward_t *f = *fp;
        ps_repl_shard_t *rs = &t->repl[f->shard];
        int wait = 0;
        for (uint32_t k = 0; k < rs->nstandbys; k++) {
            if (f->waiting[k] && !ps_repl_alive(t->ps, rs->standby[k].node))
                f->waiting[k] = 0;
            wait |= f->waiting[k];
        }
        if (wait) {
            fp = &f->next;
            continue;
        }
        *fp = f->next;
        f->next = done;
        done = f;
    }
    int local = 0;
    while (done) {
        ps_forward_t *f = done;
        done = f->next;
        if (t->state != PS_TABLE_FAILED) {
            if (!f->origin[0]) {
                ps_worker_acked(t, f->shard, f->seq, f->rc);
                local = 1;
            } else
                ps_msg_send_ack(t, f->origin, f->shard, f->source, f->seq, f->rc);
        }
        free(f);
    }
    if (local) /* the workers' next updates (ps_worker_acked sends on only to remote ones) */
        ps_worker_pump_later(t->ps);
}

int ps_repl_update(ps_table_t *t, uint32_t shard, uint32_t source, const ps_update_t *u,
                   const char *origin)
{
    if (shard >= t->layout.shards || source >= t->sources || !t->repl)
        return -EINVAL;
    if (!ps_repl_is_primary(t, shard))
        return -ESTALE;
    ps_repl_shard_t *rs = &t->repl[shard];
    if (rs->loading || !t->shards[shard])
        return -ESTALE; /* its state is on its way: not serving yet (the source sends it
                         * again soon, as to a primary that has not read its view yet) */
    int rc = ps_server_apply(t, shard, source, u);
    if ((rc < 0 && rc != -ERANGE) || rs->nstandbys == 0)
        return rc;
    if (rc == 1 || rc == -ERANGE) /* (a refused update changed the shard too: seq, close) */
        rs->applied++;
    /* every replica has it before the source hears so; a duplicate goes again too (a new
     * primary after a fail-over may be the only one that had it) */
    ps_forward_t *f = find_forward(t, shard, source, u->seq);
    int fresh = f == NULL;
    if (fresh && !(f = calloc(1, sizeof(*f))))
        return -EAGAIN; /* taken: its resend is a duplicate, forwarded then */
    if (fresh) {
        f->shard = shard;
        f->source = source;
        f->seq = u->seq;
        f->mark = rs->applied;
        f->rc = rc == -ERANGE ? rc : 0;
        f->since_ns = salusd_now_ns();
        snprintf(f->origin, sizeof(f->origin), "%s", origin ? origin : "");
    }
    int wait = 0;
    for (uint32_t k = 0; k < rs->nstandbys; k++) {
        if (!fresh && !f->waiting[k])
            continue; /* it has acknowledged this one */
        if (!ps_repl_alive(t->ps, rs->standby[k].node)) {
            f->waiting[k] = 0;
            continue;
        }
        send_forward(t, shard, source, u, rs->standby[k].node);
        f->waiting[k] = 1;
        wait = 1;
    }
    if (!wait) { /* nobody to wait for (any more): the caller acknowledges it */
        for (ps_forward_t **fp = &t->forwards; !fresh && *fp; fp = &(*fp)->next)
            if (*fp == f) {
                *fp = f->next;
                break;
            }
        free(f);
        return rc;
    }
    if (fresh) {
        f->next = t->forwards;
        t->forwards = f;
    }
    ps_repl_arm(t->ps);
    return PS_UPDATE_PENDING;
}

static void copy_free(ps_copy_t *c)
{
    free(c->buf);
    free(c);
}

/* Unlinks the copies that match (table, shard, node; shard UINT32_MAX / node NULL: any). */
static void drop_copies(ps_t *ps, uint64_t table, uint32_t shard, const char *node,
                        int handovers_too)
{
    for (ps_copy_t **cp = &ps->copies; *cp;) {
        ps_copy_t *c = *cp;
        if (c->table == table && (shard == UINT32_MAX || c->shard == shard) &&
            (!node || strcmp(c->node, node) == 0) && (handovers_too || !c->handover)) {
            *cp = c->next;
            copy_free(c);
        } else
            cp = &c->next;
    }
}

static int send_state(ps_table_t *t, const ps_copy_t *c)
{
    wbuf_t w;
    ps_msg_begin(&w, MSG_SHARD_STATE, t);
    ps_msg_put(&w, c->shard, 4);
    ps_msg_put(&w, c->req, 8);
    ps_msg_put(&w, (uint64_t)c->handover, 1);
    return ps_msg_send(t->ps, c->node, &w, c->buf, c->len);
}

/* The shard's state now into c (buf, len, mark). 0 or a negative errno. */
static int snapshot(ps_table_t *t, ps_copy_t *c)
{
    ps_shard_t *sh = t->shards[c->shard];
    if (!sh)
        return -ENOENT;
    size_t size = ps_shard_state_size(sh);
    void *buf = malloc(size ? size : 1);
    if (!buf)
        return -ENOMEM;
    int64_t n = ps_shard_save(sh, buf, size);
    if (n < 0) {
        free(buf);
        return (int)n;
    }
    free(c->buf);
    c->buf = buf;
    c->len = (size_t)n;
    c->mark = t->repl[c->shard].applied;
    return 0;
}

int ps_repl_send_copy(ps_table_t *t, uint32_t shard, const char *node, int handover)
{
    ps_t *ps = t->ps;
    drop_copies(ps, t->handle, shard, node, 1); /* superseded */
    ps_copy_t *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->ps = ps;
    c->table = t->handle;
    c->shard = shard;
    c->req = ps->next_req++;
    c->handover = handover;
    snprintf(c->node, sizeof(c->node), "%s", node);
    int rc = snapshot(t, c);
    if (rc < 0) {
        copy_free(c);
        return rc;
    }
    int k = handover ? -1 : standby_index(t, shard, node);
    if (k >= 0)
        t->repl[shard].standby[k].copy_req = c->req;
    rc = send_state(t, c); /* a failed send: resent by the timer */
    if (rc < 0)
        LOG_DEBUG("ps: '%s' shard %u: state not sent to %s now: %s", t->name, shard, node,
                  strerror(-rc));
    c->sent_ns = c->since_ns = salusd_now_ns();
    c->next = ps->copies;
    ps->copies = c;
    ps->stats.shard_copies++;
    ps_repl_arm(ps);
    return 0;
}

void ps_repl_drop_shard(ps_table_t *t, uint32_t shard)
{
    for (ps_forward_t **fp = &t->forwards; *fp;) {
        ps_forward_t *f = *fp;
        if (f->shard == shard) { /* not acknowledged: the source sends it to the new primary */
            *fp = f->next;
            free(f);
        } else
            fp = &f->next;
    }
    drop_copies(t->ps, t->handle, shard, NULL, 0);
}

void ps_repl_fini(ps_table_t *t)
{
    while (t->forwards) {
        ps_forward_t *f = t->forwards;
        t->forwards = f->next;
        free(f);
    }
    drop_copies(t->ps, t->handle, UINT32_MAX, NULL, 1);
    while (t->reopens) {
        ps_reopen_t *o = t->reopens;
        t->reopens = o->next;
        free(o);
    }
    free(t->repl);
    t->repl = NULL;
}

/* Forwards a live standby has not acknowledged within PS_FORWARD_WAIT_MS (lost: nothing
 * else sends them again but the source's resend, which backs off to 32 s): that standby gets
 * a copy, which stands for every forward taken before it, unless one taken after the oldest
 * such forward is on its way to it already. */
static void catch_up(ps_table_t *t, uint64_t now)
{
    for (ps_forward_t *f = t->forwards; f; f = f->next) {
        if (now - f->since_ns < PS_FORWARD_WAIT_MS * 1000000ull || !t->repl ||
            !ps_repl_is_primary(t, f->shard) || !t->shards[f->shard])
            continue;
        ps_repl_shard_t *rs = &t->repl[f->shard];
        for (uint32_t k = 0; k < rs->nstandbys; k++) {
            if (!f->waiting[k])
                continue;
            int covered = 0;
            for (const ps_copy_t *c = t->ps->copies; c && !covered; c = c->next)
                covered = c->table == t->handle && c->shard == f->shard && !c->handover &&
                          c->req == rs->standby[k].copy_req && c->mark >= f->mark;
            if (covered)
                continue;
            LOG_INFO("ps: '%s' shard %u: standby %s has not acknowledged update %llu for "
                     "%.1f s: it gets the state", t->name, f->shard, rs->standby[k].node,
                     (unsigned long long)f->seq, (double)(now - f->since_ns) / 1e9);
            ps_repl_send_copy(t, f->shard, rs->standby[k].node, 0);
        }
    }
}

static ps_table_t *table_of(ps_t *ps, uint64_t handle)
{
    for (ps_table_t *t = ps->tables; t; t = t->next)
        if (t->handle == handle)
            return t;
    return NULL;
}

void ps_repl_check(ps_t *ps)
{
    uint64_t now = salusd_now_ns();
    for (ps_copy_t **cp = &ps->copies; *cp;) {
        ps_copy_t *c = *cp;
        ps_table_t *t = table_of(ps, c->table);
        /* a copy no longer wanted: a standby's when this daemon is not the primary or the node
         * not a standby any more, a handover when the node is not the primary any more */
        if (!t || t->state == PS_TABLE_FAILED || !t->repl ||
            (!c->handover && (!ps_repl_is_primary(t, c->shard) || !t->shards[c->shard] ||
                              standby_index(t, c->shard, c->node) < 0)) ||
            (c->handover && (!ps_table_primary(t, c->shard) ||
                             strcmp(ps_table_primary(t, c->shard), c->node) != 0))) {
            *cp = c->next;
            copy_free(c);
            continue;
        }
        cp = &c->next;
        if (now - c->sent_ns < PS_COPY_RESEND_MS * 1000000ull ||
            !ps_repl_alive(ps, c->node))
            continue;
        if (!c->warned && now - c->since_ns > ps_retarget_limit_ns(ps)) {
            c->warned = 1; /* (an answer to it is logged, a silent wait is not) */
            LOG_WARN("ps: '%s' shard %u: %s has not taken the shard's state for %.1f s "
                     "(%s): sent again every %d ms", t->name, c->shard, c->node,
                     (double)(now - c->since_ns) / 1e9,
                     c->refused ? strerror(-c->refused) : "no answer", PS_COPY_RESEND_MS);
        }
        /* a standby's copy is taken again (the forwards it refused since are in it); its
         * ack may answer the first send (same req): it stands only for what every send held */
        uint64_t mark = c->mark;
        if (!c->handover && snapshot(t, c) < 0)
            continue;
        c->mark = mark;
        send_state(t, c);
        c->sent_ns = now;
    }
    int pending = ps->copies != NULL;
    for (ps_table_t *t = ps->tables; t; t = t->next) {
        if (t->forwards) {
            settle(t);
            catch_up(t, now);
            pending |= t->forwards != NULL;
        }
        if (t->reopens)
            pending |= ps_repl_check_opens(t, now);
    }
    if (!pending && ps->repl_timer)
        evtimer_del(ps->repl_timer);
}

/* ---- receiving -------------------------------------------------------------------------- */
static void send_ack(ps_t *ps, const char *node, int type, const ps_table_t *t, uid_t uid,
                     uint64_t epoch, const char *group, const char *name, uint32_t shard,
                     uint32_t source, uint64_t seq_or_req, int rc)
{
    ps_table_t id = {.uid = uid, .epoch = epoch};
    if (!t) {
        snprintf(id.group, sizeof(id.group), "%s", group);
        snprintf(id.name, sizeof(id.name), "%s", name);
        t = &id;
    }
    wbuf_t w;
    ps_msg_begin(&w, type, t);
    ps_msg_put(&w, shard, 4);
    if (type == MSG_REPL_ACK)
        ps_msg_put(&w, source, 4);
    ps_msg_put(&w, seq_or_req, 8);
    ps_msg_put(&w, (uint64_t)(uint32_t)rc, 4);
    ps_msg_send(ps, node, &w, NULL, 0);
}

static int aligned(const void *p, uint64_t n, int keyed)
{
    uintptr_t at = (uintptr_t)p;
    return at % _Alignof(float) == 0 &&
           (!keyed || (at + n * sizeof(float)) % _Alignof(uint64_t) == 0);
}

/* 1 when node is the shard's primary in the view in force here. */
static int from_primary(const ps_table_t *t, uint32_t shard, const char *node)
{
    const char *primary = ps_table_primary(t, shard);
    return primary && strcmp(primary, node) == 0;
}

/* A standby takes what its primary forwards (de-duplicated as any update). */
static void recv_forward(ps_t *ps, const char *node, rbuf_t *r, ps_table_t *t, uid_t uid,
                         uint64_t epoch, const char *group, const char *name,
                         const void *payload, size_t payload_len)
{
    ps_update_t u = {0};
    uint32_t shard = (uint32_t)ps_msg_get(r, 4), source = (uint32_t)ps_msg_get(r, 4);
    u.seq = ps_msg_get(r, 8);
    u.clock = ps_msg_get(r, 8);
    u.close = (int)ps_msg_get(r, 1);
    int keyed = (int)ps_msg_get(r, 1);
    u.offset = ps_msg_get(r, 8);
    u.n = ps_msg_get(r, 8);
    uint64_t first = 0, elems = 0;
    if (t && shard < t->layout.shards)
        ps_layout_shard(&t->layout, shard, &first, &elems);
    if (r->bad || u.close > 1 || keyed > 1 || u.n > PS_SHARD_MAX_ELEMS ||
        payload_len != u.n * sizeof(float) + (keyed ? u.n * sizeof(uint64_t) : 0) ||
        (t && (source >= t->sources || shard >= t->layout.shards || u.n > elems))) {
        ps->dropped++;
        ps->stats.refused++;
        LOG_DEBUG("ps: a forwarded update from %s dropped: malformed", node);
        return;
    }
    int rc = -ENOENT; /* no table or shard here (yet): the primary sends a copy */
    if (t && t->repl && (ps_repl_is_primary(t, shard) || !from_primary(t, shard, node)))
        rc = -ESTALE; /* not from the shard's primary in this view (a stale one's, or the
                       * primary here: it would be acked without this one's standbys) */
    else if (t && t->shards && t->shards[shard] && t->state != PS_TABLE_FAILED) {
        const uint8_t *at = payload;
        void *copy = NULL;
        if (payload_len && !aligned(at, u.n, keyed)) {
            copy = malloc(payload_len);
            if (!copy)
                return; /* no ack: it comes again (or a copy does) */
            memcpy(copy, payload, payload_len);
            at = copy;
        }
        u.values = (const float *)(const void *)at;
        u.keys = keyed ? (uint64_t *)(uintptr_t)(at + u.n * sizeof(float)) : NULL;
        rc = ps_server_apply(t, shard, source, &u);
        free(copy);
    }
    /* (-ERANGE: taken and refused here as on the primary: the shards stay alike) */
    send_ack(ps, node, MSG_REPL_ACK, t, uid, epoch, group, name, shard, source, u.seq,
             rc < 0 && rc != -ERANGE ? rc : 0);
}

static void recv_forward_ack(ps_t *ps, const char *node, rbuf_t *r, ps_table_t *t)
{
    uint32_t shard = (uint32_t)ps_msg_get(r, 4), source = (uint32_t)ps_msg_get(r, 4);
    uint64_t seq = ps_msg_get(r, 8);
    int32_t rc = (int32_t)(uint32_t)ps_msg_get(r, 4);
    int k = !r->bad && t && t->repl && shard < t->layout.shards && ps_repl_is_primary(t, shard)
                ? standby_index(t, shard, node)
                : -1;
    if (k < 0) {
        ps->dropped++;
        LOG_DEBUG("ps: a forward's ack from %s dropped (not a standby here now)", node);
        return;
    }
    ps_forward_t *f = find_forward(t, shard, source, seq);
    if (rc == 0) {
        if (f) {
            f->waiting[k] = 0;
            settle(t);
        }
        return;
    }
    /* refused (behind, or without the shard): it counts again once it took a copy, unless
     * one taken after this update is on its way already */
    const ps_standby_t *sb = &t->repl[shard].standby[k];
    for (const ps_copy_t *c = ps->copies; c; c = c->next)
        if (c->req == sb->copy_req && c->table == t->handle && (!f || c->mark >= f->mark))
            return;
    LOG_INFO("ps: '%s' shard %u: standby %s refused update %llu (%s): it gets the state",
             t->name, shard, node, (unsigned long long)seq, strerror(-rc));
    ps_repl_send_copy(t, shard, node, 0);
}

/* A shard's whole state: a standby's catch-up, or a new primary's (a handover). */
static void recv_state(ps_t *ps, const char *node, rbuf_t *r, ps_table_t *t, uid_t uid,
                       uint64_t epoch, const char *group, const char *name,
                       const void *payload, size_t payload_len)
{
    uint32_t shard = (uint32_t)ps_msg_get(r, 4);
    uint64_t req = ps_msg_get(r, 8);
    int handover = (int)ps_msg_get(r, 1);
    if (r->bad || handover > 1 || (t && shard >= t->layout.shards)) {
        ps->dropped++;
        ps->stats.refused++;
        LOG_DEBUG("ps: a shard state from %s dropped: malformed", node);
        return;
    }
    int rc = 0;
    char err[PS_ERR_BYTES] = "";
    if (!t || !t->repl || t->state == PS_TABLE_FAILED)
        rc = -ENOENT; /* not here yet (a joined server before the open): sent again */
    else if (!t->repl[shard].replica)
        rc = -ESTALE; /* this daemon's view is behind the sender's: sent again */
    else if (handover != ps_repl_is_primary(t, shard) ||
             (!handover && !from_primary(t, shard, node)))
        rc = -ESTALE; /* a handover is for the primary, a copy for its standbys, from it; a
                       * primary never acks (as in step) a copy it did not take */
    else if (handover && !t->repl[shard].loading && t->shards[shard]) {
        rc = 0; /* the primary here serves already: its state is the newer one */
    } else {
        uint64_t first, elems;
        ps_layout_shard(&t->layout, shard, &first, &elems);
        ps_shard_t *sh = ps_shard_load(payload, payload_len, elems, &t->spec.rule,
                                       &t->spec.sync, t->sources, err, sizeof(err));
        if (!sh) {
            rc = -EINVAL;
            LOG_WARN("ps: '%s' shard %u: the state from %s is refused: %s", t->name, shard,
                     node, err);
        } else {
            ps_shard_destroy(t->shards[shard]);
            t->shards[shard] = sh;
            ps_repl_shard_t *rs = &t->repl[shard];
            LOG_DEBUG("ps: '%s' shard %u: state from %s taken (done %llu)", t->name, shard,
                      node, (unsigned long long)ps_shard_done(sh));
            if (ps_repl_is_primary(t, shard) && rs->loading) {
                rs->loading = 0; /* serves now; its standbys get its state first */
                for (uint32_t k = 0; k < rs->nstandbys; k++)
                    ps_repl_send_copy(t, shard, rs->standby[k].node, 0);
                ps_server_wake(t, shard);
                ps_server_fail_stranded(t);
            }
        }
    }
    send_ack(ps, node, MSG_SHARD_STATE_ACK, t, uid, epoch, group, name, shard, 0, req, rc);
}

static void recv_state_ack(ps_t *ps, const char *node, rbuf_t *r)
{
    uint32_t shard = (uint32_t)ps_msg_get(r, 4);
    uint64_t req = ps_msg_get(r, 8);
    int32_t rc = (int32_t)(uint32_t)ps_msg_get(r, 4);
    ps_copy_t **cp = &ps->copies;
    while (*cp && ((*cp)->req != req || (*cp)->shard != shard || strcmp((*cp)->node, node)))
        cp = &(*cp)->next;
    if (r->bad || !*cp) {
        ps->dropped++;
        LOG_DEBUG("ps: a state ack from %s dropped (no such copy)", node);
        return;
    }
    ps_copy_t *c = *cp;
    if (rc < 0) { /* kept: sent again after PS_COPY_RESEND_MS */
        LOG_DEBUG("ps: shard %u: %s did not take its state yet: %s", shard, node,
                  strerror(-rc));
        c->refused = rc;
        return;
    }
    *cp = c->next;
    ps_table_t *t = table_of(ps, c->table);
    int k = t && t->repl && !c->handover && ps_repl_is_primary(t, shard)
                ? standby_index(t, shard, node)
                : -1;
    if (k >= 0 && t->repl[shard].standby[k].copy_req == req) {
        t->repl[shard].standby[k].copy_req = 0;
        /* the forwards taken before the copy are in it */
        for (ps_forward_t *f = t->forwards; f; f = f->next)
            if (f->shard == shard && f->mark <= c->mark)
                f->waiting[k] = 0;
        settle(t);
    }
    copy_free(c);
}

int ps_repl_recv(ps_t *ps, const char *node, int type, rbuf_t *r, ps_table_t *t,
                 const void *payload, size_t payload_len)
{
    /* the identity again (ps_msg_recv read it): for answers to a table not here */
    rbuf_t id = {r->b, r->len, 5, 0};
    uid_t uid = (uid_t)ps_msg_get(&id, 4);
    uint64_t epoch = ps_msg_get(&id, 8);
    char group[PS_GROUP_BYTES], name[PS_NAME_BYTES];
    ps_msg_get_str(&id, group, sizeof(group));
    ps_msg_get_str(&id, name, sizeof(name));
    switch (type) {
    case MSG_REPL_UPDATE:
        recv_forward(ps, node, r, t, uid, epoch, group, name, payload, payload_len);
        return 1;
    case MSG_REPL_ACK:
        recv_forward_ack(ps, node, r, t);
        return 1;
    case MSG_SHARD_STATE:
        recv_state(ps, node, r, t, uid, epoch, group, name, payload, payload_len);
        return 1;
    case MSG_SHARD_STATE_ACK:
        recv_state_ack(ps, node, r);
        return 1;
    default:
        return 0;
    }
}
