/* The scheduling core (see sched_core.h): admission rounds, lane holders, turns, budgets,
 * learned sizes and re-layouts, once, for the daemon and the simulator. */
#include "sched_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* For the few helpers of the per-iteration path (dispatch_lane) that the gangs' code calls
 * too: GCC would otherwise stop inlining them there (callgrind on salus-sim: +5 % instructions
 * per event for a core without groups). */
#define CORE_ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct core_job_s {
    uint64_t id;
    bool gone; /* left; removed at the next compaction */
    uint32_t uid;
    uint64_t persistent_hint, ephemeral_hint; /* LANES_SIZE_UNKNOWN when not hinted */
    uint64_t iterations_expected, iteration_hint_ns;
    int32_t priority;
    uint64_t registered_ns;
    bool admitted;
    bool ready;      /* at a boundary, asking for a turn */
    bool holds_lane; /* granted, not back yet */
    bool free_run;
    bool provisional; /* admitted on provisional sizes, not learned yet */
    bool admitting;   /* admitted by the lane manager in the current round, not announced yet */
    int gpu;
    uint32_t lane;
    uint64_t budget_bytes;
    uint64_t ready_since_ns;
    uint64_t iterations, busy_ns, last_iteration_ns;
    uint64_t mean_iteration_ns; /* busy_ns / iterations, or the hint before the first one
                                   (kept: a 64-bit division per view was a share of a run) */
    uint64_t measured_persistent, measured_ephemeral;
    uint64_t grant_version; /* lanes_version() at its last lanes_grant */
    /* groups (all zero for a single job) */
    uint64_t group_id;
    uint32_t rank;
    bool in_slot;   /* granted in its gang's current slot */
    bool owes_turn; /* its gang's slot ended while a single waited on its lane */
    bool ran_free;  /* granted free_run in its gang's slot, no boundary reported since */
    uint64_t slot_start_iterations;
    uint64_t gang_wait_ns, gang_wait_since_ns; /* since: 0 = not held for its group now */
} core_job_t;

/* A distributed job (sched_core.h, "Groups"). */
typedef struct core_group_s {
    sched_core_group_t hints; /* id, world, sync, staleness, share_gpus (rank unused) */
    bool gang;                /* BSP with gang turns on */
    bool reserved;            /* its slot holds its members' lanes */
    bool slot_granted;        /* the slot's members were granted together */
    bool round_seen;          /* handled in the current admission round */
    uint64_t served_ns;       /* when its last slot started (0: never) */
    uint64_t *members;        /* ids of its registered ranks (waiting or admitted) */
    uint32_t member_count;    /* <= hints.world */
} core_group_t;

/* The largest world a group may declare. */
#define CORE_MAX_WORLD 65536u
/* admission_round's statuses for the ranks of a group refused whole (the REFUSE is emitted
 * when the group is decided; the ranks are forgotten with the round's other refusals) */
#define CORE_GROUP_REFUSED ((lanes_status_t)64)

typedef struct core_gpu_s {
    int gpu;
    uint64_t charged_bytes, largest_lane_bytes, capacity_bytes;
    size_t jobs;
} core_gpu_t;

/* A lane's members (the lane books, see struct sched_core_s). */
typedef struct core_lane_s {
    uint32_t id;
    uint32_t first, count; /* core->lane_members[first .. first + count) */
} core_lane_t;

/* A user with jobs among an admission round's candidates (the two-level pick). */
typedef struct core_user_s {
    uint32_t uid;
    uint64_t busy_ns; /* GPU time of the user's jobs since the core started */
    size_t admitted;  /* admitted jobs, this round's included */
    size_t next;      /* position in the policy's order of its next candidate */
} core_user_t;

struct sched_core_s {
    lanes_t *lanes;
    policy_t policy;
    policy_config_t policy_config;
    uint64_t job_overhead_bytes;
    uint64_t provisional_persistent, provisional_ephemeral;
    uint32_t warmup_iterations;
    double user_gpu_share;
    uint32_t user_max_jobs, quota_exempt_uid;
    uint64_t size_grain;
    uint64_t persistent_grain; /* >= size_grain */
    core_job_t *jobs; /* sorted by id; includes `gone` ones until compacted */
    size_t count, capacity, gone_count;
    uint64_t *admitted_ids; /* the admitted jobs, sorted by id (walked on re-layouts) */
    size_t admitted_count;
    /* The lane books: each lane's members in the lane manager's order (lanes_lane_jobs), as
     * pointers into core->jobs, so that a turn (dispatch_lane, once per iteration of every job)
     * walks its lane without asking the lane manager. Rebuilt when stale: the lane manager's
     * books changed (lanes_version) or core->jobs moved (add_job). */
    core_lane_t *lane_books;
    size_t lane_book_count, lane_book_capacity;
    core_job_t **lane_members;
    size_t lane_member_capacity;
    uint32_t *lane_slots; /* open addressing by lane id: index in lane_books + 1, 0 = empty */
    size_t lane_slot_mask, lane_slot_capacity;
    uint64_t books_version;
    bool books_stale;
    /* A job that gave its lane back at the boundary being handled: the lane manager's
     * lanes_yield is deferred to the end of the event, and dropped if the same job is granted
     * the same lane again in it with the books unchanged since its last lanes_grant (the lane
     * manager's answer would be the same: OK, no clearing). 0 = none. */
    uint64_t yield_pending;
    uint64_t *waiting; /* ids, registration order */
    size_t waiting_count;
    core_gpu_t *gpus;
    size_t gpu_count;
    uint32_t *touched; /* lanes to offer to the policy once this event settles */
    size_t touched_count, touched_capacity;
    bool layout_changed;
    int error; /* first allocation failure during an event */
    sched_core_effects_t *effects; /* the current event's list */
    /* scratch, grown with the job count */
    size_t scratch_capacity;
    policy_job_t *views;
    size_t *order;
    uint64_t *members;
    core_job_t **member_jobs; /* dispatch_lane: members[i]'s job (one lookup each) */
    lanes_request_t *requests;
    lanes_status_t *statuses;
    uint64_t *user_busy;
    lanes_lane_info_t *lane_infos;
    size_t lane_info_capacity;
    core_user_t *users;
    size_t user_capacity;
    /* groups (sched_core.h): none in a core that has only single jobs, whose paths then test
     * group_count and nothing else */
    core_group_t *groups;
    size_t group_count, group_capacity;
    uint32_t slot_iterations;
    bool gang_turns_off;
    size_t *group_order;     /* gang_pass: groups in slot order */
    uint32_t *taken_lanes;   /* gang_pass: lanes reserved or claimed by earlier groups */
    size_t taken_count, taken_capacity;
    uint64_t now_ns;         /* the last event's time (sched_core_job_info) */
    /* GPU time of each user's jobs since the core started (the fair share between users) */
    struct core_usage_s {
        uint32_t uid;
        uint64_t busy_ns;
    } *usage;
    size_t usage_count, usage_capacity;
};

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
                                        "move", "learned"};
    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

