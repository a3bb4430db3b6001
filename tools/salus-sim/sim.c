/* The simulation core: arrivals, admission (lane manager or the mps baseline), lanes taking
 * turns by iteration through the policy, host parts on a timer heap and GPU parts under
 * processor sharing (share.c). The model is described in sim.h and README.md. */
#include "sim-internal.h"

#include <errno.h>
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
    config->lane_hold_gpu_only = true;
    config->provisional_min_bytes = LANES_DEFAULT_PROVISIONAL_MIN_BYTES;
    config->provisional_max_bytes = LANES_DEFAULT_PROVISIONAL_MAX_BYTES;
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

/* ---- iterations: the timing model ------------------------------------------------------ */

static void end_iteration(sim_engine_t *e, sim_job_t *job);

static bool hold_whole_iteration(const sim_engine_t *e)
{
    return e->mode == MODE_MPS || !e->config->lane_hold_gpu_only;
}

static void after_s(sim_engine_t *e, sim_job_t *job, sim_phase_t phase, double duration_s)
{
    job->phase = phase;
    if (sim_heap_push(&e->host_ends, e->now_s + duration_s, (uint32_t)(job->id - 1)) < 0)
        sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
}

void sim_start_gpu_part(sim_engine_t *e, sim_job_t *job)
{
    double work_s = job->gpu_s;
    /* its memory: P + E within its budget (known sizes always fit theirs). A job of unknown
     * sizes whose claim is less waits, its lane held, for memory that frees on its GPU to grow
     * its claim (lanes.h: before anyone else is admitted there), as salusd's mem_grow waits;
     * one that needs more than a claim may ever hold fails, out of memory. */
    uint64_t need = job->spec->persistent_bytes + job->spec->ephemeral_bytes;
    if (e->mode != MODE_MPS && need > job->budget_bytes) {
        job->phase = PHASE_MEMORY;
        if (sim_wants_memory(e, job, need) == -ENOSPC)
            sim_job_failed(e, job);
        return; /* (its BUDGET effect starts the part when it has the memory) */
    }
    if (work_s <= 0) {
        end_iteration(e, job);
        return;
    }
    job->phase = PHASE_GPU;
    if (sim_gpu_start(&e->gpus[job->gpu], e->now_s, (uint32_t)(job->id - 1), work_s) < 0)
        sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
}

/* An iteration begins. By default (--lane-hold gpu) the host part runs without the lane and
 * the job then waits for its lane (sim_boundary). Holding the lane for the whole iteration
 * (--lane-hold iteration, and mps where every job is its own lane): the switch cost, then the
 * host part, then the GPU part. */
void sim_start_iteration(sim_engine_t *e, sim_job_t *job, double switch_s)
{
    /* with --lane-hold gpu a job that waits for its first grant started its first iteration
     * its host part before that grant (sim_granted); the wait is queueing */
    if (job->iterations_done == 0 && (hold_whole_iteration(e) || job->spec->gpu_fraction <= 0))
        job->out->started_s = e->now_s;
    job->iteration_start_s = e->now_s;
    double host_s = job->host_s;
    if (!hold_whole_iteration(e)) {
        if (host_s > 0)
            after_s(e, job, PHASE_HOST_UNHELD, host_s);
        else if (job->spec->gpu_fraction <= 0)
            end_iteration(e, job);
        else
            sim_boundary(e, job, true);
        return;
    }
    if (switch_s + host_s > 0)
        after_s(e, job, PHASE_HOST, switch_s + host_s);
    else
        sim_start_gpu_part(e, job);
}

/* The switch cost: a lane that goes from one job to another. */
void sim_granted(sim_engine_t *e, sim_job_t *job, uint32_t lane)
{
    double switch_s = 0;
    uint64_t *last = lane_last_job(e, lane);
    if (!last)
        return;
    if (*last != 0 && *last != job->id) {
        switch_s = e->config->switch_s;
        job->out->switches++;
        e->result->switches++;
    }
    *last = job->id;
    job->hold_start_s = e->now_s;
    if (job->iterations_done == 0 && !hold_whole_iteration(e))
        job->out->started_s = e->now_s - job->host_s;
    if (hold_whole_iteration(e))
        sim_start_iteration(e, job, switch_s);
    else if (switch_s > 0)
        after_s(e, job, PHASE_SWITCH, switch_s);
    else
        sim_start_gpu_part(e, job);
}

