/* Unit tests of the cluster's group records and gang slots (salusd/cluster/cluster_groups.c,
 * cluster_slots.c) on their own, linked without the daemon: below them a fake layer (etcd's
 * requests held until the test answers them, links that record what is sent, the jobs
 * subsystem's few calls recorded), above them a stub observer (cluster_observer_t). This node
 * is "a", it leads; node "b" is played by the test (its records through the watch, its
 * messages through cluster_slots_message). Everything is synchronous: no loop, no clock.
 *
 * A group record's life (submitted, registered, released, over on both nodes, deleted), a
 * node gone and a lease lost (the local group fails, the record says why), the slots of two
 * groups in one order on both nodes, a slot sent again to a node that restarted or whose link
 * came back; a node of host-only ranks gets no slot, a late rank joins the slot in progress,
 * and another group's slot waits for that slot rather than overtake it on the late rank's node. */
#include "check_run.h"
#include "cluster-internal.h"
#include "groups.h"
#include "jobs.h"
#include "proto.h"
#include "registry.h"

#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fake_now_ns;

uint64_t salusd_now_ns(void)
{
    return fake_now_ns;
}

/* ---- what happened, one line each ---------------------------------------------------------- */

static char events[64][256];
static size_t event_count;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    ck_assert_uint_lt(event_count, sizeof(events) / sizeof(events[0]));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(events[event_count++], sizeof(events[0]), fmt, ap);
    va_end(ap);
}

/* The index of the first event from `from` on that starts with prefix, or -1. */
static int find_event(size_t from, const char *prefix)
{
    for (size_t i = from; i < event_count; i++)
        if (strncmp(events[i], prefix, strlen(prefix)) == 0)
            return (int)i;
    return -1;
}

static void dump_events(void)
{
    for (size_t i = 0; i < event_count; i++)
        fprintf(stderr, "  %zu: %s\n", i, events[i]);
}

/* ---- the fake etcd: transactions held until answered --------------------------------------- */

typedef struct {
    char key[300];
    etcd_cmp_target_t target;
    int64_t rev;
    etcd_op_kind_t kind;
    char *value;
    etcd_cb cb;
    void *ctx;
    int answered;
} fake_txn_t;

static fake_txn_t txns[32];
static size_t txn_count;
static int64_t store_rev = 100;

const char *etcd_endpoints(const etcd_t *etcd)
{
    (void)etcd;
    return "127.0.0.1:2379";
}

int etcd_txn(etcd_t *etcd, const etcd_txn_t *txn, etcd_cb cb, void *ctx)
{
    (void)etcd;
    ck_assert_uint_lt(txn_count, sizeof(txns) / sizeof(txns[0]));
    fake_txn_t *t = &txns[txn_count++];
    memset(t, 0, sizeof(*t));
    snprintf(t->key, sizeof(t->key), "%s", txn->key);
    t->target = txn->target;
    t->rev = txn->rev;
    t->kind = txn->success.kind;
    t->value = txn->success.value ? strndup(txn->success.value, txn->success.value_len) : NULL;
    t->cb = cb;
    t->ctx = ctx;
    note("etcd %s %s", t->kind == ETCD_OP_DELETE ? "delete" : "put", t->key);
    return 0;
}

int etcd_get(etcd_t *etcd, const char *key, int prefix, etcd_cb cb, void *ctx)
{
    (void)etcd;
    (void)prefix;
    (void)cb;
    (void)ctx;
    note("etcd get %s", key); /* never answered: the record is not newer */
    return -EAGAIN;
}

/* The last transaction not answered yet. */
static fake_txn_t *last_txn(void)
{
    for (size_t i = txn_count; i > 0; i--)
        if (!txns[i - 1].answered)
            return &txns[i - 1];
    ck_abort_msg("no transaction waits");
    return NULL;
}

/* etcd answers t: its compare held, the store's revision goes up by one. */
static int64_t txn_succeeds(fake_txn_t *t)
{
    etcd_result_t r = {.message = "", .revision = ++store_rev, .succeeded = 1};
    t->answered = 1;
    t->cb(t->ctx, &r);
    return r.revision;
}

/* The watch delivers a record (this node's own writes come back this way too). */
static void watch_put(cluster_t *cl, const char *key, int64_t create_rev, int64_t mod_rev,
                      const char *value)
{
    char full[300];
    snprintf(full, sizeof(full), "%s/groups/%s", cl->prefix, key);
    etcd_kv_t kv = {.key = full, .key_len = strlen(full), .value = value,
                    .value_len = strlen(value), .create_revision = create_rev,
                    .mod_revision = mod_rev};
    cluster_groups_event(cl, &kv, 0);
}

static void watch_delete(cluster_t *cl, const char *key, int64_t mod_rev)
{
    char full[300];
    snprintf(full, sizeof(full), "%s/groups/%s", cl->prefix, key);
    etcd_kv_t kv = {.key = full, .key_len = strlen(full), .mod_revision = mod_rev};
    cluster_groups_event(cl, &kv, 1);
}

/* ---- the fake links: what is sent, decoded ------------------------------------------------- */

static int link_down_to_b;

int links_send(links_t *links, const char *node, const proto_enc_t *enc)
{
    (void)links;
    proto_msg_t msg;
    const char *why = NULL;
    ck_assert_uint_gt(enc->sbuf.size, 4);
    ck_assert_int_eq(proto_decode((const uint8_t *)enc->sbuf.data + 4, enc->sbuf.size - 4, &msg,
                                  &why), 0);
    char group[128] = "";
    uint64_t value = 0;
    proto_get_str_copy(&msg.body, "group", group, sizeof(group));
    if (proto_get_uint(&msg.body, "seq", &value) < 0)
        proto_get_uint(&msg.body, "last", &value);
    int down = link_down_to_b && strcmp(node, "b") == 0;
    note("send %s %s %s %llx%s", node, msg.op, group, (unsigned long long)value,
         down ? " (link down)" : "");
    proto_msg_free(&msg);
    return down ? -ENOTCONN : 0;
}

