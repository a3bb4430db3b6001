/* Host-side helpers shared by the workload programs (driver API only).
 *
 * Included by the host part of each workload .cu (g++ build, neither nvcc nor the
 * pack build). Everything is static inline so that a program pulls in only what
 * it uses. */
#ifndef SALUS_TESTS_WORKLOADS_HOST_H
#define SALUS_TESTS_WORKLOADS_HOST_H

#include <cuda.h>

#include "workload_packs.h"

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

/* Exit statuses shared by the workload programs (tests rely on them). */
enum {
    WORKLOAD_EXIT_DRIVER_ERROR = 1, /* a driver call returned an error */
    WORKLOAD_EXIT_USAGE = 2,        /* bad command line */
    WORKLOAD_EXIT_VERIFY = 3,       /* device memory did not hold what was written */
};

/* the program name used in every message; each program sets it first thing */
inline const char *workload_program = "workload";

__attribute__((format(printf, 1, 2), noreturn)) static inline void workload_usage_error(const char *format, ...)
{
    va_list arguments;
    fprintf(stderr, "%s: ", workload_program);
    va_start(arguments, format);
    vfprintf(stderr, format, arguments);
    va_end(arguments);
    fprintf(stderr, " (try --help)\n");
    exit(WORKLOAD_EXIT_USAGE);
}

/* Reports a failed driver call on stderr as
 *   <program>: <call> failed: <CUDA_ERROR_NAME> (<code>): <description> at <file>:<line>
 * and exits with WORKLOAD_EXIT_DRIVER_ERROR. */
[[noreturn]] static inline void workload_driver_failed(const char *call, CUresult result, const char *file,
                                                       int line)
{
    const char *name = NULL;
    const char *description = NULL;
    if (cuGetErrorName(result, &name) != CUDA_SUCCESS || name == NULL)
        name = "unknown CUresult";
    if (cuGetErrorString(result, &description) != CUDA_SUCCESS || description == NULL)
        description = "no description";
    fflush(stdout);
    fprintf(stderr, "%s: %s failed: %s (%d): %s at %s:%d\n", workload_program, call, name, (int)result,
            description, file, line);
    exit(WORKLOAD_EXIT_DRIVER_ERROR);
}

/* CHECK_CU(cuMemAlloc(&pointer, bytes)); names the call in the message */
#define CHECK_CU(call)                                                         \
    do {                                                                       \
        CUresult workload_result_ = (call);                                    \
        if (workload_result_ != CUDA_SUCCESS)                                  \
            workload_driver_failed(#call, workload_result_, __FILE__, __LINE__); \
    } while (0)

/* ---- command-line values ------------------------------------------------------ */

static inline unsigned long long workload_parse_unsigned(const char *option, const char *text,
                                                         unsigned long long minimum,
                                                         unsigned long long maximum)
{
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 0);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || value < minimum || value > maximum)
        workload_usage_error("--%s: expected an integer in [%llu, %llu], got '%s'", option, minimum, maximum,
                             text);
    return value;
}

static inline double workload_parse_double(const char *option, const char *text, double minimum,
                                           double maximum)
{
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !std::isfinite(value) || value < minimum ||
        value > maximum)
        workload_usage_error("--%s: expected a number in [%g, %g], got '%s'", option, minimum, maximum, text);
    return value;
}

/* ---- time ------------------------------------------------------------------------- */

/* '<name> n= sum= l2=' of the n weights (sum and l2 with `digits` significant digits) on
 * stdout, and with `dump` that file with one %.9g a line (a float's exact text). */
static inline void workload_weights_report(const char *name, const float *weights, size_t n,
                                           int digits, const char *dump)
{
    double sum = 0.0, squares = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum += (double)weights[i];
        squares += (double)weights[i] * (double)weights[i];
    }
    printf("%s n=%zu sum=%.*g l2=%.*g\n", name, n, digits, sum, digits, sqrt(squares));
    fflush(stdout);
    if (!dump)
        return;
    FILE *out = fopen(dump, "w");
    if (!out) {
        fprintf(stderr, "%s: --dump-weights %s: %s\n", workload_program, dump, strerror(errno));
        exit(WORKLOAD_EXIT_USAGE);
    }
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%.9g\n", (double)weights[i]);
    if (fclose(out) != 0) {
        fprintf(stderr, "%s: --dump-weights %s: %s\n", workload_program, dump, strerror(errno));
        exit(WORKLOAD_EXIT_USAGE);
    }
}

