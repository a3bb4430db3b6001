/* The driver function table: the CUDA driver entry points that salus itself calls, loaded
 * with dlopen from a path (a real libcuda.so.1 or simgpu) and resolved through the driver's
 * own cuGetProcAddress at the CUDA_VERSION of the headers we build against, so that every
 * pointer is the variant matching our cuda.h. The daemon and the shim share this code. */
#ifndef SALUS_COMMON_DRIVER_H
#define SALUS_COMMON_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stddef.h>

/* X(name, PFN type of the newest variant of name in these headers: what cuGetProcAddress
 * answers at CUDA_VERSION, e.g. cuCtxSynchronize is _v13000, which takes a context) */
#define DRIVER_FUNCTIONS(X)                                                                    \
    X(cuInit, PFN_cuInit_v2000)                                                                \
    X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                                        \
    X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                                \
    X(cuGetErrorString, PFN_cuGetErrorString_v6000)                                            \
    X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                                            \
    X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                                      \
    X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                                              \
    X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v3020)                                            \
    X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                                    \
    X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)                            \
    X(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000)                         \
    X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                                              \
    X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                                              \
    X(cuCtxSynchronize, PFN_cuCtxSynchronize_v13000)                                           \
    X(cuMemGetInfo, PFN_cuMemGetInfo_v3020)                                                    \
    X(cuMemCreate, PFN_cuMemCreate_v10020)                                                     \
    X(cuMemRelease, PFN_cuMemRelease_v10020)                                                   \
    X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020)                   \
    X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle_v10020)               \
    X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020)                 \
    X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                                     \
    X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                                           \
    X(cuMemMap, PFN_cuMemMap_v10020)                                                           \
    X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                                       \
    X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)                                               \
    X(cuMemsetD8, PFN_cuMemsetD8_v3020)                                                        \
    X(cuStreamQuery, PFN_cuStreamQuery_v2000)                                                  \
    X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)

typedef struct driver_s {
    void *handle;                      /* from dlopen */
    char path[4096];
    PFN_cuGetProcAddress_v12000 get_proc_address; /* the driver's own, for everything else */
#define DRIVER_FIELD(name, type) type fn_##name;
    DRIVER_FUNCTIONS(DRIVER_FIELD)
#undef DRIVER_FIELD
} driver_t;

/* A dlsym-like lookup; the shim passes the real dlsym because it overrides dlsym. */
typedef void *(*driver_lookup_fn)(void *handle, const char *symbol);

/* Loads the driver at path (RTLD_NOW | RTLD_LOCAL) and resolves the table. Every entry must
 * resolve. Returns 0, or a negative errno with a one-line reason in err. */
int driver_load(driver_t *drv, const char *path, driver_lookup_fn lookup, char *err,
                size_t err_size);
void driver_unload(driver_t *drv);
/* Resolves one more entry point by its base name at our CUDA_VERSION (NULL if absent). */
void *driver_symbol(const driver_t *drv, const char *name);
/* "CUDA_ERROR_OUT_OF_MEMORY"-style name of a result (works before cuInit). */
const char *driver_error_name(const driver_t *drv, CUresult rc);

#endif
