/* SRTF: shortest remaining time first, decided afresh at every iteration boundary, so a short
 * job that arrives while a long one runs gets the lane at the long job's next boundary.
 *
 * remaining = iterations left x mean iteration time. Iterations left = expected - done when
 * the count is known (and not yet overrun); otherwise the job is assumed to run as long again
 * as it has so far (max(done, 1) iterations left). A job without a measured iteration time
 * uses config.default_iteration_ns; when that is 0 its remaining time counts as 0, so it runs
 * one iteration first and gets measured. Waiting jobs are admitted in the same order. */
#include "policy-internal.h"

#include <stdlib.h>

typedef struct srtf_state_s {
    policy_config_t config;
} srtf_state_t;

static void *srtf_init(const policy_config_t *config)
{
    srtf_state_t *state = calloc(1, sizeof(*state));
    if (state && config)
        state->config = *config;
    return state;
}

static void srtf_fini(void *state)
{
    free(state);
}

static uint64_t srtf_remaining_ns(const void *opaque, const policy_job_t *job)
{
    const srtf_state_t *state = opaque;
    uint64_t mean_ns = job->mean_iteration_ns ? job->mean_iteration_ns
                                              : state->config.default_iteration_ns;
    uint64_t left;
    if (job->iterations_expected > job->iterations_done)
        left = job->iterations_expected - job->iterations_done;
    else
        left = job->iterations_done ? job->iterations_done : 1;
    if (mean_ns && left > UINT64_MAX / mean_ns)
        return UINT64_MAX;
    return left * mean_ns;
}

static int srtf_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                     uint64_t now_ns)
{
    (void)now_ns;
    return policy_pick_lowest(state, srtf_remaining_ns, lane, jobs, count);
}

static void srtf_admission_order(void *state, const policy_job_t *waiting, size_t count,
                                 size_t *order, uint64_t now_ns)
{
    (void)now_ns;
    policy_order_by_key(state, srtf_remaining_ns, waiting, count, order);
}

const policy_ops_t policy_srtf_ops = {
    .name = "srtf",
    .description = "shortest remaining time first, preempting at iteration boundaries",
    .init = srtf_init,
    .fini = srtf_fini,
    .pick = srtf_pick,
    .admission_order = srtf_admission_order,
};
