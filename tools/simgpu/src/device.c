/* cuInit, configuration, devices and their attributes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simgpu-internal.h"
#include "simgpu-stub.h"

simgpu_config_t simgpu_config;

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;  /* atomic */

uint64_t simgpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

CUresult simgpu_not_supported(const char *name, int *noted)
{
    if (!__atomic_exchange_n(noted, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "simgpu[%d]: %s is not supported by simgpu (CUDA_ERROR_NOT_SUPPORTED)\n",
                (int)getpid(), name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

int simgpu_stub_answer(const char *name, int *noted)
{
    return (int)simgpu_not_supported(name, noted);
}

static long env_long(const char *name, long fallback, long min, long max)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return fallback;
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || *end || value < min || value > max) {
        fprintf(stderr, "simgpu[%d]: ignoring %s=%s (expected %ld..%ld)\n", (int)getpid(), name,
                text, min, max);
        return fallback;
    }
    return value;
}

static void config_read(void)
{
    simgpu_config_t *c = &simgpu_config;
    c->device_count = (int)env_long("SIMGPU_DEVICES", 1, 1, SIMGPU_MAX_DEVICES);
    c->memory_bytes = (uint64_t)env_long("SIMGPU_MEMORY_MB", 16384, 1, 1L << 24) << 20;
    c->process_slots = (uint32_t)env_long("SIMGPU_PROCESS_SLOTS", SIMGPU_DEFAULT_PROCESS_SLOTS,
                                          1, SIMGPU_MAX_PROCESS_SLOTS);
    c->speed = 1.0;
    const char *speed = getenv("SIMGPU_SPEED");
    if (speed && *speed) {
        char *end;
        double value = strtod(speed, &end);
        if (*end || !(value > 0.0) || value > 1e9)
            fprintf(stderr, "simgpu[%d]: ignoring SIMGPU_SPEED=%s (expected > 0)\n",
                    (int)getpid(), speed);
        else
            c->speed = value;
    }
    const char *name = getenv("SIMGPU_SHM_NAME");
    if (name && *name)
        snprintf(c->shm_name, sizeof(c->shm_name), "%s%s", name[0] == '/' ? "" : "/", name);
    else
        snprintf(c->shm_name, sizeof(c->shm_name), "/simgpu-%u", (unsigned)getuid());
}

void simgpu_config_load(void)
{
    pthread_once(&config_once, config_read);
}

CUresult simgpu_initialized(void)
{
    return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                           : CUDA_ERROR_NOT_INITIALIZED;
}

bool simgpu_device_valid(CUdevice device)
{
    return device >= 0 && device < simgpu_shm_device_count();
}

SIMGPU_API cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    simgpu_config_load();
    pthread_mutex_lock(&init_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!initialized) {
        rc = simgpu_shm_attach();
        if (rc == CUDA_SUCCESS)
            __atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

SIMGPU_API cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = SIMGPU_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGetCount(int *count)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = simgpu_shm_device_count();
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!simgpu_device_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* Common checks of the per-device queries. */
static CUresult device_check(CUdevice device, const void *out)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return simgpu_device_valid(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIMGPU_API cuDeviceGetName(char *name, int length, CUdevice device)
{
    CUresult rc = device_check(device, name);
    if (rc)
        return rc;
    if (length <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)length, "%s", SIMGPU_DEVICE_NAME);
    return CUDA_SUCCESS;
}

static void device_uuid(CUdevice device, CUuuid *uuid)
{
    static const char prefix[] = "salus-simgpu";
    memset(uuid, 0, sizeof(*uuid));
    memcpy(uuid->bytes, prefix, sizeof(prefix) - 1);
    uuid->bytes[15] = (char)device;
}

SIMGPU_API cuDeviceGetUuid(CUuuid *uuid, CUdevice device)
{
    CUresult rc = device_check(device, uuid);
    if (!rc)
        device_uuid(device, uuid);
    return rc;
}

SIMGPU_API cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device)
{
    return cuDeviceGetUuid(uuid, device);
}

SIMGPU_API cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    CUresult rc = device_check(device, bytes);
    if (rc)
        return rc;
    uint64_t used, total;
    simgpu_mem_info(device, &used, &total);
    *bytes = (size_t)total;
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceComputeCapability(int *major, int *minor, CUdevice device)
{
    CUresult rc = device_check(device, major);
    if (rc)
        return rc;
    if (!minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = SIMGPU_CC_MAJOR;
    *minor = SIMGPU_CC_MINOR;
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
    CUresult rc = device_check(device, value);
    if (rc)
        return rc;
    return simgpu_device_attribute(attribute, device, value);
}

SIMGPU_API cuDeviceGetProperties(CUdevprop *prop, CUdevice device)
{
    CUresult rc = device_check(device, prop);
    if (rc)
        return rc;
    memset(prop, 0, sizeof(*prop));
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->sharedMemPerBlock = 49152;
    prop->totalConstantMemory = 65536;
    prop->SIMDWidth = 32;
    prop->memPitch = 2147483647;
    prop->regsPerBlock = 65536;
    prop->clockRate = 1410000;
    prop->textureAlign = 512;
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGetPCIBusId(char *bus_id, int length, CUdevice device)
{
    CUresult rc = device_check(device, bus_id);
    if (rc)
        return rc;
    if (length <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus_id, (size_t)length, "0000:%02x:00.0", 0x10 + device);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceGetByPCIBusId(CUdevice *device, const char *bus_id)
{
    CUresult rc = simgpu_initialized();
    if (rc)
        return rc;
    if (!device || !bus_id)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned domain, bus, slot, function;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4 || bus < 0x10 ||
        !simgpu_device_valid((CUdevice)(bus - 0x10)))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = (CUdevice)(bus - 0x10);
    return CUDA_SUCCESS;
}

SIMGPU_API cuDeviceCanAccessPeer(int *can_access, CUdevice device, CUdevice peer)
{
    CUresult rc = device_check(device, can_access);
    if (rc)
        return rc;
    if (!simgpu_device_valid(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    *can_access = device != peer;  /* all simulated devices share host memory */
    return CUDA_SUCCESS;
}
