/* ps_cluster's pure view parts (ps_cluster-internal.h): the view record's JSON, server sets,
 * and the fail-over's decisions. */
#include "ps_cluster-internal.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

/* ---- the view record ------------------------------------------------------------------------ */

int ps_replicas_check(const ps_view_t *v, char *err, size_t err_size)
{
    if (v->replicas < 1 || v->replicas > PS_MAX_REPLICAS) {
        snprintf(err, err_size, "replicas %u is not within 1..%d", v->replicas, PS_MAX_REPLICAS);
        return -EINVAL;
    }
    return ps_cluster_ring_servers_check(v->servers, sizeof(v->servers), err, err_size);
}

int ps_replicas_format(const ps_view_t *v, char *buf, size_t size, char *err, size_t err_size)
{
    int rc = ps_replicas_check(v, err, err_size);
    if (rc < 0)
        return rc;
    /* node names are of plain characters (checked): nothing to escape */
    int n = snprintf(buf, size, "{\"servers\":[");
    if (n < 0 || (size_t)n >= size)
        return -ENOSPC;
    size_t at = (size_t)n;
    if (ps_cluster_ring_servers_to_json(v->servers, buf, size, &at) < 0)
        return -ENOSPC;
    n = snprintf(buf + at, size - at, "],\"replicas\":%u}", v->replicas);
    if (n < 0 || (size_t)n >= size - at)
        return -ENOSPC;
    return (int)(at + (size_t)n);
}

int ps_replicas_parse(const char *text, size_t len, ps_view_t *v, char *err, size_t err_size)
{
    memset(v, 0, sizeof(*v));
    struct json_object *o, *replicas;
    int rc = ps_json_object_parse(text, len, "the view", 1, -EPROTO, &o, err, err_size);
    if (rc < 0)
        return rc;
    rc = -EPROTO;
    if (json_object_object_length(o) != 2) {
        snprintf(err, err_size, "the view holds other fields than servers and replicas");
        goto out;
    }
    if (!json_object_object_get_ex(o, "replicas", &replicas) ||
        !json_object_is_type(replicas, json_type_int)) {
        snprintf(err, err_size, "the view's replicas is missing or not a number");
        goto out;
    }
    errno = 0;
    int64_t r = json_object_get_int64(replicas);
    if (errno || r < 1 || r > PS_MAX_REPLICAS) {
        snprintf(err, err_size, "the view's replicas is not within 1..%d", PS_MAX_REPLICAS);
        goto out;
    }
    v->replicas = (uint32_t)r;
    if (ps_cluster_ring_servers_from_json(o, "the view", v->servers, sizeof(v->servers), err,
                                          err_size) < 0)
        goto out;
    if (ps_replicas_check(v, err, err_size) < 0)
        goto out;
    rc = 0;
out:
    json_object_put(o);
    if (rc < 0)
        memset(v, 0, sizeof(*v));
    return rc;
}

/* ---- server sets ---------------------------------------------------------------------------- */

/* Calls fn for each name of servers (not NUL-terminated: name, len) until it returns nonzero. */
static int each(const char *servers, int (*fn)(void *, const char *, size_t), void *ctx)
{
    for (const char *s = servers; *s;) {
        size_t len = strcspn(s, ",");
        int rc = fn(ctx, s, len);
        if (rc)
            return rc;
        s += len;
        if (*s == ',')
            s++;
    }
    return 0;
}

static int is_node(void *ctx, const char *name, size_t len)
{
    const char *node = ctx;
    return strlen(node) == len && memcmp(node, name, len) == 0;
}

int ps_replicas_has(const char *servers, const char *node)
{
    return servers && node && each(servers, is_node, (void *)node);
}

static int count_one(void *ctx, const char *name, size_t len)
{
    (void)name;
    (void)len;
    (*(uint32_t *)ctx)++;
    return 0;
}

uint32_t ps_replicas_count(const char *servers)
{
    uint32_t n = 0;
    each(servers, count_one, &n);
    return n;
}

typedef struct build_s {
    char *out;
    size_t size, at;
    int full;
} build_t;

