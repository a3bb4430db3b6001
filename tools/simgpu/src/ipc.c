/* Memory IPC handles between processes of one machine.
 *
 * cuIpcGetMemHandle makes the allocation holding the pointer shareable: a cuMemAlloc
 * allocation has its pages moved, in place and once, onto a memfd (memory.c,
 * simgpu_range_share); a VMM mapping already has one (vmm.c). The handle names that memfd
 * as /proc/<exporter pid>/fd/<fd>, with its inode (so a reused fd number is refused), the
 * offset and length of the allocation in it, and the pointer's offset in the allocation.
 * cuIpcOpenMemHandle opens that path and maps the allocation MAP_SHARED, so both processes
 * see the same bytes; it is not charged to the importer (the exporter pays, as on a GPU).
 * The exporter must live while the handle is opened; a mapping outlives it.
 * Event handles (cuIpcGetEventHandle) are not implemented. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simgpu-internal.h"

#define IPC_MAGIC 0x53474950u   /* "SGIP" */
#define IPC_VERSION 1u

typedef struct ipc_handle_data {
    uint32_t magic, version;
    int32_t pid, fd;
    uint64_t inode;
    uint64_t fd_offset;          /* where the allocation starts in the memfd */
    uint64_t bytes;              /* the allocation's mapped length */
    uint64_t pointer_offset;     /* the exported pointer, from the allocation's start */
    int32_t device;
} ipc_handle_data_t;

_Static_assert(sizeof(ipc_handle_data_t) <= CU_IPC_HANDLE_SIZE, "IPC handle data too large");

SIMGPU_API cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    CUcontext ctx;
    if (simgpu_ctx_current(&ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!handle || !dptr)
        return CUDA_ERROR_INVALID_VALUE;
    ipc_handle_data_t data = {.magic = IPC_MAGIC, .version = IPC_VERSION, .pid = (int32_t)getpid()};
    simgpu_vmm_info_t mapping;
    int fd;
    size_t fd_offset;
    uintptr_t base;
    if (simgpu_vmm_backing((uintptr_t)dptr, &mapping, &fd, &fd_offset)) {
        base = mapping.base;
        data.bytes = mapping.bytes;
        data.device = mapping.device;
    } else {
        /* the pages move while nothing of this context may write them */
        simgpu_ctx_synchronize(ctx);
        simgpu_range_t range;
        rc = simgpu_range_share((uintptr_t)dptr, &range);
        if (rc)
            return rc;
        fd = range.shared_fd;
        fd_offset = 0;
        base = range.base;
        data.bytes = range.mapped_bytes;
        data.device = range.device;
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    data.fd = fd;
    data.inode = (uint64_t)st.st_ino;
    data.fd_offset = fd_offset;
    data.pointer_offset = (uint64_t)((uintptr_t)dptr - base);
    memset(handle, 0, sizeof(*handle));
    memcpy(handle->reserved, &data, sizeof(data));
    return CUDA_SUCCESS;
}

SIMGPU_API cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    CUcontext ctx;
    if (simgpu_ctx_current(&ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    ipc_handle_data_t data;
    memcpy(&data, handle.reserved, sizeof(data));
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if (data.magic != IPC_MAGIC || data.version != IPC_VERSION || data.bytes == 0 ||
        data.pointer_offset >= data.bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (data.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;   /* as the driver: not in the exporting process */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)data.pid, (int)data.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;    /* the exporter is gone, or freed the memory */
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != data.inode ||
        (uint64_t)st.st_size < data.fd_offset + data.bytes) {
        close(fd);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    void *p = mmap(NULL, (size_t)data.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)data.fd_offset);
    close(fd);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    simgpu_range_t range = {.base = (uintptr_t)p, .bytes = (size_t)data.bytes,
                            .mapped_bytes = (size_t)data.bytes, .kind = SIMGPU_RANGE_IPC,
                            .device = data.device, .ctx = ctx, .id = simgpu_next_id()};
    if (simgpu_range_insert(&range) < 0) {
        munmap(p, (size_t)data.bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = (CUdeviceptr)((uintptr_t)p + data.pointer_offset);
    return CUDA_SUCCESS;
}

SIMGPU_API cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

SIMGPU_API cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    simgpu_range_t range;
    if (!simgpu_range_find((uintptr_t)dptr, &range) || range.kind != SIMGPU_RANGE_IPC)
        return CUDA_ERROR_INVALID_VALUE;
    /* the context's work may still use the mapping */
    simgpu_ctx_synchronize(range.ctx);
    if (!simgpu_range_remove(range.base, SIMGPU_RANGE_IPC, &range))
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)range.base, range.mapped_bytes);
    return CUDA_SUCCESS;
}
