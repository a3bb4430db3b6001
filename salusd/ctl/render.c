/* Renders ps, lanes and stats from typed snapshots (see render.h). */
#include "render.h"

#include "access.h"
#include "gpu_sched.h"
#include "groups.h"
#include "jobs.h"

#include <stdlib.h>
#include <string.h>

static int visible(conn_t *requester, uint64_t job_id)
{
    const job_t *job = job_id ? registry_find(requester->daemon->registry, job_id) : NULL;
    return job && access_may_control(requester, job->uid);
}

/* "gpus": every GPU of the job in member order ([] until admitted); a job on several GPUs
 * (--gpus) also shows how its grants came: gang_grants, and of those gang_grants_split, the
 * ones whose members were not granted in one event */
static void pack_gpus(salusd_t *d, proto_map_t *map, const jobs_info_t *info)
{
    job_gpus_info_t multi;
    int is_multi = job_gpus_info(gpu_sched_job_gpus(d), info->id, &multi) == 0;
    uint32_t n = is_multi ? (multi.admitted ? multi.gpus : 0) : info->gpu >= 0;
    proto_pack_str(&map->pk, "gpus");
    msgpack_pack_array(&map->pk, n);
    for (uint32_t k = 0; k < n; k++)
        msgpack_pack_int64(&map->pk, is_multi ? multi.gpu[k] : info->gpu);
    map->count++;
    if (is_multi) {
        proto_map_uint(map, "gang_grants", multi.grants);
        proto_map_uint(map, "gang_grants_split", multi.grants_split);
    }
}

