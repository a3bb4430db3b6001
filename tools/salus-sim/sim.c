/* The simulation core: arrivals, admission (lane manager or the mps baseline), lanes taking
 * turns by iteration through the policy, host parts on a timer heap and GPU parts under
 * processor sharing (share.c). The model is described in sim.h and README.md. */
#include "sim-internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int sim_fail(sim_engine_t *e, int code, const char *fmt, ...)
{
    va_list ap;
    if (e->error)
        return e->error; /* keep the first error */
    e->error = code;
    if (e->err && e->err_size) {
        va_start(ap, fmt);
        vsnprintf(e->err, e->err_size, fmt, ap);
        va_end(ap);
    }
    return code;
}

void sim_config_default(sim_config_t *config)
{
    memset(config, 0, sizeof(*config));
    config->policy = "pack";
    config->gpus = 1;
    config->gpu_memory_bytes = 16ull << 30;
    config->switch_s = 0;
    config->hints = true;
}

bool sim_policy_known(const char *name)
{
    return name && (strcasecmp(name, "exclusive") == 0 || strcasecmp(name, "mps") == 0 ||
                    policy_find(name) != NULL);
}

void sim_policy_names(FILE *out, const char *separator)
{
    for (size_t i = 0; i < policy_count(); i++)
        fprintf(out, "%s%s", policy_at(i)->name, separator);
    fprintf(out, "exclusive%smps", separator);
}


static uint64_t *lane_last_job(sim_engine_t *e, uint32_t lane)
{
    if (lane >= e->lane_slots) {
        size_t slots = e->lane_slots ? e->lane_slots : 64;
        while (slots <= lane)
            slots *= 2;
        uint64_t *last = realloc(e->lane_last_job, slots * sizeof(*last));
        if (!last) {
            sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
            return NULL;
        }
        memset(last + e->lane_slots, 0, (slots - e->lane_slots) * sizeof(*last));
        e->lane_last_job = last;
        e->lane_slots = slots;
    }
    return &e->lane_last_job[lane];
}

/* ---- iterations ------------------------------------------------------------------------- */

static void end_iteration(sim_engine_t *e, sim_job_t *job);
static void host_part_done_unheld(sim_engine_t *e, sim_job_t *job);

static bool hold_whole_iteration(const sim_engine_t *e)
{
    return e->mode == MODE_MPS || !e->config->lane_hold_gpu_only;
}

static void after_s(sim_engine_t *e, sim_job_t *job, sim_phase_t phase, double duration_s)
{
    job->phase = phase;
    if (sim_heap_push(&e->host_ends, e->now_s + duration_s, (uint32_t)(job->view.id - 1)) < 0)
        sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
}

static void start_gpu_part(sim_engine_t *e, sim_job_t *job)
{
    double work_s = job->spec->gpu_fraction * job->spec->iteration_ms / 1e3;
    if (work_s <= 0) {
        end_iteration(e, job);
        return;
    }
    job->phase = PHASE_GPU;
    if (sim_gpu_start(&e->gpus[job->gpu], e->now_s, (uint32_t)(job->view.id - 1), work_s) < 0)
        sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
}

/* The job takes its lane (lanes_grant). Returns the switch cost to pay, or -1 on error. */
static double take_lane(sim_engine_t *e, sim_job_t *job, uint32_t lane)
{
    double switch_s = 0;
    lanes_status_t status = lanes_grant(e->lanes, job->view.id, NULL);
    if (status != LANES_OK) {
        sim_fail(e, SIM_ERROR_INTERNAL, "lanes_grant(job %llu): %s",
             (unsigned long long)job->spec->trace_id, lanes_status_name(status));
        return -1;
    }
    job->holds_lane = true;
    job->view.runnable = false;
    uint64_t *last = lane_last_job(e, lane);
    if (!last)
        return -1;
    if (*last != 0 && *last != job->view.id) {
        switch_s = e->config->switch_s;
        job->out->switches++;
        e->result->switches++;
    }
    *last = job->view.id;
    return switch_s;
}

/* An iteration begins. Holding the lane for the whole iteration (the default, and mps where
 * every job is its own lane): the switch cost, then the host part, then the GPU part. With
 * --lane-hold gpu: the host part runs without the lane; the job then waits for its lane. */
