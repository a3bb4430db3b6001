/* salus_ps.h's entry points (salus_shim_ps_*): parameter-server tables through salusd.
 *
 * The process is a job (the shim's session is up: shim_init, as cuInit does) and a rank of a
 * group. Its PS requests go on a second connection to the same socket, one per process, one
 * request at a time (a mutex): ps_open ... ps_close of common/proto.h's minor 3. Each table
 * has a memfd the library made and sealed (count floats, then count keys): values go in and
 * out through it, the frames carry only numbers.
 *
 * A push's id is (the job's rank, the table's clock, a per-table sequence). A push whose
 * acknowledgement does not come within SALUS_PS_ACK_TIMEOUT_MS (default 5000) is sent again
 * with the same id, at most PS_PUSH_TRIES - 1 times; when the connection broke (or was left
 * out of step by the timeout) it is opened again and the tables re-opened first. salusd
 * applies a push once whatever the number of copies.
 *
 * Test hook: SALUS_PS_DROP_ACK=N reads and throws away the N-th push acknowledgement of the
 * process (1-based) as if it had been lost, so that the push is retried (tests only). */
#include "shim-internal.h"

#include "paths.h"
#include "salus_ps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SALUS_EXPORT __attribute__((visibility("default")))
#define PS_PUSH_TRIES 6          /* the first send and at most 5 retries */
#define PS_OPEN_TIMEOUT_MS 30000 /* a cluster's open goes through etcd */
#define PS_MAX_COUNT (1ull << 32)

struct salus_ps_table {
    char name[64], rule[64], sync[64], servers[1024];
    uint64_t count;
    int memfd;
    uint8_t *map;            /* count floats, then count uint64 keys */
    size_t map_bytes;
    uint64_t handle;         /* the daemon's, on connection generation `generation` */
    uint64_t generation;
    uint64_t clock, seq;
};

static struct {
    pthread_mutex_t lock;
    salus_client_t client;
    int connected;
    uint64_t generation;     /* counts connections opened */
    uint64_t acks;           /* push acknowledgements received (for SALUS_PS_DROP_ACK) */
} ps = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __thread char ps_error[512];

static int fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps_error, sizeof(ps_error), fmt, ap);
    va_end(ap);
    return rc;
}

static uint64_t env_uint(const char *name, uint64_t fallback)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return fallback;
    unsigned long long n = strtoull(v, &end, 10);
    return *end ? fallback : n;
}

/* The protocol's error code as an errno. */
static int errno_of_code(int64_t code)
{
    switch (code) {
    case PROTO_EBADARG:
        return -EINVAL;
    case PROTO_ENOTFOUND:
        return -ENOENT;
    case PROTO_EPERM:
        return -EPERM;
    case PROTO_ENOMEM:
        return -ENOMEM;
    case PROTO_EBUSY:
        return -EBUSY;
    case PROTO_EUNKNOWN_OP:
        return -ENOSYS;
    default:
        return -EIO;
    }
}

static void disconnect_locked(void)
{
    if (ps.connected)
        salus_client_close(&ps.client);
    ps.connected = 0;
}

static int connect_locked(void)
{
    char err[256] = "";
    if (ps.connected)
        return 0;
    int rc = salus_client_open(&ps.client, shim.socket_path, "libsalus-client ps", 5000, err,
                               sizeof(err));
    if (rc < 0)
        return fail(rc, "cannot reach salusd at %s: %s", shim.socket_path, err);
    ps.connected = 1;
    ps.generation++;
    return 0;
}

/* Sends the request begun on ps.client (with fd when >= 0) and reads its reply. 0 with a
 * reply; the daemon's error as a negative errno (message in ps_error); -ETIMEDOUT, -EPIPE,
 * -ECONNRESET, -EPROTO: the connection is out of step and was closed. */
