/* Federated tables served by this daemon (ps_fed_table-internal.h): the model and its rounds
 * (ps-core's ps_fed_t), the workers' clocks, pulls waiting for their round, the failure
 * timeout, the quota. */
#include "ps_fed_table-internal.h"
#include "ps_cluster.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pull waiting until round `clock` is open. */
typedef struct ps_fed_wait_s {
    const void *owner;
    ps_pull_fn done;
    void *arg;
    float *out;
    uint64_t offset, n, clock;
    uint64_t round_at_request, since_ns;
    struct ps_fed_wait_s *next;
} ps_fed_wait_t;

typedef struct ps_fed_table_s {
    ps_fed_t *fed;
    uint32_t workers;          /* the local ranks (the whole group) */
    uint64_t *clock;           /* per local worker index */
    ps_fed_wait_t *waits;
    struct event *timer;       /* the open round's failure timeout */
    uint64_t rounds_timed_out;
} ps_fed_table_t;

int ps_fed_table_open_check(ps_t *ps, const ps_worker_t *w, const ps_table_spec_t *spec,
                            const char *servers, char *err, size_t err_size)
{
    const char *self = ps_cluster_self(ps->d);
    const char *nodes[PS_MAX_SOURCES];
    uint32_t ranks[PS_MAX_SOURCES];
    uint32_t n = ps_cluster_group_nodes(ps->d, w->group_id, nodes, ranks, PS_MAX_SOURCES);
    if (servers[0] && strcmp(servers, self) != 0) {
        snprintf(err, err_size, "table '%s': federated tables are not served across nodes yet: "
                 "its server set must be this node (%s) alone, not %s", spec->name, self,
                 servers);
        return -EINVAL;
    }
    if (n != 1 || strcmp(nodes[0], self) != 0) {
        snprintf(err, err_size, "table '%s': federated tables are not served across nodes yet: "
                 "group %s runs on %u nodes (it must run on this node, %s, alone)", spec->name,
                 w->group, n, self);
        return -EINVAL;
    }
    if (spec->fed.clients != w->world) {
        snprintf(err, err_size, "table '%s': fedavg has %u clients but group %s has %u ranks "
                 "(N must be the group's world: client ids are the ranks)", spec->name,
                 spec->fed.clients, w->group, w->world);
        return -EINVAL;
    }
    return 0;
}

/* ---- rounds, waiting pulls, the timeout ------------------------------------------------- */

static void answer(ps_table_t *t, ps_fed_wait_t *wt, int waited)
{
    ps_t *ps = t->ps;
    ps_fed_table_t *ft = t->fed;
    uint64_t now = salusd_now_ns();
    ps_read_t read = {.clock = wt->clock,
                      .done = ps_fed_round(ft->fed),
                      .done_at_request = wt->round_at_request,
                      .waited_ns = waited ? now - wt->since_ns : 0,
                      .waited = waited};
    memcpy(wt->out, ps_fed_values(ft->fed) + wt->offset, wt->n * sizeof(float));
    ps->stats.pulls++;
    ps->stats.pull_bytes += wt->n * sizeof(float);
    if (waited) {
        ps->stats.staleness_waits++;
        ps->stats.staleness_wait_ns += read.waited_ns;
    }
    ps_call_pull(ps, wt->owner, wt->done, wt->arg, 0, NULL, &read);
}

static void arm_timer(ps_table_t *t)
{
    long long ms = t->ps->d->config.ps_fed_timeout_ms;
    if (ms <= 0)
        ms = 600000;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    if (t->fed->timer && evtimer_add(t->fed->timer, &tv) < 0)
        LOG_WARN("ps: federated table '%s': cannot arm its round timeout", t->name);
}

/* A round closed: the quota's count follows, the pulls it lets through are answered, the
 * next round's timeout starts. */
static void round_closed(ps_table_t *t)
{
    ps_fed_table_t *ft = t->fed;
    ps_fed_round_info_t info;
    ps_fed_last_round(ft->fed, &info);
    LOG_DEBUG("ps: federated table '%s': round %llu closed (%u pushed, %u accepted, %llu "
              "samples)%s", t->name, (unsigned long long)info.round, info.pushed,
              info.accepted, (unsigned long long)info.samples,
              info.timed_out ? " by the timeout" : "");
    t->charged_bytes = ps_fed_bytes(ft->fed);
    uint64_t round = ps_fed_round(ft->fed);
    for (ps_fed_wait_t **wp = &ft->waits; *wp;) {
        ps_fed_wait_t *wt = *wp;
        if (wt->clock <= round) {
            *wp = wt->next;
            answer(t, wt, 1);
            free(wt);
        } else
            wp = &wt->next;
    }
    arm_timer(t);
}

