/* The scheduling core's private header: its books (the structs behind sched_core_t) and the
 * helpers that sched_core.c and sched_core_groups.c both use; the hot ones stay static inline
 * so that the per-iteration path is inlined in both files as it was in one. */
#ifndef SALUS_SCHEDULER_CORE_SCHED_CORE_INTERNAL_H
#define SALUS_SCHEDULER_CORE_SCHED_CORE_INTERNAL_H

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
    uint8_t wait_why; /* not admitted: why, as the last admission round found (sched_core_wait_t) */
    int gpu;
    int only_gpu; /* LANES_ANY_GPU, or the one GPU it may be admitted on (hints' pinned) */
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
    uint64_t slot_end_iterations; /* its iterations at which its part of the slot is done */
    uint64_t gang_wait_ns, gang_wait_since_ns; /* since: 0 = not held for its group now */
    /* classes (sched_core.h, "Classes") */
    uint64_t latency_target_ns; /* 0: best-effort */
    uint8_t gate;               /* the role last emitted (SCHED_CORE_GATE_*) */
} core_job_t;

/* A distributed job (sched_core.h, "Groups"). */
typedef struct core_group_s {
    sched_core_group_t hints; /* id, world, sync, staleness, share_gpus (rank unused) */
    bool gang;                /* BSP with gang turns on */
    bool reserved;            /* its slot holds its members' lanes */
    bool slot_granted;        /* the slot's members were granted together */
    bool round_seen;          /* handled in the current admission round */
    uint64_t served_ns;       /* when its last slot started (0: never) */
    /* released for admission (sched_core_group_release: every rank submitted, those not
     * registered host-only; cluster groups: on every node); cluster groups take slots from the FIFO
     * (core->slots: BSP with gang turns); the last slot's seq given to it */
    bool released, slots;
    uint64_t last_seq;
    /* SSP cluster groups: the fewest iterations of the group's ranks on other nodes
     * (sched_core_group_remote_least; UINT64_MAX: none known) */
    uint64_t remote_least;
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
    uint64_t charged_bytes, largest_lane_bytes, capacity_bytes, free_bytes;
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
    uint64_t provisional_min; /* a job of unknown sizes needs a claim of at least this */
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
    size_t *group_order;     /* core_gang_pass: groups in slot order */
    uint32_t *taken_lanes;   /* core_gang_pass: lanes reserved or claimed by earlier groups */
    size_t taken_count, taken_capacity;
    /* cluster groups' gang slots, in the order the caller gave them; [0] is served */
    struct core_slot_s {
        uint64_t group_id, seq, target; /* target: sched_core_group_slot */
    } *slots;
    size_t slot_count, slot_capacity;
    uint64_t now_ns;         /* the last event's time (sched_core_job_info) */
    /* GPU time of each user's jobs since the core started (the fair share between users) */
    struct core_usage_s {
        uint32_t uid;
        uint64_t busy_ns;
    } *usage;
    size_t usage_count, usage_capacity;
    /* classes: latency-critical jobs known (waiting or admitted), jobs with a gate role;
     * gates_dirty: the admitted set changed since the roles were last settled */
    size_t lc_jobs, gated_jobs;
    bool gates_dirty;
};

/* sched_core_slo.c: classes */
/* At registration of a latency-critical job: NULL when some GPU can serve it (its only_gpu
 * set to the best one), else the reason it is refused. */
const char *core_lc_check(sched_core_t *core, core_job_t *job);
/* At the end of an event: emits GATE for each admitted job whose role changed. */
void core_gates_settle(sched_core_t *core);

/* sched_core.c */
core_job_t *core_find_slow(const sched_core_t *core, uint64_t id);
int core_effects_grow(sched_core_t *core, sched_core_effects_t *fx);
void core_lane_list_push(sched_core_t *core, uint32_t **items, size_t *count, size_t *capacity,
                         uint32_t lane);
void core_touch_slow(sched_core_t *core, uint32_t lane);
int core_rebuild_lane_books(sched_core_t *core);
uint64_t core_user_gpu_bytes(sched_core_t *core, uint32_t uid, int gpu);
bool core_within_caps(sched_core_t *core, const core_job_t *job, const core_user_t *user,
                      int *gpu);
uint64_t core_claim_cap(sched_core_t *core, const core_job_t *job, int gpu);
size_t core_round_users(sched_core_t *core, size_t n);
int core_run_event(sched_core_t *core, bool admit, uint64_t now_ns,
                   sched_core_effects_t *effects);

