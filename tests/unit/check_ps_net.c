/* Unit tests of the parameter servers' data plane (salusd/ps_net*.c) over UCX's tcp transport
 * on the loopback interface: two nets in one process on one event loop exchange addresses and
 * messages of 0 B to 64 MiB that arrive intact and in order; a wrong token, an unknown sender
 * and malformed headers (sent with raw UCP) are dropped and counted; removing a peer and
 * destroying the net fail the pending sends; `sent` is never called inside ps_net_send; and a
 * peer in another process that gets killed makes the sends fail instead of hang; with
 * integrity on, tagged messages arrive and altered, replayed or untagged ones are dropped. Every wait
 * runs the loop in slices up to a deadline. */
#include "check_run.h"
#include "ps_net-internal.h" /* the wire header, to forge malformed ones */
#include "ps_net.h"

#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define MAX_MSGS 512
#define MAX_SENDS 4096
#define MIB (1024 * 1024)

typedef struct got_s {
    char node[PS_NET_NODE_BYTES];
    uint32_t seq; /* the first 4 bytes of the caller's header */
    size_t header_len, payload_len;
    int payload_ok;
} got_t;

typedef struct side_s {
    ps_net_t *net;
    int received;
    got_t got[MAX_MSGS];
    int echo; /* send every message back to its sender */
} side_t;

typedef struct send_rec_s {
    int calls;
    int status;
} send_rec_t;

static struct event_base *base;
static side_t a, b;
static send_rec_t sends[MAX_SENDS];
static int in_send;          /* set while ps_net_send runs */
static int sent_inside_send; /* `sent` called while in_send: must stay 0 */
static size_t check_stride = 1; /* on_recv checks every byte, or every check_stride-th */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint8_t pattern(size_t i, uint32_t seq)
{
    return (uint8_t)(i * 7 + seq * 13 + (i >> 12));
}

static void on_recv(void *ctx, const char *node, const void *header, size_t header_len,
                    const void *payload, size_t payload_len)
{
    side_t *s = ctx;
    ck_assert_int_lt(s->received, MAX_MSGS);
    got_t *g = &s->got[s->received++];
    snprintf(g->node, sizeof(g->node), "%s", node);
    g->header_len = header_len;
    g->payload_len = payload_len;
    if (header_len >= 4)
        memcpy(&g->seq, header, 4);
    g->payload_ok = 1;
    const uint8_t *p = payload;
    for (size_t i = 0; i < payload_len; i += check_stride) {
        if (p[i] != pattern(i, g->seq)) {
            g->payload_ok = 0;
            break;
        }
    }
    if (header_len > 4) { /* the rest of the header: bytes 4.. are (i & 0xff) */
        const uint8_t *h = header;
        for (size_t i = 4; i < header_len; i++)
            if (h[i] != (uint8_t)i)
                g->payload_ok = 0;
    }
}

static void on_sent(void *ctx, int status)
{
    send_rec_t *r = ctx;
    if (in_send)
        sent_inside_send++;
    r->calls++;
    r->status = status;
}

static int run_until(int (*done)(void *), void *arg, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (!done(arg)) {
        if (now_ms() >= deadline)
            return 0;
        struct timeval slice = {0, 10000};
        event_base_loopexit(base, &slice);
        event_base_dispatch(base);
    }
    return 1;
}

static uint8_t *make_payload(size_t len, uint32_t seq)
{
    uint8_t *p = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(i, seq);
    return p;
}

/* Sends seq's message: a header of header_len bytes (seq, then i & 0xff) and payload. */
static int send_msg(ps_net_t *net, const char *to, uint32_t seq, size_t header_len,
                    const void *payload, size_t payload_len, send_rec_t *rec)
{
    uint8_t header[PS_NET_MAX_HEADER + 8];
    ck_assert_uint_ge(header_len, 4);
    memcpy(header, &seq, 4);
    for (size_t i = 4; i < header_len; i++)
        header[i] = (uint8_t)i;
    in_send = 1;
    int rc = ps_net_send(net, to, header, header_len, payload, payload_len, on_sent, rec);
    in_send = 0;
    if (rc == 0)
        ck_assert_int_eq(rec->calls, 0); /* never from inside ps_net_send */
    return rc;
}

static void make_net(side_t *s, const char *name)
{
    char err[256] = "";
    memset(s, 0, sizeof(*s));
    int rc = ps_net_create(base, name, on_recv, s, &s->net, err, sizeof(err));
    ck_assert_msg(rc == 0, "ps_net_create: %d %s", rc, err);
}

