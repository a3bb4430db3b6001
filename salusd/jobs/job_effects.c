/* The jobs module's side of scheduling: it sends the scheduling core (through gpu_sched.c) what
 * happens to jobs and carries out what the core decides, on job pages, futexes and sockets:
 *   ADMIT -> jobs_admit (answers the register request), REFUSE -> jobs_fail,
 *   GRANT -> lane word HELD, grant_seq, wake_seq + FUTEX_WAKE (free_run: the shim passes
 *   its boundaries without stopping), STOP_FREE_RUN -> free_run = 0 (it parks at its next
 *   boundary; a lane it gave up meanwhile is taken: its release is reported now),
 *   BUDGET -> jobs_set_budget, MOVE and LEARNED -> logged.
 * A refusal or a failed admission ends the job (jobs_fail), which sends the core further
 * events: each event has its own effects list, and every effect looks its job up again. */
#include "jobs-internal.h"

#include "gpu_sched.h"
#include "groups.h"
#include "jobs_observer.h"
#include "log.h"

#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

/* wake_seq is what a parked shim waits on; grant_seq is woken too, for a shim that runs the
 * baseline mechanism (SALUS_SWITCH_BASELINE, libsalus-client/gate.c) */
static void grant(salusd_t *d, job_t *job, int free_run)
{
    job_page_t *page = jobs_page(job);
    if (!page)
        return;
    atomic_store(&page->release_ok, (uint32_t)(d->config.lane_hold_gpu != 0));
    atomic_store(&page->lane_shared, (uint32_t)gpu_sched_lane_shared(d, job));
    atomic_store(&page->lane, JOB_LANE_HELD);
    atomic_store(&page->free_run, (uint32_t)free_run);
    atomic_store(&page->grant_seq, atomic_load(&page->boundary_seq));
    atomic_fetch_add(&page->wake_seq, 1);
    futex_wake_all(&page->wake_seq);
    futex_wake_all(&page->grant_seq);
}

/* Asks a parked job, or one that gave its lane up at a quiescent point (lanes held for GPU
 * time), for its unused chunks: it trims and sends mem_release for each, and the pending
 * requests are retried then (job_memory.c). A parked job answers at once; a released one is
 * on the host and answers at its next submission or release. Not a job that holds its lane
 * (it may use them), nor one that trimmed at this park already. */
void jobs_request_trim(job_t *job)
{
    job_page_t *page = jobs_page(job);
    uint32_t boundary = page ? atomic_load(&page->boundary_seq) : 0;
    int parked = page && atomic_load(&page->waiting) && atomic_load(&page->grant_seq) < boundary;
    int released = page && atomic_load(&page->lane) != JOB_LANE_HELD;
    if (!page || !(parked || released) ||
        (parked && atomic_load(&page->trimmed_seq) == boundary) ||
        atomic_load(&page->mapped_bytes) <= atomic_load(&page->live_bytes) ||
        atomic_exchange(&page->trim_request, 1))
        return;
    LOG_DEBUG("job %llu is asked for its unused chunks", (unsigned long long)job->id);
    atomic_fetch_add(&page->wake_seq, 1);
    futex_wake_all(&page->wake_seq);
}

void jobs_request_trims(salusd_t *d, int gpu)
{
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        int on;
        uint64_t budget;
        if (job->runtime && jobs_placement(d, job, &on, &budget) == 0 && on == gpu)
            jobs_request_trim(job);
    }
}

static void log_learned(const job_t *job, const sched_core_effect_t *e)
{
    if (!e->reason)
        LOG_INFO("job %llu learned sizes: persistent %llu KiB, ephemeral %llu KiB (lane %u)",
                 (unsigned long long)job->id, (unsigned long long)(e->persistent_bytes >> 10),
                 (unsigned long long)(e->ephemeral_bytes >> 10), e->lane);
    else
        LOG_WARN("job %llu: measured sizes (%llu + %llu bytes) do not fit now (%s); it keeps "
                 "its provisional budget", (unsigned long long)job->id,
                 (unsigned long long)e->persistent_bytes, (unsigned long long)e->ephemeral_bytes,
                 e->reason);
}

