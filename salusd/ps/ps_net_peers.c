/* ps_net's peers (one UCP endpoint each) and sends.
 *
 * Order: messages to one peer go over the one endpoint ps_net keeps for it. UCP sends a
 * endpoint's active messages on that endpoint's single AM lane (one UCT endpoint: for tcp one
 * connection, for shared memory one FIFO, for RDMA one reliable-connected QP), each of which
 * delivers in order; a message sent in fragments is handed to the handler whole
 * (UCP_AM_FLAG_WHOLE_MSG) after its last fragment, which travels before the next message's
 * first; a rendezvous message's handler runs when its RTS arrives, also on that lane. So the
 * receiver's handler sees one peer's messages in the order sent. What UCX does not order is
 * when a rendezvous payload has finished arriving relative to the messages after it: the
 * receiver queues every message per peer and delivers one only when all earlier ones were
 * (ps_net_recv.c). */
#include "log.h"
#include "ps_net-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

ps_net_peer_t *ps_net_find_peer(const ps_net_t *net, const char *node)
{
    for (int i = 0; i < PS_NET_MAX_PEERS; i++)
        if (net->peers[i] && strcmp(net->peers[i]->node, node) == 0)
            return net->peers[i];
    return NULL;
}

static int peer_slot(const ps_net_t *net, const ps_net_peer_t *peer)
{
    for (int i = 0; i < PS_NET_MAX_PEERS; i++)
        if (net->peers[i] == peer)
            return i;
    return -1;
}

/* A send's end: out of net->sends, onto the queue whose `sent` callbacks the dispatch runs. */
void ps_net_send_finish(ps_net_t *net, ps_net_send_t *s, int status)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        net->sends = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->status = s->forced ? s->forced : status;
    if (s->status == 0) {
        net->stats.messages_sent++;
        net->stats.bytes_sent += s->bytes;
    } else {
        net->stats.send_errors++;
    }
    s->prev = s->next = NULL;
    if (net->done_tail)
        net->done_tail->next = s;
    else
        net->done = s;
    net->done_tail = s;
    ps_net_schedule(net);
}

/* UCX's completion of a send (from ucp_worker_progress or an endpoint's close). */
static void on_sent(void *request, ucs_status_t status, void *user_data)
{
    ps_net_send_t *s = user_data;
    ucp_request_free(request);
    s->request = NULL;
    ps_net_send_finish(s->net, s, ps_net_status_errno(status));
}

static void on_closed(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ps_net_t *net = user_data;
    ucp_request_free(request);
    net->closing--;
}

/* Closes without waiting for the peer (it may be dead): UCX completes the endpoint's
 * outstanding requests with UCS_ERR_CANCELED, then the close itself. */
static void close_ep(ps_net_t *net, ucp_ep_h ep)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = on_closed,
        .user_data = net,
    };
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(request))
        net->closing++;
    else if (UCS_PTR_IS_ERR(request))
        LOG_DEBUG("UCX: ucp_ep_close_nbx: %s", ucs_status_string(UCS_PTR_STATUS(request)));
    ps_net_kick(net);
}

void ps_net_peer_drop(ps_net_t *net, ps_net_peer_t *peer, int why)
{
    for (ps_net_send_t *s = net->sends; s; s = s->next) {
        if (s->peer == peer) {
            s->peer = NULL;
            s->forced = why;
        }
    }
    ps_net_peer_discard_recvs(net, peer);
    if (peer->ep)
        close_ep(net, peer->ep);
    ps_net_auth_free(peer->send_auth);
    ps_net_auth_free(peer->recv_auth);
    for (int i = 0; i < PS_NET_PREV_TOKENS; i++)
        ps_net_auth_free(peer->prev_recv_auth[i]);
    free(peer->addr);
    free(peer);
}

int ps_net_set_integrity(ps_net_t *net, const uint8_t master[32])
{
    if (!net || !master)
        return -EINVAL;
    for (int i = 0; i < PS_NET_MAX_PEERS; i++)
        if (net->peers[i])
            return -EBUSY;
    memcpy(net->master, master, PS_NET_AUTH_KEY_BYTES);
    net->integrity = 1;
    net->forged_log = (salus_log_limit_t)SALUS_LOG_LIMIT_INIT(60, 60);
    return 0;
}

