/* The scheduling core: the one mechanism that salusd and salus-sim both drive.
 *
 * It owns the scheduling facts: which jobs wait for admission and in which order they are
 * offered (the policy's admission order), where each admitted job lives (GPU, lane: the lane
 * manager's books, memory/lanes.h), who holds each lane, each job's memory budget, its
 * measurements (iterations, GPU time) and its learned sizes. The policies
 * (scheduler-policies/policy.h) plug into it as sched_classes plug into Linux's
 * kernel/sched/core.c; the core is their only caller.
 *
 * Interface: events in, effects out. Each event function takes the time (now_ns: the caller's
 * clock, monotonic; the daemon's CLOCK_MONOTONIC or the simulator's simulated time) and
 * appends what the caller must carry out to an effects list (sched_core_effects_t). The core
 * never does I/O, never reads a clock, never blocks, never calls back into the caller: the
 * caller applies the effects after the call returns, in list order, and may send further
 * events while doing so (e.g. a job whose admission could not be carried out leaves with
 * sched_core_job_left). Not thread-safe: one thread (the daemon's event loop, the simulator's
 * event heap) owns a core.
 *
 * Job life: registered (waiting) -> admitted (ADMIT effect: GPU, lane, budget) -> takes turns:
 * it reports each iteration boundary it stops at (sched_core_job_boundary), the core gives
 * the lane back, reports the iteration to the policy and, when the lane is free, grants the
 * policy's pick its next iteration (GRANT). A job alone in its lane may run freely (GRANT with
 * free_run): it stops reporting boundaries until the core asks it to stop (STOP_FREE_RUN,
 * because another job of its lane is waiting or the lane layout changed). -> left
 * (sched_core_job_left), or refused (REFUSE effect; the core forgets it at once).
 *
 * Users: when jobs of several uids contend, the core picks in two levels, above every policy:
 * first the user, then the policy among that user's jobs. The user is the one whose jobs have
 * held the GPU least (the busy_ns they reported at their boundaries, summed per uid since the
 * core started, departed jobs included; no decay); on a tie, for admission, the one with fewer
 * admitted jobs; on a further tie, the policy's own order decides. This applies to the admission order (each next job of a round) and to the
 * turns of a lane shared across users. With one uid it reduces to the policy's choice.
 *
 * Lanes held for GPU time: a job gives its lane up at each quiescent point of its program (a
 * boundary with ready = false: the lane goes to the policy's pick among the others at once)
 * and asks again at its next GPU submission (ready = true). busy_ns, and so attained_ns,
 * mean_iteration_ns, the learned sizes' iterations and the per-user shares, is the time the
 * job held its lane (GPU-holding time), not wall time. A job alone in its lane never stops
 * (free_run): the daemon takes a lane it gave up only when another job asks (STOP_FREE_RUN).
 *
 * Re-attach: a job that survived a daemon restart is given back its place
 * (sched_core_job_reattached): admitted at once on its GPU with the sizes it had, before any
 * waiting job, with no admission round (the caller holds new admissions until every survivor
 * is back or its grace period is over, then runs sched_core_admit).
 *
 * Groups (distributed jobs, one node): a job registered with hints.group.id != 0 is rank
 * hints.group.rank of a group of hints.group.world ranks (sched_core_group_t). Registration
 * checks a rank against its group's first: world, sync, share_gpus (and staleness for SSP)
 * the same, rank < world and not taken: else -EINVAL, nothing changed. A group is admitted all
 * or nothing: its ranks wait (no memory held, no ADMIT) until all world ranks have registered,
 * or the caller has released the group (sched_core_group_release: every rank was submitted;
 * a rank that has not registered is host-only, makes no driver call, needs no GPU and does
 * not delay admission), and every registered rank has a place; then, in the admission round,
 * at the position of its first rank
 * in the policy's order, all its ranks are admitted in that one event (ADMIT each), the ranks
 * of one group on distinct GPUs unless the group has share_gpus (the free GPU with the fewest
 * jobs first). A placement that does not fit whole is tried on a scratch copy of the books only
 * (no MOVE, BUDGET or ADMIT comes out of it). While a group waits, the jobs after it are
 * admitted under a non-blocking policy and wait behind it under a blocking one (FIFO), as
 * behind a single job. A group that can never be placed (more ranks registered than GPUs
 * without share_gpus: world is not counted, host-only ranks need none; or a rank whose sizes
 * fit no GPU) is refused at once, every rank waiting (REFUSE, with the reason); a later rank
 * of it registers as a new group and is judged again. A rank that registers after its
 * released group was admitted (a host-only rank that calls the driver after all) is placed
 * alone, as its group's late rank: on a GPU none of its group's ranks holds (unless
 * share_gpus), refused when more ranks registered than GPUs. In a round with groups the policy's order is used as it is (the users' two-level pick
 * is not; user_max_jobs counts a group's ranks, user_gpu_share is not applied to them).
 * Gang turns (BSP groups, unless config.gang_turns_off): the ranks of a group are granted
 * their lanes together, in the same event, or not at all. Groups whose ranks share lanes take
 * gang slots in one global order (least recently served group first: the time its last slot
 * started; then the lower group id): the first group in that order whose ranks are all ready
 * reserves their lanes (a later ready group whose lanes meet an earlier one's claims them for
 * itself, so that no group after it takes them); a reserved lane is granted to nobody else
 * (its holder is told STOP_FREE_RUN) and is kept for the gang when it frees, until the whole
 * gang is granted, so no two groups wait on each other in a circle. A slot lasts
 * config.gang_slot_iterations iterations of each rank (a rank that reaches a boundary
 * inside its slot is granted again at once, also while a rank of its slot that ran freely may
 * still wait for it in a collective; a release, ready = false, keeps its lane reserved for its
 * group; in a cluster slot a rank that starts it behind the leader's target goes on to it:
 * sched_core_group_slot); when every rank has done them and none holds its lane, the lanes
 * go back to the policy: a single job that waits on one of them then has its turn before
 * the group's next slot. A gang runs freely (GRANT free_run for all its ranks) only when
 * nobody else waits on any of its lanes; when someone does, every rank is told
 * STOP_FREE_RUN. Ranks of a share_gpus group that the lane manager put in one lane cannot
 * hold it together: such a group's ranks take turns as single jobs. SSP groups (staleness S): ranks
 * take turns as single jobs do (never freely), but a rank more than S iterations ahead of the
 * group's slowest admitted rank is not granted (it stays ready) until the slowest reports a
 * boundary. ASP groups, and BSP groups with gang_turns_off: ranks take turns as single jobs do.
 * Gang slots and SSP's slowest rank count the registered, admitted ranks only (host-only ranks are
 * not the core's: they never wait for a slot and never hold the others back). Single jobs fill
 * lanes that gangs leave unreserved. A rank that leaves (any exit) does not make its group wait for
 * it: the remaining ranks are the gang (the daemon ends a failed group's other ranks itself).
 * sched_core_job_info shows a rank's group and its gang wait. */
