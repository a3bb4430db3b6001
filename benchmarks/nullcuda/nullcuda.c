/* A null CUDA driver for the shim's hot-path benchmark (not installed): every call returns
 * at once. It serves what the shim needs to start a managed session (device queries, the
 * virtual-memory calls that map salusd's chunks, events, stream queries) and the calls the
 * benchmark times, so that what is measured is the shim's own cost, not a driver's.
 *
 * Memory is never touched: address reservations hand out addresses from a counter, chunks
 * are imported as handles that stand for nothing, copies copy nothing.
 *
 * NULLCUDA_LAUNCH_NS=T makes each cuLaunchKernel spin for T ns of CPU time (what a real
 * driver spends per launch, 2-5 us), without any lock: launches of several threads then
 * overlap as they would on a real driver, and only the shim can serialise them. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NULL_API __attribute__((visibility("default"))) CUresult CUDAAPI

static _Atomic uint64_t next_address = 0x100000000000ull;
static _Atomic uintptr_t next_handle = 0x1000;

static uint64_t launch_ns; /* NULLCUDA_LAUNCH_NS */

__attribute__((constructor)) static void read_launch_cost(void)
{
    const char *v = getenv("NULLCUDA_LAUNCH_NS");
    launch_ns = v && *v ? strtoull(v, NULL, 10) : 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t take_addresses(size_t bytes, size_t alignment)
{
    if (alignment < 256)
        alignment = 256;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment + alignment;
    return atomic_fetch_add(&next_address, rounded) / alignment * alignment + alignment;
}

static uintptr_t take_handle(void)
{
    return atomic_fetch_add(&next_handle, 16);
}

NULL_API cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
NULL_API cuDriverGetVersion(int *version) { *version = CUDA_VERSION; return CUDA_SUCCESS; }
NULL_API cuGetErrorName(CUresult error, const char **name)
{
    *name = error == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_NULL_DRIVER";
    return CUDA_SUCCESS;
}
NULL_API cuGetErrorString(CUresult error, const char **text)
{
    *text = error == CUDA_SUCCESS ? "no error" : "error (null driver)";
    return CUDA_SUCCESS;
}
NULL_API cuDeviceGetCount(int *count) { *count = 1; return CUDA_SUCCESS; }
NULL_API cuDeviceGet(CUdevice *device, int ordinal)
{
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}
NULL_API cuDeviceGetName(char *name, int len, CUdevice device)
{
    (void)device;
    if (len > 0)
        strncpy(name, "null device", (size_t)len - 1)[len - 1] = '\0';
    return CUDA_SUCCESS;
}
NULL_API cuDeviceTotalMem(size_t *bytes, CUdevice device)
{
    (void)device;
    *bytes = (size_t)80 << 30;
    return CUDA_SUCCESS;
}
NULL_API cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
    (void)device;
    *value = attribute == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
    return CUDA_SUCCESS;
}
NULL_API cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device)
{
    (void)device;
    *ctx = (CUcontext)0x10;
    return CUDA_SUCCESS;
}
NULL_API cuDevicePrimaryCtxRelease(CUdevice device) { (void)device; return CUDA_SUCCESS; }
NULL_API cuCtxSetCurrent(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }
NULL_API cuCtxGetCurrent(CUcontext *ctx) { *ctx = (CUcontext)0x10; return CUDA_SUCCESS; }
NULL_API cuCtxGetDevice(CUdevice *device) { *device = 0; return CUDA_SUCCESS; }
NULL_API cuCtxSynchronize(void) { return CUDA_SUCCESS; }
NULL_API cuCtxSynchronize_v2(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }
NULL_API cuMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = (size_t)80 << 30;
    return CUDA_SUCCESS;
}

NULL_API cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)bytes, (void)prop, (void)flags;
    *handle = take_handle();
    return CUDA_SUCCESS;
}
NULL_API cuMemRelease(CUmemGenericAllocationHandle handle) { (void)handle; return CUDA_SUCCESS; }
NULL_API cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags)
{
    (void)shareable, (void)handle, (void)type, (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}
NULL_API cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *shareable,
                                        CUmemAllocationHandleType type)
{
    (void)shareable, (void)type;
    *handle = take_handle();
    return CUDA_SUCCESS;
}
NULL_API cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    (void)prop, (void)option;
    *granularity = (size_t)2 << 20;
    return CUDA_SUCCESS;
}
NULL_API cuMemAddressReserve(CUdeviceptr *ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    (void)addr, (void)flags;
    *ptr = (CUdeviceptr)take_addresses(bytes, alignment);
    return CUDA_SUCCESS;
}
NULL_API cuMemAddressFree(CUdeviceptr ptr, size_t bytes) { (void)ptr, (void)bytes; return CUDA_SUCCESS; }
NULL_API cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    (void)ptr, (void)bytes, (void)offset, (void)handle, (void)flags;
    return CUDA_SUCCESS;
}
NULL_API cuMemUnmap(CUdeviceptr ptr, size_t bytes) { (void)ptr, (void)bytes; return CUDA_SUCCESS; }
NULL_API cuMemSetAccess(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc *desc, size_t count)
{
    (void)ptr, (void)bytes, (void)desc, (void)count;
    return CUDA_SUCCESS;
}
NULL_API cuMemsetD8(CUdeviceptr ptr, unsigned char value, size_t n)
{
    (void)ptr, (void)value, (void)n;
    return CUDA_SUCCESS;
}