/* a and b know each other: a's messages carry b's token for a (1111), b's carry a's (2222). */
static void link_nets(side_t *x, const char *xname, side_t *y, const char *yname,
                      uint64_t x_send, uint64_t y_recv)
{
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(y->net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(x->net, yname, addr, len, x_send, 2222), 0);
    ck_assert_int_eq(ps_net_address(x->net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(y->net, xname, addr, len, 2222, y_recv), 0);
    ck_assert(ps_net_has_peer(x->net, yname));
    ck_assert(ps_net_has_peer(y->net, xname));
}

static void setup(void)
{
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    memset(sends, 0, sizeof(sends));
    in_send = sent_inside_send = 0;
    check_stride = 1;
    make_net(&a, "node-a");
    make_net(&b, "node-b");
}

static void teardown(void)
{
    ps_net_destroy(a.net);
    ps_net_destroy(b.net);
    a.net = b.net = NULL;
    event_base_free(base);
    ck_assert_int_eq(sent_inside_send, 0);
}

typedef struct want_s {
    side_t *side;
    int received;
    int sends;
} want_t;

static int enough(void *arg)
{
    want_t *w = arg;
    for (int i = 0; i < w->sends; i++)
        if (sends[i].calls == 0)
            return 0;
    return !w->side || w->side->received >= w->received;
}

START_TEST(test_sizes_arrive_intact_in_order)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    const size_t sizes[] = {0, 1024, MIB, 64 * MIB, 1024, 0, 3 * MIB + 7};
    const size_t headers[] = {4, 100, PS_NET_MAX_HEADER, 4, 16, PS_NET_MAX_HEADER, 9};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *payloads[N];
    for (uint32_t i = 0; i < N; i++) {
        payloads[i] = make_payload(sizes[i], i);
        ck_assert_int_eq(send_msg(a.net, "node-b", i, headers[i], sizes[i] ? payloads[i] : NULL,
                                  sizes[i], &sends[i]), 0);
    }
    want_t w = {&b, N, N};
    ck_assert_msg(run_until(enough, &w, 60000), "received %d of %d", b.received, N);
    for (uint32_t i = 0; i < N; i++) {
        ck_assert_int_eq(sends[i].calls, 1);
        ck_assert_int_eq(sends[i].status, 0);
        ck_assert_str_eq(b.got[i].node, "node-a");
        ck_assert_uint_eq(b.got[i].seq, i); /* in order, also behind the 64 MiB one */
        ck_assert_uint_eq(b.got[i].header_len, headers[i]);
        ck_assert_uint_eq(b.got[i].payload_len, sizes[i]);
        ck_assert_msg(b.got[i].payload_ok, "message %u arrived damaged", i);
        free(payloads[i]);
    }
    ps_net_stats_t st;
    ps_net_get_stats(b.net, &st);
    ck_assert_uint_eq(st.messages_received, N);
    ck_assert_uint_eq(st.dropped, 0);
    ps_net_get_stats(a.net, &st);
    ck_assert_uint_eq(st.messages_sent, N);
    ck_assert_uint_eq(st.send_errors, 0);

    /* and back: b to a */
    uint8_t *back = make_payload(MIB, 9);
    ck_assert_int_eq(send_msg(b.net, "node-a", 9, 4, back, MIB, &sends[N]), 0);
    want_t w2 = {&a, 1, N + 1};
    ck_assert(run_until(enough, &w2, 20000));
    ck_assert(a.got[0].payload_ok);
    ck_assert_str_eq(a.got[0].node, "node-b");
    free(back);
}
END_TEST

/* Both ways at once, sizes mixed so that eager messages queue behind rendezvous ones still
 * arriving: every message in order, intact. */
START_TEST(test_mixed_sizes_both_ways_in_order)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    enum { N = 200 };
    static const size_t sizes[] = {0, 100, 9000, 70000, 1 * MIB, 5, 300000, 2 * MIB + 3};
    enum { K = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *payloads[K];
    for (uint32_t k = 0; k < K; k++)
        payloads[k] = make_payload(sizes[k], k);
    for (uint32_t i = 0; i < N; i++) {
        /* seq i uses payload (i % K), made with seq (i % K): the check uses seq, so the seq
         * in the header is i % K and the order check uses the position */
        uint32_t k = i % K;
        ck_assert_int_eq(send_msg(a.net, "node-b", k, 8 + (i % 50), sizes[k] ? payloads[k] : NULL,
                                  sizes[k], &sends[i]), 0);
        ck_assert_int_eq(send_msg(b.net, "node-a", k, 8, sizes[k] ? payloads[k] : NULL, sizes[k],
                                  &sends[N + i]), 0);
    }
    want_t w = {&b, N, 2 * N};
    ck_assert_msg(run_until(enough, &w, 60000), "b received %d of %d", b.received, N);
    want_t w2 = {&a, N, 2 * N};
    ck_assert_msg(run_until(enough, &w2, 60000), "a received %d of %d", a.received, N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t k = i % K;
        ck_assert_int_eq(sends[i].status, 0);
        ck_assert_int_eq(sends[N + i].status, 0);
        ck_assert_uint_eq(b.got[i].seq, k);
        ck_assert_uint_eq(b.got[i].payload_len, sizes[k]);
        ck_assert_uint_eq(b.got[i].header_len, 8 + (i % 50));
        ck_assert(b.got[i].payload_ok);
        ck_assert_uint_eq(a.got[i].seq, k);
        ck_assert_uint_eq(a.got[i].payload_len, sizes[k]);
        ck_assert(a.got[i].payload_ok);
    }
    for (uint32_t k = 0; k < K; k++)
        free(payloads[k]);
}
END_TEST

