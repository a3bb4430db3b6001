/* Lookups that could bypass the shim: cuGetProcAddress (how the CUDA runtime resolves every
 * entry point) and dlsym through a handle of the real driver. Managed names are answered
 * with the shim's wrappers, in the variant the requested version and flags select;
 * everything else gets the real driver's answer. */
#include "shim-internal.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

typedef struct managed_entry_s {
    const char *symbol;
    const char *base;
    int version;
    int ptds;
    void *wrapper;
} managed_entry_t;

static const managed_entry_t managed[] = {
#define SHIM_ENTRY(symbol, base, version, ptds) {#symbol, #base, version, ptds, (void *)&symbol},
    SHIM_MANAGED_CALLS(SHIM_ENTRY)
#undef SHIM_ENTRY
};
#define MANAGED_COUNT (sizeof(managed) / sizeof(managed[0]))

void *shim_managed_lookup(const char *name, int cuda_version, int ptds)
{
    const managed_entry_t *best = NULL;
    int has_kind = 0;
    for (size_t i = 0; i < MANAGED_COUNT; i++)
        if (strcmp(managed[i].base, name) == 0 && managed[i].ptds == ptds)
            has_kind = 1;
    for (size_t i = 0; i < MANAGED_COUNT; i++) {
        const managed_entry_t *e = &managed[i];
        if (strcmp(e->base, name) != 0 || e->version > cuda_version)
            continue;
        if (has_kind && e->ptds != ptds)
            continue;
        if (!best || e->version > best->version)
            best = e;
    }
    return best ? best->wrapper : NULL;
}

void *shim_managed_by_symbol(const char *symbol)
{
    for (size_t i = 0; i < MANAGED_COUNT; i++)
        if (strcmp(managed[i].symbol, symbol) == 0)
            return managed[i].wrapper;
    return NULL;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult ignored;
    CUresult rc = shim_init();
    if (!status)
        status = &ignored;
    if (rc != CUDA_SUCCESS) {
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return rc;
    }
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    rc = shim.drv.get_proc_address(symbol, pfn, cuda_version, flags, status);
    /* a name the real driver knows at this version, and that we manage: our wrapper */
    if (rc == CUDA_SUCCESS && *status == CU_GET_PROC_ADDRESS_SUCCESS && *pfn) {
        void *mine = shim_managed_lookup(symbol, cuda_version,
                                         (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
        if (mine)
            *pfn = mine;
    }
    return rc;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                  cuuint64_t flags)
{
    CUdriverProcAddressQueryResult status;
    return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, &status);
}

static int is_driver_handle(void *handle)
{
    struct link_map *map = NULL;
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT || !handle)
        return 0;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name)
        return 0;
    const char *base = strrchr(map->l_name, '/');
    base = base ? base + 1 : map->l_name;
    return strncmp(base, "libcuda.so", 10) == 0;
}

/* Explicit-handle half of the exported dlsym (the other half, RTLD_DEFAULT / RTLD_NEXT, is
 * a tail jump in the generated trampolines.S). Catches dlsym(dlopen("…/libcuda.so.1"),
 * "cuMemAlloc_v2") when a program opened the real driver by its path, past
 * LD_LIBRARY_PATH. */
void *shim_dlsym_handle(void *handle, const char *symbol);

void *shim_dlsym_handle(void *handle, const char *symbol)
{
    void *real = shim_real_dlsym(handle, symbol);
    if (real && symbol[0] == 'c' && symbol[1] == 'u' && is_driver_handle(handle)) {
        void *mine = shim_managed_by_symbol(symbol);
        if (mine)
            return mine;
    }
    return real;
}
