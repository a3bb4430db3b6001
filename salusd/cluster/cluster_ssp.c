/* The staleness bound of SSP groups across nodes (see cluster.h): each node tells the group's
 * other nodes ("ssp" {group, epoch, least, live}) the fewest iterations its own registered
 * ranks of the group have done, whenever that changes and again at every resync (a second);
 * from what the others said it gives the scheduling core the fewest iterations of the ranks
 * elsewhere (sched_core_group_remote_least), so that a local rank more than S iterations
 * ahead of the slowest rank of the whole group waits. A node not heard from yet counts as 0
 * (its ranks may not have started); a node with no live registered rank (host-only ranks, or
 * all ended: it says so, and the record lists it "over") does not count. A node that goes away fails the group (cluster_groups.c). */
#include "cluster-internal.h"

#include "jobs.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int is_ssp(const cluster_group_t *g)
{
    return strncmp(g->sync, "ssp", 3) == 0;
}

static int active(const cluster_group_t *g)
{
    return is_ssp(g) && g->local_id && g->ranks && g->epoch && !g->local_failed && !g->over &&
           !g->dropped;
}

/* The fewest iterations of the live registered local ranks; 0 (and *live 0) when none. */
static uint64_t local_least(cluster_t *cl, const cluster_group_t *g, int *live)
{
    uint64_t least = UINT64_MAX;
    for (uint32_t i = 0; g->local_job && g->local_reg && i < g->world; i++) {
        if (!g->local_reg[i] || !g->local_job[i])
            continue;
        job_t *job = registry_find(cl->d->registry, g->local_job[i]);
        if (job && job->runtime) {
            uint64_t n = jobs_iterations(job);
            least = n < least ? n : least;
        }
    }
    *live = least != UINT64_MAX;
    return *live ? least : 0;
}

/* 1 when node holds a rank of g (as the record says) */
static int holds_rank(const cluster_group_t *g, const char *node)
{
    for (uint32_t i = 0; g->ranks && i < g->world; i++)
        if (strcmp(g->ranks[i].node, node) == 0)
            return 1;
    return 0;
}

/* 1 when node wrote into g's record that every rank of it there ended */
static int node_over(const cluster_group_t *g, const char *node)
{
    for (uint32_t i = 0; i < g->nodes_over_count && i < CLUSTER_GROUP_MAX_NODES; i++)
        if (strcmp(g->nodes_over[i], node) == 0)
            return 1;
    return 0;
}

/* The i-th rank's node when it is another node and the first rank of it (each node once). */
static const char *other_node(const cluster_t *cl, const cluster_group_t *g, uint32_t i)
{
    const char *node = g->ranks[i].node;
    if (!node[0] || strcmp(node, cl->node) == 0)
        return NULL;
    for (uint32_t j = 0; j < i; j++)
        if (strcmp(g->ranks[j].node, node) == 0)
            return NULL;
    return node;
}

static cluster_ssp_node_t *entry_of(cluster_group_t *g, const char *node, int add)
{
    for (uint32_t i = 0; i < g->ssp_count; i++)
        if (strcmp(g->ssp[i].node, node) == 0)
            return &g->ssp[i];
    if (!add || g->ssp_count >= CLUSTER_GROUP_MAX_NODES)
        return NULL;
    if (!g->ssp && !(g->ssp = calloc(CLUSTER_GROUP_MAX_NODES, sizeof(*g->ssp))))
        return NULL;
    cluster_ssp_node_t *e = &g->ssp[g->ssp_count++];
    memset(e, 0, sizeof(*e));
    snprintf(e->node, sizeof(e->node), "%s", node);
    return e;
}

/* Gives the core the fewest iterations of the ranks on the other nodes when it changed. */
static void give_remote(cluster_t *cl, cluster_group_t *g)
{
    if (!g->released)
        return; /* (the core admits none of its ranks before) */
    uint64_t least = UINT64_MAX;
    for (uint32_t i = 0; i < g->world; i++) {
        const char *node = g->ranks[i].node;
        if (!node[0]) {
            least = 0; /* a rank not submitted yet */
            continue;
        }
        if (!other_node(cl, g, i) || node_over(g, node))
            continue;
        const cluster_ssp_node_t *e = entry_of(g, node, 0);
        if (!e)
            least = 0; /* not heard from yet */
        else if (e->live && e->least < least)
            least = e->least;
    }
    if (g->ssp_given_set && g->ssp_given == least)
        return;
    int rc = jobs_group_remote_least(cl->d, g->local_id, least);
    if (rc < 0) { /* no local rank registered yet (-ENOENT): given again later */
        g->ssp_given_set = 0;
        if (rc != -ENOENT)
            LOG_DEBUG("cluster: group %s: the others' least iterations %llu not taken (%s)",
                      g->name, (unsigned long long)least, strerror(-rc));
        return;
    }
    g->ssp_given = least;
    g->ssp_given_set = 1;
}

