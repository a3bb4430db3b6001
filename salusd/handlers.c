/* Request handlers: one row per op. Each handler writes exactly one reply or error. */
#include "daemon.h"

#include "log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

typedef void (*handler_fn)(conn_t *c, const proto_msg_t *msg);

static void reply_status(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 10);
    proto_pack_kv_str(&e->pk, "server", "salusd " SALUS_VERSION);
    proto_pack_kv_uint(&e->pk, "protocol", PROTO_VERSION);
    proto_pack_kv_uint(&e->pk, "pid", (uint64_t)getpid());
    proto_pack_kv_uint(&e->pk, "uptime_ms", (salusd_now_ns() - d->started_ns) / 1000000);
    proto_pack_kv_str(&e->pk, "socket", d->config.socket_path);
    proto_pack_kv_str(&e->pk, "device", "none");
    proto_pack_kv_uint(&e->pk, "jobs", registry_count(d->registry));
    proto_pack_kv_uint(&e->pk, "connections", d->connection_count);
    proto_pack_kv_uint(&e->pk, "requests_served", d->requests_served);
    proto_pack_kv_uint(&e->pk, "frames_rejected", d->frames_rejected);
    proto_enc_finish(e);
    server_send(c, e);
}

static void reply_ps(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    proto_enc_t *e = &d->enc;
    size_t n = registry_count(d->registry);
    uint64_t now = salusd_now_ns();
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 1);
    proto_pack_str(&e->pk, "jobs");
    msgpack_pack_array(&e->pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const job_t *job = registry_at(d->registry, i);
        msgpack_pack_map(&e->pk, 6);
        proto_pack_kv_uint(&e->pk, "id", job->id);
        proto_pack_kv_str(&e->pk, "name", job->name);
        proto_pack_kv_uint(&e->pk, "pid", (uint64_t)job->pid);
        proto_pack_kv_uint(&e->pk, "uid", (uint64_t)job->uid);
        proto_pack_kv_str(&e->pk, "state", job_state_name(job->state));
        proto_pack_kv_uint(&e->pk, "age_ms", (now - job->registered_ns) / 1000000);
    }
    proto_enc_finish(e);
    server_send(c, e);
}

static void reply_register(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    char name[REGISTRY_NAME_BYTES];
    int rc = proto_get_str_copy(&msg->body, "name", name, sizeof(name));
    if (rc == -EINVAL) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "name must be a string of at most %d bytes", REGISTRY_NAME_BYTES - 1);
        return;
    }
    if (rc < 0)
        name[0] = '\0';
    if (c->job_id) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 0,
                           "this connection is already registered as job %llu",
                           (unsigned long long)c->job_id);
        return;
    }
    job_t *job = registry_add(d->registry, name, c->pid, c->uid, c->gid, salusd_now_ns(), c);
    if (!job) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "out of memory");
        return;
    }
    c->job_id = job->id;
    LOG_INFO("job %llu '%s' registered (pid %d, uid %u)", (unsigned long long)job->id, job->name,
             (int)job->pid, (unsigned)job->uid);
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 1);
    proto_pack_kv_uint(&e->pk, "job_id", job->id);
    proto_enc_finish(e);
    server_send(c, e);
}

static const struct {
    const char *op;
    handler_fn fn;
} handlers[] = {
    {"status", reply_status},
    {"ps", reply_ps},
    {"register", reply_register},
};

void handlers_dispatch(conn_t *c, const proto_msg_t *msg)
{
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        if (strcmp(handlers[i].op, msg->op) == 0) {
            handlers[i].fn(c, msg);
            return;
        }
    }
    server_reply_error(c, msg->id, PROTO_EUNKNOWN_OP, 0, "unknown request '%s'", msg->op);
}

void handlers_connection_closed(conn_t *c)
{
    if (!c->job_id)
        return;
    LOG_INFO("job %llu ended (its connection closed)", (unsigned long long)c->job_id);
    registry_remove(c->daemon->registry, c->job_id);
    c->job_id = 0;
}