/* node b sends this node a message (a "ready" with pending: b reports the slot it is in) */
static void from_b_with(cluster_t *cl, const char *op, const char *group, int64_t epoch,
                        uint64_t value, uint64_t iters, int pending)
{
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 0, op, 4 + (pending ? 1 : 0));
    proto_pack_kv_str(&enc.pk, "group", group);
    proto_pack_kv_uint(&enc.pk, "epoch", (uint64_t)epoch);
    proto_pack_kv_uint(&enc.pk, strcmp(op, "slot") == 0 ? "seq" : "last", value);
    proto_pack_kv_uint(&enc.pk, "iters", iters);
    if (pending)
        proto_pack_kv_bool(&enc.pk, "pending", 1);
    proto_enc_finish(&enc);
    proto_msg_t msg;
    ck_assert_int_eq(proto_decode((const uint8_t *)enc.sbuf.data + 4, enc.sbuf.size - 4, &msg,
                                  NULL), 0);
    cluster_slots_message(cl, "b", &msg);
    proto_msg_free(&msg);
    proto_enc_destroy(&enc);
}

static void from_b(cluster_t *cl, const char *op, const char *group, int64_t epoch,
                   uint64_t value, uint64_t iters)
{
    from_b_with(cl, op, group, epoch, value, iters, 0);
}

/* node b sends this node a slot with its term (the revision b says it leads at) */
static void slot_from_b(cluster_t *cl, const char *group, int64_t epoch, uint64_t seq,
                        uint64_t term)
{
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 0, "slot", 5);
    proto_pack_kv_str(&enc.pk, "group", group);
    proto_pack_kv_uint(&enc.pk, "epoch", (uint64_t)epoch);
    proto_pack_kv_uint(&enc.pk, "seq", seq);
    proto_pack_kv_uint(&enc.pk, "iters", 0);
    proto_pack_kv_uint(&enc.pk, "term", term);
    proto_enc_finish(&enc);
    proto_msg_t msg;
    ck_assert_int_eq(proto_decode((const uint8_t *)enc.sbuf.data + 4, enc.sbuf.size - 4, &msg,
                                  NULL), 0);
    cluster_slots_message(cl, "b", &msg);
    proto_msg_free(&msg);
    proto_enc_destroy(&enc);
}

/* ---- the jobs subsystem below, as the cluster calls it ------------------------------------- */

typedef struct {
    uint64_t id;
    const char *name;
    uint32_t world;
    const char *sync; /* NULL: bsp */
} local_group_t;

static local_group_t locals[4];
static size_t local_count;

int groups_describe(const salusd_t *d, uint64_t id, groups_desc_t *desc, char *sync_buf,
                    size_t sync_size)
{
    (void)d;
    for (size_t i = 0; i < local_count; i++)
        if (locals[i].id == id) {
            snprintf(sync_buf, sync_size, "%s", locals[i].sync ? locals[i].sync : "bsp");
            *desc = (groups_desc_t){.uid = 1000, .name = locals[i].name,
                                    .world = locals[i].world, .sync = sync_buf};
            return 0;
        }
    return -ENOENT;
}

void groups_fail(salusd_t *d, uint64_t id, const char *failure)
{
    (void)d;
    note("groups_fail %llu: %s", (unsigned long long)id, failure);
}

void groups_cluster_complete(salusd_t *d, uint64_t id)
{
    (void)d;
    note("complete %llu", (unsigned long long)id);
}

static int admission_held; /* survivors of a restart may still come back */

int jobs_admission_held(const salusd_t *d)
{
    (void)d;
    return admission_held;
}

int jobs_group_release(salusd_t *d, uint64_t group_id)
{
    (void)d;
    note("release %llu", (unsigned long long)group_id);
    return 0;
}

int jobs_group_slot(salusd_t *d, uint64_t group_id, uint64_t seq, uint64_t target)
{
    (void)d;
    note("slot %llu %llx target %llu", (unsigned long long)group_id, (unsigned long long)seq,
         (unsigned long long)target);
    return 0;
}

int jobs_group_remote_least(salusd_t *d, uint64_t group_id, uint64_t least)
{
    (void)d;
    note("remote_least %llu %lld", (unsigned long long)group_id,
         least == UINT64_MAX ? -1ll : (long long)least);
    return 0;
}

uint64_t jobs_iterations(const job_t *job)
{
    (void)job;
    return 0;
}

job_t *registry_find(registry_t *r, uint64_t id)
{
    (void)r;
    (void)id;
    return NULL; /* no local rank's iterations: each ready says 0 */
}

/* ---- the observer above -------------------------------------------------------------------- */

static void obs_ring_forget(cluster_t *cl, uint32_t uid, const char *name, int64_t epoch)
{
    (void)cl;
    note("ring_forget %u/%s %lld", uid, name, (long long)epoch);
}

static const cluster_observer_t stub_observer = {.ring_forget = obs_ring_forget};

/* ---- fixture ------------------------------------------------------------------------------- */

static salusd_t dmn; /* the daemon the cluster role belongs to */
static cluster_t *cl;

static void setup(void)
{
    memset(&dmn, 0, sizeof(dmn));
    event_count = txn_count = local_count = 0;
    link_down_to_b = 0;
    admission_held = 0;
    cl = calloc(1, sizeof(*cl));
    ck_assert_ptr_nonnull(cl);
    cl->d = &dmn;
    dmn.cluster = cl;
    cl->etcd = (etcd_t *)&dmn;   /* never dereferenced by the fakes */
    cl->links = (links_t *)&dmn;
    snprintf(cl->node, sizeof(cl->node), "a");
    snprintf(cl->prefix, sizeof(cl->prefix), "/salus");
    snprintf(cl->leader, sizeof(cl->leader), "a");
    cl->leader_epoch = 3;
    cl->newest_epoch = 3;
    cl->ttl_s = 3;
    fake_now_ns = 1000;
    cl->lease_ok_ns = 1; /* the lease confirmed just now */
    snprintf(cl->members[0].node, sizeof(cl->members[0].node), "a");
    snprintf(cl->members[1].node, sizeof(cl->members[1].node), "b");
    cl->member_count = 2;
    cl->members_read = 1;
    cl->observer = &stub_observer; /* as cluster_observe (cluster.c) registers it */
}

static void teardown(void)
{
    cluster_groups_free(cl);
    free(cl);
    for (size_t i = 0; i < txn_count; i++)
        free(txns[i].value);
}

/* local group id (name, world 2): rank 0 here (job 100 + id), registered; its record written
 * (answered), then node b's rank 1, registered, read through the watch: released here.
 * Returns the record's epoch. */
