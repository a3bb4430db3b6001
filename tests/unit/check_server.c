/* Unit tests of the control socket's per-connection state and of the request table's flags,
 * on a real server (salusd/base/server.c) with its event loop, on a socket in a fresh
 * directory: clients are child processes (one of them as the user nobody), the server's
 * loop runs here until what a test waits for came, with a deadline.
 *
 * Slots: a state set in an owner's slot is handed to that owner's on_close exactly once,
 * when its connection goes, and never for a connection that set none; a request answered
 * later (server_later_t) loses its requester then. Flags: ctl's dispatcher (handlers_ops)
 * refuses an op flagged root-only to a connection that is not root, one flagged for jobs
 * to a connection without a job, and counts the per-user caps only for the ops flagged so. */
#include "daemon.h"
#include "handlers.h"
#include "registry.h"

#include "check_run.h"
#include "client.h"
#include "log.h"

#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t salusd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define MAX_KEPT 8
#define DEADLINE_NS 10000000000ull

/* what a "keep" request left in its connection: a state in the test's slot and a request
 * answered later in another owner's slot */
typedef struct kept_s {
    int closed;               /* on_close calls that got this state */
    server_later_t later;
} kept_t;

static salusd_t d;
static char dir[64];
static kept_t kept[MAX_KEPT];
static int kept_count, close_calls, unowned_rc;

static void on_test_close(conn_t *c, void *state)
{
    kept_t *k = state;
    ck_assert_ptr_null(server_conn_slot(c, CONN_SLOT_JOBCTL)); /* cleared before the call */
    k->closed++;
    close_calls++;
}

static const conn_slot_ops_t test_slot_ops = {.on_close = on_test_close};

/* keep: sets the test's slot and links a request answered later; unowned: tries the slot of
 * an owner that registered no on_close; every other op goes to ctl's dispatcher */
static void test_dispatch(conn_t *c, const proto_msg_t *msg)
{
    if (strcmp(msg->op, "keep") == 0 && kept_count < MAX_KEPT) {
        kept_t *k = &kept[kept_count++];
        ck_assert_int_eq(server_conn_slot_set(c, CONN_SLOT_JOBCTL, k), 0);
        ck_assert_int_eq(server_later_add(c, CONN_SLOT_PS_CKPT, &k->later, msg->id), 0);
        server_reply_done(c, msg->id);
    } else if (strcmp(msg->op, "unowned") == 0) {
        static kept_t stray;
        unowned_rc = server_conn_slot_set(c, CONN_SLOT_PS_LOCAL, &stray);
        server_reply_done(c, msg->id);
    } else {
        handlers_ops.dispatch(c, msg);
    }
}

static const server_ops_t test_ops = {.dispatch = test_dispatch};

