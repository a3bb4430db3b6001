/* A node's workers of a table: pushes (summed per clock by ps_agg under BSP/SSP, sent on at
 * once under ASP), clocks, and the update streams to the shards (one update in flight per
 * shard, resent with the same seq when not acknowledged in time, or to the new primary when
 * the view changes: ps_retarget.c). An update is freed (and its clock's sum released) only
 * when the shard's primary acknowledged it. Pulls are ps_pull.c. */
#include "ps_retarget.h"
#include "ps_cluster.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_worker_init(ps_table_t *t)
{
    if (t->group_id == 0 || t->self_source < 0)
        return 0;
    int i = 0;
    const char *nodes[PS_MAX_SOURCES];
    uint32_t ranks[PS_MAX_SOURCES];
    uint32_t n = ps_cluster_group_nodes(t->ps->d, t->group_id, nodes, ranks, PS_MAX_SOURCES);
    for (uint32_t k = 0; k < n; k++)
        if (strcmp(nodes[k], t->source_names[t->self_source]) == 0)
            i = (int)ranks[k];
    t->local_workers = (uint32_t)i;
    if (t->local_workers == 0 || t->local_workers > PS_MAX_LOCAL_WORKERS)
        return -EINVAL;
    t->streams = calloc(t->layout.shards, sizeof(*t->streams));
    if (!t->streams)
        return -ENOMEM;
    for (uint32_t s = 0; s < t->layout.shards; s++)
        t->streams[s].next_seq = 1;
    if (t->spec.sync.kind == PS_SYNC_ASP) {
        t->asp_seq = calloc(t->local_workers, sizeof(*t->asp_seq));
        t->asp_clock = calloc(t->local_workers, sizeof(*t->asp_clock));
        for (uint32_t i = 0; t->asp_clock && i < t->local_workers; i++)
            t->asp_clock[i] = t->start_clock; /* restored: the checkpoint's clock */
        t->asp_closed = t->start_clock;
        return t->asp_seq && t->asp_clock ? 0 : -ENOMEM;
    }
    t->agg = t->start_clock ? ps_agg_create_at(t->spec.count, &t->spec.sync, t->local_workers,
                                               t->start_clock)
                            : ps_agg_create(t->spec.count, &t->spec.sync, t->local_workers);
    return t->agg ? 0 : -ENOMEM;
}

static void update_free(ps_update_t *u)
{
    free(u->keys);
    free(u->owned);
    free(u);
}

void ps_worker_fini(ps_table_t *t)
{
    for (uint32_t s = 0; t->streams && s < t->layout.shards; s++) {
        ps_stream_t *st = &t->streams[s];
        while (st->head) {
            ps_update_t *u = st->head;
            st->head = u->next;
            if (u->outgoing && --u->outgoing->pending == 0)
                free(u->outgoing);
            update_free(u);
        }
    }
    free(t->streams);
    t->streams = NULL;
    ps_agg_destroy(t->agg);
    t->agg = NULL;
    free(t->asp_seq);
    free(t->asp_clock);
    free(t->refusals_told);
    t->refusals_told = NULL;
    t->asp_seq = t->asp_clock = NULL;
    t->local_workers = 0;
    /* pulls of this table's workers waiting on other servers: their answers go nowhere */
    ps_worker_fail_fetches(t, -ECANCELED, "the table is gone");
}

uint64_t ps_worker_clocks_sent(const ps_table_t *t)
{
    if (t->asp_clock)
        return t->asp_closed;
    uint64_t least = t->agg && t->local_workers ? UINT64_MAX : 0;
    for (uint32_t i = 0; t->agg && i < t->local_workers; i++) {
        uint64_t c = ps_agg_clock_of(t->agg, i);
        least = c < least ? c : least;
    }
    return least;
}

void ps_worker_fail_fetches(ps_table_t *t, int rc, const char *err)
{
    for (ps_fetch_t **fp = &t->ps->fetches; *fp;) {
        ps_fetch_t *f = *fp;
        if (f->table == t) {
            *fp = f->next;
            ps_pull_fetch_finish(f, rc, err, NULL, 0, 0, 0, 0);
        } else
            fp = &f->next;
    }
}

