/* salus-bench: the shim's overhead loops.
 *   salus-bench launch N   N launches of a tiny kernel on one stream, then one sync
 *   salus-bench alloc N    N cuMemAlloc/cuMemFree pairs of 1 MiB (and a launch between,
 *                          as a framework would), then one sync
 * Prints "<mode> n=N total_ms=T per_op_us=U". */

extern "C" __global__ void bench_tiny(float *out, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        out[i] += 1.0f;
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

/* a tiny kernel: 2 us on the device */
static double bench_tiny_cost_ns(const simgpu_launch *launch)
{
    (void)launch;
    return 2000.0;
}

static const simgpu_kernel bench_pack[] = {
    WORKLOAD_PACK_KERNEL(bench_tiny, bench_tiny_cost_ns),
};
WORKLOAD_PACK_EXPORT(bench_pack)

#elif !defined(__CUDACC__)
#include "workload_host.h"

#include <string.h>

extern "C" const unsigned char salus_workload_bench_image[];

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "launch") != 0 && strcmp(argv[1], "alloc") != 0)) {
        fprintf(stderr, "usage: salus-bench launch|alloc N\n");
        return 2;
    }
    workload_program = "salus-bench";
    long n = atol(argv[2]);
    workload_device device;
    workload_device_open(&device, 0, salus_workload_bench_image);
    CUfunction tiny;
    CHECK_CU(cuModuleGetFunction(&tiny, device.module, "bench_tiny"));
    CUdeviceptr out;
    int elements = 32;
    CHECK_CU(cuMemAlloc(&out, elements * sizeof(float)));
    CHECK_CU(cuMemsetD32(out, 0, elements));
    void *args[] = {&out, &elements};
    double start = (double)workload_now_ns() / 1e6;
    if (strcmp(argv[1], "launch") == 0) {
        for (long i = 0; i < n; i++)
            CHECK_CU(cuLaunchKernel(tiny, 1, 1, 1, 32, 1, 1, 0, device.stream, args, NULL));
    } else {
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            CHECK_CU(cuMemAlloc(&p, 1 << 20));
            CHECK_CU(cuLaunchKernel(tiny, 1, 1, 1, 32, 1, 1, 0, device.stream, args, NULL));
            CHECK_CU(cuMemFree(p));
        }
    }
    CHECK_CU(cuStreamSynchronize(device.stream));
    double total = (double)workload_now_ns() / 1e6 - start;
    printf("%s n=%ld total_ms=%.3f per_op_us=%.3f\n", argv[1], n, total, total * 1000.0 / (double)n);
    CHECK_CU(cuMemFree(out));
    workload_device_close(&device);
    return 0;
}
#endif