START_TEST(test_bad_arguments)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    uint8_t h[PS_NET_MAX_HEADER + 1] = {0};
    ck_assert_int_eq(ps_net_send(a.net, "node-x", h, 4, NULL, 0, on_sent, &sends[0]), -ENOENT);
    ck_assert_int_eq(ps_net_send(a.net, "node-b", h, sizeof(h), NULL, 0, on_sent, &sends[0]),
                     -EMSGSIZE);
    ck_assert_int_eq(ps_net_send(a.net, "node-b", h, 4, h, PS_NET_MAX_PAYLOAD + 1, on_sent,
                                 &sends[0]), -EMSGSIZE);
    ck_assert_int_eq(ps_net_send(a.net, "node-b", h, 4, NULL, 8, on_sent, &sends[0]), -EINVAL);
    ck_assert_int_eq(sends[0].calls, 0);
    ck_assert_int_eq(ps_net_add_peer(a.net, "", h, 4, 1, 1), -EINVAL);
    char longname[PS_NET_NODE_BYTES + 1];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[PS_NET_NODE_BYTES] = '\0';
    ck_assert_int_eq(ps_net_add_peer(a.net, longname, h, 4, 1, 1), -EINVAL);
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-c", NULL, 0, 1, 1), -EINVAL);
    ps_net_remove_peer(a.net, "nobody"); /* no-op */
    ck_assert(ps_net_has_peer(a.net, "node-b"));
    ps_net_t *net = NULL;
    char err[128];
    ck_assert_int_eq(ps_net_create(base, "", on_recv, NULL, &net, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(net);
}
END_TEST

static int dropped_at_least(void *arg)
{
    const uint64_t *want = arg;
    ps_net_stats_t st;
    ps_net_get_stats(b.net, &st);
    return st.dropped >= *want && sends[0].calls && sends[1].calls;
}

START_TEST(test_wrong_token_dropped)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 9999); /* b expects 9999, a sends 1111 */
    uint8_t *big = make_payload(MIB, 1);
    ck_assert_int_eq(send_msg(a.net, "node-b", 0, 8, NULL, 0, &sends[0]), 0);
    ck_assert_int_eq(send_msg(a.net, "node-b", 1, 8, big, MIB, &sends[1]), 0); /* rendezvous */
    uint64_t want = 2;
    ck_assert(run_until(dropped_at_least, &want, 20000));
    ck_assert_int_eq(b.received, 0);
    ps_net_stats_t st;
    ps_net_get_stats(b.net, &st);
    ck_assert_uint_eq(st.dropped, 2);
    ck_assert_uint_eq(st.messages_received, 0);
    ck_assert_int_eq(sends[0].calls, 1);
    ck_assert_int_eq(sends[1].calls, 1);
    free(big);
}
END_TEST

START_TEST(test_unknown_sender_dropped)
{
    /* a knows b, b does not know a */
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(b.net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-b", addr, len, 1111, 2222), 0);
    uint8_t *big = make_payload(2 * MIB, 1);
    ck_assert_int_eq(send_msg(a.net, "node-b", 0, 8, NULL, 0, &sends[0]), 0);
    ck_assert_int_eq(send_msg(a.net, "node-b", 1, 8, big, 2 * MIB, &sends[1]), 0);
    uint64_t want = 2;
    ck_assert(run_until(dropped_at_least, &want, 20000));
    ck_assert_int_eq(b.received, 0);
    ps_net_stats_t st;
    ps_net_get_stats(b.net, &st);
    ck_assert_uint_eq(st.dropped, 2);
    /* the refused rendezvous reports an error to its sender */
    ck_assert_int_lt(sends[1].status, 0);
    free(big);
}
END_TEST

/* Raw UCP, outside ps_net, to put malformed headers on the wire. */
typedef struct raw_s {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h ep;
    int done;
} raw_t;

static void raw_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ((raw_t *)user_data)->done++;
    ucp_request_free(request);
}

static void raw_send(raw_t *raw, const void *header, size_t header_len, size_t payload_len)
{
    static uint8_t payload[64 * 1024];
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = raw_sent,
        .user_data = raw,
    };
    ucs_status_ptr_t r = ucp_am_send_nbx(raw->ep, PS_NET_AM_ID, header, header_len, payload,
                                         payload_len, &param);
    ck_assert(!UCS_PTR_IS_ERR(r));
    if (!r)
        raw->done++;
}

static int raw_progress_dropped(void *arg)
{
    raw_t *raw = arg;
    ucp_worker_progress(raw->worker);
    ps_net_stats_t st;
    ps_net_get_stats(b.net, &st);
    return st.dropped >= 5 && raw->done >= 5;
}

