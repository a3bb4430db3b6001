/* Unit tests of the links between daemons (salusd/links.c, links_conn.c, link_auth.c): in one
 * process, one event loop, over 127.0.0.1. Members with the same key link both ways and carry
 * requests in order; a wrong key, a node that is not a member, and raw TCP clients that are
 * not daemons (garbage, a hello without a proof, a wrong mac, a huge length, a request first,
 * silence) are refused with nothing delivered; a broken link is dialed again; the key file's
 * rules. Every wait runs the loop in slices bounded by event_base_loopexit, up to a deadline. */
#include "check_run.h"
#include "link_auth.h"
#include "links-internal.h" /* LINKS_MAX_HANDSHAKES */
#include "links.h"
#include "proto.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_MESSAGES 1000
#define HANDSHAKE_MS 400

static const uint8_t key_one[] = "0123456789abcdef0123456789abcdef";
static const uint8_t key_two[] = "fedcba9876543210fedcba9876543210";

typedef struct node_s {
    const char *name;
    links_t *links;
    const char *deny;            /* is_member says no to this node */
    int destroy_on_message;      /* the hook destroys its own links */
    int forget_on_up, forget_on_down; /* the hook forgets the node */
    int ups, downs, messages, wrong_sender;
    char last_down[256];
    char expect_from[LINKS_NODE_BYTES];
    uint64_t ids[MAX_MESSAGES];
} node_t;

static struct event_base *base;

static void setup(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
}

static void teardown(void)
{
    event_base_free(base);
}

static int hook_is_member(void *ctx, const char *node)
{
    node_t *n = ctx;
    return !(n->deny && strcmp(n->deny, node) == 0);
}

static void hook_on_up(void *ctx, const char *node)
{
    node_t *n = ctx;
    n->ups++;
    if (n->forget_on_up)
        links_forget(n->links, node);
}

static void hook_on_down(void *ctx, const char *node, const char *why)
{
    (void)node;
    node_t *n = ctx;
    n->downs++;
    snprintf(n->last_down, sizeof(n->last_down), "%s", why);
    if (n->forget_on_down)
        links_forget(n->links, node);
}

static void hook_on_message(void *ctx, const char *node, const proto_msg_t *msg)
{
    node_t *n = ctx;
    if (n->expect_from[0] && strcmp(node, n->expect_from) != 0)
        n->wrong_sender++;
    if (n->messages < MAX_MESSAGES)
        n->ids[n->messages] = msg->id;
    n->messages++;
    if (n->destroy_on_message) {
        links_destroy(n->links);
        n->links = NULL;
    }
}

static const links_hooks_t hooks = {hook_is_member, hook_on_up, hook_on_down, hook_on_message};

static void start_node(node_t *n, const char *name, const uint8_t *key, const char *listen)
{
    char err[256] = "";
    links_config_t config = {.node = name, .listen = listen, .key = key, .key_len = 32,
                             .handshake_timeout_ms = HANDSHAKE_MS};
    n->name = name;
    n->links = links_create(base, &config, &hooks, n, err, sizeof(err));
    ck_assert_msg(n->links != NULL, "links_create: %s", err);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs the loop until done(arg) or timeout_ms; 1 when done. */
static int run_until(int (*done)(void *), void *arg, int timeout_ms)
{
    double end = now_ms() + timeout_ms;
    while (!done(arg)) {
        if (now_ms() > end)
            return 0;
        struct timeval slice = {0, 5000};
        event_base_loopexit(base, &slice);
        event_base_dispatch(base);
    }
    return 1;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

static void run_for(int ms)
{
    run_until(never, NULL, ms);
}

static char *listen_addr(const node_t *n, char *buf, size_t size)
{
    snprintf(buf, size, "127.0.0.1:%d", links_listen_port(n->links));
    return buf;
}

typedef struct pair_s {
    node_t *a, *b;
    int count;
} pair_t;

static int both_up(void *arg)
{
    pair_t *p = arg;
    return p->a->ups >= 1 && p->b->ups >= 1;
}

static int both_received(void *arg)
{
    pair_t *p = arg;
    return p->a->messages >= p->count && p->b->messages >= p->count;
}

static void send_requests(node_t *from, const char *to, int count, uint64_t first_id)
{
    proto_enc_t enc;
    proto_enc_init(&enc);
    for (int i = 0; i < count; i++) {
        proto_enc_begin(&enc, PROTO_REQUEST, first_id + (uint64_t)i, "slot", 1);
        proto_pack_kv_uint(&enc.pk, "seq", (uint64_t)i);
        proto_enc_finish(&enc);
        ck_assert_int_eq(links_send(from->links, to, &enc), 0);
    }
    proto_enc_destroy(&enc);
}

/* Every socket of this process is close-on-exec (salusd starts jobs); every connected TCP
 * one sends without Nagle's delay. The count of connected TCP sockets. */
static int check_sockets(void)
{
    int connected = 0;
    for (int fd = 3; fd < 1024; fd++) {
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
            continue;
        ck_assert_msg(fcntl(fd, F_GETFD) & FD_CLOEXEC, "socket %d is not close-on-exec", fd);
        int protocol = 0, listening = 0, nodelay = 0;
        socklen_t len = sizeof(int);
        ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len), 0);
        ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len), 0);
        if (protocol != IPPROTO_TCP || listening)
            continue;
        ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
        ck_assert_msg(nodelay, "socket %d waits for Nagle", fd);
        connected++;
    }
    return connected;
}

START_TEST(test_members_link_both_ways)
{
    node_t a = {0}, b = {0};
    char addr[64];
    start_node(&a, "node-a", key_one, "127.0.0.1:0");
    start_node(&b, "node-b", key_one, "127.0.0.1:0");
    ck_assert_int_gt(links_listen_port(a.links), 0);
    snprintf(a.expect_from, sizeof(a.expect_from), "node-b");
    snprintf(b.expect_from, sizeof(b.expect_from), "node-a");
    ck_assert_int_eq(links_connect(a.links, "node-b", listen_addr(&b, addr, sizeof(addr))), 0);
    ck_assert_int_eq(links_connect(b.links, "node-a", listen_addr(&a, addr, sizeof(addr))), 0);
    pair_t p = {&a, &b, 500};
    ck_assert(run_until(both_up, &p, 5000));
    ck_assert(links_is_up(a.links, "node-b"));
    ck_assert(links_is_up(b.links, "node-a"));
    ck_assert_int_eq(check_sockets(), 4); /* two links, two ends each */
    send_requests(&a, "node-b", 500, 1000);
    send_requests(&b, "node-a", 500, 5000);
    ck_assert(run_until(both_received, &p, 10000));
    run_for(50); /* nothing more arrives */
    ck_assert_int_eq(a.messages, 500);
    ck_assert_int_eq(b.messages, 500);
    for (int i = 0; i < 500; i++) {
        ck_assert_uint_eq(b.ids[i], 1000 + (uint64_t)i);
        ck_assert_uint_eq(a.ids[i], 5000 + (uint64_t)i);
    }
    ck_assert_int_eq(a.wrong_sender + b.wrong_sender, 0);
    /* a frame over the far end's cap is not sent: it would cost the link */
    static char big[PROTO_DEFAULT_MAX_FRAME_BYTES + 1];
    memset(big, 'x', sizeof(big) - 1);
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 9, "slot", 1);
    proto_pack_kv_str(&enc.pk, "blob", big);
    proto_enc_finish(&enc);
    ck_assert_int_eq(links_send(a.links, "node-b", &enc), -EMSGSIZE);
    proto_enc_destroy(&enc);
    ck_assert(links_is_up(a.links, "node-b"));
    links_stats_t st;
    links_get_stats(a.links, &st);
    ck_assert_uint_eq(st.accepted, 1);
    ck_assert_uint_eq(st.refused, 0);
    ck_assert_uint_eq(st.frames_rejected, 0);
    ck_assert_uint_eq(st.sent, 500);
    ck_assert_uint_eq(st.received, 500);
    ck_assert_uint_eq(st.up, 1);
    ck_assert_int_eq(a.downs + b.downs, 0);
    /* forgetting closes our link (no on_down); the far side's link to us stays */
    links_forget(a.links, "node-b");
    ck_assert(!links_is_up(a.links, "node-b"));
    links_get_stats(a.links, &st);
    ck_assert_uint_eq(st.up, 0);
    ck_assert(links_is_up(b.links, "node-a"));
    run_for(50);
    ck_assert_int_eq(a.downs, 0);
    links_destroy(a.links);
    links_destroy(b.links);
}
END_TEST

