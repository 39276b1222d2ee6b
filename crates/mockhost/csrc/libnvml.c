/*
 * Fake libnvidia-ml.so.1: the NVML subset used by nvidia-smi -L, device
 * plugins and the NVIDIA toolkit's discovery code.  Devices are the
 * /dev/nvidiaN nodes that answer ENXIO, indexed in order of minor, under the
 * root the library sits in (see find_root).  MIG devices come from the
 * host's layout in the config block ("mig=<minor>:<name>@<gi>.<ci>,.../...", one item
 * per compute instance; a "+gfx" name is a GPU instance of a graphics profile);
 * like the real driver, a process sees a MIG device only when it can open
 * the /dev/nvidia-caps nodes its capability files name.
 */
#define _GNU_SOURCE
#include "mock_common.h"
#include "nvml_mini.h"

#include <link.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

GM_DEFINE_CONFIG_BLOCK

#define EXPORT __attribute__((visibility("default")))
#define MAX_MIG_PER_GPU 7

struct nvmlDevice_st {
    unsigned index;
    unsigned minor;
    char uuid[41];
    char bus[16];
    int is_mig;
    unsigned mig_mode;
    unsigned gi, ci;
    char profile[64];
    struct nvmlDevice_st *parent;
    struct nvmlDevice_st *migs[MAX_MIG_PER_GPU];
    unsigned mig_count;
};

/* A GPU instance: what nvmlDeviceGetGpuInstanceById hands out. */
struct nvmlGpuInstance_st {
    struct nvmlDevice_st *parent;
    unsigned id;
    unsigned profile; /* NVML_GPU_INSTANCE_PROFILE_* index */
    unsigned slices;
};

static struct nvmlDevice_st g_devices[256];
static struct nvmlDevice_st g_migs[256 * MAX_MIG_PER_GPU];
static struct nvmlGpuInstance_st g_gis[256 * MAX_MIG_PER_GPU];
static unsigned g_count, g_mig_total, g_gi_total;
/* WSL2: the GPU is reached through /dev/dxg; NVML there has no minor numbers. */
static int g_wsl;
static int g_refcount;
static char g_root[PATH_MAX];

struct find_self {
    uintptr_t addr;
    char path[PATH_MAX];
};

static int find_self_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct find_self *f = data;
    int i;
    (void)size;
    for (i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && f->addr >= start && f->addr < start + ph->p_memsz) {
            snprintf(f->path, sizeof f->path, "%s", info->dlpi_name ? info->dlpi_name : "");
            return 1;
        }
    }
    return 0;
}

static int is_char_node(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/*
 * The root whose dev/ and proc/ this library reads: the nearest folder above
 * the library holding dev/nvidiactl (dev/dxg on WSL2), so the copy in a mock
 * host directory talks to that host's nodes, and the copy in a container to "/".
 */
static void find_root(void)
{
    struct find_self f;
    char real[PATH_MAX], probe[PATH_MAX + 32];
    char *slash;

    g_root[0] = '\0';
    memset(&f, 0, sizeof f);
    f.addr = (uintptr_t)&find_root;
    if (!dl_iterate_phdr(find_self_cb, &f) || !f.path[0] || !realpath(f.path, real))
        return;
    while ((slash = strrchr(real, '/')) != NULL) {
        *slash = '\0';
        if (!real[0])
            return;
        snprintf(probe, sizeof probe, "%s/dev/nvidiactl", real);
        if (!is_char_node(probe))
            snprintf(probe, sizeof probe, "%s/dev/dxg", real);
        if (is_char_node(probe)) {
            snprintf(g_root, sizeof g_root, "%s", real);
            return;
        }
    }
}

/* DeviceFileMinor of a capability file under the root's proc, or -1. */
static long cap_minor(const char *rel)
{
    char path[PATH_MAX + 128], buf[256];
    const char *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof path, "%s/proc/driver/nvidia/capabilities/%s", g_root, rel);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    p = strstr(buf, "DeviceFileMinor:");
    if (!p)
        return -1;
    return strtol(p + 16, NULL, 10);
}

/*
 * The capability file's node answers like a present device.  A container's
 * procfs on this machine has no NVIDIA files (the real kernel's would show
 * every capability file), so a file that cannot be read stands for the
 * driver's fixed table: `table_minor`, what mig-minors lists for it.
 */