static int64_t two_node_group(uint64_t id, const char *name)
{
    locals[local_count++] = (local_group_t){.id = id, .name = name, .world = 2};
    cluster_rank_submitted(&dmn, id, 0, 100 + id);
    int64_t epoch = txn_succeeds(last_txn());
    cluster_rank_registered(&dmn, id, 0, 100 + id);
    int64_t rev = txn_succeeds(last_txn());
    char key[64], value[512];
    snprintf(key, sizeof(key), "1000/%s", name);
    snprintf(value, sizeof(value),
             "{\"world\":2,\"sync\":\"bsp\",\"share\":false,\"ranks\":{"
             "\"0\":{\"node\":\"a\",\"job\":%llu,\"reg\":true},"
             "\"1\":{\"node\":\"b\",\"job\":7,\"reg\":true}},\"over\":{}}",
             (unsigned long long)(100 + id));
    watch_put(cl, key, epoch, rev + 1, value);
    return epoch;
}

/* local group id (name, world 2): rank 0 here (job 100 + id), registered and admitted; node
 * b's rank 1 submitted but not registered (b_reg 0: host-only, or a GPU rank whose first
 * driver call is still to come), read through the watch: released here. Returns the epoch. */
static int64_t host_only_group(uint64_t id, const char *name, int b_reg)
{
    locals[local_count++] = (local_group_t){.id = id, .name = name, .world = 2};
    cluster_rank_submitted(&dmn, id, 0, 100 + id);
    int64_t epoch = txn_succeeds(last_txn());
    cluster_rank_registered(&dmn, id, 0, 100 + id);
    int64_t rev = txn_succeeds(last_txn());
    char key[64], value[512];
    snprintf(key, sizeof(key), "1000/%s", name);
    snprintf(value, sizeof(value),
             "{\"world\":2,\"sync\":\"bsp\",\"share\":false,\"ranks\":{"
             "\"0\":{\"node\":\"a\",\"job\":%llu,\"reg\":true},"
             "\"1\":{\"node\":\"b\",\"job\":7,\"reg\":%s}},\"over\":{}}",
             (unsigned long long)(100 + id), b_reg ? "true" : "false");
    watch_put(cl, key, epoch, rev + 1, value);
    return epoch;
}

static uint64_t seq_of(uint32_t n)
{
    return (3ull << 32) | n;
}

/* ---- the tests ----------------------------------------------------------------------------- */

START_TEST(record_life)
{
    locals[local_count++] = (local_group_t){.id = 5, .name = "g", .world = 2};
    cluster_rank_submitted(&dmn, 5, 0, 105);
    fake_txn_t *t = last_txn();
    ck_assert_str_eq(t->key, "/salus/groups/1000/g");
    ck_assert_int_eq(t->target, ETCD_CMP_CREATE_REVISION); /* made, not overwritten */
    ck_assert_int_eq(t->rev, 0);
    ck_assert_ptr_nonnull(strstr(t->value, "\"0\":{\"node\":\"a\",\"job\":105,\"reg\":false}"));
    int64_t epoch = txn_succeeds(t);

    cluster_rank_registered(&dmn, 5, 0, 105);
    t = last_txn();
    ck_assert_int_eq(t->target, ETCD_CMP_MOD_REVISION);
    ck_assert_int_eq(t->rev, epoch);
    ck_assert_ptr_nonnull(strstr(t->value, "\"reg\":true"));
    int64_t rev = txn_succeeds(t);
    ck_assert_int_lt(find_event(0, "release"), 0); /* rank 1 is not known yet */

    /* node b's rank registers: every rank registered, the rank here is released */
    watch_put(cl, "1000/g", epoch, rev + 1,
              "{\"world\":2,\"sync\":\"bsp\",\"share\":false,\"ranks\":{"
              "\"0\":{\"node\":\"a\",\"job\":105,\"reg\":true},"
              "\"1\":{\"node\":\"b\",\"job\":9,\"reg\":true}},\"over\":{}}");
    ck_assert_int_ge(find_event(0, "release 5"), 0);

    /* over here: the record says so; then over on b too: deleted, its rings forgotten */
    cluster_group_over(&dmn, 5);
    t = last_txn();
    ck_assert_ptr_nonnull(strstr(t->value, "\"over\":{\"a\":1}"));
    rev = txn_succeeds(t);
    size_t before = event_count;
    watch_put(cl, "1000/g", epoch, rev + 1,
              "{\"world\":2,\"sync\":\"bsp\",\"share\":false,\"ranks\":{"
              "\"0\":{\"node\":\"a\",\"job\":105,\"reg\":true},"
              "\"1\":{\"node\":\"b\",\"job\":9,\"reg\":true}},\"over\":{\"a\":1,\"b\":1}}");
    int del = find_event(before, "etcd delete /salus/groups/1000/g");
    if (del < 0)
        dump_events();
    ck_assert_int_ge(del, 0);
    t = last_txn();
    ck_assert_int_eq(t->kind, ETCD_OP_DELETE);
    ck_assert_int_eq(t->rev, rev + 1); /* only that revision: a new run's record stays */
    char forget[64];
    snprintf(forget, sizeof(forget), "ring_forget 1000/g %lld", (long long)epoch);
    ck_assert_int_gt(find_event(before, forget), del);

    /* deleted: kept (groups.c still lists it) but gone, nothing more written */
    txn_succeeds(t);
    watch_delete(cl, "1000/g", rev + 2);
    cluster_group_t *g = cluster_group_by_local(cl, 5);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->record_gone, 1);
    size_t txns_before = txn_count;
    cluster_group_over(&dmn, 5);
    ck_assert_uint_eq(txn_count, txns_before);
    ck_assert_int_lt(find_event(0, "groups_fail"), 0);
}
END_TEST

/* The run is over here and this node's write finds the record deleted (every node was over
 * and one deleted it first): nothing is made again, the record is taken as gone, and the ranks'
 * nodes are still known for the list. Before, the record was made again with this node's rank
 * only, and stayed in etcd. */
START_TEST(over_write_finds_record_deleted)
{
    two_node_group(5, "g");
    cluster_group_over(&dmn, 5);
    fake_txn_t *t = last_txn();
    ck_assert_ptr_nonnull(strstr(t->value, "\"over\":{\"a\":1}"));
    etcd_result_t r = {.message = "", .revision = ++store_rev, .succeeded = 0, .count = 0};
    t->answered = 1;
    size_t txns_before = txn_count;
    t->cb(t->ctx, &r);
    ck_assert_uint_eq(txn_count, txns_before);
    cluster_group_t *g = cluster_group_by_local(cl, 5);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->record_gone, 1);
    ck_assert_str_eq(cluster_rank_node(&dmn, 5, 1), "b");
    ck_assert_str_eq(cluster_rank_node(&dmn, 5, 0), "a");
}
END_TEST

