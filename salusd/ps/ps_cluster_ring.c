/* ps_cluster's pure parts (ps_cluster-internal.h): the ring record's JSON and the token
 * exchange that makes two members UCX peers. */
#include "ps_cluster-internal.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

/* ---- the ring record ------------------------------------------------------------------------ */

static int spec_text_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ':' || c == '.' ||
              c == '+' || c == '-'))
            return 0;
    }
    return 1;
}

static int node_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

int ps_cluster_ring_servers_check(const char *servers, size_t cap, char *err, size_t err_size)
{
    size_t len = strnlen(servers, cap);
    if (len == 0 || len >= cap) {
        snprintf(err, err_size, "the server list is empty or too long");
        return -EINVAL;
    }
    /* node names separated by single commas, strictly increasing (sorted, distinct) */
    const char *prev = NULL;
    size_t prev_len = 0, count = 0;
    for (const char *s = servers; *s;) {
        size_t n = 0;
        while (s[n] && s[n] != ',') {
            if (!node_char(s[n])) {
                snprintf(err, err_size, "the server list has a bad node name");
                return -EINVAL;
            }
            n++;
        }
        if (n == 0 || n >= PS_NET_NODE_BYTES) {
            snprintf(err, err_size, "the server list has an empty or too long node name");
            return -EINVAL;
        }
        if (prev) {
            size_t m = prev_len < n ? prev_len : n;
            int c = memcmp(prev, s, m);
            if (c > 0 || (c == 0 && prev_len >= n)) {
                snprintf(err, err_size, "the server list is not sorted or has a node twice");
                return -EINVAL;
            }
        }
        if (++count > PS_MAX_SERVERS) {
            snprintf(err, err_size, "more than %d servers", PS_MAX_SERVERS);
            return -EINVAL;
        }
        prev = s;
        prev_len = n;
        s += n;
        if (*s == ',') {
            s++;
            if (!*s) {
                snprintf(err, err_size, "the server list ends with a comma");
                return -EINVAL;
            }
        }
    }
    return 0;
}

int ps_ring_record_check(const ps_ring_record_t *rec, char *err, size_t err_size)
{
    if (rec->count < 1 || rec->count > PS_RING_MAX_COUNT) {
        snprintf(err, err_size, "count %" PRIu64 " is not within 1..%llu", rec->count,
                 (unsigned long long)PS_RING_MAX_COUNT);
        return -EINVAL;
    }
    if (!spec_text_ok(rec->rule, sizeof(rec->rule))) {
        snprintf(err, err_size, "the rule is not a rule's text");
        return -EINVAL;
    }
    if (!spec_text_ok(rec->sync, sizeof(rec->sync))) {
        snprintf(err, err_size, "the sync mode is not a sync mode's text");
        return -EINVAL;
    }
    if (rec->vnodes < 1 || rec->vnodes > PS_RING_MAX_VNODES) {
        snprintf(err, err_size, "vnodes %u is not within 1..%u", rec->vnodes, PS_RING_MAX_VNODES);
        return -EINVAL;
    }
    return ps_cluster_ring_servers_check(rec->servers, sizeof(rec->servers), err, err_size);
}

int ps_ring_record_format(const ps_ring_record_t *rec, char *buf, size_t size, char *err,
                          size_t err_size)
{
    int rc = ps_ring_record_check(rec, err, err_size);
    if (rc < 0)
        return rc;
    /* every text is of plain characters (checked): nothing to escape */
    int n = snprintf(buf, size,
                     "{\"count\":%" PRIu64 ",\"rule\":\"%s\",\"sync\":\"%s\",\"servers\":[",
                     rec->count, rec->rule, rec->sync);
    if (n < 0 || (size_t)n >= size)
        return -ENOSPC;
    size_t at = (size_t)n;
    if (ps_cluster_ring_servers_to_json(rec->servers, buf, size, &at) < 0)
        return -ENOSPC;
    n = rec->start ? snprintf(buf + at, size - at, "],\"vnodes\":%u,\"start\":%" PRIu64 "}",
                              rec->vnodes, rec->start)
                   : snprintf(buf + at, size - at, "],\"vnodes\":%u}", rec->vnodes);
    if (n < 0 || (size_t)n >= size - at)
        return -ENOSPC;
    return (int)(at + (size_t)n);
}

static int get_uint(struct json_object *o, const char *key, uint64_t max, uint64_t *out)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
        return -EINVAL;
    errno = 0;
    int64_t i = json_object_get_int64(v);
    if (errno || i < 0 || (uint64_t)i > max)
        return -EINVAL;
    *out = (uint64_t)i;
    return 0;
}

static int get_text(struct json_object *o, const char *key, char *out, size_t cap)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return -EINVAL;
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (n >= cap || strlen(s) != n)
        return -EINVAL;
    memcpy(out, s, n + 1);
    return 0;
}

