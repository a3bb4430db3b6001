/* Trace parsing: CSV with the header SIM_TRACE_HEADER, one job per line. Every error names
 * the file and the line. */
#include "sim.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_FIELDS 8
#define TRACE_FIELDS_CLASSES 10 /* with latency_target_ms and kernel_ms */
#define MIB (1024.0 * 1024.0)
#define MAX_MEMORY_MB (1024.0 * 1024.0 * 1024.0) /* 1 PiB: anything above is a typo */
#define MAX_ITERATIONS 1000000000000ull

static const char *const field_names[TRACE_FIELDS_CLASSES] = {
    "job_id", "submit_s", "iterations", "iter_ms", "gpu_frac", "persistent_mb", "ephemeral_mb",
    "priority", "latency_target_ms", "kernel_ms",
};

__attribute__((format(printf, 5, 6))) static int malformed(char *err, size_t err_size,
                                                           const char *name, unsigned line,
                                                           const char *fmt, ...)
{
    if (!err || !err_size)
        return SIM_ERROR_MALFORMED;
    /* "NAME:LINE: " then the reason, in place */
    int used = snprintf(err, err_size, "%s:%u: ", name, line);
    if (used >= 0 && (size_t)used < err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + used, err_size - (size_t)used, fmt, ap);
        va_end(ap);
    }
    return SIM_ERROR_MALFORMED;
}

static char *trim(char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    size_t n = strlen(text);
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        text[--n] = '\0';
    return text;
}

static bool parse_u64(const char *text, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)text[0]))
        return false;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno || *end != '\0')
        return false;
    *out = value;
    return true;
}

static bool parse_double(const char *text, double *out)
{
    char *end;
    if (text[0] == '\0')
        return false;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || *end != '\0' || !isfinite(value))
        return false;
    *out = value;
    return true;
}

static bool parse_i32(const char *text, int32_t *out)
{
    char *end;
    if (text[0] == '\0')
        return false;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || *end != '\0' || value < INT32_MIN || value > INT32_MAX)
        return false;
    *out = (int32_t)value;
    return true;
}

/* Splits `line` at commas in place. Returns the number of fields (at most max + 1). */
static size_t split_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    char *start = line;
    for (char *p = line;; p++) {
        if (*p == ',' || *p == '\0') {
            bool last = *p == '\0';
            *p = '\0';
            if (n <= max)
                fields[n] = trim(start);
            n++;
            if (last)
                break;
            start = p + 1;
        }
    }
    return n;
}

/* The header's field count (TRACE_FIELDS, or TRACE_FIELDS_CLASSES with the classes'
 * columns), or 0 when the line is not a header. */
static size_t header_fields(char *line)
{
    /* Spaces around the column names are tolerated. */
    char *fields[TRACE_FIELDS_CLASSES + 1];
    size_t n = split_fields(line, fields, TRACE_FIELDS_CLASSES);
    if (n != TRACE_FIELDS && n != TRACE_FIELDS_CLASSES)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i], field_names[i]) != 0)
            return 0;
    return n;
}

/* A time in ms >= 0 of the classes' columns; empty: 0. */
static bool parse_class_ms(const char *text, double *out)
{
    *out = 0;
    return text[0] == '\0' || (parse_double(text, out) && *out >= 0 && *out <= 3600e3);
}

static int parse_row(char *line, const char *name, unsigned number, size_t columns,
                     sim_job_spec_t *job, char *err, size_t err_size)
{
    char *f[TRACE_FIELDS_CLASSES + 1];
    size_t n = split_fields(line, f, columns);
    double mb;

    /* trailing empty fields may be left out (priority, and the classes' columns) */
    while (n >= TRACE_FIELDS - 1 && n < columns)
        f[n++] = "";
    if (n != columns)
        return malformed(err, err_size, name, number, "expected %zu fields, found %zu",
                         columns, n);
    memset(job, 0, sizeof(*job));
    job->line = number;
    if (!parse_u64(f[0], &job->trace_id))
        return malformed(err, err_size, name, number, "job_id '%s' is not a non-negative integer",
                         f[0]);
    if (!parse_double(f[1], &job->submit_s) || job->submit_s < 0)
        return malformed(err, err_size, name, number, "submit_s '%s' is not a number >= 0", f[1]);
    if (!parse_u64(f[2], &job->iterations) || job->iterations < 1 ||
        job->iterations > MAX_ITERATIONS)
        return malformed(err, err_size, name, number, "iterations '%s' is not an integer >= 1",
                         f[2]);
    if (!parse_double(f[3], &job->iteration_ms) || job->iteration_ms <= 0)
        return malformed(err, err_size, name, number, "iter_ms '%s' is not a number > 0", f[3]);
    if (!parse_double(f[4], &job->gpu_fraction) || job->gpu_fraction < 0 ||
        job->gpu_fraction > 1)
        return malformed(err, err_size, name, number, "gpu_frac '%s' is not in [0, 1]", f[4]);
    for (int k = 5; k <= 6; k++) {
        if (!parse_double(f[k], &mb) || mb < 0 || mb > MAX_MEMORY_MB)
            return malformed(err, err_size, name, number, "%s '%s' is not a size in MiB >= 0",
                             field_names[k], f[k]);
        uint64_t bytes = (uint64_t)llround(mb * MIB);
        if (k == 5)
            job->persistent_bytes = bytes;
        else
            job->ephemeral_bytes = bytes;
    }
    if (f[7][0] != '\0' && !parse_i32(f[7], &job->priority))
        return malformed(err, err_size, name, number, "priority '%s' is not an integer", f[7]);
    if (columns == TRACE_FIELDS_CLASSES) {
        if (!parse_class_ms(f[8], &job->latency_target_ms))
            return malformed(err, err_size, name, number,
                             "latency_target_ms '%s' is not a time in ms >= 0", f[8]);
        if (!parse_class_ms(f[9], &job->kernel_ms))
            return malformed(err, err_size, name, number, "kernel_ms '%s' is not a time in ms >= 0",
                             f[9]);
    }
    return SIM_OK;
}

