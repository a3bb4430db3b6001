/* The daemon's side of the scheduling core (scheduler-core/sched_core.h), below the jobs
 * module: the core's life (GPUs, policy), the daemon's events turned into the core's (a
 * registration, a job parked at a boundary as its job page says, a job gone) with the
 * daemon's clock, and read-only copies of the core's books (a job, the lanes, a GPU).
 * The effects go back to the caller, who carries them out (job_effects.c). Long waits are
 * logged here (--wait-log-s). */
#include "gpu_sched.h"

#include "config.h"
#include "job_gpus.h"
#include "job_page.h"
#include "log.h"
#include "sched_core.h"

#include <errno.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct gpu_sched_s {
    sched_core_t *core;
    struct event *wait_timer; /* --wait-log-s: logs long waits */
    job_gpus_t *gpus;         /* jobs on several GPUs: their members (job_gpus.h) */
};

static int parked(const job_page_t *page)
{
    return page && atomic_load(&page->waiting) &&
           atomic_load(&page->grant_seq) < atomic_load(&page->boundary_seq);
}

static int report(int rc, const char *what)
{
    if (rc < 0)
        LOG_WARN("scheduling core: %s: %s", what, strerror(-rc));
    return rc;
}

/* What the core is told of a job's group (zero: a single job), at registration and at re-attach. */
static sched_core_group_t group_of(const job_t *job)
{
    return (sched_core_group_t){.id = job->group_id,
                                .world = job->group_world,
                                .rank = job->group_rank,
                                .sync = (sched_core_sync_t)job->group_sync,
                                .staleness = job->group_staleness,
                                .share_gpus = job->group_share_gpus != 0,
                                .cluster = job->group_cluster != 0};
}

int gpu_sched_job_registered(salusd_t *d, const job_t *job, sched_core_effects_t *fx)
{
    int hinted = job->persistent_hint_bytes || job->ephemeral_hint_bytes;
    sched_core_job_hints_t hints = {
        .id = job->id,
        .uid = (uint32_t)job->uid,
        .persistent_bytes = hinted ? job->persistent_hint_bytes : LANES_SIZE_UNKNOWN,
        .ephemeral_bytes = hinted ? job->ephemeral_hint_bytes : LANES_SIZE_UNKNOWN,
        .iterations_expected = job->iterations_expected,
        .priority = (int32_t)job->priority,
        .arrival_ns = job->registered_ns,
        .group = group_of(job),
        .pinned = job->gpu_pinned != 0,
        .pinned_gpu = job->pinned_gpu,
        .latency_target_ns = job->latency_target_ns,
        .iteration_ns = job->request_ns,
    };
    return report(
        job_gpus_register(d->gpu_sched->gpus, d->gpu_sched->core, &hints, salusd_now_ns(), fx),
        "registration");
}

/* What the page says at a boundary: ready asks for the lane again, !ready gives it up (a
 * release at a quiescent point: it asks again at its next submission). */
static int report_boundary(salusd_t *d, const job_t *job, const job_page_t *page, bool ready,
                           sched_core_effects_t *fx)
{
    sched_core_boundary_t b = {
        .iterations = atomic_load(&page->iterations),
        .busy_ns = atomic_load(&page->busy_ns),
        .last_iteration_ns = atomic_load(&page->last_iteration_ns),
        .persistent_bytes = atomic_load(&page->persistent_bytes),
        .ephemeral_bytes = atomic_load(&page->ephemeral_peak_bytes),
        .ready = ready,
    };
    return report(
        job_gpus_boundary(d->gpu_sched->gpus, d->gpu_sched->core, job->id, &b, salusd_now_ns(), fx),
        ready ? "boundary" : "release");
}

int gpu_sched_job_parked(salusd_t *d, const job_t *job, const job_page_t *page,
                         sched_core_effects_t *fx)
{
    if (!parked(page))
        return -EAGAIN; /* a stale notification: nothing to report */
    return report_boundary(d, job, page, true, fx);
}

int gpu_sched_job_released(salusd_t *d, const job_t *job, const job_page_t *page,
                           sched_core_effects_t *fx)
{
    return report_boundary(d, job, page, false, fx);
}

