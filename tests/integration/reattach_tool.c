/* A job that speaks the protocol itself, for the restart tests (test_restart.sh): it registers,
 * takes a chunk, and after salusd went away re-attaches when told to, honestly or with a
 * forged chunk. Also reads simgpu's books of device 0 (what the driver reports), which the
 * tests print while salusd is down.
 *
 *   salus-reattach-test used                            simgpu's used bytes of device 0
 *   salus-reattach-test claim SOCKET JOB_ID             re-attach as a job of another process
 *   salus-reattach-test bad SOCKET                      malformed re-attach requests
 *   salus-reattach-test hello SOCKET VERSION MINOR|-    a hello of that version (- : no minor)
 *   salus-reattach-test job SOCKET MIB GO_FILE MODE     MODE: honest | memfd | steal | cut |
 *                                                       lane | lane-memfd
 *
 * job: registers (persistent MIB, ephemeral 2 MiB), takes one chunk of MIB, prints
 * "admitted job=N chunk=C bytes=B", waits for salusd to go away ("lost"), then for GO_FILE to
 * exist, re-attaches and prints "reattached" or "refused: <reason>" (exit 0 either way), then
 * waits for GO_FILE.end and exits. memfd re-presents a plain memfd of the chunk's size named
 * as simgpu names its chunks; steal forks a second honest job first and re-presents that
 * job's chunk as its own (the second job prints its lines prefixed "mate "); cut sends the
 * first re-attach request, closes that connection (printing "cut") and re-attaches honestly on
 * a new one. lane (salusd --lane-memory shared) also asks for its lane's shared chunks once
 * admitted (lane_map; prints "lane chunk=C bytes=B") and re-presents them too (reattach_lane);
 * lane-memfd re-presents a plain memfd of their size, named as simgpu names its chunks, in
 * their place. */
#include "client.h"
#include "job_page.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

static const char *prefix = "";

