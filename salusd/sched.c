/* The daemon's adapter to the scheduling core (scheduler-core/sched_core.h). The core decides
 * everything about scheduling (admission, lane holders, turns, budgets, learned sizes,
 * re-layouts); this file turns the daemon's events into the core's (a registration, a job
 * parked at a boundary: job page + eventfd, see job_page.h; a job gone) with the time of the
 * daemon's clock, and carries out the effects on job pages, futexes and sockets:
 *   ADMIT -> jobs_admit (answers the register request), REFUSE -> jobs_fail,
 *   GRANT -> grant_seq + FUTEX_WAKE (free_run: the shim passes its boundaries without
 *   stopping), STOP_FREE_RUN -> free_run = 0 (it parks at its next boundary),
 *   BUDGET -> jobs_set_budget, MOVE -> shown lane. */
#include "sched.h"

#include "jobs.h"
#include "job_page.h"
#include "log.h"
#include "sched_core.h"

#include <errno.h>
#include <event2/event.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct sched_s {
    sched_core_t *core;
    struct event *wait_timer; /* --wait-log-s: logs long waits */
};

static int parked(const job_t *job)
{
    job_page_t *page = jobs_page(job);
    return page && atomic_load(&page->waiting) &&
           atomic_load(&page->grant_seq) < atomic_load(&page->boundary_seq);
}

static void grant(job_t *job, int free_run)
{
    job_page_t *page = jobs_page(job);
    if (!page)
        return;
    atomic_store(&page->free_run, (uint32_t)free_run);
    atomic_store(&page->grant_seq, atomic_load(&page->boundary_seq));
    syscall(SYS_futex, (uint32_t *)&page->grant_seq, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
    job->state = JOB_RUNNING;
}

/* Carries out the core's effects on job pages, futexes and sockets. A refusal or a failed
 * admission ends the job (jobs_fail), which sends the core further events: each call has
 * its own list, and every effect looks its job up again. */
static void apply(salusd_t *d, sched_core_effects_t *fx)
{
    for (size_t i = 0; i < fx->count; i++) {
        const sched_core_effect_t *e = &fx->items[i];
        job_t *job = registry_find(d->registry, e->job_id);
        if (!job || !job->runtime) {
            if (e->kind == SCHED_CORE_ADMIT) { /* gone meanwhile: give its place back */
                sched_core_effects_t more = {0};
                sched_core_job_left(d->sched->core, e->job_id, SCHED_CORE_EXIT_GONE,
                                    salusd_now_ns(), &more);
                apply(d, &more);
                sched_core_effects_free(&more);
            }
            continue;
        }
        switch (e->kind) {
        case SCHED_CORE_ADMIT:
            if (jobs_admit(d, job, e->gpu, e->budget_bytes, e->lane) < 0)
                jobs_fail(d, job, NULL);
            break;
        case SCHED_CORE_REFUSE:
            jobs_fail(d, job, e->reason);
            break;
        case SCHED_CORE_GRANT:
            /* clear_needed asks for nothing: a job's chunks are its own, cleared when
             * created if lanes are shared across users (job_memory.c) */
            grant(job, e->free_run);
            break;
        case SCHED_CORE_STOP_FREE_RUN:
            if (jobs_page(job))
                atomic_store(&jobs_page(job)->free_run, 0);
            break;
        case SCHED_CORE_BUDGET:
            jobs_set_budget(job, e->budget_bytes);
            break;
        case SCHED_CORE_MOVE:
            LOG_DEBUG("job %llu moves to lane %u of GPU %d", (unsigned long long)job->id,
                      e->lane, e->gpu);
            break;
        case SCHED_CORE_LEARNED:
            if (!e->reason)
                LOG_INFO("job %llu learned sizes: persistent %llu KiB, ephemeral %llu KiB "
                         "(lane %u)", (unsigned long long)job->id,
                         (unsigned long long)(e->persistent_bytes >> 10),
                         (unsigned long long)(e->ephemeral_bytes >> 10), e->lane);
            else
                LOG_WARN("job %llu: measured sizes (%llu + %llu bytes) do not fit now (%s); it "
                         "keeps its provisional budget", (unsigned long long)job->id,
                         (unsigned long long)e->persistent_bytes,
                         (unsigned long long)e->ephemeral_bytes, e->reason);
            break;
        }
    }
}

/* Runs one core event with a fresh list and applies its effects. */
#define SCHED_EVENT(d, call)                                                                   \
    do {                                                                                       \
        sched_core_effects_t fx_ = {0};                                                        \
        int rc_ = (call);                                                                      \
        if (rc_ < 0)                                                                           \
            LOG_WARN("scheduling core: %s: %s", #call, strerror(-rc_));                        \
        apply((d), &fx_);                                                                      \
        sched_core_effects_free(&fx_);                                                         \
    } while (0)

void sched_job_registered(salusd_t *d, job_t *job)
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
    };
    SCHED_EVENT(d, sched_core_job_registered(d->sched->core, &hints, salusd_now_ns(), &fx_));
}

void sched_job_parked(salusd_t *d, job_t *job)
{
    job_page_t *page = jobs_page(job);
    if (!parked(job))
        return;
    job->state = JOB_PAUSED;
    sched_core_boundary_t b = {
        .iterations = atomic_load(&page->iterations),
        .busy_ns = atomic_load(&page->busy_ns),
        .last_iteration_ns = atomic_load(&page->last_iteration_ns),
        .persistent_bytes = atomic_load(&page->persistent_bytes),
        .ephemeral_bytes = atomic_load(&page->ephemeral_peak_bytes),
        .ready = true,
    };
    SCHED_EVENT(d, sched_core_job_boundary(d->sched->core, job->id, &b, salusd_now_ns(), &fx_));
}