/* integrity on: the keys for the tokens (NULL ones stay) into *send, *recv; 0 or -ENOMEM */
static int make_auths(ps_net_t *net, const char *node, uint64_t send_token, uint64_t recv_token,
                      ps_net_auth_t **send, ps_net_auth_t **recv)
{
    *send = *recv = NULL;
    if (!net->integrity)
        return 0;
    *send = ps_net_auth_new(net->master, net->self, node, send_token);
    *recv = ps_net_auth_new(net->master, node, net->self, recv_token);
    if (!*send || !*recv) {
        ps_net_auth_free(*send);
        ps_net_auth_free(*recv);
        *send = *recv = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* The endpoints that reported an error, closed from the dispatch (not inside UCX's handler). */
void ps_net_close_failed(ps_net_t *net)
{
    for (int i = 0; i < PS_NET_MAX_PEERS; i++) {
        ps_net_peer_t *peer = net->peers[i];
        if (peer && peer->close_needed) {
            peer->close_needed = 0;
            for (ps_net_send_t *s = net->sends; s; s = s->next)
                if (s->peer == peer && !s->forced)
                    s->forced = -ECONNRESET;
            ucp_ep_h ep = peer->ep;
            peer->ep = NULL;
            close_ep(net, ep);
        }
    }
}

/* The endpoint failed (the peer's process died, its connection broke): from progress. */
static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ps_net_peer_t *peer = arg;
    if (peer->failed)
        return;
    LOG_WARN("ps_net: the endpoint to %s failed: %s", peer->node, ucs_status_string(status));
    peer->failed = 1;
    peer->close_needed = 1;
    ps_net_schedule(peer->net);
}

/* peer's receive token is about to change: the current one (and its key) becomes the newest
 * of those before, the oldest of them forgotten */
static void remember_recv_token(ps_net_peer_t *peer)
{
    enum { LAST = PS_NET_PREV_TOKENS - 1 };
    ps_net_auth_free(peer->prev_recv_auth[LAST]);
    memmove(&peer->prev_recv_token[1], &peer->prev_recv_token[0],
            LAST * sizeof(peer->prev_recv_token[0]));
    memmove(&peer->prev_recv_auth[1], &peer->prev_recv_auth[0],
            LAST * sizeof(peer->prev_recv_auth[0]));
    peer->prev_recv_token[0] = peer->recv_token;
    peer->prev_recv_auth[0] = peer->recv_auth;
    peer->recv_auth = NULL;
}

int ps_net_add_peer(ps_net_t *net, const char *node, const void *addr, size_t addr_len,
                    uint64_t send_token, uint64_t recv_token)
{
    if (!net || !node || !*node || strlen(node) >= PS_NET_NODE_BYTES || !addr || !addr_len)
        return -EINVAL;
    if (net->destroying)
        return -ESHUTDOWN;
    ps_net_peer_t *old = ps_net_find_peer(net, node);
    if (old && !old->failed && old->ep && old->addr_len == addr_len &&
        memcmp(old->addr, addr, addr_len) == 0) {
        /* the same worker (a link that dropped and came back): new tokens, the endpoint and
         * what is on its way kept; the peer's messages with the token before still count
         * until it has the new one */
        ps_net_auth_t *send_auth, *recv_auth;
        if (make_auths(net, node, send_token, recv_token, &send_auth, &recv_auth) < 0)
            return -ENOMEM;
        if (old->recv_token != recv_token)
            remember_recv_token(old);
        old->send_token = send_token;
        old->recv_token = recv_token;
        if (net->integrity) {
            ps_net_auth_free(old->send_auth);
            ps_net_auth_free(old->recv_auth);
            old->send_auth = send_auth;
            old->recv_auth = recv_auth;
        }
        return 0;
    }
    if (old) {
        net->peers[peer_slot(net, old)] = NULL;
        ps_net_peer_drop(net, old, -ECONNRESET);
    }
    int slot = peer_slot(net, NULL);
    if (slot < 0)
        return -ENOSPC;
    ps_net_peer_t *peer = calloc(1, sizeof(*peer));
    if (!peer)
        return -ENOMEM;
    peer->net = net;
    strcpy(peer->node, node); /* length checked above */
    peer->send_token = send_token;
    peer->recv_token = recv_token;
    peer->addr = malloc(addr_len);
    if (!peer->addr ||
        make_auths(net, node, send_token, recv_token, &peer->send_auth, &peer->recv_auth) < 0) {
        free(peer->addr);
        free(peer);
        return -ENOMEM;
    }
    memcpy(peer->addr, addr, addr_len);
    peer->addr_len = addr_len;
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = on_ep_error, .arg = peer},
    };
    ucs_status_t status = ucp_ep_create(net->worker, &params, &peer->ep);
    if (status != UCS_OK) {
        LOG_WARN("UCX: ucp_ep_create to %s: %s", node, ucs_status_string(status));
        ps_net_auth_free(peer->send_auth);
        ps_net_auth_free(peer->recv_auth);
        free(peer->addr);
        free(peer);
        return ps_net_status_errno(status);
    }
    net->peers[slot] = peer;
    ps_net_kick(net);
    return 0;
}