static void on_round_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_table_t *t = arg;
    ps_fed_table_t *ft = t->fed;
    uint64_t round = ps_fed_round(ft->fed);
    uint32_t pushed = ps_fed_pushed(ft->fed);
    uint32_t accepted = ps_fed_close_round(ft->fed);
    ft->rounds_timed_out++;
    t->ps->stats.fed_rounds_timed_out++;
    LOG_WARN("ps: federated table '%s' of group %s: round %llu closed by the failure timeout "
             "(%lld ms) with %u of its %u pushes (%u accepted)", t->name, t->group,
             (unsigned long long)round, t->ps->d->config.ps_fed_timeout_ms, pushed,
             ps_fed_spec(ft->fed)->per_round, accepted);
    round_closed(t);
}

int ps_fed_table_start(ps_table_t *t, const ps_ring_record_t *rec, char *err, size_t err_size)
{
    ps_t *ps = t->ps;
    const char *self = ps_cluster_self(ps->d);
    if (strcmp(rec->servers, self) != 0) {
        snprintf(err, err_size, "table '%s': federated tables are not served across nodes yet "
                 "(its record names servers %s)", t->name, rec->servers);
        return -EINVAL;
    }
    if (ps_fed_parse(rec->rule, &t->spec.fed, err, err_size) < 0 ||
        ps_sync_parse(rec->sync, &t->spec.sync, err, err_size) < 0)
        return -EINVAL;
    int index = -1;
    uint32_t workers = 0;
    while ((index = ps_cluster_local_index(ps->d, t->group_id, workers)) >= 0)
        workers++;
    if (workers != t->spec.fed.clients) {
        snprintf(err, err_size, "table '%s': %u of the %u clients' ranks run here", t->name,
                 workers, t->spec.fed.clients);
        return -EINVAL;
    }
    t->spec.count = rec->count;
    snprintf(t->spec.servers, sizeof(t->spec.servers), "%s", rec->servers);
    snprintf(t->rule_text, sizeof(t->rule_text), "%s", rec->rule);
    snprintf(t->sync_text, sizeof(t->sync_text), "%s", rec->sync);
    t->epoch = rec->epoch;
    ps_fed_table_t *ft = calloc(1, sizeof(*ft));
    if (!ft)
        goto nomem;
    t->fed = ft;
    ft->fed = ps_fed_create(&t->spec.fed, rec->count, NULL);
    ft->clock = calloc(workers, sizeof(*ft->clock));
    ft->workers = workers;
    ft->timer = evtimer_new(ps->d->base, on_round_timeout, t);
    if (!ft->fed || !ft->clock || !ft->timer)
        goto nomem;
    int rc = ps_quota_check(ps, t->uid, ps_fed_bytes(ft->fed), t->name, err, err_size);
    if (rc < 0)
        return rc;
    t->charged_bytes = ps_fed_bytes(ft->fed);
    t->local_workers = workers;
    arm_timer(t);
    ps_table_ready(t);
    return 0;
nomem:
    snprintf(err, err_size, "table '%s': out of memory", t->name);
    return -ENOMEM;
}

int ps_fed_table_pull(ps_table_t *t, uint32_t worker, uint64_t clock, uint64_t offset,
                      uint64_t n, float *out, ps_pull_fn done, void *arg, const void *owner,
                      char *err, size_t err_size)
{
    ps_fed_table_t *ft = t->fed;
    int range = ps_pull_range_check(t, offset, n, err, err_size);
    if (range < 0)
        return range;
    if (worker >= ft->workers || clock > ft->clock[worker]) {
        snprintf(err, err_size, "pull at clock %llu, but the worker is at clock %llu",
                 (unsigned long long)clock,
                 (unsigned long long)(worker < ft->workers ? ft->clock[worker] : 0));
        return -EINVAL;
    }
    ps_fed_wait_t *wt = calloc(1, sizeof(*wt));
    if (!wt) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    *wt = (ps_fed_wait_t){.owner = owner ? owner : (const void *)t->ps, .done = done,
                          .arg = arg, .out = out, .offset = offset, .n = n, .clock = clock,
                          .round_at_request = ps_fed_round(ft->fed),
                          .since_ns = salusd_now_ns()};
    if (clock <= ps_fed_round(ft->fed)) {
        answer(t, wt, 0);
        free(wt);
        return 0;
    }
    wt->next = ft->waits;
    ft->waits = wt;
    return 0;
}

int ps_fed_table_clock(ps_table_t *t, uint32_t worker, uint64_t clock, char *err,
                       size_t err_size)
{
    ps_fed_table_t *ft = t->fed;
    if (worker >= ft->workers || clock != ft->clock[worker]) {
        snprintf(err, err_size, "clock %llu of table '%s', but the worker is at clock %llu",
                 (unsigned long long)clock, t->name,
                 (unsigned long long)(worker < ft->workers ? ft->clock[worker] : 0));
        return -EINVAL;
    }
    ft->clock[worker]++;
    return 0;
}

void ps_fed_table_fail(ps_table_t *t, int rc, const char *err)
{
    ps_fed_table_t *ft = t->fed;
    while (ft && ft->waits) {
        ps_fed_wait_t *wt = ft->waits;
        ft->waits = wt->next;
        ps_call_pull(t->ps, wt->owner, wt->done, wt->arg, rc, err, NULL);
        free(wt);
    }
    if (ft && ft->timer)
        event_del(ft->timer);
}

