/* Jobs across a restart of salusd, the daemon's side (see job_reattach.c for the re-attach
 * requests): the state file (state.h) in --state-dir, rewritten after every change a new
 * daemon must know (the job-id counter, the policy's state, each admitted job's identity,
 * place and what it holds: its job page and chunks by the file behind each descriptor);
 * at start, the jobs that were running under the old daemon (survivors) and the hold on new
 * admissions until every survivor is back, refused, or --reattach-grace-s has passed; then
 * the device's free memory as the driver reports it against the books, a shortfall logged
 * and kept out of the lanes until the driver has it back. */
#include "jobs-internal.h"

#include "gpu_sched.h"
#include "groups.h"
#include "log.h"
#include "paths.h"
#include "state.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


enum { SURVIVOR_PENDING = 0, SURVIVOR_BACK, SURVIVOR_GONE };

struct restart_s {
    char path[PATH_MAX];
    int disabled;                /* no state directory: logged once, nothing kept */
    salusd_state_t loaded;       /* what the previous daemon left */
    int *survivor;               /* per loaded job: SURVIVOR_* */
    uint64_t *back_as;           /* per loaded job: its id once back (lane mates join it) */
    struct event **exit_events;  /* per loaded job: its process ended before it came back */
    size_t pending;
    int holding;
    uint64_t deadline_ns;
    struct event *grace_timer;
    uint64_t *reserved_bytes;    /* per GPU: what the driver says is in use beyond the books */
    uint64_t *hold_job;          /* per GPU: the core's entry that keeps it out (0: none) */
    struct event *recheck_timer; /* while memory is kept out: is it back? */
    struct event *save_timer;    /* writes the file durably when it is dirty */
    int dirty;                   /* changed since the last durable write */
};

static struct restart_s *restart_of(const salusd_t *d)
{
    return d->restart;
}

int jobs_admission_held(const salusd_t *d)
{
    return d->restart && d->restart->holding;
}

/* ---- the state file --------------------------------------------------------------------- */

static int fill_job(salusd_t *d, job_t *job, state_job_t *out)
{
    job_runtime_t *rt = runtime_of(job);
    gpu_sched_job_info_t sched_info;
    if (!rt || !rt->page || rt->reattaching || gpu_sched_job_info(d, job, &sched_info) < 0 ||
        !sched_info.admitted)
        return -ENOENT;
    memset(out, 0, sizeof(*out));
    if (gpu_sched_job_sizes(d, job, &out->persistent_bytes, &out->ephemeral_bytes, &out->lane) < 0)
        return -ENOENT;
    out->id = job->id;
    out->uid = (uint32_t)job->uid;
    out->gid = (uint32_t)job->gid;
    out->pid = (int32_t)job->pid;
    snprintf(out->name, sizeof(out->name), "%s", job->name);
    out->gpu = sched_info.gpu;
    out->iterations_expected = job->iterations_expected;
    out->priority = job->priority;
    out->page_dev = rt->page_dev;
    out->page_ino = rt->page_ino;
    out->charged_bytes = rt->charged_bytes;
    out->latency_target_ns = job->latency_target_ns; /* its class: back as it registered */
    out->request_ns = job->latency_target_ns ? job->request_ns : 0;
    if (job->group_id && job->group_name[0]) {
        snprintf(out->group, sizeof(out->group), "%s", job->group_name);
        out->group_world = job->group_world;
        out->group_rank = job->group_rank;
        out->group_local_rank = job->group_local_rank;
        out->group_sync = groups_launch_sync((sched_core_sync_t)job->group_sync);
        out->group_staleness = job->group_staleness;
        out->group_share_gpus = job->group_share_gpus != 0;
    }
    /* a job on several GPUs (--gpus): its other members' GPUs, sizes and lanes */
    job_gpus_t *multi = gpu_sched_job_gpus(d);
    uint32_t gpus = job_gpus_count(multi, job->id);
    out->gpus = 1;
    if (gpus > 1) {
        out->members = calloc(gpus - 1, sizeof(*out->members));
        if (!out->members)
            return -ENOMEM;
        for (uint32_t k = 1; k < gpus; k++) {
            state_member_t *m = &out->members[k - 1];
            if (gpu_sched_member_sizes(d, job, k, &m->gpu, &m->persistent_bytes,
                                       &m->ephemeral_bytes, &m->lane) < 0)
                return -ENOENT;
        }
        out->gpus = gpus;
    }
    out->chunk_count = rt->chunk_count;
    out->chunks = rt->chunk_count ? calloc(rt->chunk_count, sizeof(*out->chunks)) : NULL;
    if (rt->chunk_count && !out->chunks)
        return -ENOMEM;
    for (size_t i = 0; i < rt->chunk_count; i++)
        out->chunks[i] = (state_chunk_t){
            .id = rt->chunks[i].id, .bytes = rt->chunks[i].bytes, .dev = rt->chunks[i].dev,
            .ino = rt->chunks[i].ino,
            /* which of the job's GPUs (0: its first; a member's on another) */
            .device = gpus > 1 ? job_gpus_member_on(multi, job->id, rt->chunks[i].gpu) : 0};
    jobs_lane_memory_record(job, &out->lane_set);
    return 0;
}