int gpu_sched_lane_shared(const salusd_t *d, const job_t *job)
{
    sched_core_job_info_t info;
    if (sched_core_job_info(d->gpu_sched->core, job->id, &info) < 0 ||
        info.phase == SCHED_CORE_WAITING)
        return 0;
    return lanes_lane_jobs(sched_core_lanes(d->gpu_sched->core), info.lane, NULL, 0) > 1;
}

int gpu_sched_job_id_left(salusd_t *d, uint64_t job_id, sched_core_effects_t *fx)
{
    return report(job_gpus_left(d->gpu_sched->gpus, d->gpu_sched->core, job_id,
                                SCHED_CORE_EXIT_GONE, salusd_now_ns(), fx),
                  "departure");
}



int gpu_sched_job_reattached(salusd_t *d, const job_t *job, const sched_core_reattach_t *where,
                             sched_core_effects_t *fx)
{
    sched_core_job_hints_t hints = {
        .id = job->id,
        .uid = (uint32_t)job->uid,
        .persistent_bytes = where->persistent_bytes,
        .ephemeral_bytes = where->ephemeral_bytes,
        .iterations_expected = job->iterations_expected,
        .priority = (int32_t)job->priority,
        .arrival_ns = job->registered_ns,
        .group = group_of(job),
        .latency_target_ns = job->latency_target_ns,
        .iteration_ns = job->request_ns,
    };
    int rc = job_gpus_reattached(d->gpu_sched->gpus, d->gpu_sched->core, &hints, where,
                                 salusd_now_ns(), fx);
    return rc == -ENOSPC ? rc : report(rc, "re-attach");
}

int gpu_sched_job_wants(salusd_t *d, const job_t *job, uint64_t budget_bytes, uint64_t held_bytes,
                        sched_core_effects_t *fx)
{
    return sched_core_job_wants(d->gpu_sched->core, job->id, budget_bytes, held_bytes,
                                salusd_now_ns(), fx);
}

int gpu_sched_admit(salusd_t *d, sched_core_effects_t *fx)
{
    return report(sched_core_admit(d->gpu_sched->core, salusd_now_ns(), fx), "admission round");
}

int gpu_sched_job_sizes(const salusd_t *d, const job_t *job, uint64_t *persistent_bytes,
                        uint64_t *ephemeral_bytes, uint32_t *lane)
{
    int gpu;
    return gpu_sched_member_sizes(d, job, 0, &gpu, persistent_bytes, ephemeral_bytes, lane);
}

int gpu_sched_member_sizes(const salusd_t *d, const job_t *job, uint32_t k, int *gpu,
                           uint64_t *persistent_bytes, uint64_t *ephemeral_bytes, uint32_t *lane)
{
    lanes_placement_t pl;
    if (k >= job_gpus_count(d->gpu_sched->gpus, job->id) ||
        lanes_job_placement(sched_core_lanes(d->gpu_sched->core), job->id + k, &pl) != LANES_OK)
        return -ENOENT;
    *gpu = pl.gpu;
    *persistent_bytes = pl.persistent_bytes;
    *ephemeral_bytes = pl.ephemeral_bytes;
    *lane = pl.lane_id;
    return 0;
}

long gpu_sched_policy_save_state(salusd_t *d, void *buf, size_t cap)
{
    return sched_core_policy_save_state(d->gpu_sched->core, buf, cap);
}

int gpu_sched_policy_load_state(salusd_t *d, const void *buf, size_t len)
{
    return sched_core_policy_load_state(d->gpu_sched->core, buf, len);
}

int gpu_sched_job_info(const salusd_t *d, const job_t *job, gpu_sched_job_info_t *out)
{
    sched_core_job_info_t info;
    if (sched_core_job_info_at(d->gpu_sched->core, job->id, salusd_now_ns(), &info) < 0)
        return -ENOENT;
    memset(out, 0, sizeof(*out));
    out->admitted = info.phase != SCHED_CORE_WAITING;
    out->gpu = info.gpu;
    out->lane = info.lane;
    out->budget_bytes = info.budget_bytes;
    out->holds_lane = job_gpus_holds_lanes(d->gpu_sched->gpus, d->gpu_sched->core, job->id);
    out->waiting_since_ns = info.waiting_since_ns;
    out->lane_holder = job_gpus_lane_holder(d->gpu_sched->gpus, d->gpu_sched->core, job->id);
    out->gang_wait_ns = info.gang_wait_ns;
    out->provisional = info.provisional;
    out->wait_reason = out->admitted ? "" : sched_core_wait_text(info.wait, info.latency_target_ns != 0);
    out->has_rank = sched_core_job_rank(d->gpu_sched->core, job->id, salusd_now_ns(),
                                         &out->rank) == 0;
    return 0;
}

