/* Replicas, fail-over and re-balancing of the tables' shards: the server side.
 *
 * THE DESIGN (primary-backup; ps_cluster.h for the views, ps_core.h for the state):
 *
 * Replica sets. A table's VIEW (etcd, ps_replicas_*) names its servers and R, the replica
 * count (the open's `replicas`, else the opener's --ps-replicas, default 3; placing bounds it
 * by the server count). The first view is written when the table is created, right after its
 * ring record is agreed (ps_open.c), with the record's servers. A shard's replicas in a view
 * are ps_ring_replicas over the view's servers (the record's virtual nodes), primary first;
 * t->ring, t->owner[] (the primaries) and t->repl[] (this daemon's part per shard) always
 * describe the view in force here (t->view). Every replica holds the shard's state and is
 * charged for it in the user's quota. Each daemon with the table watches its view.
 *
 * Updates. A source sends each update (and clock close) to the shard's primary. The primary
 * applies it (ps_server_apply: de-duplicated by (source, seq)), forwards the same update
 * (same source, seq, clock, payload) to each standby of the shard over the one in-order
 * endpoint to it (MSG_REPL_UPDATE), and acknowledges the source (MSG_UPDATE_ACK, or
 * ps_worker_acked for its own workers) only when every standby that is ALIVE
 * (ps_replicas_member_alive: its lease; a link that is only down is waited for) has
 * acknowledged (MSG_REPL_ACK). A duplicate is forwarded too: after a fail-over the new primary
 * may be the only replica that had it. A standby applies what is forwarded exactly as a
 * primary would (the same de-duplication); one that refuses (behind: a gap in its clocks; no
 * shard or table yet) gets a whole-state copy (ps_shard_save/load, MSG_SHARD_STATE); its
 * acknowledgement of the copy stands for every update taken before the copy was (marks).
 * Copies not acknowledged are sent again every PS_COPY_RESEND_MS (a fresh one). So an
 * acknowledged update is on every live replica; a replica whose lease ended is not waited
 * for and leaves the next view.
 *
 * Reads (MSG_PULL, and this node's workers' pulls) are answered by the primary only; any
 * other server answers -ESTALE, updates likewise: the sender keeps them and sends them again
 * to the primary of its next view (ps_retarget_view_changed) or after its retry timer.
 *
 * View changes (view_changed hook, in increasing number). Per shard, with the old and new
 * replica sets:
 *   - primary here before, not now: fenced (forwards dropped unacknowledged: the sources send
 *     them again to the new primary; kept reads answered -ESTALE); when the new primary held
 *     nothing before (a joined server) the state goes to it (a handover copy, kept until
 *     acknowledged);
 *   - primary now, a replica before: takes over with the state it has; every standby gets a
 *     copy first when it was not the primary before (after a fail-over the standbys may hold
 *     different suffixes of the last updates), only the new standbys when it was;
 *   - primary now, nothing before (a joined server): `loading` until the old primary's state
 *     comes: updates are answered -ESTALE (sent again soon), reads are kept; then its standbys
 *     get copies;
 *   - a standby now, nothing before: no state until its primary's copy comes (forwards to it
 *     are refused until then, which asks for a copy too);
 *   - no replica now: the shard's state goes here (quota charge with it).
 * Then the worker side (ps_retarget_view_changed) sends again what its old primaries had not
 * acknowledged. Before that, each source daemon sends the open (MSG_OPEN, not fresh: no empty
 * shards) to each server new in the view; that server builds the table from the ring record
 * and the view the open carries, then watches the view. The log line per change: "ps: table G/T view 12 -> 15:
 * 13 of 64 primaries moved, 40 copies"; counters in salusctl groups (per table) and /metrics
 * (salus_ps_shards_moved_total, salus_ps_shard_copies_total).
 *
 * What is not covered: a shard whose every replica is lost at once (R servers in one view
 * change) comes back empty on a joined server only if a copy exists: it stays `loading`
 * (reads wait, updates are held) and the log says so; the checkpoint (ps_ckpt) is the cold
 * standby for that. */
