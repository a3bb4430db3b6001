/* Taking a checkpoint of a group's tables (ps_ckpt.h): the op, C, the shards' snapshots
 * gathered, the files written and copied to the group's other nodes, the period timer. */
#include "ps_ckpt.h"

#include "groups.h"
#include "ps_ckpt_file.h"
#include "ps_cluster.h"
#include "ps_msg-internal.h"
#include "access.h"
#include "state.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One table of a checkpoint: what the file needs, copied at the start (the table may go). */
typedef struct ckpt_table_s {
    char name[PS_NAME_BYTES];
    char rule[PS_CKPT_TEXT_BYTES], sync[PS_CKPT_TEXT_BYTES];
    uint64_t epoch, count;
    ps_layout_t layout;
    int asp;
    float *values;
    uint64_t first_req;        /* shard i's request is first_req + i */
    uint8_t *arrived;          /* per shard */
    char (*servers)[PS_NODE_BYTES]; /* per shard: whom it was asked of */
    char path[PATH_MAX];
} ckpt_table_t;

typedef struct ckpt_run_s {
    salusd_t *d;
    uid_t uid;
    uint64_t group_id;
    char group[PS_GROUP_BYTES];
    uint64_t clock, started_ns;
    ckpt_table_t tables[PS_CKPT_MAX_TABLES];
    uint32_t ntables;
    uint32_t shards_left, copies_left;
    uint64_t copy_req;
    char copy_nodes[PS_MAX_SOURCES][PS_NODE_BYTES]; /* the other nodes of the group */
    uint8_t copy_done[PS_MAX_SOURCES];
    uint32_t ncopies;
    server_later_t requester;  /* its conn NULL: periodic, or the requester left */
    struct event *timer;
    struct event *write_event; /* the files, on the turn after the last shard answered */
    int finishing;
    struct ckpt_run_s *next;
} ckpt_run_t;

/* A group's period timer. */
typedef struct ckpt_period_s {
    salusd_t *d;
    uid_t uid;
    uint64_t group_id;
    char group[PS_GROUP_BYTES];
    uint64_t period_s;
    struct event *timer;
    struct ckpt_period_s *next;
} ckpt_period_t;

static ckpt_run_t *runs;
static ckpt_period_t *periods;
static uint64_t next_req = 1;

int ps_ckpt_state_dir(const salusd_t *d, char *out, size_t size)
{
    if (d->config.state_dir[0]) {
        snprintf(out, size, "%s", d->config.state_dir);
        return 0;
    }
    return state_default_dir(out, size) < 0 ? -ENOENT : 0;
}

static void run_free(ckpt_run_t *r)
{
    for (ckpt_run_t **rp = &runs; *rp; rp = &(*rp)->next)
        if (*rp == r) {
            *rp = r->next;
            break;
        }
    server_later_done(&r->requester);
    if (r->timer)
        event_free(r->timer);
    if (r->write_event)
        event_free(r->write_event);
    for (uint32_t i = 0; i < r->ntables; i++) {
        free(r->tables[i].values);
        free(r->tables[i].arrived);
        free(r->tables[i].servers);
    }
    free(r);
}

/* The requester hears how it went (lines), or the log does (periodic). */
static void run_end(ckpt_run_t *r, int rc, const char *err, char lines[][PATH_MAX + 128],
                    uint32_t nlines)
{
    uint64_t ms = (salusd_now_ns() - r->started_ns) / 1000000;
    if (rc < 0)
        LOG_WARN("ps: checkpoint of group %s (uid %u) failed: %s", r->group, (unsigned)r->uid,
                 err);
    for (uint32_t i = 0; rc == 0 && i < nlines; i++)
        LOG_INFO("ps: %s", lines[i]);
    conn_t *conn = r->requester.conn;
    if (conn && rc < 0) {
        server_reply_error(conn, r->requester.request_id,
                           rc == -ENOENT  ? PROTO_ENOTFOUND
                                            : PROTO_EINTERNAL,
                           0, "ps_checkpoint: %s", err);
    } else if (conn) {
        proto_enc_t *e = &r->d->enc;
        proto_enc_begin(e, PROTO_REPLY, r->requester.request_id, "", 3);
        proto_pack_kv_uint(&e->pk, "clock", r->clock);
        proto_pack_kv_uint(&e->pk, "ms", ms);
        proto_pack_str(&e->pk, "lines");
        msgpack_pack_array(&e->pk, nlines);
        for (uint32_t i = 0; i < nlines; i++)
            proto_pack_str(&e->pk, lines[i]);
        proto_enc_finish(e);
        server_send(conn, e);
    }
    run_free(r);
}

