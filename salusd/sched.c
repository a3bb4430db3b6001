/* The scheduling loop: the lane manager (memory/lanes) places jobs in lanes; the active policy
 * (scheduler-policies/) orders admission and picks, in each lane, the job that runs its next
 * iteration. Lanes run concurrently; jobs of one lane take turns at iteration boundaries.
 *
 * Turn-taking: a job parks at a boundary (job page + eventfd, see job_page.h). If it held its
 * lane, its iteration is reported to the policy and the lane is yielded; then the policy picks
 * among the lane's parked jobs and the pick is granted (futex). A job that is alone with no
 * one waiting in its lane runs freely (free_run) and its boundaries cost nothing; a job that
 * parks behind it clears that, so the holder stops at its next boundary.
 *
 * Learned sizes: a job admitted without hints runs on the provisional sizes; after
 * SCHED_WARMUP_ITERATIONS its measured persistent and ephemeral sizes (from the shim)
 * replace them (lanes_update_sizes). */
#include "sched.h"

#include "jobs.h"
#include "job_page.h"
#include "lanes.h"
#include "log.h"
#include "policy.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SCHED_WARMUP_ITERATIONS 3
#define SCHED_MAX_VIEWS 1024

struct sched_s {
    int admitting;               /* sched_try_admit is on the stack */
    int admit_again;             /* something changed meanwhile: run it once more */
    lanes_t *lanes;
    policy_t policy;
    policy_config_t policy_config;
    policy_job_t views[SCHED_MAX_VIEWS];
};

static int parked(const job_t *job)
{
    job_page_t *page = jobs_page(job);
    return page && atomic_load(&page->waiting) &&
           atomic_load(&page->grant_seq) < atomic_load(&page->boundary_seq);
}

static void view_of(const job_t *job, policy_job_t *v, uint32_t lane)
{
    job_page_t *page = jobs_page(job);
    uint64_t iterations = page ? atomic_load(&page->iterations) : 0;
    uint64_t busy = page ? atomic_load(&page->busy_ns) : 0;
    memset(v, 0, sizeof(*v));
    v->id = job->id;
    v->arrival_ns = job->registered_ns;
    v->iterations_done = iterations;
    v->iterations_expected = job->iterations_expected;
    v->mean_iteration_ns = iterations ? busy / iterations : 0;
    v->attained_ns = busy;
    v->priority = (int32_t)job->priority;
    v->lane = lane;
    v->runnable = parked(job);
}

/* Views of the admitted jobs (those with a lane). */
static size_t admitted_views(salusd_t *d)
{
    sched_t *s = d->sched;
    size_t n = 0;
    for (size_t i = 0; i < registry_count(d->registry) && n < SCHED_MAX_VIEWS; i++) {
        job_t *job = registry_at(d->registry, i);
        lanes_placement_t pl;
        if (!job->runtime || lanes_job_placement(s->lanes, job->id, &pl) != LANES_OK)
            continue;
        view_of(job, &s->views[n++], pl.lane_id);
    }
    return n;
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

static int lane_holder(const sched_t *s, uint32_t lane, uint64_t *holder)
{
    lanes_lane_info_t info[64];
    size_t n = lanes_list(s->lanes, info, 64);
    for (size_t i = 0; i < n && i < 64; i++) {
        if (info[i].lane_id == lane) {
            *holder = info[i].active ? info[i].active_job_id : 0;
            return 0;
        }
    }
    return -ENOENT;
}

static void learn_sizes(salusd_t *d, job_t *job, const lanes_placement_t *pl);

/* After the layout changed (admission, release, learned sizes), every admitted job's budget
 * follows its placement: persistent size plus its lane's size (never below what it holds). */
static void refresh_budgets(salusd_t *d)
{
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        lanes_placement_t pl;
        if (job->runtime && jobs_page(job) &&
            lanes_job_placement(d->sched->lanes, job->id, &pl) == LANES_OK)
            jobs_set_budget(d, job, pl.persistent_bytes + pl.lane_size_bytes);
    }
}

