/* Lane manager: state copies, placement, defragmentation and change reports. */
#include "lanes-internal.h"

#include <stdlib.h>
#include <string.h>

static void *copy_array(const void *source, size_t count, size_t capacity, size_t element)
{
    void *copy = calloc(capacity, element);
    if (copy && count)
        memcpy(copy, source, count * element);
    return copy;
}

int lanes_state_clone(const lanes_state_t *source, lanes_state_t *copy)
{
    memset(copy, 0, sizeof(*copy));
    copy->gpu_capacity = source->gpu_count + 1;
    copy->lane_capacity = source->lane_count + 1;
    copy->job_capacity = source->job_count + 1;
    copy->gpus = copy_array(source->gpus, source->gpu_count, copy->gpu_capacity, sizeof(lanes_gpu_t));
    copy->lanes = copy_array(source->lanes, source->lane_count, copy->lane_capacity,
                             sizeof(lanes_lane_t));
    copy->jobs = copy_array(source->jobs, source->job_count, copy->job_capacity, sizeof(lanes_job_t));
    if (!copy->gpus || !copy->lanes || !copy->jobs)
        goto fail;
    copy->gpu_count = source->gpu_count;
    copy->lane_count = source->lane_count;
    copy->job_count = source->job_count;
    copy->next_lane_id = source->next_lane_id;
    return 0;

fail:
    lanes_state_free(copy);
    return -1;
}

void lanes_state_free(lanes_state_t *state)
{
    free(state->gpus);
    free(state->lanes);
    free(state->jobs);
    memset(state, 0, sizeof(*state));
}

lanes_job_t *lanes_state_job(const lanes_state_t *state, uint64_t job_id)
{
    for (size_t i = 0; i < state->job_count; i++)
        if (state->jobs[i].id == job_id)
            return &state->jobs[i];
    return NULL;
}

lanes_lane_t *lanes_state_lane(const lanes_state_t *state, uint32_t lane_id)
{
    for (size_t i = 0; i < state->lane_count; i++)
        if (state->lanes[i].id == lane_id)
            return &state->lanes[i];
    return NULL;
}

const lanes_gpu_t *lanes_state_gpu(const lanes_state_t *state, int gpu)
{
    for (size_t i = 0; i < state->gpu_count; i++)
        if (state->gpus[i].index == gpu)
            return &state->gpus[i];
    return NULL;
}

size_t lanes_state_lane_job_count(const lanes_state_t *state, uint32_t lane_id)
{
    size_t count = 0;
    for (size_t i = 0; i < state->job_count; i++)
        count += state->jobs[i].lane_id == lane_id;
    return count;
}

size_t lanes_state_gpu_job_count(const lanes_state_t *state, int gpu)
{
    size_t count = 0;
    for (size_t i = 0; i < state->job_count; i++)
        count += state->jobs[i].lane_id != LANES_NO_LANE && state->jobs[i].gpu == gpu;
    return count;
}

uint64_t lanes_state_gpu_persistent_bytes(const lanes_state_t *state, const lanes_config_t *config,
                                          int gpu)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < state->job_count; i++)
        if (state->jobs[i].lane_id != LANES_NO_LANE && state->jobs[i].gpu == gpu)
            bytes += state->jobs[i].persistent_bytes + config->job_overhead_bytes;
    return bytes;
}

uint64_t lanes_state_gpu_lane_bytes(const lanes_state_t *state, int gpu)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < state->lane_count; i++)
        if (state->lanes[i].gpu == gpu)
            bytes += state->lanes[i].size_bytes;
    return bytes;
}

static void remove_lane_at(lanes_state_t *state, size_t index)
{
    memmove(&state->lanes[index], &state->lanes[index + 1],
            (state->lane_count - index - 1) * sizeof(lanes_lane_t));
    state->lane_count--;
}

