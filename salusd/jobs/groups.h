/* Groups: the ranks of one distributed job (salusctl run --group, or a launcher's variables:
 * common/launch.h).
 *
 * A group is keyed by (uid, name): a group never mixes users, and two users' groups of the
 * same name are two groups. It gets a numeric id for the scheduling core (hints.group, given
 * when a rank's program registers), and checks each rank as it is submitted: the world, sync
 * mode and share_gpus of every rank must be the group's, a rank is taken once, rank < world.
 *
 * Failure: a rank that ends badly (its command exits non-zero or is killed by a signal, its
 * program is refused, or it goes away without a known exit status) fails its group: the
 * record keeps which rank and how ("rank 1: killed by signal 9"); every other rank still
 * live is ended through the kill machinery (the terminate_job observer, jobctl.c: SIGTERM,
 * SIGKILL after --group-kill-grace-s); a rank waiting for admission has its registration answered with an
 * error naming the failed rank; a rank submitted later is refused with it. A rank that exits
 * 0 does not fail its group.
 *
 * Host-only ranks: a rank is known from its submit on. Once every rank of the group has been
 * submitted (across nodes: once the group's record names every rank's node, cluster.h), the
 * ranks that registered are released for admission (sched_core_group_release) and a rank
 * that has not registered is
 * host-only: it makes no driver call, holds no GPU and no memory, does not delay admission,
 * gang slots or SSP bounds, and is listed as "host-only" (groups, ps). If it calls the driver
 * later it registers and is placed as the group's late rank. Its end counts as any rank's: a
 * host-only rank whose command exits non-zero or is killed fails its group, as does one whose
 * salusctl run goes away without reporting (salusd watches the submitter through a pidfd of
 * the submit connection's process: jobctl.c).
 *
 * Life: forming (fewer ranks submitted than its world), waiting (some registered rank not
 * admitted yet), running (a group of host-only ranks only is running too), then failed or
 * done once every rank it had has ended. A forming group whose submitted ranks (here) all
 * ended well does not end: it waits for its missing ranks (a host-only rank may exit 0
 * before another rank is even submitted), a late rank joins it; if the missing ranks have not
 * come --group-form-timeout-s after, it fails ("rank N never came"). Across nodes the cluster
 * record keeps this node's part (not over) while it waits. An ended group's name is
 * free again at once when it is done, GROUPS_FAILED_LINGER_S after its end when it failed
 * (ranks of the same launch that come late hear of the failure); the last GROUPS_ENDED_KEPT
 * ended groups stay listed (salusctl groups). */
#ifndef SALUS_SALUSD_GROUPS_H
#define SALUS_SALUSD_GROUPS_H

#include "daemon.h"
#include "launch.h"
#include "sched_core.h"

#define GROUPS_ENDED_KEPT 16
#define GROUPS_FAILED_LINGER_S 10

/* A sync mode as the launch contract names it and as the scheduling core does. */
static inline sched_core_sync_t groups_core_sync(launch_sync_t sync)
{
    return sync == LAUNCH_SYNC_SSP   ? SCHED_CORE_SYNC_SSP
           : sync == LAUNCH_SYNC_ASP ? SCHED_CORE_SYNC_ASP
                                     : SCHED_CORE_SYNC_BSP;
}
static inline launch_sync_t groups_launch_sync(sched_core_sync_t sync)
{
    return sync == SCHED_CORE_SYNC_SSP   ? LAUNCH_SYNC_SSP
           : sync == SCHED_CORE_SYNC_ASP ? LAUNCH_SYNC_ASP
                                         : LAUNCH_SYNC_BSP;
}

/* The group fields of a submit request (protocol minor 2). */
typedef struct groups_fields_s {
    char name[LAUNCH_GROUP_BYTES];
    uint32_t world, rank;
    int32_t local_rank; /* -1: unknown */
    launch_sync_t sync;
    uint32_t staleness;
    int share_gpus;
    int restore;        /* "restore": true (salusctl run --restore): the group's tables start
                         * from their checkpoints on this node (ps_ckpt.h) */
    int reattached;     /* a rank re-attaching after a restart of salusd: the ranks its group
                         * misses may have ended before it (not kept), so the group does not
                         * wait for them (--group-form-timeout-s) once its ranks here end */
} groups_fields_t;

