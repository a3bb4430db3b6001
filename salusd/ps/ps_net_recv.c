/* ps_net's receiving: the one active-message handler checks our header (magic, version,
 * lengths, sender, token) against the known peers and drops anything else; a message taken is
 * queued on its peer and delivered from the dispatch, in order: eager data at once (held in
 * UCX's descriptor when UCX lets us keep it, else copied), rendezvous data once it has arrived
 * in a buffer of its size (ucp_am_recv_data_nbx). No length from the wire is used before it is
 * checked against what was received. */
#include "log.h"
#include "ps_net-internal.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Where token is among peer's receive tokens before the current one, or -1 */
static int prev_token_index(const ps_net_peer_t *peer, uint64_t token)
{
    for (int i = 0; token && i < PS_NET_PREV_TOKENS; i++)
        if (peer->prev_recv_token[i] == token)
            return i;
    return -1;
}

/* Our header's checks: the peer it comes from, or NULL (why says which check failed). */
static ps_net_peer_t *check_header(ps_net_t *net, const uint8_t *h, size_t len,
                                   size_t *caller_len, const char **why)
{
    if (len < PS_NET_WIRE_FIXED) {
        *why = "short header";
        return NULL;
    }
    if (get_le(h, 4) != PS_NET_WIRE_MAGIC ||
        (get_le(h + 4, 2) != PS_NET_WIRE_VERSION && get_le(h + 4, 2) != PS_NET_WIRE_VERSION_AUTH)) {
        *why = "wrong magic or version";
        return NULL;
    }
    uint64_t version = get_le(h + 4, 2);
    if (version != (net->integrity ? PS_NET_WIRE_VERSION_AUTH : PS_NET_WIRE_VERSION)) {
        *why = net->integrity ? "a message without a tag (--ps-net-integrity is on here)"
                              : "a tagged message (--ps-net-integrity is off here)";
        return NULL;
    }
    size_t extra = net->integrity ? PS_NET_WIRE_AUTH_EXTRA : 0;
    *caller_len = (size_t)get_le(h + 6, 2);
    if (*caller_len > PS_NET_MAX_HEADER || len != PS_NET_WIRE_FIXED + extra + *caller_len) {
        *why = "header length does not match";
        return NULL;
    }
    const char *sender = (const char *)h + 8;
    if (!sender[0] || !memchr(sender, '\0', PS_NET_NODE_BYTES)) {
        *why = "malformed sender";
        return NULL;
    }
    ps_net_peer_t *peer = ps_net_find_peer(net, sender);
    if (!peer) {
        *why = "unknown sender";
        return NULL;
    }
    uint64_t token = get_le(h + 8 + PS_NET_NODE_BYTES, 8);
    if (token != peer->recv_token && prev_token_index(peer, token) < 0) {
        *why = "wrong token";
        return NULL;
    }
    return peer;
}

static void unlink_receiving(ps_net_t *net, ps_net_recv_t *r)
{
    if (r->iprev)
        r->iprev->inext = r->inext;
    else if (net->receiving == r)
        net->receiving = r->inext;
    if (r->inext)
        r->inext->iprev = r->iprev;
    r->iprev = r->inext = NULL;
}

void ps_net_recv_free(ps_net_t *net, ps_net_recv_t *r)
{
    unlink_receiving(net, r);
    if (r->ucx_data && net->worker)
        ucp_am_data_release(net->worker, r->ucx_data);
    free(r->buffer);
    free(r);
}

/* The rendezvous data arrived (or failed, or was cancelled). */
static void on_rndv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ps_net_recv_t *r = user_data;
    ps_net_t *net = r->net;
    ucp_request_free(request);
    r->request = NULL;
    if (!r->peer) { /* orphaned: its peer was removed meanwhile */
        ps_net_recv_free(net, r);
        return;
    }
    unlink_receiving(net, r);
    r->ready = 1;
    r->failed = status != UCS_OK || length != r->payload_len;
    if (r->failed)
        LOG_WARN("ps_net: a message from %s did not arrive: %s", r->peer->node,
                 ucs_status_string(status));
    ps_net_schedule(net);
}

static void enqueue(ps_net_peer_t *peer, ps_net_recv_t *r)
{
    if (peer->recv_tail)
        peer->recv_tail->next = r;
    else
        peer->recv_head = r;
    peer->recv_tail = r;
}

ucs_status_t ps_net_on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    ps_net_t *net = arg;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (net->destroying)
        return UCS_OK;
    const char *why = NULL;
    size_t caller_len = 0;
    ps_net_peer_t *peer = check_header(net, header, header_length, &caller_len, &why);
    if (peer && length > PS_NET_MAX_PAYLOAD) {
        why = "payload too big";
        peer = NULL;
    }
    if (!peer) {
        net->stats.dropped++;
        LOG_DEBUG("ps_net: dropped a message: %s", why);
        /* a rendezvous sender learns of the refusal; an eager one cannot */
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    }
    ps_net_recv_t *r = calloc(1, sizeof(*r) + header_length);
    if (!r)
        goto no_memory;
    r->net = net;
    r->peer = peer;
    r->payload_len = length;
    r->header_len = caller_len;
    r->wire_len = header_length;
    r->header_at = header_length - caller_len;
    memcpy(r->wire, header, header_length);
    r->token = get_le(r->wire + 8 + PS_NET_NODE_BYTES, 8);
    if (net->integrity)
        r->seq = get_le(r->wire + PS_NET_WIRE_SEQ_AT, 8);
    ucs_status_t keep = UCS_OK;
    if (rndv) {
        r->buffer = malloc(length ? length : 1);
        if (!r->buffer)
            goto no_memory;
        ucp_request_param_t rp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.recv_am = on_rndv_done,
            .user_data = r,
        };
        /* UCX owns the descriptor from here, whatever this returns */
        ucs_status_ptr_t request = ucp_am_recv_data_nbx(net->worker, data, r->buffer, length, &rp);
        if (UCS_PTR_IS_ERR(request)) {
            LOG_WARN("UCX: ucp_am_recv_data_nbx from %s: %s", peer->node,
                     ucs_status_string(UCS_PTR_STATUS(request)));
            r->ready = r->failed = 1;
        } else if (request) {
            r->request = request;
            r->inext = net->receiving;
            if (net->receiving)
                net->receiving->iprev = r;
            net->receiving = r;
        } else {
            r->ready = 1;
        }
    } else if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        r->ucx_data = data; /* UCX keeps it until ucp_am_data_release */
        r->ready = 1;
        keep = UCS_INPROGRESS;
    } else {
        if (length) {
            r->buffer = malloc(length);
            if (!r->buffer)
                goto no_memory;
            memcpy(r->buffer, data, length);
        }
        r->ready = 1;
    }
    enqueue(peer, r);
    if (r->ready)
        ps_net_schedule(net);
    return keep;
