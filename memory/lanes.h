/* Lane manager: which GPU and which lane each admitted job's memory lives in.
 *
 * Model (per GPU)
 *   capacity = total memory - reserve (the daemon's own context and anything else the
 *   daemon keeps). Every admitted job charges its persistent size P plus a per-job context
 *   overhead (config.job_overhead_bytes: 512 MiB by default for a real GPU's context, 0 on
 *   simgpu) to the GPU. A lane of size L is ephemeral memory time-shared by jobs whose
 *   ephemeral peak E <= L; their iterations are serialised (lanes_grant / lanes_yield).
 *   Invariant, checked on every change:
 *       sum over admitted jobs (P + overhead) + sum of lane sizes <= capacity.
 *
 * Admission (lanes_admit), on the GPUs the request allows:
 *   1. open a new lane of size E where it fits; among GPUs, the one with the fewest admitted
 *      jobs (spread work across idle GPUs), then the least memory left over (best fit), then
 *      the lowest index;
 *   2. else join the best-fitting existing lane: the smallest L >= E whose tenancy allows the
 *      job and whose GPU still holds P + overhead (ties: fewer jobs in the lane, lower GPU);
 *   3. else, if config.defragment: on each GPU, plan a re-layout that makes room (grow a
 *      compatible lane to E and join it, or merge pairs of compatible lanes, largest saving
 *      first, then retry 1-3); the GPU needing the fewest changes wins;
 *   4. else LANES_WAIT: nothing changed; the caller keeps the job waiting and retries (in the
 *      policy's admission order, see lanes_admit_in_order) after something was released.
 *   A job with P + overhead + E above the capacity of every allowed GPU is refused with
 *   LANES_NEVER_FITS rather than left waiting.
 *   config.max_jobs_per_gpu (0 = no limit) caps admitted jobs per GPU: the FIFO policy's
 *   "one job per GPU" (policy_max_jobs_per_gpu()).
 *
 * Tenancy: a lane holds jobs of one uid, unless config.share_lanes_across_users; then
 *   lanes_grant() reports clear_needed when the lane was last used by another uid. The lane is
 *   bookkeeping, not memory: salusd gives each job chunks of its own and, with lanes shared
 *   across users, clears every chunk when it is created (salusd/job_memory.c), so it needs no
 *   clearing at a grant.
 *
 * Changes: every call that changes the layout reports each change through
 *   config.on_change, in an order that is safe to apply (job moves, closed lanes, shrunk
 *   lanes, grown lanes, opened lanes). The books change at once; the daemon carries a change
 *   out when the jobs concerned reach an iteration boundary (a moved or merged job waits for
 *   its new lane to be idle; memory freed by a shrink or a close becomes usable once the job
 *   that used it has yielded).
 *
 * Learned sizes: a request may give P or E as LANES_SIZE_UNKNOWN; the job is then admitted
 *   provisionally, on a *claim*: a lane of its own holding the memory its GPU has free (less
 *   its known P, if any, and its overhead; less the least claim too, left for one more such
 *   job, when the GPU has room for both), at most config.provisional_max_bytes (0: no cap)
 *   and the request's claim_max_bytes (0: no cap; the per-user share), on a GPU where at
 *   least config.provisional_min_bytes (the least claim) is free (clamped to what the GPU can
 *   hold at all; steps 1-3 above, the largest claim first, then fewer jobs, then the lower
 *   index; step 3 only merges lanes). Its E is the claim. No other job joins or merges with
 *   a claim lane. So two unknown jobs arriving together both start (the second on the least
 *   claim) and a third waits until one is learned. A claim that must grow asks with
 *   lanes_want (below): memory that frees on its GPU (a departure, a shrink, another job's
 *   learned sizes) goes to the waiting claims first, each whole, before anyone else is
 *   admitted there: an unknown job can use what the GPU can give it. After warm-up the
 *   daemon calls lanes_update_sizes() with the measured values: the claim ends, and the job
 *   stays in its lane (shrunk or grown to its E), moves to another lane of the same GPU
 *   (LANES_MOVED), or, when the new sizes do not fit now, keeps its old books and gets
 *   LANES_NO_LONGER_FITS (LANES_NEVER_FITS if they exceed the GPU). Its GPU never changes:
 *   its persistent memory lives there.
 *
 * Lanes of their own: a request with `alone` (a latency-critical job) is placed only in a new
 *   lane of its own (step 1; step 3 may merge other jobs' lanes to make room for it, never
 *   grow or join one), and nobody joins, grows into or merges with its lane, also when its
 *   sizes are learned, a job leaves or lanes merge for others: it never shares ephemeral
 *   memory. Where no GPU has room for such a lane now it gets LANES_WAIT (LANES_NEVER_FITS
 *   when it exceeds every allowed GPU, as above); lanes_admit_to_lane refuses it, and refuses
 *   anyone a lane of its own.
 *
 * Pure logic: no I/O, no clock, no driver calls, not thread-safe (the daemon's loop owns it).
 * Numbers of jobs per node are small (tens), so the structures are plain arrays; the calls made
 * at every iteration (lanes_grant, lanes_yield, lanes_job_placement) find the job and its lane
 * through an index of the committed books, rebuilt at each change (lanes-internal.h). */
