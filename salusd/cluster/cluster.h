/* Subsystem cluster/ (libsalusd-cluster): etcd's gateway, the authenticated daemon links and
 * their keys, membership, lease and leader, group records, gang slots. Calls only jobs/,
 * sched/, base/ and the pure modules; hears the jobs through cluster_jobs_observer; speaks
 * upward only through the one cluster_observer_t the parameter servers register.
 *
 * The cluster role: daemons on several nodes run groups whose ranks span them (salusd
 * --cluster etcd://HOST:PORT[,...]).
 *
 * What must be agreed lives in a real etcd (etcd.h), under --cluster-prefix P:
 *   P/members/NODE   {"addr": "ADDR:PORT", "pid": N}, attached to the node's lease
 *                    (--cluster-lease-ttl-s, default 5; kept alive every TTL/3; its id kept
 *                    in --state-dir, so that a daemon restarted within the TTL keeps it)
 *   P/leader         {"node": NODE}, attached to the leader's lease, created by a
 *                    transaction only when absent (the election): the leader orders every
 *                    gang slot of the cluster; the key's create revision is its epoch, the
 *                    high half of every slot seq it issues, so that a new leader's slots
 *                    follow the old one's
 *   P/groups/UID/NAME one record per group: world, sync, share_gpus, its ranks (node, job,
 *                    registered), and failed (why) once it failed; written with
 *                    compare-and-swap transactions on the key's mod revision; its create
 *                    revision is the group's epoch (a rerun of a name is another group)
 * and every daemon watches P/members, P/leader and P/groups.
 *
 * A group's life across nodes: each node adds its ranks to the record as they are submitted
 * (world, sync, share_gpus checked against the record; a rank taken on another node fails
 * the local one), marks each registered when its program registers; when every rank of the
 * record is submitted (its node named) every node releases its local ranks to the scheduling
 * core (sched_core_group_release), which admits the registered ones all or nothing on this
 * node; the others are host-only (groups.h) until they register, then placed as late ranks.
 * Once a node has admitted all its registered ranks it tells the leader it is ready; when every
 * node of the group with a registered rank is, the leader issues the group's next slot (the
 * group ready longest first; a node of host-only ranks only gets none; a late rank's node
 * joins the slot in progress, and no later slot goes to a node where a group with an open
 * slot has a rank outside it: cluster_slots.c) (a message to each node over the daemon links:
 * a slot costs a message, not an etcd transaction); each node serves slots in the order it
 * receives them (one global order) and reports ready again when the slot is over here
 * (SLOT_DONE).
 *
 * Failure (README: the failure table): a rank that ends badly fails its group on its node
 * (groups.c) and in the record; every other node sees the record and ends its ranks. A node
 * whose lease expires (gone, cut off) is deleted from P/members by etcd: every node fails the
 * groups with ranks there. A node that cannot reach etcd keeps its slots until its lease
 * would have expired, then fails its cluster groups itself. Links between daemons are
 * authenticated with the cluster key (links.h); a broken link is dialed again, and a peer
 * that stays away loses its lease.
 *
 * Single-threaded: all on the daemon's event loop; etcd's and the links' I/O never block it. */
#ifndef SALUS_SALUSD_CLUSTER_H
#define SALUS_SALUSD_CLUSTER_H

#include "daemon.h"
#include "jobs_observer.h"

#define CLUSTER_MAX_MEMBERS 256

/* The daemon's cluster role (NULL: a single node). */
static inline struct cluster_s *cluster_of(const salusd_t *d) { return d->cluster; }

/* Joins the cluster when --cluster is set (else does nothing, 0): reads the key, starts the
 * links, and waits (running the loop, before the daemon serves) for etcd to grant or renew
 * the lease and list the members: at most a few seconds. 0, or -1 with the reason logged
 * ("etcd unreachable at ...: ..."). */
int cluster_start(salusd_t *d);
/* Leaves: revokes nothing (a restart within the TTL keeps the lease), closes everything. */
void cluster_stop(salusd_t *d);

/* How the cluster speaks upward: the observer table that the parameter servers' part of the
 * cluster role registers when it starts (ps_cluster.c: cluster_observe; NULL before and
 * after), so that cluster*.c include and call nothing of it. Delivered at once. */
struct cluster_s;
struct msgpack_packer;
typedef struct cluster_observer_s {
    void (*link_up)(struct cluster_s *cl, const char *node);   /* the link we dialed is up */
    void (*message)(struct cluster_s *cl, const char *from, const proto_msg_t *msg); /* "ps_*" */
    /* node left (its member key deleted) or its link stayed down past the TTL */
    void (*node_gone)(struct cluster_s *cl, const char *node, const char *how);
    void (*pack_peers)(struct cluster_s *cl, struct msgpack_packer *pk); /* an array */
    /* a group record over everywhere is deleted: its ring records go */
    void (*ring_forget)(struct cluster_s *cl, uint32_t uid, const char *name, int64_t epoch);
    void (*free)(struct cluster_s *cl); /* cluster_stop, after etcd is gone */
} cluster_observer_t;