static void apply(salusd_t *d, sched_core_effects_t *fx);

/* ---- lanes held for GPU time (common/job_page.h) ---------------------------------------- */

/* If the job gave its lane up at a quiescent point (given for a waiting job, or, with
 * released_too, while it ran alone), the lane is taken (the shim asks for a grant at its
 * next submission) and the core hears of the release (a boundary without a request for a
 * turn; the core decides who runs next, gangs included: sched_core.h). */
static void take_released_lane(salusd_t *d, job_t *job, int released_too)
{
    job_page_t *page = jobs_page(job);
    if (!page)
        return;
    uint32_t lane = JOB_LANE_GIVEN;
    int taken = atomic_compare_exchange_strong(&page->lane, &lane, JOB_LANE_TAKEN);
    if (!taken && released_too) {
        lane = JOB_LANE_RELEASED;
        taken = atomic_compare_exchange_strong(&page->lane, &lane, JOB_LANE_TAKEN);
    }
    if (!taken)
        return;
    sched_core_effects_t fx = {0};
    gpu_sched_job_released(d, job, page, &fx);
    apply(d, &fx);
}

/* Carries out fx (and frees it). The observers hear what it raised once it is over
 * (jobs_observer.h). */
static void apply_effects(salusd_t *d, sched_core_effects_t *fx);

static void apply(salusd_t *d, sched_core_effects_t *fx)
{
    jobs_effects_begin(d);
    apply_effects(d, fx);
    jobs_effects_end(d);
}

static void apply_effects(salusd_t *d, sched_core_effects_t *fx)
{
    for (size_t i = 0; i < fx->count; i++) {
        if (fx->items[i].kind == SCHED_CORE_SLOT_DONE) { /* job_id: a cluster group's id */
            jobs_raise_slot_done(d, fx->items[i].job_id, fx->items[i].seq);
            continue;
        }
        sched_core_effect_t mapped; /* a member's effect as its job's (job_gpus.h) */
        if (job_gpus_effect(gpu_sched_job_gpus(d), fx, i, &mapped) == JOB_GPUS_CONSUMED)
            continue;
        const sched_core_effect_t *e = &mapped;
        job_t *job = registry_find(d->registry, e->job_id);
        if (!job || !job->runtime) {
            if (e->kind == SCHED_CORE_ADMIT) { /* gone meanwhile: give its place back */
                sched_core_effects_t more = {0};
                gpu_sched_job_id_left(d, e->job_id, &more);
                apply(d, &more);
            }
            continue;
        }
        switch (e->kind) {
        case SCHED_CORE_ADMIT:
            if (jobs_admit(d, job, e->gpu, e->budget_bytes, e->lane) < 0)
                jobs_fail(d, job, NULL);
            else if (job->group_cluster)
                jobs_raise_rank_admitted(d, job);
            break;
        case SCHED_CORE_REFUSE:
            jobs_fail(d, job, e->reason);
            break;
        case SCHED_CORE_GRANT:
            /* clear_needed asks for nothing: a job's chunks are its own, cleared when
             * created if lanes are shared across users (job_memory.c) */
            grant(d, job, e->free_run);
            break;
        case SCHED_CORE_STOP_FREE_RUN:
            if (jobs_page(job)) {
                atomic_store(&jobs_page(job)->lane_shared, 1); /* another job waits for it */
                atomic_store(&jobs_page(job)->free_run, 0); /* before the lane word is read */
                take_released_lane(d, job, 1);
            }
            break;
        case SCHED_CORE_BUDGET:
            jobs_set_budget(d, job, e->budget_bytes);
            break;
        case SCHED_CORE_MOVE:
            if (jobs_page(job)) /* its new lane has other jobs (moves merge lanes) */
                atomic_store(&jobs_page(job)->lane_shared, 1);
            jobs_lane_memory_moved(d, job, e->gpu, e->lane); /* --lane-memory shared */
            LOG_DEBUG("job %llu moves to lane %u of GPU %d", (unsigned long long)job->id,
                      e->lane, e->gpu);
            break;
        case SCHED_CORE_LEARNED:
            log_learned(job, e);
            if (!e->reason) {
                job->sizes_learned = 1;
                job->learned_persistent_bytes = e->persistent_bytes;
                job->learned_ephemeral_bytes = e->ephemeral_bytes;
                jobs_state_save(d); /* learned sizes outlive a restart */
            }
            break;
        case SCHED_CORE_SLOT_DONE: /* taken above */
            break;
        case SCHED_CORE_GATE: /* its role at the gate (sched_core.h, "Classes") */
            jobs_gate_role(d, job, e->gpu, e->gate);
            break;
        }
    }
    sched_core_effects_free(fx);
}