#ifndef SALUS_MEMORY_LANES_H
#define SALUS_MEMORY_LANES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LANES_SIZE_UNKNOWN UINT64_MAX
#define LANES_DEFAULT_JOB_OVERHEAD_BYTES (512ull << 20)
#define LANES_DEFAULT_PROVISIONAL_MIN_BYTES (3ull << 30)
#define LANES_DEFAULT_PROVISIONAL_MAX_BYTES 0ull
#define LANES_ANY_GPU (-1)

typedef struct lanes_s lanes_t;

typedef enum lanes_status_e {
    LANES_OK = 0,               /* admitted / updated in place / done */
    LANES_WAIT = 1,             /* does not fit now; nothing changed */
    LANES_MOVED = 2,            /* update_sizes: now in another lane of the same GPU */
    LANES_NEVER_FITS = -1,      /* P + overhead + E exceeds the capacity of every allowed GPU */
    LANES_NO_LONGER_FITS = -2,  /* update_sizes: new sizes do not fit now; old books kept */
    LANES_ERROR_EXISTS = -3,    /* job id or GPU index already known */
    LANES_ERROR_UNKNOWN = -4,   /* no such job, GPU or lane */
    LANES_ERROR_NO_MEMORY = -5, /* host allocation failed; nothing changed */
    LANES_ERROR_INVALID = -6,   /* bad argument */
    LANES_ERROR_BUSY = -7,      /* grant: another job of the lane holds it */
} lanes_status_t;

typedef enum lanes_change_kind_e {
    LANES_CHANGE_JOB_MOVED,    /* job_id moved from old_lane_id to lane_id */
    LANES_CHANGE_LANE_CLOSED,  /* lane_id released (old_size_bytes) */
    LANES_CHANGE_LANE_RESIZED, /* old_size_bytes -> new_size_bytes */
    LANES_CHANGE_LANE_OPENED,  /* lane_id created (new_size_bytes) */
} lanes_change_kind_t;

typedef struct lanes_change_s {
    lanes_change_kind_t kind;
    int gpu;
    uint32_t lane_id;
    uint32_t old_lane_id; /* JOB_MOVED only */
    uint64_t job_id;      /* JOB_MOVED only */
    uint64_t old_size_bytes;
    uint64_t new_size_bytes;
} lanes_change_t;

typedef void (*lanes_change_fn)(void *context, const lanes_change_t *change);

typedef struct lanes_config_s {
    uint64_t job_overhead_bytes; /* charged per admitted job to its GPU; 0 on simgpu */
    /* a job with unknown sizes (see "Learned sizes"): the least free memory it is admitted
     * on, and the most its claim may hold (0: no cap) */
    uint64_t provisional_min_bytes;
    uint64_t provisional_max_bytes;
    uint32_t max_jobs_per_gpu; /* 0 = no limit */
    bool share_lanes_across_users;
    bool defragment;
    lanes_change_fn on_change; /* optional */
    void *on_change_context;
} lanes_config_t;

