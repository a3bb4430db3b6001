/* Jobs that a resource manager's plugin reserves for the processes it starts (Slurm's SPANK
 * plugin, slurm/): root asks salusd to reserve a job for another user's process, before that
 * process execs its program, and reports how it ended. All calls come from the event loop's
 * thread.
 *
 *   reserve_for {tag, uid, gid, pid, supervisor_pid, <submit's job and group fields>,
 *                share_k?, share_n?}  -> {job_id, group?, persistent_bytes, ephemeral_bytes}
 *       root only (from salusd's own pid and user namespaces). pid: the process that will run
 *       the program (alive: checked through its pidfd; kill signals it); supervisor_pid: the
 *       process that reports the end (its exit without a report ends a reservation no program
 *       took; never signalled). tag: the reserver's name of the reservation (1..63 printable
 *       bytes, unique among the jobs not yet over), which reserved_exit names. With share_k/share_n
 *       (1 <= k <= n) and pin_gpu g: the job's budget is k/n of what GPU g offers jobs
 *       (its memory less --gpu-reserve), half persistent and half ephemeral, and the
 *       program's register cannot change it (nor the pin).
 *   reserved_exit {tag, status, signal?} -> {id}
 *       root only: how the reservation's process ended (status 0..255, or the signal). */
#ifndef SALUS_SALUSD_RESERVE_FOR_H
#define SALUS_SALUSD_RESERVE_FOR_H

#include "daemon.h"

void reserve_for_handle(conn_t *c, const proto_msg_t *msg);
void reserve_for_handle_exit(conn_t *c, const proto_msg_t *msg);
/* Shutdown: frees the table of tags. */
void reserve_for_shutdown(salusd_t *d);

#endif
