/*
 * Fake libcuda.so.1: just enough of the CUDA driver API for a container
 * to prove that the library was injected and which GPUs it can reach.
 */
#include "mock_common.h"

#include <stdlib.h>

GM_DEFINE_CONFIG_BLOCK

/*
 * The forward-compatibility note real libcuda.so files (575 and later) carry: an ELF note in
 * section .note.cuda.fwd_compatibility (SHT_NOTE, from its name), owned by "NVIDIA Corporation",
 * whose description is JSON. The description area is patched per host after compilation (the
 * marker replaced by the JSON, padded with spaces): must match NOTE_MARKER / NOTE_DESC_SIZE in
 * src/patch.rs.
 */
#define GM_NOTE_DESC_SIZE 256
struct gm_cuda_note {
    uint32_t namesz;
    uint32_t descsz;
    uint32_t type;
    char name[20]; /* "NVIDIA Corporation" and its NUL, padded to 4 */
    char desc[GM_NOTE_DESC_SIZE];
};
__attribute__((used, section(".note.cuda.fwd_compatibility"), aligned(4)))
static const struct gm_cuda_note gpuctk_cuda_note = {
    19, GM_NOTE_DESC_SIZE, 1, "NVIDIA Corporation", "GPUCTK_MOCK_NOTE_V1"};

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_OPERATING_SYSTEM 304
#define CUDA_ERROR_UNKNOWN 999

typedef int CUresult;
typedef int CUdevice;

static struct gm_scan g_scan;
static int g_initialized;

__attribute__((visibility("default"))) CUresult cuInit(unsigned int flags)
{
    (void)flags;
    gm_scan_devices(&g_scan);
    if (g_scan.denied)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (g_scan.ctl_err != ENXIO || g_scan.count == 0)
        return CUDA_ERROR_NO_DEVICE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int *version)
{
    char buf[32];
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    gm_config_get(gpuctk_mock_config, "cuda", "0", buf, sizeof buf);
    *version = atoi(buf);
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = (int)g_scan.count;
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || (unsigned)ordinal >= g_scan.count)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || (unsigned)dev >= g_scan.count)
        return CUDA_ERROR_INVALID_DEVICE;
    gm_config_get(gpuctk_mock_config, "model", "unknown", name, (size_t)len);
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuGetErrorString(CUresult error, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *str = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *str = "invalid argument"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *str = "initialization error"; break;
    case CUDA_ERROR_NO_DEVICE: *str = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *str = "invalid device ordinal"; break;
    case CUDA_ERROR_OPERATING_SYSTEM: *str = "OS call failed or operation not supported on this OS"; break;
    case CUDA_ERROR_UNKNOWN: *str = "unknown error"; break;
    default: *str = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
