// A CUDA runtime-API program built by nvcc with its default (static) runtime: the shape of
// most CUDA programs. Under the shim its cudaMalloc/launches/syncs reach the driver through
// cuGetProcAddress. Used by tools/gpu-check.sh on a machine with a GPU.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

int main()
{
    const int n = 1 << 20;
    float *x, *y, *hy = new float[n];
    if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess || cudaMalloc(&y, n * sizeof(float)) != cudaSuccess) {
        std::printf("runtime_saxpy: cudaMalloc failed: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    float *hx = new float[n];
    for (int i = 0; i < n; i++) {
        hx[i] = 1.0f;
        hy[i] = 2.0f;
    }
    cudaMemcpy(x, hx, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(y, hy, n * sizeof(float), cudaMemcpyHostToDevice);
    for (int it = 0; it < 10; it++) {
        saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
        cudaDeviceSynchronize();
    }
    cudaMemcpy(hy, y, n * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += hy[i] != 22.0f;
    cudaError_t err = cudaGetLastError();
    std::printf("runtime_saxpy: %s (%s)\n", bad || err != cudaSuccess ? "FAIL" : "PASS", cudaGetErrorString(err));
    cudaFree(x);
    cudaFree(y);
    return bad || err != cudaSuccess ? 1 : 0;
}