static void start_iteration(sim_engine_t *e, sim_job_t *job, double switch_s)
{
    if (job->view.iterations_done == 0)
        job->out->started_s = e->now_s;
    job->view.runnable = false;
    job->iteration_start_s = e->now_s;
    double host_s = (1.0 - job->spec->gpu_fraction) * job->spec->iteration_ms / 1e3;
    if (!hold_whole_iteration(e)) {
        if (host_s > 0)
            after_s(e, job, PHASE_HOST_UNHELD, host_s);
        else
            host_part_done_unheld(e, job);
        return;
    }
    if (switch_s + host_s > 0)
        after_s(e, job, PHASE_HOST, switch_s + host_s);
    else
        start_gpu_part(e, job);
}

/* Offers a free lane to the policy. A lane is busy while one of its jobs holds it. */
static void schedule_lane(sim_engine_t *e, uint32_t lane)
{
    /* members and views hold every job of the trace: a lane never holds more */
    size_t n = lanes_lane_jobs(e->lanes, lane, e->members, e->count);
    for (size_t i = 0; i < n; i++) {
        const sim_job_t *job = sim_job_by_id(e, e->members[i]);
        if (job->holds_lane)
            return;
        e->views[i] = job->view;
    }
    int pick = n ? policy_pick(&e->policy, lane, e->views, n, sim_to_ns(e->now_s)) : -1;
    if (pick < 0)
        return;
    sim_job_t *job = sim_job_by_id(e, e->views[pick].id);
    if (!job || job->phase != PHASE_READY || !job->view.runnable || job->view.lane != lane) {
        sim_fail(e, SIM_ERROR_INTERNAL, "policy %s picked a job that cannot run",
             policy_name(&e->policy));
        return;
    }
    double switch_s = take_lane(e, job, lane);
    if (switch_s < 0)
        return;
    if (hold_whole_iteration(e))
        start_iteration(e, job, switch_s);
    else if (switch_s > 0)
        after_s(e, job, PHASE_SWITCH, switch_s);
    else
        start_gpu_part(e, job);
}

/* --lane-hold gpu: the host part is over; the job waits at its lane for the GPU part. */
static void host_part_done_unheld(sim_engine_t *e, sim_job_t *job)
{
    if (job->spec->gpu_fraction <= 0) {
        end_iteration(e, job);
        return;
    }
    job->phase = PHASE_READY;
    job->view.runnable = true;
    schedule_lane(e, job->view.lane);
}

/* A timer of the host heap fired. */
static void timer_done(sim_engine_t *e, sim_job_t *job)
{
    if (job->phase == PHASE_HOST_UNHELD)
        host_part_done_unheld(e, job);
    else
        start_gpu_part(e, job); /* PHASE_HOST or PHASE_SWITCH */
}

/* The job is at an iteration boundary, admitted, not holding its lane. */
void sim_at_boundary(sim_engine_t *e, sim_job_t *job)
{
    job->phase = PHASE_READY;
    if (e->mode == MODE_MPS)
        start_iteration(e, job, 0);
    else if (!hold_whole_iteration(e))
        start_iteration(e, job, 0); /* its host part needs no lane */
    else
        job->view.runnable = true; /* the caller offers the lane to the policy */
}

void sim_schedule_touched(sim_engine_t *e)
{
    /* schedule_lane never touches lanes itself, so the list is stable while we walk it */
    for (size_t i = 0; i < e->touched_count && !e->error; i++)
        schedule_lane(e, e->touched[i]);
    e->touched_count = 0;
}


/* ---- events ----------------------------------------------------------------------------- */

static void finish_job(sim_engine_t *e, sim_job_t *job)
{
    job->phase = PHASE_DONE;
    job->out->finished_s = e->now_s;
    e->unfinished--;
    e->resident--;
    if (e->mode == MODE_MPS) {
        e->mps_used_bytes[job->gpu] -= job->spec->persistent_bytes + job->spec->ephemeral_bytes;
        e->gpu_jobs[job->gpu]--;
        sim_admit(e);
        return;
    }
    uint32_t lane = job->view.lane;
    lanes_status_t status = lanes_release(e->lanes, job->view.id);
    if (status != LANES_OK) {
        sim_fail(e, SIM_ERROR_INTERNAL, "lanes_release(job %llu): %s",
             (unsigned long long)job->spec->trace_id, lanes_status_name(status));
        return;
    }
    policy_job_left(&e->policy, job->view.id, sim_to_ns(e->now_s));
    sim_touch_lane(e, lane);
    sim_admit(e); /* schedules the touched lanes, the departed job's among them */
    sim_schedule_touched(e);
}

