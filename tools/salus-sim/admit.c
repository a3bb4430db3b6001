/* Admission: the waiting jobs are offered to the lane manager in the policy's admission order
 * (or, for the mps baseline, to plain sum-of-peaks books), and lane layout changes are
 * followed. */
#include "sim-internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- lanes ------------------------------------------------------------------------------ */

int sim_touch_lane(sim_engine_t *e, uint32_t lane)
{
    if (e->touched_count == e->touched_capacity) {
        size_t capacity = e->touched_capacity ? e->touched_capacity * 2 : 64;
        uint32_t *touched = realloc(e->touched, capacity * sizeof(*touched));
        if (!touched)
            return sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
        e->touched = touched;
        e->touched_capacity = capacity;
    }
    e->touched[e->touched_count++] = lane;
    return SIM_OK;
}

/* Lane manager change reports: a moved job belongs to its new lane from now on (if it is in
 * an iteration, that lane counts as busy until the iteration ends, as lanes_grant has it);
 * both lanes may have become free to pick from. */
void sim_on_lane_change(void *context, const lanes_change_t *change)
{
    sim_engine_t *e = context;
    if (change->kind == LANES_CHANGE_JOB_MOVED) {
        sim_job_t *job = sim_job_by_id(e, change->job_id);
        if (job)
            job->view.lane = change->lane_id;
        sim_touch_lane(e, change->old_lane_id);
        sim_touch_lane(e, change->lane_id);
    } else if (change->kind == LANES_CHANGE_LANE_OPENED) {
        sim_touch_lane(e, change->lane_id);
    }
}

/* ---- admission -------------------------------------------------------------------------- */

static void remove_from_waiting(sim_engine_t *e)
{
    size_t kept = 0;
    for (size_t i = 0; i < e->waiting_count; i++)
        if (e->jobs[e->waiting[i]].phase == PHASE_WAITING)
            e->waiting[kept++] = e->waiting[i];
    e->waiting_count = kept;
}

static void job_admitted(sim_engine_t *e, sim_job_t *job, int gpu)
{
    job->phase = PHASE_READY;
    job->gpu = gpu;
    job->out->admitted_s = e->now_s;
    e->resident++;
    if (e->resident > e->result->peak_jobs_resident)
        e->result->peak_jobs_resident = e->resident;
}

static void job_refused(sim_engine_t *e, sim_job_t *job)
{
    job->phase = PHASE_REFUSED;
    job->out->refused = true;
    e->unfinished--;
}

/* mps: every job that fits by the sum of P + E is admitted, in submission order, skipping
 * those that do not fit now. GPU: fewest jobs, then least memory left over, then index. */
static void admit_mps(sim_engine_t *e)
{
    uint64_t capacity = e->config->gpu_memory_bytes;
    for (size_t i = 0; i < e->waiting_count; i++) {
        sim_job_t *job = &e->jobs[e->waiting[i]];
        uint64_t need = job->spec->persistent_bytes + job->spec->ephemeral_bytes;
        if (need > capacity) {
            job_refused(e, job);
            continue;
        }
        int best = -1;
        for (unsigned g = 0; g < e->config->gpus; g++) {
            if (e->mps_used_bytes[g] + need > capacity)
                continue;
            if (best < 0 || e->gpu_jobs[g] < e->gpu_jobs[best] ||
                (e->gpu_jobs[g] == e->gpu_jobs[best] &&
                 e->mps_used_bytes[g] > e->mps_used_bytes[best]))
                best = (int)g;
        }
        if (best < 0)
            continue;
        e->mps_used_bytes[best] += need;
        e->gpu_jobs[best]++;
        job_admitted(e, job, best);
        sim_at_boundary(e, job);
    }
    remove_from_waiting(e);
}

/* Per GPU: the memory already charged to admitted jobs and the largest lane. A job can be
 * admitted on a GPU only if P + charged + max(E, largest lane) fits (every lane is as large
 * as its largest E, and the job's lane must hold its E): a necessary condition, so leaving
 * out the jobs that fail it changes nothing for a non-blocking policy, and saves offering
 * hundreds of hopeless jobs to the lane manager after every departure. */

