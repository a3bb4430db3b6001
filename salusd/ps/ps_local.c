/* The local endpoint of the parameter-server role: a worker's ps_* requests (ps_local.h,
 * common/proto.h's minor 3), checked and handed to the service (ps.h).
 *
 * Who asks is never what the client says: the job named by job_id must be registered, live,
 * a rank of a group, and the connection's own process (SO_PEERCRED pid and uid). The values
 * live in a memfd the worker made and sealed (it cannot shrink it under our mapping: no
 * SIGBUS); what the daemon reads from it is copied first, so that the worker changing it
 * meanwhile changes nothing checked. One request is in flight per connection: pushes, pulls,
 * clocks and opens are answered by the service's callbacks, the loop never blocks. */
#include "ps_local.h"

#include "ps_local-internal.h"
#include "groups.h"
#include "jobs.h"
#include "ps-internal.h"
#include "ps_ckpt.h"
#include "registry.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* the largest table a worker may map (elements): 2^32 float32 values, 48 GiB of region */
#define PS_LOCAL_MAX_COUNT (1ull << 32)
#define PS_LOCAL_REGION_BYTES(count) ((count) * (sizeof(float) + sizeof(uint64_t)))

/* The connection's PS state (its slot, CONN_SLOT_PS_LOCAL); with create, made on first use. */
static ps_local_conn_t *conn_state(conn_t *c, int create)
{
    ps_local_conn_t *pc = server_conn_slot(c, CONN_SLOT_PS_LOCAL);
    if (pc || !create)
        return pc;
    pc = calloc(1, sizeof(*pc));
    if (!pc)
        return NULL;
    pc->conn = c;
    if (server_conn_slot_set(c, CONN_SLOT_PS_LOCAL, pc) < 0) {
        free(pc);
        return NULL;
    }
    return pc;
}

static void table_unmap(ps_local_table_t *t)
{
    if (t->map)
        munmap(t->map, t->map_bytes);
    free(t->copy);
    memset(t, 0, sizeof(*t));
}

static void on_conn_close(conn_t *c, void *state)
{
    ps_local_conn_t *pc = state;
    ps_forget_owner(c->daemon, pc); /* no callback writes into a mapping after this */
    for (int i = 0; i < PS_LOCAL_MAX_TABLES; i++)
        table_unmap(&pc->tables[i]);
    free(pc);
}

const conn_slot_ops_t ps_local_conn_ops = {.on_close = on_conn_close};

static proto_error_code_t error_code(int rc)
{
    switch (rc) {
    case -EINVAL:
    case -ERANGE:
        return PROTO_EBADARG;
    case -ENOENT:
        return PROTO_ENOTFOUND;
    case -EPERM:
    case -EACCES:
        return PROTO_EPERM;
    case -EDQUOT:
    case -ENOMEM:
    case -ENOSPC:
        return PROTO_ENOMEM;
    case -EBUSY:
    case -EAGAIN:
        return PROTO_EBUSY;
    default:
        return PROTO_EINTERNAL;
    }
}

void ps_local_reply_error(conn_t *c, uint64_t id, const char *op, int rc, const char *err)
{
    server_reply_error(c, id, error_code(rc), 0, "%s: %s", op,
                       err && *err ? err : strerror(-rc));
}

void ps_local_reply_duplicate(conn_t *c, uint64_t id, int duplicate)
{
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, id, "", 1);
    proto_pack_kv_bool(&e->pk, "duplicate", duplicate);
    proto_enc_finish(e);
    server_send(c, e);
}

/* The worker the connection's process is, from the registry. 0, or an error was answered. */
static int worker_of(conn_t *c, const proto_msg_t *msg, uint64_t job_id, ps_local_conn_t *pc,
                     ps_worker_t *w)
{
    salusd_t *d = c->daemon;
    job_t *job = job_id ? registry_find(d->registry, job_id) : NULL;
    if (!job || !job->runtime || jobs_is_reserved(job) || JOB_STATE_IS_FINAL(job->state) ||
        job->pid != c->pid || job->uid != c->uid) {
        server_reply_error(c, msg->id, PROTO_EPERM, 0,
                           "%s: job %llu is not a registered rank of a group of this process",
                           msg->op, (unsigned long long)job_id);
        return -1;
    }
    uint32_t rank = 0;
    const char *group = groups_of_job(d, job, &rank);
    if (!group || !job->group_id) {
        server_reply_error(c, msg->id, PROTO_EPERM, 0,
                           "%s: job %llu is not a rank of a group (salusctl run --group G "
                           "--world N --rank R)", msg->op, (unsigned long long)job_id);
        return -1;
    }
    snprintf(pc->group, sizeof(pc->group), "%s", group);
    *w = (ps_worker_t){.uid = job->uid,
                       .group_id = job->group_id,
                       .group = pc->group,
                       .rank = rank,
                       .world = job->group_world,
                       .job_id = job->id,
                       .owner = pc};
    return 0;
}

