/* The etcd client (etcd.h): endpoints, libcurl's multi interface driven by the libevent
 * loop (curl's sockets become libevent events, curl's timer one libevent timer), requests
 * with their failover round the endpoints. Callbacks run only from the loop, after
 * curl_multi_socket_action returned, never inside a libcurl callback: a callback may queue,
 * cancel or destroy. Bodies and replies are etcd_json.c's, watches etcd_watch.c's. */
#include "etcd-internal.h"

#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One request in flight: its body, the endpoint it is on, what the endpoints said. */
typedef struct etcd_request_s {
    struct etcd_request_s *next, *prev;
    etcd_t *etcd;
    CURL *easy;
    struct curl_slist *headers;
    const char *path;
    char *body;
    etcd_reply_kind_t kind;
    size_t endpoint, tries;
    etcd_buf_t reply;
    char errbuf[CURL_ERROR_SIZE];
    char failures[512]; /* "HOST:PORT: why; ..." of the endpoints that failed */
    int error;          /* the last endpoint's */
    etcd_cb cb;
    void *ctx;
} etcd_request_t;

/* A socket curl wants watched. */
struct etcd_sock_s {
    etcd_sock_t *next, *prev;
    etcd_t *etcd;
    curl_socket_t fd;
    struct event *ev;
};

#define LIST_ADD(head, item)                                                                   \
    do {                                                                                       \
        (item)->prev = NULL;                                                                   \
        (item)->next = (head);                                                                 \
        if (head)                                                                              \
            (head)->prev = (item);                                                             \
        (head) = (item);                                                                       \
    } while (0)
#define LIST_DEL(head, item)                                                                   \
    do {                                                                                       \
        if ((item)->prev)                                                                      \
            (item)->prev->next = (item)->next;                                                 \
        else                                                                                   \
            (head) = (item)->next;                                                             \
        if ((item)->next)                                                                      \
            (item)->next->prev = (item)->prev;                                                 \
    } while (0)

static void process(etcd_t *etcd);

/* ---- libcurl on libevent ---------------------------------------------------------------- */

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    etcd_t *etcd = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(etcd->multi, fd, flags, &running);
    process(etcd);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    etcd_t *etcd = arg;
    int running;
    curl_multi_socket_action(etcd->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    process(etcd);
}

static void sock_free(etcd_t *etcd, etcd_sock_t *sock)
{
    LIST_DEL(etcd->socks, sock);
    event_free(sock->ev);
    free(sock);
}

/* CURLMOPT_SOCKETFUNCTION: watch fd for what curl asks, or stop. */
static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    etcd_t *etcd = userp;
    etcd_sock_t *sock = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sock) {
            curl_multi_assign(etcd->multi, fd, NULL);
            sock_free(etcd, sock);
        }
        return 0;
    }
    short events = EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) |
                   (what & CURL_POLL_OUT ? EV_WRITE : 0);
    if (!sock) {
        sock = calloc(1, sizeof(*sock));
        if (!sock)
            return -1;
        sock->etcd = etcd;
        sock->fd = fd;
        LIST_ADD(etcd->socks, sock);
        curl_multi_assign(etcd->multi, fd, sock);
    } else {
        event_free(sock->ev);
        sock->ev = NULL;
    }
    sock->ev = event_new(etcd->base, fd, events, on_socket_event, etcd);
    if (!sock->ev || event_add(sock->ev, NULL) != 0) {
        LOG_ERROR("etcd: cannot watch a socket of the connection to etcd");
        return -1;
    }
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: curl wants on_timer in timeout_ms (-1: never). */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    etcd_t *etcd = userp;
    if (timeout_ms < 0) {
        evtimer_del(etcd->timer);
        return 0;
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    return evtimer_add(etcd->timer, &tv) == 0 ? 0 : -1;
}

/* ---- endpoints -------------------------------------------------------------------------- */

