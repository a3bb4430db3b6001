/* salus-switch-latency: one side of the switch benchmark (benchmarks/switch-latency.sh), or
 * the floors of a hand-over between processes without salus.
 *
 *   salus-switch-latency --side 0|1 --shared FILE --switches N [--gpu-us U]
 *                        [--ephemeral-mb M] [--persistent-mb P] [--host-us H]
 *                        [--lane-hold gpu|iteration] [--pattern]
 *                        [--alloc plain|caching|async] [--wait-go] --out FILE
 *   salus-switch-latency --floor direct|relay --switches N
 *
 * --side: a job of a lane shared with the other side (run both under salusctl run). Each
 * iteration: the call that opens it (its gate: where the shim waits until the job's next
 * turn), device work (a host function busy for U us), a synchronisation, H us asleep on the
 * host. The synchronisation is a cuCtxSynchronize: after a cuStreamSynchronize the shim
 * judges the job idle by querying the streams it saw, and in some runs it did not find the
 * quiescent point there (the lane then went at the next gate call, under --lane-hold gpu too).
 * With --ephemeral-mb the iteration allocates M MiB first and frees them after the
 * synchronisation (the allocation is then the gate; the chunks go back and are regrown, or
 * stay, as the mechanism decides). Where the job gives its lane up depends on salusd's
 * --lane-hold (the side is told the same): gpu (the default), at the quiescent point, i.e.
 * the synchronisation (the free with --ephemeral-mb, which brings memory to its low point);
 * iteration, at the next gate call. Just before that call each side writes a CLOCK_MONOTONIC
 * timestamp into FILE (a page both map); when its own gate call returns after the other
 * side's release happened during it, the difference is one switch: from the other job's
 * release to this job's gate returning (with --ephemeral-mb, its memory regrown). The side
 * stops once it measured N/2 switches, ran 10 N iterations, or the other side stopped; it
 * writes one latency in ns per line to --out and prints "switch_side_done side=S
 * switches=K iterations=I ms_per_iteration=X overlaps=O": O counts the turns this side began while the other side was
 * in its GPU work (from its gate's return to the end of its synchronisation, work done): 0
 * when the GPU is used by one job of the lane at a time. (Host code after a release runs
 * while the other job holds the lane, legitimately; it is not counted.)
 * --pattern (with --ephemeral-mb): each iteration first copies out its new ephemeral memory
 * (the other side's word in its first word counts as inherited: the lane's chunks are shared;
 * every word of the other side's in it counts as foreign), writes its own word (side and
 * iteration) over all of it, does its device work and synchronises, then checks that every
 * word is its own; prints "switch_side_pattern side=S mismatches=M inherited=I foreign=F"
 * after the done line.
 *
 * --wait-go: once both sides are ready (admitted, their contexts made), wait until the script
 * sets the page's go word (at most 120 s): switch-latency.sh --on-device fills the device's
 * spare memory then, when the jobs' contexts are in it (the row's size is what is left).
 *
 * --floor: two processes alternating turns through a futex in shared memory, without CUDA:
 * direct (the outgoing process wakes the next one) or relay (it writes an eventfd that a
 * third process, standing for the daemon, reads before it wakes the next one). Prints
 * "floor_done kind=K switches=N p50_us=.. p99_us=.. max_us=..". */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Atomic uint64_t boundary_ns[2]; /* each side's last boundary */
    _Atomic uint32_t done[2];        /* the side stopped */
    _Atomic uint32_t in_lane[2];     /* between its boundary call's return and its next one */
    _Atomic uint32_t ready[2];       /* the side is admitted (cuInit returned) */
    _Atomic uint32_t go;             /* --wait-go: the script says start (offset 40) */
} shared_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct {
    uint64_t ns;
    _Atomic int done;
} busy_t;

static void spin_ns(uint64_t ns)
{
    uint64_t until = now_ns() + ns;
    while (now_ns() < until)
        ;
}

static void CUDA_CB busy(void *arg)
{
    busy_t *b = arg;
    spin_ns(b->ns);
    atomic_store(&b->done, 1);
}