static void run_fail(ckpt_run_t *r, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void run_fail(ckpt_run_t *r, int rc, const char *fmt, ...)
{
    char err[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, sizeof(err), fmt, ap);
    va_end(ap);
    run_end(r, rc, err, NULL, 0);
}

/* Every copy confirmed (or none needed): the lines of the output. */
static void run_complete(ckpt_run_t *r)
{
    static char lines[PS_CKPT_MAX_TABLES + 3][PATH_MAX + 128];
    uint32_t n = 0;
    int asp = 0;
    for (uint32_t i = 0; i < r->ntables; i++) {
        ckpt_table_t *ct = &r->tables[i];
        snprintf(lines[n++], sizeof(lines[0]), "checkpoint %s/%s: clock %llu, %llu values, %s",
                 r->group, ct->name, (unsigned long long)r->clock,
                 (unsigned long long)ct->count, ct->path);
        asp |= ct->asp;
    }
    if (asp)
        snprintf(lines[n++], sizeof(lines[0]), "checkpoint %s: asp tables hold the values of "
                 "the moment each shard answered, not of a clock boundary", r->group);
    if (r->ncopies) {
        size_t len = (size_t)snprintf(lines[n], sizeof(lines[0]), "checkpoint %s: copied to",
                                      r->group);
        for (uint32_t i = 0; i < r->ncopies && len < sizeof(lines[0]); i++)
            len += (size_t)snprintf(lines[n] + len, sizeof(lines[0]) - len, " %s",
                                    r->copy_nodes[i]);
        n++;
    }
    snprintf(lines[n++], sizeof(lines[0]), "checkpoint %s: %u table(s) at clock %llu in %llu ms",
             r->group, r->ntables, (unsigned long long)r->clock,
             (unsigned long long)((salusd_now_ns() - r->started_ns) / 1000000));
    run_end(r, 0, NULL, lines, n);
}

/* Every shard answered: the files here, then their copies to the group's other nodes. */
static void run_write(ckpt_run_t *r)
{
    char dir[PATH_MAX], err[512];
    if (ps_ckpt_state_dir(r->d, dir, sizeof(dir)) < 0) {
        run_fail(r, -ENOENT, "salusd has no state directory (--state-dir)");
        return;
    }
    uint8_t *files[PS_CKPT_MAX_TABLES] = {0};
    size_t sizes[PS_CKPT_MAX_TABLES] = {0};
    int rc = 0;
    for (uint32_t i = 0; i < r->ntables && rc == 0; i++) {
        ckpt_table_t *ct = &r->tables[i];
        ps_ckpt_header_t h = {.uid = (uint32_t)r->uid, .count = ct->count, .clock = r->clock,
                              .asp = ct->asp};
        snprintf(h.group, sizeof(h.group), "%s", r->group);
        snprintf(h.table, sizeof(h.table), "%s", ct->name);
        snprintf(h.rule, sizeof(h.rule), "%s", ct->rule);
        snprintf(h.sync, sizeof(h.sync), "%s", ct->sync);
        sizes[i] = ps_ckpt_encoded_size(&h);
        files[i] = sizes[i] ? malloc(sizes[i]) : NULL;
        rc = ps_ckpt_path(ct->path, sizeof(ct->path), dir, r->uid, r->group, ct->name);
        if (rc < 0)
            snprintf(err, sizeof(err), "no path for table '%s' under %.200s", ct->name, dir);
        else if (!files[i]) {
            rc = -ENOMEM;
            snprintf(err, sizeof(err), "out of memory");
        } else {
            int64_t len = ps_ckpt_encode(&h, ct->values, files[i], sizes[i], err, sizeof(err));
            rc = len < 0 ? (int)len : 0;
        }
    }
    for (uint32_t i = 0; i < r->ntables && rc == 0; i++)
        rc = ps_ckpt_write_bytes(r->tables[i].path, files[i], sizes[i], err, sizeof(err));
    /* the copies: one message per (node, table), all under one request number */
    r->copy_req = next_req++;
    for (uint32_t k = 0; k < r->ncopies && rc == 0; k++)
        for (uint32_t i = 0; i < r->ntables && rc == 0; i++) {
            ps_table_t id = {.uid = r->uid, .epoch = r->tables[i].epoch};
            snprintf(id.group, sizeof(id.group), "%s", r->group);
            snprintf(id.name, sizeof(id.name), "%s", r->tables[i].name);
            wbuf_t w;
            ps_msg_begin(&w, MSG_SNAP_FILE, &id);
            ps_msg_put(&w, r->copy_req, 8);
            rc = ps_msg_send(ps_of(r->d), r->copy_nodes[k], &w, files[i], sizes[i]);
            if (rc < 0)
                snprintf(err, sizeof(err), "the copy to %s was not sent: %s", r->copy_nodes[k],
                         strerror(-rc));
            else
                r->copies_left++;
        }
    for (uint32_t i = 0; i < r->ntables; i++)
        free(files[i]);
    if (rc < 0) {
        run_fail(r, rc, "%s", err);
        return;
    }
    if (r->copies_left == 0)
        run_complete(r);
}

static void on_run_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ckpt_run_t *r = arg;
    if (r->shards_left) {
        for (uint32_t i = 0; i < r->ntables; i++)
            for (uint32_t s = 0; s < r->tables[i].layout.shards; s++)
                if (!r->tables[i].arrived[s]) {
                    run_fail(r, -ETIMEDOUT, "table '%s' shard %u (server %s) did not reach "
                             "clock %llu in time: nothing written", r->tables[i].name, s,
                             r->tables[i].servers[s], (unsigned long long)r->clock);
                    return;
                }
    }
    run_fail(r, -ETIMEDOUT, "the files were written here, but %u cop%s to the group's other "
             "nodes were not confirmed in time", r->copies_left, r->copies_left == 1 ? "y" : "ies");
}

