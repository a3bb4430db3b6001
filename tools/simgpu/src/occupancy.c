/* The occupancy calculator, for the modelled device (attributes.c: an A100, CC 8.0).
 *
 * Resident blocks per SM are limited by threads (2048 per SM, allocated per warp), blocks
 * (32 per SM), registers (65536 per SM; every simgpu function reports 32 registers per
 * thread, allocated per warp) and shared memory (164 KiB per SM; each block takes its
 * dynamic shared memory plus the 1 KiB the driver reserves). simgpu runs a grid on the CPU
 * whatever its shape, so these numbers only need to be what a GPU of this kind answers:
 * programs size their launches with them. */
#include "simgpu-internal.h"

enum {
    OCC_WARP = 32,
    OCC_MAX_THREADS_PER_BLOCK = 1024,
    OCC_THREADS_PER_SM = 2048,
    OCC_BLOCKS_PER_SM = 32,
    OCC_REGISTERS_PER_SM = 65536,
    OCC_REGISTERS_PER_THREAD = 32,       /* CU_FUNC_ATTRIBUTE_NUM_REGS (module.c) */
    OCC_SHARED_PER_SM = 164 * 1024,
    OCC_SHARED_RESERVED_PER_BLOCK = 1024,
    OCC_SHARED_PER_BLOCK_DEFAULT = 48 * 1024,
};

/* the largest dynamic shared memory a launch of f may ask for */
static size_t dynamic_shared_limit(const struct CUfunc_st *f)
{
    return f->max_dynamic_shared_bytes > OCC_SHARED_PER_BLOCK_DEFAULT ? (size_t)f->max_dynamic_shared_bytes
                                                                       : OCC_SHARED_PER_BLOCK_DEFAULT;
}

static int active_blocks(const struct CUfunc_st *f, int block_size, size_t dynamic_shared_bytes)
{
    if (block_size <= 0 || block_size > OCC_MAX_THREADS_PER_BLOCK ||
        dynamic_shared_bytes > dynamic_shared_limit(f))
        return 0;
    int warps = (block_size + OCC_WARP - 1) / OCC_WARP;
    int blocks = OCC_BLOCKS_PER_SM;
    int by_threads = OCC_THREADS_PER_SM / (warps * OCC_WARP);
    int by_registers = OCC_REGISTERS_PER_SM / (warps * OCC_WARP * OCC_REGISTERS_PER_THREAD);
    size_t by_shared = OCC_SHARED_PER_SM / (dynamic_shared_bytes + OCC_SHARED_RESERVED_PER_BLOCK);
    if (by_threads < blocks)
        blocks = by_threads;
    if (by_registers < blocks)
        blocks = by_registers;
    if (by_shared < (size_t)blocks)
        blocks = (int)by_shared;
    return blocks;
}

static CUresult function_check(CUfunction func, struct CUfunc_st **out)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    *out = simgpu_function_from_handle(func);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static bool flags_valid(unsigned flags)
{
    return (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) == 0;
}

SIMGPU_API cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *num_blocks, CUfunction func,
                                                                int block_size,
                                                                size_t dynamic_shared_bytes,
                                                                unsigned int flags)
{
    struct CUfunc_st *f;
    CUresult rc = function_check(func, &f);
    if (rc)
        return rc;
    if (!num_blocks || !flags_valid(flags))
        return CUDA_ERROR_INVALID_VALUE;
    *num_blocks = active_blocks(f, block_size, dynamic_shared_bytes);
    return CUDA_SUCCESS;
}

SIMGPU_API cuOccupancyMaxActiveBlocksPerMultiprocessor(int *num_blocks, CUfunction func, int block_size,
                                                       size_t dynamic_shared_bytes)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, func, block_size,
                                                                dynamic_shared_bytes, CU_OCCUPANCY_DEFAULT);
}

/* The block size (a multiple of the warp, at most block_size_limit) with the most resident
 * threads per SM, the largest such on a tie; min_grid_size fills every SM with it. */
SIMGPU_API cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid_size, int *block_size, CUfunction func,
                                                     CUoccupancyB2DSize block_size_to_dynamic_shared,
                                                     size_t dynamic_shared_bytes, int block_size_limit,
                                                     unsigned int flags)
{
    struct CUfunc_st *f;
    CUresult rc = function_check(func, &f);
    if (rc)
        return rc;
    if (!min_grid_size || !block_size || block_size_limit < 0 || !flags_valid(flags))
        return CUDA_ERROR_INVALID_VALUE;
    int limit = block_size_limit == 0 || block_size_limit > OCC_MAX_THREADS_PER_BLOCK
                    ? OCC_MAX_THREADS_PER_BLOCK
                    : block_size_limit;
    int best_size = 0, best_blocks = 0, best_threads = 0;
    int start = (limit + OCC_WARP - 1) / OCC_WARP * OCC_WARP;
    for (int size = start; size > 0; size -= OCC_WARP) {
        int candidate = size > limit ? limit : size;
        size_t shared = block_size_to_dynamic_shared ? block_size_to_dynamic_shared(candidate)
                                                     : dynamic_shared_bytes;
        int blocks = active_blocks(f, candidate, shared);
        if (blocks * candidate > best_threads) {
            best_threads = blocks * candidate;
            best_blocks = blocks;
            best_size = candidate;
        }
    }
    *block_size = best_size;
    *min_grid_size = best_blocks * SIMGPU_SM_COUNT;
    return CUDA_SUCCESS;
}

SIMGPU_API cuOccupancyMaxPotentialBlockSize(int *min_grid_size, int *block_size, CUfunction func,
                                            CUoccupancyB2DSize block_size_to_dynamic_shared,
                                            size_t dynamic_shared_bytes, int block_size_limit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid_size, block_size, func,
                                                     block_size_to_dynamic_shared, dynamic_shared_bytes,
                                                     block_size_limit, CU_OCCUPANCY_DEFAULT);
}

/* The dynamic shared memory each of num_blocks blocks of block_size threads can have while
 * all of them stay resident on one SM. */
SIMGPU_API cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamic_shared_bytes, CUfunction func,
                                                   int num_blocks, int block_size)
{
    struct CUfunc_st *f;
    CUresult rc = function_check(func, &f);
    if (rc)
        return rc;
    if (!dynamic_shared_bytes || num_blocks <= 0 || block_size <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *dynamic_shared_bytes = 0;
    if (active_blocks(f, block_size, 0) < num_blocks)
        return CUDA_SUCCESS;
    size_t per_block = OCC_SHARED_PER_SM / (size_t)num_blocks;
    per_block = per_block > OCC_SHARED_RESERVED_PER_BLOCK ? per_block - OCC_SHARED_RESERVED_PER_BLOCK : 0;
    size_t limit = dynamic_shared_limit(f);
    *dynamic_shared_bytes = per_block < limit ? per_block : limit;
    return CUDA_SUCCESS;
}
