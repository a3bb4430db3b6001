/* How the jobs subsystem speaks upward: one observer table that each upper subsystem (ctl,
 * ps, cluster) registers at start (main.c), as the kernel's notifier blocks. Every entry may
 * be NULL.
 *
 * Notifications go to every table that has the entry, in the order of registration. Those
 * raised while the scheduling core's effects are applied (job_effects.c) are queued and
 * delivered, in the order raised, once the outermost apply is over: an observer never
 * re-enters the effect loop from inside it. job_finished is the exception, delivered at once:
 * the job may be forgotten right after it (its observer only answers the waits: jobctl.c).
 * Questions (job_settled, rank_node, pack_group_tables) and the one command (terminate_job)
 * are answered at once by the first table that has the entry. */
#ifndef SALUS_SALUSD_JOBS_OBSERVER_H
#define SALUS_SALUSD_JOBS_OBSERVER_H

#include "daemon.h"

#include <msgpack.h>

#define JOBS_OBSERVERS_MAX 4

typedef struct jobs_observer_s {
    /* a rank of local group group_id was submitted (groups_join) */
    void (*rank_submitted)(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id);
    /* a rank's program registered (its registration now waits for the release) */
    void (*rank_registered)(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id);
    /* a rank of group_id was admitted on this node */
    void (*rank_admitted)(salusd_t *d, uint64_t group_id);
    /* the local group failed (failure: why) or ended (all its ranks here over) */
    void (*group_failed)(salusd_t *d, uint64_t group_id, const char *failure);
    void (*group_over)(salusd_t *d, uint64_t group_id);
    /* the core's SLOT_DONE: gang slot seq of cluster group group_id is over here */
    void (*slot_done)(salusd_t *d, uint64_t group_id, uint64_t seq);
    /* a rank of group_id stopped at an iteration boundary (its count may have grown) */
    void (*rank_iterations)(salusd_t *d, uint64_t group_id);
    /* a job has ended (at once, never queued) */
    void (*job_finished)(salusd_t *d, job_t *job);
    /* 0 while a finished job's end is not settled yet (its exit status may still come, its
     * supervisor has not reported): jobs.c keeps it until then. No entry: settled. */
    int (*job_settled)(salusd_t *d, const job_t *job);
    /* ends a job's processes (SIGTERM, SIGKILL after grace_ms); 0 or a negative errno */
    int (*terminate_job)(salusd_t *d, job_t *job, uint64_t grace_ms);
    /* the node a rank of a group runs on (NULL: unknown, or no cluster) */
    const char *(*rank_node)(const salusd_t *d, uint64_t group_id, uint32_t rank);
    /* a group's parameter-server tables here, as a msgpack array (the groups op) */
    void (*pack_group_tables)(salusd_t *d, uint64_t group_id, msgpack_packer *pk);
} jobs_observer_t;

/* Registers an observer table (kept, not copied). 0, -ENOMEM, or -ENOSPC past
 * JOBS_OBSERVERS_MAX. */
int jobs_observe(salusd_t *d, const jobs_observer_t *obs);
/* Forgets the tables and any event still queued (shutdown). */
void jobs_observers_fini(salusd_t *d);

/* Raising (the jobs subsystem's files only) */
void jobs_raise_rank_submitted(salusd_t *d, uint64_t group_id, uint32_t rank, uint64_t job_id);
void jobs_raise_rank_registered(salusd_t *d, const job_t *job);
void jobs_raise_rank_admitted(salusd_t *d, const job_t *job);
void jobs_raise_group_failed(salusd_t *d, uint64_t group_id, const char *failure);
void jobs_raise_group_over(salusd_t *d, uint64_t group_id);
void jobs_raise_slot_done(salusd_t *d, uint64_t group_id, uint64_t seq);
void jobs_raise_rank_iterations(salusd_t *d, uint64_t group_id);
void jobs_raise_job_finished(salusd_t *d, job_t *job);
int jobs_ask_job_settled(salusd_t *d, const job_t *job);
/* -ESRCH when no observer can end processes */
int jobs_ask_terminate(salusd_t *d, job_t *job, uint64_t grace_ms);
const char *jobs_ask_rank_node(const salusd_t *d, uint64_t group_id, uint32_t rank);
/* 1 when an observer packed the tables, else 0 (the caller packs an empty array) */
int jobs_ask_pack_group_tables(salusd_t *d, uint64_t group_id, msgpack_packer *pk);

/* Around an apply of the core's effects (job_effects.c): notifications raised in between are
 * queued; the outermost jobs_effects_end delivers them. */
void jobs_effects_begin(salusd_t *d);
void jobs_effects_end(salusd_t *d);
/* 1 while effects are being applied (an observer never hears an event then), else 0 */
int jobs_effects_applying(const salusd_t *d);

#endif
