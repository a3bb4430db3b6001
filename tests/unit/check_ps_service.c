/* Unit tests of the parameter-server service (salusd/ps.h) on a single node (no cluster): a
 * real salusd_t with its event loop, groups made as the daemon makes them (groups_join), and
 * the service driven through ps.h only; callbacks are awaited by running the loop until they
 * came, with a deadline. */
#include "groups.h"
#include "ps-internal.h" /* ps_msg_recv: messages from other daemons */
#include "ps.h"
#include "ps_cluster.h" /* ps_view_t (replicas) */
#include "ps_net.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <math.h>
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

/* Ranks 0 .. world-1 of group `name` of uid as jobs[first ..]; the group's id. */
static uint64_t make_group(const char *name, uid_t uid, uint32_t world, launch_sync_t sync,
                           uint32_t staleness, int first)
{
    return harness_group(name, uid, world, first,
                         (groups_fields_t){.sync = sync, .staleness = staleness});
}

static ps_table_spec_t spec_of(const char *name, uint64_t count, const char *rule,
                               const char *sync)
{
    ps_table_spec_t s;
    memset(&s, 0, sizeof(s));
    char err[128];
    snprintf(s.name, sizeof(s.name), "%s", name);
    s.count = count;
    ck_assert_int_eq(ps_rule_parse(rule, &s.rule, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_sync_parse(sync, &s.sync, err, sizeof(err)), 0);
    return s;
}

static uint64_t open_ok(const ps_worker_t *w, const ps_table_spec_t *spec)
{
    uint64_t handle = 0;
    result_t r = {0};
    char err[256] = "";
    ck_assert_int_eq(ps_open(&d, w, spec, &handle, on_done, &r, err, sizeof(err)), 0);
    ck_assert_int_eq(r.called, 0); /* never from inside the call */
    wait_for(&r);
    ck_assert_msg(r.rc == 0, "open: %d %s", r.rc, r.err);
    ck_assert_uint_ne(handle, 0);
    ck_assert_uint_eq(ps_table_count(&d, w, handle), spec->count);
    return handle;
}

static void push_ok(const ps_worker_t *w, uint64_t h, uint64_t clock, uint64_t seq,
                    uint64_t offset, uint64_t n, const float *values)
{
    ps_push_id_t id = {.rank = w->rank, .clock = clock, .seq = seq};
    result_t r = {0};
    char err[256] = "";
    int rc = ps_push(&d, w, h, &id, offset, n, NULL, values, on_done, &r, err, sizeof(err));
    ck_assert_msg(rc == 0, "push: %d %s", rc, err);
    wait_for(&r);
    ck_assert_int_eq(r.rc, 0);
}

static void clock_ok(const ps_worker_t *w, uint64_t h, uint64_t clock)
{
    result_t r = {0};
    char err[256] = "";
    int rc = ps_clock(&d, w, h, clock, on_done, &r, err, sizeof(err));
    ck_assert_msg(rc == 0, "clock: %d %s", rc, err);
    wait_for(&r);
    ck_assert_int_eq(r.rc, 0);
}

/* Starts a pull that the service takes (its callback comes later, never from inside). */
static void pull_start(const ps_worker_t *w, uint64_t h, uint64_t clock, uint64_t offset,
                       uint64_t n, float *out, result_t *r)
{
    char err[256] = "";
    int rc = ps_pull(&d, w, h, clock, offset, n, out, on_pull, r, err, sizeof(err));
    ck_assert_msg(rc == 0, "pull: %d %s", rc, err);
    ck_assert_int_eq(r->called, 0);
}

static void fill(float *v, uint64_t n, float x)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = x;
}

static void assert_all(const float *v, uint64_t n, float x)
{
    for (uint64_t i = 0; i < n; i++)
        ck_assert_msg(v[i] == x, "element %llu is %g, not %g", (unsigned long long)i,
                      (double)v[i], (double)x);
}

#define N 100

/* BSP with 2 local workers: a read at clock c sees exactly the clocks before c. */
START_TEST(test_bsp_exact_clocks)
{
    uint64_t gid = make_group("bsp", 1000, 2, LAUNCH_SYNC_BSP, 0, 0);
    ck_assert_uint_ne(gid, 0);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "bsp", &o0), w1 = worker_of(1, "bsp", &o1);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    ck_assert_uint_eq(open_ok(&w1, &spec), h); /* the node's second worker: the same table */

    float ones[N], twos[N], fives[N], out[N];
    fill(ones, N, 1);
    fill(twos, N, 2);
    fill(fives, N, 5);
    fill(out, N, -1);
    result_t p = {0};
    /* clock 0 reads the initial zeros at once */
    pull_start(&w0, h, 0, 0, N, out, &p);
    wait_for(&p);
    ck_assert_int_eq(p.rc, 0);
    assert_all(out, N, 0);
    ck_assert_int_eq(p.read.waited, 0);

    push_ok(&w0, h, 0, 1, 0, N, ones);
    push_ok(&w1, h, 0, 1, 0, 50, twos);
    push_ok(&w1, h, 0, 2, 50, 50, twos);
    clock_ok(&w0, h, 0);
    /* w0 at clock 1 must wait for w1's clock 0 */
    memset(&p, 0, sizeof(p));
    pull_start(&w0, h, 1, 0, N, out, &p);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    clock_ok(&w1, h, 0);
    wait_for(&p);
    ck_assert_int_eq(p.rc, 0);
    assert_all(out, N, 3);
    ck_assert_int_eq(p.read.waited, 1);
    ck_assert_uint_eq(p.read.done, 1);
    ck_assert_uint_eq(p.read.done_at_request, 0);
    ck_assert_uint_eq(p.read.clock, 1);

    /* w1 pushes for clock 1 and clocks it: w0's read at clock 1 still sees clock 0 only */
    push_ok(&w1, h, 1, 3, 0, N, fives);
    clock_ok(&w1, h, 1);
    memset(&p, 0, sizeof(p));
    pull_start(&w0, h, 1, 0, N, out, &p);
    wait_for(&p);
    assert_all(out, N, 3);
    ck_assert_uint_eq(p.read.done, 1);
    /* once w0 closes clock 1 too, a read at clock 2 sees both */
    clock_ok(&w0, h, 1);
    memset(&p, 0, sizeof(p));
    pull_start(&w1, h, 2, 10, 5, out, &p);
    wait_for(&p);
    assert_all(out, 5, 8);
    ck_assert_uint_eq(p.read.done, 2);

    ps_sample_t s;
    ck_assert_int_eq(ps_report_sample(&d, &s), 0);
    ck_assert_uint_eq(s.tables, 1);
    ck_assert_uint_ge(s.shards, 1);
    ck_assert_uint_ge(s.bytes, N * sizeof(float));
    ck_assert_uint_eq(s.pushes, 4);
    ck_assert_uint_eq(s.pushes_duplicate, 0);
    ck_assert_uint_eq(s.pulls, 4);
    ck_assert_uint_eq(s.staleness_waits, 1);
    ck_assert_uint_eq(s.refused, 0);
    ck_assert_uint_eq(s.updates_applied, s.updates_sent);
}
END_TEST

/* SSP s=1: a read at clock c waits exactly when done < c - 1. */
START_TEST(test_ssp_bound)
{
    make_group("ssp", 1000, 2, LAUNCH_SYNC_SSP, 1, 0);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "ssp", &o0), w1 = worker_of(1, "ssp", &o1);
    ps_table_spec_t spec = spec_of("w", N, "sgd:0.5", "ssp:1");
    uint64_t h = open_ok(&w0, &spec);
    float g[N], out[N];
    fill(g, N, 2);
    /* w0 runs ahead: clocks 0 and 1 while w1 stays at 0 */
    for (uint64_t c = 0; c < 2; c++) {
        push_ok(&w0, h, c, c + 1, 0, N, g);
        clock_ok(&w0, h, c);
    }
    /* at clock 1: min done 0: no wait (reads the zeros) */
    result_t p = {0};
    pull_start(&w0, h, 1, 0, N, out, &p);
    wait_for(&p);
    ck_assert_int_eq(p.read.waited, 0);
    assert_all(out, N, 0);
    /* at clock 2: min done 1 > done 0: waits until w1 closes clock 0 */
    memset(&p, 0, sizeof(p));
    pull_start(&w0, h, 2, 0, N, out, &p);
    run_idle();
    ck_assert_int_eq(p.called, 0);
    push_ok(&w1, h, 0, 1, 0, N, g);
    clock_ok(&w1, h, 0);
    wait_for(&p);
    ck_assert_int_eq(p.rc, 0);
    ck_assert_int_eq(p.read.waited, 1);
    ck_assert_uint_eq(p.read.done_at_request, 0);
    ck_assert_uint_ge(p.read.done, 1);
    assert_all(out, N, -0.5f * 4); /* sgd: 0 - 0.5 * (2 + 2) */
}
END_TEST

/* ASP: pushes apply at once, reads never wait. */
START_TEST(test_asp_never_waits)
{
    make_group("asp", 1000, 2, LAUNCH_SYNC_ASP, 0, 0);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "asp", &o0), w1 = worker_of(1, "asp", &o1);
    ps_table_spec_t spec = spec_of("w", N, "add", "asp");
    uint64_t h = open_ok(&w0, &spec);
    float g[N], out[N];
    fill(g, N, 1);
    char err[256];
    for (uint64_t c = 0; c < 5; c++) { /* w0 far ahead of w1 */
        push_ok(&w0, h, c, c + 1, 0, N, g);
        clock_ok(&w0, h, c);
        result_t p = {0};
        ck_assert_int_eq(ps_pull(&d, &w0, h, c + 1, 0, N, out, on_pull, &p, err, sizeof(err)),
                         0);
        wait_for(&p);
        ck_assert_int_eq(p.rc, 0);
        ck_assert_int_eq(p.read.waited, 0);
        assert_all(out, N, (float)(c + 1)); /* its own pushes are there already */
    }
    /* keyed push from w1 */
    uint64_t keys[2] = {3, 97};
    float kv[2] = {10, 20};
    ps_push_id_t id = {.rank = 1, .clock = 0, .seq = 1};
    result_t r = {0};
    ck_assert_int_eq(ps_push(&d, &w1, h, &id, 0, 2, keys, kv, on_done, &r, err, sizeof(err)), 0);
    wait_for(&r);
    result_t p = {0};
    pull_start(&w1, h, 0, 0, N, out, &p);
    wait_for(&p);
    ck_assert_float_eq(out[3], 15);
    ck_assert_float_eq(out[97], 25);
    ck_assert_float_eq(out[4], 5);
    ck_assert_uint_eq(p.read.done, 0); /* w1 has closed no clock yet */
    /* done counts the clocks every worker closed, under ASP too */
    clock_ok(&w1, h, 0);
    clock_ok(&w1, h, 1);
    memset(&p, 0, sizeof(p));
    pull_start(&w0, h, 5, 0, N, out, &p);
    wait_for(&p);
    ck_assert_uint_eq(p.read.done, 2);
    ck_assert_int_eq(p.read.waited, 0);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.staleness_waits, 0);
}
END_TEST

