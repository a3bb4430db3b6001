/* The etcd client's watches (etcd.h): one streaming POST /v3/watch per watch, its reply a
 * sequence of {"result":{...}} objects that may arrive split or several to a chunk; each is
 * parsed as soon as it is whole and delivered. A broken stream is reported and reopened
 * after a backoff (200 ms doubling to 2 s) on the next endpoint, from the revision after the
 * last one delivered. A compacted start revision stops the watch with -ERANGE. */
#include "etcd-internal.h"

#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_BACKOFF_FIRST_MS 200
#define WATCH_BACKOFF_MAX_MS 2000

struct etcd_watch_s {
    struct etcd_watch_s *next, *prev;
    etcd_t *etcd;
    char *prefix;
    etcd_watch_cb cb;
    void *ctx;
    int64_t next_revision; /* where a new stream starts (0: from now) */
    size_t endpoint;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    char errbuf[CURL_ERROR_SIZE];
    etcd_buf_t data;       /* received, not parsed yet */
    json_tokener *tok;
    struct event *retry;
    uint32_t backoff_ms;
    bool cancelled, stopped, failed; /* failed: this stream's break was reported already */
};

static void stream_close(etcd_watch_t *watch)
{
    if (watch->easy) {
        curl_multi_remove_handle(watch->etcd->multi, watch->easy);
        curl_easy_cleanup(watch->easy);
        watch->easy = NULL;
    }
    curl_slist_free_all(watch->headers);
    watch->headers = NULL;
    free(watch->body);
    watch->body = NULL;
    watch->data.len = 0;
    if (watch->tok)
        json_tokener_reset(watch->tok);
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    etcd_watch_t *watch = userp;
    return etcd_buf_append(&watch->data, data, size * nmemb) == 0 ? size * nmemb : 0;
}

