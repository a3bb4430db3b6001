/* ps_cluster: its pure parts, the ring record's JSON (format, parse, every field checked) and
 * the token exchange that makes two members UCX peers (ps_cluster-internal.h); and a daemon
 * without --cluster (a real salusd_t, its loop, groups made as the daemon makes them): self
 * "local", a group's nodes {local: its world}, a ring agreed on the next loop turn (epoch 1).
 * A table's replica set (ps_replicas_rec.c): the view record's JSON, server sets, the
 * fail-over's decisions (who proposes, the grace, the bounded retries), and without a cluster
 * {local}, number 1, R 1.
 * The views against a real etcd: check_ps_cluster_etcd.c (this program's second file). The
 * cluster side proper is tests/cluster/test_cluster_ps.sh's. */
#include "check_run.h"
#include "groups.h"
#include "ps_cluster-internal.h"

#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ps_test_harness.h"

static ps_ring_record_t good(void)
{
    ps_ring_record_t r;
    memset(&r, 0, sizeof(r));
    r.count = 1000;
    snprintf(r.rule, sizeof(r.rule), "sgd:0.05");
    snprintf(r.sync, sizeof(r.sync), "ssp:2");
    snprintf(r.servers, sizeof(r.servers), "n1,n2,n3");
    r.vnodes = 64;
    return r;
}

START_TEST(test_record_round_trip)
{
    ps_ring_record_t r = good(), back;
    char buf[2048], err[200];
    int n = ps_ring_record_format(&r, buf, sizeof(buf), err, sizeof(err));
    ck_assert_int_gt(n, 0);
    ck_assert_uint_eq(strlen(buf), (size_t)n);
    ck_assert_str_eq(buf, "{\"count\":1000,\"rule\":\"sgd:0.05\",\"sync\":\"ssp:2\","
                          "\"servers\":[\"n1\",\"n2\",\"n3\"],\"vnodes\":64}");
    back.epoch = 99;
    ck_assert_int_eq(ps_ring_record_parse(buf, (size_t)n, &back, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.epoch, 0);
    ck_assert_uint_eq(back.count, 1000);
    ck_assert_str_eq(back.rule, "sgd:0.05");
    ck_assert_str_eq(back.sync, "ssp:2");
    ck_assert_str_eq(back.servers, "n1,n2,n3");
    ck_assert_uint_eq(back.vnodes, 64);
    /* one server; a buffer too small */
    snprintf(r.servers, sizeof(r.servers), "only");
    n = ps_ring_record_format(&r, buf, sizeof(buf), err, sizeof(err));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(ps_ring_record_parse(buf, (size_t)n, &back, err, sizeof(err)), 0);
    ck_assert_str_eq(back.servers, "only");
    ck_assert_int_eq(ps_ring_record_format(&r, buf, 20, err, sizeof(err)), -ENOSPC);
}
END_TEST

START_TEST(test_record_check_refuses)
{
    char err[200];
    ps_ring_record_t r = good();
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), 0);
    r.count = 0;
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "count"));
    r = good();
    r.vnodes = 0;
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), -EINVAL);
    r = good();
    r.rule[0] = 0;
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), -EINVAL);
    r = good();
    snprintf(r.sync, sizeof(r.sync), "bsp\"}");
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), -EINVAL);
    const char *bad_servers[] = {"", "n2,n1", "n1,n1", "n1,,n2", "n1,", ",n1", "n 1", "n1,n\"2",
                                 "a/b"};
    for (size_t i = 0; i < sizeof(bad_servers) / sizeof(bad_servers[0]); i++) {
        r = good();
        snprintf(r.servers, sizeof(r.servers), "%s", bad_servers[i]);
        ck_assert_msg(ps_ring_record_check(&r, err, sizeof(err)) == -EINVAL, "servers '%s'",
                      bad_servers[i]);
        char buf[2048];
        ck_assert_int_eq(ps_ring_record_format(&r, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    }
    r = good();
    memset(r.servers, 'a', 64); /* a name of 64 bytes */
    r.servers[64] = 0;
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), -EINVAL);
    r.servers[63] = 0;
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), 0);
    /* "n1" < "n10" (a prefix sorts first) */
    snprintf(r.servers, sizeof(r.servers), "n1,n10,n2");
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), 0);
    snprintf(r.servers, sizeof(r.servers), "n10,n1");
    ck_assert_int_eq(ps_ring_record_check(&r, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(test_record_parse_refuses)
{
    const char *bad[] = {
        "",
        "not json",
        "[1,2]",
        "{\"count\":1000,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"]}",
        "{\"count\":0,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":64}",
        "{\"count\":-5,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":64}",
        "{\"count\":1.5,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":64}",
        "{\"count\":\"10\",\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":64}",
        "{\"count\":99999999999999999999,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],"
        "\"vnodes\":64}",
        "{\"count\":10,\"rule\":7,\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":\"n1\",\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[],\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[1],\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n2\",\"n1\"],"
        "\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"a,b\"],\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":0}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":9999999}",
        "{\"count\":10,\"rule\":\"a rule that is much too long for its field\",\"sync\":\"bsp\","
        "\"servers\":[\"n1\"],\"vnodes\":64}",
        "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[\"n1\"],\"vnodes\":64",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_ring_record_t r;
        char err[200] = "";
        ck_assert_msg(ps_ring_record_parse(bad[i], strlen(bad[i]), &r, err, sizeof(err)) ==
                          -EINVAL, "accepted: %s", bad[i]);
        ck_assert_msg(err[0], "no reason for: %s", bad[i]);
    }
    /* a NUL inside the value */
    const char nul[] = "{\"count\":10,\"rule\":\"add\"\0}";
    ps_ring_record_t r;
    char err[200];
    ck_assert_int_eq(ps_ring_record_parse(nul, sizeof(nul) - 1, &r, err, sizeof(err)), -EINVAL);
    /* too many servers for the field */
    char big[8192];
    size_t at = (size_t)snprintf(big, sizeof(big),
                                 "{\"count\":10,\"rule\":\"add\",\"sync\":\"bsp\",\"servers\":[");
    for (int i = 0; i < 200; i++)
        at += (size_t)snprintf(big + at, sizeof(big) - at, "%s\"node%03d\"", i ? "," : "", i);
    snprintf(big + at, sizeof(big) - at, "],\"vnodes\":64}");
    ck_assert_int_eq(ps_ring_record_parse(big, strlen(big), &r, err, sizeof(err)), -EINVAL);
    /* extra fields are allowed (a later version's) */
    const char extra[] = "{\"count\":10,\"rule\":\"add\",\"sync\":\"asp\",\"servers\":[\"x\"],"
                         "\"vnodes\":8,\"later\":true}";
    ck_assert_int_eq(ps_ring_record_parse(extra, sizeof(extra) - 1, &r, err, sizeof(err)), 0);
    ck_assert_str_eq(r.sync, "asp");
}
END_TEST

