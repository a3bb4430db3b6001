/* ps_cluster's parts: the pure pieces (the ring record's JSON, the token exchange:
 * ps_cluster_ring.c; the view record, server sets and the fail-over's decisions:
 * ps_replicas_rec.c), kept apart so that tests/unit/check_ps_cluster.c tests them alone,
 * and the state shared by ps_cluster.c (peers, the net), ps_cluster_etcd.c (ring records) and
 * ps_replicas.c (views: create, propose, watch, fail-over; ps_replicas_ctl.c: the
 * ps_servers op). */
#ifndef SALUS_SALUSD_PS_CLUSTER_INTERNAL_H
#define SALUS_SALUSD_PS_CLUSTER_INTERNAL_H

#include "cluster.h"
#include "etcd.h"
#include "launch.h"
#include "links.h"
#include "ps_cluster.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the ring record: P/ps/UID/GROUP/EPOCH/TABLE -------------------------------------------
 * value {"count": N, "rule": "add", "sync": "bsp", "servers": ["n1", "n2"], "vnodes": 64};
 * the record's epoch is the key's create revision (not in the value). */

#define PS_RING_MAX_VNODES 65536u
#define PS_RING_MAX_COUNT (1ull << 40)

/* Whether servers (a NUL-terminated text in cap bytes) is a sorted list of distinct node names
 * [A-Za-z0-9._-]{1,63} separated by single commas, at most PS_MAX_SERVERS. 0 or -EINVAL with
 * err saying what is wrong. */
int ps_cluster_ring_servers_check(const char *servers, size_t cap, char *err, size_t err_size);

/* Whether rec's fields are sane (count 1..PS_RING_MAX_COUNT, rule and sync of
 * [a-z0-9:.+-], servers a sorted list of distinct node names [A-Za-z0-9._-]{1,63}, vnodes
 * 1..PS_RING_MAX_VNODES). 0 or -EINVAL with err saying which. */
int ps_ring_record_check(const ps_ring_record_t *rec, char *err, size_t err_size);
/* The value for rec (checked first). The length, -EINVAL (err set) or -ENOSPC. */
int ps_ring_record_format(const ps_ring_record_t *rec, char *buf, size_t size, char *err,
                          size_t err_size);
/* Whether s (NULL: no) is a name that fits a key part (a group or a table's name): 1 ..
 * cap-1 printable characters, no '/', no space. 1 or 0. */
int ps_key_name_ok(const char *s, size_t cap);
/* A record's value (len bytes, not NUL-terminated, at most 64 KiB) parsed as a JSON object into
 * *o (the caller puts it); whole: nothing may follow the object. 0, bad_rc with err set
 * ("<what> is empty, too long or not text", "<what> is not a JSON object") or -ENOMEM. */
struct json_object;
int ps_json_object_parse(const char *text, size_t len, const char *what, int whole, int bad_rc,
                         struct json_object **o, char *err, size_t err_size);
/* Writes servers ("a,b") at buf + *at as JSON strings ("a","b"; plain names, checked:
 * nothing to escape), *at moved past them. 0, or -ENOSPC (size too small). */
int ps_cluster_ring_servers_to_json(const char *servers, char *buf, size_t size, size_t *at);
/* Reads o's "servers" (a JSON list of node names) into out (cap bytes) as "a,b,c", in the
 * list's order (the caller checks the set: ps_cluster_ring_servers_check). 0, or -1 with err
 * set ("<what>'s servers ..."). Shared by the ring record and the view record. */
int ps_cluster_ring_servers_from_json(struct json_object *o, const char *what, char *out,
                                      size_t cap, char *err, size_t err_size);
/* Reads a value (len bytes, not NUL-terminated) into rec (epoch left 0), every field checked:
 * 0, or -EINVAL with err saying what is wrong. */
int ps_ring_record_parse(const char *text, size_t len, ps_ring_record_t *rec, char *err,
                         size_t err_size);

/* ---- the view record: P/psv/UID/GROUP/EPOCH/TABLE (ps_replicas_rec.c) -----------------
 * value {"servers": ["n1", "n2"], "replicas": 3}; the view's number is the key's mod revision
 * (not in the value). */

/* Whether v's fields are sane (servers: ps_cluster_ring_servers_check; replicas
 * 1..PS_MAX_REPLICAS). 0 or -EINVAL with err saying which. */
int ps_replicas_check(const ps_view_t *v, char *err, size_t err_size);
/* The value for v (checked first). The length, -EINVAL (err set) or -ENOSPC. */
int ps_replicas_format(const ps_view_t *v, char *buf, size_t size, char *err, size_t err_size);
/* Reads a value (len bytes, not NUL-terminated) into v (number left 0), every field checked:
 * 0, or -EPROTO with err saying what is wrong (a record that is not one is never trusted). */
