/* dlopen-probe DRIVER_PATH: a program that opens the driver behind the shim's back, by its
 * absolute path and by a versioned name, must get the shim:
 * 1. dlopen(DRIVER_PATH) gives a handle whose object is the shim;
 * 2. dlopen("libcuda.so.580.65.06") (a driver version's file name) gives the same handle;
 * 3. entry points looked up through it, managed (cuMemCreate) or forwarded
 *    (cuDeviceGetName), are the shim's;
 * 4. through it the program sees what a job sees: one device (the daemon has more).
 * Prints one line per check and exits 0 when all hold. */
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

static const char *object_of_handle(void *handle)
{
    struct link_map *map = NULL;
    return handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_name : "?";
}

static const char *object_of(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
}

static int in_shim(const char *object)
{
    return strstr(object, "/lib/salus/") != NULL;
}

int main(int argc, char **argv)
{
    int failures = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: dlopen-probe DRIVER_PATH\n");
        return 2;
    }
    void *by_path = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    printf("dlopen(%s) -> %s\n", argv[1], object_of_handle(by_path));
    failures += !in_shim(object_of_handle(by_path));
    void *by_version = dlopen("libcuda.so.580.65.06", RTLD_NOW | RTLD_LOCAL);
    printf("dlopen(libcuda.so.580.65.06) -> %s\n", object_of_handle(by_version));
    failures += !by_version || by_version != by_path;
    if (!by_path)
        return 1;
    void *create = dlsym(by_path, "cuMemCreate");
    void *name = dlsym(by_path, "cuDeviceGetName");
    printf("dlsym(handle, cuMemCreate) -> %s\n", object_of(create));
    printf("dlsym(handle, cuDeviceGetName) -> %s\n", object_of(name));
    failures += !in_shim(object_of(create)) || !in_shim(object_of(name));

    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(by_path, "cuInit");
    CUresult (*count_fn)(int *) = (CUresult(*)(int *))dlsym(by_path, "cuDeviceGetCount");
    int count = -1;
    if (!init || !count_fn || init(0) != CUDA_SUCCESS || count_fn(&count) != CUDA_SUCCESS) {
        fprintf(stderr, "cuInit / cuDeviceGetCount through the handle failed\n");
        return 1;
    }
    printf("cuDeviceGetCount through the handle -> %d\n", count);
    failures += count != 1;
    printf("%s\n", failures ? "probe: FAIL" : "probe: ok");
    return failures ? 1 : 0;
}
