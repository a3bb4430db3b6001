/* The cluster's gang slots (see cluster.h): one leader orders them; the nodes tell it when
 * they are ready for a group's next slot ("ready" {group, epoch, last}) and it sends each
 * node of the group the slot ("slot" {group, epoch, seq}) once all are. Each node hands its
 * slots to the scheduling core in the order they arrive (sched_core_group_slot), which serves
 * them in that order: one global order of slots, so no two gangs wait on each other in a
 * circle across nodes. A slot costs a message per node, not an etcd transaction. */
#include "cluster-internal.h"

#include "jobs.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void send_to(cluster_t *cl, const char *node, const char *op, const cluster_group_t *g,
                    const char *seq_key, uint64_t seq, uint64_t iters)
{
    int is_slot = strcmp(op, "slot") == 0;
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 0, op, is_slot ? 5 : 4);
    proto_pack_kv_str(&enc.pk, "group", g->key);
    proto_pack_kv_uint(&enc.pk, "epoch", (uint64_t)g->epoch);
    proto_pack_kv_uint(&enc.pk, seq_key, seq);
    proto_pack_kv_uint(&enc.pk, "iters", iters);
    if (is_slot) /* the sender's term: a former leader's slot it sends on is still its own act */
        proto_pack_kv_uint(&enc.pk, "term", (uint64_t)cl->leader_epoch);
    proto_enc_finish(&enc);
    if (links_send(cl->links, node, &enc) == 0)
        cl->stats.messages_sent++;
    else
        LOG_DEBUG("cluster: %s of group %s to %s not sent (link down): sent again when it is "
                  "back", op, g->name, node);
    proto_enc_destroy(&enc);
}

/* ---- this node: slots in, ready out --------------------------------------------------------- */

/* target: the iterations each rank has done at the slot's end, as its leader sent it (0:
 * not known), said back in this node's pending reports (a new leader learns it) */
static void node_slot(cluster_t *cl, cluster_group_t *g, uint64_t seq, uint64_t target)
{
    if (!g->local_id || g->local_failed || g->over)
        return;
    if (seq <= g->last_seq || seq == g->pending_seq)
        return; /* a slot sent again that this node has had */
    g->pending_seq = seq;
    g->pending_target = target;
    g->wait_since_ns = 0;
    LOG_DEBUG("cluster: group %s: slot %llx here (leader revision %llu)", g->name,
              (unsigned long long)seq, (unsigned long long)(seq >> 32));
    int rc = jobs_group_slot(cl->d, g->local_id, seq, target);
    if (rc < 0 && rc != -EALREADY) {
        /* never a ready from here (the leader, this node, would issue the next slot inside
         * this call): -ENOENT, no local rank left in the core, says nothing more; another
         * refusal is said again by the next resync, a second later */
        LOG_DEBUG("cluster: group %s: slot %llx refused by the scheduling core (%s)", g->name,
                  (unsigned long long)seq, strerror(-rc));
        g->pending_seq = 0;
        g->last_seq = seq;
        if (rc == -ENOENT)
            g->ready_sent = 0;
    }
}

static void leader_ready(cluster_t *cl, const char *node, cluster_group_t *g, uint64_t last,
                         uint64_t iters, int pending);

/* The fewest iterations a live local rank of g has done (what survives a restart of salusd:
 * the ranks' own count). */
static uint64_t local_iters(cluster_t *cl, const cluster_group_t *g)
{
    uint64_t least = UINT64_MAX;
    for (uint32_t i = 0; g->local_job && i < g->world; i++) {
        job_t *job = g->local_job[i] ? registry_find(cl->d->registry, g->local_job[i]) : NULL;
        if (job && job->runtime) {
            uint64_t n = jobs_iterations(job);
            least = n < least ? n : least;
        }
    }
    return least == UINT64_MAX ? 0 : least;
}

