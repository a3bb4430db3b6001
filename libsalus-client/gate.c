/* Iteration boundaries and the gate every GPU-work submission passes.
 *
 * A boundary is found without help: since the job's last submission a synchronising call
 * left none of its work outstanding, and its live memory since then came down to its low
 * point (no higher than at the previous boundary, within a tolerance). When salusd holds
 * lanes for GPU time (job_page.h, release_ok) the iteration ends right there, at the
 * synchronising call or the free that reached the low point: the job gives its lane up at
 * once (its host time holds nothing) and takes it back at its next submission or
 * allocation, asking salusd for a grant only if the lane was taken meanwhile. Otherwise
 * (salusd --lane-hold iteration, or a low point that only the re-baselining below accepts)
 * the iteration is over at the next submission: it is reported through the job page and,
 * unless the daemon lets the job run freely, the job parks until salusd grants it again.
 * Programs that mark iterations with salus.h turn detection off.
 *
 * The hot path takes no lock. Each thread keeps its own record: its submissions in flight
 * (a counter on its own cache line) and what it learned the last time it passed the gate's
 * slow path: the gate's epoch then, and the streams it submitted to. The epoch changes,
 * under the gate lock, whenever what a thread learned may stop being true: a synchronising
 * call (a boundary may follow), a stream destroyed, an iteration marked. While the epoch
 * it saw is current, no boundary can be due, the stream is known and the iteration has
 * work: a submission then only counts itself in flight and checks the epoch once more
 * (both sequentially consistent, so that a synchronising call either sees it in flight or
 * it sees the new epoch and takes the slow path). */
#include "shim-internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GATE_MAX_STREAMS 64
#define GATE_TOLERANCE_BYTES (1u << 20)
#define GATE_MAX_MISSES 3
#define GATE_THREAD_STREAMS 4 /* streams a thread remembers between two epochs */

/* One per thread that passed the gate; reused once its thread ended. Only its own thread
 * writes it, except inflight's readers and the list (gate lock). */
typedef struct gate_thread_s {
    _Atomic int inflight;        /* its submissions between the gate and the driver */
    _Atomic int in_use;
    struct gate_thread_s *next;
    /* learned in the slow path; valid while epoch is the gate's */
    uint64_t epoch;              /* 0: nothing learned */
    int launched;                /* the iteration has a launch already */
    int stream_count;
    CUstream streams[GATE_THREAD_STREAMS];
    int ptds[GATE_THREAD_STREAMS];
} __attribute__((aligned(64))) gate_thread_t;

/* written only under the gate lock, read by every submission: a cache line of its own */
static struct {
    _Atomic uint64_t epoch;
} __attribute__((aligned(64))) gate_epoch = {.epoch = 1};

static __thread gate_thread_t *gate_self;
static gate_thread_t *gate_threads; /* under the gate lock */
static pthread_key_t gate_thread_key;
static pthread_once_t gate_key_once = PTHREAD_ONCE_INIT;

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
    uint32_t seq;                /* the iteration running now */
    uint64_t iteration_start_ns;
    /* updated by allocations without the gate lock (the memory lock is held then) */
    _Atomic uint64_t min_live_since_quiescent;
    _Atomic uint64_t peak_live;  /* since the last boundary */
    _Atomic int quiescent_flag;  /* mirrors quiescent for the allocation path */
    uint64_t boundary_live;      /* live memory at the last boundary */
    int have_boundary;
    int released;                /* the lane was given up at a quiescent point */
    _Atomic int low_point_check; /* a free while quiescent: see whether the lane can go */
} gate = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Called with the gate lock held: what a thread learned may no longer hold. Sequentially
 * consistent, so that the in-flight counts read after it include every submission that
 * did not see the new epoch. */
static void invalidate_fast_paths(void)
{
    atomic_fetch_add(&gate_epoch.epoch, 1);
}

static void thread_ended(void *record)
{
    gate_thread_t *me = record;
    me->epoch = 0;
    atomic_store(&me->in_use, 0);
}

static void make_thread_key(void)
{
    pthread_key_create(&gate_thread_key, thread_ended);
}

