/* salusctl submit, kill, wait, logs: jobs controlled after they started.
 *
 * submit never lets salusd run user code: salusctl forks a detached supervisor (its own
 * session, stdio on the log file). The supervisor forks the command's process, which waits,
 * then reserves the job (op submit, from its own pid so that salusd can watch it), passing
 * with the request (SCM_RIGHTS) a read-only descriptor of the log (salusd never opens a
 * path a user typed) and a pidfd of the waiting process, which salusd moves into the job's
 * cgroup. It hands the id back through a pipe and to the command's process, which runs the
 * command in a process group of its own with the environment of salusctl run plus
 * SALUS_JOB_ID (the shim attaches its registration to the reserved job); it waits for it
 * and reports how it ended (op job_exit). salusd's kill reaches every process of the job's
 * cgroup, and the supervisor, which passes it on to the command's whole process group:
 * SIGTERM/SIGINT as they are, SIGUSR1 as SIGKILL. */
#include "ctl.h"
#include "json.h"
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int ctl_open(ctl_t *ctl, salus_client_t *c)
{
    char err[256] = "";
    int rc = salus_client_open(c, ctl->socket_path, "salusctl", ctl->timeout_ms, err, sizeof(err));
    if (rc == 0)
        return EXIT_OK;
    if (rc == -EPROTO)
        fprintf(stderr, "salusctl: salusd at %s refused the connection: %s\n", ctl->socket_path,
                err);
    else
        fprintf(stderr, "salusctl: cannot reach salusd at %s: %s\n", ctl->socket_path, err);
    return EXIT_DAEMON;
}

int ctl_finish(ctl_t *ctl, salus_client_t *c, const char *op, proto_msg_t *reply, int timeout_ms)
{
    char err[256] = "";
    int rc = salus_client_call_fds(c, reply, err, sizeof(err), timeout_ms, NULL, 0, NULL);
    salus_client_close(c);
    if (rc == -EREMOTEIO || rc == -ENOMEM) {
        fprintf(stderr, "salusctl: %s: %s\n", op, err);
        return EXIT_DAEMON;
    }
    if (rc < 0) {
        fprintf(stderr, "salusctl: %s: no answer from salusd at %s: %s\n", op, ctl->socket_path,
                strerror(-rc));
        return EXIT_DAEMON;
    }
    return EXIT_OK;
}

int ctl_parse_job_id(const char *verb, const char *text, uint64_t *id)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!*text || *end || errno || v == 0 || text[0] == '-') {
        fprintf(stderr, "salusctl: %s: '%s' is not a job id (see salusctl ps)\n", verb, text);
        return -1;
    }
    *id = v;
    return 0;
}

/* A one-job request {id, ...extra}: the reply in *reply. */
static int job_request(ctl_t *ctl, const char *op, uint64_t id, int force, long grace_ms,
                       int timeout_ms, proto_msg_t *reply)
{
    salus_client_t c;
    int rc = ctl_open(ctl, &c);
    if (rc != EXIT_OK)
        return rc;
    msgpack_packer *pk = salus_client_begin(&c, op, 1 + (force >= 0) + (grace_ms >= 0));
    proto_pack_kv_uint(pk, "id", id);
    if (force >= 0)
        proto_pack_kv_bool(pk, "force", force);
    if (grace_ms >= 0)
        proto_pack_kv_uint(pk, "grace_ms", (uint64_t)grace_ms);
    return ctl_finish(ctl, &c, op, reply, timeout_ms);
}

/* --------------------------------------------------------------------------- submit */

