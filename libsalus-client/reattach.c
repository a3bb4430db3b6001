/* A job that survives a restart of salusd.
 *
 * When the daemon goes away (killed, crashed, restarted by systemd, upgraded), the job keeps
 * what it holds: its chunks stay mapped (the shim keeps a descriptor of each), its job page
 * and eventfd stay open. A watcher thread sees the connection hang up at once; from then on
 * the job takes no new turn: a job running freely stops at its next iteration boundary (the
 * watcher clears free_run in the page), a job waiting for its turn keeps waiting. On simgpu
 * the watcher also takes over the charge of the job's chunks (simgpu_vmm_adopt_fd): the dead
 * daemon's charge went with it, and on a GPU mapped memory stays in use whoever made it.
 *
 * The job re-attaches from its boundary (or from a memory request that found the daemon
 * gone): it connects again, says which job it is (the daemon checks its process against the
 * connection's peer credentials), re-presents its job page, eventfd and every chunk as
 * descriptors, and goes on with the turn the new daemon grants. If no daemon answers within
 * the grace period the daemon announced at admission (--reattach-grace-s, 30 s by default),
 * or the daemon refuses it, the job fails closed with one line saying why.
 *
 * Version rule: re-attach arrived with protocol 1.1 (hello "minor" 1); a daemon of the same
 * major version and a minor at least the shim's accepts it (docs/operating.md: restart and
 * upgrade). */
#include "shim-internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct kept_chunk_s {
    uint64_t id, bytes;
    int fd;
} kept_chunk_t;

static struct {
    pthread_mutex_t lock;        /* the chunk list; never held while waiting */
    kept_chunk_t *chunks;
    size_t count, capacity;
    _Atomic int lost;            /* the daemon went away; not re-attached yet */
    _Atomic uint64_t lost_since_ns;
    _Atomic int watched_fd;      /* the connection the watcher watches */
    _Atomic int stop;            /* the job failed closed: the watcher ends */
    int watching;
    kept_chunk_t lane;           /* the lane's shared chunk (fd -1: none) */
    int lane_page_fd;            /* and its lane page */
} re = {.lock = PTHREAD_MUTEX_INITIALIZER, .watched_fd = -1, .lane = {.fd = -1},
        .lane_page_fd = -1};

void shim_chunk_keep(uint64_t id, uint64_t bytes, int fd)
{
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        LOG_WARN("cannot keep chunk %llu's descriptor: the job will not survive a restart of "
                 "salusd", (unsigned long long)id);
        return;
    }
    pthread_mutex_lock(&re.lock);
    if (re.count == re.capacity) {
        size_t cap = re.capacity ? re.capacity * 2 : 16;
        kept_chunk_t *c = realloc(re.chunks, cap * sizeof(*c));
        if (!c) {
            pthread_mutex_unlock(&re.lock);
            close(copy);
            return;
        }
        re.chunks = c;
        re.capacity = cap;
    }
    re.chunks[re.count++] = (kept_chunk_t){.id = id, .bytes = bytes, .fd = copy};
    pthread_mutex_unlock(&re.lock);
}

void shim_chunk_forget(uint64_t id)
{
    pthread_mutex_lock(&re.lock);
    for (size_t i = 0; i < re.count; i++) {
        if (re.chunks[i].id == id) {
            close(re.chunks[i].fd);
            re.chunks[i] = re.chunks[--re.count];
            break;
        }
    }
    pthread_mutex_unlock(&re.lock);
}