typedef struct lanes_request_s {
    uint64_t job_id;
    uint32_t uid;
    uint64_t persistent_bytes; /* or LANES_SIZE_UNKNOWN */
    uint64_t ephemeral_bytes;  /* or LANES_SIZE_UNKNOWN */
    int gpu;                   /* LANES_ANY_GPU, or the only GPU allowed */
    uint64_t claim_max_bytes;  /* unknown sizes: the most its claim may hold (0: no cap) */
    bool alone;                /* a lane of its own, always ("Lanes of their own") */
} lanes_request_t;

typedef struct lanes_placement_s {
    int gpu;
    uint32_t lane_id;
    uint64_t lane_size_bytes;
    uint64_t persistent_bytes; /* the job's budget (without the context overhead) */
    uint64_t ephemeral_bytes;  /* provisional: its claim */
    bool provisional;          /* sizes unknown: admitted on a claim, not learned yet */
} lanes_placement_t;

typedef struct lanes_lane_info_s {
    int gpu;
    uint32_t lane_id;
    uint64_t size_bytes;
    size_t job_count;
    bool active; /* a job holds the lane (granted) */
    uint64_t active_job_id;
} lanes_lane_info_t;

typedef struct lanes_gpu_info_s {
    int gpu;
    uint64_t capacity_bytes;
    uint64_t persistent_bytes; /* sum of P + overhead of admitted jobs */
    uint64_t lane_bytes;       /* sum of lane sizes */
    uint64_t free_bytes;       /* capacity - persistent - lanes */
    size_t job_count;
    size_t lane_count;
} lanes_gpu_info_t;

/* Defaults: 512 MiB overhead, claims of at least 3 GiB and no cap, no job limit, one user per lane,
 * defragmentation on, no change callback. */
void lanes_config_default(lanes_config_t *config);
const char *lanes_status_name(lanes_status_t status);

/* Copies the config. NULL config = defaults. Returns NULL when out of memory. */
lanes_t *lanes_create(const lanes_config_t *config);
void lanes_destroy(lanes_t *lanes); /* NULL ok */
/* A scratch copy of the books (same layout, lane ids, grants and config, but no on_change):
 * to try a change, e.g. several admissions that must all succeed, without reporting
 * anything; the same calls made on the original then give the same results. NULL when out of
 * memory. Free with lanes_destroy. */
lanes_t *lanes_clone(const lanes_t *lanes);

/* Adds GPU `gpu` (the daemon's index) with capacity total - reserve. */
lanes_status_t lanes_add_gpu(lanes_t *lanes, int gpu, uint64_t total_bytes, uint64_t reserve_bytes);
/* Changes the job limit per GPU (on a policy switch); admitted jobs stay. 0 = no limit. */
void lanes_set_max_jobs_per_gpu(lanes_t *lanes, uint32_t max_jobs_per_gpu);

/* LANES_OK (placement filled), LANES_WAIT, LANES_NEVER_FITS or an error. */
lanes_status_t lanes_admit(lanes_t *lanes, const lanes_request_t *request,
                           lanes_placement_t *placement);
/* Places the job in lane lane_id (request->gpu: LANES_ANY_GPU or that lane's GPU), growing
 * the lane to the job's E when the GPU has room: for a job that comes back after a daemon
 * restart to the lane it shared. Sizes must be known. Ignores max_jobs_per_gpu (the job was
 * admitted already). LANES_OK, LANES_WAIT (no room; nothing changed), LANES_ERROR_UNKNOWN (no
 * such lane), LANES_ERROR_INVALID (unknown sizes, another GPU, the lane's tenancy does not
 * allow the uid, the request is `alone` or the lane is one's own), LANES_ERROR_EXISTS,
 * LANES_ERROR_NO_MEMORY. */
