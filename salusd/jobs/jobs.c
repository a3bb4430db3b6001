/* Jobs at run time (see jobs.h): registration, the job page and its notifications, and the
 * end of a job. Admission and turns are the scheduling core's (gpu_sched.c adapts it): a
 * registered job waits until the core admits it (jobs_admit answers its register request
 * with its GPU and budget) or refuses it (jobs_fail). */
#include "jobs.h"
#include "jobs-internal.h"
#include "access.h"

#include "gpu_sched.h"
#include "job_page.h"
#include "jobs_observer.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int jobs_name_valid(const char *name)
{
    const unsigned char *p = (const unsigned char *)name;
    size_t n = strlen(name);
    if (n >= REGISTRY_NAME_BYTES)
        return 0;
    while (*p) {
        if (*p < 0x80) { /* printable ASCII only: no CR, LF, ESC, DEL */
            if (*p < 0x20 || *p == 0x7f)
                return 0;
            p++;
            continue;
        }
        /* well-formed UTF-8 of U+00A0 and above (no C1 controls such as U+009B CSI) */
        int len = (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
        if (!len)
            return 0;
        uint32_t cp = *p & (0x7f >> len);
        for (int i = 1; i < len; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp < 0xa0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += len;
    }
    return 1;
}

/* sizes above this are refused as malformed (a petabyte: no GPU, and no overflow when added) */
#define JOBS_MAX_HINT_BYTES (1ull << 50)
/* a latency target or request time above an hour is refused as malformed */
#define JOBS_MAX_CLASS_NS (3600ull * 1000000000ull)

void jobs_simgpu_shm_name(const salusd_t *d, char *out, size_t size)
{
    out[0] = '\0';
    if (d->devices.simulated) { /* simgpu's own default name (tools/simgpu/src/device.c) */
        const char *env = getenv("SIMGPU_SHM_NAME");
        if (env && *env)
            snprintf(out, size, "%s%s", env[0] == '/' ? "" : "/", env);
        else
            snprintf(out, size, "/simgpu-%u", (unsigned)getuid());
    }
}

int jobs_fields_parse(const msgpack_object *body, jobs_fields_t *f)
{
    memset(f, 0, sizeof(*f));
    if (proto_get_str_copy(body, "name", f->name, sizeof(f->name)) == -EINVAL ||
        proto_get_uint(body, "iterations", &f->iterations) == -EINVAL ||
        proto_get_uint(body, "persistent_bytes", &f->persistent_bytes) == -EINVAL ||
        proto_get_uint(body, "ephemeral_bytes", &f->ephemeral_bytes) == -EINVAL ||
        proto_get_int(body, "priority", &f->priority) == -EINVAL ||
        proto_get_uint(body, "gpus", &f->gpus) == -EINVAL ||
        proto_get_uint(body, "latency_target_ns", &f->latency_target_ns) == -EINVAL ||
        proto_get_uint(body, "request_ns", &f->request_ns) == -EINVAL ||
        f->latency_target_ns > JOBS_MAX_CLASS_NS || f->request_ns > JOBS_MAX_CLASS_NS ||
        f->persistent_bytes > JOBS_MAX_HINT_BYTES || f->ephemeral_bytes > JOBS_MAX_HINT_BYTES)
        return -EINVAL;
    if (proto_get(body, "pin_gpu")) { /* SALUS_GPU: a container given salus.dev/gpu=N */
        if (proto_get_uint(body, "pin_gpu", &f->pinned_gpu) < 0)
            return -EINVAL;
        f->gpu_pinned = 1;
    }
    if (!jobs_name_valid(f->name))
        return -EILSEQ;
    return 0;
}

int jobs_reply_bad_gpus(conn_t *c, uint64_t request_id, const char *verb,
                        const jobs_fields_t *f)
{
    int count = c->daemon->devices.count;
    if (f->gpu_pinned && (f->pinned_gpu >= (uint64_t)count || f->gpus > 1)) {
        server_reply_error(c, request_id, PROTO_EBADARG, 0,
                           f->gpus > 1 ? "%s: the job asks for GPU %llu (SALUS_GPU) and for "
                                         "%llu GPUs (--gpus): one or the other"
                                       : "%s: the job asks for GPU %llu (SALUS_GPU); this node "
                                         "has %llu",
                           verb, (unsigned long long)f->pinned_gpu,
                           f->gpus > 1 ? (unsigned long long)f->gpus : (unsigned long long)count);
        return 1;
    }
    if (f->gpus <= 1 || f->gpus <= (uint64_t)count)
        return 0;
    server_reply_error(c, request_id, PROTO_EBADARG, 0,
                       "%s: the job asks for %llu GPUs (--gpus); this node has %d", verb,
                       (unsigned long long)f->gpus, count);
    return 1;
}

/* A job on several GPUs: the ids after its own are its members' (job_gpus.h), never another
 * job's. 0 or a negative errno. */
static int reserve_gpus(salusd_t *d, job_t *job, uint64_t gpus)
{
    if (gpus <= 1)
        return 0;
    int rc = job_gpus_add(gpu_sched_job_gpus(d), d->registry, job->id, (uint32_t)gpus);
    if (rc == 0) {
        registry_set_next_id(d->registry, job->id + gpus);
        LOG_INFO("job %llu runs on %llu GPUs (its members: ids %llu to %llu)",
                 (unsigned long long)job->id, (unsigned long long)gpus,
                 (unsigned long long)job->id, (unsigned long long)(job->id + gpus - 1));
    }
    return rc;
}

void jobs_reply_bad_name(conn_t *c, uint64_t request_id, const char *verb)
{
    server_reply_error(c, request_id, PROTO_EBADARG, 0,
                       "%s: the job name must be printable text (no control characters) of "
                       "at most %d bytes",
                       verb, REGISTRY_NAME_BYTES - 1);
}

/* what register and submit said about the job */
static void apply_fields(job_t *job, const jobs_fields_t *f)
{
    job->iterations_expected = f->iterations;
    job->persistent_hint_bytes = f->persistent_bytes;
    job->ephemeral_hint_bytes = f->ephemeral_bytes;
    job->priority = f->priority;
    job->latency_target_ns = f->latency_target_ns;
    job->request_ns = f->request_ns;
    job->gpu_pinned = f->gpu_pinned;
    job->pinned_gpu = f->gpu_pinned ? (int)f->pinned_gpu : -1;
}

/* A job root reserved for its program keeps the reservation's hints and pin: the register's
 * fields (from the program's environment, which its user controls) do not widen them. */
static void job_fields_keep_reserved(const job_runtime_t *rt, const job_t *job,
                                     jobs_fields_t *fields)
{
    if (!rt || !rt->fields_fixed)
        return;
    fields->persistent_bytes = job->persistent_hint_bytes;
    fields->ephemeral_bytes = job->ephemeral_hint_bytes;
    fields->gpu_pinned = job->gpu_pinned;
    fields->pinned_gpu = job->gpu_pinned ? (uint64_t)job->pinned_gpu : 0;
}

uint64_t jobs_conn_job_id(const conn_t *c)
{
    const job_runtime_t *rt = server_conn_slot(c, CONN_SLOT_JOB);
    return rt ? rt->job_id : 0;
}

job_t *jobs_of_conn(conn_t *c)
{
    uint64_t id = jobs_conn_job_id(c);
    return id ? registry_find(c->daemon->registry, id) : NULL;
}

void jobs_conn_bind(conn_t *c, job_runtime_t *rt)
{
    if (server_conn_slot_set(c, CONN_SLOT_JOB, rt) < 0)
        LOG_ERROR("job %llu: no close observer for the jobs' connection slot: its connection "
                  "is not watched", (unsigned long long)(rt ? rt->job_id : 0));
}

uint64_t jobs_iterations(const job_t *job)
{
    const job_runtime_t *rt = runtime_of(job);
    return rt && rt->page ? atomic_load(&rt->page->iterations) : job->stats.iterations;
}

static void refresh_stats(job_t *job)
{
    const job_runtime_t *rt = runtime_of(job);
    const job_page_t *page = rt ? rt->page : NULL;
    if (!page)
        return;
    job->stats.iterations = atomic_load(&page->iterations);
    job->stats.persistent_bytes = atomic_load(&page->persistent_bytes);
    job->stats.ephemeral_peak_bytes = atomic_load(&page->ephemeral_peak_bytes);
    job->stats.live_bytes = atomic_load(&page->live_bytes);
    job->stats.busy_ns = atomic_load(&page->busy_ns);
    job->stats.wait_ns = atomic_load(&page->wait_ns);
    if (job->latency_target_ns) { /* a latency-critical job's requests (latency_hist.h) */
        job->stats.requests = atomic_load(&page->requests);
        job->stats.requests_over_target = atomic_load(&page->requests_over_target);
        job->stats.request_p50_ns = latency_hist_percentile_ns(page->request_hist, 50.0);
        job->stats.request_p95_ns = latency_hist_percentile_ns(page->request_hist, 95.0);
        job->stats.request_p99_ns = latency_hist_percentile_ns(page->request_hist, 99.0);
    }
}

/* Returns the job's chunks and closes what the daemon held for it (events, pidfd, eventfd,
 * page); the job's runtime state is gone afterwards. */
void jobs_release_runtime(salusd_t *d, job_t *job)
{
    job_runtime_t *rt = runtime_of(job);
    if (rt->conn && server_conn_slot(rt->conn, CONN_SLOT_JOB) == rt)
        jobs_conn_bind(rt->conn, NULL);
    jobs_lane_memory_leave(d, job);
    for (size_t i = 0; i < rt->chunk_count; i++)
        devices_chunk_release(&d->devices, &rt->chunks[i]);
    if (rt->pid_event)
        event_free(rt->pid_event);
    if (rt->notify_event)
        event_free(rt->notify_event);
    if (rt->pidfd >= 0)
        close(rt->pidfd);
    if (rt->notify_fd >= 0)
        close(rt->notify_fd);
    if (rt->page)
        munmap(rt->page, JOB_PAGE_BYTES);
    free(rt->chunks);
    free(rt);
    job->runtime = NULL;
}

static void forget_old_finished(salusd_t *d)
{
    size_t finished = 0;
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_state_t s = registry_at(d->registry, i)->state;
        finished += JOB_STATE_IS_FINAL(s);
    }
    for (size_t i = 0; finished > (size_t)d->config.finished_jobs_kept &&
                       i < registry_count(d->registry);) {
        job_t *job = registry_at(d->registry, i);
        /* (one whose end is not settled yet stays: its waits and its group still need it) */
        if (JOB_STATE_IS_FINAL(job->state) && jobs_ask_job_settled(d, job)) {
            jobs_exit_probe_free(job);
            registry_remove(d->registry, job->id);
            finished--;
        } else {
            i++;
        }
    }
}

int jobs_placement(const salusd_t *d, const job_t *job, int *gpu, uint64_t *budget_bytes)
{
    gpu_sched_job_info_t sched_info;
    *gpu = job->end_gpu;
    *budget_bytes = job->end_budget_bytes;
    if (!job->runtime)
        return *gpu >= 0 ? 0 : -ENOENT;
    /* admitted by the core and carried out here (its page exists) */
    if (!runtime_of(job)->page || gpu_sched_job_info(d, job, &sched_info) < 0 ||
        !sched_info.admitted) {
        *gpu = -1;
        *budget_bytes = 0;
        return -ENOENT;
    }
    *gpu = sched_info.gpu;
    /* never below what the job already holds (chunk rounding): jobs_set_budget's floor */
    *budget_bytes = sched_info.budget_bytes > job->committed_bytes ? sched_info.budget_bytes
                                                             : job->committed_bytes;
    return 0;
}

const char *jobs_state(const salusd_t *d, const job_t *job)
{
    gpu_sched_job_info_t sched_info;
    /* admitted and live: it runs while it holds its lane in the core's books */
    if (job->runtime && job->state == JOB_PAUSED && gpu_sched_job_info(d, job, &sched_info) == 0 &&
        sched_info.admitted)
        return sched_info.holds_lane ? JOB_STATE_RUNNING_NAME : job_state_name(JOB_PAUSED);
    return job_state_name(job->state);
}

/* Returns everything the job holds; the job stays listed in its final state. */
static void finish_job(salusd_t *d, job_t *job, job_state_t final_state)
{
    job_runtime_t *rt = runtime_of(job);
    if (!rt)
        return;
    refresh_stats(job);
    /* the record of where it ran, before the core forgets it (jobs_core_left below) */
    jobs_placement(d, job, &job->end_gpu, &job->end_budget_bytes);
    gpu_sched_job_info_t last;
    if (gpu_sched_job_info(d, job, &last) == 0) {
        if (last.admitted)
            job->end_lane = (int)last.lane;
        job->end_gang_wait_ns = last.gang_wait_ns;
    }
    if (rt->conn)
        jobs_conn_bind(rt->conn, NULL);
    jobs_gate_job_ended(d, job); /* a latency-critical job that ended in a request */
    jobs_release_runtime(d, job);
    job->owner = NULL;
    job->committed_bytes = 0;
    /* ended: the exit status reported before it (salusctl's job_exit), when there was one */
    job->state = final_state == JOB_ENDED ? jobs_exit_state(job) : final_state;
    registry_count_end(d->registry, JOB_STATE_COUNT, job->state);
    job->finished_ns = salusd_now_ns();
    LOG_INFO("job %llu '%s' %s; its memory is returned", (unsigned long long)job->id, job->name,
             job_state_name(job->state));
    /* job may be forgotten from here on (also by jobs that job_finished ends, a group's
     * other ranks): only its id is used */
    uint64_t id = job->id;
    jobs_raise_job_finished(d, job);
    jobs_retry_pending_grows(d);
    /* last: its memory is back, so the jobs admitted now find it free, and they are
     * admitted after it finished */
    /* a survivor of a restart that ended while re-attaching: no need to wait for it */
    jobs_core_left(d, id);
    forget_old_finished(d);
    jobs_survivor_settled(d, id, 0);
    jobs_state_save(d);
}

/* The registered process ended: the job is over at once. Its exit status: salusctl's report
 * when it came first, else the kernel's (pidfd, Linux >= 6.15), now or once the process is
 * reaped (exit probe); else "ended", status unknown. */
void jobs_on_process_exit(evutil_socket_t fd, short events, void *arg)
{
    job_runtime_t *rt = arg;
    salusd_t *d = rt->daemon;
    int st = 0;
    (void)fd;
    (void)events;
    job_t *job = registry_find(d->registry, rt->job_id);
    if (!job)
        return;
    int rc = job->exit_known ? -1 : jobs_pidfd_exit_status(rt->pidfd, &st);
    if (rc == 1)
        jobs_set_exit(d, job, WIFEXITED(st), WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    else if (rc == 0) /* before finish_job: its waits wait for the probe */
        jobs_exit_probe_start(d, job, rt->pidfd);
    finish_job(d, job, JOB_ENDED);
}

void jobs_on_notify(evutil_socket_t fd, short events, void *arg)
{
    job_runtime_t *rt = arg;
    uint64_t count;
    (void)events;
    while (read(fd, &count, sizeof(count)) == sizeof(count))
        ;
    job_t *job = registry_find(rt->daemon->registry, rt->job_id);
    if (job)
        jobs_core_parked(rt->daemon, job);
}

static int create_page(job_runtime_t *rt, int *page_fd)
{
    int fd = memfd_create("salus-job-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    /* sealed at its size: a mapping of it can never fault (a re-attach checks the seals) */
    struct stat st;
    if (ftruncate(fd, JOB_PAGE_BYTES) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
        fstat(fd, &st) < 0) {
        close(fd);
        return -errno;
    }
    rt->page_dev = (uint64_t)st.st_dev;
    rt->page_ino = (uint64_t)st.st_ino;
    void *p = mmap(NULL, JOB_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -errno;
    }
    rt->page = p;
    rt->page->magic = JOB_PAGE_MAGIC;
    rt->page->version = JOB_PAGE_VERSION;
    atomic_store(&rt->page->features, JOB_PAGE_FEATURE_WAKE_SEQ); /* job_effects.c */
    *page_fd = fd;
    return 0;
}

int jobs_waiting_admission(const job_t *job)
{
    const job_runtime_t *rt = runtime_of(job);
    return job->state == JOB_WAITING && rt && rt->reply_pending && rt->conn;
}

/* Admits job on gpu: creates its page and notification fd and answers its register. */
/* The budget a job's page shows: the core's, or for a job on a claim the GPU's memory. */
static uint64_t page_budget(const salusd_t *d, const job_t *job, uint64_t budget_bytes)
{
    gpu_sched_job_info_t sched_info;
    if (gpu_sched_job_info(d, job, &sched_info) == 0 && sched_info.admitted &&
        sched_info.provisional && sched_info.gpu >= 0 && sched_info.gpu < d->devices.count &&
        d->devices.gpus[sched_info.gpu].total_bytes > budget_bytes)
        return d->devices.gpus[sched_info.gpu].total_bytes;
    return budget_bytes;
}

int jobs_admit(salusd_t *d, job_t *job, int gpu, uint64_t budget_bytes, uint32_t lane)
{
    job_runtime_t *rt = runtime_of(job);
    int page_fd = -1, rc;
    rc = create_page(rt, &page_fd);
    if (rc < 0)
        return rc;
    rt->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (rt->notify_fd < 0) {
        close(page_fd);
        return -errno;
    }
    rt->notify_event = event_new(d->base, rt->notify_fd, EV_READ | EV_PERSIST, jobs_on_notify, rt);
    if (!rt->notify_event || event_add(rt->notify_event, NULL) < 0) {
        close(page_fd);
        return -ENOMEM;
    }
    job->admitted_ns = salusd_now_ns();
    job->state = JOB_PAUSED; /* admitted; whether it runs is the core's (jobs_state) */
    uint64_t shown = page_budget(d, job, budget_bytes); /* (a claim: the GPU's memory) */
    atomic_store(&rt->page->budget_bytes, shown);

    proto_enc_t *e = &d->enc;
    char shm_name[256];
    jobs_simgpu_shm_name(d, shm_name, sizeof(shm_name));
    proto_enc_begin(e, PROTO_REPLY, rt->register_request_id, "", shm_name[0] ? 10 : 9);
    proto_pack_kv_uint(&e->pk, "job_id", job->id);
    proto_pack_kv_uint(&e->pk, "gpu", (uint64_t)gpu);
    /* every GPU of the job, in member order (the first is gpu): what it may see */
    job_gpus_info_t multi;
    int is_multi = job_gpus_info(gpu_sched_job_gpus(d), job->id, &multi) == 0;
    proto_pack_str(&e->pk, "gpus");
    msgpack_pack_array(&e->pk, is_multi ? multi.gpus : 1);
    for (uint32_t k = 0; k < (is_multi ? multi.gpus : 1); k++)
        msgpack_pack_uint64(&e->pk, (uint64_t)(is_multi ? multi.gpu[k] : gpu));
    proto_pack_kv_uint(&e->pk, "budget_bytes", shown);
    /* address space for the largest budget the job may get: the whole GPU */
    proto_pack_kv_uint(&e->pk, "va_bytes", d->devices.gpus[gpu].total_bytes);
    proto_pack_kv_uint(&e->pk, "chunk_bytes", d->config.chunk_bytes);
    /* how long it may wait for a restarted salusd to re-attach to (job_reattach.c) */
    proto_pack_kv_uint(&e->pk, "reattach_grace_ms", (uint64_t)d->config.reattach_grace_s * 1000);
    /* which kind of driver, not a path: the shim finds and loads the driver itself */
    proto_pack_kv_bool(&e->pk, "simulated", d->devices.simulated);
    if (shm_name[0]) /* the job's simgpu joins salusd's simulated devices */
        proto_pack_kv_str(&e->pk, "simgpu_shm", shm_name);
    proto_pack_kv_uint(&e->pk, "fds", 2);
    proto_enc_finish(e);
    int fds[2] = {page_fd, rt->notify_fd};
    /* on file before the job hears of it: a restart from now on finds it */
    jobs_state_save(d);
    rc = server_send_fds(rt->conn, e, fds, 2);
    close(page_fd);
    rt->reply_pending = 0;
    LOG_INFO("job %llu '%s' admitted on GPU %d, lane %u (budget %llu MiB)",
             (unsigned long long)job->id, job->name, gpu, lane,
             (unsigned long long)(budget_bytes >> 20));
    return rc;
}

void jobs_set_budget(salusd_t *d, job_t *job, uint64_t budget_bytes)
{
    job_runtime_t *rt = runtime_of(job);
    if (!rt || !rt->page) /* not admitted: the budget comes with the admission */
        return;
    budget_bytes = page_budget(d, job, budget_bytes);
    /* never below what the job already holds (chunk rounding, or a page that lies); a parked
     * job that keeps chunks it does not use is asked for them, and its budget comes down as
     * they come back (job_memory.c) */
    if (budget_bytes < job->committed_bytes) {
        budget_bytes = job->committed_bytes;
        jobs_request_trim(job);
    }
    atomic_store(&rt->page->budget_bytes, budget_bytes);
}

void jobs_fail(salusd_t *d, job_t *job, const char *reason)
{
    job_runtime_t *rt = runtime_of(job);
    if (reason && rt && rt->conn && rt->reply_pending)
        server_reply_error(rt->conn, rt->register_request_id, PROTO_ENEVER_FITS, 0, "%s", reason);
    if (rt)
        rt->reply_pending = 0;
    if (reason)
        LOG_WARN("job %llu '%s' refused: %s", (unsigned long long)job->id, job->name, reason);
    finish_job(d, job, JOB_FAILED);
}

void jobs_handle_register(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    jobs_fields_t fields;
    uint64_t reserved_id = 0;
    int frc = jobs_fields_parse(&msg->body, &fields);
    const char *name = fields.name;
    if (frc == -EINVAL || proto_get_uint(&msg->body, "job_id", &reserved_id) == -EINVAL) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "register takes name (string of at most %d bytes), iterations, "
                           "persistent_bytes, ephemeral_bytes, job_id, gpus (unsigned) and "
                           "priority (integer)",
                           REGISTRY_NAME_BYTES - 1);
        return;
    }
    if (frc < 0) {
        jobs_reply_bad_name(c, msg->id, "register");
        return;
    }
    if (jobs_reply_bad_gpus(c, msg->id, "register", &fields))
        return;
    if (jobs_conn_job_id(c)) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0,
                           "this connection is already registered as job %llu",
                           (unsigned long long)jobs_conn_job_id(c));
        return;
    }
    if (d->devices.count == 0) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "salusd has no GPU");
        return;
    }
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        const job_t *other = registry_at(d->registry, i);
        /* a reservation made for this very process (reserve_for) is the one it takes */
        if (other->runtime && other->pid == c->pid &&
            !(other->id == reserved_id && jobs_is_reserved(other))) {
            server_reply_error(c, msg->id, PROTO_ESTATE, 0,
                               "process %d is already job %llu", (int)c->pid,
                               (unsigned long long)other->id);
            return;
        }
    }
    /* the connection's process, not whatever has its pid by the time a signal is sent */
    int pidfd = server_dup_pidfd(c);
    if (pidfd < 0) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "cannot watch the registering "
                           "process (pid %d): %s", (int)c->pid,
                           pidfd == -ESRCH ? "it has exited" : strerror(-pidfd));
        return;
    }
    job_t *job = NULL;
    job_runtime_t *rt = NULL;
    if (reserved_id) { /* salusctl submit reserved the job: attach this process to it */
        job = registry_find(d->registry, reserved_id);
        if (!job) {
            close(pidfd);
            server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0, "no job %llu (SALUS_JOB_ID)",
                               (unsigned long long)reserved_id);
            return;
        }
        if (job->uid != c->uid) {
            close(pidfd);
            server_reply_error(c, msg->id, PROTO_EPERM, 0,
                               "permission_denied: job %llu belongs to another user",
                               (unsigned long long)reserved_id);
            return;
        }
        rt = runtime_of(job);
        if (!rt) {
            close(pidfd);
            server_reply_error(c, msg->id, PROTO_ESTATE, 0, "job %llu has already ended",
                               (unsigned long long)reserved_id);
            return;
        }
        char why[256];
        if (groups_refuses(d, job, why, sizeof(why))) {
            close(pidfd);
            server_reply_error(c, msg->id, PROTO_ESTATE, 0, "%s", why);
            return;
        }
        if (!rt->reserved) { /* a second process of the job: it becomes a job of its own */
            LOG_INFO("job %llu is already registered; pid %d registers as a new job",
                     (unsigned long long)reserved_id, (int)c->pid);
            job = NULL;
            rt = NULL;
        } else {
            rt->reserved = 0;
            job->pid = c->pid;
            job->owner = c;
            access_note_job(c, job);
            if (name[0])
                snprintf(job->name, sizeof(job->name), "%s", name);
        }
    }
    job_fields_keep_reserved(rt, job, &fields);
    if (!job) {
        rt = calloc(1, sizeof(*rt));
        job = rt ? registry_add(d->registry, name, c->pid, c->uid, c->gid, salusd_now_ns(), c)
                 : NULL;
        if (!job) {
            free(rt);
            close(pidfd);
            server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
            return;
        }
        rt->daemon = d;
        rt->job_id = job->id;
        rt->notify_fd = -1;
        access_note_job(c, job);
        if (reserve_gpus(d, job, fields.gpus) < 0) {
            registry_remove(d->registry, job->id);
            free(rt);
            close(pidfd);
            server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
            return;
        }
        jobs_state_dirty(d); /* the counter moved */
    }
    rt->conn = c;
    rt->register_request_id = msg->id;
    rt->reply_pending = 1;
    rt->pidfd = pidfd;
    job->runtime = rt;
    apply_fields(job, &fields);
    jobs_conn_bind(c, rt);
    if (rt->pidfd >= 0) {
        rt->pid_event = event_new(d->base, rt->pidfd, EV_READ, jobs_on_process_exit, rt);
        if (rt->pid_event)
            event_add(rt->pid_event, NULL);
    } else {
        LOG_WARN("pidfd_open(%d) failed: job %llu is cleaned up when its connection closes",
                 (int)c->pid, (unsigned long long)job->id);
    }
    LOG_INFO("job %llu '%s' registered (pid %d, uid %u)", (unsigned long long)job->id,
             job->name, (int)job->pid, (unsigned)job->uid);
    jobs_core_registered(d, job);
}

