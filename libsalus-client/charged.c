/* Memory the job takes through the real driver and is charged for: managed memory and
 * arrays. Managed memory is touched by host code with no driver call in between, so it can
 * never live in a lane's chunks (another job may own them at that moment): it is the job's
 * own. Arrays are opaque to the program. Each is charged to the job's budget before the
 * real call (over it the call fails with CUDA_ERROR_OUT_OF_MEMORY and the driver is never
 * asked) and counts as live memory until it is freed. */
#include "shim-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct charged_s {
    uintptr_t key; /* the device pointer, or the array handle */
    uint64_t bytes;
    struct charged_s *next;
} charged_t;

static struct {
    pthread_mutex_t lock;
    charged_t *list;
} charged = {.lock = PTHREAD_MUTEX_INITIALIZER};


CUresult shim_charge(uint64_t bytes)
{
    int rc = shim_session_charge(bytes, 0);
    if (rc < 0)
        return rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_SYSTEM_NOT_READY;
    shim_mem_note_extra(bytes, 0);
    return CUDA_SUCCESS;
}

void shim_charge_undo(uint64_t bytes)
{
    shim_session_charge(bytes, 1);
    shim_mem_note_extra(bytes, 1);
}

static int remember(uintptr_t key, uint64_t bytes)
{
    charged_t *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    pthread_mutex_lock(&charged.lock);
    *c = (charged_t){.key = key, .bytes = bytes, .next = charged.list};
    charged.list = c;
    pthread_mutex_unlock(&charged.lock);
    return 0;
}

/* Returns the bytes charged for key and forgets it; 0 when key is not charged. */
static uint64_t forget(uintptr_t key)
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&charged.lock);
    for (charged_t **link = &charged.list; *link; link = &(*link)->next) {
        if ((*link)->key == key) {
            charged_t *c = *link;
            *link = c->next;
            bytes = c->bytes;
            free(c);
            break;
        }
    }
    pthread_mutex_unlock(&charged.lock);
    return bytes;
}

static int is_charged(uintptr_t key)
{
    int found = 0;
    pthread_mutex_lock(&charged.lock);
    for (charged_t *c = charged.list; c && !found; c = c->next)
        found = c->key == key;
    pthread_mutex_unlock(&charged.lock);
    return found;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    SHIM_MANAGED_OR_REAL(cuMemAllocManaged, dptr, bytes, flags);
    if (!dptr || bytes == 0) /* the driver's own answer to bad arguments */
        return shim.real.cuMemAllocManaged(dptr, bytes, flags);
    CUresult rc = shim_gate_memory();
    if (rc == CUDA_SUCCESS)
        rc = shim_charge(bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = shim.real.cuMemAllocManaged(dptr, bytes, flags);
    if (rc == CUDA_SUCCESS && remember((uintptr_t)*dptr, bytes) < 0) {
        shim.real.cuMemFree_v2(*dptr);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS)
        shim_charge_undo(bytes);
    return rc;
}

CUresult shim_charged_free(CUdeviceptr dptr)
{
    if (!is_charged((uintptr_t)dptr))
        return CUDA_ERROR_NOT_FOUND;
    CUresult rc = shim.real.cuMemFree_v2(dptr);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t bytes = forget((uintptr_t)dptr);
    if (bytes)
        shim_charge_undo(bytes);
    return CUDA_SUCCESS;
}

static uint64_t format_bytes(CUarray_format format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default: /* 32-bit formats; packed and compressed ones are charged no less */
        return 4;
    }
}

static uint64_t at_least_1(size_t v)
{
    return v ? v : 1;
}

/* The bytes of an array's elements (the driver may lay it out larger: never less). */
static uint64_t array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t total = 0, w = d->Width, h = d->Height, depth = d->Depth;
    for (unsigned l = 0; l < at_least_1(levels); l++) {
        total += at_least_1(w) * at_least_1(h) * at_least_1(depth) * d->NumChannels *
                 format_bytes(d->Format);
        w >>= 1;
        h >>= 1;
        if (!(d->Flags & CUDA_ARRAY3D_LAYERED))
            depth >>= 1;
    }
    return total;
}

