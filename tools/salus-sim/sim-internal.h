/* salus-sim internals shared by sim.c, admit.c and share.c: the event heap, the
 * processor-sharing model of one GPU and the engine's state. Not included by the CLI. */
#ifndef SALUS_TOOLS_SIM_INTERNAL_H
#define SALUS_TOOLS_SIM_INTERNAL_H

#include "sim.h"

#include "sched_core.h"

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
    /* Preemption at the gate (a policy with gate_preemption, processor sharing only): the
     * parts of latency-critical jobs (lc[job]) run one after the other in the order they
     * start (lc_parts, keyed by their real finish; lc_tail_s: when the last one queued
     * finishes) and the best-effort parts (parts) stop while any is queued. When the first
     * one starts, the best-effort parts running finish the kernel each has in flight first
     * (kernel_s[job], at most what is left of the part; their sum, at rate 1):
     * drain_until_s is when that is done; until then the best-effort parts go on and the
     * latency-critical ones wait. */
    bool gate;
    const bool *lc;
    const double *kernel_s;
    sim_heap_t lc_parts;
    double lc_tail_s;
    double drain_until_s;
} sim_gpu_t;

/* Brings the virtual clock to now_s (now_s >= updated_s). */
void sim_gpu_advance(sim_gpu_t *gpu, double now_s);
/* A GPU part of work_s (> 0) seconds alone starts at now_s. SIM_OK or SIM_ERROR_NO_MEMORY. */
int sim_gpu_start(sim_gpu_t *gpu, double now_s, uint32_t job, double work_s);
/* Simulated time of the next part to finish, or `empty` when none runs. */
double sim_gpu_next_finish_s(const sim_gpu_t *gpu, double empty);
/* Removes the part that finishes first (call at its finish time); returns its job. */
uint32_t sim_gpu_finish(sim_gpu_t *gpu, double now_s);
/* Parts running (both classes). */
static inline size_t sim_gpu_parts(const sim_gpu_t *gpu)
{
    return gpu->parts.count + gpu->lc_parts.count;
}
void sim_gpu_free(sim_gpu_t *gpu);


/* ---- the engine: sim.c (iterations, events, set-up) and admit.c (the core's effects, the
 * mps baseline) ---- */

typedef enum sim_mode_e { MODE_LANES, MODE_EXCLUSIVE, MODE_MPS } sim_mode_t;

typedef enum sim_phase_e {
    PHASE_PENDING, /* not submitted yet */
    PHASE_WAITING, /* submitted, not admitted */
    PHASE_READY,   /* admitted, at an iteration boundary */
    PHASE_HOST,    /* in an iteration, lane held: switch cost and host part */
    PHASE_HOST_UNHELD, /* --lane-hold gpu: host part, lane not held */
    PHASE_SWITCH,  /* --lane-hold gpu: lane taken, paying the switch cost */
    PHASE_GPU,     /* in an iteration: GPU part */
    PHASE_MEMORY,  /* lane held, waiting for its claim to grow to its P + E (a job of unknown
                      sizes whose claim is less than it needs: salusd's waiting mem_grow) */
    PHASE_DONE,
    PHASE_REFUSED,
    PHASE_FAILED,  /* out of its budget */
} sim_phase_t;

typedef struct sim_job_s {
    const sim_job_spec_t *spec;
    sim_job_result_t *out;
    uint64_t id; /* index + 1: the id the scheduling core knows */
    sim_phase_t phase;
    int gpu;
    uint32_t lane;
    uint64_t budget_bytes; /* the core's (ADMIT, BUDGET): its GPU parts need P + E of it */
    /* Not in sched_core_boundary_t's order on purpose: copied into one there, adjacent pairs
     * are read with one 16-byte load, which stalls on the two 8-byte stores of
     * end_iteration() just before (store forwarding; a measurable share of a run). */
    uint64_t iterations_done;
    uint64_t last_iteration_ns;
    uint64_t busy_ns; /* sum of its iterations' durations */
    double iteration_start_s;
    double ready_s; /* when it last stopped at a boundary (its turn wait starts) */
    double hold_start_s;  /* when it was last granted its lane */
    double host_s, gpu_s; /* its iterations' host and GPU parts (from the spec, once) */
} sim_job_t;