/* Reads the group fields of a submit body: 1 when present, 0 when the body has none, -EINVAL
 * with why when they are malformed or invalid (the message is the reply). */
int groups_fields_parse(const msgpack_object *body, groups_fields_t *fields, char *why,
                        size_t why_size);
/* Whether uid may add this rank (world, sync, share_gpus as the group's; rank free; the group
 * not failed). 0, or -EINVAL / -EBUSY with err the reply's message. */
int groups_check_join(salusd_t *d, uid_t uid, const groups_fields_t *fields, char *err,
                      size_t err_size);
/* Records the (reserved) job as the rank, after groups_check_join, and gives the job what
 * the scheduling core is told of its group when it registers (job->group_*). 0 or -ENOMEM. */
int groups_join(salusd_t *d, job_t *job, const groups_fields_t *fields);
/* The job ended and how is settled (its exit status known, or given up on): a bad end fails
 * its group. Idempotent. */
void groups_rank_over(salusd_t *d, job_t *job);
/* 1 when every rank of group id was submitted (a cluster group: on every node, as its record
 * says, groups_cluster_complete): its ranks not registered are host-only. */
int groups_all_submitted(const salusd_t *d, uint64_t id);
/* The cluster role saw every rank of cluster group id submitted (its record names every
 * rank's node): from now on its ranks here not registered are host-only. Idempotent. */
void groups_cluster_complete(salusd_t *d, uint64_t id);
/* The state ps shows for a job: "host-only" for a host-only rank, else state. */
const char *groups_job_state(const salusd_t *d, const job_t *job, const char *state);
/* The group name and rank of a job, for ps (NULL: not in a group). */
const char *groups_of_job(const salusd_t *d, const job_t *job, uint32_t *rank);
/* The groups op: {groups: [{id, name, uid, world, sync, staleness, share_gpus, state,
 * failed_rank|nil, failure|nil, ranks: [{rank, job_id, pid|nil, local_rank|nil, gpu|nil,
 * state, gang_wait_ms}]}]}, those the requester may see; ranks lists the ranks submitted,
 * by rank (those not submitted are left out: the list stays within a frame). */
void groups_handle_list(conn_t *c, const proto_msg_t *msg);

/* One group as the metrics endpoint shows it. */
typedef struct groups_sample_s {
    const char *name;
    unsigned uid;
    const char *state;
    uint32_t world;
    uint32_t ranks_live;      /* ranks submitted and not ended */
    int failed;
    uint64_t gang_wait_ns;    /* its ranks' gang waits, summed (the ended ranks' included) */
} groups_sample_t;
/* The i-th group (0 <= i < groups_count). */
size_t groups_count(const salusd_t *d);
int groups_sample_at(salusd_t *d, size_t index, groups_sample_t *sample);

/* A group's identity, for the cluster role (cluster.h). 0 or -ENOENT. */
typedef struct groups_desc_s {
    uid_t uid;
    const char *name;
    uint32_t world;
    const char *sync;          /* "bsp", "ssp:S", "asp" */
    int share_gpus;
} groups_desc_t;
int groups_describe(const salusd_t *d, uint64_t id, groups_desc_t *desc, char *sync_buf,
                    size_t sync_size);
/* The group failed elsewhere (another node, a node gone, the cluster lost): it fails here
 * as when one of its ranks ends badly (failure: why), its live ranks are ended. Idempotent. */
void groups_fail(salusd_t *d, uint64_t id, const char *failure);
/* The id of the live group (uid, name) here (not ended), or 0. */
uint64_t groups_find(const salusd_t *d, uid_t uid, const char *name);
/* 1 when a rank of the group joined here with "restore" (salusctl run --restore), else 0. */
int groups_restored(const salusd_t *d, uint64_t id);
/* The job ids of a group's live ranks here (at most max); their count. */
uint32_t groups_live_jobs(salusd_t *d, uint64_t id, uint64_t *jobs, uint32_t max);

void groups_fini(salusd_t *d);

#endif
