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
#include "ps_fed.h"
#include "ps_net.h"

struct ps_view_s;

typedef struct ps_cluster_hooks_s {
    /* a message from peer node over ps_net (ps_net_recv_fn's arguments) */
    void (*recv)(void *ctx, const char *node, const void *header, size_t header_len,
                 const void *payload, size_t payload_len);
    /* peer node can no longer be reached (left the cluster, link down past the TTL, UCX
     * endpoint failed): what waits on it must fail */
    void (*peer_down)(void *ctx, const char *node);
    /* peer node is reachable over ps_net now (first time or again) */
    void (*peer_up)(void *ctx, const char *node);
    /* a newer view of a watched table (ps_replicas_watch): its server set
     * changed (fail-over, a server joined or left). Called for each newer view this daemon
     * reads, in increasing view number; never from inside a ps_cluster call. NULL: ignored. */
    void (*view_changed)(void *ctx, uid_t uid, const char *group, uint64_t epoch,
                         const char *table, const struct ps_view_s *view);
    /* (optional) peer node's daemon restarted (a new UCX
     * address: within its lease, so it stays a member) and lost what it held; called after
     * peer_down. NULL: ignored. */
    void (*peer_restarted)(void *ctx, const char *node);
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
    char rule[PS_FED_RULE_BYTES], sync[32]; /* rule: up to 63 characters (a fedavg rule) */
    char servers[1024];        /* "node,node,..." sorted: the ring's members */
    uint32_t vnodes;
    /* the clock the table starts at: 0, or C when it was restored from
     * a checkpoint taken at C ("start" in the record, absent when 0: records without it read
     * as 0), so that every opener's workers and servers start there */
    uint64_t start;
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

/* ---- a table's replica set in etcd -----------------------------------------------------------
 * ps_replicas*.c: ps_replicas.c reads and watches, ps_replicas_etcd.c writes, ps_replicas_rec.c
 * holds the record's JSON and the fail-over's decisions, ps_replicas_ctl.c the ps_servers op.
 * A VIEW is the replica set at one number: the servers in force and R, as one etcd key holds
 * them; "view" means nothing else in salusd.
 *
 * The ring record (above) is the table's identity and first server set; the view is the
 * server set in force now: P/psv/UID/GROUP/EPOCH/TABLE {"servers": ["n1", ...], "replicas": R}
 * (EPOCH: the ring record's epoch, the table's identity; so the group run's views are found
 * through its ring records, and go with them),
 * written with the ring record when the table is created (servers = the record's, R = the
 * table's replica count, 1 .. PS_MAX_REPLICAS, bounded by the server count when placing) and
 * changed only by etcd transactions that compare the key's mod revision, which is the view's
 * number (so two daemons that race to change a view: one wins, the other hears -ESTALE and
 * reads the new view). A shard's replicas in a view: ps_ring_replicas over the view's servers
 * (vnodes as the ring record's), primary first.
 *
 * Who changes a view: (1) fail-over: when a member's lease ends (its key is gone from etcd:
 * the cluster's authoritative failure signal; a link that is merely down does not count), the
 * first live server (by name) of every watched view that holds that member proposes the view
 * without it; the others read the result. (2) re-balancing: `salusctl ps-servers GROUP --add
 * NODE | --remove NODE` (any member's daemon) proposes, for every table of the group, the view
 * with NODE added or removed. Every daemon that watches a table reads each new view (an etcd
 * watch or a poll, at most PS_VIEW_POLL_MS behind) and calls hooks.view_changed. Without a
 * cluster: the view is {self}, number 1, R 1, and never changes. */
#define PS_VIEW_POLL_MS 200
#define PS_VIEW_SERVERS_BYTES 1024

typedef struct ps_view_s {
    uint64_t number;           /* the key's mod revision (1 without a cluster) */
    char servers[PS_VIEW_SERVERS_BYTES]; /* "node,node,..." sorted, distinct */
    uint32_t replicas;         /* R as written (1 .. PS_MAX_REPLICAS) */
} ps_view_t;

/* Starts watching the view of (uid, group, epoch, table) (the table is open here on either
 * side): hooks.view_changed is called with the current view soon (on a later loop turn) and
 * with each newer one. Idempotent per table. 0 or a negative errno. */
int ps_replicas_watch(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                      const char *table);
void ps_replicas_unwatch(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                         const char *table);
/* Writes the first view of a table just agreed (ps_cluster_ring_agree's record): created only
 * when absent (so that every opener may call it; the first wins). done(rc, err, view): the
 * view now in etcd. Without a cluster: {self}, number 1, R 1, on the next loop turn. */
typedef void (*ps_view_done_fn)(void *arg, int rc, const char *err, const ps_view_t *view);
int ps_replicas_create(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                       const char *table, const char *servers, uint32_t replicas,
                       ps_view_done_fn done, void *arg);
/* Proposes that view number `from` be replaced by server set `servers` (sorted, distinct):
 * done(0, view) with the new view, or done(-ESTALE, the view now there) when the number is no
 * longer `from`, or another negative errno (etcd unreachable). 0 or a negative errno. */
int ps_replicas_propose(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                        const char *table, uint64_t from, const char *servers,
                        ps_view_done_fn done, void *arg);
/* A fail-over of this daemon proposes the view of the table without node (its daemon
 * restarted within its lease and lost its state): with --ps-rejoin it is proposed back once
 * it is out of the view and a live member (ps_replicas_rejoin_eval). */
void ps_replicas_left(salusd_t *d, uid_t uid, const char *group, uint64_t epoch,
                      const char *table, const char *node);
/* 1 when node's lease is alive in etcd as far as this daemon last read (a member), else 0;
 * self is always 1. For the service: a server whose lease ended is never waited for. */
int ps_replicas_member_alive(salusd_t *d, const char *node);

/* The ps_servers op of salusctl ps-servers (handlers.c; added after the interface was
 * declared): {group: G, add: NODE | remove: NODE}; the caller's (its uid's) group's tables in
 * etcd each get the view with NODE added or removed (ps_replicas_propose). The reply:
 * {group, epoch, tables: [{table, from, to, servers, note?, error?}]}, or an error (unknown
 * group, NODE not a live member, already in / not in every view, the last server removed,
 * no cluster). A caller that goes away gets no reply (CONN_SLOT_PS_SERVERS). */
void ps_replicas_handle_servers(conn_t *c, const proto_msg_t *msg);

#endif