ps_local_table_t *ps_local_request_table(conn_t *c, const proto_msg_t *msg,
                                         ps_local_conn_t **pcp, ps_worker_t *w)
{
    ps_local_conn_t *pc = conn_state(c, 0);
    uint64_t handle = 0;
    if (proto_get_uint(&msg->body, "handle", &handle) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "%s: handle (uint) is required",
                           msg->op);
        return NULL;
    }
    if (!pc || handle == 0 || handle > PS_LOCAL_MAX_TABLES || !pc->tables[handle - 1].used) {
        server_reply_error(c, msg->id, PROTO_ENOTFOUND, 0,
                           "%s: unknown table handle %llu on this connection", msg->op,
                           (unsigned long long)handle);
        return NULL;
    }
    if (pc->op != PS_OP_NONE) {
        server_reply_error(c, msg->id, PROTO_EBUSY, 0,
                           "%s: one request at a time per connection (one is in flight)",
                           msg->op);
        return NULL;
    }
    if (w && worker_of(c, msg, pc->job_id, pc, w) < 0)
        return NULL;
    *pcp = pc;
    pc->slot = (int)handle - 1;
    return &pc->tables[handle - 1];
}

/* offset and n of the body, within a table of count elements (keyed: n keys, offset 0). */
static int read_range(conn_t *c, const proto_msg_t *msg, uint64_t count, int keyed,
                      uint64_t *offset, uint64_t *n)
{
    *offset = 0;
    if ((!keyed && proto_get_uint(&msg->body, "offset", offset) < 0) ||
        proto_get_uint(&msg->body, "n", n) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "%s: offset and n (uint) are required",
                           msg->op);
        return -1;
    }
    if (*n == 0 || *n > count || *offset > count - *n) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "%s: %llu %s at offset %llu are beyond the table's %llu elements",
                           msg->op, (unsigned long long)*n, keyed ? "keys" : "values",
                           (unsigned long long)*offset, (unsigned long long)count);
        return -1;
    }
    return 0;
}

/* ps_local_request_table, and the body's clock; NULL: an error was answered (usage: the op's
 * body, as the error shows it). */
static ps_local_table_t *clocked_request(conn_t *c, const proto_msg_t *msg, const char *usage,
                                         ps_local_conn_t **pcp, ps_worker_t *w, uint64_t *clock)
{
    ps_local_table_t *t = ps_local_request_table(c, msg, pcp, w);
    if (t && proto_get_uint(&msg->body, "clock", clock) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "%s: usage %s", msg->op, usage);
        return NULL;
    }
    return t;
}

/* The service took the request (rc 0: its callback answers it) or refused it (answered now
 * with the error). */
static void request_started(conn_t *c, const proto_msg_t *msg, ps_local_conn_t *pc,
                            ps_local_op_t op, int rc, const char *err)
{
    if (rc < 0)
        ps_local_reply_error(c, msg->id, msg->op, rc, err);
    else
        pc->op = op;
}

/* The service's callback: the request in flight is over. The connection to answer (the
 * request's id in *id), or NULL when rc < 0 (the error was answered, "op: err"). */
static conn_t *request_over(ps_local_conn_t *pc, const char *op, int rc, const char *err,
                            uint64_t *id)
{
    *id = pc->request_id;
    pc->op = PS_OP_NONE;
    if (rc < 0) {
        ps_local_reply_error(pc->conn, *id, op, rc, err);
        return NULL;
    }
    return pc->conn;
}

/* ---- open ---------------------------------------------------------------------------- */