/* Doubles the effects list: 0, or -ENOMEM (recorded in core->error). */
static int effects_grow(sched_core_t *core, sched_core_effects_t *fx)
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

/* emit() copies every field of sched_core_effect_t: a new field must be added there. */
_Static_assert(sizeof(sched_core_effect_t) == 64, "a new effect field: copy it in emit()");

/* Inlined: one or two effects per event (performance: salus-sim sends ~10^6 events). The
 * fields are copied one by one: the call's compound literal then stays in registers (built on
 * the stack with narrow stores and copied with wide loads, it stalled every call on store
 * forwarding). */
static inline void emit(sched_core_t *core, sched_core_effect_t effect)
{
    sched_core_effects_t *fx = core->effects;
    if (!fx || (fx->count == fx->capacity && effects_grow(core, fx) < 0))
        return;
    sched_core_effect_t *slot = &fx->items[fx->count++];
    slot->kind = effect.kind;
    slot->job_id = effect.job_id;
    slot->gpu = effect.gpu;
    slot->lane = effect.lane;
    slot->budget_bytes = effect.budget_bytes;
    slot->persistent_bytes = effect.persistent_bytes;
    slot->ephemeral_bytes = effect.ephemeral_bytes;
    slot->free_run = effect.free_run;
    slot->clear_needed = effect.clear_needed;
    slot->reason = effect.reason;
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

static core_job_t *find_slow(const sched_core_t *core, uint64_t id)
{
    size_t at = lower_bound(core, id);
    return at < core->count && core->jobs[at].id == id && !core->jobs[at].gone ? &core->jobs[at]
                                                                              : NULL;
}

/* Called several times per event (each member of a lane, each effect): the fast path is
 * inlined. ids are usually dense (the simulator's, or a daemon's recent jobs): the slot
 * id - first id is tried first (an id below the first wraps to a huge guess and misses). */
static inline core_job_t *find(const sched_core_t *core, uint64_t id)
{
    if (core->count == 0)
        return NULL;
    uint64_t guess = id - core->jobs[0].id;
    if (guess < core->count && core->jobs[guess].id == id)
        return core->jobs[guess].gone ? NULL : &core->jobs[guess];
    return find_slow(core, id);
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

/* ---- groups ----------------------------------------------------------------------------- */

static core_group_t *group_find(const sched_core_t *core, uint64_t id)
{
    for (size_t i = 0; i < core->group_count; i++)
        if (core->groups[i].hints.id == id)
            return &core->groups[i];
    return NULL;
}

/* A rank's hints against its group's: 0, or -EINVAL (sched_core_job_registered). */
static int group_check(const sched_core_t *core, const sched_core_group_t *g)
{
    if (g->world == 0 || g->world > CORE_MAX_WORLD || g->rank >= g->world ||
        (unsigned)g->sync > SCHED_CORE_SYNC_ASP)
        return -EINVAL;
    const core_group_t *group = group_find(core, g->id);
    if (!group)
        return 0;
    if (g->world != group->hints.world || g->sync != group->hints.sync ||
        g->share_gpus != group->hints.share_gpus ||
        (g->sync == SCHED_CORE_SYNC_SSP && g->staleness != group->hints.staleness))
        return -EINVAL;
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *job = find(core, group->members[i]);
        if (job && job->rank == g->rank)
            return -EINVAL; /* the same rank twice */
    }
    return 0;
}

/* Adds rank `id` to its group (created at its first rank). 0, or -ENOMEM (nothing changed). */
static int group_join(sched_core_t *core, const sched_core_group_t *g, uint64_t id)
{
    core_group_t *group = group_find(core, g->id);
    if (!group) {
        if (core->group_count == core->group_capacity) {
            size_t capacity = core->group_capacity ? core->group_capacity * 2 : 4;
            core_group_t *groups = realloc(core->groups, capacity * sizeof(*groups));
            if (!groups)
                return -ENOMEM;
            core->groups = groups;
            size_t *order = realloc(core->group_order, capacity * sizeof(*order));
            if (!order)
                return -ENOMEM;
            core->group_order = order;
            core->group_capacity = capacity;
        }
        uint64_t *members = malloc(g->world * sizeof(*members));
        if (!members)
            return -ENOMEM;
        group = &core->groups[core->group_count++];
        *group = (core_group_t){.hints = *g, .members = members,
                                .gang = g->sync == SCHED_CORE_SYNC_BSP && !core->gang_turns_off};
        group->hints.rank = 0;
    }
    group->members[group->member_count++] = id;
    return 0;
}

static void touch(sched_core_t *core, uint32_t lane);

/* The rank is no longer part of its group: the others go on without it (their lanes are
 * offered again: a gang's slot may be over, an SSP group's slowest rank may have changed);
 * the group goes with its last rank. */
static void group_leave(sched_core_t *core, const core_job_t *job)
{
    core_group_t *group = group_find(core, job->group_id);
    if (!group)
        return;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < group->member_count; i++)
        if (group->members[i] != job->id)
            group->members[kept++] = group->members[i];
    group->member_count = kept;
    if (kept == 0) {
        size_t at = (size_t)(group - core->groups);
        free(group->members);
        memmove(&core->groups[at], &core->groups[at + 1],
                (core->group_count - at - 1) * sizeof(*core->groups));
        core->group_count--;
        return;
    }
    for (uint32_t i = 0; i < kept; i++) {
        const core_job_t *member = find(core, group->members[i]);
        if (member && member->admitted)
            touch(core, member->lane);
    }
}

