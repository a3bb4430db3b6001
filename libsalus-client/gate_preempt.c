/* Job classes at the shim: a latency-critical job (salusctl run --latency-target MS) says so
 * at registration; salusd's scheduling core then knows its class and target (sched_core.h,
 * "Classes"). */
#include "shim-internal.h"
#include "proto.h"

#include <stdlib.h>

/* A time in milliseconds from the environment, in ns; 0 when unset or not a time. */
static uint64_t env_ms_ns(const char *name)
{
    const char *v = getenv(name);
    char *end = NULL;
    double ms = v && *v ? strtod(v, &end) : 0.0;
    return end && !*end && ms > 0.0 && ms <= 3600000.0 ? (uint64_t)(ms * 1e6) : 0;
}

int shim_class_fields(void)
{
    return (env_ms_ns("SALUS_LATENCY_TARGET_MS") > 0) + (env_ms_ns("SALUS_REQUEST_MS") > 0);
}

void shim_class_pack(msgpack_packer *pk)
{
    uint64_t target = env_ms_ns("SALUS_LATENCY_TARGET_MS"), request = env_ms_ns("SALUS_REQUEST_MS");
    if (target)
        proto_pack_kv_uint(pk, "latency_target_ns", target);
    if (request)
        proto_pack_kv_uint(pk, "request_ns", request);
}

void shim_class_request_done(job_page_t *page, uint64_t duration_ns)
{
    static uint64_t target_ns = UINT64_MAX; /* read once (UINT64_MAX: not yet) */
    if (target_ns == UINT64_MAX)
        target_ns = env_ms_ns("SALUS_LATENCY_TARGET_MS");
    if (!target_ns)
        return; /* best-effort */
    atomic_fetch_add(&page->requests, 1);
    if (duration_ns > target_ns)
        atomic_fetch_add(&page->requests_over_target, 1);
    atomic_fetch_add(&page->request_hist[latency_hist_bucket(duration_ns)], 1);
}
