/* The simulator's adapter to the scheduling core (scheduler-core/sched_core.h): events of the
 * heap go in (submissions, boundaries, departures), the core's effects come out and are
 * carried out on the timing model. Admission, lane holders, turns, budgets, learned sizes and
 * re-layouts are the core's, as in salusd. The only admission written here is the mps
 * baseline's (no lanes: every job that fits by the sum of its sizes runs at once), which is
 * not salus's mechanism but what it is compared with. */
#include "sim-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the core's effects ----------------------------------------------------------------- */

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

static void check(sim_engine_t *e, int rc, const char *what, const sim_job_t *job)
{
    if (rc < 0)
        sim_fail(e, rc == -12 ? SIM_ERROR_NO_MEMORY : SIM_ERROR_INTERNAL,
                 "scheduling core: %s (job %llu) failed (%d)", what,
                 job ? (unsigned long long)job->spec->trace_id : 0ull, rc);
}

/* The turn-wait statistics (sim.h): the job is granted its lane now. */
static void note_turn_waits(sim_engine_t *e, const sim_job_t *job)
{
    double waited_s = e->now_s - job->ready_s;
    if (waited_s > e->result->max_turn_wait_s)
        e->result->max_turn_wait_s = waited_s;
    if (!e->queue_ranks)
        return;
    e->result->has_lower_queue_wait = true;
    if (!e->lane_members) {
        e->lane_members = calloc(e->count + 1, sizeof(*e->lane_members));
        if (!e->lane_members) {
            sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
            return;
        }
    }
    uint64_t now_ns = sim_to_ns(e->now_s);
    size_t n = lanes_lane_jobs(sched_core_lanes(e->core), job->lane, e->lane_members,
                               e->count + 1);
    for (size_t k = 0; k < n && k <= e->count; k++) {
        const sim_job_t *other = sim_job_by_id(e, e->lane_members[k]);
        double rank;
        if (!other || other == job || other->phase != PHASE_READY ||
            sched_core_job_rank(e->core, other->id, now_ns, &rank) < 0 || rank < 1)
            continue;
        if (e->now_s - other->ready_s > e->result->max_lower_queue_wait_s)
            e->result->max_lower_queue_wait_s = e->now_s - other->ready_s;
    }
}

/* Carries out the effects from index `from` on (those of the event just sent), in order. An
 * effect may send a further event (a grant whose iteration ends at once): its effects are
 * appended after these, carried out by the nested call and dropped, so the walk goes on
 * depth first with nothing copied or allocated per event. */
static void apply_from(sim_engine_t *e, size_t from)
{
    for (size_t i = from; i < e->effects.count && !e->error; i++) {
        /* Each field is read alone, before carrying it out (a nested event may move the
         * list): fields the core has just stored one by one, read together with one wider
         * load, would stall on store forwarding. */
        const sched_core_effect_kind_t kind = e->effects.items[i].kind;
        const uint64_t id = e->effects.items[i].job_id;
        sim_job_t *job = sim_job_by_id(e, id);
        if (!job) {
            sim_fail(e, SIM_ERROR_INTERNAL, "scheduling core: effect for unknown job %llu",
                     (unsigned long long)id);
            break;
        }
        switch (kind) {
        case SCHED_CORE_ADMIT:
            job->lane = e->effects.items[i].lane;
            job->budget_bytes = e->effects.items[i].budget_bytes;
            job_admitted(e, job, e->effects.items[i].gpu);
            e->starting[e->starting_count++] = (size_t)(job->id - 1);
            break;
        case SCHED_CORE_REFUSE:
            job_refused(e, job);
            break;
        case SCHED_CORE_GRANT:
            job->lane = e->effects.items[i].lane;
            note_turn_waits(e, job);
            if (e->config->on_grant)
                e->config->on_grant(e->config->on_grant_context, job->spec->trace_id, e->now_s);
            sim_granted(e, job, job->lane);
            break;
        case SCHED_CORE_MOVE:
            job->lane = e->effects.items[i].lane;
            break;
        case SCHED_CORE_BUDGET: /* its next GPU part needs P + E within it */
            job->budget_bytes = e->effects.items[i].budget_bytes;
            if (job->phase == PHASE_MEMORY &&
                job->spec->persistent_bytes + job->spec->ephemeral_bytes <= job->budget_bytes)
                sim_start_gpu_part(e, job);
            break;
        case SCHED_CORE_STOP_FREE_RUN: /* the model stops at every boundary anyway */
        case SCHED_CORE_LEARNED:
        case SCHED_CORE_SLOT_DONE: /* the simulator has no cluster groups */
        case SCHED_CORE_GATE:      /* the simulator models no gate */
            break;
        }
    }
    e->effects.count = from;
}

void sim_apply_effects(sim_engine_t *e, size_t from)
{
    apply_from(e, from);
    /* a job admitted stands at its first boundary: it reports it, as salusd's jobs do once
     * their registration is answered (in admission order) */
    while (e->starting_next < e->starting_count && !e->error) {
        sim_job_t *job = &e->jobs[e->starting[e->starting_next++]];
        if (job->phase != PHASE_READY)
            continue; /* (failed meanwhile) */
        if (e->config->lane_hold_gpu_only)
            sim_start_iteration(e, job, 0); /* its host part needs no lane */
        else
            sim_boundary(e, job, true);
    }
    e->starting_count = e->starting_next = 0;
}

