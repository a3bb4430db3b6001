/* The messages between daemons (over ps_net), sent here and received in ps_msg_recv.c
 * (every field checked there): a fixed little-endian header, the float32 values (and keys)
 * as the payload.
 *
 * Header: u32 magic, u8 type, u32 uid, u64 epoch, str group, str table, then per type:
 *   OPEN        u64 req, u64 count, u32 vnodes, str rule, str sync, [u64 view, u32 replicas,
 *               u8 fresh]                    payload "servers\0sources[\0view servers]"
 *   OPEN_OK     u64 req
 *   OPEN_ERR    u64 req, i32 rc, str message
 *   UPDATE      u32 shard, u32 source, u64 seq, u64 clock, u8 close, u8 keyed, u64 offset,
 *               u64 n                                   payload n floats (then n u64 keys)
 *   UPDATE_ACK  u32 shard, u32 source, u64 seq, i32 rc
 *   PULL        u64 req, u32 shard, u64 min_done, u64 first, u64 n
 *   PULL_REPLY  u64 req, i32 rc, u64 done, u64 done_at_request, u64 waited_ns, u8 waited,
 *               u64 n                                   payload n floats
 *   BYE         u32 source, u64 clocks (closes it sent in all: its last)
 *   16 .. 19    replication's (REPL_UPDATE, REPL_ACK, SHARD_STATE, SHARD_STATE_ACK):
 *               ps_repl_fwd.c
 * (str: u8 length, then the bytes; floats in the host's order, little-endian on every
 * platform salus builds for.) */