START_TEST(node_gone_fails_group)
{
    two_node_group(5, "g");
    ck_assert_int_ge(find_event(0, "release 5"), 0);
    size_t before = event_count;
    cluster_groups_node_gone(cl, "b", "left the cluster (its lease expired)");
    int fail = find_event(before, "groups_fail 5: node b left the cluster (its lease expired)");
    if (fail < 0)
        dump_events();
    ck_assert_int_ge(fail, 0);
    ck_assert_ptr_nonnull(strstr(last_txn()->value,
                                 "\"failed\":\"node b left the cluster (its lease expired)\""));
    ck_assert_uint_eq(cl->stats.groups_failed_node, 1);
    /* said once: the node gone again changes nothing */
    before = event_count;
    cluster_groups_node_gone(cl, "b", "left the cluster (its lease expired)");
    ck_assert_int_lt(find_event(before, "groups_fail"), 0);
    /* a group without a rank on that node is not touched */
    before = event_count;
    cluster_groups_node_gone(cl, "c", "left the cluster (its lease expired)");
    ck_assert_uint_eq(event_count, before);
}
END_TEST

START_TEST(lease_lost_fails_group)
{
    two_node_group(5, "g");
    size_t before = event_count;
    cl->lease_lost = 1;
    cluster_groups_lease_lost(cl);
    ck_assert_int_ge(find_event(before, "groups_fail 5: node a lost etcd (127.0.0.1:2379): its "
                                        "lease expired"), 0);
    ck_assert_uint_eq(cl->stats.groups_failed_etcd, 1);
    ck_assert_int_eq(cluster_is_leader(cl), 0);
    /* no slot is asked for without the lease */
    before = event_count;
    cluster_rank_admitted(&dmn, 5);
    ck_assert_int_lt(find_event(before, "slot"), 0);
    ck_assert_int_lt(find_event(before, "send"), 0);
}
END_TEST

/* Two groups on nodes a and b; b says it is ready for g2 first, then for g1: the leader
 * issues g2's slot, then g1's, and both nodes get them in that one order (here: the core, in
 * order; b: the messages, in order). Their slots done, the next round goes in the order of
 * the readies again. */
START_TEST(slot_order_two_groups)
{
    int64_t e1 = two_node_group(5, "g1");
    int64_t e2 = two_node_group(6, "g2");
    size_t before = event_count;
    cluster_rank_admitted(&dmn, 5);
    cluster_rank_admitted(&dmn, 6);
    ck_assert_int_lt(find_event(before, "slot"), 0); /* b is not ready yet */
    from_b(cl, "ready", "1000/g2", e2, 0, 0);
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    uint64_t s1 = (3ull << 32) | 1, s2 = (3ull << 32) | 2;
    char a1[64], b1[64], a2[64], b2[64];
    snprintf(a1, sizeof(a1), "slot 6 %llx", (unsigned long long)s1);
    snprintf(b1, sizeof(b1), "send b slot 1000/g2 %llx", (unsigned long long)s1);
    snprintf(a2, sizeof(a2), "slot 5 %llx", (unsigned long long)s2);
    snprintf(b2, sizeof(b2), "send b slot 1000/g1 %llx", (unsigned long long)s2);
    int ia1 = find_event(before, a1), ib1 = find_event(before, b1);
    int ia2 = find_event(before, a2), ib2 = find_event(before, b2);
    if (ia1 < 0 || ib1 < 0 || ia2 < 0 || ib2 < 0)
        dump_events();
    ck_assert_int_ge(ia1, 0);
    ck_assert_int_ge(ib1, 0);
    ck_assert_int_gt(ia2, ia1);
    ck_assert_int_gt(ib2, ib1);

    /* the slots are done here (g1's first), b is ready for g1 first: the next round's order
     * is g1, g2 */
    before = event_count;
    cluster_slot_done(&dmn, 5, s2);
    cluster_slot_done(&dmn, 6, s1);
    from_b(cl, "ready", "1000/g1", e1, s2, 1);
    from_b(cl, "ready", "1000/g2", e2, s1, 1);
    uint64_t s3 = (3ull << 32) | 3, s4 = (3ull << 32) | 4;
    snprintf(a1, sizeof(a1), "slot 5 %llx", (unsigned long long)s3);
    snprintf(a2, sizeof(a2), "slot 6 %llx", (unsigned long long)s4);
    ia1 = find_event(before, a1);
    ia2 = find_event(before, a2);
    if (ia1 < 0 || ia2 < 0)
        dump_events();
    ck_assert_int_ge(ia1, 0);
    ck_assert_int_gt(ia2, ia1);
}
END_TEST

/* The slot issued while b's link was down reaches b when the link is back; b restarted (its
 * dmn knows no seq: ready with last 0, its ranks short of the slot's iterations) gets the
 * slot again instead of a new one; a slot this node already had is not handed to the core
 * twice. */
START_TEST(slot_sent_again)
{
    int64_t e1 = two_node_group(5, "g1");
    cluster_rank_admitted(&dmn, 5);
    link_down_to_b = 1;
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    uint64_t s1 = (3ull << 32) | 1;
    char sent[64], down[80];
    snprintf(sent, sizeof(sent), "send b slot 1000/g1 %llx", (unsigned long long)s1);
    snprintf(down, sizeof(down), "%s (link down)", sent);
    ck_assert_int_ge(find_event(0, down), 0);

    size_t before = event_count;
    link_down_to_b = 0;
    cluster_slots_link_up(cl, "b");
    int again = find_event(before, sent);
    if (again < 0)
        dump_events();
    ck_assert_int_ge(again, 0);

    /* b restarted: ready with last 0 and 0 iterations: the same slot, not a new one */
    before = event_count;
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    ck_assert_int_ge(find_event(before, sent), 0);
    ck_assert_int_lt(find_event(before, "slot 5"), 0);
    ck_assert_uint_eq(cl->slot_counter, 1);

    /* the leader's own node: the slot again is not the core's again */
    before = event_count;
    cluster_slots_link_up(cl, "a");
    ck_assert_int_lt(find_event(before, "slot 5"), 0);
}
END_TEST

/* A group whose rank on b never registered (host-only) is released once every rank was
 * submitted; this node's rank is admitted and the leader's slots go to this node only (b has
 * no registered rank: it gets none); a rank on b that registers late (b says it is ready
 * while a slot is in progress) joins that slot, not a new one. */