/* A timer of the host heap fired. */
static void timer_done(sim_engine_t *e, sim_job_t *job)
{
    if (job->phase != PHASE_HOST_UNHELD)
        sim_start_gpu_part(e, job); /* PHASE_HOST or PHASE_SWITCH */
    else if (job->spec->gpu_fraction <= 0)
        end_iteration(e, job);
    else
        sim_boundary(e, job, true); /* --lane-hold gpu: it waits at its lane for the GPU part */
}

/* ---- events ----------------------------------------------------------------------------- */

static void record_latency(sim_engine_t *e, sim_job_t *job, double latency_s)
{
    sim_job_result_t *out = job->out;
    if (out->requests == out->latency_capacity) {
        size_t capacity = out->latency_capacity ? out->latency_capacity * 2 : 64;
        double *items = realloc(out->latencies_s, capacity * sizeof(*items));
        if (!items) {
            sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
            return;
        }
        out->latencies_s = items;
        out->latency_capacity = capacity;
    }
    out->latencies_s[out->requests++] = latency_s > 0 ? latency_s : 0;
}

static void end_iteration(sim_engine_t *e, sim_job_t *job)
{
    /* what the job reports is the time it held its lane: its whole iteration, or with
     * --lane-hold gpu from its grant to the end of its GPU part (none without a GPU part) */
    double duration_s = e->now_s - job->iteration_start_s;
    if (!hold_whole_iteration(e))
        duration_s = job->spec->gpu_fraction > 0 ? e->now_s - job->hold_start_s : 0;
    job->iterations_done++;
    if (job->spec->latency_target_ms > 0) /* a request: from when it needed the GPU */
        record_latency(e, job, e->now_s - (job->iteration_start_s + job->host_s));
    job->last_iteration_ns = sim_to_ns(duration_s);
    job->busy_ns += job->last_iteration_ns;
    e->result->iterations++;
    if (job->iterations_done >= job->spec->iterations) {
        sim_job_done(e, job);
    } else if (e->mode == MODE_MPS) {
        sim_start_iteration(e, job, 0);
    } else if (hold_whole_iteration(e)) {
        sim_boundary(e, job, true);
    } else {
        /* --lane-hold gpu: the lane goes back now; the host part runs without it */
        sim_boundary(e, job, false);
        sim_start_iteration(e, job, 0);
    }
}