#ifndef SALUS_SCHEDULER_CORE_SCHED_CORE_H
#define SALUS_SCHEDULER_CORE_SCHED_CORE_H

#include "lanes.h"
#include "policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sched_core_s sched_core_t;

#define SCHED_CORE_DEFAULT_WARMUP_ITERATIONS 3
#define SCHED_CORE_DEFAULT_SIZE_GRAIN_BYTES (2ull << 20)

/* How a group's ranks keep step (salusctl run --sync). */
typedef enum sched_core_sync_e {
    SCHED_CORE_SYNC_BSP = 0, /* gang turns: all ranks granted together */
    SCHED_CORE_SYNC_SSP,     /* ranks at most `staleness` iterations apart */
    SCHED_CORE_SYNC_ASP,     /* turns not coordinated */
} sched_core_sync_t;

/* A job's group (all zero: not in a group). */
typedef struct sched_core_group_s {
    uint64_t id;            /* the caller's key of the group, > 0, the same for all its ranks */
    uint32_t world;         /* ranks in the group, >= 1, the same for all its ranks */
    uint32_t rank;          /* < world, unique in the group */
    sched_core_sync_t sync; /* the same for all its ranks */
    uint32_t staleness;     /* SSP: S */
    bool share_gpus;        /* its ranks may share a GPU (default: distinct GPUs) */
    /* Its ranks span nodes (salusd --cluster): only the ranks on this node register here;
     * the group is admitted when the caller releases it (sched_core_group_release) and,
     * when BSP with gang turns, takes gang slots only as the caller grants them
     * (sched_core_group_slot). The same for all its ranks. */
    bool cluster;
} sched_core_group_t;

