/* salusctl stats and top. salusd's stats op answers raw counters (GPU busy time,
 * iterations); rates come from two samples: stats takes them half a second apart, top
 * compares each refresh with the one before. top draws with plain ANSI escape codes on a
 * terminal in non-canonical mode (termios) and quits on q. */
#include "ctl.h"
#include "json.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#define STATS_WINDOW_US 500000

static int fetch_stats(ctl_t *ctl, proto_msg_t *reply, int quiet)
{
    salus_client_t c;
    char err[256] = "";
    if (quiet) {
        if (salus_client_open(&c, ctl->socket_path, "salusctl", ctl->timeout_ms, err,
                              sizeof(err)) < 0)
            return EXIT_DAEMON;
        salus_client_begin(&c, "stats", 0);
        int rc = salus_client_call(&c, reply, err, sizeof(err));
        salus_client_close(&c);
        return rc < 0 ? EXIT_DAEMON : EXIT_OK;
    }
    int rc = ctl_open(ctl, &c);
    if (rc != EXIT_OK)
        return rc;
    salus_client_begin(&c, "stats", 0);
    rc = ctl_finish(ctl, &c, "stats", reply, ctl->timeout_ms);
    if (rc == EXIT_OK && (!proto_get(&reply->body, "gpus") || !proto_get(&reply->body, "jobs") ||
                          proto_get(&reply->body, "gpus")->type != MSGPACK_OBJECT_ARRAY ||
                          proto_get(&reply->body, "jobs")->type != MSGPACK_OBJECT_ARRAY)) {
        fprintf(stderr, "salusctl: stats: salusd sent an incomplete reply\n");
        proto_msg_free(reply);
        return EXIT_DAEMON;
    }
    return rc;
}

static uint64_t get_u(const msgpack_object *map, const char *key)
{
    uint64_t v = 0;
    proto_get_uint(map, key, &v);
    return v;
}

static const msgpack_object *array_of(const proto_msg_t *m, const char *key)
{
    const msgpack_object *a = m ? proto_get(&m->body, key) : NULL;
    return a && a->type == MSGPACK_OBJECT_ARRAY ? a : NULL;
}

/* Utilisation of GPU index between the samples (0..1), or -1 when unknown. */
static double utilisation(const proto_msg_t *now, const proto_msg_t *prev, uint64_t index)
{
    const msgpack_object *a = array_of(now, "gpus"), *b = array_of(prev, "gpus");
    uint64_t t1 = now ? get_u(&now->body, "now_ms") : 0, t0 = prev ? get_u(&prev->body, "now_ms") : 0;
    if (!a || !b || t1 <= t0)
        return -1;
    uint64_t busy1 = 0, busy0 = 0;
    int have = 0;
    for (uint32_t i = 0; i < a->via.array.size; i++)
        if (get_u(&a->via.array.ptr[i], "index") == index &&
            proto_get_uint(&a->via.array.ptr[i], "busy_ms", &busy1) == 0)
            have |= 1;
    for (uint32_t i = 0; i < b->via.array.size; i++)
        if (get_u(&b->via.array.ptr[i], "index") == index &&
            proto_get_uint(&b->via.array.ptr[i], "busy_ms", &busy0) == 0)
            have |= 2;
    if (have != 3 || busy1 < busy0)
        return -1;
    double u = (double)(busy1 - busy0) / (double)(t1 - t0);
    return u > 1 ? 1 : u;
}

/* Iterations per second of job id between the samples, or -1 when unknown. */
static double iteration_rate(const proto_msg_t *now, const proto_msg_t *prev, uint64_t id)
{
    const msgpack_object *a = array_of(now, "jobs"), *b = array_of(prev, "jobs");
    uint64_t t1 = now ? get_u(&now->body, "now_ms") : 0, t0 = prev ? get_u(&prev->body, "now_ms") : 0;
    if (!a || !b || t1 <= t0)
        return -1;
    int64_t it1 = -1, it0 = -1;
    for (uint32_t i = 0; i < a->via.array.size; i++)
        if (get_u(&a->via.array.ptr[i], "id") == id)
            it1 = (int64_t)get_u(&a->via.array.ptr[i], "iterations");
    for (uint32_t i = 0; i < b->via.array.size; i++)
        if (get_u(&b->via.array.ptr[i], "id") == id)
            it0 = (int64_t)get_u(&b->via.array.ptr[i], "iterations");
    if (it1 < 0 || it0 < 0 || it1 < it0)
        return -1;
    return (double)(it1 - it0) * 1000.0 / (double)(t1 - t0);
}

static void print_str(FILE *out, const msgpack_object *map, const char *key, int width)
{
    const char *s;
    size_t n;
    if (proto_get_str(map, key, &s, &n) < 0) {
        s = "?";
        n = 1;
    }
    fprintf(out, "%-*.*s", width, (int)(n < (size_t)width ? n : (size_t)width), s);
}