typedef struct refused_s {
    node_t *a, *b;
    uint64_t at_least;
} refused_t;

static int both_refused(void *arg)
{
    refused_t *r = arg;
    links_stats_t sa, sb;
    links_get_stats(r->a->links, &sa);
    links_get_stats(r->b->links, &sb);
    return sa.refused >= r->at_least && sb.refused >= r->at_least;
}

START_TEST(test_wrong_key_refused_both_ways)
{
    node_t a = {0}, c = {0};
    char addr[64];
    start_node(&a, "node-a", key_one, "127.0.0.1:0");
    start_node(&c, "node-c", key_two, "127.0.0.1:0");
    ck_assert_int_eq(links_connect(a.links, "node-c", listen_addr(&c, addr, sizeof(addr))), 0);
    ck_assert_int_eq(links_connect(c.links, "node-a", listen_addr(&a, addr, sizeof(addr))), 0);
    refused_t r = {&a, &c, 2}; /* twice: it was dialed again, and refused again */
    ck_assert(run_until(both_refused, &r, 8000));
    ck_assert_int_eq(a.ups + c.ups, 0);
    ck_assert_int_eq(a.messages + c.messages, 0);
    ck_assert_int_gt(a.downs, 0);
    ck_assert_int_gt(c.downs, 0);
    ck_assert_msg(strstr(a.last_down, "cluster key") || strstr(a.last_down, "closed"),
                  "why: %s", a.last_down);
    ck_assert(!links_is_up(a.links, "node-c"));
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 1, "slot", 0);
    proto_enc_finish(&enc);
    ck_assert_int_eq(links_send(a.links, "node-c", &enc), -ENOTCONN);
    ck_assert_int_eq(links_send(a.links, "node-x", &enc), -ENOTCONN);
    proto_enc_destroy(&enc);
    links_stats_t st;
    links_get_stats(a.links, &st);
    ck_assert_uint_eq(st.accepted, 0);
    ck_assert_uint_eq(st.up, 0);
    ck_assert_uint_eq(st.received, 0);
    links_destroy(a.links);
    links_destroy(c.links);
}
END_TEST

static int is_up_once(void *arg)
{
    return ((node_t *)arg)->ups >= 1;
}

static int refused_down(void *arg)
{
    node_t *n = arg;
    return n->downs >= 1;
}

START_TEST(test_not_a_member_refused)
{
    node_t a = {0}, b = {0};
    char addr[64];
    start_node(&a, "node-a", key_one, NULL);
    start_node(&b, "node-b", key_one, "127.0.0.1:0");
    b.deny = "node-a";
    ck_assert_int_eq(links_listen_port(a.links), 0);
    ck_assert_int_eq(links_connect(a.links, "node-b", listen_addr(&b, addr, sizeof(addr))), 0);
    ck_assert(run_until(refused_down, &a, 5000));
    ck_assert_msg(strstr(a.last_down, "not a member"), "why: %s", a.last_down);
    ck_assert_int_eq(a.ups, 0);
    ck_assert(!links_is_up(a.links, "node-b"));
    links_stats_t st;
    links_get_stats(b.links, &st);
    ck_assert_uint_ge(st.refused, 1);
    ck_assert_uint_eq(st.accepted, 0);
    /* once it is a member, the next dial gets in */
    b.deny = NULL;
    ck_assert(run_until(is_up_once, &a, 5000));
    ck_assert(links_is_up(a.links, "node-b"));
    links_destroy(a.links);
    links_destroy(b.links);
}
END_TEST

/* A raw TCP client (not a daemon), non-blocking so that the loop runs while it waits. */
typedef struct raw_s {
    int fd;
    int closed;
    uint8_t in[4096];
    size_t have;
    uint8_t own_nonce[LINK_AUTH_NONCE_BYTES], their_nonce[LINK_AUTH_NONCE_BYTES];
    uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES]; /* after raw_welcome */
    uint64_t seq;                                     /* the next frame's number */
} raw_t;

/* A connection to 127.0.0.1:port from 127.0.0.<source> (any address of 127/8 is this host's;
 * source 0: the kernel's choice, 127.0.0.1). */
static void raw_connect_from(raw_t *r, int port, int source)
{
    memset(r, 0, sizeof(*r));
    r->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(r->fd, 0);
    if (source) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        from.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)source);
        ck_assert_int_eq(bind(r->fd, (struct sockaddr *)&from, sizeof(from)), 0);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(r->fd, (struct sockaddr *)&sa, sizeof(sa));
    ck_assert(rc == 0 || errno == EINPROGRESS);
}

static void raw_connect(raw_t *r, int port)
{
    raw_connect_from(r, port, 0);
}

static void raw_send(raw_t *r, const void *data, size_t bytes)
{
    ssize_t n = send(r->fd, data, bytes, MSG_NOSIGNAL);
    ck_assert_msg(n == (ssize_t)bytes, "send: %zd (%s)", n, strerror(errno));
}

static void raw_send_enc(raw_t *r, proto_enc_t *enc)
{
    proto_enc_finish(enc);
    raw_send(r, enc->sbuf.data, enc->sbuf.size);
}

/* Reads what is there; notes the close. */
static int raw_poll(void *arg)
{
    raw_t *r = arg;
    while (!r->closed) {
        ssize_t n = recv(r->fd, r->in + r->have, sizeof(r->in) - r->have, MSG_DONTWAIT);
        if (n > 0) {
            r->have += (size_t)n;
            ck_assert_uint_lt(r->have, sizeof(r->in));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            r->closed = 1;
        } else {
            break;
        }
    }
    return r->closed;
}

