/* Classes (sched_core.h, "Classes"): the admission check of a latency-critical job and the
 * gate roles the core hands out under a policy with gate_preemption. */
#include "sched_core_internal.h"

/* The sum of the mean iteration times of the latency-critical jobs admitted on gpu, and
 * the tightest of their targets (UINT64_MAX when none). */
static uint64_t lc_load(const sched_core_t *core, int gpu, uint64_t *tightest)
{
    uint64_t sum = 0;
    *tightest = UINT64_MAX;
    for (size_t i = 0; i < core->admitted_count; i++) {
        const core_job_t *job = find(core, core->admitted_ids[i]);
        if (!job || !job->latency_target_ns || job->gpu != gpu)
            continue;
        sum += job->mean_iteration_ns;
        if (job->latency_target_ns < *tightest)
            *tightest = job->latency_target_ns;
    }
    return sum;
}

const char *core_lc_check(sched_core_t *core, core_job_t *job)
{
    if (!job->latency_target_ns || !job->mean_iteration_ns)
        return NULL; /* best-effort, or nothing known to check */
    if (job->mean_iteration_ns > job->latency_target_ns)
        return "latency target: its iteration alone takes longer than its target";
    int best = -1;
    uint64_t best_sum = UINT64_MAX;
    for (size_t g = 0; g < core->gpu_count; g++) {
        int gpu = core->gpus[g].gpu;
        if (job->only_gpu != LANES_ANY_GPU && job->only_gpu != gpu)
            continue;
        uint64_t tightest, sum = lc_load(core, gpu, &tightest) + job->mean_iteration_ns;
        if (sum > job->latency_target_ns || sum > tightest)
            continue;
        if (sum < best_sum) {
            best_sum = sum;
            best = gpu;
        }
    }
    if (best < 0)
        return "latency target: no GPU can serve it beside the latency-critical jobs there "
               "(the sum of their iteration times would exceed a target)";
    if (best_sum > job->mean_iteration_ns) /* others there: keep it where it fits */
        job->only_gpu = best;
    return NULL;
}

/* Whether an admitted latency-critical job is on gpu; *lane_taken: one of them is in lane. */
static bool gpu_has_lc(const sched_core_t *core, int gpu, uint32_t lane, bool *lane_taken)
{
    bool any = false;
    *lane_taken = false;
    for (size_t i = 0; i < core->admitted_count; i++) {
        const core_job_t *job = find(core, core->admitted_ids[i]);
        if (!job || !job->latency_target_ns || job->gpu != gpu)
            continue;
        any = true;
        if (job->lane == lane)
            *lane_taken = true;
    }
    return any;
}

void core_gates_settle(sched_core_t *core)
{
    if (!core->gates_dirty)
        return;
    core->gates_dirty = false;
    bool preempts = core->policy.ops->gate_preemption;
    size_t gated = 0;
    for (size_t i = 0; i < core->admitted_count; i++) {
        core_job_t *job = find(core, core->admitted_ids[i]);
        if (!job)
            continue;
        uint8_t role = SCHED_CORE_GATE_NONE;
        bool lane_taken = false;
        if (preempts && job->latency_target_ns)
            role = SCHED_CORE_GATE_LC;
        else if (preempts && !job->group_id && gpu_has_lc(core, job->gpu, job->lane, &lane_taken) &&
                 !lane_taken)
            role = SCHED_CORE_GATE_PREEMPTIBLE;
        gated += role != SCHED_CORE_GATE_NONE;
        if (role == job->gate)
            continue;
        job->gate = role;
        emit(core, (sched_core_effect_t){.kind = SCHED_CORE_GATE, .job_id = job->id,
                                         .gpu = job->gpu, .lane = job->lane, .gate = role});
    }
    core->gated_jobs = gated;
}