static int head_done(ps_table_t *t, uint32_t shard, uint64_t seq, int rc);

/* The head stays in flight, marked sent now: the retry timer sends it again in
 * PS_UPDATE_RETRY_MS. */
static void hold_head(ps_table_t *t, ps_stream_t *st)
{
    st->in_flight = 1;
    st->sent = 1;
    st->sent_ns = salusd_now_ns();
    ps_retarget_arm_retry(t->ps);
}

/* Sends (or applies here) the head of a shard's stream when nothing is in flight, to the
 * shard's primary now. resend: the head went before; a failed send is retried later (a new
 * head's failed send fails the table, unless it is replicated: then it waits for a view). */
static void pump_as(ps_table_t *t, uint32_t shard, int resend)
{
    ps_stream_t *st = &t->streams[shard];
    char why[PS_ERR_BYTES];
    while (st->head && !st->in_flight) {
        ps_update_t *u = st->head;
        snprintf(st->sent_to, sizeof(st->sent_to), "%s", ps_retarget_primary(t, shard));
        if ((int)t->owner[shard] == t->self_server) {
            /* (a shard this daemon is the primary of but holds no state for yet: not ready) */
            int rc = ps_retarget_served_here(t, shard)
                         ? ps_server_update(t, shard, (uint32_t)t->self_source, u)
                         : -ESTALE;
            if (rc == PS_UPDATE_PENDING || rc == -ENOMEM || rc == -EAGAIN) {
                /* not now (the retry timer tries again), or taken and acknowledged later
                 * (once the standbys have it) */
                hold_head(t, st);
                return;
            }
            if (rc == -ESTALE) {
                snprintf(why, sizeof(why), "this daemon is not yet the primary of shard %u",
                         shard);
                ps_retarget_stall(t, &st->stalled_ns, why);
                st->refused = 1;
                hold_head(t, st);
                return;
            }
            if (!head_done(t, shard, u->seq, rc < 0 ? rc : 0))
                return;
            continue;
        }
        st->in_flight = 1;
        st->sent = 0;
        if (!resend || !st->first_sent_ns)
            st->first_sent_ns = salusd_now_ns();
        ps_retarget_arm_retry(t->ps);
        if (ps_msg_send_update(t, shard, u) < 0) {
            if (!resend && !ps_retarget_replicated(t)) {
                snprintf(why, sizeof(why), "table '%s': server %s is unreachable", t->name,
                         st->sent_to);
                ps_table_fail(t, -EHOSTUNREACH, why);
                return;
            }
            snprintf(why, sizeof(why), "server %s is unreachable", st->sent_to);
            if (ps_retarget_replicated(t))
                ps_retarget_stall(t, &st->stalled_ns, why); /* the next view's primary */
            hold_head(t, st); /* not sent: tried again after PS_UPDATE_RETRY_MS */
            return;
        }
    }
}

static void pump(ps_table_t *t, uint32_t shard)
{
    pump_as(t, shard, 0);
}

void ps_worker_resend_head(ps_table_t *t, uint32_t shard)
{
    ps_stream_t *st = &t->streams[shard];
    if (!st->head)
        return;
    st->in_flight = 0;
    pump_as(t, shard, 1);
}

/* Queues u on its shard's stream; sent at once when `now`, else by pump_later (or when the
 * update ahead of it is acknowledged). */
static void enqueue_as(ps_table_t *t, uint32_t shard, ps_update_t *u, int now)
{
    ps_stream_t *st = &t->streams[shard];
    u->seq = st->next_seq++;
    if (st->tail)
        st->tail->next = u;
    else
        st->head = u;
    st->tail = u;
    t->ps->stats.updates_sent++;
    if (now)
        pump(t, shard);
}

static void enqueue(ps_table_t *t, uint32_t shard, ps_update_t *u)
{
    enqueue_as(t, shard, u, 1);
}

static void arm_pump(ps_t *ps)
{
    static const struct timeval zero = {0, 0};
    if (!evtimer_pending(ps->pump_timer, NULL))
        evtimer_add(ps->pump_timer, &zero);
}