static void open_done(void *arg, int rc, const char *err)
{
    ps_local_conn_t *pc = arg;
    ps_local_table_t *t = &pc->tables[pc->slot];
    uint64_t id;
    conn_t *c = request_over(pc, "ps_open", rc, err, &id);
    if (!c) {
        table_unmap(t);
        return;
    }
    t->handle = pc->open_handle;
    t->used = 1;
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, id, "", 3);
    proto_pack_kv_uint(&e->pk, "handle", (uint64_t)pc->slot + 1);
    proto_pack_kv_uint(&e->pk, "count", t->count);
    /* the table's first clock: 0, or a restored table's checkpoint clock (the library takes
     * it at its first open, and keeps its own clock across re-opens) */
    proto_pack_kv_uint(&e->pk, "clock", ps_ckpt_start_clock(c->daemon, pc->open_handle));
    proto_enc_finish(e);
    server_send(c, e);
}

/* The passed memfd: sealed against shrinking, large enough; mapped into t. */
static int map_region(conn_t *c, const proto_msg_t *msg, int fd, uint64_t count,
                      ps_local_table_t *t)
{
    struct stat st = {0};
    int seals = fcntl(fd, F_GET_SEALS);
    size_t need = (size_t)PS_LOCAL_REGION_BYTES(count);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: the region must be a memfd sealed with F_SEAL_SHRINK");
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < need) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: the region has %lld bytes, a table of %llu elements needs "
                           "%zu (4 per value and 8 per key)", (long long)st.st_size,
                           (unsigned long long)count, need);
        return -1;
    }
    void *map = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        server_reply_error(c, msg->id, PROTO_ENOMEM, 0, "ps_open: cannot map the region: %s",
                           strerror(errno));
        return -1;
    }
    t->map = map;
    t->map_bytes = need;
    t->count = count;
    return 0;
}

/* ps_open {name, count, rule, sync, servers?, replicas?, job_id} + one fd -> {handle, count, clock} */
void ps_local_handle_open(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    char rule[64], sync[64], err[256] = "";
    ps_table_spec_t spec;
    uint64_t job_id = 0;
    ps_worker_t w;
    int fd = server_take_fd(c);
    memset(&spec, 0, sizeof(spec));
    if (proto_get_str_copy(&msg->body, "name", spec.name, sizeof(spec.name)) < 0 ||
        proto_get_uint(&msg->body, "count", &spec.count) < 0 ||
        proto_get_str_copy(&msg->body, "rule", rule, sizeof(rule)) < 0 ||
        proto_get_str_copy(&msg->body, "sync", sync, sizeof(sync)) < 0 ||
        proto_get_uint(&msg->body, "job_id", &job_id) < 0 ||
        proto_get_str_copy(&msg->body, "servers", spec.servers, sizeof(spec.servers)) == -EINVAL) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: usage {name, count, rule, sync, servers?, job_id} with the "
                           "region's descriptor");
        goto out;
    }
    if (!ps_name_valid(spec.name)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: table names are [A-Za-z0-9._-]{1,63}");
        goto out;
    }
    uint64_t replicas = 0; /* optional: the table's replica count (0 or absent: --ps-replicas) */
    int has_replicas = proto_get_uint(&msg->body, "replicas", &replicas);
    if (has_replicas == -EINVAL || (has_replicas == 0 && replicas > PS_MAX_REPLICAS)) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: replicas must be 1 .. %d (0: the daemon's --ps-replicas)",
                           PS_MAX_REPLICAS);
        goto out;
    }
    spec.replicas = (uint32_t)replicas;
    if (spec.count == 0 || spec.count > PS_LOCAL_MAX_COUNT) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: count must be 1 .. %llu elements",
                           (unsigned long long)PS_LOCAL_MAX_COUNT);
        goto out;
    }
    spec.federated = ps_fed_is_rule(rule); /* "fedavg...": salusd/ps/ps_fed_table.c serves it */
    if ((spec.federated ? ps_fed_parse(rule, &spec.fed, err, sizeof(err))
                        : ps_rule_parse(rule, &spec.rule, err, sizeof(err))) < 0 ||
        ps_sync_parse(sync, &spec.sync, err, sizeof(err)) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "ps_open: %s", err);
        goto out;
    }
    if (fd < 0 || server_frame_fds(c) > 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0,
                           "ps_open: pass exactly one descriptor (the sealed memfd)");
        goto out;
    }
    ps_local_conn_t *pc = conn_state(c, 1);
    if (!pc) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "ps_open: out of memory");
        goto out;
    }
    if (pc->op != PS_OP_NONE) {
        server_reply_error(c, msg->id, PROTO_EBUSY, 0,
                           "ps_open: one request at a time per connection (one is in flight)");
        goto out;
    }
    if (pc->job_id && pc->job_id != job_id) {
        server_reply_error(c, msg->id, PROTO_EPERM, 0,
                           "ps_open: this connection belongs to job %llu",
                           (unsigned long long)pc->job_id);
        goto out;
    }
    if (worker_of(c, msg, job_id, pc, &w) < 0)
        goto out;
    int slot = 0;
    while (slot < PS_LOCAL_MAX_TABLES && (pc->tables[slot].used || pc->tables[slot].map))
        slot++;
    if (slot == PS_LOCAL_MAX_TABLES) {
        server_reply_error(c, msg->id, PROTO_EBUSY, 0,
                           "ps_open: at most %d tables open per connection (close one first)",
                           PS_LOCAL_MAX_TABLES);
        goto out;
    }
    ps_local_table_t *t = &pc->tables[slot];
    if (map_region(c, msg, fd, spec.count, t) < 0)
        goto out;
    pc->job_id = job_id;
    pc->slot = slot;
    pc->request_id = msg->id;
    int rc = ps_open(d, &w, &spec, &pc->open_handle, open_done, pc, err, sizeof(err));
    if (rc < 0)
        table_unmap(t);
    request_started(c, msg, pc, PS_OP_OPEN, rc, err);