/* The job that held its lane is at a boundary: report the iteration, give the lane back. */
static void holder_done(salusd_t *d, job_t *job, uint32_t lane)
{
    sched_t *s = d->sched;
    job_page_t *page = jobs_page(job);
    policy_job_t v;
    lanes_placement_t pl;
    view_of(job, &v, lane);
    policy_iteration_done(&s->policy, &v, page ? atomic_load(&page->last_iteration_ns) : 0,
                          salusd_now_ns());
    lanes_yield(s->lanes, job->id);
    if (lanes_job_placement(s->lanes, job->id, &pl) == LANES_OK)
        learn_sizes(d, job, &pl);
}

/* If the lane is free, lets the policy pick among its parked jobs and grants the pick. */
static void dispatch_lane(salusd_t *d, uint32_t lane)
{
    sched_t *s = d->sched;
    uint64_t holder = 0;
    if (lane_holder(s, lane, &holder) < 0)
        return;
    if (holder) {
        /* a holder that is parked is at a boundary whose notification is still queued (or
         * that a re-layout moved): its turn is over */
        job_t *h = registry_find(d->registry, holder);
        if (!h || !parked(h))
            return;
        holder_done(d, h, lane);
    }
    size_t n = admitted_views(d);
    uint64_t now = salusd_now_ns();
    int pick = policy_pick(&s->policy, lane, s->views, n, now);
    if (pick < 0)
        return;
    job_t *job = registry_find(d->registry, s->views[pick].id);
    bool clear_needed = false;
    if (!job || lanes_grant(s->lanes, job->id, &clear_needed) != LANES_OK)
        return;
    /* each job's memory is its own (see README: lanes do not share physical memory yet),
     * so nothing of another user's is visible to it: no clearing to do */
    int others_waiting = 0;
    for (size_t i = 0; i < n; i++)
        others_waiting |= s->views[i].lane == lane && s->views[i].runnable &&
                          s->views[i].id != job->id;
    /* a provisional job stops at every boundary until its sizes are learned */
    lanes_placement_t pl;
    int provisional = lanes_job_placement(s->lanes, job->id, &pl) == LANES_OK && pl.provisional;
    grant(job, !others_waiting && !provisional);
}

static void dispatch_all(salusd_t *d)
{
    lanes_lane_info_t info[64];
    size_t n = lanes_list(d->sched->lanes, info, 64);
    for (size_t i = 0; i < n && i < 64; i++)
        dispatch_lane(d, info[i].lane_id);
}

static void learn_sizes(salusd_t *d, job_t *job, const lanes_placement_t *pl)
{
    job_page_t *page = jobs_page(job);
    if (!pl->provisional || !page || atomic_load(&page->iterations) < SCHED_WARMUP_ITERATIONS)
        return;
    uint64_t p = atomic_load(&page->persistent_bytes);
    uint64_t e = atomic_load(&page->ephemeral_peak_bytes);
    lanes_placement_t now;
    lanes_status_t st = lanes_update_sizes(d->sched->lanes, job->id, p ? p : 1, e ? e : 1, &now);
    if (st == LANES_OK || st == LANES_MOVED) {
        LOG_INFO("job %llu learned sizes: persistent %llu KiB, ephemeral %llu KiB (lane %u)",
                 (unsigned long long)job->id, (unsigned long long)(p >> 10),
                 (unsigned long long)(e >> 10), now.lane_id);
        refresh_budgets(d);
    } else {
        LOG_WARN("job %llu: measured sizes (%llu + %llu bytes) do not fit now (%s); it keeps "
                 "its provisional budget", (unsigned long long)job->id, (unsigned long long)p,
                 (unsigned long long)e, lanes_status_name(st));
    }
}

void sched_job_parked(salusd_t *d, job_t *job)
{
    sched_t *s = d->sched;
    lanes_placement_t pl;
    if (!parked(job) || lanes_job_placement(s->lanes, job->id, &pl) != LANES_OK)
        return;
    job->state = JOB_PAUSED;
    uint64_t holder = 0;
    lane_holder(s, pl.lane_id, &holder);
    if (holder == job->id) {
        /* the holder's iteration ended: tell the policy, give the lane back (learning its
         * sizes may move it to another lane: dispatch every lane) */
        holder_done(d, job, pl.lane_id);
        dispatch_all(d);
        return;
    } else if (holder) {
        /* someone runs in this lane: it must stop at its next boundary */
        job_t *h = registry_find(d->registry, holder);
        if (h && jobs_page(h))
            atomic_store(&jobs_page(h)->free_run, 0);
        return;
    }
    dispatch_lane(d, pl.lane_id);
}

static void try_admit_once(salusd_t *d);

