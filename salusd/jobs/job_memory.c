/* Device memory for jobs: chunks handed out on request (mem_grow), given back (mem_release),
 * and requests that wait while the device is full but the job is within its budget (the
 * parked and released jobs of its GPU are asked for their unused chunks then). A job on a
 * claim (no hints, sizes not learned yet) that asks for more than its claim waits for it to
 * grow (sched_core_job_wants), as long as it takes: every GROW_WAIT_NS it is answered
 * {wait: 1} and asks again (libsalus-client/session.c). */
#include "jobs-internal.h"

#include "gpu_sched.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <unistd.h>

/* Where the job's device-th GPU is (0: its first; --gpus N: 0 .. N - 1), its budget there and
 * what it holds there (the job's committed_bytes on its first GPU). 0 or -ENOENT. */
static int device_place(salusd_t *d, job_t *job, uint32_t device, int *gpu, uint64_t *budget,
                        uint64_t **committed)
{
    if (device == 0) {
        *committed = &job->committed_bytes;
        return jobs_placement(d, job, gpu, budget);
    }
    *committed = job_gpus_committed(gpu_sched_job_gpus(d), job->id, device);
    if (!*committed || !jobs_page(job))
        return -ENOENT;
    return gpu_sched_job_member(d, job, device, gpu, budget);
}

/* Creates a chunk for the job and sends it. -ENOMEM: the device has no room now (the books
 * say the job may have it: memory that other jobs still hold comes back at their
 * boundaries); other negative values: the request was answered with an error. */
static int grant_chunk(salusd_t *d, job_t *job, job_runtime_t *rt, uint64_t request_id,
                       uint64_t bytes, uint32_t device)
{
    conn_t *c = rt->conn;
    if (rt->chunk_count == rt->chunk_capacity) {
        size_t cap = rt->chunk_capacity ? rt->chunk_capacity * 2 : 8;
        chunk_t *chunks = realloc(rt->chunks, cap * sizeof(*chunks));
        if (!chunks) {
            server_reply_error(c, request_id, PROTO_EINTERNAL, 0, "out of memory");
            return -EIO;
        }
        rt->chunks = chunks;
        rt->chunk_capacity = cap;
    }
    chunk_t *chunk = &rt->chunks[rt->chunk_count];
    int fd = -1, gpu;
    uint64_t budget, *committed;
    if (device_place(d, job, device, &gpu, &budget, &committed) < 0) {
        server_reply_error(c, request_id, PROTO_ESTATE, 0, "job %llu is not admitted",
                           (unsigned long long)job->id);
        return -EIO;
    }
    /* the one place memory is cleared between users: a job's chunks are its own, and with
     * lanes shared across users a new chunk may hold what another user's job left there */
    int rc = devices_chunk_create(&d->devices, gpu, bytes, d->config.share_lanes_across_users,
                                  chunk, &fd);
    if (rc == -ENOMEM)
        return -ENOMEM;
    if (rc < 0) {
        server_reply_error(c, request_id, PROTO_EINTERNAL, 0, "the GPU could not provide %llu MiB",
                           (unsigned long long)(bytes >> 20));
        return -EIO;
    }
    if (*committed > budget || chunk->bytes > budget - *committed) {
        /* granularity rounding went past the budget */
        devices_chunk_release(&d->devices, chunk);
        close(fd);
        server_reply_error(c, request_id, PROTO_ENOMEM, 0, "over the job's budget");
        return -EIO;
    }
    rt->chunk_count++;
    *committed += chunk->bytes;
    jobs_state_save(d); /* on file before the job has it */
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, request_id, "", 3);
    proto_pack_kv_uint(&e->pk, "chunk_id", chunk->id);
    proto_pack_kv_uint(&e->pk, "bytes", chunk->bytes);
    proto_pack_kv_uint(&e->pk, "fds", 1);
    proto_enc_finish(e);
    if (server_send_fds(c, e, &fd, 1) < 0)
        LOG_WARN("could not send chunk %llu to job %llu", (unsigned long long)chunk->id,
                 (unsigned long long)job->id);
    close(fd);
    return 0;
}

#define GROW_WAIT_NS (20ull * 1000000000ull)

/* parked and released jobs keep their chunks until memory is short (job_effects.c) */
static void request_trims_for(salusd_t *d, const job_t *job)
{
    int gpu;
    uint64_t budget;
    if (jobs_placement(d, job, &gpu, &budget) == 0)
        jobs_request_trims(d, gpu);
}

/* Retries the chunk requests that found the device full; answers those that waited too
 * long with out-of-memory. Runs after memory came back and from a timer. */