void sched_try_admit(salusd_t *d)
{
    SCHED_EVENT(d, sched_core_admit(d->sched->core, salusd_now_ns(), &fx_));
}

void sched_job_left(salusd_t *d, job_t *job)
{
    SCHED_EVENT(d, sched_core_job_left(d->sched->core, job->id, SCHED_CORE_EXIT_GONE,
                                       salusd_now_ns(), &fx_));
}

int sched_job_view(const salusd_t *d, const job_t *job, sched_job_view_t *view)
{
    sched_core_job_info_t info;
    if (sched_core_job_info(d->sched->core, job->id, &info) < 0)
        return -ENOENT;
    memset(view, 0, sizeof(*view));
    view->admitted = info.phase != SCHED_CORE_WAITING;
    view->gpu = info.gpu;
    view->lane = info.lane;
    view->holds_lane = info.phase == SCHED_CORE_RUNNING;
    view->waiting_since_ns = info.waiting_since_ns;
    view->lane_holder = info.lane_holder;
    return 0;
}

const char *sched_policy_name(const salusd_t *d)
{
    return sched_core_policy_name(d->sched->core);
}

int sched_set_policy(salusd_t *d, const char *name, char *err, size_t err_size)
{
    sched_core_effects_t fx = {0};
    int rc = sched_core_set_policy(d->sched->core, name, salusd_now_ns(), &fx);
    if (rc == -ENOENT)
        snprintf(err, err_size, "no policy '%s'", name);
    else if (rc < 0)
        snprintf(err, err_size, "policy '%s' failed to start; '%s' stays", name,
                 sched_core_policy_name(d->sched->core));
    else
        LOG_INFO("scheduling policy is now %s", sched_core_policy_name(d->sched->core));
    apply(d, &fx);
    sched_core_effects_free(&fx);
    return rc;
}

void sched_gpu_books(const salusd_t *d, int gpu, uint64_t *capacity_bytes,
                     uint64_t *persistent_bytes, uint64_t *lane_bytes, uint64_t *lanes)
{
    lanes_gpu_info_t info;
    memset(&info, 0, sizeof(info));
    lanes_gpu_info(sched_core_lanes(d->sched->core), gpu, &info);
    *capacity_bytes = info.capacity_bytes;
    *persistent_bytes = info.persistent_bytes;
    *lane_bytes = info.lane_bytes;
    *lanes = info.lane_count;
}

void sched_pack_lanes(salusd_t *d, msgpack_packer *pk)
{
    const lanes_t *lanes = sched_core_lanes(d->sched->core);
    size_t n = lanes_list(lanes, NULL, 0);
    lanes_lane_info_t *info = n ? calloc(n, sizeof(*info)) : NULL;
    uint64_t *ids = NULL;
    size_t ids_capacity = 0;
    if (n && !info)
        n = 0;
    n = n ? lanes_list(lanes, info, n) : 0;
    msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        size_t count = lanes_lane_jobs(lanes, info[i].lane_id, ids, ids_capacity);
        if (count > ids_capacity) {
            uint64_t *more = realloc(ids, count * sizeof(*ids));
            if (more) {
                ids = more;
                ids_capacity = count;
            }
            count = lanes_lane_jobs(lanes, info[i].lane_id, ids, ids_capacity);
        }
        if (count > ids_capacity)
            count = ids_capacity;
        msgpack_pack_map(pk, 5);
        proto_pack_kv_int(pk, "gpu", info[i].gpu);
        proto_pack_kv_uint(pk, "lane", info[i].lane_id);
        proto_pack_kv_uint(pk, "size_bytes", info[i].size_bytes);
        proto_pack_str(pk, "jobs");
        msgpack_pack_array(pk, (uint32_t)count);
        for (size_t k = 0; k < count; k++)
            msgpack_pack_uint64(pk, ids[k]);
        proto_pack_str(pk, "active");
        if (info[i].active)
            msgpack_pack_uint64(pk, info[i].active_job_id);
        else
            msgpack_pack_nil(pk);
    }
    free(ids);
    free(info);
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
        if (!job->runtime || sched_core_job_info(d->sched->core, job->id, &info) < 0 ||
            !info.waiting_since_ns || now - info.waiting_since_ns < limit)
            continue;
        uint64_t waited_s = (now - info.waiting_since_ns) / 1000000000ull;
        if (info.phase == SCHED_CORE_WAITING)
            LOG_WARN("job %llu '%s' has waited %llu s for admission (policy %s)",
                     (unsigned long long)job->id, job->name, (unsigned long long)waited_s,
                     sched_core_policy_name(d->sched->core));
        else
            LOG_WARN("job %llu '%s' has waited %llu s for its turn in lane %u of GPU %d, "
                     "held by job %llu", (unsigned long long)job->id, job->name,
                     (unsigned long long)waited_s, info.lane, info.gpu,
                     (unsigned long long)info.lane_holder);
    }
}

int sched_init(salusd_t *d, char *err, size_t err_size)
{
    sched_t *s = calloc(1, sizeof(*s));
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
    /* a job without hints starts on provisional sizes that fit the smallest GPU */
    for (int i = 0; i < d->devices.count; i++)
        sched_core_config_fit_gpu(&config, d->devices.gpus[i].total_bytes);
    s->core = sched_core_create(&config, &rc);
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
    d->sched = s;
    return 0;
}

void sched_fini(salusd_t *d)
{
    if (!d->sched)
        return;
    if (d->sched->wait_timer)
        event_free(d->sched->wait_timer);
    sched_core_destroy(d->sched->core);
    free(d->sched);
    d->sched = NULL;
}