void ps_net_remove_peer(ps_net_t *net, const char *node)
{
    if (!net || !node)
        return;
    ps_net_peer_t *peer = ps_net_find_peer(net, node);
    if (!peer)
        return;
    net->peers[peer_slot(net, peer)] = NULL;
    ps_net_peer_drop(net, peer, -ECONNRESET);
    ps_net_schedule(net);
}

int ps_net_has_peer(const ps_net_t *net, const char *node)
{
    if (!net || !node)
        return 0;
    const ps_net_peer_t *peer = ps_net_find_peer(net, node);
    return peer && !peer->failed;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int ps_net_send(ps_net_t *net, const char *node, const void *header, size_t header_len,
                const void *payload, size_t payload_len, ps_net_sent_fn sent, void *ctx)
{
    if (!net || !node || !sent || (header_len && !header) || (payload_len && !payload))
        return -EINVAL;
    if (net->destroying)
        return -ESHUTDOWN;
    if (header_len > PS_NET_MAX_HEADER || payload_len > PS_NET_MAX_PAYLOAD)
        return -EMSGSIZE;
    ps_net_peer_t *peer = ps_net_find_peer(net, node);
    if (!peer)
        return -ENOENT;
    if (peer->failed || !peer->ep)
        return -ECONNRESET;
    size_t extra = net->integrity ? PS_NET_WIRE_AUTH_EXTRA : 0;
    size_t wire_len = PS_NET_WIRE_FIXED + extra + header_len;
    ps_net_send_t *s = calloc(1, sizeof(*s) + wire_len);
    if (!s)
        return -ENOMEM;
    s->net = net;
    s->peer = peer;
    s->sent = sent;
    s->ctx = ctx;
    s->bytes = header_len + payload_len;
    s->wire_len = wire_len;
    put_le(s->wire, PS_NET_WIRE_MAGIC, 4);
    put_le(s->wire + 4, net->integrity ? PS_NET_WIRE_VERSION_AUTH : PS_NET_WIRE_VERSION, 2);
    put_le(s->wire + 6, header_len, 2);
    strncpy((char *)s->wire + 8, net->self, PS_NET_NODE_BYTES); /* NUL-padded */
    put_le(s->wire + 8 + PS_NET_NODE_BYTES, peer->send_token, 8);
    if (header_len)
        memcpy(s->wire + PS_NET_WIRE_FIXED + extra, header, header_len);
    if (net->integrity) { /* the tag over the header (its tag zero here) and the payload */
        put_le(s->wire + PS_NET_WIRE_SEQ_AT, ++net->auth_seq, 8);
        if (!peer->send_auth ||
            ps_net_auth_tag(peer->send_auth, net->auth_seq, s->wire, wire_len, payload,
                            payload_len, s->wire + PS_NET_WIRE_TAG_AT) < 0) {
            free(s);
            net->stats.send_errors++;
            return -EIO;
        }
    }

    /* in net->sends before UCX sees it */
    s->next = net->sends;
    if (net->sends)
        net->sends->prev = s;
    net->sends = s;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = on_sent,
        .user_data = s,
    };
    ucs_status_ptr_t request = ucp_am_send_nbx(peer->ep, PS_NET_AM_ID, s->wire, wire_len,
                                               payload, payload_len, &param);
    if (UCS_PTR_IS_ERR(request)) {
        net->sends = s->next;
        if (s->next)
            s->next->prev = NULL;
        free(s);
        net->stats.send_errors++;
        return ps_net_status_errno(UCS_PTR_STATUS(request));
    }
    if (request)
        s->request = request;
    else
        ps_net_send_finish(net, s, 0); /* done already: `sent` runs from the dispatch */
    ps_net_kick(net);
    return 0;
}