/* With the gate lock held: this thread's record (NULL: out of memory). */
static gate_thread_t *thread_record(void)
{
    if (gate_self)
        return gate_self;
    pthread_once(&gate_key_once, make_thread_key);
    gate_thread_t *me = gate_threads;
    while (me && atomic_load(&me->in_use))
        me = me->next;
    if (!me) {
        me = aligned_alloc(_Alignof(gate_thread_t), sizeof(*me));
        if (!me)
            return NULL;
        *me = (gate_thread_t){.next = gate_threads};
        gate_threads = me;
    }
    me->epoch = 0;
    me->stream_count = 0;
    atomic_store(&me->in_use, 1);
    pthread_setspecific(gate_thread_key, me);
    gate_self = me;
    return me;
}

/* With the gate lock held: submissions of every thread between the gate and the driver. */
static int inflight_total(void)
{
    int total = 0;
    for (gate_thread_t *t = gate_threads; t; t = t->next)
        total += atomic_load(&t->inflight);
    return total;
}

/* With the gate lock held, after this thread's submission passed: remember what makes its
 * next submission to the same stream free of the lock, if nothing can be due before the
 * epoch changes (a boundary needs a synchronising call or a mark first). */
static void learn(gate_thread_t *me, CUstream stream, int ptds, int is_work)
{
    uint64_t epoch = atomic_load(&gate_epoch.epoch);
    if (gate.quiescent || gate.mark_pending || !gate.started || gate.released) {
        me->epoch = 0;
        return;
    }
    if (me->epoch != epoch) {
        me->epoch = epoch;
        me->stream_count = 0;
    }
    me->launched = gate.work_since_boundary;
    if (!is_work)
        return;
    for (int i = 0; i < me->stream_count; i++)
        if (me->streams[i] == stream && me->ptds[i] == ptds)
            return;
    int slot = me->stream_count < GATE_THREAD_STREAMS ? me->stream_count++
                                                       : (int)((uintptr_t)stream % GATE_THREAD_STREAMS);
    me->streams[slot] = stream;
    me->ptds[slot] = ptds;
}

static inline int knows_stream(const gate_thread_t *me, CUstream stream, int ptds)
{
    for (int i = 0; i < me->stream_count; i++)
        if (me->streams[i] == stream && me->ptds[i] == ptds)
            return 1;
    return 0;
}

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

/* The hand-over of the lane, from the parking side. The baseline is the mechanism as it was
 * before switches were made fast: the unused chunks go back at every park, before the daemon
 * hears of the boundary, and the shim waits on grant_seq. It serves a daemon without
 * JOB_PAGE_FEATURE_WAKE_SEQ, and SALUS_SWITCH_BASELINE=1 selects it for
 * benchmarks/switch-latency.sh. Otherwise a parked job keeps its chunks (a switch moves no
 * memory while the device has room) and hands them back when the daemon asks (trim_request).
 * Decided once, under the gate lock. */
static int switch_baseline(const job_page_t *page)
{
    static int baseline = -1;
    if (baseline < 0) {
        const char *v = getenv("SALUS_SWITCH_BASELINE");
        baseline = (v && v[0] == '1' && v[1] == 0) ||
                   !(atomic_load(&page->features) & JOB_PAGE_FEATURE_WAKE_SEQ);
    }
    return baseline;
}

/* salusd went away while the job waits for a grant: it waits here for a restarted one
 * (reattach.c), which gets the same job page; -1 if none came back */
static int daemon_gone_recovered(void)
{
    if (shim_session_alive() && !shim_daemon_lost())
        return 0;
    return shim_session_recover() < 0 ? -1 : 1;
}

/* The baseline wait: on grant_seq, which the daemon also wakes. */
static CUresult wait_for_grant_baseline(job_page_t *page, uint32_t seq)
{
    for (;;) {
        uint32_t granted = atomic_load(&page->grant_seq);
        if (granted >= seq)
            return CUDA_SUCCESS;
        int gone = daemon_gone_recovered();
        if (gone < 0)
            return CUDA_ERROR_SYSTEM_NOT_READY;
        if (gone == 0)
            futex_wait(&page->grant_seq, granted);
    }
}

/* Parks left during which the job trims unasked, after it was last asked: while the GPU is
 * short of memory the chunks go back before the daemon hears of the boundary, as in the
 * baseline, so that the next job's request does not wait for them (trimming after it, in
 * the shadow of the switch, measured a p99 five times longer on 2 cores: the next job's
 * request then waited for them); when memory is no longer short they stay again. */
