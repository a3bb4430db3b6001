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
 *   reattach_lane {chunk_id, bytes} + [lane page, chunk]  (--lane-memory shared; the reattach
 *       reply's lane_sets says the daemon takes it) the lane's shared chunks the job has
 *       mapped: they must be the set its record names (else it is refused); they become its
 *       lane's set again (job_lane_memory.c); reply {taken} (0: its record names none, from
 *       a salusd that kept no lane sets: it keeps them mapped, outside the books)
 *   reattach_done {}                                 the job gets its place back in the
 *       scheduling core (its GPU, sizes, lane mates) and a reply {job_id, gpu, budget_bytes}
 *
 * Anything refused ends the job (failed; the shim fails closed with the reason) and leaves
 * every other job alone. Until every survivor is back, refused, or --reattach-grace-s has
 * passed, no new job is admitted; then the device's free memory as the driver reports it is
 * checked against the books, and a shortfall is logged and kept out of the lanes. */
#include "jobs-internal.h"

#include "access.h"
#include "gpu_sched.h"
#include "groups.h"
#include "jobs_observer.h"
#include "log.h"
#include "state.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    uint64_t id = job ? job->id : 0;
    server_reply_error(c, request_id, PROTO_EPERM, 1, fmt, why);
    LOG_WARN("re-attach of job %llu (pid %d, uid %u) refused: %s", (unsigned long long)id,
             (int)c->pid, (unsigned)c->uid, why);
    if (job) {
        jobs_conn_bind(c, NULL);
        runtime_of(job)->conn = NULL;
        jobs_fail(d, job, NULL);
        jobs_survivor_settled(d, id, 0);
    }
}

void jobs_handle_reattach(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    uint64_t id = 0, chunks = 0;
    int page_fd = -1, notify_fd = -1;
    const char *why = NULL;
    if (proto_get_uint(&msg->body, "job_id", &id) < 0 ||
        proto_get_uint(&msg->body, "chunks", &chunks) < 0 || server_frame_fds(c) != 2) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 1, "reattach takes job_id, chunks and "
                                                         "two descriptors (job page, eventfd)");
        return;
    }
    if (jobs_conn_job_id(c)) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 1, "this connection is job %llu already",
                           (unsigned long long)jobs_conn_job_id(c));
        return;
    }
    int pending = 0;
    const state_job_t *rec = jobs_survivor(d, id, &pending);
    if (!rec || !pending) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 1,
                           "job %llu is not a job that survived salusd's restart (or its grace "
                           "period of %lld s is over)", (unsigned long long)id,
                           d->config.reattach_grace_s);
        LOG_WARN("pid %d (uid %u) tried to re-attach as job %llu, which is not waiting to "
                 "re-attach", (int)c->pid, (unsigned)c->uid, (unsigned long long)id);
        return;
    }
    /* the kernel's word (SO_PEERCRED at accept), never the client's */
    if ((uint32_t)c->uid != rec->uid || (int32_t)c->pid != rec->pid) {
        server_reply_error(c, msg->id, PROTO_EPERM, 1,
                           "permission_denied: job %llu is not this process's", (unsigned long long)id);
        LOG_WARN("pid %d (uid %u) tried to re-attach as job %llu of pid %d (uid %u): refused",
                 (int)c->pid, (unsigned)c->uid, (unsigned long long)id, (int)rec->pid,
                 (unsigned)rec->uid);
        return;
    }
    char gpus_why[128] = "";
    for (uint32_t k = 1; rec->members && k < rec->gpus && !gpus_why[0]; k++)
        if (rec->members[k - 1].gpu >= d->devices.count)
            snprintf(gpus_why, sizeof(gpus_why), "its GPU %d (the job's device %u, --gpus) is "
                     "not one of this salusd's %d", (int)rec->members[k - 1].gpu, (unsigned)k,
                     d->devices.count);
    if (rec->gpu >= d->devices.count || chunks > rec->chunk_count || gpus_why[0]) {
        why = rec->gpu >= d->devices.count ? "its GPU is not one of this salusd's"
              : gpus_why[0]                ? gpus_why
                                           : "it re-presents more chunks than salusd handed it";
        server_reply_error(c, msg->id, PROTO_EPERM, 1, "re-attach refused: %s", why);
        LOG_WARN("re-attach of job %llu (pid %d, uid %u) refused: %s", (unsigned long long)id,
                 (int)c->pid, (unsigned)c->uid, why);
        jobs_survivor_settled(d, id, 0);
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
    access_note_job(c, job);
    rt->conn = c;
    rt->pidfd = pidfd;
    rt->notify_fd = -1;
    rt->reattaching = 1;
    rt->reattach_chunks = (uint32_t)chunks;
    job->runtime = rt;
    job->iterations_expected = rec->iterations_expected;
    job->priority = rec->priority;
    job->latency_target_ns = rec->latency_target_ns; /* its class, as it registered */
    job->request_ns = rec->request_ns;
    job->state = JOB_PAUSED;
    job->admitted_ns = salusd_now_ns();
    jobs_conn_bind(c, rt);
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
    if (rec->gpus > 1) { /* a job on several GPUs: its members again (ids id .. id + N - 1) */
        job_gpus_remove(gpu_sched_job_gpus(d), id); /* (left by a try cut short) */
        if (job_gpus_add(gpu_sched_job_gpus(d), d->registry, id, rec->gpus) < 0) {
            refuse(c, msg->id, job, "re-attach refused: %s",
                   "its GPUs (--gpus) cannot be recorded again");
            return;
        }
    }
    if (rec->group[0]) { /* a rank: back in its group (and, in a cluster, in its record) */
        groups_fields_t f = {.world = rec->group_world, .rank = rec->group_rank,
                             .local_rank = rec->group_local_rank,
                             .sync = (launch_sync_t)rec->group_sync,
                             .staleness = rec->group_staleness,
                             .share_gpus = (int)rec->group_share_gpus, .reattached = 1};
        char err[256] = "out of memory";
        snprintf(f.name, sizeof(f.name), "%s", rec->group);
        if (groups_check_join(d, job->uid, &f, err, sizeof(err)) < 0 ||
            groups_join(d, job, &f) < 0)
            LOG_WARN("job %llu re-attaches outside its group %s: %s", (unsigned long long)id,
                     rec->group, err);
    }
    proto_enc_t *e = &d->enc; /* lane_sets: it takes reattach_lane (a job's lane set) */
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 1);
    proto_pack_kv_uint(&e->pk, "lane_sets", 1);
    proto_enc_finish(e);
    server_send(c, e);
}

