/* The virtual-memory calls.
 *
 * cuMemAddressReserve reserves address space (a PROT_NONE mapping);
 * cuMemCreate makes a memfd of the size and charges it to this process;
 * cuMemMap maps the memfd MAP_SHARED|MAP_FIXED into a reservation, with no
 * access until cuMemSetAccess (as on a GPU). Export hands out a dup of the
 * memfd; import wraps a received fd, so two processes that map one handle see
 * the same bytes.
 *
 * Accounting rule: physical memory is charged once, to the process that called
 * cuMemCreate, from that call until its last reference (handle, retained handle
 * or mapping) in that process is gone, or until that process dies. Importing
 * charges nothing; an importer that outlives the creator keeps the bytes alive
 * without their being counted. A handle is reference-counted: create/import/
 * retain and each mapping add one, release and unmap drop one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simgpu-internal.h"
#include "simgpu.h"

typedef struct vmm_handle {
    uint32_t magic;
    int fd;
    size_t bytes;
    int device;
    bool charged;
    int refs;                      /* under vmm_lock */
    uint64_t id;
    CUmemAllocationProp prop;
} vmm_handle_t;

typedef struct vmm_mapping {
    uintptr_t base;
    size_t bytes;
    size_t offset;                 /* where the mapping starts in the handle's memfd */
    vmm_handle_t *handle;
    int access;
    struct vmm_mapping *next;
} vmm_mapping_t;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_mapping_t *mappings;

static vmm_handle_t *handle_from(CUmemGenericAllocationHandle h)
{
    vmm_handle_t *handle = (vmm_handle_t *)(uintptr_t)h;
    return handle && handle->magic == SIMGPU_MAGIC_MEMHANDLE ? handle : NULL;
}

/* Under vmm_lock. */
static void handle_unref(vmm_handle_t *h)
{
    if (--h->refs > 0)
        return;
    close(h->fd);
    if (h->charged)
        simgpu_mem_uncharge(h->device, h->bytes);
    h->magic = 0;
    free(h);
}

