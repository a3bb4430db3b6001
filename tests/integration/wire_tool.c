/* salus-wire-test: drives salusd's control socket from integration tests.
 *
 *   salus-wire-test fuzz SOCKET FRAMES SEED   send FRAMES random and mutated frames,
 *                                             one connection per case; print counts
 *   salus-wire-test hello SOCKET VERSION      say hello with VERSION; print the answer
 *                                             (exit 0 accepted, 3 refused)
 *   salus-wire-test register SOCKET NAME      register as a job; print its id; hold the
 *                                             connection until stdin reaches EOF */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static unsigned seed;

static unsigned rnd(unsigned n)
{
    return n ? (unsigned)rand_r(&seed) % n : 0;
}

static int connect_to(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads until the daemon closes (or 2 s pass); returns the bytes received. */
static size_t drain(int fd)
{
    char buf[4096];
    size_t total = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0)
            break;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        total += (size_t)n;
    }
    return total;
}

static void put_frame(msgpack_sbuffer *out, const void *payload, size_t n, uint32_t claimed)
{
    uint8_t hdr[4] = {(uint8_t)(claimed >> 24), (uint8_t)(claimed >> 16), (uint8_t)(claimed >> 8),
                      (uint8_t)claimed};
    msgpack_sbuffer_write(out, (const char *)hdr, 4);
    if (n)
        msgpack_sbuffer_write(out, payload, n);
}

static void valid_hello(msgpack_sbuffer *out, uint32_t version)
{
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_hello(&e, version, "wire-test");
    msgpack_sbuffer_write(out, e.sbuf.data, e.sbuf.size);
    proto_enc_destroy(&e);
}

/* A structurally valid message with random kind, op and body value types. */
static void random_message(msgpack_sbuffer *out)
{
    static const char *const ops[] = {"status", "ps", "register", "hello", "", "x\x01y", "kill"};
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, (proto_kind_t)(1 + rnd(4)), rnd(1000), ops[rnd(7)], 2);
    proto_pack_str(&e.pk, rnd(2) ? "name" : "version");
    switch (rnd(4)) {
    case 0: msgpack_pack_uint64(&e.pk, rnd(5)); break;
    case 1: proto_pack_str(&e.pk, "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789"); break;
    case 2: msgpack_pack_array(&e.pk, 0); break;
    default: msgpack_pack_nil(&e.pk); break;
    }
    proto_pack_kv_int(&e.pk, "priority", -(int64_t)rnd(10));
    proto_enc_finish(&e);
    msgpack_sbuffer_write(out, e.sbuf.data, e.sbuf.size);
    proto_enc_destroy(&e);
}

static void mutate(char *data, size_t from, size_t n)
{
    if (n <= from)
        return;
    int flips = 1 + (int)rnd(4);
    for (int i = 0; i < flips; i++)
        data[from + rnd((unsigned)(n - from))] ^= (char)(1u << rnd(8));
}

static void build_case(msgpack_sbuffer *out, unsigned kind)
{
    uint8_t junk[512];
    size_t n;
    switch (kind) {
    case 0: /* random length prefix and random bytes */
        n = rnd(64);
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)rnd(256);
        put_frame(out, junk, n, rnd(4) == 0 ? 0 : (uint32_t)rand_r(&seed));
        break;
    case 1: /* right length, random payload */
        n = 1 + rnd(sizeof(junk));
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)rnd(256);
        put_frame(out, junk, n, (uint32_t)n);
        break;
    case 2: /* bit-flipped hello */
        valid_hello(out, PROTO_VERSION);
        mutate(out->data, 0, out->size);
        break;
    case 3: { /* hello, then a bit-flipped request */
        valid_hello(out, PROTO_VERSION);
        size_t start = out->size;
        random_message(out);
        mutate(out->data, start + 4, out->size);
        break;
    }
    case 4: /* hello, then several well-formed messages of random kinds and types */
        valid_hello(out, PROTO_VERSION);
        for (unsigned i = 0, m = 1 + rnd(5); i < m; i++)
            random_message(out);
        break;
    case 5: { /* a frame that promises more than it sends */
        valid_hello(out, PROTO_VERSION);
        size_t start = out->size;
        random_message(out);
        out->size = start + 4 + rnd((unsigned)(out->size - start - 4));
        break;
    }
    case 6: { /* deep nesting and counts that lie */
        valid_hello(out, PROTO_VERSION);
        n = 8 + rnd(64);
        uint8_t shape = rnd(2) ? 0x91 : 0x81;
        memset(junk, shape, n);
        junk[n - 1] = 0xc0;
        if (rnd(2)) {
            junk[0] = (uint8_t)(rnd(2) ? 0xdd : 0xdf);
            junk[1] = junk[2] = junk[3] = junk[4] = 0xff;
        }
        put_frame(out, junk, n, (uint32_t)n);
        break;
    }
    case 7: /* wrong protocol version */
        valid_hello(out, PROTO_VERSION + 1 + rnd(100));
        break;
    case 8: /* header over the cap, possibly with a large body following */
        put_frame(out, NULL, 0, (1u << 20) + 1 + rnd(1000));
        n = rnd(sizeof(junk));
        memset(junk, 0xaa, n);
        msgpack_sbuffer_write(out, (const char *)junk, n);
        break;
    default: /* a valid status request followed by garbage */
        valid_hello(out, PROTO_VERSION);
        random_message(out);
        n = 1 + rnd(32);
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)rnd(256);
        msgpack_sbuffer_write(out, (const char *)junk, n);
        break;
    }
}

