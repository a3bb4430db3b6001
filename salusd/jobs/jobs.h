/* Subsystem jobs/ (libsalusd-jobs): registration, job pages, the core's effects carried out,
 * memory, exits, cgroups, restart and re-attach, groups of ranks. Calls only sched/, base/ and
 * the pure modules; speaks upward only through the observer tables registered with it
 * (jobs_observer.h), and exports its rows of the request table (jobs_ops).
 *
 * Jobs at run time: registration and admission, memory chunks, the shared job page and its
 * notifications, and cleanup when the job's process ends (pidfd). */
#ifndef SALUS_SALUSD_JOBS_H
#define SALUS_SALUSD_JOBS_H

#include "daemon.h"

/* The subsystem's rows of the request table (jobs_ops.c): the handlers below and groups'. */
extern const server_op_t jobs_ops[];
void jobs_handle_register(conn_t *c, const proto_msg_t *msg);
void jobs_handle_mem_grow(conn_t *c, const proto_msg_t *msg);
void jobs_handle_mem_release(conn_t *c, const proto_msg_t *msg);
/* lane_map: the lane's shared chunks and its lane page (--lane-memory shared), or {shared: 0} */
void jobs_handle_lane_map(conn_t *c, const proto_msg_t *msg);
/* lane_unmap: the job unmapped them (a job of another user asked for them) */
void jobs_handle_lane_unmap(conn_t *c, const proto_msg_t *msg);
void jobs_handle_mem_charge(conn_t *c, const proto_msg_t *msg);
/* gate_page {}: the shared page of the job's GPU (gate_page.h), its descriptor passed. */
void jobs_handle_gate_page(conn_t *c, const proto_msg_t *msg);
/* The core's GATE effect: the job's role (SCHED_CORE_GATE_*) on gpu, into its page. */
void jobs_gate_role(salusd_t *d, job_t *job, int gpu, unsigned role);
void jobs_gate_shutdown(void);
/* The job ended: if it was counted in its GPU's gate page (a request going on), it is not
 * any more. */
void jobs_gate_job_ended(salusd_t *d, job_t *job);
/* The close observer of a job's connection (CONN_SLOT_JOB), registered by main. The slot
 * holds the job's runtime from register or reattach until the runtime or the connection goes;
 * jobs_conn_job_id: the id of the job c registered (0: none). */
extern const conn_slot_ops_t jobs_conn_ops;
uint64_t jobs_conn_job_id(const conn_t *c);
/* Jobs across a restart (job_restart.c, job_reattach.c). jobs_restart_init reads the state file (a corrupt
 * or foreign one is set aside with a message and not used): the job-id counter, the policy's
 * state and the jobs that were running; while some of those may still re-attach (until
 * --reattach-grace-s) no new job is admitted. 0 or a negative errno (logged). */
int jobs_restart_init(salusd_t *d);
/* Writes the state file a last time (the running jobs stay in it) and frees. */
void jobs_restart_fini(salusd_t *d);
/* 1 while survivors of a restart may still re-attach: registrations wait. */
int jobs_admission_held(const salusd_t *d);
/* The re-attach requests: reattach {job_id, chunks} with the job page and eventfd, then one
 * reattach_chunk {chunk_id, bytes} with each chunk's descriptor, then reattach_done. */
void jobs_handle_reattach(conn_t *c, const proto_msg_t *msg);
void jobs_handle_reattach_chunk(conn_t *c, const proto_msg_t *msg);
void jobs_handle_reattach_done(conn_t *c, const proto_msg_t *msg);
/* reattach_lane {chunk_id, bytes} with the lane page's and the lane chunk's descriptors,
 * between reattach and reattach_done: the lane's shared chunks the job has mapped
 * (--lane-memory shared), which stay its lane's set (job_lane_memory.c). The reattach reply
 * says {lane_sets: 1} when the daemon takes it. */
void jobs_handle_reattach_lane(conn_t *c, const proto_msg_t *msg);
/* A lane's shared chunks (--lane-memory shared): the chunk's id and size, the jobs that
 * asked for them and those that map them now, the lane_map answers that handed them out,
 * restored: re-presented by its jobs after a restart (not created by this salusd), the
 * owner word's hand-overs between jobs. 0, or -ENOENT when the lane has none. */
