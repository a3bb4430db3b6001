/* Freed memory handed back to the system (after a burst of client buffers). */
#ifndef SALUS_SALUSD_HEAP_H
#define SALUS_SALUSD_HEAP_H

/* Returns the name of the allocator that purged its free pages (jemalloc, the sanitizers'
 * allocator, glibc's malloc_trim), or NULL when it could not. */
const char *heap_release(void);

#endif
