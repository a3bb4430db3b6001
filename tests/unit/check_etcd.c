/* Unit tests for salusd's etcd client (salusd/etcd*.c) against a REAL etcd (`etcd` from
 * PATH; its absence is a failure): put/get/delete with prefixes, transactions (create if
 * absent, compare-and-swap), leases (grant, keepalive, revoke, expiry), watches (events in
 * order, a restart of etcd survived, compaction -> -ERANGE), an unreachable endpoint named
 * in the error, failover to the second endpoint, TLS with client certificates; and, without
 * a server, bad replies read as errors. Every etcd started here runs on free loopback ports
 * with its data on a tmpfs temp dir and is killed (and the dir removed) at the end, also on
 * failure (atexit; PR_SET_PDEATHSIG when the test process dies). */
#include "check_run.h"
#include "etcd-internal.h"
#include "log.h"

#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEP_MS 8000 /* the bound of one step (a request, an event) */

/* ---- etcd processes --------------------------------------------------------------------- */

typedef struct instance_s {
    pid_t pid, owner; /* owner: the process that started it (Check forks per test) */
    int client_port, peer_port;
    bool tls;
    char dir[256];
    char endpoint[64];
} instance_t;

static char root[128];
static pid_t root_owner;
static instance_t *instances[8];

static void cleanup_at_exit(void)
{
    for (size_t i = 0; i < 8; i++) {
        instance_t *in = instances[i];
        if (in && in->pid > 0 && in->owner == getpid()) {
            kill(in->pid, SIGKILL);
            waitpid(in->pid, NULL, 0);
            in->pid = 0;
        }
    }
    if (root[0] && root_owner == getpid()) {
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
            fprintf(stderr, "check_etcd: cannot remove %s\n", root);
        root[0] = 0;
    }
}

static void make_root(void)
{
    if (root[0])
        return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof(root), "%s/check-etcd.XXXXXX", base);
    ck_assert_msg(mkdtemp(root) != NULL, "mkdtemp %s: %s", root, strerror(errno));
    root_owner = getpid();
    atexit(cleanup_at_exit);
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

static bool etcd_on_path(void)
{
    const char *path = getenv("PATH");
    char dir[4096], file[4200];
    snprintf(dir, sizeof(dir), "%s", path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dir, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(file, sizeof(file), "%s/etcd", d);
        if (access(file, X_OK) == 0)
            return true;
    }
    return false;
}

/* Starts (or restarts, same data and ports) in; does not wait for it. */
static void instance_start(instance_t *in)
{
    ck_assert_msg(etcd_on_path(), "etcd is not on PATH: these tests need a real etcd "
                                  "(Debian: apt-get install etcd-server)");
    if (!in->dir[0]) {
        make_root();
        in->client_port = free_port();
        in->peer_port = free_port();
        snprintf(in->dir, sizeof(in->dir), "%s/etcd-%d", root, in->client_port);
        ck_assert_int_eq(mkdir(in->dir, 0700), 0);
        snprintf(in->endpoint, sizeof(in->endpoint), "127.0.0.1:%d", in->client_port);
        for (size_t i = 0; i < 8; i++)
            if (!instances[i]) {
                instances[i] = in;
                break;
            }
    }
    char client[96], peer[96], data[300], cluster[128], log[300], ca[300], cert[300], key[300];
    snprintf(client, sizeof(client), "%s://%s", in->tls ? "https" : "http", in->endpoint);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", in->peer_port);
    snprintf(cluster, sizeof(cluster), "n=%s", peer);
    snprintf(data, sizeof(data), "%s/data", in->dir);
    snprintf(log, sizeof(log), "%s/log", in->dir);
    snprintf(ca, sizeof(ca), "%s/tls/ca.crt", root);
    snprintf(cert, sizeof(cert), "%s/tls/server.crt", root);
    snprintf(key, sizeof(key), "%s/tls/server.key", root);
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
        if (in->tls)
            execlp("etcd", "etcd", "--name", "n", "--data-dir", data, "--listen-client-urls",
                   client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                   "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                   "--cert-file", cert, "--key-file", key, "--client-cert-auth",
                   "--trusted-ca-file", ca, (char *)NULL);
        else
            execlp("etcd", "etcd", "--name", "n", "--data-dir", data, "--listen-client-urls",
                   client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                   "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                   (char *)NULL);
        _exit(127);
    }
    in->pid = pid;
    in->owner = getpid();
}

static void instance_stop(instance_t *in)
{
    if (in->pid > 0 && in->owner == getpid()) {
        kill(in->pid, SIGTERM);
        waitpid(in->pid, NULL, 0);
    }
    in->pid = 0;
}

/* ---- the loop and results --------------------------------------------------------------- */

static struct event_base *base;

typedef struct outcome_s {
    bool done;
    int error;
    char message[700];
    int64_t revision, lease_id, ttl;
    int succeeded;
    size_t count;
    char keys[8][64], values[8][64];
    size_t value_lens[8];
    int64_t mod_revisions[8], leases[8], versions[8];
} outcome_t;

