/* salus-hardening-test: the attacks of test_hardening_flood.sh and test_hardening_memory.sh,
 * run as an ordinary user.
 *
 *   salus-hardening-test reuse SOCKET submit|register
 *       connects and says hello, prints "pid N" (its own pid), forks and exits; the child
 *       keeps the connection, waits for a line on stdin, then submits (or registers) a job
 *       on it and asks for kill --force of that job; prints what the daemon answered
 *   salus-hardening-test conns SOCKET N          N connections that said hello
 *   salus-hardening-test submits SOCKET N        N connections, each submitting a job
 *   salus-hardening-test registers SOCKET N      N connections, each registering as a job
 *                                                (replies read for 3 s: a job may wait)
 *   salus-hardening-test status-flood SOCKET N   one connection sending N status requests
 *                                                and never reading a reply
 *   salus-hardening-test partial SOCKET N BYTES  N connections, each sending BYTES of a
 *                                                frame of BYTES + 1
 *   salus-hardening-test ps-flood SOCKET N JOBS REQUESTS GO|-
 *       submits JOBS jobs (held, so that ps lists them), opens N connections (prints
 *       "connected N"), waits for the file GO, then each connection sends REQUESTS ps
 *       requests and never reads a reply; once salusd has read them all, prints how many
 *       connections it cut off (N = 0: only the jobs)
 *   salus-hardening-test drip SOCKET|HOST:PORT INTERVAL_MS MAX_MS
 *       sends one byte of a request every INTERVAL_MS and never finishes it; prints how long
 *       the server kept the connection ("closed after N ms" or "open after N ms")
 *
 * All but reuse and drip print "ready ..." with their counts once done, then hold their
 * connections until stdin reaches EOF. */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOOL_TIMEOUT_MS 10000

static void hold_until_eof(void)
{
    char buf[256];
    while (read(STDIN_FILENO, buf, sizeof(buf)) > 0)
        ;
}

static void raise_fd_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

static int connect_raw(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* A request with one optional field: "name" (string) or "id" + "force". */
static int call(salus_client_t *c, const char *op, const char *name, uint64_t id,
                proto_msg_t *reply, char *err, size_t err_size)
{
    msgpack_packer *pk = salus_client_begin(c, op, name ? 1 : 2);
    if (name) {
        proto_pack_kv_str(pk, "name", name);
    } else {
        proto_pack_kv_uint(pk, "id", id);
        proto_pack_str(pk, "force");
        msgpack_pack_true(pk);
    }
    return salus_client_call(c, reply, err, err_size);
}

static int cmd_reuse(const char *path, const char *mode)
{
    salus_client_t c;
    char err[256] = "";
    proto_msg_t reply;
    uint64_t job_id = 0;
    int register_mode = strcmp(mode, "register") == 0;
    if (!register_mode && strcmp(mode, "submit") != 0) {
        fprintf(stderr, "reuse: mode is submit or register\n");
        return 2;
    }
    if (salus_client_open(&c, path, "hardening-test", TOOL_TIMEOUT_MS, err, sizeof(err)) < 0) {
        fprintf(stderr, "reuse: %s\n", err);
        return 1;
    }
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child > 0)
        _exit(0); /* its pid is free for the next process; the connection lives on */
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    int rc = call(&c, register_mode ? "register" : "submit", "attack", 0, &reply, err,
                  sizeof(err));
    if (rc < 0) {
        printf("%s: refused: %s\n", mode, err);
        fflush(stdout);
        return 0;
    }
    proto_get_uint(&reply.body, "job_id", &job_id);
    proto_msg_free(&reply);
    printf("%s: accepted (job %llu)\n", mode, (unsigned long long)job_id);
    fflush(stdout);
    rc = call(&c, "kill", NULL, job_id, &reply, err, sizeof(err));
    if (rc < 0) {
        printf("kill: refused: %s\n", err);
    } else {
        printf("kill: sent\n");
        proto_msg_free(&reply);
    }
    fflush(stdout);
    salus_client_close(&c);
    return 0;
}

