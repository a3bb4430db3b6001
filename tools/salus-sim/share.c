/* The event heap and the processor-sharing GPU (sim-internal.h). */
#include "sim-internal.h"

#include <math.h>
#include <stdlib.h>

static bool entry_less(const sim_heap_entry_t *a, const sim_heap_entry_t *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->job < b->job;
}

int sim_heap_push(sim_heap_t *heap, double key, uint32_t job)
{
    if (heap->count == heap->capacity) {
        size_t capacity = heap->capacity ? heap->capacity * 2 : 64;
        sim_heap_entry_t *items = realloc(heap->items, capacity * sizeof(*items));
        if (!items)
            return SIM_ERROR_NO_MEMORY;
        heap->items = items;
        heap->capacity = capacity;
    }
    size_t i = heap->count++;
    sim_heap_entry_t entry = {key, job};
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!entry_less(&entry, &heap->items[parent]))
            break;
        heap->items[i] = heap->items[parent];
        i = parent;
    }
    heap->items[i] = entry;
    return SIM_OK;
}

sim_heap_entry_t sim_heap_pop(sim_heap_t *heap)
{
    sim_heap_entry_t top = heap->items[0];
    sim_heap_entry_t last = heap->items[--heap->count];
    size_t i = 0, n = heap->count;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && entry_less(&heap->items[child + 1], &heap->items[child]))
            child++;
        if (!entry_less(&heap->items[child], &last))
            break;
        heap->items[i] = heap->items[child];
        i = child;
    }
    if (n)
        heap->items[i] = last;
    return top;
}

void sim_heap_free(sim_heap_t *heap)
{
    free(heap->items);
    heap->items = NULL;
    heap->count = heap->capacity = 0;
}

/* The gate's model (sim_gpu_t): best-effort parts progress until drain_until_s while
 * latency-critical ones run, then stop; latency-critical ones progress from then on. */
static void gate_advance(sim_gpu_t *gpu, double now_s)
{
    double t0 = gpu->updated_s, t1 = now_s;
    if (t1 <= t0)
        return;
    double mid = t1;
    if (gpu->lc_parts.count > 0)
        mid = gpu->drain_until_s < t0 ? t0 : gpu->drain_until_s > t1 ? t1 : gpu->drain_until_s;
    if (mid > t0 && gpu->parts.count > 0) {
        gpu->virtual_s += (mid - t0) / (double)gpu->parts.count;
        gpu->busy_s += mid - t0;
    }
    if (t1 > mid && gpu->lc_parts.count > 0)
        gpu->busy_s += t1 - mid; /* one latency-critical part after the other */
    gpu->updated_s = t1;
}

/* When the next best-effort and latency-critical parts finish (INFINITY: none). */
static void gate_next(const sim_gpu_t *gpu, double *be_s, double *lc_s)
{
    *be_s = *lc_s = INFINITY;
    if (gpu->lc_parts.count > 0)
        *lc_s = gpu->lc_parts.items[0].key;
    if (gpu->parts.count > 0) {
        double left = gpu->parts.items[0].key - gpu->virtual_s;
        double t = gpu->updated_s + (left > 0 ? left : 0) * (double)gpu->parts.count;
        /* stopped from drain_until_s on while latency-critical parts run */
        if (gpu->lc_parts.count == 0 || t <= gpu->drain_until_s)
            *be_s = t;
    }
}

static int gate_start(sim_gpu_t *gpu, double now_s, uint32_t job, double work_s)
{
    gate_advance(gpu, now_s);
    if (!gpu->lc[job])
        return sim_heap_push(&gpu->parts, gpu->virtual_s + work_s, job);
    if (gpu->lc_parts.count == 0) {
        /* the best-effort parts finish the kernel each has in flight (processor sharing:
         * their sum of work at rate 1), then stop at the gate */
        double drain = 0;
        for (size_t i = 0; i < gpu->parts.count; i++) {
            double left = gpu->parts.items[i].key - gpu->virtual_s;
            double kernel = gpu->kernel_s[gpu->parts.items[i].job];
            drain += left < kernel ? (left > 0 ? left : 0) : kernel;
        }
        gpu->drain_until_s = now_s + drain;
        gpu->lc_tail_s = gpu->drain_until_s;
    }
    /* one after the other, in the order they come (a request's kernels, the best-effort
     * ones parked) */
    double finish_s = (gpu->lc_tail_s > now_s ? gpu->lc_tail_s : now_s) + work_s;
    int rc = sim_heap_push(&gpu->lc_parts, finish_s, job);
    if (rc == SIM_OK)
        gpu->lc_tail_s = finish_s;
    return rc;
}

static uint32_t gate_finish(sim_gpu_t *gpu, double now_s)
{
    double be_s, lc_s;
    gate_next(gpu, &be_s, &lc_s);
    gate_advance(gpu, now_s);
    if (lc_s <= be_s)
        return sim_heap_pop(&gpu->lc_parts).job;
    sim_heap_entry_t part = sim_heap_pop(&gpu->parts);
    if (gpu->virtual_s < part.key)
        gpu->virtual_s = part.key;
    return part.job;
}

void sim_gpu_advance(sim_gpu_t *gpu, double now_s)
{
    if (gpu->gate) {
        gate_advance(gpu, now_s);
        return;
    }
    double elapsed = now_s - gpu->updated_s;
    if (elapsed > 0 && gpu->parts.count > 0) {
        gpu->virtual_s += elapsed / (double)gpu->parts.count;
        gpu->busy_s += elapsed;
    }
    if (now_s > gpu->updated_s)
        gpu->updated_s = now_s;
}

int sim_gpu_start(sim_gpu_t *gpu, double now_s, uint32_t job, double work_s)
{
    if (gpu->gate)
        return gate_start(gpu, now_s, job, work_s);
    sim_gpu_advance(gpu, now_s);
    if (gpu->fcfs) {
        /* queued behind the parts started before it; the GPU is busy while any is queued */
        double finish_s = (gpu->tail_s > now_s ? gpu->tail_s : now_s) + work_s;
        int rc = sim_heap_push(&gpu->parts, finish_s, job);
        if (rc == SIM_OK)
            gpu->tail_s = finish_s;
        return rc;
    }
    return sim_heap_push(&gpu->parts, gpu->virtual_s + work_s, job);
}

double sim_gpu_next_finish_s(const sim_gpu_t *gpu, double empty)
{
    if (gpu->gate) {
        double be_s, lc_s;
        gate_next(gpu, &be_s, &lc_s);
        double t = be_s < lc_s ? be_s : lc_s;
        return t < INFINITY ? t : empty;
    }
    if (gpu->parts.count == 0)
        return empty;
    if (gpu->fcfs)
        return gpu->parts.items[0].key;
    double left = gpu->parts.items[0].key - gpu->virtual_s;
    if (left < 0)
        left = 0;
    return gpu->updated_s + left * (double)gpu->parts.count;
}

uint32_t sim_gpu_finish(sim_gpu_t *gpu, double now_s)
{
    if (gpu->gate)
        return gate_finish(gpu, now_s);
    sim_gpu_advance(gpu, now_s);
    sim_heap_entry_t part = sim_heap_pop(&gpu->parts);
    if (gpu->fcfs)
        return part.job;
    /* Rounding may leave the clock a hair short of the finished part's mark; the parts
     * still running all finish at or after it. */
    if (gpu->virtual_s < part.key)
        gpu->virtual_s = part.key;
    return part.job;
}

void sim_gpu_free(sim_gpu_t *gpu)
{
    sim_heap_free(&gpu->lc_parts);
    sim_heap_free(&gpu->parts);
}