/* A retried push (same id) is taken once. */
START_TEST(test_duplicate_push_once)
{
    make_group("dup", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "dup", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    float g[N], out[N];
    fill(g, N, 1);
    push_ok(&w0, h, 0, 1, 0, N, g);
    /* the retry: done(1) (a duplicate), not added; and each call hears about itself alone: a
     * new push whose done runs after another's duplicate was counted is done(0) */
    ps_push_id_t again = {.rank = 0, .clock = 0, .seq = 1}, fresh = {.rank = 0, .clock = 0, .seq = 2};
    result_t r_fresh = {0}, r_again = {0};
    char perr[256] = "";
    float half[N];
    fill(half, N, 0.5f);
    ck_assert_int_eq(ps_push(&d, &w0, h, &fresh, 0, N, NULL, half, on_done, &r_fresh, perr,
                             sizeof(perr)), 0);
    ck_assert_int_eq(ps_push(&d, &w0, h, &again, 0, N, NULL, g, on_done, &r_again, perr,
                             sizeof(perr)), 0);
    wait_for(&r_fresh);
    wait_for(&r_again);
    ck_assert_int_eq(r_fresh.rc, 0);
    ck_assert_int_eq(r_again.rc, 1);
    clock_ok(&w0, h, 0);
    clock_ok(&w0, h, 0);            /* a repeated clock is harmless too */
    result_t p = {0};
    pull_start(&w0, h, 1, 0, N, out, &p);
    wait_for(&p);
    assert_all(out, N, 1.5f);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.pushes, 2);
    ck_assert_uint_eq(s.pushes_duplicate, 1);
}
END_TEST