static void on_run_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_write(arg);
}

void ps_ckpt_snap_arrived(ps_t *ps, const char *node, uint64_t req, uint32_t shard, int rc,
                          const char *why, const float *values, uint64_t n, uint64_t done,
                          int asp)
{
    for (ckpt_run_t *r = runs; r; r = r->next) {
        if (r->d != ps->d || r->finishing)
            continue;
        for (uint32_t i = 0; i < r->ntables; i++) {
            ckpt_table_t *ct = &r->tables[i];
            if (req != ct->first_req + shard || shard >= ct->layout.shards ||
                ct->arrived[shard] || strcmp(ct->servers[shard], node) != 0)
                continue;
            uint64_t first, elems;
            ps_layout_shard(&ct->layout, shard, &first, &elems);
            if (rc < 0) {
                run_fail(r, rc, "table '%s' shard %u on %s: %s", ct->name, shard, node,
                         why && *why ? why : strerror(-rc));
                return;
            }
            if (n != elems || !values || (!asp && done != r->clock)) {
                run_fail(r, -EPROTO, "table '%s' shard %u on %s: a malformed snapshot",
                         ct->name, shard, node);
                return;
            }
            memcpy(ct->values + first, values, elems * sizeof(float));
            ct->arrived[shard] = 1;
            if (--r->shards_left == 0) { /* the files on a later turn (not inside a wake) */
                r->finishing = 1;
                static const struct timeval zero = {0, 0};
                evtimer_add(r->write_event, &zero);
            }
            return;
        }
    }
    LOG_DEBUG("ps: a snapshot %llu from %s matches no checkpoint (late or unknown)",
              (unsigned long long)req, node);
}

