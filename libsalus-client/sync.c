/* Wrappers of the synchronising calls: after each, the gate learns whether the job's work
 * is all complete (a candidate iteration boundary). */
#include "shim-internal.h"

#define SYNCED(call, whole_context)                                                            \
    do {                                                                                       \
        CUresult init_rc_ = shim_init();                                                       \
        if (init_rc_ != CUDA_SUCCESS)                                                          \
            return init_rc_;                                                                   \
        CUresult rc_ = (call);                                                                 \
        if (rc_ == CUDA_SUCCESS)                                                               \
            shim_after_sync(whole_context);                                                    \
        return rc_;                                                                            \
    } while (0)

CUresult CUDAAPI cuCtxSynchronize(void)
{
    SYNCED(shim.real.cuCtxSynchronize(), 1);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    if (shim_init() == CUDA_SUCCESS && !shim.real.cuCtxSynchronize_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    SYNCED(shim.real.cuCtxSynchronize_v2(ctx), 1);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream s)
{
    SYNCED(shim.real.cuStreamSynchronize(s), 0);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s)
{
    SYNCED(shim.real.cuStreamSynchronize_ptsz(s), 0);
}

CUresult CUDAAPI cuEventSynchronize(CUevent e)
{
    SYNCED(shim.real.cuEventSynchronize(e), 0);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    SYNCED(shim.real.cuMemcpyDtoH_v2(dst, src, n), 0);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
    SYNCED(shim.real.cuMemcpyDtoH_v2_ptds(dst, src, n), 0);
}
