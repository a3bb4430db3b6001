/* The servers' side of checkpoints (ps_ckpt.h): a shard's snapshot at done == C (kept until
 * the shard gets there), a shard loaded from a checkpoint, a checkpoint file copied here, and
 * the messages numbered 32..47 that carry them. Every field of a message is checked as in
 * ps_msg_recv.c: the table's identity, the sender's place in it, sizes and indices. */
#include "ps_ckpt.h"

#include "ps_ckpt_file.h"
#include "ps_cluster.h"
#include "ps_msg-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A snapshot request kept until its shard's done reaches clock. */
typedef struct snap_wait_s {
    ps_t *ps;
    uid_t uid;
    char group[PS_GROUP_BYTES], name[PS_NAME_BYTES];
    uint64_t epoch;
    uint32_t shard;
    uint64_t clock, req, since_ns;
    char node[PS_NODE_BYTES];
    struct snap_wait_s *next;
} snap_wait_t;

/* An answer to this daemon's own checkpoint, delivered on the next loop turn. */
typedef struct snap_local_s {
    ps_t *ps;
    uint64_t req, n, done;
    uint32_t shard;
    int rc, asp;
    char why[PS_ERR_BYTES];
    struct event *ev;
    float values[];
} snap_local_t;

static snap_wait_t *waits;

static void on_local(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    snap_local_t *a = arg;
    ps_ckpt_snap_arrived(a->ps, ps_cluster_self(a->ps->d), a->req, a->shard, a->rc, a->why,
                         a->rc == 0 ? a->values : NULL, a->n, a->done, a->asp);
    event_free(a->ev);
    free(a);
}

/* The answer: the shard's values now (rc 0), or why not. */
static void answer(ps_table_t *t, uint32_t shard, const char *node, uint64_t req, int rc,
                   const char *why)
{
    ps_shard_t *sh = rc == 0 ? t->shards[shard] : NULL;
    uint64_t n = sh ? ps_shard_elems(sh) : 0, done = sh ? ps_shard_done(sh) : 0;
    int asp = t->spec.sync.kind == PS_SYNC_ASP;
    if (strcmp(node, ps_cluster_self(t->ps->d)) == 0) {
        snap_local_t *a = calloc(1, sizeof(*a) + n * sizeof(float));
        if (!a) {
            LOG_WARN("ps: a snapshot of '%s' shard %u: out of memory", t->name, shard);
            return; /* the checkpoint times out */
        }
        a->ps = t->ps;
        a->req = req;
        a->shard = shard;
        a->rc = rc;
        a->n = n;
        a->done = done;
        a->asp = asp;
        snprintf(a->why, sizeof(a->why), "%s", why ? why : "");
        if (n)
            memcpy(a->values, ps_shard_values(sh), n * sizeof(float));
        static const struct timeval zero = {0, 0};
        a->ev = evtimer_new(t->ps->d->base, on_local, a);
        if (!a->ev || evtimer_add(a->ev, &zero) < 0) {
            if (a->ev)
                event_free(a->ev);
            free(a);
        }
        return;
    }
    wbuf_t w;
    ps_msg_begin(&w, MSG_SNAP_REPLY, t);
    ps_msg_put(&w, req, 8);
    ps_msg_put(&w, shard, 4);
    ps_msg_put(&w, (uint64_t)(uint32_t)rc, 4);
    ps_msg_put(&w, done, 8);
    ps_msg_put(&w, (uint64_t)asp, 1);
    ps_msg_put_str(&w, why ? why : "");
    if (ps_msg_send(t->ps, node, &w, sh ? ps_shard_values(sh) : NULL, n * sizeof(float)) < 0)
        LOG_DEBUG("ps: a snapshot reply to %s was not sent", node);
}

static void refuse_passed(ps_table_t *t, uint32_t shard, uint64_t clock, const char *node,
                          uint64_t req)
{
    char why[PS_ERR_BYTES];
    snprintf(why, sizeof(why), "table '%s' shard %u is at clock %llu, past %llu", t->name, shard,
             (unsigned long long)ps_shard_done(t->shards[shard]), (unsigned long long)clock);
    answer(t, shard, node, req, -ESTALE, why);
}

