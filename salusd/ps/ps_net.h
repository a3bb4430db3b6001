/* The parameter servers' data plane between daemons: UCX (UCP active messages), driven by the
 * daemon's libevent loop (the worker's event fd; nothing blocks).
 *
 * Each daemon has one UCP worker. Its address (ps_net_address) travels to the other members
 * over the authenticated daemon links (links.h), never over UCX itself; a peer is added with
 * the address it sent and two 64-bit tokens drawn fresh by each side and exchanged over the
 * same link: every message carries the receiver's token for the sender, and a message whose
 * token or sender is not a known peer's is dropped and counted (UCX itself authenticates
 * nothing, so only a daemon that passed the link handshake can get a message taken).
 *
 * A message is a header (at most PS_NET_MAX_HEADER bytes, the caller's own format) and an
 * optional payload (any size up to PS_NET_MAX_PAYLOAD; UCX picks eager or rendezvous). Messages
 * to one peer arrive in the order sent. Transports: whatever UCX_TLS allows (tcp in the tests
 * and benchmarks; shared memory and RDMA where UCX finds them).
 *
 * Single-threaded: every call and every callback on the daemon's loop. */
#ifndef SALUS_SALUSD_PS_NET_H
#define SALUS_SALUSD_PS_NET_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

#define PS_NET_MAX_HEADER 1024
#define PS_NET_MAX_PAYLOAD (1ull << 31)
#define PS_NET_MAX_PEERS 256
#define PS_NET_NODE_BYTES 64

typedef struct ps_net_s ps_net_t;

/* A message arrived from peer `node`: header and payload stay valid only during the call. */
typedef void (*ps_net_recv_fn)(void *ctx, const char *node, const void *header,
                               size_t header_len, const void *payload, size_t payload_len);
/* A send finished: 0 when UCX has sent it (the payload buffer may be reused), or a negative
 * errno (the peer was removed, the endpoint failed, the net was destroyed). Called exactly
 * once per accepted send, never from inside ps_net_send. */
typedef void (*ps_net_sent_fn)(void *ctx, int status);

typedef struct ps_net_stats_s {
    uint64_t messages_sent, messages_received;
    uint64_t bytes_sent, bytes_received;   /* headers and payloads */
    uint64_t dropped;                      /* unknown sender or wrong token, malformed */
    uint64_t send_errors;
    uint64_t forged;                       /* of the dropped: integrity on, a tag that did not
                                            * check (altered, replayed, another key) */
} ps_net_stats_t;

/* Creates the UCP context and worker (self: this node's name), registers the worker's event
 * fd with base. 0, or a negative errno with err set ("UCX: ucp_init: ..."). */
int ps_net_create(struct event_base *base, const char *self, ps_net_recv_fn recv, void *ctx,
                  ps_net_t **out, char *err, size_t err_size);
/* Turns integrity on (salusd --ps-net-integrity), before any peer is added: every message
 * then carries a tag (ps_net_auth.h) of a key per (sender, receiver, token) derived from
 * master, and a message whose tag does not check, or whose number is not above the last one
 * taken from its sender, is dropped, counted (forged) and logged (at most 60 lines a minute).
 * Both ends must have it on (a message of the other kind is dropped). 0, -EBUSY (peers are
 * known already), -EINVAL. */
int ps_net_set_integrity(ps_net_t *net, const uint8_t master[32]);
/* NULL ok; pending sends complete with -ECANCELED, their `sent` called from inside destroy (the
 * one exception to "later"). Not from inside ps_net's own callbacks. */
void ps_net_destroy(ps_net_t *net);
/* This worker's address, to send to peers (valid until destroy). */
int ps_net_address(const ps_net_t *net, const void **addr, size_t *len);
/* Adds (or replaces) peer node: its worker address, the token it expects on our messages
 * (send_token) and the token we expect on its (recv_token). 0 or a negative errno. */
int ps_net_add_peer(ps_net_t *net, const char *node, const void *addr, size_t addr_len,
                    uint64_t send_token, uint64_t recv_token);
/* Removes a peer: its pending sends complete with -ECONNRESET. No-op when unknown. */
void ps_net_remove_peer(ps_net_t *net, const char *node);
/* 1 when node is a peer whose endpoint has not failed (a failed one stays known, its sends
 * refused with -ECONNRESET, until it is added again or removed). */
int ps_net_has_peer(const ps_net_t *net, const char *node);
/* Sends header + payload to node (payload may be NULL with len 0; it must stay valid until
 * sent is called). 0 when accepted (sent will be called, later), -ENOENT unknown peer,
 * -EMSGSIZE too big, other negative errno: not accepted (sent is not called). */
int ps_net_send(ps_net_t *net, const char *node, const void *header, size_t header_len,
                const void *payload, size_t payload_len, ps_net_sent_fn sent, void *ctx);
void ps_net_get_stats(const ps_net_t *net, ps_net_stats_t *stats);

#endif