static int read_books(sim_engine_t *e, sim_gpu_books_t *books)
{
    size_t lanes = lanes_list(e->lanes, NULL, 0);
    if (lanes > e->lane_info_capacity) {
        lanes_lane_info_t *infos = realloc(e->lane_infos, lanes * 2 * sizeof(*infos));
        if (!infos)
            return sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
        e->lane_infos = infos;
        e->lane_info_capacity = lanes * 2;
    }
    for (unsigned g = 0; g < e->config->gpus; g++) {
        lanes_gpu_info_t info;
        if (lanes_gpu_info(e->lanes, (int)g, &info) != LANES_OK)
            return sim_fail(e, SIM_ERROR_INTERNAL, "lanes_gpu_info(%u) failed", g);
        books[g] = (sim_gpu_books_t){info.persistent_bytes, 0, info.capacity_bytes, info.job_count};
    }
    lanes = lanes_list(e->lanes, e->lane_infos, e->lane_info_capacity);
    for (size_t i = 0; i < lanes; i++) {
        sim_gpu_books_t *b = &books[e->lane_infos[i].gpu];
        if (e->lane_infos[i].size_bytes > b->largest_lane_bytes)
            b->largest_lane_bytes = e->lane_infos[i].size_bytes;
    }
    return SIM_OK;
}

static bool may_fit(const sim_engine_t *e, const sim_gpu_books_t *books, const sim_job_t *job)
{
    const sim_job_spec_t *s = job->spec;
    uint32_t max_jobs = policy_max_jobs_per_gpu(&e->policy);
    bool fits_alone = false;
    for (unsigned g = 0; g < e->config->gpus; g++) {
        const sim_gpu_books_t *b = &books[g];
        uint64_t lane = s->ephemeral_bytes > b->largest_lane_bytes ? s->ephemeral_bytes
                                                                  : b->largest_lane_bytes;
        fits_alone |= s->persistent_bytes + s->ephemeral_bytes <= b->capacity_bytes;
        if ((max_jobs == 0 || b->jobs < max_jobs) &&
            b->charged_bytes + s->persistent_bytes + lane <= b->capacity_bytes)
            return true;
    }
    return !fits_alone; /* let the lane manager refuse it (LANES_NEVER_FITS) */
}

static void admit_lanes(sim_engine_t *e)
{
    bool strict = e->mode == MODE_EXCLUSIVE || policy_admission_blocks(&e->policy);
    size_t n = 0;
    sim_gpu_books_t *books = e->books;

    if (!strict && read_books(e, books) < 0)
        return;
    for (size_t i = 0; i < e->waiting_count; i++) {
        const sim_job_t *job = &e->jobs[e->waiting[i]];
        if (strict || may_fit(e, books, job)) {
            e->candidates[n] = e->waiting[i];
            e->views[n++] = job->view;
        }
    }
    if (n == 0)
        return;
    policy_admission_order(&e->policy, e->views, n, e->order, sim_to_ns(e->now_s));
    for (size_t i = 0; i < n; i++) {
        const sim_job_t *job = &e->jobs[e->candidates[e->order[i]]];
        e->requests[i] = (lanes_request_t){
            .job_id = job->view.id,
            .uid = 0,
            .persistent_bytes = job->spec->persistent_bytes,
            .ephemeral_bytes = job->spec->ephemeral_bytes,
            .gpu = LANES_ANY_GPU,
        };
    }
    lanes_admit_in_order(e->lanes, e->requests, n, strict, e->statuses, NULL);
    for (size_t i = 0; i < n && !e->error; i++) {
        sim_job_t *job = sim_job_by_id(e, e->requests[i].job_id);
        lanes_placement_t placement;
        switch (e->statuses[i]) {
        case LANES_OK:
            /* read back now: a later admission of this round may have moved it */
            if (lanes_job_placement(e->lanes, job->view.id, &placement) != LANES_OK) {
                sim_fail(e, SIM_ERROR_INTERNAL, "admitted job %llu has no placement",
                     (unsigned long long)job->spec->trace_id);
                break;
            }
            job->view.lane = placement.lane_id;
            job_admitted(e, job, placement.gpu);
            sim_touch_lane(e, placement.lane_id);
            break;
        case LANES_WAIT:
            break;
        case LANES_NEVER_FITS:
            job_refused(e, job);
            break;
        default:
            sim_fail(e, SIM_ERROR_INTERNAL, "lanes_admit(job %llu): %s",
                 (unsigned long long)job->spec->trace_id, lanes_status_name(e->statuses[i]));
        }
    }
    /* Announce the newcomers only after the round: their lanes are final now. */
    for (size_t i = 0; i < n && !e->error; i++) {
        if (e->statuses[i] != LANES_OK)
            continue;
        sim_job_t *job = sim_job_by_id(e, e->requests[i].job_id);
        policy_job_arrived(&e->policy, &job->view, sim_to_ns(e->now_s));
        sim_at_boundary(e, job);
    }
    remove_from_waiting(e);
    sim_schedule_touched(e);
}

void sim_admit(sim_engine_t *e)
{
    if (e->waiting_count == 0 || e->error)
        return;
    if (e->mode == MODE_MPS)
        admit_mps(e);
    else
        admit_lanes(e);
}