static int exchange_locked(const char *op, int fd, int timeout_ms, proto_msg_t *reply)
{
    uint64_t id = ps.client.next_id - 1;
    proto_enc_finish(&ps.client.enc);
    int rc = fd >= 0 ? salus_send_frame_fds(ps.client.fd, ps.client.enc.sbuf.data,
                                            ps.client.enc.sbuf.size, &fd, 1, 5000)
                     : salus_send_frame(ps.client.fd, ps.client.enc.sbuf.data,
                                        ps.client.enc.sbuf.size, 5000);
    if (rc == 0)
        rc = salus_recv_msg(ps.client.fd, reply, ps.client.max_frame_bytes, timeout_ms);
    if (rc == 0 && reply->id != id) {
        proto_msg_free(reply);
        rc = -EPROTO;
    }
    if (rc < 0) {
        disconnect_locked();
        return fail(rc, "%s: the connection to salusd broke (%s)", op, strerror(-rc));
    }
    if (reply->kind == PROTO_ERROR) {
        int64_t code = 0;
        const char *text = "error";
        size_t n = 5;
        proto_get_int(&reply->body, "code", &code);
        if (proto_get_str(&reply->body, "message", &text, &n) < 0) {
            text = "error";
            n = 5;
        }
        rc = fail(errno_of_code(code), "salusd: %.*s", (int)n, text);
        proto_msg_free(reply);
        return rc;
    }
    return 0;
}

static int broken(int rc)
{
    return rc == -ETIMEDOUT || rc == -EPIPE || rc == -ECONNRESET || rc == -EPROTO ||
           rc == -ECONNREFUSED;
}

/* Opens t on the current connection (connecting first when needed). */
static int open_locked(salus_ps_table_t *t)
{
    proto_msg_t reply;
    uint64_t handle = 0, count = 0;
    int rc = connect_locked();
    if (rc < 0)
        return rc;
    if (t->generation == ps.generation && t->handle)
        return 0;
    /* the table's replica count (issue 19): SALUS_PS_REPLICAS, else the daemon's */
    uint64_t replicas = env_uint("SALUS_PS_REPLICAS", 0);
    msgpack_packer *pk = salus_client_begin(&ps.client, "ps_open", replicas ? 7 : 6);
    if (replicas)
        proto_pack_kv_uint(pk, "replicas", replicas);
    proto_pack_kv_str(pk, "name", t->name);
    proto_pack_kv_uint(pk, "count", t->count);
    proto_pack_kv_str(pk, "rule", t->rule);
    proto_pack_kv_str(pk, "sync", t->sync);
    proto_pack_kv_str(pk, "servers", t->servers);
    proto_pack_kv_uint(pk, "job_id", shim.job_id);
    rc = exchange_locked("open", t->memfd, PS_OPEN_TIMEOUT_MS, &reply);
    if (rc < 0)
        return rc;
    if (proto_get_uint(&reply.body, "handle", &handle) < 0 || handle == 0 ||
        proto_get_uint(&reply.body, "count", &count) < 0 || count != t->count) {
        proto_msg_free(&reply);
        disconnect_locked();
        return fail(-EPROTO, "open: salusd sent a malformed reply");
    }
    /* the table's first clock (0, or the clock of the checkpoint a restored group's table
     * started from): taken at the first open; a re-open keeps the library's own clock */
    uint64_t start = 0;
    if (t->generation == 0 && proto_get_uint(&reply.body, "clock", &start) == 0)
        t->clock = start;
    proto_msg_free(&reply);
    t->handle = handle;
    t->generation = ps.generation;
    return 0;
}

/* A forked child is not the job's process (salusd would refuse it): it starts without the
 * parent's connection (its own closed, the parent's untouched). */
static void ps_forked_child(void)
{
    pthread_mutex_init(&ps.lock, NULL);
    disconnect_locked();
}

static void ps_setup_once(void)
{
    pthread_atfork(NULL, NULL, ps_forked_child);
}

