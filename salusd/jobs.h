/* Jobs at run time: registration and admission, memory chunks, the shared job page and its
 * notifications, and cleanup when the job's process ends (pidfd). */
#ifndef SALUS_SALUSD_JOBS_H
#define SALUS_SALUSD_JOBS_H

#include "daemon.h"

void jobs_handle_register(conn_t *c, const proto_msg_t *msg);
void jobs_handle_mem_grow(conn_t *c, const proto_msg_t *msg);
void jobs_connection_closed(conn_t *c);
/* Writes {jobs: [...]} entries for ps. */
void jobs_pack_list(salusd_t *d, msgpack_packer *pk);
/* Releases every job's resources (shutdown). */
void jobs_shutdown(salusd_t *d);

/* sched.c: who runs on each GPU (first come, first served at iteration granularity until
 * the lanes and policies land). */
void sched_job_parked(salusd_t *d, job_t *job);
void sched_job_left(salusd_t *d, job_t *job);
int sched_is_holder(const salusd_t *d, const job_t *job);

#endif
