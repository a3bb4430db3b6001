/* cuGetProcAddress and the not-implemented stubs.
 *
 * The answer for a base name comes from simgpu-api.def: the variant with the
 * highest version not above the caller's cudaVersion, or its per-thread-default-
 * stream form when the flags ask for one (and it is at least as new). Other
 * entry points named in the toolkit's cudaTypedefs.h get a stub that returns
 * CUDA_ERROR_NOT_SUPPORTED and names itself once on stderr, so a program that
 * resolves everything up front (as the static runtime does) still starts, and
 * fails clearly if it really uses something simgpu lacks. Unknown names get
 * CUDA_ERROR_NOT_FOUND. */
#include <string.h>

#include "simgpu-internal.h"

typedef struct api_entry {
    const char *base;
    int version;
    bool per_thread;
    void *fn;
} api_entry_t;

static const api_entry_t api_table[] = {
#define SIMGPU_FN(base, version, symbol) {#base, version, false, (void *)symbol},
#define SIMGPU_PTDS(base, version, symbol) {#base, version, true, (void *)symbol},
#define SIMGPU_PTSZ SIMGPU_PTDS
#include "simgpu-api.def"
#undef SIMGPU_FN
#undef SIMGPU_PTDS
#undef SIMGPU_PTSZ
};

/* one stub per entry point of cudaTypedefs.h (generated list) */
#define SIMGPU_STUB(name)                                                      \
    static CUresult CUDAAPI stub_##name(void)                                  \
    {                                                                          \
        static int noted;                                                      \
        return simgpu_not_supported(#name, &noted);                            \
    }
#include "simgpu-stubs.inc"
#undef SIMGPU_STUB

typedef struct stub_entry {
    const char *name;
    void *fn;
} stub_entry_t;

static const stub_entry_t stub_table[] = {
#define SIMGPU_STUB(name) {#name, (void *)stub_##name},
#include "simgpu-stubs.inc"
#undef SIMGPU_STUB
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

bool simgpu_api_implements(const char *base)
{
    for (size_t i = 0; i < COUNT(api_table); i++)
        if (strcmp(api_table[i].base, base) == 0)
            return true;
    return false;
}

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const api_entry_t *best = NULL, *best_pt = NULL;
    bool named = false;
    for (size_t i = 0; i < COUNT(api_table); i++) {
        const api_entry_t *e = &api_table[i];
        if (strcmp(e->base, symbol) != 0)
            continue;
        named = true;
        if (e->version > version)
            continue;
        if (e->per_thread && (!best_pt || e->version > best_pt->version))
            best_pt = e;
        if (!e->per_thread && (!best || e->version > best->version))
            best = e;
    }
    if (per_thread && best_pt && (!best || best_pt->version >= best->version))
        best = best_pt;
    CUdriverProcAddressQueryResult result = CU_GET_PROC_ADDRESS_SUCCESS;
    *pfn = NULL;
    if (best) {
        *pfn = best->fn;
    } else if (named) {
        result = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    } else {
        result = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        for (size_t i = 0; i < COUNT(stub_table); i++) {
            if (strcmp(stub_table[i].name, symbol) == 0) {
                *pfn = stub_table[i].fn;
                result = CU_GET_PROC_ADDRESS_SUCCESS;
                break;
            }
        }
    }
    if (status)
        *status = result;
    return result == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIMGPU_API cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *status)
{
    return lookup(symbol, pfn, version, flags, status);
}

SIMGPU_API cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return lookup(symbol, pfn, version, flags, NULL);
}

SIMGPU_API cuGetExportTable(const void **table, const CUuuid *id)
{
    static int noted;
    (void)id;
    if (table)
        *table = NULL;
    return simgpu_not_supported("cuGetExportTable (the runtime's hidden tables)", &noted);
}
