/* salus-globals: a driver-API program that uses module globals: it finds a __device__
 * table and a __device__ counter with cuModuleGetGlobal, writes the table from the host,
 * launches a kernel that reads the table and counts its threads into the counter, and
 * reads the counter and the output back. Prints "Result = PASS" or "Result = FAIL".
 *
 * On simgpu the globals are the kernel pack's own variables, exported by name (the pack
 * is built with hidden visibility, so they are marked visible here). */
#if defined(SIMGPU_PACK)
#define GLOBALS_VISIBLE __attribute__((visibility("default")))
#else
#define GLOBALS_VISIBLE
#endif

#define GLOBALS_TABLE_SIZE 8

extern "C" {
GLOBALS_VISIBLE __device__ float globals_table[GLOBALS_TABLE_SIZE];
GLOBALS_VISIBLE __device__ unsigned globals_counter;
}

extern "C" __global__ void globals_apply(float *out, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= n)
        return;
    out[i] = globals_table[i % GLOBALS_TABLE_SIZE] * (float)i;
    atomicAdd(&globals_counter, 1u);
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel globals_pack[] = {
    WORKLOAD_PACK_KERNEL(globals_apply, NULL),
};
WORKLOAD_PACK_EXPORT(globals_pack)

#elif !defined(__CUDACC__)
#include "workload_host.h"

extern "C" const unsigned char salus_workload_globals_image[];

int main(int argc, char **argv)
{
    workload_program = "salus-globals";
    int n = argc > 1 ? (int)workload_parse_unsigned("N", argv[1], 1, 1 << 24) : 1000;
    workload_device device;
    workload_device_open(&device, 0, salus_workload_globals_image);
    CUfunction apply;
    CHECK_CU(cuModuleGetFunction(&apply, device.module, "globals_apply"));

    CUdeviceptr table, counter;
    size_t table_bytes = 0, counter_bytes = 0;
    CHECK_CU(cuModuleGetGlobal(&table, &table_bytes, device.module, "globals_table"));
    CHECK_CU(cuModuleGetGlobal(&counter, &counter_bytes, device.module, "globals_counter"));
    if (table_bytes != GLOBALS_TABLE_SIZE * sizeof(float) || counter_bytes != sizeof(unsigned)) {
        fprintf(stderr, "salus-globals: global sizes %zu and %zu, expected %zu and %zu\n", table_bytes,
                counter_bytes, GLOBALS_TABLE_SIZE * sizeof(float), sizeof(unsigned));
        return 1;
    }
    CUdeviceptr missing;
    CUresult absent = cuModuleGetGlobal(&missing, NULL, device.module, "globals_no_such_symbol");
    if (absent != CUDA_ERROR_NOT_FOUND) {
        fprintf(stderr, "salus-globals: an unknown global answered %d, expected CUDA_ERROR_NOT_FOUND\n",
                (int)absent);
        return 1;
    }

    float host_table[GLOBALS_TABLE_SIZE];
    for (int i = 0; i < GLOBALS_TABLE_SIZE; i++)
        host_table[i] = 0.5f + (float)i;
    unsigned zero = 0;
    CHECK_CU(cuMemcpyHtoD(table, host_table, sizeof host_table));
    CHECK_CU(cuMemcpyHtoD(counter, &zero, sizeof zero));

    CUdeviceptr out = workload_alloc(&device, (size_t)n * sizeof(float), false, "output");
    void *arguments[] = {&out, &n};
    workload_launch_1d(&device, apply, (unsigned)n, arguments);
    CHECK_CU(cuStreamSynchronize(device.stream));

    float *host_out = (float *)malloc((size_t)n * sizeof(float));
    unsigned threads_counted = 0;
    CHECK_CU(cuMemcpyDtoH(host_out, out, (size_t)n * sizeof(float)));
    CHECK_CU(cuMemcpyDtoH(&threads_counted, counter, sizeof threads_counted));
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += host_out[i] != host_table[i % GLOBALS_TABLE_SIZE] * (float)i;
    printf("globals: table %zu bytes, counter %zu bytes; counter = %u after %d threads; %d of %d outputs wrong\n",
           table_bytes, counter_bytes, threads_counted, n, bad, n);
    free(host_out);
    workload_free(&device, out, false);
    workload_device_close(&device);
    bool pass = bad == 0 && threads_counted == (unsigned)n;
    printf("Result = %s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
#endif