/* Drops the kept requests that are too old or whose table is gone. */
static void sweep(ps_t *ps)
{
    uint64_t now = salusd_now_ns();
    for (snap_wait_t **wp = &waits; *wp;) {
        snap_wait_t *w = *wp;
        if (w->ps == ps &&
            (now - w->since_ns > PS_CKPT_SERVER_KEEP_S * 1000000000ull ||
             !ps_table_find(ps, w->uid, w->group, w->name, w->epoch))) {
            *wp = w->next;
            free(w);
        } else
            wp = &w->next;
    }
}

void ps_ckpt_serve(ps_table_t *t, uint32_t shard, uint64_t clock, const char *node, uint64_t req)
{
    if (shard >= t->layout.shards || !t->shards || !t->shards[shard] ||
        !ps_table_primary(t, shard) ||
        strcmp(ps_table_primary(t, shard), ps_cluster_self(t->ps->d)) != 0) {
        answer(t, shard, node, req, -ESTALE, "not the shard's primary here (a view change?)");
        return;
    }
    uint64_t done = ps_shard_done(t->shards[shard]);
    if (t->spec.sync.kind == PS_SYNC_ASP || done == clock) {
        answer(t, shard, node, req, 0, NULL);
        return;
    }
    if (done > clock) {
        refuse_passed(t, shard, clock, node, req);
        return;
    }
    sweep(t->ps);
    snap_wait_t *w = calloc(1, sizeof(*w));
    if (!w) {
        answer(t, shard, node, req, -ENOMEM, "out of memory");
        return;
    }
    w->ps = t->ps;
    w->uid = t->uid;
    snprintf(w->group, sizeof(w->group), "%s", t->group);
    snprintf(w->name, sizeof(w->name), "%s", t->name);
    w->epoch = t->epoch;
    w->shard = shard;
    w->clock = clock;
    w->req = req;
    w->since_ns = salusd_now_ns();
    snprintf(w->node, sizeof(w->node), "%s", node);
    w->next = waits;
    waits = w;
}

void ps_ckpt_shard_done(ps_table_t *t, uint32_t shard)
{
    if (!waits || shard >= t->layout.shards || !t->shards[shard])
        return;
    uint64_t done = ps_shard_done(t->shards[shard]);
    for (snap_wait_t **wp = &waits; *wp;) {
        snap_wait_t *w = *wp;
        if (w->ps != t->ps || w->shard != shard || w->uid != t->uid || w->epoch != t->epoch ||
            strcmp(w->group, t->group) != 0 || strcmp(w->name, t->name) != 0 ||
            done < w->clock) {
            wp = &w->next;
            continue;
        }
        *wp = w->next;
        if (done == w->clock)
            answer(t, shard, w->node, w->req, 0, NULL);
        else
            refuse_passed(t, shard, w->clock, w->node, w->req);
        free(w);
    }
}

void ps_ckpt_server_stop(ps_t *ps)
{
    for (snap_wait_t **wp = &waits; *wp;) {
        snap_wait_t *w = *wp;
        if (w->ps == ps || !ps) {
            *wp = w->next;
            free(w);
        } else
            wp = &w->next;
    }
}

int ps_ckpt_load_shard(ps_table_t *t, uint32_t shard, uint64_t clock, const float *values,
                       char *err, size_t err_size)
{
    if (shard >= t->layout.shards || !t->shards || !t->shards[shard]) {
        snprintf(err, err_size, "table '%s' shard %u is not served here", t->name, shard);
        return -EINVAL;
    }
    ps_shard_t *cur = t->shards[shard];
    uint64_t elems = ps_shard_elems(cur);
    ps_shard_t *loaded = ps_shard_create_at(elems, &t->spec.rule, &t->spec.sync, t->sources,
                                            clock, values);
    if (!loaded) {
        snprintf(err, err_size, "table '%s' shard %u: bad values or out of memory", t->name,
                 shard);
        return -EINVAL;
    }
    if (ps_shard_same(cur, loaded)) { /* another restoring node loaded it already */
        ps_shard_destroy(loaded);
        return 0;
    }
    ps_shard_t *fresh = ps_shard_create(elems, &t->spec.rule, &t->spec.sync, t->sources);
    int untouched = fresh && ps_shard_same(cur, fresh);
    ps_shard_destroy(fresh);
    if (!untouched) {
        ps_shard_destroy(loaded);
        snprintf(err, err_size, "table '%s' shard %u holds another state (at clock %llu) than "
                 "this checkpoint's (clock %llu)", t->name, shard,
                 (unsigned long long)ps_shard_done(cur), (unsigned long long)clock);
        return -EEXIST;
    }
    ps_shard_destroy(cur);
    t->shards[shard] = loaded;
    ps_server_wake(t, shard);
    return 0;
}

