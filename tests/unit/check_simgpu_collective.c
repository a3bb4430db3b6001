/* Unit tests of simgpu's host services (kernel-pack ABI 2: waiting off the
 * engine, failing a kernel), of an ABI-1 pack still loading, and of the
 * collective kernel pack (tests/workloads/collective.c, allreduce_sum_f32).
 * Part of the check_simgpu program (its main() runs this suite too, with the
 * test pack, its ABI-1 build and the collective pack in SIMGPU_KERNEL_PACKS).
 *
 * Each test that could leave a sticky error works in a context of its own and
 * destroys it, so that the CK_FORK=no run (every test in one process) stays clean. */
#include <check.h>
#include <cuda.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

Suite *simgpu_collective_suite(void);

#define CU_OK(call) ck_assert_int_eq((call), CUDA_SUCCESS)
#define MS 1000000ull

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

/* CPU time (user + system) of the whole process so far */
static uint64_t process_cpu_ns(void)
{
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* a context of its own on device 0, current on this thread */
static CUcontext own_context(void)
{
    CUcontext ctx;
    CU_OK(cuInit(0));
    CU_OK(cuCtxCreate(&ctx, NULL, 0, 0));
    return ctx;
}

static CUfunction function(CUmodule *mod, const char *name)
{
    static const char image[] = "not a real fatbin: simgpu does not parse images";
    CUfunction f;
    CU_OK(cuModuleLoadData(mod, image));
    CU_OK(cuModuleGetFunction(&f, *mod, name));
    return f;
}

/* polls cuStreamQuery until the stream is idle or deadline_ms passed; its last answer */
static CUresult stream_idle_within(CUstream stream, unsigned deadline_ms)
{
    uint64_t deadline = now_ns() + deadline_ms * MS;
    CUresult rc;
    while ((rc = cuStreamQuery(stream)) == CUDA_ERROR_NOT_READY && now_ns() < deadline)
        sleep_ms(2);
    return rc;
}

static void wake_word(uint32_t *word, uint32_t value)
{
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint32_t test_word;

/* A kernel that waits off the engine: the launch returns at once, another
 * stream's kernel runs and completes meanwhile, the waiter burns no CPU and adds
 * no busy time, and the modelled cost counts engine time only. */
START_TEST(test_wait_off_engine)
{
    CUcontext ctx = own_context();
    CUmodule mod;
    CUfunction wait_word = function(&mod, "wait_word");
    CUfunction busy;
    CU_OK(cuModuleGetFunction(&busy, mod, "busy"));
    CUstream waiting, other;
    CU_OK(cuStreamCreate(&waiting, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    simgpu_device_stats_t before, during, after;
    ck_assert_int_eq(simgpu_device_stats(0, &before), 0);

    __atomic_store_n(&test_word, 0, __ATOMIC_RELEASE);
    unsigned value = 0;
    unsigned long long no_limit = 0, cost = 5 * MS;
    int result = 12345;
    uint32_t *word = &test_word;
    int *result_at = &result;
    void *wait_params[] = {&word, &value, &no_limit, &result_at, &cost};
    uint64_t t0 = now_ns();
    CU_OK(cuLaunchKernel(wait_word, 1, 1, 1, 1, 1, 1, 0, waiting, wait_params, NULL));
    uint64_t launch_ns = now_ns() - t0;
    ck_assert_int_eq(cuStreamQuery(waiting), CUDA_ERROR_NOT_READY);

    /* the engine is free: a 20 ms kernel on the same device completes while the other waits */
    unsigned long long busy_ns = 20 * MS;
    void *busy_params[] = {&busy_ns};
    CU_OK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, other, busy_params, NULL));
    ck_assert_int_eq(stream_idle_within(other, 5000), CUDA_SUCCESS);
    ck_assert_int_eq(cuStreamQuery(waiting), CUDA_ERROR_NOT_READY);

    /* 300 ms of waiting: almost no CPU for the whole process, no busy time on the device */
    ck_assert_int_eq(simgpu_device_stats(0, &during), 0);
    uint64_t cpu0 = process_cpu_ns();
    sleep_ms(300);
    uint64_t cpu_ns = process_cpu_ns() - cpu0;
    simgpu_device_stats_t later;
    ck_assert_int_eq(simgpu_device_stats(0, &later), 0);
    printf("wait_off_engine: launch returned in %.3f ms; a 20 ms kernel of another stream completed "
           "meanwhile; over 300 ms of waiting the process used %.3f ms CPU and the device %.3f ms busy\n",
           (double)launch_ns / 1e6, (double)cpu_ns / 1e6, (double)(later.busy_ns - during.busy_ns) / 1e6);
    ck_assert_uint_lt(cpu_ns, 15 * MS);
    ck_assert_uint_lt(later.busy_ns - during.busy_ns, 1 * MS);
    ck_assert_int_eq(cuStreamQuery(waiting), CUDA_ERROR_NOT_READY);
    ck_assert_int_eq(result, 12345);

    wake_word(&test_word, 1);
    CU_OK(cuStreamSynchronize(waiting));
    ck_assert_int_eq(result, 0);
    ck_assert_int_eq(simgpu_device_stats(0, &after), 0);
    ck_assert_uint_eq(after.kernels, before.kernels + 2);
    /* busy: 20 ms + the waiter's 5 ms of modelled work, not its 300+ ms of waiting */
    uint64_t busy_total = after.busy_ns - before.busy_ns;
    ck_assert_uint_ge(busy_total, 25 * MS);
    ck_assert_uint_lt(busy_total, 100 * MS);

    /* a wait that times out: -ETIMEDOUT, the kernel still completes */
    unsigned long long limit = 100 * MS;
    void *timeout_params[] = {&word, &value, &limit, &result_at, &cost};
    __atomic_store_n(&test_word, 0, __ATOMIC_RELEASE);
    t0 = now_ns();
    CU_OK(cuLaunchKernel(wait_word, 1, 1, 1, 1, 1, 1, 0, waiting, timeout_params, NULL));
    CU_OK(cuStreamSynchronize(waiting));
    ck_assert_int_eq(result, -ETIMEDOUT);
    ck_assert_uint_ge(now_ns() - t0, 100 * MS);

    CU_OK(cuStreamDestroy(waiting));
    CU_OK(cuStreamDestroy(other));
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuCtxDestroy(ctx));
}
END_TEST

/* simgpu_host.fail: the error is sticky in the launching context only */
START_TEST(test_kernel_fail_sticky)
{
    CUcontext ctx = own_context();
    CUmodule mod;
    CUfunction fail_with = function(&mod, "fail_with");
    int code = CUDA_ERROR_LAUNCH_TIMEOUT;
    void *params[] = {&code};
    CU_OK(cuLaunchKernel(fail_with, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    ck_assert_int_eq(cuStreamSynchronize(NULL), CUDA_ERROR_LAUNCH_TIMEOUT);
    ck_assert_int_eq(cuCtxSynchronize(), CUDA_ERROR_LAUNCH_TIMEOUT);
    ck_assert_int_eq(cuLaunchKernel(fail_with, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_LAUNCH_TIMEOUT);
    CUcontext other;
    CU_OK(cuCtxCreate(&other, NULL, 0, 0)); /* current now: unaffected */
    CU_OK(cuCtxSynchronize());
    CU_OK(cuCtxDestroy(other));
    CU_OK(cuCtxSetCurrent(ctx));
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuCtxDestroy(ctx));
}
END_TEST

/* a pack that says ABI 1 still loads and runs */
START_TEST(test_abi1_pack)
{
    CUcontext ctx = own_context();
    CUmodule mod;
    CUfunction twice = function(&mod, "abi1_double");
    CUdeviceptr p;
    float values[4] = {1, 2, 3, 4};
    int n = 4;
    CU_OK(cuMemAlloc(&p, sizeof(values)));
    CU_OK(cuMemcpyHtoD(p, values, sizeof(values)));
    void *params[] = {&p, &n};
    CU_OK(cuLaunchKernel(twice, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CU_OK(cuMemcpyDtoH(values, p, sizeof(values)));
    ck_assert_float_eq(values[3], 8.0f);
    CU_OK(cuMemFree(p));
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuCtxDestroy(ctx));
}
END_TEST

/* ---- the collective ---- */

#define RANKS 4
#define COUNT 300000ull /* more than one round of 262144 floats */

typedef struct rank_job {
    const char *communicator;
    unsigned rank, world;
    unsigned long long count;
    CUcontext ctx;
    float *result; /* count floats */
    CUresult rc;
} rank_job;

static float rank_value(unsigned rank, unsigned long long i)
{
    return (float)((i * 7 + rank * 13) % 101) * 0.37f + (float)rank * 1e-3f;
}

static void *rank_main(void *arg)
{
    rank_job *job = arg;
    CUmodule mod;
    CUfunction allreduce;
    CUstream stream;
    CUdeviceptr buffer;
    size_t bytes = job->count * sizeof(float);
    float *host = malloc(bytes);
    job->rc = CUDA_ERROR_UNKNOWN;
    if (!host || cuCtxSetCurrent(job->ctx) || cuModuleLoadData(&mod, "image") ||
        cuModuleGetFunction(&allreduce, mod, "allreduce_sum_f32") ||
        cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) || cuMemAlloc(&buffer, bytes))
        goto out;
    for (unsigned long long i = 0; i < job->count; i++)
        host[i] = rank_value(job->rank, i);
    void *params[] = {&buffer, &job->count, &job->communicator, &job->rank, &job->world};
    if (cuMemcpyHtoD(buffer, host, bytes) ||
        cuLaunchKernel(allreduce, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL))
        goto out;
    job->rc = cuStreamSynchronize(stream);
    if (job->rc == CUDA_SUCCESS)
        job->rc = cuMemcpyDtoH(job->result, buffer, bytes);
    cuMemFree(buffer);
    cuStreamDestroy(stream);
    cuModuleUnload(mod);
out:
    free(host);
    return NULL;
}

static bool segment_exists(const char *communicator, unsigned world)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "/dev/shm/simgpu-comm-%u-%u-%s", (unsigned)geteuid(), world, communicator);
    return stat(path, &st) == 0;
}

/* four ranks on four threads: every rank gets the same sum, in rank order, over two rounds */
START_TEST(test_allreduce_sum)
{
    CUcontext ctx = own_context();
    char communicator[64];
    snprintf(communicator, sizeof(communicator), "check-sum-%d", (int)getpid());
    pthread_t threads[RANKS];
    rank_job jobs[RANKS];
    for (unsigned r = 0; r < RANKS; r++) {
        jobs[r] = (rank_job){communicator, r, RANKS, COUNT, ctx, malloc(COUNT * sizeof(float)), CUDA_ERROR_UNKNOWN};
        ck_assert_ptr_nonnull(jobs[r].result);
        ck_assert_int_eq(pthread_create(&threads[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (unsigned r = 0; r < RANKS; r++)
        ck_assert_int_eq(pthread_join(threads[r], NULL), 0);
    for (unsigned r = 0; r < RANKS; r++)
        CU_OK(jobs[r].rc);
    for (unsigned long long i = 0; i < COUNT; i++) {
        float expected = rank_value(0, i);
        for (unsigned r = 1; r < RANKS; r++)
            expected += rank_value(r, i);
        for (unsigned r = 0; r < RANKS; r++)
            if (memcmp(&jobs[r].result[i], &expected, sizeof(float)) != 0)
                ck_abort_msg("rank %u element %llu: %.9g, expected %.9g", r, i, (double)jobs[r].result[i],
                             (double)expected);
    }
    printf("allreduce_sum_f32: %d ranks x %llu floats: every rank holds the rank-ordered sum "
           "(element 12345: %.9g)\n",
           RANKS, COUNT, (double)jobs[0].result[12345]);
    ck_assert(!segment_exists(communicator, RANKS)); /* unlinked once every rank attached */
    for (unsigned r = 0; r < RANKS; r++)
        free(jobs[r].result);
    CU_OK(cuCtxDestroy(ctx));
}
END_TEST

/* rank 0 waits for rank 1 off the engine: another stream's kernel runs and completes
 * meanwhile, and the waiting burns no CPU; then rank 1 comes and both finish */
START_TEST(test_allreduce_engine_free)
{
    CUcontext ctx = own_context();
    CUmodule mod;
    CUfunction allreduce = function(&mod, "allreduce_sum_f32");
    CUfunction busy;
    CU_OK(cuModuleGetFunction(&busy, mod, "busy"));
    char name[64];
    snprintf(name, sizeof(name), "check-free-%d", (int)getpid());
    const char *communicator = name;
    CUstream rank_stream[2], other;
    CUdeviceptr buffer[2];
    unsigned long long count = 1000;
    unsigned world = 2, rank[2] = {0, 1};
    for (int r = 0; r < 2; r++) {
        float host[1000];
        for (int i = 0; i < 1000; i++)
            host[i] = (float)(i + 1000 * r);
        CU_OK(cuStreamCreate(&rank_stream[r], CU_STREAM_NON_BLOCKING));
        CU_OK(cuMemAlloc(&buffer[r], sizeof(host)));
        CU_OK(cuMemcpyHtoD(buffer[r], host, sizeof(host)));
    }
    CU_OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));

    simgpu_device_stats_t before, during, later;
    ck_assert_int_eq(simgpu_device_stats(0, &before), 0);
    void *params0[] = {&buffer[0], &count, &communicator, &rank[0], &world};
    uint64_t t0 = now_ns();
    CU_OK(cuLaunchKernel(allreduce, 1, 1, 1, 1, 1, 1, 0, rank_stream[0], params0, NULL));
    uint64_t launch_ns = now_ns() - t0;
    ck_assert_int_eq(cuStreamQuery(rank_stream[0]), CUDA_ERROR_NOT_READY);

    unsigned long long busy_ns = 20 * MS;
    void *busy_params[] = {&busy_ns};
    CU_OK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, other, busy_params, NULL));
    ck_assert_int_eq(stream_idle_within(other, 5000), CUDA_SUCCESS);
    ck_assert_int_eq(cuStreamQuery(rank_stream[0]), CUDA_ERROR_NOT_READY);

    ck_assert_int_eq(simgpu_device_stats(0, &during), 0);
    uint64_t cpu0 = process_cpu_ns();
    sleep_ms(300);
    uint64_t cpu_ns = process_cpu_ns() - cpu0;
    ck_assert_int_eq(simgpu_device_stats(0, &later), 0);
    ck_assert_int_eq(cuStreamQuery(rank_stream[0]), CUDA_ERROR_NOT_READY);
    printf("allreduce engine-free: rank 0's launch returned in %.3f ms; while it waited for rank 1, "
           "a 20 ms kernel of another stream completed (kernels %llu -> %llu), and over 300 ms "
           "the process used %.3f ms CPU, the device %.3f ms busy\n",
           (double)launch_ns / 1e6, (unsigned long long)before.kernels, (unsigned long long)during.kernels,
           (double)cpu_ns / 1e6, (double)(later.busy_ns - during.busy_ns) / 1e6);
    ck_assert_uint_eq(during.kernels, before.kernels + 1);
    ck_assert_uint_lt(cpu_ns, 15 * MS);
    ck_assert_uint_lt(later.busy_ns - during.busy_ns, 1 * MS);

    void *params1[] = {&buffer[1], &count, &communicator, &rank[1], &world};
    CU_OK(cuLaunchKernel(allreduce, 1, 1, 1, 1, 1, 1, 0, rank_stream[1], params1, NULL));
    for (int r = 0; r < 2; r++) {
        float host[1000];
        CU_OK(cuStreamSynchronize(rank_stream[r]));
        CU_OK(cuMemcpyDtoH(host, buffer[r], sizeof(host)));
        for (int i = 0; i < 1000; i++)
            ck_assert_float_eq(host[i], (float)(2 * i + 1000));
        CU_OK(cuMemFree(buffer[r]));
        CU_OK(cuStreamDestroy(rank_stream[r]));
    }
    CU_OK(cuStreamDestroy(other));
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuCtxDestroy(ctx));
}
END_TEST

