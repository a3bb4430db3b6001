/* salus-pool-loop: a training-loop shape on stream-ordered memory pools. A pool is created
 * (cuMemPoolCreate) with a release threshold that keeps freed memory cached, made the
 * device's current pool (cuDeviceSetMemPool); the persistent vectors come from it
 * (cuMemAllocFromPoolAsync), each iteration allocates its scratch vector with
 * cuMemAllocAsync (the current pool), computes c = 2 * (a + b) through it, and frees it
 * (cuMemFreeAsync). At the end the pool is trimmed (cuMemPoolTrimTo). Prints
 * "Result = PASS" when c is right.
 * Usage: salus-pool-loop [--iterations N] [--mb MiB per vector] [--ephemeral-mb MiB]
 *                        [--hold FILE] */

extern "C" __global__ void pool_add(const float *a, const float *b, float *c, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

extern "C" __global__ void pool_scale(const float *in, float *out, float factor, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        out[i] = factor * in[i];
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel pool_loop_pack[] = {
    WORKLOAD_PACK_KERNEL(pool_add, NULL),
    WORKLOAD_PACK_KERNEL(pool_scale, NULL),
};
WORKLOAD_PACK_EXPORT(pool_loop_pack)

#elif !defined(__CUDACC__)
#include "workload_memory.h"

#include <vector>

extern "C" const unsigned char salus_workload_pool_loop_image[];

int main(int argc, char **argv)
{
    workload_program = "salus-pool-loop";
    workload_memory_options o;
    workload_memory_parse(argc, argv, &o,
                          "usage: salus-pool-loop [--iterations N] [--mb MiB] [--ephemeral-mb MiB] [--hold FILE]\n");
    workload_device dev;
    workload_device_open(&dev, 0, salus_workload_pool_loop_image);
    CUfunction add, scale;
    CHECK_CU(cuModuleGetFunction(&add, dev.module, "pool_add"));
    CHECK_CU(cuModuleGetFunction(&scale, dev.module, "pool_scale"));

    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev.device;
    CUmemoryPool pool, current;
    CHECK_CU(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep_all = ~0ull, threshold = 0;
    CHECK_CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CHECK_CU(cuDeviceSetMemPool(dev.device, pool));
    CHECK_CU(cuDeviceGetMemPool(&current, dev.device));
    if (current != pool || threshold != keep_all) {
        fprintf(stderr, "salus-pool-loop: the device's pool or its threshold did not stick\n");
        return WORKLOAD_EXIT_DRIVER_ERROR;
    }

    size_t bytes = (size_t)o.mb << 20, scratch_bytes = (size_t)o.ephemeral_mb << 20;
    if (scratch_bytes && scratch_bytes < bytes)
        workload_usage_error("--ephemeral-mb must be 0 or at least --mb");
    unsigned long long n = bytes / sizeof(float);
    CUdeviceptr a, b, c;
    CHECK_CU(cuMemAllocFromPoolAsync(&a, bytes, pool, dev.stream));
    CHECK_CU(cuMemAllocFromPoolAsync(&b, bytes, pool, dev.stream));
    CHECK_CU(cuMemAllocFromPoolAsync(&c, bytes, pool, dev.stream));
    std::vector<float> ha(n), hb(n), hc(n);
    workload_vecadd_inputs(ha.data(), hb.data(), n);
    CHECK_CU(cuMemcpyHtoDAsync(a, ha.data(), bytes, dev.stream));
    CHECK_CU(cuMemcpyHtoDAsync(b, hb.data(), bytes, dev.stream));
    CHECK_CU(cuStreamSynchronize(dev.stream));
    printf("pool-loop: 3 x %llu MiB persistent from a created pool, %llu MiB per iteration\n", o.mb,
           o.ephemeral_mb);

    float two = 2.0f;
    for (unsigned it = 0; it < o.iterations; it++) {
        CUdeviceptr scratch = 0;
        if (scratch_bytes)
            CHECK_CU(cuMemAllocAsync(&scratch, scratch_bytes, dev.stream));
        CUdeviceptr sum = scratch ? scratch : c;
        void *add_args[] = {&a, &b, &sum, &n};
        workload_launch_1d(&dev, add, (unsigned)n, add_args);
        void *scale_args[] = {&sum, &c, &two, &n};
        workload_launch_1d(&dev, scale, (unsigned)n, scale_args);
        if (scratch)
            CHECK_CU(cuMemFreeAsync(scratch, dev.stream));
        CHECK_CU(cuStreamSynchronize(dev.stream));
    }
    CHECK_CU(cuMemcpyDtoH(hc.data(), c, bytes));
    size_t bad = workload_vecadd_errors(hc.data(), n, 2.0f);
    CHECK_CU(cuMemPoolTrimTo(pool, 0));
    workload_memory_hold(&o);
    CHECK_CU(cuMemFreeAsync(a, dev.stream));
    CHECK_CU(cuMemFreeAsync(b, dev.stream));
    CHECK_CU(cuMemFreeAsync(c, dev.stream));
    CHECK_CU(cuStreamSynchronize(dev.stream));
    CUmemoryPool fallback;
    CHECK_CU(cuDeviceGetDefaultMemPool(&fallback, dev.device));
    CHECK_CU(cuDeviceSetMemPool(dev.device, fallback));
    CHECK_CU(cuMemPoolDestroy(pool));
    workload_device_close(&dev);
    printf("Result = %s\n", bad ? "FAIL" : "PASS");
    return bad ? WORKLOAD_EXIT_VERIFY : 0;
}
#endif
