/* ps_cluster's parts: the pure pieces (the ring record's JSON, the token exchange:
 * ps_cluster_ring.c), kept apart so that tests/unit/check_ps_cluster.c tests them alone, and
 * the state shared by ps_cluster.c (peers, the net) and ps_cluster_etcd.c (ring records). */
#ifndef SALUS_SALUSD_PS_CLUSTER_INTERNAL_H
#define SALUS_SALUSD_PS_CLUSTER_INTERNAL_H

#include "cluster-internal.h"
#include "ps_cluster.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the ring record: P/ps/UID/GROUP/EPOCH/TABLE -------------------------------------------
 * value {"count": N, "rule": "add", "sync": "bsp", "servers": ["n1", "n2"], "vnodes": 64};
 * the record's epoch is the key's create revision (not in the value). */

#define PS_RING_MAX_VNODES 65536u
#define PS_RING_MAX_COUNT (1ull << 40)

/* Whether rec's fields are sane (count 1..PS_RING_MAX_COUNT, rule and sync of
 * [a-z0-9:.+-], servers a sorted list of distinct node names [A-Za-z0-9._-]{1,63}, vnodes
 * 1..PS_RING_MAX_VNODES). 0 or -EINVAL with err saying which. */
int ps_ring_record_check(const ps_ring_record_t *rec, char *err, size_t err_size);
/* The value for rec (checked first). The length, -EINVAL (err set) or -ENOSPC. */
int ps_ring_record_format(const ps_ring_record_t *rec, char *buf, size_t size, char *err,
                          size_t err_size);
/* Reads a value (len bytes, not NUL-terminated) into rec (epoch left 0), every field checked:
 * 0, or -EINVAL with err saying what is wrong. */
int ps_ring_record_parse(const char *text, size_t len, ps_ring_record_t *rec, char *err,
                         size_t err_size);

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
} ps_cluster_t;

static inline cluster_t *cl_of(const salusd_t *d) { return (cluster_t *)d->cluster; }

static inline ps_cluster_t *ps_of(const salusd_t *d)
{
    cluster_t *cl = cl_of(d);
    return cl ? (ps_cluster_t *)cl->ps : NULL;
}

/* ps_cluster_etcd.c, for ps_cluster.c */
void ps_cluster_forget_epoch(cluster_t *cl, uint32_t uid, const char *name, int64_t epoch);
void ps_cluster_req_free(ring_req_t *r);
/* the requests of daemon d on list go (those in flight are freed by their etcd callback) */
void ps_cluster_reqs_cancel(ring_req_t **list, const salusd_t *d);
/* daemon d's agreements without a cluster go */
void ps_cluster_ring_stop(const salusd_t *d);

#endif
