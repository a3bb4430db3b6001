/* The control socket: listening, connections, framing, the hello handshake. */
#include "access.h"
#include "frame_read.h"
#include "server-internal.h"

#include "log.h"
#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"

/* SO_PEERPIDFD (Linux 6.5) where the C library's headers predate it; its value is the
 * same on these architectures. An older kernel answers ENOPROTOOPT and the fallback runs. */
#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__i386__) || \
                               defined(__aarch64__) || defined(__arm__) || defined(__riscv))
#define SO_PEERPIDFD 77
#endif

#define SERVER_ACCEPT_PAUSE_MS 100
/* one read: at most this many bytes, and room for this many passed descriptors (the
 * kernel drops those past the room; server.c keeps SERVER_MAX_FRAME_FDS, closes the rest) */
#define SERVER_READ_BYTES 65536
#define SERVER_RECV_FDS 8
#define SERVER_REFUSAL_LOG_INTERVAL_NS 1000000000ull

static void close_fds(int *fds, int *n)
{
    for (int i = 0; i < *n; i++)
        close(fds[i]);
    *n = 0;
}

int server_observe_close(salusd_t *d, conn_slot_t owner, const conn_slot_ops_t *ops)
{
    if ((unsigned)owner >= CONN_SLOT_COUNT || !ops || !ops->on_close)
        return -EINVAL;
    if (d->slot_ops[owner])
        return -EEXIST;
    d->slot_ops[owner] = ops;
    return 0;
}

int server_conn_slot_set(conn_t *c, conn_slot_t owner, void *state)
{
    if ((unsigned)owner >= CONN_SLOT_COUNT || (state && !c->daemon->slot_ops[owner]))
        return -ENOSYS;
    c->slot[owner] = state;
    return 0;
}

LIST_HEAD(server_later_list, server_later_s);

int server_later_add(conn_t *c, conn_slot_t owner, server_later_t *later, uint64_t request_id)
{
    struct server_later_list *list = server_conn_slot(c, owner);
    if (!list) {
        list = calloc(1, sizeof(*list));
        if (!list)
            return -ENOMEM;
        LIST_INIT(list);
        int rc = server_conn_slot_set(c, owner, list);
        if (rc < 0) {
            free(list);
            return rc;
        }
    }
    later->conn = c;
    later->request_id = request_id;
    LIST_INSERT_HEAD(list, later, link);
    return 0;
}

void server_later_done(server_later_t *later)
{
    if (later->conn)
        LIST_REMOVE(later, link);
    later->conn = NULL;
}

void server_later_close(conn_t *c, void *state)
{
    (void)c;
    struct server_later_list *list = state;
    while (!LIST_EMPTY(list))
        server_later_done(LIST_FIRST(list));
    free(list);
}

const conn_slot_ops_t server_later_ops = {.on_close = server_later_close};

/* Each owner lets go of c, the upper layers first (daemon.h: conn_slot_t). Nothing more is
 * written to c meanwhile. */
static void close_slots(conn_t *c)
{
    c->closing = 1;
    for (int owner = CONN_SLOT_COUNT - 1; owner >= 0; owner--) {
        void *state = c->slot[owner];
        if (!state)
            continue;
        c->slot[owner] = NULL;
        c->daemon->slot_ops[owner]->on_close(c, state);
    }
}

static void conn_free(conn_t *c)
{
    salusd_t *d = c->daemon;
    close_slots(c);
    LIST_REMOVE(c, link);
    d->connection_count--;
    d->partial_frame_bytes -= c->input_held_bytes;
    server_output_leave(c);
    server_output_note_held(d);
    if (c->hello_deadline)
        event_free(c->hello_deadline);
    close_fds(c->queued_fds, &c->queued_nfds);
    close_fds(c->frame_fds, &c->frame_nfds);
    if (c->read_event)
        event_free(c->read_event);
    if (c->input)
        evbuffer_free(c->input);
    bufferevent_free(c->bev);
    close(c->pidfd);
    free(c);
}