void lanes_state_tidy(lanes_state_t *state, int gpu)
{
    for (size_t i = 0; i < state->lane_count;) {
        lanes_lane_t *lane = &state->lanes[i];
        uint64_t largest = 0;
        size_t members = 0;
        bool provisional = false, alone = false;
        if (lane->gpu != gpu) {
            i++;
            continue;
        }
        for (size_t j = 0; j < state->job_count; j++) {
            if (state->jobs[j].lane_id != lane->id)
                continue;
            members++;
            provisional |= state->jobs[j].provisional;
            alone |= state->jobs[j].alone;
            if (state->jobs[j].ephemeral_bytes > largest)
                largest = state->jobs[j].ephemeral_bytes;
        }
        if (members == 0) {
            remove_lane_at(state, i);
            continue;
        }
        lane->size_bytes = largest;
        lane->claim = provisional;
        lane->alone = alone;
        i++;
    }
}

/* Memory still free on the GPU, given its current books. */
static uint64_t gpu_free_bytes(const lanes_state_t *state, const lanes_config_t *config,
                               const lanes_gpu_t *gpu)
{
    uint64_t used = lanes_state_gpu_persistent_bytes(state, config, gpu->index) +
                    lanes_state_gpu_lane_bytes(state, gpu->index);
    return used >= gpu->capacity_bytes ? 0 : gpu->capacity_bytes - used;
}

static bool tenancy_allows(const lanes_config_t *config, const lanes_lane_t *lane, uint32_t uid)
{
    return config->share_lanes_across_users || lane->tenant_uid == uid;
}

/* Whether another job may join, grow into or merge with the lane (a claim or a lane of its
 * job's own: lanes.h, "Lanes of their own"). */
static bool lane_shared(const lanes_lane_t *lane)
{
    return !lane->claim && !lane->alone;
}

static bool lanes_compatible(const lanes_config_t *config, const lanes_lane_t *a,
                             const lanes_lane_t *b)
{
    return lane_shared(a) && lane_shared(b) &&
           (config->share_lanes_across_users || a->tenant_uid == b->tenant_uid);
}

static bool gpu_has_room_for_job(const lanes_state_t *state, const lanes_config_t *config, int gpu)
{
    return config->max_jobs_per_gpu == 0 ||
           lanes_state_gpu_job_count(state, gpu) < config->max_jobs_per_gpu;
}

/* The most a provisional job's claim may hold (UINT64_MAX: no cap). */
static uint64_t claim_cap(const lanes_config_t *config, const lanes_job_t *job)
{
    uint64_t cap = config->provisional_max_bytes ? config->provisional_max_bytes : UINT64_MAX;
    if (job->claim_max_bytes && job->claim_max_bytes < cap)
        cap = job->claim_max_bytes;
    return cap;
}

/* The least free memory (besides its P and overhead) a provisional job is admitted with on
 * this GPU: provisional_min_bytes, or what the GPU can hold at all when that is less. */
static uint64_t claim_floor(const lanes_config_t *config, const lanes_job_t *job,
                            const lanes_gpu_t *gpu)
{
    uint64_t charge = job->persistent_bytes + config->job_overhead_bytes;
    uint64_t room = gpu->capacity_bytes > charge ? gpu->capacity_bytes - charge : 0;
    uint64_t floor = config->provisional_min_bytes < room ? config->provisional_min_bytes : room;
    return floor ? floor : 1;
}

/* What the claims of the GPU still wait for (lanes_want), up to their caps. */
static uint64_t gpu_wanted_bytes(const lanes_state_t *state, const lanes_config_t *config,
                                 int gpu)
{
    uint64_t wanted = 0;
    for (size_t i = 0; i < state->job_count; i++) {
        const lanes_job_t *job = &state->jobs[i];
        if (!job->provisional || job->gpu != gpu || job->lane_id == LANES_NO_LANE)
            continue;
        uint64_t cap = claim_cap(config, job);
        uint64_t want = job->want_bytes < cap ? job->want_bytes : cap;
        if (want > job->ephemeral_bytes)
            wanted += want - job->ephemeral_bytes;
    }
    return wanted;
}

/* Free memory a newcomer may have (a claim that waits reserves nothing: it is served, whole,
 * when memory frees, before the newcomers of that moment). */
