/* cuGetErrorName / cuGetErrorString for every CUresult of the toolkit's cuda.h
 * (the list is generated at build time). The description is the name made
 * readable ("CUDA_ERROR_OUT_OF_MEMORY" -> "out of memory"). */
#include <ctype.h>
#include <string.h>

#include "simgpu-internal.h"

typedef struct error_entry {
    CUresult code;
    const char *name;
} error_entry_t;

static const error_entry_t errors[] = {
#define SIMGPU_ERROR(name) {name, #name},
#include "simgpu-errors.inc"
#undef SIMGPU_ERROR
};

#define ERROR_COUNT (sizeof(errors) / sizeof(errors[0]))

static char descriptions[ERROR_COUNT][96];
static pthread_once_t descriptions_once = PTHREAD_ONCE_INIT;

static void descriptions_build(void)
{
    for (size_t i = 0; i < ERROR_COUNT; i++) {
        const char *name = errors[i].name;
        if (strncmp(name, "CUDA_ERROR_", 11) == 0)
            name += 11;
        else if (strcmp(name, "CUDA_SUCCESS") == 0)
            name = "no error";
        size_t n = 0;
        for (; name[n] && n < sizeof(descriptions[i]) - 1; n++)
            descriptions[i][n] = name[n] == '_' ? ' ' : (char)tolower((unsigned char)name[n]);
        descriptions[i][n] = '\0';
    }
}

static const error_entry_t *error_find(CUresult code, size_t *index)
{
    for (size_t i = 0; i < ERROR_COUNT; i++) {
        if (errors[i].code == code) {
            *index = i;
            return &errors[i];
        }
    }
    return NULL;
}

SIMGPU_API cuGetErrorName(CUresult error, const char **name)
{
    size_t index;
    const error_entry_t *e = error_find(error, &index);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API cuGetErrorString(CUresult error, const char **text)
{
    size_t index;
    const error_entry_t *e = error_find(error, &index);
    if (!text)
        return CUDA_ERROR_INVALID_VALUE;
    if (!e) {
        *text = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_once(&descriptions_once, descriptions_build);
    *text = descriptions[index];
    return CUDA_SUCCESS;
}