static void gang_wait_start(core_job_t *job, uint64_t now_ns)
{
    if (!job->gang_wait_since_ns)
        job->gang_wait_since_ns = now_ns ? now_ns : 1;
}

static void gang_wait_stop(core_job_t *job, uint64_t now_ns)
{
    if (job->gang_wait_since_ns) {
        if (now_ns > job->gang_wait_since_ns)
            job->gang_wait_ns += now_ns - job->gang_wait_since_ns;
        job->gang_wait_since_ns = 0;
    }
}

/* Forgets the job. Pointers to jobs stay valid until the next compaction, which only
 * add_job runs (between events' work, never while a pointer is held). */
static void forget(sched_core_t *core, uint64_t id)
{
    core_job_t *job = find(core, id);
    if (!job)
        return;
    if (job->group_id)
        group_leave(core, job);
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

/* view_of() for a job known to be admitted (a lane's member at a turn: two tests fewer per
 * member, and a turn builds a view of every member). */
static inline void view_of_admitted(const core_job_t *job, policy_job_t *v)
{
    *v = (policy_job_t){
        .id = job->id,
        .arrival_ns = job->registered_ns,
        .iterations_done = job->iterations,
        .iterations_expected = job->iterations_expected,
        .mean_iteration_ns = job->mean_iteration_ns,
        .attained_ns = job->busy_ns,
        .priority = job->priority,
        .lane = job->lane,
        .runnable = job->ready && !job->holds_lane,
    };
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
static void lane_list_push(sched_core_t *core, uint32_t **items, size_t *count, size_t *capacity,
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

static void touch_slow(sched_core_t *core, uint32_t lane)
{
    for (size_t i = 0; i < core->touched_count; i++)
        if (core->touched[i] == lane)
            return;
    lane_list_push(core, &core->touched, &core->touched_count, &core->touched_capacity, lane);
}

/* Inlined: most events touch one lane, often twice (a boundary's lane). */
static inline void touch(sched_core_t *core, uint32_t lane)
{
    if (core->touched_count == 0 && core->touched_capacity > 0) {
        core->touched[core->touched_count++] = lane;
        return;
    }
    if (core->touched_count == 1 && core->touched[0] == lane)
        return;
    touch_slow(core, lane);
}

static CORE_ALWAYS_INLINE void stop_free_run(sched_core_t *core, core_job_t *job)
{
    if (!job->free_run)
        return;
    job->free_run = false;
    emit(core, (sched_core_effect_t){.kind = SCHED_CORE_STOP_FREE_RUN, .job_id = job->id,
                                     .gpu = job->gpu, .lane = job->lane});
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

/* GPU time of uid's jobs since the core started (the fair share between users). */
static uint64_t user_busy_ns(const sched_core_t *core, uint32_t uid)
{
    for (size_t i = 0; i < core->usage_count; i++)
        if (core->usage[i].uid == uid)
            return core->usage[i].busy_ns;
    return 0;
}

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

/* The two-level pick of a turn in a lane shared by several users: only the jobs of the users
 * whose jobs have held the GPU least stay runnable for the policy's pick among
 * core->views[0..n) (the views of core->member_jobs[0..n)). With one user nothing changes. */
static CORE_ALWAYS_INLINE void users_first(sched_core_t *core, size_t n)
{
    uint64_t least = UINT64_MAX;
    uint32_t first_uid = 0;
    bool several = false, seen = false;
    for (size_t i = 0; i < n; i++) {
        if (!core->views[i].runnable)
            continue;
        uint32_t uid = core->member_jobs[i]->uid;
        several |= seen && uid != first_uid;
        if (!seen)
            first_uid = uid;
        seen = true;
    }
    if (!several)
        return;
    for (size_t i = 0; i < n; i++) {
        core->user_busy[i] = 0;
        if (!core->views[i].runnable)
            continue;
        core->user_busy[i] = user_busy_ns(core, core->member_jobs[i]->uid);
        if (core->user_busy[i] < least)
            least = core->user_busy[i];
    }
    for (size_t i = 0; i < n; i++)
        if (core->views[i].runnable && core->user_busy[i] != least)
            core->views[i].runnable = false;
}

/* Gives the lane manager the lane a job handed back at the boundary being handled (see
 * core->yield_pending). */
static void flush_yield(sched_core_t *core)
{
    if (core->yield_pending) {
        lanes_yield(core->lanes, core->yield_pending);
        core->yield_pending = 0;
    }
}

static size_t lane_slot_of(uint32_t lane, size_t mask)
{
    return (size_t)((lane * 0x9E3779B9u) >> 7) & mask;
}

static size_t list_lanes(sched_core_t *core);

/* Rebuilds the lane books from the lane manager (each lane's members in its order). 0, or
 * -ENOMEM (recorded). */
static int rebuild_lane_books(sched_core_t *core)
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

/* The lane's books (rebuilt first when stale), or NULL when no lane has that id. */
static CORE_ALWAYS_INLINE const core_lane_t *lane_book(sched_core_t *core, uint32_t lane)
{
    if ((core->books_stale || core->books_version != lanes_version(core->lanes)) &&
        rebuild_lane_books(core) < 0)
        return NULL;
    for (size_t s = lane_slot_of(lane, core->lane_slot_mask);; s = (s + 1) & core->lane_slot_mask) {
        uint32_t slot = core->lane_slots[s];
        if (slot == 0)
            return NULL;
        if (core->lane_books[slot - 1].id == lane)
            return &core->lane_books[slot - 1];
    }
}

/* Grants the job its lane (free: the caller checked). false when the lane manager says no. */
static CORE_ALWAYS_INLINE bool grant_job(sched_core_t *core, core_job_t *job, bool free_run)
{
    bool clear_needed = false;
    if (core->yield_pending == job->id && job->grant_version == lanes_version(core->lanes)) {
        /* the same job takes the lane it has just handed back, nothing changed meanwhile: the
         * lane manager still has it granted (the yield and this grant cancel out) */
        core->yield_pending = 0;
    } else {
        flush_yield(core);
        if (lanes_grant(core->lanes, job->id, &clear_needed) != LANES_OK)
            return false;
        job->grant_version = lanes_version(core->lanes);
    }
    job->holds_lane = true;
    job->ready = false;
    job->ready_since_ns = 0;
    job->free_run = free_run;
    emit(core, (sched_core_effect_t){.kind = SCHED_CORE_GRANT, .job_id = job->id,
                                     .gpu = job->gpu, .lane = job->lane, .free_run = free_run,
                                     .clear_needed = clear_needed});
    return true;
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

/* ---- gangs ------------------------------------------------------------------------------ */

/* Is the SSP rank more than S iterations ahead of its group's slowest admitted rank? */
static bool ssp_ahead(const sched_core_t *core, const core_group_t *group, const core_job_t *job)
{
    uint64_t slowest = UINT64_MAX;
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m->iterations < slowest)
            slowest = m->iterations;
    }
    return slowest != UINT64_MAX && job->iterations > slowest &&
           job->iterations - slowest > group->hints.staleness;
}

/* The gang whose slot holds the lane, or NULL. */
static const core_group_t *lane_reserved_by(const sched_core_t *core, uint32_t lane)
{
    for (size_t g = 0; g < core->group_count; g++) {
        const core_group_t *group = &core->groups[g];
        if (!group->reserved)
            continue;
        for (uint32_t i = 0; i < group->member_count; i++) {
            const core_job_t *m = find(core, group->members[i]);
            if (m && m->admitted && m->lane == lane)
                return group;
        }
    }
    return NULL;
}

static void stop_group_free_run(sched_core_t *core, const core_group_t *group)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted)
            stop_free_run(core, m);
    }
}