static void build_add(build_t *b, const char *name, size_t len)
{
    if (b->full)
        return;
    size_t need = len + (b->at ? 1 : 0);
    if (b->at + need + 1 > b->size) {
        b->full = 1;
        return;
    }
    if (b->at)
        b->out[b->at++] = ',';
    memcpy(b->out + b->at, name, len);
    b->at += len;
    b->out[b->at] = 0;
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

int ps_replicas_with(const char *servers, const char *node, char *out, size_t size)
{
    char err[120];
    char one[PS_NET_NODE_BYTES + 1];
    if (!node || snprintf(one, sizeof(one), "%s", node) >= (int)sizeof(one) ||
        ps_cluster_ring_servers_check(one, sizeof(one), err, sizeof(err)) < 0 || strchr(node, ','))
        return -EINVAL;
    if (ps_replicas_has(servers, node))
        return -EEXIST;
    if (size == 0)
        return -ENOSPC;
    build_t b = {out, size, 0, 0};
    out[0] = 0;
    size_t nlen = strlen(node);
    int placed = 0;
    for (const char *s = servers; *s;) {
        size_t len = strcspn(s, ",");
        if (!placed && name_cmp(node, nlen, s, len) < 0) {
            build_add(&b, node, nlen);
            placed = 1;
        }
        build_add(&b, s, len);
        s += len;
        if (*s == ',')
            s++;
    }
    if (!placed)
        build_add(&b, node, nlen);
    return b.full ? -ENOSPC : 0;
}

int ps_replicas_without(const char *servers, const char *node, char *out, size_t size)
{
    if (!ps_replicas_has(servers, node))
        return -ENOENT;
    if (size == 0)
        return -ENOSPC;
    build_t b = {out, size, 0, 0};
    out[0] = 0;
    size_t nlen = strlen(node);
    for (const char *s = servers; *s;) {
        size_t len = strcspn(s, ",");
        if (len != nlen || memcmp(s, node, len) != 0)
            build_add(&b, s, len);
        s += len;
        if (*s == ',')
            s++;
    }
    return b.full ? -ENOSPC : 0;
}

/* ---- the fail-over's decisions --------------------------------------------------------------- */

ps_replicas_failover_act_t ps_replicas_failover_step(ps_replicas_failover_t *f, const ps_view_t *v,
                                                     const char *self, ps_alive_fn alive, void *ctx,
                                                     uint64_t now_ns, char *out, size_t out_size,
                                                     char *gone, size_t gone_size)
{
    if (out_size == 0 || gone_size == 0)
        return PS_FAILOVER_NONE;
    out[0] = 0;
    gone[0] = 0;
    if (f->busy || v->number == 0)
        return PS_FAILOVER_NONE;
    build_t live = {out, out_size, 0, 0}, dead = {gone, gone_size, 0, 0};
    char first[PS_NET_NODE_BYTES] = "";
    for (const char *s = v->servers; *s;) {
        size_t len = strcspn(s, ",");
        char name[PS_NET_NODE_BYTES];
        snprintf(name, sizeof(name), "%.*s", (int)(len < sizeof(name) ? len : sizeof(name) - 1),
                 s);
        if (alive(ctx, name)) {
            if (!first[0])
                snprintf(first, sizeof(first), "%s", name);
            build_add(&live, s, len);
        } else {
            build_add(&dead, s, len);
        }
        s += len;
        if (*s == ',')
            s++;
    }
    if (live.full || dead.full)
        return PS_FAILOVER_NONE;
    if (!gone[0]) { /* every server of the view lives */
        f->tries = 0;
        f->dead_since_ns = 0;
        f->gave_up_number = 0;
        return PS_FAILOVER_NONE;
    }
    if (!f->dead_since_ns)
        f->dead_since_ns = now_ns;
    if (!out[0]) /* none would remain: nothing to propose (a view is never empty) */
        return PS_FAILOVER_NONE;
    if (f->gave_up_number == v->number || now_ns < f->retry_at_ns)
        return PS_FAILOVER_NONE;
    if (strcmp(first, self) != 0 &&
        now_ns - f->dead_since_ns < (uint64_t)PS_FAILOVER_GRACE_MS * 1000000ull)
        return PS_FAILOVER_NONE; /* the first live server's turn */
    if (f->tries >= PS_FAILOVER_MAX_TRIES) {
        f->gave_up_number = v->number;
        f->tries = 0;
        return PS_FAILOVER_GIVE_UP;
    }
    f->tries++;
    f->busy = 1;
    return PS_FAILOVER_PROPOSE;
}

void ps_replicas_failover_result(ps_replicas_failover_t *f, int rc, uint64_t now_ns)
{
    f->busy = 0;
    if (rc == 0) {
        f->tries = 0;
        f->dead_since_ns = 0;
    } else if (rc != -ESTALE) {
        f->tries -= f->tries > 0; /* etcd's error is not a lost race: only the wait counts */
        f->retry_at_ns = now_ns + (uint64_t)PS_FAILOVER_RETRY_MS * 1000000ull;
    }
}
