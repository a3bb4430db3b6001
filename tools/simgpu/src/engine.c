/* The shared segment: what a GPU shares between processes.
 *
 * One POSIX shared-memory object (SIMGPU_SHM_NAME, default /simgpu-<uid>) holds a
 * versioned header and, per simulated device, the memory accounting (bytes in
 * use per process slot) and the execution engine (a process-shared robust mutex
 * held for the whole modelled duration of a kernel) with its busy-time counter.
 * The number of process slots per device is chosen when the segment is created
 * (SIMGPU_PROCESS_SLOTS) and recorded in the header; each device is its fixed
 * part followed by its slots.
 *
 * The creator initialises the segment under flock(), so a creator that dies
 * mid-way leaves nothing half-initialised behind (the next opener sees size 0 or
 * a complete header). A dead process is noticed by its pid: its slot's bytes are
 * reclaimed, and a dead engine holder is recovered through EOWNERDEAD. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simgpu-internal.h"
#include "simgpu.h"

#define SHM_MAGIC 0x554750474d495353ull /* "SSIMGPGU" */
#define SHM_LAYOUT_VERSION 2

typedef struct shm_slot {
    int32_t pid;                /* in the pid namespace below */
    uint32_t pid_namespace;     /* its inode (0: written by a simgpu that did not say) */
    uint64_t start_ticks;       /* /proc/<pid>/stat starttime: guards against pid reuse */
    uint64_t used_bytes;
} shm_slot_t;

typedef struct shm_device {
    pthread_mutex_t engine;     /* robust, process-shared: held while a kernel occupies the device */
    pthread_mutex_t accounting; /* robust, process-shared: guards slots */
    uint64_t total_bytes;
    uint64_t busy_ns;           /* atomic */
    uint64_t kernels;           /* atomic */
    uint64_t engine_recoveries; /* atomic */
    int32_t engine_holder;      /* pid, informational */
    uint32_t reserved;
    shm_slot_t slots[];         /* slot_count of them */
} shm_device_t;

typedef struct shm_header {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t header_bytes;
    uint32_t device_bytes;      /* one device with its slots: the stride between devices */
    uint32_t device_count;
    uint64_t segment_bytes;
    uint32_t slot_count;        /* process slots per device */
    uint32_t slot_bytes;
    /* device_count devices of device_bytes each follow */
} shm_header_t;

static shm_header_t *segment;
static uint32_t slot_count; /* the segment's */
/* The segment stays open while this process uses it, with a shared OFD lock on its first
 * byte: a process that can take that byte exclusively knows that no other process is
 * attached (the segment may then be recreated or removed). */
static int segment_fd = -1;
static bool segment_created; /* this process created (or recreated) the segment */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int my_slot[SIMGPU_MAX_DEVICES] = {[0 ... SIMGPU_MAX_DEVICES - 1] = -1};
static bool full_noted[SIMGPU_MAX_DEVICES];
static uint64_t my_start_ticks;
static uint32_t my_pid_namespace;

/* The inode of this process's pid namespace (0 when unknown). Processes of a container see
 * other pids than the host's: a slot is this process's, and its pid can be checked, only in
 * the pid namespace that wrote it; another namespace's slot is live while its process holds
 * the slot's lock (slot_lock). */