/* Every bad input gets an error, no callback, and changes nothing. */
START_TEST(test_bad_input_refused)
{
    make_group("bad", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    make_group("other", 1000, 1, LAUNCH_SYNC_BSP, 0, 1);
    make_group("bad", 2000, 1, LAUNCH_SYNC_BSP, 0, 2); /* another user's group of that name */
    int o0, o1, o2;
    ps_worker_t w0 = worker_of(0, "bad", &o0), wo = worker_of(1, "other", &o1),
                wu = worker_of(2, "bad", &o2);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    float g[N], out[N];
    fill(g, N, 1);
    char err[256];
    result_t r = {0};
    ps_push_id_t id = {.rank = 0, .clock = 0, .seq = 1};
    /* a push of the wrong length (past the end) */
    ck_assert_int_eq(ps_push(&d, &w0, h, &id, 50, 51, NULL, g, on_done, &r, err, sizeof(err)),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "outside table 'w'"));
    /* a key past the end, a value that is not finite */
    uint64_t keys[2] = {1, N};
    ck_assert_int_eq(ps_push(&d, &w0, h, &id, 0, 2, keys, g, on_done, &r, err, sizeof(err)),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "key 100"));
    float nan_values[2] = {1, NAN};
    ck_assert_int_eq(
        ps_push(&d, &w0, h, &id, 0, 2, NULL, nan_values, on_done, &r, err, sizeof(err)),
        -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not finite"));
    /* a push for a clock the worker is not at, an id of another rank */
    ps_push_id_t future = {.rank = 0, .clock = 3, .seq = 1};
    ck_assert_int_eq(
        ps_push(&d, &w0, h, &future, 0, N, NULL, g, on_done, &r, err, sizeof(err)), -EINVAL);
    ps_push_id_t other_rank = {.rank = 5, .clock = 0, .seq = 1};
    ck_assert_int_eq(
        ps_push(&d, &w0, h, &other_rank, 0, N, NULL, g, on_done, &r, err, sizeof(err)),
        -EINVAL);
    /* an unknown table */
    ck_assert_int_eq(ps_push(&d, &w0, h + 99, &id, 0, N, NULL, g, on_done, &r, err, sizeof(err)),
                     -ENOENT);
    ck_assert_int_eq(ps_pull(&d, &w0, h + 99, 0, 0, N, out, on_pull, &r, err, sizeof(err)),
                     -ENOENT);
    /* a worker of another group, of another user (a group of the same name) */
    ps_push_id_t id1 = {.rank = 0, .clock = 0, .seq = 1};
    ck_assert_int_eq(ps_push(&d, &wo, h, &id1, 0, N, NULL, g, on_done, &r, err, sizeof(err)),
                     -ENOENT);
    ck_assert_int_eq(ps_push(&d, &wu, h, &id1, 0, N, NULL, g, on_done, &r, err, sizeof(err)),
                     -ENOENT);
    ck_assert_int_eq(ps_pull(&d, &wu, h, 0, 0, N, out, on_pull, &r, err, sizeof(err)), -ENOENT);
    ck_assert_int_eq(ps_clock(&d, &wo, h, 0, on_done, &r, err, sizeof(err)), -ENOENT);
    ck_assert_uint_eq(ps_table_count(&d, &wu, h), 0);
    /* a pull outside the table, a clock that is not the worker's */
    ck_assert_int_eq(ps_pull(&d, &w0, h, 0, N, 1, out, on_pull, &r, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(ps_pull(&d, &w0, h, 0, 0, 0, out, on_pull, &r, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(ps_clock(&d, &w0, h, 4, on_done, &r, err, sizeof(err)), -EINVAL);
    /* bad specs: name, count, the table reopened with another size or rule */
    uint64_t h2 = 0;
    ps_table_spec_t bad = spec_of("no/slash", N, "add", "bsp");
    ck_assert_int_eq(ps_open(&d, &w0, &bad, &h2, on_done, &r, err, sizeof(err)), -EINVAL);
    bad = spec_of("w", 0, "add", "bsp");
    ck_assert_int_eq(ps_open(&d, &w0, &bad, &h2, on_done, &r, err, sizeof(err)), -EINVAL);
    bad = spec_of("w", (4ull << 30) / 4 + 1, "add", "bsp");
    ck_assert_int_eq(ps_open(&d, &w0, &bad, &h2, on_done, &r, err, sizeof(err)), -EINVAL);
    bad = spec_of("w", 2 * N, "add", "bsp");
    ck_assert_int_eq(ps_open(&d, &w0, &bad, &h2, on_done, &r, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "table 'w' exists with 100 elements, not 200");
    bad = spec_of("w", N, "sgd:0.1", "bsp");
    ck_assert_int_eq(ps_open(&d, &w0, &bad, &h2, on_done, &r, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "rule"));
    /* a worker that is not in a group */
    ps_worker_t none = {.uid = 1000, .owner = &o0};
    ck_assert_int_eq(ps_open(&d, &none, &spec, &h2, on_done, &r, err, sizeof(err)), -EPERM);
    run_idle();
    ck_assert_int_eq(r.called, 0);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.refused, 20);
    ck_assert_uint_eq(s.pushes, 0);
    ck_assert_uint_eq(s.tables, 1);
    /* nothing changed: the worker is still at clock 0 with nothing pushed */
    push_ok(&w0, h, 0, 1, 0, N, g);
    clock_ok(&w0, h, 0);
    result_t p = {0};
    pull_start(&w0, h, 1, 0, N, out, &p);
    wait_for(&p);
    assert_all(out, N, 1);
}
END_TEST

/* A table over the user's quota is refused; nothing is kept; a smaller one fits. */
START_TEST(test_quota_refused)
{
    d.config.ps_user_bytes = 1000;
    make_group("q", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "q", &o0);
    ps_table_spec_t big = spec_of("big", 251, "add", "bsp"); /* 1004 bytes */
    uint64_t h = 0;
    result_t r = {0};
    char err[256];
    ck_assert_int_eq(ps_open(&d, &w0, &big, &h, on_done, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_int_eq(r.rc, -EDQUOT);
    ck_assert_ptr_nonnull(strstr(r.err, "ps-user-bytes"));
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.tables, 0);
    ck_assert_uint_eq(s.bytes, 0);
    ck_assert_uint_eq(s.refused, 1);
    ps_table_spec_t a = spec_of("a", 200, "add", "bsp"), b = spec_of("b", 51, "add", "bsp");
    open_ok(&w0, &a); /* 800 bytes */
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(ps_open(&d, &w0, &b, &h, on_done, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_int_eq(r.rc, -EDQUOT); /* 800 + 204 > 1000 */
    b.count = 50;
    uint64_t hb = open_ok(&w0, &b); /* 800 + 200 */
    /* a clock's sum is counted too: a push that would start one over the quota is refused,
     * and nothing is held for it */
    float v[50];
    fill(v, 50, 1.0f);
    ps_push_id_t id = {.rank = 0, .clock = 0, .seq = 1};
    ps_report_sample(&d, &s);
    uint64_t held = s.bytes;
    memset(&r, 0, sizeof(r));
    int rc = ps_push(&d, &w0, hb, &id, 0, 50, NULL, v, on_done, &r, err, sizeof(err));
    rc = harness_outcome(rc, &r, err, sizeof(err));
    ck_assert_int_eq(rc, -EDQUOT);
    ck_assert_msg(strstr(err, "ps-user-bytes") != NULL, "%s", err);
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.bytes, held);
    /* room for the sum (its values, bits and the list of clocks): taken */
    d.config.ps_user_bytes = 1000 + 50 * sizeof(float) + 7 + 4 * 64;
    push_ok(&w0, hb, 0, 1, 0, 50, v);
}
END_TEST

/* A requester that went away gets no callback; its buffer is never written again. */
START_TEST(test_forget_owner_pending_pull)
{
    make_group("f", 1000, 2, LAUNCH_SYNC_BSP, 0, 0);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "f", &o0), w1 = worker_of(1, "f", &o1);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    float g[N];
    fill(g, N, 1);
    float *out = malloc(N * sizeof(float));
    clock_ok(&w0, h, 0);
    result_t p = {0}, q = {0};
    char err[256];
    pull_start(&w0, h, 1, 0, N, out, &p);
    /* and a push whose callback is queued but not run yet */
    ps_push_id_t id = {.rank = 0, .clock = 1, .seq = 1};
    ck_assert_int_eq(ps_push(&d, &w0, h, &id, 0, N, NULL, g, on_done, &q, err, sizeof(err)), 0);
    ps_forget_owner(&d, &o0);
    free(out); /* ASan: a later write into it would be caught */
    push_ok(&w1, h, 0, 1, 0, N, g);
    clock_ok(&w1, h, 0); /* the pull's bound is reached now */
    run_idle();
    ck_assert_int_eq(p.called, 0);
    ck_assert_int_eq(q.called, 0);
    /* the other worker's reads go on */
    float out1[N];
    result_t p1 = {0};
    pull_start(&w1, h, 1, 0, N, out1, &p1);
    wait_for(&p1);
    assert_all(out1, N, 1);
}
END_TEST

/* salusctl groups' view and the end of a group. */
START_TEST(test_view_and_group_over)
{
    uint64_t gid = make_group("v", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "v", &o0);
    ps_table_spec_t spec = spec_of("emb.1", 1000, "sgd:0.25", "ssp:2");
    open_ok(&w0, &spec);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ps_report_group_tables(&d, gid, &pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    ck_assert_int_eq(msgpack_unpack_next(&u, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(u.data.via.array.size, 1);
    const msgpack_object *t = &u.data.via.array.ptr[0];
    uint64_t count = 0, here = 0, shards = 0, epoch = 0;
    ck_assert(proto_get_uint(t, "count", &count) == 0 && count == 1000);
    ck_assert(proto_get_uint(t, "shards_here", &here) == 0);
    ck_assert(proto_get_uint(t, "shards", &shards) == 0 && shards == here && here >= 1);
    ck_assert(proto_get_uint(t, "epoch", &epoch) == 0 && epoch == 1);
    const msgpack_object *rule = proto_get(t, "rule");
    ck_assert(rule && rule->type == MSGPACK_OBJECT_STR &&
              strncmp(rule->via.str.ptr, "sgd:0.25", rule->via.str.size) == 0);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);

    ps_group_over(&d, gid);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.tables, 0);
    ck_assert_uint_eq(s.bytes, 0);
    char err[256];
    result_t r = {0};
    float out[4];
    ck_assert_int_eq(ps_pull(&d, &w0, 1, 0, 0, 4, out, on_pull, &r, err, sizeof(err)), -ENOENT);
}
END_TEST


/* ---- messages from other daemons (ps_msg.c): every field untrusted ----------------------- */
typedef struct msg_s {
    uint8_t b[PS_NET_MAX_HEADER];
    size_t len;
} msg_t;

static void msg_put(msg_t *m, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        m->b[m->len++] = (uint8_t)(v >> (8 * i));
}

static void msg_str(msg_t *m, const char *s)
{
    m->b[m->len++] = (uint8_t)strlen(s);
    memcpy(m->b + m->len, s, strlen(s));
    m->len += strlen(s);
}

/* The common part: magic, type, uid, epoch, group, table. */
static void msg_begin(msg_t *m, int type, uid_t uid, uint64_t epoch, const char *group,
                      const char *table)
{
    m->len = 0;
    msg_put(m, 0x50534d31u, 4);
    msg_put(m, (uint64_t)type, 1);
    msg_put(m, uid, 4);
    msg_put(m, epoch, 8);
    msg_str(m, group);
    msg_str(m, table);
}

/* An update (type 4) of shard 0 from source `source`: n values from offset 0. */
static void msg_update(msg_t *m, uid_t uid, const char *group, uint32_t source, uint64_t seq,
                       uint64_t n)
{
    msg_begin(m, 4, uid, 1, group, "w");
    msg_put(m, 0, 4);      /* shard */
    msg_put(m, source, 4);
    msg_put(m, seq, 8);
    msg_put(m, 0, 8);      /* clock */
    msg_put(m, 0, 1);      /* close */
    msg_put(m, 0, 1);      /* keyed */
    msg_put(m, 0, 8);      /* offset */
    msg_put(m, n, 8);
}

START_TEST(test_messages_untrusted)
{
    make_group("m", 1000, 1, LAUNCH_SYNC_ASP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "m", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "asp");
    uint64_t h = open_ok(&w0, &spec);
    ps_t *ps = d.ps;
    float values[N];
    fill(values, N, 7);
    msg_t m;
    uint64_t dropped = ps->dropped;

    /* a well-formed update from the table's source ("local", index 0) is applied: the
     * decoding is right, so the refusals below are the checks' */
    ps_table_t *t = ps_table_find(ps, 1000, "m", "w", 1);
    ck_assert_ptr_nonnull(t);
    uint64_t first, elems;
    ps_layout_shard(&t->layout, 0, &first, &elems);
    msg_update(&m, 1000, "m", 0, 1000, elems);
    ps_msg_recv(ps, "local", m.b, m.len, values, elems * sizeof(float));
    ck_assert_uint_eq(ps->dropped, dropped);

    /* every prefix of it is dropped; so is every single-byte corruption of its header but
     * those of seq and clock (bytes 29 .. 44: another seq or clock is another valid update) */
    for (size_t cut = 0; cut < m.len; cut++)
        ps_msg_recv(ps, "local", m.b, cut, values, elems * sizeof(float));
    ck_assert_uint_eq(ps->dropped, dropped + m.len);
    dropped = ps->dropped;
    size_t corrupted = 0;
    for (size_t i = 0; i < m.len; i++) {
        if (i >= 29 && i < 45)
            continue;
        msg_t bad = m;
        bad.b[i] ^= 0xff;
        ps_msg_recv(ps, "local", bad.b, bad.len, values, elems * sizeof(float));
        corrupted++;
    }
    ck_assert_uint_eq(ps->dropped, dropped + corrupted);
    dropped = ps->dropped;
    /* a sender that is not a source, a source index out of range, another uid or group, a
     * payload of the wrong size, more values than the shard has */
    msg_update(&m, 1000, "m", 0, 2000, elems);
    ps_msg_recv(ps, "intruder", m.b, m.len, values, elems * sizeof(float));
    msg_update(&m, 1000, "m", 7, 2001, elems);
    ps_msg_recv(ps, "local", m.b, m.len, values, elems * sizeof(float));
    msg_update(&m, 2000, "m", 0, 2002, elems);
    ps_msg_recv(ps, "local", m.b, m.len, values, elems * sizeof(float));
    msg_update(&m, 1000, "other", 0, 2003, elems);
    ps_msg_recv(ps, "local", m.b, m.len, values, elems * sizeof(float));
    msg_update(&m, 1000, "m", 0, 2004, elems);
    ps_msg_recv(ps, "local", m.b, m.len, values, elems * sizeof(float) - 1);
    msg_update(&m, 1000, "m", 0, 2005, elems + 1);
    ps_msg_recv(ps, "local", m.b, m.len, values, (elems + 1) * sizeof(float));
    ck_assert_uint_eq(ps->dropped, dropped + 6);
    /* a pull from a node that runs no rank, an answer nobody asked for, a bye from a
     * stranger, an unknown type, a bad magic */
    msg_begin(&m, 6, 1000, 1, "m", "w");
    msg_put(&m, 1, 8);
    msg_put(&m, 0, 4);
    msg_put(&m, 0, 8);
    msg_put(&m, 0, 8);
    msg_put(&m, 1, 8);
    ps_msg_recv(ps, "intruder", m.b, m.len, NULL, 0);
    msg_begin(&m, 7, 1000, 1, "m", "w");
    msg_put(&m, 12345, 8);
    for (int i = 0; i < 5; i++)
        msg_put(&m, 0, i == 0 ? 4 : 8);
    msg_put(&m, 0, 1);
    msg_put(&m, 1, 8);
    ps_msg_recv(ps, "local", m.b, m.len, values, sizeof(float));
    msg_begin(&m, 2, 1000, 1, "m", "w");
    msg_put(&m, 99, 8);
    ps_msg_recv(ps, "local", m.b, m.len, NULL, 0);
    msg_begin(&m, 8, 1000, 1, "m", "w");
    msg_put(&m, 0, 4);
    msg_put(&m, 0, 8);
    ps_msg_recv(ps, "intruder", m.b, m.len, NULL, 0);
    msg_begin(&m, 99, 1000, 1, "m", "w");
    ps_msg_recv(ps, "local", m.b, m.len, NULL, 0);
    m.b[0] = 0;
    ps_msg_recv(ps, "local", m.b, m.len, NULL, 0);
    ck_assert_uint_eq(ps->dropped, dropped + 12);
    /* an open from a node that says it runs no rank of the group creates nothing */
    msg_begin(&m, 1, 1000, 5, "m", "w2");
    msg_put(&m, 1, 8);
    msg_put(&m, N, 8);
    msg_put(&m, 64, 4);
    msg_str(&m, "add");
    msg_str(&m, "asp");
    const char open_payload[] = "local\0local";
    ps_msg_recv(ps, "intruder", m.b, m.len, open_payload, sizeof(open_payload) - 1);
    ck_assert_ptr_null(ps_table_find(ps, 1000, "m", "w2", 5));

    /* the table holds the one good update: elements of shard 0 are 7, the rest 0 */
    float out[N];
    result_t p = {0};
    pull_start(&w0, h, 0, 0, N, out, &p);
    wait_for(&p);
    for (uint64_t i = 0; i < N; i++)
        ck_assert_float_eq(out[i], i >= first && i < first + elems ? 7 : 0);
}
END_TEST

/* An open from another daemon (node n2 runs the ranks, this daemon only serves): the table's
 * shards here, updates from n2 applied, a bye frees it; over the quota nothing is made. */
static void msg_open(msg_t *m, const char *group, const char *table, uint64_t epoch,
                     uint64_t count)
{
    msg_begin(m, 1, 1000, epoch, group, table);
    msg_put(m, 1, 8);     /* req */
    msg_put(m, count, 8);
    msg_put(m, 64, 4);    /* vnodes */
    msg_str(m, "add");
    msg_str(m, "bsp");
}

START_TEST(test_remote_open_served_here)
{
    ps_t *ps = d.ps;
    msg_t m;
    const char payload[] = "local\0n2"; /* servers "local", sources "n2" */
    d.config.ps_user_bytes = 4000;
    msg_open(&m, "rg", "big", 7, 1001); /* 4004 bytes here: over the quota */
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ck_assert_ptr_null(ps_table_find(ps, 1000, "rg", "big", 7));
    msg_open(&m, "rg", "t", 7, 1000);
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ps_table_t *t = ps_table_find(ps, 1000, "rg", "t", 7);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->charged_bytes, 4000);
    ck_assert_uint_eq(t->local_workers, 0);
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1); /* a retry: the same */
    ck_assert_ptr_eq(ps_table_find(ps, 1000, "rg", "t", 7), t);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.tables, 1);
    ck_assert_uint_eq(s.shards, t->layout.shards);
    /* n2's clock 0 to shard 0 (its values), then shard 0 is done with clock 0 */
    uint64_t first, elems;
    ps_layout_shard(&t->layout, 0, &first, &elems);
    float values[1000];
    fill(values, elems, 2);
    msg_begin(&m, 4, 1000, 7, "rg", "t");
    msg_put(&m, 0, 4);     /* shard */
    msg_put(&m, 0, 4);     /* source: n2 */
    msg_put(&m, 1, 8);     /* seq */
    msg_put(&m, 0, 8);     /* clock */
    msg_put(&m, 1, 1);     /* close */
    msg_put(&m, 0, 1);
    msg_put(&m, 0, 8);
    msg_put(&m, elems, 8);
    ps_msg_recv(ps, "n2", m.b, m.len, values, elems * sizeof(float));
    ps_msg_recv(ps, "n2", m.b, m.len, values, elems * sizeof(float)); /* a resend: once */
    ck_assert_uint_eq(ps_shard_done(t->shards[0]), 1);
    ck_assert_float_eq(ps_shard_values(t->shards[0])[0], 2);
    ck_assert_uint_eq(ps_shard_done(t->shards[1]), 0);
    /* the same update from a node that is no source of the table: dropped */
    uint64_t dropped = ps->dropped;
    ps_msg_recv(ps, "n3", m.b, m.len, values, elems * sizeof(float));
    ck_assert_uint_eq(ps->dropped, dropped + 1);
    /* n2's bye: its only source is over, the table goes */
    msg_begin(&m, 8, 1000, 7, "rg", "t");
    msg_put(&m, 0, 4);
    msg_put(&m, 1, 8); /* the clocks it closed */
    ps_msg_recv(ps, "n2", m.b, m.len, NULL, 0);
    ck_assert_ptr_null(ps_table_find(ps, 1000, "rg", "t", 7));
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.tables, 0);
}
END_TEST

/* An update the shard cannot take whole is not taken in part: a close with a gap refuses its
 * contribution too (its seq stays free); an update beyond the sync window is held back (no
 * ack, not a bad message: the source resends it) and nothing of it is kept. */
static void msg_update_at(msg_t *m, uint32_t source, uint64_t seq, uint64_t clock)
{
    msg_begin(m, 4, 1000, 7, "rw", "t");
    msg_put(m, 0, 4);     /* shard */
    msg_put(m, source, 4);
    msg_put(m, seq, 8);
    msg_put(m, clock, 8);
    msg_put(m, 1, 1);     /* close */
    msg_put(m, 0, 1);
    msg_put(m, 0, 8);
    msg_put(m, 1, 8);     /* one value at offset 0 */
}

START_TEST(test_update_refused_whole)
{
    ps_t *ps = d.ps;
    msg_t m;
    const char payload[] = "local\0n2,n3"; /* sources n2 (0) and n3 (1) */
    msg_open(&m, "rw", "t", 7, 100);
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ps_table_t *t = ps_table_find(ps, 1000, "rw", "t", 7);
    ck_assert_ptr_nonnull(t);
    ps_shard_t *sh = t->shards[0];
    ck_assert_ptr_nonnull(sh);
    const float three[] = {3};
    uint64_t dropped = ps->dropped, held = ps_shard_pending_bytes(sh);
    /* n2's clock 1 with its close while its clock 0 is not closed: refused, nothing kept */
    msg_update_at(&m, 0, 1, 1);
    ps_msg_recv(ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_uint_eq(ps->dropped, dropped + 1);
    ck_assert_uint_eq(ps_shard_pending_bytes(sh), held);
    ck_assert_uint_eq(ps_shard_closed(sh, 0), 0);
    /* seq 1 was not taken: clock 0 with it is, and clock 1 (done 0 + window 1) */
    msg_update_at(&m, 0, 1, 0);
    ps_msg_recv(ps, "n2", m.b, m.len, three, sizeof(three));
    msg_update_at(&m, 0, 2, 1);
    ps_msg_recv(ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_uint_eq(ps_shard_closed(sh, 0), 2);
    /* clock 2 while n3 has not closed clock 0: beyond the BSP window, held back (no ack,
     * not a bad message) and nothing of it kept */
    dropped = ps->dropped;
    held = ps_shard_pending_bytes(sh);
    msg_update_at(&m, 0, 3, 2);
    ps_msg_recv(ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_uint_eq(ps->dropped, dropped);
    ck_assert_uint_eq(ps_shard_pending_bytes(sh), held);
    ck_assert_uint_eq(ps_shard_closed(sh, 0), 2);
    /* n3 closes clock 0: done 1, and n2's resend is taken */
    msg_update_at(&m, 1, 1, 0);
    ps_msg_recv(ps, "n3", m.b, m.len, three, sizeof(three));
    ck_assert_uint_eq(ps_shard_done(sh), 1);
    ck_assert_float_eq(ps_shard_values(sh)[0], 6);
    msg_update_at(&m, 0, 3, 2);
    ps_msg_recv(ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_uint_eq(ps_shard_closed(sh, 0), 3);
    ck_assert_uint_eq(ps->dropped, dropped);
}
END_TEST

/* The ring's virtual nodes are the agreed record's: a table opened with 32 builds its ring
 * with 32 (and sends 32 on); a retried open that names another ring (vnodes or servers) is
 * refused, the table unchanged. */
START_TEST(test_open_ring_agreed)
{
    ps_t *ps = d.ps;
    msg_t m;
    const char payload[] = "local\0n2";
    msg_open(&m, "rv", "t", 7, 100);
    m.b[m.len - 1 - 3 - 1 - 3 - 4] = 32; /* vnodes (u32 before "add" and "bsp") */
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ps_table_t *t = ps_table_find(ps, 1000, "rv", "t", 7);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->vnodes, 32);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    uint64_t refused = s.refused;
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1); /* the same: taken */
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.refused, refused);
    msg_open(&m, "rv", "t", 7, 100); /* 64 virtual nodes: another ring */
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.refused, refused + 1);
    m.b[m.len - 1 - 3 - 1 - 3 - 4] = 32;
    const char other[] = "local,n9\0n2"; /* another server set */
    ps_msg_recv(ps, "n2", m.b, m.len, other, sizeof(other) - 1);
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.refused, refused + 2);
    ck_assert_ptr_eq(ps_table_find(ps, 1000, "rv", "t", 7), t);
    ck_assert_uint_eq(t->vnodes, 32);
}
END_TEST

/* A source's bye: the other nodes' reads it can no longer complete fail (now, and when they
 * come later); those the remaining sources can still complete wait on and are answered. */
static void msg_pull(msg_t *m, const char *group, uint64_t req, uint64_t min_done)
{
    msg_begin(m, 6, 1000, 7, group, "t");
    msg_put(m, req, 8);
    msg_put(m, 0, 4);        /* shard */
    msg_put(m, min_done, 8);
    msg_put(m, 0, 8);        /* first */
    msg_put(m, 1, 8);        /* n */
}

static size_t waits_of(const ps_table_t *t)
{
    size_t n = 0;
    for (const ps_wait_t *w = t->waits; w; w = w->next)
        n++;
    return n;
}

START_TEST(test_bye_fails_stranded_reads)
{
    ps_t *ps = d.ps;
    msg_t m;
    const char payload[] = "local\0n2,n3"; /* sources n2 (0) and n3 (1) */
    msg_open(&m, "rw", "t", 7, 100);
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ps_table_t *t = ps_table_find(ps, 1000, "rw", "t", 7);
    ck_assert_ptr_nonnull(t);
    const float three[] = {3};
    msg_update_at(&m, 0, 1, 0); /* n2 closes clock 0 */
    ps_msg_recv(ps, "n2", m.b, m.len, three, sizeof(three));
    /* n3 reads at done >= 1 and >= 2: both wait (done 0) */
    msg_pull(&m, "rw", 1, 1);
    ps_msg_recv(ps, "n3", m.b, m.len, NULL, 0);
    msg_pull(&m, "rw", 2, 2);
    ps_msg_recv(ps, "n3", m.b, m.len, NULL, 0);
    ck_assert_uint_eq(waits_of(t), 2);
    /* n2's bye after one clock: done can reach 1, never 2 */
    msg_begin(&m, 8, 1000, 7, "rw", "t");
    msg_put(&m, 0, 4);
    msg_put(&m, 1, 8); /* the clocks it closed */
    ps_msg_recv(ps, "n2", m.b, m.len, NULL, 0);
    ck_assert_ptr_eq(ps_table_find(ps, 1000, "rw", "t", 7), t);
    ck_assert_uint_eq(waits_of(t), 1);
    ck_assert_uint_eq(t->waits->min_done, 1);
    /* a later read beyond it fails at once; n3's close of clock 0 answers the one left */
    msg_pull(&m, "rw", 3, 5);
    ps_msg_recv(ps, "n3", m.b, m.len, NULL, 0);
    ck_assert_uint_eq(waits_of(t), 1);
    msg_update_at(&m, 1, 1, 0);
    ps_msg_recv(ps, "n3", m.b, m.len, three, sizeof(three));
    ck_assert_uint_eq(ps_shard_done(t->shards[0]), 1);
    ck_assert_uint_eq(waits_of(t), 0);
}
END_TEST

/* Lost messages on a link that dropped: a remote read asked again is answered once (the
 * server keeps one wait per request); a read not answered in time is asked again; an update
 * whose send failed is marked for the next retry (not left in flight for ever). */
START_TEST(test_resends_after_a_lost_message)
{
    ps_t *ps = d.ps;
    msg_t m;
    const char payload[] = "local\0n2,n3";
    msg_open(&m, "rw", "t", 7, 100);
    ps_msg_recv(ps, "n2", m.b, m.len, payload, sizeof(payload) - 1);
    ps_table_t *t = ps_table_find(ps, 1000, "rw", "t", 7);
    ck_assert_ptr_nonnull(t);
    msg_pull(&m, "rw", 1, 1);
    ps_msg_recv(ps, "n3", m.b, m.len, NULL, 0);
    ps_msg_recv(ps, "n3", m.b, m.len, NULL, 0); /* the same request again */
    ck_assert_uint_eq(waits_of(t), 1);
    msg_pull(&m, "rw", 2, 1);                   /* another request: its own wait */
    ps_msg_recv(ps, "n3", m.b, m.len, NULL, 0);
    ck_assert_uint_eq(waits_of(t), 2);

    /* the worker side: a fetch sent long ago is asked again by the retry */
    ps_fetch_t *f = calloc(1, sizeof(*f));
    ck_assert_ptr_nonnull(f);
    f->req = 99;
    snprintf(f->node, sizeof(f->node), "n2");
    f->table = t;
    f->n = 1;
    f->sent_ns = 1;
    f->next = ps->fetches;
    ps->fetches = f;
    ps_retarget_retry(ps);
    ck_assert_uint_gt(f->sent_ns, 1);
    ps->fetches = f->next;
    free(f);
}
END_TEST

START_TEST(test_failed_update_send_resent)
{
    make_group("us", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "us", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    open_ok(&w0, &spec);
    ps_table_t *t = ps_table_find(d.ps, 1000, "us", "w", 1);
    ck_assert_ptr_nonnull(t);
    ps_update_t *u = calloc(1, sizeof(*u));
    ck_assert_ptr_nonnull(u);
    u->seq = 7;
    ps_stream_t *st = &t->streams[0];
    st->head = st->tail = u;
    st->in_flight = 1;
    ps_retarget_update_sent(d.ps, t->handle, 0, 7, 0); /* the send failed */
    ck_assert_int_eq(st->sent, 1);
    ck_assert_uint_eq(st->sent_ns, 0); /* due at once */
    ps_retarget_update_sent(d.ps, t->handle, 0, 7, 1); /* sent */
    ck_assert_int_eq(st->sent, 1);
    ck_assert_uint_gt(st->sent_ns, 0);
}
END_TEST

/* A worker's update refused by its server (an error acknowledgement) fails the table: its
 * push was answered already, so the update may not be dropped silently; reads hear why. */
START_TEST(test_refused_update_fails_table)
{
    make_group("rf", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "rf", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    ps_table_t *t = ps_table_find(d.ps, 1000, "rf", "w", 1);
    ck_assert_ptr_nonnull(t);
    /* shard 0's stream with an update in flight (as when its server is another daemon) */
    ps_update_t *u = calloc(1, sizeof(*u));
    ck_assert_ptr_nonnull(u);
    u->seq = 41;
    u->clock = 0;
    u->close = 1;
    t->streams[0].head = t->streams[0].tail = u;
    t->streams[0].in_flight = 1;
    ps_worker_acked(t, 0, 40, -EINVAL); /* an old seq's answer: nothing */
    ck_assert_int_eq(t->state, PS_TABLE_READY);
    ps_worker_acked(t, 0, 41, -EINVAL);
    ck_assert_int_eq(t->state, PS_TABLE_FAILED);
    harness_pull_fails(&w0, h, N, "refused the update of shard 0");
}
END_TEST

/* A failed table gives back its memory and quota charge: the job's re-open (a new table) is
 * not refused for the failed one. */
START_TEST(test_failed_table_uncharged)
{
    d.config.ps_user_bytes = N * sizeof(float) + 1000; /* one table and a clock's sum */
    make_group("fq", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "fq", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    float v[N];
    fill(v, N, 1.0f);
    push_ok(&w0, h, 0, 1, 0, N, v);
    ps_table_t *t = ps_table_find(d.ps, 1000, "fq", "w", 1);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_gt(ps_user_bytes(d.ps, 1000), N * sizeof(float));
    ps_table_fail(t, -EIO, "table 'w': a failure for the test");
    run_idle();
    ck_assert_uint_eq(ps_user_bytes(d.ps, 1000), 0);
    ps_sample_t s;
    ps_report_sample(&d, &s);
    ck_assert_uint_eq(s.bytes, 0);
    /* the failed handle says why; a re-open builds a new table within the quota */
    result_t r = {0};
    char err[256] = "";
    ps_push_id_t id = {.rank = 0, .clock = 0, .seq = 2};
    int rc = ps_push(&d, &w0, h, &id, 0, N, NULL, v, on_done, &r, err, sizeof(err));
    ck_assert_int_eq(rc, -EIO);
    ck_assert_msg(strstr(err, "a failure for the test") != NULL, "%s", err);
    uint64_t h2 = open_ok(&w0, &spec);
    ck_assert_uint_ne(h2, h);
    push_ok(&w0, h2, 0, 1, 0, N, v);
    clock_ok(&w0, h2, 0);
}
END_TEST

/* assign: a clock sets the elements some worker wrote in it, and only those (the node's sum
 * holds zeros elsewhere: they are not sent) */
START_TEST(test_assign_written_only)
{
    make_group("as", 1000, 2, LAUNCH_SYNC_BSP, 0, 0);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "as", &o0), w1 = worker_of(1, "as", &o1);
    ps_table_spec_t spec = spec_of("w", N, "assign", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    float ones[N], fives[N], nines[N], out[N];
    fill(ones, N, 1);
    fill(fives, N, 5);
    fill(nines, N, 9);
    push_ok(&w0, h, 0, 1, 0, 50, ones);
    push_ok(&w1, h, 0, 1, 50, 50, fives);
    clock_ok(&w0, h, 0);
    clock_ok(&w1, h, 0);
    push_ok(&w0, h, 1, 2, 0, 10, nines); /* clock 1 writes [0, 10) only */
    clock_ok(&w0, h, 1);
    clock_ok(&w1, h, 1);
    result_t p = {0};
    pull_start(&w0, h, 2, 0, N, out, &p);
    wait_for(&p);
    ck_assert_uint_eq(p.read.done, 2);
    assert_all(out, 10, 9);
    assert_all(out + 10, 40, 1);
    assert_all(out + 50, 50, 5);
}
END_TEST


/* ---- replicas: messages to other daemons captured (ps->send_tap), liveness set by
 * the test (ps->member_alive) ------------------------------------------------------------- */
#define SENT_MAX 64
typedef struct sent_s {
    char node[64];
    int type;
    uint8_t header[PS_NET_MAX_HEADER];
    size_t header_len, at; /* at: past the common part */
    uint8_t *payload;
    size_t payload_len;
} sent_t;
static sent_t sent[SENT_MAX];
static int nsent;
static const char *alive_nodes[8];

static void sent_rewind(sent_t *m);

static int tap(void *arg, const char *node, const void *header, size_t header_len,
               const void *payload, size_t payload_len)
{
    (void)arg;
    ck_assert_int_lt(nsent, SENT_MAX);
    sent_t *m = &sent[nsent++];
    snprintf(m->node, sizeof(m->node), "%s", node);
    memcpy(m->header, header, header_len);
    m->header_len = header_len;
    m->type = m->header[4];
    sent_rewind(m); /* past magic, type, uid, epoch, group, table */
    m->payload = payload_len ? malloc(payload_len) : NULL;
    if (payload_len)
        memcpy(m->payload, payload, payload_len);
    m->payload_len = payload_len;
    return 0;
}

static int test_alive(salusd_t *dd, const char *node)
{
    (void)dd;
    for (int i = 0; i < 8 && alive_nodes[i]; i++)
        if (strcmp(alive_nodes[i], node) == 0)
            return 1;
    return 0;
}

static void sent_clear(void)
{
    for (int i = 0; i < nsent; i++)
        free(sent[i].payload);
    nsent = 0;
}

static void sent_rewind(sent_t *m)
{
    m->at = 4 + 1 + 4 + 8;
    m->at += 1 + m->header[m->at];
    m->at += 1 + m->header[m->at];
}

static uint64_t sent_get(sent_t *m, size_t bytes)
{
    ck_assert_uint_le(bytes, 8);
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; i++)
        v |= (uint64_t)m->header[m->at++] << (8 * i);
    return v;
}

/* The i-th sent message of type to node (NULL: none). */
static sent_t *sent_find(int type, const char *node, int i)
{
    for (int k = 0; k < nsent; k++)
        if (sent[k].type == type && (!node || strcmp(sent[k].node, node) == 0) && i-- == 0)
            return &sent[k];
    return NULL;
}

/* 1 when a state copy of shard s sent to node (type 18: shard, req, handover) is a hand-over. */
static int handover_sent(uint32_t s, const char *node)
{
    int handover = 0;
    sent_t *c;
    for (int k = 0; (c = sent_find(18, node, k)); k++) {
        sent_rewind(c); /* (read for an earlier shard) */
        uint32_t shard = (uint32_t)sent_get(c, 4);
        sent_get(c, 8);
        handover |= shard == s && sent_get(c, 1) == 1;
    }
    return handover;
}

static int sent_count(int type, const char *node)
{
    int n = 0;
    while (sent_find(type, node, n))
        n++;
    return n;
}

static void repl_setup(void)
{
    setup();
    nsent = 0;
    memset(alive_nodes, 0, sizeof(alive_nodes));
    d.ps->send_tap = tap;
    d.ps->member_alive = test_alive;
}

static void repl_teardown(void)
{
    sent_clear();
    teardown();
}

/* An open of table "t" (100 elements, bsp, add) of group "rr" from n2 (the source), with
 * view 1 over `servers` and R; fresh 0: a server that joined (ring record "n3,n4"). */
static ps_table_t *open_replicated_as(const char *servers, uint32_t replicas, int fresh)
{
    msg_t m;
    char payload[256];
    size_t len = (size_t)snprintf(payload, sizeof(payload), "%s", fresh ? servers : "n3,n4");
    len++;
    len += (size_t)snprintf(payload + len, sizeof(payload) - len, "n2") + 1;
    len += (size_t)snprintf(payload + len, sizeof(payload) - len, "%s", servers);
    msg_open(&m, "rr", "t", 7, 100);
    msg_put(&m, fresh ? 1 : 5, 8); /* view */
    msg_put(&m, replicas, 4);
    msg_put(&m, (uint64_t)fresh, 1);
    ps_msg_recv(d.ps, "n2", m.b, m.len, payload, len);
    ps_table_t *t = ps_table_find(d.ps, 1000, "rr", "t", 7);
    ck_assert_ptr_nonnull(t);
    return t;
}

static ps_table_t *open_replicated(const char *servers, uint32_t replicas)
{
    return open_replicated_as(servers, replicas, 1);
}

/* The first shard whose primary here is (is_primary 1) or is not (0, a standby here). */
static uint32_t shard_where(const ps_table_t *t, int is_primary)
{
    for (uint32_t i = 0; i < t->layout.shards; i++)
        if (t->repl[i].replica && ps_repl_is_primary(t, i) == is_primary)
            return i;
    ck_abort_msg("no such shard");
    return 0;
}

/* An update (type 4, or a forward: 16) of `shard` from source 0 (n2): one value 3 at 0. */
static void msg_update_of(msg_t *m, int type, uint32_t shard, uint64_t seq, uint64_t clock)
{
    msg_begin(m, type, 1000, 7, "rr", "t");
    msg_put(m, shard, 4);
    msg_put(m, 0, 4);     /* source n2 */
    msg_put(m, seq, 8);
    msg_put(m, clock, 8);
    msg_put(m, 1, 1);     /* close */
    msg_put(m, 0, 1);
    msg_put(m, 0, 8);
    msg_put(m, 1, 8);
}

/* An ack (17: REPL_ACK) of shard's (source 0, seq) with rc. */
static void msg_repl_ack(msg_t *m, uint32_t shard, uint64_t seq, int rc)
{
    msg_begin(m, 17, 1000, 7, "rr", "t");
    msg_put(m, shard, 4);
    msg_put(m, 0, 4);
    msg_put(m, seq, 8);
    msg_put(m, (uint64_t)(uint32_t)rc, 4);
}

/* The update ack (type 5) to n2: its seq and rc. */
static void update_ack_of(sent_t *m, uint64_t *seq, int *rc)
{
    sent_get(m, 4); /* shard */
    sent_get(m, 4); /* source */
    *seq = sent_get(m, 8);
    *rc = (int)(int32_t)(uint32_t)sent_get(m, 4);
}

static const float three[] = {3};

/* The primary forwards an update (same source, seq, clock, payload) to each standby and
 * acknowledges the source only once every live standby has acknowledged. */
START_TEST(test_repl_forward_then_ack)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3,n4", 3);
    ck_assert_uint_eq(t->replicas, 3);
    uint32_t s = shard_where(t, 1);
    ck_assert_uint_eq(t->repl[s].nstandbys, 2);
    ck_assert_str_eq(ps_table_primary(t, s), "local");
    for (uint32_t i = 0; i < t->layout.shards; i++) /* R = 3 of 3 servers: every shard here */
        ck_assert_ptr_nonnull(t->shards[i]);
    sent_clear();
    msg_t m;
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 3); /* applied here */
    ck_assert_int_eq(sent_count(16, NULL), 2);
    for (int k = 0; k < 2; k++) {
        sent_t *f = sent_find(16, k ? "n4" : "n3", 0);
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(sent_get(f, 4), s);
        ck_assert_uint_eq(sent_get(f, 4), 0); /* source */
        ck_assert_uint_eq(sent_get(f, 8), 1); /* seq */
        ck_assert_uint_eq(sent_get(f, 8), 0); /* clock */
        ck_assert_uint_eq(sent_get(f, 1), 1); /* close */
        ck_assert_uint_eq(f->payload_len, sizeof(float));
        ck_assert_int_eq(memcmp(f->payload, three, sizeof(float)), 0);
    }
    ck_assert_int_eq(sent_count(5, "n2"), 0); /* no ack yet */
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, "n3", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 0); /* n4 has not acknowledged */
    /* the source's resend meanwhile: applied once, forwarded again only to n4 */
    ps_msg_recv(d.ps, "n2", m.b, 0, NULL, 0); /* (an empty message: dropped) */
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 3);
    ck_assert_int_eq(sent_count(16, "n3"), 1);
    ck_assert_int_eq(sent_count(16, "n4"), 2);
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, "n4", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    uint64_t seq;
    int rc;
    update_ack_of(sent_find(5, "n2", 0), &seq, &rc);
    ck_assert_uint_eq(seq, 1);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_null(t->forwards);
}
END_TEST

