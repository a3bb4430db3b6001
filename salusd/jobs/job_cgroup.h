/* A cgroup (v2) per job started with salusctl run or submit, so that kill reaches every
 * process of the job, also those that left its process group (setsid). The jobs' cgroups
 * live below the daemon's own cgroup where systemd delegated it (Delegate=yes), else below
 * <cgroup2 mount>/salus when salusd may write there (root); each daemon keeps its jobs in
 * salusd-<pid>/job-<id>. Where neither is writable, jobs_cgroup_* answer -ENOTSUP and kill
 * falls back to the supervisor, which signals the command (logged once). The directories of salusd processes that are gone are removed
 * when empty, at the first job's cgroup. Event-loop thread only. */
#ifndef SALUS_SALUSD_JOB_CGROUP_H
#define SALUS_SALUSD_JOB_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JOB_CGROUP_PATH_BYTES 512

/* Creates the cgroup of job_id; its path in path. 0, or -ENOTSUP (no writable cgroup2
 * tree: the process group is used), or another negative errno. */
int job_cgroup_create(uint64_t job_id, char *path, size_t size);
/* job_cgroup_place's answer for a process left in a cgroup another manager owns */
#define JOB_CGROUP_LEFT 1

/* Moves the process of pidfd into the cgroup at path, only when it is a child of parent
 * (a live process: its pid is checked through its own pidfd) running as uid, and sits in
 * no cgroup that another manager owns (job_cgroup_foreign): such a process is never moved.
 * 0, JOB_CGROUP_LEFT (left where it is: signal it through its pidfd), -EPERM (not a child
 * of parent, or another uid), -EBADF (not a pidfd), -ESRCH (it exited), or another
 * negative errno. */
int job_cgroup_place(const char *path, int pidfd, pid_t parent, uid_t uid);
/* 1 when the cgroup at path (below the cgroup2 mount, as /proc/PID/cgroup names it) is
 * another manager's: a directory on it is a container engine's (libpod-*, libpod_parent,
 * docker-*, docker), Slurm's (job_<number>) or Kubernetes' (kubepods, kubepods.*,
 * kubepods-*). 0 otherwise. Pure. */
int job_cgroup_foreign(const char *path);
/* Signals every process in the cgroup: SIGKILL through cgroup.kill (before Linux 5.14:
 * freeze, kill each, thaw), another signal to each process through a pidfd taken after
 * its membership was checked. The number of processes signalled, or a negative errno. */
int job_cgroup_signal(const char *path, int sig);
/* 1 while a process is in the cgroup, 0 when empty, negative errno. */
int job_cgroup_populated(const char *path);
/* Removes the cgroup; with kill_rest, kills what is left in it first. 0, or -EBUSY while
 * processes are in it (still dying: call again), or another negative errno. */
int job_cgroup_remove(const char *path, int kill_rest);
/* Shutdown: removes this daemon's directory when no job cgroup is left in it. */
void job_cgroup_shutdown(void);

#endif
