/* Scheduling policies: one const vtable per policy, a registry, and a run-time switch.
 *
 * A policy decides (a) which job of a lane runs its next iteration and (b) in which order
 * waiting jobs are offered to the lane manager. It is pure logic: no I/O, no clock of its own
 * (every hook gets now_ns from the caller), no threads, no blocking. Its one caller is the
 * scheduling core (scheduler-core/sched_core.h), which salusd (salusd/sched/gpu_sched.c) and
 * the trace simulator (tools/salus-sim) both drive. Nothing here is thread-safe: the thread
 * that owns the core (salusd's event loop, the simulator's) owns its policy instance.
 *
 * The job view (policy_job_t) belongs to the caller, who keeps it current before each call
 * (in particular, before iteration_done: iterations_done, mean_iteration_ns and attained_ns
 * already include the iteration being reported). A policy may keep its own per-job state keyed
 * by id; it never keeps pointers to views.
 *
 * Callers use the static inline wrappers below, never the raw function pointers. */
#ifndef SALUS_SCHEDULER_POLICIES_POLICY_H
#define SALUS_SCHEDULER_POLICIES_POLICY_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct policy_config_s {
    /* SRTF: iteration time assumed for a job not measured yet. 0 (default): an unmeasured job
     * counts as having no remaining time, so it runs one iteration first and gets measured. */
    uint64_t default_iteration_ns;
    /* slo: the policy that orders the best-effort jobs under the latency-critical ones
     * ("fair" when NULL; any policy but slo itself). */
    const char *slo_base;
    /* slo: the starvation bound, the most latency-critical iterations a lane grants in a row
     * while a best-effort job of it is runnable (0: POLICY_SLO_DEFAULT_LC_RUN_MAX, 8). */
    uint32_t slo_lc_run_max;
} policy_config_t;

#define POLICY_SLO_DEFAULT_LC_RUN_MAX 8u

typedef struct policy_job_s {
    uint64_t id;
    uint64_t arrival_ns;          /* when the job came to the core (registered with salusd;
                                   * its submission in a trace) */
    uint64_t iterations_done;
    uint64_t iterations_expected; /* from hints; 0 = unknown */
    uint64_t mean_iteration_ns;   /* measured; 0 = not measured yet */
    uint64_t attained_ns;         /* GPU time the job has had (sum of its iterations) */
    int32_t priority;             /* higher runs first when the policy's own order ties */
    uint32_t lane;                /* the lane manager's lane id */
    bool runnable;                /* waiting at an iteration boundary for a grant */
    uint64_t latency_target_ns;   /* latency-critical: its target per iteration (a request);
                                     0: best-effort */
} policy_job_t;

typedef struct policy_ops_s {
    /* Unique, lower case; what `salusctl policy NAME` takes. */
    const char *name;
    const char *description;

    /* Admission properties, read by the scheduling core and given to the lane manager:
     * max_jobs_per_gpu: admitted jobs per GPU (0 = no limit; FIFO: 1, i.e. no sharing).
     * admission_blocks: a waiting job that does not fit blocks the jobs behind it in
     * admission order (FIFO: true; lanes_admit_in_order's strict_order). */
    uint32_t max_jobs_per_gpu;
    bool admission_blocks;
    /* The core parks best-effort jobs at their next submission while a latency-critical job
     * of their GPU has work (sched_core.h, "Classes"); false: latency-critical jobs only go
     * first where the policy's own order puts them. */
    bool gate_preemption;

    /* Required. Called by policy_init / policy_switch, from the scheduling loop. Returns the
     * policy's state, or NULL on failure (then the previous policy stays). config may be
     * NULL (defaults). Never blocks. */
    void *(*init)(const policy_config_t *config);

    /* Required. Frees the state; called once, after the policy has been swapped out. */
    void (*fini)(void *state);

    /* Optional. The job was admitted into a lane (or, after a switch, is already running).
     * May be called for an id the policy already knows (treat as an update). Never blocks. */
    void (*job_arrived)(void *state, const policy_job_t *job, uint64_t now_ns);

    /* Optional. The job left its lane for good (finished, killed, refused). The id may be
     * unknown to the policy. After this call the job is never passed to pick again. */
    void (*job_left)(void *state, uint64_t job_id, uint64_t now_ns);

    /* Optional. The job reached an iteration boundary after an iteration of duration_ns;
     * its view is already updated. Called by the loop before the lane's next pick. */
    void (*iteration_done)(void *state, const policy_job_t *job, uint64_t duration_ns,
                           uint64_t now_ns);

    /* Required. Chooses which job of `lane` runs the next iteration, among jobs[0..count):
     * only one whose lane == lane and runnable is true. Returns its index, or -1 when there
     * is none. Called by the loop whenever the lane is free (after an iteration, an arrival,
     * a departure). Must not assume that the chosen job runs: it may be called several times
     * for one decision, so state changes belong in iteration_done. Never blocks. */
    int (*pick)(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                uint64_t now_ns);

    /* Optional (default: arrival order, then priority, then id). Orders the waiting jobs for
     * admission: fills order[0..count) with a permutation of 0..count-1, first offered first.
     * Called by the loop before it retries admission. Never blocks. */
    void (*admission_order)(void *state, const policy_job_t *waiting, size_t count,
                            size_t *order, uint64_t now_ns);

    /* Optional. What the policy learned and wants back after a restart of salusd (salusd
     * keeps it in its state directory, through sched_core_policy_save_state; the simulator
     * never calls these). save_state writes at most cap bytes into buf and returns the length
     * written, or a negative errno (-ENOSPC when cap is too small). load_state gets bytes that an earlier save_state of a
     * policy of the same name wrote (the caller has already checked the file's integrity, not
     * its meaning): it validates them and restores its state, or returns a negative errno and
     * leaves its state as init made it. Neither blocks. */
    long (*save_state)(void *state, void *buf, size_t cap);
    int (*load_state)(void *state, const void *buf, size_t len);

    /* Optional. The policy's rank of one job, shown by `salusctl ps --json` and the metrics:
     * one number, named rank_name (LAS: "queue", lower runs first; Gittins: "index", higher
     * runs first). job is the caller's current view; now_ns the caller's clock. Called when
     * salusd renders ps or /metrics or the simulator gathers statistics, never to schedule; it
     * must not change the policy's state. Never blocks. rank_name is set when job_rank is. */
    const char *rank_name;
    double (*job_rank)(void *state, const policy_job_t *job, uint64_t now_ns);
} policy_ops_t;

