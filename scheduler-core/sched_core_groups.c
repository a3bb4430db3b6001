/* The scheduling core's groups (sched_core.h, "Groups"): group records and lookup, gang
 * turns (slots, reservations, the gang pass), SSP checks, gang wait accounting and the
 * admission of a group's ranks all or none. */
#include "sched_core_internal.h"

/* ---- groups ----------------------------------------------------------------------------- */

core_group_t *core_group_find(const sched_core_t *core, uint64_t id)
{
    for (size_t i = 0; i < core->group_count; i++)
        if (core->groups[i].hints.id == id)
            return &core->groups[i];
    return NULL;
}

/* A rank's hints against its group's: 0, or -EINVAL (sched_core_job_registered). */
int core_group_check(const sched_core_t *core, const sched_core_group_t *g)
{
    if (g->world == 0 || g->world > CORE_MAX_WORLD || g->rank >= g->world ||
        (unsigned)g->sync > SCHED_CORE_SYNC_ASP)
        return -EINVAL;
    const core_group_t *group = core_group_find(core, g->id);
    if (!group)
        return 0;
    if (g->world != group->hints.world || g->sync != group->hints.sync ||
        g->share_gpus != group->hints.share_gpus || g->cluster != group->hints.cluster ||
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
int core_group_join(sched_core_t *core, const sched_core_group_t *g, uint64_t id)
{
    core_group_t *group = core_group_find(core, g->id);
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
                                .gang = g->sync == SCHED_CORE_SYNC_BSP && !core->gang_turns_off,
                                .remote_least = UINT64_MAX};
        group->slots = g->cluster && group->gang;
        group->hints.rank = 0;
    }
    group->members[group->member_count++] = id;
    return 0;
}

/* The rank is no longer part of its group: the others go on without it (their lanes are
 * offered again: a gang's slot may be over, an SSP group's slowest rank may have changed);
 * the group goes with its last rank. */
void core_group_leave(sched_core_t *core, const core_job_t *job)
{
    core_group_t *group = core_group_find(core, job->group_id);
    if (!group)
        return;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < group->member_count; i++)
        if (group->members[i] != job->id)
            group->members[kept++] = group->members[i];
    group->member_count = kept;
    if (kept == 0) {
        if (group->slots)
            core_cluster_drop_slots(core, group->hints.id);
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

void core_gang_wait_start(core_job_t *job, uint64_t now_ns)
{
    if (!job->gang_wait_since_ns)
        job->gang_wait_since_ns = now_ns ? now_ns : 1;
}

void core_gang_wait_stop(core_job_t *job, uint64_t now_ns)
{
    if (job->gang_wait_since_ns) {
        if (now_ns > job->gang_wait_since_ns)
            job->gang_wait_ns += now_ns - job->gang_wait_since_ns;
        job->gang_wait_since_ns = 0;
    }
}

/* ---- gangs ------------------------------------------------------------------------------ */

/* Is the SSP rank more than S iterations ahead of its group's slowest admitted rank (a cluster
 * group's ranks on other nodes included: remote_least)? */
static bool ssp_ahead(const sched_core_t *core, const core_group_t *group, const core_job_t *job)
{
    uint64_t slowest = group->remote_least;
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
 * gang turns off)? A gang's rank is granted only by its slot (core_gang_pass); an SSP rank too far
 * ahead waits for its slowest rank. */
static bool takes_single_turns(sched_core_t *core, core_job_t *job, uint64_t now_ns)
{
    const core_group_t *group = job->group_id ? core_group_find(core, job->group_id) : NULL;
    if (!group)
        return true;
    if (group->gang)
        return false;
    if (group->hints.sync == SCHED_CORE_SYNC_SSP && ssp_ahead(core, group, job)) {
        core_gang_wait_start(job, now_ns);
        return false;
    }
    return true;
}

/* dispatch_lane while groups exist: a lane reserved for a gang's slot is granted to nobody
 * else (its holder is told to stop), gangs' ranks wait for their slot, SSP ranks too far
 * ahead wait; the policy picks among the rest. */
void core_dispatch_lane_groups(sched_core_t *core, uint32_t lane, uint64_t now_ns)
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
            const core_group_t *group = m->group_id ? core_group_find(core, m->group_id) : NULL;
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
        const core_group_t *group =
            holder->group_id ? core_group_find(core, holder->group_id) : NULL;
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
    const core_group_t *group = job->group_id ? core_group_find(core, job->group_id) : NULL;
    bool ssp = group && group->hints.sync == SCHED_CORE_SYNC_SSP; /* (free, it would run ahead) */
    core_gang_wait_stop(job, now_ns);
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

/* Where m's part of its gang's slot ends: slot_iterations from here, or, for a rank of a
 * cluster slot that starts it at most two slots' worth behind the leader's target (it
 * registered after its peers' first slot), the target: its peers on other nodes may wait
 * for it in a collective on the way there (sched_core_group_slot). A rank at the target or
 * past it already has no part in the slot: its peers stop at the target, and an iteration
 * beyond it would wait for them in its collective while they wait for the next slot, which
 * waits for this rank (a rank that ran an iteration on the grant of a salusd that was then
 * killed: the restarted one is sent the slot that grant belonged to). false then. */
static bool slot_begin(sched_core_t *core, const core_group_t *group, core_job_t *m)
{
    uint64_t end = m->iterations + core->slot_iterations;
    uint64_t target = core_cluster_head_target(core, group);
    if (target && m->iterations >= target)
        end = m->iterations;
    else if (target > end && target - m->iterations <= 2ull * core->slot_iterations)
        end = target;
    m->slot_end_iterations = end;
    return m->iterations < end;
}

/* Has every rank of the slot done its slot's iterations (and handed its lane back)? */
static bool gang_slot_over(sched_core_t *core, const core_group_t *group)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m->in_slot &&
            (m->holds_lane || m->iterations < m->slot_end_iterations))
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
        core_lane_list_push(core, &core->taken_lanes, &core->taken_count, &core->taken_capacity,
                            m->lane);
    }
}

