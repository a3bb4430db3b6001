/* salus-sim internals shared by sim.c, admit.c and share.c: the event heap, the
 * processor-sharing model of one GPU and the engine's state. Not included by the CLI. */
#ifndef SALUS_TOOLS_SIM_INTERNAL_H
#define SALUS_TOOLS_SIM_INTERNAL_H

#include "sim.h"

#include "lanes.h"
#include "policy.h"

#include <math.h>

/* A binary min-heap of (key, job), ties broken by the lower job index so that runs are
 * deterministic. */
typedef struct sim_heap_entry_s {
    double key;
    uint32_t job;
} sim_heap_entry_t;

typedef struct sim_heap_s {
    sim_heap_entry_t *items;
    size_t count, capacity;
} sim_heap_t;

/* SIM_OK or SIM_ERROR_NO_MEMORY. */
int sim_heap_push(sim_heap_t *heap, double key, uint32_t job);
/* Requires count > 0. */
sim_heap_entry_t sim_heap_pop(sim_heap_t *heap);
static inline double sim_heap_top_key(const sim_heap_t *heap, double empty)
{
    return heap->count ? heap->items[0].key : empty;
}
void sim_heap_free(sim_heap_t *heap);

/* One GPU under processor sharing. The GPU parts running on it progress at rate 1/k each
 * (k = how many run). Instead of recomputing every finish time when k changes, the GPU keeps
 * a virtual clock that advances at rate 1/k: a part of work w that starts when the virtual
 * clock reads v finishes when it reads v + w, whatever happens in between.
 * With fcfs set (--gpu-share fcfs) the parts run one at a time, whole, in the order they were
 * started (simgpu's engine: one kernel at a time); the key is then the real finish time. */
typedef struct sim_gpu_s {
    bool fcfs;
    double virtual_s; /* work each running part has received since the GPU started */
    double updated_s; /* simulated time virtual_s refers to */
    double busy_s;    /* simulated time with at least one part running */
    double tail_s;    /* fcfs: when the last part queued finishes */
    sim_heap_t parts; /* key: virtual finish time (fcfs: real finish time) */
} sim_gpu_t;

/* Brings the virtual clock to now_s (now_s >= updated_s). */
void sim_gpu_advance(sim_gpu_t *gpu, double now_s);
/* A GPU part of work_s (> 0) seconds alone starts at now_s. SIM_OK or SIM_ERROR_NO_MEMORY. */
int sim_gpu_start(sim_gpu_t *gpu, double now_s, uint32_t job, double work_s);
/* Simulated time of the next part to finish, or `empty` when none runs. */
double sim_gpu_next_finish_s(const sim_gpu_t *gpu, double empty);
/* Removes the part that finishes first (call at its finish time); returns its job. */
uint32_t sim_gpu_finish(sim_gpu_t *gpu, double now_s);
void sim_gpu_free(sim_gpu_t *gpu);


/* Admission books of one GPU (admit.c). */
typedef struct sim_gpu_books_s {
    uint64_t charged_bytes, largest_lane_bytes, capacity_bytes;
    size_t jobs;
} sim_gpu_books_t;

/* ---- the engine: shared by sim.c (iterations, events, set-up) and admit.c (admission) ---- */

typedef enum sim_mode_e { MODE_LANES, MODE_EXCLUSIVE, MODE_MPS } sim_mode_t;

typedef enum sim_phase_e {
    PHASE_PENDING, /* not submitted yet */
    PHASE_WAITING, /* submitted, not admitted */
    PHASE_READY,   /* admitted, at an iteration boundary */
    PHASE_HOST,    /* in an iteration, lane held: switch cost and host part */
    PHASE_HOST_UNHELD, /* --lane-hold gpu: host part, lane not held */
    PHASE_SWITCH,  /* --lane-hold gpu: lane taken, paying the switch cost */
    PHASE_GPU,     /* in an iteration: GPU part */
    PHASE_DONE,
    PHASE_REFUSED,
} sim_phase_t;

typedef struct sim_job_s {
    const sim_job_spec_t *spec;
    sim_job_result_t *out;
    policy_job_t view; /* view.id = index + 1: the id the lane manager and policy know */
    sim_phase_t phase;
    bool holds_lane; /* granted by lanes_grant, not yielded yet */
    int gpu;
    double iteration_start_s;
    double measured_s; /* sum of its iterations' durations */
} sim_job_t;

typedef struct sim_engine_s {
    const sim_config_t *config;
    sim_result_t *result;
    sim_mode_t mode;
    policy_t policy;
    lanes_t *lanes;
    sim_job_t *jobs; /* submission order */
    size_t count, next_arrival, unfinished;
    size_t *waiting; /* indices into jobs, submission order */
    size_t waiting_count;
    sim_heap_t host_ends; /* key: end of the job's host part */
    sim_gpu_t *gpus;
    uint64_t *mps_used_bytes; /* mps: sum of P + E per GPU */
    size_t *gpu_jobs;         /* mps: jobs per GPU */
    uint64_t *lane_last_job;  /* by lane id: the job that ran the lane's last iteration */
    size_t lane_slots;
    uint32_t *touched; /* lanes to offer to the policy after a layout change */
    size_t touched_count, touched_capacity;
    /* scratch for admission and picks */
    policy_job_t *views;
    size_t *order, *candidates;
    lanes_request_t *requests;
    lanes_status_t *statuses;
    uint64_t *members;
    sim_gpu_books_t *books;
    lanes_lane_info_t *lane_infos;
    size_t lane_info_capacity;
    size_t resident;
    double now_s;
    int error;
    char *err;
    size_t err_size;
} sim_engine_t;

/* Records the first error (message in e->err) and returns its code. */
__attribute__((format(printf, 3, 4))) int sim_fail(sim_engine_t *e, int code, const char *fmt,
                                                   ...);
static inline uint64_t sim_to_ns(double seconds)
{
    return seconds <= 0 ? 0 : (uint64_t)llround(seconds * 1e9);
}

static inline sim_job_t *sim_job_by_id(sim_engine_t *e, uint64_t id)
{
    return id >= 1 && id <= e->count ? &e->jobs[id - 1] : NULL;
}

/* sim.c */
/* The admitted job is at an iteration boundary (not holding its lane): runnable, or (mps,
 * --lane-hold gpu) its next iteration starts. */
void sim_at_boundary(sim_engine_t *e, sim_job_t *job);
/* Offers every lane touched since the last call to the policy. */
void sim_schedule_touched(sim_engine_t *e);

/* admit.c */
/* Remembers a lane to offer to the policy once the layout settles. */
int sim_touch_lane(sim_engine_t *e, uint32_t lane);
/* lanes_config_t.on_change: follows job moves. */
void sim_on_lane_change(void *context, const lanes_change_t *change);
/* Offers the waiting jobs to the lane manager (or the mps books) in the policy's order. */
void sim_admit(sim_engine_t *e);

#endif
