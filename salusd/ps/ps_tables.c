/* Tables: lookup, building from the agreed record (layout, ring, shards here), the quota,
 * failure and freeing. Opening them is ps_open.c. */
#include "ps-internal.h"
#include "ps_cluster.h"
#include "ps_fed_table-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ps_table_t *ps_table_by_handle(ps_t *ps, const ps_worker_t *w, uint64_t handle)
{
    for (ps_table_t *t = ps->tables; t; t = t->next)
        if (t->handle == handle && t->uid == w->uid && t->group_id == w->group_id &&
            w->group_id != 0 && !t->worker_over)
            return t;
    return NULL;
}

ps_table_t *ps_table_find(ps_t *ps, uid_t uid, const char *group, const char *name,
                          uint64_t epoch)
{
    for (ps_table_t *t = ps->tables; t; t = t->next)
        if (t->uid == uid && t->epoch == epoch && t->state != PS_TABLE_FAILED &&
            strcmp(t->group, group) == 0 && strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

ps_table_t *ps_table_new(ps_t *ps, uid_t uid, uint64_t group_id, const char *group,
                         const char *name)
{
    ps_table_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ps = ps;
    t->handle = ps->next_handle++;
    t->uid = uid;
    t->group_id = group_id;
    snprintf(t->group, sizeof(t->group), "%s", group);
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->self_server = -1;
    t->self_source = -1;
    t->worker_over = group_id == 0;
    t->next = ps->tables;
    ps->tables = t;
    return t;
}

void ps_table_free(ps_table_t *t)
{
    ps_t *ps = t->ps;
    for (ps_table_t **tp = &ps->tables; *tp; tp = &(*tp)->next)
        if (*tp == t) {
            *tp = t->next;
            break;
        }
    ps_worker_fini(t);
    ps_server_drop_waits(t, NULL, NULL);
    ps_fed_table_free(t);
    ps_repl_fini(t);
    if (t->watching)
        ps_replicas_unwatch(ps->d, t->uid, t->group, t->epoch, t->name);
    while (t->waiters) {
        ps_open_wait_t *w = t->waiters;
        t->waiters = w->next;
        free(w);
    }
    if (t->open_timer)
        event_free(t->open_timer);
    for (uint32_t i = 0; t->shards && i < t->layout.shards; i++)
        ps_shard_destroy(t->shards[i]);
    free(t->shards);
    ps_ring_destroy(t->ring);
    free(t->owner);
    free(t->source_names);
    free(t->source_over);
    free(t->source_final);
    free(t->restore_values);
    free(t);
}

void ps_table_maybe_free(ps_table_t *t)
{
    if (!t->worker_over || t->state == PS_TABLE_OPENING)
        return;
    for (uint32_t s = 0; t->self_server >= 0 && s < t->sources; s++)
        if (!t->source_over[s])
            return;
    LOG_DEBUG("ps: table '%s' of group %s freed here", t->name, t->group);
    ps_table_free(t);
}

void ps_table_fail(ps_table_t *t, int rc, const char *err)
{
    ps_t *ps = t->ps;
    int opening = t->state == PS_TABLE_OPENING;
    t->state = PS_TABLE_FAILED;
    t->error = rc;
    snprintf(t->error_text, sizeof(t->error_text), "%s", err);
    LOG_INFO("ps: table '%s' of group %s: %s", t->name, t->group, err);
    while (t->waiters) {
        ps_open_wait_t *w = t->waiters;
        t->waiters = w->next;
        ps_call_done(ps, w->owner, w->done, w->arg, rc, err);
        free(w);
    }
    if (opening) { /* never opened: a later open starts again */
        if (t->open_req) /* the servers that took the open need not keep it for us */
            ps_msg_send_bye(t);
        ps_table_free(t);
        return;
    }
    /* what waits on the table fails now rather than never */
    ps_server_fail_waits(t, rc, err);
    ps_worker_fail_fetches(t, rc, err);
    ps_fed_table_fail(t, rc, err);
    /* nothing it holds is of use now: its shards go, and its quota charge, so that the job's
     * re-open (a new table: find_local skips failed ones) is not refused for it; the worker
     * side (aggregation, streams) goes on the next loop turn (ps_tables_reap): the caller may
     * be walking its streams */
    for (uint32_t i = 0; t->shards && i < t->layout.shards; i++) {
        ps_shard_destroy(t->shards[i]);
        t->shards[i] = NULL;
        ps_repl_drop_shard(t, i);
    }
    t->charged_bytes = 0;
    event_active(ps->call_event, EV_TIMEOUT, 1);
}

void ps_tables_reap(ps_t *ps)
{
    for (ps_table_t *t = ps->tables; t; t = t->next)
        if (t->state == PS_TABLE_FAILED && (t->streams || t->agg || t->asp_seq))
            ps_worker_fini(t);
}

void ps_table_ready(ps_table_t *t)
{
    t->state = PS_TABLE_READY;
    if (t->open_timer)
        event_del(t->open_timer);
    while (t->waiters) {
        ps_open_wait_t *w = t->waiters;
        t->waiters = w->next;
        ps_call_done(t->ps, w->owner, w->done, w->arg, 0, NULL);
        free(w);
    }
}

uint64_t ps_table_shard_bytes(const ps_table_t *t)
{
    if (t->repl) /* every replica here (ps_repl.c) */
        return ps_repl_shard_bytes(t);
    uint64_t sum = 0;
    for (uint32_t i = 0; t->owner && i < t->layout.shards; i++)
        if ((int)t->owner[i] == t->self_server) {
            uint64_t first, elems;
            ps_layout_shard(&t->layout, i, &first, &elems);
            sum += elems * sizeof(float);
        }
    return sum;
}

uint64_t ps_table_held_bytes(const ps_table_t *t)
{
    uint64_t sum = ps_agg_sum_bytes(t->agg);
    for (uint32_t i = 0; t->shards && i < t->layout.shards; i++)
        sum += ps_shard_pending_bytes(t->shards[i]);
    return sum;
}

uint64_t ps_user_bytes(ps_t *ps, uid_t uid)
{
    uint64_t sum = 0;
    for (ps_table_t *t = ps->tables; t; t = t->next)
        if (t->uid == uid)
            sum += t->charged_bytes + ps_table_held_bytes(t);
    return sum;
}

int ps_quota_check(ps_t *ps, uid_t uid, uint64_t more, const char *table, char *err,
                   size_t err_size)
{
    uint64_t quota = ps->d->config.ps_user_bytes, used = ps_user_bytes(ps, uid);
    if (more <= quota && used <= quota - more)
        return 0;
    snprintf(err, err_size,
             "table '%s' needs %llu bytes on %s: uid %u holds %llu of its %llu (ps-user-bytes)",
             table, (unsigned long long)more, ps_cluster_self(ps->d), (unsigned)uid,
             (unsigned long long)used, (unsigned long long)quota);
    return -EDQUOT;
}

/* "b, a,a" -> "a,b" in out (sorted, distinct); the names in names[] point into store. The
 * count, or -EINVAL with err. */
int ps_parse_servers(const char *text, char *store, size_t store_size, const char **names,
                     char *out, size_t out_size, char *err, size_t err_size)
{
    snprintf(store, store_size, "%s", text);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(store, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        for (char *end = tok + strlen(tok); end > tok && end[-1] == ' ';)
            *--end = '\0';
        if (!ps_name_valid(tok)) {
            snprintf(err, err_size, "bad server name '%.64s'", tok);
            return -EINVAL;
        }
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= strcmp(names[i], tok) == 0;
        if (dup)
            continue;
        if (n == PS_MAX_SERVERS) {
            snprintf(err, err_size, "more than %d servers", PS_MAX_SERVERS);
            return -EINVAL;
        }
        int at = n++;
        while (at > 0 && strcmp(names[at - 1], tok) > 0) {
            names[at] = names[at - 1];
            at--;
        }
        names[at] = tok;
    }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(out);
        if ((size_t)snprintf(out + len, out_size - len, "%s%s", i ? "," : "", names[i]) >=
            out_size - len) {
            snprintf(err, err_size, "the server list is too long");
            return -EINVAL;
        }
    }
    return n;
}

int ps_table_build(ps_table_t *t, const ps_ring_record_t *rec, const char *const *sources,
                   uint32_t nsources, char *err, size_t err_size)
{
    ps_t *ps = t->ps;
    const char *self = ps_cluster_self(ps->d);
    char store[PS_SERVERS_BYTES], sorted[PS_SERVERS_BYTES];
    const char *names[PS_MAX_SERVERS];
    t->spec.count = rec->count;
    snprintf(t->spec.name, sizeof(t->spec.name), "%s", t->name);
    if (rec->count == 0 || rec->count > (4ull << 30) / sizeof(float) ||
        ps_rule_parse(rec->rule, &t->spec.rule, err, err_size) < 0 ||
        ps_sync_parse(rec->sync, &t->spec.sync, err, err_size) < 0) {
        if (rec->count == 0 || rec->count > (4ull << 30) / sizeof(float))
            snprintf(err, err_size, "bad element count %llu", (unsigned long long)rec->count);
        return -EINVAL;
    }
    int n = ps_parse_servers(rec->servers, store, sizeof(store), names, sorted, sizeof(sorted),
                          err, err_size);
    if (n <= 0 || nsources == 0 || nsources > PS_MAX_SOURCES) {
        if (n == 0 || nsources == 0 || nsources > PS_MAX_SOURCES)
            snprintf(err, err_size, "table '%s': no servers or no sources", t->name);
        return -EINVAL;
    }
    snprintf(t->spec.servers, sizeof(t->spec.servers), "%s", sorted);
    snprintf(t->rule_text, sizeof(t->rule_text), "%s", rec->rule);
    snprintf(t->sync_text, sizeof(t->sync_text), "%s", rec->sync);
    t->epoch = rec->epoch;
    t->start_clock = rec->start; /* 0, or a restored table's checkpoint clock */
    t->vnodes = rec->vnodes ? rec->vnodes : PS_RING_VNODES;
    if (ps_layout_init(&t->layout, rec->count, (uint32_t)n) < 0 ||
        !(t->ring = ps_ring_create(names, (size_t)n, rec->vnodes))) {
        snprintf(err, err_size, "table '%s': cannot build its ring", t->name);
        return -EINVAL;
    }
    t->owner = calloc(t->layout.shards, sizeof(*t->owner));
    t->shards = calloc(t->layout.shards, sizeof(*t->shards));
    t->source_names = calloc(nsources, sizeof(*t->source_names));
    t->source_over = calloc(nsources, 1);
    t->source_final = malloc(nsources * sizeof(*t->source_final));
    if (!t->owner || !t->shards || !t->source_names || !t->source_over || !t->source_final)
        goto nomem;
    for (uint32_t s = 0; s < nsources; s++)
        t->source_final[s] = UINT64_MAX;
    for (size_t i = 0; i < ps_ring_size(t->ring); i++)
        if (strcmp(ps_ring_name(t->ring, i), self) == 0)
            t->self_server = (int)i;
    t->sources = nsources;
    for (uint32_t s = 0; s < nsources; s++) {
        snprintf(t->source_names[s], PS_NODE_BYTES, "%s", sources[s]);
        if (strcmp(sources[s], self) == 0 && t->group_id)
            t->self_source = (int)s;
    }
    for (uint32_t i = 0; i < t->layout.shards; i++)
        t->owner[i] = (uint32_t)ps_ring_owner(t->ring, t->name, i);
    return 0;
nomem:
    snprintf(err, err_size, "table '%s': out of memory", t->name);
    return -ENOMEM;
}

int ps_table_create_shards(ps_table_t *t, char *err, size_t err_size)
{
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        int here = t->repl ? t->repl[i].replica && !t->repl[i].loading
                           : (int)t->owner[i] == t->self_server;
        if (!here || t->shards[i])
            continue;
        uint64_t first, elems;
        ps_layout_shard(&t->layout, i, &first, &elems);
        t->shards[i] = ps_shard_create(elems, &t->spec.rule, &t->spec.sync, t->sources);
        if (!t->shards[i]) {
            snprintf(err, err_size, "table '%s': out of memory", t->name);
            return -ENOMEM;
        }
    }
    return 0;
}

int ps_table_rule_text(const ps_table_spec_t *spec, char *buf, size_t size)
{
    return spec->federated ? ps_fed_format(&spec->fed, buf, size)
                           : ps_rule_format(&spec->rule, buf, size);
}
