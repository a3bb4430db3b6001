/* Lane manager: public API. Placement and defragmentation live in lanes_plan.c. */
#include "lanes-internal.h"

#include <stdlib.h>
#include <string.h>

void lanes_config_default(lanes_config_t *config)
{
    memset(config, 0, sizeof(*config));
    config->job_overhead_bytes = LANES_DEFAULT_JOB_OVERHEAD_BYTES;
    config->provisional_min_bytes = LANES_DEFAULT_PROVISIONAL_MIN_BYTES;
    config->provisional_max_bytes = LANES_DEFAULT_PROVISIONAL_MAX_BYTES;
    config->defragment = true;
}

const char *lanes_status_name(lanes_status_t status)
{
    switch (status) {
    case LANES_OK: return "ok";
    case LANES_WAIT: return "must wait";
    case LANES_MOVED: return "moved to another lane";
    case LANES_NEVER_FITS: return "larger than any GPU's capacity";
    case LANES_NO_LONGER_FITS: return "new sizes do not fit now";
    case LANES_ERROR_EXISTS: return "already exists";
    case LANES_ERROR_UNKNOWN: return "unknown job, GPU or lane";
    case LANES_ERROR_NO_MEMORY: return "out of memory";
    case LANES_ERROR_INVALID: return "invalid argument";
    case LANES_ERROR_BUSY: return "lane held by another job";
    }
    return "?";
}

static void index_free(lanes_index_t *x);

lanes_t *lanes_create(const lanes_config_t *config)
{
    lanes_t *lanes = calloc(1, sizeof(*lanes));
    if (!lanes)
        return NULL;
    if (config)
        lanes->config = *config;
    else
        lanes_config_default(&lanes->config);
    lanes->state.next_lane_id = 1;
    return lanes;
}

static void index_rebuild(lanes_t *lanes);

lanes_t *lanes_clone(const lanes_t *lanes)
{
    lanes_t *copy = calloc(1, sizeof(*copy));
    if (!copy)
        return NULL;
    copy->config = lanes->config;
    copy->config.on_change = NULL;
    copy->config.on_change_context = NULL;
    copy->version = lanes->version;
    if (lanes_state_clone(&lanes->state, &copy->state) < 0) {
        free(copy);
        return NULL;
    }
    index_rebuild(copy); /* (an invalid index only makes lookups walk the state) */
    return copy;
}

void lanes_destroy(lanes_t *lanes)
{
    if (!lanes)
        return;
    lanes_state_free(&lanes->state);
    index_free(&lanes->index);
    free(lanes);
}

/* ---- the index of the committed state (lanes-internal.h) -------------------------------- */