static int raw_has_frame(void *arg)
{
    raw_t *r = arg;
    raw_poll(r);
    uint32_t len;
    return r->closed ||
           (proto_frame_length(r->in, r->have, 1u << 20, &len) == PROTO_OK &&
            r->have >= PROTO_HEADER_BYTES + len);
}

/* The first whole frame the raw client got, decoded (and taken from its buffer). */
static void raw_read_frame(raw_t *r, proto_msg_t *msg)
{
    ck_assert(run_until(raw_has_frame, r, 3000));
    ck_assert_msg(!r->closed || r->have > 0, "closed before answering");
    uint32_t len;
    ck_assert_int_eq(proto_frame_length(r->in, r->have, 1u << 20, &len), PROTO_OK);
    ck_assert_int_eq(proto_decode(r->in + PROTO_HEADER_BYTES, len, msg, NULL), PROTO_OK);
    memmove(r->in, r->in + PROTO_HEADER_BYTES + len, r->have - PROTO_HEADER_BYTES - len);
    r->have -= PROTO_HEADER_BYTES + len;
}

static void raw_close(raw_t *r)
{
    close(r->fd);
}

static void pack_bin(msgpack_packer *pk, const char *key, const uint8_t *data, size_t bytes)
{
    proto_pack_str(pk, key);
    msgpack_pack_bin(pk, bytes);
    msgpack_pack_bin_body(pk, data, bytes);
}

static void raw_hello(raw_t *r, const char *node, const uint8_t nonce[LINK_AUTH_NONCE_BYTES])
{
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_HELLO, 0, "link", 4);
    proto_pack_kv_uint(&enc.pk, "version", PROTO_VERSION);
    proto_pack_kv_str(&enc.pk, "frames", "hmac-sha256-128");
    proto_pack_kv_str(&enc.pk, "node", node);
    pack_bin(&enc.pk, "nonce", nonce, LINK_AUTH_NONCE_BYTES);
    raw_send_enc(r, &enc);
    proto_enc_destroy(&enc);
}

/* Hello, then the challenge checked: its mac proves key_one for node "node-a". */
static void raw_hello_challenge(raw_t *r, const char *node)
{
    ck_assert_int_eq(link_auth_nonce(r->own_nonce), 0);
    raw_hello(r, node, r->own_nonce);
    proto_msg_t msg;
    raw_read_frame(r, &msg);
    ck_assert_int_eq(msg.kind, PROTO_REPLY);
    ck_assert_str_eq(msg.op, "challenge");
    char peer[LINKS_NODE_BYTES];
    ck_assert_int_eq(proto_get_str_copy(&msg.body, "node", peer, sizeof(peer)), 0);
    ck_assert_str_eq(peer, "node-a");
    const msgpack_object *n = proto_get(&msg.body, "nonce");
    const msgpack_object *mac = proto_get(&msg.body, "mac");
    ck_assert(n && n->type == MSGPACK_OBJECT_BIN && n->via.bin.size == 32);
    ck_assert(mac && mac->type == MSGPACK_OBJECT_BIN);
    memcpy(r->their_nonce, n->via.bin.ptr, 32);
    const uint8_t *m = (const uint8_t *)mac->via.bin.ptr;
    ck_assert(link_auth_check(LINK_AUTH_ACCEPTOR, key_one, 32, r->own_nonce, r->their_nonce,
                              "node-a", node, m, mac->via.bin.size));
    /* the mac is bound to the key, the role and the nodes */
    ck_assert(!link_auth_check(LINK_AUTH_ACCEPTOR, key_two, 32, r->own_nonce, r->their_nonce,
                               "node-a", node, m, mac->via.bin.size));
    ck_assert(!link_auth_check(LINK_AUTH_DIALER, key_one, 32, r->own_nonce, r->their_nonce,
                               "node-a", node, m, mac->via.bin.size));
    ck_assert(!link_auth_check(LINK_AUTH_ACCEPTOR, key_one, 32, r->own_nonce, r->their_nonce,
                               "node-a", "node-q", m, mac->via.bin.size));
    proto_msg_free(&msg);
}

static void raw_prove(raw_t *r, const char *node, const uint8_t *key)
{
    uint8_t mac[LINK_AUTH_MAC_BYTES];
    ck_assert_int_eq(link_auth_mac(LINK_AUTH_DIALER, key, 32, r->their_nonce, r->own_nonce,
                                   node, "node-a", mac), 0);
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 1, "prove", 1);
    pack_bin(&enc.pk, "mac", mac, sizeof(mac));
    raw_send_enc(r, &enc);
    proto_enc_destroy(&enc);
}

/* The welcome read and its mac checked: r's session key (key_one, dialer node). */
static void raw_welcome(raw_t *r, const char *node)
{
    proto_msg_t msg;
    raw_read_frame(r, &msg);
    ck_assert_int_eq(msg.kind, PROTO_REPLY);
    ck_assert_str_eq(msg.op, "welcome");
    const msgpack_object *mac = proto_get(&msg.body, "mac");
    ck_assert(mac && mac->type == MSGPACK_OBJECT_BIN && mac->via.bin.size == LINK_AUTH_TAG_BYTES);
    ck_assert_int_eq(link_auth_session_key(key_one, 32, r->own_nonce, r->their_nonce, node,
                                           "node-a", r->session_key), 0);
    ck_assert(link_auth_frame_check(r->session_key, UINT64_MAX, NULL, 0,
                                    (const uint8_t *)"welcome", 7,
                                    (const uint8_t *)mac->via.bin.ptr));
    r->seq = 0;
    proto_msg_free(&msg);
}

/* One frame after the handshake as a daemon sends it: length (with the tag), value, tag of
 * frame number seq; flip: the index of a byte of the value to change after tagging (-1:
 * none). */
static void raw_send_tagged(raw_t *r, proto_enc_t *enc, uint64_t seq, int flip)
{
    proto_enc_finish(enc);
    size_t body = enc->sbuf.size - PROTO_HEADER_BYTES;
    uint8_t frame[4096];
    ck_assert_uint_le(PROTO_HEADER_BYTES + body + LINK_AUTH_TAG_BYTES, sizeof(frame));
    uint32_t len = (uint32_t)(body + LINK_AUTH_TAG_BYTES);
    frame[0] = (uint8_t)(len >> 24);
    frame[1] = (uint8_t)(len >> 16);
    frame[2] = (uint8_t)(len >> 8);
    frame[3] = (uint8_t)len;
    memcpy(frame + PROTO_HEADER_BYTES, enc->sbuf.data + PROTO_HEADER_BYTES, body);
    ck_assert_int_eq(link_auth_frame_tag(r->session_key, seq, frame, PROTO_HEADER_BYTES,
                                         frame + PROTO_HEADER_BYTES, body,
                                         frame + PROTO_HEADER_BYTES + body), 0);
    if (flip >= 0)
        frame[PROTO_HEADER_BYTES + flip] ^= 0x01;
    raw_send(r, frame, PROTO_HEADER_BYTES + body + LINK_AUTH_TAG_BYTES);
}

/* The acceptor every raw client talks to: node-a, key_one. */
static node_t acceptor;

static raw_t *raw_to_acceptor(raw_t *r)
{
    start_node(&acceptor, "node-a", key_one, "127.0.0.1:0");
    raw_connect(r, links_listen_port(acceptor.links));
    return r;
}

