/* PACK: admit as many jobs as fit (no job limit, a waiting job never blocks others), keep
 * every lane busy (any runnable job is picked), and take turns round-robin by iteration
 * within a lane: the job whose last iteration ended longest ago goes next; a job that has
 * not run yet goes first. */
#include "policy-internal.h"

#include <stdlib.h>

typedef struct pack_state_s {
    policy_records_t records; /* value: sequence number of the job's last iteration */
    uint64_t sequence;
} pack_state_t;

static void *pack_init(const policy_config_t *config)
{
    (void)config;
    return calloc(1, sizeof(pack_state_t));
}

static void pack_fini(void *opaque)
{
    pack_state_t *state = opaque;
    policy_records_free(&state->records);
    free(state);
}

static void pack_job_left(void *opaque, uint64_t job_id, uint64_t now_ns)
{
    pack_state_t *state = opaque;
    (void)now_ns;
    policy_records_remove(&state->records, job_id);
}

static void pack_iteration_done(void *opaque, const policy_job_t *job, uint64_t duration_ns,
                                uint64_t now_ns)
{
    pack_state_t *state = opaque;
    (void)duration_ns;
    (void)now_ns;
    policy_record_t *record = policy_records_get(&state->records, job->id);
    if (record) /* out of memory: the job keeps its turn; nothing breaks */
        record->value = ++state->sequence;
}

static uint64_t pack_last_turn(const void *opaque, const policy_job_t *job)
{
    const pack_state_t *state = opaque;
    const policy_record_t *record = policy_records_find(&state->records, job->id);
    return record ? record->value : 0;
}

static int pack_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                     uint64_t now_ns)
{
    (void)now_ns;
    return policy_pick_lowest(state, pack_last_turn, lane, jobs, count);
}

const policy_ops_t policy_pack_ops = {
    .name = "pack",
    .description = "admit as many as fit, round-robin by iteration within a lane",
    .init = pack_init,
    .fini = pack_fini,
    .job_left = pack_job_left,
    .iteration_done = pack_iteration_done,
    .pick = pack_pick,
};