static void on_conn_close(conn_t *c, void *state)
{
    salusd_t *d = c->daemon;
    job_t *job = registry_find(d->registry, ((job_runtime_t *)state)->job_id);
    job_runtime_t *rt = runtime_of(job);
    if (!rt)
        return;
    rt->conn = NULL;
    /* a re-attach cut short (its connection closed before reattach_done): undone, so that the
     * survivor, still waited for, may re-attach on a new connection; its chunks stay its own */
    if (rt->reattaching) {
        uint64_t id = job->id;
        LOG_INFO("job %llu (pid %d): its connection closed during its re-attach; it may try "
                 "again", (unsigned long long)id, (int)job->pid);
        jobs_release_runtime(d, job);
        registry_remove(d->registry, id);
        return;
    }
    /* not yet admitted, or no pidfd to wait on: the job is over now */
    if (rt->reply_pending || rt->pidfd < 0)
        finish_job(d, job, rt->reply_pending ? JOB_FAILED : JOB_ENDED);
}

void jobs_sample(const salusd_t *d, jobs_sample_t *sample)
{
    memset(sample, 0, sizeof(*sample));
    sample->count = registry_count(d->registry);
    for (int st = JOB_DONE; st < JOB_STATE_COUNT; st++)
        sample->ended[st] = registry_ended(d->registry, (job_state_t)st);
}