int ps_replicas_parse(const char *text, size_t len, ps_view_t *v, char *err, size_t err_size);

/* Server sets ("a,b,c": sorted, distinct). 1 when node is in servers. */
int ps_replicas_has(const char *servers, const char *node);
/* out = servers with node added (sorted): 0, -EEXIST (already in), -EINVAL (a bad name) or
 * -ENOSPC. */
int ps_replicas_with(const char *servers, const char *node, char *out, size_t size);
/* out = servers without node: 0 (out may be ""), -ENOENT (not in) or -ENOSPC. */
int ps_replicas_without(const char *servers, const char *node, char *out, size_t size);
/* The number of servers in the set. */
uint32_t ps_replicas_count(const char *servers);

/* ---- the fail-over's decisions (pure; ps_replicas.c runs them) -------------------------
 * A watched view that holds servers whose lease ended (alive() says 0) is proposed without
 * them by its first live server by name; after PS_FAILOVER_GRACE_MS with a dead server still
 * in the view (the first live one does not watch it, or cannot reach etcd) every live watcher
 * may propose (the compare-and-swap makes one win). A lost proposal (-ESTALE) is followed by
 * the view now there, judged again; at most PS_FAILOVER_MAX_TRIES proposals for one dead
 * set, then the daemon gives up (logged) until the view changes by another's hand; an etcd
 * error (unreachable) is tried again PS_FAILOVER_RETRY_MS later, for as long as it lasts. */
#define PS_FAILOVER_GRACE_MS 3000
#define PS_FAILOVER_MAX_TRIES 8
#define PS_FAILOVER_RETRY_MS 1000 /* after an etcd error (unreachable): the next try */

typedef int (*ps_alive_fn)(void *ctx, const char *node);

typedef struct ps_replicas_failover_s {
    int busy;                  /* a proposal in flight */
    uint32_t tries;            /* proposals since a dead server was first seen in the view */
    uint64_t dead_since_ns;    /* when the view was first seen holding a dead server (0: no) */
    uint64_t gave_up_number;   /* the view it gave up on (0: none) */
    uint64_t retry_at_ns;      /* after an etcd error: not before then */
} ps_replicas_failover_t;

typedef enum ps_replicas_failover_act_e {
    PS_FAILOVER_NONE = 0,      /* nothing to do now */
    PS_FAILOVER_PROPOSE,       /* propose out (from the view's number) */
    PS_FAILOVER_GIVE_UP,       /* the tries are spent (log it once) */
} ps_replicas_failover_act_t;

/* One look at view v (number > 0) as read now: what this daemon (self) does. out: the view's
 * servers without the dead ones; gone: the dead ones ("n3" or "n3,n5"). */
ps_replicas_failover_act_t ps_replicas_failover_step(ps_replicas_failover_t *f, const ps_view_t *v,
                                                     const char *self, ps_alive_fn alive, void *ctx,
                                                     uint64_t now_ns, char *out, size_t out_size,
                                                     char *gone, size_t gone_size);
/* The proposal's answer (rc 0: it won; -ESTALE: it lost; another: etcd's error). */
void ps_replicas_failover_result(ps_replicas_failover_t *f, int rc, uint64_t now_ns);

/* ---- the token exchange over the links ("ps_hello" {addr, token, have}) --------------------
 * Per member: mine, the token we expect on its messages (sent to it in our last hello;
 * fresh at each link-up of the link we dialed), theirs, the token it expects on ours (from
 * its last hello; 0: none). "have" in a hello: the sender holds a token of the receiver's
 * (theirs != 0); a receiver that holds none of its own yet, or whose peer has none of its,
 * answers with a hello (when its link is up; else its link-up does). Whichever side's link
 * comes up first, and across restarts of either daemon, both sides end with
 * add(send = the other's mine, recv = their own mine). Tokens are never 0. */
typedef struct ps_hello_peer_s {
    uint64_t mine, theirs;
} ps_hello_peer_t;

typedef struct ps_hello_out_s {
    int send;                 /* send a hello {token: send_token, have: send_have} */
    uint64_t send_token;
    int send_have;
    int add;                  /* ps_net_add_peer(send_token = add_send, recv = add_recv) */
    uint64_t add_send, add_recv;
} ps_hello_out_t;

/* The link we dialed to the peer is up (fresh: a new random token, != 0). */
void ps_hello_link_up(ps_hello_peer_t *p, uint64_t fresh, ps_hello_out_t *out);
/* A hello from the peer (token != 0); link_up: our link to it is up now. */
void ps_hello_received(ps_hello_peer_t *p, uint64_t token, int have, int link_up,
                       uint64_t fresh, ps_hello_out_t *out);
