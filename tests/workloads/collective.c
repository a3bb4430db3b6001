/* A collective for simgpu that behaves like NCCL's: the kernel pack
 * libsalus-workloads-collective.so (kernel-pack ABI 2, simgpu_kernel.h).
 *
 *   allreduce_sum_f32(float *buffer, unsigned long long count, const char *communicator,
 *                     unsigned rank, unsigned world)
 *
 * Every rank of the communicator launches it on its own device buffer; each ends
 * with the element-wise sum of all ranks' buffers, added in rank order 0, 1, ...,
 * world-1, so every rank holds bit-identical results. `communicator` is a host
 * string (simgpu runs kernels in the launching process, so a host pointer is
 * valid there; this kernel exists only on simgpu: on a real GPU use NCCL or MPI).
 *
 * Like an NCCL kernel, the launch returns at once and the kernel keeps its stream
 * busy until every rank has arrived. While it waits it holds neither simgpu's
 * execution engine nor a CPU: it copies its buffer into the communicator's
 * segment (its arrival), then sleeps in simgpu_host.wait_off_engine on a futex in
 * that segment; the last rank to arrive wakes the others.
 *
 * The communicator is a POSIX shared-memory segment named
 * /simgpu-comm-<uid>-<world>-<communicator>. The first rank creates it
 * (O_CREAT|O_EXCL: exactly one creator, which publishes a magic number last; the
 * others wait for it); each rank claims its slot; the rank whose claim completes
 * the world unlinks the name (every rank has it mapped from then on, as NCCL's
 * shared-memory transport does), so nothing is left in /dev/shm after a run in
 * which every rank came. Ranks exchange data in rounds of at most CHUNK_FLOATS
 * per rank, through two buffers used alternately: a rank can only come back to a
 * buffer after every rank has read it, since that needs one more round that every
 * rank joined.
 *
 * A rank that never comes: after SIMGPU_COLLECTIVE_TIMEOUT_S (seconds, default
 * 600) the waiting kernel gives up, marks the communicator failed (every rank's
 * later call fails at once), unlinks its name, says on stderr which ranks were
 * missing and fails with CUDA_ERROR_LAUNCH_TIMEOUT (702), which the next
 * cuStreamSynchronize / cuCtxSynchronize of that process returns. A rank that
 * attached and died is noticed sooner: a waiting rank wakes once a second to look
 * (kill(pid, 0); ranks in one pid namespace, as simgpu's devices need anyway) and
 * fails with CUDA_ERROR_LAUNCH_FAILED (719), as do the ranks of a communicator
 * that failed. The buffer's content is then undefined, as after a failed NCCL call.
 *
 * Modelled device time: 10 us + 0.02 ns per byte of the buffer (2 x bytes at
 * 100 GB/s: a ring allreduce moves each byte about twice over links of that
 * order), charged as engine time only; the wait is not device time. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "simgpu_kernel.h"

#define COLLECTIVE_MAGIC 0x4c4c4f43554d4953ull /* "SIMUCOLL" */
#define COLLECTIVE_MAX_WORLD 64
#define COLLECTIVE_MAX_NAME 96
#define CHUNK_FLOATS (256u * 1024u)            /* 1 MiB per rank per round */
#define DATA_OFFSET 4096u
#define DEFAULT_TIMEOUT_S 600.0
#define LIVENESS_CHECK_NS 1000000000ull     /* a waiting rank looks for dead peers once a second */
#define LATENCY_NS 10000.0
#define NS_PER_BYTE 0.02

typedef struct comm_shared {
    uint64_t magic;                           /* written last by the creator */
    uint32_t world;
    uint32_t generation;                      /* futex word: +1 when a round completes */
    uint32_t arrived;                         /* ranks arrived in the current round */
    uint32_t failed;                          /* a rank gave up: the communicator is dead */
    uint32_t attached;                        /* ranks that claimed their slot */
    uint32_t reserved;
    int32_t rank_pid[COLLECTIVE_MAX_WORLD];   /* who claimed each rank */
    uint64_t rank_round[COLLECTIVE_MAX_WORLD]; /* rounds each rank has arrived for */
} comm_shared;

_Static_assert(sizeof(comm_shared) <= DATA_OFFSET, "communicator header too large");

/* this process's view of one (communicator, world, rank) */
typedef struct comm_local {
    struct comm_local *next;
    char shm_name[160];
    char name[COLLECTIVE_MAX_NAME + 1];
    unsigned world, rank;
    comm_shared *shared;
    size_t bytes;
    uint64_t round;                           /* rounds this rank has joined */
} comm_local;

