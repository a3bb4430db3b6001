/* Preemption at the gate (sched_core.h, "Classes"): one shared page per GPU, a memfd salusd
 * creates and hands to the jobs of that GPU that have a gate role (op gate_page). A
 * latency-critical job counts itself in lc_active from the first submission of a request to
 * the synchronisation that ends it (no daemon round trip: the count is up before its own
 * submission reaches the driver); a preemptible best-effort job reads lc_active at each
 * submission (kernel, copy, memset, graph launch) and, while it is not 0, parks on wake_seq
 * (its memory stays; it resumes where it stopped), for at most max_park_ns at a time (then
 * pass_after_park submissions pass before it parks again: the starvation bound), and
 * GATE_LINGER_NS after lc_active came down to 0 (a server's next request follows at once).
 *
 * Work already submitted is not stopped: while a latency-critical job is admitted on its
 * GPU, a preemptible job's thread records an event after every k-th launch (k: inflight) and
 * waits for the previous such event before more pass, so at most 2k of its submissions are
 * in flight (queued on the GPU or between the gate and the driver). A request therefore
 * waits for at most 2k best-effort kernels per submitting best-effort thread of its GPU after
 * its first submission passed the gate.
 *
 * The three bounds are salusd's options (--gate-park-max-ms, --gate-pass-after-park,
 * --gate-inflight), written into the page when salusd creates it; a page of version 1 (an
 * older salusd) has none, and a value out of the GATE_*_MAX bounds is not used: the
 * GATE_DEFAULT_* values apply then. */
#ifndef SALUS_COMMON_GATE_PAGE_H
#define SALUS_COMMON_GATE_PAGE_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GATE_PAGE_MAGIC 0x47415445u /* "GATE" */
#define GATE_PAGE_VERSION 2u /* 2: with the bounds (max_park_ns, pass_after_park, inflight) */
#define GATE_PAGE_BYTES 4096u

#define GATE_DEFAULT_INFLIGHT 2u                       /* k: an event every k launches */
#define GATE_DEFAULT_MAX_PARK_NS (100ull * 1000000ull) /* the longest park at a time */
#define GATE_DEFAULT_PASS_AFTER_PARK 2u                /* submissions that pass after it */
#define GATE_INFLIGHT_MAX 1024u
#define GATE_MAX_PARK_NS_MAX (60000ull * 1000000ull)
#define GATE_PASS_AFTER_PARK_MAX 1000u
/* A parked job that sees lc_active come down to 0 waits this much longer for the next
 * request of a busy server (it starts within microseconds) before it goes on: else each
 * request of a busy period would wait for one more best-effort kernel. */
#define GATE_LINGER_NS (1000000ull)

typedef struct gate_page_s {
    uint32_t magic;
    uint32_t version;
    _Atomic uint32_t lc_active;  /* latency-critical jobs of the GPU with a request going on */
    _Atomic uint32_t wake_seq;   /* futex word: bumped when lc_active comes down to 0 */
    _Atomic uint64_t parks;      /* submissions of preemptible jobs that parked */
    _Atomic uint64_t parked_ns;  /* their time parked */
    /* version 2: the bounds, written by salusd before it hands the page out (0: default) */
    uint64_t max_park_ns;
    uint32_t pass_after_park;
    uint32_t inflight;
} gate_page_t;

/* The bounds a shim applies: the page's, where it has them and they are within bounds. */
typedef struct gate_bounds_s {
    uint64_t max_park_ns;
    uint32_t pass_after_park, inflight;
} gate_bounds_t;

static inline gate_bounds_t gate_page_bounds(const gate_page_t *g)
{
    gate_bounds_t b = {GATE_DEFAULT_MAX_PARK_NS, GATE_DEFAULT_PASS_AFTER_PARK,
                       GATE_DEFAULT_INFLIGHT};
    if (g->version < 2)
        return b;
    if (g->max_park_ns > 0 && g->max_park_ns <= GATE_MAX_PARK_NS_MAX)
        b.max_park_ns = g->max_park_ns;
    if (g->pass_after_park > 0 && g->pass_after_park <= GATE_PASS_AFTER_PARK_MAX)
        b.pass_after_park = g->pass_after_park;
    if (g->inflight > 0 && g->inflight <= GATE_INFLIGHT_MAX)
        b.inflight = g->inflight;
    return b;
}

/* A latency-critical job's request is over (or the job ended during one): its count comes
 * out of lc_active, never below 0, and the GPU's parked jobs are woken when it reaches 0.
 * Called by the job itself, or by salusd for a job that ended, by whichever of the two
 * cleared the job's gate_counted. */
static inline void gate_page_lc_leave(gate_page_t *g)
{
    uint32_t active = atomic_load(&g->lc_active);
    while (active > 0 && !atomic_compare_exchange_weak(&g->lc_active, &active, active - 1))
        ;
    if (active == 1) {
        atomic_fetch_add(&g->wake_seq, 1);
        syscall(SYS_futex, (uint32_t *)&g->wake_seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    }
}

#endif