#define SCHED_CORE_DEFAULT_GANG_SLOT_ITERATIONS 1

typedef struct sched_core_config_s {
    /* The lane manager's settings; on_change / on_change_context are the core's own and are
     * ignored here. */
    lanes_config_t lanes;
    policy_config_t policy;
    const char *policy_name; /* NULL: "fifo" */
    /* A job admitted on a claim (no hints: memory/lanes.h, "Learned sizes") has its measured
     * sizes applied after this many iterations (0: the default,
     * SCHED_CORE_DEFAULT_WARMUP_ITERATIONS); an admission round follows, for what the claim
     * gave back. */
    uint32_t warmup_iterations;
    /* Per-user quotas: caps on admission, per uid (0: no cap). A user's admitted jobs may
     * hold at most user_gpu_share (0 < F <= 1) of each GPU's capacity (their P + overhead
     * and their lanes, as the lane manager books them; a newcomer is counted as if it opened
     * a lane of its own E) and at most user_max_jobs jobs at once. A job that alone exceeds
     * its user's share of every GPU is refused at once; one that fits the share but not now
     * waits. uid 0 and quota_exempt_uid (the daemon's own user) have no caps. Measured sizes
     * of a provisional job are not checked against the share again. */
    double user_gpu_share;
    uint32_t user_max_jobs;
    uint32_t quota_exempt_uid;
    /* The grain device memory is handed out in (the daemon's chunk granularity): learned
     * sizes are rounded up to it, the ephemeral one to at least one grain, so that a learned
     * budget is never below what the job can be given (0: the default, 2 MiB, simgpu's and
     * CUDA's usual granularity). */
    uint64_t size_grain_bytes;
    /* The least the shim maps at a time (the daemon's --chunk-bytes): memory a job keeps
     * between iterations pins whole chunks of this size, and a large ephemeral block needs a
     * chunk of its own beside them, so a learned persistent size is rounded up to it (0: the
     * size grain; the simulator, which models no chunks, leaves it 0). */
    uint64_t persistent_grain_bytes;
    /* Iterations of each rank in one gang slot (0: SCHED_CORE_DEFAULT_GANG_SLOT_ITERATIONS). */
    uint32_t gang_slot_iterations;
    /* BSP groups take turns rank by rank, as ASP groups do (salusd --gang-turns off: exists
     * only to show what gang turns prevent; collectives can deadlock). */
    bool gang_turns_off;
} sched_core_config_t;

/* Defaults: lanes_config_default(), policy "fifo", warm-up 3, size grain 2 MiB, no per-user
 * caps. */
void sched_core_config_default(sched_core_config_t *config);
/* Caps the least claim of a job without hints (lanes.provisional_min_bytes) to half a GPU of
 * total_bytes. Call once per GPU before sched_core_create. */
void sched_core_config_fit_gpu(sched_core_config_t *config, uint64_t total_bytes);

/* ---- effects ---------------------------------------------------------------------------- */