START_TEST(host_only_node_gets_no_slot)
{
    int64_t e = host_only_group(5, "g", 0);
    int rel = find_event(0, "release 5"), done = find_event(0, "complete 5");
    if (rel < 0 || done < 0)
        dump_events();
    ck_assert_int_ge(done, 0);
    ck_assert_int_gt(rel, done);
    size_t before = event_count;
    cluster_rank_admitted(&dmn, 5);
    char here[64], b1[64];
    /* (the target goes to the core: each rank reaches 1 iteration in the first slot) */
    snprintf(here, sizeof(here), "slot 5 %llx target 1", (unsigned long long)seq_of(1));
    snprintf(b1, sizeof(b1), "send b slot 1000/g %llx", (unsigned long long)seq_of(1));
    if (find_event(before, here) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, here), 0);
    ck_assert_int_lt(find_event(before, "send b slot"), 0);

    /* b's rank registers late, is admitted: b's ready joins slot 1 in progress */
    before = event_count;
    from_b(cl, "ready", "1000/g", e, 0, 0);
    if (find_event(before, b1) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, b1), 0);
    ck_assert_uint_eq(cl->slot_counter, 1);

    /* the slot over on both nodes: the next goes to both */
    before = event_count;
    cluster_slot_done(&dmn, 5, seq_of(1));
    ck_assert_int_lt(find_event(before, "slot 5"), 0); /* b is still in it */
    from_b(cl, "ready", "1000/g", e, seq_of(1), 1);
    snprintf(here, sizeof(here), "slot 5 %llx", (unsigned long long)seq_of(2));
    snprintf(b1, sizeof(b1), "send b slot 1000/g %llx", (unsigned long long)seq_of(2));
    if (find_event(before, here) < 0 || find_event(before, b1) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, here), 0);
    ck_assert_int_ge(find_event(before, b1), 0);
}
END_TEST

/* g1 has a rank on b not registered (its slots go to a only); g2 has registered ranks on a
 * and b. While g1's slot is in progress, no slot of g2 goes to b: should g1's rank there
 * register, it joins g1's slot, and b must not serve a later slot first (g2's ranks on b
 * would then wait for g2's rank on a, behind g1's slot, whose rank waits for b: a circle).
 * g1's slot over, g2 (ready longer) has its slot first, then g1; b's late rank joins g1's. */
START_TEST(open_slot_with_late_rank_holds_its_node)
{
    int64_t e1 = host_only_group(5, "g1", 0);
    int64_t e2 = two_node_group(6, "g2");
    cluster_rank_admitted(&dmn, 5); /* g1's slot 1: a only */
    char s[64];
    snprintf(s, sizeof(s), "slot 5 %llx", (unsigned long long)seq_of(1));
    ck_assert_int_ge(find_event(0, s), 0);
    size_t before = event_count;
    cluster_rank_admitted(&dmn, 6);
    from_b(cl, "ready", "1000/g2", e2, 0, 0);
    if (find_event(before, "slot 6") >= 0 || find_event(before, "send b slot 1000/g2") >= 0)
        dump_events();
    ck_assert_int_lt(find_event(before, "slot 6"), 0);
    ck_assert_int_lt(find_event(before, "send b slot"), 0);

    /* g1's slot over here: g2's slot goes out (2), then g1's next (3) */
    before = event_count;
    cluster_slot_done(&dmn, 5, seq_of(1));
    char a2[64], b2[64], a3[64], b3[64];
    snprintf(a2, sizeof(a2), "slot 6 %llx", (unsigned long long)seq_of(2));
    snprintf(b2, sizeof(b2), "send b slot 1000/g2 %llx", (unsigned long long)seq_of(2));
    snprintf(a3, sizeof(a3), "slot 5 %llx", (unsigned long long)seq_of(3));
    snprintf(b3, sizeof(b3), "send b slot 1000/g1 %llx", (unsigned long long)seq_of(3));
    int ia2 = find_event(before, a2), ib2 = find_event(before, b2), ia3 = find_event(before, a3);
    if (ia2 < 0 || ib2 < 0 || ia3 < 0)
        dump_events();
    ck_assert_int_ge(ia2, 0);
    ck_assert_int_ge(ib2, 0);
    ck_assert_int_gt(ia3, ia2);
    ck_assert_int_lt(find_event(before, "send b slot 1000/g1"), 0);
    /* b's rank of g1 registers: b joins slot 3, after slot 2 (one order on both nodes) */
    before = event_count;
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    if (find_event(before, b3) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, b3), 0);
}
END_TEST

/* A new leader learns of a former leader's slot in progress from a node's pending report: it
 * is the group's open slot, so another group's slot does not overtake it on a node where the
 * group has a rank not registered yet (here: this node's rank of g1), and g1's next slot
 * follows once the node in it is done. */
START_TEST(former_leaders_open_slot_holds)
{
    locals[local_count++] = (local_group_t){.id = 5, .name = "g1", .world = 2};
    cluster_rank_submitted(&dmn, 5, 0, 105); /* never registers here */
    int64_t e1 = txn_succeeds(last_txn());
    watch_put(cl, "1000/g1", e1, e1 + 1,
              "{\"world\":2,\"sync\":\"bsp\",\"share\":false,\"ranks\":{"
              "\"0\":{\"node\":\"a\",\"job\":105,\"reg\":false},"
              "\"1\":{\"node\":\"b\",\"job\":7,\"reg\":true}},\"over\":{}}");
    int64_t e2 = two_node_group(6, "g2");
    uint64_t old = (2ull << 32) | 7; /* the former leader's term */
    from_b_with(cl, "ready", "1000/g1", e1, old, 0, 1);

    size_t before = event_count;
    cluster_rank_admitted(&dmn, 6);
    from_b(cl, "ready", "1000/g2", e2, 0, 0);
    if (find_event(before, "slot 6") >= 0)
        dump_events();
    ck_assert_int_lt(find_event(before, "slot 6"), 0); /* held behind g1's open slot */
    ck_assert_int_lt(find_event(before, "send b slot"), 0);

    /* b is done with the former leader's slot: g2's slot goes out, then g1's next (b only) */
    before = event_count;
    from_b(cl, "ready", "1000/g1", e1, old, 1);
    char a1[64], b1[64], b2[64];
    snprintf(a1, sizeof(a1), "slot 6 %llx", (unsigned long long)seq_of(1));
    snprintf(b1, sizeof(b1), "send b slot 1000/g2 %llx", (unsigned long long)seq_of(1));
    snprintf(b2, sizeof(b2), "send b slot 1000/g1 %llx", (unsigned long long)seq_of(2));
    int ia1 = find_event(before, a1), ib1 = find_event(before, b1), ib2 = find_event(before, b2);
    if (ia1 < 0 || ib1 < 0 || ib2 < 0)
        dump_events();
    ck_assert_int_ge(ia1, 0);
    ck_assert_int_ge(ib1, 0);
    ck_assert_int_gt(ib2, ib1);
    ck_assert_int_lt(find_event(before, "slot 5"), 0); /* g1 has no registered rank here */
}
END_TEST