static uint32_t pid_namespace_of_self(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

static bool slot_is_mine(const shm_slot_t *slot)
{
    return slot->pid == getpid() && slot->pid_namespace == my_pid_namespace;
}

/* 1 in a user namespace other than the first (a rootless container) when uid is the
 * overflow uid, as the host's root shows there: root's segment, mounted into the container. */
static bool uid_unmapped(uid_t uid)
{
    unsigned overflow = 65534, first = 1, lower = 0;
    unsigned long long count = 0;
    FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");
    if (f) {
        if (fscanf(f, "%u", &overflow) != 1)
            overflow = 65534;
        fclose(f);
    }
    if (uid != overflow || !(f = fopen("/proc/self/uid_map", "re")))
        return false;
    bool whole = fscanf(f, "%u %u %llu", &first, &lower, &count) == 3 && first == 0 &&
                 lower == 0 && count == 4294967295ull;
    fclose(f);
    return !whole;
}

static size_t device_bytes(uint32_t slots)
{
    return sizeof(shm_device_t) + (size_t)slots * sizeof(shm_slot_t);
}

static size_t segment_size(uint32_t devices, uint32_t slots)
{
    return sizeof(shm_header_t) + (size_t)devices * device_bytes(slots);
}

static shm_device_t *device_at(shm_header_t *h, int device)
{
    return (shm_device_t *)((char *)h + h->header_bytes + (size_t)device * h->device_bytes);
}

/* Field 22 of /proc/<pid>/stat; 0 if the process is gone or a zombie. */
static uint64_t process_start_ticks(int pid)
{
    char path[64], buffer[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buffer[n] = '\0';
    char *p = strrchr(buffer, ')');
    if (!p || p[1] != ' ')
        return 0;
    char state = p[2];
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0;
    p += 2;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    return p ? strtoull(p, NULL, 10) : 0;
}

/* A process holds an OFD write lock on the byte of the segment file at its slot's offset for
 * as long as it lives (the kernel drops it with the process's descriptor): what says that a
 * slot of another pid namespace is live, where its pid means nothing. */
static int slot_lock(const shm_slot_t *slot)
{
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                         .l_start = (off_t)((const char *)slot - (const char *)segment), .l_len = 1};
    return segment_fd >= 0 ? fcntl(segment_fd, F_OFD_SETLK, &lock) : -1;
}

static bool slot_locked_by_another(const shm_slot_t *slot)
{
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                         .l_start = (off_t)((const char *)slot - (const char *)segment), .l_len = 1};
    if (segment_fd < 0 || fcntl(segment_fd, F_OFD_GETLK, &lock) < 0)
        return true; /* cannot tell: taken as live */
    return lock.l_type != F_UNLCK;
}

static bool slot_alive(const shm_slot_t *slot)
{
    if (slot->pid == 0)
        return false;
    if (slot->pid_namespace != 0 && slot->pid_namespace != my_pid_namespace)
        return slot_locked_by_another(slot);
    if (slot->pid == getpid())
        return true;
    uint64_t ticks = process_start_ticks(slot->pid);
    return ticks != 0 && ticks == slot->start_ticks;
}

static bool robust_lock(pthread_mutex_t *mutex)
{
    int rc = pthread_mutex_lock(mutex);
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(mutex);
        return true;
    }
    return false;
}

static CUresult segment_init(shm_header_t *h, int device_count, uint32_t slots, uint64_t bytes)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    h->layout_version = SHM_LAYOUT_VERSION;
    h->header_bytes = sizeof(shm_header_t);
    h->device_bytes = (uint32_t)device_bytes(slots);
    h->device_count = (uint32_t)device_count;
    h->slot_count = slots;
    h->slot_bytes = sizeof(shm_slot_t);
    h->segment_bytes = bytes;
    for (int i = 0; i < device_count; i++) {
        shm_device_t *d = device_at(h, i);
        pthread_mutex_init(&d->engine, &attr);
        pthread_mutex_init(&d->accounting, &attr);
        d->total_bytes = simgpu_config.memory_bytes;
    }
    pthread_mutexattr_destroy(&attr);
    __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

static CUresult segment_refuse(const char *why)
{
    fprintf(stderr,
            "simgpu[%d]: shared segment /dev/shm%s is not usable (%s); "
            "remove it or set SIMGPU_SHM_NAME\n",
            (int)getpid(), simgpu_config.shm_name, why);
    return CUDA_ERROR_OPERATING_SYSTEM;
}

/* F_OFD_SETLK on the first byte of fd: F_RDLCK (attached), F_WRLCK (alone) or F_UNLCK. */
static int attach_lock_byte(int fd, short type)
{
    struct flock lock = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &lock);
}

/* Whether the segment open on fd is attached by no other process (this one's shared lock is
 * left in place either way). */
static bool attached_alone(int fd)
{
    bool alone = attach_lock_byte(fd, F_WRLCK) == 0;
    attach_lock_byte(fd, F_RDLCK);
    return alone;
}

/* An environment variable given explicitly (the segment's creator reads it; later processes
 * are bound to what the segment holds). */
static bool env_given(const char *name)
{
    const char *value = getenv(name);
    return value && *value;
}