void jobs_core_registered(salusd_t *d, job_t *job)
{
    sched_core_effects_t fx = {0};
    uint64_t id = job->id;
    if (jobs_admission_held(d)) { /* survivors of a restart first: it waits (job_reattach.c) */
        LOG_INFO("job %llu waits: jobs that survived salusd's restart are re-attaching",
                 (unsigned long long)job->id);
        return;
    }
    gpu_sched_job_registered(d, job, &fx);
    apply(d, &fx);
    job = registry_find(d->registry, id);
    if (job && job->runtime && job->group_cluster)
        jobs_raise_rank_registered(d, job); /* after the core knows it: a release may follow */
    else if (job && job->runtime && job->group_id && groups_all_submitted(d, job->group_id))
        jobs_group_release(d, job->group_id); /* the ranks not registered are host-only */
}

int jobs_group_release(salusd_t *d, uint64_t group_id)
{
    sched_core_effects_t fx = {0};
    int rc = gpu_sched_group_release(d, group_id, &fx);
    apply(d, &fx);
    return rc;
}

int jobs_group_slot(salusd_t *d, uint64_t group_id, uint64_t seq, uint64_t target)
{
    sched_core_effects_t fx = {0};
    int rc = gpu_sched_group_slot(d, group_id, seq, target, &fx);
    apply(d, &fx);
    return rc;
}

int jobs_group_remote_least(salusd_t *d, uint64_t group_id, uint64_t least)
{
    sched_core_effects_t fx = {0};
    int rc = gpu_sched_group_remote_least(d, group_id, least, &fx);
    apply(d, &fx);
    return rc;
}

void jobs_core_parked(salusd_t *d, job_t *job)
{
    sched_core_effects_t fx = {0};
    job_page_t *page = jobs_page(job);
    /* a release first: the job may have given its lane up and asked again since */
    uint64_t id = job->id;
    take_released_lane(d, job, page && !atomic_load(&page->free_run));
    job = registry_find(d->registry, id); /* the effects may have ended it */
    if (!job || !job->runtime)
        return;
    gpu_sched_job_parked(d, job, jobs_page(job), &fx); /* running or not: the core's books */
    uint64_t group_id = job->group_id;
    apply(d, &fx);
    if (group_id) /* its count may be the group's least (SSP across nodes) */
        jobs_raise_rank_iterations(d, group_id);
}

/* After a departure or a move: each job's lane_shared follows its lane's members again (a
 * job left alone stops handing back its chunks at every release). */
static void refresh_lane_shared(salusd_t *d)
{
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        job_page_t *page = job->runtime ? jobs_page(job) : NULL;
        if (page)
            atomic_store(&page->lane_shared, (uint32_t)gpu_sched_lane_shared(d, job));
    }
}

int jobs_core_wants(salusd_t *d, job_t *job, uint64_t budget_bytes, uint64_t held_bytes)
{
    sched_core_effects_t fx = {0};
    int rc = gpu_sched_job_wants(d, job, budget_bytes, held_bytes, &fx);
    apply(d, &fx);
    return rc;
}

void jobs_core_left(salusd_t *d, uint64_t job_id)
{
    sched_core_effects_t fx = {0};
    gpu_sched_job_id_left(d, job_id, &fx);
    apply(d, &fx);
    refresh_lane_shared(d);
}

int jobs_set_policy(salusd_t *d, const char *name, char *err, size_t err_size)
{
    sched_core_effects_t fx = {0};
    int rc = gpu_sched_set_policy(d, name, err, err_size, &fx);
    apply(d, &fx);
    if (rc == 0)
        jobs_state_dirty(d);
    return rc;
}
