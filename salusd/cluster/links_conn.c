/* One connection of a daemon link: reading frames (the size cap, proto_decode) and the
 * handshake of links.h, for both the dialer and the acceptor. Every fault closes the
 * connection: an accepted one is freed here, a dialed one goes to links_peer_failed (which
 * dials again). */
#include "frame_read.h"
#include "links-internal.h"
#include "log.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the welcome's mac: the tag of "welcome" at this number, which no frame reaches */
#define WELCOME_SEQ UINT64_MAX

static void on_read(struct bufferevent *bev, void *arg);
static void on_event(struct bufferevent *bev, short events, void *arg);

static void arm_deadline(links_conn_t *c)
{
    struct timeval tv = {.tv_sec = c->deadline_ms / 1000,
                         .tv_usec = (c->deadline_ms % 1000) * 1000};
    event_add(c->deadline, &tv);
}

/* Frames a side may read: small ones until the handshake is done. */
static void set_read_cap(links_conn_t *c)
{
    size_t cap = c->state == LINKS_CONN_UP
                     ? (size_t)c->links->max_frame_bytes + LINK_AUTH_TAG_BYTES
                     : LINKS_HANDSHAKE_MAX_FRAME_BYTES;
    bufferevent_setwatermark(c->bev, EV_READ, 0, PROTO_HEADER_BYTES + cap);
}

void links_conn_free(links_conn_t *c)
{
    if (!c)
        return;
    links_t *l = c->links;
    if (!c->peer) {
        if (c->prev)
            c->prev->next = c->next;
        else
            l->accepted = c->next;
        if (c->next)
            c->next->prev = c->prev;
        if (c->state != LINKS_CONN_UP) {
            l->handshakes--;
            if (c->from_member)
                l->member_handshakes--;
        }
    }
    if (c->deadline)
        event_free(c->deadline);
    if (c->bev)
        bufferevent_free(c->bev);
    link_auth_cleanse(c, sizeof(*c));
    free(c);
}

/* The connection is refused (a fault of the far end, or a step not taken in time): closed,
 * logged at warn, counted. Always -1: c is gone. */
static int refuse(links_conn_t *c, const char *why)
{
    links_t *l = c->links;
    l->stats.refused++;
    if (c->peer) {
        LOG_WARN("link to %s (%s): %s; closing it", c->peer->node, c->addr, why);
        return links_peer_failed(c->peer, why);
    }
    if (links_log_take(l, LINKS_LOG_REFUSED, SALUS_LOG_WARN)) {
        if (c->node[0])
            LOG_WARN("refusing the link from %s (node %s): %s", c->addr, c->node, why);
        else
            LOG_WARN("refusing the link from %s: %s", c->addr, why);
    }
    links_conn_free(c);
    return -1;
}

/* The dialer's frame number c->seq on an up accepted connection did not check: the link is
 * closed (its dialer dials again), nothing of the frame was read. Always -1. */
static int refuse_forged(links_conn_t *c)
{
    links_t *l = c->links;
    l->stats.refused++;
    l->stats.frames_rejected++;
    l->stats.frames_forged++;
    if (links_log_take(l, LINKS_LOG_FORGED, SALUS_LOG_WARN))
        LOG_WARN("refusing the link from %s (node %s): the tag of frame %llu does not check "
                 "(altered, injected, replayed or reordered on the way); nothing of it is "
                 "applied, the link is closed", c->addr, c->node, (unsigned long long)c->seq);
    links_conn_free(c);
    return -1;
}

static int send_frame(links_conn_t *c)
{
    proto_enc_finish(&c->links->enc);
    return bufferevent_write(c->bev, c->links->enc.sbuf.data, c->links->enc.sbuf.size);
}

/* The bin value of key in body, exactly bytes long. */
static const uint8_t *get_bin(const msgpack_object *body, const char *key, size_t bytes)
{
    const msgpack_object *o = proto_get(body, key);
    if (!o || o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != bytes)
        return NULL;
    return (const uint8_t *)o->via.bin.ptr;
}

static void pack_bin(msgpack_packer *pk, const char *key, const uint8_t *data, size_t bytes)
{
    proto_pack_str(pk, key);
    msgpack_pack_bin(pk, bytes);
    msgpack_pack_bin_body(pk, data, bytes);
}

static int is_link_op(const proto_msg_t *msg, proto_kind_t kind, const char *op)
{
    return msg->kind == kind && strcmp(msg->op, op) == 0;
}

