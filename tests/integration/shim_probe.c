/* shim-probe DRIVER_PATH: checks that lookups which could bypass the shim are caught.
 * 1. dlopen(DRIVER_PATH) (the real driver, by its path) + dlsym("cuMemAlloc_v2") must give
 *    the shim's wrapper, not the driver's function;
 * 2. cuGetProcAddress("cuMemAlloc", 12000) must give the shim's wrapper too;
 * 3. an unmanaged name (cuDeviceGetName) must come from the real driver.
 * Prints one line per check and exits 0 when all hold. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static const char *object_of(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
}

static int in_shim(void *fn)
{
    return strstr(object_of(fn), "/lib/salus/") != NULL;
}

int main(int argc, char **argv)
{
    int failures = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: shim-probe DRIVER_PATH\n");
        return 2;
    }
    void *real = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!real) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *alloc = dlsym(real, "cuMemAlloc_v2");
    printf("dlsym(real driver, cuMemAlloc_v2) -> %s\n", object_of(alloc));
    failures += !in_shim(alloc);

    typedef CUresult (*init_fn)(unsigned);
    typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    init_fn init = (init_fn)dlsym(real, "cuInit");
    gpa_fn gpa = (gpa_fn)dlsym(real, "cuGetProcAddress_v2");
    if (!init || !gpa || init(0) != CUDA_SUCCESS) {
        fprintf(stderr, "cuInit through the driver handle failed\n");
        return 1;
    }
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    gpa("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    printf("cuGetProcAddress(cuMemAlloc, 12000) -> %s\n", object_of(fn));
    failures += !in_shim(fn);
    fn = NULL;
    gpa("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status);
    printf("cuGetProcAddress(cuLaunchKernel, per-thread) -> %s\n", object_of(fn));
    failures += !in_shim(fn) || fn != dlsym(real, "cuLaunchKernel_ptsz");
    fn = NULL;
    gpa("cuDeviceGetName", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    printf("cuGetProcAddress(cuDeviceGetName, 12000) -> %s\n", object_of(fn));
    failures += in_shim(fn) || !fn;
    printf("%s\n", failures ? "probe: FAIL" : "probe: ok");
    return failures ? 1 : 0;
}
