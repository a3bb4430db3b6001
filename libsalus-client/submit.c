/* Wrappers of the calls that submit GPU work: each passes the gate, then calls the real
 * driver. In SHIM_MODE_FAILED the gate answers the session's error. */
#include "shim-internal.h"

#define GATED(stream, ptds, call)                                                              \
    do {                                                                                       \
        CUresult gate_rc_ = shim_gate((stream), (ptds));                                       \
        if (gate_rc_ != CUDA_SUCCESS)                                                          \
            return gate_rc_;                                                                   \
        return (call);                                                                         \
    } while (0)

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, CUstream s,
                                void **params, void **extra)
{
    GATED(s, 0, shim.real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                     unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                     CUstream s, void **params, void **extra)
{
    GATED(s, 1, shim.real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params, extra));
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    GATED(config ? config->hStream : NULL, 0, shim.real.cuLaunchKernelEx(config, f, params, extra));
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                       void **extra)
{
    GATED(config ? config->hStream : NULL, 1,
          shim.real.cuLaunchKernelEx_ptsz(config, f, params, extra));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                           CUstream s, void **params)
{
    GATED(s, 0, shim.real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s, params));
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                                unsigned shared, CUstream s, void **params)
{
    GATED(s, 1,
          shim.real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params));
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    GATED(s, 0, shim.real.cuLaunchHostFunc(s, fn, data));
}

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
    GATED(s, 1, shim.real.cuLaunchHostFunc_ptsz(s, fn, data));
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    GATED(s, 0, shim.real.cuGraphLaunch(exec, s));
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    GATED(s, 1, shim.real.cuGraphLaunch_ptsz(exec, s));
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemcpyAsync(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemcpyAsync_ptsz(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemcpyHtoDAsync_v2(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemcpyHtoDAsync_v2_ptsz(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemcpyDtoHAsync_v2(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemcpyDtoHAsync_v2_ptsz(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemcpyDtoDAsync_v2(dst, src, n, s));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemcpyDtoDAsync_v2_ptsz(dst, src, n, s));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemsetD8Async(dst, v, n, s));
}

CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemsetD8Async_ptsz(dst, v, n, s));
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemsetD16Async(dst, v, n, s));
}

CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short v, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemsetD16Async_ptsz(dst, v, n, s));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
    GATED(s, 0, shim.real.cuMemsetD32Async(dst, v, n, s));
}

CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
    GATED(s, 1, shim.real.cuMemsetD32Async_ptsz(dst, v, n, s));
}