/* A node name from the body into out (LINKS_NODE_BYTES); 0 or -1. */
static int get_node(const proto_msg_t *msg, char *out)
{
    if (proto_get_str_copy(&msg->body, "node", out, LINKS_NODE_BYTES) < 0 ||
        !links_node_valid(out)) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

/* Acceptor: the dialer's hello; answers with the challenge. */
static int on_hello(links_conn_t *c, const proto_msg_t *msg)
{
    links_t *l = c->links;
    uint64_t version = 0;
    uint8_t mac[LINK_AUTH_MAC_BYTES];
    if (msg->kind == PROTO_REQUEST)
        return refuse(c, "a request before the handshake");
    if (!is_link_op(msg, PROTO_HELLO, "link"))
        return refuse(c, "the first frame is not a link hello");
    if (proto_get_uint(&msg->body, "version", &version) < 0 || version != PROTO_VERSION) {
        char why[96];
        snprintf(why, sizeof(why), "a hello without protocol version %d", PROTO_VERSION);
        return refuse(c, why);
    }
    if (get_node(msg, c->node) < 0)
        return refuse(c, "a hello without a valid node name");
    char frames[32] = "";
    if (proto_get_str_copy(&msg->body, "frames", frames, sizeof(frames)) < 0 ||
        strcmp(frames, LINKS_FRAME_AUTH) != 0)
        return refuse(c, "a hello without per-frame tags (\"frames\": \"" LINKS_FRAME_AUTH
                         "\"; an older salusd?)");
    const uint8_t *nonce = get_bin(&msg->body, "nonce", LINK_AUTH_NONCE_BYTES);
    if (!nonce)
        return refuse(c, "a hello without a 32-byte nonce");
    memcpy(c->their_nonce, nonce, LINK_AUTH_NONCE_BYTES);
    if (link_auth_nonce(c->own_nonce) < 0 ||
        link_auth_mac(LINK_AUTH_ACCEPTOR, l->key, l->key_len, c->their_nonce, c->own_nonce,
                      l->node, c->node, mac) < 0)
        return refuse(c, "no nonce or mac could be made here");
    proto_enc_begin(&l->enc, PROTO_REPLY, msg->id, "challenge", 3);
    proto_pack_kv_str(&l->enc.pk, "node", l->node);
    pack_bin(&l->enc.pk, "nonce", c->own_nonce, LINK_AUTH_NONCE_BYTES);
    pack_bin(&l->enc.pk, "mac", mac, LINK_AUTH_MAC_BYTES);
    if (send_frame(c) < 0)
        return refuse(c, "out of memory");
    c->state = LINKS_CONN_WAIT_PROVE;
    arm_deadline(c);
    return 0;
}

static void close_when_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    links_conn_free(arg);
}

/* Acceptor: the dialer's proof; welcomes a member that proved the key. */
static int on_prove(links_conn_t *c, const proto_msg_t *msg)
{
    links_t *l = c->links;
    if (!is_link_op(msg, PROTO_REQUEST, "prove"))
        return refuse(c, "the frame after the challenge is not a prove");
    const msgpack_object *mac = proto_get(&msg->body, "mac");
    if (!mac || mac->type != MSGPACK_OBJECT_BIN)
        return refuse(c, "a prove without a mac");
    if (!link_auth_check(LINK_AUTH_DIALER, l->key, l->key_len, c->own_nonce, c->their_nonce,
                         c->node, l->node, (const uint8_t *)mac->via.bin.ptr,
                         mac->via.bin.size))
        return refuse(c, "the mac does not prove the cluster key");
    int member = links_call_is_member(l, c->node);
    if (member < 0)
        return -1;
    if (!member) {
        /* it proved the key: it may learn why it is refused */
        char message[128];
        snprintf(message, sizeof(message), "node %s is not a member of this cluster", c->node);
        l->stats.refused++;
        if (links_log_take(l, LINKS_LOG_REFUSED, SALUS_LOG_WARN))
            LOG_WARN("refusing the link from %s (node %s): not a member", c->addr, c->node);
        proto_enc_error(&l->enc, msg->id, PROTO_EPERM, message);
        bufferevent_write(c->bev, l->enc.sbuf.data, l->enc.sbuf.size);
        c->state = LINKS_CONN_CLOSING;
        bufferevent_disable(c->bev, EV_READ);
        bufferevent_setcb(c->bev, NULL, close_when_written, on_event, c);
        return -1; /* reads nothing more; freed when written, at an error or the deadline */
    }
    uint8_t welcome_mac[LINK_AUTH_TAG_BYTES];
    if (link_auth_session_key(l->key, l->key_len, c->their_nonce, c->own_nonce, c->node,
                              l->node, c->session_key) < 0 ||
        link_auth_frame_tag(c->session_key, WELCOME_SEQ, NULL, 0, (const uint8_t *)"welcome",
                            7, welcome_mac) < 0)
        return refuse(c, "no session key could be made here");
    proto_enc_begin(&l->enc, PROTO_REPLY, msg->id, "welcome", 1);
    pack_bin(&l->enc.pk, "mac", welcome_mac, sizeof(welcome_mac));
    if (send_frame(c) < 0)
        return refuse(c, "out of memory");
    /* the dialer keeps one connection to us: an older one from its node is stale */
    for (links_conn_t *o = l->accepted, *next; o; o = next) {
        next = o->next;
        if (o != c && o->state == LINKS_CONN_UP && strcmp(o->node, c->node) == 0) {
            LOG_INFO("link from %s (node %s) replaces the one from %s", c->addr, c->node,
                     o->addr);
            links_conn_free(o);
        }
    }
    c->state = LINKS_CONN_UP;
    c->seq = 0;
    l->handshakes--;
    if (c->from_member)
        l->member_handshakes--;
    l->stats.accepted++;
    event_del(c->deadline);
    set_read_cap(c);
    LOG_INFO("link from %s (node %s) is up", c->addr, c->node);
    return 0;
}

