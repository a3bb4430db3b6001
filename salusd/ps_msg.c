/* The messages between daemons (over ps_net): a fixed little-endian header, the float32
 * values (and keys) as the payload. Every field received is checked: the table's identity,
 * the sender's place in it (a source for updates, one of the group's nodes for pulls, a
 * server for open answers and acks), sizes and indices; anything bad is dropped and counted.
 *
 * Header: u32 magic, u8 type, u32 uid, u64 epoch, str group, str table, then per type:
 *   OPEN        u64 req, u64 count, u32 vnodes, str rule, str sync   payload "servers\0sources"
 *   OPEN_OK     u64 req
 *   OPEN_ERR    u64 req, i32 rc, str message
 *   UPDATE      u32 shard, u32 source, u64 seq, u64 clock, u8 close, u8 keyed, u64 offset,
 *               u64 n                                   payload n floats (then n u64 keys)
 *   UPDATE_ACK  u32 shard, u32 source, u64 seq, i32 rc
 *   PULL        u64 req, u32 shard, u64 min_done, u64 first, u64 n
 *   PULL_REPLY  u64 req, i32 rc, u64 done, u64 done_at_request, u64 waited_ns, u8 waited,
 *               u64 n                                   payload n floats
 *   BYE         u32 source
 * (str: u8 length, then the bytes; floats in the host's order, little-endian on every
 * platform salus builds for.) */
#include "ps-internal.h"
#include "ps_cluster.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_MSG_MAGIC 0x50534d31u /* "PSM1" */

enum {
    MSG_OPEN = 1,
    MSG_OPEN_OK,
    MSG_OPEN_ERR,
    MSG_UPDATE,
    MSG_UPDATE_ACK,
    MSG_PULL,
    MSG_PULL_REPLY,
    MSG_BYE,
};

typedef struct wbuf_s {
    uint8_t b[PS_NET_MAX_HEADER];
    size_t len;
    int bad;
} wbuf_t;

static void put(wbuf_t *w, uint64_t v, size_t bytes)
{
    if (w->len + bytes > sizeof(w->b)) {
        w->bad = 1;
        return;
    }
    for (size_t i = 0; i < bytes; i++)
        w->b[w->len++] = (uint8_t)(v >> (8 * i));
}

static void put_str(wbuf_t *w, const char *s)
{
    size_t n = strlen(s);
    if (n > 255 || w->len + 1 + n > sizeof(w->b)) {
        w->bad = 1;
        return;
    }
    w->b[w->len++] = (uint8_t)n;
    memcpy(w->b + w->len, s, n);
    w->len += n;
}

typedef struct rbuf_s {
    const uint8_t *b;
    size_t len, at;
    int bad;
} rbuf_t;

static uint64_t get(rbuf_t *r, size_t bytes)
{
    uint64_t v = 0;
    if (r->at + bytes > r->len) {
        r->bad = 1;
        return 0;
    }
    for (size_t i = 0; i < bytes; i++)
        v |= (uint64_t)r->b[r->at++] << (8 * i);
    return v;
}

/* A string into out (NUL-terminated); bad when too long for out or it holds a NUL. */
static void get_str(rbuf_t *r, char *out, size_t size)
{
    size_t n = (size_t)get(r, 1);
    if (r->bad || r->at + n > r->len || n >= size || memchr(r->b + r->at, '\0', n)) {
        r->bad = 1;
        out[0] = '\0';
        return;
    }
    memcpy(out, r->b + r->at, n);
    out[n] = '\0';
    r->at += n;
}

static void begin(wbuf_t *w, int type, const ps_table_t *t)
{
    w->len = 0;
    w->bad = 0;
    put(w, PS_MSG_MAGIC, 4);
    put(w, (uint64_t)type, 1);
    put(w, (uint64_t)t->uid, 4);
    put(w, t->epoch, 8);
    put_str(w, t->group);
    put_str(w, t->name);
}

/* A send on its way: the payload's copy, and where it went (a failed endpoint makes that
 * node down: ps_cluster_send_failed). */
typedef struct sending_s {
    ps_t *ps;
    char node[PS_NODE_BYTES];
    uint64_t update_table;    /* an update's table handle (0: not an update), shard, seq */
    uint32_t update_shard;
    uint64_t update_seq;
    unsigned char payload[];
} sending_t;

