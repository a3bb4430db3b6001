/* What the parameter-server service needs from the cluster role (ps_cluster.h): this node,
 * a group's nodes, the ring record in etcd, and the UCX net whose peers follow the
 * authenticated daemon links.
 *
 * cluster.c knows nothing of this file: it calls it through cluster_t's ps_hooks, set here
 * when the service starts (so that the include graph keeps ps_cluster above cluster). */
#include "ps_cluster-internal.h"

#include "cluster-internal.h"
#include "groups.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_HELLO_MAX_ADDR 8192
#define RING_RETRY_MS 100
#define RING_WAIT_S 10 /* how long an agreement waits for its group's record to be read */
#define PROBE_MS 500   /* each peer's endpoint is tried this often (an empty message) */

typedef struct ps_peer_s {
    char node[LINKS_NODE_BYTES];
    ps_hello_peer_t tok;
    uint8_t *addr;               /* from its last hello */
    size_t addr_len;
    int added;                   /* a ps_net peer with these: */
    uint64_t added_send, added_recv;
    uint8_t *added_addr;
    size_t added_addr_len;
    int up;                      /* the service was told peer_up (and no peer_down since) */
    uint64_t gen;                /* counts adds and removals: a probe's answer is its gen's */
    int probe_busy;
    int readd;                   /* UCX could not add it: a new exchange at the next probe */
} ps_peer_t;

typedef struct ring_req_s {
    struct ps_cluster_s *ps;     /* NULL: no cluster (answered on the next loop turn) */
    salusd_t *d;
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    char table[PS_NAME_BYTES];
    ps_ring_record_t want;
    char value[4096];            /* want as the record's JSON */
    ps_ring_done_fn done;
    void *arg;
    uint64_t deadline_ns;
    int in_flight;               /* an etcd transaction: its callback frees the request */
    int cancelled;               /* the service stopped: no done */
    struct event *ev;            /* no cluster: the next loop turn */
    struct ring_req_s *next;
} ring_req_t;

typedef struct ps_cluster_s {
    salusd_t *d;
    cluster_t *cl;
    ps_net_t *net;
    ps_cluster_hooks_t hooks;
    void *ctx;
    int started;
    ps_peer_t *peers;
    uint32_t peer_count, peer_cap;
    ring_req_t *reqs;
    struct event *retry;
    struct event *probe;         /* every PROBE_MS: the endpoints still work */
} ps_cluster_t;

/* Agreements of daemons without a cluster (one daemon per process; several in tests). */
static ring_req_t *local_reqs;

static cluster_t *cl_of(const salusd_t *d) { return (cluster_t *)d->cluster; }

static ps_cluster_t *ps_of(const salusd_t *d)
{
    cluster_t *cl = cl_of(d);
    return cl ? (ps_cluster_t *)cl->ps : NULL;
}

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
    int rc = links_send(ps->cl->links, p->node, &enc);
    if (rc == 0)
        ps->cl->stats.messages_sent++;
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
                     memcmp(p->added_addr, p->addr, p->addr_len) != 0))
        /* another UCX worker: the daemon restarted (within its lease), and what waited on
         * the former one is lost */
        peer_down(ps, p, "its daemon restarted (a new UCX address)");
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
    ps_hello_received(&p->tok, token, have, links_is_up(ps->cl->links, from), fresh, &out);
    LOG_DEBUG("ps: ps_hello from %s (%zu address bytes%s)", from, len,
              have ? "" : ", asks for ours");
    apply(ps, p, &out);
}

/* ---- cluster.c's hooks --------------------------------------------------------------------- */

static void hook_link_up(cluster_t *cl, const char *node)
{
    link_up(cl->ps, node);
}

static void hook_message(cluster_t *cl, const char *from, const proto_msg_t *msg)
{
    if (strcmp(msg->op, "ps_hello") == 0)
        hello_received(cl->ps, from, msg);
    else
        LOG_WARN("ps: an unknown message '%s' from %s: ignored", msg->op, from);
}

static void hook_node_gone(cluster_t *cl, const char *node, const char *how)
{
    ps_cluster_t *ps = cl->ps;
    ps_peer_t *p = peer_find(ps, node);
    if (!p)
        return;
    peer_down(ps, p, how);
    ps_hello_out_t out;
    ps_hello_down(&p->tok, 0, 0, &out); /* a new exchange at its next link-up */
}

static void hook_pack_peers(cluster_t *cl, msgpack_packer *pk)
{
    ps_cluster_t *ps = cl->ps;
    uint32_t n = 0;
    for (uint32_t i = 0; ps && ps->started && i < ps->peer_count; i++)
        n += ps->peers[i].up;
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; ps && ps->started && i < ps->peer_count; i++)
        if (ps->peers[i].up)
            proto_pack_str(pk, ps->peers[i].node);
}