int ps_key_name_ok(const char *s, size_t cap)
{
    size_t n = s ? strnlen(s, cap) : 0;
    if (n == 0 || n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

int ps_json_object_parse(const char *text, size_t len, const char *what, int whole, int bad_rc,
                         struct json_object **o, char *err, size_t err_size)
{
    *o = NULL;
    if (len == 0 || len > 64 * 1024 || memchr(text, 0, len)) {
        snprintf(err, err_size, "%s is empty, too long or not text", what);
        return bad_rc;
    }
    struct json_tokener *tok = json_tokener_new();
    if (!tok) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    struct json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
    int ok = json_tokener_get_error(tok) == json_tokener_success &&
             (!whole || json_tokener_get_parse_end(tok) == len) &&
             json_object_is_type(obj, json_type_object);
    json_tokener_free(tok);
    if (!ok) {
        json_object_put(obj);
        snprintf(err, err_size, "%s is not a JSON object", what);
        return bad_rc;
    }
    *o = obj;
    return 0;
}

int ps_cluster_ring_servers_to_json(const char *servers, char *buf, size_t size, size_t *at)
{
    for (const char *s = servers; *s;) {
        size_t len = strcspn(s, ",");
        int n = snprintf(buf + *at, size - *at, "%s\"%.*s\"", s == servers ? "" : ",",
                         (int)len, s);
        if (n < 0 || (size_t)n >= size - *at)
            return -ENOSPC;
        *at += (size_t)n;
        s += len;
        if (*s == ',')
            s++;
    }
    return 0;
}

int ps_cluster_ring_servers_from_json(struct json_object *o, const char *what, char *out,
                                      size_t cap, char *err, size_t err_size)
{
    struct json_object *servers;
    if (!json_object_object_get_ex(o, "servers", &servers) ||
        !json_object_is_type(servers, json_type_array)) {
        snprintf(err, err_size, "%s's servers is missing or not a list", what);
        return -1;
    }
    size_t at = 0, n = json_object_array_length(servers);
    for (size_t i = 0; i < n; i++) {
        struct json_object *s = json_object_array_get_idx(servers, i);
        if (!json_object_is_type(s, json_type_string)) {
            snprintf(err, err_size, "%s's servers holds a non-string", what);
            return -1;
        }
        const char *name = json_object_get_string(s);
        size_t len_s = (size_t)json_object_get_string_len(s);
        if (strlen(name) != len_s || memchr(name, ',', len_s) || at + len_s + 2 > cap) {
            snprintf(err, err_size, "%s's servers holds a bad name or is too long", what);
            return -1;
        }
        if (i)
            out[at++] = ',';
        memcpy(out + at, name, len_s);
        at += len_s;
        out[at] = 0;
    }
    return 0;
}

int ps_ring_record_parse(const char *text, size_t len, ps_ring_record_t *rec, char *err,
                         size_t err_size)
{
    memset(rec, 0, sizeof(*rec));
    struct json_object *o;
    int rc = ps_json_object_parse(text, len, "the record", 0, -EINVAL, &o, err, err_size);
    if (rc < 0)
        return rc;
    rc = -EINVAL;
    uint64_t vnodes = 0;
    if (get_uint(o, "count", PS_RING_MAX_COUNT, &rec->count) < 0) {
        snprintf(err, err_size, "the record's count is missing or out of range");
        goto out;
    }
    if (get_text(o, "rule", rec->rule, sizeof(rec->rule)) < 0 ||
        get_text(o, "sync", rec->sync, sizeof(rec->sync)) < 0) {
        snprintf(err, err_size, "the record's rule or sync is missing or too long");
        goto out;
    }
    if (get_uint(o, "vnodes", PS_RING_MAX_VNODES, &vnodes) < 0) {
        snprintf(err, err_size, "the record's vnodes is missing or out of range");
        goto out;
    }
    rec->vnodes = (uint32_t)vnodes;
    if (json_object_object_get_ex(o, "start", NULL) &&
        get_uint(o, "start", INT64_MAX, &rec->start) < 0) { /* optional (checkpoints) */
        snprintf(err, err_size, "the record's start clock is out of range");
        goto out;
    }
    if (ps_cluster_ring_servers_from_json(o, "the record", rec->servers, sizeof(rec->servers), err,
                                          err_size) < 0)
        goto out;
    rc = ps_ring_record_check(rec, err, err_size);
out:
    json_object_put(o);
    return rc;
}

/* ---- the token exchange --------------------------------------------------------------------- */

static void out_clear(ps_hello_out_t *out)
{
    memset(out, 0, sizeof(*out));
}

static void out_add(const ps_hello_peer_t *p, ps_hello_out_t *out)
{
    if (p->mine && p->theirs) {
        out->add = 1;
        out->add_send = p->theirs;
        out->add_recv = p->mine;
    }
}

static void out_send(const ps_hello_peer_t *p, ps_hello_out_t *out)
{
    out->send = 1;
    out->send_token = p->mine;
    out->send_have = p->theirs != 0;
}

void ps_hello_link_up(ps_hello_peer_t *p, uint64_t fresh, ps_hello_out_t *out)
{
    out_clear(out);
    p->mine = fresh;
    out_send(p, out);
    out_add(p, out);
}

void ps_hello_received(ps_hello_peer_t *p, uint64_t token, int have, int link_up,
                       uint64_t fresh, ps_hello_out_t *out)
{
    out_clear(out);
    p->theirs = token;
    if (link_up && (!p->mine || !have)) {
        if (!p->mine)
            p->mine = fresh;
        out_send(p, out);
    }
    out_add(p, out);
}

void ps_hello_down(ps_hello_peer_t *p, int link_up, uint64_t fresh, ps_hello_out_t *out)
{
    out_clear(out);
    p->theirs = 0;
    p->mine = 0;
    if (link_up) {
        p->mine = fresh;
        out_send(p, out);
    }
}

uint64_t ps_cluster_token(void)
{
    uint64_t t = 0;
    for (int tries = 0; tries < 4 && t == 0; tries++) {
        size_t got = 0;
        while (got < sizeof(t)) {
            ssize_t n = getrandom((uint8_t *)&t + got, sizeof(t) - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return 0;
            got += (size_t)n;
        }
    }
    return t;
}
