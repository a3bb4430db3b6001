/* A kernel pack for simgpu's tests (see tools/simgpu/include/simgpu_kernel.h).
 * Parameters are exactly what the test programs pass in kernelParams. */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "simgpu_kernel.h"

#ifndef SIMGPU_TESTPACK_ABI1

/* a global the tests reach through cuModuleGetGlobal */
__attribute__((visibility("default"))) float simgpu_test_scale = 2.0f;

/* vector_add(const float *a, const float *b, float *c, int n): c = a + b */
static void vector_add(const simgpu_launch *l)
{
    const float *a = *(float **)l->params[0];
    const float *b = *(float **)l->params[1];
    float *c = *(float **)l->params[2];
    int n = *(int *)l->params[3];
    for (int i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}

/* scale(float *p, int n): p *= simgpu_test_scale */
static void scale(const simgpu_launch *l)
{
    float *p = *(float **)l->params[0];
    int n = *(int *)l->params[1];
    for (int i = 0; i < n; i++)
        p[i] *= simgpu_test_scale;
}

/* busy(unsigned long long ns): does nothing; occupies the device for ns */
static void busy(const simgpu_launch *l)
{
    (void)l;
}

static double busy_cost(const simgpu_launch *l)
{
    return (double)*(unsigned long long *)l->params[0];
}

/* signal_busy(int fd, unsigned long long ns): writes one byte to fd (the kernel
 * is on the device), then occupies the device for ns */
static void signal_busy(const simgpu_launch *l)
{
    int fd = *(int *)l->params[0];
    char byte = 'k';
    if (write(fd, &byte, 1) != 1)
        return;
}

static double signal_busy_cost(const simgpu_launch *l)
{
    return (double)*(unsigned long long *)l->params[1];
}

/* stamp(unsigned long long *out, unsigned long long ns): out[0] = CLOCK_MONOTONIC
 * at the kernel's start; occupies the device for ns */
static void stamp(const simgpu_launch *l)
{
    unsigned long long *out = *(unsigned long long **)l->params[0];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    out[0] = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static double stamp_cost(const simgpu_launch *l)
{
    return (double)*(unsigned long long *)l->params[1];
}

/* spin(unsigned long long ns): burns ns of CPU time; no cost model (measured) */
static void spin(const simgpu_launch *l)
{
    unsigned long long ns = *(unsigned long long *)l->params[0];
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    unsigned long long start = (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec, now;
    do {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        now = (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
    } while (now - start < ns);
}

/* wait_word(unsigned *word, unsigned value, unsigned long long timeout_ns, int *result,
 *           unsigned long long cost_ns): waits off the engine while *word == value (at
 * most timeout_ns), stores wait_off_engine's answer in *result; modelled cost_ns */
static void wait_word(const simgpu_launch *l)
{
    const volatile uint32_t *word = *(uint32_t **)l->params[0];
    uint32_t value = *(unsigned *)l->params[1];
    unsigned long long timeout_ns = *(unsigned long long *)l->params[2];
    int *result = *(int **)l->params[3];
    *result = l->host->wait_off_engine(l, word, value, timeout_ns);
}

static double wait_word_cost(const simgpu_launch *l)
{
    return (double)*(unsigned long long *)l->params[4];
}

/* fail_with(int cuda_error): the kernel fails with that error */
static void fail_with(const simgpu_launch *l)
{
    l->host->fail(l, *(int *)l->params[0]);
}

static const simgpu_kernel kernels[] = {
    {"vector_add", vector_add, NULL},
    {"scale", scale, NULL},
    {"busy", busy, busy_cost},
    {"signal_busy", signal_busy, signal_busy_cost},
    {"stamp", stamp, stamp_cost},
    {"spin", spin, NULL},
    {"wait_word", wait_word, wait_word_cost},
    {"fail_with", fail_with, NULL},
};
#define TESTPACK_ABI SIMGPU_KERNEL_ABI
#else
/* built as an ABI-1 pack: what a pack made before host services existed declares */
static void abi1_double(const simgpu_launch *l)
{
    float *p = *(float **)l->params[0];
    int n = *(int *)l->params[1];
    for (int i = 0; i < n; i++)
        p[i] *= 2.0f;
}

static const simgpu_kernel kernels[] = {
    {"abi1_double", abi1_double, NULL},
};
#define TESTPACK_ABI 1
#endif

__attribute__((visibility("default"))) const simgpu_kernel *simgpu_kernel_pack(unsigned *count,
                                                                               unsigned *abi)
{
    *count = sizeof(kernels) / sizeof(kernels[0]);
    *abi = TESTPACK_ABI;
    return kernels;
}