static int make_dirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* --log FILE made absolute, or <state dir>/salus/logs/<name>-<time>-<pid>.log */
static int log_path_for(const char *given, const char *name, char *out, size_t size)
{
    if (given) {
        char cwd[PATH_MAX];
        if (given[0] == '/')
            return snprintf(out, size, "%s", given) < (int)size ? 0 : -ENAMETOOLONG;
        if (!getcwd(cwd, sizeof(cwd)))
            return -errno;
        return snprintf(out, size, "%s/%s", cwd, given) < (int)size ? 0 : -ENAMETOOLONG;
    }
    char dir[PATH_MAX], safe[64], stamp[32];
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (state && state[0] == '/')
        snprintf(dir, sizeof(dir), "%s/salus/logs", state);
    else if (home && home[0] == '/')
        snprintf(dir, sizeof(dir), "%s/.local/state/salus/logs", home);
    else
        return -ENOENT;
    int rc = make_dirs(dir);
    if (rc < 0)
        return rc;
    size_t n = 0;
    for (const char *p = name; *p && n < sizeof(safe) - 1; p++)
        safe[n++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                   (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'
                               ? *p
                               : '_');
    safe[n] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    return snprintf(out, size, "%s/%s-%s-%d.log", dir, safe[0] ? safe : "job", stamp,
                    (int)getpid()) < (int)size
               ? 0
               : -ENAMETOOLONG;
}

static volatile sig_atomic_t command_pid;
static volatile sig_atomic_t kill_requested;

/* to the command's whole process group (its pid), with this user's own rights */
static void forward_signal(int sig)
{
    kill_requested = 1;
    if (command_pid > 0)
        kill(-(pid_t)command_pid, sig == SIGUSR1 ? SIGKILL : sig);
}

/* The command's process, forked before the job exists: waits on go_fd for the job id
 * (EOF: no job, it exits), then runs the command in its own process group. It is in the
 * job's cgroup before it execs: salusd moved it there, given its pidfd with the submit. */
static void run_command(char **command, int go_fd, pid_t supervisor)
{
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    setpgid(0, 0); /* the job's process group: kill reaches all of it */
    /* the command ends with its supervisor (kill escalates to SIGKILL on it) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor)
        _exit(137);
    salusctl_exec_job("submit", command, go_fd);
}

/* The supervisor: forks the command's process (waiting), reserves the job passing the log
 * and that process's pidfd, says the id on report_fd, lets the command run, reports its exit
 * status. Never returns. */
static void supervise(ctl_t *ctl, const char *log_path, char **command, int report_fd)
{
    char err[300] = "";
    uint64_t id = 0;

    setsid();
    /* non-blocking: a FIFO must not hang the open; regular files only */
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0640);
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (log_fd < 0 && errno == ENXIO) { /* a FIFO without a reader */
        dprintf(report_fd, "the log file %s is not a regular file\n", log_path);
        _exit(1);
    }
    if (log_fd < 0 || null_fd < 0) {
        dprintf(report_fd, "cannot open the log file %s: %s\n", log_path, strerror(errno));
        _exit(1);
    }
    if (fstat(log_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        dprintf(report_fd, "the log file %s is not a regular file\n", log_path);
        _exit(1);
    }
    /* what salusd keeps for salusctl logs: the same file, read-only */
    char self_fd[64];
    snprintf(self_fd, sizeof(self_fd), "/proc/self/fd/%d", log_fd);
    int read_fd = open(self_fd, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (read_fd < 0 || fcntl(log_fd, F_SETFL, O_APPEND) < 0) {
        dprintf(report_fd, "cannot reopen the log file %s: %s\n", log_path, strerror(errno));
        _exit(1);
    }
    if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
        _exit(1);
    const char *name = getenv("SALUS_JOB_NAME");
    if (!name || !*name) {
        name = strrchr(command[0], '/') ? strrchr(command[0], '/') + 1 : command[0];
        setenv("SALUS_JOB_NAME", name, 1);
    }

    struct sigaction sa = {.sa_handler = forward_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGHUP, SIG_IGN);
    int go[2];
    if (pipe2(go, O_CLOEXEC) < 0) {
        dprintf(report_fd, "pipe: %s\n", strerror(errno));
        _exit(1);
    }
    pid_t supervisor = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        dprintf(report_fd, "fork: %s\n", strerror(errno));
        _exit(1);
    }
    if (pid == 0) {
        close(go[1]);
        close(report_fd);
        close(read_fd);
        run_command(command, go[0], supervisor);
    }
    close(go[0]);
    setpgid(pid, pid); /* also here: a signal may come before the child ran */
    command_pid = pid;
    /* the command's process, for salusd to put into the job's cgroup before it runs: a
     * pidfd of this process's own child names it for as long as it is not reaped */
    int command_fd = (int)syscall(SYS_pidfd_open, pid, 0);
    const int fds[2] = {read_fd, command_fd};
    static const char *const roles[2] = {"log", "command"};
    int rc = salusctl_reserve(ctl->socket_path, ctl->timeout_ms, name, log_path, fds, roles,
                              command_fd >= 0 ? 2 : 1, &id, err, sizeof(err));
    close(read_fd);
    if (command_fd >= 0)
        close(command_fd);
    if (rc < 0) {
        close(go[1]); /* the command's process sees no id and exits */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        if (rc == -ECONNREFUSED || rc == -ENOENT)
            dprintf(report_fd, "cannot reach salusd at %s: %s\n", ctl->socket_path, err);
        else
            dprintf(report_fd, "submit: %s\n", err);
        _exit(1);
    }
    char text[32];
    int len = snprintf(text, sizeof(text), "%llu\n", (unsigned long long)id);
    if (write(go[1], text, (size_t)len) != len) {
        kill(pid, SIGKILL);
        dprintf(report_fd, "cannot start the command: %s\n", strerror(errno));
    } else {
        dprintf(report_fd, "ok %llu\n", (unsigned long long)id);
    }
    close(go[1]);
    close(report_fd);

    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    /* killed: what its command left behind in the group goes too */
    if (kill_requested)
        kill(-pid, SIGKILL);
    command_pid = 0;
    salusctl_report_exit(ctl->socket_path, ctl->timeout_ms, id, code, sig);
    _exit(code);
}

int verb_submit(ctl_t *ctl, int argc, char **argv)
{
    const char *log_given = NULL;
    char log_path[PATH_MAX];
    int cmd = 0;
    int rc = salusctl_job_options("submit", argc, argv, &log_given, &cmd);
    if (rc != 0)
        return rc;
    rc = salusctl_job_environment(ctl->socket_path, ctl->timeout_ms);
    if (rc != 0)
        return rc;
    const char *name = getenv("SALUS_JOB_NAME");
    if (!name || !*name)
        name = strrchr(argv[cmd], '/') ? strrchr(argv[cmd], '/') + 1 : argv[cmd];
    rc = log_path_for(log_given, name, log_path, sizeof(log_path));
    if (rc < 0) {
        fprintf(stderr, "salusctl: submit: no log file (%s); name one with --log FILE\n",
                rc == -ENOENT ? "neither XDG_STATE_HOME nor HOME is set" : strerror(-rc));
        return EXIT_DAEMON;
    }
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0) {
        fprintf(stderr, "salusctl: submit: pipe: %s\n", strerror(errno));
        return EXIT_DAEMON;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "salusctl: submit: fork: %s\n", strerror(errno));
        return EXIT_DAEMON;
    }
    if (pid == 0) {
        close(report[0]);
        supervise(ctl, log_path, &argv[cmd], report[1]);
    }
    close(report[1]);
    char answer[512];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof(answer) - 1 &&
           ((n = read(report[0], answer + got, sizeof(answer) - 1 - got)) > 0 || (n < 0 && errno == EINTR)))
        got += n > 0 ? (size_t)n : 0;
    close(report[0]);
    answer[got] = '\0';
    answer[strcspn(answer, "\n")] = '\0';
    if (strncmp(answer, "ok ", 3) != 0) {
        waitpid(pid, NULL, 0);
        fprintf(stderr, "salusctl: submit: %s\n", answer[0] ? answer : "the supervisor failed");
        return EXIT_DAEMON;
    }
    if (ctl->json) {
        printf("{\"id\":%s,\"log\":", answer + 3);
        msgpack_object s = {.type = MSGPACK_OBJECT_STR};
        s.via.str.ptr = log_path;
        s.via.str.size = (uint32_t)strlen(log_path);
        json_print(stdout, &s);
        printf("}\n");
    } else {
        printf("%s\n", answer + 3);
    }
    return EXIT_OK;
}

