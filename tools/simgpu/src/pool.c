/* Memory pools: each device's default pool, pools the program creates (cuMemPoolCreate),
 * the device's current pool (cuDeviceSetMemPool) and their attributes.
 *
 * A pool keeps nothing cached: an allocation from it is a stream-ordered allocation
 * (cuMemAllocAsync on the stream), its free returns the memory when the stream reaches it,
 * so trimming has nothing to give back. The release threshold and the reuse policies are
 * stored and reported as set. */
#include <stdlib.h>

#include "simgpu-internal.h"

struct CUmemPoolHandle_st {
    uint32_t magic;
    int device;
    bool is_default;
    CUmemAllocationHandleType handle_types;
    uint64_t release_threshold;
    int reuse[3]; /* follow event dependencies, opportunistic, internal dependencies */
};

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUmemPoolHandle_st default_pools[SIMGPU_MAX_DEVICES];
static CUmemoryPool current_pools[SIMGPU_MAX_DEVICES];

static bool pool_valid(CUmemoryPool pool)
{
    return pool && pool->magic == SIMGPU_MAGIC_POOL;
}

/* under pools_lock */
static CUmemoryPool default_pool(CUdevice device)
{
    CUmemoryPool pool = &default_pools[device];
    if (pool->magic != SIMGPU_MAGIC_POOL)
        *pool = (struct CUmemPoolHandle_st){.magic = SIMGPU_MAGIC_POOL, .device = device,
                                            .is_default = true, .reuse = {1, 1, 1}};
    return pool;
}

SIMGPU_API cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!simgpu_device_valid(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    if (props->handleTypes & ~(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_NOT_SUPPORTED;
    CUmemoryPool p = calloc(1, sizeof(*p));
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (struct CUmemPoolHandle_st){.magic = SIMGPU_MAGIC_POOL, .device = props->location.id,
                                     .handle_types = props->handleTypes, .reuse = {1, 1, 1}};
    *pool = p;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!pool_valid(pool) || pool->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    /* a device whose current pool this was goes back to its default pool */
    for (int d = 0; d < SIMGPU_MAX_DEVICES; d++)
        if (current_pools[d] == pool)
            current_pools[d] = NULL;
    pthread_mutex_unlock(&pools_lock);
    pool->magic = 0;
    free(pool);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice device)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!simgpu_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&pools_lock);
    *pool = default_pool(device);
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice device)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!simgpu_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&pools_lock);
    *pool = current_pools[device] ? current_pools[device] : default_pool(device);
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!simgpu_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool_valid(pool) || pool->device != device)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    current_pools[device] = pool;
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s)
{
    if (!pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return cuMemAllocAsync(d, n, s);
}

SIMGPU_API cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s)
{
    if (!pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return cuMemAllocAsync_ptsz(d, n, s);
}

SIMGPU_API cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    (void)keep; /* nothing is cached */
    return pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!pool_valid(pool) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *(cuuint64_t *)value;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* only resetting the high watermarks to 0 is allowed */
        return *(cuuint64_t *)value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIMGPU_API cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!pool_valid(pool) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = pool->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* allocations are not tracked per pool: memory in use shows in cuMemGetInfo */
        *(cuuint64_t *)value = 0;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