static int cmd_fuzz(const char *path, long frames, unsigned s)
{
    long sent = 0, answered = 0, failed_connects = 0;
    seed = s;
    for (long i = 0; i < frames; i++) {
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        build_case(&out, (unsigned)(i % 10));
        int fd = connect_to(path);
        if (fd < 0) {
            failed_connects++;
            msgpack_sbuffer_destroy(&out);
            if (failed_connects > 10) {
                fprintf(stderr, "wire-test: cannot connect to %s: %s\n", path, strerror(errno));
                return 1;
            }
            continue;
        }
        ssize_t w = send(fd, out.data, out.size, MSG_NOSIGNAL);
        (void)w;
        shutdown(fd, SHUT_WR);
        if (drain(fd) > 0)
            answered++;
        close(fd);
        msgpack_sbuffer_destroy(&out);
        sent++;
    }
    printf("sent=%ld answered=%ld failed_connects=%ld\n", sent, answered, failed_connects);
    return failed_connects > 0 ? 1 : 0;
}

static int cmd_hello(const char *path, uint32_t version)
{
    int fd = connect_to(path);
    if (fd < 0) {
        perror("connect");
        return 1;
    }
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    valid_hello(&out, version);
    salus_send_frame(fd, out.data, out.size, 2000);
    msgpack_sbuffer_destroy(&out);
    proto_msg_t msg;
    int rc = salus_recv_msg(fd, &msg, PROTO_DEFAULT_MAX_FRAME_BYTES, 2000);
    if (rc < 0) {
        printf("no answer: %s\n", strerror(-rc));
        close(fd);
        return 1;
    }
    char text[256] = "";
    proto_get_str_copy(&msg.body, msg.kind == PROTO_ERROR ? "message" : "server", text,
                       sizeof(text));
    printf("%s: %s\n", msg.kind == PROTO_ERROR ? "refused" : "accepted", text);
    int refused = msg.kind == PROTO_ERROR;
    proto_msg_free(&msg);
    /* a refused connection is closed by the daemon */
    if (refused) {
        char b;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int closed = poll(&p, 1, 2000) == 1 && recv(fd, &b, 1, 0) == 0;
        printf("closed=%d\n", closed);
    }
    close(fd);
    return refused ? 3 : 0;
}

static int cmd_register(const char *path, const char *name)
{
    salus_client_t c;
    char err[256];
    proto_msg_t reply;
    if (salus_client_open(&c, path, "wire-test", 2000, err, sizeof(err)) < 0) {
        fprintf(stderr, "wire-test: %s\n", err);
        return 1;
    }
    msgpack_packer *pk = salus_client_begin(&c, "register", 1);
    proto_pack_kv_str(pk, "name", name);
    if (salus_client_call(&c, &reply, err, sizeof(err)) < 0) {
        fprintf(stderr, "wire-test: register: %s\n", err);
        salus_client_close(&c);
        return 1;
    }
    uint64_t id = 0;
    proto_get_uint(&reply.body, "job_id", &id);
    proto_msg_free(&reply);
    printf("job_id=%llu\n", (unsigned long long)id);
    fflush(stdout);
    char b[64];
    while (read(STDIN_FILENO, b, sizeof(b)) > 0)
        ;
    salus_client_close(&c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "fuzz") == 0)
        return cmd_fuzz(argv[2], atol(argv[3]), (unsigned)atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "hello") == 0)
        return cmd_hello(argv[2], (uint32_t)atol(argv[3]));
    if (argc == 4 && strcmp(argv[1], "register") == 0)
        return cmd_register(argv[2], argv[3]);
    fprintf(stderr, "usage: salus-wire-test fuzz SOCKET FRAMES SEED | hello SOCKET VERSION | "
                    "register SOCKET NAME\n");
    return 2;
}