const conn_slot_ops_t jobs_conn_ops = {.on_close = on_conn_close};

int jobs_info_at(salusd_t *d, size_t index, jobs_info_t *info)
{
    if (index >= registry_count(d->registry))
        return -ENOENT;
    job_t *job = registry_at(d->registry, index);
    uint64_t now = salusd_now_ns();
    gpu_sched_job_info_t sched_info;
    refresh_stats(job);
    memset(info, 0, sizeof(*info));
    info->id = job->id;
    memcpy(info->name, job->name, sizeof(info->name));
    info->pid = job->pid;
    info->uid = job->uid;
    jobs_placement(d, job, &info->gpu, &info->budget_bytes);
    info->lane = job->runtime ? -1 : job->end_lane;
    info->state = jobs_state(d, job);
    info->registered_ns = job->registered_ns;
    info->admitted_ns = job->admitted_ns;
    info->finished_ns = job->finished_ns;
    uint64_t end = job->finished_ns ? job->finished_ns : now;
    uint64_t admission_wait = (job->admitted_ns ? job->admitted_ns : end) - job->registered_ns;
    if (job->runtime && gpu_sched_job_info(d, job, &sched_info) == 0) {
        if (sched_info.admitted)
            info->lane = sched_info.lane;
        info->provisional = sched_info.admitted && sched_info.provisional;
        if (sched_info.waiting_since_ns && sched_info.waiting_since_ns <= now)
            info->wait_in_progress_ns = now - sched_info.waiting_since_ns;
        info->lane_holder = sched_info.lane_holder;
        info->gang_wait_ns = sched_info.gang_wait_ns;
        info->has_policy_rank = sched_info.has_rank;
        info->policy_rank = sched_info.rank;
        if (!sched_info.admitted)
            info->wait_reason = jobs_admission_held(d)
                                    ? "admissions are held until the jobs that survived a restart "
                                      "of salusd re-attach"
                                : sched_info.wait_reason[0] ? sched_info.wait_reason
                                                            : "its first admission round is to come";
    } else if (job->runtime && job->state == JOB_WAITING) {
        info->wait_reason = "its program has not registered with salusd yet";
    }
    if (!job->runtime)
        info->gang_wait_ns = job->end_gang_wait_ns;
    info->group_id = job->group_id;
    info->group_rank = job->group_rank;
    info->latency_target_ns = job->latency_target_ns;
    info->requests = job->stats.requests;
    info->requests_over_target = job->stats.requests_over_target;
    info->request_p50_ns = job->stats.request_p50_ns;
    info->request_p95_ns = job->stats.request_p95_ns;
    info->request_p99_ns = job->stats.request_p99_ns;
    info->iterations = job->stats.iterations;
    info->iterations_expected = job->iterations_expected;
    info->persistent_bytes = job->stats.persistent_bytes;
    info->sizes_learned = job->sizes_learned;
    info->learned_persistent_bytes = job->learned_persistent_bytes;
    info->learned_ephemeral_bytes = job->learned_ephemeral_bytes;
    info->ephemeral_peak_bytes = job->stats.ephemeral_peak_bytes;
    info->memory_bytes = job->committed_bytes + /* and on its other GPUs (--gpus) */
                         job_gpus_committed_total(gpu_sched_job_gpus(d), job->id);
    info->live_bytes = job->runtime ? job->stats.live_bytes : 0;
    info->busy_ns = job->stats.busy_ns;
    /* the shim adds a turn's wait when it ends: the one going on is added here */
    info->wait_ns = admission_wait + job->stats.wait_ns +
                    (job->admitted_ns ? info->wait_in_progress_ns : 0);
    return 0;
}