lanes_status_t lanes_admit_to_lane(lanes_t *lanes, const lanes_request_t *request,
                                   uint32_t lane_id, lanes_placement_t *placement);
/* Tries requests in the given order (the policy's admission order). results[i] gets each
 * status, placements[i] (optional array) each placement. With strict_order the first
 * LANES_WAIT blocks all later requests (they get LANES_WAIT untried); NEVER_FITS and errors
 * never block. Returns the number admitted. */
size_t lanes_admit_in_order(lanes_t *lanes, const lanes_request_t *requests, size_t count,
                            bool strict_order, lanes_status_t *results,
                            lanes_placement_t *placements);
/* Removes the job; closes its lane if empty, else shrinks the lane to its jobs' largest E. */
lanes_status_t lanes_release(lanes_t *lanes, uint64_t job_id);
/* New measured sizes (LANES_SIZE_UNKNOWN keeps a value). Clears the provisional mark on
 * success. LANES_OK, LANES_MOVED, LANES_NO_LONGER_FITS, LANES_NEVER_FITS or an error.
 * Call at the job's iteration boundary, while it does not hold its lane. */
lanes_status_t lanes_update_sizes(lanes_t *lanes, uint64_t job_id, uint64_t persistent_bytes,
                                  uint64_t ephemeral_bytes, lanes_placement_t *placement);

/* A provisional job needs a claim of claim_bytes (its E; its budget is P + E) and holds
 * held_bytes of its claim now: the claim grows to it at once if its GPU's free memory holds it
 * (merging lanes there if needed, as for a newcomer). Else the claim shrinks to held_bytes
 * (the rest is free for others) and claim_bytes is kept as its want: it waits like a newcomer
 * of that size, except that each time memory frees on its GPU (a departure, a shrink, learned
 * sizes) the waiting claims are served first, in admission order, each whole or not at all,
 * before anyone else is admitted there; learning its sizes ends the wait. LANES_OK (the claim
 * holds it now), LANES_WAIT, LANES_NEVER_FITS (more than its cap, or than its GPU holds beside
 * its own P and overhead: it can never have it; nothing changed), LANES_ERROR_INVALID (the
 * job's sizes are known), LANES_ERROR_UNKNOWN, LANES_ERROR_NO_MEMORY. Changes are reported
 * through config.on_change (LANE_RESIZED). */
lanes_status_t lanes_want(lanes_t *lanes, uint64_t job_id, uint64_t claim_bytes,
                          uint64_t held_bytes, lanes_placement_t *placement);

/* The job starts an iteration in its lane. LANES_ERROR_BUSY when another job of the lane
 * holds it. *clear_needed: the lane's memory was last used by another uid. */
lanes_status_t lanes_grant(lanes_t *lanes, uint64_t job_id, bool *clear_needed);
/* The job reached an iteration boundary and gives its lane back. */
lanes_status_t lanes_yield(lanes_t *lanes, uint64_t job_id);

lanes_status_t lanes_job_placement(const lanes_t *lanes, uint64_t job_id,
                                   lanes_placement_t *placement);
lanes_status_t lanes_gpu_info(const lanes_t *lanes, int gpu, lanes_gpu_info_t *info);
/* Fills up to `capacity` lanes (GPU order, then lane id); returns how many lanes exist. */
size_t lanes_list(const lanes_t *lanes, lanes_lane_info_t *out, size_t capacity);
/* Counts the changes of the books: it grows with every call that admits, releases, resizes,
 * moves or merges (anything that may change which job is in which lane, a lane's size or the
 * uid whose data a lane holds), and stays put across grants, yields and reads. A caller that
 * keeps a copy of lane membership rebuilds it when the count moved. */
uint64_t lanes_version(const lanes_t *lanes);
/* Fills up to `capacity` job ids of a lane (admission order); returns how many it holds. */
size_t lanes_lane_jobs(const lanes_t *lanes, uint32_t lane_id, uint64_t *job_ids,
                       size_t capacity);

#endif