/* A standby applies what its primary forwards, once (a duplicate is acknowledged again, not
 * applied twice); it refuses updates and reads from sources (-ESTALE): not the primary. */
START_TEST(test_repl_standby_and_stale)
{
    alive_nodes[0] = "n3";
    ps_table_t *t = open_replicated("local,n3", 2);
    uint32_t s = shard_where(t, 0);
    const char *primary = ps_table_primary(t, s);
    ck_assert_str_eq(primary, "n3");
    ck_assert_ptr_nonnull(t->shards[s]);
    sent_clear();
    msg_t m;
    msg_update_of(&m, 16, s, 1, 0);
    ps_msg_recv(d.ps, "n3", m.b, m.len, three, sizeof(three));
    ps_msg_recv(d.ps, "n3", m.b, m.len, three, sizeof(three)); /* again: applied once */
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 3);
    ck_assert_uint_eq(ps_shard_closed(t->shards[s], 0), 1);
    ck_assert_int_eq(sent_count(17, "n3"), 2);
    for (int k = 0; k < 2; k++) {
        sent_t *a = sent_find(17, "n3", k);
        ck_assert_uint_eq(sent_get(a, 4), s);
        ck_assert_uint_eq(sent_get(a, 4), 0);
        ck_assert_uint_eq(sent_get(a, 8), 1);
        ck_assert_int_eq((int32_t)(uint32_t)sent_get(a, 4), 0);
    }
    /* from the source: -ESTALE, nothing applied */
    msg_update_of(&m, 4, s, 2, 1);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    uint64_t seq;
    int rc;
    update_ack_of(sent_find(5, "n2", 0), &seq, &rc);
    ck_assert_uint_eq(seq, 2);
    ck_assert_int_eq(rc, -ESTALE);
    ck_assert_uint_eq(ps_shard_closed(t->shards[s], 0), 1);
    msg_begin(&m, 6, 1000, 7, "rr", "t");
    msg_put(&m, 5, 8);  /* req */
    msg_put(&m, s, 4);
    msg_put(&m, 0, 8);
    msg_put(&m, 0, 8);
    msg_put(&m, 1, 8);
    ps_msg_recv(d.ps, "n2", m.b, m.len, NULL, 0);
    sent_t *r = sent_find(7, "n2", 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(sent_get(r, 8), 5);
    ck_assert_int_eq((int32_t)(uint32_t)sent_get(r, 4), -ESTALE);
    ck_assert_uint_eq(r->payload_len, 0);
}
END_TEST

