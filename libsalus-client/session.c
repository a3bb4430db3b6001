/* The shim's session with salusd: connect, register, wait for admission, load the real
 * driver. The shim finds the driver itself ($SALUS_REAL_DRIVER, the system's, or simgpu next
 * to the shim when salusd says it is simulated): it never loads a path that came over the
 * socket. Runs once, on cuInit or on the first driver call. */
#include "shim-internal.h"

#include "paths.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

shim_state_t shim = {.mode = SHIM_MODE_FAILED,
                     .init_error = CUDA_ERROR_NOT_INITIALIZED,
                     .client_lock = PTHREAD_MUTEX_INITIALIZER,
                     .page_fd = -1,
                     .notify_fd = -1};
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

uint64_t shim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* glibc's dlsym, found without calling dlsym (which this library overrides) */
void *(*shim_real_dlsym_ptr)(void *, const char *);
void *shim_resolve_real_dlsym(void);

void *shim_resolve_real_dlsym(void)
{
    void *(*real)(void *, const char *) = __atomic_load_n(&shim_real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (!real) {
        real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real)
            real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&shim_real_dlsym_ptr, real, __ATOMIC_RELEASE);
    }
    return (void *)real;
}

/* For lookups through an explicit handle only: for those the caller does not matter. */
void *shim_real_dlsym(void *handle, const char *symbol)
{
    void *(*real)(void *, const char *) =
        (void *(*)(void *, const char *))shim_resolve_real_dlsym();
    return real ? real(handle, symbol) : NULL;
}

static uint64_t env_bytes(const char *name)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return 0;
    unsigned long long n = strtoull(v, &end, 10);
    switch (*end) {
    case 'k': case 'K': n <<= 10; break;
    case 'm': case 'M': n <<= 20; break;
    case 'g': case 'G': n <<= 30; break;
    default: break;
    }
    return n;
}

/* The first existing driver that is not this library (for SALUS_UNMANAGED=1). */
static int find_system_driver(char *out, size_t size)
{
    static const char *const candidates[] = {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"};
    Dl_info self;
    struct stat own = {0}, st;
    if (dladdr((void *)&shim_init, &self) && self.dli_fname)
        stat(self.dli_fname, &own);
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        if (stat(candidates[i], &st) == 0 && !(st.st_dev == own.st_dev && st.st_ino == own.st_ino)) {
            snprintf(out, size, "%s", candidates[i]);
            return 0;
        }
    }
    return -ENOENT;
}

/* simgpu installed with this shim: <shim dir>/simgpu/ (installed) or <shim dir>/../simgpu/
 * (build tree). */
static int find_simgpu(char *out, size_t size)
{
    static const char *const relative[] = {"simgpu/libcuda.so.1", "../simgpu/libcuda.so.1"};
    Dl_info self;
    if (!dladdr((void *)&shim_init, &self) || !self.dli_fname)
        return -ENOENT;
    const char *slash = strrchr(self.dli_fname, '/');
    if (!slash)
        return -ENOENT;
    for (size_t i = 0; i < sizeof(relative) / sizeof(relative[0]); i++) {
        char candidate[4096], resolved[4096];
        snprintf(candidate, sizeof(candidate), "%.*s/%s", (int)(slash - self.dli_fname),
                 self.dli_fname, relative[i]);
        if (realpath(candidate, resolved) && access(resolved, R_OK) == 0) {
            snprintf(out, size, "%s", resolved);
            return 0;
        }
    }
    return -ENOENT;
}

/* The driver a managed job loads: $SALUS_REAL_DRIVER; else simgpu next to the shim when
 * salusd runs on simgpu; else the system's driver (simgpu when there is none). */
static int find_driver(int simulated, char *out, size_t size)
{
    const char *override = getenv("SALUS_REAL_DRIVER");
    if (override && *override) {
        snprintf(out, size, "%s", override);
        return 0;
    }
    if (simulated)
        return find_simgpu(out, size);
    if (find_system_driver(out, size) == 0)
        return 0;
    return find_simgpu(out, size);
}

