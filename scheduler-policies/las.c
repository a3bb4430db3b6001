/* LAS: least attained service, discretised (Tiresias's multi-level queues). Needs no job
 * lengths: a job's queue follows the GPU time it has had (attained_ns), so new and short jobs
 * run before the long ones that have already had their share.
 *
 * Queue q holds the jobs whose attained service lies in [LAS_THRESHOLD_NS[q-1],
 * LAS_THRESHOLD_NS[q]); lower queues run first, FIFO within a queue (ties: priority, arrival,
 * id). Preemption happens only at iteration boundaries (pick runs at each one).
 *
 * Promotion (no starvation; policy_promoted, policy.c): a runnable job that has waited
 * POLICY_PROMOTE_AFTER_NS (10 min) since its last iteration ended (or since it arrived)
 * counts as queue 0 from then on, and keeps queue 0 until it has had one quantum
 * (POLICY_PROMOTION_QUANTUM_NS, 1 s: the first queue's width) more service; then it falls
 * back to the queue of its attained service and waits again. So no job stays in a lower queue
 * longer than the promotion time while it waits for a turn.
 *
 * Waiting jobs are admitted in the same order (a waiting job has attained nothing yet unless
 * it was switched in from another policy). */
#include "policy-internal.h"

#include <stdlib.h>

#define SECOND_NS 1000000000ull

/* Upper bounds of queues 0..LAS_QUEUES-2; the last queue is unbounded. */
/* Tuned on the simulator's mixed traces (benchmarks/README.md): geometric, x4 from 1 s. */
static const uint64_t LAS_THRESHOLD_NS[] = {1 * SECOND_NS,  4 * SECOND_NS,   16 * SECOND_NS,
                                            64 * SECOND_NS, 256 * SECOND_NS, 1024 * SECOND_NS};
#define LAS_QUEUES (sizeof(LAS_THRESHOLD_NS) / sizeof(LAS_THRESHOLD_NS[0]) + 1)

typedef struct las_state_s {
    policy_promoting_t promoting; /* first (policy_promoting_pick); records: promotion only */
} las_state_t;

uint32_t policy_las_queue_of(uint64_t attained_ns)
{
    uint32_t q = 0;
    while (q + 1 < LAS_QUEUES && attained_ns >= LAS_THRESHOLD_NS[q])
        q++;
    return q;
}

uint64_t policy_las_threshold_ns(uint32_t queue)
{
    return queue + 1 < LAS_QUEUES ? LAS_THRESHOLD_NS[queue] : UINT64_MAX;
}

uint64_t policy_las_promote_after_ns(void)
{
    return POLICY_PROMOTE_AFTER_NS;
}

/* The job's queue, promotion aside (policy_promoting_pick puts a promoted job in queue 0). */
static uint64_t las_key(const void *state, const policy_job_t *job)
{
    (void)state;
    return policy_las_queue_of(job->attained_ns);
}

static void *las_init(const policy_config_t *config)
{
    (void)config;
    las_state_t *state = calloc(1, sizeof(*state));
    if (state)
        state->promoting.key = las_key;
    return state;
}

static void las_fini(void *opaque)
{
    las_state_t *state = opaque;
    policy_records_free(&state->promoting.records);
    free(state);
}

static void las_job_arrived(void *opaque, const policy_job_t *job, uint64_t now_ns)
{
    las_state_t *state = opaque;
    policy_promotion_job_arrived(&state->promoting.records, job->id, now_ns);
}

static void las_job_left(void *opaque, uint64_t job_id, uint64_t now_ns)
{
    las_state_t *state = opaque;
    (void)now_ns;
    policy_records_remove(&state->promoting.records, job_id);
}

static void las_iteration_done(void *opaque, const policy_job_t *job, uint64_t duration_ns,
                               uint64_t now_ns)
{
    las_state_t *state = opaque;
    policy_promotion_job_iteration(&state->promoting.records, job, duration_ns, now_ns);
}

/* The job's queue at now_ns, promotion included. */
static double las_job_rank(void *opaque, const policy_job_t *job, uint64_t now_ns)
{
    las_state_t *state = opaque;
    return (double)policy_promoted_key(&state->promoting.records, state, las_key, job, now_ns);
}

const policy_ops_t policy_las_ops = {
    .name = "las",
    .description = "least attained service in 7 queues, FIFO within a queue, no job lengths",
    .rank_name = "queue",
    .init = las_init,
    .fini = las_fini,
    .job_arrived = las_job_arrived,
    .job_left = las_job_left,
    .iteration_done = las_iteration_done,
    .pick = policy_promoting_pick,
    .admission_order = policy_promoting_admission_order,
    .job_rank = las_job_rank,
};
