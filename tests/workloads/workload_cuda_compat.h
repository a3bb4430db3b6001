/* Lets g++ compile the CUDA kernels of a workload .cu as ordinary C++.
 *
 * Force-included (-include) into the two g++ builds of every workload source:
 * the host program and the simgpu kernel pack. nvcc never sees it (it has its own
 * meaning for all of these names), so every definition sits under !__CUDACC__.
 *
 * The index variables are thread_local: simgpu may run launches of different
 * streams on different worker threads at the same time, and the pack runner
 * (workload_pack.h) sets them before each call of a kernel body. */
#ifndef SALUS_TESTS_WORKLOADS_CUDA_COMPAT_H
#define SALUS_TESTS_WORKLOADS_CUDA_COMPAT_H

#if !defined(__CUDACC__)

#ifndef __cplusplus
#error "workload sources are C++: compile them with g++ -x c++"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))

typedef struct workload_dim3 {
    unsigned x, y, z;
} workload_dim3;

inline thread_local workload_dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The few device intrinsics the workload kernels use. Relaxed order is enough:
 * a kernel's results are read only after the launch completes. */
static inline unsigned atomicAdd(unsigned *address, unsigned value)
{
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}

#endif /* !__CUDACC__ */

#endif