/* A bare UCX worker with an endpoint to net: sends what no ps_net would. */
static void raw_open(raw_t *raw, ps_net_t *net)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ck_assert_int_eq(ucp_init(&params, NULL, &raw->context), UCS_OK);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ck_assert_int_eq(ucp_worker_create(raw->context, &wp, &raw->worker), UCS_OK);
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(net, &addr, &len), 0);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = addr};
    ck_assert_int_eq(ucp_ep_create(raw->worker, &ep, &raw->ep), UCS_OK);
}

/* Closes what raw_open made. */
static void raw_close(raw_t *raw)
{
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(raw->ep, &cp);
    while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(raw->worker);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
    ucp_worker_destroy(raw->worker);
    ucp_cleanup(raw->context);
}

START_TEST(test_malformed_headers_dropped)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111); /* node-a is a known sender */
    raw_t raw = {0};
    raw_open(&raw, b.net);

    uint8_t good[PS_NET_WIRE_FIXED + 8] = {0};
    uint32_t magic = PS_NET_WIRE_MAGIC; /* the tests run on little-endian machines */
    uint16_t version = PS_NET_WIRE_VERSION, caller = 8;
    uint64_t token = 1111;
    memcpy(good, &magic, 4);
    memcpy(good + 4, &version, 2);
    memcpy(good + 6, &caller, 2);
    strcpy((char *)good + 8, "node-a");
    memcpy(good + 8 + PS_NET_NODE_BYTES, &token, 8);

    uint8_t bad[sizeof(good)];
    raw_send(&raw, good, 10, 0); /* too short for our header */
    memcpy(bad, good, sizeof(bad));
    uint16_t huge = 60000;
    memcpy(bad + 6, &huge, 2); /* claims a caller header longer than what came */
    raw_send(&raw, bad, sizeof(bad), 100);
    memcpy(bad, good, sizeof(bad));
    memset(bad + 8, 'x', PS_NET_NODE_BYTES); /* a sender name without its NUL */
    raw_send(&raw, bad, sizeof(bad), 0);
    memcpy(bad, good, sizeof(bad));
    bad[0] ^= 0xff; /* wrong magic */
    raw_send(&raw, bad, sizeof(bad), 0);
    memcpy(bad, good, sizeof(bad));
    caller = 7;
    memcpy(bad + 6, &caller, 2); /* one byte more came than it says */
    raw_send(&raw, bad, sizeof(bad), 64 * 1024);
    ck_assert_msg(run_until(raw_progress_dropped, &raw, 20000), "not all dropped");
    ps_net_stats_t st;
    ps_net_get_stats(b.net, &st);
    ck_assert_uint_eq(st.dropped, 5);
    ck_assert_int_eq(b.received, 0);

    /* the well-formed one is taken */
    raw_send(&raw, good, sizeof(good), 0);
    int64_t deadline = now_ms() + 20000;
    while (b.received < 1 && now_ms() < deadline) {
        ucp_worker_progress(raw.worker);
        struct timeval slice = {0, 1000};
        event_base_loopexit(base, &slice);
        event_base_dispatch(base);
    }
    ck_assert_int_eq(b.received, 1);
    ck_assert_str_eq(b.got[0].node, "node-a");

    raw_close(&raw);
}
END_TEST

static const uint8_t test_master[32] = "a master key of the data plane.";

static int b_received_at_least(void *arg)
{
    return b.received >= *(int *)arg;
}

/* Integrity on at both ends: messages of every size arrive intact; on the wire they carry a
 * tag, and a message altered after tagging, replayed, under another token's key, or without a
 * tag (put on the wire with raw UCP) is dropped and counted as forged. */