/* 1 while the process of pidfd has not exited. */
static int pidfd_alive(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

int server_take_fd(conn_t *c)
{
    return c->frame_fds_taken < c->frame_nfds ? c->frame_fds[c->frame_fds_taken++] : -1;
}

int server_frame_fds(const conn_t *c)
{
    return c->frame_nfds - c->frame_fds_taken;
}

int server_dup_pidfd(const conn_t *c)
{
    if (!pidfd_alive(c->pidfd))
        return -ESRCH;
    int fd = fcntl(c->pidfd, F_DUPFD_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

/* The effective uid in /proc/PID/status, or -1. */
static long long proc_euid(pid_t pid)
{
    char path[64], line[256];
    long long real = -1, effective = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "Uid: %lld %lld", &real, &effective) == 2)
            break;
    fclose(f);
    return effective;
}

/* A pidfd of the process at the other end of fd (that process, not whichever process has
 * its pid later), or a negative errno: -ESRCH when it has exited or its pid names a process
 * of another user already. */
static int bind_peer_process(int fd, const struct ucred *cred)
{
    int pidfd = -1;
#ifdef SO_PEERPIDFD
    socklen_t len = sizeof(pidfd);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0) {
        if (pidfd_alive(pidfd))
            return pidfd;
        close(pidfd);
        return -ESRCH;
    }
    if (errno != ENOPROTOOPT && errno != EINVAL && errno != EOPNOTSUPP)
        return -errno;
    static int fallback_logged;
    if (!fallback_logged++)
        LOG_INFO("SO_PEERPIDFD is not supported (kernel older than 6.5): connections are "
                 "bound to their process with pidfd_open and a uid check through /proc");
#endif
    /* Older kernels: a pidfd of the pid; the process behind the pid must have the peer's
     * uid, read while the pidfd's process is alive, so that the pid still names it. */
    pidfd = (int)syscall(SYS_pidfd_open, cred->pid, 0);
    if (pidfd < 0)
        return -errno;
    fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    long long euid = proc_euid(cred->pid);
    if (euid != (long long)cred->uid || !pidfd_alive(pidfd)) {
        close(pidfd);
        return -ESRCH;
    }
    return pidfd;
}

static void on_event(struct bufferevent *bev, short events, void *arg);
static void conn_close_after_write(conn_t *c);

/* Writes directly when nothing is queued (so that frames carrying descriptors keep their
 * place in the stream); whatever the socket does not take is queued on the bufferevent. */
static int send_direct(conn_t *c, const char *data, size_t size, const int *fds, int nfds)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t sent = 0;
    if (evbuffer_get_length(out) == 0) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * 4)];
        } control;
        struct iovec iov = {.iov_base = (void *)data, .iov_len = size};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (nfds > 0) {
            memset(&control, 0, sizeof(control));
            mh.msg_control = control.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
        }
        ssize_t n = sendmsg(bufferevent_getfd(c->bev), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno; /* the event callback will see the broken connection */
        if (n > 0)
            sent = (size_t)n;
    } else if (nfds > 0) {
        return -EAGAIN;
    }
    if (nfds > 0 && sent == 0)
        return -EAGAIN;
    if (sent == size)
        return 0;
    /* the caps per connection, per user and for all clients (server_output.c) */
    int rc = server_output_admit(c, size - sent);
    if (rc < 0)
        return rc;
    rc = bufferevent_write(c->bev, data + sent, size - sent) < 0 ? -ENOMEM : 0;
    server_output_sync(c);
    return rc;
}

/* Closes c once the loop is back (callers may still hold it), dropping the replies it has
 * not read: they are freed now, not then, since many connections may be cut before the loop
 * is back. Nothing more is written to it: the front of its output, which the bufferevent
 * keeps frozen while it writes, may go. */
