/* salusd: the per-node daemon. Start-up, detaching, signals, shutdown. */
#include "cluster.h"
#include "daemon.h"
#include "fsio.h"
#include "groups.h"
#include "handlers.h"
#include "jobctl.h"
#include "jobs.h"
#include "jobs_observer.h"
#include "metrics.h"

#include "gpu_sched.h"
#include "log.h"
#include "notify.h"
#include "paths.h"
#include "ps.h"
#include "ps_local.h"
#include "reserve_for.h"
#include "state.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void on_signal(evutil_socket_t sig, short events, void *arg)
{
    salusd_t *d = arg;
    (void)events;
    LOG_INFO("received %s; shutting down", strsignal((int)sig));
    event_base_loopexit(d->base, NULL);
}

/* Raises the soft limit on open descriptors to the hard one: each job holds a connection
 * and a few descriptors, and systemd's default soft limit (1024) is soon reached. */
static void raise_fd_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) < 0 || lim.rlim_cur >= lim.rlim_max)
        return;
    rlim_t before = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) < 0)
        LOG_WARN("cannot raise the descriptor limit from %llu: %s", (unsigned long long)before,
                 strerror(errno));
    else
        LOG_DEBUG("descriptor limit raised from %llu to %llu", (unsigned long long)before,
                  (unsigned long long)lim.rlim_cur);
}

/* Forks; the parent waits until the child is ready (or failed) and exits with that. */
static int detach(int *ready_fd)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0) {
        char status = 1;
        close(pipefd[1]);
        if (read(pipefd[0], &status, 1) != 1)
            status = 1;
        _exit(status == 0 ? 0 : 1);
    }
    close(pipefd[0]);
    setsid();
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
        if (null_fd > STDERR_FILENO)
            close(null_fd);
    }
    *ready_fd = pipefd[1];
    return 0;
}

/* Where a detached salusd logs: --log-file, else the state file's name with .log for .state
 * (salusd.log in the state directory for the default socket). */
static int log_file_path(const salusd_t *d, char *out, size_t size)
{
    char dir[PATH_MAX], state[PATH_MAX], default_socket[108];
    if (d->config.log_file[0])
        return snprintf(out, size, "%s", d->config.log_file) < (int)size ? 0 : -ENAMETOOLONG;
    if (d->config.state_dir[0])
        snprintf(dir, sizeof(dir), "%s", d->config.state_dir);
    else if (state_default_dir(dir, sizeof(dir)) < 0)
        return -ENOENT;
    /* the default socket, found as job_restart.c finds it: without SALUS_SOCKET */
    const char *env = getenv("SALUS_SOCKET");
    char saved[108] = "";
    if (env) {
        snprintf(saved, sizeof(saved), "%s", env);
        unsetenv("SALUS_SOCKET");
    }
    int have_default = salus_default_socket_path(default_socket, sizeof(default_socket)) == 0;
    if (env)
        setenv("SALUS_SOCKET", saved, 1);
    if (state_file_path(dir, d->config.socket_path, have_default ? default_socket : NULL, state,
                        sizeof(state)) < 0)
        return -ENAMETOOLONG;
    size_t n = strlen(state);
    if (n > 6 && strcmp(state + n - 6, ".state") == 0)
        state[n - 6] = '\0';
    return snprintf(out, size, "%s.log", state) < (int)size ? 0 : -ENAMETOOLONG;
}

/* Once detached and ready, the log (and whatever the driver writes to stderr) goes to a file
 * instead of the terminal that started salusd; the terminal gets one line saying where. */