typedef struct jobs_lane_set_info_s {
    uint64_t chunk_id, bytes;
    uint64_t jobs, mapped, maps, handovers;
    int restored;
} jobs_lane_set_info_t;
int jobs_lane_set_info(const salusd_t *d, int gpu, uint32_t lane, jobs_lane_set_info_t *out);
/* The job's description that register and submit both take, each field optional. */
typedef struct jobs_fields_s {
    char name[REGISTRY_NAME_BYTES];      /* "" when not given */
    uint64_t iterations;                 /* expected; 0 = unknown */
    uint64_t persistent_bytes, ephemeral_bytes; /* hints; 0 = unknown */
    int64_t priority;
    uint64_t gpus;                       /* GPUs of the one process (--gpus); 0 = 1 */
    int gpu_pinned;                      /* pin_gpu given: the one GPU it may run on */
    uint64_t pinned_gpu;
    uint64_t latency_target_ns;          /* > 0: latency-critical (sched_core.h, "Classes") */
    uint64_t request_ns;                 /* its expected GPU time per request; 0 = unknown */
} jobs_fields_t;
/* Reads and checks those fields of a request body: 0; -EINVAL when one has the wrong type
 * or a size is above 2^50 (the caller answers with its request's usage); -EILSEQ when the
 * name is not a valid job name (the caller answers with jobs_reply_bad_name). */
int jobs_fields_parse(const msgpack_object *body, jobs_fields_t *fields);
/* A job asking for more GPUs than the node has, or pinned to a GPU the node lacks or with
 * several GPUs: answered with an error (1); else 0. */
int jobs_reply_bad_gpus(conn_t *c, uint64_t request_id, const char *verb,
                        const jobs_fields_t *fields);
/* "VERB: the job name must be printable text ..." */
void jobs_reply_bad_name(conn_t *c, uint64_t request_id, const char *verb);
/* salusctl submit: a job listed as waiting before its program runs (named "job" when the
 * fields give no name). Its uid is the requester's; the program attaches by sending job_id
 * in its register request. NULL when out of memory. */
job_t *jobs_reserve(conn_t *c, const jobs_fields_t *fields);
/* The same, made by root for another process: the job is uid's, pid is its process until its
 * program registers (a process of uid, attaching with job_id). fixed: the register's hints
 * and pin do not replace fields' (a budget the reserver decided). NULL when out of memory. */
job_t *jobs_reserve_for(conn_t *c, uid_t uid, gid_t gid, pid_t pid, const jobs_fields_t *fields,
                        int fixed);
/* 1 when name may be a job's name: printable (ASCII or UTF-8 without control characters),
 * shorter than REGISTRY_NAME_BYTES. Names reach terminals (ps, logs of the daemon). */
int jobs_name_valid(const char *name);
/* Records how the job ended: exited with code, or (exited == 0) killed by signal code. A
 * job that has already ended takes the matching state (done, failed, killed). */
void jobs_set_exit(salusd_t *d, job_t *job, int exited, int code);
/* The final state the recorded exit says: done, failed, killed, or ended (unknown). */
job_state_t jobs_exit_state(const job_t *job);
/* Reserved and no program has attached yet. */
int jobs_is_reserved(const job_t *job);
/* 1 while salusd still asks the kernel for an ended job's exit status (its waits wait). */
int jobs_exit_pending(const job_t *job);
/* Stops asking (salusctl reported the status) and answers the waits. */
void jobs_exit_probe_stop(salusd_t *d, job_t *job);
/* Ends a job that is still only reserved (its command ended without using the GPU). */
void jobs_end_reserved(salusd_t *d, job_t *job, job_state_t final_state);
/* Sends sig to the job's registered process through its pidfd. 0, -ESRCH when the job
 * has no live registered process, or a negative errno. */
int jobs_signal(const job_t *job, int sig);
/* One job as ps, top and the metrics endpoint show it: the typed snapshot that every renderer
 * renders (jobs_pack_list writes it for ps). state is a static string ("waiting", "running",
 * "paused", "done", "failed", "killed", "ended"); running means the job holds its GPU now
 * (jobs_state decides it). */