static void sleep_ms(int ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int used(void)
{
    const char *packs = getenv("SALUS_BUILD_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/lib/simgpu/libcuda.so.1", packs ? packs : ".");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    simgpu_device_stats_fn stats = lib ? (simgpu_device_stats_fn)dlsym(lib, "simgpu_device_stats")
                                       : NULL;
    simgpu_device_stats_t s;
    if (!stats || stats(0, &s) < 0) {
        fprintf(stderr, "cannot read simgpu's books (%s)\n", path);
        return 1;
    }
    printf("%llu\n", (unsigned long long)s.used_bytes);
    return 0;
}

typedef struct held_s {
    uint64_t job_id, chunk_id, chunk_bytes;
    int page_fd, notify_fd, chunk_fd;
    uint64_t lane_chunk_id, lane_bytes; /* the lane's shared chunks (lane modes) */
    int lane_page_fd, lane_chunk_fd;    /* -1: none */
} held_t;

/* lane_map: the lane's shared chunks, into h (lane modes). */
static int lane_map(salus_client_t *c, held_t *h)
{
    char err[256] = "";
    proto_msg_t reply;
    int fds[2], nfds = 0;
    uint64_t shared = 0;
    salus_client_begin(c, "lane_map", 0);
    if (salus_client_call_fds(c, &reply, err, sizeof(err), 30000, fds, 2, &nfds) < 0) {
        fprintf(stderr, "%slane_map: %s\n", prefix, err);
        return -1;
    }
    proto_get_uint(&reply.body, "shared", &shared);
    proto_get_uint(&reply.body, "chunk_id", &h->lane_chunk_id);
    proto_get_uint(&reply.body, "bytes", &h->lane_bytes);
    proto_msg_free(&reply);
    if (!shared || nfds != 2) {
        fprintf(stderr, "%slane_map: no shared chunks\n", prefix);
        return -1;
    }
    h->lane_page_fd = fds[0];
    h->lane_chunk_fd = fds[1];
    printf("%slane chunk=%llu bytes=%llu\n", prefix, (unsigned long long)h->lane_chunk_id,
           (unsigned long long)h->lane_bytes);
    fflush(stdout);
    return 0;
}

static int admit(salus_client_t *c, const char *sock, uint64_t mib, held_t *h)
{
    char err[256];
    proto_msg_t reply;
    int fds[2], nfds = 0;
    if (salus_client_open(c, sock, "reattach-test", 5000, err, sizeof(err)) < 0) {
        fprintf(stderr, "%sconnect: %s\n", prefix, err);
        return -1;
    }
    msgpack_packer *pk = salus_client_begin(c, "register", 3);
    proto_pack_kv_str(pk, "name", "reattach-test");
    proto_pack_kv_uint(pk, "persistent_bytes", mib << 20);
    proto_pack_kv_uint(pk, "ephemeral_bytes", 2u << 20);
    if (salus_client_call_fds(c, &reply, err, sizeof(err), 30000, fds, 2, &nfds) < 0 ||
        nfds != 2) {
        fprintf(stderr, "%sregister: %s\n", prefix, err);
        return -1;
    }
    proto_get_uint(&reply.body, "job_id", &h->job_id);
    proto_msg_free(&reply);
    h->page_fd = fds[0];
    h->notify_fd = fds[1];
    pk = salus_client_begin(c, "mem_grow", 1);
    proto_pack_kv_uint(pk, "bytes", mib << 20);
    if (salus_client_call_fds(c, &reply, err, sizeof(err), 30000, &h->chunk_fd, 1, &nfds) < 0 ||
        nfds != 1) {
        fprintf(stderr, "%smem_grow: %s\n", prefix, err);
        return -1;
    }
    proto_get_uint(&reply.body, "chunk_id", &h->chunk_id);
    proto_get_uint(&reply.body, "bytes", &h->chunk_bytes);
    proto_msg_free(&reply);
    printf("%sadmitted job=%llu chunk=%llu bytes=%llu\n", prefix, (unsigned long long)h->job_id,
           (unsigned long long)h->chunk_id, (unsigned long long)h->chunk_bytes);
    fflush(stdout);
    return 0;
}

/* Waits for salusd to go, then for go_file, then re-attaches presenting chunk_fd (and, when
 * lane_fd >= 0, the lane page and lane_fd as its lane's chunks). */
static int reattach(salus_client_t *c, const char *sock, const char *go_file, const held_t *h,
                    int chunk_fd, int cut, int lane_fd)
{
    char err[256] = "", end_file[4200];
    proto_msg_t reply;
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    while (poll(&p, 1, -1) <= 0 || !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
        ;
    printf("%slost\n", prefix);
    fflush(stdout);
    while (!exists(go_file))
        sleep_ms(20);
    salus_client_close(c);
    int rc = -1;
    for (int tries = 0; tries < 200 && rc < 0; tries++) {
        rc = salus_client_open(c, sock, "reattach-test", 2000, err, sizeof(err));
        if (rc < 0)
            sleep_ms(50);
    }
    if (rc < 0) {
        fprintf(stderr, "%sreconnect: %s\n", prefix, err);
        return 1;
    }
    msgpack_packer *pk;
    int fds[2] = {h->page_fd, h->notify_fd};
    if (cut) { /* a re-attach begun, its connection closed, then the whole re-attach again */
        pk = salus_client_begin(c, "reattach", 2);
        proto_pack_kv_uint(pk, "job_id", h->job_id);
        proto_pack_kv_uint(pk, "chunks", 1);
        rc = salus_client_call_passing(c, fds, 2, &reply, err, sizeof(err));
        if (rc < 0) {
            printf("%srefused at the first try: %s\n", prefix, err[0] ? err : strerror(-rc));
            fflush(stdout);
            return 1;
        }
        proto_msg_free(&reply);
        salus_client_close(c);
        printf("%scut\n", prefix);
        fflush(stdout);
        if (salus_client_open(c, sock, "reattach-test", 2000, err, sizeof(err)) < 0) {
            fprintf(stderr, "%sreconnect: %s\n", prefix, err);
            return 1;
        }
    }
    pk = salus_client_begin(c, "reattach", 2);
    proto_pack_kv_uint(pk, "job_id", h->job_id);
    proto_pack_kv_uint(pk, "chunks", 1);
    rc = salus_client_call_passing(c, fds, 2, &reply, err, sizeof(err));
    if (rc == 0) {
        proto_msg_free(&reply);
        pk = salus_client_begin(c, "reattach_chunk", 2);
        proto_pack_kv_uint(pk, "chunk_id", h->chunk_id);
        proto_pack_kv_uint(pk, "bytes", h->chunk_bytes);
        rc = salus_client_call_passing(c, &chunk_fd, 1, &reply, err, sizeof(err));
    }
    if (rc == 0 && lane_fd >= 0) {
        proto_msg_free(&reply);
        int lane_fds[2] = {h->lane_page_fd, lane_fd};
        pk = salus_client_begin(c, "reattach_lane", 2);
        proto_pack_kv_uint(pk, "chunk_id", h->lane_chunk_id);
        proto_pack_kv_uint(pk, "bytes", h->lane_bytes);
        rc = salus_client_call_passing(c, lane_fds, 2, &reply, err, sizeof(err));
    }
    if (rc == 0) {
        proto_msg_free(&reply);
        salus_client_begin(c, "reattach_done", 0);
        rc = salus_client_call(c, &reply, err, sizeof(err));
    }
    if (rc == 0) {
        proto_msg_free(&reply);
        printf("%sreattached\n", prefix);
    } else {
        printf("%srefused: %s\n", prefix, err[0] ? err : strerror(-rc));
    }
    fflush(stdout);
    snprintf(end_file, sizeof(end_file), "%s.end", go_file);
    while (!exists(end_file))
        sleep_ms(20);
    salus_client_close(c);
    return 0;
}

static int job(const char *sock, uint64_t mib, const char *go_file, const char *mode)
{
    salus_client_t c;
    held_t h = {.lane_page_fd = -1, .lane_chunk_fd = -1};
    int pair[2] = {-1, -1}, mate_fd = -1;
    pid_t mate = -1;
    if (strcmp(mode, "steal") == 0) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
            return 1;
        mate = fork();
        if (mate == 0) { /* an honest job whose chunk the parent re-presents as its own */
            prefix = "mate ";
            close(pair[0]);
            if (admit(&c, sock, mib, &h) < 0)
                _exit(1);
            char one = 1;
            struct iovec iov = {.iov_base = &one, .iov_len = 1};
            char control[CMSG_SPACE(sizeof(int))];
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                               .msg_controllen = sizeof(control)};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &h.chunk_fd, sizeof(int));
            if (sendmsg(pair[1], &m, 0) != 1)
                _exit(1);
            _exit(reattach(&c, sock, go_file, &h, h.chunk_fd, 0, -1));
        }
        close(pair[1]);
        char one;
        struct iovec iov = {.iov_base = &one, .iov_len = 1};
        char control[CMSG_SPACE(sizeof(int))];
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                           .msg_controllen = sizeof(control)};
        if (recvmsg(pair[0], &m, 0) != 1 || !CMSG_FIRSTHDR(&m))
            return 1;
        memcpy(&mate_fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
    }
    int lane = strncmp(mode, "lane", 4) == 0;
    if (admit(&c, sock, mib, &h) < 0 || (lane && lane_map(&c, &h) < 0))
        return 1;
    int present = h.chunk_fd, lane_present = lane ? h.lane_chunk_fd : -1;
    if (strcmp(mode, "memfd") == 0) {
        present = memfd_create("simgpu-vmm-d0", MFD_CLOEXEC);
        if (present < 0 || ftruncate(present, (off_t)h.chunk_bytes) < 0)
            return 1;
    } else if (strcmp(mode, "steal") == 0) {
        present = mate_fd;
    } else if (strcmp(mode, "lane-memfd") == 0) {
        lane_present = memfd_create("simgpu-vmm-d0", MFD_CLOEXEC);
        if (lane_present < 0 || ftruncate(lane_present, (off_t)h.lane_bytes) < 0)
            return 1;
    }
    int rc = reattach(&c, sock, go_file, &h, present, strcmp(mode, "cut") == 0, lane_present);
    if (mate > 0) {
        int st = 0;
        waitpid(mate, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = 1;
    }
    return rc;
}