/* May the policy give this ready job the lane (single jobs, ASP and SSP ranks, BSP ranks with
 * gang turns off)? A gang's rank is granted only by its slot (gang_pass); an SSP rank too far
 * ahead waits for its slowest rank. */
static bool takes_single_turns(sched_core_t *core, core_job_t *job, uint64_t now_ns)
{
    const core_group_t *group = job->group_id ? group_find(core, job->group_id) : NULL;
    if (!group)
        return true;
    if (group->gang)
        return false;
    if (group->hints.sync == SCHED_CORE_SYNC_SSP && ssp_ahead(core, group, job)) {
        gang_wait_start(job, now_ns);
        return false;
    }
    return true;
}

/* dispatch_lane while groups exist: a lane reserved for a gang's slot is granted to nobody
 * else (its holder is told to stop), gangs' ranks wait for their slot, SSP ranks too far
 * ahead wait; the policy picks among the rest. */
static void dispatch_lane_groups(sched_core_t *core, uint32_t lane, uint64_t now_ns)
{
    const core_lane_t *book = lane_book(core, lane);
    if (!book || book->count == 0)
        return;
    core_job_t *const *members = &core->lane_members[book->first];
    /* waiting: ready jobs; asking: those that want the lane now (not a gang's rank whose gang
     * has not reserved it, not an SSP rank held for its slowest) */
    size_t n = book->count, waiting = 0, asking = 0, candidates = 0;
    core_job_t *holder = NULL, *job = NULL;
    const core_group_t *reserved = lane_reserved_by(core, lane);
    for (size_t i = 0; i < n; i++) {
        core_job_t *m = members[i];
        view_of_admitted(m, &core->views[i]);
        core->member_jobs[i] = m;
        core->views[i].runnable = false;
        if (m->holds_lane) {
            holder = m;
        } else if (m->ready) {
            waiting++;
            const core_group_t *group = m->group_id ? group_find(core, m->group_id) : NULL;
            if (group && group->gang) {
                asking += group->reserved;
            } else if (takes_single_turns(core, m, now_ns)) {
                asking++;
                if (!reserved) {
                    core->views[i].runnable = true;
                    candidates++;
                    job = m;
                }
            }
        }
    }
    if (waiting == 0)
        return;
    if (holder) {
        /* a gang runs freely only while nobody waits on its lanes (another gang's ranks too:
         * that gang cannot reserve before this one's slot is over); a single job until a job
         * asks for the lane (a gang that reserves it stops it in gang_start_slot) */
        const core_group_t *group = holder->group_id ? group_find(core, holder->group_id) : NULL;
        if (group && group->gang)
            stop_group_free_run(core, group);
        else if (asking)
            stop_free_run(core, holder);
        return;
    }
    if (candidates == 0)
        return;
    if (candidates > 1) {
        users_first(core, n);
        int pick = policy_pick(&core->policy, lane, core->views, n, now_ns);
        if (pick < 0 || (size_t)pick >= n || !core->views[pick].runnable)
            return;
        job = members[pick];
    }
    const core_group_t *group = job->group_id ? group_find(core, job->group_id) : NULL;
    bool ssp = group && group->hints.sync == SCHED_CORE_SYNC_SSP; /* (free, it would run ahead) */
    gang_wait_stop(job, now_ns);
    if (!grant_job(core, job, waiting == 1 && !job->provisional && !ssp))
        return;
    for (size_t i = 0; i < n; i++)
        members[i]->owes_turn = false; /* the lane's single turn after a gang slot was given */
}

/* Does a job that takes single turns wait on the lane (ready, grantable)? */
static bool single_waits(sched_core_t *core, uint32_t lane, uint64_t now_ns)
{
    const core_lane_t *book = lane_book(core, lane);
    if (!book)
        return false;
    for (size_t i = 0; i < book->count; i++) {
        core_job_t *m = core->lane_members[book->first + i];
        if (m->ready && !m->holds_lane && takes_single_turns(core, m, now_ns))
            return true;
    }
    return false;
}

/* Are all the gang's admitted ranks ready (and is there one)? */
static bool gang_all_ready(sched_core_t *core, const core_group_t *group)
{
    size_t admitted = 0;
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (!m || !m->admitted)
            continue;
        if (!m->ready || m->holds_lane)
            return false;
        admitted++;
    }
    return admitted > 0;
}

/* Has every rank of the slot done its slot's iterations (and handed its lane back)? */
static bool gang_slot_over(sched_core_t *core, const core_group_t *group)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m->in_slot &&
            (m->holds_lane || m->iterations - m->slot_start_iterations < core->slot_iterations))
            return false;
    }
    return true;
}

