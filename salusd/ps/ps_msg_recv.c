/* Receiving the messages between daemons (the format: ps_msg.c). Every field is checked: the
 * table's identity, the sender's place in it (a source for updates, one of the group's nodes
 * for pulls and opens, a server for open answers and acks), sizes and indices; anything bad
 * is dropped and counted, never trusted. */
#include "ps_msg-internal.h"
#include "ps_ckpt.h"
#include "ps_cluster.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The view an open carries (absent from an older sender: the record's, R 1). */
typedef struct open_view_s {
    uint64_t number;
    uint32_t replicas;
    int fresh;                /* the table's creation: its shards start empty here */
    char servers[PS_SERVERS_BYTES];
} open_view_t;

/* A remote open: the table's shards here. 0, or a negative errno with err. */
static int recv_open(ps_t *ps, const char *node, uid_t uid, const char *group,
                     const char *name, ps_ring_record_t *rec, open_view_t *view,
                     const char *payload, size_t payload_len, char *err, size_t err_size)
{
    const char *end = payload ? memchr(payload, '\0', payload_len) : NULL;
    if (!payload || !end || payload_len - (size_t)(end - payload) - 1 >= 64 * 1024 ||
        (size_t)(end - payload) >= sizeof(rec->servers)) {
        snprintf(err, err_size, "malformed open");
        return -EINVAL;
    }
    memcpy(rec->servers, payload, (size_t)(end - payload) + 1);
    size_t slen = payload_len - (size_t)(end - payload) - 1;
    const char *vend = memchr(end + 1, '\0', slen); /* sources, then the view's servers */
    if (vend) {
        size_t vlen = payload_len - (size_t)(vend - payload) - 1;
        if (vlen >= sizeof(view->servers) || memchr(vend + 1, '\0', vlen)) {
            snprintf(err, err_size, "malformed open");
            return -EINVAL;
        }
        memcpy(view->servers, vend + 1, vlen);
        view->servers[vlen] = '\0';
        slen = (size_t)(vend - end) - 1;
    }
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
        char rule[32], sync[32], store[PS_SERVERS_BYTES], servers[PS_SERVERS_BYTES];
        const char *names[PS_MAX_SERVERS];
        char why[64];
        ps_rule_format(&old->spec.rule, rule, sizeof(rule));
        ps_sync_format(&old->spec.sync, sync, sizeof(sync));
        /* the same ring too: servers (sorted as the table keeps them) and virtual nodes */
        if (ps_parse_servers(rec->servers, store, sizeof(store), names, servers,
                             sizeof(servers), why, sizeof(why)) <= 0)
            servers[0] = '\0';
        if (old->spec.count != rec->count || strcmp(rule, rec->rule) != 0 ||
            strcmp(sync, rec->sync) != 0 || strcmp(servers, old->spec.servers) != 0 ||
            rec->vnodes != old->vnodes) {
            snprintf(err, err_size, "table '%s' exists here with another spec", name);
            ps->stats.refused++;
            rc = -EINVAL;
        }
        free(list);
        return rc;
    }
    if (rc == 0 && !(t = ps_table_new(ps, uid, 0, group, name)))
        rc = -ENOMEM;
    if (rc == 0)
        rc = ps_table_build(t, rec, sources, n, err, err_size);
    if (rc == 0) /* the view in force: this daemon is a server of it */
        rc = ps_repl_init_view(t, view->number, view->servers, view->replicas, err,
                               err_size);
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
    /* a server that joined the view later: its shards come as copies, never empty (its
     * primaries wait for theirs; a standby refuses forwards until its copy came) */
    for (uint32_t i = 0; rc == 0 && !view->fresh && i < t->layout.shards; i++)
        t->repl[i].loading = ps_repl_is_primary(t, i);
    if (rc == 0 && view->fresh)
        rc = ps_table_create_shards(t, err, err_size);
    free(list);
    if (rc < 0) {
        if (t)
            ps_table_free(t);
        ps->stats.refused++;
        return rc;
    }
    t->state = PS_TABLE_READY;
    ps_repl_watch(t);
    LOG_INFO("ps: serving %u shard(s) of table '%s' of group %s (uid %u) for %s (view %llu, "
             "%s)", t->layout.shards, name, group, (unsigned)uid, node,
             (unsigned long long)t->view, view->fresh ? "new" : "joined: state from copies");
    return 0;
}