/* Tries to re-attach as job_id, which is some other process's. */
static int claim(const char *sock, uint64_t job_id)
{
    salus_client_t c;
    char err[256] = "";
    proto_msg_t reply;
    if (salus_client_open(&c, sock, "reattach-test", 5000, err, sizeof(err)) < 0) {
        fprintf(stderr, "connect: %s\n", err);
        return 1;
    }
    int fds[2] = {memfd_create("salus-job-page", MFD_CLOEXEC), memfd_create("x", MFD_CLOEXEC)};
    if (fds[0] < 0 || fds[1] < 0 || ftruncate(fds[0], JOB_PAGE_BYTES) < 0)
        return 1;
    msgpack_packer *pk = salus_client_begin(&c, "reattach", 2);
    proto_pack_kv_uint(pk, "job_id", job_id);
    proto_pack_kv_uint(pk, "chunks", 0);
    int rc = salus_client_call_passing(&c, fds, 2, &reply, err, sizeof(err));
    if (rc == 0) {
        proto_msg_free(&reply);
        printf("accepted\n");
    } else {
        printf("refused: %s\n", err[0] ? err : strerror(-rc));
    }
    salus_client_close(&c);
    close(fds[0]);
    close(fds[1]);
    return 0;
}

/* Malformed re-attach requests, each on a connection of its own: prints each answer. */
static int bad(const char *sock)
{
    static const char *const what[] = {"reattach without descriptors", "reattach of job 0",
                                       "reattach_chunk before reattach",
                                       "reattach_done before reattach",
                                       "reattach with a string job_id"};
    for (int i = 0; i < 5; i++) {
        salus_client_t c;
        char err[256] = "";
        proto_msg_t reply;
        if (salus_client_open(&c, sock, "reattach-test", 5000, err, sizeof(err)) < 0) {
            fprintf(stderr, "connect: %s\n", err);
            return 1;
        }
        int fds[2] = {memfd_create("x", MFD_CLOEXEC), memfd_create("y", MFD_CLOEXEC)};
        msgpack_packer *pk;
        int rc;
        switch (i) {
        case 0:
            pk = salus_client_begin(&c, "reattach", 2);
            proto_pack_kv_uint(pk, "job_id", 1);
            proto_pack_kv_uint(pk, "chunks", 0);
            rc = salus_client_call(&c, &reply, err, sizeof(err));
            break;
        case 1:
            pk = salus_client_begin(&c, "reattach", 2);
            proto_pack_kv_uint(pk, "job_id", 0);
            proto_pack_kv_uint(pk, "chunks", 0);
            rc = salus_client_call_passing(&c, fds, 2, &reply, err, sizeof(err));
            break;
        case 2:
            pk = salus_client_begin(&c, "reattach_chunk", 2);
            proto_pack_kv_uint(pk, "chunk_id", 1);
            proto_pack_kv_uint(pk, "bytes", 2u << 20);
            rc = salus_client_call_passing(&c, fds, 1, &reply, err, sizeof(err));
            break;
        case 3:
            salus_client_begin(&c, "reattach_done", 0);
            rc = salus_client_call(&c, &reply, err, sizeof(err));
            break;
        default:
            pk = salus_client_begin(&c, "reattach", 2);
            proto_pack_kv_str(pk, "job_id", "7");
            proto_pack_kv_uint(pk, "chunks", 0);
            rc = salus_client_call_passing(&c, fds, 2, &reply, err, sizeof(err));
            break;
        }
        if (rc == 0) {
            proto_msg_free(&reply);
            printf("%s: accepted\n", what[i]);
        } else {
            printf("%s: refused: %s\n", what[i], err[0] ? err : strerror(-rc));
        }
        close(fds[0]);
        close(fds[1]);
        salus_client_close(&c);
    }
    return 0;
}