/* The segment holds other values than this process asked for: 1 if the difference is worth
 * saying (what was asked for explicitly), with what in `what`. */
static int segment_differs(const shm_header_t *h, char *what, size_t size)
{
    uint64_t total = h->device_count ? device_at((shm_header_t *)h, 0)->total_bytes : 0;
    bool devices = env_given("SIMGPU_DEVICES") &&
                   h->device_count != (uint32_t)simgpu_config.device_count;
    bool memory = env_given("SIMGPU_MEMORY_MB") && total != simgpu_config.memory_bytes;
    bool slots = env_given("SIMGPU_PROCESS_SLOTS") && h->slot_count != simgpu_config.process_slots;
    if (!devices && !memory && !slots)
        return 0;
    snprintf(what, size, "it has %u device%s of %llu MiB and %u process slots; asked for %d of "
             "%llu MiB and %u", h->device_count, h->device_count == 1 ? "" : "s",
             (unsigned long long)(total >> 20), h->slot_count, simgpu_config.device_count,
             (unsigned long long)(simgpu_config.memory_bytes >> 20), simgpu_config.process_slots);
    return 1;
}

CUresult simgpu_shm_attach(void)
{
    simgpu_config_load();
    pthread_mutex_lock(&attach_lock);
    CUresult rc = CUDA_SUCCESS;
    void *map = MAP_FAILED;
    size_t bytes = 0;
    int fd = -1;
    if (segment)
        goto out;
    my_start_ticks = process_start_ticks(getpid());
    my_pid_namespace = pid_namespace_of_self();
    fd = shm_open(simgpu_config.shm_name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = segment_refuse(strerror(errno));
        goto out;
    }
    flock(fd, LOCK_EX);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = segment_refuse(strerror(errno));
        goto out;
    }
    /* another user's segment could lie to this process: only its own or root's */
    if (st.st_uid != geteuid() && st.st_uid != 0 && !uid_unmapped(st.st_uid)) {
        char why[96];
        snprintf(why, sizeof(why), "it belongs to uid %u", (unsigned)st.st_uid);
        rc = segment_refuse(why);
        goto out;
    }
    /* attached from here on (the lock is taken under the flock, as the removal checks) */
    if (attach_lock_byte(fd, F_RDLCK) < 0) {
        rc = segment_refuse(strerror(errno));
        goto out;
    }
    bool create = st.st_size == 0;
    /* root's simulated devices are the node's, like /dev/nvidia*: every user's jobs attach
     * to them (read-write: they take turns on the engine and book their memory here). The
     * cost: any local user can disturb the shared accounting and engine lock, never another
     * process's memory (allocations are per-process memfds). */
    if (create && geteuid() == 0 && st.st_uid == 0 && fchmod(fd, 0666) < 0) {
        rc = segment_refuse(strerror(errno));
        goto out;
    }
    if (create) {
        bytes = segment_size((uint32_t)simgpu_config.device_count, simgpu_config.process_slots);
        if (ftruncate(fd, (off_t)bytes) < 0) {
            rc = segment_refuse(strerror(errno));
            goto out;
        }
    } else {
        bytes = (size_t)st.st_size;
        if (bytes < sizeof(shm_header_t)) {
            rc = segment_refuse("too small");
            goto out;
        }
    }
    map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = segment_refuse(strerror(errno));
        goto out;
    }
    shm_header_t *h = map;
    char differs[192];
    if (!create && __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == SHM_MAGIC &&
        h->header_bytes == sizeof(shm_header_t) && h->device_count > 0 &&
        h->device_count <= SIMGPU_MAX_DEVICES && bytes >= segment_size(h->device_count, 0) &&
        segment_differs(h, differs, sizeof(differs))) {
        if (attached_alone(fd)) {
            /* left by a process that is gone (a salusd that was killed, say): start over */
            size_t want = segment_size((uint32_t)simgpu_config.device_count,
                                       simgpu_config.process_slots);
            munmap(map, bytes);
            map = MAP_FAILED;
            if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)want) < 0) {
                rc = segment_refuse(strerror(errno));
                goto out;
            }
            bytes = want;
            map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) {
                rc = segment_refuse(strerror(errno));
                goto out;
            }
            h = map;
            create = true;
            fprintf(stderr, "simgpu[%d]: recreated the segment /dev/shm%s, which no process "
                    "used (%s)\n", (int)getpid(), simgpu_config.shm_name, differs);
        } else {
            fprintf(stderr, "simgpu[%d]: SIMGPU_DEVICES/SIMGPU_MEMORY_MB/SIMGPU_PROCESS_SLOTS "
                    "ignored: the segment /dev/shm%s is in use and keeps its values (%s); "
                    "stop the processes that use it or set another SIMGPU_SHM_NAME\n",
                    (int)getpid(), simgpu_config.shm_name, differs);
        }
    }
    if (create) {
        rc = segment_init(h, simgpu_config.device_count, simgpu_config.process_slots, bytes);
        segment_created = rc == CUDA_SUCCESS;
    } else if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC) {
        rc = segment_refuse("bad magic");
    } else if (h->layout_version != SHM_LAYOUT_VERSION || h->header_bytes != sizeof(shm_header_t) ||
               h->slot_bytes != sizeof(shm_slot_t) || h->slot_count == 0 ||
               h->slot_count > SIMGPU_MAX_PROCESS_SLOTS ||
               h->device_bytes != device_bytes(h->slot_count)) {
        char why[128];
        snprintf(why, sizeof(why), "layout version %u, this simgpu uses %u", h->layout_version,
                 SHM_LAYOUT_VERSION);
        rc = segment_refuse(why);
    } else if (h->device_count == 0 || h->device_count > SIMGPU_MAX_DEVICES ||
               h->segment_bytes != bytes ||
               bytes != segment_size(h->device_count, h->slot_count)) {
        rc = segment_refuse("inconsistent size");
    }
    if (rc == CUDA_SUCCESS) {
        slot_count = h->slot_count;
        segment = h;
        map = MAP_FAILED;
    }
