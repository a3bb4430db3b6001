#include "client.h"

#include "paths.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

static int wait_fd(int fd, short events, long long deadline_ms)
{
    for (;;) {
        long long left = deadline_ms < 0 ? -1 : deadline_ms - now_ms();
        if (deadline_ms >= 0 && left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

#define CLIENT_MAX_SEND_FDS 8

/* Sends all of bytes before deadline; fds (nfds of them, 0: none) travel with the first
 * bytes that go (SCM_RIGHTS). */
static int send_all(int fd, const char *p, size_t bytes, const int *fds, int nfds,
                    long long deadline)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * CLIENT_MAX_SEND_FDS)];
    } control;
    memset(&control, 0, sizeof(control));
    if (nfds > 0) {
        struct msghdr first = {.msg_control = control.buf,
                               .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&first);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    while (bytes > 0) {
        struct iovec iov = {.iov_base = (void *)p, .iov_len = bytes};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (nfds > 0) {
            mh.msg_control = control.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        }
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            bytes -= (size_t)n;
            nfds = 0; /* the descriptors went with these bytes */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        return n < 0 ? -errno : -EPIPE;
    }
    return 0;
}

int salus_send_frame(int fd, const void *frame, size_t bytes, int timeout_ms)
{
    return send_all(fd, frame, bytes, NULL, 0, deadline_after(timeout_ms));
}

int salus_send_frame_fds(int fd, const void *frame, size_t bytes, const int *fds, int nfds,
                         int timeout_ms)
{
    if (nfds < 1 || nfds > CLIENT_MAX_SEND_FDS || bytes == 0)
        return -EINVAL;
    return send_all(fd, frame, bytes, fds, nfds, deadline_after(timeout_ms));
}

/* Reads exactly bytes; file descriptors passed with them (SCM_RIGHTS) are appended to
 * fds[*nfds] up to max_fds, the rest closed. */
static int recv_exact(int fd, void *buf, size_t bytes, long long deadline, int *fds, int max_fds,
                      int *nfds)
{
    char *p = buf;
    while (bytes > 0) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * 8)];
        } control;
        struct iovec iov = {.iov_base = p, .iov_len = bytes};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                            .msg_controllen = sizeof(control.buf)};
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n > 0) {
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                    continue;
                size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *passed = (int *)(void *)CMSG_DATA(cm);
                for (size_t i = 0; i < count; i++) {
                    if (fds && *nfds < max_fds)
                        fds[(*nfds)++] = passed[i];
                    else
                        close(passed[i]);
                }
            }
            p += n;
            bytes -= (size_t)n;
            continue;
        }
        if (n == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        return -errno;
    }
    return 0;
}

int salus_recv_msg(int fd, proto_msg_t *msg, size_t max_frame_bytes, int timeout_ms)
{
    return salus_recv_msg_fds(fd, msg, max_frame_bytes, timeout_ms, NULL, 0, NULL);
}

