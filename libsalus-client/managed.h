/* The driver calls the shim manages, written once. Every other driver entry point is
 * forwarded to the real driver by generated trampolines (forward.c).
 *
 * X(symbol, base name, CUDA version that introduced this variant, per-thread-stream variant)
 *
 * From this list come: the real-driver pointer table (shim.real.<symbol>), the exported
 * wrappers' declarations, and the answers of cuGetProcAddress / dlsym for managed names.
 * A wrapper is the C function named <symbol> in one of the shim's files. */
#ifndef SALUS_CLIENT_MANAGED_H
#define SALUS_CLIENT_MANAGED_H

#define SHIM_MANAGED_CALLS(X)                                                                  \
    /* session and the job's view of the device */                                             \
    X(cuInit, cuInit, 2000, 0)                                                                 \
    X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)                                             \
    X(cuDeviceGet, cuDeviceGet, 2000, 0)                                                       \
    X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0)                                                  \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                            \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                                         \
    /* memory: served from chunks the daemon hands out */                                      \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                                      \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                                            \
    X(cuMemFree_v2, cuMemFree, 3020, 0)                                                        \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                              \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                                         \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                              \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)                         \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                                \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                                           \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0)                                              \
    /* virtual memory management (vmm.c): chunks or charged */                                 \
    X(cuMemCreate, cuMemCreate, 10020, 0)                                                      \
    X(cuMemRelease, cuMemRelease, 10020, 0)                                                    \
    X(cuMemMap, cuMemMap, 10020, 0)                                                            \
    X(cuMemUnmap, cuMemUnmap, 10020, 0)                                                        \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0)                      \
    /* taken through the real driver and charged (charged.c) */                                \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                           \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                                                \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                                            \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                                 \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                                 \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)                               \
    /* GPU work: every submission passes the gate */                                           \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                                 \
    X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1)                                            \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                            \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1)                                       \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)                           \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1)                      \
    X(cuLaunchHostFunc, cuLaunchHostFunc, 10000, 0)                                            \
    X(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, 10000, 1)                                       \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                                  \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1)                                             \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0)                                                   \
    X(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, 1)                                              \
    X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, 0)                                        \
    X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, 1)                                   \
    X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, 0)                                        \
    X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, 1)                                   \
    X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, 0)                                        \
    X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, 1)                                   \
    X(cuMemsetD8Async, cuMemsetD8Async, 3020, 0)                                               \
    X(cuMemsetD8Async_ptsz, cuMemsetD8Async, 7000, 1)                                          \
    X(cuMemsetD16Async, cuMemsetD16Async, 3020, 0)                                             \
    X(cuMemsetD16Async_ptsz, cuMemsetD16Async, 7000, 1)                                        \
    X(cuMemsetD32Async, cuMemsetD32Async, 3020, 0)                                             \
    X(cuMemsetD32Async_ptsz, cuMemsetD32Async, 7000, 1)                                        \
    X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, 0)                                            \
    X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 7000, 1)                                       \
    X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, 0)                                            \
    X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 7000, 1)                                       \
    X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, 0)                                           \
    X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 7000, 1)                                      \
    X(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020, 0)                                           \
    X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, 7000, 1)                                      \
    X(cuMemsetD2D16Async, cuMemsetD2D16Async, 3020, 0)                                         \
    X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, 7000, 1)                                    \
    X(cuMemsetD2D32Async, cuMemsetD2D32Async, 3020, 0)                                         \
    X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, 7000, 1)                                    \
    X(cuMemPrefetchAsync_v2, cuMemPrefetchAsync, 12020, 0)                                     \
    X(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync, 12020, 1)                                \
    X(cuStreamWriteValue32_v2, cuStreamWriteValue32, 11070, 0)                                 \
    X(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32, 11070, 1)                            \
    X(cuStreamWriteValue64_v2, cuStreamWriteValue64, 11070, 0)                                 \
    X(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64, 11070, 1)                            \
    X(cuStreamBatchMemOp_v2, cuStreamBatchMemOp, 11070, 0)                                     \
    X(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp, 11070, 1)                                \
    /* synchronous copies and sets are GPU work too */                                         \
    X(cuMemcpy, cuMemcpy, 4000, 0)                                                             \
    X(cuMemcpy_ptds, cuMemcpy, 7000, 1)                                                        \
    X(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, 0)                                                  \
    X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, 1)                                             \
    X(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, 0)                                                  \
    X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, 1)                                             \
    X(cuMemsetD8_v2, cuMemsetD8, 3020, 0)                                                      \
    X(cuMemsetD8_v2_ptds, cuMemsetD8, 7000, 1)                                                 \
    X(cuMemsetD16_v2, cuMemsetD16, 3020, 0)                                                    \
    X(cuMemsetD16_v2_ptds, cuMemsetD16, 7000, 1)                                               \
    X(cuMemsetD32_v2, cuMemsetD32, 3020, 0)                                                    \
    X(cuMemsetD32_v2_ptds, cuMemsetD32, 7000, 1)                                               \
    /* streams the gate watches */                                                             \
    X(cuStreamDestroy_v2, cuStreamDestroy, 4000, 0)                                            \
    /* synchronising calls: where iteration boundaries are found */                            \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                                             \
    X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, 0)                                         \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)                                       \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, 1)                                  \
    X(cuEventSynchronize, cuEventSynchronize, 2000, 0)                                         \
    X(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, 0)                                                  \
    X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, 1)

#endif
