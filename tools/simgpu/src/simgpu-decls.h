/* Declarations of every exported entry point, generated from simgpu-api.def
 * with the function types of cudaTypedefs.h: a definition whose signature does
 * not match the PFN type of its row fails to compile. */
#ifndef SALUS_SIMGPU_DECLS_H
#define SALUS_SIMGPU_DECLS_H

#include <cudaTypedefs.h>

#define SIMGPU_EXPORT __attribute__((visibility("default")))
#define SIMGPU_FN(base, version, symbol) \
    extern SIMGPU_EXPORT __typeof__(*(PFN_##base##_v##version)0) symbol;
#define SIMGPU_OLD(base, version, symbol) /* declared below */
#define SIMGPU_PTDS(base, version, symbol) \
    extern SIMGPU_EXPORT __typeof__(*(PFN_##base##_v##version##_ptds)0) symbol;
#define SIMGPU_PTSZ(base, version, symbol) \
    extern SIMGPU_EXPORT __typeof__(*(PFN_##base##_v##version##_ptsz)0) symbol;
#include "simgpu-api.def"
#undef SIMGPU_FN
#undef SIMGPU_PTDS
#undef SIMGPU_PTSZ

/* legacy variants: the same signature as their successor */
extern SIMGPU_EXPORT __typeof__(*(PFN_cuDevicePrimaryCtxRelease_v11000)0) cuDevicePrimaryCtxRelease;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuDevicePrimaryCtxSetFlags_v11000)0) cuDevicePrimaryCtxSetFlags;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuDevicePrimaryCtxReset_v11000)0) cuDevicePrimaryCtxReset;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuCtxCreate_v3020)0) cuCtxCreate;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuCtxDestroy_v4000)0) cuCtxDestroy;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuCtxPushCurrent_v4000)0) cuCtxPushCurrent;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuCtxPopCurrent_v4000)0) cuCtxPopCurrent;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuMemHostRegister_v6050)0) cuMemHostRegister;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuStreamDestroy_v4000)0) cuStreamDestroy;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuEventDestroy_v4000)0) cuEventDestroy;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuLinkCreate_v6050)0) cuLinkCreate;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuLinkAddData_v6050)0) cuLinkAddData;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuLinkAddFile_v6050)0) cuLinkAddFile;
extern SIMGPU_EXPORT __typeof__(*(PFN_cuIpcOpenMemHandle_v11000)0) cuIpcOpenMemHandle;

#endif