static int check(CUresult rc, const char *what)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    const char *name = NULL;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "salus-switch-latency: %s failed: %s\n", what, name ? name : "unknown error");
    return -1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int side;
    const char *shared_path, *out_path;
    long switches;
    uint64_t gpu_ns, host_ns;
    size_t ephemeral_bytes, persistent_bytes;
    int release_at_sync; /* --lane-hold gpu */
    int pattern;         /* --pattern: write and check the ephemeral memory each iteration */
    int alloc;           /* --alloc: ALLOC_* */
    int wait_go;         /* --wait-go */
} side_args_t;

/* --alloc, with --ephemeral-mb: how an iteration gets its ephemeral memory. plain: cuMemAlloc
 * at its start, cuMemFree at its end. caching: once, kept (a caching allocator that never
 * frees to the driver, as PyTorch's default one: by the learned-size rule that memory is
 * persistent); the iteration opens with a cuMemsetD8Async into it. async: cuMemAllocAsync at
 * its start and cuMemFreeAsync on the stream before its synchronisation (a stream-ordered
 * allocator, as PyTorch's cudaMallocAsync backend). */
enum { ALLOC_PLAIN = 0, ALLOC_CACHING, ALLOC_ASYNC };

/* --pattern: the iteration's word of this side, written over all its ephemeral memory */
static uint32_t pattern_word(int side, long iteration)
{
    return (uint32_t)(side + 1) << 24 | (uint32_t)(iteration & 0xffffff);
}

