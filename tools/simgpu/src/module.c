/* Modules, libraries, functions and kernel packs.
 *
 * The image given to cuModuleLoadData & co. (an nvcc fatbin, a cubin, PTX, the
 * runtime's __fatbinwrap) is accepted as it is and never parsed: functions are
 * found by name in the kernel packs listed in SIMGPU_KERNEL_PACKS (see
 * simgpu_kernel.h). Globals (cuModuleGetGlobal) are data symbols of the same
 * name exported by a pack, so the pack's kernels and the program share them;
 * they are process-wide, not per module. A CUkernel is the same object as a
 * CUfunction, since the runtime passes one where the other is expected. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simgpu-internal.h"

#define MAX_PACKS 32

typedef struct kernel_pack {
    void *handle;
    const simgpu_kernel *kernels;
    unsigned count;
} kernel_pack_t;

struct CUmod_st {
    uint32_t magic;
    pthread_mutex_t lock;            /* guards functions */
    struct CUfunc_st *functions;     /* looked up so far */
    struct CUlib_st *library;        /* owner, for a library's module */
};

struct CUlib_st {
    uint32_t magic;
    struct CUmod_st *module;
};

static pthread_once_t packs_once = PTHREAD_ONCE_INIT;
static kernel_pack_t packs[MAX_PACKS];
static unsigned pack_count;

static void packs_say_loaded(void);

static void packs_load(void)
{
    const char *list = getenv("SIMGPU_KERNEL_PACKS");
    if (!list || !*list)
        return; /* said at the first kernel looked up in vain (pack_kernel_missing) */
    char *copy = strdup(list), *save = NULL;
    for (char *path = strtok_r(copy, ":", &save); path && pack_count < MAX_PACKS;
         path = strtok_r(NULL, ":", &save)) {
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            fprintf(stderr, "simgpu[%d]: cannot load kernel pack %s: %s\n", (int)getpid(), path,
                    dlerror());
            continue;
        }
        const simgpu_kernel *(*entry)(unsigned *, unsigned *) =
            (const simgpu_kernel *(*)(unsigned *, unsigned *))dlsym(handle, "simgpu_kernel_pack");
        unsigned count = 0, abi = 0;
        const simgpu_kernel *kernels = entry ? entry(&count, &abi) : NULL;
        if (!entry || abi < SIMGPU_KERNEL_ABI_OLDEST || abi > SIMGPU_KERNEL_ABI ||
            (!kernels && count)) {
            fprintf(stderr,
                    "simgpu[%d]: refusing kernel pack %s: %s (pack ABI %u, simgpu ABI %u..%u)\n",
                    (int)getpid(), path, entry ? "ABI mismatch" : "no simgpu_kernel_pack symbol",
                    abi, SIMGPU_KERNEL_ABI_OLDEST, SIMGPU_KERNEL_ABI);
            dlclose(handle);
            continue;
        }
        packs[pack_count++] = (kernel_pack_t){.handle = handle, .kernels = kernels, .count = count};
    }
    free(copy);
    /* a real driver writes nothing on a program's stderr: the list goes to a person at a
     * terminal, or where SIMGPU_VERBOSE asks for it, and always with a missing kernel */
    const char *verbose = getenv("SIMGPU_VERBOSE");
    if (isatty(STDERR_FILENO) || (verbose && *verbose && strcmp(verbose, "0") != 0))
        packs_say_loaded();
}