/* g1 and g2 each have a rank on b not registered yet; both slots go to a only (s1, then s2).
 * b's rank of g2 registers first: b must not join s2 before s1 (a has them in the order
 * s1, s2: b serving s2 first would wait in a circle), so it waits; b's rank of g1 registers:
 * b joins s1, then, at its next ready of g2, s2. */
START_TEST(late_joins_keep_the_order)
{
    int64_t e1 = host_only_group(5, "g1", 0);
    int64_t e2 = host_only_group(6, "g2", 0);
    cluster_rank_admitted(&dmn, 5);
    cluster_rank_admitted(&dmn, 6);
    char s1[64], s2[64], j1[64], j2[64];
    snprintf(s1, sizeof(s1), "slot 5 %llx", (unsigned long long)seq_of(1));
    snprintf(s2, sizeof(s2), "slot 6 %llx", (unsigned long long)seq_of(2));
    snprintf(j1, sizeof(j1), "send b slot 1000/g1 %llx", (unsigned long long)seq_of(1));
    snprintf(j2, sizeof(j2), "send b slot 1000/g2 %llx", (unsigned long long)seq_of(2));
    if (find_event(0, s1) < 0 || find_event(0, s2) < 0)
        dump_events();
    ck_assert_int_ge(find_event(0, s1), 0);
    ck_assert_int_ge(find_event(0, s2), 0);
    size_t before = event_count;
    from_b(cl, "ready", "1000/g2", e2, 0, 0);
    if (find_event(before, "send b slot") >= 0)
        dump_events();
    ck_assert_int_lt(find_event(before, "send b slot"), 0); /* not before s1 */
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    ck_assert_int_ge(find_event(before, j1), 0);
    from_b(cl, "ready", "1000/g2", e2, 0, 0); /* (its resync) */
    int i1 = find_event(before, j1), i2 = find_event(before, j2);
    if (i2 < 0)
        dump_events();
    ck_assert_int_gt(i2, i1);
}
END_TEST

/* b's pending report (the former leader's slot, with that slot's target: 1 iteration) makes
 * `old` g1's open slot here; this node's rank missed it and joins it. Then the same from the
 * other side: this node reports the former slot in progress and b joins; the slot sent on to
 * b is lost (its link broke, or b refused it: b had not read this leader's key yet); b's
 * next ready (last 0, no iteration done) gets it again: b is not counted ready without it
 * (the slot's other ranks would wait for b's in it, and b's for a slot, for ever). */
START_TEST(adopted_slot_sent_again)
{
    int64_t e1 = two_node_group(5, "g1");
    cluster_rank_admitted(&dmn, 5); /* (b is not ready: no slot) */
    uint64_t old = (2ull << 32) | 7; /* the former leader's term */
    size_t before = event_count;
    from_b_with(cl, "ready", "1000/g1", e1, old, 1, 1);
    cluster_slots_resync(cl); /* this node's ready (last 0): it joins the former slot */
    char here[64];
    snprintf(here, sizeof(here), "slot 5 %llx", (unsigned long long)old);
    if (find_event(before, here) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, here), 0);
    ck_assert_uint_eq(cl->stats.slots_issued, 0);

    /* the other way round: a fresh group g2, this node in the former slot old2, b joins */
    int64_t e2 = two_node_group(6, "g2");
    uint64_t old2 = (2ull << 32) | 8;
    cluster_rank_admitted(&dmn, 6);
    cluster_group_t *g2 = cluster_group_by_local(cl, 6);
    ck_assert_ptr_nonnull(g2);
    g2->pending_seq = old2; /* (the former leader's slot reached this node only) */
    before = event_count;
    cluster_slots_resync(cl);
    link_down_to_b = 1; /* b's join is lost on the way */
    from_b(cl, "ready", "1000/g2", e2, 0, 0);
    char sent[64], down[80];
    snprintf(sent, sizeof(sent), "send b slot 1000/g2 %llx", (unsigned long long)old2);
    snprintf(down, sizeof(down), "%s (link down)", sent);
    if (find_event(before, down) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, down), 0);
    link_down_to_b = 0;
    before = event_count;
    from_b(cl, "ready", "1000/g2", e2, 0, 0); /* b's resync: it never had the slot */
    if (find_event(before, sent) < 0)
        dump_events();
    ck_assert_int_ge(find_event(before, sent), 0);
    ck_assert_uint_eq(cl->stats.slots_issued, 0); /* no new slot: b is not ready */
}
END_TEST

/* The watchdog: slot 1 of g1 open for the wait-log interval is said, with the node it is not
 * over on and the nodes counted ready; this node ready with no slot that long is said, with
 * its last slot and the leader asked; shorter waits, and a slot here, say nothing. */
START_TEST(slot_waits_diagnosed)
{
    int64_t e1 = two_node_group(5, "g1");
    uint64_t limit = 30000000000ull;
    char line[512];
    cluster_group_t *g = cluster_group_by_local(cl, 5);
    ck_assert_ptr_nonnull(g);
    cluster_rank_admitted(&dmn, 5); /* ready here; b not yet */
    ck_assert_int_eq(cluster_slots_diagnose(cl, g, fake_now_ns + limit - 1, limit, line,
                                            sizeof(line)), 0);
    ck_assert_int_eq(cluster_slots_diagnose(cl, g, fake_now_ns + limit, limit, line,
                                            sizeof(line)), 1);
    ck_assert_msg(strstr(line, "group g1 has waited 30 s here for a gang slot: the last served "
                               "here 0, none received since; ready said to leader a (revision 3)"),
                  "%s", line);
    from_b(cl, "ready", "1000/g1", e1, 0, 0); /* slot 1 to both */
    ck_assert_uint_eq(g->pending_seq, seq_of(1));
    cluster_slot_done(&dmn, 5, seq_of(1)); /* over here, b still in it */
    uint64_t t = fake_now_ns + limit;
    ck_assert_int_eq(cluster_slots_diagnose(cl, g, t, limit, line, sizeof(line)), 1);
    ck_assert_msg(strstr(line, "group g1: slot 300000001 (target 1 iterations) has been open "
                               "for 30 s: not over on b; ready for the next: a"), "%s", line);
    from_b(cl, "ready", "1000/g1", e1, seq_of(1), 1); /* slot 2: no wait */
    ck_assert_int_eq(cluster_slots_diagnose(cl, g, fake_now_ns + 1, limit, line, sizeof(line)),
                     0);
    ck_assert_str_eq(line, "");
}
END_TEST

