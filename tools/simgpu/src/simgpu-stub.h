/* What the generated NOT_SUPPORTED stubs call (stubs.c, which cannot include cuda.h). */
#ifndef SALUS_SIMGPU_STUB_H
#define SALUS_SIMGPU_STUB_H

/* Notes "NAME is not supported" once on stderr (per *noted) and returns
 * CUDA_ERROR_NOT_SUPPORTED as an int. */
int simgpu_stub_answer(const char *name, int *noted);

#endif
