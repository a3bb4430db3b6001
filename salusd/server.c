/* The control socket: listening, connections, framing, the hello handshake. */
#include "access.h"
#include "daemon.h"

#include "log.h"
#include "paths.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"

static void conn_free(conn_t *c)
{
    salusd_t *d = c->daemon;
    handlers_connection_closed(c);
    LIST_REMOVE(c, link);
    d->connection_count--;
    bufferevent_free(c->bev);
    free(c);
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
    if (sent < size && bufferevent_write(c->bev, data + sent, size - sent) < 0)
        return -ENOMEM;
    return 0;
}

void server_send(conn_t *c, const proto_enc_t *enc)
{
    if (send_direct(c, enc->sbuf.data, enc->sbuf.size, NULL, 0) < 0)
        LOG_DEBUG("could not send a reply to pid %d", (int)c->pid);
}

int server_send_fds(conn_t *c, const proto_enc_t *enc, const int *fds, int nfds)
{
    if (nfds < 1 || nfds > 4)
        return -EINVAL;
    int rc = send_direct(c, enc->sbuf.data, enc->sbuf.size, fds, nfds);
    if (rc < 0) {
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
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_setcb(c->bev, NULL, close_when_written, on_event, c);
    /* Never free here: callers still hold c. With nothing pending the write callback
     * would not fire on its own, so fire it from the loop. */
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        bufferevent_trigger(c->bev, EV_WRITE,
                            BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
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
    bufferevent_set_timeouts(c->bev, NULL, NULL); /* a registered job may idle for hours */
    proto_enc_begin(&d->enc, PROTO_REPLY, msg->id, "", 2);
    proto_pack_kv_uint(&d->enc.pk, "version", PROTO_VERSION);
    proto_pack_kv_str(&d->enc.pk, "server", "salusd " SALUS_VERSION);
    proto_enc_finish(&d->enc);
    server_send(c, &d->enc);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    conn_t *c = arg;
    salusd_t *d = c->daemon;
    struct evbuffer *in = bufferevent_get_input(bev);

    while (!c->closing) {
        uint8_t header[PROTO_HEADER_BYTES];
        uint32_t len;
        size_t available = evbuffer_get_length(in);
        if (available < PROTO_HEADER_BYTES)
            return;
        evbuffer_copyout(in, header, sizeof(header));
        if (proto_frame_length(header, sizeof(header), d->config.max_frame_bytes, &len) < 0) {
            evbuffer_drain(in, available);
            reject_frame(c, "frame length is zero or over the size cap");
            return;
        }
        if (available < PROTO_HEADER_BYTES + (size_t)len)
            return;
        evbuffer_drain(in, PROTO_HEADER_BYTES);
        const uint8_t *payload = evbuffer_pullup(in, len);
        proto_msg_t msg;
        const char *why = "malformed";
        int rc = payload ? proto_decode(payload, len, &msg, &why) : PROTO_E_NOMEM;
        evbuffer_drain(in, len);
        if (rc < 0) {
            reject_frame(c, why);
            return;
        }
        if (!c->hello_done) {
            handle_hello(c, &msg);
        } else if (msg.kind != PROTO_REQUEST) {
            server_reply_error(c, msg.id, PROTO_ESTATE, 1, "expected a request, got kind %d",
                               (int)msg.kind);
        } else {
            d->requests_served++;
            handlers_dispatch(c, &msg);
        }
        proto_msg_free(&msg);
    }
}

static void on_event(struct bufferevent *bev, short events, void *arg)
{
    conn_t *c = arg;
    (void)bev;
    if (events & BEV_EVENT_TIMEOUT)
        LOG_DEBUG("pid %d said no hello in time; closing", (int)c->pid);
    if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        conn_free(c);
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
    if (d->connection_count >= (unsigned)d->config.max_connections) {
        LOG_WARN("refusing pid %d: %u connections already open", (int)cred.pid,
                 d->connection_count);
        close(fd);
        return;
    }
    conn_t *c = calloc(1, sizeof(*c));
    struct bufferevent *bev =
        c ? bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (!bev) {
        LOG_ERROR("out of memory accepting a connection");
        free(c);
        close(fd);
        return;
    }
    c->daemon = d;
    c->bev = bev;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->gid = cred.gid;
    LIST_INSERT_HEAD(&d->conns, c, link);
    d->connection_count++;
    struct timeval hello_timeout = {.tv_sec = d->config.hello_timeout_ms / 1000,
                                    .tv_usec = (d->config.hello_timeout_ms % 1000) * 1000};
    bufferevent_set_timeouts(bev, &hello_timeout, NULL);
    /* never buffer more than one whole frame from a peer */
    bufferevent_setwatermark(bev, EV_READ, 0, PROTO_HEADER_BYTES + d->config.max_frame_bytes);
    bufferevent_setcb(bev, on_read, NULL, on_event, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    LOG_DEBUG("connection from pid %d uid %u", (int)cred.pid, (unsigned)cred.uid);
}

/* Refuses to take over a socket on which a live server answers; removes a dead one. */
static int claim_socket_path(const char *path)
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
    LOG_INFO("removing the stale socket %s (no server answers on it)", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int server_start(salusd_t *d)
{
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
    d->listener = evconnlistener_new(d->base, on_accept, d,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 128, fd);
    if (!d->listener) {
        rc = -errno ? -errno : -ENOMEM;
        LOG_ERROR("cannot listen on %s", path);
        goto fail;
    }
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
    if (d->socket_bound && unlink(d->config.socket_path) < 0)
        LOG_WARN("could not remove %s: %s", d->config.socket_path, strerror(errno));
    d->socket_bound = 0;
}
