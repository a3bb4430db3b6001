/* Subsystem sched/ (libsalusd-sched): the daemon's side of scheduler-core/ (gpu_sched.c) and
 * a job on several GPUs (job_gpus.c). Calls only base/ and the pure modules.
 *
 * The daemon's adapter to the scheduling core, which schedules the GPUs (gpu_sched.c). All
 * calls come from the event loop's thread; none blocks. */
#ifndef SALUS_SALUSD_GPU_SCHED_H
#define SALUS_SALUSD_GPU_SCHED_H

#include "daemon.h"
#include "job_gpus.h"
#include "job_page.h"
#include "sched_core.h"

/* Creates the lane manager (one entry per GPU) and starts config.policy. 0, or a negative
 * errno with a message (unknown policy). */
int gpu_sched_init(salusd_t *d, char *err, size_t err_size);
void gpu_sched_fini(salusd_t *d);
/* The daemon's events, turned into the core's. Each appends the core's effects to fx for
 * the caller to carry out (the jobs subsystem's job_effects.c) and returns 0 or a negative
 * errno (logged). */
/* The job's register request arrived: it waits for admission (an admission round runs). */
int gpu_sched_job_registered(salusd_t *d, const job_t *job, sched_core_effects_t *fx);
/* The job wrote its eventfd: if its page says it is parked at a boundary, that boundary is
 * reported (-EAGAIN: a stale notification, nothing reported). */
int gpu_sched_job_parked(salusd_t *d, const job_t *job, const job_page_t *page,
                         sched_core_effects_t *fx);
/* The job gave its lane up at a quiescent point (its page's lane word, taken by the caller):
 * reported as a boundary after which it does not ask for a turn yet. */
int gpu_sched_job_released(salusd_t *d, const job_t *job, const job_page_t *page,
                           sched_core_effects_t *fx);
/* 1 when other jobs share the job's lane. */
int gpu_sched_lane_shared(const salusd_t *d, const job_t *job);
/* The job is gone (its place and lane go to the others; an admission round runs). */
int gpu_sched_job_id_left(salusd_t *d, uint64_t job_id, sched_core_effects_t *fx);
/* A job that survived a restart is back (sched_core_job_reattached): where[] has one entry
 * per GPU of the job (one; N for a job on several GPUs, member k's at where[k]: job_gpus.h,
 * job_gpus_reattached). -ENOSPC when it does not fit beside the jobs already back. */
int gpu_sched_job_reattached(salusd_t *d, const job_t *job, const sched_core_reattach_t *where,
                             sched_core_effects_t *fx);
/* A cluster group's release and its gang slots (sched_core_group_release, _slot). */
int gpu_sched_group_release(salusd_t *d, uint64_t group_id, sched_core_effects_t *fx);
int gpu_sched_group_slot(salusd_t *d, uint64_t group_id, uint64_t seq, uint64_t target,
                         sched_core_effects_t *fx);
/* An SSP cluster group's fewest iterations on other nodes (sched_core_group_remote_least). */
int gpu_sched_group_remote_least(salusd_t *d, uint64_t group_id, uint64_t least,
                                 sched_core_effects_t *fx);
/* An admission round (after a restart's hold on new admissions ended). */
int gpu_sched_admit(salusd_t *d, sched_core_effects_t *fx);
/* A job on a claim (sizes not learned yet) needs a budget of budget_bytes and holds
 * held_bytes (sched_core_job_wants): 0, -EAGAIN (it waits; a BUDGET effect follows),
 * -ENOSPC (never), or another negative errno. */
int gpu_sched_job_wants(salusd_t *d, const job_t *job, uint64_t budget_bytes, uint64_t held_bytes,
                        sched_core_effects_t *fx);
/* The sizes an admitted job's budget is made of (the lane manager's books) and its lane. */
int gpu_sched_job_sizes(const salusd_t *d, const job_t *job, uint64_t *persistent_bytes,
                        uint64_t *ephemeral_bytes, uint32_t *lane);
/* The same for member k of the job (0: the job itself; k >= 1 of a job on several GPUs), with
 * its GPU. 0 or -ENOENT. */
int gpu_sched_member_sizes(const salusd_t *d, const job_t *job, uint32_t k, int *gpu,
                           uint64_t *persistent_bytes, uint64_t *ephemeral_bytes, uint32_t *lane);
