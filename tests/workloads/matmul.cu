/* salus-matmul: a driver-API matrix multiply in the shape of NVIDIA's matrixMulDrv sample,
 * written without salus in mind: the module is loaded with cuModuleLoadDataEx (JIT options
 * and an error-log buffer), the launch is sized by the occupancy calculator
 * (cuOccupancyMaxPotentialBlockSize), the kernel's attributes and name are read, the
 * launch is timed with events on a stream of the highest priority, and C = A x B is
 * checked on the host. Usage: salus-matmul [M N K]. Prints "Result = PASS" or "= FAIL".
 *
 * One thread per element of C (no shared-memory tiles: the simgpu pack runs a block's
 * threads one after another, so kernels do not use __syncthreads). */

extern "C" __global__ void matmul_kernel(const float *a, const float *b, float *c, int m, int n, int k)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= m * n)
        return;
    int row = i / n, col = i % n;
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += a[row * k + j] * b[j * n + col];
    c[i] = sum;
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel matmul_pack[] = {
    WORKLOAD_PACK_KERNEL(matmul_kernel, NULL),
};
WORKLOAD_PACK_EXPORT(matmul_pack)

#elif !defined(__CUDACC__)
#include "workload_host.h"

extern "C" const unsigned char salus_workload_matmul_image[];

