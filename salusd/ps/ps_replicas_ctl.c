/* The ps_servers op (salusctl ps-servers GROUP --add NODE | --remove NODE): the caller's group's
 * tables are listed in etcd (their ring records P/ps/UID/GROUP/GEPOCH/TABLE, UID the caller's:
 * a user changes only its own groups; GEPOCH the group's run as this daemon knows it, else the
 * newest in etcd), their views read (P/psv/UID/GROUP/EPOCH/TABLE, EPOCH the ring record's),
 * and for each the view with NODE added or removed is proposed (compare-and-swap; a lost race is
 * judged again on the view now there, a few times). Checked first, nothing proposed when it
 * fails: an unknown group, NODE not a live member (add), NODE in no table's view (remove) or in
 * every one (add), the last server of a view removed. The reply: per table its old and new
 * view, or why it is unchanged or failed. */
#include "ps_cluster-internal.h"

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#define SERVERS_MAX_TABLES 256
#define SERVERS_TRIES 4

typedef struct servers_table_s {
    struct servers_op_s *op;    /* (a proposal's context: the table) */
    uint32_t index;
    char table[PS_NAME_BYTES];
    uint64_t epoch;             /* its ring record's (the view's key: P/psv/UID/GROUP/EPOCH/T) */
    int has_view;
    ps_view_t view;             /* the view read (then the one now there) */
    uint64_t from;              /* the view it changed from (0: none) */
    ps_view_t result;           /* the new view (number 0: none) */
    int busy, tries;
    char note[300];             /* unchanged: why */
    char error[400];            /* failed: why */
} servers_table_t;

typedef struct servers_op_s {
    server_later_t caller;      /* its conn NULL: the caller went away (its requests end by
                                 * themselves; no reply) */
    salusd_t *d;
    uid_t uid;
    char group[LAUNCH_GROUP_BYTES];
    char node[LINKS_NODE_BYTES];
    int add;
    char rings[600];            /* P/ps/UID/GROUP/ (GEPOCH/TABLE: the runs' ring records) */
    char views[600];            /* P/psv/UID/GROUP/ (EPOCH/TABLE) */
    uint64_t epoch;             /* the group run's (GEPOCH) */
    servers_table_t *tables;
    uint32_t count, pending;
    LIST_ENTRY(servers_op_s) link;
} servers_op_t;

static LIST_HEAD(, servers_op_s) servers_ops = LIST_HEAD_INITIALIZER(servers_ops);

static void op_free(servers_op_t *op)
{
    LIST_REMOVE(op, link);
    server_later_done(&op->caller);
    free(op->tables);
    free(op);
}