void ps_worker_pump_later(ps_t *ps)
{
    uint64_t budget = PS_PUMP_TURN_BYTES;
    for (ps_table_t *t = ps->tables; t; t = t->next) {
        for (uint32_t s = 0; t->streams && t->state == PS_TABLE_READY && s < t->layout.shards;
             s++) {
            ps_stream_t *st = &t->streams[s];
            if (!st->head || st->in_flight)
                continue;
            if (budget == 0) {
                arm_pump(ps); /* the loop's other events first */
                return;
            }
            uint64_t bytes = st->head->n * sizeof(float);
            budget -= bytes < budget ? bytes : budget;
            pump(t, s);
        }
    }
}

/* The head's answer: 1 when it was acknowledged (freed: the next may go), else 0 (another
 * seq's answer; kept: -ESTALE; or the table failed). */
static int head_done(ps_table_t *t, uint32_t shard, uint64_t seq, int rc)
{
    ps_stream_t *st = &t->streams[shard];
    ps_update_t *u = st->head;
    if (!u || u->seq != seq)
        return 0; /* an old duplicate's ack */
    if (rc == -ESTALE) {
        /* not the primary in its view (or the shard is moving): kept, sent again at the next
         * view change or retry */
        char why[PS_ERR_BYTES];
        snprintf(why, sizeof(why), "server %s is not the primary of shard %u now", st->sent_to,
                 shard);
        ps_retarget_stall(t, &st->stalled_ns, why);
        st->refused = 1;
        hold_head(t, st);
        return 0;
    }
    if (rc == -ERANGE) {
        /* taken by the shard, its values refused (the result would not be finite): the
         * shard keeps its values; the local workers hear of it at their next push (logged
         * once per clock, not per shard) */
        if (!t->refusals || t->refusal_clock != u->clock) {
            snprintf(t->refusal_text, sizeof(t->refusal_text),
                     "the update of clock %llu to table '%s' was refused: its result would "
                     "not be finite (float overflow); the table keeps its last finite values",
                     (unsigned long long)u->clock, t->name);
            LOG_WARN("ps: group %s: %s", t->group, t->refusal_text);
            t->refusal_clock = u->clock;
            t->refusals++;
        }
        rc = 0;
    }
    if (rc < 0) {
        /* the worker was told its push succeeded: the update must not be dropped; the
         * table fails, and its workers hear why */
        char err[PS_ERR_BYTES];
        snprintf(err, sizeof(err), "table '%s': server %s refused the update of shard %u "
                 "for clock %llu: %s", t->name,
                 st->sent_to[0] ? st->sent_to : ps_retarget_primary(t, shard), shard,
                 (unsigned long long)u->clock, strerror(-rc));
        LOG_WARN("ps: %s", err);
        ps_table_fail(t, rc, err);
        return 0;
    }
    ps_retarget_recovered(t, &st->stalled_ns, "update");
    st->refused = 0;
    st->head = u->next;
    if (!st->head)
        st->tail = NULL;
    st->in_flight = 0;
    st->first_sent_ns = 0;
    /* the primary has it (and every live standby): the clock's sum may go once every shard
     * acknowledged its part */
    if (u->outgoing && --u->outgoing->pending == 0) {
        ps_agg_release(t->agg, u->outgoing->clock);
        free(u->outgoing);
    }
    update_free(u);
    return 1;
}

void ps_worker_acked(ps_table_t *t, uint32_t shard, uint64_t seq, int rc)
{
    if (!t->streams || shard >= t->layout.shards || t->state == PS_TABLE_FAILED)
        return;
    if (head_done(t, shard, seq, rc))
        pump(t, shard); /* (also after an acknowledgement that came later for a local head) */
}

