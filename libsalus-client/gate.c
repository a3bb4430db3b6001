/* Iteration boundaries and the gate every GPU-work submission passes.
 *
 * A boundary is found without help: since the job's last submission a synchronising call
 * left none of its work outstanding, and its live memory since then came down to its low
 * point (no higher than at the previous boundary, within a tolerance). At the next
 * submission the iteration is over: it is reported through the job page and, unless the
 * daemon lets the job run freely, the job parks until salusd grants it again. Programs that
 * mark iterations with salus.h turn detection off. */
#include "shim-internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GATE_MAX_STREAMS 64
#define GATE_TOLERANCE_BYTES (1u << 20)
#define GATE_MAX_MISSES 3

static struct {
    pthread_mutex_t lock;
    int started;                 /* the first grant was received */
    int explicit_marks;          /* salus.h in use: no detection */
    int mark_pending;            /* salus_iteration_end() was called */
    int work_since_boundary;
    int quiescent;               /* a sync left no work outstanding since the last submit */
    int misses;                  /* quiescent points above the low point, in a row */
    CUstream streams[GATE_MAX_STREAMS];
    int stream_count;
    int stream_overflow;         /* too many streams to query: only a context sync is idle */
    int per_thread_used;         /* work on per-thread default streams: likewise */
    _Atomic int inflight;        /* submissions between the gate and the driver */
    uint32_t seq;                /* the iteration running now */
    uint64_t iteration_start_ns;
    /* updated by allocations without the gate lock (the memory lock is held then) */
    _Atomic uint64_t min_live_since_quiescent;
    _Atomic uint64_t peak_live;  /* since the last boundary */
    _Atomic int quiescent_flag;  /* mirrors quiescent for the allocation path */
    uint64_t boundary_live;      /* live memory at the last boundary */
    int have_boundary;
} gate = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    struct timespec timeout = {.tv_sec = 1};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &timeout, NULL, 0);
}

static void notify_daemon(void)
{
    uint64_t one = 1;
    ssize_t n = write(shim.notify_fd, &one, sizeof(one));
    (void)n;
}

/* Parks until the daemon grants iteration seq (or lets the job run freely). */
static CUresult park(uint32_t seq)
{
    job_page_t *page = shim.page;
    atomic_store(&page->boundary_seq, seq);
    if (atomic_load(&page->free_run) && atomic_load(&page->grant_seq) + 1 >= seq) {
        atomic_store(&page->grant_seq, seq); /* our own grant: nobody is waiting */
        return CUDA_SUCCESS;
    }
    uint64_t start = shim_now_ns();
    /* another job will use the GPU: hand back the chunks this job does not use now, so that
     * the lane's memory serves the next job */
    if (seq > 1)
        shim_mem_trim();
    atomic_store(&page->waiting, 1);
    notify_daemon();
    for (;;) {
        uint32_t granted = atomic_load(&page->grant_seq);
        if (granted >= seq)
            break;
        if (!shim_session_alive()) {
            atomic_store(&page->waiting, 0);
            LOG_ERROR("lost the connection to salusd while waiting for the GPU");
            return CUDA_ERROR_SYSTEM_NOT_READY;
        }
        futex_wait(&page->grant_seq, granted);
    }
    atomic_store(&page->waiting, 0);
    atomic_fetch_add(&page->wait_ns, shim_now_ns() - start);
    return CUDA_SUCCESS;
}

static int at_low_point(void)
{
    if (!gate.have_boundary)
        return 1;
    uint64_t allowed = gate.boundary_live + GATE_TOLERANCE_BYTES + gate.boundary_live / 16;
    if (atomic_load(&gate.min_live_since_quiescent) <= allowed)
        return 1;
    /* persistent memory may grow for good (optimizer state): re-baseline after a few */
    return ++gate.misses > GATE_MAX_MISSES;
}

/* at_exit: the program may already have freed its persistent memory, so the last
 * iteration keeps the previous boundary's persistent size */