static int push_job(sim_trace_t *trace, const sim_job_spec_t *job)
{
    if (trace->count == trace->capacity) {
        size_t capacity = trace->capacity ? trace->capacity * 2 : 256;
        sim_job_spec_t *jobs = realloc(trace->jobs, capacity * sizeof(*jobs));
        if (!jobs)
            return SIM_ERROR_NO_MEMORY;
        trace->jobs = jobs;
        trace->capacity = capacity;
    }
    trace->jobs[trace->count++] = *job;
    return SIM_OK;
}

static int compare_id(const void *a, const void *b)
{
    const sim_job_spec_t *x = *(const sim_job_spec_t *const *)a;
    const sim_job_spec_t *y = *(const sim_job_spec_t *const *)b;
    if (x->trace_id != y->trace_id)
        return x->trace_id < y->trace_id ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Names the later line of the first duplicate job_id. */
static int check_unique_ids(const sim_trace_t *trace, const char *name, char *err,
                            size_t err_size)
{
    int rc = SIM_OK;
    const sim_job_spec_t **sorted = malloc(trace->count * sizeof(*sorted) + 1);
    if (!sorted)
        return SIM_ERROR_NO_MEMORY;
    for (size_t i = 0; i < trace->count; i++)
        sorted[i] = &trace->jobs[i];
    qsort(sorted, trace->count, sizeof(*sorted), compare_id);
    const sim_job_spec_t *duplicate = NULL, *first = NULL;
    for (size_t i = 1; i < trace->count; i++) {
        if (sorted[i]->trace_id == sorted[i - 1]->trace_id &&
            (!duplicate || sorted[i]->line < duplicate->line)) {
            duplicate = sorted[i];
            first = sorted[i - 1];
        }
    }
    if (duplicate)
        rc = malformed(err, err_size, name, duplicate->line,
                       "job_id %llu already used on line %u",
                       (unsigned long long)duplicate->trace_id, first->line);
    free(sorted);
    return rc;
}

int sim_trace_read(FILE *in, const char *name, sim_trace_t *trace, char *err, size_t err_size)
{
    char *line = NULL;
    size_t line_size = 0;
    unsigned number = 0;
    size_t columns = 0; /* the header's: 0 until seen */
    int rc = SIM_OK;

    memset(trace, 0, sizeof(*trace));
    for (;;) {
        errno = 0;
        ssize_t length = getline(&line, &line_size, in);
        if (length < 0) {
            if (errno == ENOMEM)
                rc = SIM_ERROR_NO_MEMORY;
            else if (ferror(in))
                rc = malformed(err, err_size, name, number + 1, "read error: %s",
                               strerror(errno ? errno : EIO));
            break;
        }
        number++;
        if ((size_t)length != strlen(line)) {
            rc = malformed(err, err_size, name, number, "NUL byte in line");
            goto done;
        }
        char *text = trim(line);
        if (text[0] == '\0' || text[0] == '#')
            continue;
        if (!columns) {
            if (!(columns = header_fields(text))) {
                rc = malformed(err, err_size, name, number, "expected the header line '%s' "
                               "(or with ',latency_target_ms,kernel_ms')", SIM_TRACE_HEADER);
                goto done;
            }
            continue;
        }
        sim_job_spec_t job;
        rc = parse_row(text, name, number, columns, &job, err, err_size);
        if (rc == SIM_OK)
            rc = push_job(trace, &job);
        if (rc != SIM_OK)
            goto done;
    }
    if (rc != SIM_OK)
        goto done;
    if (!columns) {
        rc = malformed(err, err_size, name, number ? number : 1, "no header line (empty trace)");
        goto done;
    }
    rc = check_unique_ids(trace, name, err, err_size);

done:
    free(line);
    if (rc == SIM_ERROR_NO_MEMORY && err && err_size)
        snprintf(err, err_size, "%s: out of memory", name);
    if (rc != SIM_OK)
        sim_trace_free(trace);
    return rc;
}

int sim_trace_load(const char *path, sim_trace_t *trace, char *err, size_t err_size)
{
    memset(trace, 0, sizeof(*trace));
    FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!in) {
        if (err && err_size)
            snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return SIM_ERROR_IO;
    }
    int rc = sim_trace_read(in, path, trace, err, err_size);
    if (in != stdin)
        fclose(in);
    return rc;
}

void sim_trace_free(sim_trace_t *trace)
{
    free(trace->jobs);
    memset(trace, 0, sizeof(*trace));
}
