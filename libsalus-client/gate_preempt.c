/* Job classes at the shim: a latency-critical job (salusctl run --latency-target MS) says so
 * at registration; salusd's scheduling core then knows its class and target (sched_core.h,
 * "Classes"), and its requests (iterations) are counted in its page. Under a policy with
 * gate preemption (slo) the core gives each job of a GPU with a latency-critical job a role
 * at the gate: the latency-critical job counts its requests in the GPU's gate page, the
 * preemptible best-effort jobs park at their next submission while one goes on, and bound
 * their submissions in flight (gate_page.h). */
#include "shim-internal.h"
#include "gate_page.h"
#include "proto.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A time in milliseconds from the environment, in ns; 0 when unset or not a time. */
static uint64_t env_ms_ns(const char *name)
{
    const char *v = getenv(name);
    char *end = NULL;
    double ms = v && *v ? strtod(v, &end) : 0.0;
    return end && !*end && ms > 0.0 && ms <= 3600000.0 ? (uint64_t)(ms * 1e6) : 0;
}

int shim_class_fields(void)
{
    return (env_ms_ns("SALUS_LATENCY_TARGET_MS") > 0) + (env_ms_ns("SALUS_REQUEST_MS") > 0);
}

void shim_class_pack(msgpack_packer *pk)
{
    uint64_t target = env_ms_ns("SALUS_LATENCY_TARGET_MS"), request = env_ms_ns("SALUS_REQUEST_MS");
    if (target)
        proto_pack_kv_uint(pk, "latency_target_ns", target);
    if (request)
        proto_pack_kv_uint(pk, "request_ns", request);
}

void shim_class_request_done(job_page_t *page, uint64_t duration_ns)
{
    static uint64_t target_ns = UINT64_MAX; /* read once (UINT64_MAX: not yet) */
    if (target_ns == UINT64_MAX)
        target_ns = env_ms_ns("SALUS_LATENCY_TARGET_MS");
    if (!target_ns)
        return; /* best-effort */
    if (atomic_load(&page->iterations) <= 1)
        return; /* the first iteration includes the program's start-up: not a request */
    atomic_fetch_add(&page->requests, 1);
    if (duration_ns > target_ns)
        atomic_fetch_add(&page->requests_over_target, 1);
    atomic_fetch_add(&page->request_hist[latency_hist_bucket(duration_ns)], 1);
}

/* ---- preemption at the gate (gate_page.h) ---------------------------------------------------
 * The job page says the job's role (gate_role, from the scheduling core's GATE effects); the
 * GPU's gate page comes from salusd at the first submission that needs it. */

/* (its bounds, gate_page_bounds, are written by salusd before it hands the page out) */
static _Atomic(gate_page_t *) gate_page_mapped;
static _Atomic int gate_page_failed;
static pthread_mutex_t gate_page_lock = PTHREAD_MUTEX_INITIALIZER;
/* a latency-critical job: counted in the page's lc_active now (a request going on) */
static _Atomic int lc_counted;

/* The GPU's gate page, asked for once; NULL when salusd has none (then nobody is parked). */
static gate_page_t *gate_page(void)
{
    gate_page_t *p = atomic_load(&gate_page_mapped);
    if (p || atomic_load(&gate_page_failed))
        return p;
    pthread_mutex_lock(&gate_page_lock);
    p = atomic_load(&gate_page_mapped);
    if (!p && !atomic_load(&gate_page_failed)) {
        char err[256] = "";
        proto_msg_t reply;
        int fd = -1, nfds = 0;
        pthread_mutex_lock(&shim.client_lock);
        salus_client_begin(&shim.client, "gate_page", 0);
        int rc = shim.client.fd >= 0 ? salus_client_call_fds(&shim.client, &reply, err,
                                                             sizeof(err), 5000, &fd, 1, &nfds)
                                     : -ECONNRESET;
        pthread_mutex_unlock(&shim.client_lock);
        if (rc == 0) {
            proto_msg_free(&reply);
            void *m = nfds == 1 ? mmap(NULL, GATE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
                                       fd, 0)
                                : MAP_FAILED;
            if (nfds == 1)
                close(fd);
            if (m != MAP_FAILED && ((gate_page_t *)m)->magic == GATE_PAGE_MAGIC) {
                p = m;
            } else if (m != MAP_FAILED) {
                munmap(m, GATE_PAGE_BYTES);
            }
        }
        if (p) {
            gate_bounds_t b = gate_page_bounds(p);
            LOG_INFO("gate page from salusd: parks of at most %llu ms, then %u submissions "
                     "pass; an event every %u launches",
                     (unsigned long long)(b.max_park_ns / 1000000ull), b.pass_after_park,
                     b.inflight);
            atomic_store(&gate_page_mapped, p);
        } else {
            LOG_WARN("no gate page from salusd (%s): this job is not parked for "
                     "latency-critical jobs", rc < 0 ? err : "a malformed reply");
            atomic_store(&gate_page_failed, 1);
        }
    }
    pthread_mutex_unlock(&gate_page_lock);
    return p;
}

static void gate_futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec timeout = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                               .tv_nsec = (long)(timeout_ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &timeout, NULL, 0);
}

/* A preemptible job's thread: what it submitted while a latency-critical job was admitted. */
static __thread struct {
    uint32_t launches;  /* launches counted for the in-flight bound */
    CUevent event;      /* recorded after every k-th launch (inflight) */
    int event_pending;
    uint32_t pass_left; /* after a park that reached max_park_ns: submissions that pass */
} gate_thread;