typedef enum sched_core_effect_kind_e {
    /* Admit job_id on gpu, lane, with budget_bytes (persistent + its lane). The caller answers
     * the job's registration; if it cannot, it sends sched_core_job_left. */
    SCHED_CORE_ADMIT,
    /* The job can never run here (reason: a static string); the core has forgotten it. */
    SCHED_CORE_REFUSE,
    /* The job runs its next iteration in its lane. free_run: it may go on past its boundaries
     * without reporting them until STOP_FREE_RUN. clear_needed: the lane's memory was last
     * used by another uid (lanes_grant). */
    SCHED_CORE_GRANT,
    /* The job runs freely: it must stop at (and report) its next boundary. */
    SCHED_CORE_STOP_FREE_RUN,
    /* The job's budget changed (budget_bytes: persistent + its lane's size). */
    SCHED_CORE_BUDGET,
    /* The lane manager moved the job to another lane (gpu, lane: the new one). It follows at
     * its next boundary; the caller only updates what it shows. */
    SCHED_CORE_MOVE,
    /* A cluster group's gang slot (granted by sched_core_group_slot) is over on this node:
     * every local rank has done its iterations and none holds its lane, or the group has no
     * rank here any more. job_id: the group's id; seq: the slot's. */
    SCHED_CORE_SLOT_DONE,
    /* For the record (nothing to carry out): a provisional job's measured sizes
     * (persistent_bytes, ephemeral_bytes) were applied (reason NULL; a BUDGET and maybe a
     * MOVE come with it), or do not fit now (reason: why; it keeps its provisional books and
     * is retried at its next boundary). */
    SCHED_CORE_LEARNED,
    /* The job's gate role changed (gate: SCHED_CORE_GATE_*; "Classes" above). */
    SCHED_CORE_GATE,
} sched_core_effect_kind_t;

/* A job's role at the shim's gate (sched_core.h, "Classes"). */
enum {
    SCHED_CORE_GATE_NONE = 0,        /* not parked between boundaries */
    SCHED_CORE_GATE_LC = 1,          /* latency-critical: announces its work at the gate */
    SCHED_CORE_GATE_PREEMPTIBLE = 2, /* best-effort: parked at its next submission while a
                                        latency-critical job of its GPU has work */
};

typedef struct sched_core_effect_s {
    sched_core_effect_kind_t kind;
    uint64_t job_id;
    int gpu;
    uint32_t lane;
    uint64_t budget_bytes;
    uint64_t persistent_bytes, ephemeral_bytes; /* LEARNED */
    uint64_t seq;                               /* SLOT_DONE */
    bool free_run;
    bool clear_needed;
    uint8_t gate; /* GATE: SCHED_CORE_GATE_* */
    const char *reason;
} sched_core_effect_t;

/* The caller's list; the core appends. Zero-initialise, reuse with sched_core_effects_clear,
 * free with sched_core_effects_free. */
typedef struct sched_core_effects_s {
    sched_core_effect_t *items;
    size_t count, capacity;
} sched_core_effects_t;

void sched_core_effects_clear(sched_core_effects_t *effects);
void sched_core_effects_free(sched_core_effects_t *effects);
const char *sched_core_effect_name(sched_core_effect_kind_t kind);

/* ---- life cycle ------------------------------------------------------------------------- */

/* NULL config = defaults. NULL when out of memory, the policy is unknown or user_gpu_share
 * is outside [0, 1] (*error: -ENOMEM, -ENOENT or -EINVAL when error is not NULL). */
sched_core_t *sched_core_create(const sched_core_config_t *config, int *error);
void sched_core_destroy(sched_core_t *core); /* NULL ok */

/* Adds GPU `gpu` with capacity total - reserve. 0; -EINVAL when the reserve leaves no room
 * (reserve >= total) or the index is known already; -ENOMEM. Called at start-up (and, later,
 * when a GPU appears); never blocks. */