/* The session is up and the process is a managed job. */
static int session_ready(void)
{
    static pthread_once_t setup = PTHREAD_ONCE_INIT;
    pthread_once(&setup, ps_setup_once);
    if (shim_init() != CUDA_SUCCESS || shim.mode != SHIM_MODE_MANAGED || !shim.job_id)
        return fail(-ENOTCONN, "this process is not a job of salusd (the shim's session is "
                               "not up)");
    return 0;
}

static int region_create(salus_ps_table_t *t)
{
    size_t bytes = (size_t)t->count * (sizeof(float) + sizeof(uint64_t));
    t->memfd = memfd_create("salus-ps", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (t->memfd < 0)
        return fail(-errno, "memfd_create: %s", strerror(errno));
    if (ftruncate(t->memfd, (off_t)bytes) < 0 ||
        fcntl(t->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        return fail(-errno, "sizing the table's region: %s", strerror(errno));
    t->map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->memfd, 0);
    if (t->map == MAP_FAILED) {
        t->map = NULL;
        return fail(-errno, "mapping the table's region: %s", strerror(errno));
    }
    t->map_bytes = bytes;
    return 0;
}

static void table_free(salus_ps_table_t *t)
{
    if (t->map)
        munmap(t->map, t->map_bytes);
    if (t->memfd >= 0)
        close(t->memfd);
    free(t);
}

int salus_shim_ps_open(const char *name, uint64_t count, const salus_ps_options_t *o,
                       salus_ps_table_t **table);
SALUS_EXPORT int salus_shim_ps_open(const char *name, uint64_t count,
                                    const salus_ps_options_t *o, salus_ps_table_t **table)
{
    if (!table || !name)
        return fail(-EINVAL, "open: name and table are required");
    *table = NULL;
    if (strlen(name) >= 64 || !*name)
        return fail(-EINVAL, "open: table names are [A-Za-z0-9._-]{1,63}");
    if (count == 0 || count > PS_MAX_COUNT)
        return fail(-EINVAL, "open: count must be 1 .. %llu", (unsigned long long)PS_MAX_COUNT);
    const char *rule = o && o->rule ? o->rule : "add", *sync = o && o->sync ? o->sync : "bsp";
    const char *servers = o && o->servers ? o->servers : "";
    salus_ps_table_t *t = calloc(1, sizeof(*t));
    if (!t)
        return fail(-ENOMEM, "open: out of memory");
    t->memfd = -1;
    int rc = session_ready();
    if (rc < 0)
        goto out;
    if (snprintf(t->rule, sizeof(t->rule), "%s", rule) >= (int)sizeof(t->rule) ||
        snprintf(t->sync, sizeof(t->sync), "%s", sync) >= (int)sizeof(t->sync) ||
        snprintf(t->servers, sizeof(t->servers), "%s", servers) >= (int)sizeof(t->servers)) {
        rc = fail(-EINVAL, "open: rule, sync or servers too long");
        goto out;
    }
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->count = count;
    rc = region_create(t);
    if (rc < 0)
        goto out;
    pthread_mutex_lock(&ps.lock);
    rc = open_locked(t);
    if (rc < 0 && broken(rc)) /* a connection left over from before: once more */
        rc = open_locked(t);
    pthread_mutex_unlock(&ps.lock);
out:
    if (rc < 0) {
        table_free(t);
        return rc;
    }
    *table = t;
    return 0;
}

/* What a push sends (ps_push, or ps_fed_push for a federated table). */
typedef struct push_req_s {
    const char *op;
    uint64_t offset, n;
    int keyed;
    uint64_t round;           /* ps_fed_push */
    int64_t samples;
    uint32_t work;
} push_req_t;

static void pack_push(const salus_ps_table_t *t, const push_req_t *r, uint64_t seq)
{
    if (strcmp(r->op, "ps_fed_push") == 0) {
        /* a retry is recognised by (rank, round): a second push of the round is a
         * duplicate */
        msgpack_packer *pk = salus_client_begin(&ps.client, r->op, 5);
        proto_pack_kv_uint(pk, "handle", t->handle);
        proto_pack_kv_uint(pk, "round", r->round);
        proto_pack_kv_int(pk, "samples", r->samples);
        proto_pack_kv_uint(pk, "work", r->work);
        proto_pack_kv_uint(pk, "n", r->n);
        return;
    }
    msgpack_packer *pk = salus_client_begin(&ps.client, r->op, 6);
    proto_pack_kv_uint(pk, "handle", t->handle);
    proto_pack_kv_uint(pk, "offset", r->keyed ? 0 : r->offset);
    proto_pack_kv_uint(pk, "n", r->n);
    proto_pack_kv_bool(pk, "keyed", r->keyed);
    proto_pack_kv_uint(pk, "clock", t->clock);
    proto_pack_kv_uint(pk, "seq", seq);
}

/* One push (values, and keys when keyed, already in the region) with retries. */
static int push_locked(salus_ps_table_t *t, const push_req_t *req)
{
    uint64_t seq = t->seq + 1;
    int timeout_ms = (int)env_uint("SALUS_PS_ACK_TIMEOUT_MS", 5000);
    uint64_t drop = env_uint("SALUS_PS_DROP_ACK", 0);
    int rc = 0;
    for (int attempt = 0; attempt < PS_PUSH_TRIES; attempt++) {
        proto_msg_t reply;
        rc = open_locked(t); /* after a broken connection: connect and re-open */
        if (rc < 0) {
            if (broken(rc))
                continue;
            return rc;
        }
        pack_push(t, req, seq);
        rc = exchange_locked(req->op + 3, -1, timeout_ms, &reply);
        if (rc < 0) {
            if (!broken(rc))
                return rc;
            LOG_INFO("ps: push %llu of '%s' goes again (try %d of %d): %s",
                     (unsigned long long)seq, t->name, attempt + 2, PS_PUSH_TRIES, ps_error);
            continue; /* the same id again */
        }
        int duplicate = 0;
        proto_get_bool(&reply.body, "duplicate", &duplicate);
        proto_msg_free(&reply);
        if (++ps.acks == drop) {
            LOG_INFO("ps: dropping push acknowledgement %llu (SALUS_PS_DROP_ACK)",
                     (unsigned long long)drop);
            rc = fail(-ETIMEDOUT, "push: acknowledgement dropped (SALUS_PS_DROP_ACK)");
            continue;
        }
        if (duplicate)
            LOG_INFO("ps: push %llu of '%s' was a duplicate (applied once)",
                     (unsigned long long)seq, t->name);
        t->seq = seq;
        return 0;
    }
    return fail(rc, "push: no acknowledgement after %d tries (%s)", PS_PUSH_TRIES, ps_error);
}

static int check_table(const salus_ps_table_t *t, const char *op)
{
    if (!t)
        return fail(-EINVAL, "%s: no table", op);
    return 0;
}

int salus_shim_ps_push(salus_ps_table_t *t, uint64_t offset, uint64_t n, const float *values);
SALUS_EXPORT int salus_shim_ps_push(salus_ps_table_t *t, uint64_t offset, uint64_t n,
                                    const float *values)
{
    int rc = check_table(t, "push");
    if (rc < 0)
        return rc;
    if (!values || n == 0)
        return fail(-EINVAL, "push: n values are required");
    /* a range beyond the table goes to salusd as such (it refuses it); only what fits in the
     * region is copied there */
    if (offset < t->count && n <= t->count - offset)
        memcpy(t->map + offset * sizeof(float), values, n * sizeof(float));
    pthread_mutex_lock(&ps.lock);
    rc = push_locked(t, &(push_req_t){.op = "ps_push", .offset = offset, .n = n});
    pthread_mutex_unlock(&ps.lock);
    return rc;
}

int salus_shim_ps_push_keys(salus_ps_table_t *t, const uint64_t *keys, uint64_t n,
                            const float *values);
SALUS_EXPORT int salus_shim_ps_push_keys(salus_ps_table_t *t, const uint64_t *keys, uint64_t n,
                                         const float *values)
{
    int rc = check_table(t, "push_keys");
    if (rc < 0)
        return rc;
    if (!values || !keys || n == 0)
        return fail(-EINVAL, "push_keys: n keys and values are required");
    if (n <= t->count) {
        memcpy(t->map, values, n * sizeof(float));
        memcpy(t->map + t->count * sizeof(float), keys, n * sizeof(uint64_t));
    }
    pthread_mutex_lock(&ps.lock);
    rc = push_locked(t, &(push_req_t){.op = "ps_push", .n = n, .keyed = 1});
    pthread_mutex_unlock(&ps.lock);
    return rc;
}

/* A request other than a push (no retry of its own: a broken connection is re-opened once). */
static int simple_locked(salus_ps_table_t *t, const char *op, uint64_t offset, uint64_t n,
                         int with_range, proto_msg_t *reply)
{
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        rc = open_locked(t);
        if (rc < 0) {
            if (broken(rc) && attempt == 0)
                continue;
            return rc;
        }
        msgpack_packer *pk = salus_client_begin(&ps.client, op, with_range ? 4 : 2);
        proto_pack_kv_uint(pk, "handle", t->handle);
        proto_pack_kv_uint(pk, "clock", t->clock);
        if (with_range) {
            proto_pack_kv_uint(pk, "offset", offset);
            proto_pack_kv_uint(pk, "n", n);
        }
        /* a pull waits for the slowest worker: no deadline (a dead salusd closes the socket) */
        rc = exchange_locked(op + 3, -1, -1, reply);
        if (rc < 0 && broken(rc) && attempt == 0)
            continue;
        return rc;
    }
    return rc;
}

int salus_shim_ps_pull(salus_ps_table_t *t, uint64_t offset, uint64_t n, float *out,
                       salus_ps_read_t *read);
SALUS_EXPORT int salus_shim_ps_pull(salus_ps_table_t *t, uint64_t offset, uint64_t n,
                                    float *out, salus_ps_read_t *read)
{
    proto_msg_t reply;
    int rc = check_table(t, "pull");
    if (rc < 0)
        return rc;
    if (!out || n == 0)
        return fail(-EINVAL, "pull: n and out are required");
    pthread_mutex_lock(&ps.lock);
    rc = simple_locked(t, "ps_pull", offset, n, 1, &reply);
    if (rc == 0) {
        salus_ps_read_t r = {0};
        proto_get_uint(&reply.body, "clock", &r.clock);
        proto_get_uint(&reply.body, "done", &r.done);
        proto_get_uint(&reply.body, "done_at_request", &r.done_at_request);
        proto_get_uint(&reply.body, "waited_ns", &r.waited_ns);
        proto_get_bool(&reply.body, "waited", &r.waited);
        proto_msg_free(&reply);
        if (offset < t->count && n <= t->count - offset)
            memcpy(out, t->map + offset * sizeof(float), n * sizeof(float));
        else
            rc = fail(-EPROTO, "pull: salusd answered a range beyond the table");
        if (read)
            *read = r;
    }
    pthread_mutex_unlock(&ps.lock);
    return rc;
}

int salus_shim_ps_clock(salus_ps_table_t *t);
SALUS_EXPORT int salus_shim_ps_clock(salus_ps_table_t *t)
{
    proto_msg_t reply;
    int rc = check_table(t, "clock");
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&ps.lock);
    rc = simple_locked(t, "ps_clock", 0, 0, 0, &reply);
    if (rc == 0) {
        proto_msg_free(&reply);
        t->clock++;
    }
    pthread_mutex_unlock(&ps.lock);
    return rc;
}