#include "ps-internal.h"
#include "ps_cluster.h"
#include "ps_retarget.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ps_table_primary(const ps_table_t *t, uint32_t shard)
{
    if (!t || !t->ring || !t->owner || shard >= t->layout.shards)
        return NULL;
    return ps_ring_name(t->ring, t->owner[shard]);
}

int ps_repl_is_primary(const ps_table_t *t, uint32_t shard)
{
    return t->self_server >= 0 && t->owner && shard < t->layout.shards &&
           (int)t->owner[shard] == t->self_server;
}

uint64_t ps_repl_shard_bytes(const ps_table_t *t)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; t->repl && i < t->layout.shards; i++)
        if (t->repl[i].replica) {
            uint64_t first, elems;
            ps_layout_shard(&t->layout, i, &first, &elems);
            sum += elems * sizeof(float);
        }
    return sum;
}

static int in_set(const ps_ring_t *ring, const size_t *set, uint32_t k, const char *name)
{
    for (uint32_t j = 0; j < k; j++)
        if (strcmp(ps_ring_name(ring, set[j]), name) == 0)
            return 1;
    return 0;
}

/* A ring over view servers `servers`; NULL with err. *self: this daemon's index or -1. */
static ps_ring_t *view_ring(const ps_table_t *t, const char *servers, int *self, char *sorted,
                            char *err, size_t err_size)
{
    char store[PS_SERVERS_BYTES];
    const char *names[PS_MAX_SERVERS];
    int n = ps_parse_servers(servers, store, sizeof(store), names, sorted, PS_SERVERS_BYTES,
                             err, err_size);
    if (n <= 0) {
        if (n == 0)
            snprintf(err, err_size, "a view with no servers");
        return NULL;
    }
    ps_ring_t *ring = ps_ring_create(names, (size_t)n, t->vnodes);
    if (!ring) {
        snprintf(err, err_size, "cannot build the view's ring");
        return NULL;
    }
    const char *me = ps_cluster_self(t->ps->d);
    *self = -1;
    for (size_t i = 0; i < ps_ring_size(ring); i++)
        if (strcmp(ps_ring_name(ring, i), me) == 0)
            *self = (int)i;
    return ring;
}

/* Fills a shard's part here from the ring (repl[i] zeroed by the caller). */
static void place(const ps_table_t *t, const ps_ring_t *ring, int self, uint32_t r,
                  uint32_t shard, uint32_t *owner, ps_repl_shard_t *rs)
{
    size_t set[PS_MAX_REPLICAS];
    uint32_t k = ps_ring_replicas(ring, t->name, shard, r, set);
    *owner = (uint32_t)set[0];
    for (uint32_t j = 0; self >= 0 && j < k; j++)
        rs->replica |= (int)set[j] == self;
    if (self < 0 || (int)set[0] != self)
        return;
    for (uint32_t j = 1; j < k; j++)
        snprintf(rs->standby[rs->nstandbys++].node, PS_NODE_BYTES, "%s",
                 ps_ring_name(ring, set[j]));
}

int ps_repl_init_view(ps_table_t *t, uint64_t number, const char *servers, uint32_t replicas,
                      char *err, size_t err_size)
{
    char sorted[PS_SERVERS_BYTES];
    int self;
    ps_ring_t *ring = view_ring(t, servers && servers[0] ? servers : t->spec.servers, &self,
                                sorted, err, err_size);
    ps_repl_shard_t *repl = ring ? calloc(t->layout.shards, sizeof(*repl)) : NULL;
    if (!repl) {
        ps_ring_destroy(ring);
        if (ring)
            snprintf(err, err_size, "table '%s': out of memory", t->name);
        return ring ? -ENOMEM : -EINVAL;
    }
    uint32_t r = replicas ? replicas : 1;
    for (uint32_t i = 0; i < t->layout.shards; i++)
        place(t, ring, self, r, i, &t->owner[i], &repl[i]);
    ps_ring_destroy(t->ring);
    t->ring = ring;
    free(t->repl);
    t->repl = repl;
    t->self_server = self;
    t->replicas = r;
    t->view = number;
    snprintf(t->view_servers, sizeof(t->view_servers), "%s", sorted);
    return 0;
}

