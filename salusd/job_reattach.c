/* Jobs across a restart of salusd: the state file, and the jobs that survive a restart
 * re-attaching to the new daemon.
 *
 * The state file (state.h, in --state-dir) is rewritten after every change a new daemon must
 * know: the job-id counter, the policy's state, and each admitted job's identity (uid, pid),
 * place (GPU, sizes, lane) and what it holds (its job page and chunks, by the identity of
 * the file behind each descriptor). A job's shim that lost the daemon keeps its memory mapped
 * and waits at its next boundary; when a daemon answers it re-attaches:
 *
 *   reattach {job_id, chunks} + [job page, eventfd]  the connection's peer credentials (the
 *       kernel's, bound at accept) must be the recorded uid and pid; the page must be the
 *       recorded memfd (st_dev, st_ino), sealed at its size; the second descriptor an eventfd
 *   reattach_chunk {chunk_id, bytes} + [chunk]       each chunk must be one recorded for this
 *       job (same id, size and file: a plain memfd, or another job's chunk, is refused) and
 *       the driver must take it as memory of the job's GPU of that size
 *   reattach_done {}                                 the job gets its place back in the
 *       scheduling core (its GPU, sizes, lane mates) and a reply {job_id, gpu, budget_bytes}
 *
 * Anything refused ends the job (failed; the shim fails closed with the reason) and leaves
 * every other job alone. Until every survivor is back, refused, or --reattach-grace-s has
 * passed, no new job is admitted; then the device's free memory as the driver reports it is
 * checked against the books, and a shortfall is logged and kept out of the lanes. */
#include "jobs-internal.h"

#include "log.h"
#include "paths.h"
#include "sched.h"
#include "state.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLICY_STATE_MAX_BYTES (256u << 10)

enum { SURVIVOR_PENDING = 0, SURVIVOR_BACK, SURVIVOR_GONE };

struct restart_s {
    char path[PATH_MAX];
    int disabled;                /* no state directory: logged once, nothing kept */
    salusd_state_t loaded;       /* what the previous daemon left */
    int *survivor;               /* per loaded job: SURVIVOR_* */
    uint64_t *back_as;           /* per loaded job: its id once back (lane mates join it) */
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
    sched_job_view_t view;
    if (!rt || !rt->page || rt->reattaching || sched_job_view(d, job, &view) < 0 || !view.admitted)
        return -ENOENT;
    memset(out, 0, sizeof(*out));
    if (sched_job_sizes(d, job, &out->persistent_bytes, &out->ephemeral_bytes, &out->lane) < 0)
        return -ENOENT;
    out->id = job->id;
    out->uid = (uint32_t)job->uid;
    out->gid = (uint32_t)job->gid;
    out->pid = (int32_t)job->pid;
    snprintf(out->name, sizeof(out->name), "%s", job->name);
    out->gpu = view.gpu;
    out->iterations_expected = job->iterations_expected;
    out->priority = job->priority;
    out->page_dev = rt->page_dev;
    out->page_ino = rt->page_ino;
    out->charged_bytes = rt->charged_bytes;
    out->chunk_count = rt->chunk_count;
    out->chunks = rt->chunk_count ? calloc(rt->chunk_count, sizeof(*out->chunks)) : NULL;
    if (rt->chunk_count && !out->chunks)
        return -ENOMEM;
    for (size_t i = 0; i < rt->chunk_count; i++)
        out->chunks[i] = (state_chunk_t){.id = rt->chunks[i].id, .bytes = rt->chunks[i].bytes,
                                         .dev = rt->chunks[i].dev, .ino = rt->chunks[i].ino};
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
    uint8_t policy_state[4096];
    char err[PATH_MAX + 256];
    if (!r || r->disabled)
        return;
    memset(&st, 0, sizeof(st));
    st.next_job_id = registry_next_id(d->registry);
    snprintf(st.policy, sizeof(st.policy), "%s", sched_policy_name(d));
    long n = sched_policy_save_state(d, policy_state, sizeof(policy_state));
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
    for (size_t i = 0; i < registry_count(d->registry); i++)
        if (fill_job(d, registry_at(d->registry, i), &st.jobs[st.job_count]) == 0)
            st.job_count++;
    /* survivors that may still come back stay on file, as they were */
    for (size_t i = 0; i < r->loaded.job_count && st.job_count < total; i++) {
        if (r->survivor[i] != SURVIVOR_PENDING)
            continue;
        state_job_t *to = &st.jobs[st.job_count];
        *to = r->loaded.jobs[i];
        to->chunks = NULL;
        if (to->chunk_count) {
            to->chunks = malloc(to->chunk_count * sizeof(*to->chunks));
            if (!to->chunks)
                goto out;
            memcpy(to->chunks, r->loaded.jobs[i].chunks, to->chunk_count * sizeof(*to->chunks));
        }
        st.job_count++;
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
 * chunks and charges, the reserve, the daemon's own context on a GPU); 0 within a grain. */
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
    }
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
        jobs_sched_left(d, id); /* an admission round runs */
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
        sched_gpu_books(d, g, &capacity, &persistent, &lane_bytes, &lanes);
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
        if (sched_job_reattached(d, hold, &where, &fx) < 0) {
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
        LOG_WARN("job %llu '%s' did not re-attach within %d s; its place is given up",
                 (unsigned long long)r->loaded.jobs[i].id, r->loaded.jobs[i].name,
                 d->config.reattach_grace_s);
    }
    r->pending = 0;
    LOG_INFO("admissions resume: %s", why);
    check_device_memory(d);
    reserve_unaccounted(d);
    save(d, 1);
    /* the jobs that registered meanwhile, in registration (id) order */
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        sched_job_view_t view;
        if (jobs_waiting_admission(job) && !jobs_is_reserved(job) &&
            sched_job_view(d, job, &view) < 0)
            jobs_sched_registered(d, job);
    }
}

