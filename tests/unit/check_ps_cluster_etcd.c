/* ps_cluster's views against a REAL etcd (`etcd` from PATH; its absence is a failure), part of
 * the check_ps_cluster program: two daemons' cluster parts in this process (a cluster_t each,
 * its member list set by the test, as cluster.c keeps it), on one loop, one etcd on a free
 * loopback port (data in a temp dir on tmpfs; killed and removed at exit, also on failure):
 * the first view created only when absent, proposals by compare-and-swap (-ESTALE with the
 * view now there, -ENOENT, -EPROTO for a malformed record), an unreachable etcd answered with
 * an error in bounded time, watches (every newer view once, in order, on a later loop turn,
 * none after unwatch), a group run's views forgotten with its ring records, and the fail-over (a member's lease ends:
 * the first live server proposes the view without it, the others read it; a first live
 * server that does not watch: another proposes after the grace). */
#include "cluster-internal.h"
#include "ps_cluster-internal.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEP_MS 8000 /* the bound of one step */

/* ---- one etcd for the test case (started by the parent: an unchecked fixture) ------------- */

static pid_t etcd_pid, etcd_owner;
static char etcd_dir[128], endpoint[64];

static void etcd_cleanup(void)
{
    if (etcd_pid > 0 && etcd_owner == getpid()) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
        etcd_pid = 0;
    }
    if (etcd_dir[0] && etcd_owner == getpid()) {
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", etcd_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "check_ps_cluster: cannot remove %s\n", etcd_dir);
        etcd_dir[0] = 0;
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void etcd_up(void)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(etcd_dir, sizeof(etcd_dir), "%s/check-psv.XXXXXX", base);
    ck_assert_msg(mkdtemp(etcd_dir) != NULL, "mkdtemp: %s", strerror(errno));
    etcd_owner = getpid();
    atexit(etcd_cleanup);
    int client_port = free_port(), peer_port = free_port();
    char client[96], peer[96], cluster[128], data[200], log[200];
    snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", client_port);
    snprintf(client, sizeof(client), "http://%s", endpoint);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", peer_port);
    snprintf(cluster, sizeof(cluster), "n=%s", peer);
    snprintf(data, sizeof(data), "%s/data", etcd_dir);
    snprintf(log, sizeof(log), "%s/log", etcd_dir);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("etcd", "etcd", "--name", "n", "--data-dir", data, "--listen-client-urls", client,
               "--advertise-client-urls", client, "--listen-peer-urls", peer,
               "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, (char *)NULL);
        _exit(127);
    }
    etcd_pid = pid;
}

static void etcd_down(void)
{
    etcd_cleanup();
}

/* ---- the loop, fake daemons ---------------------------------------------------------------- */