out:
    if (fd >= 0)
        close(fd); /* the mapping stays */
}

/* ---- push ---------------------------------------------------------------------------- */

static void push_done(void *arg, int rc, const char *err)
{
    ps_local_conn_t *pc = arg;
    ps_local_table_t *t = &pc->tables[pc->slot];
    uint64_t id;
    conn_t *c = request_over(pc, "ps_push", rc, err, &id);
    if (!c)
        return;
    /* a duplicate: this connection had the id acknowledged, or the service says this push
     * was one (rc 1) */
    int duplicate = pc->seq <= t->last_seq || rc == 1;
    if (pc->seq > t->last_seq)
        t->last_seq = pc->seq;
    ps_local_reply_duplicate(c, id, duplicate);
}

/* ps_push {handle, offset, n, keyed, clock, seq} -> {duplicate}: the values (and keys) are in
 * the region's first n floats (offset .. offset + n for a range) and first n keys. */
void ps_local_handle_push(conn_t *c, const proto_msg_t *msg)
{
    static const char usage[] = "{handle, offset, n, keyed, clock, seq >= 1}";
    ps_local_conn_t *pc = NULL;
    ps_worker_t w;
    uint64_t offset, n, clock = 0, seq = 0;
    ps_local_table_t *t = clocked_request(c, msg, usage, &pc, &w, &clock);
    int keyed = 0;
    float *values = NULL;
    uint64_t *keys = NULL;
    char err[256] = "";
    if (!t)
        return;
    if (proto_get_bool(&msg->body, "keyed", &keyed) == -EINVAL ||
        proto_get_uint(&msg->body, "seq", &seq) < 0 || seq == 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "ps_push: usage %s", usage);
        return;
    }
    if (read_range(c, msg, t->count, keyed, &offset, &n) < 0)
        return;
    ps_push_id_t push_id = {.rank = w.rank, .clock = clock, .seq = seq};
    pc->request_id = msg->id;
    pc->seq = seq;
    int rc;
    if (!keyed && offset == 0 && n == t->count && ps_push_reads_once(c->daemon, &w, t->handle)) {
        /* the whole table under BSP/SSP: the aggregation reads each value of the region
         * once, copying and checking it in the same pass (no private copy first) */
        rc = ps_push(c->daemon, &w, t->handle, &push_id, 0, n, NULL, (const float *)t->map,
                     push_done, pc, err, sizeof(err));
        goto pushed;
    }
    /* private copies: the worker may write the region while the service checks them (keys
     * first: 8-byte aligned) */
    size_t need = n * sizeof(float) + (keyed ? n * sizeof(uint64_t) : 0);
    if (t->copy_bytes < need) {
        free(t->copy);
        t->copy = malloc(need);
        t->copy_bytes = t->copy ? need : 0;
        if (!t->copy) {
            server_reply_error(c, msg->id, PROTO_ENOMEM, 0, "ps_push: out of memory");
            return;
        }
    }
    keys = keyed ? t->copy : NULL;
    values = (float *)((uint8_t *)t->copy + (keyed ? n * sizeof(uint64_t) : 0));
    memcpy(values, t->map + (keyed ? 0 : offset) * sizeof(float), n * sizeof(float));
    if (keyed)
        memcpy(keys, t->map + t->count * sizeof(float), n * sizeof(uint64_t));
    rc = ps_push(c->daemon, &w, t->handle, &push_id, offset, n, keys, values, push_done, pc,
                 err, sizeof(err));
