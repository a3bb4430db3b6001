/* The etcd client's parts (etcd.h), shared by its three files: etcd.c (endpoints, libcurl's
 * multi interface on the libevent loop, requests and their failover), etcd_json.c (request
 * bodies, replies, base64) and etcd_watch.c (watch streams). */
#ifndef SALUS_SALUSD_ETCD_INTERNAL_H
#define SALUS_SALUSD_ETCD_INTERNAL_H

#include "etcd.h"

#include <curl/curl.h>
#include <json-c/json.h>
#include <stdbool.h>

/* What a request's reply holds, so that etcd_json_parse_reply knows what to read. */
typedef enum etcd_reply_kind_e {
    ETCD_REPLY_PLAIN, /* header only (put, delete, revoke) */
    ETCD_REPLY_RANGE,
    ETCD_REPLY_TXN,
    ETCD_REPLY_LEASE, /* grant, timetolive: ID, TTL */
    ETCD_REPLY_KEEPALIVE, /* the streaming gateway's {"result":{ID, TTL}} */
} etcd_reply_kind_t;

/* A growable byte buffer (a reply's body). */
typedef struct etcd_buf_s {
    char *data;
    size_t len, cap;
} etcd_buf_t;

int etcd_buf_append(etcd_buf_t *buf, const void *data, size_t len);
void etcd_buf_free(etcd_buf_t *buf);

/* One decoded reply: the result handed to the callback and the memory behind it. */
typedef struct etcd_reply_s {
    etcd_result_t result;
    etcd_kv_t *kvs;
    size_t kv_count;
    char message[512];
} etcd_reply_t;

void etcd_reply_free(etcd_reply_t *reply);

/* Fills reply from an HTTP reply (status, body) of endpoint. Always leaves reply usable:
 * result.error is 0, or -EPROTO for a reply that is not etcd's JSON, or -EIO for etcd's
 * {"error":...} or an HTTP error; message names the endpoint. */
void etcd_json_parse_reply(etcd_reply_kind_t kind, long http_status, const char *body,
                           size_t body_len, const char *endpoint, etcd_reply_t *reply);

/* Reads one kv object ({"key","value",...} in base64 and int64 strings) into kv, the
 * strings malloc'd (NUL-terminated). 0 or -EPROTO (what is wrong in why). */
int etcd_json_read_kv(json_object *obj, etcd_kv_t *kv, const char **why);
void etcd_kv_free(etcd_kv_t *kv);
/* An int64 member (a JSON string or number; absent: 0). 0 or -EPROTO. */
int etcd_json_int64(json_object *obj, const char *name, int64_t *out);
/* etcd's error text of a reply object that has "error" (a string, or an object with
 * "message"), NULL when there is no error. */
const char *etcd_json_error_text(json_object *obj);

/* Request bodies (malloc'd JSON text, NULL on -ENOMEM). prefix: range_end for the keys
 * that start with key. */
char *etcd_json_range_body(const char *key, int prefix);
char *etcd_json_put_body(const char *key, const char *value, size_t value_len, int64_t lease);
char *etcd_json_delete_body(const char *key, int prefix);
char *etcd_json_txn_body(const etcd_txn_t *txn);
char *etcd_json_lease_body(int64_t id, int64_t ttl_s); /* ID and/or TTL when nonzero */
char *etcd_json_watch_body(const char *prefix, int64_t start_revision);

/* base64 (standard alphabet, padded). encode: malloc'd, NUL-terminated, NULL on -ENOMEM.
 * decode: malloc'd, NUL-terminated, length in out_len; NULL when text is not base64 or on
 * -ENOMEM (errno says which). */
char *etcd_base64_encode(const void *data, size_t len);
char *etcd_base64_decode(const char *text, size_t text_len, size_t *out_len);

/* ---- the transport (etcd.c), used by the watches ---------------------------------------- */

typedef struct etcd_sock_s etcd_sock_t;

struct etcd_s {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;
    char *endpoints_text;  /* as given */
    char **endpoints;      /* "HOST:PORT" each */
    size_t endpoint_count;
    size_t preferred;      /* the endpoint that answered last */
    char *ca_file, *cert_file, *key_file;
    uint32_t timeout_ms;
    struct etcd_request_s *requests; /* in flight (a list) */
    struct etcd_watch_s *watches;    /* a list */
    etcd_sock_t *socks;              /* libevent events of curl's sockets (a list) */
    etcd_stats_t stats;              /* etcd_get_stats */
    int dispatching;                 /* > 0 while callbacks run: frees are deferred */
    bool destroyed;                  /* etcd_destroy came while dispatching */
};

/* A curl easy handle set up for POST url (the endpoint's /v3/path) with body, TLS, the
 * timeouts (stream: no total timeout, TCP keepalive) and the write function. NULL on
 * -ENOMEM. headers is the handle's header list, to free with the handle. */
CURL *etcd_easy_new(etcd_t *etcd, size_t endpoint, const char *path, const char *body,
                    bool stream, curl_write_callback write, void *write_ctx,
                    struct curl_slist **headers);
/* Describes a failed transfer: fills why ("Connection refused") and returns the negative
 * errno of etcd.h's list. */
int etcd_curl_error(const etcd_t *etcd, CURL *easy, CURLcode code, const char *errbuf,
                    char *why, size_t why_size);

/* etcd_watch.c's side of the transport: a watch's transfer ended (etcd.c reads the multi
 * handle's messages); the watch's buffered data is parsed after every socket action. */
struct etcd_watch_s;
void etcd_watch_transfer_done(struct etcd_watch_s *watch, CURLcode code);
void etcd_watch_deliver(struct etcd_watch_s *watch);
bool etcd_watch_has_data(const struct etcd_watch_s *watch);
struct etcd_watch_s *etcd_watch_next(const struct etcd_watch_s *watch);
/* Frees a watch (its transfer removed); for etcd_destroy and deferred frees. */
void etcd_watch_free(struct etcd_watch_s *watch);
bool etcd_watch_is_cancelled(const struct etcd_watch_s *watch);
/* etcd.c runs callbacks between these: frees that a callback asks for wait until the end. */
void etcd_dispatch_begin(etcd_t *etcd);
void etcd_dispatch_end(etcd_t *etcd);

#endif