/* ---- the token exchange, simulated: two daemons A and B, each with a link it dialed to the
 * other (up or down), hellos in flight per link in order; whatever the order of events, once
 * everything in flight is delivered both hold peers with matching tokens. */

typedef struct hello_s {
    uint64_t token;
    int have;
} hello_t;

typedef struct side_s {
    ps_hello_peer_t p;
    int link_up;                 /* the link this side dialed */
    hello_t q[64];               /* hellos sent on it, not delivered yet */
    int qn;
    int added;
    uint64_t add_send, add_recv;
    uint64_t next_token;
} side_t;

static uint64_t fresh(side_t *s)
{
    return ++s->next_token;
}

static void take(side_t *s, const ps_hello_out_t *out)
{
    if (out->send) {
        ck_assert_msg(s->link_up, "a hello on a link that is down");
        ck_assert_uint_ne(out->send_token, 0);
        ck_assert_int_lt(s->qn, 64);
        s->q[s->qn++] = (hello_t){out->send_token, out->send_have};
    }
    if (out->add) {
        s->added = 1;
        s->add_send = out->add_send;
        s->add_recv = out->add_recv;
    }
}

static void up(side_t *s)
{
    ps_hello_out_t out;
    s->link_up = 1;
    s->qn = 0; /* a new connection: what the old one held is lost */
    ps_hello_link_up(&s->p, fresh(s), &out);
    take(s, &out);
}

static void down(side_t *s)
{
    s->link_up = 0;
    s->qn = 0;
}

/* delivers the first hello in flight from `from` to `to`; 0 when none */
static int deliver(side_t *from, side_t *to)
{
    if (!from->qn)
        return 0;
    hello_t h = from->q[0];
    memmove(from->q, from->q + 1, (size_t)(from->qn - 1) * sizeof(h));
    from->qn--;
    ps_hello_out_t out;
    ps_hello_received(&to->p, h.token, h.have, to->link_up, fresh(to), &out);
    take(to, &out);
    return 1;
}

static void drain(side_t *a, side_t *b)
{
    for (int i = 0; i < 1000 && (a->qn || b->qn); i++) {
        deliver(a, b);
        deliver(b, a);
    }
    ck_assert_int_eq(a->qn + b->qn, 0); /* no endless exchange */
}

static void assert_matched(const side_t *a, const side_t *b)
{
    ck_assert(a->added && b->added);
    ck_assert_uint_eq(a->add_send, b->add_recv);
    ck_assert_uint_eq(b->add_send, a->add_recv);
    ck_assert_uint_eq(a->add_recv, a->p.mine);
    ck_assert_uint_eq(b->add_recv, b->p.mine);
}

static void restart(side_t *s, uint64_t token_base)
{
    memset(s, 0, sizeof(*s));
    s->next_token = token_base;
}

START_TEST(test_exchange_orders)
{
    /* 0: A's link first, delivered before B's link; 1: both links, then deliveries;
     * 2: B's hello reaches A while A's link is still down */
    for (int order = 0; order < 3; order++) {
        side_t a, b;
        restart(&a, 1000);
        restart(&b, 2000);
        if (order == 0) {
            up(&a);
            drain(&a, &b);
            ck_assert(!a.added && !b.added); /* B cannot answer before its link is up */
            up(&b);
        } else if (order == 1) {
            up(&a);
            up(&b);
        } else {
            up(&b);
            drain(&b, &a);
            ck_assert(!a.added);
            up(&a);
        }
        drain(&a, &b);
        assert_matched(&a, &b);
    }
}
END_TEST

