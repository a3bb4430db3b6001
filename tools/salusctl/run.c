/* salusctl run: runs a command as a salus job, in the foreground, as the calling user.
 * Sets the environment the shim reads (socket, job name and hints), puts the shim first on
 * LD_LIBRARY_PATH and in LD_PRELOAD, forks the command's process, which waits, and reserves
 * the job passing that process's pidfd, which salusd moves into the job's cgroup; then the
 * process runs the command with SALUS_JOB_ID (the shim attaches to the reserved job), so
 * that everything the command forks is in the job's cgroup. Reports how the command ended
 * (job_exit) and exits with its exit status. salusd's kill reaches every process of the
 * job's cgroup, and the command through this process: SIGTERM/SIGINT as they are, SIGUSR1
 * as SIGKILL. */
#include "run.h"

#include "client.h"
#include "launch.h"
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The shim's directory: <dir of salusctl>/../lib/salus (build tree and installed tree). */
int salusctl_shim_dir(char *out, size_t size)
{
    char exe[PATH_MAX], candidate[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -ENOENT;
    *slash = '\0';
    snprintf(candidate, sizeof(candidate), "%s/../lib/salus", exe);
    if (!realpath(candidate, out) || strlen(out) + 16 >= size)
        return -ENOENT;
    char lib[PATH_MAX + 16];
    snprintf(lib, sizeof(lib), "%s/libcuda.so.1", out);
    return access(lib, R_OK) == 0 ? 0 : -ENOENT;
}

static int prepend_env(const char *name, const char *value, char sep)
{
    const char *old = getenv(name);
    if (!old || !*old)
        return setenv(name, value, 1);
    size_t n = strlen(value) + strlen(old) + 2;
    char *joined = malloc(n);
    if (!joined)
        return -1;
    snprintf(joined, n, "%s%c%s", value, sep, old);
    int rc = setenv(name, joined, 1);
    free(joined);
    return rc;
}

static void usage_run(void)
{
    fprintf(stderr, "usage: salusctl run [--name NAME] [--iterations N] [--persistent BYTES] "
                    "[--ephemeral BYTES] [--priority N] [--gpus N] [--latency-target MS] "
                    "[--request-ms MS] [--group NAME --world N --rank R "
                    "[--local-rank L] [--sync bsp|ssp:S|asp] [--share-gpus] [--restore]] "
                    "-- COMMAND [ARGS...]\n");
}

/* The group this process is a rank of (launch.h): worked out by salusctl_job_options,
 * sent with the submit request. A fork (submit's supervisor) keeps it. */
static launch_contract_t job_contract;
/* --restore: the group's parameter-server tables start from their checkpoints on this node
 * (salusctl checkpoint; sent as "restore" with the rank) */
static int restore_group;

static const char *contract_getenv(const char *name, void *context)
{
    (void)context;
    return getenv(name);
}

/* Takes one of the group's flags at argv[*i]: 1 taken, 0 not a group flag, 2 usage error. */
static int group_flag(const char *verb, int argc, char **argv, int *i, launch_flags_t *flags)
{
    static const char *const names[] = {"--group", "--world", "--rank", "--local-rank",
                                        "--sync"};
    const char **fields[] = {&flags->group, &flags->world, &flags->rank, &flags->local_rank,
                             &flags->sync};
    if (strcmp(argv[*i], "--share-gpus") == 0) {
        flags->share_gpus = 1;
        return 1;
    }
    if (strcmp(argv[*i], "--restore") == 0) {
        restore_group = 1;
        return 1;
    }
    for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
        if (strcmp(argv[*i], names[n]) != 0)
            continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "salusctl: %s: %s needs a value\n", verb, argv[*i]);
            return 2;
        }
        *fields[n] = argv[++*i];
        return 1;
    }
    return 0;
}

/* Works the contract out and exports it to the job (SALUS_GROUP, SALUS_WORLD, SALUS_RANK,
 * SALUS_LOCAL_RANK). 0, or 2 after a usage message. */