/* Waits for the acceptor to close r; the milliseconds that took. */
static double expect_closed(raw_t *r)
{
    double start = now_ms();
    ck_assert_msg(run_until(raw_poll, r, 3 * HANDSHAKE_MS + 2000), "the connection stays open");
    return now_ms() - start;
}

/* Nothing got through; refused and frames_rejected as given. */
static void expect_refused(uint64_t frames_rejected)
{
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    ck_assert_uint_eq(st.refused, 1);
    ck_assert_uint_eq(st.frames_rejected, frames_rejected);
    ck_assert_uint_eq(st.accepted, 0);
    ck_assert_uint_eq(st.received, 0);
    ck_assert_int_eq(acceptor.messages, 0);
    ck_assert_int_eq(acceptor.ups, 0);
}

static void finish_raw(raw_t *r)
{
    raw_close(r);
    links_destroy(acceptor.links);
    memset(&acceptor, 0, sizeof(acceptor));
}

START_TEST(test_raw_garbage)
{
    raw_t r;
    raw_to_acceptor(&r);
    static const uint8_t garbage[] = {0, 0, 0, 5, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1};
    raw_send(&r, garbage, sizeof(garbage));
    expect_closed(&r);
    expect_refused(1);
    ck_assert_uint_eq(r.have, 0); /* it learned nothing */
    finish_raw(&r);
}
END_TEST

START_TEST(test_raw_huge_length)
{
    raw_t r;
    raw_to_acceptor(&r);
    static const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 'x', 'y'};
    raw_send(&r, huge, sizeof(huge));
    expect_closed(&r);
    expect_refused(1);
    finish_raw(&r);
}
END_TEST

START_TEST(test_raw_request_first)
{
    raw_t r;
    raw_to_acceptor(&r);
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 7, "slot", 1);
    proto_pack_kv_uint(&enc.pk, "seq", 1);
    raw_send_enc(&r, &enc);
    proto_enc_destroy(&enc);
    expect_closed(&r);
    expect_refused(0);
    ck_assert_uint_eq(r.have, 0);
    finish_raw(&r);
}
END_TEST

START_TEST(test_raw_bad_node_name)
{
    raw_t r;
    uint8_t nonce[LINK_AUTH_NONCE_BYTES] = {1};
    raw_to_acceptor(&r);
    raw_hello(&r, "no spaces/or slashes", nonce);
    expect_closed(&r);
    expect_refused(0);
    ck_assert_uint_eq(r.have, 0);
    finish_raw(&r);
}
END_TEST

START_TEST(test_raw_hello_without_proof)
{
    raw_t r;
    raw_to_acceptor(&r);
    raw_hello_challenge(&r, "node-r");
    double waited = expect_closed(&r);
    ck_assert_msg(waited >= 0.8 * HANDSHAKE_MS, "closed after %.0f ms", waited);
    expect_refused(0);
    finish_raw(&r);
}
END_TEST

/* A hello that comes in pieces is answered; one over the handshake's small frame cap
 * closes the connection. */
START_TEST(test_raw_frames_in_pieces_and_handshake_cap)
{
    raw_t r;
    raw_to_acceptor(&r);
    uint8_t nonce[LINK_AUTH_NONCE_BYTES] = {7};
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_HELLO, 0, "link", 4);
    proto_pack_kv_uint(&enc.pk, "version", PROTO_VERSION);
    proto_pack_kv_str(&enc.pk, "frames", "hmac-sha256-128");
    proto_pack_kv_str(&enc.pk, "node", "node-r");
    pack_bin(&enc.pk, "nonce", nonce, sizeof(nonce));
    proto_enc_finish(&enc);
    /* the header a byte at a time, then the rest in 7-byte pieces: a handful of loop turns,
     * well within the deadline */
    for (size_t i = 0, piece; i < enc.sbuf.size; i += piece) {
        piece = i < PROTO_HEADER_BYTES ? 1 : 7;
        if (piece > enc.sbuf.size - i)
            piece = enc.sbuf.size - i;
        raw_send(&r, enc.sbuf.data + i, piece);
        run_for(1);
    }
    proto_enc_destroy(&enc);
    proto_msg_t msg;
    raw_read_frame(&r, &msg);
    ck_assert_str_eq(msg.op, "challenge");
    proto_msg_free(&msg);
    raw_close(&r);

    raw_connect(&r, links_listen_port(acceptor.links));
    static const uint8_t over_cap[] = {0, 0, 0x04, 0x01}; /* 1025 bytes before the handshake */
    raw_send(&r, over_cap, sizeof(over_cap));
    expect_closed(&r);
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    ck_assert_uint_eq(st.frames_rejected, 1);
    ck_assert_int_eq(acceptor.messages, 0);
    finish_raw(&r);
}
END_TEST

static void start_node_cfg(node_t *n, const char *name, uint32_t handshake_ms,
                           uint32_t pressure_ms)
{
    char err[256] = "";
    links_config_t config = {.node = name, .listen = "127.0.0.1:0", .key = key_one,
                             .key_len = 32, .handshake_timeout_ms = handshake_ms,
                             .pressure_timeout_ms = pressure_ms};
    n->name = name;
    n->links = links_create(base, &config, &hooks, n, err, sizeof(err));
    ck_assert_msg(n->links != NULL, "links_create: %s", err);
}

typedef struct raws_s {
    raw_t r[LINKS_MAX_HANDSHAKES + 1];
    int count;
    int closed, first_closed;
} raws_t;

static int any_closed(void *arg)
{
    raws_t *rs = arg;
    rs->closed = 0;
    rs->first_closed = -1;
    for (int i = 0; i < rs->count; i++)
        if (raw_poll(&rs->r[i]) && rs->closed++ == 0)
            rs->first_closed = i;
    return rs->closed > 0;
}

static int handshakes_are(void *arg)
{
    return acceptor.links->handshakes == *(int *)arg;
}

/* raws from 127.0.0.<source> until the acceptor holds `want` handshakes */
static void raws_add(raws_t *rs, int source, int n, int want)
{
    for (int i = 0; i < n; i++)
        raw_connect_from(&rs->r[rs->count++], links_listen_port(acceptor.links), source);
    ck_assert_msg(run_until(handshakes_are, &want, 3000), "%d handshakes, not %d",
                  acceptor.links->handshakes, want);
}

static void raws_close(raws_t *rs)
{
    for (int i = 0; i < rs->count; i++)
        raw_close(&rs->r[i]);
    rs->count = 0;
}

static uint64_t busy_count(void)
{
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    return st.busy;
}

/* Connections that say nothing, from addresses that are no member's: 4 per address, 48 in
 * all (64 less the members' 16); the one more is closed at once, and from the 9th on they
 * get the short deadline of a flood. */