/* "HOST:PORT" with a port 1..65535 and a host ("[v6]" allowed); 0 or -EINVAL. */
static int check_endpoint(const char *text)
{
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || colon[1] == 0)
        return -EINVAL;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != 0 || port < 1 || port > 65535)
        return -EINVAL;
    for (const char *c = text; c < colon; c++)
        if (*c == '/' || *c == ' ' || *c == '@')
            return -EINVAL;
    return 0;
}

static int parse_endpoints(etcd_t *etcd, const char *text, char *err, size_t err_size)
{
    if (strncmp(text, "etcd://", 7) == 0)
        text += 7;
    char *copy = strdup(text);
    if (!copy) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (strncmp(item, "etcd://", 7) == 0)
            item += 7;
        if (check_endpoint(item) != 0) {
            snprintf(err, err_size, "etcd endpoint \"%s\" is not HOST:PORT", item);
            rc = -EINVAL;
            break;
        }
        char **grown = realloc(etcd->endpoints, (etcd->endpoint_count + 1) * sizeof(*grown));
        char *dup = grown ? strdup(item) : NULL;
        if (grown)
            etcd->endpoints = grown;
        if (!dup) {
            snprintf(err, err_size, "out of memory");
            rc = -ENOMEM;
            break;
        }
        etcd->endpoints[etcd->endpoint_count++] = dup;
    }
    if (rc == 0 && etcd->endpoint_count == 0) {
        snprintf(err, err_size, "no etcd endpoint in \"%s\" (want HOST:PORT[,...])", text);
        rc = -EINVAL;
    }
    free(copy);
    return rc;
}

/* ---- create, destroy -------------------------------------------------------------------- */

static int dup_opt(char **out, const char *in)
{
    *out = in ? strdup(in) : NULL;
    return (in && !*out) ? -ENOMEM : 0;
}