/* ---- the messages ---------------------------------------------------------------------------- */

static int source_of(const ps_table_t *t, const char *node)
{
    for (uint32_t s = 0; t && s < t->sources; s++)
        if (strcmp(t->source_names[s], node) == 0)
            return (int)s;
    return -1;
}

static void drop(ps_t *ps, const char *node, const char *why)
{
    ps->dropped++;
    ps->stats.refused++;
    LOG_DEBUG("ps: a checkpoint message from %s dropped: %s", node, why);
}

/* A copy of a checkpoint file from the node that took it: checked, then written here. */
static int recv_file(ps_t *ps, ps_table_t *t, const char *name, const void *payload,
                     size_t payload_len, char *err, size_t err_size)
{
    ps_ckpt_header_t h;
    float *values = NULL;
    char why[256], dir[PATH_MAX], path[PATH_MAX];
    int rc = ps_ckpt_decode(payload, payload_len, &h, &values, why, sizeof(why));
    free(values);
    if (rc == 0)
        rc = ps_ckpt_check_identity(&h, t->uid, t->group, name, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, err_size, "a bad checkpoint copy: %.200s", why);
        return rc;
    }
    if (ps_ckpt_state_dir(ps->d, dir, sizeof(dir)) < 0 ||
        ps_ckpt_path(path, sizeof(path), dir, t->uid, t->group, name) < 0) {
        snprintf(err, err_size, "%s has no state directory for it", ps_cluster_self(ps->d));
        return -ENOENT;
    }
    rc = ps_ckpt_write_bytes(path, payload, payload_len, err, err_size);
    if (rc == 0)
        LOG_INFO("ps: checkpoint of %s/%s at clock %llu copied here: %s", t->group, name,
                 (unsigned long long)h.clock, path);
    return rc;
}

static void reply_simple(ps_t *ps, const char *node, int type, uid_t uid, const char *group,
                         const char *name, uint64_t epoch, uint64_t req, int has_shard,
                         uint32_t shard, int rc, const char *why)
{
    ps_table_t id = {.uid = uid, .epoch = epoch};
    snprintf(id.group, sizeof(id.group), "%s", group);
    snprintf(id.name, sizeof(id.name), "%s", name);
    wbuf_t w;
    ps_msg_begin(&w, type, &id);
    ps_msg_put(&w, req, 8);
    if (has_shard)
        ps_msg_put(&w, shard, 4);
    ps_msg_put(&w, (uint64_t)(uint32_t)rc, 4);
    ps_msg_put_str(&w, why);
    ps_msg_send(ps, node, &w, NULL, 0);
}