void shim_lane_keep(uint64_t chunk_id, uint64_t bytes, int page_fd, int chunk_fd)
{
    int page = fcntl(page_fd, F_DUPFD_CLOEXEC, 0);
    int chunk = page >= 0 ? fcntl(chunk_fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (chunk < 0) {
        if (page >= 0)
            close(page);
        LOG_WARN("cannot keep the lane chunks' descriptors: a restarted salusd will not count "
                 "them");
        return;
    }
    shim_lane_forget();
    pthread_mutex_lock(&re.lock);
    re.lane = (kept_chunk_t){.id = chunk_id, .bytes = bytes, .fd = chunk};
    re.lane_page_fd = page;
    pthread_mutex_unlock(&re.lock);
}

void shim_lane_forget(void)
{
    pthread_mutex_lock(&re.lock);
    if (re.lane.fd >= 0) {
        close(re.lane.fd);
        close(re.lane_page_fd);
    }
    re.lane.fd = re.lane_page_fd = -1;
    pthread_mutex_unlock(&re.lock);
}

int shim_daemon_lost(void)
{
    return atomic_load(&re.lost);
}

/* simgpu only: the job's chunks are charged to it from now on (see the top comment). */
static void adopt_chunks(void)
{
    int (*adopt)(int) = shim.drv.handle ? (int (*)(int))shim_real_dlsym(shim.drv.handle,
                                                                          "simgpu_vmm_adopt_fd")
                                        : NULL;
    if (!adopt)
        return;
    pthread_mutex_lock(&re.lock);
    for (size_t i = 0; i < re.count; i++) {
        int rc = adopt(re.chunks[i].fd);
        if (rc < 0 && rc != -ENOENT)
            LOG_WARN("simgpu could not take chunk %llu's charge: %s",
                     (unsigned long long)re.chunks[i].id, strerror(-rc));
    }
    pthread_mutex_unlock(&re.lock);
}

static void *watch(void *arg)
{
    (void)arg;
    for (;;) {
        if (atomic_load(&re.stop))
            return NULL;
        int lost = atomic_load(&re.lost);
        int fd = atomic_load(&re.watched_fd); /* read after lost: see shim_reattach_locked */
        if (fd < 0 || lost) {
            struct timespec pause = {.tv_nsec = 100000000};
            nanosleep(&pause, NULL);
            continue;
        }
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        if (poll(&p, 1, 1000) <= 0 || !(p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)))
            continue;
        if (fd != atomic_load(&re.watched_fd) || p.revents & POLLNVAL)
            continue; /* re-attached meanwhile: watch the new connection */
        atomic_store(&re.lost_since_ns, shim_now_ns());
        atomic_store(&re.lost, 1);
        adopt_chunks();
        /* no new turn without a daemon: a free run ends at the next boundary */
        if (shim.page)
            atomic_store(&shim.page->free_run, 0);
        fprintf(stderr, "salus: job %llu lost salusd; it waits at its next iteration boundary "
                        "for salusd to come back (at most %llu s)\n",
                (unsigned long long)shim.job_id,
                (unsigned long long)(shim.reattach_grace_ms / 1000));
    }
    return NULL;
}

void shim_watch_start(void)
{
    pthread_t thread;
    pthread_attr_t attr;
    atomic_store(&re.watched_fd, shim.client.fd);
    if (re.watching)
        return;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the watcher must not take signals meant for the program's threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    re.watching = pthread_create(&thread, &attr, watch, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (!re.watching)
        LOG_WARN("no watcher thread: the loss of salusd is noticed at the next boundary only");
}

static void fail_closed(void)
{
    atomic_store(&re.stop, 1);
    atomic_store(&re.watched_fd, -1);
    salus_client_close(&shim.client);
    shim.init_error = CUDA_ERROR_SYSTEM_NOT_READY;
    shim.mode = SHIM_MODE_FAILED;
}

/* One request on the new connection; -EREMOTEIO (err filled) when the daemon refused. */
static int call(salus_client_t *c, const int *fds, int nfds, proto_msg_t *reply, char *err,
                size_t err_size)
{
    int rc = nfds ? salus_client_call_passing(c, fds, nfds, reply, err, err_size)
                  : salus_client_call(c, reply, err, err_size);
    if (rc == 0)
        proto_msg_free(reply);
    return rc;
}