etcd_t *etcd_create(struct event_base *base, const etcd_config_t *config, char *err,
                    size_t err_size)
{
    etcd_t *etcd = calloc(1, sizeof(*etcd));
    if (!etcd) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    etcd->base = base;
    etcd->timeout_ms = config->timeout_ms ? config->timeout_ms : 3000;
    if (!config->endpoints) {
        snprintf(err, err_size, "no etcd endpoints given");
        goto fail;
    }
    if (parse_endpoints(etcd, config->endpoints, err, err_size) != 0)
        goto fail;
    if (dup_opt(&etcd->endpoints_text, config->endpoints) != 0 ||
        dup_opt(&etcd->ca_file, config->tls.ca_file) != 0 ||
        dup_opt(&etcd->cert_file, config->tls.cert_file) != 0 ||
        dup_opt(&etcd->key_file, config->tls.key_file) != 0) {
        snprintf(err, err_size, "out of memory");
        goto fail;
    }
    static bool curl_ready;
    if (!curl_ready && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, err_size, "libcurl cannot start");
        goto fail;
    }
    curl_ready = true;
    etcd->multi = curl_multi_init();
    etcd->timer = evtimer_new(base, on_timer, etcd);
    if (!etcd->multi || !etcd->timer) {
        snprintf(err, err_size, "libcurl cannot start (out of memory)");
        goto fail;
    }
    curl_multi_setopt(etcd->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(etcd->multi, CURLMOPT_SOCKETDATA, etcd);
    curl_multi_setopt(etcd->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(etcd->multi, CURLMOPT_TIMERDATA, etcd);
    return etcd;
fail:
    etcd_destroy(etcd);
    return NULL;
}

static void request_free(etcd_request_t *req)
{
    etcd_t *etcd = req->etcd;
    LIST_DEL(etcd->requests, req);
    if (req->easy) {
        curl_multi_remove_handle(etcd->multi, req->easy);
        curl_easy_cleanup(req->easy);
    }
    curl_slist_free_all(req->headers);
    free(req->body);
    etcd_buf_free(&req->reply);
    free(req);
}

static void etcd_free(etcd_t *etcd)
{
    while (etcd->requests)
        request_free(etcd->requests);
    while (etcd->watches)
        etcd_watch_free(etcd->watches);
    if (etcd->multi)
        curl_multi_cleanup(etcd->multi);
    while (etcd->socks)
        sock_free(etcd, etcd->socks);
    if (etcd->timer)
        event_free(etcd->timer);
    for (size_t i = 0; i < etcd->endpoint_count; i++)
        free(etcd->endpoints[i]);
    free(etcd->endpoints);
    free(etcd->endpoints_text);
    free(etcd->ca_file);
    free(etcd->cert_file);
    free(etcd->key_file);
    free(etcd);
}

void etcd_destroy(etcd_t *etcd)
{
    if (!etcd)
        return;
    if (etcd->dispatching > 0) {
        etcd->destroyed = true; /* freed when the callbacks running now are done */
        return;
    }
    etcd_free(etcd);
}

/* "HOST:PORT"'s host is a loopback address */
static int endpoint_is_loopback(const char *endpoint)
{
    char host[256];
    const char *colon = strrchr(endpoint, ':');
    size_t n = colon ? (size_t)(colon - endpoint) : strlen(endpoint);
    if (n >= sizeof(host))
        return 0;
    memcpy(host, endpoint, n);
    host[n] = 0;
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0)
        return 1;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

int etcd_plain_remote(const etcd_t *etcd, char *out, size_t out_size)
{
    size_t used = 0;
    int plain = 0;
    if (out_size)
        out[0] = 0;
    if (etcd->ca_file)
        return 0;
    for (size_t i = 0; i < etcd->endpoint_count; i++) {
        if (endpoint_is_loopback(etcd->endpoints[i]))
            continue;
        plain = 1;
        if (used < out_size) {
            int w = snprintf(out + used, out_size - used, "%s%s", used ? "," : "",
                             etcd->endpoints[i]);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    return plain;
}

const char *etcd_endpoints(const etcd_t *etcd)
{
    return etcd->endpoints_text;
}

void etcd_dispatch_begin(etcd_t *etcd)
{
    etcd->dispatching++;
}

void etcd_dispatch_end(etcd_t *etcd)
{
    if (--etcd->dispatching > 0)
        return;
    if (etcd->destroyed) {
        etcd_free(etcd);
        return;
    }
    etcd_watch_t *watch = etcd->watches;
    while (watch) {
        etcd_watch_t *next = etcd_watch_next(watch);
        if (etcd_watch_is_cancelled(watch))
            etcd_watch_free(watch);
        watch = next;
    }
}

/* ---- easy handles ----------------------------------------------------------------------- */

CURL *etcd_easy_new(etcd_t *etcd, size_t endpoint, const char *path, const char *body,
                    bool stream, curl_write_callback write, void *write_ctx,
                    struct curl_slist **headers)
{
    char url[512];
    snprintf(url, sizeof(url), "%s://%s%s", etcd->ca_file ? "https" : "http",
             etcd->endpoints[endpoint], path);
    CURL *easy = curl_easy_init();
    *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!easy || !*headers) {
        curl_easy_cleanup(easy);
        curl_slist_free_all(*headers);
        *headers = NULL;
        return NULL;
    }
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, *headers);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, write_ctx);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)etcd->timeout_ms);
    if (!stream)
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)etcd->timeout_ms);
    /* a watch may be quiet for long: a peer that is gone is found by TCP keepalives */
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 1L);
    if (etcd->ca_file)
        curl_easy_setopt(easy, CURLOPT_CAINFO, etcd->ca_file);
    if (etcd->cert_file)
        curl_easy_setopt(easy, CURLOPT_SSLCERT, etcd->cert_file);
    if (etcd->key_file)
        curl_easy_setopt(easy, CURLOPT_SSLKEY, etcd->key_file);
    return easy;
}