static uint64_t gpu_admit_free_bytes(const lanes_state_t *state, const lanes_config_t *config,
                                     const lanes_gpu_t *gpu)
{
    return gpu_free_bytes(state, config, gpu);
}

void lanes_state_grow_claims(lanes_state_t *state, const lanes_config_t *config, int gpu)
{
    const lanes_gpu_t *device = lanes_state_gpu(state, gpu);
    if (!device)
        return;
    for (size_t i = 0; i < state->job_count; i++) {
        lanes_job_t *job = &state->jobs[i];
        if (!job->provisional || job->gpu != gpu || job->lane_id == LANES_NO_LANE)
            continue;
        lanes_lane_t *lane = lanes_state_lane(state, job->lane_id);
        uint64_t free_bytes = gpu_free_bytes(state, config, device);
        uint64_t cap = claim_cap(config, job);
        if (job->want_bytes < cap)
            cap = job->want_bytes;
        /* whole, or not yet */
        if (!lane || !lane->claim || job->ephemeral_bytes >= cap ||
            cap - job->ephemeral_bytes > free_bytes)
            continue;
        job->ephemeral_bytes = cap;
        lane->size_bytes = cap;
    }
}

/* A candidate placement, ranked by `rank` compared lexicographically (lower is better). */
typedef struct option_s {
    bool found;
    bool new_lane;
    int gpu;
    uint32_t lane_id;
    uint64_t rank[5];
    uint64_t claim; /* a provisional job's claim (new_lane) */
} option_t;

static bool rank_less(const uint64_t *a, const uint64_t *b)
{
    for (int k = 0; k < 5; k++)
        if (a[k] != b[k])
            return a[k] < b[k];
    return false;
}

static void consider(option_t *best, const option_t *candidate)
{
    if (!best->found || rank_less(candidate->rank, best->rank))
        *best = *candidate;
}

/* A claim of its own for a provisional job on this GPU: all the free memory, up to its cap,
 * where at least its floor is free. The largest claim first, then fewer jobs, then the lower
 * index. */
static void claim_option(const lanes_state_t *state, const lanes_config_t *config,
                         const lanes_job_t *job, const lanes_gpu_t *gpu, option_t *best)
{
    uint64_t free_bytes = gpu_admit_free_bytes(state, config, gpu);
    uint64_t charge = job->persistent_bytes + config->job_overhead_bytes;
    if (!gpu_has_room_for_job(state, config, gpu->index) || charge > free_bytes ||
        free_bytes - charge < claim_floor(config, job, gpu))
        return;
    /* the least claim is left for one more job of unknown sizes where the GPU has room for
     * both: two such jobs arriving together both start (a program and a process it starts,
     * which may wait for each other) */
    uint64_t floor = claim_floor(config, job, gpu);
    uint64_t claim = free_bytes - charge, cap = claim_cap(config, job);
    if (claim >= 2 * floor)
        claim -= floor;
    if (claim > cap)
        claim = cap;
    option_t o = {true, true, gpu->index, LANES_NO_LANE,
                  {0, UINT64_MAX - claim, lanes_state_gpu_job_count(state, gpu->index),
                   (uint64_t)gpu->index, 0},
                  claim};
    consider(best, &o);
}

static void plain_options(const lanes_state_t *state, const lanes_config_t *config,
                          const lanes_job_t *job, const lanes_gpu_t *gpu, option_t *best)
{
    if (job->provisional) {
        claim_option(state, config, job, gpu, best);
        return;
    }
    uint64_t free_bytes = gpu_admit_free_bytes(state, config, gpu);
    uint64_t charge = job->persistent_bytes + config->job_overhead_bytes;
    uint64_t gpu_jobs = lanes_state_gpu_job_count(state, gpu->index);

    if (!gpu_has_room_for_job(state, config, gpu->index) || charge > free_bytes)
        return;
    if (job->ephemeral_bytes <= free_bytes - charge) {
        option_t o = {true, true, gpu->index, LANES_NO_LANE,
                      {0, gpu_jobs, free_bytes - charge - job->ephemeral_bytes,
                       (uint64_t)gpu->index, 0},
                      0};
        consider(best, &o);
    }
    for (size_t i = 0; i < state->lane_count && !job->alone; i++) {
        const lanes_lane_t *lane = &state->lanes[i];
        if (lane->gpu != gpu->index || lane->size_bytes < job->ephemeral_bytes ||
            !lane_shared(lane) || !tenancy_allows(config, lane, job->uid))
            continue;
        /* Best fit first; then a lane of the job's own user (no clearing), then the emptier
         * lane. */
        option_t o = {true, false, gpu->index, lane->id,
                      {1, lane->size_bytes, lane->tenant_uid != job->uid,
                       lanes_state_lane_job_count(state, lane->id),
                       ((uint64_t)gpu->index << 32) | lane->id},
                      0};
        consider(best, &o);
    }
}

