/* salus-sim: a discrete-event simulator that replays a job trace through the lane manager
 * (memory/lanes.h) and the scheduling policies (scheduler-policies/policy.h) that salusd
 * uses. Internal to tools/salus-sim (the CLI and tests/unit/check_sim.c include it).
 *
 * The model (README.md has the long version):
 *   - A job is `iterations` iterations of iter_ms each when alone on a GPU; each iteration is
 *     a host part ((1 - gpu_frac) * iter_ms: data loading, Python) followed by a GPU part
 *     (gpu_frac * iter_ms of GPU work).
 *   - Host parts overlap freely. The GPU parts running on one GPU share it by processor
 *     sharing: with k of them running, each progresses at rate 1/k.
 *   - Lane policies (every policy of the registry): jobs are admitted by lanes_admit_in_order
 *     in the policy's admission order; jobs of one lane take turns one iteration at a time
 *     (the policy's pick). By default (lane_hold_gpu_only, --lane-hold gpu, as salusd does) a
 *     lane is held only for the GPU part of an iteration: the host part runs without it, then
 *     the job waits for its turn; with --lane-hold iteration it is held for the whole
 *     iteration, host part included, as in Salus. A lane that switches from one job to
 *     another pays switch_s (lane held, GPU idle) before the GPU part (or, holding whole
 *     iterations, before the iteration) starts.
 *   - Baselines: "exclusive" (one job per GPU, strict FIFO admission, through the lane
 *     manager with max_jobs_per_gpu = 1) and "mps" (every job that fits by the sum of P + E
 *     runs at once as its own lane, FIFO order without head-of-line blocking).
 *
 * Time is simulated: nothing here reads a clock. Not thread-safe. */