int etcd_curl_error(const etcd_t *etcd, CURL *easy, CURLcode code, const char *errbuf,
                    char *why, size_t why_size)
{
    long os_errno = 0;
    curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
    const char *text = errbuf && errbuf[0] ? errbuf : curl_easy_strerror(code);
    int error;
    switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
        error = -ETIMEDOUT;
        break;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CLIENTCERT:
        error = -EACCES;
        break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
        if (os_errno == EHOSTUNREACH || os_errno == ENETUNREACH)
            error = -EHOSTUNREACH;
        else if (os_errno == ETIMEDOUT)
            error = -ETIMEDOUT;
        else if (os_errno == ECONNREFUSED || !etcd->ca_file)
            error = -ECONNREFUSED;
        else /* TLS: a server that refuses the client's certificate (or its absence) drops
                the connection during or right after the handshake (TLS 1.3) */
            error = -EACCES;
        break;
    default:
        error = -ECONNREFUSED;
        break;
    }
    if (code == CURLE_COULDNT_CONNECT && os_errno != 0)
        text = strerror((int)os_errno);
    snprintf(why, why_size, "%s", text);
    return error;
}

/* ---- requests --------------------------------------------------------------------------- */

static size_t on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    etcd_request_t *req = userp;
    return etcd_buf_append(&req->reply, data, size * nmemb) == 0 ? size * nmemb : 0;
}

/* Starts req on its endpoint; 0 or -ENOMEM. */
static int request_start(etcd_request_t *req)
{
    etcd_t *etcd = req->etcd;
    if (req->easy) {
        curl_multi_remove_handle(etcd->multi, req->easy);
        curl_easy_cleanup(req->easy);
        curl_slist_free_all(req->headers);
        req->headers = NULL;
    }
    req->reply.len = 0;
    req->errbuf[0] = 0;
    req->easy = etcd_easy_new(etcd, req->endpoint, req->path, req->body, false, on_write, req,
                              &req->headers);
    if (!req->easy)
        return -ENOMEM;
    curl_easy_setopt(req->easy, CURLOPT_PRIVATE, req);
    curl_easy_setopt(req->easy, CURLOPT_ERRORBUFFER, req->errbuf);
    return curl_multi_add_handle(etcd->multi, req->easy) == CURLM_OK ? 0 : -ENOMEM;
}

static void request_finish(etcd_request_t *req, const etcd_result_t *result)
{
    etcd_t *etcd = req->etcd;
    etcd_cb cb = req->cb;
    void *ctx = req->ctx;
    if (req->kind == ETCD_REPLY_TXN && !result->error && !result->succeeded)
        etcd->stats.txns_failed++;
    request_free(req);
    if (cb && !etcd->destroyed)
        cb(ctx, result);
}

static void add_failure(etcd_request_t *req, const char *endpoint, const char *why)
{
    size_t used = strlen(req->failures);
    snprintf(req->failures + used, sizeof(req->failures) - used, "%s%s: %s",
             used ? "; " : "", endpoint, why);
}

/* A transfer of req ended with code. */
static void request_done(etcd_request_t *req, CURLcode code)
{
    etcd_t *etcd = req->etcd;
    const char *endpoint = etcd->endpoints[req->endpoint];
    if (code == CURLE_OK) {
        long status = 0;
        curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
        etcd_reply_t reply;
        etcd_json_parse_reply(req->kind, status, req->reply.data, req->reply.len, endpoint,
                              &reply);
        /* 503: this member cannot serve now (no leader, its gRPC side down): the next one
         * may; the last one's answer is the result */
        if (status != 503 || req->tries + 1 >= etcd->endpoint_count) {
            if (status != 503)
                etcd->preferred = req->endpoint;
            request_finish(req, &reply.result);
            etcd_reply_free(&reply);
            return;
        }
        req->error = reply.result.error;
        add_failure(req, endpoint, reply.result.message);
        etcd_reply_free(&reply);
    } else {
        char why[256];
        req->error = etcd_curl_error(etcd, req->easy, code, req->errbuf, why, sizeof(why));
        add_failure(req, endpoint, why);
        LOG_DEBUG("etcd: %s%s: %s (curl %d)", endpoint, req->path, why, (int)code);
    }
    if (++req->tries < etcd->endpoint_count) {
        req->endpoint = (req->endpoint + 1) % etcd->endpoint_count;
        if (request_start(req) == 0)
            return;
    }
    etcd_result_t result = {.error = req->error};
    char message[600];
    snprintf(message, sizeof(message), "etcd %s at %s",
             req->error == -EACCES ? "refused TLS"
             : req->error == -EIO  ? "answered no"
                                   : "unreachable",
             req->failures);
    result.message = message;
    request_finish(req, &result);
}

