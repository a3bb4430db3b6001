/* Opening a table: the spec checked, the ring record agreed (ps_cluster_ring_agree) and
 * compared with the spec, the table built and charged to the user's quota, then every other
 * server asked to create its shards; the open completes when all answered. A node's second
 * worker, or a retried open, finds the table. */
#include "ps-internal.h"
#include "ps_ckpt.h"
#include "ps_cluster.h"
#include "ps_fed_table-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The worker side's table of this group (any epoch: the group has one of each name). */
static ps_table_t *find_local(ps_t *ps, const ps_worker_t *w, const char *name)
{
    for (ps_table_t *t = ps->tables; t; t = t->next)
        if (t->uid == w->uid && t->group_id == w->group_id && !t->worker_over &&
            t->state != PS_TABLE_FAILED && strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

/* Whether the agreed record is the spec's table: 0, or -EINVAL with why. */
static int compare_spec(const ps_table_spec_t *spec, const char *servers_sorted,
                        const ps_ring_record_t *rec, char *err, size_t err_size)
{
    char rule[PS_FED_RULE_BYTES], sync[32];
    ps_table_rule_text(spec, rule, sizeof(rule));
    ps_sync_format(&spec->sync, sync, sizeof(sync));
    if (rec->count != spec->count)
        snprintf(err, err_size, "table '%s' exists with %llu elements, not %llu", spec->name,
                 (unsigned long long)rec->count, (unsigned long long)spec->count);
    else if (strcmp(rec->rule, rule) != 0)
        snprintf(err, err_size, "table '%s' exists with rule %s, not %s", spec->name,
                 rec->rule, rule);
    else if (strcmp(rec->sync, sync) != 0)
        snprintf(err, err_size, "table '%s' exists with sync %s, not %s", spec->name,
                 rec->sync, sync);
    else if (servers_sorted[0] && strcmp(rec->servers, servers_sorted) != 0)
        snprintf(err, err_size, "table '%s' exists with servers %s, not %s", spec->name,
                 rec->servers, servers_sorted);
    else
        return 0;
    return -EINVAL;
}

typedef struct agree_arg_s {
    ps_t *ps;
    uint64_t handle;
    ps_ring_record_t rec;     /* the agreed record, while its view is written */
} agree_arg_t;

static void on_open_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_table_t *t = arg;
    char err[PS_ERR_BYTES];
    snprintf(err, sizeof(err), "table '%s': %u server(s) did not answer the open", t->name,
             t->opens_pending);
    ps_table_fail(t, -ETIMEDOUT, err);
}

/* Another daemon's open reached this one before its own workers' open was agreed: that
 * table (the server side only) holds the shards served here, with what the other sources
 * sent already. The workers' table takes them over, and the other goes. */
/* The server side's table of the same run, if any (see adopt_served). */
static ps_table_t *served_only(ps_table_t *t)
{
    for (ps_table_t *x = t->ps->tables; x; x = x->next)
        if (x != t && x->group_id == 0 && x->state == PS_TABLE_READY && x->uid == t->uid &&
            x->epoch == t->epoch && strcmp(x->group, t->group) == 0 &&
            strcmp(x->name, t->name) == 0 && x->layout.shards == t->layout.shards &&
            x->sources == t->sources)
            return x;
    return NULL;
}

static void adopt_served(ps_table_t *t, ps_table_t *old)
{
    for (uint32_t i = 0; i < t->layout.shards; i++)
        if (old->shards[i] && !t->shards[i] && t->repl[i].replica) {
            t->shards[i] = old->shards[i];
            old->shards[i] = NULL;
            t->repl[i].applied = old->repl ? old->repl[i].applied : 0;
        }
    /* its forwards still wait for standbys' acks (the same shards, standbys and view) */
    if (old->view == t->view) {
        t->forwards = old->forwards;
        old->forwards = NULL;
    }
    t->watching |= old->watching; /* one watch per table: it stays */
    old->watching = 0;
    ps_wait_t **tail = &t->waits;
    while (*tail)
        tail = &(*tail)->next;
    *tail = old->waits;
    old->waits = NULL;
    for (uint32_t s = 0; s < t->sources; s++) {
        t->source_over[s] |= old->source_over[s];
        if (old->source_final[s] != UINT64_MAX)
            t->source_final[s] = old->source_final[s];
    }
    ps_table_free(old);
}

static ps_table_t *opening(agree_arg_t *a)
{
    for (ps_table_t *x = a->ps->tables; x; x = x->next)
        if (x->handle == a->handle)
            return x->state == PS_TABLE_OPENING ? x : NULL;
    return NULL; /* the group ended meanwhile */
}

static void on_view(void *arg, int rc, const char *why, const ps_view_t *view);

/* The ring record is agreed: the table's first view (its replica count) is written next,
 * where it is absent (the first opener's wins). */
static void on_agreed(void *arg, int rc, const char *why, const ps_ring_record_t *rec)
{
    agree_arg_t *a = arg;
    ps_table_t *t = opening(a);
    char err[PS_ERR_BYTES];
    if (t && rc < 0) {
        snprintf(err, sizeof(err), "table '%s': no agreement on its ring: %s", t->name,
                 why ? why : "?");
        ps_table_fail(t, rc, err);
    }
    if (t && rc == 0 && (compare_spec(&t->spec, t->spec.servers, rec, err, sizeof(err)) < 0 ||
                         /* a restoring opener: the record starts at its checkpoint's clock */
                         ps_ckpt_open_agreed(t, rec, err, sizeof(err)) < 0)) {
        t->ps->stats.refused++;
        ps_table_fail(t, -EINVAL, err);
        t = NULL;
    }
    if (!t || rc < 0) {
        free(a);
        return;
    }
    a->rec = *rec;
    uint32_t r = t->spec.replicas ? t->spec.replicas
                                  : (uint32_t)t->ps->d->config.ps_replicas;
    r = r < 1 ? 1 : r > PS_MAX_REPLICAS ? PS_MAX_REPLICAS : r;
    rc = ps_replicas_create(t->ps->d, t->uid, t->group, rec->epoch, t->name, rec->servers,
                            r, on_view, a);
    if (rc < 0) {
        free(a);
        snprintf(err, sizeof(err), "table '%s': its view cannot be written: %s", t->name,
                 strerror(-rc));
        ps_table_fail(t, rc, err);
    }
}

static void on_view(void *arg, int rc, const char *why, const ps_view_t *view)
{
    agree_arg_t *a = arg;
    ps_t *ps = a->ps;
    ps_table_t *t = opening(a);
    ps_ring_record_t record = a->rec, *rec = &record;
    free(a);
    if (!t)
        return;
    char err[PS_ERR_BYTES];
    const char *nodes[PS_MAX_SOURCES], *sources[PS_MAX_SOURCES];
    uint32_t ranks[PS_MAX_SOURCES], nsources = 0;
    if (rc < 0 || !view) {
        snprintf(err, sizeof(err), "table '%s': no view of its servers: %s", t->name,
                 why ? why : "?");
        ps_table_fail(t, rc < 0 ? rc : -EIO, err);
        return;
    }
    uint32_t n = rc < 0 ? 0 : ps_cluster_group_nodes(ps->d, t->group_id, nodes, ranks,
                                                      PS_MAX_SOURCES);
    for (uint32_t i = 0; i < n; i++)
        if (ranks[i] > 0)
            sources[nsources++] = nodes[i];
    if (rc == 0 && nsources == 0) {
        snprintf(err, sizeof(err), "table '%s': group %s has no nodes", t->name, t->group);
        rc = -ENOENT;
    }
    if (rc == 0 && t->spec.federated) { /* served by salusd/ps/ps_fed_table.c */
        if ((rc = ps_fed_table_start(t, rec, err, sizeof(err))) < 0) {
            ps->stats.refused++;
            ps_table_fail(t, rc, err);
        }
        return;
    }
    if (rc == 0)
        rc = ps_table_build(t, rec, sources, nsources, err, sizeof(err));
    if (rc == 0) /* the view in force: its servers may differ from the record's by now */
        rc = ps_repl_init_view(t, view->number, view->servers, view->replicas, err,
                               sizeof(err));
    ps_table_t *served = rc == 0 ? served_only(t) : NULL;
    if (rc == 0) {
        /* the table's elements where its workers run (the shards here included; what a
         * server-side table of this run holds already goes into this one) */
        uint64_t more = t->spec.count * sizeof(float);
        uint64_t credit = served ? served->charged_bytes : 0;
        rc = ps_quota_check(ps, t->uid, more - (credit < more ? credit : more), t->name, err,
                            sizeof(err));
        if (rc == 0)
            t->charged_bytes = more;
    }
    if (rc == 0 && served)
        adopt_served(t, served);
    if (rc == 0)
        rc = ps_table_create_shards(t, err, sizeof(err));
    if (rc == 0) /* restoring: the shards here start from the checkpoint */
        rc = ps_ckpt_open_shards(t, err, sizeof(err));
    if (rc == 0)
        rc = ps_worker_init(t) < 0 ? -ENOMEM : 0;
    if (rc < 0) {
        if (rc == -ENOMEM)
            snprintf(err, sizeof(err), "table '%s': out of memory", t->name);
        ps->stats.refused++;
        ps_table_fail(t, rc, err);
        return;
    }
    /* every other server gets the table (its shards); the open completes when all did */
    t->open_req = ps->next_req++;
    for (size_t i = 0; i < ps_ring_size(t->ring); i++) {
        if ((int)i == t->self_server)
            continue;
        if (ps_msg_send_open(t, ps_ring_name(t->ring, i)) < 0 ||
            ps_ckpt_open_sent(t, ps_ring_name(t->ring, i)) < 0) { /* restoring: the values */
            snprintf(err, sizeof(err), "table '%s': server %s is not reachable", t->name,
                     ps_ring_name(t->ring, i));
            ps_table_fail(t, -EHOSTUNREACH, err);
            return;
        }
        t->opens_pending++;
    }
    ps_repl_watch(t);
    if (t->opens_pending == 0) {
        ps_table_ready(t);
        return;
    }
    struct timeval tv = {PS_OPEN_TIMEOUT_MS / 1000, 0};
    t->open_timer = evtimer_new(ps->d->base, on_open_timeout, t);
    if (!t->open_timer || evtimer_add(t->open_timer, &tv) < 0)
        LOG_WARN("ps: table '%s': no open timer", t->name);
}

static int check_spec(const ps_table_spec_t *spec, char *servers, size_t servers_size,
                      char *err, size_t err_size)
{
    char name[PS_NAME_BYTES + 1];
    snprintf(name, sizeof(name), "%.*s", PS_NAME_BYTES, spec->name);
    if (!memchr(spec->name, '\0', sizeof(spec->name)) || !ps_name_valid(spec->name)) {
        snprintf(err, err_size, "bad table name '%s' ([A-Za-z0-9._-], 1 to %d characters)",
                 name, PS_NAME_BYTES - 1);
        return -EINVAL;
    }
    if (spec->count == 0 || spec->count > (4ull << 30) / sizeof(float)) {
        snprintf(err, err_size, "table '%s': %llu elements (1 .. %llu: at most 4 GiB)", name,
                 (unsigned long long)spec->count,
                 (unsigned long long)((4ull << 30) / sizeof(float)));
        return -EINVAL;
    }
    char text[PS_FED_RULE_BYTES];
    if (ps_table_rule_text(spec, text, sizeof(text)) < 0 ||
        (!spec->federated && ps_rule_parse(text, &(ps_rule_t){0}, err, err_size) < 0) ||
        ps_sync_format(&spec->sync, text, sizeof(text)) < 0 ||
        ps_sync_parse(text, &(ps_sync_t){0}, err, err_size) < 0) {
        snprintf(err, err_size, "table '%s': bad update rule or sync mode", name);
        return -EINVAL;
    }
    if (!memchr(spec->servers, '\0', sizeof(spec->servers))) {
        snprintf(err, err_size, "table '%s': the server list is too long", name);
        return -EINVAL;
    }
    char store[PS_SERVERS_BYTES];
    const char *names[PS_MAX_SERVERS];
    int n = spec->servers[0] ? ps_parse_servers(spec->servers, store, sizeof(store), names,
                                             servers, servers_size, err, err_size)
                             : (servers[0] = '\0', 1);
    if (n == 0) {
        snprintf(err, err_size, "table '%s': an empty server list", name);
        return -EINVAL;
    }
    return n < 0 ? n : 0;
}

int ps_table_open(ps_t *ps, const ps_worker_t *w, const ps_table_spec_t *spec,
                  uint64_t *handle, ps_done_fn done, void *arg, char *err, size_t err_size)
{
    char servers[PS_SERVERS_BYTES];
    if (!w || !spec || !handle || !w->group || !w->group_id) {
        snprintf(err, err_size, "tables belong to groups: this job is in none");
        return -EPERM;
    }
    int rc = check_spec(spec, servers, sizeof(servers), err, err_size);
    if (rc == 0 && spec->federated)
        rc = ps_fed_table_open_check(ps, w, spec, servers, err, err_size);
    if (rc < 0)
        return rc;
    if (ps_cluster_local_index(ps->d, w->group_id, w->rank) < 0) {
        snprintf(err, err_size, "rank %u is not a rank of group %s on this node", w->rank,
                 w->group);
        return -EPERM;
    }
    ps_table_t *t = find_local(ps, w, spec->name);
    if (t) { /* the node's second worker, or a retried open: the same table */
        ps_ring_record_t rec = {.count = t->spec.count};
        ps_table_rule_text(&t->spec, rec.rule, sizeof(rec.rule));
        ps_sync_format(&t->spec.sync, rec.sync, sizeof(rec.sync));
        snprintf(rec.servers, sizeof(rec.servers), "%s", t->spec.servers);
        rc = compare_spec(spec, t->spec.servers[0] ? servers : "", &rec, err, err_size);
        if (rc < 0)
            return rc;
    } else {
        uint32_t ranks[PS_MAX_SOURCES];
        const char *nodes[PS_MAX_SOURCES];
        ps_ring_record_t *want = calloc(1, sizeof(*want));
        agree_arg_t *a = calloc(1, sizeof(*a));
        uint32_t n = ps_cluster_group_nodes(ps->d, w->group_id, nodes, ranks, PS_MAX_SOURCES);
        t = want && a && n ? ps_table_new(ps, w->uid, w->group_id, w->group, spec->name) : NULL;
        if (!t) {
            free(want);
            free(a);
            snprintf(err, err_size, n ? "out of memory" : "group %s is not known here",
                     w->group);
            return n ? -ENOMEM : -ENOENT;
        }
        t->spec = *spec;
        snprintf(t->spec.servers, sizeof(t->spec.servers), "%s", servers);
        want->count = spec->count;
        want->vnodes = PS_RING_VNODES;
        ps_table_rule_text(spec, want->rule, sizeof(want->rule));
        ps_sync_format(&spec->sync, want->sync, sizeof(want->sync));
        if (servers[0])
            snprintf(want->servers, sizeof(want->servers), "%s", servers);
        else
            for (uint32_t i = 0; i < n; i++) { /* sorted already */
                size_t len = strlen(want->servers);
                snprintf(want->servers + len, sizeof(want->servers) - len, "%s%s",
                         i ? "," : "", nodes[i]);
            }
        a->ps = ps;
        a->handle = t->handle;
        /* a restored group's table starts at its checkpoint (ps_ckpt.h) */
        rc = ps_ckpt_open_prepare(t, spec, &want->start, err, err_size);
        if (rc < 0) {
            free(want);
            free(a);
            ps_table_free(t);
            return rc;
        }
        rc = ps_cluster_ring_agree(ps->d, w->uid, w->group, spec->name, want, on_agreed, a);
        free(want);
        if (rc < 0) {
            free(a);
            ps_table_free(t);
            snprintf(err, err_size, "table '%s': cannot agree on its ring (%s)", spec->name,
                     strerror(-rc));
            return rc;
        }
    }
    *handle = t->handle;
    if (t->state == PS_TABLE_READY) {
        ps_call_done(ps, w->owner, done, arg, 0, NULL);
        return 0;
    }
    ps_open_wait_t *wt = calloc(1, sizeof(*wt));
    if (!wt) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    wt->owner = w->owner;
    wt->done = done;
    wt->arg = arg;
    wt->next = t->waiters;
    t->waiters = wt;
    return 0;
}
