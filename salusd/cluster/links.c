/* Daemon links (links.h): listening and accepting, the links this daemon dials and dials
 * again after each break, sending, the hooks. The connections themselves, their frames and
 * handshake are links_conn.c's. */
#include "links-internal.h"
#include "log.h"

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int links_node_valid(const char *node)
{
    size_t n = 0;
    for (; node[n]; n++) {
        char ch = node[n];
        if (n >= LINKS_NODE_BYTES - 1 ||
            !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return n > 0;
}

/* "ADDR:PORT" (numeric, "[v6]:PORT" for IPv6, PORT 0 to 65535) into sa; -EINVAL when it
 * does not parse (libevent's parser refuses port 0, which listening on any port needs). */
static int parse_addr(const char *text, struct sockaddr_storage *sa, int *sa_len)
{
    char host[INET6_ADDRSTRLEN + 2];
    memset(sa, 0, sizeof(*sa));
    const char *colon = text ? strrchr(text, ':') : NULL;
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof(host) || !colon[1] ||
        strlen(colon + 1) > 5 || strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return -EINVAL;
    long port = strtol(colon + 1, NULL, 10);
    if (port > 65535)
        return -EINVAL;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    size_t n = strlen(host);
    if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
        host[n - 1] = '\0';
        if (evutil_inet_pton(AF_INET6, host + 1, &in6->sin6_addr) != 1)
            return -EINVAL;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *sa_len = (int)sizeof(*in6);
        return 0;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)sa;
    if (evutil_inet_pton(AF_INET, host, &in->sin_addr) != 1)
        return -EINVAL;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    *sa_len = (int)sizeof(*in);
    return 0;
}

static int addr_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    if (sa->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return 0;
}

static void format_addr(const struct sockaddr *sa, char *out, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        evutil_inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host,
                         sizeof(host));
        snprintf(out, size, "%s:%d", host, addr_port(sa));
    } else if (sa->sa_family == AF_INET6) {
        evutil_inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, host,
                         sizeof(host));
        snprintf(out, size, "[%s]:%d", host, addr_port(sa));
    } else {
        snprintf(out, size, "an address of family %d", sa->sa_family);
    }
}

static void hook_enter(links_t *l)
{
    l->hook_depth++;
}

static void links_free(links_t *l);

/* -1 when links_destroy was called from the hook (links is gone now) */
static int hook_leave(links_t *l)
{
    if (--l->hook_depth == 0 && l->destroy_pending) {
        links_free(l);
        return -1;
    }
    return 0;
}

int links_call_is_member(links_t *l, const char *node)
{
    char copy[LINKS_NODE_BYTES];
    snprintf(copy, sizeof(copy), "%s", node);
    hook_enter(l);
    int member = l->hooks.is_member ? l->hooks.is_member(l->ctx, copy) == 1 : 0;
    return hook_leave(l) < 0 ? -1 : member;
}

int links_call_on_message(links_t *l, const char *node, const proto_msg_t *msg)
{
    char copy[LINKS_NODE_BYTES];
    snprintf(copy, sizeof(copy), "%s", node);
    hook_enter(l);
    if (l->hooks.on_message)
        l->hooks.on_message(l->ctx, copy, msg);
    return hook_leave(l);
}

static void on_redial(evutil_socket_t fd, short what, void *arg);

/* One more attempt did not come up: dial again after the backoff, which doubles up to
 * LINKS_REDIAL_MAX_MS. */
static void schedule_redial(links_peer_t *p)
{
    struct timeval tv = {.tv_sec = p->backoff_ms / 1000,
                         .tv_usec = (suseconds_t)(p->backoff_ms % 1000) * 1000};
    p->failures++;
    event_add(p->redial, &tv);
    p->backoff_ms = p->backoff_ms * 2 > LINKS_REDIAL_MAX_MS ? LINKS_REDIAL_MAX_MS
                                                            : p->backoff_ms * 2;
}

