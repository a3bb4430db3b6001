/* The one place that renders what `salusctl ps`, `lanes` and `stats` (top) show, from typed
 * snapshots: jobs_info_at() for jobs (which decides "running" once) and gpu_sched_lanes() for
 * lanes. The metrics endpoint renders the same jobs_info_t (metrics.c, metrics_format.c).
 * Each function writes one reply body part for the requester, leaving out the jobs it may
 * not see (access_may_control). */
#ifndef SALUS_SALUSD_RENDER_H
#define SALUS_SALUSD_RENDER_H

#include "daemon.h"

/* [{id, name, pid, uid, state, gpu, lane, ..., wait_in_progress_ms, lane_holder, ...}] */
void render_jobs(conn_t *requester, msgpack_packer *pk);
/* [{gpu, lane, size_bytes, jobs: [ids], active: id|null}] */
void render_lanes(conn_t *requester, msgpack_packer *pk);
/* The whole stats reply: {now_ms, gpus: [...], jobs: [...]}. */
void render_handle_stats(conn_t *c, const proto_msg_t *msg);

#endif