static void end_iteration(uint64_t now, int at_exit)
{
    job_page_t *page = shim.page;
    uint64_t duration = now - gate.iteration_start_ns;
    uint64_t persistent = gate.explicit_marks ? atomic_load(&shim.page->live_bytes)
                                              : atomic_load(&gate.min_live_since_quiescent);
    if (at_exit && gate.have_boundary)
        persistent = gate.boundary_live;
    uint64_t peak = atomic_load(&gate.peak_live);
    uint64_t ephemeral = peak > persistent ? peak - persistent : 0;
    atomic_fetch_add(&page->iterations, 1);
    atomic_store(&page->last_iteration_ns, duration);
    atomic_fetch_add(&page->busy_ns, duration);
    atomic_store(&page->persistent_bytes, persistent);
    if (ephemeral > atomic_load(&page->ephemeral_peak_bytes))
        atomic_store(&page->ephemeral_peak_bytes, ephemeral);
    gate.boundary_live = persistent;
    gate.have_boundary = 1;
    gate.misses = 0;
    atomic_store(&gate.peak_live, atomic_load(&shim.page->live_bytes));
}

/* Allocations pass the gate too (before the memory lock is taken): a job allocates device
 * memory only while it holds its lane, and an allocation that opens a new iteration (all
 * work done, memory at its low point) is a boundary like a submission. They are not work. */
CUresult shim_gate_memory(void)
{
    return shim_gate_enter(NULL, 0, 0);
}

CUresult shim_gate(CUstream stream, int ptds)
{
    return shim_gate_enter(stream, ptds, SHIM_WORK_COPY);
}

CUresult shim_gate_launch(CUstream stream, int ptds)
{
    return shim_gate_enter(stream, ptds, SHIM_WORK_LAUNCH);
}

CUresult shim_gate_enter(CUstream stream, int ptds, int is_work)
{
    CUresult rc = CUDA_SUCCESS;
    if (shim.mode != SHIM_MODE_MANAGED)
        return shim.mode == SHIM_MODE_UNMANAGED ? CUDA_SUCCESS : shim.init_error;
    pthread_mutex_lock(&gate.lock);
    if (!gate.started) {
        gate.seq = 1;
        rc = park(gate.seq);
        gate.started = rc == CUDA_SUCCESS;
        gate.iteration_start_ns = shim_now_ns();
    } else if (atomic_load(&gate.inflight) == 0 &&
               (gate.explicit_marks ? gate.mark_pending
                                    : (gate.quiescent && gate.work_since_boundary && at_low_point()))) {
        /* a marked boundary hands the lane over only once the job's work is done */
        if (gate.explicit_marks && shim.real.cuCtxSynchronize)
            shim.real.cuCtxSynchronize();
        uint64_t now = shim_now_ns();
        end_iteration(now, 0);
        gate.seq++;
        rc = park(gate.seq);
        gate.iteration_start_ns = shim_now_ns();
        gate.work_since_boundary = 0;
        gate.mark_pending = 0;
    }
    if (rc != CUDA_SUCCESS) {
        /* without the daemon the job may not go on unmanaged: fail closed from now on */
        shim.init_error = rc;
        shim.mode = SHIM_MODE_FAILED;
    }
    if (rc == CUDA_SUCCESS && is_work) {
        /* an iteration is made of launches: copies alone (a set-up phase) are not one */
        if (is_work == SHIM_WORK_LAUNCH)
            gate.work_since_boundary = 1;
        gate.quiescent = 0;
        atomic_store(&gate.quiescent_flag, 0);
        atomic_fetch_add(&gate.inflight, 1);
        /* a per-thread default stream can only be queried from its own thread */
        if ((ptds && stream == NULL) || stream == CU_STREAM_PER_THREAD)
            gate.per_thread_used = 1;
        int known = 0;
        for (int i = 0; i < gate.stream_count && !known; i++)
            known = gate.streams[i] == stream;
        if (!known) {
            if (gate.stream_count < GATE_MAX_STREAMS)
                gate.streams[gate.stream_count++] = stream;
            else
                gate.stream_overflow = 1;
        }
    }
    pthread_mutex_unlock(&gate.lock);
    return rc;
}