/* Does a single job wait for its turn on a lane of the gang that its last slot held? (Then
 * the gang lets that turn go first.) */
static bool gang_owes_turn(sched_core_t *core, const core_group_t *group, uint64_t now_ns)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m->owes_turn && single_waits(core, m->lane, now_ns))
            return true;
    }
    return false;
}

/* Do two ranks of the gang share a lane (share_gpus)? They could never hold it together. */
static bool gang_shares_a_lane(sched_core_t *core, const core_group_t *group)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *a = find(core, group->members[i]);
        for (uint32_t k = i + 1; a && a->admitted && k < group->member_count; k++) {
            const core_job_t *b = find(core, group->members[k]);
            if (b && b->admitted && b->lane == a->lane)
                return true;
        }
    }
    return false;
}

static bool lane_taken(const sched_core_t *core, uint32_t lane)
{
    for (size_t i = 0; i < core->taken_count; i++)
        if (core->taken_lanes[i] == lane)
            return true;
    return false;
}

static bool gang_lanes_taken(sched_core_t *core, const core_group_t *group)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && lane_taken(core, m->lane))
            return true;
    }
    return false;
}

static void take_gang_lanes(sched_core_t *core, const core_group_t *group)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (!m || !m->admitted || lane_taken(core, m->lane))
            continue;
        lane_list_push(core, &core->taken_lanes, &core->taken_count, &core->taken_capacity,
                       m->lane);
    }
}

/* A reserved gang whose slot has not started: when every rank is ready and every one of their
 * lanes is free, all are granted now, in this event; a lane's other holder is told to stop. */
static void gang_start_slot(sched_core_t *core, core_group_t *group, uint64_t now_ns)
{
    bool free = true, alone = true;
    if (!gang_all_ready(core, group)) { /* a rank stepped back (or left): the lanes go back */
        group->reserved = false;
        for (uint32_t i = 0; i < group->member_count; i++) {
            const core_job_t *m = find(core, group->members[i]);
            if (m && m->admitted)
                touch(core, m->lane);
        }
        return;
    }
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        const core_lane_t *book = m && m->admitted ? lane_book(core, m->lane) : NULL;
        if (!book)
            continue;
        alone &= !m->provisional;
        for (size_t k = 0; k < book->count; k++) {
            core_job_t *other = core->lane_members[book->first + k];
            if (other->group_id == group->hints.id)
                continue;
            if (other->holds_lane) {
                free = false;
                stop_free_run(core, other);
            } else if (other->ready) {
                alone = false; /* someone else waits: the gang stops at each boundary */
            }
        }
    }
    if (!free)
        return;
    if (gang_shares_a_lane(core, group)) {
        /* (share_gpus, ranks put in one lane) they could never hold it together: the group's
         * ranks take turns as single jobs */
        group->gang = false;
        group->reserved = false;
        for (uint32_t i = 0; i < group->member_count; i++) {
            const core_job_t *m = find(core, group->members[i]);
            if (m && m->admitted)
                touch(core, m->lane);
        }
        return;
    }
    group->slot_granted = true;
    group->served_ns = now_ns;
    for (uint32_t i = 0; i < group->member_count; i++) {
        core_job_t *m = find(core, group->members[i]);
        if (!m || !m->admitted)
            continue;
        m->in_slot = true;
        m->owes_turn = false;
        m->slot_start_iterations = m->iterations;
        m->ran_free = alone;
        gang_wait_stop(m, now_ns);
        grant_job(core, m, alone);
    }
}

/* Does a rank of the slot still run an iteration that may need `m` (its collective waits for
 * every rank)? A rank that holds its lane runs its iteration number `iterations` (counted
 * from 0), or, if it ran freely, one that the core has not been told. */
static bool gang_peer_needs(sched_core_t *core, const core_group_t *group, const core_job_t *m)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *p = find(core, group->members[i]);
        if (p && p != m && p->admitted && p->in_slot && p->holds_lane &&
            (p->ran_free || m->iterations <= p->iterations))
            return true;
    }
    return false;
}

/* Inside its slot a rank that comes back ready is granted again at once (its lane is kept for
 * it, also across a release) while it has slot iterations left, or while a rank of its slot
 * may wait for it in a collective (after a free run was stopped the ranks may stand an
 * iteration apart); the slot is over when none holds its lane. */
static void gang_continue_slot(sched_core_t *core, core_group_t *group, uint64_t now_ns)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m->in_slot && m->ready && !m->holds_lane &&
            (m->iterations - m->slot_start_iterations < core->slot_iterations ||
             gang_peer_needs(core, group, m))) {
            gang_wait_stop(m, now_ns);
            grant_job(core, m, false);
        }
    }
}

/* Gang turns, once per event while groups exist (before the touched lanes are dispatched):
 * slots that are over give their lanes back; then, in the global order (least recently served
 * first, then the lower group id), each gang whose ranks are all ready reserves their lanes
 * unless an earlier gang holds or claims one of them (then it claims them, so that no later
 * gang takes them from it); reserved gangs are granted together or go on with their slot. */
