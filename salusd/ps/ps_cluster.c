/* What the parameter-server service needs from the cluster role (ps_cluster.h): this node,
 * a group's nodes, the ring record in etcd (ps_cluster_etcd.c), and the UCX net whose peers
 * follow the authenticated daemon links.
 *
 * cluster.c knows nothing of this file: it calls it through the observer table registered
 * here when the service starts (cluster_observe), the cluster's one way to speak upward. */
#include "ps_cluster-internal.h"

#include "groups.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



/* ---- peers -------------------------------------------------------------------------------- */

static ps_peer_t *peer_find(ps_cluster_t *ps, const char *node)
{
    for (uint32_t i = 0; i < ps->peer_count; i++)
        if (strcmp(ps->peers[i].node, node) == 0)
            return &ps->peers[i];
    return NULL;
}

static ps_peer_t *peer_get(ps_cluster_t *ps, const char *node)
{
    ps_peer_t *p = peer_find(ps, node);
    if (p || strlen(node) >= LINKS_NODE_BYTES)
        return p;
    if (ps->peer_count == ps->peer_cap) {
        uint32_t cap = ps->peer_cap ? ps->peer_cap * 2 : 8;
        ps_peer_t *n = realloc(ps->peers, cap * sizeof(*n));
        if (!n)
            return NULL;
        ps->peers = n;
        ps->peer_cap = cap;
    }
    p = &ps->peers[ps->peer_count++];
    memset(p, 0, sizeof(*p));
    snprintf(p->node, sizeof(p->node), "%s", node);
    return p;
}

static void send_hello(ps_cluster_t *ps, ps_peer_t *p, uint64_t token, int have)
{
    const void *addr = NULL;
    size_t len = 0;
    if (!ps->net || ps_net_address(ps->net, &addr, &len) < 0 || !addr || !len) {
        LOG_WARN("ps: no UCX address to send to %s", p->node);
        return;
    }
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 0, "ps_hello", 3);
    proto_pack_str(&enc.pk, "addr");
    msgpack_pack_bin(&enc.pk, len);
    msgpack_pack_bin_body(&enc.pk, addr, len);
    proto_pack_kv_uint(&enc.pk, "token", token);
    proto_pack_kv_bool(&enc.pk, "have", have);
    proto_enc_finish(&enc);
    int rc = links_send(cluster_links(ps->cl), p->node, &enc);
    if (rc == 0)
        cluster_count_message_sent(ps->cl);
    else
        LOG_DEBUG("ps: hello to %s not sent (%s): sent again when its link is back", p->node,
                  strerror(-rc));
    proto_enc_destroy(&enc);
}

static void peer_down(ps_cluster_t *ps, ps_peer_t *p, const char *why)
{
    p->gen++;
    p->probe_busy = 0;
    if (p->added && ps->net)
        ps_net_remove_peer(ps->net, p->node);
    p->added = 0;
    free(p->added_addr);
    p->added_addr = NULL;
    p->added_addr_len = 0;
    if (p->up) {
        p->up = 0;
        LOG_WARN("ps: UCX peer %s is down: %s", p->node, why);
        if (ps->hooks.peer_down)
            ps->hooks.peer_down(ps->ctx, p->node);
    }
}

/* What the exchange says: a hello to send, the ps_net peer to add. */
static void apply(ps_cluster_t *ps, ps_peer_t *p, const ps_hello_out_t *out)
{
    if (out->send)
        send_hello(ps, p, out->send_token, out->send_have);
    if (!out->add || !p->addr || !ps->net)
        return;
    if (p->added && p->added_send == out->add_send && p->added_recv == out->add_recv &&
        p->added_addr_len == p->addr_len && memcmp(p->added_addr, p->addr, p->addr_len) == 0)
        return; /* the same peer again (a hello's answer) */
    if (p->added && (p->added_addr_len != p->addr_len ||
                     memcmp(p->added_addr, p->addr, p->addr_len) != 0)) {
        /* another UCX worker: the daemon restarted (within its lease), and what waited on
         * the former one is lost */
        peer_down(ps, p, "its daemon restarted (a new UCX address)");
        if (ps->hooks.peer_restarted)
            ps->hooks.peer_restarted(ps->ctx, p->node);
    }
    uint8_t *copy = malloc(p->addr_len);
    if (!copy)
        return;
    memcpy(copy, p->addr, p->addr_len);
    int rc = ps_net_add_peer(ps->net, p->node, p->addr, p->addr_len, out->add_send,
                             out->add_recv);
    if (rc < 0) {
        free(copy);
        char why[128];
        snprintf(why, sizeof(why), "UCX could not add it (%s)", strerror(-rc));
        peer_down(ps, p, why);
        p->readd = 1;
        return;
    }
    p->readd = 0;
    free(p->added_addr);
    p->added_addr = copy;
    p->added_addr_len = p->addr_len;
    p->added = 1;
    p->gen++;
    p->probe_busy = 0;
    p->added_send = out->add_send;
    p->added_recv = out->add_recv;
    if (!p->up) {
        p->up = 1;
        LOG_INFO("ps: UCX peer %s is up", p->node);
        if (ps->hooks.peer_up)
            ps->hooks.peer_up(ps->ctx, p->node);
    }
}