static void drop(ps_t *ps, const char *node, const char *why)
{
    ps->dropped++;
    ps->stats.refused++;
    LOG_DEBUG("ps: a message from %s dropped: %s", node, why);
}

/* 1 when a payload of n floats (then n keys when keyed) can be read where it lies. */
static int aligned_for(const void *payload, uint64_t n, int keyed)
{
    uintptr_t at = (uintptr_t)payload;
    if (at % _Alignof(float) != 0)
        return 0;
    return !keyed || (at + n * sizeof(float)) % _Alignof(uint64_t) == 0;
}

void ps_msg_recv(void *ctx, const char *node, const void *header, size_t header_len,
                 const void *payload, size_t payload_len)
{
    ps_t *ps = ctx;
    rbuf_t r = {header, header_len, 0, 0};
    char group[PS_GROUP_BYTES], name[PS_NAME_BYTES], err[PS_ERR_BYTES];
    if (ps_msg_get(&r, 4) != PS_MSG_MAGIC) {
        drop(ps, node, "bad magic");
        return;
    }
    int type = (int)ps_msg_get(&r, 1);
    uid_t uid = (uid_t)ps_msg_get(&r, 4);
    uint64_t epoch = ps_msg_get(&r, 8);
    ps_msg_get_str(&r, group, sizeof(group));
    ps_msg_get_str(&r, name, sizeof(name));
    if (r.bad || !ps_name_valid(name) || !group[0]) {
        drop(ps, node, "bad identity");
        return;
    }
    ps_table_t *t = ps_table_find(ps, uid, group, name, epoch);
    switch (type) {
    case MSG_OPEN: {
        ps_ring_record_t rec = {.epoch = epoch};
        uint64_t req = ps_msg_get(&r, 8);
        rec.count = ps_msg_get(&r, 8);
        rec.vnodes = (uint32_t)ps_msg_get(&r, 4);
        ps_msg_get_str(&r, rec.rule, sizeof(rec.rule));
        ps_msg_get_str(&r, rec.sync, sizeof(rec.sync));
        open_view_t view = {.replicas = 1, .fresh = 1};
        if (!r.bad && r.at < r.len) { /* the view (absent from an older sender) */
            view.number = ps_msg_get(&r, 8);
            view.replicas = (uint32_t)ps_msg_get(&r, 4);
            view.fresh = (int)ps_msg_get(&r, 1);
        }
        if (r.bad || rec.vnodes == 0 || rec.vnodes > 4096 || view.replicas == 0 ||
            view.replicas > PS_MAX_REPLICAS || view.fresh > 1) {
            drop(ps, node, "malformed open");
            return;
        }
        err[0] = '\0';
        int rc = recv_open(ps, node, uid, group, name, &rec, &view, payload, payload_len, err,
                           sizeof(err));
        ps_table_t id = {.uid = uid, .epoch = epoch};
        snprintf(id.group, sizeof(id.group), "%s", group);
        snprintf(id.name, sizeof(id.name), "%s", name);
        wbuf_t w;
        ps_msg_begin(&w, rc == 0 ? MSG_OPEN_OK : MSG_OPEN_ERR, &id);
        ps_msg_put(&w, req, 8);
        if (rc < 0) {
            ps_msg_put(&w, (uint64_t)(uint32_t)rc, 4);
            ps_msg_put_str(&w, err);
        }
        ps_msg_send(ps, node, &w, NULL, 0);
        return;
    }
    case MSG_OPEN_OK:
    case MSG_OPEN_ERR: {
        uint64_t req = ps_msg_get(&r, 8);
        int32_t rc = type == MSG_OPEN_ERR ? (int32_t)(uint32_t)ps_msg_get(&r, 4) : 0;
        char why[256] = "";
        if (type == MSG_OPEN_ERR)
            ps_msg_get_str(&r, why, sizeof(why));
        if (!r.bad && t && t->state == PS_TABLE_READY && t->open_req == req &&
            is_server(t, node)) { /* a server new in the view took the table (or not) */
            if (type == MSG_OPEN_ERR)
                LOG_WARN("ps: table '%s': server %s refused it: %s", t->name, node, why);
            ps_repl_open_answered(t, node);
            return;
        }
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
        uint32_t shard = (uint32_t)ps_msg_get(&r, 4), source = (uint32_t)ps_msg_get(&r, 4);
        u.seq = ps_msg_get(&r, 8);
        u.clock = ps_msg_get(&r, 8);
        u.close = (int)ps_msg_get(&r, 1);
        int keyed = (int)ps_msg_get(&r, 1);
        u.offset = ps_msg_get(&r, 8);
        u.n = ps_msg_get(&r, 8);
        uint64_t first = 0, elems = 0;
        if (!r.bad && t && shard < t->layout.shards)
            ps_layout_shard(&t->layout, shard, &first, &elems);
        if (!r.bad && !t) { /* not here (this daemon restarted?): not the primary here */
            ps_table_t id = {.ps = ps, .uid = uid, .epoch = epoch};
            snprintf(id.group, sizeof(id.group), "%s", group);
            snprintf(id.name, sizeof(id.name), "%s", name);
            ps_msg_send_ack(&id, node, shard, source, u.seq, -ESTALE);
            drop(ps, node, "an update of a table not here");
            return;
        }
        if (r.bad || !t || !t->ring || source >= t->sources ||
            strcmp(t->source_names[source], node) != 0 || shard >= t->layout.shards ||
            u.n > elems || u.close > 1 || keyed > 1 ||
            payload_len != u.n * sizeof(float) + (keyed ? u.n * sizeof(uint64_t) : 0)) {
            drop(ps, node, "bad update");
            return;
        }
        /* the payload's alignment is UCX's: read in place when it suits floats (and keys),
         * else copied */
        const uint8_t *at = payload;
        void *copy = NULL;
        if (payload_len && !aligned_for(at, u.n, keyed)) {
            copy = malloc(payload_len);
            if (!copy)
                return; /* no ack: the source resends */
            memcpy(copy, payload, payload_len);
            at = copy;
        }
        u.values = (const float *)(const void *)at;
        u.keys = keyed ? (uint64_t *)(uintptr_t)(at + u.n * sizeof(float)) : NULL;
        int rc = ps_repl_update(t, shard, source, &u, node); /* applied, forwarded */
        free(copy);
        if (rc == PS_UPDATE_PENDING)
            return; /* acknowledged once every live standby has it */
        if (rc == -ESTALE) { /* not the primary here (now): the source keeps it */
            ps_msg_send_ack(t, node, shard, source, u.seq, rc);
            return;
        }
        if (rc == -ENOMEM || rc == -EAGAIN) {
            /* not now (no memory, or beyond the sync window: done must move first): no ack,
             * the source resends it */
            LOG_DEBUG("ps: update %llu of '%s' shard %u from %s held back: %s",
                      (unsigned long long)u.seq, t->name, shard, node, strerror(-rc));
            return;
        }
        if (rc < 0 && rc != -ERANGE) /* (-ERANGE: taken, its values refused: told) */
            drop(ps, node, "update refused by the shard");
        ps_msg_send_ack(t, node, shard, source, u.seq, rc < 0 ? rc : 0);
        return;
    }
    case MSG_UPDATE_ACK: {
        uint32_t shard = (uint32_t)ps_msg_get(&r, 4), source = (uint32_t)ps_msg_get(&r, 4);
        uint64_t seq = ps_msg_get(&r, 8);
        int32_t rc = (int32_t)(uint32_t)ps_msg_get(&r, 4);
        if (r.bad || !t || !t->streams || shard >= t->layout.shards ||
            (int)source != t->self_source ||
            strcmp(ps_ring_name(t->ring, t->owner[shard]), node) != 0) {
            drop(ps, node, "bad update ack");
            return;
        }
        if (rc == -ESTALE && t->state == PS_TABLE_READY && t->repl)
            ps_repl_send_open(t, node); /* the primary of our view: it may have lost the
                                         * table (restarted); one that has it answers OK */
        ps_worker_acked(t, shard, seq, rc);
        return;
    }
    case MSG_PULL: {
        ps_wait_t *w = calloc(1, sizeof(*w));
        if (!w)
            return;
        w->req = ps_msg_get(&r, 8);
        w->shard = (uint32_t)ps_msg_get(&r, 4);
        w->min_done = ps_msg_get(&r, 8);
        w->first = ps_msg_get(&r, 8);
        w->n = ps_msg_get(&r, 8);
        snprintf(w->node, sizeof(w->node), "%s", node);
        if (!r.bad && !t) {
            /* not here (this daemon restarted, and the open that would give it the table was
             * lost): not the primary here, as for an update. The reader asks the shard's
             * primary of its view again, and sends that primary the open again. Dropped
             * without an answer, its read was asked again forever and never answered. */
            ps_table_t id = {.ps = ps, .uid = uid, .epoch = epoch};
            snprintf(id.group, sizeof(id.group), "%s", group);
            snprintf(id.name, sizeof(id.name), "%s", name);
            snprintf(err, sizeof(err), "table '%s' is not served here", name);
            ps_msg_send_pull_reply(&id, w, -ESTALE, err);
            drop(ps, node, "a pull of a table not here");
            free(w);
            return;
        }
        if (r.bad || !t || !t->ring || source_index(t, node) < 0 ||
            w->shard >= t->layout.shards || w->n == 0) {
            drop(ps, node, "bad pull");
            free(w);
            return;
        }
        if (!ps_repl_is_primary(t, w->shard)) { /* reads go to the primary only */
            snprintf(err, sizeof(err), "table '%s': %s is not shard %u's primary", t->name,
                     ps_cluster_self(ps->d), w->shard);
            ps_msg_send_pull_reply(t, w, -ESTALE, err);
            free(w);
            return;
        }
        for (const ps_wait_t *o = t->waits; o; o = o->next)
            if (!o->pull && o->req == w->req && strcmp(o->node, node) == 0) {
                free(w); /* a resend of a read still waiting here: answered once */
                return;
            }
        if (ps_server_read(t, w) < 0) /* (w is freed) */
            drop(ps, node, "pull outside the shard");
        return;
    }
    case MSG_PULL_REPLY: {
        uint64_t req = ps_msg_get(&r, 8);
        int32_t rc = (int32_t)(uint32_t)ps_msg_get(&r, 4);
        uint64_t done = ps_msg_get(&r, 8), at_request = ps_msg_get(&r, 8), waited_ns = ps_msg_get(&r, 8);
        int waited = (int)ps_msg_get(&r, 1);
        uint64_t n = ps_msg_get(&r, 8);
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
        /* the primary of our view refused it: it may have lost the table (restarted, and the
         * open sent when it came back was lost); one that has it answers the open OK */
        const char *primary = t->repl ? ps_table_primary(t, f->shard) : NULL;
        if (rc == -ESTALE && t->state == PS_TABLE_READY && primary &&
            strcmp(primary, node) == 0)
            ps_repl_send_open(t, node);
        /* read in place when aligned for floats, else copied */
        float *copy = NULL;
        const float *values = NULL;
        if (rc == 0 && aligned_for(payload, n, 0)) {
            values = (const float *)payload;
        } else if (rc == 0) {
            copy = malloc(n * sizeof(float) + 1);
            if (copy)
                memcpy(copy, payload, n * sizeof(float));
            values = copy;
        }
        snprintf(err, sizeof(err), "server %s refused the read", node);
        ps_pull_fetch_finish(f, rc < 0 ? rc : values ? 0 : -ENOMEM, err, values, done, at_request,
                             waited_ns, waited != 0);
        free(copy);
        return;
    }
    case MSG_BYE: {
        uint32_t source = (uint32_t)ps_msg_get(&r, 4);
        uint64_t clocks = ps_msg_get(&r, 8);
        if (r.bad || !t || source >= t->sources || strcmp(t->source_names[source], node) != 0) {
            drop(ps, node, "bad bye");
            return;
        }
        t->source_over[source] = 1;
        t->source_final[source] = clocks; /* its updates still on their way count */
        ps_server_drop_waits(t, node, NULL);
        ps_server_fail_stranded(t); /* the other nodes' reads it can no longer complete */
        ps_table_maybe_free(t);
        return;
    }
    default:
        if (type >= MSG_SNAP_REQ && type <= MSG_SNAP_LAST) { /* checkpoints: ps_ckpt.h */
            ps_ckpt_msg_recv(ps, node, type, t, uid, group, name, epoch, header, header_len,
                             r.at, payload, payload_len);
            return;
        }
        if (!ps_repl_recv(ps, node, type, &r, t, payload, payload_len))
            drop(ps, node, "unknown type");
    }
}
