/* Unit tests of simgpu (tools/simgpu): the driver API as one process sees it.
 * Multi-process behaviour (shared accounting, engine contention, VMM sharing,
 * crash recovery) is tested by tests/integration/simgpu_*.sh.
 *
 * Each test runs in its own forked process (Check's fork mode); they share one
 * simulated device through a segment named after this runner's pid, removed at
 * the end. */
#include <check.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define MEMORY_MB 1024ull
#define MiB (1ull << 20)

#define CU_OK(call) ck_assert_int_eq((call), CUDA_SUCCESS)

Suite *simgpu_collective_suite(void); /* check_simgpu_collective.c */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static CUcontext setup(void)
{
    CUcontext ctx;
    CU_OK(cuInit(0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuCtxSetCurrent(ctx));
    return ctx;
}

static CUfunction get_function(CUmodule *mod, const char *name)
{
    static const char image[] = "not a real fatbin: simgpu does not parse images";
    CUfunction f;
    CU_OK(cuModuleLoadData(mod, image));
    CU_OK(cuModuleGetFunction(&f, *mod, name));
    return f;
}

/* Launches busy(ns) on stream. */
static void launch_busy(CUfunction busy, unsigned long long ns, CUstream stream)
{
    void *params[] = {&ns};
    CU_OK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
}

START_TEST(test_init_and_devices)
{
    int count, version, value;
    ck_assert_int_eq(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    ck_assert_int_eq(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuInit(0));
    CU_OK(cuDriverGetVersion(&version));
    ck_assert_int_eq(version, 13000);
    CU_OK(cuDeviceGetCount(&count));
    ck_assert_int_eq(count, 1);
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, 0));
    ck_assert_int_eq(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
    char name[64];
    CU_OK(cuDeviceGetName(name, sizeof(name), dev));
    ck_assert_str_eq(name, "salus simgpu");
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    ck_assert_int_ge(value, 7);
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    ck_assert_int_gt(value, 0);
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    ck_assert_int_eq(value, 1);
    ck_assert_int_eq(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, dev),
                     CUDA_ERROR_INVALID_VALUE);
    size_t total;
    CU_OK(cuDeviceTotalMem(&total, dev));
    ck_assert_uint_eq(total, MEMORY_MB * MiB);
    CUuuid uuid;
    CU_OK(cuDeviceGetUuid(&uuid, dev));
}
END_TEST

START_TEST(test_contexts)
{
    CUdeviceptr p;
    CU_OK(cuInit(0));
    ck_assert_int_eq(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);

    unsigned flags;
    int active;
    CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    ck_assert_int_eq(active, 0);
    CU_OK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
    CUcontext primary, again, current;
    CU_OK(cuDevicePrimaryCtxRetain(&primary, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&again, 0));
    ck_assert_ptr_eq(primary, again);
    CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    ck_assert_int_eq(active, 1);
    ck_assert_uint_eq(flags, CU_CTX_SCHED_BLOCKING_SYNC);

    CUcontext created;
    CU_OK(cuCtxCreate(&created, NULL, 0, 0));
    CU_OK(cuCtxGetCurrent(&current));
    ck_assert_ptr_eq(current, created);
    CU_OK(cuCtxPushCurrent(primary));
    CU_OK(cuCtxGetCurrent(&current));
    ck_assert_ptr_eq(current, primary);
    CUdevice dev = -1;
    CU_OK(cuCtxGetDevice(&dev));
    ck_assert_int_eq(dev, 0);
    CU_OK(cuCtxPopCurrent(&current));
    ck_assert_ptr_eq(current, primary);
    CU_OK(cuMemAlloc(&p, 4096));  /* owned by `created`, freed with it */
    CU_OK(cuCtxSynchronize());
    CU_OK(cuCtxDestroy(created));
    CU_OK(cuCtxGetCurrent(&current));
    ck_assert_ptr_null(current);
    ck_assert_int_eq(cuCtxPopCurrent(&current), CUDA_ERROR_INVALID_CONTEXT);

    CU_OK(cuDevicePrimaryCtxRelease(0));
    CU_OK(cuDevicePrimaryCtxRelease(0));
    ck_assert_int_eq(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    ck_assert_int_eq(active, 0);
    CU_OK(cuDevicePrimaryCtxReset(0));
}
END_TEST

START_TEST(test_memory)
{
    setup();
    size_t free0, total, free1;
    CU_OK(cuMemGetInfo(&free0, &total));
    ck_assert_uint_eq(total, MEMORY_MB * MiB);

    enum { N = 1 << 16 };
    CUdeviceptr a, b;
    CU_OK(cuMemAlloc(&a, N * sizeof(unsigned)));
    CU_OK(cuMemAlloc(&b, N * sizeof(unsigned)));
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_le(free1, free0 - 2 * N * sizeof(unsigned));

    static unsigned host[N];
    CU_OK(cuMemsetD32(a, 0xdeadbeef, N));
    CU_OK(cuMemcpyDtoD(b, a, N * sizeof(unsigned)));
    CU_OK(cuMemcpyDtoH(host, b, N * sizeof(unsigned)));
    ck_assert_uint_eq(host[0], 0xdeadbeef);
    ck_assert_uint_eq(host[N - 1], 0xdeadbeef);
    for (unsigned i = 0; i < N; i++)
        host[i] = i;
    CU_OK(cuMemcpyHtoD(a, host, sizeof(host)));
    CU_OK(cuMemsetD8(b, 0x11, 4));
    CU_OK(cuMemsetD16(b + 4, 0x2222, 2));
    memset(host, 0, sizeof(host));
    CU_OK(cuMemcpyDtoH(host, a, sizeof(host)));
    ck_assert_uint_eq(host[12345], 12345);
    CU_OK(cuMemcpyDtoH(host, b, 8));
    ck_assert_uint_eq(host[0], 0x11111111);
    ck_assert_uint_eq(host[1], 0x22222222);

    CUdeviceptr base;
    size_t size;
    CU_OK(cuMemGetAddressRange(&base, &size, a + 100));
    ck_assert_uint_eq(base, a);
    ck_assert_uint_eq(size, N * sizeof(unsigned));

    /* beyond the device's free memory */
    CUdeviceptr big;
    ck_assert_int_eq(cuMemAlloc(&big, (MEMORY_MB + 1) * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_int_eq(cuMemAlloc(&big, 0), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr pitched;
    size_t pitch;
    CU_OK(cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4));
    ck_assert_uint_ge(pitch, 1000);
    CU_OK(cuMemFree(pitched));

    /* pointer attributes */
    unsigned type = 0;
    int ordinal = -1;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_DEVICE);
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    CUdeviceptr start = 0;
    void *values[] = {&type, &ordinal, &start};
    CU_OK(cuPointerGetAttributes(3, attrs, values, a + 8));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_DEVICE);
    ck_assert_int_eq(ordinal, 0);
    ck_assert_uint_eq(start, a);
    int on_stack;
    ck_assert_int_eq(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           (CUdeviceptr)(uintptr_t)&on_stack),
                     CUDA_ERROR_INVALID_VALUE);

    /* host memory */
    void *pinned;
    CUdeviceptr mapped;
    CU_OK(cuMemHostAlloc(&pinned, 8192, CU_MEMHOSTALLOC_DEVICEMAP));
    CU_OK(cuMemHostGetDevicePointer(&mapped, pinned, 0));
    ck_assert_uint_eq(mapped, (CUdeviceptr)(uintptr_t)pinned);
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, mapped));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_HOST);
    CU_OK(cuMemsetD8(mapped, 7, 8192));
    ck_assert_int_eq(((unsigned char *)pinned)[8191], 7);
    CU_OK(cuMemFreeHost(pinned));
    void *host2;
    CU_OK(cuMemAllocHost(&host2, 100));
    CU_OK(cuMemFreeHost(host2));

    static char registered[65536];
    CU_OK(cuMemHostRegister(registered, sizeof(registered), 0));
    ck_assert_int_eq(cuMemHostRegister(registered + 10, 10, 0),
                     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CU_OK(cuMemHostUnregister(registered));
    ck_assert_int_eq(cuMemHostUnregister(registered), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

    CU_OK(cuMemFree(a));
    CU_OK(cuMemFree(b));
    ck_assert_int_eq(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free1, free0);
}
END_TEST

static void CUDA_CB append_host(void *data)
{
    int *log = data;
    log[++log[0]] = 1;
}

START_TEST(test_streams_and_async)
{
    setup();
    CUmodule mod;
    CUfunction busy = get_function(&mod, "busy");
    CUstream s, t;
    CU_OK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CU_OK(cuStreamCreateWithPriority(&t, CU_STREAM_NON_BLOCKING, -1));
    int priority;
    unsigned flags;
    CU_OK(cuStreamGetPriority(t, &priority));
    ck_assert_int_eq(priority, -1);
    CU_OK(cuStreamGetFlags(t, &flags));
    ck_assert_uint_eq(flags, CU_STREAM_NON_BLOCKING);

    /* a stream is busy while its kernel occupies the device */
    launch_busy(busy, 30000000ull, s);
    ck_assert_int_eq(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuStreamQuery(s));

    /* async set, copy, host function and stream-ordered allocation, in order */
    CUdeviceptr d;
    CU_OK(cuMemAllocAsync(&d, 4096, t));
    static unsigned out[1024];
    int log[4] = {0};
    CU_OK(cuMemsetD32Async(d, 42, 1024, t));
    CU_OK(cuMemcpyDtoHAsync(out, d, sizeof(out), t));
    CU_OK(cuLaunchHostFunc(t, append_host, log));
    CU_OK(cuMemFreeAsync(d, t));
    CU_OK(cuStreamSynchronize(t));
    ck_assert_uint_eq(out[1023], 42);
    ck_assert_int_eq(log[0], 1);

    /* legacy default stream: a synchronous copy waits for earlier work on the
     * blocking stream s, not for the non-blocking stream t */
    CUdeviceptr e;
    CU_OK(cuMemAlloc(&e, 64));
    uint64_t t0 = now_ns();
    launch_busy(busy, 40000000ull, s);
    CU_OK(cuMemcpyDtoH(out, e, 64));
    ck_assert_uint_ge(now_ns() - t0, 39000000ull);

    /* wait on an event of another stream */
    CUevent ev;
    CU_OK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    launch_busy(busy, 20000000ull, s);
    CU_OK(cuEventRecord(ev, s));
    CU_OK(cuStreamWaitEvent(t, ev, 0));
    CU_OK(cuLaunchHostFunc(t, append_host, log));
    CU_OK(cuStreamSynchronize(t));
    CU_OK(cuEventQuery(ev));
    ck_assert_int_eq(log[0], 2);

    /* the per-thread default stream and the special handles */
    CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CU_OK(cuStreamSynchronize(CU_STREAM_LEGACY));
    CUcontext sctx;
    CU_OK(cuStreamGetCtx(s, &sctx));
    CU_OK(cuEventDestroy(ev));
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuStreamDestroy(t));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuModuleUnload(mod));
}
END_TEST