/* Registers obs (NULL: none) and its state (cluster_observer_state); one table. */
void cluster_observe(struct cluster_s *cl, const cluster_observer_t *obs, void *state);

/* What the observer (the parameter servers' part, ps_cluster*.c) reads of the cluster: the
 * cluster's own books stay in cluster-internal.h. */
typedef struct cluster_s cluster_t;
struct etcd_s;
struct links_s;
void *cluster_observer_state(const cluster_t *cl); /* NULL: none registered */
struct etcd_s *cluster_etcd(const cluster_t *cl);   /* the cluster's etcd gateway (etcd.h) */
struct links_s *cluster_links(const cluster_t *cl); /* the daemon links (links.h) */
const char *cluster_node(const cluster_t *cl);      /* this node's name */
const char *cluster_prefix(const cluster_t *cl);    /* --cluster-prefix: the keys' root */
/* the lease has expired (or would have): this node is out of the cluster until it is back */
int cluster_lease_lost(const cluster_t *cl);
int cluster_members_read(const cluster_t *cl);      /* the first listing of members arrived */
int cluster_is_member(const cluster_t *cl, const char *node);
/* The members now (in the order of the listing): how many, and the name of member i. */
uint32_t cluster_member_count(const cluster_t *cl);
const char *cluster_member_node(const cluster_t *cl, uint32_t i);
/* The UCX messages' master key (32 bytes, ps_net_auth.h). */
const uint8_t *cluster_ps_net_master(const cluster_t *cl);
/* Counted in the cluster's samples (cluster_sample_t): a message sent over a link, an error
 * answered by etcd. */
void cluster_count_message_sent(cluster_t *cl);
void cluster_count_etcd_error(cluster_t *cl);
/* The epoch (its record's create revision) of group uid/name as this node knows it; 0 when
 * no record of it was seen. */
int64_t cluster_group_epoch(cluster_t *cl, uint32_t uid, const char *name);
/* The nodes of local group group_id's record (groups.c's id), sorted by name, up to max,
 * each with ranks[i], its number of ranks; their count (0: no record yet). The names stay
 * valid until the record changes. */
uint32_t cluster_group_rank_nodes(cluster_t *cl, uint64_t group_id, const char **nodes,
                                  uint32_t *ranks, uint32_t max);
/* Rank rank of local group group_id, when it runs on this node (named there in the record,
 * or submitted here): its index among the group's ranks here; -1 when it is not here or the
 * group is unknown. */
int cluster_group_local_index(cluster_t *cl, uint64_t group_id, uint32_t rank);

/* What the cluster hears of the jobs subsystem: cluster_jobs_observer (main registers it),
 * each entry a no-op without a cluster. */
extern const jobs_observer_t cluster_jobs_observer;
/* A rank of local group group_id was submitted (groups_join): it goes into the record. */
void cluster_rank_submitted(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id);
/* A rank's program registered (its registration now waits for the release). */
void cluster_rank_registered(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id);
/* A rank was admitted on this node. */
void cluster_rank_admitted(salusd_t *d, uint64_t group_id);
/* The local group failed (failure: why) or ended (all its local ranks over). */
void cluster_group_failed(salusd_t *d, uint64_t group_id, const char *failure);
void cluster_group_over(salusd_t *d, uint64_t group_id);
/* The core's SLOT_DONE (a jobs event). */
void cluster_slot_done(salusd_t *d, uint64_t group_id, uint64_t seq);

/* For salusctl status (a map value) and groups (a rank's node; NULL: unknown). */
struct msgpack_packer;
void cluster_pack_status(salusd_t *d, msgpack_packer *pk);
const char *cluster_rank_node(const salusd_t *d, uint64_t group_id, uint32_t rank);

/* For /metrics. */
typedef struct cluster_sample_s {
    int member;                 /* 1: in the cluster with a live lease */
    uint32_t members;
    int leader;                 /* this node leads */
    uint64_t links_up, links_refused, links_frames_rejected;
    uint64_t messages_sent, messages_received;
    uint64_t slots_issued;      /* as leader */
    uint64_t slots_served;      /* on this node */
    uint64_t slots_refused;     /* received and refused: of a former leader's term, or from a
                                 * node that does not lead */
    uint64_t groups_failed_rank, groups_failed_node, groups_failed_etcd;
    uint64_t etcd_errors;
    /* what this node asked of etcd (etcd.h's etcd_stats_t): keepalives, other lease requests,
     * ranges, writes, watch streams opened, watch events received, transactions whose
     * compare failed */
    uint64_t etcd_keepalives, etcd_leases, etcd_ranges, etcd_writes;
    uint64_t etcd_watch_streams, etcd_watch_events, etcd_txns_failed;
} cluster_sample_t;
int cluster_sample(const salusd_t *d, cluster_sample_t *sample); /* -ENOENT: no cluster */

#endif