static int resolve_contract(const char *verb, const launch_flags_t *flags)
{
    char err[256], text[16];
    if (launch_resolve(flags, contract_getenv, NULL, &job_contract, err, sizeof(err)) < 0) {
        fprintf(stderr, "salusctl: %s: %s\n", verb, err);
        return 2;
    }
    if (!job_contract.group[0])
        return 0;
    setenv("SALUS_GROUP", job_contract.group, 1);
    snprintf(text, sizeof(text), "%u", job_contract.world);
    setenv("SALUS_WORLD", text, 1);
    snprintf(text, sizeof(text), "%u", job_contract.rank);
    setenv("SALUS_RANK", text, 1);
    if (job_contract.local_rank >= 0) {
        snprintf(text, sizeof(text), "%d", job_contract.local_rank);
        setenv("SALUS_LOCAL_RANK", text, 1);
    } else {
        unsetenv("SALUS_LOCAL_RANK");
    }
    return 0;
}

/* Whether path names a regular file this user may execute: 0, or the errno that says why not
 * (EISDIR for a directory, EACCES for a file without execute permission). */
static int executable_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return errno;
    if (S_ISDIR(st.st_mode))
        return EISDIR;
    if (!S_ISREG(st.st_mode) || access(path, X_OK) < 0)
        return EACCES;
    return 0;
}

/* The command is looked up as execvp will (a name without '/' on PATH) before any job is
 * reserved: a command that cannot run is a usage error (2), said in one line. */
static int check_command(const char *verb, const char *command)
{
    if (!command[0]) {
        fprintf(stderr, "salusctl: %s: the command is empty\n", verb);
        return 2;
    }
    if (strchr(command, '/')) {
        int why = executable_file(command);
        if (why == 0)
            return 0;
        fprintf(stderr, "salusctl: %s: cannot run '%s': %s\n", verb, command,
                why == EACCES ? "not an executable file (no execute permission)"
                : why == EISDIR ? "it is a directory"
                                : strerror(why));
        return 2;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/bin:/usr/bin";
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        char candidate[PATH_MAX];
        if (snprintf(candidate, sizeof(candidate), "%.*s/%s", (int)n, n ? p : ".", command) <
                (int)sizeof(candidate) &&
            executable_file(candidate) == 0)
            return 0;
        p += n + (colon ? 1 : 0);
        if (!colon)
            break;
    }
    struct stat st;
    if (stat(command, &st) == 0)
        fprintf(stderr, "salusctl: %s: '%s' is not a command on PATH; there is a file of that "
                "name here: give its path, ./%s%s\n", verb, command, command,
                executable_file(command) == 0 ? "" : " (it is not executable)");
    else
        fprintf(stderr, "salusctl: %s: '%s': command not found (not on PATH)\n", verb, command);
    return 2;
}