START_TEST(test_integrity_tags)
{
    ck_assert_int_eq(ps_net_set_integrity(a.net, test_master), 0);
    ck_assert_int_eq(ps_net_set_integrity(b.net, test_master), 0);
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    ck_assert_int_eq(ps_net_set_integrity(a.net, test_master), -EBUSY);
    const size_t sizes[] = {0, 1024, MIB, 9 * MIB + 3};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *payloads[N];
    for (uint32_t i = 0; i < N; i++) {
        payloads[i] = make_payload(sizes[i], i);
        ck_assert_int_eq(send_msg(a.net, "node-b", i, 12, sizes[i] ? payloads[i] : NULL,
                                  sizes[i], &sends[i]), 0);
    }
    want_t w = {&b, N, N};
    ck_assert_msg(run_until(enough, &w, 60000), "received %d of %d", b.received, N);
    for (uint32_t i = 0; i < N; i++) {
        ck_assert_uint_eq(b.got[i].seq, i);
        ck_assert_msg(b.got[i].payload_ok, "message %u arrived damaged", i);
        free(payloads[i]);
    }

    raw_t raw = {0};
    raw_open(&raw, b.net);

    /* a message as node-a's net would tag it (the raw payload: 100 zero bytes) */
    uint8_t good[PS_NET_WIRE_FIXED + PS_NET_WIRE_AUTH_EXTRA + 8] = {0}, zeros[100] = {0};
    uint32_t magic = PS_NET_WIRE_MAGIC, seq_head = 77;
    uint16_t version = PS_NET_WIRE_VERSION_AUTH, caller = 8;
    uint64_t token = 1111, seq = 1000;
    memcpy(good, &magic, 4);
    memcpy(good + 4, &version, 2);
    memcpy(good + 6, &caller, 2);
    strcpy((char *)good + 8, "node-a");
    memcpy(good + 8 + PS_NET_NODE_BYTES, &token, 8);
    memcpy(good + PS_NET_WIRE_SEQ_AT, &seq, 8);
    memcpy(good + PS_NET_WIRE_FIXED + PS_NET_WIRE_AUTH_EXTRA, &seq_head, 4);
    ps_net_auth_t *auth = ps_net_auth_new(test_master, "node-a", "node-b", 1111);
    ck_assert_ptr_nonnull(auth);
    ck_assert_int_eq(ps_net_auth_tag(auth, seq, good, sizeof(good), zeros, sizeof(zeros),
                                     good + PS_NET_WIRE_TAG_AT), 0);
    ps_net_auth_free(auth);
    int want = N + 1;
    raw_send(&raw, good, sizeof(good), sizeof(zeros));
    int64_t deadline = now_ms() + 20000;
    while (b.received < want && now_ms() < deadline) {
        ucp_worker_progress(raw.worker);
        run_until(b_received_at_least, &want, 1);
    }
    ck_assert_int_eq(b.received, want);
    ck_assert_uint_eq(b.got[N].seq, 77);

    uint8_t bad[sizeof(good)];
    raw_send(&raw, good, sizeof(good), sizeof(zeros)); /* replayed */
    memcpy(bad, good, sizeof(bad));
    bad[sizeof(bad) - 1] ^= 1; /* a byte of the caller's header flipped */
    seq = 2000;
    memcpy(bad + PS_NET_WIRE_SEQ_AT, &seq, 8);
    raw_send(&raw, bad, sizeof(bad), sizeof(zeros));
    memcpy(bad, good, sizeof(bad));
    memcpy(bad + PS_NET_WIRE_SEQ_AT, &seq, 8); /* a number the tag was not made with */
    raw_send(&raw, bad, sizeof(bad), sizeof(zeros));
    memcpy(bad, good, sizeof(bad));
    version = PS_NET_WIRE_VERSION; /* no tag */
    memcpy(bad + 4, &version, 2);
    raw_send(&raw, bad, PS_NET_WIRE_FIXED + 8, 0);
    deadline = now_ms() + 20000;
    ps_net_stats_t st;
    do {
        ucp_worker_progress(raw.worker);
        struct timeval slice = {0, 1000};
        event_base_loopexit(base, &slice);
        event_base_dispatch(base);
        ps_net_get_stats(b.net, &st);
    } while ((st.dropped < 4 || raw.done < 5) && now_ms() < deadline);
    ck_assert_uint_eq(st.dropped, 4);
    ck_assert_uint_eq(st.forged, 3);
    ck_assert_int_eq(b.received, want);

    raw_close(&raw);
}
END_TEST

static int dropped_both(void *arg)
{
    (void)arg;
    ps_net_stats_t sa, sb;
    ps_net_get_stats(a.net, &sa);
    ps_net_get_stats(b.net, &sb);
    return sa.dropped >= 1 && sb.dropped >= 1 && sends[0].calls && sends[1].calls;
}

/* Integrity on at one end only: its messages and the other's are dropped, not taken. */
START_TEST(test_integrity_one_end_only)
{
    ck_assert_int_eq(ps_net_set_integrity(b.net, test_master), 0);
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    uint8_t *p = make_payload(1024, 1);
    ck_assert_int_eq(send_msg(a.net, "node-b", 1, 4, p, 1024, &sends[0]), 0);
    ck_assert_int_eq(send_msg(b.net, "node-a", 2, 4, p, 1024, &sends[1]), 0);
    ck_assert(run_until(dropped_both, NULL, 20000));
    ck_assert_int_eq(a.received, 0);
    ck_assert_int_eq(b.received, 0);
    free(p);
}
END_TEST

START_TEST(test_remove_peer_fails_pending)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    enum { N = 3 };
    uint8_t *big = make_payload(64 * MIB, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(send_msg(a.net, "node-b", 0, 4, big, 64 * MIB, &sends[i]), 0);
    ps_net_remove_peer(a.net, "node-b");
    ck_assert(!ps_net_has_peer(a.net, "node-b"));
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(sends[i].calls, 0); /* later, from the loop */
    want_t w = {NULL, 0, N};
    ck_assert(run_until(enough, &w, 20000));
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(sends[i].calls, 1);
        ck_assert_int_eq(sends[i].status, -ECONNRESET);
    }
    ck_assert_int_eq(send_msg(a.net, "node-b", 0, 4, NULL, 0, &sends[N]), -ENOENT);
    /* added again, it works again */
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(b.net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-b", addr, len, 1111, 2222), 0);
    ck_assert_int_eq(send_msg(a.net, "node-b", 5, 4, big, MIB, &sends[N]), 0);
    want_t w2 = {&b, 1, N + 1};
    ck_assert(run_until(enough, &w2, 20000));
    ck_assert_int_eq(sends[N].status, 0);
    ck_assert_uint_eq(b.got[b.received - 1].seq, 5);
    free(big);
}
END_TEST