START_TEST(test_raw_handshakes_limited)
{
    static raws_t rs;
    start_node_cfg(&acceptor, "node-a", 60000, 30000);
    for (int source = 2; source < 2 + 12; source++)
        raws_add(&rs, source, LINKS_MAX_PER_SOURCE, rs.count + LINKS_MAX_PER_SOURCE);
    ck_assert_int_eq(rs.count, LINKS_MAX_HANDSHAKES - LINKS_MEMBER_RESERVE);
    ck_assert_int_eq(acceptor.links->member_handshakes, 0);
    int held = 0, short_deadline = 0;
    for (links_conn_t *c = acceptor.links->accepted; c; c = c->next, held++)
        short_deadline += c->deadline_ms == 30000;
    ck_assert_int_eq(held, rs.count);
    ck_assert_int_eq(short_deadline, rs.count - LINKS_PRESSURE_HANDSHAKES);
    ck_assert(!any_closed(&rs));
    raw_connect_from(&rs.r[rs.count++], links_listen_port(acceptor.links), 20);
    ck_assert(run_until(any_closed, &rs, 3000));
    ck_assert_int_eq(rs.closed, 1);
    ck_assert_int_eq(rs.first_closed, rs.count - 1);
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    ck_assert_uint_eq(st.refused, 1);
    ck_assert_uint_eq(st.busy, 1);
    raws_close(&rs);
    links_destroy(acceptor.links);
    memset(&acceptor, 0, sizeof(acceptor));
}
END_TEST

/* A member's address (one the acceptor dials, 127.0.0.1 here) gets through a flood that took
 * every handshake others may have: its dialer links up; one other address holds only 4. */
START_TEST(test_raw_per_source_and_member_reserve)
{
    static raws_t rs;
    node_t m = {0};
    char addr[64];
    start_node_cfg(&acceptor, "node-a", 60000, 30000);
    start_node(&m, "node-m", key_one, "127.0.0.1:0");
    /* node-m's address is a member's for node-a: node-a dials it */
    ck_assert_int_eq(links_connect(acceptor.links, "node-m", listen_addr(&m, addr, sizeof(addr))), 0);
    ck_assert(links_addr_is_member(acceptor.links, (const struct sockaddr *)&acceptor.links->peers->sa));
    ck_assert(run_until(is_up_once, &acceptor, 3000));
    /* one address: 4, the 5th closed at once */
    raws_add(&rs, 2, LINKS_MAX_PER_SOURCE, LINKS_MAX_PER_SOURCE);
    ck_assert(!any_closed(&rs));
    raw_connect_from(&rs.r[rs.count++], links_listen_port(acceptor.links), 2);
    ck_assert(run_until(any_closed, &rs, 3000));
    ck_assert_int_eq(rs.first_closed, rs.count - 1);
    ck_assert_uint_eq(busy_count(), 1);
    raw_close(&rs.r[--rs.count]);
    /* the others' share full */
    for (int source = 3; source < 3 + 11; source++)
        raws_add(&rs, source, LINKS_MAX_PER_SOURCE, rs.count + LINKS_MAX_PER_SOURCE);
    ck_assert_int_eq(acceptor.links->handshakes, LINKS_MAX_HANDSHAKES - LINKS_MEMBER_RESERVE);
    raw_connect_from(&rs.r[rs.count++], links_listen_port(acceptor.links), 30);
    ck_assert(run_until(any_closed, &rs, 3000));
    ck_assert_int_eq(rs.first_closed, rs.count - 1);
    ck_assert_uint_eq(busy_count(), 2);
    raw_close(&rs.r[--rs.count]);
    /* the member's address: its dialer links up (from 127.0.0.1) */
    uint64_t accepted_before;
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    accepted_before = st.accepted;
    ck_assert_int_eq(links_connect(m.links, "node-a", listen_addr(&acceptor, addr, sizeof(addr))), 0);
    ck_assert(run_until(is_up_once, &m, 3000));
    ck_assert(links_is_up(m.links, "node-a"));
    links_get_stats(acceptor.links, &st);
    ck_assert_uint_eq(st.accepted, accepted_before + 1);
    ck_assert_uint_eq(st.busy, 2);
    raws_close(&rs);
    links_destroy(m.links);
    links_destroy(acceptor.links);
    memset(&acceptor, 0, sizeof(acceptor));
}
END_TEST

static int one_message_a(void *arg)
{
    return ((node_t *)arg)->messages >= 1;
}

/* A welcomed member whose frames are changed on the way: a flipped byte, a replay, a frame
 * without its tag: each closes the link before anything of it is decoded or delivered. */
START_TEST(test_raw_forged_frames)
{
    raw_t r;
    proto_enc_t enc;
    proto_enc_init(&enc);
    raw_to_acceptor(&r);
    raw_hello_challenge(&r, "node-r");
    raw_prove(&r, "node-r", key_one);
    raw_welcome(&r, "node-r");
    proto_enc_begin(&enc, PROTO_REQUEST, 7, "slot", 0);
    raw_send_tagged(&r, &enc, r.seq++, -1);
    ck_assert(run_until(one_message_a, &acceptor, 3000));
    proto_enc_begin(&enc, PROTO_REQUEST, 8, "slot", 0);
    raw_send_tagged(&r, &enc, r.seq++, 3); /* one byte of the value flipped */
    expect_closed(&r);
    run_for(20);
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    ck_assert_int_eq(acceptor.messages, 1);
    ck_assert_uint_eq(acceptor.ids[0], 7);
    ck_assert_uint_eq(st.frames_forged, 1);
    ck_assert_uint_eq(st.refused, 1);
    raw_close(&r);

    /* a replay: frame 0 twice */
    raw_connect(&r, links_listen_port(acceptor.links));
    raw_hello_challenge(&r, "node-r");
    raw_prove(&r, "node-r", key_one);
    raw_welcome(&r, "node-r");
    proto_enc_begin(&enc, PROTO_REQUEST, 9, "slot", 0);
    raw_send_tagged(&r, &enc, 0, -1);
    proto_enc_begin(&enc, PROTO_REQUEST, 9, "slot", 0);
    raw_send_tagged(&r, &enc, 0, -1);
    expect_closed(&r);
    run_for(20);
    ck_assert_int_eq(acceptor.messages, 2);
    raw_close(&r);

    /* a frame as before the tags (no tag): refused */
    raw_connect(&r, links_listen_port(acceptor.links));
    raw_hello_challenge(&r, "node-r");
    raw_prove(&r, "node-r", key_one);
    raw_welcome(&r, "node-r");
    proto_enc_begin(&enc, PROTO_REQUEST, 10, "slot-with-a-longer-name-than-a-tag", 0);
    raw_send_enc(&r, &enc);
    expect_closed(&r);
    run_for(20);
    links_get_stats(acceptor.links, &st);
    ck_assert_int_eq(acceptor.messages, 2);
    ck_assert_uint_eq(st.frames_forged, 3);
    ck_assert_uint_eq(st.received, 2);
    proto_enc_destroy(&enc);
    finish_raw(&r);
}
END_TEST