/* Bad input with a clear message: nothing is taken. */
static int check_values(const ps_table_t *t, uint64_t offset, uint64_t n, const uint64_t *keys,
                        const float *values, int finite, char *err, size_t err_size)
{
    if (n == 0 || !values) {
        snprintf(err, err_size, "an empty push");
        return -EINVAL;
    }
    if (!keys && (offset > t->spec.count || n > t->spec.count - offset)) {
        snprintf(err, err_size, "push of [%llu, %llu) is outside table '%s' of %llu elements",
                 (unsigned long long)offset, (unsigned long long)(offset + n), t->name,
                 (unsigned long long)t->spec.count);
        return -EINVAL;
    }
    for (uint64_t i = 0; keys && i < n; i++)
        if (keys[i] >= t->spec.count) {
            snprintf(err, err_size, "key %llu is outside table '%s' of %llu elements",
                     (unsigned long long)keys[i], t->name, (unsigned long long)t->spec.count);
            return -EINVAL;
        }
    for (uint64_t i = 0; finite && i < n; i++)
        if (!isfinite(values[i])) {
            snprintf(err, err_size, "value %llu of the push is not finite",
                     (unsigned long long)i);
            return -EINVAL;
        }
    return 0;
}

/* ASP: the push goes to each shard it touches as one contribution, at once. Its clock is
 * the node's oldest open one (ASP applies on arrival; the clock only has to be one the node
 * has not closed). */
static int asp_push(ps_table_t *t, const uint64_t *keys, uint64_t offset, uint64_t n,
                    const float *values)
{
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        uint64_t first, elems, m = 0;
        ps_layout_shard(&t->layout, s, &first, &elems);
        if (!keys && (offset >= first + elems || offset + n <= first))
            continue;
        ps_update_t *u = calloc(1, sizeof(*u));
        if (!u)
            return -ENOMEM;
        if (keys) {
            for (uint64_t i = 0; i < n; i++)
                m += keys[i] >= first && keys[i] < first + elems;
            if (m == 0) {
                free(u);
                continue;
            }
            u->keys = malloc(m * sizeof(*u->keys));
            u->owned = malloc(m * sizeof(float));
            if (!u->keys || !u->owned) {
                update_free(u);
                return -ENOMEM;
            }
            for (uint64_t i = 0, j = 0; i < n; i++)
                if (keys[i] >= first && keys[i] < first + elems) {
                    u->keys[j] = keys[i] - first;
                    u->owned[j++] = values[i];
                }
        } else {
            uint64_t from = offset > first ? offset : first;
            uint64_t to = offset + n < first + elems ? offset + n : first + elems;
            m = to - from;
            u->offset = from - first;
            u->owned = malloc(m * sizeof(float));
            if (!u->owned) {
                update_free(u);
                return -ENOMEM;
            }
            memcpy(u->owned, values + (from - offset), m * sizeof(float));
        }
        u->n = m;
        u->values = u->owned;
        u->clock = t->asp_closed;
        enqueue(t, s, u);
    }
    return 1;
}

/* A refusal of this table's updates the worker has not heard of: -ERANGE with err (once; the
 * push that hears it is not taken), else 0. */
static int tell_refusal(ps_table_t *t, uint32_t worker, char *err, size_t err_size)
{
    if (!t->refusals || worker >= t->local_workers)
        return 0;
    if (!t->refusals_told && !(t->refusals_told = calloc(t->local_workers, sizeof(uint64_t))))
        return 0;
    if (t->refusals_told[worker] == t->refusals)
        return 0;
    t->refusals_told[worker] = t->refusals;
    snprintf(err, err_size, "%s", t->refusal_text);
    return -ERANGE;
}

