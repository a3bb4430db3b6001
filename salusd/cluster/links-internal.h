/* Daemon links' private parts: the link set (links.c: listening, dialing, redial, the API)
 * and its connections (links_conn.c: frames and the handshake of links.h). */
#ifndef SALUS_SALUSD_LINKS_INTERNAL_H
#define SALUS_SALUSD_LINKS_INTERNAL_H

#include "link_auth.h"
#include "links.h"
#include "log_limit.h"

#include <sys/socket.h>

/* Frames before the handshake is done are small (hello, challenge, prove, welcome): an
 * unauthenticated peer makes us hold at most this much. */
#define LINKS_HANDSHAKE_MAX_FRAME_BYTES 1024u
/* Accepted connections still in their handshake, at most; more are closed at once. Of them,
 * LINKS_MEMBER_RESERVE are kept for connections from the members' addresses (the ones this
 * daemon dials, from etcd), and one source address other than a member's holds at most
 * LINKS_MAX_PER_SOURCE; a member's address at most LINKS_MAX_PER_MEMBER. From
 * LINKS_PRESSURE_HANDSHAKES on, a new connection from elsewhere than a member's address gets
 * LINKS_PRESSURE_DEADLINE_MS (links_config_t's pressure_timeout_ms; the handshake's deadline
 * when that is shorter) for each step. */
#define LINKS_MAX_HANDSHAKES 64
#define LINKS_MEMBER_RESERVE 16
#define LINKS_MAX_PER_SOURCE 4
#define LINKS_MAX_PER_MEMBER 8
#define LINKS_PRESSURE_HANDSHAKES 8
#define LINKS_PRESSURE_DEADLINE_MS 250u
/* Log lines of one kind about refused connections: at most this many a minute, the rest
 * counted and said once. */
#define LINKS_LOG_LINES_PER_MIN 60
#define LINKS_ADDR_BYTES 64
/* What the hello says of the frames after the handshake (links.h): both ends must. */
#define LINKS_FRAME_AUTH "hmac-sha256-128"
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
    struct sockaddr_storage src;     /* accepted: the far end's address */
    int from_member;                 /* accepted from a member's address (links_addr_is_member) */
    uint32_t deadline_ms;            /* each handshake step's */
    uint8_t own_nonce[LINK_AUTH_NONCE_BYTES];
    uint8_t their_nonce[LINK_AUTH_NONCE_BYTES];
    uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES]; /* once up: the frames' key */
    uint64_t seq;                    /* once up: the next frame's number (sent or received) */
};

/* The kinds of log line that a peer can cause at will, each limited on its own. */
typedef enum links_log_kind {
    LINKS_LOG_BUSY,    /* a connection closed at once: the handshake limits */
    LINKS_LOG_REFUSED, /* an accepted connection refused (handshake, frames) */
    LINKS_LOG_FORGED,  /* a frame whose tag does not check */
    LINKS_LOG_KINDS,
} links_log_kind_t;

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
    uint32_t pressure_timeout_ms;
    links_hooks_t hooks;
    void *ctx;
    struct evconnlistener *listener;
    int port;
    links_peer_t *peers;
    links_conn_t *accepted;
    int handshakes;                  /* accepted connections not yet up */
    int member_handshakes;           /* of them, from members' addresses */
    salus_log_limit_t log_limit[LINKS_LOG_KINDS];
    struct event *log_flush;         /* says the drops when a window with some is over */
    proto_enc_t enc;
    links_stats_t stats;
    int hook_depth;                  /* hooks running now */
    int destroy_pending;             /* links_destroy was called from a hook */
};

/* links.c */
int links_node_valid(const char *node);
/* 1 when sa's address (any port) is one this daemon dials a link to: a member's. */
int links_addr_is_member(const links_t *links, const struct sockaddr *sa);
/* The log limit of kind: 1 when a line may be written now (a line saying how many were
 * dropped before it is written first); 0 dropped (counted, said when the minute is over). */
int links_log_take(links_t *links, links_log_kind_t kind, int level);
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
/* Sends one frame (head: the length prefix and body of a finished encoder) on an up dialed
 * connection with its tag; 0 or -ENOMEM. */
int links_conn_send(links_conn_t *c, const uint8_t *frame, size_t frame_len);
/* Closes and frees c (an accepted one leaves the list); no hooks run. */
void links_conn_free(links_conn_t *c);

#endif