/* A hello without "frames" (a daemon that does not tag its frames) is refused. */
START_TEST(test_raw_hello_without_frame_tags)
{
    raw_t r;
    raw_to_acceptor(&r);
    uint8_t nonce[LINK_AUTH_NONCE_BYTES] = {1};
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_HELLO, 0, "link", 3);
    proto_pack_kv_uint(&enc.pk, "version", PROTO_VERSION);
    proto_pack_kv_str(&enc.pk, "node", "node-r");
    pack_bin(&enc.pk, "nonce", nonce, LINK_AUTH_NONCE_BYTES);
    raw_send_enc(&r, &enc);
    proto_enc_destroy(&enc);
    expect_closed(&r);
    expect_refused(0);
    ck_assert_uint_eq(r.have, 0); /* no challenge */
    finish_raw(&r);
}
END_TEST

static int count_lines(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

/* 150 refusals in a row: at most 60 lines, the rest counted and said once the minute is
 * over (the minute is moved back here instead of waited for). */
START_TEST(test_refusals_logged_at_most_60_a_minute)
{
    char path[] = "/tmp/salus-check-links-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    start_node(&acceptor, "node-a", key_one, "127.0.0.1:0");
    static const uint8_t garbage[] = "GET / HTTP/1.0\r\n\r\n";
    for (int i = 0; i < 150; i++) {
        raw_t r;
        raw_connect(&r, links_listen_port(acceptor.links));
        raw_send(&r, garbage, sizeof(garbage));
        expect_closed(&r);
        raw_close(&r);
    }
    links_t *l = acceptor.links;
    salus_log_limit_t *lim = &l->log_limit[LINKS_LOG_REFUSED];
    ck_assert_uint_eq(lim->dropped, 90);
    lim->window_start -= 61ull * 1000000000ull; /* the minute is over */
    event_active(l->log_flush, EV_TIMEOUT, 1);
    run_for(20);
    links_stats_t st;
    links_get_stats(l, &st);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);
    int refusals = count_lines(path, "refusing the link from 127.0.0.1");
    int said = count_lines(path, "links: 90 more log lines of connections refused were dropped");
    unlink(path);
    ck_assert_uint_eq(st.refused, 150);
    ck_assert_int_eq(refusals, LINKS_LOG_LINES_PER_MIN);
    ck_assert_int_eq(said, 1);
    links_destroy(acceptor.links);
    memset(&acceptor, 0, sizeof(acceptor));
}
END_TEST

START_TEST(test_raw_wrong_mac)
{
    raw_t r;
    raw_to_acceptor(&r);
    raw_hello_challenge(&r, "node-r");
    raw_prove(&r, "node-r", key_two);
    expect_closed(&r);
    expect_refused(0);
    ck_assert_uint_eq(r.have, 0); /* no welcome */
    finish_raw(&r);
}
END_TEST

START_TEST(test_raw_silent_dropped_at_deadline)
{
    raw_t r;
    raw_to_acceptor(&r);
    double waited = expect_closed(&r);
    ck_assert_msg(waited >= 0.8 * HANDSHAKE_MS, "closed after %.0f ms", waited);
    expect_refused(0);
    finish_raw(&r);
}
END_TEST

static int two_messages(void *arg)
{
    return ((node_t *)arg)->messages >= 2;
}

/* A client with the key is welcomed and heard; a second hello after that closes its link. */
START_TEST(test_raw_member_then_second_hello)
{
    raw_t r;
    raw_to_acceptor(&r);
    snprintf(acceptor.expect_from, sizeof(acceptor.expect_from), "node-r");
    raw_hello_challenge(&r, "node-r");
    raw_prove(&r, "node-r", key_one);
    raw_welcome(&r, "node-r");
    proto_enc_t enc;
    proto_enc_init(&enc);
    for (uint64_t id = 40; id < 42; id++) {
        proto_enc_begin(&enc, PROTO_REQUEST, id, "slot", 0);
        raw_send_tagged(&r, &enc, r.seq++, -1);
    }
    ck_assert(run_until(two_messages, &acceptor, 3000));
    ck_assert_uint_eq(acceptor.ids[0], 40);
    ck_assert_uint_eq(acceptor.ids[1], 41);
    ck_assert_int_eq(acceptor.wrong_sender, 0);
    proto_enc_begin(&enc, PROTO_HELLO, 0, "link", 0); /* a second hello, tagged */
    raw_send_tagged(&r, &enc, r.seq++, -1);
    proto_enc_begin(&enc, PROTO_REQUEST, 42, "slot", 0); /* after the hello: never heard */
    raw_send_tagged(&r, &enc, r.seq++, -1);
    proto_enc_destroy(&enc);
    expect_closed(&r);
    run_for(20);
    ck_assert_int_eq(acceptor.messages, 2);
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    ck_assert_uint_eq(st.accepted, 1);
    ck_assert_uint_eq(st.refused, 1);
    ck_assert_uint_eq(st.received, 2);
    finish_raw(&r);
}
END_TEST

/* After the handshake the frame cap is max_frame_bytes: a bigger length closes the link. */
START_TEST(test_raw_member_frame_over_cap)
{
    raw_t r;
    raw_to_acceptor(&r);
    raw_hello_challenge(&r, "node-r");
    raw_prove(&r, "node-r", key_one);
    raw_welcome(&r, "node-r");
    uint32_t len = PROTO_DEFAULT_MAX_FRAME_BYTES + LINK_AUTH_TAG_BYTES + 1;
    uint8_t header[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                         (uint8_t)len};
    raw_send(&r, header, sizeof(header));
    expect_closed(&r);
    links_stats_t st;
    links_get_stats(acceptor.links, &st);
    ck_assert_uint_eq(st.frames_rejected, 1);
    ck_assert_int_eq(acceptor.messages, 0);
    finish_raw(&r);
}
END_TEST

static int down_once(void *arg)
{
    return ((node_t *)arg)->downs >= 1;
}

static int up_twice(void *arg)
{
    node_t *n = arg;
    return n->ups >= 2 && links_is_up(n->links, "node-a");
}

static int one_message(void *arg)
{
    return ((node_t *)arg)->messages >= 1;
}

/* The acceptor goes away and comes back on the same port: the dialer gets there again. */
START_TEST(test_redial_after_acceptor_restart)
{
    node_t a = {0}, b = {0};
    char addr[64];
    start_node(&a, "node-a", key_one, "127.0.0.1:0");
    start_node(&b, "node-b", key_one, NULL);
    listen_addr(&a, addr, sizeof(addr));
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0);
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0); /* the same: nothing new */
    ck_assert(run_until(is_up_once, &b, 5000));
    links_destroy(a.links);
    memset(&a, 0, sizeof(a));
    ck_assert(run_until(down_once, &b, 5000));
    ck_assert(!links_is_up(b.links, "node-a"));
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 77, "slot", 0);
    proto_enc_finish(&enc);
    ck_assert_int_eq(links_send(b.links, "node-a", &enc), -ENOTCONN);
    links_stats_t st;
    links_get_stats(b.links, &st);
    ck_assert_uint_eq(st.up, 0);
    run_for(300); /* a few dials that find nobody */
    char err[256];
    links_config_t config = {.node = "node-a", .listen = addr, .key = key_one, .key_len = 32,
                             .handshake_timeout_ms = HANDSHAKE_MS};
    a.links = links_create(base, &config, &hooks, &a, err, sizeof(err));
    ck_assert_msg(a.links != NULL, "%s", err);
    ck_assert(run_until(up_twice, &b, 5000));
    ck_assert_int_eq(links_send(b.links, "node-a", &enc), 0);
    proto_enc_destroy(&enc);
    ck_assert(run_until(one_message, &a, 3000));
    ck_assert_uint_eq(a.ids[0], 77);
    links_get_stats(b.links, &st);
    ck_assert_uint_eq(st.up, 1);
    links_destroy(a.links);
    links_destroy(b.links);
}
END_TEST