#define GATE_TRIM_PARKS 16
static int trim_parks_left; /* under the gate lock */

/* Whether the unused chunks go back now, at a park or at a release with lane-mates: always
 * in the baseline; else when the daemon asked (trim_request, left pending while the job ran
 * or was on the host after a release, where it cannot answer) and for GATE_TRIM_PARKS
 * turns after that. */
static int trim_now(job_page_t *page)
{
    if (switch_baseline(page))
        return 1;
    if (atomic_load(&page->trim_request) && atomic_exchange(&page->trim_request, 0)) {
        trim_parks_left = GATE_TRIM_PARKS;
        return 1;
    }
    if (trim_parks_left > 0) {
        trim_parks_left--;
        return 1;
    }
    return 0;
}

/* Waits on wake_seq, which the daemon bumps for a grant and for a trim request, so neither
 * is missed between the checks and the futex wait. A request left when the grant came is
 * kept: the job then trims at its next park. */
static CUresult wait_for_grant(job_page_t *page, uint32_t seq)
{
    for (;;) {
        uint32_t wake = atomic_load(&page->wake_seq);
        if (atomic_load(&page->grant_seq) >= seq)
            return CUDA_SUCCESS;
        if (atomic_load(&page->trim_request) && atomic_exchange(&page->trim_request, 0)) {
            if (atomic_load(&page->trimmed_seq) != seq)
                shim_mem_trim();
            atomic_store(&page->trimmed_seq, seq);
            trim_parks_left = GATE_TRIM_PARKS;
            continue;
        }
        int gone = daemon_gone_recovered();
        if (gone < 0)
            return CUDA_ERROR_SYSTEM_NOT_READY;
        if (gone == 0)
            futex_wait(&page->wake_seq, wake);
    }
}