bool simgpu_vmm_find(uintptr_t ptr, simgpu_vmm_info_t *out)
{
    bool found = false;
    pthread_mutex_lock(&vmm_lock);
    for (vmm_mapping_t *m = mappings; m; m = m->next) {
        if (ptr >= m->base && ptr < m->base + m->bytes) {
            *out = (simgpu_vmm_info_t){.base = m->base, .bytes = m->bytes,
                                       .device = m->handle->device, .handle_id = m->handle->id,
                                       .handle_types = m->handle->prop.requestedHandleTypes,
                                       .access = m->access};
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return found;
}

bool simgpu_vmm_backing(uintptr_t ptr, simgpu_vmm_info_t *out, int *fd, size_t *fd_offset)
{
    bool found = false;
    pthread_mutex_lock(&vmm_lock);
    for (vmm_mapping_t *m = mappings; m; m = m->next) {
        if (ptr >= m->base && ptr < m->base + m->bytes) {
            *out = (simgpu_vmm_info_t){.base = m->base, .bytes = m->bytes,
                                       .device = m->handle->device, .handle_id = m->handle->id};
            *fd = m->handle->fd;
            *fd_offset = m->offset;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return found;
}

static bool prop_valid(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           simgpu_device_valid(prop->location.id);
}

SIMGPU_API cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                         CUmemAllocationGranularity_flags option)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!granularity || !prop_valid(prop) ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = SIMGPU_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                               unsigned long long flags)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!ptr || size == 0 || size % SIMGPU_VMM_GRANULARITY || flags != 0 ||
        (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < SIMGPU_VMM_GRANULARITY)
        alignment = SIMGPU_VMM_GRANULARITY;
    int prot_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = MAP_FAILED;
    if (addr && addr % alignment == 0)
        p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, prot_flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) {
        /* over-reserve, then trim to the alignment */
        size_t span = size + alignment;
        uint8_t *raw = mmap(NULL, span, PROT_NONE, prot_flags, -1, 0);
        if (raw == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        uintptr_t aligned = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
        if (aligned > (uintptr_t)raw)
            munmap(raw, aligned - (uintptr_t)raw);
        size_t tail = (uintptr_t)raw + span - (aligned + size);
        if (tail)
            munmap((void *)(aligned + size), tail);
        p = (void *)aligned;
    }
    simgpu_range_t r = {.base = (uintptr_t)p, .bytes = size, .mapped_bytes = size,
                        .kind = SIMGPU_RANGE_RESERVED, .device = -1, .id = simgpu_next_id()};
    if (simgpu_range_insert(&r) < 0) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Removes the mappings inside [base, base+size); false if one straddles it. */
static bool unmap_range(uintptr_t base, size_t size, bool check_only)
{
    pthread_mutex_lock(&vmm_lock);
    bool ok = true;
    for (vmm_mapping_t *m = mappings; m; m = m->next) {
        bool overlaps = m->base < base + size && base < m->base + m->bytes;
        bool inside = m->base >= base && m->base + m->bytes <= base + size;
        if (overlaps && !inside)
            ok = false;
    }
    if (ok && !check_only) {
        for (vmm_mapping_t **pm = &mappings; *pm;) {
            vmm_mapping_t *m = *pm;
            if (m->base >= base && m->base + m->bytes <= base + size) {
                *pm = m->next;
                handle_unref(m->handle);
                free(m);
            } else {
                pm = &m->next;
            }
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return ok;
}

SIMGPU_API cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_range_t r;
    if (!simgpu_range_find((uintptr_t)ptr, &r) || r.kind != SIMGPU_RANGE_RESERVED ||
        r.base != (uintptr_t)ptr || r.bytes != size)
        return CUDA_ERROR_INVALID_VALUE;
    unmap_range(r.base, r.bytes, false);
    simgpu_range_remove(r.base, SIMGPU_RANGE_RESERVED, &r);
    munmap((void *)r.base, r.bytes);
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                       const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!handle || !prop_valid(prop) || flags != 0 || size == 0 || size % SIMGPU_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    vmm_handle_t *h = calloc(1, sizeof(*h));
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->fd = -1;
    int device = prop->location.id;
    rc = simgpu_mem_charge(device, size);
    if (rc)
        goto fail;
    h->charged = true;
    h->device = device;
    h->bytes = size;
    h->id = simgpu_next_id();
    char name[64];
    snprintf(name, sizeof(name), "simgpu-vmm-d%d", device);
    h->fd = memfd_create(name, MFD_CLOEXEC);
    if (h->fd < 0 || ftruncate(h->fd, (off_t)size) < 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    h->prop = *prop;
    h->refs = 1;
    h->magic = SIMGPU_MAGIC_MEMHANDLE;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
fail:
    if (h->fd >= 0)
        close(h->fd);
    if (h->charged)
        simgpu_mem_uncharge(device, size);
    free(h);
    return rc;
}

SIMGPU_API cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    vmm_handle_t *h = handle_from(handle);
    if (h)
        handle_unref(h);
    pthread_mutex_unlock(&vmm_lock);
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    vmm_handle_t *h = handle_from(handle);
    simgpu_range_t r;
    if (!h || flags != 0 || size == 0 || size % SIMGPU_VMM_GRANULARITY ||
        offset % SIMGPU_VMM_GRANULARITY || offset + size > h->bytes || offset + size < size)
        return CUDA_ERROR_INVALID_VALUE;
    if (!simgpu_range_find((uintptr_t)ptr, &r) || r.kind != SIMGPU_RANGE_RESERVED ||
        (uintptr_t)ptr + size > r.base + r.bytes)
        return CUDA_ERROR_INVALID_VALUE;
    vmm_mapping_t *m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&vmm_lock);
    for (vmm_mapping_t *o = mappings; o; o = o->next) {
        if (o->base < (uintptr_t)ptr + size && (uintptr_t)ptr < o->base + o->bytes) {
            rc = CUDA_ERROR_INVALID_VALUE;  /* already mapped */
            goto out;
        }
    }
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
                   (off_t)offset);
    if (p == MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->base = (uintptr_t)ptr;
    m->bytes = size;
    m->offset = offset;
    m->handle = h;
    m->access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    m->next = mappings;
    mappings = m;
    h->refs++;
    m = NULL;
out:
    pthread_mutex_unlock(&vmm_lock);
    free(m);
    return rc;
}

SIMGPU_API cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (size == 0 || !unmap_range((uintptr_t)ptr, size, true))
        return CUDA_ERROR_INVALID_VALUE;
    /* back to reserved, inaccessible address space */
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_INVALID_VALUE;
    unmap_range((uintptr_t)ptr, size, false);
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* one address space for every simulated device: the widest access wins */
    int access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !simgpu_device_valid(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        if ((int)desc[i].flags > access)
            access = (int)desc[i].flags;
    }
    int prot = access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
               : access == CU_MEM_ACCESS_FLAGS_PROT_READ   ? PROT_READ
                                                           : PROT_NONE;
    uintptr_t base = (uintptr_t)ptr;
    pthread_mutex_lock(&vmm_lock);
    /* the whole range must be mapped */
    size_t covered = 0;
    for (vmm_mapping_t *m = mappings; m; m = m->next)
        if (m->base >= base && m->base + m->bytes <= base + size)
            covered += m->bytes;
    if (covered != size || mprotect((void *)base, size, prot) < 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (vmm_mapping_t *m = mappings; m; m = m->next)
            if (m->base >= base && m->base + m->bytes <= base + size)
                m->access = access;
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

SIMGPU_API cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                          CUdeviceptr ptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_vmm_info_t v;
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !simgpu_vmm_find((uintptr_t)ptr, &v))
        return CUDA_ERROR_INVALID_VALUE;
    *flags = (unsigned long long)v.access;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                  CUmemGenericAllocationHandle handle)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    vmm_handle_t *h = handle_from(handle);
    if (!prop || !h)
        return CUDA_ERROR_INVALID_VALUE;
    *prop = h->prop;
    return CUDA_SUCCESS;
}

