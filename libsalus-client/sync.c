/* Wrappers of the synchronous calls. Copies and sets are GPU work (they pass the gate);
 * after each synchronising call the gate learns whether the job's work is all complete (a
 * candidate iteration boundary). */
#include "shim-internal.h"

#define SYNCED(symbol, whole_context, args)                                                    \
    do {                                                                                       \
        CUresult rc_ = shim_init();                                                            \
        if (rc_ != CUDA_SUCCESS)                                                               \
            return rc_;                                                                        \
        if (!shim.real.symbol)                                                                 \
            return CUDA_ERROR_NOT_SUPPORTED;                                                   \
        rc_ = shim.real.symbol args;                                                           \
        if (rc_ == CUDA_SUCCESS)                                                               \
            shim_after_sync(whole_context);                                                    \
        return rc_;                                                                            \
    } while (0)

/* GPU work that also waits for its stream (the legacy or the per-thread default stream). */
#define GATED_SYNC_WRAPPER(symbol, ptds, params, args)                                         \
    CUresult CUDAAPI symbol params                                                             \
    {                                                                                          \
        shim_gate_ticket_t ticket_;                                                            \
        CUresult rc_ = shim_gate(NULL, (ptds), &ticket_);                                      \
        if (rc_ != CUDA_SUCCESS)                                                               \
            return rc_;                                                                        \
        rc_ = shim.real.symbol ? shim.real.symbol args : CUDA_ERROR_NOT_SUPPORTED;             \
        shim_gate_done(ticket_);                                                               \
        if (rc_ == CUDA_SUCCESS)                                                               \
            shim_after_sync(0);                                                                \
        return rc_;                                                                            \
    }

CUresult CUDAAPI cuCtxSynchronize(void)
{
    SYNCED(cuCtxSynchronize, 1, ());
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    SYNCED(cuCtxSynchronize_v2, 1, (ctx));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream s)
{
    SYNCED(cuStreamSynchronize, 0, (s));
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s)
{
    SYNCED(cuStreamSynchronize_ptsz, 0, (s));
}

CUresult CUDAAPI cuEventSynchronize(CUevent e)
{
    SYNCED(cuEventSynchronize, 0, (e));
}

GATED_SYNC_WRAPPER(cuMemcpyDtoH_v2, 0, (void *dst, CUdeviceptr src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpyDtoH_v2_ptds, 1, (void *dst, CUdeviceptr src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpyHtoD_v2, 0, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpyHtoD_v2_ptds, 1, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpyDtoD_v2, 0, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpyDtoD_v2_ptds, 1, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpy, 0, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemcpy_ptds, 1, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GATED_SYNC_WRAPPER(cuMemsetD8_v2, 0, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))
GATED_SYNC_WRAPPER(cuMemsetD8_v2_ptds, 1, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))
GATED_SYNC_WRAPPER(cuMemsetD16_v2, 0, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))
GATED_SYNC_WRAPPER(cuMemsetD16_v2_ptds, 1, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))
GATED_SYNC_WRAPPER(cuMemsetD32_v2, 0, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))
GATED_SYNC_WRAPPER(cuMemsetD32_v2_ptds, 1, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))