void cluster_slots_ready(cluster_t *cl, cluster_group_t *g)
{
    if (!cl->leader[0] || cl->lease_lost)
        return; /* sent when a leader is known (cluster_slots_resync) */
    uint64_t iters = local_iters(cl, g);
    if (!g->pending_seq && !g->wait_since_ns)
        g->wait_since_ns = salusd_now_ns();
    if (cluster_is_leader(cl)) {
        if (cluster_may_grant(cl))
            leader_ready(cl, cl->node, g, g->last_seq, iters, 0);
    } else {
        send_to(cl, cl->leader, "ready", g, "last", g->last_seq, iters);
    }
}

/* A node in a slot tells the leader which, with the slot's target as "iters" (a new leader
 * learns how far the old one got, and how far the slot goes). */
static void report_pending(cluster_t *cl, cluster_group_t *g)
{
    if (!cl->leader[0] || cl->lease_lost)
        return;
    if (cluster_is_leader(cl)) {
        if (cluster_may_grant(cl))
            leader_ready(cl, cl->node, g, g->pending_seq, g->pending_target, 1);
        return;
    }
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 0, "ready", 5);
    proto_pack_kv_str(&enc.pk, "group", g->key);
    proto_pack_kv_uint(&enc.pk, "epoch", (uint64_t)g->epoch);
    proto_pack_kv_uint(&enc.pk, "last", g->pending_seq);
    proto_pack_kv_uint(&enc.pk, "iters", g->pending_target);
    proto_pack_kv_bool(&enc.pk, "pending", 1);
    proto_enc_finish(&enc);
    if (links_send(cl->links, cl->leader, &enc) == 0)
        cl->stats.messages_sent++;
    proto_enc_destroy(&enc);
}

void cluster_slot_done(salusd_t *d, uint64_t group_id, uint64_t seq)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (!g)
        return;
    if (seq > g->last_seq)
        g->last_seq = seq;
    if (g->pending_seq == seq)
        g->pending_seq = 0;
    cl->stats.slots_served++;
    if (!g->local_failed && !g->over && g->ready_sent)
        cluster_slots_ready(cl, g);
}

void cluster_slots_resync(cluster_t *cl)
{
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (!g->local_id || !g->ready_sent || g->local_failed || g->over)
            continue;
        if (g->pending_seq)
            report_pending(cl, g);
        else
            cluster_slots_ready(cl, g);
    }
}

/* ---- the leader ------------------------------------------------------------------------------ */

static int in_list(char (*list)[LINKS_NODE_BYTES], uint32_t count, const char *node)
{
    for (uint32_t i = 0; list && i < count; i++)
        if (strcmp(list[i], node) == 0)
            return 1;
    return 0;
}

static int is_ready(const cluster_group_t *g, const char *node)
{
    return in_list(g->ready_nodes, g->ready_count, node);
}

/* node was sent g's last slot (or joined it with a late rank) */
static int is_target(const cluster_group_t *g, const char *node)
{
    return in_list(g->slot_nodes, g->slot_node_count, node);
}

static int add_target(cluster_group_t *g, const char *node)
{
    if (is_target(g, node))
        return 0;
    if (!g->slot_nodes && !(g->slot_nodes = calloc(CLUSTER_GROUP_MAX_NODES, sizeof(*g->slot_nodes))))
        return -ENOMEM;
    if (g->slot_node_count == CLUSTER_GROUP_MAX_NODES)
        return -ENOSPC;
    snprintf(g->slot_nodes[g->slot_node_count++], LINKS_NODE_BYTES, "%s", node);
    return 0;
}

static int bsp_with_turns(const cluster_t *cl, const cluster_group_t *g)
{
    return strcmp(g->sync, "bsp") == 0 && !cl->d->config.gang_turns_off;
}

/* 1 when node runs a rank of g (as the group's record says), else 0. */
static int holds_rank(const cluster_group_t *g, const char *node)
{
    for (uint32_t i = 0; g->ranks && i < g->world; i++)
        if (strcmp(g->ranks[i].node, node) == 0)
            return 1;
    return 0;
}