static void end_iteration(sim_engine_t *e, sim_job_t *job)
{
    double duration_s = e->now_s - job->iteration_start_s;
    job->measured_s += duration_s;
    job->view.iterations_done++;
    job->view.attained_ns += sim_to_ns(duration_s);
    job->view.mean_iteration_ns = sim_to_ns(job->measured_s / (double)job->view.iterations_done);
    e->result->iterations++;
    if (job->holds_lane) {
        lanes_yield(e->lanes, job->view.id);
        job->holds_lane = false;
    }
    if (e->mode != MODE_MPS)
        policy_iteration_done(&e->policy, &job->view, sim_to_ns(duration_s), sim_to_ns(e->now_s));
    if (job->view.iterations_done >= job->spec->iterations) {
        finish_job(e, job);
        return;
    }
    sim_at_boundary(e, job);
    if (e->mode != MODE_MPS)
        schedule_lane(e, job->view.lane);
}

static void arrive(sim_engine_t *e)
{
    double at = e->jobs[e->next_arrival].spec->submit_s;
    /* every job submitted at this instant joins before admission runs */
    while (e->next_arrival < e->count && e->jobs[e->next_arrival].spec->submit_s == at) {
        e->jobs[e->next_arrival].phase = PHASE_WAITING;
        e->waiting[e->waiting_count++] = e->next_arrival++;
    }
    sim_admit(e);
}

static int run_events(sim_engine_t *e)
{
    while (!e->error && e->unfinished > 0) {
        double next_arrival = e->next_arrival < e->count
                                  ? e->jobs[e->next_arrival].spec->submit_s : INFINITY;
        double next_host = sim_heap_top_key(&e->host_ends, INFINITY);
        double next_gpu = INFINITY;
        unsigned gpu = 0;
        for (unsigned g = 0; g < e->config->gpus; g++) {
            double t = sim_gpu_next_finish_s(&e->gpus[g], INFINITY);
            if (t < next_gpu) {
                next_gpu = t;
                gpu = g;
            }
        }
        /* At equal times: GPU parts end first, then host parts, then arrivals, so that an
         * arrival sees what was freed at that instant. */
        if (next_gpu <= next_host && next_gpu <= next_arrival && next_gpu < INFINITY) {
            e->now_s = next_gpu > e->now_s ? next_gpu : e->now_s;
            end_iteration(e, &e->jobs[sim_gpu_finish(&e->gpus[gpu], e->now_s)]);
        } else if (next_host <= next_arrival && next_host < INFINITY) {
            e->now_s = next_host > e->now_s ? next_host : e->now_s;
            timer_done(e, &e->jobs[sim_heap_pop(&e->host_ends).job]);
        } else if (next_arrival < INFINITY) {
            e->now_s = next_arrival > e->now_s ? next_arrival : e->now_s;
            arrive(e);
        } else {
            return sim_fail(e, SIM_ERROR_INTERNAL,
                        "%zu jobs can never run (nothing is running and none is admitted)",
                        e->unfinished);
        }
    }
    for (unsigned g = 0; g < e->config->gpus; g++) {
        sim_gpu_advance(&e->gpus[g], e->now_s);
        e->result->gpu_busy_s += e->gpus[g].busy_s;
    }
    return e->error;
}

/* ---- set-up ----------------------------------------------------------------------------- */

static int compare_submission(const void *a, const void *b)
{
    const sim_job_t *x = a, *y = b;
    if (x->spec->submit_s != y->spec->submit_s)
        return x->spec->submit_s < y->spec->submit_s ? -1 : 1;
    return x->spec->line < y->spec->line ? -1 : x->spec->line > y->spec->line;
}