static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static comm_local *comms;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pause_ms(unsigned ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t timeout_ns(void)
{
    const char *text = getenv("SIMGPU_COLLECTIVE_TIMEOUT_S");
    double seconds = DEFAULT_TIMEOUT_S;
    if (text && *text) {
        char *end = NULL;
        double value = strtod(text, &end);
        if (end != text && *end == '\0' && value > 0.0 && value <= 86400.0 * 365)
            seconds = value;
        else
            fprintf(stderr, "simgpu allreduce: ignoring SIMGPU_COLLECTIVE_TIMEOUT_S=%s (want seconds > 0)\n",
                    text);
    }
    return (uint64_t)(seconds * 1e9);
}

static float *comm_data(const comm_local *c, uint64_t round, unsigned rank)
{
    return (float *)(void *)((char *)c->shared + DATA_OFFSET) +
           ((size_t)(round & 1) * c->world + rank) * CHUNK_FLOATS;
}

static bool name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > COLLECTIVE_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

static void futex_wake_all(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Opens or creates the segment; returns its mapping or NULL (message on stderr). */
static comm_shared *segment_open(const char *shm_name, unsigned world, size_t bytes, uint64_t deadline)
{
    for (;;) {
        int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) { /* the creator: size it, fill the header, publish the magic last */
            comm_shared *shared = MAP_FAILED;
            if (ftruncate(fd, (off_t)bytes) == 0)
                shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            int error = errno;
            close(fd);
            if (shared == MAP_FAILED) {
                fprintf(stderr, "simgpu allreduce: cannot create %s: %s\n", shm_name, strerror(error));
                shm_unlink(shm_name);
                return NULL;
            }
            shared->world = world;
            __atomic_store_n(&shared->magic, COLLECTIVE_MAGIC, __ATOMIC_RELEASE);
            return shared;
        }
        if (errno != EEXIST) {
            fprintf(stderr, "simgpu allreduce: cannot create %s: %s\n", shm_name, strerror(errno));
            return NULL;
        }
        fd = shm_open(shm_name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 && errno != ENOENT) {
            fprintf(stderr, "simgpu allreduce: cannot open %s: %s\n", shm_name, strerror(errno));
            return NULL;
        }
        if (fd >= 0) {
            struct stat st;
            comm_shared *shared = MAP_FAILED;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size == bytes)
                shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (shared != MAP_FAILED) {
                /* the creator publishes the magic right after sizing: a short wait */
                while (__atomic_load_n(&shared->magic, __ATOMIC_ACQUIRE) != COLLECTIVE_MAGIC &&
                       now_ns() < deadline)
                    pause_ms(1);
                if (__atomic_load_n(&shared->magic, __ATOMIC_ACQUIRE) == COLLECTIVE_MAGIC &&
                    shared->world == world)
                    return shared;
                munmap(shared, bytes);
                fprintf(stderr, "simgpu allreduce: %s is not a communicator of world %u; remove it\n",
                        shm_name, world);
                return NULL;
            }
        }
        /* unlinked between our two opens, or not sized yet: try again */
        if (now_ns() >= deadline) {
            fprintf(stderr, "simgpu allreduce: %s did not become usable in time\n", shm_name);
            return NULL;
        }
        pause_ms(1);
    }
}