static void gang_pass(sched_core_t *core, uint64_t now_ns)
{
    size_t count = 0;
    for (size_t g = 0; g < core->group_count; g++) {
        core_group_t *group = &core->groups[g];
        if (!group->gang)
            continue;
        if (group->reserved && group->slot_granted && gang_slot_over(core, group)) {
            group->reserved = group->slot_granted = false;
            for (uint32_t i = 0; i < group->member_count; i++) {
                core_job_t *m = find(core, group->members[i]);
                if (!m || !m->admitted)
                    continue;
                m->in_slot = false;
                m->owes_turn = single_waits(core, m->lane, now_ns);
                touch(core, m->lane); /* back to the policy */
            }
        }
        /* insertion sort: least recently served first, then the lower id */
        size_t at = count++;
        while (at > 0) {
            const core_group_t *before = &core->groups[core->group_order[at - 1]];
            if (before->served_ns < group->served_ns ||
                (before->served_ns == group->served_ns && before->hints.id < group->hints.id))
                break;
            core->group_order[at] = core->group_order[at - 1];
            at--;
        }
        core->group_order[at] = g;
    }
    core->taken_count = 0;
    for (size_t k = 0; k < count; k++)
        if (core->groups[core->group_order[k]].reserved)
            take_gang_lanes(core, &core->groups[core->group_order[k]]);
    for (size_t k = 0; k < count; k++) {
        core_group_t *group = &core->groups[core->group_order[k]];
        if (group->reserved || !gang_all_ready(core, group) || gang_owes_turn(core, group, now_ns))
            continue;
        if (!gang_lanes_taken(core, group)) {
            group->reserved = true;
            group->slot_granted = false;
        }
        take_gang_lanes(core, group);
    }
    for (size_t k = 0; k < count; k++) {
        core_group_t *group = &core->groups[core->group_order[k]];
        if (group->reserved && !group->slot_granted)
            gang_start_slot(core, group, now_ns);
        else if (group->reserved)
            gang_continue_slot(core, group, now_ns);
    }
}

static void dispatch_touched(sched_core_t *core, uint64_t now_ns)
{
    /* dispatch_lane may touch nothing (grants change no layout): the list is stable */
    if (core->group_count) { /* gangs (sched_core.h): their rules apply on every lane */
        gang_pass(core, now_ns);
        for (size_t i = 0; i < core->touched_count; i++)
            dispatch_lane_groups(core, core->touched[i], now_ns);
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

static uint64_t size_or(uint64_t hinted, uint64_t provisional)
{
    return hinted == LANES_SIZE_UNKNOWN ? provisional : hinted;
}

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
    uint64_t p = size_or(job->persistent_hint, core->provisional_persistent) +
                 core->job_overhead_bytes;
    uint64_t e = size_or(job->ephemeral_hint, core->provisional_ephemeral);
    uint32_t max_jobs = policy_max_jobs_per_gpu(&core->policy);
    bool fits_alone = false;
    for (size_t g = 0; g < core->gpu_count; g++) {
        const core_gpu_t *b = &core->gpus[g];
        uint64_t lane = e > b->largest_lane_bytes ? e : b->largest_lane_bytes;
        fits_alone |= p + e <= b->capacity_bytes;
        if ((max_jobs == 0 || b->jobs < max_jobs) && b->charged_bytes + p + lane <= b->capacity_bytes)
            return true;
    }
    return !fits_alone; /* let the lane manager refuse it (LANES_NEVER_FITS) */
}

/* ---- users: quotas and the two-level pick ----------------------------------------------- */

static bool capped(const sched_core_t *core, uint32_t uid)
{
    return uid != 0 && uid != core->quota_exempt_uid &&
           (core->user_gpu_share > 0 || core->user_max_jobs > 0);
}

static uint64_t share_bytes(const sched_core_t *core, const core_gpu_t *gpu)
{
    return (uint64_t)((double)gpu->capacity_bytes * core->user_gpu_share);
}

/* What a newcomer is counted for: P + overhead + E, as if it opened a lane of its own. */
static uint64_t need_bytes(const sched_core_t *core, const core_job_t *job)
{
    return size_or(job->persistent_hint, core->provisional_persistent) +
           core->job_overhead_bytes + size_or(job->ephemeral_hint, core->provisional_ephemeral);
}

/* Memory the user's admitted jobs (this round's included) hold on gpu in the lane manager's
 * books: each job's P + overhead, and each of their lanes once. */
static uint64_t user_gpu_bytes(sched_core_t *core, uint32_t uid, int gpu)
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
 * GPU is within the share; else the allowed one where the user holds least). */
static bool within_caps(sched_core_t *core, const core_job_t *job, const core_user_t *user,
                        int *gpu)
{
    *gpu = LANES_ANY_GPU;
    if (!capped(core, job->uid))
        return true;
    if (core->user_max_jobs && user->admitted >= core->user_max_jobs)
        return false;
    if (core->user_gpu_share <= 0)
        return true;
    size_t allowed = 0;
    uint64_t least = UINT64_MAX;
    for (size_t g = 0; g < core->gpu_count; g++) {
        uint64_t held = user_gpu_bytes(core, job->uid, core->gpus[g].gpu);
        if (held + need_bytes(core, job) > share_bytes(core, &core->gpus[g]))
            continue;
        allowed++;
        if (held < least) {
            least = held;
            *gpu = core->gpus[g].gpu;
        }
    }
    if (allowed == core->gpu_count)
        *gpu = LANES_ANY_GPU;
    return allowed > 0;
}

/* The users of the round's n candidates (core->views in the policy's order core->order), with
 * their GPU time and admitted jobs. Returns how many, 0 when out of memory. */
static size_t round_users(sched_core_t *core, size_t n)
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
    size_t users = round_users(core, n);
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
                               .ephemeral_bytes = job->ephemeral_hint, .gpu = LANES_ANY_GPU};
        lanes_status_t st = LANES_WAIT;
        if (!blocked && within_caps(core, job, user, &r->gpu)) {
            st = lanes_admit(core->lanes, r, NULL);
            blocked = strict && st == LANES_WAIT;
        }
        if (st == LANES_OK) {
            job->admitting = true;
            user->admitted++;
        }
        core->statuses[step] = st;
    }
}

/* Places a group's waiting ranks (requests[0..count), in the round's order), all or none:
 * first on a scratch copy of the books (nothing reported), each rank on a GPU that no other
 * rank of the group has (unless share_gpus), the free GPUs with the fewest jobs first; when
 * every rank has a place, the same calls on the books place them there (same books, same
 * calls, same places). true when placed; else the books are as they were. */
