/* Wrappers of the calls that submit GPU work: each passes the gate, then calls the real
 * driver; the gate counts the submission as in flight until the real call returned, so that
 * no thread declares a boundary while another is between the gate and the driver. In
 * SHIM_MODE_FAILED the gate answers the session's error. */
#include "shim-internal.h"

/* GATED_AS(gate function, symbol, per-thread?, stream expression, (params), (arguments)) */
#define GATED_AS(gate, symbol, ptds, stream, params, args)                                     \
    CUresult CUDAAPI symbol params                                                             \
    {                                                                                          \
        shim_gate_ticket_t ticket_;                                                            \
        CUresult rc_ = gate((stream), (ptds), &ticket_);                                       \
        if (rc_ != CUDA_SUCCESS)                                                               \
            return rc_;                                                                        \
        rc_ = shim.real.symbol ? shim.real.symbol args : CUDA_ERROR_NOT_SUPPORTED;             \
        shim_gate_done(ticket_);                                                               \
        return rc_;                                                                            \
    }
#define GATED_WRAPPER(symbol, ptds, stream, params, args)                                      \
    GATED_AS(shim_gate, symbol, ptds, stream, params, args)
#define LAUNCH_WRAPPER(symbol, ptds, stream, params, args)                                     \
    GATED_AS(shim_gate_launch, symbol, ptds, stream, params, args)

#define LAUNCH_PARAMS                                                                          \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
     unsigned shared, CUstream s, void **params, void **extra)
#define LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, shared, s, params, extra)
LAUNCH_WRAPPER(cuLaunchKernel, 0, s, LAUNCH_PARAMS, LAUNCH_ARGS)
LAUNCH_WRAPPER(cuLaunchKernel_ptsz, 1, s, LAUNCH_PARAMS, LAUNCH_ARGS)

#define LAUNCH_EX_PARAMS (const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
LAUNCH_WRAPPER(cuLaunchKernelEx, 0, config ? config->hStream : NULL, LAUNCH_EX_PARAMS,
              (config, f, params, extra))
LAUNCH_WRAPPER(cuLaunchKernelEx_ptsz, 1, config ? config->hStream : NULL, LAUNCH_EX_PARAMS,
              (config, f, params, extra))

#define COOP_PARAMS                                                                            \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
     unsigned shared, CUstream s, void **params)
#define COOP_ARGS (f, gx, gy, gz, bx, by, bz, shared, s, params)
LAUNCH_WRAPPER(cuLaunchCooperativeKernel, 0, s, COOP_PARAMS, COOP_ARGS)
LAUNCH_WRAPPER(cuLaunchCooperativeKernel_ptsz, 1, s, COOP_PARAMS, COOP_ARGS)

LAUNCH_WRAPPER(cuLaunchHostFunc, 0, s, (CUstream s, CUhostFn fn, void *data), (s, fn, data))
LAUNCH_WRAPPER(cuLaunchHostFunc_ptsz, 1, s, (CUstream s, CUhostFn fn, void *data), (s, fn, data))
LAUNCH_WRAPPER(cuGraphLaunch, 0, s, (CUgraphExec exec, CUstream s), (exec, s))
LAUNCH_WRAPPER(cuGraphLaunch_ptsz, 1, s, (CUgraphExec exec, CUstream s), (exec, s))

#define COPY_PARAMS (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
GATED_WRAPPER(cuMemcpyAsync, 0, s, COPY_PARAMS, (dst, src, n, s))
GATED_WRAPPER(cuMemcpyAsync_ptsz, 1, s, COPY_PARAMS, (dst, src, n, s))
GATED_WRAPPER(cuMemcpyDtoDAsync_v2, 0, s, COPY_PARAMS, (dst, src, n, s))
GATED_WRAPPER(cuMemcpyDtoDAsync_v2_ptsz, 1, s, COPY_PARAMS, (dst, src, n, s))
#define HTOD_PARAMS (CUdeviceptr dst, const void *src, size_t n, CUstream s)
GATED_WRAPPER(cuMemcpyHtoDAsync_v2, 0, s, HTOD_PARAMS, (dst, src, n, s))
GATED_WRAPPER(cuMemcpyHtoDAsync_v2_ptsz, 1, s, HTOD_PARAMS, (dst, src, n, s))
#define DTOH_PARAMS (void *dst, CUdeviceptr src, size_t n, CUstream s)
GATED_WRAPPER(cuMemcpyDtoHAsync_v2, 0, s, DTOH_PARAMS, (dst, src, n, s))
GATED_WRAPPER(cuMemcpyDtoHAsync_v2_ptsz, 1, s, DTOH_PARAMS, (dst, src, n, s))
GATED_WRAPPER(cuMemcpy2DAsync_v2, 0, s, (const CUDA_MEMCPY2D *copy, CUstream s), (copy, s))
GATED_WRAPPER(cuMemcpy2DAsync_v2_ptsz, 1, s, (const CUDA_MEMCPY2D *copy, CUstream s), (copy, s))
GATED_WRAPPER(cuMemcpy3DAsync_v2, 0, s, (const CUDA_MEMCPY3D *copy, CUstream s), (copy, s))
GATED_WRAPPER(cuMemcpy3DAsync_v2_ptsz, 1, s, (const CUDA_MEMCPY3D *copy, CUstream s), (copy, s))
#define PEER_PARAMS                                                                            \
    (CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream s)
