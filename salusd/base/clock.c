/* The daemon's clock (daemon.h). Alone in its file: a program that links the subsystems may
 * bring its own (a unit test's, the simulator's replay clock). */
#include "daemon.h"

#include <time.h>

uint64_t salusd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