/* The peer is down (gone, or its sends failed): it takes a new hello to be a peer again.
 * With link_up, a hello that asks it for one (have 0) goes at once. */
void ps_hello_down(ps_hello_peer_t *p, int link_up, uint64_t fresh, ps_hello_out_t *out);

/* ---- tokens -------------------------------------------------------------------------------- */
/* A token from getrandom (never 0); 0 when none could be drawn. */
uint64_t ps_cluster_token(void);

/* ---- the state of ps_cluster.c and ps_cluster_etcd.c ---------------------------------------- */
#define PS_HELLO_MAX_ADDR 8192
#define RING_RETRY_MS 100
#define RING_WAIT_S 10 /* how long an agreement waits for its group's record to be read */
#define PROBE_MS 500   /* each peer's endpoint is tried this often (an empty message) */

typedef struct ps_peer_s {
    char node[LINKS_NODE_BYTES];
    ps_hello_peer_t tok;
    uint8_t *addr;               /* from its last hello */
    size_t addr_len;
    int added;                   /* a ps_net peer with these: */
    uint64_t added_send, added_recv;
    uint8_t *added_addr;
    size_t added_addr_len;
    int up;                      /* the service was told peer_up (and no peer_down since) */
    uint64_t gen;                /* counts adds and removals: a probe's answer is its gen's */
    int probe_busy;
    int readd;                   /* UCX could not add it: a new exchange at the next probe */
} ps_peer_t;

typedef struct ring_req_s {
    struct ps_cluster_s *ps;     /* NULL: no cluster (answered on the next loop turn) */
    salusd_t *d;
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    char table[PS_NAME_BYTES];
    ps_ring_record_t want;
    char value[4096];            /* want as the record's JSON */
    ps_ring_done_fn done;
    void *arg;
    uint64_t deadline_ns;
    int in_flight;               /* an etcd transaction: its callback frees the request */
    int cancelled;               /* the service stopped: no done */
    struct event *ev;            /* no cluster: the next loop turn */
    struct ring_req_s *next;
} ring_req_t;

/* ---- the views (ps_replicas.c: reads, watches, deliveries; ps_replicas_etcd.c:
 * create, propose, the fail-over) ---------------------------------------------------------- */
#define PS_VIEW_REJOIN_MAX 8
#define PS_VIEW_REJOIN_FORGET_MS 30000 /* a proposal without it not seen within: forgotten */

typedef struct vrejoin_s {  /* a server a fail-over of this daemon took out of a view */
    char node[PS_NET_NODE_BYTES];
    int out;                 /* seen out of the view */
    int busy;                /* its proposal is in flight */
    uint64_t since_ns;       /* recorded at (one never seen out is forgotten) */
} vrejoin_t;

typedef struct vtable_s {   /* a watched table */
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    uint64_t epoch;
    char table[PS_NAME_BYTES];
    ps_view_t seen;          /* the newest view read (number 0: none yet) */
    ps_view_t *queue;        /* read, not handed to view_changed yet (increasing numbers) */
    uint32_t queued, queue_cap;
    ps_replicas_failover_t fo;
    /* servers a fail-over of this daemon took out of the view (lease ended, or restarted
     * within it): proposed back once live members again (--ps-rejoin, ps_replicas_rejoin_eval) */
    vrejoin_t rejoin[PS_VIEW_REJOIN_MAX];
    uint32_t rejoins;
    struct vtable_s *next;
} vtable_t;

typedef struct vgroup_s {   /* a watched group (every run of its name): one etcd watch */
    struct ps_replicas_s *vs;
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    char prefix[600];        /* P/psv/UID/GROUP/ (keys EPOCH/TABLE) */
    etcd_watch_t *w;
    int read_busy, need_read;
    uint32_t tables;
    struct vgroup_s *next;
} vgroup_t;

enum { VREQ_CREATE, VREQ_PROPOSE, VREQ_READ, VREQ_FORGET };

typedef struct vreq_s {     /* an etcd request of this file (or a local answer's turn) */
    struct ps_replicas_s *vs;
    int kind, stage;         /* PROPOSE: 0 the read, 1 the transaction */
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    uint64_t epoch;
    char table[PS_NAME_BYTES];
    char key[600];           /* READ: the group's prefix */
    uint64_t from;
    ps_view_t want;
    char value[PS_VIEW_SERVERS_BYTES + 512];
    ps_view_done_fn done;
    void *arg;
    void (*free_arg)(void *arg); /* when done is never called (stopped): arg's end */
    int finished;            /* done was called (or free_arg) */
    int cancelled;           /* stopped: no done; its callback frees it */
    struct event *ev;        /* no cluster: the next loop turn */
    struct vreq_s *next;
} vreq_t;