/* --------------------------------------------------------------------------- kill */

int verb_kill(ctl_t *ctl, int argc, char **argv)
{
    int force = 0;
    long grace_ms = -1;
    const char *job_text = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            ctl->json = 1;
        } else if (strcmp(argv[i], "--grace") == 0 && i + 1 < argc) {
            char *end;
            double s = strtod(argv[++i], &end);
            if (*end || !(s >= 0 && s <= 3600)) {
                fprintf(stderr, "salusctl: kill: --grace expects seconds (0..3600)\n");
                return EXIT_USAGE;
            }
            grace_ms = (long)(s * 1000);
        } else if (argv[i][0] == '-' || job_text) {
            fprintf(stderr, "salusctl: usage: salusctl kill [--force] [--grace S] JOB\n");
            return EXIT_USAGE;
        } else {
            job_text = argv[i];
        }
    }
    uint64_t id;
    if (!job_text) {
        fprintf(stderr, "salusctl: usage: salusctl kill [--force] [--grace S] JOB\n");
        return EXIT_USAGE;
    }
    if (ctl_parse_job_id("kill", job_text, &id) < 0)
        return EXIT_USAGE;
    proto_msg_t reply;
    int rc = job_request(ctl, "kill", id, force, grace_ms, ctl->timeout_ms, &reply);
    if (rc != EXIT_OK)
        return rc;
    if (ctl->json) {
        json_print(stdout, &reply.body);
        putchar('\n');
    } else {
        char sig[16] = "?";
        proto_get_str_copy(&reply.body, "signal", sig, sizeof(sig));
        printf("job %llu: %s sent\n", (unsigned long long)id, sig);
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}