job_gpus_t *gpu_sched_job_gpus(const salusd_t *d)
{
    return d->gpu_sched ? d->gpu_sched->gpus : NULL;
}

int gpu_sched_job_member(const salusd_t *d, const job_t *job, uint32_t k, int *gpu,
                         uint64_t *budget_bytes)
{
    return job_gpus_place(d->gpu_sched->gpus, d->gpu_sched->core, job->id, k, gpu, budget_bytes);
}

const char *gpu_sched_policy_name(const salusd_t *d)
{
    return sched_core_policy_name(d->gpu_sched->core);
}

const char *gpu_sched_rank_name(const salusd_t *d)
{
    return sched_core_rank_name(d->gpu_sched->core);
}

int gpu_sched_set_policy(salusd_t *d, const char *name, char *err, size_t err_size,
                         sched_core_effects_t *fx)
{
    int rc = sched_core_set_policy(d->gpu_sched->core, name, salusd_now_ns(), fx);
    if (rc == -ENOENT) {
        char names[192] = "";
        salusd_policy_names(names, sizeof(names));
        snprintf(err, err_size, "no policy '%s' (expected %s)", name, names);
    }
    else if (rc < 0)
        snprintf(err, err_size, "policy '%s' failed to start; '%s' stays", name,
                 sched_core_policy_name(d->gpu_sched->core));
    else
        LOG_INFO("scheduling policy is now %s", sched_core_policy_name(d->gpu_sched->core));
    return rc;
}

uint64_t gpu_sched_gpu_reserved_bytes(salusd_t *d, int gpu)
{
    uint64_t capacity = 0, persistent = 0, lane_bytes = 0, lanes = 0;
    gpu_sched_gpu_books(d, gpu, &capacity, &persistent, &lane_bytes, &lanes);
    return persistent + lane_bytes;
}

void gpu_sched_gpu_books(const salusd_t *d, int gpu, uint64_t *capacity_bytes,
                         uint64_t *persistent_bytes, uint64_t *lane_bytes, uint64_t *lanes)
{
    lanes_gpu_info_t info;
    memset(&info, 0, sizeof(info));
    lanes_gpu_info(sched_core_lanes(d->gpu_sched->core), gpu, &info);
    *capacity_bytes = info.capacity_bytes;
    *persistent_bytes = info.persistent_bytes;
    *lane_bytes = info.lane_bytes;
    *lanes = info.lane_count;
}

void gpu_sched_sample(const salusd_t *d, gpu_sched_sample_t *sample)
{
    sample->policy = d->gpu_sched ? gpu_sched_policy_name(d) : "none";
    sample->rank_name = d->gpu_sched ? gpu_sched_rank_name(d) : NULL;
    sample->gpus = d->devices.count;
}

int gpu_sched_gpu_sample(salusd_t *d, int gpu, gpu_sched_gpu_sample_t *sample)
{
    if (gpu < 0 || gpu >= d->devices.count)
        return -ENOENT;
    const gpu_t *g = &d->devices.gpus[gpu];
    memset(sample, 0, sizeof(*sample));
    sample->name = g->name;
    sample->total_bytes = g->total_bytes;
    sample->used_bytes = g->chunk_bytes;
    sample->reserved_bytes = gpu_sched_gpu_reserved_bytes(d, gpu);
    gpu_sched_gpu_books(d, gpu, &sample->capacity_bytes, &sample->persistent_bytes,
                    &sample->lane_bytes, &sample->lanes);
    sample->has_busy = devices_busy_ns(&d->devices, gpu, &sample->busy_ns) == 0;
    if (!sample->has_busy)
        sample->busy_ns = 0;
    return 0;
}

