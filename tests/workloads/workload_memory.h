/* Helpers of the memory-road workloads (vmm-vecadd, pool-loop, managed): command line
 * shared by the three, the hold point tests use to look at a running job, and the host
 * check of a vector add. Host part only. */
#ifndef SALUS_TESTS_WORKLOADS_MEMORY_H
#define SALUS_TESTS_WORKLOADS_MEMORY_H

#include "workload_host.h"

#include <sys/stat.h>
#include <unistd.h>

typedef struct workload_memory_options {
    unsigned iterations;   /* --iterations (default 4) */
    unsigned long long mb; /* --mb: MiB of each persistent buffer (default 8) */
    unsigned long long ephemeral_mb; /* --ephemeral-mb: MiB allocated and freed per iteration (default 8) */
    const char *hold;      /* --hold FILE: at the end, with the persistent memory still held,
                              print "holding" and wait until FILE exists (at most 120 s) */
} workload_memory_options;

static inline void workload_memory_parse(int argc, char **argv, workload_memory_options *o,
                                         const char *usage)
{
    *o = (workload_memory_options){4, 8, 8, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) {
            printf("%s", usage);
            exit(0);
        }
        if (i + 1 >= argc)
            workload_usage_error("%s: missing value or unknown option", a);
        if (strcmp(a, "--iterations") == 0)
            o->iterations = (unsigned)workload_parse_unsigned("iterations", argv[++i], 1, 1000000);
        else if (strcmp(a, "--mb") == 0)
            o->mb = workload_parse_unsigned("mb", argv[++i], 1, 65536);
        else if (strcmp(a, "--ephemeral-mb") == 0)
            o->ephemeral_mb = workload_parse_unsigned("ephemeral-mb", argv[++i], 0, 65536);
        else if (strcmp(a, "--hold") == 0)
            o->hold = argv[++i];
        else
            workload_usage_error("unknown option %s", a);
    }
}

static inline void workload_memory_hold(const workload_memory_options *o)
{
    if (!o->hold)
        return;
    printf("holding\n");
    fflush(stdout);
    struct stat st;
    for (int i = 0; i < 12000 && stat(o->hold, &st) != 0; i++)
        workload_sleep_ns(10000000ull);
}

/* host inputs of a vector add: a[i] = i % 1000, b[i] = 2 * (i % 7) */
static inline void workload_vecadd_inputs(float *a, float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 1000);
        b[i] = 2.0f * (float)(i % 7);
    }
}

/* number of elements where c != a + b (times scale) */
static inline size_t workload_vecadd_errors(const float *c, size_t n, float scale)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += c[i] != scale * ((float)(i % 1000) + 2.0f * (float)(i % 7));
    return bad;
}

#endif