/* The re-attach requests (salusd/job_reattach.c). */
static int reattach_on(salus_client_t *c, char *err, size_t err_size, uint64_t *budget)
{
    proto_msg_t reply;
    pthread_mutex_lock(&re.lock);
    size_t n = re.count;
    kept_chunk_t *chunks = n ? malloc(n * sizeof(*chunks)) : NULL;
    if (n && !chunks) {
        pthread_mutex_unlock(&re.lock);
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    if (n)
        memcpy(chunks, re.chunks, n * sizeof(*chunks));
    /* the lane's set: copies, sent after the job's own chunks */
    kept_chunk_t lane = re.lane;
    int lane_fds[2] = {-1, -1};
    if (re.lane.fd >= 0) {
        lane_fds[0] = fcntl(re.lane_page_fd, F_DUPFD_CLOEXEC, 0);
        lane_fds[1] = fcntl(re.lane.fd, F_DUPFD_CLOEXEC, 0);
    }
    pthread_mutex_unlock(&re.lock);
    msgpack_packer *pk = salus_client_begin(c, "reattach", 2);
    proto_pack_kv_uint(pk, "job_id", shim.job_id);
    proto_pack_kv_uint(pk, "chunks", n);
    int fds[2] = {shim.page_fd, shim.notify_fd};
    uint64_t lane_sets = 0; /* the daemon takes reattach_lane */
    int rc = salus_client_call_passing(c, fds, 2, &reply, err, err_size);
    if (rc == 0) {
        if (proto_get_uint(&reply.body, "lane_sets", &lane_sets) < 0)
            lane_sets = 0;
        proto_msg_free(&reply);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        pk = salus_client_begin(c, "reattach_chunk", 2);
        proto_pack_kv_uint(pk, "chunk_id", chunks[i].id);
        proto_pack_kv_uint(pk, "bytes", chunks[i].bytes);
        rc = call(c, &chunks[i].fd, 1, &reply, err, err_size);
    }
    free(chunks);
    if (rc == 0 && lane.fd >= 0 && lane_fds[0] >= 0 && lane_fds[1] >= 0 && lane_sets) {
        pk = salus_client_begin(c, "reattach_lane", 2);
        proto_pack_kv_uint(pk, "chunk_id", lane.id);
        proto_pack_kv_uint(pk, "bytes", lane.bytes);
        rc = salus_client_call_passing(c, lane_fds, 2, &reply, err, err_size);
        uint64_t taken = 0;
        if (rc == 0) {
            /* taken 0: a set its record does not name; it keeps them mapped, uncounted */
            if (proto_get_uint(&reply.body, "taken", &taken) == 0 && !taken)
                LOG_WARN("the restarted salusd does not count the lane's shared chunks");
            proto_msg_free(&reply);
        }
    }
    for (int i = 0; i < 2; i++)
        if (lane_fds[i] >= 0)
            close(lane_fds[i]);
    if (rc < 0)
        return rc;
    salus_client_begin(c, "reattach_done", 0);
    rc = salus_client_call(c, &reply, err, err_size);
    if (rc < 0)
        return rc;
    if (proto_get_uint(&reply.body, "budget_bytes", budget) < 0)
        *budget = 0;
    proto_msg_free(&reply);
    return 0;
}

int shim_reattach_locked(void)
{
    char err[256] = "";
    if (shim.mode != SHIM_MODE_MANAGED)
        return -1;
    if (!atomic_load(&re.lost)) {
        if (shim_session_alive())
            return 0; /* another thread re-attached already */
        /* the watcher has not seen it yet (or there is none) */
        atomic_store(&re.lost_since_ns, shim_now_ns());
        atomic_store(&re.lost, 1);
        adopt_chunks();
    }
    if (shim.page_fd < 0) {
        fprintf(stderr, "salus: job %llu lost salusd and cannot re-attach (its job page was not "
                        "kept); it fails closed\n", (unsigned long long)shim.job_id);
        fail_closed();
        return -1;
    }
    uint64_t deadline = atomic_load(&re.lost_since_ns) + shim.reattach_grace_ms * 1000000ull;
    for (;;) {
        salus_client_t next;
        uint64_t budget = 0;
        int rc = salus_client_open(&next, shim.socket_path, "libsalus-client", 2000, err,
                                   sizeof(err));
        if (rc == 0) {
            rc = reattach_on(&next, err, sizeof(err), &budget);
            if (rc == 0) {
                salus_client_close(&shim.client);
                shim.client = next;
                /* the new connection first: a watcher that sees lost cleared polls it, not
                 * the closed one's number, which the program may have reused meanwhile */
                atomic_store(&re.watched_fd, shim.client.fd);
                atomic_store(&re.lost, 0);
                shim_gate_preempt_reattached();
                LOG_INFO("job %llu re-attached to salusd (budget %llu MiB)",
                         (unsigned long long)shim.job_id, (unsigned long long)(budget >> 20));
                fprintf(stderr, "salus: job %llu re-attached to the restarted salusd\n",
                        (unsigned long long)shim.job_id);
                return 0;
            }
            salus_client_close(&next);
            if (rc == -EREMOTEIO || rc == -ENOMEM) {
                fprintf(stderr, "salus: salusd refused job %llu's re-attach (%s); the job fails "
                                "closed\n", (unsigned long long)shim.job_id, err);
                fail_closed();
                return -1;
            }
        } else if (rc == -EPROTO) {
            fprintf(stderr, "salus: the restarted salusd does not speak this shim's protocol "
                            "(%s); job %llu fails closed\n", err, (unsigned long long)shim.job_id);
            fail_closed();
            return -1;
        }
        if (shim_now_ns() >= deadline) {
            fprintf(stderr, "salus: salusd did not come back within %llu s; job %llu fails "
                            "closed\n", (unsigned long long)(shim.reattach_grace_ms / 1000),
                    (unsigned long long)shim.job_id);
            fail_closed();
            return -1;
        }
        struct timespec pause = {.tv_nsec = 100000000};
        nanosleep(&pause, NULL);
    }
}

int shim_session_recover(void)
{
    pthread_mutex_lock(&shim.client_lock);
    int rc = shim_reattach_locked();
    pthread_mutex_unlock(&shim.client_lock);
    return rc;
}