/* A deep copy of a survivor's record (its chunks and members its own). 0 or -ENOMEM. */
static int copy_record(state_job_t *to, const state_job_t *from)
{
    *to = *from;
    to->chunks = NULL;
    to->members = NULL;
    if (from->chunk_count) {
        to->chunks = malloc(from->chunk_count * sizeof(*to->chunks));
        if (!to->chunks)
            return -ENOMEM;
        memcpy(to->chunks, from->chunks, from->chunk_count * sizeof(*to->chunks));
    }
    if (from->gpus > 1 && from->members) {
        to->members = malloc((from->gpus - 1) * sizeof(*to->members));
        if (!to->members)
            return -ENOMEM;
        memcpy(to->members, from->members, (from->gpus - 1) * sizeof(*to->members));
    }
    return 0;
}

static void save(salusd_t *d, int durable);

void jobs_state_save(salusd_t *d)
{
    save(d, 0);
}

void jobs_state_dirty(salusd_t *d)
{
    if (d->restart)
        d->restart->dirty = 1;
}

static void on_save_timer(evutil_socket_t fd, short events, void *arg)
{
    salusd_t *d = arg;
    (void)fd;
    (void)events;
    if (d->restart && d->restart->dirty)
        save(d, 1);
}

static void save(salusd_t *d, int durable)
{
    struct restart_s *r = restart_of(d);
    salusd_state_t st;
    uint8_t policy_state[16384]; /* Gittins's 1,024 sizes take 8 KiB */
    char err[PATH_MAX + 256];
    if (!r || r->disabled)
        return;
    memset(&st, 0, sizeof(st));
    st.next_job_id = registry_next_id(d->registry);
    snprintf(st.policy, sizeof(st.policy), "%s", gpu_sched_policy_name(d));
    long n = gpu_sched_policy_save_state(d, policy_state, sizeof(policy_state));
    if (n > 0) {
        st.policy_state = malloc((size_t)n);
        if (st.policy_state) {
            memcpy(st.policy_state, policy_state, (size_t)n);
            st.policy_state_bytes = (size_t)n;
        }
    } else if (n < 0 && n != -ENOTSUP) {
        LOG_WARN("policy %s could not save its state: %s", st.policy, strerror((int)-n));
    }
    size_t total = registry_count(d->registry) + r->pending;
    st.jobs = total ? calloc(total, sizeof(*st.jobs)) : NULL;
    if (total && !st.jobs)
        goto out;
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        state_job_t *to = &st.jobs[st.job_count];
        if (fill_job(d, registry_at(d->registry, i), to) == 0) {
            st.job_count++;
        } else { /* (what it had filled in before it gave up) */
            free(to->chunks);
            free(to->members);
            memset(to, 0, sizeof(*to));
        }
    }
    /* survivors that may still come back stay on file, as they were */
    for (size_t i = 0; i < r->loaded.job_count && st.job_count < total; i++) {
        if (r->survivor[i] != SURVIVOR_PENDING)
            continue;
        state_job_t *to = &st.jobs[st.job_count];
        st.job_count++; /* (what state_free releases, also when the copy fails half-way) */
        if (copy_record(to, &r->loaded.jobs[i]) < 0)
            goto out;
    }
    /* a fresh write is still due durably (the periodic timer), unless this one is */
    r->dirty = !durable;
    if (state_write_file(r->path, &st, durable, err, sizeof(err)) < 0) {
        LOG_ERROR("cannot keep salusd's state (--state-dir): %s; running jobs will not survive "
                  "a restart", err);
        r->disabled = 1;
    }
out:
    state_free(&st);
}

/* ---- the hold on admissions ------------------------------------------------------------- */