START_TEST(test_exchange_restarts)
{
    side_t a, b;
    restart(&a, 1000);
    restart(&b, 2000);
    up(&a);
    up(&b);
    drain(&a, &b);
    assert_matched(&a, &b);
    for (int round = 0; round < 4; round++) {
        /* B restarts: both links break; they come back in either order, with the new B's
         * hello sometimes delivered before A's link is back */
        restart(&b, 5000 + 1000 * (uint64_t)round);
        down(&a);
        if (round % 2 == 0) {
            up(&b);
            deliver(&b, &a);
            ck_assert(!(a.added && b.added && a.add_send == b.add_recv &&
                        b.add_send == a.add_recv));
            up(&a);
        } else {
            up(&a);
            deliver(&a, &b); /* B's link is not up yet: it answers at its link-up */
            up(&b);
        }
        drain(&a, &b);
        assert_matched(&a, &b);
    }
    /* a blip of one link only: a fresh token, still matched */
    uint64_t old = a.p.mine;
    down(&a);
    up(&a);
    ck_assert_uint_ne(a.p.mine, old);
    drain(&a, &b);
    assert_matched(&a, &b);
}
END_TEST

START_TEST(test_exchange_down_and_again)
{
    side_t a, b;
    restart(&a, 1000);
    restart(&b, 2000);
    up(&a);
    up(&b);
    drain(&a, &b);
    assert_matched(&a, &b);
    /* A's sends to B failed: A asks B again over its link (B's link never broke) */
    ps_hello_out_t out;
    a.added = 0;
    ps_hello_down(&a.p, 1, fresh(&a), &out);
    ck_assert(out.send && !out.send_have && !out.add);
    take(&a, &out);
    drain(&a, &b);
    assert_matched(&a, &b);
    /* B gone (link down): nothing sent; back only with a new exchange */
    a.added = 0;
    down(&a);
    ps_hello_down(&a.p, 0, 0, &out);
    ck_assert(!out.send && !out.add);
    ck_assert_uint_eq(a.p.mine, 0);
    ck_assert_uint_eq(a.p.theirs, 0);
    restart(&b, 9000);
    up(&b);
    drain(&a, &b);
    ck_assert(!a.added);
    up(&a);
    drain(&a, &b);
    assert_matched(&a, &b);
}
END_TEST

START_TEST(test_token_nonzero_and_random)
{
    uint64_t t1 = ps_cluster_token(), t2 = ps_cluster_token();
    ck_assert_uint_ne(t1, 0);
    ck_assert_uint_ne(t2, 0);
    ck_assert_uint_ne(t1, t2);
}
END_TEST

/* ---- the view record, server sets, the fail-over's decisions -------------------------------- */

static ps_view_t view_of(const char *servers, uint32_t replicas)
{
    ps_view_t v;
    memset(&v, 0, sizeof(v));
    snprintf(v.servers, sizeof(v.servers), "%s", servers);
    v.replicas = replicas;
    return v;
}