static int resolve_real(void)
{
#define SHIM_RESOLVE(symbol, base, version, ptds)                                              \
    shim.real.symbol = (__typeof__(symbol) *)shim_real_dlsym(shim.drv.handle, #symbol);        \
    if (!shim.real.symbol) {                                                                   \
        void *fn = NULL;                                                                       \
        CUdriverProcAddressQueryResult st;                                                     \
        if (shim.drv.get_proc_address(#base, &fn, version,                                     \
                                      ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM     \
                                           : CU_GET_PROC_ADDRESS_DEFAULT,                      \
                                      &st) == CUDA_SUCCESS)                                    \
            shim.real.symbol = (__typeof__(symbol) *)fn;                                       \
    }
    SHIM_MANAGED_CALLS(SHIM_RESOLVE)
#undef SHIM_RESOLVE
    shim.real.cuEventCreate = (__typeof__(cuEventCreate) *)driver_symbol(&shim.drv, "cuEventCreate");
    shim.real.cuEventRecord = (__typeof__(cuEventRecord) *)driver_symbol(&shim.drv, "cuEventRecord");
    shim.real.cuEventQuery = (__typeof__(cuEventQuery) *)driver_symbol(&shim.drv, "cuEventQuery");
    shim.real.cuEventDestroy = (__typeof__(cuEventDestroy_v2) *)driver_symbol(&shim.drv, "cuEventDestroy");
    shim.real.cuCtxGetDevice = (__typeof__(cuCtxGetDevice) *)driver_symbol(&shim.drv, "cuCtxGetDevice");
    /* the calls the shim itself depends on must exist; the rest may be absent in old drivers */
    if (!shim.real.cuInit || !shim.real.cuEventCreate || !shim.real.cuEventRecord ||
        !shim.real.cuEventQuery || !shim.real.cuEventDestroy || !shim.real.cuStreamSynchronize)
        return -ENOSYS;
    return 0;
}

static int load_driver(const char *path)
{
    char err[512];
    const char *override = getenv("SALUS_REAL_DRIVER");
    if (override && *override)
        path = override;
    shim_loading_driver = 1;
    int loaded = driver_load(&shim.drv, path, shim_real_dlsym, err, sizeof(err));
    shim_loading_driver = 0;
    if (loaded < 0) {
        LOG_ERROR("%s", err);
        return -ENOENT;
    }
    if (resolve_real() < 0) {
        LOG_ERROR("the driver %s lacks entry points the shim needs", path);
        return -ENOSYS;
    }
    LOG_DEBUG("real driver: %s", path);
    return 0;
}

static int map_page(int fd)
{
    void *p = mmap(NULL, JOB_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    job_page_t *page = p;
    if (page->magic != JOB_PAGE_MAGIC || page->version != JOB_PAGE_VERSION) {
        LOG_ERROR("salusd's job page has version %u, this shim speaks %u; upgrade both together",
                  page->version, JOB_PAGE_VERSION);
        munmap(p, JOB_PAGE_BYTES);
        return -EPROTO;
    }
    shim.page = page;
    return 0;
}

/* how long a job waiting for admission waits for a restarted salusd */
#define SHIM_REREGISTER_S 30

static int register_job(const char *socket_path)
{
    char err[256] = "", driver_path[4096];
    int simulated = 0;
    const char *name = getenv("SALUS_JOB_NAME");
    const char *priority = getenv("SALUS_PRIORITY");
    const char *iterations = getenv("SALUS_ITERATIONS");
    uint64_t gpus = env_bytes("SALUS_GPUS"); /* a plain count (no suffix expected) */
    /* the one GPU the job may run on (a container given salus.dev/gpu=N); empty: any */
    const char *pin_text = getenv("SALUS_GPU");
    unsigned long long pin = 0;
    int pinned = pin_text && *pin_text;
    if (pinned) {
        char *end;
        errno = 0;
        pin = strtoull(pin_text, &end, 10);
        if (*end || errno || pin_text[0] < '0' || pin_text[0] > '9' || pin > 1023) {
            fprintf(stderr, "salus: SALUS_GPU=%s is not a GPU index (0, 1, ...); the job does "
                            "not start\n", pin_text);
            return -EINVAL;
        }
    }
    proto_msg_t reply;
    int fds[2], nfds = 0, rc;

    rc = salus_client_open(&shim.client, socket_path, "libsalus-client", 5000, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "salus: cannot reach salusd at %s (%s); not running unmanaged "
                        "(SALUS_UNMANAGED=1 allows it)\n", socket_path, err);
        return rc;
    }
    if (!name || !*name)
        name = program_invocation_short_name;
    /* salusctl submit reserved the job: attach to it */
    const char *reserved = getenv("SALUS_JOB_ID");
    unsigned long long reserved_id = reserved && *reserved ? strtoull(reserved, NULL, 10) : 0;
    uint64_t lost_at_ns = 0; /* salusd went away while the job waited for admission */
    for (;;) {
        msgpack_packer *pk = salus_client_begin(&shim.client, "register",
                                                (reserved_id ? 6 : 5) + (gpus > 1) + pinned +
                                                    shim_class_fields());
        shim_class_pack(pk); /* latency-critical: its target (gate_preempt.c) */
        if (pinned)
            proto_pack_kv_uint(pk, "pin_gpu", pin);
        if (gpus > 1) /* a job that salusctl reserved keeps the GPUs it asked for there */
            proto_pack_kv_uint(pk, "gpus", gpus);
        if (reserved_id)
            proto_pack_kv_uint(pk, "job_id", reserved_id);
        proto_pack_kv_str(pk, "name", name);
        proto_pack_kv_uint(pk, "iterations", iterations ? strtoull(iterations, NULL, 10) : 0);
        proto_pack_kv_uint(pk, "persistent_bytes", env_bytes("SALUS_MEM_PERSISTENT"));
        proto_pack_kv_uint(pk, "ephemeral_bytes", env_bytes("SALUS_MEM_EPHEMERAL"));
        proto_pack_kv_int(pk, "priority", priority ? strtoll(priority, NULL, 10) : 0);
        LOG_DEBUG("registering as '%s'; waiting for admission", name);
        /* admission may take as long as other jobs run: no timeout, the socket tells if the
         * daemon dies */
        rc = salus_client_call_fds(&shim.client, &reply, err, sizeof(err), -1, fds, 2, &nfds);
        if (rc == -EREMOTEIO && lost_at_ns && reserved_id) {
            /* a restarted salusd does not know the reservation of a job not admitted yet */
            reserved_id = 0;
            continue;
        }
        if (rc != -ECONNRESET && rc != -EPIPE)
            break;
        /* salusd went away (a restart): register again with the next one, for a while */
        if (!lost_at_ns) {
            lost_at_ns = shim_now_ns();
            fprintf(stderr, "salus: salusd went away while the job waited for admission; it "
                            "registers again with a restarted salusd (at most %d s)\n",
                    SHIM_REREGISTER_S);
        }
        salus_client_close(&shim.client);
        while ((rc = salus_client_open(&shim.client, socket_path, "libsalus-client", 2000, err,
                                       sizeof(err))) < 0 &&
               shim_now_ns() - lost_at_ns < SHIM_REREGISTER_S * 1000000000ull) {
            struct timespec pause = {.tv_nsec = 100000000};
            nanosleep(&pause, NULL);
        }
        if (rc < 0) {
            fprintf(stderr, "salus: salusd did not come back within %d s; the job fails closed\n",
                    SHIM_REREGISTER_S);
            return rc;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "salus: salusd refused the job: %s\n", rc == -EREMOTEIO || rc == -ENOMEM ? err : strerror(-rc));
        shim.refused = rc == -EREMOTEIO || rc == -ENOMEM; /* an answer, not a lost connection */
        return rc;
    }
    uint64_t job_id = 0, gpu = 0;
    if (nfds != 2 || proto_get_uint(&reply.body, "job_id", &job_id) < 0 ||
        proto_get_uint(&reply.body, "gpu", &gpu) < 0 ||
        proto_get_uint(&reply.body, "budget_bytes", &shim.budget_bytes) < 0 ||
        proto_get_uint(&reply.body, "chunk_bytes", &shim.chunk_bytes) < 0 ||
        proto_get_uint(&reply.body, "va_bytes", &shim.va_bytes) < 0 ||
        proto_get_bool(&reply.body, "simulated", &simulated) == -EINVAL) {
        fprintf(stderr, "salus: salusd sent an incomplete admission\n");
        proto_msg_free(&reply);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return -EPROTO;
    }
    /* how long a restarted salusd has to answer (older daemons do not say: 30 s) */
    if (proto_get_uint(&reply.body, "reattach_grace_ms", &shim.reattach_grace_ms) < 0 ||
        shim.reattach_grace_ms == 0)
        shim.reattach_grace_ms = 30000;
    snprintf(shim.socket_path, sizeof(shim.socket_path), "%s", socket_path);
    /* simgpu: the job's simulated devices are salusd's (a segment name, never a path) */
    char shm_name[256];
    if (simulated && proto_get_str_copy(&reply.body, "simgpu_shm", shm_name, sizeof(shm_name)) == 0 &&
        shm_name[0] == '/' && !strchr(shm_name + 1, '/'))
        setenv("SIMGPU_SHM_NAME", shm_name, 1);
    /* every GPU of the job (older daemons send only gpu) */
    const msgpack_object *list = proto_get(&reply.body, "gpus");
    shim.gpus[0] = (int)gpu;
    shim.gpu_count = 1;
    if (list && list->type == MSGPACK_OBJECT_ARRAY && list->via.array.size >= 1 &&
        list->via.array.size <= SHIM_MAX_GPUS) {
        for (uint32_t k = 0; k < list->via.array.size; k++) {
            const msgpack_object *o = &list->via.array.ptr[k];
            if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > INT32_MAX ||
                (k == 0 && o->via.u64 != gpu)) {
                fprintf(stderr, "salus: salusd sent a malformed GPU list\n");
                proto_msg_free(&reply);
                close(fds[0]);
                close(fds[1]);
                return -EPROTO;
            }
            shim.gpus[k] = (int)o->via.u64;
        }
        shim.gpu_count = (int)list->via.array.size;
    }
    proto_msg_free(&reply);
    shim.job_id = job_id;
    shim.gpu = (int)gpu;
    shim.notify_fd = fds[1];
    rc = map_page(fds[0]);
    if (rc < 0) {
        close(fds[0]);
        return rc;
    }
    shim.page_fd = fds[0]; /* re-presented if the job re-attaches to a restarted salusd */
    if (find_driver(simulated, driver_path, sizeof(driver_path)) < 0) {
        fprintf(stderr, "salus: no CUDA driver found for this job (salusd runs on %s); set "
                        "SALUS_REAL_DRIVER\n", simulated ? "simgpu" : "a GPU");
        return -ENOENT;
    }
    rc = load_driver(driver_path);
    if (rc < 0)
        return rc;
    shim_watch_start();
    LOG_INFO("job %llu admitted on GPU %d with a budget of %llu MiB",
             (unsigned long long)job_id, shim.gpu, (unsigned long long)(shim.budget_bytes >> 20));
    return 0;
}

