/* Links between daemons of one cluster: TCP, the protocol's frames (common/proto.h: a 4-byte
 * length and one msgpack value, decoded by proto_decode, the same checks as on the local
 * socket), mutually authenticated by a shared cluster key that never crosses the wire, every
 * frame after the handshake carrying a tag of that connection's session key.
 *
 * Handshake (each step with a deadline, handshake_timeout_ms, else the connection closes):
 *   dialer   -> PROTO_HELLO  op "link"  {version, frames, node, nonce}     nonce: 32 random
 *   acceptor -> PROTO_REPLY  op "challenge" {node, nonce, mac}                  bytes (getrandom)
 *               mac = HMAC-SHA256(key, "salus-link-acceptor" | dialer nonce | acceptor nonce |
 *                                  acceptor node | dialer node)
 *   dialer   -> PROTO_REQUEST op "prove"   {mac}
 *               mac = HMAC-SHA256(key, "salus-link-dialer" | acceptor nonce | dialer nonce |
 *                                  dialer node | acceptor node)
 *   acceptor -> PROTO_REPLY  op "welcome"  {mac}
 *               session key S = HMAC-SHA256(key, "salus-link-frames" | dialer nonce |
 *                                  acceptor nonce | dialer node | acceptor node)
 *               mac = tag(S, 2^64 - 1, "welcome")
 * ("|": the fields one after the other, a zero byte after the label and after the first node
 * name; nonces and macs are msgpack bin values; frames: "hmac-sha256-128", else refused.)
 * After the welcome every frame (dialer to acceptor) is its length prefix (counting the tag),
 * its msgpack value and a 16-byte tag, the first 16 bytes of HMAC-SHA256(S, n | length prefix
 * | value), n the frame's number on the connection (0, 1, ...; 8 bytes big-endian). The
 * acceptor checks the tag (constant time) before it decodes anything: a frame altered,
 * injected, replayed, dropped or reordered on the way closes the link (the dialer dials
 * again), nothing of it is applied, and the refusal is logged.
 * Each side checks the other's mac in constant time (CRYPTO_memcmp) and the acceptor asks the
 * is_member hook whether the dialer's node is a member (listed in etcd) before it welcomes
 * it; the dialer checks that the acceptor is the node it dialed. Anything else (a bad or
 * missing mac, an unknown node, a frame that does not decode, a frame before the handshake is
 * done, a second hello) is refused: the connection is closed, the refusal logged (warn: the
 * peer address and why) and counted. A peer that did not prove the key learns nothing but
 * its nonce.
 *
 * Floods: at most 64 accepted connections in their handshake, 16 of them kept for the
 * members' addresses (those this daemon dials), 4 per other source address (8 per member's);
 * from 8 on, a new one from elsewhere gets a 250 ms deadline per step. The log lines a peer
 * can cause (connections closed at once, refusals, bad tags) are limited to 60 a minute per
 * kind; the rest are counted and the count logged (common/log_limit.h).
 *
 * One direction per connection: a daemon sends on the link it dialed (links_connect) and
 * receives on links others dialed, so two daemons that talk hold two TCP connections. A link
 * that breaks is dialed again while wanted (after 100 ms, backing off to 1 s). Frames sent
 * while a link is down are dropped (-ENOTCONN): the caller resends what matters when on_up
 * says the link is back.
 *
 * Single-threaded: everything runs on the daemon's libevent loop; no call blocks (connects
 * are non-blocking). */
#ifndef SALUS_SALUSD_LINKS_H
#define SALUS_SALUSD_LINKS_H

#include "proto.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct links_s links_t;

#define LINKS_NODE_BYTES 64       /* node names: [A-Za-z0-9._-], 1..63 bytes */
#define LINKS_KEY_MIN_BYTES 16
#define LINKS_KEY_MAX_BYTES 4096

/* The hooks run on the loop, never from inside a links_ call; they may call any links_
 * function (a links_destroy from a hook takes effect when the hook returns). */
typedef struct links_hooks_s {
    /* Whether node may link to us (a cluster member now). 1 yes, 0 no. */
    int (*is_member)(void *ctx, const char *node);
    /* The link we dialed to node is up (handshake done): sends work from now on. */
    void (*on_up)(void *ctx, const char *node);
    /* The link we dialed to node broke or was refused (why: for the log); it is being
     * dialed again. */
    void (*on_down)(void *ctx, const char *node, const char *why);
    /* A request (PROTO_REQUEST) from an authenticated member node, on a link it dialed. The
     * message is freed after the hook returns. */
    void (*on_message)(void *ctx, const char *node, const proto_msg_t *msg);
} links_hooks_t;

typedef struct links_config_s {
    const char *node;              /* this daemon's node name */
    const char *listen;            /* "ADDR:PORT" to accept links on; NULL: do not listen */
    const uint8_t *key;            /* the cluster key (copied) */
    size_t key_len;
    uint32_t max_frame_bytes;      /* 0: PROTO_DEFAULT_MAX_FRAME_BYTES */
    uint32_t handshake_timeout_ms; /* 0: 2000 */
    uint32_t pressure_timeout_ms;  /* under a flood (links-internal.h): 0: 250 */
} links_config_t;

typedef struct links_stats_s {
    uint64_t accepted;       /* connections that completed the handshake as acceptor */
    uint64_t refused;        /* connections refused (bad key, not a member, bad frames) */
    uint64_t frames_rejected;/* frames that did not decode or whose tag did not check (the
                              * connection was closed) */
    uint64_t frames_forged;  /* of them, frames whose tag did not check */
    uint64_t busy;           /* of the refused, connections closed at once by the limits on
                              * handshakes (in all, per address, the members' reserve) */
    uint64_t sent, received; /* messages */
    uint32_t up;             /* dialed links up now */
} links_stats_t;

/* Reads the cluster key from path: a regular file owned by the daemon's user (geteuid())
 * with no group or other permission bits (0600 or 0400), LINKS_KEY_MIN_BYTES to
 * LINKS_KEY_MAX_BYTES bytes (a trailing newline is dropped). 0, or a negative errno with
 * err saying what is wrong ("cluster key /etc/salus/cluster.key: readable by others (mode
 * 0644)"). */
int links_key_load(const char *path, uint8_t *key, size_t cap, size_t *len, char *err,
                   size_t err_size);

/* Starts listening (config->listen). NULL with err filled (the address does not parse, bind
 * fails, out of memory). */
links_t *links_create(struct event_base *base, const links_config_t *config,
                      const links_hooks_t *hooks, void *ctx, char *err, size_t err_size);
void links_destroy(links_t *links); /* NULL ok; closes every connection, no hooks run */

/* The port listened on (after binding port 0), 0 when not listening. */
int links_listen_port(const links_t *links);

/* Keeps a link to node at addr ("ADDR:PORT"): dials now and again after each break, until
 * links_forget. Calling it again with another address re-dials there. 0, -EINVAL (bad name
 * or address), -ENOMEM. */
int links_connect(links_t *links, const char *node, const char *addr);
/* Stops dialing node and closes the link to it (on_down is not called). */
void links_forget(links_t *links, const char *node);
/* 1 when the link to node is up (handshake done). */
int links_is_up(const links_t *links, const char *node);
/* Sends one request frame (enc: a finished PROTO_REQUEST) on the link to node. 0, or
 * -ENOTCONN when that link is not up (nothing sent); -EMSGSIZE (a frame over
 * max_frame_bytes) and -ENOMEM also send nothing. */
int links_send(links_t *links, const char *node, const proto_enc_t *enc);
void links_get_stats(const links_t *links, links_stats_t *stats);

#endif