/* Hooks that forget the link they report on, or destroy the whole set from on_message, leave
 * nothing dangling (the sanitizer run checks the memory). */
START_TEST(test_hooks_forget_and_destroy)
{
    node_t a = {0}, b = {0}, c = {0};
    char addr[64];
    start_node(&a, "node-a", key_one, "127.0.0.1:0");
    start_node(&b, "node-b", key_one, NULL);
    start_node(&c, "node-c", key_two, NULL);
    b.forget_on_up = 1;
    c.forget_on_down = 1;
    listen_addr(&a, addr, sizeof(addr));
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0);
    ck_assert_int_eq(links_connect(c.links, "node-a", addr), 0);
    ck_assert(run_until(is_up_once, &b, 5000));
    ck_assert(run_until(down_once, &c, 5000));
    run_for(300); /* forgotten: neither dials again */
    ck_assert_int_eq(b.ups, 1);
    ck_assert_int_eq(c.downs, 1);
    ck_assert(!links_is_up(b.links, "node-a"));
    links_stats_t st;
    links_get_stats(b.links, &st);
    ck_assert_uint_eq(st.up, 0);

    /* node-a destroys its links in on_message, with more frames queued behind the first */
    a.destroy_on_message = 1;
    b.forget_on_up = 0;
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0);
    ck_assert(run_until(up_twice, &b, 5000));
    send_requests(&b, "node-a", 20, 1);
    ck_assert(run_until(down_once, &b, 5000));
    ck_assert_int_eq(a.messages, 1);
    ck_assert_ptr_null(a.links);
    links_destroy(b.links);
    links_destroy(c.links);
}
END_TEST

/* A listening socket on a free loopback port (its address in sa) that nobody accepts on. */
static int loopback_listener(struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    *sa = (struct sockaddr_in){.sin_family = AF_INET};
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(*sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)sa, sizeof(*sa)), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)sa, &len), 0);
    return fd;
}

static int downs_twice(void *arg)
{
    return ((node_t *)arg)->downs >= 2;
}

/* A listener that never answers (the kernel accepts, nobody reads): the dialer gives up at
 * the deadline, and dials again. */
START_TEST(test_silent_acceptor_dropped_at_deadline)
{
    struct sockaddr_in sa;
    int fd = loopback_listener(&sa);
    node_t b = {0};
    char addr[64];
    start_node(&b, "node-b", key_one, NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    double start = now_ms();
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0);
    ck_assert(run_until(down_once, &b, 3 * HANDSHAKE_MS + 2000));
    double waited = now_ms() - start;
    ck_assert_msg(waited >= 0.8 * HANDSHAKE_MS, "dropped after %.0f ms", waited);
    ck_assert_msg(strstr(b.last_down, "deadline"), "why: %s", b.last_down);
    ck_assert(run_until(downs_twice, &b, 3 * HANDSHAKE_MS + 3000));
    ck_assert_int_eq(b.ups, 0);
    links_destroy(b.links);
    close(fd);
}
END_TEST

static int up_once_b(void *arg)
{
    return ((node_t *)arg)->ups >= 1;
}

/* A far end that completes the handshake as an acceptor, then a frame (one a relay could
 * inject, with a bad tag) arrives on the link the daemon dialed: the link is dropped as a
 * dialed one (links carry one way: on_down, dialed again), not read with its tags. */
START_TEST(test_frame_from_acceptor_drops_dialed_link)
{
    struct sockaddr_in sa;
    int fd = loopback_listener(&sa);
    node_t b = {0};
    char addr[64];
    start_node(&b, "node-b", key_one, NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0);
    run_for(50);
    raw_t r;
    memset(&r, 0, sizeof(r));
    r.fd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    ck_assert_int_ge(r.fd, 0);
    proto_msg_t msg;
    raw_read_frame(&r, &msg); /* the hello */
    ck_assert_str_eq(msg.op, "link");
    const msgpack_object *n = proto_get(&msg.body, "nonce");
    ck_assert(n && n->type == MSGPACK_OBJECT_BIN && n->via.bin.size == LINK_AUTH_NONCE_BYTES);
    memcpy(r.their_nonce, n->via.bin.ptr, LINK_AUTH_NONCE_BYTES);
    proto_msg_free(&msg);
    ck_assert_int_eq(link_auth_nonce(r.own_nonce), 0);
    uint8_t mac[LINK_AUTH_MAC_BYTES], tag[LINK_AUTH_TAG_BYTES];
    ck_assert_int_eq(link_auth_mac(LINK_AUTH_ACCEPTOR, key_one, 32, r.their_nonce, r.own_nonce,
                                   "node-a", "node-b", mac), 0);
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REPLY, 0, "challenge", 3);
    proto_pack_kv_str(&enc.pk, "node", "node-a");
    pack_bin(&enc.pk, "nonce", r.own_nonce, LINK_AUTH_NONCE_BYTES);
    pack_bin(&enc.pk, "mac", mac, sizeof(mac));
    raw_send_enc(&r, &enc);
    raw_read_frame(&r, &msg); /* the prove */
    ck_assert_str_eq(msg.op, "prove");
    proto_msg_free(&msg);
    ck_assert_int_eq(link_auth_session_key(key_one, 32, r.their_nonce, r.own_nonce, "node-b",
                                           "node-a", r.session_key), 0);
    ck_assert_int_eq(link_auth_frame_tag(r.session_key, UINT64_MAX, NULL, 0,
                                         (const uint8_t *)"welcome", 7, tag), 0);
    proto_enc_begin(&enc, PROTO_REPLY, 1, "welcome", 1);
    pack_bin(&enc.pk, "mac", tag, sizeof(tag));
    raw_send_enc(&r, &enc);
    ck_assert(run_until(up_once_b, &b, 3000));
    ck_assert(links_is_up(b.links, "node-a"));
    proto_enc_begin(&enc, PROTO_REQUEST, 2, "slot", 0);
    raw_send_tagged(&r, &enc, 0, 3); /* injected: its tag does not check either */
    proto_enc_destroy(&enc);
    ck_assert(run_until(down_once, &b, 3000));
    ck_assert_msg(strstr(b.last_down, "one way"), "why: %s", b.last_down);
    ck_assert_int_eq(b.messages, 0);
    raw_close(&r);
    links_destroy(b.links);
    close(fd);
}
END_TEST