START_TEST(test_view_round_trip)
{
    ps_view_t v = view_of("n1,n2,n3", 3), back;
    v.number = 42; /* not in the value */
    char buf[2048], err[200];
    int n = ps_replicas_format(&v, buf, sizeof(buf), err, sizeof(err));
    ck_assert_int_gt(n, 0);
    ck_assert_uint_eq(strlen(buf), (size_t)n);
    ck_assert_str_eq(buf, "{\"servers\":[\"n1\",\"n2\",\"n3\"],\"replicas\":3}");
    back.number = 7;
    ck_assert_int_eq(ps_replicas_parse(buf, (size_t)n, &back, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.number, 0);
    ck_assert_str_eq(back.servers, "n1,n2,n3");
    ck_assert_uint_eq(back.replicas, 3);
    /* the other order of the fields, spaces: the same view */
    const char *other = " { \"replicas\" : 1 , \"servers\" : [ \"a.b-c_d\" ] } ";
    ck_assert_int_eq(ps_replicas_parse(other, strlen(other), &back, err, sizeof(err)), 0);
    ck_assert_str_eq(back.servers, "a.b-c_d");
    ck_assert_uint_eq(back.replicas, 1);
    /* R may exceed the server count (bounded when placing) */
    v = view_of("only", PS_MAX_REPLICAS);
    n = ps_replicas_format(&v, buf, sizeof(buf), err, sizeof(err));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(ps_replicas_parse(buf, (size_t)n, &back, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.replicas, PS_MAX_REPLICAS);
    ck_assert_int_eq(ps_replicas_format(&v, buf, 12, err, sizeof(err)), -ENOSPC);
}
END_TEST

START_TEST(test_view_check_refuses)
{
    char buf[2048], err[200];
    const struct {
        const char *servers;
        uint32_t replicas;
    } bad[] = {
        {"n1,n2", 0}, {"n1,n2", PS_MAX_REPLICAS + 1}, {"", 1}, {"n2,n1", 1}, {"n1,n1", 1},
        {"n1,,n2", 1}, {"n1,", 1}, {",n1", 1}, {"n 1", 1}, {"n/1", 1}, {"n\"1", 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_view_t v = view_of(bad[i].servers, bad[i].replicas);
        err[0] = 0;
        ck_assert_msg(ps_replicas_check(&v, err, sizeof(err)) == -EINVAL, "case %zu", i);
        ck_assert_msg(err[0] != 0, "case %zu has no reason", i);
        ck_assert_int_eq(ps_replicas_format(&v, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    }
    /* a name of 64 characters is one too long */
    ps_view_t v = view_of("", 1);
    memset(v.servers, 'a', 64);
    v.servers[64] = 0;
    ck_assert_int_eq(ps_replicas_check(&v, err, sizeof(err)), -EINVAL);
    v.servers[63] = 0;
    ck_assert_int_eq(ps_replicas_check(&v, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_view_parse_refuses)
{
    const char *bad[] = {
        "",
        "[]",
        "{}",
        "nope",
        "{\"servers\":[\"n1\"],\"replicas\":2",               /* cut short */
        "{\"servers\":[\"n1\"],\"replicas\":2} x",            /* something after */
        "{\"servers\":[\"n1\"]}",                              /* no replicas */
        "{\"replicas\":2}",                                     /* no servers */
        "{\"servers\":[\"n1\"],\"replicas\":0}",
        "{\"servers\":[\"n1\"],\"replicas\":9}",
        "{\"servers\":[\"n1\"],\"replicas\":-1}",
        "{\"servers\":[\"n1\"],\"replicas\":2.5}",
        "{\"servers\":[\"n1\"],\"replicas\":\"2\"}",
        "{\"servers\":[\"n1\"],\"replicas\":99999999999999999999}",
        "{\"servers\":\"n1\",\"replicas\":2}",
        "{\"servers\":[],\"replicas\":2}",
        "{\"servers\":[1],\"replicas\":2}",
        "{\"servers\":[\"n2\",\"n1\"],\"replicas\":2}",      /* not sorted */
        "{\"servers\":[\"n1\",\"n1\"],\"replicas\":2}",      /* twice */
        "{\"servers\":[\"n1,n2\"],\"replicas\":2}",           /* a comma inside */
        "{\"servers\":[\"n 1\"],\"replicas\":2}",
        "{\"servers\":[\"\"],\"replicas\":2}",
        "{\"servers\":[\"n1\"],\"replicas\":2,\"extra\":1}", /* an unknown field */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_view_t v;
        char err[200] = "";
        v.number = 5;
        ck_assert_msg(ps_replicas_parse(bad[i], strlen(bad[i]), &v, err, sizeof(err)) == -EPROTO,
                      "case %zu (%s)", i, bad[i]);
        ck_assert_msg(err[0] != 0, "case %zu has no reason", i);
        ck_assert_uint_eq(v.number, 0);
        ck_assert_str_eq(v.servers, "");
    }
    /* a NUL inside; too many names for the buffer */
    ps_view_t v;
    char err[200];
    const char nul[] = "{\"servers\":[\"n1\"],\"replicas\":2}\0";
    ck_assert_int_eq(ps_replicas_parse(nul, sizeof(nul), &v, err, sizeof(err)), -EPROTO);
    static char big[8192];
    size_t at = (size_t)snprintf(big, sizeof(big), "{\"replicas\":1,\"servers\":[");
    for (int i = 0; i < 200; i++)
        at += (size_t)snprintf(big + at, sizeof(big) - at, "%s\"node%03d\"", i ? "," : "", i);
    at += (size_t)snprintf(big + at, sizeof(big) - at, "]}");
    ck_assert_int_eq(ps_replicas_parse(big, at, &v, err, sizeof(err)), -EPROTO);
}
END_TEST

START_TEST(test_servers_sets)
{
    char out[64];
    ck_assert_int_eq(ps_replicas_has("n1,n2,n3", "n2"), 1);
    ck_assert_int_eq(ps_replicas_has("n1,n2,n3", "n"), 0);
    ck_assert_int_eq(ps_replicas_has("n1,n2,n3", "n22"), 0);
    ck_assert_int_eq(ps_replicas_has("n1,n2,n3", "n1,n2"), 0);
    ck_assert_int_eq(ps_replicas_has("", "n1"), 0);
    ck_assert_int_eq(ps_replicas_has("n1", NULL), 0);
    ck_assert_uint_eq(ps_replicas_count("n1,n2,n3"), 3);
    ck_assert_uint_eq(ps_replicas_count("n1"), 1);
    ck_assert_uint_eq(ps_replicas_count(""), 0);
    /* added in order: first, middle, last */
    ck_assert_int_eq(ps_replicas_with("n2,n4", "n1", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n1,n2,n4");
    ck_assert_int_eq(ps_replicas_with("n2,n4", "n3", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n2,n3,n4");
    ck_assert_int_eq(ps_replicas_with("n2,n4", "n5", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n2,n4,n5");
    ck_assert_int_eq(ps_replicas_with("n2", "n10", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n10,n2"); /* byte order, as the ring's */
    ck_assert_int_eq(ps_replicas_with("n2,n4", "n4", out, sizeof(out)), -EEXIST);
    ck_assert_int_eq(ps_replicas_with("n2,n4", "a,b", out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(ps_replicas_with("n2,n4", "", out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(ps_replicas_with("n2,n4", "a/b", out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(ps_replicas_with("n2,n4", NULL, out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(ps_replicas_with("n2,n4", "n3", out, 8), -ENOSPC);
    ck_assert_int_eq(ps_replicas_with("n2,n4", "n3", out, 9), 0);
    /* removed: first, middle, last, the only one */
    ck_assert_int_eq(ps_replicas_without("n1,n2,n3", "n1", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n2,n3");
    ck_assert_int_eq(ps_replicas_without("n1,n2,n3", "n2", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n1,n3");
    ck_assert_int_eq(ps_replicas_without("n1,n2,n3", "n3", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "n1,n2");
    ck_assert_int_eq(ps_replicas_without("n1", "n1", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(ps_replicas_without("n1,n2", "n", out, sizeof(out)), -ENOENT);
    ck_assert_int_eq(ps_replicas_without("n1,n2,n3", "n3", out, 5), -ENOSPC);
}
END_TEST

/* the fail-over: which members live */
static const char *dead_nodes[4];

static int fake_alive(void *ctx, const char *node)
{
    (void)ctx;
    for (int i = 0; i < 4; i++)
        if (dead_nodes[i] && strcmp(dead_nodes[i], node) == 0)
            return 0;
    return 1;
}

#define MS 1000000ull

START_TEST(test_failover_first_live_proposes)
{
    ps_view_t v = view_of("n1,n2,n3,n4", 3);
    v.number = 100;
    char out[PS_VIEW_SERVERS_BYTES], gone[PS_VIEW_SERVERS_BYTES];
    ps_replicas_failover_t f1 = {0}, f2 = {0};
    memset(dead_nodes, 0, sizeof(dead_nodes));
    /* every server lives: nothing */
    ck_assert_int_eq(ps_replicas_failover_step(&f1, &v, "n1", fake_alive, NULL, 1000 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    ck_assert_str_eq(gone, "");
    /* n3 dies: n1 (the first live) proposes n1,n2,n4 at once; n2 waits */
    dead_nodes[0] = "n3";
    ck_assert_int_eq(ps_replicas_failover_step(&f1, &v, "n1", fake_alive, NULL, 2000 * MS, out,
                                               sizeof(out), gone, sizeof(gone)),
                     PS_FAILOVER_PROPOSE);
    ck_assert_str_eq(out, "n1,n2,n4");
    ck_assert_str_eq(gone, "n3");
    ck_assert_int_eq(ps_replicas_failover_step(&f2, &v, "n2", fake_alive, NULL, 2000 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    ck_assert_str_eq(gone, "n3");
    /* n1 has one in flight: no second one */
    ck_assert_int_eq(ps_replicas_failover_step(&f1, &v, "n1", fake_alive, NULL, 2001 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    /* n1 dies too: n2 is the first live one now and proposes without both */
    dead_nodes[1] = "n1";
    ck_assert_int_eq(ps_replicas_failover_step(&f2, &v, "n2", fake_alive, NULL, 2100 * MS, out,
                                               sizeof(out), gone, sizeof(gone)),
                     PS_FAILOVER_PROPOSE);
    ck_assert_str_eq(out, "n2,n4");
    ck_assert_str_eq(gone, "n1,n3");
    /* it won: the new view has no dead server, nothing more */
    ps_replicas_failover_result(&f2, 0, 2200 * MS);
    ps_view_t w = view_of("n2,n4", 3);
    w.number = 130;
    ck_assert_int_eq(ps_replicas_failover_step(&f2, &w, "n2", fake_alive, NULL, 2300 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    ck_assert_uint_eq(f2.tries, 0);
    ck_assert_uint_eq(f2.dead_since_ns, 0);
    /* a watcher that is not in the view (a worker's daemon) never goes first */
    ps_replicas_failover_t f5 = {0};
    ck_assert_int_eq(ps_replicas_failover_step(&f5, &v, "n5", fake_alive, NULL, 2000 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    /* no live server would remain: nothing (a view is never empty) */
    ps_view_t lone = view_of("n3", 1);
    lone.number = 9;
    ps_replicas_failover_t f6 = {0};
    ck_assert_int_eq(ps_replicas_failover_step(&f6, &lone, "n5", fake_alive, NULL, 9000 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    ck_assert_int_eq(ps_replicas_failover_step(&f6, &lone, "n5", fake_alive, NULL, 99000 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    /* no view read yet */
    ps_view_t none = view_of("n1,n3", 1);
    ck_assert_int_eq(ps_replicas_failover_step(&f6, &none, "n1", fake_alive, NULL, 1 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
}
END_TEST

START_TEST(test_failover_grace_then_anyone)
{
    ps_view_t v = view_of("n1,n2,n3", 3);
    v.number = 50;
    char out[PS_VIEW_SERVERS_BYTES], gone[PS_VIEW_SERVERS_BYTES];
    ps_replicas_failover_t f = {0};
    memset(dead_nodes, 0, sizeof(dead_nodes));
    dead_nodes[0] = "n3";
    uint64_t t0 = 5000 * MS;
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n2", fake_alive, NULL, t0, out, sizeof(out),
                                               gone, sizeof(gone)), PS_FAILOVER_NONE);
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n2", fake_alive, NULL,
                                               t0 + (PS_FAILOVER_GRACE_MS - 1) * MS, out,
                                               sizeof(out), gone, sizeof(gone)),
                     PS_FAILOVER_NONE);
    /* n1 did not change it within the grace: n2 proposes */
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n2", fake_alive, NULL,
                                               t0 + PS_FAILOVER_GRACE_MS * MS, out, sizeof(out),
                                               gone, sizeof(gone)),
                     PS_FAILOVER_PROPOSE);
    ck_assert_str_eq(out, "n1,n2");
}
END_TEST

START_TEST(test_failover_lost_retries_bounded)
{
    char out[PS_VIEW_SERVERS_BYTES], gone[PS_VIEW_SERVERS_BYTES];
    ps_replicas_failover_t f = {0};
    memset(dead_nodes, 0, sizeof(dead_nodes));
    dead_nodes[0] = "n9";
    uint64_t now = 1000 * MS, number = 10;
    /* each proposal loses (another daemon changes the view, n9 still in it): tried again on
     * each newer view, PS_FAILOVER_MAX_TRIES times */
    for (int i = 0; i < PS_FAILOVER_MAX_TRIES; i++) {
        ps_view_t v = view_of("n1,n9", 2);
        v.number = number++;
        ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL, now, out,
                                                   sizeof(out), gone, sizeof(gone)),
                         PS_FAILOVER_PROPOSE);
        ck_assert_str_eq(out, "n1");
        ps_replicas_failover_result(&f, -ESTALE, now);
        now += MS;
    }
    ps_view_t v = view_of("n1,n9", 2);
    v.number = number;
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL, now, out,
                                               sizeof(out), gone, sizeof(gone)),
                     PS_FAILOVER_GIVE_UP);
    /* once: then nothing for that view */
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL, now + 100 * MS, out,
                                               sizeof(out), gone, sizeof(gone)), PS_FAILOVER_NONE);
    /* another daemon's change (a newer view, n9 still in it): tried again */
    v.number++;
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL, now + 200 * MS, out,
                                               sizeof(out), gone, sizeof(gone)),
                     PS_FAILOVER_PROPOSE);
}
END_TEST

START_TEST(test_failover_etcd_error_waits)
{
    char out[PS_VIEW_SERVERS_BYTES], gone[PS_VIEW_SERVERS_BYTES];
    ps_replicas_failover_t f = {0};
    memset(dead_nodes, 0, sizeof(dead_nodes));
    dead_nodes[0] = "n2";
    ps_view_t v = view_of("n1,n2", 2);
    v.number = 3;
    uint64_t now = 1000 * MS;
    /* etcd unreachable, many times: never given up, each try PS_FAILOVER_RETRY_MS apart */
    for (int i = 0; i < 3 * PS_FAILOVER_MAX_TRIES; i++) {
        ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL, now, out,
                                                   sizeof(out), gone, sizeof(gone)),
                         PS_FAILOVER_PROPOSE);
        ps_replicas_failover_result(&f, -EHOSTUNREACH, now);
        ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL,
                                                   now + (PS_FAILOVER_RETRY_MS - 1) * MS, out,
                                                   sizeof(out), gone, sizeof(gone)),
                         PS_FAILOVER_NONE);
        now += PS_FAILOVER_RETRY_MS * MS;
    }
    /* the member comes back (a new lease under its name) before the view changed: nothing */
    dead_nodes[0] = NULL;
    ck_assert_int_eq(ps_replicas_failover_step(&f, &v, "n1", fake_alive, NULL, now, out,
                                               sizeof(out), gone, sizeof(gone)),
                     PS_FAILOVER_NONE);
    ck_assert_uint_eq(f.tries, 0);
}
END_TEST

/* ---- a daemon without a cluster --------------------------------------------------------- */

static void local_setup(void)
{
    harness_init();
    d.base = event_base_new();
    ck_assert_ptr_nonnull(d.base);
    ck_assert_int_eq(ps_cluster_start(&d, NULL, NULL), 0);
}

static void local_teardown(void)
{
    ps_cluster_stop(&d);
    groups_fini(&d);
    event_base_free(d.base);
}

static uint64_t make_group(const char *name, uint32_t world)
{
    return harness_group(name, 1000, world, 0, (groups_fields_t){.sync = LAUNCH_SYNC_BSP});
}

typedef struct agreed_s {
    int called, rc;
    ps_ring_record_t rec;
} agreed_t;

static void on_agreed(void *arg, int rc, const char *err, const ps_ring_record_t *rec)
{
    agreed_t *a = arg;
    (void)err;
    a->called++;
    a->rc = rc;
    if (rec)
        a->rec = *rec;
}

static void run_loop(void)
{
    for (int i = 0; i < 20; i++)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

START_TEST(test_local_self_and_net)
{
    ck_assert_str_eq(ps_cluster_self(&d), "local");
    ck_assert_ptr_null(ps_cluster_net(&d));
    ck_assert_int_eq(ps_cluster_reachable(&d, "local"), 1);
    ck_assert_int_eq(ps_cluster_reachable(&d, "n2"), 0);
    ck_assert_int_eq(ps_cluster_reachable(&d, NULL), 0);
    ps_cluster_send_failed(&d, "n2", -EIO); /* nothing to do: no crash */
    ps_cluster_ring_forget(&d, 1000, "g");
}
END_TEST

START_TEST(test_local_group_nodes)
{
    uint64_t id = make_group("g", 3);
    const char *nodes[4] = {0};
    uint32_t ranks[4] = {0};
    ck_assert_uint_eq(ps_cluster_group_nodes(&d, id, nodes, ranks, 4), 1);
    ck_assert_str_eq(nodes[0], "local");
    ck_assert_uint_eq(ranks[0], 3);
    ck_assert_uint_eq(ps_cluster_group_nodes(&d, id, nodes, ranks, 0), 0);
    ck_assert_uint_eq(ps_cluster_group_nodes(&d, id + 99, nodes, ranks, 4), 0);
    for (uint32_t r = 0; r < 3; r++)
        ck_assert_int_eq(ps_cluster_local_index(&d, id, r), (int)r);
    ck_assert_int_eq(ps_cluster_local_index(&d, id, 3), -1);
    ck_assert_int_eq(ps_cluster_local_index(&d, id + 99, 0), -1);
}
END_TEST

START_TEST(test_local_agree_next_turn)
{
    ps_ring_record_t want = good();
    snprintf(want.servers, sizeof(want.servers), "local");
    want.epoch = 77; /* ignored: the agreed record's epoch is 1 */
    agreed_t a = {0};
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "w", &want, on_agreed, &a), 0);
    ck_assert_int_eq(a.called, 0); /* never from inside the call */
    run_loop();
    ck_assert_int_eq(a.called, 1);
    ck_assert_int_eq(a.rc, 0);
    ck_assert_uint_eq(a.rec.epoch, 1);
    ck_assert_uint_eq(a.rec.count, want.count);
    ck_assert_str_eq(a.rec.rule, want.rule);
    ck_assert_str_eq(a.rec.sync, want.sync);
    ck_assert_str_eq(a.rec.servers, "local");
    ck_assert_uint_eq(a.rec.vnodes, want.vnodes);
    run_loop();
    ck_assert_int_eq(a.called, 1); /* once */
}
END_TEST

START_TEST(test_local_agree_refuses)
{
    ps_ring_record_t want = good();
    agreed_t a = {0};
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "a/b", "w", &want, on_agreed, &a), -EINVAL);
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "", "w", &want, on_agreed, &a), -EINVAL);
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "w/x", &want, on_agreed, &a), -EINVAL);
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "", &want, on_agreed, &a), -EINVAL);
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "w", NULL, on_agreed, &a), -EINVAL);
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "w", &want, NULL, &a), -EINVAL);
    want.count = 0;
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "w", &want, on_agreed, &a), -EINVAL);
    run_loop();
    ck_assert_int_eq(a.called, 0);
}
END_TEST

START_TEST(test_local_stop_cancels)
{
    ps_ring_record_t want = good();
    agreed_t a = {0}, b = {0};
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "w", &want, on_agreed, &a), 0);
    ck_assert_int_eq(ps_cluster_ring_agree(&d, 1000, "g", "v", &want, on_agreed, &b), 0);
    ps_cluster_stop(&d); /* no callback after it; nothing leaks (the sanitizer build) */
    run_loop();
    ck_assert_int_eq(a.called + b.called, 0);
}
END_TEST

/* views without a cluster: {self}, number 1, R 1, never changing */
typedef struct seen_s {
    int called;
    uid_t uid;
    char group[64], table[64];
    uint64_t epoch;
    ps_view_t view;
} seen_t;

static void on_view_changed(void *ctx, uid_t uid, const char *group, uint64_t epoch,
                            const char *table, const ps_view_t *view)
{
    seen_t *s = ctx;
    s->called++;
    s->uid = uid;
    snprintf(s->group, sizeof(s->group), "%s", group);
    snprintf(s->table, sizeof(s->table), "%s", table);
    s->epoch = epoch;
    s->view = *view;
}

typedef struct viewed_s {
    int called, rc;
    ps_view_t view;
} viewed_t;

static void on_viewed(void *arg, int rc, const char *err, const ps_view_t *view)
{
    viewed_t *a = arg;
    (void)err;
    a->called++;
    a->rc = rc;
    if (view)
        a->view = *view;
}

START_TEST(test_local_view_watch)
{
    seen_t seen = {0};
    ps_cluster_hooks_t hooks = {.view_changed = on_view_changed};
    ck_assert_int_eq(ps_cluster_start(&d, &hooks, &seen), 0);
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 1, "w"), 0);
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 1, "w"), 0); /* idempotent */
    ck_assert_int_eq(seen.called, 0); /* never from inside the call */
    run_loop();
    ck_assert_int_eq(seen.called, 1);
    ck_assert_uint_eq(seen.uid, 1000);
    ck_assert_str_eq(seen.group, "g");
    ck_assert_str_eq(seen.table, "w");
    ck_assert_uint_eq(seen.epoch, 1);
    ck_assert_uint_eq(seen.view.number, 1);
    ck_assert_str_eq(seen.view.servers, "local");
    ck_assert_uint_eq(seen.view.replicas, 1);
    run_loop();
    ck_assert_int_eq(seen.called, 1); /* it never changes */
    /* unwatched before its turn: no call; watched again: called again */
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 1, "v"), 0);
    ps_replicas_unwatch(&d, 1000, "g", 1, "v");
    run_loop();
    ck_assert_int_eq(seen.called, 1);
    ps_replicas_unwatch(&d, 1000, "g", 1, "w");
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 1, "w"), 0);
    run_loop();
    ck_assert_int_eq(seen.called, 2);
    ps_replicas_unwatch(&d, 1000, "g", 1, "nothing"); /* not watched: nothing */
    /* bad arguments */
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "a/b", 1, "w"), -EINVAL);
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 0, "w"), -EINVAL);
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 1, ""), -EINVAL);
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, NULL, 1, "w"), -EINVAL);
    /* stopped with a view not handed yet: no call after it */
    ck_assert_int_eq(ps_replicas_watch(&d, 1000, "g", 1, "late"), 0);
    ps_cluster_stop(&d);
    run_loop();
    ck_assert_int_eq(seen.called, 2);
}
END_TEST

