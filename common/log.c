#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int salus_log_threshold = SALUS_LOG_INFO;
static const char *log_program = "salus";

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void salus_log_init(const char *program, salus_log_level_t level)
{
    if (program)
        log_program = program;
    salus_log_threshold = (int)level;
}

int salus_log_level_parse(const char *text, salus_log_level_t *out)
{
    if (!text)
        return -1;
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++) {
        if (strcasecmp(text, level_names[i]) == 0 || (text[0] == '0' + i && text[1] == '\0')) {
            *out = (salus_log_level_t)i;
            return 0;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *out = SALUS_LOG_WARN;
        return 0;
    }
    return -1;
}

const char *salus_log_level_name(salus_log_level_t level)
{
    if ((int)level < 0 || (int)level > SALUS_LOG_TRACE)
        return "?";
    return level_names[level];
}

void salus_log_write(salus_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char message[1024];
    char stamp[32];
    struct timeval now;
    struct tm tm;
    va_list ap;

    gettimeofday(&now, NULL);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);

    /* One write per line, so lines from several threads or processes never interleave. */
    char out[1400];
    int n;
    if (salus_log_threshold >= SALUS_LOG_DEBUG)
        n = snprintf(out, sizeof(out), "%s.%03ldZ %s[%d] %s %s (%s:%d)\n", stamp,
                     (long)(now.tv_usec / 1000), log_program, (int)getpid(),
                     salus_log_level_name(level), message, file, line);
    else
        n = snprintf(out, sizeof(out), "%s.%03ldZ %s[%d] %s %s\n", stamp,
                     (long)(now.tv_usec / 1000), log_program, (int)getpid(),
                     salus_log_level_name(level), message);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(out))
        n = (int)sizeof(out) - 1;
    ssize_t ignored = write(STDERR_FILENO, out, (size_t)n);
    (void)ignored;
}