static void on_sent(void *ctx, int status)
{
    sending_t *s = ctx;
    if (status == 0 && s->update_table)
        ps_worker_update_sent(s->ps, s->update_table, s->update_shard, s->update_seq);
    /* a lost message is covered: updates are resent, and a node that went down fails what
     * waits on it */
    if (status < 0 && s->ps->d->ps == s->ps)
        ps_cluster_send_failed(s->ps->d, s->node, status);
    free(s);
}

/* Sends header w and a copy of payload (the state it came from may change before UCX has
 * sent it). 0 or a negative errno. */
static int send_msg_update(ps_t *ps, const char *node, const wbuf_t *w, const void *payload,
                           size_t len, const ps_table_t *t, uint32_t shard, uint64_t seq)
{
    ps_net_t *net = ps_cluster_net(ps->d);
    if (!net || w->bad)
        return -EHOSTUNREACH;
    sending_t *s = malloc(sizeof(*s) + len);
    if (!s)
        return -ENOMEM;
    s->ps = ps;
    s->update_table = t ? t->handle : 0;
    s->update_shard = shard;
    s->update_seq = seq;
    snprintf(s->node, sizeof(s->node), "%s", node);
    if (len)
        memcpy(s->payload, payload, len);
    int rc = ps_net_send(net, node, w->b, w->len, len ? s->payload : NULL, len, on_sent, s);
    if (rc < 0)
        free(s);
    return rc;
}

static int send_msg(ps_t *ps, const char *node, const wbuf_t *w, const void *payload,
                    size_t len)
{
    return send_msg_update(ps, node, w, payload, len, NULL, 0, 0);
}

int ps_msg_send_open(ps_table_t *t, const char *node)
{
    wbuf_t w;
    begin(&w, MSG_OPEN, t);
    put(&w, t->open_req, 8);
    put(&w, t->spec.count, 8);
    put(&w, PS_RING_VNODES, 4);
    put_str(&w, t->rule_text);
    put_str(&w, t->sync_text);
    size_t cap = PS_SERVERS_BYTES + (size_t)t->sources * PS_NODE_BYTES + 1, len;
    char *payload = malloc(cap);
    if (!payload)
        return -ENOMEM;
    len = (size_t)snprintf(payload, cap, "%s", t->spec.servers) + 1;
    for (uint32_t s = 0; s < t->sources; s++)
        len += (size_t)snprintf(payload + len, cap - len, "%s%s", s ? "," : "",
                                t->source_names[s]);
    int rc = send_msg(t->ps, node, &w, payload, len);
    free(payload);
    return rc;
}

int ps_msg_send_update(ps_table_t *t, uint32_t shard, const ps_update_t *u)
{
    wbuf_t w;
    begin(&w, MSG_UPDATE, t);
    put(&w, shard, 4);
    put(&w, (uint64_t)t->self_source, 4);
    put(&w, u->seq, 8);
    put(&w, u->clock, 8);
    put(&w, (uint64_t)u->close, 1);
    put(&w, u->keys != NULL, 1);
    put(&w, u->offset, 8);
    put(&w, u->n, 8);
    const char *node = ps_ring_name(t->ring, t->owner[shard]);
    if (!u->keys) /* the values as they are (send_msg copies them once) */
        return send_msg_update(t->ps, node, &w, u->values, u->n * sizeof(float), t, shard,
                               u->seq);
    size_t len = u->n * (sizeof(float) + sizeof(uint64_t));
    uint8_t *payload = malloc(len);
    if (!payload)
        return -ENOMEM;
    memcpy(payload, u->values, u->n * sizeof(float));
    memcpy(payload + u->n * sizeof(float), u->keys, u->n * sizeof(uint64_t));
    int rc = send_msg_update(t->ps, node, &w, payload, len, t, shard, u->seq);
    free(payload);
    return rc;
}

int ps_msg_send_pull(ps_table_t *t, const ps_fetch_t *f)
{
    wbuf_t w;
    begin(&w, MSG_PULL, t);
    put(&w, f->req, 8);
    put(&w, f->shard, 4);
    put(&w, f->min_done, 8);
    put(&w, f->first, 8);
    put(&w, f->n, 8);
    return send_msg(t->ps, f->node, &w, NULL, 0);
}