static void op_error(servers_op_t *op, proto_error_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void op_error(servers_op_t *op, proto_error_code_t code, const char *fmt, ...)
{
    char text[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (op->caller.conn)
        server_reply_error(op->caller.conn, op->caller.request_id, code, 0, "%s", text);
    op_free(op);
}

static void op_reply(servers_op_t *op)
{
    if (op->caller.conn) {
        proto_enc_t *e = &op->d->enc;
        proto_enc_begin(e, PROTO_REPLY, op->caller.request_id, "", 3);
        proto_pack_kv_str(&e->pk, "group", op->group);
        proto_pack_kv_uint(&e->pk, "epoch", op->epoch);
        proto_pack_str(&e->pk, "tables");
        msgpack_pack_array(&e->pk, op->count);
        for (uint32_t i = 0; i < op->count; i++) {
            const servers_table_t *t = &op->tables[i];
            int changed = t->result.number != 0;
            msgpack_pack_map(&e->pk, 4 + (t->note[0] != 0) + (t->error[0] != 0));
            proto_pack_kv_str(&e->pk, "table", t->table);
            proto_pack_kv_uint(&e->pk, "from", changed ? t->from : t->view.number);
            proto_pack_kv_uint(&e->pk, "to", changed ? t->result.number : t->view.number);
            proto_pack_kv_str(&e->pk, "servers", changed ? t->result.servers : t->view.servers);
            if (t->note[0])
                proto_pack_kv_str(&e->pk, "note", t->note);
            if (t->error[0])
                proto_pack_kv_str(&e->pk, "error", t->error);
        }
        proto_enc_finish(e);
        server_send(op->caller.conn, e);
    }
    op_free(op);
}

/* The server set for t's view with the change: 1 (out), 0 (nothing to change: note), or -1
 * (refused: error). */
static int table_change(servers_op_t *op, servers_table_t *t, char *out, size_t size)
{
    int rc = op->add ? ps_replicas_with(t->view.servers, op->node, out, size)
                     : ps_replicas_without(t->view.servers, op->node, out, size);
    if (rc == -EEXIST || rc == -ENOENT) {
        snprintf(t->note, sizeof(t->note), "%s is %s a server of it", op->node,
                 op->add ? "already" : "not");
        return 0;
    }
    if (rc == 0 && !out[0]) {
        snprintf(t->error, sizeof(t->error), "%s is its last server (a table keeps one)",
                 op->node);
        return -1;
    }
    if (rc == 0 && ps_replicas_count(out) > PS_MAX_SERVERS)
        rc = -ENOSPC;
    if (rc < 0) {
        snprintf(t->error, sizeof(t->error), "its new server set cannot be written (%s)",
                 strerror(-rc));
        return -1;
    }
    return 1;
}

static void table_propose(servers_op_t *op, uint32_t i);

static void on_proposed(void *arg, int rc, const char *err, const ps_view_t *view)
{
    servers_table_t *t = arg;
    servers_op_t *op = t->op;
    uint32_t index = t->index;
    t->busy = 0;
    if (rc == 0 && view) {
        t->result = *view;
        LOG_INFO("ps: view of table %s/%s: %s %s by salusctl ps-servers: %s (view %" PRIu64
                 " -> %" PRIu64 ")", op->group, t->table, op->node,
                 op->add ? "added" : "removed", view->servers, t->from, view->number);
    } else if (rc == -ESTALE && view && t->tries < SERVERS_TRIES) {
        t->view = *view; /* changed meanwhile (a fail-over): the change on the view now */
        table_propose(op, index);
        if (t->busy)
            return;
    } else {
        snprintf(t->error, sizeof(t->error), "%s", err && err[0] ? err : strerror(-rc));
    }
    if (--op->pending == 0)
        op_reply(op);
}

/* Proposes table i's change on its view (t->busy while in flight). */
static void table_propose(servers_op_t *op, uint32_t i)
{
    servers_table_t *t = &op->tables[i];
    char out[PS_VIEW_SERVERS_BYTES];
    if (table_change(op, t, out, sizeof(out)) <= 0)
        return;
    t->op = op;
    t->index = i;
    t->from = t->view.number;
    t->tries++;
    int rc = ps_replicas_propose(op->d, op->uid, op->group, t->epoch, t->table,
                                 t->view.number, out, on_proposed, t);
    if (rc < 0) {
        snprintf(t->error, sizeof(t->error), "cannot be proposed: %s", strerror(-rc));
        return;
    }
    t->busy = 1;
}

/* The group's ring records (every run: GEPOCH/TABLE): the run chosen (the group record's as
 * this daemon knows it, else the newest) and its tables, each with its epoch (the record's
 * create revision). 0, or -1 after the reply. */
static int read_rings(servers_op_t *op, const etcd_result_t *res)
{
    cluster_t *cl = cluster_of(op->d);
    int64_t record_epoch = cluster_group_epoch(cl, (uint32_t)op->uid, op->group);
    size_t plen = strlen(op->rings);
    uint64_t newest = 0;
    for (size_t i = 0; i < res->count; i++) {
        const etcd_kv_t *kv = &res->kvs[i];
        unsigned long long epoch = 0;
        if (kv->key_len > plen && sscanf(kv->key + plen, "%llu/", &epoch) == 1 && epoch > newest)
            newest = epoch;
    }
    op->epoch = record_epoch > 0 ? (uint64_t)record_epoch : newest;
    char eprefix[64];
    snprintf(eprefix, sizeof(eprefix), "%" PRIu64 "/", op->epoch);
    size_t elen = strlen(eprefix);
    op->tables = calloc(res->count ? res->count : 1, sizeof(*op->tables));
    if (!op->tables) {
        op_error(op, PROTO_EINTERNAL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < res->count && op->count < SERVERS_MAX_TABLES; i++) {
        const etcd_kv_t *kv = &res->kvs[i];
        if (kv->key_len <= plen + elen || memcmp(kv->key + plen, eprefix, elen) != 0 ||
            kv->create_revision <= 0)
            continue;
        size_t tlen = kv->key_len - plen - elen;
        const char *name = kv->key + plen + elen;
        if (tlen >= PS_NAME_BYTES || memchr(name, '/', tlen))
            continue;
        servers_table_t *t = &op->tables[op->count++];
        memcpy(t->table, name, tlen);
        t->table[tlen] = 0;
        t->epoch = (uint64_t)kv->create_revision;
    }
    if (op->count == 0) {
        op_error(op, PROTO_ENOTFOUND, "unknown group '%s': no parameter-server table of uid %u "
                 "in etcd", op->group, (unsigned)op->uid);
        return -1;
    }
    return 0;
}

/* The views of the tables read (keys EPOCH/TABLE). 0, or -1 after the reply. */
static int read_views(servers_op_t *op, const etcd_result_t *res)
{
    size_t plen = strlen(op->views);
    uint32_t with_view = 0;
    for (uint32_t k = 0; k < op->count; k++) {
        servers_table_t *t = &op->tables[k];
        char want[PS_NAME_BYTES + 32];
        snprintf(want, sizeof(want), "%" PRIu64 "/%s", t->epoch, t->table);
        size_t wlen = strlen(want);
        for (size_t i = 0; i < res->count; i++) {
            const etcd_kv_t *kv = &res->kvs[i];
            if (kv->key_len != plen + wlen || memcmp(kv->key + plen, want, wlen) != 0)
                continue;
            char why[200];
            if (ps_replicas_parse(kv->value, kv->value_len, &t->view, why, sizeof(why)) < 0) {
                op_error(op, PROTO_EINTERNAL, "the view of table '%s' in etcd is malformed: %s",
                         t->table, why);
                return -1;
            }
            t->view.number = (uint64_t)kv->mod_revision;
            t->has_view = 1;
            with_view++;
        }
        if (!t->has_view)
            snprintf(t->note, sizeof(t->note), "no view yet (the table is being opened)");
    }
    if (with_view == 0) {
        op_error(op, PROTO_ESTATE, "the tables of group '%s' have no view in etcd yet (being "
                 "opened): try again", op->group);
        return -1;
    }
    return 0;
}

static void on_views(void *ctx, const etcd_result_t *res);

static void on_rings(void *ctx, const etcd_result_t *res)
{
    servers_op_t *op = ctx;
    if (res->error) {
        op_error(op, PROTO_EINTERNAL, "the tables of group '%s' cannot be read: %s", op->group,
                 res->message);
        return;
    }
    if (read_rings(op, res) < 0)
        return;
    if (etcd_get(cluster_etcd(cluster_of(op->d)), op->views, 1, on_views, op) < 0)
        op_error(op, PROTO_EINTERNAL, "out of memory");
}

static void on_views(void *ctx, const etcd_result_t *res)
{
    servers_op_t *op = ctx;
    if (res->error) {
        op_error(op, PROTO_EINTERNAL, "the views of group '%s' cannot be read: %s", op->group,
                 res->message);
        return;
    }
    if (read_views(op, res) < 0)
        return;
    /* checked first: nothing is proposed when a table refuses */
    uint32_t changes = 0, first = 0;
    while (!op->tables[first].has_view)
        first++;
    for (uint32_t i = 0; i < op->count; i++) {
        char out[PS_VIEW_SERVERS_BYTES];
        if (!op->tables[i].has_view)
            continue;
        int rc = table_change(op, &op->tables[i], out, sizeof(out));
        if (rc < 0) {
            op_error(op, PROTO_EBADARG, "table '%s' (view %" PRIu64 ": %s): %s",
                     op->tables[i].table, op->tables[i].view.number,
                     op->tables[i].view.servers, op->tables[i].error);
            return;
        }
        changes += rc;
    }
    if (changes == 0) {
        if (op->add)
            op_error(op, PROTO_EBADARG, "%s is already a server of every table of group '%s' "
                     "(%s)", op->node, op->group, op->tables[first].view.servers);
        else
            op_error(op, PROTO_EBADARG, "%s is not a server of any table of group '%s' (%s)",
                     op->node, op->group, op->tables[first].view.servers);
        return;
    }
    for (uint32_t i = 0; i < op->count; i++)
        if (op->tables[i].has_view) {
            op->tables[i].note[0] = 0;
            op->pending++;
        }
    op->pending++; /* (the loop's own: answered once every proposal is back) */
    for (uint32_t i = 0; i < op->count; i++) {
        if (!op->tables[i].has_view)
            continue;
        table_propose(op, i);
        if (!op->tables[i].busy)
            op->pending--;
    }
    if (--op->pending == 0)
        op_reply(op);
}

static int node_name_ok(const char *s)
{
    char err[120];
    return s[0] && !strchr(s, ',') &&
           ps_cluster_ring_servers_check(s, LINKS_NODE_BYTES, err, sizeof(err)) == 0;
}

void ps_replicas_handle_servers(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    char group[LAUNCH_GROUP_BYTES] = "", add[LINKS_NODE_BYTES] = "", rem[LINKS_NODE_BYTES] = "";
    int has_add = proto_get(&msg->body, "add") != NULL;
    int has_rem = proto_get(&msg->body, "remove") != NULL;
    if (proto_get_str_copy(&msg->body, "group", group, sizeof(group)) < 0 || !group[0] ||
        strchr(group, '/') || has_add == has_rem ||
        (has_add && proto_get_str_copy(&msg->body, "add", add, sizeof(add)) < 0) ||
        (has_rem && proto_get_str_copy(&msg->body, "remove", rem, sizeof(rem)) < 0)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "usage {group, add: NODE | remove: NODE}");
        return;
    }
    const char *node = has_add ? add : rem;
    if (!node_name_ok(node)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "'%s' is not a node name",
                           node);
        return;
    }
    cluster_t *cl = cluster_of(d);
    ps_cluster_t *ps = ps_of(d);
    if (!cl) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "salusd runs without "
                           "--cluster: a table's server is this node and never changes");
        return;
    }
    if (!ps || !ps->started || cluster_lease_lost(cl)) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "node %s is %s", cluster_node(cl),
                           cluster_lease_lost(cl) ? "not a member of the cluster now (its "
                                                    "lease was lost)"
                                                  : "not serving parameter servers");
        return;
    }
    if (has_add && !ps_replicas_member_alive(d, node)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "%s is not a live member "
                           "of the cluster", node);
        return;
    }
    servers_op_t *op = calloc(1, sizeof(*op));
    if (!op || server_later_add(c, CONN_SLOT_PS_SERVERS, &op->caller, msg->id) < 0) {
        free(op);
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    op->d = d;
    op->uid = c->uid;
    op->add = has_add;
    snprintf(op->group, sizeof(op->group), "%s", group);
    snprintf(op->node, sizeof(op->node), "%s", node);
    snprintf(op->rings, sizeof(op->rings), "%s/ps/%u/%s/", cluster_prefix(cl), (unsigned)c->uid,
             group);
    snprintf(op->views, sizeof(op->views), "%s/psv/%u/%s/", cluster_prefix(cl), (unsigned)c->uid,
             group);
    LIST_INSERT_HEAD(&servers_ops, op, link);
    if (etcd_get(cluster_etcd(cl), op->rings, 1, on_rings, op) < 0)
        op_error(op, PROTO_EINTERNAL, "out of memory");
}

void ps_replicas_servers_free(const salusd_t *d)
{
    for (servers_op_t *op = LIST_FIRST(&servers_ops), *next; op; op = next) {
        next = LIST_NEXT(op, link);
        if (op->d == d)
            op_free(op); /* etcd is gone: no callback comes */
    }
}