void ps_repl_watch(ps_table_t *t)
{
    if (t->watching)
        return;
    int rc = ps_replicas_watch(t->ps->d, t->uid, t->group, t->epoch, t->name);
    if (rc < 0)
        LOG_WARN("ps: table '%s' of group %s: its view is not watched: %s", t->name, t->group,
                 strerror(-rc));
    else
        t->watching = 1;
}

/* ---- opens sent again to servers (ps_reopen_t) --------------------------------------- */

static int in_view(const ps_table_t *t, const char *node)
{
    for (size_t i = 0; t->ring && i < ps_ring_size(t->ring); i++)
        if (strcmp(ps_ring_name(t->ring, i), node) == 0)
            return 1;
    return 0;
}

int ps_repl_send_open(ps_table_t *t, const char *node)
{
    uint64_t now = salusd_now_ns();
    ps_reopen_t *o = t->reopens;
    while (o && strcmp(o->node, node) != 0)
        o = o->next;
    if (!o && (o = calloc(1, sizeof(*o)))) {
        snprintf(o->node, sizeof(o->node), "%s", node);
        o->since_ns = now;
        o->next = t->reopens;
        t->reopens = o;
    }
    if (o)
        o->sent_ns = now;
    ps_repl_arm(t->ps); /* (its timer sends it again) */
    return ps_msg_send_open_as(t, node, 0);
}

void ps_repl_open_answered(ps_table_t *t, const char *node)
{
    for (ps_reopen_t **op = &t->reopens; *op; op = &(*op)->next)
        if (strcmp((*op)->node, node) == 0) {
            ps_reopen_t *o = *op;
            *op = o->next;
            if (o->warned)
                LOG_INFO("ps: table '%s' of group %s: server %s answered its open after "
                         "%.1f s", t->name, t->group, node,
                         (double)(salusd_now_ns() - o->since_ns) / 1e9);
            free(o);
            return;
        }
}

static void reopens_free(ps_table_t *t)
{
    while (t->reopens) {
        ps_reopen_t *o = t->reopens;
        t->reopens = o->next;
        free(o);
    }
}

int ps_repl_check_opens(ps_table_t *t, uint64_t now)
{
    if (t->state != PS_TABLE_READY) {
        reopens_free(t);
        return 0;
    }
    for (ps_reopen_t **op = &t->reopens; *op;) {
        ps_reopen_t *o = *op;
        if (!in_view(t, o->node) || !ps_repl_alive(t->ps, o->node)) {
            *op = o->next; /* (a view without it, or its lease ended: nothing to wait for) */
            free(o);
            continue;
        }
        op = &o->next;
        if (now - o->sent_ns < PS_REOPEN_RESEND_MS * 1000000ull)
            continue;
        if (!o->warned && now - o->since_ns > ps_retarget_limit_ns(t->ps)) {
            o->warned = 1;
            LOG_WARN("ps: table '%s' of group %s: server %s has not answered its open for "
                     "%.1f s (it may have lost the table): sent again every %d ms", t->name,
                     t->group, o->node, (double)(now - o->since_ns) / 1e9,
                     PS_REOPEN_RESEND_MS);
        }
        LOG_DEBUG("ps: table '%s': the open to %s sent again (not answered)", t->name,
                  o->node);
        o->sent_ns = now;
        ps_msg_send_open_as(t, o->node, 0);
    }
    return t->reopens != NULL;
}