static void on_grace_over(evutil_socket_t fd, short events, void *arg)
{
    (void)fd;
    (void)events;
    end_hold(arg, "the re-attach grace period is over");
}

static void survivor_settled(salusd_t *d, size_t index, int how, uint64_t id)
{
    struct restart_s *r = restart_of(d);
    if (r->survivor[index] != SURVIVOR_PENDING)
        return;
    r->survivor[index] = how;
    r->back_as[index] = how == SURVIVOR_BACK ? id : 0;
    r->pending--;
    if (r->pending == 0)
        end_hold(d, "every job that survived the restart re-attached or was refused");
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
        if (rename(r->path, aside) < 0)
            LOG_ERROR("cannot move it aside (%s): nothing is kept across restarts",
                      strerror(errno));
        r->disabled = rename(r->path, aside) < 0 && errno != ENOENT;
        return 0;
    }
    registry_set_next_id(d->registry, r->loaded.next_job_id);
    if (r->loaded.policy_state_bytes && strcmp(r->loaded.policy, sched_policy_name(d)) == 0) {
        int prc = sched_policy_load_state(d, r->loaded.policy_state,
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
    for (size_t i = 0; i < n; i++) {
        if (kill(r->loaded.jobs[i].pid, 0) < 0 && errno == ESRCH) { /* gone already */
            r->survivor[i] = SURVIVOR_GONE;
            r->pending--;
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
    LOG_INFO("no new job is admitted until they re-attach (at most %d s)",
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
    state_free(&r->loaded);
    free(r->survivor);
    free(r->back_as);
    free(r->reserved_bytes);
    free(r);
    d->restart = NULL;
}

/* ---- re-attach -------------------------------------------------------------------------- */

static long find_survivor(const struct restart_s *r, uint64_t id)
{
    for (size_t i = 0; r && i < r->loaded.job_count; i++)
        if (r->loaded.jobs[i].id == id)
            return (long)i;
    return -1;
}

static int is_eventfd(int fd)
{
    char path[64], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return strcmp(target, "anon_inode:[eventfd]") == 0;
}

/* Checks the re-presented job page: the recorded memfd, sealed at its size. Maps it. */
static int adopt_page(job_runtime_t *rt, const state_job_t *rec, int fd, const char **why)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != JOB_PAGE_BYTES ||
        (uint64_t)st.st_dev != rec->page_dev || (uint64_t)st.st_ino != rec->page_ino) {
        *why = "its job page is not the one salusd gave it";
        return -EPERM;
    }
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        *why = "its job page is not sealed";
        return -EPERM;
    }
    void *p = mmap(NULL, JOB_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        *why = "its job page cannot be mapped";
        return -EPERM;
    }
    rt->page = p;
    if (rt->page->magic != JOB_PAGE_MAGIC || rt->page->version != JOB_PAGE_VERSION) {
        *why = "its job page has another layout version";
        return -EPERM;
    }
    rt->page_dev = rec->page_dev;
    rt->page_ino = rec->page_ino;
    return 0;
}

static void refuse(conn_t *c, uint64_t request_id, job_t *job, const char *fmt, const char *why)
{
    salusd_t *d = c->daemon;
    struct restart_s *r = restart_of(d);
    uint64_t id = job ? job->id : 0;
    server_reply_error(c, request_id, PROTO_EPERM, 1, fmt, why);
    LOG_WARN("re-attach of job %llu (pid %d, uid %u) refused: %s", (unsigned long long)id,
             (int)c->pid, (unsigned)c->uid, why);
    long at = find_survivor(r, id);
    if (job) {
        c->job_id = 0;
        runtime_of(job)->conn = NULL;
        jobs_fail(d, job, NULL);
    }
    if (at >= 0)
        survivor_settled(d, (size_t)at, SURVIVOR_GONE, 0);
}

void jobs_handle_reattach(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    struct restart_s *r = restart_of(d);
    uint64_t id = 0, chunks = 0;
    int page_fd = -1, notify_fd = -1;
    const char *why = NULL;
    if (proto_get_uint(&msg->body, "job_id", &id) < 0 ||
        proto_get_uint(&msg->body, "chunks", &chunks) < 0 || server_frame_fds(c) != 2) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 1, "reattach takes job_id, chunks and "
                                                         "two descriptors (job page, eventfd)");
        return;
    }
    if (c->job_id) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 1, "this connection is job %llu already",
                           (unsigned long long)c->job_id);
        return;
    }
    long at = find_survivor(r, id);
    if (at < 0 || r->survivor[at] != SURVIVOR_PENDING) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 1,
                           "job %llu is not a job that survived salusd's restart (or its grace "
                           "period of %d s is over)", (unsigned long long)id,
                           d->config.reattach_grace_s);
        LOG_WARN("pid %d (uid %u) tried to re-attach as job %llu, which is not waiting to "
                 "re-attach", (int)c->pid, (unsigned)c->uid, (unsigned long long)id);
        return;
    }
    const state_job_t *rec = &r->loaded.jobs[at];
    /* the kernel's word (SO_PEERCRED at accept), never the client's */
    if ((uint32_t)c->uid != rec->uid || (int32_t)c->pid != rec->pid) {
        server_reply_error(c, msg->id, PROTO_EPERM, 1,
                           "permission_denied: job %llu is not this process's", (unsigned long long)id);
        LOG_WARN("pid %d (uid %u) tried to re-attach as job %llu of pid %d (uid %u): refused",
                 (int)c->pid, (unsigned)c->uid, (unsigned long long)id, (int)rec->pid,
                 (unsigned)rec->uid);
        return;
    }
    if (rec->gpu >= d->devices.count || chunks > rec->chunk_count) {
        why = rec->gpu >= d->devices.count ? "its GPU is not one of this salusd's"
                                           : "it re-presents more chunks than salusd handed it";
        refuse(c, msg->id, NULL, "re-attach refused: %s", why);
        survivor_settled(d, (size_t)at, SURVIVOR_GONE, 0);
        return;
    }
    int pidfd = server_dup_pidfd(c);
    if (pidfd < 0) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 1, "cannot watch process %d", (int)c->pid);
        return;
    }
    page_fd = server_take_fd(c);
    notify_fd = server_take_fd(c);
    job_runtime_t *rt = calloc(1, sizeof(*rt));
    job_t *job = rt ? registry_add_with_id(d->registry, id, rec->name, c->pid, c->uid, c->gid,
                                           salusd_now_ns(), c)
                    : NULL;
    if (!job) {
        free(rt);
        close(pidfd);
        close(page_fd);
        close(notify_fd);
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 1, "out of memory");
        return;
    }
    rt->daemon = d;
    rt->job_id = id;
    rt->conn = c;
    rt->pidfd = pidfd;
    rt->notify_fd = -1;
    rt->reattaching = 1;
    rt->reattach_chunks = (uint32_t)chunks;
    job->runtime = rt;
    job->iterations_expected = rec->iterations_expected;
    job->priority = rec->priority;
    job->state = JOB_PAUSED;
    job->admitted_ns = salusd_now_ns();
    c->job_id = id;
    rt->pid_event = event_new(d->base, pidfd, EV_READ, jobs_on_process_exit, rt);
    if (rt->pid_event)
        event_add(rt->pid_event, NULL);
    if (adopt_page(rt, rec, page_fd, &why) < 0 || (!is_eventfd(notify_fd) &&
                                                  (why = "its second descriptor is not an eventfd"))) {
        close(page_fd);
        close(notify_fd);
        refuse(c, msg->id, job, "re-attach refused: %s", why);
        return;
    }
    close(page_fd);
    fcntl(notify_fd, F_SETFL, fcntl(notify_fd, F_GETFL) | O_NONBLOCK);
    rt->notify_fd = notify_fd;
    rt->charged_bytes = rec->charged_bytes;
    job->committed_bytes = rec->charged_bytes;
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 0);
    proto_enc_finish(e);
    server_send(c, e);
}