static int cmd_conns(const char *path, long n, int submit)
{
    salus_client_t *clients = calloc((size_t)n, sizeof(*clients));
    long ok = 0, refused = 0;
    char first_refusal[256] = "", err[256];
    if (!clients)
        return 1;
    raise_fd_limit();
    for (long i = 0; i < n; i++) {
        err[0] = '\0';
        int rc = salus_client_open(&clients[ok], path, "hardening-test", TOOL_TIMEOUT_MS, err,
                                   sizeof(err));
        if (rc == 0 && submit) {
            proto_msg_t reply;
            rc = call(&clients[ok], "submit", "flood", 0, &reply, err, sizeof(err));
            if (rc == 0)
                proto_msg_free(&reply);
            else
                salus_client_close(&clients[ok]);
        }
        if (rc == 0) {
            ok++;
            continue;
        }
        refused++;
        if (!first_refusal[0])
            snprintf(first_refusal, sizeof(first_refusal), "%s",
                     err[0] ? err : strerror(-rc));
    }
    printf("ready %s %ld refused %ld first refusal: %s\n", submit ? "submitted" : "connected",
           ok, refused, first_refusal[0] ? first_refusal : "none");
    fflush(stdout);
    hold_until_eof();
    for (long i = 0; i < ok; i++)
        salus_client_close(&clients[i]);
    free(clients);
    return 0;
}

/* One process per job (salusd takes a process as one job): each child registers and
 * reports on the pipe "ok", "waiting" or "refused MESSAGE", then holds until stdin's EOF. */
static int cmd_registers(const char *path, long n)
{
    int pipefd[2];
    long registered = 0, refused = 0;
    char first_refusal[256] = "";
    if (pipe(pipefd) < 0)
        return 1;
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid > 0)
            continue;
        close(pipefd[0]);
        salus_client_t c;
        char err[256] = "", line[320];
        proto_msg_t reply;
        int rc = salus_client_open(&c, path, "hardening-test", TOOL_TIMEOUT_MS, err,
                                   sizeof(err));
        if (rc == 0) {
            msgpack_packer *pk = salus_client_begin(&c, "register", 1);
            proto_pack_kv_str(pk, "name", "flood");
            proto_enc_finish(&c.enc);
            rc = salus_send_frame(c.fd, c.enc.sbuf.data, c.enc.sbuf.size, TOOL_TIMEOUT_MS);
        }
        if (rc < 0) {
            snprintf(line, sizeof(line), "refused %s\n", err[0] ? err : strerror(-rc));
        } else if (salus_recv_msg(c.fd, &reply, PROTO_DEFAULT_MAX_FRAME_BYTES, 3000) < 0) {
            snprintf(line, sizeof(line), "waiting\n"); /* for admission */
        } else {
            const char *text = "";
            size_t len = 0;
            proto_get_str(&reply.body, "message", &text, &len);
            if (reply.kind == PROTO_REPLY)
                snprintf(line, sizeof(line), "ok\n");
            else
                snprintf(line, sizeof(line), "refused %.*s\n", (int)len, text);
            proto_msg_free(&reply);
        }
        ssize_t w = write(pipefd[1], line, strlen(line));
        (void)w;
        close(pipefd[1]);
        hold_until_eof();
        _exit(0);
    }
    close(pipefd[1]);
    FILE *results = fdopen(pipefd[0], "r");
    char line[320];
    while (results && fgets(line, sizeof(line), results)) {
        if (strncmp(line, "refused ", 8) != 0) {
            registered++;
            continue;
        }
        refused++;
        line[strcspn(line, "\n")] = '\0';
        if (!first_refusal[0])
            snprintf(first_refusal, sizeof(first_refusal), "%.200s", line + 8);
    }
    if (results)
        fclose(results);
    printf("ready registered %ld refused %ld first refusal: %s\n", registered, refused,
           first_refusal[0] ? first_refusal : "none");
    fflush(stdout);
    hold_until_eof();
    while (wait(NULL) > 0)
        ;
    return 0;
}