/* Dials peer now. Never runs a hook: a connect that fails at once is dialed again later. */
static void dial(links_peer_t *p)
{
    links_t *l = p->links;
    struct bufferevent *bev = NULL;
    /* close-on-exec: a job salusd starts must not hold a link open */
    int fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        bev = bufferevent_socket_new(l->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!bev)
            close(fd);
    }
    /* callbacks are set after the connect call: one failing at once runs none */
    if (bev && bufferevent_socket_connect(bev, (struct sockaddr *)&p->sa, p->sa_len) == 0) {
        p->conn = links_conn_new(l, p, bev, p->addr);
        if (p->conn)
            return;
        bev = NULL; /* links_conn_new freed it */
    }
    int err = EVUTIL_SOCKET_ERROR();
    if (bev)
        bufferevent_free(bev);
    SALUS_LOG(p->failures ? SALUS_LOG_DEBUG : SALUS_LOG_WARN, "link to %s (%s): cannot dial: %s",
              p->node, p->addr, err ? evutil_socket_error_to_string(err) : "out of memory");
    schedule_redial(p);
}

static void on_redial(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    links_peer_t *p = arg;
    if (!p->conn)
        dial(p);
}

/* Closes the peer's connection, if any, without hooks. */
static void drop_conn(links_peer_t *p)
{
    if (!p->conn)
        return;
    if (p->conn->state == LINKS_CONN_UP)
        p->links->stats.up--;
    links_conn_free(p->conn);
    p->conn = NULL;
}

int links_peer_failed(links_peer_t *p, const char *why)
{
    links_t *l = p->links;
    char node[LINKS_NODE_BYTES], reason[256];
    snprintf(node, sizeof(node), "%s", p->node);
    snprintf(reason, sizeof(reason), "%s", why);
    int was_up = p->conn && p->conn->state == LINKS_CONN_UP;
    drop_conn(p);
    if (was_up) {
        p->backoff_ms = LINKS_REDIAL_FIRST_MS;
        p->failures = 0;
    }
    schedule_redial(p);
    /* last: the hook may forget p, or destroy links */
    if (l->hooks.on_down) {
        hook_enter(l);
        l->hooks.on_down(l->ctx, node, reason);
        hook_leave(l);
    }
    return -1;
}

int links_peer_up(links_peer_t *p)
{
    links_t *l = p->links;
    char node[LINKS_NODE_BYTES];
    snprintf(node, sizeof(node), "%s", p->node);
    p->backoff_ms = LINKS_REDIAL_FIRST_MS;
    p->failures = 0;
    l->stats.up++;
    LOG_INFO("link to %s (%s) is up", p->node, p->addr);
    if (l->hooks.on_up) {
        hook_enter(l);
        l->hooks.on_up(l->ctx, node);
        hook_leave(l);
    }
    return -1; /* the hook may have forgotten p or destroyed links: read on at the next event */
}

static links_peer_t *find_peer(const links_t *l, const char *node)
{
    for (links_peer_t *p = l->peers; p; p = p->next)
        if (strcmp(p->node, node) == 0)
            return p;
    return NULL;
}

static int same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                      &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr)) == 0;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 0;
}

int links_addr_is_member(const links_t *l, const struct sockaddr *sa)
{
    for (const links_peer_t *p = l->peers; p; p = p->next)
        if (same_host((const struct sockaddr *)&p->sa, sa))
            return 1;
    return 0;
}

static const char *const log_kind_names[LINKS_LOG_KINDS] = {
    [LINKS_LOG_BUSY] = "connections closed at once (handshake limits)",
    [LINKS_LOG_REFUSED] = "connections refused",
    [LINKS_LOG_FORGED] = "frames whose tag does not check",
};