int sched_core_add_gpu(sched_core_t *core, int gpu, uint64_t total_bytes, uint64_t reserve_bytes);

/* ---- events (all: called by the owner's thread, never block; 0 or a negative errno) ------ */

typedef struct sched_core_job_hints_s {
    uint64_t id;                  /* unique, > 0; larger than every id registered before */
    uint32_t uid;
    uint64_t persistent_bytes;    /* LANES_SIZE_UNKNOWN: admitted on a claim of free memory, */
    uint64_t ephemeral_bytes;     /*   then learned from its boundaries */
    uint64_t iterations_expected; /* 0 = unknown */
    uint64_t iteration_ns;        /* expected iteration time (a profile); 0 = unknown */
    int32_t priority;
    uint64_t arrival_ns;          /* when it arrived (a submit may precede its registration);
                                     0 = now */
    sched_core_group_t group;     /* zero: a single job */
    /* A single job that may run on one GPU only (a container given the device salus.dev/gpu=N):
     * pinned, and pinned_gpu that GPU; not pinned (the default): any GPU. Ignored for the
     * ranks of a group. */
    bool pinned;
    int pinned_gpu;
    /* > 0: latency-critical, each iteration (a request) should take at most this long; it
     * always has a lane of its own (memory/lanes.h, "Lanes of their own"); 0: best-effort
     * ("Classes" above) */
    uint64_t latency_target_ns;
} sched_core_job_hints_t;

/* A job registered: it waits for admission; an admission round runs. -EEXIST, -EINVAL,
 * -ENOMEM (then nothing changed). */
int sched_core_job_registered(sched_core_t *core, const sched_core_job_hints_t *hints,
                              uint64_t now_ns, sched_core_effects_t *effects);
/* Several jobs registered at the same instant (a trace's simultaneous submissions): all join
 * the waiting queue before one admission round. Stops at the first error. */
int sched_core_jobs_registered(sched_core_t *core, const sched_core_job_hints_t *hints,
                               size_t count, uint64_t now_ns, sched_core_effects_t *effects);

/* What a job reports at an iteration boundary: cumulative counters (a job that ran freely
 * reports several iterations at once) and its measured sizes. */
typedef struct sched_core_boundary_s {
    uint64_t iterations;        /* done in total */
    uint64_t busy_ns;           /* time of those iterations, in total */
    uint64_t last_iteration_ns; /* the last one's */
    uint64_t persistent_bytes;  /* measured; 0 = not known */
    uint64_t ephemeral_bytes;   /* measured peak; 0 = not known */
    /* true (the usual): the job waits for its next turn. false: it gives its lane back but
     * does not ask for a turn yet (a host-only part follows, --lane-hold gpu); a later
     * boundary with ready set asks. */
    bool ready;
} sched_core_boundary_t;

/* The job stopped at an iteration boundary. If it held its lane, the iteration goes to the
 * policy, the lane is given back and, after warm-up, a provisional job's measured sizes are
 * applied; then free lanes are offered to the policy. -ENOENT for an unknown job. */
int sched_core_job_boundary(sched_core_t *core, uint64_t job_id,
                            const sched_core_boundary_t *boundary, uint64_t now_ns,
                            sched_core_effects_t *effects);

typedef enum sched_core_exit_e {
    SCHED_CORE_EXIT_DONE,    /* finished its work */
    SCHED_CORE_EXIT_FAILED,  /* ended with an error, or its admission could not be carried out */
    SCHED_CORE_EXIT_KILLED,
    SCHED_CORE_EXIT_GONE,    /* its connection or process went away */
} sched_core_exit_t;

/* The job left (waiting or admitted): its memory goes back, an admission round runs, its
 * lane is offered to the others. An unknown id is ignored (0). */
int sched_core_job_left(sched_core_t *core, uint64_t job_id, sched_core_exit_t how,
                        uint64_t now_ns, sched_core_effects_t *effects);

