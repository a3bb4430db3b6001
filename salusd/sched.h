/* The daemon's adapter to the scheduling core (sched.c). All calls come from the event
 * loop's thread; none blocks. */
#ifndef SALUS_SALUSD_SCHED_H
#define SALUS_SALUSD_SCHED_H

#include "daemon.h"

/* Creates the lane manager (one entry per GPU) and starts config.policy. 0, or a negative
 * errno with a message (unknown policy). */
int sched_init(salusd_t *d, char *err, size_t err_size);
void sched_fini(salusd_t *d);
/* The job's register request arrived: it waits for admission (an admission round runs). */
void sched_job_registered(salusd_t *d, job_t *job);
/* Runs an admission round (memory was freed outside the core's books). */
void sched_try_admit(salusd_t *d);
/* The job wrote its eventfd: it is parked at a boundary. */
void sched_job_parked(salusd_t *d, job_t *job);
/* The job is gone: leave its lane, let the others run. */
void sched_job_left(salusd_t *d, job_t *job);
/* What the core knows of a job, for the views (ps, top, metrics). */
typedef struct sched_job_view_s {
    int admitted;
    int gpu;
    uint32_t lane;
    int holds_lane;             /* granted: runs its iteration now */
    uint64_t waiting_since_ns;  /* waiting for admission or for its turn; 0 = not waiting */
    uint64_t lane_holder;       /* waiting for its turn: who holds its lane (0 = none) */
} sched_job_view_t;
/* 0, or -ENOENT when the core does not know the job (ended, or not registered yet). */
int sched_job_view(const salusd_t *d, const job_t *job, sched_job_view_t *view);
const char *sched_policy_name(const salusd_t *d);
/* Switches the policy; the new one's init runs first (on failure the old stays). */
int sched_set_policy(salusd_t *d, const char *name, char *err, size_t err_size);
/* The lane manager's books for one GPU (zeros for an unknown GPU). */
void sched_gpu_books(const salusd_t *d, int gpu, uint64_t *capacity_bytes,
                     uint64_t *persistent_bytes, uint64_t *lane_bytes, uint64_t *lanes);
/* [{gpu, lane, size_bytes, jobs: [ids], active: id|null}] */
void sched_pack_lanes(salusd_t *d, msgpack_packer *pk);

#endif