void ps_ckpt_file_acked(ps_t *ps, const char *node, uint64_t req, int rc, const char *why)
{
    for (ckpt_run_t *r = runs; r; r = r->next) {
        if (r->d != ps->d || r->copy_req != req || !r->copies_left)
            continue;
        uint32_t k = 0;
        while (k < r->ncopies && strcmp(r->copy_nodes[k], node) != 0)
            k++;
        if (k == r->ncopies)
            return;
        if (rc < 0) {
            run_fail(r, rc, "the files were written here, but %s could not keep its copy: %s",
                     node, why && *why ? why : strerror(-rc));
            return;
        }
        if (--r->copies_left == 0)
            run_complete(r);
        return;
    }
}

/* Starts a checkpoint of the group's tables here. 0 (the run answers later), or a negative
 * errno with err. */
static int run_start(salusd_t *d, uid_t uid, uint64_t group_id, const char *group,
                     uint64_t timeout_s, conn_t *conn, uint64_t msg_id, char *err,
                     size_t err_size)
{
    ps_t *ps = ps_of(d);
    for (ckpt_run_t *x = runs; x; x = x->next)
        if (x->d == d && x->group_id == group_id) {
            snprintf(err, err_size, "a checkpoint of group %s is in progress", group);
            return -EBUSY;
        }
    ckpt_run_t *r = calloc(1, sizeof(*r));
    if (!r || (conn && server_later_add(conn, CONN_SLOT_PS_CKPT, &r->requester, msg_id) < 0)) {
        free(r);
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    r->d = d;
    r->uid = uid;
    r->group_id = group_id;
    snprintf(r->group, sizeof(r->group), "%s", group);
    r->started_ns = salusd_now_ns();
    const char *self = ps_cluster_self(d);
    /* the group's tables here, open on the worker side; C the largest clock closed */
    for (ps_table_t *t = ps ? ps->tables : NULL; t; t = t->next) {
        if (t->group_id != group_id || t->uid != uid || t->state != PS_TABLE_READY ||
            t->worker_over || t->self_source < 0 || t->spec.federated || !t->ring)
            continue; /* (a federated table has no shards: its rounds are not checkpointed) */
        if (r->ntables == PS_CKPT_MAX_TABLES) {
            snprintf(err, err_size, "group %s has more than %d tables", group,
                     PS_CKPT_MAX_TABLES);
            run_free(r);
            return -E2BIG;
        }
        ckpt_table_t *ct = &r->tables[r->ntables++];
        snprintf(ct->name, sizeof(ct->name), "%s", t->name);
        snprintf(ct->rule, sizeof(ct->rule), "%s", t->rule_text);
        snprintf(ct->sync, sizeof(ct->sync), "%s", t->sync_text);
        ct->epoch = t->epoch;
        ct->count = t->spec.count;
        ct->layout = t->layout;
        ct->asp = t->spec.sync.kind == PS_SYNC_ASP;
        ct->values = malloc(ct->count * sizeof(float));
        ct->arrived = calloc(t->layout.shards, 1);
        ct->servers = calloc(t->layout.shards, sizeof(*ct->servers));
        if (!ct->values || !ct->arrived || !ct->servers) {
            snprintf(err, err_size, "out of memory for table '%s'", t->name);
            run_free(r);
            return -ENOMEM;
        }
        uint64_t sent = ps_worker_clocks_sent(t);
        r->clock = sent > r->clock ? sent : r->clock;
        for (uint32_t s = 0; s < t->sources; s++) {
            if (strcmp(t->source_names[s], self) == 0)
                continue;
            uint32_t k = 0;
            while (k < r->ncopies && strcmp(r->copy_nodes[k], t->source_names[s]) != 0)
                k++;
            if (k == r->ncopies && r->ncopies < PS_MAX_SOURCES)
                snprintf(r->copy_nodes[r->ncopies++], PS_NODE_BYTES, "%s", t->source_names[s]);
        }
    }
    if (r->ntables == 0 || !ps) {
        snprintf(err, err_size, "group %s has no open table on %s (run it where ranks of the "
                 "group run, once they opened their tables)", group, self);
        run_free(r);
        return -ENOENT;
    }
    r->next = runs;
    runs = r;
    struct timeval tv = {(time_t)timeout_s, 0};
    r->timer = evtimer_new(d->base, on_run_timeout, r);
    r->write_event = evtimer_new(d->base, on_run_write, r);
    if (!r->timer || !r->write_event || evtimer_add(r->timer, &tv) < 0) {
        snprintf(err, err_size, "no timer");
        run_free(r);
        return -ENOMEM;
    }
    /* every shard's primary is asked for the shard at done == C */
    for (uint32_t i = 0; i < r->ntables; i++)
        r->shards_left += r->tables[i].layout.shards;
    for (uint32_t i = 0; i < r->ntables; i++) {
        ckpt_table_t *ct = &r->tables[i];
        ps_table_t *t = NULL;
        for (ps_table_t *x = ps->tables; x && !t; x = x->next)
            if (x->group_id == group_id && x->uid == uid && x->epoch == ct->epoch &&
                strcmp(x->name, ct->name) == 0 && x->state == PS_TABLE_READY)
                t = x;
        ct->first_req = next_req;
        next_req += ct->layout.shards;
        for (uint32_t s = 0; t && s < ct->layout.shards; s++) {
            const char *primary = ps_table_primary(t, s); /* its primary in the view here */
            snprintf(ct->servers[s], PS_NODE_BYTES, "%s", primary ? primary : "?");
            if (strcmp(ct->servers[s], self) == 0) { /* answered on a later turn */
                ps_ckpt_serve(t, s, r->clock, self, ct->first_req + s);
                continue;
            }
            wbuf_t w;
            ps_msg_begin(&w, MSG_SNAP_REQ, t);
            ps_msg_put(&w, ct->first_req + s, 8);
            ps_msg_put(&w, s, 4);
            ps_msg_put(&w, r->clock, 8);
            int rc = ps_msg_send(ps, ct->servers[s], &w, NULL, 0);
            if (rc < 0) {
                snprintf(err, err_size, "table '%s' shard %u: server %s is not reachable (%s)",
                         ct->name, s, ct->servers[s], strerror(-rc));
                run_free(r);
                return -EHOSTUNREACH;
            }
        }
    }
    LOG_INFO("ps: checkpoint of group %s (uid %u): %u table(s) at clock %llu", group,
             (unsigned)uid, r->ntables, (unsigned long long)r->clock);
    return 0;
}

/* ---- the period ---------------------------------------------------------------------------- */

static void period_free(ckpt_period_t *p)
{
    for (ckpt_period_t **pp = &periods; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    if (p->timer)
        event_free(p->timer);
    free(p);
}

static void on_period(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ckpt_period_t *p = arg;
    uint64_t jobs[1];
    if (groups_live_jobs(p->d, p->group_id, jobs, 1) == 0) {
        LOG_INFO("ps: group %s has no live rank here: its periodic checkpoint stops", p->group);
        period_free(p);
        return;
    }
    char err[512];
    if (run_start(p->d, p->uid, p->group_id, p->group, PS_CKPT_TIMEOUT_S, NULL, 0, err,
                  sizeof(err)) < 0)
        LOG_WARN("ps: periodic checkpoint of group %s: %s", p->group, err);
}

static int period_set(salusd_t *d, uid_t uid, uint64_t group_id, const char *group,
                      uint64_t period_s, char *err, size_t err_size)
{
    ckpt_period_t *p = periods;
    while (p && !(p->d == d && p->group_id == group_id))
        p = p->next;
    if (period_s == 0) {
        if (p)
            period_free(p);
        return 0;
    }
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p || !(p->timer = event_new(d->base, -1, EV_PERSIST, on_period, p))) {
            free(p);
            snprintf(err, err_size, "out of memory");
            return -ENOMEM;
        }
        p->d = d;
        p->uid = uid;
        p->group_id = group_id;
        snprintf(p->group, sizeof(p->group), "%s", group);
        p->next = periods;
        periods = p;
    }
    p->period_s = period_s;
    struct timeval tv = {(time_t)period_s, 0};
    evtimer_add(p->timer, &tv);
    return 0;
}