static void apply_option(lanes_state_t *state, lanes_job_t *job, const option_t *option)
{
    job->gpu = option->gpu;
    if (job->provisional)
        job->ephemeral_bytes = option->claim;
    if (option->new_lane) {
        /* The clone reserved room for this one lane. */
        lanes_lane_t *lane = &state->lanes[state->lane_count++];
        lane->id = state->next_lane_id++;
        lane->gpu = option->gpu;
        lane->size_bytes = job->ephemeral_bytes;
        lane->tenant_uid = job->uid;
        lane->memory_uid = LANES_MEMORY_FRESH;
        lane->claim = job->provisional;
        lane->alone = job->alone;
        job->lane_id = lane->id;
    } else {
        job->lane_id = option->lane_id;
    }
}

bool lanes_place_plain(lanes_state_t *state, const lanes_config_t *config, lanes_job_t *job,
                       int gpu)
{
    option_t best = {0};
    for (size_t i = 0; i < state->gpu_count; i++)
        if (gpu < 0 || state->gpus[i].index == gpu)
            plain_options(state, config, job, &state->gpus[i], &best);
    if (!best.found)
        return false;
    apply_option(state, job, &best);
    return true;
}

/* Grows the compatible lane that needs the least growth to E, if the GPU holds it; the job
 * joins it. */
static bool grow_and_join(lanes_state_t *state, const lanes_config_t *config, lanes_job_t *job,
                          const lanes_gpu_t *gpu)
{
    uint64_t free_bytes = gpu_admit_free_bytes(state, config, gpu);
    uint64_t charge = job->persistent_bytes + config->job_overhead_bytes;
    lanes_lane_t *best = NULL;

    if (charge > free_bytes || job->provisional || job->alone)
        return false;
    for (size_t i = 0; i < state->lane_count; i++) {
        lanes_lane_t *lane = &state->lanes[i];
        if (lane->gpu != gpu->index || !lane_shared(lane) ||
            !tenancy_allows(config, lane, job->uid))
            continue;
        uint64_t growth = job->ephemeral_bytes > lane->size_bytes
                              ? job->ephemeral_bytes - lane->size_bytes : 0;
        if (growth > free_bytes - charge)
            continue;
        if (!best || lane->size_bytes > best->size_bytes)
            best = lane;
    }
    if (!best)
        return false;
    if (job->ephemeral_bytes > best->size_bytes)
        best->size_bytes = job->ephemeral_bytes;
    job->gpu = gpu->index;
    job->lane_id = best->id;
    return true;
}

static long long merged_memory_uid(long long a, long long b)
{
    if (a == LANES_MEMORY_FRESH)
        return b;
    if (b == LANES_MEMORY_FRESH || a == b)
        return a;
    return LANES_MEMORY_MIXED;
}