typedef struct jobs_info_s {
    uint64_t id;
    char name[REGISTRY_NAME_BYTES];
    pid_t pid;
    uid_t uid;
    int gpu;                     /* -1 until admitted */
    int64_t lane;                /* -1 until admitted */
    const char *state;
    uint64_t iterations;
    uint64_t iterations_expected;
    uint64_t persistent_bytes;
    uint64_t ephemeral_peak_bytes;
    uint64_t memory_bytes;       /* chunks handed out (ps memory_bytes) */
    uint64_t live_bytes;
    uint64_t budget_bytes;
    int provisional;             /* admitted on a claim, sizes not learned yet */
    int sizes_learned;           /* learned_*: the sizes learned for a job without hints */
    uint64_t learned_persistent_bytes, learned_ephemeral_bytes;
    uint64_t busy_ns;            /* ps gpu_time_ms, in ns */
    uint64_t wait_ns;            /* waited in total (admission and turns), the wait in
                                    progress included */
    uint64_t wait_in_progress_ns; /* waiting now (for admission or for its turn); else 0 */
    uint64_t lane_holder;        /* waiting for its turn: the job that holds its lane, 0 = none */
    const char *wait_reason;     /* waiting for admission: why (a sentence); NULL otherwise */
    uint64_t group_id;           /* a rank of this group (groups.c); 0: a single job */
    uint32_t group_rank;
    uint64_t gang_wait_ns;       /* a rank: held back for its group (sched_core.h) */
    bool has_policy_rank;        /* the policy's rank of the job (gpu_sched_rank_name says what) */
    double policy_rank;
    uint64_t registered_ns, admitted_ns, finished_ns; /* 0 until it happens */
    /* a latency-critical job (target > 0): its requests (job_stats_t) */
    uint64_t latency_target_ns;
    uint64_t requests, requests_over_target;
    uint64_t request_p50_ns, request_p95_ns, request_p99_ns;
} jobs_info_t;
/* Where the job runs, from the scheduling core's books (the one source): its GPU and memory
 * budget (never below what it holds); for a job that ended, the record of where it ran.
 * 0, or -ENOENT (gpu -1, budget 0) when it was not admitted. */
int jobs_placement(const salusd_t *d, const job_t *job, int *gpu, uint64_t *budget_bytes);
/* The job's state as every renderer shows it; the one place "running" is decided: an admitted
 * live job runs while it holds its lane in the core's books, else it is "paused". */
const char *jobs_state(const salusd_t *d, const job_t *job);
/* Fills info with the index-th job of the registry (0 <= index < registry_count()), the
 * same values jobs_pack_list() sends. Returns 0, or -ENOENT past the end. */
int jobs_info_at(salusd_t *d, size_t index, jobs_info_t *info);
/* For /metrics: the jobs in the registry now (jobs_info_at's indexes) and those that ended,
 * by the state they ended in (JOB_DONE and above; 0 below). */
typedef struct jobs_sample_s {
    size_t count;
    uint64_t ended[JOB_STATE_COUNT];
} jobs_sample_t;
void jobs_sample(const salusd_t *d, jobs_sample_t *sample);
/* The shared segment of salusd's simulated devices ("/simgpu-UID" or SIMGPU_SHM_NAME), ""
 * when salusd runs on real GPUs. */
void jobs_simgpu_shm_name(const salusd_t *d, char *out, size_t size);
/* Releases every job's resources (shutdown). */
void jobs_shutdown(salusd_t *d);

/* Switches the scheduling policy (gpu_sched_set_policy) and carries out what follows. 0, or a
 * negative errno with err saying why (the policy stays). */
int jobs_set_policy(salusd_t *d, const char *name, char *err, size_t err_size);
/* The cluster role's events for the scheduling core, carried out (sched_core_group_release,
 * sched_core_group_slot): 0 or the core's negative errno. */
int jobs_group_release(salusd_t *d, uint64_t group_id);
/* Iterations the job has done (its page's count; 0 before it has one). */
uint64_t jobs_iterations(const job_t *job);
int jobs_group_slot(salusd_t *d, uint64_t group_id, uint64_t seq, uint64_t target);
/* An SSP cluster group's fewest iterations done on other nodes (UINT64_MAX: none there;
 * sched_core_group_remote_least): 0 or the core's negative errno. */
int jobs_group_remote_least(salusd_t *d, uint64_t group_id, uint64_t least);

/* For job_effects.c */
struct job_page_s;
struct job_page_s *jobs_page(const job_t *job);
/* Registered, its register request waiting for admission. */
int jobs_waiting_admission(const job_t *job);
/* Admits the job on gpu with a memory budget: answers its register request. */
int jobs_admit(salusd_t *d, job_t *job, int gpu, uint64_t budget_bytes, uint32_t lane);
/* Refuses (reason, when not NULL, goes back to the job) or drops the job: it is marked failed. */
void jobs_fail(salusd_t *d, job_t *job, const char *reason);
/* A new budget after the sizes were learned. */
/* A job on a claim (sizes being learned) sees the whole GPU as its budget on its page, so
 * that it asks salusd for what it needs (job_memory.c checks the core's budget and may wait);
 * cuMemGetInfo shows it the GPU's memory. */
void jobs_set_budget(salusd_t *d, job_t *job, uint64_t budget_bytes);

#endif
