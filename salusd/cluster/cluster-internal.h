/* The cluster role's parts (cluster.c: membership, lease, leader; cluster_groups.c: the
 * group records; cluster_slots.c: the slot order and the messages between daemons). */
#ifndef SALUS_SALUSD_CLUSTER_INTERNAL_H
#define SALUS_SALUSD_CLUSTER_INTERNAL_H

#include "cluster.h"
#include "etcd.h"
#include "launch.h"
#include "links.h"

#include <stdint.h>

struct event;
struct json_object;

typedef struct cluster_member_s {
    char node[LINKS_NODE_BYTES];
    char addr[64];
    uint64_t down_since;         /* its link is down since (0: up) */
    int declared_gone;           /* down longer than the TTL: its groups failed */
} cluster_member_t;

/* What an SSP group's node said of its ranks (cluster_ssp.c). */
typedef struct cluster_ssp_node_s {
    char node[LINKS_NODE_BYTES];
    uint64_t least;              /* the fewest iterations of its live registered ranks */
    int live;                    /* it has a live registered rank */
} cluster_ssp_node_t;

/* What a node knows of one rank of a record. */
typedef struct cluster_rank_s {
    char node[LINKS_NODE_BYTES]; /* "" : not submitted yet */
    uint64_t job;                /* its job id on that node */
    int registered;
} cluster_rank_t;

#define CLUSTER_GROUP_MAX_NODES CLUSTER_MAX_MEMBERS

/* A group as this node knows it: from its record, and its local part (local_id != 0). */
typedef struct cluster_group_s {
    struct cluster_s *cl;
    char key[LAUNCH_GROUP_BYTES + 32]; /* "UID/NAME": the record's key below P/groups/ */
    uint32_t uid;
    char name[LAUNCH_GROUP_BYTES];
    int64_t epoch;               /* the record's create revision (0: no record seen yet) */
    int64_t mod_revision;        /* the record's, for compare-and-swap */
    uint32_t world;
    char sync[16];
    int share_gpus;
    cluster_rank_t *ranks;       /* world entries (NULL until the record is read) */
    int failed;
    char failure[200];
    char nodes_over[CLUSTER_GROUP_MAX_NODES][LINKS_NODE_BYTES]; /* the record's "over" */
    uint32_t nodes_over_count;
    /* this node's part */
    uint64_t local_id;           /* groups.c's id; 0: no local rank */
    uint64_t *local_job;         /* world entries: the job of each local rank (0: not here) */
    uint8_t *local_reg;          /* world entries: registered */
    uint32_t local_ranks, local_registered, local_admitted;
    int local_failed;            /* the local part failed (groups_fail or a rank) */
    char local_failure[200];     /* why, as this node writes it into the record */
    uint32_t local_world;        /* the world the local ranks were declared with */
    int conflict;                /* the record's world is another: this node writes nothing */
    int await_fresh;             /* a new local run waits for a former run's record to go */
    int dropped;                 /* forgotten; freed when its request in flight answers */
    int failure_ours_pending;    /* failure to be written into the record */
    int lost_here;               /* after a restart, the record's ranks here did not come back
                                  * and no local run has it: this node is over for it (so the
                                  * record can go, and a new run of the name can start) */
    int released;
    int over;                    /* every local rank ended */
    int record_gone;             /* over here and the record deleted: kept for what groups shows */
    int write_busy;              /* a transaction on the record is in flight */
    char *written;               /* the value it writes */
    int written_failed;          /* with the failure */
    int write_again;             /* something changed meanwhile: write again after it */
    int read_busy;               /* a read of the record is in flight */
    uint64_t last_seq;           /* the last slot served here (0: none) */
    uint64_t pending_seq;        /* a slot received and not over yet (0: none) */
    uint64_t pending_target;     /* its target, as the leader sent it (0: not known) */
    int ready_sent;              /* admitted here and the leader told so */
    uint64_t wait_since_ns;      /* ready here with no slot since (0: in one, or not ready) */
    uint64_t wait_logged_ns;     /* the watch said last that this node or the slot waits */
    /* the leader's part */
    uint64_t cur_seq;            /* the slot issued last */
    uint64_t cur_target;         /* the iterations each rank has done at its end */
    uint64_t cur_since_ns;       /* it was issued (or learnt from a pending report) then */
    uint64_t max_last;           /* the latest slot a node said it is in (a former leader's) */
    uint64_t round_iters;        /* the most iterations a node reported ready with */
    char (*ready_nodes)[LINKS_NODE_BYTES]; /* the nodes ready for the next slot */
    uint32_t ready_count;
    char (*slot_nodes)[LINKS_NODE_BYTES]; /* the nodes the slot issued last went to (those of
                                  * registered ranks), with the nodes of late ranks that joined it */
    uint32_t slot_node_count;
    uint64_t ready_since_ns;     /* every node its next slot needs is ready since (0: not yet) */
    int held_logged;             /* its slot waits for another group's (said once) */
    /* SSP across nodes (cluster_ssp.c): what the other nodes said, what this one said last,
     * what the core was given last */
    cluster_ssp_node_t *ssp;     /* CLUSTER_GROUP_MAX_NODES entries once one is heard */
    uint32_t ssp_count;
    uint64_t ssp_sent, ssp_given;
    int ssp_sent_live, ssp_sent_set, ssp_given_set;
    struct cluster_group_s *next;
} cluster_group_t;