static int ipv6_loopback_works(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

START_TEST(test_ipv6)
{
    if (!ipv6_loopback_works()) { /* containers often run without IPv6 */
        fprintf(stderr, "check_links: no IPv6 loopback here, test_ipv6 tries nothing\n");
        return;
    }
    node_t a = {0}, b = {0};
    char addr[64];
    start_node(&a, "node-a", key_one, "[::1]:0");
    start_node(&b, "node-b", key_one, NULL);
    snprintf(addr, sizeof(addr), "[::1]:%d", links_listen_port(a.links));
    ck_assert_int_eq(links_connect(b.links, "node-a", addr), 0);
    ck_assert(run_until(is_up_once, &b, 5000));
    send_requests(&b, "node-a", 3, 60);
    ck_assert(run_until(two_messages, &a, 3000));
    ck_assert_uint_eq(a.ids[0], 60);
    ck_assert_uint_eq(a.ids[1], 61);
    links_destroy(a.links);
    links_destroy(b.links);
}
END_TEST

START_TEST(test_bad_arguments)
{
    node_t a = {0};
    char err[256] = "";
    links_config_t config = {.node = "node-a", .listen = "localhost:99", .key = key_one,
                             .key_len = 32};
    ck_assert_ptr_null(links_create(base, &config, &hooks, &a, err, sizeof(err)));
    ck_assert_msg(strstr(err, "localhost:99"), "%s", err);
    config.listen = NULL;
    config.node = "bad name";
    ck_assert_ptr_null(links_create(base, &config, &hooks, &a, err, sizeof(err)));
    config.node = "node-a";
    config.key_len = LINKS_KEY_MIN_BYTES - 1;
    ck_assert_ptr_null(links_create(base, &config, &hooks, &a, err, sizeof(err)));
    config.key_len = 32;
    a.links = links_create(base, &config, &hooks, &a, err, sizeof(err));
    ck_assert_ptr_nonnull(a.links);
    ck_assert_int_eq(links_connect(a.links, "node-b", "127.0.0.1"), -EINVAL);
    ck_assert_int_eq(links_connect(a.links, "node-b", "example.org:80"), -EINVAL);
    ck_assert_int_eq(links_connect(a.links, "node-b", "127.0.0.1:0"), -EINVAL);
    ck_assert_int_eq(links_connect(a.links, "node-b", "127.0.0.1:65536"), -EINVAL);
    ck_assert_int_eq(links_connect(a.links, "node-b", "::1:80"), -EINVAL); /* [::1]:80 */
    ck_assert_int_eq(links_connect(a.links, "node-b", "127.0.0.1:8x"), -EINVAL);
    ck_assert_int_eq(links_connect(a.links, "", "127.0.0.1:80"), -EINVAL);
    ck_assert_int_eq(links_connect(a.links, "a/b", "127.0.0.1:80"), -EINVAL);
    links_forget(a.links, "never-dialed");
    links_destroy(a.links);
    links_destroy(NULL);
}
END_TEST

static char key_dir[64];

static void key_setup(void)
{
    snprintf(key_dir, sizeof(key_dir), "/tmp/check-links.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(key_dir));
}

static void key_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", key_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *write_key(const char *name, const char *text, size_t bytes, mode_t mode)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/%s", key_dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, bytes), (ssize_t)bytes);
    close(fd);
    ck_assert_int_eq(chmod(path, mode), 0);
    return path;
}

START_TEST(test_key_file_rules)
{
    uint8_t key[LINKS_KEY_MAX_BYTES];
    size_t len = 0;
    char err[512];
    const char *good = "0123456789abcdef0123456789ABCDEF\n";

    const char *path = write_key("good", good, strlen(good), 0600);
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), 0);
    ck_assert_uint_eq(len, 32); /* the newline is dropped */
    ck_assert_int_eq(memcmp(key, good, 32), 0);
    path = write_key("read-only", good, 32, 0400); /* no newline: all of it */
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), 0);
    ck_assert_uint_eq(len, 32);

    path = write_key("open", good, strlen(good), 0644);
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), -EPERM);
    ck_assert_msg(strstr(err, "mode 0644") && strstr(err, path), "%s", err);
    path = write_key("group", good, strlen(good), 0640);
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), -EPERM);
    ck_assert_msg(strstr(err, "mode 0640"), "%s", err);

    path = write_key("short", "0123456789\n", 11, 0600);
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "10 bytes"), "%s", err);
    path = write_key("empty", "", 0, 0600);
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), -EINVAL);

    static char big[LINKS_KEY_MAX_BYTES + 10];
    memset(big, 'k', sizeof(big));
    path = write_key("long", big, sizeof(big), 0600);
    ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), -EINVAL);
    path = write_key("small-cap", good, strlen(good), 0600);
    ck_assert_int_eq(links_key_load(path, key, 20, &len, err, sizeof(err)), -ENOSPC);

    ck_assert_int_eq(links_key_load(key_dir, key, sizeof(key), &len, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/missing", key_dir);
    ck_assert_int_eq(links_key_load(missing, key, sizeof(key), &len, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, missing), "%s", err);

    if (geteuid() == 0) { /* root can hand the file to someone else (we test as root) */
        path = write_key("theirs", good, strlen(good), 0600);
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        ck_assert_int_eq(links_key_load(path, key, sizeof(key), &len, err, sizeof(err)), -EPERM);
        ck_assert_msg(strstr(err, "owned by uid 65534"), "%s", err);
    } else {
        fprintf(stderr, "check_links: not root, the owner check is not tried\n");
    }
}
END_TEST

static Suite *links_suite(void)
{
    Suite *s = suite_create("links");
    TCase *tc = tcase_create("links");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_members_link_both_ways);
    tcase_add_test(tc, test_wrong_key_refused_both_ways);
    tcase_add_test(tc, test_not_a_member_refused);
    tcase_add_test(tc, test_raw_garbage);
    tcase_add_test(tc, test_raw_huge_length);
    tcase_add_test(tc, test_raw_request_first);
    tcase_add_test(tc, test_raw_bad_node_name);
    tcase_add_test(tc, test_raw_hello_without_proof);
    tcase_add_test(tc, test_raw_frames_in_pieces_and_handshake_cap);
    tcase_add_test(tc, test_raw_handshakes_limited);
    tcase_add_test(tc, test_raw_per_source_and_member_reserve);
    tcase_add_test(tc, test_raw_forged_frames);
    tcase_add_test(tc, test_raw_hello_without_frame_tags);
    tcase_add_test(tc, test_refusals_logged_at_most_60_a_minute);
    tcase_add_test(tc, test_raw_wrong_mac);
    tcase_add_test(tc, test_raw_silent_dropped_at_deadline);
    tcase_add_test(tc, test_raw_member_then_second_hello);
    tcase_add_test(tc, test_raw_member_frame_over_cap);
    tcase_add_test(tc, test_redial_after_acceptor_restart);
    tcase_add_test(tc, test_hooks_forget_and_destroy);
    tcase_add_test(tc, test_silent_acceptor_dropped_at_deadline);
    tcase_add_test(tc, test_frame_from_acceptor_drops_dialed_link);
    tcase_add_test(tc, test_ipv6);
    tcase_add_test(tc, test_bad_arguments);
    suite_add_tcase(s, tc);
    TCase *keys = tcase_create("key file");
    tcase_add_checked_fixture(keys, key_setup, key_teardown);
    tcase_add_test(keys, test_key_file_rules);
    suite_add_tcase(s, keys);
    return s;
}

int main(void)
{
    return check_run_suite(links_suite());
}