static void init_once_fn(void)
{
    salus_log_level_t level = SALUS_LOG_WARN;
    salus_log_level_parse(getenv("SALUS_LOG_LEVEL"), &level);
    salus_log_init("salus-shim", level);

    const char *unmanaged = getenv("SALUS_UNMANAGED");
    if (unmanaged && strcmp(unmanaged, "1") == 0) {
        char path[4096];
        const char *override = getenv("SALUS_REAL_DRIVER");
        if ((!override || !*override) && find_system_driver(path, sizeof(path)) < 0) {
            fprintf(stderr, "salus: SALUS_UNMANAGED=1 but no CUDA driver found "
                            "(set SALUS_REAL_DRIVER)\n");
            return;
        }
        if (load_driver(override && *override ? override : path) == 0) {
            shim.mode = SHIM_MODE_UNMANAGED;
            shim.init_error = CUDA_SUCCESS;
        }
        return;
    }
    char socket_path[108];
    if (salus_default_socket_path(socket_path, sizeof(socket_path)) < 0) {
        fprintf(stderr, "salus: the salusd socket path is too long\n");
        return;
    }
    if (register_job(socket_path) == 0) {
        shim.mode = SHIM_MODE_MANAGED;
        shim.init_error = CUDA_SUCCESS;
    }
}