/* Dialer: the acceptor's challenge; answers with the proof. */
static int on_challenge(links_conn_t *c, const proto_msg_t *msg)
{
    links_t *l = c->links;
    char node[LINKS_NODE_BYTES];
    uint8_t mac[LINK_AUTH_MAC_BYTES];
    if (!is_link_op(msg, PROTO_REPLY, "challenge"))
        return refuse(c, "the answer to the hello is not a challenge");
    if (get_node(msg, node) < 0 || strcmp(node, c->node) != 0)
        return refuse(c, "the far end is not the node dialed");
    const uint8_t *nonce = get_bin(&msg->body, "nonce", LINK_AUTH_NONCE_BYTES);
    const msgpack_object *their_mac = proto_get(&msg->body, "mac");
    if (!nonce || !their_mac || their_mac->type != MSGPACK_OBJECT_BIN)
        return refuse(c, "a challenge without a nonce or a mac");
    memcpy(c->their_nonce, nonce, LINK_AUTH_NONCE_BYTES);
    if (!link_auth_check(LINK_AUTH_ACCEPTOR, l->key, l->key_len, c->own_nonce, c->their_nonce,
                         c->node, l->node, (const uint8_t *)their_mac->via.bin.ptr,
                         their_mac->via.bin.size))
        return refuse(c, "the mac does not prove the cluster key");
    if (link_auth_mac(LINK_AUTH_DIALER, l->key, l->key_len, c->their_nonce, c->own_nonce,
                      l->node, c->node, mac) < 0)
        return refuse(c, "no mac could be made here");
    proto_enc_begin(&l->enc, PROTO_REQUEST, msg->id, "prove", 1);
    pack_bin(&l->enc.pk, "mac", mac, LINK_AUTH_MAC_BYTES);
    if (send_frame(c) < 0)
        return refuse(c, "out of memory");
    c->state = LINKS_CONN_WAIT_WELCOME;
    arm_deadline(c);
    return 0;
}

/* Dialer: the acceptor's welcome (or its error: not a member). */
static int on_welcome(links_conn_t *c, const proto_msg_t *msg)
{
    if (msg->kind == PROTO_ERROR) {
        char why[200], message[160] = "";
        proto_get_str_copy(&msg->body, "message", message, sizeof(message));
        snprintf(why, sizeof(why), "refused by the far end: %s", message);
        LOG_WARN("link to %s (%s): %s", c->node, c->addr, why);
        return links_peer_failed(c->peer, why);
    }
    if (!is_link_op(msg, PROTO_REPLY, "welcome"))
        return refuse(c, "the answer to the proof is not a welcome");
    links_t *l = c->links;
    const uint8_t *mac = get_bin(&msg->body, "mac", LINK_AUTH_TAG_BYTES);
    if (!mac)
        return refuse(c, "a welcome without a mac (an older salusd, without per-frame tags?)");
    if (link_auth_session_key(l->key, l->key_len, c->own_nonce, c->their_nonce, l->node,
                              c->node, c->session_key) < 0)
        return refuse(c, "no session key could be made here");
    if (!link_auth_frame_check(c->session_key, WELCOME_SEQ, NULL, 0, (const uint8_t *)"welcome",
                               7, mac))
        return refuse(c, "the welcome's mac does not check");
    c->seq = 0;
    c->state = LINKS_CONN_UP;
    event_del(c->deadline);
    set_read_cap(c);
    return links_peer_up(c->peer);
}