/* The active policy's state for the state file (-ENOTSUP: it keeps none), and back. */
long gpu_sched_policy_save_state(salusd_t *d, void *buf, size_t cap);
int gpu_sched_policy_load_state(salusd_t *d, const void *buf, size_t len);
/* What the core knows of a job, for what ps, top and /metrics show (jobs_info_at). */
typedef struct gpu_sched_job_info_s {
    int admitted;
    int gpu;
    uint32_t lane;
    uint64_t budget_bytes;      /* 0 until admitted */
    int holds_lane;             /* granted: runs its iteration now */
    uint64_t waiting_since_ns;  /* waiting for admission or for its turn; 0 = not waiting */
    uint64_t lane_holder;       /* waiting for its turn: who holds its lane (0 = none) */
    bool has_rank;              /* the policy ranks its jobs (LAS, Gittins) */
    double rank;                /* that rank now: LAS's queue, Gittins's index */
    uint64_t gang_wait_ns;      /* a rank: held back for its group so far (sched_core.h) */
    int provisional;            /* admitted on a claim, sizes not learned yet */
    const char *wait_reason;    /* not admitted: why (a sentence; "" before the first round) */
} gpu_sched_job_info_t;
/* 0, or -ENOENT when the core does not know the job (ended, or not registered yet). */
int gpu_sched_job_info(const salusd_t *d, const job_t *job, gpu_sched_job_info_t *out);
/* Jobs on several GPUs (salusctl run --gpus): their members in the core (job_gpus.h). */
job_gpus_t *gpu_sched_job_gpus(const salusd_t *d);
/* Where member k of a job on several GPUs runs, and its budget (job_gpus_place). */
int gpu_sched_job_member(const salusd_t *d, const job_t *job, uint32_t k, int *gpu,
                         uint64_t *budget_bytes);
const char *gpu_sched_policy_name(const salusd_t *d);
/* What the policy's rank of a job means ("queue", "index"), NULL when it has none. */
const char *gpu_sched_rank_name(const salusd_t *d);
/* Switches the policy; the new one's init runs first (on failure the old stays: err says
 * why). */
int gpu_sched_set_policy(salusd_t *d, const char *name, char *err, size_t err_size,
                         sched_core_effects_t *fx);
/* The lane manager's books for one GPU (zeros for an unknown GPU). */
void gpu_sched_gpu_books(const salusd_t *d, int gpu, uint64_t *capacity_bytes,
                         uint64_t *persistent_bytes, uint64_t *lane_bytes, uint64_t *lanes);
/* Memory booked on a GPU, from the lane manager's books: the admitted jobs' persistent memory
 * plus the lanes' sizes (jobs that share a lane count it once). */
uint64_t gpu_sched_gpu_reserved_bytes(salusd_t *d, int gpu);
/* For /metrics: the policy and the node's GPUs, and one GPU's figures (the device's and the
 * lane manager's books), so that the layers above read none of the books themselves. */
typedef struct gpu_sched_sample_s {
    const char *policy;    /* "none" before gpu_sched_init */
    const char *rank_name; /* what a job's policy rank means; NULL: none */
    int gpus;              /* GPUs 0 .. gpus-1 */
} gpu_sched_sample_t;
void gpu_sched_sample(const salusd_t *d, gpu_sched_sample_t *sample);
typedef struct gpu_sched_gpu_sample_s {
    const char *name;
    uint64_t total_bytes;
    uint64_t used_bytes;     /* handed out in chunks, all jobs */
    uint64_t reserved_bytes; /* gpu_sched_gpu_reserved_bytes */
    uint64_t capacity_bytes, persistent_bytes, lane_bytes, lanes; /* gpu_sched_gpu_books */
    int has_busy;            /* the device's busy time is known: */
    uint64_t busy_ns;
} gpu_sched_gpu_sample_t;
/* 0, or -ENOENT for a GPU the node does not have. */
int gpu_sched_gpu_sample(salusd_t *d, int gpu, gpu_sched_gpu_sample_t *sample);
/* Every lane: its GPU, id, size, jobs (admission order) and the job that holds it. */
typedef struct gpu_sched_lane_info_s {
    int gpu;
    uint32_t lane;
    uint64_t size_bytes;
    uint64_t active_job; /* 0 = none */
    uint64_t *jobs;
    size_t job_count;
} gpu_sched_lane_info_t;
/* A fresh array of every lane (no cap), freed with gpu_sched_lanes_free. 0 or -ENOMEM. */
int gpu_sched_lanes(const salusd_t *d, gpu_sched_lane_info_t **lanes, size_t *count);
void gpu_sched_lanes_free(gpu_sched_lane_info_t *lanes, size_t count);

#endif