static void send_count(cluster_t *cl, cluster_group_t *g, uint64_t least, int live)
{
    g->ssp_sent = least;
    g->ssp_sent_live = live;
    g->ssp_sent_set = 1;
    for (uint32_t i = 0; i < g->world; i++) {
        const char *node = other_node(cl, g, i);
        if (!node)
            continue;
        proto_enc_t enc;
        proto_enc_init(&enc);
        proto_enc_begin(&enc, PROTO_REQUEST, 0, "ssp", 4);
        proto_pack_kv_str(&enc.pk, "group", g->key);
        proto_pack_kv_uint(&enc.pk, "epoch", (uint64_t)g->epoch);
        proto_pack_kv_uint(&enc.pk, "least", least);
        proto_pack_kv_bool(&enc.pk, "live", live);
        proto_enc_finish(&enc);
        if (links_send(cl->links, node, &enc) == 0)
            cl->stats.messages_sent++;
        else
            LOG_DEBUG("cluster: ssp count of group %s to %s not sent (link down): sent again "
                      "at the next resync", g->name, node);
        proto_enc_destroy(&enc);
    }
}

/* Tells g's other nodes this node's least count (always, or only when it changed). */
static void tell(cluster_t *cl, cluster_group_t *g, int always)
{
    int live;
    uint64_t least = local_least(cl, g, &live);
    if (always || !g->ssp_sent_set || g->ssp_sent != least || g->ssp_sent_live != live)
        send_count(cl, g, least, live);
}

void cluster_ssp_over(cluster_t *cl, cluster_group_t *g)
{
    if (is_ssp(g) && g->ranks && g->epoch && !g->dropped)
        send_count(cl, g, 0, 0); /* (also in the record's "over", read by every node) */
}

void cluster_ssp_update(cluster_t *cl, cluster_group_t *g)
{
    if (!active(g))
        return;
    tell(cl, g, 0);
    give_remote(cl, g);
}

void cluster_ssp_resync(cluster_t *cl)
{
    for (cluster_group_t *g = cl->groups; g; g = g->next) {
        if (!active(g))
            continue;
        tell(cl, g, 1);
        g->ssp_given_set = 0; /* (the core's group may be a new one: given again) */
        give_remote(cl, g);
    }
}

void cluster_ssp_iterations(salusd_t *d, uint64_t group_id)
{
    cluster_t *cl = cluster_of(d);
    cluster_group_t *g = cl ? cluster_group_by_local(cl, group_id) : NULL;
    if (g)
        cluster_ssp_update(cl, g);
}

void cluster_ssp_message(cluster_t *cl, const char *from, const proto_msg_t *msg)
{
    char key[sizeof(((cluster_group_t *)0)->key)];
    uint64_t epoch = 0, least = 0;
    int live = 0;
    if (proto_get_str_copy(&msg->body, "group", key, sizeof(key)) < 0 ||
        proto_get_uint(&msg->body, "epoch", &epoch) < 0 ||
        proto_get_uint(&msg->body, "least", &least) < 0 ||
        proto_get_bool(&msg->body, "live", &live) < 0) {
        LOG_WARN("cluster: a malformed message 'ssp' from %s: ignored", from);
        return;
    }
    cluster_group_t *g = cluster_group_by_key(cl, key);
    if (!g || !g->epoch || (uint64_t)g->epoch != epoch || !g->ranks) {
        LOG_DEBUG("cluster: ssp of group %s (epoch %llu) from %s: not known here (yet)", key,
                  (unsigned long long)epoch, from);
        return; /* said again at the sender's next resync */
    }
    if (!is_ssp(g)) {
        LOG_WARN("cluster: an ssp count of group %s from %s, a group that syncs %s: refused",
                 g->name, from, g->sync);
        return;
    }
    if (!holds_rank(g, from)) { /* a node speaks for its own ranks only */
        LOG_WARN("cluster: an ssp count of group %s from %s, which holds no rank of it: refused",
                 g->name, from);
        return;
    }
    cluster_ssp_node_t *e = entry_of(g, from, 1);
    if (!e) {
        LOG_WARN("cluster: an ssp count of group %s from %s: no room to keep it (out of memory)",
                 g->name, from);
        return;
    }
    if (live && e->live && least < e->least)
        LOG_DEBUG("cluster: group %s: %s's least iterations went back from %llu to %llu (a rank "
                  "joined)", g->name, from, (unsigned long long)e->least,
                  (unsigned long long)least);
    e->least = least;
    e->live = live;
    if (active(g))
        give_remote(cl, g);
}
