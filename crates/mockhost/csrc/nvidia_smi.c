/*
 * Fake nvidia-smi, dynamically linked against libnvidia-ml.so.1 exactly
 * like the real one, so it only works when the loader can find the
 * (fake) NVML inside the container.
 */
#include "mock_common.h"
#include "nvml_mini.h"

#include <stdlib.h>

GM_DEFINE_CONFIG_BLOCK

/*
 * nvidia-smi(1) documents its exit codes; NVML errors it knows map to
 * themselves, everything else is 255 ("other error").
 */
static int exit_code(nvmlReturn_t rc)
{
    switch (rc) {
    case NVML_ERROR_INVALID_ARGUMENT:
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_NO_PERMISSION:
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_INSUFFICIENT_POWER:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_TIMEOUT:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_CORRUPTED_INFOROM:
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return (int)rc;
    default:
        return 255;
    }
}

static int fail(nvmlReturn_t rc)
{
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED)
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
               "driver. Make sure that the latest NVIDIA driver is installed and running.\n\n");
    else
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(rc));
    return exit_code(rc);
}

struct gpu {
    char name[96];
    char uuid[96];
    nvmlPciInfo_t pci;
    unsigned minor;
    unsigned mig_mode;
};

static nvmlReturn_t get_gpu(unsigned i, struct gpu *g)
{
    nvmlDevice_t d;
    nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(i, &d);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetName(d, g->name, sizeof g->name);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetUUID(d, g->uuid, sizeof g->uuid);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetPciInfo_v3(d, &g->pci);
    if (rc == NVML_SUCCESS) {
        rc = nvmlDeviceGetMinorNumber(d, &g->minor);
        /* WSL2's NVML has no minors; nvidia-smi shows N/A there. */
        if (rc == NVML_ERROR_NOT_SUPPORTED) {
            g->minor = 0;
            rc = NVML_SUCCESS;
        }
    }
    if (rc == NVML_SUCCESS) {
        unsigned pending;
        rc = nvmlDeviceGetMigMode(d, &g->mig_mode, &pending);
    }
    return rc;
}

/* The "  MIG <profile>  Device  N: (UUID: MIG-...)" lines -L prints under a GPU in MIG mode. */
static nvmlReturn_t list_migs(unsigned i)
{
    nvmlDevice_t d, m;
    unsigned max = 0, n, shown = 0;
    char name[160], uuid[96];
    const char *profile;
    nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(i, &d);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetMaxMigDeviceCount(d, &max);
    for (n = 0; rc == NVML_SUCCESS && n < max; n++) {
        rc = nvmlDeviceGetMigDeviceHandleByIndex(d, n, &m);
        if (rc == NVML_ERROR_NOT_FOUND) {
            rc = NVML_SUCCESS;
            continue;
        }
        if (rc == NVML_SUCCESS)
            rc = nvmlDeviceGetName(m, name, sizeof name);
        if (rc == NVML_SUCCESS)
            rc = nvmlDeviceGetUUID(m, uuid, sizeof uuid);
        if (rc != NVML_SUCCESS)
            break;
        profile = strstr(name, " MIG ");
        profile = profile ? profile + 5 : name;
        printf("  MIG %-12sDevice %2u: (UUID: %s)\n", profile, shown++, uuid);
    }
    return rc;
}

static void print_csv_field(const char *field, unsigned i, const struct gpu *g,
                            const char *driver)
{
    if (strcmp(field, "index") == 0)
        printf("%u", i);
    else if (strcmp(field, "name") == 0 || strcmp(field, "gpu_name") == 0)
        printf("%s", g->name);
    else if (strcmp(field, "uuid") == 0 || strcmp(field, "gpu_uuid") == 0)
        printf("%s", g->uuid);
    else if (strcmp(field, "pci.bus_id") == 0 || strcmp(field, "gpu_bus_id") == 0)
        printf("%s", g->pci.busId);
    else if (strcmp(field, "driver_version") == 0)
        printf("%s", driver);
    else if (strcmp(field, "mig.mode.current") == 0)
        printf("%s", g->mig_mode ? "Enabled" : "Disabled");
    else
        printf("[N/A]");
}

/* --query-gpu=a,b --format=csv[,noheader] */
static int query(const char *fields, int header, unsigned count, const char *driver)
{
    char buf[512];
    unsigned i;
    char *save, *f;

    if (header) {
        snprintf(buf, sizeof buf, "%s", fields);
        for (f = strtok_r(buf, ",", &save); f; f = strtok_r(NULL, ",", &save))
            printf("%s%s", f == buf ? "" : ", ", f);
        printf("\n");
    }
    for (i = 0; i < count; i++) {
        struct gpu g;
        nvmlReturn_t rc = get_gpu(i, &g);
        if (rc != NVML_SUCCESS)
            return fail(rc);
        snprintf(buf, sizeof buf, "%s", fields);
        for (f = strtok_r(buf, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
            if (f != buf)
                printf(", ");
            print_csv_field(f, i, &g, driver);
        }
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv)
{
    char driver[80], own[64];
    int cuda = 0, list = 0, header = 1, i;
    const char *fields = NULL;
    unsigned count = 0, n;
    nvmlReturn_t rc;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-L") == 0 || strcmp(argv[i], "--list-gpus") == 0)
            list = 1;
        else if (strncmp(argv[i], "--query-gpu=", 12) == 0)
            fields = argv[i] + 12;
        else if (strncmp(argv[i], "--format=", 9) == 0)
            header = strstr(argv[i], "noheader") == NULL;
        else if (strcmp(argv[i], "--version") == 0) {
            gm_config_get(gpuctk_mock_config, "driver", "0.0", own, sizeof own);
            printf("NVIDIA-SMI version  : %s\nNVML version        : %s\n", own, own);
            return 0;
        } else {
            printf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
            return 2;
        }
    }

    rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS)
        return fail(rc);
    if ((rc = nvmlSystemGetDriverVersion(driver, sizeof driver)) != NVML_SUCCESS ||
        (rc = nvmlSystemGetCudaDriverVersion_v2(&cuda)) != NVML_SUCCESS ||
        (rc = nvmlDeviceGetCount_v2(&count)) != NVML_SUCCESS)
        return fail(rc);
    if (count == 0) {
        printf("No devices were found\n");
        return 6;
    }
    if (fields)
        return query(fields, header, count, driver);

    if (list) {
        for (n = 0; n < count; n++) {
            struct gpu g;
            if ((rc = get_gpu(n, &g)) != NVML_SUCCESS)
                return fail(rc);
            printf("GPU %u: %s (UUID: %s)\n", n, g.name, g.uuid);
            if (g.mig_mode && (rc = list_migs(n)) != NVML_SUCCESS)
                return fail(rc);
        }
        nvmlShutdown();
        return 0;
    }

    gm_config_get(gpuctk_mock_config, "driver", "0.0", own, sizeof own);
    printf("+-----------------------------------------------------------------------------------------+\n");
    printf("| NVIDIA-SMI %-21s Driver Version: %-14s CUDA Version: %d.%-8d|\n", own, driver,
           cuda / 1000, (cuda % 1000) / 10);
    printf("|-----------------------------------------+------------------------+----------------------+\n");
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("|=========================================+========================+======================|\n");
    for (n = 0; n < count; n++) {
        struct gpu g;
        if ((rc = get_gpu(n, &g)) != NVML_SUCCESS)
            return fail(rc);
        printf("| %3u  %-30.30s On  | %22s |                    0 |\n", n, g.name,
               g.pci.busId);
    }
    printf("+-----------------------------------------+------------------------+----------------------+\n");
    nvmlShutdown();
    return 0;
}