static inline uint64_t workload_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

/* sleeps at least duration_ns, whatever signals arrive */
static inline void workload_sleep_ns(uint64_t duration_ns)
{
    uint64_t deadline_ns = workload_now_ns() + duration_ns;
    struct timespec deadline = {(time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL) == EINTR) {
    }
}

/* ---- driver set-up ------------------------------------------------------------------- */

typedef struct workload_device {
    CUdevice device;
    CUcontext context; /* the device's primary context, current on this thread */
    CUmodule module;
    CUstream stream;
} workload_device;

/* cuInit, primary context of device `ordinal`, module from the embedded image, one stream */
static inline void workload_device_open(workload_device *device, int ordinal, const void *image)
{
    int count = 0;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGetCount(&count));
    if (ordinal >= count) {
        fprintf(stderr, "%s: --device %d: only %d device(s) visible\n", workload_program, ordinal, count);
        exit(WORKLOAD_EXIT_USAGE);
    }
    CHECK_CU(cuDeviceGet(&device->device, ordinal));
    CHECK_CU(cuDevicePrimaryCtxRetain(&device->context, device->device));
    CHECK_CU(cuCtxSetCurrent(device->context));
    CHECK_CU(cuModuleLoadData(&device->module, image));
    CHECK_CU(cuStreamCreate(&device->stream, CU_STREAM_DEFAULT));
}

static inline void workload_device_close(workload_device *device)
{
    CHECK_CU(cuStreamDestroy(device->stream));
    CHECK_CU(cuModuleUnload(device->module));
    CHECK_CU(cuDevicePrimaryCtxRelease(device->device));
}

/* threads per block of every 1-D launch */
#define WORKLOAD_BLOCK_THREADS 128u

/* launches `function` with one thread per element of [0, elements) (at least one block) */
static inline void workload_launch_1d(const workload_device *device, CUfunction function, unsigned elements,
                                      void **arguments)
{
    unsigned blocks = (elements + WORKLOAD_BLOCK_THREADS - 1) / WORKLOAD_BLOCK_THREADS;
    if (blocks == 0)
        blocks = 1;
    CHECK_CU(cuLaunchKernel(function, blocks, 1, 1, WORKLOAD_BLOCK_THREADS, 1, 1, 0, device->stream, arguments,
                            NULL));
}

/* device memory, through cuMemAlloc or (stream_ordered) cuMemAllocAsync on the
 * stream; a failure names the call, the size and `purpose` */
#define workload_alloc(device, bytes, stream_ordered, purpose) \
    workload_alloc_at(device, bytes, stream_ordered, purpose, __FILE__, __LINE__)

static inline CUdeviceptr workload_alloc_at(const workload_device *device, size_t bytes, bool stream_ordered,
                                            const char *purpose, const char *file, int line)
{
    CUdeviceptr pointer = 0;
    CUresult result = stream_ordered ? cuMemAllocAsync(&pointer, bytes, device->stream) : cuMemAlloc(&pointer, bytes);
    if (result != CUDA_SUCCESS) {
        char call[160];
        snprintf(call, sizeof call, "%s(%zu bytes, %s)", stream_ordered ? "cuMemAllocAsync" : "cuMemAlloc", bytes,
                 purpose);
        workload_driver_failed(call, result, file, line);
    }
    return pointer;
}

static inline void workload_free(const workload_device *device, CUdeviceptr pointer, bool stream_ordered)
{
    if (pointer == 0)
        return;
    if (stream_ordered)
        CHECK_CU(cuMemFreeAsync(pointer, device->stream));
    else
        CHECK_CU(cuMemFree(pointer));
}

#endif
