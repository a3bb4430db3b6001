/* FAIR: equal GPU time among the jobs of a lane: least attained service first.
 *
 * Service is the job's attained_ns plus a start credit given when it arrives: the least
 * service among the jobs the policy knows in the same lane. Without it a newcomer (attained
 * 0) would hold the lane until it had caught up with jobs that ran for hours; with it, the
 * lane's time is shared equally from the newcomer's arrival on. */
#include "policy-internal.h"

#include <stdlib.h>

typedef struct fair_state_s {
    policy_records_t records; /* lane, value: last known service, credit: start credit */
} fair_state_t;

static void *fair_init(const policy_config_t *config)
{
    (void)config;
    return calloc(1, sizeof(fair_state_t));
}

static void fair_fini(void *opaque)
{
    fair_state_t *state = opaque;
    policy_records_free(&state->records);
    free(state);
}

static void fair_job_arrived(void *opaque, const policy_job_t *job, uint64_t now_ns)
{
    fair_state_t *state = opaque;
    bool found = false;
    uint64_t least = 0;
    (void)now_ns;
    if (policy_records_find(&state->records, job->id))
        return; /* known already: keep its credit */
    for (size_t i = 0; i < state->records.count; i++) {
        const policy_record_t *peer = &state->records.items[i];
        if (peer->lane == job->lane && (!found || peer->value < least)) {
            least = peer->value;
            found = true;
        }
    }
    policy_record_t *record = policy_records_get(&state->records, job->id);
    if (!record) /* out of memory: the job simply starts without credit */
        return;
    record->lane = job->lane;
    record->credit = least > job->attained_ns ? least - job->attained_ns : 0;
    record->value = job->attained_ns + record->credit;
}

static void fair_job_left(void *opaque, uint64_t job_id, uint64_t now_ns)
{
    fair_state_t *state = opaque;
    (void)now_ns;
    policy_records_remove(&state->records, job_id);
}

/* The job's attained service plus its start credit (record: the job's, or NULL). */
static uint64_t service_with(const policy_record_t *record, const policy_job_t *job)
{
    uint64_t credit = record ? record->credit : 0;
    return job->attained_ns > UINT64_MAX - credit ? UINT64_MAX : job->attained_ns + credit;
}

static uint64_t fair_service_ns(const void *opaque, const policy_job_t *job)
{
    const fair_state_t *state = opaque;
    return service_with(policy_records_find(&state->records, job->id), job);
}

static void fair_iteration_done(void *opaque, const policy_job_t *job, uint64_t duration_ns,
                                uint64_t now_ns)
{
    fair_state_t *state = opaque;
    (void)duration_ns;
    (void)now_ns;
    policy_record_t *record = policy_records_find(&state->records, job->id);
    if (record) {
        record->lane = job->lane;
        record->value = service_with(record, job);
    }
}

static int fair_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                     uint64_t now_ns)
{
    (void)now_ns;
    return policy_pick_lowest(state, fair_service_ns, lane, jobs, count);
}

const policy_ops_t policy_fair_ops = {
    .name = "fair",
    .description = "equal GPU time within a lane (least attained service first)",
    .init = fair_init,
    .fini = fair_fini,
    .job_arrived = fair_job_arrived,
    .job_left = fair_job_left,
    .iteration_done = fair_iteration_done,
    .pick = fair_pick,
};