void ps_msg_send_pull_reply(ps_table_t *t, const ps_wait_t *wt, int rc, const char *err)
{
    (void)err;
    wbuf_t w;
    ps_shard_t *sh = rc == 0 ? t->shards[wt->shard] : NULL;
    begin(&w, MSG_PULL_REPLY, t);
    put(&w, wt->req, 8);
    put(&w, (uint64_t)(uint32_t)rc, 4);
    put(&w, sh ? ps_shard_done(sh) : 0, 8);
    put(&w, wt->done_at_request, 8);
    put(&w, wt->since_ns ? salusd_now_ns() - wt->since_ns : 0, 8);
    put(&w, wt->since_ns != 0, 1);
    put(&w, sh ? wt->n : 0, 8);
    if (send_msg(t->ps, wt->node, &w, sh ? ps_shard_values(sh) + wt->first : NULL,
                 sh ? wt->n * sizeof(float) : 0) < 0)
        LOG_DEBUG("ps: a pull reply to %s was not sent", wt->node);
}

static void send_ack(ps_table_t *t, const char *node, uint32_t shard, uint32_t source,
                     uint64_t seq, int rc)
{
    wbuf_t w;
    begin(&w, MSG_UPDATE_ACK, t);
    put(&w, shard, 4);
    put(&w, source, 4);
    put(&w, seq, 8);
    put(&w, (uint64_t)(uint32_t)rc, 4);
    send_msg(t->ps, node, &w, NULL, 0);
}

void ps_msg_send_bye(ps_table_t *t)
{
    if (t->self_source < 0 || !t->ring)
        return;
    wbuf_t w;
    begin(&w, MSG_BYE, t);
    put(&w, (uint64_t)t->self_source, 4);
    for (size_t i = 0; i < ps_ring_size(t->ring); i++)
        if ((int)i != t->self_server)
            send_msg(t->ps, ps_ring_name(t->ring, i), &w, NULL, 0);
}

/* The index of node among the table's sources, or -1. */
static int source_index(const ps_table_t *t, const char *node)
{
    for (uint32_t s = 0; s < t->sources; s++)
        if (strcmp(t->source_names[s], node) == 0)
            return (int)s;
    return -1;
}

static int is_server(const ps_table_t *t, const char *node)
{
    for (size_t i = 0; t->ring && i < ps_ring_size(t->ring); i++)
        if (strcmp(ps_ring_name(t->ring, i), node) == 0)
            return 1;
    return 0;
}

/* A remote open: the table's shards here. 0, or a negative errno with err. */
static int recv_open(ps_t *ps, const char *node, uid_t uid, const char *group,
                     const char *name, ps_ring_record_t *rec, const char *payload,
                     size_t payload_len, char *err, size_t err_size)
{
    const char *end = memchr(payload, '\0', payload_len);
    if (!payload || !end || payload_len - (size_t)(end - payload) - 1 >= 64 * 1024 ||
        (size_t)(end - payload) >= sizeof(rec->servers)) {
        snprintf(err, err_size, "malformed open");
        return -EINVAL;
    }
    memcpy(rec->servers, payload, (size_t)(end - payload) + 1);
    size_t slen = payload_len - (size_t)(end - payload) - 1;
    char *list = malloc(slen + 1);
    if (!list)
        return -ENOMEM;
    memcpy(list, end + 1, slen);
    list[slen] = '\0';
    const char *sources[PS_MAX_SOURCES];
    uint32_t n = 0;
    int rc = 0, sender_in = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && rc == 0;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == PS_MAX_SOURCES || strlen(tok) >= PS_NODE_BYTES)
            rc = -EINVAL;
        else
            sources[n++] = tok;
        sender_in |= strcmp(tok, node) == 0;
    }
    ps_table_t *t = NULL;
    if (rc == 0 && !sender_in) {
        snprintf(err, err_size, "%s runs no rank of group %s", node, group);
        rc = -EPERM;
    } else if (rc < 0)
        snprintf(err, err_size, "malformed source list");
    ps_table_t *old = rc == 0 ? ps_table_find(ps, uid, group, name, rec->epoch) : NULL;
    if (old) { /* a retried open, or this daemon's own workers' table */
        char rule[32], sync[32];
        ps_rule_format(&old->spec.rule, rule, sizeof(rule));
        ps_sync_format(&old->spec.sync, sync, sizeof(sync));
        if (old->spec.count != rec->count || strcmp(rule, rec->rule) != 0 ||
            strcmp(sync, rec->sync) != 0) {
            snprintf(err, err_size, "table '%s' exists here with another spec", name);
            rc = -EINVAL;
        }
        free(list);
        return rc;
    }
    if (rc == 0 && !(t = ps_table_new(ps, uid, 0, group, name)))
        rc = -ENOMEM;
    if (rc == 0)
        rc = ps_table_build(t, rec, sources, n, err, err_size);
    if (rc == 0 && t->self_server < 0) {
        snprintf(err, err_size, "%s is not a server of table '%s'", ps_cluster_self(ps->d),
                 name);
        rc = -EINVAL;
    }
    if (rc == 0) { /* before the shards take memory */
        uint64_t more = ps_table_shard_bytes(t);
        rc = ps_quota_check(ps, uid, more, name, err, err_size);
        t->charged_bytes = rc == 0 ? more : 0;
    }
    if (rc == 0)
        rc = ps_table_create_shards(t, err, err_size);
    free(list);
    if (rc < 0) {
        if (t)
            ps_table_free(t);
        ps->stats.refused++;
        return rc;
    }
    t->state = PS_TABLE_READY;
    LOG_INFO("ps: serving %u shard(s) of table '%s' of group %s (uid %u) for %s",
             t->layout.shards, name, group, (unsigned)uid, node);
    return 0;
}