CUresult shim_init(void)
{
    pthread_once(&init_once, init_once_fn);
    return shim.init_error;
}

int shim_session_alive(void)
{
    struct pollfd p = {.fd = shim.client.fd, .events = POLLRDHUP};
    if (shim.client.fd < 0)
        return 0;
    /* only a hang-up counts: a reply another thread waits for may be readable right now */
    if (poll(&p, 1, 0) <= 0)
        return 1;
    return !(p.revents & (POLLHUP | POLLERR | POLLRDHUP));
}

/* A reply that did not come (timeout) or came out of order leaves the stream out of step:
 * the session is over, and the job fails closed. Called with client_lock held. */
static void session_broken(int rc)
{
    if (rc != -ETIMEDOUT && rc != -EPROTO && rc != -ECONNRESET && rc != -EPIPE)
        return;
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    LOG_ERROR("the connection to salusd broke (%s); the job cannot go on", strerror(-rc));
    salus_client_close(&shim.client);
    shim.init_error = CUDA_ERROR_SYSTEM_NOT_READY;
    shim.mode = SHIM_MODE_FAILED;
}

/* With client_lock held, after a call failed: 1 when salusd had gone away and the job
 * re-attached to a new one (the call is made again), else 0 (the session ends if it broke). */
static int again_after_restart(int rc)
{
    if ((rc == -ECONNRESET || rc == -EPIPE || rc == -ENOTCONN) && shim.mode == SHIM_MODE_MANAGED &&
        shim_reattach_locked() == 0)
        return 1;
    session_broken(rc);
    return 0;
}