/* 1 when node runs a rank of g that registered (its program called the driver). */
static int holds_registered(const cluster_group_t *g, const char *node)
{
    for (uint32_t i = 0; g->ranks && i < g->world; i++)
        if (g->ranks[i].registered && strcmp(g->ranks[i].node, node) == 0)
            return 1;
    return 0;
}

/* g's last slot is not over on a node it went to */
static int slot_open(const cluster_t *cl, const cluster_group_t *g)
{
    for (uint32_t i = 0; g->cur_seq && i < g->slot_node_count; i++)
        if (!is_ready(g, g->slot_nodes[i]) && !cluster_group_node_over(cl, g, g->slot_nodes[i]))
            return 1;
    return 0;
}

/* The nodes g's next slot goes to (up to max): those of its registered ranks, those that
 * said they are ready (the record may come after the ready) and those its last slot went to,
 * not over. A node whose ranks
 * have not registered (host-only ranks, or GPU ranks whose first driver call is still to
 * come) gets no slot: a late rank's node joins the slot in progress (leader_ready). */
static uint32_t slot_targets(const cluster_t *cl, const cluster_group_t *g, const char **out,
                             uint32_t max)
{
    const char *nodes[CLUSTER_GROUP_MAX_NODES];
    uint32_t n = cluster_group_nodes(g, nodes, CLUSTER_GROUP_MAX_NODES), count = 0;
    for (uint32_t i = 0; i < n && count < max; i++)
        if (!cluster_group_node_over(cl, g, nodes[i]) &&
            (holds_registered(g, nodes[i]) || is_ready(g, nodes[i]) || is_target(g, nodes[i])))
            out[count++] = nodes[i];
    return count;
}

/* A group whose open slot, issued before `before`, a slot of g up to `before` would overtake
 * on one of nodes (NULL: none): h has a live rank there that its slot did not go to (a rank
 * not registered yet). Should that rank register, h's open slot goes to its node (its peers
 * may wait for it in a collective); a later slot served there before it could wait, in a
 * circle, for h's ranks elsewhere. So no later slot goes to such a node while h's slot is
 * open, neither a new one nor an open one that the node would join: every node is sent its
 * slots in increasing order, and serves them so. */
static const cluster_group_t *held_by(const cluster_t *cl, const cluster_group_t *g,
                                      const char **nodes, uint32_t n, uint64_t before,
                                      const char **where)
{
    for (const cluster_group_t *h = cl->groups; h; h = h->next) {
        if (h == g || h->dropped || !h->ranks || h->failed || !bsp_with_turns(cl, h) ||
            h->cur_seq >= before || !slot_open(cl, h))
            continue;
        for (uint32_t i = 0; i < n; i++)
            if (holds_rank(h, nodes[i]) && !is_target(h, nodes[i]) &&
                !cluster_group_node_over(cl, h, nodes[i])) {
                *where = nodes[i];
                return h;
            }
    }
    return NULL;
}

/* Whether g's next slot may be issued now: every node it goes to is ready, and no other
 * group's open slot holds one of them (held_by). Sets g->ready_since_ns. */
static uint32_t may_issue(cluster_t *cl, cluster_group_t *g, const char **nodes, uint64_t now)
{
    if (g->dropped || !g->ranks || g->failed || !bsp_with_turns(cl, g))
        return 0;
    for (uint32_t i = 0; i < g->world; i++)
        if (!g->ranks[i].node[0])
            return 0; /* not every rank is known yet */
    /* a node whose ranks have all ended gives no ready again: the others go on */
    uint32_t n = slot_targets(cl, g, nodes, CLUSTER_GROUP_MAX_NODES);
    for (uint32_t i = 0; i < n; i++)
        if (!is_ready(g, nodes[i]))
            return 0;
    if (!n)
        return 0;
    if (!g->ready_since_ns)
        g->ready_since_ns = now;
    const char *where = NULL;
    const cluster_group_t *h = held_by(cl, g, nodes, n, UINT64_MAX, &where);
    if (h) {
        if (!g->held_logged)
            LOG_DEBUG("cluster: group %s: its next slot waits for the slot of group %s, whose "
                      "rank on node %s has not joined it", g->name, h->name, where);
        g->held_logged = 1;
        return 0;
    }
    g->held_logged = 0;
    return n;
}

