/* Unit tests of the worker side's fail-over (salusd/ps_retarget.c, ps_worker.c, ps_pull.c) on
 * one daemon without a cluster: a real salusd_t and its loop, a group's table opened as the
 * daemon opens it. The test then plays the server side's part: it swaps the table's ring and
 * owners to a view that names another server, n2 (there is no net: every send to n2 fails, as
 * to a server that died), answers for n2 with crafted messages (ps_msg_recv), and calls
 * ps_retarget_view_changed as the server side does after a swap. */
#include "groups.h"
#include "ps-internal.h"
#include "ps.h"
#include "ps_net.h"
#include "ps_cluster.h"
#include "ps_retarget.h"

#include "check_run.h"
#include "proto.h"

#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps_test_harness.h"

static void setup(void)
{
    harness_init();
    harness_start();
}

static void teardown(void)
{
    harness_stop();
}

static uint64_t make_group(const char *name, uint32_t world, int first)
{
    return harness_group(name, 1000, world, first, (groups_fields_t){.sync = LAUNCH_SYNC_BSP});
}

#define N 100

/* A BSP "add" table of N elements opened by worker w (this daemon its only server). */
static ps_table_t *open_table(const ps_worker_t *w, const char *group, uint64_t *handle)
{
    ps_table_spec_t s;
    memset(&s, 0, sizeof(s));
    char err[256] = "";
    snprintf(s.name, sizeof(s.name), "w");
    s.count = N;
    ck_assert_int_eq(ps_rule_parse("add", &s.rule, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_sync_parse("bsp", &s.sync, err, sizeof(err)), 0);
    result_t r = {0};
    ck_assert_int_eq(ps_open(&d, w, &s, handle, on_done, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_msg(r.rc == 0, "open: %d %s", r.rc, r.err);
    ps_table_t *t = ps_table_find(d.ps, 1000, group, "w", 1);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void push_ok(const ps_worker_t *w, uint64_t h, uint64_t clock, uint64_t seq,
                    const float *values)
{
    ps_push_id_t id = {.rank = w->rank, .clock = clock, .seq = seq};
    result_t r = {0};
    char err[256] = "";
    int rc = ps_push(&d, w, h, &id, 0, N, NULL, values, on_done, &r, err, sizeof(err));
    ck_assert_msg(rc == 0, "push: %d %s", rc, err);
    wait_for(&r);
    ck_assert_int_eq(r.rc, 0);
}

static void clock_ok(const ps_worker_t *w, uint64_t h, uint64_t clock)
{
    result_t r = {0};
    char err[256] = "";
    ck_assert_int_eq(ps_clock(&d, w, h, clock, on_done, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_msg(r.rc == 0, "clock: %d %s", r.rc, r.err);
}

static void pull_start(const ps_worker_t *w, uint64_t h, uint64_t clock, float *out,
                       result_t *r)
{
    char err[256] = "";
    int rc = ps_pull(&d, w, h, clock, 0, N, out, on_pull, r, err, sizeof(err));
    ck_assert_msg(rc == 0, "pull: %d %s", rc, err);
}

/* The server side's swap: the table's view is now the servers `names` with R replicas. */
static void set_view(ps_table_t *t, const char *const *names, size_t n, uint32_t replicas)
{
    ps_ring_t *ring = ps_ring_create(names, n, t->vnodes ? t->vnodes : 64);
    ck_assert_ptr_nonnull(ring);
    ps_ring_destroy(t->ring);
    t->ring = ring;
    t->self_server = -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(ps_ring_name(ring, i), "local") == 0)
            t->self_server = (int)i;
    for (uint32_t s = 0; s < t->layout.shards; s++)
        t->owner[s] = (uint32_t)ps_ring_owner(ring, t->name, s);
    t->replicas = replicas;
}

static const char *const two[] = {"local", "n2"};
static const char *const one[] = {"local"};

/* The first shard n2 is the primary of (the ring over local and n2 gives it some), and one
 * this daemon is the primary of. */
static uint32_t remote_shard(const ps_table_t *t)
{
    for (uint32_t s = 0; s < t->layout.shards; s++)
        if ((int)t->owner[s] != t->self_server)
            return s;
    ck_abort_msg("no shard on n2");
    return 0;
}

static uint32_t local_shard(const ps_table_t *t)
{
    for (uint32_t s = 0; s < t->layout.shards; s++)
        if ((int)t->owner[s] == t->self_server)
            return s;
    ck_abort_msg("no shard here");
    return 0;
}

static size_t fetches_of(const ps_table_t *t, const char *node, int stalled)
{
    size_t n = 0;
    for (const ps_fetch_t *f = d.ps->fetches; f; f = f->next)
        n += f->table == t && strcmp(f->node, node) == 0 && (f->stalled_ns != 0) == stalled;
    return n;
}

static void fill(float *v, uint64_t n, float x)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = x;
}

/* ---- messages from n2 ------------------------------------------------------------------- */
typedef struct msg_s {
    uint8_t b[PS_NET_MAX_HEADER];
    size_t len;
} msg_t;

static void msg_put(msg_t *m, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        m->b[m->len++] = (uint8_t)(v >> (8 * i));
}

static void msg_begin(msg_t *m, int type, const char *group)
{
    m->len = 0;
    msg_put(m, 0x50534d31u, 4);
    msg_put(m, (uint64_t)type, 1);
    msg_put(m, 1000, 4);
    msg_put(m, 1, 8); /* epoch */
    m->b[m->len++] = (uint8_t)strlen(group);
    memcpy(m->b + m->len, group, strlen(group));
    m->len += strlen(group);
    m->b[m->len++] = 1;
    m->b[m->len++] = 'w';
}

static void ack_from(const char *node, const char *group, uint32_t shard, uint64_t seq, int rc)
{
    msg_t m;
    msg_begin(&m, 5, group); /* MSG_UPDATE_ACK */
    msg_put(&m, shard, 4);
    msg_put(&m, 0, 4);       /* source: this daemon */
    msg_put(&m, seq, 8);
    msg_put(&m, (uint64_t)(uint32_t)rc, 4);
    ps_msg_recv(d.ps, node, m.b, m.len, NULL, 0);
}

/* n2's answers to every fetch of t on its way to it: rc, and when 0 the values x (done). */
static void answer_fetches(const ps_table_t *t, const char *group, int rc, float x,
                           uint64_t done)
{
    uint64_t reqs[64], ns[64];
    size_t k = 0;
    for (const ps_fetch_t *f = d.ps->fetches; f && k < 64; f = f->next)
        if (f->table == t && strcmp(f->node, "n2") == 0) {
            reqs[k] = f->req;
            ns[k++] = f->n;
        }
    ck_assert_uint_gt(k, 0);
    for (size_t i = 0; i < k; i++) {
        float values[N];
        fill(values, N, x);
        msg_t m;
        msg_begin(&m, 7, group); /* MSG_PULL_REPLY */
        msg_put(&m, reqs[i], 8);
        msg_put(&m, (uint64_t)(uint32_t)rc, 4);
        msg_put(&m, done, 8);
        msg_put(&m, done, 8);
        msg_put(&m, 0, 8);
        msg_put(&m, 0, 1);
        msg_put(&m, rc == 0 ? ns[i] : 0, 8);
        ps_msg_recv(d.ps, "n2", m.b, m.len, values, rc == 0 ? ns[i] * sizeof(float) : 0);
    }
}

/* A primary that died with a clock's update unacknowledged (R 2): the update is kept (its
 * clock's sum too: not released), and so is a read of the shard; the new view (this daemon
 * the only server) gets the update again with the same seq, applied once where the old
 * primary had already forwarded it; the read is answered; the recovery is measured. */
START_TEST(test_view_change_resends_heads)
{
    make_group("vc", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "vc", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "vc", &h);
    set_view(t, two, 2, 2);
    uint32_t sr = remote_shard(t), sl = local_shard(t);
    float ones[N], out[N];
    fill(ones, N, 1);
    push_ok(&w0, h, 0, 1, ones);
    clock_ok(&w0, h, 0);
    /* the local shard has clock 0; n2's cannot be reached: kept, the table waits */
    ck_assert_uint_eq(ps_shard_done(t->shards[sl]), 1);
    ck_assert_ptr_null(t->streams[sl].head);
    ps_stream_t *st = &t->streams[sr];
    ck_assert_ptr_nonnull(st->head);
    ck_assert_int_eq(st->in_flight, 1);
    ck_assert_str_eq(st->sent_to, "n2");
    ck_assert_uint_ne(st->stalled_ns, 0);
    ck_assert_uint_ne(t->outage_ns, 0);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    /* the clock's sum is held until every shard's primary acknowledged its part */
    ck_assert_ptr_nonnull(st->head->outgoing);
    ck_assert_uint_gt(st->head->outgoing->pending, 0);
    uint64_t seq = st->head->seq;
    /* n2 had forwarded it to this daemon (its standby) before it died */
    ck_assert_int_eq(ps_server_apply(t, sr, 0, st->head), 1);
    ck_assert_uint_eq(ps_shard_done(t->shards[sr]), 1);
    /* a read at clock 1 waits for n2's shards (kept, not failed) */
    result_t p = {0};
    pull_start(&w0, h, 1, out, &p);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    ck_assert_uint_gt(fetches_of(t, "n2", 1), 0);
    /* the retry before the bound resends and keeps everything */
    ps_retarget_retry(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    ck_assert_ptr_nonnull(t->streams[sr].head);

    /* the new view: n2 gone */
    set_view(t, one, 1, 2);
    ps_retarget_view_changed(t);
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        ck_assert_ptr_null(t->streams[s].head);
        ck_assert_int_eq(t->streams[s].in_flight, 0);
        ck_assert_uint_eq(t->streams[s].stalled_ns, 0);
        ck_assert_uint_eq(ps_shard_done(t->shards[s]), 1);
        ck_assert_uint_eq(ps_shard_closed(t->shards[s], 0), 1);
        ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 1); /* once, not twice */
    }
    ck_assert_uint_gt(seq, 0);
    wait_for(&p);
    ck_assert_msg(p.rc == 0, "%s", p.err);
    ck_assert_uint_eq(p.read.done, 1);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(out[i], 1);
    ck_assert_ptr_null(d.ps->fetches);
    ck_assert_uint_eq(t->outage_ns, 0);
    ck_assert_uint_eq(t->failovers, 1);
    ps_sample_t s;
    ck_assert_int_eq(ps_report_sample(&d, &s), 0);
    ck_assert_uint_eq(s.failovers, 1);
    ck_assert_uint_gt(s.failover_last_ns, 0);
    ck_assert_uint_eq(s.failover_last_ns, t->failover_ns);
    /* the next clock goes through with nothing stalled */
    push_ok(&w0, h, 1, 2, ones);
    clock_ok(&w0, h, 1);
    ck_assert_uint_eq(ps_shard_done(t->shards[sr]), 2);
    ck_assert_float_eq(ps_shard_values(t->shards[sr])[0], 2);
    ck_assert_uint_eq(t->failovers, 1);

    /* salusctl groups shows the recovery */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ps_report_group_tables(&d, t->group_id, &pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    ck_assert_int_eq(msgpack_unpack_next(&u, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(u.data.via.array.size, 1);
    uint64_t ms = UINT64_MAX;
    ck_assert(proto_get_uint(&u.data.via.array.ptr[0], "failover_ms", &ms) == 0);
    ck_assert_uint_eq(ms, t->failover_ns / 1000000);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* An -ESTALE acknowledgement (the server is not the primary in its view) keeps the update,
 * whatever R; an acknowledgement from a server that is not the primary is not trusted; past
 * PS_FAILOVER_TTLS lease TTLs without a view that takes it, the table fails and says why. */
START_TEST(test_estale_kept_then_bounded)
{
    make_group("es", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "es", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "es", &h);
    set_view(t, two, 2, 1);
    uint32_t sr = remote_shard(t);
    ps_update_t *u = calloc(1, sizeof(*u)); /* in flight to n2, as a sent update is */
    ck_assert_ptr_nonnull(u);
    u->seq = 41;
    u->close = 1;
    ps_stream_t *st = &t->streams[sr];
    st->head = st->tail = u;
    st->in_flight = 1;
    st->sent = 1;
    st->sent_ns = salusd_now_ns();
    snprintf(st->sent_to, sizeof(st->sent_to), "n2");
    ack_from("n3", "es", sr, 41, -ESTALE); /* not the shard's primary: dropped */
    ck_assert_uint_eq(st->stalled_ns, 0);
    ack_from("n2", "es", sr, 41, -ESTALE);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    ck_assert_ptr_eq(st->head, u);
    ck_assert_int_eq(st->in_flight, 1);
    ck_assert_uint_ne(st->stalled_ns, 0);
    ck_assert_msg(strstr(t->outage_why, "not the primary of shard") != NULL, "%s",
                  t->outage_why);
    /* a resend that cannot go (R 1, n2 has no link) is not a failure before the bound */
    st->sent_ns = 1;
    ps_retarget_retry(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    ck_assert_ptr_eq(st->head, u);
    /* past the bound, but a view came meanwhile (progress): the whole bound again */
    uint64_t limit = ps_retarget_limit_ns(d.ps);
    ck_assert_uint_eq(limit, (uint64_t)d.config.cluster_lease_ttl_s * 3 * 1000000000ull);
    uint64_t before = salusd_now_ns();
    st->stalled_ns = before - limit - 1000000000ull;
    ps_retarget_view_changed(t);
    ck_assert_uint_ge(st->stalled_ns, before);
    ck_assert_ptr_eq(st->head, u);
    ps_retarget_retry(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    /* past the bound with no view */
    st->stalled_ns = salusd_now_ns() - limit - 1000000000ull;
    ps_retarget_retry(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_FAILED);
    ck_assert_msg(strstr(t->error_text, "no primary of shard") != NULL &&
                      strstr(t->error_text, "no new view replaced it") != NULL &&
                      strstr(t->error_text, "not the primary") != NULL,
                  "%s", t->error_text);
    harness_pull_fails(&w0, h, N, "no primary of shard");
}
END_TEST

/* A server that goes down (peer down): with R 2 the updates and reads that wait on it wait
 * for the next view; with R 1 the table fails at once. */
START_TEST(test_node_down_waits_when_replicated)
{
    make_group("r2", 1, 0);
    make_group("r1", 1, 1);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "r2", &o0), w1 = worker_of(1, "r1", &o1);
    uint64_t h0, h1;
    ps_table_t *t2 = open_table(&w0, "r2", &h0), *t1 = open_table(&w1, "r1", &h1);
    set_view(t2, two, 2, 2);
    set_view(t1, two, 2, 1);
    float ones[N], out[N];
    fill(ones, N, 1);
    /* R 2: a clock whose update to n2 cannot go, and a read of n2's shards */
    push_ok(&w0, h0, 0, 1, ones);
    clock_ok(&w0, h0, 0);
    result_t p = {0};
    pull_start(&w0, h0, 1, out, &p);
    uint32_t sr = remote_shard(t2);
    ck_assert_ptr_nonnull(t2->streams[sr].head);
    size_t stalled = fetches_of(t2, "n2", 1);
    ck_assert_uint_gt(stalled, 0);
    /* R 1: a read of n2's shards whose send failed fails at once */
    result_t p1 = {0};
    float out1[N];
    pull_start(&w1, h1, 0, out1, &p1);
    wait_for(&p1);
    ck_assert_int_eq(p1.rc, -EHOSTUNREACH);
    ck_assert_msg(strstr(p1.err, "server n2 is unreachable") != NULL, "%s", p1.err);

    ps_retarget_node_down(d.ps, "n2");
    ck_assert_int_eq(t2->state, PS_TABLE_READY);
    ck_assert_ptr_nonnull(t2->streams[sr].head);
    ck_assert_uint_eq(fetches_of(t2, "n2", 1), stalled);
    ck_assert_int_eq(t1->state, PS_TABLE_FAILED);
    ck_assert_msg(strstr(t1->error_text, "server n2 is unreachable") != NULL, "%s",
                  t1->error_text);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    /* n2 is back in a view as the primary (its lease never ended: a link that came back) and
     * answers the read and the update */
    ps_retarget_view_changed(t2); /* n2 still primary: asked again of it, nothing lost */
    ck_assert_ptr_nonnull(t2->streams[sr].head);
    for (uint32_t s = 0; s < t2->layout.shards; s++)
        if (t2->streams[s].head)
            ack_from("n2", "r2", s, t2->streams[s].head->seq, 0);
    for (uint32_t s = 0; s < t2->layout.shards; s++)
        ck_assert_ptr_null(t2->streams[s].head);
    answer_fetches(t2, "r2", 0, 5, 1);
    wait_for(&p);
    ck_assert_int_eq(p.rc, 0);
    for (int i = 0; i < N; i++) {
        uint32_t s = ps_layout_shard_of(&t2->layout, (uint64_t)i);
        float want = (int)t2->owner[s] == t2->self_server ? 1.0f : 5.0f;
        ck_assert_float_eq(out[i], want);
    }
    ck_assert_uint_eq(t2->failovers, 1);
}
END_TEST

/* A read answered -ESTALE (n2 is not the primary in its view yet) is kept and asked again;
 * n2's answer once it serves completes it. */
START_TEST(test_pull_reply_estale_kept)
{
    make_group("pe", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "pe", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "pe", &h);
    set_view(t, two, 2, 2);
    float out[N];
    result_t p = {0};
    pull_start(&w0, h, 0, out, &p);
    size_t k = fetches_of(t, "n2", 1); /* (no link to n2: stalled already) */
    ck_assert_uint_gt(k, 0);
    for (ps_fetch_t *f = d.ps->fetches; f; f = f->next)
        f->stalled_ns = 0; /* as if sent */
    t->outage_ns = 0;
    answer_fetches(t, "pe", -ESTALE, 0, 0);
    ck_assert_uint_eq(fetches_of(t, "n2", 1), k);
    ck_assert_uint_ne(t->outage_ns, 0);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    answer_fetches(t, "pe", 0, 3, 0);
    wait_for(&p);
    ck_assert_int_eq(p.rc, 0);
    ck_assert_ptr_null(d.ps->fetches);
    for (int i = 0; i < N; i++)
        if ((int)t->owner[ps_layout_shard_of(&t->layout, (uint64_t)i)] != t->self_server)
            ck_assert_float_eq(out[i], 3);
    ck_assert_uint_eq(t->failovers, 1);
    ck_assert_uint_eq(t->outage_ns, 0);
}
END_TEST

/* Ranks 0 and 1 of group g, the table opened by both (w0, w1 of owners o0, o1; its handle in
 * h): w0 pushes 1s for clock 0, closes it and starts a pull of clock 1 into out (p), which
 * waits for w1's clock 0. The table. */
static ps_table_t *pull_waiting(const char *g, const int *o0, const int *o1, ps_worker_t *w0,
                                ps_worker_t *w1, uint64_t *h, float *out, result_t *p)
{
    make_group(g, 2, 0);
    *w0 = worker_of(0, g, o0);
    *w1 = worker_of(1, g, o1);
    ps_table_t *t = open_table(w0, g, h);
    ck_assert_ptr_eq(open_table(w1, g, h), t);
    float ones[N];
    fill(ones, N, 1);
    push_ok(w0, *h, 0, 1, ones);
    clock_ok(w0, *h, 0);
    pull_start(w0, *h, 1, out, p);
    return t;
}

/* The end of pull_waiting's pull: w1 pushes 1s for clock 0 and closes it, n2 answers its
 * fetches with 2s; the pull completes with 2 everywhere (1 + 1 here, 2 from n2). */
static void pull_completes(const ps_table_t *t, const char *g, const ps_worker_t *w1,
                           uint64_t h, const float *out, result_t *p)
{
    float ones[N];
    fill(ones, N, 1);
    push_ok(w1, h, 0, 1, ones);
    clock_ok(w1, h, 0); /* the shards here reach done 1; n2's get theirs by its answer */
    answer_fetches(t, g, 0, 2, 1);
    wait_for(p);
    ck_assert_msg(p->rc == 0, "%s", p->err);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(out[i], 2);
}

/* Reads waiting on shards here when the view gives them to n2: they go to n2 as fetches
 * (the pull is not failed), and complete with n2's answer; those on shards still here stay
 * and complete when the clock does. */
START_TEST(test_local_reads_move_to_new_primary)
{
    int o0 = 0, o1 = 0; /* (their addresses are the workers' owners) */
    ps_worker_t w0, w1;
    uint64_t h;
    float out[N];
    result_t p = {0};
    ps_table_t *t = pull_waiting("lm", &o0, &o1, &w0, &w1, &h, out, &p); /* waits for w1 */
    size_t waits = 0;
    for (const ps_wait_t *w = t->waits; w; w = w->next)
        waits++;
    ck_assert_uint_eq(waits, t->layout.shards);
    set_view(t, two, 2, 2);
    ps_retarget_view_changed(t);
    size_t remote = 0;
    for (uint32_t s = 0; s < t->layout.shards; s++)
        remote += (int)t->owner[s] != t->self_server;
    waits = 0;
    for (const ps_wait_t *w = t->waits; w; w = w->next) {
        ck_assert_int_eq((int)t->owner[w->shard], t->self_server);
        waits++;
    }
    ck_assert_uint_eq(waits, t->layout.shards - remote);
    ck_assert_uint_eq(fetches_of(t, "n2", 1), remote);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    pull_completes(t, "lm", &w1, h, out, &p);
}
END_TEST

/* A shard this daemon became the primary of but holds no state for yet (it is being copied
 * here): its updates and reads from the workers here wait (not refused), and go once the
 * state is here (the retry, or the next view). */
START_TEST(test_primary_not_ready_here)
{
    make_group("nr", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "nr", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "nr", &h);
    ps_shard_destroy(t->shards[0]); /* shard 0: primary here, state not here yet */
    t->shards[0] = NULL;
    float ones[N], out[N];
    fill(ones, N, 1);
    push_ok(&w0, h, 0, 1, ones);
    clock_ok(&w0, h, 0);
    ck_assert_ptr_nonnull(t->streams[0].head);
    ck_assert_uint_ne(t->streams[0].stalled_ns, 0);
    ck_assert_ptr_null(t->streams[1].head);
    result_t p = {0};
    pull_start(&w0, h, 1, out, &p);
    ck_assert_uint_eq(fetches_of(t, "local", 1), 1);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    /* the state arrives; the retry (every PS_STALLED_RETRY_MS while stalled) finds it */
    uint64_t first, elems;
    ps_layout_shard(&t->layout, 0, &first, &elems);
    t->shards[0] = ps_shard_create(elems, &t->spec.rule, &t->spec.sync, t->sources);
    ck_assert_ptr_nonnull(t->shards[0]);
    wait_for(&p);
    ck_assert_msg(p.rc == 0, "%s", p.err);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(out[i], 1);
    ck_assert_ptr_null(t->streams[0].head);
    ck_assert_uint_eq(ps_shard_done(t->shards[0]), 1);
    ck_assert_uint_eq(t->failovers, 1);
}
END_TEST

/* The server side may answer the reads kept on a shard it no longer primaries with -ESTALE
 * itself (fencing them at the swap): a slice answered so is asked of the new primary, the
 * pull does not fail. */
START_TEST(test_fenced_local_read_asked_again)
{
    int o0 = 0, o1 = 0; /* (their addresses are the workers' owners) */
    ps_worker_t w0, w1;
    uint64_t h;
    float out[N];
    result_t p = {0};
    ps_table_t *t = pull_waiting("fl", &o0, &o1, &w0, &w1, &h, out, &p);
    set_view(t, two, 2, 2);
    size_t fenced = 0;
    for (ps_wait_t **wp = &t->waits; *wp;) { /* as the server side's swap may do */
        ps_wait_t *w = *wp;
        if ((int)t->owner[w->shard] == t->self_server) {
            wp = &w->next;
            continue;
        }
        *wp = w->next;
        ps_pull_slice(w->pull, -ESTALE, "shard moved", w->out_index, NULL, 0, 0, 0, 0, 0);
        free(w);
        fenced++;
    }
    ck_assert_uint_gt(fenced, 0);
    ck_assert_uint_eq(fetches_of(t, "n2", 1), fenced);
    ps_retarget_view_changed(t);
    ck_assert_uint_eq(fetches_of(t, "n2", 1), fenced);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    pull_completes(t, "fl", &w1, h, out, &p);
}
END_TEST

/* ---- through the server side's view change (ps_repl.c) ----------------------------------
 * n2's link: sends to it are captured while it is up (the tap) and fail once it is down; its
 * lease is never alive here (a primary here never waits for it as a standby). */
static int n2_up;
static uint32_t n2_updates;

static int tap(void *arg, const char *node, const void *header, size_t header_len,
               const void *payload, size_t payload_len)
{
    (void)arg;
    (void)payload;
    (void)payload_len;
    if (strcmp(node, "n2") != 0 || !n2_up)
        return -EHOSTUNREACH;
    n2_updates += header_len > 4 && ((const uint8_t *)header)[4] == 4; /* MSG_UPDATE */
    return 0;
}

static int n2_alive(salusd_t *dd, const char *node)
{
    (void)dd;
    return strcmp(node, "local") == 0;
}

static void view_to(ps_table_t *t, uint64_t number, const char *servers, uint32_t r)
{
    ps_view_t v = {.number = number, .replicas = r};
    snprintf(v.servers, sizeof(v.servers), "%s", servers);
    ps_repl_view_changed(d.ps, t->uid, t->group, t->epoch, t->name, &v);
    ck_assert_uint_eq(t->view, number);
}

/* n2 joins as a primary of some shards (R 2: this daemon their standby); a clock's updates
 * go to it; it dies before acknowledging; the view without it makes this daemon their
 * primary (with its standby state), and the worker side sends the updates again: applied
 * once, the reads answered, nothing lost. */
START_TEST(test_failover_through_the_view)
{
    d.ps->send_tap = tap;
    d.ps->member_alive = n2_alive;
    n2_up = 1;
    n2_updates = 0;
    make_group("fo", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "fo", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "fo", &h);
    uint64_t v0 = t->view;
    view_to(t, v0 + 1, "local,n2", 2);
    ck_assert_uint_eq(t->replicas, 2);
    uint32_t sr = remote_shard(t);
    ck_assert_ptr_nonnull(t->shards[sr]); /* a standby here */
    float ones[N], out[N];
    fill(ones, N, 1);
    push_ok(&w0, h, 0, 1, ones);
    clock_ok(&w0, h, 0);
    uint32_t remote = 0;
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        if ((int)t->owner[s] == t->self_server) {
            ck_assert_ptr_null(t->streams[s].head); /* applied here, acknowledged */
            continue;
        }
        remote++;
        ck_assert_ptr_nonnull(t->streams[s].head);
        ck_assert_str_eq(t->streams[s].sent_to, "n2");
        ck_assert_uint_eq(t->streams[s].stalled_ns, 0);
    }
    ck_assert_uint_eq(n2_updates, remote);
    /* n2 had forwarded shard sr's update here before it died; the others' it had not */
    ck_assert_int_eq(ps_server_apply(t, sr, 0, t->streams[sr].head), 1);
    n2_up = 0;
    ps_retarget_node_down(d.ps, "n2");
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    /* its outage began when the update went, not when n2 was found down */
    ck_assert_uint_ne(t->streams[sr].first_sent_ns, 0);
    ck_assert_uint_eq(t->streams[sr].stalled_ns, t->streams[sr].first_sent_ns);
    ck_assert_uint_le(t->outage_ns, t->streams[sr].first_sent_ns);
    result_t p = {0};
    pull_start(&w0, h, 1, out, &p); /* n2's shards: kept for the next view */
    run_idle();
    ck_assert_int_eq(p.called, 0);

    view_to(t, v0 + 2, "local", 2); /* n2's lease ended: the view without it */
    for (uint32_t s = 0; s < t->layout.shards; s++) {
        ck_assert_ptr_null(t->streams[s].head);
        ck_assert_uint_eq(ps_shard_done(t->shards[s]), 1);
        ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 1);
    }
    wait_for(&p);
    ck_assert_msg(p.rc == 0, "%s", p.err);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(out[i], 1);
    ck_assert_uint_eq(t->failovers, 1);
    push_ok(&w0, h, 1, 2, ones);
    clock_ok(&w0, h, 1);
    ck_assert_float_eq(ps_shard_values(t->shards[sr])[0], 2);
}
END_TEST

/* What went to n2 (the tap2): the messages' types, and the rc of the last pull reply. */
static uint32_t sent_opens, sent_replies;
static int32_t reply_rc;

static int tap2(void *arg, const char *node, const void *header, size_t header_len,
                const void *payload, size_t payload_len)
{
    (void)arg;
    (void)payload;
    (void)payload_len;
    const uint8_t *h = header;
    if (strcmp(node, "n2") != 0 || header_len < 5)
        return -EHOSTUNREACH;
    sent_opens += h[4] == 1; /* MSG_OPEN */
    if (h[4] == 7) {         /* MSG_PULL_REPLY: after the identity, u64 req, i32 rc */
        size_t at = 4 + 1 + 4 + 8;
        at += 1 + h[at];
        at += 1 + h[at];
        at += 8;
        uint32_t rc = 0;
        for (int i = 0; i < 4 && at + 4 <= header_len; i++)
            rc |= (uint32_t)h[at + (size_t)i] << (8 * i);
        reply_rc = (int32_t)rc;
        sent_replies++;
    }
    return 0;
}

/* A server restarted within its lease has lost its tables; the open that gives one back can
 * be lost (sent before its daemon took this node's messages). A read of a table it does not
 * have is answered -ESTALE (not dropped: the reader asked again forever), and the reader, to
 * which it is the shard's primary, sends it the open again. */
START_TEST(test_read_of_a_lost_table_refused)
{
    d.ps->send_tap = tap2;
    d.ps->member_alive = n2_alive;
    sent_opens = sent_replies = 0;
    reply_rc = 0;
    /* the server side: a read of a table not here */
    msg_t m;
    msg_begin(&m, 6, "lt"); /* MSG_PULL */
    msg_put(&m, 77, 8);     /* req */
    msg_put(&m, 0, 4);      /* shard */
    msg_put(&m, 1, 8);      /* min_done */
    msg_put(&m, 0, 8);      /* first */
    msg_put(&m, 4, 8);      /* n */
    ps_msg_recv(d.ps, "n2", m.b, m.len, NULL, 0);
    ck_assert_uint_eq(sent_replies, 1);
    ck_assert_int_eq(reply_rc, -ESTALE);
}
END_TEST

START_TEST(test_refused_read_reopens)
{
    d.ps->send_tap = tap2;
    d.ps->member_alive = n2_alive;
    /* the reader's side: n2 is the primary of some shards of its view and answers -ESTALE */
    make_group("lt", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "lt", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "lt", &h);
    view_to(t, t->view + 1, "local,n2", 2);
    sent_opens = 0;
    float out[N];
    result_t p = {0};
    pull_start(&w0, h, 0, out, &p);
    ck_assert_uint_gt(fetches_of(t, "n2", 0), 0);
    answer_fetches(t, "lt", -ESTALE, 0, 0);
    ck_assert_uint_gt(sent_opens, 0);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    answer_fetches(t, "lt", 0, 3, 0); /* n2 serves it again */
    wait_for(&p);
    ck_assert_int_eq(p.rc, 0);
}
END_TEST

/* Opens sent to n2 (a tap that takes every message to n2; n2's lease is alive). */
static uint32_t n2_opens;

static int tap_opens(void *arg, const char *node, const void *header, size_t header_len,
                     const void *payload, size_t payload_len)
{
    (void)arg;
    (void)payload;
    (void)payload_len;
    if (strcmp(node, "n2") != 0)
        return -EHOSTUNREACH;
    n2_opens += header_len > 4 && ((const uint8_t *)header)[4] == 1; /* MSG_OPEN */
    return 0;
}

static int every_alive(salusd_t *dd, const char *node)
{
    (void)dd;
    (void)node;
    return 1;
}

static void open_answer(const char *group, uint64_t req, int rc)
{
    msg_t m;
    msg_begin(&m, rc == 0 ? 2 : 3, group); /* MSG_OPEN_OK, MSG_OPEN_ERR */
    msg_put(&m, req, 8);
    if (rc < 0) {
        msg_put(&m, (uint64_t)(uint32_t)rc, 4);
        m.b[m.len++] = 2;
        m.b[m.len++] = 'n';
        m.b[m.len++] = 'o';
    }
    ps_msg_recv(d.ps, "n2", m.b, m.len, NULL, 0);
}

/* The repl timer's turn a little more than `ms` later. */
static void repl_turn_after(uint64_t ms)
{
    harness_skew_ns += ms * 1000000ull + 1000000ull;
    ps_repl_check(d.ps);
}

/* A server restarted within its lease has lost its tables, and the open that gives one back
 * can be lost (sent before its daemon took this node's messages). Answered -ESTALE, a read or
 * update sends it again; but a server that is only a standby of every shard it holds gets
 * neither, and refuses the copies and forwards of its primaries, which wait for it without a
 * bound (its lease is alive): the ranks stalled, silently. So an open to a server new in the
 * view or reachable again is sent again until the server answers it, OK or not, and no longer
 * once it left the view. */
START_TEST(test_lost_open_sent_again)
{
    d.ps->send_tap = tap_opens;
    d.ps->member_alive = every_alive;
    n2_opens = 0;
    make_group("ro", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "ro", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "ro", &h);
    uint64_t v0 = t->view;
    view_to(t, v0 + 1, "local,n2", 2); /* n2 joins: the open goes to it */
    ck_assert_uint_eq(n2_opens, 1);
    repl_turn_after(0);
    ck_assert_uint_eq(n2_opens, 1); /* (not due yet) */
    repl_turn_after(500);
    ck_assert_uint_eq(n2_opens, 2); /* not answered (lost): sent again */
    repl_turn_after(500);
    ck_assert_uint_eq(n2_opens, 3);
    open_answer("ro", t->open_req, 0);
    repl_turn_after(500);
    repl_turn_after(500);
    ck_assert_uint_eq(n2_opens, 3); /* answered: no more */

    /* n2's daemon restarted within its lease: reachable again, the open goes again */
    ps_repl_peer_up(d.ps, "n2");
    ck_assert_uint_eq(n2_opens, 4);
    repl_turn_after(500);
    ck_assert_uint_eq(n2_opens, 5);
    open_answer("ro", t->open_req, -EDQUOT); /* refused: an answer too (logged) */
    repl_turn_after(500);
    ck_assert_uint_eq(n2_opens, 5);

    /* not answered, then n2 leaves the view: nothing more to send it */
    ps_repl_peer_up(d.ps, "n2");
    ck_assert_uint_eq(n2_opens, 6);
    view_to(t, v0 + 2, "local", 2);
    repl_turn_after(500);
    repl_turn_after(500);
    ck_assert_uint_eq(n2_opens, 6);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
}
END_TEST

/* n2 takes every copy on its way to it (MSG_SHARD_STATE_ACK, rc 0); how many there were. */
static uint32_t ack_copies_to_n2(const char *group)
{
    uint64_t reqs[256];
    uint32_t shards[256], k = 0;
    for (const ps_copy_t *c = d.ps->copies; c && k < 256; c = c->next)
        if (strcmp(c->node, "n2") == 0) {
            reqs[k] = c->req;
            shards[k++] = c->shard;
        }
    for (uint32_t i = 0; i < k; i++) {
        msg_t m;
        msg_begin(&m, 19, group); /* MSG_SHARD_STATE_ACK */
        msg_put(&m, shards[i], 4);
        msg_put(&m, reqs[i], 8);
        msg_put(&m, 0, 4);
        ps_msg_recv(d.ps, "n2", m.b, m.len, NULL, 0);
    }
    return k;
}

/* This daemon the primary, n2 a live standby (restarted within its lease: what was sent to
 * it before its daemon took this node's messages was dropped there). A forward n2 never
 * acknowledged is not left to the source's resend (which backs off to 32 s): past
 * PS_FORWARD_WAIT_MS n2 gets the shard's state, whose acknowledgement stands for it. */
START_TEST(test_lost_forward_covered_by_a_copy)
{
    d.ps->send_tap = tap_opens;
    d.ps->member_alive = every_alive;
    make_group("lf", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "lf", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "lf", &h);
    view_to(t, t->view + 1, "local,n2", 2);
    uint32_t sl = local_shard(t);
    ck_assert_uint_gt(ack_copies_to_n2("lf"), 0); /* n2 took the state it joined with */
    ck_assert_ptr_null(d.ps->copies);
    float ones[N];
    fill(ones, N, 1);
    push_ok(&w0, h, 0, 1, ones);
    clock_ok(&w0, h, 0);
    /* applied here, forwarded to n2 (lost): not acknowledged, kept */
    ck_assert_uint_eq(ps_shard_done(t->shards[sl]), 1);
    ck_assert_ptr_nonnull(t->streams[sl].head);
    ck_assert_ptr_nonnull(t->forwards);
    repl_turn_after(0);
    ck_assert_ptr_null(d.ps->copies); /* (not yet) */
    repl_turn_after(PS_FORWARD_WAIT_MS);
    ck_assert_ptr_nonnull(d.ps->copies); /* n2 gets the state */
    ck_assert_uint_gt(ack_copies_to_n2("lf"), 0);
    run_idle();
    for (uint32_t s = 0; s < t->layout.shards; s++)
        if ((int)t->owner[s] == t->self_server)
            ck_assert_ptr_null(t->streams[s].head); /* acknowledged */
    ck_assert_ptr_null(t->forwards);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
}
END_TEST

/* The bound is for what waits for a view: a read its (reachable) primary only keeps, as a
 * primary keeps reads beyond its sources' clocks, may wait past it; one answered -ESTALE
 * since the last view may not. */
START_TEST(test_kept_read_not_bounded)
{
    make_group("kb", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "kb", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "kb", &h);
    ps_fetch_t *f = calloc(1, sizeof(*f)); /* re-asked of this daemon after a view change */
    ck_assert_ptr_nonnull(f);
    f->req = 7;
    snprintf(f->node, sizeof(f->node), "local");
    f->table = t;
    f->n = 1;
    f->sent_ns = salusd_now_ns();
    f->stalled_ns = f->sent_ns - ps_retarget_limit_ns(d.ps) - 1000000000ull;
    t->outage_ns = f->stalled_ns;
    f->next = d.ps->fetches;
    d.ps->fetches = f;
    ps_retarget_retry(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    f->refused = 1;
    ps_retarget_retry(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_FAILED);
    ck_assert_msg(strstr(t->error_text, "answered its read") != NULL, "%s", t->error_text);
    ck_assert_ptr_null(d.ps->fetches);
}
END_TEST

/* A read its primary kept past the bound (BSP: waiting for a slow rank's push), whose server
 * then dies: the wait for a view counts from one lease TTL before the server was found down at
 * the earliest, not from when the read was asked, so the table does not fail at once; past
 * the bound from then it does. */
START_TEST(test_kept_read_of_a_dead_server_gets_the_bound)
{
    make_group("kd", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "kd", &o0);
    uint64_t h;
    ps_table_t *t = open_table(&w0, "kd", &h);
    set_view(t, two, 2, 2);
    uint64_t limit = ps_retarget_limit_ns(d.ps);
    ps_fetch_t *f = calloc(1, sizeof(*f)); /* asked of n2 long ago, kept there */
    ck_assert_ptr_nonnull(f);
    f->req = 9;
    snprintf(f->node, sizeof(f->node), "n2");
    f->table = t;
    f->shard = remote_shard(t);
    f->n = 1;
    f->sent_ns = f->asked_ns = salusd_now_ns() - limit - 2000000000ull;
    f->next = d.ps->fetches;
    d.ps->fetches = f;
    ps_retarget_node_down(d.ps, "n2");
    ck_assert_uint_ne(f->stalled_ns, 0);
    ps_retarget_check(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    harness_skew_ns += limit;
    ps_retarget_check(d.ps);
    ck_assert_int_eq(t->state, PS_TABLE_FAILED);
    ck_assert_msg(strstr(t->error_text, "answered its read") != NULL &&
                      strstr(t->error_text, "server n2 is unreachable") != NULL,
                  "%s", t->error_text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ps_worker");
    TCase *tc = tcase_create("fail-over");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_view_change_resends_heads);
    tcase_add_test(tc, test_estale_kept_then_bounded);
    tcase_add_test(tc, test_node_down_waits_when_replicated);
    tcase_add_test(tc, test_pull_reply_estale_kept);
    tcase_add_test(tc, test_local_reads_move_to_new_primary);
    tcase_add_test(tc, test_primary_not_ready_here);
    tcase_add_test(tc, test_fenced_local_read_asked_again);
    tcase_add_test(tc, test_failover_through_the_view);
    tcase_add_test(tc, test_kept_read_not_bounded);
    tcase_add_test(tc, test_kept_read_of_a_dead_server_gets_the_bound);
    tcase_add_test(tc, test_read_of_a_lost_table_refused);
    tcase_add_test(tc, test_refused_read_reopens);
    tcase_add_test(tc, test_lost_open_sent_again);
    tcase_add_test(tc, test_lost_forward_covered_by_a_copy);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