/* Parks until the daemon grants iteration seq (or lets the job run freely). */
static CUresult park(uint32_t seq)
{
    job_page_t *page = shim.page;
    atomic_store(&page->boundary_seq, seq);
    if (atomic_load(&page->free_run) && atomic_load(&page->grant_seq) + 1 >= seq &&
        !shim_daemon_lost()) {
        atomic_store(&page->grant_seq, seq); /* our own grant: nobody is waiting */
        return CUDA_SUCCESS;
    }
    uint64_t start = shim_now_ns();
    int baseline = switch_baseline(page);
    /* hand back the chunks this job does not use now, so that the lane's memory serves the
     * next job: at every park in the baseline; now only while the GPU is short of memory
     * (else when the daemon asks, in wait_for_grant) */
    if (seq > 1 && trim_now(page)) {
        shim_mem_trim();
        atomic_store(&page->trimmed_seq, seq);
    }
    shim_mem_lane_give_up(); /* the lane goes: its shared chunks too (lane_memory.c) */
    atomic_store(&page->waiting, 1);
    notify_daemon();
    CUresult rc = baseline ? wait_for_grant_baseline(page, seq) : wait_for_grant(page, seq);
    atomic_store(&page->waiting, 0);
    if (rc == CUDA_SUCCESS)
        atomic_fetch_add(&page->wait_ns, shim_now_ns() - start);
    return rc;
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
    shim_class_request_done(page, duration);
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

/* ---- lanes held for GPU time (job_page.h): when the job gives its lane up, and takes it
 * back. With the gate lock held. */

/* The live memory is at its low point now: no higher than at the last boundary. No
 * tolerance here: a release at the first of several frees within it would measure the
 * persistent size a little high, and the next low point from there, creeping upwards.
 * Without a previous boundary there is nothing to compare with: the first boundary is found
 * at the next submission (below), which sees the frees that follow the synchronising call;
 * so are boundaries within the tolerance, and re-baselining after persistent growth. */
static int at_low_point_now(void)
{
    return gate.have_boundary && atomic_load(&gate.min_live_since_quiescent) <= gate.boundary_live;
}

/* At a quiescent point (after a synchronising call, or a free while quiescent): if the
 * iteration's work is all done and its memory at its low point, the iteration ends and the
 * lane goes: kept for an instant take-back while nobody waits, else given (unused chunks
 * handed back first) and salusd told. */
/* Hands back the unused chunks at a release; a trim request pending is answered by it. */
static void release_trim(job_page_t *page)
{
    if (atomic_load(&page->trim_request))
        atomic_store(&page->trim_request, 0);
    shim_mem_trim();
}

static void release_at_quiescent_point(void)
{
    job_page_t *page = shim.page;
    if (!gate.started || gate.released || gate.explicit_marks || !gate.quiescent ||
        !gate.work_since_boundary || !atomic_load(&page->release_ok) || inflight_total() > 0 ||
        !at_low_point_now())
        return;
    end_iteration(shim_now_ns(), 0);
    gate.seq++;
    gate.work_since_boundary = 0;
    gate.released = 1;
    invalidate_fast_paths();
    shim_mem_lane_give_up(); /* the lane goes: its shared chunks too (lane_memory.c) */
    /* alone in its lane it keeps its chunks; with lane-mates it hands back those it does not
     * use (as the baseline does). Keeping them while the GPU has room makes such a switch move
     * no memory, but a job on the host cannot answer a trim request: on a full GPU its
     * lane-mate then waited for this job's next submission, which for servers idle between
     * requests cost lane-mates up to a request period per shortage (the inference validation
     * trace: +7 % against the simulator, +24 % under load). Parked jobs, which answer at once,
     * keep theirs while the GPU has room (trim_now). */
    int trimmed = 0;
    if (atomic_load(&page->free_run)) {
        if (atomic_load(&page->lane_shared)) {
            release_trim(page);
            trimmed = 1;
        }
        atomic_store(&page->lane, JOB_LANE_RELEASED);
        if (atomic_load(&page->free_run))
            return; /* salusd clears free_run before it takes a released lane */
    }
    /* another job waits for the lane: the unused chunks go back before the lane does */
    if (!trimmed)
        release_trim(page);
    uint32_t lane = atomic_load(&page->lane);
    if (lane != JOB_LANE_TAKEN &&
        atomic_compare_exchange_strong(&page->lane, &lane, JOB_LANE_GIVEN))
        notify_daemon();
}

/* The first submission or allocation after a release: the lane back at once if nobody took
 * it, else a wait for salusd's grant. The held time of the iteration starts now. */
static CUresult take_lane_back(void)
{
    job_page_t *page = shim.page;
    uint32_t released = JOB_LANE_RELEASED;
    CUresult rc = CUDA_SUCCESS;
    if (atomic_compare_exchange_strong(&page->lane, &released, JOB_LANE_HELD)) {
        atomic_store(&page->boundary_seq, gate.seq);
        atomic_store(&page->grant_seq, gate.seq); /* our own grant: nobody waits */
        /* asked for its unused chunks while on the host (another lane of the GPU is short) */
        if (atomic_load(&page->trim_request) && !switch_baseline(page) && trim_now(page))
            shim_mem_trim();
    } else {
        rc = park(gate.seq);
    }
    gate.released = 0;
    gate.quiescent = 0;
    atomic_store(&gate.quiescent_flag, 0);
    gate.iteration_start_ns = shim_now_ns();
    return rc;
}

/* Allocations pass the gate too (before the memory lock is taken): a job allocates device
 * memory only while it holds its lane, and an allocation that opens a new iteration (all
 * work done, memory at its low point) is a boundary like a submission. They are not work. */
CUresult shim_gate_memory(void)
{
    return shim_gate_enter(NULL, 0, SHIM_WORK_NONE, NULL);
}

CUresult shim_gate(CUstream stream, int ptds, shim_gate_ticket_t *ticket)
{
    return shim_gate_enter(stream, ptds, SHIM_WORK_COPY, ticket);
}

CUresult shim_gate_launch(CUstream stream, int ptds, shim_gate_ticket_t *ticket)
{
    return shim_gate_enter(stream, ptds, SHIM_WORK_LAUNCH, ticket);
}

static CUresult gate_enter_slow(CUstream stream, int ptds, int is_work, shim_gate_ticket_t *ticket)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&gate.lock);
    gate_thread_t *me = thread_record();
    if (!me) {
        pthread_mutex_unlock(&gate.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (shim.mode != SHIM_MODE_MANAGED) {
        /* the session failed while this thread waited for the lock */
        rc = shim.mode == SHIM_MODE_UNMANAGED ? CUDA_SUCCESS : shim.init_error;
        pthread_mutex_unlock(&gate.lock);
        return rc;
    }
    if (!gate.started) {
        gate.seq = 1;
        rc = park(gate.seq);
        gate.started = rc == CUDA_SUCCESS;
        gate.iteration_start_ns = shim_now_ns();
    } else if (gate.released) {
        rc = take_lane_back();
    } else if (inflight_total() == 0 &&
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
        atomic_fetch_add(&me->inflight, 1);
        *ticket = me;
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
    if (rc == CUDA_SUCCESS)
        learn(me, stream, ptds, is_work);
    pthread_mutex_unlock(&gate.lock);
    return rc;
}

CUresult shim_gate_enter(CUstream stream, int ptds, int is_work, shim_gate_ticket_t *ticket)
{
    if (ticket)
        *ticket = NULL;
    if (__builtin_expect(shim.mode != SHIM_MODE_MANAGED, 0))
        return shim.mode == SHIM_MODE_UNMANAGED ? CUDA_SUCCESS : shim.init_error;
    uint32_t role = atomic_load_explicit(&shim.page->gate_role, memory_order_relaxed);
    if (__builtin_expect(role != 0, 0)) /* preemption at the gate (gate_preempt.c) */
        shim_gate_preempt(stream, ptds, is_work, role);
    gate_thread_t *me = gate_self;
    if (__builtin_expect(me != NULL && me->epoch != 0, 1)) {
        if (!is_work) {
            if (me->epoch == atomic_load(&gate_epoch.epoch))
                return CUDA_SUCCESS;
        } else if ((is_work != SHIM_WORK_LAUNCH || me->launched) && knows_stream(me, stream, ptds)) {
            atomic_fetch_add(&me->inflight, 1);
            if (__builtin_expect(me->epoch == atomic_load(&gate_epoch.epoch), 1)) {
                *ticket = me;
                return CUDA_SUCCESS;
            }
            atomic_fetch_sub(&me->inflight, 1);
        }
    }
    return gate_enter_slow(stream, ptds, is_work, ticket);
}

void shim_after_sync(int whole_context)
{
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    pthread_mutex_lock(&gate.lock);
    invalidate_fast_paths(); /* before the in-flight counts are read */
    int idle = whole_context;
    if (inflight_total() > 0)
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
        shim_gate_preempt_idle(); /* a latency-critical job's request is over */
        release_at_quiescent_point();
    }
    pthread_mutex_unlock(&gate.lock);
}

/* After a free, outside the memory lock: a free that brought a quiescent job's memory down
 * to its low point may end its iteration (its lane goes). Costs one load otherwise. The
 * caller may hold its own lock (virtual-memory and charged frees) while another thread waits
 * for a grant with the gate lock held: then the release waits for the next synchronising
 * call or submission instead of this thread waiting for the grant. */
void shim_gate_after_free(void)
{
    if (!atomic_load(&gate.low_point_check) || shim.mode != SHIM_MODE_MANAGED)
        return;
    if (pthread_mutex_trylock(&gate.lock) != 0)
        return;
    atomic_store(&gate.low_point_check, 0);
    if (gate.quiescent)
        release_at_quiescent_point();
    pthread_mutex_unlock(&gate.lock);
}

void shim_gate_done(shim_gate_ticket_t ticket)
{
    /* only its thread writes the count: no read-modify-write needed */
    if (ticket)
        atomic_store_explicit(&ticket->inflight,
                              atomic_load_explicit(&ticket->inflight, memory_order_relaxed) - 1,
                              memory_order_release);
}

void shim_forget_stream(CUstream stream)
{
    if (shim.mode != SHIM_MODE_MANAGED)
        return;
    pthread_mutex_lock(&gate.lock);
    invalidate_fast_paths(); /* a new stream may get the handle */
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
    if (atomic_load(&shim.page->release_ok))
        atomic_store(&gate.low_point_check, 1);
}

int shim_mark_iteration(int begin)
{
    if (shim_init() != CUDA_SUCCESS || shim.mode != SHIM_MODE_MANAGED)
        return 0;
    pthread_mutex_lock(&gate.lock);
    gate.explicit_marks = 1;
    if (!begin && gate.started)
        gate.mark_pending = 1;
    invalidate_fast_paths();
    pthread_mutex_unlock(&gate.lock);
    /* begin: pass the gate now, so that the wait happens here and not inside a launch */
    return begin && shim_gate_enter(NULL, 0, SHIM_WORK_NONE, NULL) != CUDA_SUCCESS ? -EIO : 0;
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
