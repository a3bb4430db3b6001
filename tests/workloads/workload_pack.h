/* Turns the CUDA kernels of a workload .cu into a simgpu kernel pack.
 *
 * Included at the end of a workload source when it is compiled with -DSIMGPU_PACK
 * (g++, with workload_cuda_compat.h force-included). For each kernel the source
 * lists WORKLOAD_PACK_KERNEL(name, cost) in a table and ends with
 * WORKLOAD_PACK_EXPORT(table), which defines the one exported symbol of the pack.
 *
 * The run() wrapper reads every argument out of cuLaunchKernel's kernelParams
 * (typed by the kernel's own signature, so the list cannot drift from the kernel),
 * then walks the grid block by block and each block thread by thread, setting the
 * thread_local index variables and calling the kernel body. Threads of a block run
 * one after another, so kernels must not use __syncthreads or shared memory. */
#ifndef SALUS_TESTS_WORKLOADS_PACK_H
#define SALUS_TESTS_WORKLOADS_PACK_H

#include <cstddef>
#include <cstring>
#include <tuple>
#include <utility>

#include "simgpu_kernel.h"

/* copy, not cast: kernelParams[i] points at the caller's value, whose static type
 * (CUdeviceptr for a pointer argument) differs from the kernel's parameter type */
template <typename T>
static T workload_pack_argument(const void *value)
{
    T argument;
    std::memcpy(&argument, value, sizeof argument);
    return argument;
}

template <typename... Args, std::size_t... Index>
static void workload_pack_walk_grid(void (*kernel)(Args...), const simgpu_launch *launch,
                                    std::index_sequence<Index...>)
{
    const std::tuple<Args...> arguments{workload_pack_argument<Args>(launch->params[Index])...};

    gridDim = {launch->grid.x, launch->grid.y, launch->grid.z};
    blockDim = {launch->block.x, launch->block.y, launch->block.z};
    for (unsigned bz = 0; bz < launch->grid.z; bz++)
        for (unsigned by = 0; by < launch->grid.y; by++)
            for (unsigned bx = 0; bx < launch->grid.x; bx++) {
                blockIdx = {bx, by, bz};
                for (unsigned tz = 0; tz < launch->block.z; tz++)
                    for (unsigned ty = 0; ty < launch->block.y; ty++)
                        for (unsigned tx = 0; tx < launch->block.x; tx++) {
                            threadIdx = {tx, ty, tz};
                            kernel(std::get<Index>(arguments)...);
                        }
            }
}

template <typename... Args>
static void workload_pack_run(void (*kernel)(Args...), const simgpu_launch *launch)
{
    workload_pack_walk_grid(kernel, launch, std::index_sequence_for<Args...>{});
}

/* one row of a pack table; cost is a double (*)(const simgpu_launch *) or NULL
 * (NULL: simgpu charges the measured CPU time of run()) */
#define WORKLOAD_PACK_KERNEL(kernel, cost)                                                   \
    { #kernel, [](const simgpu_launch *launch) { workload_pack_run(kernel, launch); }, cost }

#define WORKLOAD_PACK_EXPORT(table)                                                          \
    extern "C" __attribute__((visibility("default"))) const simgpu_kernel *simgpu_kernel_pack( \
        unsigned *count, unsigned *abi)                                                      \
    {                                                                                        \
        *count = (unsigned)(sizeof(table) / sizeof((table)[0]));                             \
        *abi = SIMGPU_KERNEL_ABI;                                                            \
        return table;                                                                        \
    }

#endif