/* Once per process: which packs this program's kernels come from. */
static void packs_say_loaded(void)
{
    static int said;
    if (__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
        return;
    char names[1024] = "";
    size_t used = 0;
    unsigned kernels = 0;
    for (unsigned p = 0; p < pack_count; p++) {
        Dl_info info;
        const char *path = "?";
        if (packs[p].count && dladdr(packs[p].kernels, &info) && info.dli_fname)
            path = info.dli_fname;
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (used < sizeof(names)) {
            int w = snprintf(names + used, sizeof(names) - used, "%s%s", p ? ", " : "", base);
            used += w > 0 ? (size_t)w : 0;
        }
        kernels += packs[p].count;
    }
    fprintf(stderr, "simgpu[%d]: %u kernel pack%s loaded (%u kernels) from SIMGPU_KERNEL_PACKS: "
            "%s\n", (int)getpid(), pack_count, pack_count == 1 ? "" : "s", kernels, names);
}

/* A kernel that no pack has: said once per process, naming the variable that lists them. */
static void pack_kernel_missing(const char *name)
{
    static int said;
    if (__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
        return;
    const char *list = getenv("SIMGPU_KERNEL_PACKS");
    if (list && *list)
        packs_say_loaded();
    if (!list || !*list)
        fprintf(stderr, "simgpu[%d]: no kernel '%s': SIMGPU_KERNEL_PACKS is not set, so no "
                "kernel pack is loaded (simgpu runs a program's kernels from packs; for the "
                "bundled workloads: export SIMGPU_KERNEL_PACKS=$(cat "
                "<build>/lib/packs/salus-workloads.packs))\n", (int)getpid(), name);
    else
        fprintf(stderr, "simgpu[%d]: no kernel '%s' in the %u kernel pack%s of "
                "SIMGPU_KERNEL_PACKS; add the pack that has it (for the bundled workloads: "
                "$(cat <build>/lib/packs/salus-workloads.packs))\n", (int)getpid(), name,
                pack_count, pack_count == 1 ? "" : "s");
}

static const simgpu_kernel *pack_kernel(const char *name)
{
    pthread_once(&packs_once, packs_load);
    for (unsigned p = 0; p < pack_count; p++)
        for (unsigned k = 0; k < packs[p].count; k++)
            if (packs[p].kernels[k].name && strcmp(packs[p].kernels[k].name, name) == 0)
                return &packs[p].kernels[k];
    return NULL;
}

/* A data symbol `name` of a pack: its address and ELF size. */
static bool pack_global(const char *name, void **address, size_t *bytes)
{
    pthread_once(&packs_once, packs_load);
    for (unsigned p = 0; p < pack_count; p++) {
        void *addr = dlsym(packs[p].handle, name);
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        if (!addr || !dladdr1(addr, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
            ELF64_ST_TYPE(sym->st_info) != STT_OBJECT)
            continue;
        *address = addr;
        *bytes = sym->st_size;
        return true;
    }
    return false;
}

struct CUfunc_st *simgpu_function_from_handle(const void *handle)
{
    struct CUfunc_st *f = (struct CUfunc_st *)handle;
    return f && f->magic == SIMGPU_MAGIC_FUNC ? f : NULL;
}

static bool module_valid(CUmodule mod)
{
    return mod && mod->magic == SIMGPU_MAGIC_MODULE;
}

static CUresult module_new(CUmodule *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&packs_once, packs_load);
    struct CUmod_st *mod = calloc(1, sizeof(*mod));
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    mod->magic = SIMGPU_MAGIC_MODULE;
    pthread_mutex_init(&mod->lock, NULL);
    *out = mod;
    return CUDA_SUCCESS;
}

static void module_free(CUmodule mod)
{
    struct CUfunc_st *f = mod->functions;
    while (f) {
        struct CUfunc_st *next = f->next;
        f->magic = 0;
        free(f);
        f = next;
    }
    mod->magic = 0;
    pthread_mutex_destroy(&mod->lock);
    free(mod);
}

static CUresult module_function(CUmodule mod, const char *name, struct CUfunc_st **out)
{
    const simgpu_kernel *kernel = pack_kernel(name);
    if (!kernel) {
        pack_kernel_missing(name);
        return CUDA_ERROR_NOT_FOUND;
    }
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mod->lock);
    struct CUfunc_st *f;
    for (f = mod->functions; f; f = f->next)
        if (f->kernel == kernel)
            break;
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        f->magic = SIMGPU_MAGIC_FUNC;
        f->kernel = kernel;
        f->module = mod;
        f->library = mod->library;
        f->max_dynamic_shared_bytes = 49152;
        f->next = mod->functions;
        mod->functions = f;
    }
    *out = f;
out:
    pthread_mutex_unlock(&mod->lock);
    return rc;
}

static CUresult module_load_checked(CUmodule *out, const void *image)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(out);
}

SIMGPU_API cuModuleLoad(CUmodule *module, const char *fname)
{
    CUcontext ctx;
    CUresult rc = simgpu_ctx_current(&ctx);
    if (rc)
        return rc;
    if (!fname)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return module_new(module);
}

SIMGPU_API cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_load_checked(module, image);
}

