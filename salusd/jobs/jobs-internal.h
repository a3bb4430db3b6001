/* What jobs.c and job_memory.c share: the daemon's live state of a job. Internal to salusd. */
#ifndef SALUS_SALUSD_JOBS_INTERNAL_H
#define SALUS_SALUSD_JOBS_INTERNAL_H

#include "jobs.h"
#include "job_page.h"
#include "state.h"

typedef struct job_runtime_s {
    salusd_t *daemon;
    uint64_t job_id;
    conn_t *conn;
    uint64_t register_request_id;
    int reply_pending;           /* the register request waits for admission */
    int pidfd;
    struct event *pid_event;
    int notify_fd;
    struct event *notify_event;
    job_page_t *page;
    chunk_t *chunks;
    size_t chunk_count, chunk_capacity;
    int reserved;                /* reserved by submit; its program has not registered yet */
    int fields_fixed;            /* reserved for it by root (jobs_reserve_for): its register's
                                    hints and pin do not replace the reservation's */
    int grow_pending;            /* a mem_grow waits for device memory */
    uint64_t grow_request_id;
    uint64_t grow_bytes;
    uint32_t grow_device;        /* the job's k-th GPU (--gpus; 0: its first) */
    uint64_t grow_since_ns;
    int grow_wants;              /* it waits for its claim to grow (sched_core_job_wants) */
    uint64_t charged_bytes;      /* mem_charge: memory taken through the real driver */
    uint64_t page_dev, page_ino; /* the job page's memfd (what a re-attach re-presents) */
    int reattaching;             /* re-attach begun, its chunks not all checked yet */
    uint32_t reattach_chunks;    /* chunks the job said it re-presents */
    struct lane_region_s *lane_region; /* its lane's shared chunks (lane_map) */
    int lane_mapped;             /* it has them mapped now (lane_unmap: no longer) */
} job_runtime_t;

static inline job_runtime_t *runtime_of(const job_t *job)
{
    return job ? job->runtime : NULL;
}

/* job_effects.c: what happens to a job goes to the scheduling core; its effects are carried
 * out before these return. */
void jobs_core_registered(salusd_t *d, job_t *job);
void jobs_core_parked(salusd_t *d, job_t *job);
void jobs_core_left(salusd_t *d, uint64_t job_id); /* it ended: its place goes on */
/* A job on a claim needs a budget of budget_bytes and holds held_bytes (gpu_sched_job_wants);
 * the effects are carried out. 0, -EAGAIN (it waits), -ENOSPC (never), or an error. */
int jobs_core_wants(salusd_t *d, job_t *job, uint64_t budget_bytes, uint64_t held_bytes);
/* A chunk request found GPU gpu full: the jobs on it that hold unused chunks and do not hold
 * their lane (parked, or released at a quiescent point) are asked to hand them back
 * (trim_request on their page); asking twice is harmless. */
void jobs_request_trims(salusd_t *d, int gpu);
/* The same for one job (when its budget fell below what it holds). */
void jobs_request_trim(job_t *job);

/* The job's registered process ended (its pidfd is readable); its eventfd was written. */
void jobs_on_process_exit(int fd, short events, void *arg);
void jobs_on_notify(int fd, short events, void *arg);

/* The job a connection registered, or NULL (jobs.h: jobs_conn_job_id). */
job_t *jobs_of_conn(conn_t *c);
/* c is the connection of rt's job now (rt NULL: of none). */
void jobs_conn_bind(conn_t *c, job_runtime_t *rt);
/* Returns the job's chunks and closes what the daemon held for it; runtime is gone after. */
void jobs_release_runtime(salusd_t *d, job_t *job);

/* job_exit.c: the exit probe of a job whose registered process ended (see on_process_exit):
 * 1 with *status when the kernel has the process's wait status, 0 not yet, -1 never (Linux
 * < 6.13); start (waits on the job are held until it is done), free. */
int jobs_pidfd_exit_status(int pidfd, int *status);
void jobs_exit_probe_start(salusd_t *d, job_t *job, int pidfd);
void jobs_exit_probe_free(job_t *job);

/* job_memory.c: retries chunk requests that found the device full (after memory came back,
 * and from a timer); answers those that waited too long with out-of-memory. */
void jobs_retry_pending_grows(salusd_t *d);

/* job_lane_memory.c: the job leaves its lane's shared chunks (it ended): the owner word is
 * cleared if it held it, and the chunks go with the last job that mapped them. */
void jobs_lane_memory_leave(salusd_t *d, job_t *job);
/* A re-layout moved the job to lane `lane` of GPU `gpu`: if it maps another lane's shared
 * chunks, it is asked to unmap them at its next release (lane_page.h: moved). */
void jobs_lane_memory_moved(salusd_t *d, job_t *job, int gpu, uint32_t lane);
/* Across a restart: the set the job asked for, for its record (bytes 0: none). reattach:
 * the lane page and chunk it re-presents (reattach_lane) against rec's lane_set; the set is
 * brought back (or joined, when a lane mate brought it back) and the descriptors are taken;
 * 0, or a negative errno with why (the descriptors stay the caller's). reattached: once the
 * new core placed the job, the set is its lane's (or, in another lane, unmapped by it at its
 * next release). lane_memory_bytes: the sets' memory on a GPU (the books after a restart). */
void jobs_lane_memory_record(const job_t *job, state_lane_set_t *out);
int jobs_lane_memory_reattach(salusd_t *d, job_t *job, const state_job_t *rec, uint64_t chunk_id,
                              uint64_t bytes, int page_fd, int chunk_fd, const char **why);
void jobs_lane_memory_reattached(salusd_t *d, job_t *job);
uint64_t jobs_lane_memory_bytes(const salusd_t *d, int gpu);

/* job_restart.c: the jobs that were running under the previous salusd (survivors), for the
 * re-attach requests (job_reattach.c). jobs_survivor: the record of job id, or NULL;
 * *pending: it may still re-attach. chunk_owner: the survivor a chunk file was handed to (0:
 * none). lane_mate: the core id of a survivor back already (or of its member, --gpus) that
 * had lane `lane` of GPU `gpu` (0: none). settled: it is
 * back (back = 1) or refused; the hold on admissions ends with the last one. */
const state_job_t *jobs_survivor(const salusd_t *d, uint64_t id, int *pending);
uint64_t jobs_survivor_chunk_owner(const salusd_t *d, uint64_t dev, uint64_t ino);
uint64_t jobs_survivor_lane_mate(const salusd_t *d, int gpu, uint32_t lane);
void jobs_survivor_settled(salusd_t *d, uint64_t id, int back);

/* job_restart.c: the state file (--state-dir). jobs_state_save writes it now (atomic, not
 * fsynced: what a restarted daemon must find after salusd itself crashed: an admission, a chunk
 * before it is handed out, a job's end); jobs_state_dirty has it written durably (fsynced)
 * within a few seconds (a chunk given back, learned sizes, a policy switch: a job may
 * re-present fewer chunks than are on file, never more). Durable also at shutdown. */
void jobs_state_save(salusd_t *d);
void jobs_state_dirty(salusd_t *d);

/* groups.c, for the register request (jobs.c): 1 when the job is a rank of a failed group
 * (err: why). Declared here, as jobs.h declares the other job_*.c files' functions: the jobs
 * subsystem is one library whose files call each other; groups.c's header stays above. */
int groups_refuses(const salusd_t *d, const job_t *job, char *err, size_t err_size);

#endif
