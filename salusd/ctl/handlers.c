/* Request handlers: one row per op. Each handler writes exactly one reply or error. */
#include "cluster.h"
#include "daemon.h"
#include "groups.h"
#include "handlers.h"
#include "jobctl.h"
#include "jobs.h"
#include "policy.h"
#include "reserve_for.h"
#include "ps_ckpt.h"
#include "ps_cluster.h"
#include "ps_local.h"
#include "metrics.h"
#include "gpu_sched.h"
#include "render.h"

#include "log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static void reply_status(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    proto_enc_t *e = &d->enc;
    const char *metrics = metrics_bound_address(d);
    char shm_name[256];
    jobs_simgpu_shm_name(d, shm_name, sizeof(shm_name));
    proto_enc_begin(e, PROTO_REPLY, msg->id, "",
                    13 + (metrics != NULL) + (d->cluster != NULL) + (shm_name[0] != '\0'));
    proto_pack_kv_str(&e->pk, "server", "salusd " SALUS_VERSION);
    proto_pack_kv_uint(&e->pk, "protocol", PROTO_VERSION);
    proto_pack_kv_uint(&e->pk, "pid", (uint64_t)getpid());
    proto_pack_kv_uint(&e->pk, "uptime_ms", (salusd_now_ns() - d->started_ns) / 1000000);
    proto_pack_kv_str(&e->pk, "socket", d->config.socket_path);
    proto_pack_kv_str(&e->pk, "device", d->devices.simulated ? "simgpu" : "cuda");
    proto_pack_kv_str(&e->pk, "driver", d->devices.driver.path);
    if (shm_name[0]) /* what a container needs mounted (salusctl cdi generate) */
        proto_pack_kv_str(&e->pk, "simgpu_shm", shm_name);
    proto_pack_str(&e->pk, "gpus");
    msgpack_pack_array(&e->pk, (uint32_t)d->devices.count);
    for (int i = 0; i < d->devices.count; i++) {
        const gpu_t *g = &d->devices.gpus[i];
        uint64_t busy_ns = 0;
        devices_busy_ns(&d->devices, i, &busy_ns);
        msgpack_pack_map(&e->pk, 6);
        proto_pack_kv_uint(&e->pk, "index", (uint64_t)i);
        proto_pack_kv_str(&e->pk, "name", g->name);
        proto_pack_kv_uint(&e->pk, "total_bytes", g->total_bytes);
        proto_pack_kv_uint(&e->pk, "reserved_bytes", gpu_sched_gpu_reserved_bytes(d, i));
        proto_pack_kv_uint(&e->pk, "used_bytes", g->chunk_bytes);
        proto_pack_kv_uint(&e->pk, "busy_ms", busy_ns / 1000000);
    }
    proto_pack_kv_uint(&e->pk, "jobs", registry_count(d->registry));
    proto_pack_kv_uint(&e->pk, "connections", d->connection_count);
    proto_pack_kv_uint(&e->pk, "requests_served", d->requests_served);
    proto_pack_kv_uint(&e->pk, "frames_rejected", d->frames_rejected);
    /* the lanes' shared chunks (--lane-memory shared) this salusd made, and those it took
     * back from their jobs after a restart */
    proto_pack_str(&e->pk, "lane_sets");
    msgpack_pack_map(&e->pk, 2);
    proto_pack_kv_uint(&e->pk, "created", d->lane_sets_created);
    proto_pack_kv_uint(&e->pk, "restored", d->lane_sets_restored);
    if (metrics)
        proto_pack_kv_str(&e->pk, "metrics", metrics);
    if (d->cluster) {
        proto_pack_str(&e->pk, "cluster");
        cluster_pack_status(d, &e->pk);
    }
    proto_enc_finish(e);
    server_send(c, e);
}

static void reply_ps(conn_t *c, const proto_msg_t *msg)
{
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 1);
    proto_pack_str(&e->pk, "jobs");
    render_jobs(c, &e->pk); /* the requester's jobs (all for admins) */
    proto_enc_finish(e);
    server_send(c, e);
}

static void reply_lanes(conn_t *c, const proto_msg_t *msg)
{
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 1);
    proto_pack_str(&e->pk, "lanes");
    render_lanes(c, &e->pk);
    proto_enc_finish(e);
    server_send(c, e);
}

