/* Unit tests of the jobs subsystem's effects and events (salusd/jobs/job_effects.c,
 * jobs_observer.c) against a stub observer in place of the cluster: the jobs, sched and base
 * libraries only, a daemon state as main() builds it (one simulated 1 GiB GPU, the registry,
 * the event loop, the clock ticking one microsecond a reading), cluster groups of two ranks
 * whose ranks are child processes that wait to be killed, each registered on a socket pair as
 * salusctl submit and the shim do (jobs_reserve, groups_join, jobs_handle_register).
 *
 * The stub plays a one-node cluster's leader: it releases a group once each of its ranks has
 * registered, and issues a gang slot once each has been admitted, the next when the slot is
 * done. Events raised while the core's effects are applied reach it after the apply: the
 * release of a group admits both its ranks before the first "admitted" is heard, the slot it
 * then issues is a new apply, not one nested inside the release's. Across two groups the order
 * users see is the order of their readiness: the admissions (each rank's admitted time), then
 * the slots, group by group. */
#include "check_run.h"
#include "config.h"
#include "daemon.h"
#include "gpu_sched.h"
#include "groups.h"
#include "jobs-internal.h"
#include "jobs.h"
#include "jobs_observer.h"
#include "log.h"
#include "registry.h"

#include <check.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define RANKS 4

static uint64_t clock_ns;

uint64_t salusd_now_ns(void)
{
    return clock_ns += 1000;
}

typedef struct {
    pid_t pid;
    conn_t conn;
    int peer;
    job_t *job;
    uint64_t job_id, group_id;
} rank_t;

static salusd_t d;
static rank_t ranks[RANKS];
static char events[64][128];
static size_t event_count;
static int in_apply;          /* a callback ran while effects were being applied */
static int admitted_before_all; /* "admitted" heard while a rank released with it was not */
static uint64_t slot_seq;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    ck_assert_uint_lt(event_count, sizeof(events) / sizeof(events[0]));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(events[event_count++], sizeof(events[0]), fmt, ap);
    va_end(ap);
}

static int find_event(const char *text)
{
    for (size_t i = 0; i < event_count; i++)
        if (strcmp(events[i], text) == 0)
            return (int)i;
    return -1;
}

static void dump_events(void)
{
    for (size_t i = 0; i < event_count; i++)
        fprintf(stderr, "  %zu: %s\n", i, events[i]);
}

/* which group (1 or 2, in the order they were made) a core group id is */
static int group_no(uint64_t group_id)
{
    return group_id == ranks[0].group_id ? 1 : group_id == ranks[2].group_id ? 2 : 0;
}

/* ---- the stub observer: a one-node cluster's leader ---------------------------------------- */

static unsigned registered[3], admitted[3];

static void enter(salusd_t *dd)
{
    in_apply |= jobs_effects_applying(dd);
}

static void stub_rank_registered(salusd_t *dd, uint64_t group_id, uint32_t rank, uint64_t job_id)
{
    (void)job_id;
    enter(dd);
    int g = group_no(group_id);
    note("registered %d.%u", g, rank);
    if (++registered[g] == 2) {
        note("release %d", g);
        ck_assert_int_eq(jobs_group_release(dd, group_id), 0);
    }
}

static void stub_rank_admitted(salusd_t *dd, uint64_t group_id)
{
    enter(dd);
    int g = group_no(group_id);
    note("admitted %d", g);
    /* both ranks of the group were admitted by the apply that raised this */
    for (int i = 0; i < RANKS; i++)
        if (ranks[i].group_id == group_id && !registry_find(dd->registry, ranks[i].job_id)->admitted_ns)
            admitted_before_all = 1;
    if (++admitted[g] == 2) {
        note("slot %d %llu", g, (unsigned long long)(slot_seq + 1));
        int rc = jobs_group_slot(dd, group_id, ++slot_seq, 0);
        ck_assert_msg(rc == 0 || rc == -EALREADY, "slot refused: %d", rc);
    }
}

static void stub_slot_done(salusd_t *dd, uint64_t group_id, uint64_t seq)
{
    enter(dd);
    note("slot done %d %llu", group_no(group_id), (unsigned long long)seq);
}

