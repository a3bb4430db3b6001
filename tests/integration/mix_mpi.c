/* mix-mpi GPU_RANKS [HOLD_FILE]: a distributed program as people write them, where some ranks
 * never touch the GPU (a coordinator, a data loader). The ranks named in GPU_RANKS (a
 * comma-separated list, e.g. "1" or "2,3") do GPU work through the driver: cuInit, the primary context,
 * 16 MiB allocated, set and read back. The others make no driver call at all. With HOLD_FILE,
 * every rank then waits until that file exists (at most 300 s: the test that starts it makes
 * it). Then all ranks meet in MPI_Barrier and say so. One line per step, prefixed
 * "rank R/W"; exit 0 when all went well. */
#include <cuda.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIX_BYTES (16u << 20)
#define MIX_HOLD_POLL_MS 50
#define MIX_HOLD_MAX_POLLS (300 * 1000 / MIX_HOLD_POLL_MS)

static int is_gpu_rank(const char *list, int rank)
{
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", list);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        long r = strtol(tok, &end, 10);
        if (end != tok && *end == '\0' && r == rank)
            return 1;
    }
    return 0;
}

#define CHECK_CU(call)                                                                         \
    do {                                                                                       \
        CUresult rc_ = (call);                                                                 \
        if (rc_ != CUDA_SUCCESS) {                                                             \
            const char *name_ = NULL;                                                          \
            cuGetErrorName(rc_, &name_);                                                       \
            fprintf(stderr, "rank %d: %s -> %s\n", rank, #call, name_ ? name_ : "?");          \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static int gpu_work(int rank)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    unsigned char *host = malloc(MIX_BYTES);
    if (!host)
        return 1;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));
    CHECK_CU(cuMemAlloc(&ptr, MIX_BYTES));
    CHECK_CU(cuMemsetD8(ptr, (unsigned char)(0x40 + rank), MIX_BYTES));
    CHECK_CU(cuMemcpyDtoH(host, ptr, MIX_BYTES));
    int bad = 0;
    for (size_t i = 0; i < MIX_BYTES; i += 4096)
        bad += host[i] != (unsigned char)(0x40 + rank);
    CHECK_CU(cuMemFree(ptr));
    CHECK_CU(cuDevicePrimaryCtxRelease(dev));
    free(host);
    if (bad) {
        fprintf(stderr, "rank %d: the device memory read back is wrong\n", rank);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rank = 0, world = 0, failed = 0;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: mix-mpi GPU_RANKS [HOLD_FILE]\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int gpu = is_gpu_rank(argv[1], rank);
    printf("rank %d/%d: %s\n", rank, world, gpu ? "gpu" : "host-only (no driver call)");
    fflush(stdout);
    if (gpu) {
        failed = gpu_work(rank);
        printf("rank %d/%d: gpu work %s\n", rank, world, failed ? "FAILED" : "done");
        fflush(stdout);
    }
    if (argc == 3) {
        printf("rank %d/%d: holding until %s exists\n", rank, world, argv[2]);
        fflush(stdout);
        struct timespec poll = {.tv_sec = 0, .tv_nsec = MIX_HOLD_POLL_MS * 1000000L};
        for (int i = 0; i < MIX_HOLD_MAX_POLLS && access(argv[2], F_OK) != 0; i++)
            nanosleep(&poll, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d/%d: past the barrier\n", rank, world);
    fflush(stdout);
    MPI_Finalize();
    return failed;
}