/* Before the first admission after a restart: the driver's free memory against the books.
 * Memory in use that no job of the books holds (a survivor that did not come back but still
 * runs, another program) is logged and kept out of the lanes. */
/* Memory of GPU g the driver reports in use beyond what the books account for (the jobs'
 * chunks and charges, the lanes' shared chunks, the reserve, the daemon's own context on a
 * GPU); 0 within a grain. */
static uint64_t unaccounted_bytes(salusd_t *d, int g, uint64_t *used_out, uint64_t *expected_out,
                                  uint64_t *free_out)
{
    uint64_t free_bytes = 0, total = 0, held = 0;
    *used_out = *expected_out = *free_out = 0;
    if (devices_mem_info(&d->devices, g, &free_bytes, &total) < 0)
        return 0;
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        int gpu;
        uint64_t budget;
        if (job->runtime && jobs_placement(d, job, &gpu, &budget) == 0 && gpu == g)
            held += job->committed_bytes;
        /* a job on several GPUs: what it holds on g as one of its other GPUs */
        uint32_t k = job->runtime ? job_gpus_member_on(gpu_sched_job_gpus(d), job->id, g) : 0;
        uint64_t *there = k ? job_gpus_committed(gpu_sched_job_gpus(d), job->id, k) : NULL;
        if (there)
            held += *there;
    }
    held += jobs_lane_memory_bytes(d, g); /* and the lanes' shared chunks (re-presented) */
    uint64_t used = total > free_bytes ? total - free_bytes : 0;
    uint64_t expected = held + d->config.gpu_reserve_bytes;
    if (!d->devices.simulated)
        expected += d->config.job_overhead_bytes; /* the daemon's own context, about */
    *used_out = used;
    *expected_out = expected;
    *free_out = free_bytes;
    return used > expected + d->devices.gpus[g].granularity_bytes ? used - expected : 0;
}

static void check_device_memory(salusd_t *d)
{
    struct restart_s *r = restart_of(d);
    for (int g = 0; g < d->devices.count; g++) {
        uint64_t used, expected, free_bytes;
        uint64_t extra = unaccounted_bytes(d, g, &used, &expected, &free_bytes);
        if (extra) {
            r->reserved_bytes[g] = extra;
            LOG_WARN("GPU %d: the driver reports %llu MiB in use, the books account for %llu "
                     "MiB: %llu MiB are held outside salus (a job that did not re-attach?) "
                     "and are not handed out", g, (unsigned long long)(used >> 20),
                     (unsigned long long)(expected >> 20),
                     (unsigned long long)(r->reserved_bytes[g] >> 20));
        } else {
            LOG_INFO("GPU %d: the driver's free memory (%llu MiB) agrees with the books",
                     g, (unsigned long long)(free_bytes >> 20));
        }
    }
}

/* Every few seconds while memory is kept out: once the driver has it back, the lanes get it. */
static void on_recheck(evutil_socket_t fd, short events, void *arg)
{
    salusd_t *d = arg;
    struct restart_s *r = restart_of(d);
    int left = 0;
    (void)fd;
    (void)events;
    for (int g = 0; g < d->devices.count; g++) {
        uint64_t used, expected, free_bytes;
        if (!r->hold_job[g])
            continue;
        if (unaccounted_bytes(d, g, &used, &expected, &free_bytes)) {
            left = 1;
            continue;
        }
        LOG_INFO("GPU %d: the %llu MiB held outside salus are free again; the lanes may use them",
                 g, (unsigned long long)(r->reserved_bytes[g] >> 20));
        uint64_t id = r->hold_job[g];
        r->hold_job[g] = 0;
        r->reserved_bytes[g] = 0;
        registry_remove(d->registry, id);
        jobs_core_left(d, id); /* an admission round runs */
    }
    if (!left)
        event_del(r->recheck_timer);
}

/* Keeps memory the driver says is in use out of the lanes: an entry in the core (listed by ps
 * as 'unaccounted-memory', pid 0) with that much persistent memory, until the driver has it
 * back. */