int salus_recv_msg_fds(int fd, proto_msg_t *msg, size_t max_frame_bytes, int timeout_ms,
                       int *fds, int max_fds, int *nfds)
{
    uint8_t header[PROTO_HEADER_BYTES];
    uint32_t len;
    int ignored = 0;
    long long deadline = deadline_after(timeout_ms);
    if (!nfds)
        nfds = &ignored;
    *nfds = 0;
    int rc = recv_exact(fd, header, sizeof(header), deadline, fds, max_fds, nfds);
    if (rc < 0)
        return rc;
    if (proto_frame_length(header, sizeof(header), max_frame_bytes, &len) != PROTO_OK)
        return -EPROTO;
    uint8_t *payload = malloc(len);
    if (!payload)
        return -ENOMEM;
    rc = recv_exact(fd, payload, len, deadline, fds, max_fds, nfds);
    if (rc == 0 && proto_decode(payload, len, msg, NULL) != PROTO_OK)
        rc = -EPROTO;
    free(payload);
    if (rc < 0) {
        for (int i = 0; fds && i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
    }
    return rc;
}

static void copy_error(const proto_msg_t *msg, char *err, size_t err_size)
{
    const char *text = "error";
    size_t n = 5;
    if (proto_get_str(&msg->body, "message", &text, &n) < 0) {
        text = "error";
        n = 5;
    }
    if (err && err_size)
        snprintf(err, err_size, "%.*s", (int)n, text);
}

int salus_client_open(salus_client_t *c, const char *path, const char *client_name,
                      int timeout_ms, char *err, size_t err_size)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    proto_msg_t reply;
    int rc;

    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->next_id = 1;
    c->timeout_ms = timeout_ms;
    c->max_frame_bytes = PROTO_DEFAULT_MAX_FRAME_BYTES;
    proto_enc_init(&c->enc);
    if (strlen(path) >= sizeof(addr.sun_path)) {
        rc = -ENAMETOOLONG;
        goto fail;
    }
    strcpy(addr.sun_path, path);
    /* a socket in a directory another user controls may be theirs: refuse it */
    rc = salus_check_socket_dir(path, err, err_size);
    if (rc < 0 && rc != -ENOENT)
        goto fail_said;
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        rc = -errno;
        goto fail;
    }
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        rc = -errno;
        goto fail;
    }
    /* and whoever listens must be root, salusd's user or this user (SO_PEERCRED) */
    struct ucred peer;
    socklen_t peer_len = sizeof(peer);
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0) {
        rc = -errno;
        goto fail;
    }
    /* in a rootless container the host's salusd shows as the overflow uid; a process
     * outside this pid namespace has pid 0, so no process of the container can pose as it */
    int outside = peer.pid == 0 && salus_uid_unmapped(peer.uid);
    if (peer.uid != 0 && peer.uid != getuid() && peer.uid != geteuid() &&
        peer.uid != (uid_t)salus_daemon_uid() && !outside) {
        snprintf(err, err_size, "the server on %s runs as uid %u, not as root, salusd's user or "
                                "you; refusing to talk to it",
                 path, (unsigned)peer.uid);
        rc = -EPERM;
        goto fail_said;
    }
    proto_enc_hello(&c->enc, PROTO_VERSION, client_name);
    rc = salus_send_frame(c->fd, c->enc.sbuf.data, c->enc.sbuf.size, timeout_ms);
    /* a server that refused the connection may have said why before closing it */
    if (rc < 0 && rc != -EPIPE && rc != -ECONNRESET)
        goto fail;
    int send_rc = rc;
    rc = salus_recv_msg(c->fd, &reply, c->max_frame_bytes, timeout_ms);
    if (rc < 0) {
        rc = send_rc < 0 ? send_rc : rc;
        goto fail;
    }
    if (reply.kind != PROTO_REPLY) {
        copy_error(&reply, err, err_size);
        proto_msg_free(&reply);
        rc = -EPROTO;
        goto fail;
    }
    if (proto_get_str_copy(&reply.body, "server", c->server, sizeof(c->server)) < 0)
        snprintf(c->server, sizeof(c->server), "unknown");
    proto_msg_free(&reply);
    return 0;

fail:
    if (err && err_size && rc != -EPROTO)
        snprintf(err, err_size, "%s", strerror(-rc));
fail_said:
    salus_client_close(c);
    return rc;
}

void salus_client_close(salus_client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    proto_enc_destroy(&c->enc);
    memset(&c->enc, 0, sizeof(c->enc));
}

msgpack_packer *salus_client_begin(salus_client_t *c, const char *op, uint32_t body_fields)
{
    proto_enc_begin(&c->enc, PROTO_REQUEST, c->next_id++, op, body_fields);
    return &c->enc.pk;
}

int salus_client_call(salus_client_t *c, proto_msg_t *reply, char *err, size_t err_size)
{
    return salus_client_call_fds(c, reply, err, err_size, c->timeout_ms, NULL, 0, NULL);
}

static int client_exchange(salus_client_t *c, const int *send_fds, int nsend,
                           proto_msg_t *reply, char *err, size_t err_size, int timeout_ms,
                           int *fds, int max_fds, int *nfds)
{
    uint64_t id = c->next_id - 1;
    int count = 0;
    proto_enc_finish(&c->enc);
    int rc = nsend > 0 ? salus_send_frame_fds(c->fd, c->enc.sbuf.data, c->enc.sbuf.size,
                                              send_fds, nsend, c->timeout_ms)
                       : salus_send_frame(c->fd, c->enc.sbuf.data, c->enc.sbuf.size,
                                          c->timeout_ms);
    if (rc < 0)
        return rc;
    rc = salus_recv_msg_fds(c->fd, reply, c->max_frame_bytes, timeout_ms, fds, max_fds, &count);
    if (rc < 0)
        return rc;
    if (reply->id != id || reply->kind == PROTO_ERROR) {
        if (reply->id != id)
            rc = -EPROTO;
        else {
            int64_t code = 0;
            proto_get_int(&reply->body, "code", &code);
            copy_error(reply, err, err_size);
            rc = code == PROTO_ENOMEM ? -ENOMEM : -EREMOTEIO;
        }
        proto_msg_free(reply);
        for (int i = 0; fds && i < count; i++)
            close(fds[i]);
        count = 0;
    }
    if (nfds)
        *nfds = count;
    return rc;
}

int salus_client_call_fds(salus_client_t *c, proto_msg_t *reply, char *err, size_t err_size,
                          int timeout_ms, int *fds, int max_fds, int *nfds)
{
    return client_exchange(c, NULL, 0, reply, err, err_size, timeout_ms, fds, max_fds, nfds);
}

int salus_client_call_passing(salus_client_t *c, const int *fds, int nfds, proto_msg_t *reply,
                              char *err, size_t err_size)
{
    return client_exchange(c, fds, nfds, reply, err, err_size, c->timeout_ms, NULL, 0, NULL);
}