/* The gang's slot is over: its lanes go back to the policy, a cluster slot's end is said
 * (the next slot in the FIFO is served). */
static void end_slot(sched_core_t *core, core_group_t *group, uint64_t now_ns)
{
    group->reserved = group->slot_granted = false;
    for (uint32_t i = 0; i < group->member_count; i++) {
        core_job_t *m = find(core, group->members[i]);
        if (!m || !m->admitted)
            continue;
        m->in_slot = false;
        m->owes_turn = single_waits(core, m->lane, now_ns);
        touch(core, m->lane); /* back to the policy */
    }
    if (group->slots)
        core_cluster_slot_done(core, group); /* the next slot is served */
}

/* A reserved gang whose slot has not started: when every rank is ready and every one of their
 * lanes is free, all are granted now, in this event; a lane's other holder is told to stop.
 * true when the slot ended as it started (every rank at its target: nobody granted). */
static bool gang_start_slot(sched_core_t *core, core_group_t *group, uint64_t now_ns)
{
    bool free = true, alone = true;
    if (!gang_all_ready(core, group)) { /* a rank stepped back (or left): the lanes go back */
        group->reserved = false;
        for (uint32_t i = 0; i < group->member_count; i++) {
            const core_job_t *m = find(core, group->members[i]);
            if (m && m->admitted)
                touch(core, m->lane);
        }
        return false;
    }
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        const core_lane_t *book = m && m->admitted ? lane_book(core, m->lane) : NULL;
        if (!book)
            continue;
        alone &= !m->provisional && !group->hints.cluster; /* (a cluster gang never) */
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
        return false;
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
        return false;
    }
    group->slot_granted = true;
    group->served_ns = now_ns;
    bool granted = false;
    for (uint32_t i = 0; i < group->member_count; i++) {
        core_job_t *m = find(core, group->members[i]);
        if (!m || !m->admitted)
            continue;
        m->in_slot = true;
        m->owes_turn = false;
        m->ran_free = alone;
        if (slot_begin(core, group, m)) { /* (one that sits out waits on for the next) */
            core_gang_wait_stop(m, now_ns);
            grant_job(core, m, alone);
            granted = true;
        }
    }
    if (!granted) /* every rank is at the slot's target already: it is over */
        end_slot(core, group, now_ns);
    return !granted;
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
            (m->iterations < m->slot_end_iterations ||
             gang_peer_needs(core, group, m))) {
            core_gang_wait_stop(m, now_ns);
            grant_job(core, m, false);
        }
    }
}

/* A rank admitted after its gang's slot began (a late rank: one that was host-only until it
 * called the driver) and waiting ready outside the slot joins the slot when its lane is free
 * and no other gang's slot holds it: its peers may wait for it in a collective, and a gang
 * that runs freely would never end its slot for it. Else the gang is told to stop running
 * freely, so that its slot ends and the next one has the late rank. */
