/* The program's own virtual-memory allocations (cuMemCreate and friends: PyTorch's
 * expandable segments, NCCL's buffers, NVIDIA's VMM samples).
 *
 * A cuMemCreate of device memory on the job's GPU whose properties a salusd chunk has
 * (pinned, no handle type but a POSIX file descriptor, no compression or RDMA flags) is
 * served by a chunk of exactly that size: the program gets the imported handle, so the
 * lane's memory really is shared. Any other cuMemCreate goes to the real driver and is
 * charged to the job's budget. Either way the bytes count as the job's live memory from
 * cuMemCreate until the physical memory is gone: the handle released and every mapping of
 * it unmapped. Exported handles are the driver's business: the process that imports one
 * is not charged again.
 *
 * Locking: the table lock is held only around table updates, never across a driver call
 * or a request to salusd, so nothing here can wait on itself or on the daemon while the
 * driver holds its own locks. */
#include "shim-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct vmm_alloc_s {
    CUmemGenericAllocationHandle handle;
    int handle_refs;     /* the program's handles on it: cuMemCreate + retained ones */
    int mappings;
    int from_chunk;
    uint64_t chunk_id;   /* from_chunk: the salusd chunk behind it */
    uint64_t bytes;      /* what was charged / counted live */
    struct vmm_alloc_s *next;
} vmm_alloc_t;

typedef struct vmm_mapping_s {
    CUdeviceptr at;
    uint64_t bytes;
    vmm_alloc_t *alloc;
    struct vmm_mapping_s *next;
} vmm_mapping_t;

static struct {
    pthread_mutex_t lock;
    vmm_alloc_t *allocs;
    vmm_mapping_t *mappings;
} vmm = {.lock = PTHREAD_MUTEX_INITIALIZER};


/* Under the lock: the allocation whose live handle is h. */
static vmm_alloc_t *find_handle(CUmemGenericAllocationHandle h)
{
    for (vmm_alloc_t *a = vmm.allocs; a; a = a->next)
        if (a->handle == h && a->handle_refs > 0)
            return a;
    return NULL;
}

/* Under the lock: unlinks a when nothing refers to it any more; returns it to be finished
 * outside the lock, or NULL. */
static vmm_alloc_t *unlink_if_dead(vmm_alloc_t *a)
{
    if (a->handle_refs > 0 || a->mappings > 0)
        return NULL;
    for (vmm_alloc_t **link = &vmm.allocs; *link; link = &(*link)->next) {
        if (*link == a) {
            *link = a->next;
            return a;
        }
    }
    return NULL;
}

/* The physical memory is gone: give it back to salusd. */
static void finish(vmm_alloc_t *a)
{
    if (!a)
        return;
    if (a->from_chunk)
        shim_session_release(a->chunk_id);
    else
        shim_session_charge(a->bytes, 1);
    shim_mem_note_extra(a->bytes, 1);
    LOG_DEBUG("virtual-memory allocation of %llu KiB returned", (unsigned long long)(a->bytes >> 10));
    free(a);
}