/* A standby that is not alive (its lease ended) is not waited for: not forwarded to, and a
 * forward waiting on one that dies meanwhile is acknowledged at the next check. */
START_TEST(test_repl_dead_standby_not_waited)
{
    alive_nodes[0] = "n3";
    ps_table_t *t = open_replicated("local,n3,n4", 3);
    uint32_t s = shard_where(t, 1);
    sent_clear();
    msg_t m;
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_int_eq(sent_count(16, "n3"), 1);
    ck_assert_int_eq(sent_count(16, "n4"), 0);
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, "n3", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    /* the next one waits on n3, which dies before it acknowledges */
    msg_update_of(&m, 4, s, 2, 1);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    ps_repl_check(d.ps);
    ck_assert_int_eq(sent_count(5, "n2"), 1); /* alive: still waited for */
    alive_nodes[0] = NULL;
    ps_repl_check(d.ps);
    ck_assert_int_eq(sent_count(5, "n2"), 2);
    uint64_t seq;
    int rc;
    update_ack_of(sent_find(5, "n2", 1), &seq, &rc);
    ck_assert_uint_eq(seq, 2);
    ck_assert_int_eq(rc, 0);
}
END_TEST

static ps_view_t view_of(uint64_t number, const char *servers, uint32_t replicas)
{
    ps_view_t v;
    memset(&v, 0, sizeof(v));
    v.number = number;
    snprintf(v.servers, sizeof(v.servers), "%s", servers);
    v.replicas = replicas;
    return v;
}