/* After curl ran: the ended transfers, then the watches' data. */
static void process(etcd_t *etcd)
{
    etcd_dispatch_begin(etcd);
    CURLMsg *msg;
    int left;
    while (!etcd->destroyed && (msg = curl_multi_info_read(etcd->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *easy = msg->easy_handle;
        CURLcode code = msg->data.result;
        void *owner = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&owner);
        bool is_request = false;
        for (etcd_request_t *r = etcd->requests; r; r = r->next)
            if (r == owner && r->easy == easy)
                is_request = true;
        if (is_request)
            request_done(owner, code);
        else if (owner)
            etcd_watch_transfer_done(owner, code);
    }
    for (etcd_watch_t *w = etcd->watches; w && !etcd->destroyed; w = etcd_watch_next(w))
        if (etcd_watch_has_data(w))
            etcd_watch_deliver(w);
    etcd_dispatch_end(etcd);
}

static int request_new(etcd_t *etcd, const char *path, etcd_reply_kind_t kind, char *body,
                       etcd_cb cb, void *ctx, uint64_t *counter)
{
    (*counter)++;
    etcd_request_t *req = body ? calloc(1, sizeof(*req)) : NULL;
    if (!req) {
        free(body);
        return -ENOMEM;
    }
    req->etcd = etcd;
    req->path = path;
    req->kind = kind;
    req->body = body;
    req->cb = cb;
    req->ctx = ctx;
    req->endpoint = etcd->preferred;
    LIST_ADD(etcd->requests, req);
    if (request_start(req) != 0) {
        request_free(req);
        return -ENOMEM;
    }
    return 0;
}

int etcd_lease_grant(etcd_t *etcd, int64_t ttl_s, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/lease/grant", ETCD_REPLY_LEASE,
                       etcd_json_lease_body(0, ttl_s), cb, ctx, &etcd->stats.leases);
}

int etcd_lease_keepalive(etcd_t *etcd, int64_t id, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/lease/keepalive", ETCD_REPLY_KEEPALIVE,
                       etcd_json_lease_body(id, 0), cb, ctx, &etcd->stats.keepalives);
}

int etcd_lease_timetolive(etcd_t *etcd, int64_t id, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/lease/timetolive", ETCD_REPLY_LEASE,
                       etcd_json_lease_body(id, 0), cb, ctx, &etcd->stats.leases);
}

int etcd_lease_revoke(etcd_t *etcd, int64_t id, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/lease/revoke", ETCD_REPLY_PLAIN, etcd_json_lease_body(id, 0),
                       cb, ctx, &etcd->stats.leases);
}

int etcd_put(etcd_t *etcd, const char *key, const char *value, size_t value_len, int64_t lease,
             etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/kv/put", ETCD_REPLY_PLAIN,
                       etcd_json_put_body(key, value, value_len, lease), cb, ctx,
                       &etcd->stats.writes);
}

int etcd_get(etcd_t *etcd, const char *key, int prefix, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/kv/range", ETCD_REPLY_RANGE, etcd_json_range_body(key, prefix),
                       cb, ctx, &etcd->stats.ranges);
}

int etcd_delete(etcd_t *etcd, const char *key, int prefix, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/kv/deleterange", ETCD_REPLY_PLAIN,
                       etcd_json_delete_body(key, prefix), cb, ctx, &etcd->stats.writes);
}

int etcd_txn(etcd_t *etcd, const etcd_txn_t *txn, etcd_cb cb, void *ctx)
{
    return request_new(etcd, "/v3/kv/txn", ETCD_REPLY_TXN, etcd_json_txn_body(txn), cb, ctx,
                       &etcd->stats.writes);
}

void etcd_get_stats(const etcd_t *etcd, etcd_stats_t *stats)
{
    *stats = etcd->stats;
}