int ps_worker_push(ps_table_t *t, uint32_t worker, const ps_push_id_t *id, uint64_t offset,
                   uint64_t n, const uint64_t *keys, const float *values, char *err,
                   size_t err_size)
{
    /* the values' finiteness: checked here under ASP (the push goes to several shards: all
     * or nothing), by the aggregation itself under BSP/SSP (a scan less per push; its refusal
     * is explained below) */
    int asp = t->spec.sync.kind == PS_SYNC_ASP;
    int rc = check_values(t, offset, n, keys, values, asp, err, err_size);
    if (rc < 0)
        return rc;
    if (id->seq == 0) {
        snprintf(err, err_size, "a push's seq starts at 1");
        return -EINVAL;
    }
    if ((rc = tell_refusal(t, worker, err, err_size)) < 0)
        return rc;
    if (t->spec.sync.kind == PS_SYNC_ASP) {
        if (id->seq <= t->asp_seq[worker])
            return 0; /* a retry: applied once */
        if (id->clock != t->asp_clock[worker]) {
            snprintf(err, err_size, "push for clock %llu, but rank %u is at clock %llu",
                     (unsigned long long)id->clock, id->rank,
                     (unsigned long long)t->asp_clock[worker]);
            return -EINVAL;
        }
        rc = asp_push(t, keys, offset, n, values);
        if (rc < 0) {
            snprintf(err, err_size, "out of memory");
            return rc;
        }
        t->asp_seq[worker] = id->seq;
        return 1;
    }
    /* a new clock's sum is counted in the user's quota before it is made */
    uint64_t more = ps_agg_push_bytes(t->agg, worker);
    if (more > 0 && ps_agg_clock_of(t->agg, worker) == id->clock &&
        (rc = ps_quota_check(t->ps, t->uid, more, t->name, err, err_size)) < 0)
        return rc;
    rc = ps_agg_push(t->agg, worker, id->seq, id->clock, offset, n, keys, values);
    if (rc < 0 && check_values(t, offset, n, keys, values, 1, err, err_size) < 0)
        return rc; /* err says which value */
    if (rc == -ERANGE)
        snprintf(err, err_size,
                 "push for clock %llu of table '%s' refused: the clock's sum would not be "
                 "finite (float overflow); nothing was taken", (unsigned long long)id->clock,
                 t->name);
    else if (rc == -EAGAIN)
        snprintf(err, err_size,
                 "push for clock %llu of table '%s' (%s) refused: rank %u is more than %llu "
                 "clock(s) ahead of the slowest local rank or of the updates not yet "
                 "acknowledged (pull first; retry later)",
                 (unsigned long long)id->clock, t->name, t->sync_text, id->rank,
                 (unsigned long long)ps_sync_window(&t->spec.sync));
    else if (rc < 0)
        snprintf(err, err_size, "push (seq %llu) for clock %llu refused: rank %u is at clock %llu",
                 (unsigned long long)id->seq, (unsigned long long)id->clock, id->rank,
                 (unsigned long long)ps_agg_clock_of(t->agg, worker));
    return rc;
}

/* The bits set in [from, from + n) of a bitmap: 64 at a time in the middle. */
static uint64_t count_bits(const uint8_t *bits, uint64_t from, uint64_t n)
{
    uint64_t end = from + n, w = 0;
    for (; from < end && (from & 63); from++)
        w += (bits[from >> 3] >> (from & 7)) & 1;
    for (; end - from >= 64; from += 64) {
        uint64_t word;
        memcpy(&word, bits + (from >> 3), sizeof(word));
        w += (uint64_t)__builtin_popcountll(word);
    }
    for (; from < end; from++)
        w += (bits[from >> 3] >> (from & 7)) & 1;
    return w;
}

/* The part of a clock's sum for one shard: the whole slice, or (when few elements were
 * written, and always under "assign", whose shard would assign the zeros nobody pushed) the
 * written elements as keys, or a bare close when none was. 0 or -ENOMEM. */
static int clock_update(ps_table_t *t, ps_update_t *u, const float *sum,
                        const uint8_t *written, uint64_t first, uint64_t elems)
{
    uint64_t w = written ? count_bits(written, first, elems) : 0;
    if (!written || w == elems ||
        (t->spec.rule.kind != PS_RULE_ASSIGN && w * (sizeof(float) + sizeof(uint64_t)) >=
                                                      elems * sizeof(float))) {
        u->n = elems;
        u->values = sum + first;
        return 0;
    }
    if (w == 0)
        return 0; /* a bare close */
    u->keys = malloc(w * sizeof(*u->keys));
    u->owned = malloc(w * sizeof(float));
    if (!u->keys || !u->owned)
        return -ENOMEM;
    for (uint64_t i = first, k = 0; i < first + elems; i++)
        if ((written[i >> 3] >> (i & 7)) & 1) {
            u->keys[k] = i - first;
            u->owned[k++] = sum[i];
        }
    u->n = w;
    u->values = u->owned;
    return 0;
}

/* The table failed before the last `unmade` shards' updates of a clock were made: they will
 * never be acknowledged (the outgoing goes with the last update that was made, or now). */