void render_jobs(conn_t *requester, msgpack_packer *pk)
{
    salusd_t *d = requester->daemon;
    size_t n = registry_count(d->registry), shown = 0;
    for (size_t i = 0; i < n; i++)
        shown += access_may_control(requester, registry_at(d->registry, i)->uid);
    msgpack_pack_array(pk, (uint32_t)shown);
    for (size_t i = 0; i < n; i++) {
        const job_t *job = registry_at(d->registry, i);
        jobs_info_t info;
        if (!access_may_control(requester, job->uid))
            continue;
        if (jobs_info_at(d, i, &info) < 0) { /* cannot happen: i < count */
            msgpack_pack_nil(pk);
            continue;
        }
        proto_map_t map;
        proto_map_begin(&map, pk);
        proto_map_uint(&map, "id", info.id);
        proto_map_str(&map, "name", info.name);
        proto_map_uint(&map, "pid", (uint64_t)info.pid);
        proto_map_uint(&map, "uid", (uint64_t)info.uid);
        /* the container it runs in (its cgroup path's id), null when none */
        proto_pack_str(&map.pk, "container");
        if (job->container[0])
            proto_pack_str(&map.pk, job->container);
        else
            msgpack_pack_nil(&map.pk);
        map.count++;
        proto_map_str(&map, "state", groups_job_state(d, job, info.state));
        proto_map_int_or_nil(&map, "gpu", info.gpu, info.gpu >= 0);
        pack_gpus(d, &map, &info);
        proto_map_int_or_nil(&map, "lane", info.lane, info.lane >= 0);
        proto_map_uint(&map, "iterations", info.iterations);
        proto_map_uint(&map, "iterations_expected", info.iterations_expected);
        proto_map_uint(&map, "persistent_bytes", info.persistent_bytes);
        proto_map_uint(&map, "ephemeral_peak_bytes", info.ephemeral_peak_bytes);
        proto_map_uint(&map, "memory_bytes", info.memory_bytes);
        proto_map_uint(&map, "live_bytes", info.live_bytes);
        proto_map_uint(&map, "budget_bytes", info.budget_bytes);
        /* a job without hints: on a claim while its sizes are learned, then what was learned
         * (null until then, and for a job with hints) */
        proto_pack_str(&map.pk, "provisional");
        if (info.provisional)
            msgpack_pack_true(&map.pk);
        else
            msgpack_pack_false(&map.pk);
        map.count++;
        proto_map_int_or_nil(&map, "learned_persistent_bytes",
                             (int64_t)info.learned_persistent_bytes, info.sizes_learned);
        proto_map_int_or_nil(&map, "learned_ephemeral_bytes",
                             (int64_t)info.learned_ephemeral_bytes, info.sizes_learned);
        proto_map_uint(&map, "gpu_time_ms", info.busy_ns / 1000000);
        proto_map_uint(&map, "wait_time_ms", info.wait_ns / 1000000);
        /* the wait going on now (admission or a turn); lane_holder: who has its lane */
        proto_map_uint(&map, "wait_in_progress_ms", info.wait_in_progress_ns / 1000000);
        proto_map_int_or_nil(&map, "lane_holder", (int64_t)info.lane_holder,
                             visible(requester, info.lane_holder));
        /* waiting for admission: why (null otherwise) */
        proto_pack_str(&map.pk, "wait_reason");
        if (info.wait_reason)
            proto_pack_str(&map.pk, info.wait_reason);
        else
            msgpack_pack_nil(&map.pk);
        map.count++;
        /* the policy's rank of the job (LAS: its queue, Gittins: its index); null when it has
         * none */
        const char *rank_name = info.has_policy_rank ? gpu_sched_rank_name(d) : NULL;
        if (rank_name) {
            proto_map_str(&map, "policy_rank_name", rank_name);
            proto_pack_str(&map.pk, "policy_rank");
            msgpack_pack_double(&map.pk, info.policy_rank);
            map.count++;
        } else {
            proto_map_int_or_nil(&map, "policy_rank_name", 0, 0);
            proto_map_int_or_nil(&map, "policy_rank", 0, 0);
        }
        /* a rank: its group's name and its rank (null: a single job); gang_wait_ms: time
         * held back for its group (the other ranks, its gang's slot) */
        uint32_t rank = 0;
        const char *group = groups_of_job(d, job, &rank);
        if (group)
            proto_map_str(&map, "group", group);
        else
            proto_map_int_or_nil(&map, "group", 0, 0);
        proto_map_int_or_nil(&map, "rank", rank, group != NULL);
        proto_map_uint(&map, "gang_wait_ms", info.gang_wait_ns / 1000000);
        /* latency-critical jobs: their target (null: best-effort) */
        proto_map_str(&map, "class", job->latency_target_ns ? "latency-critical" : "best-effort");
        proto_map_int_or_nil(&map, "latency_target_ms", (int64_t)(job->latency_target_ns / 1000000),
                             job->latency_target_ns != 0);
        /* its requests (iterations): count, over its target, latency percentiles (to within
         * 25 %: latency_hist.h); null for a best-effort job */
        bool lc = job->latency_target_ns != 0;
        const job_stats_t *st = &job->stats;
        proto_map_int_or_nil(&map, "requests", (int64_t)st->requests, lc);
        proto_map_int_or_nil(&map, "requests_over_target", (int64_t)st->requests_over_target, lc);
        proto_map_int_or_nil(&map, "request_p50_us", (int64_t)(st->request_p50_ns / 1000), lc);
        proto_map_int_or_nil(&map, "request_p95_us", (int64_t)(st->request_p95_ns / 1000), lc);
        proto_map_int_or_nil(&map, "request_p99_us", (int64_t)(st->request_p99_ns / 1000), lc);
        proto_map_uint(&map, "age_ms", (salusd_now_ns() - info.registered_ns) / 1000000);
        /* since salusd started; null until it happens */
        proto_map_uint(&map, "registered_at_ms", (info.registered_ns - d->started_ns) / 1000000);
        proto_map_int_or_nil(&map, "admitted_at_ms",
                             (int64_t)((info.admitted_ns - d->started_ns) / 1000000),
                             info.admitted_ns != 0);
        proto_map_int_or_nil(&map, "finished_at_ms",
                             (int64_t)((info.finished_ns - d->started_ns) / 1000000),
                             info.finished_ns != 0);
        /* from the kernel (pidfd) or salusctl's report (job_exit); null while unknown.
         * exit_status is 128 + signal for a killed job, as a shell says */
        proto_map_int_or_nil(&map, "exit_status", job->exit_status, job->exit_known);
        proto_map_int_or_nil(&map, "signal", job->exit_signal,
                             job->exit_known && job->exit_signal);
        proto_map_end(&map);
    }
}