void server_conn_drop(conn_t *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    c->closing = 1;
    server_output_forget(c);
    evbuffer_unfreeze(out, 1);
    evbuffer_drain(out, evbuffer_get_length(out));
    event_del(c->read_event);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    bufferevent_setcb(c->bev, NULL, NULL, on_event, c);
    bufferevent_trigger_event(c->bev, BEV_EVENT_ERROR, BEV_TRIG_DEFER_CALLBACKS);
}

void server_send(conn_t *c, const proto_enc_t *enc)
{
    if (c->closing)
        return;
    int rc = send_direct(c, enc->sbuf.data, enc->sbuf.size, NULL, 0);
    if (rc == -ENOBUFS) { /* logged by server_output_admit */
        server_conn_drop(c);
    } else if (rc < 0) {
        LOG_DEBUG("could not send a reply to pid %d", (int)c->pid);
    }
}

int server_send_fds(conn_t *c, const proto_enc_t *enc, const int *fds, int nfds)
{
    if (nfds < 1 || nfds > 4)
        return -EINVAL;
    int rc = send_direct(c, enc->sbuf.data, enc->sbuf.size, fds, nfds);
    if (rc == -ENOBUFS) { /* logged by server_output_admit */
        server_conn_drop(c);
    } else if (rc < 0) {
        LOG_WARN("cannot pass descriptors to pid %d (%s); closing its connection", (int)c->pid,
                 strerror(-rc));
        conn_close_after_write(c);
    }
    return rc;
}

static void close_when_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_free(arg);
}

