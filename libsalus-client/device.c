/* Wrappers of the session, device-view and memory calls. */
#include "shim-internal.h"

#include <stdlib.h>

CUresult CUDAAPI cuInit(unsigned int flags)
{
    CUresult rc = shim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return shim.real.cuInit(flags);
}

/* A job sees only the GPUs it was placed on (one, or N with salusctl run --gpus N), as
 * CUDA_VISIBLE_DEVICES would show them: device k is the job's k-th GPU. */
CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult rc = shim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (shim.mode != SHIM_MODE_MANAGED)
        return shim.real.cuDeviceGetCount(count);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = shim.gpu_count > 0 ? shim.gpu_count : 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = shim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (shim.mode != SHIM_MODE_MANAGED)
        return shim.real.cuDeviceGet(device, ordinal);
    int count = shim.gpu_count > 0 ? shim.gpu_count : 1;
    if (ordinal < 0 || ordinal >= count)
        return CUDA_ERROR_INVALID_DEVICE;
    return shim.real.cuDeviceGet(device, count > 1 ? shim.gpus[ordinal] : shim.gpu);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUresult rc = shim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (shim.mode != SHIM_MODE_MANAGED)
        return shim.real.cuMemGetInfo_v2(free_bytes, total_bytes);
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    shim_mem_info(free_bytes, total_bytes);
    return CUDA_SUCCESS;
}

#define MANAGED_OR_REAL(real_call)                                                             \
    CUresult init_rc_ = shim_init();                                                           \
    if (init_rc_ != CUDA_SUCCESS)                                                              \
        return init_rc_;                                                                       \
    if (shim.mode != SHIM_MODE_MANAGED)                                                        \
        return (real_call)

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    MANAGED_OR_REAL(shim.real.cuMemAlloc_v2(dptr, bytes));
    return shim_mem_alloc(dptr, bytes, NULL, 0);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                    unsigned int element_bytes)
{
    MANAGED_OR_REAL(shim.real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_bytes));
    if (!pitch || width == 0 || height == 0 ||
        (element_bytes != 4 && element_bytes != 8 && element_bytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) / 512 * 512;
    if (height > SIZE_MAX / p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = shim_mem_alloc(dptr, p * height, NULL, 0);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    MANAGED_OR_REAL(shim.real.cuMemFree_v2(dptr));
    /* cuMemFree synchronises: the block may still be in use by queued work */
    CUresult rc = shim.real.cuCtxSynchronize();
    if (rc != CUDA_SUCCESS)
        return rc;
    shim_after_sync(1);
    rc = shim_mem_free(dptr, NULL, 0);
    if (rc == CUDA_ERROR_NOT_FOUND) /* managed memory, or not the job's at all */
        rc = shim_charged_free(dptr);
    return rc == CUDA_ERROR_NOT_FOUND ? shim.real.cuMemFree_v2(dptr) : rc;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    MANAGED_OR_REAL(shim.real.cuMemAllocAsync(dptr, bytes, s));
    return shim_mem_alloc(dptr, bytes, s, 1);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    MANAGED_OR_REAL(shim.real.cuMemAllocAsync_ptsz(dptr, bytes, s));
    return shim_mem_alloc(dptr, bytes, s ? s : CU_STREAM_PER_THREAD, 1);
}

/* The pool's own attributes do not apply: the job's memory comes from salusd. */
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                         CUstream s)
{
    MANAGED_OR_REAL(shim.real.cuMemAllocFromPoolAsync(dptr, bytes, pool, s));
    return shim_mem_alloc(dptr, bytes, s, 1);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                              CUstream s)
{
    MANAGED_OR_REAL(shim.real.cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, s));
    return shim_mem_alloc(dptr, bytes, s ? s : CU_STREAM_PER_THREAD, 1);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    MANAGED_OR_REAL(shim.real.cuMemFreeAsync(dptr, s));
    CUresult rc = shim_mem_free(dptr, s, 1);
    return rc == CUDA_ERROR_NOT_FOUND ? shim.real.cuMemFreeAsync(dptr, s) : rc;
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    MANAGED_OR_REAL(shim.real.cuMemFreeAsync_ptsz(dptr, s));
    CUresult rc = shim_mem_free(dptr, s ? s : CU_STREAM_PER_THREAD, 1);
    return rc == CUDA_ERROR_NOT_FOUND ? shim.real.cuMemFreeAsync_ptsz(dptr, s) : rc;
}