/* Device time (events) and wall time of busy(ns) kernels, in ms: the best of 5
 * runs, since a loaded machine only ever adds to either; every run must take
 * at least the modelled time (ns / speed). */
static float busy_best_ms(CUfunction busy, unsigned long long ns, float speed, float *wall_ms)
{
    CUevent start, end;
    CU_OK(cuEventCreate(&start, 0));
    CU_OK(cuEventCreate(&end, 0));
    float best_device = 1e9f, best_wall = 1e9f;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = now_ns();
        CU_OK(cuEventRecord(start, NULL));
        launch_busy(busy, ns, NULL);
        CU_OK(cuEventRecord(end, NULL));
        CU_OK(cuEventSynchronize(end));
        float wall = (float)(now_ns() - t0) / 1e6f, device;
        CU_OK(cuEventElapsedTime(&device, start, end));
        ck_assert_float_ge(device, (float)ns / 1e6f / speed * 0.999f);  /* never faster */
        ck_assert_float_ge(wall, (float)ns / 1e6f / speed * 0.999f);
        best_device = device < best_device ? device : best_device;
        best_wall = wall < best_wall ? wall : best_wall;
    }
    CU_OK(cuEventDestroy(start));
    CU_OK(cuEventDestroy(end));
    *wall_ms = best_wall;
    return best_device;
}