NULL_API cuStreamCreate(CUstream *stream, unsigned int flags)
{
    (void)flags;
    *stream = (CUstream)take_handle();
    return CUDA_SUCCESS;
}
NULL_API cuStreamDestroy(CUstream stream) { (void)stream; return CUDA_SUCCESS; }
NULL_API cuStreamQuery(CUstream stream) { (void)stream; return CUDA_SUCCESS; }
NULL_API cuStreamSynchronize(CUstream stream) { (void)stream; return CUDA_SUCCESS; }
NULL_API cuEventCreate(CUevent *event, unsigned int flags)
{
    (void)flags;
    *event = (CUevent)take_handle();
    return CUDA_SUCCESS;
}
NULL_API cuEventRecord(CUevent event, CUstream stream) { (void)event, (void)stream; return CUDA_SUCCESS; }
NULL_API cuEventQuery(CUevent event) { (void)event; return CUDA_SUCCESS; }
NULL_API cuEventSynchronize(CUevent event) { (void)event; return CUDA_SUCCESS; }
NULL_API cuEventDestroy(CUevent event) { (void)event; return CUDA_SUCCESS; }

/* the timed calls */
NULL_API cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream stream, void **params,
                        void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
    (void)stream, (void)params, (void)extra;
    if (launch_ns) {
        uint64_t until = now_ns() + launch_ns;
        while (now_ns() < until)
            ;
    }
    return CUDA_SUCCESS;
}
NULL_API cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)
{
    (void)dst, (void)src, (void)n, (void)stream;
    return CUDA_SUCCESS;
}
NULL_API cuMemAlloc(CUdeviceptr *dptr, size_t bytes)
{
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)take_addresses(bytes, 256);
    return CUDA_SUCCESS;
}
NULL_API cuMemFree(CUdeviceptr dptr) { (void)dptr; return CUDA_SUCCESS; }

/* cuGetProcAddress answers by base name (the newest variant) and by exported name */
static const struct {
    const char *name;
    void *fn;
} entries[] = {
#define ENTRY(name, fn) {name, (void *)fn},
    ENTRY("cuInit", cuInit) ENTRY("cuDriverGetVersion", cuDriverGetVersion)
    ENTRY("cuGetErrorName", cuGetErrorName) ENTRY("cuGetErrorString", cuGetErrorString)
    ENTRY("cuDeviceGetCount", cuDeviceGetCount) ENTRY("cuDeviceGet", cuDeviceGet)
    ENTRY("cuDeviceGetName", cuDeviceGetName) ENTRY("cuDeviceTotalMem", cuDeviceTotalMem_v2)
    ENTRY("cuDeviceGetAttribute", cuDeviceGetAttribute)
    ENTRY("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)
    ENTRY("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2)
    ENTRY("cuCtxSetCurrent", cuCtxSetCurrent) ENTRY("cuCtxGetCurrent", cuCtxGetCurrent)
    ENTRY("cuCtxGetDevice", cuCtxGetDevice) ENTRY("cuCtxSynchronize", cuCtxSynchronize_v2)
    ENTRY("cuMemGetInfo", cuMemGetInfo_v2) ENTRY("cuMemCreate", cuMemCreate)
    ENTRY("cuMemRelease", cuMemRelease)
    ENTRY("cuMemExportToShareableHandle", cuMemExportToShareableHandle)
    ENTRY("cuMemImportFromShareableHandle", cuMemImportFromShareableHandle)
    ENTRY("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity)
    ENTRY("cuMemAddressReserve", cuMemAddressReserve) ENTRY("cuMemAddressFree", cuMemAddressFree)
    ENTRY("cuMemMap", cuMemMap) ENTRY("cuMemUnmap", cuMemUnmap)
    ENTRY("cuMemSetAccess", cuMemSetAccess) ENTRY("cuMemsetD8", cuMemsetD8_v2)
    ENTRY("cuStreamCreate", cuStreamCreate) ENTRY("cuStreamDestroy", cuStreamDestroy_v2)
    ENTRY("cuStreamQuery", cuStreamQuery) ENTRY("cuStreamSynchronize", cuStreamSynchronize)
    ENTRY("cuEventCreate", cuEventCreate) ENTRY("cuEventRecord", cuEventRecord)
    ENTRY("cuEventQuery", cuEventQuery) ENTRY("cuEventSynchronize", cuEventSynchronize)
    ENTRY("cuEventDestroy", cuEventDestroy_v2) ENTRY("cuLaunchKernel", cuLaunchKernel)
    ENTRY("cuMemcpyAsync", cuMemcpyAsync) ENTRY("cuMemAlloc", cuMemAlloc_v2)
    ENTRY("cuMemFree", cuMemFree_v2) ENTRY("cuGetProcAddress", cuGetProcAddress_v2)
#undef ENTRY
};

NULL_API cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *status)
{
    (void)version, (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        if (strcmp(entries[i].name, symbol) == 0) {
            *pfn = entries[i].fn;
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