/* Claims `rank` of the segment; false (message on stderr) when another live process has it. */
static bool rank_claim(comm_local *c)
{
    comm_shared *shared = c->shared;
    int32_t expected = 0, me = (int32_t)getpid();
    if (!__atomic_compare_exchange_n(&shared->rank_pid[c->rank], &expected, me, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        bool alive = kill(expected, 0) == 0 || errno == EPERM;
        fprintf(stderr,
                "simgpu allreduce: communicator '%s' (world %u): rank %u is already taken by %s pid %d%s%s\n",
                c->name, c->world, c->rank, alive ? "live" : "dead", (int)expected,
                alive ? "" : "; remove the stale segment /dev/shm", alive ? "" : c->shm_name);
        return false;
    }
    if (__atomic_add_fetch(&shared->attached, 1, __ATOMIC_ACQ_REL) == c->world)
        shm_unlink(c->shm_name); /* every rank has it mapped: the name is no longer needed */
    return true;
}

/* This process's communicator (name, world, rank), attached at its first use. */
static comm_local *comm_get(const char *name, unsigned world, unsigned rank, uint64_t deadline)
{
    pthread_mutex_lock(&comms_lock);
    comm_local *c;
    for (c = comms; c; c = c->next)
        if (c->world == world && c->rank == rank && strcmp(c->name, name) == 0)
            goto out;
    c = calloc(1, sizeof(*c));
    if (!c)
        goto out;
    snprintf(c->name, sizeof(c->name), "%s", name);
    snprintf(c->shm_name, sizeof(c->shm_name), "/simgpu-comm-%u-%u-%s", (unsigned)geteuid(), world, name);
    c->world = world;
    c->rank = rank;
    c->bytes = DATA_OFFSET + (size_t)2 * world * CHUNK_FLOATS * sizeof(float);
    c->shared = segment_open(c->shm_name, world, c->bytes, deadline);
    if (!c->shared || !rank_claim(c)) {
        if (c->shared)
            munmap(c->shared, c->bytes);
        free(c);
        c = NULL;
        goto out;
    }
    c->next = comms;
    comms = c;
out:
    pthread_mutex_unlock(&comms_lock);
    return c;
}

/* The communicator is dead: every rank's waits end, later calls fail at once. */
static void comm_break(comm_local *c)
{
    __atomic_store_n(&c->shared->failed, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&c->shared->generation, 1, __ATOMIC_ACQ_REL);
    futex_wake_all(&c->shared->generation);
    shm_unlink(c->shm_name);
}

static void report_missing(const comm_local *c, double waited_s)
{
    char missing[COLLECTIVE_MAX_WORLD * 4 + 1] = "";
    size_t used = 0;
    for (unsigned r = 0; r < c->world; r++)
        if (__atomic_load_n(&c->shared->rank_round[r], __ATOMIC_ACQUIRE) < c->round + 1 && used + 5 < sizeof(missing))
            used += (size_t)snprintf(missing + used, sizeof(missing) - used, " %u", r);
    fprintf(stderr,
            "simgpu allreduce: communicator '%s' (world %u): rank %u waited %.1f s for rank(s)%s; "
            "giving up (CUDA_ERROR_LAUNCH_TIMEOUT)\n",
            c->name, c->world, c->rank, waited_s, used ? missing : " (none: the communicator failed)");
}

/* A rank that attached but is gone while the others wait for it: says so, true. */
static bool dead_peer_report(const comm_local *c)
{
    for (unsigned r = 0; r < c->world; r++) {
        int32_t pid = __atomic_load_n(&c->shared->rank_pid[r], __ATOMIC_ACQUIRE);
        if (pid == 0 || __atomic_load_n(&c->shared->rank_round[r], __ATOMIC_ACQUIRE) >= c->round + 1)
            continue;
        if (kill(pid, 0) == -1 && errno == ESRCH) {
            fprintf(stderr,
                    "simgpu allreduce: communicator '%s' (world %u): rank %u (pid %d) is gone; rank %u gives up "
                    "(CUDA_ERROR_LAUNCH_FAILED)\n",
                    c->name, c->world, r, (int)pid, c->rank);
            return true;
        }
    }
    return false;
}

/* One round: publish `n` floats of `values`, wait for every rank, sum in rank order.
 * 0, or -ETIMEDOUT, -ESRCH (a peer died) or -EPIPE (the communicator failed before). */
static int allreduce_round(const simgpu_launch *launch, comm_local *c, float *values, size_t n,
                           uint64_t deadline, uint64_t started)
{
    comm_shared *shared = c->shared;
    if (__atomic_load_n(&shared->failed, __ATOMIC_ACQUIRE))
        return -EPIPE;
    if (n)
        memcpy(comm_data(c, c->round, c->rank), values, n * sizeof(float));
    /* read the generation before arriving: the last arrival bumps it only after ours */
    uint32_t generation = __atomic_load_n(&shared->generation, __ATOMIC_ACQUIRE);
    __atomic_store_n(&shared->rank_round[c->rank], c->round + 1, __ATOMIC_RELEASE);
    if (__atomic_add_fetch(&shared->arrived, 1, __ATOMIC_ACQ_REL) == c->world) {
        __atomic_store_n(&shared->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&shared->generation, generation + 1, __ATOMIC_RELEASE);
        futex_wake_all(&shared->generation);
    } else {
        while (__atomic_load_n(&shared->generation, __ATOMIC_ACQUIRE) == generation) {
            uint64_t now = now_ns();
            uint64_t slice = deadline > now ? deadline - now : 0;
            if (slice > LIVENESS_CHECK_NS)
                slice = LIVENESS_CHECK_NS;
            if (slice && launch->host->wait_off_engine(launch, &shared->generation, generation, slice) == 0)
                continue;
            if (__atomic_load_n(&shared->generation, __ATOMIC_ACQUIRE) != generation)
                break; /* completed just as the time ran out */
            if (dead_peer_report(c)) {
                comm_break(c);
                return -ESRCH;
            }
            if (now_ns() >= deadline) {
                report_missing(c, (double)(now_ns() - started) / 1e9);
                comm_break(c);
                return -ETIMEDOUT;
            }
        }
    }
    if (__atomic_load_n(&shared->failed, __ATOMIC_ACQUIRE))
        return -EPIPE;
    for (size_t i = 0; i < n; i++) {
        float sum = comm_data(c, c->round, 0)[i];
        for (unsigned r = 1; r < c->world; r++)
            sum += comm_data(c, c->round, r)[i];
        values[i] = sum;
    }
    c->round++;
    return 0;
}

static void allreduce_sum_f32(const simgpu_launch *launch)
{
    float *buffer = *(float **)launch->params[0];
    unsigned long long count = *(unsigned long long *)launch->params[1];
    const char *name_param = *(const char **)launch->params[2];
    unsigned rank = *(unsigned *)launch->params[3];
    unsigned world = *(unsigned *)launch->params[4];
    char name[COLLECTIVE_MAX_NAME + 1];
    const simgpu_host *host = launch->host;

    if (!host || host->size < offsetof(simgpu_host, fail) + sizeof(host->fail)) {
        fprintf(stderr, "simgpu allreduce: this simgpu offers no host services (kernel-pack ABI 2)\n");
        return;
    }
    if (!name_param || strnlen(name_param, COLLECTIVE_MAX_NAME + 1) > COLLECTIVE_MAX_NAME ||
        !name_valid(name_param) || world == 0 || world > COLLECTIVE_MAX_WORLD || rank >= world ||
        (count && !buffer)) {
        fprintf(stderr,
                "simgpu allreduce: bad arguments (communicator '%s': 1..%d characters of [A-Za-z0-9._-]; "
                "rank %u < world %u <= %d)\n",
                name_param && strnlen(name_param, COLLECTIVE_MAX_NAME + 1) <= COLLECTIVE_MAX_NAME ? name_param
                                                                                                  : "?",
                COLLECTIVE_MAX_NAME, rank, world, COLLECTIVE_MAX_WORLD);
        host->fail(launch, 1 /* CUDA_ERROR_INVALID_VALUE */);
        return;
    }
    snprintf(name, sizeof(name), "%s", name_param); /* the parameters die when the launch returns */

    uint64_t started = now_ns(), deadline = started + timeout_ns();
    comm_local *c = comm_get(name, world, rank, deadline);
    if (!c) {
        host->fail(launch, 999 /* CUDA_ERROR_UNKNOWN */);
        return;
    }
    if (world == 1)
        return; /* the sum of one buffer is itself */
    /* the rounds' work on a copy, so that a failed call leaves the buffer as it was */
    size_t chunk = count < CHUNK_FLOATS ? (size_t)count : CHUNK_FLOATS;
    float *scratch = chunk ? malloc(chunk * sizeof(float)) : NULL;
    if (chunk && !scratch) {
        host->fail(launch, 2 /* CUDA_ERROR_OUT_OF_MEMORY */);
        return;
    }
    unsigned long long done = 0;
    do { /* a zero-length call is still one round: every rank meets */
        size_t n = count - done < CHUNK_FLOATS ? (size_t)(count - done) : CHUNK_FLOATS;
        if (n)
            memcpy(scratch, buffer + done, n * sizeof(float));
        int rc = allreduce_round(launch, c, scratch, n, deadline, started);
        if (rc == -EPIPE && done == 0)
            fprintf(stderr, "simgpu allreduce: communicator '%s' (world %u) failed earlier; rank %u gives up\n",
                    c->name, c->world, c->rank);
        if (rc) {
            host->fail(launch, rc == -ETIMEDOUT ? 702 /* CUDA_ERROR_LAUNCH_TIMEOUT */
                                                : 719 /* CUDA_ERROR_LAUNCH_FAILED */);
            break;
        }
        if (n)
            memcpy(buffer + done, scratch, n * sizeof(float));
        done += n;
    } while (done < count);
    free(scratch);
}

static double allreduce_sum_f32_cost(const simgpu_launch *launch)
{
    unsigned long long count = *(unsigned long long *)launch->params[1];
    return LATENCY_NS + NS_PER_BYTE * (double)count * sizeof(float);
}

static const simgpu_kernel collective_kernels[] = {
    {"allreduce_sum_f32", allreduce_sum_f32, allreduce_sum_f32_cost},
};

__attribute__((visibility("default"))) const simgpu_kernel *simgpu_kernel_pack(unsigned *count, unsigned *abi)
{
    *count = sizeof(collective_kernels) / sizeof(collective_kernels[0]);
    *abi = SIMGPU_KERNEL_ABI;
    return collective_kernels;
}
