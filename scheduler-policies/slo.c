/* SLO: latency-critical jobs (a latency target) first at every decision; best-effort jobs
 * fill the rest in the order of a base policy (config slo_base: "fair" by default, or
 * "pack", or any other but slo).
 *
 * In a lane: the runnable latency-critical job with the tightest target goes first (ties:
 * priority, arrival, id); the best-effort jobs are picked by the base policy among
 * themselves. Starvation bound: after N latency-critical iterations in a row in a lane while
 * a best-effort job of it was runnable (N: config slo_lc_run_max, salusd --slo-lc-run-max;
 * POLICY_SLO_DEFAULT_LC_RUN_MAX, 8, by default), that lane's next pick is the base policy's
 * best-effort job, so a runnable best-effort job waits at most N latency-critical
 * iterations (plus the one running) for its turn.
 * Admission: latency-critical jobs first (arrival order), then the base policy's order.
 * Nothing is kept across a restart (a Gittins base starts without its learned sizes).
 *
 * gate_preemption is set: under this policy the scheduling core also parks best-effort jobs
 * at their next submission while a latency-critical job of their GPU has work (the gate
 * bound, sched_core.h "Classes"). */
#include "policy-internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct slo_state_s {
    policy_t base;
    uint64_t lc_run_max;    /* the starvation bound (config slo_lc_run_max) */
    policy_records_t lanes; /* job_id: the lane id; value: latency-critical iterations in a
                               row while a best-effort job of the lane was runnable */
    policy_job_t *scratch;  /* the best-effort jobs handed to the base policy */
    size_t *scratch_index, *scratch_order;
    size_t scratch_capacity;
} slo_state_t;

static void slo_fini(void *opaque)
{
    slo_state_t *state = opaque;
    policy_fini(&state->base);
    policy_records_free(&state->lanes);
    free(state->scratch);
    free(state->scratch_index);
    free(state->scratch_order);
    free(state);
}

static void *slo_init(const policy_config_t *config)
{
    const char *base = config && config->slo_base ? config->slo_base : "fair";
    const policy_ops_t *ops = policy_find(base);
    if (!ops || ops == &policy_slo_ops)
        return NULL;
    slo_state_t *state = calloc(1, sizeof(*state));
    if (!state)
        return NULL;
    if (policy_init(&state->base, base, config) < 0) {
        free(state);
        return NULL;
    }
    state->lc_run_max = config && config->slo_lc_run_max ? config->slo_lc_run_max
                                                          : POLICY_SLO_DEFAULT_LC_RUN_MAX;
    return state;
}

static bool grow(slo_state_t *state, size_t count)
{
    if (count <= state->scratch_capacity)
        return true;
    size_t n = count < 16 ? 16 : count * 2;
    policy_job_t *jobs = realloc(state->scratch, n * sizeof(*jobs));
    if (jobs)
        state->scratch = jobs;
    size_t *index = realloc(state->scratch_index, n * sizeof(*index));
    if (index)
        state->scratch_index = index;
    size_t *order = realloc(state->scratch_order, n * sizeof(*order));
    if (order)
        state->scratch_order = order;
    if (!jobs || !index || !order)
        return false;
    state->scratch_capacity = n;
    return true;
}

static void slo_job_arrived(void *opaque, const policy_job_t *job, uint64_t now_ns)
{
    slo_state_t *state = opaque;
    policy_job_arrived(&state->base, job, now_ns);
}

static void slo_job_left(void *opaque, uint64_t job_id, uint64_t now_ns)
{
    slo_state_t *state = opaque;
    policy_job_left(&state->base, job_id, now_ns);
}

static void slo_iteration_done(void *opaque, const policy_job_t *job, uint64_t duration_ns,
                               uint64_t now_ns)
{
    slo_state_t *state = opaque;
    policy_iteration_done(&state->base, job, duration_ns, now_ns);
    if (job->latency_target_ns) {
        policy_record_t *run = policy_records_get(&state->lanes, job->lane);
        if (run) /* out of memory: no count, the bound is not enforced for this lane */
            run->value++;
    } else {
        policy_record_t *run = policy_records_find(&state->lanes, job->lane);
        if (run)
            run->value = 0;
    }
}

static int slo_pick(void *opaque, uint32_t lane, const policy_job_t *jobs, size_t count,
                    uint64_t now_ns)
{
    slo_state_t *state = opaque;
    int lc = -1, be = -1;
    size_t be_count = 0;
    for (size_t i = 0; i < count; i++) {
        const policy_job_t *j = &jobs[i];
        if (!j->runnable || j->lane != lane)
            continue;
        if (!j->latency_target_ns) {
            if (be < 0)
                be = (int)i;
            be_count++;
            continue;
        }
        if (lc < 0 || j->latency_target_ns < jobs[lc].latency_target_ns ||
            (j->latency_target_ns == jobs[lc].latency_target_ns &&
             policy_compare_tiebreak(j, &jobs[lc]) < 0))
            lc = (int)i;
    }
    if (lc >= 0 && be >= 0) {
        const policy_record_t *run = policy_records_find(&state->lanes, lane);
        if (!run || run->value < state->lc_run_max)
            return lc;
    } else if (lc >= 0) {
        return lc;
    }
    if (be < 0)
        return -1;
    /* the base policy among the best-effort jobs of the lane */
    if (!grow(state, be_count))
        return be;
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (!jobs[i].runnable || jobs[i].lane != lane || jobs[i].latency_target_ns)
            continue;
        state->scratch[n] = jobs[i];
        state->scratch_index[n++] = i;
    }
    int picked = policy_pick(&state->base, lane, state->scratch, n, now_ns);
    return picked >= 0 && (size_t)picked < n ? (int)state->scratch_index[picked] : be;
}

static void slo_admission_order(void *opaque, const policy_job_t *waiting, size_t count,
                                size_t *order, uint64_t now_ns)
{
    slo_state_t *state = opaque;
    size_t lc = 0;
    for (size_t i = 0; i < count; i++)
        lc += waiting[i].latency_target_ns != 0;
    if (lc == 0 || !grow(state, count)) {
        policy_admission_order(&state->base, waiting, count, order, now_ns);
        return;
    }
    /* latency-critical first, by arrival; the base policy's order for the rest */
    size_t n = 0, be = 0;
    for (size_t i = 0; i < count; i++) {
        if (waiting[i].latency_target_ns) {
            state->scratch[n] = waiting[i];
            state->scratch_index[n++] = i;
        }
    }
    policy_order_by_arrival(state->scratch, n, state->scratch_order);
    for (size_t i = 0; i < n; i++)
        order[i] = state->scratch_index[state->scratch_order[i]];
    for (size_t i = 0; i < count; i++) {
        if (!waiting[i].latency_target_ns) {
            state->scratch[be] = waiting[i];
            state->scratch_index[be++] = i;
        }
    }
    policy_admission_order(&state->base, state->scratch, be, state->scratch_order, now_ns);
    for (size_t i = 0; i < be; i++)
        order[n + i] = state->scratch_index[state->scratch_order[i]];
}

const policy_ops_t policy_slo_ops = {
    .name = "slo",
    .description = "latency-critical jobs first, preempted best-effort at the gate; "
                   "best-effort by fair (or pack)",
    .gate_preemption = true,
    .init = slo_init,
    .fini = slo_fini,
    .job_arrived = slo_job_arrived,
    .job_left = slo_job_left,
    .iteration_done = slo_iteration_done,
    .pick = slo_pick,
    .admission_order = slo_admission_order,
};