pushed:
    request_started(c, msg, pc, PS_OP_PUSH, rc, err);
}

/* ---- pull ---------------------------------------------------------------------------- */

static void pull_done(void *arg, int rc, const char *err, const ps_read_t *read)
{
    uint64_t id;
    conn_t *c = request_over(arg, "ps_pull", rc < 0 || read ? rc : -EIO, err, &id);
    if (!c)
        return;
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, id, "", 5);
    proto_pack_kv_uint(&e->pk, "clock", read->clock);
    proto_pack_kv_uint(&e->pk, "done", read->done);
    proto_pack_kv_uint(&e->pk, "done_at_request", read->done_at_request);
    proto_pack_kv_uint(&e->pk, "waited_ns", read->waited_ns);
    proto_pack_kv_bool(&e->pk, "waited", read->waited);
    proto_enc_finish(e);
    server_send(c, e);
}

/* ps_pull {handle, offset, n, clock} -> {clock, done, done_at_request, waited_ns, waited},
 * sent once the values of [offset, offset + n) are in the region's floats at offset. */
void ps_local_handle_pull(conn_t *c, const proto_msg_t *msg)
{
    ps_local_conn_t *pc = NULL;
    ps_worker_t w;
    uint64_t offset, n, clock = 0;
    ps_local_table_t *t = clocked_request(c, msg, "{handle, offset, n, clock}", &pc, &w, &clock);
    char err[256] = "";
    if (!t)
        return;
    if (read_range(c, msg, t->count, 0, &offset, &n) < 0)
        return;
    pc->request_id = msg->id;
    int rc = ps_pull(c->daemon, &w, t->handle, clock, offset, n,
                     (float *)(void *)(t->map + offset * sizeof(float)), pull_done, pc, err,
                     sizeof(err));
    request_started(c, msg, pc, PS_OP_PULL, rc, err);
}

/* ---- clock, close -------------------------------------------------------------------- */

static void clock_done(void *arg, int rc, const char *err)
{
    ps_local_conn_t *pc = arg;
    uint64_t id;
    conn_t *c = request_over(pc, "ps_clock", rc, err, &id);
    if (!c)
        return;
    proto_enc_t *e = &c->daemon->enc;
    proto_enc_begin(e, PROTO_REPLY, id, "", 1);
    proto_pack_kv_uint(&e->pk, "clock", pc->clock + 1);
    proto_enc_finish(e);
    server_send(c, e);
}

/* ps_clock {handle, clock} -> {clock: the next one} */
void ps_local_handle_clock(conn_t *c, const proto_msg_t *msg)
{
    ps_local_conn_t *pc = NULL;
    ps_worker_t w;
    uint64_t clock = 0;
    ps_local_table_t *t = clocked_request(c, msg, "{handle, clock}", &pc, &w, &clock);
    char err[256] = "";
    if (!t)
        return;
    pc->request_id = msg->id;
    pc->clock = clock;
    int rc = ps_clock(c->daemon, &w, t->handle, clock, clock_done, pc, err, sizeof(err));
    request_started(c, msg, pc, PS_OP_CLOCK, rc, err);
}

/* ps_close {handle}: the handle and its mapping go (the table lives on in the group). */
void ps_local_handle_close(conn_t *c, const proto_msg_t *msg)
{
    ps_local_conn_t *pc = NULL;
    ps_local_table_t *t = ps_local_request_table(c, msg, &pc, NULL);
    if (!t)
        return;
    table_unmap(t);
    server_reply_done(c, msg->id);
}