SIMGPU_API cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    for (vmm_mapping_t *m = mappings; m; m = m->next) {
        if ((uintptr_t)addr >= m->base && (uintptr_t)addr < m->base + m->bytes) {
            m->handle->refs++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->handle;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

SIMGPU_API cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                        CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    vmm_handle_t *h = handle_from(handle);
    if (!shareable || !h || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)shareable = fd;
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) int simgpu_vmm_adopt_fd(int fd)
{
    struct stat want, st;
    if (fd < 0 || fstat(fd, &want) < 0)
        return -EINVAL;
    vmm_handle_t *uncharged = NULL;
    int rc = -ENOENT;
    pthread_mutex_lock(&vmm_lock);
    /* every mapped handle of that memfd: charged once already, or the first is charged now
     * (a handle created here but no longer mapped is not seen: the creator keeps its charge
     * and has no reason to adopt) */
    for (vmm_mapping_t *m = mappings; m; m = m->next) {
        vmm_handle_t *h = m->handle;
        if (fstat(h->fd, &st) < 0 || st.st_dev != want.st_dev || st.st_ino != want.st_ino)
            continue;
        if (h->charged) {
            uncharged = NULL;
            rc = 0;
            break;
        }
        if (!uncharged)
            uncharged = h;
    }
    if (uncharged) {
        if (simgpu_mem_charge(uncharged->device, uncharged->bytes) != CUDA_SUCCESS) {
            rc = -ENOMEM;
        } else {
            uncharged->charged = true;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

/* The device an exported memfd belongs to, from its name "simgpu-vmm-d<N>"; -1 if foreign. */
static int memfd_device(int fd)
{
    char path[64], target[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    int device;
    if (sscanf(target, "/memfd:simgpu-vmm-d%d", &device) != 1 || !simgpu_device_valid(device))
        return -1;
    return device;
}

SIMGPU_API cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                          CUmemAllocationHandleType type)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int source = (int)(intptr_t)os_handle;
    int device = memfd_device(source);
    struct stat st;
    if (device < 0 || fstat(source, &st) < 0 || st.st_size <= 0 ||
        (size_t)st.st_size % SIMGPU_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    vmm_handle_t *h = calloc(1, sizeof(*h));
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->fd = fcntl(source, F_DUPFD_CLOEXEC, 0);
    if (h->fd < 0) {
        free(h);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->bytes = (size_t)st.st_size;
    h->device = device;
    h->charged = false;  /* counted by the process that created it */
    h->id = simgpu_next_id();
    h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    h->prop.location.id = device;
    h->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    h->refs = 1;
    h->magic = SIMGPU_MAGIC_MEMHANDLE;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}