/* Merges the pair of compatible lanes whose merge frees the most memory. false when none. */
static bool merge_best_pair(lanes_state_t *state, const lanes_config_t *config, int gpu)
{
    size_t keep = 0, drop = 0;
    uint64_t best_saving = 0;
    bool found = false;

    for (size_t i = 0; i < state->lane_count; i++) {
        for (size_t j = i + 1; j < state->lane_count; j++) {
            const lanes_lane_t *a = &state->lanes[i], *b = &state->lanes[j];
            if (a->gpu != gpu || b->gpu != gpu || !lanes_compatible(config, a, b))
                continue;
            uint64_t saving = a->size_bytes < b->size_bytes ? a->size_bytes : b->size_bytes;
            if (found && saving <= best_saving)
                continue;
            found = true;
            best_saving = saving;
            keep = a->size_bytes >= b->size_bytes ? i : j;
            drop = keep == i ? j : i;
        }
    }
    if (!found)
        return false;
    lanes_lane_t *target = &state->lanes[keep];
    const lanes_lane_t *gone = &state->lanes[drop];
    for (size_t k = 0; k < state->job_count; k++)
        if (state->jobs[k].lane_id == gone->id)
            state->jobs[k].lane_id = target->id;
    target->memory_uid = merged_memory_uid(target->memory_uid, gone->memory_uid);
    remove_lane_at(state, drop);
    return true;
}

int lanes_place_defragment(lanes_state_t *state, const lanes_config_t *config, lanes_job_t *job,
                           int gpu)
{
    const lanes_gpu_t *device = lanes_state_gpu(state, gpu);
    int changes = 0;

    if (!device || !gpu_has_room_for_job(state, config, gpu))
        return -1;
    for (;;) {
        if (lanes_place_plain(state, config, job, gpu))
            return changes;
        if (grow_and_join(state, config, job, device))
            return changes + 1;
        if (!merge_best_pair(state, config, gpu))
            return -1;
        changes++;
    }
}

bool lanes_state_claims_wait(const lanes_state_t *state, const lanes_config_t *config, int gpu)
{
    return gpu_wanted_bytes(state, config, gpu) > 0;
}

bool lanes_state_merge_for_claims(lanes_state_t *state, const lanes_config_t *config, int gpu)
{
    for (;;) {
        lanes_state_grow_claims(state, config, gpu);
        if (gpu_wanted_bytes(state, config, gpu) == 0)
            return true;
        if (!merge_best_pair(state, config, gpu))
            return false;
    }
}

static void report(const lanes_config_t *config, lanes_change_t change)
{
    config->on_change(config->on_change_context, &change);
}

void lanes_report_changes(const lanes_state_t *before, const lanes_state_t *after,
                          const lanes_config_t *config)
{
    if (!config->on_change)
        return;
    for (size_t i = 0; i < after->job_count; i++) {
        const lanes_job_t *now = &after->jobs[i];
        const lanes_job_t *was = lanes_state_job(before, now->id);
        if (was && was->lane_id != LANES_NO_LANE && was->lane_id != now->lane_id)
            report(config, (lanes_change_t){LANES_CHANGE_JOB_MOVED, now->gpu, now->lane_id,
                                            was->lane_id, now->id, 0, 0});
    }
    for (size_t i = 0; i < before->lane_count; i++) {
        const lanes_lane_t *was = &before->lanes[i];
        if (!lanes_state_lane(after, was->id))
            report(config, (lanes_change_t){LANES_CHANGE_LANE_CLOSED, was->gpu, was->id, 0, 0,
                                            was->size_bytes, 0});
    }
    /* Shrinks before grows, so that applying changes in order never overcommits. */
    for (int grow = 0; grow < 2; grow++) {
        for (size_t i = 0; i < after->lane_count; i++) {
            const lanes_lane_t *now = &after->lanes[i];
            const lanes_lane_t *was = lanes_state_lane(before, now->id);
            if (!was || was->size_bytes == now->size_bytes ||
                (now->size_bytes > was->size_bytes) != (grow == 1))
                continue;
            report(config, (lanes_change_t){LANES_CHANGE_LANE_RESIZED, now->gpu, now->id, 0, 0,
                                            was->size_bytes, now->size_bytes});
        }
    }
    for (size_t i = 0; i < after->lane_count; i++) {
        const lanes_lane_t *now = &after->lanes[i];
        if (!lanes_state_lane(before, now->id))
            report(config, (lanes_change_t){LANES_CHANGE_LANE_OPENED, now->gpu, now->id, 0, 0, 0,
                                            now->size_bytes});
    }
}