static void reserve_unaccounted(salusd_t *d)
{
    struct restart_s *r = restart_of(d);
    for (int g = 0; g < d->devices.count; g++) {
        if (!r->reserved_bytes[g])
            continue;
        job_t *hold = registry_add(d->registry, "unaccounted-memory", 0, 0, 0, salusd_now_ns(),
                                   NULL);
        if (!hold)
            continue;
        sched_core_effects_t fx = {0};
        uint64_t grain = d->devices.gpus[g].granularity_bytes;
        uint64_t capacity, persistent, lane_bytes, lanes;
        gpu_sched_gpu_books(d, g, &capacity, &persistent, &lane_bytes, &lanes);
        uint64_t room = capacity > persistent + lane_bytes ? capacity - persistent - lane_bytes : 0;
        uint64_t keep = (r->reserved_bytes[g] + grain - 1) / grain * grain;
        /* the books may not have that much left: what they have left is kept out then */
        if (keep + grain > room)
            keep = room > grain ? (room - grain) / grain * grain : 0;
        sched_core_reattach_t where = {
            .gpu = g,
            .persistent_bytes = keep,
            .ephemeral_bytes = grain,
        };
        if (gpu_sched_job_reattached(d, hold, &where, &fx) < 0) {
            LOG_WARN("GPU %d: could not keep the %llu MiB out of the lanes", g,
                     (unsigned long long)(r->reserved_bytes[g] >> 20));
            registry_remove(d->registry, hold->id);
            sched_core_effects_free(&fx);
            continue;
        }
        sched_core_effects_free(&fx);
        hold->state = JOB_PAUSED;
        hold->admitted_ns = salusd_now_ns();
        hold->end_gpu = g; /* what ps shows of an entry without a process */
        hold->end_budget_bytes = where.persistent_bytes;
        r->hold_job[g] = hold->id;
        struct timeval every = {.tv_sec = 2};
        if (!r->recheck_timer)
            r->recheck_timer = event_new(d->base, -1, EV_PERSIST, on_recheck, d);
        if (r->recheck_timer)
            event_add(r->recheck_timer, &every);
    }
}

static void end_hold(salusd_t *d, const char *why)
{
    struct restart_s *r = restart_of(d);
    if (!r->holding)
        return;
    r->holding = 0;
    if (r->grace_timer)
        event_del(r->grace_timer);
    for (size_t i = 0; i < r->loaded.job_count; i++) {
        if (r->survivor[i] != SURVIVOR_PENDING)
            continue;
        r->survivor[i] = SURVIVOR_GONE;
        LOG_WARN("job %llu '%s' did not re-attach within %lld s; its place is given up",
                 (unsigned long long)r->loaded.jobs[i].id, r->loaded.jobs[i].name,
                 d->config.reattach_grace_s);
    }
    r->pending = 0;
    LOG_INFO("admissions resume: %s", why);
    check_device_memory(d);
    reserve_unaccounted(d);
    save(d, 1);
    /* the jobs that registered meanwhile, in registration (id) order */
    for (size_t i = 0; i < registry_count(d->registry);) {
        job_t *job = registry_at(d->registry, i);
        uint64_t id = job->id;
        gpu_sched_job_info_t sched_info;
        if (jobs_waiting_admission(job) && !jobs_is_reserved(job) &&
            gpu_sched_job_info(d, job, &sched_info) < 0)
            jobs_core_registered(d, job);
        /* its effects may have forgotten finished jobs (a refused one, at once with
         * --finished-jobs-kept 0), which moves the later ones down: on from the first job
         * after it */
        size_t next = i + 1 < registry_count(d->registry) ? i + 1 : registry_count(d->registry);
        while (next > 0 && registry_at(d->registry, next - 1)->id > id)
            next--;
        i = next;
    }
}

static void on_grace_over(evutil_socket_t fd, short events, void *arg)
{
    (void)fd;
    (void)events;
    end_hold(arg, "the re-attach grace period is over");
}

/* The watch on survivors' processes ends (they are back, or settled otherwise). */
static void stop_exit_watch(struct restart_s *r, size_t index)
{
    if (!r->exit_events || !r->exit_events[index])
        return;
    close(event_get_fd(r->exit_events[index]));
    event_free(r->exit_events[index]);
    r->exit_events[index] = NULL;
}

static void survivor_settled(salusd_t *d, size_t index, int how, uint64_t id)
{
    struct restart_s *r = restart_of(d);
    if (r->survivor[index] != SURVIVOR_PENDING)
        return;
    r->survivor[index] = how;
    r->back_as[index] = how == SURVIVOR_BACK ? id : 0;
    stop_exit_watch(r, index);
    r->pending--;
    if (r->pending == 0)
        end_hold(d, "every job that survived the restart re-attached or was refused");
}