/* A job that survived a daemon restart comes back (hints as at registration; sizes known):
 * it is admitted at once on gpu with persistent_bytes + ephemeral_bytes as its sizes, ahead
 * of every waiting job and without quota checks (it held that memory all along), with its
 * iteration count and GPU time so far. It starts idle (not holding its lane); its next
 * boundary asks for a turn. No admission round runs. The effects are those of the layout
 * (a BUDGET when its lane is larger than its ephemeral size, others' MOVE). 0; -EEXIST,
 * -EINVAL (no such GPU, id 0), -ENOSPC when it does not fit beside the jobs already back
 * (nothing changed), -ENOMEM. */
typedef struct sched_core_reattach_s {
    int gpu;
    /* a job re-attached before whose lane this one shared (it joins that lane, grown to its
     * ephemeral size if needed); 0: a lane of its own where one fits */
    uint64_t lane_of_job;
    uint64_t persistent_bytes, ephemeral_bytes;
    uint64_t iterations, busy_ns;
} sched_core_reattach_t;
int sched_core_job_reattached(sched_core_t *core, const sched_core_job_hints_t *hints,
                              const sched_core_reattach_t *where, uint64_t now_ns,
                              sched_core_effects_t *effects);

/* ---- cluster groups (group.cluster: ranks on several nodes) ----------------------------

 * A cluster group's local ranks wait (no memory held) until the caller releases the group:
 * every rank of it, on every node, has been submitted (the caller learns it from etcd; ranks
 * not registered anywhere are host-only). From then on its local registered ranks are admitted
 * as a local group whose ranks have all registered: all or
 * nothing, in the admission round, at the position of its first rank in the policy's order
 * (distinct GPUs unless share_gpus; a group that can never be placed here is refused, every
 * local rank, at registration already). Ranks registered before the release are counted
 * against world and checked as for a local group (rank < world, not taken here; cluster
 * the same as its first rank's). "Can never be placed here" counts the ranks registered here,
 * not world: more of them than GPUs without share_gpus is refused.
 *
 * Gang slots of BSP cluster groups (gang turns on) come from outside, in one global order
 * that the caller gets from the cluster (every node receives its slots in that order): the
 * core keeps them in a FIFO of (group, seq) and serves them in that order, never the local
 * least-recently-served order (only the head slot's group takes part in the gang pass,
 * placed among local gangs by that order as a local gang is). The head slot's group reserves
 * its local ranks' lanes (as a local gang's slot does; a holder is told STOP_FREE_RUN; single
 * jobs fill lanes no slot reserves); its ranks are granted together when all are ready; the
 * slot lasts gang_slot_iterations iterations of each local rank; then (every local rank
 * done, none holding its lane) SLOT_DONE comes out, the lanes go back to the policy (a single
 * job that waits on one of them has its turn first) and the next slot in the FIFO is served.
 * A slot of a group that is not admitted yet waits at the head of the FIFO until it is (slots are
 * granted only to admitted groups, so this is short). A cluster gang never runs freely. When
 * every local rank of a group has left, its slots in the FIFO are dropped, each with its
 * SLOT_DONE. A slot of a group whose ranks here were put in one lane (share_gpus: they take
 * single turns) ends at once. SSP and ASP cluster groups, and BSP ones with gang_turns_off,
 * take turns as single jobs (no slots). An SSP cluster group's staleness holds among all its
 * ranks: the caller gives the fewest iterations done by its ranks on the other nodes
 * (sched_core_group_remote_least), and a local rank more than S iterations ahead of the
 * slowest of its local admitted ranks and that value waits (as it does for a local one). */

/* Releases group group_id for admission: a cluster group once every rank of it on every node
 * is known; a local group once every rank was submitted (its ranks not registered are
 * host-only). An admission round runs. 0; -ENOENT when no local rank of that group is
 * registered (nothing changed: release it again after its first rank registers). Releasing
 * twice is 0. */