out:
    if (map != MAP_FAILED)
        munmap(map, bytes);
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        if (segment && segment_fd < 0)
            segment_fd = fd; /* kept open: its lock says this process is attached */
        else
            close(fd);
    }
    pthread_mutex_unlock(&attach_lock);
    return rc;
}

int simgpu_shm_device_count(void)
{
    return segment ? (int)segment->device_count : 0;
}

/* Under d->accounting: frees the slots of processes that are gone. */
static void reap_dead(shm_device_t *d)
{
    for (int i = 0; i < (int)slot_count; i++) {
        shm_slot_t *slot = &d->slots[i];
        if (slot->pid != 0 && !slot_alive(slot))
            memset(slot, 0, sizeof(*slot));
    }
}

static uint64_t used_total(const shm_device_t *d)
{
    uint64_t used = 0;
    for (int i = 0; i < (int)slot_count; i++)
        used += d->slots[i].used_bytes;
    return used;
}

/* Under d->accounting: this process's slot, claiming a free one if needed. */
static shm_slot_t *own_slot(int device, shm_device_t *d)
{
    int index = my_slot[device];
    if (index >= 0 && slot_is_mine(&d->slots[index]))
        return &d->slots[index];
    for (int i = 0; i < (int)slot_count; i++) {
        if (slot_is_mine(&d->slots[i])) {
            my_slot[device] = i;
            return &d->slots[i];
        }
    }
    reap_dead(d);
    for (int i = 0; i < (int)slot_count; i++) {
        if (d->slots[i].pid == 0 && slot_lock(&d->slots[i]) == 0) {
            d->slots[i].pid = getpid();
            d->slots[i].pid_namespace = my_pid_namespace;
            d->slots[i].start_ticks = my_start_ticks;
            d->slots[i].used_bytes = 0;
            my_slot[device] = i;
            return &d->slots[i];
        }
    }
    if (!full_noted[device]) {
        full_noted[device] = true;
        fprintf(stderr,
                "simgpu[%d]: device %d has no free process slot (all %u taken by live processes "
                "of segment %s); its memory is refused to this process. Create the segment with "
                "a larger SIMGPU_PROCESS_SLOTS\n",
                (int)getpid(), device, (unsigned)slot_count, simgpu_config.shm_name);
    }
    return NULL;
}