void ps_ckpt_msg_recv(ps_t *ps, const char *node, int type, ps_table_t *t, uid_t uid,
                      const char *group, const char *name, uint64_t epoch, const void *header,
                      size_t header_len, size_t at, const void *payload, size_t payload_len)
{
    rbuf_t r = {header, header_len, at, 0};
    char why[PS_ERR_BYTES] = "";
    switch (type) {
    case MSG_SNAP_REQ: {
        uint64_t req = ps_msg_get(&r, 8);
        uint32_t shard = (uint32_t)ps_msg_get(&r, 4);
        uint64_t clock = ps_msg_get(&r, 8);
        if (r.bad || !t || !t->ring || source_of(t, node) < 0 || shard >= t->layout.shards) {
            drop(ps, node, "bad snapshot request");
            return;
        }
        ps_ckpt_serve(t, shard, clock, node, req);
        return;
    }
    case MSG_SNAP_REPLY: {
        uint64_t req = ps_msg_get(&r, 8);
        uint32_t shard = (uint32_t)ps_msg_get(&r, 4);
        int32_t rc = (int32_t)(uint32_t)ps_msg_get(&r, 4);
        uint64_t done = ps_msg_get(&r, 8);
        int asp = (int)ps_msg_get(&r, 1);
        ps_msg_get_str(&r, why, sizeof(why));
        if (r.bad || rc > 0 || asp > 1 || payload_len % sizeof(float) != 0 ||
            (rc < 0 && payload_len)) {
            drop(ps, node, "bad snapshot reply");
            return;
        }
        /* copied: the payload's alignment is UCX's */
        uint64_t n = payload_len / sizeof(float);
        float *values = rc == 0 ? malloc(payload_len + 1) : NULL;
        if (rc == 0 && !values)
            return; /* the checkpoint times out */
        if (values && payload_len)
            memcpy(values, payload, payload_len);
        ps_ckpt_snap_arrived(ps, node, req, shard, rc, why, values, n, done, asp);
        free(values);
        return;
    }
    case MSG_SNAP_LOAD: {
        uint64_t req = ps_msg_get(&r, 8);
        uint32_t shard = (uint32_t)ps_msg_get(&r, 4);
        uint64_t clock = ps_msg_get(&r, 8);
        if (r.bad || !t || !t->ring || source_of(t, node) < 0 || shard >= t->layout.shards ||
            !t->shards || !t->shards[shard] ||
            payload_len != ps_shard_elems(t->shards[shard]) * sizeof(float)) {
            drop(ps, node, "bad checkpoint load");
            if (!r.bad)
                reply_simple(ps, node, MSG_SNAP_LOAD_ACK, uid, group, name, epoch, req, 1,
                             shard, -EINVAL, "the shard is not served here, or a bad size");
            return;
        }
        float *values = malloc(payload_len + 1);
        int rc = values ? 0 : -ENOMEM;
        if (values) {
            memcpy(values, payload, payload_len);
            rc = ps_ckpt_load_shard(t, shard, clock, values, why, sizeof(why));
            free(values);
        }
        if (rc == 0)
            LOG_DEBUG("ps: table '%s' shard %u starts at clock %llu (a checkpoint, from %s)",
                      name, shard, (unsigned long long)clock, node);
        reply_simple(ps, node, MSG_SNAP_LOAD_ACK, uid, group, name, epoch, req, 1, shard, rc,
                     why);
        return;
    }
    case MSG_SNAP_LOAD_ACK: {
        uint64_t req = ps_msg_get(&r, 8);
        (void)ps_msg_get(&r, 4);
        int32_t rc = (int32_t)(uint32_t)ps_msg_get(&r, 4);
        ps_msg_get_str(&r, why, sizeof(why));
        if (r.bad || rc > 0 || !t || t->state != PS_TABLE_OPENING || t->open_req != req ||
            !t->opens_pending) {
            drop(ps, node, "unexpected checkpoint load answer");
            return;
        }
        if (rc < 0) {
            char err[PS_ERR_BYTES];
            snprintf(err, sizeof(err), "server %s: %s", node, why);
            ps_table_fail(t, rc, err);
            return;
        }
        if (--t->opens_pending == 0) {
            free(t->restore_values); /* every server has its shards */
            t->restore_values = NULL;
            ps_table_ready(t);
        }
        return;
    }
    case MSG_SNAP_FILE: {
        uint64_t req = ps_msg_get(&r, 8);
        if (r.bad || !t || source_of(t, node) < 0) {
            drop(ps, node, "bad checkpoint copy");
            if (!r.bad)
                reply_simple(ps, node, MSG_SNAP_FILE_ACK, uid, group, name, epoch, req, 0, 0,
                             -EINVAL, "no such table of a group of that node here");
            return;
        }
        int rc = recv_file(ps, t, name, payload, payload_len, why, sizeof(why));
        reply_simple(ps, node, MSG_SNAP_FILE_ACK, uid, group, name, epoch, req, 0, 0, rc, why);
        return;
    }
    case MSG_SNAP_FILE_ACK: {
        uint64_t req = ps_msg_get(&r, 8);
        int32_t rc = (int32_t)(uint32_t)ps_msg_get(&r, 4);
        ps_msg_get_str(&r, why, sizeof(why));
        if (r.bad || rc > 0) {
            drop(ps, node, "bad checkpoint copy answer");
            return;
        }
        ps_ckpt_file_acked(ps, node, req, rc, why);
        return;
    }
    default:
        drop(ps, node, "unknown checkpoint message");
    }
}