/* --------------------------------------------------------------------------- wait */

int verb_wait(ctl_t *ctl, int argc, char **argv)
{
    const char *job_text = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            ctl->json = 1;
        } else if (argv[i][0] == '-' || job_text) {
            fprintf(stderr, "salusctl: usage: salusctl wait [--json] JOB\n");
            return EXIT_USAGE;
        } else {
            job_text = argv[i];
        }
    }
    uint64_t id;
    if (!job_text) {
        fprintf(stderr, "salusctl: usage: salusctl wait [--json] JOB\n");
        return EXIT_USAGE;
    }
    if (ctl_parse_job_id("wait", job_text, &id) < 0)
        return EXIT_USAGE;
    proto_msg_t reply;
    int rc = job_request(ctl, "wait", id, -1, -1, -1, &reply);
    if (rc != EXIT_OK)
        return rc;
    char state[16] = "?";
    int64_t status = -1, sig = 0;
    proto_get_str_copy(&reply.body, "state", state, sizeof(state));
    int known = proto_get_int(&reply.body, "exit_status", &status) == 0;
    proto_get_int(&reply.body, "signal", &sig);
    if (ctl->json) {
        json_print(stdout, &reply.body);
        putchar('\n');
    } else if (known && sig > 0) {
        printf("job %llu killed by signal %lld (%s)\n", (unsigned long long)id, (long long)sig,
               strsignal((int)sig));
    } else if (known) {
        printf("job %llu %s, exit status %lld\n", (unsigned long long)id, state, (long long)status);
    } else if (strcmp(state, "ended") == 0) {
        printf("job %llu ended, status unknown\n", (unsigned long long)id);
    } else {
        printf("job %llu %s\n", (unsigned long long)id, state);
    }
    proto_msg_free(&reply);
    /* the job's own status, 128 + signal when killed; ended without one known: 0 */
    if (known)
        return (int)(status & 0xff);
    return strcmp(state, "done") == 0 || strcmp(state, "ended") == 0 ? EXIT_OK : 1;
}