/* A link that drops and comes back (the daemons' hello again: new tokens, the same worker
 * address) while messages are on their way both ways: nothing is cut off. The endpoint stays,
 * the sends complete, and what either side sent with the token before the change arrives. */
START_TEST(test_readd_same_address_keeps_messages)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    enum { N = 3 };
    uint8_t *big = make_payload(16 * MIB, 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(send_msg(a.net, "node-b", 10 + i, 4, big, 16 * MIB, &sends[i]), 0);
        ck_assert_int_eq(send_msg(b.net, "node-a", 20 + i, 4, big, 16 * MIB, &sends[N + i]), 0);
    }
    /* both sides hear of the new tokens (a first; b's messages still carry the old one) */
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(b.net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-b", addr, len, 3333, 4444), 0);
    ck_assert_int_eq(ps_net_address(a.net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(b.net, "node-a", addr, len, 4444, 3333), 0);
    ck_assert(ps_net_has_peer(a.net, "node-b"));
    want_t w = {&b, N, 2 * N};
    ck_assert(run_until(enough, &w, 30000));
    want_t wa = {&a, N, 2 * N};
    ck_assert(run_until(enough, &wa, 30000));
    for (int i = 0; i < 2 * N; i++)
        ck_assert_msg(sends[i].status == 0, "send %d: %d", i, sends[i].status);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(b.got[i].seq, 10 + (uint32_t)i);
        ck_assert_uint_eq(a.got[i].seq, 20 + (uint32_t)i);
    }
    /* and the new tokens work */
    ck_assert_int_eq(send_msg(a.net, "node-b", 30, 4, big, MIB, &sends[2 * N]), 0);
    want_t w2 = {&b, N + 1, 2 * N + 1};
    ck_assert(run_until(enough, &w2, 20000));
    ck_assert_uint_eq(b.got[N].seq, 30);
    free(big);
}
END_TEST

/* The link drops and comes back twice before the peer hears of either new token (a node
 * frozen past its lease and back: the daemons' hellos cross): what the peer sent with its
 * first token still arrives, and so does what it sends once it knows the newest. */