/* The fence's verdicts: a former term's slot is refused whoever sends it (even the leader
 * known now: a node that lost and won the leadership again); one from a node that does not
 * lead, too; one of a term newer than the leader key read here waits. A leader may grant
 * until the TTL has run from its lease's last confirmed request. */
/* After a restart of salusd here: the rank that survived re-attaches (registered, admitted)
 * while admissions are held, the hold ends and the tick says ready for every group released
 * here, before this node has read the record that completes the group (its own write comes
 * back, or node b's rank). The release that follows says ready itself: a node that never says
 * it is ready is never counted ready, and the leader's slot waits for it for ever (its peers
 * stopped at their boundary, its rank in their collective). */
START_TEST(ready_after_release_that_follows_a_restart)
{
    snprintf(cl->leader, sizeof(cl->leader), "b");
    admission_held = 1;
    locals[local_count++] = (local_group_t){.id = 1, .name = "g", .world = 2};
    cluster_rank_submitted(&dmn, 1, 0, 101);
    int64_t epoch = txn_succeeds(last_txn());
    cluster_rank_registered(&dmn, 1, 0, 101);
    int64_t rev = txn_succeeds(last_txn());
    cluster_rank_admitted(&dmn, 1); /* re-attached: admitted while held */
    ck_assert_int_lt(find_event(0, "send b ready"), 0);
    admission_held = 0;
    cluster_groups_ready_all(cl); /* the tick: not released yet, so no ready */
    ck_assert_int_lt(find_event(0, "send b ready"), 0);

    size_t before = event_count;
    watch_put(cl, "1000/g", epoch, rev + 1,
              "{\"world\":2,\"sync\":\"bsp\",\"share\":false,\"ranks\":{"
              "\"0\":{\"node\":\"a\",\"job\":101,\"reg\":true},"
              "\"1\":{\"node\":\"b\",\"job\":7,\"reg\":true}},\"over\":{}}");
    int rel = find_event(before, "release 1"), ready = find_event(before, "send b ready 1000/g");
    if (rel < 0 || ready < 0)
        dump_events();
    ck_assert_int_ge(rel, 0);
    ck_assert_int_gt(ready, rel);

    /* the leader's slot comes; its end says ready again (not a node silent after a slot) */
    slot_from_b(cl, "1000/g", epoch, seq_of(1), 3);
    ck_assert_int_ge(find_event(before, "slot 1 "), 0);
    before = event_count;
    cluster_slot_done(&dmn, 1, seq_of(1));
    ck_assert_int_ge(find_event(before, "send b ready 1000/g"), 0);
}
END_TEST

START_TEST(fence_verdicts)
{
    cluster_fence_view_t view = {.newest_revision = 9, .leader = "b", .leader_revision = 9};
    ck_assert_int_eq(cluster_fence_slot(&view, "b", 9), CLUSTER_FENCE_TAKE);
    ck_assert_int_eq(cluster_fence_slot(&view, "b", 7), CLUSTER_FENCE_STALE);
    ck_assert_int_eq(cluster_fence_slot(&view, "c", 7), CLUSTER_FENCE_STALE);
    ck_assert_int_eq(cluster_fence_slot(&view, "c", 9), CLUSTER_FENCE_NOT_LEADER);
    ck_assert_int_eq(cluster_fence_slot(&view, "b", 12), CLUSTER_FENCE_AHEAD);
    /* a new leader's slot before its key: not taken yet, not refused as not the leader's */
    ck_assert_int_eq(cluster_fence_slot(&view, "c", 12), CLUSTER_FENCE_AHEAD);
    view.leader = "";
    ck_assert_int_eq(cluster_fence_slot(&view, "b", 9), CLUSTER_FENCE_NOT_LEADER);
    view.leader = NULL;
    ck_assert_int_eq(cluster_fence_slot(&view, "b", 9), CLUSTER_FENCE_NOT_LEADER);
    /* the leader key deleted (no leader now): the newest revision still fences */
    view = (cluster_fence_view_t){.newest_revision = 9, .leader = "", .leader_revision = 0};
    ck_assert_int_eq(cluster_fence_slot(&view, "b", 8), CLUSTER_FENCE_STALE);

    uint64_t s = 1000000000ull;
    ck_assert_int_eq(cluster_fence_may_grant(5 * s, 3 * s, 3 * s), 1);
    ck_assert_int_eq(cluster_fence_may_grant(6 * s, 3 * s, 3 * s), 0);
    ck_assert_int_eq(cluster_fence_may_grant(9 * s, 3 * s, 3 * s), 0);
    ck_assert_int_eq(cluster_fence_may_grant(5 * s, 0, 3 * s), 0); /* never confirmed */
    ck_assert_int_eq(cluster_fence_may_grant(2 * s, 3 * s, 3 * s), 0); /* a clock gone back */
}
END_TEST

/* b leads at revision 5 (a had led at 3): a late slot of revision 3 from a, or from b, is
 * refused and counted; one of b's term is taken, once. */
START_TEST(former_terms_slot_refused)
{
    int64_t e1 = two_node_group(5, "g1");
    snprintf(cl->leader, sizeof(cl->leader), "b");
    cl->leader_epoch = 5;
    cl->newest_epoch = 5;
    size_t before = event_count;
    from_b(cl, "slot", "1000/g1", e1, (3ull << 32) | 17, 0);
    ck_assert_int_lt(find_event(before, "slot 5"), 0);
    ck_assert_uint_eq(cl->stats.slots_refused, 1);
    from_b(cl, "slot", "1000/g1", e1, (5ull << 32) | 1, 0);
    char want[64];
    snprintf(want, sizeof(want), "slot 5 %llx", (5ull << 32) | 1);
    ck_assert_int_ge(find_event(before, want), 0);
    ck_assert_uint_eq(cl->stats.slots_refused, 1);
    /* the leader key gone (its lease ended): no leader, and the former term still fenced */
    cl->leader[0] = 0;
    cl->leader_epoch = 0;
    from_b(cl, "slot", "1000/g1", e1, (5ull << 32) | 2, 0);
    ck_assert_uint_eq(cl->stats.slots_refused, 2);
}
END_TEST

/* b leads at 5 and sends on a slot of the former leader (revision 3) that this node missed:
 * its term says 5, the slot is taken; a slot of revision 5 sent with term 3 is refused. */