/* --------------------------------------------------------------------------- logs */

/* The log is salusd's descriptor, shared with every reader: read at this reader's own
 * offset (pread). */
static int copy_new_bytes(int fd, off_t *offset)
{
    char buf[65536];
    ssize_t n;
    while ((n = pread(fd, buf, sizeof(buf), *offset)) > 0) {
        if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
            return -1;
        *offset += n;
    }
    fflush(stdout);
    return n < 0 ? -1 : 0;
}

/* logs {id}: the reply in *reply and the log's descriptor in *fd (-1 when none came). */
static int logs_request(ctl_t *ctl, uint64_t id, proto_msg_t *reply, int *fd)
{
    salus_client_t c;
    char err[256] = "";
    int nfds = 0;
    *fd = -1;
    int rc = ctl_open(ctl, &c);
    if (rc != EXIT_OK)
        return rc;
    msgpack_packer *pk = salus_client_begin(&c, "logs", 1);
    proto_pack_kv_uint(pk, "id", id);
    rc = salus_client_call_fds(&c, reply, err, sizeof(err), ctl->timeout_ms, fd, 1, &nfds);
    salus_client_close(&c);
    if (rc < 0) {
        fprintf(stderr, "salusctl: logs: %s\n", rc == -EREMOTEIO ? err : strerror(-rc));
        return EXIT_DAEMON;
    }
    if (nfds != 1)
        *fd = -1;
    return EXIT_OK;
}

int verb_logs(ctl_t *ctl, int argc, char **argv)
{
    int follow = 0;
    const char *job_text = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0) {
            follow = 1;
        } else if (argv[i][0] == '-' || job_text) {
            fprintf(stderr, "salusctl: usage: salusctl logs [-f] JOB\n");
            return EXIT_USAGE;
        } else {
            job_text = argv[i];
        }
    }
    uint64_t id;
    if (!job_text) {
        fprintf(stderr, "salusctl: usage: salusctl logs [-f] JOB\n");
        return EXIT_USAGE;
    }
    if (ctl_parse_job_id("logs", job_text, &id) < 0)
        return EXIT_USAGE;
    proto_msg_t reply;
    int fd = -1, again = -1;
    off_t offset = 0;
    struct stat st;
    int rc = logs_request(ctl, id, &reply, &fd);
    if (rc != EXIT_OK)
        return rc;
    int ended = 0;
    proto_get_bool(&reply.body, "ended", &ended);
    proto_msg_free(&reply);
    /* salusctl opens no path: it reads the descriptor salusd took from the submitter */
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "salusctl: logs: salusd sent no log file (a regular file) for job "
                        "%llu\n", (unsigned long long)id);
        if (fd >= 0)
            close(fd);
        return EXIT_DAEMON;
    }
    rc = copy_new_bytes(fd, &offset);
    /* -f: until the job has ended (asked once a second), then what is left */
    for (int tick = 0; follow && !ended && rc == 0; tick++) {
        usleep(200000);
        rc = copy_new_bytes(fd, &offset);
        if (tick % 5 == 4) {
            if (logs_request(ctl, id, &reply, &again) != EXIT_OK)
                break;
            if (again >= 0)
                close(again);
            proto_get_bool(&reply.body, "ended", &ended);
            proto_msg_free(&reply);
        }
    }
    if (follow && rc == 0)
        rc = copy_new_bytes(fd, &offset);
    close(fd);
    return rc == 0 ? EXIT_OK : EXIT_DAEMON;
}
