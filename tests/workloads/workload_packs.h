/* The bundled workloads find the bundled kernel packs next to themselves.
 *
 * On simgpu a program's kernels come from the packs listed in SIMGPU_KERNEL_PACKS. When it is
 * not set, a workload program in <dir>/bin sets it, before main, to the list the build writes
 * to <dir>/lib/packs/salus-workloads.packs, so that build/bin/salus-mlp runs as printed. A
 * value already set wins; on a real GPU the variable is ignored. */
#ifndef SALUS_TESTS_WORKLOADS_PACKS_H
#define SALUS_TESTS_WORKLOADS_PACKS_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

/* <directory of the executable>/../lib/packs/<file> in out; false when it cannot be named */
static inline bool workload_bundled_path(const char *file, char *out, size_t size)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return snprintf(out, size, "%s/../lib/packs/%s", exe, file) < (int)size;
}

__attribute__((constructor)) static void workload_default_packs(void)
{
    const char *set = getenv("SIMGPU_KERNEL_PACKS");
    char path[4200], list[16384];
    if ((set && *set) || !workload_bundled_path("salus-workloads.packs", path, sizeof(path)))
        return;
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t got = fread(list, 1, sizeof(list) - 1, f);
    fclose(f);
    list[got] = '\0';
    while (got > 0 && (list[got - 1] == '\n' || list[got - 1] == ' '))
        list[--got] = '\0';
    if (got > 0 && got < sizeof(list) - 1)
        setenv("SIMGPU_KERNEL_PACKS", list, 0);
}

#endif
