#include "driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

int driver_load(driver_t *drv, const char *path, driver_lookup_fn lookup, char *err,
                size_t err_size)
{
    memset(drv, 0, sizeof(*drv));
    if (!lookup)
        lookup = dlsym;
    if (snprintf(drv->path, sizeof(drv->path), "%s", path) >= (int)sizeof(drv->path)) {
        snprintf(err, err_size, "driver path too long");
        return -ENAMETOOLONG;
    }
    drv->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!drv->handle) {
        snprintf(err, err_size, "cannot load the CUDA driver %s: %s", path, dlerror());
        return -ENOENT;
    }
    drv->get_proc_address = (PFN_cuGetProcAddress_v12000)lookup(drv->handle, "cuGetProcAddress_v2");
    if (!drv->get_proc_address) {
        snprintf(err, err_size, "%s has no cuGetProcAddress_v2: not a CUDA 12+ driver", path);
        driver_unload(drv);
        return -ENOEXEC;
    }
#define DRIVER_RESOLVE(name, type)                                                             \
    drv->fn_##name = (type)driver_symbol(drv, #name);                                          \
    if (!drv->fn_##name) {                                                                     \
        snprintf(err, err_size, "%s does not provide %s", path, #name);                       \
        driver_unload(drv);                                                                    \
        return -ENOSYS;                                                                        \
    }
    DRIVER_FUNCTIONS(DRIVER_RESOLVE)
#undef DRIVER_RESOLVE
    return 0;
}

void driver_unload(driver_t *drv)
{
    if (drv->handle)
        dlclose(drv->handle);
    memset(drv, 0, sizeof(*drv));
}

void *driver_symbol(const driver_t *drv, const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!drv->get_proc_address)
        return NULL;
    if (drv->get_proc_address(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
            CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS)
        return NULL;
    return fn;
}

const char *driver_error_name(const driver_t *drv, CUresult rc)
{
    const char *name = NULL;
    if (drv->fn_cuGetErrorName && drv->fn_cuGetErrorName(rc, &name) == CUDA_SUCCESS && name)
        return name;
    return "CUDA_ERROR_UNKNOWN";
}
