/* ps_bench: the parameter-server side of benchmarks/ps-allreduce.sh, one rank of a salus group
 * (salusctl run --group G --world N --rank R, which preloads the shim). It opens table "t" of
 * --bytes bytes (float32, rule add, sync bsp) and for each of --rounds rounds (after one
 * untimed warm-up) pushes the whole tensor (all ones), ends its clock and pulls the whole
 * tensor, timing the round; then prints
 *     ps_bench bytes=S rounds=R median_round_ms=X push_ms=P clock_ms=C pull_ms=L
 * (P, C, L: the medians of the round's three calls, where the round's time goes as the rank
 * sees it)
 * Each pull is checked: under BSP, after k rounds of all-ones pushes by N workers, every
 * element is N * k (exit 1 otherwise). Uses only salus_ps.h. */
#include "salus_ps.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "ps_bench: %s: %d (%s)\n", what, rc, salus_ps_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    uint64_t bytes = 1 << 20;
    int rounds = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ps_bench [--bytes S] [--rounds R]\n");
            return 2;
        }
    }
    const char *world_text = getenv("SALUS_WORLD");
    int world = world_text ? atoi(world_text) : 0;
    uint64_t count = bytes / sizeof(float);
    if (count == 0 || rounds < 1 || world < 1) {
        fprintf(stderr, "ps_bench: 4 bytes or more, a round or more, under salusctl run --world N"
                        " (SALUS_WORLD: %s)\n", world_text ? world_text : "unset");
        return 2;
    }
    float *ones = malloc(count * sizeof(float)), *got = malloc(count * sizeof(float));
    double *ms = calloc((size_t)rounds * 4, sizeof(double));
    double *push_ms = ms + rounds, *clock_ms = ms + 2 * rounds, *pull_ms = ms + 3 * rounds;
    if (!ones || !got || !ms) {
        fprintf(stderr, "ps_bench: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < count; i++)
        ones[i] = 1.0f;
    salus_ps_table_t *t = NULL;
    salus_ps_options_t o = {.rule = "add", .sync = "bsp"};
    int rc = salus_ps_open("t", count, &o, &t);
    if (rc != 0)
        return fail("salus_ps_open", rc);
    for (int r = -1; r < rounds; r++) { /* r = -1: the warm-up */
        double t0 = now_ms();
        if ((rc = salus_ps_push(t, 0, count, ones)) != 0)
            return fail("salus_ps_push", rc);
        double t1 = now_ms();
        if ((rc = salus_ps_clock(t)) != 0)
            return fail("salus_ps_clock", rc);
        double t2 = now_ms();
        if ((rc = salus_ps_pull(t, 0, count, got, NULL)) != 0)
            return fail("salus_ps_pull", rc);
        double t3 = now_ms();
        if (r >= 0) {
            ms[r] = t3 - t0;
            push_ms[r] = t1 - t0;
            clock_ms[r] = t2 - t1;
            pull_ms[r] = t3 - t2;
        }
        float want = (float)world * (float)(r + 2); /* rounds done so far, warm-up included */
        for (uint64_t i = 0; i < count; i++) {
            if (got[i] != want) {
                fprintf(stderr, "ps_bench: round %d element %llu is %g, not %g\n", r,
                        (unsigned long long)i, got[i], want);
                return 1;
            }
        }
    }
    salus_ps_close(t);
    printf("ps_bench bytes=%llu rounds=%d median_round_ms=%.3f push_ms=%.3f clock_ms=%.3f "
           "pull_ms=%.3f\n", (unsigned long long)bytes, rounds, median_of(ms, rounds),
           median_of(push_ms, rounds), median_of(clock_ms, rounds), median_of(pull_ms, rounds));
    free(ones);
    free(got);
    free(ms);
    return 0;
}
