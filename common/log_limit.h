/* A rate limit for one kind of log line (common/log.h): at most per_window lines each window
 * (e.g. 60 a minute); the lines beyond are dropped and counted, and the count is said once,
 * either before the next line written in a later window or by a flush after the window.
 *
 *   static salus_log_limit_t busy = SALUS_LOG_LIMIT_INIT(60, 60);
 *   SALUS_LOG_LIMITED(&busy, SALUS_LOG_WARN, "refusing the link from %s: ...", addr);
 *
 * Pure: the caller gives the time (salus_log_limit_now_ns, or a test's clock). Not
 * thread-safe: one limiter per thread (salusd's loop). */
#ifndef SALUS_COMMON_LOG_LIMIT_H
#define SALUS_COMMON_LOG_LIMIT_H

#include "log.h"

#include <stdint.h>

typedef struct salus_log_limit_s {
    uint32_t per_window;    /* lines written per window, at most */
    uint64_t window_ns;
    uint64_t window_start;  /* ns; 0: no line yet */
    uint32_t lines;         /* written in this window */
    uint64_t dropped;       /* dropped and not said yet */
    uint64_t dropped_total; /* dropped since the start */
} salus_log_limit_t;

#define SALUS_LOG_LIMIT_INIT(lines, window_s)                                                  \
    {.per_window = (lines), .window_ns = (uint64_t)(window_s) * 1000000000ull}

/* The monotonic clock, in ns. */
uint64_t salus_log_limit_now_ns(void);

/* Whether a line may be written at now_ns: 1 yes (counted), 0 no (counted as dropped).
 * *say_dropped: lines dropped in earlier windows and not said yet, to be said before this
 * one (0 when none, or when this line is dropped); the limiter forgets them then. */
int salus_log_limit_take(salus_log_limit_t *lim, uint64_t now_ns, uint64_t *say_dropped);

/* The lines dropped and not said yet, once the window they fell in is over (0 before that):
 * for a timer to say them when no later line comes. The limiter forgets them. */
uint64_t salus_log_limit_flush(salus_log_limit_t *lim, uint64_t now_ns);

/* The ns from now_ns until the current window ends (0: over, or no window). */
uint64_t salus_log_limit_left_ns(const salus_log_limit_t *lim, uint64_t now_ns);

#define SALUS_LOG_LIMITED(lim, level, ...)                                                     \
    do {                                                                                       \
        if ((int)(level) <= salus_log_threshold) {                                             \
            uint64_t salus_dropped_;                                                           \
            if (salus_log_limit_take((lim), salus_log_limit_now_ns(), &salus_dropped_)) {      \
                if (salus_dropped_)                                                            \
                    salus_log_write((level), __FILE__, __LINE__,                               \
                                    "(%llu more lines like the next were dropped: at most "    \
                                    "%u a minute)",                                            \
                                    (unsigned long long)salus_dropped_,                        \
                                    (unsigned)(lim)->per_window);                              \
                salus_log_write((level), __FILE__, __LINE__, __VA_ARGS__);                     \
            }                                                                                  \
        }                                                                                      \
    } while (0)

#endif