no_memory:
    if (r)
        free(r->buffer);
    free(r);
    net->stats.dropped++;
    LOG_WARN("ps_net: dropped a message of %zu bytes from %s: out of memory", length, peer->node);
    return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
}

/* A removed peer's messages: the ones still arriving stay with UCX until it calls back
 * (orphaned), the rest go now. */
void ps_net_peer_discard_recvs(ps_net_t *net, ps_net_peer_t *peer)
{
    ps_net_recv_t *r = peer->recv_head;
    peer->recv_head = peer->recv_tail = NULL;
    while (r) {
        ps_net_recv_t *next = r->next;
        r->next = NULL;
        if (r->request) {
            r->peer = NULL;
            ucp_request_cancel(net->worker, r->request);
        } else {
            ps_net_recv_free(net, r);
        }
        r = next;
    }
}

/* Integrity on: r's tag checks under the key of the token it came with, and its number is
 * above the last one taken from peer (which it becomes). */
static int tag_checks(ps_net_t *net, ps_net_peer_t *peer, ps_net_recv_t *r, const void *payload)
{
    (void)net;
    int prev = prev_token_index(peer, r->token);
    ps_net_auth_t *auth = r->token == peer->recv_token ? peer->recv_auth
                          : prev >= 0                  ? peer->prev_recv_auth[prev]
                                                       : NULL;
    if (!auth || r->seq <= peer->recv_seq || r->wire_len < PS_NET_WIRE_TAG_AT + PS_NET_AUTH_TAG_BYTES)
        return 0;
    uint8_t tag[PS_NET_AUTH_TAG_BYTES];
    memcpy(tag, r->wire + PS_NET_WIRE_TAG_AT, sizeof(tag));
    memset(r->wire + PS_NET_WIRE_TAG_AT, 0, sizeof(tag)); /* as it was tagged */
    if (!ps_net_auth_check(auth, r->seq, r->wire, r->wire_len, payload, r->payload_len, tag))
        return 0;
    peer->recv_seq = r->seq;
    return 1;
}

/* Every peer's ready messages, in order, up to the first one still arriving, and up to
 * PS_NET_TURN_BYTES of payload in one loop turn: the rest go from a zero timer, after the
 * loop has seen its sockets (the etcd lease's keepalives among them; a flood of large updates
 * or pull replies would otherwise hold it for seconds). A callback may add or remove peers:
 * the peer is looked up again after each delivery. */
#define PS_NET_TURN_BYTES (16u << 20)
void ps_net_deliver(ps_net_t *net)
{
    size_t budget = PS_NET_TURN_BYTES;
    uint64_t said = 0;
    for (int i = 0; i < PS_NET_MAX_PEERS; i++) {
        ps_net_peer_t *peer;
        while ((peer = net->peers[i]) != NULL && peer->recv_head && peer->recv_head->ready) {
            if (budget == 0) {
                static const struct timeval zero = {0, 0};
                evtimer_add(net->dispatch, &zero);
                return;
            }
            ps_net_recv_t *r = peer->recv_head;
            peer->recv_head = r->next;
            if (!peer->recv_head)
                peer->recv_tail = NULL;
            if (r->failed) {
                net->stats.dropped++;
                ps_net_recv_free(net, r);
                continue;
            }
            char node[PS_NET_NODE_BYTES];
            memcpy(node, peer->node, sizeof(node));
            const void *payload = r->ucx_data ? r->ucx_data : r->buffer;
            if (net->integrity && !tag_checks(net, peer, r, payload)) {
                net->stats.dropped++;
                net->stats.forged++;
                if (salus_log_limit_take(&net->forged_log, salus_log_limit_now_ns(), &said) &&
                    salus_log_threshold >= SALUS_LOG_WARN)
                    LOG_WARN("ps_net: a message from %s whose tag does not check (altered, "
                             "replayed or under another key on the way): dropped (%llu "
                             "such in all)", node, (unsigned long long)net->stats.forged);
                ps_net_recv_free(net, r);
                continue;
            }
            net->stats.messages_received++;
            net->stats.bytes_received += r->header_len + r->payload_len;
            budget -= r->payload_len < budget ? r->payload_len : budget;
            net->recv(net->ctx, node, r->header_len ? r->wire + r->header_at : NULL, r->header_len,
                      r->payload_len ? payload : NULL, r->payload_len);
            ps_net_recv_free(net, r);
        }
    }
}
