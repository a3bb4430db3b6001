/* One process on several GPUs: the job's members in the scheduling core (job_gpus.h). */
#include "job_gpus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job_gpus_entry_s {
    job_gpus_info_t info;
    sched_core_effect_t admit0; /* member 0's ADMIT, carried out when the last member's came */
    uint32_t admitted_mask;
    uint32_t free_run_mask;     /* members granted with free_run */
    uint64_t committed[JOB_GPUS_MAX]; /* chunks held on member k's GPU (k >= 1) */
} job_gpus_entry_t;

struct job_gpus_s {
    job_gpus_entry_t *entries; /* by job id, ascending */
    size_t count, capacity;
};

job_gpus_t *job_gpus_create(void)
{
    return calloc(1, sizeof(job_gpus_t));
}

void job_gpus_destroy(job_gpus_t *t)
{
    if (!t)
        return;
    free(t->entries);
    free(t);
}

static uint32_t all_members(uint32_t gpus)
{
    return gpus >= 32 ? UINT32_MAX : (1u << gpus) - 1;
}

/* The entry whose id range holds core_id, or NULL. */
static job_gpus_entry_t *entry_of(const job_gpus_t *t, uint64_t core_id)
{
    size_t lo = 0, hi = t ? t->count : 0;
    while (lo < hi) { /* the last entry with job_id <= core_id */
        size_t mid = lo + (hi - lo) / 2;
        if (t->entries[mid].info.job_id <= core_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    job_gpus_entry_t *e = &t->entries[lo - 1];
    return core_id - e->info.job_id < e->info.gpus ? e : NULL;
}

int job_gpus_add(job_gpus_t *t, registry_t *reg, uint64_t job_id, uint32_t gpus)
{
    if (gpus == 0 || gpus > JOB_GPUS_MAX || job_id == 0 || job_id > UINT64_MAX - gpus)
        return -EINVAL;
    if (gpus == 1)
        return 0;
    /* entries of forgotten jobs go first */
    size_t kept = 0;
    for (size_t i = 0; i < t->count; i++)
        if (!reg || registry_find(reg, t->entries[i].info.job_id))
            t->entries[kept++] = t->entries[i];
    t->count = kept;
    if (entry_of(t, job_id) || entry_of(t, job_id + gpus - 1))
        return -EINVAL;
    if (t->count == t->capacity) {
        size_t capacity = t->capacity ? t->capacity * 2 : 8;
        job_gpus_entry_t *entries = realloc(t->entries, capacity * sizeof(*entries));
        if (!entries)
            return -ENOMEM;
        t->entries = entries;
        t->capacity = capacity;
    }
    size_t at = t->count;
    while (at > 0 && t->entries[at - 1].info.job_id > job_id)
        at--;
    memmove(&t->entries[at + 1], &t->entries[at], (t->count - at) * sizeof(*t->entries));
    job_gpus_entry_t *e = &t->entries[at];
    memset(e, 0, sizeof(*e));
    e->info.job_id = job_id;
    e->info.gpus = gpus;
    for (uint32_t k = 0; k < JOB_GPUS_MAX; k++)
        e->info.gpu[k] = -1;
    t->count++;
    return 0;
}

void job_gpus_remove(job_gpus_t *t, uint64_t job_id)
{
    job_gpus_entry_t *e = entry_of(t, job_id);
    if (!e || e->info.job_id != job_id)
        return;
    size_t at = (size_t)(e - t->entries);
    memmove(e, e + 1, (t->count - at - 1) * sizeof(*e));
    t->count--;
}

uint32_t job_gpus_count(const job_gpus_t *t, uint64_t job_id)
{
    const job_gpus_entry_t *e = entry_of(t, job_id);
    return e && e->info.job_id == job_id ? e->info.gpus : 1;
}

int job_gpus_info(const job_gpus_t *t, uint64_t job_id, job_gpus_info_t *info)
{
    const job_gpus_entry_t *e = entry_of(t, job_id);
    if (!e || e->info.job_id != job_id)
        return -ENOENT;
    *info = e->info;
    return 0;
}

uint64_t job_gpus_owner(const job_gpus_t *t, uint64_t core_id, uint32_t *rank)
{
    const job_gpus_entry_t *e = entry_of(t, core_id);
    if (rank)
        *rank = e ? (uint32_t)(core_id - e->info.job_id) : 0;
    return e ? e->info.job_id : core_id;
}

void job_gpus_text(const job_gpus_t *t, uint64_t job_id, int gpu, char *out, size_t size)
{
    job_gpus_info_t info;
    if (size == 0)
        return;
    if (job_gpus_info(t, job_id, &info) < 0) {
        if (gpu >= 0)
            snprintf(out, size, "%d", gpu);
        else
            snprintf(out, size, "-");
        return;
    }
    if (!info.admitted) {
        snprintf(out, size, "-");
        return;
    }
    size_t used = 0;
    out[0] = '\0';
    for (uint32_t k = 0; k < info.gpus && used < size; k++) {
        int n = snprintf(out + used, size - used, "%s%d", k ? "," : "", info.gpu[k]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* ---- events ------------------------------------------------------------------------------ */

/* Member k's hints: the job's, its id + k, rank k of the job's group. */
static sched_core_job_hints_t member_hints(const job_gpus_entry_t *e,
                                           const sched_core_job_hints_t *hints, uint32_t k)
{
    sched_core_job_hints_t member = *hints;
    member.id = hints->id + k;
    member.group = (sched_core_group_t){
        .id = hints->id | JOB_GPUS_GROUP_BIT,
        .world = e->info.gpus,
        .rank = k,
        .sync = SCHED_CORE_SYNC_BSP,
    };
    return member;
}

int job_gpus_register(job_gpus_t *t, sched_core_t *core, const sched_core_job_hints_t *hints,
                      uint64_t now_ns, sched_core_effects_t *fx)
{
    const job_gpus_entry_t *e = entry_of(t, hints->id);
    if (!e || e->info.job_id != hints->id)
        return sched_core_job_registered(core, hints, now_ns, fx);
    sched_core_job_hints_t members[JOB_GPUS_MAX];
    for (uint32_t k = 0; k < e->info.gpus; k++)
        members[k] = member_hints(e, hints, k);
    return sched_core_jobs_registered(core, members, e->info.gpus, now_ns, fx);
}

int job_gpus_reattached(job_gpus_t *t, sched_core_t *core, const sched_core_job_hints_t *hints,
                        const sched_core_reattach_t *where, uint64_t now_ns,
                        sched_core_effects_t *fx)
{
    job_gpus_entry_t *e = entry_of(t, hints->id);
    if (!e || e->info.job_id != hints->id)
        return sched_core_job_reattached(core, hints, where, now_ns, fx);
    for (uint32_t k = 0; k < e->info.gpus; k++) {
        sched_core_job_hints_t member = member_hints(e, hints, k);
        sched_core_reattach_t at = where[k];
        /* a lane mate that is a member of this job: none (its members are on distinct GPUs) */
        if (at.lane_of_job >= hints->id && at.lane_of_job - hints->id < e->info.gpus)
            at.lane_of_job = 0;
        int rc = sched_core_job_reattached(core, &member, &at, now_ns, fx);
        if (rc < 0)
            return rc;
        e->info.gpu[k] = at.gpu;
    }
    /* admitted on every GPU (what an ADMIT of each member would have recorded) */
    e->admitted_mask = all_members(e->info.gpus);
    e->info.admitted = true;
    return 0;
}

int job_gpus_boundary(job_gpus_t *t, sched_core_t *core, uint64_t job_id,
                      const sched_core_boundary_t *boundary, uint64_t now_ns,
                      sched_core_effects_t *fx)
{
    job_gpus_entry_t *e = entry_of(t, job_id);
    if (!e || e->info.job_id != job_id)
        return sched_core_job_boundary(core, job_id, boundary, now_ns, fx);
    /* every member stops: the job's grant is over; the GRANTs that follow are the next one's */
    e->info.granted_mask = 0;
    e->free_run_mask = 0;
    int first = 0;
    for (uint32_t k = 0; k < e->info.gpus; k++) {
        int rc = sched_core_job_boundary(core, job_id + k, boundary, now_ns, fx);
        if (rc < 0 && first == 0)
            first = rc;
    }
    return first;
}

int job_gpus_left(job_gpus_t *t, sched_core_t *core, uint64_t job_id, sched_core_exit_t how,
                  uint64_t now_ns, sched_core_effects_t *fx)
{
    uint32_t gpus = job_gpus_count(t, job_id);
    job_gpus_entry_t *e = entry_of(t, job_id);
    int first = 0;
    if (e && e->info.job_id == job_id) /* its chunks went back with it */
        memset(e->committed, 0, sizeof(e->committed));
    for (uint32_t k = 0; k < gpus; k++) {
        int rc = sched_core_job_left(core, job_id + k, how, now_ns, fx);
        if (rc < 0 && first == 0)
            first = rc;
    }
    return first;
}

int job_gpus_holds_lanes(const job_gpus_t *t, const sched_core_t *core, uint64_t job_id)
{
    uint32_t gpus = job_gpus_count(t, job_id);
    for (uint32_t k = 0; k < gpus; k++) {
        sched_core_job_info_t info;
        if (sched_core_job_info(core, job_id + k, &info) < 0 || info.phase != SCHED_CORE_RUNNING)
            return 0;
    }
    return 1;
}

uint64_t job_gpus_lane_holder(const job_gpus_t *t, const sched_core_t *core, uint64_t job_id)
{
    uint32_t gpus = job_gpus_count(t, job_id);
    for (uint32_t k = 0; k < gpus; k++) {
        sched_core_job_info_t info;
        if (sched_core_job_info(core, job_id + k, &info) == 0 && info.lane_holder &&
            job_gpus_owner(t, info.lane_holder, NULL) != job_id)
            return job_gpus_owner(t, info.lane_holder, NULL);
    }
    return 0;
}

int job_gpus_place(const job_gpus_t *t, const sched_core_t *core, uint64_t job_id, uint32_t k,
                   int *gpu, uint64_t *budget_bytes)
{
    sched_core_job_info_t info;
    if (k >= job_gpus_count(t, job_id) || sched_core_job_info(core, job_id + k, &info) < 0 ||
        info.phase == SCHED_CORE_WAITING)
        return -ENOENT;
    *gpu = info.gpu;
    *budget_bytes = info.budget_bytes;
    return 0;
}

uint64_t *job_gpus_committed(job_gpus_t *t, uint64_t job_id, uint32_t k)
{
    job_gpus_entry_t *e = entry_of(t, job_id);
    return e && e->info.job_id == job_id && k >= 1 && k < e->info.gpus ? &e->committed[k] : NULL;
}

uint32_t job_gpus_member_on(const job_gpus_t *t, uint64_t job_id, int gpu)
{
    const job_gpus_entry_t *e = entry_of(t, job_id);
    for (uint32_t k = 1; e && e->info.job_id == job_id && k < e->info.gpus; k++)
        if (e->info.gpu[k] == gpu)
            return k;
    return 0;
}

uint64_t job_gpus_committed_total(const job_gpus_t *t, uint64_t job_id)
{
    const job_gpus_entry_t *e = entry_of(t, job_id);
    uint64_t sum = 0;
    for (uint32_t k = 1; e && e->info.job_id == job_id && k < e->info.gpus; k++)
        sum += e->committed[k];
    return sum;
}

/* ---- effects ----------------------------------------------------------------------------- */

/* 1 when every member's GRANT is among fx->items[0 .. index]: granted in one event. */
static int granted_in_one_list(const job_gpus_entry_t *e, const sched_core_effects_t *fx,
                               size_t index)
{
    uint32_t seen = 0;
    for (size_t i = 0; i <= index; i++) {
        const sched_core_effect_t *x = &fx->items[i];
        if (x->kind == SCHED_CORE_GRANT && x->job_id >= e->info.job_id &&
            x->job_id - e->info.job_id < e->info.gpus)
            seen |= 1u << (x->job_id - e->info.job_id);
    }
    return seen == all_members(e->info.gpus);
}

int job_gpus_effect(job_gpus_t *t, const sched_core_effects_t *fx, size_t index,
                    sched_core_effect_t *out)
{
    const sched_core_effect_t *x = &fx->items[index];
    job_gpus_entry_t *e = entry_of(t, x->job_id);
    *out = *x;
    if (!e)
        return JOB_GPUS_CARRY_OUT;
    uint32_t k = (uint32_t)(x->job_id - e->info.job_id), all = all_members(e->info.gpus);
    out->job_id = e->info.job_id;
    switch (x->kind) {
    case SCHED_CORE_ADMIT:
        e->info.gpu[k] = x->gpu;
        e->admitted_mask |= 1u << k;
        if (k == 0)
            e->admit0 = *x;
        if (e->admitted_mask != all || e->info.admitted)
            return JOB_GPUS_CONSUMED;
        e->info.admitted = true;
        *out = e->admit0;
        return JOB_GPUS_CARRY_OUT;
    case SCHED_CORE_GRANT:
        if (e->info.granted_mask == all) /* granted again without a boundary: as it is */
            return JOB_GPUS_CONSUMED;
        e->info.granted_mask |= 1u << k;
        if (x->free_run)
            e->free_run_mask |= 1u << k;
        if (e->info.granted_mask != all)
            return JOB_GPUS_CONSUMED;
        e->info.grants++;
        e->info.grants_split += !granted_in_one_list(e, fx, index);
        out->gpu = e->info.gpu[0];
        out->free_run = e->free_run_mask == all;
        return JOB_GPUS_CARRY_OUT;
    case SCHED_CORE_MOVE:
        e->info.gpu[k] = x->gpu;
        return JOB_GPUS_CARRY_OUT; /* the job's lanes changed: shown as the job's */
    case SCHED_CORE_BUDGET:
    case SCHED_CORE_LEARNED:
        /* the job's memory lives on its first GPU: member 0's budget is the page's */
        return k == 0 ? JOB_GPUS_CARRY_OUT : JOB_GPUS_CONSUMED;
    case SCHED_CORE_GATE: /* a job on several GPUs is never parked between boundaries */
        return JOB_GPUS_CONSUMED;
    case SCHED_CORE_REFUSE:       /* any member refused: the job fails (all leave) */
    case SCHED_CORE_STOP_FREE_RUN: /* any member's lane is wanted: the job stops */
    default:
        return JOB_GPUS_CARRY_OUT;
    }
}