uint64_t salus_shim_ps_clock_of(const salus_ps_table_t *t);
SALUS_EXPORT uint64_t salus_shim_ps_clock_of(const salus_ps_table_t *t)
{
    return t ? t->clock : 0;
}

int salus_shim_ps_close(salus_ps_table_t *t);
SALUS_EXPORT int salus_shim_ps_close(salus_ps_table_t *t)
{
    proto_msg_t reply;
    int rc = 0;
    if (!t)
        return 0;
    pthread_mutex_lock(&ps.lock);
    if (ps.connected && t->generation == ps.generation && t->handle) {
        msgpack_packer *pk = salus_client_begin(&ps.client, "ps_close", 1);
        proto_pack_kv_uint(pk, "handle", t->handle);
        rc = exchange_locked("close", -1, 5000, &reply);
        if (rc == 0)
            proto_msg_free(&reply);
        else if (broken(rc))
            rc = 0; /* the connection's end closed it */
    }
    pthread_mutex_unlock(&ps.lock);
    table_free(t);
    return rc;
}

/* ---- federated tables ------------------------------------------------------------------ */

int salus_shim_ps_fed_state(salus_ps_table_t *t, salus_ps_fed_state_t *st);
SALUS_EXPORT int salus_shim_ps_fed_state(salus_ps_table_t *t, salus_ps_fed_state_t *st)
{
    proto_msg_t reply;
    int rc = check_table(t, "fed_state");
    if (rc < 0)
        return rc;
    if (!st)
        return fail(-EINVAL, "fed_state: no state to fill");
    pthread_mutex_lock(&ps.lock);
    for (int attempt = 0; attempt < 2; attempt++) { /* a broken connection: re-opened once */
        rc = open_locked(t);
        if (rc == 0) {
            msgpack_packer *pk = salus_client_begin(&ps.client, "ps_fed_state", 1);
            proto_pack_kv_uint(pk, "handle", t->handle);
            rc = exchange_locked("fed_state", -1, 5000, &reply);
        }
        if (!(rc < 0 && broken(rc)))
            break;
    }
    if (rc == 0) {
        uint64_t round = 0, clients = 0, per_round = 0, epochs = 0;
        int selected = 0, pushed = 0;
        if (proto_get_uint(&reply.body, "round", &round) < 0 ||
            proto_get_bool(&reply.body, "selected", &selected) < 0 ||
            proto_get_bool(&reply.body, "pushed", &pushed) < 0 ||
            proto_get_uint(&reply.body, "clients", &clients) < 0 ||
            proto_get_uint(&reply.body, "per_round", &per_round) < 0 ||
            proto_get_uint(&reply.body, "epochs", &epochs) < 0)
            rc = fail(-EPROTO, "fed_state: salusd sent a malformed reply");
        else
            *st = (salus_ps_fed_state_t){.round = round, .selected = selected,
                                         .pushed = pushed, .clients = (uint32_t)clients,
                                         .per_round = (uint32_t)per_round,
                                         .epochs = (uint32_t)epochs};
        proto_msg_free(&reply);
    }
    pthread_mutex_unlock(&ps.lock);
    return rc;
}

int salus_shim_ps_fed_push(salus_ps_table_t *t, uint64_t round, int64_t samples, uint32_t work,
                           const float *values);
SALUS_EXPORT int salus_shim_ps_fed_push(salus_ps_table_t *t, uint64_t round, int64_t samples,
                                        uint32_t work, const float *values)
{
    int rc = check_table(t, "fed_push");
    if (rc < 0)
        return rc;
    if (!values)
        return fail(-EINVAL, "fed_push: the model's values are required");
    memcpy(t->map, values, t->count * sizeof(float));
    pthread_mutex_lock(&ps.lock);
    rc = push_locked(t, &(push_req_t){.op = "ps_fed_push", .n = t->count, .round = round,
                                      .samples = samples, .work = work});
    pthread_mutex_unlock(&ps.lock);
    return rc;
}

const char *salus_shim_ps_last_error(void);
SALUS_EXPORT const char *salus_shim_ps_last_error(void)
{
    return ps_error[0] ? ps_error : "no error";
}