void render_lanes(conn_t *requester, msgpack_packer *pk)
{
    gpu_sched_lane_info_t *lanes = NULL;
    size_t n = 0;
    if (gpu_sched_lanes(requester->daemon, &lanes, &n) < 0)
        n = 0;
    msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const gpu_sched_lane_info_t *l = &lanes[i];
        uint32_t shown = 0;
        for (size_t k = 0; k < l->job_count; k++)
            shown += visible(requester, l->jobs[k]);
        proto_map_t map;
        proto_map_begin(&map, pk);
        proto_map_int_or_nil(&map, "gpu", l->gpu, 1);
        proto_map_uint(&map, "lane", l->lane);
        proto_map_uint(&map, "size_bytes", l->size_bytes);
        proto_pack_str(&map.pk, "jobs");
        msgpack_pack_array(&map.pk, shown);
        for (size_t k = 0; k < l->job_count; k++)
            if (visible(requester, l->jobs[k]))
                msgpack_pack_uint64(&map.pk, l->jobs[k]);
        map.count++;
        proto_map_int_or_nil(&map, "active", (int64_t)l->active_job,
                             visible(requester, l->active_job));
        /* its shared chunks (--lane-memory shared), null when it has none */
        jobs_lane_set_info_t set;
        proto_pack_str(&map.pk, "shared");
        map.count++;
        if (jobs_lane_set_info(requester->daemon, l->gpu, l->lane, &set) < 0) {
            msgpack_pack_nil(&map.pk);
        } else {
            msgpack_pack_map(&map.pk, 7);
            proto_pack_kv_uint(&map.pk, "chunk_id", set.chunk_id);
            proto_pack_kv_uint(&map.pk, "bytes", set.bytes);
            proto_pack_kv_uint(&map.pk, "jobs", set.jobs);
            proto_pack_kv_uint(&map.pk, "mapped", set.mapped);
            proto_pack_kv_uint(&map.pk, "maps", set.maps);
            proto_pack_kv_uint(&map.pk, "handovers", set.handovers);
            proto_pack_kv_uint(&map.pk, "restored", (uint64_t)set.restored);
        }
        proto_map_end(&map);
    }
    gpu_sched_lanes_free(lanes, n);
}

/* stats: raw counters; salusctl turns them into rates between two samples.
 * {now_ms, gpus: [{index, name, total_bytes, used_bytes, reserved_bytes, busy_ms|nil, lanes,
 *  jobs}], jobs: [{id, name, uid, state, gpu|nil, iterations, iterations_expected,
 *  memory_bytes, gpu_time_ms, wait_in_progress_ms, group|nil, rank|nil, gang_wait_ms,
 *  latency_target_ms|nil, request_p99_us|nil, requests_over_target|nil}]}
 * (jobs: those the requester may see) */
