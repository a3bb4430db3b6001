/* Jobs controlled from salusctl: submit (a reserved job that a detached supervisor runs),
 * job_exit (its exit status), kill, wait, logs and stats. Keeps what must outlive a job's
 * run-time state: the log path, the exit status, the supervisor's pidfd, waiters. All calls
 * come from the event loop's thread. */
#ifndef SALUS_SALUSD_JOBCTL_H
#define SALUS_SALUSD_JOBCTL_H

#include "access.h"
#include "daemon.h"
#include "jobs_observer.h"

/* Request handlers (rows of handlers.c). Each writes one reply or error, except wait,
 * which answers when the job has ended. */
void jobctl_handle_submit(conn_t *c, const proto_msg_t *msg);
void jobctl_handle_job_exit(conn_t *c, const proto_msg_t *msg);
void jobctl_handle_kill(conn_t *c, const proto_msg_t *msg);
void jobctl_handle_wait(conn_t *c, const proto_msg_t *msg);
void jobctl_handle_logs(conn_t *c, const proto_msg_t *msg);

/* Ends a job's processes as kill does: SIGTERM now, SIGKILL after grace_ms if it has not
 * ended or its supervisor has not reported its command's end. 0, or a negative errno (-ESRCH: no process known). */
int jobctl_terminate(salusd_t *d, job_t *job, uint64_t grace_ms);
/* How the job's command ended, as job_exit reports it: exited with code, or (exited == 0)
 * killed by signal code; a job still only reserved ends. 0, or -ENOMEM. */
int jobctl_report_exit(salusd_t *d, job_t *job, int exited, int code);
/* A job root reserved for another process (reserve_for): supervisor_pidfd is the process that
 * reports its end (its exit without a report ends a reservation no program took), never
 * signalled; command_pidfd (or -1) the command's process, which kill signals. Takes both
 * descriptors on success; 0, or -ENOMEM (they stay the caller's). */
int jobctl_watch_reserved_for(salusd_t *d, job_t *job, int supervisor_pidfd, int command_pidfd);
/* jobs.c: the job's run-time state is gone (done or failed). */
void jobctl_job_finished(salusd_t *d, job_t *job);
/* 1 when the finished job's end is settled (as wait answers it): its exit status known or
 * given up on, a submitted job's supervisor reported or gone (daemon.h, job_settled). */
int jobctl_job_settled(salusd_t *d, const job_t *job);
/* What jobctl hears of the jobs subsystem (main registers it first): a job finished, whether
 * its end is settled, and the ending of a group's ranks (jobctl_terminate). */
extern const jobs_observer_t jobctl_jobs_observer;
/* The close observer of a connection's waits (CONN_SLOT_JOBCTL), registered by main: they
 * are forgotten. */
extern const conn_slot_ops_t jobctl_conn_ops;
/* Shutdown: answers nobody, frees everything. */
void jobctl_shutdown(salusd_t *d);

#endif
