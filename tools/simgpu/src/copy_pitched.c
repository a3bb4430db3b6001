/* cuMemcpy2D / cuMemcpy3D (and Unaligned, Async, _ptds/_ptsz): pitched copies between host
 * and device memory (linear memory only: CUDA arrays answer CUDA_ERROR_NOT_SUPPORTED), and
 * the pitched sets cuMemsetD2D8/16/32 (sync and async).
 *
 * All memory is host memory, so a pitched copy is one operation (SIMGPU_OP_COPY3D) that
 * moves Height rows of WidthInBytes per slice, Depth slices, on a stream, with the same
 * stream rules as the 1-D copies (copy.c): the sync forms wait on the default stream. */
#include "simgpu-internal.h"

/* one side of a pitched copy, reduced to an address and its strides */
typedef struct pitched_side {
    CUmemorytype type;
    const void *host;
    CUdeviceptr device;
    CUarray array;
    size_t x_bytes, y, z, pitch, height;
} pitched_side_t;

static CUresult side_address(const pitched_side_t *side, size_t width_bytes, size_t height, size_t depth,
                             uintptr_t *address, size_t *slice_bytes)
{
    uintptr_t base;
    switch (side->type) {
    case CU_MEMORYTYPE_HOST:
        base = (uintptr_t)side->host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = (uintptr_t)side->device;
        break;
    case CU_MEMORYTYPE_ARRAY: {
        static int noted;
        return simgpu_not_supported("cuMemcpy2D/3D to or from a CUDA array", &noted);
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!base)
        return CUDA_ERROR_INVALID_VALUE;
    /* rows must not overlap each other, nor slices (the real driver's checks) */
    if ((height > 1 || depth > 1) && side->pitch < width_bytes + side->x_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (depth > 1 && side->height < height + side->y)
        return CUDA_ERROR_INVALID_VALUE;
    *slice_bytes = side->pitch * side->height;
    *address = base + side->z * *slice_bytes + side->y * side->pitch + side->x_bytes;
    return CUDA_SUCCESS;
}

static CUresult submit_pitched(const pitched_side_t *dst, const pitched_side_t *src, size_t width_bytes,
                               size_t height, size_t depth, CUstream stream, bool per_thread, bool wait)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    uintptr_t dst_address, src_address;
    size_t dst_slice, src_slice;
    rc = side_address(dst, width_bytes, height, depth, &dst_address, &dst_slice);
    if (rc)
        return rc;
    rc = side_address(src, width_bytes, height, depth, &src_address, &src_slice);
    if (rc)
        return rc;
    if (width_bytes == 0 || height == 0 || depth == 0)
        return CUDA_SUCCESS;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_COPY3D);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy3d.dst = (unsigned char *)dst_address;
    op->u.copy3d.src = (const unsigned char *)src_address;
    op->u.copy3d.width_bytes = width_bytes;
    op->u.copy3d.height = height;
    op->u.copy3d.depth = depth;
    op->u.copy3d.dst_pitch = dst->pitch;
    op->u.copy3d.src_pitch = src->pitch;
    op->u.copy3d.dst_slice = dst_slice;
    op->u.copy3d.src_slice = src_slice;
    return simgpu_stream_submit(stream, op, wait);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream stream, bool per_thread, bool wait)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pitched_side_t src = {p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                          p->srcXInBytes, p->srcY, 0, p->srcPitch, p->Height + p->srcY};
    pitched_side_t dst = {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                          p->dstXInBytes, p->dstY, 0, p->dstPitch, p->Height + p->dstY};
    return submit_pitched(&dst, &src, p->WidthInBytes, p->Height, 1, stream, per_thread, wait);
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream stream, bool per_thread, bool wait)
{
    if (!p || p->reserved0 || p->reserved1 || p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    pitched_side_t src = {p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                          p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight};
    pitched_side_t dst = {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                          p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight};
    return submit_pitched(&dst, &src, p->WidthInBytes, p->Height, p->Depth, stream, per_thread, wait);
}

SIMGPU_API cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, false, true); }
SIMGPU_API cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, true, true); }
SIMGPU_API cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, false, true); }
SIMGPU_API cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, true, true); }
SIMGPU_API cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s, false, false); }
SIMGPU_API cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s, true, false); }
SIMGPU_API cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d(p, NULL, false, true); }
SIMGPU_API cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { return copy_3d(p, NULL, true, true); }
SIMGPU_API cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, s, false, false); }
SIMGPU_API cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, s, true, false); }

/* ---- pitched sets: Height rows of Width elements, dstPitch bytes apart ---- */

static CUresult submit_set_2d(CUdeviceptr dst, size_t pitch_bytes, uint32_t value, unsigned element_bytes,
                              size_t width, size_t height, CUstream stream, bool per_thread, bool wait)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    if (!dst || dst % element_bytes || pitch_bytes % element_bytes ||
        (height > 1 && pitch_bytes < width * element_bytes))
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_SET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = (void *)(uintptr_t)dst;
    op->u.set.value = value;
    op->u.set.element_bytes = element_bytes;
    op->u.set.count = width;
    op->u.set.rows = height;
    op->u.set.pitch_bytes = pitch_bytes;
    return simgpu_stream_submit(stream, op, wait);
}

#define SET_2D(bits, type, bytes)                                                                       \
    SIMGPU_API cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)          \
    {                                                                                                   \
        return submit_set_2d(d, pitch, v, bytes, w, h, NULL, false, true);                              \
    }                                                                                                   \
    SIMGPU_API cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)     \
    {                                                                                                   \
        return submit_set_2d(d, pitch, v, bytes, w, h, NULL, true, true);                               \
    }                                                                                                   \
    SIMGPU_API cuMemsetD2D##bits##Async(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h,        \
                                        CUstream s)                                                     \
    {                                                                                                   \
        return submit_set_2d(d, pitch, v, bytes, w, h, s, false, false);                                \
    }                                                                                                   \
    SIMGPU_API cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h,   \
                                             CUstream s)                                                \
    {                                                                                                   \
        return submit_set_2d(d, pitch, v, bytes, w, h, s, true, false);                                 \
    }

SET_2D(8, unsigned char, 1)
SET_2D(16, unsigned short, 2)
SET_2D(32, unsigned int, 4)