static void stub_rank_submitted(salusd_t *dd, uint64_t group_id, uint32_t rank, uint64_t job_id)
{
    (void)dd;
    (void)group_id;
    (void)rank;
    (void)job_id;
}

static const jobs_observer_t stub = {
    .rank_submitted = stub_rank_submitted,
    .rank_registered = stub_rank_registered,
    .rank_admitted = stub_rank_admitted,
    .slot_done = stub_slot_done,
};

/* ---- a daemon and its ranks ---------------------------------------------------------------- */

static void setup(void)
{
    memset(&d, 0, sizeof(d));
    memset(ranks, 0, sizeof(ranks));
    memset(registered, 0, sizeof(registered));
    memset(admitted, 0, sizeof(admitted));
    event_count = 0;
    in_apply = admitted_before_all = 0;
    slot_seq = 0;
    char err[512] = "";
    char *argv[] = {"salusd", "--chunk-bytes", "1MiB", "--wait-log-s", "0", NULL};
    ck_assert_int_eq(salusd_config_load(&d.config, 5, argv), 0);
    salus_log_init("salusd", SALUS_LOG_ERROR);
    proto_enc_init(&d.enc);
    LIST_INIT(&d.conns);
    d.base = event_base_new();
    d.registry = registry_create();
    ck_assert(d.base && d.registry);
    d.devices.simulated = 1;
    d.devices.count = 1;
    d.devices.gpus[0].total_bytes = 1 * GIB;
    ck_assert_msg(gpu_sched_init(&d, err, sizeof(err)) == 0, "%s", err);
    d.cluster = (struct cluster_s *)&d; /* a cluster member: the ranks wait for the release */
    ck_assert_int_eq(jobs_observe(&d, &stub), 0);
    ck_assert_int_eq(server_observe_close(&d, CONN_SLOT_JOB, &jobs_conn_ops), 0);
}

static void teardown(void)
{
    jobs_shutdown(&d);
    groups_fini(&d);
    gpu_sched_fini(&d);
    for (int i = 0; i < RANKS; i++) {
        if (ranks[i].pid > 0) {
            kill(ranks[i].pid, SIGKILL);
            waitpid(ranks[i].pid, NULL, 0);
        }
        if (ranks[i].conn.bev)
            bufferevent_free(ranks[i].conn.bev);
        if (ranks[i].conn.pidfd > 0)
            close(ranks[i].conn.pidfd);
        if (ranks[i].peer > 0)
            close(ranks[i].peer);
    }
    jobs_observers_fini(&d);
    registry_destroy(d.registry);
    event_base_free(d.base);
    proto_enc_destroy(&d.enc);
}

/* rank r of group "g<group>" (world 2) submitted: a process and its connection, the job
 * reserved and joined to the group */
