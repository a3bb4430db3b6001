/* salus.h — the small public C API of libsalus-client.
 *
 * Programs need none of this: the shim finds iteration boundaries on its own. Programs that
 * know better may mark them; once a program marks an iteration, automatic detection is off
 * for that process. Header-only: each call looks the shim up at run time (dlsym), so a
 * program that includes this header needs no extra library and runs unchanged without
 * salus, where every call is a no-op that returns 0. */
#ifndef SALUS_CLIENT_SALUS_H
#define SALUS_CLIENT_SALUS_H

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SALUS_API_VERSION 1


typedef struct salus_stats {
    uint64_t job_id;               /* 0 when not managed */
    uint64_t iterations;
    uint64_t last_iteration_ns;
    uint64_t live_bytes;
    uint64_t budget_bytes;
    uint64_t persistent_bytes;
    uint64_t ephemeral_peak_bytes;
} salus_stats_t;

/* The shim's entry points (exported by libsalus-client). */
typedef int (*salus_mark_fn_t)(void);
typedef int (*salus_stats_fn_t)(salus_stats_t *);
#define SALUS_SHIM_LOOKUP(type, name)                                                          \
    static type salus_fn_;                                                                     \
    static int salus_looked_;                                                                  \
    if (!salus_looked_) {                                                                      \
        salus_fn_ = (type)dlsym(RTLD_DEFAULT, name);                                           \
        salus_looked_ = 1;                                                                     \
    }

/* Marks the start of an iteration: waits, if needed, until salusd grants this job its GPU.
 * Returns 0, or a negative errno when the daemon connection is lost. */
static inline int salus_iteration_begin(void)
{
    SALUS_SHIM_LOOKUP(salus_mark_fn_t, "salus_shim_iteration_begin")
    return salus_fn_ ? salus_fn_() : 0;
}

/* Marks the end of an iteration (after the program's last GPU work of it). */
static inline int salus_iteration_end(void)
{
    SALUS_SHIM_LOOKUP(salus_mark_fn_t, "salus_shim_iteration_end")
    return salus_fn_ ? salus_fn_() : 0;
}

/* Fills *stats. Returns 1 when the process runs under salusd, 0 otherwise. */
static inline int salus_get_stats(salus_stats_t *stats)
{
    SALUS_SHIM_LOOKUP(salus_stats_fn_t, "salus_shim_get_stats")
    if (salus_fn_)
        return salus_fn_(stats);
    memset(stats, 0, sizeof(*stats));
    return 0;
}

#ifdef __cplusplus
}
#endif

#endif