void jobs_handle_reattach_chunk(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
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
    int pending;
    const state_job_t *rec = jobs_survivor(d, job->id, &pending);
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
        uint64_t owner = fstat(fd, &st) == 0 ? jobs_survivor_chunk_owner(d, (uint64_t)st.st_dev,
                                                                         (uint64_t)st.st_ino)
                                              : 0;
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
    /* memory of the job's device-th GPU (--gpus: that member's; 0: its first) */
    int gpu = want->device == 0 || !rec->members ? rec->gpu : rec->members[want->device - 1].gpu;
    uint64_t *committed = want->device == 0 ? &job->committed_bytes
                          : job_gpus_committed(gpu_sched_job_gpus(d), job->id, want->device);
    int rc = committed ? devices_chunk_import(&d->devices, gpu, fd, id, bytes,
                                              &rt->chunks[rt->chunk_count])
                       : -EINVAL;
    close(fd);
    if (rc < 0) {
        snprintf(why, sizeof(why), "the driver does not take chunk %llu as %llu bytes of GPU %d",
                 (unsigned long long)id, (unsigned long long)bytes, gpu);
        refuse(c, msg->id, job, "re-attach refused: %s", why);
        return;
    }
    rt->chunk_count++;
    *committed += bytes;
    server_reply_done(c, msg->id);
}

static void reply_taken(conn_t *c, uint64_t request_id, int taken)
{
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, request_id, "", 1);
    proto_pack_kv_uint(&e->pk, "taken", (uint64_t)taken);
    proto_enc_finish(e);
    server_send(c, e);
}

void jobs_handle_reattach_lane(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    uint64_t id = 0, bytes = 0;
    const char *why = NULL;
    if (!rt || !rt->reattaching || proto_get_uint(&msg->body, "chunk_id", &id) < 0 ||
        proto_get_uint(&msg->body, "bytes", &bytes) < 0 || server_frame_fds(c) != 2) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "reattach_lane takes chunk_id, bytes "
                           "and two descriptors (lane page, chunk), after reattach");
        return;
    }
    int pending;
    const state_job_t *rec = jobs_survivor(d, job->id, &pending);
    int page_fd = server_take_fd(c);
    int chunk_fd = server_take_fd(c);
    if (rec && !rec->lane_set.bytes) {
        /* (mapped under a salusd that kept no lane sets): it keeps them, uncounted here */
        close(page_fd);
        close(chunk_fd);
        LOG_WARN("job %llu re-presents lane chunks that its record does not name; it keeps "
                 "them mapped, outside this salusd's books", (unsigned long long)job->id);
        reply_taken(c, msg->id, 0);
        return;
    }
    if (!rec || jobs_lane_memory_reattach(d, job, rec, id, bytes, page_fd, chunk_fd, &why) < 0) {
        close(page_fd);
        close(chunk_fd);
        refuse(c, msg->id, job, "re-attach refused: %s", why ? why : "it is not a survivor");
        return;
    }
    reply_taken(c, msg->id, 1);
}