/* A survivor's process ended before it re-attached. */
static void on_survivor_exit(evutil_socket_t fd, short events, void *arg)
{
    salusd_t *d = arg;
    struct restart_s *r = restart_of(d);
    (void)events;
    for (size_t i = 0; i < r->loaded.job_count; i++) {
        if (r->exit_events[i] && event_get_fd(r->exit_events[i]) == fd) {
            stop_exit_watch(r, i);
            if (r->survivor[i] == SURVIVOR_PENDING)
                LOG_INFO("job %llu '%s' (pid %d) ended before it re-attached",
                         (unsigned long long)r->loaded.jobs[i].id, r->loaded.jobs[i].name,
                         (int)r->loaded.jobs[i].pid);
            survivor_settled(d, i, SURVIVOR_GONE, 0);
            return;
        }
    }
}

int jobs_restart_init(salusd_t *d)
{
    struct restart_s *r = calloc(1, sizeof(*r));
    char dir[PATH_MAX], default_socket[108], err[PATH_MAX + 256];
    if (!r)
        return -ENOMEM;
    d->restart = r;
    r->reserved_bytes = calloc((size_t)(d->devices.count > 0 ? d->devices.count : 1),
                               sizeof(uint64_t));
    r->hold_job = calloc((size_t)(d->devices.count > 0 ? d->devices.count : 1), sizeof(uint64_t));
    if (!r->reserved_bytes || !r->hold_job)
        return -ENOMEM;
    if (d->config.state_dir[0])
        snprintf(dir, sizeof(dir), "%s", d->config.state_dir);
    else if (state_default_dir(dir, sizeof(dir)) < 0) {
        LOG_WARN("no state directory (set --state-dir): running jobs will not survive a "
                 "restart");
        r->disabled = 1;
        return 0;
    }
    /* the default socket's file is salusd.state; another socket's is named after it */
    const char *env = getenv("SALUS_SOCKET");
    if (env)
        unsetenv("SALUS_SOCKET");
    int have_default = salus_default_socket_path(default_socket, sizeof(default_socket)) == 0;
    if (env)
        setenv("SALUS_SOCKET", env, 1);
    if (state_file_path(dir, d->config.socket_path, have_default ? default_socket : NULL,
                        r->path, sizeof(r->path)) < 0) {
        LOG_WARN("the state directory path is too long: nothing kept across restarts");
        r->disabled = 1;
        return 0;
    }
    r->save_timer = event_new(d->base, -1, EV_PERSIST, on_save_timer, d);
    struct timeval every = {.tv_sec = 5};
    if (!r->save_timer || event_add(r->save_timer, &every) < 0)
        return -ENOMEM;
    int rc = state_read_file(r->path, &r->loaded, err, sizeof(err));
    if (rc == -ENOENT) {
        LOG_DEBUG("no state file at %s (a first start)", r->path);
        return 0;
    }
    if (rc < 0) {
        char aside[PATH_MAX + 16];
        snprintf(aside, sizeof(aside), "%s.refused", r->path);
        LOG_ERROR("state file refused: %s; it is moved to %s and not used (jobs that were "
                  "running cannot re-attach)", err, aside);
        int moved = rename(r->path, aside) == 0 ? 0 : errno;
        if (moved != 0 && moved != ENOENT)
            LOG_ERROR("cannot move it aside (%s): nothing is kept across restarts",
                      strerror(moved));
        r->disabled = moved != 0 && moved != ENOENT;
        return 0;
    }
    registry_set_next_id(d->registry, r->loaded.next_job_id);
    if (r->loaded.policy_state_bytes && strcmp(r->loaded.policy, gpu_sched_policy_name(d)) == 0) {
        int prc = gpu_sched_policy_load_state(d, r->loaded.policy_state,
                                              r->loaded.policy_state_bytes);
        if (prc < 0 && prc != -ENOTSUP)
            LOG_WARN("policy %s refused its saved state (%s); it starts afresh", r->loaded.policy,
                     strerror(-prc));
        else if (prc == 0)
            LOG_INFO("policy %s took back its saved state", r->loaded.policy);
    }
    size_t n = r->loaded.job_count;
    r->survivor = calloc(n ? n : 1, sizeof(*r->survivor));
    r->back_as = calloc(n ? n : 1, sizeof(*r->back_as));
    if (!r->survivor || !r->back_as)
        return -ENOMEM;
    r->pending = n;
    r->exit_events = calloc(n ? n : 1, sizeof(*r->exit_events));
    if (!r->exit_events)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        /* gone already, or goes before it re-attached: no need to wait for it */
        int pidfd = (int)syscall(SYS_pidfd_open, r->loaded.jobs[i].pid, 0);
        if (pidfd < 0 && errno == ESRCH) {
            r->survivor[i] = SURVIVOR_GONE;
            r->pending--;
            continue;
        }
        if (pidfd < 0)
            continue;
        r->exit_events[i] = event_new(d->base, pidfd, EV_READ, on_survivor_exit, d);
        if (!r->exit_events[i] || event_add(r->exit_events[i], NULL) < 0) {
            close(pidfd);
            if (r->exit_events[i])
                event_free(r->exit_events[i]);
            r->exit_events[i] = NULL;
        }
    }
    n = r->pending;
    LOG_INFO("state from %s: next job id %llu, %zu job%s to re-attach", r->path,
             (unsigned long long)r->loaded.next_job_id, n, n == 1 ? "" : "s");
    if (n == 0)
        return 0;
    r->holding = 1;
    r->deadline_ns = salusd_now_ns() + (uint64_t)d->config.reattach_grace_s * 1000000000ull;
    r->grace_timer = event_new(d->base, -1, 0, on_grace_over, d);
    struct timeval grace = {.tv_sec = d->config.reattach_grace_s};
    if (!r->grace_timer || event_add(r->grace_timer, &grace) < 0)
        return -ENOMEM;
    LOG_INFO("no new job is admitted until they re-attach (at most %lld s)",
             d->config.reattach_grace_s);
    return 0;
}