int sched_core_group_release(sched_core_t *core, uint64_t group_id, uint64_t now_ns,
                             sched_core_effects_t *effects);
/* Appends gang slot seq of cluster group group_id to the FIFO; when it is at the head, it is
 * served. target: the iterations each rank of the group has done at the slot's end, as the
 * cluster's leader set it (0: not known). Each local rank does gang_slot_iterations in the
 * slot, and a rank that starts the slot behind target by no more than twice that (one that
 * registered after its peers' first slot: its program had not called the driver yet) goes
 * on to target: its peers on other nodes did those iterations, and may wait for it in a
 * collective that lies between (MPI_Allreduce after a synchronising copy: a boundary). A
 * rank further behind (one that calls the driver long after its peers started) does
 * gang_slot_iterations only. 0; -ENOENT (no local rank of that group), -EINVAL (not a BSP
 * cluster group with gang turns, seq 0, or seq below the group's last slot's), -EALREADY
 * (seq equal to the group's last slot's: a duplicate, ignored), -ENOMEM; on an error nothing
 * changed. */
int sched_core_group_slot(sched_core_t *core, uint64_t group_id, uint64_t seq, uint64_t target,
                          uint64_t now_ns, sched_core_effects_t *effects);
/* The fewest iterations done by the ranks of SSP cluster group group_id on other nodes
 * (UINT64_MAX: none known, the bound is kept among the local ranks); a local rank more than
 * its staleness ahead of it waits, and held ranks are offered their lanes again when it
 * grows. 0; -ENOENT (no local rank of that group), -EINVAL (not an SSP cluster group). */
int sched_core_group_remote_least(sched_core_t *core, uint64_t group_id, uint64_t least,
                                  uint64_t now_ns, sched_core_effects_t *effects);
/* The slot being served, the FIFO's head (*group_id, *seq; 0, 0 when none; either pointer may
 * be NULL); returns how many slots are queued behind it. */
size_t sched_core_slots_queued(const sched_core_t *core, uint64_t *group_id, uint64_t *seq);

/* A job of unknown sizes, still learning them, needs a budget of budget_bytes (its next
 * allocation does not fit the claim it was admitted on) and holds held_bytes of memory now:
 * its claim grows to it at once if its GPU has the room (lanes merged if needed), else it
 * keeps what it holds and waits, served before newcomers whenever memory frees on its GPU
 * (memory/lanes.h, lanes_want). 0: the budget holds it now (a BUDGET effect says so);
 * -EAGAIN: it waits, a BUDGET effect comes when it has it (or its sizes are learned first);
 * -ENOSPC: it can never have it (sizes known, or more than its cap or its GPU); -ENOENT (not
 * admitted), -ENOMEM. */
int sched_core_job_wants(sched_core_t *core, uint64_t job_id, uint64_t budget_bytes,
                         uint64_t held_bytes, uint64_t now_ns, sched_core_effects_t *effects);

/* Runs an admission round now (after something outside the core freed memory). */
int sched_core_admit(sched_core_t *core, uint64_t now_ns, sched_core_effects_t *effects);

/* Switches the policy (its init runs first; on failure the current one stays: -ENOENT,
 * -ENOMEM). Then an admission round and every lane is offered to the new policy. */
int sched_core_set_policy(sched_core_t *core, const char *name, uint64_t now_ns,
                          sched_core_effects_t *effects);

/* ---- the books (read-only snapshot of one job, lanes, GPUs) ------------------------------ */

typedef enum sched_core_job_phase_e {
    SCHED_CORE_WAITING,  /* registered, not admitted */
    SCHED_CORE_RUNNING,  /* admitted, holds its lane (granted) */
    SCHED_CORE_PARKED,   /* admitted, at a boundary, waiting for its turn */
    SCHED_CORE_IDLE,     /* admitted, neither (not reported a boundary yet, or a host part) */
} sched_core_job_phase_t;