static void report(etcd_watch_t *watch, int error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The callback with error and a message (not after a cancel). */
static void report(etcd_watch_t *watch, int error, const char *fmt, ...)
{
    char message[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    LOG_DEBUG("etcd watch %s: %s", watch->prefix, message);
    if (!watch->cancelled && !watch->etcd->destroyed)
        watch->cb(watch->ctx, NULL, 0, watch->next_revision, error, message);
}

static void schedule_retry(etcd_watch_t *watch)
{
    stream_close(watch);
    if (watch->stopped || watch->cancelled)
        return;
    watch->endpoint = (watch->endpoint + 1) % watch->etcd->endpoint_count;
    struct timeval tv = {.tv_sec = watch->backoff_ms / 1000,
                         .tv_usec = (watch->backoff_ms % 1000) * 1000};
    evtimer_add(watch->retry, &tv);
    watch->backoff_ms = watch->backoff_ms * 2 > WATCH_BACKOFF_MAX_MS ? WATCH_BACKOFF_MAX_MS
                                                                     : watch->backoff_ms * 2;
}

/* Opens the stream; 0 or -ENOMEM. */
static int stream_open(etcd_watch_t *watch)
{
    etcd_t *etcd = watch->etcd;
    watch->body = etcd_json_watch_body(watch->prefix, watch->next_revision);
    if (!watch->body)
        return -ENOMEM;
    watch->errbuf[0] = 0;
    watch->failed = false;
    etcd->stats.watch_streams++;
    watch->easy = etcd_easy_new(etcd, watch->endpoint, "/v3/watch", watch->body, true, on_write,
                                watch, &watch->headers);
    if (!watch->easy)
        return -ENOMEM;
    curl_easy_setopt(watch->easy, CURLOPT_PRIVATE, watch);
    curl_easy_setopt(watch->easy, CURLOPT_ERRORBUFFER, watch->errbuf);
    return curl_multi_add_handle(etcd->multi, watch->easy) == CURLM_OK ? 0 : -ENOMEM;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    etcd_watch_t *watch = arg;
    if (stream_open(watch) != 0) {
        etcd_dispatch_begin(watch->etcd);
        report(watch, -ENOMEM, "cannot reopen the watch stream (out of memory)");
        schedule_retry(watch);
        etcd_dispatch_end(watch->etcd);
    }
}

etcd_watch_t *etcd_watch(etcd_t *etcd, const char *prefix, int64_t start_revision,
                         etcd_watch_cb cb, void *ctx)
{
    etcd_watch_t *watch = calloc(1, sizeof(*watch));
    if (!watch)
        return NULL;
    watch->etcd = etcd;
    watch->cb = cb;
    watch->ctx = ctx;
    watch->next_revision = start_revision > 0 ? start_revision : 0;
    watch->endpoint = etcd->preferred;
    watch->backoff_ms = WATCH_BACKOFF_FIRST_MS;
    watch->prefix = strdup(prefix);
    watch->tok = json_tokener_new();
    watch->retry = evtimer_new(etcd->base, on_retry, watch);
    watch->next = etcd->watches;
    if (etcd->watches)
        etcd->watches->prev = watch;
    etcd->watches = watch;
    if (!watch->prefix || !watch->tok || !watch->retry || stream_open(watch) != 0) {
        etcd_watch_free(watch);
        return NULL;
    }
    return watch;
}

void etcd_watch_free(etcd_watch_t *watch)
{
    etcd_t *etcd = watch->etcd;
    stream_close(watch);
    if (watch->prev)
        watch->prev->next = watch->next;
    else
        etcd->watches = watch->next;
    if (watch->next)
        watch->next->prev = watch->prev;
    if (watch->retry)
        event_free(watch->retry);
    if (watch->tok)
        json_tokener_free(watch->tok);
    etcd_buf_free(&watch->data);
    free(watch->prefix);
    free(watch);
}

void etcd_watch_cancel(etcd_watch_t *watch)
{
    if (!watch)
        return;
    watch->cancelled = true;
    stream_close(watch);
    evtimer_del(watch->retry);
    if (watch->etcd->dispatching == 0)
        etcd_watch_free(watch);
}

bool etcd_watch_is_cancelled(const etcd_watch_t *watch)
{
    return watch->cancelled;
}

etcd_watch_t *etcd_watch_next(const etcd_watch_t *watch)
{
    return watch->next;
}

bool etcd_watch_has_data(const etcd_watch_t *watch)
{
    return watch->data.len > 0 && !watch->cancelled;
}

void etcd_watch_transfer_done(etcd_watch_t *watch, CURLcode code)
{
    if (watch->cancelled)
        return;
    etcd_t *etcd = watch->etcd;
    const char *endpoint = etcd->endpoints[watch->endpoint];
    etcd_watch_deliver(watch); /* what came before the end */
    if (watch->cancelled || watch->stopped || !watch->easy)
        return;
    long status = 0;
    curl_easy_getinfo(watch->easy, CURLINFO_RESPONSE_CODE, &status);
    if (code == CURLE_OK && status != 200) {
        report(watch, -EIO, "etcd at %s: the watch got HTTP %ld", endpoint, status);
    } else if (code == CURLE_OK) {
        report(watch, -EIO, "etcd at %s ended the watch stream", endpoint);
    } else if (!watch->failed) {
        char why[256];
        int error = etcd_curl_error(etcd, watch->easy, code, watch->errbuf, why, sizeof(why));
        report(watch, error, "the watch stream from etcd at %s broke: %s", endpoint, why);
    }
    schedule_retry(watch);
}

/* Delivers one message of the stream; false when the stream is done with (reported). */
static bool deliver_message(etcd_watch_t *watch, json_object *root)
{
    const char *endpoint = watch->etcd->endpoints[watch->endpoint];
    json_object *result, *header, *events, *v;
    const char *error = etcd_json_error_text(root);
    if (error) {
        report(watch, -EIO, "etcd at %s: %s", endpoint, error);
        return false;
    }
    if (!json_object_object_get_ex(root, "result", &result) ||
        !json_object_is_type(result, json_type_object))
        goto bad;
    int64_t revision = 0, compact = 0;
    if (json_object_object_get_ex(result, "header", &header) &&
        (!json_object_is_type(header, json_type_object) ||
         etcd_json_int64(header, "revision", &revision) != 0))
        goto bad;
    if (etcd_json_int64(result, "compact_revision", &compact) != 0)
        goto bad;
    bool canceled = json_object_object_get_ex(result, "canceled", &v) &&
                    json_object_get_boolean(v);
    bool created = json_object_object_get_ex(result, "created", &v) && json_object_get_boolean(v);
    if (compact > 0) {
        watch->stopped = true;
        report(watch, -ERANGE, "etcd at %s: revision %" PRId64 " is compacted (up to %" PRId64
               "); read again and watch from there", endpoint, watch->next_revision, compact);
        return false;
    }
    if (canceled) {
        report(watch, -EIO, "etcd at %s cancelled the watch", endpoint);
        return false;
    }
    size_t n = 0;
    if (json_object_object_get_ex(result, "events", &events)) {
        if (!json_object_is_type(events, json_type_array))
            goto bad;
        n = json_object_array_length(events);
    }
    etcd_event_t *list = calloc(n + 1, sizeof(*list));
    if (!list) {
        report(watch, -ENOMEM, "out of memory reading a watch event");
        return false;
    }
    size_t got = 0;
    const char *why = "an event is not etcd's";
    bool ok = true;
    for (; got < n && ok; got++) {
        json_object *ev = json_object_array_get_idx(events, got), *kv, *type;
        ok = json_object_is_type(ev, json_type_object) &&
             json_object_object_get_ex(ev, "kv", &kv) &&
             etcd_json_read_kv(kv, &list[got].kv, &why) == 0;
        if (!ok)
            break;
        list[got].kind = ETCD_EVENT_PUT;
        if (json_object_object_get_ex(ev, "type", &type)) {
            const char *t = json_object_get_string(type);
            if (strcmp(t, "DELETE") == 0)
                list[got].kind = ETCD_EVENT_DELETE;
            else if (strcmp(t, "PUT") != 0)
                ok = false;
        }
    }
    if (ok) {
        if (n > 0)
            watch->next_revision = list[n - 1].kv.mod_revision + 1;
        else if (watch->next_revision == 0 || !created)
            watch->next_revision =
                revision + 1 > watch->next_revision ? revision + 1 : watch->next_revision;
        if (created) {
            watch->backoff_ms = WATCH_BACKOFF_FIRST_MS;
            watch->etcd->preferred = watch->endpoint;
        }
        watch->etcd->stats.watch_events += n;
        if (!watch->cancelled && !watch->etcd->destroyed)
            watch->cb(watch->ctx, list, n, revision, 0, "");
    }
    for (size_t i = 0; i < got && i < n; i++)
        etcd_kv_free(&list[i].kv);
    free(list);
    if (!ok) {
        report(watch, -EPROTO, "etcd at %s: a bad watch event: %s", endpoint, why);
        return false;
    }
    return true;
bad:
    report(watch, -EPROTO, "etcd at %s: a watch reply that is not etcd's", endpoint);
    return false;
}

void etcd_watch_deliver(etcd_watch_t *watch)
{
    size_t at = 0;
    while (at < watch->data.len && !watch->cancelled && !watch->etcd->destroyed) {
        json_object *obj = json_tokener_parse_ex(watch->tok, watch->data.data + at,
                                                 (int)(watch->data.len - at));
        enum json_tokener_error jerr = json_tokener_get_error(watch->tok);
        if (!obj && jerr == json_tokener_continue) {
            at = watch->data.len; /* the tokener keeps the partial object */
            break;
        }
        size_t used = json_tokener_get_parse_end(watch->tok);
        at += used ? used : watch->data.len - at;
        bool keep = obj && json_object_is_type(obj, json_type_object);
        if (keep) {
            keep = deliver_message(watch, obj);
        } else {
            report(watch, -EPROTO, "etcd at %s: a watch reply that is not JSON",
                   watch->etcd->endpoints[watch->endpoint]);
        }
        json_object_put(obj);
        if (!keep) {
            watch->failed = true;
            schedule_retry(watch); /* drops the data; after -ERANGE: stops */
            return;
        }
    }
    watch->data.len = 0;
}