/* A view without the primary (n3 failed): a standby here becomes the primary with the state
 * it has, gives its standbys its state first, then takes updates and answers reads. */
START_TEST(test_repl_failover_takes_over)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3,n4", 3);
    /* each shard whose primary is n3 gets an update forwarded here */
    msg_t m;
    int n3_primaries = 0;
    for (uint32_t i = 0; i < t->layout.shards; i++)
        if (strcmp(ps_table_primary(t, i), "n3") == 0) {
            msg_update_of(&m, 16, i, 1, 0);
            ps_msg_recv(d.ps, "n3", m.b, m.len, three, sizeof(three));
            n3_primaries++;
        }
    ck_assert_int_gt(n3_primaries, 0);
    uint8_t was_n3[64] = {0};
    for (uint32_t i = 0; i < t->layout.shards; i++)
        was_n3[i] = strcmp(ps_table_primary(t, i), "n3") == 0;
    alive_nodes[0] = "n4";
    alive_nodes[1] = NULL;
    sent_clear();
    ps_view_t v = view_of(2, "local,n4", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v);
    ck_assert_uint_eq(t->view, 2);
    ck_assert_uint_eq(t->moved, (uint64_t)n3_primaries);
    int taken = -1;
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        ck_assert_str_ne(ps_table_primary(t, i), "n3");
        if (was_n3[i] && ps_repl_is_primary(t, i))
            taken = (int)i;
    }
    ck_assert_msg(taken >= 0, "no shard of n3 came here");
    uint32_t s = (uint32_t)taken;
    ck_assert_int_eq(t->repl[s].loading, 0);
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 3); /* the state it had */
    /* its standby n4 got the state (it counts once it acknowledged it) */
    sent_t *c = sent_find(18, "n4", 0);
    ck_assert_ptr_nonnull(c);
    int found = 0;
    for (int k = 0; (c = sent_find(18, "n4", k)); k++) {
        uint32_t shard = (uint32_t)sent_get(c, 4);
        if (shard != s)
            continue;
        found = 1;
        uint64_t first, elems;
        ps_layout_shard(&t->layout, s, &first, &elems);
        char err[128];
        ps_shard_t *copy = ps_shard_load(c->payload, c->payload_len, elems, &t->spec.rule,
                                         &t->spec.sync, t->sources, err, sizeof(err));
        ck_assert_msg(copy != NULL, "%s", err);
        ck_assert_int_eq(ps_shard_same(copy, t->shards[s]), 1);
        ps_shard_destroy(copy);
    }
    ck_assert_int_eq(found, 1);
    /* the source's resend of what n3 had not acknowledged: a duplicate here, forwarded, and
     * acknowledged once n4 has it */
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 3);
    ck_assert_int_eq(sent_count(16, "n4"), 1);
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, "n4", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    /* a read is answered here now */
    msg_begin(&m, 6, 1000, 7, "rr", "t");
    msg_put(&m, 9, 8);
    msg_put(&m, s, 4);
    msg_put(&m, 1, 8);   /* min_done 1 */
    msg_put(&m, 0, 8);
    msg_put(&m, 1, 8);
    ps_msg_recv(d.ps, "n2", m.b, m.len, NULL, 0);
    sent_t *r = sent_find(7, "n2", 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(sent_get(r, 8), 9);
    ck_assert_int_eq((int32_t)(uint32_t)sent_get(r, 4), 0);
    ck_assert_uint_eq(r->payload_len, sizeof(float));
    ck_assert_int_eq(memcmp(r->payload, three, sizeof(float)), 0);
    /* an older view changes nothing */
    ps_view_t old = view_of(1, "local,n3,n4", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &old);
    ck_assert_uint_eq(t->view, 2);
}
END_TEST

/* A server joins: each new standby of a shard primaried here gets a whole-state copy; one
 * that refuses a forward gets another; a copy that comes here is loaded and acknowledged. */
START_TEST(test_repl_copy_to_new_standby)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3", 2);
    msg_t m;
    sent_clear();
    uint8_t was_here[64] = {0};
    for (uint32_t i = 0; i < t->layout.shards; i++)
        was_here[i] = (uint8_t)ps_repl_is_primary(t, i);
    ps_view_t v = view_of(2, "local,n3,n4", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v);
    /* every shard primaried here that has n4 as a new standby: one copy each, none to n3
     * where the primary stayed (in step) */
    int want = 0;
    for (uint32_t i = 0; i < t->layout.shards; i++)
        if (ps_repl_is_primary(t, i))
            for (uint32_t k = 0; k < t->repl[i].nstandbys; k++)
                want += strcmp(t->repl[i].standby[k].node, "n4") == 0;
    ck_assert_int_gt(want, 0);
    int copies_n4 = 0, handovers_n4 = 0, handovers_want = 0;
    for (int k = 0; sent_find(18, "n4", k); k++) {
        sent_t *c = sent_find(18, "n4", k);
        uint32_t shard = (uint32_t)sent_get(c, 4);
        sent_get(c, 8);
        int handover = (int)sent_get(c, 1);
        sent_rewind(c);
        copies_n4 += !handover;
        handovers_n4 += handover;
        /* a handover: n4 is the shard's new primary, and this daemon was */
        ck_assert(!handover || (strcmp(ps_table_primary(t, shard), "n4") == 0 &&
                                was_here[shard]));
    }
    for (uint32_t i = 0; i < t->layout.shards; i++)
        handovers_want += was_here[i] && strcmp(ps_table_primary(t, i), "n4") == 0;
    ck_assert_int_eq(copies_n4, want);
    ck_assert_int_eq(handovers_n4, handovers_want);
    ck_assert_int_eq(sent_count(18, "n3"), 0);
    ck_assert_uint_gt(t->copies, 0);
    ps_sample_t sample;
    ps_report_sample(&d, &sample);
    ck_assert_uint_eq(sample.views, 1);
    ck_assert_uint_ge(sample.shard_copies, (uint64_t)want);
    /* n4 refuses a forward (it has not taken its copy yet): it gets the state again */
    uint32_t s = shard_where(t, 1);
    ck_assert_uint_eq(t->repl[s].nstandbys, 2);
    int copies = sent_count(18, "n4");
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    msg_repl_ack(&m, s, 1, -ENOENT);
    ps_msg_recv(d.ps, "n4", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(18, "n4"), copies + 1);
    /* its ack of that copy counts for the update: with n3's, the source hears */
    sent_t *c = sent_find(18, "n4", copies);
    ck_assert_uint_eq(sent_get(c, 4), s);
    uint64_t req = sent_get(c, 8);
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, "n3", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 0);
    msg_begin(&m, 19, 1000, 7, "rr", "t");
    msg_put(&m, s, 4);
    msg_put(&m, req, 8);
    msg_put(&m, 0, 4);
    ps_msg_recv(d.ps, "n4", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    ck_assert_ptr_null(t->forwards);
    /* the other way: a standby here takes a copy from its primary */
    uint32_t b = shard_where(t, 0);
    sent_clear();
    uint64_t first, elems;
    ps_layout_shard(&t->layout, b, &first, &elems);
    ps_shard_t *src = ps_shard_create(elems, &t->spec.rule, &t->spec.sync, t->sources);
    ck_assert_int_eq(ps_shard_contribute(src, 0, 4, 0, 0, 1, NULL, three), 1);
    ck_assert_int_eq(ps_shard_close(src, 0, 0), 1);
    size_t size = ps_shard_state_size(src);
    void *buf = malloc(size);
    int64_t len = ps_shard_save(src, buf, size);
    ck_assert_int_gt(len, 0);
    msg_begin(&m, 18, 1000, 7, "rr", "t");
    msg_put(&m, b, 4);
    msg_put(&m, 77, 8);
    msg_put(&m, 0, 1);
    ps_msg_recv(d.ps, ps_table_primary(t, b), m.b, m.len, buf, (size_t)len);
    ck_assert_int_eq(ps_shard_same(src, t->shards[b]), 1);
    sent_t *a = sent_find(19, ps_table_primary(t, b), 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(sent_get(a, 4), b);
    ck_assert_uint_eq(sent_get(a, 8), 77);
    ck_assert_int_eq((int32_t)(uint32_t)sent_get(a, 4), 0);
    /* a truncated one is refused, the shard unchanged */
    ps_msg_recv(d.ps, ps_table_primary(t, b), m.b, m.len, buf, (size_t)len - 1);
    a = sent_find(19, ps_table_primary(t, b), 1);
    ck_assert_ptr_nonnull(a);
    sent_get(a, 4);
    sent_get(a, 8);
    ck_assert_int_lt((int32_t)(uint32_t)sent_get(a, 4), 0);
    ck_assert_int_eq(ps_shard_same(src, t->shards[b]), 1);
    free(buf);
    ps_shard_destroy(src);
    /* n4 leaves again: no copy goes on being sent to it */
    int to_n4 = 0;
    for (const ps_copy_t *k = d.ps->copies; k; k = k->next)
        to_n4 += strcmp(k->node, "n4") == 0;
    ck_assert_int_gt(to_n4, 0); /* (the ones it never acknowledged) */
    ps_view_t v3 = view_of(3, "local,n3", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v3);
    ps_repl_check(d.ps);
    for (const ps_copy_t *k = d.ps->copies; k; k = k->next)
        ck_assert_str_ne(k->node, "n4");
}
END_TEST


/* This node's own workers: an update to a shard primaried here is acknowledged to its stream
 * only once the standby has it; a server new in the view is sent the open (not fresh). */
START_TEST(test_repl_local_source_waits)
{
    alive_nodes[0] = "n3";
    make_group("lp", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "lp", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    uint64_t h = open_ok(&w0, &spec);
    ps_table_t *t = ps_table_find(d.ps, 1000, "lp", "w", 1);
    ck_assert_ptr_nonnull(t);
    sent_clear();
    ps_view_t v = view_of(t->view + 1, "local,n3", 2);
    ps_repl_view_changed(d.ps, 1000, "lp", 1, "w", &v);
    ck_assert_uint_eq(t->replicas, 2);
    sent_t *o = sent_find(1, "n3", 0);
    ck_assert_ptr_nonnull(o);
    o->at += 8 + 8 + 4; /* req, count, vnodes */
    o->at += 1 + o->header[o->at]; /* rule */
    o->at += 1 + o->header[o->at]; /* sync */
    ck_assert_uint_eq(sent_get(o, 8), t->view);
    ck_assert_uint_eq(sent_get(o, 4), 2);
    ck_assert_uint_eq(sent_get(o, 1), 0); /* not fresh: the shards come as copies */
    uint32_t s = shard_where(t, 1);
    float ones[N];
    fill(ones, N, 1);
    push_ok(&w0, h, 0, 1, 0, N, ones);
    clock_ok(&w0, h, 0);
    sent_t *f = sent_find(16, "n3", 0);
    ck_assert_ptr_nonnull(f);
    int found = 0;
    for (int k = 0; (f = sent_find(16, "n3", k)); k++) {
        if (sent_get(f, 4) != s)
            continue;
        found = 1;
        ck_assert_uint_eq(sent_get(f, 4), 0); /* source: this node */
        uint64_t seq = sent_get(f, 8);
        ck_assert_ptr_nonnull(t->streams[s].head); /* not acknowledged yet */
        ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 1); /* applied here */
        msg_t m;
        msg_begin(&m, 17, 1000, 1, "lp", "w");
        msg_put(&m, s, 4);
        msg_put(&m, 0, 4);
        msg_put(&m, seq, 8);
        msg_put(&m, 0, 4);
        ps_msg_recv(d.ps, "n3", m.b, m.len, NULL, 0);
        ck_assert_ptr_null(t->streams[s].head);
    }
    ck_assert_int_eq(found, 1);
}
END_TEST


/* A view that adds a standby while an update waits for the old one: the update waits for both
 * (the new one through its copy, taken after the update). */
START_TEST(test_repl_forward_across_views)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3,n4", 2);
    uint32_t s = shard_where(t, 1);
    ck_assert_uint_eq(t->repl[s].nstandbys, 1);
    char old_standby[64];
    snprintf(old_standby, sizeof(old_standby), "%s", t->repl[s].standby[0].node);
    const char *added = strcmp(old_standby, "n3") == 0 ? "n4" : "n3";
    msg_t m;
    sent_clear();
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_int_eq(sent_count(16, old_standby), 1);
    ps_view_t v = view_of(2, "local,n3,n4", 3); /* R 2 -> 3: the primaries stay */
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v);
    ck_assert(ps_repl_is_primary(t, s));
    ck_assert_uint_eq(t->repl[s].nstandbys, 2);
    ck_assert_uint_eq(t->moved, 0);
    /* the copy to the added standby, none to the one in step */
    sent_t *c = NULL;
    for (int k = 0; (c = sent_find(18, added, k)); k++)
        if (sent_get(c, 4) == s)
            break;
    ck_assert_ptr_nonnull(c);
    uint64_t req = sent_get(c, 8);
    for (int k = 0; (c = sent_find(18, old_standby, k)); k++)
        ck_assert_uint_ne(sent_get(c, 4), s);
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, old_standby, m.b, m.len, NULL, 0);
    ps_repl_check(d.ps);
    ck_assert_int_eq(sent_count(5, "n2"), 0); /* the added one has not taken its copy */
    msg_begin(&m, 19, 1000, 7, "rr", "t");
    msg_put(&m, s, 4);
    msg_put(&m, req, 8);
    msg_put(&m, 0, 4);
    ps_msg_recv(d.ps, added, m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    ck_assert_ptr_null(t->forwards);
}
END_TEST