static int chunk_can_serve(size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    return flags == 0 && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id == shim.gpu &&
           (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0 &&
           prop->allocFlags.compressionType == 0 && prop->allocFlags.gpuDirectRDMACapable == 0 &&
           prop->allocFlags.usage == 0 && size > 0;
}

/* A chunk of exactly size bytes, imported as the program's handle. CUDA_ERROR_NOT_FOUND:
 * salusd rounds this size differently or the import failed; the real driver serves it. */
static CUresult create_from_chunk(CUmemGenericAllocationHandle *handle, size_t size,
                                  vmm_alloc_t *a)
{
    uint64_t chunk_bytes = 0;
    int fd = shim_session_grow(size, 0, &a->chunk_id, &chunk_bytes);
    if (fd < 0)
        return fd == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_SYSTEM_NOT_READY;
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    if (chunk_bytes == size)
        rc = shim.drv.fn_cuMemImportFromShareableHandle(
            handle, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (rc != CUDA_SUCCESS) {
        shim_session_release(a->chunk_id);
        return CUDA_ERROR_NOT_FOUND; /* not importable here: the real driver serves it */
    }
    a->from_chunk = 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    SHIM_MANAGED_OR_REAL(cuMemCreate, handle, size, prop, flags);
    if (!handle || !prop || size == 0) /* the driver's own answer to bad arguments */
        return shim.real.cuMemCreate(handle, size, prop, flags);
    CUresult rc = shim_gate_memory();
    if (rc != CUDA_SUCCESS)
        return rc;
    vmm_alloc_t *a = calloc(1, sizeof(*a));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->bytes = size;
    rc = CUDA_ERROR_NOT_FOUND;
    if (chunk_can_serve(size, prop, flags))
        rc = create_from_chunk(handle, size, a);
    if (rc == CUDA_ERROR_NOT_FOUND) {
        int charged = shim_session_charge(size, 0);
        rc = charged == 0 ? shim.real.cuMemCreate(handle, size, prop, flags)
                          : charged == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY
                                               : CUDA_ERROR_SYSTEM_NOT_READY;
        if (rc != CUDA_SUCCESS && charged == 0)
            shim_session_charge(size, 1);
    }
    if (rc != CUDA_SUCCESS) {
        LOG_DEBUG("cuMemCreate of %zu bytes refused (%d)", size, (int)rc);
        free(a);
        return rc;
    }
    a->handle = *handle;
    a->handle_refs = 1;
    pthread_mutex_lock(&vmm.lock);
    a->next = vmm.allocs;
    vmm.allocs = a;
    pthread_mutex_unlock(&vmm.lock);
    shim_mem_note_extra(size, 0);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SHIM_MANAGED_OR_REAL(cuMemRelease, handle);
    CUresult rc = shim.real.cuMemRelease(handle);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm.lock);
    vmm_alloc_t *a = find_handle(handle), *dead = NULL;
    if (a) {
        a->handle_refs--;
        dead = unlink_if_dead(a);
    }
    pthread_mutex_unlock(&vmm.lock);
    finish(dead);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    SHIM_MANAGED_OR_REAL(cuMemMap, ptr, size, offset, handle, flags);
    vmm_mapping_t *m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = shim.real.cuMemMap(ptr, size, offset, handle, flags);
    pthread_mutex_lock(&vmm.lock);
    vmm_alloc_t *a = rc == CUDA_SUCCESS ? find_handle(handle) : NULL;
    if (a) {
        *m = (vmm_mapping_t){.at = ptr, .bytes = size, .alloc = a, .next = vmm.mappings};
        vmm.mappings = m;
        a->mappings++;
        m = NULL;
    }
    pthread_mutex_unlock(&vmm.lock);
    free(m);
    return rc;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SHIM_MANAGED_OR_REAL(cuMemUnmap, ptr, size);
    CUresult rc = shim.real.cuMemUnmap(ptr, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    vmm_alloc_t *dead_list = NULL;
    pthread_mutex_lock(&vmm.lock);
    for (vmm_mapping_t **link = &vmm.mappings; *link;) {
        vmm_mapping_t *m = *link;
        if (m->at < ptr || m->at >= ptr + size) {
            link = &m->next;
            continue;
        }
        *link = m->next;
        m->alloc->mappings--;
        vmm_alloc_t *dead = unlink_if_dead(m->alloc);
        if (dead) {
            dead->next = dead_list;
            dead_list = dead;
        }
        free(m);
    }
    pthread_mutex_unlock(&vmm.lock);
    while (dead_list) {
        vmm_alloc_t *next = dead_list->next;
        finish(dead_list);
        dead_list = next;
    }
    return CUDA_SUCCESS;
}

/* A retained handle is one more reference the program will release. */
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    SHIM_MANAGED_OR_REAL(cuMemRetainAllocationHandle, handle, addr);
    CUresult rc = shim.real.cuMemRetainAllocationHandle(handle, addr);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)addr;
    pthread_mutex_lock(&vmm.lock);
    for (vmm_mapping_t *m = vmm.mappings; m; m = m->next) {
        if (at < m->at || at >= m->at + m->bytes)
            continue;
        if (m->alloc->handle_refs == 0 || m->alloc->handle == *handle) {
            m->alloc->handle = *handle;
            m->alloc->handle_refs++;
        }
        break;
    }
    pthread_mutex_unlock(&vmm.lock);
    return CUDA_SUCCESS;
}

/* Memory pools: the shim serves stream-ordered allocations from its chunks, so what a pool
 * keeps cached is the job's mapped chunks (counted as its memory); trimming returns the
 * empty ones to salusd, as the driver returns a pool's unused memory. */
CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep)
{
    SHIM_MANAGED_OR_REAL(cuMemPoolTrimTo, pool, min_bytes_to_keep);
    CUresult rc = shim.real.cuMemPoolTrimTo(pool, min_bytes_to_keep);
    if (rc == CUDA_SUCCESS)
        shim_mem_trim();
    return rc;
}