void jobs_handle_reattach_chunk(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    struct restart_s *r = restart_of(d);
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    uint64_t id = 0, bytes = 0;
    char why[256];
    if (!rt || !rt->reattaching || proto_get_uint(&msg->body, "chunk_id", &id) < 0 ||
        proto_get_uint(&msg->body, "bytes", &bytes) < 0 || server_frame_fds(c) != 1) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "reattach_chunk takes chunk_id, bytes "
                                                         "and the chunk's descriptor, after reattach");
        return;
    }
    long at = find_survivor(r, job->id);
    const state_job_t *rec = at >= 0 ? &r->loaded.jobs[at] : NULL;
    int fd = server_take_fd(c);
    struct stat st;
    const state_chunk_t *want = NULL;
    for (size_t i = 0; rec && i < rec->chunk_count; i++)
        if (rec->chunks[i].id == id)
            want = &rec->chunks[i];
    for (size_t i = 0; want && i < rt->chunk_count; i++)
        if (rt->chunks[i].id == id)
            want = NULL; /* presented twice */
    if (!want || fstat(fd, &st) < 0 || (uint64_t)st.st_dev != want->dev ||
        (uint64_t)st.st_ino != want->ino || bytes != want->bytes) {
        /* whose is it? (another job's chunk, or nobody's: a forged descriptor) */
        uint64_t owner = 0;
        for (size_t j = 0; fstat(fd, &st) == 0 && j < r->loaded.job_count && !owner; j++)
            for (size_t k = 0; k < r->loaded.jobs[j].chunk_count; k++)
                if (r->loaded.jobs[j].chunks[k].ino == (uint64_t)st.st_ino &&
                    r->loaded.jobs[j].chunks[k].dev == (uint64_t)st.st_dev)
                    owner = r->loaded.jobs[j].id;
        if (owner && owner != job->id)
            snprintf(why, sizeof(why), "chunk %llu it re-presents is job %llu's",
                     (unsigned long long)id, (unsigned long long)owner);
        else
            snprintf(why, sizeof(why), "chunk %llu it re-presents is not one salusd handed it "
                     "(a forged descriptor)", (unsigned long long)id);
        close(fd);
        refuse(c, msg->id, job, "re-attach refused: %s", why);
        return;
    }
    if (rt->chunk_count == rt->chunk_capacity) {
        size_t cap = rt->chunk_capacity ? rt->chunk_capacity * 2 : 8;
        chunk_t *chunks = realloc(rt->chunks, cap * sizeof(*chunks));
        if (!chunks) {
            close(fd);
            refuse(c, msg->id, job, "re-attach refused: %s", "salusd is out of memory");
            return;
        }
        rt->chunks = chunks;
        rt->chunk_capacity = cap;
    }
    int rc = devices_chunk_import(&d->devices, rec->gpu, fd, id, bytes,
                                  &rt->chunks[rt->chunk_count]);
    close(fd);
    if (rc < 0) {
        snprintf(why, sizeof(why), "the driver does not take chunk %llu as %llu bytes of GPU %d",
                 (unsigned long long)id, (unsigned long long)bytes, rec->gpu);
        refuse(c, msg->id, job, "re-attach refused: %s", why);
        return;
    }
    rt->chunk_count++;
    job->committed_bytes += bytes;
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 0);
    proto_enc_finish(e);
    server_send(c, e);
}