_Static_assert(sizeof(CUarray) == sizeof(uintptr_t) && sizeof(CUmipmappedArray) == sizeof(uintptr_t),
               "array handles are keyed by their value");

/* handle: where create() stores the new array's handle (a pointer-sized opaque value) */
static CUresult charged_create(const void *handle, uint64_t bytes, CUresult (*create)(void *),
                               void *arg)
{
    uintptr_t key = 0;
    if (bytes == 0) /* bad descriptor: the driver says what is wrong */
        return create(arg);
    CUresult rc = shim_gate_memory();
    if (rc == CUDA_SUCCESS)
        rc = shim_charge(bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = create(arg);
    if (rc == CUDA_SUCCESS)
        memcpy(&key, handle, sizeof(key));
    if (rc == CUDA_SUCCESS && remember(key, bytes) < 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY; /* the array stays, uncharged: host memory ran out */
    if (rc != CUDA_SUCCESS)
        shim_charge_undo(bytes);
    return rc;
}

typedef struct array_call_s {
    CUarray *array;
    CUmipmappedArray *mipmapped;
    const CUDA_ARRAY_DESCRIPTOR *desc;
    const CUDA_ARRAY3D_DESCRIPTOR *desc3d;
    unsigned levels;
} array_call_t;

static CUresult real_array_create(void *arg)
{
    array_call_t *c = arg;
    return shim.real.cuArrayCreate_v2(c->array, c->desc);
}

static CUresult real_array3d_create(void *arg)
{
    array_call_t *c = arg;
    return shim.real.cuArray3DCreate_v2(c->array, c->desc3d);
}

static CUresult real_mipmapped_create(void *arg)
{
    array_call_t *c = arg;
    return shim.real.cuMipmappedArrayCreate(c->mipmapped, c->desc3d, c->levels);
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    SHIM_MANAGED_OR_REAL(cuArrayCreate_v2, array, desc);
    if (!array || !desc)
        return shim.real.cuArrayCreate_v2(array, desc);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = desc->Width, .Height = desc->Height,
                                  .Format = desc->Format, .NumChannels = desc->NumChannels};
    array_call_t call = {.array = array, .desc = desc};
    uint64_t bytes = desc->Width && desc->NumChannels ? array3d_bytes(&d3, 1) : 0;
    return charged_create(array, bytes, real_array_create, &call);
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    SHIM_MANAGED_OR_REAL(cuArray3DCreate_v2, array, desc);
    if (!array || !desc)
        return shim.real.cuArray3DCreate_v2(array, desc);
    array_call_t call = {.array = array, .desc3d = desc};
    uint64_t bytes = desc->Width && desc->NumChannels ? array3d_bytes(desc, 1) : 0;
    return charged_create(array, bytes, real_array3d_create, &call);
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *handle,
                                        const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                        unsigned int levels)
{
    SHIM_MANAGED_OR_REAL(cuMipmappedArrayCreate, handle, desc, levels);
    if (!handle || !desc)
        return shim.real.cuMipmappedArrayCreate(handle, desc, levels);
    array_call_t call = {.mipmapped = handle, .desc3d = desc, .levels = levels};
    uint64_t bytes = desc->Width && desc->NumChannels && levels ? array3d_bytes(desc, levels) : 0;
    return charged_create(handle, bytes, real_mipmapped_create, &call);
}

CUresult CUDAAPI cuArrayDestroy(CUarray array)
{
    SHIM_MANAGED_OR_REAL(cuArrayDestroy, array);
    CUresult rc = shim.real.cuArrayDestroy(array);
    uint64_t bytes = rc == CUDA_SUCCESS ? forget((uintptr_t)array) : 0;
    if (bytes)
        shim_charge_undo(bytes);
    return rc;
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray handle)
{
    SHIM_MANAGED_OR_REAL(cuMipmappedArrayDestroy, handle);
    CUresult rc = shim.real.cuMipmappedArrayDestroy(handle);
    uint64_t bytes = rc == CUDA_SUCCESS ? forget((uintptr_t)handle) : 0;
    if (bytes)
        shim_charge_undo(bytes);
    return rc;
}