/* One decoded frame; 0 to read on, -1 when c (or links) is gone. */
static int handle(links_conn_t *c, const proto_msg_t *msg)
{
    links_t *l = c->links;
    switch (c->state) {
    case LINKS_CONN_WAIT_HELLO:
        return on_hello(c, msg);
    case LINKS_CONN_WAIT_PROVE:
        return on_prove(c, msg);
    case LINKS_CONN_WAIT_CHALLENGE:
        return on_challenge(c, msg);
    case LINKS_CONN_WAIT_WELCOME:
        return on_welcome(c, msg);
    case LINKS_CONN_UP:
        if (c->peer)
            return refuse(c, "a frame on a link this daemon dialed (links carry one way)");
        if (msg->kind != PROTO_REQUEST)
            return refuse(c, "a frame other than a request after the handshake");
        l->stats.received++;
        return links_call_on_message(l, c->node, msg);
    default:
        return refuse(c, "a frame at a point where none is expected");
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    links_conn_t *c = arg;
    links_t *l = c->links;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        if (evbuffer_get_length(in) == 0)
            return;
        if (c->peer && c->state == LINKS_CONN_UP) { /* its tags would be checked with ours */
            refuse(c, "a frame on a link this daemon dialed (links carry one way)");
            return;
        }
        /* once up, a frame ends with its tag */
        size_t tag = c->state == LINKS_CONN_UP ? LINK_AUTH_TAG_BYTES : 0;
        uint32_t cap = c->state == LINKS_CONN_UP ? l->max_frame_bytes + LINK_AUTH_TAG_BYTES
                                                 : LINKS_HANDSHAKE_MAX_FRAME_BYTES;
        frame_read_t f;
        char bad[128];
        int rc = frame_read_next(in, (uint32_t)tag + 1, cap, &f, bad, sizeof(bad));
        if (rc == FRAME_READ_MORE)
            return;
        if (rc < 0) {
            if (rc == -EMSGSIZE)
                l->stats.frames_rejected++;
            refuse(c, bad);
            return;
        }
        size_t body = f.payload_bytes - tag;
        if (tag && !link_auth_frame_check(c->session_key, c->seq, f.frame, PROTO_HEADER_BYTES,
                                          f.payload, body, f.payload + body)) {
            refuse_forged(c); /* before anything of the frame is parsed */
            return;
        }
        if (tag)
            c->seq++;
        proto_msg_t msg;
        const char *why = "malformed";
        rc = proto_decode(f.payload, body, &msg, &why);
        frame_read_drain(in, &f);
        if (rc < 0) {
            char text[160];
            snprintf(text, sizeof(text), "a frame that does not decode (%s)", why);
            l->stats.frames_rejected++;
            refuse(c, text);
            return;
        }
        rc = handle(c, &msg);
        proto_msg_free(&msg);
        if (rc < 0)
            return;
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    links_conn_t *c = arg;
    if (c->peer) { /* a far end that is silent or away: said once while it stays so */
        const char *why = c->state == LINKS_CONN_DIALING
                              ? "no connection within the handshake deadline"
                              : "no answer within the handshake deadline";
        SALUS_LOG(c->peer->failures ? SALUS_LOG_DEBUG : SALUS_LOG_WARN, "link to %s (%s): %s",
                  c->node, c->addr, why);
        links_peer_failed(c->peer, why);
    } else if (c->state == LINKS_CONN_CLOSING) {
        links_conn_free(c);
    } else {
        refuse(c, "the handshake did not go on within its deadline");
    }
}

/* Dialer: connected; says hello. */
static void on_connected(links_conn_t *c)
{
    links_t *l = c->links;
    if (link_auth_nonce(c->own_nonce) < 0) {
        refuse(c, "no nonce could be made here");
        return;
    }
    proto_enc_begin(&l->enc, PROTO_HELLO, 0, "link", 4);
    proto_pack_kv_uint(&l->enc.pk, "version", PROTO_VERSION);
    proto_pack_kv_str(&l->enc.pk, "frames", LINKS_FRAME_AUTH);
    proto_pack_kv_str(&l->enc.pk, "node", l->node);
    pack_bin(&l->enc.pk, "nonce", c->own_nonce, LINK_AUTH_NONCE_BYTES);
    if (send_frame(c) < 0) {
        refuse(c, "out of memory");
        return;
    }
    c->state = LINKS_CONN_WAIT_CHALLENGE;
    arm_deadline(c);
    bufferevent_enable(c->bev, EV_READ);
}

static void on_event(struct bufferevent *bev, short events, void *arg)
{
    (void)bev;
    links_conn_t *c = arg;
    if (events & BEV_EVENT_CONNECTED) {
        on_connected(c);
        return;
    }
    if (!(events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    char why[160];
    int err = EVUTIL_SOCKET_ERROR();
    if (events & BEV_EVENT_EOF)
        snprintf(why, sizeof(why), "closed by the far end%s",
                 c->state == LINKS_CONN_UP ? "" : " during the handshake");
    else
        snprintf(why, sizeof(why), "%s", err ? evutil_socket_error_to_string(err)
                                             : "connection error");
    if (c->peer) {
        /* a node that stays away is dialed every second: say so once */
        SALUS_LOG(c->state == LINKS_CONN_UP || !c->peer->failures ? SALUS_LOG_INFO
                                                                   : SALUS_LOG_DEBUG,
                  "link to %s (%s): %s", c->node, c->addr, why);
        links_peer_failed(c->peer, why);
        return;
    }
    if (c->state == LINKS_CONN_UP)
        LOG_INFO("link from %s (node %s): %s", c->addr, c->node, why);
    else
        LOG_DEBUG("connection from %s: %s", c->addr, why);
    links_conn_free(c);
}

int links_conn_send(links_conn_t *c, const uint8_t *frame, size_t frame_len)
{
    uint8_t head[PROTO_HEADER_BYTES], tag[LINK_AUTH_TAG_BYTES];
    size_t body = frame_len - PROTO_HEADER_BYTES;
    uint32_t len = (uint32_t)(body + LINK_AUTH_TAG_BYTES);
    head[0] = (uint8_t)(len >> 24);
    head[1] = (uint8_t)(len >> 16);
    head[2] = (uint8_t)(len >> 8);
    head[3] = (uint8_t)len;
    if (link_auth_frame_tag(c->session_key, c->seq, head, sizeof(head),
                            frame + PROTO_HEADER_BYTES, body, tag) < 0)
        return -ENOMEM;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    /* one frame whole or nothing: a part of one would break every later frame's tag */
    struct evbuffer *one = evbuffer_new();
    int rc = one && evbuffer_add(one, head, sizeof(head)) == 0 &&
                     evbuffer_add(one, frame + PROTO_HEADER_BYTES, body) == 0 &&
                     evbuffer_add(one, tag, sizeof(tag)) == 0 &&
                     evbuffer_add_buffer(out, one) == 0
                 ? 0
                 : -ENOMEM;
    if (one)
        evbuffer_free(one);
    if (rc == 0)
        c->seq++;
    return rc;
}

links_conn_t *links_conn_new(links_t *links, links_peer_t *peer, struct bufferevent *bev,
                             const char *addr)
{
    links_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->deadline = evtimer_new(links->base, on_deadline, c);
    if (!c->deadline)
        goto fail;
    c->links = links;
    c->peer = peer;
    c->deadline_ms = links->handshake_timeout_ms;
    c->bev = bev;
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    if (peer) {
        c->state = LINKS_CONN_DIALING;
        snprintf(c->node, sizeof(c->node), "%s", peer->node);
    } else {
        c->state = LINKS_CONN_WAIT_HELLO;
        c->next = links->accepted;
        if (c->next)
            c->next->prev = c;
        links->accepted = c;
        links->handshakes++;
    }
    /* a slot's hand-off is one small frame: send it now, not after Nagle's wait */
    int one = 1;
    setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bufferevent_setcb(bev, on_read, NULL, on_event, c);
    set_read_cap(c);
    if (!peer)
        bufferevent_enable(bev, EV_READ);
    arm_deadline(c);
    return c;
fail:
    free(c);
    bufferevent_free(bev);
    return NULL;
}