static void conn_close_after_write(conn_t *c)
{
    c->closing = 1;
    event_del(c->read_event);
    bufferevent_setcb(c->bev, NULL, close_when_written, on_event, c);
    /* Never free here: callers still hold c. With nothing pending the write callback
     * would not fire on its own, so fire it from the loop. */
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        bufferevent_trigger(c->bev, EV_WRITE,
                            BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

void server_reply_done(conn_t *c, uint64_t id)
{
    proto_enc_begin(&c->daemon->enc, PROTO_REPLY, id, "", 0);
    proto_enc_finish(&c->daemon->enc);
    server_send(c, &c->daemon->enc);
}

void server_reply_error(conn_t *c, uint64_t id, proto_error_code_t code, int close_after,
                        const char *fmt, ...)
{
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    proto_enc_error(&c->daemon->enc, id, code, message);
    server_send(c, &c->daemon->enc);
    if (close_after)
        conn_close_after_write(c);
}

static void reject_frame(conn_t *c, const char *why)
{
    c->daemon->frames_rejected++;
    LOG_DEBUG("closing pid %d: %s", (int)c->pid, why);
    server_reply_error(c, 0, PROTO_EBADFRAME, 1, "bad frame: %s", why);
}

static void handle_hello(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    uint64_t version = 0;
    if (msg->kind != PROTO_HELLO) {
        server_reply_error(c, msg->id, PROTO_ESTATE, 1, "the first message must be a hello");
        return;
    }
    if (proto_get_uint(&msg->body, "version", &version) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 1, "hello without a protocol version");
        return;
    }
    if (version != PROTO_VERSION) {
        server_reply_error(c, msg->id, PROTO_EVERSION, 1,
                           "protocol version %llu is not supported: salusd %s speaks version %d",
                           (unsigned long long)version, SALUS_VERSION, PROTO_VERSION);
        return;
    }
    if (proto_get_str_copy(&msg->body, "client", c->client, sizeof(c->client)) < 0)
        snprintf(c->client, sizeof(c->client), "unknown");
    c->hello_done = 1;
    event_free(c->hello_deadline); /* a registered job may idle for hours */
    c->hello_deadline = NULL;
    proto_enc_begin(&d->enc, PROTO_REPLY, msg->id, "", 3);
    proto_pack_kv_uint(&d->enc.pk, "version", PROTO_VERSION);
    proto_pack_kv_uint(&d->enc.pk, "minor", PROTO_VERSION_MINOR);
    proto_pack_kv_str(&d->enc.pk, "server", "salusd " SALUS_VERSION);
    proto_enc_finish(&d->enc);
    server_send(c, &d->enc);
}

/* Keeps the books of partial frames after a read; past max-partial-frame-bytes (all
 * connections together) the connection that holds part of a frame is dropped. */
static void account_input(conn_t *c)
{
    salusd_t *d = c->daemon;
    size_t held = c->closing ? 0 : evbuffer_get_length(c->input);
    d->partial_frame_bytes = d->partial_frame_bytes - c->input_held_bytes + held;
    c->input_held_bytes = held;
    server_output_note_held(d);
    if (held == 0 || d->partial_frame_bytes <= d->config.max_partial_frame_bytes)
        return;
    LOG_WARN("closing the connection of pid %d (uid %u): partial frames of all clients hold "
             "over %llu bytes (max-partial-frame-bytes)", (int)c->pid, (unsigned)c->uid,
             (unsigned long long)d->config.max_partial_frame_bytes);
    server_reply_error(c, 0, PROTO_EBUSY, 1,
                       "salusd holds too much in partly sent frames (max-partial-frame-bytes "
                       "%llu); try again", (unsigned long long)d->config.max_partial_frame_bytes);
    evbuffer_drain(c->input, evbuffer_get_length(c->input));
    close_fds(c->queued_fds, &c->queued_nfds);
    d->partial_frame_bytes -= c->input_held_bytes;
    c->input_held_bytes = 0;
    server_output_note_held(d);
}

/* Gives the frame that spans stream bytes [start, end) the descriptors that came with its
 * data; those of earlier data that no frame took are closed. */
static void claim_frame_fds(conn_t *c, uint64_t start, uint64_t end)
{
    int kept = 0;
    for (int i = 0; i < c->queued_nfds; i++) {
        uint64_t at = c->queued_fd_end[i];
        if (at > start && at <= end && c->frame_nfds < SERVER_MAX_FRAME_FDS) {
            c->frame_fds[c->frame_nfds++] = c->queued_fds[i];
        } else if (at > end) {
            c->queued_fds[kept] = c->queued_fds[i];
            c->queued_fd_end[kept++] = at;
        } else {
            close(c->queued_fds[i]);
        }
    }
    c->queued_nfds = kept;
    c->frame_fds_taken = 0;
}

static void process_input(conn_t *c)
{
    salusd_t *d = c->daemon;
    struct evbuffer *in = c->input;

    while (!c->closing) {
        frame_read_t frame;
        char bad[128];
        size_t available = evbuffer_get_length(in);
        int rc = frame_read_next(in, 1, (uint32_t)d->config.max_frame_bytes, &frame, bad,
                                 sizeof(bad));
        if (rc == FRAME_READ_MORE)
            break;
        if (rc < 0) { /* a length out of bounds, or no memory to hold the frame */
            evbuffer_drain(in, available);
            reject_frame(c, bad);
            break;
        }
        uint64_t start = c->received - available;
        claim_frame_fds(c, start, start + frame.frame_bytes);
        proto_msg_t msg;
        const char *why = "malformed";
        rc = proto_decode(frame.payload, frame.payload_bytes, &msg, &why);
        frame_read_drain(in, &frame);
        if (rc < 0) {
            close_fds(c->frame_fds, &c->frame_nfds);
            reject_frame(c, why);
            break;
        }
        if (!c->hello_done) {
            handle_hello(c, &msg);
        } else if (msg.kind != PROTO_REQUEST) {
            server_reply_error(c, msg.id, PROTO_ESTATE, 1, "expected a request, got kind %d",
                               (int)msg.kind);
        } else {
            d->requests_served++;
            d->server_ops->dispatch(c, &msg);
        }
        if (c->frame_fds_taken < c->frame_nfds)
            LOG_DEBUG("closing %d descriptors pid %d passed with a %s frame that did not take "
                      "them", c->frame_nfds - c->frame_fds_taken, (int)c->pid,
                      msg.op[0] ? msg.op : "hello");
        proto_msg_free(&msg);
        for (int i = c->frame_fds_taken; i < c->frame_nfds; i++)
            close(c->frame_fds[i]);
        c->frame_nfds = 0;
        c->frame_fds_taken = 0;
    }
    if (c->closing) { /* nothing more is read from it */
        evbuffer_drain(in, evbuffer_get_length(in));
        close_fds(c->queued_fds, &c->queued_nfds);
    }
    account_input(c);
}

/* Queues the descriptors that came with one read (all of its data ends at end); keeps at
 * most SERVER_MAX_FRAME_FDS waiting, closes the others. */
static void queue_passed_fds(conn_t *c, struct msghdr *mh, uint64_t end)
{
    int closed = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
            if (c->queued_nfds < SERVER_MAX_FRAME_FDS && !c->closing) {
                c->queued_fds[c->queued_nfds] = fd;
                c->queued_fd_end[c->queued_nfds++] = end;
            } else {
                close(fd);
                closed++;
            }
        }
    }
    if (closed || (mh->msg_flags & MSG_CTRUNC))
        LOG_DEBUG("pid %d passed more than %d descriptors with one frame; closed the others",
                  (int)c->pid, SERVER_MAX_FRAME_FDS);
}