int main(int argc, char **argv)
{
    workload_program = "salus-matmul";
    if (argc != 1 && argc != 4)
        workload_usage_error("usage: salus-matmul [M N K]");
    int m = argc == 4 ? (int)workload_parse_unsigned("M", argv[1], 1, 4096) : 192;
    int n = argc == 4 ? (int)workload_parse_unsigned("N", argv[2], 1, 4096) : 160;
    int k = argc == 4 ? (int)workload_parse_unsigned("K", argv[3], 1, 4096) : 96;
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUfunction kernel;

    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&device, 0));
    char device_name[128];
    int sm_count = 0, major = 0, minor = 0;
    CHECK_CU(cuDeviceGetName(device_name, sizeof device_name, device));
    CHECK_CU(cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
    CHECK_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
    CHECK_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
    printf("device: %s, compute capability %d.%d, %d SMs\n", device_name, major, minor, sm_count);
    CHECK_CU(cuCtxCreate(&context, NULL, 0, device));

    /* as the sample: JIT options with an error-log buffer */
    char error_log[8192] = "";
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {error_log, (void *)(uintptr_t)sizeof error_log};
    CUresult loaded = cuModuleLoadDataEx(&module, salus_workload_matmul_image, 2, options, values);
    if (loaded != CUDA_SUCCESS) {
        fprintf(stderr, "salus-matmul: JIT log: %s\n", error_log);
        workload_driver_failed("cuModuleLoadDataEx", loaded, __FILE__, __LINE__);
    }
    CHECK_CU(cuModuleGetFunction(&kernel, module, "matmul_kernel"));
    const char *kernel_name = NULL;
    int max_threads = 0, registers = 0;
    CHECK_CU(cuFuncGetName(&kernel_name, kernel));
    CHECK_CU(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel));
    CHECK_CU(cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel));
    CHECK_CU(cuFuncSetCacheConfig(kernel, CU_FUNC_CACHE_PREFER_L1));

    /* the launch shape from the occupancy calculator */
    int min_grid = 0, block = 0, resident = 0;
    CHECK_CU(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, kernel, NULL, 0, 0));
    CHECK_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, block, 0));
    if (block <= 0 || block > max_threads || resident <= 0 || min_grid < sm_count) {
        fprintf(stderr, "salus-matmul: implausible occupancy: block %d (max %d), %d resident, min grid %d\n",
                block, max_threads, resident, min_grid);
        return 1;
    }
    int elements = m * n;
    int grid = (elements + block - 1) / block;
    printf("kernel %s: %d registers, block %d threads (occupancy calculator; %d resident per SM, "
           "min grid %d), grid %d\n", kernel_name, registers, block, resident, min_grid, grid);

    size_t a_bytes = (size_t)m * k * sizeof(float), b_bytes = (size_t)k * n * sizeof(float);
    size_t c_bytes = (size_t)m * n * sizeof(float);
    float *a = (float *)malloc(a_bytes), *b = (float *)malloc(b_bytes), *c = (float *)malloc(c_bytes);
    if (!a || !b || !c) {
        fprintf(stderr, "salus-matmul: out of host memory\n");
        return 1;
    }
    for (int i = 0; i < m * k; i++)
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < k * n; i++)
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;

    CUdeviceptr d_a, d_b, d_c;
    CHECK_CU(cuMemAlloc(&d_a, a_bytes));
    CHECK_CU(cuMemAlloc(&d_b, b_bytes));
    CHECK_CU(cuMemAlloc(&d_c, c_bytes));

    int least = 0, greatest = 0;
    CHECK_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
    CUstream stream;
    CHECK_CU(cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, greatest));
    unsigned stream_flags = 0;
    int stream_priority = 0;
    CHECK_CU(cuStreamGetFlags(stream, &stream_flags));
    CHECK_CU(cuStreamGetPriority(stream, &stream_priority));
    if (stream_flags != CU_STREAM_NON_BLOCKING || stream_priority != greatest) {
        fprintf(stderr, "salus-matmul: stream flags %u priority %d, expected %u and %d\n", stream_flags,
                stream_priority, (unsigned)CU_STREAM_NON_BLOCKING, greatest);
        return 1;
    }
    CUevent start, stop;
    CHECK_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));

    CHECK_CU(cuMemcpyHtoDAsync(d_a, a, a_bytes, stream));
    CHECK_CU(cuMemcpyHtoDAsync(d_b, b, b_bytes, stream));
    void *arguments[] = {&d_a, &d_b, &d_c, &m, &n, &k};
    CHECK_CU(cuEventRecord(start, stream));
    CHECK_CU(cuLaunchKernel(kernel, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, 0, stream, arguments, NULL));
    CHECK_CU(cuEventRecord(stop, stream));
    CHECK_CU(cuMemcpyDtoHAsync(c, d_c, c_bytes, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    float kernel_ms = -1.0f;
    CHECK_CU(cuEventElapsedTime(&kernel_ms, start, stop));

    /* the host reference; a GPU contracts into FMAs, so compare with a tolerance */
    int bad = 0;
    for (int row = 0; row < m; row++)
        for (int col = 0; col < n; col++) {
            float sum = 0.0f;
            for (int j = 0; j < k; j++)
                sum += a[row * k + j] * b[j * n + col];
            float got = c[row * n + col];
            if (!(fabsf(got - sum) <= 1e-4f * (1.0f + fabsf(sum)))) {
                if (bad < 5)
                    fprintf(stderr, "salus-matmul: C[%d][%d] = %g, expected %g\n", row, col, got, sum);
                bad++;
            }
        }
    printf("C = A x B, %dx%d = %dx%d x %dx%d, kernel %.3f ms, %d of %d elements wrong\n", m, n, m, k, k, n,
           kernel_ms, bad, m * n);
    CHECK_CU(cuEventDestroy(start));
    CHECK_CU(cuEventDestroy(stop));
    CHECK_CU(cuStreamDestroy(stream));
    CHECK_CU(cuMemFree(d_a));
    CHECK_CU(cuMemFree(d_b));
    CHECK_CU(cuMemFree(d_c));
    CHECK_CU(cuModuleUnload(module));
    CHECK_CU(cuCtxDestroy(context));
    free(a);
    free(b);
    free(c);
    printf("Result = %s\n", bad || kernel_ms < 0.0f ? "FAIL" : "PASS");
    return bad || kernel_ms < 0.0f ? 1 : 0;
}
#endif