static void log_to_file(const salusd_t *d)
{
    char path[PATH_MAX] = "";
    int fd = -1, rc = log_file_path(d, path, sizeof(path));
    if (rc == 0)
        rc = fsio_make_parents(path, 0755, 0700);
    if (rc >= 0) {
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
        rc = fd < 0 ? -errno : 0;
    }
    if (fd < 0) {
        LOG_WARN("detached: cannot open a log file (%s: %s; see --log-file); not logging any "
                 "more", path[0] ? path : "no state directory", strerror(-rc));
        fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    } else {
        LOG_INFO("detached (pid %d); logging to %s", (int)getpid(), path);
    }
    if (fd >= 0 && fd != STDERR_FILENO) {
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
}

static void tell_parent(int *ready_fd, char status)
{
    if (*ready_fd < 0)
        return;
    ssize_t ignored = write(*ready_fd, &status, 1);
    (void)ignored;
    close(*ready_fd);
    *ready_fd = -1;
}

/* The state directory (--state-dir, else the default): created when missing, refused when
 * another user could redirect what salusd writes there (state.h, ps_ckpt_file.h); its real
 * path is what salusd uses from then on. 0, or -1 (salusd does not start). */
static int check_state_dir(salusd_config_t *cfg)
{
    char dir[sizeof(cfg->state_dir)], real[PATH_MAX], err[2 * PATH_MAX + 256];
    if (cfg->state_dir[0])
        snprintf(dir, sizeof(dir), "%s", cfg->state_dir);
    else if (state_default_dir(dir, sizeof(dir)) < 0)
        return 0; /* none: jobs_restart_init says what that costs */
    if (fsio_check_state_dir(dir, real, sizeof(real), err, sizeof(err)) < 0) {
        LOG_ERROR("%s; salusd does not start (choose another --state-dir, or make it salusd's "
                  "own: chown %u, chmod go-w)", err, (unsigned)geteuid());
        return -1;
    }
    snprintf(cfg->state_dir, sizeof(cfg->state_dir), "%s", real);
    return 0;
}

int main(int argc, char **argv)
{
    salusd_t d;
    int rc = 1, ready_fd = -1;
    const int signals[] = {SIGTERM, SIGINT, SIGHUP};

    memset(&d, 0, sizeof(d));
    int loaded = salusd_config_load(&d.config, argc, argv);
    if (loaded != 0)
        return loaded > 0 ? 0 : 2;
    if (metrics_check_config(&d.config) < 0)
        return 2;
    salus_log_init("salusd", (salus_log_level_t)d.config.log_level);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    if (check_state_dir(&d.config) < 0)
        return 1;
    /* a second salusd on a live socket stops here, before it touches any device */
    if (server_socket_free(d.config.socket_path) < 0)
        return 1;

    if (!d.config.foreground && detach(&ready_fd) < 0) {
        LOG_ERROR("cannot detach: %s", strerror(errno));
        return 1;
    }
    proto_enc_init(&d.enc);
    LIST_INIT(&d.conns);
    d.started_ns = salusd_now_ns();
    d.base = event_base_new();
    /* the subsystems above jobs hear its events; a group's end reaches the parameter
     * servers before the cluster, as it did when groups.c called them in that order */
    if (jobs_observe(&d, &jobctl_jobs_observer) < 0 || jobs_observe(&d, &ps_jobs_observer) < 0 ||
        jobs_observe(&d, &cluster_jobs_observer) < 0) {
        LOG_ERROR("out of memory at start-up");
        goto out;
    }
    /* the subsystems that keep state per connection let go of it when one closes */
    if (server_observe_close(&d, CONN_SLOT_JOB, &jobs_conn_ops) < 0 ||
        server_observe_close(&d, CONN_SLOT_PS_SERVERS, &server_later_ops) < 0 ||
        server_observe_close(&d, CONN_SLOT_PS_LOCAL, &ps_local_conn_ops) < 0 ||
        server_observe_close(&d, CONN_SLOT_PS_CKPT, &server_later_ops) < 0 ||
        server_observe_close(&d, CONN_SLOT_JOBCTL, &jobctl_conn_ops) < 0) {
        LOG_ERROR("cannot register the connections' close observers");
        goto out;
    }
    d.registry = registry_create();
    if (!d.base || !d.registry) {
        LOG_ERROR("out of memory at start-up");
        goto out;
    }
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
        d.signal_events[i] = evsignal_new(d.base, signals[i], on_signal, &d);
        if (!d.signal_events[i] || evsignal_add(d.signal_events[i], NULL) < 0) {
            LOG_ERROR("cannot install signal handlers");
            goto out;
        }
    }
    char err[512];
    if (devices_open(&d.devices, d.config.driver_path, err, sizeof(err)) < 0) {
        LOG_ERROR("no GPU: %s", err);
        goto out;
    }
    if (d.devices.simulated)
        LOG_WARN("NO GPU FOUND: running on simgpu, a simulated CPU device for development and "
                 "tests (%d device%s, %s)", d.devices.count, d.devices.count == 1 ? "" : "s",
                 d.devices.driver.path);
    for (int i = 0; i < d.devices.count; i++)
        LOG_INFO("GPU %d: %s, %llu MiB", i, d.devices.gpus[i].name,
                 (unsigned long long)(d.devices.gpus[i].total_bytes >> 20));
    if (gpu_sched_init(&d, err, sizeof(err)) < 0) {
        LOG_ERROR("%s", err);
        goto out;
    }
    if (jobs_restart_init(&d) < 0) {
        LOG_ERROR("out of memory at start-up");
        goto out;
    }
    if (cluster_start(&d) < 0)
        goto out;
    if (ps_start(&d) < 0)
        goto out;
    if (server_start(&d, &handlers_ops) < 0)
        goto out;
    if (metrics_start(&d) < 0)
        goto out;

    LOG_INFO("salusd %s listening on %s (pid %d, protocol %d, policy %s)", SALUS_VERSION,
             d.config.socket_path, (int)getpid(), PROTO_VERSION, gpu_sched_policy_name(&d));
    notify_ready("listening");
    if (ready_fd >= 0)
        log_to_file(&d);
    tell_parent(&ready_fd, 0);
    event_base_dispatch(d.base);
    notify_stopping();
    rc = 0;

out:
    tell_parent(&ready_fd, 1);
    jobs_restart_fini(&d); /* the running jobs stay on file: they re-attach to the next one */
    ps_stop(&d);
    cluster_stop(&d);      /* the lease stays: a restart within its TTL keeps it */
    server_stop(&d);
    metrics_stop(&d);
    jobs_shutdown(&d);
    jobctl_shutdown(&d);
    reserve_for_shutdown(&d);
    groups_fini(&d);
    if (d.grow_timer)
        event_free(d.grow_timer);
    gpu_sched_fini(&d);
    devices_close(&d.devices);
    devices_release_segment(&d.devices);
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        if (d.signal_events[i])
            event_free(d.signal_events[i]);
    jobs_observers_fini(&d);
    registry_destroy(d.registry);
    if (d.base)
        event_base_free(d.base);
    proto_enc_destroy(&d.enc);
    if (rc == 0)
        LOG_INFO("salusd stopped");
    return rc;
}