static void submit(int i, int group, uint32_t rank)
{
    rank_t *r = &ranks[i];
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    r->pid = fork();
    ck_assert_int_ge(r->pid, 0);
    if (r->pid == 0) {
        for (;;)
            pause();
    }
    conn_t *c = &r->conn;
    c->daemon = &d;
    c->bev = bufferevent_socket_new(d.base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    ck_assert_ptr_nonnull(c->bev);
    c->pid = r->pid;
    c->uid = getuid();
    c->gid = getgid();
    c->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
    ck_assert_int_ge(c->pidfd, 0);
    r->peer = sv[1];

    jobs_fields_t fields = {.iterations = 10, .persistent_bytes = 64 * MIB,
                            .ephemeral_bytes = 64 * MIB};
    snprintf(fields.name, sizeof(fields.name), "g%d-%u", group, rank);
    groups_fields_t gf = {.world = 2, .rank = rank, .local_rank = -1, .sync = LAUNCH_SYNC_BSP,
                       .share_gpus = 1}; /* one GPU here */
    snprintf(gf.name, sizeof(gf.name), "g%d", group);
    char err[256] = "";
    /* salusctl submit's connection: another process than the rank's program */
    conn_t submitter = {.daemon = &d, .pid = getpid(), .uid = getuid(), .gid = getgid(),
                        .pidfd = -1};
    ck_assert_msg(groups_check_join(&d, c->uid, &gf, err, sizeof(err)) == 0, "%s", err);
    r->job = jobs_reserve(&submitter, &fields);
    ck_assert_ptr_nonnull(r->job);
    ck_assert_int_eq(groups_join(&d, r->job, &gf), 0);
    r->job_id = r->job->id;
    r->group_id = r->job->group_id;
}

/* its program registers (SALUS_JOB_ID: the reserved job) */
static void register_rank(int i)
{
    rank_t *r = &ranks[i];
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    proto_pack_kv_uint(&pk, "job_id", r->job_id);
    proto_pack_kv_uint(&pk, "iterations", 10);
    proto_pack_kv_uint(&pk, "persistent_bytes", 64 * MIB);
    proto_pack_kv_uint(&pk, "ephemeral_bytes", 64 * MIB);
    proto_msg_t msg;
    memset(&msg, 0, sizeof(msg));
    msg.kind = PROTO_REQUEST;
    msg.id = (uint64_t)i + 1;
    snprintf(msg.op, sizeof(msg.op), "register");
    msgpack_unpacked_init(&msg.unpacked);
    size_t offset = 0;
    ck_assert_int_eq(msgpack_unpack_next(&msg.unpacked, sbuf.data, sbuf.size, &offset),
                     MSGPACK_UNPACK_SUCCESS);
    msg.body = msg.unpacked.data;
    jobs_handle_register(&r->conn, &msg);
    ck_assert_uint_eq(jobs_conn_job_id(&r->conn), r->job_id);
    msgpack_unpacked_destroy(&msg.unpacked);
    msgpack_sbuffer_destroy(&sbuf);
}

static uint64_t admitted_ns(int i)
{
    job_t *job = registry_find(d.registry, ranks[i].job_id);
    ck_assert_ptr_nonnull(job);
    return job->admitted_ns;
}

/* ---- the tests ----------------------------------------------------------------------------- */

/* One group: its release admits both ranks in one apply; the stub hears "admitted" twice after
 * it, never inside it, and its slot is a new apply. */
START_TEST(events_after_apply)
{
    submit(0, 1, 0);
    submit(1, 1, 1);
    register_rank(0);
    ck_assert_uint_eq(admitted_ns(0), 0); /* held for the release */
    register_rank(1);
    ck_assert_uint_ne(admitted_ns(0), 0);
    ck_assert_uint_ne(admitted_ns(1), 0);
    if (find_event("slot 1 1") < 0)
        dump_events();
    ck_assert_int_ge(find_event("release 1"), 0);
    ck_assert_int_gt(find_event("slot 1 1"), find_event("release 1"));
    ck_assert_int_eq(admitted_before_all, 0);
    ck_assert_int_eq(in_apply, 0);
}
END_TEST

/* Two groups whose ranks register interleaved, group 2 complete first: group 2 is released,
 * admitted and gets the first slot, then group 1: the admissions in that order (admitted
 * times), the slots in that order, each group's slot after its own admissions. The order
 * users see, whether the events reach the observer after the apply or inside it. */
START_TEST(order_two_groups)
{
    submit(0, 1, 0);
    submit(1, 1, 1);
    submit(2, 2, 0);
    submit(3, 2, 1);
    register_rank(0); /* 1.0 */
    register_rank(2); /* 2.0 */
    register_rank(3); /* 2.1: group 2 complete */
    register_rank(1); /* 1.1: group 1 complete */
    int rel2 = find_event("release 2"), rel1 = find_event("release 1");
    int slot2 = find_event("slot 2 1"), slot1 = find_event("slot 1 2");
    if (rel2 < 0 || rel1 < 0 || slot2 < 0 || slot1 < 0)
        dump_events();
    ck_assert_int_lt(rel2, rel1);
    ck_assert_int_lt(slot2, slot1);
    ck_assert_int_lt(slot2, rel1); /* group 2's slot before group 1 was even complete */
    /* admissions: group 2's ranks before group 1's */
    ck_assert_uint_ne(admitted_ns(2), 0);
    ck_assert_uint_ne(admitted_ns(3), 0);
    ck_assert_uint_lt(admitted_ns(2), admitted_ns(0));
    ck_assert_uint_lt(admitted_ns(3), admitted_ns(1));
    /* (no assertion of when the events came: this order is the same when they come at once,
     * inside the apply, as they did before the queue) */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("job_effects");
    TCase *tc = tcase_create("observers");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, events_after_apply);
    tcase_add_test(tc, order_two_groups);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