SIMGPU_API cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int count,
                              CUjit_option *options, void **values)
{
    (void)count;
    (void)options;
    (void)values;
    return module_load_checked(module, image);
}

SIMGPU_API cuModuleLoadFatBinary(CUmodule *module, const void *fatbin)
{
    return module_load_checked(module, fatbin);
}

SIMGPU_API cuModuleUnload(CUmodule module)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!module_valid(module) || module->library)
        return CUDA_ERROR_INVALID_HANDLE;
    module_free(module);
    return CUDA_SUCCESS;
}

SIMGPU_API cuModuleGetFunction(CUfunction *hfunc, CUmodule module, const char *name)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!module_valid(module))
        return CUDA_ERROR_INVALID_HANDLE;
    return module_function(module, name, hfunc);
}

static CUresult get_global(CUdeviceptr *dptr, size_t *bytes, const char *name)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    void *address;
    size_t size;
    if (!pack_global(name, &address, &size))
        return CUDA_ERROR_NOT_FOUND;
    if (dptr)
        *dptr = (CUdeviceptr)(uintptr_t)address;
    if (bytes)
        *bytes = size;
    return CUDA_SUCCESS;
}

SIMGPU_API cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule module, const char *name)
{
    if (simgpu_initialized() == CUDA_SUCCESS && !module_valid(module))
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(dptr, bytes, name);
}

SIMGPU_API cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

/* ---- libraries (context-independent modules) ---- */

static bool library_valid(CUlibrary lib)
{
    return lib && lib->magic == SIMGPU_MAGIC_LIBRARY;
}

static CUresult library_new(CUlibrary *out)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUlib_st *lib = calloc(1, sizeof(*lib));
    if (!lib)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = module_new(&lib->module);
    if (rc) {
        free(lib);
        return rc;
    }
    lib->module->library = lib;
    lib->magic = SIMGPU_MAGIC_LIBRARY;
    *out = lib;
    return CUDA_SUCCESS;
}

SIMGPU_API cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                             void **jit_values, unsigned int jit_count,
                             CUlibraryOption *library_options, void **library_values,
                             unsigned int library_count)
{
    (void)jit_options, (void)jit_values, (void)jit_count;
    (void)library_options, (void)library_values, (void)library_count;
    if (!code)
        return CUDA_ERROR_INVALID_VALUE;
    return library_new(library);
}

SIMGPU_API cuLibraryLoadFromFile(CUlibrary *library, const char *file, CUjit_option *jit_options,
                                 void **jit_values, unsigned int jit_count,
                                 CUlibraryOption *library_options, void **library_values,
                                 unsigned int library_count)
{
    (void)jit_options, (void)jit_values, (void)jit_count;
    (void)library_options, (void)library_values, (void)library_count;
    if (!file)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(file, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return library_new(library);
}

SIMGPU_API cuLibraryUnload(CUlibrary library)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!library_valid(library))
        return CUDA_ERROR_INVALID_HANDLE;
    module_free(library->module);
    library->magic = 0;
    free(library);
    return CUDA_SUCCESS;
}

SIMGPU_API cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!kernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!library_valid(library))
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUfunc_st *f;
    rc = module_function(library->module, name, &f);
    if (!rc)
        *kernel = (CUkernel)f;
    return rc;
}

SIMGPU_API cuLibraryGetModule(CUmodule *module, CUlibrary library)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!module)
        return CUDA_ERROR_INVALID_VALUE;
    if (!library_valid(library))
        return CUDA_ERROR_INVALID_HANDLE;
    *module = library->module;
    return CUDA_SUCCESS;
}

SIMGPU_API cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    if (simgpu_initialized() == CUDA_SUCCESS && !library_valid(library))
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(dptr, bytes, name);
}

SIMGPU_API cuKernelGetFunction(CUfunction *func, CUkernel kernel)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!func)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUfunc_st *f = simgpu_function_from_handle(kernel);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *func = f;
    return CUDA_SUCCESS;
}

/* ---- function attributes ---- */

static CUresult function_attribute(int *value, CUfunction_attribute attrib, struct CUfunc_st *f)
{
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = SIMGPU_CC_MAJOR * 10 + SIMGPU_CC_MINOR; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = f->max_dynamic_shared_bytes; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = -1; break;
    default:
        if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        *value = 0;
        break;
    }
    return CUDA_SUCCESS;
}