int salusctl_job_options(const char *verb, int argc, char **argv, const char **log_path,
                         int *command_index)
{
    static const char *const hints[][2] = {
        {"--name", "SALUS_JOB_NAME"},          {"--iterations", "SALUS_ITERATIONS"},
        {"--persistent", "SALUS_MEM_PERSISTENT"}, {"--ephemeral", "SALUS_MEM_EPHEMERAL"},
        {"--priority", "SALUS_PRIORITY"},      {"--gpus", "SALUS_GPUS"}, /* one process, N GPUs */
        /* latency-critical: each iteration (a request) within MS; the expected GPU time of a
         * request, for admission (salusd refuses a job no GPU can serve within its target) */
        {"--latency-target", "SALUS_LATENCY_TARGET_MS"}, {"--request-ms", "SALUS_REQUEST_MS"},
    };
    int i = 0;
    launch_flags_t group = {0};
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        int taken = group_flag(verb, argc, argv, &i, &group);
        if (taken == 2)
            return 2;
        if (taken)
            continue;
        size_t h = 0;
        for (; h < sizeof(hints) / sizeof(hints[0]); h++)
            if (strcmp(argv[i], hints[h][0]) == 0)
                break;
        if (h == sizeof(hints) / sizeof(hints[0]) && log_path && strcmp(argv[i], "--log") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "salusctl: %s: --log needs a value\n", verb);
                return 2;
            }
            *log_path = argv[++i];
            continue;
        }
        if (h == sizeof(hints) / sizeof(hints[0])) {
            if (argv[i][0] == '-') {
                fprintf(stderr, "salusctl: %s: unknown option '%s'\n", verb, argv[i]);
                usage_run();
                return 2;
            }
            break; /* the command starts here */
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "salusctl: %s: %s needs a value\n", verb, argv[i]);
            return 2;
        }
        const char *value = argv[++i];
        unsigned long long bytes;
        if ((h == 2 || h == 3) && options_parse_bytes(value, &bytes) < 0) {
            fprintf(stderr, "salusctl: %s: %s expects a size such as 512MiB, got '%s'\n",
                    verb, hints[h][0], value);
            return 2;
        }
        char text[32];
        if (h == 6 || h == 7) {
            char *end;
            errno = 0;
            double ms = strtod(value, &end);
            if (end == value || *end || errno || !(ms > 0.0) || ms > 3600000.0) {
                fprintf(stderr, "salusctl: %s: %s expects milliseconds (> 0, at most an hour), "
                                "got '%s'\n", verb, hints[h][0], value);
                return 2;
            }
        }
        if (h == 2 || h == 3) {
            snprintf(text, sizeof(text), "%llu", bytes);
            value = text;
        } else if (h == 1 || h == 4 || h == 5) {
            char *end;
            errno = 0;
            long long v = strtoll(value, &end, 10);
            if (*end || errno || (h == 1 && v < 0) || (h == 5 && (v < 1 || v > 1024))) {
                fprintf(stderr, "salusctl: %s: %s expects %s, got '%s'\n", verb, hints[h][0],
                        h == 5 ? "a number of GPUs (1 or more)" : "an integer", value);
                return 2;
            }
        }
        setenv(hints[h][1], value, 1);
    }
    if (i >= argc) {
        usage_run();
        return 2;
    }
    *command_index = i;
    if (check_command(verb, argv[i]) != 0)
        return 2;
    int rc = resolve_contract(verb, &group);
    if (rc == 0 && restore_group && !job_contract.group[0]) {
        fprintf(stderr, "salusctl: %s: --restore restores a group's tables: it needs --group\n",
                verb);
        return 2;
    }
    const char *gpus = getenv("SALUS_GPUS");
    if (rc == 0 && job_contract.group[0] && gpus && strtoull(gpus, NULL, 10) > 1) {
        fprintf(stderr, "salusctl: %s: a rank of a group takes one GPU: --gpus with --group (or "
                        "a launcher's ranks) is not supported\n", verb);
        return 2;
    }
    return rc;
}

int salusctl_job_environment(const char *socket_path, int timeout_ms)
{
    /* fail early, with the same one line as the other verbs, when no daemon answers */
    salus_client_t probe;
    char err[256] = "";
    if (salus_client_open(&probe, socket_path, "salusctl", timeout_ms, err, sizeof(err)) < 0) {
        fprintf(stderr, "salusctl: cannot reach salusd at %s: %s\n", socket_path, err);
        return 1;
    }
    salus_client_close(&probe);

    char dir[PATH_MAX], preload[PATH_MAX + 16];
    if (salusctl_shim_dir(dir, sizeof(dir)) < 0) {
        fprintf(stderr, "salusctl: the shim (../lib/salus/libcuda.so.1 next to salusctl) is "
                        "missing\n");
        return 1;
    }
    snprintf(preload, sizeof(preload), "%s/libcuda.so.1", dir);
    if (setenv("SALUS_SOCKET", socket_path, 1) < 0 || prepend_env("LD_LIBRARY_PATH", dir, ':') < 0 ||
        prepend_env("LD_PRELOAD", preload, ':') < 0 ||
        /* PyTorch's stream-ordered allocator sends every tensor through cuMemAllocAsync */
        setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 0) < 0) {
        fprintf(stderr, "salusctl: cannot set the job's environment\n");
        return 1;
    }
    return 0;
}

static uint64_t env_u(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : 0;
}

/* A time in milliseconds from the environment (salusctl_job_options checked it), in ns; 0
 * when not set. */
static uint64_t class_ns(const char *name)
{
    const char *v = getenv(name);
    double ms = v && *v ? strtod(v, NULL) : 0.0;
    return ms > 0.0 && ms <= 3600000.0 ? (uint64_t)(ms * 1e6) : 0;
}