static void setup(void)
{
    memset(&d, 0, sizeof(d));
    memset(kept, 0, sizeof(kept));
    kept_count = close_calls = 0;
    unowned_rc = 1;
    salus_log_init("salusd", SALUS_LOG_ERROR);
    ck_assert_int_eq(options_set_defaults(salusd_options, salusd_option_count, &d.config), 0);
    d.config.max_jobs_per_uid = 0; /* every capped op of a user that is capped is refused */
    d.config.max_queued_submits_per_uid = 0;
    snprintf(dir, sizeof(dir), "/tmp/salus-check-server.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0755), 0); /* the user nobody connects too */
    snprintf(d.config.socket_path, sizeof(d.config.socket_path), "%s/salusd.sock", dir);
    proto_enc_init(&d.enc);
    LIST_INIT(&d.conns);
    d.base = event_base_new();
    d.registry = registry_create();
    ck_assert(d.base && d.registry);
    ck_assert_int_eq(server_observe_close(&d, CONN_SLOT_JOBCTL, &test_slot_ops), 0);
    ck_assert_int_eq(server_observe_close(&d, CONN_SLOT_PS_CKPT, &server_later_ops), 0);
    ck_assert_int_eq(server_start(&d, &test_ops), 0);
}

static void teardown(void)
{
    server_stop(&d);
    registry_destroy(d.registry);
    event_base_free(d.base);
    proto_enc_destroy(&d.enc);
    rmdir(dir);
}

/* ---- clients ----------------------------------------------------------------------------- */

/* One request on c with an empty body: "op ok", or "op error: MESSAGE", into out. */
static void call(salus_client_t *c, const char *op, FILE *out)
{
    proto_msg_t reply;
    char err[512] = "";
    salus_client_begin(c, op, 0);
    int rc = salus_client_call(c, &reply, err, sizeof(err));
    if (rc == 0) {
        proto_msg_free(&reply);
        fprintf(out, "%s ok\n", op);
    } else {
        fprintf(out, "%s error: %s\n", op, rc == -EREMOTEIO ? err : strerror(-rc));
    }
}

/* Runs ops in a child process (as nobody when as_nobody), connections apart when a name is
 * "|": its report lines come back in report; the loop serves meanwhile. */
static void run_client(int as_nobody, const char *const *ops, char *report, size_t size)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        FILE *out = fdopen(fds[1], "w");
        if (!out)
            _exit(2);
        if (as_nobody && (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                          setresuid(65534, 65534, 65534) < 0)) {
            fprintf(out, "cannot become nobody: %s\n", strerror(errno));
            _exit(2);
        }
        salus_client_t c;
        char err[256] = "";
        int open = 0;
        for (size_t i = 0; ops[i]; i++) {
            if (strcmp(ops[i], "|") == 0) {
                if (open)
                    salus_client_close(&c);
                open = 0;
                continue;
            }
            if (!open && salus_client_open(&c, d.config.socket_path, "check", 5000, err,
                                           sizeof(err)) < 0) {
                fprintf(out, "cannot connect: %s\n", err);
                _exit(2);
            }
            open = 1;
            call(&c, ops[i], out);
        }
        if (open)
            salus_client_close(&c);
        fclose(out);
        _exit(0);
    }
    close(fds[1]);
    int status = -1;
    uint64_t deadline = salusd_now_ns() + DEADLINE_NS;
    while (waitpid(pid, &status, WNOHANG) == 0 && salusd_now_ns() < deadline)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    if (salusd_now_ns() >= deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    size_t n = 0;
    ssize_t got;
    while (n + 1 < size && (got = read(fds[0], report + n, size - 1 - n)) > 0)
        n += (size_t)got;
    report[n] = '\0';
    close(fds[0]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client: %s", report);
}

/* Runs the loop until the server saw calls on_close calls (or the deadline). */
static void serve_until_closed(int calls)
{
    uint64_t deadline = salusd_now_ns() + DEADLINE_NS;
    while ((close_calls < calls || d.connection_count > 0) && salusd_now_ns() < deadline)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static void assert_line(const char *report, const char *line)
{
    ck_assert_msg(strstr(report, line) != NULL, "no '%s' in:\n%s", line, report);
}

/* ---- slots --------------------------------------------------------------------------------- */

START_TEST(test_slot_released_once_at_close)
{
    char report[2048];
    /* two connections that keep something, one that keeps nothing */
    const char *const ops[] = {"keep", "|", "keep", "|", "unowned", NULL};
    run_client(0, ops, report, sizeof(report));
    assert_line(report, "keep ok");
    serve_until_closed(2);
    ck_assert_int_eq(kept_count, 2);
    ck_assert_int_eq(close_calls, 2);
    for (int i = 0; i < kept_count; i++) {
        ck_assert_int_eq(kept[i].closed, 1);
        ck_assert_ptr_null(kept[i].later.conn); /* the requester went: no reply */
    }
    /* an owner with no on_close gets no slot: its state would never be released */
    ck_assert_int_eq(unowned_rc, -ENOSYS);
    ck_assert_uint_eq(d.connection_count, 0);
    server_stop(&d); /* nothing is closed twice */
    ck_assert_int_eq(close_calls, 2);
}
END_TEST

START_TEST(test_slot_released_at_server_stop)
{
    /* the connection stays open: server_stop closes it, and its owner hears it once */
    salus_client_t c;
    char err[256] = "";
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        if (salus_client_open(&c, d.config.socket_path, "check", 5000, err, sizeof(err)) < 0)
            _exit(2);
        FILE *out = fdopen(fds[1], "w");
        call(&c, "keep", out);
        fclose(out); /* the parent's cue; the connection stays open until the parent ends */
        char byte;
        while (read(c.fd, &byte, 1) > 0)
            ;
        _exit(0);
    }
    close(fds[1]);
    uint64_t deadline = salusd_now_ns() + DEADLINE_NS;
    while (kept_count == 0 && salusd_now_ns() < deadline)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    ck_assert_int_eq(kept_count, 1);
    ck_assert_ptr_nonnull(kept[0].later.conn);
    ck_assert_int_eq(close_calls, 0);
    server_stop(&d);
    ck_assert_int_eq(close_calls, 1);
    ck_assert_int_eq(kept[0].closed, 1);
    ck_assert_ptr_null(kept[0].later.conn);
    server_stop(&d);
    ck_assert_int_eq(close_calls, 1);
    /* its connection closed with the server (the socket goes once the loop runs) */
    int status = -1;
    deadline = salusd_now_ns() + DEADLINE_NS;
    while (waitpid(pid, &status, WNOHANG) == 0 && salusd_now_ns() < deadline)
        event_base_loop(d.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    if (salusd_now_ns() >= deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    close(fds[0]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client did not see "
                  "its connection close");
}
END_TEST

/* ---- the request table's flags ------------------------------------------------------------- */

START_TEST(test_flags_refuse_another_user)
{
    char report[4096];
    const char *const ops[] = {"reserved_exit", "submit", "register", "mem_grow", "ps_close",
                               NULL};
    run_client(1, ops, report, sizeof(report));
    /* root only */
    assert_line(report, "reserved_exit error: permission_denied: reserved_exit is root's");
    /* the caps (0 here) count for the ops flagged so */
    assert_line(report, "submit error: uid 65534 has 0 submitted jobs whose program has not "
                        "started yet (max-queued-submits-per-uid)");
    assert_line(report, "register error: uid 65534 has 0 jobs registered already "
                        "(max-jobs-per-uid)");
    /* a job's op on a connection that is no job */
    assert_line(report, "mem_grow error: mem_grow: this connection is not a registered job");
    /* not capped, not root's: its handler answers */
    assert_line(report, "ps_close error: ps_close: handle (uint) is required");
}
END_TEST

START_TEST(test_flags_let_root_through)
{
    char report[4096];
    const char *const ops[] = {"reserved_exit", NULL};
    run_client(0, ops, report, sizeof(report));
    /* past the flag: the handler's own check of the body answers */
    ck_assert_msg(strstr(report, "permission_denied") == NULL, "%s", report);
    assert_line(report, "reserved_exit error: ");
}
END_TEST

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");
    TCase *slots = tcase_create("slots");
    tcase_add_checked_fixture(slots, setup, teardown);
    tcase_set_timeout(slots, 60);
    tcase_add_test(slots, test_slot_released_once_at_close);
    tcase_add_test(slots, test_slot_released_at_server_stop);
    suite_add_tcase(s, slots);
    TCase *flags = tcase_create("flags");
    tcase_add_checked_fixture(flags, setup, teardown);
    tcase_set_timeout(flags, 60);
    tcase_add_test(flags, test_flags_refuse_another_user);
    tcase_add_test(flags, test_flags_let_root_through);
    suite_add_tcase(s, flags);
    return s;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "check_server: skipped, needs root (a client runs as nobody)\n");
        return 77;
    }
    return check_run_suite(server_suite());
}