#include "ps_msg-internal.h"
#include "ps_cluster.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_msg_begin(wbuf_t *w, int type, const ps_table_t *t)
{
    w->len = 0;
    w->bad = 0;
    ps_msg_put(w, PS_MSG_MAGIC, 4);
    ps_msg_put(w, (uint64_t)type, 1);
    ps_msg_put(w, (uint64_t)t->uid, 4);
    ps_msg_put(w, t->epoch, 8);
    ps_msg_put_str(w, t->group);
    ps_msg_put_str(w, t->name);
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
    if (s->update_table) /* failed (a link that dropped): resent at the next retry */
        ps_retarget_update_sent(s->ps, s->update_table, s->update_shard, s->update_seq,
                                status == 0);
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
    if (ps->send_tap && !w->bad) /* a test's */
        return ps->send_tap(ps->send_tap_arg, node, w->b, w->len, payload, len);
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

int ps_msg_send(ps_t *ps, const char *node, const wbuf_t *w, const void *payload,
                    size_t len)
{
    return send_msg_update(ps, node, w, payload, len, NULL, 0, 0);
}

int ps_msg_send_open(ps_table_t *t, const char *node)
{
    /* fresh (empty shards) when the view is still the record's: the table's creation */
    return ps_msg_send_open_as(t, node, !t->view_servers[0] ||
                                            strcmp(t->view_servers, t->spec.servers) == 0);
}

int ps_msg_send_open_as(ps_table_t *t, const char *node, int fresh)
{
    wbuf_t w;
    ps_msg_begin(&w, MSG_OPEN, t);
    ps_msg_put(&w, t->open_req, 8);
    ps_msg_put(&w, t->spec.count, 8);
    ps_msg_put(&w, t->vnodes, 4); /* the record's: every server builds the same ring */
    ps_msg_put_str(&w, t->rule_text);
    ps_msg_put_str(&w, t->sync_text);
    ps_msg_put(&w, t->view, 8);   /* the view, R, fresh (optional for a receiver) */
    ps_msg_put(&w, t->replicas, 4);
    ps_msg_put(&w, (uint64_t)(fresh != 0), 1);
    size_t cap = 2 * PS_SERVERS_BYTES + (size_t)t->sources * PS_NODE_BYTES + 2, len;
    char *payload = malloc(cap);
    if (!payload)
        return -ENOMEM;
    len = (size_t)snprintf(payload, cap, "%s", t->spec.servers) + 1;
    for (uint32_t s = 0; s < t->sources; s++)
        len += (size_t)snprintf(payload + len, cap - len, "%s%s", s ? "," : "",
                                t->source_names[s]);
    len++; /* the view's servers after a NUL */
    len += (size_t)snprintf(payload + len, cap - len, "%s",
                            t->view_servers[0] ? t->view_servers : t->spec.servers);
    int rc = ps_msg_send(t->ps, node, &w, payload, len);
    free(payload);
    return rc;
}

void ps_msg_put_update(wbuf_t *w, uint32_t shard, uint32_t source, const ps_update_t *u)
{
    ps_msg_put(w, shard, 4);
    ps_msg_put(w, source, 4);
    ps_msg_put(w, u->seq, 8);
    ps_msg_put(w, u->clock, 8);
    ps_msg_put(w, (uint64_t)u->close, 1);
    ps_msg_put(w, u->keys != NULL, 1);
    ps_msg_put(w, u->offset, 8);
    ps_msg_put(w, u->n, 8);
}

int ps_msg_send_update(ps_table_t *t, uint32_t shard, const ps_update_t *u)
{
    wbuf_t w;
    ps_msg_begin(&w, MSG_UPDATE, t);
    ps_msg_put_update(&w, shard, t->self_source, u);
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
    ps_msg_begin(&w, MSG_PULL, t);
    ps_msg_put(&w, f->req, 8);
    ps_msg_put(&w, f->shard, 4);
    ps_msg_put(&w, f->min_done, 8);
    ps_msg_put(&w, f->first, 8);
    ps_msg_put(&w, f->n, 8);
    return ps_msg_send(t->ps, f->node, &w, NULL, 0);
}

void ps_msg_send_pull_reply(ps_table_t *t, const ps_wait_t *wt, int rc, const char *err)
{
    (void)err;
    wbuf_t w;
    ps_shard_t *sh = rc == 0 ? t->shards[wt->shard] : NULL;
    ps_msg_begin(&w, MSG_PULL_REPLY, t);
    ps_msg_put(&w, wt->req, 8);
    ps_msg_put(&w, (uint64_t)(uint32_t)rc, 4);
    ps_msg_put(&w, sh ? ps_shard_done(sh) : 0, 8);
    ps_msg_put(&w, wt->done_at_request, 8);
    ps_msg_put(&w, wt->since_ns ? salusd_now_ns() - wt->since_ns : 0, 8);
    ps_msg_put(&w, wt->since_ns != 0, 1);
    ps_msg_put(&w, sh ? wt->n : 0, 8);
    if (ps_msg_send(t->ps, wt->node, &w, sh ? ps_shard_values(sh) + wt->first : NULL,
                 sh ? wt->n * sizeof(float) : 0) < 0)
        LOG_DEBUG("ps: a pull reply to %s was not sent", wt->node);
}

void ps_msg_send_ack(ps_table_t *t, const char *node, uint32_t shard, uint32_t source,
                     uint64_t seq, int rc)
{
    wbuf_t w;
    ps_msg_begin(&w, MSG_UPDATE_ACK, t);
    ps_msg_put(&w, shard, 4);
    ps_msg_put(&w, source, 4);
    ps_msg_put(&w, seq, 8);
    ps_msg_put(&w, (uint64_t)(uint32_t)rc, 4);
    ps_msg_send(t->ps, node, &w, NULL, 0);
}

void ps_msg_send_bye(ps_table_t *t)
{
    if (t->self_source < 0 || !t->ring)
        return;
    wbuf_t w;
    ps_msg_begin(&w, MSG_BYE, t);
    ps_msg_put(&w, (uint64_t)t->self_source, 4);
    ps_msg_put(&w, ps_worker_clocks_sent(t), 8);
    for (size_t i = 0; i < ps_ring_size(t->ring); i++)
        if ((int)i != t->self_server)
            ps_msg_send(t->ps, ps_ring_name(t->ring, i), &w, NULL, 0);
}
