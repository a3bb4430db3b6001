/* salus-pitched: 2-D pitched copies through the driver API. The device matrix has a pitch
 * the program chooses (the row size rounded up to 512 bytes, in one cuMemAlloc), the host
 * matrix is packed, and a second host buffer has padded rows whose padding must survive:
 * cuMemsetD2D32Async of a second pitched matrix, cuMemcpy2D host -> device, a kernel on the
 * pitched rows, cuMemcpy2DAsync device -> device of a sub-rectangle at an offset, cuMemcpy2DAsync device -> host on a stream, and a cuMemcpy3D
 * of the whole matrix as one slice. Usage: salus-pitched [WIDTH HEIGHT].
 * Prints "Result = PASS" or "Result = FAIL". */

extern "C" __global__ void pitched_update(float *base, unsigned long long pitch_bytes, int width, int height)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= width * height)
        return;
    int row = i / width, col = i % width;
    float *line = (float *)((char *)base + (unsigned long long)row * pitch_bytes);
    line[col] = line[col] * 2.0f + 1.0f;
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel pitched_pack[] = {
    WORKLOAD_PACK_KERNEL(pitched_update, NULL),
};
WORKLOAD_PACK_EXPORT(pitched_pack)

#elif !defined(__CUDACC__)
#include "workload_host.h"

extern "C" const unsigned char salus_workload_pitched_image[];

static float initial(int row, int col) { return (float)(row * 1000 + col); }
static float updated(int row, int col) { return initial(row, col) * 2.0f + 1.0f; }