static void on_result(void *ctx, const etcd_result_t *r)
{
    outcome_t *o = ctx;
    o->done = true;
    o->error = r->error;
    snprintf(o->message, sizeof(o->message), "%s", r->message ? r->message : "(null)");
    o->revision = r->revision;
    o->lease_id = r->lease_id;
    o->ttl = r->ttl;
    o->succeeded = r->succeeded;
    o->count = r->count;
    for (size_t i = 0; i < r->count && i < 8; i++) {
        snprintf(o->keys[i], sizeof(o->keys[i]), "%s", r->kvs[i].key);
        memcpy(o->values[i], r->kvs[i].value,
               r->kvs[i].value_len < 63 ? r->kvs[i].value_len + 1 : 63);
        o->value_lens[i] = r->kvs[i].value_len;
        o->mod_revisions[i] = r->kvs[i].mod_revision;
        o->leases[i] = r->kvs[i].lease;
        o->versions[i] = r->kvs[i].version;
    }
    event_base_loopbreak(base);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the loop until *flag or timeout_ms passed (each round bounded by loopexit). */
static bool run_until(const bool *flag, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    while (!*flag && now_ms() < deadline) {
        struct timeval tv = {0, 100 * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    return *flag;
}

/* Queues call (which takes &o), checks that the callback did not run inside it, waits. */
#define RUN(o, call)                                                                           \
    do {                                                                                       \
        memset(&(o), 0, sizeof(o));                                                            \
        ck_assert_int_eq((call), 0);                                                           \
        ck_assert_msg(!(o).done, "a callback ran inside the call that queued it");            \
        ck_assert_msg(run_until(&(o).done, STEP_MS), "no result within %d ms", STEP_MS);      \
    } while (0)

#define RUN_OK(o, call)                                                                        \
    do {                                                                                       \
        RUN(o, call);                                                                          \
        ck_assert_msg((o).error == 0, "error %d: %s", (o).error, (o).message);                \
    } while (0)

static etcd_t *client_for(const char *endpoints, const etcd_tls_t *tls)
{
    char err[256] = "";
    etcd_config_t config = {.endpoints = endpoints, .timeout_ms = 2000};
    if (tls)
        config.tls = *tls;
    etcd_t *etcd = etcd_create(base, &config, err, sizeof(err));
    ck_assert_msg(etcd != NULL, "etcd_create(%s): %s", endpoints, err);
    return etcd;
}

/* Waits (bounded) until etcd at in answers a range request. */
static void instance_wait_ready(instance_t *in, const etcd_tls_t *tls)
{
    etcd_t *etcd = client_for(in->endpoint, tls);
    outcome_t o;
    long long deadline = now_ms() + 30000;
    do {
        RUN(o, etcd_get(etcd, "probe", 0, on_result, &o));
        if (o.error == 0)
            break;
        int status;
        ck_assert_msg(waitpid(in->pid, &status, WNOHANG) == 0,
                      "etcd exited (status %d); see %s/log", status, in->dir);
        struct timeval tv = {0, 100 * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    } while (now_ms() < deadline);
    ck_assert_msg(o.error == 0, "etcd at %s not ready in 30 s: %s", in->endpoint, o.message);
    etcd_destroy(etcd);
}

static instance_t plain;
static etcd_t *client;

static void plain_up(void) /* unchecked: once, in the runner's process */
{
    base = event_base_new();
    instance_start(&plain);
    instance_wait_ready(&plain, NULL);
    event_base_free(base);
    base = NULL;
}

static void plain_down(void)
{
    instance_stop(&plain);
}

static void loop_setup(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    client = client_for(plain.endpoint[0] ? plain.endpoint : "127.0.0.1:1", NULL);
}

static void loop_teardown(void)
{
    etcd_destroy(client);
    client = NULL;
    event_base_free(base);
    base = NULL;
}

/* ---- kv --------------------------------------------------------------------------------- */

START_TEST(test_put_get_prefix_delete)
{
    outcome_t o;
    RUN_OK(o, etcd_put(client, "/t1/a", "1", 1, 0, on_result, &o));
    ck_assert_int_gt(o.revision, 0);
    RUN_OK(o, etcd_put(client, "/t1/b", "2\0two", 5, 0, on_result, &o));
    RUN_OK(o, etcd_put(client, "/t1x", "x", 1, 0, on_result, &o));
    RUN_OK(o, etcd_get(client, "/t1/", 1, on_result, &o));
    ck_assert_uint_eq(o.count, 2);
    ck_assert_str_eq(o.keys[0], "/t1/a");
    ck_assert_str_eq(o.values[0], "1");
    ck_assert_str_eq(o.keys[1], "/t1/b");
    ck_assert_uint_eq(o.value_lens[1], 5);
    ck_assert_int_eq(memcmp(o.values[1], "2\0two", 6), 0);
    ck_assert_int_eq(o.versions[0], 1);
    ck_assert_int_lt(o.mod_revisions[0], o.mod_revisions[1]);
    RUN_OK(o, etcd_get(client, "/t1/a", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 1);
    RUN_OK(o, etcd_get(client, "/nothing/here", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 0);

    RUN_OK(o, etcd_delete(client, "/t1/a", 0, on_result, &o));
    RUN_OK(o, etcd_get(client, "/t1/", 1, on_result, &o));
    ck_assert_uint_eq(o.count, 1);
    ck_assert_str_eq(o.keys[0], "/t1/b");
    RUN_OK(o, etcd_delete(client, "/t1/", 1, on_result, &o));
    RUN_OK(o, etcd_get(client, "/t1", 1, on_result, &o));
    ck_assert_uint_eq(o.count, 1); /* "/t1x" is not under "/t1/" */
    ck_assert_str_eq(o.keys[0], "/t1x");
}
END_TEST

START_TEST(test_txn_create_once_and_cas)
{
    outcome_t o;
    etcd_txn_t create = {.key = "/txn/k", .target = ETCD_CMP_CREATE_REVISION, .rev = 0,
                         .success = {.kind = ETCD_OP_PUT, .value = "first", .value_len = 5},
                         .failure = {.kind = ETCD_OP_GET}};
    RUN_OK(o, etcd_txn(client, &create, on_result, &o));
    ck_assert_int_eq(o.succeeded, 1);
    create.success.value = "second";
    create.success.value_len = 6;
    RUN_OK(o, etcd_txn(client, &create, on_result, &o));
    ck_assert_int_eq(o.succeeded, 0);
    ck_assert_uint_eq(o.count, 1);
    ck_assert_str_eq(o.values[0], "first");
    int64_t rev = o.mod_revisions[0];

    etcd_txn_t cas = {.key = "/txn/k", .target = ETCD_CMP_MOD_REVISION, .rev = rev,
                      .success = {.kind = ETCD_OP_PUT, .value = "third", .value_len = 5},
                      .failure = {.kind = ETCD_OP_GET}};
    RUN_OK(o, etcd_txn(client, &cas, on_result, &o));
    ck_assert_int_eq(o.succeeded, 1);
    cas.success.value = "stale";
    RUN_OK(o, etcd_txn(client, &cas, on_result, &o)); /* rev is old now */
    ck_assert_int_eq(o.succeeded, 0);
    ck_assert_str_eq(o.values[0], "third");
    ck_assert_int_gt(o.mod_revisions[0], rev);

    etcd_txn_t del = {.key = "/txn/k", .target = ETCD_CMP_MOD_REVISION,
                      .rev = o.mod_revisions[0], .success = {.kind = ETCD_OP_DELETE}};
    RUN_OK(o, etcd_txn(client, &del, on_result, &o));
    ck_assert_int_eq(o.succeeded, 1);
    RUN_OK(o, etcd_get(client, "/txn/k", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 0);
}
END_TEST

/* ---- leases ----------------------------------------------------------------------------- */

START_TEST(test_lease_keepalive_and_revoke)
{
    outcome_t o;
    RUN_OK(o, etcd_lease_grant(client, 30, on_result, &o));
    int64_t id = o.lease_id;
    ck_assert_int_ne(id, 0);
    ck_assert_int_eq(o.ttl, 30);
    RUN_OK(o, etcd_put(client, "/lease/k", "v", 1, id, on_result, &o));
    RUN_OK(o, etcd_get(client, "/lease/k", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 1);
    ck_assert_int_eq(o.leases[0], id);
    RUN_OK(o, etcd_lease_keepalive(client, id, on_result, &o));
    ck_assert_int_eq(o.lease_id, id);
    ck_assert_int_gt(o.ttl, 0);
    RUN_OK(o, etcd_lease_timetolive(client, id, on_result, &o));
    ck_assert(o.ttl > 0 && o.ttl <= 30);
    RUN_OK(o, etcd_lease_revoke(client, id, on_result, &o));
    RUN_OK(o, etcd_get(client, "/lease/k", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 0);
    RUN_OK(o, etcd_lease_keepalive(client, id, on_result, &o));
    ck_assert_int_le(o.ttl, 0);
    RUN(o, etcd_lease_revoke(client, id, on_result, &o)); /* gone: etcd says so */
    ck_assert_int_eq(o.error, -EIO);
    ck_assert_ptr_nonnull(strstr(o.message, plain.endpoint));
}
END_TEST

START_TEST(test_lease_expiry)
{
    outcome_t o;
    RUN_OK(o, etcd_lease_grant(client, 2, on_result, &o));
    int64_t id = o.lease_id;
    ck_assert_int_ge(o.ttl, 2);
    RUN_OK(o, etcd_put(client, "/expire/k", "v", 1, id, on_result, &o));
    long long deadline = now_ms() + 15000;
    do {
        RUN_OK(o, etcd_get(client, "/expire/k", 0, on_result, &o));
        if (o.count == 0)
            break;
        bool never = false;
        run_until(&never, 200);
    } while (now_ms() < deadline);
    ck_assert_msg(o.count == 0, "the key of an expired lease is still there");
    RUN_OK(o, etcd_lease_keepalive(client, id, on_result, &o));
    ck_assert_int_le(o.ttl, 0);
    RUN_OK(o, etcd_lease_timetolive(client, id, on_result, &o));
    ck_assert_int_le(o.ttl, 0);
}
END_TEST

/* ---- watches ---------------------------------------------------------------------------- */

typedef struct seen_s {
    int batches, errors, last_error;
    size_t count;
    etcd_event_kind_t kinds[32];
    char keys[32][32], values[32][32];
    int64_t revisions[32];
    bool created;
    char message[700];
} seen_t;

static void on_watch(void *ctx, const etcd_event_t *events, size_t count, int64_t revision,
                     int error, const char *message)
{
    (void)revision;
    seen_t *s = ctx;
    if (error) {
        s->errors++;
        s->last_error = error;
        snprintf(s->message, sizeof(s->message), "%s", message);
    } else {
        s->batches++;
        s->created = true;
    }
    for (size_t i = 0; i < count && s->count < 32; i++, s->count++) {
        s->kinds[s->count] = events[i].kind;
        snprintf(s->keys[s->count], 32, "%s", events[i].kv.key);
        snprintf(s->values[s->count], 32, "%s", events[i].kv.value ? events[i].kv.value : "");
        s->revisions[s->count] = events[i].kv.mod_revision;
    }
    event_base_loopbreak(base);
}

/* Runs the loop until s has n events (bounded). */
static void wait_events(seen_t *s, size_t n)
{
    long long deadline = now_ms() + STEP_MS;
    while (s->count < n && now_ms() < deadline) {
        bool never = false;
        run_until(&never, 100);
    }
    ck_assert_msg(s->count >= n, "%zu watch events of %zu (last error %d: %s)", s->count, n,
                  s->last_error, s->message);
}

static void check_put_put_delete(const seen_t *s, size_t at)
{
    ck_assert_int_eq(s->kinds[at], ETCD_EVENT_PUT);
    ck_assert_str_eq(s->keys[at], "/w/a");
    ck_assert_str_eq(s->values[at], "1");
    ck_assert_int_eq(s->kinds[at + 1], ETCD_EVENT_PUT);
    ck_assert_str_eq(s->keys[at + 1], "/w/b");
    ck_assert_int_eq(s->kinds[at + 2], ETCD_EVENT_DELETE);
    ck_assert_str_eq(s->keys[at + 2], "/w/a");
    ck_assert_int_lt(s->revisions[at], s->revisions[at + 1]);
    ck_assert_int_lt(s->revisions[at + 1], s->revisions[at + 2]);
}

START_TEST(test_watch_events_in_order)
{
    seen_t s = {0}, history = {0};
    outcome_t o;
    etcd_watch_t *w = etcd_watch(client, "/w/", 0, on_watch, &s);
    ck_assert_ptr_nonnull(w);
    ck_assert_msg(run_until(&s.created, STEP_MS), "the watch did not start: %s", s.message);
    RUN_OK(o, etcd_put(client, "/w/a", "1", 1, 0, on_result, &o));
    int64_t first = o.revision;
    RUN_OK(o, etcd_put(client, "/other", "x", 1, 0, on_result, &o));
    RUN_OK(o, etcd_put(client, "/w/b", "2", 1, 0, on_result, &o));
    RUN_OK(o, etcd_delete(client, "/w/a", 0, on_result, &o));
    wait_events(&s, 3);
    ck_assert_uint_eq(s.count, 3);
    check_put_put_delete(&s, 0);
    ck_assert_int_eq(s.revisions[0], first);
    ck_assert_int_eq(s.errors, 0);

    /* from a past revision: the same history */
    etcd_watch_t *h = etcd_watch(client, "/w/", first, on_watch, &history);
    wait_events(&history, 3);
    check_put_put_delete(&history, 0);
    etcd_watch_cancel(h);
    etcd_watch_cancel(w);
    size_t before = s.count;
    RUN_OK(o, etcd_put(client, "/w/c", "3", 1, 0, on_result, &o));
    bool never = false;
    run_until(&never, 300);
    ck_assert_uint_eq(s.count, before); /* no callback after a cancel */
}
END_TEST

/* POST /v3/kv/compaction, blocking (test only). */
static void compact(const char *endpoint, int64_t revision)
{
    char url[128], body[64];
    snprintf(url, sizeof(url), "http://%s/v3/kv/compaction", endpoint);
    snprintf(body, sizeof(body), "{\"revision\":\"%lld\",\"physical\":true}",
             (long long)revision);
    CURL *easy = curl_easy_init();
    FILE *sink = fopen("/dev/null", "w");
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    ck_assert_int_eq(curl_easy_perform(easy), CURLE_OK);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    ck_assert_int_eq(status, 200);
    curl_easy_cleanup(easy);
    fclose(sink);
}

START_TEST(test_watch_compacted_is_erange)
{
    outcome_t o;
    RUN_OK(o, etcd_put(client, "/c/a", "1", 1, 0, on_result, &o));
    int64_t old = o.revision;
    RUN_OK(o, etcd_put(client, "/c/a", "2", 1, 0, on_result, &o));
    RUN_OK(o, etcd_put(client, "/c/a", "3", 1, 0, on_result, &o));
    compact(plain.endpoint, o.revision);
    seen_t s = {0};
    etcd_watch_t *w = etcd_watch(client, "/c/", old, on_watch, &s);
    long long deadline = now_ms() + STEP_MS;
    while (s.errors == 0 && now_ms() < deadline) {
        bool never = false;
        run_until(&never, 100);
    }
    ck_assert_int_eq(s.last_error, -ERANGE);
    ck_assert_uint_eq(s.count, 0);
    ck_assert_ptr_nonnull(strstr(s.message, "compacted"));
    etcd_watch_cancel(w);
}
END_TEST

/* A watch survives etcd's restart: the break is reported, the stream reopened from the
 * revision after the last event, so nothing is delivered twice and nothing is lost. */
START_TEST(test_watch_survives_restart)
{
    static instance_t own;
    memset(&own, 0, sizeof(own));
    instance_start(&own);
    instance_wait_ready(&own, NULL);
    etcd_t *etcd = client_for(own.endpoint, NULL);
    seen_t s = {0};
    outcome_t o;
    etcd_watch_t *w = etcd_watch(etcd, "/w/", 0, on_watch, &s);
    ck_assert(run_until(&s.created, STEP_MS));
    RUN_OK(o, etcd_put(etcd, "/w/a", "1", 1, 0, on_result, &o));
    wait_events(&s, 1);

    instance_stop(&own);
    long long deadline = now_ms() + STEP_MS;
    while (s.errors == 0 && now_ms() < deadline) {
        bool never = false;
        run_until(&never, 100);
    }
    ck_assert_msg(s.errors > 0, "the broken stream was not reported");
    ck_assert_ptr_nonnull(strstr(s.message, own.endpoint));
    instance_start(&own);
    instance_wait_ready(&own, NULL);
    RUN_OK(o, etcd_put(etcd, "/w/b", "2", 1, 0, on_result, &o));
    RUN_OK(o, etcd_delete(etcd, "/w/a", 0, on_result, &o));
    wait_events(&s, 3);
    check_put_put_delete(&s, 0);
    bool never = false;
    run_until(&never, 300);
    ck_assert_uint_eq(s.count, 3); /* nothing twice */
    etcd_watch_cancel(w);
    etcd_destroy(etcd);
    instance_stop(&own);
}
END_TEST

/* ---- endpoints -------------------------------------------------------------------------- */

START_TEST(test_unreachable_endpoint_is_named)
{
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", free_port()); /* closed */
    etcd_t *etcd = client_for(endpoint, NULL);
    outcome_t o;
    RUN(o, etcd_get(etcd, "k", 0, on_result, &o));
    ck_assert_int_eq(o.error, -ECONNREFUSED);
    ck_assert_msg(strstr(o.message, endpoint) && strstr(o.message, "unreachable"),
                  "message: %s", o.message);
    etcd_destroy(etcd);
}
END_TEST

START_TEST(test_failover_to_second_endpoint)
{
    char endpoints[160];
    int closed = free_port();
    snprintf(endpoints, sizeof(endpoints), "etcd://127.0.0.1:%d,%s", closed, plain.endpoint);
    etcd_t *etcd = client_for(endpoints, NULL);
    ck_assert_str_eq(etcd_endpoints(etcd), endpoints);
    outcome_t o;
    RUN_OK(o, etcd_put(etcd, "/fo/k", "v", 1, 0, on_result, &o));
    RUN_OK(o, etcd_get(etcd, "/fo/k", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 1);
    seen_t s = {0};
    etcd_watch_t *w = etcd_watch(etcd, "/fo/", 0, on_watch, &s);
    ck_assert(run_until(&s.created, STEP_MS));
    etcd_watch_cancel(w);
    etcd_destroy(etcd);

    /* both closed: both named */
    int closed2 = free_port();
    snprintf(endpoints, sizeof(endpoints), "127.0.0.1:%d,127.0.0.1:%d", closed, closed2);
    etcd = client_for(endpoints, NULL);
    RUN(o, etcd_get(etcd, "k", 0, on_result, &o));
    ck_assert_int_eq(o.error, -ECONNREFUSED);
    char a[32], b[32];
    snprintf(a, sizeof(a), "127.0.0.1:%d", closed);
    snprintf(b, sizeof(b), "127.0.0.1:%d", closed2);
    ck_assert_msg(strstr(o.message, a) && strstr(o.message, b), "message: %s", o.message);
    etcd_destroy(etcd);
}
END_TEST

START_TEST(test_bad_endpoints_refused)
{
    const char *bad[] = {"", "etcd://", "localhost", "host:0", "host:99999", "a:1,,b", "h:x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        etcd_config_t config = {.endpoints = bad[i]};
        etcd_t *etcd = etcd_create(base, &config, err, sizeof(err));
        if (strcmp(bad[i], "a:1,,b") == 0 && etcd) { /* an empty item is skipped; b is bad */
            etcd_destroy(etcd);
            ck_abort_msg("\"%s\" accepted", bad[i]);
        }
        ck_assert_msg(etcd == NULL, "\"%s\" accepted", bad[i]);
        ck_assert_msg(err[0] != 0, "no message for \"%s\"", bad[i]);
    }
}
END_TEST

/* etcd's peer port speaks HTTP but is not the gateway: an error, not a crash. */
START_TEST(test_not_etcd_is_an_error)
{
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", plain.peer_port);
    etcd_t *etcd = client_for(endpoint, NULL);
    outcome_t o;
    RUN(o, etcd_get(etcd, "k", 0, on_result, &o));
    ck_assert_msg(o.error == -EIO || o.error == -EPROTO, "error %d: %s", o.error, o.message);
    ck_assert_ptr_nonnull(strstr(o.message, endpoint));
    seen_t s = {0};
    etcd_watch_t *w = etcd_watch(etcd, "/x/", 0, on_watch, &s);
    long long deadline = now_ms() + STEP_MS;
    while (s.errors == 0 && now_ms() < deadline) {
        bool never = false;
        run_until(&never, 100);
    }
    ck_assert_int_ne(s.last_error, 0);
    etcd_watch_cancel(w);
    etcd_destroy(etcd);
}
END_TEST

static bool destroyed_in_callback;
static int late_callbacks;

static void on_result_destroy(void *ctx, const etcd_result_t *r)
{
    (void)r;
    etcd_t **etcd = ctx;
    etcd_destroy(*etcd); /* from inside a callback */
    *etcd = NULL;
    destroyed_in_callback = true;
    event_base_loopbreak(base);
}

static void on_result_count(void *ctx, const etcd_result_t *r)
{
    (void)ctx;
    (void)r;
    if (destroyed_in_callback)
        late_callbacks++;
}

START_TEST(test_destroy_drops_callbacks)
{
    outcome_t o = {0};
    etcd_t *etcd = client_for(plain.endpoint, NULL);
    ck_assert_int_eq(etcd_get(etcd, "k", 0, on_result, &o), 0);
    ck_assert_ptr_nonnull(etcd_watch(etcd, "/", 0, on_watch, &(seen_t){0}));
    etcd_destroy(etcd);
    bool never = false;
    run_until(&never, 300);
    ck_assert(!o.done);

    /* destroyed from a callback: the requests still pending never call back */
    etcd = client_for(plain.endpoint, NULL);
    seen_t s = {0};
    ck_assert_ptr_nonnull(etcd_watch(etcd, "/", 0, on_watch, &s));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(etcd_get(etcd, "k", 0, on_result_count, NULL), 0);
    ck_assert_int_eq(etcd_get(etcd, "k", 0, on_result_destroy, &etcd), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(etcd_get(etcd, "k", 0, on_result_count, NULL), 0);
    ck_assert(run_until(&destroyed_in_callback, STEP_MS));
    ck_assert_ptr_null(etcd);
    run_until(&never, 300);
    ck_assert_int_eq(late_callbacks, 0);
}
END_TEST

/* ---- TLS -------------------------------------------------------------------------------- */

static instance_t secure;

static void tls_up(void) /* unchecked */
{
    make_root();
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "set -e; cd '%s'; mkdir tls; cd tls; ("
             "k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
             "openssl req -x509 $k -keyout ca.key -out ca.crt -days 2 -subj /CN=check-etcd-ca;"
             "openssl req $k -keyout server.key -out server.csr -subj /CN=127.0.0.1;"
             /* clientAuth too: etcd's gateway dials its own gRPC with the server's cert */
             "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > s.ext;"
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
             "-out server.crt -days 2 -extfile s.ext;"
             "openssl req $k -keyout client.key -out client.csr -subj /CN=check-etcd-client;"
             "printf 'extendedKeyUsage=clientAuth\\n' > c.ext;"
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
             "-out client.crt -days 2 -extfile c.ext) 2> openssl.log",
             root);
    ck_assert_msg(system(cmd) == 0, "openssl could not make the test certificates");
    base = event_base_new();
    secure.tls = true;
    instance_start(&secure);
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/tls/ca.crt", root);
    snprintf(cert, sizeof(cert), "%s/tls/client.crt", root);
    snprintf(key, sizeof(key), "%s/tls/client.key", root);
    etcd_tls_t tls = {ca, cert, key};
    instance_wait_ready(&secure, &tls);
    event_base_free(base);
    base = NULL;
}

static void tls_down(void)
{
    instance_stop(&secure);
}

START_TEST(test_tls_client_certificate)
{
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/tls/ca.crt", root);
    snprintf(cert, sizeof(cert), "%s/tls/client.crt", root);
    snprintf(key, sizeof(key), "%s/tls/client.key", root);
    etcd_tls_t with = {ca, cert, key}, without = {ca, NULL, NULL};
    etcd_t *good = client_for(secure.endpoint, &with);
    outcome_t o;
    RUN_OK(o, etcd_put(good, "/tls/k", "v", 1, 0, on_result, &o));
    RUN_OK(o, etcd_get(good, "/tls/k", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 1);
    ck_assert_str_eq(o.values[0], "v");
    etcd_destroy(good);

    etcd_t *bad = client_for(secure.endpoint, &without);
    RUN(o, etcd_get(bad, "/tls/k", 0, on_result, &o));
    ck_assert_msg(o.error == -EACCES, "without a certificate: %d: %s", o.error, o.message);
    ck_assert_msg(strstr(o.message, secure.endpoint), "message: %s", o.message);
    etcd_destroy(bad);

    /* plain http against the TLS port: an error too */
    etcd_t *plain_client = client_for(secure.endpoint, NULL);
    RUN(o, etcd_get(plain_client, "/tls/k", 0, on_result, &o));
    ck_assert_msg(o.error != 0, "plain http got in: %s", o.message);
    etcd_destroy(plain_client);
}
END_TEST

/* ---- a stream cut at odd places, from a fake server ------------------------------------ */

/* Serves (in a child process) two watch connections on a loopback port: the first sends
 * its results split in the middle of an object and several to a write, then closes; the
 * second answers with text that is not JSON; its request body goes back through a pipe. */
typedef struct fake_s {
    int listen_fd, port;
    char second_body[1024];
} fake_t;

static void fake_read_request(int fd, char *body, size_t body_size)
{
    char req[4096];
    size_t len = 0;
    char *end = NULL;
    while (len < sizeof(req) - 1 && !end) {
        ssize_t n = read(fd, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            return;
        len += (size_t)n;
        req[len] = 0;
        end = strstr(req, "\r\n\r\n");
    }
    const char *cl = strcasestr(req, "content-length:");
    size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0;
    size_t have = end ? len - (size_t)(end + 4 - req) : 0;
    while (end && have < want && len < sizeof(req) - 1) {
        ssize_t n = read(fd, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        have += (size_t)n;
        req[len] = 0;
    }
    if (end)
        snprintf(body, body_size, "%s", end + 4);
}

static void fake_write(int fd, const char *text)
{
    ssize_t n = write(fd, text, strlen(text));
    (void)n;
    usleep(50 * 1000); /* pacing, so that the client reads the pieces apart */
}

static void fake_serve(fake_t *fake)
{
    char ignored[1024];
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Connection: close\r\n\r\n";
    int fd = accept(fake->listen_fd, NULL, NULL);
    if (fd >= 0) {
        fake_read_request(fd, ignored, sizeof(ignored));
        fake_write(fd, head);
        fake_write(fd, "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n"
                       "{\"result\":{\"header\":{\"revision\":\"11\"},\"events\":[{\"kv\":"
                       "{\"key\":\"L3cvYQ==\",\"value\":\"MQ==\",\"mod_revision\":\"11\"}}]}}\n"
                       "{\"result\":{\"header\":{\"rev");
        fake_write(fd, "ision\":\"12\"},\"events\":[{\"type\":\"DELETE\",\"kv\":{\"key\":"
                       "\"L3cvYQ==\",\"mod_revision\":\"12\"}}]}}");
        fake_write(fd, "\n{\"result\":{\"header\":{\"revision\":\"12\"}}}\n");
        close(fd);
    }
    fd = accept(fake->listen_fd, NULL, NULL);
    if (fd >= 0) {
        fake_read_request(fd, fake->second_body, sizeof(fake->second_body));
        fake_write(fd, head);
        fake_write(fd, "this is not json\n");
        close(fd);
    }
}

START_TEST(test_watch_stream_split_and_bad)
{
    base = event_base_new();
    fake_t fake = {0};
    fake.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fake.listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fake.listen_fd, 4), 0);
    ck_assert_int_eq(getsockname(fake.listen_fd, (struct sockaddr *)&sa, &len), 0);
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", ntohs(sa.sin_port));
    int pipe_fds[2];
    ck_assert_int_eq(pipe(pipe_fds), 0);
    fflush(NULL);
    pid_t server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(pipe_fds[0]);
        fake_serve(&fake);
        ssize_t n = write(pipe_fds[1], fake.second_body, strlen(fake.second_body) + 1);
        _exit(n > 0 ? 0 : 1);
    }
    close(pipe_fds[1]);

    etcd_t *etcd = client_for(endpoint, NULL);
    seen_t s = {0};
    etcd_watch_t *w = etcd_watch(etcd, "/w/", 0, on_watch, &s);
    long long deadline = now_ms() + STEP_MS;
    while ((s.count < 2 || s.last_error != -EPROTO) && now_ms() < deadline) {
        bool never = false;
        run_until(&never, 100);
    }
    ck_assert_uint_eq(s.count, 2);
    ck_assert_int_eq(s.kinds[0], ETCD_EVENT_PUT);
    ck_assert_str_eq(s.keys[0], "/w/a");
    ck_assert_str_eq(s.values[0], "1");
    ck_assert_int_eq(s.kinds[1], ETCD_EVENT_DELETE);
    ck_assert_int_eq(s.revisions[1], 12);
    ck_assert_int_ge(s.batches, 4); /* created, 2 events, a progress */
    ck_assert_int_eq(s.errors, 2);  /* the end of the first stream, the bad second one */
    ck_assert_int_eq(s.last_error, -EPROTO);
    ck_assert_msg(strstr(s.message, endpoint), "message: %s", s.message);
    int status;
    ck_assert_int_eq(waitpid(server, &status, 0), server);
    ck_assert_int_eq(status, 0);
    ssize_t got = read(pipe_fds[0], fake.second_body, sizeof(fake.second_body) - 1);
    ck_assert_int_gt(got, 0);
    fake.second_body[got] = 0;
    close(pipe_fds[0]);
    /* the second stream asked for the revision after the last event */
    ck_assert_msg(strstr(fake.second_body, "\"start_revision\":\"13\""), "request: %s",
                  fake.second_body);
    etcd_watch_cancel(w);
    etcd_destroy(etcd);
    close(fake.listen_fd);
    event_base_free(base);
    base = NULL;
}
END_TEST

/* A member that answers 503 (no leader): the request goes on to the next endpoint; with
 * no next one, etcd's message is the error. */
START_TEST(test_failover_on_503)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    fflush(NULL);
    pid_t server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        const char *body = "{\"error\":\"etcdserver: no leader\",\"code\":14}";
        char head[256], ignored[1024];
        snprintf(head, sizeof(head), "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                 strlen(body));
        for (int i = 0; i < 2; i++) {
            int c = accept(fd, NULL, NULL);
            if (c < 0)
                _exit(1);
            fake_read_request(c, ignored, sizeof(ignored));
            fake_write(c, head);
            fake_write(c, body);
            close(c);
        }
        _exit(0);
    }
    close(fd);
    char endpoints[160], fake[64];
    snprintf(fake, sizeof(fake), "127.0.0.1:%d", ntohs(sa.sin_port));
    snprintf(endpoints, sizeof(endpoints), "%s,%s", fake, plain.endpoint);
    etcd_t *etcd = client_for(endpoints, NULL);
    outcome_t o;
    RUN_OK(o, etcd_put(etcd, "/503/k", "v", 1, 0, on_result, &o));
    RUN_OK(o, etcd_get(client, "/503/k", 0, on_result, &o));
    ck_assert_uint_eq(o.count, 1);
    etcd_destroy(etcd);

    etcd = client_for(fake, NULL);
    RUN(o, etcd_get(etcd, "/503/k", 0, on_result, &o));
    ck_assert_int_eq(o.error, -EIO);
    ck_assert_msg(strstr(o.message, "no leader") && strstr(o.message, fake), "%s", o.message);
    etcd_destroy(etcd);
    int status;
    ck_assert_int_eq(waitpid(server, &status, 0), server);
    ck_assert_int_eq(status, 0);
}
END_TEST

/* ---- replies, without a server ---------------------------------------------------------- */

static int parse(etcd_reply_kind_t kind, long status, const char *body, etcd_reply_t *reply)
{
    etcd_json_parse_reply(kind, status, body, strlen(body), "h:1", reply);
    ck_assert_ptr_nonnull(reply->result.message);
    if (reply->result.error)
        ck_assert_msg(strstr(reply->result.message, "h:1"), "%s", reply->result.message);
    return reply->result.error;
}

START_TEST(test_bad_replies_are_errors)
{
    etcd_reply_t r;
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "not json", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "[1,2]", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "{\"kvs\":\"x\"}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "{\"kvs\":[{\"key\":\"@@@\"}]}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "{\"kvs\":[7]}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "{\"header\":{\"revision\":\"x\"}}", &r),
                     -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200, "{\"header\":[]}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_TXN, 200, "{\"succeeded\":\"yes\"}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_TXN, 200, "{\"responses\":[{\"response_range\":1}]}", &r),
                     -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_LEASE, 200, "{\"ID\":true}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_KEEPALIVE, 200, "{\"ID\":\"1\"}", &r), -EPROTO);
    ck_assert_int_eq(parse(ETCD_REPLY_PLAIN, 500, "{\"error\":\"boom\",\"code\":2}", &r), -EIO);
    ck_assert_ptr_nonnull(strstr(r.result.message, "boom"));
    ck_assert_int_eq(parse(ETCD_REPLY_KEEPALIVE, 200,
                           "{\"error\":{\"grpc_code\":5,\"message\":\"gone\"}}", &r), -EIO);
    ck_assert_ptr_nonnull(strstr(r.result.message, "gone"));
    ck_assert_int_eq(parse(ETCD_REPLY_PLAIN, 404, "404 page not found", &r), -EIO);

    ck_assert_int_eq(parse(ETCD_REPLY_RANGE, 200,
                           "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"YQ==\","
                           "\"value\":\"Yg==\",\"mod_revision\":\"5\",\"lease\":9}],"
                           "\"count\":\"1\"}", &r), 0);
    ck_assert_int_eq(r.result.revision, 7);
    ck_assert_uint_eq(r.result.count, 1);
    ck_assert_str_eq(r.result.kvs[0].key, "a");
    ck_assert_str_eq(r.result.kvs[0].value, "b");
    ck_assert_int_eq(r.result.kvs[0].mod_revision, 5);
    ck_assert_int_eq(r.result.kvs[0].lease, 9);
    etcd_reply_free(&r);
    ck_assert_int_eq(parse(ETCD_REPLY_LEASE, 200, "{\"ID\":\"12\",\"TTL\":\"-1\"}", &r), 0);
    ck_assert_int_eq(r.result.lease_id, 12);
    ck_assert_int_eq(r.result.ttl, -1);
}
END_TEST

START_TEST(test_base64_round_trip)
{
    const char data[] = "\0\1\xff\xfe" "abc";
    for (size_t len = 0; len < sizeof(data); len++) {
        char *text = etcd_base64_encode(data, len);
        size_t out_len = 99;
        char *back = etcd_base64_decode(text, strlen(text), &out_len);
        ck_assert_ptr_nonnull(back);
        ck_assert_uint_eq(out_len, len);
        ck_assert_int_eq(memcmp(back, data, len), 0);
        free(text);
        free(back);
    }
    size_t n;
    ck_assert_ptr_null(etcd_base64_decode("a", 1, &n));
    ck_assert_ptr_null(etcd_base64_decode("ab!d", 4, &n));
    char *plain_text = etcd_base64_decode("aGk=", 4, &n);
    ck_assert_str_eq(plain_text, "hi");
    free(plain_text);
}
END_TEST

/* Which endpoints are plain HTTP beyond loopback (the warning at start and in status). */
START_TEST(test_plain_remote_endpoints)
{
    struct event_base *own = event_base_new();
    ck_assert_ptr_nonnull(own);
    const struct {
        const char *endpoints, *ca, *said;
        int plain;
    } cases[] = {
        {"127.0.0.1:2379", NULL, "", 0},
        {"etcd://localhost:2379,127.9.9.9:1,[::1]:2379", NULL, "", 0},
        {"etcd://10.0.0.100:2379", NULL, "10.0.0.100:2379", 1},
        {"127.0.0.1:2379,etcd.example:2379,[fd00::1]:2379", NULL,
         "etcd.example:2379,[fd00::1]:2379", 1},
        {"10.0.0.100:2379", "/nonexistent/ca.pem", "", 0}, /* https */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[256] = "", said[128] = "x";
        etcd_config_t config = {.endpoints = cases[i].endpoints, .tls = {.ca_file = cases[i].ca}};
        etcd_t *etcd = etcd_create(own, &config, err, sizeof(err));
        ck_assert_msg(etcd != NULL, "%s: %s", cases[i].endpoints, err);
        ck_assert_int_eq(etcd_plain_remote(etcd, said, sizeof(said)), cases[i].plain);
        ck_assert_str_eq(said, cases[i].said);
        etcd_destroy(etcd);
    }
    event_base_free(own);
}
END_TEST

static Suite *etcd_suite(void)
{
    Suite *s = suite_create("etcd");
    TCase *offline = tcase_create("offline");
    tcase_add_test(offline, test_bad_replies_are_errors);
    tcase_add_test(offline, test_base64_round_trip);
    tcase_add_test(offline, test_plain_remote_endpoints);
    tcase_add_test(offline, test_watch_stream_split_and_bad);
    suite_add_tcase(s, offline);

    TCase *live = tcase_create("live");
    tcase_set_timeout(live, 120);
    tcase_add_unchecked_fixture(live, plain_up, plain_down);
    tcase_add_checked_fixture(live, loop_setup, loop_teardown);
    tcase_add_test(live, test_put_get_prefix_delete);
    tcase_add_test(live, test_txn_create_once_and_cas);
    tcase_add_test(live, test_lease_keepalive_and_revoke);
    tcase_add_test(live, test_lease_expiry);
    tcase_add_test(live, test_watch_events_in_order);
    tcase_add_test(live, test_watch_compacted_is_erange);
    tcase_add_test(live, test_watch_survives_restart);
    tcase_add_test(live, test_unreachable_endpoint_is_named);
    tcase_add_test(live, test_failover_to_second_endpoint);
    tcase_add_test(live, test_failover_on_503);
    tcase_add_test(live, test_bad_endpoints_refused);
    tcase_add_test(live, test_not_etcd_is_an_error);
    tcase_add_test(live, test_destroy_drops_callbacks);
    suite_add_tcase(s, live);

    TCase *tls = tcase_create("tls");
    tcase_set_timeout(tls, 120);
    tcase_add_unchecked_fixture(tls, tls_up, tls_down);
    tcase_add_checked_fixture(tls, loop_setup, loop_teardown);
    tcase_add_test(tls, test_tls_client_certificate);
    suite_add_tcase(s, tls);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("CHECK_ETCD_DEBUG"))
        salus_log_threshold = SALUS_LOG_DEBUG;
    return check_run_suite(etcd_suite());
}