/* A server that joined a view hears the open (not fresh): no empty shards; a forward to a
 * shard it stands by for is refused until its copy came; a shard it primaries holds updates
 * back and keeps reads until the old primary's state comes, then serves (its standbys get the
 * state first). */
START_TEST(test_repl_joined_server)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated_as("local,n3,n4", 3, 0);
    ck_assert_uint_eq(t->view, 5);
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        ck_assert_ptr_null(t->shards[i]);
        ck_assert_int_eq(t->repl[i].loading, ps_repl_is_primary(t, i));
    }
    uint32_t b = shard_where(t, 0), s = shard_where(t, 1);
    sent_clear();
    msg_t m;
    msg_update_of(&m, 16, b, 1, 0);
    ps_msg_recv(d.ps, ps_table_primary(t, b), m.b, m.len, three, sizeof(three));
    sent_t *a = sent_find(17, ps_table_primary(t, b), 0);
    ck_assert_ptr_nonnull(a);
    a->at += 4 + 4 + 8; /* shard, source, seq */
    ck_assert_int_eq((int32_t)(uint32_t)sent_get(a, 4), -ENOENT);
    /* the primary here without its state: not serving yet (-ESTALE), the read kept */
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    msg_begin(&m, 6, 1000, 7, "rr", "t");
    msg_put(&m, 3, 8);
    msg_put(&m, s, 4);
    msg_put(&m, 1, 8); /* min_done 1 */
    msg_put(&m, 0, 8);
    msg_put(&m, 1, 8);
    ps_msg_recv(d.ps, "n2", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
    uint64_t seq;
    int rc;
    update_ack_of(sent_find(5, "n2", 0), &seq, &rc);
    ck_assert_int_eq(rc, -ESTALE);
    ck_assert_int_eq(sent_count(7, "n2"), 0);
    ck_assert_int_eq(sent_count(16, NULL), 0);
    /* the old primary's state (n2's clock 0 in it): taken, the read answered, the standbys
     * get the state, the resent update is a duplicate forwarded to them */
    uint64_t first, elems;
    ps_layout_shard(&t->layout, s, &first, &elems);
    ps_shard_t *src = ps_shard_create(elems, &t->spec.rule, &t->spec.sync, t->sources);
    ck_assert_int_eq(ps_shard_contribute(src, 0, 1, 0, 0, 1, NULL, three), 1);
    ck_assert_int_eq(ps_shard_close(src, 0, 0), 1);
    size_t size = ps_shard_state_size(src);
    void *buf = malloc(size);
    int64_t len = ps_shard_save(src, buf, size);
    ck_assert_int_gt(len, 0);
    msg_begin(&m, 18, 1000, 7, "rr", "t");
    msg_put(&m, s, 4);
    msg_put(&m, 12, 8);
    msg_put(&m, 1, 1); /* a handover */
    ps_msg_recv(d.ps, "n3", m.b, m.len, buf, (size_t)len);
    ck_assert_int_eq(t->repl[s].loading, 0);
    ck_assert_int_eq(ps_shard_same(src, t->shards[s]), 1);
    sent_t *r = sent_find(7, "n2", 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(sent_get(r, 8), 3);
    ck_assert_int_eq((int32_t)(uint32_t)sent_get(r, 4), 0);
    for (uint32_t k = 0; k < t->repl[s].nstandbys; k++) {
        int copied = 0;
        sent_t *c;
        for (int j = 0; (c = sent_find(18, t->repl[s].standby[k].node, j)); j++)
            copied |= sent_get(c, 4) == s;
        ck_assert_msg(copied, "no copy to %s", t->repl[s].standby[k].node);
    }
    ck_assert_ptr_nonnull(sent_find(19, "n3", 0));
    msg_update_of(&m, 4, s, 1, 0);
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    ck_assert_int_eq(sent_count(16, NULL), 2);
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 3); /* once */
    free(buf);
    ps_shard_destroy(src);
}
END_TEST

/* A forward is taken only from the shard's primary in this daemon's view, and never by the
 * primary itself (a primary of an older view forwarding to the new one would have it acked
 * without its standbys having it): refused with -ESTALE, nothing applied. */
START_TEST(test_repl_forward_from_primary_only)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3,n4", 3);
    uint32_t b = shard_where(t, 0), s = shard_where(t, 1);
    const char *primary = ps_table_primary(t, b);
    const char *other = strcmp(primary, "n3") == 0 ? "n4" : "n3";
    sent_clear();
    msg_t m;
    msg_update_of(&m, 16, b, 1, 0); /* from a standby of b, not its primary */
    ps_msg_recv(d.ps, other, m.b, m.len, three, sizeof(three));
    msg_update_of(&m, 16, s, 1, 0); /* to the primary here */
    ps_msg_recv(d.ps, "n3", m.b, m.len, three, sizeof(three));
    ck_assert_float_eq(ps_shard_values(t->shards[b])[0], 0);
    ck_assert_uint_eq(ps_shard_closed(t->shards[b], 0), 0);
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 0);
    ck_assert_uint_eq(ps_shard_closed(t->shards[s], 0), 0);
    ck_assert_int_eq(sent_count(16, NULL), 0); /* nothing forwarded on */
    for (int k = 0; k < 2; k++) {
        sent_t *a = sent_find(17, k ? "n3" : other, 0);
        ck_assert_ptr_nonnull(a);
        ck_assert_uint_eq(sent_get(a, 4), k ? s : b);
        a->at += 4 + 8; /* shard, req */
        ck_assert_int_eq((int32_t)(uint32_t)sent_get(a, 4), -ESTALE);
    }
    /* from the primary: taken */
    msg_update_of(&m, 16, b, 1, 0);
    ps_msg_recv(d.ps, primary, m.b, m.len, three, sizeof(three));
    ck_assert_float_eq(ps_shard_values(t->shards[b])[0], 3);
}
END_TEST

/* A shard state: a standby's copy only from the shard's primary, never loaded by (nor
 * acknowledged as taken by) a primary; a handover only by the primary still waiting for it. */
START_TEST(test_repl_state_from_primary_only)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3,n4", 3);
    uint32_t b = shard_where(t, 0), s = shard_where(t, 1);
    const char *primary = ps_table_primary(t, b);
    const char *other = strcmp(primary, "n3") == 0 ? "n4" : "n3";
    uint64_t first, elems;
    ps_layout_shard(&t->layout, b, &first, &elems);
    ps_shard_t *src = ps_shard_create(elems, &t->spec.rule, &t->spec.sync, t->sources);
    ck_assert_int_eq(ps_shard_contribute(src, 0, 4, 0, 0, 1, NULL, three), 1);
    ck_assert_int_eq(ps_shard_close(src, 0, 0), 1);
    size_t size = ps_shard_state_size(src);
    void *buf = malloc(size);
    int64_t len = ps_shard_save(src, buf, size);
    ck_assert_int_gt(len, 0);
    ps_layout_shard(&t->layout, s, &first, &elems);
    ck_assert_uint_eq(elems, ps_shard_elems(src)); /* (same shape: the state fits s too) */
    sent_clear();
    struct {
        uint32_t shard;
        const char *from;
        int handover;
    } bad[] = {{b, other, 0}, {b, primary, 1}, {s, "n3", 0}};
    for (int k = 0; k < 3; k++) {
        msg_t m;
        msg_begin(&m, 18, 1000, 7, "rr", "t");
        msg_put(&m, bad[k].shard, 4);
        msg_put(&m, 50 + (uint64_t)k, 8);
        msg_put(&m, (uint64_t)bad[k].handover, 1);
        ps_msg_recv(d.ps, bad[k].from, m.b, m.len, buf, (size_t)len);
        int rc = 1;
        sent_t *a;
        for (int j = 0; (a = sent_find(19, bad[k].from, j)); j++) /* its answer, by req */
            if (sent_get(a, 4) == bad[k].shard && sent_get(a, 8) == 50 + (uint64_t)k)
                rc = (int)(int32_t)(uint32_t)sent_get(a, 4);
        ck_assert_msg(rc == -ESTALE, "state %d: rc %d, want -ESTALE", k, rc);
    }
    ck_assert_float_eq(ps_shard_values(t->shards[b])[0], 0);
    ck_assert_float_eq(ps_shard_values(t->shards[s])[0], 0);
    free(buf);
    ps_shard_destroy(src);
}
END_TEST

