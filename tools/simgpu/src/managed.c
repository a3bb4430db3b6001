/* Managed memory and arrays, as plain linear memory.
 *
 * cuMemAllocManaged: simgpu's device memory is host memory already, so managed memory is a
 * device allocation the host may touch; it is charged to the device like cuMemAlloc and
 * freed with cuMemFree. Arrays (cuArrayCreate, cuArray3DCreate) are a descriptor and a
 * linear device allocation of their elements; mipmapped arrays and textures are not
 * implemented (CUDA_ERROR_NOT_SUPPORTED). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "simgpu-internal.h"

#define SIMGPU_MAGIC_ARRAY 0x53474152u /* "SGAR" */

SIMGPU_API cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!dptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = (bytes + page - 1) / page * page;
    if (mapped < bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = simgpu_mem_charge(ctx->device, mapped);
    if (rc)
        return rc;
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        simgpu_mem_uncharge(ctx->device, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    simgpu_range_t r = {.base = (uintptr_t)p, .bytes = bytes, .mapped_bytes = mapped,
                        .kind = SIMGPU_RANGE_DEVICE, .device = ctx->device, .ctx = ctx,
                        .flags = flags, .id = simgpu_next_id()};
    if (simgpu_range_insert(&r) < 0) {
        munmap(p, mapped);
        simgpu_mem_uncharge(ctx->device, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

struct CUarray_st {
    uint32_t magic;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    CUdeviceptr data;
};

static size_t format_bytes(CUarray_format format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0; /* block-compressed, video and packed formats: not as linear memory */
    }
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!out || !desc || desc->Width == 0 ||
        (desc->NumChannels != 1 && desc->NumChannels != 2 && desc->NumChannels != 4))
        return CUDA_ERROR_INVALID_VALUE;
    size_t element = format_bytes(desc->Format);
    if (element == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    /* 1D: Height 0, Depth 0; 2D: Depth 0; a depth without a height is invalid */
    if (desc->Depth && !desc->Height)
        return CUDA_ERROR_INVALID_VALUE;
    if (desc->Flags & (CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_TEXTURE_GATHER |
                       CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t h = desc->Height ? desc->Height : 1, d = desc->Depth ? desc->Depth : 1, bytes;
    if (__builtin_mul_overflow(desc->Width, h, &bytes) || __builtin_mul_overflow(bytes, d, &bytes) ||
        __builtin_mul_overflow(bytes, desc->NumChannels * element, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof(*a));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = cuMemAlloc_v2(&a->data, bytes);
    if (rc) {
        free(a);
        return rc;
    }
    a->magic = SIMGPU_MAGIC_ARRAY;
    a->desc = *desc;
    *out = a;
    return CUDA_SUCCESS;
}

SIMGPU_API cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    if (!desc)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = desc->Width, .Height = desc->Height,
                                  .Format = desc->Format, .NumChannels = desc->NumChannels};
    return array_create(array, &d3);
}

SIMGPU_API cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    return array_create(array, desc);
}

static bool array_valid(CUarray array)
{
    return array && array->magic == SIMGPU_MAGIC_ARRAY;
}

SIMGPU_API cuArrayDestroy(CUarray array)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!array_valid(array))
        return CUDA_ERROR_INVALID_HANDLE;
    rc = cuMemFree_v2(array->data);
    array->magic = 0;
    free(array);
    return rc;
}

SIMGPU_API cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *desc, CUarray array)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!desc)
        return CUDA_ERROR_INVALID_VALUE;
    if (!array_valid(array) || array->desc.Depth)
        return CUDA_ERROR_INVALID_HANDLE;
    *desc = (CUDA_ARRAY_DESCRIPTOR){.Width = array->desc.Width, .Height = array->desc.Height,
                                    .Format = array->desc.Format,
                                    .NumChannels = array->desc.NumChannels};
    return CUDA_SUCCESS;
}

SIMGPU_API cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray array)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!desc)
        return CUDA_ERROR_INVALID_VALUE;
    if (!array_valid(array))
        return CUDA_ERROR_INVALID_HANDLE;
    *desc = array->desc;
    return CUDA_SUCCESS;
}