static int engine_init(sim_engine_t *e, const sim_trace_t *trace)
{
    const sim_config_t *c = e->config;
    size_t n = trace->count ? trace->count : 1;

    if (strcasecmp(c->policy, "mps") == 0)
        e->mode = MODE_MPS;
    else if (strcasecmp(c->policy, "exclusive") == 0)
        e->mode = MODE_EXCLUSIVE;
    if (policy_init(&e->policy, e->mode == MODE_LANES ? c->policy : "fifo", NULL) < 0)
        return sim_fail(e, SIM_ERROR_MALFORMED, "unknown policy '%s'", c->policy);

    lanes_config_t lanes_config;
    lanes_config_default(&lanes_config);
    lanes_config.job_overhead_bytes = 0;
    lanes_config.on_change = sim_on_lane_change;
    lanes_config.on_change_context = e;
    e->lanes = lanes_create(&lanes_config);
    e->jobs = calloc(n, sizeof(*e->jobs));
    e->waiting = calloc(n, sizeof(*e->waiting));
    e->candidates = calloc(n, sizeof(*e->candidates));
    e->order = calloc(n, sizeof(*e->order));
    e->views = calloc(n, sizeof(*e->views));
    e->requests = calloc(n, sizeof(*e->requests));
    e->statuses = calloc(n, sizeof(*e->statuses));
    e->members = calloc(n, sizeof(*e->members));
    e->books = calloc(c->gpus, sizeof(*e->books));
    e->gpus = calloc(c->gpus, sizeof(*e->gpus));
    e->mps_used_bytes = calloc(c->gpus, sizeof(*e->mps_used_bytes));
    e->gpu_jobs = calloc(c->gpus, sizeof(*e->gpu_jobs));
    e->result->jobs = calloc(n, sizeof(*e->result->jobs));
    if (!e->lanes || !e->jobs || !e->waiting || !e->candidates || !e->order || !e->views ||
        !e->requests || !e->statuses || !e->members || !e->books || !e->gpus ||
        !e->mps_used_bytes || !e->gpu_jobs ||
        !e->result->jobs)
        return sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
    e->result->job_count = trace->count;
    lanes_set_max_jobs_per_gpu(e->lanes, e->mode == MODE_EXCLUSIVE
                                             ? 1 : policy_max_jobs_per_gpu(&e->policy));
    for (unsigned g = 0; g < c->gpus; g++)
        e->gpus[g].fcfs = c->gpu_fcfs;
    for (unsigned g = 0; g < c->gpus; g++)
        if (lanes_add_gpu(e->lanes, (int)g, c->gpu_memory_bytes, 0) != LANES_OK)
            return sim_fail(e, SIM_ERROR_INTERNAL, "lanes_add_gpu(%u) failed", g);

    for (size_t i = 0; i < trace->count; i++) {
        e->jobs[i].spec = &trace->jobs[i];
        e->jobs[i].out = &e->result->jobs[i];
    }
    qsort(e->jobs, trace->count, sizeof(*e->jobs), compare_submission);
    for (size_t i = 0; i < trace->count; i++) {
        sim_job_t *job = &e->jobs[i];
        const sim_job_spec_t *s = job->spec;
        job->view = (policy_job_t){
            .id = i + 1,
            .arrival_ns = sim_to_ns(s->submit_s),
            .iterations_expected = c->hints ? s->iterations : 0,
            .mean_iteration_ns = c->hints && !c->hints_iterations_only
                                     ? sim_to_ns(s->iteration_ms / 1e3) : 0,
            .priority = s->priority,
        };
        job->gpu = -1;
    }
    e->count = e->unfinished = trace->count;
    return SIM_OK;
}

static void engine_free(sim_engine_t *e)
{
    policy_fini(&e->policy);
    lanes_destroy(e->lanes);
    for (unsigned g = 0; e->gpus && g < e->config->gpus; g++)
        sim_gpu_free(&e->gpus[g]);
    sim_heap_free(&e->host_ends);
    free(e->gpus);
    free(e->jobs);
    free(e->waiting);
    free(e->candidates);
    free(e->order);
    free(e->views);
    free(e->requests);
    free(e->statuses);
    free(e->mps_used_bytes);
    free(e->gpu_jobs);
    free(e->lane_last_job);
    free(e->touched);
    free(e->members);
    free(e->books);
    free(e->lane_infos);
}

int sim_run(const sim_trace_t *trace, const sim_config_t *config, sim_result_t *result,
            char *err, size_t err_size)
{
    sim_engine_t e = {.config = config, .result = result, .err = err, .err_size = err_size};
    int rc;

    memset(result, 0, sizeof(*result));
    if (!config->gpus || !config->gpu_memory_bytes || config->switch_s < 0 ||
        !isfinite(config->switch_s)) {
        rc = sim_fail(&e, SIM_ERROR_MALFORMED, "invalid configuration (gpus, memory or switch)");
        goto done;
    }
    rc = engine_init(&e, trace);
    if (rc == SIM_OK)
        rc = run_events(&e);
    if (rc == SIM_OK)
        rc = sim_result_summarise(trace, result);
    if (rc == SIM_OK && result->makespan_s > 0)
        result->utilization = result->gpu_busy_s / (result->makespan_s * (double)config->gpus);

done:
    engine_free(&e);
    return rc;
}
