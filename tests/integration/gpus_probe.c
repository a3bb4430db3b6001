/* gpus-probe: what a program run with salusctl run --gpus N sees, and work on every device.
 *
 *   gpus-probe [ITERATIONS [GPU_MS [LAST_MB [FIRST_MB]]]]
 *
 * Prints "device_count N"; for each device k: "device k bus BUS_ID" (simgpu's bus id is
 * 0x10 + the real ordinal: the device's identity); "device_out_of_range NAME" (the error of
 * cuDeviceGet(N)); then runs ITERATIONS iterations (default 0), each a kernel of GPU_MS
 * (default 20) on every device, on a buffer allocated in that device's context, with both
 * devices synchronised at its end; prints "iteration I" after each; with LAST_MB, allocates
 * LAST_MB MiB on the last device and prints "alloc_last RESULT" (CUDA_SUCCESS or the error's
 * name), after FIRST_MB MiB on the first device ("alloc_first RESULT"), both held until then;
 * "done" at the end.
 * Uses simgpu's synth_busy kernel (the workload pack of salus-synth). Exit 0 when every call
 * succeeded. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_DEVICES 16

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult rc_ = (call);                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                    \
            const char *name_ = NULL;                                                 \
            cuGetErrorName(rc_, &name_);                                              \
            fprintf(stderr, "gpus-probe: %s failed: %s\n", #call, name_ ? name_ : "?"); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 0;
    unsigned long long gpu_ns = (argc > 2 ? strtoull(argv[2], NULL, 10) : 20) * 1000000ull;
    int count = 0;
    CUcontext ctx[MAX_DEVICES];
    CUfunction busy[MAX_DEVICES];
    CUdeviceptr buffer[MAX_DEVICES];
    CUmodule module[MAX_DEVICES];
    static const char image[] = "simgpu finds kernels in its packs, by name";

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count));
    printf("device_count %d\n", count);
    if (count < 1 || count > MAX_DEVICES)
        return 1;
    for (int k = 0; k < count; k++) {
        CUdevice dev;
        char bus[32];
        CHECK(cuDeviceGet(&dev, k));
        CHECK(cuDeviceGetPCIBusId(bus, (int)sizeof(bus), dev));
        printf("device %d bus %s\n", k, bus);
        CHECK(cuDevicePrimaryCtxRetain(&ctx[k], dev));
    }
    CUdevice beyond;
    CUresult rc = cuDeviceGet(&beyond, count);
    const char *name = "CUDA_SUCCESS";
    cuGetErrorName(rc, &name);
    printf("device_out_of_range %s\n", name);
    fflush(stdout);
    for (int k = 0; k < count; k++) {
        CHECK(cuCtxSetCurrent(ctx[k]));
        CHECK(cuModuleLoadData(&module[k], image));
        CHECK(cuModuleGetFunction(&busy[k], module[k], "synth_busy"));
        CHECK(cuMemAlloc(&buffer[k], 1 << 20));
    }
    for (int i = 0; i < iterations; i++) {
        for (int k = 0; k < count; k++) {
            void *params[] = {&gpu_ns};
            CHECK(cuCtxSetCurrent(ctx[k]));
            CHECK(cuMemsetD32Async(buffer[k], (unsigned)i, (1 << 20) / 4, NULL));
            CHECK(cuLaunchKernel(busy[k], 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        }
        for (int k = 0; k < count; k++) {
            CHECK(cuCtxSetCurrent(ctx[k]));
            CHECK(cuCtxSynchronize());
        }
        printf("iteration %d\n", i + 1);
        fflush(stdout);
    }
    CUdeviceptr first = 0;
    if (argc > 4) {
        CHECK(cuCtxSetCurrent(ctx[0]));
        rc = cuMemAlloc(&first, strtoull(argv[4], NULL, 10) << 20);
        cuGetErrorName(rc, &name);
        printf("alloc_first %s\n", name);
    }
    if (argc > 3) {
        CUdeviceptr big;
        CHECK(cuCtxSetCurrent(ctx[count - 1]));
        rc = cuMemAlloc(&big, strtoull(argv[3], NULL, 10) << 20);
        cuGetErrorName(rc, &name);
        printf("alloc_last %s\n", name);
        if (rc == CUDA_SUCCESS)
            CHECK(cuMemFree(big));
    }
    if (first) {
        CHECK(cuCtxSetCurrent(ctx[0]));
        CHECK(cuMemFree(first));
    }
    for (int k = 0; k < count; k++) {
        CHECK(cuCtxSetCurrent(ctx[k]));
        CHECK(cuMemFree(buffer[k]));
        CHECK(cuModuleUnload(module[k]));
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, k));
        CHECK(cuDevicePrimaryCtxRelease(dev));
    }
    printf("done\n");
    return 0;
}
