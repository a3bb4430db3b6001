/* Replies queued for clients that do not read them: the books per connection, per user and
 * for all clients together, the caps on them (past a cap the connection that would hold the
 * most is cut), and freed memory handed back to the system once a burst is over. */
#include "server-internal.h"

#include "heap.h"
#include "log.h"
#include "log_limit.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* a burst: clients made salusd hold at least this much (queued replies, partial frames) */
#define SERVER_BURST_BYTES (4ull << 20)
/* memory goes back this long after what is held fell under a quarter of the burst's peak */
#define SERVER_RELEASE_DELAY_MS 500

static server_user_t *user_of(salusd_t *d, uid_t uid)
{
    server_user_t *u;
    LIST_FOREACH(u, &d->users, link)
        if (u->uid == uid)
            return u;
    return NULL;
}

unsigned server_connections_of(const salusd_t *d, uid_t uid)
{
    const server_user_t *u;
    LIST_FOREACH(u, &d->users, link)
        if (u->uid == uid)
            return u->connections;
    return 0;
}

/* Resident memory of salusd in KiB (for the log), or -1. */
static long rss_kb(void)
{
    long pages = -1, resident = -1;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void on_release(evutil_socket_t fd, short events, void *arg)
{
    salusd_t *d = arg;
    (void)fd;
    (void)events;
    long before = rss_kb();
    const char *by = heap_release();
    LOG_DEBUG("clients held up to %llu bytes (queued replies, partial frames) and %llu now: "
              "freed memory handed back (%s), rss %ld kB -> %ld kB",
              (unsigned long long)d->held_peak_bytes,
              (unsigned long long)(d->output_bytes + d->partial_frame_bytes),
              by ? by : "no allocator could", before, rss_kb());
    d->held_peak_bytes = d->output_bytes + d->partial_frame_bytes;
}

void server_output_note_held(salusd_t *d)
{
    uint64_t held = d->output_bytes + d->partial_frame_bytes;
    if (held > d->held_peak_bytes)
        d->held_peak_bytes = held;
    if (d->held_peak_bytes < SERVER_BURST_BYTES || held > d->held_peak_bytes / 4 ||
        !d->release_timer || evtimer_pending(d->release_timer, NULL))
        return;
    struct timeval delay = {.tv_sec = 0, .tv_usec = SERVER_RELEASE_DELAY_MS * 1000};
    evtimer_add(d->release_timer, &delay);
}

/* c's queued replies are now bytes: the books of c, its user and all clients follow. */
static void set_output(conn_t *c, size_t bytes)
{
    salusd_t *d = c->daemon;
    d->output_bytes = d->output_bytes - c->output_bytes + bytes;
    c->user->output_bytes = c->user->output_bytes - c->output_bytes + bytes;
    c->output_bytes = bytes;
    server_output_note_held(d);
}

static void on_output_changed(struct evbuffer *buffer, const struct evbuffer_cb_info *info,
                              void *arg)
{
    (void)info;
    set_output(arg, evbuffer_get_length(buffer));
}

void server_output_sync(conn_t *c)
{
    if (c->output_cb)
        set_output(c, evbuffer_get_length(bufferevent_get_output(c->bev)));
}

int server_output_join(conn_t *c)
{
    salusd_t *d = c->daemon;
    server_user_t *u = user_of(d, c->uid);
    if (!u) {
        u = calloc(1, sizeof(*u));
        if (!u)
            return -ENOMEM;
        u->uid = c->uid;
        LIST_INSERT_HEAD(&d->users, u, link);
    }
    c->output_cb = evbuffer_add_cb(bufferevent_get_output(c->bev), on_output_changed, c);
    if (!c->output_cb) {
        if (u->connections == 0) {
            LIST_REMOVE(u, link);
            free(u);
        }
        return -ENOMEM;
    }
    u->connections++;
    c->user = u;
    c->output_bytes = 0;
    return 0;
}

void server_output_forget(conn_t *c)
{
    if (!c->output_cb)
        return;
    evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->output_cb);
    c->output_cb = NULL;
    set_output(c, 0);
}

void server_output_leave(conn_t *c)
{
    server_user_t *u = c->user;
    server_output_forget(c);
    if (!u)
        return;
    c->user = NULL;
    if (--u->connections == 0) {
        LIST_REMOVE(u, link);
        free(u);
    }
}

/* One line a second at most, with the count of the cuts not logged before it (salusd's loop
 * is the one thread that cuts). */
static void log_cut(conn_t *v, uint64_t bytes, const char *cap_name, uint64_t cap)
{
    static salus_log_limit_t limit = SALUS_LOG_LIMIT_INIT(1, 1);
    uint64_t unlogged = 0;
    if (!salus_log_limit_take(&limit, salus_log_limit_now_ns(), &unlogged))
        return;
    LOG_WARN("closing the connection of pid %d (uid %u): it does not read its replies and "
             "would hold %llu bytes of them, the most past %s (%llu bytes); %llu connections "
             "closed for this since the last such line", (int)v->pid, (unsigned)v->uid,
             (unsigned long long)bytes, cap_name, (unsigned long long)cap,
             (unsigned long long)unlogged);
}

/* Keeps what the connections of user (NULL: of all clients) hold, with add more for c,
 * within cap: cuts the connections that hold the most. -ENOBUFS: c is the one to cut. */
static int make_room(conn_t *c, size_t add, const server_user_t *user, uint64_t cap,
                     const char *cap_name)
{
    salusd_t *d = c->daemon;
    for (;;) {
        uint64_t held = user ? user->output_bytes : d->output_bytes;
        uint64_t would_hold = c->output_bytes + add;
        if (held + add <= cap)
            return 0;
        conn_t *most = NULL, *o;
        LIST_FOREACH(o, &d->conns, link)
            if (o != c && o->output_bytes > 0 && (!user || o->user == user) &&
                (!most || o->output_bytes > most->output_bytes))
                most = o;
        if (!most && c->output_bytes == 0)
            return 0; /* one reply of any size may wait */
        if (!most || (c->output_bytes > 0 && would_hold >= most->output_bytes)) {
            log_cut(c, would_hold, cap_name, cap);
            return -ENOBUFS;
        }
        log_cut(most, most->output_bytes, cap_name, cap);
        server_conn_drop(most); /* its replies leave the books now */
    }
}

int server_output_admit(conn_t *c, size_t add)
{
    const salusd_config_t *cfg = &c->daemon->config;
    server_output_sync(c);
    /* one reply of any size may wait; more only up to the cap */
    if (c->output_bytes > 0 && c->output_bytes + add > cfg->max_output_bytes) {
        log_cut(c, c->output_bytes + add, "max-output-bytes", cfg->max_output_bytes);
        return -ENOBUFS;
    }
    if (make_room(c, add, c->user, cfg->max_output_bytes_per_uid,
                  "max-output-bytes-per-uid") < 0 ||
        make_room(c, add, NULL, cfg->max_output_bytes_total, "max-output-bytes-total") < 0)
        return -ENOBUFS;
    return 0;
}

int server_output_start(salusd_t *d)
{
    LIST_INIT(&d->users);
    d->release_timer = evtimer_new(d->base, on_release, d);
    return d->release_timer ? 0 : -ENOMEM;
}

void server_output_stop(salusd_t *d)
{
    if (d->release_timer)
        event_free(d->release_timer);
    d->release_timer = NULL;
}
