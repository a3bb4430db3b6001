/* ps_net's insides, shared by ps_net.c (context, worker, progress, dispatch, destroy),
 * ps_net_peers.c (peers, endpoints, sends) and ps_net_recv.c (the active-message handler and
 * the per-peer receive queues).
 *
 * Nothing the caller gives us a callback for runs inside UCX's own callbacks: those only move
 * objects to queues and activate the dispatch event; the dispatch event (an ordinary libevent
 * callback on the daemon's loop) calls ps_net_sent_fn and ps_net_recv_fn. So a callback of the
 * caller may send, add or remove peers freely, and ps_net_send never calls `sent` itself. */
#ifndef SALUS_SALUSD_PS_NET_INTERNAL_H
#define SALUS_SALUSD_PS_NET_INTERNAL_H

#include "log_limit.h"
#include "ps_net.h"
#include "ps_net_auth.h"

#include <stdint.h>
#include <ucp/api/ucp.h>

struct event;

/* The header ps_net puts before the caller's header in the UCP AM header, little-endian:
 * magic u32, version u16, caller header length u16, sender name (NUL-padded), the receiver's
 * token for the sender u64. */
#define PS_NET_WIRE_MAGIC 0x314e5350u /* "PSN1" */
#define PS_NET_WIRE_VERSION 1
#define PS_NET_WIRE_FIXED (4 + 2 + 2 + PS_NET_NODE_BYTES + 8)
/* With integrity on (ps_net_set_integrity): version 2, and after the token the message's
 * number u64 and its tag (computed with the tag's bytes zero). */
#define PS_NET_WIRE_VERSION_AUTH 2
#define PS_NET_WIRE_SEQ_AT PS_NET_WIRE_FIXED
#define PS_NET_WIRE_TAG_AT (PS_NET_WIRE_FIXED + 8)
#define PS_NET_WIRE_AUTH_EXTRA (8 + PS_NET_AUTH_TAG_BYTES)
#define PS_NET_AM_ID 0x5053 /* our one active-message id */
#define PS_NET_PREV_TOKENS 8 /* a peer's receive tokens before the current one still taken */

typedef struct ps_net_peer_s ps_net_peer_t;

/* One accepted send, from ps_net_send until its `sent` callback. */
typedef struct ps_net_send_s {
    struct ps_net_send_s *prev, *next; /* net->sends (in UCX) or net->done (awaiting `sent`) */
    ps_net_t *net;
    ps_net_peer_t *peer;               /* NULL once the peer was removed */
    void *request;                     /* UCX's, while it runs */
    int forced;                        /* the status to report whatever UCX says (0: none) */
    int status;
    size_t bytes;
    ps_net_sent_fn sent;
    void *ctx;
    size_t wire_len;
    uint8_t wire[]; /* our header + the caller's, valid until UCX completes */
} ps_net_send_t;

/* One received message, from UCX's callback until it is delivered (in order, per peer). */
typedef struct ps_net_recv_s {
    struct ps_net_recv_s *next;          /* the peer's queue */
    struct ps_net_recv_s *iprev, *inext; /* net->receiving (rendezvous still arriving) */
    ps_net_t *net;
    ps_net_peer_t *peer;                 /* NULL: orphaned (its peer went), freed on completion */
    void *request;                       /* UCX's, while the rendezvous data arrives */
    int ready, failed;
    void *ucx_data;                      /* eager data UCX keeps for us (ucp_am_data_release) */
    void *buffer;                        /* our copy or the rendezvous buffer (free) */
    size_t payload_len;
    size_t header_len;     /* the caller's, at wire + header_at */
    size_t header_at;
    size_t wire_len;
    uint64_t token;        /* integrity on: the token and number it came with */
    uint64_t seq;
    uint8_t wire[];        /* ps_net's header (its tag kept) and the caller's */
} ps_net_recv_t;

struct ps_net_peer_s {
    ps_net_t *net;
    char node[PS_NET_NODE_BYTES];
    ucp_ep_h ep;
    uint64_t send_token, recv_token;
    /* the ones before changes of tokens, newest first (0: none): the peer's messages sent
     * before it heard of the new one still count, also across several changes in a row (a
     * link that drops and comes back twice while a message is on its way) */
    uint64_t prev_recv_token[PS_NET_PREV_TOKENS];
    void *addr;               /* its worker address, as added */
    size_t addr_len;
    int failed;       /* the endpoint reported an error: sends refused until added again */
    int close_needed; /* failed, its endpoint still to be closed (from dispatch) */
    ps_net_recv_t *recv_head, *recv_tail;
    /* integrity on: the keys of our messages to it and of its to us (prev: its token before) */
    ps_net_auth_t *send_auth, *recv_auth, *prev_recv_auth[PS_NET_PREV_TOKENS];
    uint64_t recv_seq; /* the number of its last message taken */
};

struct ps_net_s {
    struct event_base *base;
    char self[PS_NET_NODE_BYTES];
    ps_net_recv_fn recv;
    void *ctx;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    struct event *wake;     /* the worker's event fd */
    struct event *dispatch; /* activated to run the callbacks (never from inside UCX) */
    struct event *resume;   /* progress again after giving the loop its turn */
    int destroying;
    ps_net_peer_t *peers[PS_NET_MAX_PEERS];
    ps_net_send_t *sends;              /* in UCX */
    ps_net_send_t *done, *done_tail;   /* completed, `sent` not called yet */
    ps_net_recv_t *receiving;          /* rendezvous receives in UCX */
    unsigned closing;                  /* endpoint close requests not completed yet */
    ps_net_stats_t stats;
    int integrity;
    uint8_t master[PS_NET_AUTH_KEY_BYTES];
    uint64_t auth_seq;                 /* the last number given to a message sent */
    salus_log_limit_t forged_log;
};

/* ps_net.c */
void ps_net_kick(ps_net_t *net);      /* run progress soon (after a send) */
void ps_net_schedule(ps_net_t *net);  /* run the dispatch soon */
int ps_net_status_errno(ucs_status_t status);

/* ps_net_peers.c */
ps_net_peer_t *ps_net_find_peer(const ps_net_t *net, const char *node);
/* Detaches the peer's sends (status `why`), closes its endpoint, frees it. */
void ps_net_peer_drop(ps_net_t *net, ps_net_peer_t *peer, int why);
void ps_net_close_failed(ps_net_t *net);
void ps_net_send_finish(ps_net_t *net, ps_net_send_t *send, int status);

/* ps_net_recv.c */
ucs_status_t ps_net_on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param);
void ps_net_recv_free(ps_net_t *net, ps_net_recv_t *r);
void ps_net_peer_discard_recvs(ps_net_t *net, ps_net_peer_t *peer);
void ps_net_deliver(ps_net_t *net);

#endif