void ps_repl_peer_up(ps_t *ps, const char *node)
{
    if (strcmp(node, ps_cluster_self(ps->d)) == 0)
        return;
    for (ps_table_t *t = ps->tables; t; t = t->next) {
        if (t->state != PS_TABLE_READY || t->self_source < 0 || !t->streams || !t->repl)
            continue;
        for (size_t i = 0; t->ring && i < ps_ring_size(t->ring); i++)
            if (strcmp(ps_ring_name(t->ring, i), node) == 0) {
                if (ps_repl_send_open(t, node) < 0)
                    LOG_DEBUG("ps: table '%s': the open to %s (reachable again) was not sent "
                              "now (sent again)", t->name, node);
                break;
            }
    }
}

static void on_restart_view(void *arg, int rc, const char *err, const ps_view_t *view)
{
    (void)arg;
    if (rc == 0 && view)
        LOG_WARN("ps: a server restarted within its lease left the view: %s (view %llu)",
                 view->servers, (unsigned long long)view->number);
    else if (rc < 0 && rc != -ESTALE)
        LOG_WARN("ps: the view without a restarted server was not written: %s",
                 err && err[0] ? err : strerror(-rc));
}

void ps_repl_peer_restarted(ps_t *ps, const char *node)
{
    for (ps_table_t *t = ps->tables; t; t = t->next) {
        if (t->state != PS_TABLE_READY || !t->repl || !t->view_servers[0])
            continue;
        char rest[PS_SERVERS_BYTES] = "", list[PS_SERVERS_BYTES];
        int in = 0;
        size_t at = 0;
        snprintf(list, sizeof(list), "%s", t->view_servers);
        for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && at < sizeof(rest);
             tok = strtok_r(NULL, ",", &save)) {
            if (strcmp(tok, node) == 0)
                in = 1;
            else
                at += (size_t)snprintf(rest + at, sizeof(rest) - at, "%s%s", at ? "," : "",
                                       tok);
        }
        if (!in || !rest[0])
            continue;
        LOG_WARN("ps: table '%s' of group %s: server %s restarted within its lease (its state "
                 "is lost): proposing view %llu without it", t->name, t->group, node,
                 (unsigned long long)t->view);
        ps_replicas_left(ps->d, t->uid, t->group, t->epoch, t->name, node); /* back later */
        int rc = ps_replicas_propose(ps->d, t->uid, t->group, t->epoch, t->name, t->view,
                                     rest, on_restart_view, NULL);
        if (rc < 0)
            LOG_WARN("ps: table '%s': the view without %s cannot be proposed: %s", t->name,
                     node, strerror(-rc));
    }
}

/* Another node's kept read of a shard no longer primaried here hears -ESTALE (its daemon asks
 * the new primary); this node's own are moved by ps_retarget_view_changed. */
static void fence_waits(ps_table_t *t)
{
    char err[PS_ERR_BYTES];
    for (ps_wait_t **wp = &t->waits; *wp;) {
        ps_wait_t *w = *wp;
        if (w->pull || ps_repl_is_primary(t, w->shard)) {
            wp = &w->next;
            continue;
        }
        *wp = w->next;
        snprintf(err, sizeof(err), "table '%s': shard %u moved to %s", t->name, w->shard,
                 ps_table_primary(t, w->shard));
        ps_msg_send_pull_reply(t, w, -ESTALE, err);
        free(w);
    }
}

/* A shard that stays primaried here: its forwards wait on the same standbys by name (the
 * indices change with the set); a new standby is waited for too (its copy, taken after the
 * update, stands for it), one that left is not. */
static void remap_forwards(ps_table_t *t, uint32_t shard, const ps_repl_shard_t *old,
                           const ps_repl_shard_t *now)
{
    for (ps_forward_t *f = t->forwards; f; f = f->next) {
        if (f->shard != shard)
            continue;
        uint8_t waiting[PS_MAX_REPLICAS] = {0};
        for (uint32_t k = 0; k < now->nstandbys; k++) {
            waiting[k] = 1;
            for (uint32_t j = 0; j < old->nstandbys; j++)
                if (strcmp(old->standby[j].node, now->standby[k].node) == 0)
                    waiting[k] = f->waiting[j];
        }
        memcpy(f->waiting, waiting, sizeof(waiting));
    }
    ps_repl_arm(t->ps); /* (one that waits on nobody now is acknowledged at the check) */
}

