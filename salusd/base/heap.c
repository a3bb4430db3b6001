#include "heap.h"

#include <stddef.h>
#include <stdio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Weak: jemalloc's mallctl is there where salusd runs on jemalloc (its executable links it;
 * the unit tests do not), the purge of the sanitizers' allocator under a sanitizer build. */
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));
void __sanitizer_purge_allocator(void) __attribute__((weak));

/* jemalloc's MALLCTL_ARENAS_ALL: "arena.4096.purge" purges every arena, dirty and muzzy
 * pages both (its header is not needed for two calls) */
#define HEAP_JEMALLOC_ARENAS_ALL 4096

const char *heap_release(void)
{
    if (mallctl) {
        char name[32];
        /* the loop thread's cache first, so that what it holds is purged too */
        mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
        snprintf(name, sizeof(name), "arena.%d.purge", HEAP_JEMALLOC_ARENAS_ALL);
        return mallctl(name, NULL, NULL, NULL, 0) == 0 ? "jemalloc" : NULL;
    }
    if (__sanitizer_purge_allocator) {
        __sanitizer_purge_allocator();
        return "the sanitizer's allocator";
    }
#ifdef __GLIBC__
    malloc_trim(0);
    return "glibc";
#else
    return NULL;
#endif
}