/* A standby whose copy had not been acknowledged (it holds nothing yet) that becomes the
 * primary when this one leaves gets the state as a handover: it would wait for one for ever. */
START_TEST(test_repl_handover_to_standby_behind)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3", 2);
    ps_view_t v2 = view_of(2, "local,n3,n4", 3); /* n4 joins: copies to it, not acked */
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v2);
    uint8_t mine[64] = {0};
    for (uint32_t i = 0; i < t->layout.shards; i++)
        mine[i] = (uint8_t)ps_repl_is_primary(t, i);
    sent_clear();
    ps_view_t v3 = view_of(3, "n3,n4", 2); /* this daemon leaves */
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v3);
    int want = 0;
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        if (!mine[i] || strcmp(ps_table_primary(t, i), "n4") != 0)
            continue;
        want++;
        ck_assert_msg(handover_sent(i, "n4"), "shard %u: no handover to n4, whose copy had not come", i);
    }
    ck_assert_int_gt(want, 0);
}
END_TEST

/* A copy sent again is taken again (newer); a late ack of the first send stands only for what
 * the first send held: an update forwarded after it (lost on the way) is not acknowledged. */
START_TEST(test_repl_copy_resent_ack_of_first)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3", 2);
    ps_view_t v2 = view_of(2, "local,n3,n4", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v2);
    uint32_t s = shard_where(t, 1);
    int k4 = -1;
    for (uint32_t k = 0; k < t->repl[s].nstandbys; k++)
        if (strcmp(t->repl[s].standby[k].node, "n4") == 0)
            k4 = (int)k;
    ck_assert_int_ge(k4, 0);
    uint64_t req = t->repl[s].standby[k4].copy_req;
    ck_assert_uint_ne(req, 0); /* n4's copy, sent, not acknowledged */
    msg_t m;
    msg_update_of(&m, 4, s, 1, 0); /* forwarded to n3 and n4 (n4 never gets it) */
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    msg_repl_ack(&m, s, 1, 0);
    ps_msg_recv(d.ps, "n3", m.b, m.len, NULL, 0);
    for (ps_copy_t *c = d.ps->copies; c; c = c->next) /* due again */
        c->sent_ns -= 2ull * PS_COPY_RESEND_MS * 1000000ull;
    sent_clear();
    ps_repl_check(d.ps);
    ck_assert_int_gt(sent_count(18, "n4"), 0);
    msg_begin(&m, 19, 1000, 7, "rr", "t"); /* n4's ack of the first send */
    msg_put(&m, s, 4);
    msg_put(&m, req, 8);
    msg_put(&m, 0, 4);
    ps_msg_recv(d.ps, "n4", m.b, m.len, NULL, 0);
    ps_repl_check(d.ps);
    ck_assert_int_eq(sent_count(5, "n2"), 0); /* n4 does not have update 1 */
    msg_repl_ack(&m, s, 1, 0); /* the source's resend forwarded again, n4 acknowledges */
    ps_msg_recv(d.ps, "n4", m.b, m.len, NULL, 0);
    ck_assert_int_eq(sent_count(5, "n2"), 1);
}
END_TEST

/* A server of the view reachable again (it may have restarted within its lease, its tables
 * lost): this source daemon sends it the open again, not fresh; a node that is not a server of
 * the view hears nothing. */
START_TEST(test_repl_open_again_on_peer_up)
{
    alive_nodes[0] = "n3";
    make_group("lp", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "lp", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    open_ok(&w0, &spec);
    ps_table_t *t = ps_table_find(d.ps, 1000, "lp", "w", 1);
    ck_assert_ptr_nonnull(t);
    ps_view_t v = view_of(t->view + 1, "local,n3", 2);
    ps_repl_view_changed(d.ps, 1000, "lp", 1, "w", &v);
    sent_clear();
    ps_repl_peer_up(d.ps, "n9");
    ck_assert_int_eq(sent_count(1, NULL), 0);
    ps_repl_peer_up(d.ps, "n3");
    sent_t *o = sent_find(1, "n3", 0);
    ck_assert_ptr_nonnull(o);
    o->at += 8 + 8 + 4; /* req, count, vnodes */
    o->at += 1 + o->header[o->at]; /* rule */
    o->at += 1 + o->header[o->at]; /* sync */
    ck_assert_uint_eq(sent_get(o, 8), t->view);
    ck_assert_uint_eq(sent_get(o, 4), 2);
    ck_assert_uint_eq(sent_get(o, 1), 0); /* not fresh: its shards come as copies */
    ck_assert_int_eq(sent_count(1, NULL), 1);
}
END_TEST

/* An update of a table this daemon does not have (it restarted and lost it) is answered
 * -ESTALE, not dropped in silence (its source would resend it for ever); the source, told so by
 * the primary of its view, sends that server the open again (not fresh). */
START_TEST(test_repl_update_of_table_not_here)
{
    alive_nodes[0] = "n3";
    msg_t m;
    msg_update_of(&m, 4, 0, 9, 0); /* table "t" of group "rr": not here */
    ps_msg_recv(d.ps, "n2", m.b, m.len, three, sizeof(three));
    sent_t *a = sent_find(5, "n2", 0);
    ck_assert_ptr_nonnull(a);
    uint64_t seq;
    int rc;
    update_ack_of(a, &seq, &rc);
    ck_assert_uint_eq(seq, 9);
    ck_assert_int_eq(rc, -ESTALE);
    /* the source's side */
    make_group("lp", 1000, 1, LAUNCH_SYNC_BSP, 0, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "lp", &o0);
    ps_table_spec_t spec = spec_of("w", N, "add", "bsp");
    open_ok(&w0, &spec);
    ps_table_t *t = ps_table_find(d.ps, 1000, "lp", "w", 1);
    ck_assert_ptr_nonnull(t);
    ps_view_t v = view_of(t->view + 1, "local,n3", 2);
    ps_repl_view_changed(d.ps, 1000, "lp", 1, "w", &v);
    uint32_t s = shard_where(t, 0); /* primary n3 */
    sent_clear();
    msg_begin(&m, 5, 1000, 1, "lp", "w");
    msg_put(&m, s, 4);
    msg_put(&m, 0, 4);
    msg_put(&m, 1, 8);
    msg_put(&m, (uint64_t)(uint32_t)-ESTALE, 4);
    ps_msg_recv(d.ps, "n3", m.b, m.len, NULL, 0);
    sent_t *o = sent_find(1, "n3", 0);
    ck_assert_ptr_nonnull(o);
    o->at += 8 + 8 + 4;
    o->at += 1 + o->header[o->at];
    o->at += 1 + o->header[o->at];
    ck_assert_uint_eq(sent_get(o, 8), t->view);
    sent_get(o, 4);
    ck_assert_uint_eq(sent_get(o, 1), 0); /* not fresh: never empty shards */
}
END_TEST

/* A fail-over (the primary n3 dead): a standby here hands its state to the shard's new
 * primary n4, which may hold nothing (its own copy was on its way): n4 takes it only while it
 * waits for one. */
START_TEST(test_repl_failover_handover_from_standby)
{
    alive_nodes[0] = "n3";
    alive_nodes[1] = "n4";
    ps_table_t *t = open_replicated("local,n3,n4", 3);
    uint8_t was_n3[64] = {0};
    for (uint32_t i = 0; i < t->layout.shards; i++)
        was_n3[i] = strcmp(ps_table_primary(t, i), "n3") == 0;
    alive_nodes[0] = "n4";
    alive_nodes[1] = NULL;
    sent_clear();
    ps_view_t v = view_of(2, "local,n4", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v);
    int want = 0;
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        if (!was_n3[i] || strcmp(ps_table_primary(t, i), "n4") != 0)
            continue;
        want++;
        ck_assert_msg(handover_sent(i, "n4"), "shard %u: no handover to its new primary n4", i);
    }
    ck_assert_int_gt(want, 0);
    /* none from a standby where the old primary lives on (a graceful change: the primary
     * hands over itself) */
    uint8_t mine[64] = {0};
    for (uint32_t i = 0; i < t->layout.shards; i++)
        mine[i] = (uint8_t)ps_repl_is_primary(t, i);
    alive_nodes[1] = "n5";
    sent_clear();
    ps_view_t v3 = view_of(3, "local,n4,n5", 3);
    ps_repl_view_changed(d.ps, 1000, "rr", 7, "t", &v3);
    for (int k = 0; sent_find(18, NULL, k); k++) {
        sent_t *c = sent_find(18, NULL, k);
        uint32_t shard = (uint32_t)sent_get(c, 4);
        c->at += 8; /* req */
        ck_assert(sent_get(c, 1) == 0 || mine[shard]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ps_service");
    TCase *tc = tcase_create("single node");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_bsp_exact_clocks);
    tcase_add_test(tc, test_ssp_bound);
    tcase_add_test(tc, test_asp_never_waits);
    tcase_add_test(tc, test_duplicate_push_once);
    tcase_add_test(tc, test_bad_input_refused);
    tcase_add_test(tc, test_quota_refused);
    tcase_add_test(tc, test_forget_owner_pending_pull);
    tcase_add_test(tc, test_view_and_group_over);
    tcase_add_test(tc, test_messages_untrusted);
    tcase_add_test(tc, test_remote_open_served_here);
    tcase_add_test(tc, test_assign_written_only);
    tcase_add_test(tc, test_update_refused_whole);
    tcase_add_test(tc, test_refused_update_fails_table);
    tcase_add_test(tc, test_failed_table_uncharged);
    tcase_add_test(tc, test_open_ring_agreed);
    tcase_add_test(tc, test_bye_fails_stranded_reads);
    tcase_add_test(tc, test_resends_after_a_lost_message);
    tcase_add_test(tc, test_failed_update_send_resent);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("replicas");
    tcase_add_checked_fixture(tr, repl_setup, repl_teardown);
    tcase_set_timeout(tr, 60);
    tcase_add_test(tr, test_repl_forward_then_ack);
    tcase_add_test(tr, test_repl_standby_and_stale);
    tcase_add_test(tr, test_repl_dead_standby_not_waited);
    tcase_add_test(tr, test_repl_failover_takes_over);
    tcase_add_test(tr, test_repl_copy_to_new_standby);
    tcase_add_test(tr, test_repl_local_source_waits);
    tcase_add_test(tr, test_repl_forward_across_views);
    tcase_add_test(tr, test_repl_joined_server);
    tcase_add_test(tr, test_repl_forward_from_primary_only);
    tcase_add_test(tr, test_repl_state_from_primary_only);
    tcase_add_test(tr, test_repl_handover_to_standby_behind);
    tcase_add_test(tr, test_repl_copy_resent_ack_of_first);
    tcase_add_test(tr, test_repl_open_again_on_peer_up);
    tcase_add_test(tr, test_repl_update_of_table_not_here);
    tcase_add_test(tr, test_repl_failover_handover_from_standby);
    suite_add_tcase(s, tr);
    return check_run_suite(s);
}