static void gang_take_late_rank(sched_core_t *core, core_group_t *group, uint64_t now_ns)
{
    for (uint32_t i = 0; i < group->member_count; i++) {
        core_job_t *m = find(core, group->members[i]);
        if (!m || !m->admitted || m->in_slot || !m->ready || m->holds_lane)
            continue;
        const core_lane_t *book = lane_book(core, m->lane);
        bool free = book != NULL;
        for (size_t k = 0; free && k < book->count; k++)
            free = !core->lane_members[book->first + k]->holds_lane;
        for (size_t g = 0; free && g < core->group_count; g++) {
            const core_group_t *other = &core->groups[g];
            for (uint32_t k = 0; other != group && other->reserved && k < other->member_count;
                 k++) {
                const core_job_t *o = find(core, other->members[k]);
                free &= !(o && o->admitted && o->lane == m->lane);
            }
        }
        if (!free) {
            stop_group_free_run(core, group);
            continue;
        }
        m->in_slot = true;
        m->owes_turn = false;
        m->ran_free = false;
        if (slot_begin(core, group, m)) {
            core_gang_wait_stop(m, now_ns);
            grant_job(core, m, false);
        }
    }
}

/* Gang turns, once per event while groups exist (before the touched lanes are dispatched):
 * slots that are over give their lanes back; then, in the global order (least recently served
 * first, then the lower group id), each gang whose ranks are all ready reserves their lanes
 * unless an earlier gang holds or claims one of them (then it claims them, so that no later
 * gang takes them from it); reserved gangs are granted together or go on with their slot.
 * Cluster gangs take part only with the slot at the head of the FIFO (sched_core_cluster.c),
 * placed in that order by the time their last slot started, as a local gang is. */
static bool gang_pass_once(sched_core_t *core, uint64_t now_ns)
{
    bool ended_at_start = false;
    size_t count = 0;
    for (size_t g = 0; g < core->group_count; g++) {
        core_group_t *group = &core->groups[g];
        if (group->gang && group->reserved && group->slot_granted &&
            gang_slot_over(core, group))
            end_slot(core, group, now_ns);
    }
    /* cluster gangs: only the group of the slot at the FIFO's head takes part */
    const core_group_t *head = core->slot_count ? core_cluster_head(core) : NULL;
    for (size_t g = 0; g < core->group_count; g++) {
        core_group_t *group = &core->groups[g];
        if (!group->gang || (group->slots && group != head))
            continue;
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
            ended_at_start |= gang_start_slot(core, group, now_ns);
        else if (group->reserved) {
            gang_continue_slot(core, group, now_ns);
            gang_take_late_rank(core, group, now_ns);
        }
    }
    return ended_at_start;
}

/* A slot that ends as it starts (its ranks are at its target) lets the FIFO's next slot be
 * served in the same event: a pass again, as many times as slots are queued (each such pass
 * takes one off the FIFO). */
void core_gang_pass(sched_core_t *core, uint64_t now_ns)
{
    size_t passes = core->slot_count + 1;
    while (gang_pass_once(core, now_ns) && passes-- > 0)
        ;
}

/* ---- admission of groups ---------------------------------------------------------------- */

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
     * (core_within_caps): what the user holds there, and what this group's ranks placed before */
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
    /* ranks of unknown sizes that may share GPUs split the free memory evenly between their
     * claims (one claim would otherwise take a GPU's every free byte from the next rank) */
    uint64_t split = 0;
    if (group->hints.share_gpus && count > 0) {
        for (size_t g = 0; g < core->gpu_count; g++) {
            lanes_gpu_info_t info;
            if (lanes_gpu_info(scratch, core->gpus[g].gpu, &info) == LANES_OK)
                split += info.free_bytes;
        }
        split /= count;
        if (split < core->provisional_min)
            split = core->provisional_min;
    }
    for (size_t i = 0; i < count; i++) {
        lanes_request_t *r = &requests[i];
        lanes_status_t st = LANES_WAIT;
        const core_job_t *rank_job = find(core, r->job_id);
        uint64_t need = by_share ? need_bytes(core, rank_job) : 0;
        if (split && unknown_sizes(rank_job))
            r->claim_max_bytes = split;
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
                    taken = core_user_gpu_bytes(core, r->uid, gpu) + extra[g] + need >
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
                if (by_share && unknown_sizes(rank_job)) { /* its claim within the share */
                    uint64_t cap = core_claim_cap(core, rank_job, gpus[k]);
                    for (size_t g = 0; g < core->gpu_count; g++)
                        if (core->gpus[g].gpu == gpus[k])
                            cap = cap > extra[g] + 1 ? cap - extra[g] : 1;
                    if (split && split < cap)
                        cap = split;
                    r->claim_max_bytes = cap;
                }
                st = lanes_admit(scratch, r, NULL);
            }
        }
        lanes_placement_t pl;
        if (st != LANES_OK || lanes_job_placement(scratch, r->job_id, &pl) != LANES_OK)
            goto done;
        used[used_count++] = pl.gpu;
        if (pl.provisional) /* what its claim took (a lane of its own) */
            need = pl.persistent_bytes + core->job_overhead_bytes + pl.lane_size_bytes;
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
 * when it can never be placed, waits whole until it is complete (all its ranks registered, or
 * released: the others are host-only) and all fit, else all are placed. */