/* The socket is readable: one recvmsg into the input buffer (never more than one whole
 * frame is held), the descriptors that came with it queued, then the frames handled. */
static void on_readable(evutil_socket_t fd, short events, void *arg)
{
    conn_t *c = arg;
    salusd_t *d = c->daemon;
    static uint8_t data[SERVER_READ_BYTES];
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * SERVER_RECV_FDS)];
    } control;
    (void)events;
    if (c->closing)
        return;
    size_t held = evbuffer_get_length(c->input);
    size_t room = PROTO_HEADER_BYTES + (size_t)d->config.max_frame_bytes - held;
    struct iovec iov = {.iov_base = data, .iov_len = room < sizeof(data) ? room : sizeof(data)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof(control.buf)};
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n > 0)
        queue_passed_fds(c, &mh, c->received + (uint64_t)n);
    if (n <= 0) { /* the peer closed (or the socket failed): whatever it sent goes too */
        conn_free(c);
        return;
    }
    c->received += (uint64_t)n;
    if (evbuffer_add(c->input, data, (size_t)n) < 0) {
        LOG_ERROR("out of memory reading from pid %d; closing its connection", (int)c->pid);
        conn_free(c);
        return;
    }
    process_input(c);
}

static void on_event(struct bufferevent *bev, short events, void *arg)
{
    conn_t *c = arg;
    (void)bev;
    if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_free(c);
}

static void on_hello_deadline(evutil_socket_t fd, short events, void *arg)
{
    conn_t *c = arg;
    (void)fd;
    (void)events;
    LOG_DEBUG("pid %d said no hello in time; closing", (int)c->pid);
    conn_free(c);
}

/* Refuses a connection with an error frame (best effort: the socket is new, so the frame
 * fits its buffer) and closes it. Refusals are logged at most once a second. */
