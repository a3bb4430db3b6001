/* tcp_floor: the wire's floor for benchmarks/ps-allreduce.sh, plain TCP sockets between two
 * network namespaces, nothing of salus.
 *     salus-tcp-floor --listen PORT
 * accepts connections until killed; each connection is read to its end (the bytes dropped),
 * then answered with one byte and closed.
 *     salus-tcp-floor --connect IP --port PORT --streams K --bytes S --rounds R
 * per round opens K connections, then (the clock starts) sends S bytes split over the K
 * streams, one thread each, shuts each down for writing and waits for its byte (the clock
 * stops when the last one came: every byte was read by the other side); after one untimed
 * warm-up round prints
 *     tcp_floor streams=K bytes=S rounds=R median_ms=X */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TCP_FLOOR_BUF (1u << 20)
#define TCP_FLOOR_MAX_STREAMS 64

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char *buf = malloc(TCP_FLOOR_BUF);
    ssize_t got;
    while (buf && ((got = read(fd, buf, TCP_FLOOR_BUF)) > 0 || (got < 0 && errno == EINTR)))
        ;
    char one = 1;
    if (write(fd, &one, 1) != 1)
        perror("tcp_floor: write");
    close(fd);
    free(buf);
    return NULL;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), on = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, TCP_FLOOR_MAX_STREAMS) < 0) {
        perror("tcp_floor: listen");
        return 1;
    }
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("tcp_floor: accept");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)c) != 0) {
            close(c);
            continue;
        }
        pthread_detach(t);
    }
}

typedef struct stream_s {
    int fd;
    uint64_t bytes;
    const char *buf;
    int rc;
} stream_t;

static void *send_stream(void *arg)
{
    stream_t *s = arg;
    uint64_t left = s->bytes;
    while (left > 0) {
        ssize_t put = write(s->fd, s->buf, left < TCP_FLOOR_BUF ? left : TCP_FLOOR_BUF);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0) {
            s->rc = -1;
            return NULL;
        }
        left -= (uint64_t)put;
    }
    char one;
    shutdown(s->fd, SHUT_WR);
    s->rc = read(s->fd, &one, 1) == 1 ? 0 : -1;
    return NULL;
}

static int round_once(const struct sockaddr_in *to, int streams, uint64_t bytes, const char *buf,
                      double *ms)
{
    stream_t s[TCP_FLOOR_MAX_STREAMS];
    pthread_t th[TCP_FLOOR_MAX_STREAMS];
    int rc = 0;
    for (int i = 0; i < streams; i++) {
        s[i] = (stream_t){.fd = socket(AF_INET, SOCK_STREAM, 0),
                          .bytes = bytes / (uint64_t)streams +
                                   ((uint64_t)i < bytes % (uint64_t)streams),
                          .buf = buf};
        if (s[i].fd < 0 || connect(s[i].fd, (const struct sockaddr *)to, sizeof(*to)) < 0) {
            perror("tcp_floor: connect");
            for (int j = 0; j <= i; j++)
                if (s[j].fd >= 0)
                    close(s[j].fd);
            return -1;
        }
    }
    double t0 = now_ms();
    for (int i = 0; i < streams; i++)
        if (pthread_create(&th[i], NULL, send_stream, &s[i]) != 0)
            s[i].rc = -2;
    for (int i = 0; i < streams; i++) {
        if (s[i].rc != -2)
            pthread_join(th[i], NULL);
        rc |= s[i].rc;
        close(s[i].fd);
    }
    *ms = now_ms() - t0;
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *ip = NULL;
    int port = 0, listen_port = 0, streams = 1, rounds = 5;
    uint64_t bytes = 1 << 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
            listen_port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--connect") == 0 && i + 1 < argc)
            ip = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--streams") == 0 && i + 1 < argc)
            streams = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else
            goto usage;
    }
    if (listen_port > 0 && listen_port < 65536 && !ip)
        return listen_on(listen_port);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!ip || port <= 0 || port > 65535 || inet_pton(AF_INET, ip, &to.sin_addr) != 1 ||
        streams < 1 || streams > TCP_FLOOR_MAX_STREAMS || rounds < 1 || bytes == 0)
        goto usage;
    char *buf = calloc(1, TCP_FLOOR_BUF);
    double *ms = calloc((size_t)rounds, sizeof(double));
    if (!buf || !ms) {
        fprintf(stderr, "tcp_floor: out of memory\n");
        return 1;
    }
    for (int r = -1; r < rounds; r++) { /* r = -1: the warm-up */
        double took;
        if (round_once(&to, streams, bytes, buf, &took) < 0) {
            fprintf(stderr, "tcp_floor: round %d failed\n", r);
            return 1;
        }
        if (r >= 0)
            ms[r] = took;
    }
    qsort(ms, (size_t)rounds, sizeof(double), cmp_double);
    double median = rounds % 2 ? ms[rounds / 2] : (ms[rounds / 2 - 1] + ms[rounds / 2]) / 2;
    printf("tcp_floor streams=%d bytes=%llu rounds=%d median_ms=%.3f\n", streams,
           (unsigned long long)bytes, rounds, median);
    free(buf);
    free(ms);
    return 0;
usage:
    fprintf(stderr, "usage: tcp_floor --listen PORT | --connect IP --port PORT [--streams K] "
                    "[--bytes S] [--rounds R]\n");
    return 2;
}
