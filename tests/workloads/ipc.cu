/* salus-ipc: device memory shared between two processes with IPC handles, in the shape of
 * NVIDIA's simpleIPC sample. The program forks before any driver call; the parent (the
 * exporter) allocates a buffer, fills it with a kernel, and sends cuIpcGetMemHandle's
 * handle down a pipe; the child opens it with cuIpcOpenMemHandle, checks the contents,
 * adds to every element with a kernel, closes the handle and reports back; the parent
 * then checks it sees the child's writes. Usage: salus-ipc [N].
 * Prints "Result = PASS" or "Result = FAIL" (exit status 0 only if both sides passed). */

extern "C" __global__ void ipc_fill(unsigned *data, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        data[i] = 3u * (unsigned)i + 1u;
}

extern "C" __global__ void ipc_add(unsigned *data, int n, unsigned value)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        data[i] += value;
}

#if defined(SIMGPU_PACK)
#include "workload_pack.h"

static const simgpu_kernel ipc_pack[] = {
    WORKLOAD_PACK_KERNEL(ipc_fill, NULL),
    WORKLOAD_PACK_KERNEL(ipc_add, NULL),
};
WORKLOAD_PACK_EXPORT(ipc_pack)

#elif !defined(__CUDACC__)
#include "workload_host.h"

#include <sys/wait.h>
#include <unistd.h>

extern "C" const unsigned char salus_workload_ipc_image[];

#define IPC_ADDED 1000000u

static bool write_all(int fd, const void *data, size_t bytes)
{
    const char *p = (const char *)data;
    while (bytes > 0) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        bytes -= (size_t)n;
    }
    return true;
}

static bool read_all(int fd, void *data, size_t bytes)
{
    char *p = (char *)data;
    while (bytes > 0) {
        ssize_t n = read(fd, p, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        bytes -= (size_t)n;
    }
    return true;
}

/* counts the elements that are not 3i + 1 + added */
static int count_wrong(const unsigned *data, int n, unsigned added)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += data[i] != 3u * (unsigned)i + 1u + added;
    return bad;
}

/* the importer: exit status 0 if it saw the exporter's data and wrote its own */
static int importer(int n, int from_parent, int to_parent)
{
    workload_program = "salus-ipc (importer)";
    CUipcMemHandle handle;
    if (!read_all(from_parent, &handle, sizeof handle)) {
        fprintf(stderr, "%s: no handle from the exporter\n", workload_program);
        return 1;
    }
    workload_device device;
    workload_device_open(&device, 0, salus_workload_ipc_image);
    CUfunction add;
    CHECK_CU(cuModuleGetFunction(&add, device.module, "ipc_add"));
    CUdeviceptr shared;
    CHECK_CU(cuIpcOpenMemHandle(&shared, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    unsigned *host = (unsigned *)malloc((size_t)n * sizeof(unsigned));
    CHECK_CU(cuMemcpyDtoH(host, shared, (size_t)n * sizeof(unsigned)));
    int bad = count_wrong(host, n, 0);
    unsigned added = IPC_ADDED;
    void *arguments[] = {&shared, &n, &added};
    workload_launch_1d(&device, add, (unsigned)n, arguments);
    CHECK_CU(cuStreamSynchronize(device.stream));
    CHECK_CU(cuIpcCloseMemHandle(shared));
    workload_device_close(&device);
    free(host);
    printf("importer: opened the handle, %d of %d elements wrong, added %u to each\n", bad, n, added);
    fflush(stdout);
    char done = bad == 0 ? 'y' : 'n';
    if (!write_all(to_parent, &done, 1))
        return 1;
    return bad == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    workload_program = "salus-ipc";
    int n = argc > 1 ? (int)workload_parse_unsigned("N", argv[1], 1, 1 << 24) : 100000;
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) {
        perror("salus-ipc: pipe");
        return 1;
    }
    fflush(stdout);
    pid_t child = fork();   /* before any driver call, as the driver requires */
    if (child < 0) {
        perror("salus-ipc: fork");
        return 1;
    }
    if (child == 0) {
        close(down[1]);
        close(up[0]);
        _exit(importer(n, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);

    workload_device device;
    workload_device_open(&device, 0, salus_workload_ipc_image);
    CUfunction fill;
    CHECK_CU(cuModuleGetFunction(&fill, device.module, "ipc_fill"));
    CUdeviceptr buffer = workload_alloc(&device, (size_t)n * sizeof(unsigned), false, "shared buffer");
    void *arguments[] = {&buffer, &n};
    workload_launch_1d(&device, fill, (unsigned)n, arguments);
    CHECK_CU(cuStreamSynchronize(device.stream));
    CUipcMemHandle handle;
    CHECK_CU(cuIpcGetMemHandle(&handle, buffer));
    bool sent = write_all(down[1], &handle, sizeof handle);
    char done = 'n';
    bool answered = sent && read_all(up[0], &done, 1);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && answered && done == 'y';

    unsigned *host = (unsigned *)malloc((size_t)n * sizeof(unsigned));
    CHECK_CU(cuMemcpyDtoH(host, buffer, (size_t)n * sizeof(unsigned)));
    int bad = count_wrong(host, n, IPC_ADDED);
    printf("exporter: %d elements shared; importer %s (exit status %d); %d of %d elements without its writes\n",
           n, child_ok ? "passed" : "failed", WIFEXITED(status) ? WEXITSTATUS(status) : -1, bad, n);
    free(host);
    workload_free(&device, buffer, false);
    workload_device_close(&device);
    bool pass = child_ok && bad == 0;
    printf("Result = %s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
#endif
