/* The scheduling core's cluster groups (sched_core.h, "cluster groups"): the release of a
 * group for admission (cluster groups, and local groups with host-only ranks) and the FIFO of gang slots that the caller gives them in the cluster's one global
 * order. The gang pass (sched_core_groups.c) serves the slot at the FIFO's head as a local
 * gang's slot; this file keeps the FIFO and reports each slot's end (SLOT_DONE). */
#include "sched_core_internal.h"

static void slot_done(sched_core_t *core, uint64_t group_id, uint64_t seq)
{
    emit(core, (sched_core_effect_t){.kind = SCHED_CORE_SLOT_DONE, .job_id = group_id,
                                     .seq = seq});
}

static void pop_head(sched_core_t *core)
{
    memmove(&core->slots[0], &core->slots[1], (core->slot_count - 1) * sizeof(*core->slots));
    core->slot_count--;
}

/* The gang pass ended the slot of the group at the FIFO's head. */
void core_cluster_slot_done(sched_core_t *core, const core_group_t *group)
{
    if (core->slot_count == 0 || core->slots[0].group_id != group->hints.id)
        return; /* (cannot happen: only the head's group is reserved) */
    slot_done(core, group->hints.id, core->slots[0].seq);
    pop_head(core);
}

/* The iterations each rank of group has done at the end of the slot served now (the FIFO's
 * head, which is group's): the leader's target, 0 when not known or not a cluster slot. */
uint64_t core_cluster_head_target(const sched_core_t *core, const core_group_t *group)
{
    if (!group->slots || core->slot_count == 0 || core->slots[0].group_id != group->hints.id)
        return 0;
    return core->slots[0].target;
}

/* The group whose slot is served now, or NULL when the FIFO is empty. A slot of a group that
 * no longer takes gang turns (its ranks were put in one lane: they take single turns) has
 * nothing to serve here and ends at once. */
core_group_t *core_cluster_head(sched_core_t *core)
{
    while (core->slot_count > 0) {
        core_group_t *group = core_group_find(core, core->slots[0].group_id);
        if (group && group->gang)
            return group;
        slot_done(core, core->slots[0].group_id, core->slots[0].seq);
        pop_head(core);
    }
    return NULL;
}

/* The group's last local rank left: its slots are dropped, each with its SLOT_DONE (in FIFO
 * order), so that the cluster does not wait for this node. */
void core_cluster_drop_slots(sched_core_t *core, uint64_t group_id)
{
    size_t kept = 0;
    for (size_t i = 0; i < core->slot_count; i++) {
        if (core->slots[i].group_id == group_id)
            slot_done(core, group_id, core->slots[i].seq);
        else
            core->slots[kept++] = core->slots[i];
    }
    core->slot_count = kept;
}

int sched_core_group_release(sched_core_t *core, uint64_t group_id, uint64_t now_ns,
                             sched_core_effects_t *effects)
{
    core_group_t *group = group_id ? core_group_find(core, group_id) : NULL;
    if (!group)
        return -ENOENT;
    if (group->released)
        return 0;
    group->released = true;
    return core_run_event(core, true, now_ns, effects);
}

int sched_core_group_slot(sched_core_t *core, uint64_t group_id, uint64_t seq, uint64_t target,
                          uint64_t now_ns, sched_core_effects_t *effects)
{
    core_group_t *group = group_id ? core_group_find(core, group_id) : NULL;
    if (!group)
        return -ENOENT;
    if (!group->slots || seq < group->last_seq || seq == 0)
        return -EINVAL;
    if (seq == group->last_seq)
        return -EALREADY;
    if (core->slot_count == core->slot_capacity) {
        size_t capacity = core->slot_capacity ? core->slot_capacity * 2 : 8;
        struct core_slot_s *slots = realloc(core->slots, capacity * sizeof(*slots));
        if (!slots)
            return -ENOMEM;
        core->slots = slots;
        core->slot_capacity = capacity;
    }
    group->last_seq = seq;
    core->slots[core->slot_count++] = (struct core_slot_s){.group_id = group_id, .seq = seq,
                                                           .target = target};
    return core_run_event(core, false, now_ns, effects);
}

size_t sched_core_slots_queued(const sched_core_t *core, uint64_t *group_id, uint64_t *seq)
{
    bool any = core->slot_count > 0;
    if (group_id)
        *group_id = any ? core->slots[0].group_id : 0;
    if (seq)
        *seq = any ? core->slots[0].seq : 0;
    return any ? core->slot_count - 1 : 0;
}

int sched_core_group_remote_least(sched_core_t *core, uint64_t group_id, uint64_t least,
                                  uint64_t now_ns, sched_core_effects_t *effects)
{
    core_group_t *group = group_id ? core_group_find(core, group_id) : NULL;
    if (!group)
        return -ENOENT;
    if (!group->hints.cluster || group->hints.sync != SCHED_CORE_SYNC_SSP)
        return -EINVAL;
    if (group->remote_least == least)
        return 0;
    group->remote_least = least;
    for (uint32_t i = 0; i < group->member_count; i++) { /* held ranks may go on now */
        const core_job_t *m = find(core, group->members[i]);
        if (m && m->admitted)
            touch(core, m->lane);
    }
    return core_run_event(core, false, now_ns, effects);
}
