/* Request latencies of a latency-critical job (sched_core.h, "Classes"), counted by the shim
 * in its job page and read by salusd (ps, /metrics): a histogram of quarter-octave buckets
 * in microseconds (bucket 4k + q holds [(4 + q) 2^k / 4, (5 + q) 2^k / 4) us), so a
 * percentile read from it is at most 25 % above the true value (its bucket's upper edge). */
#ifndef SALUS_COMMON_LATENCY_HIST_H
#define SALUS_COMMON_LATENCY_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define LATENCY_HIST_BUCKETS 96u /* up to 2^24 us (16.8 s); longer ones count in the last */

static inline uint32_t latency_hist_bucket(uint64_t ns)
{
    uint64_t us = ns / 1000;
    if (us < 1)
        us = 1;
    uint32_t k = 63u - (uint32_t)__builtin_clzll(us);
    uint32_t q = k >= 2 ? (uint32_t)(us >> (k - 2)) & 3u : (uint32_t)(us << (2 - k)) & 3u;
    uint32_t b = 4u * k + q;
    return b < LATENCY_HIST_BUCKETS ? b : LATENCY_HIST_BUCKETS - 1;
}

/* The upper edge of bucket b, in ns. */
static inline uint64_t latency_hist_upper_ns(uint32_t b)
{
    uint32_t k = b / 4, q = b % 4;
    return (((uint64_t)(5 + q) << k) * 1000) / 4;
}

/* The p-th percentile (0 < p <= 100) of the counts, as a bucket's upper edge in ns; 0 when
 * nothing was counted. */
static inline uint64_t latency_hist_percentile_ns(const _Atomic uint32_t *counts, double p)
{
    uint64_t total = 0, seen = 0;
    for (uint32_t b = 0; b < LATENCY_HIST_BUCKETS; b++)
        total += atomic_load(&counts[b]);
    if (total == 0)
        return 0;
    uint64_t want = (uint64_t)((double)total * p / 100.0 + 0.999999);
    if (want < 1)
        want = 1;
    for (uint32_t b = 0; b < LATENCY_HIST_BUCKETS; b++) {
        seen += atomic_load(&counts[b]);
        if (seen >= want)
            return latency_hist_upper_ns(b);
    }
    return latency_hist_upper_ns(LATENCY_HIST_BUCKETS - 1);
}

#endif