START_TEST(test_local_view_create_propose)
{
    viewed_t a = {0};
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "w", "n1,n2", 3, on_viewed, &a), 0);
    ck_assert_int_eq(a.called, 0);
    run_loop();
    ck_assert_int_eq(a.called, 1);
    ck_assert_int_eq(a.rc, 0);
    ck_assert_uint_eq(a.view.number, 1);
    ck_assert_str_eq(a.view.servers, "local");
    ck_assert_uint_eq(a.view.replicas, 1);
    run_loop();
    ck_assert_int_eq(a.called, 1);
    /* refused: bad servers, R, names, no callback */
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "w", "n2,n1", 3, on_viewed, &a),
                     -EINVAL);
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "w", "n1", 0, on_viewed, &a),
                     -EINVAL);
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "w", "n1",
                                        PS_MAX_REPLICAS + 1, on_viewed, &a), -EINVAL);
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "w/x", "n1", 1, on_viewed, &a),
                     -EINVAL);
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "w", "n1", 1, NULL, &a), -EINVAL);
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 0, "w", "n1", 1, on_viewed, &a),
                     -EINVAL);
    /* a view never changes without a cluster */
    ck_assert_int_eq(ps_replicas_propose(&d, 1000, "g", 1, "w", 1, "local,n2", on_viewed,
                                         &a), -EOPNOTSUPP);
    ck_assert_int_eq(ps_replicas_propose(&d, 1000, "g", 1, "w", 1, "n2,n1", on_viewed, &a),
                     -EINVAL);
    ck_assert_int_eq(ps_replicas_propose(&d, 1000, "g", 1, "w", 0, "n1", on_viewed, &a),
                     -EINVAL);
    run_loop();
    ck_assert_int_eq(a.called, 1);
    /* members: self only */
    ck_assert_int_eq(ps_replicas_member_alive(&d, "local"), 1);
    ck_assert_int_eq(ps_replicas_member_alive(&d, "n2"), 0);
    ck_assert_int_eq(ps_replicas_member_alive(&d, NULL), 0);
    /* a create in flight when the service stops: no callback */
    viewed_t b = {0};
    ck_assert_int_eq(ps_replicas_create(&d, 1000, "g", 1, "v", "n1", 1, on_viewed, &b), 0);
    ps_cluster_stop(&d);
    run_loop();
    ck_assert_int_eq(b.called, 0);
}
END_TEST