static void forget_epoch(cluster_t *cl, uint32_t uid, const char *name, int64_t epoch)
{
    if (epoch <= 0 || !cl->etcd)
        return;
    char key[512];
    int n = snprintf(key, sizeof(key), "%s/ps/%u/%s/%lld/", cl->prefix, uid, name,
                     (long long)epoch);
    if (n < 0 || (size_t)n >= sizeof(key))
        return;
    LOG_DEBUG("ps: the ring records of group %s (epoch %lld) go", name, (long long)epoch);
    etcd_delete(cl->etcd, key, 1, NULL, NULL);
}

static void req_free(ring_req_t *r)
{
    if (r->ev)
        event_free(r->ev);
    free(r);
}

static void hook_free(cluster_t *cl)
{
    ps_cluster_t *ps = cl->ps;
    if (!ps)
        return;
    ps->started = 0;
    ps_net_destroy(ps->net);
    if (ps->retry)
        event_free(ps->retry);
    if (ps->probe)
        event_free(ps->probe);
    while (ps->reqs) {
        ring_req_t *r = ps->reqs;
        ps->reqs = r->next;
        req_free(r);
    }
    for (uint32_t i = 0; i < ps->peer_count; i++) {
        free(ps->peers[i].addr);
        free(ps->peers[i].added_addr);
    }
    free(ps->peers);
    free(ps);
    cl->ps = NULL;
    cl->ps_hooks = NULL;
}

