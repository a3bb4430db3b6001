/* ps-tool: runs a script of parameter-server calls (salus_ps.h) given on its command line,
 * one line of output per step, for the integration tests. Run it as a rank of a group under
 * the shim (salusctl run --group G --world N --rank R -- ps-tool ...).
 *
 * Grammar (steps in order; the table is the one the last `open` opened):
 *   open NAME COUNT RULE SYNC      -> open name=NAME count=COUNT rc=0
 *   opens NAME COUNT RULE SYNC SERVERS  the same on the server set SERVERS ("n1,n2,..."; the
 *                                  replica count comes from SALUS_PS_REPLICAS or the daemon)
 *   push OFF N VALUE               n values, all VALUE, to [OFF, OFF + N)
 *                                  -> push off=OFF n=N clock=C rc=0
 *   pushk VALUE KEY[,KEY...]       VALUE to each key   -> pushk n=K clock=C rc=0
 *   clock                          -> clock now=C rc=0
 *   pull OFF N                     -> pull clock=C done=D done_at_request=A waited=W
 *                                     waited_ns=T sum=S first=F last=L
 *   dump                           the last pull's values, bit for bit (hex of each float):
 *                                  -> dump n=N crc=X values=v0,v1,...  (the first 64)
 *   close                          -> close rc=0
 *   fstate                         a federated table's open round (salus_ps_fed_state)
 *                                  -> fstate round=R selected=S pushed=P clients=N
 *                                     per_round=K epochs=E
 *   fpush ROUND SAMPLES WORK VALUE the whole model, element k = VALUE * (k + 1) in float,
 *                                  for ROUND (salus_ps_fed_push; SAMPLES may be negative)
 *                                  -> fpush round=R samples=S work=W rc=0
 *   fselect RULE ROUND             round ROUND's clients of a fedavg rule (ps_fed_select,
 *                                  no salus needed) -> fselect round=R clients=A,B,...
 *   touch FILE                     creates FILE       -> touch FILE
 *   wait FILE                      waits (at most 60 s) until FILE exists -> wait FILE
 *   train ID OFF N K PARTS MS LOG  K clocks of: pull [OFF, OFF + N), sleep MS ms, push the range
 *                                  in PARTS even pieces, clock. Piece [O, O + M) of clock C gets
 *                                  value[e] = 1 + ID + 8 * C + e % 5 (integers: their float
 *                                  sums are exact). LOG gets one line per step, timestamps
 *                                  CLOCK_REALTIME ns (the checkers: tests/cluster/ps_failover.py):
 *                                    pulled id=ID clock=C done=D sum=S t0_ns=T t_ns=T
 *                                    ack id=ID clock=C off=O n=M base=B mod=5 t_ns=T
 *                                    clocked id=ID clock=C t_ns=T
 *                                  (an `ack` line only for a push acknowledged to this rank);
 *                                  a failed call: `error op=OP id=ID clock=C rc=RC t_ns=T
 *                                  msg=...` in LOG and on stdout, and the loop stops there
 *                                  -> train id=ID clocks=DONE rc=RC
 *                                  With PS_TOOL_TRAIN_HOLD=C:FILE in the environment the loop
 *                                  waits before its C-th clock (counted from 0) until FILE
 *                                  exists (at most 120 s; then it goes on): a test that must act
 *                                  while clocks remain holds the ranks there until it has.
 *   pullto OFF N FILE              pull [OFF, OFF + N), every value into FILE (one %.9g a line)
 *                                  -> as pull
 * `ps-tool -f FILE` reads the steps from FILE instead (words separated by white space: salusctl
 * run passes a limited number of arguments).
 * A failed call prints `error op=OP rc=RC msg=MESSAGE` and the script goes on. Exit status: 0
 * (also when a call failed: a rank that exits non-zero fails its group, and the tests expect
 * some calls to fail; they read the lines), 2 on a bad script. */
#include "ps_fed.h"
#include "salus_ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t num(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end) {
        fprintf(stderr, "ps-tool: '%s' is not a number\n", s);
        exit(2);
    }
    return v;
}

static int report(const char *op, int rc)
{
    if (rc < 0)
        printf("error op=%s rc=%d msg=%s\n", op, rc, salus_ps_last_error());
    fflush(stdout);
    return rc < 0;
}