static void issue(cluster_t *cl, cluster_group_t *g, const char **nodes, uint32_t n)
{
    uint64_t seq = ((uint64_t)cl->leader_epoch << 32) | ++cl->slot_counter;
    uint64_t k = cl->d->config.gang_slot_iterations > 0 ? (uint64_t)cl->d->config.gang_slot_iterations : 1;
    g->cur_seq = seq;
    g->cur_since_ns = salusd_now_ns();
    g->cur_target = g->round_iters + k;
    g->ready_count = 0;
    g->round_iters = 0;
    g->ready_since_ns = 0;
    g->slot_node_count = 0;
    /* (the names are the record's: copied before a send that may change it) */
    char names[CLUSTER_GROUP_MAX_NODES][LINKS_NODE_BYTES];
    for (uint32_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s", nodes[i]);
        add_target(g, nodes[i]);
    }
    cl->stats.slots_issued++;
    LOG_DEBUG("cluster: group %s: slot %llx issued to %u node%s (ranks reach %llu iterations)",
              g->name, (unsigned long long)seq, n, n == 1 ? "" : "s",
              (unsigned long long)g->cur_target);
    uint64_t target = g->cur_target;
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(names[i], cl->node) == 0)
            node_slot(cl, g, seq, target);
        else
            send_to(cl, names[i], "slot", g, "seq", seq, target);
    }
}

/* The leader's pass: the groups whose next slot may be issued, the one ready longest first
 * (then the one served least recently), each once per round; a slot that ends at once here
 * asks for another round (at most a few: the resync's readies, every second, go on). */
static void leader_pass(cluster_t *cl)
{
    if (!cluster_may_grant(cl))
        return; /* not the leader, or its lease may have expired unseen (cut off, paused):
                 * a successor may be granting already */
    if (cl->pass_busy) {
        cl->pass_again = 1;
        return;
    }
    cl->pass_busy = 1;
    uint64_t now = salusd_now_ns();
    const char *nodes[CLUSTER_GROUP_MAX_NODES], *best_nodes[CLUSTER_GROUP_MAX_NODES];
    for (int round = 0; round < 4; round++) {
        cl->pass_again = 0;
        uint64_t pass_seq = cl->slot_counter; /* groups issued in this round have cur_seq above */
        for (;;) {
            cluster_group_t *best = NULL;
            uint32_t best_n = 0;
            for (cluster_group_t *g = cl->groups; g; g = g->next) {
                if (g->cur_seq && (g->cur_seq >> 32) == (uint64_t)cl->leader_epoch &&
                    (g->cur_seq & 0xffffffffu) > pass_seq)
                    continue; /* once per round */
                uint32_t n = may_issue(cl, g, nodes, now);
                if (n && (!best || g->ready_since_ns < best->ready_since_ns ||
                          (g->ready_since_ns == best->ready_since_ns && g->cur_seq < best->cur_seq))) {
                    best = g;
                    best_n = n;
                    memcpy(best_nodes, nodes, n * sizeof(*nodes));
                }
            }
            if (!best)
                break;
            issue(cl, best, best_nodes, best_n);
        }
        if (!cl->pass_again)
            break;
    }
    cl->pass_busy = 0;
}

void cluster_slots_check(cluster_t *cl, cluster_group_t *g)
{
    (void)g; /* every group: one may wait for another's slot (held_by) */
    leader_pass(cl);
}