typedef struct ps_replicas_s {
    salusd_t *d;
    struct ps_cluster_s *ps; /* NULL: a daemon without a cluster */
    ps_cluster_hooks_t hooks; /* without a cluster (else ps->hooks) */
    void *ctx;
    vtable_t *tables;
    vgroup_t *groups;
    vreq_t *reqs;
    struct event *tick;      /* every PS_VIEW_POLL_MS: reads to retry, the fail-over */
    struct event *deliver;   /* a later loop turn: view_changed */
    struct ps_replicas_s *next; /* local_views */
} ps_replicas_t;


/* ps_replicas.c, for ps_replicas_etcd.c */
vtable_t *ps_replicas_table_find(ps_replicas_t *vs, uid_t uid, const char *group, uint64_t epoch,
                                 const char *table);
/* a view of watched table t read: queued for view_changed when newer than those before */
void ps_replicas_seen(ps_replicas_t *vs, vtable_t *t, const ps_view_t *v);
void ps_replicas_req_unlink(ps_replicas_t *vs, vreq_t *r);
void ps_replicas_req_free(vreq_t *r);
int ps_replicas_args_ok(uid_t uid, const char *group, uint64_t epoch, const char *table);
/* daemon d's views (made when missing); NULL (*rc: why) when its cluster part is not started */
ps_replicas_t *ps_replicas_ready(salusd_t *d, int *rc);
/* ps_replicas_etcd.c, for ps_replicas.c: the fail-over's look at table t's view */
void ps_replicas_failover_eval(ps_replicas_t *vs, vtable_t *t);
/* Records that this daemon proposed the view of t without node (a fail-over), and proposes
 * each such server back once it is out of the view and a live member again (the tick). */
void ps_replicas_rejoin_note(ps_replicas_t *vs, vtable_t *t, const char *node);
void ps_replicas_rejoin_eval(ps_replicas_t *vs, vtable_t *t);

typedef struct ps_cluster_s {
    salusd_t *d;
    cluster_t *cl;
    ps_net_t *net;
    ps_cluster_hooks_t hooks;
    void *ctx;
    int started;
    ps_peer_t *peers;
    uint32_t peer_count, peer_cap;
    ring_req_t *reqs;
    struct event *retry;
    struct event *probe;         /* every PROBE_MS: the endpoints still work */
    struct ps_replicas_s *views;    /* ps_replicas.c's (NULL until a view is asked for) */
} ps_cluster_t;

static inline ps_cluster_t *ps_of(const salusd_t *d)
{
    cluster_t *cl = cluster_of(d);
    return cl ? (ps_cluster_t *)cluster_observer_state(cl) : NULL;
}

/* ps_cluster_etcd.c, for ps_cluster.c */
void ps_cluster_forget_epoch(cluster_t *cl, uint32_t uid, const char *name, int64_t epoch);
void ps_cluster_req_free(ring_req_t *r);
/* the requests of daemon d on list go (those in flight are freed by their etcd callback) */
void ps_cluster_reqs_cancel(ring_req_t **list, const salusd_t *d);
/* daemon d's agreements without a cluster go */
void ps_cluster_ring_stop(const salusd_t *d);

/* ps_replicas*.c, for ps_cluster.c */
/* node's lease ended (its member key is gone): the watched views that hold it fail over */
void ps_replicas_node_gone(ps_cluster_t *ps, const char *node);
/* ps_cluster_stop: watches and requests go (no callback after; those in flight are freed by
 * their etcd callback) */
void ps_replicas_stop(ps_cluster_t *ps);
/* cluster_stop, after etcd is gone: everything freed */
void ps_replicas_free(ps_cluster_t *ps);
/* a daemon without a cluster: the hooks (view_changed) kept; its views and requests go */
int ps_replicas_local_start(salusd_t *d, const ps_cluster_hooks_t *hooks, void *ctx);
void ps_replicas_local_stop(const salusd_t *d);
/* ring_prefix P/ps/UID/NAME/GEPOCH/ (a group run over everywhere): its ring records are read,
 * the views they name deleted, then the records. 0, or a negative errno (nothing done). */
int ps_replicas_forget(ps_cluster_t *ps, uint32_t uid, const char *name,
                       const char *ring_prefix);
/* ps_replicas_ctl.c: daemon d's ps_servers ops go (etcd is gone: no callback comes) */
void ps_replicas_servers_free(const salusd_t *d);

#endif