static uint32_t crc32_of(const void *data, size_t bytes)
{
    const uint8_t *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < bytes; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

#define NEED(k)                                                                                \
    if (i + (k) >= argc) {                                                                     \
        fprintf(stderr, "ps-tool: %s needs %d arguments\n", argv[i], k);                      \
        return 2;                                                                              \
    }

/* The words of path as an argv (argv[0] kept); exits on error. */
static char **read_script(const char *prog, const char *path, int *argc)
{
    FILE *f = fopen(path, "r");
    char word[4096];
    int n = 1, cap = 64;
    char **v = malloc(cap * sizeof(*v));
    if (!f || !v) {
        fprintf(stderr, "ps-tool: cannot read %s\n", path);
        exit(2);
    }
    v[0] = (char *)prog;
    while (fscanf(f, "%4095s", word) == 1) {
        if (n + 1 >= cap && !(v = realloc(v, (cap *= 2) * sizeof(*v))))
            exit(2);
        if (!(v[n++] = strdup(word)))
            exit(2);
    }
    fclose(f);
    v[n] = NULL;
    *argc = n;
    return v;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void train_error(FILE *log, const char *op, uint64_t id, uint64_t clock, int rc)
{
    const char *msg = salus_ps_last_error();
    unsigned long long t = (unsigned long long)now_ns();
    fprintf(log, "error op=%s id=%llu clock=%llu rc=%d t_ns=%llu msg=%s\n", op,
            (unsigned long long)id, (unsigned long long)clock, rc, t, msg);
    printf("error op=%s id=%llu clock=%llu rc=%d msg=%s\n", op, (unsigned long long)id,
           (unsigned long long)clock, rc, msg);
}

/* The `train` step (above): 0, or the failed call's negative errno (logged). */
static int train(salus_ps_table_t *t, uint64_t id, uint64_t off, uint64_t n, uint64_t clocks,
                 uint64_t parts, uint64_t ms, const char *log_path, uint64_t *done_clocks)
{
    FILE *log = fopen(log_path, "w");
    float *buf = malloc((n ? n : 1) * sizeof(float));
    int rc = 0;
    *done_clocks = 0;
    if (!log || !buf || parts == 0 || parts > n) {
        fprintf(stderr, "ps-tool: train: cannot write %s, or PARTS not in 1 .. N\n", log_path);
        exit(2);
    }
    const char *hold = getenv("PS_TOOL_TRAIN_HOLD"), *hold_file = hold ? strchr(hold, ':') : NULL;
    uint64_t hold_at = hold_file ? strtoull(hold, NULL, 10) : UINT64_MAX;
    for (uint64_t k = 0; k < clocks && rc == 0; k++) {
        if (k == hold_at) {
            struct timespec pause = {.tv_nsec = 20000000};
            for (int tries = 0; access(hold_file + 1, F_OK) != 0 && tries < 6000; tries++)
                nanosleep(&pause, NULL);
        }
        uint64_t c = salus_ps_clock_of(t);
        salus_ps_read_t r = {0};
        uint64_t t0 = now_ns();
        if ((rc = salus_ps_pull(t, off, n, buf, &r)) < 0) {
            train_error(log, "pull", id, c, rc);
            break;
        }
        double sum = 0;
        for (uint64_t e = 0; e < n; e++)
            sum += buf[e];
        fprintf(log, "pulled id=%llu clock=%llu done=%llu sum=%.17g t0_ns=%llu t_ns=%llu\n",
                (unsigned long long)id, (unsigned long long)c, (unsigned long long)r.done, sum,
                (unsigned long long)t0, (unsigned long long)now_ns());
        fflush(log);
        if (ms) {
            struct timespec pause = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
            nanosleep(&pause, NULL);
        }
        uint64_t base = 1 + id + 8 * c;
        for (uint64_t p = 0; p < parts && rc == 0; p++) {
            uint64_t from = off + n * p / parts, to = off + n * (p + 1) / parts;
            for (uint64_t e = from; e < to; e++)
                buf[e - from] = (float)(base + e % 5);
            if ((rc = salus_ps_push(t, from, to - from, buf)) < 0) {
                train_error(log, "push", id, c, rc);
                break;
            }
            fprintf(log, "ack id=%llu clock=%llu off=%llu n=%llu base=%llu mod=5 t_ns=%llu\n",
                    (unsigned long long)id, (unsigned long long)c, (unsigned long long)from,
                    (unsigned long long)(to - from), (unsigned long long)base,
                    (unsigned long long)now_ns());
            fflush(log);
        }
        if (rc == 0 && (rc = salus_ps_clock(t)) < 0)
            train_error(log, "clock", id, c, rc);
        if (rc == 0) {
            fprintf(log, "clocked id=%llu clock=%llu t_ns=%llu\n", (unsigned long long)id,
                    (unsigned long long)c, (unsigned long long)now_ns());
            fflush(log);
            (*done_clocks)++;
        }
    }
    fclose(log);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    char **given = argv;
    if (argc == 3 && strcmp(argv[1], "-f") == 0)
        argv = read_script(argv[0], argv[2], &argc);
    salus_ps_table_t *t = NULL;
    uint64_t t_count = 0;
    float *last = NULL;
    uint64_t last_n = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        const char *op = argv[i];
        if (strcmp(op, "open") == 0 || strcmp(op, "opens") == 0) {
            int servers = strcmp(op, "opens") == 0;
            NEED(4 + servers);
            salus_ps_options_t o = {.rule = argv[i + 3], .sync = argv[i + 4],
                                    .servers = servers ? argv[i + 5] : NULL};
            uint64_t count = num(argv[i + 2]);
            salus_ps_table_t *opened = NULL;
            int rc = salus_ps_open(argv[i + 1], count, &o, &opened);
            if (rc == 0) {
                printf("open name=%s count=%llu rc=0\n", argv[i + 1], (unsigned long long)count);
                salus_ps_close(t); /* the previous one (NULL: none) */
                t = opened;
                t_count = count;
            }
            failed |= report(op, rc);
            i += 4 + servers;
        } else if (strcmp(op, "push") == 0) {
            NEED(3);
            uint64_t off = num(argv[i + 1]), n = num(argv[i + 2]);
            float v = strtof(argv[i + 3], NULL);
            float *vals = malloc((n ? n : 1) * sizeof(float));
            if (!vals)
                return 2;
            for (uint64_t k = 0; k < n; k++)
                vals[k] = v;
            uint64_t clock = salus_ps_clock_of(t);
            int rc = salus_ps_push(t, off, n, vals);
            free(vals);
            if (rc == 0)
                printf("push off=%llu n=%llu clock=%llu rc=0\n", (unsigned long long)off,
                       (unsigned long long)n, (unsigned long long)clock);
            failed |= report(op, rc);
            i += 3;
        } else if (strcmp(op, "pushk") == 0) {
            NEED(2);
            float v = strtof(argv[i + 1], NULL);
            uint64_t keys[1024], n = 0;
            float vals[1024];
            char *list = strdup(argv[i + 2]), *save = NULL;
            for (char *k = strtok_r(list, ",", &save); k && n < 1024; k = strtok_r(NULL, ",", &save)) {
                keys[n] = num(k);
                vals[n++] = v;
            }
            free(list);
            uint64_t clock = salus_ps_clock_of(t);
            int rc = salus_ps_push_keys(t, keys, n, vals);
            if (rc == 0)
                printf("pushk n=%llu clock=%llu rc=0\n", (unsigned long long)n,
                       (unsigned long long)clock);
            failed |= report(op, rc);
            i += 2;
        } else if (strcmp(op, "clock") == 0) {
            int rc = salus_ps_clock(t);
            if (rc == 0)
                printf("clock now=%llu rc=0\n", (unsigned long long)salus_ps_clock_of(t));
            failed |= report(op, rc);
        } else if (strcmp(op, "train") == 0) {
            NEED(7);
            uint64_t clocks = 0;
            int rc = train(t, num(argv[i + 1]), num(argv[i + 2]), num(argv[i + 3]),
                           num(argv[i + 4]), num(argv[i + 5]), num(argv[i + 6]), argv[i + 7],
                           &clocks);
            printf("train id=%s clocks=%llu rc=%d\n", argv[i + 1], (unsigned long long)clocks, rc);
            failed |= rc < 0;
            i += 7;
        } else if (strcmp(op, "pull") == 0 || strcmp(op, "pullto") == 0) {
            int to_file = strcmp(op, "pullto") == 0;
            NEED(2 + to_file);
            uint64_t off = num(argv[i + 1]), n = num(argv[i + 2]);
            float *out = calloc(n ? n : 1, sizeof(float));
            salus_ps_read_t r = {0};
            if (!out)
                return 2;
            int rc = salus_ps_pull(t, off, n, out, &r);
            if (rc == 0) {
                double sum = 0;
                for (uint64_t k = 0; k < n; k++)
                    sum += out[k];
                printf("pull clock=%llu done=%llu done_at_request=%llu waited=%d waited_ns=%llu "
                       "sum=%.6g first=%.9g last=%.9g\n",
                       (unsigned long long)r.clock, (unsigned long long)r.done,
                       (unsigned long long)r.done_at_request, r.waited,
                       (unsigned long long)r.waited_ns, sum, out[0], out[n - 1]);
                if (to_file) {
                    FILE *f = fopen(argv[i + 3], "w");
                    if (!f)
                        return 2;
                    for (uint64_t k = 0; k < n; k++)
                        fprintf(f, "%.9g\n", out[k]);
                    if (fclose(f) != 0)
                        return 2;
                }
                free(last);
                last = out;
                last_n = n;
            } else {
                free(out);
            }
            failed |= report(op, rc);
            i += 2 + to_file;
        } else if (strcmp(op, "dump") == 0) {
            printf("dump n=%llu crc=%08x values=", (unsigned long long)last_n,
                   crc32_of(last, last_n * sizeof(float)));
            for (uint64_t k = 0; k < last_n && k < 64; k++) {
                uint32_t bits;
                memcpy(&bits, &last[k], sizeof(bits));
                printf("%s%08x", k ? "," : "", bits);
            }
            printf("\n");
        } else if (strcmp(op, "close") == 0) {
            int rc = salus_ps_close(t);
            t = NULL;
            if (rc == 0)
                printf("close rc=0\n");
            failed |= report(op, rc);
        } else if (strcmp(op, "fstate") == 0) {
            salus_ps_fed_state_t st = {0};
            int rc = salus_ps_fed_state(t, &st);
            if (rc == 0)
                printf("fstate round=%llu selected=%d pushed=%d clients=%u per_round=%u "
                       "epochs=%u\n", (unsigned long long)st.round, st.selected, st.pushed,
                       st.clients, st.per_round, st.epochs);
            failed |= report(op, rc);
        } else if (strcmp(op, "fpush") == 0) {
            NEED(4);
            uint64_t round = num(argv[i + 1]);
            long long samples = strtoll(argv[i + 2], NULL, 10);
            uint32_t work = (uint32_t)num(argv[i + 3]);
            float v = strtof(argv[i + 4], NULL);
            float *vals = malloc((t_count ? t_count : 1) * sizeof(float));
            if (!vals)
                return 2;
            for (uint64_t k = 0; k < t_count; k++)
                vals[k] = v * (float)(k + 1);
            int rc = salus_ps_fed_push(t, round, samples, work, vals);
            free(vals);
            if (rc == 0)
                printf("fpush round=%llu samples=%lld work=%u rc=0\n", (unsigned long long)round,
                       samples, work);
            failed |= report(op, rc);
            i += 4;
        } else if (strcmp(op, "fselect") == 0) {
            NEED(2);
            ps_fed_spec_t spec;
            char err[256];
            uint32_t ids[PS_FED_MAX_CLIENTS];
            uint64_t round = num(argv[i + 2]);
            if (ps_fed_parse(argv[i + 1], &spec, err, sizeof(err)) < 0) {
                fprintf(stderr, "ps-tool: %s\n", err);
                return 2;
            }
            ps_fed_select(&spec, round, ids);
            printf("fselect round=%llu clients=", (unsigned long long)round);
            for (uint32_t k = 0; k < spec.per_round; k++)
                printf("%s%u", k ? "," : "", ids[k]);
            printf("\n");
            i += 2;
        } else if (strcmp(op, "touch") == 0) {
            NEED(1);
            FILE *f = fopen(argv[i + 1], "w");
            if (!f)
                return 2;
            fclose(f);
            printf("touch %s\n", argv[++i]);
        } else if (strcmp(op, "wait") == 0) {
            NEED(1);
            struct timespec pause = {.tv_nsec = 20000000};
            int tries = 0;
            while (access(argv[i + 1], F_OK) != 0 && tries++ < 3000)
                nanosleep(&pause, NULL);
            if (access(argv[i + 1], F_OK) != 0) {
                printf("error op=wait rc=-110 msg=%s did not appear\n", argv[i + 1]);
                failed = 1;
            } else {
                printf("wait %s\n", argv[i + 1]);
            }
            i++;
        } else {
            fprintf(stderr, "ps-tool: unknown step '%s' (see the top of ps_tool.c)\n", op);
            return 2;
        }
        fflush(stdout);
    }
    free(last);
    salus_ps_close(t);
    if (given != argv) {
        for (int k = 1; k < argc; k++)
            free(argv[k]);
        free(argv);
    }
    if (failed)
        printf("failures\n");
    return 0;
}