static struct event_base *base;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the loop until *flag != 0 or timeout_ms passed. */
static int run_until(const int *flag, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    while (!*flag && now_ms() < deadline) {
        struct timeval tv = {0, 20 * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    return *flag;
}

static void run_for(int ms)
{
    int never = 0;
    run_until(&never, ms);
}

#define MAX_SEEN 16

typedef struct fake_s {
    salusd_t d;
    cluster_t cl;
    ps_cluster_t *ps;
    int seen;                     /* view_changed calls */
    char tables[MAX_SEEN][PS_NAME_BYTES];
    ps_view_t views[MAX_SEEN];
    uint64_t epochs[MAX_SEEN];
} fake_t;

static fake_t f1, f2;

static void on_view_changed(void *ctx, uid_t uid, const char *group, uint64_t epoch,
                            const char *table, const ps_view_t *view)
{
    fake_t *f = ctx;
    ck_assert_uint_eq(uid, 1000);
    ck_assert_str_eq(group, "g");
    if (f->seen < MAX_SEEN) {
        snprintf(f->tables[f->seen], PS_NAME_BYTES, "%s", table);
        f->views[f->seen] = *view;
        f->epochs[f->seen] = epoch;
    }
    f->seen++;
}

static void set_members(fake_t *f, const char *const *nodes)
{
    f->cl.member_count = 0;
    for (; *nodes; nodes++)
        snprintf(f->cl.members[f->cl.member_count++].node, LINKS_NODE_BYTES, "%s", *nodes);
}

static void fake_up(fake_t *f, const char *node, const char *prefix, const char *ep)
{
    memset(f, 0, sizeof(*f));
    f->d.base = base;
    etcd_config_t cfg = {.endpoints = ep, .timeout_ms = 1500};
    char err[300];
    f->cl.etcd = etcd_create(base, &cfg, err, sizeof(err));
    ck_assert_msg(f->cl.etcd != NULL, "%s", err);
    f->cl.d = &f->d;
    snprintf(f->cl.node, sizeof(f->cl.node), "%s", node);
    snprintf(f->cl.prefix, sizeof(f->cl.prefix), "%s", prefix);
    f->cl.members_read = 1;
    f->d.cluster = &f->cl;
    f->ps = calloc(1, sizeof(*f->ps));
    ck_assert_ptr_nonnull(f->ps);
    f->ps->d = &f->d;
    f->ps->cl = &f->cl;
    f->ps->started = 1;
    f->ps->hooks.view_changed = on_view_changed;
    f->ps->ctx = f;
    f->cl.observer_state = f->ps;
}

static void fake_down(fake_t *f)
{
    if (!f->ps)
        return;
    ps_replicas_stop(f->ps);
    etcd_destroy(f->cl.etcd);
    ps_replicas_free(f->ps);
    free(f->ps);
    f->ps = NULL;
}

typedef struct done_s {
    int called, rc;
    char err[400];
    ps_view_t view;
    int has_view;
} done_t;

static void on_done(void *arg, int rc, const char *err, const ps_view_t *view)
{
    done_t *o = arg;
    o->called++;
    o->rc = rc;
    snprintf(o->err, sizeof(o->err), "%s", err ? err : "(null)");
    o->has_view = view != NULL;
    if (view)
        o->view = *view;
}

/* Queues call (which takes &o), checks that done did not run inside it, waits for it. */
#define RUN(o, call)                                                                           \
    do {                                                                                       \
        memset(&(o), 0, sizeof(o));                                                            \
        ck_assert_int_eq((call), 0);                                                           \
        ck_assert_msg((o).called == 0, "done ran inside the call");                            \
        ck_assert_msg(run_until(&(o).called, STEP_MS), "no answer within %d ms", STEP_MS);    \
        ck_assert_int_eq((o).called, 1);                                                       \
    } while (0)

static char prefix[64];

static void fakes_setup(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    static int runs; /* (one process runs every test with CK_FORK=no) */
    snprintf(prefix, sizeof(prefix), "/t%d-%d", (int)getpid(), runs++);
    fake_up(&f1, "n1", prefix, endpoint);
    fake_up(&f2, "n2", prefix, endpoint);
    const char *all[] = {"n1", "n2", "n3", "n4", NULL};
    set_members(&f1, all);
    set_members(&f2, all);
    /* etcd was started by the fixture: wait until it answers */
    long long deadline = now_ms() + 20000;
    done_t o;
    do {
        RUN(o, ps_replicas_create(&f1.d, 1000, "probe", 1, "p", "n1", 1, on_done, &o));
        if (o.rc == 0)
            break;
        run_for(200);
    } while (now_ms() < deadline);
    ck_assert_msg(o.rc == 0, "etcd at %s does not answer: %s", endpoint, o.err);
}

static void fakes_teardown(void)
{
    fake_down(&f1);
    fake_down(&f2);
    event_base_free(base);
}

/* the value of a key, straight from etcd ("" when absent) */
typedef struct got_s {
    int called, error;
    size_t count;
    char value[512];
    int64_t mod_revision;
} got_t;

static void on_got(void *ctx, const etcd_result_t *r)
{
    got_t *g = ctx;
    g->called = 1;
    g->error = r->error;
    g->count = r->count;
    g->value[0] = 0;
    if (r->count) {
        snprintf(g->value, sizeof(g->value), "%.*s", (int)r->kvs[0].value_len, r->kvs[0].value);
        g->mod_revision = r->kvs[0].mod_revision;
    }
}

static got_t get_key(const char *key)
{
    got_t g = {0};
    ck_assert_int_eq(etcd_get(f1.cl.etcd, key, 0, on_got, &g), 0);
    ck_assert(run_until(&g.called, STEP_MS));
    ck_assert_int_eq(g.error, 0);
    return g;
}

static void put_key(const char *key, const char *value)
{
    got_t g = {0};
    ck_assert_int_eq(etcd_put(f1.cl.etcd, key, value, strlen(value), 0, on_got, &g), 0);
    ck_assert(run_until(&g.called, STEP_MS));
    ck_assert_int_eq(g.error, 0);
}

static void view_key(char *out, size_t size, const char *table)
{
    snprintf(out, size, "%s/psv/1000/g/7/%s", prefix, table);
}

START_TEST(test_etcd_create_and_propose)
{
    done_t o;
    /* the first view: created */
    RUN(o, ps_replicas_create(&f1.d, 1000, "g", 7, "w", "n1,n2,n3", 3, on_done, &o));
    ck_assert_msg(o.rc == 0, "%s", o.err);
    ck_assert_str_eq(o.view.servers, "n1,n2,n3");
    ck_assert_uint_eq(o.view.replicas, 3);
    uint64_t first = o.view.number;
    ck_assert_uint_gt(first, 0);
    char key[128];
    view_key(key, sizeof(key), "w");
    got_t g = get_key(key);
    ck_assert_str_eq(g.value, "{\"servers\":[\"n1\",\"n2\",\"n3\"],\"replicas\":3}");
    ck_assert_uint_eq((uint64_t)g.mod_revision, first);
    /* another opener's create finds it: the first wins */
    RUN(o, ps_replicas_create(&f2.d, 1000, "g", 7, "w", "n4", 1, on_done, &o));
    ck_assert_int_eq(o.rc, 0);
    ck_assert_str_eq(o.view.servers, "n1,n2,n3");
    ck_assert_uint_eq(o.view.number, first);
    /* a proposal from the current view wins (R kept) */
    RUN(o, ps_replicas_propose(&f2.d, 1000, "g", 7, "w", first, "n1,n2,n3,n4", on_done,
                               &o));
    ck_assert_msg(o.rc == 0, "%s", o.err);
    ck_assert_str_eq(o.view.servers, "n1,n2,n3,n4");
    ck_assert_uint_eq(o.view.replicas, 3);
    uint64_t second = o.view.number;
    ck_assert_uint_gt(second, first);
    g = get_key(key);
    ck_assert_uint_eq((uint64_t)g.mod_revision, second);
    /* one from a view that is gone loses: -ESTALE with the view now there */
    RUN(o, ps_replicas_propose(&f1.d, 1000, "g", 7, "w", first, "n1,n2", on_done, &o));
    ck_assert_int_eq(o.rc, -ESTALE);
    ck_assert(o.has_view);
    ck_assert_uint_eq(o.view.number, second);
    ck_assert_str_eq(o.view.servers, "n1,n2,n3,n4");
    g = get_key(key);
    ck_assert_uint_eq((uint64_t)g.mod_revision, second); /* untouched */
    /* a table without a view: -ENOENT */
    RUN(o, ps_replicas_propose(&f1.d, 1000, "g", 7, "none", 5, "n1", on_done, &o));
    ck_assert_int_eq(o.rc, -ENOENT);
    ck_assert(!o.has_view);
    /* a malformed record is never trusted: -EPROTO, for a create and a proposal */
    view_key(key, sizeof(key), "bad");
    put_key(key, "{\"servers\":[\"n2\",\"n1\"],\"replicas\":3}");
    RUN(o, ps_replicas_create(&f1.d, 1000, "g", 7, "bad", "n1", 1, on_done, &o));
    ck_assert_int_eq(o.rc, -EPROTO);
    ck_assert(!o.has_view);
    ck_assert_ptr_nonnull(strstr(o.err, "malformed"));
    g = get_key(key);
    RUN(o, ps_replicas_propose(&f1.d, 1000, "g", 7, "bad", (uint64_t)g.mod_revision, "n1",
                               on_done, &o));
    ck_assert_int_eq(o.rc, -EPROTO);
    /* the group's run (group epoch 3) is over: the views its ring records name (their
     * create revisions) go with them; another run's view stays */
    char ring[128], rkey[128];
    snprintf(ring, sizeof(ring), "%s/ps/1000/g/3/v", prefix);
    put_key(ring, "{\"count\":1}");
    uint64_t e = (uint64_t)get_key(ring).mod_revision; /* (created: mod = create revision) */
    RUN(o, ps_replicas_create(&f1.d, 1000, "g", e, "v", "n1", 1, on_done, &o));
    ck_assert_int_eq(o.rc, 0);
    snprintf(rkey, sizeof(rkey), "%s/psv/1000/g/%llu/v", prefix, (unsigned long long)e);
    ck_assert_uint_eq(get_key(rkey).count, 1);
    ps_cluster_forget_epoch(&f1.cl, 1000, "g", 3);
    long long deadline = now_ms() + STEP_MS;
    while ((get_key(rkey).count || get_key(ring).count) && now_ms() < deadline)
        run_for(50);
    ck_assert_uint_eq(get_key(rkey).count, 0);
    ck_assert_uint_eq(get_key(ring).count, 0);
    view_key(key, sizeof(key), "w");
    ck_assert_uint_eq(get_key(key).count, 1);
}
END_TEST

START_TEST(test_etcd_unreachable_bounded)
{
    fake_t f3;
    char dead[64];
    snprintf(dead, sizeof(dead), "127.0.0.1:%d", free_port()); /* nothing listens there */
    fake_up(&f3, "n3", prefix, dead);
    done_t o;
    long long t0 = now_ms();
    RUN(o, ps_replicas_create(&f3.d, 1000, "g", 7, "w", "n1", 1, on_done, &o));
    ck_assert_int_lt(o.rc, 0);
    ck_assert_ptr_nonnull(strstr(o.err, "cannot be written"));
    RUN(o, ps_replicas_propose(&f3.d, 1000, "g", 7, "w", 3, "n1", on_done, &o));
    ck_assert_int_lt(o.rc, 0);
    ck_assert_int_ne(o.rc, -ESTALE);
    ck_assert_int_lt(now_ms() - t0, 2 * STEP_MS);
    /* a watch meanwhile: no call, no crash; stopped with requests in flight: no call after */
    ck_assert_int_eq(ps_replicas_watch(&f3.d, 1000, "g", 7, "w"), 0);
    run_for(500);
    ck_assert_int_eq(f3.seen, 0);
    memset(&o, 0, sizeof(o));
    ck_assert_int_eq(ps_replicas_create(&f3.d, 1000, "g", 7, "v", "n1", 1, on_done, &o), 0);
    ps_replicas_stop(f3.ps);
    run_for(2500);
    ck_assert_int_eq(o.called, 0);
    fake_down(&f3);
}
END_TEST

START_TEST(test_etcd_watch_in_order)
{
    done_t o;
    /* watched before the view exists: its creation is the first view */
    ck_assert_int_eq(ps_replicas_watch(&f1.d, 1000, "g", 7, "w"), 0);
    ck_assert_int_eq(ps_replicas_watch(&f2.d, 1000, "g", 7, "w"), 0);
    ck_assert_int_eq(ps_replicas_watch(&f2.d, 1000, "g", 7, "w"), 0); /* idempotent */
    ck_assert_int_eq(ps_replicas_watch(&f2.d, 1000, "g", 7, "x"), 0);
    run_for(300);
    ck_assert_int_eq(f1.seen + f2.seen, 0);
    RUN(o, ps_replicas_create(&f1.d, 1000, "g", 7, "w", "n1,n2", 2, on_done, &o));
    ck_assert_int_eq(o.rc, 0);
    uint64_t v1 = o.view.number;
    ck_assert(run_until(&f1.seen, STEP_MS));
    ck_assert(run_until(&f2.seen, STEP_MS));
    /* two proposals in a row: every daemon sees both, once each, in order */
    RUN(o, ps_replicas_propose(&f1.d, 1000, "g", 7, "w", v1, "n1,n2,n3", on_done, &o));
    ck_assert_int_eq(o.rc, 0);
    uint64_t v2 = o.view.number;
    RUN(o, ps_replicas_propose(&f2.d, 1000, "g", 7, "w", v2, "n2,n3", on_done, &o));
    ck_assert_int_eq(o.rc, 0);
    uint64_t v3 = o.view.number;
    long long deadline = now_ms() + STEP_MS;
    while ((f1.seen < 3 || f2.seen < 3) && now_ms() < deadline)
        run_for(50);
    run_for(2 * PS_VIEW_POLL_MS); /* nothing more comes */
    fake_t *fs[] = {&f1, &f2};
    for (int k = 0; k < 2; k++) {
        fake_t *f = fs[k];
        ck_assert_int_eq(f->seen, 3);
        const uint64_t numbers[] = {v1, v2, v3};
        const char *servers[] = {"n1,n2", "n1,n2,n3", "n2,n3"};
        for (int i = 0; i < 3; i++) {
            ck_assert_str_eq(f->tables[i], "w");
            ck_assert_uint_eq(f->epochs[i], 7);
            ck_assert_uint_eq(f->views[i].number, numbers[i]);
            ck_assert_str_eq(f->views[i].servers, servers[i]);
            ck_assert_uint_eq(f->views[i].replicas, 2);
        }
    }
    /* a table watched after its view exists: read at once */
    ps_replicas_unwatch(&f1.d, 1000, "g", 7, "w");
    ck_assert_int_eq(ps_replicas_watch(&f1.d, 1000, "g", 7, "w"), 0);
    deadline = now_ms() + STEP_MS;
    while (f1.seen < 4 && now_ms() < deadline)
        run_for(50);
    ck_assert_int_eq(f1.seen, 4);
    ck_assert_uint_eq(f1.views[3].number, v3);
    /* unwatched: no more calls there */
    ps_replicas_unwatch(&f2.d, 1000, "g", 7, "w");
    RUN(o, ps_replicas_propose(&f1.d, 1000, "g", 7, "w", v3, "n3", on_done, &o));
    ck_assert_int_eq(o.rc, 0);
    deadline = now_ms() + STEP_MS;
    while (f1.seen < 5 && now_ms() < deadline)
        run_for(50);
    ck_assert_int_eq(f1.seen, 5);
    run_for(2 * PS_VIEW_POLL_MS);
    ck_assert_int_eq(f2.seen, 3);
    /* a malformed record written by hand: ignored by the watchers */
    char key[128];
    view_key(key, sizeof(key), "x");
    put_key(key, "{\"servers\":[],\"replicas\":1}");
    run_for(3 * PS_VIEW_POLL_MS);
    ck_assert_int_eq(f2.seen, 3);
}
END_TEST

/* Waits until fake f has seen a view of table "w" with these servers; its index. */
static int wait_view(fake_t *f, const char *servers, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        for (int i = 0; i < f->seen && i < MAX_SEEN; i++)
            if (strcmp(f->tables[i], "w") == 0 && strcmp(f->views[i].servers, servers) == 0)
                return i;
        if (now_ms() >= deadline)
            return -1;
        run_for(50);
    }
}

START_TEST(test_etcd_failover)
{
    done_t o;
    RUN(o, ps_replicas_create(&f1.d, 1000, "g", 7, "w", "n1,n2,n3", 3, on_done, &o));
    uint64_t v1 = o.view.number;
    ck_assert_int_eq(ps_replicas_watch(&f1.d, 1000, "g", 7, "w"), 0);
    ck_assert_int_eq(ps_replicas_watch(&f2.d, 1000, "g", 7, "w"), 0);
    ck_assert_int_ge(wait_view(&f1, "n1,n2,n3", STEP_MS), 0);
    ck_assert_int_ge(wait_view(&f2, "n1,n2,n3", STEP_MS), 0);
    ck_assert_int_eq(ps_replicas_member_alive(&f1.d, "n3"), 1);
    /* n3's lease ends (its member key deleted: both daemons' lists lose it) */
    const char *without3[] = {"n1", "n2", "n4", NULL};
    set_members(&f1, without3);
    set_members(&f2, without3);
    ck_assert_int_eq(ps_replicas_member_alive(&f1.d, "n3"), 0);
    ck_assert_int_eq(ps_replicas_member_alive(&f1.d, "n1"), 1); /* self */
    ps_replicas_node_gone(f1.ps, "n3");
    ps_replicas_node_gone(f2.ps, "n3");
    /* n1 (the first live server) proposes at once; both read the view without n3, once */
    int i1 = wait_view(&f1, "n1,n2", PS_FAILOVER_GRACE_MS - 500);
    int i2 = wait_view(&f2, "n1,n2", PS_FAILOVER_GRACE_MS - 500);
    ck_assert_int_eq(i1, 1);
    ck_assert_int_eq(i2, 1);
    ck_assert_uint_gt(f2.views[1].number, v1);
    ck_assert_uint_eq(f2.views[1].replicas, 3);
    run_for(PS_FAILOVER_GRACE_MS + 500); /* n2 never proposes another */
    ck_assert_int_eq(f1.seen, 2);
    ck_assert_int_eq(f2.seen, 2);
    /* n1's lease ends too: n2 is the first live one now */
    const char *only24[] = {"n2", "n4", NULL};
    set_members(&f2, only24);
    ps_replicas_stop(f1.ps); /* n1 is gone: it watches nothing */
    ps_replicas_node_gone(f2.ps, "n1");
    ck_assert_int_eq(wait_view(&f2, "n2", PS_FAILOVER_GRACE_MS - 500), 2);
    char key[128];
    view_key(key, sizeof(key), "w");
    got_t g = get_key(key);
    ck_assert_str_eq(g.value, "{\"servers\":[\"n2\"],\"replicas\":3}");
}
END_TEST

START_TEST(test_etcd_failover_grace)
{
    /* n1 is the first live server but does not watch the table: n2 proposes after the grace */
    done_t o;
    RUN(o, ps_replicas_create(&f2.d, 1000, "g", 7, "w", "n1,n2,n3", 3, on_done, &o));
    ck_assert_int_eq(ps_replicas_watch(&f2.d, 1000, "g", 7, "w"), 0);
    ck_assert_int_ge(wait_view(&f2, "n1,n2,n3", STEP_MS), 0);
    const char *without3[] = {"n1", "n2", NULL};
    set_members(&f2, without3);
    long long t0 = now_ms();
    ps_replicas_node_gone(f2.ps, "n3");
    run_for(PS_FAILOVER_GRACE_MS - 500);
    ck_assert_int_eq(f2.seen, 1); /* n1's turn first */
    ck_assert_int_ge(wait_view(&f2, "n1,n2", STEP_MS), 1);
    ck_assert_int_ge(now_ms() - t0, PS_FAILOVER_GRACE_MS - 100);
}
END_TEST

TCase *ps_cluster_etcd_tcase(void);

TCase *ps_cluster_etcd_tcase(void)
{
    TCase *tc = tcase_create("views in etcd");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, etcd_up, etcd_down);
    tcase_add_checked_fixture(tc, fakes_setup, fakes_teardown);
    tcase_add_test(tc, test_etcd_create_and_propose);
    tcase_add_test(tc, test_etcd_unreachable_bounded);
    tcase_add_test(tc, test_etcd_watch_in_order);
    tcase_add_test(tc, test_etcd_failover);
    tcase_add_test(tc, test_etcd_failover_grace);
    return tc;
}
