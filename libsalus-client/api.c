/* salus.h: explicit iteration marks and statistics for programs that want them. */
#include "shim-internal.h"

#include "salus.h"

int salus_shim_iteration_begin(void);
int salus_shim_iteration_end(void);
int salus_shim_get_stats(salus_stats_t *stats);

#include <string.h>

#define SALUS_EXPORT __attribute__((visibility("default")))

SALUS_EXPORT int salus_shim_iteration_begin(void)
{
    return shim_mark_iteration(1);
}

SALUS_EXPORT int salus_shim_iteration_end(void)
{
    return shim_mark_iteration(0);
}

SALUS_EXPORT int salus_shim_get_stats(salus_stats_t *stats)
{
    memset(stats, 0, sizeof(*stats));
    if (shim_init() != CUDA_SUCCESS || shim.mode != SHIM_MODE_MANAGED)
        return 0;
    stats->job_id = shim.job_id;
    stats->iterations = atomic_load(&shim.page->iterations);
    stats->last_iteration_ns = atomic_load(&shim.page->last_iteration_ns);
    stats->live_bytes = atomic_load(&shim.page->live_bytes);
    stats->budget_bytes = shim.budget_bytes;
    stats->persistent_bytes = atomic_load(&shim.page->persistent_bytes);
    stats->ephemeral_peak_bytes = atomic_load(&shim.page->ephemeral_peak_bytes);
    return 1;
}
