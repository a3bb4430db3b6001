/* Helpers shared by the policy files (not a public header). */
#ifndef SALUS_SCHEDULER_POLICIES_POLICY_INTERNAL_H
#define SALUS_SCHEDULER_POLICIES_POLICY_INTERNAL_H

#include "policy.h"

extern const policy_ops_t policy_fifo_ops;
extern const policy_ops_t policy_srtf_ops;
extern const policy_ops_t policy_pack_ops;
extern const policy_ops_t policy_fair_ops;
extern const policy_ops_t policy_las_ops;
extern const policy_ops_t policy_gittins_ops;
extern const policy_ops_t policy_slo_ops;


/* LAS's queues (las.c), exposed for its tests: the queue of an attained service (promotion
 * aside), the upper bound of a queue (UINT64_MAX for the last), the promotion wait. */
uint32_t policy_las_queue_of(uint64_t attained_ns);
uint64_t policy_las_threshold_ns(uint32_t queue);
uint64_t policy_las_promote_after_ns(void);

/* The Gittins index (gittins.c) of a job that has attained attained_ns, over the job sizes
 * sizes_ns[0..count) sorted ascending: sup over d > 0 of P(S - a <= d | S > a) /
 * E[min(S - a, d) | S > a], in 1/s. 0 when no size exceeds attained_ns. */
double policy_gittins_index(const uint64_t *sizes_ns, size_t count, uint64_t attained_ns);

/* A policy's ordering rule: a key per job, lower first. */
typedef uint64_t (*policy_key_fn)(const void *state, const policy_job_t *job);

/* Ties on the policy's key: higher priority, then earlier arrival, then lower id. */
int policy_compare_tiebreak(const policy_job_t *a, const policy_job_t *b);

/* Index of the runnable job of `lane` with the lowest key (ties: policy_compare_tiebreak),
 * or -1 when the lane has no runnable job. */
int policy_pick_lowest(const void *state, policy_key_fn key, uint32_t lane,
                       const policy_job_t *jobs, size_t count);

/* Fills order[0..count) with the jobs sorted by key (ties: policy_compare_tiebreak). */
void policy_order_by_key(const void *state, policy_key_fn key, const policy_job_t *jobs,
                         size_t count, size_t *order);

/* Per-job records a policy keeps, keyed by job id: an array sorted by id, with a hash index
 * (a pick looks records up for every member of a lane at every turn).
 * A pointer from find/get stays valid only until the next get or remove. */
typedef struct policy_record_s {
    uint64_t job_id;
    uint32_t lane;
    uint64_t value;  /* meaning is the policy's */
    uint64_t credit; /* meaning is the policy's */
    /* promotion against starvation (policy_promoted), for the policies that use it */
    uint64_t waiting_since_ns;  /* the end of the job's last iteration, or its arrival */
    uint64_t promoted_until_ns; /* attained service up to which a promotion lasts; 0: none */
} policy_record_t;

typedef struct policy_records_s {
    policy_record_t *items;
    size_t count, capacity;
    /* job id -> position + 1 (0: empty), open addressing, rebuilt when positions shift; NULL
     * when it could not be allocated (lookups then use the binary search) */
    size_t *index;
    size_t index_mask;
} policy_records_t;

policy_record_t *policy_records_find(const policy_records_t *records, uint64_t job_id);
/* Finds or adds (zeroed) the job's record; NULL when out of memory. */
policy_record_t *policy_records_get(policy_records_t *records, uint64_t job_id);
void policy_records_remove(policy_records_t *records, uint64_t job_id);
void policy_records_free(policy_records_t *records);

/* Promotion against starvation (LAS, Gittins; Tiresias's rule): a runnable job that has
 * waited POLICY_PROMOTE_AFTER_NS since its last iteration ended (or since it arrived) goes
 * before every job that is not promoted, and stays so until it has had
 * POLICY_PROMOTION_QUANTUM_NS more service; then it takes its own rank again and waits anew.
 * record may be NULL (a job the policy could not record: its wait counts from arrival). */
#define POLICY_PROMOTE_AFTER_NS (600ull * 1000000000ull)
#define POLICY_PROMOTION_QUANTUM_NS (1000000000ull)
/* The job arrived (record new): its wait starts now. */
void policy_promotion_arrived(policy_record_t *record, uint64_t now_ns);
/* Whether the job counts as promoted at now_ns. */
bool policy_promoted(const policy_record_t *record, const policy_job_t *job, uint64_t now_ns);
/* iteration_done: the iteration of duration_ns that just ended started a promotion (or used
 * up some of one); the job's next wait starts now. */
void policy_promotion_iteration_done(policy_record_t *record, const policy_job_t *job,
                                     uint64_t duration_ns, uint64_t now_ns);

/* The promotion's steps as LAS and Gittins take them, on records (one per job, from its
 * arrival to its leaving):
 * job_arrived: the job's record, new (its wait starts now) or known (its wait goes on); NULL
 * when out of memory (its wait then counts from its arrival). */
policy_record_t *policy_promotion_job_arrived(policy_records_t *records, uint64_t job_id,
                                              uint64_t now_ns);
/* iteration_done: the job's record after policy_promotion_iteration_done, or NULL when the
 * job has none. */
policy_record_t *policy_promotion_job_iteration(policy_records_t *records,
                                                const policy_job_t *job, uint64_t duration_ns,
                                                uint64_t now_ns);
/* The job's key at now_ns: 0 while it is promoted, else key(state, job). */
uint64_t policy_promoted_key(const policy_records_t *records, const void *state,
                             policy_key_fn key, const policy_job_t *job, uint64_t now_ns);
/* The state of a policy with promotion (LAS, Gittins) starts with this: its records and its
 * key, promotion aside (called with the policy's state). Such a policy's pick and
 * admission_order may be these two: policy_pick_lowest and policy_order_by_key over
 * policy_promoted_key. */
typedef struct policy_promoting_s {
    policy_records_t records;
    policy_key_fn key;
} policy_promoting_t;
int policy_promoting_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                          uint64_t now_ns);
void policy_promoting_admission_order(void *state, const policy_job_t *waiting, size_t count,
                                      size_t *order, uint64_t now_ns);

#endif