CUresult simgpu_mem_charge(int device, uint64_t bytes)
{
    shm_device_t *d = device_at(segment, device);
    robust_lock(&d->accounting);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    reap_dead(d);
    shm_slot_t *slot = own_slot(device, d);
    if (slot && used_total(d) + bytes <= d->total_bytes && bytes <= d->total_bytes) {
        slot->used_bytes += bytes;
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&d->accounting);
    return rc;
}

void simgpu_mem_uncharge(int device, uint64_t bytes)
{
    shm_device_t *d = device_at(segment, device);
    robust_lock(&d->accounting);
    shm_slot_t *slot = own_slot(device, d);
    if (slot)
        slot->used_bytes = slot->used_bytes > bytes ? slot->used_bytes - bytes : 0;
    pthread_mutex_unlock(&d->accounting);
}

void simgpu_mem_info(int device, uint64_t *used_bytes, uint64_t *total_bytes)
{
    shm_device_t *d = device_at(segment, device);
    robust_lock(&d->accounting);
    reap_dead(d);
    *used_bytes = used_total(d);
    *total_bytes = d->total_bytes;
    pthread_mutex_unlock(&d->accounting);
}

void simgpu_engine_acquire(int device)
{
    shm_device_t *d = device_at(segment, device);
    if (robust_lock(&d->engine)) {
        __atomic_add_fetch(&d->engine_recoveries, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "simgpu[%d]: device %d engine recovered from dead process %d\n",
                (int)getpid(), device, (int)d->engine_holder);
    }
    d->engine_holder = getpid();
}

static void engine_let_go(int device, uint64_t busy_ns, uint64_t kernels)
{
    shm_device_t *d = device_at(segment, device);
    __atomic_add_fetch(&d->busy_ns, busy_ns, __ATOMIC_RELAXED);
    __atomic_add_fetch(&d->kernels, kernels, __ATOMIC_RELAXED);
    d->engine_holder = 0;
    pthread_mutex_unlock(&d->engine);
}

void simgpu_engine_release(int device, uint64_t busy_ns)
{
    engine_let_go(device, busy_ns, 1);
}

void simgpu_engine_yield(int device, uint64_t busy_ns)
{
    engine_let_go(device, busy_ns, 0);
}

/* ---- the segment's end (simgpu.h) ---- */
__attribute__((visibility("default"))) int simgpu_shm_release(void)
{
    pthread_mutex_lock(&attach_lock);
    int rc = 0;
    if (!segment || !segment_created || segment_fd < 0)
        goto out;
    /* under the flock, as an attach takes its lock: nobody attaches in between */
    flock(segment_fd, LOCK_EX);
    if (attach_lock_byte(segment_fd, F_WRLCK) == 0) {
        rc = shm_unlink(simgpu_config.shm_name) == 0 || errno == ENOENT ? 1 : -errno;
        attach_lock_byte(segment_fd, F_RDLCK);
    }
    flock(segment_fd, LOCK_UN);
out:
    pthread_mutex_unlock(&attach_lock);
    return rc;
}

/* ---- the read-only stats API (simgpu.h) ---- */
__attribute__((visibility("default"))) int simgpu_device_stats(int device,
                                                               simgpu_device_stats_t *stats)
{
    if (!stats)
        return -EINVAL;
    if (simgpu_shm_attach() != CUDA_SUCCESS)
        return -ENODEV;
    if (device < 0 || device >= simgpu_shm_device_count())
        return -ENODEV;
    shm_device_t *d = device_at(segment, device);
    memset(stats, 0, sizeof(*stats));
    stats->abi = SIMGPU_STATS_ABI;
    robust_lock(&d->accounting);
    reap_dead(d);
    stats->used_bytes = used_total(d);
    stats->total_bytes = d->total_bytes;
    for (int i = 0; i < (int)slot_count; i++)
        stats->processes += d->slots[i].pid != 0;
    pthread_mutex_unlock(&d->accounting);
    stats->busy_ns = __atomic_load_n(&d->busy_ns, __ATOMIC_RELAXED);
    stats->kernels = __atomic_load_n(&d->kernels, __ATOMIC_RELAXED);
    stats->engine_recoveries = __atomic_load_n(&d->engine_recoveries, __ATOMIC_RELAXED);
    stats->sample_ns = simgpu_now_ns();
    return 0;
}