typedef struct cluster_s {
    salusd_t *d;
    etcd_t *etcd;
    links_t *links;
    char node[LINKS_NODE_BYTES];
    char prefix[128];
    uint8_t ps_net_master[32];   /* the UCX messages' master key (ps_net_auth.h) */
    char etcd_warning[512];      /* etcd is plain HTTP beyond loopback: said at start, status */
    char lease_file[4200];
    int64_t lease_id;
    int64_t ttl_s;
    uint64_t lease_ok_ns;        /* the last time etcd confirmed the lease */
    int lease_lost;              /* the lease has expired (or would have): out of the cluster */
    int relist;                  /* lost it: read everything again when back */
    int listing_busy, put_busy;
    int member_ok;               /* this node's member key is written */
    int64_t member_rev; /* etcd's revision at this lease's grant, then at the member key's
                         * write: a delete of the key at or before it is of a former lease */
    int returns_checked;         /* the restart's survivors were checked (tick) */
    int keepalive_busy;
    uint64_t last_resync_ns, last_grant_ns;
    struct event *tick;          /* keepalive every TTL/3, lease-loss check, retries */
    etcd_watch_t *w_members, *w_leader, *w_groups;
    cluster_member_t members[CLUSTER_MAX_MEMBERS];
    uint32_t member_count;
    int members_read;            /* the first listing arrived */
    char leader[LINKS_NODE_BYTES];
    int64_t leader_epoch;        /* P/leader's create revision */
    int64_t newest_epoch;        /* the newest leader key's create revision seen (fence) */
    uint64_t lease_request_ns;   /* when the keepalive or grant in flight was sent */
    int campaign_busy;
    uint64_t slot_counter;       /* as leader: the low half of the last seq issued */
    int64_t counter_epoch;       /* the term slot_counter counts in */
    int pass_busy, pass_again;   /* the leader's pass over the groups (cluster_slots.c) */
    cluster_group_t *groups;
    /* start-up */
    int start_done, start_error;
    char start_err[512];
    cluster_sample_t stats;
    const cluster_observer_t *observer; /* NULL: the parameter servers are not started */
    void *observer_state;        /* their state (ps_cluster.c) */
} cluster_t;


/* cluster_fence.c: which slots a node takes (a leader that was cut off, by a partition or a
 * pause, may still send some: they must not interleave with its successor's), and whether a
 * leader may grant. Pure. */
typedef enum {
    CLUSTER_FENCE_TAKE,        /* from the leader this node knows, of its term */
    CLUSTER_FENCE_STALE,       /* its term is older than the newest election revision seen
                                * here: refused, logged, counted */
    CLUSTER_FENCE_NOT_LEADER,  /* from a node that is not the leader known here: refused */
    CLUSTER_FENCE_AHEAD,       /* of a newer term than every leader key read here (the
                                * watch is behind: from the known leader or a new one): not
                                * taken, said again at resync */
} cluster_fence_verdict_t;

typedef struct cluster_fence_view_s {
    int64_t newest_revision;   /* the newest leader key's create revision seen (never lowers
                                * until a re-read of the cluster) */
    const char *leader;        /* the leader known now ("" or NULL: none) */
    int64_t leader_revision;   /* its key's create revision */
} cluster_fence_view_t;

/* revision: the sender's term as the slot message says it ("term": the leader key's create
 * revision it leads at; from a daemon that sends none, the seq's high half). A new leader
 * sends a former leader's slot on (a node that missed it); the term is its own. */
cluster_fence_verdict_t cluster_fence_slot(const cluster_fence_view_t *view, const char *from,
                                           int64_t revision);