int gpu_sched_lanes(const salusd_t *d, gpu_sched_lane_info_t **out, size_t *count)
{
    const lanes_t *lanes = sched_core_lanes(d->gpu_sched->core);
    size_t n = lanes_list(lanes, NULL, 0);
    lanes_lane_info_t *info = n ? calloc(n, sizeof(*info)) : NULL;
    gpu_sched_lane_info_t *rows = n ? calloc(n, sizeof(*rows)) : NULL;
    *out = NULL;
    *count = 0;
    if (n && (!info || !rows))
        goto fail;
    n = lanes_list(lanes, info, n);
    for (size_t i = 0; i < n; i++) {
        size_t jobs = lanes_lane_jobs(lanes, info[i].lane_id, NULL, 0);
        rows[i] = (gpu_sched_lane_info_t){
            .gpu = info[i].gpu,
            .lane = info[i].lane_id,
            .size_bytes = info[i].size_bytes,
            .active_job = info[i].active ? info[i].active_job_id : 0,
            .jobs = jobs ? calloc(jobs, sizeof(uint64_t)) : NULL,
        };
        if (jobs && !rows[i].jobs) {
            gpu_sched_lanes_free(rows, i);
            rows = NULL;
            goto fail;
        }
        rows[i].job_count = lanes_lane_jobs(lanes, info[i].lane_id, rows[i].jobs, jobs);
        /* a member of a job on several GPUs is shown as its job */
        for (size_t k = 0; k < rows[i].job_count; k++)
            rows[i].jobs[k] = job_gpus_owner(d->gpu_sched->gpus, rows[i].jobs[k], NULL);
        rows[i].active_job = job_gpus_owner(d->gpu_sched->gpus, rows[i].active_job, NULL);
    }
    free(info);
    *out = rows;
    *count = n;
    return 0;
fail:
    free(info);
    free(rows);
    return -ENOMEM;
}

void gpu_sched_lanes_free(gpu_sched_lane_info_t *lanes, size_t count)
{
    for (size_t i = 0; lanes && i < count; i++)
        free(lanes[i].jobs);
    free(lanes);
}

/* Every --wait-log-s seconds: each job that has waited longer than that (for admission, or
 * for its turn behind the job that holds its lane) is logged, once per interval. */
static void on_wait_timer(evutil_socket_t fd, short events, void *arg)
{
    salusd_t *d = arg;
    uint64_t now = salusd_now_ns(), limit = (uint64_t)d->config.wait_log_s * 1000000000ull;
    (void)fd;
    (void)events;
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        const job_t *job = registry_at(d->registry, i);
        sched_core_job_info_t info;
        if (!job->runtime || sched_core_job_info(d->gpu_sched->core, job->id, &info) < 0 ||
            !info.waiting_since_ns || now - info.waiting_since_ns < limit)
            continue;
        uint64_t waited_s = (now - info.waiting_since_ns) / 1000000000ull;
        const char *why = sched_core_wait_text(info.wait, info.latency_target_ns != 0);
        if (info.phase == SCHED_CORE_WAITING)
            LOG_WARN("job %llu '%s' has waited %llu s for admission (policy %s)%s%s",
                     (unsigned long long)job->id, job->name, (unsigned long long)waited_s,
                     sched_core_policy_name(d->gpu_sched->core), why[0] ? ": " : "", why);
        else
            LOG_WARN("job %llu '%s' has waited %llu s for its turn in lane %u of GPU %d, "
                     "held by job %llu", (unsigned long long)job->id, job->name,
                     (unsigned long long)waited_s, info.lane, info.gpu,
                     (unsigned long long)info.lane_holder);
    }
}