static void leader_ready(cluster_t *cl, const char *node, cluster_group_t *g, uint64_t last,
                         uint64_t iters, int pending)
{
    if (g->failed || !cluster_may_grant(cl))
        return;
    /* this leader's own slots, from before a restart of it or a re-read: numbers go on */
    if ((last >> 32) == (uint64_t)cl->leader_epoch && (last & 0xffffffffu) > cl->slot_counter)
        cl->slot_counter = last & 0xffffffffu;
    if (pending) { /* in a slot: ready when it ends; others behind it are sent it (below) */
        if (last > g->max_last)
            g->max_last = last;
        if (last > g->cur_seq) {
            /* a slot this leader did not issue (a former leader's, or its own before a
             * restart) is in progress: it is the group's open slot, with the nodes in it as
             * its targets, so that no other slot overtakes it where a late rank may join it
             * (held_by) and the group's next slot waits for it */
            g->cur_seq = last;
            g->cur_since_ns = salusd_now_ns();
            g->cur_target = 0;
            g->slot_node_count = 0;
            g->ready_count = 0;
            g->ready_since_ns = 0;
        }
        if (last == g->cur_seq) {
            add_target(g, node);
            if (iters > g->cur_target) /* (an adopted slot's: what its nodes were sent) */
                g->cur_target = iters;
        }
        return;
    }
    if (g->max_last > g->cur_seq && last < g->max_last) {
        /* a slot of a former leader that reached some nodes and not this one (the leader
         * went between its sends): the others wait in it for this node's ranks */
        LOG_DEBUG("cluster: group %s: node %s missed slot %llx of the former leader: sent",
                  g->name, node, (unsigned long long)g->max_last);
        if (strcmp(node, cl->node) == 0)
            node_slot(cl, g, g->max_last, 0);
        else
            send_to(cl, node, "slot", g, "seq", g->max_last, 0);
        return;
    }
    if (g->cur_seq && last < g->cur_seq && !is_ready(g, node)) {
        int target = is_target(g, node);
        const char *where = NULL, *one[1] = {node};
        const cluster_group_t *h = !target && slot_open(cl, g)
                                       ? held_by(cl, g, one, 1, g->cur_seq, &where) : NULL;
        if (h) {
            /* an earlier open slot waits for a rank on that node first: it joins this one
             * once that slot has it or is over (its ready comes again at its resync) */
            LOG_DEBUG("cluster: group %s: node %s joins slot %llx after group %s's slot %llx",
                      g->name, node, (unsigned long long)g->cur_seq, h->name,
                      (unsigned long long)h->cur_seq);
            return;
        }
        if (!target && slot_open(cl, g) && add_target(g, node) == 0) {
            /* a node whose ranks registered after the slot went out (late ranks: host-only
             * until their first driver call): it joins the slot in progress, whose ranks
             * may wait for its ranks in a collective (no later slot went to it: held_by) */
            LOG_DEBUG("cluster: group %s: node %s, with a late rank, joins slot %llx", g->name,
                      node, (unsigned long long)g->cur_seq);
            if (strcmp(node, cl->node) == 0)
                node_slot(cl, g, g->cur_seq, g->cur_target);
            else
                send_to(cl, node, "slot", g, "seq", g->cur_seq, g->cur_target);
            return;
        }
        /* a slot asks at least one iteration of each rank: an adopted slot whose target no
         * pending report told (0) still is not over for a node whose ranks did none */
        uint64_t need = g->cur_target ? g->cur_target : 1;
        if (target && iters < need) {
            /* it has not had the slot issued last (lost with a link, refused by its fence
             * while it had not read this leader's key yet, or it restarted before its ranks
             * did the slot's iterations: a restarted daemon knows no seq, its ranks know
             * their count); counted ready without it, it would never have it, and the
             * slot's other ranks would wait for its ranks in it for ever */
            LOG_DEBUG("cluster: group %s: node %s missed slot %llx (at %llu of %llu "
                      "iterations): sent again", g->name, node, (unsigned long long)g->cur_seq,
                      (unsigned long long)iters, (unsigned long long)need);
            if (strcmp(node, cl->node) == 0)
                node_slot(cl, g, g->cur_seq, g->cur_target);
            else
                send_to(cl, node, "slot", g, "seq", g->cur_seq, g->cur_target);
            return;
        }
    }
    if (iters > g->round_iters)
        g->round_iters = iters;
    if (!is_ready(g, node)) {
        if (!g->ready_nodes) {
            g->ready_nodes = calloc(CLUSTER_GROUP_MAX_NODES, sizeof(*g->ready_nodes));
            if (!g->ready_nodes)
                return;
        }
        if (g->ready_count < CLUSTER_GROUP_MAX_NODES)
            snprintf(g->ready_nodes[g->ready_count++], LINKS_NODE_BYTES, "%s", node);
    }
    leader_pass(cl);
}

