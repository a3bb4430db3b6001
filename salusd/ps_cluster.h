/* What the parameter-server service (ps_service.c) needs from the cluster role, and nothing
 * more: who this node is, which nodes run a group's ranks, the agreed ring of a table (etcd),
 * and the UCX data plane to the other members (ps_net.h), whose peers come and go with the
 * authenticated daemon links. On a daemon without --cluster every call answers for a single
 * node: self is "local", a group's nodes are {self}, a ring is agreed at once (epoch 1), and
 * there is no net.
 *
 * UCX peers: when the link this daemon dialed to a member comes up, it sends that member its
 * UCX worker address and a fresh token over the link (op "ps_hello"); a member's ps_hello adds
 * it as a ps_net peer (ps_net_add_peer) with the tokens of both sides; a member that leaves
 * (lease gone) or whose link is down longer than the lease TTL is removed (ps_net_remove_peer),
 * and ps_cluster tells the service (peer_down) so that requests waiting on it fail instead of
 * hanging. So is a peer
 * whose UCX endpoint failed (each peer gets an empty message every 500 ms, which its
 * ps_cluster drops: a failed endpoint refuses it) or whose daemon restarted (its hello brings
 * another worker address): down until a new exchange over the link, asked for at once. */
#ifndef SALUS_SALUSD_PS_CLUSTER_H
#define SALUS_SALUSD_PS_CLUSTER_H

#include "daemon.h"
#include "ps_core.h"
#include "ps_net.h"

typedef struct ps_cluster_hooks_s {
    /* a message from peer node over ps_net (ps_net_recv_fn's arguments) */
    void (*recv)(void *ctx, const char *node, const void *header, size_t header_len,
                 const void *payload, size_t payload_len);
    /* peer node can no longer be reached (left the cluster, link down past the TTL, UCX
     * endpoint failed): what waits on it must fail */
    void (*peer_down)(void *ctx, const char *node);
    /* peer node is reachable over ps_net now (first time or again) */
    void (*peer_up)(void *ctx, const char *node);
} ps_cluster_hooks_t;

/* Started by ps_start (after cluster_start): creates the net when the daemon is a cluster
 * member. 0 or -1 (logged). */
int ps_cluster_start(salusd_t *d, const ps_cluster_hooks_t *hooks, void *ctx);
void ps_cluster_stop(salusd_t *d);

/* This node's name ("local" without a cluster). */
const char *ps_cluster_self(const salusd_t *d);
/* The net (NULL without a cluster). */
ps_net_t *ps_cluster_net(salusd_t *d);
/* 1 when node is this daemon, or a peer reachable over the net now. */
int ps_cluster_reachable(salusd_t *d, const char *node);
/* A send to node completed with status < 0 (the service's ps_net_sent_fn): an endpoint
 * failure (any status but -ECANCELED and -ECONNRESET, which removal and destroy give) makes
 * the peer down (peer_down is called before this returns) until a new exchange over the link
 * (asked for at once when the link is up). Added after the interface was declared; a
 * service that never calls it still sees a dead node go down with its link (TTL) or its
 * lease. */
void ps_cluster_send_failed(salusd_t *d, const char *node, int status);

/* The distinct nodes that run ranks of local group group_id (sorted by name; self included
 * when it runs one), and for each the number of the group's ranks there; their count (0:
 * unknown group). Without a cluster: {self: the group's world}. */
uint32_t ps_cluster_group_nodes(salusd_t *d, uint64_t group_id, const char **nodes,
                                uint32_t *ranks, uint32_t max);
/* The index of `rank` among the group's ranks on this node (0-based, rank order), or -1. */
int ps_cluster_local_index(salusd_t *d, uint64_t group_id, uint32_t rank);

/* The agreement on a table: what the first opener wrote under P/ps/UID/GROUP/EPOCH/TABLE
 * (EPOCH: the group record's create revision, so that a rerun of the group's name never finds
 * an old run's ring; a transaction that creates the key only when absent), or what it finds
 * there: {"count", "rule", "sync", "servers": [...], "vnodes"}, every field checked (a bad
 * record is an error, -EPROTO). The group's records go when its cluster record is deleted
 * (the last node over). */
typedef struct ps_ring_record_s {
    uint64_t epoch;            /* the key's create revision (1 without a cluster) */
    uint64_t count;
    char rule[32], sync[32];
    char servers[1024];        /* "node,node,..." sorted: the ring's members */
    uint32_t vnodes;
} ps_ring_record_t;
/* Agrees on the record for (uid, group, table): proposes *want (servers sorted), calls done
 * with rc 0 and the agreed record (the proposal, or the one already there: the caller compares
 * it with its spec), or rc < 0 and err (etcd unreachable, ...). Returns 0 (done will be called
 * once, later) or a negative errno. Without a cluster: done is called on the next loop turn
 * with the proposal and epoch 1. */
typedef void (*ps_ring_done_fn)(void *arg, int rc, const char *err, const ps_ring_record_t *rec);
int ps_cluster_ring_agree(salusd_t *d, uid_t uid, const char *group, const char *table,
                          const ps_ring_record_t *want, ps_ring_done_fn done, void *arg);
/* The group's run is over everywhere: its records go (best effort). */
void ps_cluster_ring_forget(salusd_t *d, uid_t uid, const char *group);

#endif