static int run_side(const side_args_t *a)
{
    int fd = open(a->shared_path, O_RDWR);
    if (fd < 0) {
        fprintf(stderr, "salus-switch-latency: %s: %s\n", a->shared_path, strerror(errno));
        return 1;
    }
    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "salus-switch-latency: mmap: %s\n", strerror(errno));
        return 1;
    }
    long want = (a->switches + 1) / 2;
    uint64_t *samples = calloc((size_t)want, sizeof(*samples));
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr persistent = 0, ephemeral = 0;
    int other = 1 - a->side, rc = 1;
    long count = 0, iterations = 0, mismatches = 0, inherited = 0, foreign = 0;
    size_t words = a->ephemeral_bytes / sizeof(uint32_t);
    uint32_t *check_buf = a->pattern && words ? malloc(words * sizeof(uint32_t)) : NULL;
    uint32_t *found_buf = a->pattern && words ? malloc(words * sizeof(uint32_t)) : NULL;
    if ((a->pattern && words && (!check_buf || !found_buf)) || !samples || check(cuInit(0), "cuInit") || check(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
        check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
        check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent") ||
        check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
        goto out;
    /* both admitted before either takes the lane (a side that starts much later, e.g. under
     * runuser, would find the other one done); at most 60 s */
    atomic_store(&sh->ready[a->side], 1);
    for (int i = 0; i < 60000 && !atomic_load(&sh->ready[other]) && !atomic_load(&sh->done[other]);
         i++) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    for (int i = 0; a->wait_go && i < 120000 && !atomic_load(&sh->go); i++) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    if (a->wait_go && !atomic_load(&sh->go)) {
        fprintf(stderr, "salus-switch-latency: --wait-go: no go in 120 s\n");
        goto out;
    }
    if (a->persistent_bytes && check(cuMemAlloc(&persistent, a->persistent_bytes), "cuMemAlloc"))
        goto out;
    if (a->alloc == ALLOC_CACHING && check(cuMemAlloc(&ephemeral, a->ephemeral_bytes), "cuMemAlloc"))
        goto out;
    uint64_t first_ns = 0;
    long overlaps = 0;
    busy_t work = {.ns = a->gpu_ns};
    /* with host time most turns find the lane free and measure nothing: bounded */
    while (count < want && iterations < 20 * want && !atomic_load(&sh->done[other])) {
        uint64_t start = now_ns();
        if (!a->release_at_sync) /* the gate call is the boundary */
            atomic_store(&sh->boundary_ns[a->side], start);
        atomic_store(&work.done, 0);
        CUresult r = !a->ephemeral_bytes         ? cuLaunchHostFunc(stream, busy, &work)
                     : a->alloc == ALLOC_CACHING ? cuMemsetD8Async(ephemeral, 1, 4096, stream)
                     : a->alloc == ALLOC_ASYNC   ? cuMemAllocAsync(&ephemeral, a->ephemeral_bytes, stream)
                                                 : cuMemAlloc(&ephemeral, a->ephemeral_bytes);
        uint64_t back = now_ns();
        if (check(r, a->ephemeral_bytes ? "cuMemAlloc (ephemeral)" : "cuLaunchHostFunc"))
            goto out;
        /* the other side's GPU work must be done (it released, or it waits) whenever this
         * one holds the lane */
        atomic_store(&sh->in_lane[a->side], 1);
        overlaps += atomic_load(&sh->in_lane[other]) != 0;
        if (!first_ns)
            first_ns = start;
        uint64_t theirs = atomic_load(&sh->boundary_ns[other]);
        /* the first boundaries are found at a gate in either mode (nothing to compare with) */
        if (theirs > start && iterations > 2)
            samples[count++] = back - theirs;
        if (check_buf) {
            /* what the memory held when this iteration got it: the other side's words when
             * the lane's chunks are shared by one user's jobs (the proof that they are), none
             * when they were cleared for another user's job (or are this job's own) */
            uint32_t word = pattern_word(a->side, iterations);
            /* all on the stream, then one synchronisation: the shape of the other rows */
            if (check(cuMemcpyDtoHAsync(found_buf, ephemeral, words * sizeof(uint32_t), stream),
                      "cuMemcpyDtoHAsync") ||
                check(cuMemsetD32Async(ephemeral, word, words, stream), "cuMemsetD32Async") ||
                check(cuLaunchHostFunc(stream, busy, &work), "cuLaunchHostFunc") ||
                check(cuMemcpyDtoHAsync(check_buf, ephemeral, words * sizeof(uint32_t), stream),
                      "cuMemcpyDtoHAsync") ||
                check(cuCtxSynchronize(), "cuCtxSynchronize"))
                goto out;
            inherited += found_buf[0] >> 24 == (uint32_t)other + 1;
            for (size_t i = 0; i < words; i++) {
                mismatches += check_buf[i] != word;
                foreign += found_buf[i] >> 24 == (uint32_t)other + 1;
            }
        } else if (a->alloc == ALLOC_CACHING || a->alloc == ALLOC_ASYNC) {
            /* the work (and the free, stream-ordered) on the stream; the synchronisation below
             * is then the release, as without memory */
            if ((a->alloc == ALLOC_ASYNC &&
                 check(cuMemsetD8Async(ephemeral, 1, 4096, stream), "cuMemsetD8Async")) ||
                check(cuLaunchHostFunc(stream, busy, &work), "cuLaunchHostFunc") ||
                (a->alloc == ALLOC_ASYNC &&
                 check(cuMemFreeAsync(ephemeral, stream), "cuMemFreeAsync")))
                goto out;
            while (!atomic_load(&work.done))
                sched_yield();
        } else if (a->ephemeral_bytes) {
            if (check(cuMemsetD8Async(ephemeral, 1, 4096, stream), "cuMemsetD8Async") ||
                check(cuLaunchHostFunc(stream, busy, &work), "cuLaunchHostFunc") ||
                check(cuCtxSynchronize(), "cuCtxSynchronize"))
                goto out;
        } else {
            /* the work done before the synchronisation, which is then the release alone */
            while (!atomic_load(&work.done))
                sched_yield();
        }
        atomic_store(&sh->in_lane[a->side], 0);
        if (a->release_at_sync) /* the synchronisation (the free) gives the lane up */
            atomic_store(&sh->boundary_ns[a->side], now_ns());
        if (a->ephemeral_bytes && a->alloc == ALLOC_PLAIN ? check(cuMemFree(ephemeral), "cuMemFree")
                                                          : check(cuCtxSynchronize(), "cuCtxSynchronize"))
            goto out;
        if (a->host_ns) { /* idle on the host, as a server between requests */
            struct timespec pause = {.tv_sec = (time_t)(a->host_ns / 1000000000u),
                                     .tv_nsec = (long)(a->host_ns % 1000000000u)};
            nanosleep(&pause, NULL);
        }
        iterations++;
    }
    double ms = iterations ? (double)(now_ns() - first_ns) / 1e6 / (double)iterations : 0;
    FILE *f = fopen(a->out_path, "w");
    if (!f) {
        fprintf(stderr, "salus-switch-latency: %s: %s\n", a->out_path, strerror(errno));
        goto out;
    }
    for (long i = 0; i < count; i++)
        fprintf(f, "%llu\n", (unsigned long long)samples[i]);
    if (fclose(f) != 0)
        goto out;
    printf("switch_side_done side=%d switches=%ld iterations=%ld ms_per_iteration=%.4f "
           "overlaps=%ld\n", a->side, count, iterations, ms, overlaps);
    if (a->pattern)
        printf("switch_side_pattern side=%d mismatches=%ld inherited=%ld foreign=%ld\n", a->side,
               mismatches, inherited, foreign);
    rc = 0;
out:
    atomic_store(&sh->in_lane[a->side], 0);
    atomic_store(&sh->done[a->side], 1);
    free(samples);
    free(check_buf);
    free(found_buf);
    return rc;
}

/* ---- floors: the hand-over between two processes without salus -------------------------- */

typedef struct {
    _Atomic uint32_t turn;         /* futex word: whose turn (0 or 1; 2: the relay's) */
    _Atomic uint64_t boundary_ns;  /* the outgoing side's boundary */
    _Atomic uint32_t stop;
} floor_shared_t;

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    struct timespec timeout = {.tv_sec = 1};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &timeout, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

/* one side of the floor: waits for its turn, measures, gives the turn away (directly, or
 * through notify_fd to the relay) */
static void floor_side(floor_shared_t *sh, int side, long turns, int notify_fd, uint64_t *samples)
{
    long count = 0;
    for (long t = 0; t < turns; t++) {
        uint32_t turn;
        while ((turn = atomic_load(&sh->turn)) != (uint32_t)side) {
            if (atomic_load(&sh->stop))
                return;
            futex_wait(&sh->turn, turn);
        }
        uint64_t back = now_ns(), boundary = atomic_load(&sh->boundary_ns);
        if (boundary && samples)
            samples[count++] = back - boundary;
        atomic_store(&sh->boundary_ns, now_ns());
        if (notify_fd >= 0) { /* nobody's turn until the relay gives it */
            uint64_t one = 1;
            atomic_store(&sh->turn, 2);
            if (write(notify_fd, &one, sizeof(one)) != sizeof(one))
                return;
        } else {
            atomic_store(&sh->turn, (uint32_t)(1 - side));
            futex_wake(&sh->turn);
        }
    }
}

static int run_floor(const char *kind, long switches)
{
    int relay = strcmp(kind, "relay") == 0;
    if (!relay && strcmp(kind, "direct") != 0) {
        fprintf(stderr, "salus-switch-latency: --floor takes direct or relay\n");
        return 2;
    }
    long turns = switches / 2 + 1;
    size_t bytes = sizeof(floor_shared_t) + 2 * (size_t)turns * sizeof(uint64_t);
    floor_shared_t *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    uint64_t *samples = (uint64_t *)(sh + 1);
    int efd = relay ? eventfd(0, EFD_CLOEXEC) : -1;
    pid_t kids[3] = {0};
    int nkids = 0;
    for (int side = 0; side < 2; side++) {
        pid_t pid = fork();
        if (pid == 0) {
            floor_side(sh, side, turns, efd, samples + (size_t)side * (size_t)turns);
            _exit(0);
        }
        kids[nkids++] = pid;
    }
    if (relay) {
        pid_t pid = fork();
        if (pid == 0) { /* the daemon's part: read the notification, hand the turn over */
            uint64_t n;
            for (long i = 0; i < 2 * turns && read(efd, &n, sizeof(n)) == sizeof(n); i++) {
                atomic_store(&sh->turn, (uint32_t)((i + 1) % 2));
                futex_wake(&sh->turn);
            }
            atomic_store(&sh->stop, 1);
            futex_wake(&sh->turn);
            _exit(0);
        }
        kids[nkids++] = pid;
    }
    int failed = 0;
    for (int i = 0; i < nkids; i++) {
        int st;
        if (waitpid(kids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
        if (i == 1 && relay) { /* both sides done: let the relay go */
            atomic_store(&sh->stop, 1);
            uint64_t one = 1;
            for (int k = 0; k < 2; k++)
                if (write(efd, &one, sizeof(one)) < 0)
                    break;
        }
    }
    size_t n = 0;
    uint64_t *all = malloc(2 * (size_t)turns * sizeof(uint64_t));
    for (size_t i = 0; all && i < 2 * (size_t)turns; i++)
        if (samples[i])
            all[n++] = samples[i];
    if (failed || !all || n == 0) {
        free(all);
        fprintf(stderr, "salus-switch-latency: the floor measured nothing\n");
        return 1;
    }
    qsort(all, n, sizeof(*all), cmp_u64);
    printf("floor_done kind=%s switches=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f\n", kind, n,
           (double)all[n / 2] / 1e3, (double)all[n * 99 / 100] / 1e3, (double)all[n - 1] / 1e3);
    free(all);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: salus-switch-latency --side 0|1 --shared FILE --switches N --out FILE "
                    "[--gpu-us U] [--ephemeral-mb M] [--persistent-mb P] [--host-us H]\n"
                    "       [--lane-hold gpu|iteration] [--pattern] [--alloc plain|caching|async]\n"
                    "       [--wait-go]\n"
                    "       salus-switch-latency --floor direct|relay --switches N\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"side", required_argument, NULL, 's'},     {"shared", required_argument, NULL, 'f'},
        {"switches", required_argument, NULL, 'n'}, {"gpu-us", required_argument, NULL, 'g'},
        {"ephemeral-mb", required_argument, NULL, 'e'},
        {"persistent-mb", required_argument, NULL, 'p'},
        {"out", required_argument, NULL, 'o'},      {"floor", required_argument, NULL, 'F'},
        {"host-us", required_argument, NULL, 'h'},  {"lane-hold", required_argument, NULL, 'l'},
        {"pattern", no_argument, NULL, 'P'},        {"alloc", required_argument, NULL, 'A'},
        {"wait-go", no_argument, NULL, 'G'},        {NULL, 0, NULL, 0}};
    side_args_t a = {.side = -1, .switches = 10000, .gpu_ns = 100000, .persistent_bytes = 16u << 20,
                     .release_at_sync = 1};
    const char *floor_kind = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        if (opt != 'f' && opt != 'o' && opt != 'F' && opt != 'l' && opt != 'P' && opt != 'A' &&
            opt != 'G' &&
            (opt == '?' || !end || *end || v < 0))
            usage();
        switch (opt) {
        case 's': a.side = (int)v; break;
        case 'f': a.shared_path = optarg; break;
        case 'n': a.switches = v; break;
        case 'g': a.gpu_ns = (uint64_t)v * 1000u; break;
        case 'e': a.ephemeral_bytes = (size_t)v << 20; break;
        case 'p': a.persistent_bytes = (size_t)v << 20; break;
        case 'o': a.out_path = optarg; break;
        case 'F': floor_kind = optarg; break;
        case 'h': a.host_ns = (uint64_t)v * 1000u; break;
        case 'P': a.pattern = 1; break;
        case 'G': a.wait_go = 1; break;
        case 'A':
            if (strcmp(optarg, "plain") == 0)
                a.alloc = ALLOC_PLAIN;
            else if (strcmp(optarg, "caching") == 0)
                a.alloc = ALLOC_CACHING;
            else if (strcmp(optarg, "async") == 0)
                a.alloc = ALLOC_ASYNC;
            else
                usage();
            break;
        case 'l':
            if (strcmp(optarg, "gpu") != 0 && strcmp(optarg, "iteration") != 0)
                usage();
            a.release_at_sync = strcmp(optarg, "gpu") == 0;
            break;
        default: usage();
        }
    }
    if (optind != argc || a.switches < 2)
        usage();
    if (floor_kind)
        return run_floor(floor_kind, a.switches);
    if ((a.side != 0 && a.side != 1) || !a.shared_path || !a.out_path)
        usage();
    if (a.alloc != ALLOC_PLAIN && (!a.ephemeral_bytes || a.pattern))
        usage(); /* --alloc needs --ephemeral-mb; --pattern is for plain allocations */
    return run_side(&a);
}
