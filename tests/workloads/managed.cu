/* salus-managed: a vector add on managed memory (cuMemAllocManaged). The host writes the
 * inputs and reads the result through the same pointers the kernel uses, with no copy in
 * between; each iteration recomputes c = a + b after the host changed nothing, and the
 * host checks c. Prints "Result = PASS" when it is right.
 * Usage: salus-managed [--iterations N] [--mb MiB per vector] [--hold FILE] */

extern "C" __global__ void managed_add(const float *a, const float *b, float *c, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel managed_pack[] = {
    WORKLOAD_PACK_KERNEL(managed_add, NULL),
};
WORKLOAD_PACK_EXPORT(managed_pack)

#elif !defined(__CUDACC__)
#include "workload_memory.h"

extern "C" const unsigned char salus_workload_managed_image[];

int main(int argc, char **argv)
{
    workload_program = "salus-managed";
    workload_memory_options o;
    workload_memory_parse(argc, argv, &o, "usage: salus-managed [--iterations N] [--mb MiB] [--hold FILE]\n");
    workload_device dev;
    workload_device_open(&dev, 0, salus_workload_managed_image);
    CUfunction add;
    CHECK_CU(cuModuleGetFunction(&add, dev.module, "managed_add"));
    size_t bytes = (size_t)o.mb << 20;
    unsigned long long n = bytes / sizeof(float);
    CUdeviceptr a, b, c;
    CHECK_CU(cuMemAllocManaged(&a, bytes, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(cuMemAllocManaged(&b, bytes, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(cuMemAllocManaged(&c, bytes, CU_MEM_ATTACH_GLOBAL));
    float *ha = (float *)(uintptr_t)a, *hb = (float *)(uintptr_t)b, *hc = (float *)(uintptr_t)c;
    workload_vecadd_inputs(ha, hb, n);
    printf("managed: 3 x %llu MiB of managed memory\n", o.mb);
    size_t bad = 0;
    for (unsigned it = 0; it < o.iterations; it++) {
        memset(hc, 0, bytes);
        void *args[] = {&a, &b, &c, &n};
        workload_launch_1d(&dev, add, (unsigned)n, args);
        CHECK_CU(cuStreamSynchronize(dev.stream));
        bad += workload_vecadd_errors(hc, n, 1.0f);
    }
    workload_memory_hold(&o);
    CHECK_CU(cuMemFree(a));
    CHECK_CU(cuMemFree(b));
    CHECK_CU(cuMemFree(c));
    workload_device_close(&dev);
    printf("Result = %s\n", bad ? "FAIL" : "PASS");
    return bad ? WORKLOAD_EXIT_VERIFY : 0;
}
#endif