/* Admission may finish jobs (refusals), which asks for admission again: that second round
 * runs after this one, on fresh placements, never nested inside it. */
void sched_try_admit(salusd_t *d)
{
    sched_t *s = d->sched;
    if (s->admitting) {
        s->admit_again = 1;
        return;
    }
    s->admitting = 1;
    do {
        s->admit_again = 0;
        try_admit_once(d);
    } while (s->admit_again);
    s->admitting = 0;
}

static void try_admit_once(salusd_t *d)
{
    sched_t *s = d->sched;
    size_t n = 0;
    job_t *waiting[SCHED_MAX_VIEWS];
    for (size_t i = 0; i < registry_count(d->registry) && n < SCHED_MAX_VIEWS; i++) {
        job_t *job = registry_at(d->registry, i);
        if (jobs_waiting_admission(job)) {
            waiting[n] = job;
            view_of(job, &s->views[n], 0);
            n++;
        }
    }
    if (n == 0)
        return;
    size_t *order = calloc(n, sizeof(*order));
    lanes_request_t *requests = calloc(n, sizeof(*requests));
    lanes_status_t *results = calloc(n, sizeof(*results));
    lanes_placement_t *placements = calloc(n, sizeof(*placements));
    if (!order || !requests || !results || !placements)
        goto out;
    policy_admission_order(&s->policy, s->views, n, order, salusd_now_ns());
    for (size_t i = 0; i < n; i++) {
        job_t *job = waiting[order[i]];
        int hinted = job->persistent_hint_bytes || job->ephemeral_hint_bytes;
        requests[i] = (lanes_request_t){
            .job_id = job->id,
            .uid = (uint32_t)job->uid,
            .persistent_bytes = hinted ? job->persistent_hint_bytes : LANES_SIZE_UNKNOWN,
            .ephemeral_bytes = hinted ? job->ephemeral_hint_bytes : LANES_SIZE_UNKNOWN,
            .gpu = LANES_ANY_GPU,
        };
    }
    lanes_admit_in_order(s->lanes, requests, n, policy_admission_blocks(&s->policy), results,
                         placements);
    refresh_budgets(d);
    for (size_t i = 0; i < n; i++) {
        job_t *job = registry_find(d->registry, requests[i].job_id);
        if (!job)
            continue;
        if (results[i] == LANES_OK) {
            policy_job_t v;
            view_of(job, &v, placements[i].lane_id);
            policy_job_arrived(&s->policy, &v, salusd_now_ns());
            if (jobs_admit(d, job, placements[i].gpu,
                           placements[i].persistent_bytes + placements[i].lane_size_bytes,
                           placements[i].lane_id) < 0)
                jobs_fail(d, job, NULL);
        } else if (results[i] == LANES_NEVER_FITS) {
            jobs_fail(d, job, "the job's memory (persistent + ephemeral) exceeds every GPU "
                              "of this node");
        }
    }
    dispatch_all(d);
out:
    free(order);
    free(requests);
    free(results);
    free(placements);
}

void sched_job_left(salusd_t *d, job_t *job)
{
    sched_t *s = d->sched;
    lanes_placement_t pl;
    if (lanes_job_placement(s->lanes, job->id, &pl) != LANES_OK)
        return;
    policy_job_left(&s->policy, job->id, salusd_now_ns());
    lanes_yield(s->lanes, job->id);
    lanes_release(s->lanes, job->id);
    refresh_budgets(d);
    dispatch_all(d);
}

int sched_is_holder(const salusd_t *d, const job_t *job)
{
    lanes_placement_t pl;
    uint64_t holder = 0;
    if (lanes_job_placement(d->sched->lanes, job->id, &pl) != LANES_OK)
        return 0;
    return lane_holder(d->sched, pl.lane_id, &holder) == 0 && holder == job->id;
}

int sched_lane_of(const salusd_t *d, const job_t *job, uint32_t *lane)
{
    lanes_placement_t pl;
    if (lanes_job_placement(d->sched->lanes, job->id, &pl) != LANES_OK)
        return -ENOENT;
    *lane = pl.lane_id;
    return 0;
}

const char *sched_policy_name(const salusd_t *d)
{
    return policy_name(&d->sched->policy);
}

