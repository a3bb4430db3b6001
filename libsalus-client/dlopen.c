/* dlopen of the driver behind the shim's back: a program (or a library such as NCCL or a
 * framework's loader) that opens libcuda by absolute path or by a versioned name
 * (libcuda.so.1, libcuda.so.580.65.06) gets the shim, as dlsym through such a handle
 * already does. The exported dlopen is a tail jump in the generated trampolines.S, so that
 * glibc still sees the original caller (whose RUNPATH applies to relative names); it asks
 * shim_dlopen_prepare which file to open and which dlopen to jump to. */
#include "shim-internal.h"

#include <dlfcn.h>
#include <string.h>

__thread int shim_loading_driver;

void *shim_dlopen_prepare(const char **filename);

static void *real_dlopen(void)
{
    static void *real;
    void *fn = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
        if (!fn)
            fn = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
        __atomic_store_n(&real, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

/* the file this library was loaded from */
static const char *own_path(void)
{
    static const char *path;
    const char *p = __atomic_load_n(&path, __ATOMIC_ACQUIRE);
    if (!p) {
        Dl_info self;
        if (dladdr((void *)&shim_init, &self) && self.dli_fname && self.dli_fname[0] == '/')
            p = self.dli_fname;
        __atomic_store_n(&path, p, __ATOMIC_RELEASE);
    }
    return p;
}

static int names_driver(const char *filename)
{
    const char *base = strrchr(filename, '/');
    base = base ? base + 1 : filename;
    /* libcuda.so, libcuda.so.1, libcuda.so.<driver version> */
    return strncmp(base, "libcuda.so", 10) == 0 && (base[10] == '\0' || base[10] == '.');
}

void *shim_dlopen_prepare(const char **filename)
{
    const char *self = NULL;
    if (*filename && !shim_loading_driver && names_driver(*filename) && (self = own_path()) &&
        strcmp(*filename, self) != 0) {
        LOG_DEBUG("dlopen(%s): the shim answers", *filename);
        *filename = self;
    }
    return real_dlopen();
}