/* Why a job that is not admitted waits: what the last admission round found for it. */
typedef enum {
    SCHED_CORE_WAIT_NONE = 0, /* admitted, or no admission round has looked at it yet */
    SCHED_CORE_WAIT_MEMORY,   /* no GPU has room for it now (a latency-critical job: for a lane
                               * of its own) */
    SCHED_CORE_WAIT_ORDER,    /* the policy admits in order, and an earlier job waits first */
    SCHED_CORE_WAIT_USER,     /* its user has the jobs or the share of the GPUs it may have */
    SCHED_CORE_WAIT_GROUP,    /* a rank: its group is admitted whole, and not all its ranks are
                               * there yet */
} sched_core_wait_t;

typedef struct sched_core_job_info_s {
    uint64_t id;
    uint32_t uid;
    sched_core_job_phase_t phase;
    int gpu;                /* -1 while waiting */
    uint32_t lane;
    uint64_t budget_bytes;  /* 0 while waiting */
    bool provisional;       /* sizes not learned yet */
    bool free_run;
    uint64_t waiting_since_ns; /* WAITING: registration; PARKED: the boundary; else 0 */
    uint64_t lane_holder;      /* PARKED: the job that holds its lane now, 0 = none */
    uint64_t iterations;
    uint64_t busy_ns;
    /* groups: the job's group (zero when single); gang_wait_ns: the time it has spent ready
     * but held back for its group (waiting for the other ranks to register or be placed, for
     * its gang's slot, or for SSP's slowest rank), the current wait included */
    sched_core_group_t group;
    uint64_t gang_wait_ns;
    uint64_t latency_target_ns; /* 0: best-effort */
    uint8_t gate;               /* SCHED_CORE_GATE_*: its role at the gate now */
    sched_core_wait_t wait;     /* WAITING: why (SCHED_CORE_WAIT_NONE otherwise) */
} sched_core_job_info_t;

/* 0, or -ENOENT when the core does not know the job. gang_wait_ns counts the current wait up
 * to the core's last event; sched_core_job_info_at counts it up to now_ns (the caller's clock,
 * as given to the events). */
int sched_core_job_info(const sched_core_t *core, uint64_t job_id, sched_core_job_info_t *info);
int sched_core_job_info_at(const sched_core_t *core, uint64_t job_id, uint64_t now_ns,
                           sched_core_job_info_t *info);
const char *sched_core_phase_name(sched_core_job_phase_t phase);
/* A sentence for a wait reason, as salusctl ps shows it ("" for SCHED_CORE_WAIT_NONE); alone:
 * the job is latency-critical (it needs a lane of its own). */
const char *sched_core_wait_text(sched_core_wait_t wait, bool alone);
/* The lane manager's books, for reading (lanes_list, lanes_gpu_info, lanes_lane_jobs). */
const lanes_t *sched_core_lanes(const sched_core_t *core);
const char *sched_core_policy_name(const sched_core_t *core);
/* The policy's rank of a job (policy.h, job_rank): its name ("queue", "index"), NULL when the
 * policy has none; and the job's value at now_ns: 0, -ENOENT (unknown job) or -ENOTSUP. */
const char *sched_core_rank_name(const sched_core_t *core);
int sched_core_job_rank(const sched_core_t *core, uint64_t job_id, uint64_t now_ns, double *rank);
/* Jobs the core knows (waiting and admitted). */
size_t sched_core_job_count(const sched_core_t *core);
/* The active policy's state to keep across a restart (policy_save_state / policy_load_state:
 * the length written, or a negative errno; -ENOTSUP: the policy keeps nothing). */
long sched_core_policy_save_state(sched_core_t *core, void *buf, size_t cap);
int sched_core_policy_load_state(sched_core_t *core, const void *buf, size_t len);
/* Sum of the budgets of the jobs admitted on gpu (what the daemon reserved for them). */
uint64_t sched_core_gpu_budget_bytes(const sched_core_t *core, int gpu);

#endif