static void forget_unmade(ps_outgoing_t *out, uint32_t unmade)
{
    out->pending -= unmade;
    if (out->pending == 0)
        free(out);
}

/* A clock complete on this node: its sum goes to every shard as one update; the first
 * PS_PUMP_TURN_BYTES of them at once, the rest from the pump timer, a turn at a time (a large
 * table's clock would otherwise hold the loop while every update is copied and sent). */
static void send_clock(ps_table_t *t, uint64_t clock)
{
    uint64_t budget = PS_PUMP_TURN_BYTES;
    const float *sum = ps_agg_sum(t->agg, clock);
    const uint8_t *written = ps_agg_written(t->agg, clock);
    ps_outgoing_t *out = sum ? calloc(1, sizeof(*out)) : NULL;
    if (!out) {
        ps_table_fail(t, -ENOMEM, "out of memory sending a clock's updates");
        return;
    }
    out->clock = clock;
    out->pending = t->layout.shards;
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        uint64_t first, elems;
        ps_layout_shard(&t->layout, s, &first, &elems);
        ps_update_t *u = calloc(1, sizeof(*u));
        if (!u || clock_update(t, u, sum, written, first, elems) < 0) {
            if (u)
                update_free(u);
            forget_unmade(out, t->layout.shards - s);
            ps_table_fail(t, -ENOMEM, "out of memory sending a clock's updates");
            return;
        }
        u->clock = clock;
        u->close = 1;
        u->outgoing = out;
        uint64_t bytes = u->n * sizeof(float);
        enqueue_as(t, s, u, budget > 0);
        budget -= bytes < budget ? bytes : budget;
        if (budget == 0)
            arm_pump(t->ps);
        if (t->state == PS_TABLE_FAILED) {
            forget_unmade(out, t->layout.shards - s - 1);
            return;
        }
    }
}

int ps_worker_clock(ps_table_t *t, uint32_t worker, uint64_t clock, char *err, size_t err_size)
{
    if (t->spec.sync.kind == PS_SYNC_ASP) {
        if (clock + 1 == t->asp_clock[worker])
            return 0;
        if (clock != t->asp_clock[worker])
            goto bad;
        t->asp_clock[worker]++;
        /* clocks every local worker closed: each shard hears it (a bare close), so that the
         * shards' done counts them as under BSP (readers see how far everyone got) */
        uint64_t least = UINT64_MAX;
        for (uint32_t i = 0; i < t->local_workers; i++)
            if (t->asp_clock[i] < least)
                least = t->asp_clock[i];
        while (t->asp_closed < least && t->state == PS_TABLE_READY) {
            for (uint32_t s = 0; s < t->layout.shards && t->state == PS_TABLE_READY; s++) {
                ps_update_t *u = calloc(1, sizeof(*u));
                if (!u) {
                    ps_table_fail(t, -ENOMEM, "out of memory sending a clock's closes");
                    break;
                }
                u->clock = t->asp_closed;
                u->close = 1;
                enqueue(t, s, u);
            }
            t->asp_closed++;
        }
        return 0;
    }
    int rc = ps_agg_close(t->agg, worker, clock);
    if (rc == -EAGAIN) {
        snprintf(err, err_size,
                 "clock %llu of table '%s' (%s) refused: it would take the rank more than %llu "
                 "clock(s) ahead of the slowest local rank or of the updates not yet "
                 "acknowledged (pull first; retry later)",
                 (unsigned long long)clock, t->name, t->sync_text,
                 (unsigned long long)ps_sync_window(&t->spec.sync));
        return rc;
    }
    if (rc == -ENOMEM) {
        snprintf(err, err_size, "out of memory");
        return rc;
    }
    if (rc < 0)
        goto bad;
    if (rc == 1)
        send_clock(t, clock);
    return 0;
bad:
    snprintf(err, err_size, "clock %llu is not the rank's current clock %llu of table '%s'",
             (unsigned long long)clock,
             (unsigned long long)(t->agg ? ps_agg_clock_of(t->agg, worker)
                                         : t->asp_clock[worker]),
             t->name);
    return -EINVAL;
}