#ifndef SALUS_TOOLS_SIM_H
#define SALUS_TOOLS_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* salus-sim's --switch-us default, microseconds: the p50 of a switch with 300 MiB of ephemeral
 * memory per iteration under salusd --lane-memory shared (one set of chunks per lane: a switch
 * moves no memory), --lane-hold gpu, on a GPU with room for both jobs: the row "with the memory
 * hand-over" of `benchmarks/switch-latency.sh --switches 3000 --no-synth` (14.3 us; 9.2-17.2 us
 * in that run's other shared rows with memory; 11.9 us in a second run of that row; 13.1 and
 * 13.5 us in benchmarks/README.md's two runs of 10,000 switches). Measured
 * on simgpu, so it is the host side of a switch (the daemon's round trip); on a real GPU nothing
 * of a switch is device work with shared lane memory. With --lane-memory fresh (salusd's default)
 * the same row costs 314 us p50 (a 300 MiB chunk created, mapped, unmapped): run with
 * --switch-us 314 for that. sim_config_default keeps 0, a switch without cost, which the unit
 * tests reason on. */
#define SIM_SWITCH_US_DEFAULT 14

#define SIM_TRACE_HEADER \
    "job_id,submit_s,iterations,iter_ms,gpu_frac,persistent_mb,ephemeral_mb,priority"
/* The header with the classes' two columns (latency_target_ms: > 0 a latency-critical job,
 * empty or 0 best-effort; kernel_ms: the size of its GPU part's kernels, empty or 0 the whole
 * GPU part as one): rows may then have 8 to 10 fields. */
#define SIM_TRACE_HEADER_CLASSES SIM_TRACE_HEADER ",latency_target_ms,kernel_ms"

/* Return codes of the sim_* functions. */
enum {
    SIM_OK = 0,
    SIM_ERROR_MALFORMED = -1, /* trace or argument invalid; err names FILE:LINE */
    SIM_ERROR_NO_MEMORY = -2,
    SIM_ERROR_INTERNAL = -3, /* the lane manager or the model disagreed with itself */
    SIM_ERROR_IO = -4,
};

/* One row of the trace. */
typedef struct sim_job_spec_s {
    uint64_t trace_id; /* the job_id column */
    unsigned line;     /* line number in the trace file */
    double submit_s;
    uint64_t iterations;
    double iteration_ms; /* one iteration alone on the GPU */
    double gpu_fraction; /* part of it the GPU is busy, 0..1 */
    uint64_t persistent_bytes;
    uint64_t ephemeral_bytes;
    int32_t priority; /* 0 when the column is empty */
    double latency_target_ms; /* > 0: latency-critical (each iteration a request); 0: not */
    double kernel_ms;         /* its GPU part in kernels of this size; 0: one kernel */
} sim_job_spec_t;

typedef struct sim_trace_s {
    sim_job_spec_t *jobs; /* in file order */
    size_t count, capacity;
} sim_trace_t;

/* Parses a whole trace. Blank lines and lines starting with '#' are skipped; the first other
 * line must be SIM_TRACE_HEADER. On SIM_ERROR_MALFORMED err holds "NAME:LINE: reason".
 * The trace is empty (not freed) on entry and must be freed with sim_trace_free. */
int sim_trace_read(FILE *in, const char *name, sim_trace_t *trace, char *err, size_t err_size);
int sim_trace_load(const char *path, sim_trace_t *trace, char *err, size_t err_size);
void sim_trace_free(sim_trace_t *trace);

typedef struct sim_config_s {
    const char *policy; /* a registry policy name, "exclusive" or "mps" */
    unsigned gpus;
    uint64_t gpu_memory_bytes;
    double switch_s; /* cost of a lane switching from one job to another */
    /* Hints the policies see before a job has run: iterations_expected from the trace and its
     * alone iteration time as mean_iteration_ns (Salus's profiles). false: 0 / unmeasured. */
    bool hints;
    /* With hints: only iterations_expected, no iteration time (mean_iteration_ns 0 until
     * measured), as in salusd, whose jobs hint their iteration count (salusctl run
     * --iterations) but not their iteration time. */
    bool hints_iterations_only;
    /* Jobs of unknown sizes (no hints): the least claim they are admitted with and the most a
     * claim may hold (0: no cap), as salusd's --provisional-min / --provisional-max
     * (memory/lanes.h, "Learned sizes"); defaults the lane manager's. */
    uint64_t provisional_min_bytes, provisional_max_bytes;
    /* true (default, what salusd does): a lane is held only for the GPU part of an iteration
     * (and the switch before it); the host part runs without the lane, and the time a job
     * reports to the policies is the time it held its lane. false (--lane-hold iteration, as
     * Salus and salusd before it released lanes at quiescent points): for the whole
     * iteration, host part included. */
    bool lane_hold_gpu_only;
    /* false (default): GPU parts running at once share the GPU (processor sharing, as a GPU
     * time-slicing contexts does). true: one at a time, whole, in start order (simgpu's
     * engine, which runs one kernel at a time; salus-synth's GPU part is one kernel). */
    bool gpu_fcfs;
    /* Optional: told each grant of the scheduling core (the job's trace id, the time), in
     * order; the tests compare grant sequences with it. */
    void (*on_grant)(void *context, uint64_t trace_id, double now_s);
    void *on_grant_context;
} sim_config_t;

typedef struct sim_job_result_s {
    bool refused;      /* larger than any GPU: never admitted */
    bool failed;       /* ran out of its budget (a job of unknown sizes whose claim was less
                          than it needs): CUDA_ERROR_OUT_OF_MEMORY in salusd */
    double admitted_s; /* admission time */
    double started_s;  /* start of the first iteration */
    double finished_s;
    uint64_t switches; /* times a lane switched to this job */
    /* a latency-critical job: each request's latency (its iteration from the end of its host
     * part, when it needs the GPU, to the end of its GPU part), in completion order */
    double *latencies_s;
    size_t requests, latency_capacity;
} sim_job_result_t;

typedef struct sim_result_s {
    size_t jobs_completed;
    size_t jobs_refused;
    size_t jobs_failed; /* out of memory (sim_job_result_t.failed) */
    double avg_jct_s, median_jct_s, p95_jct_s;
    double makespan_s;  /* last finish - first submission */
    double utilization; /* GPU-busy time / (makespan x gpus) */
    double mean_wait_s; /* submission -> start of the first iteration, mean */
    double gpu_busy_s;  /* summed over GPUs */
    uint64_t iterations;
    double iterations_per_s; /* throughput: iterations of all jobs / makespan */
    uint64_t switches;
    size_t peak_jobs_resident; /* most jobs admitted at once, all GPUs */
    /* Turn waits (lanes): the longest a job waited at a boundary for its lane; and, when the
     * policy ranks jobs by queue (LAS), the longest wait of a job still in a lower queue
     * (rank >= 1) seen when its lane was granted to another job (the starvation bound:
     * promotion keeps it under the policy's promotion time). */
    double max_turn_wait_s;
    bool has_lower_queue_wait;
    double max_lower_queue_wait_s;
    sim_job_result_t *jobs;    /* per trace row (trace order) */
    size_t job_count;
} sim_result_t;

void sim_config_default(sim_config_t *config);
/* true for registry policies and the baselines. */
bool sim_policy_known(const char *name);
/* Writes the accepted policy names, separated by `separator`. */
void sim_policy_names(FILE *out, const char *separator);

/* Runs the trace. SIM_OK, or an error with err set. result must be freed with
 * sim_result_free (also after an error). */
int sim_run(const sim_trace_t *trace, const sim_config_t *config, sim_result_t *result,
            char *err, size_t err_size);
void sim_result_free(sim_result_t *result);

/* Fills the summary fields of result from result->jobs and the trace. */
int sim_result_summarise(const sim_trace_t *trace, sim_result_t *result);
/* q in [0, 1]; linear interpolation between closest ranks of sorted[0..count). */
double sim_quantile(const double *sorted, size_t count, double q);

/* Output (report.c). */
void sim_report_text(FILE *out, const sim_config_t *config, const sim_result_t *result);
void sim_report_json(FILE *out, const sim_config_t *config, const sim_result_t *result);
int sim_report_jobs_csv(FILE *out, const sim_trace_t *trace, const sim_result_t *result);
/* Per latency-critical job: job_id,requests,p50_ms,p95_ms,p99_ms,target_ms,over_target. */
int sim_report_latency_csv(FILE *out, const sim_trace_t *trace, sim_result_t *result);

#endif