static const cluster_ps_hooks_t cluster_hooks = {
    .link_up = hook_link_up,
    .message = hook_message,
    .node_gone = hook_node_gone,
    .pack_peers = hook_pack_peers,
    .ring_forget = forget_epoch,
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
    ps_hello_down(&p->tok, fresh && links_is_up(ps->cl->links, p->node), fresh, &out);
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
        if (!p->added && p->readd && links_is_up(ps->cl->links, p->node)) {
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
    ps_hello_down(&p->tok, fresh && links_is_up(ps->cl->links, node), fresh, &out);
    apply(ps, p, &out);
}

int ps_cluster_start(salusd_t *d, const ps_cluster_hooks_t *hooks, void *ctx)
{
    cluster_t *cl = cl_of(d);
    if (!cl)
        return 0;
    ps_cluster_t *ps = cl->ps;
    if (!ps) {
        ps = calloc(1, sizeof(*ps));
        if (!ps) {
            LOG_ERROR("ps: out of memory");
            return -1;
        }
        ps->d = d;
        ps->cl = cl;
        cl->ps = ps;
        cl->ps_hooks = &cluster_hooks;
    }
    if (ps->started)
        return 0;
    if (hooks)
        ps->hooks = *hooks;
    ps->ctx = ctx;
    char err[512] = "";
    int rc = ps_net_create(d->base, cl->node, net_recv, ps, &ps->net, err, sizeof(err));
    if (rc < 0) {
        LOG_ERROR("ps: the UCX net of node %s: %s", cl->node, err[0] ? err : strerror(-rc));
        ps->net = NULL;
        return -1;
    }
    ps->started = 1;
    if (!ps->probe)
        ps->probe = event_new(d->base, -1, EV_PERSIST, on_probe, ps);
    struct timeval every = {.tv_sec = 0, .tv_usec = PROBE_MS * 1000};
    if (!ps->probe || event_add(ps->probe, &every) < 0)
        LOG_WARN("ps: no timer to try the UCX endpoints: a failed one waits for its link");
    LOG_INFO("ps: node %s's UCX net is up: its address goes to the members over the links",
             cl->node);
    /* the links up already: the exchange starts now */
    for (uint32_t i = 0; i < cl->member_count; i++)
        if (strcmp(cl->members[i].node, cl->node) != 0 &&
            links_is_up(cl->links, cl->members[i].node))
            link_up(ps, cl->members[i].node);
    return 0;
}

static void reqs_cancel(ring_req_t **list, const salusd_t *d)
{
    for (ring_req_t **p = list; *p;) {
        ring_req_t *r = *p;
        if (r->d != d) {
            p = &r->next;
            continue;
        }
        if (r->in_flight) { /* its etcd callback frees it */
            r->cancelled = 1;
            p = &r->next;
            continue;
        }
        *p = r->next;
        req_free(r);
    }
}

void ps_cluster_stop(salusd_t *d)
{
    reqs_cancel(&local_reqs, d);
    ps_cluster_t *ps = ps_of(d);
    if (!ps)
        return;
    reqs_cancel(&ps->reqs, d);
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
    const cluster_t *cl = cl_of(d);
    return cl ? cl->node : "local";
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

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint32_t ps_cluster_group_nodes(salusd_t *d, uint64_t group_id, const char **nodes,
                                uint32_t *ranks, uint32_t max)
{
    cluster_t *cl = cl_of(d);
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
    cluster_group_t *g = cluster_group_by_local(cl, group_id);
    if (!g || !g->ranks)
        return 0;
    const char *all[CLUSTER_GROUP_MAX_NODES];
    uint32_t n = cluster_group_nodes(g, all, CLUSTER_GROUP_MAX_NODES);
    qsort(all, n, sizeof(all[0]), name_cmp);
    if (n > max)
        n = max;
    for (uint32_t i = 0; i < n; i++) {
        nodes[i] = all[i];
        ranks[i] = 0;
        for (uint32_t r = 0; r < g->world; r++)
            ranks[i] += strcmp(g->ranks[r].node, all[i]) == 0;
    }
    return n;
}

int ps_cluster_local_index(salusd_t *d, uint64_t group_id, uint32_t rank)
{
    cluster_t *cl = cl_of(d);
    if (!cl) {
        groups_desc_t desc;
        char sync[32];
        if (groups_describe(d, group_id, &desc, sync, sizeof(sync)) < 0 || rank >= desc.world)
            return -1;
        return (int)rank; /* every rank of the group is here */
    }
    cluster_group_t *g = cluster_group_by_local(cl, group_id);
    if (!g || rank >= g->world)
        return -1;
    int index = 0;
    for (uint32_t r = 0; r <= rank; r++) {
        int here = (g->ranks && strcmp(g->ranks[r].node, cl->node) == 0) ||
                   (g->local_job && g->local_job[r]);
        if (r == rank)
            return here ? index : -1;
        index += here;
    }
    return -1;
}

/* ---- the ring record ------------------------------------------------------------------------ */

static int name_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

static void req_done(ring_req_t *r, int rc, const char *err, const ps_ring_record_t *rec)
{
    if (!r->cancelled && r->done)
        r->done(r->arg, rc, err, rec);
}

static void req_unlink(ring_req_t **list, ring_req_t *r)
{
    for (ring_req_t **p = list; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

static void on_local_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ring_req_t *r = arg;
    req_unlink(&local_reqs, r);
    ps_ring_record_t rec = r->want;
    rec.epoch = 1;
    req_done(r, 0, "", &rec);
    req_free(r);
}

static void on_txn(void *ctx, const etcd_result_t *res)
{
    ring_req_t *r = ctx;
    ps_cluster_t *ps = r->ps;
    if (ps)
        req_unlink(&ps->reqs, r);
    char err[400];
    if (res->error) {
        if (ps)
            ps->cl->stats.etcd_errors++;
        snprintf(err, sizeof(err), "the ring of table '%s' cannot be agreed: %s", r->table,
                 res->message);
        req_done(r, res->error, err, NULL);
    } else if (res->succeeded) {
        ps_ring_record_t rec = r->want;
        rec.epoch = (uint64_t)res->revision;
        LOG_INFO("ps: table '%s' of group %s: ring record written (epoch %" PRIu64 ", servers %s)",
                 r->table, r->group, rec.epoch, rec.servers);
        if (res->revision <= 0)
            req_done(r, -EPROTO, "etcd answered the ring's transaction without a revision", NULL);
        else
            req_done(r, 0, "", &rec);
    } else if (res->count != 1) {
        snprintf(err, sizeof(err), "the ring record of table '%s' was deleted meanwhile",
                 r->table);
        req_done(r, -EAGAIN, err, NULL);
    } else {
        ps_ring_record_t rec;
        char why[200];
        if (ps_ring_record_parse(res->kvs[0].value, res->kvs[0].value_len, &rec, why,
                                 sizeof(why)) < 0 ||
            res->kvs[0].create_revision <= 0) {
            snprintf(err, sizeof(err), "the ring record of table '%s' in etcd is malformed: %s",
                     r->table, res->kvs[0].create_revision <= 0 ? "no create revision" : why);
            LOG_WARN("ps: %s", err);
            req_done(r, -EPROTO, err, NULL);
        } else {
            rec.epoch = (uint64_t)res->kvs[0].create_revision;
            req_done(r, 0, "", &rec);
        }
    }
    req_free(r);
}

/* Sends the transaction once the group's record (its epoch) is known: 1 sent, 0 not yet. */
static int req_try(ps_cluster_t *ps, ring_req_t *r)
{
    cluster_t *cl = ps->cl;
    char gkey[sizeof(((cluster_group_t *)0)->key)];
    snprintf(gkey, sizeof(gkey), "%u/%s", (unsigned)r->uid, r->group);
    cluster_group_t *g = cluster_group_by_key(cl, gkey);
    if (!g || g->epoch <= 0)
        return 0;
    char key[600];
    snprintf(key, sizeof(key), "%s/ps/%u/%s/%lld/%s", cl->prefix, (unsigned)r->uid, r->group,
             (long long)g->epoch, r->table);
    etcd_txn_t txn = {.key = key, .target = ETCD_CMP_CREATE_REVISION, .rev = 0,
                      .success = {.kind = ETCD_OP_PUT, .value = r->value,
                                  .value_len = strlen(r->value)},
                      .failure = {.kind = ETCD_OP_GET}};
    if (etcd_txn(cl->etcd, &txn, on_txn, r) < 0)
        return 0; /* out of memory: the retry tries again */
    r->in_flight = 1;
    LOG_DEBUG("ps: agreeing on %s: %s", key, r->value);
    return 1;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_cluster_t *ps = arg;
    uint64_t now = salusd_now_ns();
    int waiting = 0;
    for (ring_req_t *r = ps->reqs, *next; r; r = next) {
        next = r->next;
        if (r->in_flight || r->cancelled)
            continue;
        if (req_try(ps, r))
            continue;
        if (now >= r->deadline_ns) {
            char err[300];
            snprintf(err, sizeof(err), "the cluster record of group %s is not known on node "
                     "%s: table '%s' cannot be agreed", r->group, ps->cl->node, r->table);
            req_unlink(&ps->reqs, r);
            req_done(r, -ETIMEDOUT, err, NULL);
            req_free(r);
            continue;
        }
        waiting = 1;
    }
    if (!waiting && ps->retry)
        event_del(ps->retry);
}

int ps_cluster_ring_agree(salusd_t *d, uid_t uid, const char *group, const char *table,
                          const ps_ring_record_t *want, ps_ring_done_fn done, void *arg)
{
    char err[200];
    if (!group || !table || !want || !done || !name_ok(group, LAUNCH_GROUP_BYTES) ||
        !name_ok(table, PS_NAME_BYTES) || ps_ring_record_check(want, err, sizeof(err)) < 0)
        return -EINVAL;
    cluster_t *cl = cl_of(d);
    ps_cluster_t *ps = ps_of(d);
    if (cl && (!ps || !ps->started))
        return -ENOTCONN;
    ring_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->ps = ps;
    r->d = d;
    r->uid = uid;
    snprintf(r->group, sizeof(r->group), "%s", group);
    snprintf(r->table, sizeof(r->table), "%s", table);
    r->want = *want;
    r->want.epoch = 0;
    if (ps_ring_record_format(&r->want, r->value, sizeof(r->value), err, sizeof(err)) < 0) {
        free(r);
        return -EINVAL;
    }
    r->done = done;
    r->arg = arg;
    if (!cl) {
        struct timeval now = {0, 0};
        r->ev = event_new(d->base, -1, 0, on_local_turn, r);
        if (!r->ev || event_add(r->ev, &now) < 0) {
            req_free(r);
            return -ENOMEM;
        }
        r->next = local_reqs;
        local_reqs = r;
        return 0;
    }
    r->deadline_ns = salusd_now_ns() + RING_WAIT_S * 1000000000ull;
    r->next = ps->reqs;
    ps->reqs = r;
    if (req_try(ps, r) == 1)
        return 0;
    /* the group's record is not read yet (or etcd_txn had no memory): tried again */
    if (!ps->retry)
        ps->retry = event_new(d->base, -1, EV_PERSIST, on_retry, ps);
    struct timeval every = {.tv_sec = 0, .tv_usec = RING_RETRY_MS * 1000};
    if (!ps->retry || event_add(ps->retry, &every) < 0) {
        req_unlink(&ps->reqs, r);
        req_free(r);
        return -ENOMEM;
    }
    return 0;
}

void ps_cluster_ring_forget(salusd_t *d, uid_t uid, const char *group)
{
    cluster_t *cl = cl_of(d);
    if (!cl || !group || !name_ok(group, LAUNCH_GROUP_BYTES))
        return;
    char gkey[sizeof(((cluster_group_t *)0)->key)];
    snprintf(gkey, sizeof(gkey), "%u/%s", (unsigned)uid, group);
    cluster_group_t *g = cluster_group_by_key(cl, gkey);
    if (g && g->epoch > 0)
        forget_epoch(cl, (uint32_t)uid, group, g->epoch);
}