static void on_log_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    links_t *l = arg;
    uint64_t now = salus_log_limit_now_ns(), next = 0;
    for (int k = 0; k < LINKS_LOG_KINDS; k++) {
        salus_log_limit_t *lim = &l->log_limit[k];
        uint64_t n = salus_log_limit_flush(lim, now);
        if (n)
            LOG_WARN("links: %llu more log lines of %s were dropped in the last minute (at "
                     "most %d a minute; %llu dropped since the start)", (unsigned long long)n,
                     log_kind_names[k], LINKS_LOG_LINES_PER_MIN,
                     (unsigned long long)lim->dropped_total);
        uint64_t left = salus_log_limit_left_ns(lim, now);
        if (lim->dropped && (!next || left < next))
            next = left;
    }
    if (next) {
        struct timeval tv = {.tv_sec = (time_t)(next / 1000000000ull),
                             .tv_usec = (suseconds_t)(next % 1000000000ull / 1000) + 1000};
        event_add(l->log_flush, &tv);
    }
}

int links_log_take(links_t *l, links_log_kind_t kind, int level)
{
    if (level > salus_log_threshold)
        return 0;
    salus_log_limit_t *lim = &l->log_limit[kind];
    uint64_t now = salus_log_limit_now_ns(), said = 0;
    if (!salus_log_limit_take(lim, now, &said)) {
        if (!event_pending(l->log_flush, EV_TIMEOUT, NULL)) {
            uint64_t left = salus_log_limit_left_ns(lim, now);
            struct timeval tv = {.tv_sec = (time_t)(left / 1000000000ull),
                                 .tv_usec = (suseconds_t)(left % 1000000000ull / 1000) + 1000};
            event_add(l->log_flush, &tv);
        }
        return 0;
    }
    if (said)
        SALUS_LOG(level, "links: %llu more log lines of %s were dropped (at most %d a minute; "
                  "%llu dropped since the start)", (unsigned long long)said,
                  log_kind_names[kind], LINKS_LOG_LINES_PER_MIN,
                  (unsigned long long)lim->dropped_total);
    return 1;
}

/* The handshake limits (links-internal.h) for a new connection from sa: NULL when it may go
 * on, else why it is closed at once. */
static const char *over_limits(const links_t *l, const struct sockaddr *sa, int member,
                               char *why, size_t why_size)
{
    int same = 0;
    for (const links_conn_t *c = l->accepted; c; c = c->next)
        if (c->state != LINKS_CONN_UP && c->state != LINKS_CONN_CLOSING &&
            same_host((const struct sockaddr *)&c->src, sa))
            same++;
    if (l->handshakes >= LINKS_MAX_HANDSHAKES) {
        snprintf(why, why_size, "%d connections are in their handshake already", l->handshakes);
        return why;
    }
    if (member) {
        if (same >= LINKS_MAX_PER_MEMBER) {
            snprintf(why, why_size, "%d connections from this member's address are in their "
                     "handshake already", same);
            return why;
        }
        return NULL;
    }
    if (l->handshakes - l->member_handshakes >= LINKS_MAX_HANDSHAKES - LINKS_MEMBER_RESERVE) {
        snprintf(why, why_size, "%d connections from addresses other than the members' are in "
                 "their handshake already", l->handshakes - l->member_handshakes);
        return why;
    }
    if (same >= LINKS_MAX_PER_SOURCE) {
        snprintf(why, why_size, "%d connections from this address are in their handshake "
                 "already (an address that is not a member's may have %d)", same,
                 LINKS_MAX_PER_SOURCE);
        return why;
    }
    return NULL;
}

