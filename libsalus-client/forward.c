/* Resolution of the forwarding trampolines (generated: trampolines.S, forward_names.c). */
#include "shim-internal.h"

#include <stdatomic.h>
#include <string.h>

extern const char *const shim_forward_names[];
extern const unsigned shim_forward_count;
extern void *shim_forward_table[];

void *shim_forward_resolve(unsigned index);

static CUresult forward_not_initialized(void)
{
    return shim.init_error != CUDA_SUCCESS ? shim.init_error : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult forward_missing(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Without a driver the program could not even name the error the shim returned. */
static CUresult fallback_error_name(CUresult error, const char **name)
{
    switch (error) {
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_SYSTEM_NOT_READY: *name = "CUDA_ERROR_SYSTEM_NOT_READY"; break;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult fallback_error_string(CUresult error, const char **text)
{
    switch (error) {
    case CUDA_ERROR_NOT_INITIALIZED:
        *text = shim.refused ? "salus: salusd refused the job (its reason is printed above)"
                             : "salus: not connected to salusd";
        break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory (the job's salus budget)"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported"; break;
    case CUDA_ERROR_SYSTEM_NOT_READY: *text = "salus: lost the connection to salusd"; break;
    default: *text = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Called from shim_forward_entry with the argument registers saved. Returns the function
 * the trampoline jumps to, and caches it in the table. */
void *shim_forward_resolve(unsigned index)
{
    if (index >= shim_forward_count)
        return (void *)forward_missing;
    if (shim_init() != CUDA_SUCCESS) {
        if (strcmp(shim_forward_names[index], "cuGetErrorName") == 0)
            return (void *)fallback_error_name;
        if (strcmp(shim_forward_names[index], "cuGetErrorString") == 0)
            return (void *)fallback_error_string;
        return (void *)forward_not_initialized;
    }
    void *fn = shim_real_dlsym(shim.drv.handle, shim_forward_names[index]);
    if (!fn) {
        LOG_WARN("the driver has no %s; answering CUDA_ERROR_NOT_SUPPORTED",
                 shim_forward_names[index]);
        fn = (void *)forward_missing;
    }
    __atomic_store_n(&shim_forward_table[index], fn, __ATOMIC_RELEASE);
    return fn;
}
