/* Rate limits of log lines (log_limit.h). */
#include "log_limit.h"

#include <time.h>

uint64_t salus_log_limit_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* now_ns is past the window: a new one starts there (the drops stay to be said) */
static void roll(salus_log_limit_t *lim, uint64_t now_ns)
{
    if (lim->window_start == 0 || now_ns - lim->window_start >= lim->window_ns ||
        now_ns < lim->window_start) {
        lim->window_start = now_ns ? now_ns : 1;
        lim->lines = 0;
    }
}

int salus_log_limit_take(salus_log_limit_t *lim, uint64_t now_ns, uint64_t *say_dropped)
{
    *say_dropped = 0;
    roll(lim, now_ns);
    if (lim->lines >= lim->per_window) {
        lim->dropped++;
        lim->dropped_total++;
        return 0;
    }
    lim->lines++;
    if (lim->lines == 1) { /* the first line of a window: earlier drops are said now */
        *say_dropped = lim->dropped;
        lim->dropped = 0;
    }
    return 1;
}

uint64_t salus_log_limit_flush(salus_log_limit_t *lim, uint64_t now_ns)
{
    if (lim->dropped == 0 || salus_log_limit_left_ns(lim, now_ns) > 0)
        return 0;
    uint64_t n = lim->dropped;
    lim->dropped = 0;
    return n;
}

uint64_t salus_log_limit_left_ns(const salus_log_limit_t *lim, uint64_t now_ns)
{
    if (lim->window_start == 0 || now_ns < lim->window_start ||
        now_ns - lim->window_start >= lim->window_ns)
        return 0;
    return lim->window_ns - (now_ns - lim->window_start);
}