/* The servers of view b that are not in view a (sorted lists "x,y") hear the open: the table
 * with the view (not fresh: their shards come as copies). Sent by each source daemon. */
static void open_new_servers(ps_table_t *t, const char *a, const char *b)
{
    char list[PS_SERVERS_BYTES];
    snprintf(list, sizeof(list), "%s", b);
    const char *me = ps_cluster_self(t->ps->d);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(tok);
        int old = 0;
        for (const char *p = a; p && *p && !old;) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            old = len == n && strncmp(p, tok, n) == 0;
            p = end ? end + 1 : NULL;
        }
        if (old || strcmp(tok, me) == 0)
            continue;
        LOG_DEBUG("ps: table '%s': the open goes to %s, a server that joined its view",
                  t->name, tok);
        if (ps_repl_send_open(t, tok) < 0)
            LOG_DEBUG("ps: table '%s': the open to %s (new in its view) was not sent now "
                      "(sent again)", t->name, tok);
    }
}

static void apply_view(ps_table_t *t, const ps_view_t *v)
{
    ps_t *ps = t->ps;
    char sorted[PS_SERVERS_BYTES], err[PS_ERR_BYTES];
    int self;
    ps_ring_t *ring = view_ring(t, v->servers, &self, sorted, err, sizeof(err));
    uint32_t shards = t->layout.shards, r = v->replicas ? v->replicas : 1;
    uint32_t *owner = ring ? calloc(shards, sizeof(*owner)) : NULL;
    ps_repl_shard_t *repl = owner ? calloc(shards, sizeof(*repl)) : NULL;
    uint8_t *copy_all = repl ? calloc(shards, 1) : NULL;
    if (!copy_all) {
        LOG_ERROR("ps: table '%s' of group %s: view %llu not taken: %s", t->name, t->group,
                  (unsigned long long)v->number, ring ? "out of memory" : err);
        free(owner);
        free(repl);
        ps_ring_destroy(ring);
        return;
    }
    uint32_t moved = 0, copies = 0;
    char old_servers[PS_SERVERS_BYTES];
    snprintf(old_servers, sizeof(old_servers), "%s",
             t->view_servers[0] ? t->view_servers : t->spec.servers);
    for (uint32_t i = 0; i < shards; i++) {
        size_t was[PS_MAX_REPLICAS], now[PS_MAX_REPLICAS];
        uint32_t kw = ps_ring_replicas(t->ring, t->name, i, t->replicas, was);
        uint32_t kn = ps_ring_replicas(ring, t->name, i, r, now);
        const char *old_primary = ps_ring_name(t->ring, was[0]);
        const char *new_primary = ps_ring_name(ring, now[0]);
        moved += strcmp(old_primary, new_primary) != 0;
        for (uint32_t j = 0; j < kn; j++)
            copies += !in_set(t->ring, was, kw, ps_ring_name(ring, now[j]));
        place(t, ring, self, r, i, &owner[i], &repl[i]);
        ps_repl_shard_t *old = &t->repl[i], *rs = &repl[i];
        int was_primary = ps_repl_is_primary(t, i), is_primary = self >= 0 &&
                                                                 (int)now[0] == self;
        if (was_primary && !is_primary) {
            /* (a standby here whose copy had not been acknowledged holds nothing yet) */
            int behind = 0;
            for (uint32_t j = 0; j < old->nstandbys; j++)
                behind |= old->standby[j].copy_req != 0 &&
                          strcmp(old->standby[j].node, new_primary) == 0;
            ps_repl_drop_shard(t, i);
            /* a new primary that held nothing gets this state (graceful: alive) */
            if (t->shards[i] && !old->loading &&
                (behind || !in_set(t->ring, was, kw, new_primary)))
                ps_repl_send_copy(t, i, new_primary, 1);
        }
        /* a fail-over (the old primary is gone): a standby here that holds the shard hands it
         * to the new primary too, which may hold nothing (its copy was on its way, or it
         * joined); one that serves already answers 0 and keeps its own */
        if (!was_primary && !is_primary && old->replica && t->shards[i] &&
            strcmp(old_primary, new_primary) != 0 && !ps_repl_alive(ps, old_primary))
            ps_repl_send_copy(t, i, new_primary, 1);
        if (is_primary) {
            rs->loading = !old->replica || !t->shards[i] || (was_primary && old->loading);
            rs->applied = old->applied;
            copy_all[i] = !was_primary;
            if (rs->loading && !old->replica && !ps_repl_alive(ps, old_primary))
                LOG_ERROR("ps: table '%s' shard %u: primary here now, but its last primary "
                          "%s is gone and no replica here holds it: it waits for a state",
                          t->name, i, old_primary);
            /* standbys that were in step stay so when the primary is the same */
            for (uint32_t k = 0; was_primary && k < rs->nstandbys; k++)
                for (uint32_t j = 0; j < old->nstandbys; j++)
                    if (strcmp(old->standby[j].node, rs->standby[k].node) == 0 &&
                        old->standby[j].copy_req == 0)
                        rs->standby[k].copy_req = UINT64_MAX; /* (marker: in step) */
            if (was_primary)
                remap_forwards(t, i, old, rs);
        }
        if (!rs->replica && t->shards[i]) {
            ps_shard_destroy(t->shards[i]);
            t->shards[i] = NULL;
        }
    }
    ps_ring_destroy(t->ring);
    free(t->owner);
    free(t->repl);
    t->ring = ring;
    t->owner = owner;
    t->repl = repl;
    t->self_server = self;
    t->replicas = r;
    LOG_INFO("ps: table %s/%s view %llu -> %llu: %u of %u primaries moved, %u copies",
             t->group, t->name, (unsigned long long)t->view, (unsigned long long)v->number,
             moved, shards, copies);
    t->view = v->number;
    snprintf(t->view_servers, sizeof(t->view_servers), "%s", sorted);
    t->moved += moved;
    t->copies += copies;
    ps->stats.views++;
    ps->stats.shards_moved += moved;
    fence_waits(t);
    /* the primaries' standbys that need the state get it (before any forward) */
    for (uint32_t i = 0; i < shards; i++) {
        ps_repl_shard_t *rs = &t->repl[i];
        if (!ps_repl_is_primary(t, i) || rs->loading)
            continue;
        for (uint32_t k = 0; k < rs->nstandbys; k++) {
            int in_step = rs->standby[k].copy_req == UINT64_MAX;
            rs->standby[k].copy_req = 0;
            if (copy_all[i] || !in_step)
                ps_repl_send_copy(t, i, rs->standby[k].node, 0);
        }
    }
    free(copy_all);
    if (t->group_id == 0) /* a server-side table: charged for the replicas here */
        t->charged_bytes = ps_repl_shard_bytes(t);
    if (t->self_source >= 0 && t->streams && t->state == PS_TABLE_READY)
        open_new_servers(t, old_servers, sorted); /* before any update or read goes there */
    ps_retarget_view_changed(t);
}

void ps_repl_view_changed(void *ctx, uid_t uid, const char *group, uint64_t epoch,
                          const char *table, const ps_view_t *view)
{
    ps_t *ps = ctx;
    if (!view)
        return;
    for (ps_table_t *t = ps->tables, *next; t; t = next) {
        next = t->next;
        if (t->uid != uid || t->epoch != epoch || t->state == PS_TABLE_FAILED || !t->repl ||
            strcmp(t->group, group) != 0 || strcmp(t->name, table) != 0 ||
            view->number <= t->view)
            continue;
        apply_view(t, view);
    }
}
