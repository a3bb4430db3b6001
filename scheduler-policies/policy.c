/* Policy registry, run-time switch and the helpers the policy files share. */
#include "policy-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const policy_ops_t *const registry[] = {
    &policy_fifo_ops,
    &policy_srtf_ops,
    &policy_pack_ops,
    &policy_fair_ops,
    &policy_las_ops,
    &policy_gittins_ops,
    &policy_slo_ops,
};

#define REGISTRY_SIZE (sizeof(registry) / sizeof(registry[0]))

const policy_ops_t *policy_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < REGISTRY_SIZE; i++)
        if (strcasecmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

size_t policy_count(void)
{
    return REGISTRY_SIZE;
}

const policy_ops_t *policy_at(size_t index)
{
    return index < REGISTRY_SIZE ? registry[index] : NULL;
}

int policy_init(policy_t *policy, const char *name, const policy_config_t *config)
{
    const policy_ops_t *ops = policy_find(name);
    if (!ops)
        return -ENOENT;
    void *state = ops->init(config);
    if (!state)
        return -ENOMEM;
    policy->ops = ops;
    policy->state = state;
    return 0;
}

void policy_fini(policy_t *policy)
{
    if (policy->ops)
        policy->ops->fini(policy->state);
    policy->ops = NULL;
    policy->state = NULL;
}

int policy_switch_ops(policy_t *policy, const policy_ops_t *ops, const policy_config_t *config,
                      const policy_job_t *jobs, size_t count, uint64_t now_ns)
{
    if (!ops)
        return -ENOENT;
    policy_t next = {ops, ops->init(config)};
    if (!next.state)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++)
        policy_job_arrived(&next, &jobs[i], now_ns);
    policy_t old = *policy;
    *policy = next;
    policy_fini(&old);
    return 0;
}

int policy_switch(policy_t *policy, const char *name, const policy_config_t *config,
                  const policy_job_t *jobs, size_t count, uint64_t now_ns)
{
    return policy_switch_ops(policy, policy_find(name), config, jobs, count, now_ns);
}

int policy_compare_tiebreak(const policy_job_t *a, const policy_job_t *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    if (a->arrival_ns != b->arrival_ns)
        return a->arrival_ns < b->arrival_ns ? -1 : 1;
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    return 0;
}

/* < 0 when a (whose key is ka) goes before b (whose key is kb). The keys are computed once
 * per job by the callers: a key function is pure, and a lookup per comparison was most of a
 * pick's cost in the trace simulator. */
static int compare_keyed(uint64_t ka, const policy_job_t *a, uint64_t kb, const policy_job_t *b)
{
    if (ka != kb)
        return ka < kb ? -1 : 1;
    return policy_compare_tiebreak(a, b);
}

int policy_pick_lowest(const void *state, policy_key_fn key, uint32_t lane,
                       const policy_job_t *jobs, size_t count)
{
    int best = -1;
    uint64_t best_key = 0;
    for (size_t i = 0; i < count; i++) {
        if (!jobs[i].runnable || jobs[i].lane != lane)
            continue;
        uint64_t k = key(state, &jobs[i]);
        if (best < 0 || compare_keyed(k, &jobs[i], best_key, &jobs[best]) < 0) {
            best = (int)i;
            best_key = k;
        }
    }
    return best;
}