int sim_wants_memory(sim_engine_t *e, sim_job_t *job, uint64_t bytes)
{
    size_t from = e->effects.count;
    /* (it allocates P + E at once: it holds nothing while it waits) */
    int rc = sched_core_job_wants(e->core, job->id, bytes, 0, sim_to_ns(e->now_s), &e->effects);
    if (rc < 0 && rc != -EAGAIN && rc != -ENOSPC)
        check(e, rc, "memory request", job);
    apply_from(e, from);
    return rc;
}

void sim_boundary(sim_engine_t *e, sim_job_t *job, bool ready)
{
    sched_core_boundary_t b = {
        .iterations = job->iterations_done,
        .busy_ns = job->busy_ns,
        .last_iteration_ns = job->last_iteration_ns,
        .persistent_bytes = job->spec->persistent_bytes,
        .ephemeral_bytes = job->spec->ephemeral_bytes,
        .ready = ready,
    };
    size_t from = e->effects.count;
    job->phase = PHASE_READY;
    job->ready_s = e->now_s;
    check(e, sched_core_job_boundary(e->core, job->id, &b, sim_to_ns(e->now_s), &e->effects),
          "boundary", job);
    apply_from(e, from);
}

/* ---- the mps baseline ------------------------------------------------------------------- */

static void remove_from_waiting(sim_engine_t *e)
{
    size_t kept = 0;
    for (size_t i = 0; i < e->waiting_count; i++)
        if (e->jobs[e->waiting[i]].phase == PHASE_WAITING)
            e->waiting[kept++] = e->waiting[i];
    e->waiting_count = kept;
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
        sim_start_iteration(e, job, 0);
    }
    remove_from_waiting(e);
}

/* ---- events ----------------------------------------------------------------------------- */

void sim_submit(sim_engine_t *e, size_t from, size_t to)
{
    const sim_config_t *c = e->config;
    for (size_t i = from; i < to; i++)
        e->jobs[i].phase = PHASE_WAITING;
    if (e->mode == MODE_MPS) {
        for (size_t i = from; i < to; i++)
            e->waiting[e->waiting_count++] = i;
        admit_mps(e);
        return;
    }
    for (size_t i = from; i < to; i++) {
        const sim_job_spec_t *s = e->jobs[i].spec;
        /* without hints the sizes are learned from the boundaries, as in salusd */
        e->arrivals[i - from] = (sched_core_job_hints_t){
            .id = e->jobs[i].id,
            .persistent_bytes = c->hints ? s->persistent_bytes : LANES_SIZE_UNKNOWN,
            .ephemeral_bytes = c->hints ? s->ephemeral_bytes : LANES_SIZE_UNKNOWN,
            .iterations_expected = c->hints ? s->iterations : 0,
            /* the time it will hold its lane per iteration: the whole iteration, or with
             * --lane-hold gpu its GPU part (what the policies measure later) */
            .iteration_ns = c->hints && !c->hints_iterations_only
                                ? sim_to_ns(c->lane_hold_gpu_only ? e->jobs[i].gpu_s
                                                                  : s->iteration_ms / 1e3)
                                : 0,
            .priority = s->priority,
            .latency_target_ns = sim_to_ns(s->latency_target_ms / 1e3),
        };
    }
    size_t first = e->effects.count;
    check(e, sched_core_jobs_registered(e->core, e->arrivals, to - from, sim_to_ns(e->now_s),
                                        &e->effects),
          "registration", &e->jobs[from]);
    sim_apply_effects(e, first);
}

void sim_job_done(sim_engine_t *e, sim_job_t *job)
{
    job->phase = PHASE_DONE;
    job->out->finished_s = e->now_s;
    e->unfinished--;
    e->resident--;
    if (e->mode == MODE_MPS) {
        e->mps_used_bytes[job->gpu] -= job->spec->persistent_bytes + job->spec->ephemeral_bytes;
        e->gpu_jobs[job->gpu]--;
        admit_mps(e);
        return;
    }
    size_t from = e->effects.count;
    check(e, sched_core_job_left(e->core, job->id, SCHED_CORE_EXIT_DONE, sim_to_ns(e->now_s),
                                 &e->effects),
          "departure", job);
    sim_apply_effects(e, from);
}

void sim_job_failed(sim_engine_t *e, sim_job_t *job)
{
    job->phase = PHASE_FAILED;
    job->out->failed = true;
    job->out->finished_s = e->now_s;
    e->unfinished--;
    e->resident--;
    size_t from = e->effects.count;
    check(e, sched_core_job_left(e->core, job->id, SCHED_CORE_EXIT_FAILED, sim_to_ns(e->now_s),
                                 &e->effects),
          "departure", job);
    sim_apply_effects(e, from);
}