static void link_up(ps_cluster_t *ps, const char *node)
{
    ps_peer_t *p = ps->started ? peer_get(ps, node) : NULL;
    uint64_t fresh = ps_cluster_token();
    if (!p || !fresh)
        return;
    ps_hello_out_t out;
    ps_hello_link_up(&p->tok, fresh, &out);
    apply(ps, p, &out);
}

static const uint8_t *get_bin(const msgpack_object *map, const char *key, size_t *len)
{
    if (map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t klen = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key, *v = &map->via.map.ptr[i].val;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            memcmp(k->via.str.ptr, key, klen) == 0) {
            if (v->type != MSGPACK_OBJECT_BIN)
                return NULL;
            *len = v->via.bin.size;
            return (const uint8_t *)v->via.bin.ptr;
        }
    }
    return NULL;
}

static void hello_received(ps_cluster_t *ps, const char *from, const proto_msg_t *msg)
{
    size_t len = 0;
    const uint8_t *addr = get_bin(&msg->body, "addr", &len);
    uint64_t token = 0;
    int have = 0;
    if (!addr || len == 0 || len > PS_HELLO_MAX_ADDR ||
        proto_get_uint(&msg->body, "token", &token) < 0 || token == 0 ||
        proto_get_bool(&msg->body, "have", &have) < 0) {
        LOG_WARN("ps: a malformed ps_hello from %s: ignored", from);
        return;
    }
    if (!ps->started) {
        LOG_DEBUG("ps: ps_hello from %s before the service started: asked again at its start",
                  from);
        return;
    }
    ps_peer_t *p = peer_get(ps, from);
    uint64_t fresh = ps_cluster_token();
    uint8_t *copy = malloc(len);
    if (!p || !fresh || !copy) {
        free(copy);
        return;
    }
    memcpy(copy, addr, len);
    free(p->addr);
    p->addr = copy;
    p->addr_len = len;
    ps_hello_out_t out;
    ps_hello_received(&p->tok, token, have, links_is_up(cluster_links(ps->cl), from), fresh,
                      &out);
    LOG_DEBUG("ps: ps_hello from %s (%zu address bytes%s)", from, len,
              have ? "" : ", asks for ours");
    apply(ps, p, &out);
}

/* ---- cluster.c's hooks --------------------------------------------------------------------- */

static void hook_link_up(cluster_t *cl, const char *node)
{
    link_up(cluster_observer_state(cl), node);
}

static void hook_message(cluster_t *cl, const char *from, const proto_msg_t *msg)
{
    if (strcmp(msg->op, "ps_hello") == 0)
        hello_received(cluster_observer_state(cl), from, msg);
    else
        LOG_WARN("ps: an unknown message '%s' from %s: ignored", msg->op, from);
}

static void hook_node_gone(cluster_t *cl, const char *node, const char *how)
{
    ps_cluster_t *ps = cluster_observer_state(cl);
    if (ps->started && !cluster_is_member(cl, node)) /* its lease ended (not a link down) */
        ps_replicas_node_gone(ps, node);
    ps_peer_t *p = peer_find(ps, node);
    if (!p)
        return;
    peer_down(ps, p, how);
    ps_hello_out_t out;
    ps_hello_down(&p->tok, 0, 0, &out); /* a new exchange at its next link-up */
}

static void hook_pack_peers(cluster_t *cl, msgpack_packer *pk)
{
    ps_cluster_t *ps = cluster_observer_state(cl);
    uint32_t n = 0;
    for (uint32_t i = 0; ps && ps->started && i < ps->peer_count; i++)
        n += ps->peers[i].up;
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; ps && ps->started && i < ps->peer_count; i++)
        if (ps->peers[i].up)
            proto_pack_str(pk, ps->peers[i].node);
}


static void hook_free(cluster_t *cl)
{
    ps_cluster_t *ps = cluster_observer_state(cl);
    if (!ps)
        return;
    ps->started = 0;
    ps_net_destroy(ps->net);
    ps_replicas_free(ps);
    if (ps->retry)
        event_free(ps->retry);
    if (ps->probe)
        event_free(ps->probe);
    while (ps->reqs) {
        ring_req_t *r = ps->reqs;
        ps->reqs = r->next;
        ps_cluster_req_free(r);
    }
    for (uint32_t i = 0; i < ps->peer_count; i++) {
        free(ps->peers[i].addr);
        free(ps->peers[i].added_addr);
    }
    free(ps->peers);
    free(ps);
    cluster_observe(cl, NULL, NULL);
}

