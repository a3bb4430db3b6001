/* FIFO: the no-sharing baseline. One job per GPU (max_jobs_per_gpu = 1) admitted strictly in
 * arrival order (a job that does not fit blocks those behind it). Should a lane hold several
 * jobs (just after a switch from a sharing policy), the earliest arrival runs until it ends. */
#include "policy-internal.h"

#include <stdlib.h>

typedef struct fifo_state_s {
    policy_config_t config;
} fifo_state_t;

static void *fifo_init(const policy_config_t *config)
{
    fifo_state_t *state = calloc(1, sizeof(*state));
    if (state && config)
        state->config = *config;
    return state;
}

static void fifo_fini(void *state)
{
    free(state);
}

static uint64_t fifo_key(const void *state, const policy_job_t *job)
{
    (void)state;
    return job->arrival_ns;
}

static int fifo_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                     uint64_t now_ns)
{
    (void)now_ns;
    return policy_pick_lowest(state, fifo_key, lane, jobs, count);
}

const policy_ops_t policy_fifo_ops = {
    .name = "fifo",
    .description = "one job per GPU in arrival order (no sharing)",
    .max_jobs_per_gpu = 1,
    .admission_blocks = true,
    .init = fifo_init,
    .fini = fifo_fini,
    .pick = fifo_pick,
};