int salusctl_reserve(const char *socket_path, int timeout_ms, const char *name,
                     const char *log_path, const int *fds, const char *const *roles, int nfds,
                     uint64_t *id, char *err, size_t err_size)
{
    salus_client_t c;
    proto_msg_t reply;
    const char *priority = getenv("SALUS_PRIORITY");
    const char *given = getenv("SALUS_JOB_NAME");
    int rc = salus_client_open(&c, socket_path, "salusctl", timeout_ms, err, err_size);
    if (rc < 0)
        return rc;
    const launch_contract_t *g = &job_contract;
    int grouped = g->group[0] != '\0';
    uint64_t gpus = env_u("SALUS_GPUS");
    uint64_t target_ns = class_ns("SALUS_LATENCY_TARGET_MS"), request_ns = class_ns("SALUS_REQUEST_MS");
    msgpack_packer *pk = salus_client_begin(&c, "submit", 5 + (log_path != NULL) + (nfds > 0) +
                                                              (grouped ? 7 + restore_group : 0) +
                                                              (gpus > 1) + (target_ns > 0) +
                                                              (request_ns > 0));
    if (target_ns) /* latency-critical (protocol: an optional field, older daemons ignore it) */
        proto_pack_kv_uint(pk, "latency_target_ns", target_ns);
    if (request_ns)
        proto_pack_kv_uint(pk, "request_ns", request_ns);
    if (gpus > 1) /* salusd refuses more than the node has */
        proto_pack_kv_uint(pk, "gpus", gpus);
    proto_pack_kv_str(pk, "name", given && *given ? given : name);
    proto_pack_kv_uint(pk, "iterations", env_u("SALUS_ITERATIONS"));
    proto_pack_kv_uint(pk, "persistent_bytes", env_u("SALUS_MEM_PERSISTENT"));
    proto_pack_kv_uint(pk, "ephemeral_bytes", env_u("SALUS_MEM_EPHEMERAL"));
    proto_pack_kv_int(pk, "priority", priority ? strtoll(priority, NULL, 10) : 0);
    if (log_path)
        proto_pack_kv_str(pk, "log", log_path);
    if (nfds > 0) {
        proto_pack_str(pk, "fds");
        msgpack_pack_array(pk, (uint32_t)nfds);
        for (int i = 0; i < nfds; i++)
            proto_pack_str(pk, roles[i]);
    }
    if (grouped) { /* protocol minor 2 (proto.h) */
        proto_pack_kv_str(pk, "group", g->group);
        proto_pack_kv_uint(pk, "world", g->world);
        proto_pack_kv_uint(pk, "rank", g->rank);
        proto_pack_kv_int(pk, "local_rank", g->local_rank);
        proto_pack_kv_str(pk, "sync", launch_sync_name(g->sync));
        proto_pack_kv_uint(pk, "staleness", g->staleness);
        proto_pack_kv_bool(pk, "share_gpus", g->share_gpus);
        if (restore_group) /* (a salusd without checkpoints ignores it) */
            proto_pack_kv_bool(pk, "restore", 1);
    }
    rc = nfds > 0 ? salus_client_call_passing(&c, fds, nfds, &reply, err, err_size)
                  : salus_client_call(&c, &reply, err, err_size);
    if (rc < 0) {
        salus_client_close(&c);
        if (rc != -EREMOTEIO && rc != -ENOMEM)
            snprintf(err, err_size, "%s", strerror(-rc));
        return rc;
    }
    rc = proto_get_uint(&reply.body, "job_id", id) < 0 ? -EPROTO : 0;
    if (rc < 0)
        snprintf(err, err_size, "salusd sent no job id");
    salus_client_close(&c);
    /* a daemon older than groups (minor < 2) ignores the fields: its job would run alone */
    char echoed[LAUNCH_GROUP_BYTES] = "";
    if (rc == 0 && grouped &&
        (proto_get_str_copy(&reply.body, "group", echoed, sizeof(echoed)) < 0 ||
         strcmp(echoed, g->group) != 0)) {
        snprintf(err, err_size, "salusd (%s) does not know groups (protocol minor 2): job %llu "
                 "would run as a single job; upgrade salusd", c.server,
                 (unsigned long long)*id);
        salusctl_report_exit(socket_path, timeout_ms, *id, 1, 0);
        rc = -EPROTO;
    }
    proto_msg_free(&reply);
    return rc;
}

