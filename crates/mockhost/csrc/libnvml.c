/*
 * Fake libnvidia-ml.so.1: the NVML subset used by nvidia-smi -L, device
 * plugins and the NVIDIA toolkit's discovery code.  Devices are the
 * /dev/nvidiaN nodes that answer ENXIO, indexed in order of minor.
 */
#include "mock_common.h"
#include "nvml_mini.h"

#include <stdlib.h>

GM_DEFINE_CONFIG_BLOCK

#define EXPORT __attribute__((visibility("default")))

struct nvmlDevice_st {
    unsigned index;
    unsigned minor;
    char uuid[41];
    char bus[16];
};

static struct nvmlDevice_st g_devices[256];
static unsigned g_count;
static int g_refcount;

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    struct gm_scan scan;
    char seed[GM_CONFIG_SIZE];
    unsigned i;

    if (g_refcount > 0) {
        g_refcount++;
        return NVML_SUCCESS;
    }
    gm_scan_devices(&scan);
    /*
     * A node that exists but cannot be opened is what a container sees once
     * its devices cgroup lost the GPU rules; real NVML reports that as the
     * infamous "Unknown Error".
     */
    if (scan.denied)
        return NVML_ERROR_UNKNOWN;
    if (scan.ctl_err == ENOENT)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (scan.ctl_err != ENXIO)
        return NVML_ERROR_UNKNOWN;

    gm_config_get(gpuctk_mock_config, "seed", "gpuctk", seed, sizeof seed);
    for (i = 0; i < scan.count; i++) {
        g_devices[i].index = i;
        g_devices[i].minor = scan.minors[i];
        gm_gpu_uuid(seed, scan.minors[i], g_devices[i].uuid);
        gm_bus_id(scan.minors[i], g_devices[i].bus, sizeof g_devices[i].bus);
    }
    g_count = scan.count;
    g_refcount = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    g_refcount--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

static nvmlReturn_t copy_out(const char *value, char *out, unsigned int length)
{
    size_t len = strlen(value);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (length <= len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, len + 1);
    return NVML_SUCCESS;
}

static int valid_device(nvmlDevice_t d)
{
    return d >= g_devices && d < g_devices + g_count;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    char buf[64];
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    gm_config_get(gpuctk_mock_config, "driver", "0.0", buf, sizeof buf);
    return copy_out(buf, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    char buf[32];
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    gm_config_get(gpuctk_mock_config, "cuda", "0", buf, sizeof buf);
    *version = atoi(buf);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= g_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_devices[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    unsigned i;
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < g_count; i++) {
        if (strcmp(uuid, g_devices[i].uuid) == 0) {
            *device = &g_devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

#define CHECK_DEVICE(d)                                                        \
    do {                                                                       \
        if (g_refcount == 0)                                                   \
            return NVML_ERROR_UNINITIALIZED;                                   \
        if (!valid_device(d))                                                  \
            return NVML_ERROR_INVALID_ARGUMENT;                                \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    char buf[GM_CONFIG_SIZE];
    CHECK_DEVICE(device);
    gm_config_get(gpuctk_mock_config, "model", "unknown", buf, sizeof buf);
    return copy_out(buf, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK_DEVICE(device);
    return copy_out(device->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    CHECK_DEVICE(device);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = device->minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    CHECK_DEVICE(device);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

/* PCI device ids of the models we know; A100-SXM4-80GB otherwise. */
static unsigned pci_device_id(const char *model)
{
    if (strstr(model, "H200"))
        return 0x233510de;
    if (strstr(model, "H100"))
        return 0x233010de;
    if (strstr(model, "A100") && strstr(model, "40GB"))
        return 0x20b010de;
    return 0x20b210de;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    char model[GM_CONFIG_SIZE];
    unsigned bus;
    CHECK_DEVICE(device);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    bus = 0x17 + 3 * device->minor;
    gm_config_get(gpuctk_mock_config, "model", "unknown", model, sizeof model);
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = bus;
    pci->device = 0;
    pci->pciDeviceId = pci_device_id(model);
    pci->pciSubSystemId = 0x147e10de;
    /* NVML writes the 8-digit domain form; the legacy field the 4-digit one. */
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02x:00.0", bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02x:00.0", bus);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    char model[GM_CONFIG_SIZE];
    CHECK_DEVICE(device);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    gm_config_get(gpuctk_mock_config, "model", "unknown", model, sizeof model);
    if (strstr(model, "H100") || strstr(model, "H200") || strstr(model, "H800")) {
        *major = 9;
        *minor = 0;
    } else if (strstr(model, "A100") || strstr(model, "A30") || strstr(model, "A800")) {
        *major = 8;
        *minor = 0;
    } else {
        *major = 8;
        *minor = 6;
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    CHECK_DEVICE(device);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    *current = 0; /* NVML_DEVICE_MIG_DISABLE */
    *pending = 0;
    return NVML_SUCCESS;
}