/* The table that stats and top print; eol ends lines ("\n", or "\033[K\n" on a screen). */
static void render(FILE *out, const proto_msg_t *now, const proto_msg_t *prev, const char *eol,
                   int max_job_rows)
{
    const msgpack_object *gpus = array_of(now, "gpus"), *jobs = array_of(now, "jobs");
    fprintf(out, "%-4s %-24s %10s %10s %10s %6s %5s %5s%s", "GPU", "NAME", "TOTAL_MIB", "USED_MIB",
            "RESV_MIB", "UTIL%", "LANES", "JOBS", eol);
    for (uint32_t i = 0; gpus && i < gpus->via.array.size; i++) {
        const msgpack_object *g = &gpus->via.array.ptr[i];
        uint64_t index = get_u(g, "index");
        double u = utilisation(now, prev, index);
        char util[16] = "-";
        if (u >= 0)
            snprintf(util, sizeof(util), "%.0f", u * 100.0);
        fprintf(out, "%-4llu ", (unsigned long long)index);
        print_str(out, g, "name", 24);
        fprintf(out, " %10.0f %10.0f %10.0f %6s %5llu %5llu%s",
                (double)get_u(g, "total_bytes") / 1048576.0,
                (double)get_u(g, "used_bytes") / 1048576.0,
                (double)get_u(g, "reserved_bytes") / 1048576.0, util,
                (unsigned long long)get_u(g, "lanes"), (unsigned long long)get_u(g, "jobs"), eol);
    }
    /* TARGET_MS, P99_MS, OVER when some job is latency-critical (--latency-target) */
    int classes = 0;
    for (uint32_t k = 0; jobs && k < jobs->via.array.size; k++) {
        const msgpack_object *t = proto_get(&jobs->via.array.ptr[k], "latency_target_ms");
        classes |= t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
    }
    fprintf(out, "%s%-5s %-20s %-6s %-8s %-4s %9s %9s %9s %8s %-16s %6s%s%s", eol, "ID", "NAME",
            "UID", "STATE", "GPU", "ITER", "ITER/S", "MEM_MIB", "WAIT_S", "GROUP:RANK", "GANG_S",
            classes ? " TARGET_MS  P99_MS   OVER" : "", eol);
    int rows = 0;
    /* newest first, so that the live ones stay on a small screen */
    for (uint32_t k = jobs ? jobs->via.array.size : 0; k-- > 0 && rows < max_job_rows; rows++) {
        const msgpack_object *j = &jobs->via.array.ptr[k];
        uint64_t id = get_u(j, "id");
        double rate = iteration_rate(now, prev, id);
        char gpu[8] = "-", rate_text[16] = "-";
        const msgpack_object *g = proto_get(j, "gpu");
        if (g && g->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            snprintf(gpu, sizeof(gpu), "%llu", (unsigned long long)g->via.u64);
        if (rate >= 0)
            snprintf(rate_text, sizeof(rate_text), "%.1f", rate);
        fprintf(out, "%-5llu ", (unsigned long long)id);
        print_str(out, j, "name", 20);
        fprintf(out, " %-6llu ", (unsigned long long)get_u(j, "uid"));
        print_str(out, j, "state", 8);
        /* WAIT_S: the wait going on now (for admission or for its turn) */
        char group[96] = "-";
        const char *gname;
        size_t glen;
        if (proto_get_str(j, "group", &gname, &glen) == 0)
            snprintf(group, sizeof(group), "%.*s:%llu", (int)glen, gname,
                     (unsigned long long)get_u(j, "rank"));
        fprintf(out, " %-4s %9llu %9s %9.1f %8.1f %-16.16s %6.1f", gpu,
                (unsigned long long)get_u(j, "iterations"), rate_text,
                (double)get_u(j, "memory_bytes") / 1048576.0,
                (double)get_u(j, "wait_in_progress_ms") / 1000.0, group,
                (double)get_u(j, "gang_wait_ms") / 1000.0);
        const msgpack_object *t = proto_get(j, "latency_target_ms");
        if (classes && t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            fprintf(out, " %9llu %7.1f %6llu", (unsigned long long)t->via.u64,
                    (double)get_u(j, "request_p99_us") / 1000.0,
                    (unsigned long long)get_u(j, "requests_over_target"));
        else if (classes)
            fprintf(out, " %9s %7s %6s", "-", "-", "-");
        fputs(eol, out);
    }
}

static void print_json_number(FILE *out, double v)
{
    if (v < 0)
        fputs("null", out);
    else
        fprintf(out, "%.3f", v);
}

/* {gpus: [{...daemon's fields, utilization}], jobs: [{..., iterations_per_s}], window_ms} */
static void render_json(FILE *out, const proto_msg_t *now, const proto_msg_t *prev)
{
    const msgpack_object *gpus = array_of(now, "gpus"), *jobs = array_of(now, "jobs");
    fprintf(out, "{\"window_ms\":%llu,\"gpus\":[",
            (unsigned long long)(get_u(&now->body, "now_ms") - get_u(&prev->body, "now_ms")));
    for (uint32_t i = 0; i < gpus->via.array.size; i++) {
        const msgpack_object *g = &gpus->via.array.ptr[i];
        fputs(i ? ",{" : "{", out);
        for (uint32_t k = 0; g->type == MSGPACK_OBJECT_MAP && k < g->via.map.size; k++) {
            json_print(out, &g->via.map.ptr[k].key);
            fputc(':', out);
            json_print(out, &g->via.map.ptr[k].val);
            fputc(',', out);
        }
        fputs("\"utilization\":", out);
        print_json_number(out, utilisation(now, prev, get_u(g, "index")));
        fputc('}', out);
    }
    fputs("],\"jobs\":[", out);
    for (uint32_t i = 0; i < jobs->via.array.size; i++) {
        const msgpack_object *j = &jobs->via.array.ptr[i];
        fputs(i ? ",{" : "{", out);
        for (uint32_t k = 0; j->type == MSGPACK_OBJECT_MAP && k < j->via.map.size; k++) {
            json_print(out, &j->via.map.ptr[k].key);
            fputc(':', out);
            json_print(out, &j->via.map.ptr[k].val);
            fputc(',', out);
        }
        fputs("\"iterations_per_s\":", out);
        print_json_number(out, iteration_rate(now, prev, get_u(j, "id")));
        fputc('}', out);
    }
    fputs("]}\n", out);
}

int verb_stats(ctl_t *ctl, int argc, char **argv)
{
    proto_msg_t first, second;
    (void)argc;
    (void)argv;
    int rc = fetch_stats(ctl, &first, 0);
    if (rc != EXIT_OK)
        return rc;
    usleep(STATS_WINDOW_US);
    rc = fetch_stats(ctl, &second, 0);
    if (rc != EXIT_OK) {
        proto_msg_free(&first);
        return rc;
    }
    if (ctl->json)
        render_json(stdout, &second, &first);
    else
        render(stdout, &second, &first, "\n", 1 << 30);
    proto_msg_free(&first);
    proto_msg_free(&second);
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------ top */

static struct termios saved_termios;
static int termios_saved;
static volatile sig_atomic_t top_quit;

static void on_quit_signal(int sig)
{
    (void)sig;
    top_quit = 1;
}

static void screen_restore(void)
{
    if (termios_saved)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios);
    termios_saved = 0;
    fputs("\033[?25h\033[?1049l", stdout); /* cursor back, main screen back */
    fflush(stdout);
}

int verb_top(ctl_t *ctl, int argc, char **argv)
{
    proto_msg_t samples[2];
    int have_prev = 0, cur = 0;
    (void)argc;
    (void)argv;
    int rc = fetch_stats(ctl, &samples[cur], 0);
    if (rc != EXIT_OK)
        return rc;
    if (!isatty(STDOUT_FILENO)) { /* batch: one frame */
        render(stdout, &samples[cur], NULL, "\n", 1 << 30);
        proto_msg_free(&samples[cur]);
        return EXIT_OK;
    }
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
        struct termios raw = saved_termios;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
            termios_saved = 1;
    }
    struct sigaction sa = {.sa_handler = on_quit_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
    int daemon_lost = 0;
    while (!top_quit) {
        struct winsize ws = {.ws_row = 24, .ws_col = 80};
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0)
            ws.ws_row = 24; /* a terminal that does not say its size */
        int gpu_count = (int)(array_of(&samples[cur], "gpus")
                                  ? array_of(&samples[cur], "gpus")->via.array.size
                                  : 0);
        int job_rows = (int)ws.ws_row - gpu_count - 6;
        fputs("\033[H", stdout);
        printf("salusctl top - %s - refresh 1 s - q quits%s\033[K\n", ctl->socket_path,
               daemon_lost ? " - salusd does not answer" : "");
        render(stdout, &samples[cur], have_prev ? &samples[1 - cur] : NULL, "\033[K\n",
               job_rows > 0 ? job_rows : 0);
        fputs("\033[J", stdout);
        fflush(stdout);
        /* wait a second for a key */
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int waited = 0;
        while (!top_quit && waited < 1000) {
            int n = poll(&pfd, 1, 100);
            waited += 100;
            if (n > 0) {
                char key;
                ssize_t r = read(STDIN_FILENO, &key, 1);
                if (r == 1 && (key == 'q' || key == 'Q'))
                    top_quit = 1;
                else if (r == 0)
                    pfd.fd = -1; /* end of input: keep refreshing, stop reading */
            }
        }
        if (top_quit)
            break;
        proto_msg_t next;
        if (fetch_stats(ctl, &next, 1) != EXIT_OK) {
            daemon_lost = 1;
            continue;
        }
        daemon_lost = 0;
        if (have_prev)
            proto_msg_free(&samples[1 - cur]);
        cur = 1 - cur;
        samples[cur] = next;
        have_prev = 1;
    }
    screen_restore();
    proto_msg_free(&samples[cur]);
    if (have_prev)
        proto_msg_free(&samples[1 - cur]);
    return EXIT_OK;
}