START_TEST(test_kernel_time)
{
    setup();
    CUmodule mod;
    CUfunction busy = get_function(&mod, "busy");
    float wall;
    float device = busy_best_ms(busy, 10000000ull, 1.0f, &wall);
    ck_assert_float_ge(device, 9.0f);
    ck_assert_float_le(device, 11.0f);
    ck_assert_float_ge(wall, 9.0f);
    ck_assert_float_le(wall, 11.0f);

    CUevent a, b;
    float ms;
    CU_OK(cuEventCreate(&a, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuEventCreate(&b, 0));
    CU_OK(cuEventRecord(a, NULL));
    CU_OK(cuEventRecord(b, NULL));
    CU_OK(cuEventSynchronize(b));
    ck_assert_int_eq(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuEventDestroy(a));
    CU_OK(cuEventDestroy(b));

    /* a kernel without a cost model occupies the device for its CPU time */
    CUfunction spin;
    CU_OK(cuModuleGetFunction(&spin, mod, "spin"));
    unsigned long long ns = 20000000ull;
    void *params[] = {&ns};
    simgpu_device_stats_t before, after;
    ck_assert_int_eq(simgpu_device_stats(0, &before), 0);
    CU_OK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CU_OK(cuCtxSynchronize());
    ck_assert_int_eq(simgpu_device_stats(0, &after), 0);
    ck_assert_uint_eq(after.kernels, before.kernels + 1);
    ck_assert_uint_ge(after.busy_ns - before.busy_ns, 20000000ull);
    ck_assert_uint_eq(after.total_bytes, MEMORY_MB * MiB);
    CU_OK(cuModuleUnload(mod));
}
END_TEST

/* The measurement of test_kernel_time_speed, run in a fresh process (main's --speed-check):
 * SIMGPU_SPEED is read once per process, and under CK_FORK=no (the sanitizer run) every test
 * shares one process. */
START_TEST(test_speed_measure)
{
    setenv("SIMGPU_SPEED", "4", 1);
    setup();
    CUmodule mod;
    CUfunction busy = get_function(&mod, "busy");
    float wall;
    float device = busy_best_ms(busy, 40000000ull, 4.0f, &wall);  /* 40 ms at 4x: 10 ms */
    ck_assert_float_ge(device, 9.0f);
    ck_assert_float_le(device, 11.0f);
    CU_OK(cuModuleUnload(mod));
}
END_TEST

static int speed_check(void)
{
    Suite *suite = suite_create("simgpu-speed");
    TCase *tc = tcase_create("speed");
    tcase_add_test(tc, test_speed_measure);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? 1 : 0;
}

START_TEST(test_kernel_time_speed)
{
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        execl("/proc/self/exe", "check_simgpu", "--speed-check", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "at SIMGPU_SPEED=4 a 40 ms kernel did not take 10 ms +- 10%% of device time");
}
END_TEST

START_TEST(test_modules_and_launch)
{
    setup();
    CUmodule mod;
    CUfunction add = get_function(&mod, "vector_add");
    CUfunction missing;
    ck_assert_int_eq(cuModuleGetFunction(&missing, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    int value;
    CU_OK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
    ck_assert_int_eq(value, 1024);
    const char *name;
    CU_OK(cuFuncGetName(&name, add));
    ck_assert_str_eq(name, "vector_add");

    enum { N = 1000 };
    float ha[N], hb[N], hc[N];
    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = 0.5f;
    }
    CUdeviceptr a, b, c;
    CU_OK(cuMemAlloc(&a, sizeof(ha)));
    CU_OK(cuMemAlloc(&b, sizeof(hb)));
    CU_OK(cuMemAlloc(&c, sizeof(hc)));
    CU_OK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CU_OK(cuMemcpyHtoD(b, hb, sizeof(hb)));
    int n = N;
    void *params[] = {&a, &b, &c, &n};
    CU_OK(cuLaunchKernel(add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CU_OK(cuMemcpyDtoH(hc, c, sizeof(hc)));
    ck_assert_float_eq(hc[999], 999.5f);

    /* invalid launches */
    ck_assert_int_eq(cuLaunchKernel(add, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    void *extra[] = {CU_LAUNCH_PARAM_END};
    ck_assert_int_eq(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra),
                     CUDA_ERROR_NOT_SUPPORTED);

    /* a global shared with the pack's kernels */
    CUdeviceptr scale_ptr;
    size_t bytes;
    CU_OK(cuModuleGetGlobal(&scale_ptr, &bytes, mod, "simgpu_test_scale"));
    ck_assert_uint_eq(bytes, sizeof(float));
    float three = 3.0f;
    CU_OK(cuMemcpyHtoD(scale_ptr, &three, sizeof(three)));
    ck_assert_int_eq(cuModuleGetGlobal(&scale_ptr, &bytes, mod, "no_such_global"),
                     CUDA_ERROR_NOT_FOUND);

    /* the library path, with a CUkernel passed as a CUfunction (as the runtime does) */
    CUlibrary lib;
    CUkernel kernel;
    static const char fatbin[] = "fatbin";
    CU_OK(cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CU_OK(cuLibraryGetKernel(&kernel, lib, "scale"));
    void *scale_params[] = {&c, &n};
    CUlaunchConfig config = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                             .blockDimY = 1, .blockDimZ = 1};
    CU_OK(cuLaunchKernelEx(&config, (CUfunction)kernel, scale_params, NULL));
    CU_OK(cuMemcpyDtoH(hc, c, sizeof(hc)));
    ck_assert_float_eq(hc[1], 4.5f);
    CUfunction from_kernel;
    CU_OK(cuKernelGetFunction(&from_kernel, kernel));
    CU_OK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, from_kernel));
    CU_OK(cuLibraryUnload(lib));
    CU_OK(cuModuleUnload(mod));
    ck_assert_int_eq(cuModuleLoad(&mod, "/nonexistent/file.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
}
END_TEST

START_TEST(test_vmm)
{
    setup();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran;
    CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    ck_assert_uint_gt(gran, 0);
    size_t size = 4 * gran, free0, free1, total;
    CU_OK(cuMemGetInfo(&free0, &total));

    CUmemGenericAllocationHandle handle, imported;
    CU_OK(cuMemCreate(&handle, size, &prop, 0));
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free0 - free1, size);
    ck_assert_int_eq(cuMemCreate(&imported, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr va, vb;
    CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CU_OK(cuMemAddressReserve(&vb, size, 0, 0, 0));
    ck_assert_uint_eq(va % gran, 0);
    CU_OK(cuMemMap(va, size, 0, handle, 0));
    ck_assert_int_eq(cuMemMap(va, size, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, size, &access, 1));
    CU_OK(cuMemsetD32(va, 0x5a5a5a5a, size / 4));

    unsigned type;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 100));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_DEVICE);
    unsigned long long flags;
    CU_OK(cuMemGetAccess(&flags, &prop.location, va));
    ck_assert_uint_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    /* export and import (within one process here; across processes in
     * tests/integration/simgpu_multiprocess.sh): the same bytes, counted once */
    int fd = -1;
    CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    ck_assert_int_ge(fd, 0);
    CU_OK(cuMemImportFromShareableHandle(&imported, (void *)(uintptr_t)fd,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free0 - free1, size);
    CU_OK(cuMemMap(vb, size, 0, imported, 0));
    CU_OK(cuMemSetAccess(vb, size, &access, 1));
    unsigned word = 0;
    CU_OK(cuMemcpyDtoH(&word, vb + size - 4, 4));
    ck_assert_uint_eq(word, 0x5a5a5a5a);
    CU_OK(cuMemsetD32(vb, 7, 1));
    CU_OK(cuMemcpyDtoH(&word, va, 4));
    ck_assert_uint_eq(word, 7);

    CUmemGenericAllocationHandle retained;
    CU_OK(cuMemRetainAllocationHandle(&retained, (void *)(uintptr_t)(va + 8)));
    ck_assert_uint_eq(retained, handle);
    CU_OK(cuMemRelease(retained));

    CU_OK(cuMemUnmap(vb, size));
    CU_OK(cuMemRelease(imported));
    CU_OK(cuMemRelease(handle));  /* still mapped at va: stays alive */
    CU_OK(cuMemcpyDtoH(&word, va + 4, 4));
    ck_assert_uint_eq(word, 0x5a5a5a5a);
    CU_OK(cuMemUnmap(va, size));
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free1, free0);
    CU_OK(cuMemAddressFree(va, size));
    CU_OK(cuMemAddressFree(vb, size));
}
END_TEST

/* simgpu_vmm_adopt_fd: a process that maps a chunk whose creator is gone takes its charge */
START_TEST(test_vmm_adopt)
{
    setup();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran, free0, free1, total;
    CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = 2 * gran;
    CU_OK(cuMemGetInfo(&free0, &total));
    CUmemGenericAllocationHandle handle, imported;
    CUdeviceptr va, vb;
    int fd = -1;
    CU_OK(cuMemCreate(&handle, size, &prop, 0));
    CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(cuMemImportFromShareableHandle(&imported, (void *)(uintptr_t)fd,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CU_OK(cuMemAddressReserve(&vb, size, 0, 0, 0));
    CU_OK(cuMemMap(va, size, 0, handle, 0));
    CU_OK(cuMemMap(vb, size, 0, imported, 0));
    /* the creator's mapping is charged: adopting charges nothing more */
    ck_assert_int_eq(simgpu_vmm_adopt_fd(fd), 0);
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free0 - free1, size);
    /* the creator's handle goes: the bytes stay mapped at vb but are counted by nobody */
    CU_OK(cuMemUnmap(va, size));
    CU_OK(cuMemRelease(handle));
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free1, free0);
    ck_assert_int_eq(simgpu_vmm_adopt_fd(fd), 0); /* now the importer is charged */
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free0 - free1, size);
    ck_assert_int_eq(simgpu_vmm_adopt_fd(fd), 0); /* once */
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free0 - free1, size);
    int plain = memfd_create("simgpu-vmm-d0", MFD_CLOEXEC);
    ck_assert_int_ge(plain, 0);
    ck_assert_int_eq(simgpu_vmm_adopt_fd(plain), -ENOENT); /* no mapping of it here */
    ck_assert_int_eq(simgpu_vmm_adopt_fd(-1), -EINVAL);
    close(plain);
    /* the charge goes with the importer's last reference */
    CU_OK(cuMemUnmap(vb, size));
    CU_OK(cuMemRelease(imported));
    CU_OK(cuMemGetInfo(&free1, &total));
    ck_assert_uint_eq(free1, free0);
    close(fd);
    CU_OK(cuMemAddressFree(va, size));
    CU_OK(cuMemAddressFree(vb, size));
}
END_TEST

typedef CUresult (*zero_args_fn)(void *, void *, void *, void *, void *, void *);

START_TEST(test_get_proc_address)
{
    void *fn, *lib = dlopen(SIMGPU_LIBRARY_PATH, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(lib);
    CUdriverProcAddressQueryResult status;

    struct { const char *name; int version; cuuint64_t flags; const char *symbol; } cases[] = {
        {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2"},
        {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
        {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3"},
        {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
        {"cuCtxCreate", 2000, 0, "cuCtxCreate"},
        {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
        {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
        {"cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds"},
        {"cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyHtoD_v2"},
        {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
        {"cuStreamGetCtx", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamGetCtx_v2_ptsz"},
        {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
        {"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"},
        {"cuCtxCreate", 12050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuCtxCreate_v4"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CU_OK(cuGetProcAddress(cases[i].name, &fn, cases[i].version, cases[i].flags, &status));
        ck_assert_int_eq(status, CU_GET_PROC_ADDRESS_SUCCESS);
        ck_assert_msg(fn == dlsym(lib, cases[i].symbol), "%s@%d -> %s", cases[i].name,
                      cases[i].version, cases[i].symbol);
    }
    ck_assert_int_eq(cuGetProcAddress("cuMemAlloc", &fn, 2000, 0, &status), CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    ck_assert_int_eq(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, &status),
                     CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    ck_assert_ptr_null(fn);

    /* something simgpu does not implement: a stub that says so */
    CU_OK(cuGetProcAddress("cuGraphCreate", &fn, 13000, 0, &status));
    ck_assert_ptr_nonnull(fn);
    ck_assert_int_eq(((zero_args_fn)fn)(0, 0, 0, 0, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
    const void *table = &fn;
    CUuuid id = {{0}};
    ck_assert_int_eq(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);

    /* every row of the entry-point list is exported under its name */
#define SIMGPU_FN(base, version, symbol)                                       \
    ck_assert_msg(dlsym(lib, #symbol) != NULL, "%s is not exported", #symbol);  \
    CU_OK(cuGetProcAddress(#base, &fn, version, 0, &status));
#define SIMGPU_PTDS(base, version, symbol)                                     \
    ck_assert_msg(dlsym(lib, #symbol) != NULL, "%s is not exported", #symbol);
#define SIMGPU_PTSZ SIMGPU_PTDS
#include "simgpu-api.def"
#undef SIMGPU_FN
#undef SIMGPU_PTDS
#undef SIMGPU_PTSZ
    ck_assert_ptr_nonnull(dlsym(lib, "simgpu_device_stats"));

    const char *text;
    CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text));
    ck_assert_str_eq(text, "CUDA_ERROR_OUT_OF_MEMORY");
    CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text));
    ck_assert_str_eq(text, "out of memory");
    ck_assert_int_eq(cuGetErrorName((CUresult)123456, &text), CUDA_ERROR_INVALID_VALUE);
}
END_TEST


/* every entry point of cuda.h simgpu-api.def does not list is exported and answers
 * CUDA_ERROR_NOT_SUPPORTED (the list is generated from cuda.h and the .def) */
START_TEST(test_exported_stubs)
{
    setup();
    void *lib = dlopen(SIMGPU_LIBRARY_PATH, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(lib);
    unsigned stubs = 0;
#define SIMGPU_EXPORTED_STUB(name)                                                             \
    {                                                                                          \
        void *fn = dlsym(lib, #name);                                                          \
        ck_assert_msg(fn != NULL, "%s is not exported", #name);                                \
        ck_assert_msg(((zero_args_fn)fn)(0, 0, 0, 0, 0, 0) == CUDA_ERROR_NOT_SUPPORTED,       \
                      "%s does not answer CUDA_ERROR_NOT_SUPPORTED", #name);                   \
        stubs++;                                                                               \
    }
#include "simgpu-exported-stubs.inc"
#undef SIMGPU_EXPORTED_STUB
    ck_assert_uint_gt(stubs, 100);
    /* an implemented entry point is not among them */
    int count = 0;
    CU_OK(((CUresult (*)(int *))dlsym(lib, "cuDeviceGetCount"))(&count));
}
END_TEST

START_TEST(test_device_attributes)
{
    setup();
    int value = -7;
    /* every attribute cuda.h names has a row */
#define SIMGPU_ATTRIBUTE(name)                                                                 \
    ck_assert_msg(cuDeviceGetAttribute(&value, name, 0) == CUDA_SUCCESS, "%s has no value", #name);
#include "simgpu-attributes.inc"
#undef SIMGPU_ATTRIBUTE
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    ck_assert_int_eq(value, 108);
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 0));
    ck_assert_int_eq(value, 164 * 1024);
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
    ck_assert_int_eq(value, 0x10);
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_NUMA_ID, 0));
    ck_assert_int_eq(value, -1);
    ck_assert_int_eq(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuDeviceGetAttribute(&value, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 99), CUDA_ERROR_INVALID_DEVICE);
}
END_TEST

static size_t CUDA_CB shared_for_block(int block_size)
{
    return (size_t)block_size * 64;   /* 64 bytes of dynamic shared memory per thread */
}

START_TEST(test_occupancy)
{
    setup();
    CUmodule mod;
    CUfunction f = get_function(&mod, "vector_add");
    int blocks = -1, grid = -1, block = -1;
    /* threads per SM (2048) bound large blocks; blocks per SM (32) bound small ones */
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 1024, 0));
    ck_assert_int_eq(blocks, 2);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0));
    ck_assert_int_eq(blocks, 8);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 32, 0));
    ck_assert_int_eq(blocks, 32);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 33, 0));   /* two warps */
    ck_assert_int_eq(blocks, 32);
    /* shared memory: 164 KiB per SM, 1 KiB reserved per block */
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 40 * 1024));
    ck_assert_int_eq(blocks, 4);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 128, 0,
                                                               CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
    ck_assert_int_eq(blocks, 16);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 1025, 0));
    ck_assert_int_eq(blocks, 0);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 64 * 1024)); /* over 48 KiB */
    ck_assert_int_eq(blocks, 0);
    CU_OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 * 1024));
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 64 * 1024)); /* opted in */
    ck_assert_int_eq(blocks, 2);
    CU_OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0));

    CU_OK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
    ck_assert_int_eq(block, 1024);
    ck_assert_int_eq(grid, 2 * 108);
    CU_OK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 100));   /* limit, not a warp multiple */
    ck_assert_int_eq(block, 64);
    ck_assert_int_eq(grid, 32 * 108);
    /* 64 B per thread: 1024 threads would take 64 KiB (over 48 KiB); 768 fit twice (threads),
     * 640 three times (threads), 512 four times (33 KiB each in 164 KiB: all 2048 threads),
     * and smaller blocks reach 2048 too: the largest of those wins */
    CU_OK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, shared_for_block, 0, 0, 0));
    ck_assert_int_eq(block, 512);
    ck_assert_int_eq(grid, 4 * 108);

    size_t available = 0;
    CU_OK(cuOccupancyAvailableDynamicSMemPerBlock(&available, f, 4, 128));
    ck_assert_uint_eq(available, 40 * 1024);
    CU_OK(cuOccupancyAvailableDynamicSMemPerBlock(&available, f, 1, 128));
    ck_assert_uint_eq(available, 48 * 1024);
    CU_OK(cuOccupancyAvailableDynamicSMemPerBlock(&available, f, 3, 1024));   /* cannot be resident */
    ck_assert_uint_eq(available, 0);

    ck_assert_int_eq(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, NULL, 128, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    ck_assert_int_eq(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 128, 0, 8),
                     CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuOccupancyMaxPotentialBlockSize(NULL, &block, f, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);

    const char *name = NULL;
    CU_OK(cuFuncGetName(&name, f));
    ck_assert_str_eq(name, "vector_add");
    CU_OK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
    CU_OK(cuModuleUnload(mod));
}
END_TEST

