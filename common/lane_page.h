/* The lane's page (salusd --lane-memory shared): one memfd per lane's set of chunks, which
 * salusd creates with the set and passes, with the chunks' descriptors, to every job of the
 * lane that maps them (lane_map). Its one live word is `owner`: the id of the job that uses
 * the lane's chunks now, 0 when none does. A job serves allocations from the lane's chunks
 * only after it took `owner` with a CAS 0 -> its id, and stores 0 only when no block of its
 * own lives in them and its work on them is complete (at the point it gives its lane up).
 * So two jobs never use the same bytes at once, whatever the turns: a job that still holds
 * lane memory at its release (it did not free it: by the learned-size rule that memory is
 * persistent) keeps `owner`, and its lane-mates take chunks of their own meanwhile, as with
 * --lane-memory fresh. salusd clears `owner` when the job that holds it ends.
 * Between users (salusd --share-lanes-across-users) the chunks are mapped by the jobs of one
 * user at a time: when a job of another user asks for them, salusd sets `evict_uid` to the
 * user whose jobs map them (the asking job takes chunks of its own this time); each of those
 * unmaps them when it gives its lane up and tells salusd (lane_unmap); once none maps them,
 * the next job of the other user that asks gets them after salusd cleared them on the device.
 * Hand-overs between one user's jobs never unmap or clear. */
#ifndef SALUS_COMMON_LANE_PAGE_H
#define SALUS_COMMON_LANE_PAGE_H

#include <stdatomic.h>
#include <stdint.h>

#define LANE_PAGE_MAGIC 0x534c4e50u /* "SLNP" */
#define LANE_PAGE_VERSION 1u
#define LANE_PAGE_BYTES 4096u
#define LANE_PAGE_MOVED 64

typedef struct lane_page_s {
    uint32_t magic;
    uint32_t version;
    _Atomic uint64_t owner;      /* the job that uses the lane's chunks now; 0: none */
    uint64_t bytes;              /* the chunks' size, all together */
    _Atomic uint64_t handovers;  /* owner taken by another job than the last (statistics) */
    _Atomic uint64_t last_owner; /* the job that held owner last */
    /* salusd -> shims, lanes shared across users: uid + 1 of the user whose jobs unmap the
     * chunks when they give their lane up (a job of another user asked for them); 0: none.
     * salusd clears them before they go to another user's job. */
    _Atomic uint32_t evict_uid;
    /* salusd -> shims: jobs a re-layout moved to another lane; each unmaps these chunks when it
     * gives its lane up (lane_unmap) and asks for its new lane's at its next allocation past its
     * persistent size. 0: a free slot; the jobs past LANE_PAGE_MOVED keep them mapped. */
    _Atomic uint64_t moved[LANE_PAGE_MOVED];
} lane_page_t;

#endif