static int cap_usable(const char *rel, long table_minor)
{
    char path[PATH_MAX + 64];
    long minor = cap_minor(rel);
    int fd;
    if (minor < 0)
        minor = table_minor;
    snprintf(path, sizeof path, "%s/dev/nvidia-caps/nvidia-cap%ld", g_root, minor);
    /* Capability nodes are 0444: NVML opens them read-only. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return errno == ENXIO;
}

/* The minor /proc/driver/nvidia-caps/mig-minors gives gpu<m>/gi<g>/access. */
static long table_gi_minor(unsigned gpu_minor, unsigned gi)
{
    return 3 + (long)gpu_minor * 15 * 9 + (long)gi * 9;
}

static struct nvmlDevice_st *gpu_by_minor(unsigned minor)
{
    unsigned i;
    for (i = 0; i < g_count; i++)
        if (g_devices[i].minor == minor)
            return &g_devices[i];
    return NULL;
}

/* Slices of a MIG device name "[<c>c.]<g>g.<m>gb[+gfx]": its GPU instance's <g>. */
static unsigned name_gi_slices(const char *name)
{
    const char *g = strstr(name, "c.");
    return (unsigned)strtoul(g ? g + 2 : name, NULL, 10);
}

/* The GPU instance profile index of `slices` slices, with or without graphics; ~0u if none. */
static unsigned profile_index(unsigned slices, int gfx)
{
    switch (slices) {
    case 1: return gfx ? NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX : NVML_GPU_INSTANCE_PROFILE_1_SLICE;
    case 2: return gfx ? NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX : NVML_GPU_INSTANCE_PROFILE_2_SLICE;
    case 3: return gfx ? ~0u : NVML_GPU_INSTANCE_PROFILE_3_SLICE;
    case 4: return gfx ? NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX : NVML_GPU_INSTANCE_PROFILE_4_SLICE;
    case 7: return gfx ? ~0u : NVML_GPU_INSTANCE_PROFILE_7_SLICE;
    }
    return ~0u;
}

/* GPU `gpu`'s instance `gi`, made on first use. */
static struct nvmlGpuInstance_st *gpu_instance(struct nvmlDevice_st *gpu, unsigned gi,
                                               unsigned slices, int gfx)
{
    unsigned i;
    for (i = 0; i < g_gi_total; i++)
        if (g_gis[i].parent == gpu && g_gis[i].id == gi)
            return &g_gis[i];
    if (g_gi_total >= sizeof g_gis / sizeof g_gis[0] || profile_index(slices, gfx) == ~0u)
        return NULL;
    g_gis[g_gi_total].parent = gpu;
    g_gis[g_gi_total].id = gi;
    g_gis[g_gi_total].profile = profile_index(slices, gfx);
    g_gis[g_gi_total].slices = slices;
    return &g_gis[g_gi_total++];
}

/* One "<name>@<gi>.<ci>" entry of GPU `gpu`'s layout. */
static void add_mig(struct nvmlDevice_st *gpu, const char *seed, const char *entry, size_t len)
{
    char item[64], rel[96];
    struct nvmlDevice_st *m;
    char *at, *dot;
    unsigned gi, ci;
    int gfx;

    if (len == 0 || len >= sizeof item || gpu->mig_count >= MAX_MIG_PER_GPU ||
        g_mig_total >= sizeof g_migs / sizeof g_migs[0])
        return;
    memcpy(item, entry, len);
    item[len] = '\0';
    at = strchr(item, '@');
    if (!at)
        return;
    *at = '\0';
    dot = strchr(at + 1, '.');
    if (!dot)
        return;
    gi = (unsigned)strtoul(at + 1, NULL, 10);
    ci = (unsigned)strtoul(dot + 1, NULL, 10);
    if (gi > 14 || ci > 7)
        return;
    gfx = strstr(item, "+gfx") != NULL;
    snprintf(rel, sizeof rel, "gpu%u/mig/gi%u/access", gpu->minor, gi);
    if (!cap_usable(rel, table_gi_minor(gpu->minor, gi)))
        return;
    snprintf(rel, sizeof rel, "gpu%u/mig/gi%u/ci%u/access", gpu->minor, gi, ci);
    if (!cap_usable(rel, table_gi_minor(gpu->minor, gi) + 1 + ci))
        return;
    if (!gpu_instance(gpu, gi, name_gi_slices(item), gfx))
        return;
    m = &g_migs[g_mig_total++];
    memset(m, 0, sizeof *m);
    m->is_mig = 1;
    m->index = gpu->mig_count;
    m->minor = gpu->minor;
    m->gi = gi;
    m->ci = ci;
    m->parent = gpu;
    snprintf(m->profile, sizeof m->profile, "%s", item);
    gm_mig_uuid(seed, gpu->minor, gi, ci, m->uuid);
    gpu->migs[gpu->mig_count++] = m;
}

/* Parse "<minor>:<n>@<gi>.<ci>,<n>@<gi>.<ci>/<minor>:..." into the GPUs' MIG modes and devices. */
static void load_mig_layout(const char *seed)
{
    char layout[GM_CONFIG_SIZE];
    const char *p;

    if (!gm_config_get(gpuctk_mock_config, "mig", "", layout, sizeof layout))
        return;
    for (p = layout; *p;) {
        const char *end = strchr(p, '/');
        const char *colon = strchr(p, ':');
        size_t glen = end ? (size_t)(end - p) : strlen(p);
        if (colon && colon < p + glen) {
            struct nvmlDevice_st *gpu = gpu_by_minor((unsigned)strtoul(p, NULL, 10));
            const char *q = colon + 1;
            if (gpu) {
                gpu->mig_mode = 1;
                while (q < p + glen) {
                    const char *comma = memchr(q, ',', (size_t)(p + glen - q));
                    size_t ilen = comma ? (size_t)(comma - q) : (size_t)(p + glen - q);
                    add_mig(gpu, seed, q, ilen);
                    q += ilen + 1;
                }
            }
        }
        if (!end)
            break;
        p = end + 1;
    }
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    struct gm_scan scan;
    char seed[GM_CONFIG_SIZE];
    unsigned i;

    if (g_refcount > 0) {
        g_refcount++;
        return NVML_SUCCESS;
    }
    find_root();
    gm_scan_devices_in(&scan, g_root);
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
    memset(g_devices, 0, sizeof g_devices);
    for (i = 0; i < scan.count; i++) {
        g_devices[i].index = i;
        g_devices[i].minor = scan.minors[i];
        gm_gpu_uuid(seed, scan.minors[i], g_devices[i].uuid);
        gm_bus_id(scan.minors[i], g_devices[i].bus, sizeof g_devices[i].bus);
    }
    g_count = scan.count;
    g_wsl = scan.dxg;
    g_mig_total = 0;
    g_gi_total = 0;
    load_mig_layout(seed);
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

static int valid_mig(nvmlDevice_t d)
{
    return d >= g_migs && d < g_migs + g_mig_total;
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
    /* A MIG device's UUID gives its handle too, as NVML's does. */
    for (i = 0; i < g_mig_total; i++) {
        if (strcmp(uuid, g_migs[i].uuid) == 0) {
            *device = &g_migs[i];
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

#define CHECK_ANY(d)                                                           \
    do {                                                                       \
        if (g_refcount == 0)                                                   \
            return NVML_ERROR_UNINITIALIZED;                                   \
        if (!valid_device(d) && !valid_mig(d))                                 \
            return NVML_ERROR_INVALID_ARGUMENT;                                \
    } while (0)

#define CHECK_MIG(d)                                                           \
    do {                                                                       \
        if (g_refcount == 0)                                                   \
            return NVML_ERROR_UNINITIALIZED;                                   \
        if (valid_device(d))                                                   \
            return NVML_ERROR_NOT_SUPPORTED;                                   \
        if (!valid_mig(d))                                                     \
            return NVML_ERROR_INVALID_ARGUMENT;                                \
    } while (0)

/* A MIG device's name is its parent's with " MIG <profile>" appended, as NVML gives it. */
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    char buf[GM_CONFIG_SIZE + 64];
    size_t n;
    CHECK_ANY(device);
    gm_config_get(gpuctk_mock_config, "model", "unknown", buf, GM_CONFIG_SIZE);
    if (device->is_mig) {
        n = strlen(buf);
        snprintf(buf + n, sizeof buf - n, " MIG %s", device->profile);
    }
    return copy_out(buf, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK_ANY(device);
    return copy_out(device->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    CHECK_DEVICE(device);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* As WSL2's NVML answers ("Not Supported"): there is no /dev/nvidia<minor>. */
    if (g_wsl)
        return NVML_ERROR_NOT_SUPPORTED;
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
    } else if (strstr(model, "RTX 40") || strstr(model, "L40") || strstr(model, "L4")) {
        *major = 8;
        *minor = 9;
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
    *current = device->mig_mode; /* NVML_DEVICE_MIG_DISABLE / _ENABLE */
    *pending = device->mig_mode;
    return NVML_SUCCESS;
}

/* Every GPU model the mock knows is MIG-capable with seven slices. */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    CHECK_DEVICE(device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = MAX_MIG_PER_GPU;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig)
{
    CHECK_DEVICE(device);
    if (!mig || index >= MAX_MIG_PER_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= device->mig_count)
        return NVML_ERROR_NOT_FOUND;
    *mig = device->migs[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMig)
{
    CHECK_ANY(device);
    if (!isMig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMig = (unsigned)device->is_mig;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig,
                                                                 nvmlDevice_t *device)
{
    CHECK_MIG(mig);
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = mig->parent;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK_MIG(device);
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = device->gi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK_MIG(device);
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = device->ci;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *gpuInstance)
{
    unsigned i;
    CHECK_DEVICE(device);
    if (!gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    for (i = 0; i < g_gi_total; i++) {
        if (g_gis[i].parent == device && g_gis[i].id == id) {
            *gpuInstance = &g_gis[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/*
 * Profile ids as an A100/H100 numbers its profiles (1g 19, 2g 14, 3g 9, 4g 5, 7g 0) and an
 * RTX PRO 6000 Blackwell its 1g+gfx (47); the 2g+gfx and 4g+gfx ids are the mock's own.
 */
static unsigned profile_id(unsigned index)
{
    switch (index) {
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE: return 19;
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE: return 14;
    case NVML_GPU_INSTANCE_PROFILE_3_SLICE: return 9;
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE: return 5;
    case NVML_GPU_INSTANCE_PROFILE_7_SLICE: return 0;
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: return 47;
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: return 48;
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: return 49;
    }
    return ~0u;
}

static unsigned profile_slices(unsigned index)
{
    switch (index) {
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE:
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: return 1;
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: return 2;
    case NVML_GPU_INSTANCE_PROFILE_3_SLICE: return 3;
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE:
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: return 4;
    case NVML_GPU_INSTANCE_PROFILE_7_SLICE: return 7;
    }
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                        nvmlGpuInstanceProfileInfo_t *info)
{
    unsigned slices;
    CHECK_DEVICE(device);
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    slices = profile_slices(profile);
    if (!slices)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = profile_id(profile);
    info->isP2pSupported = 0;
    info->sliceCount = slices;
    info->instanceCount = slices == 3 ? 2 : 7 / slices;
    info->multiprocessorCount = 14 * slices;
    info->copyEngineCount = slices;
    info->decoderCount = slices;
    info->encoderCount = profile >= NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX ? 1 : 0;
    info->jpegCount = slices == 7 ? 1 : 0;
    info->ofaCount = slices == 7 ? 1 : 0;
    info->memorySizeMB = 9856ULL * slices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!info || gpuInstance < g_gis || gpuInstance >= g_gis + g_gi_total)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->device = gpuInstance->parent;
    info->id = gpuInstance->id;
    info->profileId = profile_id(gpuInstance->profile);
    info->placement.start = 0;
    info->placement.size = gpuInstance->slices;
    return NVML_SUCCESS;
}

/* nvmlBrandType_t: GeForce 5, Quadro 1, Tesla 2, NVIDIA RTX 13, NVIDIA 14 (data-centre parts). */
EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int *type)
{
    char model[GM_CONFIG_SIZE];
    CHECK_DEVICE(device);
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    gm_config_get(gpuctk_mock_config, "model", "unknown", model, sizeof model);
    if (strstr(model, "GeForce"))
        *type = 5;
    else if (strstr(model, "Quadro"))
        *type = 1;
    else if (strstr(model, "Tesla"))
        *type = 2;
    else if (strstr(model, "RTX"))
        *type = 13;
    else
        *type = 14;
    return NVML_SUCCESS;
}

/* nvmlDeviceArchitecture_t from the compute capability: 7 Ampere, 8 Ada, 9 Hopper. */
EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    int major = 0, minor = 0;
    nvmlReturn_t rc;
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = nvmlDeviceGetCudaComputeCapability(device, &major, &minor);
    if (rc != NVML_SUCCESS)
        return rc;
    *arch = major >= 9 ? 9 : (minor >= 9 ? 8 : 7);
    return NVML_SUCCESS;
}