/* a rank that never comes: the waiting one gives up after SIMGPU_COLLECTIVE_TIMEOUT_S
 * with CUDA_ERROR_LAUNCH_TIMEOUT at its next sync, and the segment is gone */
START_TEST(test_allreduce_timeout)
{
    setenv("SIMGPU_COLLECTIVE_TIMEOUT_S", "0.3", 1);
    CUcontext ctx = own_context();
    CUmodule mod;
    CUfunction allreduce = function(&mod, "allreduce_sum_f32");
    char name[64];
    snprintf(name, sizeof(name), "check-timeout-%d", (int)getpid());
    const char *communicator = name;
    CUdeviceptr buffer;
    unsigned long long count = 16;
    unsigned world = 2, rank = 0;
    CU_OK(cuMemAlloc(&buffer, count * sizeof(float)));
    void *params[] = {&buffer, &count, &communicator, &rank, &world};
    uint64_t t0 = now_ns();
    CU_OK(cuLaunchKernel(allreduce, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    ck_assert_int_eq(cuStreamSynchronize(NULL), CUDA_ERROR_LAUNCH_TIMEOUT);
    uint64_t waited = now_ns() - t0;
    printf("allreduce timeout: rank 0 alone gave up after %.3f s (limit 0.3 s): CUDA_ERROR_LAUNCH_TIMEOUT\n",
           (double)waited / 1e9);
    ck_assert_uint_ge(waited, 300 * MS);
    ck_assert_uint_lt(waited, 5000 * MS);
    ck_assert(!segment_exists(name, world));
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuCtxDestroy(ctx));
    unsetenv("SIMGPU_COLLECTIVE_TIMEOUT_S");
}
END_TEST

Suite *simgpu_collective_suite(void)
{
    Suite *s = suite_create("simgpu-collective");
    TCase *tc = tcase_create("host-services");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_wait_off_engine);
    tcase_add_test(tc, test_kernel_fail_sticky);
    tcase_add_test(tc, test_abi1_pack);
    tcase_add_test(tc, test_allreduce_sum);
    tcase_add_test(tc, test_allreduce_engine_free);
    tcase_add_test(tc, test_allreduce_timeout);
    suite_add_tcase(s, tc);
    return s;
}