void salusctl_report_exit(const char *socket_path, int timeout_ms, uint64_t id, int code, int sig)
{
    salus_client_t c;
    proto_msg_t reply;
    char err[256] = "";
    if (salus_client_open(&c, socket_path, "salusctl", timeout_ms, err, sizeof(err)) < 0) {
        fprintf(stderr, "salusctl: could not report the exit status %d: %s\n", code, err);
        return;
    }
    msgpack_packer *pk = salus_client_begin(&c, "job_exit", sig ? 3 : 2);
    proto_pack_kv_uint(pk, "id", id);
    proto_pack_kv_int(pk, "status", code);
    if (sig)
        proto_pack_kv_int(pk, "signal", sig);
    if (salus_client_call(&c, &reply, err, sizeof(err)) == 0)
        proto_msg_free(&reply);
    else
        fprintf(stderr, "salusctl: job_exit: %s\n", err);
    salus_client_close(&c);
}

void salusctl_exec_job(const char *verb, char **command, int go_fd)
{
    char text[32];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof(text) - 1 &&
           ((n = read(go_fd, text + got, sizeof(text) - 1 - got)) > 0 || (n < 0 && errno == EINTR)))
        got += n > 0 ? (size_t)n : 0;
    close(go_fd);
    text[got] = '\0';
    text[strcspn(text, "\n")] = '\0';
    if (!text[0])
        _exit(127); /* no job: the parent says why */
    setenv("SALUS_JOB_ID", text, 1);
    execvp(command[0], command);
    fprintf(stderr, "salusctl: %s: cannot execute '%s': %s\n", verb, command[0], strerror(errno));
    _exit(127);
}

static volatile sig_atomic_t run_child;

/* salusd's kill: to the command (run shares the terminal's process group, so not to it) */
static void run_forward(int sig)
{
    if (run_child > 0)
        kill((pid_t)run_child, sig == SIGUSR1 ? SIGKILL : sig);
}

int salusctl_run(const char *socket_path, int timeout_ms, int argc, char **argv)
{
    int i = 0;
    char err[256] = "", text[32];
    uint64_t id = 0;
    int rc = salusctl_job_options("run", argc, argv, NULL, &i);
    if (rc == 0)
        rc = salusctl_job_environment(socket_path, timeout_ms);
    if (rc != 0)
        return rc;
    const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
    int go[2];
    if (pipe2(go, O_CLOEXEC) < 0) {
        perror("salusctl: run: pipe");
        return 1;
    }
    /* the command's process, forked before the job exists: salusd moves it into the job's
     * cgroup (its pidfd goes with the request) before it may exec */
    pid_t pid = fork();
    if (pid < 0) {
        perror("salusctl: fork");
        close(go[0]);
        close(go[1]);
        return 1;
    }
    if (pid == 0) {
        close(go[1]);
        salusctl_exec_job("run", &argv[i], go[0]);
    }
    close(go[0]);
    run_child = pid;
    /* salusd's kill may come as soon as the job exists */
    struct sigaction sa = {.sa_handler = run_forward};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    /* a pidfd of this process's own child names it for as long as it is not reaped */
    int command_fd = (int)syscall(SYS_pidfd_open, pid, 0);
    static const char *const roles[1] = {"command"};
    int reserved = salusctl_reserve(socket_path, timeout_ms, base, NULL, &command_fd, roles,
                                    command_fd >= 0 ? 1 : 0, &id, err, sizeof(err));
    if (command_fd >= 0)
        close(command_fd);
    int len = snprintf(text, sizeof(text), "%llu\n", (unsigned long long)id);
    if (reserved == 0 && write(go[1], text, (size_t)len) != len) {
        fprintf(stderr, "salusctl: run: cannot start the command: %s\n", strerror(errno));
        kill(pid, SIGKILL);
    }
    close(go[1]); /* without an id, the command's process exits */
    if (reserved < 0) {
        fprintf(stderr, "salusctl: run: %s\n", err);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return 1;
    }
    /* the terminal's signals reach the job (same process group); salusctl waits for it */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("salusctl: waitpid");
            return 1;
        }
    }
    run_child = 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status)
               : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                     : 1;
    salusctl_report_exit(socket_path, timeout_ms, id, code,
                         WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return code;
}