static size_t hash_slot(uint64_t job_id, size_t mask)
{
    return (size_t)((job_id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* *array holds at least `needed` elements of `size` bytes (room in *room). false: no memory. */
static bool index_room(void *array, size_t *room, size_t needed, size_t size)
{
    void **p = array;
    if (needed == 0)
        needed = 1;
    if (needed <= *room)
        return true;
    void *grown = realloc(*p, needed * size);
    if (!grown)
        return false;
    *p = grown;
    *room = needed;
    return true;
}

static void index_rebuild(lanes_t *lanes)
{
    lanes_index_t *x = &lanes->index;
    const lanes_state_t *state = &lanes->state;
    size_t slots = 16;
    x->valid = false;
    if (state->job_count >= UINT32_MAX / 4 || state->lane_count >= UINT32_MAX)
        return;
    while (slots < 2 * state->job_count)
        slots *= 2;
    if (!index_room(&x->slots, &x->slot_room, slots, sizeof(*x->slots)) ||
        !index_room(&x->job_lane, &x->job_room, state->job_count, sizeof(*x->job_lane)) ||
        !index_room(&x->lane_granted, &x->lane_room, state->lane_count,
                    sizeof(*x->lane_granted)))
        return;
    memset(x->slots, 0, slots * sizeof(*x->slots));
    memset(x->lane_granted, 0, state->lane_count * sizeof(*x->lane_granted));
    x->mask = slots - 1;
    for (size_t i = 0; i < state->job_count; i++) {
        const lanes_job_t *job = &state->jobs[i];
        size_t s = hash_slot(job->id, x->mask);
        while (x->slots[s])
            s = (s + 1) & x->mask;
        x->slots[s] = (uint32_t)(i + 1);
        const lanes_lane_t *lane = lanes_state_lane(state, job->lane_id);
        x->job_lane[i] = lane ? (uint32_t)(lane - state->lanes) : UINT32_MAX;
        if (lane && job->granted)
            x->lane_granted[x->job_lane[i]]++;
    }
    x->valid = true;
}

static void index_free(lanes_index_t *x)
{
    free(x->slots);
    free(x->job_lane);
    free(x->lane_granted);
    memset(x, 0, sizeof(*x));
}

/* The committed state's job `job_id` (*at: its index), or NULL. */
static inline lanes_job_t *committed_job(const lanes_t *lanes, uint64_t job_id, size_t *at)
{
    const lanes_state_t *state = &lanes->state;
    if (!lanes->index.valid) {
        lanes_job_t *job = lanes_state_job(state, job_id);
        *at = job ? (size_t)(job - state->jobs) : 0;
        return job;
    }
    const lanes_index_t *x = &lanes->index;
    for (size_t s = hash_slot(job_id, x->mask);; s = (s + 1) & x->mask) {
        uint32_t slot = x->slots[s];
        if (slot == 0)
            return NULL;
        if (state->jobs[slot - 1].id == job_id) {
            *at = slot - 1;
            return &state->jobs[slot - 1];
        }
    }
}

/* Reports what changed between the current state and `next`, then makes `next` current. */
static void commit(lanes_t *lanes, lanes_state_t *next)
{
    lanes_report_changes(&lanes->state, next, &lanes->config);
    lanes_state_free(&lanes->state);
    lanes->state = *next;
    memset(next, 0, sizeof(*next));
    index_rebuild(lanes);
    lanes->version++;
}

uint64_t lanes_version(const lanes_t *lanes)
{
    return lanes->version;
}

lanes_status_t lanes_add_gpu(lanes_t *lanes, int gpu, uint64_t total_bytes, uint64_t reserve_bytes)
{
    lanes_state_t next;
    if (gpu < 0 || reserve_bytes >= total_bytes)
        return LANES_ERROR_INVALID;
    if (lanes_state_gpu(&lanes->state, gpu))
        return LANES_ERROR_EXISTS;
    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    next.gpus[next.gpu_count++] = (lanes_gpu_t){gpu, total_bytes - reserve_bytes};
    commit(lanes, &next);
    return LANES_OK;
}

void lanes_set_max_jobs_per_gpu(lanes_t *lanes, uint32_t max_jobs_per_gpu)
{
    lanes->config.max_jobs_per_gpu = max_jobs_per_gpu;
}

static void fill_placement(const lanes_state_t *state, const lanes_job_t *job,
                           lanes_placement_t *placement)
{
    const lanes_lane_t *lane = lanes_state_lane(state, job->lane_id);
    if (!placement)
        return;
    placement->gpu = job->gpu;
    placement->lane_id = job->lane_id;
    placement->lane_size_bytes = lane ? lane->size_bytes : 0;
    placement->persistent_bytes = job->persistent_bytes;
    placement->ephemeral_bytes = job->ephemeral_bytes;
    placement->provisional = job->provisional;
}

/* P + overhead + E, or UINT64_MAX on overflow. */
static uint64_t footprint_bytes(const lanes_config_t *config, uint64_t persistent_bytes,
                                uint64_t ephemeral_bytes)
{
    uint64_t sum = persistent_bytes + config->job_overhead_bytes;
    if (sum < persistent_bytes || sum + ephemeral_bytes < sum)
        return UINT64_MAX;
    return sum + ephemeral_bytes;
}

static bool fits_some_gpu(const lanes_state_t *state, int gpu,
                          uint64_t footprint)
{
    for (size_t i = 0; i < state->gpu_count; i++)
        if ((gpu < 0 || state->gpus[i].index == gpu) && footprint <= state->gpus[i].capacity_bytes)
            return true;
    return false;
}

lanes_status_t lanes_admit(lanes_t *lanes, const lanes_request_t *request,
                           lanes_placement_t *placement)
{
    const lanes_config_t *config = &lanes->config;
    lanes_state_t next, best = {0};
    lanes_status_t status = LANES_WAIT;
    int best_changes = -1;

    if (!request)
        return LANES_ERROR_INVALID;
    size_t at;
    if (committed_job(lanes, request->job_id, &at))
        return LANES_ERROR_EXISTS;
    if (request->gpu != LANES_ANY_GPU && !lanes_state_gpu(&lanes->state, request->gpu))
        return LANES_ERROR_UNKNOWN;

    /* unknown sizes: a claim (lanes.h, "Learned sizes"), whose E the placement sets */
    bool provisional = request->persistent_bytes == LANES_SIZE_UNKNOWN ||
                       request->ephemeral_bytes == LANES_SIZE_UNKNOWN;
    lanes_job_t job = {
        .id = request->job_id,
        .uid = request->uid,
        .persistent_bytes = request->persistent_bytes == LANES_SIZE_UNKNOWN
                                ? 0 : request->persistent_bytes,
        .ephemeral_bytes = provisional ? 0 : request->ephemeral_bytes,
        .gpu = -1,
        .lane_id = LANES_NO_LANE,
        .provisional = provisional,
        .claim_max_bytes = provisional ? request->claim_max_bytes : 0,
        .alone = request->alone,
    };
    /* (a claim takes at least one byte, and at most what its GPU has) */
    if (!fits_some_gpu(&lanes->state, request->gpu,
                       footprint_bytes(config, job.persistent_bytes,
                                       provisional ? 1 : job.ephemeral_bytes)))
        return LANES_NEVER_FITS;

    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    next.jobs[next.job_count++] = job;
    if (lanes_place_plain(&next, config, &next.jobs[next.job_count - 1], request->gpu)) {
        commit(lanes, &next);
        status = LANES_OK;
        goto done;
    }
    if (!config->defragment)
        goto done;
    for (size_t i = 0; i < next.gpu_count; i++) {
        lanes_state_t attempt;
        int gpu = next.gpus[i].index;
        if (request->gpu != LANES_ANY_GPU && gpu != request->gpu)
            continue;
        if (lanes_state_clone(&next, &attempt) < 0) {
            status = LANES_ERROR_NO_MEMORY;
            goto done;
        }
        int changes = lanes_place_defragment(&attempt, config,
                                             &attempt.jobs[attempt.job_count - 1], gpu);
        if (changes >= 0 && (best_changes < 0 || changes < best_changes)) {
            lanes_state_free(&best);
            best = attempt;
            best_changes = changes;
        } else {
            lanes_state_free(&attempt);
        }
    }
    if (best_changes >= 0) {
        lanes_state_tidy(&best, best.jobs[best.job_count - 1].gpu);
        commit(lanes, &best);
        status = LANES_OK;
    }

done:
    lanes_state_free(&next);
    lanes_state_free(&best);
    if (status == LANES_OK)
        fill_placement(&lanes->state, lanes_state_job(&lanes->state, request->job_id), placement);
    return status;
}

lanes_status_t lanes_admit_to_lane(lanes_t *lanes, const lanes_request_t *request,
                                   uint32_t lane_id, lanes_placement_t *placement)
{
    const lanes_config_t *config = &lanes->config;
    lanes_state_t next;
    if (!request || request->persistent_bytes == LANES_SIZE_UNKNOWN ||
        request->ephemeral_bytes == LANES_SIZE_UNKNOWN)
        return LANES_ERROR_INVALID;
    if (lanes_state_job(&lanes->state, request->job_id))
        return LANES_ERROR_EXISTS;
    const lanes_lane_t *lane = lanes_state_lane(&lanes->state, lane_id);
    if (!lane)
        return LANES_ERROR_UNKNOWN;
    if ((request->gpu != LANES_ANY_GPU && request->gpu != lane->gpu) || lane->claim ||
        lane->alone || request->alone ||
        (!config->share_lanes_across_users && lane->tenant_uid != request->uid))
        return LANES_ERROR_INVALID;
    const lanes_gpu_t *gpu = lanes_state_gpu(&lanes->state, lane->gpu);
    uint64_t used = lanes_state_gpu_persistent_bytes(&lanes->state, config, lane->gpu) +
                    lanes_state_gpu_lane_bytes(&lanes->state, lane->gpu);
    uint64_t growth = request->ephemeral_bytes > lane->size_bytes
                          ? request->ephemeral_bytes - lane->size_bytes : 0;
    uint64_t need = footprint_bytes(config, request->persistent_bytes, 0);
    if (need == UINT64_MAX || need + growth < need || used > gpu->capacity_bytes ||
        need + growth > gpu->capacity_bytes - used)
        return LANES_WAIT;
    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    next.jobs[next.job_count++] = (lanes_job_t){
        .id = request->job_id,
        .uid = request->uid,
        .persistent_bytes = request->persistent_bytes,
        .ephemeral_bytes = request->ephemeral_bytes,
        .gpu = lane->gpu,
        .lane_id = lane_id,
    };
    lanes_lane_t *grown = lanes_state_lane(&next, lane_id);
    if (grown->size_bytes < request->ephemeral_bytes)
        grown->size_bytes = request->ephemeral_bytes;
    commit(lanes, &next);
    fill_placement(&lanes->state, lanes_state_job(&lanes->state, request->job_id), placement);
    return LANES_OK;
}

size_t lanes_admit_in_order(lanes_t *lanes, const lanes_request_t *requests, size_t count,
                            bool strict_order, lanes_status_t *results,
                            lanes_placement_t *placements)
{
    size_t admitted = 0;
    bool blocked = false;
    for (size_t i = 0; i < count; i++) {
        if (blocked) {
            results[i] = LANES_WAIT;
            continue;
        }
        results[i] = lanes_admit(lanes, &requests[i], placements ? &placements[i] : NULL);
        admitted += results[i] == LANES_OK;
        blocked = strict_order && results[i] == LANES_WAIT;
    }
    return admitted;
}

/* Merges lanes of the GPU for the claims that wait, all the way or not at all. */
static void merge_for_claims(const lanes_config_t *config, lanes_state_t *next, int gpu)
{
    lanes_state_t merged;
    if (!config->defragment || !lanes_state_claims_wait(next, config, gpu) ||
        lanes_state_clone(next, &merged) < 0)
        return;
    if (lanes_state_merge_for_claims(&merged, config, gpu)) {
        lanes_state_free(next);
        *next = merged;
    } else {
        lanes_state_free(&merged);
    }
}

lanes_status_t lanes_release(lanes_t *lanes, uint64_t job_id)
{
    lanes_state_t next;
    const lanes_job_t *job = lanes_state_job(&lanes->state, job_id);
    if (!job)
        return LANES_ERROR_UNKNOWN;
    int gpu = job->gpu;
    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    size_t index = (size_t)(lanes_state_job(&next, job_id) - next.jobs);
    memmove(&next.jobs[index], &next.jobs[index + 1],
            (next.job_count - index - 1) * sizeof(lanes_job_t));
    next.job_count--;
    lanes_state_tidy(&next, gpu);
    lanes_state_grow_claims(&next, &lanes->config, gpu); /* what it freed goes to claims first */
    merge_for_claims(&lanes->config, &next, gpu);
    commit(lanes, &next);
    return LANES_OK;
}

/* Tries to keep the job in its lane with its new sizes (the lane grows or shrinks; a claim
 * ends). */
static bool update_in_place(lanes_state_t *state, const lanes_config_t *config, lanes_job_t *job)
{
    const lanes_gpu_t *gpu = lanes_state_gpu(state, job->gpu);
    lanes_state_tidy(state, job->gpu); /* lane size = largest E, this job's new E included */
    uint64_t used = lanes_state_gpu_persistent_bytes(state, config, job->gpu) +
                    lanes_state_gpu_lane_bytes(state, job->gpu);
    return used <= gpu->capacity_bytes;
}

lanes_status_t lanes_update_sizes(lanes_t *lanes, uint64_t job_id, uint64_t persistent_bytes,
                                  uint64_t ephemeral_bytes, lanes_placement_t *placement)
{
    const lanes_config_t *config = &lanes->config;
    lanes_state_t next;
    lanes_status_t status = LANES_NO_LONGER_FITS;
    const lanes_job_t *current = lanes_state_job(&lanes->state, job_id);

    if (!current)
        return LANES_ERROR_UNKNOWN;
    if (persistent_bytes == LANES_SIZE_UNKNOWN)
        persistent_bytes = current->persistent_bytes;
    if (ephemeral_bytes == LANES_SIZE_UNKNOWN)
        ephemeral_bytes = current->ephemeral_bytes;
    int gpu = current->gpu;
    uint32_t old_lane = current->lane_id;
    if (!fits_some_gpu(&lanes->state, gpu,
                       footprint_bytes(config, persistent_bytes, ephemeral_bytes)))
        return LANES_NEVER_FITS;

    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    lanes_job_t *job = lanes_state_job(&next, job_id);
    job->persistent_bytes = persistent_bytes;
    job->ephemeral_bytes = ephemeral_bytes;
    job->provisional = false;
    if (update_in_place(&next, config, job)) {
        lanes_state_grow_claims(&next, config, gpu); /* what a shrink freed: claims first */
        commit(lanes, &next);
        status = LANES_OK;
        goto done;
    }
    lanes_state_free(&next);

    /* Take the job out of its lane (the lane shrinks or closes), then place it again on the
     * same GPU: plainly, else by defragmenting. */
    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    job = lanes_state_job(&next, job_id);
    job->persistent_bytes = persistent_bytes;
    job->ephemeral_bytes = ephemeral_bytes;
    job->provisional = false;
    job->lane_id = LANES_NO_LANE;
    job->gpu = -1;
    lanes_state_tidy(&next, gpu);
    bool placed = lanes_place_plain(&next, config, job, gpu);
    if (!placed && config->defragment)
        placed = lanes_place_defragment(&next, config, job, gpu) >= 0;
    if (placed) {
        lanes_state_tidy(&next, gpu);
        lanes_state_grow_claims(&next, config, gpu);
        commit(lanes, &next);
        status = lanes_state_job(&lanes->state, job_id)->lane_id == old_lane ? LANES_OK
                                                                            : LANES_MOVED;
    }

done:
    lanes_state_free(&next);
    if (status == LANES_OK || status == LANES_MOVED)
        fill_placement(&lanes->state, lanes_state_job(&lanes->state, job_id), placement);
    return status;
}

lanes_status_t lanes_want(lanes_t *lanes, uint64_t job_id, uint64_t claim_bytes,
                          uint64_t held_bytes, lanes_placement_t *placement)
{
    const lanes_config_t *config = &lanes->config;
    const lanes_job_t *current = lanes_state_job(&lanes->state, job_id);
    if (!current)
        return LANES_ERROR_UNKNOWN;
    if (!current->provisional)
        return LANES_ERROR_INVALID;
    if (claim_bytes <= current->ephemeral_bytes) {
        fill_placement(&lanes->state, current, placement);
        return LANES_OK;
    }
    /* never: over its cap, or more than its GPU holds besides its own P and overhead (the
     * other jobs there leave in time) */
    const lanes_gpu_t *gpu = lanes_state_gpu(&lanes->state, current->gpu);
    uint64_t cap = config->provisional_max_bytes ? config->provisional_max_bytes : UINT64_MAX;
    if (current->claim_max_bytes && current->claim_max_bytes < cap)
        cap = current->claim_max_bytes;
    uint64_t own = footprint_bytes(config, current->persistent_bytes, 0);
    if (claim_bytes > cap || own >= gpu->capacity_bytes ||
        claim_bytes > gpu->capacity_bytes - own)
        return LANES_NEVER_FITS;
    lanes_state_t next;
    int gpu_index = current->gpu;
    if (lanes_state_clone(&lanes->state, &next) < 0)
        return LANES_ERROR_NO_MEMORY;
    lanes_job_t *job = lanes_state_job(&next, job_id);
    job->want_bytes = claim_bytes;
    lanes_state_grow_claims(&next, config, gpu_index);
    /* not enough free: merge lanes of the GPU for it, as for a newcomer (all the way, or not) */
    job = lanes_state_job(&next, job_id);
    if (job->ephemeral_bytes < claim_bytes)
        merge_for_claims(config, &next, gpu_index);
    /* still not: it keeps only what it holds, and waits for the rest like a newcomer of that
     * size (the rest of its claim is free for others meanwhile) */
    job = lanes_state_job(&next, job_id);
    if (job->ephemeral_bytes < claim_bytes && held_bytes < job->ephemeral_bytes) {
        job->ephemeral_bytes = held_bytes;
        lanes_state_tidy(&next, gpu_index);
    }
    commit(lanes, &next);
    job = lanes_state_job(&lanes->state, job_id);
    fill_placement(&lanes->state, job, placement);
    return job->ephemeral_bytes >= claim_bytes ? LANES_OK : LANES_WAIT;
}

lanes_status_t lanes_grant(lanes_t *lanes, uint64_t job_id, bool *clear_needed)
{
    size_t at;
    lanes_job_t *job = committed_job(lanes, job_id, &at);
    lanes_lane_t *lane;
    if (clear_needed)
        *clear_needed = false;
    if (!job)
        return LANES_ERROR_UNKNOWN;
    if (job->granted)
        return LANES_OK;
    uint32_t lane_index = lanes->index.valid ? lanes->index.job_lane[at] : UINT32_MAX;
    if (lane_index != UINT32_MAX) {
        /* the index counts the lane's granted jobs (this one is not) */
        if (lanes->index.lane_granted[lane_index] > 0)
            return LANES_ERROR_BUSY;
        lane = &lanes->state.lanes[lane_index];
        lanes->index.lane_granted[lane_index]++;
    } else {
        for (size_t i = 0; i < lanes->state.job_count; i++) {
            const lanes_job_t *other = &lanes->state.jobs[i];
            if (other != job && other->lane_id == job->lane_id && other->granted)
                return LANES_ERROR_BUSY;
        }
        lane = lanes_state_lane(&lanes->state, job->lane_id);
    }
    if (clear_needed)
        *clear_needed = lane->memory_uid != LANES_MEMORY_FRESH &&
                        lane->memory_uid != (long long)job->uid;
    lane->memory_uid = (long long)job->uid;
    job->granted = true;
    return LANES_OK;
}

lanes_status_t lanes_yield(lanes_t *lanes, uint64_t job_id)
{
    size_t at;
    lanes_job_t *job = committed_job(lanes, job_id, &at);
    if (!job)
        return LANES_ERROR_UNKNOWN;
    if (job->granted && lanes->index.valid && lanes->index.job_lane[at] != UINT32_MAX)
        lanes->index.lane_granted[lanes->index.job_lane[at]]--;
    job->granted = false;
    return LANES_OK;
}

lanes_status_t lanes_job_placement(const lanes_t *lanes, uint64_t job_id,
                                   lanes_placement_t *placement)
{
    size_t at;
    const lanes_job_t *job = committed_job(lanes, job_id, &at);
    if (!job)
        return LANES_ERROR_UNKNOWN;
    fill_placement(&lanes->state, job, placement);
    return LANES_OK;
}

lanes_status_t lanes_gpu_info(const lanes_t *lanes, int gpu, lanes_gpu_info_t *info)
{
    const lanes_state_t *state = &lanes->state;
    const lanes_gpu_t *device = lanes_state_gpu(state, gpu);
    if (!device)
        return LANES_ERROR_UNKNOWN;
    memset(info, 0, sizeof(*info));
    info->gpu = gpu;
    info->capacity_bytes = device->capacity_bytes;
    info->persistent_bytes = lanes_state_gpu_persistent_bytes(state, &lanes->config, gpu);
    info->lane_bytes = lanes_state_gpu_lane_bytes(state, gpu);
    info->free_bytes = device->capacity_bytes - info->persistent_bytes - info->lane_bytes;
    info->job_count = lanes_state_gpu_job_count(state, gpu);
    for (size_t i = 0; i < state->lane_count; i++)
        info->lane_count += state->lanes[i].gpu == gpu;
    return LANES_OK;
}

/* The smallest GPU index above `after`, or -1 when none. */
static int next_gpu_index(const lanes_state_t *state, int after)
{
    int best = -1;
    for (size_t i = 0; i < state->gpu_count; i++)
        if (state->gpus[i].index > after && (best < 0 || state->gpus[i].index < best))
            best = state->gpus[i].index;
    return best;
}

size_t lanes_list(const lanes_t *lanes, lanes_lane_info_t *out, size_t capacity)
{
    const lanes_state_t *state = &lanes->state;
    size_t n = 0;
    /* Lanes are kept in id order; list them GPU by GPU. */
    for (int gpu = next_gpu_index(state, -1); gpu >= 0; gpu = next_gpu_index(state, gpu)) {
        for (size_t i = 0; i < state->lane_count && n < capacity; i++) {
            const lanes_lane_t *lane = &state->lanes[i];
            if (lane->gpu != gpu)
                continue;
            lanes_lane_info_t *info = &out[n++];
            memset(info, 0, sizeof(*info));
            info->gpu = gpu;
            info->lane_id = lane->id;
            info->size_bytes = lane->size_bytes;
            info->job_count = lanes_state_lane_job_count(state, lane->id);
            /* (the index knows lanes no job of which is granted) */
            bool none = lanes->index.valid && lanes->index.lane_granted[i] == 0;
            for (size_t j = 0; j < state->job_count && !info->active && !none; j++) {
                if (state->jobs[j].lane_id == lane->id && state->jobs[j].granted) {
                    info->active = true;
                    info->active_job_id = state->jobs[j].id;
                }
            }
        }
    }
    return state->lane_count;
}

size_t lanes_lane_jobs(const lanes_t *lanes, uint32_t lane_id, uint64_t *job_ids, size_t capacity)
{
    size_t count = 0;
    for (size_t i = 0; i < lanes->state.job_count; i++) {
        if (lanes->state.jobs[i].lane_id != lane_id)
            continue;
        if (count < capacity)
            job_ids[count] = lanes->state.jobs[i].id;
        count++;
    }
    return count;
}