void jobs_retry_pending_grows(salusd_t *d)
{
    uint64_t now = salusd_now_ns();
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        job_t *job = registry_at(d->registry, i);
        job_runtime_t *rt = runtime_of(job);
        if (!rt || !rt->grow_pending || !rt->conn)
            continue;
        if (rt->grow_wants) { /* waits for its claim: within it now? */
            int gpu;
            uint64_t budget = 0, *committed = NULL;
            if (device_place(d, job, rt->grow_device, &gpu, &budget, &committed) < 0 ||
                *committed > budget || rt->grow_bytes > budget - *committed) {
                if (now - rt->grow_since_ns >= GROW_WAIT_NS) { /* it asks again */
                    proto_enc_t *e = &d->enc;
                    proto_enc_begin(e, PROTO_REPLY, rt->grow_request_id, "", 1);
                    proto_pack_kv_uint(&e->pk, "wait", 1);
                    proto_enc_finish(e);
                    server_send(rt->conn, e);
                    rt->grow_pending = rt->grow_wants = 0;
                }
                continue;
            }
            rt->grow_wants = 0;
            rt->grow_since_ns = now; /* (now a wait for the device, if it is full) */
        }
        int rc = grant_chunk(d, job, rt, rt->grow_request_id, rt->grow_bytes, rt->grow_device);
        if (rc == -ENOMEM && now - rt->grow_since_ns < GROW_WAIT_NS) {
            request_trims_for(d, job); /* jobs that parked since */
            continue;
        }
        if (rc == -ENOMEM)
            server_reply_error(rt->conn, rt->grow_request_id, PROTO_ENOMEM, 0,
                               "the GPU had no room for %llu MiB for %llu s",
                               (unsigned long long)(rt->grow_bytes >> 20),
                               (unsigned long long)(GROW_WAIT_NS / 1000000000ull));
        rt->grow_pending = 0;
    }
}

static void on_grow_timer(evutil_socket_t fd, short events, void *arg)
{
    (void)fd;
    (void)events;
    jobs_retry_pending_grows(arg);
}

static void start_grow_timer(salusd_t *d)
{
    if (!d->grow_timer) {
        struct timeval period = {.tv_sec = 0, .tv_usec = 200000};
        d->grow_timer = event_new(d->base, -1, EV_PERSIST, on_grow_timer, d);
        if (d->grow_timer)
            event_add(d->grow_timer, &period);
    }
}

/* For `bytes` more on its first GPU: 0 when the job's budget holds them (its claim may have
 * grown for them now), -EAGAIN when it is on a claim that must grow first (it waits),
 * -ENOSPC when it is over its budget for good (not on a claim, or more than its claim may
 * ever hold: the caller refuses it). */
static int over_claim(salusd_t *d, uint64_t job_id, uint64_t bytes, uint32_t device)
{
    job_t *job = registry_find(d->registry, job_id);
    int gpu;
    uint64_t budget = 0, none = 0, *committed = &none;
    gpu_sched_job_info_t sched_info;
    if (device_place(d, job, device, &gpu, &budget, &committed) == 0 && *committed <= budget &&
        bytes <= budget - *committed)
        return 0;
    if (device != 0 || gpu_sched_job_info(d, job, &sched_info) < 0 || !sched_info.provisional ||
        *committed + bytes < *committed)
        return -ENOSPC;
    int rc = jobs_core_wants(d, job, *committed + bytes, *committed);
    if (rc == 0 || rc == -EAGAIN)
        LOG_INFO("job %llu (sizes being learned) needs %llu MiB: %s", (unsigned long long)job->id,
                 (unsigned long long)((*committed + bytes) >> 20),
                 rc == 0 ? "its claim grew" : "it waits for memory on its GPU");
    return rc == 0 || rc == -EAGAIN ? rc : -ENOSPC;
}

/* Replies PROTO_ENOMEM and returns 1 when `bytes` more would take the job past its budget
 * (also when it already holds more than its budget: no unsigned wrap). */
static int refuse_over_budget(conn_t *c, const proto_msg_t *msg, job_t *job, uint64_t bytes,
                              uint32_t device)
{
    int gpu;
    uint64_t budget = 0, none = 0, *committed = &none; /* the core's books: the one source */
    if (device_place(c->daemon, job, device, &gpu, &budget, &committed) == 0 &&
        *committed <= budget && bytes <= budget - *committed)
        return 0;
    server_reply_error(c, msg->id, PROTO_ENOMEM, 0,
                       "over the job's budget: %llu of %llu MiB in use, %llu MiB more asked",
                       (unsigned long long)(*committed >> 20),
                       (unsigned long long)(budget >> 20),
                       (unsigned long long)(bytes >> 20));
    return 1;
}