/* Parks while a latency-critical job of the GPU has a request going on, at most max_park_ns;
 * then pass_after_park submissions pass before the next park. */
static void park_for_latency_critical(gate_page_t *g)
{
    gate_bounds_t bounds = gate_page_bounds(g);
    uint64_t max_park_ns = bounds.max_park_ns;
    if (gate_thread.pass_left > 0) {
        gate_thread.pass_left--;
        return;
    }
    if (!atomic_load(&g->lc_active))
        return;
    uint64_t start = shim_now_ns(), now = start;
    for (;;) {
        uint32_t seq = atomic_load(&g->wake_seq);
        if (!atomic_load(&g->lc_active)) {
            /* the request is over: a busy server's next one follows at once */
            struct timespec linger = {.tv_sec = 0, .tv_nsec = (long)GATE_LINGER_NS};
            nanosleep(&linger, NULL);
            if (!atomic_load(&g->lc_active))
                break;
            continue;
        }
        now = shim_now_ns();
        if (now - start >= max_park_ns) {
            gate_thread.pass_left = bounds.pass_after_park;
            break;
        }
        gate_futex_wait(&g->wake_seq, seq, max_park_ns - (now - start));
    }
    atomic_fetch_add(&g->parks, 1);
    atomic_fetch_add(&g->parked_ns, shim_now_ns() - start);
}

/* At most 2k launches of this thread in flight (k: inflight): an event after every k-th
 * launch, the previous one waited for first. Real driver calls only (no gate, no
 * boundary). */
static void bound_in_flight(const gate_page_t *g, CUstream stream, int ptds)
{
    if (++gate_thread.launches % gate_page_bounds(g).inflight != 0)
        return;
    if (!gate_thread.event) {
        if (!shim.real.cuEventCreate ||
            shim.real.cuEventCreate(&gate_thread.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            gate_thread.event = NULL;
            return;
        }
    } else if (gate_thread.event_pending && shim.real.cuEventSynchronize) {
        shim.real.cuEventSynchronize(gate_thread.event);
    }
    CUstream s = ptds && stream == NULL ? CU_STREAM_PER_THREAD : stream;
    gate_thread.event_pending = shim.real.cuEventRecord &&
                                shim.real.cuEventRecord(gate_thread.event, s) == CUDA_SUCCESS;
}

/* The role this job last acted in, logged when it changes (salusctl run's output says
 * whether a job is parked for latency-critical ones). */
static _Atomic uint32_t gate_role_seen;

CUresult shim_gate_preempt(CUstream stream, int ptds, int is_work, uint32_t role)
{
    if (!is_work)
        return CUDA_SUCCESS; /* allocations are not GPU work */
    if (atomic_load_explicit(&gate_role_seen, memory_order_relaxed) != role &&
        atomic_exchange(&gate_role_seen, role) != role)
        LOG_INFO("gate role: %s", role == SHIM_GATE_LC ? "latency-critical (its requests go "
                                                         "first)"
                                                       : "preemptible (parks while a "
                                                         "latency-critical job has a request)");
    gate_page_t *g = gate_page();
    if (!g)
        return CUDA_SUCCESS;
    if (role == SHIM_GATE_LC) {
        /* before its submission reaches the driver: a best-effort submission that reads
         * the count after this parks */
        if (!atomic_load(&lc_counted) && !atomic_exchange(&lc_counted, 1)) {
            atomic_fetch_add(&g->lc_active, 1);
            atomic_store(&shim.page->gate_counted, 1); /* salusd takes it out if we die */
        }
        return CUDA_SUCCESS;
    }
    if (role != SHIM_GATE_PREEMPTIBLE)
        return CUDA_SUCCESS;
    park_for_latency_critical(g);
    if (is_work == SHIM_WORK_LAUNCH)
        bound_in_flight(g, stream, ptds);
    return CUDA_SUCCESS;
}

void shim_gate_preempt_idle(void)
{
    if (!atomic_load(&lc_counted) || !atomic_exchange(&lc_counted, 0))
        return;
    gate_page_t *g = atomic_load(&gate_page_mapped);
    /* whoever clears gate_counted takes the count out: this job, or salusd when it ended */
    if (!g || !atomic_exchange(&shim.page->gate_counted, 0))
        return;
    gate_page_lc_leave(g);
}

void shim_gate_preempt_reattached(void)
{
    /* the previous daemon's page stays mapped (a thread may be parked on it, for at most a
     * park's length): only the pointer goes, and the next submission asks the new daemon.
     * Called with the client lock held, so not under gate_page_lock (taken before it); a
     * gate_page() in progress waits for the client lock and asks the new daemon. */
    gate_page_t *old = atomic_exchange(&gate_page_mapped, NULL);
    atomic_store(&gate_page_failed, 0);
    /* a request counted there: out of it (its parked jobs go on); the next submission
     * counts it in the new page */
    if (atomic_exchange(&lc_counted, 0) && shim.page &&
        atomic_exchange(&shim.page->gate_counted, 0) && old)
        gate_page_lc_leave(old);
}

/* A latency-critical job that ends with a request going on is not counted any more. */
__attribute__((destructor)) static void gate_preempt_at_exit(void)
{
    if (shim.mode == SHIM_MODE_MANAGED && shim.page)
        shim_gate_preempt_idle();
}