static int cmd_status_flood(const char *path, long n)
{
    salus_client_t c;
    char err[256] = "";
    if (salus_client_open(&c, path, "hardening-test", TOOL_TIMEOUT_MS, err, sizeof(err)) < 0) {
        fprintf(stderr, "status-flood: %s\n", err);
        return 1;
    }
    /* a batch of status requests, sent again and again */
    enum { BATCH = 1000 };
    msgpack_sbuffer batch;
    msgpack_sbuffer_init(&batch);
    proto_enc_t e;
    proto_enc_init(&e);
    for (int i = 0; i < BATCH; i++) {
        proto_enc_begin(&e, PROTO_REQUEST, (uint64_t)i + 1, "status", 0);
        proto_enc_finish(&e);
        msgpack_sbuffer_write(&batch, e.sbuf.data, e.sbuf.size);
    }
    proto_enc_destroy(&e);
    long sent = 0;
    const char *stopped = "no";
    while (sent < n) {
        size_t off = 0;
        while (off < batch.size) {
            ssize_t w = send(c.fd, batch.data + off, batch.size - off, MSG_NOSIGNAL);
            if (w <= 0) {
                stopped = "yes (the daemon closed the connection)";
                goto done;
            }
            off += (size_t)w;
        }
        sent += BATCH;
    }
done:
    printf("ready sent %ld status requests, cut off: %s\n", sent, stopped);
    fflush(stdout);
    msgpack_sbuffer_destroy(&batch);
    hold_until_eof();
    salus_client_close(&c);
    return 0;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Submits jobs on the holder connection (names of the longest kind: a long ps). */
static long submit_jobs(salus_client_t *holder, long jobs)
{
    long submitted = 0;
    char err[256], name[64];
    for (long i = 0; i < jobs; i++) {
        proto_msg_t reply;
        snprintf(name, sizeof(name), "flood-%057ld", i);
        if (call(holder, "submit", name, 0, &reply, err, sizeof(err)) == 0) {
            proto_msg_free(&reply);
            submitted++;
        }
    }
    return submitted;
}

/* Closes the connections that salusd cut (hung up) among those polled; returns how many. */
static long close_cut(salus_client_t *clients, int *open, const struct pollfd *polled,
                      const long *which, nfds_t count)
{
    long cut = 0;
    for (nfds_t k = 0; k < count; k++)
        if (polled[k].revents & (POLLERR | POLLHUP)) {
            salus_client_close(&clients[which[k]]);
            open[which[k]] = 0;
            cut++;
        }
    return cut;
}

/* The attack of a user who makes salusd queue replies: ps answers that list the user's jobs,
 * requested on many connections that never read. Once connected (and GO exists, unless it is
 * "-"), every connection sends its requests round by round (nonblocking) until it sent them
 * all or salusd cut it; then the tool waits until salusd has read every request. At most
 * 240 s in all. */
static int cmd_ps_flood(const char *path, long n, long jobs, long requests, const char *go)
{
    salus_client_t holder;
    salus_client_t *clients = calloc((size_t)n + 1, sizeof(*clients));
    long *sent = calloc((size_t)n + 1, sizeof(*sent)), *which = calloc((size_t)n + 1, sizeof(long));
    int *open = calloc((size_t)n + 1, sizeof(*open));
    struct pollfd *polled = calloc((size_t)n + 1, sizeof(*polled));
    long connected = 0, cut = 0, submitted = 0;
    long long deadline = now_ms() + 240000;
    char err[256] = "";
    int rc = 1, holding = 0;
    proto_enc_t e;
    proto_enc_init(&e);
    if (!clients || !sent || !which || !open || !polled)
        goto out;
    raise_fd_limit();
    if (salus_client_open(&holder, path, "hardening-test", TOOL_TIMEOUT_MS, err, sizeof(err)) < 0) {
        fprintf(stderr, "ps-flood: %s\n", err);
        goto out;
    }
    holding = 1;
    submitted = submit_jobs(&holder, jobs);
    for (long i = 0; i < n; i++)
        if (salus_client_open(&clients[i], path, "hardening-test", TOOL_TIMEOUT_MS, err,
                              sizeof(err)) == 0) {
            open[i] = 1;
            connected++;
        }
    printf("connected %ld\n", connected);
    fflush(stdout);
    while (strcmp(go, "-") != 0 && access(go, F_OK) != 0 && now_ms() < deadline)
        poll(NULL, 0, 20);
    proto_enc_begin(&e, PROTO_REQUEST, 1, "ps", 0);
    proto_enc_finish(&e);
    while (now_ms() < deadline) {
        nfds_t count = 0;
        for (long i = 0; i < n; i++)
            if (open[i] && sent[i] < requests) {
                polled[count] = (struct pollfd){.fd = clients[i].fd, .events = POLLOUT};
                which[count++] = i;
            }
        if (count == 0 || poll(polled, count, 1000) < 0)
            break;
        cut += close_cut(clients, open, polled, which, count);
        for (nfds_t k = 0; k < count; k++) {
            long i = which[k];
            if (!open[i] || !(polled[k].revents & POLLOUT))
                continue;
            /* one whole request at a time: a frame is never left half sent */
            ssize_t w = send(clients[i].fd, e.sbuf.data, e.sbuf.size, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w == (ssize_t)e.sbuf.size) {
                sent[i]++;
            } else if (w >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                salus_client_close(&clients[i]);
                open[i] = 0;
                cut++;
            }
        }
    }
    /* then until salusd has read every request (or cut the connection): what it queued is
     * what it holds while the tool holds its connections */
    for (long i = 0; i < n; i++) {
        int unread = 1;
        while (open[i] && unread > 0 && now_ms() < deadline) {
            struct pollfd p = {.fd = clients[i].fd, .events = 0};
            if (poll(&p, 1, 0) < 0 || ioctl(clients[i].fd, SIOCOUTQ, &unread) < 0)
                unread = 0;
            else if (p.revents & (POLLERR | POLLHUP))
                cut += close_cut(clients, open, &p, &i, 1);
            else if (unread > 0)
                poll(NULL, 0, 20);
        }
    }
    /* a round trip on the holder: salusd handles it after the requests it has read, so
     * by its answer every request was answered or its connection cut */
    proto_msg_t reply;
    salus_client_begin(&holder, "status", 0);
    if (salus_client_call(&holder, &reply, err, sizeof(err)) == 0)
        proto_msg_free(&reply);
    /* and those cut after they were looked at (to make room for others): until none hangs
     * up for 100 ms */
    while (now_ms() < deadline) {
        nfds_t count = 0;
        for (long i = 0; i < n; i++)
            if (open[i]) {
                polled[count] = (struct pollfd){.fd = clients[i].fd, .events = 0};
                which[count++] = i;
            }
        if (count == 0 || poll(polled, count, 100) <= 0)
            break;
        cut += close_cut(clients, open, polled, which, count);
    }
    printf("ready connected %ld cut off %ld (submitted %ld jobs)\n", connected, cut, submitted);
    fflush(stdout);
    hold_until_eof();
    rc = 0;
out:
    for (long i = 0; i < n && clients; i++)
        if (open && open[i])
            salus_client_close(&clients[i]);
    if (holding)
        salus_client_close(&holder);
    proto_enc_destroy(&e);
    free(clients);
    free(sent);
    free(which);
    free(open);
    free(polled);
    return rc;
}

static int cmd_partial(const char *path, long n, long bytes)
{
    int *fds = calloc((size_t)n, sizeof(*fds));
    char *payload = calloc(1, (size_t)bytes);
    long held = 0, cut = 0;
    if (!fds || !payload)
        return 1;
    raise_fd_limit();
    memset(payload, 0xc0, (size_t)bytes);
    uint32_t claimed = (uint32_t)bytes + 1;
    uint8_t header[4] = {(uint8_t)(claimed >> 24), (uint8_t)(claimed >> 16),
                         (uint8_t)(claimed >> 8), (uint8_t)claimed};
    for (long i = 0; i < n; i++) {
        int fd = connect_raw(path);
        if (fd < 0) {
            cut++;
            continue;
        }
        fds[held] = fd;
        /* a hello first: the daemon holds partial frames of clients that said it */
        proto_enc_t e;
        proto_enc_init(&e);
        proto_enc_hello(&e, PROTO_VERSION, "hardening-test");
        int rc = salus_send_frame(fd, e.sbuf.data, e.sbuf.size, TOOL_TIMEOUT_MS);
        proto_enc_destroy(&e);
        proto_msg_t reply;
        if (rc == 0)
            rc = salus_recv_msg(fd, &reply, PROTO_DEFAULT_MAX_FRAME_BYTES, TOOL_TIMEOUT_MS);
        if (rc == 0) {
            int hello_ok = reply.kind == PROTO_REPLY;
            proto_msg_free(&reply);
            rc = hello_ok ? 0 : -EPROTO;
        }
        if (rc == 0 && send(fd, header, sizeof(header), MSG_NOSIGNAL) != sizeof(header))
            rc = -EPIPE;
        for (long off = 0; rc == 0 && off < bytes;) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, TOOL_TIMEOUT_MS) <= 0 || (p.revents & (POLLERR | POLLHUP))) {
                rc = -EPIPE;
                break;
            }
            ssize_t w = send(fd, payload + off, (size_t)(bytes - off),
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN)
                rc = -EPIPE;
            else if (w > 0)
                off += w;
        }
        if (rc < 0) {
            close(fd);
            cut++;
            continue;
        }
        held++;
    }
    printf("ready holding %ld partial frames of %ld bytes, cut off %ld\n", held, bytes, cut);
    fflush(stdout);
    hold_until_eof();
    for (long i = 0; i < held; i++)
        close(fds[i]);
    free(fds);
    free(payload);
    return 0;
}