/* A running policy: its vtable and its state. */
typedef struct policy_s {
    const policy_ops_t *ops;
    void *state;
} policy_t;

/* Registry. Names compare case-insensitively; NULL when unknown. */
const policy_ops_t *policy_find(const char *name);
size_t policy_count(void);
const policy_ops_t *policy_at(size_t index); /* NULL past the end */

/* Starts a policy. 0, -ENOENT (unknown name) or -ENOMEM (init failed). */
int policy_init(policy_t *policy, const char *name, const policy_config_t *config);
/* Stops it (fini). Safe on a zeroed or already stopped policy_t. */
void policy_fini(policy_t *policy);
/* Switches at run time: the new policy's init runs first and the current jobs are announced
 * to it (job_arrived); only then is it swapped in and the old one finied. On failure the
 * current policy stays. 0, -ENOENT or -ENOMEM. */
int policy_switch(policy_t *policy, const char *name, const policy_config_t *config,
                  const policy_job_t *jobs, size_t count, uint64_t now_ns);
int policy_switch_ops(policy_t *policy, const policy_ops_t *ops, const policy_config_t *config,
                      const policy_job_t *jobs, size_t count, uint64_t now_ns);

/* The default admission order (arrival, then priority, then id). */
void policy_order_by_arrival(const policy_job_t *waiting, size_t count, size_t *order);

static inline const char *policy_name(const policy_t *policy)
{
    return policy->ops->name;
}

static inline uint32_t policy_max_jobs_per_gpu(const policy_t *policy)
{
    return policy->ops->max_jobs_per_gpu;
}

static inline bool policy_admission_blocks(const policy_t *policy)
{
    return policy->ops->admission_blocks;
}

static inline void policy_job_arrived(policy_t *policy, const policy_job_t *job, uint64_t now_ns)
{
    if (policy->ops->job_arrived)
        policy->ops->job_arrived(policy->state, job, now_ns);
}

static inline void policy_job_left(policy_t *policy, uint64_t job_id, uint64_t now_ns)
{
    if (policy->ops->job_left)
        policy->ops->job_left(policy->state, job_id, now_ns);
}

static inline void policy_iteration_done(policy_t *policy, const policy_job_t *job,
                                         uint64_t duration_ns, uint64_t now_ns)
{
    if (policy->ops->iteration_done)
        policy->ops->iteration_done(policy->state, job, duration_ns, now_ns);
}

static inline int policy_pick(policy_t *policy, uint32_t lane, const policy_job_t *jobs,
                              size_t count, uint64_t now_ns)
{
    return policy->ops->pick(policy->state, lane, jobs, count, now_ns);
}

static inline void policy_admission_order(policy_t *policy, const policy_job_t *waiting,
                                          size_t count, size_t *order, uint64_t now_ns)
{
    if (policy->ops->admission_order)
        policy->ops->admission_order(policy->state, waiting, count, order, now_ns);
    else
        policy_order_by_arrival(waiting, count, order);
}

/* -ENOTSUP when the policy keeps nothing across restarts. */
static inline long policy_save_state(policy_t *policy, void *buf, size_t cap)
{
    return policy->ops->save_state ? policy->ops->save_state(policy->state, buf, cap) : -ENOTSUP;
}

static inline int policy_load_state(policy_t *policy, const void *buf, size_t len)
{
    return policy->ops->load_state ? policy->ops->load_state(policy->state, buf, len) : -ENOTSUP;
}

/* The policy's rank of a job (job_rank): true and *rank set, or false when the policy has no
 * such view. */
static inline bool policy_job_rank(const policy_t *policy, const policy_job_t *job, uint64_t now_ns,
                                   double *rank)
{
    if (!policy->ops->job_rank)
        return false;
    *rank = policy->ops->job_rank(policy->state, job, now_ns);
    return true;
}

static inline const char *policy_rank_name(const policy_t *policy)
{
    return policy->ops->job_rank ? policy->ops->rank_name : NULL;
}

#endif
