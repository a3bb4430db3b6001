/* One process on several GPUs (salusctl run --gpus N). Such a job is one daemon job (one job
 * page, one socket) that the scheduling core sees as a gang of N members: N core entries
 * whose ids are the job's own id and the N - 1 ids after it (reserved for it at submit or
 * registration, so that no other job gets them), all in one BSP group of world N on distinct
 * GPUs (group id: the job id with the top bit set, which no named group uses). Member k is
 * the job's k-th device.
 *
 * This table keeps, per such job, what its members were told (GPU, budget, admitted,
 * granted), and turns the core's effects for members into effects for the job: the job is
 * admitted once every member is (with member 0's GPU, lane and budget; the reply lists every
 * member's GPU), granted once every member holds its lane (free_run only when every member
 * runs freely), its budget is member 0's (the job's memory lives on its first GPU);
 * boundaries, releases and departures of the job go to every member. Jobs on one GPU have
 * no entry here and pass unchanged. Pure bookkeeping above the core: no I/O, no clock. */
#ifndef SALUS_SALUSD_JOB_GPUS_H
#define SALUS_SALUSD_JOB_GPUS_H

#include "registry.h"
#include "sched_core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most GPUs one job may ask for. */
#define JOB_GPUS_MAX 32
/* A --gpus job's group key: cannot collide with the ids of named groups (below 2^63). */
#define JOB_GPUS_GROUP_BIT (1ull << 63)

typedef struct job_gpus_s job_gpus_t;

/* What the table knows of one multi-GPU job (a copy, for what ps and /metrics show). */
typedef struct job_gpus_info_s {
    uint64_t job_id;
    uint32_t gpus;           /* N >= 2 */
    int gpu[JOB_GPUS_MAX];   /* member k's GPU; -1 until admitted */
    bool admitted;           /* every member admitted (the job's ADMIT was carried out) */
    uint32_t granted_mask;   /* members granted since the job's last boundary */
    uint64_t grants;         /* times the job was granted (every member holding its lane) */
    uint64_t grants_split;   /* of those, grants whose members' GRANTs came in different
                                events (effect lists): 0 under gang turns */
} job_gpus_info_t;

job_gpus_t *job_gpus_create(void);
void job_gpus_destroy(job_gpus_t *t); /* NULL ok */

/* Records that job_id runs on gpus GPUs (>= 2; 1 records nothing). Entries of jobs that the
 * registry no longer lists are dropped first (reg may be NULL: none). 0, -EINVAL (gpus 0 or
 * above JOB_GPUS_MAX, or already recorded), -ENOMEM. */
int job_gpus_add(job_gpus_t *t, registry_t *reg, uint64_t job_id, uint32_t gpus);
/* Forgets job_id's entry, if it has one (a re-attach cut short left one: the next try starts
 * afresh). */
void job_gpus_remove(job_gpus_t *t, uint64_t job_id);
/* The number of GPUs of job_id: its entry's, else 1. */
uint32_t job_gpus_count(const job_gpus_t *t, uint64_t job_id);
/* 0 with *info, or -ENOENT (a job on one GPU). */
int job_gpus_info(const job_gpus_t *t, uint64_t job_id, job_gpus_info_t *info);
/* The job a core id belongs to (the id itself for a job on one GPU) and the member's rank. */
uint64_t job_gpus_owner(const job_gpus_t *t, uint64_t core_id, uint32_t *rank);
/* The job's GPUs as text, "0,1" ("-" before admission); a job on one GPU: its gpu (-1: "-"). */
void job_gpus_text(const job_gpus_t *t, uint64_t job_id, int gpu, char *out, size_t size);

/* ---- the core's events for a job (each member's, for a multi-GPU job) ------------------- */

/* Registers the job (hints->id is the job's id): N members with ids id .. id + N - 1 in one
 * group, in one batch; a job on one GPU as it is. sched_core_jobs_registered's returns. */
int job_gpus_register(job_gpus_t *t, sched_core_t *core, const sched_core_job_hints_t *hints,
                      uint64_t now_ns, sched_core_effects_t *fx);
/* A job that survived a restart of salusd is back (hints->id is the job's id; for a job on
 * several GPUs, job_gpus_add came first): member k at where[k] (its GPU, sizes, the lane it
 * shared), where[] one per GPU of the job, in the group of world N as at registration; the
 * entry is admitted on those GPUs at once (no ADMIT comes out). sched_core_job_reattached's
 * returns; members back before an error stay in the core (job_gpus_left ends them). */
int job_gpus_reattached(job_gpus_t *t, sched_core_t *core, const sched_core_job_hints_t *hints,
                        const sched_core_reattach_t *where, uint64_t now_ns,
                        sched_core_effects_t *fx);
/* The job stopped at a boundary (or released its lane: boundary->ready false): reported for
 * every member; the job's grant is over. The first error, after trying every member. */
int job_gpus_boundary(job_gpus_t *t, sched_core_t *core, uint64_t job_id,
                      const sched_core_boundary_t *boundary, uint64_t now_ns,
                      sched_core_effects_t *fx);
/* The job left: every member leaves (what it held on its other GPUs is back: 0). */
int job_gpus_left(job_gpus_t *t, sched_core_t *core, uint64_t job_id, sched_core_exit_t how,
                  uint64_t now_ns, sched_core_effects_t *fx);
/* 1 when every member of the job holds its lane in the core's books (a job on one GPU: when
 * it does). */
int job_gpus_holds_lanes(const job_gpus_t *t, const sched_core_t *core, uint64_t job_id);

/* The job another job's member or the job itself waits behind: the first member's lane
 * holder that is not 0, as its job (0: none). */
uint64_t job_gpus_lane_holder(const job_gpus_t *t, const sched_core_t *core, uint64_t job_id);

/* Memory on the job's other GPUs (member k >= 1: mem_grow's "device"; member 0's is the
 * job's own committed_bytes). job_gpus_place: member k's GPU and budget in the core's books
 * (0, or -ENOENT); job_gpus_committed: what it holds there (NULL: k is 0 or no member);
 * job_gpus_member_on: the member on gpu (0 when none); job_gpus_committed_total: members
 * 1 .. N - 1 together. */
int job_gpus_place(const job_gpus_t *t, const sched_core_t *core, uint64_t job_id, uint32_t k,
                   int *gpu, uint64_t *budget_bytes);
uint64_t *job_gpus_committed(job_gpus_t *t, uint64_t job_id, uint32_t k);
uint32_t job_gpus_member_on(const job_gpus_t *t, uint64_t job_id, int gpu);
uint64_t job_gpus_committed_total(const job_gpus_t *t, uint64_t job_id);

/* ---- the core's effects ------------------------------------------------------------------ */

enum { JOB_GPUS_CARRY_OUT = 0, JOB_GPUS_CONSUMED = 1 };
/* Looks at fx->items[index] before the daemon carries it out. JOB_GPUS_CARRY_OUT: carry out
 * *out (the effect itself, or one for the whole job: job_id the job's, GPU, lane and budget
 * its member 0's); JOB_GPUS_CONSUMED: nothing to do now (a member's part was recorded). */
int job_gpus_effect(job_gpus_t *t, const sched_core_effects_t *fx, size_t index,
                    sched_core_effect_t *out);

#endif