static bool place_group(sched_core_t *core, const core_group_t *group, lanes_request_t *requests,
                        size_t count)
{
    bool placed = false;
    size_t used_count = 0;
    lanes_t *scratch = lanes_clone(core->lanes);
    int *used = malloc((group->member_count + 1) * sizeof(*used)); /* GPUs the group holds */
    int *gpus = malloc((core->gpu_count + 1) * sizeof(*gpus));
    size_t *jobs = malloc((core->gpu_count + 1) * sizeof(*jobs));
    /* a capped user's ranks stay within its share of each GPU, as its single jobs do
     * (within_caps): what the user holds there, and what this group's ranks placed before */
    bool by_share = count > 0 && core->user_gpu_share > 0 && capped(core, requests[0].uid);
    uint64_t *extra = calloc(core->gpu_count + 1, sizeof(*extra));
    if (!scratch || !used || !gpus || !jobs || !extra) {
        core->error = -ENOMEM;
        goto done;
    }
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted)
            used[used_count++] = m->gpu;
    }
    for (size_t i = 0; i < count; i++) {
        lanes_request_t *r = &requests[i];
        lanes_status_t st = LANES_WAIT;
        uint64_t need = by_share ? need_bytes(core, find(core, r->job_id)) : 0;
        if (group->hints.share_gpus && !by_share) {
            r->gpu = LANES_ANY_GPU;
            st = lanes_admit(scratch, r, NULL);
        } else {
            size_t n = 0;
            for (size_t g = 0; g < core->gpu_count; g++) {
                int gpu = core->gpus[g].gpu;
                lanes_gpu_info_t info;
                bool taken = false;
                for (size_t u = 0; u < used_count && !taken && !group->hints.share_gpus; u++)
                    taken = used[u] == gpu;
                if (!taken && by_share)
                    taken = user_gpu_bytes(core, r->uid, gpu) + extra[g] + need >
                            share_bytes(core, &core->gpus[g]);
                if (taken || lanes_gpu_info(scratch, gpu, &info) != LANES_OK)
                    continue;
                size_t at = n++;
                while (at > 0 && (jobs[at - 1] > info.job_count ||
                                  (jobs[at - 1] == info.job_count && gpus[at - 1] > gpu))) {
                    gpus[at] = gpus[at - 1];
                    jobs[at] = jobs[at - 1];
                    at--;
                }
                gpus[at] = gpu;
                jobs[at] = info.job_count;
            }
            for (size_t k = 0; k < n && st != LANES_OK; k++) {
                r->gpu = gpus[k]; /* (WAIT and NEVER_FITS change nothing) */
                st = lanes_admit(scratch, r, NULL);
            }
        }
        lanes_placement_t pl;
        if (st != LANES_OK || lanes_job_placement(scratch, r->job_id, &pl) != LANES_OK)
            goto done;
        used[used_count++] = pl.gpu;
        for (size_t g = 0; g < core->gpu_count && by_share; g++)
            if (core->gpus[g].gpu == pl.gpu)
                extra[g] += need;
    }
    for (size_t i = 0; i < count; i++) {
        if (lanes_admit(core->lanes, &requests[i], NULL) != LANES_OK) {
            /* cannot happen (the scratch copy said yes); out of memory at worst */
            while (i-- > 0)
                lanes_release(core->lanes, requests[i].job_id);
            goto done;
        }
    }
    placed = true;
done:
    lanes_destroy(scratch);
    free(extra);
    free(used);
    free(gpus);
    free(jobs);
    return placed;
}

/* A group met in an admission round at its first rank in the round's order: its waiting
 * ranks are core->requests[first .. first + count) (statuses LANES_WAIT). It is refused whole
 * when it can never be placed, waits whole until all its ranks have registered and all fit,
 * else all are placed. */
static void admit_group(sched_core_t *core, const core_group_t *group, size_t first,
                        size_t count, core_user_t *user, bool strict, bool *blocked)
{
    const char *refusal = NULL;
    if (!group->hints.share_gpus && group->hints.world > core->gpu_count)
        refusal = "the group has more ranks than this node has GPUs (and its ranks may not "
                  "share a GPU)";
    else if (capped(core, core->requests[first].uid) && core->user_max_jobs &&
             group->hints.world > core->user_max_jobs)
        refusal = "the group has more ranks than its user may have jobs admitted at once "
                  "(user-max-jobs)";
    for (size_t i = 0; i < count && !refusal; i++) {
        const core_job_t *rank = find(core, core->requests[first + i].job_id);
        bool fits = false;
        for (size_t g = 0; g < core->gpu_count && !fits; g++)
            fits = need_bytes(core, rank) <= core->gpus[g].capacity_bytes;
        if (!fits)
            refusal = "a rank of the group needs more memory (persistent + ephemeral) than "
                      "any GPU of this node has";
        fits = !(core->user_gpu_share > 0 && capped(core, rank->uid));
        for (size_t g = 0; g < core->gpu_count && !fits && !refusal; g++)
            fits = need_bytes(core, rank) <= share_bytes(core, &core->gpus[g]);
        if (!fits && !refusal)
            refusal = "a rank of the group needs more memory (persistent + ephemeral) than its "
                      "user's share of any GPU of this node (user-gpu-share)";
    }
    if (refusal) {
        for (size_t i = 0; i < count; i++) {
            emit(core, (sched_core_effect_t){.kind = SCHED_CORE_REFUSE,
                                             .job_id = core->requests[first + i].job_id,
                                             .reason = refusal});
            core->statuses[first + i] = CORE_GROUP_REFUSED;
        }
        return;
    }
    const core_job_t *lead = find(core, core->requests[first].job_id);
    if (*blocked || group->member_count < group->hints.world ||
        (user && capped(core, lead->uid) && core->user_max_jobs &&
         user->admitted + count > core->user_max_jobs) ||
        !place_group(core, group, &core->requests[first], count)) {
        *blocked |= strict; /* a group that waits blocks the jobs after it, as one job would */
        return;
    }
    for (size_t i = 0; i < count; i++) {
        core->statuses[first + i] = LANES_OK;
        find(core, core->requests[first + i].job_id)->admitting = true;
    }
    if (user)
        user->admitted += count;
}

/* An admission round with groups among the candidates: the policy's order (the users' pick
 * among the jobs is not applied while a group waits; their caps are), each group at the place
 * of its first rank. Fills core->requests and core->statuses as lanes_admit_in_order would. */