static void admit_group(sched_core_t *core, const core_group_t *group, size_t first,
                        size_t count, core_user_t *user, bool strict, bool *blocked)
{
    const char *refusal = NULL;
    /* the ranks registered (here, for a cluster group: the others are placed on their
     * nodes); a rank that never registers is host-only and needs no GPU, so world says
     * nothing about the GPUs the group needs */
    uint32_t ranks = group->member_count;
    if (!group->hints.share_gpus && ranks > core->gpu_count)
        refusal = "the group has more ranks than this node has GPUs (and its ranks may not "
                  "share a GPU)";
    else if (capped(core, core->requests[first].uid) && core->user_max_jobs &&
             ranks > core->user_max_jobs)
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
    /* released: every rank was submitted (the caller knows), those not registered are
     * host-only; a local group is complete too when all world ranks registered */
    bool complete = group->released ||
                    (!group->hints.cluster && group->member_count == group->hints.world);
    sched_core_wait_t why =
        *blocked ? SCHED_CORE_WAIT_ORDER
        : !complete ? SCHED_CORE_WAIT_GROUP
        : user && capped(core, lead->uid) && core->user_max_jobs &&
                  user->admitted + count > core->user_max_jobs
            ? SCHED_CORE_WAIT_USER
            : SCHED_CORE_WAIT_NONE;
    if (why != SCHED_CORE_WAIT_NONE || !place_group(core, group, &core->requests[first], count)) {
        for (size_t i = 0; i < count; i++)
            find(core, core->requests[first + i].job_id)->wait_why =
                why != SCHED_CORE_WAIT_NONE ? why : SCHED_CORE_WAIT_MEMORY;
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
void core_admit_with_groups(sched_core_t *core, size_t n, bool strict, bool by_user)
{
    size_t users = by_user ? core_round_users(core, n) : 0;
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
        core_group_t *group = job->group_id ? core_group_find(core, job->group_id) : NULL;
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
                    .ephemeral_bytes = rank->ephemeral_hint, .gpu = LANES_ANY_GPU,
                    .alone = rank->latency_target_ns != 0};
                core->statuses[step++] = LANES_WAIT;
            }
            admit_group(core, group, first, step - first, user, strict, &blocked);
            continue;
        }
        lanes_request_t *r = &core->requests[step];
        *r = (lanes_request_t){.job_id = job->id, .uid = job->uid,
                               .persistent_bytes = job->persistent_hint,
                               .ephemeral_bytes = job->ephemeral_hint, .gpu = job->only_gpu,
                               .alone = job->latency_target_ns != 0};
        lanes_status_t st = LANES_WAIT;
        job->wait_why = SCHED_CORE_WAIT_ORDER;
        if (!blocked && user && !core_within_caps(core, job, user, &r->gpu)) {
            job->wait_why = SCHED_CORE_WAIT_USER;
        } else if (!blocked) {
            st = lanes_admit(core->lanes, r, NULL);
            blocked = strict && st == LANES_WAIT;
            job->wait_why = SCHED_CORE_WAIT_MEMORY;
        }
        if (st == LANES_OK) {
            job->admitting = true;
            if (user)
                user->admitted++;
        }
        core->statuses[step++] = st;
    }
}

/* ---- boundaries ------------------------------------------------------------------------- */

/* A rank reported a boundary: a gang's rank waits for its group from now; an SSP rank may be
 * the slowest one, whose progress lets the others go on (their lanes are offered again). */
void core_group_boundary(sched_core_t *core, core_job_t *job, uint64_t now_ns)
{
    const core_group_t *group = core_group_find(core, job->group_id);
    if (!group)
        return;
    job->ran_free = false; /* it stopped: its count is known again */
    if (group->gang && job->ready)
        core_gang_wait_start(job, now_ns);
    if (group->hints.sync != SCHED_CORE_SYNC_SSP)
        return;
    for (uint32_t i = 0; i < group->member_count; i++) {
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted && m != job)
            touch(core, m->lane);
    }
}