int shim_session_grow(uint64_t bytes, uint32_t device, uint64_t *chunk_id, uint64_t *chunk_bytes)
{
    char err[256] = "";
    proto_msg_t reply;
    int fd = -1, nfds = 0, rc, bad_reply = 0;
    pthread_mutex_lock(&shim.client_lock);
    do {
        msgpack_packer *pk = salus_client_begin(&shim.client, "mem_grow", 1 + (device > 0));
        proto_pack_kv_uint(pk, "bytes", bytes);
        if (device > 0) /* another GPU of the job (--gpus) */
            proto_pack_kv_uint(pk, "device", device);
        rc = shim.client.fd >= 0 ? salus_client_call_fds(&shim.client, &reply, err, sizeof(err),
                                                         30000, &fd, 1, &nfds)
                                 : -ECONNRESET;
        /* {wait: 1}: a job whose sizes are being learned waits for its claim to grow on its
         * GPU; salusd answers so now and then, and the request is made again */
        uint64_t wait = 0;
        if (rc == 0 && nfds == 0 && proto_get_uint(&reply.body, "wait", &wait) == 0 && wait) {
            proto_msg_free(&reply);
            LOG_DEBUG("mem_grow(%llu): waiting for memory on the GPU", (unsigned long long)bytes);
            rc = -EAGAIN;
            continue;
        }
    } while ((rc == -EAGAIN) || (rc < 0 && again_after_restart(rc)));
    if (rc == 0 && (nfds != 1 || proto_get_uint(&reply.body, "chunk_id", chunk_id) < 0 ||
                    proto_get_uint(&reply.body, "bytes", chunk_bytes) < 0)) {
        proto_msg_free(&reply);
        if (nfds == 1)
            close(fd);
        bad_reply = 1;
    } else if (rc == 0) {
        proto_msg_free(&reply);
        /* kept before another thread may re-attach: it re-presents every chunk the job has */
        shim_chunk_keep(*chunk_id, *chunk_bytes, fd);
    }
    pthread_mutex_unlock(&shim.client_lock);
    if (bad_reply)
        return -EPROTO;
    if (rc < 0) {
        LOG_DEBUG("mem_grow(%llu) refused: %s", (unsigned long long)bytes, err);
        return rc == -ENOMEM ? -ENOMEM : -EIO;
    }
    return fd;
}