static void refuse(salusd_t *d, int fd, const struct ucred *cred, proto_error_code_t code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void refuse(salusd_t *d, int fd, const struct ucred *cred, proto_error_code_t code,
                   const char *fmt, ...)
{
    static uint64_t last_log_ns, unlogged;
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    proto_enc_error(&d->enc, 0, code, message);
    ssize_t ignored = send(fd, d->enc.sbuf.data, d->enc.sbuf.size, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
    close(fd);
    uint64_t now = salusd_now_ns();
    if (last_log_ns && now - last_log_ns < SERVER_REFUSAL_LOG_INTERVAL_NS) {
        unlogged++;
        return;
    }
    LOG_WARN("refused a connection of pid %d (uid %u): %s (%llu more refusals not logged "
             "before this one)", (int)cred->pid, (unsigned)cred->uid, message,
             (unsigned long long)unlogged);
    last_log_ns = now;
    unlogged = 0;
}

static void on_accept(struct evconnlistener *listener, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *arg)
{
    salusd_t *d = arg;
    struct ucred cred;
    socklen_t cred_len = sizeof(cred);
    (void)listener;
    (void)sa;
    (void)socklen;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0) {
        LOG_WARN("SO_PEERCRED failed: %s; refusing the connection", strerror(errno));
        close(fd);
        return;
    }
    /* root and salusd's own user are never capped, so that they can always look in */
    int capped = cred.uid != 0 && cred.uid != geteuid();
    if (capped && d->connection_count >= (unsigned)d->config.max_connections) {
        refuse(d, fd, &cred, PROTO_EBUSY,
               "salusd serves %u connections already (max-connections)", d->connection_count);
        return;
    }
    if (capped &&
        server_connections_of(d, cred.uid) >= (unsigned)d->config.max_connections_per_uid) {
        refuse(d, fd, &cred, PROTO_EBUSY,
               "uid %u has %lld connections open already (max-connections-per-uid)",
               (unsigned)cred.uid, d->config.max_connections_per_uid);
        return;
    }
    int pidfd = bind_peer_process(fd, &cred);
    if (pidfd < 0) {
        refuse(d, fd, &cred, PROTO_EPERM,
               "salusd cannot bind this connection to its process (pid %d): %s", (int)cred.pid,
               pidfd == -ESRCH ? "it has exited" : strerror(-pidfd));
        return;
    }
    conn_t *c = calloc(1, sizeof(*c));
    struct bufferevent *bev =
        c ? bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    struct event *deadline = bev ? evtimer_new(d->base, on_hello_deadline, c) : NULL;
    struct event *reader = deadline ? event_new(d->base, fd, EV_READ | EV_PERSIST, on_readable, c)
                                    : NULL;
    struct evbuffer *input = reader ? evbuffer_new() : NULL;
    if (input) {
        c->daemon = d;
        c->bev = bev;
        c->uid = cred.uid;
    }
    if (input && server_output_join(c) < 0) {
        evbuffer_free(input);
        input = NULL;
    }
    if (!input) {
        LOG_ERROR("out of memory accepting a connection");
        if (reader)
            event_free(reader);
        if (deadline)
            event_free(deadline);
        if (bev)
            bufferevent_free(bev);
        else
            close(fd);
        free(c);
        close(pidfd);
        return;
    }
    c->read_event = reader;
    c->input = input;
    c->daemon = d;
    c->bev = bev;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->gid = cred.gid;
    c->pidfd = pidfd;
    c->hello_deadline = deadline;
    LIST_INSERT_HEAD(&d->conns, c, link);
    d->connection_count++;
    /* an absolute deadline: trickling bytes does not extend it */
    struct timeval hello_timeout = {.tv_sec = d->config.hello_timeout_ms / 1000,
                                    .tv_usec = (d->config.hello_timeout_ms % 1000) * 1000};
    evtimer_add(deadline, &hello_timeout);
    /* the bufferevent writes; on_readable reads (never more than one whole frame) */
    bufferevent_setcb(bev, NULL, NULL, on_event, c);
    bufferevent_enable(bev, EV_WRITE);
    event_add(reader, NULL);
    LOG_DEBUG("connection from pid %d uid %u", (int)cred.pid, (unsigned)cred.uid);
}

static void on_accept_resume(evutil_socket_t fd, short events, void *arg)
{
    salusd_t *d = arg;
    (void)fd;
    (void)events;
    if (d->listener)
        evconnlistener_enable(d->listener);
}

/* accept() failed (out of descriptors, most likely): pause instead of spinning on it. */
static void on_accept_error(struct evconnlistener *listener, void *arg)
{
    salusd_t *d = arg;
    int err = EVUTIL_SOCKET_ERROR();
    static uint64_t last_log_ns;
    uint64_t now = salusd_now_ns();
    if (!last_log_ns || now - last_log_ns >= SERVER_REFUSAL_LOG_INTERVAL_NS) {
        LOG_WARN("accept failed: %s (%u connections open); not accepting for %d ms",
                 strerror(err), d->connection_count, SERVER_ACCEPT_PAUSE_MS);
        last_log_ns = now;
    }
    evconnlistener_disable(listener);
    struct timeval pause = {.tv_sec = 0, .tv_usec = SERVER_ACCEPT_PAUSE_MS * 1000};
    evtimer_add(d->accept_pause, &pause);
}

/* Refuses to take over a socket on which a live server answers; removes a dead one. */
static int claim_socket_path(const char *path)
{
    int rc = server_socket_free(path);
    if (rc != 1)
        return rc;
    LOG_INFO("removing the stale socket %s (no server answers on it)", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int server_socket_free(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        LOG_ERROR("%s exists and is not a socket; refusing to replace it", path);
        return -EEXIST;
    }
    salus_client_t probe;
    char err[256] = "";
    int rc = salus_client_open(&probe, path, "salusd-probe", 2000, err, sizeof(err));
    if (rc == 0) {
        LOG_ERROR("another salusd (%s) is already running on %s; not starting", probe.server,
                  path);
        salus_client_close(&probe);
        return -EADDRINUSE;
    }
    if (rc != -ECONNREFUSED && rc != -ENOENT) {
        LOG_ERROR("something is listening on %s but does not answer as salusd (%s); not starting",
                  path, err);
        return -EADDRINUSE;
    }
    return 1;
}

int server_start(salusd_t *d, const server_ops_t *ops)
{
    d->server_ops = ops;
    const char *path = d->config.socket_path;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = -1, rc;

    if (strlen(path) >= sizeof(addr.sun_path)) {
        LOG_ERROR("socket path too long: %s", path);
        return -ENAMETOOLONG;
    }
    strcpy(addr.sun_path, path);
    rc = salus_make_socket_dir(path);
    if (rc < 0) {
        LOG_ERROR("cannot create the directory of %s: %s", path, strerror(-rc));
        return rc;
    }
    rc = claim_socket_path(path);
    if (rc < 0)
        return rc;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    mode_t old_mask = umask(0177); /* born 0600, opened up below */
    rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old_mask);
    if (rc < 0) {
        rc = -errno;
        LOG_ERROR("cannot bind %s: %s", path, strerror(-rc));
        goto fail;
    }
    d->socket_bound = 1;
    /* every local user may connect (access.c decides what each may do), or only the
     * allow-group */
    rc = access_socket_mode(d, path);
    if (rc < 0)
        goto fail;
    d->accept_pause = evtimer_new(d->base, on_accept_resume, d);
    if (d->accept_pause && server_output_start(d) == 0)
        d->listener = evconnlistener_new(d->base, on_accept, d,
                                         LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 128, fd);
    if (!d->listener) {
        rc = -errno ? -errno : -ENOMEM;
        LOG_ERROR("cannot listen on %s", path);
        goto fail;
    }
    evconnlistener_set_error_cb(d->listener, on_accept_error);
    return 0;

fail:
    if (fd >= 0)
        close(fd);
    if (d->socket_bound)
        unlink(path);
    d->socket_bound = 0;
    return rc;
}

void server_stop(salusd_t *d)
{
    while (!LIST_EMPTY(&d->conns))
        conn_free(LIST_FIRST(&d->conns));
    if (d->listener)
        evconnlistener_free(d->listener);
    d->listener = NULL;
    if (d->accept_pause)
        event_free(d->accept_pause);
    d->accept_pause = NULL;
    server_output_stop(d);
    if (d->socket_bound && unlink(d->config.socket_path) < 0)
        LOG_WARN("could not remove %s: %s", d->config.socket_path, strerror(errno));
    d->socket_bound = 0;
}