void jobs_restart_fini(salusd_t *d)
{
    struct restart_s *r = restart_of(d);
    if (!r)
        return;
    save(d, 1);
    if (r->save_timer)
        event_free(r->save_timer);
    if (r->grace_timer)
        event_free(r->grace_timer);
    if (r->recheck_timer)
        event_free(r->recheck_timer);
    free(r->hold_job);
    /* the watches first: state_free empties the list they are counted by */
    for (size_t i = 0; r->exit_events && i < r->loaded.job_count; i++)
        stop_exit_watch(r, i);
    state_free(&r->loaded);
    free(r->exit_events);
    free(r->survivor);
    free(r->back_as);
    free(r->reserved_bytes);
    free(r);
    d->restart = NULL;
}

/* ---- the survivors, for the re-attach requests ------------------------------------------- */

const state_job_t *jobs_survivor(const salusd_t *d, uint64_t id, int *pending)
{
    const struct restart_s *r = restart_of(d);
    *pending = 0;
    for (size_t i = 0; r && r->survivor && i < r->loaded.job_count; i++) {
        if (r->loaded.jobs[i].id == id) {
            *pending = r->survivor[i] == SURVIVOR_PENDING;
            return &r->loaded.jobs[i];
        }
    }
    return NULL;
}

uint64_t jobs_survivor_chunk_owner(const salusd_t *d, uint64_t dev, uint64_t ino)
{
    const struct restart_s *r = restart_of(d);
    for (size_t j = 0; r && j < r->loaded.job_count; j++)
        for (size_t k = 0; k < r->loaded.jobs[j].chunk_count; k++)
            if (r->loaded.jobs[j].chunks[k].dev == dev && r->loaded.jobs[j].chunks[k].ino == ino)
                return r->loaded.jobs[j].id;
    return 0;
}

uint64_t jobs_survivor_lane_mate(const salusd_t *d, int gpu, uint32_t lane)
{
    const struct restart_s *r = restart_of(d);
    for (size_t i = 0; r && r->survivor && i < r->loaded.job_count; i++) {
        const state_job_t *back = &r->loaded.jobs[i];
        if (r->survivor[i] != SURVIVOR_BACK)
            continue;
        if (back->gpu == gpu && back->lane == lane)
            return r->back_as[i];
        /* a member of a job on several GPUs: its id in the core is the job's + k */
        for (uint32_t k = 1; back->members && k < back->gpus; k++)
            if (back->members[k - 1].gpu == gpu && back->members[k - 1].lane == lane)
                return r->back_as[i] + k;
    }
    return 0;
}

void jobs_survivor_settled(salusd_t *d, uint64_t id, int back)
{
    struct restart_s *r = restart_of(d);
    for (size_t i = 0; r && r->survivor && i < r->loaded.job_count; i++)
        if (r->loaded.jobs[i].id == id)
            survivor_settled(d, i, back ? SURVIVOR_BACK : SURVIVOR_GONE, id);
}