int sched_set_policy(salusd_t *d, const char *name, char *err, size_t err_size)
{
    sched_t *s = d->sched;
    size_t n = admitted_views(d);
    int rc = policy_switch(&s->policy, name, &s->policy_config, s->views, n, salusd_now_ns());
    if (rc == -ENOENT) {
        snprintf(err, err_size, "no policy '%s'", name);
        return rc;
    }
    if (rc < 0) {
        snprintf(err, err_size, "policy '%s' failed to start; '%s' stays", name,
                 policy_name(&s->policy));
        return rc;
    }
    lanes_set_max_jobs_per_gpu(s->lanes, policy_max_jobs_per_gpu(&s->policy));
    LOG_INFO("scheduling policy is now %s", policy_name(&s->policy));
    sched_try_admit(d);
    dispatch_all(d);
    return 0;
}

void sched_gpu_books(const salusd_t *d, int gpu, uint64_t *capacity_bytes,
                     uint64_t *persistent_bytes, uint64_t *lane_bytes, uint64_t *lanes)
{
    lanes_gpu_info_t info;
    memset(&info, 0, sizeof(info));
    lanes_gpu_info(d->sched->lanes, gpu, &info);
    *capacity_bytes = info.capacity_bytes;
    *persistent_bytes = info.persistent_bytes;
    *lane_bytes = info.lane_bytes;
    *lanes = info.lane_count;
}

void sched_pack_lanes(salusd_t *d, msgpack_packer *pk)
{
    lanes_lane_info_t info[64];
    size_t n = lanes_list(d->sched->lanes, info, 64);
    if (n > 64)
        n = 64;
    msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        uint64_t ids[256];
        size_t count = lanes_lane_jobs(d->sched->lanes, info[i].lane_id, ids, 256);
        if (count > 256)
            count = 256;
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
}

/* The lane manager changed the layout (defragmentation: lanes grown, merged, moved jobs).
 * The books changed at once; the jobs follow at their next boundary: every job of the GPU
 * stops running freely, so that it parks, hands back the memory it does not hold, and gets
 * its next turn in its new lane. */
static void on_layout_change(void *context, const lanes_change_t *change)
{
    salusd_t *d = context;
    LOG_DEBUG("lanes: change %d on GPU %d (lane %u, job %llu)", (int)change->kind, change->gpu,
              change->lane_id, (unsigned long long)change->job_id);
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        job_page_t *page = jobs_page(job);
        if (page && job->gpu == change->gpu)
            atomic_store(&page->free_run, 0);
        if (change->kind == LANES_CHANGE_JOB_MOVED && job->id == change->job_id)
            job->lane = change->lane_id;
    }
}

int sched_init(salusd_t *d, char *err, size_t err_size)
{
    sched_t *s = calloc(1, sizeof(*s));
    lanes_config_t config;
    if (!s) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    lanes_config_default(&config);
    config.on_change = on_layout_change;
    config.on_change_context = d;
    config.job_overhead_bytes = d->devices.simulated ? 0 : d->config.job_overhead_bytes;
    config.share_lanes_across_users = d->config.share_lanes_across_users != 0;
    /* a job without hints starts on provisional sizes that fit the smallest GPU */
    for (int i = 0; i < d->devices.count; i++) {
        uint64_t total = d->devices.gpus[i].total_bytes;
        if (config.provisional_persistent_bytes > total / 4)
            config.provisional_persistent_bytes = total / 4;
        if (config.provisional_ephemeral_bytes > total / 2)
            config.provisional_ephemeral_bytes = total / 2;
    }
    s->lanes = lanes_create(&config);
    if (!s->lanes) {
        free(s);
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < d->devices.count; i++)
        lanes_add_gpu(s->lanes, i, d->devices.gpus[i].total_bytes, d->config.gpu_reserve_bytes);
    int rc = policy_init(&s->policy, d->config.policy, &s->policy_config);
    if (rc < 0) {
        snprintf(err, err_size, "unknown scheduling policy '%s'", d->config.policy);
        lanes_destroy(s->lanes);
        free(s);
        return rc;
    }
    lanes_set_max_jobs_per_gpu(s->lanes, policy_max_jobs_per_gpu(&s->policy));
    d->sched = s;
    return 0;
}

void sched_fini(salusd_t *d)
{
    if (!d->sched)
        return;
    policy_fini(&d->sched->policy);
    lanes_destroy(d->sched->lanes);
    free(d->sched);
    d->sched = NULL;
}