static void arrive(sim_engine_t *e)
{
    double at = e->jobs[e->next_arrival].spec->submit_s;
    /* every job submitted at this instant joins before admission runs */
    size_t from = e->next_arrival;
    while (e->next_arrival < e->count && e->jobs[e->next_arrival].spec->submit_s == at)
        e->next_arrival++;
    sim_submit(e, from, e->next_arrival);
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
    if (e->mode == MODE_LANES && !policy_find(c->policy))
        return sim_fail(e, SIM_ERROR_MALFORMED, "unknown policy '%s'", c->policy);
    if (e->mode != MODE_MPS) {
        /* exclusive: one job per GPU in strict arrival order, which is what fifo does */
        sched_core_config_t cc;
        int rc = 0;
        sched_core_config_default(&cc);
        cc.policy_name = e->mode == MODE_EXCLUSIVE ? "fifo" : c->policy;
        cc.lanes.job_overhead_bytes = 0;
        cc.lanes.provisional_min_bytes = c->provisional_min_bytes;
        cc.lanes.provisional_max_bytes = c->provisional_max_bytes;
        sched_core_config_fit_gpu(&cc, c->gpu_memory_bytes);
        e->core = sched_core_create(&cc, &rc);
        if (!e->core)
            return sim_fail(e, SIM_ERROR_NO_MEMORY, "scheduling core: %d", rc);
        for (unsigned g = 0; g < c->gpus; g++)
            if (sched_core_add_gpu(e->core, (int)g, c->gpu_memory_bytes, 0) < 0)
                return sim_fail(e, SIM_ERROR_INTERNAL, "sched_core_add_gpu(%u) failed", g);
        const char *rank_name = sched_core_rank_name(e->core);
        e->queue_ranks = rank_name && strcmp(rank_name, "queue") == 0;
    }
    e->jobs = calloc(n, sizeof(*e->jobs));
    e->waiting = calloc(n, sizeof(*e->waiting));
    e->arrivals = calloc(n, sizeof(*e->arrivals));
    e->starting = calloc(n, sizeof(*e->starting));
    e->gpus = calloc(c->gpus, sizeof(*e->gpus));
    e->lc = calloc(n, sizeof(*e->lc));
    e->kernel_s = calloc(n, sizeof(*e->kernel_s));
    e->mps_used_bytes = calloc(c->gpus, sizeof(*e->mps_used_bytes));
    e->gpu_jobs = calloc(c->gpus, sizeof(*e->gpu_jobs));
    e->result->jobs = calloc(n, sizeof(*e->result->jobs));
    if (!e->jobs || !e->waiting || !e->arrivals || !e->starting || !e->gpus ||
        !e->mps_used_bytes || !e->gpu_jobs || !e->result->jobs || !e->lc || !e->kernel_s)
        return sim_fail(e, SIM_ERROR_NO_MEMORY, "out of memory");
    e->result->job_count = trace->count;
    /* preemption at the gate: under a policy that has it (slo), with processor sharing */
    const policy_ops_t *ops = e->mode == MODE_LANES ? policy_find(c->policy) : NULL;
    bool gate = ops && ops->gate_preemption && !c->gpu_fcfs;
    for (unsigned g = 0; g < c->gpus; g++) {
        e->gpus[g].fcfs = c->gpu_fcfs;
        e->gpus[g].gate = gate;
        e->gpus[g].lc = e->lc;
        e->gpus[g].kernel_s = e->kernel_s;
    }

    for (size_t i = 0; i < trace->count; i++) {
        e->jobs[i].spec = &trace->jobs[i];
        e->jobs[i].out = &e->result->jobs[i];
    }
    qsort(e->jobs, trace->count, sizeof(*e->jobs), compare_submission);
    for (size_t i = 0; i < trace->count; i++) {
        const sim_job_spec_t *s = e->jobs[i].spec;
        e->jobs[i].id = i + 1;
        e->jobs[i].gpu = -1;
        e->jobs[i].host_s = (1.0 - s->gpu_fraction) * s->iteration_ms / 1e3;
        e->jobs[i].gpu_s = s->gpu_fraction * s->iteration_ms / 1e3;
        e->lc[i] = s->latency_target_ms > 0;
        e->kernel_s[i] = s->kernel_ms > 0 && s->kernel_ms / 1e3 < e->jobs[i].gpu_s
                             ? s->kernel_ms / 1e3 : e->jobs[i].gpu_s;
    }
    e->count = e->unfinished = trace->count;
    return SIM_OK;
}

static void engine_free(sim_engine_t *e)
{
    sched_core_destroy(e->core);
    sched_core_effects_free(&e->effects);
    for (unsigned g = 0; e->gpus && g < e->config->gpus; g++)
        sim_gpu_free(&e->gpus[g]);
    sim_heap_free(&e->host_ends);
    free(e->gpus);
    free(e->lc);
    free(e->kernel_s);
    free(e->jobs);
    free(e->waiting);
    free(e->arrivals);
    free(e->starting);
    free(e->mps_used_bytes);
    free(e->gpu_jobs);
    free(e->lane_last_job);
    free(e->lane_members);
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
    if (rc == SIM_OK && result->makespan_s > 0) {
        result->utilization = result->gpu_busy_s / (result->makespan_s * (double)config->gpus);
        result->iterations_per_s = (double)result->iterations / result->makespan_s;
    }

done:
    engine_free(&e);
    return rc;
}