int shim_session_release(uint64_t chunk_id)
{
    char err[256] = "";
    proto_msg_t reply;
    int rc;
    pthread_mutex_lock(&shim.client_lock);
    do {
        msgpack_packer *pk = salus_client_begin(&shim.client, "mem_release", 1);
        proto_pack_kv_uint(pk, "chunk_id", chunk_id);
        rc = shim.client.fd >= 0 ? salus_client_call(&shim.client, &reply, err, sizeof(err))
                                 : -ECONNRESET;
    } while (rc < 0 && again_after_restart(rc));
    if (rc == 0)
        shim_chunk_forget(chunk_id); /* before another thread may re-attach */
    pthread_mutex_unlock(&shim.client_lock);
    if (rc < 0) {
        LOG_WARN("mem_release(%llu) failed: %s", (unsigned long long)chunk_id, err);
        return rc;
    }
    proto_msg_free(&reply);
    return 0;
}

int shim_session_charge(uint64_t bytes, int release)
{
    char err[256] = "";
    proto_msg_t reply;
    int rc;
    pthread_mutex_lock(&shim.client_lock);
    do {
        msgpack_packer *pk = salus_client_begin(&shim.client, "mem_charge", 2);
        proto_pack_kv_uint(pk, "bytes", bytes);
        proto_pack_kv_uint(pk, "release", release ? 1 : 0);
        rc = shim.client.fd >= 0 ? salus_client_call(&shim.client, &reply, err, sizeof(err))
                                 : -ECONNRESET;
    } while (rc < 0 && again_after_restart(rc));
    pthread_mutex_unlock(&shim.client_lock);
    if (rc < 0) {
        LOG_DEBUG("mem_charge(%llu, release=%d) refused: %s", (unsigned long long)bytes, release,
                  err);
        return rc == -ENOMEM ? -ENOMEM : -EIO;
    }
    proto_msg_free(&reply);
    return 0;
}

int shim_session_lane_map(uint64_t *chunk_id, uint64_t *bytes, uint64_t *persistent,
                          uint64_t *uid, int *page_fd, int *chunk_fd, int *retry)
{
    char err[256] = "";
    proto_msg_t reply;
    int fds[2] = {-1, -1}, nfds = 0, rc;
    uint64_t shared = 0;
    pthread_mutex_lock(&shim.client_lock);
    do {
        salus_client_begin(&shim.client, "lane_map", 0);
        rc = shim.client.fd >= 0 ? salus_client_call_fds(&shim.client, &reply, err, sizeof(err),
                                                         30000, fds, 2, &nfds)
                                 : -ECONNRESET;
    } while (rc < 0 && again_after_restart(rc));
    pthread_mutex_unlock(&shim.client_lock);
    if (rc < 0) {
        LOG_DEBUG("lane_map refused: %s", err);
        return rc;
    }
    uint64_t again = 0;
    *retry = proto_get_uint(&reply.body, "retry", &again) == 0 && again <= 2 ? (int)again : 0;
    if (proto_get_uint(&reply.body, "shared", &shared) < 0 || !shared || nfds != 2 ||
        proto_get_uint(&reply.body, "bytes", bytes) < 0 || *bytes == 0 ||
        proto_get_uint(&reply.body, "persistent", persistent) < 0 ||
        proto_get_uint(&reply.body, "uid", uid) < 0 ||
        proto_get_uint(&reply.body, "chunk_id", chunk_id) < 0) {
        proto_msg_free(&reply);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return -ENOENT;
    }
    proto_msg_free(&reply);
    *page_fd = fds[0];
    *chunk_fd = fds[1];
    return 0;
}

int shim_session_lane_unmap(void)
{
    char err[256] = "";
    proto_msg_t reply;
    int rc;
    pthread_mutex_lock(&shim.client_lock);
    do {
        salus_client_begin(&shim.client, "lane_unmap", 0);
        rc = shim.client.fd >= 0 ? salus_client_call(&shim.client, &reply, err, sizeof(err))
                                 : -ECONNRESET;
    } while (rc < 0 && again_after_restart(rc));
    pthread_mutex_unlock(&shim.client_lock);
    if (rc < 0) {
        LOG_DEBUG("lane_unmap failed: %s", err);
        return rc;
    }
    proto_msg_free(&reply);
    return 0;
}