/* policy {name?}: switches when a name is given; always answers the current one */
static void reply_policy(conn_t *c, const proto_msg_t *msg)
{
    char name[32], err[128];
    int rc = proto_get_str_copy(&msg->body, "name", name, sizeof(name));
    if (rc == -EINVAL) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "policy name must be a short string");
        return;
    }
    if (rc == 0) {
        if (!access_is_admin(c)) {
            server_reply_error(c, msg->id, PROTO_EPERM, 0,
                               "permission_denied: only root, salusd's own user or members of "
                               "the group %s may switch the policy (from salusd's own pid and "
                               "user namespaces, not from a container, unless salusd has "
                               "--admin-from-containers)",
                               c->daemon->config.admin_group);
            return;
        }
        if (jobs_set_policy(c->daemon, name, err, sizeof(err)) < 0) {
            server_reply_error(c, msg->id, PROTO_EBADARG, 0, "%s", err);
            return;
        }
    }
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 2);
    proto_pack_kv_str(&e->pk, "policy", gpu_sched_policy_name(c->daemon));
    proto_pack_str(&e->pk, "policies");
    msgpack_pack_array(&e->pk, (uint32_t)policy_count());
    for (size_t i = 0; i < policy_count(); i++)
        proto_pack_str(&e->pk, policy_at(i)->name);
    proto_enc_finish(e);
    server_send(c, e);
}

static const server_op_t ctl_ops[] = {
    {"lanes", reply_lanes, SERVER_OP_ANYONE},
    {"policy", reply_policy, SERVER_OP_ANYONE},
    {"status", reply_status, SERVER_OP_ANYONE},
    {"ps", reply_ps, SERVER_OP_ANYONE},
    {"submit", jobctl_handle_submit, SERVER_OP_CAP_SUBMITS},
    {"job_exit", jobctl_handle_job_exit, SERVER_OP_ANYONE},
    {"kill", jobctl_handle_kill, SERVER_OP_ANYONE},
    {"wait", jobctl_handle_wait, SERVER_OP_ANYONE},
    {"logs", jobctl_handle_logs, SERVER_OP_ANYONE},
    {"reserve_for", reserve_for_handle, SERVER_OP_ROOT},
    {"reserved_exit", reserve_for_handle_exit, SERVER_OP_ROOT},
    {"stats", render_handle_stats, SERVER_OP_ANYONE},
    {NULL, NULL, 0},
};

/* the request table: ctl's rows and those the subsystems below export (op names are unique) */
static const server_op_t *const op_tables[] = {ctl_ops, jobs_ops, ps_ops};

/* Per-user caps on live jobs, for the ops flagged SERVER_OP_CAP_*: a user cannot fill the
 * daemon (and its descriptors) with jobs. Root and salusd's own user are not capped. */
static int over_job_caps(conn_t *c, const proto_msg_t *msg, unsigned flags)
{
    salusd_t *d = c->daemon;
    if (c->uid == 0 || c->uid == geteuid())
        return 0;
    long long queued = 0, registered = 0;
    for (size_t i = 0; i < registry_count(d->registry); i++) {
        const job_t *job = registry_at(d->registry, i);
        if (job->uid != c->uid || !job->runtime)
            continue;
        if (jobs_is_reserved(job))
            queued++;
        else
            registered++;
    }
    if ((flags & SERVER_OP_CAP_SUBMITS) && queued >= d->config.max_queued_submits_per_uid) {
        server_reply_error(c, msg->id, PROTO_EBUSY, 0,
                           "uid %u has %lld submitted jobs whose program has not started yet "
                           "(max-queued-submits-per-uid)", (unsigned)c->uid, queued);
        return 1;
    }
    if ((flags & SERVER_OP_CAP_JOBS) && registered >= d->config.max_jobs_per_uid) {
        server_reply_error(c, msg->id, PROTO_EBUSY, 0,
                           "uid %u has %lld jobs registered already (max-jobs-per-uid)",
                           (unsigned)c->uid, registered);
        return 1;
    }
    return 0;
}

/* What the row's flags ask of the caller: 1 with the error answered, or 0. */
static int refused_by_flags(conn_t *c, const proto_msg_t *msg, unsigned flags)
{
    if ((flags & SERVER_OP_ROOT) && !(c->uid == 0 && access_is_admin(c))) {
        server_reply_error(c, msg->id, PROTO_EPERM, 0,
                           "permission_denied: %s is root's (a resource manager's plugin, from "
                           "salusd's own pid and user namespaces)", msg->op);
        return 1;
    }
    if ((flags & SERVER_OP_JOB) && !server_conn_slot(c, CONN_SLOT_JOB)) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0,
                           "%s: this connection is not a registered job (register first)",
                           msg->op);
        return 1;
    }
    return (flags & (SERVER_OP_CAP_JOBS | SERVER_OP_CAP_SUBMITS)) &&
           over_job_caps(c, msg, flags);
}

static void handlers_dispatch(conn_t *c, const proto_msg_t *msg)
{
    for (size_t t = 0; t < sizeof(op_tables) / sizeof(op_tables[0]); t++)
        for (const server_op_t *row = op_tables[t]; row->op; row++)
            if (strcmp(row->op, msg->op) == 0) {
                if (!refused_by_flags(c, msg, row->flags))
                    row->fn(c, msg);
                return;
            }
    server_reply_error(c, msg->id, PROTO_EUNKNOWN_OP, 0, "unknown request '%s'", msg->op);
}

const server_ops_t handlers_ops = {
    .dispatch = handlers_dispatch,
};