void jobs_shutdown(salusd_t *d)
{
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        jobs_exit_probe_free(job);
        if (runtime_of(job))
            jobs_release_runtime(d, job);
    }
    jobs_gate_shutdown();
}

job_t *jobs_reserve(conn_t *c, const jobs_fields_t *fields)
{
    return jobs_reserve_for(c, c->uid, c->gid, c->pid, fields, 0);
}

job_t *jobs_reserve_for(conn_t *c, uid_t uid, gid_t gid, pid_t pid, const jobs_fields_t *fields,
                        int fixed)
{
    salusd_t *d = c->daemon;
    job_runtime_t *rt = calloc(1, sizeof(*rt));
    const char *name = fields->name[0] ? fields->name : "job";
    job_t *job = rt ? registry_add(d->registry, name, pid, uid, gid, salusd_now_ns(), NULL)
                    : NULL;
    if (!job) {
        free(rt);
        return NULL;
    }
    rt->daemon = d;
    rt->job_id = job->id;
    rt->pidfd = -1;
    rt->notify_fd = -1;
    rt->reserved = 1;
    rt->fields_fixed = fixed;
    access_note_job(c, job);
    if (reserve_gpus(d, job, fields->gpus) < 0) {
        registry_remove(d->registry, job->id);
        free(rt);
        return NULL;
    }
    job->runtime = rt;
    apply_fields(job, fields);
    LOG_INFO("job %llu '%s' reserved (uid %u); waiting for its program to register",
             (unsigned long long)job->id, job->name, (unsigned)job->uid);
    jobs_state_save(d); /* the id is handed out now: the counter never goes back */
    return job;
}

int jobs_is_reserved(const job_t *job)
{
    const job_runtime_t *rt = runtime_of(job);
    return rt && rt->reserved;
}

void jobs_end_reserved(salusd_t *d, job_t *job, job_state_t final_state)
{
    if (jobs_is_reserved(job))
        finish_job(d, job, final_state);
}

int jobs_signal(const job_t *job, int sig)
{
    const job_runtime_t *rt = runtime_of(job);
    if (!rt || rt->reserved || rt->pidfd < 0)
        return -ESRCH;
    if (syscall(SYS_pidfd_send_signal, rt->pidfd, sig, NULL, 0) < 0)
        return -errno;
    return 0;
}

struct job_page_s *jobs_page(const job_t *job)
{
    const job_runtime_t *rt = runtime_of(job);
    return rt ? rt->page : NULL;
}