void render_handle_stats(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    registry_t *reg = d->registry;
    gpu_sched_lane_info_t *lanes = NULL;
    size_t lane_count = 0;
    if (gpu_sched_lanes(d, &lanes, &lane_count) < 0)
        lane_count = 0;
    jobs_info_t *infos = calloc(registry_count(reg) + 1, sizeof(*infos));
    size_t job_count = 0;
    for (size_t k = 0; infos && k < registry_count(reg); k++)
        if (jobs_info_at(d, k, &infos[job_count]) == 0)
            job_count++;

    proto_enc_t *enc = &d->enc;
    proto_enc_begin(enc, PROTO_REPLY, msg->id, "", 3);
    proto_pack_kv_uint(&enc->pk, "now_ms", (salusd_now_ns() - d->started_ns) / 1000000);
    proto_pack_str(&enc->pk, "gpus");
    msgpack_pack_array(&enc->pk, (uint32_t)d->devices.count);
    for (int i = 0; i < d->devices.count; i++) {
        const gpu_t *g = &d->devices.gpus[i];
        uint64_t busy_ns = 0, jobs = 0, lanes_here = 0;
        int has_busy = devices_busy_ns(&d->devices, i, &busy_ns) == 0;
        for (size_t k = 0; k < job_count; k++) /* admitted and not ended */
            jobs += infos[k].gpu == i && !infos[k].finished_ns && infos[k].admitted_ns;
        for (size_t k = 0; k < lane_count; k++)
            lanes_here += lanes[k].gpu == i;
        proto_map_t map;
        proto_map_begin(&map, &enc->pk);
        proto_map_uint(&map, "index", (uint64_t)i);
        proto_map_str(&map, "name", g->name);
        proto_map_uint(&map, "total_bytes", g->total_bytes);
        proto_map_uint(&map, "used_bytes", g->chunk_bytes);
        proto_map_uint(&map, "reserved_bytes", gpu_sched_gpu_reserved_bytes(d, i));
        proto_map_int_or_nil(&map, "busy_ms", (int64_t)(busy_ns / 1000000), has_busy);
        proto_map_uint(&map, "lanes", lanes_here);
        proto_map_uint(&map, "jobs", jobs);
        proto_map_end(&map);
    }
    size_t shown = 0;
    for (size_t k = 0; k < job_count; k++)
        shown += access_may_control(c, infos[k].uid);
    proto_pack_str(&enc->pk, "jobs");
    msgpack_pack_array(&enc->pk, (uint32_t)shown);
    for (size_t k = 0; k < job_count; k++) {
        const jobs_info_t *info = &infos[k];
        if (!access_may_control(c, info->uid))
            continue;
        proto_map_t map;
        proto_map_begin(&map, &enc->pk);
        proto_map_uint(&map, "id", info->id);
        proto_map_str(&map, "name", info->name);
        proto_map_uint(&map, "uid", (uint64_t)info->uid);
        job_t *job = registry_find(reg, info->id);
        proto_map_str(&map, "state", job ? groups_job_state(d, job, info->state) : info->state);
        proto_map_int_or_nil(&map, "gpu", info->gpu, info->gpu >= 0);
        proto_map_uint(&map, "iterations", info->iterations);
        proto_map_uint(&map, "iterations_expected", info->iterations_expected);
        proto_map_uint(&map, "memory_bytes", info->memory_bytes);
        proto_map_uint(&map, "gpu_time_ms", info->busy_ns / 1000000);
        proto_map_uint(&map, "wait_in_progress_ms", info->wait_in_progress_ns / 1000000);
        uint32_t rank = 0;
        const char *group = job ? groups_of_job(d, job, &rank) : NULL;
        if (group)
            proto_map_str(&map, "group", group);
        else
            proto_map_int_or_nil(&map, "group", 0, 0);
        proto_map_int_or_nil(&map, "rank", rank, group != NULL);
        proto_map_uint(&map, "gang_wait_ms", info->gang_wait_ns / 1000000);
        /* latency-critical jobs: their requests' p99 and count over target (null: none) */
        bool lc = info->latency_target_ns != 0;
        proto_map_int_or_nil(&map, "latency_target_ms", (int64_t)(info->latency_target_ns / 1000000),
                             lc);
        proto_map_int_or_nil(&map, "request_p99_us", (int64_t)(info->request_p99_ns / 1000), lc);
        proto_map_int_or_nil(&map, "requests_over_target", (int64_t)info->requests_over_target,
                             lc);
        proto_map_end(&map);
    }
    proto_enc_finish(enc);
    server_send(c, enc);
    free(infos);
    gpu_sched_lanes_free(lanes, lane_count);
}