int gpu_sched_init(salusd_t *d, char *err, size_t err_size)
{
    gpu_sched_t *s = calloc(1, sizeof(*s));
    sched_core_config_t config;
    int rc = -ENOMEM;
    if (!s) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    sched_core_config_default(&config);
    config.policy_name = d->config.policy;
    config.lanes.job_overhead_bytes = d->devices.simulated ? 0 : d->config.job_overhead_bytes;
    config.lanes.share_lanes_across_users = d->config.share_lanes_across_users != 0;
    config.lanes.provisional_min_bytes = d->config.provisional_min_bytes;
    config.lanes.provisional_max_bytes = d->config.provisional_max_bytes;
    config.user_gpu_share = d->config.user_gpu_share;
    config.user_max_jobs = (uint32_t)d->config.user_max_jobs;
    config.quota_exempt_uid = (uint32_t)geteuid(); /* root (uid 0) is exempt in the core */
    config.persistent_grain_bytes = d->config.chunk_bytes; /* the least a shim maps at once */
    config.gang_turns_off = d->config.gang_turns_off != 0;
    config.gang_slot_iterations = (uint32_t)d->config.gang_slot_iterations;
    config.policy.slo_lc_run_max = (uint32_t)d->config.slo_lc_run_max;
    /* a job without hints is admitted where at least --provisional-min (at most half the
     * smallest GPU) is free; learned sizes are whole chunks of the coarsest granularity */
    for (int i = 0; i < d->devices.count; i++) {
        sched_core_config_fit_gpu(&config, d->devices.gpus[i].total_bytes);
        if (d->devices.gpus[i].granularity_bytes > config.size_grain_bytes)
            config.size_grain_bytes = d->devices.gpus[i].granularity_bytes;
    }
    s->core = sched_core_create(&config, &rc);
    s->gpus = s->core ? job_gpus_create() : NULL;
    if (s->core && !s->gpus) {
        sched_core_destroy(s->core);
        s->core = NULL;
        rc = -ENOMEM;
    }
    if (!s->core) {
        if (rc == -ENOENT)
            snprintf(err, err_size, "unknown scheduling policy '%s'", d->config.policy);
        else
            snprintf(err, err_size, "out of memory");
        free(s);
        return rc;
    }
    for (int i = 0; i < d->devices.count; i++) {
        uint64_t total = d->devices.gpus[i].total_bytes;
        rc = sched_core_add_gpu(s->core, i, total, d->config.gpu_reserve_bytes);
        if (rc < 0) {
            snprintf(err, err_size,
                     "GPU %d: --gpu-reserve (%llu MiB) leaves none of its %llu MiB for jobs",
                     i, (unsigned long long)(d->config.gpu_reserve_bytes >> 20),
                     (unsigned long long)(total >> 20));
            if (rc == -ENOMEM)
                snprintf(err, err_size, "out of memory");
            sched_core_destroy(s->core);
            job_gpus_destroy(s->gpus);
            free(s);
            return rc;
        }
    }
    if (d->config.wait_log_s > 0 && d->base) {
        struct timeval every = {.tv_sec = d->config.wait_log_s};
        s->wait_timer = event_new(d->base, -1, EV_PERSIST, on_wait_timer, d);
        if (!s->wait_timer || event_add(s->wait_timer, &every) < 0)
            LOG_WARN("cannot watch long waits (--wait-log-s): out of memory");
    }
    d->gpu_sched = s;
    return 0;
}

void gpu_sched_fini(salusd_t *d)
{
    if (!d->gpu_sched)
        return;
    if (d->gpu_sched->wait_timer)
        event_free(d->gpu_sched->wait_timer);
    sched_core_destroy(d->gpu_sched->core);
    job_gpus_destroy(d->gpu_sched->gpus);
    free(d->gpu_sched);
    d->gpu_sched = NULL;
}

int gpu_sched_group_release(salusd_t *d, uint64_t group_id, sched_core_effects_t *fx)
{
    if (!d->gpu_sched) /* (no scheduler yet: no rank can be registered) */
        return -ENOENT;
    return sched_core_group_release(d->gpu_sched->core, group_id, salusd_now_ns(), fx);
}

int gpu_sched_group_slot(salusd_t *d, uint64_t group_id, uint64_t seq, uint64_t target,
                         sched_core_effects_t *fx)
{
    return sched_core_group_slot(d->gpu_sched->core, group_id, seq, target, salusd_now_ns(), fx);
}

int gpu_sched_group_remote_least(salusd_t *d, uint64_t group_id, uint64_t least,
                                 sched_core_effects_t *fx)
{
    return sched_core_group_remote_least(d->gpu_sched->core, group_id, least, salusd_now_ns(),
                                         fx);
}