static const cluster_observer_t cluster_hooks = {
    .link_up = hook_link_up,
    .message = hook_message,
    .node_gone = hook_node_gone,
    .pack_peers = hook_pack_peers,
    .ring_forget = ps_cluster_forget_epoch,
    .free = hook_free,
};

/* ---- the net ------------------------------------------------------------------------------- */

/* A peer whose endpoint failed (UCX saw its process die or its connection break; a restarted
 * daemon's new worker can also fail a fresh endpoint): down, and a new exchange over the link
 * (both sides then add the peer again, with new endpoints) when the link is up. */
static void endpoint_failed(ps_cluster_t *ps, ps_peer_t *p, int status)
{
    char why[128];
    snprintf(why, sizeof(why), "its UCX endpoint failed (%s)", strerror(-status));
    peer_down(ps, p, why);
    uint64_t fresh = ps_cluster_token();
    ps_hello_out_t out;
    ps_hello_down(&p->tok, fresh && links_is_up(cluster_links(ps->cl), p->node), fresh, &out);
    apply(ps, p, &out);
}

typedef struct probe_s {
    ps_cluster_t *ps;
    char node[LINKS_NODE_BYTES];
    uint64_t gen;
} probe_t;

static void on_probe_sent(void *ctx, int status)
{
    probe_t *pr = ctx;
    ps_cluster_t *ps = pr->ps;
    ps_peer_t *p = ps->started ? peer_find(ps, pr->node) : NULL;
    if (p && p->gen == pr->gen) {
        p->probe_busy = 0;
        if (status < 0 && status != -ECANCELED && p->added)
            endpoint_failed(ps, p, status);
    }
    free(pr);
}

/* An empty message to each peer (dropped by its net_recv): ps_net refuses a send on a failed
 * endpoint, or completes it with an error; nothing else tells this layer. */
static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_cluster_t *ps = arg;
    for (uint32_t i = 0; ps->started && ps->net && i < ps->peer_count; i++) {
        ps_peer_t *p = &ps->peers[i];
        if (!p->added && p->readd && links_is_up(cluster_links(ps->cl), p->node)) {
            p->readd = 0; /* (a failed add, paced by this timer) */
            endpoint_failed(ps, p, -EAGAIN);
            continue;
        }
        if (!p->added || p->probe_busy)
            continue;
        probe_t *pr = calloc(1, sizeof(*pr));
        if (!pr)
            return;
        pr->ps = ps;
        pr->gen = p->gen;
        snprintf(pr->node, sizeof(pr->node), "%s", p->node);
        int rc = ps_net_send(ps->net, p->node, NULL, 0, NULL, 0, on_probe_sent, pr);
        if (rc == 0) {
            p->probe_busy = 1;
            continue;
        }
        free(pr);
        if (rc != -ENOMEM)
            endpoint_failed(ps, p, rc);
    }
}

static void net_recv(void *ctx, const char *node, const void *header, size_t header_len,
                     const void *payload, size_t payload_len)
{
    ps_cluster_t *ps = ctx;
    if (header_len == 0 && payload_len == 0)
        return; /* a probe (on_probe) */
    if (ps->started && ps->hooks.recv)
        ps->hooks.recv(ps->ctx, node, header, header_len, payload, payload_len);
}

void ps_cluster_send_failed(salusd_t *d, const char *node, int status)
{
    ps_cluster_t *ps = ps_of(d);
    if (!ps || !ps->started || status == -ECANCELED || status == -ECONNRESET || status >= 0)
        return;
    ps_peer_t *p = peer_find(ps, node);
    if (!p || !p->added)
        return;
    char why[128];
    snprintf(why, sizeof(why), "a send failed (%s)", strerror(-status));
    peer_down(ps, p, why);
    ps_hello_out_t out;
    uint64_t fresh = ps_cluster_token();
    ps_hello_down(&p->tok, fresh && links_is_up(cluster_links(ps->cl), node), fresh, &out);
    apply(ps, p, &out);
}

