#!/usr/bin/env bash
# <builddir>/lib/simgpu holds simgpu under the driver's sonames, exports only
# driver entry points (+ simgpu.h's simgpu_device_stats, simgpu_vmm_adopt_fd and simgpu_shm_release), and runs a driver-API program that
# was linked against the toolkit's libcuda stub, loading an nvcc fatbin when
# nvcc is available.
source "$(dirname "$0")/simgpu_common.sh"
for f in libcuda.so.1 libcuda.so; do
    [ -e "$SIMGPU_LIB_DIR/$f" ] || fail "$SIMGPU_LIB_DIR/$f is missing"
done
soname=$(readelf -d "$SIMGPU_LIB_DIR/libcuda.so.1" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libcuda.so.1 ] || fail "SONAME is '$soname'"
others=$(nm -D --defined-only "$SIMGPU_LIB_DIR/libcuda.so.1" | awk '{ print $3 }' |
         grep -v -E '^cu[A-Z]' | grep -v -x -e simgpu_device_stats -e simgpu_vmm_adopt_fd -e simgpu_shm_release || true)
[ -z "$others" ] || fail "unexpected exported symbols: $others"
pass "layout, SONAME and exports"

cuda_home="${SALUS_CUDA_HOME:-/usr/local/cuda}"
stub="$cuda_home/lib64/stubs"
if ! command -v cc > /dev/null || [ ! -e "$stub/libcuda.so" ]; then
    echo "skip: no C compiler or no toolkit libcuda stub to link a program against"
    exit 0
fi
cat > "$WORK/program.c" <<'PROGRAM'
/* an ordinary driver-API program: nothing simgpu-specific */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { CUresult r = (x); if (r) { fprintf(stderr, "%s: %d\n", #x, r); return 1; } } while (0)
int main(int argc, char **argv)
{
    static char image[1 << 16] = "placeholder image";
    if (argc > 1) {
        FILE *f = fopen(argv[1], "rb");
        if (!f || fread(image, 1, sizeof(image), f) == 0) return 1;
        fclose(f);
    }
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn;
    char name[64];
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetName(name, sizeof(name), dev));
    CK(cuCtxCreate(&ctx, NULL, 0, dev));
    CK(cuModuleLoadData(&mod, image));
    CK(cuModuleGetFunction(&fn, mod, "vector_add"));
    enum { N = 4096 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) { a[i] = i; b[i] = 2 * i; }
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, sizeof(a))); CK(cuMemAlloc(&db, sizeof(b))); CK(cuMemAlloc(&dc, sizeof(c)));
    CK(cuMemcpyHtoD(da, a, sizeof(a))); CK(cuMemcpyHtoD(db, b, sizeof(b)));
    int n = N;
    void *params[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(fn, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CK(cuMemcpyDtoH(c, dc, sizeof(c)));
    for (int i = 0; i < N; i++) if (c[i] != 3.0f * i) { fprintf(stderr, "c[%d] = %f\n", i, c[i]); return 1; }
    CK(cuModuleUnload(mod));
    CK(cuCtxDestroy(ctx));
    printf("device %s: vector_add ok\n", name);
    return 0;
}
PROGRAM
cc -O1 -I"$cuda_home/include" -o "$WORK/program" "$WORK/program.c" -L"$stub" -lcuda
# a sanitizer build of simgpu needs its runtime loaded first in an uninstrumented program
runtimes=$(ldd "$SIMGPU_LIB_DIR/libcuda.so.1" | awk '$1 ~ /^lib(asan|ubsan)\.so/ { print $3 }' | paste -sd: -)
LD_PRELOAD="$runtimes" LD_LIBRARY_PATH="$SIMGPU_LIB_DIR" "$WORK/program" > "$WORK/program.out" || fail "the program failed on simgpu"
grep -q "salus simgpu" "$WORK/program.out" || fail "the program did not run on simgpu"
pass "a driver-API program linked against the toolkit's libcuda ran with LD_LIBRARY_PATH=lib/simgpu"

if command -v nvcc > /dev/null || [ -x "$cuda_home/bin/nvcc" ]; then
    nvcc_bin=$(command -v nvcc || echo "$cuda_home/bin/nvcc")
    cat > "$WORK/kernel.cu" <<'KERNEL'
extern "C" __global__ void vector_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
KERNEL
    if "$nvcc_bin" -fatbin -arch=sm_80 -o "$WORK/kernel.fatbin" "$WORK/kernel.cu" 2> "$WORK/nvcc.err"; then
        LD_PRELOAD="$runtimes" LD_LIBRARY_PATH="$SIMGPU_LIB_DIR" "$WORK/program" "$WORK/kernel.fatbin" > /dev/null ||
            fail "the program failed with an nvcc fatbin"
        pass "the same program loading an nvcc fatbin"
    else
        echo "skip: nvcc could not build a fatbin: $(head -1 "$WORK/nvcc.err")"
    fi
fi