int main(int argc, char **argv)
{
    workload_program = "salus-pitched";
    if (argc != 1 && argc != 3)
        workload_usage_error("usage: salus-pitched [WIDTH HEIGHT]");
    int width = argc == 3 ? (int)workload_parse_unsigned("WIDTH", argv[1], 2, 8192) : 300;
    int height = argc == 3 ? (int)workload_parse_unsigned("HEIGHT", argv[2], 2, 8192) : 77;
    size_t row_bytes = (size_t)width * sizeof(float);
    size_t pitch = (row_bytes + 511) / 512 * 512;    /* chosen here, not by cuMemAllocPitch */

    workload_device device;
    workload_device_open(&device, 0, salus_workload_pitched_image);
    CUfunction update;
    CHECK_CU(cuModuleGetFunction(&update, device.module, "pitched_update"));
    CUdeviceptr matrix = workload_alloc(&device, pitch * (size_t)height, false, "pitched matrix");
    CUdeviceptr second = workload_alloc(&device, pitch * (size_t)height, false, "second matrix");
    CHECK_CU(cuMemsetD8(second, 0, pitch * (size_t)height));
    /* every row of `second` holds -1.0f (bits 0xbf800000) up to the width; the padding stays 0 */
    CHECK_CU(cuMemsetD2D32Async(second, pitch, 0xbf800000u, (size_t)width, (size_t)height, device.stream));

    float *packed = (float *)malloc(row_bytes * (size_t)height);
    size_t padded_pitch = row_bytes + 64;
    unsigned char *padded = (unsigned char *)malloc(padded_pitch * (size_t)height);
    float *slice = (float *)malloc(row_bytes * (size_t)height);
    for (int row = 0; row < height; row++)
        for (int col = 0; col < width; col++)
            packed[row * width + col] = initial(row, col);
    memset(padded, 0xab, padded_pitch * (size_t)height);

    /* host (packed) -> device (pitched) */
    CUDA_MEMCPY2D up;
    memset(&up, 0, sizeof up);
    up.srcMemoryType = CU_MEMORYTYPE_HOST;
    up.srcHost = packed;
    up.srcPitch = row_bytes;
    up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    up.dstDevice = matrix;
    up.dstPitch = pitch;
    up.WidthInBytes = row_bytes;
    up.Height = (size_t)height;
    CHECK_CU(cuMemcpy2D(&up));

    unsigned long long pitch_argument = pitch;
    void *arguments[] = {&matrix, &pitch_argument, &width, &height};
    workload_launch_1d(&device, update, (unsigned)(width * height), arguments);

    /* device -> device: the lower-right quarter, to the upper-left corner of `second` */
    int sub_width = width / 2, sub_height = height / 2;
    CUDA_MEMCPY2D across;
    memset(&across, 0, sizeof across);
    across.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    across.srcDevice = matrix;
    across.srcPitch = pitch;
    across.srcXInBytes = (size_t)(width - sub_width) * sizeof(float);
    across.srcY = (size_t)(height - sub_height);
    across.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    across.dstDevice = second;
    across.dstPitch = pitch;
    across.WidthInBytes = (size_t)sub_width * sizeof(float);
    across.Height = (size_t)sub_height;
    CHECK_CU(cuMemcpy2DAsync(&across, device.stream));

    /* device (pitched) -> host (padded rows), on the stream */
    CUDA_MEMCPY2D down;
    memset(&down, 0, sizeof down);
    down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    down.srcDevice = matrix;
    down.srcPitch = pitch;
    down.dstMemoryType = CU_MEMORYTYPE_HOST;
    down.dstHost = padded;
    down.dstPitch = padded_pitch;
    down.WidthInBytes = row_bytes;
    down.Height = (size_t)height;
    CHECK_CU(cuMemcpy2DAsync(&down, device.stream));

    /* the same matrix as one 3-D slice, device -> host (packed) */
    CUDA_MEMCPY3D whole;
    memset(&whole, 0, sizeof whole);
    whole.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    whole.srcDevice = matrix;
    whole.srcPitch = pitch;
    whole.srcHeight = (size_t)height;
    whole.dstMemoryType = CU_MEMORYTYPE_HOST;
    whole.dstHost = slice;
    whole.dstPitch = row_bytes;
    whole.dstHeight = (size_t)height;
    whole.WidthInBytes = row_bytes;
    whole.Height = (size_t)height;
    whole.Depth = 1;
    CHECK_CU(cuMemcpy3DAsync(&whole, device.stream));
    CHECK_CU(cuStreamSynchronize(device.stream));

    int bad = 0, bad_padding = 0, bad_slice = 0, bad_sub = 0;
    for (int row = 0; row < height; row++) {
        const float *line = (const float *)(padded + (size_t)row * padded_pitch);
        for (int col = 0; col < width; col++) {
            bad += line[col] != updated(row, col);
            bad_slice += slice[row * width + col] != updated(row, col);
        }
        for (size_t byte = row_bytes; byte < padded_pitch; byte++)
            bad_padding += padded[(size_t)row * padded_pitch + byte] != 0xab;
    }
    /* the sub-rectangle, read back packed with a synchronous pitched copy */
    float *sub = (float *)malloc((size_t)sub_width * sizeof(float) * (size_t)sub_height);
    CUDA_MEMCPY2D back;
    memset(&back, 0, sizeof back);
    back.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    back.srcDevice = second;
    back.srcPitch = pitch;
    back.dstMemoryType = CU_MEMORYTYPE_HOST;
    back.dstHost = sub;
    back.dstPitch = (size_t)sub_width * sizeof(float);
    back.WidthInBytes = (size_t)sub_width * sizeof(float);
    back.Height = (size_t)sub_height;
    CHECK_CU(cuMemcpy2D(&back));
    for (int row = 0; row < sub_height; row++)
        for (int col = 0; col < sub_width; col++)
            bad_sub += sub[row * sub_width + col] != updated(height - sub_height + row, width - sub_width + col);

    /* the row below the sub-rectangle: -1.0f from cuMemsetD2D32Async, then the pitch's zeros */
    float *line = (float *)malloc(pitch);
    CHECK_CU(cuMemcpyDtoH(line, second + (CUdeviceptr)((size_t)sub_height * pitch), pitch));
    for (size_t col = 0; col < pitch / sizeof(float); col++)
        bad_sub += line[col] != ((int)col < width ? -1.0f : 0.0f);
    free(line);

    printf("pitched %dx%d floats, device pitch %zu bytes, host pitch %zu: %d wrong, %d padding bytes "
           "overwritten, %d wrong in the 3-D copy, %d wrong in the %dx%d sub-rectangle and 2-D set\n",
           width, height, pitch, padded_pitch, bad, bad_padding, bad_slice, bad_sub, sub_width, sub_height);
    free(packed);
    free(padded);
    free(slice);
    free(sub);
    workload_free(&device, matrix, false);
    workload_free(&device, second, false);
    workload_device_close(&device);
    bool pass = bad == 0 && bad_padding == 0 && bad_slice == 0 && bad_sub == 0;
    printf("Result = %s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
#endif