void cluster_slots_forget(cluster_t *cl, cluster_group_t *g)
{
    (void)cl;
    g->cur_seq = 0;
    g->cur_since_ns = 0;
    g->max_last = 0;
    g->cur_target = 0;
    g->round_iters = 0;
    g->ready_count = 0;
    g->slot_node_count = 0;
    g->ready_since_ns = 0;
}

void cluster_slots_link_up(cluster_t *cl, const char *node)
{
    if (!cluster_may_grant(cl))
        return;
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (!g->cur_seq || g->failed || is_ready(g, node) || !is_target(g, node))
            continue;
        send_to(cl, node, "slot", g, "seq", g->cur_seq, g->cur_target);
    }
}

/* ---- the watchdog --------------------------------------------------------------------------- */

/* appends node to a comma-separated list */
static void list_add(char *list, size_t size, const char *node)
{
    size_t len = strlen(list);
    if (len + 1 < size)
        snprintf(list + len, size - len, "%s%s", len ? "," : "", node);
}

int cluster_slots_diagnose(const cluster_t *cl, const cluster_group_t *g, uint64_t now_ns,
                           uint64_t limit_ns, char *out, size_t size)
{
    out[0] = 0;
    if (!limit_ns || g->dropped || g->failed || !bsp_with_turns(cl, g))
        return 0;
    /* (a slot whose ranks never ask for their lanes, host-bound ranks that registered, stays
     * open with nobody waiting: said only once a node is ready for the next) */
    if (cluster_is_leader(cl) && g->cur_seq && g->cur_since_ns && g->ready_count &&
        slot_open(cl, g) && now_ns - g->cur_since_ns >= limit_ns) {
        char open[CLUSTER_GROUP_MAX_NODES * LINKS_NODE_BYTES] = "";
        char ready[CLUSTER_GROUP_MAX_NODES * LINKS_NODE_BYTES] = "";
        for (uint32_t i = 0; i < g->slot_node_count; i++)
            if (!is_ready(g, g->slot_nodes[i]) &&
                !cluster_group_node_over(cl, g, g->slot_nodes[i]))
                list_add(open, sizeof(open), g->slot_nodes[i]);
        for (uint32_t i = 0; i < g->ready_count; i++)
            list_add(ready, sizeof(ready), g->ready_nodes[i]);
        snprintf(out, size, "group %s: slot %llx (target %llu iterations) has been open for "
                 "%llu s: not over on %s; ready for the next: %s", g->name,
                 (unsigned long long)g->cur_seq, (unsigned long long)g->cur_target,
                 (unsigned long long)((now_ns - g->cur_since_ns) / 1000000000ull), open,
                 ready[0] ? ready : "(none)");
        return 1;
    }
    if (g->local_id && g->ready_sent && !g->local_failed && !g->over && !g->pending_seq &&
        g->wait_since_ns && now_ns - g->wait_since_ns >= limit_ns) {
        snprintf(out, size, "group %s has waited %llu s here for a gang slot: the last served "
                 "here %llx, none received since; ready said to leader %s (revision %lld) "
                 "every second", g->name,
                 (unsigned long long)((now_ns - g->wait_since_ns) / 1000000000ull),
                 (unsigned long long)g->last_seq, cl->leader[0] ? cl->leader : "(none known)",
                 (long long)cl->leader_epoch);
        return 1;
    }
    return 0;
}