typedef struct sim_engine_s {
    const sim_config_t *config;
    sim_result_t *result;
    sim_mode_t mode;
    sched_core_t *core;         /* lanes and exclusive: the scheduling core salusd runs */
    /* the core's effects; an event sent while they are carried out appends its own after
     * them, which are carried out (depth first) and dropped before the walk goes on */
    sched_core_effects_t effects;
    sim_job_t *jobs; /* submission order */
    size_t count, next_arrival, unfinished;
    size_t *waiting; /* mps: indices into jobs, submission order */
    size_t waiting_count;
    sched_core_job_hints_t *arrivals; /* scratch: one instant's submissions */
    size_t *starting; /* admitted jobs whose first boundary is still to be reported */
    size_t starting_count;
    size_t starting_next; /* the next of them to start (a nested sim_apply_effects goes on
                             from there: a job that fails at its first GPU part leaves, and
                             its departure's effects are carried out inside that walk) */
    sim_heap_t host_ends; /* key: end of the job's host part */
    sim_gpu_t *gpus;
    bool *lc;          /* by job index: latency-critical (the gate's model, share.c) */
    double *kernel_s;  /* by job index: its kernels' size */
    uint64_t *mps_used_bytes; /* mps: sum of P + E per GPU */
    size_t *gpu_jobs;         /* mps: jobs per GPU */
    uint64_t *lane_last_job;  /* by lane id: the job that ran the lane's last iteration */
    size_t lane_slots;
    uint64_t *lane_members; /* scratch: a lane's job ids (turn-wait statistics) */
    bool queue_ranks; /* the policy ranks jobs by queue (read once: a run never switches it) */
    size_t resident;
    double now_s;
    int error;
    char *err;
    size_t err_size;
} sim_engine_t;

/* Records the first error (message in e->err) and returns its code. */
__attribute__((format(printf, 3, 4))) int sim_fail(sim_engine_t *e, int code, const char *fmt,
                                                   ...);
/* llround(seconds * 1e9) without the libm call (one per event): for 0 <= x < 2^53 the
 * truncation, its conversion back and the difference are exact, so this rounds half away
 * from zero exactly as llround does. */
static inline uint64_t sim_to_ns(double seconds)
{
    double x = seconds * 1e9;
    if (!(x > 0))
        return 0;
    if (x >= 9007199254740992.0) /* 2^53 */
        return (uint64_t)llround(x);
    uint64_t whole = (uint64_t)x;
    return whole + (x - (double)whole >= 0.5);
}

static inline sim_job_t *sim_job_by_id(sim_engine_t *e, uint64_t id)
{
    return id >= 1 && id <= e->count ? &e->jobs[id - 1] : NULL;
}

/* sim.c: the timing model */
/* The job starts an iteration (mps, --lane-hold gpu: no lane needed for its first part). */
void sim_start_iteration(sim_engine_t *e, sim_job_t *job, double switch_s);
/* The core granted the job its lane: switch cost (timing model), then its iteration (or, with
 * --lane-hold gpu, its GPU part). */
void sim_granted(sim_engine_t *e, sim_job_t *job, uint32_t lane);

/* admit.c: the adapter between the event heap and the scheduling core */
/* Applies the core's effects of the last event (e->effects from index `from` on), then
 * reports the first boundary of every job admitted meanwhile, until nothing is left to do. */
void sim_apply_effects(sim_engine_t *e, size_t from);
/* Jobs submitted at this instant (jobs[from..to)): to the core, or to the mps books. */
void sim_submit(sim_engine_t *e, size_t from, size_t to);
/* The job reached an iteration boundary (ready: it asks for its next turn). */
void sim_boundary(sim_engine_t *e, sim_job_t *job, bool ready);
/* The job finished its last iteration. */
void sim_job_done(sim_engine_t *e, sim_job_t *job);
/* The job's GPU part needs more than its budget can ever be: it fails (out of memory) and
 * leaves. */
void sim_job_failed(sim_engine_t *e, sim_job_t *job);
/* The job needs a budget of bytes (sched_core_job_wants); its effects are carried out. */
int sim_wants_memory(sim_engine_t *e, sim_job_t *job, uint64_t bytes);
/* Starts the GPU part of a job that holds its lane (after its host part or switch). */
void sim_start_gpu_part(sim_engine_t *e, sim_job_t *job);

#endif