/* 1 while a lease that etcd confirmed for a request sent at lease_confirmed_ns (the send, not
 * the answer: etcd's TTL ran from no earlier) cannot have expired at now_ns */
int cluster_fence_may_grant(uint64_t now_ns, uint64_t lease_confirmed_ns, uint64_t ttl_ns);
const char *cluster_fence_name(cluster_fence_verdict_t verdict);

/* cluster.c */
int cluster_is_leader(const cluster_t *cl);
/* it leads and its lease cannot have expired yet (cluster_fence_may_grant): it may grant */
int cluster_may_grant(const cluster_t *cl);
/* json helpers */
struct json_object *cluster_json_parse(const char *text, size_t len);
void cluster_key(const cluster_t *cl, char *out, size_t size, const char *part);

/* cluster_groups.c */
cluster_group_t *cluster_group_by_key(cluster_t *cl, const char *key);
cluster_group_t *cluster_group_by_local(cluster_t *cl, uint64_t local_id);
void cluster_groups_event(cluster_t *cl, const etcd_kv_t *kv, int deleted);
/* every group with ranks on node fails (how: "left the cluster (...)", for the message) */
void cluster_groups_node_gone(cluster_t *cl, const char *node, const char *how);
/* after a restart's re-attach: groups whose ranks here did not come back fail */
void cluster_groups_check_returns(cluster_t *cl);
/* after a listing: groups with ranks on nodes that are no members fail */
void cluster_groups_check_members(cluster_t *cl);
/* groups whose local ranks are all admitted and that told the leader nothing yet do */
void cluster_groups_ready_all(cluster_t *cl);
void cluster_groups_lease_lost(cluster_t *cl);
void cluster_groups_free(cluster_t *cl);
void cluster_groups_retry(cluster_t *cl); /* writes that failed, again (the tick) */
/* the distinct nodes of a record (up to max), in rank order; their count */
uint32_t cluster_group_nodes(const cluster_group_t *g, const char **nodes, uint32_t max);
/* node's ranks of g have all ended (the record's "over", or this node's own part) */
int cluster_group_node_over(const cluster_t *cl, const cluster_group_t *g, const char *node);

/* cluster_slots.c */
void cluster_slots_message(cluster_t *cl, const char *from, const proto_msg_t *msg);
/* this node is ready for g's next slot: tells the leader (directly when it leads) */
void cluster_slots_ready(cluster_t *cl, cluster_group_t *g);
/* the leader changed or the link to it came back: every ready state is sent again */
void cluster_slots_resync(cluster_t *cl);
/* the leader forgets g's state (ended, failed) */
void cluster_slots_forget(cluster_t *cl, cluster_group_t *g);
/* the leader: issues the next slot of every group whose nodes are all ready (g's among them),
 * the group ready longest first */
void cluster_slots_check(cluster_t *cl, cluster_group_t *g);
/* the leader: the link to node is (back) up: the slots it may have missed, again */
void cluster_slots_link_up(cluster_t *cl, const char *node);
/* What g waits for, when it has waited limit_ns or more at now_ns (a slot of this leader open
 * that long while a node of it is ready for the next; this node ready that long with no
 * slot): one line into out (the slot, the nodes
 * it is not over on, the nodes counted ready; or the last slot served here and the leader
 * asked); 1 when there is something to say, else 0 (out ""). Pure (reads g and cl). */
int cluster_slots_diagnose(const cluster_t *cl, const cluster_group_t *g, uint64_t now_ns,
                           uint64_t limit_ns, char *out, size_t size);
/* The tick's watchdog: each group that waits that long is logged (a warning, once per
 * limit_ns), so that a wait that does not end says what it waits for */
void cluster_slots_watch(cluster_t *cl, uint64_t now_ns, uint64_t limit_ns);

/* cluster_ssp.c: SSP groups' least iterations between their nodes */
/* g's local counts changed, or a rank registered: the other nodes and the core are told */
void cluster_ssp_update(cluster_t *cl, cluster_group_t *g);
/* every SSP group's count said again (a lost message), the core's value refreshed */
void cluster_ssp_resync(cluster_t *cl);
/* every local rank of g ended: the other nodes are told this node no longer counts */
void cluster_ssp_over(cluster_t *cl, cluster_group_t *g);
/* the jobs observer's rank_iterations */
void cluster_ssp_iterations(salusd_t *d, uint64_t group_id);
/* an "ssp" message from node from */
void cluster_ssp_message(cluster_t *cl, const char *from, const proto_msg_t *msg);

#endif