static void drop(ps_t *ps, const char *node, const char *why)
{
    ps->dropped++;
    ps->stats.refused++;
    LOG_DEBUG("ps: a message from %s dropped: %s", node, why);
}

void ps_msg_recv(void *ctx, const char *node, const void *header, size_t header_len,
                 const void *payload, size_t payload_len)
{
    ps_t *ps = ctx;
    rbuf_t r = {header, header_len, 0, 0};
    char group[PS_GROUP_BYTES], name[PS_NAME_BYTES], err[PS_ERR_BYTES];
    if (get(&r, 4) != PS_MSG_MAGIC) {
        drop(ps, node, "bad magic");
        return;
    }
    int type = (int)get(&r, 1);
    uid_t uid = (uid_t)get(&r, 4);
    uint64_t epoch = get(&r, 8);
    get_str(&r, group, sizeof(group));
    get_str(&r, name, sizeof(name));
    if (r.bad || !ps_name_valid(name) || !group[0]) {
        drop(ps, node, "bad identity");
        return;
    }
    ps_table_t *t = ps_table_find(ps, uid, group, name, epoch);
    switch (type) {
    case MSG_OPEN: {
        ps_ring_record_t rec = {.epoch = epoch};
        uint64_t req = get(&r, 8);
        rec.count = get(&r, 8);
        rec.vnodes = (uint32_t)get(&r, 4);
        get_str(&r, rec.rule, sizeof(rec.rule));
        get_str(&r, rec.sync, sizeof(rec.sync));
        if (r.bad || rec.vnodes == 0 || rec.vnodes > 4096) {
            drop(ps, node, "malformed open");
            return;
        }
        err[0] = '\0';
        int rc = recv_open(ps, node, uid, group, name, &rec, payload, payload_len, err,
                           sizeof(err));
        ps_table_t id = {.uid = uid, .epoch = epoch};
        snprintf(id.group, sizeof(id.group), "%s", group);
        snprintf(id.name, sizeof(id.name), "%s", name);
        wbuf_t w;
        begin(&w, rc == 0 ? MSG_OPEN_OK : MSG_OPEN_ERR, &id);
        put(&w, req, 8);
        if (rc < 0) {
            put(&w, (uint64_t)(uint32_t)rc, 4);
            put_str(&w, err);
        }
        send_msg(ps, node, &w, NULL, 0);
        return;
    }
    case MSG_OPEN_OK:
    case MSG_OPEN_ERR: {
        uint64_t req = get(&r, 8);
        int32_t rc = type == MSG_OPEN_ERR ? (int32_t)(uint32_t)get(&r, 4) : 0;
        char why[256] = "";
        if (type == MSG_OPEN_ERR)
            get_str(&r, why, sizeof(why));
        if (r.bad || !t || t->state != PS_TABLE_OPENING || t->open_req != req ||
            !is_server(t, node) || !t->opens_pending || (type == MSG_OPEN_ERR && rc >= 0)) {
            drop(ps, node, "unexpected open answer");
            return;
        }
        if (type == MSG_OPEN_ERR) {
            snprintf(err, sizeof(err), "server %s: %s", node, why);
            ps_table_fail(t, rc == -EDQUOT || rc == -EINVAL ? rc : -EIO, err);
            return;
        }
        if (--t->opens_pending == 0)
            ps_table_ready(t);
        return;
    }
    case MSG_UPDATE: {
        ps_update_t u = {0};
        uint32_t shard = (uint32_t)get(&r, 4), source = (uint32_t)get(&r, 4);
        u.seq = get(&r, 8);
        u.clock = get(&r, 8);
        u.close = (int)get(&r, 1);
        int keyed = (int)get(&r, 1);
        u.offset = get(&r, 8);
        u.n = get(&r, 8);
        if (r.bad || !t || !t->ring || source >= t->sources ||
            strcmp(t->source_names[source], node) != 0 || shard >= t->layout.shards ||
            !t->shards[shard] || u.n > ps_shard_elems(t->shards[shard]) || u.close > 1 ||
            keyed > 1 ||
            payload_len != u.n * sizeof(float) + (keyed ? u.n * sizeof(uint64_t) : 0)) {
            drop(ps, node, "bad update");
            return;
        }
        /* the payload's alignment is UCX's: copied to be read as floats and keys */
        void *copy = payload_len ? malloc(payload_len) : NULL;
        if (payload_len && !copy)
            return; /* no ack: the source resends */
        if (payload_len)
            memcpy(copy, payload, payload_len);
        u.values = copy;
        u.keys = keyed ? (uint64_t *)((uint8_t *)copy + u.n * sizeof(float)) : NULL;
        int rc = ps_server_update(t, shard, source, &u);
        free(copy);
        if (rc < 0)
            drop(ps, node, "update refused by the shard");
        send_ack(t, node, shard, source, u.seq, rc < 0 ? rc : 0);
        return;
    }
    case MSG_UPDATE_ACK: {
        uint32_t shard = (uint32_t)get(&r, 4), source = (uint32_t)get(&r, 4);
        uint64_t seq = get(&r, 8);
        int32_t rc = (int32_t)(uint32_t)get(&r, 4);
        if (r.bad || !t || !t->streams || shard >= t->layout.shards ||
            (int)source != t->self_source ||
            strcmp(ps_ring_name(t->ring, t->owner[shard]), node) != 0) {
            drop(ps, node, "bad update ack");
            return;
        }
        ps_worker_acked(t, shard, seq, rc);
        return;
    }
    case MSG_PULL: {
        ps_wait_t *w = calloc(1, sizeof(*w));
        if (!w)
            return;
        w->req = get(&r, 8);
        w->shard = (uint32_t)get(&r, 4);
        w->min_done = get(&r, 8);
        w->first = get(&r, 8);
        w->n = get(&r, 8);
        snprintf(w->node, sizeof(w->node), "%s", node);
        if (r.bad || !t || !t->ring || source_index(t, node) < 0 ||
            w->shard >= t->layout.shards || !t->shards[w->shard] || w->n == 0) {
            drop(ps, node, "bad pull");
            free(w);
            return;
        }
        if (ps_server_read(t, w) < 0) /* (w is freed) */
            drop(ps, node, "pull outside the shard");
        return;
    }
    case MSG_PULL_REPLY: {
        uint64_t req = get(&r, 8);
        int32_t rc = (int32_t)(uint32_t)get(&r, 4);
        uint64_t done = get(&r, 8), at_request = get(&r, 8), waited_ns = get(&r, 8);
        int waited = (int)get(&r, 1);
        uint64_t n = get(&r, 8);
        ps_fetch_t **fp = &ps->fetches;
        while (*fp && ((*fp)->req != req || strcmp((*fp)->node, node) != 0))
            fp = &(*fp)->next;
        ps_fetch_t *f = *fp;
        if (r.bad || !f || f->table != t || (rc == 0 && n != f->n) ||
            payload_len != (rc == 0 ? n * sizeof(float) : 0)) {
            drop(ps, node, "bad pull reply");
            return;
        }
        *fp = f->next;
        float *values = rc == 0 ? malloc(n * sizeof(float) + 1) : NULL;
        if (values)
            memcpy(values, payload, n * sizeof(float));
        snprintf(err, sizeof(err), "server %s refused the read", node);
        ps_fetch_finish(f, rc < 0 ? rc : values ? 0 : -ENOMEM, err, values, done, at_request,
                        waited_ns, waited != 0);
        free(values);
        return;
    }
    case MSG_BYE: {
        uint32_t source = (uint32_t)get(&r, 4);
        if (r.bad || !t || source >= t->sources || strcmp(t->source_names[source], node) != 0) {
            drop(ps, node, "bad bye");
            return;
        }
        t->source_over[source] = 1;
        ps_server_drop_waits(t, node, NULL);
        ps_table_maybe_free(t);
        return;
    }
    default:
        drop(ps, node, "unknown type");
    }
}