START_TEST(forwarded_former_slot_taken)
{
    int64_t e1 = two_node_group(5, "g1");
    snprintf(cl->leader, sizeof(cl->leader), "b");
    cl->leader_epoch = 5;
    cl->newest_epoch = 5;
    size_t before = event_count;
    uint64_t old = (3ull << 32) | 9;
    slot_from_b(cl, "1000/g1", e1, old, 3);
    ck_assert_uint_eq(cl->stats.slots_refused, 1);
    slot_from_b(cl, "1000/g1", e1, old, 5);
    char want[64];
    snprintf(want, sizeof(want), "slot 5 %llx", (unsigned long long)old);
    ck_assert_int_ge(find_event(before, want), 0);
    ck_assert_uint_eq(cl->stats.slots_refused, 1);
}
END_TEST

/* This node leads, but its lease was last confirmed a TTL ago (cut off from etcd, or paused,
 * and its tick has not said so yet): a ready that arrives now grants nothing. */
/* node `from` says its least SSP count of group (least absent when least_too is 0) */
static void ssp_from(const char *from, const char *group, int64_t epoch, uint64_t least, int live,
                     int least_too)
{
    proto_enc_t enc;
    proto_enc_init(&enc);
    proto_enc_begin(&enc, PROTO_REQUEST, 0, "ssp", least_too ? 4 : 3);
    proto_pack_kv_str(&enc.pk, "group", group);
    proto_pack_kv_uint(&enc.pk, "epoch", (uint64_t)epoch);
    if (least_too)
        proto_pack_kv_uint(&enc.pk, "least", least);
    proto_pack_kv_bool(&enc.pk, "live", live);
    proto_enc_finish(&enc);
    proto_msg_t msg;
    ck_assert_int_eq(proto_decode((const uint8_t *)enc.sbuf.data + 4, enc.sbuf.size - 4, &msg,
                                  NULL), 0);
    cluster_ssp_message(cl, from, &msg);
    proto_msg_free(&msg);
    proto_enc_destroy(&enc);
}

/* SSP:1 group 5 of world 2, rank 0 here, rank 1 on b: the resync tells b this node's count
 * and gives the core 0 for b (not heard from yet); b's count is given to the core as it
 * changes; b with no live rank no longer counts; the local ranks over, b is told; a count from c (no rank of the group), a
 * malformed one and one for a BSP group are refused, the core told nothing. */
START_TEST(ssp_counts_between_nodes)
{
    locals[local_count++] = (local_group_t){.id = 5, .name = "s", .world = 2, .sync = "ssp:1"};
    cluster_rank_submitted(&dmn, 5, 0, 105);
    int64_t epoch = txn_succeeds(last_txn());
    cluster_rank_registered(&dmn, 5, 0, 105);
    int64_t rev = txn_succeeds(last_txn());
    watch_put(cl, "1000/s", epoch, rev + 1,
              "{\"world\":2,\"sync\":\"ssp:1\",\"share\":false,\"ranks\":{"
              "\"0\":{\"node\":\"a\",\"job\":105,\"reg\":true},"
              "\"1\":{\"node\":\"b\",\"job\":7,\"reg\":true}},\"over\":{}}");
    ck_assert_int_ge(find_event(0, "release 5"), 0);
    size_t before = event_count;
    cluster_ssp_resync(cl);
    ck_assert_int_ge(find_event(before, "send b ssp 1000/s 0"), 0);
    ck_assert_int_ge(find_event(before, "remote_least 5 0"), 0);
    before = event_count;
    ssp_from("b", "1000/s", epoch, 3, 1, 1);
    ck_assert_int_ge(find_event(before, "remote_least 5 3"), 0);
    before = event_count;
    ssp_from("b", "1000/s", epoch, 3, 1, 1); /* the same again: nothing new */
    ssp_from("c", "1000/s", epoch, 9, 1, 1); /* holds no rank of it */
    ssp_from("b", "1000/s", epoch, 0, 1, 0); /* malformed */
    ssp_from("b", "1000/s", epoch + 1, 9, 1, 1); /* another record's */
    ck_assert_int_lt(find_event(before, "remote_least"), 0);
    ssp_from("b", "1000/s", epoch, 3, 0, 1); /* b's ranks ended */
    ck_assert_int_ge(find_event(before, "remote_least 5 -1"), 0);
    before = event_count; /* every local rank ended: b is told at once */
    cluster_group_over(&dmn, 5);
    ck_assert_int_ge(find_event(before, "send b ssp 1000/s 0"), 0);
    /* a BSP group's: refused */
    int64_t bsp_epoch = two_node_group(6, "g");
    before = event_count;
    ssp_from("b", "1000/g", bsp_epoch, 1, 1, 1);
    ck_assert_int_lt(find_event(before, "remote_least"), 0);
}
END_TEST

START_TEST(cut_off_leader_grants_nothing)
{
    int64_t e1 = two_node_group(5, "g1");
    cluster_rank_admitted(&dmn, 5);
    fake_now_ns = cl->lease_ok_ns + 3000000000ull;
    size_t before = event_count;
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    cluster_slots_link_up(cl, "b");
    ck_assert_int_lt(find_event(before, "slot"), 0);
    ck_assert_int_lt(find_event(before, "send b slot"), 0);
    ck_assert_uint_eq(cl->stats.slots_issued, 0);
    /* the lease confirmed again: the slot goes out */
    cl->lease_ok_ns = fake_now_ns;
    from_b(cl, "ready", "1000/g1", e1, 0, 0);
    ck_assert_int_ge(find_event(before, "send b slot 1000/g1"), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("groups_slots");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, record_life);
    tcase_add_test(tc, over_write_finds_record_deleted);
    tcase_add_test(tc, node_gone_fails_group);
    tcase_add_test(tc, lease_lost_fails_group);
    tcase_add_test(tc, slot_order_two_groups);
    tcase_add_test(tc, slot_sent_again);
    tcase_add_test(tc, host_only_node_gets_no_slot);
    tcase_add_test(tc, open_slot_with_late_rank_holds_its_node);
    tcase_add_test(tc, former_leaders_open_slot_holds);
    tcase_add_test(tc, late_joins_keep_the_order);
    tcase_add_test(tc, adopted_slot_sent_again);
    tcase_add_test(tc, slot_waits_diagnosed);
    tcase_add_test(tc, fence_verdicts);
    tcase_add_test(tc, former_terms_slot_refused);
    tcase_add_test(tc, forwarded_former_slot_taken);
    tcase_add_test(tc, cut_off_leader_grants_nothing);
    tcase_add_test(tc, ssp_counts_between_nodes);
    tcase_add_test(tc, ready_after_release_that_follows_a_restart);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
