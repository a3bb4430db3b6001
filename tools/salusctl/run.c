/* salusctl run: runs a command as a salus job, in the foreground, as the calling user.
 * Sets the environment the shim reads (socket, job name and hints), puts the shim first on
 * LD_LIBRARY_PATH and in LD_PRELOAD, and exits with the command's exit status. */
#include "run.h"

#include "client.h"
#include "options.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The shim's directory: <dir of salusctl>/../lib/salus (build tree and installed tree). */
static int shim_dir(char *out, size_t size)
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
                    "[--ephemeral BYTES] [--priority N] -- COMMAND [ARGS...]\n");
}

int salusctl_job_options(const char *verb, int argc, char **argv, const char **log_path,
                         int *command_index)
{
    static const char *const hints[][2] = {
        {"--name", "SALUS_JOB_NAME"},          {"--iterations", "SALUS_ITERATIONS"},
        {"--persistent", "SALUS_MEM_PERSISTENT"}, {"--ephemeral", "SALUS_MEM_EPHEMERAL"},
        {"--priority", "SALUS_PRIORITY"},
    };
    int i = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
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
        if (h == 2 || h == 3) {
            snprintf(text, sizeof(text), "%llu", bytes);
            value = text;
        } else if (h == 1 || h == 4) {
            char *end;
            errno = 0;
            long long v = strtoll(value, &end, 10);
            if (*end || errno || (h == 1 && v < 0)) {
                fprintf(stderr, "salusctl: %s: %s expects an integer, got '%s'\n", verb,
                        hints[h][0], value);
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
    return 0;
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
    if (shim_dir(dir, sizeof(dir)) < 0) {
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

int salusctl_run(const char *socket_path, int timeout_ms, int argc, char **argv)
{
    int i = 0;
    int rc = salusctl_job_options("run", argc, argv, NULL, &i);
    if (rc == 0)
        rc = salusctl_job_environment(socket_path, timeout_ms);
    if (rc != 0)
        return rc;
    pid_t pid = fork();
    if (pid < 0) {
        perror("salusctl: fork");
        return 1;
    }
    if (pid == 0) {
        execvp(argv[i], &argv[i]);
        fprintf(stderr, "salusctl: run: cannot execute '%s': %s\n", argv[i], strerror(errno));
        _exit(127);
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
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}