void jobs_handle_reattach_done(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    struct restart_s *r = restart_of(d);
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    if (!rt || !rt->reattaching) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "reattach_done without reattach");
        return;
    }
    long at = find_survivor(r, job->id);
    const state_job_t *rec = at >= 0 ? &r->loaded.jobs[at] : NULL;
    if (!rec || rt->chunk_count != rt->reattach_chunks) {
        refuse(c, msg->id, job, "re-attach refused: %s",
               "it re-presented fewer chunks than it announced");
        return;
    }
    /* its lane mates: a survivor back already that had the same lane */
    uint64_t mate = 0;
    for (size_t i = 0; i < r->loaded.job_count && !mate; i++)
        if (r->survivor[i] == SURVIVOR_BACK && r->loaded.jobs[i].gpu == rec->gpu &&
            r->loaded.jobs[i].lane == rec->lane)
            mate = r->back_as[i];
    job_page_t *page = rt->page;
    sched_core_reattach_t where = {
        .gpu = rec->gpu,
        .lane_of_job = mate,
        .persistent_bytes = rec->persistent_bytes,
        .ephemeral_bytes = rec->ephemeral_bytes,
        .iterations = atomic_load(&page->iterations),
        .busy_ns = atomic_load(&page->busy_ns),
    };
    sched_core_effects_t fx = {0};
    int rc = sched_job_reattached(d, job, &where, &fx);
    sched_core_effects_free(&fx);
    if (rc < 0) {
        refuse(c, msg->id, job, "re-attach refused: %s",
               rc == -ENOSPC ? "its memory no longer fits beside the jobs back already"
                             : "the scheduling core did not take it");
        return;
    }
    rt->reattaching = 0;
    rt->notify_event = event_new(d->base, rt->notify_fd, EV_READ | EV_PERSIST, jobs_on_notify, rt);
    if (rt->notify_event)
        event_add(rt->notify_event, NULL);
    int gpu;
    uint64_t budget;
    jobs_placement(d, job, &gpu, &budget);
    /* the new books: no free run until the core grants one, the budget it has now */
    atomic_store(&page->free_run, 0);
    jobs_set_budget(job, budget);
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 3);
    proto_pack_kv_uint(&e->pk, "job_id", job->id);
    proto_pack_kv_uint(&e->pk, "gpu", (uint64_t)gpu);
    proto_pack_kv_uint(&e->pk, "budget_bytes", budget);
    proto_enc_finish(e);
    server_send(c, e);
    LOG_INFO("job %llu '%s' re-attached (pid %d): GPU %d, %zu chunk%s, %llu MiB, budget %llu "
             "MiB, %llu iterations so far", (unsigned long long)job->id, job->name,
             (int)job->pid, gpu, rt->chunk_count, rt->chunk_count == 1 ? "" : "s",
             (unsigned long long)(job->committed_bytes >> 20),
             (unsigned long long)(budget >> 20),
             (unsigned long long)atomic_load(&page->iterations));
    survivor_settled(d, (size_t)at, SURVIVOR_BACK, job->id);
    jobs_state_save(d);
    /* parked at its boundary while salusd was away: it asks for its turn now */
    jobs_sched_parked(d, job);
}
