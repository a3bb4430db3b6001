/* salus-vecadd: a driver-API program written without salus in mind, in the shape of
 * NVIDIA's vectorAddDrv sample: the module is loaded from a fatbin file on disk
 * (cuModuleLoad), the kernel is looked up by name and launched, the result checked on
 * the host. Usage: salus-vecadd [MODULE_FILE [N]]; the module file defaults to the one the
 * build puts next to the packs (<bin>/../lib/packs/vecadd.fatbin). Prints "Result = PASS" or
 * "Result = FAIL".
 *
 * One source, three builds (see README.md): nvcc --fatbin (the module file), g++ (the
 * host program), g++ -DSIMGPU_PACK (the kernel as a simgpu pack). */

extern "C" __global__ void VecAdd_kernel(const float *a, const float *b, float *c, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel vecadd_pack[] = {
    WORKLOAD_PACK_KERNEL(VecAdd_kernel, NULL),
};
WORKLOAD_PACK_EXPORT(vecadd_pack)

#elif !defined(__CUDACC__)
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "workload_packs.h"

/* the module file is what the program loads; the embedded copy is unused */
extern "C" const unsigned char salus_workload_vecadd_image[];

#define CHECK(call)                                                                            \
    do {                                                                                       \
        CUresult rc_ = (call);                                                                 \
        if (rc_ != CUDA_SUCCESS) {                                                             \
            const char *name_ = NULL;                                                          \
            cuGetErrorName(rc_, &name_);                                                       \
            fprintf(stderr, "%s failed: %s\n", #call, name_ ? name_ : "?");                    \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    char bundled[4200];
    const char *module_file = argc > 1 ? argv[1] : NULL;
    if (argc > 3 || (argc > 1 && strcmp(argv[1], "--help") == 0)) {
        fprintf(stderr, "usage: salus-vecadd [MODULE_FILE [N]] (default module: "
                        "<bin>/../lib/packs/vecadd.fatbin, N 50000)\n");
        return 2;
    }
    if (!module_file) {
        if (!workload_bundled_path("vecadd.fatbin", bundled, sizeof(bundled))) {
            fprintf(stderr, "salus-vecadd: no MODULE_FILE given and no bundled one found\n");
            return 2;
        }
        module_file = bundled;
    }
    int n = argc > 2 ? atoi(argv[2]) : 50000;
    size_t bytes = (size_t)n * sizeof(float);
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUfunction kernel;
    CUdeviceptr d_a, d_b, d_c;

    printf("Vector Addition (Driver API)\n");
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&device, 0));
    CHECK(cuCtxCreate(&context, NULL, 0, device));
    CHECK(cuModuleLoad(&module, module_file));
    CHECK(cuModuleGetFunction(&kernel, module, "VecAdd_kernel"));

    float *h_a = (float *)malloc(bytes), *h_b = (float *)malloc(bytes), *h_c = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) {
        h_a[i] = (float)rand() / (float)RAND_MAX;
        h_b[i] = (float)rand() / (float)RAND_MAX;
    }
    CHECK(cuMemAlloc(&d_a, bytes));
    CHECK(cuMemAlloc(&d_b, bytes));
    CHECK(cuMemAlloc(&d_c, bytes));
    CHECK(cuMemcpyHtoD(d_a, h_a, bytes));
    CHECK(cuMemcpyHtoD(d_b, h_b, bytes));

    int threads = 256, blocks = (n + threads - 1) / threads;
    void *args[] = {&d_a, &d_b, &d_c, &n};
    CHECK(cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(h_c, d_c, bytes));

    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += h_c[i] != h_a[i] + h_b[i];
    CHECK(cuMemFree(d_a));
    CHECK(cuMemFree(d_b));
    CHECK(cuMemFree(d_c));
    CHECK(cuModuleUnload(module));
    CHECK(cuCtxDestroy(context));
    free(h_a);
    free(h_b);
    free(h_c);
    printf("Result = %s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
#endif