START_TEST(test_link_and_load_ex)
{
    setup();
    CUlinkState state = (CUlinkState)&state;
    ck_assert_int_eq(cuLinkCreate(0, NULL, NULL, &state), CUDA_ERROR_JIT_COMPILER_NOT_FOUND);
    ck_assert_ptr_null(state);
    ck_assert_int_eq(cuLinkCreate(0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuLinkAddData(NULL, CU_JIT_INPUT_PTX, "", 1, "x", 0, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_int_eq(cuLinkAddFile(NULL, CU_JIT_INPUT_PTX, "x.ptx", 0, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    void *cubin = &cubin;
    size_t size = 1;
    ck_assert_int_eq(cuLinkComplete(NULL, &cubin, &size), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_int_eq(cuLinkDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);

    /* JIT options are accepted with any image; globals come from the packs */
    static const char image[] = "placeholder";
    char log[64] = "";
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, (void *)(uintptr_t)sizeof log};
    CUmodule mod;
    CU_OK(cuModuleLoadDataEx(&mod, image, 2, options, values));
    CUdeviceptr global;
    size_t bytes = 0;
    CU_OK(cuModuleGetGlobal(&global, &bytes, mod, "simgpu_test_scale"));
    ck_assert_uint_eq(bytes, sizeof(float));
    ck_assert_int_eq(cuModuleGetGlobal(&global, &bytes, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);
    CU_OK(cuModuleUnload(mod));
    CU_OK(cuModuleLoadFatBinary(&mod, image));
    CU_OK(cuModuleUnload(mod));
}
END_TEST

START_TEST(test_pitched_copies)
{
    setup();
    enum { W = 5, H = 4, D = 3, PITCH = 64 };
    CUdeviceptr dev;
    CU_OK(cuMemAlloc(&dev, PITCH * H * D));
    CU_OK(cuMemsetD8(dev, 0, PITCH * H * D));
    unsigned char host[D][H][W], back[D][H][W];
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                host[z][y][x] = (unsigned char)(z * 100 + y * 10 + x);
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = host;
    p.srcPitch = W;
    p.srcHeight = H;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = dev;
    p.dstPitch = PITCH;
    p.dstHeight = H;
    p.WidthInBytes = W;
    p.Height = H;
    p.Depth = D;
    CU_OK(cuMemcpy3D(&p));
    const unsigned char *bytes = (const unsigned char *)(uintptr_t)dev;
    ck_assert_int_eq(bytes[2 * PITCH * H + 3 * PITCH + 4], 234);   /* z 2, y 3, x 4 */
    ck_assert_int_eq(bytes[W], 0);                                  /* the pitch's padding */

    /* back with a 2-D copy per slice, the last slice from an offset on a stream */
    memset(back, 0xff, sizeof(back));
    CUDA_MEMCPY2D q;
    memset(&q, 0, sizeof(q));
    q.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    q.srcDevice = dev;
    q.srcPitch = PITCH;
    q.srcY = 2 * H;                      /* slice 2 as rows 8..11 */
    q.dstMemoryType = CU_MEMORYTYPE_HOST;
    q.dstHost = back[2];
    q.dstPitch = W;
    q.WidthInBytes = W;
    q.Height = H;
    CUstream stream;
    CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemcpy2DAsync(&q, stream));
    CU_OK(cuStreamSynchronize(stream));
    ck_assert_int_eq(memcmp(back[2], host[2], sizeof(host[2])), 0);
    q.srcY = 0;
    q.srcXInBytes = 1;                   /* a sub-rectangle: columns 1..4 */
    q.WidthInBytes = W - 1;
    q.dstHost = back[0];
    CU_OK(cuMemcpy2DUnaligned(&q));
    ck_assert_int_eq(back[0][3][0], 31);
    ck_assert_int_eq(back[0][3][3], 34);

    /* bad shapes: rows wider than the pitch, a CUDA array, a NULL pointer */
    q.srcXInBytes = 0;
    q.WidthInBytes = PITCH + 1;
    q.dstPitch = PITCH + 1;
    ck_assert_int_eq(cuMemcpy2D(&q), CUDA_ERROR_INVALID_VALUE);
    q.WidthInBytes = W;
    q.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    ck_assert_int_eq(cuMemcpy2D(&q), CUDA_ERROR_NOT_SUPPORTED);
    q.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    q.srcDevice = 0;
    ck_assert_int_eq(cuMemcpy2D(&q), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);
    p.srcHeight = H - 1;                 /* slices overlap */
    ck_assert_int_eq(cuMemcpy3D(&p), CUDA_ERROR_INVALID_VALUE);

    /* pitched sets: 3 rows of 4 elements, 64 bytes apart; the rest untouched */
    CU_OK(cuMemsetD8(dev, 0, PITCH * H * D));
    CU_OK(cuMemsetD2D32(dev, PITCH, 0xdeadbeef, 4, 3));
    CU_OK(cuMemsetD2D16Async(dev + 16, PITCH, 0x1234, 2, 3, stream));
    CU_OK(cuMemsetD2D8Async(dev + 20, PITCH, 0x77, 3, 3, stream));
    CU_OK(cuStreamSynchronize(stream));
    const uint32_t *words = (const uint32_t *)(uintptr_t)dev;
    ck_assert_uint_eq(words[2 * PITCH / 4 + 3], 0xdeadbeef);
    ck_assert_uint_eq(words[2 * PITCH / 4 + 4], 0x12341234);
    ck_assert_uint_eq(words[2 * PITCH / 4 + 5], 0x00777777);
    ck_assert_uint_eq(words[3 * PITCH / 4], 0);          /* the fourth row */
    ck_assert_uint_eq(words[6], 0);                      /* past the 2-D set's width */
    ck_assert_int_eq(cuMemsetD2D32(dev, 8, 1, 4, 2), CUDA_ERROR_INVALID_VALUE);   /* pitch < row */
    ck_assert_int_eq(cuMemsetD2D32(dev + 2, PITCH, 1, 4, 2), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuStreamDestroy(stream));
    CU_OK(cuMemFree(dev));
}
END_TEST

/* runs `check_simgpu MODE FD` (a fresh process: a forked child may not use the parent's
 * driver state), sends it the handle; returns its exit status (-1 if it did not exit) */
static int ipc_run_importer(const CUipcMemHandle *handle, const char *mode)
{
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(pipefd[1]);
        char fd_text[16];
        snprintf(fd_text, sizeof(fd_text), "%d", pipefd[0]);
        execl("/proc/self/exe", "check_simgpu", mode, fd_text, (char *)NULL);
        _exit(99);
    }
    close(pipefd[0]);
    ck_assert_int_eq(write(pipefd[1], handle, sizeof(*handle)), (ssize_t)sizeof(*handle));
    close(pipefd[1]);
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_ipc_handles)
{
    setup();
    CUdeviceptr dev, other;
    CU_OK(cuMemAlloc(&dev, 3 * 4096));
    CU_OK(cuMemsetD32(dev, 0x01020304, 3 * 1024));
    CUipcMemHandle handle;
    CU_OK(cuIpcGetMemHandle(&handle, dev + 4096));
    /* the memory keeps its address and contents once shareable, and stays usable */
    ck_assert_uint_eq(((const uint32_t *)(uintptr_t)dev)[2000], 0x01020304);
    CU_OK(cuMemsetD8(dev, 7, 16));
    ck_assert_int_eq(((const unsigned char *)(uintptr_t)dev)[15], 7);
    CUipcMemHandle again;
    CU_OK(cuIpcGetMemHandle(&again, dev + 4096));
    ck_assert_int_eq(memcmp(&again, &handle, sizeof(handle)), 0);
    /* not in the exporting process; not garbage; not host memory */
    ck_assert_int_eq(cuIpcOpenMemHandle(&other, handle, 0), CUDA_ERROR_INVALID_CONTEXT);
    CUipcMemHandle junk;
    memset(&junk, 0x5a, sizeof(junk));
    ck_assert_int_eq(cuIpcOpenMemHandle(&other, junk, 0), CUDA_ERROR_INVALID_VALUE);
    static char not_device[64];
    ck_assert_int_eq(cuIpcGetMemHandle(&junk, (CUdeviceptr)(uintptr_t)not_device), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuIpcCloseMemHandle(dev), CUDA_ERROR_INVALID_VALUE);

    /* another process opens it, sees the bytes, writes, and closes */
    ck_assert_int_eq(ipc_run_importer(&handle, "--ipc-import"), 0);
    ck_assert_uint_eq(((const uint32_t *)(uintptr_t)dev)[1024], 0xcafe);   /* the importer's write */
    CU_OK(cuMemFree(dev));
    /* freed: the handle no longer opens */
    ck_assert_int_eq(ipc_run_importer(&handle, "--ipc-import-freed"), 0);
}
END_TEST

/* check_simgpu --ipc-import FD: reads a handle from FD, checks the memory, writes 0xcafe
 * at the handle's pointer; with freed: checks the handle answers CUDA_ERROR_INVALID_HANDLE.
 * Exit status 0 on success. */
static int ipc_import(int fd, bool freed)
{
    CUipcMemHandle handle;
    CUcontext ctx;
    CUdeviceptr dev;
    if (read(fd, &handle, sizeof(handle)) != (ssize_t)sizeof(handle) || cuInit(0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    if (freed)
        return cuIpcOpenMemHandle(&dev, handle, 0) == CUDA_ERROR_INVALID_HANDLE ? 0 : 7;
    if (cuIpcOpenMemHandle(&dev, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
        return 2;
    uint32_t word = 0;
    if (cuMemcpyDtoH(&word, dev + 4, sizeof(word)) != CUDA_SUCCESS || word != 0x01020304)
        return 3;
    unsigned memory_type = 0;
    if (cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev) != CUDA_SUCCESS ||
        memory_type != CU_MEMORYTYPE_DEVICE)
        return 4;
    if (cuMemsetD32(dev, 0xcafe, 1) != CUDA_SUCCESS || cuIpcCloseMemHandle(dev) != CUDA_SUCCESS)
        return 5;
    if (cuIpcCloseMemHandle(dev) != CUDA_ERROR_INVALID_VALUE)   /* closed already */
        return 6;
    return 0;
}

START_TEST(test_stream_memops)
{
    setup();
    CUdeviceptr words, out;
    CU_OK(cuMemAlloc(&words, 64));
    CU_OK(cuMemAlloc(&out, 16));
    CU_OK(cuMemsetD8(words, 0, 64));
    CU_OK(cuMemsetD8(out, 0, 16));
    CUstream waiter, writer;
    CU_OK(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING));
    /* the waiter's later work waits for the writer's value */
    CU_OK(cuStreamWaitValue32(waiter, words, 3, CU_STREAM_WAIT_VALUE_EQ));
    CU_OK(cuMemsetD32Async(out, 5, 1, waiter));
    ck_assert_int_eq(cuStreamQuery(waiter), CUDA_ERROR_NOT_READY);
    CU_OK(cuStreamWriteValue32(writer, words, 3, CU_STREAM_WRITE_VALUE_DEFAULT));
    CU_OK(cuStreamSynchronize(waiter));
    ck_assert_uint_eq(*(const uint32_t *)(uintptr_t)out, 5);

    /* a batch: 64-bit write, then waits of each kind that hold at once */
    CUstreamBatchMemOpParams ops[5];
    memset(ops, 0, sizeof(ops));
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[0].writeValue.address = words + 8;
    ops[0].writeValue.value64 = 0x100000000ull;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    ops[1].waitValue.address = words + 8;
    ops[1].waitValue.value64 = 0xffffffffull;
    ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[2].waitValue.address = words;
    ops[2].waitValue.value = 2;
    ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
    ops[3].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[3].waitValue.address = words + 16;
    ops[3].waitValue.value = 1;
    ops[3].waitValue.flags = CU_STREAM_WAIT_VALUE_NOR;
    ops[4].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    CU_OK(cuStreamBatchMemOp(writer, 5, ops, 0));
    CU_OK(cuStreamWaitValue64(writer, words + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_EQ));
    CU_OK(cuStreamWriteValue64(writer, words + 24, 42, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    CU_OK(cuStreamSynchronize(writer));
    ck_assert_uint_eq(((const uint64_t *)(uintptr_t)words)[3], 42);

    /* refused: misaligned, unknown flags, flush (not supported), empty batch */
    ck_assert_int_eq(cuStreamWriteValue32(writer, words + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuStreamWaitValue64(writer, words + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuStreamWriteValue32(writer, words, 1, 8), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuStreamWaitValue32(writer, words, 1, CU_STREAM_WAIT_VALUE_FLUSH), CUDA_ERROR_NOT_SUPPORTED);
    ck_assert_int_eq(cuStreamBatchMemOp(writer, 0, ops, 0), CUDA_ERROR_INVALID_VALUE);
    int value = 0;
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
    ck_assert_int_eq(value, 1);
    CU_OK(cuStreamDestroy(waiter));
    CU_OK(cuStreamDestroy(writer));
    CU_OK(cuMemFree(words));
    CU_OK(cuMemFree(out));
}
END_TEST

/* ---- process slots (SIMGPU_PROCESS_SLOTS) ---- */

/* the suite's segment name (main sets it); the slot tests name theirs after it */
static char suite_shm_name[64];

typedef struct slot_holder {
    pid_t pid;
    int release_fd; /* closing it ends the holder */
    int status;     /* the CUresult of its allocation */
} slot_holder_t;

/* Starts `check_simgpu --slot-holder` (a fresh process) with SIMGPU_PROCESS_SLOTS=slots in
 * its environment; it allocates 1 MiB and reports the CUresult, then holds the memory (and
 * its slot) until release_fd is closed. */
static slot_holder_t slot_holder_start(const char *slots)
{
    int report[2], release[2];
    /* close-on-exec: a later holder must not keep an earlier one's release pipe open */
    ck_assert_int_eq(pipe2(report, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(release, O_CLOEXEC), 0);
    slot_holder_t h = {.pid = fork()};
    ck_assert_int_ge(h.pid, 0);
    if (h.pid == 0) {
        /* out of the way of 3 and 4 first, then onto them (dup2 clears close-on-exec) */
        int out = fcntl(report[1], F_DUPFD, 10), in = fcntl(release[0], F_DUPFD, 10);
        if (out < 0 || in < 0 || dup2(out, 3) < 0 || dup2(in, 4) < 0)
            _exit(99);
        setenv("SIMGPU_PROCESS_SLOTS", slots, 1);
        execl("/proc/self/exe", "check_simgpu", "--slot-holder", (char *)NULL);
        _exit(99);
    }
    close(report[1]);
    close(release[0]);
    int status = -1;
    ck_assert_int_eq(read(report[0], &status, sizeof(status)), (ssize_t)sizeof(status));
    close(report[0]);
    h.release_fd = release[1];
    h.status = status;
    return h;
}

static void slot_holder_end(slot_holder_t *h)
{
    int status = 0;
    close(h->release_fd);
    ck_assert_int_eq(waitpid(h->pid, &status, 0), h->pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* check_simgpu --slot-holder: fd 3 gets the allocation's CUresult, fd 4 is read to EOF */
static int slot_holder(void)
{
    CUcontext ctx;
    CUdeviceptr dev = 0;
    int status = cuInit(0);
    if (status == CUDA_SUCCESS)
        status = cuDevicePrimaryCtxRetain(&ctx, 0);
    if (status == CUDA_SUCCESS)
        status = cuCtxSetCurrent(ctx);
    if (status == CUDA_SUCCESS)
        status = cuMemAlloc(&dev, MiB);
    if (write(3, &status, sizeof(status)) != (ssize_t)sizeof(status))
        return 1;
    char byte;
    while (read(4, &byte, 1) > 0)
        ;
    if (dev)
        cuMemFree(dev);
    return 0;
}

/* The device's stats as a fresh process attaching to SIMGPU_SHM_NAME sees them (this
 * process may be attached to another segment already: without fork mode the tests share one
 * process). */
static simgpu_device_stats_t slot_stats(void)
{
    int report[2];
    simgpu_device_stats_t stats;
    ck_assert_int_eq(pipe2(report, O_CLOEXEC), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int out = fcntl(report[1], F_DUPFD, 10);
        if (out < 0 || dup2(out, 3) < 0)
            _exit(99);
        execl("/proc/self/exe", "check_simgpu", "--slot-stats", (char *)NULL);
        _exit(99);
    }
    close(report[1]);
    ck_assert_int_eq(read(report[0], &stats, sizeof(stats)), (ssize_t)sizeof(stats));
    close(report[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return stats;
}

/* check_simgpu --slot-stats: writes device 0's stats to fd 3 */
static int slot_stats_main(void)
{
    simgpu_device_stats_t stats;
    if (simgpu_device_stats(0, &stats) != 0)
        return 1;
    return write(3, &stats, sizeof(stats)) == (ssize_t)sizeof(stats) ? 0 : 2;
}

START_TEST(test_process_slots)
{
    char name[96];
    snprintf(name, sizeof(name), "%s-slots", suite_shm_name);
    setenv("SIMGPU_SHM_NAME", name, 1);
    shm_unlink(name);
    /* the segment is created with 3 slots; later processes use the segment's count */
    slot_holder_t h[5];
    for (int i = 0; i < 3; i++) {
        h[i] = slot_holder_start("3");
        ck_assert_int_eq(h[i].status, CUDA_SUCCESS);
    }
    simgpu_device_stats_t stats = slot_stats();
    ck_assert_uint_eq(stats.processes, 3);
    ck_assert_uint_eq(stats.used_bytes, 3 * MiB);
    /* full: a fourth process is refused device memory (and told why on stderr), even when
     * it asks for more slots: the count is the segment's */
    h[3] = slot_holder_start("64");
    ck_assert_int_eq(h[3].status, CUDA_ERROR_OUT_OF_MEMORY);
    slot_holder_end(&h[3]);
    /* a slot comes back when its process ends */
    slot_holder_end(&h[0]);
    h[4] = slot_holder_start("3");
    ck_assert_int_eq(h[4].status, CUDA_SUCCESS);
    stats = slot_stats();
    ck_assert_uint_eq(stats.processes, 3);
    for (int i = 1; i < 3; i++)
        slot_holder_end(&h[i]);
    slot_holder_end(&h[4]);
    stats = slot_stats();
    ck_assert_uint_eq(stats.processes, 0);
    ck_assert_uint_eq(stats.used_bytes, 0);
    shm_unlink(name);
    setenv("SIMGPU_SHM_NAME", suite_shm_name, 1);
}
END_TEST

/* More processes than the old fixed 128 slots hold device memory at once on a segment
 * created with the default count. */
START_TEST(test_process_slots_default)
{
    char name[96];
    snprintf(name, sizeof(name), "%s-slots-default", suite_shm_name);
    setenv("SIMGPU_SHM_NAME", name, 1);
    unsetenv("SIMGPU_PROCESS_SLOTS");
    shm_unlink(name);
    enum { N = 160 };
    static slot_holder_t h[N];
    for (int i = 0; i < N; i++) {
        h[i] = slot_holder_start("");
        ck_assert_int_eq(h[i].status, CUDA_SUCCESS);
    }
    simgpu_device_stats_t stats = slot_stats();
    ck_assert_uint_eq(stats.processes, N);
    for (int i = 0; i < N; i++)
        slot_holder_end(&h[i]);
    shm_unlink(name);
    setenv("SIMGPU_SHM_NAME", suite_shm_name, 1);
}
END_TEST

static Suite *simgpu_suite(void)
{
    Suite *s = suite_create("simgpu");
    TCase *tc = tcase_create("driver");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_init_and_devices);
    tcase_add_test(tc, test_contexts);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_streams_and_async);
    tcase_add_test(tc, test_kernel_time);
    tcase_add_test(tc, test_kernel_time_speed);
    tcase_add_test(tc, test_modules_and_launch);
    tcase_add_test(tc, test_vmm);
    tcase_add_test(tc, test_vmm_adopt);
    tcase_add_test(tc, test_get_proc_address);
    tcase_add_test(tc, test_exported_stubs);
    tcase_add_test(tc, test_device_attributes);
    tcase_add_test(tc, test_occupancy);
    tcase_add_test(tc, test_link_and_load_ex);
    tcase_add_test(tc, test_pitched_copies);
    tcase_add_test(tc, test_ipc_handles);
    tcase_add_test(tc, test_stream_memops);
    tcase_add_test(tc, test_process_slots);
    tcase_add_test(tc, test_process_slots_default);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    char shm_name[64], memory[32];
    if (argc == 2 && strcmp(argv[1], "--speed-check") == 0)
        return speed_check(); /* the parent's environment (segment, packs) is inherited */
    if (argc == 2 && strcmp(argv[1], "--slot-holder") == 0)
        return slot_holder();
    if (argc == 2 && strcmp(argv[1], "--slot-stats") == 0)
        return slot_stats_main();
    if (argc == 3 && strcmp(argv[1], "--ipc-import") == 0)
        return ipc_import(atoi(argv[2]), false);
    if (argc == 3 && strcmp(argv[1], "--ipc-import-freed") == 0)
        return ipc_import(atoi(argv[2]), true);
    snprintf(shm_name, sizeof(shm_name), "/simgpu-check-%d", (int)getpid());
    snprintf(memory, sizeof(memory), "%llu", MEMORY_MB);
    setenv("SIMGPU_SHM_NAME", shm_name, 1);
    snprintf(suite_shm_name, sizeof(suite_shm_name), "%s", shm_name);
    setenv("SIMGPU_MEMORY_MB", memory, 1);
    setenv("SIMGPU_KERNEL_PACKS",
           SIMGPU_TESTPACK_PATH ":" SIMGPU_TESTPACK_ABI1_PATH ":" SIMGPU_COLLECTIVE_PACK_PATH, 1);
    unsetenv("SIMGPU_COLLECTIVE_TIMEOUT_S");
    unsetenv("SIMGPU_SPEED");
    unsetenv("SIMGPU_DEVICES");
    SRunner *runner = srunner_create(simgpu_suite());
    srunner_add_suite(runner, simgpu_collective_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    shm_unlink(shm_name);
    char other[96]; /* the process-slot tests' own segments, also when they failed */
    snprintf(other, sizeof(other), "%s-slots", shm_name);
    shm_unlink(other);
    snprintf(other, sizeof(other), "%s-slots-default", shm_name);
    shm_unlink(other);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
