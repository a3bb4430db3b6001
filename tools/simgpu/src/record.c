/* The record of kernel starts (SIMGPU_KERNEL_LOG=FILE): one line per kernel submitted
 * ("submit") and per kernel started on the engine ("start"), appended to FILE by every
 * process that has the variable:
 *
 *     start <CLOCK_MONOTONIC ns> <pid> <SIMGPU_KERNEL_LOG_TAG or -> <kernel name>
 *
 * A start line is written while its kernel holds the engine, so the file's start lines are
 * in the order the kernels started on the device; a submit line is written by the launching
 * thread before its kernel is queued. Each line is one write() to an O_APPEND descriptor.
 * Tests count, from it, which kernels started between two events (tests/integration). */
#include "simgpu-internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t record_once = PTHREAD_ONCE_INIT;
static int record_fd = -1;
static char record_tag[64] = "-";

static void record_open(void)
{
    const char *path = getenv("SIMGPU_KERNEL_LOG");
    const char *tag = getenv("SIMGPU_KERNEL_LOG_TAG");
    if (tag && *tag && !strpbrk(tag, " \t\n"))
        snprintf(record_tag, sizeof(record_tag), "%s", tag);
    if (path && *path) {
        record_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (record_fd < 0)
            fprintf(stderr, "simgpu[%d]: SIMGPU_KERNEL_LOG: cannot open %s\n", (int)getpid(), path);
    }
}

void simgpu_record_kernel(const char *what, const char *kernel_name)
{
    pthread_once(&record_once, record_open);
    if (record_fd < 0)
        return;
    char line[320];
    int n = snprintf(line, sizeof(line), "%s %llu %d %s %s\n", what,
                     (unsigned long long)simgpu_now_ns(), (int)getpid(), record_tag,
                     kernel_name ? kernel_name : "?");
    if (n > 0 && (size_t)n < sizeof(line) && write(record_fd, line, (size_t)n) < 0)
        return; /* a record that cannot be written is not the program's failure */
}
