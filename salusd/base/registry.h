/* The daemon's job registry: every job a client registered, with the identity the
 * kernel vouched for (SO_PEERCRED), not the identity the client claimed. */
#ifndef SALUS_SALUSD_REGISTRY_H
#define SALUS_SALUSD_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define REGISTRY_NAME_BYTES 64

/* A job's state as the registry keeps it. "running" is none of them: whether an admitted job
 * runs (holds its lane) is the scheduling core's to know, so the registry keeps it JOB_PAUSED
 * and jobs_state (jobs.h) shows it "running" while the core's books say it holds its lane. */
typedef enum job_state {
    JOB_WAITING = 0,
    JOB_PAUSED,  /* admitted */
    JOB_DONE,    /* exited with status 0 */
    JOB_FAILED,  /* exited with a non-zero status, or refused */
    JOB_KILLED,  /* ended by a signal */
    JOB_ENDED,   /* ended, status unknown (no supervisor, the kernel did not say) */
    JOB_STATE_COUNT
} job_state_t;

/* The name jobs_state shows an admitted job with while it holds its lane. */
#define JOB_STATE_RUNNING_NAME "running"
/* Every name a job's state is shown with (jobs_state), in the order /metrics lists them:
 * job_state_name's, with "running" after "waiting". "unknown" past the end. */
#define JOB_SHOWN_STATE_COUNT (JOB_STATE_COUNT + 1)
const char *job_shown_state_name(size_t index);

/* 1 for the states a job ends in (done, failed, killed, ended). */
#define JOB_STATE_IS_FINAL(s) ((s) >= JOB_DONE && (s) < JOB_STATE_COUNT)

/* What the job page last said (kept after the job ends). */
typedef struct job_stats_s {
    uint64_t iterations;
    uint64_t persistent_bytes;
    uint64_t ephemeral_peak_bytes;
    uint64_t live_bytes;
    uint64_t busy_ns;
    uint64_t wait_ns;
    /* a latency-critical job's requests (its iterations): how many, how many took longer
     * than its target, and percentiles of their latency (latency_hist.h; 0: none yet) */
    uint64_t requests, requests_over_target;
    uint64_t request_p50_ns, request_p95_ns, request_p99_ns;
} job_stats_t;

typedef struct job_s {
    uint64_t id;
    char name[REGISTRY_NAME_BYTES];
    pid_t pid;
    uid_t uid;
    gid_t gid;
    job_state_t state;
    uint64_t registered_ns;
    void *owner;              /* the connection that registered it (opaque here) */
    /* where its process runs (access.c): its pid namespace (0: unknown) and the container
     * id read from its cgroup path (12 hex digits; empty: none) */
    uint64_t pidns_ino;
    char container[16];
    /* hints from the job (0: not given) */
    uint64_t iterations_expected;
    uint64_t persistent_hint_bytes;
    uint64_t ephemeral_hint_bytes;
    int64_t priority;
    uint64_t latency_target_ns; /* > 0: latency-critical (salusctl run --latency-target) */
    uint64_t request_ns;        /* its expected GPU time per request (--request-ms) */
    int gpu_pinned;           /* it may run on pinned_gpu only (SALUS_GPU) */
    int pinned_gpu;
    /* where a live job runs (GPU, lane, budget) is the scheduling core's (jobs_info_at) */
    uint64_t committed_bytes; /* chunks handed out */
    /* a job without hints: the sizes the scheduling core learned for it (LEARNED effect) */
    int sizes_learned;
    uint64_t learned_persistent_bytes, learned_ephemeral_bytes;
    uint64_t admitted_ns;
    uint64_t finished_ns;
    /* how it ended, when known: exit_status (exited) or exit_signal (killed); 0 unknown */
    int exit_known;
    int exit_status;
    int exit_signal;
    /* where it ran, written once when it left (finish): -1 / 0 when it was never admitted */
    int end_gpu;
    int end_lane;
    uint64_t end_budget_bytes;
    void *exit_probe;         /* jobs.c: asks the kernel for the exit status; NULL: done */
    /* a rank of a group (groups.c; group_id 0: a single job): what the scheduling core is
     * told at registration (gpu_sched.c), and its gang wait when it left the core */
    uint64_t group_id;
    uint32_t group_world, group_rank, group_staleness;
    int group_sync;           /* sched_core_sync_t */
    int group_share_gpus;
    int group_cluster;        /* its group spans nodes (cluster.h) */
    char group_name[64];      /* kept in the state file: a survivor of a restart rejoins */
    int32_t group_local_rank;
    uint64_t end_gang_wait_ns;
    job_stats_t stats;
    void *runtime;            /* the daemon's live state of the job (jobs.c) */
} job_t;

typedef struct registry_s registry_t;

registry_t *registry_create(void);
void registry_destroy(registry_t *reg);
/* Adds a job and returns it (owned by the registry), or NULL when out of memory. */
job_t *registry_add(registry_t *reg, const char *name, pid_t pid, uid_t uid, gid_t gid,
                    uint64_t now_ns, void *owner);
/* A job that keeps the id it had (re-attached after a restart); the counter moves past it.
 * NULL when the id is taken (or 0) or out of memory. */
job_t *registry_add_with_id(registry_t *reg, uint64_t id, const char *name, pid_t pid,
                            uid_t uid, gid_t gid, uint64_t now_ns, void *owner);
/* The id the next job gets; set_next_id only moves it up (the state file's counter). */
uint64_t registry_next_id(const registry_t *reg);
void registry_set_next_id(registry_t *reg, uint64_t next_id);
job_t *registry_find(registry_t *reg, uint64_t id);
/* Removes a job by id. Returns 0, or -ENOENT. */
int registry_remove(registry_t *reg, uint64_t id);
size_t registry_count(const registry_t *reg);
/* The i-th job in id order (0 <= i < registry_count()). */
job_t *registry_at(registry_t *reg, size_t index);
const char *job_state_name(job_state_t state);
/* Jobs that ended, by final state, since the daemon started (forgotten jobs included):
 * registry_count_end moves one job from state `from` (JOB_STATE_COUNT: not counted yet) to
 * `to`; registry_ended reads a count. */
void registry_count_end(registry_t *reg, job_state_t from, job_state_t to);
uint64_t registry_ended(const registry_t *reg, job_state_t state);

#endif