/* SOCKET (a path) or 127.0.0.1:PORT (the metrics endpoint: an HTTP request is dripped) */
static int cmd_drip(const char *target, long interval_ms, long max_ms)
{
    static const char unix_bytes[] = {0x00, 0x00, 0x10, 0x00, 0x11, 0x22, 0x33, 0x44};
    static const char http_bytes[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaa";
    const char *colon = strrchr(target, ':');
    int http = target[0] != '/' && colon;
    int fd;
    if (http) {
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
        char host[64];
        snprintf(host, sizeof(host), "%.*s", (int)(colon - target), target);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || inet_pton(AF_INET, host, &sin.sin_addr) != 1 ||
            connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
            perror("drip: connect");
            return 1;
        }
    } else {
        fd = connect_raw(target);
        if (fd < 0) {
            fprintf(stderr, "drip: connect: %s\n", strerror(-fd));
            return 1;
        }
    }
    const char *bytes = http ? http_bytes : unix_bytes;
    size_t count = http ? sizeof(http_bytes) - 1 : sizeof(unix_bytes);
    long long start = now_ms();
    for (size_t i = 0;; i = (i + 1) % count) {
        if (send(fd, bytes + i, 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        long long left = start + max_ms - now_ms();
        if (left <= 0) {
            printf("open after %lld ms\n", now_ms() - start);
            close(fd);
            return 0;
        }
        if (poll(&p, 1, (int)(left < interval_ms ? left : interval_ms)) > 0) {
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
        }
    }
    printf("closed after %lld ms\n", now_ms() - start);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "drip") == 0)
        return cmd_drip(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "reuse") == 0)
        return cmd_reuse(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "conns") == 0)
        return cmd_conns(argv[2], atol(argv[3]), 0);
    if (argc == 4 && strcmp(argv[1], "registers") == 0)
        return cmd_registers(argv[2], atol(argv[3]));
    if (argc == 4 && strcmp(argv[1], "submits") == 0)
        return cmd_conns(argv[2], atol(argv[3]), 1);
    if (argc == 4 && strcmp(argv[1], "status-flood") == 0)
        return cmd_status_flood(argv[2], atol(argv[3]));
    if (argc == 7 && strcmp(argv[1], "ps-flood") == 0)
        return cmd_ps_flood(argv[2], atol(argv[3]), atol(argv[4]), atol(argv[5]), argv[6]);
    if (argc == 5 && strcmp(argv[1], "partial") == 0)
        return cmd_partial(argv[2], atol(argv[3]), atol(argv[4]));
    fprintf(stderr, "usage: salus-hardening-test reuse SOCKET submit|register | conns SOCKET N "
                    "| submits SOCKET N | status-flood SOCKET N | partial SOCKET N BYTES "
                    "| ps-flood SOCKET N JOBS REQUESTS GO|-\n");
    return 2;
}
