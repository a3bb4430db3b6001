/* salus-vmm-vecadd: a vector add on virtual-memory allocations, in the shape of NVIDIA's
 * vectorAddMMAP sample: each vector is one reserved address range, backed by physical
 * allocations (cuMemCreate) striped over every device the program sees, mapped
 * (cuMemMap) and made accessible from all of them (cuMemSetAccess). Per iteration a
 * scratch vector is created, mapped, used and unmapped and released again (ephemeral
 * memory); A, B and C stay (persistent). Prints "Result = PASS" when C == A + B.
 * Usage: salus-vmm-vecadd [--iterations N] [--mb MiB per vector] [--ephemeral-mb MiB]
 *                         [--hold FILE] */

extern "C" __global__ void vmm_vecadd(const float *a, const float *b, float *c, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel vmm_vecadd_pack[] = {
    WORKLOAD_PACK_KERNEL(vmm_vecadd, NULL),
};
WORKLOAD_PACK_EXPORT(vmm_vecadd_pack)

#elif !defined(__CUDACC__)
#include "workload_memory.h"

#include <vector>

extern "C" const unsigned char salus_workload_vmm_vecadd_image[];

typedef struct vmm_vector {
    CUdeviceptr base;
    size_t bytes;  /* reserved and mapped: whole stripes */
    std::vector<CUmemGenericAllocationHandle> handles;
} vmm_vector;

static std::vector<CUdevice> devices;
static size_t stripe_bytes; /* the largest granularity of the devices */

/* Reserves bytes (rounded up to whole stripes) and backs stripe k with memory of device
 * k % devices, accessible from every device. */
static void vmm_vector_create(vmm_vector *v, size_t bytes)
{
    size_t stripes = (bytes + stripe_bytes - 1) / stripe_bytes;
    v->bytes = stripes * stripe_bytes;
    CHECK_CU(cuMemAddressReserve(&v->base, v->bytes, stripe_bytes, 0, 0));
    for (size_t k = 0; k < stripes; k++) {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = devices[k % devices.size()];
        CUmemGenericAllocationHandle handle;
        CHECK_CU(cuMemCreate(&handle, stripe_bytes, &prop, 0));
        CHECK_CU(cuMemMap(v->base + k * stripe_bytes, stripe_bytes, 0, handle, 0));
        v->handles.push_back(handle);
    }
    std::vector<CUmemAccessDesc> access(devices.size());
    for (size_t d = 0; d < devices.size(); d++) {
        access[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access[d].location.id = devices[d];
        access[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CHECK_CU(cuMemSetAccess(v->base, v->bytes, access.data(), access.size()));
}

static void vmm_vector_destroy(vmm_vector *v)
{
    CHECK_CU(cuMemUnmap(v->base, v->bytes));
    for (CUmemGenericAllocationHandle handle : v->handles)
        CHECK_CU(cuMemRelease(handle));
    CHECK_CU(cuMemAddressFree(v->base, v->bytes));
    v->handles.clear();
}

int main(int argc, char **argv)
{
    workload_program = "salus-vmm-vecadd";
    workload_memory_options o;
    workload_memory_parse(argc, argv, &o,
                          "usage: salus-vmm-vecadd [--iterations N] [--mb MiB] [--ephemeral-mb MiB] [--hold FILE]\n");
    int count = 0;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGetCount(&count));
    for (int i = 0; i < count; i++) {
        CUdevice d;
        CHECK_CU(cuDeviceGet(&d, i));
        int vmm = 0;
        CHECK_CU(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d));
        if (vmm)
            devices.push_back(d);
    }
    if (devices.empty()) {
        fprintf(stderr, "salus-vmm-vecadd: no device supports virtual memory management\n");
        return WORKLOAD_EXIT_DRIVER_ERROR;
    }
    stripe_bytes = 0;
    for (CUdevice d : devices) {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = d;
        size_t g = 0;
        CHECK_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        if (g > stripe_bytes)
            stripe_bytes = g;
    }
    workload_device dev;
    workload_device_open(&dev, 0, salus_workload_vmm_vecadd_image);
    CUfunction add;
    CHECK_CU(cuModuleGetFunction(&add, dev.module, "vmm_vecadd"));

    size_t bytes = (size_t)o.mb << 20;
    unsigned long long n = bytes / sizeof(float);
    vmm_vector a, b, c;
    vmm_vector_create(&a, bytes);
    vmm_vector_create(&b, bytes);
    vmm_vector_create(&c, bytes);
    std::vector<float> ha(n), hb(n), hc(n);
    workload_vecadd_inputs(ha.data(), hb.data(), n);
    CHECK_CU(cuMemcpyHtoD(a.base, ha.data(), bytes));
    CHECK_CU(cuMemcpyHtoD(b.base, hb.data(), bytes));
    printf("vmm-vecadd: %zu device(s), stripes of %zu KiB, 3 x %llu MiB persistent, %llu MiB ephemeral\n",
           devices.size(), stripe_bytes >> 10, o.mb, o.ephemeral_mb);

    for (unsigned it = 0; it < o.iterations; it++) {
        vmm_vector scratch;
        bool use_scratch = o.ephemeral_mb >= o.mb;
        if (o.ephemeral_mb)
            vmm_vector_create(&scratch, (size_t)o.ephemeral_mb << 20);
        CUdeviceptr out = use_scratch ? scratch.base : c.base;
        void *args[] = {&a.base, &b.base, &out, &n};
        workload_launch_1d(&dev, add, (unsigned)n, args);
        if (use_scratch)
            CHECK_CU(cuMemcpyDtoDAsync(c.base, scratch.base, bytes, dev.stream));
        CHECK_CU(cuStreamSynchronize(dev.stream));
        if (o.ephemeral_mb)
            vmm_vector_destroy(&scratch);
    }
    CHECK_CU(cuMemcpyDtoH(hc.data(), c.base, bytes));
    size_t bad = workload_vecadd_errors(hc.data(), n, 1.0f);
    workload_memory_hold(&o);
    vmm_vector_destroy(&a);
    vmm_vector_destroy(&b);
    vmm_vector_destroy(&c);
    workload_device_close(&dev);
    printf("Result = %s\n", bad ? "FAIL" : "PASS");
    return bad ? WORKLOAD_EXIT_VERIFY : 0;
}
#endif