static void admit_with_groups(sched_core_t *core, size_t n, bool strict, bool by_user)
{
    size_t users = by_user ? round_users(core, n) : 0;
    bool blocked = false;
    size_t step = 0;
    for (size_t g = 0; g < core->group_count; g++)
        core->groups[g].round_seen = false;
    for (size_t k = 0; k < n; k++) {
        core_job_t *job = find(core, core->views[core->order[k]].id);
        core_user_t *user = NULL;
        for (size_t u = 0; u < users && !user; u++)
            if (core->users[u].uid == job->uid)
                user = &core->users[u];
        core_group_t *group = job->group_id ? group_find(core, job->group_id) : NULL;
        if (group) {
            if (group->round_seen)
                continue; /* (placed with its first rank) */
            group->round_seen = true;
            size_t first = step;
            for (size_t k2 = k; k2 < n; k2++) {
                const core_job_t *rank = find(core, core->views[core->order[k2]].id);
                if (rank->group_id != job->group_id)
                    continue;
                core->requests[step] = (lanes_request_t){
                    .job_id = rank->id, .uid = rank->uid,
                    .persistent_bytes = rank->persistent_hint,
                    .ephemeral_bytes = rank->ephemeral_hint, .gpu = LANES_ANY_GPU};
                core->statuses[step++] = LANES_WAIT;
            }
            admit_group(core, group, first, step - first, user, strict, &blocked);
            continue;
        }
        lanes_request_t *r = &core->requests[step];
        *r = (lanes_request_t){.job_id = job->id, .uid = job->uid,
                               .persistent_bytes = job->persistent_hint,
                               .ephemeral_bytes = job->ephemeral_hint, .gpu = LANES_ANY_GPU};
        lanes_status_t st = LANES_WAIT;
        if (!blocked && (!user || within_caps(core, job, user, &r->gpu))) {
            st = lanes_admit(core->lanes, r, NULL);
            blocked = strict && st == LANES_WAIT;
        }
        if (st == LANES_OK) {
            job->admitting = true;
            if (user)
                user->admitted++;
        }
        core->statuses[step++] = st;
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
        const core_job_t *job = find(core, core->waiting[i]);
        /* (a group's ranks are all offered: it is placed whole or not at all) */
        if (job && (strict || job->group_id || may_fit(core, job))) {
            view_of(job, &core->views[n++]);
            groups |= job->group_id != 0;
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
        admit_with_groups(core, n, strict, by_user);
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
                .gpu = LANES_ANY_GPU,
            };
        }
        lanes_admit_in_order(core->lanes, core->requests, n, strict, core->statuses, NULL);
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
            gang_wait_stop(job, now_ns);
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
static void learn_sizes(sched_core_t *core, core_job_t *job)
{
    if (!job->provisional || job->iterations < core->warmup_iterations)
        return;
    uint64_t p = whole_grains(job->measured_persistent, core->persistent_grain);
    uint64_t e = whole_grains(job->measured_ephemeral ? job->measured_ephemeral : 1,
                              core->size_grain);
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
    core->effects = NULL;
    return core->error;
}

static int add_job(sched_core_t *core, const sched_core_job_hints_t *hints, uint64_t now_ns)
{
    if (!hints || hints->id == 0)
        return -EINVAL;
    if (find(core, hints->id))
        return -EEXIST;
    if (hints->group.id && group_check(core, &hints->group) < 0)
        return -EINVAL;
    /* rarely: a dense array keeps find() at one probe */
    if (core->gone_count > 4096 && core->gone_count * 2 > core->count)
        compact(core);
    if (grow_scratch(core, core->count + 1) < 0)
        return -ENOMEM;
    if (hints->group.id && group_join(core, &hints->group, hints->id) < 0)
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
        .group_id = hints->group.id,
        .rank = hints->group.rank,
    };
    if (hints->group.id) /* a rank waits for its group until it is admitted */
        gang_wait_start(&core->jobs[at], core->jobs[at].registered_ns);
    core->waiting[core->waiting_count++] = hints->id;
    return 0;
}

int sched_core_jobs_registered(sched_core_t *core, const sched_core_job_hints_t *hints,
                               size_t count, uint64_t now_ns, sched_core_effects_t *effects)
{
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++)
        rc = add_job(core, &hints[i], now_ns);
    begin(core, effects);
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
    admission_round(core, now_ns);
    return end(core, now_ns);
}

/* A rank reported a boundary: a gang's rank waits for its group from now; an SSP rank may be
 * the slowest one, whose progress lets the others go on (their lanes are offered again). */
static void group_boundary(sched_core_t *core, core_job_t *job, uint64_t now_ns)
{
    const core_group_t *group = group_find(core, job->group_id);
    if (!group)
        return;
    job->ran_free = false; /* it stopped: its count is known again */
    if (group->gang && job->ready)
        gang_wait_start(job, now_ns);
    if (group->hints.sync != SCHED_CORE_SYNC_SSP)
        return;
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m != job)
            touch(core, m->lane);
    }
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
        learn_sizes(core, job);
    }
    if (b->ready && !job->ready)
        job->ready_since_ns = now_ns;
    job->ready = b->ready;
    touch(core, job->lane); /* dispatch_lane also stops a free run of its holder */
    if (job->group_id)
        group_boundary(core, job, now_ns);
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
                               .ephemeral_bytes = where->ephemeral_bytes, .gpu = where->gpu};
    lanes_placement_t pl;
    begin(core, effects);
    const core_job_t *mate = where->lane_of_job ? find(core, where->lane_of_job) : NULL;
    lanes_status_t st = mate && mate->admitted
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
    if (config->lanes.provisional_persistent_bytes > total_bytes / 4)
        config->lanes.provisional_persistent_bytes = total_bytes / 4;
    if (config->lanes.provisional_ephemeral_bytes > total_bytes / 2)
        config->lanes.provisional_ephemeral_bytes = total_bytes / 2;
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
    core->provisional_persistent = lc.provisional_persistent_bytes;
    core->provisional_ephemeral = lc.provisional_ephemeral_bytes;
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
        const core_group_t *group = group_find(core, job->group_id);
        if (group)
            info->group = group->hints;
        info->group.rank = job->rank;
        info->gang_wait_ns = job->gang_wait_ns;
        if (job->gang_wait_since_ns && now_ns > job->gang_wait_since_ns)
            info->gang_wait_ns += now_ns - job->gang_wait_since_ns;
    }
    info->id = job->id;
    info->uid = job->uid;
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