void jobs_handle_mem_grow(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    uint64_t bytes = 0, device = 0;
    if (!rt || rt->reply_pending || rt->grow_pending) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0,
                           "mem_grow needs an admitted job with no request outstanding");
        return;
    }
    if (proto_get_uint(&msg->body, "bytes", &bytes) < 0 || bytes == 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "mem_grow takes bytes (> 0)");
        return;
    }
    /* device: the job's k-th GPU (--gpus N: 0 .. N - 1) */
    if (proto_get_uint(&msg->body, "device", &device) == -EINVAL ||
        device >= job_gpus_count(gpu_sched_job_gpus(d), job->id)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "mem_grow: device must be one of the job's %u GPUs (0 ..)",
                           (unsigned)job_gpus_count(gpu_sched_job_gpus(d), job->id));
        return;
    }
    uint64_t id = job->id;
    int wants = over_claim(d, id, bytes, (uint32_t)device);
    job = registry_find(d->registry, id); /* (the effects carried out may have moved it) */
    rt = runtime_of(job);
    if (!rt) /* (cannot happen: it asked on its connection, which is still open) */
        return;
    if (wants < 0 && wants != -EAGAIN && refuse_over_budget(c, msg, job, bytes, (uint32_t)device))
        return;
    if (wants == -EAGAIN) { /* on a claim that must grow first */
        rt->grow_pending = rt->grow_wants = 1;
        rt->grow_request_id = msg->id;
        rt->grow_bytes = bytes;
        rt->grow_device = (uint32_t)device;
        rt->grow_since_ns = salusd_now_ns();
        start_grow_timer(d);
        LOG_DEBUG("job %llu waits for its claim to grow by %llu MiB", (unsigned long long)job->id,
                  (unsigned long long)(bytes >> 20));
        return;
    }
    if (grant_chunk(d, job, rt, msg->id, bytes, (uint32_t)device) != -ENOMEM)
        return;
    /* within its budget but the device is full: other jobs still hold memory that the lane
     * layout already gave to this one; it comes back when they reach a boundary */
    rt->grow_pending = 1;
    rt->grow_request_id = msg->id;
    rt->grow_bytes = bytes;
    rt->grow_device = (uint32_t)device;
    rt->grow_since_ns = salusd_now_ns();
    request_trims_for(d, job);
    start_grow_timer(d);
    LOG_DEBUG("job %llu waits for %llu MiB of device memory", (unsigned long long)job->id,
              (unsigned long long)(bytes >> 20));
}

void jobs_handle_mem_release(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    uint64_t id = 0;
    if (!rt || proto_get_uint(&msg->body, "chunk_id", &id) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "mem_release takes the chunk_id of "
                                                         "one of the job's chunks");
        return;
    }
    for (size_t i = 0; i < rt->chunk_count; i++) {
        if (rt->chunks[i].id != id)
            continue;
        /* a chunk on another GPU of the job (--gpus) is that member's */
        uint32_t k = job_gpus_member_on(gpu_sched_job_gpus(d), job->id, rt->chunks[i].gpu);
        uint64_t *committed = k ? job_gpus_committed(gpu_sched_job_gpus(d), job->id, k)
                                : &job->committed_bytes;
        *committed -= rt->chunks[i].bytes;
        devices_chunk_release(&d->devices, &rt->chunks[i]);
        rt->chunks[i] = rt->chunks[--rt->chunk_count];
        int gpu;
        uint64_t budget;
        if (jobs_placement(d, job, &gpu, &budget) == 0)
            jobs_set_budget(d, job, budget); /* down to the books' again if held above them */
        jobs_state_dirty(d); /* a chunk on file that the job no longer has is harmless */
        server_reply_done(c, msg->id);
        jobs_retry_pending_grows(d);
        return;
    }
    server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0, "job %llu has no chunk %llu",
                       (unsigned long long)job->id, (unsigned long long)id);
}


/* Device memory a job took through the real driver (managed memory, arrays, virtual-memory
 * allocations the chunks cannot serve): charged to its budget like a chunk. {bytes,
 * release}: release = 0 charges (over the budget: PROTO_ENOMEM), 1 gives a charge back. */
void jobs_handle_mem_charge(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    job_runtime_t *rt = runtime_of(job);
    uint64_t bytes = 0, release = 0;
    if (!rt || proto_get_uint(&msg->body, "bytes", &bytes) < 0 || bytes == 0 ||
        proto_get_uint(&msg->body, "release", &release) < 0 || release > 1) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "mem_charge needs an admitted job, bytes (> 0) and release (0 or 1)");
        return;
    }
    if (release) {
        if (bytes > rt->charged_bytes) {
            server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                               "job %llu gives back %llu bytes but was charged %llu",
                               (unsigned long long)job->id, (unsigned long long)bytes,
                               (unsigned long long)rt->charged_bytes);
            return;
        }
        rt->charged_bytes -= bytes;
        job->committed_bytes -= bytes;
    } else {
        if (refuse_over_budget(c, msg, job, bytes, 0))
            return;
        rt->charged_bytes += bytes;
        job->committed_bytes += bytes;
    }
    if (release)
        jobs_state_dirty(d);
    else
        jobs_state_save(d); /* on file before the job uses it */
    server_reply_done(c, msg->id);
    if (release)
        jobs_retry_pending_grows(d);
}