/* ---- the op -------------------------------------------------------------------------------- */

void ps_ckpt_handle_checkpoint(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    char group[LAUNCH_GROUP_BYTES], err[512];
    uint64_t uid = c->uid, period_s = 0, timeout_s = PS_CKPT_TIMEOUT_S;
    int has_period = proto_get(&msg->body, "period_s") != NULL;
    if (proto_get_str_copy(&msg->body, "group", group, sizeof(group)) < 0 ||
        proto_get_uint(&msg->body, "uid", &uid) == -EINVAL ||
        (has_period && proto_get_uint(&msg->body, "period_s", &period_s) < 0) ||
        proto_get_uint(&msg->body, "timeout_s", &timeout_s) == -EINVAL || timeout_s == 0 ||
        timeout_s > 3600 || period_s > 7 * 24 * 3600 || uid > UINT32_MAX) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_checkpoint: usage {group, uid?, period_s? (0 stops), "
                           "timeout_s? (1..3600)}");
        return;
    }
    if (!access_may_control(c, (uid_t)uid)) {
        server_reply_error(c, msg->id, PROTO_EPERM, 0,
                           "ps_checkpoint: uid %u's groups are not yours", (unsigned)uid);
        return;
    }
    uint64_t group_id = groups_find(d, (uid_t)uid, group);
    if (!group_id) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0,
                           "ps_checkpoint: no live group %s of uid %u on this node", group,
                           (unsigned)uid);
        return;
    }
    if (has_period) {
        int rc = period_set(d, (uid_t)uid, group_id, group, period_s, err, sizeof(err));
        if (rc < 0) {
            server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "ps_checkpoint: %s", err);
            return;
        }
        char line[160];
        if (period_s)
            snprintf(line, sizeof(line), "checkpoint %s: one every %llu s while the group lives",
                     group, (unsigned long long)period_s);
        else
            snprintf(line, sizeof(line), "checkpoint %s: no periodic checkpoint", group);
        proto_enc_t *e = &d->enc;
        proto_enc_begin(e, PROTO_REPLY, msg->id, "", 2);
        proto_pack_kv_uint(&e->pk, "period_s", period_s);
        proto_pack_str(&e->pk, "lines");
        msgpack_pack_array(&e->pk, 1);
        proto_pack_str(&e->pk, line);
        proto_enc_finish(e);
        server_send(c, e);
        return;
    }
    int rc = run_start(d, (uid_t)uid, group_id, group, timeout_s, c, msg->id, err, sizeof(err));
    if (rc < 0)
        server_reply_error(c, msg->id,
                           rc == -ENOENT  ? PROTO_ENOTFOUND
                           : rc == -EBUSY ? PROTO_EBUSY
                                          : PROTO_EINTERNAL,
                           0, "ps_checkpoint: %s", err);
}

void ps_ckpt_stop(salusd_t *d)
{
    for (ckpt_run_t *r = runs, *next; r; r = next) {
        next = r->next;
        if (r->d == d)
            run_free(r);
    }
    for (ckpt_period_t *p = periods, *next; p; p = next) {
        next = p->next;
        if (p->d == d)
            period_free(p);
    }
    ps_ckpt_server_stop(ps_of(d));
}