void shim_after_sync(int whole_context)
{
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    pthread_mutex_lock(&gate.lock);
    int idle = whole_context;
    if (atomic_load(&gate.inflight) > 0)
        idle = 0; /* another thread is submitting right now */
    else if (!idle && !gate.stream_overflow && !gate.per_thread_used) {
        idle = 1;
        for (int i = 0; i < gate.stream_count && idle; i++)
            idle = shim.drv.fn_cuStreamQuery(gate.streams[i]) != CUDA_ERROR_NOT_READY;
    }
    if (idle) {
        gate.quiescent = 1;
        gate.stream_count = 0;
        gate.stream_overflow = 0;
        gate.per_thread_used = 0;
        atomic_store(&gate.min_live_since_quiescent, atomic_load(&shim.page->live_bytes));
        atomic_store(&gate.quiescent_flag, 1);
    }
    pthread_mutex_unlock(&gate.lock);
}

void shim_gate_done(void)
{
    if (shim.mode == SHIM_MODE_MANAGED)
        atomic_fetch_sub(&gate.inflight, 1);
}

void shim_forget_stream(CUstream stream)
{
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    pthread_mutex_lock(&gate.lock);
    for (int i = 0; i < gate.stream_count; i++) {
        if (gate.streams[i] == stream) {
            gate.streams[i] = gate.streams[--gate.stream_count];
            break;
        }
    }
    pthread_mutex_unlock(&gate.lock);
}

/* The allocation path holds the memory lock: these never take the gate lock. */
void shim_note_alloc(uint64_t live_bytes)
{
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    atomic_store(&shim.page->live_bytes, live_bytes);
    uint64_t peak = atomic_load(&gate.peak_live);
    while (live_bytes > peak && !atomic_compare_exchange_weak(&gate.peak_live, &peak, live_bytes))
        ;
}

void shim_note_free(uint64_t live_bytes)
{
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    atomic_store(&shim.page->live_bytes, live_bytes);
    if (!atomic_load(&gate.quiescent_flag))
        return;
    uint64_t low = atomic_load(&gate.min_live_since_quiescent);
    while (live_bytes < low &&
           !atomic_compare_exchange_weak(&gate.min_live_since_quiescent, &low, live_bytes))
        ;
}

int shim_mark_iteration(int begin)
{
    if (shim_init() != CUDA_SUCCESS || shim.mode != SHIM_MODE_MANAGED)
        return 0;
    pthread_mutex_lock(&gate.lock);
    gate.explicit_marks = 1;
    if (!begin && gate.started)
        gate.mark_pending = 1;
    pthread_mutex_unlock(&gate.lock);
    /* begin: pass the gate now, so that the wait happens here and not inside a launch */
    return begin && shim_gate_enter(NULL, 0, SHIM_WORK_NONE) != CUDA_SUCCESS ? -EIO : 0;
}

/* The last iteration has no next submission to reveal its end: count it at exit. */
__attribute__((destructor)) static void gate_at_exit(void)
{
    if (shim.mode != SHIM_MODE_MANAGED || !shim.page)
        return;
    /* a thread may be parked holding the lock: then the last iteration goes unreported */
    if (pthread_mutex_trylock(&gate.lock) != 0)
        return;
    if (gate.started && gate.work_since_boundary)
        end_iteration(shim_now_ns(), 1);
    gate.work_since_boundary = 0;
    pthread_mutex_unlock(&gate.lock);
}

/* A forked child is not the job: it has no session of its own (CUDA in a forked child is
 * unsupported anyway). Without this it would report iterations into its parent's page. */
static void gate_forked_child(void)
{
    shim.mode = SHIM_MODE_FAILED;
    shim.init_error = CUDA_ERROR_NOT_INITIALIZED;
    shim.page = NULL;
    pthread_mutex_init(&gate.lock, NULL);
}

__attribute__((constructor)) static void gate_register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, gate_forked_child);
}