int ps_cluster_start(salusd_t *d, const ps_cluster_hooks_t *hooks, void *ctx)
{
    cluster_t *cl = cluster_of(d);
    if (!cl) {
        if (ps_replicas_local_start(d, hooks, ctx) < 0) {
            LOG_ERROR("ps: out of memory");
            return -1;
        }
        return 0;
    }
    ps_cluster_t *ps = cluster_observer_state(cl);
    if (!ps) {
        ps = calloc(1, sizeof(*ps));
        if (!ps) {
            LOG_ERROR("ps: out of memory");
            return -1;
        }
        ps->d = d;
        ps->cl = cl;
        cluster_observe(cl, &cluster_hooks, ps);
    }
    if (ps->started)
        return 0;
    if (hooks)
        ps->hooks = *hooks;
    ps->ctx = ctx;
    char err[512] = "";
    int rc = ps_net_create(d->base, cluster_node(cl), net_recv, ps, &ps->net, err, sizeof(err));
    if (rc < 0) {
        LOG_ERROR("ps: the UCX net of node %s: %s", cluster_node(cl),
                  err[0] ? err : strerror(-rc));
        ps->net = NULL;
        return -1;
    }
    if (d->config.ps_net_integrity) {
        rc = ps_net_set_integrity(ps->net, cluster_ps_net_master(cl));
        if (rc < 0) {
            LOG_ERROR("ps: integrity of the UCX messages: %s", strerror(-rc));
            ps_net_destroy(ps->net);
            ps->net = NULL;
            return -1;
        }
        LOG_INFO("ps: every UCX message carries an AES-GCM tag (--ps-net-integrity)");
    }
    ps->started = 1;
    if (!ps->probe)
        ps->probe = event_new(d->base, -1, EV_PERSIST, on_probe, ps);
    struct timeval every = {.tv_sec = 0, .tv_usec = PROBE_MS * 1000};
    if (!ps->probe || event_add(ps->probe, &every) < 0)
        LOG_WARN("ps: no timer to try the UCX endpoints: a failed one waits for its link");
    LOG_INFO("ps: node %s's UCX net is up: its address goes to the members over the links",
             cluster_node(cl));
    /* the links up already: the exchange starts now */
    for (uint32_t i = 0; i < cluster_member_count(cl); i++) {
        const char *node = cluster_member_node(cl, i);
        if (strcmp(node, cluster_node(cl)) != 0 && links_is_up(cluster_links(cl), node))
            link_up(ps, node);
    }
    return 0;
}


void ps_cluster_stop(salusd_t *d)
{
    ps_cluster_ring_stop(d);
    ps_replicas_local_stop(d);
    ps_cluster_t *ps = ps_of(d);
    if (!ps)
        return;
    ps_replicas_stop(ps);
    ps_cluster_reqs_cancel(&ps->reqs, d);
    if (ps->retry) {
        event_free(ps->retry);
        ps->retry = NULL;
    }
    if (ps->probe) {
        event_free(ps->probe);
        ps->probe = NULL;
    }
    ps->started = 0;
    ps_net_destroy(ps->net); /* the probes in flight complete: freed, nothing else */
    ps->net = NULL;
    for (uint32_t i = 0; i < ps->peer_count; i++) {
        ps_peer_t *p = &ps->peers[i];
        p->added = 0;
        p->up = 0;
        p->tok.mine = p->tok.theirs = 0;
        free(p->added_addr);
        p->added_addr = NULL;
    }
    memset(&ps->hooks, 0, sizeof(ps->hooks));
}

const char *ps_cluster_self(const salusd_t *d)
{
    const cluster_t *cl = cluster_of(d);
    return cl ? cluster_node(cl) : "local";
}

ps_net_t *ps_cluster_net(salusd_t *d)
{
    ps_cluster_t *ps = ps_of(d);
    return ps && ps->started ? ps->net : NULL;
}

int ps_cluster_reachable(salusd_t *d, const char *node)
{
    if (!node)
        return 0;
    if (strcmp(node, ps_cluster_self(d)) == 0)
        return 1;
    ps_cluster_t *ps = ps_of(d);
    ps_peer_t *p = ps && ps->started ? peer_find(ps, node) : NULL;
    return p && p->up && p->added && ps_net_has_peer(ps->net, node);
}

/* ---- a group's nodes ------------------------------------------------------------------------- */

uint32_t ps_cluster_group_nodes(salusd_t *d, uint64_t group_id, const char **nodes,
                                uint32_t *ranks, uint32_t max)
{
    cluster_t *cl = cluster_of(d);
    if (max == 0)
        return 0;
    if (!cl) {
        groups_desc_t desc;
        char sync[32];
        if (groups_describe(d, group_id, &desc, sync, sizeof(sync)) < 0 || desc.world == 0)
            return 0;
        nodes[0] = ps_cluster_self(d);
        ranks[0] = desc.world;
        return 1;
    }
    return cluster_group_rank_nodes(cl, group_id, nodes, ranks, max);
}

int ps_cluster_local_index(salusd_t *d, uint64_t group_id, uint32_t rank)
{
    cluster_t *cl = cluster_of(d);
    if (!cl) {
        groups_desc_t desc;
        char sync[32];
        if (groups_describe(d, group_id, &desc, sync, sizeof(sync)) < 0 || rank >= desc.world)
            return -1;
        return (int)rank; /* every rank of the group is here */
    }
    return cluster_group_local_index(cl, group_id, rank);
}
