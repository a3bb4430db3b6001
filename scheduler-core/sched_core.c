/* The scheduling core (see sched_core.h): admission rounds, lane holders, turns, budgets,
 * learned sizes and re-layouts, once, for the daemon and the simulator. */
#include "sched_core_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- effects ---------------------------------------------------------------------------- */

void sched_core_effects_clear(sched_core_effects_t *effects)
{
    effects->count = 0;
}

void sched_core_effects_free(sched_core_effects_t *effects)
{
    free(effects->items);
    memset(effects, 0, sizeof(*effects));
}

const char *sched_core_effect_name(sched_core_effect_kind_t kind)
{
    static const char *const names[] = {"admit", "refuse", "grant", "stop-free-run", "budget",
                                        "move", "slot-done", "learned", "gate"};
    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

/* Doubles the effects list: 0, or -ENOMEM (recorded in core->error). */
int core_effects_grow(sched_core_t *core, sched_core_effects_t *fx)
{
    size_t capacity = fx->capacity ? fx->capacity * 2 : 16;
    sched_core_effect_t *items = realloc(fx->items, capacity * sizeof(*items));
    if (!items) {
        core->error = -ENOMEM;
        return -ENOMEM;
    }
    fx->items = items;
    fx->capacity = capacity;
    return 0;
}

/* ---- jobs ------------------------------------------------------------------------------- */

static size_t lower_bound(const sched_core_t *core, uint64_t id)
{
    size_t lo = 0, hi = core->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (core->jobs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

core_job_t *core_find_slow(const sched_core_t *core, uint64_t id)
{
    size_t at = lower_bound(core, id);
    return at < core->count && core->jobs[at].id == id && !core->jobs[at].gone ? &core->jobs[at]
                                                                              : NULL;
}

static void compact(sched_core_t *core)
{
    size_t kept = 0;
    for (size_t i = 0; i < core->count; i++)
        if (!core->jobs[i].gone)
            core->jobs[kept++] = core->jobs[i];
    core->count = kept;
    core->gone_count = 0;
}

/* Forgets the job. Pointers to jobs stay valid until the next compaction, which only
 * add_job runs (between events' work, never while a pointer is held). */
static void forget(sched_core_t *core, uint64_t id)
{
    core_job_t *job = find(core, id);
    if (!job)
        return;
    if (job->group_id)
        core_group_leave(core, job);
    if (!job->admitted) {
        size_t kept = 0;
        for (size_t i = 0; i < core->waiting_count; i++)
            if (core->waiting[i] != id)
                core->waiting[kept++] = core->waiting[i];
        core->waiting_count = kept;
    } else {
        size_t at = 0;
        while (at < core->admitted_count && core->admitted_ids[at] != id)
            at++;
        if (at < core->admitted_count) {
            memmove(&core->admitted_ids[at], &core->admitted_ids[at + 1],
                    (core->admitted_count - at - 1) * sizeof(*core->admitted_ids));
            core->admitted_count--;
        }
    }
    if (job->latency_target_ns)
        core->lc_jobs--;
    job->gone = true;
    job->admitted = false; /* every walk over the jobs looks at admitted ones only */
    core->gone_count++;
}

/* Inserts an admitted job's id in core->admitted_ids (room: grow_scratch keeps it as large as
 * core->jobs). */
static void add_admitted(sched_core_t *core, uint64_t id)
{
    size_t at = core->admitted_count;
    while (at > 0 && core->admitted_ids[at - 1] > id)
        at--;
    memmove(&core->admitted_ids[at + 1], &core->admitted_ids[at],
            (core->admitted_count - at) * sizeof(*core->admitted_ids));
    core->admitted_ids[at] = id;
    core->admitted_count++;
}

static int grow_scratch(sched_core_t *core, size_t needed)
{
    if (needed <= core->scratch_capacity)
        return 0;
    size_t n = core->scratch_capacity ? core->scratch_capacity : 16;
    while (n < needed)
        n *= 2;
#define GROW(field)                                                                            \
    do {                                                                                       \
        void *p = realloc(core->field, n * sizeof(*core->field));                              \
        if (!p)                                                                                \
            return -ENOMEM;                                                                    \
        core->field = p;                                                                       \
    } while (0)
    GROW(jobs);
    GROW(waiting);
    GROW(views);
    GROW(order);
    GROW(members);
    GROW(member_jobs);
    GROW(requests);
    GROW(statuses);
    GROW(user_busy);
    GROW(admitted_ids);
#undef GROW
    core->books_stale = true; /* core->jobs moved: the lane books point into it */
    core->scratch_capacity = n;
    core->capacity = n;
    return 0;
}

/* A job's view for the policy, admitted or not. */
static inline void view_of(const core_job_t *job, policy_job_t *v)
{
    view_of_admitted(job, v);
    if (!job->admitted) {
        v->lane = 0;
        v->runnable = false;
    }
}

/* Appends lane to a list of lanes (grown as needed; out of memory: core->error). */
void core_lane_list_push(sched_core_t *core, uint32_t **items, size_t *count, size_t *capacity,
                         uint32_t lane)
{
    if (*count == *capacity) {
        size_t grown = *capacity ? *capacity * 2 : 16;
        uint32_t *p = realloc(*items, grown * sizeof(*p));
        if (!p) {
            core->error = -ENOMEM;
            return;
        }
        *items = p;
        *capacity = grown;
    }
    (*items)[(*count)++] = lane;
}

void core_touch_slow(sched_core_t *core, uint32_t lane)
{
    for (size_t i = 0; i < core->touched_count; i++)
        if (core->touched[i] == lane)
            return;
    core_lane_list_push(core, &core->touched, &core->touched_count, &core->touched_capacity, lane);
}

/* lanes_config_t.on_change: the books changed at once; jobs follow at their next boundary.
 * Every job of the GPU stops running freely, so that it stops, hands back memory it no longer
 * holds and takes its next turn in its (maybe new) lane. */
static void on_layout_change(void *context, const lanes_change_t *change)
{
    sched_core_t *core = context;
    core->layout_changed = true;
    if (change->kind == LANES_CHANGE_JOB_MOVED) {
        core_job_t *job = find(core, change->job_id);
        if (job && job->admitted) {
            job->lane = change->lane_id;
            emit(core, (sched_core_effect_t){.kind = SCHED_CORE_MOVE, .job_id = job->id,
                                             .gpu = change->gpu, .lane = change->lane_id});
        }
        touch(core, change->old_lane_id);
        touch(core, change->lane_id);
    } else if (change->kind == LANES_CHANGE_LANE_OPENED) {
        touch(core, change->lane_id);
    }
    for (size_t i = 0; i < core->admitted_count; i++) {
        core_job_t *job = find(core, core->admitted_ids[i]);
        if (job && job->gpu == change->gpu)
            stop_free_run(core, job);
    }
}

/* Every admitted job's budget follows its placement: persistent size plus its lane's size. */
static void refresh_budgets(sched_core_t *core)
{
    if (!core->layout_changed)
        return;
    core->layout_changed = false;
    for (size_t i = 0; i < core->admitted_count; i++) {
        core_job_t *job = find(core, core->admitted_ids[i]);
        lanes_placement_t pl;
        if (!job || lanes_job_placement(core->lanes, job->id, &pl) != LANES_OK)
            continue;
        uint64_t budget = pl.persistent_bytes + pl.lane_size_bytes;
        if (budget != job->budget_bytes) {
            job->budget_bytes = budget;
            emit(core, (sched_core_effect_t){.kind = SCHED_CORE_BUDGET, .job_id = job->id,
                                             .gpu = job->gpu, .lane = job->lane,
                                             .budget_bytes = budget});
        }
    }
}

/* ---- turns ------------------------------------------------------------------------------ */

static void add_usage(sched_core_t *core, uint32_t uid, uint64_t busy_ns)
{
    for (size_t i = 0; i < core->usage_count; i++) {
        if (core->usage[i].uid == uid) {
            core->usage[i].busy_ns += busy_ns;
            return;
        }
    }
    if (core->usage_count == core->usage_capacity) {
        size_t capacity = core->usage_capacity ? core->usage_capacity * 2 : 8;
        struct core_usage_s *p = realloc(core->usage, capacity * sizeof(*p));
        if (!p) {
            core->error = -ENOMEM;
            return;
        }
        core->usage = p;
        core->usage_capacity = capacity;
    }
    core->usage[core->usage_count++] = (struct core_usage_s){.uid = uid, .busy_ns = busy_ns};
}

static size_t list_lanes(sched_core_t *core);

/* Rebuilds the lane books from the lane manager (each lane's members in its order). 0, or
 * -ENOMEM (recorded). */
int core_rebuild_lane_books(sched_core_t *core)
{
    int error = core->error;
    size_t lanes = list_lanes(core), members = 0, slots = 16;
    if (core->error != error)
        return core->error; /* out of memory listing the lanes */
    for (size_t i = 0; i < lanes; i++)
        members += core->lane_infos[i].job_count;
    while (slots < 2 * lanes)
        slots *= 2;
    if (lanes > core->lane_book_capacity) {
        core_lane_t *p = realloc(core->lane_books, lanes * 2 * sizeof(*p));
        if (!p)
            goto no_memory;
        core->lane_books = p;
        core->lane_book_capacity = lanes * 2;
    }
    if (members > core->lane_member_capacity) {
        core_job_t **p = realloc(core->lane_members, members * 2 * sizeof(*p));
        if (!p)
            goto no_memory;
        core->lane_members = p;
        core->lane_member_capacity = members * 2;
    }
    if (slots > core->lane_slot_capacity) {
        uint32_t *p = realloc(core->lane_slots, slots * sizeof(*p));
        if (!p)
            goto no_memory;
        core->lane_slots = p;
        core->lane_slot_capacity = slots;
    }
    if (members > core->scratch_capacity && grow_scratch(core, members) < 0)
        goto no_memory;
    memset(core->lane_slots, 0, slots * sizeof(*core->lane_slots));
    core->lane_slot_mask = slots - 1;
    size_t first = 0;
    for (size_t i = 0; i < lanes; i++) {
        core_lane_t *book = &core->lane_books[i];
        size_t n = lanes_lane_jobs(core->lanes, core->lane_infos[i].lane_id, core->members,
                                   members - first);
        if (n > members - first)
            n = members - first; /* cannot happen: lanes_list counted them */
        book->id = core->lane_infos[i].lane_id;
        book->first = (uint32_t)first;
        book->count = 0;
        bool unknown = false;
        for (size_t k = 0; k < n && !unknown; k++) {
            core_job_t *job = find(core, core->members[k]);
            unknown = job == NULL;
            if (job)
                core->lane_members[first + book->count++] = job;
        }
        if (unknown)
            book->count = 0; /* a member the core does not know: the lane is not dispatched */
        first += book->count;
        size_t s = lane_slot_of(book->id, core->lane_slot_mask);
        while (core->lane_slots[s])
            s = (s + 1) & core->lane_slot_mask;
        core->lane_slots[s] = (uint32_t)(i + 1);
    }
    core->lane_book_count = lanes;
    core->books_version = lanes_version(core->lanes);
    core->books_stale = false;
    return 0;
no_memory:
    core->error = -ENOMEM;
    return -ENOMEM;
}

/* If the lane is free, the policy picks among its ready jobs and the pick is granted. If a job
 * holds it and runs freely while others are ready, it must stop at its next boundary. */
static CORE_ALWAYS_INLINE void dispatch_lane(sched_core_t *core, uint32_t lane, uint64_t now_ns)
{
    const core_lane_t *book = lane_book(core, lane);
    if (!book || book->count == 0)
        return;
    core_job_t *const *members = &core->lane_members[book->first];
    size_t n = book->count, ready = 0;
    core_job_t *holder = NULL, *job = NULL;
    for (size_t i = 0; i < n; i++) {
        core_job_t *member = members[i];
        if (member->holds_lane)
            holder = member;
        else if (member->ready) {
            ready++;
            job = member;
        }
    }
    if (ready == 0)
        return;
    if (holder) {
        stop_free_run(core, holder);
        return;
    }
    if (ready > 1) { /* the policy's choice (with one, pick() can only return it) */
        for (size_t i = 0; i < n; i++) { /* (a lane's members are admitted) */
            view_of_admitted(members[i], &core->views[i]);
            core->member_jobs[i] = members[i];
        }
        users_first(core, n);
        int pick = policy_pick(&core->policy, lane, core->views, n, now_ns);
        if (pick < 0 || (size_t)pick >= n || !core->views[pick].runnable)
            return;
        job = members[pick];
    }
    /* alone and measured: it runs on without stopping at its boundaries (a provisional job
     * stops at each until its sizes are learned) */
    grant_job(core, job, ready == 1 && !job->provisional);
}

static void dispatch_touched(sched_core_t *core, uint64_t now_ns)
{
    /* dispatch_lane may touch nothing (grants change no layout): the list is stable */
    if (core->group_count) { /* gangs (sched_core.h): their rules apply on every lane */
        core_gang_pass(core, now_ns);
        for (size_t i = 0; i < core->touched_count; i++)
            core_dispatch_lane_groups(core, core->touched[i], now_ns);
    } else {
        for (size_t i = 0; i < core->touched_count; i++)
            dispatch_lane(core, core->touched[i], now_ns);
    }
    core->touched_count = 0;
}

/* Fills core->lane_infos with every lane; returns how many (0 when out of memory). */
static size_t list_lanes(sched_core_t *core)
{
    size_t n = lanes_list(core->lanes, NULL, 0);
    if (n > core->lane_info_capacity) {
        lanes_lane_info_t *infos = realloc(core->lane_infos, n * 2 * sizeof(*infos));
        if (!infos) {
            core->error = -ENOMEM;
            return 0;
        }
        core->lane_infos = infos;
        core->lane_info_capacity = n * 2;
    }
    return lanes_list(core->lanes, core->lane_infos, core->lane_info_capacity);
}

static void touch_all_lanes(sched_core_t *core)
{
    size_t n = list_lanes(core);
    for (size_t i = 0; i < n; i++)
        touch(core, core->lane_infos[i].lane_id);
}

/* ---- admission -------------------------------------------------------------------------- */

/* Per GPU: memory charged to admitted jobs and the largest lane. A job can only be admitted
 * on a GPU where P + overhead + charged + max(E, largest lane) fits (every lane is as large
 * as its largest E, and the job's lane must hold its E): a necessary condition, so leaving
 * out the jobs that fail it changes nothing for a non-blocking policy, and saves offering
 * hundreds of hopeless jobs to the lane manager after every departure. */
static int read_books(sched_core_t *core)
{
    for (size_t g = 0; g < core->gpu_count; g++) {
        lanes_gpu_info_t info;
        if (lanes_gpu_info(core->lanes, core->gpus[g].gpu, &info) != LANES_OK)
            return -EINVAL;
        core->gpus[g].charged_bytes = info.persistent_bytes;
        core->gpus[g].capacity_bytes = info.capacity_bytes;
        core->gpus[g].jobs = info.job_count;
        core->gpus[g].free_bytes = info.free_bytes;
        core->gpus[g].largest_lane_bytes = 0;
    }
    size_t n = list_lanes(core);
    for (size_t i = 0; i < n; i++)
        for (size_t g = 0; g < core->gpu_count; g++)
            if (core->gpus[g].gpu == core->lane_infos[i].gpu &&
                core->lane_infos[i].size_bytes > core->gpus[g].largest_lane_bytes)
                core->gpus[g].largest_lane_bytes = core->lane_infos[i].size_bytes;
    return 0;
}

static bool may_fit(const sched_core_t *core, const core_job_t *job)
{
    uint64_t p = size_or(job->persistent_hint, 0) + core->job_overhead_bytes;
    uint64_t e = size_or(job->ephemeral_hint, 0);
    uint32_t max_jobs = policy_max_jobs_per_gpu(&core->policy);
    bool fits_alone = false, claim = unknown_sizes(job);
    for (size_t g = 0; g < core->gpu_count; g++) {
        const core_gpu_t *b = &core->gpus[g];
        if (max_jobs != 0 && b->jobs >= max_jobs) {
            fits_alone |= claim ? p < b->capacity_bytes : p + e <= b->capacity_bytes;
            continue;
        }
        if (claim) { /* a lane of its own (a merge may make room: let the lane manager try) */
            uint64_t room = b->capacity_bytes > p ? b->capacity_bytes - p : 0;
            uint64_t floor = core->provisional_min < room ? core->provisional_min : room;
            fits_alone |= room > 0;
            if (room > 0 && b->capacity_bytes - b->charged_bytes >= p + floor)
                return true;
            continue;
        }
        uint64_t lane = e > b->largest_lane_bytes ? e : b->largest_lane_bytes;
        fits_alone |= p + e <= b->capacity_bytes;
        if (b->charged_bytes + p + lane <= b->capacity_bytes)
            return true;
    }
    return !fits_alone; /* let the lane manager refuse it (LANES_NEVER_FITS) */
}

/* ---- users: quotas and the two-level pick ----------------------------------------------- */

/* Memory the user's admitted jobs (this round's included) hold on gpu in the lane manager's
 * books: each job's P + overhead, and each of their lanes once. */
uint64_t core_user_gpu_bytes(sched_core_t *core, uint32_t uid, int gpu)
{
    uint64_t sum = 0;
    size_t lanes = 0; /* lane ids seen, in core->members (unused during admission) */
    for (size_t i = 0; i < core->count; i++) {
        const core_job_t *job = &core->jobs[i];
        lanes_placement_t pl;
        if (job->gone || job->uid != uid || !(job->admitted || job->admitting) ||
            lanes_job_placement(core->lanes, job->id, &pl) != LANES_OK || pl.gpu != gpu)
            continue;
        sum += pl.persistent_bytes + core->job_overhead_bytes;
        size_t k = 0;
        while (k < lanes && core->members[k] != pl.lane_id)
            k++;
        if (k == lanes) {
            core->members[lanes++] = pl.lane_id;
            sum += pl.lane_size_bytes;
        }
    }
    return sum;
}

/* Refuses, at once, the waiting jobs that alone exceed their user's share of every GPU. */
static void refuse_over_share(sched_core_t *core)
{
    if (core->user_gpu_share <= 0 || core->gpu_count == 0)
        return;
    for (size_t i = core->waiting_count; i-- > 0;) { /* forget() keeps earlier slots */
        const core_job_t *job = find(core, core->waiting[i]);
        if (!job || !capped(core, job->uid) || job->group_id) /* (groups: not by share) */
            continue;
        bool fits = false;
        for (size_t g = 0; g < core->gpu_count && !fits; g++)
            fits = need_bytes(core, job) <= share_bytes(core, &core->gpus[g]);
        if (fits)
            continue;
        emit(core, (sched_core_effect_t){
                       .kind = SCHED_CORE_REFUSE, .job_id = job->id,
                       .reason = "the job's memory (persistent + ephemeral) exceeds its user's "
                                 "share of every GPU of this node (user-gpu-share)"});
        forget(core, job->id);
    }
}

/* May the user's job be admitted now under its caps? *gpu: where (LANES_ANY_GPU when every
 * GPU is within the share; else the allowed one where the user holds least; a pinned job's
 * own GPU). */
bool core_within_caps(sched_core_t *core, const core_job_t *job, const core_user_t *user,
                      int *gpu)
{
    *gpu = job->only_gpu;
    if (!capped(core, job->uid))
        return true;
    if (core->user_max_jobs && user->admitted >= core->user_max_jobs)
        return false;
    if (core->user_gpu_share <= 0)
        return true;
    size_t allowed = 0;
    uint64_t least = UINT64_MAX;
    for (size_t g = 0; g < core->gpu_count; g++) {
        if (job->only_gpu != LANES_ANY_GPU && core->gpus[g].gpu != job->only_gpu)
            continue;
        uint64_t held = core_user_gpu_bytes(core, job->uid, core->gpus[g].gpu);
        if (held + need_bytes(core, job) > share_bytes(core, &core->gpus[g]))
            continue;
        allowed++;
        if (held < least) {
            least = held;
            *gpu = core->gpus[g].gpu;
        }
    }
    if (allowed == core->gpu_count && job->only_gpu == LANES_ANY_GPU)
        *gpu = LANES_ANY_GPU;
    return allowed > 0;
}

/* The most a capped user's job of unknown sizes may claim on gpu (LANES_ANY_GPU: on any GPU,
 * the least of them): what its share leaves there, less its known P and overhead. 0: no cap
 * (not capped by share, or sizes known). */
uint64_t core_claim_cap(sched_core_t *core, const core_job_t *job, int gpu)
{
    if (!unknown_sizes(job) || !capped(core, job->uid) || core->user_gpu_share <= 0)
        return 0;
    uint64_t cap = UINT64_MAX;
    uint64_t charge = size_or(job->persistent_hint, 0) + core->job_overhead_bytes;
    for (size_t g = 0; g < core->gpu_count; g++) {
        if (gpu != LANES_ANY_GPU && core->gpus[g].gpu != gpu)
            continue;
        uint64_t share = share_bytes(core, &core->gpus[g]);
        uint64_t held = core_user_gpu_bytes(core, job->uid, core->gpus[g].gpu) + charge;
        uint64_t left = share > held ? share - held : 1;
        if (left < cap)
            cap = left;
    }
    return cap == UINT64_MAX ? 0 : cap;
}

/* The users of the round's n candidates (core->views in the policy's order core->order), with
 * their GPU time and admitted jobs. Returns how many, 0 when out of memory. */
size_t core_round_users(sched_core_t *core, size_t n)
{
    size_t users = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t uid = find(core, core->views[core->order[k]].id)->uid;
        size_t u = 0;
        while (u < users && core->users[u].uid != uid)
            u++;
        if (u < users)
            continue;
        if (users == core->user_capacity) {
            size_t capacity = core->user_capacity ? core->user_capacity * 2 : 8;
            core_user_t *p = realloc(core->users, capacity * sizeof(*p));
            if (!p) {
                core->error = -ENOMEM;
                return 0;
            }
            core->users = p;
            core->user_capacity = capacity;
        }
        core->users[users++] = (core_user_t){.uid = uid, .next = k};
    }
    for (size_t u = 0; u < users; u++)
        core->users[u].busy_ns = user_busy_ns(core, core->users[u].uid);
    for (size_t i = 0; i < core->count; i++) {
        const core_job_t *job = &core->jobs[i];
        if (job->gone || !job->admitted)
            continue;
        for (size_t u = 0; u < users; u++) {
            if (core->users[u].uid == job->uid) {
                core->users[u].admitted++;
                break;
            }
        }
    }
    return users;
}

/* The two-level admission: users first (least GPU time, then fewest admitted jobs, then the
 * policy's order), then the policy's order among the chosen user's jobs; each candidate is
 * checked against its user's caps and offered to the lane manager in that order. Fills
 * core->requests and core->statuses as lanes_admit_in_order would. */
static void admit_by_user(sched_core_t *core, size_t n, bool strict)
{
    size_t users = core_round_users(core, n);
    if (users == 0)
        return;
    bool blocked = false;
    for (size_t step = 0; step < n; step++) {
        core_user_t *user = NULL;
        for (size_t u = 0; u < users; u++) {
            core_user_t *c = &core->users[u];
            if (c->next >= n)
                continue;
            if (!user || c->busy_ns < user->busy_ns ||
                (c->busy_ns == user->busy_ns &&
                 (c->admitted < user->admitted ||
                  (c->admitted == user->admitted && c->next < user->next))))
                user = c;
        }
        core_job_t *job = find(core, core->views[core->order[user->next]].id);
        do /* the user's next candidate in the policy's order */
            user->next++;
        while (user->next < n && find(core, core->views[core->order[user->next]].id)->uid !=
                                     user->uid);
        lanes_request_t *r = &core->requests[step];
        *r = (lanes_request_t){.job_id = job->id, .uid = job->uid,
                               .persistent_bytes = job->persistent_hint,
                               .ephemeral_bytes = job->ephemeral_hint, .gpu = job->only_gpu,
                               .alone = job->latency_target_ns != 0};
        lanes_status_t st = LANES_WAIT;
        job->wait_why = SCHED_CORE_WAIT_ORDER;
        if (!blocked && !core_within_caps(core, job, user, &r->gpu)) {
            job->wait_why = SCHED_CORE_WAIT_USER;
        } else if (!blocked) {
            r->claim_max_bytes = core_claim_cap(core, job, r->gpu);
            st = lanes_admit(core->lanes, r, NULL);
            blocked = strict && st == LANES_WAIT;
            job->wait_why = SCHED_CORE_WAIT_MEMORY;
        }
        if (st == LANES_OK) {
            job->admitting = true;
            user->admitted++;
        }
        core->statuses[step] = st;
    }
}

static void admission_round(sched_core_t *core, uint64_t now_ns)
{
    refuse_over_share(core);
    if (core->waiting_count == 0)
        return;
    bool strict = policy_admission_blocks(&core->policy);
    if (!strict && read_books(core) < 0)
        strict = true; /* cannot filter: offer every job */
    size_t n = 0;
    bool groups = false;
    for (size_t i = 0; i < core->waiting_count; i++) {
        core_job_t *job = find(core, core->waiting[i]);
        /* (a group's ranks are all offered: it is placed whole or not at all) */
        if (job && (strict || job->group_id || may_fit(core, job))) {
            view_of(job, &core->views[n++]);
            groups |= job->group_id != 0;
        } else if (job) {
            job->wait_why = SCHED_CORE_WAIT_MEMORY;
        }
    }
    if (n == 0)
        return;
    policy_admission_order(&core->policy, core->views, n, core->order, now_ns);
    /* one user, none capped: the policy's order as it is (the two-level pick reduces to it) */
    bool by_user = false;
    uint32_t first_uid = find(core, core->views[core->order[0]].id)->uid;
    for (size_t i = 0; i < n && !by_user; i++) {
        uint32_t uid = find(core, core->views[core->order[i]].id)->uid;
        by_user = uid != first_uid || capped(core, uid);
    }
    if (groups) {
        core_admit_with_groups(core, n, strict, by_user);
    } else if (by_user) {
        admit_by_user(core, n, strict);
    } else {
        for (size_t i = 0; i < n; i++) {
            const core_job_t *job = find(core, core->views[core->order[i]].id);
            core->requests[i] = (lanes_request_t){
                .job_id = job->id,
                .uid = job->uid,
                .persistent_bytes = job->persistent_hint,
                .ephemeral_bytes = job->ephemeral_hint,
                .gpu = job->only_gpu,
                .alone = job->latency_target_ns != 0, /* a lane of its own, always */
            };
        }
        lanes_admit_in_order(core->lanes, core->requests, n, strict, core->statuses, NULL);
        /* (strict: the first that waits has no room, those after it wait behind it) */
        bool waited = false;
        for (size_t i = 0; i < n; i++)
            if (core->statuses[i] == LANES_WAIT) {
                find(core, core->requests[i].job_id)->wait_why =
                    waited && strict ? SCHED_CORE_WAIT_ORDER : SCHED_CORE_WAIT_MEMORY;
                waited = true;
            }
    }
    /* Mark the admitted first, then read every placement back: a later admission of this
     * round may have merged an earlier one's lane (its lane and budget changed since). */
    for (size_t i = 0; i < n; i++) {
        core_job_t *job = find(core, core->requests[i].job_id);
        job->admitting = false;
        if (core->statuses[i] == LANES_OK) {
            job->admitted = true;
            add_admitted(core, job->id);
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t id = core->requests[i].job_id;
        core_job_t *job = find(core, id);
        lanes_placement_t pl;
        if (core->statuses[i] == CORE_GROUP_REFUSED) { /* (its REFUSE is out) */
            forget(core, id);
            continue;
        }
        switch (core->statuses[i]) {
        case LANES_OK:
            if (lanes_job_placement(core->lanes, id, &pl) != LANES_OK)
                break;
            job->gpu = pl.gpu;
            job->lane = pl.lane_id;
            job->provisional = pl.provisional;
            job->budget_bytes = pl.persistent_bytes + pl.lane_size_bytes;
            core_gang_wait_stop(job, now_ns);
            emit(core, (sched_core_effect_t){.kind = SCHED_CORE_ADMIT, .job_id = id,
                                             .gpu = pl.gpu, .lane = pl.lane_id,
                                             .budget_bytes = job->budget_bytes});
            break;
        case LANES_WAIT:
            break;
        case LANES_NEVER_FITS:
            emit(core, (sched_core_effect_t){
                           .kind = SCHED_CORE_REFUSE, .job_id = id,
                           .reason = "the job's memory (persistent + ephemeral) exceeds every "
                                     "GPU of this node"});
            forget(core, id);
            break;
        default:
            emit(core, (sched_core_effect_t){.kind = SCHED_CORE_REFUSE, .job_id = id,
                                             .reason = lanes_status_name(core->statuses[i])});
            forget(core, id);
            break;
        }
    }
    /* announce the newcomers now that their lanes are final */
    for (size_t i = 0; i < n; i++) {
        core_job_t *job = core->statuses[i] == LANES_OK ? find(core, core->requests[i].job_id) : NULL;
        if (!job)
            continue;
        policy_job_t v;
        view_of(job, &v);
        policy_job_arrived(&core->policy, &v, now_ns);
        touch(core, job->lane);
    }
    size_t kept = 0;
    for (size_t i = 0; i < core->waiting_count; i++) {
        const core_job_t *job = find(core, core->waiting[i]);
        if (job && !job->admitted)
            core->waiting[kept++] = core->waiting[i];
    }
    if (kept != core->waiting_count)
        core->layout_changed = true; /* the newcomers may have grown lanes of others */
    core->waiting_count = kept;
}

/* bytes rounded up to whole grains (a size too large to round is left as it is: it can never
 * fit anyway) */
static uint64_t whole_grains(uint64_t bytes, uint64_t grain)
{
    if (bytes > UINT64_MAX - grain)
        return bytes;
    return (bytes + grain - 1) / grain * grain;
}

/* Learned sizes: after warm-up, a provisional job's measured sizes replace the provisional
 * ones (it stays in its lane, moves to another of its GPU, or keeps its books if they do not
 * fit now; it is retried at its next boundary). The sizes are rounded up to the grain memory
 * is handed out in: a job that keeps nothing between iterations and allocates a few KiB in
 * each still gets a budget of one whole grain, the least a chunk can be. The persistent size
 * rounds up to whole chunks (persistent_grain_bytes): the blocks a job keeps hold the chunks
 * they sit in, and a job whose next ephemeral block needs a chunk of its own beside them would
 * otherwise be refused it by its own learned budget. */
static bool learn_sizes(sched_core_t *core, core_job_t *job)
{
    if (!job->provisional || job->iterations < core->warmup_iterations)
        return false;
    uint64_t p = whole_grains(job->measured_persistent, core->persistent_grain);
    uint64_t e = whole_grains(job->measured_ephemeral ? job->measured_ephemeral : 1,
                              core->size_grain);
    /* it ran within its claim: rounding never takes its learned sizes past it */
    if (p + e > job->budget_bytes && p < job->budget_bytes)
        e = job->budget_bytes - p;
    lanes_placement_t now;
    flush_yield(core);
    lanes_status_t st = lanes_update_sizes(core->lanes, job->id, p, e, &now);
    sched_core_effect_t fx = {.kind = SCHED_CORE_LEARNED, .job_id = job->id, .gpu = job->gpu,
                              .lane = job->lane, .persistent_bytes = p, .ephemeral_bytes = e};
    if (st == LANES_OK || st == LANES_MOVED) {
        job->provisional = false;
        job->lane = now.lane_id;
        core->layout_changed = true;
        touch(core, now.lane_id);
        fx.lane = now.lane_id;
    } else {
        fx.reason = lanes_status_name(st);
    }
    emit(core, fx);
    return !fx.reason;
}

/* ---- events ----------------------------------------------------------------------------- */

static void begin(sched_core_t *core, sched_core_effects_t *effects)
{
    core->effects = effects;
    core->error = 0;
}

static int end(sched_core_t *core, uint64_t now_ns)
{
    core->now_ns = now_ns;
    refresh_budgets(core);
    dispatch_touched(core, now_ns);
    flush_yield(core);
    if (core->lc_jobs || core->gated_jobs) { /* classes: the gate roles (sched_core_slo.c) */
        core->gates_dirty = true;
        core_gates_settle(core);
    }
    core->effects = NULL;
    return core->error;
}

static int add_job(sched_core_t *core, const sched_core_job_hints_t *hints, uint64_t now_ns)
{
    if (!hints || hints->id == 0)
        return -EINVAL;
    if (find(core, hints->id))
        return -EEXIST;
    if (hints->group.id && core_group_check(core, &hints->group) < 0)
        return -EINVAL;
    /* rarely: a dense array keeps find() at one probe */
    if (core->gone_count > 4096 && core->gone_count * 2 > core->count)
        compact(core);
    if (grow_scratch(core, core->count + 1) < 0)
        return -ENOMEM;
    if (hints->group.id && core_group_join(core, &hints->group, hints->id) < 0)
        return -ENOMEM;
    core->books_stale = true; /* core->jobs moves below: the lane books point into it */
    size_t at = lower_bound(core, hints->id);
    memmove(&core->jobs[at + 1], &core->jobs[at], (core->count - at) * sizeof(*core->jobs));
    core->count++;
    core->jobs[at] = (core_job_t){
        .id = hints->id,
        .uid = hints->uid,
        .persistent_hint = hints->persistent_bytes,
        .ephemeral_hint = hints->ephemeral_bytes,
        .iterations_expected = hints->iterations_expected,
        .iteration_hint_ns = hints->iteration_ns,
        .mean_iteration_ns = hints->iteration_ns,
        .priority = hints->priority,
        .registered_ns = hints->arrival_ns ? hints->arrival_ns : now_ns,
        .gpu = -1,
        .only_gpu = hints->pinned && !hints->group.id ? hints->pinned_gpu : LANES_ANY_GPU,
        .group_id = hints->group.id,
        .rank = hints->group.rank,
        .latency_target_ns = hints->latency_target_ns,
    };
    if (hints->latency_target_ns)
        core->lc_jobs++;
    if (hints->group.id) /* a rank waits for its group until it is admitted */
        core_gang_wait_start(&core->jobs[at], core->jobs[at].registered_ns);
    core->waiting[core->waiting_count++] = hints->id;
    return 0;
}

/* A latency-critical job no GPU can serve within its target is refused at once (sched_core.h,
 * "Classes"). Within an event. */
static void check_latency_target(sched_core_t *core, uint64_t id)
{
    core_job_t *job = find(core, id);
    if (!job || !job->latency_target_ns)
        return;
    const char *reason = core_lc_check(core, job);
    if (!reason)
        return;
    emit(core, (sched_core_effect_t){.kind = SCHED_CORE_REFUSE, .job_id = id, .gpu = -1,
                                     .reason = reason});
    forget(core, id);
}

int sched_core_jobs_registered(sched_core_t *core, const sched_core_job_hints_t *hints,
                               size_t count, uint64_t now_ns, sched_core_effects_t *effects)
{
    int rc = 0;
    size_t added = 0;
    for (size_t i = 0; i < count && rc == 0; i++)
        if ((rc = add_job(core, &hints[i], now_ns)) == 0)
            added++;
    begin(core, effects);
    for (size_t i = 0; i < added; i++)
        check_latency_target(core, hints[i].id);
    admission_round(core, now_ns);
    int rc2 = end(core, now_ns);
    return rc < 0 ? rc : rc2;
}

int sched_core_job_registered(sched_core_t *core, const sched_core_job_hints_t *hints,
                              uint64_t now_ns, sched_core_effects_t *effects)
{
    int rc = add_job(core, hints, now_ns);
    if (rc < 0)
        return rc;
    begin(core, effects);
    check_latency_target(core, hints->id);
    admission_round(core, now_ns);
    return end(core, now_ns);
}

int sched_core_job_boundary(sched_core_t *core, uint64_t job_id,
                            const sched_core_boundary_t *b, uint64_t now_ns,
                            sched_core_effects_t *effects)
{
    core_job_t *job = find(core, job_id);
    if (!job || !b)
        return -ENOENT;
    begin(core, effects);
    if (b->iterations >= job->iterations) {
        if (b->busy_ns > job->busy_ns)
            add_usage(core, job->uid, b->busy_ns - job->busy_ns);
        /* the division first, then the four stores together (two 16-byte stores, from which
         * view_of()'s loads below forward without a stall) */
        uint64_t mean = b->iterations ? b->busy_ns / b->iterations : job->iteration_hint_ns;
        job->iterations = b->iterations;
        job->busy_ns = b->busy_ns;
        job->last_iteration_ns = b->last_iteration_ns;
        job->mean_iteration_ns = mean;
    }
    if (b->persistent_bytes)
        job->measured_persistent = b->persistent_bytes;
    if (b->ephemeral_bytes)
        job->measured_ephemeral = b->ephemeral_bytes;
    if (!job->admitted) {
        job->ready = b->ready;
        return end(core, now_ns);
    }
    if (job->holds_lane) {
        job->holds_lane = false;
        job->free_run = false;
        flush_yield(core);
        core->yield_pending = job->id; /* lanes_yield, unless it takes its lane again now */
        if (core->policy.ops->iteration_done) { /* (the view costs a share of an event) */
            policy_job_t v;
            view_of_admitted(job, &v);
            policy_iteration_done(&core->policy, &v, job->last_iteration_ns, now_ns);
        }
        touch(core, job->lane);
        /* what its claim gave back goes to the waiting jobs */
        if (learn_sizes(core, job))
            admission_round(core, now_ns);
    }
    if (b->ready && !job->ready)
        job->ready_since_ns = now_ns;
    job->ready = b->ready;
    touch(core, job->lane); /* dispatch_lane also stops a free run of its holder */
    if (job->group_id)
        core_group_boundary(core, job, now_ns);
    return end(core, now_ns);
}

int sched_core_job_left(sched_core_t *core, uint64_t job_id, sched_core_exit_t how,
                        uint64_t now_ns, sched_core_effects_t *effects)
{
    (void)how; /* every way out returns the same memory; kept for the policies to come */
    core_job_t *job = find(core, job_id);
    if (!job)
        return 0;
    begin(core, effects);
    if (job->admitted) {
        uint32_t lane = job->lane;
        policy_job_left(&core->policy, job_id, now_ns);
        if (job->holds_lane)
            lanes_yield(core->lanes, job_id);
        lanes_release(core->lanes, job_id);
        core->layout_changed = true;
        touch(core, lane);
    }
    forget(core, job_id);
    admission_round(core, now_ns);
    return end(core, now_ns);
}

int sched_core_job_reattached(sched_core_t *core, const sched_core_job_hints_t *hints,
                              const sched_core_reattach_t *where, uint64_t now_ns,
                              sched_core_effects_t *effects)
{
    if (!where || where->persistent_bytes == LANES_SIZE_UNKNOWN ||
        where->ephemeral_bytes == LANES_SIZE_UNKNOWN)
        return -EINVAL;
    int rc = add_job(core, hints, now_ns);
    if (rc < 0)
        return rc;
    core->waiting_count--; /* add_job queued it last: it is admitted here instead */
    core_job_t *job = find(core, hints->id);
    lanes_request_t request = {.job_id = job->id, .uid = job->uid,
                               .persistent_bytes = where->persistent_bytes,
                               .ephemeral_bytes = where->ephemeral_bytes, .gpu = where->gpu,
                               .alone = job->latency_target_ns != 0};
    lanes_placement_t pl;
    begin(core, effects);
    /* (a latency-critical job, or one whose mate is, takes a lane of its own: a salusd before
     * lanes of their own may have let them share one) */
    const core_job_t *mate = where->lane_of_job ? find(core, where->lane_of_job) : NULL;
    lanes_status_t st = mate && mate->admitted && !request.alone && !mate->latency_target_ns
                            ? lanes_admit_to_lane(core->lanes, &request, mate->lane, &pl)
                            : lanes_admit(core->lanes, &request, &pl);
    if (st != LANES_OK) {
        forget(core, job->id);
        core->effects = NULL;
        return st == LANES_ERROR_NO_MEMORY ? -ENOMEM
               : st == LANES_ERROR_UNKNOWN || st == LANES_ERROR_INVALID ? -EINVAL
                                                                        : -ENOSPC;
    }
    /* the core's usage counts from its own start: a survivor's past GPU time is its own */
    job->admitted = true;
    add_admitted(core, job->id); /* every walk over the admitted jobs sees it (its class too) */
    job->gpu = pl.gpu;
    job->lane = pl.lane_id;
    job->provisional = false;
    job->budget_bytes = pl.persistent_bytes + pl.lane_size_bytes;
    job->iterations = where->iterations;
    job->busy_ns = where->busy_ns;
    job->mean_iteration_ns = where->iterations ? where->busy_ns / where->iterations
                                               : job->iteration_hint_ns;
    job->measured_persistent = where->persistent_bytes;
    job->measured_ephemeral = where->ephemeral_bytes;
    job->gang_wait_since_ns = 0; /* (a rank: it held its place all along) */
    core->layout_changed = true;
    policy_job_t v;
    view_of(job, &v);
    policy_job_arrived(&core->policy, &v, now_ns);
    touch(core, job->lane);
    return end(core, now_ns);
}

/* An event of the cluster's (sched_core_cluster.c): an admission round when asked, then what
 * ends every event (the gang pass serves the slots). */
int core_run_event(sched_core_t *core, bool admit, uint64_t now_ns,
                   sched_core_effects_t *effects)
{
    begin(core, effects);
    if (admit)
        admission_round(core, now_ns);
    return end(core, now_ns);
}

int sched_core_job_wants(sched_core_t *core, uint64_t job_id, uint64_t budget_bytes,
                         uint64_t held_bytes, uint64_t now_ns, sched_core_effects_t *effects)
{
    core_job_t *job = find(core, job_id);
    lanes_placement_t pl;
    if (!job || !job->admitted ||
        lanes_job_placement(core->lanes, job_id, &pl) != LANES_OK)
        return -ENOENT;
    if (budget_bytes <= job->budget_bytes)
        return 0;
    if (!job->provisional || budget_bytes <= pl.persistent_bytes)
        return -ENOSPC;
    begin(core, effects);
    uint64_t held = held_bytes > pl.persistent_bytes ? held_bytes - pl.persistent_bytes : 0;
    lanes_status_t st = lanes_want(core->lanes, job_id, budget_bytes - pl.persistent_bytes,
                                   held, &pl);
    core->layout_changed = true; /* (its budget may have shrunk to what it holds) */
    if (st == LANES_WAIT) /* what it gave back goes to the waiting jobs */
        admission_round(core, now_ns);
    int rc = end(core, now_ns);
    if (rc < 0)
        return rc;
    return st == LANES_OK ? 0 : st == LANES_WAIT ? -EAGAIN
                              : st == LANES_ERROR_NO_MEMORY ? -ENOMEM : -ENOSPC;
}

int sched_core_admit(sched_core_t *core, uint64_t now_ns, sched_core_effects_t *effects)
{
    begin(core, effects);
    admission_round(core, now_ns);
    return end(core, now_ns);
}

int sched_core_set_policy(sched_core_t *core, const char *name, uint64_t now_ns,
                          sched_core_effects_t *effects)
{
    size_t n = 0;
    if (grow_scratch(core, core->count + 1) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < core->count; i++)
        if (core->jobs[i].admitted)
            view_of(&core->jobs[i], &core->views[n++]);
    int rc = policy_switch(&core->policy, name, &core->policy_config, core->views, n, now_ns);
    if (rc < 0)
        return rc;
    lanes_set_max_jobs_per_gpu(core->lanes, policy_max_jobs_per_gpu(&core->policy));
    begin(core, effects);
    admission_round(core, now_ns);
    touch_all_lanes(core);
    core->gates_dirty = true; /* the roles follow the policy's gate_preemption */
    core_gates_settle(core);
    return end(core, now_ns);
}

/* ---- life cycle ------------------------------------------------------------------------- */

void sched_core_config_default(sched_core_config_t *config)
{
    memset(config, 0, sizeof(*config));
    lanes_config_default(&config->lanes);
    config->policy_name = "fifo";
    config->warmup_iterations = SCHED_CORE_DEFAULT_WARMUP_ITERATIONS;
}

void sched_core_config_fit_gpu(sched_core_config_t *config, uint64_t total_bytes)
{
    if (config->lanes.provisional_min_bytes > total_bytes / 2)
        config->lanes.provisional_min_bytes = total_bytes / 2;
}

sched_core_t *sched_core_create(const sched_core_config_t *config, int *error)
{
    sched_core_config_t defaults;
    int rc = -ENOMEM;
    if (!config) {
        sched_core_config_default(&defaults);
        config = &defaults;
    }
    sched_core_t *core = calloc(1, sizeof(*core));
    if (!core)
        goto fail;
    lanes_config_t lc = config->lanes;
    lc.on_change = on_layout_change;
    lc.on_change_context = core;
    core->job_overhead_bytes = lc.job_overhead_bytes;
    core->provisional_min = lc.provisional_min_bytes;
    core->policy_config = config->policy;
    core->warmup_iterations = config->warmup_iterations ? config->warmup_iterations
                                                        : SCHED_CORE_DEFAULT_WARMUP_ITERATIONS;
    core->size_grain = config->size_grain_bytes ? config->size_grain_bytes
                                                : SCHED_CORE_DEFAULT_SIZE_GRAIN_BYTES;
    core->persistent_grain = config->persistent_grain_bytes > core->size_grain
                                 ? config->persistent_grain_bytes
                                 : core->size_grain;
    rc = -EINVAL;
    if (!(config->user_gpu_share >= 0 && config->user_gpu_share <= 1)) /* NaN too */
        goto fail;
    rc = -ENOMEM;
    core->user_gpu_share = config->user_gpu_share;
    core->user_max_jobs = config->user_max_jobs;
    core->quota_exempt_uid = config->quota_exempt_uid;
    core->slot_iterations = config->gang_slot_iterations ? config->gang_slot_iterations
                                                         : SCHED_CORE_DEFAULT_GANG_SLOT_ITERATIONS;
    core->gang_turns_off = config->gang_turns_off;
    core->lanes = lanes_create(&lc);
    if (!core->lanes || grow_scratch(core, 16) < 0)
        goto fail;
    rc = policy_init(&core->policy, config->policy_name ? config->policy_name : "fifo",
                     &core->policy_config);
    if (rc < 0)
        goto fail;
    lanes_set_max_jobs_per_gpu(core->lanes, policy_max_jobs_per_gpu(&core->policy));
    return core;
fail:
    if (error)
        *error = rc;
    sched_core_destroy(core);
    return NULL;
}

void sched_core_destroy(sched_core_t *core)
{
    if (!core)
        return;
    policy_fini(&core->policy);
    lanes_destroy(core->lanes);
    free(core->jobs);
    free(core->waiting);
    free(core->gpus);
    free(core->touched);
    free(core->views);
    free(core->order);
    free(core->members);
    free(core->member_jobs);
    free(core->requests);
    free(core->statuses);
    free(core->user_busy);
    free(core->lane_infos);
    free(core->admitted_ids);
    free(core->lane_books);
    free(core->lane_members);
    free(core->lane_slots);
    free(core->users);
    free(core->usage);
    for (size_t g = 0; g < core->group_count; g++)
        free(core->groups[g].members);
    free(core->groups);
    free(core->group_order);
    free(core->slots);
    free(core->taken_lanes);
    free(core);
}

int sched_core_add_gpu(sched_core_t *core, int gpu, uint64_t total_bytes, uint64_t reserve_bytes)
{
    if (reserve_bytes >= total_bytes)
        return -EINVAL;
    core_gpu_t *gpus = realloc(core->gpus, (core->gpu_count + 1) * sizeof(*gpus));
    if (!gpus)
        return -ENOMEM;
    core->gpus = gpus;
    lanes_status_t st = lanes_add_gpu(core->lanes, gpu, total_bytes, reserve_bytes);
    if (st != LANES_OK)
        return st == LANES_ERROR_NO_MEMORY ? -ENOMEM : -EINVAL;
    core->gpus[core->gpu_count++] = (core_gpu_t){.gpu = gpu,
                                                 .capacity_bytes = total_bytes - reserve_bytes};
    return 0;
}

/* ---- the books -------------------------------------------------------------------------- */

int sched_core_job_info(const sched_core_t *core, uint64_t job_id, sched_core_job_info_t *info)
{
    return sched_core_job_info_at(core, job_id, core->now_ns, info);
}

int sched_core_job_info_at(const sched_core_t *core, uint64_t job_id, uint64_t now_ns,
                           sched_core_job_info_t *info)
{
    const core_job_t *job = find(core, job_id);
    if (!job)
        return -ENOENT;
    memset(info, 0, sizeof(*info));
    if (job->group_id) {
        const core_group_t *group = core_group_find(core, job->group_id);
        if (group)
            info->group = group->hints;
        info->group.rank = job->rank;
        info->gang_wait_ns = job->gang_wait_ns;
        if (job->gang_wait_since_ns && now_ns > job->gang_wait_since_ns)
            info->gang_wait_ns += now_ns - job->gang_wait_since_ns;
    }
    info->id = job->id;
    info->uid = job->uid;
    info->latency_target_ns = job->latency_target_ns;
    info->gate = job->admitted ? job->gate : SCHED_CORE_GATE_NONE;
    info->gpu = job->admitted ? job->gpu : -1;
    info->lane = job->admitted ? job->lane : 0;
    info->budget_bytes = job->admitted ? job->budget_bytes : 0;
    info->free_run = job->free_run;
    info->iterations = job->iterations;
    info->busy_ns = job->busy_ns;
    info->provisional = job->admitted && job->provisional;
    if (!job->admitted) {
        info->phase = SCHED_CORE_WAITING;
        info->waiting_since_ns = job->registered_ns;
        info->wait = (sched_core_wait_t)job->wait_why;
    } else if (job->holds_lane) {
        info->phase = SCHED_CORE_RUNNING;
    } else if (job->ready) {
        info->phase = SCHED_CORE_PARKED;
        info->waiting_since_ns = job->ready_since_ns;
        size_t n = lanes_list(core->lanes, NULL, 0);
        lanes_lane_info_t *infos = n ? calloc(n, sizeof(*infos)) : NULL;
        if (infos) {
            n = lanes_list(core->lanes, infos, n);
            for (size_t i = 0; i < n; i++)
                if (infos[i].lane_id == job->lane && infos[i].active)
                    info->lane_holder = infos[i].active_job_id;
            free(infos);
        }
    } else {
        info->phase = SCHED_CORE_IDLE;
    }
    return 0;
}

const char *sched_core_phase_name(sched_core_job_phase_t phase)
{
    static const char *const names[] = {"waiting", "running", "parked", "idle"};
    return (unsigned)phase < 4 ? names[phase] : "?";
}

const char *sched_core_wait_text(sched_core_wait_t wait, bool alone)
{
    switch (wait) {
    case SCHED_CORE_WAIT_MEMORY:
        return alone ? "no GPU has room for a lane of its own now" : "no GPU has room for it now";
    case SCHED_CORE_WAIT_ORDER:
        return "the policy admits in order: an earlier job waits first";
    case SCHED_CORE_WAIT_USER:
        return "its user has the jobs or the GPU share it may have (user caps)";
    case SCHED_CORE_WAIT_GROUP:
        return "its group is admitted whole: not all its ranks are here yet";
    case SCHED_CORE_WAIT_NONE:
        break;
    }
    return "";
}

const lanes_t *sched_core_lanes(const sched_core_t *core)
{
    return core->lanes;
}

const char *sched_core_policy_name(const sched_core_t *core)
{
    return policy_name(&core->policy);
}

const char *sched_core_rank_name(const sched_core_t *core)
{
    return policy_rank_name(&core->policy);
}

int sched_core_job_rank(const sched_core_t *core, uint64_t job_id, uint64_t now_ns, double *rank)
{
    const core_job_t *job = find(core, job_id);
    if (!job)
        return -ENOENT;
    policy_job_t view;
    view_of(job, &view);
    return policy_job_rank(&core->policy, &view, now_ns, rank) ? 0 : -ENOTSUP;
}

size_t sched_core_job_count(const sched_core_t *core)
{
    return core->count - core->gone_count;
}

long sched_core_policy_save_state(sched_core_t *core, void *buf, size_t cap)
{
    return policy_save_state(&core->policy, buf, cap);
}

int sched_core_policy_load_state(sched_core_t *core, const void *buf, size_t len)
{
    return policy_load_state(&core->policy, buf, len);
}

uint64_t sched_core_gpu_budget_bytes(const sched_core_t *core, int gpu)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < core->admitted_count; i++) {
        const core_job_t *job = find(core, core->admitted_ids[i]);
        if (job && job->gpu == gpu)
            sum += job->budget_bytes;
    }
    return sum;
}
