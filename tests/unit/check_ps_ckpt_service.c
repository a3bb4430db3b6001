/* check_ps_ckpt's second part: restore and the checkpoint messages inside the service, on a
 * single node (no cluster): a real salusd_t with its loop, groups made as the daemon makes
 * them, a state directory of the test's own. A restored group's table starts at the file's
 * clock with its values (bit for bit), its workers at that clock; a missing, foreign or
 * mismatched file fails the open with a clear error; a shard is loaded once (the same load
 * again is a no-op, another state is refused); malformed checkpoint messages are dropped. */
#include "groups.h"
#include "ps-internal.h"
#include "ps.h"
#include "ps_ckpt.h"
#include "ps_ckpt_file.h"
#include "ps_msg-internal.h"

#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HARNESS_ERR_SIZE 512 /* messages name the state files */
#include "ps_test_harness.h"

static char state_dir[64];

static void setup(void)
{
    harness_init();
    snprintf(state_dir, sizeof(state_dir), "/tmp/check_ps_ckpt_svc.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(state_dir));
    snprintf(d.config.state_dir, sizeof(d.config.state_dir), "%s", state_dir);
    harness_start();
}

static void teardown(void)
{
    harness_stop();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Ranks 0 .. world-1 of group `name` as jobs[0 ..], restored or not; the group's id. */
static uint64_t make_group(const char *name, uint32_t world, int restore)
{
    uint64_t id = harness_group(name, 1000, world, 0,
                                (groups_fields_t){.sync = LAUNCH_SYNC_BSP, .restore = restore});
    ck_assert_int_eq(groups_restored(&d, id), restore);
    return id;
}

static ps_table_spec_t spec_of(const char *name, uint64_t count, const char *rule)
{
    ps_table_spec_t s;
    memset(&s, 0, sizeof(s));
    char err[128];
    snprintf(s.name, sizeof(s.name), "%s", name);
    s.count = count;
    ck_assert_int_eq(ps_rule_parse(rule, &s.rule, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_sync_parse("bsp", &s.sync, err, sizeof(err)), 0);
    return s;
}

/* Opens; rc the open's outcome (the callback's, or the call's own), err its message. */
static int open_table(const ps_worker_t *w, const ps_table_spec_t *spec, uint64_t *handle,
                      char *err, size_t err_size)
{
    result_t r = {0};
    return harness_outcome(ps_open(&d, w, spec, handle, on_done, &r, err, err_size), &r, err,
                           err_size);
}

/* The checkpoint of table `name` of group g at clock with count values (value i = i * 0.25
 * - 3, and -0.0 first), as salusctl checkpoint writes it. */
static void write_ckpt(const char *group, const char *name, uint64_t count, const char *rule,
                       uint64_t clock, float *values)
{
    ps_ckpt_header_t h = {.uid = 1000, .count = count, .clock = clock};
    snprintf(h.group, sizeof(h.group), "%s", group);
    snprintf(h.table, sizeof(h.table), "%s", name);
    snprintf(h.rule, sizeof(h.rule), "%s", rule);
    snprintf(h.sync, sizeof(h.sync), "bsp");
    for (uint64_t i = 0; i < count; i++)
        values[i] = (float)i * 0.25f - 3.0f;
    values[0] = -0.0f;
    char path[512], err[512];
    ck_assert_int_eq(ps_ckpt_path(path, sizeof(path), state_dir, 1000, group, name), 0);
    ck_assert_msg(ps_ckpt_write(path, &h, values, err, sizeof(err)) == 0, "%s", err);
}

#define N 1000

START_TEST(test_restore_starts_at_clock)
{
    make_group("rg", 2, 1);
    int o0, o1;
    ps_worker_t w0 = worker_of(0, "rg", &o0), w1 = worker_of(1, "rg", &o1);
    float saved[N], got[N];
    write_ckpt("rg", "w", N, "add", 7, saved);
    ps_table_spec_t spec = spec_of("w", N, "add");
    uint64_t h0 = 0, h1 = 0;
    char err[512] = "";
    ck_assert_msg(open_table(&w0, &spec, &h0, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(open_table(&w1, &spec, &h1, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ps_ckpt_start_clock(&d, h0), 7); /* the open's reply says it */
    /* a read at clock 7 sees the file's values, done 7, at once */
    result_t r = {0};
    ck_assert_int_eq(ps_pull(&d, &w0, h0, 7, 0, N, got, on_pull, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_uint_eq(r.read.done, 7);
    ck_assert_int_eq(memcmp(got, saved, sizeof(got)), 0);
    /* the workers are at clock 7: a push for clock 0 is refused, one for 7 taken, and the
     * clock's close makes done 8 with the sum added to the restored values */
    float ones[N];
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    ps_push_id_t id = {.rank = 0, .clock = 0, .seq = 1};
    memset(&r, 0, sizeof(r));
    int rc = ps_push(&d, &w0, h0, &id, 0, N, NULL, ones, on_done, &r, err, sizeof(err));
    rc = harness_outcome(rc, &r, err, sizeof(err));
    ck_assert_int_lt(rc, 0);
    for (int k = 0; k < 2; k++) {
        const ps_worker_t *w = k ? &w1 : &w0;
        uint64_t h = k ? h1 : h0;
        ps_push_id_t pid = {.rank = (uint32_t)k, .clock = 7, .seq = 1};
        result_t p = {0}, c = {0};
        ck_assert_int_eq(ps_push(&d, w, h, &pid, 0, N, NULL, ones, on_done, &p, err, sizeof(err)),
                         0);
        wait_for(&p);
        ck_assert_msg(p.rc == 0, "push at clock 7: %s", p.err);
        ck_assert_int_eq(ps_clock(&d, w, h, 7, on_done, &c, err, sizeof(err)), 0);
        wait_for(&c);
        ck_assert_msg(c.rc == 0, "clock 7: %s", c.err);
    }
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(ps_pull(&d, &w1, h1, 8, 0, N, got, on_pull, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_uint_eq(r.read.done, 8);
    for (int i = 0; i < N; i++)
        ck_assert(got[i] == saved[i] + 2.0f);
}
END_TEST

START_TEST(test_restore_errors)
{
    make_group("re", 1, 1);
    int o0;
    ps_worker_t w0 = worker_of(0, "re", &o0);
    float saved[N];
    uint64_t h = 0;
    char err[512] = "";
    /* no file */
    ps_table_spec_t spec = spec_of("nofile", N, "add");
    ck_assert_int_eq(open_table(&w0, &spec, &h, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, "cannot restore group re") && strstr(err, "no checkpoint"), "%s",
                  err);
    /* another count, another rule */
    write_ckpt("re", "w", N, "add", 3, saved);
    spec = spec_of("w", N + 1, "add");
    ck_assert_int_eq(open_table(&w0, &spec, &h, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "its checkpoint has 1000 elements, rule add"), "%s", err);
    spec = spec_of("w", N, "sgd:0.5");
    ck_assert_int_eq(open_table(&w0, &spec, &h, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "the open asks 1000, sgd:0.5"), "%s", err);
    /* a foreign file at the table's place (another group's) */
    char from[512], to[512];
    write_ckpt("other", "f", N, "add", 3, saved);
    ck_assert_int_eq(ps_ckpt_path(from, sizeof(from), state_dir, 1000, "other", "f"), 0);
    ck_assert_int_eq(ps_ckpt_path(to, sizeof(to), state_dir, 1000, "re", "f"), 0);
    ck_assert_int_eq(rename(from, to), 0);
    spec = spec_of("f", N, "add");
    ck_assert_int_eq(open_table(&w0, &spec, &h, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "holds table 'f' of group other"), "%s", err);
    /* a clock beyond what a table can start at (a crafted file: its checksum is right) */
    write_ckpt("re", "far", N, "add", UINT64_MAX, saved);
    spec = spec_of("far", N, "add");
    ck_assert_int_eq(open_table(&w0, &spec, &h, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "at clock 18446744073709551615, beyond"), "%s", err);
    /* the right one still opens, at its clock */
    spec = spec_of("w", N, "add");
    ck_assert_msg(open_table(&w0, &spec, &h, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ps_ckpt_start_clock(&d, h), 3);
}
END_TEST

START_TEST(test_not_restored_starts_at_zero)
{
    make_group("nr", 1, 0);
    int o0;
    ps_worker_t w0 = worker_of(0, "nr", &o0);
    float saved[N];
    write_ckpt("nr", "w", N, "add", 5, saved); /* there, but the group did not ask */
    ps_table_spec_t spec = spec_of("w", N, "add");
    uint64_t h = 0;
    char err[512] = "";
    ck_assert_msg(open_table(&w0, &spec, &h, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ps_ckpt_start_clock(&d, h), 0);
}
END_TEST

/* Group `group` of one rank, not restored, and its table "w" (N elements, add) opened by its
 * worker w (of owner); the table, its handle in h. */
static ps_table_t *open_one(const char *group, const void *owner, ps_worker_t *w, uint64_t *h)
{
    make_group(group, 1, 0);
    *w = worker_of(0, group, owner);
    ps_table_spec_t spec = spec_of("w", N, "add");
    char err[512] = "";
    ck_assert_msg(open_table(w, &spec, h, err, sizeof(err)) == 0, "%s", err);
    ps_table_t *t = ps_table_find(d.ps, 1000, group, "w", 1);
    ck_assert_ptr_nonnull(t);
    return t;
}

START_TEST(test_load_shard_once)
{
    int o0 = 0; /* (its address is the worker's owner) */
    ps_worker_t w0;
    uint64_t h = 0;
    ps_table_t *t = open_one("ls", &o0, &w0, &h);
    char err[512] = "";
    uint64_t first, elems;
    ps_layout_shard(&t->layout, 0, &first, &elems);
    float *v = calloc(elems, sizeof(float));
    for (uint64_t i = 0; i < elems; i++)
        v[i] = (float)i;
    ck_assert_int_eq(ps_ckpt_load_shard(t, 0, 4, v, err, sizeof(err)), 0);
    ck_assert_uint_eq(ps_shard_done(t->shards[0]), 4);
    ck_assert_int_eq(memcmp(ps_shard_values(t->shards[0]), v, elems * sizeof(float)), 0);
    ck_assert_int_eq(ps_ckpt_load_shard(t, 0, 4, v, err, sizeof(err)), 0); /* again: the same */
    v[0] = 42.0f;
    ck_assert_int_eq(ps_ckpt_load_shard(t, 0, 4, v, err, sizeof(err)), -EEXIST);
    ck_assert_msg(strstr(err, "holds another state"), "%s", err);
    ck_assert_int_eq(ps_ckpt_load_shard(t, t->layout.shards, 4, v, err, sizeof(err)), -EINVAL);
    v[1] = INFINITY; /* not finite */
    ck_assert_int_lt(ps_ckpt_load_shard(t, 1, 4, v, err, sizeof(err)), 0);
    ck_assert_uint_eq(ps_shard_done(t->shards[1]), 0); /* unchanged */
    free(v);
}
END_TEST

/* Malformed checkpoint messages from a peer: dropped (counted), nothing changes. */
START_TEST(test_bad_messages_dropped)
{
    int o0 = 0; /* (its address is the worker's owner) */
    ps_worker_t w0;
    uint64_t h = 0;
    ps_table_t *t = open_one("bm", &o0, &w0, &h);
    char err[512] = "";
    ps_t *ps = d.ps;
    static const int types[] = {MSG_SNAP_REQ, MSG_SNAP_REPLY, MSG_SNAP_LOAD, MSG_SNAP_LOAD_ACK,
                                MSG_SNAP_FILE, MSG_SNAP_FILE_ACK, 40};
    float payload[8] = {0};
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        wbuf_t w;
        /* a header cut short after the identity */
        ps_msg_begin(&w, types[k], t);
        uint64_t before = ps->dropped;
        ps_msg_recv(ps, "stranger", w.b, w.len, NULL, 0);
        ck_assert_msg(ps->dropped > before, "type %d: a short header was taken", types[k]);
        /* a full header from a node that is no source of the table (or a reply nobody
         * asked for, an ack of no open) */
        ps_msg_put(&w, 1, 8);
        ps_msg_put(&w, 0, 4);
        ps_msg_put(&w, 3, 8);
        ps_msg_put(&w, 0, 1);
        ps_msg_put_str(&w, "");
        before = ps->dropped;
        ps_msg_recv(ps, "stranger", w.b, w.len, payload, sizeof(payload));
        if (types[k] != MSG_SNAP_REPLY && types[k] != MSG_SNAP_FILE_ACK)
            ck_assert_msg(ps->dropped > before, "type %d from a stranger was taken", types[k]);
    }
    /* a load of the shard from a stranger changed nothing */
    ck_assert_uint_eq(ps_shard_done(t->shards[0]), 0);
    /* the table still works */
    float got[N];
    result_t r = {0};
    ck_assert_int_eq(ps_pull(&d, &w0, h, 0, 0, N, got, on_pull, &r, err, sizeof(err)), 0);
    wait_for(&r);
    ck_assert_int_eq(r.rc, 0);
}
END_TEST

TCase *ps_ckpt_service_tcase(void);
TCase *ps_ckpt_service_tcase(void)
{
    TCase *tc = tcase_create("service");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_restore_starts_at_clock);
    tcase_add_test(tc, test_restore_errors);
    tcase_add_test(tc, test_not_restored_starts_at_zero);
    tcase_add_test(tc, test_load_shard_once);
    tcase_add_test(tc, test_bad_messages_dropped);
    tcase_set_timeout(tc, 60);
    return tc;
}