void policy_order_by_key(const void *state, policy_key_fn key, const policy_job_t *jobs,
                         size_t count, size_t *order)
{
    /* Insertion sort: stable, and the waiting list is short. */
    for (size_t i = 0; i < count; i++) {
        uint64_t ki = key(state, &jobs[i]);
        size_t j = i;
        while (j > 0 && compare_keyed(ki, &jobs[i], key(state, &jobs[order[j - 1]]),
                                      &jobs[order[j - 1]]) < 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

static uint64_t arrival_key(const void *state, const policy_job_t *job)
{
    (void)state;
    return job->arrival_ns;
}

void policy_order_by_arrival(const policy_job_t *waiting, size_t count, size_t *order)
{
    policy_order_by_key(NULL, arrival_key, waiting, count, order);
}

/* Records are kept sorted by job id; lookups go through the hash index, the binary search
 * places insertions and removals (and serves lookups when the index could not be allocated).
 * Returns the index of job_id, or where it would be inserted. */
static size_t records_lower_bound(const policy_records_t *records, uint64_t job_id)
{
    /* Halving without a data-dependent branch (the comparison becomes a conditional move):
     * the ids looked up jump around, so the branch of the textbook loop mispredicts. */
    size_t low = 0, n = records->count;
    if (n == 0)
        return 0;
    while (n > 1) {
        size_t half = n / 2;
        low = records->items[low + half - 1].job_id < job_id ? low + half : low;
        n -= half;
    }
    return low + (records->items[low].job_id < job_id);
}

static size_t index_slot(uint64_t job_id, size_t mask)
{
    return (size_t)((job_id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* After an insertion or a removal (positions shifted): at least twice as many slots as
 * records, so that probes stay short. */
static void index_rebuild(policy_records_t *records)
{
    size_t slots = 16;
    while (slots < records->count * 2)
        slots *= 2;
    if (!records->index || slots != records->index_mask + 1) {
        size_t *index = realloc(records->index, slots * sizeof(*index));
        if (!index) { /* out of memory: lookups fall back to the binary search */
            free(records->index);
            records->index = NULL;
            records->index_mask = 0;
            return;
        }
        records->index = index;
        records->index_mask = slots - 1;
    }
    memset(records->index, 0, slots * sizeof(*records->index));
    for (size_t i = 0; i < records->count; i++) {
        size_t slot = index_slot(records->items[i].job_id, records->index_mask);
        while (records->index[slot])
            slot = (slot + 1) & records->index_mask;
        records->index[slot] = i + 1;
    }
}

policy_record_t *policy_records_find(const policy_records_t *records, uint64_t job_id)
{
    if (records->index) {
        for (size_t slot = index_slot(job_id, records->index_mask);;
             slot = (slot + 1) & records->index_mask) {
            size_t at = records->index[slot];
            if (at == 0)
                return NULL;
            if (records->items[at - 1].job_id == job_id)
                return &records->items[at - 1];
        }
    }
    size_t i = records_lower_bound(records, job_id);
    return i < records->count && records->items[i].job_id == job_id ? &records->items[i] : NULL;
}

policy_record_t *policy_records_get(policy_records_t *records, uint64_t job_id)
{
    policy_record_t *known = policy_records_find(records, job_id);
    if (known)
        return known;
    size_t i = records_lower_bound(records, job_id);
    if (records->count == records->capacity) {
        size_t capacity = records->capacity ? records->capacity * 2 : 16;
        policy_record_t *items = realloc(records->items, capacity * sizeof(*items));
        if (!items)
            return NULL;
        records->items = items;
        records->capacity = capacity;
    }
    memmove(&records->items[i + 1], &records->items[i],
            (records->count - i) * sizeof(records->items[0]));
    records->count++;
    records->items[i] = (policy_record_t){.job_id = job_id};
    index_rebuild(records);
    return &records->items[i];
}

void policy_records_remove(policy_records_t *records, uint64_t job_id)
{
    size_t i = records_lower_bound(records, job_id);
    if (i == records->count || records->items[i].job_id != job_id)
        return;
    memmove(&records->items[i], &records->items[i + 1],
            (records->count - i - 1) * sizeof(records->items[0]));
    records->count--;
    index_rebuild(records);
}

void policy_promotion_arrived(policy_record_t *record, uint64_t now_ns)
{
    record->waiting_since_ns = now_ns;
    record->promoted_until_ns = 0;
}

static bool starved(uint64_t waiting_since_ns, uint64_t at_ns)
{
    return at_ns >= waiting_since_ns && at_ns - waiting_since_ns >= POLICY_PROMOTE_AFTER_NS;
}

bool policy_promoted(const policy_record_t *record, const policy_job_t *job, uint64_t now_ns)
{
    if (!record)
        return starved(job->arrival_ns, now_ns);
    return job->attained_ns < record->promoted_until_ns ||
           starved(record->waiting_since_ns, now_ns);
}

void policy_promotion_iteration_done(policy_record_t *record, const policy_job_t *job,
                                     uint64_t duration_ns, uint64_t now_ns)
{
    /* The iteration started duration_ns ago (the grant; the caller's duration is the
     * iteration's): was the job promoted then? */
    uint64_t started_ns = now_ns > duration_ns ? now_ns - duration_ns : 0;
    uint64_t before_ns = job->attained_ns > duration_ns ? job->attained_ns - duration_ns : 0;
    if (before_ns >= record->promoted_until_ns) /* no quantum left: a new promotion? */
        record->promoted_until_ns = starved(record->waiting_since_ns, started_ns)
                                        ? before_ns + POLICY_PROMOTION_QUANTUM_NS
                                        : 0;
    record->waiting_since_ns = now_ns;
}

policy_record_t *policy_promotion_job_arrived(policy_records_t *records, uint64_t job_id,
                                              uint64_t now_ns)
{
    bool known = policy_records_find(records, job_id) != NULL;
    policy_record_t *record = policy_records_get(records, job_id);
    if (record && !known)
        policy_promotion_arrived(record, now_ns);
    return record;
}

policy_record_t *policy_promotion_job_iteration(policy_records_t *records,
                                                const policy_job_t *job, uint64_t duration_ns,
                                                uint64_t now_ns)
{
    policy_record_t *record = policy_records_find(records, job->id);
    if (record)
        policy_promotion_iteration_done(record, job, duration_ns, now_ns);
    return record;
}

uint64_t policy_promoted_key(const policy_records_t *records, const void *state,
                             policy_key_fn key, const policy_job_t *job, uint64_t now_ns)
{
    if (policy_promoted(policy_records_find(records, job->id), job, now_ns))
        return 0;
    return key(state, job);
}

/* pick and admission order carry the policy's state and the clock to the key function */
typedef struct promoting_clock_s {
    const void *state; /* starts with a policy_promoting_t */
    uint64_t now_ns;
} promoting_clock_t;

static uint64_t promoting_clock_key(const void *opaque, const policy_job_t *job)
{
    const promoting_clock_t *clock = opaque;
    const policy_promoting_t *p = clock->state;
    return policy_promoted_key(&p->records, clock->state, p->key, job, clock->now_ns);
}

int policy_promoting_pick(void *state, uint32_t lane, const policy_job_t *jobs, size_t count,
                          uint64_t now_ns)
{
    promoting_clock_t clock = {state, now_ns};
    return policy_pick_lowest(&clock, promoting_clock_key, lane, jobs, count);
}

void policy_promoting_admission_order(void *state, const policy_job_t *waiting, size_t count,
                                      size_t *order, uint64_t now_ns)
{
    promoting_clock_t clock = {state, now_ns};
    policy_order_by_key(&clock, promoting_clock_key, waiting, count, order);
}

void policy_records_free(policy_records_t *records)
{
    free(records->items);
    free(records->index);
    *records = (policy_records_t){0};
}
