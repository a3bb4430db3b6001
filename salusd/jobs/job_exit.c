/* How jobs end (see jobs.h): the final state from an exit status, and the exit probe that
 * asks the kernel for the status of a registered process that has ended (pidfd,
 * PIDFD_GET_INFO) until its parent reaped it. */
#include "jobs.h"
#include "jobs-internal.h"
#include "jobs_observer.h"


#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* PIDFD_GET_INFO (Linux 6.13; the exit status since 6.15), declared here for older headers:
 * the first published layout, whose last field became exit_code. */
typedef struct jobs_pidfd_info_s {
    uint64_t mask;
    uint64_t cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code;
} jobs_pidfd_info_t;
#define JOBS_PIDFD_GET_INFO _IOWR(0xFF, 11, jobs_pidfd_info_t)
#define JOBS_PIDFD_INFO_EXIT (1ull << 3)
/* the exit status appears once the process is reaped: asks for it this often, this long */
#define JOBS_EXIT_POLL_MS 20
#define JOBS_EXIT_POLL_TRIES 100

job_state_t jobs_exit_state(const job_t *job)
{
    if (!job->exit_known)
        return JOB_ENDED;
    return job->exit_signal ? JOB_KILLED : job->exit_status == 0 ? JOB_DONE : JOB_FAILED;
}

void jobs_set_exit(salusd_t *d, job_t *job, int exited, int code)
{
    job->exit_known = 1;
    job->exit_status = exited ? code : 128 + code;
    job->exit_signal = exited ? 0 : code;
    if (JOB_STATE_IS_FINAL(job->state)) {
        job_state_t now = jobs_exit_state(job);
        registry_count_end(d->registry, job->state, now);
        job->state = now;
    }
}

/* After the registered process ended, until its parent reaped it: the job is over (its
 * memory returned, state "ended") and waits for wait hold; the probe asks the kernel for the
 * exit status every JOBS_EXIT_POLL_MS, and the job takes it (done, failed, killed). */
typedef struct exit_probe_s {
    salusd_t *daemon;
    uint64_t job_id;
    int pidfd;
    int tries;
    struct event *timer;
} exit_probe_t;

void jobs_exit_probe_free(job_t *job)
{
    exit_probe_t *p = job->exit_probe;
    if (!p)
        return;
    if (p->timer)
        event_free(p->timer);
    close(p->pidfd);
    free(p);
    job->exit_probe = NULL;
}

/* 1 with *status when the kernel has the process's exit status; 0 not yet; -1 never */
int jobs_pidfd_exit_status(int pidfd, int *status)
{
    jobs_pidfd_info_t info = {.mask = JOBS_PIDFD_INFO_EXIT};
    if (ioctl(pidfd, JOBS_PIDFD_GET_INFO, &info) < 0)
        /* before Linux 6.13 the ioctl does not exist; any other error (ESRCH while the
         * process is between exit and reaping) is "not yet": the probe asks again */
        return errno == ENOTTY || errno == EINVAL || errno == EOPNOTSUPP ? -1 : 0;
    if (!(info.mask & JOBS_PIDFD_INFO_EXIT))
        return 0; /* not reaped yet (or before 6.15) */
    *status = info.exit_code;
    return 1;
}

static void on_probe(evutil_socket_t fd, short events, void *arg)
{
    exit_probe_t *p = arg;
    salusd_t *d = p->daemon;
    int st = 0;
    (void)fd;
    (void)events;
    job_t *job = registry_find(d->registry, p->job_id);
    if (!job) /* not possible (forgetting a job frees its probe), but harmless */
        return;
    int rc = job->exit_known ? -1 : jobs_pidfd_exit_status(p->pidfd, &st);
    if (rc == 0 && ++p->tries < JOBS_EXIT_POLL_TRIES) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = JOBS_EXIT_POLL_MS * 1000};
        if (evtimer_add(p->timer, &tv) == 0)
            return;
    }
    if (rc == 1 && !job->exit_known)
        jobs_set_exit(d, job, WIFEXITED(st), WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    jobs_exit_probe_free(job);
    jobs_raise_job_finished(d, job); /* answers the waits it held */
}

/* Starts the probe of a job whose process has ended without its status yet. */
void jobs_exit_probe_start(salusd_t *d, job_t *job, int pidfd)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = JOBS_EXIT_POLL_MS * 1000};
    exit_probe_t *p = calloc(1, sizeof(*p));
    int fd = p ? fcntl(pidfd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        free(p);
        return;
    }
    p->daemon = d;
    p->job_id = job->id;
    p->pidfd = fd;
    p->timer = evtimer_new(d->base, on_probe, p);
    job->exit_probe = p;
    if (!p->timer || evtimer_add(p->timer, &tv) < 0)
        jobs_exit_probe_free(job);
}

int jobs_exit_pending(const job_t *job)
{
    return job->exit_probe != NULL;
}

void jobs_exit_probe_stop(salusd_t *d, job_t *job)
{
    if (!job->exit_probe)
        return;
    jobs_exit_probe_free(job);
    jobs_raise_job_finished(d, job);
}