START_TEST(test_readd_twice_keeps_messages)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    enum { N = 3 };
    uint8_t *big = make_payload(MIB, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(send_msg(b.net, "node-a", 20 + i, 4, big, MIB, &sends[i]), 0);
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(b.net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-b", addr, len, 3333, 4444), 0);
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-b", addr, len, 5555, 6666), 0);
    want_t w = {&a, N, N};
    ck_assert(run_until(enough, &w, 30000));
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(a.got[i].seq, 20 + (uint32_t)i);
    ps_net_stats_t st;
    ps_net_get_stats(a.net, &st);
    ck_assert_uint_eq(st.dropped, 0);
    /* b hears of the newest token: its messages carry it and arrive */
    ck_assert_int_eq(ps_net_address(a.net, &addr, &len), 0);
    ck_assert_int_eq(ps_net_add_peer(b.net, "node-a", addr, len, 6666, 5555), 0);
    ck_assert_int_eq(send_msg(b.net, "node-a", 30, 4, big, MIB, &sends[N]), 0);
    want_t w2 = {&a, N + 1, N + 1};
    ck_assert(run_until(enough, &w2, 20000));
    ck_assert_uint_eq(a.got[N].seq, 30);
    free(big);
}
END_TEST

START_TEST(test_destroy_with_pending_sends)
{
    link_nets(&a, "node-a", &b, "node-b", 1111, 1111);
    enum { N = 3 };
    uint8_t *big = make_payload(64 * MIB, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(send_msg(a.net, "node-b", 0, 4, big, 64 * MIB, &sends[i]), 0);
    ck_assert_int_eq(send_msg(a.net, "node-b", 1, 4, NULL, 0, &sends[N]), 0);
    ps_net_destroy(a.net);
    a.net = NULL;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(sends[i].calls, 1);
        ck_assert_int_eq(sends[i].status, -ECANCELED);
    }
    ck_assert_int_eq(sends[N].calls, 1); /* sent already or cancelled, but called once */
    /* b survives its peer's going: its loop runs on */
    struct timeval slice = {0, 100000};
    event_base_loopexit(base, &slice);
    event_base_dispatch(base);
    free(big);
}
END_TEST

/* The child process (this program run again with --ps-net-child): a net named node-child
 * that echoes every message back, its address to stdout, the parent's from stdin. */
static int write_all(int fd, const void *p, size_t len)
{
    const uint8_t *c = p;
    while (len) {
        ssize_t n = write(fd, c, len);
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t len)
{
    uint8_t *c = p;
    while (len) {
        ssize_t n = read(fd, c, len);
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

static side_t child;
static uint8_t echo_buf[MIB];

static void child_sent(void *ctx, int status)
{
    (void)ctx;
    (void)status;
}

#define FLOOD_SEQ 7777
#define FLOOD_COUNT 16
#define FLOOD_BYTES (64 * MIB)
static uint8_t *flood_buf;

static void child_recv(void *ctx, const char *node, const void *header, size_t header_len,
                       const void *payload, size_t payload_len)
{
    (void)ctx;
    uint32_t seq = 0;
    if (header_len >= 4)
        memcpy(&seq, header, 4);
    if (seq == FLOOD_SEQ) { /* FLOOD_COUNT messages of 64 MiB back, as fast as UCX goes */
        if (!flood_buf) { /* no ck_assert here: the child is not a Check test */
            flood_buf = malloc(FLOOD_BYTES);
            if (!flood_buf)
                return;
            for (size_t i = 0; i < FLOOD_BYTES; i++)
                flood_buf[i] = pattern(i, FLOOD_SEQ);
        }
        for (int i = 0; i < FLOOD_COUNT; i++)
            ps_net_send(child.net, node, header, header_len, flood_buf, FLOOD_BYTES, child_sent,
                        NULL);
        return;
    }
    if (payload_len > sizeof(echo_buf))
        payload_len = sizeof(echo_buf);
    if (payload_len)
        memcpy(echo_buf, payload, payload_len);
    ps_net_send(child.net, node, header, header_len, payload_len ? echo_buf : NULL, payload_len,
                child_sent, NULL);
}

static int child_main(void)
{
    base = event_base_new();
    char err[256];
    if (!base || ps_net_create(base, "node-child", child_recv, NULL, &child.net, err,
                               sizeof(err)) != 0) {
        fprintf(stderr, "child: %s\n", err);
        return 1;
    }
    const void *addr;
    size_t len;
    ps_net_address(child.net, &addr, &len);
    uint64_t n = len;
    if (write_all(1, &n, 8) || write_all(1, addr, len))
        return 1;
    if (read_all(0, &n, 8) || n > 65536)
        return 1;
    void *parent = malloc(n);
    if (!parent || read_all(0, parent, n))
        return 1;
    if (ps_net_add_peer(child.net, "node-a", parent, n, 2222, 1111) != 0)
        return 1;
    free(parent);
    event_base_dispatch(base); /* until killed */
    return 0;
}

static int got_echo(void *arg)
{
    (void)arg;
    return a.received >= 1;
}

typedef struct failing_s {
    int accepted;
    int refused_rc;
    uint8_t *payload;
} failing_t;

/* Sends one 1 MiB message per slice until ps_net_send refuses (the peer is marked failed). */
static int send_until_refused(void *arg)
{
    failing_t *f = arg;
    if (f->accepted >= MAX_SENDS - 1)
        return 1;
    int rc = send_msg(a.net, "node-child", 100, 4, f->payload, MIB, &sends[f->accepted]);
    if (rc == 0) {
        f->accepted++;
        return 0;
    }
    f->refused_rc = rc;
    return 1;
}

static int all_called(void *arg)
{
    failing_t *f = arg;
    for (int i = 0; i < f->accepted; i++)
        if (sends[i].calls == 0)
            return 0;
    return 1;
}

/* Starts the child and links it with a: its pid; its pipes closed by the caller. */
static pid_t child_start(int *to_child_w, int *from_child_r)
{
    int to_child[2], from_child[2];
    ck_assert_int_eq(pipe(to_child), 0);
    ck_assert_int_eq(pipe(from_child), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[1]);
        close(from_child[0]);
        execl("/proc/self/exe", "check_ps_net", "--ps-net-child", (char *)NULL);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    uint64_t n = 0;
    int ok = read_all(from_child[0], &n, 8) == 0 && n > 0 && n <= 65536;
    void *caddr = ok ? malloc(n) : NULL;
    ok = ok && caddr && read_all(from_child[0], caddr, n) == 0;
    if (!ok) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ck_abort_msg("the child did not send its address");
    }
    ck_assert_int_eq(ps_net_add_peer(a.net, "node-child", caddr, n, 1111, 2222), 0);
    free(caddr);
    const void *addr;
    size_t len;
    ck_assert_int_eq(ps_net_address(a.net, &addr, &len), 0);
    uint64_t len64 = len;
    ck_assert_int_eq(write_all(to_child[1], &len64, 8), 0);
    ck_assert_int_eq(write_all(to_child[1], addr, len), 0);
    *to_child_w = to_child[1];
    *from_child_r = from_child[0];
    return pid;
}

static int64_t timer_last_ms, timer_max_gap_ms;
static int ticks_in_flood; /* the timer's turns after the flood's first message, before its last */

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    int64_t now = now_ms();
    if (timer_last_ms && now - timer_last_ms > timer_max_gap_ms)
        timer_max_gap_ms = now - timer_last_ms;
    timer_last_ms = now;
    if (a.received > 0 && a.received < FLOOD_COUNT)
        ticks_in_flood++;
}

static int got_flood(void *arg)
{
    (void)arg;
    return a.received >= FLOOD_COUNT;
}

/* A peer in another process that sends 1 GiB as fast as it can does not keep the loop from
 * its other events: a 1 ms timer keeps firing while the flood comes in (ps_net progresses UCX
 * in bounded turns of PS_NET_PROGRESS_US). What is asserted is what the loop did, not how long
 * anything took: the timer fired at least twice per message between the first and the last
 * arrival (each turn of the loop fires it once; a 64 MiB message takes several bounded turns
 * to arrive, more on a loaded machine). Seen here: 176-195 times with the bounded turns, 14
 * with progress unbounded (the loop held up to 0.9 s at a time). */
START_TEST(test_loop_not_starved_by_a_flood)
{
    int to_child, from_child;
    pid_t pid = child_start(&to_child, &from_child);
    struct event *tick = event_new(base, -1, EV_PERSIST, on_timer, NULL);
    struct timeval one_ms = {0, 1000};
    event_add(tick, &one_ms);
    check_stride = 4093; /* a sample: checking every byte would hold the loop itself */
    ck_assert_int_eq(send_msg(a.net, "node-child", FLOOD_SEQ, 4, NULL, 0, &sends[0]), 0);
    int ok = run_until(got_flood, NULL, 60000);
    event_free(tick);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(to_child);
    close(from_child);
    ck_assert_msg(ok, "received %d of %d", a.received, FLOOD_COUNT);
    for (int i = 0; i < FLOOD_COUNT; i++) {
        ck_assert_uint_eq(a.got[i].payload_len, FLOOD_BYTES);
        ck_assert(a.got[i].payload_ok);
    }
    fprintf(stderr,
            "check_ps_net: the timer fired %d times during the flood (longest wait %lld ms)\n",
            ticks_in_flood, (long long)timer_max_gap_ms);
    ck_assert_msg(ticks_in_flood >= 2 * FLOOD_COUNT,
                  "the loop ran its timer %d times while %d messages of 64 MiB came in",
                  ticks_in_flood, FLOOD_COUNT);
}
END_TEST

START_TEST(test_peer_process_killed)
{
    int to_child_w, from_child_r;
    pid_t pid = child_start(&to_child_w, &from_child_r);

    /* the link works: a message comes back */
    uint8_t *payload = make_payload(MIB, 100);
    ck_assert_int_eq(send_msg(a.net, "node-child", 100, 4, payload, 4096, &sends[0]), 0);
    int echoed = run_until(got_echo, NULL, 20000);
    if (!echoed)
        kill(pid, SIGKILL);
    ck_assert_msg(echoed, "no echo from the child");
    ck_assert_str_eq(a.got[0].node, "node-child");
    ck_assert(a.got[0].payload_ok);
    memset(sends, 0, sizeof(sends));

    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    close(to_child_w);
    close(from_child_r);

    failing_t f = {.payload = payload};
    ck_assert_msg(run_until(send_until_refused, &f, 30000), "the failure was never noticed");
    ck_assert_int_eq(f.refused_rc, -ECONNRESET);
    ck_assert_msg(run_until(all_called, &f, 20000), "sends hang after the peer died");
    int failed = 0;
    for (int i = 0; i < f.accepted; i++) {
        ck_assert_int_eq(sends[i].calls, 1);
        failed += sends[i].status != 0;
    }
    /* still refused until added again */
    ck_assert_int_eq(send_msg(a.net, "node-child", 1, 4, NULL, 0, &sends[MAX_SENDS - 1]),
                     -ECONNRESET);
    ck_assert(!ps_net_has_peer(a.net, "node-child")); /* failed: known, not usable */
    ps_net_stats_t st;
    ps_net_get_stats(a.net, &st);
    ck_assert_uint_eq(st.send_errors, (uint64_t)failed);
    ps_net_remove_peer(a.net, "node-child");
    ck_assert_int_eq(send_msg(a.net, "node-child", 1, 4, NULL, 0, &sends[MAX_SENDS - 1]), -ENOENT);
    free(payload);
}
END_TEST

static Suite *ps_net_suite(void)
{
    Suite *s = suite_create("ps_net");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sizes_arrive_intact_in_order);
    tcase_add_test(tc, test_mixed_sizes_both_ways_in_order);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_wrong_token_dropped);
    tcase_add_test(tc, test_unknown_sender_dropped);
    tcase_add_test(tc, test_malformed_headers_dropped);
    tcase_add_test(tc, test_integrity_tags);
    tcase_add_test(tc, test_integrity_one_end_only);
    tcase_add_test(tc, test_remove_peer_fails_pending);
    tcase_add_test(tc, test_readd_same_address_keeps_messages);
    tcase_add_test(tc, test_readd_twice_keeps_messages);
    tcase_add_test(tc, test_destroy_with_pending_sends);
    tcase_add_test(tc, test_loop_not_starved_by_a_flood);
    tcase_add_test(tc, test_peer_process_killed);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--ps-net-child") == 0)
        return child_main();
    return check_run_suite(ps_net_suite());
}
