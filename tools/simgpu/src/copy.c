/* cuMemcpy* and cuMemset* (1D, every direction, sync and async) and pointer
 * attributes.
 *
 * All memory is host memory, so every direction is one memmove. A copy or set
 * is an operation on a stream: the async forms queue it on the given stream,
 * the sync forms queue it on the default stream (legacy, or per-thread for the
 * _ptds entry points) and wait for it, which gives them the driver's ordering
 * against earlier work. Copies use the copy engines of a real GPU: they do not
 * occupy the simulated execution engine and take no modelled time. */
#include <string.h>

#include "simgpu-internal.h"

static CUresult submit_copy(void *dst, const void *src, size_t bytes, CUstream stream,
                            bool per_thread, bool wait)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    if (bytes == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_COPY);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.bytes = bytes;
    return simgpu_stream_submit(stream, op, wait);
}

#define DPTR(p) ((void *)(uintptr_t)(p))

/* sync copies: legacy default stream, and the _ptds forms on the per-thread one */
SIMGPU_API cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return submit_copy(DPTR(d), DPTR(s), n, NULL, false, true); }
SIMGPU_API cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return submit_copy(DPTR(d), DPTR(s), n, NULL, true, true); }
SIMGPU_API cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return submit_copy(DPTR(d), s, n, NULL, false, true); }
SIMGPU_API cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return submit_copy(DPTR(d), s, n, NULL, true, true); }
SIMGPU_API cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return submit_copy(d, DPTR(s), n, NULL, false, true); }
SIMGPU_API cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return submit_copy(d, DPTR(s), n, NULL, true, true); }
SIMGPU_API cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return submit_copy(DPTR(d), DPTR(s), n, NULL, false, true); }
SIMGPU_API cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return submit_copy(DPTR(d), DPTR(s), n, NULL, true, true); }

SIMGPU_API cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    if (!simgpu_ctx_valid(dc) || !simgpu_ctx_valid(sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    return submit_copy(DPTR(d), DPTR(s), n, NULL, false, true);
}

SIMGPU_API cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    if (!simgpu_ctx_valid(dc) || !simgpu_ctx_valid(sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    return submit_copy(DPTR(d), DPTR(s), n, NULL, true, true);
}

/* async copies */
SIMGPU_API cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return submit_copy(DPTR(d), DPTR(s), n, st, false, false); }
SIMGPU_API cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return submit_copy(DPTR(d), DPTR(s), n, st, true, false); }
SIMGPU_API cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { return submit_copy(DPTR(d), s, n, st, false, false); }
SIMGPU_API cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return submit_copy(DPTR(d), s, n, st, true, false); }
SIMGPU_API cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { return submit_copy(d, DPTR(s), n, st, false, false); }
SIMGPU_API cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) { return submit_copy(d, DPTR(s), n, st, true, false); }
SIMGPU_API cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return submit_copy(DPTR(d), DPTR(s), n, st, false, false); }
SIMGPU_API cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return submit_copy(DPTR(d), DPTR(s), n, st, true, false); }

SIMGPU_API cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                             CUstream st)
{
    if (!simgpu_ctx_valid(dc) || !simgpu_ctx_valid(sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    return submit_copy(DPTR(d), DPTR(s), n, st, false, false);
}

SIMGPU_API cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc,
                                  size_t n, CUstream st)
{
    if (!simgpu_ctx_valid(dc) || !simgpu_ctx_valid(sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    return submit_copy(DPTR(d), DPTR(s), n, st, true, false);
}

static CUresult submit_set(CUdeviceptr dst, uint32_t value, unsigned element_bytes, size_t count,
                           CUstream stream, bool per_thread, bool wait)
{
    CUresult rc = simgpu_stream_resolve(stream, per_thread, &stream);
    if (rc)
        return rc;
    if (count == 0)
        return CUDA_SUCCESS;
    if (!dst || dst % element_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_op_t *op = simgpu_op_new(SIMGPU_OP_SET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = DPTR(dst);
    op->u.set.value = value;
    op->u.set.element_bytes = element_bytes;
    op->u.set.count = count;
    return simgpu_stream_submit(stream, op, wait);
}

SIMGPU_API cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return submit_set(d, v, 1, n, NULL, false, true); }
SIMGPU_API cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return submit_set(d, v, 1, n, NULL, true, true); }
SIMGPU_API cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return submit_set(d, v, 2, n, NULL, false, true); }
SIMGPU_API cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return submit_set(d, v, 2, n, NULL, true, true); }
SIMGPU_API cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return submit_set(d, v, 4, n, NULL, false, true); }
SIMGPU_API cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return submit_set(d, v, 4, n, NULL, true, true); }
SIMGPU_API cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return submit_set(d, v, 1, n, s, false, false); }
SIMGPU_API cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return submit_set(d, v, 1, n, s, true, false); }
SIMGPU_API cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return submit_set(d, v, 2, n, s, false, false); }
SIMGPU_API cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return submit_set(d, v, 2, n, s, true, false); }
SIMGPU_API cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return submit_set(d, v, 4, n, s, false, false); }
SIMGPU_API cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return submit_set(d, v, 4, n, s, true, false); }

/* ---- pointer attributes ---- */

typedef struct pointer_facts {
    bool known;
    bool device;              /* device memory (cuMemAlloc or a VMM mapping) */
    bool vmm;
    simgpu_range_t range;
    simgpu_vmm_info_t mapping;
} pointer_facts_t;

static void pointer_lookup(CUdeviceptr ptr, pointer_facts_t *f)
{
    memset(f, 0, sizeof(*f));
    if (simgpu_vmm_find((uintptr_t)ptr, &f->mapping)) {
        f->known = f->device = f->vmm = true;
        f->range.base = f->mapping.base;
        f->range.bytes = f->mapping.bytes;
        f->range.device = f->mapping.device;
        f->range.id = f->mapping.handle_id;
    } else if (simgpu_range_find((uintptr_t)ptr, &f->range) &&
               f->range.kind != SIMGPU_RANGE_RESERVED) {
        f->known = true;
        f->device = f->range.kind == SIMGPU_RANGE_DEVICE || f->range.kind == SIMGPU_RANGE_IPC;
    }
}

static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
                                  const pointer_facts_t *f)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = f->range.ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !f->known ? 0 : f->device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (f->device)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = DPTR(ptr);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = f->range.id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = f->range.device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)f->range.base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = f->range.bytes;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = f->vmm ? f->mapping.handle_types : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = f->vmm ? (unsigned)f->mapping.access
                                   : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = NULL;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* How many bytes pointer_attribute() writes for attr. */
static size_t attribute_bytes(CUpointer_attribute attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        return 8;
    default:
        return 4;
    }
}

SIMGPU_API cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    pointer_facts_t f;
    pointer_lookup(ptr, &f);
    if (!f.known)
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, attr, ptr, &f);
}

SIMGPU_API cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attrs, void **data,
                                  CUdeviceptr ptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    pointer_facts_t f;
    pointer_lookup(ptr, &f);
    for (unsigned i = 0; i < count; i++) {
        if (!data[i])
            continue;
        /* unknown memory, or an attribute that does not apply: zero, as the
         * driver answers for plain host memory */
        if (!f.known || pointer_attribute(data[i], attrs[i], ptr, &f) != CUDA_SUCCESS)
            memset(data[i], 0, attribute_bytes(attrs[i]));
        if (!f.known && attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
            *(int *)data[i] = -2;
    }
    return CUDA_SUCCESS;
}