GATED_WRAPPER(cuMemcpyPeerAsync, 0, s, PEER_PARAMS, (dst, dst_ctx, src, src_ctx, n, s))
GATED_WRAPPER(cuMemcpyPeerAsync_ptsz, 1, s, PEER_PARAMS, (dst, dst_ctx, src, src_ctx, n, s))

GATED_WRAPPER(cuMemsetD8Async, 0, s, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s))
GATED_WRAPPER(cuMemsetD8Async_ptsz, 1, s, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s))
GATED_WRAPPER(cuMemsetD16Async, 0, s, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s))
GATED_WRAPPER(cuMemsetD16Async_ptsz, 1, s, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s))
GATED_WRAPPER(cuMemsetD32Async, 0, s, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s))
GATED_WRAPPER(cuMemsetD32Async_ptsz, 1, s, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s))
#define SET2D_PARAMS(T) (CUdeviceptr d, size_t pitch, T v, size_t w, size_t h, CUstream s)
GATED_WRAPPER(cuMemsetD2D8Async, 0, s, SET2D_PARAMS(unsigned char), (d, pitch, v, w, h, s))
GATED_WRAPPER(cuMemsetD2D8Async_ptsz, 1, s, SET2D_PARAMS(unsigned char), (d, pitch, v, w, h, s))
GATED_WRAPPER(cuMemsetD2D16Async, 0, s, SET2D_PARAMS(unsigned short), (d, pitch, v, w, h, s))
GATED_WRAPPER(cuMemsetD2D16Async_ptsz, 1, s, SET2D_PARAMS(unsigned short), (d, pitch, v, w, h, s))
GATED_WRAPPER(cuMemsetD2D32Async, 0, s, SET2D_PARAMS(unsigned int), (d, pitch, v, w, h, s))
GATED_WRAPPER(cuMemsetD2D32Async_ptsz, 1, s, SET2D_PARAMS(unsigned int), (d, pitch, v, w, h, s))

#define PREFETCH_PARAMS                                                                        \
    (CUdeviceptr p, size_t n, CUmemLocation where, unsigned int flags, CUstream s)
GATED_WRAPPER(cuMemPrefetchAsync_v2, 0, s, PREFETCH_PARAMS, (p, n, where, flags, s))
GATED_WRAPPER(cuMemPrefetchAsync_v2_ptsz, 1, s, PREFETCH_PARAMS, (p, n, where, flags, s))
#define WRITE32_PARAMS (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int flags)
#define WRITE64_PARAMS (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int flags)
GATED_WRAPPER(cuStreamWriteValue32_v2, 0, s, WRITE32_PARAMS, (s, a, v, flags))
GATED_WRAPPER(cuStreamWriteValue32_v2_ptsz, 1, s, WRITE32_PARAMS, (s, a, v, flags))
GATED_WRAPPER(cuStreamWriteValue64_v2, 0, s, WRITE64_PARAMS, (s, a, v, flags))
GATED_WRAPPER(cuStreamWriteValue64_v2_ptsz, 1, s, WRITE64_PARAMS, (s, a, v, flags))
#define BATCH_PARAMS                                                                           \
    (CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
GATED_WRAPPER(cuStreamBatchMemOp_v2, 0, s, BATCH_PARAMS, (s, count, ops, flags))
GATED_WRAPPER(cuStreamBatchMemOp_v2_ptsz, 1, s, BATCH_PARAMS, (s, count, ops, flags))

CUresult CUDAAPI cuStreamDestroy_v2(CUstream s)
{
    CUresult rc = shim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    shim_forget_stream(s);
    return shim.real.cuStreamDestroy_v2(s);
}