/* The gate roles a re-attach settled (this job's, and those of the best-effort jobs of its
 * GPU when it is latency-critical): the rest of its effects concern the layout, which the
 * reply below carries. A job on several GPUs takes no gate role (job_gpus.h). */
static void apply_gate_roles(salusd_t *d, const sched_core_effects_t *fx)
{
    for (size_t i = 0; i < fx->count; i++) {
        sched_core_effect_t e;
        if (fx->items[i].kind != SCHED_CORE_GATE ||
            job_gpus_effect(gpu_sched_job_gpus(d), fx, i, &e) == JOB_GPUS_CONSUMED)
            continue;
        job_t *job = registry_find(d->registry, e.job_id);
        if (job && job->runtime)
            jobs_gate_role(d, job, e.gpu, e.gate);
    }
}

void jobs_handle_reattach_done(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    if (!rt || !rt->reattaching) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0, "reattach_done without reattach");
        return;
    }
    int pending;
    const state_job_t *rec = jobs_survivor(d, job->id, &pending);
    if (!rec || rt->chunk_count != rt->reattach_chunks) {
        refuse(c, msg->id, job, "re-attach refused: %s",
               "it re-presented fewer chunks than it announced");
        return;
    }
    /* on each of its GPUs (one; --gpus N: N members, member 0 the job's own record): the
     * sizes it had, and its lane mates there (a survivor back already that had that lane) */
    job_page_t *page = rt->page;
    sched_core_reattach_t where[STATE_MAX_GPUS];
    uint32_t gpus = rec->gpus > 1 && rec->members ? rec->gpus : 1;
    for (uint32_t k = 0; k < gpus; k++) {
        const state_member_t *m = k ? &rec->members[k - 1] : NULL;
        int gpu = m ? m->gpu : rec->gpu;
        where[k] = (sched_core_reattach_t){
            .gpu = gpu,
            .lane_of_job = jobs_survivor_lane_mate(d, gpu, m ? m->lane : rec->lane),
            .persistent_bytes = m ? m->persistent_bytes : rec->persistent_bytes,
            .ephemeral_bytes = m ? m->ephemeral_bytes : rec->ephemeral_bytes,
            .iterations = atomic_load(&page->iterations),
            .busy_ns = atomic_load(&page->busy_ns),
        };
    }
    sched_core_effects_t fx = {0};
    /* its role at the gate is the new core's (none until it says otherwise), not what the
     * page kept from the previous daemon */
    atomic_store(&page->gate_role, SCHED_CORE_GATE_NONE);
    int rc = gpu_sched_job_reattached(d, job, where, &fx);
    if (rc == 0)
        apply_gate_roles(d, &fx);
    sched_core_effects_free(&fx);
    if (rc < 0) {
        refuse(c, msg->id, job, "re-attach refused: %s",
               rc == -ENOSPC ? "its memory no longer fits beside the jobs back already"
                             : "the scheduling core did not take it");
        return;
    }
    rt->reattaching = 0;
    jobs_lane_memory_reattached(d, job); /* its lane set: the lane's again */
    rt->notify_event = event_new(d->base, rt->notify_fd, EV_READ | EV_PERSIST, jobs_on_notify, rt);
    if (rt->notify_event)
        event_add(rt->notify_event, NULL);
    int gpu;
    uint64_t budget;
    jobs_placement(d, job, &gpu, &budget);
    /* the new books: no free run until the core grants one, the budget it has now */
    atomic_store(&page->free_run, 0);
    jobs_set_budget(d, job, budget);
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 3);
    proto_pack_kv_uint(&e->pk, "job_id", job->id);
    proto_pack_kv_uint(&e->pk, "gpu", (uint64_t)gpu);
    proto_pack_kv_uint(&e->pk, "budget_bytes", budget);
    proto_enc_finish(e);
    server_send(c, e);
    char gpus_text[128];
    job_gpus_text(gpu_sched_job_gpus(d), job->id, gpu, gpus_text, sizeof(gpus_text));
    LOG_INFO("job %llu '%s' re-attached (pid %d): GPU %s, %zu chunk%s, %llu MiB, budget %llu "
             "MiB, %llu iterations so far", (unsigned long long)job->id, job->name,
             (int)job->pid, gpus_text, rt->chunk_count, rt->chunk_count == 1 ? "" : "s",
             (unsigned long long)((job->committed_bytes +
                                   job_gpus_committed_total(gpu_sched_job_gpus(d), job->id)) >> 20),
             (unsigned long long)(budget >> 20),
             (unsigned long long)atomic_load(&page->iterations));
    jobs_survivor_settled(d, job->id, 1);
    jobs_state_save(d);
    if (job->group_cluster) { /* registered and admitted here again: the record says so */
        jobs_raise_rank_registered(d, job);
        jobs_raise_rank_admitted(d, job);
    }
    /* parked at its boundary while salusd was away: it asks for its turn now */
    jobs_core_parked(d, job);
}