TCase *ps_cluster_etcd_tcase(void); /* check_ps_cluster_etcd.c: the views in a real etcd */

static Suite *ps_cluster_suite(void)
{
    Suite *s = suite_create("ps_cluster");
    TCase *tc = tcase_create("record");
    tcase_add_test(tc, test_record_round_trip);
    tcase_add_test(tc, test_record_check_refuses);
    tcase_add_test(tc, test_record_parse_refuses);
    suite_add_tcase(s, tc);
    TCase *vw = tcase_create("view");
    tcase_add_test(vw, test_view_round_trip);
    tcase_add_test(vw, test_view_check_refuses);
    tcase_add_test(vw, test_view_parse_refuses);
    tcase_add_test(vw, test_servers_sets);
    tcase_add_test(vw, test_failover_first_live_proposes);
    tcase_add_test(vw, test_failover_grace_then_anyone);
    tcase_add_test(vw, test_failover_lost_retries_bounded);
    tcase_add_test(vw, test_failover_etcd_error_waits);
    suite_add_tcase(s, vw);
    TCase *ex = tcase_create("exchange");
    tcase_add_test(ex, test_exchange_orders);
    tcase_add_test(ex, test_exchange_restarts);
    tcase_add_test(ex, test_exchange_down_and_again);
    tcase_add_test(ex, test_token_nonzero_and_random);
    suite_add_tcase(s, ex);
    TCase *local = tcase_create("no cluster");
    tcase_add_checked_fixture(local, local_setup, local_teardown);
    tcase_add_test(local, test_local_self_and_net);
    tcase_add_test(local, test_local_group_nodes);
    tcase_add_test(local, test_local_agree_next_turn);
    tcase_add_test(local, test_local_agree_refuses);
    tcase_add_test(local, test_local_stop_cancels);
    tcase_add_test(local, test_local_view_watch);
    tcase_add_test(local, test_local_view_create_propose);
    suite_add_tcase(s, local);
    suite_add_tcase(s, ps_cluster_etcd_tcase());
    return s;
}

int main(void)
{
    return check_run_suite(ps_cluster_suite());
}