/* sched_core_groups.c */
core_group_t *core_group_find(const sched_core_t *core, uint64_t id);
int core_group_check(const sched_core_t *core, const sched_core_group_t *g);
int core_group_join(sched_core_t *core, const sched_core_group_t *g, uint64_t id);
void core_group_leave(sched_core_t *core, const core_job_t *job);
void core_gang_wait_start(core_job_t *job, uint64_t now_ns);
void core_gang_wait_stop(core_job_t *job, uint64_t now_ns);
void core_dispatch_lane_groups(sched_core_t *core, uint32_t lane, uint64_t now_ns);
void core_gang_pass(sched_core_t *core, uint64_t now_ns);
void core_admit_with_groups(sched_core_t *core, size_t n, bool strict, bool by_user);
void core_group_boundary(sched_core_t *core, core_job_t *job, uint64_t now_ns);

/* sched_core_cluster.c */
void core_cluster_slot_done(sched_core_t *core, const core_group_t *group);
core_group_t *core_cluster_head(sched_core_t *core);
uint64_t core_cluster_head_target(const sched_core_t *core, const core_group_t *group);
void core_cluster_drop_slots(sched_core_t *core, uint64_t group_id);

/* emit() copies every field of sched_core_effect_t: a new field must be added there. */
_Static_assert(sizeof(sched_core_effect_t) == 72, "a new effect field: copy it in emit()");

/* Inlined: one or two effects per event (performance: salus-sim sends ~10^6 events). The
 * fields are copied one by one: the call's compound literal then stays in registers (built on
 * the stack with narrow stores and copied with wide loads, it stalled every call on store
 * forwarding). */
static inline void emit(sched_core_t *core, sched_core_effect_t effect)
{
    sched_core_effects_t *fx = core->effects;
    if (!fx || (fx->count == fx->capacity && core_effects_grow(core, fx) < 0))
        return;
    sched_core_effect_t *slot = &fx->items[fx->count++];
    slot->kind = effect.kind;
    slot->job_id = effect.job_id;
    slot->gpu = effect.gpu;
    slot->lane = effect.lane;
    slot->budget_bytes = effect.budget_bytes;
    slot->persistent_bytes = effect.persistent_bytes;
    slot->ephemeral_bytes = effect.ephemeral_bytes;
    slot->seq = effect.seq;
    slot->free_run = effect.free_run;
    slot->clear_needed = effect.clear_needed;
    slot->gate = effect.gate;
    slot->reason = effect.reason;
}

static inline uint64_t size_or(uint64_t hinted, uint64_t provisional)
{
    return hinted == LANES_SIZE_UNKNOWN ? provisional : hinted;
}

static inline bool capped(const sched_core_t *core, uint32_t uid)
{
    return uid != 0 && uid != core->quota_exempt_uid &&
           (core->user_gpu_share > 0 || core->user_max_jobs > 0);
}

static inline uint64_t share_bytes(const sched_core_t *core, const core_gpu_t *gpu)
{
    return (uint64_t)((double)gpu->capacity_bytes * core->user_gpu_share);
}

static inline bool unknown_sizes(const core_job_t *job)
{
    return job->persistent_hint == LANES_SIZE_UNKNOWN || job->ephemeral_hint == LANES_SIZE_UNKNOWN;
}

/* What a newcomer is counted for: P + overhead + E, as if it opened a lane of its own; a job
 * of unknown sizes, its known P (else 0) and the least claim it is admitted with. */
static inline uint64_t need_bytes(const sched_core_t *core, const core_job_t *job)
{
    return size_or(job->persistent_hint, 0) + core->job_overhead_bytes +
           (unknown_sizes(job) ? core->provisional_min : job->ephemeral_hint);
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
    return core_find_slow(core, id);
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
        .latency_target_ns = job->latency_target_ns,
    };
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
    core_touch_slow(core, lane);
}

static CORE_ALWAYS_INLINE void stop_free_run(sched_core_t *core, core_job_t *job)
{
    if (!job->free_run)
        return;
    job->free_run = false;
    emit(core, (sched_core_effect_t){.kind = SCHED_CORE_STOP_FREE_RUN, .job_id = job->id,
                                     .gpu = job->gpu, .lane = job->lane});
}

/* GPU time of uid's jobs since the core started (the fair share between users). */
static inline uint64_t user_busy_ns(const sched_core_t *core, uint32_t uid)
{
    for (size_t i = 0; i < core->usage_count; i++)
        if (core->usage[i].uid == uid)
            return core->usage[i].busy_ns;
    return 0;
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
static inline void flush_yield(sched_core_t *core)
{
    if (core->yield_pending) {
        lanes_yield(core->lanes, core->yield_pending);
        core->yield_pending = 0;
    }
}

static inline size_t lane_slot_of(uint32_t lane, size_t mask)
{
    return (size_t)((lane * 0x9E3779B9u) >> 7) & mask;
}

/* The lane's books (rebuilt first when stale), or NULL when no lane has that id. */
static CORE_ALWAYS_INLINE const core_lane_t *lane_book(sched_core_t *core, uint32_t lane)
{
    if ((core->books_stale || core->books_version != lanes_version(core->lanes)) &&
        core_rebuild_lane_books(core) < 0)
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

#endif /* SALUS_SCHEDULER_CORE_SCHED_CORE_INTERNAL_H */
