/* Preemption at the gate, the daemon's part (gate_page.h): one shared page per GPU, handed to
 * the jobs that have a gate role (op gate_page), and the core's GATE effects written into the
 * jobs' pages. */
#include "jobs-internal.h"

#include "gate_page.h"
#include "job_page.h"
#include "log.h"
#include "sched_core.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#define GATE_MAX_GPUS 64

/* the daemon's pages, by GPU index (created at the first request; kept until shutdown) */
static struct {
    int fd;
    gate_page_t *page;
} gate_pages[GATE_MAX_GPUS];

/* The page of gpu, created when first asked for (with the bounds of salusd's options): its
 * descriptor, or a negative errno. */
static int gate_page_fd(const salusd_t *d, int gpu)
{
    if (gpu < 0 || gpu >= GATE_MAX_GPUS)
        return -EINVAL;
    if (gate_pages[gpu].page)
        return gate_pages[gpu].fd;
    int fd = memfd_create("salus-gate-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, GATE_PAGE_BYTES) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    void *p = mmap(NULL, GATE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    gate_pages[gpu].page = p;
    gate_pages[gpu].fd = fd;
    gate_pages[gpu].page->max_park_ns = (uint64_t)d->config.gate_park_max_ms * 1000000ull;
    gate_pages[gpu].page->pass_after_park = (uint32_t)d->config.gate_pass_after_park;
    gate_pages[gpu].page->inflight = (uint32_t)d->config.gate_inflight;
    gate_pages[gpu].page->magic = GATE_PAGE_MAGIC;
    gate_pages[gpu].page->version = GATE_PAGE_VERSION;
    return fd;
}

void jobs_gate_role(salusd_t *d, job_t *job, int gpu, unsigned role)
{
    (void)d;
    job_page_t *page = jobs_page(job);
    if (!page)
        return;
    atomic_store(&page->gate_gpu, (uint32_t)(gpu < 0 ? 0 : gpu));
    atomic_store(&page->gate_role, role);
    LOG_DEBUG("job %llu: gate role %s", (unsigned long long)job->id,
              role == SCHED_CORE_GATE_LC            ? "latency-critical"
              : role == SCHED_CORE_GATE_PREEMPTIBLE ? "preemptible"
                                                    : "none");
}

/* gate_page {} -> {gpu} with the page's descriptor: the page of the job's GPU. */
void jobs_handle_gate_page(conn_t *c, const proto_msg_t *msg)
{
    salusd_t *d = c->daemon;
    job_t *job = jobs_of_conn(c);
    int gpu = -1;
    uint64_t budget;
    if (!job || !job->runtime || jobs_placement(d, job, &gpu, &budget) < 0) {
        server_reply_error(c, msg->id, PROTO_EBADARG, 0, "gate_page needs an admitted job");
        return;
    }
    int fd = gate_page_fd(d, gpu);
    if (fd < 0) {
        server_reply_error(c, msg->id, PROTO_EINTERNAL, 0, "no gate page for GPU %d: %s", gpu,
                           strerror(-fd));
        return;
    }
    proto_enc_t *e = &d->enc;
    proto_enc_begin(e, PROTO_REPLY, msg->id, "", 2);
    proto_pack_kv_uint(&e->pk, "gpu", (uint64_t)gpu);
    proto_pack_kv_uint(&e->pk, "fds", 1);
    proto_enc_finish(e);
    if (server_send_fds(c, e, &fd, 1) < 0)
        LOG_WARN("could not send the gate page of GPU %d to job %llu", gpu,
                 (unsigned long long)job->id);
}

void jobs_gate_job_ended(salusd_t *d, job_t *job)
{
    (void)d;
    job_page_t *page = jobs_page(job);
    if (!page || !atomic_exchange(&page->gate_counted, 0))
        return;
    uint32_t gpu = atomic_load(&page->gate_gpu);
    gate_page_t *g = gpu < GATE_MAX_GPUS ? gate_pages[gpu].page : NULL;
    if (!g)
        return;
    gate_page_lc_leave(g);
    LOG_INFO("job %llu ended during a request: its GPU's best-effort jobs go on",
             (unsigned long long)job->id);
}

void jobs_gate_shutdown(void)
{
    for (int i = 0; i < GATE_MAX_GPUS; i++) {
        if (!gate_pages[i].page)
            continue;
        munmap(gate_pages[i].page, GATE_PAGE_BYTES);
        close(gate_pages[i].fd);
        gate_pages[i].page = NULL;
    }
}