static void on_accept(struct evconnlistener *listener, evutil_socket_t fd, struct sockaddr *sa,
                      int sa_len, void *arg)
{
    (void)listener;
    links_t *l = arg;
    char addr[LINKS_ADDR_BYTES], text[160];
    format_addr(sa, addr, sizeof(addr));
    int member = links_addr_is_member(l, sa);
    const char *why = over_limits(l, sa, member, text, sizeof(text));
    if (why) {
        if (links_log_take(l, LINKS_LOG_BUSY, SALUS_LOG_WARN))
            LOG_WARN("refusing the link from %s: %s", addr, why);
        l->stats.refused++;
        l->stats.busy++;
        evutil_closesocket(fd);
        return;
    }
    struct bufferevent *bev = bufferevent_socket_new(l->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        LOG_WARN("refusing the link from %s: out of memory", addr);
        evutil_closesocket(fd);
        return;
    }
    links_conn_t *c = links_conn_new(l, NULL, bev, addr);
    if (!c) {
        LOG_WARN("refusing the link from %s: out of memory", addr);
        return;
    }
    if ((size_t)sa_len <= sizeof(c->src))
        memcpy(&c->src, sa, (size_t)sa_len);
    c->from_member = member;
    if (member)
        l->member_handshakes++;
    else if (l->handshakes > LINKS_PRESSURE_HANDSHAKES &&
             c->deadline_ms > l->pressure_timeout_ms) {
        c->deadline_ms = l->pressure_timeout_ms; /* under pressure: a short deadline */
        struct timeval tv = {.tv_sec = c->deadline_ms / 1000,
                             .tv_usec = (suseconds_t)(c->deadline_ms % 1000) * 1000};
        event_add(c->deadline, &tv);
    }
}

static void on_accept_error(struct evconnlistener *listener, void *arg)
{
    (void)listener;
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    LOG_WARN("links: accepting a connection failed: %s", evutil_socket_error_to_string(err));
}

static int start_listening(links_t *l, const char *listen, char *err, size_t err_size)
{
    struct sockaddr_storage sa;
    int sa_len;
    if (parse_addr(listen, &sa, &sa_len) < 0) {
        snprintf(err, err_size, "links: cannot listen on '%s': not a numeric ADDR:PORT", listen);
        return -EINVAL;
    }
    l->listener = evconnlistener_new_bind(
        l->base, on_accept, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        64, (struct sockaddr *)&sa, sa_len);
    if (!l->listener) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, err_size, "links: cannot listen on %s: %s", listen,
                 evutil_socket_error_to_string(e));
        return -(e ? e : ENOMEM);
    }
    evconnlistener_set_error_cb(l->listener, on_accept_error);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    if (getsockname(evconnlistener_get_fd(l->listener), (struct sockaddr *)&bound,
                    &bound_len) == 0)
        l->port = addr_port((struct sockaddr *)&bound);
    return 0;
}

links_t *links_create(struct event_base *base, const links_config_t *config,
                      const links_hooks_t *hooks, void *ctx, char *err, size_t err_size)
{
    if (!config->node || !links_node_valid(config->node)) {
        snprintf(err, err_size, "links: node name '%s' is not 1 to %d of [A-Za-z0-9._-]",
                 config->node ? config->node : "", LINKS_NODE_BYTES - 1);
        return NULL;
    }
    if (!config->key || config->key_len < LINKS_KEY_MIN_BYTES ||
        config->key_len > LINKS_KEY_MAX_BYTES) {
        snprintf(err, err_size, "links: the cluster key must have %d to %d bytes",
                 LINKS_KEY_MIN_BYTES, LINKS_KEY_MAX_BYTES);
        return NULL;
    }
    links_t *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(err, err_size, "links: out of memory");
        return NULL;
    }
    l->base = base;
    snprintf(l->node, sizeof(l->node), "%s", config->node);
    memcpy(l->key, config->key, config->key_len);
    l->key_len = config->key_len;
    l->max_frame_bytes = config->max_frame_bytes ? config->max_frame_bytes
                                                 : PROTO_DEFAULT_MAX_FRAME_BYTES;
    l->handshake_timeout_ms = config->handshake_timeout_ms ? config->handshake_timeout_ms : 2000;
    l->pressure_timeout_ms = config->pressure_timeout_ms ? config->pressure_timeout_ms
                                                         : LINKS_PRESSURE_DEADLINE_MS;
    if (hooks)
        l->hooks = *hooks;
    l->ctx = ctx;
    for (int k = 0; k < LINKS_LOG_KINDS; k++)
        l->log_limit[k] = (salus_log_limit_t)SALUS_LOG_LIMIT_INIT(LINKS_LOG_LINES_PER_MIN, 60);
    proto_enc_init(&l->enc);
    l->log_flush = evtimer_new(base, on_log_flush, l);
    if (!l->log_flush) {
        snprintf(err, err_size, "links: out of memory");
        links_free(l);
        return NULL;
    }
    if (config->listen && start_listening(l, config->listen, err, err_size) < 0) {
        links_free(l);
        return NULL;
    }
    return l;
}

