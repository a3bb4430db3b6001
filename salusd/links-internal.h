/* Daemon links' private parts: the link set (links.c: listening, dialing, redial, the API)
 * and its connections (links_conn.c: frames and the handshake of links.h). */
#ifndef SALUS_SALUSD_LINKS_INTERNAL_H
#define SALUS_SALUSD_LINKS_INTERNAL_H

#include "link_auth.h"
#include "links.h"

#include <sys/socket.h>

/* Frames before the handshake is done are small (hello, challenge, prove, welcome): an
 * unauthenticated peer makes us hold at most this much. */
#define LINKS_HANDSHAKE_MAX_FRAME_BYTES 1024u
/* Accepted connections still in their handshake, at most; more are closed at once. */
#define LINKS_MAX_HANDSHAKES 64
#define LINKS_ADDR_BYTES 64
#define LINKS_REDIAL_FIRST_MS 100u
#define LINKS_REDIAL_MAX_MS 1000u

_Static_assert(LINKS_NODE_BYTES - 1 <= LINK_AUTH_NODE_MAX_BYTES, "node names fit the macs");

typedef enum links_conn_state {
    LINKS_CONN_DIALING,        /* dialer: the TCP connect is under way */
    LINKS_CONN_WAIT_CHALLENGE, /* dialer: hello sent */
    LINKS_CONN_WAIT_WELCOME,   /* dialer: prove sent */
    LINKS_CONN_WAIT_HELLO,     /* acceptor: connection accepted */
    LINKS_CONN_WAIT_PROVE,     /* acceptor: challenge sent */
    LINKS_CONN_UP,             /* handshake done */
    LINKS_CONN_CLOSING,        /* acceptor: writing a last error, then closing */
} links_conn_state_t;

typedef struct links_peer_s links_peer_t;
typedef struct links_conn_s links_conn_t;

struct links_conn_s {
    links_t *links;
    links_peer_t *peer;              /* the dialed link this connection carries; NULL: accepted */
    links_conn_t *prev, *next;       /* accepted connections */
    struct bufferevent *bev;
    struct event *deadline;          /* the handshake step's deadline (none once up) */
    links_conn_state_t state;
    char addr[LINKS_ADDR_BYTES];     /* the far end's address, for the log */
    char node[LINKS_NODE_BYTES];     /* the far end's node: dialed, or announced by the dialer */
    uint8_t own_nonce[LINK_AUTH_NONCE_BYTES];
    uint8_t their_nonce[LINK_AUTH_NONCE_BYTES];
};

/* A link this daemon keeps dialed (links_connect). */
struct links_peer_s {
    links_t *links;
    links_peer_t *next;
    char node[LINKS_NODE_BYTES];
    char addr[LINKS_ADDR_BYTES];
    struct sockaddr_storage sa;
    int sa_len;
    links_conn_t *conn;              /* NULL while waiting to dial again */
    struct event *redial;
    uint32_t backoff_ms;
    unsigned failures;               /* attempts in a row that did not come up, for the log */
};

struct links_s {
    struct event_base *base;
    char node[LINKS_NODE_BYTES];
    uint8_t key[LINKS_KEY_MAX_BYTES];
    size_t key_len;
    uint32_t max_frame_bytes;
    uint32_t handshake_timeout_ms;
    links_hooks_t hooks;
    void *ctx;
    struct evconnlistener *listener;
    int port;
    links_peer_t *peers;
    links_conn_t *accepted;
    int handshakes;                  /* accepted connections not yet up */
    proto_enc_t enc;
    links_stats_t stats;
    int hook_depth;                  /* hooks running now */
    int destroy_pending;             /* links_destroy was called from a hook */
};

/* links.c */
int links_node_valid(const char *node);
/* The dialed link's connection ended (c is freed): count it, dial again later, tell on_down.
 * Returns -1 (the caller must not touch c, or links when a hook destroyed it). */
int links_peer_failed(links_peer_t *peer, const char *why);
/* The dialed link is up: tell on_up. Returns -1: the hook may have forgotten the peer or
 * destroyed links, so the caller reads no further frames now. */
int links_peer_up(links_peer_t *peer);
/* The hooks, through these: a links_destroy from inside a hook is carried out when the hook
 * returns, and the wrapper returns -1 then (links is gone). */
int links_call_is_member(links_t *links, const char *node);
int links_call_on_message(links_t *links, const char *node, const proto_msg_t *msg);

/* links_conn.c */
/* A connection on bev (owned from now on): accepted (peer NULL, already connected) or
 * dialing peer (bufferevent_socket_connect already called). NULL when out of memory (bev is
 * freed). */
links_conn_t *links_conn_new(links_t *links, links_peer_t *peer, struct bufferevent *bev,
                             const char *addr);
/* Closes and frees c (an accepted one leaves the list); no hooks run. */
void links_conn_free(links_conn_t *c);

#endif
