/* Lane manager internals shared by lanes.c (public API) and lanes_plan.c (state, placement,
 * defragmentation, change reports). Not a public header.
 *
 * Every change is made on a copy of the state (lanes_state_clone), checked, then committed
 * or dropped, so that a failed attempt never leaves half a change behind. The copy reserves
 * room for one more job and one more lane, so planning itself never allocates.
 *
 * State invariants after every committed call: every lane holds at least one job, and its
 * size equals the largest E of its jobs (lanes_state_tidy); each GPU keeps
 * sum(P + overhead) + sum(lane sizes) <= capacity; a claim lane (lanes.h, "Learned sizes")
 * holds exactly one job, a provisional one, whose E is the claim; a lane with an `alone` job
 * holds that job only. */
#ifndef SALUS_MEMORY_LANES_INTERNAL_H
#define SALUS_MEMORY_LANES_INTERNAL_H

#include "lanes.h"

#define LANES_NO_LANE 0u           /* lane ids start at 1 */
#define LANES_MEMORY_FRESH (-1LL)  /* lane memory not used by any job yet */
#define LANES_MEMORY_MIXED (-2LL)  /* merged from lanes last used by different uids */

typedef struct lanes_job_s {
    uint64_t id;
    uint32_t uid;
    uint64_t persistent_bytes;
    uint64_t ephemeral_bytes;
    int gpu;          /* -1 while not placed */
    uint32_t lane_id; /* LANES_NO_LANE while not placed */
    bool provisional; /* sizes unknown: E is its claim (lanes.h, "Learned sizes") */
    bool granted;
    uint64_t claim_max_bytes; /* provisional: the request's cap (0: none) */
    uint64_t want_bytes;      /* provisional: the claim it waits to grow to (0: none) */
    bool alone;               /* a lane of its own, always (lanes.h, "Lanes of their own") */
} lanes_job_t;

typedef struct lanes_lane_s {
    uint32_t id;
    int gpu;
    uint64_t size_bytes;
    uint32_t tenant_uid;  /* the uid of its jobs when lanes are not shared */
    long long memory_uid; /* uid whose data the lane may hold, or LANES_MEMORY_* */
    bool claim;           /* a provisional job's claim: nobody joins or merges it */
    bool alone;           /* its job's own lane (lanes_job_t.alone): nobody joins or merges it */
} lanes_lane_t;

typedef struct lanes_gpu_s {
    int index;
    uint64_t capacity_bytes;
} lanes_gpu_t;

typedef struct lanes_state_s {
    lanes_gpu_t *gpus;
    size_t gpu_count, gpu_capacity;
    lanes_lane_t *lanes;
    size_t lane_count, lane_capacity;
    lanes_job_t *jobs;
    size_t job_count, job_capacity;
    uint32_t next_lane_id;
} lanes_state_t;

/* An index of the committed state, rebuilt by every commit (grants and yields only update
 * `granted`): lanes_grant, lanes_yield and lanes_job_placement run once per iteration of every
 * job (the daemon's turns, the simulator's events), so they look jobs up by hash instead of
 * walking the state. When the index cannot be allocated, `valid` is false and every lookup
 * walks the state as before. */
typedef struct lanes_index_s {
    bool valid;
    uint32_t *slots;       /* open addressing by job id: job index + 1, 0 = empty */
    size_t mask;           /* slot count - 1 (a power of two >= 2 * jobs) */
    uint32_t *job_lane;    /* by job index: its lane's index in state.lanes (or UINT32_MAX) */
    uint32_t *lane_granted; /* by lane index: how many of its jobs are granted */
    size_t job_room, lane_room, slot_room;
} lanes_index_t;

struct lanes_s {
    lanes_config_t config;
    lanes_state_t state;
    lanes_index_t index;
    uint64_t version; /* commits so far (lanes_version) */
};

/* Deep copy with room for one more job, one more lane and one more GPU. 0 or -1 (ENOMEM). */
int lanes_state_clone(const lanes_state_t *source, lanes_state_t *copy);
void lanes_state_free(lanes_state_t *state);

lanes_job_t *lanes_state_job(const lanes_state_t *state, uint64_t job_id);
lanes_lane_t *lanes_state_lane(const lanes_state_t *state, uint32_t lane_id);
const lanes_gpu_t *lanes_state_gpu(const lanes_state_t *state, int gpu);
size_t lanes_state_lane_job_count(const lanes_state_t *state, uint32_t lane_id);
size_t lanes_state_gpu_job_count(const lanes_state_t *state, int gpu);
uint64_t lanes_state_gpu_persistent_bytes(const lanes_state_t *state, const lanes_config_t *config,
                                          int gpu);
uint64_t lanes_state_gpu_lane_bytes(const lanes_state_t *state, int gpu);

/* Closes the GPU's empty lanes and sets each other lane to its jobs' largest E (a lane whose
 * job is provisional stays a claim, any other stops being one). */
void lanes_state_tidy(lanes_state_t *state, int gpu);
/* Gives the GPU's free memory to the claims that wait for more (lanes_want), in admission
 * order, each the whole of what it wants or nothing. */
void lanes_state_grow_claims(lanes_state_t *state, const lanes_config_t *config, int gpu);
/* Does a claim of the GPU wait for more (lanes_want)? */
bool lanes_state_claims_wait(const lanes_state_t *state, const lanes_config_t *config, int gpu);
/* Merges pairs of the GPU's lanes (step 3 of lanes.h) until its claims have what they wait
 * for; true when they do (else the state holds the merges made: drop it). */
bool lanes_state_merge_for_claims(lanes_state_t *state, const lanes_config_t *config, int gpu);

/* Places the unplaced job by steps 1-2 of lanes.h on `gpu` (or every GPU when gpu < 0); a
 * provisional job on a claim of its own. true when placed. */
bool lanes_place_plain(lanes_state_t *state, const lanes_config_t *config, lanes_job_t *job,
                       int gpu);
/* Step 3 on one GPU: grows or merges lanes until the job is placed. Returns the number of
 * layout changes it made (>= 0), or -1 when no re-layout makes room. */
int lanes_place_defragment(lanes_state_t *state, const lanes_config_t *config, lanes_job_t *job,
                           int gpu);

/* Reports the differences between two states through config->on_change. */
void lanes_report_changes(const lanes_state_t *before, const lanes_state_t *after,
                          const lanes_config_t *config);

#endif
