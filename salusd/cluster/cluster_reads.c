/* The cluster's state read without effects: a key under the cluster's prefix, a JSON object
 * from etcd's text, membership and leadership, and what cluster.h lets its observer read.
 * Apart from cluster.c so that the files above
 * it (group records, gang slots) link in their unit test without the lease, the watch and
 * the links. */
#include "cluster-internal.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void cluster_key(const cluster_t *cl, char *out, size_t size, const char *part)
{
    snprintf(out, size, "%s/%s", cl->prefix, part);
}

struct json_object *cluster_json_parse(const char *text, size_t len)
{
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    struct json_object *o = json_tokener_parse_ex(tok, text, (int)(len > INT_MAX ? 0 : len));
    if (json_tokener_get_error(tok) != json_tokener_success || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

int cluster_is_member(const cluster_t *cl, const char *node)
{
    for (uint32_t i = 0; i < cl->member_count; i++)
        if (strcmp(cl->members[i].node, node) == 0)
            return 1;
    return 0;
}

int cluster_is_leader(const cluster_t *cl)
{
    return !cl->lease_lost && cl->leader[0] && strcmp(cl->leader, cl->node) == 0;
}

int cluster_may_grant(const cluster_t *cl)
{
    return cluster_is_leader(cl) &&
           cluster_fence_may_grant(salusd_now_ns(), cl->lease_ok_ns,
                                   (uint64_t)cl->ttl_s * 1000000000ull);
}

void *cluster_observer_state(const cluster_t *cl)
{
    return cl->observer_state;
}

etcd_t *cluster_etcd(const cluster_t *cl)
{
    return cl->etcd;
}

links_t *cluster_links(const cluster_t *cl)
{
    return cl->links;
}

const char *cluster_node(const cluster_t *cl)
{
    return cl->node;
}

const char *cluster_prefix(const cluster_t *cl)
{
    return cl->prefix;
}

int cluster_lease_lost(const cluster_t *cl)
{
    return cl->lease_lost;
}

int cluster_members_read(const cluster_t *cl)
{
    return cl->members_read;
}

uint32_t cluster_member_count(const cluster_t *cl)
{
    return cl->member_count;
}

const char *cluster_member_node(const cluster_t *cl, uint32_t i)
{
    return i < cl->member_count ? cl->members[i].node : NULL;
}

const uint8_t *cluster_ps_net_master(const cluster_t *cl)
{
    return cl->ps_net_master;
}

void cluster_count_message_sent(cluster_t *cl)
{
    cl->stats.messages_sent++;
}

void cluster_count_etcd_error(cluster_t *cl)
{
    cl->stats.etcd_errors++;
}

int64_t cluster_group_epoch(cluster_t *cl, uint32_t uid, const char *name)
{
    char key[sizeof(((cluster_group_t *)0)->key)];
    snprintf(key, sizeof(key), "%u/%s", (unsigned)uid, name);
    cluster_group_t *g = cluster_group_by_key(cl, key);
    return g && g->epoch > 0 ? g->epoch : 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint32_t cluster_group_rank_nodes(cluster_t *cl, uint64_t group_id, const char **nodes,
                                  uint32_t *ranks, uint32_t max)
{
    cluster_group_t *g = cluster_group_by_local(cl, group_id);
    if (max == 0 || !g || !g->ranks)
        return 0;
    const char *all[CLUSTER_GROUP_MAX_NODES];
    uint32_t n = cluster_group_nodes(g, all, CLUSTER_GROUP_MAX_NODES);
    qsort(all, n, sizeof(all[0]), name_cmp);
    if (n > max)
        n = max;
    for (uint32_t i = 0; i < n; i++) {
        nodes[i] = all[i];
        ranks[i] = 0;
        for (uint32_t r = 0; r < g->world; r++)
            ranks[i] += strcmp(g->ranks[r].node, all[i]) == 0;
    }
    return n;
}

int cluster_group_local_index(cluster_t *cl, uint64_t group_id, uint32_t rank)
{
    cluster_group_t *g = cluster_group_by_local(cl, group_id);
    if (!g || rank >= g->world)
        return -1;
    int index = 0;
    for (uint32_t r = 0; r <= rank; r++) {
        int here = (g->ranks && strcmp(g->ranks[r].node, cl->node) == 0) ||
                   (g->local_job && g->local_job[r]);
        if (r == rank)
            return here ? index : -1;
        index += here;
    }
    return -1;
}
