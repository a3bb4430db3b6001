#include "registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct registry_s {
    job_t **jobs;             /* sorted by id (ids only grow, so appending keeps order) */
    size_t count;
    size_t capacity;
    uint64_t next_id;
    uint64_t ended[JOB_STATE_COUNT]; /* registry_count_end */
};

registry_t *registry_create(void)
{
    registry_t *reg = calloc(1, sizeof(*reg));
    if (reg)
        reg->next_id = 1;
    return reg;
}

void registry_destroy(registry_t *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->count; i++)
        free(reg->jobs[i]);
    free(reg->jobs);
    free(reg);
}

job_t *registry_add(registry_t *reg, const char *name, pid_t pid, uid_t uid, gid_t gid,
                    uint64_t now_ns, void *owner)
{
    if (reg->count == reg->capacity) {
        size_t capacity = reg->capacity ? reg->capacity * 2 : 16;
        job_t **jobs = realloc(reg->jobs, capacity * sizeof(*jobs));
        if (!jobs)
            return NULL;
        reg->jobs = jobs;
        reg->capacity = capacity;
    }
    job_t *job = calloc(1, sizeof(*job));
    if (!job)
        return NULL;
    job->id = reg->next_id++;
    snprintf(job->name, sizeof(job->name), "%s", name && name[0] ? name : "job");
    job->pid = pid;
    job->uid = uid;
    job->gid = gid;
    job->state = JOB_WAITING;
    job->registered_ns = now_ns;
    job->owner = owner;
    job->end_gpu = -1;
    job->end_lane = -1;
    reg->jobs[reg->count++] = job;
    return job;
}

static size_t find_index(const registry_t *reg, uint64_t id);

job_t *registry_add_with_id(registry_t *reg, uint64_t id, const char *name, pid_t pid,
                            uid_t uid, gid_t gid, uint64_t now_ns, void *owner)
{
    if (id == 0 || registry_find(reg, id))
        return NULL;
    uint64_t next = reg->next_id;
    job_t *job = registry_add(reg, name, pid, uid, gid, now_ns, owner);
    reg->next_id = next > id ? next : id + 1;
    if (!job)
        return NULL;
    job->id = id;
    /* keep id order: move it from the end to its place */
    reg->count--;
    size_t at = find_index(reg, id);
    memmove(&reg->jobs[at + 1], &reg->jobs[at], (reg->count - at) * sizeof(*reg->jobs));
    reg->jobs[at] = job;
    reg->count++;
    return job;
}

uint64_t registry_next_id(const registry_t *reg)
{
    return reg->next_id;
}

void registry_set_next_id(registry_t *reg, uint64_t next_id)
{
    if (next_id > reg->next_id)
        reg->next_id = next_id;
}

static size_t find_index(const registry_t *reg, uint64_t id)
{
    size_t lo = 0, hi = reg->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (reg->jobs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

job_t *registry_find(registry_t *reg, uint64_t id)
{
    size_t i = find_index(reg, id);
    return i < reg->count && reg->jobs[i]->id == id ? reg->jobs[i] : NULL;
}

int registry_remove(registry_t *reg, uint64_t id)
{
    size_t i = find_index(reg, id);
    if (i >= reg->count || reg->jobs[i]->id != id)
        return -ENOENT;
    free(reg->jobs[i]);
    memmove(&reg->jobs[i], &reg->jobs[i + 1], (reg->count - i - 1) * sizeof(reg->jobs[0]));
    reg->count--;
    return 0;
}

size_t registry_count(const registry_t *reg)
{
    return reg->count;
}

job_t *registry_at(registry_t *reg, size_t index)
{
    return index < reg->count ? reg->jobs[index] : NULL;
}

void registry_count_end(registry_t *reg, job_state_t from, job_state_t to)
{
    if (JOB_STATE_IS_FINAL(from) && reg->ended[from] > 0)
        reg->ended[from]--;
    if (JOB_STATE_IS_FINAL(to))
        reg->ended[to]++;
}

uint64_t registry_ended(const registry_t *reg, job_state_t state)
{
    return JOB_STATE_IS_FINAL(state) ? reg->ended[state] : 0;
}

const char *job_state_name(job_state_t state)
{
    static const char *const names[] = {"waiting", "paused", "done", "failed", "killed",
                                         "ended"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == JOB_STATE_COUNT, "a name per state");
    return (unsigned)state < JOB_STATE_COUNT ? names[state] : "unknown";
}

const char *job_shown_state_name(size_t index)
{
    if (index == 1)
        return JOB_STATE_RUNNING_NAME;
    return job_state_name((job_state_t)(index > 1 ? index - 1 : index));
}
