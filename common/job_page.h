/* The per-job shared page between salusd and the shim: a memfd the daemon creates, maps and
 * passes to the shim at registration (SCM_RIGHTS). Grants travel through it with a futex, so
 * a switch at an iteration boundary needs no socket round trip:
 *
 *   shim, at a boundary:  boundary_seq = k; if (!free_run) { waiting = 1; write(notify_fd);
 *                         futex-wait on wake_seq until grant_seq >= k; waiting = 0 }
 *   daemon, to grant:     grant_seq = boundary_seq; wake_seq++; FUTEX_WAKE(&wake_seq)
 *
 * A parked job keeps its chunks: a switch moves no memory while the device has room. When a
 * chunk request finds the device full, the daemon asks the parked jobs of that GPU that hold
 * unused chunks to hand them back: trim_request = 1; wake_seq++; FUTEX_WAKE(&wake_seq). So
 * does a job that gave its lane up at a quiescent point (below): it is on the host then, and
 * answers at its next submission (or release); after a request a job hands its unused chunks
 * back at its next turns unasked, as memory is short.
 * (Without JOB_PAGE_FEATURE_WAKE_SEQ the shim waits on grant_seq and trims at every park.)
 *
 * free_run = 1 means no other job waits for this job's GPU: the shim passes boundaries
 * without stopping. Iteration statistics flow the other way through the same page. Both
 * sides check magic and version before using it. All fields are accessed atomically.
 *
 * Lanes held for GPU time (release_ok = 1, salusd --lane-hold gpu): at a quiescent point
 * (a synchronising call left none of the job's work outstanding, its live memory at its low
 * point) the shim ends the iteration and gives its lane up at once, through `lane`:
 *
 *   nobody waits (free_run):  lane = RELEASED (no daemon round trip; unused chunks handed
 *                             back first if lane_shared and memory is short, above); its
 *                             next submission takes it back with CAS RELEASED -> HELD,
 *                             unless the daemon took
 *                             it meanwhile (CAS RELEASED -> TAKEN when another job of the
 *                             lane asks, right after clearing free_run)
 *   someone waits:            (unused chunks as above); lane = GIVEN; write(notify_fd); the
 *                             daemon reports the release (CAS GIVEN -> TAKEN)
 *   next submission, lane TAKEN or GIVEN: it asks for a grant as at a boundary (above)
 *   daemon, to grant:         lane = HELD before grant_seq
 *
 * The shim stores RELEASED and then reads free_run; the daemon stores free_run = 0 and then
 * tries its CAS: one of them sees the other (sequentially consistent), so a release is
 * never missed while another job waits. */
#ifndef SALUS_COMMON_JOB_PAGE_H
#define SALUS_COMMON_JOB_PAGE_H

#include "latency_hist.h"

#include <stdatomic.h>
#include <stdint.h>

#define JOB_PAGE_MAGIC 0x53414c55u /* "SALU" */
/* Fields are only appended, so the version stays: a reader of the first layout ignores what
 * follows it, and a daemon that does not know a later field leaves it 0 (the memfd is zeroed).
 * features says what the daemon serves. */
#define JOB_PAGE_VERSION 1u
#define JOB_PAGE_FEATURE_WAKE_SEQ 1u /* grants and trim requests bump wake_seq */
#define JOB_PAGE_BYTES 4096u

typedef struct job_page_s {
    uint32_t magic;
    uint32_t version;
    /* daemon -> shim */
    _Atomic uint32_t grant_seq;          /* futex word: may start iteration k when >= k */
    _Atomic uint32_t free_run;           /* 1: nobody waits; do not stop at boundaries */
    _Atomic uint64_t budget_bytes;       /* the job's memory budget (changes when learned) */
    /* shim -> daemon */
    _Atomic uint32_t boundary_seq;       /* the iteration the shim wants to start next */
    _Atomic uint32_t waiting;            /* 1 while parked at a boundary */
    _Atomic uint64_t iterations;         /* iterations completed */
    _Atomic uint64_t last_iteration_ns;  /* duration of the last one */
    _Atomic uint64_t busy_ns;            /* sum of iteration durations */
    _Atomic uint64_t live_bytes;         /* device memory the program holds now */
    _Atomic uint64_t mapped_bytes;       /* chunks mapped (the job's footprint) */
    _Atomic uint64_t persistent_bytes;   /* live memory at the last boundary */
    _Atomic uint64_t ephemeral_peak_bytes; /* max over iterations of peak - persistent */
    _Atomic uint64_t wait_ns;            /* time parked at boundaries */
    /* lanes held for GPU time (above) */
    _Atomic uint32_t release_ok;         /* daemon -> shim: give the lane up at quiescent points */
    _Atomic uint32_t lane;               /* JOB_LANE_*: who may use the job's lane turn */
    _Atomic uint32_t lane_shared;        /* daemon -> shim: other jobs are in its lane: unused
                                            chunks may be wanted after a release */
    /* appended, daemon -> shim */
    _Atomic uint32_t features;           /* JOB_PAGE_FEATURE_* */
    _Atomic uint32_t wake_seq;           /* futex word of a parked shim: bumped by each grant
                                          * and trim request (grant_seq is woken too) */
    _Atomic uint32_t trim_request;       /* 1: hand the unused chunks back (parked: now;
                                          * released: at the next submission or release) */
    /* appended, shim -> daemon */
    _Atomic uint32_t trimmed_seq;        /* the boundary at whose park the unused chunks went
                                          * back (nothing more to ask for until it runs) */
    /* appended, shim -> daemon: a latency-critical job's requests (its iterations but the
     * first, which includes its start-up: from the first submission to the quiescent point
     * that ends it; latency_hist.h) */
    _Atomic uint64_t requests;
    _Atomic uint64_t requests_over_target;
    _Atomic uint32_t request_hist[LATENCY_HIST_BUCKETS];
    /* appended, daemon -> shim: the job's role at the gate (SCHED_CORE_GATE_*: 0 none, 1
     * latency-critical, 2 preemptible; gate_page.h), and the GPU whose gate page it uses */
    _Atomic uint32_t gate_role;
    _Atomic uint32_t gate_gpu;
    /* appended, shim -> daemon: 1 while the job (latency-critical) is counted in its GPU's
     * gate page; salusd takes it out when the job ends counted */
    _Atomic uint32_t gate_counted;
} job_page_t;

enum {
    JOB_LANE_HELD = 0,     /* the job holds its lane (granted, or taken back) */
    JOB_LANE_RELEASED = 1, /* given up while nobody waited: the shim may take it back */
    JOB_LANE_GIVEN = 2,    /* given up for a waiting job: the daemon reports it */
    JOB_LANE_TAKEN = 3,    /* the daemon reported the release: the next turn needs a grant */
};

#endif