SIMGPU_API cuFuncGetAttribute(int *value, CUfunction_attribute attrib, CUfunction hfunc)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    struct CUfunc_st *f = simgpu_function_from_handle(hfunc);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    return function_attribute(value, attrib, f);
}

SIMGPU_API cuKernelGetAttribute(int *value, CUfunction_attribute attrib, CUkernel kernel,
                                CUdevice device)
{
    if (simgpu_initialized() == CUDA_SUCCESS && !simgpu_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    return cuFuncGetAttribute(value, attrib, (CUfunction)kernel);
}

SIMGPU_API cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    struct CUfunc_st *f = simgpu_function_from_handle(hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0 || value > 166912)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dynamic_shared_bytes = value;
        return CUDA_SUCCESS;
    }
    if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT ||
        attrib == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH ||
        attrib == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED ||
        attrib == CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
        return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel,
                                CUdevice device)
{
    if (simgpu_initialized() == CUDA_SUCCESS && !simgpu_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    return cuFuncSetAttribute((CUfunction)kernel, attrib, value);
}

SIMGPU_API cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    (void)config;
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    return simgpu_function_from_handle(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIMGPU_API cuFuncGetName(const char **name, CUfunction hfunc)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    struct CUfunc_st *f = simgpu_function_from_handle(hfunc);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->kernel->name;
    return CUDA_SUCCESS;
}

SIMGPU_API cuKernelGetName(const char **name, CUkernel kernel)
{
    return cuFuncGetName(name, (CUfunction)kernel);
}

SIMGPU_API cuFuncGetModule(CUmodule *module, CUfunction hfunc)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    struct CUfunc_st *f = simgpu_function_from_handle(hfunc);
    if (!module)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *module = f->module;
    return CUDA_SUCCESS;
}

/* ---- linking ----
 * simgpu has no JIT linker (module images are never parsed: kernels come from the packs),
 * so cuLinkCreate answers what a driver without its PTX JIT answers,
 * CUDA_ERROR_JIT_COMPILER_NOT_FOUND, after checking its arguments. No link state ever
 * exists, so the calls that take one answer CUDA_ERROR_INVALID_HANDLE. A program can load
 * its image with cuModuleLoadData / cuModuleLoadDataEx instead. */

SIMGPU_API cuLinkCreate_v2(unsigned int count, CUjit_option *options, void **values, CUlinkState *state)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    CUcontext ctx;
    if (simgpu_ctx_current(&ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!state || (count && (!options || !values)))
        return CUDA_ERROR_INVALID_VALUE;
    *state = NULL;
    static int noted;
    if (!__atomic_exchange_n(&noted, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "simgpu[%d]: cuLinkCreate: simgpu has no JIT linker "
                        "(CUDA_ERROR_JIT_COMPILER_NOT_FOUND); load the image with cuModuleLoadData\n",
                (int)getpid());
    return CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
}

SIMGPU_API cuLinkCreate(unsigned int count, CUjit_option *options, void **values, CUlinkState *state)
{
    return cuLinkCreate_v2(count, options, values, state);
}

static CUresult link_state_check(CUlinkState state)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    (void)state;
    return CUDA_ERROR_INVALID_HANDLE;   /* cuLinkCreate never makes one */
}

SIMGPU_API cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                            const char *name, unsigned int count, CUjit_option *options, void **values)
{
    (void)type, (void)data, (void)size, (void)name, (void)count, (void)options, (void)values;
    return link_state_check(state);
}

SIMGPU_API cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                         unsigned int count, CUjit_option *options, void **values)
{
    return cuLinkAddData_v2(state, type, data, size, name, count, options, values);
}

SIMGPU_API cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int count,
                            CUjit_option *options, void **values)
{
    (void)type, (void)path, (void)count, (void)options, (void)values;
    return link_state_check(state);
}

SIMGPU_API cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int count,
                         CUjit_option *options, void **values)
{
    return cuLinkAddFile_v2(state, type, path, count, options, values);
}

SIMGPU_API cuLinkComplete(CUlinkState state, void **cubin, size_t *size)
{
    if (cubin)
        *cubin = NULL;
    if (size)
        *size = 0;
    return link_state_check(state);
}

SIMGPU_API cuLinkDestroy(CUlinkState state)
{
    return link_state_check(state);
}
