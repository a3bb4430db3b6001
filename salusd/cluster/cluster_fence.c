/* The fence between leaders (see cluster-internal.h): which slots a node takes, and whether a
 * leader may still grant one. Pure: the callers pass what they know and act on the verdict. */
#include "cluster-internal.h"

#include <string.h>

cluster_fence_verdict_t cluster_fence_slot(const cluster_fence_view_t *view, const char *from,
                                           int64_t revision)
{
    if (revision < view->newest_revision)
        return CLUSTER_FENCE_STALE; /* a former term's: its leader was cut off */
    if (revision > view->newest_revision)
        return CLUSTER_FENCE_AHEAD; /* a new leader whose key the watch has not brought yet
                                     * (its slots may come first): said again at resync */
    if (!view->leader || !view->leader[0] || strcmp(from, view->leader) != 0)
        return CLUSTER_FENCE_NOT_LEADER;
    if (revision != view->leader_revision)
        return CLUSTER_FENCE_AHEAD; /* a term whose leader key is not read here yet */
    return CLUSTER_FENCE_TAKE;
}

int cluster_fence_may_grant(uint64_t now_ns, uint64_t lease_confirmed_ns, uint64_t ttl_ns)
{
    return lease_confirmed_ns && now_ns >= lease_confirmed_ns &&
           now_ns - lease_confirmed_ns < ttl_ns;
}

const char *cluster_fence_name(cluster_fence_verdict_t verdict)
{
    switch (verdict) {
    case CLUSTER_FENCE_TAKE: return "taken";
    case CLUSTER_FENCE_STALE: return "of a former leader's term";
    case CLUSTER_FENCE_NOT_LEADER: return "not from the leader";
    case CLUSTER_FENCE_AHEAD: return "of a term not read here yet";
    }
    return "?";
}
