/* Level-gated logging shared by salusd, salusctl, the shim and simgpu.
 *
 * SALUS_LOG() tests the level before anything is formatted, so a filtered
 * message costs one comparison. Output goes to stderr only (the shim must never
 * write to a program's stdout): "2026-11-29T11:00:00.123Z salusd[1234] INFO msg". */
#ifndef SALUS_COMMON_LOG_H
#define SALUS_COMMON_LOG_H

#include <stdbool.h>

typedef enum salus_log_level {
    SALUS_LOG_ERROR = 0,
    SALUS_LOG_WARN = 1,
    SALUS_LOG_INFO = 2,
    SALUS_LOG_DEBUG = 3,
    SALUS_LOG_TRACE = 4,
} salus_log_level_t;

extern int salus_log_threshold;

/* Sets the program name shown in each line (default "salus"). Not thread-safe: call at start. */
void salus_log_init(const char *program, salus_log_level_t level);
/* Parses "error", "warn", "info", "debug", "trace" (or 0..4). Returns 0, or -1 if unknown. */
int salus_log_level_parse(const char *text, salus_log_level_t *out);
const char *salus_log_level_name(salus_log_level_t level);

void salus_log_write(salus_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define SALUS_LOG(level, ...)                                                  \
    do {                                                                       \
        if ((int)(level) <= salus_log_threshold)                               \
            salus_log_write((level), __FILE__, __LINE__, __VA_ARGS__);         \
    } while (0)

#define LOG_ERROR(...) SALUS_LOG(SALUS_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) SALUS_LOG(SALUS_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) SALUS_LOG(SALUS_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) SALUS_LOG(SALUS_LOG_DEBUG, __VA_ARGS__)
#define LOG_TRACE(...) SALUS_LOG(SALUS_LOG_TRACE, __VA_ARGS__)

#endif