static void free_peer(links_peer_t *p)
{
    drop_conn(p);
    if (p->redial)
        event_free(p->redial);
    free(p);
}

static void links_free(links_t *l)
{
    if (l->listener)
        evconnlistener_free(l->listener);
    while (l->accepted)
        links_conn_free(l->accepted);
    while (l->peers) {
        links_peer_t *p = l->peers;
        l->peers = p->next;
        free_peer(p);
    }
    proto_enc_destroy(&l->enc);
    if (l->log_flush)
        event_free(l->log_flush);
    link_auth_cleanse(l->key, sizeof(l->key));
    free(l);
}

void links_destroy(links_t *links)
{
    if (!links)
        return;
    if (links->hook_depth > 0) { /* from a hook: when it returns */
        links->destroy_pending = 1;
        return;
    }
    links_free(links);
}

int links_listen_port(const links_t *links)
{
    return links && links->listener ? links->port : 0;
}

int links_connect(links_t *links, const char *node, const char *addr)
{
    struct sockaddr_storage sa;
    int sa_len;
    if (!node || !links_node_valid(node) || parse_addr(addr, &sa, &sa_len) < 0 ||
        addr_port((struct sockaddr *)&sa) == 0)
        return -EINVAL;
    links_peer_t *p = find_peer(links, node);
    if (p && p->sa_len == sa_len && memcmp(&p->sa, &sa, (size_t)sa_len) == 0)
        return 0;
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p)
            return -ENOMEM;
        p->redial = evtimer_new(links->base, on_redial, p);
        if (!p->redial) {
            free(p);
            return -ENOMEM;
        }
        p->links = links;
        snprintf(p->node, sizeof(p->node), "%s", node);
        p->next = links->peers;
        links->peers = p;
    }
    drop_conn(p); /* another address: the link there is dialed anew, without on_down */
    event_del(p->redial);
    p->sa = sa;
    p->sa_len = sa_len;
    format_addr((struct sockaddr *)&sa, p->addr, sizeof(p->addr));
    p->backoff_ms = LINKS_REDIAL_FIRST_MS;
    p->failures = 0;
    dial(p);
    return 0;
}

void links_forget(links_t *links, const char *node)
{
    for (links_peer_t **at = &links->peers; *at; at = &(*at)->next) {
        if (strcmp((*at)->node, node) == 0) {
            links_peer_t *p = *at;
            *at = p->next;
            free_peer(p);
            return;
        }
    }
}

int links_is_up(const links_t *links, const char *node)
{
    const links_peer_t *p = find_peer(links, node);
    return p && p->conn && p->conn->state == LINKS_CONN_UP;
}

int links_send(links_t *links, const char *node, const proto_enc_t *enc)
{
    links_peer_t *p = find_peer(links, node);
    if (!p || !p->conn || p->conn->state != LINKS_CONN_UP)
        return -ENOTCONN;
    if (enc->sbuf.size < PROTO_HEADER_BYTES ||
        enc->sbuf.size - PROTO_HEADER_BYTES > links->max_frame_bytes)
        return -EMSGSIZE; /* the far end would close the link */
    if (links_conn_send(p->conn, (const uint8_t *)enc->sbuf.data, enc->sbuf.size) < 0)
        return -ENOMEM;
    links->stats.sent++;
    return 0;
}

void links_get_stats(const links_t *links, links_stats_t *stats)
{
    *stats = links->stats;
}