void ps_fed_table_free(ps_table_t *t)
{
    ps_fed_table_t *ft = t->fed;
    if (!ft)
        return;
    while (ft->waits) { /* no callback: the table goes with the group or the daemon */
        ps_fed_wait_t *wt = ft->waits;
        ft->waits = wt->next;
        free(wt);
    }
    if (ft->timer)
        event_free(ft->timer);
    ps_fed_destroy(ft->fed);
    free(ft->clock);
    free(ft);
    t->fed = NULL;
}

uint64_t ps_fed_table_round(const ps_table_t *t)
{
    return t->fed ? ps_fed_round(t->fed->fed) : 0;
}

uint64_t ps_fed_table_bytes(const ps_table_t *t)
{
    return t->fed ? ps_fed_bytes(t->fed->fed) : 0;
}

void ps_fed_table_forget_owner(ps_t *ps, const void *owner)
{
    for (ps_table_t *t = ps->tables; t; t = t->next)
        for (ps_fed_wait_t **wp = t->fed ? &t->fed->waits : NULL; wp && *wp;) {
            ps_fed_wait_t *wt = *wp;
            if (wt->owner == owner) {
                *wp = wt->next;
                free(wt);
            } else
                wp = &wt->next;
        }
}

/* ---- the local endpoint's ops ----------------------------------------------------------- */

/* The worker's federated table of handle, ready. */
static ps_table_t *fed_table(salusd_t *d, const ps_worker_t *w, uint64_t handle, int *rc,
                             char *err, size_t err_size)
{
    ps_t *ps = ps_of(d);
    ps_table_t *t = ps ? ps_table_by_handle(ps, w, handle) : NULL;
    *rc = -ENOENT;
    if (!ps) {
        snprintf(err, err_size, "the parameter-server role is not running");
        *rc = -ENOTSUP;
    } else if (!t || t->state == PS_TABLE_OPENING)
        snprintf(err, err_size, "no open table with handle %llu in group %s",
                 (unsigned long long)handle, w->group ? w->group : "?");
    else if (t->state == PS_TABLE_FAILED) {
        snprintf(err, err_size, "%s", t->error_text);
        *rc = t->error;
    } else if (!t->fed) {
        snprintf(err, err_size, "table '%s' is not federated (its rule is %s)", t->name,
                 t->rule_text);
        *rc = -EINVAL;
    } else if (w->rank >= ps_fed_spec(t->fed->fed)->clients) {
        snprintf(err, err_size, "rank %u is not a client of table '%s'", w->rank, t->name);
        *rc = -EPERM;
    } else
        return t;
    if (ps)
        ps->stats.refused++;
    return NULL;
}

int ps_fed_table_state(salusd_t *d, const ps_worker_t *w, uint64_t handle, ps_fed_state_t *state,
                       char *err, size_t err_size)
{
    int rc;
    ps_table_t *t = fed_table(d, w, handle, &rc, err, err_size);
    if (!t)
        return rc;
    const ps_fed_t *fed = t->fed->fed;
    const ps_fed_spec_t *spec = ps_fed_spec(fed);
    uint64_t round = ps_fed_round(fed);
    int pushed = ps_fed_client_pushed(fed, w->rank);
    *state = (ps_fed_state_t){.round = round,
                              .selected = !pushed && ps_fed_selected(spec, round, w->rank),
                              .pushed = pushed,
                              .clients = spec->clients,
                              .per_round = spec->per_round,
                              .epochs = spec->epochs};
    return 0;
}

int ps_fed_table_push(salusd_t *d, const ps_worker_t *w, uint64_t handle, uint64_t round,
                      int64_t samples, uint32_t work, const float *values, uint64_t n,
                      char *err, size_t err_size)
{
    int rc;
    ps_table_t *t = fed_table(d, w, handle, &rc, err, err_size);
    if (!t)
        return rc;
    ps_t *ps = t->ps;
    ps_fed_table_t *ft = t->fed;
    /* a client's first push for the open round may keep a model until the round closes */
    if (round == ps_fed_round(ft->fed) && !ps_fed_client_pushed(ft->fed, w->rank) &&
        ps_fed_selected(ps_fed_spec(ft->fed), round, w->rank)) {
        rc = ps_quota_check(ps, t->uid, n * sizeof(float), t->name, err, err_size);
        if (rc < 0) {
            ps->stats.refused++;
            return rc;
        }
    }
    rc = ps_fed_push(ft->fed, w->rank, round, samples, work, values, n, err, err_size);
    if (rc < 0) {
        ps->stats.refused++;
        return rc;
    }
    if (rc == 0) {
        ps->stats.pushes_duplicate++;
        return 1;
    }
    ps->stats.pushes++;
    ps->stats.push_bytes += n * sizeof(float);
    t->charged_bytes = ps_fed_bytes(ft->fed);
    if (rc == 2)
        round_closed(t);
    return 0;
}