void cluster_slots_watch(cluster_t *cl, uint64_t now_ns, uint64_t limit_ns)
{
    char line[512];
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (g->wait_logged_ns && now_ns - g->wait_logged_ns < limit_ns)
            continue;
        if (cluster_slots_diagnose(cl, g, now_ns, limit_ns, line, sizeof(line))) {
            g->wait_logged_ns = now_ns;
            LOG_WARN("cluster: %s", line);
        }
    }
}

/* ---- messages from other daemons ------------------------------------------------------------ */

void cluster_slots_message(cluster_t *cl, const char *from, const proto_msg_t *msg)
{
    char key[sizeof(((cluster_group_t *)0)->key)];
    uint64_t epoch = 0, value = 0, iters = 0, term = 0;
    int pending = 0;
    int is_slot = strcmp(msg->op, "slot") == 0, is_ready_msg = strcmp(msg->op, "ready") == 0;
    if ((!is_slot && !is_ready_msg) ||
        proto_get_str_copy(&msg->body, "group", key, sizeof(key)) < 0 ||
        proto_get_uint(&msg->body, "epoch", &epoch) < 0 ||
        proto_get_uint(&msg->body, is_slot ? "seq" : "last", &value) < 0 ||
        proto_get_uint(&msg->body, "iters", &iters) < 0 ||
        proto_get_bool(&msg->body, "pending", &pending) == -EINVAL ||
        (is_slot && proto_get_uint(&msg->body, "term", &term) == -EINVAL) ||
        term > INT64_MAX) {
        LOG_WARN("cluster: a malformed message '%s' from %s: ignored", msg->op, from);
        return;
    }
    cluster_group_t *g = cluster_group_by_key(cl, key);
    if (!g || !g->epoch || (uint64_t)g->epoch != epoch) {
        LOG_DEBUG("cluster: %s of group %s (epoch %llu) from %s: not known here (yet)", msg->op,
                  key, (unsigned long long)epoch, from);
        return; /* the sender says it again when it resyncs; a record not read yet comes */
    }
    if (is_slot) {
        cluster_fence_view_t view = {.newest_revision = cl->newest_epoch, .leader = cl->leader,
                                     .leader_revision = cl->leader_epoch};
        if (!term) /* (a daemon that sends no term: the seq's own) */
            term = value >> 32;
        cluster_fence_verdict_t verdict = cluster_fence_slot(&view, from, (int64_t)term);
        if (verdict == CLUSTER_FENCE_AHEAD) {
            LOG_DEBUG("cluster: slot %llx of group %s from %s: of leader revision %llu, newer "
                      "than the leader key read here (%lld): not taken yet",
                      (unsigned long long)value, g->name, from, (unsigned long long)term,
                      (long long)cl->leader_epoch);
            return; /* the leader sends it again at the next ready (resync) */
        }
        if (verdict != CLUSTER_FENCE_TAKE) {
            cl->stats.slots_refused++;
            LOG_WARN("cluster: slot %llx of group %s from %s refused (%s): slot revision %llu, "
                     "current revision %lld (leader %s)", (unsigned long long)value, g->name, from,
                     cluster_fence_name(verdict), (unsigned long long)term,
                     (long long)cl->newest_epoch, cl->leader[0] ? cl->leader : "(none)");
            return;
        }
        node_slot(cl, g, value, iters);
    } else if (cluster_may_grant(cl)) {
        if (!holds_rank(g, from)) {
            /* a node speaks for its own ranks only: a member of the cluster with no rank in
             * the group must not make its slots (its iterations, a slot it claims to be in).
             * Until every rank's node is known, a node not known yet says it again at its
             * next resync (a second later) */
            uint32_t known = 0;
            for (uint32_t i = 0; g->ranks && i < g->world; i++)
                known += g->ranks[i].node[0] != 0;
            if (g->ranks && known == g->world) {
                LOG_WARN("cluster: a ready of group %s from %s, which holds no rank of it: "
                         "refused", g->name, from);
            } else {
                LOG_DEBUG("cluster: a ready of group %s from %s, not (yet) a node of its "
                          "ranks: not taken", g->name, from);
            }
            return;
        }
        leader_ready(cl, from, g, value, iters, pending);
    }
}