/* A hello as a client of protocol version.minor says it (minor < 0: no minor field, as
 * clients before minor 1 sent it); prints the server's answer. */
static int hello(const char *sock, uint32_t version, long minor)
{
    salus_client_t c;
    char err[256] = "";
    /* connect through the client (it checks the socket's owner), then speak by hand */
    if (salus_client_open(&c, sock, "reattach-test", 5000, err, sizeof(err)) < 0) {
        fprintf(stderr, "connect: %s\n", err);
        return 1;
    }
    salus_client_close(&c);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
        return 1;
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, PROTO_HELLO, 0, "hello", minor < 0 ? 2 : 3);
    proto_pack_kv_uint(&e.pk, "version", version);
    if (minor >= 0)
        proto_pack_kv_uint(&e.pk, "minor", (uint64_t)minor);
    proto_pack_kv_str(&e.pk, "client", "reattach-test");
    proto_enc_finish(&e);
    int rc = salus_send_frame(fd, e.sbuf.data, e.sbuf.size, 5000);
    proto_enc_destroy(&e);
    proto_msg_t reply;
    if (rc < 0 || salus_recv_msg(fd, &reply, 1 << 20, 5000) < 0) {
        close(fd);
        return 1;
    }
    char message[256] = "";
    uint64_t server_minor = 0;
    if (reply.kind == PROTO_ERROR) {
        proto_get_str_copy(&reply.body, "message", message, sizeof(message));
        printf("refused: %s\n", message);
    } else {
        proto_get_uint(&reply.body, "minor", &server_minor);
        printf("accepted (server minor %llu)\n", (unsigned long long)server_minor);
    }
    proto_msg_free(&reply);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "used") == 0)
        return used();
    if (argc == 5 && strcmp(argv[1], "hello") == 0)
        return hello(argv[2], (uint32_t)strtoul(argv[3], NULL, 10),
                     strcmp(argv[4], "-") == 0 ? -1 : strtol(argv[4], NULL, 10));
    if (argc == 3 && strcmp(argv[1], "bad") == 0)
        return bad(argv[2]);
    if (argc == 4 && strcmp(argv[1], "claim") == 0)
        return claim(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 6 && strcmp(argv[1], "job") == 0)
        return job(argv[2], strtoull(argv[3], NULL, 10), argv[4], argv[5]);
    fprintf(stderr, "usage: salus-reattach-test used | claim SOCKET JOB_ID | bad SOCKET |\n"
                    "       hello SOCKET VERSION MINOR|- |\n"
                    "       job SOCKET MIB GO_FILE honest|memfd|steal|cut|lane|lane-memfd\n");
    return 2;
}
